"""MultiTurnServer: whole trajectories behind the request-fed server protocol, against run_turns and
against hand-built engine runs; interrupts inside a turn and on a tool; every trajectory once."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout
from simulator.llm.multi_turn import TurnLaw, TurnPlan
from simulator.llm.multi_turn_server import MultiTurnServer, TurnRegistry, run_turns

QWEN = load_model("qwen2.5-7b")
H100 = get_device("h100")
LAW = TurnLaw(max_turns=3, mean_turns=None, observation_tokens=80.0, observation_sigma=0.0, tool_latency_s=4.0,
              tool_latency_sigma=0.0)


def _engine() -> RolloutEngine:
    return RolloutEngine(QWEN, H100, RolloutLayout(), InferenceParams())


def _server(registry: TurnRegistry) -> MultiTurnServer:
    return MultiTurnServer(_engine(), registry)


def _alone(prompt: int, response: int, generated: int = 0, kept: int | None = None) -> float:
    engine = _engine()
    engine.add_many([0], [prompt], [response], 0.0, [generated], kept=None if kept is None else [kept])
    (done,) = engine.run()
    return done.time_s


def _drain(server: MultiTurnServer) -> dict[int, float]:
    out = {}
    while not math.isinf(server.next_event_time()):
        for done in server.advance_to(server.next_event_time()):
            assert done.seq_id not in out
            out[done.seq_id] = done.time_s
    return out


def test_trajectories_on_a_server_finish_as_run_turns_drives_them():
    registry = TurnRegistry(LAW, seed=3)
    prompts, responses = np.array([300, 500, 200, 700]), np.array([900, 1500, 400, 2000])
    server = _server(registry)
    server.add_many(range(4), prompts, responses, 0.0, group_ids=[0, 0, 1, 1])
    finishes = _drain(server)
    assert server.load == 0 and not registry.trajectories      # done ones leave the registry
    assert server.advance_to(math.inf) == []                    # an idle server runs to any time
    plans = [registry.of(i, int(prompts[i]), int(responses[i])) for i in range(4)]   # drawn again: the same
    plan = TurnPlan(np.array([0, 3, 6, 9]), np.full(4, 3), np.array([a for p in plans for a in p.assistant]),
                    np.array([o for p in plans for o in p.observation]), np.array([x for p in plans for x in p.latency]))
    expected = np.full(4, np.nan)
    run_turns(_engine(), np.arange(4), prompts, plan, expected, groups=np.array([0, 0, 1, 1]))
    assert [finishes[i] for i in range(4)] == pytest.approx(expected.tolist(), rel=1e-12)


def test_a_trajectory_cut_inside_a_turn_resumes_on_another_server_with_its_tokens():
    registry = TurnRegistry(LAW, seed=1)
    first = _server(registry)
    first.add_many([7], [400], [1200], 0.0)
    trajectory = registry.trajectories[7]
    a0, o0, a1 = trajectory.assistant[0], trajectory.observation[0], trajectory.assistant[1]
    cut = 0.4 * _alone(400, a0)
    result = first.interrupt(cut)
    (part,) = result.partial
    assert 0 < part.generated < a0 and (part.prompt_len, part.response_len) == (400, 1200)
    second = _server(registry)
    second.add_many([7], [400], [1200], 10.0, [part.generated])
    finish = _drain(second)[7]
    # the turn's rest (its context re-prefilled), the tool, then turn 2 with turn 1's context cached, ...
    end0 = 10.0 + _alone(400, a0, part.generated)
    end1 = end0 + 4.0 + _alone(400 + a0 + o0, a1, 0, 400 + a0)
    ctx2 = 400 + trajectory.before[2]
    end2 = end1 + 4.0 + _alone(ctx2, trajectory.assistant[2], 0, ctx2 - trajectory.observation[1])
    assert finish == pytest.approx(end2, rel=1e-12)


@pytest.mark.parametrize("resume_at", [2.0, 30.0])
def test_a_trajectory_cut_on_its_tool_resumes_when_the_tool_answers_its_cache_lost(resume_at):
    registry = TurnRegistry(LAW, seed=2)
    server = _server(registry)
    server.add_many([5], [300], [900], 0.0)
    trajectory = registry.trajectories[5]
    a0, o0 = trajectory.assistant[0], trajectory.observation[0]
    end0 = _alone(300, a0)
    result = server.interrupt(end0 + 1.0)                 # out on its 4 s tool
    (part,) = result.partial
    assert part.generated == a0 and not result.finished
    (wait,) = server.take_waits()                          # the engine idle on the tool
    assert wait == pytest.approx((end0, end0 + 1.0))
    again = _server(registry)
    again.add_many([5], [300], [900], end0 + resume_at, [part.generated])
    start = max(end0 + 4.0, end0 + resume_at)
    ctx1 = 300 + a0 + o0
    end1 = start + _alone(ctx1, trajectory.assistant[1])   # re-prefilled: the new weights flushed the cache
    ctx2 = 300 + trajectory.before[2]
    end2 = end1 + 4.0 + _alone(ctx2, trajectory.assistant[2], 0, ctx2 - trajectory.observation[1])
    assert _drain(again)[5] == pytest.approx(end2, rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 10), seed=st.integers(0, 2**16), cuts=st.lists(st.floats(0.5, 60.0), max_size=4))
def test_interrupted_trajectories_finish_once_and_decode_each_token_once(n, seed, cuts):
    rng = np.random.default_rng(seed)
    law = TurnLaw(4, 2.5, 60.0, 0.5, 3.0, 1.0)
    registry = TurnRegistry(law, seed)
    servers = [_server(registry), _server(registry)]
    prompts, responses = rng.integers(50, 400, n), rng.integers(10, 1500, n)
    servers[0].add_many(range(n), prompts, responses, 0.0)
    assistant = sum(sum(registry.trajectories[i].assistant) for i in range(n))
    finished, now = {}, 0.0
    for cut in sorted(cuts):
        now = max(now, cut)
        for server in servers:
            for done in server.advance_to(now):
                assert done.seq_id not in finished
                finished[done.seq_id] = done.time_s
        moved = []
        for server in servers:
            result = server.interrupt(now)
            finished.update({done.seq_id: done.time_s for done in result.finished})
            moved += result.partial
        now += 1.0                                           # the weight update
        for part in moved:                                   # sent again, routed afresh
            servers[part.seq_id % 2].add_many([part.seq_id], [part.prompt_len], [part.response_len], now,
                                              [part.generated])
    for server in servers:
        for seq_id, time_s in _drain(server).items():
            assert seq_id not in finished
            finished[seq_id] = time_s
    assert sorted(finished) == list(range(n))
    assert sum(server.engine.generated_tokens for server in servers) == assistant
