"""Colocated placement (RL Fusion / hybrid engine): the actor's devices time-share rollout and training.

Per iteration: switch to rollout (optimizer + gradients offloaded to host, KV cache allocated) ->
generate -> switch to training -> forward stages -> train -> weight sync (reshard from the training
to the inference layout). ``fuse: actor`` puts reference / reward / critic on a small aux pool;
``fuse: full`` runs them on the same cards, or with ``aux_devices: {reward: N}`` the reward model on
devices of its own, scored in the driver's turn before the log-prob passes (verl's reward_pool).

StaleSync on this placement (staleness >= 1, threshold f < 1): once B eligible samples exist
(the previous round's tail plus a share f of this round), the still-running sequences are
interrupted and consolidated onto the fewest rollout instances that hold them (resumed with a
re-prefill of their context), the other devices switch to training on the ready samples, and the
tail samples join the next batch with staleness 1. Both groups meet again before the next rollout.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy

from ...llm.train_layout import TrainLayout
from ...scenario import ColocatedSchedule
from ..timeline import Clock, GroupClock, MultiClock
from . import failures as fl
from .batches import GenPlan, SeqBatch
from .context import Context
from .registry import SchedulePolicy, register
from .staleness import TIME_TOL_S, ceil_count
from .training import skipped_forwards


class ColocatedRun:
    """One colocated run: the actor clock (all its devices), the optional aux clock, the sequences
    each instance carries into the next round and the weights version they generate with."""

    def __init__(self, ctx: Context):
        self.ctx, self.env = ctx, ctx.env
        actor = ctx.pools["actor"]
        aux_name = next((name for name in ("aux", "aux-reward") if name in ctx.pools), None)
        aux_pool = ctx.pools[aux_name] if aux_name else None
        self.d = ctx.costs.instance_devices
        self.n_inst, self.n_actor = actor.count // self.d, actor.count
        self.actor: Clock = GroupClock(ctx.timeline, "actor", actor.start, actor.count)
        self.aux = GroupClock(ctx.timeline, aux_name, aux_pool.start, aux_pool.count) if aux_pool else None
        # as TrainStep.run takes it: fuse: actor's pool runs every aux role beside the actor's passes;
        # verl's reward pool the reward model alone, in the driver's turn (before the log-prob passes)
        self.aux_in_turn = aux_name == "aux-reward"
        self.aux_roles: Clock | dict[str, Clock] | None = {"reward": self.aux} if self.aux_in_turn else self.aux
        self.parts: tuple[int, list] | None = None    # StaleSync's trainers and tail group while apart
        # devices a StaleSync step left generating its tail: they never switched to training
        self.stayed_in_rollout = 0
        ctx.clocks += [self.actor] + ([self.aux] if self.aux else [])
        ctx.start_clock(self.actor)
        if self.aux:
            ctx.start_clock(self.aux)
        self.carries = [SeqBatch.empty() for _ in range(self.n_inst)]
        self.version = 0
        self.split_allowed = ctx.staleness >= 1 and ctx.threshold < 1
        ctx.note_memory(ctx.costs.inference_memory_bytes(actor.ranks), "rollout")
        self.alive = list(actor.ranks)
        self.events = fl.resolve_events(ctx, self.alive, f"the actor pool (ranks {self.alive[0]}-{self.alive[-1]})")

    def run(self) -> float:
        # the sequences carried at the end (a length budget's, StaleSync's tail) are in flight
        self.ctx.in_flight_at = lambda t: [(carry, carry.done_len) for carry in self.carries]
        self.env.run(until=self.env.process(self._main()))
        return self.env.now

    # ---- one step -----------------------------------------------------------------------------
    def _step(self, k: int):
        ctx, env = self.ctx, self.env
        self._switch_to_rollout(k)
        if self.aux:
            self.aux.idle("dependency", self.actor.cursor, k)
        yield env.timeout(max(0.0, self.actor.cursor - env.now))
        t0 = env.now
        ranks = self.actor.ranks
        sub_rounds = len(ctx.draws.sub_rounds(k))
        if not self.split_allowed and sub_rounds > 1:
            yield from self._dynamic_sampling_step(k, t0)
        else:
            if sub_rounds > 1:   # StaleSync: the leading generation batches run whole; the last may be cut
                t0, batches = self._leading_sub_rounds(k, t0)
            else:
                batches = [SeqBatch.concat(carry, ctx.draws.share(k, i, self.n_inst))
                           for i, carry in enumerate(self.carries)]
            plans = ctx.gen.plan_many(batches, t0, self.version, self._instances(ranks))
            gen_end = t0 + max(p.end_s for p in plans)
            t_split, n_train = split_time(ctx, k, plans, self.n_actor) if self.split_allowed else (math.inf, 0)
            if t_split < gen_end - TIME_TOL_S:
                yield from self._stalesync_step(k, plans, t_split, n_train)
            else:
                self._note_no_room_beside_the_tail()
                yield from self._sync_step(k, plans, t0)
        if self.aux:
            self.aux.idle("dependency", env.now, k)
        self.version = k + 1
        ctx.iterations[-1]["end"] = env.now

    def _note_no_room_beside_the_tail(self) -> None:
        """A StaleSync step that ran synchronous because no whole training group fits beside even
        the smallest tail (one instance): said in the summary (stalesync_no_room: a layout whose pool
        unit spans the pool made StaleSync a synchronous schedule with nothing said; a user trial)."""
        ctx = self.ctx
        if not self.split_allowed or _train_devices_beside(ctx, 1, self.n_actor) > 0:
            return
        said = ctx.extra.setdefault("stalesync_no_room", {"steps": 0, "pool_devices": self.n_actor,
                                                          "train_group_devices": int(ctx.costs.train_pool_unit)})
        said["steps"] += 1

    def _sync_step(self, k: int, plans: list[GenPlan], t0: float):
        """The whole round on every instance, then training on every device."""
        results = self.ctx.gen.commit_many(plans)
        self.carries = [r[1] for r in results]
        ends = np.array([r[0] for r in results])
        round_end = float(ends.max())
        self._record_round(self.actor, ends, t0, round_end, k)
        round_end = self._segments_until_batch(k, round_end)
        self.ctx.add_stage_time("generate", round_end - t0)
        yield from self._train_and_sync(k, self.actor, self.actor.ranks)

    def _dynamic_sampling_step(self, k: int, t0: float):
        """DAPO dynamic sampling on a synchronous step: each sub-round of gen_prompts is generated,
        scored and filtered before the next starts (frameworks.md: regenerate "if fewer than the train
        batch survive"; verl's DAPO trainer and NeMo RL loop over generation batches), so every
        sub-round pays its own long tail; between two, the engine stays up or sleeps and wakes, re-synced
        or not (schedule.between_gen_batches); then training on every device."""
        ends, cycle_s, _ = self._generate_sub_rounds(k, t0, self.ctx.draws.sub_round_shares(k, self.n_inst))
        end = self._segments_until_batch(k, float(ends.max()))   # a partial rollout's kept groups finish
        self.ctx.add_stage_time("generate", end - t0 - cycle_s)
        yield from self._train_and_sync(k, self.actor, self.actor.ranks)

    def _leading_sub_rounds(self, k: int, t0: float) -> tuple[float, list[SeqBatch]]:
        """StaleSync with dynamic sampling: every generation batch but the last runs whole, as on a
        synchronous step (the filter needs each one scored before it knows that another is needed);
        the last one, whose kept groups complete the batch, is the round StaleSync may cut. Returns
        when the last batch starts (its predecessor generated and scored, the engine cycled if
        between_gen_batches says so) and its per-instance shares."""
        ctx = self.ctx
        shares = ctx.draws.sub_round_shares(k, self.n_inst)
        ends, cycle_s, scored = self._generate_sub_rounds(k, t0, shares[:-1])
        lead_end = float(ends.max())
        ctx.add_stage_time("generate", lead_end - t0 - cycle_s)
        self.actor.idle("dependency", scored, k, label="reward")   # the filter waits for the rewards
        if ctx.sched.between_gen_batches != "stay":
            self._between_gen_batches(k)
        return self.actor.cursor, [SeqBatch.concat(carry, seqs) for carry, seqs in zip(self.carries, shares[-1],
                                                                                        strict=True)]

    def _generate_sub_rounds(self, k: int, t0: float,
                             shares: list[list[SeqBatch]]) -> tuple[np.ndarray, float, float]:
        """Generate the sub-rounds ``shares`` (each a share per instance) one after another from t0,
        each once the one before is generated and scored, the engine cycled between two unless it
        stays up; each sub-round recorded on its own (an engine that stays up idles through the
        others' tail and the rewards' wait as well). Returns the last one's per-instance ends,
        the seconds spent between sub-rounds (the rewards' wait and the engine's cycle: not generation)
        and when the last one is scored (a next one could start)."""
        ctx, ranks = self.ctx, self.actor.ranks
        cycles = ctx.sched.between_gen_batches != "stay"
        start, ends, cycle_s = t0, np.full(self.n_inst, t0), 0.0
        for j, shares_j in enumerate(shares):
            first_row = ctx.store.n
            # a partial rollout's carried sequences resume at the engine's next generation call
            batches = [SeqBatch.concat(carry, seqs) for carry, seqs in zip(self.carries, shares_j, strict=True)]
            if j:
                waited = max(0.0, start - self.actor.cursor)
                self.actor.idle("dependency", start, k, label="reward")   # the filter waits for the rewards
                # neither the wait nor the cycle is generation (verl: timing_s/reward)
                cycle_s += waited + (self._between_gen_batches(k) if cycles else 0.0)
                start = self.actor.cursor
            results = ctx.gen.commit_many(ctx.gen.plan_many(batches, start, self.version, self._instances(ranks)))
            self.carries = [r[1] for r in results]
            ends = np.array([r[0] for r in results])
            self._record_round(self.actor, ends, start, float(ends.max()), k)
            # the filter needs the whole sub-round scored: the next starts once its rewards are in
            ready = ctx.store.at("ready", np.arange(first_row, ctx.store.n))
            start = max(float(ends.max()), float(ready.max()) if len(ready) else 0.0)
        return ends, cycle_s, start

    def _between_gen_batches(self, k: int) -> float:
        """The engine put to sleep after a generation batch and woken before the next (``sleep``), with
        the weights re-synced into it too (``reshard``): recorded on the actor clock; its seconds."""
        ctx, clock = self.ctx, self.actor
        cost = ctx.costs.engine_cycle(clock.ranks)
        clock.busy("switch", clock.cursor + cost.time_s, k, label="between generation batches", cause="switch")
        ctx.add_switch_bytes(cost.bytes_moved, clock.rank_count)
        ctx.add_switch_parts("between", cost.parts_s)
        ctx.add_stage_time("switch_between_batches", cost.time_s)
        spent = cost.time_s
        if ctx.sched.between_gen_batches == "reshard":
            sync_s = ctx.costs.weight_sync_s(clock.ranks, clock.ranks)
            clock.busy("sync", clock.cursor + sync_s, k, label="reshard before a generation batch", cause="weight_sync")
            ctx.add_stage_time("weight_sync", sync_s)
            spent += sync_s
        return spent

    def _segments_until_batch(self, k: int, t: float) -> float:
        """Partial rollout: while the round's length budget has left fewer than a batch of eligible
        samples, the carried sequences generate their next segment (same weights, from ``t``), as a
        partial-rollout engine keeps decoding until the trainer's batch is full (Kimi k1.5, arXiv
        2501.12599 sec. 2.6). Each pass advances every sequence by the budget, and the sequences of
        round k generate with version k, so the loop ends. Returns when the batch is ready."""
        ctx, ranks = self.ctx, self.actor.ranks
        while math.isinf(ctx.trainer.ready_time(k, True)[0]) and any(len(c) for c in self.carries):
            plans = ctx.gen.plan_many(self.carries, t, self.version, self._instances(ranks))
            results = ctx.gen.commit_many(plans)
            self.carries = [r[1] for r in results]
            ends = np.array([max(r[0], t) for r in results])
            end = float(ends.max())
            self._record_round(self.actor, ends, t, end, k)
            t = end
        return t

    def _stalesync_step(self, k: int, plans: list[GenPlan], t_split: float, n_train: int):
        """Cut the round at t_split: the tail moves onto the fewest instances, the other ``n_train``
        devices (train_devices at t_split) train."""
        ctx, env, d = self.ctx, self.env, self.d
        t0 = plans[0].t0
        results = ctx.gen.commit_many(plans, stop_s=t_split - t0)
        tail = SeqBatch.merge([r[1] for r in results])
        ends = np.array([r[0] for r in results])
        self._record_round(self.actor, ends, t0, t_split, k)
        ctx.add_stage_time("generate", t_split - t0)
        trainers, tail_clock = self.actor.split([n_train, self.n_actor - n_train])
        self.parts = (k, [trainers, tail_clock])     # recording apart until the barrier (a failure closes them)
        yield env.timeout(t_split - env.now)
        # tail: consolidated onto the tail group's instances, same weights, context re-prefilled
        tail_inst = tail_clock.rank_count // d
        t_ends = []
        carries = [SeqBatch.empty() for _ in range(self.n_inst)]
        parts = tail.deal(tail_inst) if tail_inst else []
        tail_plans = ctx.gen.plan_many(parts, t_split, self.version, self._instances(tail_clock.ranks)[:len(parts)])
        for j, (end, carry, _) in enumerate(ctx.gen.commit_many(tail_plans)):
            carries[j] = carry
            t_ends.append(end)
        self.carries = carries
        tail_end = max(t_ends) if t_ends else t_split
        tail_clock.per_instance("generate", np.array(t_ends) - t_split, tail_end, d, k, "long_tail", label="tail")
        ctx.add_stage_time("tail_generate", tail_end - t_split)
        # the rest train on the ready samples; the reshard reaches the tail devices once their tail is done
        yield from self._train_and_sync(k, trainers, self.actor.ranks, wait_ready=True,
                                        receivers=(tail_clock, tail_end))
        barrier = env.now
        self.actor.cursor = barrier
        self.parts = None
        self.stayed_in_rollout = tail_clock.rank_count

    def _instances(self, ranks) -> list:
        """The rank slices of the rollout instances on ``ranks`` (D devices each)."""
        d = self.d
        return [ranks[i * d:(i + 1) * d] for i in range(len(ranks) // d)]

    def _switch_to_rollout(self, k: int) -> None:
        """The step's switch to rollout: the whole pool, or after a StaleSync step only its trainers
        (the devices that generated the tail never left rollout: they wait for the others)."""
        stayed, self.stayed_in_rollout = self.stayed_in_rollout, 0
        if not stayed:
            self._switch(self.actor, "rollout", k)
            return
        trainers, tail = self.actor.split([self.n_actor - stayed, stayed])
        self._switch(trainers, "rollout", k, pool=self.actor)
        tail.idle("dependency", trainers.cursor, k, label="stayed in rollout")
        self.actor.cursor = trainers.cursor

    def _switch(self, clock: Clock, to_phase: str, k: int, pool: Clock | None = None) -> float:
        """``clock`` switched to ``to_phase``; ``pool``: the pool's switch (priced on its ranks, as
        before StaleSync's split) that only ``clock``'s devices make."""
        cost = self.ctx.costs.switch(to_phase, (pool or clock).ranks)
        clock.busy("switch", clock.cursor + cost.time_s, k, label=f"to {to_phase}", cause="switch")
        self.ctx.add_switch_bytes(cost.bytes_moved, clock.rank_count)
        if clock is self.actor or pool is not None:   # the whole pool's switch (not colocated StaleSync's trainers alone)
            self.ctx.add_switch_parts(to_phase, cost.parts_s)
        self.ctx.add_stage_time(f"switch_to_{to_phase}", cost.time_s)
        return cost.time_s

    def _record_round(self, clock: Clock, ends: np.ndarray, t0: float, until: float, k: int) -> None:
        clock.per_instance("generate", np.asarray(ends) - t0, until, self.d, k, "long_tail", label=f"round {k}")

    def _train_and_sync(self, k: int, clock: Clock, sync_to, *, wait_ready: bool = False,
                        receivers: tuple[Clock, float] | None = None):
        """The training half of a colocated step on ``clock``: wait for the batch's rewards
        (``dependency``), drop stale samples, switch to training, train, reshard the weights to the
        inference layout on ``sync_to``. ``wait_ready``: the StaleSync step advances simulated time
        to the batch's ready time before switching (its process is still at the round start).
        ``receivers``: StaleSync's tail devices (their clock, the end of their tail): part of
        ``sync_to``, they take the new weights once their tail, generated with the old ones, is
        done, so the one reshard starts when both sides are free (sync on every rank)."""
        ctx, env, aux = self.ctx, self.env, self.aux
        # the batch as of when ``clock``'s devices stop generating: every sample ready by then may join it,
        # and the step waits for the rewards of those that the next step may no longer take (at a
        # bound of 0 the whole round's: StaleSync is then the synchronous step, which waits for them)
        t_ready, ids = ctx.trainer.ready_time(k, True, starts_at=clock.cursor, keep_within_bound=True)
        if math.isinf(t_ready):
            raise AssertionError("colocated round produced fewer samples than the batch")
        # reward_during_forwards: switch once generation is done, the rewards gathered before the update
        rewards_at = t_ready if ctx.sched.reward_during_forwards else None
        t_go = float(ctx.store.at("finish", ids).max()) if rewards_at is not None else t_ready
        clock.idle("dependency", t_go, k, label="reward")
        if wait_ready:
            yield env.timeout(max(0.0, t_go - env.now))
        ctx.trainer.drop_stale(k)
        self._switch(clock, "train", k)
        yield env.timeout(max(0.0, clock.cursor - env.now))   # the cursor may trail now by a rounding
        if aux:
            aux.idle("dependency", env.now, k)
        yield from ctx.trainer.run(k, ids, clock, self.aux_roles, rewards_at=rewards_at,
                                   skip=skipped_forwards(ctx.sched), aux_in_turn=self.aux_in_turn)
        sync_s = ctx.costs.weight_sync_s(clock.ranks, sync_to)
        start = env.now
        if receivers is not None:
            tail, tail_end = receivers
            start = max(start, tail_end)
            clock.idle("long_tail", start, k)
            tail.idle("dependency", start, k)
            tail.busy("sync", start + sync_s, k, label="reshard", cause="weight_sync")
        clock.busy("sync", start + sync_s, k, label="reshard", cause="weight_sync")
        ctx.add_stage_time("weight_sync", sync_s)
        if start > env.now:
            yield env.timeout(start - env.now)
        yield env.timeout(sync_s)

    # ---- the run and its failures -------------------------------------------------------------
    def _guarded(self, k: int):
        try:
            yield from self._step(k)
        except simpy.Interrupt:
            return False
        return True

    def _main(self):
        ctx, env = self.ctx, self.env
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        rec = ctx.sched.recovery
        k, ckpt = 0, None
        while k < ctx.scenario.iterations:
            proc = env.process(self._guarded(k))
            if not self.events:
                yield proc
                k += 1
                continue
            # StaleSync steps consume and drop samples of earlier rounds: keep a copy of the store
            snap = fl.snapshot(ctx, k, (self.carries, self.version), store=ctx.staleness > 0)
            if ckpt is None or (rec.lose_to == "checkpoint" and k % rec.checkpoint_every_steps == 0
                                and k > ckpt.iteration):
                ckpt = snap
            yield proc | env.timeout(max(0.0, self.events[0][0] - env.now))
            if proc.triggered:
                k += 1
                continue
            proc.interrupt("failure")
            yield proc
            at_s, spec, failed = self.events.pop(0)
            target = ckpt if rec.lose_to == "checkpoint" else snap
            yield from self._fail(spec, failed, target, at_s, k)
            k = target.iteration

    def _usable_devices(self, n: int, layout: dict[str, Any] | None = None) -> int:
        """Whole training replicas that are also whole rollout instances, of ``layout`` (a
        candidate's mapping; None: the re-planned layout)."""
        pool_unit = self.ctx.costs.train_pool_unit if layout is None else \
            TrainLayout.from_mapping(dict(layout), source=self.ctx.scenario.source).pool_unit
        unit = math.lcm(self.d, pool_unit)
        return (n // unit) * unit

    def _fail(self, spec: str, failed: set[int], target: fl.Snapshot, at_s: float, k_now: int):
        """Roll back to ``target``, drop the failed devices, re-plan and restart on the survivors.
        ``at_s``: when it was due; a failure due inside an earlier one's recovery is taken at the
        recovery's end (a recovery is not itself interrupted), which the record says. ``k_now``: the
        step the failure interrupted."""
        ctx, env = self.ctx, self.env
        t_f = env.now
        if self.parts is not None:   # a group that waits (the tail for the trainers) records its wait at its end:
            k, parts = self.parts    # up to the failure, so that roll_back makes it lost and no time goes unrecorded
            for part in parts:
                if part.cursor < t_f:
                    part.idle("dependency", t_f, k)
            self.parts = None
        if self.aux is not None and self.aux.cursor < t_f:   # the aux pool's wait for the batch, likewise
            self.aux.idle("dependency", t_f, k_now)
        lost_s = fl.roll_back(ctx, target, t_f)
        self.carries, self.version = target.extra
        self.stayed_in_rollout = 0     # the survivors restart their engines: all of them switch
        out, use = fl.replan_training(ctx, self.alive, failed, self._usable_devices,
                                      "whole training replica and rollout instance", spec)
        fl.mark_out(ctx, "actor", [r for r in self.alive if r not in use], failed, t_f)
        for clock in (self.actor.clocks if isinstance(self.actor, MultiClock) else [self.actor]):
            ctx.clocks.remove(clock)
        self.alive, self.n_actor, self.n_inst = list(use), len(use), len(use) // self.d
        self.actor = fl.survivor_clock(ctx, "actor", self.alive, t_f)
        for clock in [self.actor] + ([self.aux] if self.aux else []):
            clock.cursor = t_f
            clock.busy("replan", t_f + out.planning_cost_s, target.iteration, label=f"failure of {spec}",
                       cause="failure")
            clock.busy("restart", clock.cursor + ctx.sched.recovery.restart_s, target.iteration, label="restart",
                       cause="failure")
        ctx.note_memory(ctx.costs.inference_memory_bytes(self.actor.ranks), "rollout")
        self.carries = fl.redistribute(self.carries, self.n_inst)
        ctx.failures.append({"at_s": t_f, "fail": spec, "failed_ranks": sorted(failed & set(range(ctx.n_devices))),
                             "iteration": target.iteration, "lost_s": lost_s,
                             "replan_s": out.planning_cost_s, "restart_s": ctx.sched.recovery.restart_s,
                             "devices_after": self.n_actor, "rollout_instances_after": self.n_inst,
                             "train_layout_after": ctx.costs.train_layout_of(self.actor.ranks),
                             **({"due_s": at_s} if t_f > at_s + 1e-9 else {})})
        yield env.timeout(max(0.0, self.actor.cursor - env.now))


def run(ctx: Context) -> float:
    return ColocatedRun(ctx).run()


def split_time(ctx: Context, k: int, plans: list[GenPlan], pool: int) -> tuple[float, int]:
    """When the tail consolidates, and train_devices then: the earliest time at which (a) B eligible
    samples exist (leftovers from earlier rounds plus this round's completions, at least a share f
    from this round) and (b) the still-running sequences fit on at most ``consolidate_share`` of the
    instances and free at least one whole training group. Before (b) the instances are still needed
    (a KV- and batch-bound rollout keeps them full until the queue drains); (b)'s share keeps the
    trainers a large enough pool that training a whole batch on them does not outlast the tail by
    far. Samples of round k already generated (dynamic sampling's earlier generation batches: the
    plans are the last one's) count toward both. (inf, 0) when there is no such time."""
    trainer = ctx.trainer
    own = ceil_count(ctx.threshold * ctx.batch_samples) - trainer.eligible_leftover(k, of_round=True)
    need = max(own, trainer.min_batch - trainer.eligible_leftover(k))
    live = [p for p in plans if len(p.seqs)]
    if ctx.sched.overprovision > 0 or not live:
        return math.inf, 0
    need = max(need, 1)   # the earliest candidate is the first completion
    joined = RoundArrays(live)
    by_finish = joined.finish[joined.by_finish]   # every sorted view below is a masked slice of it
    complete = (joined.seg >= joined.remaining) & (joined.drop_reason == "")
    times = by_finish[complete[joined.by_finish]]
    if len(times) < need:
        return math.inf, 0
    # completions at the split are committed at stop_s; the reward latency is added on top later
    t_need = float(times[need - 1]) + TIME_TOL_S
    # ascending from t_need: adding the tolerance keeps the order and keeps them above t_need
    cand = _sorted_unique(np.concatenate([[t_need], by_finish[by_finish > t_need] + TIME_TOL_S]))
    max_tail = max(1, math.floor(ctx.sched.consolidate_share * (pool // ctx.costs.instance_devices)))
    tail = TailIndex(plans, joined)
    lo, hi, n_train = 0, len(cand), 0
    while lo < hi:     # free training devices never decrease as sequences finish: bisect
        mid = (lo + hi) // 2
        n_tail = tail_instances(ctx, plans, float(cand[mid]), tail)
        free = _train_devices_beside(ctx, n_tail, pool) if n_tail <= max_tail else 0
        if free > 0:
            hi, n_train = mid, free
        else:
            lo = mid + 1
    return (float(cand[lo]), n_train) if lo < len(cand) else (math.inf, 0)


def _sorted_unique(ascending: np.ndarray) -> np.ndarray:
    """np.unique of an array already in ascending order (no NaN): its runs of equal values once."""
    return ascending[np.concatenate([[True], ascending[1:] != ascending[:-1]])]


class RoundArrays:
    """The non-empty plans' per-sequence arrays joined end to end (plan order): segment and
    remaining tokens, absolute finish times (each plan's t0 + finish), drop reasons, the KV
    tokens of each full context (prompt + response), and the order of the finish times (one sort
    serves split_time's sorted views and the TailIndex: a sorted subset is a masked sorted slice)."""

    def __init__(self, live: list[GenPlan]) -> None:
        sizes = [len(p.seqs) for p in live]
        self.seg = np.concatenate([p.seg for p in live])
        self.remaining = np.concatenate([p.remaining for p in live])
        self.finish = np.repeat([p.t0 for p in live], sizes) + np.concatenate([p.finish for p in live])
        self.drop_reason = np.concatenate([p.seqs.drop_reason for p in live])
        self.kv = (np.concatenate([p.seqs.prompt_len for p in live])
                   + np.concatenate([p.seqs.target_len for p in live])).astype(np.int64)
        self.by_finish = np.argsort(self.finish)   # ties in any order: each view is of values


class TailIndex:
    """The plans' sequences ordered by finish time, so that the sequences still running at any time
    (their count and KV tokens) are a binary search and a suffix sum away; a sequence cut by the
    length budget runs on at every time. Token counts are integers: exact in any order.
    ``joined``: the live plans' RoundArrays when the caller has them."""

    def __init__(self, plans: list[GenPlan], joined: RoundArrays | None = None) -> None:
        live = [p for p in plans if len(p.seqs)]
        if not live:
            self.n_always, self.kv_always = 0, 0
            self.finish, self.kv_after = np.zeros(0), np.zeros(1, np.int64)
            return
        joined = joined or RoundArrays(live)
        always, fin, kv = joined.seg < joined.remaining, joined.finish, joined.kv
        self.n_always, self.kv_always = int(always.sum()), int(kv[always].sum())
        order = joined.by_finish[~always[joined.by_finish]]   # ties in any order: the sums are of integers
        self.finish = fin[order]
        self.kv_after = np.concatenate([np.cumsum(kv[order][::-1])[::-1], [0]])   # suffix sums

    def running(self, t: float) -> tuple[int, int]:
        """(sequences, KV tokens of their full contexts) still running at ``t``."""
        first = int(np.searchsorted(self.finish, t, side="right"))    # finish > t from here on
        return self.n_always + len(self.finish) - first, self.kv_always + int(self.kv_after[first])


def tail_instances(ctx: Context, plans: list[GenPlan], t_split: float, tail: TailIndex | None = None) -> int:
    """Fewest rollout instances that hold the sequences still running at ``t_split``: bounded by
    the running-sequence slots and by the KV cache (each needs its full context by the end, and its
    windows' and states' pages beside it).
    ``tail``: the plans' TailIndex, when it is asked at many times."""
    if tail is not None:
        n_tail, kv_tokens = tail.running(t_split)
        kv = float(kv_tokens)
    else:   # one question: one pass over the plans
        n_tail, kv = 0, 0.0
        for p in plans:
            if not len(p.seqs):
                continue
            running = (p.t0 + p.finish > t_split) | (p.seg < p.remaining)
            n_tail += int(np.sum(running))
            kv += float(np.sum((p.seqs.prompt_len + p.seqs.target_len)[running]))
    if n_tail == 0:
        return 0
    by_seqs = math.ceil(n_tail / max(1, ctx.costs.instance_max_seqs))
    by_kv = math.ceil((kv + n_tail * ctx.costs.instance_seq_kv_tokens) / ctx.costs.instance_kv_tokens)
    return max(1, by_seqs, by_kv)


def train_devices(ctx: Context, plans: list[GenPlan], t_split: float, pool_devices: int,
                  tail: TailIndex | None = None) -> int:
    """Devices left for training once the tail sits on the fewest instances that hold it,
    rounded down to whole training replicas (and whole EP groups)."""
    return _train_devices_beside(ctx, tail_instances(ctx, plans, t_split, tail), pool_devices)


def _train_devices_beside(ctx: Context, n_tail_instances: int, pool_devices: int) -> int:
    """train_devices when the tail needs ``n_tail_instances`` instances (at least one is kept)."""
    free = pool_devices - max(1, n_tail_instances) * ctx.costs.instance_devices
    return ctx.costs.train_devices_at_most(free)



POLICY = register(SchedulePolicy(
    ColocatedSchedule, run, "RL Fusion / hybrid engine: rollout and training time-share the actor's devices",
    supports_failures=lambda sched: True, supports_multi_turn=True))
