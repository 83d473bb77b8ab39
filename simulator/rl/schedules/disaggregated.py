"""Split pools: rollout instances generate while the trainer trains; weights go over the network.

One process per rollout instance (continuous: it moves to its share of the next round as soon as
it is free and the run-ahead gate allows) and one trainer process. The same runner serves
``disaggregated`` (staleness 0, threshold 1: strict alternation), ``one-step-off`` (staleness 1),
``stalesync`` on split pools (staleness s, threshold f) and ``async`` (threshold 0, optional
partial rollouts that resume after the next weight sync).
"""
from __future__ import annotations

import math

import numpy as np

from ..timeline import GroupClock
from . import failures as fl
from .base import Context, Gate, SeqBatch


def run(ctx: Context) -> float:
    env = ctx.env
    rollout, train = ctx.pools["rollout"], ctx.pools["train"]
    d = ctx.costs.instance_devices
    n_inst = rollout.count // d
    gate = Gate()
    state = {"done": False, "version_event": env.event(), "data_event": env.event()}
    planned: dict[int, int] = {}
    fl.check_supported(ctx)
    trainer = GroupClock(ctx.timeline, "train", train.start, train.count)
    ctx.clocks.append(trainer)
    ctx.start_clock(trainer)
    sync_s = ctx.costs.weight_sync_s(train.ranks, rollout.ranks) / max(1.0, ctx.sched.weight_sync_efficiency)

    def notify(key: str) -> None:
        ev = state[key]
        state[key] = env.event()
        ev.succeed()

    def instance(i: int):
        clock = GroupClock(ctx.timeline, "rollout", rollout.start + i * d, d)
        ctx.clocks.append(clock)
        ctx.start_clock(clock)
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        r, carry, my_version = 0, SeqBatch.empty(), 0
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
                clock.busy("sync", env.now + sync_s, r, label="weight_sync", cause="weight_sync")
                yield env.timeout(sync_s)
                my_version = gate.version
            seqs = SeqBatch.concat(carry, ctx.share(r, i, n_inst))
            t0 = env.now
            end, carry, _ = ctx.generate(seqs, t0, my_version, d)
            clock.busy("generate", end, r, label=f"round {r}")
            ctx.add_stage_time("generate", (end - t0) / n_inst)
            ctx.round_end[r] = max(ctx.round_end.get(r, 0.0), end)
            planned[r] = planned.get(r, 0) + 1
            notify("data_event")
            r += 1
            yield env.timeout(end - env.now)

    def trainer_proc():
        for k in range(ctx.scenario.iterations):
            while True:
                t, ids = ctx.ready_time(k, planned.get(k, 0) >= n_inst)
                if t <= env.now + 1e-12:
                    break
                if math.isinf(t) and len(gate.waiting) == n_inst and \
                        all(not gate.open(r, ctx.s) for r in gate.waiting.values()):
                    gate.extra += 1                # starved (drops, partial rollouts): allow one more round
                    notify("version_event")
                    continue
                events = [state["data_event"]]
                if not math.isinf(t):
                    events.append(env.timeout(t - env.now))
                yield env.any_of(events)
            ctx.drop_stale(k)
            f = ctx.store.flat()
            ready = np.sort(f["ready"][ids])
            t_tail = ready[min(len(ready) - 1, math.ceil(ctx.sched.tail_threshold * len(ready)) - 1)]
            trainer.idle("dependency", min(max(t_tail, trainer.cursor), env.now), k)
            trainer.idle("long_tail", env.now, k)
            yield from ctx.train_step(k, ids, trainer)
            trainer.busy("sync", env.now + sync_s, k, label="weight_sync", cause="weight_sync")
            yield env.timeout(sync_s)
            ctx.add_stage_time("weight_sync", sync_s)
            ctx.iterations[-1]["end"] = env.now
            gate.version = k + 1
            notify("version_event")
        state["done"] = True
        notify("version_event")

    for i in range(n_inst):
        env.process(instance(i))
    spare = rollout.count - n_inst * d
    proc = env.process(trainer_proc())
    env.run(until=proc)
    makespan = env.now
    if spare:
        spare_clock = GroupClock(ctx.timeline, "rollout", rollout.start + n_inst * d, spare)
        ctx.start_clock(spare_clock)
        spare_clock.idle("placement", makespan)
    trainer.idle("dependency", makespan)
    return makespan
