"""What the runner parts (generation, training step) read and add to: the run's totals and the
shape of the run state (context.Context implements it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import simpy

from ...scenario import ScheduleConfig, WorkloadConfig
from ..algorithms import Algorithm
from ..costs import Costs
from ..distqueue import DistQueue
from ..pools import Pool
from ..samples import SampleStore
from ..timeline import Timeline
from .reward_pool import RewardPool


@dataclass
class RunTotals:
    """What a run adds up as it goes (a failure roll-back restores a copy)."""
    flops: float = 0.0
    # generation's model FLOPs (the summary's mfu: each prompt prefilled once where the prefix cache
    # shared it, each generated token once) and its hardware FLOPs (those and every re-prefill the
    # engines did: after a preemption, a multi-turn eviction, a partial rollout's resumption);
    # docs/schedules.md "Generation FLOPs follow what the engines computed", generation_flops.py
    gen_flops: float = 0.0
    gen_hardware_flops: float = 0.0
    generated_tokens: float = 0.0
    peak_memory_bytes: float = 0.0
    # the peak per device by phase: train (training and forward passes) and rollout (the engine's
    # reservation, with the training state a colocated placement leaves resident)
    phase_peak_bytes: dict[str, float] = field(default_factory=dict)
    stage_time_s: dict[str, float] = field(default_factory=dict)
    # (stage, start, end, weight) of stage time that may run past the run's end (a split pool's
    # generation runs ahead): the part past it is taken out when the run is recorded
    stage_spans: list[tuple[str, float, float, float]] = field(default_factory=list)
    switch_bytes: dict[str, float] = field(default_factory=dict)
    # the colocated switches' seconds by direction and whose work (SwitchCost.parts_s): "rollout.trainer",
    # "train.engine_weights", "between.engine_memory", ... summed over the run (one pool's clock)
    switch_parts_s: dict[str, float] = field(default_factory=dict)
    # rollout slot accounting (metrics: occupancy and the low-batch tail)
    rollout: dict[str, float] = field(default_factory=lambda: {"instance_s": 0.0, "slot_s": 0.0, "low_batch_s": 0.0})
    # the job's shared rule-reward workers (workload.reward.workers): what they are busy with
    reward_pool: RewardPool = field(default_factory=RewardPool)
    # each instance's own rule-reward workers (workers_per_device), by the instance's rank range
    instance_reward_pools: dict[tuple[int, ...], RewardPool] = field(default_factory=dict)
    # the served models' pools (a reward model, a distillation teacher; served.py), by role: what each
    # is busy with, and the FLOPs of its prefills
    served: dict[str, RewardPool] = field(default_factory=dict)
    served_flops: dict[str, float] = field(default_factory=dict)



class RunState(Protocol):
    costs: Costs
    sched: ScheduleConfig
    workload: WorkloadConfig
    env: simpy.Environment
    timeline: Timeline
    pools: dict[str, Pool]
    alg: Algorithm
    store: SampleStore
    queue: DistQueue
    totals: RunTotals
    iterations: list[dict]
    rule_reward: bool
    served_reward: bool            # a reward model on engines of its own (workload.reward.served)
    shared_reward: bool            # rule rewards on the job's shared pool (workload.reward.workers)
    pad_len: float | None
    batch_samples: int
    staleness: float
    threshold: float

    def add_stage_time(self, name: str, dt: float, span: tuple[float, float] | None = None) -> None: ...
