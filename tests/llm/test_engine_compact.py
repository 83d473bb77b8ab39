"""RolloutEngine._compact (copy() drops the done slots nothing refers to, renumbering the rest): an
engine compacted at every step of a random sequence of adds, advances, interrupts and copies gives,
bit for bit, what the same engine never compacted gives - finishes, interrupts, clock, busy time and
counts - with vLLM's and SGLang's admission, a tight KV cache (preemptions, retractions), prefix
caching, chunked prefill, resumed and paused-in-place requests and freed contexts kept (multi-turn)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm import inference
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, ResumableRun, RolloutEngine, RolloutLayout, StepCost

MODEL = load_model("qwen2.5-7b")
DEVICE = get_device("h100")


@pytest.fixture(autouse=True)
def _small_runs_take_the_fast_path(monkeypatch):
    """Small runs reach the array run too (its end state is compacted and copied as well)."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 1)


def _params(draw: st.DrawFn, layout: RolloutLayout, kv_tokens: int) -> InferenceParams:
    base = StepCost(MODEL, DEVICE, layout, InferenceParams(workspace_bytes=0.0))
    free = DEVICE.hbm_bytes * layout.gpu_memory_utilization - base.weight_bytes_dev
    chunked = draw(st.booleans())
    reserve = draw(st.booleans())
    return InferenceParams(workspace_bytes=free - (kv_tokens + 0.5) * base.kv_bytes_per_token_dev,
                           enable_prefix_caching=draw(st.booleans()), chunked_prefill=chunked,
                           max_num_batched_tokens=draw(st.none() | st.integers(64, 1024)) if chunked else None,
                           admission="reserve" if reserve else "kv",
                           max_new_tokens=draw(st.integers(50, 400)) if reserve else None)


@st.composite
def scripts(draw: st.DrawFn) -> tuple[RolloutEngine, list[tuple]]:
    """A fresh engine and the operations to drive it with: ("add", time, [(prompt, response,
    generated, group, kept)], whether to reuse done ids first), ("advance", time), ("interrupt", time),
    ("in_prefill", _) - an interrupt at the start of the prefill in flight, if any, ("copy",) - continue on a copy
    made now (the original left behind), ("resumable",) - a ResumableRun to the end, interrupted at
    a time drawn as a fraction of its run."""
    layout = RolloutLayout(tp=1, max_num_seqs=draw(st.integers(1, 12)))
    engine = RolloutEngine(MODEL, DEVICE, layout, _params(draw, layout, draw(st.integers(700, 4000))))
    if draw(st.booleans()):
        engine.keep_freed_contexts()
    seq = st.integers(2, 400).flatmap(lambda r: st.tuples(
        st.integers(1, 300), st.just(r), st.just(0) | st.integers(0, r - 1) | st.just(r - 1), st.integers(-1, 4), st.booleans()))
    ops, t = [], 0.0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["add", "add", "advance", "interrupt", "in_prefill", "copy", "resumable"]))
        t += draw(st.just(0.0) | st.floats(1e-3, 3.0))
        if kind == "add":
            ops.append(("add", t, draw(st.lists(seq, min_size=1, max_size=12)), draw(st.booleans())))
        elif kind in ("advance", "interrupt", "in_prefill"):
            ops.append((kind, t))
        elif kind == "resumable":
            ops.append(("resumable", draw(st.floats(0.0, 1.1)), draw(st.integers(1, 6))))
        else:
            ops.append(("copy",))
    return engine, ops


def _add(engine: RolloutEngine, ids: list[int], t: float, batch: list[tuple]) -> None:
    """Add ``batch`` at ``t`` under ``ids``."""
    p, r, g, grp, kept = (list(x) for x in zip(*batch, strict=True))
    kept_tokens = [(pp + gg) // 2 if k else 0 for pp, gg, k in zip(p, g, kept, strict=True)]
    engine.add_many(ids, p, r, t, g, group_ids=[x if x >= 0 else -1 - i for i, x in zip(ids, grp, strict=True)],
                    kept=kept_tokens)


def _figures(engine: RolloutEngine) -> tuple:
    return (engine.t, engine.busy_s, engine.generated_tokens, engine.preemptions, engine._S, engine._n,
            engine._K, engine._shared, engine._order, engine.counts(), engine.next_event_time())


def _drive(engine: RolloutEngine, ops: list[tuple], compact: bool) -> tuple[list, RolloutEngine]:
    """Every answer of the engine to ``ops`` (compacted before each operation when ``compact``)."""
    out, next_id, done = [], 0, []   # done: ids the engine returned (finished or interrupted), oldest first
    for op in ops:
        if compact and engine._order:
            engine._compact()
        if op[0] == "add":
            if op[1] >= engine._last_add:
                reused = done[:len(op[2])] if op[3] else []   # a sequence back (a multi-turn sample's next turn)
                del done[:len(reused)]
                fresh = len(op[2]) - len(reused)
                _add(engine, reused + list(range(next_id, next_id + fresh)), op[1], op[2])
                next_id += fresh
        elif op[0] == "advance":
            out.append(engine.advance_to(op[1]))
            done += [f.seq_id for f in out[-1]]
        elif op[0] in ("interrupt", "in_prefill"):
            at = op[1] if op[0] == "interrupt" else engine._prefill[0] if engine._prefill else -math.inf
            if at >= engine.t or engine._prefill and engine._prefill[0] <= at:   # (else an interrupt of the past)
                out.append(engine.interrupt(at))
                done += [f.seq_id for f in out[-1].finished] + [s.seq_id for s in out[-1].partial]
        elif op[0] == "copy":
            engine = engine.copy()
        else:   # a resumable run of a copy to the end, interrupted part way
            run = ResumableRun(engine.copy(), every=op[2])
            finished = run.run()
            end = max((f.time_s for f in finished), default=engine.t)
            at = engine.t + op[1] * (end - engine.t)
            out.append((finished, run.interrupt_at(at), run.counts_at(at)))
        out.append(_figures(engine))
    out.append(engine.run())
    out.append(_figures(engine))
    return out, engine


@settings(max_examples=150, deadline=None)
@given(scripts())
def test_a_compacted_engine_answers_as_the_engine_never_compacted(script):
    engine, ops = script
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inference, "COMPACT_MIN_DONE_SLOTS", 10**9)   # copy() never compacts
        plain, _ = _drive(engine.copy(), ops, compact=False)
        patch.setattr(inference, "COMPACT_MIN_DONE_SLOTS", 0)       # copy() compacts where slots are mostly done
        compacted, _ = _drive(engine.copy(), ops, compact=True)
    assert compacted == plain


def test_compact_keeps_the_referred_slots_only_and_a_copy_then_costs_them():
    """A run of 40 sequences on 4 slots, stopped mid-way: the done and collected ones go, the others
    (running, waiting, finished but not collected) stay, in slot order, with their records."""
    engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=4))
    engine.add_many(range(40), [100] * 40, [50 + 10 * i for i in range(40)], 0.0)
    done = engine.advance_to(1.5)   # some collected
    live = [slot for slot, state in enumerate(engine._state) if state != inference._DONE]
    uncollected = [slot for _, _, slot in engine._outbox]
    keep = sorted(set(live) | set(uncollected) | {e[2] for e in engine._heap})
    ids = [engine._id[slot] for slot in keep]
    assert 0 < len(done) and len(keep) < 40
    engine._compact()
    assert engine._id == ids and engine._r == [50 + 10 * i for i in ids]
    assert sorted(engine._waiting) == list(engine._waiting) and len(engine._state) == len(keep)
    fresh = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=4))
    fresh.add_many(range(40), [100] * 40, [50 + 10 * i for i in range(40)], 0.0)
    assert fresh.advance_to(1.5) == done
    assert engine.run() == fresh.run() and engine.busy_s == fresh.busy_s


def test_copy_compacts_only_past_the_threshold(monkeypatch):
    """copy() compacts when the slots pass twice the referred ones plus COMPACT_MIN_DONE_SLOTS."""
    engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=4))
    engine.add_many(range(30), [100] * 30, [60] * 30, 0.0)
    engine.advance_to(math.inf)
    engine.add_many(range(30, 32), [100] * 2, [60] * 2, engine.t)
    referred = engine._referred_slots()
    assert referred == 2 and len(engine._state) == 32
    monkeypatch.setattr(inference, "COMPACT_MIN_DONE_SLOTS", 32 - 2 * referred)   # at the threshold: kept
    assert len(engine.copy()._state) == 32
    monkeypatch.setattr(inference, "COMPACT_MIN_DONE_SLOTS", 32 - 2 * referred - 1)   # past it: compacted
    copy = engine.copy()
    assert len(copy._state) == len(engine._state) == 2 and copy._id == [30, 31]
    assert np.array_equal([f.seq_id for f in copy.run()], [30, 31])


def test_a_slot_of_the_prefill_in_flight_stays_until_an_interrupt_cannot_undo_it():
    """A sequence done with its prefill's token, collected, while that prefill is the last event: an
    interrupt at the prefill's start still undoes its token (interrupt reads the prefill's slots),
    so _compact keeps its slot; compacted or not, the interrupt answers the same."""
    def engine_at_the_prefill_end() -> RolloutEngine:
        engine = RolloutEngine(MODEL, DEVICE, RolloutLayout(tp=1, max_num_seqs=4))
        engine.add_many([0], [100], [5], 0.0)
        engine.advance_to(math.inf)   # (an admission: the order count moves)
        engine.add_many([1], [100], [2], 1.0, [1])
        assert [f.seq_id for f in engine.advance_to(100.0)] == [1] and engine._prefill is not None   # (the event loop)
        return engine
    plain, compacted = engine_at_the_prefill_end(), engine_at_the_prefill_end()
    compacted._compact()
    assert compacted._id == [1] and compacted._prefill[2] == [(0, 1)]
    assert compacted.interrupt(1.0) == plain.interrupt(1.0)
    assert _figures(compacted) == _figures(plain)
