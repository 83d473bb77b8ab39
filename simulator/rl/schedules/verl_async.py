"""verl's fully_async_policy (../shared/reference/frameworks.md "fully_async_policy"): a Rollouter
and a Trainer on split pools joined by a message queue.

- A *sample* is one prompt with its n trajectories; all n run on one rollout server (an instance),
  routed to the server with the fewest prompts assigned (near round-robin, not load-aware), at most
  ``max_inflight_prompts_per_server`` prompts in flight per server.
- Per parameter version the Rollouter may start at most (1 + staleness_threshold) x trigger x
  require x mini prompts; at every version the count is reset to what is in flight + cancelled +
  queued. Nothing is dropped for age: staleness is counted, not enforced.
- The Trainer takes require x mini prompts from the queue per local update (its wait is verl's
  ``gen``) and runs ``require_batches`` optimizer steps on them, with the rollout's own log-probs
  (no old_log_prob pass); after ``trigger_parameter_sync_step`` local updates it bumps the version
  and blocks on the weight sync. One logged step = one version.
- At a sync with ``partial_rollout`` (acts only when staleness_threshold > 0) in-flight requests are
  cancelled keeping their tokens and resubmitted first afterwards, re-prefilling prompt + partial
  response (the KV cache is cleared at every sync); without it the sync waits for every in-flight
  request to finish, on the Trainer's critical path. Generation pauses during the sync.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from ...llm.inference import summed_counts
from ..costs import RolloutServer
from ..distqueue import payload_bytes_each
from ..timeline import GroupClock
from .batches import SeqBatch
from .context import Context
from .generation_flops import request_fed_flops
from .rewards import rule_rewards_ready
from .served import served_scored, teacher_scored, with_teacher_payload
from .training import NO_OLD_LOG_PROB  # fully async trains on the rollout's log-probs


@dataclass
class PromptGroup:
    """One prompt and its n trajectories on their way through the Rollouter."""
    index: int
    seqs: SeqBatch
    started_s: float = 0.0
    first_version: int = -1
    server: int = -1
    generated: np.ndarray = field(default_factory=lambda: np.zeros(0, int))   # tokens per trajectory
    finish_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    versions: set[int] = field(default_factory=set)                          # versions it generated under
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, int))        # sample-store ids once complete
    running: int = 0                                                         # trajectories submitted, not done
    ready_s: float = 0.0                                                     # complete and rewarded
    # rows cut from a server taken away while the others run on: the ones to send again (None: every open row)
    pending_rows: np.ndarray | None = None
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, int))       # KV tokens cached over a pause

    def __post_init__(self) -> None:
        n = len(self.seqs)
        self.generated, self.finish_s, self.kept = np.zeros(n, int), np.full(n, np.nan), np.zeros(n, int)

    @property
    def open(self) -> np.ndarray:
        return np.flatnonzero(np.isnan(self.finish_s))


class PromptSource:
    """Prompts in draw order: the groups of round 0, then round 1, ... (RoundDraws)."""

    def __init__(self, ctx: Context):
        self.draws, self.n = ctx.draws, ctx.workload.samples_per_prompt
        self.round, self.offset, self.count = 0, 0, 0

    def next(self) -> PromptGroup:
        batch = self.draws.draw(self.round)
        if self.offset >= len(batch):
            self.round, self.offset = self.round + 1, 0
            batch = self.draws.draw(self.round)
        seqs = batch.take(np.arange(self.offset, self.offset + self.n))
        self.offset += self.n
        self.count += 1
        return PromptGroup(self.count - 1, seqs)


def streamed(seqs: SeqBatch) -> SeqBatch:
    """A streaming Rollouter has no generation round: a kept group the round's draw marks ``surplus``
    (that round's batch already full) is queued for a later step like any other. verl's fully_async
    Rollouter puts every sample it generates into the message queue (0.9.1 wheel,
    fully_async_rollouter.py _process_single_sample_streaming: put_sample, dropped only when the queue
    is full); AReaL trains every rollout its filter accepts (workflow_executor.py should_accept_fn)."""
    surplus = seqs.drop_reason == "surplus"
    if not surplus.any():
        return seqs
    reason = seqs.drop_reason.copy()
    reason[surplus] = ""
    return SeqBatch(*seqs.fields()[:-1], reason)


class Rollouter:
    """The rollout servers, the per-version quota, the message queue of complete samples."""
    POOL = "rollout"   # the pool whose devices the servers run on
    keep_kv = False    # a request interrupted at a sync keeps its KV cache (paused in place), not aborted

    def __init__(self, run: VerlFullyAsyncRun):
        self.run_, self.ctx, self.env = run, run.ctx, run.env
        sched, d = run.sched, run.ctx.costs.instance_devices
        pool = self.ctx.pools[self.POOL]
        n_servers = pool.count // d
        ranks = pool.ranks
        self.servers: list[RolloutServer] = [self.ctx.costs.rollout_server(ranks[i * d:(i + 1) * d])
                                             for i in range(n_servers)]
        self.clocks = [GroupClock(self.ctx.timeline, self.POOL, ranks[i * d], d) for i in range(n_servers)]
        self._own_clocks()
        self.inflight: list[dict[int, PromptGroup]] = [{} for _ in range(n_servers)]
        self.pool_servers = n_servers                  # the first ones, on the pool (a subclass may add others)
        self.cap = sched.max_inflight_prompts_per_server
        self.source = PromptSource(self.ctx)
        self.queue: deque[PromptGroup] = deque()       # complete samples, in completion order
        self.cancelled: deque[PromptGroup] = deque()   # partial samples to resubmit first
        self.version, self.started = 0, 0
        self.ctx.unstored_from = self.earliest_unstored   # the critical path walks no step a group may reach
        self.started_per_version: list[int] = []
        self.paused = self.draining = self.done = False
        self._heap: list[tuple[float, int]] = []
        self._next = [math.inf] * n_servers
        self._busy = [False] * n_servers
        self.wake = self.env.event()
        self.data = self.env.event()
        self.drained = self.env.event()
        self.partial_count = 0
        self.max_partial_span = 0
        # what _complete charged generation: FLOPs, tokens and of them prompt tokens (_count_engines
        # corrects the FLOPs by the engines' counts at the run's end: generation_flops.request_fed_flops)
        self.charged_flops = self.charged_tokens = self.charged_prompt_tokens = 0.0

    def in_flight(self) -> list[PromptGroup]:
        """Groups started and not finished: on a server or aborted and waiting to resume."""
        seen: dict[int, PromptGroup] = {}
        for server in self.inflight:
            seen.update(server)
        seen.update((group.index, group) for group in self.cancelled)
        return list(seen.values())

    def in_flight_figures(self) -> dict[str, int]:
        """What the run's end leaves started and unfinished: a prompt's group enters the sample table
        whole, so these trajectories are in no other count (a 4-step verl-colocate-async run
        submitted 1,280 and reported 1,024 with nothing said; a trial)."""
        groups = self.in_flight()
        return {"prompts": len(groups), "trajectories": sum(len(group.seqs) for group in groups),
                "generated_tokens": int(sum(int(group.generated.sum()) for group in groups))}
    def _own_clocks(self) -> None:
        """The servers' clocks record the pool's devices for the whole run (the run closes them)."""
        self.ctx.clocks.extend(self.clocks)

    # ---- events ----------------------------------------------------------------------------------
    def _fire(self, name: str) -> None:
        event = getattr(self, name)
        setattr(self, name, self.env.event())
        event.succeed()

    def process(self):
        env = self.env
        while not self.done:
            self._step(env.now)
            t_next = self._heap[0][0] if self._heap else math.inf
            events = [self.wake] if math.isinf(t_next) else [self.wake, env.timeout(max(0.0, t_next - env.now))]
            yield env.any_of(events)

    def _step(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            t, i = heapq.heappop(self._heap)
            if t != self._next[i]:
                continue
            for done in self.servers[i].advance_to(now):
                self._finished(i, int(done.seq_id), float(done.time_s))
            self._touch(i, now)
        if self.draining and not any(self.inflight):
            self.draining = False
            self._fire("drained")
        if not (self.paused or self.draining):
            self._admit(now)

    def _touch(self, i: int, now: float) -> None:
        """Server i changed: its next event on the heap, and its clock's busy / idle record."""
        t = self.servers[i].next_event_time()
        self._next[i] = t
        if not math.isinf(t):
            heapq.heappush(self._heap, (t, i))
        clock = self.clocks[i]
        for start, end in self.servers[i].take_waits():   # its engine idle, trajectories out on tools
            self.ctx.timeline.hold_idle(clock.rank_start, clock.rank_count, start, end, "tool_wait")
        busy = self.servers[i].load > 0
        if busy != self._busy[i]:
            if busy:
                cause = "long_tail" if (self.paused or self.draining) else "dependency"
                clock.idle(cause, now, self.version, label="quota" if cause == "dependency" else "")
            else:
                clock.busy("generate", now, self.version, label=f"version {self.version}")
            self._busy[i] = busy

    def earliest_unstored(self) -> float:
        """The earliest finish a trajectory not in the sample store yet may have: a group enters
        the store when all its n trajectories are done (``_complete``), none before it started."""
        return min((g.started_s for g in self.in_flight()), default=math.inf)

    # ---- admission and completion ------------------------------------------------------------
    def _admit(self, now: float) -> None:
        while self.cancelled or self.started < self.run_.quota:
            server = min(range(len(self.servers)), key=lambda j: (len(self.inflight[j]), j))
            if len(self.inflight[server]) >= self.cap:
                return
            if self.cancelled:
                group = self.cancelled.popleft()
            else:
                group = self.source.next()
                group.started_s, group.first_version = now, self.version
                self.started += 1
            self._submit(group, server, now)

    def _submit(self, group: PromptGroup, server: int, now: float) -> None:
        n = self.ctx.workload.samples_per_prompt
        open_ = group.open
        group.server = server
        group.running = len(open_)
        group.versions.add(self.version)
        seqs = group.seqs
        self.servers[server].add_many(group.index * n + open_, seqs.prompt_len[open_], seqs.target_len[open_],
                                      now, group.generated[open_], group_ids=np.full(len(open_), group.index))
        self.inflight[server][group.index] = group
        self._touch(server, now)

    def _finished(self, server: int, seq_id: int, t: float) -> None:
        n = self.ctx.workload.samples_per_prompt
        group = self.inflight[server][seq_id // n]
        group.finish_s[seq_id % n] = t
        group.generated[seq_id % n] = group.seqs.target_len[seq_id % n]
        group.running -= 1
        if not group.running:
            del self.inflight[server][group.index]
            self._complete(group, t, self.clocks[server].rank_start)

    def _complete(self, group: PromptGroup, t: float, instance: int | np.ndarray) -> None:
        """All n trajectories are done: into the sample store and DistQueue; into the message queue
        unless DAPO's filter drops them (no_signal). ``instance``: the first rank of the server that
        generated them (one for all, or one per trajectory)."""
        group.seqs = streamed(group.seqs)
        ctx, seqs = self.ctx, group.seqs
        ranks = self.ctx.pools[self.POOL].ranks
        # when each trajectory is scored: at its finish (the teacher's hand-over), the group at t
        scored = np.asarray(group.finish_s, float) if ctx.workload.distillation else np.full(len(seqs), t)
        handover = ctx.workload.reward.handover_of(ctx.sched)
        if ctx.rule_reward:    # the group's n trajectories leave together (a batch) unless handed over each
            scored = rule_rewards_ready(ctx, np.asarray(group.finish_s, float), ranks, handover,
                                        seqs.prompt_len, seqs.target_len)
        elif ctx.served_reward:
            handed = np.asarray(group.finish_s, float) if handover == "sample" else np.full(len(seqs), t)
            scored = served_scored(ctx, "reward_model", handed, seqs.prompt_len, seqs.target_len)
        # each trajectory to the teacher as its reward is ready (distillation); the group waits for all
        reward_s = float(teacher_scored(ctx, scored, seqs.prompt_len, seqs.target_len).max()) - t
        # the group's rewards ready (before the teacher), never after its ready time (float rounding)
        scored_s = min(max(float(scored.max()), t), t + reward_s)
        span = len(group.versions)
        if span > 1:
            self.partial_count += len(seqs)
            self.max_partial_span = max(self.max_partial_span, span)
        ids = ctx.store.add(round_=seqs.round, group=seqs.group, prompt_len=seqs.prompt_len,
                            response_len=seqs.target_len, generated_tokens=seqs.target_len, version=self.version,
                            first_version=np.full(len(seqs), group.first_version), start=group.started_s,
                            finish=group.finish_s, returned=np.full(len(seqs), t), scored=np.full(len(seqs), scored_s),
                            ready=np.full(len(seqs), t + reward_s),
                            dropped=seqs.drop_reason != "", drop_reason=seqs.drop_reason, instance=instance)
        lens = seqs.prompt_len + seqs.target_len
        ctx.queue.write(with_teacher_payload(ctx, payload_bytes_each(lens, ctx.sched.distqueue, pad_len=ctx.pad_len), lens),
                        np.full(len(seqs), t + reward_s))
        tokens = float(lens.sum())
        flops = tokens * ctx.costs.rollout_flops_per_token(float(lens.mean()) / 2)   # as rollout() counts
        ctx.totals.gen_flops += flops
        self.charged_flops += flops
        self.charged_tokens += tokens
        self.charged_prompt_tokens += float(seqs.prompt_len.sum())
        ctx.totals.generated_tokens += float(seqs.target_len.sum())
        accepted = not (seqs.drop_reason != "").any()
        self._group_done(accepted)
        if accepted:
            group.ids, group.ready_s = ids, t + reward_s
            self.queue.append(group)
            self._fire("data")

    def _group_done(self, accepted: bool) -> None:
        """A group left generation: a filtered one (DAPO) frees its place, so another prompt is generated."""
        if not accepted:
            self.started -= 1

    # ---- the weight sync ---------------------------------------------------------------------
    def begin_sync(self, partial: bool, now: float) -> simpy.Event:
        """Stop generating for a sync: cancel in flight keeping tokens (partial) or drain. Returns
        the event that fires when no request is in flight."""
        self.paused = True
        self._step(now)
        if partial:
            queued = {group.index for group in self.cancelled}
            for i, server in enumerate(self.servers):
                result = server.interrupt(now)
                for done in result.finished:
                    self._finished(i, int(done.seq_id), float(done.time_s))
                n = self.ctx.workload.samples_per_prompt
                for part in result.partial:
                    group = self.inflight[i][int(part.seq_id) // n]
                    group.generated[int(part.seq_id) % n] = int(part.generated)
                    if self.keep_kv:
                        group.kept[int(part.seq_id) % n] = result.cached.get(int(part.seq_id), 0)
                for group in sorted(self.inflight[i].values(), key=lambda g: g.index):
                    if group.index not in queued:      # a group whose requests span servers: once
                        queued.add(group.index)
                        self.cancelled.append(group)
                self.inflight[i].clear()
                self._touch(i, now)
        self._fire("wake")
        if not any(self.inflight):
            return self.env.timeout(0.0)
        self.draining = True
        return self.drained

    def end_sync(self, version: int, now: float) -> None:
        """New weights: the per-version count restarts at in flight + cancelled + queued."""
        self.started_per_version.append(self.started)
        self.version = version
        self.started = sum(len(x) for x in self.inflight) + len(self.cancelled) + len(self.queue)
        self.paused = False
        self._fire("wake")


def version_quota(staleness_threshold: float, per_version: int) -> int:
    """The samples a version may start: floor((1 + staleness_threshold) x per_version), forgiving
    float round-off ((1 + 0.16) x 25 is 28.999999999999996 in floats, and 29 samples)."""
    return math.floor((1 + staleness_threshold) * per_version + 1e-9)


class VerlFullyAsyncRun:
    ROLLOUTER: type[Rollouter] = Rollouter
    TRAIN_POOL = "train"   # the pool the trainer runs on
    # a server that has nothing to generate before a sync waits on the trainer for this reason
    IDLE_BEFORE_SYNC = "quota spent: waits for the sync"

    def __init__(self, ctx: Context):
        self.ctx, self.env, self.sched = ctx, ctx.env, ctx.sched
        self._batch_rules()
        train = ctx.pools[self.TRAIN_POOL]
        self.trainer_clock = GroupClock(ctx.timeline, self.TRAIN_POOL, train.start, train.count)
        ctx.clocks.append(self.trainer_clock)
        ctx.start_clock(self.trainer_clock)
        self.sync_s = self._sync_seconds()
        self.rollouter = self.ROLLOUTER(self)
        self.versions: list[dict[str, float]] = []
        self.finished = self.env.event()

    def _sync_seconds(self) -> float:
        """The weight sync from the trainer's devices to the rollout pool."""
        return self.ctx.costs.weight_sync_s(self.trainer_clock.ranks, self.ctx.pools["rollout"].ranks)

    def _batch_rules(self) -> None:
        """Prompts per local update and per version, the per-version quota, whether a sync cancels."""
        sched, mini = self.sched, self.ctx.workload.mini_batch_prompts or self.ctx.workload.prompts_per_step
        self.per_update = sched.require_batches * mini                 # prompts per local update
        self.per_version = sched.trigger_parameter_sync_step * self.per_update
        self.quota = version_quota(sched.staleness_threshold, self.per_version)
        self.partial = sched.partial_rollout and sched.staleness_threshold > 0

    def run(self) -> float:
        ctx, env = self.ctx, self.env
        env.process(self.rollouter.process())
        env.process(self._trainer())
        env.run(until=self.finished)
        makespan = env.now
        self.rollouter.done = True
        rollout = ctx.pools["rollout"]
        pool_servers = self.rollouter.servers[:self.rollouter.pool_servers]
        used = len(pool_servers) * ctx.costs.instance_devices
        if used < rollout.count:
            GroupClock(ctx.timeline, "rollout", rollout.start + used, rollout.count - used).idle("placement", makespan)
        busy = sum(server.busy_s for server in pool_servers) / max(1, len(pool_servers))
        ctx.add_stage_time("generate", busy)
        self._count_engines(ctx)
        self._report_into(ctx)
        return makespan

    def _count_engines(self, ctx: Context) -> None:
        """What every server's engine did by the run's end beside its time (RolloutServer.counts: the
        events each ran up to the last time the run advanced it) into the run's rollout totals, and
        the generation FLOPs the completed groups were charged corrected by them (model and hardware)."""
        totals = ctx.totals.rollout
        counts = summed_counts(self.rollouter.servers)
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
        r = self.rollouter
        model, hardware = request_fed_flops(r.charged_flops, r.charged_tokens, r.charged_prompt_tokens, counts,
                                            ctx.costs.rollout_flops_per_token)
        ctx.totals.gen_flops += model - r.charged_flops
        ctx.totals.gen_hardware_flops += hardware
    def _report_into(self, ctx: Context) -> None:
        """The framework's own quantities into the run's extras."""
        ctx.extra["verl"] = self._report()
        ctx.extra["samples_in_flight"] = self.rollouter.in_flight_figures()
        timing = dict(ctx.extra["verl"]["timing_s"])   # as the other verl kinds report: the named phases + other
        timing["other"] = timing["step"] - sum(seconds for name, seconds in timing.items() if name != "step")
        ctx.extra["verl_timing_s"] = timing

    def _trainer(self):
        ctx, env = self.ctx, self.env
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        for k in range(ctx.scenario.iterations):
            t0, first = env.now, len(ctx.iterations)
            stage0 = dict(ctx.totals.stage_time_s)
            gen_s = 0.0
            for _ in range(self.sched.trigger_parameter_sync_step):
                yield from self._before_update(k)
                t_wait = env.now
                groups = yield from self._take(k)
                gen_s += env.now - t_wait
                ids = np.concatenate([g.ids for g in groups])
                yield from ctx.trainer.run(k, ids, self.trainer_clock, mini_batches=self.sched.require_batches,
                                           skip=NO_OLD_LOG_PROB)
            t_sync = env.now
            yield from self._sync(k)
            self._merge_iterations(first, env.now)
            spent = {key: ctx.totals.stage_time_s.get(key, 0.0) - stage0.get(key, 0.0)
                     for key in ("train_actor", "reference", "fetch")}
            self.versions.append({"version": k, "step_s": env.now - t0, "gen_s": gen_s,
                                  "update_actor_s": spent["train_actor"], "ref_s": spent["reference"],
                                  "sync_s": env.now - t_sync, "idle_ratio": gen_s / max(env.now - t0, 1e-12)})
        self.finished.succeed()

    def _before_update(self, k: int):
        """Before a local update takes its samples (a subclass may take lent devices back)."""
        yield from ()

    def _take(self, k: int):
        """Wait for require x mini complete samples (verl's ``gen``), oldest first."""
        rollouter, clock = self.rollouter, self.trainer_clock
        while len(rollouter.queue) < self.per_update:
            yield rollouter.data
        groups = [rollouter.queue.popleft() for _ in range(self.per_update)]
        # A group enters the queue when its last trajectory ends; the trainer may use it once rewarded:
        # the wait up to the batch's last generation is `gen`, the rest the rule rewards' (`reward`,
        # as the other kinds label it; verl's timing_s/gen holds both, _report's gen_s).
        clock.idle("dependency", self.env.now, k, label="gen")
        ready_s = max(group.ready_s for group in groups)
        if ready_s > self.env.now:
            yield self.env.timeout(ready_s - self.env.now)
            clock.idle("dependency", self.env.now, k, label="reward")
        return groups

    def _sync(self, k: int):
        env, rollouter, clock = self.env, self.rollouter, self.trainer_clock
        yield rollouter.begin_sync(self.partial, env.now)
        clock.idle("long_tail", env.now, k, label="wait for in-flight requests")
        t_end = env.now + self.sync_s
        clock.busy("sync", t_end, k, label="weight_sync", cause="weight_sync")
        # a server idle before the sync waited for the others' tail while any still generated, and
        # then, none generating, on the trainer (the quota spent: the Rollouter pauses until the sync)
        clocks = rollouter.clocks[:rollouter.pool_servers]
        generating_until = max((c.cursor for c in clocks), default=env.now)
        for server_clock in clocks:
            if server_clock.cursor <= env.now:
                server_clock.idle("long_tail", min(generating_until, env.now), k)
                server_clock.idle("dependency", env.now, k, label=self.IDLE_BEFORE_SYNC)
                server_clock.busy("sync", t_end, k, label="weight_sync", cause="weight_sync")
        self.ctx.add_stage_time("weight_sync", self.sync_s)
        yield env.timeout(self.sync_s)
        rollouter.end_sync(k + 1, env.now)

    def _switch(self, to_phase: str, k: int) -> float:
        """The trainer's devices switched to ``to_phase`` (the engines asleep or awake), from its
        clock's cursor; the seconds it takes."""
        ctx, clock = self.ctx, self.trainer_clock
        cost = ctx.costs.switch(to_phase, clock.ranks)
        clock.busy("switch", clock.cursor + cost.time_s, k, label=f"to {to_phase}", cause="switch")
        ctx.add_switch_bytes(cost.bytes_moved, clock.rank_count)
        ctx.add_switch_parts(to_phase, cost.parts_s)
        ctx.add_stage_time(f"switch_to_{to_phase}", cost.time_s)
        return cost.time_s

    def _merge_iterations(self, first: int, end: float) -> None:
        """The version's local updates as one logged step (verl sums their timings)."""
        parts = self.ctx.iterations[first:]
        del self.ctx.iterations[first:]
        samples = sum(p["samples"] for p in parts)
        merged = {"iteration": parts[0]["iteration"], "start": parts[0]["start"], "train_end": parts[-1]["train_end"],
                  "samples": samples, "end": end}
        for key in ("tokens", "response_tokens", "queue_read_bytes", "queue_payload_bytes"):
            merged[key] = float(sum(p[key] for p in parts))
        merged["staleness_mean"] = float(sum(p["staleness_mean"] * p["samples"] for p in parts) / max(1, samples))
        merged["staleness_max"] = float(max(p["staleness_max"] for p in parts))
        self.ctx.iterations.append(merged)

    def _report(self) -> dict:
        """verl's own quantities (timing_s/*, fully_async/*, trainer/idle_ratio)."""
        store, rollouter = self.ctx.store, self.rollouter
        flat, retired = store.flat(), store.retired
        consumed = flat["consumed_iteration"] >= 0
        stale = int(np.sum(consumed & (flat["first_version"] < flat["consumed_iteration"]))) + retired.behind_first_version
        n_consumed = int(consumed.sum()) + retired.consumed
        # the v1 kinds (verl_v1.py) run the old-log-prob pass and record it: timing_s/old_log_prob, as verl logs it
        recorded = ("old_log_prob_s",) if self.versions and "old_log_prob_s" in self.versions[0] else ()
        mean = {key: float(np.mean([v[key] for v in self.versions])) if self.versions else 0.0
                for key in ("step_s", "gen_s", "update_actor_s", "ref_s", "sync_s", "idle_ratio", *recorded)}
        timing = {"step": mean["step_s"], "gen": mean["gen_s"], "update_actor": mean["update_actor_s"],
                  "ref": mean["ref_s"], "weight_sync": mean["sync_s"],
                  **({"old_log_prob": mean["old_log_prob_s"]} if recorded else {})}
        return {"prompts_per_version": self.per_version, "quota_prompts": self.quota,
                "started_per_version": list(rollouter.started_per_version), "per_version": self.versions,
                "timing_s": timing,
                "idle_ratio": mean["idle_ratio"], "stale_trajectory_processed": stale,
                "partial_ratio": rollouter.partial_count / max(1, store.n),
                "max_partial_span": rollouter.max_partial_span, "trajectories_consumed": n_consumed}


