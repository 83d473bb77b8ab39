"""A round of instances planned and committed together (Generation.plan_many, commit_many) against
the same instances one by one (plan, commit): the same plans bit for bit (finish and start times,
FLOPs, progress at any time), the same carried sequences and totals, and the same sample store
(row order, values, dtypes) and DistQueue. Over real costs (LlmCosts): dense and MoE, prefix caching
on and off, eager launches, chunked prefill with a token budget, StaleSync's resumable runs,
over-provisioning, partial rollout's length budget, resumed and dropped sequences."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.llm import inference
from simulator.rl.distqueue import DistQueue
from simulator.rl.llm_costs import LlmCosts
from simulator.rl.samples import SampleStore
from simulator.rl.schedules.batches import SeqBatch
from simulator.rl.schedules.generation import Generation
from simulator.rl.schedules.state import RunTotals
from simulator.scenario import load_scenario

SETUPS = {
    "dense": ("grpo-qwen2.5-7b", "colocated", ()),
    "dense-stalesync": ("grpo-qwen2.5-7b", "stalesync", ()),
    "moe-stalesync": ("grpo-qwen3-30b-a3b", "stalesync", ()),
    "no-prefix-cache-eager": ("grpo-qwen2.5-7b", "colocated", ("workload.inference.enable_prefix_caching=false",
                                                                "workload.inference.enforce_eager=true")),
    "chunked": ("grpo-qwen2.5-7b", "stalesync", ("workload.inference.chunked_prefill=true",
                                                  "workload.inference.max_num_batched_tokens=512")),
    "overprovision": ("grpo-qwen2.5-7b", "colocated", ("schedule.overprovision=0.5",)),
    "partial": ("grpo-qwen2.5-7b", "stalesync", ("schedule.partial_rollout=true", "schedule.length_budget=96")),
}


@functools.cache
def _costs(setup: str) -> LlmCosts:
    """One cost facade per setup (its caches hold values only: equal whatever ran before)."""
    workload, schedule, overrides = SETUPS[setup]
    sc = load_scenario(workload=workload, schedule=schedule, overrides=list(overrides))
    return LlmCosts(sc, load_topology(sc.topology))


def _generation(costs: LlmCosts) -> Generation:
    sched = costs.scenario.schedule
    ctx = SimpleNamespace(costs=costs, sched=sched, workload=costs.scenario.workload, totals=RunTotals(), store=SampleStore(),
                          queue=DistQueue(simpy.Environment(), sched.distqueue), rule_reward=True, served_reward=False, shared_reward=False, pad_len=1024.0)
    return Generation(ctx)


@st.composite
def batch(draw: st.DrawFn, round_: int) -> SeqBatch:
    prompts = draw(st.integers(0, 12))
    per = draw(st.integers(1, 4))
    n = prompts * per
    group = np.repeat(np.arange(prompts) + 1000 * round_, per)
    prompt = np.repeat(np.array(draw(st.lists(st.integers(1, 300), min_size=prompts, max_size=prompts)), int), per)
    target = np.array(draw(st.lists(st.integers(2, 400), min_size=n, max_size=n)), int)
    done = np.array([draw(st.just(0) | st.integers(0, t - 1)) for t in target.tolist()], int)
    reason = np.array([draw(st.sampled_from(["", "", "no_signal"])) for _ in range(n)], object)
    return SeqBatch(np.full(n, round_), group, prompt, target, done, np.where(done > 0, round_ - 1, 0), reason)


def _carry_fields(carry: SeqBatch) -> tuple:
    return tuple((name, getattr(carry, name).dtype, getattr(carry, name).tolist())
                 for name in carry.__dataclass_fields__)


@pytest.fixture(autouse=True)
def _small_runs_take_the_fast_path(monkeypatch):
    """The drawn instances are small: let them reach the array runs (alone and together)."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 1)
    monkeypatch.setattr(inference, "FAST_RUN_MANY_MIN_SEQUENCES", 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setup=st.sampled_from(sorted(SETUPS)), data=st.data(), t0=st.floats(0.0, 100.0),
       stop=st.none() | st.floats(0.0, 1.0))
def test_a_round_together_equals_its_instances_one_by_one(setup, data, t0, stop) -> None:
    costs = _costs(setup)
    d = costs.instance_devices
    batches = data.draw(st.lists(batch(3), min_size=1, max_size=5))
    ranks = [range(i * d, (i + 1) * d) for i in range(len(batches))]
    one, many = _generation(costs), _generation(costs)
    alone = [one.plan(b, t0, 3, r) for b, r in zip(batches, ranks, strict=True)]
    together = many.plan_many(batches, t0, 3, ranks)
    for a, b in zip(alone, together, strict=True):
        for name in ("seg", "remaining", "finish", "start"):
            assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
        assert (a.flops, a.t0, a.version, a.ranks) == (b.flops, b.t0, b.version, b.ranks)
        assert (a.progress_at is None) == (b.progress_at is None)
        if a.progress_at is not None:
            for frac in (0.1, 0.5, 0.9):
                now = frac * a.end_s
                assert a.progress_at(now).tobytes() == b.progress_at(now).tobytes()
    stop_s = None if stop is None else stop * max(p.end_s for p in alone)
    results_alone = [one.commit(p, stop_s) for p in alone]
    results_together = many.commit_many(together, stop_s)
    for (end_a, carry_a, tok_a), (end_b, carry_b, tok_b) in zip(results_alone, results_together, strict=True):
        assert (end_a, tok_a) == (end_b, tok_b)
        assert _carry_fields(carry_a) == _carry_fields(carry_b)
    assert one.ctx.totals == many.ctx.totals
    rows_a, rows_b = one.ctx.store.flat(), many.ctx.store.flat()
    assert one.ctx.store.n == many.ctx.store.n
    for column, values in rows_a.items():
        assert values.dtype == rows_b[column].dtype, column
        assert values.tolist() == rows_b[column].tolist(), column
    qa, qb = one.ctx.queue, many.ctx.queue
    assert qa.stats(1e9) == qb.stats(1e9)
