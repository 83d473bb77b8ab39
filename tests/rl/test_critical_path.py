"""rl/critical_path.py: the chain of recorded intervals that sets each step's length.

Closed form (one instance, equal lengths, colocated): generate -> train -> sync, its length the
step time. Free deltas sum consistently: per step the causes' seconds sum to the step time, over
the run the deltas sum to the mean step time and the shares to 1; on a serial schedule a cause's
delta is the saving a re-simulation with that cost zeroed measures. Property (hypothesis): for
random small scenarios of every split and colocated kind the path tiles each step, without gaps
or overlaps, and every segment lies inside a recorded interval of its track."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.rl import critical_path as cp
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario


def const(value):
    def sample(rng, n_prompts, n, step):
        return np.full((n_prompts, n), value, int)
    return sample


def lognormal(median, sigma, cap):
    def sample(rng, n_prompts, n, step):
        return np.clip(np.round(rng.lognormal(np.log(median), sigma, size=(n_prompts, n))), 1, cap).astype(int)
    return sample


def scenario(kind="colocated", iterations=3, prompts=8, n=8, seed=0, **sched):
    return load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": prompts,
                                                           "samples_per_prompt": n},
                          "schedule": {"kind": kind, **sched}, "iterations": iterations, "seed": seed})


def paths_of(sc, costs, devices, prompt=None, resp=None):
    rec = run_schedule(sc, costs, devices, prompt or lognormal(100, 0.3, 400), resp or lognormal(400, 1.0, 4000))
    timeline = rec.timeline.to_frame()
    paths = cp.critical_paths(rec, timeline)
    return rec, timeline, paths, cp.summarize(paths, rec.samples.flat())


def test_closed_form_colocated_path_is_generate_train_sync():
    # one instance (2 devices), every response 500 tokens, no switch / forward / reward / fetch cost
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, switch_s=0.0,
                  decode_s_per_token=1e-3, train_device_s_per_token=1e-3, forward_device_s_per_token=0.0)
    sc = scenario("colocated", iterations=3, distqueue={"bw_Bps": 1e30})
    rec, tl, paths, summary = paths_of(sc, c, devices=2, prompt=const(100), resp=const(500))
    gen, train, sync = 500 * 1e-3, 64 * 600 * 1e-3 / 2, 0.7
    ends = [0.0] + [it["end"] for it in rec.iterations]
    for k, (path, step) in enumerate(zip(paths, summary["steps"], strict=True)):
        assert [e["phase"] for e in step["chain"]] == ["generate", "train", "sync"]
        assert step["chain"][0]["ranks"] == [0, 2] and "sequence" in step["chain"][0]
        assert step["chain"][0]["sequence"]["response_len"] == 500
        assert path.end - path.start == pytest.approx(ends[k + 1] - ends[k], rel=1e-12)
        assert sum(s.duration for s in path.segments) == pytest.approx(gen + train + sync, rel=1e-9)
        assert step["s_by_cause"] == pytest.approx({"generate": gen, "train": train, "weight_sync": sync}, rel=1e-9)


def _mean_step(rec) -> float:
    return rec.iterations[-1]["end"] / len(rec.iterations)


@pytest.mark.parametrize("knob, cause", [("sync_s", "weight_sync"), ("switch_s", "switch")])
def test_free_delta_is_the_resimulated_saving_on_a_serial_schedule(knob, cause):
    # colocated, 4 instances, random lengths: one chain per step, so zeroing a constant cost saves
    # exactly its path time (the draws do not depend on timing: same sequences in both runs). The
    # DistQueue is made instant: its fetch time depends on when the writes land (second order).
    base = dict(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2, instance_max_seqs=8)
    sc = scenario("colocated", iterations=4, seed=3, distqueue={"bw_Bps": 1e30})
    rec, _, _, summary = paths_of(sc, FakeCosts(**base), devices=8)
    free_rec = paths_of(sc, FakeCosts(**{**base, knob: 0.0}), devices=8)[0]
    assert summary["free_delta_s"][cause] > 0
    assert _mean_step(rec) - _mean_step(free_rec) == pytest.approx(summary["free_delta_s"][cause], rel=1e-9)


def _check_sums(rec, summary) -> None:
    """What "sum consistently" means: per step causes -> step time; run: deltas -> mean step, shares -> 1."""
    for step in summary["steps"]:
        assert math.isclose(sum(step["s_by_cause"].values()), step["length_s"], rel_tol=1e-9, abs_tol=1e-9)
        assert all(v > 0 for v in step["s_by_cause"].values())
        chain_s = sum(sum(e["s_by_cause"].values()) for e in step["chain"])
        assert math.isclose(chain_s, step["length_s"], rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(sum(summary["free_delta_s"].values()), _mean_step(rec), rel_tol=1e-9)
    assert math.isclose(summary["step_time_s"], _mean_step(rec), rel_tol=1e-9)
    assert math.isclose(sum(summary["share"].values()), 1.0, rel_tol=1e-9)
    assert summary["free_delta_s"]["untracked"] == 0.0


def _check_tiles(rec, timeline, paths) -> None:
    """Each step's path: contiguous, non-overlapping, [step start, step end], inside recorded intervals."""
    ends = [0.0] + [float(it["end"]) for it in rec.iterations]
    cols = {c: timeline[c].to_numpy() for c in ("pool", "rank_start", "rank_count", "start", "end", "state")}
    for k, path in enumerate(paths):
        segs = path.segments
        assert path.start == ends[k] and path.end == ends[k + 1]
        assert segs[0].start == path.start and segs[-1].end == path.end
        assert all(a.end == b.start for a, b in zip(segs, segs[1:], strict=False))
        assert all(s.duration > 0 for s in segs)
        assert math.isclose(sum(s.duration for s in segs), path.end - path.start, rel_tol=1e-9, abs_tol=1e-9)
        for s in segs:
            if s.state == "reward":      # reward latency: a sample's finish -> ready, no interval of its own
                continue
            inside = (cols["pool"] == s.pool) & (cols["rank_start"] == s.rank_start) & \
                (cols["rank_count"] == s.rank_count) & (cols["state"] == s.state) & \
                (cols["start"] <= s.start + 1e-7) & (cols["end"] >= s.end - 1e-7)
            assert inside.any(), f"step {k}: {s} lies in no recorded {s.state} interval"


CASE = st.fixed_dictionaries({
    "kind": st.sampled_from(["colocated", "disaggregated", "one-step-off", "stalesync", "stalesync-split",
                             "async", "areal", "nemo-rl-async", "verl-fully-async"]),
    "seed": st.integers(0, 10_000),
    "devices": st.sampled_from([8, 12, 16]),
    "slots": st.sampled_from([2, 8, 1000]),
    "fuse_actor": st.booleans(),
})


def _case(c):
    kind, extra = c["kind"], {}
    if kind == "stalesync-split":
        kind, extra = "stalesync", {"placement": "disaggregated"}
    if kind == "colocated" and c["fuse_actor"]:
        extra["fuse"] = "actor"
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, switch_s=0.1,
                      reward_s_per_sample=1e-3, instance_max_seqs=c["slots"])
    return scenario(kind, iterations=4, prompts=4, seed=c["seed"], **extra), costs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_path_tiles_each_step_and_follows_recorded_intervals(c):
    sc, costs = _case(c)
    rec, timeline, paths, summary = paths_of(sc, costs, devices=c["devices"])
    _check_tiles(rec, timeline, paths)
    _check_sums(rec, summary)
    # the whole-run figure the summary reports is the mean path length
    s = metrics.summary(rec, timeline, rec.samples.to_frame())
    assert math.isclose(summary["step_time_s"] * len(paths), s["makespan_s"], rel_tol=1e-9)


def test_long_tail_is_generation_after_the_tail_threshold_share():
    # colocated, one instance, lengths 100 x 63 and one of 1000: the round waits for the last one;
    # the path's generation after the 90% quantile finish (0.1 s) is long tail: 0.9 s of it
    def one_long(rng, n_prompts, n, step):
        out = np.full((n_prompts, n), 100, int)
        out[-1, -1] = 1000
        return out
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, decode_s_per_token=1e-3)
    rec, _, paths, summary = paths_of(scenario("colocated", iterations=2), c, devices=2, prompt=const(10),
                                      resp=one_long)
    for step in summary["steps"]:
        assert step["s_by_cause"]["long_tail"] == pytest.approx(0.9, rel=1e-9)
        assert step["s_by_cause"]["generate"] == pytest.approx(0.1, rel=1e-9)
        assert step["chain"][0]["sequence"]["response_len"] == 1000


def test_split_pool_trainer_bound_step_has_no_generation_on_its_path():
    # one-step-off with a slow trainer and fast rollout: after the first step the batch is always
    # ready before the trainer is free, so the path is the trainer's own fetch -> train -> sync
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, decode_s_per_token=1e-6,
                  train_device_s_per_token=1e-2)
    rec, _, paths, summary = paths_of(scenario("one-step-off", iterations=4), c, devices=8)
    for step in summary["steps"][1:]:
        assert {e["pool"] for e in step["chain"]} == {"train"}
        assert "generate" not in step["s_by_cause"] and "long_tail" not in step["s_by_cause"]
    assert summary["bottleneck"] == "train"


def test_trainer_parts_count_each_optimizer_step_by_the_share_the_element_covers():
    parts = (("stage 0", 1.0), ("stage 1", 2.0), ("dp_sync", 1.0))        # 4 s per optimizer step
    ops = [("train", 0, 4, "train_actor", 4.0 * i, 4.0 * (i + 1), i % 2, parts) for i in range(3)]
    ops.append(("train", 4, 4, "train_actor", 0.0, 4.0, 1, parts))           # other ranks: not this element
    element = {"phase": "train", "pool": "train", "ranks": [0, 4], "label": "train_actor", "start_s": 2.0,
               "end_s": 12.0}
    summary = cp.with_trainer_parts({"steps": [{"chain": [element]}]}, ops)
    trainer = summary["steps"][0]["chain"][0]["trainer"]
    # half of the first step, the two others whole
    assert trainer["s_by_part"] == pytest.approx({"stage 0": 2.5, "stage 1": 5.0, "dp_sync": 2.5})
    assert sum(trainer["s_by_part"].values()) == pytest.approx(element["end_s"] - element["start_s"])
    assert trainer["last_stage"] == 0


def test_pipelined_trainer_on_the_path_says_which_stage_held_it():
    import simulator
    result = simulator.simulate(
        {"topology": {"preset": "dgx-h100", "nodes": 2}, "workload": "grpo-qwen2.5-7b",
         "schedule": {"kind": "colocated"}, "iterations": 2},
        overrides=["workload.train_layout.pp=2", "workload.prompts_per_step=32", "workload.mini_batch_prompts=16"])
    trains = [e for step in result.summary["critical_path"]["steps"] for e in step["chain"] if e["phase"] == "train"]
    assert trains
    for element in trains:
        trainer = element["trainer"]
        assert sum(trainer["s_by_part"].values()) == pytest.approx(element["end_s"] - element["start_s"], rel=1e-9)
        assert trainer["last_stage"] in (0, 1)
        # 1F1B: the first micro-batch's forward crosses stage 0, the rest of the chain runs on the
        # last stage (it also holds the LM head and the loss)
        assert 0 < trainer["s_by_part"]["stage 0"] < trainer["s_by_part"]["stage 1"]


@settings(max_examples=60, deadline=None)
@given(consumed=st.lists(st.integers(-1, 5), min_size=1, max_size=60), data=st.data(),
       tail=st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]))
def test_steps_grouped_once_read_as_a_scan_per_step(consumed, data, tail):
    """_Samples(many_steps=True) (positions grouped by a stable sort) and the per-step scan give the
    same positions and the same batch figures (the quantile by np.partition is np.sort's)."""
    n = len(consumed)
    finish = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.5, 3.0, 7.0]), min_size=n, max_size=n)))
    flat = {"consumed_iteration": np.array(consumed), "finish": finish, "ready": finish + 0.5,
            "instance": np.zeros(n, np.int64)}
    scan, grouped = cp._Samples(flat, tail), cp._Samples(flat, tail, many_steps=True)
    for k in range(-1, 7):
        ids = np.flatnonzero(flat["consumed_iteration"] == k)
        assert grouped.consumed_by(k).tolist() == ids.tolist() == scan.consumed_by(k).tolist()
        got = grouped.batch(k)
        if len(ids):
            q = np.sort(finish[ids])[min(len(ids) - 1, math.ceil(tail * len(ids)) - 1)]
            assert got[2] == q and got == scan.batch(k)
        else:
            assert got[0] == -1


def test_a_batch_handed_over_to_the_shared_reward_pool_waits_on_its_last_sequence_not_on_reward():
    """reward.handover batch: the batch is verified from its last finish, so the path's reward is
    that verification (ready - the last finish) and the time before it is the last sequence's
    generation; before, the first sample of the batch bound it and its whole wait read as reward."""
    # 3 s a batch: its 64 samples on the pool's 4 workers
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, reward_s_per_sample=3.0 / 16, instance_max_seqs=8)
    sc = load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 8,
                                                         "reward": {"workers": 4, "handover": "batch"}},
                        "schedule": {"kind": "colocated", "distqueue": {"bw_Bps": 1e30}}, "iterations": 3, "seed": 1})
    rec, timeline, paths, summary = paths_of(sc, c, devices=8)
    flat = rec.samples.flat()
    for k, step in enumerate(summary["steps"]):
        batch = np.flatnonzero(flat["consumed_iteration"] == k)
        last_finish, ready = flat["finish"][batch].max(), flat["ready"][batch].max()
        assert ready - last_finish == pytest.approx(3.0)                # the pool verifies the batch at once
        assert step["s_by_cause"]["reward"] == pytest.approx(ready - last_finish, rel=1e-9)
        reward_at = [i for i, e in enumerate(step["chain"]) if e["phase"] == "reward"]
        assert len(reward_at) == 1 and step["chain"][reward_at[0] - 1]["phase"] == "generate"
        assert step["chain"][reward_at[0] - 1]["end_s"] == pytest.approx(last_finish, rel=1e-12)
    _check_sums(rec, summary)
    _check_tiles(rec, timeline, paths)


def test_the_reward_latency_on_the_path_starts_where_the_engine_returned_the_sample():
    """A non-interruptible AReaL plan returns its trajectories at its end: a sample scored as it
    finished still waits for that end, which is the other sequences' generation, not reward
    latency (a regression trial: 27.4 of 37.4 s labelled reward were the plan still generating)."""
    import simulator
    # two nodes: on one, AReaL's 4 training devices (TP2 DP2 ZeRO-1) cannot hold the actor's update
    # beside the resident reference's weights
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, schedule="areal",
                           iterations=4, seed=2,
                           overrides=["schedule.interruptible=false", "workload.prompts_per_step=32",
                                      "workload.samples_per_prompt=8", "workload.mini_batch_prompts=16",
                                      "workload.reward.handover=sample", "workload.reward.cpu_s_per_sample=0.5"])
    samples = r.samples
    assert (samples["returned"] >= samples["finish"]).all() and (samples["ready"] >= samples["returned"]).all()
    assert (samples["returned"] > samples["finish"] + 1.0).any()           # held to their plan's end
    for step in r.summary["critical_path"]["steps"]:
        consumed = samples[samples["consumed_iteration"] == step["iteration"]]
        assert step["s_by_cause"].get("reward", 0.0) <= (consumed["ready"] - consumed["returned"]).max() + 1e-6


def test_a_step_walked_during_the_run_finds_a_reward_wait_whose_sample_returned_before_the_step():
    """verl one-step-off: step 2's trainer waits for the previous round's rule rewards, its binding
    sample returned before the step's window. The walk done during the run (no per-sample table)
    no longer holds that generate interval and called the wait an unexplained dependency, while a
    walk after the run (keep_samples) called it reward (a user trial): both say reward now."""
    import simulator
    from simulator.frameworks import import_config
    imported = import_config("verl", "workloads/frameworks/verl-one-step-off-qwen2.5-7b.yaml", [])
    # a scorer slow enough to bind (verl's takes < 1 ms), for responses ending with an answer or at the cap
    slow = ["workload.reward.cpu_s_per_sample=0.05", "workload.reward.capped_cpu_s_per_sample=0.05"]
    online = simulator.simulate(imported.scenario, iterations=5, keep_samples=False,
                                overrides=slow).summary["critical_path"]["steps"]
    after = simulator.simulate(imported.scenario, iterations=5, keep_samples=True,
                               overrides=slow).summary["critical_path"]["steps"]
    assert [step["s_by_cause"] for step in online] == [step["s_by_cause"] for step in after]
    assert online[2]["s_by_cause"].get("reward", 0.0) > 5 and "dependency" not in online[2]["s_by_cause"]


def test_the_steady_path_is_the_headlines_window():
    """The report's critical path was whole-run (its long tail 132.8 s a step, 361.8 s of it in the
    warm-up step 0) beside a steady headline (a capacity trial): the summary also gives the steady
    steps' mean, shares and deltas, whose step is the steady step time."""
    import simulator
    summary = simulator.simulate(iterations=4, keep_samples=False).summary
    steady = summary["critical_path"]["steady"]
    assert steady["step_time_s"] == pytest.approx(summary["steady_step_time_s"], rel=1e-9)
    assert sum(steady["share"].values()) == pytest.approx(1.0)
    assert sum(steady["free_delta_s"].values()) == pytest.approx(steady["step_time_s"])
    assert steady["free_delta_s"]["long_tail"] < summary["critical_path"]["free_delta_s"]["long_tail"]


def test_a_steps_seconds_by_cause_keep_a_wait_under_a_cause_outside_the_list():
    """A wait nothing explains stays on the path with its own cause, which may be one CAUSES does not
    list (`placement`: trainer devices that form no rollout instance idle through generation). The
    step's s_by_cause left it out (a verl-separate-async hybrid_rollout case: 3.12 s of a 5.12 s
    step) while the run's shares counted it; each step's causes now sum to its length."""
    segments = [cp.Segment(0.0, 2.0, "placement", "idle", "train", 4, 2, "", 0),
                cp.Segment(2.0, 2.5, "forward", "forward", "train", 4, 2, "old_logprob", 0),
                cp.Segment(2.5, 3.0, "train", "train", "train", 4, 2, "train_actor", 0)]
    out = cp.summarize([cp.StepPath(0, 0.0, 3.0, segments)])
    assert out["steps"][0]["s_by_cause"] == {"forward": 0.5, "train": 0.5, "placement": 2.0}
    assert math.isclose(sum(out["share"].values()), 1.0) and out["share"]["placement"] == 2.0 / 3.0
