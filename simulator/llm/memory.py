"""Training memory per device: weights, gradients, optimizer states (by ZeRO stage), activations
(by recompute mode), logits. Formulas: reference/formulas.md; ZeRO arXiv 1910.02054; activations
Korthikanti et al., "Reducing Activation Recomputation", arXiv 2205.05198 (Table 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import RlsimError
from ..params import MemoryParams
from .layer_costs import LayerShape, embedding_params, layer_shapes
from .pipeline import issue_arrays
from .train_layout import TrainLayout


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded device of a layout (the pipeline stage with the largest total)."""

    stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float
    capacity_bytes: float   # usable HBM (hbm_bytes x hbm_usable_fraction)
    # ZeRO-3: whole parameters and gradients held beside the shards while layers compute
    # (zero3_working_set_bytes); transient, so not resident between phases. 0 below ZeRO-3.
    gathered_bytes: float = 0.0
    # DeepSpeed ZeRO's backward buffers (zero_backward_buffers_bytes): its gradient reduction buckets
    # (ZeRO-3's bucket and its reduce-scatter's copy), and under ZeRO-2 with gradient accumulation the
    # earlier micro-batches' gradient partition beside the one the backward fills; counted in the
    # update's fit only, not resident between phases (nor offloaded with the gradients). 0 elsewhere.
    zero_buffers_bytes: float = 0.0
    # Of zero_buffers_bytes, what stays allocated between steps (zero_kept_bucket_bytes: ZeRO-3's IPG
    # bucket); resident beside the other phases unless the gradients are offloaded (rl/llm_costs.py
    # kept_gradient_bytes). A part of zero_buffers_bytes, not added to the total.
    kept_buffers_bytes: float = 0.0
    # DeepSpeed ZeRO's optimizer step (zero_step_copies: MemoryParams
    # .zero_step_grad_copy_bytes_per_param): the copies of the gradient partition it makes once the
    # backward's activations and buckets are freed (ZeRO-3: of one optimizer sub-group), and the gradients
    # it then holds (the partition; ZeRO-1 frees the others first). The step's peak, weights + these +
    # optimizer state + the kept buckets (kept_buffers_bytes), sets the total where it exceeds the
    # backward's (the max of the two phases, not their sum). 0 elsewhere.
    step_copies_bytes: float = 0.0
    step_gradients_bytes: float = 0.0
    # DeepSpeed ZeRO-Offload's device buffer of the largest trained parameter (MemoryParams
    # .zero_offload_device_grad_buffers: zero_offload_staging_bytes), allocated at init and never freed:
    # in the backward's and the step's peaks and resident between steps whatever the switch. 0 elsewhere.
    offload_staging_bytes: float = 0.0

    @property
    def backward_bytes(self) -> float:
        """The update's forward-backward peak: the states, activations, logits and backward buffers."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.logits_bytes + self.gathered_bytes + self.zero_buffers_bytes + self.offload_staging_bytes)

    @property
    def step_bytes(self) -> float:
        """The optimizer step's peak where it copies the gradient partition (step_copies_bytes), else 0."""
        if not self.step_copies_bytes:
            return 0.0
        return (self.weights_bytes + self.step_gradients_bytes + self.optimizer_bytes + self.step_copies_bytes
                + self.kept_buffers_bytes + self.offload_staging_bytes)

    @property
    def total_bytes(self) -> float:
        backward = self.backward_bytes
        return max(backward, self.step_bytes) if self.step_copies_bytes else backward

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, float]:
        return {"stage": self.stage, "weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes, "activations_bytes": self.activations_bytes,
                "logits_bytes": self.logits_bytes, "gathered_bytes": self.gathered_bytes,
                "zero_buffers_bytes": self.zero_buffers_bytes, "total_bytes": self.total_bytes,
                "capacity_bytes": self.capacity_bytes,
                **({"offload_staging_bytes": self.offload_staging_bytes} if self.offload_staging_bytes else {}),
                **({"step_copies_bytes": self.step_copies_bytes, "step_bytes": self.step_bytes}
                   if self.step_copies_bytes else {})}

    def describe(self) -> str:
        gb = 1e9
        return (f"weights {self.weights_bytes / gb:.1f} GB + gradients {self.gradients_bytes / gb:.1f} GB + "
                f"optimizer {self.optimizer_bytes / gb:.1f} GB + activations {self.activations_bytes / gb:.1f} GB"
                f" + logits {self.logits_bytes / gb:.1f} GB"
                + (f" + ZeRO-3 gathered {self.gathered_bytes / gb:.1f} GB" if self.gathered_bytes else "")
                + (f" + DeepSpeed ZeRO backward buffers {self.zero_buffers_bytes / gb:.1f} GB" if self.zero_buffers_bytes
                   else "")
                + (f" + ZeRO-Offload's device gradient buffer {self.offload_staging_bytes / gb:.1f} GB"
                   if self.offload_staging_bytes else "")
                + (f" (the optimizer step: {self.step_bytes / gb:.1f} GB with DeepSpeed's gradient partition copies "
                   f"{self.step_copies_bytes / gb:.1f} GB)" if self.step_copies_bytes else "")
                + f" = {self.total_bytes / gb:.1f} GB on pipeline stage "
                f"{self.stage}, usable {self.capacity_bytes / gb:.1f} GB")


@lru_cache(maxsize=512)
def stage_layers(num_layers: int, pp: int, vpp: int,
                 counts: tuple[int, ...] | None = None) -> tuple[tuple[int, ...], ...]:
    """Layer indices of each virtual stage j (chunk j // pp on rank j % pp), split as evenly as
    possible with the earlier stages taking the remainder (np.array_split: ceil first, then floor);
    `counts`: layers per pipeline rank (uneven first / last stages, vpp 1), consecutive ranks."""
    if counts is not None:
        edges = np.cumsum((0,) + tuple(counts))
        return tuple(tuple(range(int(a), int(b))) for a, b in zip(edges[:-1], edges[1:], strict=True))
    chunks = np.array_split(np.arange(num_layers), pp * vpp)
    return tuple(tuple(c.tolist()) for c in chunks)


def layout_stage_layers(num_layers: int, layout: TrainLayout) -> tuple[tuple[int, ...], ...]:
    """`stage_layers` of a layout: its first / last stage layer counts when given."""
    counts = layout.stage_layer_counts(num_layers)
    if counts is not None and layout.vpp > 1:
        raise RlsimError("uneven first / last pipeline stages are modelled with vpp 1 only",
                         field="workload.train_layout.vpp", fix="set vpp: 1 or drop pp_first/last_stage_layers")
    return stage_layers(num_layers, layout.pp, layout.vpp, counts)


def activation_bytes_per_token(layer: LayerShape, hidden: int, ffn: int, gated: bool, *, tp: int, sp: bool,
                               recompute: str, flash: bool, context_len: float, params: MemoryParams) -> float:
    """Stored activation bytes per token of one layer (arXiv 2205.05198 Table 2, generalized to the
    layer's shapes: 34 s b h + 5 a s^2 b for GPT, /t with TP + SP; 2 s b h with full recompute)."""
    a, m = params.activation_bytes, params.mask_bytes
    if recompute == "full":
        return a * hidden / (tp if sp else 1)
    # Not sharded by TP unless sequence parallel: 2 norms' saved tensors (Megatron: their inputs),
    # attention and MLP inputs, 2 masks.
    norm = a if params.norm_saved_bytes_per_hidden is None else params.norm_saved_bytes_per_hidden
    replicated = 2 * norm * hidden + 2 * a * hidden + 2 * m * hidden
    # Sharded by TP: Q, K, V, attention output, the MLP's inner activations (gated: up + gate + act).
    q = layer.attn_heads * layer.qk_head_dim
    kv = layer.kv_heads * (layer.qk_head_dim + layer.v_head_dim)
    attn = a * (q + kv + layer.attn_heads * layer.v_head_dim)
    # MLP inner activations: up-projection output (gated: up + gate) and the activation output
    # (gated: gated_ffn_saved_tensors of the FFN's width, half as many as up_out holds widths x 2).
    # MoE: every token's top-k experts plus the shared experts (always gated).
    up_out = sum(g.n_out * (layer.experts_per_token if g.expert else 1)
                 for g in layer.gemms if g.name.endswith("_up"))
    mlp = a * up_out * (params.gated_ffn_saved_tensors / 2.0 if (gated or layer.moe) else 2.0)
    # A hybrid block (one norm, one mixer: tp_reductions 1) keeps half a transformer layer's inputs
    # and masks; a Mamba-2 mixer its in_proj output and its scan output (mixer_units).
    replicated *= layer.tp_reductions / 2.0
    if layer.moe:   # the k routed copies of each token in expert order: the expert FC1's input, kept for
        # its weight gradient (Megatron-Core's token dispatcher permutes them; split by TP with SP, as
        # the dispatch is); and the k expert outputs back in token order, kept by the product with the
        # routing probabilities for the probabilities' gradient (megatron-core 0.8.0 moe_utils.unpermute:
        # unpermuted_tokens * probs.unsqueeze(-1), then the sum over k)
        replicated += 2 * a * hidden * layer.experts_per_token
    sharded = attn + mlp + a * layer.mixer_units
    if not flash and recompute == "none":
        sharded += params.score_bytes_per_elem * layer.attn_heads * context_len
    return replicated / (tp if sp else 1) + sharded / tp


def memory_per_device(model, layout: TrainLayout, seq_len: float, capacity_hbm_bytes: float, *,
                      params: MemoryParams | None = None, flash_attention: bool = True,
                      micro_batches: int | None = None, context_len: float | None = None) -> MemoryBreakdown:
    """The largest per-device memory over pipeline stages. `seq_len` is the longest sequence of a
    micro-batch (padded) or the packed token budget per sequence slot; CP divides it. `context_len`:
    the length a token attends over (materialized scores, flash off), where it is not `seq_len`: a
    pack of several sequences attends within each (sum of squared lengths / tokens)."""
    params = params or MemoryParams()
    context = float(seq_len if context_len is None else context_len)
    try:  # the planner asks the same layouts again (memory check, then the full query): cache
        return _memory_cached(model, layout, float(seq_len), float(capacity_hbm_bytes), params,
                              bool(flash_attention), micro_batches, context)
    except TypeError:  # an unhashable model stand-in
        return _memory_per_device(model, layout, seq_len, capacity_hbm_bytes, params, flash_attention,
                                  micro_batches, context)


@lru_cache(maxsize=4096)
def _memory_cached(model, layout: TrainLayout, seq_len: float, capacity_hbm_bytes: float, params: MemoryParams,
                   flash_attention: bool, micro_batches: int | None, context: float) -> MemoryBreakdown:
    return _memory_per_device(model, layout, seq_len, capacity_hbm_bytes, params, flash_attention, micro_batches,
                              context)


def _memory_per_device(model, layout: TrainLayout, seq_len: float, capacity_hbm_bytes: float, params: MemoryParams,
                       flash_attention: bool, micro_batches: int | None, context: float) -> MemoryBreakdown:
    tp, pp, vpp, cp = layout.tp, layout.pp, layout.vpp, layout.cp
    chunks = layout_stage_layers(int(model.num_layers), layout)
    tokens = layout.micro_batch * seq_len / cp
    m = micro_batches if micro_batches is not None else pp * vpp
    key = (model, chunks, pp, vpp, tp, layout.ep, layout.expert_tp, layout.sp, layout.recompute,
           bool(flash_attention), stage_sums_context(context / cp, bool(flash_attention), layout.recompute), params,
           layout.recompute_method, layout.recompute_num_layers)
    try:
        sums = _stage_sums(*key)
    except TypeError:  # an unhashable model stand-in
        sums = _stage_sums.__wrapped__(*key)
    kept_buckets = zero_kept_bucket_bytes(layout.zero, params)
    # Each stage's states (all but its activations): a middle stage whose sums are its predecessor's
    # (_stage_sums gives equal stages one tuple: a uniform model's) has its predecessor's, the same floats
    best: tuple[float, ...] | None = None   # (total, stage, weights, grads, optim, acts, logits, gathered, buffers,
    #                                            step copies, step gradients, staging)
    held: tuple[float, ...] = ()
    for s in range(pp):
        stage_sums = sums[s]
        if not (1 < s < pp - 1 and stage_sums is sums[s - 1]):
            held = _stage_states(model, layout, params, stage_sums, s == 0, s == pp - 1, tokens, m, micro_batches,
                                 kept_buckets)
        weights, grads, optim, logits, gathered, buffers, copies, step_grads, staging, step_total = held
        per_chunks, rebuilt = stage_sums[3], stage_sums[4]
        acts = _in_flight_cached(tuple([per_chunk * tokens for per_chunk in per_chunks]), pp, vpp, m, s)
        if layout.recompute == "full":  # the largest recompute group's full activations are rebuilt in its backward
            acts += tokens * rebuilt
        # MemoryBreakdown.total_bytes's sum, in its order: the stage with the largest (the first of equals)
        total = weights + grads + optim + acts + logits + gathered + buffers + staging
        if copies:
            total = max(total, step_total)
        if best is None or total > best[0]:
            best = (total, s, weights, grads, optim, acts, logits, gathered, buffers, copies, step_grads, staging)
    assert best is not None
    _, stage, weights, grads, optim, acts, logits, gathered, buffers, copies, step_grads, staging = best
    return MemoryBreakdown(int(stage), weights, grads, optim, acts, logits,
                           capacity_hbm_bytes * params.hbm_usable_fraction, gathered, buffers,
                           kept_buckets, copies, step_grads, staging)


def _stage_states(model, layout: TrainLayout, params: MemoryParams, stage_sums: tuple, first: bool, last: bool,
                  tokens: float, m: int, micro_batches: int | None, kept_buckets: float) -> tuple[float, ...]:
    """(weights, gradients, optimizer, logits, ZeRO-3 gathered, ZeRO backward buffers, step copies, step
    gradients, ZeRO-Offload staging, the optimizer step's total) of a pipeline stage: all of
    _memory_per_device's addends but its activations, from the stage's ``stage_sums`` (_stage_sums) and
    whether it is the ``first`` and the ``last`` stage (the embedding, the output head and the logits)."""
    dense, expert, largest_layer, _, _, trained_dense, trained_expert, largest_tensor = stage_sums
    tp, pp, zero = layout.tp, layout.pp, layout.zero
    zero_shard, expert_zero_shard = layout.zero_shard, layout.expert_zero_shard
    emb, head = embedding_params(model)
    outer_tensors = [0.0]   # the embedding / output head this stage holds (FSDP's root unit)
    if first:
        outer_tensors.append(emb / tp)
    if last and (pp > 1 or not model.tied_head):
        outer_tensors.append(head / tp)
    outer = sum(outer_tensors)
    dense += outer
    if not getattr(model, "adapter_rank", 0):   # LoRA freezes the embedding and head
        trained_dense += outer
        largest_tensor = max(largest_tensor, *outer_tensors)
    staging = zero_offload_staging_bytes(zero, largest_tensor, params)
    # ZeRO shards dense states over dp x cp, expert states over the expert-DP group
    # (tp x cp x dp / (etp x ep) ranks: MoE parallel folding), or over a zero_shard_size part of each.
    # Gradients and optimizer states are the trained parameters' (LoRA: its adapters only); the
    # trainer's own resident parameters (its fp32 shard under FSDP with fp32 master parameters).
    grad_bpp = params.grad_bytes_per_param
    full = dense + expert
    shard = dense / zero_shard + expert / expert_zero_shard
    trained = trained_dense + trained_expert
    trained_shard = trained_dense / zero_shard + trained_expert / expert_zero_shard
    weights = params.resident_bytes_per_param * (shard if zero >= 3 else full)
    grads = device_gradient_bytes(zero, grad_bpp, trained, trained_shard, params)
    optim = params.optimizer_bytes_per_param * (trained_shard if zero >= 1 else trained)
    logits_bpe = params.logits_bytes_per_elem + params.entropy_logits_bytes_per_elem
    logits = tokens * float(model.head_outputs) / tp * logits_bpe if last else 0.0
    # torch's pipelining under FSDP2 holds the stage's unsharded gradients over the micro-batches
    # and leaves its layers whole after every backward but the last (set_reshard_after_backward(False))
    held_whole = pp > 1 and m > 1 and params.zero3_sync_last_micro_batch_only
    accumulated = trained if held_whole else 0.0
    gathered = zero3_working_set_bytes(largest_layer, outer, params, dense - outer + expert, accumulated,
                                       held_whole, pp=pp) if zero >= 3 else 0.0
    buffers = zero_backward_buffers_bytes(zero, grad_bpp * trained_shard, micro_batches or 1, params,
                                          reduce_ranks=zero_shard)
    copies, step_grads = zero_step_copies(zero, grad_bpp * trained_shard, params)
    step_total = weights + step_grads + optim + copies + kept_buckets + staging
    return weights, grads, optim, logits, gathered, buffers, copies, step_grads, staging, step_total


def device_gradient_bytes(zero: int, grad_bpp: float, trained: float, trained_shard: float,
                          params: MemoryParams) -> float:
    """The gradients the update holds on one device: grad_bpp a trained parameter, its shard from ZeRO-2
    on; none at ZeRO 2-3 where ZeRO-Offload keeps the partition on the host (MemoryParams
    .grad_partition_on_host)."""
    if zero >= 2:
        return 0.0 if params.grad_partition_on_host else grad_bpp * trained_shard
    return grad_bpp * trained


def zero_step_copies(zero: int, grad_partition_bytes: float, params: MemoryParams) -> tuple[float, float]:
    """(copies, gradients) DeepSpeed ZeRO's optimizer step holds on one device beside the weights and
    optimizer state: MemoryParams.zero_step_grad_copy_bytes_per_param of each parameter of the device's
    gradient partition (`grad_partition_bytes`, grad_bytes_per_param each; at ZeRO-3 of at most
    zero_step_sub_group_params of them, one sub-group at a time, where above 0) and the partition itself.
    (0, 0) at ZeRO 0 or without the copies."""
    if zero < 1 or not params.zero_step_grad_copy_bytes_per_param or not params.grad_bytes_per_param:
        return 0.0, 0.0
    copied = grad_partition_bytes / params.grad_bytes_per_param
    if zero >= 3 and params.zero_step_sub_group_params:
        copied = min(copied, params.zero_step_sub_group_params)
    return copied * params.zero_step_grad_copy_bytes_per_param, grad_partition_bytes


def zero_offload_staging_bytes(zero: int, largest_trained_tensor: float, params: MemoryParams) -> float:
    """DeepSpeed ZeRO-Offload's device buffers of the largest trained parameter on one device
    (MemoryParams.zero_offload_device_grad_buffers x `largest_trained_tensor` elements, per device after
    TP / EP, in the weights' dtype: stage_1_and_2.py temp_grad_buffer_for_gpu_offload). 0 outside ZeRO 1-2."""
    if zero not in (1, 2):
        return 0.0
    return params.zero_offload_device_grad_buffers * largest_trained_tensor * params.weight_bytes_per_param


def largest_trained_tensor(layer: LayerShape, tp: int, etp: int) -> float:
    """Elements of `layer`'s largest trained weight tensor on one device: each trainable GEMM's weights
    (an expert's over expert TP, a replicated LoRA half whole, the rest over TP); 0 when it trains none."""
    sizes = [g.params / (1 if g.split == "none" else etp if g.expert else tp) for g in layer.gemms if g.trainable]
    return max(sizes, default=0.0)


def zero_kept_bucket_bytes(zero: int, params: MemoryParams) -> float:
    """The reduction buckets of zero_backward_buffers_bytes that stay allocated between steps on one
    device: MemoryParams.zero_reduce_buckets_kept x zero_reduce_bucket_params in the weights' dtype
    (DeepSpeed's ZeRO-3 IPG bucket, allocated at init). 0 at ZeRO 0."""
    if zero == 0:
        return 0.0
    return params.zero_reduce_buckets_kept * params.zero_reduce_bucket_params * params.weight_bytes_per_param


def zero_backward_buffers_bytes(zero: int, grad_partition_bytes: float, micro_batches: int,
                                params: MemoryParams, *, reduce_ranks: int) -> float:
    """DeepSpeed ZeRO's buffers beside the gradients through a backward, on one device: the
    reduction buckets (MemoryParams.zero_reduce_bucket_params x zero_reduce_buckets in the weights'
    dtype, allocated whole whatever the model's size: stage_1_and_2.py setup_buckets, stage3.py
    _setup_for_real_optimizer), at ZeRO 1-2 zero_allreduce_copies more where the ZeRO group
    (`reduce_ranks`) has several ranks, and under ZeRO-2 with several micro-batches an optimizer step
    (`micro_batches`, the caller's count), zero2_accumulated_grad_partitions more copies of the device's
    gradient partition (`grad_partition_bytes`). 0 at ZeRO 0."""
    if zero == 0:
        return 0.0
    copies = params.zero_allreduce_copies if zero in (1, 2) and reduce_ranks > 1 else 0
    buckets = (params.zero_reduce_buckets + copies) * params.zero_reduce_bucket_params * params.weight_bytes_per_param
    accumulated = params.zero2_accumulated_grad_partitions * grad_partition_bytes \
        if zero == 2 and micro_batches > 1 else 0.0
    return buckets + accumulated


def stage_sums_context(context_len: float, flash: bool, recompute: str) -> float:
    """The attended length _stage_sums is keyed on: ``context_len`` where its activations read it (the
    materialized scores of activation_bytes_per_token: flash off, and no selective recompute, which drops
    them), else 0.0, so that layouts whose micro-batches differ in length alone share one entry (the
    planner's candidates, each at its own heaviest micro-batch: the same floats, computed once)."""
    return context_len if not flash and recompute != "selective" else 0.0


@lru_cache(maxsize=4096)
def _stage_sums(model, chunks: tuple[tuple[int, ...], ...], pp: int, vpp: int, tp: int, ep: int, etp: int, sp: bool,
                recompute: str, flash: bool, context_len: float, params: MemoryParams,
                method: str = "uniform", group: int = 1
                ) -> tuple[tuple[float, float, float, tuple[float, ...], float, float, float, float], ...]:
    """Per pipeline stage: (dense params, expert params, largest layer's params, activation bytes per
    token of each chunk (under full recompute as `method` / `group` keep them: _full_recompute_chunk),
    rebuilt activations (the largest recompute group's, per token), the trained dense and expert params: LoRA's adapters;
    all of them otherwise; the largest trained tensor of its layers, largest_trained_tensor) -- the per-layer sums of _memory_per_device, in the same order (the same
    floats), independent of dp, ZeRO, the micro-batch and the token count, which the candidates of a
    search vary."""
    shapes = layer_shapes(model)
    gated = bool(getattr(model, "gated_ffn", True))
    per_shape: dict[int, tuple[float, float | None, float, float, float, float]] = {}
    full_acts: dict[int, float] = {}
    out = []
    for s in range(pp):
        dense = expert = largest_layer = trained_dense = trained_expert = largest_tensor = 0.0
        per_chunks = []
        rebuilt = 0.0
        for c in range(vpp):
            per_chunk = 0.0
            for i in chunks[c * pp + s]:
                lay = shapes[i]
                info = per_shape.get(id(lay))
                if info is None:
                    info = per_shape[id(lay)] = (lay.dense_params, lay.expert_params if lay.moe else None,
                                                 activation_bytes_per_token(
                        lay, int(model.hidden), int(model.ffn_hidden), gated, tp=tp, sp=sp,
                        recompute=recompute, flash=flash, context_len=context_len, params=params),
                        lay.trainable_dense_params, lay.trainable_expert_params if lay.moe else 0.0,
                        largest_trained_tensor(lay, tp, etp))
                layer_dense = info[0] / tp
                layer_expert = info[1] / (ep * etp) if info[1] is not None else 0.0
                dense += layer_dense
                expert += layer_expert
                trained_dense += info[3] / tp
                trained_expert += info[4] / (ep * etp)
                largest_layer = max(largest_layer, layer_dense + layer_expert)
                largest_tensor = max(largest_tensor, info[5])
                per_chunk += info[2]
            if recompute == "full":   # stored checkpoints (and kept layers), and the group rebuilt in a backward
                layers = chunks[c * pp + s]
                per_chunk, chunk_rebuilt = _full_recompute_chunk(
                    [per_shape[id(shapes[i])][2] for i in layers],
                    [_full_acts(full_acts, shapes[i], model, gated, tp, sp, flash, context_len, params)
                     for i in layers], method, group)
                rebuilt = max(rebuilt, chunk_rebuilt)
            per_chunks.append(per_chunk)
        stage = (dense, expert, largest_layer, tuple(per_chunks), rebuilt, trained_dense, trained_expert, largest_tensor)
        out.append(out[-1] if out and out[-1] == stage else stage)   # equal to its predecessor: one tuple
    return tuple(out)


def _full_acts(cache: dict[int, float], lay: LayerShape, model, gated: bool, tp: int, sp: bool, flash: bool,
               context_len: float, params: MemoryParams) -> float:
    """A layer's full activation bytes per token (as without recompute), cached per shape in `cache`."""
    value = cache.get(id(lay))
    if value is None:
        value = cache[id(lay)] = activation_bytes_per_token(
            lay, int(model.hidden), int(model.ffn_hidden), gated, tp=tp, sp=sp, recompute="none", flash=flash,
            context_len=context_len, params=params)
    return value


def _full_recompute_chunk(inputs: list[float], full: list[float], method: str, group: int) -> tuple[float, float]:
    """(stored, rebuilt) activation bytes per token of a model chunk under full recompute, from its layers'
    checkpointed inputs and full activations, in layer order (megatron-core 0.13.0 transformer_block.py
    _checkpointed_forward): uniform, the input of each group of `group` layers stored and the largest group's
    full activations rebuilt during its backward; block, the first `group` layers' inputs stored (each
    rebuilt alone) and the other layers' full activations kept."""
    stored, rebuilt = 0.0, 0.0
    if method == "block":
        for k, (x, f) in enumerate(zip(inputs, full, strict=True)):
            stored += x if k < group else f
            if k < group:
                rebuilt = max(rebuilt, f)
        return stored, rebuilt
    for start in range(0, len(inputs), group):
        stored += inputs[start]
        rebuilt = max(rebuilt, sum(full[start:start + group]))
    return stored, rebuilt


def forward_memory_per_device(model, layout: TrainLayout, tokens: float, head_tokens: float, capacity_hbm_bytes: float,
                              *, params: MemoryParams, flash_attention: bool = True,
                              context_len: float | None = None) -> MemoryBreakdown:
    """A forward-only pass's memory on one device (old log-prob, reference, reward, critic values: no
    gradients kept), on the stage with the largest total: the weights (as the update holds them), a
    micro-batch of `tokens` (its token budget or rows x longest sequence; CP divides it) through one
    layer at a time (no_grad frees each layer's tensors once the next runs: the largest layer's,
    taken as what its backward would keep, an upper bound of its live tensors), the last stage's
    logits for `head_tokens` at logits_bytes_per_elem + entropy_logits_bytes_per_elem (the loss's
    tensors over the vocabulary), and under ZeRO-3 the gathered parameters of the computing layer, the
    zero3_prefetch_layers ahead of it and the root unit (zero3_reshard_after_forward false: every layer
    of the stage; zero3_max_live_params: the stage's parameters up to that cap). No optimizer state
    or gradients: a trained model's resident state beside the pass is its caller's."""
    tp, pp, cp = layout.tp, layout.pp, layout.cp
    states = memory_per_device(model, layout, 1.0, capacity_hbm_bytes, params=params, flash_attention=flash_attention)
    chunks = layout_stage_layers(int(model.num_layers), layout)
    shapes = layer_shapes(model)
    gated = bool(getattr(model, "gated_ffn", True))
    context = float(tokens if context_len is None else context_len) / cp
    per_token = {id(lay): activation_bytes_per_token(lay, int(model.hidden), int(model.ffn_hidden), gated, tp=tp,
                                                      sp=layout.sp, recompute="none", flash=flash_attention,
                                                      context_len=context, params=params) for lay in shapes}
    emb, head = embedding_params(model)
    logits_bpe = params.logits_bytes_per_elem + params.entropy_logits_bytes_per_elem
    best: tuple[float, ...] | None = None
    for s in range(pp):
        layers = [shapes[i] for c in range(layout.vpp) for i in chunks[c * pp + s]]
        acts = tokens / cp * max((per_token[id(lay)] for lay in layers), default=0.0)
        outer = (emb / tp if s == 0 else 0.0) + (head / tp if s == pp - 1 and (pp > 1 or not model.tied_head) else 0.0)
        logits = head_tokens / cp * float(model.head_outputs) / tp * logits_bpe if s == pp - 1 else 0.0
        gathered = 0.0
        if layout.zero >= 3:
            whole = [lay.dense_params / tp + (lay.expert_params / (layout.ep * layout.expert_tp) if lay.moe else 0.0)
                     for lay in layers]
            # the computing layer and the zero3_prefetch_layers gathered ahead (FSDP prefetches in the
            # forward too), as the update's working set has them less the gradients
            held = (sum(whole) if not params.reshards_after_forward(pp)
                    else (1 + params.zero3_prefetch_layers) * max(whole, default=0.0))
            held += outer if params.zero3_outer_gathered else 0.0
            if params.zero3_max_live_params is not None:   # DeepSpeed's live window (zero3_working_set_bytes)
                held = min(sum(whole) + outer, params.zero3_max_live_params)
            gathered = params.weight_bytes_per_param * held
        total = acts + logits + gathered
        if best is None or total > best[0]:
            best = (total, s, acts, logits, gathered)
    assert best is not None
    _, stage, acts, logits, gathered = best
    return MemoryBreakdown(int(stage), states.weights_bytes, 0.0, 0.0, acts, logits, states.capacity_bytes, gathered)


def forward_batch_field(budget: bool) -> str:
    """The key that sizes a forward-only pass's micro-batches: its token budget, or its rows."""
    return "workload.train_layout.logprob_max_tokens_per_micro_batch" if budget else "schedule.forward_micro_batch"


def check_forward_fits(breakdown: MemoryBreakdown, *, what: str, budget: bool, source: str | None = None) -> None:
    """RlsimError with the breakdown when a forward-only pass does not fit: it names the key that
    sizes the pass's micro-batch (its token budget, or its rows), or the layout where the weights
    alone fill the device (no micro-batch fits then)."""
    if breakdown.fits:
        return
    if breakdown.weights_bytes + breakdown.gathered_bytes > breakdown.capacity_bytes:
        field, fix = ("workload.train_layout", "raise tp / pp (the weights alone fill the device, whatever the "
                      "micro-batch), or use devices with more HBM")
    else:
        field = forward_batch_field(budget)
        size, verl_key = (("token budget", "log_prob_max_token_len_per_gpu") if budget
                           else ("micro-batch", "log_prob_micro_batch_size_per_gpu"))
        fix = (f"lower the forward passes' {size} ({field}, verl {verl_key}), raise tp / pp, or use devices "
               "with more HBM")
    raise RlsimError(f"{what} does not fit in device memory: {breakdown.describe()}", source=source, field=field,
                     fix=fix)


@lru_cache(maxsize=16384)
def _in_flight_cached(act_per_chunk: tuple[float, ...], pp: int, vpp: int, m: int, stage: int) -> float:
    return _in_flight_activations(list(act_per_chunk), pp, vpp, m, stage)


def zero3_working_set_bytes(largest_layer_params: float, outer_params: float, params: MemoryParams,
                            stage_layer_params: float = 0.0, accumulated_params: float = 0.0,
                            held_whole: bool = False, *, pp: int = 1) -> float:
    """Whole parameters and gradients ZeRO-3 / FSDP hold beside the shards on one device at the
    backward's peak (MemoryParams.zero3_*): the computing layer's parameters and gradient, the
    zero3_prefetch_layers gathered ahead (each taken at the stage's largest layer, per device after
    TP / EP), and with zero3_outer_gathered the root unit's embedding / head parameters and
    gradients; all in the weights' dtype. Without resharding after the forward (MemoryParams.
    reshards_after_forward at the layout's `pp`) every layer of the
    stage (`stage_layer_params`, per device after TP / EP) stays whole from its forward, beside the
    computing layer's gradient. With zero3_max_live_params (DeepSpeed's live-parameter window): the
    stage's parameters, the root's among them, up to that cap, beside the computing layer's gradient.
    `accumulated_params`: the trained parameters whose unsharded gradients FSDP accumulates over the
    micro-batches (MemoryParams.zero3_sync_last_micro_batch_only under pp > 1, per device after TP / EP),
    at zero3_accumulated_grad_bytes_per_param on top. `held_whole`: every layer of the stage stays whole
    whatever zero3_reshard_after_forward (torch's pipelining skips the reshard after each backward but a
    stage's last, pipelining/stage.py backward_maybe_with_nosync: from the first backward on the stage's
    layers are all whole)."""
    if params.zero3_max_live_params is not None:
        live = min(stage_layer_params + outer_params, params.zero3_max_live_params)
        return params.weight_bytes_per_param * (live + largest_layer_params)
    if params.reshards_after_forward(pp) and not held_whole:
        layers = (2 + params.zero3_prefetch_layers) * largest_layer_params
    else:
        layers = max(stage_layer_params, largest_layer_params) + largest_layer_params
    root = 2 * outer_params if params.zero3_outer_gathered else 0.0
    return params.weight_bytes_per_param * (layers + root) + params.zero3_accumulated_grad_bytes_per_param * \
        accumulated_params


def _in_flight_activations(act_per_chunk: list[float], pp: int, vpp: int, m: int, stage: int) -> float:
    """Peak of stored activations over the stage's issue order: forwards add a chunk's activations
    until its backward frees them (1F1B: p - s micro-batches in flight; interleaved: the first
    stage holds p (1 + (p - 1) / (p v)) micro-batches' worth, arXiv 2205.05198 sec. 4.2.3)."""
    # The peak is reached within the first few rounds of the order: a few pp's worth of
    # micro-batches show it (the interleaved order needs a multiple of pp; round up).
    m = min(m, 3 * pp)
    if vpp > 1 and m % pp:
        m = pp * max(1, -(-m // pp))
    is_fwd, _micro, chunk = issue_arrays(pp, vpp, m, stage)
    act = np.asarray(act_per_chunk, dtype=float)[chunk]
    live = np.cumsum(np.where(is_fwd, act, -act))  # sequential, as a running sum
    return max(0.0, float(live.max())) if live.size else 0.0


def check_fits(breakdown: MemoryBreakdown, *, what: str, source: str | None = None,
               field: str = "train_layout", layout: TrainLayout | None = None) -> None:
    """RlsimError with the breakdown when the layout does not fit in device memory; it names
    ``field``, the dotted key of the layout (``workload.train_layout`` in a scenario), and with
    ``layout`` only the fixes that layout can still take."""
    if not breakdown.fits:
        raise RlsimError(f"{what} does not fit in device memory: {breakdown.describe()}", source=source,
                         field=field, fix=fit_fix(layout))


# fit_fix's step for a layout of several sequences a micro-batch (rl/llm_costs.py rewords it for packed rows)
SMALLER_MICRO_BATCH = "a smaller micro_batch"


def fit_fix(layout: TrainLayout | None) -> str:
    """What shrinks a training layout's memory, less what it already has (None: all of it)."""
    steps = ["raise tp / pp"]
    if layout is None or layout.zero < 3:
        steps.append("a higher ZeRO stage (zero: 1-3)" if layout is None else f"zero: {layout.zero + 1}-3")
    if layout is None or layout.recompute != "full":
        steps.append("recompute: full")
    if layout is None or layout.max_tokens_per_micro_batch is not None:
        steps.append("a smaller max_tokens_per_micro_batch")
    if layout is None or layout.micro_batch > 1:
        steps.append(SMALLER_MICRO_BATCH)
    return ", ".join(steps) + ", or devices with more HBM"
