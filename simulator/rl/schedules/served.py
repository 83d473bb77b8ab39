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
while the pool is busy wait for it, first come, first served.
"""
from __future__ import annotations

import numpy as np

from .reward_pool import RewardPool
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
    if ctx.workload.distillation is None:
        return handed_at
    return served_scored(ctx, "teacher", handed_at, prompt_len, response_len)


def served_scored(ctx: RunState, role: str, handed_at: np.ndarray, prompt_len: np.ndarray,
                  response_len: np.ndarray) -> np.ndarray:
    """When each sample handed at ``handed_at`` (absolute seconds) to the served pool of ``role`` has
    its answer, first come, first served."""
    if not len(handed_at):
        return handed_at
    cost = ctx.costs.served(role, prompt_len, response_len, ctx.pools[role].ranks)
    totals = ctx.totals
    totals.served_flops[role] = totals.served_flops.get(role, 0.0) + float(cost.flops.sum())
    order = np.argsort(handed_at, kind="stable")
    pool = totals.served.setdefault(role, RewardPool())
    in_order = pool.serve_in_order(handed_at[order], cost.pool_s[order], least_s=cost.alone_s[order])
    done = np.empty(len(handed_at))
    if in_order is not None:
        done[order] = in_order
        return done
    for row in order.tolist():
        done[row] = pool.serve(float(handed_at[row]), float(cost.pool_s[row]), least_s=float(cost.alone_s[row]))
    return done
