"""Failures on split pools (synchronous ``disaggregated`` runs): the pool that loses devices loses
its work in flight and re-plans on its survivors while the other pool keeps its state."""
from __future__ import annotations

from typing import Protocol

import simpy

from ...errors import RlsimError
from ..timeline import Clock, clock_parts
from . import failures as fl
from .context import Context
from .staleness import VersionGate


class SplitPoolRun(Protocol):
    """What the supervisor reads and changes of a split-pool run (disaggregated.SplitPoolRun)."""
    ctx: Context
    env: simpy.Environment
    gate: VersionGate
    d: int
    n_inst: int
    roll: list[int]
    train: list[int]
    planned: dict[int, int]
    instances: list[simpy.Process]
    instance_clocks: list[Clock]
    trainer_proc: simpy.Process | None
    trainer_clock: Clock
    step: int
    phase: str
    sync_s: float

    def sync_time(self) -> float: ...
    def spawn_instances(self, round_: int, version: int, t: float | None, resume_s: float = 0.0) -> None: ...
    def start_trainer(self, first_step: int = 0, resume_s: float = 0.0) -> None: ...


class SplitPoolFailures:
    """The failure supervisor of a split-pool run and the snapshots it rolls back to."""

    def __init__(self, run: SplitPoolRun):
        self.run_ = run
        self.waiting: dict[int, fl.Snapshot] = {}     # iteration k waits for round k (strict alternation)
        self.training: dict[int, fl.Snapshot] = {}    # iteration k starts training (round k complete)

    def process(self, events):
        run, ctx, env = self.run_, self.run_.ctx, self.run_.env
        for at_s, spec, failed in events:
            if at_s > env.now:
                yield run.gate.finished | env.timeout(at_s - env.now)
            if run.gate.finished.triggered:
                return
            t_f = env.now
            hit_roll, hit_train = failed & set(run.roll), failed & set(run.train)
            entry = {"at_s": t_f, "fail": spec, "failed_ranks": sorted(failed & set(range(ctx.n_devices))),
                     "iteration": run.step, "lost_s": 0.0, "replan_s": 0.0, "restart_s": ctx.sched.recovery.restart_s,
                     "pools": [p for p, hit in (("rollout", hit_roll), ("train", hit_train)) if hit]}
            if hit_roll and hit_train:
                raise RlsimError(f"failure {spec!r} hits both the rollout and the training pool; a failure "
                                 "of both pools at once is not modelled", source=ctx.scenario.source,
                                 field="schedule.failures", fix="name devices of one pool (two events if needed)")
            if hit_train:
                lost, cost, target = self._fail_train(spec, failed, t_f)
                entry.update(lost_s=lost, replan_s=cost, iteration=target)
            else:
                lost, cost = self._fail_rollout(spec, failed, t_f)
                entry.update(lost_s=lost, replan_s=cost)
            entry["devices_after"] = len(run.train) + len(run.roll)
            entry["rollout_instances_after"] = len(run.roll) // ctx.costs.instance_devices
            entry["train_layout_after"] = ctx.costs.train_layout_of(run.train)
            ctx.failures.append(entry)

    def _retire(self, clocks: list[Clock], t: float, cause: str, k: int) -> None:
        """Close old clocks at the failure (the gap since their last record: idle) and drop them."""
        for clock in clocks:
            for part in clock_parts(clock):
                if part.cursor < t:
                    part.idle(cause, t, k)
                self.run_.ctx.clocks.remove(part)

    def _interrupt_instances(self) -> None:
        for proc in self.run_.instances:
            if proc.is_alive:
                proc.interrupt("failure")

    def _fail_rollout(self, spec: str, failed: set[int], t_f: float) -> tuple[float, float]:
        """The rollout pool lost devices: round in flight lost back to its start, re-plan, restart."""
        run, ctx = self.run_, self.run_.ctx
        k, d = run.step, run.d
        self._interrupt_instances()
        # strict alternation: in phase A the trainer waits for round k, in flight until every instance is done
        in_flight = run.phase == "A" and (run.planned.get(k, 0) < run.n_inst or ctx.round_end.get(k, 0.0) > t_f)
        self._retire(run.instance_clocks, t_f, "long_tail" if in_flight else "dependency", k)
        lost = 0.0
        if in_flight:
            lost = fl.roll_back_pools(ctx, self.waiting[k], t_f, {"rollout"})
            run.planned.pop(k, None)
            ctx.round_end.pop(k, None)
        out = ctx.replanner.on_rollout_failure(run.roll, sorted(failed & set(run.roll)), {})
        n_inst = len(out.survivors) // d
        if n_inst == 0:
            raise RlsimError(f"no whole rollout instance ({d} devices) fits on the {len(out.survivors)} rollout "
                             f"devices left after the failure of {spec}", source=ctx.scenario.source,
                             field="schedule.failures",
                             fix="fail fewer devices or give the rollout pool more"
                                 + (" (schedule.recovery.drop_whole_node: true takes a failed device's whole node out)"
                                    if ctx.sched.recovery.drop_whole_node else ""))
        use = out.survivors[: n_inst * d]
        fl.mark_out(ctx, "rollout", [r for r in run.roll if r not in use], failed, t_f)
        run.roll, run.n_inst = list(use), n_inst
        run.sync_s = run.sync_time()
        resume = t_f + out.planning_cost_s + ctx.sched.recovery.restart_s
        # restarted engines hold no weights (version -1): they receive the current ones first
        run.spawn_instances(k if in_flight else k + 1, -1, t_f, resume)
        for clock in run.instance_clocks:
            clock.busy("replan", t_f + out.planning_cost_s, k, label=f"failure of {spec}", cause="failure")
            clock.busy("restart", resume, k, label="restart", cause="failure")
        return lost, out.planning_cost_s

    def _fail_train(self, spec: str, failed: set[int], t_f: float) -> tuple[float, float, int]:
        """The training pool lost devices: the step in flight (or everything since the checkpoint) is lost."""
        run, ctx = self.run_, self.run_.ctx
        k, rec = run.step, ctx.sched.recovery
        ckpt = (k // rec.checkpoint_every_steps) * rec.checkpoint_every_steps if rec.lose_to == "checkpoint" else k
        if run.trainer_proc is not None and run.trainer_proc.is_alive:
            run.trainer_proc.interrupt("failure")
        self._retire([run.trainer_clock], t_f, "dependency", k)
        lost, target = 0.0, k
        if ckpt < k or run.phase == "B":
            target = ckpt
            lost = self._roll_back_training(ckpt, k, t_f)
        out, use = fl.replan_training(ctx, run.train, failed, lambda n, layout=None: ctx.costs.train_devices_at_most(n),
                                      "whole training replica", spec)
        fl.mark_out(ctx, "train", [r for r in run.train if r not in use], failed, t_f)
        run.train = list(use)
        run.sync_s = run.sync_time()
        clock = fl.survivor_clock(ctx, "train", use, t_f)
        run.trainer_clock = clock
        clock.busy("replan", t_f + out.planning_cost_s, target, label=f"failure of {spec}", cause="failure")
        resume = t_f + out.planning_cost_s + ctx.sched.recovery.restart_s
        clock.busy("restart", resume, target, label="restart", cause="failure")
        run.start_trainer(target, resume)
        return lost, out.planning_cost_s, target

    def _roll_back_training(self, ckpt: int, k: int, t_f: float) -> float:
        """Back to step ``ckpt``'s training start; rounds generated with lost weights are lost too."""
        run, ctx = self.run_, self.run_.ctx
        pools = {"train"} | ({"rollout"} if ckpt < k else set())
        if ckpt < k:
            self._interrupt_instances()
            self._retire(run.instance_clocks, t_f, "dependency", k)
        lost = fl.roll_back_pools(ctx, self.training[ckpt], t_f, pools)
        for j in [j for j in self.waiting if j > ckpt]:
            del self.waiting[j]
        for j in [j for j in self.training if j >= ckpt]:
            del self.training[j]
        if ckpt < k:
            for r in [r for r in run.planned if r > ckpt]:
                del run.planned[r]
            for r in [r for r in ctx.round_end if r > ckpt]:
                del ctx.round_end[r]
            run.gate.version = ckpt
            run.spawn_instances(ckpt + 1, -1, t_f)
        return lost
