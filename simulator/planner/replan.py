"""Dynamic re-planning: after a device failure, after a slowdown, and between the phases of a
colocated schedule; with the planning cost counted in simulated time.

`simulate_failure_run` is a planner-level multi-step run on des.Simulation (until the schedule
layer hosts re-planning itself): steps run at the planned step time, a failure loses the work since
the last checkpoint, the planner re-plans on the survivors, and the run continues; every interval
(train, lost, replan, restart) lands in the run's des.Timeline.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict

from ..des import INTERVAL_COLUMNS, Simulation
from ..errors import RlsimError
from ..strict_model import StrictModel
from .base import NoLayoutFits
from .hetero import HeteroParams, HeteroPlan, hetero_step_models, plan_on_step_models
from .search import (
    Evaluator,
    PlannerParams,
    SearchSpace,
    TrainChoice,
    TrainPlan,
    neighbourhood,
    plan_training,
)

if TYPE_CHECKING:  # the annotation only: a run starts without pandas
    import pandas as pd


class RecoveryParams(StrictModel):
    """Constants of failure recovery; reachable as `planner.recovery.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A failed device takes its whole server out (it is drained and replaced as a unit), as in
    # Llama 3 training (arXiv 2407.21783 sec. 3.3.4) where jobs restart on healthy hosts.
    drop_whole_node: bool = True
    # Reloading the last checkpoint and re-initialising the job: "restart within minutes" in
    # MegaScale (arXiv 2402.15627); 120 s is an assumption, override per cluster.
    restart_s: float = 120.0
    checkpoint_every_steps: int = 10  # assumed checkpoint cadence
    # When the running layout's neighbourhood leaves survivors idle (its TP x CP x EP groups do not
    # tile them), search the planner's whole space on them too and keep the faster plan: a restart
    # from a checkpoint may reshard to any layout (Megatron-Core's distributed checkpoints load
    # under a different TP / PP / EP), at the cost of the wider search's planning time.
    widen: bool = True


@dataclass
class Replan:
    plan: TrainPlan
    survivors: list[int]
    dropped: list[int]          # failed devices plus healthy ones taken out with them or left idle
    planning_cost_s: float

    @property
    def layout(self) -> dict[str, Any]:
        return self.plan.best.choice.as_dict()


def survivors_after(topology: Any, ranks: Sequence[int], failed: Iterable[int],
                    drop_whole_node: bool = True) -> list[int]:
    failed = {int(r) for r in failed}
    unknown = failed - set(ranks)
    if unknown:
        raise RlsimError(f"failed device(s) {sorted(unknown)} are not in the plan's ranks",
                         field="failed", fix="name ranks the job uses")
    bad_nodes = {topology.node_of(r) for r in failed} if drop_whole_node else set()
    return [r for r in ranks if r not in failed and topology.node_of(r) not in bad_nodes]


def replan_on_failure(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                      failed: Iterable[int], ranks: Sequence[int] | None = None,
                      space: SearchSpace | None = None, params: PlannerParams | None = None,
                      recovery: RecoveryParams | None = None, evaluator: Evaluator | None = None,
                      current: TrainChoice | None = None, wide_space: SearchSpace | None = None,
                      devices_kept: Callable[[int, TrainChoice], int] | None = None,
                      software: Any = None, limits_model: Any = None) -> Replan:
    """The best layout on the surviving devices, and the planning cost (simulated seconds).

    With the running layout `current` (and no `space`), its neighbourhood is searched first; where
    that leaves survivors idle and `recovery.widen`, `wide_space` (default: the planner's whole
    space) is searched on them too, and the faster plan is kept (both searches' cost counted). With
    `devices_kept` (a colocated pool, whose devices also generate: the devices it runs on of n
    survivors under a layout) the plan that keeps more is kept, the faster only among equals: devices left idle
    leave generation too, which a training step time does not show. With `software` (the training
    stack, params.TrainSoftware) the neighbourhood keeps to the parallel dimensions it runs (no
    pipeline for the hf-transformers stacks), for `limits_model` (default `model`: the model whose
    pipeline rule binds, rl/llm_costs.pipeline_rule_model: a tied PPO critic on areal-archon).

    When no layout divides every survivor, whole nodes are left idle one at a time until one does.
    Every search made is charged, one in which no layout fitted too (what it evaluated); NoLayoutFits,
    with that cost, where none fits on any.
    """
    recovery = recovery or RecoveryParams()
    ranks = list(range(topology.num_devices)) if ranks is None else list(ranks)
    alive = survivors_after(topology, ranks, failed, recovery.drop_whole_node)
    params = params or PlannerParams()
    search = dict(topology=topology, global_batch=global_batch, seq_len=seq_len, alive=alive, params=params,
                  evaluator=evaluator)
    near_space = neighbourhood(current, model) if current else None
    if near_space is not None and software is not None:
        near_space = _within_the_stack(near_space, software, current, limits_model or model)
    near = _on_the_most_survivors(model, space=space or near_space, **search)
    if current is None or space is not None or not recovery.widen or (near[0] and len(near[0][0]) == len(alive)):
        return _replan(near, ranks, alive)
    wide = _on_the_most_survivors(model, space=wide_space, **search)
    cost = near[1] + wide[1]
    found = [found for found in (near[0], wide[0]) if found]
    def rank(found: tuple[list[int], TrainPlan]) -> tuple[int, float]:
        used, plan = found
        kept = devices_kept(len(used), plan.best.choice) if devices_kept else 0
        return (-kept, plan.best.evaluation.step_time_s)
    return _replan((min(found, key=rank, default=None), cost), ranks, alive)    # near first on ties


def _within_the_stack(space: SearchSpace, software: Any, current: TrainChoice, model: Any = None) -> SearchSpace:
    """A re-plan's neighbourhood narrowed to what the training stack runs (params.TrainSoftware
    .search_limits: its parallel dimensions, ZeRO stages and recompute modes; verl's FSDP shards as
    ZeRO 3 or 2, never 1), the running layout's own values kept: the job ran them (a layout given by
    hand off the stack's stages)."""
    update = {}
    for key, allowed in software.search_limits(model).items():
        given = getattr(space, key)
        running = getattr(current, key)
        update[key] = [v for v in (allowed if given is None else given) if v in allowed or v == running]
    return space.model_copy(update=update)


def _on_the_most_survivors(model: Any, topology: Any, global_batch: int, seq_len: int, alive: list[int],
                           space: SearchSpace | None, params: PlannerParams, evaluator: Evaluator | None
                           ) -> tuple[tuple[list[int], TrainPlan] | None, float]:
    """((devices used, plan) on the most survivors a layout of ``space`` tiles, leaving whole nodes
    idle from the last one at a time; None when none does, the search's planning cost)."""
    cost, use = 0.0, list(alive)
    while use:
        try:
            plan = plan_training(model, topology, global_batch, seq_len, ranks=use, space=space,
                                 params=params, evaluator=evaluator)
        except RlsimError as exc:   # no layout fits: what the search evaluated before it gave up is charged
            cost += exc.planning_cost_s if isinstance(exc, NoLayoutFits) else params.search_cost_s(0)
            last_node = topology.node_of(use[-1])
            use = [r for r in use if topology.node_of(r) != last_node]
            continue
        return (use, plan), cost + plan.planning_cost_s
    return None, cost


def _replan(found: tuple[tuple[list[int], TrainPlan] | None, float], ranks: list[int], alive: list[int]) -> Replan:
    (plan_on, cost) = found
    if plan_on is None and not alive:   # lowering the batch cannot help: nothing is left to train on
        raise RlsimError(f"the failure takes all {len(ranks)} devices of the pool: none survives to re-plan on",
                         field="failed", fix="fail fewer devices (e.g. one gpu), or give the pool more nodes")
    if plan_on is None:
        raise NoLayoutFits(f"no layout fits on the {len(alive)} surviving devices", field="failed",
                           fix="add devices or lower the global batch", planning_cost_s=cost)
    use, plan = plan_on
    return Replan(plan, use, sorted(set(ranks) - set(use)), cost)


@dataclass(frozen=True)
class SlowdownReplan:
    """replan_on_slowdown's answer: the plan on the devices it uses (`plan.uniform`: the old even
    split on them), the slowed nodes left idle where the step is faster without them, the
    rebalanced plan on every device beside it, and the planning cost (simulated seconds)."""

    plan: HeteroPlan
    used: list[int]
    idle: list[int]
    every_device: HeteroPlan
    planning_cost_s: float


def replan_on_slowdown(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                       slowdown: Mapping[int, float], ranks: Sequence[int] | None = None,
                       micro_batch: int = 1, params: HeteroParams | None = None,
                       planner: PlannerParams | None = None, tp_values: Sequence[int] = (1, 2, 4, 8),
                       pp_values: Sequence[int] | None = None, recompute: str = "full",
                       zero_values: Sequence[int] = (0,), collectives: Any = None,
                       train_params: Any = None) -> SlowdownReplan:
    """Rebalance layers and micro-batches when some devices run at `slowdown[rank]` x their speed,
    or drain the nodes of the slowed devices where the rest alone are faster (a node at a few percent
    of its speed holds back every stage and replica it is in, however little work it gets). The
    candidates evaluated are the (tp, pp) pairs tried, each twice (balanced, uniform), per rank set.
    """
    planner = planner or PlannerParams()
    for rank, factor in slowdown.items():
        if not 0 < factor <= 1:
            raise RlsimError(f"slowdown of device {rank} must be in (0, 1], got {factor}",
                             field="slowdown", fix="give the remaining fraction of speed, e.g. 0.5")
    ranks = list(range(topology.num_devices)) if ranks is None else list(ranks)
    step_models = hetero_step_models(model, topology, seq_len, micro_batch_values=(micro_batch,),
                                     recompute_values=(recompute,), params=params, speed_factor=slowdown,
                                     collectives=collectives, train_params=train_params, zero_values=zero_values)
    search = dict(tp_values=tp_values, pp_values=pp_values, zero_values=zero_values)
    every = plan_on_step_models(step_models, ranks, global_batch, **search)
    searches, best, used = 1, every, ranks
    slow_nodes = {topology.node_of(rank) for rank, factor in slowdown.items() if factor < 1 and rank in ranks}
    healthy = [rank for rank in ranks if topology.node_of(rank) not in slow_nodes]
    if healthy and len(healthy) < len(ranks):
        searches += 1
        try:
            drained = plan_on_step_models(step_models, healthy, global_batch, **search)
        except RlsimError:   # the healthy nodes alone fit no layout: keep every device
            drained = None
        if drained is not None and drained.balanced.step_time_s < every.balanced.step_time_s:
            best, used = drained, healthy
    tried = len(tp_values) * len(pp_values or (1, 2, 4, 8, 16))
    return SlowdownReplan(best, used, sorted(set(ranks) - set(used)), every,
                          planner.fixed_cost_s + 2 * tried * searches * planner.eval_cost_s)


@dataclass
class PhasePlan:
    """The two layouts a colocated schedule switches between, planned on the same devices."""

    train: TrainPlan
    rollout: Any  # planner.rollout.RolloutPlan
    planning_cost_s: float


def plan_phases(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                ranks: Sequence[int] | None = None, rollout_kwargs: Mapping[str, Any] | None = None,
                **train_kwargs: Any) -> PhasePlan:
    """Plan the training layout and the rollout layout for the same devices (colocated)."""
    from .rollout import plan_rollout
    train = plan_training(model, topology, global_batch, seq_len, ranks=ranks, **train_kwargs)
    rollout = plan_rollout(model, topology, ranks=ranks, **dict(rollout_kwargs or {}))
    return PhasePlan(train, rollout, train.planning_cost_s + rollout.planning_cost_s)


@dataclass
class FailureRun:
    timeline: pd.DataFrame     # des.INTERVAL_COLUMNS
    steps_done: int
    lost_s: float              # work thrown away (since the last checkpoint) plus the step in flight
    replan: Replan
    step_time_before_s: float
    step_time_after_s: float
    finish_s: float


def simulate_failure_run(model: Any, topology: Any, global_batch: int, seq_len: int, *, steps: int,
                         fail_at_s: float, failed: Iterable[int], seed: int = 0,
                         ranks: Sequence[int] | None = None, space: SearchSpace | None = None,
                         params: PlannerParams | None = None, recovery: RecoveryParams | None = None,
                         evaluator: Evaluator | None = None) -> FailureRun:
    """Run `steps` training steps; at `fail_at_s` devices fail; re-plan and finish on the survivors."""
    recovery = recovery or RecoveryParams()
    ranks = list(range(topology.num_devices)) if ranks is None else list(ranks)
    first = plan_training(model, topology, global_batch, seq_len, ranks=ranks, space=space, params=params,
                          evaluator=evaluator, top=1)
    step_before = first.best.evaluation.step_time_s
    failed = list(failed)
    sim = Simulation(seed)
    timeline = sim.timeline
    pool_start, pool_count = min(ranks), len(ranks)   # pool-level records over the pool's ranks

    def record(state: str, start: float, end: float, **info: Any) -> None:
        timeline.add("train", pool_start, pool_count, state, start, end, **info)
    state: dict[str, Any] = {"done": 0, "lost": 0.0, "replan": None, "step_after": step_before}

    def run():
        t_ckpt_done = 0  # steps safe in the last checkpoint
        current, step_s, failed_yet = ranks, step_before, False
        while state["done"] < steps:
            start = sim.now
            end = start + step_s
            if not failed_yet and end > fail_at_s:
                yield sim.timeout(max(fail_at_s - start, 0.0))
                failed_yet = True
                record("lost", start, sim.now, cause="failure", iteration=state["done"],
                       label="step in flight at the failure")
                # steps finished after the last checkpoint are thrown away: relabel them as lost
                timeline.rows = [iv._replace(state="lost", cause="failure", label="rolled back to the last checkpoint")
                                 if iv.state == "train" and iv.iteration >= t_ckpt_done else iv for iv in timeline.rows]
                state["lost"] = sum(iv.end - iv.start for iv in timeline.rows if iv.state == "lost")
                state["done"] = t_ckpt_done
                replan = replan_on_failure(model, topology, global_batch, seq_len, failed=failed, ranks=current,
                                           space=space, params=params, recovery=recovery, evaluator=evaluator,
                                           current=first.best.choice)
                state["replan"] = replan
                t0 = sim.now
                yield sim.timeout(replan.planning_cost_s)
                record("replan", t0, sim.now, cause="failure", label="planner search")
                t0 = sim.now
                yield sim.timeout(recovery.restart_s)
                record("restart", t0, sim.now, cause="failure", label=f"reload checkpoint of step {t_ckpt_done}")
                current, step_s = replan.survivors, replan.plan.best.evaluation.step_time_s
                state["step_after"] = step_s
                continue
            yield sim.timeout(step_s)
            record("train", start, sim.now, iteration=state["done"], label=f"{len(current)} devices")
            state["done"] += 1
            if state["done"] % recovery.checkpoint_every_steps == 0:
                t_ckpt_done = state["done"]

    sim.process(run())
    sim.run()
    if state["replan"] is None:
        raise RlsimError(f"the run finished at {sim.now:.1f} s, before the failure at {fail_at_s} s",
                         field="fail_at_s", fix="fail earlier or run more steps")
    return FailureRun(timeline.to_frame()[INTERVAL_COLUMNS], state["done"], state["lost"], state["replan"], step_before,
                      state["step_after"], sim.now)
