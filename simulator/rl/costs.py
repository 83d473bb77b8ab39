"""The one facade between the schedules and the cost models.

Schedules ask only these questions (times in seconds, from the start of the stage):
  rollout(prompt_lens, response_lens, n_devices)  -> per-sequence finish times, per-instance busy
  forward(role, seq_lens, n_devices)              -> StageCost (old-logprob / reference / reward / critic)
  train(role, seq_lens, n_devices)                -> StageCost of one optimizer step on these sequences
  reward_cpu_s(n_samples, n_devices)              -> host time of rule-based rewards
  weight_sync_s(src, dst)                         -> trainer -> rollout weight broadcast (pools)
  switch(to_phase, n_devices)                     -> SwitchCost of a colocated phase change
  inference_memory_bytes(n_devices)               -> per-device memory in the rollout phase
``FakeCosts`` answers them in closed form so the schedule logic is testable on its own;
``simulator.rl.llm_costs.LlmCosts`` answers them from the llm/ and network/ models.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class RolloutOutcome:
    finish_s: np.ndarray          # per sequence, seconds from the round start
    instance: np.ndarray          # instance index of each sequence
    instance_busy_s: np.ndarray   # per instance, seconds from the round start to its last finish
    flops: float = 0.0
    start_s: np.ndarray | None = None   # per sequence, when it joined the running batch (None: at 0)


@dataclass(frozen=True)
class StageCost:
    time_s: float
    flops: float = 0.0
    bubble_s: float = 0.0          # pipeline-bubble share inside time_s (idle, cause pipeline_bubble)
    peak_memory_bytes: float = 0.0


@dataclass(frozen=True)
class SwitchCost:
    time_s: float
    bytes_moved: dict[str, float] = field(default_factory=dict)


class Costs(Protocol):
    instance_devices: int          # devices per rollout instance (TP x EP of inference)
    instance_max_seqs: int         # running sequences one instance holds (max_num_seqs / KV bound)
    train_group_devices: int       # devices per training replica (TP x PP x CP): DP granule
    peak_flops: float              # per device, the workload's dtype

    def rollout(self, prompt_lens: np.ndarray, response_lens: np.ndarray, n_devices: int) -> RolloutOutcome: ...
    def forward(self, role: str, seq_lens: np.ndarray, n_devices: int) -> StageCost: ...
    def train(self, role: str, seq_lens: np.ndarray, n_devices: int) -> StageCost: ...
    def reward_cpu_s(self, n_samples: int, n_devices: int) -> float: ...
    def weight_sync_s(self, src: range, dst: range) -> float: ...
    def switch(self, to_phase: str, n_devices: int) -> SwitchCost: ...
    def inference_memory_bytes(self, n_devices: int) -> float: ...
    def train_flops_per_token(self, seq_len: float) -> float: ...


def list_schedule(durations: np.ndarray, slots: int) -> np.ndarray:
    """Finish times of jobs run FIFO on ``slots`` parallel slots (continuous batching, no interference)."""
    n = len(durations)
    if n <= slots:
        return durations.astype(float).copy()
    finish = np.empty(n)
    finish[:slots] = durations[:slots]
    heap = [float(x) for x in durations[:slots]]
    heapq.heapify(heap)
    for i in range(slots, n):
        start = heapq.heappop(heap)
        finish[i] = start + float(durations[i])
        heapq.heappush(heap, finish[i])
    return finish


@dataclass
class FakeCosts:
    """Closed-form costs for testing schedule logic. Each sequence decodes independently at a fixed
    per-token time on one of ``max_seqs`` slots of its instance; training and forwards scale as
    tokens / devices; switches and syncs are constants."""
    instance_devices: int = 1
    train_group_devices: int = 1
    instance_max_seqs: int = 1_000_000
    prefill_s_per_token: float = 0.0
    decode_s_per_token: float = 1e-3
    train_device_s_per_token: float = 1e-3     # device-seconds per trained token
    forward_device_s_per_token: float = 3e-4
    reward_s_per_sample: float = 0.0
    sync_s: float = 1.0
    switch_s: float = 0.0
    peak_flops: float = 1e15
    flops_per_token: float = 1e11              # training FLOP per token (forward = a third)
    memory_bytes: float = 1e9

    def rollout(self, prompt_lens, response_lens, n_devices):
        n_inst = max(1, n_devices // self.instance_devices)
        dur = self.prefill_s_per_token * np.asarray(prompt_lens, float) + \
            self.decode_s_per_token * np.asarray(response_lens, float)
        inst = np.arange(len(dur)) % n_inst
        finish = np.empty(len(dur))
        busy = np.zeros(n_inst)
        for i in range(n_inst):
            idx = np.flatnonzero(inst == i)
            if len(idx):
                finish[idx] = list_schedule(dur[idx], self.instance_max_seqs)
                busy[i] = finish[idx].max()
        tokens = float(np.sum(prompt_lens) + np.sum(response_lens))
        return RolloutOutcome(finish, inst, busy, flops=tokens * self.flops_per_token / 3, start_s=finish - dur)

    def forward(self, role, seq_lens, n_devices):
        tokens = float(np.sum(seq_lens))
        return StageCost(tokens * self.forward_device_s_per_token / n_devices,
                         flops=tokens * self.flops_per_token / 3, peak_memory_bytes=self.memory_bytes)

    def train(self, role, seq_lens, n_devices):
        tokens = float(np.sum(seq_lens))
        return StageCost(tokens * self.train_device_s_per_token / n_devices,
                         flops=tokens * self.flops_per_token, peak_memory_bytes=self.memory_bytes)

    def reward_cpu_s(self, n_samples, n_devices):
        return self.reward_s_per_sample

    def weight_sync_s(self, src, dst):
        return self.sync_s

    def switch(self, to_phase, n_devices):
        return SwitchCost(self.switch_s, {})

    def inference_memory_bytes(self, n_devices):
        return self.memory_bytes

    def train_flops_per_token(self, seq_len):
        return self.flops_per_token
