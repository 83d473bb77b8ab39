"""The staleness rule, the tolerances and the version gate: written once, used by every schedule.

Staleness of a consumed sample = training iteration k - weights version v that generated it
(version v = weights after v training steps). Trainer step k takes samples with
v >= min_version(k, s); a rollout round r may start once the published version (plus any extra
rounds the trainer allowed) reaches min_version(r, s).
"""
from __future__ import annotations

import math

import simpy

# Two simulated times closer than this are one instant (times are float sums of stage times).
TIME_TOL_S = 1e-9
# A fractional count within this of an integer is that integer (threshold x batch, k - staleness).
COUNT_TOL = 1e-9


def ceil_count(x: float) -> int:
    """Smallest whole count >= x, forgiving float round-off (0.5 x 6 is 3, not 4)."""
    return math.ceil(x - COUNT_TOL)


def min_version(step: float, staleness: float) -> int:
    """Oldest weights version that training step (or rollout round) ``step`` may use."""
    return ceil_count(step - staleness)


class VersionGate:
    """The trainer's published weights version and the rollout run-ahead rule, with the events
    the processes wait on (simpy events are one-shot: each fire makes a fresh one)."""

    def __init__(self, env: simpy.Environment, staleness: float):
        self.env, self.staleness = env, staleness
        self.version = 0
        self.published_s = 0.0                   # when the current version's weights were in place
        self.extra = 0                           # rounds the trainer allowed past the bound (starvation)
        self.waiting: dict[int, int] = {}        # instance -> round it waits for
        self.done = False
        self.version_changed = env.event()
        self.data_ready = env.event()
        self.finished = env.event()

    def open(self, round_: int) -> bool:
        return self.version + self.extra >= min_version(round_, self.staleness)

    def all_blocked(self, n_instances: int) -> bool:
        """Every instance waits on the gate and none may start: the trainer must let one more round run."""
        return len(self.waiting) == n_instances and all(not self.open(r) for r in self.waiting.values())

    def _fire(self, name: str) -> None:
        event = getattr(self, name)
        setattr(self, name, self.env.event())
        event.succeed()

    def publish(self, version: int) -> None:
        self.version = version
        self.published_s = float(self.env.now)
        self._fire("version_changed")

    def allow_extra_round(self) -> None:
        self.extra += 1
        self._fire("version_changed")

    def data(self) -> None:
        """New samples (or a newly blocked instance): the trainer re-checks its batch."""
        self._fire("data_ready")

    def finish(self) -> None:
        self.done = True
        self._fire("version_changed")
        self.finished.succeed()
