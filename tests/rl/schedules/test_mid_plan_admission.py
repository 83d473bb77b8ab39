"""NeMo RL's async engine takes a round the moment the age bound opens it, into the running engine
(continuous batching, the running sequences' KV kept: Generation.admit), hands each trajectory out as
it finishes, and step k trains the trajectories meant for it (round k)."""
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.rl.fake_costs import FakeCosts, list_schedule
from simulator.rl.llm_costs import LlmCosts
from simulator.rl.schedules.generation import Generation
from simulator.rl.schedules.segments import continuation
from simulator.scenario import load_scenario

from .test_nemo_rl import check_accounting, gen_bound_costs
from .test_schedules import const, lognormal, run, scenario


def test_a_list_schedule_with_arrivals_starts_each_job_when_it_arrives_or_a_slot_frees():
    finish = list_schedule(np.array([4.0, 4.0, 1.0, 2.0]), 2, np.array([0.0, 0.0, 1.0, 5.0]))
    # slots free at 4 and 4: job 2 waits to 4 (arrived at 1), job 3 to its arrival at 5
    assert finish.tolist() == [4.0, 4.0, 5.0, 7.0]
    assert list_schedule(np.array([3.0, 1.0, 2.0]), 2, np.zeros(3)).tolist() == list_schedule(np.array([3.0, 1.0, 2.0]), 2).tolist()
    with pytest.raises(ValueError, match="arrivals"):
        list_schedule(np.array([1.0, 1.0]), 1, np.array([1.0, 0.0]))


def _context(costs, kind="nemo-rl-async", **sched):
    from simulator.rl.pools import build_pools
    from simulator.rl.schedules.context import Context
    sc = scenario(kind, iterations=2, **sched)
    return Context(sc, costs, 16, build_pools(sc.schedule, 16, 1, 1, "<t>"), const(10), lognormal(300, 1.0, 3000))


def test_admitted_sequences_queue_behind_the_running_ones_and_the_history_stays():
    """FakeCosts: a sequence decodes on its slot alone, so the admitted ones start when they arrive
    or a slot frees, and every earlier sequence finishes as before: the closed form with arrivals."""
    costs = FakeCosts(instance_max_seqs=4, decode_s_per_token=1e-3)
    gen = Generation(_context(costs, async_engine=True))
    ctx = gen.ctx
    first, second = ctx.draws.share(0, 0, 4), ctx.draws.share(1, 0, 4)
    plan = gen.plan(first, 10.0, 0, [0])
    now = 10.0 + 0.3 * plan.end_s
    grown = gen.admit(plan, second, now)
    assert grown.t0 == plan.t0 and len(grown.seqs) == len(first) + len(second)
    assert grown.finish[:len(first)] == pytest.approx(plan.finish, rel=1e-12)
    lengths = np.concatenate([first.target_len, second.target_len]) * 1e-3
    arrivals = np.concatenate([np.zeros(len(first)), np.full(len(second), now - 10.0)])
    assert grown.finish == pytest.approx(list_schedule(lengths, 4, arrivals), rel=1e-12)
    assert (grown.start[len(first):] >= now - 10.0 - 1e-12).all()


@functools.cache
def _llm_costs() -> LlmCosts:
    sc = load_scenario(workload="grpo-qwen2.5-7b", schedule="nemo-rl-async",
                       overrides=["schedule.async_engine=true", "schedule.in_flight_weight_updates=true"])
    return LlmCosts(sc, load_topology(sc.topology))


def _llm_generation():
    from types import SimpleNamespace

    import simpy

    from simulator.rl.distqueue import DistQueue
    from simulator.rl.samples import SampleStore
    from simulator.rl.schedules.state import RunTotals
    costs = _llm_costs()
    sched = costs.scenario.schedule
    ctx = SimpleNamespace(costs=costs, sched=sched, workload=costs.scenario.workload, totals=RunTotals(),
                          store=SampleStore(), queue=DistQueue(simpy.Environment(), sched.distqueue), rule_reward=True,
                          served_reward=False, shared_reward=False, pad_len=1024.0)
    return Generation(ctx)


def _seqs(round_, n, seed):
    from simulator.rl.schedules.batches import SeqBatch
    rng = np.random.default_rng(seed)
    prompts = np.repeat(rng.integers(50, 400, n // 4), 4)
    return SeqBatch(np.full(n, round_), np.repeat(round_ * 1_000_000 + np.arange(n // 4), 4), prompts,
                    rng.integers(20, 1500, n), np.zeros(n, int), np.zeros(n, int), np.full(n, "", object))


@pytest.mark.parametrize("share", [0.2, 0.6])
def test_on_the_engine_what_finished_before_the_admission_finishes_as_before(share):
    """The real engine (LlmCosts): the run priced again with the new sequences added at `now` is the
    same run up to then (an engine's events do not depend on a later add): every sequence that
    finished before is unchanged to the bit; those still running finish no earlier (the batch grew)."""
    gen = _llm_generation()
    ranks = list(range(_llm_costs().instance_devices))
    plan = gen.plan(_seqs(0, 64, 1), 0.0, 0, ranks)
    now = share * plan.end_s
    grown = gen.admit(plan, _seqs(1, 32, 2), now)
    done = plan.finish <= now
    assert done.any() and (~done).any()
    assert (grown.finish[:64][done] == plan.finish[done]).all()
    assert (grown.finish[:64][~done] >= plan.finish[~done] - 1e-9).all()
    assert (grown.finish[64:] > now).all()
    assert grown.flops > plan.flops


def test_an_admission_after_a_weight_load_continues_the_same_engine_run():
    """A plan cut at an in-flight weight load goes on as the same engine run shifted by the load
    (segments.continuation); a round admitted later joins that run at its engine time: the
    continuation's sequences that finish before the admission keep their times."""
    gen = _llm_generation()
    ranks = list(range(_llm_costs().instance_devices))
    plan = gen.plan(_seqs(0, 64, 3), 0.0, 0, ranks)
    stop = 0.2 * plan.end_s
    _, carry, _ = gen.commit(plan, stop_s=stop)
    rest = continuation(plan, carry, stop, stop + 0.5, 1)
    now = rest.t0 + 0.3 * rest.end_s
    grown = gen.admit(rest, _seqs(1, 32, 4), now)
    before = rest.finish + rest.t0 <= now
    assert before.any()
    assert grown.finish[:len(rest.seqs)][before] == pytest.approx(rest.finish[before], rel=1e-12, abs=1e-9)
    assert grown.root_offset == rest.root_offset == pytest.approx(stop)
    # progress of a continued sequence counts from the cut, as the continuation's does; a plan is cut
    # at the present only, so what it had before its last admission is not kept
    with pytest.raises(ValueError, match="took sequences"):
        grown.progress_at(0.5 * (now - rest.t0))
    just_after = grown.progress_at(now - rest.t0 + 1e-6)
    assert just_after[:len(rest.seqs)] == pytest.approx(rest.progress_at(now - rest.t0), abs=1.0)
    assert (just_after[len(rest.seqs):] <= 1).all() and (just_after <= grown.seg + 1e-9).all()


def test_a_run_continued_from_its_kept_state_equals_the_run_fed_from_the_start():
    """RolloutOutcome.extend (the engine's state kept nearest before the add, the new sequences added
    then) gives the run an engine fed from its start gives, to the bit, over two admissions."""
    costs = _llm_costs()
    ranks = list(range(costs.instance_devices))
    first, second, third = _seqs(0, 48, 5), _seqs(1, 24, 6), _seqs(2, 16, 7)
    out = costs.rollout(first.prompt_len, first.target_len, ranks, first.group)
    at1 = 0.3 * float(out.finish_s.max())
    out = out.extend(second.prompt_len, second.target_len, second.group, at1)
    at2 = 0.6 * float(out.finish_s[:48].max())
    out = out.extend(third.prompt_len, third.target_len, third.group, at2)
    batches = (first, second, third)
    fresh = costs.rollout(np.concatenate([b.prompt_len for b in batches]), np.concatenate([b.target_len for b in batches]),
                          ranks, np.concatenate([b.group for b in batches]),
                          arrivals=np.concatenate([np.zeros(48), np.full(24, at1), np.full(16, at2)]))
    assert at2 > at1 and (out.finish_s == fresh.finish_s).all()
    assert out.flops == fresh.flops and (out.start_s == fresh.start_s).all()
    assert out.progress_at(at2 + 0.5) == pytest.approx(fresh.progress_at(at2 + 0.5))


def count_admissions(monkeypatch) -> list[int]:
    seen: list[int] = []
    admit = Generation.admit

    def counting(self, plan, new, now):
        seen.append(len(new))
        return admit(self, plan, new, now)
    monkeypatch.setattr(Generation, "admit", counting)
    return seen


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1000), age=st.integers(1, 3), in_flight=st.booleans())
def test_the_async_engine_admits_mid_plan_and_step_k_trains_round_k(monkeypatch, seed, age, in_flight):
    """Every trajectory once (consumed or dropped), within its age; every step trains exactly the
    trajectories of its own round (NeMo RL's replay buffer serves a step the ones generated for it)."""
    seen = count_admissions(monkeypatch)
    sc = scenario("nemo-rl-async", iterations=5, seed=seed, max_trajectory_age_steps=age,
                  in_flight_weight_updates=in_flight, async_engine=True)
    rec, tl, sm, s = run(sc, gen_bound_costs(prefill_s_per_token=1e-5))
    check_accounting(sm, age)
    consumed = sm[sm["consumed_iteration"] >= 0]
    assert (consumed["consumed_iteration"] == consumed["round"]).all()
    assert s["samples"]["consumed"] == 5 * 64 and s["samples"]["dropped"].get("stale", 0) == 0
    assert all(n > 0 for n in seen)


def test_a_round_that_opens_while_the_engine_runs_joins_it(monkeypatch):
    """Generation-bound, age 2, in-flight updates: round k + 2 opens at step k's weight load while the
    engine still generates, and joins it then (it waited for the plan's end before)."""
    seen = count_admissions(monkeypatch)
    sc = scenario("nemo-rl-async", iterations=6, max_trajectory_age_steps=2, in_flight_weight_updates=True,
                  async_engine=True)
    rec, tl, sm, s = run(sc, gen_bound_costs(prefill_s_per_token=1e-5))
    assert seen
    check_accounting(sm, 2)


@pytest.mark.parametrize("in_flight", [False, True])
def test_on_a_real_workload_the_async_engine_admits_and_accounts_for_every_trajectory(monkeypatch, in_flight):
    """LlmCosts end to end: rounds join running engines (continued runs), every trajectory is consumed
    once or dropped as unused at the end, every step trains its own round. Without in-flight updates
    a refit waits for the engines to drain, and no round opens while one runs: nothing to admit."""
    import simulator
    seen = count_admissions(monkeypatch)
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="nemo-rl-async", iterations=5,
                           overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=8",
                                      "workload.mini_batch_prompts=8", "workload.response_length.max=2048",
                                      "schedule.max_trajectory_age_steps=2", "schedule.async_engine=true",
                                      f"schedule.in_flight_weight_updates={str(in_flight).lower()}"])
    check_accounting(r.samples, 2)
    consumed = r.samples[r.samples["consumed_iteration"] >= 0]
    assert (consumed["consumed_iteration"] == consumed["round"]).all()
    assert r.summary["samples"]["consumed"] == 5 * 64 and bool(seen) == in_flight
