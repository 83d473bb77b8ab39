"""Training micro-batches of a mini-batch and where a training pool's ranks sit.

Packed training (verl ``use_dynamic_bsz``: ``seqlen_balancing.get_seqlen_balanced_partitions``;
Megatron THD packing) cuts a mini-batch into micro-batches of about equal token counts, so every
pipeline stage sees ops of about equal length. One sample per micro-batch in arrival order instead
gives variable-length micro-batches whose 1F1B pipeline stalls behind each long sample (measured
in docs/schedules.md). The training cost model (llm/training.py) takes a fixed number of samples
per micro-batch; ``balanced_order`` orders the samples so that consecutive groups of that size have
near-equal token sums (longest first, each to the lightest open group), which is the
cost model's view of a token-balanced packing.
"""
from __future__ import annotations

import heapq
import math

import numpy as np


def samples_per_micro_batch(lens: np.ndarray, pack_tokens: float, rows: int, dp: int) -> int:
    """Samples per micro-batch so one holds about ``rows`` packed rows of ``pack_tokens`` tokens,
    with at least one micro-batch per data-parallel replica."""
    n = len(lens)
    if n == 0:
        return 1
    mean = float(np.mean(lens))
    b = max(1, int(rows * pack_tokens // max(mean, 1.0)))
    return max(1, min(b, math.ceil(n / max(1, dp))))


def balanced_order(lens: np.ndarray, b: int) -> np.ndarray:
    """Permutation of ``lens`` whose consecutive groups of ``b`` have near-equal sums: longest
    first, each sample goes to the open group with the fewest tokens (LPT greedy with at most ``b``
    samples per group); the last group takes the remainder. Deterministic (stable sorts, ties to
    the lowest group).

    The heap holds one integer per open group, ``total x m + group``: integer totals order these
    keys exactly as the pairs (total, group), and an int compares faster than a tuple. A group's
    members come out in the order they joined (stable sort of the groups taken)."""
    lens = np.asarray(lens)
    n = len(lens)
    m = math.ceil(n / b) if b > 0 else 1
    if b <= 1 or m <= 1:
        return np.arange(n)
    by_len = np.argsort(-lens, kind="stable")
    last, last_size = m - 1, n - (m - 1) * b
    heap = list(range(m))              # every total 0: keys 0..m-1, already a heap
    filled = [0] * m
    taken = [0] * n                    # the group of the k-th longest sample
    replace, pop = heapq.heapreplace, heapq.heappop
    for k, tokens in enumerate(lens[by_len].astype(np.int64).tolist()):   # int(lens[i]) for each i
        key = heap[0]                  # the lightest open group (keys are unique)
        g = key % m
        taken[k] = g
        count = filled[g] = filled[g] + 1
        if count < (b if g != last else last_size):
            replace(heap, key + tokens * m)
        else:
            pop(heap)
    return by_len[np.argsort(np.array(taken, np.int64), kind="stable")]


def replica_contiguous_ranks(tp: int, cp: int, dp: int, pp: int, start: int = 0, fold: int = 1) -> list[int]:
    """Canonical rank list (position = tp + TP (cp + CP (dp + DP pp))) of a placement where each
    replica's TP x CP x PP devices are consecutive ranks (one scale-up domain when it fits) and DP is
    outermost, so the gradient all-reduce is the only training traffic between domains.

    ``fold``: DP replicas whose stages form one expert group (MoE parallel folding: etp x ep spans
    ``fold`` replicas' tp x cp ranks of a stage; TrainLayout.pool_unit / model_parallel). The
    ``fold`` replicas of a group are consecutive ranks, and inside them Megatron-Core's own rank
    order (tp-cp-ep-dp-pp: a stage's expert group together, pipeline outer), so the expert
    all-to-all stays among consecutive ranks; DP over the groups stays outermost. fold 1 is the
    plain replica-contiguous placement."""
    if fold < 1 or dp % fold:
        raise ValueError(f"fold {fold} must divide dp {dp}")
    # slot = tp + TP(cp + CP(f + F(pp + PP g))), replica d = g F + f
    slots = np.arange(tp * cp * dp * pp).reshape(dp // fold, pp, fold, cp, tp)
    canonical = slots.transpose(1, 0, 2, 3, 4)                       # -> [pp, g, f, cp, tp] = [pp, dp, cp, tp]
    return (canonical.ravel() + start).tolist()
