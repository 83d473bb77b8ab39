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


@pytest.mark.parametrize("schedule", ["disaggregated", "stalesync", "async"])
def test_failures_on_other_schedules_are_a_clear_error(schedule):
    with pytest.raises(RlsimError, match="schedule.failures"):
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule=schedule, iterations=2, overrides=FAIL)


def test_failure_outside_the_pool_is_an_error():
    with pytest.raises(RlsimError, match="node"):
        simulator.simulate(workload=WORKLOAD, topology=TOPO, schedule="colocated", iterations=2,
                           overrides=["schedule.failures=[{at_s: 10, fail: 'node:9'}]"])
