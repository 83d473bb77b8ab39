"""FROZEN copy of simulator/llm/inference.py as of main ab8cde4 (before the array engine): the
reference the optimised engine is compared against, byte for byte (tests/llm/test_engine_vs_frozen.py,
benchmarks/bench_engine.py). Used only by tests and benchmarks; never edit it to follow the engine.

The rollout (inference) engine: continuous batching, jumped event to event in closed form.

An instance spans ``tp * ep`` devices. The non-expert part of the model (attention, dense FFN,
shared experts, embeddings) is tensor-parallel over ``tp`` devices and replicated ``ep`` times:
each of the ``ep`` attention replicas serves its own share of the running sequences (data-parallel
attention, as DeepSeek / SGLang / CloudMatrix-Infer deploy MoE decode). Routed experts are split
over the ``ep`` replicas and tensor-parallel inside each, so every device holds E/ep experts / tp.
A dense model has ep = 1. Sequences are assumed spread evenly over the replicas.

Cost of one step (all formulas in docs/cost-models-inference.md):
- decode (one token for each of n running sequences with K context tokens in total):
  max(compute, memory) + step overhead + TP all-reduces + EP all-to-alls, where compute and memory
  are linear in K, so while the running set is unchanged (K grows by n per step) k steps sum to an
  arithmetic series (two, when the max switches side once);
- prefill of newly admitted sequences: a separate compute-bound step that yields their first token
  (a preempted sequence re-prefills its prompt and the tokens it had generated: recompute).
KV capacity: (HBM x gpu_memory_utilization - weights - workspace) / KV bytes per token, per device.
When the next step would not fit, the newest running sequence is preempted.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import RlsimError, validation_error
from simulator.hardware.devices import distinct_devices
from simulator.llm.architecture import DTYPE_BYTES, ModelSpec, dtype_bytes
from simulator.network.collectives import line_time_s
from simulator.params import InferenceParams

_COMPUTE_DTYPE = {"int8": "int8", "fp8": "fp8", "fp16": "fp16"}  # W8A8 / FP8 GEMMs; others run in bf16
_FIT_FIX = "raise tp or ep, use weight_dtype int8/fp8, lower workspace_bytes, or pick a larger device"


class RolloutLayout(BaseModel):
    """How rollout instances are laid out (`workload.rollout_layout`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    instances: int = Field(1, ge=1)
    # Per attention replica, as vLLM's max_num_seqs per engine (vLLM default 256).
    max_num_seqs: int = Field(256, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM default 0.9
    weight_dtype: str = "bf16"  # bf16 | fp16 | fp8 | int8 (DeepSeek-R1 on CloudMatrix384: int8)
    kv_dtype: str = "bf16"

    @property
    def devices_per_instance(self) -> int:
        return self.tp * self.ep

    @property
    def devices(self) -> int:
        return self.devices_per_instance * self.instances

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str = "<rollout_layout>",
                     field_name: str = "rollout_layout") -> RolloutLayout:
        try:
            layout = cls(**dict(mapping))
        except ValidationError as exc:
            raise validation_error(exc, source=source, prefix=field_name,
                                   fix="see docs/cost-models-inference.md for the fields") from None
        except TypeError:
            raise RlsimError(f"expected a mapping, got {mapping!r}", source=source, field=field_name) from None
        for name in ("weight_dtype", "kv_dtype"):
            dtype_bytes(getattr(layout, name), f"{field_name}.{name}", source)
        return layout


class Finished(NamedTuple):
    seq_id: int
    time_s: float


class PartialSequence(NamedTuple):
    """An unfinished sequence at an interrupt: resume it with add(..., generated=generated)."""

    seq_id: int
    prompt_len: int
    response_len: int
    generated: int


@dataclass
class InterruptResult:
    finished: list[Finished]
    partial: list[PartialSequence]


# ---- the cost of one step -------------------------------------------------------------------------
class StepCost:
    """Per-device cost of prefill and decode steps of one instance layout (pure, no state)."""

    def __init__(self, model: ModelSpec, device: Any, layout: RolloutLayout,
                 params: InferenceParams | None = None, collectives: Any = None,
                 ranks: Sequence[int] | None = None) -> None:
        self.model, self.device, self.layout = model, device, layout
        self.params = params = params or InferenceParams()
        tp, ep = layout.tp, layout.ep
        _check_layout(model, layout)
        self.collectives = collectives
        self.ranks = list(ranks) if ranks is not None else None
        if self.ranks is not None and len(self.ranks) != layout.devices_per_instance:
            raise ValueError(f"an instance needs {layout.devices_per_instance} ranks, got {len(self.ranks)}")
        wbytes = dtype_bytes(layout.weight_dtype, "rollout_layout.weight_dtype")
        kvbytes = dtype_bytes(layout.kv_dtype, "rollout_layout.kv_dtype")
        self.devices = tp * ep
        # Weights per device: non-expert part / tp; routed experts / (tp ep).
        self.expert_bytes_dev = model.params_routed_experts * wbytes / (tp * ep)
        self.dense_bytes_dev = (model.params_total - model.params_routed_experts) * wbytes / tp
        self.weight_bytes_dev = self.dense_bytes_dev + self.expert_bytes_dev
        lookup_only = model.params_embedding - (model.vocab * model.hidden if model.tied_embeddings else 0)
        self.streamed_dense_bytes_dev = self.dense_bytes_dev - lookup_only * wbytes / tp   # the engine's cost model
        self.route_p = model.experts_per_token / model.num_experts if model.is_moe else 0.0
        # KV per token on the devices of one replica: heads split over tp (replicated when tp exceeds
        # the KV heads, as vLLM); the MLA latent is not split by heads, so every TP rank keeps it all.
        if model.is_mla:
            kv_elems_dev = model.kv_elems_per_token()
        else:
            kv_heads_dev = max(model.num_kv_heads // tp, 1)
            kv_elems_dev = 2 * model.num_layers * kv_heads_dev * model.head_dim
        self.kv_bytes_per_token_dev = kv_elems_dev * kvbytes
        hbm = device.hbm_bytes * layout.gpu_memory_utilization
        self.kv_free_bytes_dev = hbm - self.weight_bytes_dev - params.workspace_bytes
        if self.kv_free_bytes_dev <= self.kv_bytes_per_token_dev:
            raise RlsimError(
                f"{model.name} does not fit for inference on {device.name} with tp={tp}, ep={ep}: "
                f"{device.hbm_bytes / 1e9:.1f} GB x {layout.gpu_memory_utilization} = {hbm / 1e9:.1f} GB per device, "
                f"weights {self.weight_bytes_dev / 1e9:.1f} GB ({layout.weight_dtype}), workspace "
                f"{params.workspace_bytes / 1e9:.1f} GB, leaving no room for the KV cache",
                field="rollout_layout", fix=_FIT_FIX)
        self.kv_capacity_replica = int(self.kv_free_bytes_dev // self.kv_bytes_per_token_dev)
        self.kv_capacity_tokens = ep * self.kv_capacity_replica  # pooled over the replicas (even spread)
        self.max_running = layout.max_num_seqs * ep
        # Rates.
        gemm_eff = params.gemm_efficiency or device.gemm_efficiency
        self.bw = device.hbm_bw_Bps * (params.hbm_efficiency or device.hbm_efficiency)
        cdtype = _COMPUTE_DTYPE.get(layout.weight_dtype, "bf16")
        try:
            linear_rate = device.peak(cdtype) * gemm_eff
        except RlsimError:
            raise RlsimError(f"device {device.name} has no {cdtype} peak for weight_dtype {layout.weight_dtype}",
                             field="rollout_layout.weight_dtype",
                             fix=f"use bf16, or a device with {cdtype} support") from None
        bf16_rate = device.peak("bf16")
        # FLOPs per device: everything splits over tp * ep under an even spread of sequences.
        self.lin_s_per_token = 2.0 * model.params_compute / self.devices / linear_rate
        self.decode_attn_s_per_ctx = (model.attention_flops_per_context_token(absorb_mla=params.absorb_mla)
                                      / self.devices / (bf16_rate * params.attention_compute_efficiency))
        self.prefill_attn_s_per_pair = (model.attention_flops_per_context_token()
                                        / self.devices / (bf16_rate * gemm_eff))
        self.kv_s_per_token = self.kv_bytes_per_token_dev / ep / self.bw  # reads: own replica's share
        launch_s = device.launch_overhead_s if params.launch_overhead_s is None else params.launch_overhead_s
        launches = (params.launches_per_step + params.launches_per_layer * model.num_layers
                    + params.launches_per_moe_layer * model.num_moe_layers)
        self.eager_launch_s = launch_s * launches
        self.eager_gap_s = max(params.cuda_graph_replay_s, params.eager_kernel_gap_s * launches)
        self._comm_cache: dict[float, float] = {}
        self._coll_lines: dict[tuple[str, int], tuple[tuple[float, float], ...]] = {}   # (op, group size)
        self._lines_cache: dict[int, tuple[float, float, float, float, float]] = {}

    # -- pieces that depend on the number of tokens in the step ---------------------------------
    def weight_read_s(self, tokens: float) -> float:
        """Weights streamed in a step of `tokens` tokens; only the experts some token picked are read
        (expected share of one device's experts touched: 1 - (1 - k/E)^tokens)."""
        touched = 1.0 - (1.0 - self.route_p) ** tokens if self.route_p else 0.0
        return (self.streamed_dense_bytes_dev + self.expert_bytes_dev * touched) / self.bw

    def comm_s(self, tokens: float) -> float:
        """TP all-reduces (2 per layer) and EP dispatch + combine (per MoE layer) for one step."""
        cached = self._comm_cache.get(tokens)
        if cached is not None:
            return cached
        m, lay, p = self.model, self.layout, self.params
        total = 0.0
        if lay.tp > 1:
            nbytes = tokens / lay.ep * m.hidden * p.activation_bytes
            ranks = self.ranks[: lay.tp] if self.ranks is not None else None
            total += 2 * m.num_layers * self._collective("all_reduce", lay.tp, ranks, nbytes)
        if lay.ep > 1 and m.is_moe:
            per_rank = tokens / self.devices * m.experts_per_token * m.hidden
            dispatch = self._collective("all_to_all", self.devices, self.ranks, per_rank * p.dispatch_bytes)
            combine = self._collective("all_to_all", self.devices, self.ranks, per_rank * p.activation_bytes)
            total += m.num_moe_layers * (dispatch + combine)
        self._comm_cache[tokens] = total
        return total

    def _collective(self, op: str, n: int, ranks: Sequence[int] | None, nbytes: float) -> float:
        if self.collectives is not None and ranks is not None:
            if hasattr(self.collectives, "lines"):   # a CollectiveModel: one plan per algorithm, any size
                key = (op, len(ranks))
                lines = self._coll_lines.get(key)
                if lines is None:
                    lines = self._coll_lines[key] = self.collectives.lines(op, tuple(ranks))
                return line_time_s(lines, nbytes)
            return float(self.collectives.cost(op, list(ranks), nbytes).time_s)
        p = self.params
        steps, factor = (2 * (n - 1), 2.0 * (n - 1) / n) if op == "all_reduce" else (n - 1, (n - 1) / n)
        return (self.device.launch_overhead_s + steps * p.fallback_step_latency_s
                + factor * nbytes / (self.device.scaleup_bw_Bps * p.fallback_collective_efficiency))

    # -- the CPU side of a step ---------------------------------------------------------------------
    def uses_graphs(self, tokens: float) -> bool:
        """Whether a step of `tokens` tokens (instance-wide) replays a CUDA graph: not enforce_eager
        and at most cuda_graph_max_batch tokens per attention replica."""
        p = self.params
        return not p.enforce_eager and math.ceil(tokens / self.layout.ep) <= p.cuda_graph_max_batch

    def overhead_s(self, tokens: float, seqs: float) -> tuple[float, float]:
        """(added, floor) of a step of `tokens` tokens for `seqs` sequences: it lasts
        max(floor, GPU time + added). Scheduler CPU = step_overhead_s + cpu_per_seq_s x seqs per
        replica; launches = the graph replay, or eager_launch_s overlapped with the GPU's kernels.
        A sync engine adds the scheduler to the step; an async one overlaps it with the GPU's."""
        p = self.params
        sched = p.step_overhead_s + p.cpu_per_seq_s * seqs / self.layout.ep
        graphs = self.uses_graphs(tokens)
        # An eager step's kernels stand eager_gap_s apart on the GPU side (at least the graph's
        # replay time), so it is never shorter than the same step with graphs.
        if p.async_scheduling:   # the replay's gaps are GPU time (an audit)
            if graphs:
                return p.cuda_graph_replay_s, sched + p.cuda_graph_replay_s
            return self.eager_gap_s, sched + self.eager_launch_s
        if graphs:
            return sched + p.cuda_graph_replay_s, 0.0
        return sched + self.eager_gap_s, sched + self.eager_launch_s

    # -- whole steps ------------------------------------------------------------------------------
    def _per_n(self, n: int) -> tuple[float, float, float, float, float, float]:
        per_n = self._lines_cache.get(n)
        if per_n is None:
            added, floor = self.overhead_s(n, n)
            per_n = (n * self.lin_s_per_token, self.weight_read_s(n), added + self.comm_s(n),
                     self.decode_attn_s_per_ctx * n, self.kv_s_per_token * n, floor)
            self._lines_cache[n] = per_n
        return per_n

    def decode_lines(self, n: int, k0: float) -> tuple[float, float, float, float, float]:
        """Step j (0-based) of n sequences starting at total context k0 costs
        max(f, max(c0 + c1 j, m0 + m1 j) + e), f = decode_floor_s(n). Returns (c0, c1, m0, m1, e)."""
        lin, weights, e, c1, m1, _ = self._per_n(n)
        return (lin + self.decode_attn_s_per_ctx * k0, c1, weights + self.kv_s_per_token * k0, m1, e)

    def decode_floor_s(self, n: int) -> float:
        """The CPU floor of a decode step of n sequences (0 for a sync engine with CUDA graphs)."""
        return self._per_n(n)[5]

    def decode_step_s(self, n: int, context_tokens: float) -> float:
        c0, _, m0, _, e = self.decode_lines(n, context_tokens)
        return max(self.decode_floor_s(n), max(c0, m0) + e)

    def mixed_s(self, n: int, k0: float, tokens: float, pairs: float, seqs: float, steps: int) -> float:
        """`steps` chunked-prefill steps, each one decode token of n sequences (total context k0 at
        the first, growing by n) and 1/steps of a prefill of `tokens` tokens, `pairs` attention
        pairs, `seqs` sequences: the decode lines with the chunk's work on their intercepts."""
        c0, c1, m0, m1, _ = self.decode_lines(n, k0)
        chunk = tokens / steps
        width = n + chunk
        c0 += chunk * self.lin_s_per_token + pairs / steps * self.prefill_attn_s_per_pair
        m0 += self.weight_read_s(width) - self.weight_read_s(n) + chunk * self.kv_s_per_token
        added, floor = self.overhead_s(width, n + seqs / steps)
        return series_time_s((c0, c1, m0, m1, added + self.comm_s(width)), steps, floor)

    def prefill_s(self, tokens: float, attention_pairs: float, seqs: float = 1) -> float:
        """Prefill of `tokens` prompt tokens of `seqs` sequences with sum over prompts of P(P+1)/2
        attention pairs (one step)."""
        compute = tokens * self.lin_s_per_token + attention_pairs * self.prefill_attn_s_per_pair
        memory = self.weight_read_s(tokens) + tokens * self.kv_s_per_token
        added, floor = self.overhead_s(tokens, seqs)
        return max(floor, max(compute, memory) + added + self.comm_s(tokens))


def _check_layout(model: ModelSpec, layout: RolloutLayout) -> None:
    tp, ep = layout.tp, layout.ep
    if model.num_heads % tp:
        raise RlsimError(f"tp={tp} does not divide the {model.num_heads} attention heads of {model.name}",
                         field="rollout_layout.tp",
                         fix=f"use a tp dividing {model.num_heads}, e.g. {_divisors(model.num_heads)}")
    if not model.is_mla and tp > model.num_kv_heads and tp % model.num_kv_heads:
        raise RlsimError(f"tp={tp} cannot replicate the {model.num_kv_heads} KV heads of {model.name} evenly",
                         field="rollout_layout.tp", fix=f"use a multiple of {model.num_kv_heads}")
    if ep > 1 and not model.is_moe:
        raise RlsimError(f"ep={ep} needs an MoE model; {model.name} is dense", field="rollout_layout.ep",
                         fix="set ep: 1")
    if ep > 1 and model.num_experts % ep:
        raise RlsimError(f"ep={ep} does not divide the {model.num_experts} experts of {model.name}",
                         field="rollout_layout.ep",
                         fix=f"use an ep dividing {model.num_experts}, e.g. {_divisors(model.num_experts)}")
    for name in ("weight_dtype", "kv_dtype"):
        if getattr(layout, name) not in DTYPE_BYTES:
            dtype_bytes(getattr(layout, name), f"rollout_layout.{name}")


def _divisors(n: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n % d == 0][-4:]


def _series(alpha: float, beta: float, lo: int, hi: int) -> float:
    """sum_{j=lo}^{hi-1} (alpha + beta j)."""
    if hi <= lo:
        return 0.0
    return (hi - lo) * alpha + beta * (hi * (hi - 1) - lo * (lo - 1)) / 2.0


def series_time_s(lines: tuple[float, float, float, float, float], k: int, floor: float = 0.0) -> float:
    """Closed-form time of k decode steps: sum_{j<k} max(floor, max(c0 + c1 j, m0 + m1 j) + e).
    The lines do not fall (c1, m1 >= 0), so the floor holds for the first j0 steps only."""
    if k <= 0:
        return 0.0
    c0, c1, m0, m1, e = lines
    if floor > 0.0:
        j0 = min(k, _first_at_least(c0 + e, c1, floor), _first_at_least(m0 + e, m1, floor))
        if j0 > 0:
            return j0 * floor + series_time_s(lines, k) - series_time_s(lines, j0)
    # The two lines cross at most once; j* = first j where the compute line is on top.
    dc, dslope = c0 - m0, c1 - m1
    if dslope == 0.0:
        split = 0 if dc >= 0 else k
    elif dslope > 0:  # compute overtakes memory from j* on
        split = min(k, max(0, math.ceil(-dc / dslope)))
    else:            # memory overtakes compute from j* on
        cross = min(k, max(0, math.floor(dc / -dslope) + 1))
        return _series(c0, c1, 0, cross) + _series(m0, m1, cross, k) + k * e
    return _series(m0, m1, 0, split) + _series(c0, c1, split, k) + k * e


def _first_at_least(a: float, b: float, y: float) -> int | float:
    """The first j >= 0 with a + b j >= y (b >= 0; math.inf when never)."""
    if a >= y:
        return 0
    if b <= 0.0:
        return math.inf
    j = max(0, math.ceil((y - a) / b))
    while j > 0 and a + b * (j - 1) >= y:   # rounding of the division
        j -= 1
    while a + b * j < y:
        j += 1
    return j


def _scatter(entries: list[tuple[float, int, int]], finish_s: np.ndarray) -> None:
    """finish_s[seq_id] = time for outbox entries (time, seq_id, slot)."""
    if entries:
        ids = np.fromiter((e[1] for e in entries), np.int64, len(entries))
        finish_s[ids] = np.fromiter((e[0] for e in entries), float, len(entries))


# ---- one instance -----------------------------------------------------------------------------------
_WAITING, _RUNNING, _DONE = 0, 1, 2


class RolloutEngine:
    """One inference instance with continuous batching; state changes only at events.

    Incremental API (the schedule layer drives it): ``add`` sequences, ask ``next_event_time``,
    ``advance_to(t)`` to collect finished sequences, ``interrupt(now)`` for partial rollouts.
    ``add`` times must not decrease. Sequences added at the same time are prefilled together.
    """

    def __init__(self, model: ModelSpec, device: Any, layout: RolloutLayout,
                 params: InferenceParams | None = None, *, collectives: Any = None,
                 ranks: Sequence[int] | None = None, cost: StepCost | None = None) -> None:
        self.cost = cost or StepCost(model, device, layout, params, collectives, ranks)
        self.capacity = self.cost.kv_capacity_tokens
        self.replica_capacity = self.cost.kv_capacity_replica
        self.max_running = self.cost.max_running
        # Per-slot records (a slot is one add() call).
        self._id: list[int] = []
        self._p: list[int] = []
        self._r: list[int] = []
        self._g: list[int] = []        # generated tokens at admission (or now, when waiting)
        self._sadm: list[int] = []     # decode-step counter at admission
        self._state: list[int] = []
        self._arrival: list[float] = []
        self._epoch: list[int] = []
        self._slot_of: dict[int, int] = {}
        self._group: list[int] = []    # prefix-cache group (a negative own id: shares nothing)
        # Engine state at the current step boundary.
        self.t = 0.0                   # time of the boundary
        self._S = 0                    # decode steps taken
        self._n = 0                    # running sequences
        self._K = 0                    # KV tokens held by them
        self._share_of: dict[int, int] = {}   # prefix-cache sharing: slot -> its set's first slot
        self._share_sets: dict[int, list[int]] = {}
        self._shared = 0                      # tokens of _K in pages another member holds
        self._heap: list[tuple[int, int, int, int]] = []   # (finish step, order, slot, epoch)
        self._stack: list[tuple[int, int]] = []            # (slot, epoch) in admission order
        self._waiting: deque[int] = deque()
        self._outbox: deque[tuple[float, int, int]] = deque()  # (time, seq_id, slot)
        self._order = 0
        self._last_add = -math.inf
        self._lines: tuple[float, float, float, float, float] | None = None
        self._event: tuple[float, int] | None = None
        self._prefill: tuple[float, float, list[tuple[int, int]]] | None = None  # start, end, (slot, g before)
        self._phase_steps = 0          # decode steps the running sequences made during that prefill
        self.busy_s = 0.0
        self.preemptions = 0
        self.generated_tokens = 0

    # ---- public -------------------------------------------------------------------------------
    @property
    def load(self) -> int:
        """Sequences held (running or waiting): the least-loaded dispatch metric."""
        return self._n + len(self._waiting)

    def add(self, seq_id: int, prompt_len: int, response_len: int, now: float, generated: int = 0) -> None:
        """Queue a sequence at time `now`; it is prefilled at the next step boundary with room.
        A resumed (interrupted) sequence passes the tokens it had: it re-prefills them (recompute)."""
        self.add_many([seq_id], [prompt_len], [response_len], now, [generated])

    def add_many(self, seq_ids: Sequence[int], prompt_lens: Sequence[int], response_lens: Sequence[int],
                 now: float, generated: Sequence[int] | None = None,
                 group_ids: Sequence[int] | None = None) -> None:
        """Queue several sequences arriving together (prefilled together when they fit).
        `group_ids` (optional, one per sequence): the samples of one prompt carry one id; with
        enable_prefix_caching those admitted in one step share one prefill of the prompt (the
        first computes it, the others only their own generated tokens). None: no sharing.
        With max_model_len, a response stops at max_model_len - prompt tokens."""
        ids = [int(x) for x in seq_ids]
        p = np.asarray(prompt_lens, dtype=np.int64)
        r = np.asarray(response_lens, dtype=np.int64)
        if self.cost.params.max_model_len is not None:
            r = np.minimum(r, self.cost.params.max_model_len - p)
        if group_ids is not None and len(group_ids) != len(ids):
            raise ValueError("group_ids and seq_ids differ in length")
        g = np.zeros(len(ids), dtype=np.int64) if generated is None else np.asarray(generated, dtype=np.int64)
        if not len(ids) == len(p) == len(r) == len(g):
            raise ValueError("seq_ids, prompt_lens, response_lens and generated differ in length")
        if now < self._last_add:
            raise ValueError(f"add times must not decrease: {now} < {self._last_add}")
        if len(ids) == 0:
            return
        bad = (p < 1) | (r < 1) | (g < 0) | (g >= r)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"bad sequence {ids[i]}: prompt {p[i]}, response {r[i]}, generated {g[i]}")
        too_long = p + r > self.replica_capacity   # a step needs its tokens' slots
        if too_long.any():
            i = int(np.argmax(too_long))
            raise RlsimError(
                f"a sequence of {p[i]} + {r[i]} tokens does not fit the KV cache of one replica "
                f"({self.replica_capacity} tokens)", field="rollout_layout",
                fix="raise tp or gpu_memory_utilization, use a smaller kv_dtype, or lower the maximum length")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate sequence ids in one add")
        for seq_id in ids:
            slot = self._slot_of.get(seq_id)
            if slot is not None and self._state[slot] != _DONE:
                raise ValueError(f"sequence {seq_id} is already in this engine")
        self._process_until(now, inclusive=False)
        self._last_add = now
        first = len(self._id)
        # Records fixed once added (_id, _p, _r, _arrival, _slot_of) are rebound, never mutated:
        # copies share them (copy-on-write); the others are mutated in place and copied by copy().
        self._slot_of = {**self._slot_of, **dict(zip(ids, range(first, first + len(ids)), strict=True))}
        self._id = self._id + ids
        self._p = self._p + p.tolist()
        self._r = self._r + r.tolist()
        self._arrival = self._arrival + [float(now)] * len(ids)
        self._group = self._group + ([-1 - slot for slot in range(first, first + len(ids))] if group_ids is None
                                     else [int(x) for x in group_ids])
        self._g.extend(g.tolist())
        self._sadm.extend([0] * len(ids))
        self._state.extend([_WAITING] * len(ids))
        self._epoch.extend([0] * len(ids))
        self._waiting.extend(range(first, first + len(ids)))
        self._event = None

    def next_event_time(self) -> float:
        """When the engine's state next changes (math.inf when idle); a call of advance_to at that
        time may return no finished sequence (an admission or a preemption happened instead)."""
        t = self._next_event()[0]
        if self._outbox:
            t = min(t, self._outbox[0][0])
        return t

    def advance_to(self, t: float) -> list[Finished]:
        """Run to time t; the sequences that finished by then, in finish order."""
        return [Finished(seq_id, time) for time, seq_id, _ in self._drain(t)]

    def run(self) -> list[Finished]:
        return self.advance_to(math.inf)

    def run_into(self, finish_s: np.ndarray) -> None:
        """run(), writing each finished sequence's time at finish_s[seq_id] (no Finished records:
        the schedules' hot path)."""
        _scatter(self._drain(math.inf), finish_s)

    def _drain(self, t: float) -> list[tuple[float, int, int]]:
        """Run to time t; the outbox entries (time, seq_id, slot) finished by then, in order."""
        self._process_until(t, inclusive=True)
        outbox = self._outbox
        if outbox and outbox[-1][0] <= t:  # all of it (the usual case)
            out = list(outbox)
            outbox.clear()
            return out
        out = []
        while outbox and outbox[0][0] <= t:
            out.append(outbox.popleft())
        return out

    def interrupt(self, now: float) -> InterruptResult:
        """Stop at `now` (a weight sync): sequences finished by then, and every unfinished one with the
        tokens it has generated so far (an interrupted step or prefill produces nothing)."""
        finished = self.advance_to(now)
        partial: list[PartialSequence] = []
        generated: dict[int, int] = {}
        if self._n and self.t <= now:
            done = self._steps_by(now - self.t)
            self.busy_s += now - self.t
            self._account_steps(done)
        elif self.t > now and self._prefill is not None:  # inside a prefill: it yields nothing
            start, end, slots = self._prefill
            self.busy_s -= self.t - max(now, start)
            generated = {slot: g_before for slot, g_before in slots}
            undo = len(generated)   # the interrupted prefill's first tokens
            if self._phase_steps:   # and the decode steps that rode on an unfinished chunked prefill
                for slot in range(len(self._id)):
                    if self._state[slot] == _RUNNING and slot not in generated:
                        generated[slot] = self._g[slot] + self._S - self._phase_steps - self._sadm[slot]
                        undo += self._phase_steps
            self.generated_tokens -= undo
        for slot in range(len(self._id)):
            state = self._state[slot]
            if state == _RUNNING:
                g = generated.get(slot, self._g[slot] + self._S - self._sadm[slot])
            elif state == _WAITING:
                g = self._g[slot]
            else:
                continue
            self._state[slot] = _DONE
            partial.append(PartialSequence(self._id[slot], self._p[slot], self._r[slot], g))
        for _, seq_id, slot in self._outbox:  # finished by a prefill that ends after `now`
            partial.append(PartialSequence(seq_id, self._p[slot], self._r[slot], generated[slot]))
        self._outbox.clear()
        self._heap.clear()
        self._stack.clear()
        self._waiting.clear()
        self._n = self._K = self._shared = 0
        self._share_of.clear()
        self._share_sets.clear()
        self.t = now
        self._prefill = None
        self._phase_steps = 0
        self._event = None
        self._lines = None
        partial.sort(key=lambda s: s.seq_id)
        return InterruptResult(finished, partial)

    def copy(self) -> RolloutEngine:
        """An independent engine in the same state (a checkpoint: advancing or interrupting the copy
        leaves this one untouched). The step-cost object (caches only) and the records fixed once
        added (rebound by add_many, never mutated) are shared."""
        new = object.__new__(RolloutEngine)
        new.__dict__.update(self.__dict__)
        for name in ("_g", "_sadm", "_state", "_epoch", "_heap", "_stack", "_share_of"):
            setattr(new, name, getattr(self, name).copy())
        new._share_sets = {key: members.copy() for key, members in self._share_sets.items()}
        new._waiting = deque(self._waiting)
        new._outbox = deque(self._outbox)
        return new

    # ---- event loop -----------------------------------------------------------------------------
    def _segment(self) -> tuple[float, float, float, float, float]:
        if self._lines is None:
            self._lines = self.cost.decode_lines(self._n, self._K)
        return self._lines

    def _duration(self, k: int) -> float:
        return series_time_s(self._segment(), k, self.cost.decode_floor_s(self._n))

    def _steps_by(self, elapsed: float) -> int:
        """Whole decode steps completed `elapsed` seconds after the boundary."""
        if elapsed <= 0:
            return 0
        hi = 1
        while self._duration(hi) <= elapsed:
            hi *= 2
        lo = hi // 2  # duration(lo) <= elapsed < duration(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._duration(mid) <= elapsed:
                lo = mid
            else:
                hi = mid
        return lo

    def _room_for_head(self) -> bool:
        if not self._waiting or self._n >= self.max_running:
            return False
        slot = self._waiting[0]
        return self._K - self._shared + self._p[slot] + self._g[slot] + 1 <= self.capacity

    def _next_event(self) -> tuple[float, int]:
        """(time, decode steps until it) of the next admission, finish or preemption."""
        if self._event is not None:
            return self._event
        if self._n == 0:
            event = (max(self.t, self._arrival[self._waiting[0]]), 0) if self._waiting else (math.inf, 0)
        else:
            while self._heap and self._stale(self._heap[0]):
                heapq.heappop(self._heap)
            k = self._heap[0][0] - self._S
            k = min(k, max(0, (self.capacity - (self._K - self._shared)) // self._n + 1))  # steps the KV cache holds
            if self._room_for_head():
                arrival = self._arrival[self._waiting[0]]
                k = min(k, 0 if arrival <= self.t else self._steps_by(arrival - self.t) + 1)
            event = (self.t + self._duration(k), k)
        self._event = event
        return event

    def _stale(self, entry: tuple[int, int, int, int]) -> bool:
        slot, epoch = entry[2], entry[3]
        return self._state[slot] != _RUNNING or self._epoch[slot] != epoch

    def _process_until(self, t: float, inclusive: bool) -> None:
        self._run_events(t, inclusive)

    def _account_steps(self, k: int) -> None:
        self.generated_tokens += k * self._n
        self._S += k
        self._K += k * self._n

    def _run_events(self, t_stop: float, inclusive: bool, max_events: int = -1) -> tuple[int, float]:
        """The event loop: _next_event then process, over and over, until the next event is after
        ``t_stop`` (or at it, unless ``inclusive``), the engine is idle, or ``max_events`` events
        were processed. Returns (events processed, time of the last one).

        Hot path inlined (locals, no method call per event besides series_time_s): a rollout run
        is ~one event per finished sequence. The arithmetic is _next_event's, decode_lines' and the
        finish loop's, operation for operation, so results are bit-identical to the plain loop."""
        cost = self.cost
        lines_cache = cost._lines_cache
        attn, kvs = cost.decode_attn_s_per_ctx, cost.kv_s_per_token
        heap, state, epochs = self._heap, self._state, self._epoch
        p_of, r_of, id_of = self._p, self._r, self._id
        outbox, waiting = self._outbox, self._waiting
        cap = self.capacity
        pop = heapq.heappop
        count, last = 0, -math.inf
        while count != max_events:
            event = self._event
            if event is None:
                n = self._n
                if n == 0:
                    event = self._next_event()
                else:
                    while True:  # drop stale heads (preempted or interrupted sequences)
                        head = heap[0]
                        slot = head[2]
                        if state[slot] == _RUNNING and epochs[slot] == head[3]:
                            break
                        pop(heap)
                    K = self._K
                    k = head[0] - self._S
                    room = (cap - (K - self._shared)) // n + 1  # steps the KV cache holds: k = min(k, max(0, room))
                    if room < k:
                        k = room if room > 0 else 0
                    lines = self._lines
                    if lines is None:  # StepCost.decode_lines(n, K), its per-n cache read here
                        per_n = lines_cache.get(n)
                        if per_n is None:
                            lines = cost.decode_lines(n, K)
                        else:
                            lines = (per_n[0] + attn * K, per_n[3], per_n[1] + kvs * K, per_n[4], per_n[2])
                        self._lines = lines
                    if waiting and self._room_for_head():
                        arrival = self._arrival[waiting[0]]
                        k = min(k, 0 if arrival <= self.t else self._steps_by(arrival - self.t) + 1)
                    # series_time_s(lines, k), inlined with _series (same operations, same order)
                    if k <= 0:
                        event = (self.t + 0.0, k)
                    elif lines_cache[n][5] > 0.0:   # a CPU floor (eager or async): not inlined
                        event = (self.t + series_time_s(lines, k, lines_cache[n][5]), k)
                    else:
                        c0, c1, m0, m1, e = lines
                        dc, dslope = c0 - m0, c1 - m1
                        a0, a1, b0, b1 = m0, m1, c0, c1  # compute overtakes memory from `split` on
                        if dslope == 0.0:
                            split = 0 if dc >= 0 else k
                        elif dslope > 0:
                            split = min(k, max(0, math.ceil(-dc / dslope)))
                        else:                            # memory overtakes compute
                            split = min(k, max(0, math.floor(dc / -dslope) + 1))
                            a0, a1, b0, b1 = c0, c1, m0, m1
                        head_s = (split * a0 + a1 * (split * (split - 1) - 0) / 2.0) if split > 0 else 0.0
                        tail_s = ((k - split) * b0 + b1 * (k * (k - 1) - split * (split - 1)) / 2.0
                                  if k > split else 0.0)
                        event = (self.t + (head_s + tail_s + k * e), k)
            time, k = event
            if time > t_stop or (time == t_stop and not inclusive) or time == math.inf:
                self._event = event
                break
            # Process the event: k decode steps, then finishes, preemptions, admissions.
            n, S, K = self._n, self._S, self._K
            if n:
                self.busy_s += time - self.t
                self.generated_tokens += k * n
                S += k
                K += k * n
                self._S = S
            self.t = time
            self._prefill = None
            self._phase_steps = 0
            while heap:  # finishes (stale entries of preempted or interrupted sequences dropped)
                head = heap[0]
                slot = head[2]
                live = state[slot] == _RUNNING and epochs[slot] == head[3]
                if live and head[0] > S:
                    break
                pop(heap)
                if live:
                    state[slot] = _DONE
                    n -= 1
                    K -= p_of[slot] + r_of[slot]
                    if slot in self._share_of:
                        self._unshare(slot)
                    outbox.append((time, id_of[slot], slot))
            self._n, self._K = n, K
            if n and K - self._shared > cap:
                self._preempt()
            if waiting:
                self._admit()
            self._lines = None
            self._event = None
            count += 1
            last = time
        return count, last

    def _preempt(self) -> None:
        """Preempt the newest until the next step fits (recompute: it re-prefills what it has)."""
        state, epochs, step = self._state, self._epoch, self._S
        while self._n and self._K - self._shared > self.capacity:
            slot, epoch = self._stack.pop()
            if state[slot] != _RUNNING or epochs[slot] != epoch:
                continue
            g = self._g[slot] + step - self._sadm[slot]
            state[slot] = _WAITING
            self._g[slot] = g
            epochs[slot] += 1
            self._n -= 1
            self._K -= self._p[slot] + g
            if slot in self._share_of:
                self._unshare(slot)
            self._waiting.appendleft(slot)
            self.preemptions += 1

    def _admit(self) -> None:
        waiting, p, g_of, arrival, state = self._waiting, self._p, self._g, self._arrival, self._state
        n0 = n = self._n
        kv, now = self._K, self.t
        held = kv - self._shared
        cap, max_n = self.capacity, self.max_running
        share = self.cost.params.enable_prefix_caching
        group, seen = self._group, {}
        admitted: list[tuple[int, int]] = []
        pieces: list[tuple[int, float]] = []   # (tokens computed, attention pairs) per admitted
        while waiting and n < max_n:
            slot = waiting[0]
            ctx = p[slot] + g_of[slot]
            first = seen.get(group[slot]) if share and group[slot] >= 0 else None
            members = self._share_sets.get(first, [first]) if first is not None else []
            gain = _set_shared(p, [*members, slot]) - _set_shared(p, members) if first is not None else 0
            new = ctx + 1 - gain   # a hit's pages are the first's
            if held + new > cap or arrival[slot] > now:  # room for it and one more step
                break
            waiting.popleft()
            admitted.append((slot, g_of[slot]))
            if first is not None:   # the prompt's KV is cached
                hit = min(p[slot], ctx - 1)   # at most all but its last token (the engine's logits)
                own = ctx - hit
                pieces.append((own, own * hit + own * (own + 1) / 2.0))
                if first not in self._share_sets:
                    self._share_sets[first], self._share_of[first] = [first], first
                self._share_sets[first].append(slot)
                self._share_of[slot] = first
                self._shared += gain
            else:
                seen[group[slot]] = slot
                pieces.append((ctx, ctx * (ctx + 1) / 2.0))
            state[slot] = _RUNNING
            n += 1
            kv += ctx + 1
            held += new
        if not admitted:
            return
        duration, ride = self._prefill_time(pieces, n0, held)
        end = now + duration
        self.busy_s += duration
        self.t = end
        self._prefill = (now, end, admitted)
        self._phase_steps = ride
        self.generated_tokens += len(admitted) + ride * n0
        self._S += ride
        kv += ride * n0
        self._enter(admitted, end, n, kv)

    def _prefill_time(self, pieces: list[tuple[int, float]], riders: int, kv_after: int) -> tuple[float, int]:
        """(duration, decode steps the running sequences make meanwhile) of prefilling `pieces`.
        Without chunked prefill: blocking steps of at most max_num_batched_tokens tokens (one step
        when unbounded). With it: ceil(tokens / (budget - riders)) steps, each carrying one decode
        token of every running sequence and an even share of the prefill; the running sequences
        ride along until the first of them finishes or the KV cache is full (a sequence that
        finishes inside the phase is released at its end)."""
        cost, budget = self.cost, self.cost.params.max_num_batched_tokens
        if budget is None and (not cost.params.chunked_prefill or riders == 0):   # one step (the hot path)
            if len(pieces) == 1:
                return cost.prefill_s(pieces[0][0], pieces[0][1], 1), 0
            return cost.prefill_s(sum(t for t, _ in pieces), sum(a for _, a in pieces), len(pieces)), 0
        if not cost.params.chunked_prefill or riders == 0 and budget is None:
            return sum(cost.prefill_s(t, a, k) for t, a, k in _budget_steps(pieces, budget)), 0
        tokens = sum(t for t, _ in pieces)
        pairs = sum(a for _, a in pieces)
        steps = 1 if budget is None else max(1, math.ceil(tokens / max(1, budget - riders)))
        if riders == 0:
            return steps * cost.prefill_s(tokens / steps, pairs / steps, len(pieces) / steps), 0
        while self._heap and self._stale(self._heap[0]):
            heapq.heappop(self._heap)
        ride = min(steps, self._heap[0][0] - self._S, max(0, (self.capacity - kv_after) // riders + 1))
        return cost.mixed_s(riders, self._K, tokens, pairs, len(pieces), steps), max(0, ride)

    def _unshare(self, slot: int) -> None:
        key = self._share_of.pop(slot)
        members = self._share_sets[key]
        before = _set_shared(self._p, members)
        members.remove(slot)
        self._shared += _set_shared(self._p, members) - before
        if not members:
            del self._share_sets[key]

    def _enter(self, admitted: list[tuple[int, int]], end: float, n: int, kv: int) -> None:
        """Admitted sequences, prefilled by `end`, join the running set (their first token made)."""
        p, g_of, state = self._p, self._g, self._state
        step, r, heap, stack, epochs, sadm = self._S, self._r, self._heap, self._stack, self._epoch, self._sadm
        order = self._order
        entries = []
        for slot, g in admitted:
            g_of[slot] = g + 1  # prefill yields the first (next) token
            sadm[slot] = step
            if g + 1 >= r[slot]:
                state[slot] = _DONE
                n -= 1
                kv -= p[slot] + r[slot]
                if slot in self._share_of:
                    self._unshare(slot)
                self._outbox.append((end, self._id[slot], slot))
                continue
            order += 1
            entries.append((step + r[slot] - g - 1, order, slot, epochs[slot]))
            stack.append((slot, epochs[slot]))
        # A large batch: one heapify instead of a push each (keys are unique (order), so pops come
        # out the same); a few into a large heap: pushes (a heapify would cost the whole heap).
        if len(entries) * 4 >= len(heap):
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)
        self._order = order
        self._n, self._K = n, kv


def _set_shared(p: list[int], members: list[int]) -> int:
    cached = [p[slot] - 1 for slot in members]
    return sum(cached) - max(cached) if cached else 0


def _budget_steps(pieces: list[tuple[int, float]], budget: int | None) -> list[tuple[int, float, int]]:
    """Pieces (tokens, pairs) in order, packed into steps of at most `budget` tokens (a longer
    piece alone): (tokens, pairs, sequences) per step; one step when unbounded."""
    if budget is None:
        return [(sum(t for t, _ in pieces), sum(a for _, a in pieces), len(pieces))]
    steps: list[tuple[int, float, int]] = []
    tokens, pairs, seqs = 0, 0.0, 0
    for t, a in pieces:
        if seqs and tokens + t > budget:
            steps.append((tokens, pairs, seqs))
            tokens, pairs, seqs = 0, 0.0, 0
        tokens, pairs, seqs = tokens + t, pairs + a, seqs + 1
    steps.append((tokens, pairs, seqs))
    return steps


class ResumableRun:
    """Run an engine to completion, keeping a copy of its state every ``every`` events, so that its
    state at an earlier time (an interrupt at a time decided after the full run, e.g. a tail
    consolidation point) is restored from the nearest copy and advanced a few events, instead of
    re-running the engine from the start. Results equal a fresh engine's: the same events are
    processed in the same order (an engine's event sequence does not depend on how advance_to
    chunks it)."""

    def __init__(self, engine: RolloutEngine, every: int = 32) -> None:
        self.engine = engine
        self.every = max(1, int(every))
        self._keys: list[float] = []                # latest event time processed before each copy
        self._copies: list[RolloutEngine] = []

    def run(self) -> list[Finished]:
        return [Finished(seq_id, time) for time, seq_id, _ in self._run()]

    def run_into(self, finish_s: np.ndarray) -> None:
        """run(), writing each finished sequence's time at finish_s[seq_id]."""
        _scatter(self._run(), finish_s)

    def _run(self) -> list[tuple[float, int, int]]:
        engine = self.engine
        self._keys, self._copies = [-math.inf], [engine.copy()]
        every = self.every
        while True:   # engine.run(), a copy after every `every` events
            done, t = engine._run_events(math.inf, True, every)
            if done < every:
                return engine._drain(math.inf)
            self._keys.append(t)
            self._copies.append(engine.copy())

    def interrupt_at(self, now: float) -> InterruptResult:
        """``interrupt(now)`` of an engine that ran from the start to ``now`` (call after ``run``).
        ``finished`` lists only the sequences finished after the restored copy's time; callers
        that need all finishes by ``now`` take them from ``run``'s output."""
        i = bisect.bisect_right(self._keys, now) - 1
        return self._copies[max(0, i)].copy().interrupt(now)


# ---- many instances ---------------------------------------------------------------------------------
@dataclass
class RolloutResult:
    """Per-sequence finish times (input order, flattened), instance, and per-instance busy time."""

    finish_s: np.ndarray
    instance: np.ndarray
    busy_s: np.ndarray
    makespan_s: float = 0.0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    preemptions: int = 0

    @property
    def generated_tokens_per_s(self) -> float:
        return self.generated_tokens / self.makespan_s if self.makespan_s > 0 else 0.0

    def tail_share(self, fraction: float = 0.1) -> np.ndarray:
        """Per instance: share of its busy time spent after all but its last `fraction` of
        sequences had finished (how much of the instance the long tail holds)."""
        out = np.zeros(len(self.busy_s))
        for i in range(len(self.busy_s)):
            times = np.sort(self.finish_s[self.instance == i])
            if len(times) == 0 or self.busy_s[i] <= 0:
                continue
            head = times[max(0, math.ceil((1.0 - fraction) * len(times)) - 1)]
            out[i] = (times[-1] - head) / self.busy_s[i]
        return out


def simulate_rollout(model: ModelSpec, device: Any, layout: RolloutLayout, prompt_lens: Any,
                     response_lens: Any, *, params: InferenceParams | None = None,
                     policy: str = "round_robin", arrival_s: Any = None, collectives: Any = None,
                     ranks: Sequence[int] | None = None) -> RolloutResult:
    """Generate a batch on `layout.instances` instances.

    Lengths are 1-D (one entry per sequence, dispatched one by one) or 2-D (prompts x samples:
    the samples of a prompt go to one instance together, as vLLM's n-sampling). `arrival_s`
    (per dispatch unit, default 0) staggers arrivals. `policy`: round_robin | least_loaded (fewest
    sequences held at arrival). `ranks`: global ranks of all instances' devices (instance i gets
    ranks[i*D:(i+1)*D]) for the CollectiveModel."""
    prompts = np.asarray(prompt_lens, dtype=np.int64)
    responses = np.asarray(response_lens, dtype=np.int64)
    if prompts.shape != responses.shape or prompts.ndim not in (1, 2):
        raise ValueError("prompt and response lengths need the same 1-D or 2-D shape")
    units = prompts.shape[0]
    per_unit = 1 if prompts.ndim == 1 else prompts.shape[1]
    prompts, responses = prompts.reshape(units, per_unit), responses.reshape(units, per_unit)
    if policy not in ("round_robin", "least_loaded"):
        raise RlsimError(f"unknown dispatch policy {policy!r}", field="dispatch",
                         fix="use round_robin or least_loaded")
    arrivals = np.zeros(units) if arrival_s is None else np.asarray(arrival_s, dtype=float)
    if arrivals.shape != (units,):
        raise ValueError(f"arrival_s needs one entry per dispatch unit ({units})")
    per = layout.devices_per_instance
    if ranks is not None and len(ranks) < per * layout.instances:
        raise ValueError(f"{layout.instances} instances need {per * layout.instances} ranks, got {len(ranks)}")
    shared = StepCost(model, device, layout, params, collectives,
                      list(ranks[:per]) if ranks is not None else None)
    engines = []
    for i in range(layout.instances):
        cost = shared
        if ranks is not None and i:
            cost = StepCost(model, device, layout, params, collectives, list(ranks[i * per:(i + 1) * per]))
        engines.append(RolloutEngine(model, device, layout, params, cost=cost))
    n_seq = units * per_unit
    finish = np.full(n_seq, np.nan)
    where = np.full(n_seq, -1, dtype=np.int64)

    def collect(items: list[Finished]) -> None:
        for seq_id, time in items:
            finish[seq_id] = time

    order = np.argsort(arrivals, kind="stable")
    seq_ids = np.arange(n_seq, dtype=np.int64).reshape(units, per_unit)
    n_eng = len(engines)
    rr = 0
    i = 0
    while i < units:  # one pass per distinct arrival time
        now = float(arrivals[order[i]])
        j = int(np.searchsorted(arrivals[order], now, side="right"))
        batch = order[i:j]
        if policy == "round_robin":
            target = (rr + np.arange(len(batch))) % n_eng
            rr = (rr + len(batch)) % n_eng
        else:
            for engine in engines:
                collect(engine.advance_to(now))
            loads = [(engine.load, e) for e, engine in enumerate(engines)]
            heapq.heapify(loads)
            target = np.empty(len(batch), dtype=np.int64)
            for k in range(len(batch)):  # fewest sequences held, ties to the lowest index
                load, e = heapq.heappop(loads)
                target[k] = e
                heapq.heappush(loads, (load + per_unit, e))
        for e in np.unique(target):
            units_e = batch[target == e]
            ids = seq_ids[units_e].ravel()
            where[ids] = e
            engines[e].add_many(ids, prompts[units_e].ravel(), responses[units_e].ravel(), now)
        i = j
    for engine in engines:
        collect(engine.run())
    busy = np.array([engine.busy_s for engine in engines])
    return RolloutResult(
        finish_s=finish, instance=where, busy_s=busy,
        makespan_s=float(np.nanmax(finish)) if n_seq else 0.0,
        generated_tokens=int(sum(engine.generated_tokens for engine in engines)),
        prompt_tokens=int(prompts.sum()), preemptions=int(sum(engine.preemptions for engine in engines)))


# ---- small predictors (validation cases, planner) -------------------------------------------------
def _layout(tp: int, ep: int, weight_dtype: str, kv_dtype: str, batch: int,
            gpu_memory_utilization: float) -> RolloutLayout:
    return RolloutLayout(tp=tp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                         max_num_seqs=max(1, math.ceil(batch / ep)),
                         gpu_memory_utilization=gpu_memory_utilization)


def decode_step_time_s(model: ModelSpec, device: Any, batch: int, context_len: float, *, tp: int = 1,
                       ep: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                       gpu_memory_utilization: float = 0.9, params: InferenceParams | None = None,
                       collectives: Any = None, ranks: Sequence[int] | None = None,
                       check_kv: bool = True) -> float:
    """One decode step of `batch` sequences (the whole instance) each holding `context_len` tokens."""
    cost = StepCost(model, device, _layout(tp, ep, weight_dtype, kv_dtype, batch, gpu_memory_utilization),
                    params, collectives, ranks)
    if check_kv and batch * context_len > cost.kv_capacity_tokens:
        raise RlsimError(f"{batch} sequences of {context_len:.0f} tokens need {batch * context_len:.0f} KV "
                         f"tokens; the instance holds {cost.kv_capacity_tokens}", field="batch",
                         fix="lower the batch or context, or raise tp / ep")
    return cost.decode_step_s(batch, batch * context_len)


def decode_tokens_per_s(model: ModelSpec, device: Any, batch: int, context_len: float,
                        *, per_device: bool = False, **kwargs: Any) -> float:
    """Decode throughput of one instance (or per device with per_device=True): batch / step time."""
    rate = batch / decode_step_time_s(model, device, batch, context_len, **kwargs)
    return rate / (kwargs.get("tp", 1) * kwargs.get("ep", 1)) if per_device else rate


def prefill_tokens_per_s(model: ModelSpec, device: Any, batch: int, prompt_len: int, *, tp: int = 1,
                         ep: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                         params: InferenceParams | None = None, collectives: Any = None,
                         ranks: Sequence[int] | None = None, per_device: bool = False) -> float:
    """Prompt tokens per second of one prefill step of `batch` prompts of `prompt_len` tokens."""
    cost = StepCost(model, device, _layout(tp, ep, weight_dtype, kv_dtype, batch, 0.9), params,
                    collectives, ranks)
    tokens = batch * prompt_len
    rate = tokens / cost.prefill_s(tokens, batch * prompt_len * (prompt_len + 1) / 2.0, batch)
    return rate / (tp * ep) if per_device else rate


def split_device(device: Any, parts: int) -> Any:
    """One of `parts` equal dies of a multi-die package (e.g. a 910C die: half the FLOPs, HBM and
    bandwidth), for deployments that run one rank per die."""
    return device.replace(
        name=f"{device.name}/{parts}", peak_flops={k: v / parts for k, v in device.peak_flops.items()},
        hbm_bytes=device.hbm_bytes / parts, hbm_bw_Bps=device.hbm_bw_Bps / parts,
        scaleup_bw_Bps=device.scaleup_bw_Bps / parts, host_link_bw_Bps=device.host_link_bw_Bps / parts)


def instance_device(topology: Any, ranks: Sequence[int]) -> Any:
    """The device a rollout instance on `ranks` is costed on: its only kind; of mixed kinds the one
    with the lowest achievable HBM bandwidth (decode streams weights and KV: memory-bound), ties to
    the lowest bf16 peak, given the smallest HBM of the kinds (weights and KV must fit on every
    device). A bound for an instance that spans device kinds, which engines rarely do."""
    kinds = distinct_devices(topology, ranks)
    if len(kinds) == 1:
        return kinds[0]
    slow = min(kinds, key=lambda s: (s.hbm_bw_Bps * s.hbm_efficiency, s.peak("bf16")))
    hbm = min(k.hbm_bytes for k in kinds)
    return slow if slow.hbm_bytes == hbm else slow.replace(hbm_bytes=hbm)
