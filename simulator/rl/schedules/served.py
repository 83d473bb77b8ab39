"""When a sample's served models have answered: a reward model served on engines of its own
(workload.reward.served) scores it, then a distillation teacher (workload.distillation) returns its
log-probabilities.

verl 0.9's agent loop awaits, for each finished sample, its reward and then the teacher
(experimental/agent_loop/agent_loop.py: _compute_score, then _compute_teacher_logprobs); with a
reward model on a resource pool of its own, _compute_score posts the sample to a reward-loop
worker, which posts it to the reward model's engines (experimental/reward_loop/reward_loop.py
compute_score_disrm: vLLM /classify). A served pool is a fluid pool (reward_pool.RewardPool): each
sample handed over needs its share of whole-pool time at full engine steps (llm/served.py
ServedCost.pool_s) and no less than its own latency on an idle engine (alone_s); samples handed over
while the pool is busy wait for it, first come, first served. AReaL's teacher is handed the
trainer's batch at once instead (distillation.handover step: served_batch, which training.py's
forward passes wait for), each engine answering one request at a time (one_at_a_time).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .reward_pool import RewardPool
from .state import RunState


def _streams_teacher(ctx: RunState) -> bool:
    """A teacher handed each sample in the rollout (distillation.handover sample)."""
    spec = ctx.workload.distillation
    return spec is not None and spec.handover == "sample"


def with_teacher_payload(ctx: RunState, payload: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Samples' DistQueue bytes with the teacher's log-probabilities they carry from the rollout
    (distillation with handover sample; ``lens`` their tokens); ``payload`` itself otherwise."""
    if not _streams_teacher(ctx):
        return payload
    return payload + ctx.workload.distillation.payload_bytes(np.asarray(lens, float))


def teacher_scored(ctx: RunState, handed_at: np.ndarray, prompt_len: np.ndarray,
                   response_len: np.ndarray) -> np.ndarray:
    """When each sample handed to the teacher at ``handed_at`` (absolute seconds: its reward ready)
    has its teacher log-probabilities; ``handed_at`` itself without a teacher in the rollout."""
    if not _streams_teacher(ctx):
        return handed_at
    return served_scored(ctx, "teacher", handed_at, prompt_len, response_len)


def served_scored(ctx: RunState, role: str, handed_at: np.ndarray, prompt_len: np.ndarray,
                  response_len: np.ndarray) -> np.ndarray:
    """When each sample handed at ``handed_at`` (absolute seconds) to the served pool of ``role`` has
    its answer, first come, first served."""
    if not len(handed_at):
        return handed_at
    pool_s, alone_s = _charged(ctx, role, prompt_len, response_len)
    order = np.argsort(handed_at, kind="stable")
    pool = ctx.totals.served.setdefault(role, RewardPool())
    in_order = pool.serve_in_order(handed_at[order], pool_s[order], least_s=alone_s[order])
    done = np.empty(len(handed_at))
    if in_order is not None:
        done[order] = in_order
        return done
    for row in order.tolist():
        done[row] = pool.serve(float(handed_at[row]), float(pool_s[row]), least_s=float(alone_s[row]))
    return done


def served_batch(ctx: RunState, role: str, at: float, prompt_len: np.ndarray, response_len: np.ndarray) -> float:
    """When a batch handed at ``at`` to the served pool of ``role`` has all its answers: one at a time
    on each engine (its share dealt round-robin, as AReaL's controller deals a batch over its workers),
    the engine with the most work last; else the batch's pool time and no less than its longest
    sample. Waits while the pool is busy."""
    if not len(prompt_len):
        return at
    pool_s, alone_s = _charged(ctx, role, prompt_len, response_len)
    pool = ctx.totals.served.setdefault(role, RewardPool())
    if _spec(ctx, role).one_at_a_time:
        engines = _engines(ctx, role)
        span = max(float(alone_s[engine::engines].sum()) for engine in range(min(engines, len(alone_s))))
        return pool.serve(at, span, least_s=span)
    return pool.serve(at, float(pool_s.sum()), least_s=float(alone_s.max()))


def _charged(ctx: RunState, role: str, prompt_len: np.ndarray, response_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each sample's whole-pool seconds, its latency alone) on ``role``'s pool, its FLOPs counted: an
    engine answering one request at a time takes each sample's latency alone over the engines."""
    cost = ctx.costs.served(role, prompt_len, response_len, ctx.pools[role].ranks)
    totals = ctx.totals
    totals.served_flops[role] = totals.served_flops.get(role, 0.0) + float(cost.flops.sum())
    if _spec(ctx, role).one_at_a_time:
        return cost.alone_s / _engines(ctx, role), cost.alone_s
    return cost.pool_s, cost.alone_s


def _spec(ctx: RunState, role: str) -> Any:
    """The served model's scenario section (reward.served, or distillation)."""
    return ctx.workload.reward.served if role == "reward_model" else ctx.workload.distillation


def _engines(ctx: RunState, role: str) -> int:
    """The engines of ``role``'s pool (its devices over one engine's)."""
    return max(1, len(ctx.pools[role].ranks) // ctx.costs.served_instance_devices(role))
