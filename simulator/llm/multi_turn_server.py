"""A rollout server whose requests are whole multi-turn trajectories (the agent loops of the async
frameworks: verl's fully async Rollouter and AReaL's workflow executor run one loop per trajectory
against their servers, and a weight sync pauses them).

``MultiTurnServer`` wraps one RolloutEngine behind the server protocol the request-fed schedules
use (rl/costs.py RolloutServer): the Rollouter submits a trajectory (prompt, whole response,
tokens so far) and hears of it once its last turn is done; in between, the server sends each turn
to its engine, holds the trajectory over its tool call, and sends the next turn with the earlier
context cached (llm/multi_turn.py gives the turns). An interrupt (a weight sync) returns every
trajectory it holds: one inside a turn with the tokens generated so far, one out on its tool with
its turn done; the registry, shared by the run's servers, remembers when that tool answers, so the
trajectory resumes there on whichever server it is sent to.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .inference import Finished, InterruptResult, PartialSequence
from .multi_turn import TurnLaw, TurnPlan, holds_every_context, plan_turns, sample_tokens


@dataclass
class Trajectory:
    """One sample's turns: the response tokens before each turn (its earlier turns and answers),
    the turn's assistant tokens, the answer after it and the tool's seconds; where it is."""
    prompt: int
    response: int
    before: list[int]
    assistant: list[int]
    observation: list[int]
    latency: list[float]
    turn: int = 0
    tool_back: float | None = None       # when its tool answers, while it is out on one
    cache_lost: bool = False             # its context's KV went with an interrupt (new weights flush it)

    def position(self, generated: int) -> tuple[int, int]:
        """(turn, its tokens done) at ``generated`` response tokens; tokens done equal to the turn's
        assistant tokens: the turn is done, its tool out."""
        k = bisect.bisect_right(self.before, generated) - 1
        return k, generated - self.before[k]


@dataclass
class TurnRegistry:
    """The run's trajectories by sequence id, their turns drawn on first sight from the seed, the id
    and the lengths (the same trajectory, the same turns, whichever server takes it)."""
    law: TurnLaw | None
    seed: int
    trajectories: dict[int, Trajectory] = field(default_factory=dict)

    @classmethod
    def of_plan(cls, plan: TurnPlan, prompts: np.ndarray) -> TurnRegistry:
        """Sample i of a batch's plan as trajectory i (run_turns: the batch drew its turns at once; no
        law: it draws none)."""
        registry = cls(None, seed=0)
        assistant, observation, latency = plan.assistant.tolist(), plan.observation.tolist(), plan.latency_s.tolist()
        steps = np.cumsum(plan.assistant + plan.observation).tolist()
        for i, (start, count) in enumerate(zip(plan.starts.tolist(), plan.counts.tolist(), strict=True)):
            before = [steps[start - 1] if start else 0, *steps[start:start + count - 1]]
            base = before[0]
            registry.trajectories[i] = Trajectory(
                int(prompts[i]), steps[start + count - 1] - base, [b - base for b in before],
                assistant[start:start + count], observation[start:start + count], latency[start:start + count])
        return registry

    def of(self, seq_id: int, prompt: int, response: int) -> Trajectory:
        known = self.trajectories.get(seq_id)
        if known is not None and (known.prompt, known.response) == (prompt, response):
            return known
        if self.law is None:
            raise ValueError(f"sequence {seq_id} is not one of this registry's trajectories")
        plan = plan_turns(self.law, np.array([response]), np.random.default_rng([self.seed, seq_id, prompt, response]))
        assistant, observation = plan.assistant.tolist(), plan.observation.tolist()
        steps = np.cumsum(plan.assistant + plan.observation).tolist()
        trajectory = Trajectory(prompt, response, [0, *steps[:-1]], assistant, observation, plan.latency_s.tolist())
        self.trajectories[seq_id] = trajectory
        return trajectory


class MultiTurnServer:
    """One engine serving whole trajectories turn by turn (the RolloutServer protocol)."""

    def __init__(self, engine: Any, registry: TurnRegistry, cached: bool = True, max_context: int | None = None,
                 cache_eviction: bool = True) -> None:
        """``cached``: a next turn's earlier context is a cached prefix (prefix caching); ``max_context``
        (max_model_len): a turn whose context reaches it is not sent (the trajectory ends then);
        ``cache_eviction`` (with ``cached``): that prefix is what the engine's cache kept of it while
        the trajectory was out on its tool (RolloutEngine.keep_freed_contexts: other sequences'
        pages evict it, oldest first), else all of it."""
        self.engine, self.registry, self.cached, self.max_context = engine, registry, cached, max_context
        self.evicting = cached and cache_eviction
        if self.evicting:
            engine.keep_freed_contexts()
        self._outbox: list[Finished] = []            # finished before an add, not yet handed out
        self._out: list[tuple[float, int]] = []     # (tool answers, seq id) of the trajectories out on tools
        self._held: dict[int, Trajectory] = {}       # seq id -> trajectory, in the engine or out on a tool
        self._waits: list[tuple[float, float]] = []  # the engine's idle stretches with tools out
        self._last_event = 0.0

    @property
    def busy_s(self) -> float:
        return self.engine.busy_s

    @property
    def load(self) -> int:
        """Trajectories held: in the engine or out on a tool (an agent loop in flight)."""
        return len(self._held)

    def take_waits(self) -> list[tuple[float, float]]:
        """The engine's idle stretches while trajectories were out on their tools, since last asked."""
        waits, self._waits = self._waits, []
        return waits

    def counts(self) -> dict[str, int]:
        """The engine's counts (RolloutEngine.counts): its preemptions, prefills, evictions."""
        return self.engine.counts()

    def add_many(self, seq_ids: Sequence[int], prompt_lens: Sequence[int], response_lens: Sequence[int],
                 now: float, generated: Sequence[int] | None = None, group_ids: Sequence[int] | None = None,
                 kept: Sequence[int] | None = None) -> None:
        """Trajectories joining at ``now``: a fresh one (or one cut inside a turn) sends that turn now;
        one cut out on its tool waits for its answer (at now if it came during the pause). What happens
        before ``now`` runs first (its finishes are handed out by the next advance_to)."""
        self._outbox += self._run(now, inclusive=False)
        self._close_wait(now)
        ids, send, turns, done, groups, cached = [], [], [], [], [], []
        for i, seq_id in enumerate(np.asarray(seq_ids).tolist()):
            trajectory = self.registry.of(seq_id, int(prompt_lens[i]), int(response_lens[i]))
            self._held[seq_id] = trajectory
            k, tokens = trajectory.position(0 if generated is None else int(generated[i]))
            trajectory.turn = k
            if tokens == trajectory.assistant[k]:      # its turn done: out on its tool
                back = now if trajectory.tool_back is None else max(now, trajectory.tool_back)
                heapq.heappush(self._out, (back, seq_id))
                continue
            ids.append(seq_id)
            send.append(trajectory.prompt + trajectory.before[k])
            turns.append(trajectory.assistant[k])
            done.append(tokens)
            groups.append(-1 - seq_id if group_ids is None or k else int(group_ids[i]))
            cached.append(0 if kept is None else int(kept[i]))
        if ids:
            self.engine.add_many(ids, send, turns, now, done, group_ids=groups, kept=cached if any(cached) else None)
        self._last_event = max(self._last_event, now)

    def next_event_time(self) -> float:
        return min(self.engine.next_event_time(), self._out[0][0] if self._out else math.inf)

    def advance_to(self, t: float) -> list[Finished]:
        """Run to ``t``: tool answers send their next turn, finished turns go out to their tools, last
        turns come back as the trajectory's finish (in finish order)."""
        finished, self._outbox = self._outbox, []
        return finished + self._run(t, inclusive=True)

    def _run(self, t: float, inclusive: bool) -> list[Finished]:
        """The events up to ``t`` (at ``t`` too when ``inclusive``), a tool's answer before an engine
        event at the same time; the trajectories finished meanwhile."""
        finished: list[Finished] = []
        while True:
            t_engine = self.engine.next_event_time()
            t_back = self._out[0][0] if self._out else math.inf
            t_next = min(t_engine, t_back)
            if math.isinf(t_next) or t_next > t or (t_next == t and not inclusive):
                return finished
            if t_back <= t_engine:
                self._answers(t_back, finished)
                continue
            self._last_event = t_engine
            for done in self.engine.advance_to(t_engine):
                self._turn_done(int(done.seq_id), float(done.time_s), finished)

    def _close_wait(self, now: float) -> None:
        """The engine idle since its last event while trajectories are out on tools: a wait to ``now``."""
        if self._out and math.isinf(self.engine.next_event_time()) and now > self._last_event:
            self._waits.append((self._last_event, now))

    def _answers(self, now: float, finished: list[Finished]) -> None:
        """The tools answering at ``now``: each trajectory's next turn, all but the answer cached (one
        whose context reached max_context ends at now)."""
        self._close_wait(now)
        ids, send, turns, cached = [], [], [], []
        while self._out and self._out[0][0] == now:
            seq_id = heapq.heappop(self._out)[1]
            trajectory = self._held[seq_id]
            trajectory.turn += 1
            trajectory.tool_back = None
            k = trajectory.turn
            if self.max_context is not None and trajectory.prompt + trajectory.before[k] >= self.max_context:
                self._finish(seq_id, now, finished)
                continue
            ids.append(seq_id)
            send.append(trajectory.prompt + trajectory.before[k])
            turns.append(trajectory.assistant[k])
            cached.append(0 if trajectory.cache_lost else trajectory.prompt + trajectory.before[k]
                          - trajectory.observation[k - 1])
            trajectory.cache_lost = False
        if ids:   # (evicting: the engine knows what survives of each one's context)
            self.engine.add_many(ids, send, turns, now,
                                 kept=cached if self.cached and not self.evicting and any(cached) else None)
        self._last_event = now

    def _turn_done(self, seq_id: int, time_s: float, finished: list[Finished]) -> None:
        trajectory = self._held[seq_id]
        k = trajectory.turn
        if k + 1 == len(trajectory.assistant):
            self._finish(seq_id, time_s, finished)
            return
        trajectory.tool_back = time_s + trajectory.latency[k]
        heapq.heappush(self._out, (trajectory.tool_back, seq_id))

    def _finish(self, seq_id: int, time_s: float, finished: list[Finished]) -> None:
        del self._held[seq_id]
        self.registry.trajectories.pop(seq_id, None)   # done: never sent again
        finished.append(Finished(seq_id, time_s))

    def interrupt(self, now: float) -> InterruptResult:
        """A pause at ``now`` (the engine's interrupt: its KV cleared): every trajectory held comes
        back, finished or cut: inside a turn with its tokens so far, out on its tool with its turn
        done (the registry keeps when the tool answers)."""
        finished = self.advance_to(now)
        self._close_wait(now)
        result = self.engine.interrupt(now)
        for done in result.finished:
            self._turn_done(int(done.seq_id), float(done.time_s), finished)
        partial = []
        for part in result.partial:
            trajectory = self._held.pop(int(part.seq_id))
            partial.append(PartialSequence(int(part.seq_id), trajectory.prompt, trajectory.response,
                                           trajectory.before[trajectory.turn] + int(part.generated)))
        for _, seq_id in sorted(self._out, key=lambda entry: entry[1]):
            trajectory = self._held.pop(seq_id)
            trajectory.cache_lost = True
            k = trajectory.turn
            partial.append(PartialSequence(seq_id, trajectory.prompt, trajectory.response,
                                           trajectory.before[k] + trajectory.assistant[k]))
        self._out.clear()
        self._last_event = now
        return InterruptResult(finished, partial, dict(result.cached))


def run_turns(engine: Any, ids: np.ndarray, prompts: np.ndarray, plan: TurnPlan, finish_s: np.ndarray, *,
              arrivals: np.ndarray | None = None, groups: np.ndarray | None = None, cached: bool = True,
              max_context: int | None = None, cache_eviction: bool = True) -> np.ndarray:
    """Drive ``engine`` (simulator.llm.inference.RolloutEngine) through the turns of the samples
    ``ids`` (indexes into prompts, the plan, arrivals, groups and finish_s, and the engine's sequence
    ids), writing each one's last finish at finish_s[id]: a MultiTurnServer over the batch's plan. A
    sample's first turn joins at its arrival (None: 0); each later one at the finish before it plus
    the tool's seconds, its context the prompt and every earlier turn and observation, ``cached``:
    all but the new observation (prefix caching; ``cache_eviction``: what survives of it in the
    engine's cache, MultiTurnServer, unless the pool holds every sample's whole context at once).
    A turn whose context reaches ``max_context``
    (max_model_len) is not sent: the sample ends before it. Returns the engine's tool waits:
    [start, end) rows where it had no work while samples were out on their tools."""
    ids = np.asarray(ids, np.int64)
    prompts = np.asarray(prompts, np.int64)
    registry = TurnRegistry.of_plan(plan, prompts)
    responses = sample_tokens(plan)
    roomy = holds_every_context(engine, int(prompts[ids].sum() + responses[ids].sum()))
    server = MultiTurnServer(engine, registry, cached, max_context, cache_eviction and not roomy)
    starts = np.zeros(len(ids)) if arrivals is None else np.asarray(arrivals, float)[ids]
    for at in np.unique(starts).tolist():           # first turns, each set arriving together at once
        first = ids[starts == at]
        server.add_many(first, prompts[first], responses[first], at, group_ids=None if groups is None else groups[first])
    for done in server.advance_to(math.inf):        # every event, to the last finish
        finish_s[done.seq_id] = done.time_s
    return np.array(server.take_waits(), float).reshape(-1, 2)
