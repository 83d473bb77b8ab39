"""The full-slots walk in sorted form (inference._full_slots_finishes) against the heap walk it
replaces (inference._full_slots_walk and the drain after it): on random keys, ties of finish steps
and long chains of jobs on one slot included, it gives every finish in the heap's order, or None
(the heap then), never another order; and the events built from it equal the heap walk's."""
from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.llm import inference
from simulator.llm.inference import RolloutEngine
from tests.llm.test_engine_vs_frozen import cases

BITS = inference._ORDER_BITS


@st.composite
def walks(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """(heap keys of the running slots, dues of the waiting jobs, the first job's order)."""
    slots = draw(st.integers(1, 12))
    steps = draw(st.lists(st.integers(1, 40), min_size=slots, max_size=slots))   # ties likely
    orders = draw(st.permutations(range(1, slots + 1)))
    keys = [(step << BITS) | order for step, order in zip(steps, orders, strict=True)]
    due = draw(st.lists(st.integers(1, 50), min_size=1, max_size=40))
    return keys, due, slots + 1


def _heap_walk(keys: list[int], due: list[int], first_order: int):
    """_full_slots_walk's events and finish orders, then _walk_of's drain of the keys left."""
    heap = list(keys)
    heapq.heapify(heap)
    steps, finished, admitted, fin = inference._full_slots_walk(heap, due, first_order, [], [], [])
    return inference._walk_of(steps.tolist(), finished.tolist(), admitted.tolist(), fin.tolist(), [],
                              np.array(heap, np.int64), np.arange(len(due)), first_order - 1, [])


@settings(max_examples=300, deadline=None)
@given(walks(), st.integers(0, 8))
def test_sorted_walk_gives_the_heap_walks_finishes_or_none(walk, rounds) -> None:
    keys, due, first_order = walk
    heap = list(keys)
    heapq.heapify(heap)
    popped = [heapq.heapreplace(heap, (((heap[0] >> BITS) + d) << BITS) | (first_order + j)) for j, d in enumerate(due)]
    expected = popped + sorted(heap)
    old = inference.FULL_SLOTS_ROUNDS
    inference.FULL_SLOTS_ROUNDS = rounds
    try:
        got = inference._full_slots_finishes(np.sort(np.array(keys, np.int64)), np.array(due, np.int64), first_order)
    finally:
        inference.FULL_SLOTS_ROUNDS = old
    if got is not None:
        assert got.tolist() == expected
    elif rounds >= len(due) + 1:   # a round settles at least one more pop: this many always settle
        raise AssertionError("not settled")


@settings(max_examples=200, deadline=None)
@given(walks())
def test_events_of_the_sorted_walk_equal_the_heap_walks(walk) -> None:
    keys, due, first_order = walk
    finishes = inference._full_slots_finishes(np.sort(np.array(keys, np.int64)), np.array(due, np.int64), first_order)
    if finishes is None:
        return
    got = inference._walk_of_finishes([], [], [], finishes, len(due), np.arange(len(due)), first_order - 1, [])
    want = _heap_walk(keys, due, first_order)
    for name in ("steps", "finished", "admitted", "waiting", "fin_slots"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.tolist() == b.tolist(), name
    assert got.start_running == want.start_running and got.instant is None is want.instant


def test_a_step_past_the_key_bits_is_left_to_the_heap() -> None:
    start = np.array([((2**31 - 10) << BITS) | 1], np.int64)
    assert inference._full_slots_finishes(start, np.array([5], np.int64), 2) is None
    start = np.array([(100 << BITS) | 1], np.int64)
    assert inference._full_slots_finishes(start, np.array([5], np.int64), 2).tolist() == [start[0], (105 << BITS) | 2]


@settings(max_examples=40, deadline=None)
@given(cases(), st.lists(st.tuples(st.sampled_from(["advance", "interrupt", "add"]), st.floats(0.0, 0.3)), max_size=4))
def test_an_untouched_engine_waits_in_slot_order_and_checks_as_the_general_path(case, ops) -> None:
    """While no sequence was admitted (RolloutEngine._untouched), every slot waits in slot order with
    the tokens it was added with, and _fast_ok's checks from the records' figures equal its general
    checks over the queue, whatever the engine went through (adds, advances, interrupts)."""
    engine = case.build(RolloutEngine)
    added = [g for _, batch in case.adds for _, _, g, _ in batch]
    now = case.adds[-1][0]
    for op, dt in [("check", 0.0), *ops]:
        now += dt
        if op == "advance":
            engine.advance_to(now)
        elif op == "interrupt":
            engine.interrupt(now)
        elif op == "add":
            if 20 + 30 + 1 > engine.replica_capacity:    # a case drawn with a KV cache too small for it
                continue
            engine.add_many([len(engine._id)], [20], [30], now, [3])
            added.append(3)
        if engine._untouched():
            assert list(engine._waiting) == list(range(len(engine._id)))
            assert engine._g == added and engine._as_added()[0].tolist() == added
        for least in (1, 16, None):
            general = _with_untouched_off(engine, least)
            assert engine._fast_ok(least) == general


def _with_untouched_off(engine: RolloutEngine, least: int | None) -> bool:
    engine._untouched = lambda: False
    try:
        return engine._fast_ok(least)
    finally:
        del engine._untouched


def _run_with_least(case, least: int) -> RolloutEngine:
    old = inference.FAST_RUN_MIN_SEQUENCES
    inference.FAST_RUN_MIN_SEQUENCES = least
    try:
        engine = case.build(RolloutEngine)
        engine.run()
    finally:
        inference.FAST_RUN_MIN_SEQUENCES = old
    return engine


@settings(max_examples=30, deadline=None)
@given(cases())
def test_slots_end_as_the_event_loop_leaves_them(case) -> None:
    """After a run (the array run where it is taken) every slot's state is the event loop's."""
    fast, slow = _run_with_least(case, 1), _run_with_least(case, 10**9)
    assert fast._state == slow._state
