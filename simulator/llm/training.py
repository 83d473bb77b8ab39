"""The cost of one training step (one optimizer step over a global batch) under hybrid parallelism.

Per micro-batch compute by roofline with a GEMM efficiency curve (train_compute.py); TP / SP,
CP, EP and ZeRO-3 collectives inside each layer; pipeline point-to-point between stages; the
1F1B / interleaved pipeline simulated exactly (pipeline.py); data-parallel gradient sync after each
stage's last backward, overlapped by a named fraction; then the memory-bound optimizer step.
Every collective goes through `network.collectives.CollectiveModel`. Formulas and their sources:
docs/cost-models-training.md.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal

import numpy as np

from ..errors import RlsimError
from ..hardware.devices import distinct_devices, worst_case_device
from ..params import CommParams, TrainedShapes, TrainParams
from .architecture import dtype_bytes
from .deepep import reach
from .layer_costs import LayerShape, embedding_params, layer_shapes
from .memory import (
    MemoryBreakdown,
    MemoryParams,
    check_fits,
    check_forward_fits,
    forward_memory_per_device,
    layout_stage_layers,
    memory_per_device,
)
from .pipeline import (
    IDLE,
    PipelineResult,
    StageInterval,
    check_interleaved_micro_batches,
    critical_chain,
    forward_only_makespan,
    forward_only_makespans,
    interleaved_forward_makespans,
    simulate_pipeline,
    simulate_pipelines,
)
from .train_compute import (
    ROUTER_DTYPE_BYTES,
    ComputeParams,
    DeviceRates,
    LayerTimes,
    expert_load,
    gemm_times,
    layer_times,
    logits_times,
    router_rates,
)
from .train_layout import DEFAULT_ORDER, RECOMPUTE_MODES, TrainLayout

__all__ = ["CommParams", "ComputeParams", "ForwardCost", "MemoryBreakdown", "MemoryParams", "RECOMPUTE_MODES",
           "TrainLayout", "TrainParams", "TrainStepCost", "forward_cost", "memory_per_device", "train_step_cost",
           "train_step_memory", "uniform_sequences"]

COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
# The scenario keys the errors of this module name (the paths `--set` takes).
TRAIN_LAYOUT_FIELD = "workload.train_layout"
COMPUTE_DTYPE_FIELD = "workload.train_params.compute.dtype"
HEAD_DTYPE_FIELD = "workload.train_params.compute.head_dtype"
ROUTER_DTYPE_FIELD = "workload.train_params.compute.moe_router_dtype"
# verl's key for each token budget of train_layout (named in the fix of a budget too small)
_VERL_BUDGET_KEYS = {"max_tokens_per_micro_batch": "ppo_max_token_len_per_gpu",
                     "logprob_max_tokens_per_micro_batch": "log_prob_max_token_len_per_gpu"}


def uniform_sequences(num_sequences: int, seq_len: int) -> np.ndarray:
    """A batch of equal-length sequences (the Megatron benchmark setting)."""
    return np.full(int(num_sequences), int(seq_len), dtype=np.int64)


# ---- results ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ForwardCost:
    """A forward-only pass (reference / old-logprob / reward / critic values) over a batch."""

    time_s: float       # makespan of the slowest data-parallel replica
    compute_s: float    # forward compute of the busiest pipeline rank
    comm_s: float       # exposed TP / CP / EP / ZeRO-3 comm inside that rank's forward ops
    tokens: int
    flops: float        # model forward FLOPs (2N + attention per token, formulas.md)
    offload_s: float = 0.0   # of time_s: the per-phase and FSDP CPU offload's host copies (params.offload)
    # the pass's own memory on the device (forward_memory_per_device; None where params.check_memory is off)
    memory: MemoryBreakdown | None = None


@dataclass(frozen=True)
class TrainStepCost:
    """One optimizer step. Times are seconds; `comm_exposed_s` by kind: tp, cp, ep, pp, dp."""

    step_time_s: float
    pipeline_s: float             # forward/backward makespan of the slowest replica
    compute_s: float              # compute on the busiest device (recompute included)
    comm_exposed_s: dict[str, float]
    bubble_fraction: float        # idle device-time / device-time inside the pipeline flush
    bubble_s: float               # pipeline_s minus the busiest stage's busy time
    optimizer_s: float
    tflops_per_device: float      # TFLOP/s per device, recomputation counted (Megatron convention)
    mfu: float                    # model FLOPs (6N + attention, no recompute) / (time x devices x peak)
    model_flops: float
    hardware_flops: float
    tokens: int
    devices: int
    layout: TrainLayout
    memory: MemoryBreakdown
    pipeline: PipelineResult
    stage_tail_s: tuple[tuple[float, float, float], ...] = field(repr=False, default=())  # (end, dp, opt)
    # per stage, of its dp: (idle seconds waiting for the other stages before a joint collective, the joint
    # collectives' seconds after that wait) (_add_joint_sync); () or (0, 0): none
    stage_wait_s: tuple[tuple[float, float], ...] = field(repr=False, default=())
    offload_s: float = 0.0        # reload before + offload after the step over the host link (train_params.offload)

    @property
    def comm_s(self) -> float:
        return float(sum(self.comm_exposed_s.values()))

    @property
    def comm_fraction(self) -> float:
        return self.comm_s / self.step_time_s if self.step_time_s > 0 else 0.0

    @cached_property
    def timeline(self) -> tuple[StageInterval, ...]:
        """Per pipeline stage: forward / backward / idle intervals, then dp_sync and optimizer."""
        out: list[StageInterval] = []
        for s, (end, dp, opt) in enumerate(self.stage_tail_s):
            # The stage's own flush intervals up to its last backward, then its gradient sync and
            # optimizer step (each stage syncs its own parameters), then waiting for the slowest.
            out.extend(iv for iv in self.pipeline.intervals if iv.stage == s and iv.start < end)
            wait, joint = self.stage_wait_s[s] if self.stage_wait_s else (0.0, 0.0)
            own = dp - wait - joint   # its own sync, then waiting for the other stages, then their collectives
            for state, begin, seconds in (("dp_sync", end, own), (IDLE, end + own, wait),
                                          ("dp_sync", end + own + wait, joint)):
                if seconds > 0:
                    out.append(StageInterval(s, state, begin, begin + seconds))
            if opt > 0:
                out.append(StageInterval(s, "optimizer", end + dp, end + dp + opt))
            done = self.step_time_s - self.offload_s
            if done > end + dp + opt:
                out.append(StageInterval(s, IDLE, end + dp + opt, done))
            if self.offload_s > 0:
                out.append(StageInterval(s, "offload", done, self.step_time_s))
        return tuple(out)

    def critical_stages(self) -> dict[str, Any]:
        """Which pipeline stage set this step's length, and the chain through the stages that led
        there: the stage that finishes last (its flush end, its gradient sync and optimizer), the
        seconds its critical chain (pipeline.critical_chain) spends computing on each stage and in
        point-to-point transfers, then the tail: the parts sum to ``step_time_s`` (the step ends
        when the last stage's optimizer does, plus the offload)."""
        if not self.stage_tail_s:
            return {}
        waits = self.stage_wait_s or ((0.0, 0.0),) * len(self.stage_tail_s)
        # the stage that ends last (of equal ends, the one that waited least), and, where it waited for the
        # others before a joint collective, the stage whose own sync it waited for: the chain runs there
        last = max(range(len(self.stage_tail_s)), key=lambda st: (sum(self.stage_tail_s[st]), -waits[st][0]))
        chain_stage = last
        if waits[last][0] > 0:
            chain_stage = max(range(len(self.stage_tail_s)), key=lambda st: self.stage_tail_s[st][0]
                              + self.stage_tail_s[st][1] - sum(waits[st]))
        end_last, dp_last, opt = self.stage_tail_s[last]
        end = self.stage_tail_s[chain_stage][0]
        dp = end_last + dp_last - end   # its sync, and what it waited for past the chain's stage's flush
        by_stage = [0.0] * len(self.stage_tail_s)
        p2p = 0.0
        for op in critical_chain(self.pipeline, chain_stage):
            by_stage[op.stage] += op.end - op.start
            p2p += op.p2p_before_s
        return {"stage": chain_stage, "ops_s_by_stage": by_stage, "p2p_s": p2p, "dp_sync_s": dp, "optimizer_s": opt,
                "offload_s": self.offload_s}

    def record(self, timeline: Any, pool: str, ranks: Sequence[int], start: float, *, iteration: int = -1,
               label: str = "train") -> None:
        """Write the timeline into a des.Timeline (one record per device); `ranks` in the layout's canonical order. Idle
        inside the flush is cause `pipeline_bubble`; waiting for the slowest stage, `dependency`."""
        stage_ranks = stage_rank_lists(self.layout, ranks)
        for iv in self.timeline:
            state = "idle" if iv.state == IDLE else ("sync" if iv.state == "dp_sync" else "train")
            cause = ("pipeline_bubble" if iv.start < self.stage_tail_s[iv.stage][0] else "dependency") \
                if state == "idle" else ""
            timeline.add_devices(pool, stage_ranks[iv.stage], state, start + iv.start, start + iv.end,
                                    cause=cause, iteration=iteration, label=f"{label}:{iv.state}")

    def summary(self) -> dict[str, Any]:
        return {"step_time_s": self.step_time_s, "pipeline_s": self.pipeline_s, "compute_s": self.compute_s,
                "comm_exposed_s": dict(self.comm_exposed_s), "bubble_fraction": self.bubble_fraction,
                "optimizer_s": self.optimizer_s, "offload_s": self.offload_s, "tflops_per_device": self.tflops_per_device, "mfu": self.mfu,
                "tokens": self.tokens, "devices": self.devices, "layout": self.layout.as_dict(),
                "memory": self.memory.as_dict()}


# ---- rank groups --------------------------------------------------------------------------------------
def _position(layout: TrainLayout, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
    coords = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp or 1, "pp": layout.pp}
    index, stride = 0, 1
    for dim in layout.order:
        index += coords[dim] * stride
        stride *= sizes[dim]
    return index


def stage_rank_lists(layout: TrainLayout, ranks: Sequence[int]) -> list[list[int]]:
    """All physical ranks of each pipeline stage."""
    dp = layout.dp or 1
    return [sorted(int(ranks[_position(layout, t, c, d, s)]) for t in range(layout.tp) for c in range(layout.cp)
                   for d in range(dp)) for s in range(layout.pp)]


@dataclass(frozen=True)
class _Groups:
    tp: list[list[int]]          # per stage
    cp: list[list[int]]
    ep: list[list[int]]
    dp: list[list[int]]          # dense-gradient group (dp x cp) per stage
    edp: list[list[int]]         # expert-gradient group (dp x cp / ep) per stage
    p2p: list[tuple[int, int]]   # stage s -> s + 1 representatives (first TP rank)
    zero_shard: int = 0          # ranks of dp[s] / edp[s] one copy of the ZeRO state spans (0: all)
    expert_zero_shard: int = 0
    # expert tensor-parallel group per stage (etp ranks: the routed experts' gather / scatter); with
    # etp = tp and cp = 1 the TP group. Empty: each stage's TP group.
    etp: list[list[int]] = field(default_factory=list)
    # Megatron's embedding group: the first and the last pipeline stage's ranks of one (dp, cp, tp)
    # coordinate, which all-reduce a tied word embedding's gradients (_tied_embedding_sync_s); empty at pp 1
    embedding: list[int] = field(default_factory=list)
    # expert-TP x EP group per stage (etp x ep ranks: Megatron-Core's tp_ep group, over which the
    # allgather token dispatcher gathers and reduce-scatters the tokens). Empty: each stage's EP group.
    tp_ep: list[list[int]] = field(default_factory=list)
    # the group gradient clipping all-reduces its norm over (_grad_stats_sync_s): every rank of the pool with
    # ZeRO >= 1 (Megatron's distributed optimizer: "the entire world"; FSDP's mesh), else one replica's
    # tp x pp ranks (Megatron's model-parallel group)
    grad_stats: list[int] = field(default_factory=list)

    def sharded(self, stage: int, expert: bool = False) -> tuple[list[int], list[int]]:
        """(shard group, copies group) of a stage's dense or expert DP group under ZeRO: the first
        zero_shard consecutive ranks (HSDP's shard dimension is the inner one), and one rank of each
        copy (its replicate dimension); the copies group is one rank when fully sharded."""
        group = self.edp[stage] if expert else self.dp[stage]
        size = (self.expert_zero_shard if expert else self.zero_shard) or len(group)
        return group[:size], group[::size]


def _positions(layout: TrainLayout) -> np.ndarray:
    """Canonical position of every (pp, dp, cp, tp) coordinate, as an array indexed [s, d, c, t]."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp or 1, "pp": layout.pp}
    strides, stride = {}, 1
    for dim in layout.order:
        strides[dim] = stride
        stride *= sizes[dim]
    s, d, c, t = np.ix_(*(np.arange(sizes[k]) * strides[k] for k in ("pp", "dp", "cp", "tp")))
    return s + d + c + t


@lru_cache(maxsize=256)
def _groups(layout: TrainLayout, ranks: tuple[int, ...]) -> _Groups:
    r = np.asarray(ranks, dtype=np.int64)[_positions(layout)]  # [s, d, c, t] -> physical rank
    tp, cp, ep, dpg, edp, p2p, etp_groups, tp_ep = [], [], [], [], [], [], [], []
    etp = layout.expert_tp
    for s in range(layout.pp):
        tp.append(r[s, 0, 0, :].tolist())
        cp.append(r[s, 0, :, 0].tolist())
        # MoE parallel folding: the stage's tp x cp x dp ranks (tp fastest, then cp, dp) re-read as
        # (edp, ep, etp), expert TP fastest (Megatron-Core expert rank order tp-ep-dp-pp).
        folded = r[s].reshape(-1).reshape(layout.expert_dp, layout.ep, etp)
        ep.append(folded[0, :, 0].tolist())
        dpg.append(r[s, :, :, 0].ravel().tolist())            # d outer, c inner
        edp.append(folded[:, 0, 0].tolist())
        etp_groups.append(folded[0, 0, :].tolist())
        tp_ep.append(folded[0].ravel().tolist())
    for s in range(layout.pp):
        p2p.append((int(r[s, 0, 0, 0]), int(r[(s + 1) % layout.pp, 0, 0, 0])))
    embedding = [int(r[0, 0, 0, 0]), int(r[-1, 0, 0, 0])] if layout.pp > 1 else []
    return _Groups(tp, cp, ep, dpg, edp, p2p, layout.zero_shard, layout.expert_zero_shard, etp_groups, embedding,
                   tp_ep, _grad_stats_group(layout, r, 0, 0))


def _grad_stats_group(layout: TrainLayout, r: np.ndarray, d: int, c: int) -> list[int]:
    """The ranks gradient clipping all-reduces its norm over (`r`: physical ranks [s, d, c, t]): all of them
    with ZeRO >= 1 (megatron-core 0.8.0 optimizer/distrib_optimizer.py get_model_parallel_group: None, the
    world; torch FSDP's mesh), else the model-parallel group of replica (d, c), its tp x pp ranks
    (parallel_state.py: the 'tp-pp' groups)."""
    ranks = r.ravel() if layout.zero >= 1 else r[:, d, c, :].ravel()
    return sorted(int(x) for x in ranks)


def _sharded_sync(comm: _Comm, groups: _Groups, stage: int, expert: bool, grad_bytes: float,
                  weight_bytes: float) -> tuple[float, float]:
    """ZeRO's sync over a stage's (dense or expert) DP group: (the gradients' `grad_bytes`: a
    reduce-scatter inside the shard group, then an all-reduce of the shard across the copies; the
    weights' `weight_bytes`: an all-gather inside the shard group)."""
    shard, copies = groups.sharded(stage, expert)
    grads = comm.one("reduce_scatter", shard, grad_bytes)
    if len(copies) > 1:
        grads += comm.one("all_reduce", copies, grad_bytes / len(shard))
    return grads, comm.one("all_gather", shard, weight_bytes)


class _Comm:
    """Collective times through a CollectiveModel. A single size is asked exactly; an array of
    sizes is asked at the powers of two that bracket it and interpolated linearly (collective time
    is affine in bytes for a fixed algorithm: latency + bytes / bandwidth), so ragged batches reuse
    the CollectiveModel's cache across queries."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._signature = getattr(model, "signature", None)

    def group_key(self, group: Sequence[int], op: str = "all_gather") -> tuple:
        """Equal keys, equal costs of every collective the layers run on the group (they all sort
        it; ``op`` "p2p": of a transfer from group[0] to group[1]): the CollectiveModel's group
        signature, else the ranks themselves; one device runs none (``one``: 0 s)."""
        if len(group) < 2:
            return ("one",)
        if self._signature is None:
            return ("ranks", tuple(group))
        return self._signature(op, group)

    def one(self, op: str, group: Sequence[int], nbytes: float) -> float:
        if len(group) < 2 and op != "p2p" or nbytes <= 0:
            return 0.0
        if op == "p2p" and group[0] == group[1]:
            return 0.0
        return float(self.model.cost(op, list(group), float(nbytes)).time_s)

    def many(self, op: str, group: Sequence[int], nbytes: np.ndarray) -> np.ndarray:
        nbytes = np.asarray(nbytes, dtype=float)
        if nbytes.size == 0:
            return nbytes.copy()
        lo, hi = float(nbytes.min()), float(nbytes.max())
        if hi == lo:
            return np.full_like(nbytes, self.one(op, group, lo))
        if lo > 0:
            lo, hi = 2.0 ** math.floor(math.log2(lo)), 2.0 ** math.ceil(math.log2(hi))
        t_lo, t_hi = self.one(op, group, lo), self.one(op, group, hi)
        return t_lo + (nbytes - lo) * ((t_hi - t_lo) / (hi - lo))


def _collective_model(topology: Any, collectives: Any | None) -> Any:
    """The network model the collectives go through: the caller's (which owns the caches), or a
    fresh one on `topology` for this call only. No module-level cache: a cache keyed by the
    topology's id() outlives it (a recycled id hits another topology) and keeps topologies alive."""
    if collectives is not None:
        return collectives
    from ..network.collectives import CollectiveModel
    return CollectiveModel(topology)


def _memo(collectives: Any, topology: Any, kind: tuple[str, int] | None = None) -> dict[tuple, Any] | None:
    """The training-cost results cached on the CollectiveModel that made them (it fixes the topology
    and the collective parameters; the rest of the key is by value); None when it cannot own them
    (another topology's model, or a stand-in without a ``memo``). ``kind``: (name, most entries) of
    another table than the steps' (STEP_MEMO: PIPELINES_MEMO)."""
    memo = getattr(collectives, "memo", None)
    if not isinstance(memo, dict) or getattr(collectives, "topology", None) is not topology:
        return None
    name, most = kind or STEP_MEMO
    out = memo.setdefault(name, {})
    if len(out) > most:
        out.clear()
    return out


# Results kept per CollectiveModel: a speed knob only (results do not depend on it).
STEP_MEMO_MAX_ENTRIES = 256
STEP_MEMO = ("llm.training", STEP_MEMO_MAX_ENTRIES)
# The slowest replica's pipelines (_slowest_replica_memoized) kept per CollectiveModel, by their op
# times: a planner's candidates that differ in what the pipeline does not see (ZeRO 0-2: the gradient
# sync after it) share them, mostly neighbours in the search's order: a few dozen entries keep nearly all
# the hits (the default scenario's plan: 2,554 simulations at 64, 2,534 unbounded, of 3,496), and bound what
# a long run keeps (each key holds its op times). A speed knob only.
PIPELINES_MEMO = ("llm.training.pipelines", 64)
# The layers' compute times (_layer_times) kept per CollectiveModel, by all they read: candidates of
# another pp, ZeRO stage or recompute on the same micro-batches share them (the default scenario's plan:
# 3,600 computed at 256 entries, 3,144 distinct, of 6,992). A speed knob only.
LAYER_TIMES_MEMO = ("llm.training.layer_times", 256)


pool_devices = distinct_devices  # the distinct DeviceSpecs of a pool's ranks (hardware/devices.py)


def slowest_device(kinds: Sequence[Any], dtype: str, *, dtype_field: str = "dtype") -> Any:
    """The device a pool of mixed kinds is costed on: the worst case of each rate
    (hardware.devices.worst_case_device: the lowest sustained GEMM rate per dtype, HBM bandwidth,
    flash rate, links; the smallest HBM). Replicas meet at every gradient sync and pipeline stages
    wait for each other, so the slowest device at each part sets the step (a bound: planner/hetero.py
    costs mixed pipelines stage by stage). `dtype_field`: the key of `dtype` an unknown dtype's error
    names."""
    return worst_case_device(kinds, dtype, dtype_field=dtype_field)


# ---- micro-batches ------------------------------------------------------------------------------------
def _sequences(sequences: Any, source: str | None) -> np.ndarray:
    seqs = np.asarray(sequences)
    if seqs.ndim == 0:
        raise RlsimError("sequences must be a list of sequence lengths", source=source, field="sequences",
                         fix="pass e.g. uniform_sequences(512, 2048)")
    seqs = seqs.reshape(-1)
    if seqs.size == 0 or not np.issubdtype(seqs.dtype, np.number) or np.any(seqs < 1):
        raise RlsimError("sequences must be a non-empty list of positive lengths", source=source,
                         field="sequences", fix="give every sequence at least one token")
    return seqs.astype(np.int64)


def _micro_batches(seqs: np.ndarray, layout: TrainLayout, packing: str, budget: int | None = None,
                   params: TrainParams | None = None, budget_key: str = "max_tokens_per_micro_batch",
                   source: str | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per DP replica: (tokens, sum of squared lengths) per micro-batch, before CP (_micro_batch_parts)."""
    return _micro_batch_parts(seqs, layout, packing, budget, params, budget_key, source)[0]


def _micro_batch_parts(seqs: np.ndarray, layout: TrainLayout, packing: str, budget: int | None = None,
                       params: TrainParams | None = None, budget_key: str = "max_tokens_per_micro_batch",
                       source: str | None = None, scored: np.ndarray | None = None) -> tuple[list, list | None]:
    """Per DP replica: (tokens, sum of squared lengths) per micro-batch, before CP; and, with
    ``scored`` (each sequence's tokens the output layer projects), those per micro-batch (else None).

    Megatron's sampler: micro-batch step k takes the next b x dp sequences, replica r the r-th
    slice of b. Padded: a micro-batch costs b x its longest sequence; packed: its token sum, with
    attention per sequence. With a token `budget`: `_token_budget_micro_batches`. A pipeline with
    one p2p shape (comm.pp_variable_seq_lengths false): `_one_pipeline_shape`. `budget_key`: the
    train_layout key `budget` comes from (named when a sequence exceeds it)."""
    # an interleaved pipeline runs micro-batches in groups of pp (Megatron's
    # microbatch_group_size_per_vp_stage): a token budget's count rounds up to a multiple of it
    group = layout.pp if layout.vpp > 1 else 1
    width = _padded_row_width(seqs, packing, params, source)
    real = _attention_skips_padding(packing, params)
    replicas, heads = (_token_budget_micro_batches(seqs, layout.dp or 1, budget, packing, budget_key, source, scored,
                                                   group, width, real)
                       if budget is not None else _sampler_micro_batches(seqs, layout, packing, scored, width, real))
    if layout.pp > 1 and params is not None and not params.comm.pp_variable_seq_lengths:
        return [_one_pipeline_shape(tokens, sq, packing, real) for tokens, sq in replicas], heads
    return replicas, heads


def _attention_skips_padding(packing: str, params: TrainParams | None) -> bool:
    """Whether padded rows' attention runs over their real tokens alone (train_params.compute
    .attention_skips_padding: a flash kernel's varlen path; Q = sum of the real lengths squared)."""
    return packing == "padded" and params is not None and params.compute.attention_skips_padding


def _padded_row_width(seqs: np.ndarray, packing: str, params: TrainParams | None, source: str | None) -> float | None:
    """The fixed width padded rows take (train_params.compute.pad_rows_to; "batch": the longest of
    ``seqs``, the samples the pass is given), None where each micro-batch pads to its longest (packed
    rows, or no width given). A sample longer than it: RlsimError."""
    width = params.compute.pad_rows_to if params is not None and packing == "padded" else None
    if width == "batch":
        return float(seqs.max()) if seqs.size else None
    if width is not None and seqs.size and int(seqs.max()) > width:
        raise RlsimError(f"a {int(seqs.max())}-token sample is longer than the padded row width {width}",
                         source=source, field="workload.train_params.compute.pad_rows_to",
                         fix="raise it to at least the longest prompt + response (the workload's prompt_length.max + "
                             "response_length.max)")
    return None if width is None else float(width)


def replica_micro_batches(seqs: np.ndarray, layout: TrainLayout, packing: str, params: TrainParams,
                          forward_only: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per DP replica: (tokens, sum of squared lengths) per micro-batch, as train_step_cost (or, with
    ``forward_only``, forward_cost) cuts ``seqs`` under ``layout`` (_micro_batch_parts with the pass's
    token budget). RlsimError where a sequence exceeds that budget."""
    key = ("logprob_max_tokens_per_micro_batch" if forward_only and layout.logprob_max_tokens_per_micro_batch
           else "max_tokens_per_micro_batch")
    return _micro_batch_parts(np.asarray(seqs), layout, packing, getattr(layout, key), params, key)[0]


def _one_pipeline_shape(tokens: np.ndarray, sq: np.ndarray, packing: str,
                        real_attention: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A replica's micro-batches padded to its longest: Megatron-Core's pipeline sends tensors of one
    shape (seq_length) unless config.variable_seq_lengths, so a framework pads every micro-batch to
    the batch's longest (NeMo RL v0.5 megatron_policy_worker: pad_full_seq_to when
    pipeline_model_parallel_size > 1). The padding runs through every GEMM, norm and the logits;
    packed (THD) attention skips it (padded cu_seqlens offsets), padded (SBHD) attention does not
    (``real_attention``: a varlen kernel on padded rows skips it too)."""
    longest = float(tokens.max())
    if packing == "packed" or real_attention:
        return np.full_like(tokens, longest), sq
    return np.full_like(tokens, longest), np.full_like(sq, float(sq.max()))


def _sampler_micro_batches(seqs: np.ndarray, layout: TrainLayout, packing: str,
                           scored: np.ndarray | None = None, width: float | None = None,
                           real_attention: bool = False) -> tuple[list, list | None]:
    """`_micro_batch_parts` without a token budget: b sequences a micro-batch in the sampler's order
    (padded: to the micro-batch's longest, or to ``width``, every row's fixed width; the attention
    over the padded rows, or with ``real_attention`` over each row's real length)."""
    b, dp = layout.micro_batch, layout.dp or 1
    idx = np.arange(seqs.size)
    step = idx // (b * dp)
    replica = (idx % (b * dp)) // b
    n_steps = int(step.max()) + 1
    flat = replica * n_steps + step  # one bin per (replica, micro-batch step), filled in input order
    s = seqs.astype(float)
    size = dp * n_steps
    if packing == "packed":
        tokens = np.bincount(flat, weights=s, minlength=size)
        sq = np.bincount(flat, weights=s * s, minlength=size)
    else:
        count = np.bincount(flat, minlength=size).astype(float)
        longest = np.zeros(size)
        np.maximum.at(longest, flat, s)
        if width is not None:
            longest = np.where(count > 0, width, 0.0)
        tokens = count * longest
        sq = np.bincount(flat, weights=s * s, minlength=size) if real_attention else count * longest * longest
    tokens, sq = tokens.reshape(dp, n_steps), sq.reshape(dp, n_steps)
    head = None if scored is None else np.bincount(flat, weights=scored.astype(float), minlength=size).reshape(dp, -1)
    if (tokens > 0).all():   # every replica fills every micro-batch step (all but a ragged tail)
        return list(zip(tokens, sq, strict=True)), None if head is None else list(head)
    out, heads = [], []
    for r in range(dp):
        keep = tokens[r] > 0
        if keep.any():
            out.append((tokens[r][keep], sq[r][keep]))
            if head is not None:
                heads.append(head[r][keep])
    return out, None if head is None else heads


def sampler_micro_batch_counts(n: int, b: int, dp: int) -> set[int]:
    """The micro-batch counts of the DP replicas `_sampler_micro_batches` cuts ``n`` samples into, ``b``
    a micro-batch: ceil(n / (b dp)) micro-batch steps, the last one's samples on its first replicas
    (b each), the replicas past them one micro-batch fewer (a replica with none is dropped). An
    interleaved pipeline refuses a count that is not a multiple of pp (llm/pipeline.py)."""
    if n <= 0:
        return set()
    steps = -(-n // (b * dp))
    filled = -(-(n - (steps - 1) * b * dp) // b)   # replicas with a sample in the last step
    return {steps} | ({steps - 1} if filled < dp and steps > 1 else set())


def _balanced_dp_split(seqs: np.ndarray, dp: int) -> list[np.ndarray]:
    """The batch over the dp ranks (_balanced_dp_indices): each rank's lengths longest first."""
    return [seqs[members] for members in _balanced_dp_indices(seqs, dp)]


def _balanced_dp_indices(seqs: np.ndarray, dp: int) -> list[np.ndarray]:
    """The batch over the dp ranks: equal counts (the first n mod dp ranks one more), near-equal
    token sums, whatever the input order (verl trainer.balance_batch, on by default: the batch is
    reordered so every DP rank gets a balanced share of tokens, get_seqlen_balanced_partitions with
    equal_size; rlsim: longest first onto the least-loaded rank with room, ties to the lower rank).
    Each rank's sequences (their indices) longest first."""
    n = seqs.size
    room = [n // dp + (1 if r < n % dp else 0) for r in range(dp)]
    heap = [(0.0, r) for r in range(dp) if room[r] > 0]
    members: list[list[int]] = [[] for _ in range(dp)]
    longest_first = np.argsort(seqs, kind="stable")[::-1]
    for i, x in zip(longest_first.tolist(), seqs[longest_first].tolist(), strict=True):
        load, r = heap[0]   # (a rank with room left stays in the heap: its entry replaced, one heap operation)
        members[r].append(i)
        if len(members[r]) < room[r]:
            heapq.heapreplace(heap, (load + x, r))
        else:
            heapq.heappop(heap)
    return [np.asarray(m, dtype=np.int64) for m in members]


def _token_budget_micro_batches(seqs: np.ndarray, dp: int, budget: int, packing: str,
                                budget_key: str = "max_tokens_per_micro_batch", source: str | None = None,
                                scored: np.ndarray | None = None, group: int = 1,
                                width: float | None = None, real_attention: bool = False) -> tuple[list, list | None]:
    """Dynamic token-budget micro-batches (verl use_dynamic_bsz: the batch is split into dp chunks of
    equal counts and near-equal tokens (`_balanced_dp_indices`), each chunk into micro-batches whose
    token sums stay within `budget`, balanced by sequence length,
    verl/utils/seqlen_balancing.py rearrange_micro_batches; NeMo RL sequence packing with
    train_mb_tokens). Longest-first onto the least-loaded micro-batch; one more micro-batch while any
    exceeds the budget (`budget_key`, the train_layout key it comes from). Every rank runs the count
    the rank that needs the most takes (rearrange_micro_batches' same_micro_num_in_dp, on by default:
    an all-reduce MAX over the DP group), rounded up to a multiple of `group` (its
    num_batches_divided_by: an interleaved pipeline's pp), at most the rank's sequences. Padded:
    each micro-batch pads to its longest (every row to ``width`` where given), its attention over
    the padded rows or, ``real_attention``, the real lengths. With ``scored``: each micro-batch's sum
    of it too."""
    if int(seqs.max()) > budget:
        raise RlsimError(f"a {int(seqs.max())}-token sequence exceeds the micro-batch token budget {budget}",
                         source=source, field=f"{TRAIN_LAYOUT_FIELD}.{budget_key}",
                         fix=f"raise {budget_key} (verl: {_VERL_BUDGET_KEYS.get(budget_key, budget_key)} >= the "
                             "longest prompt + response)")
    lens = seqs.astype(float)
    out, heads = [], []
    chunks = [chunk for chunk in _balanced_dp_indices(lens, dp) if chunk.size]
    fewest = [_budget_groups(lens[chunk], budget) for chunk in chunks]   # each chunk's indices longest first
    count = -(-max((len(groups) for groups in fewest), default=1) // group) * group
    exact = packing == "packed" and _integer_sums_exact(seqs, scored)
    for chunk, groups in zip(chunks, fewest, strict=True):
        members = groups if len(groups) >= min(count, chunk.size) else _budget_groups(lens[chunk], budget, count)
        if exact:   # the sums of whole numbers, as integers: the same floats, one numpy call per sum
            order, starts = _micro_batch_order(chunk, members)
            tokens = seqs[order].astype(np.int64)
            out.append((np.add.reduceat(tokens, starts).astype(float),
                        np.add.reduceat(tokens * tokens, starts).astype(float)))
            if scored is not None:
                heads.append(np.add.reduceat(scored[order].astype(np.int64), starts).astype(float))
            continue
        arr = [lens[chunk[mb]] for mb in members]
        if packing == "packed":
            out.append((np.array([a.sum() for a in arr]), np.array([(a * a).sum() for a in arr])))
        else:   # each row padded to the micro-batch's longest, or to the fixed ``width``
            rows = [width or a.max() for a in arr]
            out.append((np.array([a.size * w for a, w in zip(arr, rows, strict=True)]),
                        np.array([(a * a).sum() if real_attention else a.size * w ** 2
                                  for a, w in zip(arr, rows, strict=True)])))
        if scored is not None:
            heads.append(np.array([float(scored[chunk[mb]].sum()) for mb in members]))
    return out, heads if scored is not None else None


def _integer_sums_exact(seqs: np.ndarray, scored: np.ndarray | None) -> bool:
    """Whether every sum of the lengths, of their squares and of ``scored`` over any of them is exact in
    floats, in any order: whole numbers (integer arrays), as many as the lengths, each square at most
    the largest's, all of those squares together below 2^53. Then those sums taken as integers are
    the floats numpy's pairwise sums of the float lengths give."""
    arrays = [seqs] if scored is None else [seqs, np.asarray(scored)]
    if any(a.dtype.kind not in "iu" for a in arrays):
        return False
    widest = max(max(abs(int(a.max(initial=0))), abs(int(a.min(initial=0)))) for a in arrays)
    return max(seqs.size, len(arrays[-1])) * widest ** 2 < 2**53


def _micro_batch_order(chunk: np.ndarray, members: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(the chunk's sequences micro-batch after micro-batch, where each micro-batch starts in it)."""
    sizes = np.fromiter(map(len, members), np.int64, count=len(members))
    positions = np.fromiter((i for mb in members for i in mb), np.int64, count=int(sizes.sum()))
    return chunk[positions], np.cumsum(sizes) - sizes


def _budget_groups(ordered: np.ndarray, budget: int, at_least: int = 1) -> list[list[int]]:
    """Positions in ``ordered`` (lengths, longest first) of each micro-batch: the fewest (and at least
    ``at_least``, as far as there are lengths) whose token sums stay within ``budget``, each length
    onto the least-loaded, in order (empty ones dropped), ties to the lower micro-batch
    (_least_loaded_groups); a count whose greedy split exceeds the budget is followed by the next
    (at once where no split into that many can stay within it: _surely_over)."""
    lengths = ordered.tolist()
    m = max(1, min(at_least, ordered.size), math.ceil(float(ordered.sum()) / budget))
    while True:   # one micro-batch per length at most: that count is taken whatever it holds
        last = m >= len(lengths)
        members = None if not last and _surely_over(lengths, m, budget) else \
            _least_loaded_groups(lengths, m, math.inf if last else budget)
        if members is not None:
            return [mb for mb in members if mb]
        m += 1


# A split's sums are float sums of at most a batch of lengths (relative error below 1e-12 for a million
# of them): _surely_over's bound must pass the budget by more than that to say a greedy split's would.
_SURELY_OVER_MARGIN = 1e-9


def _surely_over(lengths: list[float], m: int, budget: float) -> bool:
    """Whether every split of ``lengths`` (longest first, at least m + 1 of them) into m groups has a
    group over ``budget``: of the k m + 1 longest, some group holds k + 1 (pigeonhole), so at least
    the k + 1 shortest of them. The greedy split is one such split, so its count can be skipped."""
    for k in range(1, (len(lengths) - 1) // m + 1):
        if sum(lengths[k * m - k:k * m + 1]) > budget * (1 + _SURELY_OVER_MARGIN):
            return True
    return False


def _least_loaded_groups(lengths: list[float], m: int, budget: float) -> list[list[int]] | None:
    """Positions of ``lengths`` (longest first, each onto the least-loaded of ``m`` groups, ties to the
    lower group) per group; None as soon as a group's sum would exceed ``budget`` (sums only grow, so
    the split's largest would too). The sums sit in a heap of (sum, group): its head is the first
    least-loaded, as an argmin over the sums picks, at log(m) a length instead of m. The m longest,
    none empty, take the empty groups in turn (an empty length would keep the first one least-loaded)."""
    if m <= len(lengths) and lengths[m - 1] > 0:
        if lengths[0] > budget:
            return None
        heap = [(0.0 + x, i) for i, x in enumerate(lengths[:m])]
        heapq.heapify(heap)
        members: list[list[int]] = [[i] for i in range(m)]
        first = m
    else:
        heap = [(0.0, i) for i in range(m)]
        members = [[] for _ in range(m)]
        first = 0
    for j in range(first, len(lengths)):
        load, i = heap[0]
        load += lengths[j]
        if load > budget:
            return None
        heapq.heapreplace(heap, (load, i))
        members[i].append(j)
    return members


# ---- per-layer time including comm --------------------------------------------------------------------
@dataclass
class _LayerCost:
    fwd_compute: np.ndarray
    bwd_compute: np.ndarray | None    # None: the forward only was asked (LayerTimes.bwd_s)
    attn_fwd: np.ndarray
    fwd_comm: dict[str, np.ndarray]   # exposed, by kind
    bwd_comm: dict[str, np.ndarray]


def _tp_blocks(layer: LayerShape) -> list[tuple[str, str]] | None:
    """(column GEMM, row GEMM) of each TP block of a dense attention + MLP layer (qkv -> o, up ->
    down), the blocks TE userbuffers overlap; None for other layers (MoE, MLA, hybrid blocks)."""
    names = [g.name for g in layer.gemms]
    if layer.moe or layer.ssm_flops_per_token or any(g.expert for g in layer.gemms):
        return None
    ups = [n for n in names if n.endswith("_up")]
    blocks = [("qkv", "o")] + [(up, up[:-3] + "_down") for up in ups]
    if len(blocks) != layer.tp_reductions or not all(c in names and r in names for c, r in blocks):
        return None
    return blocks


def has_userbuffer_blocks(model: Any) -> bool:
    """Whether any layer of ``model`` is a dense attention + MLP layer whose TP blocks TE userbuffers
    overlap (_tp_blocks): none in an all-MoE, MLA or hybrid model, where comm.tp_userbuffers acts on
    nothing."""
    return any(_tp_blocks(layer) is not None for layer in layer_shapes(model))


def trained_shapes(models: Iterable[Any]) -> TrainedShapes:
    """What the layers of ``models`` hold, as params.train_constants_read_past asks it."""
    models = list(models)
    dense = [m for m in models if m.num_dense_layers]
    return TrainedShapes(mamba=any(m.num_mamba_layers or m.num_linear_layers for m in models),   # scans
                         gated_ffn=any(getattr(m, "gated_ffn", True) for m in dense),
                         plain_ffn=any(not getattr(m, "gated_ffn", True) for m in dense),
                         experts=any(m.num_moe_layers for m in models),
                         userbuffer_blocks=any(has_userbuffer_blocks(m) for m in models))


def _ring_exchange_s(comm_s: np.ndarray, gemm_s: np.ndarray, tp: int) -> np.ndarray:
    """Exposed time of an all-gather by ring exchange beside a GEMM: tp - 1 chunk transfers, each
    beside one of the GEMM's tp chunks."""
    return (tp - 1) * np.maximum(0.0, comm_s / (tp - 1) - gemm_s / tp)


def _pipelined_s(comm_s: np.ndarray, gemm_s: np.ndarray, splits: int) -> np.ndarray:
    """Exposed time of a reduce-scatter pipelined with its GEMM in ``splits``: the last split's, and
    what each earlier one outlasts the next GEMM split."""
    return comm_s / splits + (splits - 1) * np.maximum(0.0, (comm_s - gemm_s) / splits)


def _userbuffer_tp(blocks: list[tuple[str, str]], gemms: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                   gather: np.ndarray, scatter: np.ndarray, tp: int,
                   splits: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed TP time of a layer under TE userbuffers (CommParams.tp_userbuffers)."""
    fwd = np.zeros_like(gather)
    bwd = np.zeros_like(gather)
    for col, row in blocks:
        col_f, col_d, col_w = gemms[col]
        row_f, row_d, _ = gemms[row]
        fwd = fwd + _ring_exchange_s(gather, col_f, tp) + _pipelined_s(scatter, row_f, splits)
        bwd = (bwd + _ring_exchange_s(gather, row_d, tp) + np.maximum(0.0, gather - col_d)
               + np.maximum(0.0, scatter - col_w))
    return fwd, bwd


def _layer_cost(layer: LayerShape, times: LayerTimes, model: Any, layout: TrainLayout, tokens_local: np.ndarray,
                groups: _Groups, stage: int, comm: _Comm, params: TrainParams,
                userbuffers: tuple[list[tuple[str, str]], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]
                | None = None, once: tuple[np.ndarray, np.ndarray] | None = None) -> _LayerCost:
    """``userbuffers``: the layer's TP blocks (_tp_blocks) and per-GEMM times (train_compute.gemm_times)
    when TE userbuffers apply (TP > 1 with SP, CommParams.tp_userbuffers). ``once``: the first and last
    micro-batch of each replica (_pipelined_fsdp_ends) where FSDP syncs once a step."""
    cp_, a = params.comm, params.compute.activation_bytes
    h = int(model.hidden)
    act = tokens_local * h * a
    fwd: dict[str, np.ndarray] = {}
    bwd: dict[str, np.ndarray] = {}
    if userbuffers is not None:   # TE userbuffers: each collective beside one GEMM (CommParams.tp_userbuffers)
        g = groups.tp[stage]
        blocks, gemms = userbuffers
        fwd["tp"], bwd["tp"] = _userbuffer_tp(blocks, gemms, comm.many("all_gather", g, act),
                                              comm.many("reduce_scatter", g, act), layout.tp,
                                              cp_.tp_userbuffer_pipeline_splits)
    elif layout.tp > 1:  # 2 all-reduces (or all-gather + reduce-scatter with SP) forward, 2 backward
        g = groups.tp[stage]
        blocks = _dense_tp_blocks(layer)
        one = (comm.many("all_gather", g, act) + comm.many("reduce_scatter", g, act)) if layout.sp \
            else comm.many("all_reduce", g, act)
        fwd["tp"] = bwd["tp"] = blocks * one * (1 - cp_.tp_overlap_fraction)
        if layout.sp and cp_.sp_backward_allgather:  # inputs of QKV and FC1 re-gathered for dW
            bwd["tp"] = bwd["tp"] + blocks * comm.many("all_gather", g, act) * (
                1 - cp_.sp_backward_allgather_overlap_fraction)
    over_tp_ep = cp_.moe_token_dispatcher in ("allgather", "flex")   # one exchange over expert-TP x EP
    if layer.moe and (layout.ep > 1 or layout.expert_tp > 1):   # the routed tokens to their experts and back
        routed, exchange = _expert_exchange(layer, model, layout, tokens_local, groups, stage, comm, params)
        if layout.expert_tp > 1 and not over_tp_ep:   # the routed experts' block over the expert-TP group
            fwd["tp"] = fwd.get("tp", 0.0) + routed
            bwd["tp"] = bwd.get("tp", 0.0) + routed
    if layout.cp > 1 and layout.ulysses_sp:
        fwd["cp"], bwd["cp"] = _ulysses_comm(layer, layout, tokens_local, groups.cp[stage], comm, params)
    elif layout.cp > 1:  # ring attention: KV around the ring forward; KV again and dKV backward
        # (Transformer Engine's AttnFuncWithCPAndKVP2P backward re-circulates the KV blocks and passes
        # the dKV blocks the other way: an all-gather and a reduce-scatter of the full gathered size)
        kv_elems = layer.kv_heads * (layer.qk_head_dim + layer.v_head_dim) / layout.tp
        kv = tokens_local * layout.cp * kv_elems * a
        g = groups.cp[stage]
        fwd["cp"] = comm.many("all_gather", g, kv) * (1 - cp_.cp_overlap_fraction)
        bwd["cp"] = (comm.many("all_gather", g, kv) + comm.many("reduce_scatter", g, kv)) * (
            1 - cp_.cp_overlap_fraction)
    if layer.moe and (layout.ep > 1 or (layout.expert_tp > 1 and over_tp_ep)):   # dispatch + combine
        fwd["ep"] = bwd["ep"] = exchange
    if layout.zero >= 3:
        gather, reduce = _fsdp_layer_comm(layer, layout, groups, stage, comm, params)
        if gather > 0 or reduce > 0:
            fwd["dp"], bwd["dp"] = _fsdp_micro_batch_comm(gather, reduce, tokens_local,
                                                          params.memory.reshards_after_forward(layout.pp), once)
    return _LayerCost(times.fwd_s, times.bwd_s, times.attn_fwd_s, fwd, bwd)


def _dense_tp_blocks(layer: LayerShape) -> float:
    """TP blocks (a column-parallel GEMM into a row-parallel one) of a layer whose input TP gathers and
    whose output it reduces over the TP group: every one of a dense layer (LayerShape.tp_reductions);
    an MoE layer's attention (or mixer) and its shared experts (a TP-split MLP beside the routed ones,
    Megatron-Core SharedExpertMLP), not its routed experts, which are split over the expert-TP group
    after the EP all-to-all (_routed_expert_tp_s)."""
    if not layer.moe:
        return layer.tp_reductions
    shared = any(g.name == "shared_up" for g in layer.gemms)
    return layer.tp_reductions - 1.0 + (1.0 if shared else 0.0)


def _expert_exchange(layer: LayerShape, model: Any, layout: TrainLayout, tokens_local: np.ndarray, groups: _Groups,
                     stage: int, comm: _Comm, params: TrainParams) -> tuple[np.ndarray, np.ndarray]:
    """An MoE layer's routed-token exchange, one direction (forward; the backward runs the transposes,
    the same sizes): (the expert-TP part, the rest), exposed, by Megatron-Core's token dispatcher
    (CommParams.moe_token_dispatcher). "alltoall": the routed experts' gather / scatter over the
    expert-TP group (_routed_expert_tp_s, x (1 - tp_overlap_fraction)) and the dispatch + combine
    all-to-alls of each rank's T / tp (SP) tokens x k copies over EP (x (1 - ep_overlap_fraction)).
    "allgather": none of those, but the rank's T / tp tokens all-gathered over the expert-TP x EP group
    and the experts' output reduce-scattered back over it, etp x ep x T / tp tokens gathered whatever
    the top-k (megatron-core 0.13.0 MoEAllGatherTokenDispatcher.token_dispatch / token_combine), x (1 -
    ep_overlap_fraction): (0, that). Without SP each rank's T tokens (Megatron-Core refuses MoE training
    with TP and no SP: moe/moe_layer.py forward). The all-to-alls and the expert-TP collectives move the
    busiest EP rank's routed rows (train_compute.expert_load: it receives them in the dispatch and sends
    them in the combine, and the rest wait for it); the all-gather dispatcher's volume is every rank's.
    "flex": DeepEP's dispatch and combine over the expert-TP x EP group (_flex_exchange_s): (0, that)."""
    cp_, a = params.comm, params.compute.activation_bytes
    hidden = int(model.hidden)
    combine = _combine_bytes_ratio(params.compute)
    rows = tokens_local / (layout.tp if layout.sp else 1)
    if cp_.moe_token_dispatcher == "allgather":
        gathered = rows * layout.expert_tp * layout.ep * hidden * a
        group = groups.tp_ep[stage] if groups.tp_ep else groups.ep[stage]
        t = (comm.many("all_gather", group, gathered) + comm.many("reduce_scatter", group, gathered * combine)) * (
            1 - cp_.ep_overlap_fraction)
        return np.zeros_like(tokens_local, dtype=float), t
    act = tokens_local * hidden * a
    load = expert_load(layer, tokens_local, layout.tp, layout.ep, layout.expert_tp, params.compute)
    if load is not None:   # the busiest EP rank's routed rows
        act, rows = act * load, rows * load
    if cp_.moe_token_dispatcher == "flex":
        group = groups.tp_ep[stage] if groups.tp_ep else groups.ep[stage]
        t = 2.0 * _flex_exchange_s(layer, model, layout, rows * hidden * a, group, comm)
        return np.zeros_like(tokens_local, dtype=float), t * (1 - cp_.ep_overlap_fraction)
    etp_group = groups.etp[stage] if groups.etp else groups.tp[stage]
    routed = _routed_expert_tp_s(layer, layout, act, etp_group, comm, combine) * (1 - cp_.tp_overlap_fraction) \
        if layout.expert_tp > 1 else np.zeros_like(act)
    sent = rows * layer.experts_per_token * hidden * a
    exchange = 2.0 * comm.many("all_to_all", groups.ep[stage], sent) * (1 - cp_.ep_overlap_fraction) \
        if layout.ep > 1 else np.zeros_like(act)
    return routed, exchange


def _flex_exchange_s(layer: LayerShape, model: Any, layout: TrainLayout, row_bytes: np.ndarray,
                     group: Sequence[int], comm: _Comm) -> np.ndarray:
    """One DeepEP dispatch (or combine: the same bytes backwards) of the flex dispatcher over ``group``
    (the expert-TP x EP ranks, EP index outer, expert TP inner) for each rank's ``row_bytes`` (its rows
    x hidden x bytes, the busiest EP rank's): every rank sends its rows x the distinct nodes a token
    reaches (llm/deepep.py) as an all-to-all over its rail (the group's ranks of its GPU index, one a
    node: RDMA) and the forwarding ranks send the rows x the distinct ranks as an all-to-all inside each
    node (NVLink); each all-to-all keeps its own piece (the node's or the rank's own), as DeepEP's does.
    DeepEP runs both at once (its internode kernel forwards each RDMA chunk while the next arrives): the
    slower of the two, over the slowest rail and node. A node is the topology's scale-up domain."""
    topology = comm.model.topology
    by_node = list(topology.group_by_domain(list(group)).values())
    if len({len(members) for members in by_node}) > 1:
        raise RlsimError(f"the flex (DeepEP) dispatcher's expert-TP x EP group of {len(group)} ranks spans "
                         f"{len(by_node)} scale-up domains unevenly ({', '.join(str(len(m)) for m in by_node)} "
                         "ranks): DeepEP's internode kernels pair the ranks of one GPU index across nodes of "
                         "equal size", field="workload.train_params.comm.moe_token_dispatcher",
                         fix="lay expert TP x EP over whole nodes (a multiple of the devices a node, or one "
                             "node), or use alltoall")
    node_of = {r: d for d, members in enumerate(by_node) for r in members}
    ranks, nodes = reach([i // layout.expert_tp for i in range(len(group))], [node_of[r] for r in group],
                         layer.num_experts, layer.experts_per_token, layout.ep, getattr(model, "expert_groups", 1),
                         getattr(model, "expert_groups_per_token", 0))
    nvlink = np.max([comm.many("all_to_all", members, row_bytes * ranks) for members in by_node], axis=0)
    rails = [list(rail) for rail in zip(*by_node, strict=True)]
    rdma = np.max([comm.many("all_to_all", rail, row_bytes * nodes) for rail in rails], axis=0)
    return np.maximum(nvlink, rdma)


def _combine_bytes_ratio(compute: ComputeParams) -> float:
    """The combine's reduce-scatter bytes over the activations' (and its backward all-gather's): the
    routing probabilities' dtype where ComputeParams.moe_router_dtype sets it (0.13.0 moe/
    token_dispatcher.py: hidden_states.to(probs.dtype) before it), else 1."""
    dtype = compute.moe_router_dtype
    return 1.0 if dtype is None else ROUTER_DTYPE_BYTES[dtype] / compute.activation_bytes


def _routed_expert_tp_s(layer: LayerShape, layout: TrainLayout, act: np.ndarray, group: Sequence[int],
                        comm: _Comm, combine: float = 1.0) -> np.ndarray:
    """An MoE layer's routed-expert collectives over the expert-TP group, one direction (forward: the
    dispatched rows all-gathered before the experts, their output reduce-scattered after; backward the
    same two): each rank's T / tp tokens x k routed copies after the EP all-to-all, etp of them, k x A
    x etp / tp bytes for the layer's activation A (megatron-core 0.8.0 MoEAlltoAllTokenDispatcher:
    all_gather_last_dim_from_tensor_parallel_region, reduce_scatter_last_dim_to_tensor_parallel_region;
    later ones gather the rows over the expert-TP group). The expert-TP ranks hold different rows
    whether or not SP is on (at tp 1 they are different DP replicas): a gather, never an all-reduce.
    ``combine``: the reduce-scatter's bytes over the gather's (_combine_bytes_ratio)."""
    rows = act * layer.experts_per_token * layout.expert_tp / layout.tp
    return comm.many("all_gather", group, rows) + comm.many("reduce_scatter", group, rows * combine)


def _fsdp_layer_comm(layer: LayerShape, layout: TrainLayout, groups: _Groups, stage: int, comm: _Comm,
                     params: TrainParams) -> tuple[float, float]:
    """ZeRO-3 / FSDP per layer and micro-batch, exposed: (parameter all-gather, run in forward and
    again in backward; gradient reduce-scatter in backward). Dense weights over the dp x cp group,
    expert weights over the expert-DP group; each hidden by its named fraction."""
    c = params.comm
    wb, gb = params.memory.weight_bytes_per_param, c.grad_reduce_bytes_per_param
    g_frac, r_frac = _fsdp_hidden(c)
    gather = reduce = 0.0
    parts = [(layer.dense_params / layout.tp, layer.trainable_dense_params / layout.tp, False)]
    if layer.moe:
        split = layout.ep * layout.expert_tp
        parts.append((layer.expert_params / split, layer.trainable_expert_params / split, True))
    for held, trained, expert in parts:   # LoRA: the whole layer gathered, its adapters' gradients reduced
        grads, weights = _sharded_sync(comm, groups, stage, expert, trained * gb, held * wb)
        gather += weights
        reduce += grads
    return gather * (1 - g_frac), reduce * (1 - r_frac)


def _fsdp_micro_batch_comm(gather: float, reduce: float, tokens_local: np.ndarray, reshard: bool,
                           once: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """A layer's exposed FSDP (forward, backward) time in each micro-batch from its `gather` and `reduce`
    (_fsdp_layer_comm): each forward gathers and each backward reduce-scatters, the backward re-gathering a
    layer resharded after its forward (`reshard`: MemoryParams.reshards_after_forward at the layout's pp).
    `once` (first, last: 1 at each replica's first / last micro-batch, _pipelined_fsdp_ends), torch's
    pipelining under FSDP2 (MemoryParams.zero3_sync_last_micro_batch_only): the reduce-scatter in the last
    backward alone, and without resharding after the forward the gather in the first forward alone."""
    again = gather if reshard else 0.0
    if once is None:
        return np.full_like(tokens_local, gather), np.full_like(tokens_local, again + reduce)
    first, last = once
    fwd = np.full_like(tokens_local, gather) if reshard else gather * first
    return fwd, again + reduce * last


def _pipelined_fsdp_ends(layout: TrainLayout, params: TrainParams,
                         replica_sizes: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(first, last): 1.0 at each data-parallel replica's first / last micro-batch of the concatenated
    replicas (`replica_sizes`, their micro-batch counts), 0.0 elsewhere, where FSDP syncs once a step under
    torch's pipelining (ZeRO-3, pp > 1, MemoryParams.zero3_sync_last_micro_batch_only); None otherwise."""
    if layout.zero < 3 or layout.pp < 2 or not params.memory.zero3_sync_last_micro_batch_only or not replica_sizes:
        return None
    ends = np.cumsum(replica_sizes)
    first, last = np.zeros(int(ends[-1])), np.zeros(int(ends[-1]))
    first[ends - np.asarray(replica_sizes)] = 1.0
    last[ends - 1] = 1.0
    return first, last


def _fsdp_hidden(comm: Any) -> tuple[float, float]:
    """The hidden shares of FSDP's per-layer gathers and reduce-scatters (comm.fsdp_*_overlap_fraction;
    None: comm.dp_overlap_fraction), which what rides with them (FSDP's CPU offload copies) shares."""
    gather = comm.dp_overlap_fraction if comm.fsdp_gather_overlap_fraction is None else comm.fsdp_gather_overlap_fraction
    reduce = comm.dp_overlap_fraction if comm.fsdp_reduce_overlap_fraction is None else comm.fsdp_reduce_overlap_fraction
    return gather, reduce


def _ulysses_comm(layer: LayerShape, layout: TrainLayout, tokens_local: np.ndarray, group: Sequence[int],
                  comm: _Comm, params: TrainParams) -> tuple[np.ndarray, np.ndarray]:
    """DeepSpeed-Ulysses (arXiv 2309.14509; verl ulysses_sequence_parallel_size = cp): forward
    all-to-alls of q, k, v (sequence-sharded -> head-sharded) and of the attention output back, each
    of the device's local tensor; backward the same four for the gradients."""
    a = params.compute.activation_bytes
    q = tokens_local * layer.attn_heads * layer.qk_head_dim / layout.tp * a
    k = tokens_local * layer.kv_heads * layer.qk_head_dim / layout.tp * a
    v = tokens_local * layer.kv_heads * layer.v_head_dim / layout.tp * a
    out = tokens_local * layer.attn_heads * layer.v_head_dim / layout.tp * a
    t = sum(comm.many("all_to_all", group, x) for x in (q, k, v, out)) * (1 - params.comm.ulysses_overlap_fraction)
    return t, t.copy()


@dataclass
class _StageArrays:
    fwd: np.ndarray            # (V, M) total forward op time
    fwd_comm: np.ndarray       # (V, M) exposed comm inside the forward ops
    # None in a forward-only pass (forward_cost reads fwd and fwd_comm alone):
    bwd: np.ndarray | None     # (V, M) total backward op time (recompute included)
    compute: np.ndarray | None  # (V, M) compute part of fwd + bwd
    comm: dict[str, np.ndarray] | None  # kind -> (V, M) exposed comm inside ops


@lru_cache(maxsize=256)
def _chunk_shapes(model: Any, layout: TrainLayout
                  ) -> tuple[tuple[LayerShape, ...], tuple[tuple[tuple[tuple[int, str], int], ...], ...]]:
    """The distinct layer shapes of `model` and, per virtual stage, ((shape index, recompute mode), layer
    count) in first-seen order: a stage's layers of one shape and mode cost the same, so each is computed
    once. The mode is the layout's recompute, but "none" for the layers past the first recompute_num_layers
    of a chunk under full block recompute (TrainLayout.recomputed_layers)."""
    shapes = layer_shapes(model)
    distinct: dict[int, int] = {}
    unique: list[LayerShape] = []
    out = []
    for chunk in layout_stage_layers(int(model.num_layers), layout):
        counts: dict[tuple[int, str], int] = {}
        recomputed = layout.recomputed_layers(len(chunk)) if layout.recompute == "full" else len(chunk)
        for k, i in enumerate(chunk):
            lay = shapes[i]
            u = distinct.get(id(lay))
            if u is None:
                u = next((k for k, other in enumerate(unique) if other == lay), None)
                if u is None:
                    unique.append(lay)
                    u = len(unique) - 1
                distinct[id(lay)] = u
            mode = layout.recompute if k < recomputed else "none"
            counts[(u, mode)] = counts.get((u, mode), 0) + 1
        out.append(tuple(counts.items()))
    return tuple(unique), tuple(out)


def _stage_arrays(model: Any, layout: TrainLayout, tokens: np.ndarray, sq: np.ndarray, groups: _Groups,
                  comm: _Comm, rates: DeviceRates, params: TrainParams, forward_only: bool = False,
                  head_tokens: np.ndarray | None = None, replica_sizes: Sequence[int] | None = None,
                  memo: dict[tuple, Any] | None = None) -> _StageArrays:
    """Forward / backward op times of every virtual stage for the micro-batches (tokens, sq).
    ``memo``: the layers' compute times kept across calls (_memo's LAYER_TIMES_MEMO; None: this call's).
    ``forward_only``: the forward rows alone (fwd, fwd_comm; the same floats as in a full pass).
    ``head_tokens``: the tokens the output layer projects in each micro-batch (None: all of them).
    ``replica_sizes``: the micro-batches of each data-parallel replica, in the order (tokens, sq)
    concatenates them (where FSDP syncs once a step: _pipelined_fsdp_ends)."""
    pp, vpp = layout.pp, layout.vpp
    once = _pipelined_fsdp_ends(layout, params, replica_sizes)
    unique, chunk_counts = _chunk_shapes(model, _shape_layout(layout))
    tokens_local = tokens / layout.cp
    sq_local = sq / layout.cp
    gated = bool(getattr(model, "gated_ffn", True))
    n_v, n_m = pp * vpp, tokens.size
    # Rows of the stacked per-stage state: fwd, fwd comm, then bwd, compute and comm by kind.
    n_rows = 2 if forward_only else 4 + len(COMM_KINDS)
    out = np.zeros((n_rows, n_v, n_m))
    times: dict[int, LayerTimes] = {}
    # Per (shape, stage): one layer's addends (a1, a2) — each layer adds a1 then a2 to the state,
    # in the order of the per-layer loop this replaces — and the partial sums after k layers.
    adds: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, list[np.ndarray]]] = {}
    same_comm: dict[tuple, tuple[np.ndarray, np.ndarray, list[np.ndarray]]] = {}
    stage_keys: dict[int, tuple] = {}
    for j in range(n_v):
        stage = j % pp
        state: np.ndarray | None = None
        for (u, mode), count in chunk_counts[j]:
            add = adds.get((u, mode, stage))
            if add is None:
                # Stages whose groups see the same network (equal group signatures: every collective
                # costs the same) share the addends; the layer's cost depends on the stage only so.
                key = stage_keys.get(stage)
                if key is None:
                    key = stage_keys[stage] = tuple(comm.group_key(g[stage]) for g in
                                                    (groups.tp, groups.cp, groups.ep, groups.dp, groups.edp,
                                                     groups.etp or groups.tp, groups.tp_ep or groups.ep))
                fingerprint = (u, mode, key)
                add = same_comm.get(fingerprint)
                if add is not None:
                    adds[(u, mode, stage)] = add
            if add is None:
                lay = unique[u]
                t = times.get(u)
                if t is None:
                    t = times[u] = _layer_times(model, lay, gated, tokens_local, sq_local, layout, rates, params,
                                                not forward_only, memo)
                blocks = _tp_blocks(lay) if params.comm.tp_userbuffers and layout.sp and layout.tp > 1 else None
                userbuffers = None if not blocks else (blocks, gemm_times(
                    lay, tokens_local, tp=layout.tp, ep=layout.ep, rates=rates, params=params.compute,
                    etp=layout.expert_tp))
                lc = _layer_cost(lay, t, model, layout, tokens_local, groups, stage, comm, params, userbuffers, once)
                a1, a2 = _layer_addends(lc, mode, n_rows, n_m)
                add = adds[(u, mode, stage)] = same_comm[fingerprint] = (a1, a2, [np.zeros((n_rows, n_m))])
            a1, a2, partial = add
            if state is None:  # the chunk's first shape: reuse the partial sums over k layers
                while len(partial) <= count:
                    partial.append((partial[-1] + a1) + a2)
                state = partial[count]
            else:
                for _ in range(count):
                    state = (state + a1) + a2
        if state is not None:
            out[:, j] = state
    # Output layer and loss on the last virtual stage.
    head_local = tokens_local if head_tokens is None else head_tokens / layout.cp
    lf, lb = logits_times(int(model.hidden), int(model.head_outputs), head_local, tp=layout.tp, rates=rates,
                          params=params.compute, head_trains=not getattr(model, "adapter_rank", 0))
    fwd = out[0]
    fwd[-1] += lf
    if forward_only:
        return _StageArrays(fwd, out[1], None, None, None)
    bwd, compute = out[2], out[3]
    bwd[-1] += lb
    compute[-1] += lf + lb
    return _StageArrays(fwd, out[1], bwd, compute, {kind: out[r] for r, kind in enumerate(COMM_KINDS, start=4)})


def _layer_times(model: Any, lay: Any, gated: bool, tokens_local: np.ndarray, sq_local: np.ndarray,
                 layout: TrainLayout, rates: DeviceRates, params: TrainParams, backward: bool,
                 memo: dict[tuple, Any] | None) -> LayerTimes:
    """layer_times of one layer shape on the layout's micro-batches, kept in ``memo`` (None: not kept)
    by all it reads: a planner's candidates that differ in what the layer's compute does not see (pp,
    ZeRO, recompute, dp of the same micro-batches) share them. Do not modify the returned arrays."""
    key = None
    if memo is not None:
        key = (lay, int(model.hidden), int(model.ffn_hidden), gated, tokens_local.tobytes(), sq_local.tobytes(),
               layout.tp, layout.sp, layout.ep, layout.expert_tp, rates, params.compute, backward)
        hit = memo.get(key)
        if hit is not None:
            return hit
    out = layer_times(lay, int(model.hidden), int(model.ffn_hidden), gated, tokens_local, sq_local, tp=layout.tp,
                      sp=layout.sp, ep=layout.ep, rates=rates, params=params.compute, etp=layout.expert_tp,
                      backward=backward)
    if key is not None:
        memo[key] = out
    return out


def _layer_addends(lc: _LayerCost, recompute: str, n_rows: int, n_m: int) -> tuple[np.ndarray, np.ndarray]:
    """One layer's addends to the stacked stage state (rows: fwd, fwd comm, then, when ``n_rows``
    holds them, bwd, compute and comm by kind): a1, then a2 (the backward comm by kind)."""
    full = recompute == "full"
    f_comm = sum(lc.fwd_comm.values()) if lc.fwd_comm else 0.0
    a1 = np.zeros((n_rows, n_m))
    a2 = np.zeros((n_rows, n_m))
    a1[0] = lc.fwd_compute + f_comm
    a1[1] = f_comm
    if n_rows == 2:
        return a1, a2
    b_comm = sum(lc.bwd_comm.values()) if lc.bwd_comm else 0.0
    re_compute = {"full": lc.fwd_compute, "selective": lc.attn_fwd}.get(recompute, 0.0)
    # Full recompute redoes the forward's collectives in backward, except the ZeRO-3
    # parameter gather: the backward's own gather serves the recomputation. Selective recompute
    # redoes the core attention, and with it a ring context-parallel K/V exchange (an audit).
    redone = {kind for kind in lc.fwd_comm if kind != "dp"} if full else \
        ({"cp"} & set(lc.fwd_comm) if recompute == "selective" else set())
    re_comm = sum(lc.fwd_comm[kind] for kind in redone) if redone else 0.0
    a1[2] = lc.bwd_compute + b_comm + re_compute + re_comm
    a1[3] = lc.fwd_compute + lc.bwd_compute + re_compute
    for r, kind in enumerate(COMM_KINDS, start=4):
        if kind in lc.fwd_comm:
            a1[r] = lc.fwd_comm[kind] * (2.0 if kind in redone else 1.0)
        if kind in lc.bwd_comm:
            a2[r] = lc.bwd_comm[kind]
    return a1, a2


def _p2p_times(model: Any, layout: TrainLayout, tokens: np.ndarray, groups: _Groups, comm: _Comm,
               params: TrainParams) -> np.ndarray:
    """(V - 1, M) transfer time across each virtual-stage boundary (activations; gradients alike)."""
    n_v = layout.pp * layout.vpp
    if n_v < 2:
        return np.zeros((0, tokens.size))
    act = tokens / layout.cp * int(model.hidden) * params.compute.activation_bytes
    out = np.zeros((n_v - 1, tokens.size))
    # With sequence parallelism each TP rank already holds its s / tp slice of the activation: it sends
    # that slice and its peer of the next stage takes it as it is (no gather). Without SP, Megatron's
    # scatter / gather (arXiv 2104.04473 sec. 4.1) sends 1 / tp of the replicated activation and
    # all-gathers it on the next stage's NVLink.
    sliced = layout.sp   # (sequence parallelism needs tp > 1)
    gather = params.comm.pp_scatter_gather and layout.tp > 1 and not sliced
    per_stage: dict[int, np.ndarray] = {}
    per_key: dict[tuple, np.ndarray] = {}   # boundaries whose groups see the same network share it
    for j in range(n_v - 1):
        s = j % layout.pp
        if s not in per_stage:
            pair, next_tp = list(groups.p2p[s]), groups.tp[(s + 1) % layout.pp]
            key = (comm.group_key(pair, "p2p"), comm.group_key(next_tp) if gather else None)
            t = per_key.get(key)
            if t is None:
                if gather:
                    t = comm.many("p2p", pair, act / layout.tp) + comm.many("all_gather", next_tp, act)
                else:
                    t = comm.many("p2p", pair, act / layout.tp if sliced else act)
                per_key[key] = t
            per_stage[s] = t
        out[j] = per_stage[s]
    return out


def _with_blocking_sends(fwd: np.ndarray, bwd: np.ndarray, p2p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Op times when each op's outgoing send blocks its device until the data has arrived: the
    forward of virtual stage j sends across boundary j, the backward across boundary j - 1. The
    receiver then gets the input when the sender's op (send included) ends, with no further delay."""
    b = bwd.copy()
    if p2p.size:
        b[1:] += p2p
    return _with_blocking_forward_sends(fwd, p2p), b


def _with_blocking_forward_sends(fwd: np.ndarray, p2p: np.ndarray) -> np.ndarray:
    """The forward op times of `_with_blocking_sends`."""
    f = fwd.copy()
    if p2p.size:
        f[:-1] += p2p
    return f


def _stage_params(model: Any, layout: TrainLayout) -> list[tuple[float, float]]:
    """(dense, expert) parameters one device of each pipeline stage trains: all it holds, or with
    LoRA its adapters (the frozen base, embedding and head take no gradient, sync or optimizer)."""
    return list(_stage_params_cached(model, _shape_layout(layout)))


@lru_cache(maxsize=256)
def _stage_params_cached(model: Any, layout: TrainLayout) -> tuple[tuple[float, float], ...]:
    pp, vpp, tp, ep, etp = layout.pp, layout.vpp, layout.tp, layout.ep, layout.expert_tp
    shapes = layer_shapes(model)
    chunks = layout_stage_layers(int(model.num_layers), layout)
    outer = _stage_outer_params(model, layout)
    out = []
    frozen_outer = bool(getattr(model, "adapter_rank", 0))   # LoRA freezes the embedding and head
    for s in range(pp):
        dense = expert = 0.0
        for c in range(vpp):
            for i in chunks[c * pp + s]:
                dense += shapes[i].trainable_dense_params / tp
                if shapes[i].moe:
                    expert += shapes[i].trainable_expert_params / (ep * etp)
        emb, head = (0.0, 0.0) if frozen_outer else outer[s]   # added one after the other, as always
        out.append((dense + emb + head, expert))
    return tuple(out)


@lru_cache(maxsize=256)
def _stage_outer_params(model: Any, layout: TrainLayout) -> tuple[tuple[float, float], ...]:
    """Per pipeline stage, the parameters one device holds outside the transformer layers, as (input
    embedding, output head) / tp: the embedding on stage 0, the head on the last (once when pp = 1 and
    tied). ZeRO-3 gathers and reduces them apart from the per-layer collectives (FSDP's root unit)."""
    emb, head = embedding_params(model)
    pp = layout.pp
    return tuple((emb / layout.tp if s == 0 else 0.0,
                  head / layout.tp if s == pp - 1 and (pp > 1 or not model.tied_head) else 0.0)
                 for s in range(pp))


def rates_for(spec: Any, params: TrainParams) -> DeviceRates:
    """The compute rates a device of ``spec`` gives the trainer under ``params`` (its dtype's peak, the
    GEMM plateau, achievable HBM, the GEMM launch, the flash scale)."""
    launch, head, router = params.compute.gemm_launch_s, params.compute.head_dtype, params.compute.moe_router_dtype
    peak = spec.peak(params.compute.dtype, field=COMPUTE_DTYPE_FIELD)
    return DeviceRates(peak_flops=peak,
                       gemm_efficiency=spec.gemm_efficiency,
                       hbm_Bps=spec.hbm_bw_Bps * spec.hbm_efficiency,
                       launch_s=spec.launch_overhead_s if launch is None else launch,
                       flash_scale=spec.flash_efficiency_scale,
                       head_peak_flops=None if head is None else spec.peak(head, field=HEAD_DTYPE_FIELD),
                       head_elem_bytes=None if head is None else dtype_bytes(head, HEAD_DTYPE_FIELD),
                       router=None if router is None else router_rates(
                           router, spec.peak(router, field=ROUTER_DTYPE_FIELD), peak, params.compute.activation_bytes))


def _setup(model: Any, layout: TrainLayout, topology: Any, ranks: Sequence[int] | None, sequences: Any,
           source: str | None) -> tuple[TrainLayout, list[int], np.ndarray]:
    if ranks is None:
        ranks = list(range(topology.num_devices))
    elif isinstance(ranks, (list, tuple, range)) and set(map(type, ranks)) <= {int}:
        ranks = list(ranks)   # already Python ints (every caller's pools): no per-rank conversion
    else:
        ranks = [int(r) for r in ranks]
    if len(set(ranks)) != len(ranks):
        raise RlsimError("ranks repeat a device", source=source, field="ranks", fix="list each device once")
    layout = _resolved(layout, len(ranks), model, source)
    return layout, ranks, _sequences(sequences, source)


@lru_cache(maxsize=256)
def _resolved(layout: TrainLayout, n_devices: int, model: Any, source: str | None) -> TrainLayout:
    """``layout.resolve`` then ``check_model``: pure checks of frozen values, kept by value (an
    error is raised again on every call: lru_cache keeps only returns)."""
    layout = layout.resolve(n_devices, source)
    layout.check_model(model, source)
    return layout


@lru_cache(maxsize=256)
def _shape_layout(layout: TrainLayout) -> TrainLayout:
    """The layout less what does not shape the stages (dp, micro-batch): the key of the per-shape caches."""
    return dataclasses.replace(layout, dp=None, micro_batch=1)


@lru_cache(maxsize=256)
def _single_micro_batch(layout: TrainLayout) -> TrainLayout:
    return dataclasses.replace(layout, micro_batch=1)


def _check_packing(packing: str, source: str | None) -> None:
    if packing not in ("padded", "packed"):
        raise RlsimError(f"packing must be padded or packed, got {packing!r}", source=source, field="packing",
                         fix="use padded or packed")


# ---- the public queries --------------------------------------------------------------------------------
def train_step_cost(model: Any, layout: TrainLayout, topology: Any, ranks: Sequence[int] | None = None,
                    sequences: Any = None, *, packing: Literal["padded", "packed"] = "padded",
                    params: TrainParams | None = None, collectives: Any | None = None,
                    source: str | None = None, scored: Any = None) -> TrainStepCost:
    """Cost of one optimizer step of `model` over `sequences` (lengths, the whole global batch) on
    `ranks` of `topology` (canonical order: tp fastest, then cp, dp, pp — or layout.order).
    `scored`: each sequence's tokens the output layer projects (None: all; a fused head that scores
    the response alone: TRL's).

    Costed on the devices of `ranks`: one kind, or of mixed kinds the slowest (`slowest_device`),
    memory checked against the smallest HBM. `collectives`: the CollectiveModel the collectives go
    through, which also keeps this function's results (keyed by value); None builds one for this
    call (pass one to share its caches across calls).
    Raises RlsimError when the layout does not divide the model or does not fit in memory."""
    return _memoized("train", _train_step_cost, model, layout, topology, ranks, sequences, packing, params,
                     collectives, source, scored)


def _memoized(kind: str, compute: Any, model: Any, layout: TrainLayout, topology: Any, ranks: Sequence[int] | None,
              sequences: Any, packing: str, params: TrainParams | None, collectives: Any, source: str | None,
              scored: Any = None) -> Any:
    """The query's result from the CollectiveModel's cache (keyed by value), else ``compute``d and kept."""
    params = params or TrainParams()
    _check_packing(packing, source)
    layout, ranks, seqs = _setup(model, layout, topology, ranks, sequences, source)
    heads = None if scored is None else _scored_tokens(scored, seqs, source)
    collectives = _collective_model(topology, collectives)
    memo = _memo(collectives, topology)
    key = (kind, model, layout, tuple(ranks), seqs.tobytes(), packing, params,
           None if heads is None else heads.tobytes())
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        hit = compute(model, layout, topology, ranks, seqs, packing, params, collectives, source, heads)
        if memo is not None:
            memo[key] = hit
    return hit


def _scored_tokens(scored: Any, seqs: np.ndarray, source: str | None) -> np.ndarray:
    """Each sequence's tokens the output layer projects (``scored``): as many as the sequences, each
    within its sequence; RlsimError otherwise."""
    heads = np.asarray(scored, dtype=np.int64).ravel()
    if heads.shape != seqs.shape or (heads < 0).any() or (heads > seqs).any():
        raise RlsimError(f"scored tokens ({heads.size}) must give each of the {seqs.size} sequences a count within "
                         "its length", source=source, field="scored", fix="pass one count a sequence, 0..its length")
    return heads


def _pool_setup(layout: TrainLayout, topology: Any, ranks: list[int], params: TrainParams,
                collectives: Any) -> tuple[Any, DeviceRates, _Comm, _Groups]:
    """What a training or forward pass on ``ranks`` starts from: the pool's device kinds, the rates of
    its slowest device, the collectives and the layout's groups on those ranks."""
    kinds = pool_devices(topology, ranks)
    slowest = slowest_device(kinds, params.compute.dtype, dtype_field=COMPUTE_DTYPE_FIELD)
    comm, groups = _Comm(collectives), _groups(layout, tuple(ranks))
    if not getattr(topology, "replicas_alike", True):
        groups = _slowest_groups(layout, tuple(ranks), groups, comm)
    return kinds, rates_for(slowest, params), comm, groups


# The size a candidate group's collective is timed at to find the slowest (a large message: the
# links' rates, not their latencies, set the order, as they do for the layers' activations and the
# gradients). Only the order of the candidates is read from it.
PROBE_BYTES = 64 * 2**20


def _slowest_groups(layout: TrainLayout, ranks: tuple[int, ...], first: _Groups, comm: _Comm) -> _Groups:
    """``first`` (each stage's groups in its first replica, TP rank, CP rank) with each group replaced
    by the slowest of its kind in that stage, timed at PROBE_BYTES (the first among equals): a slow
    link on another replica sets the step (it waits for every replica), where the first replica's
    group priced every one. p2p: the slowest (stage s -> s + 1) pair over the stage's positions."""
    r = np.asarray(ranks, dtype=np.int64)[_positions(layout)]   # [s, d, c, t]

    def slowest(op: str, candidates: Iterable[list[int]]) -> list[int]:
        pool = {tuple(g): g for g in candidates}
        return max(pool.values(), key=lambda g: comm.one(op, g, PROBE_BYTES)) if len(pool) > 1 else next(iter(pool.values()))

    tp, cp, ep, dpg, edp, p2p, etp, tp_ep = [], [], [], [], [], [], [], []
    for s in range(layout.pp):
        folded = r[s].reshape(-1).reshape(layout.expert_dp, layout.ep, layout.expert_tp)   # as _groups folds
        ep.append(slowest("all_to_all", (folded[d, :, t].tolist() for d in range(folded.shape[0])
                                         for t in range(folded.shape[2]))))
        etp.append(slowest("all_gather", (folded[d, e, :].tolist() for d in range(folded.shape[0])
                                          for e in range(folded.shape[1]))))
        edp.append(slowest("reduce_scatter", (folded[:, e, t].tolist() for e in range(folded.shape[1])
                                              for t in range(folded.shape[2]))))
        tp_ep.append(slowest("all_gather", (folded[d].ravel().tolist() for d in range(folded.shape[0]))))
        tp.append(slowest("all_reduce", (r[s, d, c, :].tolist() for d in range(r.shape[1]) for c in range(r.shape[2]))))
        cp.append(slowest("all_gather", (r[s, d, :, t].tolist() for d in range(r.shape[1]) for t in range(r.shape[3]))))
        dpg.append(slowest("reduce_scatter", (r[s, :, :, t].ravel().tolist() for t in range(r.shape[3]))))
        nxt = (s + 1) % layout.pp
        pairs = [[int(r[s, d, c, t]), int(r[nxt, d, c, t])] for d in range(r.shape[1]) for c in range(r.shape[2])
                 for t in range(r.shape[3])]
        p2p.append(tuple(slowest("p2p", pairs)) if layout.pp > 1 else first.p2p[s])
    embedding = slowest("all_reduce", ([int(r[0, d, c, t]), int(r[-1, d, c, t])] for d in range(r.shape[1])
                                       for c in range(r.shape[2]) for t in range(r.shape[3]))) if layout.pp > 1 else []
    stats = slowest("all_reduce", (_grad_stats_group(layout, r, d, c) for d in range(r.shape[1])
                                   for c in range(r.shape[2])))
    return _Groups(tp, cp, ep, dpg, edp, p2p, first.zero_shard, first.expert_zero_shard, etp, embedding, tp_ep,
                   stats)


def _slowest_replica_memoized(arrays: _StageArrays, p2p: np.ndarray, replicas: list, layout: TrainLayout,
                              params: TrainParams, memo: dict[tuple, Any] | None
                              ) -> tuple[float, PipelineResult, slice, PipelineResult | None]:
    """_slowest_replica, kept in ``memo`` (None: not kept) by all it reads: the op and transfer times,
    the replicas' micro-batch counts, pp, vpp and whether sends block."""
    if memo is None:
        return _slowest_replica(arrays, p2p, replicas, layout, params)
    key = (layout.pp, layout.vpp, params.comm.pp_blocking_send, tuple(t.size for t, _ in replicas),
           arrays.fwd.shape, arrays.fwd.tobytes(), arrays.bwd.tobytes(), p2p.shape, p2p.tobytes())
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _slowest_replica(arrays, p2p, replicas, layout, params)
    return hit


def _slowest_replica(arrays: _StageArrays, p2p: np.ndarray, replicas: list, layout: TrainLayout,
                     params: TrainParams) -> tuple[float, PipelineResult, slice, PipelineResult | None]:
    """(makespan, pipeline, micro-batch slice, the same pipeline without p2p or None) of the slowest
    replica, the first in replica order among equals. Replicas with identical op times share one
    simulation (uniform batches: all of them); those with the same micro-batch count run side by side."""
    distinct: dict[bytes, slice] = {}
    offset = 0
    for t, _ in replicas:
        sl = slice(offset, offset + t.size)
        offset += t.size
        sig = arrays.fwd[:, sl].tobytes() + arrays.bwd[:, sl].tobytes() + p2p[:, sl].tobytes()
        distinct.setdefault(sig, sl)
    with_p2p = bool(p2p.size) and float(p2p.max()) > 0
    bare: PipelineResult | None = None
    blocking = params.comm.pp_blocking_send
    slices = list(distinct.values())
    results: dict[int, PipelineResult] = {}
    if len(slices) == 1 and with_p2p and not blocking:  # with and without transfers in one pass
        sl = slices[0]
        results[0], bare = simulate_pipelines(arrays.fwd[:, sl], arrays.bwd[:, sl], [p2p[:, sl], 0.0],
                                              pp=layout.pp, vpp=layout.vpp, layout_field=TRAIN_LAYOUT_FIELD)
    else:
        # Replicas with the same micro-batch count are simulated side by side in one pass.
        by_size: dict[int, list[int]] = {}
        for i, sl in enumerate(slices):
            by_size.setdefault(sl.stop - sl.start, []).append(i)
        for members in by_size.values():
            fs, bs, ps = [], [], []
            for i in members:
                f, b, p = arrays.fwd[:, slices[i]], arrays.bwd[:, slices[i]], p2p[:, slices[i]]
                if blocking and with_p2p:
                    f, b = _with_blocking_sends(f, b, p)
                    p = 0.0
                fs.append(f)
                bs.append(b)
                ps.append(p)
            for i, res in zip(members, simulate_pipelines(np.stack(fs), np.stack(bs), ps, pp=layout.pp,
                                                          vpp=layout.vpp, layout_field=TRAIN_LAYOUT_FIELD),
                              strict=True):
                results[i] = res
    worst: tuple[float, PipelineResult, slice] | None = None
    for i, sl in enumerate(slices):  # first slowest in replica order
        res = results[i]
        if worst is None or res.makespan_s > worst[0]:
            worst = (res.makespan_s, res, sl)
    assert worst is not None
    makespan, pipe, sl = worst
    return makespan, pipe, sl, bare


def train_step_memory(model: Any, layout: TrainLayout, topology: Any, ranks: Sequence[int] | None = None,
                      sequences: Any = None, *, packing: Literal["padded", "packed"] = "padded",
                      params: TrainParams | None = None, source: str | None = None) -> MemoryBreakdown:
    """The memory check train_step_cost makes before it times anything (the same arguments): the
    device-resident bytes of the most loaded stage at the largest micro-batch of ``sequences``; the
    same RlsimError where the layout does not divide the model or does not fit (params.check_memory).
    A caller that refuses layouts before timing them (a re-plan's LlmCosts.accept_train_layout) asks this."""
    params = params or TrainParams()
    _check_packing(packing, source)
    layout, ranks, seqs = _setup(model, layout, topology, ranks, sequences, source)
    return _checked_memory(model, layout, pool_devices(topology, ranks), seqs, packing, params, source)[3]


def _checked_memory(model: Any, layout: TrainLayout, kinds: Sequence[Any], seqs: np.ndarray, packing: str,
                    params: TrainParams, source: str | None, scored: np.ndarray | None = None
                    ) -> tuple[list, list | None, MemoryBreakdown, MemoryBreakdown]:
    """(the replicas' micro-batches, their scored tokens, the states, what stays on the device) of a
    step, its memory checked (params.check_memory): what train_step_cost does before timing."""
    replicas, heads = _micro_batch_parts(seqs, layout, packing, layout.max_tokens_per_micro_batch, params,
                                         source=source, scored=scored)
    # Memory on the most loaded stage, at the largest micro-batch, on the pool's smallest HBM.
    longest_tokens = max(float(t.max()) for t, _ in replicas)
    m_max = max(t.size for t, _ in replicas)
    mem_layout = layout if layout.max_tokens_per_micro_batch is None else _single_micro_batch(layout)
    # a token budget's micro-batch is one pack of sequences: each token attends within its own
    # (sum of squared lengths / tokens, at most; its token count read as one 16k sequence: 10x the scores)
    context = None if layout.max_tokens_per_micro_batch is None else \
        max(float((q / np.maximum(t, 1)).max()) for t, q in replicas)
    states = memory_per_device(model, mem_layout, longest_tokens / mem_layout.micro_batch,
                               min(k.hbm_bytes for k in kinds),
                               params=params.memory, flash_attention=params.compute.flash_attention,
                               micro_batches=m_max, context_len=context)
    memory = device_resident(states, params)
    if params.check_memory:
        check_fits(memory, what=f"{model.name} with {_layout_text(layout)}", source=source, layout=layout,
                   field=TRAIN_LAYOUT_FIELD)
    return replicas, heads, states, memory


def _train_step_cost(model: Any, layout: TrainLayout, topology: Any, ranks: list[int], seqs: np.ndarray,
                     packing: str, params: TrainParams, collectives: Any, source: str | None,
                     scored: np.ndarray | None = None) -> TrainStepCost:
    kinds, rates, comm, groups = _pool_setup(layout, topology, ranks, params, collectives)
    replicas, heads, states, memory = _checked_memory(model, layout, kinds, seqs, packing, params, source, scored)
    # All replicas' micro-batches in one vectorized pass.
    tokens = np.concatenate([t for t, _ in replicas])
    sq = np.concatenate([q for _, q in replicas])
    arrays = _stage_arrays(model, layout, tokens, sq, groups, comm, rates, params,
                           head_tokens=None if heads is None else np.concatenate(heads),
                           replica_sizes=[t.size for t, _ in replicas],
                           memo=_memo(collectives, topology, LAYER_TIMES_MEMO))
    p2p = _p2p_times(model, layout, tokens, groups, comm, params)
    # Simulate each replica's pipeline; the slowest sets the step (they meet at the gradient sync).
    makespan, pipe, sl, bare = _slowest_replica_memoized(arrays, p2p, replicas, layout, params,
                                                         _memo(collectives, topology, PIPELINES_MEMO))
    pp_exposed = 0.0
    if p2p.size and float(p2p[:, sl].max()) > 0:
        if bare is None:
            bare = simulate_pipeline(arrays.fwd[:, sl], arrays.bwd[:, sl], 0.0, pp=layout.pp, vpp=layout.vpp,
                                     layout_field=TRAIN_LAYOUT_FIELD)
        pp_exposed = max(0.0, makespan - bare.makespan_s)
    # Gradient sync after each stage's last backward, then the optimizer.
    windows = _chunk_windows(pipe, arrays, layout, sl) if params.comm.dp_overlap_window == "last-micro-batch" else None
    dp_s, opt_s, tail, waits = _dp_and_optimizer(model, layout, groups, comm, rates, params, pipe, windows,
                                                 micro_batches=sl.stop - sl.start)
    # per optimizer step only under offload.scope optimizer_step; "update" is paid once per training
    # phase by its caller (rl/llm_costs.py update_offload_s)
    offload_s = offload_time_s(states, offload_Bps(topology, ranks, params), params) \
        if params.offload.any and params.offload.scope == "optimizer_step" else 0.0
    if params.offload.fsdp_cpu_offload:   # the copies per micro-batch of the slowest replica, the host's step
        copies, host_step = fsdp_cpu_offload_s(states, layout, sl.stop - sl.start, offload_Bps(topology, ranks, params),
                                               params)
        offload_s += copies + host_step
    step = max([makespan] + [end + dp + opt for end, dp, opt in tail]) + offload_s
    dp_exposed = max([0.0] + [end + dp - makespan for end, dp, _ in tail])
    # Busiest stage: its compute and in-op comm.
    busy = np.array(pipe.busy_s)
    s_star = int(busy.argmax())
    virt = [c * layout.pp + s_star for c in range(layout.vpp)]
    compute_s = float(arrays.compute[virt][:, sl].sum())
    exposed = {k: float(arrays.comm[k][virt][:, sl].sum()) for k in COMM_KINDS}
    exposed["pp"] += pp_exposed
    exposed["dp"] += dp_exposed
    # FLOPs: model FLOPs (PaLM 6N + attention, formulas.md) and the recomputed forward on top.
    lengths = seqs.astype(float)
    model_flops = _model_flops(model, lengths)
    hardware_flops = model_flops + _recompute_flops(model, layout, lengths)
    n_dev = layout.devices
    peak = _mean_peak(topology, ranks, params, rates.peak_flops)
    return TrainStepCost(
        step_time_s=step, pipeline_s=makespan, compute_s=compute_s, comm_exposed_s=exposed,
        bubble_fraction=pipe.bubble_fraction, bubble_s=max(0.0, makespan - float(busy.max())),
        optimizer_s=max(o for _, _, o in tail), tflops_per_device=hardware_flops / (step * n_dev) / 1e12,
        mfu=model_flops / (step * n_dev * peak), model_flops=model_flops, hardware_flops=hardware_flops,
        tokens=int(seqs.sum()), devices=n_dev, layout=layout, memory=memory, pipeline=pipe,
        stage_tail_s=tuple(tail), stage_wait_s=tuple((wait, joint) for wait, joint in waits), offload_s=offload_s)


def offload_time_s(memory: MemoryBreakdown, host_Bps: float, params: TrainParams,
                   forward_only: bool = False) -> float:
    """Per-phase offload (train_params.offload): what is offloaded is reloaded before the phase and
    offloaded after it, 2 x its bytes over the slowest host link of the pool at `host_Bps`
    (offload_Bps; with `pageable`, each way at the slower of the link and the host's pageable
    rate). A forward-only pass moves the weights only."""
    o = params.offload
    nbytes = memory.weights_bytes if o.params else 0.0
    host_step_s = 0.0
    if not forward_only:
        nbytes += memory.gradients_bytes if o.grads else 0.0
        if hybrid_optimizer(params):
            host_step_s = hybrid_optimizer_step_s(memory, host_Bps, params)
        elif o.optimizer:
            nbytes += memory.optimizer_bytes * o.optimizer_fraction
    if nbytes <= 0:
        return host_step_s
    if o.pageable:   # through pageable memory: out and back in at the host's rates where slower
        return host_step_s + nbytes / min(host_Bps, o.pageable_offload_Bps) + nbytes / min(host_Bps, o.pageable_onload_Bps)
    return host_step_s + 2.0 * nbytes / host_Bps


def hybrid_optimizer(params: TrainParams) -> bool:
    """Megatron-Core's optimizer_cpu_offload (offload.optimizer with scope optimizer_step): the
    offloaded share of the optimizer lives on the host and steps there (params.HOST_ADAM_PARAMS_PER_S)."""
    return params.offload.optimizer and params.offload.scope == "optimizer_step"


def hybrid_optimizer_step_s(memory: MemoryBreakdown, host_Bps: float, params: TrainParams) -> float:
    """One optimizer step of Megatron-Core's HybridDeviceOptimizer on the offloaded share of the
    device's optimizer parameters (memory.optimizer_bytes / optimizer_bytes_per_param of them): their
    fp32 gradients to pinned host memory, the host's AdamW, their fp32 parameters back, one after
    another (overlap_cpu_optimizer_d2h_h2d off, Megatron-Core's default)."""
    o = params.offload
    per_param = params.memory.optimizer_bytes_per_param
    if per_param <= 0:
        return 0.0
    offloaded = memory.optimizer_bytes / per_param * o.optimizer_fraction
    return offloaded * (o.host_step_bytes_per_param / host_Bps + 1.0 / o.host_adam_params_per_s)


def device_resident(memory: MemoryBreakdown, params: TrainParams) -> MemoryBreakdown:
    """What a training step holds on the device: under Megatron-Core's optimizer_cpu_offload the
    offloaded share of the optimizer state never comes back (hybrid_optimizer); under FSDP's CPU
    offload no sharded state is on the device, only the gathered working set."""
    if params.offload.fsdp_cpu_offload:
        return dataclasses.replace(memory, weights_bytes=0.0, gradients_bytes=0.0, optimizer_bytes=0.0)
    if not hybrid_optimizer(params):
        return memory
    return dataclasses.replace(memory, optimizer_bytes=memory.optimizer_bytes * (1.0 - params.offload.optimizer_fraction))


def fsdp_cpu_offload_s(states: MemoryBreakdown, layout: TrainLayout, micro_batches: int, host_Bps: float,
                       params: TrainParams, forward_only: bool = False) -> tuple[float, float]:
    """(exposed host copies, host optimizer step) of FSDP's CPU offload (offload.fsdp_cpu_offload) on
    one device: per micro-batch each all-gather's shard in at host_param_bytes_per_param (the forward's,
    and the backward's unless the layout keeps layers gathered: reshards_after_forward) and each reduced gradient shard out
    (under torch's pipelining, zero3_sync_last_micro_batch_only at pp > 1: as _fsdp_micro_batch_comm counts),
    hidden by the gathers' and reduce-scatters' fractions (they ride the same streams, per layer: the
    sum over layers is the shard's); then AdamW on the CPU over the trained shard. `states`: the
    ZeRO-3 memory breakdown before device_resident (its weights and gradients are the shards)."""
    o, c, m = params.offload, params.comm, params.memory
    if not o.fsdp_cpu_offload:
        return 0.0, 0.0
    if layout.zero < 3:
        raise RlsimError("offload.fsdp_cpu_offload is FSDP's (ZeRO-3) CPU offload", field="workload.train_params.offload"
                         ".fsdp_cpu_offload", fix="set workload.train_layout.zero: 3, or remove it")
    held = states.weights_bytes / m.resident_bytes_per_param   # the shard's parameters (its own dtype)
    trained = states.gradients_bytes / m.grad_bytes_per_param if m.grad_bytes_per_param else 0.0
    g_frac, r_frac = _fsdp_hidden(c)
    reshard = m.reshards_after_forward(layout.pp)
    gathers = 1 if forward_only or not reshard else 2
    copy_in = gathers * held * o.host_param_bytes_per_param / host_Bps * (1 - g_frac)
    copy_out = 0.0 if forward_only else trained * c.grad_reduce_bytes_per_param / host_Bps * (1 - r_frac)
    host_step = 0.0 if forward_only else trained / o.host_adam_loop_params_per_s
    if layout.pp > 1 and m.zero3_sync_last_micro_batch_only:   # torch's pipelining: _fsdp_micro_batch_comm
        return (micro_batches if reshard else 1) * copy_in + copy_out, host_step
    return micro_batches * (copy_in + copy_out), host_step


def _mean_peak(topology: Any, ranks: Sequence[int], params: TrainParams, pacing_peak: float) -> float:
    """The mean peak of the step's devices, MFU's denominator per device: on mixed kinds each
    device's own (as a run's MFU and roofline count them), not the pacing kind's for all (which put
    the plan's MFU of an H100 + H20 cluster at 0.73 where the run said 0.10)."""
    if len(topology.distinct_specs(ranks)) < 2:
        return pacing_peak
    peaks: dict[int, float] = {}   # by spec: one peak() a kind
    total = 0.0
    for rank in ranks:
        spec = topology.device_spec(rank)
        if id(spec) not in peaks:
            peaks[id(spec)] = spec.peak(params.compute.dtype, field=COMPUTE_DTYPE_FIELD)
        total += peaks[id(spec)]
    return total / len(ranks)


def offload_Bps(topology: Any, ranks: Sequence[int], params: TrainParams) -> float:
    """The slowest host link of the ranks, at train_params.offload.host_link_efficiency where given."""
    return float(topology.host_copy_Bps(ranks, params.offload.host_link_efficiency).min())


def _per_sequence_flops(per_token: Any, lengths: np.ndarray, model: Any) -> float:
    """Sum over sequences of per_token(s) x s, for per-token FLOPs a + b x (the model's windowed_sq
    / s: s on full-attention layers, PaLM's a + b s)."""
    a = float(per_token(0.0))
    b = float(per_token(1.0)) - a
    return a * float(lengths.sum()) + b * float(np.sum(model.windowed_sq(lengths)))


def _model_flops(model: Any, lengths: np.ndarray) -> float:
    return _per_sequence_flops(model.train_flops_per_token, lengths, model)


def _recompute_flops(model: Any, layout: TrainLayout, lengths: np.ndarray) -> float:
    """Recomputed forward FLOPs: full = the recomputed layers' forward (every layer under uniform, the
    first recompute_num_layers of each model chunk under block); selective = the attention core."""
    if layout.recompute == "none":
        return 0.0
    block = layout.recompute_num_layers if layout.recompute_method == "block" else None
    chunks = layout_stage_layers(int(model.num_layers), layout) if block is not None else None
    matmul, attn_per_sq = _recompute_coefficients(model, None if chunks is None else
                                                  tuple(i for chunk in chunks for i in chunk[:block]))
    tokens, sq = float(lengths.sum()), float(np.sum(model.windowed_sq(lengths)))
    attn = attn_per_sq * sq
    if layout.recompute == "selective":
        return attn
    return matmul * tokens + attn


@lru_cache(maxsize=256)
def _recompute_coefficients(model: Any, layers: tuple[int, ...] | None = None) -> tuple[float, float]:
    """(forward matmul FLOPs per token, attention FLOPs per squared length) summed over the layers
    (indices; None: all of them)."""
    shapes = layer_shapes(model)
    if layers is not None:
        shapes = [shapes[i] for i in layers]
    return (sum(lay.matmul_flops_per_token() + lay.ssm_flops_per_token for lay in shapes),
            sum(lay.attention_flops_per_token(1.0) for lay in shapes))


def _dp_and_optimizer(model: Any, layout: TrainLayout, groups: _Groups, comm: _Comm, rates: DeviceRates,
                      params: TrainParams, pipe: PipelineResult,
                      chunks: Sequence[Sequence[tuple[float, float, float, float]]] | None = None,
                      micro_batches: int = 1,
                      ) -> tuple[list[float], list[float], list[tuple[float, float, float]], list[list[float]]]:
    """Per stage: exposed gradient sync, optimizer step, (last backward end, sync, optimizer), and of the
    sync [the wait for the other stages, the joint collectives after it] (_add_joint_sync).
    `chunks`: per stage, per model chunk, (start, end) of its last backward and of its first
    forward (`_chunk_windows`), which bound the overlap (comm.dp_overlap_window last-micro-batch);
    None: the sync hides by dp_overlap_fraction alone. With comm.zero2_reduce_every_micro_batch under
    ZeRO-2 each of the step's first `micro_batches` - 1 backwards reduces its gradients too."""
    c = params.comm
    gb, wb = c.grad_reduce_bytes_per_param, params.memory.weight_bytes_per_param
    dp_list, opt_list, tail = [], [], []
    for s, (dense, expert) in enumerate(_stage_params(model, layout)):
        fractions = _chunk_hidden_shares(c, s, (dense + expert) / layout.vpp, len(groups.dp[s]) // max(layout.cp, 1),
                                         layout.vpp)
        f = fractions[0] if len(set(fractions)) == 1 else sum(fractions) / len(fractions)
        grads = weights = 0.0   # the gradient reduction (backward) and the weight gather (forward)
        if layout.zero >= 3:   # the per-layer gathers leave out the embedding / output head: synced here
            rest = sum(_stage_outer_params(model, _shape_layout(layout))[s])
            if rest > 0 and len(groups.dp[s]) >= 2:
                frozen = bool(getattr(model, "adapter_rank", 0))   # LoRA: the root unit takes no gradient
                grads, weights = _sharded_sync(comm, groups, s, False, 0.0 if frozen else rest * gb, rest * wb)
        else:
            for n, g, of_experts in ((dense, groups.dp[s], False), (expert, groups.edp[s], True)):
                if n <= 0 or len(g) < 2:
                    continue
                if layout.zero == 0:
                    grads += comm.one("all_reduce", g, n * gb)
                else:  # reduce-scatter gradients, all-gather updated weights (ZeRO-1/2)
                    part_grads, part_weights = _sharded_sync(comm, groups, s, of_experts, n * gb, n * wb)
                    if c.zero_grad_reduce == "all-reduce":   # DeepSpeed's buckets: every rank the whole sum
                        part_grads = comm.one("all_reduce", g, n * gb)
                    grads += part_grads
                    weights += part_weights
        end = pipe.stage_end_s(s)
        if chunks is None or f <= 0:
            dp = (grads + weights) * (1 - f)
        else:
            dp = _grad_sync_exposed(grads, fractions, chunks[s], end) + _weight_gather_exposed(weights, fractions,
                                                                                                  chunks[s])
        if layout.zero == 2 and c.zero2_reduce_every_micro_batch:   # the earlier backwards' reductions
            dp += (micro_batches - 1) * grads * (1 - f)
        if layout.zero >= 3 and c.zero3_outer_sync_every_micro_batch:   # DeepSpeed: the earlier micro-batches'
            dp += (micro_batches - 1) * (grads + weights) * (1 - f)
        if layout.zero >= 3 and c.zero3_backward_waits_last_bucket:
            dp += micro_batches * _last_bucket_wait(model, layout, groups, comm, params, s, f)
        shard = layout.zero_shard if layout.zero >= 1 else 1
        eshard = layout.expert_zero_shard if layout.zero >= 1 else 1
        opt = (dense / shard + expert / eshard) * c.optimizer_traffic_bytes_per_param / rates.hbm_Bps
        opt = 0.0 if params.offload.fsdp_cpu_offload else opt   # FSDP's CPU offload steps on the host
        dp_list.append(dp)
        opt_list.append(opt)
        tail.append((end, dp, opt))
    for s, sync_s in enumerate(_sp_grad_sync_s(model, layout, groups, comm, params)):   # each stage's TP group
        dp_list[s] += sync_s
        tail[s] = (tail[s][0], dp_list[s], tail[s][2])
    waits = [[0.0, 0.0] for _ in tail]
    _add_joint_sync(tail, dp_list, waits, _tied_embedding_sync_s(model, layout, groups, comm, params),
                    (0, layout.pp - 1))
    _add_joint_sync(tail, dp_list, waits, _grad_stats_sync_s(groups, comm, params), range(layout.pp))
    return dp_list, opt_list, tail, waits


# torch.float: the grad norm's and the zero count's all-reduced scalar (megatron-core 0.8.0 optimizer/
# clip_grads.py get_grad_norm_fp32, count_zeros_fp32: one-element fp32 tensors)
GRAD_STAT_BYTES = 4.0


def _grad_stats_sync_s(groups: _Groups, comm: _Comm, params: TrainParams) -> float:
    """The optimizer step's scalar all-reduces before it updates: gradient clipping's global norm
    (comm.grad_norm_all_reduce) and the zero count (comm.grad_zeros_all_reduce), each GRAD_STAT_BYTES over
    groups.grad_stats (megatron-core 0.8.0 optimizer/optimizer.py MixedPrecisionOptimizer.step: clip_grad_norm
    under clip_grad > 0, then count_zeros under log_num_zeros_in_grad). Latency-bound. 0 s on one rank. Not
    counted: a second norm of the expert parameters' optimizer where its group differs (0.8.0 ChainedOptimizer
    under ZeRO 0 with experts; 0.12.0 shares one all-reduce where the groups are the same), fp16's found-inf
    all-reduce (bf16 has no loss scaler)."""
    count = int(params.comm.grad_norm_all_reduce) + int(params.comm.grad_zeros_all_reduce)
    if count == 0 or len(groups.grad_stats) < 2:
        return 0.0
    return count * comm.one("all_reduce", groups.grad_stats, GRAD_STAT_BYTES)


def _tied_embedding_sync_s(model: Any, layout: TrainLayout, groups: _Groups, comm: _Comm, params: TrainParams) -> float:
    """The all-reduce of a tied word embedding's gradients between its two copies under pipeline parallelism:
    Megatron keeps the table on the first stage (the input embedding) and a copy on the last (the output
    layer), and after the step's data-parallel gradient sync all-reduces their gradients over the embedding
    group, the first and last stage's ranks of one (dp, cp, tp) coordinate (megatron-core 0.8.0
    distributed/finalize_model_grads.py finalize_model_grads: finish_grad_sync, then
    _allreduce_word_embedding_grads, torch.distributed.all_reduce of the weight's main_grad over
    get_embedding_group(), where share_embeddings_and_output_weights; parallel_state.py
    initialize_model_parallel: embedding_ranks = [ranks[0], ranks[-1]] of each pipeline group; 0.10.0 the
    same). vocab x hidden / tp elements at comm.grad_reduce_bytes_per_param (the main_grad buffer's dtype).
    0 s at pp 1 (one copy), for an untied head or a value head, and under LoRA (the table is frozen).
    _allreduce_position_embedding_grads runs with an encoder / decoder split only (pipeline_model_parallel_
    split_rank): no decoder-only model pays it."""
    if layout.pp < 2 or not model.tied_head or getattr(model, "adapter_rank", 0) or not groups.embedding:
        return 0.0
    table = _stage_outer_params(model, _shape_layout(layout))[0][0]   # vocab x hidden / tp, on the first stage
    return comm.one("all_reduce", groups.embedding, table * params.comm.grad_reduce_bytes_per_param)


def _sp_grad_sync_s(model: Any, layout: TrainLayout, groups: _Groups, comm: _Comm, params: TrainParams) -> list[float]:
    """Per stage, the all-reduce over its TP group of the gradients its TP ranks hold whole but compute from
    their own sequence slice under sequence parallelism (comm.sp_grad_all_reduce; megatron-core 0.8.0
    distributed/finalize_model_grads.py _allreduce_layernorm_grads: flattened into one buffer after
    finish_grad_sync): sp_grad_elements(model, layout, s) at grad_reduce_bytes_per_param (main_grad's dtype).
    Zeros without sequence parallelism, under LoRA (the norms and router are frozen) or with the switch off."""
    c = params.comm
    if not (layout.sp and c.sp_grad_all_reduce) or getattr(model, "adapter_rank", 0):
        return [0.0] * layout.pp
    return [comm.one("all_reduce", groups.tp[s], sp_grad_elements(model, layout, s) * c.grad_reduce_bytes_per_param)
            for s in range(layout.pp)]


def sp_grad_elements(model: Any, layout: TrainLayout, stage: int) -> float:
    """Elements of the gradients pipeline stage `stage` all-reduces over TP under sequence parallelism: its
    layers' (every model chunk's; sp_layer_grad_elements) and the final norm on the last stage."""
    per_layer, final_norm = sp_layer_grad_elements(model)
    chunks = layout_stage_layers(int(model.num_layers), layout)
    layers = [i for chunk in range(layout.vpp) for i in chunks[chunk * layout.pp + stage]]
    return sum(per_layer[i] for i in layers) + (final_norm if stage == layout.pp - 1 else 0.0)


@lru_cache(maxsize=256)
def sp_layer_grad_elements(model: Any) -> tuple[tuple[float, ...], float]:
    """(per layer, the final norm's) elements of the parameters every TP rank holds whole whose gradients
    Megatron all-reduces over TP under sequence parallelism (megatron-core 0.8.0 / 0.12.0: the parameters
    marked `sequence_parallel`, and q_layernorm / k_layernorm): a layer's norms (hidden, x 2 with LayerNorm's
    bias; a hybrid block one, Gemma's sandwich four: TE layer_norm_weight / _bias, TENorm), its q and k norms
    (head_dim each, Qwen3), MLA's latent norms (q_lora_rank, kv_lora_rank: TELayerNormColumnParallelLinear of
    the up projections), the row-parallel biases (the attention output's, a dense or shared FFN's down: TE
    Linear row mode, LayerNormMLP fc2_bias) and an MoE layer's router (hidden x experts: moe/router.py). Not
    counted: the routed experts' biases and 0.12.0's shared-expert gate (hidden x 1)."""
    h = int(model.hidden)
    norm = h * (2 if getattr(model, "layernorm", False) else 1)
    norms = 1 if getattr(model, "layer_pattern", "") else int(getattr(model, "norms_per_layer", 2))
    out = []
    for shape in layer_shapes(model):
        names = {g.name: g for g in shape.gemms}
        n = float(norms * norm)
        n += 2 * shape.qk_head_dim if "qkv" in names and getattr(model, "qk_norm", False) else 0
        n += int(getattr(model, "q_lora_rank", 0) or 0) if "q_down" in names else 0
        n += int(getattr(model, "kv_lora_rank", 0) or 0) if "kv_down" in names else 0
        n += h if "o" in names and getattr(model, "o_bias", False) else 0
        n += h * (("mlp_down" in names) + ("shared_down" in names)) if getattr(model, "mlp_bias", False) else 0
        n += names["router"].params if "router" in names else 0
        out.append(n)
    return tuple(out), float(norm)


def _add_joint_sync(tail: list[tuple[float, float, float]], dp_list: list[float], waits: list[list[float]],
                    sync_s: float, stages: Iterable[int]) -> None:
    """A collective of `stages` after their own gradient sync (`sync_s`: the tied embedding's all-reduce of
    the first and last stage, _tied_embedding_sync_s; the grad norm's of every stage, _grad_stats_sync_s) into
    their exposed sync, in place: it starts when all of them have synced (finalize_model_grads and the
    optimizer run it after finish_grad_sync, not overlapped) and the optimizer step of each follows it. Each
    stage's `dp` becomes the wait for the others and the collective on top of its own; `waits[s]` adds them
    ([idle seconds waiting, the collective's]: the timeline shows the wait idle, a dependency, not a sync)."""
    joint = sorted(set(stages))
    if sync_s <= 0 or not joint:
        return
    start = max(tail[s][0] + tail[s][1] for s in joint)
    for s in joint:
        end, before, opt = tail[s]
        waits[s][0] += start - (end + before)
        waits[s][1] += sync_s
        dp_list[s] = start + sync_s - end
        tail[s] = (end, dp_list[s], opt)


def _chunk_hidden_shares(comm: CommParams, stage: int, chunk_params: float, dp: int, vpp: int) -> list[float]:
    """Per model chunk of a pipeline stage, the share of its gradient sync (and weight gather) that can
    hide (CommParams.dp_hidden_share: one bucket of a chunk stays exposed; Megatron-Core 0.8 sizes the
    buckets by the DP size, not x CP). With Megatron-Core's buckets (dp_bucket_min_params) only the first
    stage's first chunk is bucketed: pipeline ranks after the first and chunks after the first hold one
    bucket, reduced after their backward (megatron-core 0.8.0 distributed_data_parallel.py: bucket_size
    None when get_pipeline_model_parallel_rank() > 0 or disable_bucketing, which megatron/training sets
    for model_chunk_idx > 0)."""
    share = comm.dp_hidden_share(chunk_params, dp)
    if comm.dp_bucket_min_params is None:
        return [share] * vpp
    return [share if stage == 0 and chunk == 0 else 0.0 for chunk in range(vpp)]


def _last_bucket_wait(model: Any, layout: TrainLayout, groups: _Groups, comm: _Comm, params: TrainParams,
                      stage: int, outer_hidden: float) -> float:
    """DeepSpeed ZeRO-3's wait at each backward's end for its last IPG bucket's reduce-scatter
    (comm.zero3_backward_waits_last_bucket), beyond what the collectives' own exposure counts: of the
    embedding / head in it (1 - `outer_hidden`) is counted already, of the layers' (1 - their reduce
    fraction); the rest waits. Dense gradients over the dp group (LoRA: none of the outer). The embedding /
    head join the bucket where they are reduced every micro-batch (comm.zero3_outer_sync_every_micro_batch);
    otherwise once a step apart from it (FSDP's root unit)."""
    outer_elems, layer_elems = _last_bucket_elements(model, layout, stage, params.memory.zero_reduce_bucket_params,
                                                     params.comm.zero3_outer_sync_every_micro_batch)
    total = outer_elems + layer_elems
    if total <= 0 or len(groups.dp[stage]) < 2:
        return 0.0
    full, _ = _sharded_sync(comm, groups, stage, False, total * params.comm.grad_reduce_bytes_per_param, 0.0)
    _, r_frac = _fsdp_hidden(params.comm)
    return full * (outer_elems * outer_hidden + layer_elems * r_frac) / total


def _last_bucket_elements(model: Any, layout: TrainLayout, stage: int, bucket: float,
                          with_outer: bool) -> tuple[float, float]:
    """(embedding / head, layers) elements left in the IPG bucket when `stage`'s backward ends: its gradients
    in backward order (head, layers last to first, embedding; a layer's together), the bucket reduced
    before one that would overflow `bucket` elements unless it is empty (stage3.py
    reduce_independent_p_g_buckets_and_remove_grads)."""
    shapes = layer_shapes(model)
    chunks = layout_stage_layers(int(model.num_layers), layout)
    layers = [i for c in range(layout.vpp) for i in chunks[c * layout.pp + stage]]
    frozen = bool(getattr(model, "adapter_rank", 0)) or not with_outer
    emb, head = (0.0, 0.0) if frozen else _stage_outer_params(model, _shape_layout(layout))[stage]
    pieces = [(head, True)] + [(shapes[i].trainable_dense_params / layout.tp, False) for i in reversed(layers)]
    outer = inner = 0.0
    for size, is_outer in pieces + [(emb, True)]:
        if size <= 0:
            continue
        if outer + inner > 0 and outer + inner + size > bucket:
            outer = inner = 0.0
        outer, inner = (outer + size, inner) if is_outer else (outer, inner + size)
    return outer, inner


def _grad_sync_exposed(t: float, fraction: float | Sequence[float], chunks: Sequence[tuple[float, float, float, float]],
                       stage_end: float) -> float:
    """Megatron --overlap-grad-reduce with gradient accumulation: a model chunk's gradients reduce
    in its last micro-batch's backward only (the first m - 1 run under no_sync,
    pipeline_parallel/schedules.py), bucket by bucket as they are ready: `fraction` of the chunk's
    time t / v can run from the start of that backward, the last bucket only after it ends; the
    chunks' reductions run one after another on one communicator. Exposed: what ends after the stage's
    flush. One chunk: max((1 - fraction) t, t - its last backward). ``fraction``: one for every chunk,
    or one per chunk (in the order of ``chunks``)."""
    if t <= 0:
        return 0.0
    t_c = t / len(chunks)
    cursor = -math.inf
    for (b_start, b_end, _, _), f in sorted(zip(chunks, _per_chunk(fraction, chunks), strict=True),
                                            key=lambda w: w[0][1]):
        cursor = max(max(cursor, b_start) + t_c, b_end + (1 - f) * t_c)
    return max(0.0, cursor - stage_end)


def _per_chunk(fraction: float | Sequence[float], chunks: Sequence[Any]) -> list[float]:
    """``fraction`` for each of ``chunks``: the one given for all, or the list given per chunk."""
    return [float(fraction)] * len(chunks) if isinstance(fraction, (int, float)) else list(fraction)


def _weight_gather_exposed(t: float, fraction: float | Sequence[float],
                           chunks: Sequence[tuple[float, float, float, float]]) -> float:
    """ZeRO-1/2 --overlap-param-gather: the updated weights are gathered chunk by chunk from the
    step's start, one after another, each needed by its chunk's first forward: its first bucket
    ((1 - fraction) of it) before that forward starts, all of it before it ends. Exposed: the
    largest wait. One chunk: max((1 - fraction) t, t - its first forward). ``fraction``: as
    `_grad_sync_exposed`'s."""
    if t <= 0:
        return 0.0
    t_c = t / len(chunks)
    cursor, worst = 0.0, 0.0
    for (_, _, f_start, f_end), f in sorted(zip(chunks, _per_chunk(fraction, chunks), strict=True),
                                            key=lambda w: w[0][2]):
        worst = max(worst, cursor + (1 - f) * t_c - f_start, cursor + t_c - f_end)
        cursor += t_c
    return worst


def _chunk_windows(pipe: PipelineResult, arrays: _StageArrays, layout: TrainLayout,
                   sl: slice) -> list[list[tuple[float, float, float, float]]]:
    """Per stage, per model chunk: (start, end) of its last micro-batch's backward and of its
    first micro-batch's forward in the flush (op ids: forward of virtual stage j, micro-batch i is
    j m + i, its backward n_v m + j m + i; pipeline._compiled)."""
    m, n_v = sl.stop - sl.start, layout.pp * layout.vpp
    ends = pipe.end_s
    out = []
    for s in range(layout.pp):
        row = []
        for c in range(layout.vpp):
            j = c * layout.pp + s
            b_end, f_end = float(ends[n_v * m + j * m + m - 1]), float(ends[j * m])
            row.append((b_end - float(arrays.bwd[j, sl.stop - 1]), b_end, f_end - float(arrays.fwd[j, sl.start]), f_end))
        out.append(row)
    return out


def forward_cost(model: Any, layout: TrainLayout, topology: Any, ranks: Sequence[int] | None = None,
                 sequences: Any = None, *, packing: Literal["padded", "packed"] = "padded",
                 params: TrainParams | None = None, collectives: Any | None = None,
                 source: str | None = None, scored: Any = None) -> ForwardCost:
    """Forward-only pass over `sequences` (reference / old-logprob / reward / critic values): the
    same per-layer costs, no backward, no optimizer; micro-batches stream through the pipeline.
    `scored`: as train_step_cost's."""
    return _memoized("fwd", _forward_cost, model, layout, topology, ranks, sequences, packing, params,
                     collectives, source, scored)


def _forward_cost(model: Any, layout: TrainLayout, topology: Any, ranks: list[int], seqs: np.ndarray,
                  packing: str, params: TrainParams, collectives: Any, source: str | None,
                  scored: np.ndarray | None = None) -> ForwardCost:
    kinds, rates, comm, groups = _pool_setup(layout, topology, ranks, params, collectives)
    budget_key = ("logprob_max_tokens_per_micro_batch" if layout.logprob_max_tokens_per_micro_batch
                  else "max_tokens_per_micro_batch")
    replicas, heads = _micro_batch_parts(seqs, layout, packing, getattr(layout, budget_key), params, budget_key,
                                         source, scored)
    for tokens_of_replica, _ in replicas:   # the forward-only pass runs Megatron's interleaved schedule too
        check_interleaved_micro_batches(tokens_of_replica.size, layout.pp, layout.vpp, TRAIN_LAYOUT_FIELD)
    memory = _check_forward_memory(model, layout, replicas, heads, min(k.hbm_bytes for k in kinds), params,
                                   budget_key, source) if params.check_memory else None
    tokens = np.concatenate([t for t, _ in replicas])
    sq = np.concatenate([q for _, q in replicas])
    arrays = _stage_arrays(model, layout, tokens, sq, groups, comm, rates, params, forward_only=True,
                           head_tokens=None if heads is None else np.concatenate(heads),
                           replica_sizes=[t.size for t, _ in replicas],
                           memo=_memo(collectives, topology, LAYER_TIMES_MEMO))
    p2p = _p2p_times(model, layout, tokens, groups, comm, params)
    worst_t, worst_sl = -1.0, slice(0, 0)
    for span, sl in _forward_spans(arrays, p2p, [t.size for t, _ in replicas], params, layout.pp):
        if span > worst_t:
            worst_t, worst_sl = span, sl
    lengths = seqs.astype(float)
    flops = _per_sequence_flops(model.forward_flops_per_token, lengths, model)
    offload_s = 0.0
    # Busiest pipeline rank: its forward compute; the rest of the time is comm and pipeline fill.
    compute_s = comm_s = 0.0
    for s in range(layout.pp):
        virt = [c * layout.pp + s for c in range(layout.vpp)]
        busy_comm = float(arrays.fwd_comm[virt][:, worst_sl].sum())
        busy_compute = float(arrays.fwd[virt][:, worst_sl].sum()) - busy_comm
        if busy_compute > compute_s:
            compute_s, comm_s = busy_compute, busy_comm
    if params.offload.params or params.offload.fsdp_cpu_offload:
        mem = memory_per_device(model, _single_micro_batch(layout), float(seqs.max()),
                                min(k.hbm_bytes for k in kinds), params=params.memory,
                                flash_attention=params.compute.flash_attention)
        host_Bps = offload_Bps(topology, ranks, params)
        offload_s = offload_time_s(mem, host_Bps, params, forward_only=True)
        offload_s += fsdp_cpu_offload_s(mem, layout, worst_sl.stop - worst_sl.start, host_Bps, params,
                                        forward_only=True)[0]
        worst_t += offload_s
    result = ForwardCost(time_s=worst_t, compute_s=compute_s, comm_s=comm_s, tokens=int(seqs.sum()), flops=flops,
                         offload_s=offload_s, memory=memory)
    return result


def _check_forward_memory(model: Any, layout: TrainLayout, replicas: list[tuple[np.ndarray, np.ndarray]],
                          heads: list[np.ndarray] | None, hbm_bytes: float, params: TrainParams, budget_key: str,
                          source: str | None) -> MemoryBreakdown:
    """A forward-only pass that does not fit on the pool's smallest HBM is an error naming the key that
    sizes its micro-batches (forward_memory_per_device at the largest micro-batch and its output layer's
    tokens). Each row attends within itself, whether rows or a token budget's pack: the context is the
    micro-batch's sum of squared lengths over its tokens (a padded row's width; it read the whole
    micro-batch as one sequence without a budget, b x the score memory of b rows without flash)."""
    longest = max(float(t.max()) for t, _ in replicas)
    head_tokens = longest if heads is None else max(float(np.max(h)) for h in heads)
    budget = getattr(layout, budget_key) is not None
    context = max(float((q / np.maximum(t, 1)).max()) for t, q in replicas)
    memory = device_resident(forward_memory_per_device(
        model, _single_micro_batch(layout), longest, head_tokens, hbm_bytes, params=params.memory,
        flash_attention=params.compute.flash_attention, context_len=context), params)
    check_forward_fits(memory, what=f"{model.name}'s forward-only pass (log-probs / reference / values) of "
                       f"{longest:,.0f} tokens a micro-batch with {_layout_text(layout)}", budget=budget, source=source)
    return memory


def _interleaved_span(fwd: np.ndarray, p2p: np.ndarray, pp: int, blocking_send: bool) -> float:
    """One replica's forward-only makespan over pp ranks holding its virtual stages (rows of
    ``fwd``); a blocking send holds its sender as the transfer runs (_with_blocking_forward_sends)."""
    if blocking_send and p2p.size:
        return float(interleaved_forward_makespans(_with_blocking_forward_sends(fwd, p2p)[None], 0.0, pp)[0])
    return float(interleaved_forward_makespans(fwd[None], p2p[None] if p2p.size else 0.0, pp)[0])


def _forward_spans(arrays: Any, p2p: np.ndarray, sizes: list[int], params: TrainParams,
                   pp: int | None = None) -> list[tuple[float, slice]]:
    """(forward-only makespan, its columns) of each data-parallel replica, in replica order. Without
    blocking sends, the replicas of each micro-batch count are scanned together
    (forward_only_makespans: the same floats as one by one). ``pp``: the ranks the rows (virtual
    stages) run on; fewer than the rows (vpp > 1): each rank runs its model chunks in turn
    (interleaved_forward_makespans), not side by side."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if pp is not None and pp < arrays.fwd.shape[0]:
        return [(_interleaved_span(arrays.fwd[:, sl], p2p[:, sl], pp, params.comm.pp_blocking_send), sl)
                for sl in slices]
    if params.comm.pp_blocking_send and p2p.size:
        return [(forward_only_makespan(_with_blocking_forward_sends(arrays.fwd[:, sl], p2p[:, sl])), sl)
                for sl in slices]
    spans = [0.0] * len(slices)
    by_size: dict[int, list[int]] = {}
    for r, m in enumerate(sizes):
        by_size.setdefault(m, []).append(r)
    for m, members in by_size.items():
        cols = np.concatenate([np.arange(bounds[r], bounds[r] + m) for r in members]) if m else np.zeros(0, int)
        fw = arrays.fwd[:, cols].reshape(arrays.fwd.shape[0], len(members), m).transpose(1, 0, 2)
        xf = p2p[:, cols].reshape(p2p.shape[0], len(members), m).transpose(1, 0, 2) if p2p.size else 0.0
        for r, span in zip(members, forward_only_makespans(fw, xf).tolist(), strict=True):
            spans[r] = span
    return list(zip(spans, slices, strict=True))


def _layout_text(layout: TrainLayout) -> str:
    return (f"tp={layout.tp} pp={layout.pp} vpp={layout.vpp} dp={layout.dp} ep={layout.ep} cp={layout.cp} "
            f"zero={layout.zero} recompute={layout.recompute} micro_batch={layout.micro_batch}")


_ = DEFAULT_ORDER  # re-exported through TrainLayout.order
