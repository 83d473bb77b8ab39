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
from collections.abc import Mapping
from typing import Any

import numpy as np

# The packed row width (schedule.pack_tokens) of a run whose length laws give no cap
# (workload.prompt_length.max and response_length.max both unset): no framework packs without a
# sequence cap (verl data.max_prompt_length + max_response_length, NeMo RL
# policy.max_total_sequence_length), so there is no framework figure to take; assumed, and set by
# schedule.pack_tokens. The run (rl/llm_costs.py) and the planner (autoplan.py) both read it here.
UNCAPPED_PACK_TOKENS = 4096


def pack_width(pack_tokens: int | None, prompt_length: Mapping[str, Any], response_length: Mapping[str, Any]) -> float:
    """Tokens of a packed training row: ``pack_tokens`` (schedule.pack_tokens) where given, else the
    longest sample the laws draw (prompt max + response max, the caps given), else
    UNCAPPED_PACK_TOKENS."""
    if pack_tokens:
        return float(pack_tokens)
    caps = float(prompt_length.get("max", 0) or 0) + float(response_length.get("max", 0) or 0)
    return caps or float(UNCAPPED_PACK_TOKENS)


def samples_per_micro_batch(lens: np.ndarray, pack_tokens: float, rows: int, dp: int) -> int:
    """Samples per micro-batch so one holds about ``rows`` packed rows of ``pack_tokens`` tokens,
    with at least one micro-batch per data-parallel replica."""
    n = len(lens)
    if n == 0:
        return 1
    mean = float(np.mean(lens))
    b = max(1, int(rows * pack_tokens // max(mean, 1.0)))
    return max(1, min(b, math.ceil(n / max(1, dp))))


def micro_batch_order(lens: np.ndarray, pack_tokens: float, rows: int, dp: int,
                      balanced: bool) -> tuple[int, np.ndarray]:
    """(samples per micro-batch, the samples in micro-batch order) of a mini-batch as the training
    cost model takes it: consecutive groups of that many samples are its micro-batches. Balanced
    (schedule.micro_batching: balanced on packed data): about ``rows`` packed rows of
    ``pack_tokens`` tokens a micro-batch, token-balanced (``balanced_order``); else ``rows``
    samples a micro-batch in arrival order."""
    lens = np.asarray(lens, np.int64)
    b, order = micro_batch_permutation(lens, pack_tokens, rows, dp, balanced)
    return b, lens if order is None else lens[order]


def micro_batch_permutation(lens: np.ndarray, pack_tokens: float, rows: int, dp: int,
                            balanced: bool) -> tuple[int, np.ndarray | None]:
    """(samples per micro-batch, the permutation micro_batch_order applies; None: arrival order)."""
    lens = np.asarray(lens, np.int64)
    if not balanced or not len(lens):
        return rows, None
    b = samples_per_micro_batch(lens, pack_tokens, rows, dp)
    return b, balanced_order(lens, b)


def heaviest_micro_batch(ordered: np.ndarray, b: int) -> float:
    """Tokens of the largest of the consecutive groups of ``b`` samples (micro_batch_order's)."""
    b = max(1, int(b))
    return float(np.add.reduceat(ordered, np.arange(0, len(ordered), b)).max()) if len(ordered) else 0.0


# Rounds of at least this many samples go through the array pass (``_array_rounds``); a shorter
# round hands the rest to the heap. Speed only (both give the same permutation): an array round
# costs about as much as ~100 heap steps.
ARRAY_ROUND_MIN = 128


def balanced_order(lens: np.ndarray, b: int, array_round_min: int = ARRAY_ROUND_MIN) -> np.ndarray:
    """Permutation of ``lens`` whose consecutive groups of ``b`` have near-equal sums: longest
    first, each sample goes to the open group with the fewest tokens (LPT greedy with at most ``b``
    samples per group); the last group takes the remainder. Deterministic (stable sorts, ties to
    the lowest group).

    Each open group is one integer key, ``total x m + group``: integer totals order these keys
    exactly as the pairs (total, group). The greedy runs as array rounds while they are long
    (``_array_rounds``), then on a heap of the keys (a sorted array is a valid heap). A sample's
    place is its group's start plus the members its group had before it."""
    lens = np.asarray(lens)
    n = len(lens)
    m = math.ceil(n / b) if b > 0 else 1
    if b <= 1 or m <= 1:
        return np.arange(n)
    by_len = _longest_first(lens)
    tokens = lens[by_len].astype(np.int64)                     # int(lens[i]) for each i, longest first
    last_size = n - (m - 1) * b
    filled = np.zeros(m, np.int64)
    place = np.empty(n, np.int64)                              # output position of the k-th longest
    keys = np.arange(m, dtype=np.int64)                        # every total 0
    done = 0
    if m >= array_round_min and tokens[-1] >= 1 and float(tokens.sum(dtype=float)) * m < 2.0 ** 62:
        done, keys = _array_rounds(tokens, b, m, last_size, filled, place, keys, array_round_min)
    if done < n:
        place[done:] = _heap_rest(tokens[done:].tolist(), b, m, last_size, filled.tolist(), keys.tolist())
    out = np.empty(n, np.int64)
    out[place] = by_len
    return out


def _longest_first(lens: np.ndarray) -> np.ndarray:
    """``np.argsort(-lens, kind="stable")``: longest first, ties in input order. Integer lengths
    within a span of 2**16 sort as their distance below the longest, as uint16: numpy's stable sort
    of 16-bit keys is a radix sort (~4x faster than the int64 merge sort, the same permutation)."""
    if lens.dtype.kind in "iu" and len(lens):
        longest = int(lens.max())
        if longest - int(lens.min()) < 2 ** 16:
            return np.argsort((longest - lens).astype(np.uint16), kind="stable")
    return np.argsort(-lens, kind="stable")


def _array_rounds(tokens: np.ndarray, b: int, m: int, last_size: int, filled: np.ndarray, place: np.ndarray,
                  keys: np.ndarray, round_min: int) -> tuple[int, np.ndarray]:
    """The greedy in rounds (positive tokens, keys sorted ascending): the next samples go to the
    open groups in key order for as long as each old key stays below every new key of the round's
    groups still open (else the sample would go to one of those). Fills ``filled`` and ``place``;
    returns the samples placed and the sorted keys of the open groups."""
    n = len(tokens)
    sizes = np.full(m, b, np.int64)
    sizes[-1] = last_size
    never = np.iinfo(np.int64).max
    done = 0
    while done < n:
        old = keys[:min(len(keys), n - done)]
        group = old % m
        before = filled[group]
        new = old + tokens[done:done + len(old)] * m
        stays_open = before + 1 < sizes[group]
        lowest_new = np.minimum.accumulate(np.where(stays_open, new, never))
        late = np.flatnonzero(old[1:] > lowest_new[:-1])
        r = int(late[0]) + 1 if len(late) else len(old)        # samples this round places
        place[done:done + r] = group[:r] * b + before[:r]
        filled[group[:r]] += 1
        keys = np.sort(np.concatenate([keys[r:], new[:r][stays_open[:r]]]))
        done += r
        if r < round_min:
            break
    return done, keys


def _heap_rest(tokens: list[int], b: int, m: int, last_size: int, filled: list[int], heap: list[int]) -> list[int]:
    """The greedy one sample at a time on a heap of the open groups' keys: each sample's place."""
    last, out = m - 1, []
    replace, pop = heapq.heapreplace, heapq.heappop
    for x in tokens:
        key = heap[0]                  # the lightest open group (keys are unique)
        g = key % m
        count = filled[g]
        out.append(g * b + count)
        filled[g] = count = count + 1
        if count < (b if g != last else last_size):
            replace(heap, key + x * m)
        else:
            pop(heap)
    return out


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
