"""StaleSync (the seed's quasi-asynchronous schedule): on the colocated placement the colocated
runner splits off the long tail (colocated.py); on split pools the split-pool runner streams
batches within the staleness bound (disaggregated.py)."""
from __future__ import annotations

from . import colocated, disaggregated
from .context import Context
from .registry import SchedulePolicy, register


def run(ctx: Context) -> float:
    runner = colocated.run if ctx.sched.effective_placement == "colocated" else disaggregated.run
    return runner(ctx)


POLICY = register(SchedulePolicy(
    "stalesync", run, "quasi-asynchronous within a staleness bound; training starts on a threshold share",
    placement=lambda sched: sched.placement or "colocated",
    supports_failures=lambda sched: (sched.placement or "colocated") == "colocated",
    supports_partial_rollout=True))
