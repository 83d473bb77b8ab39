"""Split pools: rollout instances generate while the trainer trains; weights go over the network.

One ``RolloutInstance`` process per instance (continuous: it moves to its share of the next round
as soon as it is free and the run-ahead gate allows) and one ``Trainer`` process, meeting at a
``VersionGate``. The same runner serves ``disaggregated`` (staleness 0, threshold 1: strict
alternation), ``one-step-off`` (staleness 1), ``stalesync`` on split pools (staleness s, threshold
f) and ``async`` (threshold 0, optional partial rollouts that resume after the next weight sync).

Failures (``disaggregated`` only, docs/schedules.md "Failures", ``SplitPoolFailures``): the pool that
loses devices loses its work in flight and re-plans on its survivors while the other pool keeps
its state. Rollout pool: the round in flight is lost back to its start (its samples are
regenerated, same prompts). Training pool: the step in flight is lost back to its training start
(its samples return to the queue) or, with ``lose_to: checkpoint``, back to the last checkpoint
step, and then the rounds generated since with the lost weights are lost too on the rollout pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from ...scenario import AsyncSchedule, DisaggregatedSchedule, OneStepOffSchedule
from ..pools import aux_pool_sizes
from ..timeline import Clock, GroupClock, clock_over, clock_parts
from . import failures as fl
from .batches import SeqBatch
from .context import Context
from .registry import SchedulePolicy, register
from .split_failures import SplitPoolFailures
from .staleness import TIME_TOL_S, VersionGate
from .training import skipped_forwards

WHOLE_ROUND = -1   # the sub-round key of a whole round's meeting (round_batches)


@dataclass
class SubRoundBarrier:
    """The instances' meeting after one DAPO generation batch: when the last generated it and when
    the last of its rewards came in; ``event`` fires once every instance has arrived."""
    event: simpy.Event
    arrived: int = 0
    generated_s: float = 0.0
    scored_s: float = 0.0

    def arrive(self, generated_s: float, scored_s: float, instances: int) -> None:
        self.arrived += 1
        self.generated_s = max(self.generated_s, generated_s)
        self.scored_s = max(self.scored_s, scored_s, generated_s)
        if self.arrived >= instances and not self.event.triggered:
            self.event.succeed()


class RolloutInstance:
    """One rollout instance: waits at the gate for its next round, picks up newer weights, generates
    its share of the round (plus what it carries), repeats."""

    def __init__(self, run: SplitPoolRun, index: int, clock: Clock, round_: int, version: int, resume_s: float):
        self.run_, self.index, self.clock = run, index, clock
        self.round, self.version, self.resume_s = round_, version, resume_s
        self.carry = SeqBatch.empty()
        self.round_barrier: SubRoundBarrier | None = None   # the whole last round's meeting (round_batches)

    def process(self):
        try:
            yield from self._loop()
        except simpy.Interrupt:
            return

    def _loop(self):
        run, ctx, env, gate = self.run_, self.run_.ctx, self.run_.env, self.run_.gate
        if ctx.start_s > 0 and self.resume_s == 0.0:
            yield env.timeout(ctx.start_s - env.now)
        if self.resume_s > env.now:
            yield env.timeout(self.resume_s - env.now)
        while not gate.done:
            yield from self._whole_last_round()
            yield from self._wait_gate()
            if gate.done:
                break
            r, clock = self.round, self.clock
            newer = gate.version > self.version
            # an instance idle through the trainer's broadcast received the weights with it (one
            # transfer, both sides busy); one that was still generating loads them now
            received = newer and self.version >= 0 and clock.cursor <= gate.published_s - run.sync_s + TIME_TOL_S
            wait_until = gate.published_s - run.sync_s if received else env.now
            prev_end = ctx.round_end.get(r - 1, clock.cursor)
            clock.idle("long_tail", min(max(prev_end, clock.cursor), wait_until), r)
            clock.idle("dependency", wait_until, r)
            if received:
                clock.busy("sync", gate.published_s, r, label="weight_sync", cause="weight_sync")
                clock.idle("dependency", env.now, r)
            elif newer:                              # pick up the newest weights before generating
                clock.busy("sync", env.now + run.sync_s, r, label="weight_sync", cause="weight_sync")
                yield env.timeout(run.sync_s)
            if newer:
                self.version = gate.version
            shares = ctx.draws.sub_round_shares(r, run.n_inst) if ctx.workload.dynamic_sampling is not None else []
            if len(shares) > 1:
                end = yield from self._sub_rounds(r, [share[self.index] for share in shares])
            else:
                n_inst = run.n_inst
                seqs = SeqBatch.concat(self.carry, ctx.draws.share(r, self.index, n_inst))
                t0 = env.now
                end, self.carry, _ = ctx.gen.generate(seqs, t0, self.version, clock.ranks)
                clock.busy("generate", end, r, label=f"round {r}")
                ctx.add_stage_time("generate", (end - t0) / n_inst, span=(t0, end))
            ctx.round_end[r] = max(ctx.round_end.get(r, 0.0), end)
            run.planned[r] = run.planned.get(r, 0) + 1
            if ctx.sched.round_batches:
                self.round_barrier = run.sub_round_barrier(r, WHOLE_ROUND)
                self.round_barrier.arrive(end, end, run.n_inst)
            gate.data()
            self.round += 1
            yield env.timeout(max(0.0, end - env.now))

    def _sub_rounds(self, r: int, parts: list[SeqBatch]):
        """DAPO dynamic sampling: this instance's share of each generation batch of round r (``parts``),
        one batch after another; the next starts once every instance has generated the batch and its rewards
        are in (the filter needs the whole batch scored: frameworks.md "regenerate ... if fewer than
        the train batch survive"; colocated's _dynamic_sampling_step likewise). Returns the busy end."""
        run, ctx, env, clock = self.run_, self.run_.ctx, self.run_.env, self.clock
        start, carried = env.now, []
        for j, seqs in enumerate(parts):
            if j == 0:
                seqs = SeqBatch.concat(self.carry, seqs)
            first_row = ctx.store.n
            end, carry, _ = ctx.gen.generate(seqs, start, self.version, clock.ranks)
            carried.append(carry)
            clock.busy("generate", end, r, label=f"round {r}")
            ctx.add_stage_time("generate", (end - start) / run.n_inst, span=(start, end))
            if j == len(parts) - 1:
                break
            ready = ctx.store.at("ready", np.arange(first_row, ctx.store.n))
            barrier = run.sub_round_barrier(r, j)
            barrier.arrive(end, float(ready.max()) if len(ready) else end, run.n_inst)
            yield barrier.event
            run.barriers.pop((r, j), None)        # every instance has arrived and holds it
            clock.idle("long_tail", barrier.generated_s, r)
            clock.idle("dependency", barrier.scored_s, r, label="reward")
            start = max(barrier.scored_s, env.now)
        self.carry = SeqBatch.merge(carried)
        return end

    def _whole_last_round(self):
        """round_batches: the next round starts once the whole last one is back (verl's
        one_step_off_policy launches the next batch after batch_future.get(), which returns when every
        rollout worker is done; OpenRLHF's async generator likewise): a free instance waits for the
        others' tails, where otherwise it runs on into its next share."""
        barrier, env = self.round_barrier, self.run_.env
        if barrier is None:
            return
        yield barrier.event
        self.run_.barriers.pop((self.round - 1, WHOLE_ROUND), None)   # every instance holds it
        if barrier.generated_s > env.now:
            yield env.timeout(barrier.generated_s - env.now)
        self.round_barrier = None

    def close_tail(self, makespan: float) -> None:
        """At the run's end an instance idle after its last round waits for that round's slower instances:
        `long_tail` until the round's last finish, with the round's iteration, as the rounds before it
        close; Context.record files the rest as the end of the run (it filed all of it so)."""
        last, clock = self.round - 1, self.clock
        tail_end = min(self.run_.ctx.round_end.get(last, clock.cursor), makespan)
        if last >= 0 and tail_end > clock.cursor:
            clock.idle("long_tail", tail_end, last)

    def in_flight_at(self, t: float) -> list[tuple[SeqBatch, np.ndarray]]:
        """What this instance holds unstored at ``t`` (sequences, tokens so far): its carry (a
        length budget's cut; its plans are stored when costed, a finish past the run's end dropped
        as ``unfinished``)."""
        return [(self.carry, self.carry.done_len)] if len(self.carry) else []

    def _wait_gate(self):
        gate = self.run_.gate
        while not gate.open(self.round) and not gate.done:
            if self.index not in gate.waiting:
                gate.waiting[self.index] = self.round
                gate.data()                       # lets a starved trainer see every instance blocked
            yield gate.version_changed
        gate.waiting.pop(self.index, None)


class Trainer:
    """The training pool: waits for a batch within the bound, trains, sends the weights, publishes."""

    def __init__(self, run: SplitPoolRun, first_step: int = 0, resume_s: float = 0.0):
        self.run_, self.first_step, self.resume_s = run, first_step, resume_s

    def process(self):
        try:
            yield from self._loop()
        except simpy.Interrupt:
            return

    def _loop(self):
        run, ctx, env = self.run_, self.run_.ctx, self.run_.env
        if self.resume_s > env.now:
            yield env.timeout(self.resume_s - env.now)
        for k in range(self.first_step, ctx.scenario.iterations):
            run.step, run.phase = k, "A"
            if run.failures and k not in run.failures.waiting:
                run.failures.waiting[k] = fl.snapshot(ctx, k)
            ids = yield from self._wait_for_batch(k)
            if run.failures:
                run.failures.training[k] = fl.snapshot(ctx, k, store=True)
                run.phase = "B"
            yield from self._train(k, ids)
        run.gate.finish()

    def _wait_for_batch(self, k: int):
        run, ctx, env, gate = self.run_, self.run_.ctx, self.run_.env, self.run_.gate
        while True:
            for instance in run.streaming:        # what streaming engines finished so far is in the store
                instance.store_finished(env.now)
            # a trainer free only now takes what is ready by now (oldest weights first), not by t
            t, ids = ctx.trainer.ready_time(k, run.round_known(k), starts_at=env.now)
            if t <= env.now + TIME_TOL_S:
                return ids
            if math.isinf(t) and gate.all_blocked(run.n_inst):
                gate.allow_extra_round()          # starved (drops, partial rollouts): allow one more round
                continue
            events = [gate.data_ready]
            if not math.isinf(t):
                events.append(env.timeout(t - env.now))
            if (streamed := self._enough_streamed_s(k)) is not None:
                events.append(env.timeout(max(0.0, streamed - env.now)))
            yield env.any_of(events)

    def _enough_streamed_s(self, k: int) -> float | None:
        """The earliest time the store can hold step k's batch from what streaming engines' running
        plans will finish (their sequences counted as eligible: an early look is checked again), or
        None when none streams or the store holds enough already."""
        run, ctx = self.run_, self.run_.ctx
        if not run.streaming:
            return None
        if ctx.trainer.round_batches:   # the step takes its round whole: when the round's last is out
            last = np.concatenate([instance.unstored_finishes(k) for instance in run.streaming])
            return max(float(last.max()), run.env.now + 2 * TIME_TOL_S) if len(last) else None
        need = ctx.trainer.min_batch - ctx.trainer.eligible_leftover(k)
        finishes = np.concatenate([instance.unstored_finishes() for instance in run.streaming])
        if need <= 0 or not len(finishes):
            return None
        nth = min(need, len(finishes)) - 1
        return max(float(np.partition(finishes, nth)[nth]), run.env.now + 2 * TIME_TOL_S)   # what finished is stored

    def _train(self, k: int, ids: np.ndarray):
        run, ctx, env = self.run_, self.run_.ctx, self.run_.env
        ctx.trainer.drop_stale(k)
        # the batch's generation to its tail_threshold quantile, the tail's, then the last samples'
        # rule rewards (a wait on the verifier, as a colocated pool's is: not generation). Finish
        # times, not ready ones: a batch scored together is ready all at once, after its tail
        finish = np.sort(ctx.store.at("finish", ids))
        t_tail = finish[min(len(finish) - 1, math.ceil(ctx.sched.tail_threshold * len(finish)) - 1)] \
            if len(finish) else env.now
        # to where the engine handed the last out (an engine that returns a batch: its end)
        generated = float(ctx.store.at("returned", ids).max()) if len(finish) else env.now
        for clock in run.training_clocks():   # the aux pool waits for the batch as the trainer does
            clock.idle("dependency", min(max(t_tail, clock.cursor), env.now), k)
            clock.idle("long_tail", min(max(generated, clock.cursor), env.now), k)
            clock.idle("dependency", env.now, k, label="reward")
        yield from ctx.trainer.run(k, ids, run.trainer_clock, run.aux_roles, skip=skipped_forwards(ctx.sched))
        yield from self._publish(k)

    def _publish(self, k: int):
        """Send the new weights and publish version k + 1 (the rollout side picks them up itself)."""
        run, ctx, env = self.run_, self.run_.ctx, self.run_.env
        run.trainer_clock.busy("sync", env.now + run.sync_s, k, label="weight_sync", cause="weight_sync")
        yield env.timeout(run.sync_s)
        ctx.add_stage_time("weight_sync", run.sync_s)
        ctx.iterations[-1]["end"] = env.now
        run.gate.publish(k + 1)


class SplitPoolRun:
    """The run's pools as they stand (a failure changes their ranks and restarts their processes)."""

    def __init__(self, ctx: Context):
        self.ctx, self.env = ctx, ctx.env
        rollout, train = ctx.pools["rollout"], ctx.pools["train"]
        self.d = ctx.costs.instance_devices
        self.gate = VersionGate(self.env, ctx.staleness)
        self.planned: dict[int, int] = {}            # round -> instances that generated their share
        self.barriers: dict[tuple[int, int], SubRoundBarrier] = {}   # (round, generation batch) -> meeting
        self.n_inst = rollout.count // self.d
        self.roll, self.train = list(rollout.ranks)[: self.n_inst * self.d], list(train.ranks)
        self.instances: list[simpy.Process] = []
        self.rollout_instances: list[RolloutInstance] = []   # the instances' state, beside their processes
        self.instance_clocks: list[Clock] = []
        self.streaming: list[Any] = []              # instances whose engine hands each sequence out as it ends
        self.trainer_proc: simpy.Process | None = None
        self.step, self.phase = 0, "A"              # phase A: waiting for the batch, B: training
        self.trainer_clock: Clock = GroupClock(ctx.timeline, "train", train.start, train.count)
        # schedule.aux_devices: the reference / reward / critic passes on a pool of their own, or one each
        self.aux_clocks: dict[str, Clock] = {}
        for name in aux_pool_sizes(ctx.sched):
            pool = ctx.pools[name]
            self.aux_clocks[name] = GroupClock(ctx.timeline, name, pool.start, pool.count)
        for clock in self.training_clocks():
            ctx.clocks.append(clock)
            ctx.start_clock(clock)
        # as TrainStep.run takes them: one clock for every aux role, or one per role (fixed for the run:
        # failures, which re-plan the pools, are refused beside an aux pool)
        self.aux_roles: Clock | dict[str, Clock] | None = self.aux_clocks.get("aux") or {
            role: clock for name, clock in self.aux_clocks.items() for role in name[len("aux-"):].split("+")} or None
        self.failures = SplitPoolFailures(self) if ctx.sched.failures else None
        self.sync_s = self.sync_time() if self.failures else self.sync_time(train.ranks, rollout.ranks)

    def training_clocks(self) -> list[Clock]:
        """The trainer's clock and the aux pools', where there are some."""
        return [self.trainer_clock, *self.aux_clocks.values()]

    def round_known(self, k: int) -> bool:
        """Whether the store holds every sample of round k it will (each instance generated its share:
        a plan here is committed as it is costed)."""
        return self.planned.get(k, 0) >= self.n_inst

    def sync_time(self, src=None, dst=None) -> float:
        src = self.train if src is None else src
        dst = self.roll if dst is None else dst
        return self.ctx.costs.weight_sync_s(src, dst)   # weight_sync_efficiency is applied there

    def sub_round_barrier(self, round_: int, sub_round: int) -> SubRoundBarrier:
        """Where the instances meet after generation batch ``sub_round`` of round ``round_``."""
        key = (round_, sub_round)
        if key not in self.barriers:
            self.barriers[key] = SubRoundBarrier(self.env.event())
        return self.barriers[key]

    def spawn_instances(self, round_: int, version: int, t: float | None, resume_s: float = 0.0) -> None:
        # instances that start (again) at round_ meet afresh from it on (a failure's lost round included)
        self.barriers = {key: b for key, b in self.barriers.items() if key[0] < round_}
        self.instances, self.instance_clocks, self.rollout_instances = [], [], []
        self.gate.waiting.clear()
        for i in range(self.n_inst):
            clock = clock_over(self.ctx.timeline, "rollout", self.roll[i * self.d:(i + 1) * self.d], t)
            self.ctx.clocks.extend(clock_parts(clock))
            if t is None:
                self.ctx.start_clock(clock)
            self.instance_clocks.append(clock)
            self.rollout_instances.append(RolloutInstance(self, i, clock, round_, version, resume_s))
            self.instances.append(self.env.process(self.rollout_instances[-1].process()))

    def start_trainer(self, first_step: int = 0, resume_s: float = 0.0) -> None:
        self.trainer_proc = self.env.process(Trainer(self, first_step, resume_s).process())

    def in_flight_at(self, t: float) -> list[tuple[SeqBatch, np.ndarray]]:
        return [part for instance in self.rollout_instances for part in instance.in_flight_at(t)]

    def run(self) -> float:
        ctx, env = self.ctx, self.env
        ctx.in_flight_at = self.in_flight_at
        self.spawn_instances(0, 0, None)
        if self.failures:   # before any process runs: instances commit round 0 at t = 0, ahead of the trainer
            self.failures.waiting[0] = fl.snapshot(ctx, 0)
        self.start_trainer()
        if self.failures:
            env.process(self.failures.process(fl.resolve_events(ctx, self.roll + self.train,
                                                                "the rollout or training pool")))
        env.run(until=self.gate.finished)
        makespan = env.now
        rollout = ctx.pools["rollout"]
        spare = rollout.count - (rollout.count // self.d) * self.d
        if spare:
            spare_clock = GroupClock(ctx.timeline, "rollout", rollout.start + (rollout.count // self.d) * self.d, spare)
            ctx.start_clock(spare_clock)
            spare_clock.idle("placement", makespan)
        for instance in self.rollout_instances:
            instance.close_tail(makespan)
        for part in [part for clock in self.training_clocks() for part in clock_parts(clock)]:
            part.idle("dependency", makespan)
        return makespan


def run(ctx: Context) -> float:
    return SplitPoolRun(ctx).run()


POLICIES = [
    register(SchedulePolicy(DisaggregatedSchedule, run, "split pools in strict alternation (weights over the network)",
                            supports_failures=lambda sched: True, supports_multi_turn=True)),
    register(SchedulePolicy(OneStepOffSchedule, run, "split pools; rollout of step k+1 overlaps training of step k",
                            supports_partial_rollout=True, supports_multi_turn=True)),
    register(SchedulePolicy(AsyncSchedule, run, "continuous generation; the trainer consumes within the staleness bound",
                            supports_partial_rollout=True, supports_multi_turn=True)),
]
