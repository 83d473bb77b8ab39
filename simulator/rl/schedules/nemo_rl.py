"""NeMo RL async GRPO (kind ``nemo-rl-async``) on split pools (frameworks.md, "NeMo RL").

- Age rule: a trajectory whose generation started with weights v trains at step k iff
  k - v <= max_trajectory_age_steps; older pending ones are dropped as ``stale``. The age is taken
  from the trajectory's oldest token (``first_version``): with in-flight updates a trajectory's
  tokens span versions, and the oldest bounds them all.
- Run-ahead: rollout round r (the trajectories meant for step r) starts once the weights are at
  least r - max_age (the ``VersionGate``), so generation runs up to max_age steps ahead.
- A weight update is one broadcast the trainer and every rollout instance take part in
  (``sync_s`` on both sides at the same time). Without ``in_flight_weight_updates`` the update
  waits until every instance has drained its in-flight batch (no instance starts a new one
  meanwhile), and that wait is on the trainer's critical path. With it, the update happens as
  soon as the trainer is done: each instance's engine pauses between decode steps for the weight
  load and continues its sequences with their KV kept (no re-prefill) under the new version; with
  ``recompute_kv_after_update`` (NeMo RL's recompute_kv_cache_after_weight_updates) it re-prefills
  each unfinished sequence's prompt and tokens so far after the load, a new engine run of them.
- Step k trains the trajectories generated for it (round k), waiting until all of them are in:
  NeMo RL's replay buffer tags each trajectory group with the step it was generated for and serves
  a step only those, stalling until enough are ready ("Only select trajectories intended for the
  current training step", nemo_rl/algorithms/async_utils.py ReplayBuffer.sample, v0.4-v0.5; cited
  from memory of the public code, not readable here). A trajectory older than the bound is dropped.
- ``async_engine`` (vLLM's AsyncLLM): a round joins the running engine the moment the age bound
  opens it (its prompts queue behind the running sequences, whose KV stays: Generation.admit prices
  the engine run again with them added then), and each trajectory leaves the engine as it finishes
  (scored in its own task: reward handover "sample"). The synchronous engine takes rounds only
  when a plan starts and returns a plan's batch at its end.
NeMo RL's on-policy colocated GRPO is the ``colocated`` kind.
"""
from __future__ import annotations

import numpy as np

from ...scenario import NemoAsyncSchedule
from ..timeline import clock_over, clock_parts
from .batches import SeqBatch
from .context import Context
from .disaggregated import SplitPoolRun, Trainer
from .registry import SchedulePolicy, register
from .segments import SegmentedInstance, check_cuttable, continuation
from .staleness import TIME_TOL_S


def _joined(shares: list[SeqBatch]) -> SeqBatch:
    """Rounds' shares as one batch, in round order (one share as it is)."""
    return SeqBatch.merge(shares) if len(shares) > 1 else shares[0]


class NemoInstance(SegmentedInstance):
    """One vLLM engine: generates one round's share per plan; waits while a refit drains."""

    def _admit(self) -> SeqBatch:
        """This round's share; an async engine also takes every later round the age bound admits now
        (they queue behind it in the engine: continuous batching across rounds)."""
        return _joined([self._take_round(), *self._open_rounds()])

    def _open_rounds(self) -> list[SeqBatch]:
        """The shares of the rounds an async engine may take now (the age bound admits them)."""
        run = self.run_
        shares = []
        while run.ctx.sched.async_engine and run.gate.open(self.round) and not run.gate.done:
            shares.append(self._take_round())
        return shares

    def _cut_events(self) -> list:
        """An async engine's plan wakes when the weights move (a round may open)."""
        return [self.run_.gate.version_changed] if self.run_.ctx.sched.async_engine else []

    def _mid_plan(self) -> None:
        """A round that opens while the plan runs joins the engine's queue now, the running sequences
        keeping their KV (AsyncLLM takes each request as the collector submits it): the engine run
        priced again with them added (Generation.admit). Not while a refit drains the engines."""
        if not self._may_start():
            return
        shares = self._open_rounds()
        if shares:
            self.plan = self.run_.ctx.gen.admit(self.plan, _joined(shares), self.run_.env.now)

    def _take_round(self) -> SeqBatch:
        r = self.round
        self.round += 1
        self.run_.planned[r] = self.run_.planned.get(r, 0) + 1
        return self.run_.ctx.draws.share(r, self.index, self.run_.n_inst)

    def _may_start(self) -> bool:
        return not self.run_.paused

    def _streams(self) -> bool:
        """An async engine (AsyncLLM) hands each trajectory out as it finishes, scored in its own task
        (reward handover "sample", the kind's default with async_engine); the synchronous LLM class
        returns a plan's batch at its end."""
        return self.run_.ctx.sched.async_engine and super()._streams()

    def take_update(self, t: float, version: int, sync_s: float, k: int) -> None:
        """The weight update at time t: a plan in flight pauses for the load and continues (in-flight
        updates; without them no plan is in flight here), an idle instance loads the weights."""
        clock = self.clock
        if self.plan is not None and t >= self.plan.t0 + self.run_.ctx.gen.plan_end_s(self.plan) - TIME_TOL_S:
            self.commit()                                  # it finishes at this very instant
        if self.plan is not None:
            plan = self.plan
            carry = self.commit(stop_at=t)
            if self.run_.ctx.sched.recompute_kv_after_update:   # the carried prefixes re-prefilled
                self.plan = self.run_.ctx.gen.plan(carry, t + sync_s, version, clock.ranks)
                self.plan.streamed = plan.streamed
                self.plan.returns_together = plan.returns_together
            else:
                self.plan = continuation(plan, carry, t - plan.t0, t + sync_s, version)
            self.carry = SeqBatch.empty()
        else:
            clock.idle("dependency", t, k)
        clock.busy("sync", t + sync_s, k, label="weight_sync (in flight)" if self.plan else "weight_sync",
                   cause="weight_sync")
        self.version = version


class NemoTrainer(Trainer):
    """Trains like every split-pool trainer; the refit waits for the drain unless updates are in flight."""

    def _publish(self, k: int):
        run, ctx, env = self.run_, self.run_.ctx, self.run_.env
        clock = run.trainer_clock
        if not ctx.sched.in_flight_weight_updates:
            run.paused = True
            while run.generating:
                yield run.drained
            clock.idle("long_tail", env.now, k, label="refit waits for in-flight generation")
        t = env.now
        for inst in run.nemo_instances:
            inst.take_update(t, k + 1, run.sync_s, k)
        clock.busy("sync", t + run.sync_s, k, label="weight_sync", cause="weight_sync")
        yield env.timeout(run.sync_s)
        ctx.add_stage_time("weight_sync", run.sync_s)
        ctx.iterations[-1]["end"] = env.now
        run.paused = False
        run.gate.publish(k + 1)


class NemoRun(SplitPoolRun):
    def __init__(self, ctx: Context):
        super().__init__(ctx)
        check_cuttable(ctx, ctx.sched.in_flight_weight_updates, "schedule.in_flight_weight_updates")
        ctx.trainer.age_column = "first_version"
        ctx.trainer.round_batches = True   # step k trains round k (the module's doc)
        self.paused = False
        self.generating: set[int] = set()
        self.drained = self.env.event()
        self.nemo_instances: list[NemoInstance] = []

    def round_known(self, k: int) -> bool:
        """Every instance took its share of round k and no running plan still holds one of its
        sequences unstored (a plan's samples reach the store as they finish, streamed, or at its end)."""
        if not super().round_known(k):
            return False
        for inst in self.nemo_instances:
            plan = inst.plan
            if plan is not None and np.any((plan.seqs.round == k) & (plan.finish > plan.stored_through)):
                return False
        return True

    def note_idle(self) -> None:
        if not self.generating:
            event, self.drained = self.drained, self.env.event()
            event.succeed()

    def spawn_instances(self, round_: int, version: int, t: float | None, resume_s: float = 0.0) -> None:
        self.instances, self.instance_clocks, self.nemo_instances, self.streaming = [], [], [], []
        self.rollout_instances = self.nemo_instances   # the same list: their tails close at the run's end
        for i in range(self.n_inst):
            clock = clock_over(self.ctx.timeline, "rollout", self.roll[i * self.d:(i + 1) * self.d], t)
            self.ctx.clocks.extend(clock_parts(clock))
            self.ctx.start_clock(clock)
            self.instance_clocks.append(clock)
            inst = NemoInstance(self, i, clock, round_, version, resume_s)
            self.nemo_instances.append(inst)
            self.instances.append(self.env.process(inst.process()))

    def start_trainer(self, first_step: int = 0, resume_s: float = 0.0) -> None:
        self.trainer_proc = self.env.process(NemoTrainer(self, first_step, resume_s).process())


def run(ctx: Context) -> float:
    return NemoRun(ctx).run()


POLICY = register(SchedulePolicy(
    NemoAsyncSchedule, run, "NeMo RL async GRPO: split pools, trajectories up to max_trajectory_age_steps old, "
    "optional in-flight weight updates", supports_multi_turn=True))
