"""ResumableRun: an interrupt restored from an engine copy equals a fresh engine run to the same
time (the colocated StaleSync tail consolidation relies on it to run the engine once)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import ResumableRun, RolloutEngine, RolloutLayout

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
