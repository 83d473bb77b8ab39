"""Direct tests of simulator/rl/samples.py: SampleStore keeps every sample exactly once.

A model (a plain dict of sample id -> state) runs beside the store through random sequences of
add / consume / drop / truncate; after every step each id is pending, consumed or dropped, never
two of them, and never lost."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.samples import SAMPLE_COLUMNS, STORED_COLUMNS, SampleStore


def _add(store: SampleStore, k: int, *, version: int = 0, start: float = 0.0, offset: float = 0.0,
         dropped: np.ndarray | None = None, drop_reason: np.ndarray | None = None) -> np.ndarray:
    resp = np.arange(1, k + 1) * 10
    return store.add(round_=np.full(k, version), group=np.arange(k) // 2, prompt_len=np.full(k, 5),
                     response_len=resp, generated_tokens=resp, version=version,
                     first_version=np.full(k, version), start=start, finish=start + offset + np.arange(k, dtype=float),
                     ready=start + offset + np.arange(k, dtype=float) + 0.5, dropped=dropped, drop_reason=drop_reason)


def test_empty_store() -> None:
    store = SampleStore()
    assert store.n == 0 and len(store.pending()) == 0
    frame = store.to_frame()
    assert list(frame.columns) == SAMPLE_COLUMNS and frame.empty
    assert store.flat()["consumed_iteration"].dtype.kind == "i"


def test_add_consume_drop_and_staleness() -> None:
    store = SampleStore()
    first = _add(store, 3, version=0)
    second = _add(store, 2, version=1, start=4.0)
    assert list(first) == [0, 1, 2] and list(second) == [3, 4]
    store.consume(np.array([0, 3]), iteration=2)
    store.drop(np.array([1]), "no_signal")
    frame = store.to_frame()
    assert list(frame["consumed_iteration"]) == [2, -1, -1, 2, -1]
    assert list(frame["staleness"]) == [2.0, -1.0, -1.0, 1.0, -1.0]  # iteration - version
    assert list(frame["drop_reason"]) == ["", "no_signal", "", "", ""]
    assert list(store.pending()) == [2, 4]
    assert list(frame["start"]) == [0.0, 0.0, 0.0, 4.0, 4.0]


def test_consuming_twice_or_after_a_drop_is_an_error() -> None:
    store = SampleStore()
    _add(store, 2)
    store.consume(np.array([0]), 0)
    with pytest.raises(AssertionError):
        store.consume(np.array([0]), 1)
    store.drop(np.array([1]), "stale")
    with pytest.raises(AssertionError):
        store.consume(np.array([1]), 1)
    assert store.to_frame()["consumed_iteration"].tolist() == [0, -1]  # the failed calls changed nothing


def test_samples_dropped_when_added() -> None:
    store = SampleStore()
    _add(store, 3, dropped=np.array([False, True, True]),
         drop_reason=np.array(["", "overprovision", "overprovision"], dtype=object))
    assert list(store.pending()) == [0]
    assert store.to_frame()["dropped"].tolist() == [False, True, True]


def test_truncate_rolls_back_and_ids_restart() -> None:
    store = SampleStore()
    _add(store, 4)
    store.consume(np.array([2, 3]), 0)
    store.truncate(2)
    assert store.n == 2 and list(store.pending()) == [0, 1]
    again = _add(store, 3, version=1)
    assert list(again) == [2, 3, 4]
    assert list(store.pending()) == [0, 1, 2, 3, 4]  # the re-added rows are fresh, not the old consumed ones
    store.truncate(10)  # beyond the end: nothing changes
    assert store.n == 5


def test_dtypes_widen_across_rounds() -> None:
    store = SampleStore()
    _add(store, 2)
    store.add(round_=np.array([1]), group=np.array([0]), prompt_len=np.array([5]), response_len=np.array([7]),
              generated_tokens=np.array([3.5]), version=1, first_version=np.array([1]), start=1.0,
              finish=np.array([2.0]), ready=np.array([2.0]))
    frame = store.to_frame()
    assert frame["generated_tokens"].tolist() == [10.0, 20.0, 3.5]
    assert frame["sample"].tolist() == [0, 1, 2]


op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("consume"), st.integers(0, 2**16), st.booleans()),
    st.tuples(st.just("drop"), st.integers(0, 2**16), st.booleans()),
    st.tuples(st.just("truncate"), st.integers(0, 2**16), st.booleans()),
)


def _subset(ids: list[int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array(sorted(i for i in ids if rng.random() < 0.5), dtype=int)


def _check(store: SampleStore, model: dict[int, tuple[str, int]]) -> None:
    frame = store.to_frame()
    assert store.n == len(model) and frame["sample"].tolist() == list(range(len(model)))
    consumed = frame["consumed_iteration"].to_numpy() >= 0
    dropped = frame["dropped"].to_numpy()
    assert not np.any(consumed & dropped), "a sample is both consumed and dropped"
    for i, (state, iteration) in model.items():
        assert (state == "consumed") == consumed[i] and (state == "dropped") == dropped[i]
        if state == "consumed":
            assert frame["consumed_iteration"][i] == iteration
    assert store.pending().tolist() == [i for i, (s, _) in model.items() if s == "pending"]


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_no_sample_lost_or_duplicated(ops: list[tuple[str, int, bool]]) -> None:
    store, model = SampleStore(), {}
    iteration = 0
    for kind, value, flag in ops:
        pending = [i for i, (s, _) in model.items() if s == "pending"]
        if kind == "add":
            drops = np.arange(value) % 3 == 0 if flag else None
            ids = _add(store, value, version=iteration, start=float(iteration), dropped=drops)
            assert ids.tolist() == list(range(len(model), len(model) + value))
            for j, i in enumerate(ids.tolist()):
                model[i] = ("dropped" if drops is not None and drops[j] else "pending", -1)
        elif kind == "consume":
            chosen = _subset(pending, value)
            store.consume(chosen, iteration)
            model.update({i: ("consumed", iteration) for i in chosen.tolist()})
            iteration += int(flag)
        elif kind == "drop":
            chosen = _subset(pending, value)
            store.drop(chosen, "stale")
            model.update({i: ("dropped", -1) for i in chosen.tolist()})
        else:
            keep = value % (len(model) + 1)
            store.truncate(keep)
            model = {i: v for i, v in model.items() if i < keep}
        _check(store, model)


def test_the_frame_holds_the_store_columns_once_without_spare_room() -> None:
    """A finished run keeps each sample once: the frame's numeric columns are the store's buffers,
    cut to the sample count (no growth slack, no second copy), and the rows are unchanged."""
    store = SampleStore()
    for version in range(7):  # several growths of the buffers
        _add(store, 37, version=version, start=float(version))
    store.consume(np.arange(0, 200, 3), iteration=9)
    store.drop(np.arange(1, 200, 3), "stale")
    expected = {c: store.flat()[c].copy() for c in STORED_COLUMNS}
    frame = store.to_frame()
    numeric = [c for c in SAMPLE_COLUMNS if c != "drop_reason"]
    for c in numeric:
        assert list(frame[c]) == list(expected[c])
        assert len(store._buf[c]) == store.n == 7 * 37
    assert len(store._buf["drop_code"]) == store.n
    assert list(frame["drop_reason"]) == list(store.at("drop_reason", np.arange(store.n)))
    assert all(np.shares_memory(frame[c].to_numpy(), store._buf[c]) for c in numeric)
    _add(store, 5, version=8)   # the store may still grow after (a new buffer; the frame keeps its rows)
    assert len(frame) == 7 * 37 and store.n == 7 * 37 + 5


def test_integer_columns_are_int32_until_a_value_needs_more() -> None:
    store = SampleStore()
    _add(store, 3)
    assert store.flat()["response_len"].dtype == np.int32 and store.flat()["group"].dtype == np.int64
    assert store.at("response_len", np.array([1, 2])).dtype == np.int64     # reads: no narrow arithmetic
    big = 2**31 + 5
    store.add(round_=np.array([1]), group=np.array([0]), prompt_len=np.array([big]), response_len=np.array([7]),
              generated_tokens=np.array([7.0]), version=1, first_version=np.array([1]), start=1.0,
              finish=np.array([2.0]), ready=np.array([2.0]))
    frame = store.to_frame()
    assert frame["prompt_len"].dtype == np.int64 and frame["prompt_len"].tolist() == [5, 5, 5, big]
    assert frame["response_len"].dtype == np.int32


REASONS = ["", "no_signal", "overprovision", "stale", "unused", "surplus"]


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 12), st.lists(st.sampled_from(REASONS), min_size=12,
                                                                          max_size=12)), min_size=1, max_size=8))
def test_reason_codes_give_the_column_the_strings_would(ops) -> None:
    """Drop reasons held as codes: the frame's drop_reason column, ``at`` and ``drop_counts`` are
    those of the strings themselves (the column pandas makes from them: values and dtype)."""
    store, model = SampleStore(), []
    for add, k, reasons in ops:
        if add or not model:
            reason = np.array(reasons[:k], object)
            _add(store, k, dropped=reason != "", drop_reason=reason)
            model += reasons[:k]
        else:
            ids = np.arange(0, len(model), k)
            store.drop(ids, reasons[0] or "stale")
            for i in ids.tolist():
                model[i] = reasons[0] or "stale"
    import pandas as pd
    frame = store.to_frame()
    pd.testing.assert_series_equal(frame["drop_reason"], pd.Series(np.array(model, object), name="drop_reason"))
    assert store.at("drop_reason", np.arange(len(model))).tolist() == model
    dropped = frame["dropped"].to_numpy()
    want = {r: int(n) for r, n in zip(*np.unique(np.array(model, object)[dropped].astype(str), return_counts=True),
                                      strict=True)}
    assert store.drop_counts() == want


def test_more_reasons_than_int8_codes_widen_the_code_column() -> None:
    store = SampleStore()
    names = [f"reason_{i}" for i in range(300)]
    _add(store, 300, dropped=np.ones(300, bool), drop_reason=np.array(names, object))
    store.drop(np.array([0]), "one_more")
    frame = store.to_frame()
    assert frame["drop_reason"].tolist() == ["one_more"] + names[1:]
    assert store.drop_counts() == {"one_more": 1, **{n: 1 for n in names[1:]}}


def test_trim_shrinks_in_place_or_copies_when_a_view_is_alive() -> None:
    """to_frame's trim leaves each column with exactly the held rows and the same values, whether
    the buffer could shrink in place or a live view (an earlier frame) made it copy."""
    store = SampleStore()
    for version in range(5):
        _add(store, 37, version=version)
    expected = {c: store.flat()[c].copy() for c in STORED_COLUMNS}
    view = store.flat()["finish"]          # alive: that column must be copied, not shrunk under it
    store.trim()
    assert all(len(store._buf[c]) == store.n for c in STORED_COLUMNS)
    assert all(store.flat()[c].tolist() == expected[c].tolist() for c in STORED_COLUMNS)
    assert view.tolist() == expected["finish"].tolist()
