"""The state of one schedule run that its parts share: scenario, costs, pools, the simpy
environment, the sample store and queue, running totals, and the record the metrics read."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...des import Simulation
from ...scenario import Scenario
from ..algorithms import REWARD_CPU, REWARD_SERVED, Algorithm, build_algorithm
from ..costs import Costs
from ..distqueue import DistQueue
from ..pools import SERVED_FIELDS, Pool
from ..samples import SampleStore
from ..timeline import GroupClock, Timeline
from .batches import RoundDraws, Sampler, SeqBatch, in_flight_figures
from .generation import Generation
from .reward_pool import RewardPool
from .staleness import TIME_TOL_S
from .state import RunTotals
from .training import TrainStep

if TYPE_CHECKING:   # imported at the first fold: the run reaches its first event without it
    from ..critical_path import OnlinePaths


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
    extra: dict = field(default_factory=dict)                  # a schedule's own figures (summary keys)
    online_paths: OnlinePaths | None = None                     # steps whose critical path the run walked
    # per optimizer step: (pool, rank_start, rank_count, label, start, end, last stage, ((part, s), ...)),
    # StageCost.path_s: the trainer's own critical chain (critical_path.with_trainer_parts)
    trainer_paths: list = field(default_factory=list)
    phase_peak_bytes: dict[str, float] = field(default_factory=dict)   # RunTotals.phase_peak_bytes
    switch_parts_s: dict[str, float] = field(default_factory=dict)     # RunTotals.switch_parts_s
    # generation's hardware FLOPs: gen_flops (model FLOPs) and every re-prefill (RunTotals.gen_hardware_flops)
    gen_hardware_flops: float = 0.0


@dataclass(frozen=True)
class OutOfRun:
    """Ranks out of the run from ``from_s`` (failed, or left out by a re-plan)."""
    pool: str
    rank_start: int
    rank_count: int
    from_s: float
    state: str
    cause: str


class Context:
    def __init__(self, scenario: Scenario, costs: Costs, n_devices: int, pools: dict[str, Pool],
                 prompt_sampler: Sampler, response_sampler: Sampler, sim: Simulation | None = None,
                 keep_samples: bool = True):
        self.scenario, self.costs, self.n_devices, self.pools = scenario, costs, n_devices, pools
        self.workload, self.sched = scenario.workload, scenario.schedule
        self.sim = sim or Simulation(scenario.seed)
        self.env, self.timeline = self.sim.env, self.sim.timeline
        self.alg: Algorithm = build_algorithm(self.workload)
        self.rule_reward = any(stage.kind == REWARD_CPU for stage in self.alg.stages)
        self.served_reward = any(stage.kind == REWARD_SERVED for stage in self.alg.stages)
        self.shared_reward = scenario.workload.reward.workers is not None
        self.draws = RoundDraws(scenario, self.sim.rng, prompt_sampler, response_sampler)
        # keep_samples=False (no output shows the per-sample table): rows fold as soon as the online
        # critical path has walked them; with schedule.failures every row stays (a roll-back rewrites them)
        fold_all = not keep_samples and not self.sched.failures
        keep_rows = 0 if fold_all else scenario.output.keep_sample_rows
        self.store = SampleStore(keep_rows=keep_rows, table=keep_samples)
        self.walk_online = keep_rows is not None and not self.sched.failures
        self.online: OnlinePaths | None = None      # made at the first fold (after the run's first event)
        # A schedule that stores samples some time after they finish says from when (verl_async):
        # the earliest finish a sample not in the store yet may have; None: stored when the clocks pass it.
        self.unstored_from: Callable[[], float] | None = None
        self.queue = DistQueue(self.env, self.sched.distqueue)
        self.batch_samples = self.workload.batch_samples
        self.staleness = self.sched.effective_staleness
        self.threshold = self.sched.effective_threshold
        self.pad_len = float(self.workload.prompt_length.get("max", 0) or 0) + \
            float(self.workload.response_length.get("max", 0) or 0) or None
        self.totals = RunTotals()
        self.iterations: list[dict] = []
        self.round_end: dict[int, float] = {}
        self.clocks: list[GroupClock] = []
        self.gen = Generation(self)
        self.trainer = TrainStep(self)
        # layout: auto planning before the run (simulated seconds) and failures (failures.py)
        self.start_s = 0.0
        self.replanner = None
        self.lost_s = 0.0
        self.failures: list[dict] = []
        self.out_of_run: list[OutOfRun] = []
        self.extra: dict = {}        # a schedule's own figures, added to the summary under their keys
        # What the run leaves generating at its end (the summary's samples_in_flight): the runner's
        # (sequences, tokens each generated so far) at a time; None: nothing. A kind that reports
        # samples_in_flight itself (verl's, AReaL's Rollouter) leaves it None.
        self.in_flight_at: Callable[[float], list[tuple[SeqBatch, np.ndarray]]] | None = None
        self.trainer_paths: list = []   # RunRecord.trainer_paths

    def add_stage_time(self, name: str, dt: float, span: tuple[float, float] | None = None) -> None:
        """``dt`` more of stage ``name``; ``span``: the (start, end) it covers, uniformly, when it may
        run past the run's end (what lies past the end is taken out in ``record``)."""
        self.totals.stage_time_s[name] = self.totals.stage_time_s.get(name, 0.0) + dt
        if span is not None and span[1] > span[0]:
            self.totals.stage_spans.append((name, span[0], span[1], dt / (span[1] - span[0])))

    def add_switch_bytes(self, moved: dict[str, float], n_devices: int) -> None:
        for key, per_device in moved.items():
            self.totals.switch_bytes[key] = self.totals.switch_bytes.get(key, 0.0) + per_device * n_devices

    def add_switch_parts(self, direction: str, parts_s: dict[str, float]) -> None:
        """A colocated switch's seconds by whose work (SwitchCost.parts_s), under ``direction``."""
        for part, seconds in parts_s.items():
            key = f"{direction}.{part}"
            self.totals.switch_parts_s[key] = self.totals.switch_parts_s.get(key, 0.0) + seconds

    def note_memory(self, peak_bytes: float, phase: str) -> None:
        """A device's bytes in ``phase`` (train or rollout): the run's peak and the phase's."""
        self.totals.peak_memory_bytes = max(self.totals.peak_memory_bytes, peak_bytes)
        self.totals.phase_peak_bytes[phase] = max(self.totals.phase_peak_bytes.get(phase, 0.0), peak_bytes)

    def fold_samples(self) -> None:
        """Fold the per-sample rows no output needs any more into counts (output.keep_sample_rows,
        or keep_samples=False): first the critical path walks every step it can (OnlinePaths)."""
        store = self.store
        if store.keep_rows is None:
            return
        if not self.walk_online:
            store.retire(self.env.now)
            return
        if self.online is None:
            from ..critical_path import OnlinePaths
            self.online = OnlinePaths(self.timeline, store, self.sched.tail_threshold)
        online = self.online
        recorded = [clock.cursor for clock in self.clocks]
        if self.unstored_from is not None:
            recorded.append(self.unstored_from())
        online.advance(self.iterations, recorded)
        store.retire(self.env.now, read_after=online.floor(), read_from_iteration=online.next_step(self.iterations))

    def start_clock(self, clock, label: str = "layout: auto") -> None:
        """The planning before the run (layout: auto): state ``plan``, cause ``planning``."""
        if self.start_s > 0:
            clock.busy("plan", self.start_s, -1, label=label, cause="planning")

    def record(self, makespan: float) -> RunRecord:
        for clock in self.clocks:
            if clock.cursor < makespan:
                clock.idle("dependency", makespan, label="end of run")
        if self.online is not None:
            self.online.check()      # the end-of-run idle above included
        self.timeline.clip(makespan)
        for out in self.out_of_run:
            self.timeline.add(out.pool, out.rank_start, out.rank_count, out.state, out.from_s, makespan,
                              cause=out.cause, label="failure")
        served = [self.pools[role] for role in SERVED_FIELDS if role in self.pools]
        for pool in served:
            self._record_served(pool, makespan)
        # devices no pool could use (whole instances / replicas only): after the pools, or between
        # them (colocated: the actor rounded down to whole instances, verl's reward pool at the end)
        for first, count in unused_ranges(self.pools.values(), self.n_devices):
            self.timeline.add("unused", first, count, "idle", 0.0, makespan, cause="placement")
        pending = self.store.pending()    # samples never consumed by the end of the run: dropped explicitly
        if len(pending):
            late = self.store.at("finish", pending) > makespan + TIME_TOL_S   # still generating at the end
            self.store.drop(pending[~late], "unused")
            self.store.drop(pending[late], "unfinished")
        if "samples_in_flight" not in self.extra:   # started, not in the store: in no other count
            self.extra["samples_in_flight"] = in_flight_figures(self.in_flight_at(makespan) if self.in_flight_at else [])
        totals = self.totals
        for name, start, end, weight in totals.stage_spans:   # generation planned past the run's end
            if end > makespan:
                totals.stage_time_s[name] -= (end - max(start, makespan)) * weight
        totals.stage_spans.clear()
        if "rollout" in self.pools:   # split pools: the rollout devices hold the engine's reservation
            self.note_memory(self.costs.inference_memory_bytes(self.pools["rollout"].ranks), "rollout")
        if self.rule_reward and self.shared_reward:   # is the job's reward pool a bottleneck?
            busy = totals.reward_pool.busy_s(0.0, makespan)
            self.extra["reward_pool"] = {"workers": self.workload.reward.workers, "busy_s": busy,
                                         "utilization": busy / makespan if makespan > 0 else 0.0}
        return RunRecord(self.scenario, self.n_devices, self.pools, self.timeline, self.store, self.iterations,
                         makespan, totals.flops, totals.gen_flops, totals.stage_time_s, totals.peak_memory_bytes,
                         self.queue.stats(makespan), totals.switch_bytes, self.costs.peak_flops,
                         self.costs.train_flops_per_token(self._mean_len()), dict(totals.rollout),
                         self.start_s, list(self.failures), dict(self.extra), self.online, self.trainer_paths,
                         dict(totals.phase_peak_bytes), dict(totals.switch_parts_s), totals.gen_hardware_flops)

    def _record_served(self, served: Pool, makespan: float) -> None:
        """A served pool's busy stretches up to the run's end (state forward, label its role: its
        engines prefill the samples handed to them) and its waits for samples between them; its
        FLOPs within the run, its stage time (teacher, or reward) and how busy it was (summary key
        <role>_pool)."""
        role, totals = served.name, self.totals
        pool = totals.served.setdefault(role, RewardPool())
        at = 0.0
        for start, end in zip(pool.starts, pool.ends, strict=True):
            if start >= makespan:
                break
            self.timeline.add(role, served.start, served.count, "idle", at, start, cause="dependency", label=role)
            at = min(end, makespan)
            self.timeline.add(role, served.start, served.count, "forward", start, at, label=role)
        self.timeline.add(role, served.start, served.count, "idle", at, makespan, cause="dependency", label=role)
        busy, scheduled = pool.busy_s(0.0, makespan), pool.busy_s()
        totals.flops += totals.served_flops.get(role, 0.0) * (busy / scheduled if scheduled > 0 else 0.0)
        self.add_stage_time("reward" if role == "reward_model" else role, busy)
        self.extra[f"{role}_pool"] = {"devices": served.count,
                                      "engines": served.count // self.costs.served_instance_devices(role),
                                      "busy_s": busy, "utilization": busy / makespan if makespan > 0 else 0.0}

    def _mean_len(self) -> float:
        flat, retired = self.store.flat(), self.store.retired
        if not retired.count:
            return float(np.mean(flat["prompt_len"] + flat["response_len"])) if len(flat["sample"]) else 1.0
        held = int(np.sum(flat["prompt_len"] + flat["response_len"]))    # integers: exact in any order
        return float(retired.tokens + held) / (retired.count + len(flat["sample"]))


class IterationLog(list):
    """``Context.iterations`` that reports each iteration appended to ``progress(done, total)`` (the
    terminal progress bar of `rlsim run`); a roll-back after a failure shortens it as a list does."""

    def __init__(self, progress: Callable[[int, int], None], total: int) -> None:
        super().__init__()
        self.progress, self.total = progress, total

    def append(self, item: dict) -> None:
        super().append(item)
        self.progress(min(len(self), self.total), self.total)


def unused_ranges(pools: Iterable[Pool], n_devices: int) -> list[tuple[int, int]]:
    """(first rank, count) of each run of the ``n_devices`` ranks that no pool holds, in rank order."""
    out, cursor = [], 0
    for pool in sorted(pools, key=lambda p: p.start):
        if pool.start > cursor:
            out.append((cursor, pool.start - cursor))
        cursor = max(cursor, pool.start + pool.count)
    if cursor < n_devices:
        out.append((cursor, n_devices - cursor))
    return out
