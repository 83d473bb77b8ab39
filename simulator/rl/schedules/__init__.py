"""Synchronization policies, one registry entry per kind (registry.py). ``run_schedule`` builds the
pools and runs the kind's runner:

kind           placement       staleness  threshold  runner
colocated      colocated       0          1          colocated.ColocatedRun
stalesync      colocated*      1*         0.5*       colocated (split + tail consolidation) / disaggregated
disaggregated  split pools     0          1          disaggregated.SplitPoolRun
one-step-off   split pools     1*         1          disaggregated.SplitPoolRun
async          split pools     1*         0*         disaggregated.SplitPoolRun (+ partial_rollout)
nemo-rl-async  split pools     max_age    0          nemo_rl.NemoRun (segments: in-flight weight updates)
areal          split pools     eta (starts) -         areal.ArealRun (verl_async's Rollouter under AReaL's start rule)
verl-fully-async split pools   quota      -          verl_async.VerlFullyAsyncRun (Rollouter / Trainer, message queue;
                                                     request_routing: verl_async_requests, verl 0.9.1's Rollouter;
                                                     dynamic_resources: verl_async_dynamic, the trainer's devices lent)
verl-colocate-async colocated  threshold-1* -         verl_v1.VerlColocateAsyncRun (v1 feed and replay buffer, one pool)
verl-separate-async split pools threshold-1* -        verl_v1.VerlSeparateAsyncRun (v1 feed and replay buffer, local updates;
                                                     hybrid_rollout: verl_hybrid, the trainer's devices lent)
verl-sync      colocated       0          -          verl_v1.VerlSyncRun (v1 feed, sync replay buffer: DAPO refills, drain)
(* = default, overridable in ``schedule:``)

Runner parts: batches (SeqBatch, RoundDraws), generation (one instance's round), training (the
train step and the staleness rule's batch choice), staleness (the rule, the tolerances, the
version gate), context (run state, totals, the record), failures / split_failures (roll-back and
re-plan).
"""
from __future__ import annotations

from collections.abc import Callable

from ...des import Simulation
from ...errors import RlsimError
from ...scenario import Scenario
from ..costs import Costs
from ..pools import build_pools, served_pools
from . import registry  # the built-in kinds' modules load on first use (registry.get)
from .batches import Sampler
from .context import Context, IterationLog, RunRecord
from .failures import Replanner, ReplanOutcome, SameLayoutReplanner, check_supported
from .input_checks import check_before_pools, check_with_pools
from .registry import SchedulePolicy, register

__all__ = ["run_schedule", "RunRecord", "Replanner", "ReplanOutcome", "SameLayoutReplanner", "SchedulePolicy",
           "register", "Context", "Sampler"]


def run_schedule(scenario: Scenario, costs: Costs, n_devices: int, prompt_sampler: Sampler,
                 response_sampler: Sampler, *, start_s: float = 0.0, replanner: Replanner | None = None,
                 progress: Callable[[int, int], None] | None = None, keep_samples: bool = True) -> RunRecord:
    """``start_s``: simulated planning time before the run (layout: auto), recorded as state
    ``plan``; ``replanner``: what schedule.failures calls (failures.py); ``progress(done, total)``:
    called as each iteration is recorded; ``keep_samples=False``: no output shows the per-sample
    table, so its rows fold into counts as the run goes (Context.fold_samples)."""
    sched = scenario.schedule
    policy = registry.get(sched.kind, scenario.source)
    check_before_pools(scenario, policy)
    template = getattr(costs, "train_template", None)   # LlmCosts': what makes its pool unit
    topology = getattr(costs, "topology", None)         # LlmCosts': the nodes the side pools are packed on
    node_of = topology.node_of if topology is not None else None
    served = served_pools(scenario.workload, n_devices, costs.served_instance_devices, scenario.source, node_of)
    pools = build_pools(sched, n_devices - sum(pool.count for pool in served.values()), costs.instance_devices,
                        costs.train_pool_unit, scenario.source, template.pool_unit_text() if template is not None else "",
                        node_of)
    pools.update(served)
    check_with_pools(scenario, costs, pools)
    ctx = Context(scenario, costs, n_devices, pools, prompt_sampler, response_sampler, Simulation(scenario.seed),
                  keep_samples=keep_samples)
    ctx.start_s, ctx.replanner = float(start_s), replanner
    if progress is not None:
        ctx.iterations = IterationLog(progress, scenario.iterations)
    check_supported(ctx, policy.supports_failures(sched))
    try:
        makespan = policy.runner(ctx)
    except RlsimError as exc:
        # simpy re-raises a copy of a process's exception (its message only): raise the original,
        # whose field and fix the planner's and the CLI's reports use
        original = exc
        while isinstance(original.__cause__, RlsimError) and str(original.__cause__) == str(exc):
            original = original.__cause__
        if original is exc:
            raise
        raise original from None
    return ctx.record(makespan)
