"""The optimised rollout engine (llm/inference.py: RolloutEngine's inlined event loop, advance_to,
interrupt, ResumableRun) against a plain reference written from its docstrings.

The reference steps one decode step at a time (slow, obviously correct) with the engine's own
StepCost, so only the scheduling is compared, not the cost model:
- a FIFO waiting queue; at every step boundary, in this order: sequences that reached their
  response length leave (KV freed); while the next decode step would not fit the KV cache
  (held > capacity: a step writes the KV of each sequence's newest token, so it needs a slot for
  every token held, prompt and generated), the newest running sequence is preempted to the front of the queue,
  keeping its generated tokens (recompute); then waiting sequences that have arrived are admitted in
  FIFO order while fewer than max_running run and the next step still fits after their prefill;
- the sequences admitted at one boundary are prefilled together in one step that yields each its
  next token (a sequence whose last token that is finishes at the prefill's end);
- otherwise one decode step of every running sequence (one token each) at
  StepCost.decode_step_s(n, KV held); an idle instance waits for the next arrival.
The reference covers the CPU-side mechanisms (eager launches, async scheduling: they live in
StepCost) and the default scheduling (no token budget, no chunked prefill, no prefix groups);
those three are checked in closed form in tests/llm/test_engine_costs.py.
An interrupt at `now` keeps every token produced by `now` (an unfinished step or prefill yields
nothing) and the busy time up to `now`.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import (
    InferenceParams,
    PartialSequence,
    ResumableRun,
    RolloutEngine,
    RolloutLayout,
    StepCost,
    simulate_rollout,
)

DEVICE = get_device("h100")
MODELS = {"qwen2.5-7b": load_model("qwen2.5-7b"), "qwen3-30b-a3b": load_model("qwen3-30b-a3b")}
REL = 1e-9


# ---- the reference ----------------------------------------------------------------------------------
@dataclass
class Seq:
    seq_id: int
    prompt: int
    response: int
    arrival: float
    generated: int
    history: list[tuple[float, int]] = field(default_factory=list)  # (time, generated from then on)
    finish: float | None = None

    @property
    def kv(self) -> int:
        return self.prompt + self.generated


@dataclass
class Reference:
    """One instance, stepped decode step by decode step."""

    cost: StepCost
    t: float = 0.0
    busy: list[tuple[float, float]] = field(default_factory=list)
    generated_tokens: int = 0
    preemptions: int = 0

    def run(self, seqs: list[Seq]) -> None:
        waiting: deque[Seq] = deque(sorted(seqs, key=lambda s: s.arrival))  # stable: add order
        running: list[Seq] = []  # in admission order: the newest is last
        for s in seqs:
            s.history.append((s.arrival, s.generated))
        while waiting or running:
            self._boundary(running, waiting)
            if self._admit(running, waiting):
                continue
            if running:
                self._decode(running)
            elif waiting:
                self.t = max(self.t, waiting[0].arrival)

    def _capacity_ok(self, running: list[Seq]) -> bool:
        """Room for one more decode step of every running sequence."""
        return sum(s.kv for s in running) <= self.cost.kv_capacity_tokens

    def _boundary(self, running: list[Seq], waiting: deque[Seq]) -> None:
        for s in [s for s in running if s.generated >= s.response]:
            s.finish = self.t
            running.remove(s)
        while running and not self._capacity_ok(running):
            victim = running.pop()
            waiting.appendleft(victim)
            self.preemptions += 1

    def _admit(self, running: list[Seq], waiting: deque[Seq]) -> bool:
        admitted: list[Seq] = []
        while waiting and len(running) < self.cost.max_running and waiting[0].arrival <= self.t:
            head = waiting[0]
            # every sequence admitted now holds its context plus the token its prefill yields
            kv_after = sum(s.kv for s in running) + len(admitted) + head.kv + 1
            if kv_after > self.cost.kv_capacity_tokens:
                break
            running.append(waiting.popleft())
            admitted.append(head)
        if not admitted:
            return False
        tokens = sum(s.kv for s in admitted)
        pairs = 0.0
        for s in admitted:
            pairs += s.kv * (s.kv + 1) / 2.0
        self._busy_for(self.cost.prefill_s(tokens, pairs, len(admitted)))
        for s in admitted:
            self._token(s)
            if s.generated >= s.response:
                s.finish = self.t
                running.remove(s)
        return True

    def _decode(self, running: list[Seq]) -> None:
        self._busy_for(self.cost.decode_step_s(len(running), sum(s.kv for s in running)))
        for s in running:
            self._token(s)

    def _busy_for(self, seconds: float) -> None:
        self.busy.append((self.t, self.t + seconds))
        self.t += seconds

    def _token(self, s: Seq) -> None:
        s.generated += 1
        s.history.append((self.t, s.generated))
        self.generated_tokens += 1

    # -- what an interrupt at `now` sees --------------------------------------------------------------
    def busy_by(self, now: float) -> float:
        return sum(max(0.0, min(end, now) - start) for start, end in self.busy)

    @staticmethod
    def generated_by(s: Seq, now: float) -> int:
        return [g for time, g in s.history if time <= now][-1]


# ---- inputs ------------------------------------------------------------------------------------------
@dataclass
class Case:
    model: str
    layout: RolloutLayout
    params: InferenceParams
    adds: list[tuple[float, list[tuple[int, int, int]]]]  # (time, [(prompt, response, generated)])

    def seqs(self, until: float = math.inf) -> list[Seq]:
        out, i = [], 0
        for time, batch in self.adds:
            for p, r, g in batch:
                if time <= until:
                    out.append(Seq(i, p, r, time, g))
                i += 1
        return out

    def cost(self) -> StepCost:
        return StepCost(MODELS[self.model], DEVICE, self.layout, self.params)

    def engine(self, until: float = math.inf) -> RolloutEngine:
        engine = RolloutEngine(MODELS[self.model], DEVICE, self.layout, self.params)
        i = 0
        for time, batch in self.adds:
            if time <= until:
                p, r, g = (list(x) for x in zip(*batch, strict=True))
                engine.add_many(range(i, i + len(batch)), p, r, time, g)
            i += len(batch)
        return engine


_LAYOUTS = {"qwen2.5-7b": [(1, 1), (2, 1), (4, 1)], "qwen3-30b-a3b": [(1, 1), (1, 2), (2, 2), (1, 4)]}


@st.composite
def cases(draw: st.DrawFn) -> Case:
    model = draw(st.sampled_from(sorted(MODELS)))
    tp, ep = draw(st.sampled_from(_LAYOUTS[model]))
    layout = RolloutLayout(tp=tp, ep=ep, max_num_seqs=draw(st.integers(1, 8)))
    seq = st.integers(1, 200).flatmap(
        lambda r: st.tuples(st.integers(1, 300), st.just(r), st.integers(0, r - 1) | st.just(0)))
    batches = draw(st.lists(st.lists(seq, min_size=1, max_size=5), min_size=1, max_size=4))
    gaps = draw(st.lists(st.just(0.0) | st.floats(1e-4, 0.3), min_size=len(batches), max_size=len(batches)))
    times = np.cumsum(gaps).tolist()
    longest = max(p + r for batch in batches for p, r, _ in batch)
    # KV per replica: from just the longest sequence (every step preempts) to roomy, or right at the
    # edge of admitting the first j sequences of the first batch together (the boundary cases)
    j = draw(st.integers(1, len(batches[0])))
    edge = sum(p + g + 1 for p, _, g in batches[0][:j]) + draw(st.integers(-2, 2))
    replica_tokens = draw(st.integers(longest + 1, max(longest + 2, 6 * longest))
                          | st.just(max(longest + 1, -(-edge // ep))))
    base = StepCost(MODELS[model], DEVICE, layout, InferenceParams(workspace_bytes=0.0))
    free = DEVICE.hbm_bytes * layout.gpu_memory_utilization - base.weight_bytes_dev
    workspace = free - (replica_tokens + 0.5) * base.kv_bytes_per_token_dev
    # the CPU floor's path too: eager launches (long ones: launch-bound) and async scheduling
    params = InferenceParams(workspace_bytes=workspace,
                             step_overhead_s=draw(st.sampled_from([0.0, 2e-3])),
                             enforce_eager=draw(st.booleans()), async_scheduling=draw(st.booleans()),
                             launch_overhead_s=draw(st.sampled_from([None, 1e-4])))
    case = Case(model, layout, params, list(zip(times, batches, strict=True)))
    assert case.cost().kv_capacity_replica == replica_tokens
    return case


def _reference(case: Case, until: float = math.inf) -> tuple[Reference, list[Seq]]:
    ref = Reference(case.cost())
    seqs = case.seqs(until)
    ref.run(seqs)
    return ref, seqs


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _interrupt_time(case: Case, frac: float) -> float:
    """`frac` of the run's length, kept off the step ends: there the engine's closed-form times and
    the reference's step-by-step sums differ in the last bits, and so would which side of `now`
    a step ends on (that is rounding, not a difference of semantics)."""
    full, _ = _reference(case)
    ends = [end for _, end in full.busy]
    now = frac * max(ends)
    assume(not any(math.isclose(now, end, rel_tol=1e-9, abs_tol=1e-12) for end in ends))
    return now


# ---- the tests ---------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(cases())
def test_engine_run_equals_the_reference(case: Case) -> None:
    ref, seqs = _reference(case)
    expected = np.array([s.finish for s in seqs])
    engine = case.engine()
    finished = engine.run()
    got = np.full(len(seqs), np.nan)
    for seq_id, time in finished:
        got[seq_id] = time
    assert np.allclose(got, expected, rtol=REL, atol=1e-12), (got, expected)
    assert [t for _, t in finished] == sorted(t for _, t in finished)  # in finish order
    assert engine.preemptions == ref.preemptions
    assert engine.generated_tokens == ref.generated_tokens
    assert _close(engine.busy_s, ref.busy_by(math.inf))
    # ResumableRun and run_into: the same event loop through its other entries
    into = np.full(len(seqs), np.nan)
    resumable = case.engine()
    ResumableRun(resumable, every=3).run_into(into)
    assert np.array_equal(into, got)
    assert resumable.busy_s == engine.busy_s and resumable.preemptions == engine.preemptions


@settings(max_examples=60, deadline=None)
@given(cases(), st.lists(st.floats(0.0, 1.0), max_size=6))
def test_advance_in_chunks_equals_one_run(case: Case, cuts: list[float]) -> None:
    whole = case.engine()
    finished = whole.run()
    if not finished:
        return
    horizon = max(t for _, t in finished)
    chunked = case.engine()
    seen = []
    for stop in sorted(c * horizon for c in cuts):
        seen += chunked.advance_to(stop)
        assert chunked.next_event_time() > stop or chunked.next_event_time() == math.inf or seen
    seen += chunked.advance_to(math.inf)
    assert seen == finished


@settings(max_examples=100, deadline=None)
@given(cases(), st.floats(0.0, 1.05))
def test_interrupt_equals_the_reference(case: Case, frac: float) -> None:
    now = _interrupt_time(case, frac)
    ref, seqs = _reference(case, until=now)  # only what was added by `now` exists then
    result = case.engine(until=now).interrupt(now)
    assert sorted(f.seq_id for f in result.finished) == sorted(s.seq_id for s in seqs if s.finish <= now)
    for seq_id, time in result.finished:
        assert _close(time, next(s.finish for s in seqs if s.seq_id == seq_id))
    expected = [PartialSequence(s.seq_id, s.prompt, s.response, Reference.generated_by(s, now))
                for s in seqs if s.finish > now]
    assert result.partial == expected


@settings(max_examples=60, deadline=None)
@given(cases(), st.floats(0.0, 1.05))
def test_interrupt_busy_and_tokens_up_to_now(case: Case, frac: float) -> None:
    now = _interrupt_time(case, frac)
    ref, seqs = _reference(case, until=now)
    engine = case.engine(until=now)
    engine.interrupt(now)
    assert _close(engine.busy_s, ref.busy_by(now))
    produced = sum(Reference.generated_by(s, now) - s.history[0][1] for s in seqs)
    assert engine.generated_tokens == produced
    if all(time <= now for time, _ in case.adds):  # ResumableRun needs every add before its run
        run = ResumableRun(case.engine(), every=2)
        run.run()
        assert run.interrupt_at(now).partial == engine_partial(case, now)


def engine_partial(case: Case, now: float) -> list[PartialSequence]:
    return case.engine(until=now).interrupt(now).partial


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 3))
def test_round_robin_dispatch_equals_one_reference_per_instance(case: Case, instances: int) -> None:
    """simulate_rollout deals the sequences (in arrival order) round robin over the instances."""
    layout = case.layout.model_copy(update={"instances": instances})
    seqs = [s for s in case.seqs() if s.generated == 0]
    if not seqs:
        return
    res = simulate_rollout(MODELS[case.model], DEVICE, layout, [s.prompt for s in seqs],
                           [s.response for s in seqs], params=case.params,
                           arrival_s=[s.arrival for s in seqs])
    generated = preemptions = 0
    for i in range(instances):
        mine = [Seq(j, s.prompt, s.response, s.arrival, 0) for j, s in enumerate(seqs) if j % instances == i]
        ref = Reference(StepCost(MODELS[case.model], DEVICE, layout, case.params))
        ref.run(mine)
        for s in mine:
            assert res.instance[s.seq_id] == i
            assert _close(res.finish_s[s.seq_id], s.finish)
        assert _close(res.busy_s[i], ref.busy_by(math.inf))
        generated += ref.generated_tokens
        preemptions += ref.preemptions
    assert res.generated_tokens == generated and res.preemptions == preemptions


def test_the_reference_sees_preemptions_and_admission_limits() -> None:
    """The generator reaches the interesting regimes (a KV-tight case preempts, a slot limit queues)."""
    layout = RolloutLayout(tp=1, max_num_seqs=2)
    base = StepCost(MODELS["qwen2.5-7b"], DEVICE, layout, InferenceParams(workspace_bytes=0.0))
    free = DEVICE.hbm_bytes * layout.gpu_memory_utilization - base.weight_bytes_dev
    params = InferenceParams(workspace_bytes=free - 260.5 * base.kv_bytes_per_token_dev)
    case = Case("qwen2.5-7b", layout, params, [(0.0, [(50, 100, 0), (50, 100, 0), (50, 100, 0)])])
    ref, seqs = _reference(case)
    engine = case.engine()
    engine.run()
    assert ref.preemptions > 0 and engine.preemptions == ref.preemptions
    assert seqs[2].history[1][0] > 0.0  # the third waited for a slot


@pytest.mark.parametrize("model", sorted(MODELS))
def test_reference_decode_step_is_the_engine_cost(model: str) -> None:
    cost = StepCost(MODELS[model], DEVICE, RolloutLayout())
    ref = Reference(cost)
    s = Seq(0, 10, 3, 0.0, 0)
    ref.run([s])
    prefill = cost.prefill_s(10, 55.0)
    steps = cost.decode_step_s(1, 11) + cost.decode_step_s(1, 12)
    assert _close(s.finish, prefill + steps) and ref.generated_tokens == 3
