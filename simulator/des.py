"""The discrete-event core: a simpy environment, the run's RNG and the interval recorder.

simpy orders events by (time, priority, insertion id), which makes a run deterministic as long
as nothing else injects randomness: every random draw goes through the one
``numpy.random.Generator`` made from the scenario seed and passed down explicitly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

INTERVAL_COLUMNS = ["pool", "device", "state", "cause", "iteration", "start", "end", "label"]


def make_rng(seed: int) -> np.random.Generator:
    """The run's only source of randomness."""
    return np.random.default_rng(np.random.SeedSequence(int(seed)))


@dataclass
class Interval:
    pool: str
    device: int          # global device rank, or -1 for a pool-level record
    state: str           # e.g. generate, train, switch, sync, idle
    cause: str           # for idle: long_tail, dependency, pipeline_bubble, switch, weight_sync; else ""
    iteration: int
    start: float
    end: float
    label: str = ""


@dataclass
class Recorder:
    """Collects every busy or idle interval of a run; the metrics layer reads it as a DataFrame."""

    intervals: list[Interval] = field(default_factory=list)

    def record(self, pool: str, device: int, state: str, start: float, end: float, *,
               cause: str = "", iteration: int = -1, label: str = "") -> None:
        if end < start:
            raise ValueError(f"interval ends before it starts: {start} > {end}")
        if end > start:
            self.intervals.append(Interval(pool, device, state, cause, iteration, start, end, label))

    def record_devices(self, pool: str, devices, state: str, start: float, end: float, *,
                       cause: str = "", iteration: int = -1, label: str = "") -> None:
        for d in devices:
            self.record(pool, int(d), state, start, end, cause=cause, iteration=iteration, label=label)

    def to_frame(self) -> pd.DataFrame:
        if not self.intervals:
            return pd.DataFrame(columns=INTERVAL_COLUMNS)
        frame = pd.DataFrame([vars(i) for i in self.intervals], columns=INTERVAL_COLUMNS)
        return frame.sort_values(["start", "pool", "device", "end"], kind="stable").reset_index(drop=True)


class Simulation:
    """A simpy environment bundled with the run's RNG and recorder."""

    def __init__(self, seed: int = 0) -> None:
        self.env = simpy.Environment()
        self.rng = make_rng(seed)
        self.recorder = Recorder()

    @property
    def now(self) -> float:
        return float(self.env.now)

    def process(self, generator):
        return self.env.process(generator)

    def timeout(self, delay: float):
        return self.env.timeout(max(0.0, float(delay)))

    def run(self, until: float | None = None) -> None:
        self.env.run(until=until)
