"""When a distilled sample is ready: its teacher log-probabilities computed on the teacher pool
(workload.distillation) after its reward.

verl 0.9's agent loop awaits, for each finished sample, its reward and then the teacher
(experimental/agent_loop/agent_loop.py: _compute_score, then _compute_teacher_logprobs), so a
sample reaches training when the teacher answers. The teacher pool is served as a fluid pool
(reward_pool.RewardPool): each sample handed over when its reward is ready needs its share of
whole-pool time at full engine steps (llm/teacher.py TeacherCost.pool_s) and no less than its own
latency on an idle engine (alone_s); samples handed over while the pool is busy wait for it, first
come, first served.
"""
from __future__ import annotations

import numpy as np

from .state import RunState


def with_teacher_payload(ctx: RunState, payload: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Samples' DistQueue bytes with the teacher's log-probabilities they carry (distillation; ``lens``
    their tokens); ``payload`` itself without a teacher."""
    spec = ctx.workload.distillation
    return payload if spec is None else payload + spec.payload_bytes(np.asarray(lens, float))


def teacher_scored(ctx: RunState, handed_at: np.ndarray, prompt_len: np.ndarray,
                   response_len: np.ndarray) -> np.ndarray:
    """When each sample handed to the teacher at ``handed_at`` (absolute seconds: its reward ready)
    has its teacher log-probabilities; ``handed_at`` itself without a teacher."""
    if ctx.workload.distillation is None or not len(handed_at):
        return handed_at
    cost = ctx.costs.teacher(prompt_len, response_len, ctx.pools["teacher"].ranks)
    totals = ctx.totals
    totals.teacher_flops += float(cost.flops.sum())
    order = np.argsort(handed_at, kind="stable")
    pool = totals.teacher_pool
    in_order = pool.serve_in_order(handed_at[order], cost.pool_s[order], least_s=cost.alone_s[order])
    done = np.empty(len(handed_at))
    if in_order is not None:
        done[order] = in_order
        return done
    for row in order.tolist():
        done[row] = pool.serve(float(handed_at[row]), float(cost.pool_s[row]), least_s=float(cost.alone_s[row]))
    return done
