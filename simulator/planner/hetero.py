"""Heterogeneous clusters: split layers across pipeline stages and micro-batches across DP replicas
in proportion to device speed, so stage and replica times equalize.

`balance` is the exact min-max integer split. `HeteroStepModel` is the planner's step model for
pipelines whose stages differ in device kind and layer count (llm/training.py models uniform stages
only): each stage's per-layer and embedding/LM-head time comes from the training cost model on that
stage's TP group, PP sends go through CollectiveModel, then a closed-form 1F1B with non-uniform
stages and the DP gradient all-reduce. On a homogeneous cluster it is within ~5% of
`train_step_cost` (tested). The uniform ("manual") split and the balanced split go through the same
model, so their ratio is like for like.
"""
from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field

from ..errors import RlsimError
from ..params import LAYOUT_GATED_COMM, LAYOUT_GATED_MEMORY, LayoutGate, TrainLayoutKeys, TrainParams
from ..strict_model import StrictModel
from ..units import capacity_text
from .placement import groups, lay_out, locality_sorted


def balance(total: int, unit_s: Sequence[float], fixed_s: Sequence[float] | None = None,
            minimum: int = 1, maximum: Sequence[int] | None = None) -> list[int]:
    """Integer n_i (sum = total, minimum <= n_i <= maximum_i) minimizing max_i(fixed_i + n_i * unit_i).

    Greedy water-filling: each next item goes where it finishes earliest among the parts below their
    bound. Optimal for this min-max objective because every part's time grows linearly in its own
    count (a part at its bound only leaves the choice). `maximum`: e.g. the layers a stage's memory holds.
    """
    k = len(unit_s)
    if k == 0 or total < minimum * k:
        raise RlsimError(f"cannot split {total} items over {k} parts with at least {minimum} each",
                         field="planner", fix="use fewer pipeline stages or replicas")
    cap = [total] * k if maximum is None else [int(m) for m in maximum]
    if len(cap) != k or min(cap) < minimum or sum(cap) < total:
        raise RlsimError(f"cannot split {total} items over {k} parts of at most {cap} each (at least {minimum})",
                         field="planner", fix="use more pipeline stages or replicas")
    fixed = list(fixed_s) if fixed_s is not None else [0.0] * k
    counts = [minimum] * k
    heap = [(fixed[i] + (minimum + 1) * unit_s[i], i) for i in range(k) if cap[i] > minimum]
    heapq.heapify(heap)
    for _ in range(total - minimum * k):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < cap[i]:
            heapq.heappush(heap, (fixed[i] + (counts[i] + 1) * unit_s[i], i))
    return counts


def stage_groups(ranks: Sequence[int], tp: int, pp: int, dp: int) -> list[list[list[int]]]:
    """The TP group of replica d's pipeline stage s, as ``[d][s]``, from a canonical rank list (cp 1).

    placement.groups lists the TP groups with pp varying fastest (its walk nests cp, dp, pp), so
    (d, s) sits at index s + pp * d; each pipeline is then one of placement.groups' "pp" groups."""
    flat = groups(ranks, "tp", tp, 1, dp, pp)
    return [[flat[s + pp * d] for s in range(pp)] for d in range(dp)]


def uniform(total: int, parts: int) -> list[int]:
    """The 'manual' split: as even as integers allow, remainder to the first parts."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class HeteroParams(StrictModel):
    """Constants of the heterogeneous step model; reachable as `planner.hetero.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str = "bf16"      # the peak that utilization is measured against
    bytes_per_elem: int = 2  # bf16 activations (the pipeline sends)
    # Share of the DP gradient all-reduce hidden under backward. None: the training cost model's
    # (train_params.comm.dp_overlap_fraction, default params.DP_OVERLAP_FRACTION), one default for both.
    dp_overlap_fraction: float | None = Field(None, ge=0, le=1)
    # Memory check per stage (formulas.md): mixed-precision Adam's weights, gradients and optimizer
    # state per parameter, and the activations the training memory model stores per layer (arXiv
    # 2205.05198 as llm/memory.py generalizes it: flash attention, recompute mode). None: the training
    # stack's train_params.memory (18 with Megatron-Core's fp32 gradient buffer, 16 with the 2021 /
    # 2022 stacks), the bytes the training model holds, with ZeRO-1 / 2 sharding the optimizer state /
    # and the gradients over DP as the training model does (llm/memory.py). A value here is the
    # unsharded total: it applies at ZeRO 0 only.
    state_bytes_per_param: float | None = Field(None, gt=0)


def _check_zero(zero: int, params: HeteroParams) -> None:
    if zero not in (0, 1, 2):
        raise RlsimError(f"zero={zero}: the heterogeneous step model takes ZeRO 0-2", field="zero",
                         fix="use zero 0, 1 or 2 (ZeRO-3's per-layer gathers are not in this model)")
    if zero and params.state_bytes_per_param is not None:
        raise RlsimError("planner.hetero.state_bytes_per_param is the unsharded total, and ZeRO shards part of it",
                         field="planner.hetero.state_bytes_per_param",
                         fix="give the stack's train_params.memory bytes instead, or zero 0")


def _zero3_only(gates: Mapping[str, LayoutGate]) -> tuple[str, ...]:
    """The knobs whose layout gate (params.py) admits ZeRO-3 and none of ZeRO 0-2, the rest of the layout
    at its defaults: those no layout of this step model reads."""
    def admits(gate: LayoutGate, zero: int) -> bool:
        return bool(gate.applies(TrainLayoutKeys(zero=zero)))

    return tuple(knob for knob, gate in gates.items()
                 if admits(gate, 3) and not any(admits(gate, zero) for zero in (0, 1, 2)))


# train_params.comm knobs llm/training.py reads at ZeRO-3 only, which this step model does not run
# (_check_zero): FSDP's fsdp_gather_overlap_fraction / fsdp_reduce_overlap_fraction (the per-layer gathers
# and reduce-scatters, _fsdp_hidden) and DeepSpeed's zero3_outer_sync_every_micro_batch /
# zero3_backward_waits_last_bucket (_dp_and_optimizer) today: given, they would be read past.
ZERO3_ONLY_COMM = _zero3_only(LAYOUT_GATED_COMM)
# train_params.memory knobs llm/memory.py reads at ZeRO-3 only (the gathered working set, the step's
# sub-group): zero3_prefetch_layers, zero3_outer_gathered, zero3_reshard_after_forward, zero3_max_live_params
# and zero_step_sub_group_params today (zero_reduce_buckets_kept is read at ZeRO 1-2 too: its gate is 1-3).
ZERO3_ONLY_MEMORY = _zero3_only(LAYOUT_GATED_MEMORY)


def _check_zero3_only(train_params: TrainParams) -> None:
    """Refuse the knobs llm/training.py and llm/memory.py read at ZeRO-3 only (ZERO3_ONLY_COMM,
    ZERO3_ONLY_MEMORY) given off their defaults (no stack sets them; the OpenRLHF / TRL ZeRO-3 imports and
    verl's fsdp2 without reshard_after_forward do): no layout of ZeRO 0-2 reads them."""
    for section, knobs, gates in (("comm", ZERO3_ONLY_COMM, LAYOUT_GATED_COMM),
                                  ("memory", ZERO3_ONLY_MEMORY, LAYOUT_GATED_MEMORY)):
        given = getattr(train_params, section)
        for knob in knobs:
            default = type(given).model_fields[knob].default
            if getattr(given, knob) != default:
                field = f"workload.train_params.{section}.{knob}"
                reads = "prices" if section == "comm" else "sizes"
                raise RlsimError(f"{knob} {reads} {gates[knob].why} (read at ZeRO-3 only), and the heterogeneous "
                                 "step model runs ZeRO 0-2 (no ZeRO-3), where llm/training.py and llm/memory.py "
                                 "do not read it", field=field,
                                 fix=f"remove {field} (or set it {json.dumps(default)}), or plan without --balance "
                                     "(the even rows read it at ZeRO-3)")


@dataclass(frozen=True)
class HeteroResult:
    tp: int
    pp: int
    dp: int
    zero: int
    layers_per_stage: tuple[int, ...]
    microbatches_per_replica: tuple[int, ...]
    stage_time_s: tuple[tuple[float, ...], ...]  # per replica, per stage: fwd+bwd of one micro-batch
    step_time_s: float
    utilization: float  # model FLOPs / (step time x sum of device peaks)
    placement: tuple[int, ...]
    micro_batch: int = 1
    recompute: str = "full"


class HeteroStepModel:
    """Step time of a (tp, pp, dp) layout whose devices differ in speed."""

    def __init__(self, model: Any, topology: Any, seq_len: int, micro_batch: int = 1, *,
                 params: HeteroParams | None = None, collectives: Any = None,
                 speed_factor: Mapping[int, float] | None = None, recompute: str = "full",
                 train_params: TrainParams | None = None) -> None:
        self.model, self.topology, self.seq_len, self.mb = model, topology, int(seq_len), int(micro_batch)
        self.params = params or HeteroParams()
        # memory is checked per stage by _check_memory
        self.train_params = (train_params or TrainParams()).model_copy(update={"check_memory": False})
        _check_zero3_only(self.train_params)
        overlap = self.params.dp_overlap_fraction
        self.dp_overlap_fraction = self.train_params.comm.dp_overlap_fraction if overlap is None else overlap
        memory = self.train_params.memory
        # (weights, gradients, optimizer state) bytes per parameter: the last two shard over DP with ZeRO
        self.state_bytes = ((self.params.state_bytes_per_param, 0.0, 0.0) if self.params.state_bytes_per_param
                            is not None else (memory.resident_bytes_per_param, memory.grad_bytes_per_param,
                                              memory.optimizer_bytes_per_param))
        self.speed_factor = dict(speed_factor or {})
        self.recompute = recompute
        if collectives is None:
            from ..network.collectives import CollectiveModel
            collectives = CollectiveModel(topology)
        self.collectives = collectives
        self._units: dict[tuple, tuple[float, float]] = {}  # by TP group signature: see _stage_unit
        self.model_flops_per_token = float(model.train_flops_per_token(self.seq_len))

    @property
    def state_bytes_per_param(self) -> float:
        """Weights, gradients and optimizer state per parameter, unsharded (ZeRO 0)."""
        return sum(self.state_bytes)

    def _stage_unit(self, tp_group: Sequence[int]) -> tuple[float, float]:
        """(seconds per layer, seconds of embedding + LM head) of one micro-batch's forward and
        backward on one TP group, from the training cost model (llm/training.py: shape-aware GEMMs,
        memory-bound ops, TP collectives through the network model) - so that a homogeneous cluster
        gets the training model's step. The model on this group alone (pp 1, dp 1) is costed at L - 1
        and L layers: the difference is one layer, the rest of L layers the fixed part. A straggler's
        speed factor slows the whole group's time (comm included: an approximation)."""
        key = (self.topology.group_signature(tp_group), len(tp_group))
        hit = self._units.get(key)
        if hit is None:
            from ..llm.training import TrainLayout, train_step_cost, uniform_sequences

            layers = int(self.model.num_layers)
            layout = TrainLayout(tp=len(tp_group), pp=1, zero=0, recompute=self.recompute, micro_batch=self.mb)
            params = self.train_params
            seqs = uniform_sequences(self.mb, self.seq_len)

            def pipeline_s(n: int) -> float:
                return train_step_cost(self.model.replace(num_layers=n), layout, self.topology, list(tp_group),
                                       seqs, params=params, collectives=self.collectives).pipeline_s

            whole = pipeline_s(layers)
            per_layer = whole - pipeline_s(layers - 1) if layers > 1 else whole
            hit = self._units[key] = (per_layer, max(whole - layers * per_layer, 0.0))
        slow = min(self.speed_factor.get(r, 1.0) for r in tp_group)
        return hit[0] / slow, hit[1] / slow

    def evaluate(self, ranks: Sequence[int], tp: int, pp: int, dp: int, global_microbatches: int, *,
                 layers: Sequence[int] | None = None, microbatches: Sequence[int] | None = None,
                 balanced: bool = True, zero: int = 0) -> HeteroResult:
        """Step time of the canonical rank list `ranks` (tp fastest, then dp, pp slowest; cp = 1).

        With balanced=True, layers and micro-batches not given are split by speed; otherwise evenly.
        `zero` 0-2: ZeRO-1 / 2 shard the optimizer state / and the gradients over DP and swap the
        gradient all-reduce for a reduce-scatter and a weight all-gather (ZeRO-3's per-layer gathers
        are not in this model).
        """
        p, L = self.params, int(self.model.num_layers)
        _check_zero(zero, self.params)
        by_stage = stage_groups(ranks, tp, pp, dp)   # [replica][stage] -> TP group
        units = [[self._stage_unit(group) for group in row] for row in by_stage]
        unit = [[u for u, _ in row] for row in units]
        # Embedding and LM head: on the last stage (the embedding lookup is negligible next to the head).
        last_fixed = [row[-1][1] for row in units]
        if layers is None:
            if balanced:  # one layer split serves every replica: balance on the slowest per stage
                worst = [max(unit[d][s] for d in range(dp)) for s in range(pp)]
                fixed = [0.0] * (pp - 1) + [max(last_fixed)]
                # before the batch split: a replica's even share of the micro-batches (ZeRO-2's accumulated partition)
                layers = balance(L, worst, fixed, maximum=self._layers_held(by_stage, tp, pp, dp, zero,
                                                                             -(-global_microbatches // dp)))
            else:
                layers = uniform(L, pp)
        if sum(layers) != L or len(layers) != pp:
            raise RlsimError(f"layers per stage {list(layers)} must be {pp} counts summing to {L}",
                             field="planner.layers")
        p2p = 0.0
        if pp > 1:
            pp_pair = groups(ranks, "pp", tp, 1, dp, pp)[0][:2]   # replica 0's first two stages
            act = self.mb * self.seq_len * self.model.hidden * p.bytes_per_elem / tp
            p2p = 2 * self.collectives.cost("p2p", pp_pair, act).time_s  # activation fwd + gradient bwd
        stage = [tuple(layers[s] * unit[d][s] + (last_fixed[d] if s == pp - 1 else 0.0) + p2p
                       for s in range(pp)) for d in range(dp)]
        # 1F1B with non-uniform stages: the first micro-batch crosses every stage, the rest drain at
        # the pace of the slowest one: sum_i t_i + (m - 1) max_i t_i.
        per_mb = [max(st) for st in stage]
        fill = [sum(st) - max(st) for st in stage]
        if microbatches is None:
            microbatches = balance(global_microbatches, per_mb, fill) if balanced else uniform(
                global_microbatches, dp)
        replica_s = [fill[d] + microbatches[d] * per_mb[d] for d in range(dp)]
        step = (max(replica_s) + self._sync_s(ranks, tp, pp, dp, zero, layers, max(microbatches))
                + self._tied_embedding_sync_s(ranks, tp, pp, dp) + self._grad_stats_sync_s(ranks, tp, pp, dp, zero))
        peak_sum = sum(self.topology.device_spec(r).peak(p.dtype) for r in ranks)
        tokens = global_microbatches * self.mb * self.seq_len
        util = self.model_flops_per_token * tokens / (step * peak_sum)
        self._check_memory(by_stage, tp, pp, dp, layers, zero, max(microbatches))
        return HeteroResult(tp, pp, dp, zero, tuple(layers), tuple(microbatches), tuple(stage), step, util,
                            tuple(ranks), self.mb, self.recompute)

    def _sync_s(self, ranks: Sequence[int], tp: int, pp: int, dp: int, zero: int,
                layers: Sequence[int] | None = None, micro_batches: int = 1) -> float:
        """The exposed gradient sync of the stage holding the most parameters (the stages' DP groups
        reduce side by side): an all-reduce of the gradients in the dtype the stack reduces them
        (comm.grad_reduce_bytes_per_param), or with ZeRO-1 / 2 their reduce-scatter (all-reduce with
        comm.zero_grad_reduce) and the updated weights' all-gather (as llm/training.py prices them). ``layers`` per stage (None: even), so a
        balanced split's heavier stage syncs its own share (params_total / (tp pp) priced a (9, 23)
        split's 23-layer stage at 0.73 of it; a heterogeneous-cluster audit). With
        comm.zero2_reduce_every_micro_batch under ZeRO-2 (DeepSpeed's) the gradients are reduced in each of
        the step's ``micro_batches`` backwards (the most a replica runs), as llm/training.py prices them."""
        if dp < 2:
            return 0.0
        shard_params = max(self._stage_params(layers or uniform(int(self.model.num_layers), pp))) / tp
        comm = self.train_params.comm
        dp_group = groups(ranks, "dp", tp, 1, dp, pp)[0]
        hidden = self.dp_overlap_fraction
        if self.params.dp_overlap_fraction is None:   # the stack's, with its buckets if it has them
            hidden = comm.dp_hidden_share(shard_params, dp)
        grads = shard_params * comm.grad_reduce_bytes_per_param
        if zero == 0:
            sync = self.collectives.cost("all_reduce", dp_group, grads).time_s
        else:
            weights = shard_params * self.train_params.memory.weight_bytes_per_param
            reduce = "all_reduce" if comm.zero_grad_reduce == "all-reduce" else "reduce_scatter"
            reductions = micro_batches if zero == 2 and comm.zero2_reduce_every_micro_batch else 1
            sync = (reductions * self.collectives.cost(reduce, dp_group, grads).time_s
                    + self.collectives.cost("all_gather", dp_group, weights).time_s)
        return (1 - hidden) * sync

    def _tied_embedding_sync_s(self, ranks: Sequence[int], tp: int, pp: int, dp: int) -> float:
        """A tied word embedding's gradient all-reduce between its copies on the first and the last stage
        after the DP sync, not overlapped (llm/training.py _tied_embedding_sync_s: Megatron's
        finalize_model_grads): V h / tp gradients over the slowest (first, last) stage pair of the
        pipelines; 0 at pp 1 or for an untied head."""
        if pp < 2 or not self.model.tied_head:
            return 0.0
        from ..llm.layer_costs import embedding_params

        table = embedding_params(self.model)[0] / tp * self.train_params.comm.grad_reduce_bytes_per_param
        return max(self.collectives.cost("all_reduce", [line[0], line[-1]], table).time_s
                   for line in groups(ranks, "pp", tp, 1, dp, pp))

    def _grad_stats_sync_s(self, ranks: Sequence[int], tp: int, pp: int, dp: int, zero: int) -> float:
        """Gradient clipping's scalar all-reduces before the optimizer updates (llm/training.py
        _grad_stats_sync_s: the global norm, comm.grad_norm_all_reduce, and the zero count,
        comm.grad_zeros_all_reduce), each of GRAD_STAT_BYTES over every rank with ZeRO >= 1 (the distributed
        optimizer's world), else one replica's tp x pp ranks; 0 on one rank."""
        from ..llm.training import GRAD_STAT_BYTES

        comm = self.train_params.comm
        count = int(comm.grad_norm_all_reduce) + int(comm.grad_zeros_all_reduce)
        # canonical order, tp fastest, then dp, then pp (placement.groups): replica 0 is tp ranks a stage
        group = list(ranks) if zero >= 1 else [ranks[t + tp * dp * s] for s in range(pp) for t in range(tp)]
        if count == 0 or len(group) < 2:
            return 0.0
        return count * self.collectives.cost("all_reduce", group, GRAD_STAT_BYTES).time_s

    def _stage_param_count(self, pp: int) -> Callable[[int, int, int], float]:
        """params(stage, first layer, layer count) of a pipeline of pp stages: its layers' (prefix sums
        over the layers), the input embedding on the first stage, the output head on the last (a tied
        head beside the embedding: once, on one stage)."""
        from ..llm.layer_costs import embedding_params, layer_shapes

        (emb, head), upto = embedding_params(self.model), [0.0]
        for lay in layer_shapes(self.model):
            upto.append(upto[-1] + lay.params)
        tied = self.model.tied_head

        def params(st: int, first: int, count: int) -> float:
            return (upto[first + count] - upto[first] + (emb if st == 0 else 0.0)
                    + (head if st == pp - 1 and (pp > 1 or not tied) else 0.0))
        return params

    def _stage_params(self, layers: Sequence[int]) -> list[float]:
        """Parameters of each pipeline stage holding ``layers[s]`` consecutive layers, the rest of the
        model (its final norm) on the last (a tied head's copy there is not in params_total)."""
        params = self._stage_param_count(len(layers))
        out = [params(st, sum(layers[:st]), count) for st, count in enumerate(layers)]
        whole = self._stage_param_count(1)(0, 0, sum(layers))   # the model on one stage: its head once
        out[-1] += float(self.model.params_total) - whole
        return out

    def stage_memory_bytes(self, tp: int, pp: int, dp: int, layers: Sequence[int], zero: int = 0,
                           micro_batches: int = 1) -> list[float]:
        """Per pipeline stage (holding ``layers[s]`` consecutive layers), the bytes on one device, as
        the training memory model counts them (llm/memory.py): weights, gradients and optimizer state
        (ZeRO 1 / 2 shard the last two over DP), the input embedding on the first stage and the head
        on the last, the activations each layer stores (activation_bytes_per_token: the stack's flash
        attention, the recompute mode, sequence parallel with TP > 1 as _stage_unit's layout) for the
        p - s micro-batches 1F1B holds in flight, one layer rebuilt whole under full recompute, the
        fp32 logits on the last stage, and DeepSpeed's backward buffers (zero_backward_buffers_bytes: its
        reduction buckets, ZeRO-2's accumulated partition where a replica runs several ``micro_batches``),
        or its optimizer step's peak where larger (zero_step_copies: the gradient partition's copies)."""
        stage_bytes = self._stage_bytes(tp, pp, dp, zero, micro_batches)
        out, first = [], 0
        for st, count in enumerate(layers):
            out.append(stage_bytes(st, first, count))
            first += count
        return out

    def _stage_bytes(self, tp: int, pp: int, dp: int, zero: int,
                     micro_batches: int = 1) -> Callable[[int, int, int], float]:
        """bytes(stage, first layer, layer count) on one device of that stage (stage_memory_bytes):
        prefix sums over the layers, so that _layers_held can try every count."""
        from ..llm.layer_costs import embedding_params, layer_shapes
        from ..llm.memory import (
            activation_bytes_per_token,
            largest_trained_tensor,
            zero_backward_buffers_bytes,
            zero_offload_staging_bytes,
            zero_step_copies,
        )

        m, memory = self.model, self.train_params.memory
        weight_b, grad_b, optim_b = self.state_bytes
        # the gradients on the device as llm/memory.py device_gradient_bytes holds them (ZeRO-Offload's
        # partition on the host)
        grads_b = 0.0 if zero >= 2 and memory.grad_partition_on_host else grad_b / (dp if zero >= 2 else 1)
        state_bytes_per_param = weight_b + grads_b + optim_b / (dp if zero >= 1 else 1)
        shapes, params_of = layer_shapes(m), self._stage_param_count(pp)
        tokens, flash = self.mb * self.seq_len, self.train_params.compute.flash_attention

        known: dict[tuple[int, str], float] = {}   # layers of one shape share one object (as llm/memory.py)

        def stored(layer: Any, recompute: str) -> float:
            key = (id(layer), recompute)
            if key not in known:
                known[key] = tokens * activation_bytes_per_token(
                    layer, int(m.hidden), int(m.ffn_hidden), bool(getattr(m, "gated_ffn", True)), tp=tp, sp=tp > 1,
                    recompute=recompute, flash=flash, context_len=self.seq_len, params=memory)
            return known[key]
        acts_upto = [0.0]
        for lay in shapes:
            acts_upto.append(acts_upto[-1] + stored(lay, self.recompute))
        logits = tokens * float(m.head_outputs) / tp * (memory.logits_bytes_per_elem + memory.entropy_logits_bytes_per_elem)

        tensors = [largest_trained_tensor(lay, tp, 1) for lay in shapes] \
            if memory.zero_offload_device_grad_buffers else []
        emb, head = embedding_params(m)

        def staging(st: int, first: int, count: int) -> float:
            """ZeRO-Offload's device buffer of the stage's largest trained tensor (llm/memory.py)."""
            if not tensors:
                return 0.0
            outer = [emb / tp] if st == 0 else []
            outer += [head / tp] if st == pp - 1 and (pp > 1 or not m.tied_head) else []
            return zero_offload_staging_bytes(zero, max([*tensors[first:first + count], *outer], default=0.0),
                                              memory)

        def stage_bytes(st: int, first: int, count: int) -> float:
            last = first + count
            params = params_of(st, first, count) / tp   # no EP in this model: experts split by TP alone
            acts = (pp - st) * (acts_upto[last] - acts_upto[first])
            if self.recompute == "full" and count:
                acts += stored(shapes[first], "none")
            buffers = zero_backward_buffers_bytes(zero, grad_b * params / dp, micro_batches, memory, reduce_ranks=dp)
            buffers += staging(st, first, count)
            backward = params * state_bytes_per_param + acts + (logits if st == pp - 1 else 0.0) + buffers
            copies, step_grads = zero_step_copies(zero, grad_b * params / dp, memory)
            if not copies:
                return backward
            return max(backward, params * (weight_b + optim_b / dp) + step_grads + copies + staging(st, first, count))
        return stage_bytes

    def _usable_hbm(self, by_stage: list[list[list[int]]], st: int) -> float:
        """The usable HBM of stage st's smallest device over every replica."""
        hbm = min(self.topology.device_spec(r).hbm_bytes for row in by_stage for r in row[st])
        return hbm * self.train_params.memory.hbm_usable_fraction

    def _layers_held(self, by_stage: list[list[list[int]]], tp: int, pp: int, dp: int, zero: int,
                     micro_batches: int = 1) -> list[int]:
        """The most layers each stage's memory holds (the bound of the balanced split). Counted from
        the first layer: the layers of a dense model are alike, and _check_memory checks the split."""
        stage_bytes, layers = self._stage_bytes(tp, pp, dp, zero, micro_batches), int(self.model.num_layers)
        held = []
        for st in range(pp):
            usable, count = self._usable_hbm(by_stage, st), 0
            while count < layers and stage_bytes(st, 0, count + 1) <= usable:
                count += 1
            held.append(count)
        if min(held) < 1 or sum(held) < layers:   # the stage holding least cannot take an even share
            worst, share = min(range(pp), key=lambda st: held[st]), -(-layers // pp)
            raise RlsimError(f"stage {worst} needs {stage_bytes(worst, 0, share) / 1e9:.1f} GB per device for {share} "
                             f"layers, has {capacity_text(self._usable_hbm(by_stage, worst))} usable; the stages hold "
                             f"at most {held} of {layers} layers", field="planner.layers",
                             fix="use more pipeline stages or tensor parallelism")
        return held

    def _check_memory(self, by_stage: list[list[list[int]]], tp: int, pp: int, dp: int,
                      layers: Sequence[int], zero: int = 0, micro_batches: int = 1) -> None:
        """Each stage's bytes (stage_memory_bytes) against its smallest device's usable HBM."""
        for st, need in enumerate(self.stage_memory_bytes(tp, pp, dp, layers, zero, micro_batches)):
            usable = self._usable_hbm(by_stage, st)
            if need > usable:
                raise RlsimError(f"stage {st} needs {need / 1e9:.1f} GB per device, has {capacity_text(usable)} "
                                 "usable", field="planner.layers", fix="use more pipeline stages or tensor parallelism")


@dataclass(frozen=True)
class HeteroPlan:
    micro_batch: int               # the balanced layout's (each result carries its own)
    uniform: HeteroResult | None   # the manual baseline: even layers and batch, best such layout (None: none fits)
    balanced: HeteroResult         # speed-proportional layers and batch, best such layout
    uniform_refused: str | None = None   # why no even split fits (where uniform is None)

    @property
    def speedup(self) -> float | None:
        return None if self.uniform is None else self.uniform.step_time_s / self.balanced.step_time_s

    def to_json(self) -> dict[str, Any]:
        doc = {"speedup": self.speedup, "uniform": None if self.uniform is None else result_json(self.uniform),
               "balanced": result_json(self.balanced)}
        return doc if self.uniform is not None else {**doc, "uniform_refused": self.uniform_refused}


def result_json(r: HeteroResult) -> dict[str, Any]:
    """A result's layout, step, utilization and splits, as `plan --balance --json` gives them."""
    return {"layout": {"tp": r.tp, "pp": r.pp, "dp": r.dp, "zero": r.zero, "recompute": r.recompute,
                       "micro_batch": r.micro_batch},
            "step_time_s": r.step_time_s, "utilization": r.utilization,
            "layers_per_stage": list(r.layers_per_stage),
            "microbatches_per_replica": list(r.microbatches_per_replica)}


def plan_hetero(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                ranks: Sequence[int] | None = None, tp_values: Sequence[int] = (1, 2, 4, 8),
                pp_values: Sequence[int] | None = None, micro_batch: int = 1,
                params: HeteroParams | None = None, speed_factor: Mapping[int, float] | None = None,
                recompute: str = "full", collectives: Any = None,
                train_params: TrainParams | None = None, zero_values: Sequence[int] = (0,),
                micro_batch_values: Sequence[int] | None = None,
                recompute_values: Sequence[str] | None = None) -> HeteroPlan:
    """Best (tp, pp, dp, zero, micro-batch, recompute) with speed-proportional layer and batch
    splits, and its uniform baseline (the best even split over the same space).

    Devices are laid out locality-first (TP inside a node, a pipeline over consecutive nodes, DP
    outermost), so stages and replicas are as homogeneous as the cluster allows. `zero_values`:
    the ZeRO stages tried (0-2; HeteroStepModel.evaluate); `micro_batch_values` /
    `recompute_values`: those tried (None: `micro_batch` / `recompute` alone).
    """
    ranks = list(range(topology.num_devices)) if ranks is None else list(ranks)
    step_models = hetero_step_models(model, topology, seq_len, micro_batch_values=(
        (micro_batch,) if micro_batch_values is None else micro_batch_values), recompute_values=(
        (recompute,) if recompute_values is None else recompute_values), params=params, speed_factor=speed_factor,
        collectives=collectives, train_params=train_params, zero_values=zero_values)
    return plan_on_step_models(step_models, ranks, global_batch, tp_values=tp_values, pp_values=pp_values,
                               zero_values=zero_values)


def hetero_step_models(model: Any, topology: Any, seq_len: int, *, micro_batch_values: Sequence[int],
                       recompute_values: Sequence[str], params: HeteroParams | None = None,
                       speed_factor: Mapping[int, float] | None = None, collectives: Any = None,
                       train_params: TrainParams | None = None,
                       zero_values: Sequence[int] = (0,)) -> list[HeteroStepModel]:
    """One step model per (micro-batch, recompute) tried, sharing one collective model: each caches
    its stage units by TP group, so that plans on several rank sets (plan_kind_subsets) cost a
    group once."""
    for zero in zero_values:   # bad input, not a layout that does not fit: raise here, not per layout
        _check_zero(zero, params or HeteroParams())
    if collectives is None:
        from ..network.collectives import CollectiveModel
        collectives = CollectiveModel(topology)
    return [HeteroStepModel(model, topology, seq_len, mb, params=params, collectives=collectives,
                            speed_factor=speed_factor, recompute=mode, train_params=train_params)
            for mb in micro_batch_values for mode in recompute_values]


def plan_on_step_models(step_models: Sequence[HeteroStepModel], ranks: Sequence[int], global_batch: int, *,
                        tp_values: Sequence[int] = (1, 2, 4, 8), pp_values: Sequence[int] | None = None,
                        zero_values: Sequence[int] = (0,)) -> HeteroPlan:
    """plan_hetero's search on ``ranks`` with the given step models (hetero_step_models)."""
    ranks = list(ranks)
    best: dict[bool, HeteroResult] = {}   # balanced? -> the fastest such result
    refused: dict[bool, str] = {}         # balanced? -> the last layout refused, and why
    for stm in step_models:
        for res in _hetero_layouts(stm, ranks, global_batch, tp_values, pp_values, zero_values):
            if res.refused is not None:
                refused[res.balanced_split] = res.refused
            elif res.balanced_split not in best or res.result.step_time_s < best[res.balanced_split].step_time_s:
                best[res.balanced_split] = res.result
    if True not in best:
        why = (f": the last tried, {refused[True]}" if True in refused else "")
        raise RlsimError(f"no heterogeneous layout of {len(ranks)} devices fits the model and batch{why}",
                         field="planner", fix="check the device count and global batch, or give the planner space "
                                              "more TP / PP, ZeRO or recompute")
    # the balance is the compute's; an even split whose lighter stages sync less can still be faster
    # (a homogeneous cluster): the balanced plan is never slower than the even one it is measured against
    if False in best and best[False].step_time_s < best[True].step_time_s:
        best[True] = best[False]
    return HeteroPlan(best[True].micro_batch, best.get(False), best[True], None if False in best else (
        refused.get(False) or "no even split divides the model and batch"))


@dataclass(frozen=True)
class _Tried:
    balanced_split: bool
    result: HeteroResult | None
    refused: str | None = None   # the layout and why it does not fit (result None)


def _hetero_layouts(stm: HeteroStepModel, ranks: list[int], global_batch: int, tp_values: Sequence[int],
                    pp_values: Sequence[int] | None, zero_values: Sequence[int]) -> Any:
    """Every (tp, pp, zero) layout of ``ranks`` that fits, split by speed and evenly, under one
    micro-batch size and recompute mode (the step model's)."""
    model, micro_batch = stm.model, stm.mb
    slots = locality_sorted(stm.topology, ranks)
    n, num_layers = len(ranks), int(model.num_layers)
    pp_values = list(pp_values) if pp_values is not None else [p for p in (1, 2, 4, 8, 16) if p <= num_layers]
    for tp in tp_values:
        if model.num_heads % tp:
            continue
        for pp in pp_values:
            if n % (tp * pp):
                continue
            dp = n // (tp * pp)
            if global_batch % micro_batch or global_batch // micro_batch < dp:
                continue
            laid = lay_out(slots, ("tp", "cp", "pp", "dp"), tp, 1, dp, pp)
            for zero, balanced in ((z, b) for z in zero_values for b in (True, False)):
                if zero and dp == 1:   # nothing to shard over: the even-split search prunes it (zero_without_dp)
                    continue
                try:
                    yield _Tried(balanced, stm.evaluate(laid, tp, pp, dp, global_batch // micro_batch,
                                                        balanced=balanced, zero=zero))
                except RlsimError as err:
                    yield _Tried(balanced, None, f"tp {tp} pp {pp} dp {dp} zero {zero}, recompute {stm.recompute}, "
                                                 f"micro-batch {micro_batch}: {err.message}")
