"""ResumableRun: an interrupt restored from an engine copy equals a fresh engine run to the same
time (the colocated StaleSync tail consolidation relies on it to run the engine once)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm import inference
from simulator.llm.architecture import load_model
from simulator.llm.inference import ResumableRun, RolloutEngine, RolloutLayout, run_all_into

MODEL = load_model("qwen2.5-7b")
DEVICE = get_device("h100")
# few slots and a small KV share so that admissions, preemptions and re-prefills all happen
LAYOUT = RolloutLayout(tp=1, max_num_seqs=8, gpu_memory_utilization=0.25)


def _engine(p, r) -> RolloutEngine:
    e = RolloutEngine(MODEL, DEVICE, LAYOUT)
    e.add_many(range(len(p)), p, r, 0.0)
    return e


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), every=st.integers(1, 9), frac=st.floats(0.0, 1.2))
def test_restored_interrupt_equals_fresh_engine(seed, n, every, frac):
    rng = np.random.default_rng(seed)
    p = rng.integers(1, 600, n)
    r = rng.integers(2, 3000, n)
    run = ResumableRun(_engine(p, r), every=every)
    finished = run.run()
    fresh_all = _engine(p, r).run()
    assert finished == fresh_all                      # same finishes, same times, same order
    stop = frac * max(t for _, t in finished)
    restored = run.interrupt_at(stop)
    fresh = _engine(p, r)
    done = fresh.advance_to(stop)
    expect = fresh.interrupt(stop)
    assert restored.partial == expect.partial
    restored_done = {s for s, t in finished if t <= stop}
    assert restored_done == {s for s, _ in done} | {s for s, _ in expect.finished}


def _state_of(engine: RolloutEngine) -> dict:
    return {name: list(value) if isinstance(value, (list, type(engine._waiting))) else value
            for name, value in engine.__dict__.items() if name not in ("_arrays", "_added", "_slot_of", "_owner", "cost")}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), many=st.booleans(), frac=st.floats(0.0, 1.2))
def test_the_start_of_an_untouched_array_run_is_the_engine_copy_then(seed, n, many, frac):
    """ResumableRun keeps an untouched engine's start before its array run without copying its
    slot lists (inference._UntouchedStart): restored, it is the engine as engine.copy() gave it
    then, even after the engine ran, took more sequences and ran again; interrupts restored from
    it (times before the run's first event among them) equal a fresh engine's."""
    rng = np.random.default_rng(seed)
    p, r = rng.integers(1, 600, n), rng.integers(2, 3000, n)
    engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=64))
    engine.add_many(range(n), p, r, 0.0, group_ids=np.arange(n) // 3)
    assert engine._untouched() and engine._fast_ok(1)
    want = _state_of(engine.copy())
    run = ResumableRun(engine, every=3)
    old = inference.FAST_RUN_MIN_SEQUENCES
    inference.FAST_RUN_MIN_SEQUENCES = 1
    try:
        if many:
            run_all_into([run], [np.full(n, np.nan)])
        else:
            run.run_into(np.full(n, np.nan))
        assert isinstance(run._copies[0], inference._UntouchedStart) and run._trace is not None
        assert _state_of(run._copies[0].copy()) == want
        engine.add_many([n, n + 1], [30, 40], [50, 60], engine.t, [3, 0])   # the engine goes on
        engine.run()
        assert _state_of(run._copies[0].copy()) == want
    finally:
        inference.FAST_RUN_MIN_SEQUENCES = old
    first = float(run._trace.time[0])
    for now in (0.0, first / 2, first, frac * first * 3):
        again = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=64))
        again.add_many(range(n), p, r, 0.0, group_ids=np.arange(n) // 3)
        assert run.interrupt_at(now).partial == again.interrupt(now).partial


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0.0, 1.2))
def test_thinned_copies_keep_restored_interrupts_exact(seed, frac):
    """Past MAX_RESUME_COPIES the copies thin out (every other one, the spacing doubled): memory stays
    bounded (an AReaL run with a deep queue kept thousands of copies, gigabytes) and an interrupt
    restored from a farther copy still equals a fresh engine's."""
    import pytest

    rng = np.random.default_rng(seed)
    p, r = rng.integers(1, 600, 40), rng.integers(2, 3000, 40)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inference, "MAX_RESUME_COPIES", 3)
        run = ResumableRun(_engine(p, r), every=1)
        finished = run.run()
        assert len(run._copies) <= 3 and run._keys == sorted(run._keys)
    assert finished == _engine(p, r).run()
    stop = frac * max(t for _, t in finished)
    fresh = _engine(p, r)
    fresh.advance_to(stop)
    assert run.interrupt_at(stop).partial == fresh.interrupt(stop).partial


def test_a_copy_keeps_its_own_records_and_slot_map_while_the_original_adds():
    """add_many extends the records and the id -> slot map in place while no copy may hold them (a
    rebuild per add made many small adds quadratic); after a copy each rebinds before it adds."""
    engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=64))
    engine.add_many([0, 1], [10, 10], [20, 20], 0.0)
    records = engine._p
    engine.add_many([5], [11], [21], 0.0)
    assert engine._p is records and engine._p == [10, 10, 11]        # in place: no copy holds them
    engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=64))
    engine.add_many([0, 1], [10, 10], [20, 20], 0.0)
    snapshot = engine.copy()
    engine.add_many([2], [10], [20], 0.0)
    assert len(snapshot._id) == len(snapshot._p) == len(snapshot._arrival) == 2   # the copy's stay
    snapshot.add_many([2], [10], [20], 0.0)                 # not in the copy: it may take it
    with pytest.raises(ValueError, match="already in this engine"):
        engine.add_many([2], [10], [20], 0.0)
    with pytest.raises(ValueError, match="already in this engine"):
        snapshot.add_many([1], [10], [20], 0.0)
    assert engine._slot_map() == {0: 0, 1: 1, 2: 2} and snapshot._slot_map() == {0: 0, 1: 1, 2: 2}
