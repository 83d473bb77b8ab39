"""FakeCosts: the closed-form answers to the cost protocol of costs.py, for testing schedule logic
on its own (every sequence decodes independently at a fixed per-token time; training and forwards
scale as tokens / devices; switches and syncs are constants), and its RolloutServer, FakeServer."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..llm.inference import no_counts
from ..llm.served import ServedCost
from .costs import RolloutOutcome, StageCost, SwitchCost


class Finished(NamedTuple):
    seq_id: int
    time_s: float


class Partial(NamedTuple):
    seq_id: int
    generated: int      # tokens generated before the interrupt (kept; a resume re-prefills them)



def list_schedule(durations: np.ndarray, slots: int, arrivals: np.ndarray | None = None) -> np.ndarray:
    """Finish times of jobs run FIFO on ``slots`` parallel slots (continuous batching, no interference);
    ``arrivals`` (non-decreasing in job order): when each job may start at the earliest (None: 0)."""
    n = len(durations)
    if arrivals is not None:
        return _list_schedule_arriving(np.asarray(durations, float), slots, np.asarray(arrivals, float))
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


def _list_schedule_arriving(durations: np.ndarray, slots: int, arrivals: np.ndarray) -> np.ndarray:
    """list_schedule with release times: job i starts at max(its arrival, the earliest free slot)."""
    if np.any(np.diff(arrivals) < 0):
        raise ValueError("arrivals must not decrease in job order")
    free = [0.0] * min(slots, len(durations))
    heapq.heapify(free)
    finish = np.empty(len(durations))
    for i, (duration, arrival) in enumerate(zip(durations.tolist(), arrivals.tolist(), strict=True)):
        start = max(heapq.heappop(free), arrival)
        finish[i] = start + duration
        heapq.heappush(free, finish[i])
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
    update_offload_seconds: float = 0.0   # a training phase's offload round trip (train_params.offload)
    host_copy_s: float = 0.0              # one copy of the training weights to or from host memory
    fetch_broadcast_Bps: float = float("inf")   # a hierarchical queue fetch's broadcast in a replica
    instance_kv_tokens: float = math.inf
    instance_seq_kv_tokens: float = 0.0
    teacher_s_per_token: float = 0.0          # a teacher engine's seconds per sample token (workload.distillation)
    teacher_devices: int = 1                  # devices of one teacher engine
    reward_model_s_per_token: float = 0.0     # a served reward model's engine's (workload.reward.served)
    reward_model_devices: int = 1             # devices of one reward-model engine

    def rollout(self, prompt_lens, response_lens, ranks, groups=None, arrivals=None):
        n_inst = max(1, len(ranks) // self.instance_devices)
        dur = self.prefill_s_per_token * np.asarray(prompt_lens, float) + \
            self.decode_s_per_token * np.asarray(response_lens, float)
        if arrivals is not None and n_inst != 1:
            raise ValueError("arrivals are for one instance's rollout")
        inst = np.arange(len(dur)) % n_inst
        finish = np.empty(len(dur))
        busy = np.zeros(n_inst)
        for i in range(n_inst):
            idx = np.flatnonzero(inst == i)
            if len(idx):
                finish[idx] = list_schedule(dur[idx], self.instance_max_seqs, None if arrivals is None
                                            else np.asarray(arrivals, float)[idx])
                busy[i] = finish[idx].max()
        tokens = float(np.sum(prompt_lens) + np.sum(response_lens))
        # no KV cache modelled: nothing preempted, hit or evicted, and prefills not counted (all 0)
        return RolloutOutcome(finish, inst, busy, flops=tokens * self.flops_per_token / 3, start_s=finish - dur,
                              counts=no_counts())

    def forward(self, role, seq_lens, ranks):
        tokens = float(np.sum(seq_lens))
        return StageCost(tokens * self.forward_device_s_per_token / len(ranks),
                         flops=tokens * self.flops_per_token / 3, peak_memory_bytes=self.memory_bytes)

    def train(self, role, seq_lens, ranks):
        tokens = float(np.sum(seq_lens))
        return StageCost(tokens * self.train_device_s_per_token / len(ranks),
                         flops=tokens * self.flops_per_token, peak_memory_bytes=self.memory_bytes)

    def reward_cpu_s(self, prompt_lens, response_lens):
        return np.full(len(response_lens), self.reward_s_per_sample)

    def served(self, role, prompt_lens, response_lens, ranks):
        """A served engine takes <role>_s_per_token a token, alone or batched (no batching gain): the
        pool of len(ranks) / <role>_devices engines serves that over its engines."""
        alone = getattr(self, f"{role}_s_per_token") * (np.asarray(prompt_lens, float) + np.asarray(response_lens, float))
        return ServedCost(alone / max(1, len(ranks) // self.served_instance_devices(role)), alone, np.zeros(len(alone)))

    def served_instance_devices(self, role):
        return getattr(self, f"{role}_devices")

    def weight_sync_s(self, src, dst):
        return self.sync_s

    def fetch_broadcast_s(self, nbytes, ranks):
        return nbytes / self.fetch_broadcast_Bps if self.train_group_devices > 1 else 0.0

    def switch(self, to_phase, ranks):
        return SwitchCost(self.switch_s, {})

    def engine_cycle(self, ranks):
        return SwitchCost(2 * self.switch_s, {})

    def inference_memory_bytes(self, ranks):
        return self.memory_bytes

    def update_offload_s(self, role, ranks):
        return self.update_offload_seconds

    def weight_host_copies_s(self, ranks, copies):
        return copies * self.host_copy_s

    def train_flops_per_token(self, seq_len):
        return self.flops_per_token

    def rollout_flops_per_token(self, context_len):
        return self.flops_per_token / 3   # rollout()'s flops: a forward, a third of a training token's

    def train_layout_of(self, ranks):
        return {}

    def set_train_layout(self, layout_map):
        """Closed-form costs have no layout: a re-plan keeps the replica size."""

    def accept_train_layout(self, layout_map):
        """Every layout fits: memory is the constant ``memory_bytes``."""

    @property
    def train_pool_unit(self) -> int:
        """No experts to fold: a pool is whole replicas."""
        return self.train_group_devices

    def train_devices_at_most(self, n_max):
        return (n_max // self.train_group_devices) * self.train_group_devices

    def rollout_server(self, ranks):
        return FakeServer(self.prefill_s_per_token, self.decode_s_per_token, self.instance_max_seqs)


@dataclass
class _Request:
    seq_id: int
    prompt: int
    response: int
    generated: int              # tokens already generated when (re)submitted
    kept: int = 0               # of prompt + generated, tokens whose KV is still cached (not prefilled)
    start_s: float = 0.0
    finish_s: float = 0.0


@dataclass
class FakeInterrupt:
    finished: list[Finished]
    partial: list[Partial]
    cached: dict[int, int] = field(default_factory=dict)   # running requests: prompt + generated


@dataclass
class FakeServer:
    """FakeCosts' RolloutServer: each request prefills its prompt (plus tokens it had) then decodes
    at a fixed rate on one of ``max_seqs`` slots, FIFO, independently of the others."""
    prefill_s_per_token: float
    decode_s_per_token: float
    max_seqs: int
    busy_s: float = 0.0
    _running: list = field(default_factory=list)    # heap of (finish_s, order, request)
    _waiting: list = field(default_factory=list)
    _order: int = 0
    _busy_from: float | None = None

    @property
    def load(self) -> int:
        return len(self._running) + len(self._waiting)

    def add_many(self, seq_ids, prompt_lens, response_lens, now, generated=None, group_ids=None, kept=None):
        gen = [0] * len(seq_ids) if generated is None else list(generated)
        cached = [0] * len(seq_ids) if kept is None else list(kept)
        for seq_id, p, r, g, k in zip(seq_ids, prompt_lens, response_lens, gen, cached, strict=True):
            self._waiting.append(_Request(int(seq_id), int(p), int(r), int(g), min(int(k), int(p) + int(g) - 1)))
        self._admit(now)

    def _admit(self, now: float) -> None:
        if self._busy_from is None and (self._running or self._waiting):
            self._busy_from = now
        while self._waiting and len(self._running) < self.max_seqs:
            req = self._waiting.pop(0)
            req.start_s = now
            req.finish_s = now + self.prefill_s_per_token * (req.prompt + req.generated - max(0, req.kept)) + \
                self.decode_s_per_token * (req.response - req.generated)
            heapq.heappush(self._running, (req.finish_s, self._order, req))
            self._order += 1

    def next_event_time(self):
        return self._running[0][0] if self._running else math.inf

    def advance_to(self, t):
        done = []
        while self._running and self._running[0][0] <= t:
            finish, _, req = heapq.heappop(self._running)
            done.append(Finished(req.seq_id, finish))
            self._admit(finish)
            if not self._running and not self._waiting:
                self.busy_s += finish - self._busy_from
                self._busy_from = None
        return done

    def take_waits(self) -> list[tuple[float, float]]:
        return []

    def counts(self) -> dict[str, int]:
        """No KV cache modelled: nothing preempted, hit or evicted, and prefills not counted (all 0)."""
        return no_counts()

    def interrupt(self, now):
        finished = self.advance_to(now)
        partial, cached = [], {}
        for _, _, req in sorted(self._running, key=lambda item: item[2].seq_id):
            decode_from = req.start_s + self.prefill_s_per_token * (req.prompt + req.generated - max(0, req.kept))
            steps = int(max(0.0, now - decode_from) / self.decode_s_per_token + 1e-9) if self.decode_s_per_token else 0
            partial.append(Partial(req.seq_id, min(req.response - 1, req.generated + steps)))
            if now >= decode_from:
                cached[req.seq_id] = req.prompt + partial[-1].generated
        partial += [Partial(req.seq_id, req.generated) for req in self._waiting]
        if self._busy_from is not None:
            self.busy_s += now - self._busy_from
        self._running, self._waiting, self._busy_from = [], [], None
        return FakeInterrupt(finished, sorted(partial), cached)
