"""Multi-turn (agentic, tool-calling) rollouts on one engine: each sample is a chain of assistant
turns, each ended by a call to a tool or environment whose answer the next turn reads.

What a framework's agent loop does per sample (verl's AgentLoop / ToolAgentLoop, SkyRL's
SkyRLGymGenerator, NeMo RL's run_multi_turn_rollout, TRL's tool-calling loop): send the context to
the engine, take the assistant turn it generates, run the tool (host time: the engine serves the
other samples meanwhile, or idles), append the tool's answer (observation tokens) and send the
longer context again. With prefix caching the earlier context's KV is still cached when the sample
comes back (vLLM's automatic prefix caching, SGLang's radix cache), so the engine prefills only the
observation; without it, the whole context again. A sample is done after its last turn.

The response as the rest of rlsim counts it (the length law, training, the reward) is every token
after the prompt, the observations included, as verl's response_length and its response mask count
it. ``plan_turns`` splits each response into turns; ``run_turns_in_lockstep`` drives engines through
a batch's turns together; multi_turn_server.py runs each sample's turns on its own (``run_turns``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


@dataclass(frozen=True)
class TurnLaw:
    """How samples split into turns (workload.multi_turn, scenario.MultiTurnSpec: the fields' sources).

    max_turns: assistant turns at most. mean_turns: their mean, the count 1 + a geometric number of
    further turns cut at max_turns (None: every sample takes max_turns). observation_tokens,
    observation_sigma: a tool answer's tokens, lognormal with that mean and shape. tool_latency_s,
    tool_latency_sigma: a turn's tool calls' seconds, lognormal likewise (sigma 0: constant).
    lockstep: the batch's turns in lock-step (run_turns_in_lockstep); else each sample on its own
    (run_turns). max_turn_tokens: a turn's assistant tokens at most (None: no cap of its own).
    cache_eviction: a sample's context, cached while it is out on its tool, is evictable by the
    other sequences' pages (RolloutEngine.keep_freed_contexts); False: it always stays cached."""
    max_turns: int
    mean_turns: float | None
    observation_tokens: float
    observation_sigma: float
    tool_latency_s: float
    tool_latency_sigma: float
    lockstep: bool = False
    max_turn_tokens: int | None = None
    cache_eviction: bool = True


class TurnPlan(NamedTuple):
    """Every sample's turns, flat in sample order: turn k of sample i at starts[i] + k.
    assistant: tokens the engine generates in the turn; observation: tokens the tool's answer
    appends after it (0 after the last turn); latency_s: the tool call's seconds (0 after the last)."""
    starts: np.ndarray
    counts: np.ndarray
    assistant: np.ndarray
    observation: np.ndarray
    latency_s: np.ndarray


def continue_probability(max_turns: int, mean_turns: float) -> float:
    """q with E[min(1 + Geometric(q), max_turns)] = sum_{k<max_turns} q^k = mean_turns (bisection:
    the sum rises with q from 1 at q = 0 to max_turns at q = 1)."""
    if not 1.0 <= mean_turns <= max_turns:
        raise ValueError(f"mean_turns {mean_turns} is outside [1, max_turns {max_turns}]")
    low, high = 0.0, 1.0
    for _ in range(100):
        mid = (low + high) / 2.0
        if sum(mid ** k for k in range(max_turns)) < mean_turns:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    """Draws with the given mean (not median): mean x exp(sigma Z - sigma^2 / 2)."""
    if sigma == 0 or mean == 0:
        return np.full(size, float(mean))
    return mean * np.exp(sigma * rng.standard_normal(size) - sigma * sigma / 2.0)


def plan_turns(law: TurnLaw, responses: np.ndarray, rng: np.random.Generator) -> TurnPlan:
    """Split each response (every token after the prompt) into turns: draw the turn count and the
    n - 1 observations (scaled down together where they leave fewer than one assistant token a turn,
    the count cut to the response's tokens), then cut the assistant tokens at n - 1 uniformly drawn
    places (each turn at least one token)."""
    responses = np.asarray(responses, np.int64)
    size = len(responses)
    if law.mean_turns is None or law.mean_turns >= law.max_turns:
        counts = np.full(size, law.max_turns, np.int64)
    else:   # trials to the first stop, each turn going on with probability q: P(count > k) = q^k
        q = continue_probability(law.max_turns, law.mean_turns)
        counts = np.minimum(rng.geometric(1.0 - q, size), law.max_turns).astype(np.int64)
    if law.max_turn_tokens is not None:   # enough turns for the response at the per-turn cap
        needed = -(-responses // law.max_turn_tokens)
        if (needed > law.max_turns).any():
            longest = int(responses.max())
            raise ValueError(f"a {longest}-token response does not fit {law.max_turns} turns of at most "
                             f"{law.max_turn_tokens} tokens")
        counts = np.maximum(counts, needed)
    counts = np.minimum(counts, np.maximum(responses, 1))
    starts = np.cumsum(counts) - counts
    total = int(counts.sum())
    observation = np.zeros(total, np.int64)
    latency = np.zeros(total)
    last = starts + counts - 1
    tool = np.ones(total, bool)
    tool[last] = False
    observation[tool] = np.rint(_lognormal(rng, law.observation_tokens, law.observation_sigma, int(tool.sum())))
    latency[tool] = _lognormal(rng, law.tool_latency_s, law.tool_latency_sigma, int(tool.sum()))
    owner = np.repeat(np.arange(size), counts)
    observed = np.bincount(owner, weights=observation, minlength=size)
    room = responses - counts                       # what the observations may take
    over = observed > room
    if over.any():
        scale = np.where(over, room / np.maximum(observed, 1), 1.0)
        observation = np.floor(observation * scale[owner]).astype(np.int64)
    assistant_total = responses - np.bincount(owner, weights=observation, minlength=size).astype(np.int64)
    assistant = _split(assistant_total, counts, starts, rng, law.max_turn_tokens)
    return TurnPlan(starts, counts, assistant, observation, latency)


def _split(totals: np.ndarray, counts: np.ndarray, starts: np.ndarray, rng: np.random.Generator,
           cap: int | None = None) -> np.ndarray:
    """Cut each total into its count of parts of at least one token: the part sizes 1 + the gaps
    between count - 1 uniform draws from [0, total - count] (sorted: no turn favoured); with a
    ``cap`` (total <= count x cap), what parts hold above it goes to the first with room."""
    out = np.empty(int(counts.sum()), np.int64)
    spare = totals - counts
    for i in np.flatnonzero(counts > 1).tolist():
        cuts = np.sort(rng.integers(0, spare[i] + 1, counts[i] - 1))
        parts = 1 + np.diff(np.concatenate([[0], cuts, [spare[i]]]))
        if cap is not None and parts.max() > cap:
            excess = int(np.maximum(parts - cap, 0).sum())
            parts = np.minimum(parts, cap)
            room = cap - parts
            parts += np.clip(excess - (np.cumsum(room) - room), 0, room)
        out[starts[i]:starts[i] + counts[i]] = parts
    single = counts == 1
    out[starts[single]] = totals[single]
    return out


class EngineShare(NamedTuple):
    """One engine of a lock-step rollout and the samples it serves (indexes, as run_turns' ids)."""
    engine: Any
    ids: np.ndarray


def run_turns_in_lockstep(shares: list[EngineShare], prompts: np.ndarray, plan: TurnPlan, finish_s: np.ndarray, *,
                          groups: np.ndarray | None = None, cached: bool = True, max_context: int | None = None,
                          cache_eviction: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
    """Turns in lock-step over every engine (NeMo RL's run_multi_turn_rollout: the batch generates
    turn k, then the environments step for every sample still going, then turn k + 1): each
    engine takes its samples' turn k at the same time, runs until it has none left; once the last
    engine is done the tools run, all together, and the next turn starts when the slowest answers.
    Writes each sample's last finish (a sample out of room, max_context, ends when its tool
    answers). ``cache_eviction`` (with ``cached``): a sample's context stays in its engine's cache
    only while the other sequences' pages leave it room (RolloutEngine.keep_freed_contexts), else
    always. Returns per engine (its idle stretches waiting for the other engines, those waiting
    for the tools), [start, end) rows."""
    context = np.asarray(prompts, np.int64).copy()
    whole = context + sample_tokens(plan)
    # per engine, whether it keeps what survives of each context (else all of it is kept: ``cached``)
    evicting = [cached and cache_eviction and not holds_every_context(share.engine, int(whole[share.ids].sum()))
                for share in shares]
    for share, evicts in zip(shares, evicting, strict=True):
        if evicts:
            share.engine.keep_freed_contexts()
    waiting = [([], []) for _ in shares]            # (for the other engines, for the tools)
    now = 0.0
    for k in range(int(plan.counts.max(initial=0))):
        ends = []
        for share, evicts in zip(shares, evicting, strict=True):
            going = share.ids[(plan.counts[share.ids] > k) & np.isnan(finish_s[share.ids])]
            ends.append(_one_lockstep_turn(share.engine, going, context, plan, k, now, groups,
                                           cached and not evicts, finish_s))
        barrier = max(ends, default=now)
        going_on = np.flatnonzero((plan.counts > k + 1) & np.isnan(finish_s))
        if not len(going_on):
            break
        answered = barrier + float(plan.latency_s[plan.starts[going_on] + k].max())
        context[going_on] += plan.observation[plan.starts[going_on] + k]
        if max_context is not None:
            full = going_on[context[going_on] >= max_context]
            finish_s[full] = answered
        for (for_engines, for_tools), end in zip(waiting, ends, strict=True):
            for_engines.append((end, barrier))
            for_tools.append((barrier, answered))
        now = answered
    return [(_rows(for_engines), _rows(for_tools)) for for_engines, for_tools in waiting]


def sample_tokens(plan: TurnPlan) -> np.ndarray:
    """Each sample's tokens after its prompt: its turns and the answers between them."""
    return np.bincount(np.repeat(np.arange(len(plan.counts)), plan.counts),
                       weights=plan.assistant + plan.observation, minlength=len(plan.counts)).astype(np.int64)


def holds_every_context(engine: Any, tokens: int) -> bool:
    """Whether ``engine``'s KV pool holds ``tokens`` (its samples' whole contexts, every turn and answer)
    at once beside a slot and the windows' / states' pages of every sequence it may run: then no
    freed context is ever evicted (RolloutEngine.keep_freed_contexts would change nothing but the
    speed: its engine leaves the array run), the margin RolloutEngine._fast_ok takes."""
    return tokens + engine.max_running * (1 + engine.seq_kv) + 2 <= engine.capacity


def _one_lockstep_turn(engine: Any, going: np.ndarray, context: np.ndarray, plan: TurnPlan, k: int, now: float,
                       groups: np.ndarray | None, cached: bool, finish_s: np.ndarray) -> float:
    """Turn k of ``going`` on ``engine`` from ``now`` to its last finish (returned; now if none):
    from turn 1 on, ``cached``: all but the tool's answer is cached (else the engine keeps what
    survives of the earlier context, or nothing); a sample's last turn writes its finish;
    the others' contexts take the turn's tokens."""
    if not len(going):
        return now
    turn = plan.starts[going] + k
    engine.add_many(going, context[going], plan.assistant[turn], now,
                    group_ids=None if groups is None or k else groups[going],
                    kept=context[going] - plan.observation[turn - 1] if cached and k else None)
    end = now
    for seq_id, time_s in engine.advance_to(math.inf):
        end = max(end, time_s)
        if plan.counts[seq_id] == k + 1:
            finish_s[seq_id] = time_s
    context[going] += plan.assistant[turn]
    return end


def _rows(stretches: list[tuple[float, float]]) -> np.ndarray:
    """Non-empty [start, end) stretches as rows."""
    return np.array([(a, b) for a, b in stretches if b > a], float).reshape(-1, 2)
