"""The rollout (inference) engine: continuous batching, jumped event to event in closed form.

An instance spans ``tp * ep * pp`` devices. The non-expert part of the model (attention, dense FFN,
shared experts, embeddings) is tensor-parallel over ``tp`` devices and replicated ``ep`` times:
each of the ``ep`` attention replicas serves its own share of the running sequences (data-parallel
attention, as DeepSeek / SGLang / CloudMatrix-Infer deploy MoE decode). Routed experts are split
over the ``ep`` replicas and tensor-parallel inside each, so every device holds E/ep experts / tp.
A dense model has ep = 1. Sequences are assumed spread evenly over the replicas. With ``pp``
pipeline stages (vLLM's pipeline_parallel_size) each stage of ``tp * ep`` devices holds a contiguous
share of the layers and the running sequences cycle through the stages as ``pp`` micro-batches (vLLM
V1's batch queue): a step of n sequences is ``pp`` passes of the fullest stage over n / pp of them
(docs/cost-models-inference.md, "Pipeline-parallel engines").

Cost of one step (all formulas in docs/cost-models-inference.md):
- decode (one token for each of n running sequences with K context tokens in total):
  max(compute, memory) + step overhead + TP all-reduces + EP all-to-alls, where compute and memory
  are linear in K, so while the running set is unchanged (K grows by n per step) k steps sum to an
  arithmetic series (two, when the max switches side once);
- prefill of newly admitted sequences: a separate compute-bound step that yields their first token
  (a preempted sequence re-prefills its prompt and the tokens it had generated: recompute).
KV capacity: (HBM x gpu_memory_utilization - weights - workspace) / KV bytes per token, per device.
A decode step of a sequence holding c tokens (prompt + generated) needs c slots: it writes the KV of
its newest token, the one it samples has none yet (vLLM 0.11 v1/core/sched/scheduler.py schedule:
num_new_tokens = num_tokens - num_computed_tokens = 1, kv_cache_manager.py allocate_slots:
num_computed_tokens + num_new_tokens; SGLang schedule_batch.py prepare_for_decode allocates one
slot a request for its input token). When the next step would not fit, the newest running
sequence is preempted.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from ..errors import RlsimError, validation_error
from ..hardware.devices import distinct_devices, worst_case_device
from ..network.collectives import line_time_s
from ..params import InferenceParams
from ..strict_model import StrictModel
from ..units import capacity_text
from .architecture import DTYPE_BYTES, ModelSpec, dtype_bytes
from .kv_pool import KvPool, KvPoolShape, kv_pages_matter, mixes_windows, windows_paged
from .sglang_pool import (
    SGLANG_SSM_STATE_AUTO_BYTES,
    SglangPool,
    has_state_radix,
    keeps_swa_pool,
    mamba_slots,
    state_slot_bytes,
)
from .speculative import Draft, DraftPool, build_draft, refuse_unmodelled

_COMPUTE_DTYPE = {"int8": "int8", "fp8": "fp8", "fp16": "fp16"}  # W8A8 / FP8 GEMMs; others run in bf16
_FIT_FIX = "raise tp or ep, use weight_dtype int8/fp8, lower workspace_bytes, or pick a larger device"


class RolloutLayout(StrictModel):
    """How rollout instances are laid out (`workload.rollout_layout`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    # Pipeline stages of one instance (vLLM pipeline_parallel_size): contiguous blocks of tp x ep ranks.
    pp: int = Field(1, ge=1)
    instances: int = Field(1, ge=1)
    # Per attention replica, as vLLM's max_num_seqs per engine (vLLM default 256).
    max_num_seqs: int = Field(256, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM default 0.9
    weight_dtype: str = "bf16"  # bf16 | fp16 | fp8 | int8 (DeepSeek-R1 on CloudMatrix384: int8)
    kv_dtype: str = "bf16"
    # The Mamba / linear-attention state's dtype (vLLM --mamba-cache-dtype, default "auto": the model's
    # dtype, config/cache.py CacheConfig.mamba_cache_dtype and layers/mamba/mamba_utils.py
    # get_kv_cache_torch_dtype("auto", model_dtype)); "auto" is MAMBA_CACHE_AUTO_DTYPE, else a dtype
    # (vLLM takes float32 besides auto). Applies to a model with such layers only.
    mamba_cache_dtype: str = "auto"

    @property
    def devices_per_instance(self) -> int:
        return self.tp * self.ep * self.pp

    @property
    def devices(self) -> int:
        return self.devices_per_instance * self.instances

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str = "<rollout_layout>",
                     field_name: str = "rollout_layout") -> RolloutLayout:
        try:
            layout = cls(**dict(mapping))
        except ValidationError as exc:
            raise validation_error(exc, source=source, prefix=field_name, model=cls,
                                   fix="see docs/cost-models-inference.md for the fields") from None
        except TypeError:
            raise RlsimError(f"expected a mapping, got {mapping!r}", source=source, field=field_name) from None
        for name in ("weight_dtype", "kv_dtype"):
            dtype_bytes(getattr(layout, name), f"{field_name}.{name}", source)
        mamba_cache_bytes(layout, field_name, source)
        return layout


# "auto" for the Mamba state's dtype: the model's dtype (vLLM's ModelConfig.dtype), bf16 for the
# hybrid checkpoints rlsim presets (Nemotron-H, Qwen3-Next: torch_dtype bfloat16 in their config.json).
MAMBA_CACHE_AUTO_DTYPE = "bf16"


def mamba_cache_bytes(layout: RolloutLayout, field_name: str = "rollout_layout", source: str | None = None) -> float:
    """Bytes per element of the Mamba / linear-attention state (rollout_layout.mamba_cache_dtype)."""
    dtype = MAMBA_CACHE_AUTO_DTYPE if layout.mamba_cache_dtype == "auto" else str(layout.mamba_cache_dtype).lower()
    if dtype not in DTYPE_BYTES:
        raise RlsimError(f"unknown dtype {layout.mamba_cache_dtype!r}", source=source,
                         field=f"{field_name}.mamba_cache_dtype",
                         fix=f"use auto (the model's dtype, vLLM's default) or one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


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
    # seq_id -> its tokens whose KV was in the cache at the interrupt (a running sequence's prompt +
    # generated; none for a waiting one or one inside an unfinished prefill): what a request paused in
    # place, rather than aborted, keeps (add_many's ``kept``)
    cached: dict[int, int] = field(default_factory=dict)


# ---- the cost of one step -------------------------------------------------------------------------
class StepCost:
    """Per-device cost of prefill and decode steps of one instance layout (pure, no state).

    ``layout_field``: the dotted key of the layout its errors name (``workload.rollout_layout`` in
    a scenario run; ``rollout_layout`` standalone)."""

    def __init__(self, model: ModelSpec, device: Any, layout: RolloutLayout,
                 params: InferenceParams | None = None, collectives: Any = None,
                 ranks: Sequence[int] | None = None, *, layout_field: str = "rollout_layout") -> None:
        self.model, self.device, self.layout = model, device, layout
        self.layout_field = layout_field
        self.params = params = params or InferenceParams()
        tp, ep = layout.tp, layout.ep
        _check_layout(model, layout, params, layout_field)
        self.collectives = collectives
        self.ranks = list(ranks) if ranks is not None else None
        if self.ranks is not None and len(self.ranks) != layout.devices_per_instance:
            raise ValueError(f"an instance needs {layout.devices_per_instance} ranks, got {len(self.ranks)}")
        self.devices = tp * ep   # one pipeline stage's
        # Pipeline stages: the fullest holds ceil(L / pp) of the L layers (vLLM's get_pp_indices
        # splits them evenly); each device keeps that share of the weights, the KV and the Mamba
        # state, and a step is pp passes of that stage (pipeline_factor >= 1 with uneven stages).
        self.pp = layout.pp
        self.stage_share = math.ceil(model.num_layers / self.pp) / model.num_layers if self.pp > 1 else 1.0
        self.pipeline_factor = self.pp * self.stage_share
        # speculative decoding's drafter (params.speculative_method; llm/speculative.py), None without it
        self.draft: Draft | None = None
        if params.speculative_method is not None:
            refuse_unmodelled(model, layout, params, layout_field)
            self.draft = build_draft(model, layout, params, linear_rate=_linear_rate(device, layout, params, layout_field),
                                     attn_rate=device.peak("bf16") * params.attention_compute_efficiency,
                                     layout_field=layout_field)
        self._place_memory(model, device, layout, params, layout_field)
        self._set_rates(model, device, layout, params, layout_field)
        self._comm_cache: dict[float, float] = {}
        self._coll_lines: dict[tuple[str, int], tuple[tuple[float, float], ...]] = {}   # (op, group size)
        self._lines_cache: dict[int, tuple[float, float, float, float, float]] = {}
        self._per_n_table = np.full((1, 6), np.nan)                # per_n_rows: _per_n by n

    def _place_memory(self, model: ModelSpec, device: Any, layout: RolloutLayout, params: InferenceParams,
                      layout_field: str) -> None:
        """What one device holds (its share of the weights, the KV cache per token, the Mamba state)
        and the KV capacity left; RlsimError when the weights leave no room for it."""
        tp, ep, share = layout.tp, layout.ep, self.stage_share
        wbytes = dtype_bytes(layout.weight_dtype, f"{layout_field}.weight_dtype")
        kvbytes = dtype_bytes(layout.kv_dtype, f"{layout_field}.kv_dtype")
        # Weights per device: non-expert part / tp; routed experts / (tp ep); a stage's share of both.
        self.expert_bytes_dev = model.params_routed_experts * wbytes / (tp * ep) * share
        self.dense_bytes_dev = (model.params_total - model.params_routed_experts) * wbytes / tp * share
        self.weight_bytes_dev = self.dense_bytes_dev + self.expert_bytes_dev
        # What a step streams: not the input lookup tables (a step gathers one row a token; an LM head
        # tied to the token table reads it whole), measured: a Llama-3.1-8B decode step on an H200
        # streams 15.1 GB, not the 16.1 GB of all its weights (benchmarks/device_decode_graphs.py).
        lookup_only = model.params_embedding - (model.vocab * model.hidden if model.tied_head else 0)
        self.streamed_dense_bytes_dev = self.dense_bytes_dev - lookup_only * wbytes / tp * share
        self.route_p = model.experts_per_token / model.num_experts if model.is_moe else 0.0
        # what a decode step reads a context token: its KV on the full-attention layers (not a padded
        # group's, nor a Llama 4 chunked layer's that the cache keeps whole)
        self.kv_read_bytes_per_token_dev = (model.kv_elems_per_token() if model.is_mla else 2 * (
            model.num_attention_layers - model.num_sliding_layers) * max(model.num_kv_heads // tp, 1) * model.head_dim
        ) * kvbytes * share
        # Sliding-window layers keep a sequence's last `window` tokens (vLLM's hybrid KV cache frees the
        # blocks behind the window): what a decode step reads of them a sequence.
        self.window_bytes_per_seq_dev = (2 * model.num_sliding_layers * max(model.num_kv_heads // tp, 1)
                                         * model.head_dim * model.sliding_window * kvbytes * share)
        hbm = device.hbm_bytes * layout.gpu_memory_utilization
        self.kv_free_bytes_dev = hbm - self.weight_bytes_dev - params.workspace_bytes
        if self.draft is not None:   # the drafter's weights beside the target's
            self.kv_free_bytes_dev -= self.draft.resident_bytes
        # The engine's KV memory (params.kv_pool): vLLM's one pool of pages (kv_pool.py), a running
        # sequence drawing its tokens' pages and, beside them, its windows' and states'
        # (seq_pool_bytes_dev); or SGLang's token, SWA and state pools (sglang_pool.py).
        # (full attention caches its tokens alike in either: the pool kind is not read, so the engines set it whatever the model)
        builder = KV_POOLS[params.kv_pool] if _paged(model, params) else _vllm_pool
        kv_pool = builder(model, layout, params, kvbytes, share, self.kv_free_bytes_dev, layout_field)
        if self.draft is not None:   # the drafter's cache a token beside the target's (a full-attention target)
            kv_pool = DraftPool(kv_pool, self.draft.kv_bytes_per_token, self.draft.lookahead)
        self.kv_bytes_per_token_dev = kv_pool.token_bytes   # what a token draws from the pool (padding included)
        # A hybrid model's Mamba layers keep a constant state per sequence (heads split over tp), read
        # and written once per decode step of the sequence.
        self.state_bytes_per_seq_dev = kv_pool.state_bytes
        self.seq_pool_bytes_dev = kv_pool.seq_bytes
        max_seqs = kv_pool.max_seqs
        self._refuse_unfit(model, device, layout, params, kv_pool, hbm, layout_field)
        self.kv_capacity_replica = kv_pool.capacity_tokens
        self.kv_capacity_tokens = ep * self.kv_capacity_replica  # pooled over the replicas (even spread)
        # context tokens' worth of pool a running sequence draws beside its own tokens (0: full attention only)
        self.seq_kv_tokens = kv_pool.seq_tokens
        # what those are, for messages: with speculation the drafts' lookahead slots (full attention only)
        self.seq_kv_what = ("its drafts' lookahead slots" if self.draft is not None
                            else "its windows' / states' pages")
        # a model that draws nothing per token: the pool bounds the running sequences
        self.max_running = (layout.max_num_seqs if max_seqs is None else min(layout.max_num_seqs, max_seqs)) * ep

    def _refuse_unfit(self, model: ModelSpec, device: Any, layout: RolloutLayout, params: InferenceParams,
                      kv_pool: KvPool | SglangPool | DraftPool, hbm: float, layout_field: str) -> None:
        """RlsimError when the weights (and SGLang's state slots) leave no room for the KV cache."""
        if (self.kv_free_bytes_dev > max(self.kv_bytes_per_token_dev, 0.0) and self.kv_free_bytes_dev > 0
                and kv_pool.max_seqs != 0 and kv_pool.capacity_tokens >= 1):
            return
        slots = getattr(kv_pool, "state_slots", 0)
        held = (f", SGLang's {slots} Mamba state slots {slots * kv_pool.state_bytes / 1e9:.1f} GB" if slots else "")
        raise RlsimError(
            f"{model.name} does not fit for inference on {device.name} with tp={layout.tp}, ep={layout.ep}"
            f"{f', pp={self.pp}' if self.pp > 1 else ''}: "
            f"{capacity_text(device.hbm_bytes)} x {layout.gpu_memory_utilization} = {hbm / 1e9:.1f} GB per device, "
            f"weights {self.weight_bytes_dev / 1e9:.1f} GB ({layout.weight_dtype}), workspace "
            f"{params.workspace_bytes / 1e9:.1f} GB{held}, leaving no room for the KV cache", field=layout_field,
            fix=_FIT_FIX + (_fewer_slots_fix(params) if slots else ""))

    def _set_rates(self, model: ModelSpec, device: Any, layout: RolloutLayout, params: InferenceParams,
                   layout_field: str) -> None:
        """Seconds per token, context token and byte of a step's parts on one device, and the eager
        launches of a step."""
        share, ep = self.stage_share, layout.ep
        gemm_eff = params.gemm_efficiency or device.gemm_efficiency
        self.bw = device.hbm_bw_Bps * (params.hbm_efficiency or device.hbm_efficiency)
        linear_rate = _linear_rate(device, layout, params, layout_field)
        bf16_rate = device.peak("bf16")
        # FLOPs per device: everything splits over tp * ep under an even spread of sequences; a
        # stage computes its share of the layers for every sequence once a step.
        self.lin_s_per_token = 2.0 * model.params_compute / self.devices / linear_rate * share
        # Mamba layers: the recurrent step (decode) and the chunked scan (prefill), at the attention
        # kernels' efficiency (scan kernels are not GEMMs).
        scan_rate = bf16_rate * params.attention_compute_efficiency
        self.decode_ssm_s_per_token = model.ssm_flops_per_token(recurrent=True) / self.devices / scan_rate * share
        self.prefill_ssm_s_per_token = model.ssm_flops_per_token() / self.devices / scan_rate * share
        self.state_s_per_seq = 2.0 * self.state_bytes_per_seq_dev / self.bw
        # Attention per context token on the full layers; a sliding layer's per sequence over its window
        # (an upper bound while the sequence is shorter than the window) and its window's KV read.
        self.window_share = model.num_sliding_layers / model.num_attention_layers if model.num_attention_layers else 0.0
        self.window = model.sliding_window
        all_layers_s_per_ctx = (model.attention_flops_per_context_token(absorb_mla=params.absorb_mla)
                                / self.devices / (bf16_rate * params.attention_compute_efficiency) * share)
        self.decode_attn_s_per_ctx = all_layers_s_per_ctx * (1.0 - self.window_share) if self.window_share \
            else all_layers_s_per_ctx
        self.decode_per_seq_s = (self.decode_ssm_s_per_token + all_layers_s_per_ctx * self.window_share * self.window
                                 if self.window_share else self.decode_ssm_s_per_token)
        # a decode step's reads a sequence: its Mamba / GDN state (read and written), its windows' KV; a
        # replica's sequences on each device (an MoE engine's ep replicas split them)
        self.decode_seq_read_s = (self.state_s_per_seq / ep + self.window_bytes_per_seq_dev / ep / self.bw
                                  if self.window_share else self.state_s_per_seq / ep)
        self.prefill_attn_s_per_pair = (model.attention_flops_per_context_token()
                                        / self.devices / (bf16_rate * gemm_eff) * share)
        self.kv_s_per_token = self.kv_read_bytes_per_token_dev / ep / self.bw  # reads: own replica's share
        launch_s = device.launch_overhead_s if params.launch_overhead_s is None else params.launch_overhead_s
        launches = (params.launches_per_step + params.launches_per_layer * model.num_layers
                    + params.launches_per_moe_layer * model.num_moe_layers)
        self.eager_launch_s = launch_s * launches
        # the GPU's gaps between an eager step's kernels (InferenceParams.eager_kernel_gap_s)
        self.eager_gap_s = max(params.cuda_graph_replay_s, params.eager_kernel_gap_s * launches)
        self.launch_s = launch_s
        # the decode lines' seconds a context token (compute, memory): with speculation a step's / E
        self.decode_ctx_compute_s, self.decode_ctx_memory_s = self.decode_attn_s_per_ctx, self.kv_s_per_token
        if self.draft is not None:
            self._set_draft_rates(model, device, params, gemm_eff)

    def _set_draft_rates(self, model: ModelSpec, device: Any, params: InferenceParams, gemm_eff: float) -> None:
        """The speculative step's rates a context token (verification's k + 1 queries and the draft
        forwards' draft_tokens a sequence attend to it; the target's KV read once, the draft's each of
        its k forwards), a token unit's share (/ E), and the draft's prefill rates."""
        d = self.draft
        assert d is not None
        self.draft_kv_s_per_token = d.kv_bytes_per_token / self.layout.ep / self.bw
        self.decode_ctx_compute_s = (d.verified * self.decode_attn_s_per_ctx + d.draft_tokens * d.attn_s_per_ctx) / d.tokens
        self.decode_ctx_memory_s = (self.kv_s_per_token + d.k * self.draft_kv_s_per_token) / d.tokens
        self.draft_prefill_s_per_pair = (d.model.attention_flops_per_context_token() / self.devices
                                         / (device.peak("bf16") * gemm_eff))

    # -- pieces that depend on the number of tokens in the step ---------------------------------
    def weight_read_s(self, tokens: float) -> float:
        """Weights streamed in a step of `tokens` tokens; only the experts some token picked are read
        (expected share of one device's experts touched: 1 - (1 - k/E)^tokens)."""
        touched = 1.0 - (1.0 - self.route_p) ** (tokens / self.pp) if self.route_p else 0.0
        return self.pp * (self.streamed_dense_bytes_dev + self.expert_bytes_dev * touched) / self.bw

    def comm_s(self, tokens: float) -> float:
        """TP all-reduces (2 per layer) and EP dispatch + combine (per MoE layer) for one step; with
        pipeline stages, those of each stage's micro-batch of tokens / pp, pp times over the
        fullest stage's layers, and the sends between stages."""
        cached = self._comm_cache.get(tokens)
        if cached is not None:
            return cached
        m, lay, p = self.model, self.layout, self.params
        total = 0.0
        micro = tokens / self.pp
        stage = self.ranks[: self.devices] if self.ranks is not None else None
        if lay.tp > 1:
            nbytes = micro / lay.ep * m.hidden * p.activation_bytes
            ranks = self.ranks[: lay.tp] if self.ranks is not None else None
            total += (m.tp_reductions_per_layer * m.num_layers * self.pipeline_factor
                      * self._collective("all_reduce", lay.tp, ranks, nbytes))
        if lay.ep > 1 and m.is_moe:
            per_rank = micro / self.devices * m.experts_per_token * m.hidden
            dispatch = self._collective("all_to_all", self.devices, stage, per_rank * p.dispatch_bytes)
            combine = self._collective("all_to_all", self.devices, stage, per_rank * p.activation_bytes)
            total += m.num_moe_layers * self.pipeline_factor * (dispatch + combine)
        if self.pp > 1:
            total += (self.pp - 1) * self._collective("p2p", 2, self._send_ranks(), self._send_bytes(micro))
        self._comm_cache[tokens] = total
        return total

    def _send_ranks(self) -> list[int] | None:
        """A stage boundary: the first rank of the first stage and of the second."""
        return [self.ranks[0], self.ranks[self.devices]] if self.ranks is not None else None

    def _send_bytes(self, micro: Any) -> Any:
        """Bytes one rank sends to the next stage for a micro-batch of ``micro`` tokens: the
        pipeline_send_tensors activations of hidden width, split over the tp ranks (vLLM's
        send_tensor_dict with its all_gather_group), per attention replica."""
        m, lay, p = self.model, self.layout, self.params
        return micro / lay.ep * m.hidden * p.pipeline_send_tensors * p.activation_bytes / lay.tp

    def weight_read_many_s(self, tokens: np.ndarray) -> np.ndarray:
        """weight_read_s over an integer array, bit-identical (the same operations; the MoE share
        of experts touched by the scalar power, as weight_read_s, once per distinct count)."""
        if not self.route_p:
            return np.full(len(tokens), self.pp * (self.streamed_dense_bytes_dev + self.expert_bytes_dev * 0.0)
                           / self.bw)
        keep = 1.0 - self.route_p
        distinct = _distinct(tokens)   # the scalar power once per distinct count (a run repeats them)
        touched = np.array([1.0 - keep ** (x / self.pp) for x in distinct.tolist()])[np.searchsorted(distinct, tokens)]
        return self.pp * (self.streamed_dense_bytes_dev + self.expert_bytes_dev * touched) / self.bw

    def comm_many_s(self, tokens: np.ndarray) -> np.ndarray:
        """comm_s over an integer array, bit-identical: the same operations on each element."""
        m, lay, p = self.model, self.layout, self.params
        total = np.zeros(len(tokens))
        micro = tokens / self.pp
        stage = self.ranks[: self.devices] if self.ranks is not None else None
        if lay.tp > 1:
            nbytes = micro / lay.ep * m.hidden * p.activation_bytes
            ranks = self.ranks[: lay.tp] if self.ranks is not None else None
            total = total + (m.tp_reductions_per_layer * m.num_layers * self.pipeline_factor
                             * self._collective_many("all_reduce", lay.tp, ranks, nbytes))
        if lay.ep > 1 and m.is_moe:
            per_rank = micro / self.devices * m.experts_per_token * m.hidden
            dispatch = self._collective_many("all_to_all", self.devices, stage, per_rank * p.dispatch_bytes)
            combine = self._collective_many("all_to_all", self.devices, stage, per_rank * p.activation_bytes)
            total = total + m.num_moe_layers * self.pipeline_factor * (dispatch + combine)
        if self.pp > 1:
            total = total + (self.pp - 1) * self._collective_many("p2p", 2, self._send_ranks(), self._send_bytes(micro))
        return total

    def _custom_lines(self, op: str, ranks: Sequence[int] | None) -> tuple[tuple[float, float], ...]:
        """The engine's own all-reduce on ``ranks`` (params.custom_all_reduce) when it applies to
        ``op`` and the group, else empty (NCCL)."""
        if (op != "all_reduce" or not self.params.custom_all_reduce or ranks is None or self.collectives is None
                or not hasattr(self.collectives, "custom_all_reduce_lines")):
            return ()
        key = ("custom_all_reduce", len(ranks))
        lines = self._coll_lines.get(key)
        if lines is None:
            lines = self._coll_lines[key] = self.collectives.custom_all_reduce_lines(tuple(ranks))
        return lines

    def _collective_many(self, op: str, n: int, ranks: Sequence[int] | None, nbytes: np.ndarray) -> np.ndarray:
        """_collective over an array of sizes (each > 0), element for element."""
        custom = self._custom_lines(op, ranks)
        if custom:
            fast = custom[0][0] + custom[0][1] * nbytes
            for fixed, slope in custom[1:]:
                fast = np.minimum(fast, fixed + slope * nbytes)
            fast = np.where(nbytes == 0, 0.0, fast)   # line_time_s: nothing to move costs nothing
            small = nbytes < self.params.custom_all_reduce_max_bytes
            return fast if small.all() else np.where(small, fast, self._nccl_many(op, n, ranks, nbytes))
        return self._nccl_many(op, n, ranks, nbytes)

    def _nccl_many(self, op: str, n: int, ranks: Sequence[int] | None, nbytes: np.ndarray) -> np.ndarray:
        """The collective library's time over an array of sizes (each > 0), element for element."""
        if self.collectives is not None and ranks is not None:
            if not hasattr(self.collectives, "lines"):
                return np.array([self._collective(op, n, ranks, x) for x in nbytes.tolist()])
            lines = self._lines_of(op, ranks)
            if not lines:
                return np.zeros(len(nbytes))
            best = lines[0][0] + lines[0][1] * nbytes
            for fixed, slope in lines[1:]:
                best = np.minimum(best, fixed + slope * nbytes)
            return np.where(nbytes == 0, 0.0, best)   # line_time_s: nothing to move costs nothing
        p = self.params
        steps, factor = _fallback_shape(op, n)
        return (self.device.launch_overhead_s + steps * p.fallback_step_latency_s
                + factor * nbytes / (self.device.scaleup_bw_Bps * p.fallback_collective_efficiency))

    def _lines_of(self, op: str, ranks: Sequence[int]) -> tuple[tuple[float, float], ...]:
        """The CollectiveModel's lines of ``op`` on ``ranks``, planned once per (op, group size)."""
        key = (op, len(ranks))
        lines = self._coll_lines.get(key)
        if lines is None:
            lines = self._coll_lines[key] = self.collectives.lines(op, tuple(ranks))
        return lines

    def _collective(self, op: str, n: int, ranks: Sequence[int] | None, nbytes: float) -> float:
        custom = self._custom_lines(op, ranks)
        if custom and nbytes < self.params.custom_all_reduce_max_bytes:
            return line_time_s(custom, nbytes)
        if self.collectives is not None and ranks is not None:
            if hasattr(self.collectives, "lines"):   # a CollectiveModel: one plan per algorithm, any size
                return line_time_s(self._lines_of(op, ranks), nbytes)
            return float(self.collectives.cost(op, list(ranks), nbytes).time_s)
        p = self.params
        steps, factor = _fallback_shape(op, n)
        return (self.device.launch_overhead_s + steps * p.fallback_step_latency_s
                + factor * nbytes / (self.device.scaleup_bw_Bps * p.fallback_collective_efficiency))

    # -- the CPU side of a step ---------------------------------------------------------------------
    def uses_graphs(self, tokens: float) -> bool:
        """Whether a step of `tokens` tokens (instance-wide) replays a CUDA graph: not enforce_eager
        and at most cuda_graph_max_batch tokens per attention replica in a stage's micro-batch."""
        p = self.params
        return not p.enforce_eager and math.ceil(tokens / (self.layout.ep * self.pp)) <= p.cuda_graph_max_batch

    def overhead_s(self, tokens: float, seqs: float) -> tuple[float, float]:
        """(added, floor) of a step of `tokens` tokens for `seqs` sequences: it lasts
        max(floor, GPU time + added). Scheduler CPU = step_overhead_s + cpu_per_seq_s x seqs per
        replica; launches = the graph replay, or eager_launch_s overlapped with the GPU's kernels.
        A sync engine adds the scheduler to the step; an async one overlaps it with the GPU's.
        Pipeline stages: _staged_overhead."""
        p = self.params
        if self.pp > 1:
            added, floor = self._staged_overhead(seqs, self.uses_graphs(tokens))
            return added, float(floor)
        sched = p.step_overhead_s + p.cpu_per_seq_s * seqs / self.layout.ep
        graphs = self.uses_graphs(tokens)
        # An eager step's kernels stand eager_gap_s apart on the GPU side (at least the graph's
        # replay time), so it is never shorter than the same step with graphs. The replay's gaps are
        # GPU time too: overlapping the scheduler does not hide them (it read a batch-1 step at the
        # bare bandwidth bound; an audit).
        if p.async_scheduling:
            if graphs:
                return p.cuda_graph_replay_s, sched + p.cuda_graph_replay_s
            return self.eager_gap_s, sched + self.eager_launch_s
        if graphs:
            return sched + p.cuda_graph_replay_s, 0.0
        return sched + self.eager_gap_s, sched + self.eager_launch_s

    def overhead_many_s(self, tokens: np.ndarray, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """overhead_s over integer arrays, bit-identical: its four cases element by element."""
        p = self.params
        graphs = (np.ceil(tokens / (self.layout.ep * self.pp)) <= p.cuda_graph_max_batch if not p.enforce_eager
                  else np.zeros(len(tokens), bool))
        if self.pp > 1:
            added, floor = self._staged_overhead(seqs, graphs)
            return added + np.zeros(len(tokens)), floor
        sched = p.step_overhead_s + p.cpu_per_seq_s * seqs / self.layout.ep
        if p.async_scheduling:
            return (np.where(graphs, p.cuda_graph_replay_s, self.eager_gap_s),
                    np.where(graphs, sched + p.cuda_graph_replay_s, sched + self.eager_launch_s))
        return (sched + np.where(graphs, p.cuda_graph_replay_s, self.eager_gap_s),
                np.where(graphs, 0.0, sched + self.eager_launch_s))

    def _staged_overhead(self, seqs: Any, graphs: Any) -> tuple[Any, Any]:
        """(added, floor) with pipeline stages (a sync engine: vLLM refuses async scheduling with
        them). vLLM V1's batch queue keeps pp micro-batches in flight and schedules one while the
        others run, but a micro-batch's next step waits for the CPU to take its output and schedule
        it, so each step adds one micro-batch's scheduler (seqs / pp of them); the CPU does all pp
        of them a step (the floor), and each stage's worker launches its eager kernels beside the
        engine core's scheduling."""
        p = self.params
        micro = p.step_overhead_s + p.cpu_per_seq_s * seqs / (self.layout.ep * self.pp)
        whole = p.step_overhead_s * self.pp + p.cpu_per_seq_s * seqs / self.layout.ep
        eager = np.maximum(whole, micro + self.eager_launch_s)
        gap = (np.where(graphs, p.cuda_graph_replay_s, self.eager_gap_s) if isinstance(graphs, np.ndarray)
               else p.cuda_graph_replay_s if graphs else self.eager_gap_s)
        return micro + gap, np.where(graphs, whole, eager)

    # -- whole steps ------------------------------------------------------------------------------
    def _per_n(self, n: int) -> tuple[float, float, float, float, float, float]:
        per_n = self._lines_cache.get(n)
        if per_n is None and n < len(self._per_n_table) and not math.isnan(self._per_n_table[n, 0]):
            per_n = self._lines_cache[n] = tuple(self._per_n_table[n].tolist())   # per_n_rows filled it: the same
        if per_n is None:
            per_n = self._plain_per_n(n) if self.draft is None else self._speculative_per_n(n)
            self._lines_cache[n] = per_n
        return per_n

    def _plain_per_n(self, n: int) -> tuple[float, float, float, float, float, float]:
        """A decode step of n sequences, one token each: (matmul seconds, weights and state read,
        overhead and links, attention slope, KV-read slope, CPU floor)."""
        added, floor = self.overhead_s(n, n)
        return (n * (self.lin_s_per_token + self.decode_per_seq_s),
                self.weight_read_s(n) + n * self.decode_seq_read_s, added + self.comm_s(n),
                self.decode_attn_s_per_ctx * n, self.kv_s_per_token * n, floor)

    def _speculative_per_n(self, n: int) -> tuple[float, float, float, float, float, float]:
        """_plain_per_n's row of a token unit with speculation: 1/E of a step in which the target
        verifies k + 1 positions a sequence (its weights and state read once; its matmuls, links and
        graph sized by (k + 1) n tokens) after k draft forwards (the first over first_tokens x n: the
        (k + 1) n verified positions, vLLM's padded batch, or the E n accepted; the others over n; each
        reads the draft's weights, runs its links and replays its graph, or runs eager, at its own width;
        its LM head scores n rows). The step's roofline is taken over the whole step, draft and
        verification, as over a plain step's kernels."""
        d = self.draft
        assert d is not None
        width = d.verified * n
        added, floor = self.overhead_s(width, n)
        forwards = self._draft_forwards(n)
        eager = [not self.uses_graphs(tokens) for tokens in forwards]
        eager_gap = max(self.params.cuda_graph_replay_s, self.params.eager_kernel_gap_s * d.launches)
        gaps = sum(eager_gap if is_eager else self.params.cuda_graph_replay_s for is_eager in eager)
        if floor > 0.0:   # the CPU launches the eager draft forwards' kernels too
            floor += sum(eager) * self.launch_s * d.launches
        draft_read = sum(self._draft_read_s(tokens) for tokens in forwards)
        draft_links = sum(self._draft_comm_s(tokens) for tokens in forwards) + gaps
        draft_matmuls = d.draft_tokens * n * d.layer_s_per_token + d.k * n * d.head_s_per_token
        E = d.tokens
        return ((width * (self.lin_s_per_token + self.decode_per_seq_s) + draft_matmuls) / E,
                (self.weight_read_s(width) + n * self.decode_seq_read_s + draft_read) / E,
                (added + self.comm_s(width) + draft_links) / E,
                self.decode_ctx_compute_s * n, self.decode_ctx_memory_s * n, floor / E)

    def decode_comm_s(self, n: int) -> float:
        """The TP all-reduces and EP all-to-alls of a token unit of n sequences (decode_step_s's unit):
        a decode step's; with speculation 1/E of a step's, the verification's (k + 1) n tokens and the
        draft forwards'."""
        d = self.draft
        if d is None:
            return self.comm_s(n)
        drafts = sum(self._draft_comm_s(tokens) for tokens in self._draft_forwards(n))
        return (self.comm_s(d.verified * n) + drafts) / d.tokens

    def _draft_forwards(self, n: int) -> list[float]:
        """The tokens of a speculative step's k draft forwards for n sequences: the first's
        first_tokens a sequence, then one each."""
        d = self.draft
        assert d is not None
        return [d.first_tokens * n] + [float(n)] * (d.k - 1)

    def _draft_read_s(self, tokens: float) -> float:
        """The drafter's weights a forward of ``tokens`` tokens streams (the experts some token picked)."""
        d = self.draft
        assert d is not None
        touched = 1.0 - (1.0 - d.route_p) ** tokens if d.route_p else 0.0
        return (d.dense_bytes + d.expert_bytes * touched) / self.bw

    def _draft_comm_s(self, tokens: float) -> float:
        """The drafter's TP all-reduces and EP all-to-alls a forward of ``tokens`` tokens (comm_s's, on
        its layers)."""
        d = self.draft
        assert d is not None
        m, lay, p = d.model, self.layout, self.params
        total = 0.0
        if lay.tp > 1:
            ranks = self.ranks[: lay.tp] if self.ranks is not None else None
            total += (m.tp_reductions_per_layer * m.num_layers
                      * self._collective("all_reduce", lay.tp, ranks, tokens / lay.ep * m.hidden * p.activation_bytes))
        if lay.ep > 1 and m.is_moe:
            stage = self.ranks[: self.devices] if self.ranks is not None else None
            per_rank = tokens / self.devices * m.experts_per_token * m.hidden
            total += m.num_moe_layers * (self._collective("all_to_all", self.devices, stage, per_rank * p.dispatch_bytes)
                                         + self._collective("all_to_all", self.devices, stage, per_rank * p.activation_bytes))
        return total

    def per_n_rows(self, n: np.ndarray) -> np.ndarray:
        """_per_n's rows for an array of running counts (n >= 1), from one table filled as asked."""
        top = int(n.max())
        table = self._per_n_table
        if len(table) <= top:
            table = self._per_n_table = np.vstack([table, np.full((top + 1 - len(table), 6), np.nan)])
        asked = np.zeros(top + 1, bool)
        asked[n] = True
        new = np.flatnonzero(asked & np.isnan(table[:top + 1, 0]))   # the counts asked first now, in order
        if len(new):
            table[new] = self._per_n_many(new)
        return table[n]

    def _per_n_many(self, n: np.ndarray) -> np.ndarray:
        """_per_n's rows for an array of distinct running counts, bit-identical (the same
        operations, overhead_s's cases element by element; with speculation _per_n's own, row by row)."""
        if self.draft is not None:
            return np.array([self._speculative_per_n(count) for count in n.tolist()], float).reshape(len(n), 6)
        added, floor = self.overhead_many_s(n, n)
        return np.stack([n * (self.lin_s_per_token + self.decode_per_seq_s),
                         self.weight_read_many_s(n) + n * self.decode_seq_read_s, added + self.comm_many_s(n),
                         self.decode_attn_s_per_ctx * n, self.kv_s_per_token * n, floor], axis=1)

    def decode_lines(self, n: int, k0: float) -> tuple[float, float, float, float, float]:
        """Step j (0-based) of n sequences starting at total context k0 costs
        max(f, max(c0 + c1 j, m0 + m1 j) + e), f = decode_floor_s(n). Returns (c0, c1, m0, m1, e).
        A step is a token a sequence: with speculation, 1/E of a verification step (the engine
        counts a step's E tokens one by one, its context growing a token a sequence each)."""
        lin, weights, e, c1, m1, _ = self._per_n(n)
        return (lin + self.decode_ctx_compute_s * k0, c1, weights + self.decode_ctx_memory_s * k0, m1, e)

    def verify_step_s(self, n: int, context_tokens: float) -> float:
        """A whole speculative step (k draft forwards and the verification) of n sequences holding
        ``context_tokens`` in all: E token units' cost at that context; a decode step without speculation."""
        tokens = self.draft.tokens if self.draft is not None else 1.0
        return self.decode_step_s(n, context_tokens) * tokens

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
        if self.draft is None:
            c0, c1, m0, m1, _ = self.decode_lines(n, k0)
        else:   # the riders of a prefill chunk decode a token each, without drafts (a limit)
            lin, weights, _, c1, m1, _ = self._plain_per_n(n)
            c0, m0 = lin + self.decode_attn_s_per_ctx * k0, weights + self.kv_s_per_token * k0
        chunk = tokens / steps
        width = n + chunk
        c0 += (chunk * (self.lin_s_per_token + self.prefill_ssm_s_per_token)
               + self.windowed_pairs(chunk, pairs / steps) * self.prefill_attn_s_per_pair)
        m0 += self.weight_read_s(width) - self.weight_read_s(n) + chunk * self.kv_s_per_token
        added, floor = self.overhead_s(width, n + seqs / steps)
        links = self.comm_s(width)
        if self.draft is not None:   # and the drafter's pass over the chunk (its rows: the step's pieces)
            rows = seqs / steps
            c0, m0, links = self._with_draft_prefill(chunk, pairs / steps, rows, (c0, m0, links),
                                                     (self._draft_read_s(chunk), self._draft_comm_s(chunk)),
                                                     self._draft_tail_s(rows))
        return series_time_s((c0, c1, m0, m1, added + links), steps, floor)

    def prefill_many_s(self, tokens: np.ndarray, attention_pairs: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """prefill_s over arrays (integer tokens and sequences), bit-identical to it: the same
        operations in the same order; the weights read and the links per distinct token count."""
        if not len(tokens):
            return np.zeros(0)
        compute = (tokens * (self.lin_s_per_token + self.prefill_ssm_s_per_token)
                   + self.windowed_pairs(tokens, attention_pairs) * self.prefill_attn_s_per_pair)
        memory = self.weight_read_many_s(tokens) + tokens * self.kv_s_per_token + seqs * self.state_s_per_seq / self.layout.ep / 2
        comm = self.comm_many_s(tokens)
        if self.draft is not None:
            read = np.array([self._draft_read_s(x) for x in tokens.tolist()], float)
            links = np.array([self._draft_comm_s(x) for x in tokens.tolist()], float)
            tail = np.array([self._draft_tail_s(x) for x in seqs.tolist()], float).reshape(len(seqs), 2)
            compute, memory, comm = self._with_draft_prefill(tokens, attention_pairs, seqs, (compute, memory, comm),
                                                             (read, links), (tail[:, 0], tail[:, 1]))
        added, floor = self.overhead_many_s(tokens, seqs)
        return np.maximum(floor, np.maximum(compute, memory) + added + comm)

    def windowed_pairs(self, tokens: Any, pairs: Any) -> Any:
        """Attention pairs at the all-layer rate: a sliding layer's at most tokens x window (each new
        token attends to the window before it)."""
        if not self.window_share:
            return pairs
        return pairs - self.window_share * np.maximum(pairs - tokens * self.window, 0.0)

    def prefill_s(self, tokens: float, attention_pairs: float, seqs: float = 1) -> float:
        """Prefill of `tokens` prompt tokens of `seqs` sequences with sum over prompts of P(P+1)/2
        attention pairs (one step)."""
        compute = (tokens * (self.lin_s_per_token + self.prefill_ssm_s_per_token)
                   + self.windowed_pairs(tokens, attention_pairs) * self.prefill_attn_s_per_pair)
        memory = self.weight_read_s(tokens) + tokens * self.kv_s_per_token + seqs * self.state_s_per_seq / self.layout.ep / 2
        added, floor = self.overhead_s(tokens, seqs)
        comm = self.comm_s(tokens)
        if self.draft is not None:
            compute, memory, comm = self._with_draft_prefill(tokens, attention_pairs, seqs, (compute, memory, comm),
                                                             (self._draft_read_s(tokens), self._draft_comm_s(tokens)),
                                                             self._draft_tail_s(seqs))
        return max(floor, max(compute, memory) + added + comm)

    def _with_draft_prefill(self, tokens: Any, pairs: Any, rows: Any, parts: tuple[Any, Any, Any],
                            first: tuple[Any, Any], tail: tuple[Any, Any]) -> tuple[Any, Any, Any]:
        """A prefill's (compute, memory, links) with the drafter's propose after it, as vLLM 0.11's
        EagleProposer.propose runs it (v1/spec_decode/eagle.py; every request of the step, a partial
        prefill's drafts discarded): a first forward over the same tokens (an EAGLE head or MTP module
        fills its cache from the prompt's hidden states, a draft model prefills the prompt), its layers on
        every token, its attention pairs and KV writes, its weights and links (``first``: read, links),
        its LM head on one row a sequence (``rows``: last_token_indices); then k - 1 forwards of one token
        a row (layers and LM head; attention and the draft's KV read over the rows' context, taken as
        ``tokens``: a whole prompt's, a chunk's own), ``tail`` their weights read and links."""
        compute, memory, comm = parts
        d = self.draft
        assert d is not None
        after = d.k - 1
        return (compute + tokens * d.layer_s_per_token + rows * d.head_s_per_token + pairs * self.draft_prefill_s_per_pair
                + after * (rows * d.lin_s_per_token + tokens * d.attn_s_per_ctx),
                memory + first[0] + tail[0] + (1 + after) * tokens * self.draft_kv_s_per_token, comm + first[1] + tail[1])

    def _draft_tail_s(self, rows: float) -> tuple[float, float]:
        """(weights read, links) of the k - 1 one-token draft forwards after a prefill's first, over
        ``rows`` sequences: each reads the drafter's weights, runs its links and replays its graph (or
        runs eager, its kernels' gap) at ``rows`` tokens, as a decode step's draft forwards do."""
        d = self.draft
        assert d is not None
        p = self.params
        gap = (p.cuda_graph_replay_s if self.uses_graphs(rows)
               else max(p.cuda_graph_replay_s, p.eager_kernel_gap_s * d.launches))
        after = d.k - 1
        return after * self._draft_read_s(rows), after * (self._draft_comm_s(rows) + gap)


def _linear_rate(device: Any, layout: RolloutLayout, params: InferenceParams, layout_field: str) -> float:
    """FLOP/s of the engine's matmuls on one device: its peak in the weights' compute dtype x the GEMM
    efficiency; RlsimError when the device has no such peak."""
    cdtype = _COMPUTE_DTYPE.get(layout.weight_dtype, "bf16")
    try:
        return device.peak(cdtype) * (params.gemm_efficiency or device.gemm_efficiency)
    except RlsimError:
        # the workload's dtype (a preset's, often) meets the topology's device: say which gave what
        dtype_field = f"{layout_field}.weight_dtype"
        raise RlsimError(f"the workload's {dtype_field}: {layout.weight_dtype} needs an {cdtype} peak, which "
                         f"the topology's device {device.name} has not", field=dtype_field,
                         fix=f"set {dtype_field}: bf16 (--set {dtype_field}=bf16), or a device with {cdtype} "
                             "support", related=("topology.device",)) from None


def _check_layout(model: ModelSpec, layout: RolloutLayout, params: InferenceParams,
                  layout_field: str = "rollout_layout") -> None:
    """RlsimError, naming ``layout_field``'s keys, when the layout does not divide the model."""
    tp, ep = layout.tp, layout.ep
    if layout.pp > 1 and params.async_scheduling:
        raise RlsimError("async scheduling with pipeline stages: vLLM refuses it (engine/arg_utils.py, 0.11: "
                         "'Async scheduling is not supported with pipeline-parallel-size > 1')",
                         field=f"{layout_field}.pp", fix="give pp 1, or set workload.inference.async_scheduling: "
                         "false (SGLang's overlap scheduler is off with pipeline stages too)")
    if layout.pp > model.num_layers:
        raise RlsimError(f"pp={layout.pp} pipeline stages exceed the {model.num_layers} layers of {model.name}",
                         field=f"{layout_field}.pp", fix=f"use a pp of at most {model.num_layers}")
    if model.num_heads % tp:
        raise RlsimError(f"tp={tp} does not divide the {model.num_heads} attention heads of {model.name}",
                         field=f"{layout_field}.tp",
                         fix=f"use a tp dividing {model.num_heads}, e.g. {_divisors(model.num_heads, tp)}")
    if not model.is_mla and tp > model.num_kv_heads and tp % model.num_kv_heads:
        raise RlsimError(f"tp={tp} cannot replicate the {model.num_kv_heads} KV heads of {model.name} evenly",
                         field=f"{layout_field}.tp", fix=f"use a multiple of {model.num_kv_heads}")
    if ep > 1 and not model.is_moe:
        raise RlsimError(f"ep={ep} needs an MoE model; {model.name} is dense", field=f"{layout_field}.ep",
                         fix=f"set ep: 1 (--set {layout_field}.ep=1 over a preset that gives it)")
    if ep > 1 and model.num_experts % ep:
        raise RlsimError(f"ep={ep} does not divide the {model.num_experts} experts of {model.name}",
                         field=f"{layout_field}.ep",
                         fix=f"use an ep dividing {model.num_experts}, e.g. {_divisors(model.num_experts, ep)}")
    for name in ("weight_dtype", "kv_dtype"):
        if getattr(layout, name) not in DTYPE_BYTES:
            dtype_bytes(getattr(layout, name), f"{layout_field}.{name}")
    if layout.mamba_cache_dtype != "auto" and not (model.num_mamba_layers or model.num_linear_layers):
        raise RlsimError(f"mamba_cache_dtype applies to a model with Mamba or linear-attention layers, and {model.name} "
                         "has none", field=f"{layout_field}.mamba_cache_dtype",
                         fix=f"remove {layout_field}.mamba_cache_dtype")
    checkpoint = getattr(model, "checkpoint_dtype", "")
    if checkpoint and "weight_dtype" not in layout.model_fields_set:   # its default bf16 is not the checkpoint's
        raise RlsimError(f"{model.name} is a quantized checkpoint (its quantization_config: {checkpoint} is the "
                         f"nearest width), and the engine's weights are priced at {layout_field}.weight_dtype, "
                         "which is not given (bf16 by default)", field=f"{layout_field}.weight_dtype",
                         fix=f"give weight_dtype: {checkpoint} to serve the checkpoint as it is, or bf16 to price it "
                             "dequantized")


def _vllm_pool(model: ModelSpec, layout: RolloutLayout, params: InferenceParams, kvbytes: float, share: float,
               free_bytes: float, layout_field: str) -> KvPool:
    """vLLM V1's one pool of pages (kv_pool.py); the Mamba state in rollout_layout.mamba_cache_dtype."""
    state_bytes = _state_elems_all_ranks(model, layout.tp) * mamba_cache_bytes(layout, layout_field) / layout.tp * share
    return KvPool(_pool_shape(model, layout, params, kvbytes, share, layout_field), free_bytes, state_bytes)


def _sglang_pool(model: ModelSpec, layout: RolloutLayout, params: InferenceParams, kvbytes: float, share: float,
                 free_bytes: float, layout_field: str) -> SglangPool:
    """SGLang's token, SWA and state pools (sglang_pool.py): the attention layers' token pool split
    into full and SWA pools where SGLang keeps one; the SSM state in rollout_layout.mamba_cache_dtype
    (auto: SGLang's --mamba-ssm-dtype default, float32), the conv window in bf16."""
    ssm_bytes = (SGLANG_SSM_STATE_AUTO_BYTES if layout.mamba_cache_dtype == "auto"
                 else mamba_cache_bytes(layout, layout_field))
    layer_token_bytes = (model.kv_lora_rank + model.qk_rope_dim if model.is_mla
                         else 2 * max(model.num_kv_heads // layout.tp, 1) * model.head_dim) * kvbytes * share
    swa_layers = model.num_sliding_layers if keeps_swa_pool(model) else 0
    full_layers = (model.num_layers if model.is_mla else model.num_attention_layers) - swa_layers
    return SglangPool(free_bytes, full_layers * layer_token_bytes, full_layers, swa_layers * layer_token_bytes,
                      swa_layers, params.swa_full_tokens_ratio, state_slot_bytes(model, layout.tp, ssm_bytes, share),
                      has_state_radix(model, params), mamba_slots(params, layout.max_num_seqs),
                      params.mamba_full_memory_ratio, params.mamba_slots_per_request)


def _fewer_slots_fix(params: InferenceParams) -> str:
    """How to take fewer SGLang state slots: its --max-mamba-cache-size, or the running cap it follows."""
    followed = params.mamba_slots is None and params.max_running_requests_given
    return (", or lower inference.mamba_slots (SGLang's --max-mamba-cache-size" + (
        "; unset, it follows rollout_layout.max_num_seqs, passed as --max-running-requests: or lower that)"
        if followed else ")"))


def _state_elems_all_ranks(model: ModelSpec, tp: int) -> float:
    """A sequence's Mamba / linear-attention state elements over the tp ranks, vLLM's padded groups
    included (ModelSpec.state_elems_per_device)."""
    ssm, conv = model.state_elems_per_device(tp)
    return (ssm + conv) * tp


# The engine's KV memory by InferenceParams.kv_pool.
KV_POOLS: dict[str, Callable[..., KvPool | SglangPool]] = {"vllm": _vllm_pool, "sglang": _sglang_pool}


def _paged(model: ModelSpec, params: InferenceParams) -> bool:
    """kv_pool.kv_pages_matter with the engine's paging of chunked layers (read only for a model that has them)
    and its hybrid KV cache manager."""
    return kv_pages_matter(model, model.chunked_attention and params.hybrid_kv_chunked_attention,
                           not mixes_windows(model) or params.hybrid_kv_cache_manager)


def _pool_shape(model: ModelSpec, layout: RolloutLayout, params: InferenceParams, kvbytes: float, share: float,
                layout_field: str) -> KvPoolShape:
    """What one device of the layout caches per layer of each kind (kv_pool.py). KV heads split over
    tp (replicated when tp exceeds them, as vLLM); the MLA latent is not split by heads, so every TP
    rank keeps it all; a Mamba / linear-attention layer's state splits its heads over tp."""
    tp = layout.tp
    # full attention alone is counted a token at a time: its engine reads no page size
    block = params.kv_block_size if _paged(model, params) else 1
    state_layers = model.num_linear_layers or model.num_mamba_layers
    state_bytes = (_state_elems_all_ranks(model, tp) / state_layers * mamba_cache_bytes(layout, layout_field) / tp
                   if state_layers else 0.0)
    if model.is_mla:
        return KvPoolShape(model.num_layers, 0, state_layers, model.kv_lora_rank + model.qk_rope_dim, kvbytes,
                           state_bytes, 0, block, share)
    # Llama 4's chunks: full attention in the cache unless the hybrid manager takes them (InferenceParams);
    # without the manager a model mixing windows with full attention caches every layer whole
    chunks_paged = not model.chunked_attention or params.hybrid_kv_chunked_attention
    window_layers = (model.num_sliding_layers
                     if chunks_paged and windows_paged(model, not mixes_windows(model) or params.hybrid_kv_cache_manager)
                     else 0)
    return KvPoolShape(model.num_attention_layers - window_layers, window_layers, state_layers,
                       2 * max(model.num_kv_heads // tp, 1) * model.head_dim, kvbytes, state_bytes,
                       model.sliding_window, block, share)


def _fallback_shape(op: str, n: int) -> tuple[int, float]:
    """(latency steps, bus-bandwidth factor) of ``op`` on ``n`` ranks, the nccl-tests convention:
    ring all-reduce 2 (n - 1) steps, other collectives n - 1, a point-to-point send one."""
    if op == "p2p":
        return 1, 1.0
    return (2 * (n - 1), 2.0 * (n - 1) / n) if op == "all_reduce" else (n - 1, (n - 1) / n)


def _divisors(n: int, given: int) -> list[int]:
    """Up to four powers of two dividing ``n``, the nearest to ``given`` by ratio (ascending): what to
    write instead of a value that does not divide it."""
    fits = [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n % d == 0]
    return sorted(sorted(fits, key=lambda d: (abs(math.log2(d / given)), d))[:4])


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


def _distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) for a small integer array, by one sort (numpy's hash-based unique costs
    far more on arrays of a few hundred)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def _int_list(values: Sequence[int] | np.ndarray) -> list[int]:
    """Python ints of a sequence of integers (an integer array or a range without a loop)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.tolist()
    if isinstance(values, range):
        return list(values)
    return [int(x) for x in values]


def _int_array(values: Sequence[int] | np.ndarray, as_list: list[int]) -> np.ndarray:
    """np.asarray(as_list, np.int64), ``as_list`` being _int_list(values): from the integer array or
    range itself when it is one (no conversion of the list)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "i":
        return values.astype(np.int64)
    if isinstance(values, range):
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    return np.asarray(as_list, np.int64)


def _scatter(entries: list[tuple[float, int, int]], finish_s: np.ndarray) -> None:
    """finish_s[seq_id] = time for outbox entries (time, seq_id, slot)."""
    if entries:
        ids = np.fromiter((e[1] for e in entries), np.int64, len(entries))
        finish_s[ids] = np.fromiter((e[0] for e in entries), float, len(entries))


# ---- one instance -----------------------------------------------------------------------------------
_WAITING, _RUNNING, _DONE = 0, 1, 2
_ORDER_BITS = 32   # a fast run's heap keys: finish step << 32 | admission order
_SCALAR_PREFILLS = 8   # a fast run with at most this many prefills times them one by one (speed only)
# Runs of fewer sequences (waiting + running) stay in the event loop: below this the array run's
# fixed cost (~100 small numpy calls) exceeds the loop's (measured crossover ~100 with admissions, ~200-250
# for a drain only: bench_engine.py rollout).
# A speed knob only: results do not depend on it (tests/llm/test_engine_vs_frozen.py sets it to 1).
FAST_RUN_MIN_SEQUENCES = 256
# The same crossover for an engine whose array run is timed with others' (fast_runs, run_all_into):
# the timing arithmetic is shared, only its walk and checks are its own. Measured on the 24,576-NPU
# colocated step (512 instances of 16 sequences), cachegrind instructions: 2.011 G with 64 (their event
# loops), 1.960 G with 16 or 1. A speed knob only, like FAST_RUN_MIN_SEQUENCES.
FAST_RUN_MANY_MIN_SEQUENCES = 16
# Rounds of _full_slots_finishes before it leaves a walk to the heap (_full_slots_walk): a round per
# generation of jobs on one slot, 4-6 in the seed step's walks. A speed knob only, like the above.
FULL_SLOTS_ROUNDS = 24
# An engine's copy() first drops its done slots nothing refers to (RolloutEngine._compact) once they
# outnumber the rest (running, waiting, finished but not yet collected) by this many slots beyond
# as many again: a long request-fed run adds thousands of slots while a few hundred are live, and
# each copy (ResumableRun's, every ENGINE_CHECKPOINT_EVERY_EVENTS events) copied them all. A speed
# knob only: results do not depend on it (tests/llm/test_engine_compact.py sets it to 0).
COMPACT_MIN_DONE_SLOTS = 64
# What an engine counts beside its time (RolloutEngine.counts, summed into the run summary's
# rollout section): summary key -> the engine's attribute.
ENGINE_COUNTERS = {
    "preemptions": "preemptions",                                  # sequences preempted (KV pool full)
    "preemption_reprefill_tokens": "preempted_tokens",             # their contexts, prefilled again when readmitted
    "prefilled_tokens": "prefilled_tokens",                        # tokens prefills computed, in all
    "prompt_hit_tokens": "prompt_hit_tokens",                      # prompt tokens a sibling's cached pages spared
    "retained_context_tokens": "retained_tokens",                  # multi-turn: freed contexts kept evictable
    "evicted_context_tokens": "evicted_tokens",                    # of those, evicted
    "eviction_reprefill_tokens": "reprefilled_tokens",             # evicted tokens a returning sample prefilled again
    "resume_reprefill_tokens": "resumed_tokens",                   # a resumed partial rollout's context, prefilled again
}


# The counts of tokens prefilled again (prefilled_tokens holds them too): not what a prefix cache could
# serve the first time.
REPREFILL_COUNTS = ("preemption_reprefill_tokens", "eviction_reprefill_tokens", "resume_reprefill_tokens")


def first_prefill_tokens(counts: Mapping[str, int | None]) -> int:
    """The tokens engines with these ``counts`` (ENGINE_COUNTERS' keys; a missing or null one 0) were asked
    to prefill for the first time (prompts, a multi-turn turn's new tokens): the prompt hits and the
    tokens prefilled, less the re-prefills of preempted, evicted and resumed contexts (REPREFILL_COUNTS)."""
    again = sum(counts.get(key) or 0 for key in REPREFILL_COUNTS)
    return (counts.get("prompt_hit_tokens") or 0) + (counts.get("prefilled_tokens") or 0) - again


def no_counts() -> dict[str, int]:
    """ENGINE_COUNTERS' keys, each 0 (an engine that did nothing, a cost model without engines)."""
    return dict.fromkeys(ENGINE_COUNTERS, 0)


def summed_counts(engines: Sequence[Any]) -> dict[str, int]:
    """The counts of several engines (anything with ``counts()``) added up."""
    total = no_counts()
    for engine in engines:
        for key, value in engine.counts().items():
            total[key] += value
    return total


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
        # context tokens' worth of KV pool a running sequence draws beside its own (its windows' and
        # Mamba states' pages, kv_pool.py; 0 for a model of full attention only): every check of the
        # cache below counts it once a running sequence
        self.seq_kv = self.cost.seq_kv_tokens
        # Per-slot records (a slot is one add() call).
        self._id: list[int] = []
        self._p: list[int] = []
        self._r: list[int] = []
        self._g: list[int] = []        # generated tokens at admission (or now, when waiting)
        self._sadm: list[int] = []     # decode-step counter at admission
        self._state: list[int] = []
        self._arrival: list[float] = []
        self._epoch: list[int] = []
        # _slot_map, built when asked and kept up by add_many while this engine owns it (a copy shares
        # the tuple, not the right to add to its dict: it builds its own)
        self._slot_of: tuple[list[int], dict[int, int], object] | None = None
        self._owner = object()
        self._records_shared = False   # whether a copy may hold the record lists (add_many rebinds them)
        self._group: list[int] = []    # prefix-cache group (a negative own id: shares nothing)
        # waiting slots whose first tokens' KV is still in the cache (a request paused in place over a
        # weight update, vLLM's pause mode "keep"): slot -> those tokens, not prefilled again
        self._kept: dict[int, int] = {}
        # Finished sequences' contexts kept in the prefix cache, evictable (keep_freed_contexts: a
        # multi-turn sample out on its tool): seq id -> [context tokens, tokens evicted, its own pages
        # left], oldest freed first; None: a finished sequence's pages are simply free (the default)
        self._lru: OrderedDict[int, list[int]] | None = None
        self._gone: dict[int, list[int]] = {}   # such entries evicted whole, until their sequence comes back
        self._retained = 0             # pages the LRU's entries hold (free for allocation: evicted on demand)
        self.retained_tokens = 0       # pages finished sequences left in the cache, in all
        self.evicted_tokens = 0        # of those, evicted by other sequences' allocations
        self.reprefilled_tokens = 0    # context tokens returning sequences prefilled again, evicted
        self.prefilled_tokens = 0      # tokens computed by prefills (admissions), in all
        self.prompt_hit_tokens = 0     # prompt tokens admissions did not compute: a running sibling held them (_share)
        # tokens preempted sequences' readmissions computed again (prompt + generated, less a sibling's cached
        # prompt: not a prompt hit, that prompt was prefilled once already); _readmitting: those preempted, waiting
        self.preempted_tokens = 0
        self._readmitting: set[int] = set()
        # slots added with tokens generated before (a partial rollout resumed: add(..., generated)) not yet
        # admitted; their first admission's computed tokens are resumed_tokens (a preempted slot's are not)
        self._resuming: set[int] = set()
        self.resumed_tokens = 0        # tokens resumed sequences' first admissions computed (prompt + generated, less cache hits)
        self._arrays: tuple[list[int], tuple[np.ndarray, ...]] | None = None   # _record_arrays
        self._added: tuple[list[int], np.ndarray, tuple[int, int, int, float] | None] | None = None   # _as_added
        # Engine state at the current step boundary.
        self.t = 0.0                   # time of the boundary
        self._S = 0                    # decode steps taken
        self._n = 0                    # running sequences
        self._K = 0                    # KV tokens held by them (their contexts: what a step reads)
        # prefix-cache sharing (_share): a running slot of a sharing set -> the set's key (its prompt's
        # group id), each set's running members, and the tokens of _K in pages another member holds
        # (the pool's slots in use are _K - _shared)
        self._share_of: dict[int, int] = {}
        self._share_sets: dict[int, list[int]] = {}
        # per set: its members' cached tokens (prompt but its last token) summed, their largest and how
        # many hold it (_set_shared in O(1): a group's samples share one prompt length)
        self._share_cached: dict[int, list[int]] = {}
        self._shared = 0
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
        self.preemptions = 0           # sequences preempted (recompute) or retracted when the KV pool was full
        self.generated_tokens = 0
        # SGLang-style admission (params.admission "reserve"): the new-token ratio as (decode step,
        # ratio then), whether an admission found no room since the last finish, each request's cap
        params = self.cost.params
        self._reserve = params.admission == "reserve"
        self._ratio_from = (0, params.reserve_init_ratio)
        self._full = False
        self._max_new = params.max_new_tokens or params.reserve_clip_tokens
        # reserve: each running request's cap step max_new - generated + admission step (its reservation
        # left at step S is that minus S), sorted; None with vLLM's admission
        self._caps: list[int] | None = [] if self._reserve else None

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
                 group_ids: Sequence[int] | None = None, kept: Sequence[int] | None = None) -> None:
        """Queue several sequences arriving together (prefilled together when they fit).
        `group_ids` (optional, one per sequence): the samples of one prompt carry one id; with
        enable_prefix_caching one admitted while another of its prompt runs (admitted at the same
        step or an earlier one) hits the prompt's cached pages and shares them (_share): it
        computes only its own generated tokens, or the prompt's last token when it has none (an
        engine computes a hit's last token again for its logits). None: no sharing.
        `kept` (optional, one per sequence): the tokens of its prompt + generated whose KV is still
        cached (a request paused in place, not aborted): its admission computes only the rest, at
        least its last token. With max_model_len, a response stops at max_model_len - prompt tokens."""
        ids = _int_list(seq_ids)
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
        bad = (p < 1) | (r < 1) if generated is None else (p < 1) | (r < 1) | (g < 0) | (g >= r)   # (g: zeros)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"bad sequence {ids[i]}: prompt {p[i]}, response {r[i]}, generated {g[i]}")
        # its last step holds p + r - 1 slots; a resumed one re-admitted with r - 1 made needs p + r (_admit)
        too_long = p + r + self.seq_kv > self.replica_capacity
        if too_long.any():
            i = int(np.argmax(too_long))
            pages = f" and {self.cost.seq_kv_what} ({self.seq_kv} tokens' worth)" if self.seq_kv else ""
            raise RlsimError(
                f"a sequence of {p[i]} + {r[i]} tokens{pages} does not fit the KV cache of one replica "
                f"({self.replica_capacity} tokens)", field=getattr(self.cost, "layout_field", "rollout_layout"),
                fix="raise tp or gpu_memory_utilization, use a smaller kv_dtype, or lower the maximum length")
        if not isinstance(seq_ids, range) and len(set(ids)) != len(ids):
            raise ValueError("duplicate sequence ids in one add")
        slot_of = self._slot_map() if self._id else {}
        for seq_id in ids if slot_of else ():
            slot = slot_of.get(seq_id)
            if slot is not None and self._state[slot] != _DONE:
                raise ValueError(f"sequence {seq_id} is already in this engine")
        first = len(self._id)
        owned = self._slot_of is not None and self._slot_of[0] is self._id and self._slot_of[2] is self._owner
        self._process_until(now, inclusive=False)
        self._last_add = now
        if self._reserve and not self._n and not self._waiting:   # idle: SGLang re-inits its ratio
            self._ratio_from = (self._S, self.cost.params.reserve_init_ratio)
        self._append_records(ids, p, r, now, group_ids, first, owned)
        if kept is not None:
            self._keep(kept, p + g, first)
        self._g.extend([0] * len(ids) if generated is None else g.tolist())
        if generated is not None and g.any():
            self._resuming.update((first + np.flatnonzero(g)).tolist())
        self._sadm.extend([0] * len(ids))
        self._state.extend([_WAITING] * len(ids))
        self._epoch.extend([0] * len(ids))
        self._waiting.extend(range(first, first + len(ids)))
        self._event = None
        if first == 0:   # the record arrays are the ones at hand (what _record_arrays would convert)
            self._arrays = (self._p, (_int_array(seq_ids, ids), np.array(p), np.array(r), np.full(len(ids), float(now)),
                                      np.arange(-1, -1 - len(ids), -1) if group_ids is None
                                      else _int_array(group_ids, self._group)))
            self._added = (self._p, np.array(g), None)

    def _keep(self, kept: Sequence[int], context: np.ndarray, first: int) -> None:
        """Record the new slots' cached tokens (at most all but the last of each one's context)."""
        kept_arr = np.asarray(kept, dtype=np.int64)
        if len(kept_arr) != len(context) or (kept_arr < 0).any() or (kept_arr > context).any():
            raise ValueError("kept must give one count per sequence, from 0 to its prompt + generated tokens")
        for i in np.flatnonzero(kept_arr):
            self._kept[first + int(i)] = min(int(kept_arr[i]), int(context[i]) - 1)

    def _append_records(self, ids: list[int], p: np.ndarray, r: np.ndarray, now: float,
                        group_ids: Sequence[int] | None, first: int, owned: bool) -> None:
        """Append the records fixed once added (_id, _p, _r, _arrival, _group). A copy shares them
        (copy-on-write): an engine whose lists a copy may hold rebinds them to longer ones, else it
        extends them in place (a rebind per add made a run of many small adds quadratic); the
        others (_g, _sadm, ...) are mutated in place and copied by copy()."""
        groups = list(range(-1 - first, -1 - first - len(ids), -1)) if group_ids is None else _int_list(group_ids)
        if first and not self._records_shared:
            self._id.extend(ids)
            self._p.extend(p.tolist())
            self._r.extend(r.tolist())
            self._arrival.extend([float(now)] * len(ids))
            self._group.extend(groups)
            self._arrays = self._added = None   # their caches were keyed on these lists, now longer
        else:
            self._id = self._id + ids if first else ids
            self._p = self._p + p.tolist() if first else p.tolist()
            self._r = self._r + r.tolist() if first else r.tolist()
            self._arrival = self._arrival + [float(now)] * len(ids)
            self._group = self._group + groups
            self._records_shared = False
        if owned or not first:   # the id -> slot map kept up in place too
            table = self._slot_of[1] if owned else {}
            table.update(zip(ids, range(first, first + len(ids)), strict=True))
            self._slot_of = (self._id, table, self._owner)

    def _slot_map(self) -> dict[int, int]:
        """The latest slot of each sequence id (built from _id when asked: only a later add reads it)."""
        cached = self._slot_of
        if cached is None or cached[0] is not self._id or cached[2] is not self._owner:
            cached = self._slot_of = (self._id, dict(zip(self._id, range(len(self._id)), strict=True)), self._owner)
        return cached[1]

    def next_event_time(self) -> float:
        """When the engine's state next changes (math.inf when idle); a call of advance_to at that
        time may return no finished sequence (an admission or a preemption happened instead)."""
        t = self._next_event()[0]
        if self._outbox:
            t = min(t, self._outbox[0][0])
        return t

    def keep_freed_contexts(self) -> None:
        """From now on a finished sequence's context stays in the prefix cache, evictable, until its
        next turn comes back (a multi-turn sample out on its tool: multi_turn_server.py): its pages
        count as free for allocation, so they never hold back an admission or preempt a sequence,
        and whenever the running sequences' pages and the kept ones pass the capacity the oldest
        freed context loses pages from its tail. A later add of the same sequence id reuses what
        survives of its context: its prefill computes the rest (at least its last token). vLLM 0.11
        frees a finished request's blocks into the free block queue with their hashes, its last
        blocks first (v1/core/single_type_kv_cache_manager.py free: reversed(req_blocks);
        block_pool.py free_blocks), and an allocation takes the queue's head, the least recently
        freed, evicting its hash (block_pool.py get_new_blocks, _maybe_evict_cached_block); SGLang's
        radix cache evicts the least recently used unlocked leaves (mem_cache/radix_cache.py evict).
        An interrupt (new weights) clears it."""
        if self._lru is None:   # (its own _gone too: a copy made before shares the empty one)
            self._lru, self._gone = OrderedDict(), {}

    def take_waits(self) -> list[tuple[float, float]]:
        """No tool waits: each request is one generation (multi_turn_server.MultiTurnServer has them)."""
        return []

    def counts(self) -> dict[str, int]:
        """What the engine did so far beside its time (ENGINE_COUNTERS: summary key -> count); the
        array run and the event loop count the same."""
        return {key: int(getattr(self, name)) for key, name in ENGINE_COUNTERS.items()}

    def advance_to(self, t: float) -> list[Finished]:
        """Run to time t; the sequences that finished by then, in finish order."""
        return [Finished(seq_id, time) for time, seq_id, _ in self._drain(t)]

    def run(self) -> list[Finished]:
        return self.advance_to(math.inf)

    def run_into(self, finish_s: np.ndarray) -> None:
        """run(), writing each finished sequence's time at finish_s[seq_id] (no Finished records:
        the schedules' hot path)."""
        if self._fast_ok():   # the array run writes its finishes straight in (no outbox records)
            _scatter(self._take_outbox(), finish_s)
            self._fast_run(outbox=False).scatter(finish_s)
            return
        _scatter(self._drain(math.inf), finish_s)

    def _take_outbox(self) -> list[tuple[float, int, int]]:
        out = list(self._outbox)
        self._outbox.clear()
        return out

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

    def interrupt(self, now: float, keep_finished: bool = True) -> InterruptResult:
        """Stop at `now` (a weight sync): sequences finished by then, and every unfinished one with the
        tokens it has generated so far (an interrupted step or prefill produces nothing).
        ``keep_finished`` False: the finished ones are not listed (a caller asking progress only).
        An add runs the engine up to its time, and an interrupt undoes at most the one prefill in flight
        at `now`: ValueError where the engine ran past `now` otherwise (an add after `now` that found
        work to run up to it)."""
        if self.t > now and (self._prefill is None or self._prefill[0] > now):
            raise ValueError(f"interrupt at {now} s, but the engine has run to {self.t} s (an add at "
                             f"{self._last_add} s ran it there): interrupt before adding later arrivals")
        drained = self._drain(now)
        finished = [Finished(seq_id, time) for time, seq_id, _ in drained] if keep_finished else []
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
        cached: dict[int, int] = {}
        for slot in range(len(self._id)):
            state = self._state[slot]
            if state == _RUNNING:
                g = generated.get(slot, self._g[slot] + self._S - self._sadm[slot])
                if slot not in generated:
                    cached[self._id[slot]] = self._p[slot] + g
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
        self._kept.clear()
        self._resuming, self._readmitting = set(), set()
        if self._lru is not None:   # new weights: the freed contexts' cache is stale
            self._lru.clear()
            self._gone.clear()
            self._retained = 0
        self._n = self._K = self._shared = 0
        self._share_of.clear()
        self._share_sets.clear()
        self._share_cached.clear()
        self.t = now
        self._prefill = None
        self._phase_steps = 0
        self._event = None
        self._lines = None
        self._full = False
        if self._caps is not None:
            self._caps.clear()
        partial.sort(key=lambda s: s.seq_id)
        return InterruptResult(finished, partial, cached)

    def copy(self) -> RolloutEngine:
        """An independent engine in the same state (a checkpoint: advancing or interrupting the copy
        leaves this one untouched). The step-cost object (caches only) and the records fixed once
        added (rebound by add_many, never mutated) are shared. Both are compacted first when most
        slots are done (_compact): a copy costs the live slots."""
        if self._order and len(self._state) > 2 * self._referred_slots() + COMPACT_MIN_DONE_SLOTS:
            self._compact()
        self._records_shared = True   # both hold the record lists now: the next add of either rebinds
        new = object.__new__(RolloutEngine)
        new.__dict__.update(self.__dict__)
        new._owner = object()   # the slot map's dict stays this engine's to extend
        for name in ("_g", "_sadm", "_state", "_epoch", "_heap", "_stack", "_kept", "_share_of", "_resuming",
                     "_readmitting"):
            setattr(new, name, getattr(self, name).copy())
        new._share_sets = {key: members.copy() for key, members in self._share_sets.items()}
        new._share_cached = {key: cached.copy() for key, cached in self._share_cached.items()}
        if self._caps is not None:
            new._caps = self._caps.copy()
        if self._lru is not None:
            new._lru = OrderedDict((seq_id, entry.copy()) for seq_id, entry in self._lru.items())
            new._gone = self._gone.copy()   # (entries there are no longer changed)
        new._waiting = deque(self._waiting)
        new._outbox = deque(self._outbox)
        return new

    def _referred_slots(self) -> int:
        """A bound on the slots _compact keeps: the running and waiting ones, and the entries of the
        heap, the outbox and the prefill in flight."""
        return (self._n + len(self._waiting) + len(self._heap) + len(self._outbox)
                + (len(self._prefill[2]) if self._prefill is not None else 0))

    def _compact(self) -> None:
        """Drop the done slots nothing refers to (finished and collected, or interrupted), the rest
        renumbered in slot order (every loop over slots, the waiting queue and the stack keep their
        order). Nothing depends on a slot's number: the heap's entries compare on (finish step,
        admission order), unique, so they are renumbered where they stand (the heap's layout, the
        order _live_running lists them in, is kept); the stack's entries of dropped slots went
        stale for good (a done slot never runs again) and go; a slot's own prompt group (negative,
        shares nothing) keeps its value. The per-slot lists are rebound, never changed in place: a
        copy or a kept start (_UntouchedStart) holding them keeps them as they were. A slot
        finished by a prefill, or in one in flight, is referred to until the prefill's end is
        passed (interrupt undoes it from those entries)."""
        state = self._state
        referred = {entry[2] for entry in self._heap}
        referred.update(slot for _, _, slot in self._outbox)
        if self._prefill is not None:
            referred.update(slot for slot, _ in self._prefill[2])
        kept = [slot for slot, st in enumerate(state) if st != _DONE or slot in referred]
        index = dict(zip(kept, range(len(kept)), strict=True))
        for name in ("_id", "_p", "_r", "_g", "_sadm", "_state", "_arrival", "_epoch", "_group"):
            values = getattr(self, name)
            setattr(self, name, [values[slot] for slot in kept])
        self._heap = [(step, order, index[slot], epoch) for step, order, slot, epoch in self._heap]
        self._stack = [(index[slot], epoch) for slot, epoch in self._stack if slot in index]
        self._waiting = deque(index[slot] for slot in self._waiting)
        self._outbox = deque((time, seq_id, index[slot]) for time, seq_id, slot in self._outbox)
        if self._prefill is not None:
            start, end, slots = self._prefill
            self._prefill = (start, end, [(index[slot], g) for slot, g in slots])
        self._kept = {index[slot]: tokens for slot, tokens in self._kept.items()}
        self._share_of = {index[slot]: key for slot, key in self._share_of.items()}
        self._share_sets = {key: [index[slot] for slot in members] for key, members in self._share_sets.items()}
        self._resuming = {index[slot] for slot in self._resuming}
        self._readmitting = {index[slot] for slot in self._readmitting}
        self._slot_of = self._arrays = self._added = None   # (keyed on the old lists)
        self._records_shared = False

    # ---- the whole run in arrays (no per-event Python where nothing can interfere) ----------------
    def _record_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, prompts, responses, arrivals, groups) per slot as arrays: the records fixed once
        added, converted once per add_many (they are rebound there, never mutated)."""
        cached = self._arrays
        if cached is None or cached[0] is not self._p:
            cached = self._arrays = (self._p, (np.asarray(self._id, np.int64), np.asarray(self._p, np.int64),
                                               np.asarray(self._r, np.int64), np.asarray(self._arrival, float),
                                               np.asarray(self._group, np.int64)))
        return cached[1]

    def _untouched(self) -> bool:
        """Whether no sequence has left the waiting queue yet (none admitted: the order count moves at
        every admission that runs on, an admission done at once or an interrupt leaves a done slot,
        and a slot once done never waits again), so every slot waits, in slot order (add_many
        queues its slots in order), with the tokens it was added with."""
        return self._order == 0 and len(self._waiting) == len(self._id)

    def _added_figures(self) -> tuple[int, int, int, float]:
        """(prompt and response tokens of every slot, the longest response, a bound of any slot's
        context (longest prompt + longest response), the latest arrival)."""
        _, p, r, arrival, _ = self._record_arrays()
        return int(p.sum() + r.sum()), int(r.max()), int(p.max() + r.max()), float(arrival.max())

    def _as_added(self) -> tuple[np.ndarray, tuple[int, int, int, float]]:
        """(_g as an array, _added_figures()) of an _untouched() engine (its _g as added: the array
        of the first add kept, else converted once per add_many)."""
        cached = self._added
        if cached is None or cached[0] is not self._p:
            cached = (self._p, np.asarray(self._g, np.int64), None)
        if cached[2] is None:
            cached = self._added = (cached[0], cached[1], self._added_figures())
        return cached[1], cached[2]

    def _fast_ok_untouched(self) -> bool:
        """_fast_ok's checks of an _untouched() engine, from the figures of its records (no slot
        arrays): every slot waits, none runs."""
        held, longest, widest, latest = self._as_added()[1]
        count = len(self._id)
        if latest > max(self.t, self._arrival[0]):
            return False
        if count * (widest * (widest + 1) // 2) >= 2**53:   # a bound passed: the exact sum
            _, p, _, _, _ = self._record_arrays()
            ctx = p + self._as_added()[0]
            if int((ctx * (ctx + 1) // 2).sum()) >= 2**53:
                return False
        if count > self.max_running and held + self.max_running * (1 + self.seq_kv) + 2 > self.capacity:
            _, p, r, _, _ = self._record_arrays()   # all of them do not fit: do the ones that can run at once?
            held = _largest_sum(p + r, self.max_running)
        return (held + self.max_running * (1 + self.seq_kv) + 2 <= self.capacity and self._S + longest < 2**30
                and count < 2**_ORDER_BITS)

    def _fast_ok(self, min_sequences: int | None = None) -> bool:
        """Whether the rest of the run can go through _fast_run: every waiting sequence has arrived
        (by the next admission), the KV cache can never
        bind (the full contexts of the sequences that can run at once plus one step of every slot fit:
        no preemption, no admission held back, no decode segment cut short; _largest_sum), prefill is
        one blocking step per admission (no token budget, no chunked prefill) and no prefill is half
        done."""
        params = self.cost.params
        if (params.max_num_batched_tokens is not None or params.chunked_prefill or self._phase_steps or self._reserve
                or self._kept or self._lru is not None):   # (the array run prefills whole contexts, frees at finish)
            return False
        least = FAST_RUN_MIN_SEQUENCES if min_sequences is None else min_sequences
        if not self._waiting and not self._n or len(self._waiting) + self._n < least:
            return False
        if self._untouched():
            return self._fast_ok_untouched()
        state, epochs = self._state, self._epoch
        running = [e[2] for e in self._heap if state[e[2]] == _RUNNING and epochs[e[2]] == e[3]]
        waiting = np.fromiter(self._waiting, np.int64, len(self._waiting))
        _, p, r, arrival, _ = self._record_arrays()
        held = _largest_sum(np.concatenate((p[running] + r[running], p[waiting] + r[waiting])),
                            max(self.max_running, self._n))
        longest = int(r.max())
        if len(waiting):
            arrival, g = arrival[waiting], np.asarray(self._g, np.int64)[waiting]
            start = self.t if self._n else max(self.t, float(arrival[0]))
            ctx = p[waiting] + g
            if arrival.max() > start or int((ctx * (ctx + 1) // 2).sum()) >= 2**53:
                return False   # (prefill attention pairs are summed exactly as floats)
        # (finish step, admission order) packed in one int64
        return (held + self.max_running * (1 + self.seq_kv) + 2 <= self.capacity and self._S + longest < 2**30
                and self._order + len(waiting) < 2**_ORDER_BITS)

    def _fast_run(self, outbox: bool = True) -> _RunTrace:
        """Run to the end (call only when _fast_ok()): the same events as _run_events, found in
        decode-step units (_walk_steps), then timed in arrays with the same floating-point
        operations in the same order (bit-identical). Slots end done; the records the event loop
        reads only for running or waiting slots are left as they were."""
        return fast_runs([self], outbox)[0]

    def _walk_steps(self, g_arr: np.ndarray) -> _Walk:
        """The run's events in decode-step units. While sequences wait every event finishes the
        running ones due (heap order: finish step, admission order) and admits as many waiting
        ones, FIFO, each due its remaining tokens later (a heap walk on packed int keys); one due
        none (its prefill's token is its last) finishes at the end of that prefill and frees its
        slot for an event at the same step. After the last admission the running ones finish in
        key order (one sort). ``g_arr``: _g as an array. Job j of the waiting ones has order
        base + 1 + j."""
        state, epochs, g = self._state, self._epoch, self._g
        live = [e for e in self._heap if state[e[2]] == _RUNNING and epochs[e[2]] == e[3]]
        if self._untouched():   # every slot waits, in slot order
            waiting_arr = np.arange(len(self._id))
            due_arr = self._record_arrays()[2] - g_arr - 1
        else:
            waiting_arr = np.fromiter(self._waiting, np.int64, len(self._waiting))
            due_arr = self._record_arrays()[2][waiting_arr] - g_arr[waiting_arr] - 1
        bits, mask = _ORDER_BITS, (1 << _ORDER_BITS) - 1
        keys = [(e[0] << bits) | e[1] for e in live]
        S, n, base, max_n = self._S, self._n, self._order, self.max_running
        total, w = len(waiting_arr), 0
        steps, finished, admitted, fin_orders, instant_at = [], [], [], [], []
        take = min(total, max_n - n) if n < max_n else 0
        first_keys = None
        if take and due_arr[:take].all():   # free slots, none due at once: admit in one go
            first_keys = ((S + due_arr[:take]) << bits) | np.arange(base + 1, base + 1 + take)
            steps.append(S)
            finished.append(0)
            admitted.append(take)
            n, w = n + take, take
        start_records = [(e[1], e[2], g[e[2]], self._sadm[e[2]]) for e in live]
        if w == total or due_arr[w:].all():   # a drain, or every slot full and none due at once
            start = np.array(keys, np.int64) if first_keys is None else \
                np.concatenate((np.array(keys, np.int64), first_keys)) if keys else first_keys
            start.sort()
            finishes = start if w == total else _full_slots_finishes(start, due_arr[w:], base + 1 + w)
            if finishes is not None:
                return _walk_of_finishes(steps, finished, admitted, finishes, total - w, waiting_arr, base,
                                         start_records)
        if take and take == total:   # every job admitted at once, some due at once: no heap
            return _all_admitted_walk(S, due_arr, base, keys, waiting_arr, start_records)
        if first_keys is not None:
            keys += first_keys.tolist()
        heapq.heapify(keys)
        if w < total and due_arr[w:].all():   # (not settled: the heap, one admission per finish)
            return _walk_of(*_full_slots_walk(keys, due_arr[w:].tolist(), base + 1 + w, steps, finished, admitted),
                            instant_at, np.array(keys, np.int64), waiting_arr, base, start_records)
        due = due_arr.tolist()
        pop, push, replace = heapq.heappop, heapq.heappush, heapq.heapreplace
        add_fin = fin_orders.append
        while w < total:
            first = w
            if n < max_n:   # free slots (freed by sequences done with their prefill): admit now
                done = 0
            else:           # decode to the next finish, admit into the freed slots
                S = keys[0] >> bits
                bound = (S + 1) << bits
                if due[w]:   # the first admission replaces the first finish (its key is later still)
                    add_fin(replace(keys, ((S + due[w]) << bits) | (base + 1 + w)) & mask)
                    first = w + 1
                else:
                    add_fin(pop(keys) & mask)
                done = 1
                while keys and keys[0] < bound:
                    add_fin(pop(keys) & mask)
                    done += 1
                n -= done
            take = min(total - w, max_n - n)
            at_once = 0
            for j in range(first, w + take):
                if due[j]:
                    push(keys, ((S + due[j]) << bits) | (base + 1 + j))
                else:   # done at the prefill's end, after this event's finishes
                    instant_at.append(len(fin_orders))
                    add_fin(base + 1 + j)
                    at_once += 1
            n += take - at_once
            w += take
            steps.append(S)
            finished.append(done + at_once)
            admitted.append(take)
        return _walk_of(steps, finished, admitted, fin_orders, instant_at, np.array(keys, np.int64), waiting_arr,
                        base, start_records)

    # ---- event loop -----------------------------------------------------------------------------
    def _segment(self) -> tuple[float, float, float, float, float]:
        if self._lines is None:
            self._lines = self.cost.decode_lines(self._n, self._K)
        return self._lines

    def _duration(self, k: int) -> float:
        return series_time_s(self._segment(), k, self.cost.decode_floor_s(self._n))

    def _steps_by(self, elapsed: float) -> int:
        """Whole decode steps completed `elapsed` seconds after the boundary."""
        return _steps_within(self._segment(), self.cost.decode_floor_s(self._n), elapsed)

    def _head_arrival_steps(self) -> int | None:
        """Decode steps from the boundary until the head of the queue arrives, if it can be admitted
        then (room for it and one more step; with admission reserve, room beside the running
        requests' reservations at that step too); None otherwise."""
        if not self._waiting or self._n >= self.max_running or self._full and self._n:
            return None
        slot = self._waiting[0]
        ctx = self._p[slot] + self._g[slot] - self._hit_gain(slot)   # (less a running member's pages: _admit)
        pages = self.seq_kv * (self._n + 1)   # the running ones' and its pages beside their tokens
        if self._K - self._shared + ctx + 1 + pages > self.capacity:
            return None
        arrival = self._arrival[slot]
        ahead = 0 if arrival <= self.t else self._steps_by(arrival - self.t) + 1
        if self._reserve and self._n and (ctx + self._reserve_need() + pages
                                          >= self.capacity - (self._K - self._shared) + self._n - self._n * ahead
                                          - self._reserved(ahead)):
            return None
        return ahead

    # ---- SGLang-style admission (params.admission "reserve") --------------------------------------
    def _ratio(self, ahead: int = 0) -> float:
        """SGLang's new-token ratio ``ahead`` decode steps after the boundary: from its last setting,
        down by (init - floor) / reserve_decay_steps a step to the floor init x reserve_min_ratio_factor."""
        params = self.cost.params
        floor = min(params.reserve_init_ratio * params.reserve_min_ratio_factor, 1.0)
        decay = (params.reserve_init_ratio - floor) / params.reserve_decay_steps
        step0, ratio0 = self._ratio_from
        return max(ratio0 - decay * (self._S + ahead - step0), floor)

    def _reserve_need(self) -> int:
        """Tokens a request reserves beyond its context when admitted: min(max_new_tokens, clip)."""
        return min(self._max_new, self.cost.params.reserve_clip_tokens)

    def _live_running(self) -> list[int]:
        """The running slots (live heap entries)."""
        state, epochs = self._state, self._epoch
        return [e[2] for e in self._heap if state[e[2]] == _RUNNING and epochs[e[2]] == e[3]]

    def _reserved(self, ahead: int = 0) -> float:
        """What the running requests may still need by SGLang's estimate ``ahead`` decode steps after
        the boundary: the ratio x the sum of min(max_new_tokens - generated, clip)
        (schedule_policy.py PrefillAdder.rem_total_tokens)."""
        caps, step, clip = self._caps, self._S + ahead, self.cost.params.reserve_clip_tokens
        lo, hi = bisect.bisect_left(caps, step), bisect.bisect_left(caps, step + clip)
        left = sum(caps[lo:hi]) - (hi - lo) * step + (len(caps) - hi) * clip   # min(max(cap - step, 0), clip) each
        return self._ratio(ahead) * left

    def _retract(self) -> None:
        """SGLang's retraction when a decode step does not fit: the requests with the fewest generated
        tokens (the longest prompt first among equals) go to the back of the queue, one at least,
        until retract_headroom_steps steps of the rest fit; the ratio becomes (generated +
        headroom x running) / (running x max_new_tokens), at most 1 (schedule_batch.py retract_decode)."""
        headroom, step = self.cost.params.retract_headroom_steps, self._S
        g, sadm, p, state, epochs = self._g, self._sadm, self._p, self._state, self._epoch
        order = sorted(self._live_running(), key=lambda slot: (g[slot] + step - sadm[slot], -p[slot]))
        first = True
        while self._n > 1 and (first or self.capacity - (self._K - self._shared) + self._n - self.seq_kv * self._n
                               < headroom * self._n):
            first = False
            slot = order.pop(0)
            made = g[slot] + step - sadm[slot]
            caps = self._caps
            del caps[bisect.bisect_left(caps, self._max_new - g[slot] + sadm[slot])]
            state[slot] = _WAITING
            g[slot] = made
            epochs[slot] += 1
            self._n -= 1
            self._K -= p[slot] + made
            if slot in self._share_of:
                self._unshare(slot)
            self._waiting.append(slot)
            self.preemptions += 1
            self._readmitting.add(slot)
        generated = sum(g[slot] + step - sadm[slot] for slot in order)
        ratio = (generated + headroom * self._n) / (self._n * self._max_new) if self._n else 1.0
        self._ratio_from = (step, min(1.0, ratio))
        self._full = False

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
            k = min(k, max(0, (self.capacity - (self._K - self._shared) - self.seq_kv * self._n) // self._n + 1))  # steps the KV cache holds
            ahead = self._head_arrival_steps()
            if ahead is not None:
                k = min(k, ahead)
            event = (self.t + self._duration(k), k)
        self._event = event
        return event

    def _stale(self, entry: tuple[int, int, int, int]) -> bool:
        slot, epoch = entry[2], entry[3]
        return self._state[slot] != _RUNNING or self._epoch[slot] != epoch

    def _process_until(self, t: float, inclusive: bool) -> None:
        if t == math.inf and self._fast_ok():   # the rest of the run in arrays
            self._fast_run()
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
        attn, kvs = cost.decode_ctx_compute_s, cost.decode_ctx_memory_s
        heap, state, epochs = self._heap, self._state, self._epoch
        p_of, r_of, id_of = self._p, self._r, self._id
        outbox, waiting = self._outbox, self._waiting
        cap, seq_kv = self.capacity, self.seq_kv
        pop = heapq.heappop
        caps, cap_new = self._caps, self._max_new
        share_of, lru = self._share_of, self._lru
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
                    room = (cap - (K - self._shared) - seq_kv * n) // n + 1  # steps the KV cache holds: k = min(k, max(0, room))
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
                    if waiting:
                        ahead = self._head_arrival_steps()
                        if ahead is not None and ahead < k:
                            k = ahead
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
                if lru and K - self._shared + n * seq_kv + self._retained > cap:   # their pages evict freed contexts'
                    self._evict(K - self._shared + n * seq_kv)
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
                    if lru is not None:   # its context stays cached, evictable
                        self._retire(slot)
                    elif share_of and slot in share_of:
                        self._unshare(slot)
                    outbox.append((time, id_of[slot], slot))
                    if caps is not None:   # admission reserve: its reservation goes
                        del caps[bisect.bisect_left(caps, cap_new - self._g[slot] + self._sadm[slot])]
            if n < self._n:   # a request finished: SGLang tries its waiting queue again
                self._full = False
            self._n, self._K = n, K
            if n and K - self._shared + n * seq_kv > cap:
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
        if self._reserve:
            self._retract()
            return
        state, epochs, step = self._state, self._epoch, self._S
        while self._n and self._K - self._shared + self._n * self.seq_kv > self.capacity:
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
            self._readmitting.add(slot)

    def _admit(self) -> None:
        waiting, p, g_of, arrival, state = self._waiting, self._p, self._g, self._arrival, self._state
        n0 = n = self._n
        kv, now = self._K, self.t
        held = kv - self._shared   # the pool's slots in use: a shared prompt's pages once
        cap, max_n, seq_kv = self.capacity, self.max_running, self.seq_kv
        share, lru = self.cost.params.enable_prefix_caching, self._lru
        group, sets = self._group, self._share_sets   # a prompt's running members (_share): its pages
        admitted: list[tuple[int, int]] = []
        pieces: list[tuple[int, float]] = []   # (tokens computed, attention pairs) per admitted
        if self._full and n0:   # (an idle engine always tries: nothing runs that could free room)
            return
        reserve = self._reserve
        room = cap - held + n - seq_kv * n - self._reserved() if reserve else 0.0   # SGLang's rem_total_tokens
        need = self._reserve_need() if reserve else 0
        while waiting and n < max_n:
            slot = waiting[0]
            ctx = p[slot] + g_of[slot]
            kept = self._kept.get(slot, 0) if self._kept else 0
            key = group[slot] if share and group[slot] >= 0 else None
            members = sets.get(key) if key is not None and sets else None
            # the slots it takes: its tokens and the one its prefill yields, less the prompt's pages a
            # running member of its group holds (admitted in this step or an earlier one: _share)
            new = ctx + 1 - (self._share_gain(slot, key) if members else 0)
            if held + new + seq_kv * (n + 1) > cap or arrival[slot] > now:  # room for it and one more step
                break
            if reserve:
                if new - 1 + need + seq_kv >= room and n:   # (an empty engine takes its first request whatever it reserves)
                    self._full = True
                    break
                room -= new - 1 + need + seq_kv
            waiting.popleft()
            admitted.append((slot, g_of[slot]))
            if lru is not None:   # its context freed earlier: what survives of it (the pages before it allocated)
                kept = max(kept, self._reclaim(slot, ctx, held + seq_kv * n))
            if kept:   # paused in place, or back from its tool: the tokens after its cached ones (at least its last)
                self._kept.pop(slot, None)
                own = ctx - kept
                pieces.append((own, own * kept + own * (own + 1) / 2.0))
            elif members:   # the prompt's KV is cached (a running member holds its pages)
                pieces.append(_hit_piece(ctx, p[slot]))
                if not (self._readmitting and slot in self._readmitting):   # a first prefill's hit
                    self.prompt_hit_tokens += ctx - pieces[-1][0]
            else:
                pieces.append((ctx, ctx * (ctx + 1) / 2.0))
            if self._resuming and slot in self._resuming:   # a resumed partial rollout's first admission
                self._resuming.discard(slot)
                self.resumed_tokens += pieces[-1][0]
            if self._readmitting and slot in self._readmitting:   # a preempted sequence back: what it computed again
                self._readmitting.discard(slot)
                self.preempted_tokens += pieces[-1][0]
            if key is not None:
                self._share(slot, key)
            state[slot] = _RUNNING
            n += 1
            kv += ctx + 1
            held += new
        if not admitted:
            return
        self.prefilled_tokens += sum(tokens for tokens, _ in pieces)
        if lru and held + seq_kv * n + self._retained > cap:   # the admitted ones' pages evict freed contexts'
            self._evict(held + seq_kv * n)
        duration, ride = self._prefill_time(pieces, n0, held + seq_kv * n)
        end = now + duration
        self.busy_s += duration
        self.t = end
        self._prefill = (now, end, admitted)
        self._phase_steps = ride
        self.generated_tokens += len(admitted) + ride * n0
        self._S += ride
        kv += ride * n0
        self._enter(admitted, end, n, kv)

    def _share(self, slot: int, key: int) -> None:
        """``slot`` joins the running members of its prompt's group ``key``: the first prefills the
        prompt, a later one (admitted in the same step or any later one, a re-admitted preempted one
        too) takes the pages a member holds (a prefix-cache hit: vLLM's block pool hands it the
        cached blocks themselves, v1/core/block_pool.py touch raising their ref_cnt; SGLang's radix
        tree its matched nodes): they count once among the members while any of them runs
        (_set_shared). A limit: pages whose last member left are taken as gone (vLLM keeps a freed
        block's hash until the pool reuses it, so a sample admitted after the others finished may
        still hit: not modelled, docs/cost-models-inference.md "Prefix caching")."""
        cached = self._p[slot] - 1
        members = self._share_sets.get(key)
        if members is None:
            self._share_sets[key] = [slot]
            self._share_cached[key] = [cached, cached, 1]
        else:
            self._shared += self._share_gain(slot, key)
            members.append(slot)
            stats = self._share_cached[key]
            stats[0] += cached
            if cached > stats[1]:
                stats[1], stats[2] = cached, 1
            elif cached == stats[1]:
                stats[2] += 1
        self._share_of[slot] = key

    def _share_gain(self, slot: int, key: int) -> int:
        """The tokens ``slot`` would hold in pages of the running members of set ``key`` (_set_shared's
        rise: the sum rises by its cached tokens c, the largest to max(largest, c), so min(c, largest))."""
        return min(self._p[slot] - 1, self._share_cached[key][1])

    def _hit_gain(self, slot: int) -> int:
        """The pool slots a waiting ``slot`` would take fewer on admission: the prompt's pages a
        running member of its group holds (_admit), 0 without one."""
        key = self._group[slot]
        return self._share_gain(slot, key) if self._share_sets and key in self._share_sets else 0

    def _set_shared(self, key: int) -> int:
        """Tokens a sharing set's members hold in each other's pages: each one's prompt but its last
        token (a hit leaves it to compute), the longest once (the set's prompt: a prompt's samples)."""
        stats = self._share_cached.get(key)
        return stats[0] - stats[1] if stats else 0

    def _unshare(self, slot: int) -> None:
        """A running ``slot`` of a sharing set leaves (finished, preempted, retracted): the prompt's
        pages stay while another member runs; the set goes with its last member."""
        key = self._share_of.pop(slot)
        members = self._share_sets[key]
        before = self._set_shared(key)
        members.remove(slot)
        if not members:
            del self._share_sets[key], self._share_cached[key]
        else:
            stats, cached = self._share_cached[key], self._p[slot] - 1
            stats[0] -= cached
            if cached == stats[1]:
                stats[2] -= 1
                if not stats[2]:   # the last of the longest left: the next longest
                    held = [self._p[other] - 1 for other in members]
                    stats[1] = max(held)
                    stats[2] = held.count(stats[1])
        self._shared += self._set_shared(key) - before

    def _retire(self, slot: int) -> None:
        """A finished ``slot`` leaves its context's pages to the LRU of freed contexts (keep_freed_contexts):
        those it held alone (a prompt's pages another running sample of its group still holds stay
        with it: the drop of _shared counts them), newest last."""
        before = self._shared
        if slot in self._share_of:
            self._unshare(slot)
        context = self._p[slot] + self._r[slot]
        pages = context + self._shared - before
        self._lru[self._id[slot]] = [context, 0, pages]   # (an id's entry goes when it is admitted again)
        self._retained += pages
        self.retained_tokens += pages

    def _evict(self, used: int) -> None:
        """Evict freed contexts' pages until ``used`` (the running sequences' pages) and the kept ones
        fit the capacity: the oldest freed entry first, from its tail (a prefix survives); an entry
        evicted whole waits in _gone for its sequence."""
        over = used + self._retained - self.capacity
        lru = self._lru
        while over > 0 and lru:
            seq_id = next(iter(lru))
            entry = lru[seq_id]
            take = min(over, entry[2])
            entry[1] += take
            entry[2] -= take
            over -= take
            self._retained -= take
            self.evicted_tokens += take
            if not entry[2]:
                del lru[seq_id]
                self._gone[seq_id] = entry

    def _reclaim(self, slot: int, ctx: int, used: int) -> int:
        """The cached tokens of an admitted ``slot`` of ``ctx`` tokens whose sequence left a context in
        the LRU (0 without one): what survives of it after the allocations before it (``used``: the
        running pages then), its tail evicted first, at most ctx - 1 (an engine computes a hit's last
        token again); the entry leaves the LRU (its pages now the running sequence's)."""
        if used + self._retained > self.capacity:
            self._evict(used)
        seq_id = self._id[slot]
        entry = self._lru.pop(seq_id, None)
        if entry is None:
            entry = self._gone.pop(seq_id, None)
            if entry is None:
                return 0
        self._retained -= entry[2]
        hit = min(ctx - 1, entry[0] - entry[1])
        self.reprefilled_tokens += min(ctx - 1, entry[0]) - hit
        return hit

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
        # (one piece, the usual admission: its figures, as the sums from 0 give them: pairs are positive)
        tokens, pairs = pieces[0] if len(pieces) == 1 else (sum(t for t, _ in pieces), sum(a for _, a in pieces))
        steps = 1 if budget is None else max(1, math.ceil(tokens / max(1, budget - riders)))
        if riders == 0:
            return steps * cost.prefill_s(tokens / steps, pairs / steps, len(pieces) / steps), 0
        while self._heap and self._stale(self._heap[0]):
            heapq.heappop(self._heap)
        ride = min(steps, self._heap[0][0] - self._S, max(0, (self.capacity - kv_after) // riders + 1))
        return cost.mixed_s(riders, self._K, tokens, pairs, len(pieces), steps), max(0, ride)

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
                if self._lru is not None:
                    self._retire(slot)
                elif slot in self._share_of:
                    self._unshare(slot)
                self._outbox.append((end, self._id[slot], slot))
                self._full = False   # a request finished (admission reserve tries its queue again)
                continue
            order += 1
            entries.append((step + r[slot] - g - 1, order, slot, epochs[slot]))
            stack.append((slot, epochs[slot]))
            if self._caps is not None:   # admission reserve: the step its reservation would reach 0
                bisect.insort(self._caps, self._max_new - g - 1 + step)
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


def _hit_piece(ctx: int, prompt: int) -> tuple[int, float]:
    """(tokens computed, attention pairs) of a later sample of a prompt, of ``ctx`` tokens, whose first
    is admitted beside it: the tokens past the prompt's cached ones. A hit covers all but its last
    token, computed again for its logits (vLLM 0.11 kv_cache_manager.py get_computed_blocks:
    max_cache_hit_length = num_tokens - 1; SGLang 0.4.6 schedule_batch.py init_next_round_input:
    max_prefix_len = input_len - 1)."""
    hit = min(prompt, ctx - 1)
    own = ctx - hit
    return own, own * hit + own * (own + 1) / 2.0


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


def _steps_within(lines: tuple[float, float, float, float, float], floor: float, elapsed: float) -> int:
    """Whole decode steps of a segment with these lines and CPU floor completed `elapsed` seconds
    after its start (a doubling search, then bisection on series_time_s)."""
    if elapsed <= 0:
        return 0
    hi = 1
    while series_time_s(lines, hi, floor) <= elapsed:
        hi *= 2
    lo = hi // 2  # duration(lo) <= elapsed < duration(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if series_time_s(lines, mid, floor) <= elapsed:
            lo = mid
        else:
            hi = mid
    return lo


def series_times_s(cost: StepCost, n: np.ndarray, K: np.ndarray, k: np.ndarray) -> np.ndarray:
    """series_time_s(cost.decode_lines(n, K), k, cost.decode_floor_s(n)) over arrays (0 where
    k <= 0): the engine's inlined arithmetic, operation for operation, so bit-identical to it."""
    out = np.zeros(len(k))
    live = np.flatnonzero(k > 0)
    if not len(live):
        return out
    every = len(live) == len(k)
    if not every:
        n, K, k = n[live], K[live], k[live]
    lin, weights, e, c1, m1, floor = cost.per_n_rows(n).T
    c0 = lin + cost.decode_ctx_compute_s * K
    m0 = weights + cost.decode_ctx_memory_s * K
    dc, dslope = c0 - m0, c1 - m1
    kf = k.astype(float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # The slopes are n x (attention per context token), n x (KV read per token): one side is the
        # steeper in every segment as a rule, so one case for all (the general form's values).
        if (dslope > 0).all():     # compute overtakes memory
            split = np.minimum(kf, np.maximum(0.0, np.ceil(-dc / dslope))).astype(np.int64)
            a0, a1, b0, b1 = m0, m1, c0, c1
        elif (dslope < 0).all():   # memory overtakes compute
            split = np.minimum(kf, np.maximum(0.0, np.floor(dc / -dslope) + 1.0)).astype(np.int64)
            a0, a1, b0, b1 = c0, c1, m0, m1
        else:
            a0, a1, b0, b1, split = _series_sides(c0, c1, m0, m1, dc, dslope, kf)
    head = np.where(split > 0, split * a0 + a1 * (split * (split - 1)) / 2.0, 0.0)
    tail = np.where(k > split, (k - split) * b0 + b1 * (k * (k - 1) - split * (split - 1)) / 2.0, 0.0)
    dec = head + tail + k * e
    for j in np.flatnonzero(floor > 0.0).tolist():   # a CPU floor (eager or async): the scalar form
        lines = (float(c0[j]), float(c1[j]), float(m0[j]), float(m1[j]), float(e[j]))
        dec[j] = series_time_s(lines, int(k[j]), float(floor[j]))
    if every:
        return dec
    out[live] = dec
    return out


def _series_sides(c0: np.ndarray, c1: np.ndarray, m0: np.ndarray, m1: np.ndarray, dc: np.ndarray, dslope: np.ndarray,
                  kf: np.ndarray) -> tuple[np.ndarray, ...]:
    """series_times_s' lines in order (a0, a1 before the split, b0, b1 after) and the split, per
    segment: _run_events' inlined cases element by element."""
    up = np.minimum(kf, np.maximum(0.0, np.ceil(-dc / dslope)))              # compute overtakes memory
    down = np.minimum(kf, np.maximum(0.0, np.floor(dc / -dslope) + 1.0))     # memory overtakes compute
    split = np.where(dslope == 0.0, np.where(dc >= 0, 0.0, kf), np.where(dslope > 0, up, down)).astype(np.int64)
    swap = dslope < 0
    return np.where(swap, c0, m0), np.where(swap, c1, m1), np.where(swap, m0, c0), np.where(swap, m1, c1), split


def _sums_by(values: np.ndarray, owner: np.ndarray, size: int) -> np.ndarray:
    """Sum of the integer ``values`` of each owner 0 .. size - 1 (0 for none), by one bincount:
    exact while every partial sum is below 2^53 (integers as floats; _fast_ok bounds the largest,
    the attention pairs), so equal to the integer sums in any order."""
    return np.bincount(owner, weights=values, minlength=size)


class _Walk(NamedTuple):
    """A fast run's events in decode-step units (RolloutEngine._walk_steps)."""

    steps: np.ndarray       # the step count at each event
    finished: np.ndarray    # sequences each event finished
    admitted: np.ndarray    # sequences each event admitted (the next ones of `waiting`)
    waiting: np.ndarray     # the slots waiting at the start, in admission order
    fin_slots: np.ndarray   # finished slots in finish (outbox) order
    start_running: list[tuple[int, int, int]]   # (slot, generated at admission, step count then)
    instant: np.ndarray | None = None   # per finish: done with its prefill's token (at the prefill's end)


def _full_slots_walk(keys: list[int], due: list[int], first_order: int, steps: list[int], finished: list[int],
                     admitted: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """_walk_steps' heap walk when every slot is full and no waiting job is due at once: each finish
    (in key order) frees one slot for the next job, due its remaining tokens after the finish's
    step, so one heapreplace per job (the popped keys come out increasing: a new key is later than
    the step it was admitted at). An event is a distinct finish step: it finished and admitted as
    many as it popped, except the last, which also finishes the keys left at its step (heap ties)
    and admits no more. ``steps``, ``finished``, ``admitted``: the events before (the first
    admission); returns them with these events appended, and the finish orders."""
    bits, mask = _ORDER_BITS, (1 << _ORDER_BITS) - 1
    replace = heapq.heapreplace
    popped = [replace(keys, (((keys[0] >> bits) + d) << bits) | order)
              for d, order in zip(due, range(first_order, first_order + len(due)), strict=True)]
    last = popped[-1] >> bits
    ties = []
    while keys and keys[0] >> bits == last:
        ties.append(heapq.heappop(keys))
    popped_arr = np.array(popped, np.int64)
    at = popped_arr >> bits
    starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1])))
    counts = np.diff(np.append(starts, len(at)))
    done = counts.copy()
    done[-1] += len(ties)
    fin = popped_arr & mask
    if ties:
        fin = np.concatenate([fin, np.array(ties, np.int64) & mask])
    return (np.concatenate([np.array(steps, np.int64), at[starts]]),
            np.concatenate([np.array(finished, np.int64), done]),
            np.concatenate([np.array(admitted, np.int64), counts]), fin)


def _full_slots_finishes(start: np.ndarray, due: np.ndarray, first_order: int) -> np.ndarray | None:
    """Every finish key of _full_slots_walk's walk and the drain after it, in finish order, without
    the heap: from the sorted keys ``start`` (every slot full), job j (order first_order + j) is
    admitted at the j-th pop P_j, due ``due[j]`` steps after it, so the pops P are the first
    len(due) keys of sorted(start + N(P)), N_j = (step of P_j + due_j, order): a job's key is later
    than its pop, so those after P_j do not change it. This is solved by iterating P <- first keys
    of sorted(start + N(P)) from P = start's first keys: every iterate lies at or above the walk's
    pops element by element (the map is monotone), falls, and a prefix that two iterates share
    stays, so the first repeat is the walk's pops (the fixed point is unique), and the sorted array
    it came from holds every finish: the pops, the keys left at the last pop's step (heap ties) and
    the drain, in key order. A few rounds as a rule (a round per generation of jobs on one slot);
    None when not settled in FULL_SLOTS_ROUNDS rounds, or when a step could pass 2^31 (the int64
    key): the heap walk then."""
    jobs, bits = len(due), _ORDER_BITS
    if (int(start[-1]) >> bits) + FULL_SLOTS_ROUNDS * int(due.max()) >= 2**31:
        return None
    job_keys = (due << bits) | np.arange(first_order, first_order + jobs, dtype=np.int64)
    high = -(1 << bits)   # the step bits of a key
    pops = start[:jobs]
    for _ in range(FULL_SLOTS_ROUNDS):
        new = (pops & high) + job_keys[:len(pops)]
        new.sort()
        merged = np.concatenate((start, new))
        merged.sort(kind="stable")   # two sorted runs: one merge
        following = merged[:jobs]
        if len(following) == len(pops) and not (following != pops).any():
            return merged
        pops = following
    return None


def _walk_of_finishes(steps: list[int], finished: list[int], admitted: list[int], finishes: np.ndarray, pops: int,
                      waiting: np.ndarray, base: int, live: list[tuple[int, int, int, int]]) -> _Walk:
    """The _Walk of the events before (``steps``, ``finished``, ``admitted``) and then every finish
    key in finish order (``finishes``), the first ``pops`` of which each admitted the next waiting
    job: one event per distinct finish step, finishing its keys and admitting those of them among
    the pops (_full_slots_walk and _walk_of's drain in one)."""
    bits, mask = _ORDER_BITS, (1 << _ORDER_BITS) - 1
    at = finishes >> bits
    starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1]))) if len(at) else at
    ends = np.append(starts[1:], len(at))
    steps_arr = np.concatenate([np.array(steps, np.int64), at[starts]])
    finished_arr = np.concatenate([np.array(finished, np.int64), ends - starts])
    admitted_arr = np.concatenate([np.array(admitted, np.int64), np.maximum(np.minimum(ends, pops) - starts, 0)])
    fin = finishes & mask
    return _Walk(steps_arr, finished_arr, admitted_arr, waiting, *_slots_of(fin, waiting, base, live), None)


def _slots_of(fin: np.ndarray, waiting: np.ndarray, base: int,
              live: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """(the slot of each finish order: admitted in the run (orders above base) or running at its
    start, the start's running (slot, generated, step count) in order)."""
    fin_slots = waiting[np.maximum(fin - base - 1, 0)] if len(waiting) else np.zeros(len(fin), np.int64)
    if live:
        live = sorted(live)
        start_orders = np.array([e[0] for e in live], np.int64)
        start_slots = np.array([e[1] for e in live], np.int64)
        mine = fin > base
        fin_slots[~mine] = start_slots[np.searchsorted(start_orders, fin[~mine])]
    return fin_slots, [e[1:] for e in live]


def _all_admitted_walk(step: int, due: np.ndarray, base: int, keys: list[int], waiting: np.ndarray,
                       live: list[tuple[int, int, int, int]]) -> _Walk:
    """_walk_steps' walk when the first event admits every waiting job and some are due at once
    (their prefill's token is their last): those finish at that prefill's end, in job order, and
    the others with the ones running (``keys``) in key order after it: the heap walk's one
    admission and its drain, without the heap."""
    bits = _ORDER_BITS
    orders = np.arange(base + 1, base + 1 + len(due))
    now = due == 0
    instant = orders[now].tolist()
    later = ((step + due[~now]) << bits) | orders[~now]
    rest = np.concatenate((np.array(keys, np.int64), later))
    return _walk_of([step], [len(instant)], [len(due)], instant, list(range(len(instant))), rest, waiting, base, live)


def _walk_of(steps: list[int], finished: list[int], admitted: list[int], fin_orders: list[int],
             instant_at: list[int], keys: np.ndarray, waiting: np.ndarray, base: int,
             live: list[tuple[int, int, int, int]]) -> _Walk:
    """The _Walk of a heap walk's events (step, finished, admitted each), its finishes (orders; at
    positions ``instant_at`` those done with their prefill) and the keys left, which finish in key
    order after the last admission (the drain: one event per distinct finish step). ``live``:
    (order, slot, generated, step count) of the sequences running at the start."""
    bits, mask = _ORDER_BITS, (1 << _ORDER_BITS) - 1
    finished_arr = np.array(finished, np.int64)
    rest = np.sort(keys)
    rest_steps = rest >> bits
    fin = np.concatenate([np.array(fin_orders, np.int64), rest & mask])
    instant = None
    if instant_at:
        instant = np.zeros(len(fin), bool)
        instant[instant_at] = True
    steps_arr, admitted_arr = np.array(steps, np.int64), np.array(admitted, np.int64)
    if len(rest):
        cut = np.flatnonzero(rest_steps[1:] != rest_steps[:-1]) + 1
        steps_arr = np.concatenate([steps_arr, rest_steps[np.concatenate([[0], cut])]])
        finished_arr = np.concatenate([finished_arr, np.diff(np.concatenate([[0], cut, [len(rest)]]))])
        admitted_arr = np.concatenate([admitted_arr, np.zeros(len(cut) + 1, np.int64)])
    return _Walk(steps_arr, finished_arr, admitted_arr, waiting, *_slots_of(fin, waiting, base, live), instant)


def fast_runs(engines: list[RolloutEngine], outbox: bool = True) -> list[_RunTrace]:
    """RolloutEngine._fast_run of several engines at once (each _fast_ok()): each walks its own
    events (_walk_steps), then the events of all engines on one step cost are timed together, in
    one pass of array arithmetic (_time_events): the same operations per event as one engine's run,
    so every engine ends bit-identical to its own _fast_run. Returns one trace per engine."""
    walks, gs, traces = [], [], []
    for engine in engines:
        if engine._n == 0:
            engine.t = max(engine.t, engine._arrival[engine._waiting[0]])
        traces.append(_RunTrace(engine))
        g = engine._as_added()[0] if engine._untouched() else np.asarray(engine._g, np.int64)
        gs.append(g)
        walks.append(engine._walk_steps(g))
    by_cost: dict[int, list[int]] = {}
    for i, engine in enumerate(engines):
        by_cost.setdefault(id(engine.cost), []).append(i)
    for group in by_cost.values():
        _time_events([engines[i] for i in group], [walks[i] for i in group], [gs[i] for i in group],
                     [traces[i] for i in group], outbox)
    for engine, walk, trace in zip(engines, walks, traces, strict=True):
        # every slot ends done: those of the run, and the rest were (a running slot is in the heap)
        engine._state = [_DONE] * len(engine._state)
        engine._order += len(walk.waiting)
        engine._waiting.clear()
        engine._heap = []
        engine._n, engine._K, engine._S = 0, trace.K_end, trace.S_end
        engine._share_of, engine._share_sets, engine._share_cached, engine._shared = {}, {}, {}, 0
        engine._event = engine._lines = None
    return traces


def _largest_sum(contexts: np.ndarray, running: int) -> int:
    """The most tokens ``running`` of these sequences hold at once: the sum of the ``running`` largest
    of their whole ``contexts`` (prompt + response; all of them when fewer). At most ``running``
    sequences run together, and a running one holds at most its whole context (its prompt, its
    tokens so far and, at an admission, its prefill's token: its last at the latest), so the KV
    tokens of any event (a decode segment's end, an admission, the check before preempting) stay
    within it, pages shared with a sibling counted once and so fewer."""
    if contexts.size <= running:
        return int(contexts.sum())
    cut = contexts.size - running
    return int(np.partition(contexts, cut)[cut:].sum())


def _exclusive_sums(values: np.ndarray, starts: np.ndarray, counts: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """Per segment (the runs of ``counts`` entries beginning at ``starts``), its ``initial`` value
    plus the sum of the integer ``values`` before each entry: exact, so equal to each segment's own
    cumulative sum."""
    before = np.cumsum(values) - values
    return before - np.repeat(before[starts] - initial, counts)


class _Events(NamedTuple):
    """The events of several fast runs (on one step cost), end to end: per event its step count,
    steps decoded before it (k), running count (n), KV tokens (K), the KV change it makes,
    sequences finished and admitted; per engine its first event and count."""

    steps: np.ndarray
    k: np.ndarray
    n: np.ndarray
    K: np.ndarray
    change: np.ndarray
    finished: np.ndarray
    admitted: np.ndarray
    starts: np.ndarray
    counts: np.ndarray


def _events_of(engines: list[RolloutEngine], walks: list[_Walk], p: np.ndarray, r: np.ndarray, ctx: np.ndarray,
               fin_slots: np.ndarray) -> tuple[_Events, np.ndarray, np.ndarray]:
    """The runs' events end to end (integers: exact in any grouping) and each finish's and each
    admission's event (global indices)."""
    counts_list = [len(w.steps) for w in walks]
    counts = np.array(counts_list, np.int64)
    starts = np.cumsum(counts) - counts
    if len(walks) == 1:
        steps, finished, admitted = walks[0].steps, walks[0].finished, walks[0].admitted
    else:
        steps = np.concatenate([w.steps for w in walks])
        finished = np.concatenate([w.finished for w in walks])
        admitted = np.concatenate([w.admitted for w in walks])
    total = len(steps)
    k = np.empty_like(steps)
    k[1:] = steps[1:] - steps[:-1]
    k[starts] = steps[starts] - np.array([e._S for e in engines], np.int64)
    events = np.arange(total)
    job_event, fin_event = np.repeat(events, admitted), np.repeat(events, finished)
    released = _sums_by(p[fin_slots] + r[fin_slots], fin_event, total).astype(np.int64)
    n = _exclusive_sums(admitted - finished, starts, counts, np.array([e._n for e in engines], np.int64))
    change = k * n - released + _sums_by(ctx + 1, job_event, total).astype(np.int64)
    K = _exclusive_sums(change, starts, counts, np.array([e._K for e in engines], np.int64))
    return _Events(steps, k, n, K, change, finished, admitted, starts, counts), job_event, fin_event


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _time_events(engines: list[RolloutEngine], walks: list[_Walk], gs: list[np.ndarray], traces: list[_RunTrace],
                 outbox: bool) -> None:
    """Time the walks of engines on one step cost: segment by segment (running n, KV K at its
    start, steps k) from the walks' counts, event times by one running sum per engine (start,
    decode, prefill, decode, ...: the engine's own additions in its order), then each engine's busy
    time, tokens, outbox and clock. The records of all engines are joined (slots offset per
    engine), so the numpy calls are paid once for all."""
    cost = engines[0].cost
    records = [e._record_arrays() for e in engines]
    sizes = np.array([len(rec[1]) for rec in records], np.int64)
    offsets = np.cumsum(sizes) - sizes
    ids, p, r, groups = (_joined([rec[j] for rec in records]) for j in (0, 1, 2, 4))
    g = _joined(gs)
    jobs = _joined([w.waiting for w in walks]) + np.repeat(offsets, [len(w.waiting) for w in walks])
    fin_slots = _joined([w.fin_slots for w in walks]) + np.repeat(offsets, [len(w.fin_slots) for w in walks])
    p_jobs, g_jobs = p[jobs], g[jobs]
    ctx = p_jobs + g_jobs
    ev, job_event, fin_event = _events_of(engines, walks, p, r, ctx, fin_slots)
    total = len(ev.steps)
    pre = np.zeros(total)
    has = ev.admitted > 0
    hits = _prefix_hits(engines, walks, groups, jobs, fin_slots, job_event, fin_event)
    tokens, pairs, hit_tokens = _prefill_work(cost, ctx, p_jobs, job_event, total, hits)
    resumed = _flagged_work(engines, walks, ctx, p_jobs, hits, job_event, total, "_resuming")
    readmitted = _flagged_work(engines, walks, ctx, p_jobs, hits, job_event, total, "_readmitting")
    if has.sum() <= _SCALAR_PREFILLS:   # a few: prefill_s itself, cheaper than the array form
        pre[has] = [cost.prefill_s(t, a, k) for t, a, k in
                    zip(tokens[has].tolist(), pairs[has].tolist(), ev.admitted[has].tolist(), strict=True)]
    else:
        pre[has] = cost.prefill_many_s(tokens[has], pairs[has], ev.admitted[has])
    dec = series_times_s(cost, ev.n, ev.K, ev.k)
    # per engine the running sum t0, dec_0, pre_0, dec_1, ... (a row each, padded: cumsum runs along
    # rows), flat: event i of engine e (its j-th) decodes at e * width + 2 j + 1, prefills one after
    rows, width = len(engines), 2 * int(ev.counts.max()) + 1
    before = 2 * np.arange(total) + np.repeat(np.arange(rows) * width - 2 * ev.starts, ev.counts)
    decode_at, prefill_at = before + 1, before + 2
    chain = np.zeros(rows * width)
    chain[::width] = [t.t0 for t in traces]
    chain[decode_at], chain[prefill_at] = dec, pre
    clock = np.cumsum(chain.reshape(rows, width), axis=1).reshape(-1)
    time, end = clock[decode_at], clock[prefill_at]
    busy = np.zeros(rows * width)
    busy[::width] = [e.busy_s for e in engines]
    busy[decode_at] = np.where(ev.n > 0, time - clock[before], 0.0)
    busy[prefill_at] = pre
    last = ev.starts + ev.counts - 1
    busy_end = np.cumsum(busy.reshape(rows, width), axis=1)[np.arange(rows), 2 * ev.counts]
    made = np.add.reduceat(ev.k * ev.n, ev.starts) + np.add.reduceat(ev.admitted, ev.starts)
    out_time = time[fin_event]
    if any(w.instant is not None for w in walks):   # finished by their prefill: at its end
        instant = _joined([np.zeros(len(w.fin_slots), bool) if w.instant is None else w.instant for w in walks])
        out_time = np.where(instant, end[fin_event], out_time)
    K_end = ev.K[last] + ev.change[last]
    n_after, K_after = np.empty_like(ev.n), np.empty_like(ev.K)
    n_after[:-1], K_after[:-1] = ev.n[1:], ev.K[1:]
    n_after[last], K_after[last] = 0, K_end
    fin_at = np.cumsum([0] + [len(w.fin_slots) for w in walks]).tolist()
    job_at = np.cumsum([0] + [len(w.waiting) for w in walks]).tolist()
    out_ids = ids[fin_slots]
    firsts, lasts, busy_ends, mades = ev.starts.tolist(), last.tolist(), busy_end.tolist(), made.tolist()
    clocks, step_ends, K_ends = end[last].tolist(), ev.steps[last].tolist(), K_end.tolist()
    for e, (engine, walk, trace) in enumerate(zip(engines, walks, traces, strict=True)):
        a, b, fa, fb = firsts[e], lasts[e] + 1, fin_at[e], fin_at[e + 1]
        engine.busy_s = busy_ends[e]
        engine.generated_tokens += mades[e]
        trace.base_counts = engine.counts()   # before the run (its admissions count below)
        trace.prefilled, trace.hit = tokens[a:b], None if hit_tokens is None else hit_tokens[a:b]
        trace.resumed = None if resumed is None else resumed[0][a:b]
        trace.readmitted = None if readmitted is None else readmitted[0][a:b]
        if readmitted is not None and trace.hit is not None:   # a readmission's hit is no first prefill's
            trace.hit = trace.hit - readmitted[1][a:b]
        engine.prefilled_tokens += int(trace.prefilled.sum())
        engine.prompt_hit_tokens += 0 if trace.hit is None else int(trace.hit.sum())
        if engine._resuming:   # the run admits every waiting slot (rebound: a kept start holds the set)
            engine.resumed_tokens += int(trace.resumed.sum())
            engine._resuming = set()
        if engine._readmitting:   # likewise the preempted ones waiting
            engine.preempted_tokens += int(trace.readmitted.sum())
            engine._readmitting = set()
        trace.time, trace.end = time[a:b], end[a:b]
        trace.fin_event, trace.out_time, trace.out_ids = fin_event[fa:fb] - a, out_time[fa:fb], out_ids[fa:fb]
        if outbox:   # else the caller takes the finishes from scatter()
            engine._outbox.extend(zip(trace.out_time.tolist(), trace.out_ids.tolist(), walk.fin_slots.tolist(),
                                      strict=True))
        engine.t = clocks[e]
        engine._prefill, engine._phase_steps = None, 0   # the last event finishes (admitted ones run on)
        trace.S, trace.S_end, trace.K_end = ev.steps[a:b], step_ends[e], K_ends[e]
        trace.n_after, trace.K_after = n_after[a:b], K_after[a:b]
        trace.walk, trace.job_event, trace.g = walk, job_event[job_at[e]:job_at[e + 1]] - a, gs[e]
        trace.slots = walk.waiting if not walk.start_running else \
            np.concatenate([np.array([s for s, _, _ in walk.start_running], np.int64), walk.waiting])


def _flagged_work(engines: list[RolloutEngine], walks: list[_Walk], ctx: np.ndarray, p: np.ndarray,
                  hits: np.ndarray | None, job_event: np.ndarray, events: int,
                  flagged: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(the tokens each of the ``events`` events' prefill computed for the waiting jobs that are slots in
    their engine's set ``flagged``, the prompt tokens those jobs hit): "_resuming", resumed partial rollouts
    (_admit's resumed_tokens); "_readmitting", preempted sequences back (its preempted_tokens), a prefix hit
    computing only what it does not hit; None where no engine has such a slot."""
    if not any(getattr(engine, flagged) for engine in engines):
        return None
    flag = _joined([np.isin(walk.waiting, np.array(sorted(getattr(engine, flagged)), np.int64))
                    for engine, walk in zip(engines, walks, strict=True)])
    hit = np.zeros_like(ctx) if hits is None else np.where(hits, np.minimum(p, ctx - 1), 0)
    return (_sums_by(np.where(flag, ctx - hit, 0), job_event, events).astype(np.int64),
            _sums_by(np.where(flag, hit, 0), job_event, events).astype(np.int64))


def _prefill_work(cost: StepCost, ctx: np.ndarray, p: np.ndarray, job_event: np.ndarray, events: int,
                  hits: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(tokens computed, attention pairs, prompt tokens hit) of each of the ``events`` events'
    prefill, _admit's pieces summed (``ctx``, ``p``: per admitted job): a prefix-cache hit
    (``hits``, per job; None: none, and no hit tokens) computes only its own generated tokens, or
    its prompt's last token when it has none (a hit leaves the last token: _admit). Pairs are
    integers below 2^53: exact as floats in any order."""
    tokens, pairs, hit_tokens = ctx, ctx * (ctx + 1) // 2, None
    if hits is not None:
        hit = np.minimum(p, ctx - 1)
        own = ctx - hit
        tokens = np.where(hits, own, ctx)
        pairs = np.where(hits, own * hit + own * (own + 1) // 2, pairs)
        hit_tokens = _sums_by(np.where(hits, hit, 0), job_event, events).astype(np.int64)
    return _sums_by(tokens, job_event, events).astype(np.int64), _sums_by(pairs, job_event, events), hit_tokens


def _prefix_hits(engines: list[RolloutEngine], walks: list[_Walk], groups: np.ndarray, jobs: np.ndarray,
                 fin_slots: np.ndarray, job_event: np.ndarray, fin_event: np.ndarray) -> np.ndarray | None:
    """Per admitted job of the joined runs (_time_events' global slots and events), whether it hits
    its prompt's cached pages (_admit): with prefix caching, a job of a group (>= 0) admitted while
    a member of its group runs - one admitted before it at the same event, or at an earlier event
    and not finished before this one's admissions (finishes come first), or one running at the
    run's start in its engine's share sets. None when no job can hit."""
    if not engines[0].cost.params.enable_prefix_caching or not len(jobs):
        return None
    job_group = groups[jobs]
    if int(job_group.max()) < 0:
        return None
    sizes = [len(e._group) for e in engines]
    offsets = np.cumsum(sizes) - sizes
    span = int(groups.max()) + 1   # engines' groups apart: group + engine x span
    engine_of_slot = np.repeat(np.arange(len(engines)), sizes)
    fin_of = np.empty(len(groups), np.int64)
    fin_of[fin_slots] = fin_event
    held = np.array([s + int(offsets[i]) for i, (e, w) in enumerate(zip(engines, walks, strict=True))
                     for s, _, _ in w.start_running if s in e._share_of], np.int64)
    members = np.concatenate((held, jobs))
    key = np.where(groups[members] >= 0, groups[members] + engine_of_slot[members] * span, -1)
    at = np.concatenate((np.full(len(held), -1, np.int64), job_event))
    # a member is running from its admission event to its finish event (a job done at its
    # prefill's end leaves after its event's admissions: one event)
    until = np.maximum(fin_of[members], at + 1)
    order = np.argsort(key, kind="stable")   # each group's members together, in admission order
    k = key[order]
    first = np.concatenate(([True], k[1:] != k[:-1]))
    lift = (np.cumsum(first) - 1) * (int(until.max()) + 2)   # a running max that restarts per group
    reach = np.maximum.accumulate(until[order] + lift) - lift
    before = np.empty_like(reach)
    before[0], before[1:] = -1, reach[:-1]
    hit = np.empty(len(members), bool)
    hit[order] = ~first & (before > at[order]) & (k >= 0)
    return hit[len(held):]


class _RunTrace:
    """One fast run, timed: each event's time, its prefill's end, and the state after it; per slot
    the events that admitted and finished it. Enough to answer an interrupt at any time after the
    run's start (ResumableRun) without engine copies."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.cost = engine.cost
        self._ids, self._p, self._r, _, _ = engine._record_arrays()   # fixed once added: shared
        self.t0 = engine.t
        self._slots: dict[str, np.ndarray] | None = None
        # counts_at: the engine's counts before the run, each event's prefilled and prompt-hit tokens
        self.base_counts: dict[str, int] = no_counts()
        self.prefilled: np.ndarray = np.zeros(0, np.int64)
        self.hit: np.ndarray | None = None
        self.resumed: np.ndarray | None = None   # each event's tokens of resumed partial rollouts (None: none)
        self.readmitted: np.ndarray | None = None   # each event's tokens of preempted sequences readmitted

    def scatter(self, finish_s: np.ndarray) -> None:
        """finish_s[seq_id] = finish time of every sequence the run finished."""
        finish_s[self.out_ids] = self.out_time

    def counts_at(self, now: float) -> dict[str, int]:
        """The engine's counts (RolloutEngine.counts) after the events up to ``now``, inclusive, as
        the event loop run to ``now`` leaves them: an event's admissions count at its time (their
        prefill starts then). An array run neither preempts nor evicts: prefills, hits, resumptions and the
        readmissions of sequences an earlier stretch preempted only."""
        counts = dict(self.base_counts)
        last = int(np.searchsorted(self.time, now, side="right"))
        counts["prefilled_tokens"] += int(self.prefilled[:last].sum())
        if self.hit is not None:
            counts["prompt_hit_tokens"] += int(self.hit[:last].sum())
        if self.resumed is not None:
            counts["resume_reprefill_tokens"] += int(self.resumed[:last].sum())
        if self.readmitted is not None:
            counts["preemption_reprefill_tokens"] += int(self.readmitted[:last].sum())
        return counts

    # -- an interrupt at `now`, from the arrays ------------------------------------------------------
    def _slot_arrays(self) -> dict[str, np.ndarray]:
        """Per slot of the run (running at its start, then waiting): the event that admitted it (-1:
        running at the start) and finished it, its tokens while waiting, and its tokens at
        admission (after the prefill's token) less the step count then ("made": its tokens at a
        later step count are that count plus this, integers)."""
        if self._slots is None:
            walk, start = self.walk, self.walk.start_running
            finished_at = np.zeros(len(self._ids), np.int64)
            finished_at[walk.fin_slots] = self.fin_event
            g_wait = self.g[walk.waiting]
            admitted, made = self.job_event, g_wait + 1 - self.S[self.job_event]
            if start:   # the running ones first
                g_start = np.array([g for _, g, _ in start], np.int64)
                admitted = np.concatenate([np.full(len(start), -1, np.int64), admitted])
                g_wait = np.concatenate([g_start, g_wait])
                made = np.concatenate([g_start - np.array([s for _, _, s in start], np.int64), made])
            self._slots = {"admitted": admitted, "finished": finished_at[self.slots], "g_wait": g_wait, "made": made}
        return self._slots

    def progress(self, now: float) -> tuple[np.ndarray, np.ndarray] | None:
        """(slots, tokens generated) of the sequences unfinished at `now`, as RolloutEngine.interrupt
        (now) would leave them (None before the run's first event: the caller restores the start)."""
        found = self._progress(now)
        return None if found is None else found[:2]

    def _progress(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """progress(), and which of them were running with their KV whole (not inside a prefill)."""
        i = int(np.searchsorted(self.time, now, side="right")) - 1
        if i < 0:
            return None
        a = self._slot_arrays()
        t_b, S_b = float(self.end[i]), int(self.S[i])
        n_b, K_b = int(self.n_after[i]), int(self.K_after[i])
        running = (a["admitted"] <= i) & (a["finished"] > i)
        waiting = a["admitted"] > i
        if t_b > now:   # inside the event's prefill: the ones it would finish are still partial
            waiting |= (a["admitted"] == i) & (a["finished"] == i)
        if n_b and t_b <= now:
            cost = self.cost
            made = a["made"] + (S_b + _steps_within(cost.decode_lines(n_b, K_b), cost.decode_floor_s(n_b), now - t_b))
        elif t_b > now:   # inside the event's prefill: it yields nothing
            made = np.where(a["admitted"] == i, a["g_wait"], a["made"] + S_b)
        else:
            made = a["made"] + S_b
        keep = np.flatnonzero(running | waiting)
        whole = running & ~((a["admitted"] == i) & (t_b > now))
        return self.slots[keep], np.where(running, made, a["g_wait"])[keep], whole[keep]

    def interrupt(self, now: float) -> InterruptResult | None:
        """RolloutEngine.interrupt(now) of the engine this run advanced (None before its first
        event); ``finished``: the sequences the last event by ``now`` finished."""
        progress = self._progress(now)
        if progress is None:
            return None
        slots, generated, whole = progress
        ids = self._ids[slots]
        order = np.argsort(ids, kind="stable")
        p, r = self._p[slots], self._r[slots]
        partial = [PartialSequence(*x) for x in zip(ids[order].tolist(), p[order].tolist(), r[order].tolist(),
                                                     generated[order].tolist(), strict=True)]
        cached = dict(zip(ids[whole].tolist(), (p + generated)[whole].tolist(), strict=True))
        i = int(np.searchsorted(self.time, now, side="right")) - 1
        mine = np.flatnonzero((self.fin_event == i) & (self.out_time <= now))
        out_ids = self._ids[self.walk.fin_slots[mine]]
        finished = [Finished(*x) for x in zip(out_ids.tolist(), self.out_time[mine].tolist(), strict=True)]
        return InterruptResult(finished, partial, cached)


# Engine copies a ResumableRun keeps at most: each holds the engine's whole state (its waiting queue
# too), so a long run with a deep queue (an async engine admitting every round a large age bound opens)
# kept thousands of them (gigabytes); past this many, every other copy goes and the spacing doubles.
MAX_RESUME_COPIES = 64


class ResumableRun:
    """Run an engine to completion, keeping a copy of its state every ``every`` events (at most
    MAX_RESUME_COPIES copies, the spacing doubled as they thin out), so that its state at an earlier
    time (an interrupt at a time decided after the full run, e.g. a tail consolidation point) is
    restored from the nearest copy and advanced a few events, instead of re-running the engine from
    the start. Results equal a fresh engine's: the same events are processed in the same order (an
    engine's event sequence does not depend on how advance_to chunks it)."""

    def __init__(self, engine: RolloutEngine, every: int = 32) -> None:
        self.engine = engine
        self.every = max(1, int(every))
        self._keys: list[float] = []                # latest event time processed before each copy
        self._copies: list[RolloutEngine | _UntouchedStart] = []   # (copy() of each: the state then)
        self._trace: _RunTrace | None = None

    def run(self) -> list[Finished]:
        return [Finished(seq_id, time) for time, seq_id, _ in self._run()]

    def run_into(self, finish_s: np.ndarray) -> None:
        """run(), writing each finished sequence's time at finish_s[seq_id]."""
        engine = self.engine
        if engine._fast_ok():
            self._keys, self._copies = [-math.inf], [_start_of_array_run(engine)]
            _scatter(engine._take_outbox(), finish_s)
            self._trace = engine._fast_run(outbox=False)
            self._trace.scatter(finish_s)
            return
        _scatter(self._run(), finish_s)

    def progress_at(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(seq_ids, tokens generated) of the sequences unfinished at ``now``: interrupt_at(now)'s
        partial sequences as arrays (call after ``run``)."""
        progress = self._trace.progress(now) if self._trace is not None else None
        if progress is not None:
            return self._trace._ids[progress[0]], progress[1]
        partial = self.interrupt_at(now, keep_finished=False).partial
        return (np.array([s.seq_id for s in partial], np.int64), np.array([s.generated for s in partial], np.int64))

    def _run(self) -> list[tuple[float, int, int]]:
        engine = self.engine
        self._trace = None
        if engine._fast_ok():   # one array run; its trace answers interrupts (no copies but the start)
            self._keys, self._copies = [-math.inf], [_start_of_array_run(engine)]
            self._trace = engine._fast_run()
            return engine._drain(math.inf)
        self._keys, self._copies = [-math.inf], [engine.copy()]
        every = self.every
        while True:   # engine.run(), a copy after every `every` events
            done, t = engine._run_events(math.inf, True, every)
            if done < every:
                return engine._drain(math.inf)
            self._keys.append(t)
            self._copies.append(engine.copy())
            if len(self._copies) > MAX_RESUME_COPIES:   # thin out: every other copy, twice the spacing
                self._keys, self._copies = self._keys[::2], self._copies[::2]
                every *= 2

    def state_before(self, now: float) -> RolloutEngine:
        """A copy of the engine at the latest state kept before ``now`` (call after ``run``): adding
        sequences to it at ``now`` continues the same run as an engine fed from the start (an add
        runs the events before its time first, and the events do not depend on how they are chunked)."""
        i = bisect.bisect_left(self._keys, now) - 1
        engine = self._copies[max(0, i)].copy()
        # the finishes recorded by then are the run's already: a continued run need not carry them
        key, outbox = self._keys[max(0, i)], engine._outbox
        while outbox and outbox[0][0] <= key:
            outbox.popleft()
        return engine

    def counts_at(self, now: float) -> dict[str, int]:
        """The engine's counts (RolloutEngine.counts) once it ran from the start through the events
        up to ``now``, inclusive (call after ``run``): from the array run's trace, or a copy of the
        state kept before then advanced to ``now``."""
        if self._trace is not None:
            return self._trace.counts_at(now)
        i = bisect.bisect_right(self._keys, now) - 1
        engine = self._copies[max(0, i)].copy()
        engine._run_events(now, True)
        return engine.counts()

    def interrupt_at(self, now: float, keep_finished: bool = True) -> InterruptResult:
        """``interrupt(now)`` of an engine that ran from the start to ``now`` (call after ``run``).
        ``finished`` lists only the sequences finished after the restored copy's time; callers
        that need all finishes by ``now`` take them from ``run``'s output."""
        if self._trace is not None:
            result = self._trace.interrupt(now)
            if result is not None:
                return result
        i = bisect.bisect_right(self._keys, now) - 1
        return self._copies[max(0, i)].copy().interrupt(now, keep_finished)


class _UntouchedStart:
    """The state of an _untouched() engine (every slot waits, in slot order: none admitted, so no
    heap, stack or outbox) before its array run, as ResumableRun keeps it, without the copy of
    its per-slot lists: the run leaves the entries of _g, _sadm and _epoch as they were and
    rebinds _state and _heap, and every slot ends done, so a later use of the engine (an add only
    appends slots; the event loop changes only running or waiting ones) never changes them
    either. ``copy()`` is the engine as engine.copy() then gave it."""

    def __init__(self, engine: RolloutEngine) -> None:
        engine._records_shared = True          # the engine's next add rebinds the lists kept here
        self._attrs = dict(engine.__dict__)   # scalars, and the lists as they are now
        self._attrs["_resuming"] = set(engine._resuming)   # a later add updates the engine's set in place
        self._attrs["_readmitting"] = set()   # untouched: nothing ran, nothing was preempted
        self._slots = len(engine._id)

    def copy(self) -> RolloutEngine:
        new = object.__new__(RolloutEngine)
        new.__dict__.update(self._attrs)
        new._owner = object()
        slots, attrs = self._slots, self._attrs
        new._g, new._sadm, new._state, new._epoch = (attrs[name][:slots] for name in ("_g", "_sadm", "_state", "_epoch"))
        new._heap, new._stack = [], []
        new._waiting, new._outbox = deque(range(slots)), deque()
        new._resuming = set(attrs["_resuming"])   # (the event loop takes slots out of its own)
        new._readmitting = set()
        return new


def _start_of_array_run(engine: RolloutEngine) -> RolloutEngine | _UntouchedStart:
    """ResumableRun's copy of an engine about to take its array run (_fast_ok()): an _UntouchedStart
    when the engine is untouched, else engine.copy()."""
    if engine._untouched() and not (engine._heap or engine._stack or engine._outbox):
        return _UntouchedStart(engine)
    return engine.copy()


def run_all_into(runs: Sequence[RolloutEngine | ResumableRun], finishes: Sequence[np.ndarray]) -> None:
    """``run.run_into(finish)`` of each run (an engine, or a ResumableRun: its trace then answers
    interrupts): the array runs of all of them go through one fast_runs (their events timed in one
    pass), the others through their own event loop. Each ends as its own run_into leaves it."""
    fast: list[tuple[RolloutEngine | ResumableRun, RolloutEngine, np.ndarray]] = []
    least = FAST_RUN_MANY_MIN_SEQUENCES if len(runs) > 1 else None
    for run, finish in zip(runs, finishes, strict=True):
        engine = run.engine if isinstance(run, ResumableRun) else run
        if not engine._fast_ok(least):
            run.run_into(finish)
            continue
        if isinstance(run, ResumableRun):
            run._keys, run._copies = [-math.inf], [_start_of_array_run(engine)]
        _scatter(engine._take_outbox(), finish)
        fast.append((run, engine, finish))
    traces = fast_runs([engine for _, engine, _ in fast], outbox=False)
    for (run, _, finish), trace in zip(fast, traces, strict=True):
        trace.scatter(finish)
        if isinstance(run, ResumableRun):
            run._trace = trace


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
                     ranks: Sequence[int] | None = None, layout_field: str = "rollout_layout") -> RolloutResult:
    """Generate a batch on `layout.instances` instances.

    Lengths are 1-D (one entry per sequence, dispatched one by one) or 2-D (prompts x samples:
    the samples of a prompt go to one instance together, as vLLM's n-sampling). `arrival_s`
    (per dispatch unit, default 0) staggers arrivals. `policy`: round_robin | least_loaded (fewest
    sequences held at arrival). `ranks`: global ranks of all instances' devices (instance i gets
    ranks[i*D:(i+1)*D]) for the CollectiveModel. `layout_field`: the dotted key of `layout` its
    errors name (as StepCost's)."""
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
                      list(ranks[:per]) if ranks is not None else None, layout_field=layout_field)
    engines = []
    for i in range(layout.instances):
        cost = shared
        if ranks is not None and i:
            cost = StepCost(model, device, layout, params, collectives, list(ranks[i * per:(i + 1) * per]),
                            layout_field=layout_field)
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
        engine.run_into(finish)
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
    need = batch * (context_len + cost.seq_kv_tokens)   # their tokens and their windows' / states' pages
    if check_kv and (need > cost.kv_capacity_tokens or batch > cost.max_running):
        raise RlsimError(f"{batch} sequences of {context_len:.0f} tokens need {need:.0f} KV "
                         f"tokens; the instance holds {cost.kv_capacity_tokens}"
                         f"{f' and {cost.max_running} sequences' if batch > cost.max_running else ''}", field="batch",
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
    """The device a rollout instance on `ranks` is costed on: its only kind; of mixed kinds the worst
    case of each rate (hardware.devices.worst_case_device: its devices meet at every TP all-reduce,
    so the slowest at prefill's FLOPs and the slowest at decode's HBM streaming both pace it, and
    weights and KV must fit the smallest HBM). A bound for an instance that spans device kinds, which
    engines rarely do: it never generates faster than on its slowest kind alone."""
    return worst_case_device(distinct_devices(topology, ranks))
