"""Split pools: rollout instances generate while the trainer trains; weights go over the network.

One process per rollout instance (continuous: it moves to its share of the next round as soon as
it is free and the run-ahead gate allows) and one trainer process. The same runner serves
``disaggregated`` (staleness 0, threshold 1: strict alternation), ``one-step-off`` (staleness 1),
``stalesync`` on split pools (staleness s, threshold f) and ``async`` (threshold 0, optional
partial rollouts that resume after the next weight sync).

Failures (``disaggregated`` only, docs/schedules.md "Failures"): the pool that loses devices loses
its work in flight and re-plans on its survivors while the other pool keeps its state. Rollout
pool: the round in flight is lost back to its start (its samples are regenerated, same prompts).
Training pool: the step in flight is lost back to its training start (its samples return to the
queue) or, with ``lose_to: checkpoint``, back to the last checkpoint step, and then the rounds
generated since with the lost weights are lost too on the rollout pool.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from ...errors import RlsimError
from ..timeline import GroupClock, MultiClock, contiguous_runs
from . import failures as fl
from .base import Context, Gate, SeqBatch


def _clock(ctx: Context, pool: str, ranks: list[int], t: float | None = None) -> GroupClock | MultiClock:
    runs = contiguous_runs(ranks)
    if len(runs) == 1:
        a, n = runs[0]
        return GroupClock(ctx.timeline, pool, a, n) if t is None else GroupClock(ctx.timeline, pool, a, n, t)
    return MultiClock([GroupClock(ctx.timeline, pool, a, n, t or 0.0) for a, n in runs])


def _parts(clock) -> list[GroupClock]:
    return clock.clocks if isinstance(clock, MultiClock) else [clock]


def run(ctx: Context) -> float:
    env = ctx.env
    rollout, train = ctx.pools["rollout"], ctx.pools["train"]
    d = ctx.costs.instance_devices
    gate = Gate()
    state = {"done": False, "version_event": env.event(), "data_event": env.event(), "finished": env.event()}
    planned: dict[int, int] = {}
    fl.check_supported(ctx)
    # mutable run state: a failure changes the pools' ranks (survivors) and restarts their processes
    run_ = {"n_inst": rollout.count // d, "roll": list(rollout.ranks)[: (rollout.count // d) * d],
            "train": list(train.ranks), "inst_procs": [], "inst_clocks": [], "trainer_proc": None, "k": 0,
            "phase": "A"}
    trainer = GroupClock(ctx.timeline, "train", train.start, train.count)
    run_["trainer"] = trainer
    ctx.clocks.append(trainer)
    ctx.start_clock(trainer)
    snaps_a: dict[int, fl.Snapshot] = {}     # iteration k waits for round k (strict alternation)
    snaps_b: dict[int, fl.Snapshot] = {}     # iteration k starts training (round k complete)
    failing = bool(ctx.sched.failures)

    def sync_time() -> float:
        return ctx.costs.weight_sync_s(run_["train"], run_["roll"]) / max(1.0, ctx.sched.weight_sync_efficiency)

    sync_s = sync_time() if failing else \
        ctx.costs.weight_sync_s(train.ranks, rollout.ranks) / max(1.0, ctx.sched.weight_sync_efficiency)
    run_["sync_s"] = sync_s

    def notify(key: str) -> None:
        ev = state[key]
        state[key] = env.event()
        ev.succeed()

    def instance(i: int, clock, r: int = 0, my_version: int = 0, resume_s: float = 0.0):
        try:
            yield from _instance(i, clock, r, my_version, resume_s)
        except simpy.Interrupt:
            return

    def _instance(i: int, clock, r: int, my_version: int, resume_s: float):
        if ctx.start_s > 0 and resume_s == 0.0:
            yield env.timeout(ctx.start_s - env.now)
        if resume_s > env.now:
            yield env.timeout(resume_s - env.now)
        carry = SeqBatch.empty()
        while not state["done"]:
            while not gate.open(r, ctx.s) and not state["done"]:
                if i not in gate.waiting:
                    gate.waiting[i] = r
                    notify("data_event")          # lets a starved trainer see every instance blocked
                yield state["version_event"]
            gate.waiting.pop(i, None)
            if state["done"]:
                break
            prev_end = ctx.round_end.get(r - 1, clock.cursor)
            clock.idle("long_tail", min(max(prev_end, clock.cursor), env.now), r)
            clock.idle("dependency", env.now, r)
            if gate.version > my_version:          # pick up the newest weights before generating
                s_s = run_["sync_s"]
                clock.busy("sync", env.now + s_s, r, label="weight_sync", cause="weight_sync")
                yield env.timeout(s_s)
                my_version = gate.version
            n_inst = run_["n_inst"]
            seqs = SeqBatch.concat(carry, ctx.share(r, i, n_inst))
            t0 = env.now
            end, carry, _ = ctx.generate(seqs, t0, my_version, clock.ranks)
            clock.busy("generate", end, r, label=f"round {r}")
            ctx.add_stage_time("generate", (end - t0) / n_inst)
            ctx.round_end[r] = max(ctx.round_end.get(r, 0.0), end)
            planned[r] = planned.get(r, 0) + 1
            notify("data_event")
            r += 1
            yield env.timeout(end - env.now)

    def trainer_proc(k0: int = 0, resume_s: float = 0.0):
        try:
            yield from _trainer(k0, resume_s)
        except simpy.Interrupt:
            return

    def _trainer(k0: int, resume_s: float):
        if resume_s > env.now:
            yield env.timeout(resume_s - env.now)
        for k in range(k0, ctx.scenario.iterations):
            run_["k"], run_["phase"] = k, "A"
            if failing and k not in snaps_a:
                snaps_a[k] = fl.snapshot(ctx, k)
            while True:
                t, ids = ctx.ready_time(k, planned.get(k, 0) >= run_["n_inst"])
                if t <= env.now + 1e-12:
                    break
                if math.isinf(t) and len(gate.waiting) == run_["n_inst"] and \
                        all(not gate.open(r, ctx.s) for r in gate.waiting.values()):
                    gate.extra += 1                # starved (drops, partial rollouts): allow one more round
                    notify("version_event")
                    continue
                events = [state["data_event"]]
                if not math.isinf(t):
                    events.append(env.timeout(t - env.now))
                yield env.any_of(events)
            tr = run_["trainer"]
            if failing:
                snaps_b[k] = fl.snapshot(ctx, k, store=True)
                run_["phase"] = "B"
            ctx.drop_stale(k)
            f = ctx.store.flat()
            ready = np.sort(f["ready"][ids])
            t_tail = ready[min(len(ready) - 1, math.ceil(ctx.sched.tail_threshold * len(ready)) - 1)]
            tr.idle("dependency", min(max(t_tail, tr.cursor), env.now), k)
            tr.idle("long_tail", env.now, k)
            yield from ctx.train_step(k, ids, tr)
            s_s = run_["sync_s"]
            tr.busy("sync", env.now + s_s, k, label="weight_sync", cause="weight_sync")
            yield env.timeout(s_s)
            ctx.add_stage_time("weight_sync", s_s)
            ctx.iterations[-1]["end"] = env.now
            gate.version = k + 1
            notify("version_event")
        state["done"] = True
        notify("version_event")
        state["finished"].succeed()

    def spawn_instances(r: int, my_version: int, t: float | None, resume_s: float = 0.0) -> None:
        run_["inst_procs"], run_["inst_clocks"] = [], []
        gate.waiting.clear()
        roll = run_["roll"]
        for i in range(run_["n_inst"]):
            clock = _clock(ctx, "rollout", roll[i * d:(i + 1) * d], t)
            ctx.clocks.extend(_parts(clock))
            if t is None:
                ctx.start_clock(clock)
            run_["inst_clocks"].append(clock)
            run_["inst_procs"].append(env.process(instance(i, clock, r, my_version, resume_s)))

    def retire(clocks, t: float, cause: str, k: int) -> None:
        """Close old clocks at the failure (the gap since their last record: idle) and drop them."""
        for c in clocks:
            for part in _parts(c):
                if part.cursor < t:
                    part.idle(cause, t, k)
                ctx.clocks.remove(part)

    def fail_rollout(spec: str, failed: set[int], t_f: float) -> tuple[float, float, float]:
        """The rollout pool lost devices: round in flight lost back to its start, re-plan, restart."""
        k, phase = run_["k"], run_["phase"]
        for p in run_["inst_procs"]:
            if p.is_alive:
                p.interrupt("failure")
        # strict alternation: in phase A the trainer waits for round k, in flight until every instance is done
        in_flight = phase == "A" and (planned.get(k, 0) < run_["n_inst"] or ctx.round_end.get(k, 0.0) > t_f)
        retire(run_["inst_clocks"], t_f, "long_tail" if in_flight else "dependency", k)
        lost = 0.0
        if in_flight:
            lost = fl.roll_back_pools(ctx, snaps_a[k], t_f, {"rollout"})
            planned.pop(k, None)
            ctx.round_end.pop(k, None)
        out = ctx.replanner.on_rollout_failure(run_["roll"], sorted(failed & set(run_["roll"])), {})
        n_inst = len(out.survivors) // d
        if n_inst == 0:
            raise RlsimError(f"no whole rollout instance ({d} devices) fits on the {len(out.survivors)} rollout "
                             f"devices left after the failure of {spec}", source=ctx.scenario.source,
                             field="schedule.failures", fix="fail fewer devices or give the rollout pool more")
        use = out.survivors[: n_inst * d]
        fl.mark_out(ctx, "rollout", [r for r in run_["roll"] if r not in use], failed, t_f)
        run_["roll"], run_["n_inst"] = list(use), n_inst
        run_["sync_s"] = sync_time()
        resume = t_f + out.planning_cost_s + ctx.sched.recovery.restart_s
        # restarted engines hold no weights (my_version -1): they receive the current ones first
        spawn_instances(k if in_flight else k + 1, -1, t_f, resume)
        for c in run_["inst_clocks"]:
            c.busy("replan", t_f + out.planning_cost_s, k, label=f"failure of {spec}", cause="failure")
            c.busy("restart", resume, k, label="restart", cause="failure")
        return lost, out.planning_cost_s, float(len(use))

    def fail_train(spec: str, failed: set[int], t_f: float) -> tuple[float, float, float, int]:
        """The training pool lost devices: the step in flight (or everything since the checkpoint) is lost."""
        k, phase = run_["k"], run_["phase"]
        rec = ctx.sched.recovery
        c = k
        if rec.lose_to == "checkpoint":
            c = (k // rec.checkpoint_every_steps) * rec.checkpoint_every_steps
        tp = run_["trainer_proc"]
        if tp is not None and tp.is_alive:
            tp.interrupt("failure")
        retire([run_["trainer"]], t_f, "dependency", k)
        lost, target = 0.0, k
        if c < k or phase == "B":
            target = c
            pools = {"train"} | ({"rollout"} if c < k else set())
            if c < k:   # rounds generated with the lost weights are lost too
                for p in run_["inst_procs"]:
                    if p.is_alive:
                        p.interrupt("failure")
                retire(run_["inst_clocks"], t_f, "dependency", k)
            lost = fl.roll_back_pools(ctx, snaps_b[c], t_f, pools)
            for j in [j for j in snaps_a if j > c]:
                del snaps_a[j]
            for j in [j for j in snaps_b if j >= c]:
                del snaps_b[j]
            if c < k:
                for r in [r for r in planned if r > c]:
                    del planned[r]
                for r in [r for r in ctx.round_end if r > c]:
                    del ctx.round_end[r]
                gate.version = c
                spawn_instances(c + 1, -1, t_f)
        current = ctx.costs.train_layout_of(run_["train"])
        out = ctx.replanner.on_failure(run_["train"], sorted(failed & set(run_["train"])), current,
                                       accept=ctx.costs.accept_train_layout)
        if out.train_layout:
            ctx.costs.set_train_layout(out.train_layout)
        n = ctx.costs.train_devices_at_most(len(out.survivors))
        if n <= 0:
            raise RlsimError(f"no whole training replica fits on the {len(out.survivors)} training devices left "
                             f"after the failure of {spec}", source=ctx.scenario.source,
                             field="schedule.failures", fix="fail fewer devices or give the training pool more")
        use = out.survivors[:n]
        fl.mark_out(ctx, "train", [r for r in run_["train"] if r not in use], failed, t_f)
        run_["train"] = list(use)
        run_["sync_s"] = sync_time()
        tr = fl.survivor_clock(ctx, "train", use, t_f)
        run_["trainer"] = tr
        tr.busy("replan", t_f + out.planning_cost_s, target, label=f"failure of {spec}", cause="failure")
        resume = t_f + out.planning_cost_s + ctx.sched.recovery.restart_s
        tr.busy("restart", resume, target, label="restart", cause="failure")
        run_["trainer_proc"] = env.process(trainer_proc(target, resume))
        return lost, out.planning_cost_s, float(len(use)), target

    def supervisor(events):
        for at_s, spec, failed in events:
            if at_s > env.now:
                yield state["finished"] | env.timeout(at_s - env.now)
            if state["finished"].triggered:
                return
            t_f = env.now
            hit_roll, hit_train = failed & set(run_["roll"]), failed & set(run_["train"])
            k = run_["k"]
            entry = {"at_s": t_f, "fail": spec, "failed_ranks": sorted(failed & set(range(ctx.n_devices))),
                     "iteration": k, "lost_s": 0.0, "replan_s": 0.0, "restart_s": ctx.sched.recovery.restart_s,
                     "pools": [p for p, hit in (("rollout", hit_roll), ("train", hit_train)) if hit]}
            if hit_roll and hit_train:
                raise RlsimError(f"failure {spec!r} hits both the rollout and the training pool; a failure "
                                 "of both pools at once is not modelled", source=ctx.scenario.source,
                                 field="schedule.failures", fix="name devices of one pool (two events if needed)")
            if hit_train:
                lost, cost, _, target = fail_train(spec, failed, t_f)
                entry.update(lost_s=lost, replan_s=cost, iteration=target)
            else:
                lost, cost, _ = fail_rollout(spec, failed, t_f)
                entry.update(lost_s=lost, replan_s=cost)
            entry["devices_after"] = len(run_["train"]) + len(run_["roll"])
            entry["train_layout_after"] = ctx.costs.train_layout_of(run_["train"])
            ctx.failures.append(entry)

    spawn_instances(0, 0, None)
    if failing:   # before any process runs: instances commit round 0 at t = 0, ahead of the trainer
        snaps_a[0] = fl.snapshot(ctx, 0)
    run_["trainer_proc"] = env.process(trainer_proc())
    if failing:
        env.process(supervisor(fl.resolve_events(ctx, run_["roll"] + run_["train"],
                                                  "the rollout or training pool")))
    env.run(until=state["finished"])
    makespan = env.now
    spare = rollout.count - (rollout.count // d) * d
    if spare:
        spare_clock = GroupClock(ctx.timeline, "rollout", rollout.start + (rollout.count // d) * d, spare)
        ctx.start_clock(spare_clock)
        spare_clock.idle("placement", makespan)
    for part in _parts(run_["trainer"]):
        part.idle("dependency", makespan)
    return makespan
