"""When rule rewards are ready: which workers verify a sample (the job's shared pool, or its
instance's own) and what they are handed (workload.reward.handover), on reward_pool.RewardPool."""
from __future__ import annotations

import numpy as np

from ..costs import Ranks
from .reward_pool import RewardPool
from .state import RunState


def rule_rewards_ready(ctx: RunState, finish: np.ndarray, ranks: Ranks, handover: str,
                       prompt_len: np.ndarray, response_len: np.ndarray,
                       handed_over: float | None = None) -> np.ndarray:
    """When each of the samples finished at ``finish`` (absolute seconds) on the instance at
    ``ranks`` is verified: on the job's shared pool (reward.workers) or that instance's own workers
    (workers_per_device), handed over together at ``handed_over`` (default: the last finish;
    handover "batch") or each as it finishes, first come first served ("sample"). Either waits for
    what the workers are busy with. Each sample takes Costs.reward_cpu_s of its lengths on a worker."""
    pool, workers = _workers_of(ctx, ranks)
    each_s = np.asarray(ctx.costs.reward_cpu_s(prompt_len, response_len), float)
    if handover == "sample":
        order = np.argsort(finish, kind="stable")
        in_order = pool.serve_in_order(finish[order], each_s[order] * min(1.0, 1 / workers), least_s=each_s[order])
        done = np.empty(len(finish))
        if in_order is not None:
            done[order] = in_order
            return done
        # one at a time, on Python floats (a numpy sum and max of one value each per sample cost more than serve)
        for row, at, each in zip(order.tolist(), finish[order].tolist(), each_s[order].tolist(), strict=True):
            done[row] = _verified(pool, workers, at, each, max(each, 0.0))
        return done
    at = float(finish.max()) if handed_over is None else handed_over
    return np.full(len(finish), _verified(pool, workers, at, float(each_s.sum()), float(each_s.max(initial=0.0))))


def _workers_of(ctx: RunState, ranks: Ranks) -> tuple[RewardPool, float]:
    """The pool that verifies samples of ``ranks`` and its worker count: the job's shared pool, or
    the instance's own (one per rank range, kept over the run)."""
    reward = ctx.workload.reward
    if ctx.shared_reward:
        return ctx.totals.reward_pool, reward.workers_on(len(ranks))
    key = (ranks.start, ranks.stop) if isinstance(ranks, range) else tuple(ranks)
    return ctx.totals.instance_reward_pools.setdefault(key, RewardPool()), reward.workers_on(len(ranks))


def _verified(pool: RewardPool, workers: float, handed_over: float, total_s: float, longest_s: float) -> float:
    """When samples handed over together at ``handed_over``, taking ``total_s`` on one worker in all and
    ``longest_s`` the longest, are verified: the batch spread evenly over the pool needs total / workers
    of the whole pool's time, and no less than its longest sample (a batch smaller than the pool leaves
    workers free)."""
    return pool.serve(handed_over, total_s / workers, least_s=longest_s)
