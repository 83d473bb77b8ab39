"""The summary's bubbles and per-sample sums from the frames' arrays equal pandas' own forms (the
code they replaced) to the bit, on random timelines and sample tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.rl.samples import RetiredSamples
from simulator.rl.timeline import BUSY_STATES

STATES = ["generate", "forward", "train", "idle", "switch", "sync", "fetch", "lost", "mystery"]
CAUSES = ["", "long_tail", "dependency", "pipeline_bubble", "zzz_other", "a_first"]


def _pandas_bubbles(timeline: pd.DataFrame) -> tuple[float, dict[str, float]]:
    ds = metrics.device_seconds(timeline)
    total = float(ds.sum())
    if total <= 0:
        return 0.0, {c: 0.0 for c in metrics.BUBBLE_CAUSES}
    state = timeline["state"]
    cause = timeline["cause"].where(state == "idle", state.map(metrics.STATE_CAUSE))
    idle = ~state.isin(BUSY_STATES)
    by = ds[idle].groupby(cause[idle].fillna("other")).sum()
    out = {c: float(by.get(c, 0.0)) / total for c in metrics.BUBBLE_CAUSES}
    for c, v in by.items():
        if c not in out:
            out[str(c)] = float(v) / total
    return float(ds[idle].sum()) / total, out


rows = st.lists(st.tuples(st.sampled_from(STATES), st.sampled_from(CAUSES),
                          st.floats(0, 1e4), st.floats(0, 1e3), st.integers(1, 4096)), min_size=0, max_size=200)


@settings(max_examples=80, deadline=None)
@given(rows=rows)
def test_bubbles_equal_pandas_groupby_to_the_bit(rows):
    frame = pd.DataFrame({"state": [r[0] for r in rows], "cause": [r[1] for r in rows],
                          "start": [r[2] for r in rows], "end": [r[2] + r[3] for r in rows],
                          "rank_count": np.array([r[4] for r in rows], np.int64)})
    got, want = metrics.bubbles(frame), _pandas_bubbles(frame)
    assert got[0] == want[0]
    assert list(got[1].items()) == list(want[1].items())   # the same keys, in the same order, the same floats


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["idle", "sync", "train"]), st.sampled_from(["dependency", "long_tail"]),
                               st.sampled_from([1e16, -1e16, 1.0, 3.3, 1e-3, 7.0])), min_size=1, max_size=60),
       sort=st.booleans())
def test_bubbles_equal_pandas_where_the_summation_order_shows(rows, sort):
    """Cancelling magnitudes, with the causes interleaved or sorted (pandas sums a sorted key
    column another way): the same floats as pandas."""
    rows = sorted(rows, key=lambda r: r[1]) if sort else rows
    frame = pd.DataFrame({"state": [r[0] for r in rows], "cause": [r[1] for r in rows],
                          "start": np.zeros(len(rows)), "end": [abs(r[2]) for r in rows],
                          "rank_count": np.ones(len(rows), np.int64)})
    frame.loc[frame.index % 3 == 0, "start"] = 0.5
    got, want = metrics.bubbles(frame), _pandas_bubbles(frame)
    assert got[0] == want[0] and list(got[1].items()) == list(want[1].items())


def _pandas_sample_sums(samples: pd.DataFrame, T: float) -> dict:
    consumed = samples["consumed_iteration"] >= 0
    stale = samples["staleness"][consumed]
    return {"consumed": int(consumed.sum()),
            "trained_tokens": float((samples["prompt_len"][consumed] + samples["response_len"][consumed]).sum()),
            "gen_tokens": float(samples.loc[samples["finish"] <= T + 1e-9, "generated_tokens"].sum()),
            "all_gen": float(samples["generated_tokens"].sum()),
            "stale_max": float(stale.max()) if len(stale) else 0.0,
            "stale_mean": float(stale.mean()) if len(stale) else 0.0, "generated": len(samples),
            "oldest_max": float((samples["consumed_iteration"] - samples["first_version"])[consumed].max())
            if len(stale) else 0.0,
            "dropped": samples.loc[samples["dropped"], "drop_reason"].value_counts().to_dict()}


samples_rows = st.lists(st.tuples(st.integers(-1, 30), st.floats(0, 7), st.integers(1, 4000), st.integers(1, 20000),
                                  st.floats(0, 500), st.booleans(), st.sampled_from(["stale", "no_signal", "unused"]),
                                  st.integers(0, 9)),   # versions between the first tokens and the step
                        min_size=0, max_size=150)


@settings(max_examples=60, deadline=None)
@given(rows=samples_rows, T=st.floats(0, 600))
def test_sample_figures_equal_the_pandas_sums(rows, T):
    frame = pd.DataFrame({
        "consumed_iteration": np.array([r[0] for r in rows], np.int64),
        "staleness": np.array([r[1] if r[0] >= 0 else -1.0 for r in rows], float),
        "prompt_len": np.array([r[2] for r in rows], np.int64), "response_len": np.array([r[3] for r in rows], np.int64),
        "finish": np.array([r[4] for r in rows], float), "generated_tokens": np.array([r[3] for r in rows], np.int64),
        "dropped": np.array([r[5] and r[0] < 0 for r in rows], bool),
        "drop_reason": np.array([r[6] if r[5] and r[0] < 0 else "" for r in rows], object),
        "first_version": np.array([r[0] - r[7] for r in rows], np.int64)})
    got = metrics.sample_figures(frame, RetiredSamples(), T)
    want = _pandas_sample_sums(frame, T)
    assert got.pop("dropped") == {str(k): int(v) for k, v in want.pop("dropped").items()}
    assert got == want
    assert all(type(got[k]) is type(want[k]) for k in got)


@settings(max_examples=80, deadline=None)
# an overflow to inf in the Kahan loop (rows out of key order): pandas 3.1 keeps the sum at inf
@example(pairs=[("b", 0.0), ("a", 8.988465674311579e+307), ("a", 8.98846567431158e+307), ("a", 0.0)], sort=False)
@given(pairs=st.lists(st.tuples(st.sampled_from(["b", "a", "other", "long_tail"]),
                                st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                          st.sampled_from([1e16, -1e16, 1.0, 1e-3]))), max_size=80),
       sort=st.booleans())
def test_grouped_sums_are_pandas_groupby_sums(pairs, sort):
    """Any floats (inf, NaN, cancelling magnitudes), rows in key order (pandas' reduceat kernel) or
    not (its Kahan loop): the same keys in the same order and the same floats (or both NaN) as
    pandas' groupby sum."""
    pairs = sorted(pairs, key=lambda p: p[0]) if sort else pairs
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    got = metrics._grouped_sums(keys, values)
    with np.errstate(over="ignore"):   # the reference's own overflow to inf, as ours (no warning)
        by = pd.Series(values, dtype=float).groupby(np.array(keys, dtype=object)).sum() if keys else pd.Series()
    assert list(got) == by.index.tolist()
    for k, v in zip(by.index.tolist(), by.tolist(), strict=True):
        assert got[k] == v or (got[k] != got[k] and v != v)


def _pandas_iterations_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(records)
    if len(frame):
        frame["step_time_s"] = frame["end"] - frame["end"].astype(float).shift(1, fill_value=0.0)
    return frame


cell = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70), st.integers(-5, 5),
                 st.booleans(), st.none(), st.just(np.float64(2.5)))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 6), kinds=st.lists(st.sampled_from(["float", "int", "any"]), min_size=3, max_size=3),
       data=st.data(), drop_key=st.booleans())
def test_iterations_frame_is_pandas_records_frame(n, kinds, data, drop_key):
    """Whatever the records hold (plain ints and floats, or a mix, bools, None, numpy scalars,
    huge ints, a key missing from one): the frame pandas' records constructor gives, dtypes too."""
    from types import SimpleNamespace

    strategies = {"float": st.floats(allow_nan=True), "int": st.integers(-2**40, 2**40), "any": cell}
    keys = ["iteration", "samples", "end"]
    records = [{k: data.draw(strategies[kind]) for k, kind in zip(keys, kinds, strict=True)} for _ in range(n)]
    if drop_key and records:
        del records[-1]["samples"]
    if not all(isinstance(r.get("end"), float | int) or r.get("end") is None for r in records):
        return      # an "end" pandas cannot subtract: not a record a run makes
    try:
        want = _pandas_iterations_frame(records)
    except TypeError:
        return
    got = metrics.iterations_frame(SimpleNamespace(iterations=records))
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("kind,keep", [("colocated", None), ("stalesync", None), ("async", 40), ("disaggregated", None)])
def test_summary_from_the_store_columns_is_the_summary_from_the_frame(kind, keep):
    """summary(rec, timeline) without the per-sample frame (simulate(keep_samples=False)) reads the
    store's columns: the same object, byte for byte, as from rec.samples.to_frame()."""
    import json

    from simulator.rl.fake_costs import FakeCosts
    from simulator.rl.schedules import run_schedule
    from simulator.scenario import load_scenario

    from .rl.schedules.test_schedules import lognormal

    w = {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4, "mini_batch_prompts": 4}
    data = {"topology": "fake", "workload": w, "schedule": {"kind": kind}, "iterations": 4}
    if keep is not None:
        data["output"] = {"keep_sample_rows": keep}
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2, instance_max_seqs=8)
    rec = run_schedule(load_scenario(data), costs, 16, lognormal(100, 0.3, 400), lognormal(400, 1.0, 4000))
    timeline = rec.timeline.to_frame()
    without = json.dumps(metrics.summary(rec, timeline), default=float)
    assert without == json.dumps(metrics.summary(rec, timeline, rec.samples.to_frame()), default=float)
