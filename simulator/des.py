"""The discrete-event core: a simpy environment, the run's RNG and the run's timeline.

simpy orders events by (time, priority, insertion id), which makes a run deterministic as long
as nothing else injects randomness: every random draw goes through the one
``numpy.random.Generator`` made from the scenario seed and passed down explicitly.
"""
from __future__ import annotations

import bisect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy

if TYPE_CHECKING:  # pandas is imported where a frame is made: a run starts without it
    import pandas as pd

INTERVAL_COLUMNS = ["pool", "device", "state", "cause", "iteration", "start", "end", "label"]


def make_rng(seed: int) -> np.random.Generator:
    """The run's only source of randomness."""
    return np.random.default_rng(np.random.SeedSequence(int(seed)))


class Interval(NamedTuple):
    """One busy or idle interval of a group of consecutive ranks [rank_start, rank_start + rank_count)."""
    pool: str
    device: int          # the global rank for a one-device record, else -1 (a group record)
    state: str           # e.g. generate, train, switch, sync, idle, lost
    cause: str           # for idle: long_tail, dependency, pipeline_bubble, switch, weight_sync; else ""
    iteration: int
    start: float
    end: float
    label: str
    rank_start: int
    rank_count: int


TIMELINE_COLUMNS = INTERVAL_COLUMNS + ["rank_start", "rank_count"]
assert list(Interval._fields) == TIMELINE_COLUMNS
# Each column's values when the recorder gave the types it records (else the frame is pandas' own
# inference from the values: Timeline.to_frame).
_COLUMN_TYPES = {"pool": {str}, "device": {int}, "state": {str}, "cause": {str}, "iteration": {int},
                 "start": {float, np.float64}, "end": {float, np.float64}, "label": {str},
                 "rank_start": {int}, "rank_count": {int}}


def string_array(values: Sequence[str] | np.ndarray, codes: np.ndarray | None = None) -> Any:
    """The pandas array a frame column of these strings (``values[codes]`` when codes are given)
    would be, its inferred string dtype, made straight from a pyarrow array: pandas' constructor
    costs ~0.1 ms a column, most of a short run's frames. None where pandas does not infer a
    pyarrow-backed string column (then the caller lets pandas build it)."""
    import pandas as pd

    with warnings.catch_warnings():     # pandas 3 deprecates the option (inference is its default)
        warnings.simplefilter("ignore")
        if not pd.get_option("future.infer_string"):
            return None
    dtype = pd.StringDtype(na_value=np.nan)
    if dtype.storage != "pyarrow":
        return None
    import pyarrow as pa
    from pandas.arrays import ArrowStringArray

    array = pa.array(values, pa.large_string())
    return ArrowStringArray(array if codes is None else array.take(pa.array(codes)), dtype=dtype)


@dataclass
class Timeline:
    """Every busy or idle interval of a run, per group of consecutive ranks (not per device, so
    24,576 devices stay cheap); the metrics layer reads it as a DataFrame."""
    rows: list[Interval] = field(default_factory=list)
    # (start, end, rank_start, rank_count, cause) of known idle stretches (hold_idle), by start
    holds: list[tuple[float, float, int, int, str]] = field(default_factory=list)
    _longest_hold: float = 0.0

    def hold_idle(self, rank_start: int, rank_count: int, start: float, end: float, cause: str) -> None:
        """Ranks known to idle over [start, end) though their state says otherwise: an engine with no
        work while every sample it holds waits on a tool. A ``generate`` record added later over them
        is split there, that stretch recorded idle with ``cause``."""
        if end > start and rank_count > 0:
            bisect.insort(self.holds, (float(start), float(end), int(rank_start), int(rank_count), cause))
            self._longest_hold = max(self._longest_hold, end - start)

    def add(self, pool: str, rank_start: int, rank_count: int, state: str, start: float, end: float,
            cause: str = "", iteration: int = -1, label: str = "") -> None:
        if end < start - 1e-9:
            raise ValueError(f"interval ends before it starts: {start} > {end} ({pool} {state})")
        if self.holds and state == "generate" and end > start and rank_count > 0:
            hold = self._hold_within(rank_start, rank_count, start, end)
            if hold is not None:
                self._add_around(hold, pool, rank_start, rank_count, start, end, iteration, label)
                return
        if end > start and rank_count > 0:
            device = rank_start if rank_count == 1 else -1
            self.rows.append(Interval(pool, device, state, cause, iteration, float(start), float(end), label,
                                      int(rank_start), int(rank_count)))

    def _hold_within(self, rank_start: int, rank_count: int, start: float,
                     end: float) -> tuple[float, float, int, int, str] | None:
        """The first hold meeting ranks [rank_start, +rank_count) over [start, end), or None."""
        lo = bisect.bisect_left(self.holds, (start - self._longest_hold,))
        hi = bisect.bisect_left(self.holds, (end,))
        for hold in self.holds[lo:hi]:
            if hold[1] > start and hold[2] < rank_start + rank_count and hold[2] + hold[3] > rank_start:
                return hold
        return None

    def _add_around(self, hold: tuple[float, float, int, int, str], pool: str, rank_start: int, rank_count: int,
                    start: float, end: float, iteration: int, label: str) -> None:
        """A generate record split around one hold: the ranks beside it whole, the held ranks
        generating before and after it and idle (the hold's cause) inside; each part checked again."""
        first, last = max(hold[2], rank_start), min(hold[2] + hold[3], rank_start + rank_count)
        idle_from, idle_to = max(hold[0], start), min(hold[1], end)
        self.add(pool, rank_start, first - rank_start, "generate", start, end, iteration=iteration, label=label)
        self.add(pool, first, last - first, "generate", start, idle_from, iteration=iteration, label=label)
        self.rows.append(Interval(pool, first if last - first == 1 else -1, "idle", hold[4], iteration, idle_from,
                                  idle_to, label, first, last - first))
        self.add(pool, first, last - first, "generate", idle_to, end, iteration=iteration, label=label)
        self.add(pool, last, rank_start + rank_count - last, "generate", start, end, iteration=iteration, label=label)

    def add_devices(self, pool: str, devices, state: str, start: float, end: float, *,
                    cause: str = "", iteration: int = -1, label: str = "") -> None:
        """One record per device (a pipeline stage's ranks need not be consecutive)."""
        for device in devices:
            self.add(pool, int(device), 1, state, start, end, cause=cause, iteration=iteration, label=label)

    def clip(self, t_end: float) -> None:
        """Drop what lies past the end of the run (rollout planned ahead of the last training step)."""
        self.rows = [row if row.end <= t_end else row._replace(end=t_end) for row in self.rows if row.start < t_end]

    def to_frame(self) -> pd.DataFrame:
        """The rows as a frame, sorted by (start, pool, rank_start, end), ties in recording order.
        Built column by column and sorted with numpy (a stable lexsort on the same keys, the pool
        by its name's rank): the frame pandas' records constructor and stable sort_values give
        (tested), at a fraction of their per-row cost."""
        import pandas as pd

        if not self.rows:
            return pd.DataFrame(self.rows, columns=TIMELINE_COLUMNS).reset_index(drop=True)
        columns = dict(zip(TIMELINE_COLUMNS, zip(*self.rows, strict=True), strict=True))
        pools = columns["pool"]
        rank = {name: i for i, name in enumerate(sorted(set(pools)))}
        order = np.lexsort((np.array(columns["end"], float), np.array(columns["rank_start"], np.int64),
                            np.fromiter((rank[p] for p in pools), np.int64, count=len(pools)),
                            np.array(columns["start"], float)))
        typed = _typed_columns(columns, order)
        if typed is not None:
            return pd.DataFrame(typed, copy=False)
        order = order.tolist()
        return pd.DataFrame({name: [values[i] for i in order] for name, values in columns.items()})


def _typed_columns(columns: dict[str, tuple], order: np.ndarray) -> dict[str, Any] | None:
    """The columns in ``order`` as int64 / float64 arrays and pyarrow-backed strings: what pandas
    infers from the recorded values when each column holds the types it records (_COLUMN_TYPES;
    ints within int64); None otherwise (pandas then infers from the values themselves)."""
    out: dict[str, Any] = {}
    for name, values in columns.items():
        kinds = set(map(type, values))
        if not kinds <= _COLUMN_TYPES[name]:
            return None
        if str in kinds:
            array = string_array(np.array(values, object)[order])
            if array is None:
                return None
            out[name] = array
        elif int in kinds:
            try:
                out[name] = np.array(values, np.int64)[order]
            except OverflowError:
                return None
        else:
            out[name] = np.array(values, np.float64)[order]
    return out


class Simulation:
    """A simpy environment bundled with the run's RNG and timeline."""

    def __init__(self, seed: int = 0) -> None:
        self.env = simpy.Environment()
        self.rng = make_rng(seed)
        self.timeline = Timeline()

    @property
    def now(self) -> float:
        return float(self.env.now)

    def process(self, generator):
        return self.env.process(generator)

    def timeout(self, delay: float):
        return self.env.timeout(max(0.0, float(delay)))

    def run(self, until: float | None = None) -> None:
        self.env.run(until=until)
