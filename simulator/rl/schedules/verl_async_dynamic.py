"""verl 0.9.1 fully_async's dynamic resource controller (kind ``verl-fully-async`` with
``request_routing`` and ``schedule.dynamic_resources``; verl's async_training.use_dynamic_resource_scheduling),
as its wheel runs it (read 2026-12-05: verl/experimental/fully_async_policy/fully_async_trainer.py
fit_step / _fit_update_weights / _get_samples_from_queue, fully_async_rollouter.py add_replicas /
remove_replicas / rebalance_requests / wait_for_enough_samples, dynamic_schedule/*.py).

- The trainer's devices hold rollout replicas beside the actor (one per instance), asleep from the
  start and outside the load balancer.
- At a weight sync the policy decides, before the standalone servers take the weights, whether to
  lend them (``should_activate_after_step``); if so, once the standalone sync is done, the weights go
  into them (the hybrid engine's reshard) and they wake, join the balancer (the Rollouter's in-flight
  cap grows to servers x concurrent_samples_per_replica), and with ``rebalance`` every active
  server's requests are aborted keeping their tokens and routed afresh to the least-loaded server.
- The next step, before it takes its samples, waits (polling the queue) until the message queue
  holds int(ratio x the samples a sync consumes), then takes them back: out of the balancer, their
  requests aborted keeping their tokens and retried on the standalone servers, the engines asleep.
- Policies (dynamic_schedule_policy): ``default`` lends while the queue's surplus over the expected
  pace is short of the ratio's share and the shortfall x the seconds a waited-for sample took beats the
  mean cost of the last switches (10 s before one is measured; 1000 s a sample before one is seen);
  after each sync its ratio rises by the share of samples the trainer waited for (clipped) or falls by
  a step. ``fixed_ratio`` lends on the shortfall alone, ratio fixed; ``static_fully_async`` never lends.
- Timing: the activation's end is the step's (verl's param_sync holds it); the Rollouter's count reset
  (reset_staleness) comes at the standalone sync's end here, after the activation in verl.
- The lent devices' time is theirs while lent (generate / idle), the trainer's otherwise.

The kind registers here, where every Rollouter of it is at hand.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ...errors import RlsimError
from ...scenario import DynamicResources, VerlFullyAsyncSchedule
from .context import Context
from .registry import SchedulePolicy, register
from .verl_async import VerlFullyAsyncRun
from .verl_async_requests import RequestRoutedRollouter, VerlFullyAsyncRequestRun
from .verl_hybrid import HybridFeedRollouter


class DefaultPolicy:
    """verl's "default" policy (DefaultDynamicSchedulePolicy)."""

    def __init__(self, config: DynamicResources):
        self.config = config
        self.ratio = config.deactivate_ratio
        self.switch_costs: deque[float] = deque(maxlen=config.switch_cost_window_size)
        self.sample_s = config.initial_sample_s     # seconds a waited-for sample took, last measured

    def wait_samples(self, per_sync: int) -> int:
        """Queued samples before the lent devices go back (deactivate_wait_samples)."""
        return int(per_sync * self.ratio)

    def shortfall(self, cycle: dict) -> float:
        """Samples short of the ratio's share above the expected pace (_deactivate_gap)."""
        return self.ratio * cycle["per_sync"] - (cycle["generated"] - cycle["expected"])

    def switch_cost(self) -> float:
        return float(np.mean(self.switch_costs)) if self.switch_costs else self.config.switch_cost_s

    def should_activate(self, cycle: dict) -> bool:
        """A shortfall, and its expected wait worth more than a switch pair (_has_positive_net_benefit)."""
        if self.shortfall(cycle) <= 0:
            return False
        wait_s, waited = sum(cycle["wait_s"]), sum(cycle["wait_samples"])
        if wait_s > 0 and waited > 0:
            self.sample_s = wait_s / waited
        cycle["benefit_s"], cycle["switch_cost_s"] = self.shortfall(cycle) * self.sample_s, self.switch_cost()
        return cycle["benefit_s"] > cycle["switch_cost_s"]

    def update(self, cycle: dict) -> None:
        """update_after_step: the cycle's switches into the window; the ratio up by the share waited
        for (clipped), or down a step (verl sets no floor)."""
        config = self.config
        overhead = cycle["activate_s"] + cycle["deactivate_s"]
        if overhead > 0:
            self.switch_costs.append(overhead)
        waited = sum(cycle["wait_samples"])
        if waited > 0:
            step_up = min(config.ratio_step_up_max, max(config.ratio_step_up_min, waited / cycle["per_sync"]))
            self.ratio = min(1.0, self.ratio + step_up)
        else:
            self.ratio -= config.ratio_step_down


class FixedRatioPolicy(DefaultPolicy):
    """verl's "fixed_ratio": lends on the shortfall alone; the ratio never changes."""

    def should_activate(self, cycle: dict) -> bool:
        return self.shortfall(cycle) > 0

    def update(self, cycle: dict) -> None:
        return None


class StaticPolicy(DefaultPolicy):
    """verl's "static_fully_async": never lends (the replicas stay asleep)."""

    def wait_samples(self, per_sync: int) -> int:
        return 0

    def should_activate(self, cycle: dict) -> bool:
        return False

    def update(self, cycle: dict) -> None:
        return None


POLICIES: dict[str, type[DefaultPolicy]] = {"default": DefaultPolicy, "fixed_ratio": FixedRatioPolicy,
                                            "static_fully_async": StaticPolicy}


class DynamicRoutedRollouter(HybridFeedRollouter, RequestRoutedRollouter):
    """verl 0.9.1's Rollouter with the trainer's replicas, in the balancer only while lent."""

    def __init__(self, run: VerlFullyAsyncRun):
        super().__init__(run)
        self.active[self.hybrid] = False      # asleep until the first activation

    def serving(self) -> int:
        return int(self.active.sum())

    def activate(self, now: float, rebalance: bool) -> None:
        """add_replicas after the wake; with ``rebalance`` (rebalance_requests) every active server's
        requests aborted and routed afresh, to the least-loaded server."""
        self._step(now)
        self.active[self.hybrid] = True
        self.wake_hybrid(now)
        if rebalance:
            self.abort([int(i) for i in np.flatnonzero(self.active)], now)
            self._fire("wake")


class VerlFullyAsyncDynamicRun(VerlFullyAsyncRequestRun):
    """fully_async whose trainer lends its devices to the Rollouter between steps (dynamic_resources)."""
    ROLLOUTER = DynamicRoutedRollouter

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.config = ctx.sched.dynamic_resources
        self.policy = POLICIES[self.config.policy](self.config)
        ranks = self.trainer_clock.ranks
        self.hybrid_sync_s = ctx.costs.weight_sync_s(ranks, ranks)
        ctx.note_memory(ctx.costs.inference_memory_bytes(ranks), "rollout")
        self.lent = False
        self.completed_steps, self.generated_at_reset = 1, 0   # the Rollouter's _completed_steps (from 1)
        self.cycle = self._new_cycle()
        self.cycles: list[dict] = []

    def _new_cycle(self) -> dict:
        return {"per_sync": self.per_version, "wait_s": [], "wait_samples": [], "activate_s": 0.0,
                "deactivate_s": 0.0, "wait_for_enough_samples_s": 0.0, "deactivate_ratio": self.policy.ratio,
                "lent": float(self.lent), "benefit_s": None, "switch_cost_s": None}

    def _before_update(self, k: int):
        """fit_step: lent devices come back once the queue holds the policy's share (polled)."""
        if not self.lent:
            return
        env, clock = self.env, self.trainer_clock
        threshold, t0 = self.policy.wait_samples(self.per_version), env.now
        while len(self.rollouter.queue) < threshold:
            yield env.timeout(self.config.poll_interval_s)
        self.cycle["wait_for_enough_samples_s"] += env.now - t0
        self.rollouter.reclaim(env.now, k)
        clock.cursor = max(clock.cursor, env.now)    # the lent span is the replicas' record
        self.cycle["deactivate_s"] += self._switch("train", k)
        yield env.timeout(max(0.0, clock.cursor - env.now))
        self.lent = False

    def _take(self, k: int):
        """_get_samples_from_queue: the samples not queued at its start are the ones waited for."""
        queued, t0 = len(self.rollouter.queue), self.env.now
        groups = yield from super()._take(k)
        self.cycle["wait_s"].append(self.env.now - t0)
        self.cycle["wait_samples"].append(max(0, self.per_update - queued))
        return groups

    def _sync(self, k: int):
        """_fit_update_weights: decide, sync the standalone servers, lend if decided, adapt."""
        cycle = self.cycle
        cycle.update(generated=self.rollouter.accepted, expected=self.per_version * self.completed_steps)
        activate = self.policy.should_activate(cycle)
        yield from super()._sync(k)
        if activate:
            yield from self._activate(k)
        self.policy.update(cycle)
        if self.rollouter.accepted > self.generated_at_reset:     # reset_staleness: a window that produced
            self.completed_steps += 1
        self.generated_at_reset = self.rollouter.accepted
        self.cycles.append(dict(cycle, activated=float(activate), wait_s=sum(cycle["wait_s"]),
                                wait_samples=float(sum(cycle["wait_samples"]))))
        self.cycle = self._new_cycle()

    def _activate(self, k: int):
        """sync_hybrid_weights and activate_hybrid_replicas: the weights in (the hybrid engine's
        reshard), the engines awake, then into the balancer."""
        env, clock = self.env, self.trainer_clock
        clock.busy("sync", clock.cursor + self.hybrid_sync_s, k, label="weights into the hybrid replicas",
                   cause="weight_sync")
        self.ctx.add_stage_time("weight_sync", self.hybrid_sync_s)
        self.cycle["activate_s"] += self.hybrid_sync_s + self._switch("rollout", k)
        yield env.timeout(max(0.0, clock.cursor - env.now))
        self.rollouter.activate(env.now, self.config.rebalance)
        self.lent = True

    def _report(self) -> dict:
        out = super()._report()
        for record, cycle in zip(out["per_version"], self.cycles, strict=True):
            record.update({key: cycle[key] for key in (
                "lent", "activated", "wait_for_enough_samples_s", "deactivate_s", "activate_s", "deactivate_ratio",
                "wait_s", "wait_samples", "generated", "expected", "benefit_s", "switch_cost_s")})
        out["timing_s"]["wait_for_enough_samples"] = float(np.mean([c["wait_for_enough_samples_s"] for c in self.cycles]))
        out["dynamic_resources"] = {"policy": self.config.policy, "activations": int(sum(c["activated"] for c in self.cycles)),
                                    "deactivate_ratio": self.policy.ratio}
        return out


def run(ctx: Context) -> float:
    """verl 0.9.1's Rollouter with request_routing (its trainer's devices lent with dynamic_resources),
    else verl 0.4-0.7's (verl_async.py)."""
    if ctx.sched.dynamic_resources is not None:
        _check_lendable(ctx)
        return VerlFullyAsyncDynamicRun(ctx).run()
    runner = VerlFullyAsyncRequestRun if ctx.sched.request_routing else VerlFullyAsyncRun
    return runner(ctx).run()


def _check_lendable(ctx: Context) -> None:
    """The trainer's devices must hold at least one rollout instance to lend."""
    train, per_instance = ctx.pools[VerlFullyAsyncRun.TRAIN_POOL].count, ctx.costs.instance_devices
    if train < per_instance:
        raise RlsimError(f"the trainer's {train} devices hold no rollout instance of {per_instance} devices to lend",
                         field="schedule.dynamic_resources", fix="give the training pool at least one rollout "
                         "instance's devices, or remove schedule.dynamic_resources")


POLICY = register(SchedulePolicy(
    VerlFullyAsyncSchedule, run, "verl fully_async_policy: Rollouter and Trainer joined by a message queue, "
    "a per-version prompt quota (staleness_threshold), partial rollouts cancelled at a sync",
    supports_partial_rollout=True, partial_rollout_segments=False, supports_multi_turn=True, turns_on_servers=True))
