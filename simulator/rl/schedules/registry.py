"""The schedule policies, one registry entry per ``schedule.kind``.

An entry says where the stages run (its placement), the staleness and threshold it defaults to,
what it supports (failures, partial rollouts), and its runner: ``runner(ctx) -> makespan``,
composed from the parts in this package (generation, training step, version gate, clocks).
Adding a kind = one module with its runner + one ``register`` call; nothing else branches on kind.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import RlsimError

if TYPE_CHECKING:
    from ...scenario import ScheduleConfig
    from .context import Context


@dataclass(frozen=True)
class SchedulePolicy:
    kind: str
    runner: Callable[[Context], float]
    description: str
    # 'colocated' (stages time-share the actor's devices) or 'disaggregated' (rollout and train pools)
    placement: Callable[[ScheduleConfig], str]
    # failure events (schedule.failures) are modelled for this schedule
    supports_failures: Callable[[ScheduleConfig], bool] = lambda sched: False
    # partial rollouts resume with newer weights: the kind must let rollout run ahead (staleness >= 1)
    supports_partial_rollout: bool = False


_REGISTRY: dict[str, SchedulePolicy] = {}


def register(policy: SchedulePolicy) -> SchedulePolicy:
    """Add (or replace) a schedule kind; returns the policy so it can be kept as a module constant."""
    _REGISTRY[policy.kind] = policy
    return policy


def unregister(kind: str) -> None:
    _REGISTRY.pop(kind, None)


def get(kind: str, source: str = "<scenario>") -> SchedulePolicy:
    if kind not in _REGISTRY:
        raise RlsimError(f"unknown schedule kind {kind!r}", source=source, field="schedule.kind",
                         fix=f"use one of {', '.join(kinds())}")
    return _REGISTRY[kind]


def kinds() -> list[str]:
    return list(_REGISTRY)
