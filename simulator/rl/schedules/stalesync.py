"""StaleSync (the seed's quasi-asynchronous schedule): on the colocated placement the colocated
runner splits off the long tail (colocated.py); on split pools the split-pool runner streams
batches within the staleness bound (disaggregated.py)."""
from __future__ import annotations

from ...scenario import StaleSyncSchedule
from . import colocated
from .context import Context
from .registry import SchedulePolicy, register


def run(ctx: Context) -> float:
    if ctx.sched.effective_placement == "colocated":
        return colocated.run(ctx)
    from . import disaggregated  # split pools only: the default placement runs without it (start-up)
    return disaggregated.run(ctx)


POLICY = register(SchedulePolicy(
    StaleSyncSchedule, run, "quasi-asynchronous within a staleness bound; training starts on a threshold share",
    supports_failures=lambda sched: sched.effective_placement == "colocated",
    supports_partial_rollout=True, supports_multi_turn=True))
