"""The StaleSync split search's TailIndex answers "how many sequences, how many KV tokens still run
at t" exactly as one pass over the plans does, at every time (tail_instances with and without it)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules.batches import GenPlan, SeqBatch
from simulator.rl.schedules.colocated import TailIndex, tail_instances


def _plan(rng: np.random.Generator, n: int, t0: float) -> GenPlan:
    z = np.zeros(n, int)
    seqs = SeqBatch(z, np.arange(n), rng.integers(1, 500, n), rng.integers(1, 4000, n), z, z, np.full(n, "", object))
    remaining = seqs.target_len.copy()
    seg = np.where(rng.random(n) < 0.2, np.maximum(1, remaining // 2), remaining)   # some cut by a budget
    finish = np.round(rng.random(n) * 100.0, 1)   # ties on purpose
    return GenPlan(seqs, seg, remaining, finish, np.zeros(n), 0.0, t0, 0, range(8))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6))
def test_tail_index_equals_one_pass(seed, sizes):
    rng = np.random.default_rng(seed)
    plans = [_plan(rng, n, float(rng.integers(0, 3))) for n in sizes]
    ctx = SimpleNamespace(costs=SimpleNamespace(instance_max_seqs=int(rng.integers(1, 64)),
                                                instance_kv_tokens=float(rng.integers(500, 20_000)),
                                                instance_seq_kv_tokens=float(rng.integers(0, 300))))
    index = TailIndex(plans)
    times = np.concatenate([[-1.0, 0.0, 1e9], *(p.t0 + p.finish for p in plans), rng.random(5) * 103])
    for t in times.tolist():
        assert tail_instances(ctx, plans, t, index) == tail_instances(ctx, plans, t)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 60), min_size=1, max_size=6))
def test_split_times_views_of_one_sort_are_the_sorts_they_replace(seed, sizes):
    """split_time reads its sorted completions and its candidate times off one argsort of the
    finish times (RoundArrays.by_finish): the values np.sort and np.unique give."""
    from simulator.rl.schedules.colocated import TIME_TOL_S, RoundArrays, _sorted_unique
    rng = np.random.default_rng(seed)
    plans = [_plan(rng, n, float(rng.integers(0, 3))) for n in sizes]
    joined = RoundArrays(plans)
    fin, by_finish = joined.finish, joined.finish[joined.by_finish]
    complete = joined.seg >= joined.remaining
    assert by_finish[complete[joined.by_finish]].tolist() == np.sort(fin[complete]).tolist()
    for t_need in (float(by_finish[len(by_finish) // 2]) + TIME_TOL_S, -1.0, 1e9):
        got = _sorted_unique(np.concatenate([[t_need], by_finish[by_finish > t_need] + TIME_TOL_S]))
        assert got.tolist() == np.unique(np.concatenate([[t_need], fin[fin > t_need] + TIME_TOL_S])).tolist()


def test_a_tails_instances_hold_its_sequences_pages_beside_their_tokens():
    """Two running sequences of 100 + 900 tokens, instances of 2,500 KV tokens: one holds both
    (2,000 tokens), unless each also draws 300 tokens' worth of window pages (2,600: two instances)."""
    n = 2
    z = np.zeros(n, int)
    seqs = SeqBatch(z, np.arange(n), np.full(n, 100), np.full(n, 900), z, z, np.full(n, "", object))
    plan = GenPlan(seqs, seqs.target_len.copy(), seqs.target_len.copy(), np.full(n, 10.0), np.zeros(n), 0.0, 0.0, 0,
                   range(8))

    def instances(pages: float) -> int:
        costs = SimpleNamespace(instance_max_seqs=64, instance_kv_tokens=2500.0, instance_seq_kv_tokens=pages)
        return tail_instances(SimpleNamespace(costs=costs), [plan], 5.0)
    assert (instances(0.0), instances(300.0)) == (1, 2)
