"""When rule rewards are ready: which workers verify a sample (the job's shared pool, or its
instance's own) and what they are handed (workload.reward.handover), on reward_pool.RewardPool."""
from __future__ import annotations

import numpy as np

from ..costs import Ranks
from .reward_pool import RewardPool
from .state import RunState


def rule_rewards_ready(ctx: RunState, finish: np.ndarray, ranks: Ranks, handover: str,
                       handed_over: float | None = None) -> np.ndarray:
    """When each of the samples finished at ``finish`` (absolute seconds) on the instance at
    ``ranks`` is verified: on the job's shared pool (reward.workers) or that instance's own workers
    (workers_per_device), handed over together at ``handed_over`` (default: the last finish;
    handover "batch") or each as it finishes, first come first served ("sample"). Either waits for
    what the workers are busy with."""
    pool, workers = _workers_of(ctx, ranks)
    if handover == "sample":
        order = np.argsort(finish, kind="stable")
        idle_s = ctx.costs.reward_cpu_s(1, ranks)
        in_order = pool.serve_in_order(finish[order], idle_s * min(1.0, 1 / workers), least_s=idle_s)
        done = np.empty(len(finish))
        if in_order is not None:
            done[order] = in_order
            return done
        for row in order:
            done[row] = _verified(ctx, pool, workers, float(finish[row]), 1, ranks)
        return done
    at = float(finish.max()) if handed_over is None else handed_over
    return np.full(len(finish), _verified(ctx, pool, workers, at, len(finish), ranks))


def _workers_of(ctx: RunState, ranks: Ranks) -> tuple[RewardPool, float]:
    """The pool that verifies samples of ``ranks`` and its worker count: the job's shared pool, or
    the instance's own (one per rank range, kept over the run)."""
    reward = ctx.workload.reward
    if ctx.shared_reward:
        return ctx.totals.reward_pool, reward.workers_on(len(ranks))
    key = (ranks.start, ranks.stop) if isinstance(ranks, range) else tuple(ranks)
    return ctx.totals.instance_reward_pools.setdefault(key, RewardPool()), reward.workers_on(len(ranks))


def _verified(ctx: RunState, pool: RewardPool, workers: float, handed_over: float, n_samples: int,
              ranks: Ranks) -> float:
    """When ``n_samples`` handed over together at ``handed_over`` are verified: their time on idle
    workers (Costs.reward_cpu_s), of which they occupy min(1, n / workers) of the pool."""
    idle_s = ctx.costs.reward_cpu_s(n_samples, ranks)
    share = min(1.0, n_samples / workers)
    return pool.serve(handed_over, idle_s * share, least_s=idle_s)
