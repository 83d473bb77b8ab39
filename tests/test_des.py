"""Direct tests of simulator/des.py: the RNG, the recorder and the simpy wrapper."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.des import INTERVAL_COLUMNS, Recorder, Simulation, make_rng


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


def test_record_keeps_positive_intervals_and_drops_empty_ones() -> None:
    rec = Recorder()
    rec.record("train", 0, "train", 1.0, 2.5, iteration=4, label="step")
    rec.record("train", 1, "idle", 2.0, 2.0, cause="dependency")  # zero length: dropped
    assert len(rec.intervals) == 1
    only = rec.intervals[0]
    assert (only.pool, only.device, only.state, only.cause, only.iteration, only.start, only.end, only.label) == \
        ("train", 0, "train", "", 4, 1.0, 2.5, "step")
    with pytest.raises(ValueError, match="ends before it starts"):
        rec.record("train", 0, "train", 3.0, 2.0)


def test_record_devices_writes_one_interval_per_device() -> None:
    rec = Recorder()
    rec.record_devices("rollout", np.arange(3), "generate", 0.0, 1.0, iteration=0)
    assert [i.device for i in rec.intervals] == [0, 1, 2]
    assert all(type(i.device) is int for i in rec.intervals)


def test_empty_frame_has_the_columns() -> None:
    frame = Recorder().to_frame()
    assert list(frame.columns) == INTERVAL_COLUMNS and frame.empty


interval = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.floats(0, 100, allow_nan=False),
                     st.floats(0, 10, allow_nan=False))


@given(st.lists(interval, max_size=30))
def test_frame_is_sorted_and_loses_nothing(items: list[tuple[str, int, float, float]]) -> None:
    rec = Recorder()
    for pool, device, start, length in items:
        rec.record(pool, device, "busy", start, start + length)
    frame = rec.to_frame()
    kept = [(p, d, s, s + n) for p, d, s, n in items if s + n > s]
    assert len(frame) == len(kept)
    assert sorted(zip(frame.pool, frame.device, frame.start, frame.end, strict=True)) == sorted(kept)
    keys = list(zip(frame.start, frame.pool, frame.device, frame.end, strict=True))
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
