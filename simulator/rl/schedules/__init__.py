"""Synchronization policies. ``run_schedule`` builds the pools and runs the right runner:

kind           placement       staleness  threshold  runner
colocated      colocated       0          1          colocated.run
stalesync      colocated*      1*         0.5*       colocated.run (split + tail consolidation)
disaggregated  split pools     0          1          disaggregated.run
one-step-off   split pools     1*         1          disaggregated.run
async          split pools     1*         0*         disaggregated.run (+ partial_rollout)
(* = default, overridable in ``schedule:``)
"""
from __future__ import annotations

from ...des import Simulation
from ...errors import RlsimError
from ...scenario import Scenario
from ..costs import Costs
from ..pools import build_pools
from . import colocated, disaggregated
from .base import Context, RunRecord, Sampler
from .failures import Replanner, ReplanOutcome, SameLayoutReplanner

__all__ = ["run_schedule", "RunRecord", "Replanner", "ReplanOutcome", "SameLayoutReplanner"]


def run_schedule(scenario: Scenario, costs: Costs, n_devices: int, prompt_sampler: Sampler,
                 response_sampler: Sampler, *, start_s: float = 0.0, replanner: Replanner | None = None) -> RunRecord:
    """``start_s``: simulated planning time before the run (layout: auto), recorded as state
    ``plan``; ``replanner``: what schedule.failures calls (failures.py)."""
    sched = scenario.schedule
    if sched.partial_rollout and sched.effective_staleness < 1:
        raise RlsimError("partial rollouts resume with newer weights, which needs staleness >= 1",
                         source=scenario.source, field="schedule.partial_rollout",
                         fix="set schedule.staleness: 1 (or use kind: async / one-step-off)")
    if sched.partial_rollout and not sched.length_budget:
        raise RlsimError("partial_rollout needs a per-segment length budget", source=scenario.source,
                         field="schedule.length_budget", fix="set schedule.length_budget, e.g. 4096")
    pools = build_pools(sched, n_devices, costs.instance_devices, costs.train_group_devices, scenario.source)
    ctx = Context(scenario, costs, n_devices, pools, prompt_sampler, response_sampler, Simulation(scenario.seed))
    ctx.start_s, ctx.replanner = float(start_s), replanner
    runner = colocated.run if sched.effective_placement == "colocated" else disaggregated.run
    makespan = runner(ctx)
    return ctx.record(makespan)
