"""The rollout engine against its frozen copy (tests/llm/reference_engine.py, the engine before its
array fast path): on random inputs every figure must be equal, bit for bit - finish times and their
order, busy time, tokens, preemptions, the clock, interrupts (fresh and through ResumableRun), and
simulate_rollout. The fast path (RolloutEngine._fast_run) keeps the engine's floating-point
operations and their order, so no tolerance is needed; the inputs reach it (roomy KV cache, every
sequence arrived) and the event loop it falls back to (tight KV, staggered arrivals, chunked
prefill, token budgets), with the CPU floor (eager launches, async scheduling) on and off."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm import inference
from simulator.llm.architecture import load_model
from simulator.llm.inference import (
    InferenceParams,
    ResumableRun,
    RolloutEngine,
    RolloutLayout,
    simulate_rollout,
)
from tests.llm import reference_engine as frozen

DEVICE = get_device("h100")
MODELS = {"qwen2.5-7b": load_model("qwen2.5-7b"), "qwen3-30b-a3b": load_model("qwen3-30b-a3b")}
_LAYOUTS = {"qwen2.5-7b": [(1, 1), (2, 1)], "qwen3-30b-a3b": [(1, 1), (1, 2)]}


@pytest.fixture(autouse=True)
def _small_runs_take_the_fast_path(monkeypatch):
    """The generated cases are small: let every one of them reach the array run."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 1)


@dataclass
class Case:
    model: str
    layout: RolloutLayout
    params: InferenceParams
    adds: list[tuple[float, list[tuple[int, int, int, int]]]]   # (time, [(prompt, response, generated, group)])

    def build(self, cls):
        engine = cls(MODELS[self.model], DEVICE, self.layout, self.params)
        i = 0
        for time, batch in self.adds:
            p, r, g, grp = (list(x) for x in zip(*batch, strict=True))
            engine.add_many(range(i, i + len(batch)), p, r, time, g, group_ids=grp)
            i += len(batch)
        return engine

    def as_for_frozen(self) -> Case:
        """The case the frozen engine models as today's: its prefix cache hits only within one
        admission step (today's also at a later one while a sample of the prompt runs:
        tests/llm/test_prefix_cache.py), so with prefix caching on each sequence is its own prompt."""
        if not self.params.enable_prefix_caching:
            return self
        return Case(self.model, self.layout, self.params,
                    [(t, [(p, r, g, -1) for p, r, g, _ in batch]) for t, batch in self.adds])


@st.composite
def cases(draw: st.DrawFn, staggered: bool = True, kv: str = "any") -> Case:
    """A random case; ``kv`` "between": a KV cache from the fast path's bound (the contexts of the
    sequences that run at once) to the bound on all the contexts, edges included."""
    model = draw(st.sampled_from(sorted(MODELS)))
    tp, ep = draw(st.sampled_from(_LAYOUTS[model]))
    layout = RolloutLayout(tp=tp, ep=ep, max_num_seqs=draw(st.integers(1, 24 if kv == "any" else 6)))   # (fewer slots than sequences)
    seq = st.integers(1, 400).flatmap(
        lambda r: st.tuples(st.integers(1, 300), st.just(r), st.just(0) | st.integers(0, r - 1), st.integers(0, 5)))
    batches = draw(st.lists(st.lists(seq, min_size=1, max_size=40), min_size=1, max_size=3 if staggered else 1))
    gaps = draw(st.lists(st.just(0.0) | st.floats(1e-4, 0.2), min_size=len(batches), max_size=len(batches)))
    times = np.cumsum(gaps).tolist()
    longest = max(p + r for batch in batches for p, r, _, _ in batch)
    total = sum(p + r for batch in batches for p, r, _, _ in batch)
    # the contexts of the most sequences that run at once (max_num_seqs a replica): the fast path's bound
    busiest = sum(sorted((p + r for batch in batches for p, r, _, _ in batch), reverse=True)[:layout.max_num_seqs * ep])
    # KV per replica: tight (preemptions), roomy (the fast path), or at the fast path's edge (its bound
    # on the busiest contexts, or on them all)
    low, high = (-(-(tokens + layout.max_num_seqs * ep + 2) // ep) for tokens in (busiest, total))
    if kv == "between":
        replica_tokens = max(longest + 1, draw(st.integers(low - 2, high + 1)))
    else:
        replica_tokens = max(longest + 1, draw(st.integers(longest + 1, max(longest + 2, 3 * longest))
                                               | st.integers(-(-total // ep) + layout.max_num_seqs + 2, 2 * total + 100)
                                               | st.sampled_from([low, high]).flatmap(
                                                   lambda edge: st.integers(edge - 2, edge + 1))))
    base = frozen.StepCost(MODELS[model], DEVICE, layout, InferenceParams(workspace_bytes=0.0))
    free = DEVICE.hbm_bytes * layout.gpu_memory_utilization - base.weight_bytes_dev
    chunked = draw(st.booleans()) and draw(st.booleans())
    params = InferenceParams(workspace_bytes=free - (replica_tokens + 0.5) * base.kv_bytes_per_token_dev,
                             step_overhead_s=draw(st.sampled_from([0.0, 2e-3])),
                             enforce_eager=draw(st.booleans()), async_scheduling=draw(st.booleans()),
                             enable_prefix_caching=draw(st.booleans()), chunked_prefill=chunked,
                             max_num_batched_tokens=draw(st.none() | st.integers(64, 2048)) if chunked else None,
                             cuda_graph_max_batch=draw(st.sampled_from([512, 4])))
    return Case(model, layout, params, list(zip(times, batches, strict=True)))


def _state(engine) -> tuple:
    return (engine.t, engine.busy_s, engine.generated_tokens, engine.preemptions)


@settings(max_examples=120, deadline=None)
@given(cases())
def test_run_equals_the_frozen_engine(case: Case) -> None:
    case = case.as_for_frozen()
    new, old = case.build(RolloutEngine), case.build(frozen.RolloutEngine)
    assert new.run() == old.run()
    assert _state(new) == _state(old)
    into_new, into_old = np.full(200, np.nan), np.full(200, np.nan)
    ResumableRun(case.build(RolloutEngine)).run_into(into_new)
    frozen.ResumableRun(case.build(frozen.RolloutEngine)).run_into(into_old)
    assert np.array_equal(into_new, into_old, equal_nan=True)


@settings(max_examples=120, deadline=None)
@given(cases(staggered=False), st.floats(0.0, 1.05), st.booleans(), st.integers(1, 9))
def test_interrupts_equal_the_frozen_engine(case: Case, frac: float, on_an_event: bool, every: int) -> None:
    """Fresh engines interrupted at `now`, and ResumableRun's interrupt_at (the array trace here,
    copies every `every` events there); `now` anywhere, or exactly on a finish."""
    case = case.as_for_frozen()
    finished = case.build(frozen.RolloutEngine).run()
    times = sorted({t for _, t in finished})
    now = times[min(len(times) - 1, int(frac * len(times)))] if on_an_event else frac * times[-1]
    new, old = case.build(RolloutEngine), case.build(frozen.RolloutEngine)
    a, b = new.interrupt(now), old.interrupt(now)
    assert a.partial == b.partial and a.finished == b.finished
    assert _state(new) == _state(old)
    run_new, run_old = ResumableRun(case.build(RolloutEngine), every), frozen.ResumableRun(case.build(frozen.RolloutEngine), every)
    assert run_new.run() == run_old.run() == finished
    got = run_new.interrupt_at(now)
    assert got.partial == run_old.interrupt_at(now).partial == b.partial
    assert {s for s, _ in got.finished} <= {s for s, t in finished if t <= now}


@settings(max_examples=60, deadline=None)
@given(cases(staggered=False), st.floats(0.05, 0.95))
def test_resume_after_an_interrupt_equals_the_frozen_engine(case: Case, frac: float) -> None:
    """Interrupt, then resume the partial sequences on the same engine (a partial rollout round)."""
    case = case.as_for_frozen()
    horizon = max(t for _, t in case.build(frozen.RolloutEngine).run())
    engines = case.build(RolloutEngine), case.build(frozen.RolloutEngine)
    outs = []
    for engine in engines:
        start = case.adds[-1][0]
        now = start + frac * (horizon - start)
        partial = engine.interrupt(now).partial
        if partial:
            engine.add_many([s.seq_id for s in partial], [s.prompt_len for s in partial],
                            [s.response_len for s in partial], now, [s.generated for s in partial])
        outs.append((engine.run(), _state(engine)))
    assert outs[0] == outs[1]


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 4), st.sampled_from(["round_robin", "least_loaded"]))
def test_simulate_rollout_equals_the_frozen_engine(case: Case, instances: int, policy: str) -> None:
    layout = case.layout.model_copy(update={"instances": instances})
    seqs = [(p, r, t) for t, batch in case.adds for p, r, _, _ in batch]
    p, r, t = (list(x) for x in zip(*seqs, strict=True))
    kw = dict(params=case.params, policy=policy, arrival_s=t)
    a = simulate_rollout(MODELS[case.model], DEVICE, layout, p, r, **kw)
    b = frozen.simulate_rollout(MODELS[case.model], DEVICE, layout, p, r, **kw)
    assert np.array_equal(a.finish_s, b.finish_s) and np.array_equal(a.busy_s, b.busy_s)
    assert (a.makespan_s, a.generated_tokens, a.preemptions) == (b.makespan_s, b.generated_tokens, b.preemptions)


def test_the_cases_reach_the_fast_path_and_the_event_loop() -> None:
    """The generator's two regimes exist: a roomy case runs in arrays, a KV-tight one does not. The
    12 contexts (150..227 tokens, 2,262 in all) do not fit in 1,000 tokens, but the 4 that can run
    at once do (866 at most, with a token a slot and 2 to spare): that KV cache never binds either."""
    layout = RolloutLayout(tp=1, max_num_seqs=4)
    batch = [(50, 100 + 7 * i, 0, -1 - i) for i in range(12)]
    base = frozen.StepCost(MODELS["qwen2.5-7b"], DEVICE, layout, InferenceParams(workspace_bytes=0.0))
    free = DEVICE.hbm_bytes * layout.gpu_memory_utilization - base.weight_bytes_dev
    for tokens, fast in ((400, False), (871, False), (872, True), (1000, True), (10_000, True)):
        case = Case("qwen2.5-7b", layout, InferenceParams(workspace_bytes=free - (tokens + 0.5) * base.kv_bytes_per_token_dev),
                    [(0.0, batch)])
        engine = case.build(RolloutEngine)
        assert engine._fast_ok() is fast
        assert engine.run() == case.build(frozen.RolloutEngine).run()
        assert math.isfinite(engine.t)


@pytest.mark.parametrize("max_num_seqs", [1, 3, 8, 16])
def test_sequences_done_with_their_prefill_take_the_fast_path(max_num_seqs: int) -> None:
    """A sequence whose prefill yields its last token (a resumed one with one token left) finishes
    at the prefill's end and frees its slot for an admission at the same step: the array run
    takes it (it fell back to the event loop and its engine copies before), equal to the frozen
    engine in every figure and at interrupts anywhere, inside those prefills too. With 16 slots
    the first event admits all 12 (inference._all_admitted_walk: no heap)."""
    layout = RolloutLayout(tp=1, max_num_seqs=max_num_seqs)
    batch = [(40 + 3 * i, r, r - 1 if i % 3 == 0 else 0, -1 - i) for i, r in enumerate([1, 60, 2, 90, 1, 1, 30, 5, 1, 44, 7, 1])]
    case = Case("qwen2.5-7b", layout, InferenceParams(), [(0.0, batch)])
    engine = case.build(RolloutEngine)
    assert engine._fast_ok()
    run, finished = _runs_as_frozen(case, engine)
    times = sorted({t for _, t in finished})
    probes = times + [(a + b) / 2 for a, b in zip(times, times[1:], strict=False)] + [t - 1e-9 for t in times]
    for now in probes:
        fresh = case.build(frozen.RolloutEngine).interrupt(now)
        got = run.interrupt_at(now)
        assert got.partial == fresh.partial, now
        assert {s for s, _ in got.finished} <= {s for s, t in finished if t <= now}


def _runs_as_frozen(case: Case, engine: RolloutEngine) -> tuple[ResumableRun, list]:
    """``engine`` runs to the frozen engine's finishes and final state, and so does a ResumableRun
    of the case (kept trace); returns that run and the finishes, for the interrupt probes."""
    finished = case.build(frozen.RolloutEngine).run()
    assert engine.run() == finished
    old = case.build(frozen.RolloutEngine)
    old.run()
    assert _state(engine) == _state(old)
    run = ResumableRun(case.build(RolloutEngine), 2)
    assert run.run() == finished and run._trace is not None
    return run, finished


@settings(max_examples=80, deadline=None)
@given(cases(staggered=False, kv="between"), st.floats(0.0, 1.05))
def test_a_cache_holding_the_running_contexts_not_all_equals_the_frozen_engine(case: Case, frac: float) -> None:
    """A KV cache too small for every context but not for those of the sequences that can run at
    once: it never binds, and the array run takes it (the event loop did before 2026-12-08); the
    run, a ResumableRun and an interrupt anywhere equal the frozen engine's."""
    case = case.as_for_frozen()
    engine = case.build(RolloutEngine)
    if not engine._fast_ok():   # (under the bound, or a chunked prefill or a token budget)
        assert engine.run() == case.build(frozen.RolloutEngine).run()
        return
    run, finished = _runs_as_frozen(case, engine)
    now = frac * max(t for _, t in finished)
    fresh = case.build(frozen.RolloutEngine).interrupt(now)
    got = run.interrupt_at(now)
    assert got.partial == fresh.partial
    assert {s for s, _ in got.finished} <= {s for s, t in finished if t <= now}


@pytest.mark.parametrize("lengths", [[60, 60, 60, 90, 30, 30, 60, 45, 45, 45, 10, 80],    # ties at finish steps
                                     [5 * i + 7 for i in range(14)]])
@pytest.mark.parametrize("rounds", [inference.FULL_SLOTS_ROUNDS, 0])
def test_full_slots_take_one_admission_per_finish(monkeypatch, lengths: list[int], rounds: int) -> None:
    """Every slot full and no sequence due at once: the walk's sorted form (inference._full_slots_finishes)
    is taken, or with no rounds its one-heapreplace-per-admission form (inference._full_slots_walk),
    and either equals the frozen engine in every figure and at interrupts anywhere, ties of finish
    steps included."""
    calls = []
    monkeypatch.setattr(inference, "FULL_SLOTS_ROUNDS", rounds)
    name = "_full_slots_finishes" if rounds else "_full_slots_walk"
    real = getattr(inference, name)
    monkeypatch.setattr(inference, name, lambda *a: (calls.append(got := real(*a)), got)[1])
    layout = RolloutLayout(tp=1, max_num_seqs=4)
    case = Case("qwen2.5-7b", layout, InferenceParams(), [(0.0, [(30 + i, r, 0, -1 - i) for i, r in enumerate(lengths)])])
    run, finished = _runs_as_frozen(case, case.build(RolloutEngine))
    assert calls and all(got is not None for got in calls)
    times = sorted({t for _, t in finished})
    for now in times + [(a + b) / 2 for a, b in zip(times, times[1:], strict=False)]:
        assert run.interrupt_at(now).partial == case.build(frozen.RolloutEngine).interrupt(now).partial, now


@pytest.mark.parametrize("ids", [range(3, 9), np.arange(3, 9), np.arange(3, 9, dtype=np.int32), [3, 4, 5, 6, 7, 8]])
@pytest.mark.parametrize("groups", [None, [0, 0, 1, 1, 2, -7], np.array([0, 0, 1, 1, 2, -7])])
def test_a_fresh_engine_keeps_the_record_arrays_it_was_given(ids, groups) -> None:
    """add_many on an empty engine keeps its input arrays as the record arrays (no round trip
    through the lists): equal, value and dtype, to what _record_arrays converts from the lists."""
    engine = RolloutEngine(MODELS["qwen2.5-7b"], DEVICE, RolloutLayout(tp=1))
    engine.add_many(ids, np.arange(10, 16), [50, 60, 70, 80, 90, 99], 0.25, group_ids=groups)
    kept = engine._record_arrays()
    engine._arrays = None
    converted = engine._record_arrays()
    for a, b in zip(kept, converted, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    engine.add_many([20], [5], [7], 0.5)   # a later add: the lists again (and the slot map)
    with pytest.raises(ValueError, match="already in this engine"):
        engine.add_many([4], [5], [7], 0.5)
