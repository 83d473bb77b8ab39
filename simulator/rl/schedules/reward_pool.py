"""Rule-reward workers as one fluid server: the job's shared pool (workload.reward.workers), or
each rollout instance's own (workers_per_device x its devices; rewards.py hands them their samples).

NeMo RL verifies a batch on its environment's Ray actors by splitting it evenly over all of them
(the math environment's `chunk_list_to_workers`), and each actor serves its calls one after another.
So a batch of k samples on N workers occupies the whole pool for k x time per sample / N (a batch
smaller than the pool takes one sample's time on k of the workers: k / N of the pool), and batches
handed over while the pool is busy wait for it. Batches are scheduled as the run commits them,
which is not always the order they are handed over (a split-pool instance commits a plan when it
starts, and a later plan can finish first): a batch fills the pool's idle time from its hand-over
on, around the batches already scheduled, split over gaps if it must be (a fluid pool). With
batches handed over in time order this is first come, first served; in any order the pool never
does more than its capacity.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RewardPool:
    """The pool's busy intervals, sorted and disjoint: ``starts[i]`` to ``ends[i]``. All are kept: a
    plan committed late (at a weight update) hands over samples that finished before the present."""
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def serve(self, at_s: float, work_s: float, least_s: float = 0.0) -> float:
        """When a batch handed over at ``at_s`` is done: it needs ``work_s`` seconds of the whole pool
        (over the pool's idle stretches from ``at_s`` on) and no less than ``least_s`` (one sample's
        time: a batch smaller than the pool leaves workers free, not faster)."""
        if work_s <= 0:
            return at_s + least_s
        first = bisect.bisect_right(self.ends, at_s)     # the first interval still busy after at_s
        if first == len(self.ends):   # idle from at_s on (hand-overs in time order): _serve_around's outcome in O(1)
            done = at_s + work_s
            if done > at_s:   # (a remainder below the float resolution of its start leaves no interval)
                if self.ends and at_s <= self.ends[-1]:   # touches the last interval (which ends by at_s): joined
                    self.ends[-1] = done
                else:
                    self.starts.append(at_s)
                    self.ends.append(done)
            return max(done, at_s + least_s)
        return self._serve_around(at_s, work_s, least_s, first)

    def _serve_around(self, at_s: float, work_s: float, least_s: float, first: int) -> float:
        """serve() of a batch of positive work, the intervals from ``first`` on busy after ``at_s``:
        it fills the gaps between them, and the intervals it ran between are joined again."""
        t, left, used, j = at_s, work_s, [], first
        while True:
            gap_end = self.starts[j] if j < len(self.starts) else math.inf
            if gap_end > t:
                if t + left <= gap_end:
                    used.append((t, t + left))
                    break
                used.append((t, gap_end))
                left -= gap_end - t
            t = max(t, self.ends[j])
            j += 1
        done = used[-1][1]
        # re-join the intervals the batch ran between (and a neighbour it may touch); a remainder
        # below the float resolution of its start leaves no interval
        lo, hi = max(first - 1, 0), min(j + 1, len(self.starts))
        region = _merged(sorted([*zip(self.starts[lo:hi], self.ends[lo:hi], strict=True),
                                 *(span for span in used if span[1] > span[0])]))
        self.starts[lo:hi] = [start for start, _ in region]
        self.ends[lo:hi] = [end for _, end in region]
        return max(done, at_s + least_s)

    def serve_in_order(self, at_s: np.ndarray, work_s: float | np.ndarray,
                       least_s: float | np.ndarray = 0.0) -> np.ndarray | None:
        """serve(at_i, work_i, least_i) of each of ``at_s`` (sorted) in turn, as arrays (``work_s``
        and ``least_s`` one value or one per hand-over): on a pool idle from the first hand-over on,
        first come first served is done_i = max(at_i, done_i-1) + work_i, so with W_i the work
        through i, done_i = W_i + max over j <= i of (at_j - W_j-1) (a running maximum). None where
        that does not hold (the pool is busy after the first hand-over: serve one at a time). A
        streaming rollout hands its samples over one at a time: a Python loop over 800k of them
        took half of a 100-step run."""
        work = np.broadcast_to(np.asarray(work_s, float), np.shape(at_s))
        if not len(at_s) or (work <= 0).any() or (self.ends and self.ends[-1] > at_s[0]):
            return None
        through = np.cumsum(work)
        done = through + np.maximum.accumulate(at_s - (through - work))
        begins = done - work
        gap = np.ones(len(at_s), bool)             # a busy stretch starts where the pool was idle before it
        gap[1:] = begins[1:] > done[:-1] + 1e-9 * np.maximum(1.0, np.abs(done[:-1]))
        firsts = np.flatnonzero(gap)
        lasts = np.append(firsts[1:] - 1, len(at_s) - 1)
        starts, ends = begins[firsts].tolist(), done[lasts].tolist()
        if self.ends and starts[0] <= self.ends[-1]:   # touches the stretch before it
            starts[0] = self.starts.pop()
            self.ends.pop()
        self.starts += starts
        self.ends += ends
        return np.maximum(done, at_s + least_s)

    def busy_s(self, lo: float = -math.inf, hi: float = math.inf) -> float:
        """Seconds of whole-pool time scheduled between ``lo`` and ``hi`` (all of it by default)."""
        return sum(max(0.0, min(end, hi) - max(start, lo)) for start, end in zip(self.starts, self.ends, strict=True))


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals with the touching or overlapping ones joined."""
    out: list[tuple[float, float]] = []
    for start, end in intervals:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out

