"""The schedule policies, one registry entry per ``schedule.kind``.

An entry names its config class (scenario.py: the knobs the kind accepts, its placement, default
staleness and threshold), what it supports (failures, partial rollouts) and its runner:
``runner(ctx) -> makespan``, composed from the parts in this package (generation, training step,
version gate, clocks). Adding a kind = one module with a config class, a runner and one
``register`` call (docs/guides/extending.md); nothing else branches on kind.

The built-in kinds' modules are imported on first use (``get``): a run imports its own schedule's
runner, not the others' (benchmarks/bench_startup.py).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import RlsimError
from ...scenario import ScheduleConfig, register_schedule_config, unregister_schedule_config

if TYPE_CHECKING:
    from .context import Context


@dataclass(frozen=True)
class SchedulePolicy:
    config: type[ScheduleConfig]     # its ``kind`` Literal names the kind
    runner: Callable[[Context], float]
    description: str
    # failure events (schedule.failures) are modelled for this schedule
    supports_failures: Callable[[ScheduleConfig], bool] = lambda sched: False
    # partial rollouts resume with newer weights: the kind must let rollout run ahead (staleness >= 1)
    supports_partial_rollout: bool = False
    # partial rollouts as segments of schedule.length_budget tokens that resume after a sync (needs
    # staleness >= 1 and a budget); False: the kind handles schedule.partial_rollout itself
    partial_rollout_segments: bool = True
    # workload.multi_turn: the kind generates whole batches through Costs.rollout (without cutting and
    # resuming them), or feeds servers that take whole trajectories (turns_on_servers)
    supports_multi_turn: bool = False
    # its servers (Costs.rollout_server) take whole trajectories, turn by turn, their interrupts included
    # (llm/multi_turn_server.MultiTurnServer: the agent loops of verl's fully async Rollouter, AReaL's)
    turns_on_servers: bool = False

    @property
    def kind(self) -> str:
        return self.config.model_fields["kind"].default


_REGISTRY: dict[str, SchedulePolicy] = {}

# The built-in kinds, in the order ``kinds()`` lists them, and the module (in this package) whose
# import registers each.
BUILTIN_MODULES: dict[str, str] = {
    "disaggregated": "disaggregated", "one-step-off": "disaggregated", "async": "disaggregated",
    "areal": "areal", "colocated": "colocated", "nemo-rl-async": "nemo_rl", "stalesync": "stalesync",
    "verl-fully-async": "verl_async_dynamic", "verl-colocate-async": "verl_v1", "verl-separate-async": "verl_hybrid",
    "verl-sync": "verl_v1",
}


def _load_builtin(kind: str) -> None:
    """Import the module of a built-in kind (it registers the kind); nothing for other kinds. While
    that module is being imported this returns at once (the import system hands back the module)."""
    if kind in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{BUILTIN_MODULES[kind]}")


def register(policy: SchedulePolicy) -> SchedulePolicy:
    """Add (or replace) a schedule kind; returns the policy so it can be kept as a module constant.
    A built-in kind's own module is loaded first, so a policy registered from outside replaces it."""
    _load_builtin(policy.kind)
    register_schedule_config(policy.config)
    _REGISTRY[policy.kind] = policy
    return policy


def unregister(kind: str) -> None:
    _REGISTRY.pop(kind, None)
    unregister_schedule_config(kind)


def get(kind: str, source: str = "<scenario>") -> SchedulePolicy:
    if kind not in _REGISTRY:
        _load_builtin(kind)
    if kind not in _REGISTRY:
        raise RlsimError(f"unknown schedule kind {kind!r}", source=source, field="schedule.kind",
                         fix=f"use one of {', '.join(kinds())}")
    return _REGISTRY[kind]


def kinds() -> list[str]:
    """The registered kinds: the built-in ones in BUILTIN_MODULES order, then the others as registered."""
    for kind in BUILTIN_MODULES:
        _load_builtin(kind)
    return [k for k in BUILTIN_MODULES if k in _REGISTRY] + [k for k in _REGISTRY if k not in BUILTIN_MODULES]
