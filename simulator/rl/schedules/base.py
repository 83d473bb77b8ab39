"""What every schedule shares: the run context, per-round length draws, generation on one rollout
instance (with partial rollout, over-provisioning and DAPO filtering), and the training step
(take samples within the staleness bound, fetch through DistQueue, forward stages, train).

Staleness of a consumed sample = training iteration k - weights version v that generated it
(version v = weights after v training steps). Trainer step k takes exactly the batch size B of
ready samples with v >= k - staleness, oldest first; older pending ones are dropped as 'stale'.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...des import Simulation
from ...scenario import Scenario
from ..algorithms import FORWARD, REWARD_CPU, TRAIN, Algorithm, build_algorithm
from ..costs import Costs, Ranks
from ..distqueue import DistQueue, fetch_load, payload_bytes
from ..pools import Pool
from ..samples import SampleStore
from ..timeline import GroupClock, Timeline

# sampler(rng, n_prompts, samples_per_prompt, step) -> int array (n_prompts, samples_per_prompt)
Sampler = Callable[[np.random.Generator, int, int, int], np.ndarray]


@dataclass
class SeqBatch:
    """Sequences to generate (or resume) on one instance."""
    round: np.ndarray
    group: np.ndarray
    prompt_len: np.ndarray
    target_len: np.ndarray      # full response length
    done_len: np.ndarray        # tokens generated in earlier segments (partial rollout)
    first_version: np.ndarray
    drop_reason: np.ndarray     # '' or why the sample is dropped once generated (no_signal, surplus)

    @staticmethod
    def empty() -> SeqBatch:
        z = np.zeros(0, int)
        return SeqBatch(z, z, z, z, z, z, np.zeros(0, object))

    def take(self, idx: np.ndarray) -> SeqBatch:
        return SeqBatch(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    @staticmethod
    def concat(a: SeqBatch, b: SeqBatch) -> SeqBatch:
        return SeqBatch(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in a.__dataclass_fields__))

    def __len__(self) -> int:
        return len(self.group)


@dataclass
class GenPlan:
    seqs: SeqBatch
    seg: np.ndarray          # tokens to generate this segment
    remaining: np.ndarray    # tokens left before this segment
    finish: np.ndarray       # seconds from t0
    start: np.ndarray        # seconds from t0
    flops: float
    t0: float
    version: int
    ranks: Ranks                 # the instance's devices
    progress_at: Callable[[float], np.ndarray] | None = None

    @property
    def end_s(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0


@dataclass
class RunRecord:
    """Raw output of a schedule run; metrics.py turns it into DataFrames and the summary."""
    scenario: Scenario
    n_devices: int
    pools: dict[str, Pool]
    timeline: Timeline
    samples: SampleStore
    iterations: list[dict]
    makespan_s: float
    flops: float
    gen_flops: float
    stage_time_s: dict[str, float]
    peak_memory_bytes: float
    queue: dict[str, float]
    switch_bytes: dict[str, float]
    peak_flops: float
    train_flops_per_token: float
    rollout: dict[str, float] = field(default_factory=dict)   # instance_s, slot_s, low_batch_s
    planning_s: float = 0.0                                     # layout: auto planning before the run
    failures: list[dict] = field(default_factory=list)         # one entry per failure event


class Context:
    def __init__(self, scenario: Scenario, costs: Costs, n_devices: int, pools: dict[str, Pool],
                 prompt_sampler: Sampler, response_sampler: Sampler, sim: Simulation | None = None):
        self.scenario, self.costs, self.n_devices, self.pools = scenario, costs, n_devices, pools
        self.w, self.sched = scenario.workload, scenario.schedule
        self.sim = sim or Simulation(scenario.seed)
        self.env = self.sim.env
        self.alg: Algorithm = build_algorithm(self.w)
        self.prompt_sampler, self.response_sampler = prompt_sampler, response_sampler
        self.timeline = Timeline()
        self.store = SampleStore()
        self.queue = DistQueue(self.env, self.sched.distqueue)
        self.B = self.w.batch_samples
        self.s = self.sched.effective_staleness
        self.f = self.sched.effective_threshold
        # StaleSync starts a step on the threshold share (the tail joins the next batch); every other
        # policy trains on full batches.
        self.min_batch = math.ceil(self.f * self.B - 1e-9) if self.sched.kind == "stalesync" else self.B
        self.iterations: list[dict] = []
        self.pad_len = float(self.w.prompt_length.get("max", 0) or 0) + float(self.w.response_length.get("max", 0) or 0) \
            or None
        self.flops = 0.0
        self.stage_time_s: dict[str, float] = {}
        self.peak_memory_bytes = 0.0
        self.switch_bytes: dict[str, float] = {}
        self._draws: dict[int, SeqBatch] = {}
        self.round_end: dict[int, float] = {}
        self.generated_tokens = 0.0
        self.gen_flops = 0.0
        self.clocks: list[GroupClock] = []
        # rollout slot accounting (metrics: occupancy and the low-batch tail)
        self.rollout = {"instance_s": 0.0, "slot_s": 0.0, "low_batch_s": 0.0}
        # layout: auto planning before the run (simulated seconds) and failures (rl/schedules/failures.py)
        self.start_s = 0.0
        self.replanner = None
        self.lost_s = 0.0
        self.failures: list[dict] = []
        self.out_of_run: list[tuple] = []     # (pool, rank_start, count, from_s, state, cause)

    # ---- lengths ----------------------------------------------------------------------------
    def _sample_groups(self, r: int, n_prompts: int, group0: int) -> tuple[np.ndarray, ...]:
        rng, n = self.sim.rng, self.w.samples_per_prompt
        prompt = np.asarray(self.prompt_sampler(rng, n_prompts, 1, r), int).reshape(n_prompts, 1)
        resp = np.asarray(self.response_sampler(rng, n_prompts, n, r), int).reshape(n_prompts, n)
        group = np.repeat(np.arange(group0, group0 + n_prompts), n)
        return group, np.repeat(prompt[:, 0], n), resp.reshape(-1)

    def draw(self, r: int) -> SeqBatch:
        """Round r's new sequences, drawn once, in round order, so every schedule sees the same lengths."""
        if r in self._draws:
            return self._draws[r]
        for q in range(len(self._draws), r + 1):
            self._draws[q] = self._draw_new(q)
        return self._draws[r]

    def _draw_new(self, r: int) -> SeqBatch:
        P, n = self.w.prompts_per_step, self.w.samples_per_prompt
        ds = self.w.dynamic_sampling
        parts, reasons = [], []
        group0 = r * 1_000_000
        if ds is None:
            n_prompts = math.ceil(P * (1 + self.sched.overprovision))
            parts.append(self._sample_groups(r, n_prompts, group0))
            reasons.append(np.full(n_prompts * n, "", object))
        else:  # DAPO: sub-rounds of gen_prompts until P groups carry a signal; surplus kept groups dropped
            gen = ds.gen_prompts or math.ceil(P / ds.keep_fraction)
            kept = 0
            while kept < P:
                g, p, resp = self._sample_groups(r, gen, group0 + sum(len(x[0]) // n for x in parts))
                signal = self.sim.rng.random(gen) < ds.keep_fraction
                reason = np.where(signal, "", "no_signal").astype(object)
                for j in np.flatnonzero(signal):
                    if kept >= P:
                        reason[j] = "surplus"
                    kept += 1
                parts.append((g, p, resp))
                reasons.append(np.repeat(reason, n))
        group = np.concatenate([x[0] for x in parts])
        prompt = np.concatenate([x[1] for x in parts])
        resp = np.concatenate([x[2] for x in parts])
        k = len(group)
        return SeqBatch(np.full(k, r), group, prompt, resp, np.zeros(k, int), np.zeros(k, int),
                        np.concatenate(reasons))

    def share(self, r: int, i: int, n_inst: int) -> SeqBatch:
        """Instance i's share of round r: round-robin dispatch (the same policy in every schedule)."""
        d = self.draw(r)
        return d.take(np.arange(i, len(d), n_inst))

    # ---- generation on one instance ---------------------------------------------------------
    def plan(self, seqs: SeqBatch, t0: float, version: int, ranks: Ranks) -> GenPlan:
        """Cost one instance's sequences from t0 (nothing committed yet)."""
        remaining = seqs.target_len - seqs.done_len
        seg = remaining.copy()
        if self.sched.partial_rollout and self.sched.length_budget:
            seg = np.minimum(remaining, self.sched.length_budget)
        if len(seqs):
            out = self.costs.rollout(seqs.prompt_len + seqs.done_len, seg, ranks)
            finish = np.asarray(out.finish_s, float)
            start = np.zeros(len(seqs)) if out.start_s is None else np.asarray(out.start_s, float)
            flops = out.flops
            progress = out.progress_at
        else:
            finish = start = np.zeros(0)
            flops = 0.0
            progress = None
        return GenPlan(seqs, seg, remaining, finish, start, flops, t0, version, ranks, progress)

    def generate(self, seqs: SeqBatch, t0: float, version: int, ranks: Ranks) -> tuple[float, SeqBatch, float]:
        """Plan and commit in one go; returns (busy end, carried sequences, generated tokens)."""
        return self.commit(self.plan(seqs, t0, version, ranks))

    def commit(self, p: GenPlan, stop_s: float | None = None) -> tuple[float, SeqBatch, float]:
        """Completed samples go to the store; sequences still running at t0 + stop_s (or cut by the
        length budget) are carried with their progress (linear in time between start and finish)."""
        seqs = p.seqs
        if not len(seqs):
            return p.t0, SeqBatch.empty(), 0.0
        self.gen_flops += p.flops
        finish, seg, remaining = p.finish, p.seg, p.remaining
        end = float(finish.max())
        aborted = np.zeros(len(seqs), bool)
        if self.sched.overprovision > 0:
            # keep the fastest 1/(1+x) of this instance's sequences; abort the slowest
            target = math.ceil(len(seqs) / (1 + self.sched.overprovision))
            if target < len(seqs):
                end = float(np.sort(finish, kind="stable")[target - 1])
                aborted = finish > end
        interrupted = np.zeros(len(seqs), bool)
        if stop_s is not None and stop_s < end:
            end = stop_s
            interrupted = (finish > end) & ~aborted
        cut = aborted | interrupted
        self._account_slots(np.minimum(finish, end), end)
        if cut.any() and p.progress_at is not None:
            # the engine's own interrupt: exact tokens generated by the cut, from the plan's own engine
            # run (the engine does not run a second time)
            gen_tokens = np.where(cut, np.minimum(p.progress_at(end), seg), seg)
        else:
            span = np.maximum(finish - p.start, 1e-12)
            progress = np.clip((end - p.start) / span, 0.0, 1.0)
            gen_tokens = np.where(cut, np.floor(seg * progress), seg)
        fin = ((seg >= remaining) & ~cut) | aborted
        ids = np.flatnonzero(fin)
        if len(ids):
            reward_s = self.costs.reward_cpu_s(len(ids), p.ranks) if self._rule_reward else 0.0
            reason = seqs.drop_reason[ids].copy()
            reason[aborted[ids]] = "overprovision"
            ftime = p.t0 + np.minimum(finish[ids], end)
            resumed = seqs.done_len[ids] > 0
            self.store.add(round_=seqs.round[ids], group=seqs.group[ids], prompt_len=seqs.prompt_len[ids],
                           response_len=seqs.target_len[ids],
                           generated_tokens=seqs.done_len[ids] + gen_tokens[ids], version=p.version,
                           first_version=np.where(resumed, seqs.first_version[ids], p.version),
                           start=p.t0, finish=ftime, ready=ftime + reward_s,
                           dropped=reason != "", drop_reason=reason)
            self.queue.write(payload_bytes(seqs.prompt_len[ids] + seqs.target_len[ids], self.sched.distqueue,
                                           pad_len=self.pad_len))
        keep = np.flatnonzero(~fin)
        carry = seqs.take(keep)
        carry.first_version = np.where(carry.done_len > 0, carry.first_version, p.version)
        carry.done_len = carry.done_len + gen_tokens[keep].astype(int)
        self.generated_tokens += float(gen_tokens.sum())
        return p.t0 + end, carry, float(gen_tokens.sum())

    def _account_slots(self, finish: np.ndarray, end: float) -> None:
        """Occupied batch slots of one instance over [0, end]: FIFO admission keeps
        min(unfinished, slots) sequences running (the engine admits as soon as a slot frees), so
        the occupancy falls once the queue drains - the long tail runs at low batch."""
        if end <= 0 or not len(finish):
            return
        cap = max(1, int(self.costs.instance_max_seqs))
        f = np.sort(finish)
        edges = np.concatenate([[0.0], f, [end]])
        dur = np.diff(edges)                                   # interval j: after j finishes
        running = np.minimum(len(f) - np.arange(len(f) + 1), cap)
        self.rollout["instance_s"] += end
        self.rollout["slot_s"] += float(np.dot(dur, running)) / cap
        self.rollout["low_batch_s"] += float(dur[running < self.sched.low_batch_share * cap].sum())

    @property
    def _rule_reward(self) -> bool:
        return any(s.kind == REWARD_CPU for s in self.alg.stages)

    # ---- training ---------------------------------------------------------------------------
    def ready_time(self, k: int, known_complete: bool) -> tuple[float, np.ndarray]:
        """Earliest time trainer step k can start from the samples known now, and the ids it takes.
        Needs B eligible samples (version >= k - s) and a share f of round k (if round k is fully known)."""
        f = self.store.flat()
        pend = self.store.pending()
        if not len(pend):
            return math.inf, pend
        elig = pend[f["version"][pend] >= math.ceil(k - self.s - 1e-9)]
        if len(elig) < self.min_batch:
            return math.inf, elig[:0]
        ready = f["ready"][elig]
        # time at which min_batch eligible samples exist
        t = float(np.partition(ready, self.min_batch - 1)[self.min_batch - 1])
        if self.f > 0:
            cur = elig[f["round"][elig] >= k]
            need = math.ceil(self.f * self.B - 1e-9)
            if len(cur) >= need:
                t = max(t, float(np.partition(f["ready"][cur], need - 1)[need - 1]))
            elif not known_complete:
                return math.inf, elig[:0]
        avail = elig[ready <= t]
        order = np.lexsort((f["ready"][avail], f["version"][avail]))   # oldest weights first, then earliest
        return t, avail[order[: self.B]]

    def drop_stale(self, k: int) -> None:
        f = self.store.flat()
        pend = self.store.pending()
        stale = pend[f["version"][pend] < math.ceil(k - self.s - 1e-9)]
        if len(stale):
            self.store.drop(stale, "stale")

    def add_stage_time(self, name: str, dt: float) -> None:
        self.stage_time_s[name] = self.stage_time_s.get(name, 0.0) + dt

    def train_step(self, k: int, ids: np.ndarray, main: GroupClock, aux: GroupClock | None = None):
        """Consume ``ids`` at iteration k on ``main`` (forward stages on ``aux`` when given, in
        parallel with the actor's own forwards). A simpy process body: yield from it."""
        env = self.env
        f = self.store.flat()
        ids = np.sort(ids)   # mini-batches in generation order, not finish order (no length bias)
        self.store.consume(ids, k)
        lens = f["prompt_len"][ids] + f["response_len"][ids]
        t_start = env.now
        # DistQueue fetch (one reader per TP x PP group, or every rank)
        load = fetch_load(lens, self.sched.distqueue, main.rank_count, self.costs.train_group_devices,
                          pad_len=self.pad_len)
        t_q = env.now
        yield from self.queue.read(load)
        main.busy("fetch", env.now, k, label="distqueue", cause="data")
        self.add_stage_time("fetch", env.now - t_q)
        # forward stages: actor-side ones on main; reference / reward / critic on aux when split
        main_t, aux_t = env.now, env.now
        for st in self.alg.of_kind(FORWARD):
            clock = aux if (aux is not None and st.role != "actor") else main
            cost = self.costs.forward(st.role, lens, clock.ranks)
            self.flops += cost.flops
            self.peak_memory_bytes = max(self.peak_memory_bytes, cost.peak_memory_bytes)
            if clock is main:
                main_t += cost.time_s
                main.busy("forward", main_t, k, label=st.name)
            else:
                aux_t += cost.time_s
                aux.busy("forward", aux_t, k, label=st.name)
            self.add_stage_time(st.name, cost.time_s)
        t_fw = max(main_t, aux_t)
        main.idle("dependency", t_fw, k)
        if aux is not None:
            aux.idle("dependency", t_fw, k)
        # training: ppo_epochs x mini-batches, each one optimizer step
        mb = np.array_split(np.arange(len(ids)), self.w.mini_batches)
        t_main, t_aux = t_fw, t_fw
        for st in self.alg.of_kind(TRAIN):
            clock = aux if (aux is not None and st.role != "actor") else main
            t_stage = 0.0
            for _ in range(self.w.ppo_epochs):
                for part in mb:
                    cost = self.costs.train(st.role, lens[part], clock.ranks)
                    self.flops += cost.flops
                    self.peak_memory_bytes = max(self.peak_memory_bytes, cost.peak_memory_bytes)
                    t0 = (t_aux if clock is aux else t_main) + t_stage
                    clock.busy("train", t0 + cost.time_s - cost.bubble_s, k, label=st.name)
                    clock.idle("pipeline_bubble", t0 + cost.time_s, k, label=st.name)
                    t_stage += cost.time_s
            if clock is aux:
                t_aux += t_stage
            else:
                t_main += t_stage
            self.add_stage_time(st.name, t_stage)
        t_end = max(t_main, t_aux)
        main.idle("dependency", t_end, k)
        if aux is not None:
            aux.idle("dependency", t_end, k)
        yield env.timeout(t_end - env.now)
        self.iterations.append({
            "iteration": k, "start": t_start, "train_end": t_end, "samples": len(ids),
            "tokens": float(lens.sum()), "response_tokens": float(f["response_len"][ids].sum()),
            "staleness_mean": float(np.mean(k - f["version"][ids])),
            "staleness_max": float(np.max(k - f["version"][ids])),
            "queue_read_bytes": load.read_bytes, "queue_payload_bytes": load.payload_bytes})

    def record(self, makespan: float) -> RunRecord:
        for clock in self.clocks:
            if clock.cursor < makespan:
                clock.idle("dependency", makespan, label="end of run")
        self.timeline.clip(makespan)
        for pool, a, n, t, state, cause in self.out_of_run:
            self.timeline.add(pool, a, n, state, t, makespan, cause=cause, label="failure")
        used = max(p.start + p.count for p in self.pools.values())
        if used < self.n_devices:   # devices no pool could use (whole instances / replicas only)
            self.timeline.add("unused", used, self.n_devices - used, "idle", 0.0, makespan, cause="placement")
        # samples never consumed by the end of the run are dropped explicitly
        pend = self.store.pending()
        if len(pend):
            self.store.drop(pend, "unused")
        return RunRecord(self.scenario, self.n_devices, self.pools, self.timeline, self.store,
                         self.iterations, makespan, self.flops, self.gen_flops, self.stage_time_s, self.peak_memory_bytes,
                         self.queue.stats(), self.switch_bytes, self.costs.peak_flops,
                         self.costs.train_flops_per_token(float(np.mean(self._mean_len()))),
                         dict(self.rollout), self.start_s, list(self.failures))

    def start_clock(self, clock: GroupClock, label: str = "layout: auto") -> None:
        """The planning before the run (layout: auto): state ``plan``, cause ``planning``."""
        if self.start_s > 0:
            clock.busy("plan", self.start_s, -1, label=label, cause="planning")

    def _mean_len(self) -> float:
        f = self.store.flat()
        if not len(f["sample"]):
            return 1.0
        return float(np.mean(f["prompt_len"] + f["response_len"]))


@dataclass
class Gate:
    """Rollout run-ahead gate: round r may start once version + staleness + extra >= r."""
    version: int = 0
    extra: int = 0
    waiting: dict[int, int] = field(default_factory=dict)   # instance -> round it waits for

    def open(self, r: int, s: float) -> bool:
        return self.version + self.extra >= math.ceil(r - s - 1e-9)
