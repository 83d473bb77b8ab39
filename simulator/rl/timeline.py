"""Interval bookkeeping per device group (not per device), so 24,576 devices stay cheap.

A record (des.Interval) covers ranks [rank_start, rank_start + rank_count). Each ``GroupClock`` owns
a cursor and only ever records into the run's one des.Timeline from its cursor forward, so a
group's states tile [0, makespan] exactly and device-seconds = duration x rank_count with no gaps or overlaps. ``expand_devices`` turns group
records into per-device rows (des.INTERVAL_COLUMNS) on request.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is made: a run starts without it
    import pandas as pd

from ..des import INTERVAL_COLUMNS, TIMELINE_COLUMNS, Timeline

__all__ = ["Timeline", "TIMELINE_COLUMNS", "GroupClock", "MultiClock", "contiguous_runs", "expand_devices",
           "clock_over", "clock_parts", "Clock"]

BUSY_STATES = ("generate", "forward", "train")


class GroupClock:
    """A contiguous rank range of one pool with a cursor; records tile time without gaps."""

    def __init__(self, timeline: Timeline, pool: str, rank_start: int, rank_count: int, t0: float = 0.0):
        self.timeline, self.pool = timeline, pool
        self.rank_start, self.rank_count = int(rank_start), int(rank_count)
        self.cursor = float(t0)

    @property
    def ranks(self) -> range:
        return range(self.rank_start, self.rank_start + self.rank_count)

    def busy(self, state: str, until: float, iteration: int = -1, label: str = "", cause: str = "") -> None:
        until = max(until, self.cursor)
        self.timeline.add(self.pool, self.rank_start, self.rank_count, state, self.cursor, until,
                          cause=cause, iteration=iteration, label=label)
        self.cursor = until

    def idle(self, cause: str, until: float, iteration: int = -1, label: str = "") -> None:
        self.busy("idle", until, iteration, label, cause=cause)

    def per_instance(self, state: str, start_busy: np.ndarray, end: float, instance_devices: int,
                     iteration: int, cause_after: str, label: str = "") -> None:
        """Each instance (``instance_devices`` ranks) busy from the cursor for its own time, then idle
        with ``cause_after`` until ``end`` (the long tail of a rollout round)."""
        t0 = self.cursor
        n = len(start_busy)
        for i in range(n):
            first = self.rank_start + i * instance_devices
            count = instance_devices
            b = min(t0 + float(start_busy[i]), end)
            self.timeline.add(self.pool, first, count, state, t0, b, iteration=iteration, label=label)
            self.timeline.add(self.pool, first, count, "idle", b, end, cause=cause_after, iteration=iteration)
        spare = self.rank_count - n * instance_devices   # ranks too few to form an instance
        if spare > 0:
            self.timeline.add(self.pool, self.rank_start + n * instance_devices, spare, "idle", t0, end,
                              cause="placement", iteration=iteration)
        self.cursor = max(end, t0)

    def split(self, counts: list[int], names: list[str] | None = None) -> list[GroupClock]:
        out, start = [], self.rank_start
        for i, c in enumerate(counts):
            out.append(GroupClock(self.timeline, names[i] if names else self.pool, start, c, self.cursor))
            start += c
        return out


class MultiClock:
    """Several contiguous rank ranges run as one pool (the survivors of a failed node in the middle
    of a pool): every record goes to each range, instances fill the ranges in order."""

    def __init__(self, clocks: list[GroupClock]):
        self.clocks = clocks
        self.pool = clocks[0].pool

    @property
    def cursor(self) -> float:
        return self.clocks[0].cursor

    @cursor.setter
    def cursor(self, t: float) -> None:
        for c in self.clocks:
            c.cursor = t

    @property
    def rank_count(self) -> int:
        return sum(c.rank_count for c in self.clocks)

    @property
    def ranks(self) -> list[int]:
        """Every rank of every range, in order."""
        return [r for c in self.clocks for r in c.ranks]

    def busy(self, state: str, until: float, iteration: int = -1, label: str = "", cause: str = "") -> None:
        for c in self.clocks:
            c.busy(state, until, iteration, label, cause)

    def idle(self, cause: str, until: float, iteration: int = -1, label: str = "") -> None:
        self.busy("idle", until, iteration, label, cause=cause)

    def per_instance(self, state: str, start_busy: np.ndarray, end: float, instance_devices: int,
                     iteration: int, cause_after: str, label: str = "") -> None:
        """GroupClock.per_instance over the ranks in order: instance i is ranks[i x D : (i + 1) x D], as
        the runners deal them (colocated.py _instances), so one may span two ranges (survivors 0-1 and
        4-5 of a failure hold one instance of 4); the ranks past the last instance idle as placement."""
        t0, n = self.cursor, len(start_busy)
        timeline = self.clocks[0].timeline
        offset = 0
        for c in self.clocks:
            for lo, hi in _pieces(offset, c.rank_count, instance_devices, n):
                first, count = c.rank_start + lo - offset, hi - lo
                if lo < n * instance_devices:
                    b = min(t0 + float(start_busy[lo // instance_devices]), end)
                    timeline.add(c.pool, first, count, state, t0, b, iteration=iteration, label=label)
                    timeline.add(c.pool, first, count, "idle", b, end, cause=cause_after, iteration=iteration)
                else:   # ranks too few to form an instance
                    timeline.add(c.pool, first, count, "idle", t0, end, cause="placement", iteration=iteration)
            offset += c.rank_count
        self.cursor = max(end, t0)

    def split(self, counts: list[int], names: list[str] | None = None) -> list[GroupClock | MultiClock]:
        """Consecutive parts of the ranks in order (a part spanning two ranges is a MultiClock)."""
        pieces = [(c.rank_start, c.rank_count) for c in self.clocks]
        timeline = self.clocks[0].timeline
        out: list[GroupClock | MultiClock] = []
        for i, want in enumerate(counts):
            part = []
            while want > 0:
                start, n = pieces[0]
                take = min(n, want)
                part.append(GroupClock(timeline, names[i] if names else self.pool, start, take, self.cursor))
                pieces[0] = (start + take, n - take)
                if pieces[0][1] == 0:
                    pieces.pop(0)
                want -= take
            if not part:   # an empty part: a zero-width clock where the next range starts
                part = [GroupClock(timeline, self.pool, pieces[0][0] if pieces else 0, 0, self.cursor)]
            out.append(part[0] if len(part) == 1 else MultiClock(part))
        return out


Clock = GroupClock | MultiClock


def clock_over(timeline: Timeline, pool: str, ranks: list[int], t: float | None = None) -> GroupClock | MultiClock:
    """A clock over any ranks: one GroupClock for a consecutive run, a MultiClock otherwise."""
    runs = contiguous_runs(ranks)
    if len(runs) == 1:
        a, n = runs[0]
        return GroupClock(timeline, pool, a, n) if t is None else GroupClock(timeline, pool, a, n, t)
    return MultiClock([GroupClock(timeline, pool, a, n, t or 0.0) for a, n in runs])


def clock_parts(clock: GroupClock | MultiClock) -> list[GroupClock]:
    return clock.clocks if isinstance(clock, MultiClock) else [clock]


def contiguous_runs(ranks: list[int]) -> list[tuple[int, int]]:
    """Sorted ranks -> [(start, count)] of consecutive runs."""
    out: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if out and out[-1][0] + out[-1][1] == r:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((r, 1))
    return out


def expand_devices(timeline: pd.DataFrame) -> pd.DataFrame:
    """Group records -> one row per device (des.INTERVAL_COLUMNS); O(device-records), use on small runs."""
    counts = timeline["rank_count"].to_numpy()
    rep = timeline.loc[timeline.index.repeat(counts)].copy()
    offsets = np.concatenate([np.arange(c) for c in counts]) if len(counts) else np.array([], int)
    rep["device"] = rep["rank_start"].to_numpy() + offsets
    return rep[INTERVAL_COLUMNS].reset_index(drop=True)


def _pieces(offset: int, count: int, instance_devices: int, instances: int) -> list[tuple[int, int]]:
    """The positions [offset, offset + count) of a range within the ranks in order, cut where an
    instance (``instance_devices`` positions each, ``instances`` of them) begins or ends; the positions
    past the last instance in one piece."""
    edges = {offset, offset + count}
    edges.update(p for p in range(0, instances * instance_devices + 1, instance_devices) if offset < p < offset + count)
    cuts = sorted(edges)
    return list(zip(cuts[:-1], cuts[1:], strict=True))
