"""Several engines run together (inference.run_all_into / fast_runs: their array runs timed in one
pass) against each engine run alone: every figure equal, bit for bit - finish times, busy time,
tokens, the clock, and a ResumableRun's progress and interrupts at any time. Engines on one step
cost are timed together, engines on others apart; ones the array run cannot take (staggered
arrivals, chunked prefill, token budgets, a tight KV cache) fall back to their own event loop."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.llm import inference
from simulator.llm.inference import ResumableRun, RolloutEngine, StepCost, fast_runs, run_all_into
from tests.llm.test_engine_vs_frozen import DEVICE, MODELS, Case, cases


@pytest.fixture(autouse=True)
def _small_runs_take_the_fast_path(monkeypatch):
    """The generated cases are small: let every one of them reach the array run."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 1)
    monkeypatch.setattr(inference, "FAST_RUN_MANY_MIN_SEQUENCES", 1)


def _dealt(case: Case, parts: int) -> list[Case]:
    """The case's sequences dealt round-robin over ``parts`` engines of its configuration."""
    seqs = [s for _, batch in case.adds for s in batch]
    t = case.adds[0][0]
    return [Case(case.model, case.layout, case.params, [(t, seqs[i::parts])]) for i in range(min(parts, len(seqs)))]


def _engines(groups: list[list[Case]]) -> list[RolloutEngine]:
    """One engine per case; the cases of one group share one StepCost object (timed together)."""
    out = []
    for group in groups:
        first = group[0]
        cost = StepCost(MODELS[first.model], DEVICE, first.layout, first.params)
        for case in group:
            engine = RolloutEngine(MODELS[case.model], DEVICE, case.layout, case.params, cost=cost)
            i = 0
            for time, batch in case.adds:
                p, r, g, grp = (list(x) for x in zip(*batch, strict=True))
                engine.add_many(range(i, i + len(batch)), p, r, time, g, group_ids=grp)
                i += len(batch)
            out.append(engine)
    return out


@st.composite
def engine_groups(draw: st.DrawFn) -> list[list[Case]]:
    shared = draw(cases(staggered=False))
    if draw(st.booleans()):   # a roomy KV cache, one blocking prefill per admission: the array run's inputs
        shared.params = shared.params.model_copy(update={"workspace_bytes": 0.0, "chunked_prefill": False,
                                                         "max_num_batched_tokens": None})
    groups = [_dealt(shared, draw(st.integers(1, 6) | st.integers(2, 6)))]
    groups += [[c] for c in draw(st.lists(cases(staggered=draw(st.booleans())), max_size=2))]
    return groups


def _state(engine: RolloutEngine) -> tuple:
    return (engine.t, engine.busy_s, engine.generated_tokens, engine.preemptions, engine._S, engine._K, engine._n,
            engine._order, tuple(engine._state), tuple(engine.counts().items()))


def _warmed(engines: list[RolloutEngine], frac: float) -> list[RolloutEngine]:
    """The engines advanced by their event loop to ``frac`` of their first finish (0: fresh), so
    that the array runs start with sequences running, steps taken and time spent."""
    if frac > 0:
        for engine in engines:
            first = engine.copy()._drain(float("inf"))
            if first:
                engine.advance_to(frac * first[0][0])
    return engines


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=engine_groups(), resumable=st.booleans(), warm=st.just(0.0) | st.floats(0.05, 3.0),
       at=st.lists(st.floats(0.0, 1.2), min_size=1, max_size=4))
def test_engines_run_together_equal_each_run_alone(groups, resumable, warm, at) -> None:
    together, alone = _warmed(_engines(groups), warm), _warmed(_engines(groups), warm)
    wrap = (lambda e: ResumableRun(e, every=3)) if resumable else (lambda e: e)
    runs, solo = [wrap(e) for e in together], [wrap(e) for e in alone]
    # interrupts are asked from where the runs start on (the engines' clocks and last adds)
    floors = [max(e.t, e._last_add) for e in together]
    finish = [np.full(len(e._id), np.nan) for e in together]
    finish_solo = [np.full(len(e._id), np.nan) for e in alone]
    run_all_into(runs, finish)
    for run, f in zip(solo, finish_solo, strict=True):
        run.run_into(f)
    for a, b, fa, fb in zip(together, alone, finish, finish_solo, strict=True):
        assert fa.tobytes() == fb.tobytes()
        assert _state(a) == _state(b)
    if not resumable:
        return
    for ra, rb, fb, floor in zip(runs, solo, finish_solo, floors, strict=True):
        end = float(np.nanmax(fb)) if not np.isnan(fb).all() else 1.0
        for frac in at:
            now = max(floor, frac * end)
            ids_a, made_a = ra.progress_at(now)
            ids_b, made_b = rb.progress_at(now)
            assert ids_a.tobytes() == ids_b.tobytes() and made_a.tobytes() == made_b.tobytes()
            assert ra.interrupt_at(now) == rb.interrupt_at(now)
            assert ra.counts_at(now) == rb.counts_at(now)   # the counts by then (RolloutEngine.counts) too


def test_fast_runs_of_one_engine_is_its_own_fast_run() -> None:
    """fast_runs([e]) is e._fast_run (the single-engine path is the same code): a closed check on
    equal sequences, where every step admits nothing after the first."""
    case = Case("qwen2.5-7b", inference.RolloutLayout(tp=1, ep=1, max_num_seqs=8), inference.InferenceParams(),
                [(0.0, [(100, 50, 0, i) for i in range(8)])])
    a, b = _engines([[case]]), _engines([[case]])
    trace = fast_runs(a, outbox=False)[0]
    b[0]._fast_run(outbox=False)
    assert _state(a[0]) == _state(b[0])
    # 8 equal sequences admitted at once, all running to the end together: one drain event
    assert len(trace.time) == 2 and np.all(trace.out_time == trace.time[-1])
