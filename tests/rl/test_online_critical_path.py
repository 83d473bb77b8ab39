"""The critical path walked during the run (critical_path.OnlinePaths), with the per-sample rows
folded as it goes (keep_samples=False), equals the walk after the run over every row: the whole
summary is the same, figure for figure, and the rows were folded (fewer held than generated)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from simulator import metrics
from simulator.rl import critical_path as cp
from simulator.rl import samples
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import SameLayoutReplanner, run_schedule
from simulator.scenario import load_scenario

from .schedules.test_schedules import lognormal
from .test_critical_path import CASE, _case


@pytest.fixture(autouse=True)
def retire_often(monkeypatch):
    """Fold as soon as one row may go (the production threshold waits for thousands)."""
    monkeypatch.setattr(samples, "RETIRE_MIN_ROWS", 1)


def _summary(sc, costs, devices, keep_samples, replanner=None):
    rec = run_schedule(sc, costs, devices, lognormal(100, 0.3, 400), lognormal(400, 1.0, 4000),
                       keep_samples=keep_samples, replanner=replanner)
    tl = rec.timeline.to_frame()
    out = metrics.summary(rec, tl, rec.samples.to_frame())
    out["critical_path"] = cp.of_run(rec, tl)
    return rec, json.dumps(out, sort_keys=True, default=float)


def _scenario(kind, iterations=7, failures=False, **sched):
    if failures:
        sched["failures"] = [{"at_s": 40.0, "fail": "2,3"}]
    return load_scenario({"topology": "fake", "schedule": {"kind": kind, **sched}, "iterations": iterations,
                          "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4,
                                       "mini_batch_prompts": 4}})


COSTS = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2, instance_max_seqs=8)
KINDS = [("colocated", {}), ("colocated", {"fuse": "actor"}), ("stalesync", {}),
         ("stalesync", {"placement": "disaggregated"}), ("disaggregated", {}), ("one-step-off", {}),
         ("async", {"staleness": 2}), ("verl-fully-async", {"staleness_threshold": 0.5, "partial_rollout": True}),
         ("verl-fully-async", {"trigger_parameter_sync_step": 4, "staleness_threshold": 0.5}),   # a step in parts
         ("areal", {}), ("nemo-rl-async", {})]


@pytest.mark.parametrize(("kind", "sched"), KINDS)
def test_online_walk_with_rows_folded_gives_the_same_summary(kind, sched):
    sc = _scenario(kind, **sched)
    full_rec, full = _summary(sc, COSTS, 16, True)
    folded_rec, folded = _summary(sc, COSTS, 16, False)
    assert folded == full
    assert full_rec.samples.base == 0 and folded_rec.samples.base > 0          # rows were folded
    assert len(folded_rec.online_paths.paths) >= len(folded_rec.iterations) - 2  # walked as the run went


@pytest.mark.parametrize("kind", ["colocated", "stalesync", "disaggregated"])
def test_failure_runs_keep_every_row_and_walk_after_the_run(kind):
    sc = _scenario(kind, failures=True)
    full_rec, full = _summary(sc, COSTS, 16, True, SameLayoutReplanner())
    kept_rec, kept = _summary(sc, COSTS, 16, False, SameLayoutReplanner())
    assert kept == full and kept_rec.samples.base == 0 and kept_rec.online_paths is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_online_walk_equals_the_walk_after_the_run_on_random_runs(c):
    sc, costs = _case(c)
    sc = sc.model_copy(update={"iterations": 6})
    assert _summary(sc, costs, c["devices"], False)[1] == _summary(sc, costs, c["devices"], True)[1]


def test_keep_sample_rows_now_walks_every_step():
    # a retention bound folds rows as before, and the path covers every step (no steps_walked note)
    sc = load_scenario({**_scenario("stalesync").to_dict(), "output": {"keep_sample_rows": 0}})
    rec, text = _summary(sc, COSTS, 16, True)
    out = json.loads(text)
    assert rec.samples.base > 0 and "rows_kept" in out["samples"]
    assert len(out["critical_path"]["steps"]) == len(rec.iterations) and "steps_walked" not in out["critical_path"]
    assert text.replace(f', "rows_kept": {out["samples"]["rows_kept"]}', "") == _summary(_scenario("stalesync"),
                                                                                          COSTS, 16, True)[1]


def _two_steps():
    from simulator.des import Timeline
    from simulator.rl.samples import SampleStore

    tl, store = Timeline(), SampleStore(keep_rows=0)
    tl.add("actor", 0, 2, "train", 0.0, 1.0, iteration=0)
    tl.add("actor", 0, 2, "train", 1.0, 2.0, iteration=1)
    return tl, store, [{"iteration": 0, "end": 1.0, "samples": 0}, {"iteration": 1, "end": 2.0, "samples": 0}]


def test_a_step_waits_for_every_clock_and_for_a_later_step():
    tl, store, its = _two_steps()
    online = cp.OnlinePaths(tl, store, 0.9)
    online.advance(its, [2.0, 0.5])         # a clock has recorded only up to 0.5: nothing is walked
    assert online.paths == [] and online.floor() < 0
    online.advance(its, [2.0, 2.0])         # step 1 is the last recorded: its end may still move
    assert [p.iteration for p in online.paths] == [0] and online.w0 == 1.0
    assert [s.state for s in online.paths[0].segments] == ["train"]


def test_what_a_walk_relied_on_is_checked_later():
    import numpy as np

    tl, store, its = _two_steps()
    online = cp.OnlinePaths(tl, store, 0.9)
    online.advance(its, [2.0])
    tl.add("actor", 2, 2, "idle", 0.5, 3.0)          # an interval recorded late, inside the walked step
    with pytest.raises(AssertionError, match="interval recorded after step 0"):
        online.check()
    tl, store, its = _two_steps()
    online = cp.OnlinePaths(tl, store, 0.9)
    online.advance(its, [2.0])
    one = np.ones(1, int)
    store.add(round_=one, group=one, prompt_len=one, response_len=one, generated_tokens=one.astype(float), version=0,
              first_version=one, start=0.0, finish=np.array([0.9]), ready=np.array([0.9]))
    with pytest.raises(AssertionError, match="sample added after step 0"):
        online.check()


def test_verl_fully_async_waits_for_groups_still_generating(monkeypatch):
    # verl's fully async Rollouter stores a prompt group when all its n trajectories are done: a
    # step may be walked only once no group in flight can still store a sample finished within it
    # (Context.unstored_from). This run walked too early before that bound existed.
    from simulator import api, cli

    summaries, keep = {}, []

    def spy(*args, keep_samples=True, **kw):
        result = real(*args, keep_samples=keep[-1], **kw)
        summaries[keep[-1]] = json.dumps(result.summary, sort_keys=True, default=float)
        return result

    real = api.simulate
    monkeypatch.setattr(api, "simulate", spy)
    argv = ["run", "--from-verl", "workloads/frameworks/verl-fully-async-qwen2.5-7b.yaml",
            "async_training.staleness_threshold=1", "--iterations", "3", "--json"]
    for folded in (False, True):
        keep.append(folded)
        assert cli.main(argv) == 0
    assert summaries[False] == summaries[True]
