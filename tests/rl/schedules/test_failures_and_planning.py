"""The planner inside the schedules (issue 7): layout: auto and node failures mid-run."""
from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.errors import RlsimError
from simulator.metrics import per_device_time

WORKLOAD = {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 32, "mini_batch_prompts": 32, "samples_per_prompt": 4}
TOPO = {"preset": "dgx-h100", "nodes": 4}
FAIL = ["schedule.failures=[{at_s: 150, fail: 'node:1'}]"]


@pytest.fixture(scope="module")
def base():
    return simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=4)


@pytest.fixture(scope="module")
def failed():
    return simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=4, overrides=FAIL)


# ---- layout: auto ------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ["colocated", "disaggregated"])
def test_auto_layout_comes_from_the_planner_with_its_cost(schedule):
    from simulator.autoplan import auto_layouts, planning_ranks
    from simulator.hardware.topology import load_topology
    from simulator.scenario import load_scenario

    wl = {**WORKLOAD, "train_layout": "auto", "rollout_layout": "auto"}
    topo = {"preset": "dgx-h100", "nodes": 2}
    r = simulator.simulate(workload=wl, topology=topo, schedule=schedule, iterations=1)
    plan = auto_layouts(load_scenario(None, workload=wl, topology=topo, schedule=schedule), load_topology(topo))
    s = r.summary
    # the summary reports the planner's choice, and the run used it
    assert s["auto_layout"]["train"]["layout"] == plan.layouts["train"]
    for key, value in plan.layouts["train"].items():
        assert s["layouts"]["train"][key] == value
    for key, value in plan.layouts["rollout"].items():
        assert s["layouts"]["rollout"][key] == value
    # the planning cost is the planner's modelled cost, counted as state plan at the start
    assert s["planning_s"] == pytest.approx(plan.planning_cost_s) and plan.planning_cost_s > 0
    tl = r.timeline
    planned = tl[tl.state == "plan"]
    assert (planned.start == 0).all() and np.allclose(planned.end, plan.planning_cost_s)
    assert planned.rank_count.sum() == s["devices"]
    assert s["bubbles_by_cause"]["planning"] > 0
    assert np.allclose(per_device_time(tl, s["devices"]), s["makespan_s"])
    rollout, train = planning_ranks(load_scenario(None, workload=wl, topology=topo, schedule=schedule), 16)
    assert s["auto_layout"]["train"]["devices"] == len(train)
    assert s["auto_layout"]["rollout"]["devices"] == len(rollout)


def test_auto_layout_is_deterministic():
    wl = {**WORKLOAD, "train_layout": "auto", "rollout_layout": "auto"}
    a = simulator.simulate(workload=wl, topology={"preset": "dgx-h100", "nodes": 2}, iterations=1)
    b = simulator.simulate(workload=wl, topology={"preset": "dgx-h100", "nodes": 2}, iterations=1)
    assert a.summary == b.summary
    assert a.timeline.equals(b.timeline)


# ---- failures ----------------------------------------------------------------------------------------
def test_failure_run_is_slower_and_conserves_device_time(base, failed):
    s = failed.summary
    assert s["makespan_s"] > base.summary["makespan_s"]
    assert np.allclose(per_device_time(failed.timeline, s["devices"]), s["makespan_s"])
    assert s["bubbles_by_cause"]["failure"] > 0


def test_lost_time_is_the_step_in_flight(base, failed):
    """Lost = from the start of the step in flight (end of the last completed step) to the failure,
    on every device of the pool; the failed node is `failed` from the failure to the end."""
    (f,) = failed.summary["failures"]
    ends = [it["end"] for it in base.record.iterations]
    k = int(np.searchsorted(ends, 150.0))          # the step in flight at 150 s
    step_start = ends[k - 1] if k else 0.0
    assert f["iteration"] == k
    assert f["lost_s"] == pytest.approx(150.0 - step_start)
    tl = failed.timeline
    lost = tl[tl.state == "lost"]
    assert ((lost.end - lost.start) * lost.rank_count).sum() == pytest.approx(f["lost_s"] * 32)
    assert f["failed_ranks"] == list(range(8, 16))
    gone = tl[tl.state == "failed"]
    assert sorted(int(x) for a, n in zip(gone.rank_start, gone.rank_count, strict=True) for x in range(a, a + n)) \
        == list(range(8, 16))
    assert np.allclose(gone.start, 150.0) and np.allclose(gone.end, failed.summary["makespan_s"])
    replan = tl[tl.state == "replan"]
    assert np.allclose(replan.end - replan.start, f["replan_s"]) and f["replan_s"] > 0
    restart = tl[tl.state == "restart"]
    assert np.allclose(restart.end - restart.start, 120.0)
    # after the failure the survivors (24 devices) run the remaining steps
    assert f["devices_after"] == 24
    # the summary's rollout layout is the one the run ended on (it said the instances before the failure)
    generating = tl[(tl.start >= f["at_s"] + f["replan_s"] + 120.0) & (tl.state == "generate")]
    assert failed.summary["layouts"]["rollout"]["instances"] == f["rollout_instances_after"] \
        == len(set(generating.rank_start)) < failed.summary["pools"]["actor"] // (f["devices_after"] // f["rollout_instances_after"])
    later = tl[(tl.start >= 150.0) & (tl.state.isin(["generate", "train"]))]
    assert not any(a < 16 and a + n > 8 for a, n in zip(later.rank_start, later.rank_count, strict=True))


def test_failure_neither_loses_nor_duplicates_samples(failed):
    s = failed.samples
    B = 32 * 4
    consumed = s[s.consumed_iteration >= 0]
    assert consumed.consumed_iteration.value_counts().sort_index().to_dict() == {k: B for k in range(4)}
    # each (round, group) sample position trained once: the re-run step regenerates the same prompts
    keys = consumed.groupby(["round", "group"]).size()
    assert (keys == 4).all()
    assert len(s) == len(consumed) + int(s.dropped.sum())
    assert [it["iteration"] for it in failed.record.iterations] == [0, 1, 2, 3]


def test_checkpoint_recovery_loses_back_to_the_checkpoint(base):
    over = FAIL + ["schedule.recovery.lose_to=checkpoint", "schedule.recovery.checkpoint_every_steps=2"]
    r = simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=4, overrides=over)
    (f,) = r.summary["failures"]
    ends = [it["end"] for it in base.record.iterations]
    assert f["iteration"] == 2 and f["lost_s"] == pytest.approx(150.0 - ends[1])
    over = FAIL + ["schedule.recovery.lose_to=checkpoint", "schedule.recovery.checkpoint_every_steps=4"]
    r = simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=4, overrides=over)
    (f,) = r.summary["failures"]
    assert f["iteration"] == 0 and f["lost_s"] == pytest.approx(150.0)
    assert r.samples[r.samples.consumed_iteration >= 0].consumed_iteration.value_counts().to_dict() == \
        {k: 128 for k in range(4)}


@pytest.mark.parametrize("schedule,extra", [("one-step-off", []), ("async", []),
                                            ("stalesync", ["schedule.placement=disaggregated"])])
def test_failures_on_other_schedules_are_a_clear_error(schedule, extra):
    with pytest.raises(RlsimError, match="schedule.failures"):
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule=schedule, iterations=2,
                           overrides=FAIL + extra)


# ---- failures in StaleSync (colocated placement) ---------------------------------------------------------
@pytest.fixture(scope="module")
def stale_base():
    return simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="stalesync", iterations=4)


@pytest.mark.parametrize("at_s", [30.0, 100.0, 250.0])
def test_stalesync_failure_loses_the_step_in_flight_and_keeps_every_invariant(stale_base, at_s):
    """A node lost mid-run under StaleSync: the step in flight (its tail included) is lost back to its
    start, the run re-plans and finishes on the survivors; device time still tiles the makespan, the
    same number of samples is trained per step as without the failure, none twice, and none staler
    than the bound."""
    r = simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="stalesync", iterations=4,
                           overrides=[f"schedule.failures=[{{at_s: {at_s}, fail: 'node:1'}}]"])
    s = r.summary
    (f,) = s["failures"]
    ends = [it["end"] for it in stale_base.record.iterations]
    k = int(np.searchsorted(ends, at_s))
    assert f["iteration"] == k and f["lost_s"] == pytest.approx(at_s - (ends[k - 1] if k else 0.0))
    assert f["devices_after"] == 24 and s["makespan_s"] > stale_base.summary["makespan_s"]
    assert np.allclose(per_device_time(r.timeline, s["devices"]), s["makespan_s"])
    trained = r.samples[r.samples.consumed_iteration >= 0]
    base = stale_base.samples
    assert trained.consumed_iteration.value_counts().to_dict() == \
        base[base.consumed_iteration >= 0].consumed_iteration.value_counts().to_dict()
    # a prompt's group is trained at most samples_per_prompt times: a lost step's samples are not kept
    assert trained.groupby(["round", "group"]).size().max() <= WORKLOAD["samples_per_prompt"]
    assert trained.staleness.max() <= s["staleness"]["bound"]
    assert len(r.samples) == len(trained) + int(r.samples.dropped.sum())
    assert [it["iteration"] for it in r.record.iterations] == [0, 1, 2, 3]
    # the re-run step trains a whole batch itself (the lost step's consumption was rolled back)
    assert [it["samples"] for it in r.record.iterations] == [it["samples"] for it in stale_base.record.iterations]
    tail = r.timeline[(r.timeline.start >= at_s) & (r.timeline.label == "tail")]
    assert len(tail) and not any(a < 16 and a + n > 8 for a, n in zip(tail.rank_start, tail.rank_count, strict=True))


def test_multiclock_split_partitions_the_ranges_in_order():
    from simulator.rl.timeline import GroupClock, MultiClock, Timeline

    tl = Timeline()
    clock = MultiClock([GroupClock(tl, "actor", 0, 8, 5.0), GroupClock(tl, "actor", 16, 16, 5.0)])
    a, b = clock.split([12, 12])
    assert isinstance(a, MultiClock) and [(c.rank_start, c.rank_count) for c in a.clocks] == [(0, 8), (16, 4)]
    assert isinstance(b, GroupClock) and (b.rank_start, b.rank_count, b.cursor) == (20, 12, 5.0)


def test_failure_outside_the_pool_is_an_error():
    with pytest.raises(RlsimError, match="node"):
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=2,
                           overrides=["schedule.failures=[{at_s: 10, fail: 'node:9'}]"])


@pytest.mark.parametrize("spec, why", [("bogus", "not a comma list"), ("node:99", "node 99 does not exist")])
def test_a_bad_failure_spec_names_its_entry(spec, why):
    """The group parser's own key is `rlsim comm --group`; from a scenario the error names the entry
    as written (index 1: the entries are not in time order)."""
    with pytest.raises(RlsimError, match=why) as err:
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=2,
                           overrides=[f"schedule.failures=[{{at_s: 300, fail: 'node:1'}}, {{at_s: 10, fail: '{spec}'}}]"])
    assert err.value.field == "schedule.failures.1.fail" and "--group" not in str(err.value)
    assert "node:I" in err.value.fix


def test_a_failure_leaving_no_layout_names_its_entry():
    with pytest.raises(RlsimError, match="takes all 24 devices of the pool: none survives") as err:
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=2,
                           overrides=["schedule.failures=[{at_s: 10, fail: all}, {at_s: 5, fail: 'node:1'}]"])
    # the entry as written (0), not its place in time order (second)
    assert err.value.field == "schedule.failures.0.fail" and err.value.source


# ---- re-plan neighbourhood: TP / CP / EP kept, recompute free (docs/planner.md) ------------------------
def test_replan_keeps_tp_cp_ep_and_frees_recompute_when_faster():
    """The failure scenario's re-plan moves recompute full -> none: allowed (no process group, no
    checkpoint change) and chosen because it is faster on the survivors than keeping full."""
    from simulator.autoplan import train_batch
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner import TrainChoice, replan_on_failure
    from simulator.planner.search import neighbourhood
    from simulator.scenario import load_scenario

    sc = load_scenario(None, workload=WORKLOAD, topology=TOPO, schedule="colocated")
    topo, model = load_topology(TOPO), load_model(sc.workload.model)
    batch, row = train_batch(sc)
    cur = TrainChoice(tp=2, pp=1, vpp=1, dp=16, ep=1, cp=1, zero=1, recompute="full", micro_batch=1)
    free = replan_on_failure(model, topo, batch, row, failed=[8], ranks=range(32), current=cur)
    fixed = replan_on_failure(model, topo, batch, row, failed=[8], ranks=range(32), current=cur,
                              space=neighbourhood(cur, model).model_copy(update={"recompute": ["full"]}))
    best = free.plan.best
    assert (best.choice.tp, best.choice.cp, best.choice.ep) == (2, 1, 1)
    assert best.choice.recompute == "none"
    assert best.evaluation.step_time_s < fixed.plan.best.evaluation.step_time_s


def test_colocated_failure_replan_matches_the_documented_neighbourhood(failed):
    (f,) = failed.summary["failures"]
    lay = f["train_layout_after"]
    assert (lay["tp"], lay["cp"], lay["ep"]) == (2, 1, 1)
    assert lay["recompute"] in ("none", "selective", "full")


# ---- disaggregated failures ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dis_base():
    return simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="disaggregated", iterations=4)


def _dis(at_s: float, spec: str, *extra: str):
    return simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="disaggregated", iterations=4,
                              overrides=[f"schedule.failures=[{{at_s: {at_s}, fail: '{spec}'}}]", *extra])


def _check_invariants(r):
    s = r.summary
    assert np.allclose(per_device_time(r.timeline, s["devices"]), s["makespan_s"])
    samples = r.samples
    consumed = samples[samples.consumed_iteration >= 0]
    assert consumed.consumed_iteration.value_counts().sort_index().to_dict() == {k: 128 for k in range(4)}
    assert (consumed.groupby(["round", "group"]).size() == 4).all()
    assert len(samples) == len(consumed) + int(samples.dropped.sum())
    assert s["bubbles_by_cause"]["failure"] > 0


def test_a_failure_that_takes_the_whole_rollout_pool_says_so():
    # 4 nodes split 16 / 16: nodes 0 and 1 are the rollout pool; losing both leaves no instance, and
    # the error names the failure and why whole nodes went (not the planner's "0 devices" search)
    with pytest.raises(RlsimError) as err:
        _dis(60, "nodes:0-1")
    assert err.value.field == "schedule.failures"
    assert "no whole rollout instance" in str(err.value) and "nodes:0-1" in str(err.value)
    assert "drop_whole_node" in err.value.fix


def test_disaggregated_rollout_failure_loses_the_round_in_flight(dis_base):
    """Pools 16/16 (rollout ranks 0-15): node 1 fails while round 1 is generating; the round is lost
    back to its start (the end of iteration 0) on the rollout pool only, then re-planned on 8 devices."""
    ends = [it["end"] for it in dis_base.record.iterations]
    t_f = ends[0] + 0.5 * (dis_base.record.iterations[1]["start"] - ends[0])
    r = _dis(t_f, "node:1")
    _check_invariants(r)
    (f,) = r.summary["failures"]
    assert f["pools"] == ["rollout"] and f["iteration"] == 1 and f["devices_after"] == 24
    assert f["lost_s"] == pytest.approx(t_f - ends[0])
    tl = r.timeline
    lost = tl[tl.state == "lost"]
    assert set(lost["pool"]) == {"rollout"}
    assert ((lost.end - lost.start) * lost.rank_count).sum() == pytest.approx(f["lost_s"] * 16)
    gone = tl[tl.state == "failed"]
    assert sorted(x for a, n in zip(gone.rank_start, gone.rank_count, strict=True) for x in range(a, a + n)) \
        == list(range(8, 16))
    assert np.allclose(gone.start, t_f)
    replan = tl[(tl.state == "replan")]
    assert set(replan["pool"]) == {"rollout"} and np.allclose(replan.end - replan.start, f["replan_s"])
    assert f["replan_s"] > 0
    assert r.summary["makespan_s"] > dis_base.summary["makespan_s"]


def test_disaggregated_training_failure_loses_the_step_in_flight(dis_base):
    it1 = dis_base.record.iterations[1]
    t_f = it1["start"] + 0.5 * (it1["end"] - it1["start"])      # training step 1 in flight
    r = _dis(t_f, "node:3")
    _check_invariants(r)
    (f,) = r.summary["failures"]
    assert f["pools"] == ["train"] and f["iteration"] == 1
    assert f["lost_s"] == pytest.approx(t_f - it1["start"])
    tl = r.timeline
    lost = tl[tl.state == "lost"]
    assert set(lost["pool"]) == {"train"}
    assert ((lost.end - lost.start) * lost.rank_count).sum() == pytest.approx(f["lost_s"] * 16)
    assert np.allclose(tl[tl.state == "restart"].end - tl[tl.state == "restart"].start, 120.0)
    later = tl[(tl.start >= t_f) & tl.state.isin(["train", "forward"])]
    assert not any(a < 32 and a + n > 24 for a, n in zip(later.rank_start, later.rank_count, strict=True))


def test_disaggregated_training_failure_with_checkpoint_loses_both_pools_since_it(dis_base):
    its = dis_base.record.iterations
    t_f = its[1]["start"] + 0.5 * (its[1]["end"] - its[1]["start"])
    r = _dis(t_f, "node:3", "schedule.recovery.lose_to=checkpoint", "schedule.recovery.checkpoint_every_steps=2")
    _check_invariants(r)
    (f,) = r.summary["failures"]
    assert f["iteration"] == 0 and f["lost_s"] == pytest.approx(t_f - its[0]["start"])
    lost = r.timeline[r.timeline.state == "lost"]
    assert set(lost["pool"]) == {"train", "rollout"}      # round 1 was generated with the lost weights


def test_disaggregated_failure_is_deterministic():
    a, b = _dis(100.0, "node:1"), _dis(100.0, "node:1")
    assert a.summary == b.summary and a.timeline.equals(b.timeline)


@pytest.mark.parametrize("schedule", ["colocated", "stalesync"])
def test_seed_scenario_failure_replans_to_a_layout_the_colocated_pool_can_run(schedule):
    """The seed (Pangu 718B, 61 layers, PP 6 on CloudMatrix384) loses a node: the re-plan keeps the
    running layout's uneven pipeline split available and only accepts layouts whose rollout phase
    still fits beside the resident training state and whose long-tail micro-batches fit in training
    (the planner alone judges typical rows; before, it picked TP8 PP1 and the run failed on memory)."""
    from simulator.llm.architecture import load_model
    from simulator.llm.memory import memory_per_device
    from simulator.llm.train_layout import TrainLayout

    r = simulator.simulate(overrides=[f"schedule.kind={schedule}", "schedule.failures=[{at_s: 600, fail: 'node:3'}]"],
                           iterations=3)
    s = r.summary
    (f,) = s["failures"]
    after = TrainLayout.from_mapping(f["train_layout_after"])
    assert after.devices == f["devices_after"] <= 376
    if schedule == "colocated":
        # the experts stay sharded; the widened search now leaves TP8 (etp = tp: each MoE layer gathers its
        # k routed copies over expert TP) for TP1 CP2 EP8 etp 1 ZeRO-3 (TP8 EP4 before that cost was priced)
        assert after.ep >= 4
    else:   # StaleSync still trains beside its tail: no TP8 layout of the neighbourhood fits there (a capacity
        # trial: TP8 PP11 groups of 352 ran the rest synchronous, ~620 s steps against ~500 s now)
        from simulator.autoplan import consolidated_train_devices
        from simulator.scenario import load_scenario
        assert after.pool_unit <= consolidated_train_devices(load_scenario(), f["devices_after"])
        assert "stalesync_no_room" not in s
    weights = memory_per_device(load_model("pangu-ultra-moe"), after, 1.0, 128e9).weights_bytes
    assert weights + 0.7 * 128e9 <= 128e9      # the rollout phase fits beside the resident weights
    assert np.allclose(per_device_time(r.timeline, s["devices"]), s["makespan_s"])
    assert s["layouts"]["train"] == f["train_layout_after"]


def test_a_failure_of_devices_already_down_is_an_error():
    # the second entry was handled as a second failure (a second restart and re-plan of dead devices)
    import simulator

    with pytest.raises(RlsimError, match="already took out") as err:
        simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, iterations=2,
                           schedule="colocated", overrides=[
                               "schedule.failures=[{at_s: 60, fail: 'node:1'}, {at_s: 90, fail: 'devices:8-9'}]"])
    assert err.value.field == "schedule.failures.1.fail"


def test_a_re_plan_after_a_trained_step_judges_candidates_of_another_pipeline_depth():
    """TP2 PP3 on 3 DGX H100 nodes loses a node after a step trained: the 16 survivors take no
    PP3 layout, and the costs' check placed every candidate with the running layout (16 devices
    are not a multiple of tp x cp x pp = 6), refusing all: "no layout fits on the 16 surviving
    devices". The neighbourhood alone (recovery.widen false) now finds TP2 on all 16."""
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 3},
                           schedule="colocated", iterations=5,
                           overrides=["workload.train_layout={tp: 2, pp: 3, zero: 1, recompute: full, micro_batch: 1}",
                                      "workload.prompts_per_step=64", "workload.mini_batch_prompts=64",
                                      "schedule.failures=[{at_s: 150, fail: 'node:1'}]", "schedule.recovery.widen=false"])
    (f,) = r.summary["failures"]
    assert r.iterations["end"][0] < 150 and f["devices_after"] == 16
    assert f["train_layout_after"]["tp"] == 2 and f["train_layout_after"]["pp"] != 3


def test_a_second_failure_judges_candidates_on_the_batches_trained_before_the_first():
    """The seed loses node 3 (re-planned to TP8 PP11 on 352 NPUs), then node 5: the re-plan's check
    re-derived each earlier batch's heaviest micro-batch under the current layout on the pool it had
    trained on (384 devices, not a multiple of PP11's 88), refusing every candidate ("no layout fits
    on the 344 surviving devices"; a regression trial). It is measured when the batch trains now."""
    # recovery.widen false keeps the re-plans in the running layout's neighbourhood (TP8 ...), the layouts
    # of the regression: the widened search now takes TP1 CP2 EP8 etp 1, whose unit divides 384
    r = simulator.simulate(overrides=["schedule.kind=colocated",
                                      "schedule.failures=[{at_s: 600, fail: 'node:3'}, {at_s: 1800, fail: 'node:5'}]",
                                      "schedule.recovery.widen=false"],
                           iterations=5)
    first, second = r.summary["failures"]
    assert first["devices_after"] == 352 and first["train_layout_after"]["pp"] == 11
    assert 0 < second["devices_after"] < 352


def test_a_failure_while_stalesyncs_tail_group_waits_for_the_trainers_leaves_no_hole():
    """The tail group records its wait for the trainers when they finish; a failure in between
    dropped it, so 192 devices had 21 s in no state (a regression trial): it is lost time now."""
    r = simulator.simulate(overrides=["schedule.failures=[{at_s: 900, fail: 'node:3'}]"], iterations=4)
    s = r.summary
    assert np.allclose(per_device_time(r.timeline, s["devices"]), s["makespan_s"])


def test_a_rollout_failure_re_judges_the_engines_with_their_pipeline_stages(dis_base, monkeypatch):
    """The split pools' rollout re-plan keeps the instance layout, its stages included: the planner
    is asked for that layout (pp 2), not for engines of one stage that may not fit."""
    import simulator.autoplan as autoplan

    asked = []
    real = autoplan.plan_rollout

    def spy(*args, **kwargs):
        asked.append(list(kwargs["space"].pp))
        return real(*args, **kwargs)

    monkeypatch.setattr(autoplan, "plan_rollout", spy)
    ends = [it["end"] for it in dis_base.record.iterations]
    t_f = ends[0] + 0.5 * (dis_base.record.iterations[1]["start"] - ends[0])
    r = _dis(t_f, "node:1", "workload.rollout_layout={tp: 1, pp: 2, gpu_memory_utilization: 0.6}")
    (f,) = r.summary["failures"]
    assert f["pools"] == ["rollout"] and asked == [[2]]


def test_a_failure_due_inside_an_earlier_ones_recovery_is_taken_at_its_end_and_said(failed):
    """The recovery (re-plan and restart) is not interrupted: a failure due inside it is taken at its
    end, which the record (due_s) and a warning say (it moved silently; a failure audit)."""
    first = failed.summary["failures"][0]
    end = first["at_s"] + first["replan_s"] + first["restart_s"]
    due = first["at_s"] + first["restart_s"] / 2
    both = [f"schedule.failures=[{{at_s: 150, fail: 'node:1'}}, {{at_s: {due:g}, fail: 'node:2'}}]"]
    s = simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=4, overrides=both).summary
    second = s["failures"][1]
    assert second["due_s"] == due and second["at_s"] == pytest.approx(end, rel=1e-12)
    assert any("due at" in w and "recovery" in w for w in s["warnings"])
    assert "due_s" not in s["failures"][0] and not failed.summary["warnings"]
