"""verl 0.9 separate_async with its hybrid replicas lent to generation (``schedule.hybrid_rollout``;
verl's trainer.v1.separate_async.hybrid_rollout.enable_switch), as verl 0.9.1 runs it
(verl/trainer/ppo/v1/trainer_separate_async.py, replay_buffer.py wait_for_sampleable, read 2026-12-05).

- The trainer's devices hold rollout replicas beside the actor (the hybrid engine), lent at the start
  (verl's ROLLOUT mode after init). A step computes its threshold, round(ratio x train_batch_size)
  groups, at least a local update's and at most the batch. If that many are sampleable the replicas
  are taken back at once; else the step's prompts go out and the trainer polls until they are
  (``switch_wait``), then takes them back (switch_to_trainer): out of the load balancer, their
  requests aborted keeping their tokens and sent again, routed afresh, to the standalone servers,
  the engines asleep.
- At a step's end (on_step_end) it decides whether to lend them for the next step: never after the
  last; only while fewer than the next threshold are sampleable; and only if the expected gain,
  remaining x seconds awaited per sample x (1 - 1 / scaling), scaling = (trainer + rollout devices)
  / rollout devices, beats the mean cost of the last switch_cost_window_size switches each way (with
  no estimate yet, it lends). Lending adds them to the balancer and clears its sticky sessions before
  the standalone sync, so the requests that sync aborts are routed afresh over every server, the
  asleep replicas queueing theirs; the replicas then take the new weights (the hybrid engine's
  reshard) and wake (switch_to_rollout).
- adaptive_switch_threshold: after switch_threshold_release_steps steps in a row whose sampling waited
  longer than a poll, the ratio rises by step_up (at most 1); after as many that did not, it falls by
  step_down (at least 1 / parameter_sync_step).
- The lent devices' time is theirs while lent (generate / idle), the trainer's otherwise.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from ...errors import RlsimError
from ...scenario import VerlSeparateAsyncSchedule
from ..timeline import GroupClock
from .areal import ArealRollouter
from .context import Context
from .registry import SchedulePolicy, register
from .verl_async import PromptGroup
from .verl_v1 import FeedRollouter, VerlSeparateAsyncRun, hand_over


class HybridFeedRollouter(FeedRollouter):
    """The standalone servers, then one per instance on the trainer's devices, routed to only while
    lent; while lent but asleep (the weights not in yet) a replica holds what it is sent."""

    def __init__(self, run: VerlSeparateAsyncRun):
        super().__init__(run)
        ctx, d = self.ctx, self.ctx.costs.instance_devices
        train = ctx.pools[run.TRAIN_POOL]
        count = train.count // d
        self.hybrid = list(range(len(self.servers), len(self.servers) + count))
        for i in range(count):
            ranks = train.ranks[i * d:(i + 1) * d]
            self.servers.append(ctx.costs.rollout_server(ranks))
            self.clocks.append(GroupClock(ctx.timeline, run.TRAIN_POOL, ranks[0], d, t0=ctx.start_s))
        self.inflight += [{} for _ in range(count)]
        self._next += [math.inf] * count
        self._busy += [False] * count
        self.active = np.ones(len(self.servers), bool)   # lent from the start
        self.asleep = False
        self.clear_sticky = False
        self.held: dict[int, list[tuple[PromptGroup, np.ndarray]]] = {}
        used = count * d
        self.spare = GroupClock(ctx.timeline, run.TRAIN_POOL, train.start + used, train.count - used,
                                t0=ctx.start_s) if used < train.count else None

    def _current_loads(self) -> np.ndarray:
        loads = super()._current_loads()
        for target, parts in self.held.items():
            loads[target] += sum(len(rows) for _, rows in parts)
        loads[~self.active] = np.inf
        return loads

    def _add(self, target: int, parts: list[tuple[PromptGroup, np.ndarray]], now: float) -> None:
        if self.asleep and target in self.hybrid:     # queued at the paused replica until it wakes
            self.held.setdefault(target, []).extend(parts)
            for group, _ in parts:
                self.inflight[target][group.index] = group
            return
        super()._add(target, parts, now)

    def reclaim(self, now: float, k: int) -> None:
        """switch_to_trainer: the replicas out of the balancer, their requests aborted keeping their
        tokens and queued to be routed afresh; their devices' record up to ``now``."""
        self._step(now)
        self.active[self.hybrid] = False
        self.abort(self.hybrid, now)
        hand_over(self, self.hybrid, now, k)
        self._fire("wake")

    def abort(self, servers: list[int], now: float) -> None:
        """The requests in flight on ``servers`` aborted keeping their tokens, each queued to be
        routed afresh (after the servers advanced to ``now``)."""
        n = self.ctx.workload.samples_per_prompt
        for i in servers:
            result = self.servers[i].interrupt(now)
            for done in result.finished:
                self._finished(i, int(done.seq_id), float(done.time_s))
            for part in result.partial:
                self.inflight[i][int(part.seq_id) // n].generated[int(part.seq_id) % n] = int(part.generated)
            for group in sorted(self.inflight[i].values(), key=lambda g: g.index):
                self._park(group, i)
            self.inflight[i].clear()
            self._touch(i, now)

    def _park(self, group: PromptGroup, server: int) -> None:
        """The group's unfinished requests on ``server``, to send again elsewhere."""
        where = self.request_server[group.index]
        rows = np.flatnonzero((where == server) & np.isnan(group.finish_s))
        where[rows] = -1
        group.running -= len(rows)
        group.pending_rows = rows if group.pending_rows is None else np.union1d(group.pending_rows, rows)
        if all(queued.index != group.index for queued in self.cancelled):
            self.cancelled.append(group)

    def open_to_requests(self) -> None:
        """Lending: into the balancer (asleep until their weights are in), sticky sessions cleared at
        the coming sync."""
        self.active[self.hybrid] = True
        self.asleep = self.clear_sticky = True

    def end_sync(self, version: int, now: float) -> None:
        if self.clear_sticky:          # the requests the sync aborted are routed afresh
            for group in self.cancelled:
                self.request_server[group.index][group.open] = -1
            self.clear_sticky = False
        super().end_sync(version, now)

    def wake_hybrid(self, now: float) -> None:
        """switch_to_rollout done: the replicas generate, what they were sent first."""
        self.asleep = False
        for clock in [self.clocks[i] for i in self.hybrid] + ([self.spare] if self.spare is not None else []):
            clock.cursor = now
        held, self.held = self.held, {}
        for target, parts in held.items():
            ArealRollouter._add(self, target, parts, now)
        self._fire("wake")


class VerlSeparateHybridRun(VerlSeparateAsyncRun):
    """separate_async whose trainer lends its devices to generation between steps (hybrid_rollout)."""
    ROLLOUTER = HybridFeedRollouter

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        config = self.sched.hybrid_rollout
        self.config, self.ratio, self.lent = config, config.switch_threshold_ratio, True
        self.idle_steps = self.calm_steps = 0
        self.wait_s = self.wait_samples = 0.0            # over the run: the steps that waited for samples
        self.to_rollout: deque[float] = deque(maxlen=config.switch_cost_window_size)
        self.to_trainer: deque[float] = deque(maxlen=config.switch_cost_window_size)
        ranks = self.trainer_clock.ranks
        self.scaling = (len(ranks) + ctx.pools["rollout"].count) / ctx.pools["rollout"].count
        self.hybrid_sync_s = ctx.costs.weight_sync_s(ranks, ranks)
        ctx.note_memory(ctx.costs.inference_memory_bytes(ranks), "rollout")
        self.step: dict[str, float | None] = {}
        self.versions_extra: list[dict[str, float | None]] = []

    def _threshold(self) -> int:
        """Sampleable groups before the replicas go back to the trainer, at least one local update's."""
        batch = self.per_version
        return min(max(round(self.ratio * batch), self.per_update), batch)

    def _prepare_step(self, k: int):
        """on_step_begin, then prepare_step: the replicas, lent, come back once the threshold is met."""
        self.step = {"wait_s": 0.0, "wait_samples": 0.0, "switch_wait_s": 0.0, "to_trainer_s": 0.0,
                     "to_rollout_s": 0.0, "threshold_ratio": self.ratio, "lent": float(self.lent)}
        threshold = self._threshold() if self.lent else 0
        if self.lent and self.buffer.sampleable_count(k) >= threshold:
            yield from self._reclaim(k)
        yield from super()._prepare_step(k)
        if self.lent:
            t_wait = self.env.now
            yield from self.buffer.wait_for_sampleable(k, threshold)
            self.step["switch_wait_s"] = self.env.now - t_wait
            yield from self._reclaim(k)

    def _reclaim(self, k: int):
        env, clock = self.env, self.trainer_clock
        self.rollouter.reclaim(env.now, k)
        clock.cursor = max(clock.cursor, env.now)    # the lent span is the replicas' record
        cost = self._switch("train", k)
        yield env.timeout(max(0.0, clock.cursor - env.now))
        self.to_trainer.append(cost)
        self.step["to_trainer_s"] += cost
        self.lent = False

    def _sample(self, k: int):
        """on_sample_begin / on_sample_end: the samples still missing, and the wait for them."""
        self.step["wait_samples"] += max(0, self.per_update - self.buffer.sampleable_count(k))
        t_wait = self.env.now
        groups = yield from super()._sample(k)
        self.step["wait_s"] += self.env.now - t_wait
        return groups

    def _end_step(self, k: int):
        """on_step_end: decide, sync the standalone servers, and lend the replicas if decided."""
        lend = self._decide(k)
        if lend:
            self.rollouter.open_to_requests()
        yield from self._sync(k)
        if lend:
            yield from self._lend(k)
        self.versions_extra.append(dict(self.step, lend_next=float(lend)))

    def _decide(self, k: int) -> bool:
        config, step = self.config, self.step
        had_idle = step["wait_s"] > self.sched.poll_interval_s
        if step["wait_samples"] > 0 and step["wait_s"] > 0:
            self.wait_s += step["wait_s"]
            self.wait_samples += step["wait_samples"]
        if config.adaptive_switch_threshold:
            self._adapt(had_idle)
        remaining = max(0, self._threshold() - self.buffer.sampleable_count(k + 1))
        benefit = remaining * self.wait_s / self.wait_samples * (1 - 1 / self.scaling) if self.wait_samples else None
        cost = (float(np.mean(self.to_rollout)) + float(np.mean(self.to_trainer))
                if self.to_rollout and self.to_trainer else None)
        step.update(remaining=float(remaining), benefit_s=benefit, switch_cost_s=cost)
        return (k + 1 < self.ctx.scenario.iterations and remaining > 0
                and (benefit is None or cost is None or benefit > cost))

    def _adapt(self, had_idle: bool) -> None:
        """_adapt_switch_threshold: up after release_steps idle steps in a row, down after as many calm."""
        config = self.config
        if had_idle:
            self.calm_steps, self.idle_steps = 0, min(self.idle_steps + 1, config.switch_threshold_release_steps)
            if self.idle_steps >= config.switch_threshold_release_steps:
                self.ratio = min(1.0, self.ratio + config.switch_threshold_step_up)
            return
        self.idle_steps, self.calm_steps = 0, min(self.calm_steps + 1, config.switch_threshold_release_steps)
        if self.calm_steps >= config.switch_threshold_release_steps:
            self.ratio = max(1.0 / self.sched.parameter_sync_step, self.ratio - config.switch_threshold_step_down)

    def _lend(self, k: int):
        """switch_to_rollout: the new weights into the replicas (the hybrid engine's reshard), then awake."""
        env, clock = self.env, self.trainer_clock
        clock.busy("sync", clock.cursor + self.hybrid_sync_s, k, label="weights into the hybrid replicas",
                   cause="weight_sync")
        self.ctx.add_stage_time("weight_sync", self.hybrid_sync_s)
        cost = self.hybrid_sync_s + self._switch("rollout", k)
        yield env.timeout(max(0.0, clock.cursor - env.now))
        self.rollouter.wake_hybrid(env.now)
        self.to_rollout.append(cost)
        self.step["to_rollout_s"] += cost
        self.lent = True

    def _report(self) -> dict:
        out = super()._report()
        for record, extra in zip(out["per_version"], self.versions_extra, strict=True):
            record.update(extra)
        out["hybrid_rollout"] = {"steps_lent": int(sum(e["lent"] for e in self.versions_extra)),
                                 "threshold_ratio": self.ratio,
                                 "switch_wait_s": float(np.mean([e["switch_wait_s"] for e in self.versions_extra]))
                                 if self.versions_extra else 0.0}
        return out


def run_separate(ctx: Context) -> float:
    """separate_async, its trainer's devices lent to generation with hybrid_rollout (verl_v1.py otherwise)."""
    if ctx.sched.hybrid_rollout is not None:
        _check_lendable(ctx)
    runner = VerlSeparateHybridRun if ctx.sched.hybrid_rollout is not None else VerlSeparateAsyncRun
    return runner(ctx).run()


def _check_lendable(ctx: Context) -> None:
    """The trainer's devices must hold at least one rollout instance to lend (verl's hybrid replicas run
    the rollout layout on the trainer's GPUs); with none, lending would only pay the switches."""
    train, per_instance = ctx.pools[VerlSeparateAsyncRun.TRAIN_POOL].count, ctx.costs.instance_devices
    if train < per_instance:
        raise RlsimError(f"the trainer's {train} devices hold no rollout instance of {per_instance} devices to lend",
                         source=ctx.scenario.source, field="schedule.hybrid_rollout",
                         fix="give the training pool at least one rollout instance's devices (a lower "
                             "schedule.rollout_devices or rollout_fraction), or remove schedule.hybrid_rollout")


SEPARATE = register(SchedulePolicy(
    VerlSeparateAsyncSchedule, run_separate, "verl 0.9 v1 separate_async: a rollout pool fed train_batch_size "
    "prompts a step, parameter_sync_step local updates per weight sync, in-flight requests aborted and resumed "
    "around it", partial_rollout_segments=False, supports_multi_turn=True, turns_on_servers=True))
