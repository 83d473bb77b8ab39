"""verl 0.9's v1 trainer in its two async modes (kinds ``verl-colocate-async`` and
``verl-separate-async``) and its sync mode (kind ``verl-sync``), as verl 0.9.1 runs them (its wheel,
read 2026-12-05: verl/trainer/ppo/v1/trainer_base.py, trainer_sync.py, trainer_colocate_async.py,
trainer_separate_async.py, replay_buffer.py, agent_loop_tq.py; verl/workers/rollout/router.py,
llm_server.py; verl/checkpoint_engine/base.py).

- Feed: the trainer submits ``num_warmup_batches`` x train_batch_size prompts before the first step
  and train_batch_size at the start of every step (prepare_step), one more for every group its replay
  buffer evicts. Every trajectory is its own request, routed to the server with the fewest requests
  in flight (GlobalRequestLoadBalancer; verl breaks ties at random, here the lowest index), and sent
  back to the same server after an abort (sticky sessions). No cap beyond the engine's own.
- A group (a prompt's n trajectories) is finished once all n are scored (the agent loop scores each
  trajectory as it ends). The replay buffer looks every ``poll_interval_s`` (2 s) for enough finished
  groups and takes the oldest by submission step. With ``max_off_policy_strategy`` drop it first
  evicts finished groups whose span (step - submission step + 1) passed ``max_off_policy_threshold``
  and submits as many new prompts; wait holds the sampling while an unfinished prompt has reached
  it. A group that dynamic sampling filters out (no signal) is evicted and replaced alike.
- colocate_async (one pool): generation runs until a batch of groups is finished; then every
  unfinished request is aborted keeping its tokens, the engines sleep (KV cache and weights freed),
  the actor computes its forwards and one update, the weights go back into the woken engines, and
  the aborted requests resume (their prompt + tokens re-prefilled) beside the next step's prompts.
- separate_async (split pools): the rollout pool never sleeps; the trainer runs
  ``parameter_sync_step`` local updates of train_batch_size / parameter_sync_step prompts (one
  optimizer step each), then a weight sync over the checkpoint engine that aborts the in-flight
  requests, frees the KV cache, sends the weights and resumes the requests re-prefilled.
- sync (one pool, verl's default mode): the step's train_batch_size prompts are submitted, the replay
  buffer waits (polling) until they are all finished, the engines sleep, the actor trains, and the woken
  engines take the new weights. With DAPO (algorithm.filter_groups) it refills while the rest generate:
  each filtered group adds two prompts of credit, sent as slots free up (at most
  ``max_inflight_gen_batches`` x train_batch_size prompts pending or generating); once enough groups
  are sampleable it sends no more, waits for every request in flight to finish (drain), takes the
  oldest batch and discards the surplus (ReplayBuffer.sample: "Sync remains bufferless").
- separate_async keeps Decoupled PPO's pi_old in host memory (old log-probs recomputed): one copy of
  the training weight shard out at the first local update of a step, three (save, restore pi_old,
  restore) at each later one, over the host link.
- separate_async's hybrid replicas on the trainer's devices, lent to generation between steps
  (hybrid_rollout.enable_switch): verl_hybrid.py, where the kind registers. Without it they are taken back at the first step's
  start, a moment after the warm-up reached them (their requests re-routed to the rollout pool with
  next to nothing generated: not modelled).
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import numpy as np

from ...errors import RlsimError
from ...scenario import VerlColocateAsyncSchedule, VerlSyncSchedule
from ..timeline import GroupClock
from .areal import ArealRollouter
from .context import Context
from .registry import SchedulePolicy, register
from .staleness import TIME_TOL_S
from .training import skipped_forwards
from .verl_async import PromptGroup, Rollouter, VerlFullyAsyncRun


class FeedRollouter(ArealRollouter):
    """The servers fed what the trainer submits, each request to the least-loaded server."""

    def __init__(self, run: VerlFullyAsyncRun):
        Rollouter.__init__(self, run)
        self.accepted = self.running = 0
        self.request_server: dict[int, np.ndarray] = {}
        self.submitted = 0             # prompts the trainer has submitted; started in order
        self.filtered = 0              # groups filtered out (no signal) since the trainer last looked
        self._loads = np.zeros(len(self.servers))

    def submit(self, prompts: int) -> None:
        self.submitted += prompts
        self._fire("wake")

    def capacity(self) -> int:
        return self.submitted - self.started

    def _admit(self, now: float) -> None:
        if self.cancelled or self.capacity() > 0:   # the servers' loads, read only when something goes out
            self._loads = self._current_loads()
            super()._admit(now)

    def _current_loads(self) -> np.ndarray:
        """Requests in flight per server, as the load balancer counts them."""
        return np.array([server.load for server in self.servers], float)

    def _place(self, group: PromptGroup, batches: dict[int, list[tuple[PromptGroup, np.ndarray]]]) -> None:
        """Each new request to the server with the fewest requests in flight; a resumed one where it
        ran, unless that server was taken away (-1: routed afresh)."""
        where = self.request_server.setdefault(group.index, np.full(len(group.seqs), -1))
        rows = group.open if group.pending_rows is None else group.pending_rows
        np.add.at(self._loads, where[rows[where[rows] >= 0]], 1)
        for row in rows[where[rows] < 0]:
            where[row] = int(np.argmin(self._loads))
            self._loads[where[row]] += 1
        group.running = len(rows) if group.pending_rows is None else group.running + len(rows)
        group.pending_rows = None
        group.versions.add(self.version)
        for target in np.unique(where[rows]):
            batches.setdefault(int(target), []).append((group, rows[where[rows] == target]))

    def _group_done(self, accepted: bool) -> None:
        super()._group_done(accepted)
        if not accepted:     # the buffer evicts it at its next look and submits another prompt
            self.filtered += 1
            self._fire("data")


class ColocatedFeedRollouter(FeedRollouter):
    """The servers on the actor's devices: their clocks record only while the engines generate."""
    POOL = "actor"

    def _own_clocks(self) -> None:
        """The actor clock records the devices between generation phases (hand_over / take_back);
        devices too few to form a server wait out each phase (``placement``)."""
        pool, used = self.ctx.pools[self.POOL], len(self.servers) * self.ctx.costs.instance_devices
        self.spare = GroupClock(self.ctx.timeline, self.POOL, pool.start + used, pool.count - used) \
            if used < pool.count else None

    def hand_over(self, now: float, k: int) -> None:
        hand_over(self, range(len(self.servers)), now, k)

    def take_back(self, now: float) -> None:
        for clock in self.clocks + ([self.spare] if self.spare is not None else []):
            clock.cursor = now


def hand_over(rollouter: FeedRollouter, servers: Iterable[int], now: float, k: int) -> None:
    """Generation on ``servers`` (devices shared with the trainer) stopped at ``now``: each one's record
    up to it (a server out of requests before then waited on the others' tail); devices too few to
    form a server wait it out (``placement``)."""
    for i in servers:
        clock = rollouter.clocks[i]
        if rollouter._busy[i]:
            clock.busy("generate", now, k, label=f"version {rollouter.version}")
            rollouter._busy[i] = False
        if clock.cursor < now:
            clock.idle("long_tail", now, k)
    if rollouter.spare is not None and rollouter.spare.cursor < now:
        rollouter.spare.idle("placement", now, k)


class ReplayBuffer:
    """verl's ReplayBufferAsync over the rollouter's finished groups: eviction, refill, sampling."""

    def __init__(self, run: VerlFullyAsyncRun, rollouter: FeedRollouter):
        self.ctx, self.env, self.rollouter = run.ctx, run.env, rollouter
        sched = run.sched
        self.poll_s, self.threshold = sched.poll_interval_s, sched.max_off_policy_threshold
        self.strategy = sched.max_off_policy_strategy if self.threshold is not None else None
        self.evicted_stale = 0

    def sample(self, k: int, count: int):
        """The ``count`` oldest sampleable groups at the first poll that finds enough (a simpy process
        body)."""
        ready = yield from self.wait_for_sampleable(k, count)
        return self._take(ready, count)

    def wait_for_sampleable(self, k: int, count: int):
        """Poll until ``count`` groups are sampleable (evicting and refilling meanwhile); the
        sampleable groups. Between two completions nothing changes, so it sleeps until the next
        completion or score and then to the poll at or after it."""
        rollouter, env = self.rollouter, self.env
        t0 = env.now
        while True:
            rollouter._step(env.now)
            self._evict(k)
            ready = [g for g in rollouter.queue if g.ready_s <= env.now + TIME_TOL_S]
            if len(ready) >= count and not self._held(k):
                return ready
            yield from self._wait(t0)

    def sampleable_count(self, k: int) -> int:
        """Finished groups step ``k`` may take (get_sampleable_count: those past the threshold under
        drop are not)."""
        self.rollouter._step(self.env.now)
        now = self.env.now + TIME_TOL_S
        return sum(1 for g in self.rollouter.queue if g.ready_s <= now
                   and not (self.strategy == "drop" and k - g.first_version + 1 > self.threshold))

    def _wait(self, t0: float):
        """Sleep until the next completion or score, then to the poll at or after it (polls every
        poll_s from ``t0``)."""
        rollouter, env = self.rollouter, self.env
        scoring = [g.ready_s for g in rollouter.queue if g.ready_s > env.now + TIME_TOL_S]
        events = [rollouter.data] + ([env.timeout(min(scoring) - env.now)] if scoring else [])
        yield env.any_of(events)
        polls = math.ceil((env.now - t0) / self.poll_s - 1e-9)
        yield env.timeout(max(0.0, t0 + polls * self.poll_s - env.now))

    def _take(self, ready: list[PromptGroup], count: int) -> list[PromptGroup]:
        """The ``count`` oldest of the ready groups (by submission step), out of the rollouter's queue.
        verl breaks the ties in its set of group ids' order (uuids: blind to length); rlsim takes
        submission order, as blind, where the first to finish would favour the short responses."""
        chosen = sorted(ready, key=lambda g: (g.first_version, g.index))[:count]
        taken = {g.index for g in chosen}
        self.rollouter.queue = deque(g for g in self.rollouter.queue if g.index not in taken)
        return chosen

    def _evict(self, k: int) -> None:
        """Drop finished groups past the threshold (drop), then submit one prompt for each group
        evicted or filtered out since the last look."""
        rollouter = self.rollouter
        stale = []
        if self.strategy == "drop":
            stale = [g for g in rollouter.queue
                     if g.ready_s <= self.env.now + TIME_TOL_S and k - g.first_version + 1 > self.threshold]
        if stale:
            gone = {g.index for g in stale}
            rollouter.queue = deque(g for g in rollouter.queue if g.index not in gone)
            self.ctx.store.drop(np.concatenate([g.ids for g in stale]), "stale")
            self.evicted_stale += len(stale)
        refill = len(stale) + rollouter.filtered
        rollouter.filtered = 0
        if refill:
            rollouter.submit(refill)
            rollouter._step(self.env.now)

    def _held(self, k: int) -> bool:
        """wait: an unfinished prompt (started or still to start) has reached the threshold."""
        if self.strategy != "wait":
            return False
        rollouter = self.rollouter
        if rollouter.capacity() > 0 and self.threshold <= 1:
            return True
        return any(k - g.first_version + 1 >= self.threshold for g in rollouter.in_flight())


class SyncReplayBuffer(ReplayBuffer):
    """verl's ReplayBuffer in sync mode: no version control; under DAPO, refill credit of two prompts
    per filtered group, sent in the free slots, then drain and discard the surplus."""

    def __init__(self, run: VerlFullyAsyncRun, rollouter: FeedRollouter):
        super().__init__(run, rollouter)
        self.strategy = None
        workload = run.ctx.workload
        self.dapo = workload.dynamic_sampling is not None
        self.max_inflight = run.sched.max_inflight_gen_batches * workload.prompts_per_step
        self.filtered = self.refilled = self.surplus = 0   # groups, over the run

    def sample(self, k: int, count: int):
        """ReplayBuffer.sample (sync): poll until ``count`` groups are sampleable and, under DAPO,
        nothing is in flight; each look first sends what the credit and the free slots allow."""
        rollouter, env = self.rollouter, self.env
        t0, credit, draining = env.now, 0, False
        while True:
            rollouter._step(env.now)
            evicted, rollouter.filtered = rollouter.filtered, 0
            self.filtered += evicted
            ready = [g for g in rollouter.queue if g.ready_s <= env.now + TIME_TOL_S]
            enough = len(ready) >= count
            if self.dapo and enough:
                draining, credit = True, 0
            elif self.dapo and not draining:
                credit += 2 * evicted
            if self.dapo and not draining and credit > 0:
                dispatch = min(credit, max(0, self.max_inflight - self._in_flight()))
                if dispatch > 0:          # verl submits, then looks again at once
                    rollouter.submit(dispatch)
                    rollouter._step(env.now)
                    credit -= dispatch
                    self.refilled += dispatch
                    continue
            if enough and not (self.dapo and self._in_flight()):
                break
            yield from self._wait(t0)
        chosen = self._take(ready, count)
        taken = {g.index for g in chosen}
        surplus = [g for g in ready if g.index not in taken]
        if surplus:
            gone = {g.index for g in surplus}
            rollouter.queue = deque(g for g in rollouter.queue if g.index not in gone)
            self.ctx.store.drop(np.concatenate([g.ids for g in surplus]), "surplus")
            self.surplus += len(surplus)
        return chosen

    def _in_flight(self) -> int:
        """Prompts pending or running in verl's sense: submitted and not yet finished and scored."""
        rollouter, now = self.rollouter, self.env.now
        scoring = sum(1 for g in rollouter.queue if g.ready_s > now + TIME_TOL_S)
        return rollouter.capacity() + len(rollouter.in_flight()) + scoring


class VerlSeparateAsyncRun(VerlFullyAsyncRun):
    """separate_async: the fully_async Trainer / Rollouter split under the v1 feed and replay buffer."""
    ROLLOUTER = FeedRollouter
    BUFFER: type[ReplayBuffer] = ReplayBuffer
    IDLE_BEFORE_SYNC = "no request left: waits for the sync"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.buffer = self.BUFFER(self, self.rollouter)

    def _warmup_prompts(self) -> int:
        return warmup_prompts(self.ctx)

    def _batch_rules(self) -> None:
        sched, workload = self.sched, self.ctx.workload
        self.per_version = workload.prompts_per_step
        self.per_update = local_update_prompts(self.ctx)
        self.quota = self.per_version
        self.partial = True
        self.skip = skipped_forwards(sched)

    def _trainer(self):
        ctx, env = self.ctx, self.env
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        self.rollouter.submit(self._warmup_prompts() + self.per_version)
        for k in range(ctx.scenario.iterations):
            t0, first = env.now, len(ctx.iterations)
            stage0 = dict(ctx.totals.stage_time_s)
            yield from self._prepare_step(k)
            gen_s = 0.0
            for local in range(self.sched.parameter_sync_step):
                t_wait = env.now
                groups = yield from self._sample(k)
                gen_s += env.now - t_wait
                yield from self._policy_copies(k, local)
                yield from ctx.trainer.run(k, np.concatenate([g.ids for g in groups]), self.trainer_clock,
                                           mini_batches=1, skip=self.skip)
            t_sync = env.now
            yield from self._end_step(k)
            self._merge_iterations(first, env.now)
            self.versions.append(_version_record(ctx, k, env.now - t0, gen_s, env.now - t_sync, stage0))
        self.finished.succeed()

    def _prepare_step(self, k: int):
        """prepare_step: the step's prompts (the first step's went out with the warm-up)."""
        if k:
            self.rollouter.submit(self.per_version)
        yield from ()

    def _sample(self, k: int):
        """One local update's groups; the trainer's wait for them is verl's ``gen``."""
        groups = yield from self.buffer.sample(k, self.per_update)
        self.trainer_clock.idle("dependency", self.env.now, k, label="gen")
        return groups

    def _end_step(self, k: int):
        yield from self._sync(k)

    def _policy_copies(self, k: int, local: int):
        """Decoupled PPO's pi_old around the old log-prob pass (DetachActorWorker, _compute_old_log_prob
        without bypass mode): the first local update saves the policy to host memory; each later one
        saves the current weights, restores pi_old, computes, and restores the current (3 copies).
        Counted in the old log-prob phase, as verl's timer does."""
        if "old_logprob" in self.skip:
            return
        ctx, clock = self.ctx, self.trainer_clock
        copy_s = ctx.costs.weight_host_copies_s(clock.ranks, 1 if local == 0 else 3)
        clock.busy("forward", self.env.now + copy_s, k, label="old_logprob: pi_old host copies")
        ctx.add_stage_time("old_logprob", copy_s)
        yield self.env.timeout(copy_s)

    def _report(self) -> dict:
        out = super()._report()
        out.update(trainer_mode="separate_async", parameter_sync_step=self.sched.parameter_sync_step,
                   evicted_stale_groups=self.buffer.evicted_stale)
        for key in ("prompts_per_version", "quota_prompts", "started_per_version"):
            out.pop(key)
        return out


class VerlColocateAsyncRun(VerlSeparateAsyncRun):
    """colocate_async: the same feed and buffer on one pool that generates, then trains."""
    ROLLOUTER = ColocatedFeedRollouter
    TRAIN_POOL = "actor"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        ctx.note_memory(ctx.costs.inference_memory_bytes(self.trainer_clock.ranks), "rollout")

    def _sync_seconds(self) -> float:
        """The reshard into the engines on the same devices."""
        ranks = self.trainer_clock.ranks
        return self.ctx.costs.weight_sync_s(ranks, ranks)

    def _trainer(self):
        """verl's step: gen (sample, then on_sample_end: abort keeping the tokens, sleep), the forwards
        and update, update_weights (on_step_end: wake, reshard, resume). The engines are awake at the
        start (on_init_end's update_weights)."""
        ctx, env, actor, rollouter = self.ctx, self.env, self.trainer_clock, self.rollouter
        rollouter.paused = True
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        rollouter.take_back(env.now)
        rollouter.end_sync(0, env.now)
        rollouter.submit(self._warmup_prompts() + self.per_version)
        for k in range(ctx.scenario.iterations):
            t0, stage0 = env.now, dict(ctx.totals.stage_time_s)
            if k:
                rollouter.submit(self.per_version)   # prepare_step
            groups = yield from self.buffer.sample(k, self.per_update)
            yield rollouter.begin_sync(True, env.now)   # abort all, keeping the tokens
            rollouter.hand_over(env.now, k)
            actor.cursor = env.now
            ctx.add_stage_time("generate", env.now - t0)
            self._switch("train", k)            # sleep: KV cache and weights freed
            yield env.timeout(max(0.0, actor.cursor - env.now))
            gen_s = env.now - t0
            yield from ctx.trainer.run(k, np.concatenate([g.ids for g in groups]), actor, skip=self.skip)
            t_sync = env.now
            self._switch("rollout", k)          # wake: the KV cache back in HBM
            actor.busy("sync", actor.cursor + self.sync_s, k, label="reshard", cause="weight_sync")
            ctx.add_stage_time("weight_sync", self.sync_s)
            yield env.timeout(max(0.0, actor.cursor - env.now))
            rollouter.take_back(env.now)
            rollouter.end_sync(k + 1, env.now)   # the aborted requests resume first
            ctx.iterations[-1]["end"] = env.now
            self.versions.append(_version_record(ctx, k, env.now - t0, gen_s, env.now - t_sync, stage0))
        self.finished.succeed()

    def run(self) -> float:
        ctx, env = self.ctx, self.env
        env.process(self.rollouter.process())
        env.process(self._trainer())
        env.run(until=self.finished)
        self.rollouter.done = True
        self._count_engines(ctx)
        self._report_into(ctx)
        return env.now

    def _report(self) -> dict:
        out = super()._report()
        out.update(trainer_mode="colocate_async")
        out.pop("parameter_sync_step")
        return out


class VerlSyncRun(VerlColocateAsyncRun):
    """sync: colocate_async's step without the warm-up, its buffer waiting for the whole batch (and,
    under DAPO, for every request in flight), so nothing is aborted."""
    BUFFER = SyncReplayBuffer

    def _warmup_prompts(self) -> int:
        return 0

    def _report(self) -> dict:
        out = super()._report()
        buffer = self.buffer
        out.update(trainer_mode="sync", filtered_groups=buffer.filtered, refilled_prompts=buffer.refilled,
                   discarded_surplus_groups=buffer.surplus)
        out.pop("evicted_stale_groups")
        return out


def warmup_prompts(ctx: Context) -> int:
    """num_warmup_batches x train_batch_size prompts, rounded down to whole gen_batch_size fetches
    (_add_async_warmup_batches), which the async modes make one prompt (_init_dataloader: exact refills
    need single-prompt fetches): 1.5 x 64 is 96."""
    return math.floor(ctx.sched.num_warmup_batches * ctx.workload.prompts_per_step + 1e-9)


def local_update_prompts(ctx: Context) -> int:
    """Prompts of one local update; verl asserts train_batch_size == parameter_sync_step x
    ppo_mini_batch_size in separate_async (one mini-batch per update)."""
    sched, workload = ctx.sched, ctx.workload
    sync_steps = sched.parameter_sync_step if sched.kind == "verl-separate-async" else 1   # colocate: one
    batch = workload.prompts_per_step
    if batch % sync_steps:
        raise RlsimError(f"train_batch_size {batch} does not split into parameter_sync_step {sync_steps} local "
                         "updates", source=ctx.scenario.source, field="schedule.parameter_sync_step",
                         fix=f"give a parameter_sync_step that divides workload.prompts_per_step ({batch})")
    per_update = batch // sync_steps
    mini = workload.mini_batch_prompts
    if sync_steps > 1 and mini is not None and mini != per_update:
        raise RlsimError(f"separate_async trains one mini-batch of train_batch_size / parameter_sync_step = "
                         f"{per_update} prompts per local update, not {mini}", source=ctx.scenario.source,
                         field="workload.mini_batch_prompts",
                         fix=f"remove workload.mini_batch_prompts or set it to {per_update}")
    return per_update


def _version_record(ctx: Context, k: int, step_s: float, gen_s: float, sync_s: float,
                    stage0: dict[str, float]) -> dict[str, float]:
    spent = {key: ctx.totals.stage_time_s.get(key, 0.0) - stage0.get(key, 0.0)
             for key in ("train_actor", "reference", "old_logprob")}
    return {"version": k, "step_s": step_s, "gen_s": gen_s, "update_actor_s": spent["train_actor"],
            "ref_s": spent["reference"], "old_log_prob_s": spent["old_logprob"], "sync_s": sync_s,
            "idle_ratio": gen_s / max(step_s, 1e-12)}


def run_colocate(ctx: Context) -> float:
    return VerlColocateAsyncRun(ctx).run()


def run_sync(ctx: Context) -> float:
    return VerlSyncRun(ctx).run()


COLOCATE = register(SchedulePolicy(
    VerlColocateAsyncSchedule, run_colocate, "verl 0.9 v1 colocate_async: one pool generates until a batch of "
    "groups is finished, aborts the rest keeping their tokens, trains, and resumes them beside the next "
    "step's prompts", partial_rollout_segments=False, supports_multi_turn=True, turns_on_servers=True))
SYNC = register(SchedulePolicy(
    VerlSyncSchedule, run_sync, "verl 0.9 v1 sync (its default mode): one pool generates the step's prompts to the "
    "last, then trains; under DAPO filtered groups are refilled two for one while the rest generate, then the "
    "requests in flight drain and the surplus is discarded", partial_rollout_segments=False, supports_multi_turn=True,
    turns_on_servers=True))
