"""AReaL (kind ``areal``) as AReaL 1.0.4 runs asynchronous RL (its wheel, read 2026-12-05:
areal/infra/staleness_manager.py, workflow_executor.py, remote_inf_engine.py, trainer/rl_trainer.py).

- A rollout is one prompt with its n trajectories (GroupedRolloutWorkflow gathers n episodes), each
  its own request, sent round-robin over the rollout servers request by request
  (RemoteInfEngine.choose_server): one prompt's trajectories spread over the servers.
- Start rule (StalenessManager.get_capacity): a rollout starts while running <
  ``max_concurrent_rollouts`` (default: the consumer batch) and accepted + running <
  (``max_head_offpolicyness`` + version + 1) x ``consumer_batch_size`` (default: the trained batch,
  prompts_per_step, as AReaL's recipes set it), ``accepted`` counting every rollout accepted so
  far. The bound is on when a rollout starts (the weights of its oldest token), not on its age
  when trained: nothing is dropped for age. A rejected rollout (dynamic filtering) frees its place.
- The trainer waits for a batch of completed rollouts and takes the earliest started of them
  (wait_results sorts by creation time); it computes the reference and proximal log-probs (the
  latter only with ``recompute_logprob``), trains, then pauses submission, updates the weights and
  resumes: rollouts keep generating through the training.
- The weight update pauses generation on every server (pause_generation: the in-flight requests end
  with "abort"); each is sent again after the update with its prompt + tokens so far as the new
  prompt, to the same server (rid_to_address), and re-prefilled. ``interruptible: false`` (a
  what-if: AReaL 1.0.4 always interrupts) lets the in-flight requests finish before the update.
- Not modelled: the per-data-parallel-rank split of the capacity (each trainer rank's executor
  holds max_concurrent_rollouts / dp and batch / dp: the same totals), the input queue's own bound
  (queue_size: the dataloader always has a prompt ready).
"""
from __future__ import annotations

import numpy as np

from ...scenario import ArealSchedule
from .context import Context
from .registry import SchedulePolicy, register
from .staleness import TIME_TOL_S
from .training import skipped_forwards
from .verl_async import PromptGroup, Rollouter, VerlFullyAsyncRun


class ArealRollouter(Rollouter):
    """The rollout servers under AReaL's start rule, requests dealt round-robin one by one."""

    def __init__(self, run: ArealRun):
        super().__init__(run)
        self.batch, self.bound = run.consumer_batch, run.sched.max_head_offpolicyness
        self.max_concurrent = run.max_concurrent
        self.accepted = 0          # rollouts accepted so far (RolloutStat.accepted)
        self.running = 0           # rollouts started and not done, interrupted ones included
        self.next_server = 0
        self.request_server: dict[int, np.ndarray] = {}   # group index -> the server of each request
        self.keep_kv = run.sched.interrupt_keeps_kv

    def capacity(self) -> int:
        """StalenessManager.get_capacity: the concurrency and the staleness limits, the tighter."""
        by_staleness = (self.bound + self.version + 1) * self.batch - (self.accepted + self.running)
        return min(self.max_concurrent - self.running, by_staleness)

    def _admit(self, now: float) -> None:
        """Interrupted requests go back first, each to its own server; then new rollouts while the
        start rule allows. What one call submits reaches each server in one add (arrivals at one time)."""
        batches: dict[int, list[tuple[PromptGroup, np.ndarray]]] = {}
        while self.cancelled:
            self._place(self.cancelled.popleft(), batches)
        while self.capacity() > 0:
            group = self.source.next()
            group.started_s, group.first_version = now, self.version
            self.started += 1
            self.running += 1
            self._place(group, batches)
        for target, parts in batches.items():
            self._add(target, parts, now)

    def _place(self, group: PromptGroup, batches: dict[int, list[tuple[PromptGroup, np.ndarray]]]) -> None:
        """The group's open requests by server: dealt in turn on its first submission, then where they ran."""
        n, count = self.ctx.workload.samples_per_prompt, len(self.servers)
        where = self.request_server.get(group.index)
        if where is None:
            where = (self.next_server + np.arange(n)) % count
            self.next_server = (self.next_server + n) % count
            self.request_server[group.index] = where
        open_ = group.open
        group.running = len(open_)
        group.versions.add(self.version)
        for target in np.unique(where[open_]):
            batches.setdefault(int(target), []).append((group, open_[where[open_] == target]))

    def _add(self, target: int, parts: list[tuple[PromptGroup, np.ndarray]], now: float) -> None:
        n = self.ctx.workload.samples_per_prompt
        ids = np.concatenate([group.index * n + rows for group, rows in parts])
        prompt = np.concatenate([group.seqs.prompt_len[rows] for group, rows in parts])
        target_len = np.concatenate([group.seqs.target_len[rows] for group, rows in parts])
        generated = np.concatenate([group.generated[rows] for group, rows in parts])
        groups = np.concatenate([np.full(len(rows), group.index) for group, rows in parts])
        kept = np.concatenate([group.kept[rows] for group, rows in parts])
        for group, rows in parts:   # a pause's cached KV serves one resumption
            group.kept[rows] = 0
        self.servers[target].add_many(ids, prompt, target_len, now, generated, group_ids=groups,
                                      kept=kept if kept.any() else None)
        for group, _ in parts:
            self.inflight[target][group.index] = group
        self._touch(target, now)

    def _finished(self, server: int, seq_id: int, t: float) -> None:
        n = self.ctx.workload.samples_per_prompt
        group, row = self.inflight[server][seq_id // n], seq_id % n
        group.finish_s[row] = t
        group.generated[row] = group.seqs.target_len[row]
        group.running -= 1
        where = self.request_server[group.index]
        if not np.isnan(group.finish_s[where == server]).any():
            del self.inflight[server][group.index]
        if not group.running:
            del self.request_server[group.index]
            self._complete(group, t, np.array([self.clocks[s].rank_start for s in where]))

    def _group_done(self, accepted: bool) -> None:
        self.running -= 1
        self.accepted += int(accepted)

    def end_sync(self, version: int, now: float) -> None:
        """New weights: submission resumes (nothing is reset: ``accepted`` keeps counting)."""
        self.started_per_version.append(self.started)
        self.version = version
        self.paused = False
        self._fire("wake")


class ArealRun(VerlFullyAsyncRun):
    ROLLOUTER = ArealRollouter
    IDLE_BEFORE_SYNC = "no capacity: waits for the weight update"

    def _batch_rules(self) -> None:
        sched, workload = self.sched, self.ctx.workload
        self.per_update = workload.prompts_per_step      # the trained batch
        self.consumer_batch = sched.consumer_batch_size or workload.prompts_per_step
        self.max_concurrent = sched.max_concurrent_rollouts or self.consumer_batch
        self.partial = sched.interruptible
        # a step's staleness as AReaL logs it (trainer/ppo/actor.py _log_version_staleness_stats:
        # current version - each token's version, sample_staleness_theta_max): from the oldest token
        self.ctx.trainer.age_column = "first_version"
        self.skip = skipped_forwards(sched)
        # rlsim's stage -> AReaL's timer (rl_trainer.py stats_tracker.record_timing), the critic's with PPO
        self.timers = {"old_logprob": "recompute_logp_s", "reference": "ref_logp_s", "train_actor": "train_step_s"}
        if workload.algorithm == "ppo":
            self.timers.update(critic_values="critic_values_s", train_critic="critic_train_step_s")

    def _trainer(self):
        ctx, env = self.ctx, self.env
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        for k in range(ctx.scenario.iterations):
            t0 = env.now
            stage0 = dict(ctx.totals.stage_time_s)
            groups = yield from self._take(k)
            rollout_s = env.now - t0
            ids = np.concatenate([g.ids for g in groups])
            yield from ctx.trainer.run(k, ids, self.trainer_clock, skip=self.skip)
            t_sync = env.now
            yield from self._sync(k)
            ctx.iterations[-1]["end"] = env.now
            spent = {timer: ctx.totals.stage_time_s.get(stage, 0.0) - stage0.get(stage, 0.0)
                     for stage, timer in self.timers.items()}
            heads = [k - g.first_version for g in groups]
            self.versions.append({"version": k, "step_s": env.now - t0, "rollout_s": rollout_s, **spent,
                                  "update_weights_s": env.now - t_sync, "head_offpolicyness_max": max(heads)})
        self.finished.succeed()

    def _take(self, k: int):
        """A batch of complete rollouts, the earliest started first (wait_results sorts by creation
        time). A rollout is a result once its workflow has scored it (arun_episode computes each
        trajectory's reward before it returns), so only rewarded ones count toward the batch."""
        rollouter, env, need = self.rollouter, self.env, self.per_update
        while True:
            ready = [g for g in rollouter.queue if g.ready_s <= env.now + TIME_TOL_S]
            if len(ready) >= need:
                break
            scoring = sorted(g.ready_s for g in rollouter.queue if g.ready_s > env.now + TIME_TOL_S)
            events = [rollouter.data]
            if len(scoring) >= need - len(ready):   # the time enough of those scored now are in
                events.append(env.timeout(scoring[need - len(ready) - 1] - env.now))
            yield env.any_of(events)
        chosen = sorted(ready, key=lambda g: g.index)[:need]
        taken = {g.index for g in chosen}
        rollouter.queue = type(rollouter.queue)(g for g in rollouter.queue if g.index not in taken)
        # the wait: for the batch's generation, then for the last rewards (as the other kinds label it)
        generated = max(float(np.nanmax(g.finish_s)) for g in chosen)
        self.trainer_clock.idle("dependency", min(generated, env.now), k, label="rollout")
        self.trainer_clock.idle("dependency", env.now, k, label="reward")
        return chosen

    def _report_into(self, ctx: Context) -> None:
        """AReaL's own quantities: its timers (stats_tracker.record_timing names) per step, the mean."""
        keys = ("step_s", "rollout_s", *self.timers.values(), "update_weights_s")
        mean = {key.removesuffix("_s"): float(np.mean([v[key] for v in self.versions])) if self.versions else 0.0
                for key in keys}
        rollouter = self.rollouter
        ctx.extra["samples_in_flight"] = rollouter.in_flight_figures()
        ctx.extra["areal"] = {
            "consumer_batch_size": self.consumer_batch, "max_concurrent_rollouts": self.max_concurrent,
            "max_head_offpolicyness": self.sched.max_head_offpolicyness, "per_step": self.versions,
            "timing_s": mean,
            "rollouts_started": rollouter.started, "rollouts_accepted": rollouter.accepted,
            "partial_ratio": rollouter.partial_count / max(1, self.ctx.store.n),
            "max_partial_span": rollouter.max_partial_span}


def run(ctx: Context) -> float:
    return ArealRun(ctx).run()


POLICY = register(SchedulePolicy(
    ArealSchedule, run, "AReaL: rollouts start while running < max_concurrent_rollouts and accepted + running < "
    "(max_head_offpolicyness + version + 1) x batch; the weight update interrupts in-flight requests, "
    "resumed after it with their prefix re-prefilled", supports_multi_turn=True, turns_on_servers=True))
