"""A generation plan's FLOPs (RunTotals.gen_flops, the summary's mfu): a plan cut before its end (a
StaleSync tail cut, over-provisioning's aborts, NeMo RL's in-flight updates) is charged what its
engine computed by the cut - the prefill of each sequence that produced a token and the tokens it
generated - at the plan's own FLOPs per token; the cut sequences' rest is charged where it runs
(a resumed plan, with its re-prefill; NeMo's continuation, without one). FakeCosts prices every
token at flops_per_token / 3, so a run's generation FLOPs have a closed form."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.rl.fake_costs import FakeCosts
from simulator.rl.pools import build_pools
from simulator.rl.schedules.batches import SeqBatch
from simulator.rl.schedules.context import Context
from simulator.rl.schedules.generation import Generation
from simulator.rl.schedules.segments import continuation

from .test_schedules import const, lognormal, run, scenario

RATE = FakeCosts().flops_per_token / 3          # FakeCosts' FLOPs of one rollout token, prefill or decode


def _generation(kind: str = "colocated", **sched) -> Generation:
    sc = scenario(kind, iterations=1, **sched)
    ctx = Context(sc, FakeCosts(), 16, build_pools(sc.schedule, 16, 1, 1, "<t>"), const(10), const(10))
    return Generation(ctx)


def _seqs(prompts: list[int], responses: list[int]) -> SeqBatch:
    n = len(prompts)
    z = np.zeros(n, int)
    return SeqBatch(z.copy(), np.arange(n), np.array(prompts), np.array(responses), z.copy(), z.copy(),
                    np.full(n, "", object))


def test_a_cut_plan_is_charged_the_prefills_and_tokens_it_computed_by_the_cut():
    # 1 ms a token from 0: finishes 0.1 .. 0.4 s; a cut at 0.25 s leaves 100 + 200 + 250 + 250 tokens,
    # each sequence prefilled once (4 x 100): 1200 tokens computed, not the plan's 1400
    gen = _generation()
    plan = gen.plan(_seqs([100] * 4, [100, 200, 300, 400]), 0.0, 0, [0])
    assert plan.flops == pytest.approx(RATE * 1400, rel=1e-12)
    _, carry, tokens = gen.commit(plan, stop_s=0.25)
    assert tokens == 800 and list(carry.done_len) == [250, 250]
    assert gen.ctx.totals.gen_flops == pytest.approx(RATE * 1200, rel=1e-12)


def test_a_sequence_cut_before_its_first_token_is_charged_no_prefill():
    # one slot: the second sequence waits for the first (0.1 s) and has no token at a 0.05 s cut
    gen = _generation()
    gen.costs.instance_max_seqs = 1
    plan = gen.plan(_seqs([100, 100], [100, 100]), 0.0, 0, [0])
    gen.commit(plan, stop_s=0.05)
    assert gen.ctx.totals.gen_flops == pytest.approx(RATE * (100 + 50), rel=1e-12)


def test_joined_commits_charge_each_cut_plan_its_own_tokens():
    gen = _generation()
    plans = gen.plan_many([_seqs([100] * 2, [100, 400]), _seqs([50] * 2, [200, 300])], 0.0, 0, [[0], [1]])
    gen.commit_many(plans, stop_s=0.25)
    computed = (200 + 100 + 250) + (100 + 200 + 250)
    assert gen.ctx.totals.gen_flops == pytest.approx(RATE * computed, rel=1e-12)


def test_an_uncut_plan_is_charged_its_whole_flops_exactly():
    gen = _generation()
    plan = gen.plan(_seqs([100, 7], [123, 45]), 0.0, 0, [0])
    gen.commit(plan)
    assert gen.ctx.totals.gen_flops == plan.flops


def test_over_provisioning_charges_the_aborted_sequences_their_tokens_only():
    # 4 sequences over-provisioned by half: the fastest ceil(4 / 1.5) = 3 kept (2^-10 s a token: end
    # 0.375 s), the 4th aborted at 384 of its 512 tokens
    gen = _generation(overprovision=0.5)
    gen.costs.decode_s_per_token = 2.0**-10
    plan = gen.plan(_seqs([100] * 4, [128, 256, 384, 512]), 0.0, 0, [0])
    gen.commit(plan)
    assert gen.ctx.totals.gen_flops == pytest.approx(RATE * (400 + 128 + 256 + 384 + 384), rel=1e-12)


def test_a_continuation_is_charged_the_rest_of_its_run_without_a_re_prefill():
    # NeMo RL keeps the cut sequences' KV: the cut plan and its continuation together are the run's FLOPs
    gen = _generation("nemo-rl-async")
    plan = gen.plan(_seqs([100] * 4, [100, 200, 300, 400]), 0.0, 0, [0])
    _, carry, _ = gen.commit(plan, stop_s=0.25)
    rest = continuation(plan, carry, 0.25, 0.5, 1)
    assert rest.flops == pytest.approx(RATE * (50 + 150), rel=1e-12)     # the tokens left, no prefill
    gen.commit(rest)
    assert gen.ctx.totals.gen_flops == pytest.approx(plan.flops, rel=1e-12)


def _computed_tokens(sm, resumed_prefixes: float, in_flight_tokens: float = 0.0) -> float:
    """Tokens an engine computed over a run: each stored sample's prompt (once it produced a token)
    and its tokens, the prefixes resumed sequences prefilled again, the tokens of those in flight."""
    started = sm["generated_tokens"] > 0
    return float(sm.loc[started, "prompt_len"].sum() + sm["generated_tokens"].sum()) + resumed_prefixes \
        + in_flight_tokens


def _count_reprefills(monkeypatch) -> list[float]:
    """(prompt + tokens so far) of every resumed sequence a plan prefills again."""
    seen: list[float] = []
    plan_many = Generation.plan_many

    def counting(self, batches, t0, version, ranks):
        for seqs in batches:
            resumed = seqs.done_len > 0
            seen.append(float((seqs.prompt_len[resumed] + seqs.done_len[resumed]).sum()))
        return plan_many(self, batches, t0, version, ranks)
    monkeypatch.setattr(Generation, "plan_many", counting)
    return seen


@pytest.mark.parametrize(("kind", "knobs"), [
    ("stalesync", {}),
    ("colocated", {"overprovision": 0.25}),
    ("nemo-rl-async", {"in_flight_weight_updates": True}),
    ("nemo-rl-async", {"in_flight_weight_updates": True, "recompute_kv_after_update": True}),
])
def test_a_runs_generation_flops_are_the_tokens_its_engines_computed(monkeypatch, kind, knobs):
    """Over a run with cuts: FLOPs per token x (prefills + tokens generated + re-prefills), the tokens
    of a cut sequence once (the cut plan charged the whole plan: the rest counted twice)."""
    seen = _count_reprefills(monkeypatch)
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8,
                      train_device_s_per_token=1e-4, forward_device_s_per_token=3e-5)
    rec, _, sm, summary = run(scenario(kind, iterations=4, **knobs), costs, prompt=const(100),
                              resp=lognormal(400, 1.0, 4000))
    # the run did cut plans: resumed with a re-prefill, continued under new weights, or aborted
    assert sum(seen) > 0 or (sm["first_version"] < sm["version"]).any() \
        or (sm["generated_tokens"] < sm["response_len"]).any()
    in_flight = summary["samples_in_flight"]
    in_flight_tokens = 100 * in_flight["trajectories"] + in_flight["generated_tokens"]
    computed = _computed_tokens(sm, sum(seen), in_flight_tokens)
    assert rec.gen_hardware_flops <= RATE * computed * (1 + 1e-12)
    # what no commit reached (plans running at the run's end) is charged nowhere
    assert rec.gen_hardware_flops >= RATE * _computed_tokens(sm, sum(seen)) * (1 - 1e-12)
    # model FLOPs (the mfu's): no re-prefill of a resumed sequence; the run's rollout counts them
    assert RATE * _computed_tokens(sm, 0.0) * (1 - 1e-12) <= rec.gen_flops \
        <= RATE * _computed_tokens(sm, 0.0, in_flight_tokens) * (1 + 1e-12)
    resumed = summary["rollout"]["resume_reprefill_tokens"]
    assert resumed <= sum(seen)
    assert rec.gen_hardware_flops - rec.gen_flops == pytest.approx(RATE * resumed, rel=1e-9, abs=1.0)
