"""SeqBatch's field access and splits: fields() in declaration order, split_by and the dispatch
deals against the one-part-at-a-time definitions (take of the matching rows)."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules import batches
from simulator.rl.schedules.batches import RoundDraws, SeqBatch, prompt_index

from .test_schedules import const, scenario


def _batch(n: int, seed: int) -> SeqBatch:
    rng = np.random.default_rng(seed)
    group = np.sort(rng.integers(0, max(1, n // 2), n))
    return SeqBatch(np.full(n, 3), group, rng.integers(1, 99, n), rng.integers(1, 999, n), rng.integers(0, 9, n),
                    rng.integers(0, 4, n), rng.choice(np.array(["", "no_signal"], object), n))


def _same(a: SeqBatch, b: SeqBatch) -> bool:
    return all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a.fields(), b.fields(), strict=True))


def test_fields_are_the_dataclass_fields_in_order():
    b = _batch(5, 0)
    assert [f.name for f in dataclasses.fields(SeqBatch)] == \
        ["round", "group", "prompt_len", "target_len", "done_len", "first_version", "drop_reason"]
    assert all(x is getattr(b, f.name) for x, f in zip(b.fields(), dataclasses.fields(SeqBatch), strict=True))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), n_parts=st.integers(1, 9), seed=st.integers(0, 999))
def test_split_by_is_a_take_of_each_parts_rows(n, n_parts, seed):
    b = _batch(n, seed)
    part = np.random.default_rng(seed + 1).integers(0, n_parts, n)
    got = b.split_by(part, n_parts)
    assert len(got) == n_parts
    for j, s in enumerate(got):
        assert _same(s, b.take(np.flatnonzero(part == j)))
    for j, s in enumerate(b.deal(n_parts)):
        assert _same(s, b.take(np.arange(j, n, n_parts)))


@settings(max_examples=30, deadline=None)
@given(prompts=st.integers(1, 30), n=st.integers(1, 6), n_inst=st.integers(1, 10),
       dispatch=st.sampled_from(["per-prompt", "per-sample"]))
def test_deal_all_is_every_instances_deal(prompts, n, n_inst, dispatch):
    sc = scenario("colocated", prompts=prompts, n=n, workload={"inference": {"dispatch": dispatch}})
    d = RoundDraws(sc, np.random.default_rng(prompts), const(50), const(200))
    batch = d.draw(0)
    key = np.arange(len(batch)) if dispatch == "per-sample" else prompt_index(batch.group)
    for i, s in enumerate(d.deal_all(batch, n_inst)):
        assert _same(s, batch.take(np.flatnonzero(key % n_inst == i)))
        assert _same(d.share(0, i, n_inst), s)


def test_shares_are_held_only_with_their_rounds():
    d = RoundDraws(scenario("colocated", prompts=4, n=2), np.random.default_rng(0), const(50), const(200))
    for q in range(3 * batches.KEEP_ROUNDS):
        d.share(q, 0, 3)
        assert {r for r, _ in d._shares} <= set(d._draws)
    assert _same(d.share(0, 1, 3), d.deal_all(d.draw(0), 3)[1])    # re-drawn round: the same share


def test_concat_after_nothing_is_the_batch_and_keeps_promotions():
    b = _batch(6, 1)
    assert SeqBatch.concat(SeqBatch.empty(), b) is b
    narrow = SeqBatch(*(f.astype(np.int32) if f.dtype != object else f for f in b.fields()))
    joined = SeqBatch.concat(SeqBatch.empty(), narrow)      # as np.concatenate would: promoted to int64
    assert joined is not narrow and joined.group.dtype == np.int64 and _same(joined, SeqBatch.concat(b, b.take([])))
