"""Direct tests of simulator/des.py: the RNG, the timeline and the simpy wrapper."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.des import INTERVAL_COLUMNS, TIMELINE_COLUMNS, Interval, Simulation, Timeline, make_rng


def test_make_rng_is_a_pure_function_of_the_seed() -> None:
    a, b, c = make_rng(7), make_rng(7), make_rng(8)
    draws_a, draws_b = a.random(5), b.random(5)
    assert np.array_equal(draws_a, draws_b)
    assert not np.array_equal(draws_a, c.random(5))
    assert isinstance(a, np.random.Generator)


def test_simulations_do_not_share_randomness() -> None:
    first = Simulation(seed=3)
    first.rng.random(100)  # a first run drawing must not change what a second run sees
    assert np.array_equal(Simulation(seed=3).rng.random(4), make_rng(3).random(4))


def test_add_keeps_positive_intervals_and_drops_empty_ones() -> None:
    tl = Timeline()
    tl.add("train", 0, 1, "train", 1.0, 2.5, iteration=4, label="step")
    tl.add("train", 1, 1, "idle", 2.0, 2.0, cause="dependency")  # zero length: dropped
    tl.add("train", 2, 0, "idle", 2.0, 3.0)                        # no ranks: dropped
    assert len(tl.rows) == 1
    only = tl.rows[0]
    assert isinstance(only, Interval)
    assert tuple(only) == ("train", 0, "train", "", 4, 1.0, 2.5, "step", 0, 1)
    with pytest.raises(ValueError, match="ends before it starts"):
        tl.add("train", 0, 1, "train", 3.0, 2.0)


def test_a_group_record_has_device_minus_one() -> None:
    tl = Timeline()
    tl.add("rollout", 8, 4, "generate", 0.0, 1.0)
    assert (tl.rows[0].device, tl.rows[0].rank_start, tl.rows[0].rank_count) == (-1, 8, 4)


def test_add_devices_writes_one_interval_per_device() -> None:
    tl = Timeline()
    tl.add_devices("rollout", np.arange(3), "generate", 0.0, 1.0, iteration=0)
    assert [i.device for i in tl.rows] == [0, 1, 2]
    assert all(type(i.device) is int for i in tl.rows)


def test_clip_cuts_at_the_end_of_the_run() -> None:
    tl = Timeline()
    tl.add("a", 0, 1, "busy", 0.0, 5.0)
    tl.add("a", 0, 1, "busy", 5.0, 9.0)
    tl.add("a", 0, 1, "busy", 10.0, 12.0)
    tl.clip(7.0)
    assert [(r.start, r.end) for r in tl.rows] == [(0.0, 5.0), (5.0, 7.0)]


def test_a_hold_splits_a_later_generate_record_over_its_ranks_and_time() -> None:
    # ranks 8..15 generate over [0, 10); ranks 10..11 are held idle over [3, 5) (an engine waiting on
    # its tools): they generate [0, 3) and [5, 10), idle tool_wait [3, 5); the others generate whole
    timeline = Timeline()
    timeline.hold_idle(10, 2, 3.0, 5.0, "tool_wait")
    timeline.add("rollout", 8, 8, "generate", 0.0, 10.0, iteration=1, label="round 1")
    parts = sorted((row.rank_start, row.rank_count, row.state, row.cause, row.start, row.end) for row in timeline.rows)
    assert parts == [(8, 2, "generate", "", 0.0, 10.0), (10, 2, "generate", "", 0.0, 3.0),
                     (10, 2, "generate", "", 5.0, 10.0), (10, 2, "idle", "tool_wait", 3.0, 5.0),
                     (12, 4, "generate", "", 0.0, 10.0)]
    assert all(row.iteration == 1 and row.label == "round 1" for row in timeline.rows)
    timeline.add("rollout", 10, 2, "train", 0.0, 10.0)       # only generate records are split
    assert timeline.rows[-1].state == "train" and timeline.rows[-1].end - timeline.rows[-1].start == 10.0


@settings(max_examples=80, deadline=None)
@given(holds=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4), st.floats(0, 20), st.floats(0.01, 5)),
                      max_size=6),
       record=st.tuples(st.integers(0, 6), st.integers(1, 8), st.floats(0, 10), st.floats(0.01, 20)))
def test_holds_conserve_device_time(holds, record) -> None:
    # disjoint holds per rank (one engine's waits do not overlap): device-seconds are conserved and the
    # idle part is exactly the record's overlap with the holds
    timeline = Timeline()
    for first, count, start, length in holds:
        if any(a < start + length and start < b and hs < first + count and first < hs + hc
               for a, b, hs, hc, _ in timeline.holds):
            continue
        timeline.hold_idle(first, count, start, start + length, "tool_wait")
    first, count, start, length = record
    timeline.add("rollout", first, count, "generate", start, start + length)
    seconds = sum((row.end - row.start) * row.rank_count for row in timeline.rows)
    assert seconds == pytest.approx(count * length, abs=1e-9)
    overlap = sum(max(0.0, min(b, start + length) - max(a, start)) * max(0, min(hs + hc, first + count) - max(hs, first))
                  for a, b, hs, hc, _ in timeline.holds)
    idle = sum((row.end - row.start) * row.rank_count for row in timeline.rows if row.state == "idle")
    assert idle == pytest.approx(overlap, abs=1e-9)


def test_empty_frame_has_the_columns() -> None:
    frame = Timeline().to_frame()
    assert list(frame.columns) == TIMELINE_COLUMNS and frame.empty
    assert TIMELINE_COLUMNS[: len(INTERVAL_COLUMNS)] == INTERVAL_COLUMNS


interval = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.floats(0, 100, allow_nan=False),
                     st.floats(0, 10, allow_nan=False))


@given(st.lists(interval, max_size=30))
def test_frame_is_sorted_and_loses_nothing(items: list[tuple[str, int, float, float]]) -> None:
    tl = Timeline()
    for pool, device, start, length in items:
        tl.add(pool, device, 1, "busy", start, start + length)
    frame = tl.to_frame()
    kept = [(p, d, s, s + n) for p, d, s, n in items if s + n > s]
    assert len(frame) == len(kept)
    assert sorted(zip(frame.pool, frame.device, frame.start, frame.end, strict=True)) == sorted(kept)
    keys = list(zip(frame.start, frame.pool, frame.rank_start, frame.end, strict=True))
    assert keys == sorted(keys)


def test_simulation_clock_timeouts_and_run_until() -> None:
    sim = Simulation(seed=0)
    seen: list[tuple[str, float]] = []

    def proc(name: str, delays: list[float]):
        for d in delays:
            yield sim.timeout(d)
            seen.append((name, sim.now))

    sim.process(proc("a", [1.0, 2.0]))
    sim.process(proc("b", [-5.0, 1.0]))  # a negative delay is clamped to zero, never an error
    sim.run(until=2.5)
    assert seen == [("b", 0.0), ("a", 1.0), ("b", 1.0)]
    assert sim.now == 2.5 and isinstance(sim.now, float)
    sim.run()
    assert seen[-1] == ("a", 3.0)


def test_same_time_events_fire_in_insertion_order() -> None:
    sim = Simulation()
    order: list[int] = []

    def proc(i: int):
        yield sim.timeout(1.0)
        order.append(i)

    for i in range(5):
        sim.process(proc(i))
    sim.run()
    assert order == [0, 1, 2, 3, 4]


def _records_frame(rows):
    """The frame as pandas' records constructor and stable sort give it (the code to_frame replaced)."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    return frame.sort_values(["start", "pool", "rank_start", "end"], kind="stable").reset_index(drop=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["rollout", "actor", "train", "a", "Z"]), st.integers(0, 6), st.integers(1, 3),
                          st.sampled_from(["generate", "idle", "train"]), st.sampled_from([0.0, 1.0, 2.5, 1e-9, 7.0]),
                          st.sampled_from([0.0, 0.5, 3.0]), st.integers(-1, 3), st.sampled_from(["", "x", "y"])),
                max_size=40))
def test_to_frame_equals_the_records_frame_sorted_by_pandas(specs) -> None:
    """Many ties on start, pool and rank: the same rows in the same order, the same dtypes."""
    import pandas as pd

    timeline = Timeline()
    for pool, rank, count, state, start, length, iteration, label in specs:
        timeline.add(pool, rank, count, state, start, start + length, cause=label, iteration=iteration, label=label)
    got, want = timeline.to_frame(), _records_frame(timeline.rows)
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
    assert list(got.dtypes) == list(want.dtypes) and list(got.columns) == list(want.columns)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["rollout", "actor"]), st.integers(0, 4), st.integers(1, 3),
                          st.sampled_from([0.0, 1.0, 2.5]), st.sampled_from([0.5, 3.0]),
                          st.sampled_from([1, np.int64(2), 2**70, True]), st.sampled_from(["", "x", None, 3]),
                          st.sampled_from([None, 2.0, np.float64(1.5)])), min_size=1, max_size=12))
def test_to_frame_of_rows_of_other_types_is_pandas_inference(specs) -> None:
    """Rows that carry other types than the recorder's (numpy scalars, a huge int, a bool, None,
    a number as label, an end clipped to a numpy float): pandas' own frame of the values."""
    import pandas as pd

    timeline = Timeline()
    for pool, rank, count, start, length, iteration, label, clip_to in specs:
        timeline.add(pool, rank, count, "idle", start, start + length, iteration=iteration)
        row = timeline.rows[-1]
        timeline.rows[-1] = row._replace(label=label, end=row.end if clip_to is None else start + clip_to)
    got, want = timeline.to_frame(), _records_frame(timeline.rows)
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
    assert list(got.dtypes) == list(want.dtypes)
