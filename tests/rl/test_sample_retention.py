"""output.keep_sample_rows: the sample store retires finalized rows beyond the bound into counts and
sums (rl/samples.py). Every figure that counts samples equals the keep-everything run's; the held
rows are the tail of the full table; the critical path of every step still held is the same walk."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.rl import critical_path, samples
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.samples import SampleStore
from simulator.rl.schedules import SameLayoutReplanner, run_schedule
from simulator.scenario import load_scenario

from .schedules.test_schedules import lognormal


@pytest.fixture
def retire_often(monkeypatch):
    """Retire as soon as one row may go (the production threshold waits for thousands)."""
    monkeypatch.setattr(samples, "RETIRE_MIN_ROWS", 1)


def _flat(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flat(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _flat(v, f"{prefix}[{i}]")
    else:
        yield prefix, obj


def _run(kind: str, keep: int | None, failures: bool = False, **sched):
    w = {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4, "mini_batch_prompts": 4}
    if failures:
        sched["failures"] = [{"at_s": 40.0, "fail": "2,3"}]
    data = {"topology": "fake", "workload": w, "schedule": {"kind": kind, **sched}, "iterations": 7}
    if keep is not None:
        data["output"] = {"keep_sample_rows": keep}
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2, instance_max_seqs=8)
    rec = run_schedule(load_scenario(data), costs, 16, lognormal(100, 0.3, 400), lognormal(400, 1.0, 4000),
                       replanner=SameLayoutReplanner() if failures else None)
    tl, sm = rec.timeline.to_frame(), rec.samples.to_frame()
    summary = metrics.summary(rec, tl, sm)
    summary["critical_path"] = critical_path.of_run(rec, tl)
    return rec, sm, summary


CASES = [("colocated", {}, False), ("stalesync", {}, False), ("disaggregated", {}, False),
         ("one-step-off", {}, False), ("async", {"staleness": 2}, False),
         ("verl-fully-async", {"staleness_threshold": 0.5, "partial_rollout": True}, False),
         ("verl-fully-async", {"staleness_threshold": 0.5, "partial_rollout": True, "request_routing": True}, False),
         ("areal", {}, False), ("nemo-rl-async", {}, False), ("verl-colocate-async", {}, False),
         ("verl-separate-async", {"parameter_sync_step": 2}, False),
         ("verl-separate-async", {"parameter_sync_step": 2, "hybrid_rollout": {}}, False), ("verl-sync", {}, False),
         ("colocated", {}, True), ("stalesync", {}, True), ("disaggregated", {}, True)]


@pytest.mark.parametrize(("kind", "sched", "failures"), CASES)
def test_kept_rows_change_no_figure_that_counts_samples(retire_often, kind, sched, failures):
    full_rec, full, a = _run(kind, None, failures, **sched)
    kept_rec, kept, b = _run(kind, 0, failures, **sched)
    assert kept_rec.samples.base > 0 and len(kept) < len(full)          # rows were retired
    fa, fb = dict(_flat(a)), dict(_flat(b))
    changed = {k for k in fa.keys() | fb.keys() if fa.get(k, "<none>") != fb.get(k, "<none>")}
    assert {k for k in changed if not k.startswith("critical_path.")} == {"samples.rows_kept"}
    assert b["samples"]["rows_kept"] == len(kept)
    # the held rows are the full table's last rows, as they were
    pd.testing.assert_frame_equal(kept.reset_index(drop=True), full.iloc[len(full) - len(kept):].reset_index(drop=True))
    # every step still walked is the same walk, and the summary says how many were
    walked = {s["iteration"]: s for s in b["critical_path"]["steps"]}
    assert walked and all(s == a["critical_path"]["steps"][i] for i, s in enumerate(a["critical_path"]["steps"])
                          if s["iteration"] in walked for s in [walked[s["iteration"]]])
    if len(walked) < len(a["critical_path"]["steps"]):
        assert b["critical_path"]["steps_walked"].startswith(f"{len(walked)} of {len(a['critical_path']['steps'])}")
    assert any(n.startswith("output.keep_sample_rows") for n in metrics.summary_notes(b))


def test_no_bound_keeps_every_row_and_adds_no_key():
    rec, sm, s = _run("stalesync", None)
    assert rec.samples.base == 0 and len(sm) == s["samples"]["generated"]
    assert "rows_kept" not in s["samples"] and "steps_walked" not in s["critical_path"]
    assert not any(n.startswith("output.keep_sample_rows") for n in metrics.summary_notes(s))


def test_a_bound_keeps_at_least_that_many_rows(retire_often):
    rec, sm, s = _run("colocated", 40)
    assert rec.samples.base > 0 and len(sm) >= 40


# ---- the store alone, against a keep-everything twin ---------------------------------------------
OPS = st.lists(st.tuples(st.sampled_from(["add", "consume", "drop", "retire"]), st.integers(1, 9)),
               min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, keep=st.integers(0, 12))
def test_retired_counts_plus_held_rows_equal_the_whole_table(ops, keep):
    old = samples.RETIRE_MIN_ROWS
    samples.RETIRE_MIN_ROWS = 1
    try:
        _check_against_twin(ops, keep)
    finally:
        samples.RETIRE_MIN_ROWS = old


def _check_against_twin(ops, keep):
    full, kept, now, it = SampleStore(), SampleStore(keep_rows=keep), 0.0, 0
    for op, k in ops:
        now += 1.0
        if op == "add":
            for store in (full, kept):
                store.add(round_=np.full(k, it), group=np.arange(k), prompt_len=np.full(k, 3),
                          response_len=np.arange(k) + 1, generated_tokens=np.arange(k) + 1.0, version=it,
                          first_version=np.full(k, max(0, it - 1)), start=now, finish=now + np.arange(k) * 0.5,
                          ready=now + np.arange(k) * 0.5 + 0.1, dropped=np.arange(k) % 5 == 4,
                          drop_reason=np.where(np.arange(k) % 5 == 4, "no_signal", "").astype(object))
        elif op in ("consume", "drop") and len(kept.pending()):
            ids = kept.pending()[:k]
            assert np.array_equal(ids, full.pending()[:k])
            for store in (full, kept):
                store.consume(ids, it) if op == "consume" else store.drop(ids, "stale")
            it += op == "consume"
        elif op == "retire":
            kept.retire(now)
        assert np.array_equal(full.pending(), kept.pending())
    whole, held = full.to_frame(), kept.to_frame()
    assert len(held) >= min(keep, len(whole))
    if len(held):
        pd.testing.assert_frame_equal(held.reset_index(drop=True), whole.iloc[kept.base:].reset_index(drop=True))
    else:
        assert kept.base == len(whole)
    T = now + 100.0
    none = samples.RetiredSamples()
    assert metrics.sample_figures(held, kept.retired, T) | {"rows_kept": len(whole)} == \
        metrics.sample_figures(whole, none, T) | {"rows_kept": len(whole)}


def test_the_option_is_a_scenario_key_with_a_checked_value():
    from simulator.errors import RlsimError

    assert "output" not in load_scenario(None).to_dict()       # the default: snapshots as they were
    sc = load_scenario(None, overrides=["output.keep_sample_rows=0"])
    assert sc.output.keep_sample_rows == 0 and load_scenario(sc.to_dict()).output == sc.output
    for bad in ("output.keep_sample_rows=-1", "output.keep_rows=5"):
        with pytest.raises(RlsimError, match="output.keep"):
            load_scenario(None, overrides=[bad])
