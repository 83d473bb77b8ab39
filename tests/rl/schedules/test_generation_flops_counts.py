"""Generation FLOPs from what the engines computed (rl/schedules/generation_flops.py): model FLOPs
(the mfu's) count a prompt the prefix cache shared once, hardware FLOPs add every re-prefill.
Closed forms on the real costs (one prompt, n samples; a forced preemption) and a property of the
accounting on any plan and counts."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.rl.llm_costs import LlmCosts
from simulator.rl.pools import build_pools
from simulator.rl.schedules.batches import GenPlan, SeqBatch
from simulator.rl.schedules.context import Context
from simulator.rl.schedules.generation import Generation
from simulator.rl.schedules.generation_flops import charged_flops
from simulator.scenario import load_scenario

from .test_schedules import const

P, R, N = 700, 300, 6


def _generation(*overrides: str) -> Generation:
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.train_layout.tp=2", *overrides])
    costs = LlmCosts(sc, load_topology(sc.topology))
    ctx = Context(sc, costs, 8, build_pools(sc.schedule, 8, costs.instance_devices, costs.train_group_devices, "<t>"),
                  const(P), const(R))
    return Generation(ctx)


def _one_prompt(n: int, prompt: int, response: int) -> SeqBatch:
    z = np.zeros(n, int)
    return SeqBatch(z.copy(), z.copy(), np.full(n, prompt), np.full(n, response), z.copy(), z.copy(),
                    np.full(n, "", object))


@pytest.mark.parametrize("caching", [True, False])
def test_one_prompt_n_samples_prefill_the_prompt_once_with_the_prefix_cache(caching):
    """n samples of one prompt admitted together: with the prefix cache the first prefills P, each
    other one its prompt's last token (a hit of P - 1): model FLOPs = rate x (P + n - 1 + n R); without
    it rate x n (P + R), the plan's FLOPs. No re-prefill: hardware = model."""
    gen = _generation(f"workload.inference.enable_prefix_caching={str(caching).lower()}")
    d = gen.costs.instance_devices
    plan = gen.plan(_one_prompt(N, P, R), 0.0, 0, list(range(d)))
    rate = plan.flops_per_token()
    assert plan.flops == pytest.approx(rate * N * (P + R), rel=1e-12)
    gen.commit(plan)
    totals = gen.ctx.totals
    prefilled = P + N - 1 if caching else N * P
    assert totals.rollout["prompt_hit_tokens"] == (N * P - prefilled if caching else 0)
    assert totals.gen_flops == pytest.approx(rate * (prefilled + N * R), rel=1e-12)
    assert totals.gen_hardware_flops == totals.gen_flops


def test_a_forced_preemption_adds_exactly_the_re_prefill_of_its_context_to_the_hardware_flops():
    """A KV pool too small for the samples' contexts preempts: model FLOPs stay the plan's (no cache,
    nothing cut), hardware FLOPs add the preempted contexts' tokens at the law at half their mean."""
    gen = _generation("workload.rollout_layout.gpu_memory_utilization=0.21",
                      "workload.inference.enable_prefix_caching=false")
    d = gen.costs.instance_devices
    n = 64
    plan = gen.plan(_one_prompt(n, 2000, 6000), 0.0, 0, list(range(d)))
    gen.commit(plan)
    totals, counts = gen.ctx.totals, gen.ctx.totals.rollout
    assert counts["preemptions"] > 0
    again, times = counts["preemption_reprefill_tokens"], counts["preemptions"]
    assert totals.gen_flops == pytest.approx(plan.flops, rel=1e-12)
    assert totals.gen_hardware_flops - totals.gen_flops == pytest.approx(
        again * gen.costs.rollout_flops_per_token(again / times / 2), rel=1e-9)


def _plan(prompts: list[int], segs: list[int], done: list[int], rate: float) -> GenPlan:
    n = len(prompts)
    z = np.zeros(n, int)
    seqs = SeqBatch(z.copy(), np.arange(n), np.array(prompts), np.array(segs) + np.array(done), np.array(done),
                    z.copy(), np.full(n, "", object))
    seg = np.array(segs)
    flops = rate * float((seqs.prompt_len + seqs.done_len).sum() + seg.sum())
    return GenPlan(seqs, seg, seg.copy(), np.linspace(0.1, 1.0, n), np.zeros(n), flops, 0.0, 0, [0])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_generation_flops_lie_between_the_generated_tokens_and_all_the_tokens_computed(data):
    """Any plan, cut or not, any engine counts whose hits are prompt tokens: model FLOPs >= the
    generated tokens' FLOPs; hardware >= model and <= (prompts + generated + every re-prefill) at the
    plan's rate (a preemption's at the law at half its contexts, here the same constant law)."""
    n = data.draw(st.integers(1, 8))
    prompts = data.draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    segs = data.draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    done = data.draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    rate = 2.0e9
    plan = _plan(prompts, segs, done, rate)
    cut = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))) if data.draw(st.booleans()) else None
    generated = plan.seg.astype(float) if cut is None else \
        np.where(cut, np.floor(plan.seg * data.draw(st.floats(0, 1))), plan.seg).astype(float)
    fresh = int(np.sum(np.where(np.array(done) == 0, prompts, 0)))
    preemptions = data.draw(st.integers(0, 3))
    counts = {"prompt_hit_tokens": data.draw(st.integers(0, fresh)),
              "preemptions": preemptions, "preemption_reprefill_tokens": data.draw(st.integers(preemptions, 2000)),
              "eviction_reprefill_tokens": data.draw(st.integers(0, 500))}
    model, hardware = charged_flops(plan, generated, cut, counts, lambda context: rate)
    assert model >= rate * generated.sum() * (1 - 1e-12)
    assert hardware >= model
    reprefills = counts["eviction_reprefill_tokens"] + (counts["preemption_reprefill_tokens"] if preemptions else 0) \
        + int(np.sum(np.array(done) > 0) and np.sum((plan.seqs.prompt_len + plan.seqs.done_len)[np.array(done) > 0]))
    assert hardware <= rate * (sum(prompts) + generated.sum() + reprefills) * (1 + 1e-12)
