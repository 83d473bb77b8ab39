"""Multi-turn rollouts: the turn law, the split of a response into turns, and an engine driven through
them against closed forms (one sample: its turns' engine runs and the tool calls in series)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout
from simulator.llm.multi_turn import (
    EngineShare,
    TurnLaw,
    TurnPlan,
    continue_probability,
    plan_turns,
    run_turns_in_lockstep,
    sample_tokens,
)
from simulator.llm.multi_turn_server import MultiTurnServer, TurnRegistry, run_turns

QWEN = load_model("qwen2.5-7b")
H100 = get_device("h100")


def _law(**given) -> TurnLaw:
    values = {"max_turns": 4, "mean_turns": None, "observation_tokens": 100.0, "observation_sigma": 0.0,
              "tool_latency_s": 1.0, "tool_latency_sigma": 0.0}
    return TurnLaw(**{**values, **given})


def _engine(**params) -> RolloutEngine:
    return RolloutEngine(QWEN, H100, RolloutLayout(), InferenceParams(**params))


def _plan(assistant: list[int], observation: list[int], latency: list[float]) -> TurnPlan:
    """One sample's turns as given."""
    return TurnPlan(np.array([0]), np.array([len(assistant)]), np.array(assistant), np.array(observation),
                    np.array(latency))


def _alone(prompt: int, response: int, kept: int | None = None, **params) -> float:
    """One request's time on an idle engine (time-invariant: its start does not matter)."""
    engine = _engine(**params)
    engine.add_many([0], [prompt], [response], 0.0, kept=None if kept is None else [kept])
    (done,) = engine.run()
    return done.time_s


@pytest.mark.parametrize("cached", [True, False])
def test_one_sample_is_its_turns_and_tool_calls_in_series(cached):
    # turn 1 from the prompt; the tool's 2.5 s; turn 2 from prompt + turn 1 + the 300-token answer,
    # prefilling only the answer with prefix caching, the whole context without; then 0.5 s, 40 tokens
    plan = _plan([200, 150, 80], [300, 40, 0], [2.5, 0.5, 0.0])
    finish = np.full(1, np.nan)
    waits = run_turns(_engine(enable_prefix_caching=cached), np.array([0]), np.array([1000]), plan, finish,
                      cached=cached)
    second, third = 1000 + 200 + 300, 1000 + 200 + 300 + 150 + 40
    first_end = _alone(1000, 200)
    second_end = first_end + 2.5 + _alone(second, 150, 1200 if cached else None)
    expected = second_end + 0.5 + _alone(third, 80, second + 150 if cached else None)
    assert finish[0] == pytest.approx(expected, rel=1e-12)
    # alone on its engine, the sample's tool calls are the engine's idle waits
    assert waits == pytest.approx(np.array([[first_end, first_end + 2.5], [second_end, second_end + 0.5]]), rel=1e-12)
    if cached:   # what the cache saves: the prefill of the earlier context, each turn
        cost = _engine().cost
        assert _alone(second, 150) - _alone(second, 150, 1200) == pytest.approx(
            cost.prefill_s(second, second * (second + 1) / 2, 1) - cost.prefill_s(300, 300 * 1200 + 300 * 301 / 2, 1),
            rel=1e-9)


def test_a_turn_past_max_model_len_is_not_sent():
    plan = _plan([200, 150], [5000, 0], [1.0, 0.0])
    finish = np.full(1, np.nan)
    run_turns(_engine(max_model_len=6000), np.array([0]), np.array([1000]), plan, finish, max_context=6000)
    assert finish[0] == pytest.approx(_alone(1000, 200) + 1.0)   # the sample ends when its tool answers


def test_the_engine_serves_other_samples_while_a_tool_runs():
    # sample 1 arrives while sample 0 waits on its 5 s tool: it is served at once, as on an idle
    # engine, and sample 0's second turn meets none of its work (each finishes as if alone)
    one = _plan([300, 300], [50, 0], [5.0, 0.0])
    alone = np.full(1, np.nan)
    run_turns(_engine(), np.array([0]), np.array([500]), one, alone)
    first_turn = _alone(500, 300)
    arrival = first_turn + 0.5
    assert arrival + first_turn < first_turn + 5.0 and alone[0] < arrival + first_turn + 5.0   # no overlap
    plan = TurnPlan(np.array([0, 2]), np.array([2, 2]), np.array([300, 300, 300, 300]), np.array([50, 0, 50, 0]),
                    np.array([5.0, 0.0, 5.0, 0.0]))
    finish = np.full(2, np.nan)
    waits = run_turns(_engine(), np.array([0, 1]), np.array([500, 500]), plan, finish,
                      arrivals=np.array([0.0, arrival]))
    assert finish[0] == pytest.approx(alone[0], rel=1e-12)
    assert finish[1] == pytest.approx(arrival + alone[0], rel=1e-12)
    # idle with a tool out: from sample 0's first turn to sample 1's arrival, from sample 1's first
    # turn to sample 0's return, from sample 0's end to sample 1's return (not after the last finish)
    back = first_turn + 5.0
    assert waits == pytest.approx(np.array([[first_turn, arrival], [arrival + first_turn, back],
                                            [alone[0], arrival + back]]), rel=1e-12)


def test_lockstep_turns_wait_for_every_engine_and_the_slowest_tool():
    # engine A: sample 0 (turns of 200 then 100 tokens, a 1 s tool); engine B: sample 1 (900 then 50, a
    # 3 s tool). Turn 2 of both starts when B's longer turn 1 is done and the slower tool answers.
    plan = TurnPlan(np.array([0, 2]), np.array([2, 2]), np.array([200, 100, 900, 50]), np.array([30, 0, 60, 0]),
                    np.array([1.0, 0.0, 3.0, 0.0]))
    finish = np.full(2, np.nan)
    shares = [EngineShare(_engine(), np.array([0])), EngineShare(_engine(), np.array([1]))]
    idle = run_turns_in_lockstep(shares, np.array([400, 400]), plan, finish)
    end_a, end_b = _alone(400, 200), _alone(400, 900)
    start = end_b + 3.0
    assert finish[0] == pytest.approx(start + _alone(630, 100, 600), rel=1e-12)
    assert finish[1] == pytest.approx(start + _alone(1360, 50, 1300), rel=1e-12)
    (a_engines, a_tools), (b_engines, b_tools) = idle
    assert a_engines == pytest.approx(np.array([[end_a, end_b]])) and len(b_engines) == 0   # A waits for B
    assert a_tools == pytest.approx(np.array([[end_b, start]])) and b_tools == pytest.approx(a_tools)


def test_one_sample_alone_takes_the_same_time_in_lockstep_or_not():
    plan = _plan([200, 150, 80], [300, 40, 0], [2.5, 0.5, 0.0])
    alone, together = np.full(1, np.nan), np.full(1, np.nan)
    run_turns(_engine(), np.array([0]), np.array([1000]), plan, alone)
    run_turns_in_lockstep([EngineShare(_engine(), np.array([0]))], np.array([1000]), plan, together)
    assert together[0] == pytest.approx(alone[0], rel=1e-12)


@pytest.mark.parametrize("max_turns, mean", [(2, 1.5), (4, 2.5), (8, 1.2), (8, 7.9)])
def test_the_turn_count_has_the_given_mean(max_turns, mean):
    q = continue_probability(max_turns, mean)
    assert math.fsum(q ** k for k in range(max_turns)) == pytest.approx(mean, rel=1e-9)   # the closed form
    plan = plan_turns(_law(max_turns=max_turns, mean_turns=mean), np.full(40_000, 5000), np.random.default_rng(1))
    assert plan.counts.max() <= max_turns and plan.counts.min() >= 1
    assert plan.counts.mean() == pytest.approx(mean, abs=4 * plan.counts.std() / 200)


def test_a_turn_cap_adds_the_turns_a_response_needs_and_refuses_one_that_cannot_fit():
    # mean 1.2 turns, but a 2,500-token response at 1,000 a turn needs 3: it gets at least 3
    plan = plan_turns(_law(max_turns=4, mean_turns=1.2, observation_tokens=0, max_turn_tokens=1000),
                      np.array([2500, 300, 1000]), np.random.default_rng(0))
    assert plan.counts[0] >= 3 and plan.assistant.max() <= 1000
    with pytest.raises(ValueError, match="4001-token response"):
        plan_turns(_law(max_turns=4, max_turn_tokens=1000), np.array([4001]), np.random.default_rng(0))


def test_without_a_mean_every_sample_takes_max_turns_and_latency_and_tokens_have_their_means():
    plan = plan_turns(_law(observation_sigma=0.8, tool_latency_s=2.0, tool_latency_sigma=1.2),
                      np.full(20_000, 50_000), np.random.default_rng(2))
    assert (plan.counts == 4).all()
    tools = np.ones(len(plan.assistant), bool)
    tools[plan.starts + plan.counts - 1] = False
    assert plan.latency_s[tools].mean() == pytest.approx(2.0, rel=0.05)
    assert plan.observation[tools].mean() == pytest.approx(100.0, rel=0.03)
    assert (plan.latency_s[~tools] == 0).all() and (plan.observation[~tools] == 0).all()


@settings(max_examples=60, deadline=None)
@given(responses=st.lists(st.integers(1, 3000), min_size=1, max_size=30), max_turns=st.integers(1, 6),
       observation=st.floats(0, 2000), sigma=st.floats(0, 2), seed=st.integers(0, 2**16), capped=st.booleans())
def test_a_split_keeps_every_token_and_a_token_a_turn(responses, max_turns, observation, sigma, seed, capped):
    cap = -(-max(responses) // max_turns) if capped else None      # the tightest cap the longest fits
    law = _law(max_turns=max_turns, mean_turns=(1 + max_turns) / 2, observation_tokens=observation,
               observation_sigma=sigma, max_turn_tokens=cap)
    plan = plan_turns(law, np.array(responses), np.random.default_rng(seed))
    if cap is not None:
        assert plan.assistant.max() <= cap
        assert (plan.counts * cap >= np.array(responses) - np.bincount(
            np.repeat(np.arange(len(responses)), plan.counts), weights=plan.observation, minlength=len(responses))).all()
    owner = np.repeat(np.arange(len(responses)), plan.counts)
    kept = np.bincount(owner, weights=plan.assistant + plan.observation, minlength=len(responses))
    assert (kept == np.array(responses)).all()
    assert (plan.assistant >= 1).all() and (plan.observation >= 0).all()
    assert (plan.counts >= 1).all() and (plan.counts <= max_turns).all()
    assert (plan.starts == np.concatenate([[0], np.cumsum(plan.counts)[:-1]])).all()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**16), cached=st.booleans(), lockstep=st.booleans())
def test_every_sample_finishes_once_after_its_tool_calls(n, seed, cached, lockstep):
    rng = np.random.default_rng(seed)
    responses = rng.integers(5, 400, n)
    plan = plan_turns(_law(tool_latency_s=0.7, tool_latency_sigma=0.5, observation_tokens=20), responses, rng)
    finish = np.full(n, np.nan)
    prompts = rng.integers(10, 300, n)
    engines = [_engine(enable_prefix_caching=cached) for _ in range(2)]
    if lockstep:   # two engines, samples dealt round-robin
        run_turns_in_lockstep([EngineShare(engine, np.arange(i, n, 2)) for i, engine in enumerate(engines)], prompts,
                              plan, finish, cached=cached)
    else:
        run_turns(engines[0], np.arange(n), prompts, plan, finish, cached=cached)
    waits = np.bincount(np.repeat(np.arange(n), plan.counts), weights=plan.latency_s, minlength=n)
    assert not np.isnan(finish).any() and (finish > waits).all()
    # the engines decoded the assistant tokens only
    assert sum(engine.generated_tokens for engine in engines) == plan.assistant.sum()
    assert all(engine.next_event_time() == math.inf for engine in engines)


# ---- a sample's cached context while it is out on its tool: evictable (RolloutEngine.keep_freed_contexts) ----
TIGHT = RolloutLayout(gpu_memory_utilization=0.25)   # a pool of some 80k tokens: a few long fillers fill it


def _tight_engine(**params) -> RolloutEngine:
    return RolloutEngine(QWEN, H100, TIGHT, InferenceParams(**params))


def _tight_alone(prompt: int, response: int, kept: int | None = None) -> float:
    engine = _tight_engine()
    engine.add_many([0], [prompt], [response], 0.0, kept=None if kept is None else [kept])
    (done,) = engine.run()
    return done.time_s


def _out_on_its_tool_while_fillers_run(fillers: list[int], cached: bool = True, cache_eviction: bool = True
                                       ) -> tuple[float, RolloutEngine, float]:
    """Sample 0 (a 1,000-token prompt, 200 then 150 assistant tokens, a 300-token answer, a 100 s
    tool) and, arriving 1 s after its first turn, single-turn fillers of the given prompts and one
    token each (each done at its prefill, long before the tool answers). Returns sample 0's finish,
    the engine, the end of its first turn."""
    n = 1 + len(fillers)
    plan = TurnPlan(np.array([0, *range(2, n + 1)]), np.array([2] + [1] * len(fillers)),
                    np.array([200, 150] + [1] * len(fillers)), np.array([300] + [0] * n),
                    np.array([100.0] + [0.0] * n))
    first_end = _tight_alone(1000, 200)
    finish = np.full(n, np.nan)
    engine = _tight_engine(enable_prefix_caching=cached)
    run_turns(engine, np.arange(n), np.array([1000, *fillers]), plan, finish,
              arrivals=np.array([0.0] + [first_end + 1.0] * len(fillers)), cached=cached,
              cache_eviction=cache_eviction)
    assert not np.isnan(finish).any() and (finish[1:] < first_end + 100.0).all()
    return float(finish[0]), engine, first_end


def test_a_context_evicted_whole_while_its_tool_runs_is_prefilled_whole_again():
    # two fillers of half the pool each, one after the other (both do not fit at once): the second's
    # pages and the first's, freed after the sample's, pass the capacity: the sample's 1,200 freed
    # tokens, the oldest free pages, are evicted first, all of them; its next turn prefills its whole
    # 1,500-token context, as without a prefix cache, and the engine counts the 1,200 it prefilled again
    capacity = _tight_engine().capacity
    fillers = [capacity // 2] * 2
    evicted, engine, first_end = _out_on_its_tool_while_fillers_run(fillers)
    uncached, _, _ = _out_on_its_tool_while_fillers_run(fillers, cached=False)
    kept, _, _ = _out_on_its_tool_while_fillers_run(fillers, cache_eviction=False)
    back = first_end + 100.0
    assert evicted == uncached == pytest.approx(back + _tight_alone(1500, 150), rel=1e-12)
    assert kept == pytest.approx(back + _tight_alone(1500, 150, 1200), rel=1e-12) and kept < evicted
    assert engine.reprefilled_tokens == 1200 and engine.evicted_tokens >= 1200


@pytest.mark.parametrize("tail", [1, 37, 900])
def test_a_context_evicted_in_part_keeps_its_prefix(tail):
    # one filler whose prompt and first token leave room for all but `tail` of the sample's 1,200
    # cached tokens: its allocation evicts that many from the context's tail, and the next turn hits
    # the prefix that survives (prefills the answer and the evicted tail)
    capacity = _tight_engine().capacity
    finish, engine, first_end = _out_on_its_tool_while_fillers_run([capacity - 1200 + tail - 1])
    assert finish == pytest.approx(first_end + 100.0 + _tight_alone(1500, 150, 1200 - tail), rel=1e-12)
    assert engine.reprefilled_tokens == tail and engine.evicted_tokens >= tail   # (and, later, the filler's)


def test_with_room_for_every_context_eviction_changes_nothing():
    # the default pool holds every context of the batch: the same floats, turn by turn (the LRU kept:
    # a server that cannot know its trajectories) and in lock-step (where run_turns_in_lockstep,
    # knowing them, leaves it off: holds_every_context)
    rng = np.random.default_rng(7)
    responses = rng.integers(50, 2000, 64)
    plan = plan_turns(_law(tool_latency_s=0.7, tool_latency_sigma=0.5, observation_tokens=80), responses, rng)
    prompts = rng.integers(100, 1500, 64)
    arrivals = rng.uniform(0.0, 3.0, 64)
    outcomes = []
    for cache_eviction in (True, False):
        server = MultiTurnServer(_engine(), TurnRegistry.of_plan(plan, prompts), cache_eviction=cache_eviction)
        for at in np.unique(arrivals):
            first = np.flatnonzero(arrivals == at)
            server.add_many(first, prompts[first], sample_tokens(plan)[first], float(at))
        alone = sorted(server.advance_to(math.inf))
        together = np.full(64, np.nan)
        shares = [EngineShare(_engine(), np.arange(i, 64, 2)) for i in range(2)]
        idle = run_turns_in_lockstep(shares, prompts, plan, together, cache_eviction=cache_eviction)
        outcomes.append((alone, server.take_waits(), together, idle, server.busy_s))
        assert server.engine.evicted_tokens == server.engine.reprefilled_tokens == 0
        assert (server.engine._lru is not None) == cache_eviction and all(share.engine._lru is None for share in shares)
    (a, w, t, i, b), (a2, w2, t2, i2, b2) = outcomes
    assert a == a2 and w == w2 and np.array_equal(t, t2) and b == b2
    assert all(np.array_equal(x, y) for pair, pair2 in zip(i, i2, strict=True) for x, y in zip(pair, pair2, strict=True))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 24), seed=st.integers(0, 2**16), lockstep=st.booleans())
def test_under_pressure_evictions_stay_within_the_freed_pages_and_every_sample_finishes(n, seed, lockstep):
    rng = np.random.default_rng(seed)
    capacity = _tight_engine().capacity
    responses = rng.integers(5, capacity // 8, n)
    plan = plan_turns(_law(tool_latency_s=0.7, tool_latency_sigma=1.0, observation_tokens=300), responses, rng)
    prompts = rng.integers(10, capacity // 8, n)
    finish = np.full(n, np.nan)
    engines = [_tight_engine() for _ in range(2)]
    if lockstep:
        run_turns_in_lockstep([EngineShare(engine, np.arange(i, n, 2)) for i, engine in enumerate(engines)],
                              prompts, plan, finish)
    else:
        run_turns(engines[0], np.arange(n), prompts, plan, finish, arrivals=rng.uniform(0.0, 2.0, n))
    assert not np.isnan(finish).any()
    for engine in engines:
        assert 0 <= engine.reprefilled_tokens <= engine.evicted_tokens <= engine.retained_tokens
        assert engine.next_event_time() == math.inf
    assert sum(engine.generated_tokens for engine in engines) == plan.assistant.sum()


def test_a_copy_keeps_its_own_freed_contexts_and_an_interrupt_clears_them():
    engine = _tight_engine()
    engine.keep_freed_contexts()
    engine.add_many([0], [1000], [200], 0.0)
    engine.run()
    copy = engine.copy()
    copy.add_many([1], [copy.capacity - 1], [1], copy.t)   # its allocation evicts the whole context
    copy.run()
    for one, hit in ((engine, 1200), (copy, 0)):
        one.add_many([0], [1500], [150], one.t + 1.0)
        one.run()
        assert one.reprefilled_tokens == 1200 - hit
    cut = _tight_engine()
    cut.keep_freed_contexts()
    cut.add_many([0], [1000], [200], 0.0)
    cut.run()
    cut.interrupt(cut.t)                                    # new weights: nothing cached survives
    cut.add_many([0], [1500], [150], cut.t)
    cut.run()
    assert cut.reprefilled_tokens == 0 and cut.retained_tokens == 1200 + 1650
