"""Modelling constants of the trainer and the rollout engine, and the named training software stacks.

The config layer (DESIGN.md): validated, frozen input models every layer may read. They are fields
of the workload (`workload.train_params.<compute|comm|memory>.<field>`, `workload.inference.<field>`,
`workload.train_software: NAME`), so YAML, `--set` and sweeps reach them; the llm layer
(llm/training.py, llm/train_compute.py, llm/memory.py, llm/inference.py, llm/train_presets.py)
re-exports them under their old names. Formulas and sources: docs/cost-models-training.md and
docs/cost-models-inference.md.
"""
# No `from __future__ import annotations` in this module: pydantic would compile each field's string
# annotation back into an object while the models build at import (start-up, benchmarks/bench_startup.py);
# a forward reference is quoted instead.

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from .errors import RlsimError, validation_error
from .strict_model import StrictModel
from .units import parse_bandwidth

# Share of the data-parallel gradient sync hidden under the backward pass: the one default of the
# training cost model (CommParams) and the heterogeneous step model (planner/hetero.py). 0: the
# gradients are reduced after the pipeline flush, as Megatron-LM 2021 (arXiv 2104.04473 sec. 2.2)
# and Megatron-Core by default (DistributedDataParallelConfig.overlap_grad_reduce = False,
# megatron/core/distributed/distributed_data_parallel_config.py). With --overlap-grad-reduce or
# FSDP prefetch most of it hides: set ~0.8-0.9 (workload.train_params.comm.dp_overlap_fraction).
DP_OVERLAP_FRACTION = 0.0


@dataclass(frozen=True)
class Gate:
    """A switch of the same section that a train_params knob applies under: the switch fields
    (`keys`), whether their values leave the knob applicable (`applies`), the setting that does
    (`needs`, as the refusal names it, and `fix`, how to get it) and what the knob acts on there (`why`)."""

    keys: tuple[str, ...]
    applies: Callable[[Mapping[str, Any]], bool]
    needs: str
    why: str
    fix: str = ""    # default: "set <needs>"


_FLASH = Gate(("flash_attention",), lambda v: bool(v["flash_attention"]), "compute.flash_attention: true",
              "a constant of the flash kernel; materialized attention uses backward_flops_factor and "
              "score_traffic_*_bytes")
_MATERIALIZED = Gate(("flash_attention",), lambda v: not v["flash_attention"], "compute.flash_attention: false",
                     "the score traffic of materialized attention; flash attention keeps no scores")
_OPTIMIZER_OFFLOAD = Gate(("optimizer",), lambda v: bool(v["optimizer"]), "offload.optimizer: true",
                          "the share of the optimizer state offloaded")
_DP_OVERLAP = Gate(("dp_overlap_fraction",), lambda v: v["dp_overlap_fraction"] > 0, "comm.dp_overlap_fraction > 0",
                   "it bounds the share of the gradient sync hidden under backward, none at 0")
# Knobs a switch of their own section makes inapplicable (section -> knob -> gate): given away from
# their defaults with the switch off they would be silently ignored (the models' `_gated_knob_applies`
# refuse them). flash_efficiency_ratio is not here: it also rates the Mamba-2 scans with flash off
# (llm/train_compute.py), so its check needs the models (flash_ratio_read_past, below). Gates that
# depend on the layout (ZeRO 3, cp > 1, TP, EP, PP) are LAYOUT_GATED_COMM, checked where a scenario
# gives the layout (below).
GATED_KNOBS: dict[str, dict[str, Gate]] = {
    "compute": {**dict.fromkeys(("flash_backward_efficiency_ratio", "flash_causal_fraction", "flash_backward_factor"),
                                _FLASH),
                **dict.fromkeys(("score_traffic_fwd_bytes", "score_traffic_bwd_bytes"), _MATERIALIZED),
                "moe_permute_traffic_bytes_per_hidden": Gate(
                    ("moe_permute_fusion",), lambda v: not v["moe_permute_fusion"], "compute.moe_permute_fusion: "
                    "false", "the unfused shuffle's bytes; the fused one reads moe_fused_permute_*",
                    "set compute.moe_permute_fusion: false"),
                **dict.fromkeys(("moe_fused_permute_traffic_bytes_per_hidden",
                                 "moe_fused_permute_token_traffic_bytes_per_hidden"), Gate(
                    ("moe_permute_fusion",), lambda v: bool(v["moe_permute_fusion"]), "compute.moe_permute_fusion: "
                    "true", "the fused shuffle's bytes")),
                "moe_pad_expert_input_to_capacity": Gate(
                    ("moe_expert_capacity_factor",), lambda v: v["moe_expert_capacity_factor"] is not None,
                    "compute.moe_expert_capacity_factor", "each expert padded to its capacity, which the factor sets",
                    "give compute.moe_expert_capacity_factor"),
                "attention_skips_padding": Gate(("flash_attention",), lambda v: bool(v["flash_attention"]),
                                                "compute.flash_attention: true", "the flash kernel's varlen path "
                                                "over the padded rows' real tokens; materialized scores cover the "
                                                "padding")},
    "comm": {
        "tp_userbuffer_pipeline_splits": Gate(("tp_userbuffers",), lambda v: bool(v["tp_userbuffers"]),
                                              "comm.tp_userbuffers: true", "the splits of TE userbuffers' pipelined "
                                              "reduce-scatter"),
        "sp_backward_allgather_overlap_fraction": Gate(
            ("sp_backward_allgather",), lambda v: bool(v["sp_backward_allgather"]), "comm.sp_backward_allgather: true",
            "the hidden share of that backward re-gather"),
        "dp_overlap_window": _DP_OVERLAP,
        "dp_bucket_min_params": _DP_OVERLAP},
    "offload": {"host_link_efficiency": Gate(("params", "grads", "optimizer", "fsdp_cpu_offload"),
                                             lambda v: bool(v["params"] or v["grads"] or v["optimizer"]
                                                            or v["fsdp_cpu_offload"]),
                                             "an offload (offload.params, grads, optimizer or fsdp_cpu_offload: "
                                             "true)", "the rate of the offload copies", "turn one of them on"),
                **dict.fromkeys(("host_param_bytes_per_param", "host_adam_loop_params_per_s"), Gate(
                    ("fsdp_cpu_offload",), lambda v: bool(v["fsdp_cpu_offload"]), "offload.fsdp_cpu_offload: true",
                    "FSDP's CPU offload (its host copies and host optimizer step)")),
                "scope": Gate(("params", "grads", "optimizer"),
                              lambda v: bool(v["params"] or v["grads"] or v["optimizer"]),
                              "an offload (offload.params, grads or optimizer: true)",
                              "when the offload copies are paid", "turn one of them on"),
                "optimizer_fraction": _OPTIMIZER_OFFLOAD,
                **dict.fromkeys(("host_adam_params_per_s", "host_step_bytes_per_param"), Gate(
                    ("optimizer", "scope"), lambda v: bool(v["optimizer"]) and v["scope"] == "optimizer_step",
                    "offload.optimizer: true with offload.scope: optimizer_step",
                    "the host-side optimizer step of Megatron-Core's optimizer_cpu_offload", "set both"))},
    "memory": {"zero3_accumulated_grad_bytes_per_param": Gate(
        ("zero3_sync_last_micro_batch_only",), lambda v: bool(v["zero3_sync_last_micro_batch_only"]),
        "memory.zero3_sync_last_micro_batch_only: true", "the unsharded gradients FSDP accumulates over a "
        "pipelined step's micro-batches")},
}


def _gated_knob_applies(section: str, model: type[StrictModel], value: Any, info: ValidationInfo) -> Any:
    """A gated knob (GATED_KNOBS) given away from its default with its switch off is refused, at its
    own dotted field; at its default (as a whole dump or a stack gives it) it passes. A switch that
    failed its own validation is reported there, not here."""
    name, data = info.field_name or "", info.data or {}
    gate = GATED_KNOBS[section][name]
    if value == model.model_fields[name].default or not all(k in data for k in gate.keys) or gate.applies(data):
        return value
    raise RlsimError(f"applies only with {gate.needs} ({gate.why})",
                     fix=f"remove {section}.{name}, or {gate.fix or 'set ' + gate.needs}")


def without_inapplicable_stack_values(merged: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``merged`` (a stack's train_params dump with the user's keys ``given`` laid over it) with each
    gated knob the user did not give set back to its default where its switch, as merged, is off: a
    stack's value that the user's switch made inapplicable (megatron-core-overlap's dp_bucket_min_params
    under dp_overlap_fraction: 0) acts on nothing and is not the user's to remove. Copies."""
    out = dict(merged)
    models: dict[str, type[StrictModel]] = {"compute": ComputeParams, "comm": CommParams, "offload": OffloadParams,
                                            "memory": MemoryParams}
    for section, gates in GATED_KNOBS.items():
        values, user = out.get(section), given.get(section)
        if not isinstance(values, Mapping):
            continue
        user = user if isinstance(user, Mapping) else {}
        values = dict(values)
        for knob, gate in gates.items():
            if knob in user or knob not in values or not all(k in values for k in gate.keys):
                continue
            try:
                if gate.applies(values):
                    continue
            except TypeError:   # a switch of the wrong type: its own validation reports it
                continue
            values[knob] = models[section].model_fields[knob].default
        out[section] = values
    return out


# Megatron's unfused vocab-parallel cross entropy, (forward, backward) bytes per logit: counted at
# ComputeParams.loss_traffic_bytes_per_logit, whose default it is.
MEGATRON_CROSS_ENTROPY_BYTES = (38.0, 14.0)


# What train_params.compute.pad_rows_to accepts (ComputeParams.pad_rows_to), as its error's fix says.
PAD_ROWS_TO_VALUES = ("give a positive token count (every padded row that wide), batch (every row as wide as the "
                      "longest sample of the batch the pass is given) or null (each micro-batch padded to its "
                      "longest)")


class ComputeParams(StrictModel):
    """Compute constants; reachable from YAML as `train_params.compute.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str = "bf16"
    # The output layer's GEMMs in this dtype where it is not `dtype` (None: `dtype`): TRL's
    # cast_lm_head_to_fp32 runs the head in fp32 outside autocast, at the device's fp32 peak (torch's
    # default matmul precision "highest": no TF32) with 4-byte operands.
    head_dtype: Literal["fp32", "bf16", "fp16"] | None = None
    # Shape ramp of GEMM efficiency: achieved / plateau = 1 / (1 + gemm_ramp_dim (1/m + 1/n) +
    # gemm_ramp_k / k) for (m x k) . (k x n). Two mechanisms: the A and B panels carry a fixed
    # handling cost per element (packing into the kernel's layout, partial output tiles) amortised
    # over the output dimension along which they are reused (n, m); the C accumulators are loaded and
    # stored once per reduction (kernel prologue / epilogue), amortised over k. With one small output
    # dimension d this is d / (d + gemm_ramp_dim): half the plateau at d = gemm_ramp_dim (before the
    # memory roofline). Defaults 16: one tensor-core MMA fragment edge (mma.m16n8k16, PTX ISA for
    # sm_80 / sm_90) of fixed work per dimension; they move a 2048-token Megatron GEMM by ~1-2%
    # while a 16-row GEMM runs at half plateau (NVIDIA "Matrix Multiplication Background" guide:
    # small-batch GEMMs far below peak). `rlsim calibrate` fits both per device.
    gemm_ramp_dim: float = Field(16.0, ge=0)
    gemm_ramp_k: float = Field(16.0, ge=0)
    # Fixed time per GEMM / attention kernel (launch, dispatch). None: the device's
    # DeviceSpec.launch_overhead_s (catalog; a calibrated profile's fitted per-GEMM overhead).
    gemm_launch_s: float | None = Field(None, ge=0)
    # FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward (arXiv 2307.08691, fig. 4)
    # against ~80% for large GEMMs: ~0.85 of the GEMM plateau.
    flash_attention: bool = True
    flash_efficiency_ratio: float = Field(0.85, gt=0, le=1)
    # The backward kernel runs below the forward one: 63% of A100 peak against 73% forward in the
    # same FlashAttention-2 measurements (arXiv 2307.08691 fig. 4-5; it recomputes the scores and
    # accumulates dQ with atomics), i.e. 0.85 x 63 / 73 = 0.73 of the GEMM plateau. None: the
    # forward's ratio (the behaviour before this field).
    flash_backward_efficiency_ratio: float | None = Field(0.73, gt=0, le=1)
    # Causal flash kernels skip the masked half of the score matrix (arXiv 2307.08691 sec. 3.1).
    flash_causal_fraction: float = Field(0.5, gt=0, le=1)
    # Flash backward recomputes the scores: 2.5x the forward FLOPs (arXiv 2307.08691 sec. 3.1:
    # 5 matmuls backward vs 2 forward).
    flash_backward_factor: float = Field(2.5, gt=0)
    # Materialized attention (no flash; Megatron-LM 2021 CoreAttention): bytes moved per score
    # element. Forward: baddbmm writes 2, fused scale-mask-softmax reads 2 + writes 2, dropout reads
    # 2 + writes 2 + mask 1, the A.V bmm reads 2 -> 13. Backward: the A.V grad bmm writes 2, dropout
    # backward reads 2 + mask 1 + writes 2, softmax backward reads 2 + 2 and writes 2, the Q.K grad
    # bmms read 2 -> 15.
    score_traffic_fwd_bytes: float = Field(13.0, ge=0)
    score_traffic_bwd_bytes: float = Field(15.0, ge=0)
    # Elementwise traffic per token per layer, forward (bytes per hidden unit, 2-byte activations):
    # 2 LayerNorms read 2 + write 2 each -> 8; 2 bias-dropout-residual-adds read 2 + 2, write 2 and
    # a 1-byte mask each -> 14; activation function per FFN unit: GELU read 2 + write 2 -> 4, SwiGLU
    # reads 2 x 2 and writes 2 -> 6.
    norm_traffic_bytes_per_hidden: float = Field(8.0, ge=0)
    residual_traffic_bytes_per_hidden: float = Field(14.0, ge=0)
    act_traffic_bytes_per_ffn: float = Field(4.0, ge=0)
    gated_act_traffic_bytes_per_ffn: float = Field(6.0, ge=0)
    # Rotary position embedding, bytes per rotated query / key element (LayerShape.rope_elements),
    # forward. 0: not counted, as before this field, for Megatron's fused RoPE kernel (Megatron-LM
    # applies it unless --no-rope-fusion; its read and write of q and k, 4 bytes an element, are left
    # out); Hugging Face's unfused apply_rotary_pos_emb is 20, Liger's in-place kernel 4 (below).
    rope_traffic_bytes_per_element: float = Field(0.0, ge=0)
    # Megatron-Core's moe_permute_fusion (TransformerConfig; 0.12 / 0.13 moe/moe_utils.py permute,
    # sort_chunks_by_idxs, unpermute with fused=True): the token shuffle below runs as Transformer Engine's
    # fused kernels (fused_permute_with_probs, fused_sort_chunks_by_index(_with_probs), fused_unpermute),
    # priced at moe_fused_permute_* instead of moe_permute_traffic_bytes_per_hidden. False: Megatron-Core's
    # default (the unfused torch ops).
    moe_permute_fusion: bool = False
    # MoE token shuffling around the experts, bytes per hidden unit per routed token copy (each
    # token's top-k copies), forward, as Megatron-Core's all-to-all token dispatcher moves them
    # (megatron/core/transformer/moe/token_dispatcher.py with moe_utils.py, unfused): `permute`
    # gathers the k copies into expert order (read 2, write 2); `sort_chunks_by_idxs` regroups the
    # received chunks by local expert after the dispatch and back before the combine (read 2 + write
    # 2 each); `unpermute` scales the copies by their routing probabilities and sums them back into
    # token order (read 2, write 2) -> 16. The all-to-alls themselves are communication
    # (train_params.comm); the router's E logits per token are small beside this and not counted.
    # Backward: backward_traffic_factor x. 0 turns the term off (the behaviour before this field).
    moe_permute_traffic_bytes_per_hidden: float = Field(16.0, ge=0)
    # The fused shuffle (moe_permute_fusion), forward, each of Transformer Engine's kernels reading its
    # input once and writing its output once (TE 2.5 pytorch/triton/permutation.py): _permute_kernel
    # loads each token's row once and stores it to each of its k destination rows; _sort_chunks_by_idxs_
    # kernel copies each received row once (after the dispatch, and back before the combine);
    # _unpermute_kernel loads each token's k rows, sums them in fp32 registers and stores the token once.
    # Per routed copy: the permute's write 2, the two chunk sorts' read 2 + write 2 each, the unpermute's
    # read 2 -> 12; per token: the permute's read 2 and the unpermute's write 2 -> 4 (the unfused ops
    # read and write every row per copy: 16 a copy). A token's shuffle is k x 12 + 4 bytes a hidden unit.
    # Backward: the same bytes (each kernel's backward is its mirror: the permute's the unpermute kernel,
    # the unpermute's the permute kernel, the chunk sort's by its map; permutation.py), not
    # backward_traffic_factor x. The kernels' routing-map index (tokens x experts, one byte each) is
    # small beside the rows and not counted.
    moe_fused_permute_traffic_bytes_per_hidden: float = Field(12.0, ge=0)
    moe_fused_permute_token_traffic_bytes_per_hidden: float = Field(4.0, ge=0)
    # Under expert parallelism (ep > 1) the routed tokens of the busiest EP rank over its mean share:
    # Megatron-Core runs MoE dropless by default (moe_expert_capacity_factor None; moe/moe_layer.py,
    # token_dispatcher.py MoEAlltoAllTokenDispatcher), so each micro-batch's routed-expert GEMMs and
    # activation, its dispatch / combine all-to-alls and the expert-TP gathers run at the busiest
    # rank's rows while the others wait at the combine. None: derived from the routing statistics of
    # a balanced router (llm/expert_load.py: the expected maximum of the per-rank multivariate
    # hypergeometric counts, 1 + e(ep) sqrt((E - k) / (E - 1) / mean rows), a few % at thousands of
    # tokens a micro-batch). A number >= 1: a measured factor that includes the router's own skew
    # (Megatron-Core logs the tokens per expert with --moe-per-layer-logging), which replaces it.
    moe_load_imbalance: float | None = Field(None, ge=1)
    # Megatron-Core's token dropping (TransformerConfig.moe_expert_capacity_factor; 0.13.0 moe/moe_utils.py
    # get_capacity, topk_softmax_with_capacity): each expert takes at most ceil(tokens x k / E x factor) of a
    # rank's routed copies, so an EP rank receives at most factor x its mean rows. Under ep > 1 the busiest
    # rank's factor above becomes min(it, factor): an upper bound (capping each expert also trims ranks under
    # the cap) that leaves out the ceiling's under-a-row an expert. None: dropless, Megatron-Core's default.
    moe_expert_capacity_factor: float | None = Field(None, gt=0)
    # moe_pad_expert_input_to_capacity (read with the factor; Megatron-Core refuses it without one): each
    # expert computes its whole capacity, padded (token_dispatcher.py MoEAlltoAllTokenDispatcher drop_and_pad):
    # every rank's routed rows and exchanges are factor x the mean, whatever the routing.
    moe_pad_expert_input_to_capacity: bool = False
    # Megatron-Core's moe_router_dtype (TransformerConfig; None: the activations' dtype, its default): the
    # router's logits GEMM (tokens x hidden x experts: 0.13.0 moe/router.py gating, moe/moe_utils.py
    # router_gating_linear) and the routing probabilities in that dtype.
    # - fp64: the forward, data and weight gradient GEMMs by torch.mm in fp64 (router_gating_linear skips
    #   Transformer Engine's GEMM for fp64), at the device's fp64 peak (cuBLAS's DGEMM runs on the FP64
    #   tensor cores: 67 TFLOP/s on an H100 SXM), 8-byte operands; each casts its bf16 operand up and its
    #   result back (input and weight .to(fp64), the gradients .to(bf16)): (activation_bytes + 8) x
    #   (m k + k n) bytes beside each GEMM (m tokens, k hidden, n experts).
    # - fp32: the forward by Transformer Engine's general GEMM on the bf16 operands with an fp32 output (at
    #   the activations' peak, as None); the data and weight gradients on fp32 operands (the weight and the
    #   input cast up, the results cast back: (activation_bytes + 4)(m k + k n) bytes each) at the device's
    #   fp32 peak: torch's fp32 matmul default (torch.backends.cuda.matmul.allow_tf32 False since 1.12: the
    #   non-tensor fp32 peak, 67 TFLOP/s on an H100 SXM against TF32's 495); TE's compute type for fp32
    #   operands is in its C++ library, not read here. Megatron-Core 0.12 ran all three in fp32
    #   (F.linear(input.to(fp32), weight.to(fp32))).
    # The combine's reduce-scatter in the probabilities' dtype (0.13.0 moe/token_dispatcher.py: the alltoall
    # dispatcher's expert-TP one, combine_preprocess, and the allgather dispatcher's, token_combine:
    # .to(probs.dtype)) and its backward all-gather move this dtype's bytes. The routing arithmetic on the
    # tokens x experts scores and the probabilities carried with the routed copies are small beside the
    # hidden rows and not counted.
    moe_router_dtype: Literal["fp32", "fp64"] | None = None
    # Backward of an elementwise op reads its saved input and the incoming gradient and writes the
    # outgoing one: ~2x the forward traffic.
    backward_traffic_factor: float = Field(2.0, ge=0)
    # Backward of the attention core when its scores are materialized (flash_attention: false; the
    # flash kernel's is flash_backward_factor) and of the Mamba-2 SSD scans: the gradients of both
    # operands of each of their matmuls, each the forward's size (2x forward FLOPs). The linear layers'
    # GEMMs are priced one by one instead (forward, data gradient, weight gradient: train_compute.py
    # _gemm_sums), not with this factor.
    backward_flops_factor: float = Field(2.0, gt=0)
    # Vocab-parallel cross entropy on the last stage, bytes per logit, as Megatron's unfused kernel
    # sequence runs it (megatron/core/tensor_parallel/cross_entropy.py, the default path:
    # --cross-entropy-loss-fusion off; Megatron-LM 2021 mpu/cross_entropy.py on output.float() is
    # the same). Forward: the bf16 logits cast to fp32 (read 2, write 4), max over the vocab (read
    # 4), in-place subtract of the max (read 4, write 4), in-place exp (read 4, write 4), sum (read
    # 4), in-place divide to the softmax kept for backward (read 4, write 4): 38. Backward: the
    # softmax scaled in place by the loss gradient (read 4, write 4; the one-hot subtraction
    # touches one logit per token) and cast back to bf16 for the GEMMs (read 4, write 2): 14.
    # Together 52 (was 16: one fp32 write, one softmax read + write, one gradient write).
    loss_traffic_bytes_per_logit: float = Field(sum(MEGATRON_CROSS_ENTROPY_BYTES), ge=0)
    # The forward's share of it: 38 of the 52 bytes above (the backward's 14), so a forward-only pass
    # (old log-probs, reference) pays 38 / 52 of the loss traffic. 0.5 was the split before this field.
    loss_forward_share: float = Field(MEGATRON_CROSS_ENTROPY_BYTES[0] / sum(MEGATRON_CROSS_ENTROPY_BYTES), ge=0, le=1)
    # The output layer's forward GEMM redone in the backward: a fused LM head that keeps no logits for
    # it (TRL 1.16's add_fused_lm_head recomputes each cuBLAS tile there, kernels/chunked_logprob.py).
    logits_recompute: bool = False
    # The output layer projects the response positions alone, where the pass is given them: TRL's fused
    # LM head scores the completion tokens (their labels; the prompt's and the padding's are -100).
    head_response_only: bool = False
    # The policy's entropy over the vocabulary, bytes per logit, in the pass these params price: set
    # per pass by rl/llm_costs.py from workload.entropy (its kernel's ENTROPY_KERNEL_BYTES) for the
    # passes that compute it, 0 in the others; not a train_params key (a given value is refused).
    # Forward, and the backward's where the entropy is in the update's loss.
    entropy_traffic_bytes_per_logit: float = Field(0.0, ge=0)
    entropy_backward_traffic_bytes_per_logit: float = Field(0.0, ge=0)
    activation_bytes: float = Field(2.0, gt=0)
    # Width of a padded row (schedule.distqueue.packed: false), tokens: None pads each micro-batch to
    # its longest sample (a collator's dynamic padding, the behaviour before this field); a count pads
    # every row to it, as verl's fixed-shape batches do (prompts left-padded to data.max_prompt_length
    # by its RLHFDataset, responses right-padded to max_response_length: vllm_rollout_spmd.py
    # pad_2d_list_to_length, 0.6.0), which its importer sets to their sum. "batch" pads every row to
    # the longest sample of the batch the pass is given (the step's samples: the forward passes; the
    # update's mini-batch), whatever micro-batch it lands in: TRL 1.16's GRPOTrainer pads the
    # generation batch's prompts and completions before slicing it (grpo_trainer.py
    # _generate_and_score_completions: pad), SkyRL 0.3.0 the training batch to max(prompt + response)
    # (dataset/preprocess.py convert_prompts_responses_to_batch_tensors); their importers set it. Every
    # GEMM, norm and the logits run over the padding; the attention too, unless attention_skips_padding.
    pad_rows_to: Annotated[int, Field(gt=0)] | Literal["batch"] | None = None
    # Padded rows' attention over their real tokens alone (schedule.distqueue.packed: false, flash
    # attention), whatever width the rows take (pad_rows_to or the micro-batch's longest):
    # transformers' flash_attention_2 path given a padding mask unpads the rows (transformers 4.57.1
    # modeling_flash_attention_utils.py _flash_attention_forward: _upad_input, then flash_varlen_fn over
    # cu_seqlens), so the attention core runs the sum of the rows' squared real lengths while the
    # GEMMs, norms, activations and logits run over the padding (the kernel's shape ramp reads that sum
    # over the padded tokens, as for packed rows padded to one pipeline shape). False: the attention
    # runs at the padded width (rows x width squared), as SDPA / eager with a mask and Megatron's
    # padded SBHD rows (causal mask) do; the behaviour before this field. verl's importer sets it for
    # its FSDP workers without use_remove_padding (attn_implementation flash_attention_2 unless
    # override_config says otherwise: verl 0.6.1 workers/fsdp_workers.py _build_model_optimizer).
    attention_skips_padding: bool = False

    @field_validator(*GATED_KNOBS["compute"], mode="after")
    @classmethod
    def _attention_path_applies(cls, value: Any, info: ValidationInfo) -> Any:
        """The flash kernel's constants apply with flash attention, the score traffic without it."""
        return _gated_knob_applies("compute", cls, value, info)

    @field_validator("pad_rows_to", mode="wrap")
    @classmethod
    def _a_width_or_the_batch(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One error at the field, naming what it takes: the union's integer branch would report a
        second path (pad_rows_to.constrained-int) beside the literal's."""
        try:
            return handler(value)
        except ValidationError:
            raise RlsimError(f"is not a row width: {value!r}", fix=PAD_ROWS_TO_VALUES) from None

    @field_validator("entropy_traffic_bytes_per_logit", "entropy_backward_traffic_bytes_per_logit", mode="after")
    @classmethod
    def _set_per_pass(cls, value: float, info: ValidationInfo) -> float:
        """The cost layer sets these per pass (model_copy, unvalidated); a given value would act on every pass."""
        if value:
            which = "forward" if info.field_name == "entropy_traffic_bytes_per_logit" else "backward"
            raise RlsimError("is set per pass from workload.entropy (the passes that compute the entropy over the "
                             "vocabulary)",
                             fix=f"remove it, and give workload.entropy with {which}_bytes_per_logit")
        return value


# The last stage's logits at the loss, bytes per element (MemoryParams.logits_bytes_per_elem):
# Megatron's vocab-parallel cross entropy casts the bf16 logits to fp32 (megatron-core 0.10.0
# tensor_parallel/cross_entropy.py calculate_logits_max: vocab_parallel_logits.float()) while the
# model's forward still holds the bf16 ones (models/gpt/gpt_model.py: compute_language_model_loss(labels,
# logits)), then turns the copy into the softmax in place and keeps it for the backward
# (save_for_backward(exp_logits, ...)), whose gradient is cast back to bf16: 2 + 4 at either peak.
MEGATRON_LOGITS_BYTES_PER_ELEM = 6.0
# transformers' lm_head writes bf16 logits (no fp32 upcast without labels), and verl's FSDP actor takes
# the log-probs with flash-attn's Triton cross entropy (verl 0.6 utils/torch_functional.py
# logprobs_from_logits, inplace_backward=True without the entropy: its gradient overwrites the logits;
# the temperature's div_ is in place too): the bf16 logits alone.
HF_LOGITS_BYTES_PER_ELEM = 2.0
# Where verl's packed path computes the entropy in the update (calculate_entropy: entropy_coeff != 0,
# or 0.7's actor.calculate_entropy), it turns flash-attn's in-place backward off (verl 0.6.1 / 0.7.0
# workers/actor/dp_actor.py _forward_micro_batch, use_remove_padding: `inplace_backward = False` if
# calculate_entropy; 0.9.1 workers/engine/fsdp/transformer_impl.py the same; utils/torch_functional.py logprobs_from_logits_flash_attn hands it to flash-attn's
# cross_entropy_loss): the entropy's backward still reads the logits, so the cross entropy's backward
# writes the logits' gradient to a new tensor of their shape and dtype (flash-attn 2.x
# flash_attn/ops/triton/cross_entropy.py: `dlogits = logits if ctx.inplace_backward else
# torch.empty_like(logits)`, cited from memory: its CUDA wheel is not readable here), 2 bytes a bf16
# logit the update holds beside the logits (workload.entropy.logprob_grad_bytes_per_logit).
FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT = 2.0


# MemoryParams.zero3_reshard_after_forward's value for AReaL archon's default policy: reshard unless pipelined
RESHARD_UNLESS_PIPELINED = "unless_pipelined"


class MemoryParams(StrictModel):
    """Memory constants; reachable from YAML as `train_params.memory.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Mixed-precision Adam: bf16 weights, fp32 master weights + momentum + variance (ZeRO arXiv
    # 1910.02054 sec. 3.1) and the gradient buffer in the dtype of the data-parallel reduction:
    # Megatron-Core's DDP allocates it fp32 under grad_reduce_in_fp32 (megatron-core 0.16
    # distributed_data_parallel.py: grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype),
    # which Megatron-LM forces for bf16 and Megatron-Bridge's bf16_mixed sets (megatron-bridge 0.3.1
    # training/mixed_precision.py); verl's FSDP keeps fp32 gradients of its fp32 master parameters. So
    # 18 bytes per parameter before sharding, as CommParams.grad_reduce_bytes_per_param reduces them;
    # the 2021 / 2022 stacks keep the ZeRO paper's bf16 gradients (16 bytes) with their 2-byte reduction.
    weight_bytes_per_param: float = Field(2.0, gt=0)      # bf16 weights
    grad_bytes_per_param: float = Field(4.0, ge=0)        # fp32 gradient buffer (main_grad)
    optimizer_bytes_per_param: float = Field(12.0, ge=0)  # fp32 master weights + momentum + variance
    # The gradient buffer stays allocated between training steps, so a trained model holds it beside
    # its forward passes, the other trained model's update (PPO) and a colocated rollout engine
    # unless the per-phase offload moves it (train_params.offload.grads) or frees it with the weights
    # (offload.params) or the colocated switch moves or frees it (schedule.switch.offload_optimizer /
    # free_gradients). Megatron-Core's DDP allocates one grad_data tensor per buffer at wrap time and
    # only zeroes it at each step (megatron-core 0.13.0 distributed/param_and_grad_buffer.py
    # _ParamAndGradBuffer.__init__: grad_data = torch.zeros(numel), reset(): grad_data.zero_();
    # distributed_data_parallel.py zero_grad_buffer), the whole TP / PP shard on every DP rank under
    # the distributed optimizer too (reduce-scattered in place): True for the Megatron stacks. verl's
    # Megatron workers free it only under param_offload (verl 0.6.1 / 0.7.0 utils/megatron_utils.py
    # offload_megatron_model_to_cpu: grad_data.storage().resize_(0); load_megatron_model_to_gpu
    # (load_grad=False) for the log-prob passes and the rollout's weight export; actor.megatron
    # .grad_offload is read and never used). Hugging Face models under FSDP / DeepSpeed drop theirs
    # with optimizer.zero_grad() (set_to_none) after the update (verl 0.6.1 workers/actor/dp_actor.py
    # update_policy): False for the hf-transformers stacks.
    grad_buffer_persists: bool = True
    # Bytes a parameter of the gradients kept between steps where grad_buffer_persists, of the
    # grad_bytes_per_param the update holds (the same partition: whole below ZeRO-2): a stack whose
    # update holds more gradient buffers than it keeps. DeepSpeed's BF16_Optimizer (ZeRO-1 with
    # data_types.grad_accum_dtype fp32) allocates its whole fp32 gradient buffer once at init (deepspeed
    # 0.19.6 runtime/bf16_optimizer.py: fp32_groups_gradients_flat = torch.zeros_like(...)) and only
    # zeroes it after each step (clear_hp_grads: flat_gradients.zero_()), while zero_grad(set_to_none)
    # frees the bf16 param.grad autograd writes beside it: 4 of its 6 (frameworks/deepspeed_zero.py).
    # None: all of grad_bytes_per_param (Megatron-Core's DDP keeps its one buffer). Read by
    # rl/llm_costs.py kept_gradient_bytes.
    kept_grad_bytes_per_param: float | None = Field(None, ge=0)
    # Bytes a parameter of the trainer's own resident parameters (its ZeRO-3 / FSDP shard; the whole
    # copy below ZeRO 3): None, weight_bytes_per_param. A trainer that loads its model in fp32 under
    # FSDP's mixed precision keeps no bf16 copy at rest: its fp32 shard is the master copy (4), the
    # bf16 parameters exist only while gathered (the working set, in weight_bytes_per_param), and
    # its optimizer state is Adam's m and v (optimizer_bytes_per_param 8): 16 bytes where
    # Megatron's distributed optimizer keeps 18 (verl's FSDP actor, verl 0.6.1 workers/
    # fsdp_workers.py: "we have to create model in fp32. Otherwise, the optimizer is in bf16";
    # the importers set it: simulator/frameworks/). weight_bytes_per_param still sizes the gathers
    # on the wire, the gathered working set and the frozen models' weights.
    resident_weight_bytes_per_param: float | None = Field(None, gt=0)
    # Korthikanti Table 2 counts 2-byte activations and 1-byte dropout masks; the per-token element
    # counts below are derived from the layer's shapes in the same way (see activation_bytes_per_token).
    activation_bytes: float = Field(2.0, gt=0)
    mask_bytes: float = Field(1.0, ge=0)
    # Bytes a layer norm keeps per hidden element for its backward; None: its input in the activations'
    # dtype (activation_bytes: Megatron's fused LayerNorm / RMSNorm, Korthikanti's 2 s b h per norm).
    # The stacks whose norm keeps more say so (HF_SAVED_RMSNORM_BYTES_PER_HIDDEN).
    norm_saved_bytes_per_hidden: float | None = Field(None, ge=0)
    # Tensors of the FFN's inner width a gated FFN (and each MoE expert) keeps: Megatron's fused
    # SwiGLU keeps its input (gate and up, 2) and fc2 its output (1): 3, Korthikanti's 1.5 x the
    # up-projection's output. Unfused gates keep more (HF_SAVED_GATED_FFN_TENSORS).
    gated_ffn_saved_tensors: float = Field(3.0, gt=0)
    # Attention-score storage without flash attention: 5 a s b bytes per token (QK^T 2, softmax 2,
    # dropout mask 1; arXiv 2205.05198 eq. 1). Flash attention keeps none of it.
    score_bytes_per_elem: float = Field(5.0, ge=0)
    # Bytes per element of the last stage's logits at the loss's peak, by the stack's loss path:
    # Megatron's vocab-parallel cross entropy holds the bf16 logits and their fp32 copy (6:
    # MEGATRON_LOGITS_BYTES_PER_ELEM); transformers' bf16 logits with flash-attn's cross entropy,
    # which writes its gradient in place (2: HF_LOGITS_BYTES_PER_ELEM). The update's and the
    # forward-only passes' (log-prob, reference) alike.
    logits_bytes_per_elem: float = Field(MEGATRON_LOGITS_BYTES_PER_ELEM, ge=0)
    # Bytes per logit more where the pass computes the entropy over the vocabulary (workload.entropy:
    # ENTROPY_KERNEL_MEMORY_BYTES of its kernel; set by the entropy's passes, 0 elsewhere).
    entropy_logits_bytes_per_elem: float = Field(0.0, ge=0)
    # Share of HBM a training job can use: CUDA context, NCCL buffers and allocator fragmentation
    # take the rest (assumption: ~8% of an H100's 80 GiB, i.e. ~7 GB; overridable).
    hbm_usable_fraction: float = Field(0.92, gt=0, le=1)
    # ZeRO-3 / FSDP hold whole parameters beside their shards while a layer computes. With prefetch
    # the next layer's are gathered too: torch FSDP's BackwardPrefetch.BACKWARD_PRE "at the peak holds
    # the current set of parameters, next set of parameters, and current set of gradients" (torch
    # 2.13 distributed/fsdp/api.py; the FSDP constructor's default, which verl keeps). Layers gathered
    # ahead of the computing one; the computing layer's unsharded gradient is counted in the weights'
    # dtype (autograd's; the reduction dtype's copy inside the reduce-scatter is not counted).
    zero3_prefetch_layers: int = Field(1, ge=0)
    # The root unit (embedding, final norm, output head: FSDP wraps each decoder layer, the rest is
    # the root's) is not resharded after forward: torch FSDP _runtime_utils._post_forward "Do not
    # free the root's parameters in the post-forward for FULL_SHARD" (FSDP2 _fsdp_state.py: "For the
    # root, do not reshard after forward"), so its parameters stay whole through forward and
    # backward, and its unsharded gradients from the head's backward to the end. False: gathered
    # and freed like a layer (counted in neither).
    zero3_outer_gathered: bool = True
    # torch FSDP2 fully_shard(reshard_after_forward=...) (verl fsdp_config.reshard_after_forward, read
    # only by its fsdp2 strategy): False keeps each layer's gathered parameters from its forward
    # through its backward, so the backward gathers nothing (one all-gather per layer and micro-batch,
    # not two: llm/training.py), and at the backward's peak every layer of the stage is whole on the
    # device beside the computing layer's gradient (the working set above: zero3_prefetch_layers is
    # then not read). True: FSDP's default, each layer resharded after its forward. "unless_pipelined"
    # (RESHARD_UNLESS_PIPELINED): true without pipeline stages, false with them (pp > 1), AReaL archon's
    # default reshard_after_forward_policy (areal 1.0.4 experimental/models/archon/qwen2|qwen3/infra/
    # parallelize.py apply_fsdp: "default" reshards each block unless pipelines are on, "to avoid
    # per-microbatch all-gathers"), the areal-archon stack's value; read by the layout's pp
    # (reshards_after_forward), so `rlsim plan` and layout: auto price each layout as a run of it.
    zero3_reshard_after_forward: bool | Literal["unless_pipelined"] = True
    # FSDP2 stages under torch.distributed.pipelining (pp > 1): every micro-batch's backward but the last
    # runs with set_is_last_backward(False), set_reshard_after_backward(False) and
    # set_requires_gradient_sync(False) (torch 2.13 distributed/pipelining/stage.py
    # _PipelineStageBase.backward_maybe_with_nosync, FSDPModule branch), and the stage's post-backward
    # (reduce-scatter, reshard) runs once after its last backward (stage.py perform_reduce_grad, the
    # REDUCE_GRAD action schedules.py _add_reduce_grad adds after a stage's n_microbatches-th backward;
    # Schedule1F1B calls it after its backward loop). So a step reduce-scatters each layer's gradients
    # once, not per micro-batch, and a layer stays gathered from its first gather to that reduction:
    # with zero3_reshard_after_forward false one all-gather a step (the first forward), with it true the
    # forward's and the backward's per micro-batch as without pipelines (an upper bound: a backward right
    # after the same chunk's backward finds it whole). Meanwhile the stage's unsharded gradients
    # accumulate in FSDP's reduce dtype (zero3_accumulated_grad_bytes_per_param) beside its whole
    # parameters. The forward-only passes gather once a pass where zero3_reshard_after_forward is false
    # (FSDP2 reshards nothing after a forward then: _fsdp_param_group.py reshard). AReaL's archon engine
    # runs its pipelines so (areal 1.0.4 experimental/engine/archon_runner.py schedule.step over
    # PipelineStages of fully_shard-ed model parts): true on the areal-archon stack. Read at pp > 1
    # under ZeRO-3 only (the stacks' other pipelines are Megatron's).
    zero3_sync_last_micro_batch_only: bool = False
    # Bytes a parameter of those accumulated unsharded gradients: FSDP2 moves each backward's gradient
    # into an accumulator of the MixedPrecisionPolicy's reduce_dtype where it differs from the
    # parameters' (torch 2.13 distributed/fsdp/_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed,
    # accumulate_unsharded_grad_if_needed); archon's is float32 (areal 1.0.4 archon_engine.py
    # parallelize_fn(reduce_dtype=torch.float32)): 4. Read with zero3_sync_last_micro_batch_only only.
    zero3_accumulated_grad_bytes_per_param: float = Field(4.0, gt=0)
    # DeepSpeed ZeRO-3's live-parameter cap, in elements a device (zero_optimization.
    # stage3_max_live_parameters: deepspeed 0.19.6 runtime/zero/config.py default 1e9, which OpenRLHF's
    # "auto" and accelerate's zero3 config keep: runtime/config_utils.py drops "auto" values). DeepSpeed
    # gathers each submodule's own parameters (a Linear, a norm, the embedding), not a decoder layer, and
    # its prefetcher (runtime/zero/partitioned_param_coordinator.py fetch_sub_module) starts up to
    # stage3_prefetch_bucket_size (5e7) more elements at every submodule it enters while the parameters
    # available stay under this cap; a transformer's submodules enter more often than they consume
    # (a Llama layer: ~12 submodules, ~2.2e8 parameters at 8B), so the window fills to the cap and
    # holds there: the whole parameters held at the backward's peak are min(the stage's parameters per
    # device, the cap) beside the computing layer's gradient (a submodule's tensor may overshoot the cap
    # by its size: left out), the embedding and head gathered and released like the rest. None: FSDP's
    # layer-by-layer working set (zero3_prefetch_layers, zero3_outer_gathered), which it then replaces.
    zero3_max_live_params: float | None = Field(None, gt=0)
    # DeepSpeed ZeRO-1 / 2's gradient reduction buckets (deepspeed 0.19.6 runtime/zero/stage_1_and_2.py
    # DeepSpeedZeroOptimizer.setup_buckets: at the backward's first gradient hook, with
    # contiguous_gradients (DeepSpeed's default, zero/config.py), one torch.empty(reduce_bucket_size) in
    # the model's dtype, and a second "to avoid data access conflict when overlap_comm is enabled";
    # _release_ipg_buffers frees them at the backward's end), and the copy allreduce_bucket makes of a bucket
    # spanning more than one rank's slice to all-reduce it (tensor = self.flatten(bucket): a torch.cat under
    # reduce_scatter, DeepSpeed's default): the elements of a bucket
    # (zero_optimization.reduce_bucket_size: DeepSpeed's default 5e8, which OpenRLHF's "auto" keeps,
    # runtime/config_utils.py drops "auto" values) and how many (ZeRO-1 / 2: a bucket and the copy, 2; 3 with
    # overlap_comm: frameworks/deepspeed_zero.py). ZeRO-3 (runtime/zero/stage3.py) keeps
    # one contiguous bucket of reduce_bucket_size elements from its init (_setup_for_real_optimizer: an
    # IPG bucket a communication dtype, whatever overlap_comm), and with reduce_scatter (OpenRLHF sets
    # it, DeepSpeed's default) each full bucket's reduction copies it (__avg_scatter_grads ->
    # runtime/comm/coalesced_collectives.py reduce_scatter_coalesced: torch.cat of the bucket's
    # gradients, interleaved by rank): 2 through its backward. Held through the backward beside the
    # activations, weight_bytes_per_param an element, under train_layout.zero 1-3 (MemoryBreakdown
    # .zero_buffers_bytes). 0: none (Megatron-Core's buckets are views of its gradient buffer; FSDP reduces
    # each layer's gradients: the ZeRO-3 working set).
    zero_reduce_bucket_params: float = Field(0.0, ge=0)
    zero_reduce_buckets: int = Field(1, ge=1)
    # Bucket-sized copies ZeRO-1 / 2 make of a bucket to all-reduce it (allreduce_bucket: tensor =
    # self.flatten(bucket), a torch.cat of the slices average_tensor cuts the bucket into by owning rank),
    # counted beside zero_reduce_buckets only where the layout's ZeRO group spans more than one rank
    # (train_layout dp x cp, or zero_shard_size): with one data-parallel rank every parameter's partition is
    # 0, average_tensor merges the bucket into one slice, and flatten of a lone tensor is a view of it
    # (torch aten/src/ATen/native/TensorShape.cpp flatten_dense_tensors: t.contiguous().view(-1) where
    # tensors.size() == 1), so nothing is copied; the buckets themselves are allocated whatever the dp
    # (setup_buckets). DeepSpeed 1 (frameworks/deepspeed_zero.py DEEPSPEED_ZERO12_ALLREDUCE_COPIES);
    # weight_bytes_per_param an element, train_layout.zero 1-2, with zero_reduce_bucket_params. 0: none.
    zero_allreduce_copies: int = Field(0, ge=0)
    # Of zero_reduce_buckets, those allocated once and kept between steps, resident beside the other
    # phases (MemoryBreakdown.kept_buffers_bytes) unless the gradients are offloaded (offload.grads /
    # params, the colocated switch's offload_optimizer / free_gradients): DeepSpeed's ZeRO-3 allocates its
    # IPG bucket at init (deepspeed 0.19.6 runtime/zero/stage3.py _setup_for_real_optimizer: bucket.buffer
    # = torch.empty(reduce_bucket_size) on the device, ZeRO-Offload or not) and frees it only in
    # offload_states (contiguous_grad_buffer: bucket.buffer = None), which OpenRLHF's --ds.enable_sleep
    # calls: 1 (reduce_scatter_coalesced's copy is the backward's only). 0: ZeRO-1 / 2 free theirs at each
    # backward's end (stage_1_and_2.py _release_ipg_buffers).
    zero_reduce_buckets_kept: int = Field(0, ge=0)
    # Copies of a device's gradient partition ZeRO-2 holds beside the gradients through the backward of
    # every micro-batch after an optimizer step's first: DeepSpeed 0.19.6 (stage_1_and_2.py
    # independent_gradient_partition_epilogue) keeps the first micro-batch's partition (all_grad_tensors)
    # and adds each later one into it, which the next backward writes to a fresh grads_in_partition
    # (copy_grads_in_partition: torch.empty of the partition's size), freed after the addition: 1.
    # grad_bytes_per_param an element, train_layout.zero 2 only, several micro-batches an optimizer step
    # only (MemoryBreakdown.zero_buffers_bytes). 0: the gradients accumulate in place (Megatron-Core's
    # buffer, FSDP's sharded gradients).
    zero2_accumulated_grad_partitions: int = Field(0, ge=0)
    # ZeRO-Offload keeps the gradient partition on the host (DeepSpeed's offload_optimizer, OpenRLHF's
    # --ds.adam_offload; deepspeed 0.19.6): at ZeRO-2 copy_grads_in_partition returns early under cpu_offload
    # (runtime/zero/stage_1_and_2.py: each reduced slice of the partition goes to the pinned fp32
    # single_partition_of_fp32_groups[i].grad on the host, or is accumulated there, and param.grad is
    # cleared; no grads_in_partition on the device), at ZeRO-3 grad_partitions_flat_buffer is allocated
    # on self.device, the host under offload_optimizer (runtime/zero/stage3.py _setup_for_real_optimizer).
    # True: the update holds no gradient partition on the device at train_layout.zero 2-3
    # (MemoryBreakdown.gradients_bytes 0; the reduction buckets stay: the reductions run on the device);
    # not read below ZeRO-2 (ZeRO-1 keeps the whole param.grad on the device until the accumulation
    # boundary's reduction, cpu_offload or not). With offload.optimizer only (ZeRO-Offload), never beside
    # zero2_accumulated_grad_partitions (accumulated on the host) or offload.grads (nothing left to move).
    grad_partition_on_host: bool = False
    # Buffers of the device's largest trained parameter tensor, in the weights' dtype, that ZeRO-Offload
    # keeps on the device from its init to the end (DeepSpeed 0.19.6 runtime/zero/stage_1_and_2.py, under
    # cpu_offload, ZeRO-1 and 2 alike: temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel,
    # device=current_device, dtype=self.dtype), largest_param_numel the largest parameter of the optimizer's
    # groups; async_accumulate_grad_in_cpu_via_gpu stages each accumulated gradient through it; neither
    # offload_states nor anything else frees it, and OpenRLHF's --ds.enable_sleep offloads nothing under
    # --ds.adam_offload): 1, frameworks/deepspeed_zero.py (Qwen2.5-7B's embedding: 152064 x 3584 x 2 B =
    # 1.09 GB). Its pinned host twin (temp_grad_buffer_for_cpu_offload) is not device memory. ZeRO-3 has
    # none (stage3.py allocates its offloaded gradient buffers on the host). The tensor is rlsim's: the
    # embedding or head (per device after TP) where the stage holds one, else its layers' largest GEMM
    # weight, QKV and gate + up each one fused tensor (Hugging Face keeps them apart: an upper bound there);
    # LoRA's largest adapter. Held through the backward, the optimizer step and between steps, whatever
    # the colocated switch (MemoryBreakdown.offload_staging_bytes). train_layout.zero 1-2 with
    # offload.optimizer only. 0: none.
    zero_offload_device_grad_buffers: int = Field(0, ge=0)
    # Bytes a parameter of the device's gradient partition that DeepSpeed's optimizer step copies beside it
    # once the backward's activations and buckets are freed (deepspeed 0.19.6, not under cpu_offload /
    # offload_optimizer). ZeRO-1 / 2 (runtime/zero/stage_1_and_2.py step()): flat_grad_partition = self
    # .flatten(self.averaged_gradients[i]) in the model's dtype, then single_grad_partition =
    # flat_grad_partition.to(fp32) before the flat copy is deleted; the partition's own gradients stay
    # referenced until the cast is done, the others' freed first, free_grad_in_param_list(
    # params_not_in_partition). ZeRO-3 (runtime/zero/stage3.py step() -> _prepare_sub_group ->
    # _prepare_fp32_grad_for_sub_group): self.flatten(self.averaged_gradients[i]).to(fp32) of one
    # optimizer sub-group at a time (zero_step_sub_group_params), held as the fp32 master's .grad through
    # its step and released (_release_sub_group) before the next; the kept gradient partition
    # (grad_partitions_flat_buffer) and IPG bucket stay allocated. 2 + 4 with bf16 gradients, 4 with fp32
    # ones at ZeRO-3 (.to of an fp32 tensor returns it: frameworks/deepspeed_zero.py). The step's peak,
    # weights + optimizer state + the partition + the kept buckets + these copies, counts in the update's
    # fit where it exceeds the backward's (MemoryBreakdown.step_bytes: the max of the two phases).
    # train_layout.zero 1-3 only. 0: none (Megatron-Core's distributed optimizer steps on views of its
    # main_grad buffer, FSDP on its sharded gradients).
    zero_step_grad_copy_bytes_per_param: float = Field(0.0, ge=0)
    # Elements of the gradient partition DeepSpeed ZeRO-3's optimizer step copies at once
    # (zero_step_grad_copy_bytes_per_param): zero_optimization.sub_group_size (deepspeed 0.19.6
    # runtime/zero/config.py: pp_int(1e9); OpenRLHF's "auto" is dropped, runtime/config_utils.py), the
    # partition's parameters of each param group cut into sub-groups once they reach it
    # (stage3.py _create_fp16_sub_groups; a sub-group overshoots it by less than its last parameter's
    # partition: left out), stepped one after another. train_layout.zero 3 only, with the copies.
    # 0: the whole partition at once (ZeRO-1 / 2).
    zero_step_sub_group_params: float = Field(0.0, ge=0)

    def reshards_after_forward(self, pp: int) -> bool:
        """zero3_reshard_after_forward under a layout of ``pp`` pipeline stages ("unless_pipelined": pp 1)."""
        if self.zero3_reshard_after_forward == RESHARD_UNLESS_PIPELINED:
            return pp == 1
        return bool(self.zero3_reshard_after_forward)

    @property
    def resident_bytes_per_param(self) -> float:
        """Bytes a parameter of the trainer's own resident parameters (resident_weight_bytes_per_param,
        else weight_bytes_per_param)."""
        given = self.resident_weight_bytes_per_param
        return self.weight_bytes_per_param if given is None else given

    @field_validator("zero3_reshard_after_forward", mode="before")
    @classmethod
    def _bool_or_unless_pipelined(cls, value: Any) -> Any:
        """One message for a value neither a boolean nor "unless_pipelined" (the union's two said apart)."""
        if isinstance(value, bool) or value == RESHARD_UNLESS_PIPELINED:
            return value
        raise RlsimError(f"{value!r} is neither true, false nor {RESHARD_UNLESS_PIPELINED!r}",
                         fix=f"give true, false or {RESHARD_UNLESS_PIPELINED!r} (reshard unless the layout has "
                             "pipeline stages)")

    @field_validator("zero3_reshard_after_forward", mode="after")
    @classmethod
    def _prefetch_needs_resharding(cls, value: bool, info: ValidationInfo) -> bool:
        """Layers gathered ahead exist only where each layer is resharded after its forward."""
        prefetch = (info.data or {}).get("zero3_prefetch_layers")
        if not value and prefetch is not None and prefetch != cls.model_fields["zero3_prefetch_layers"].default:
            raise RlsimError("false keeps every layer whole from its forward, so zero3_prefetch_layers (layers "
                             "gathered ahead) is not read",
                             fix="remove zero3_prefetch_layers, or keep zero3_reshard_after_forward: true")
        return value

    @field_validator(*GATED_KNOBS["memory"], mode="after")
    @classmethod
    def _switch_applies(cls, value: Any, info: ValidationInfo) -> Any:
        """The accumulated gradients' bytes apply with zero3_sync_last_micro_batch_only."""
        return _gated_knob_applies("memory", cls, value, info)

    @model_validator(mode="after")
    def _live_cap_replaces_the_layer_working_set(self) -> "MemoryParams":
        """zero3_max_live_params sizes the gathered parameters itself: the FSDP working set's knobs
        would be silently ignored beside it."""
        if self.zero3_max_live_params is None:
            return self
        given = [k for k in ("zero3_prefetch_layers", "zero3_outer_gathered", "zero3_reshard_after_forward",
                             "zero3_sync_last_micro_batch_only")
                 if getattr(self, k) != type(self).model_fields[k].default]
        if given:
            raise RlsimError("zero3_max_live_params (DeepSpeed's live-parameter window) replaces FSDP's layer-by-layer "
                             f"working set, so {', '.join(given)} is not read",
                             fix=f"remove {', '.join(given)}, or zero3_max_live_params")
        return self

    @field_validator("kept_grad_bytes_per_param", mode="after")
    @classmethod
    def _kept_gradients_are_part_of_a_kept_buffer(cls, kept: float | None, info: ValidationInfo) -> float | None:
        """kept_grad_bytes_per_param is a part of the gradient buffer kept between steps: read only
        where grad_buffer_persists, and no more than grad_bytes_per_param."""
        data, fields = info.data or {}, cls.model_fields
        if kept is None:
            return kept
        if not data.get("grad_buffer_persists", fields["grad_buffer_persists"].default):
            raise RlsimError("it sizes the gradients kept between steps, and grad_buffer_persists false keeps none",
                             fix="remove kept_grad_bytes_per_param, or set grad_buffer_persists: true")
        held = data.get("grad_bytes_per_param", fields["grad_bytes_per_param"].default)
        if kept > held:
            raise RlsimError(f"{kept:g} is more than the grad_bytes_per_param {held:g} the update holds",
                             fix=f"set kept_grad_bytes_per_param at most {held:g}, or remove it")
        return kept

    @model_validator(mode="after")
    def _bucket_count_needs_buckets(self) -> "MemoryParams":
        """zero_reduce_buckets counts buckets of zero_reduce_bucket_params elements: without them it
        would be silently ignored."""
        if self.zero_reduce_bucket_params == 0 and self.zero_reduce_buckets != 1:
            raise RlsimError("zero_reduce_buckets applies only with zero_reduce_bucket_params above 0 (DeepSpeed's "
                             "reduce_bucket_size)",
                             fix="set both, or remove zero_reduce_buckets")
        if self.zero_reduce_bucket_params == 0 and self.zero_allreduce_copies:
            raise RlsimError("zero_allreduce_copies counts copies of buckets of zero_reduce_bucket_params elements, "
                             "which is 0",
                             fix="set zero_reduce_bucket_params (DeepSpeed's reduce_bucket_size, 5e8), or "
                                 "remove zero_allreduce_copies")
        if self.grad_partition_on_host and self.zero_step_grad_copy_bytes_per_param:
            raise RlsimError("grad_partition_on_host keeps ZeRO-Offload's gradient partition on the host, where its "
                             "optimizer step reads it (stage_1_and_2.py step(), cpu_offload; stage3.py "
                             "_prepare_sub_group, offload_optimizer)",
                             fix="remove zero_step_grad_copy_bytes_per_param, or grad_partition_on_host")
        if self.zero_step_sub_group_params and not self.zero_step_grad_copy_bytes_per_param:
            raise RlsimError("zero_step_sub_group_params caps the gradient partition copies of ZeRO-3's optimizer "
                             "step, and zero_step_grad_copy_bytes_per_param 0 makes none",
                             fix="set "
                                 "zero_step_grad_copy_bytes_per_param, or remove zero_step_sub_group_params")
        if self.grad_partition_on_host and self.zero2_accumulated_grad_partitions:
            raise RlsimError("grad_partition_on_host keeps ZeRO-Offload's gradient partition on the host, where ZeRO-2 "
                             "accumulates the micro-batches (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu)",
                             fix="remove zero2_accumulated_grad_partitions, or grad_partition_on_host")
        if self.zero_reduce_buckets_kept > (self.zero_reduce_buckets if self.zero_reduce_bucket_params else 0):
            raise RlsimError(f"zero_reduce_buckets_kept {self.zero_reduce_buckets_kept} counts kept buckets of the "
                             f"{self.zero_reduce_buckets if self.zero_reduce_bucket_params else 0} there are "
                             "(zero_reduce_buckets of zero_reduce_bucket_params elements)",
                             fix="set it at most "
                                 "zero_reduce_buckets with zero_reduce_bucket_params above 0, or remove it")
        return self


# Megatron-Core token dispatchers rlsim does not price (CommParams.moe_token_dispatcher refuses them).
UNMODELLED_DISPATCHERS = {
    "alltoall_seq": "megatron-core 0.10 / 0.11 MoEAlltoAllSEQTokenDispatcher (moe/legacy_a2a_token_dispatcher.py: "
                    "'a replica of the MoEAlltoAllTokenDispatcher from version 0.8', the one 'alltoall' is read "
                    "from): price it as 'alltoall'",
}


class CommParams(StrictModel):
    """Communication constants of training; reachable from YAML as `train_params.comm.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Share of each kind's collective time hidden under compute. Megatron-LM as in arXiv 2104.04473
    # issues TP all-reduces, EP all-to-alls and the pipeline sends on the critical path: 0.
    tp_overlap_fraction: float = Field(0.0, ge=0, le=1)
    ep_overlap_fraction: float = Field(0.0, ge=0, le=1)
    # Megatron-Core's MoE token dispatcher (TransformerConfig.moe_token_dispatcher_type), what moves an
    # MoE layer's routed tokens to their experts and back (llm/training.py _expert_exchange):
    # - "alltoall" (MoEAlltoAllTokenDispatcher): each rank's T / tp tokens (SP) x k routed copies
    #   all-to-all over the EP group, dispatch and combine, then gathered / reduce-scattered over the
    #   expert-TP group (megatron-core 0.8.0 / 0.13.0 moe/token_dispatcher.py).
    # - "allgather" (MoEAllGatherTokenDispatcher): every rank's T / tp tokens all-gathered over the
    #   expert-TP x EP group (0.8.0: tensor_and_expert_parallel_group, gather_from_sequence_parallel_
    #   region_to_moe; 0.13.0: tp_ep_group, gather_from_sequence_parallel_region), each rank keeping the
    #   copies routed to its local experts, the experts' output reduce-scattered back over that group
    #   (reduce_scatter_to_sequence_parallel_region): etp x ep x the rank's tokens each way, whatever
    #   the top-k; the backward the transposes. It replaces the all-to-alls and the expert-TP
    #   gathers. The gathered tokens sit in Megatron's global memory buffer (use_global_buffer=True) and
    #   are not saved for the backward, which keeps the local experts' inputs as the all-to-all
    #   dispatcher does (the same rows): activation memory is the same. Not modelled apart: its token
    #   shuffle (compute.moe_permute_traffic_bytes_per_hidden, counted on the all-to-all path: this one
    #   skips sort_chunks_by_idxs but unpermutes into a gathered-size buffer) and the combine's
    #   reduce-scatter in the routing probabilities' dtype (token_combine: .to(local_probs.dtype); the
    #   activations' under moe_router_dtype None, Megatron's default), priced at activation_bytes.
    # Default "alltoall": what the frameworks rlsim imports run: verl (0.6.1 models/mcore/
    # config_converter.py, utils/megatron_utils.py), SkyRL (0.3.0 MegatronConfig), AReaL (1.0.4
    # MegatronEngineConfig, models/mcore/registry.py) and NeMo RL's Megatron-Bridge model providers
    # (megatron-bridge 0.3.0 Qwen3MoEModelProvider, DeepSeekModelProvider). Megatron-Core's own
    # TransformerConfig default is "allgather" (0.8.0 - 0.13.0), which from 0.10.0 it refuses beside
    # variable_seq_lengths=True, set by verl, SkyRL and AReaL (verl's and SkyRL's importers refuse it;
    # AReaL never reads the key). "alltoall_seq" (in 0.10.0 and 0.11.0, not 0.8.0 nor 0.13.0: the 0.8
    # all-to-all kept) is refused (UNMODELLED_DISPATCHERS).
    # - "flex" (MoEFlexTokenDispatcher, 0.13.0, with moe_enable_deepep: DeepEP's normal kernels over the
    #   expert-TP x EP group; what verl / NeMo RL / slime recipes for DeepSeek-V3 and Qwen3-235B set): each
    #   token sent once to each node holding any of its experts (RDMA, to the rank of the same GPU index)
    #   and forwarded once to each rank there that holds one (NVLink); the combine the reverse, summed in
    #   the node before RDMA (llm/deepep.py: the expected distinct ranks and nodes a token reaches, under
    #   the model's group-limited routing where it has one). Priced as an all-to-all of the rank's rows x
    #   the distinct nodes over each rail (ranks of one GPU index) beside one of the rows x the distinct
    #   ranks inside each node, the slower of the two (DeepEP's internode kernel forwards chunk by chunk
    #   while RDMA runs), dispatch and combine, the busiest EP rank's rows, x (1 - ep_overlap_fraction);
    #   no expert-TP gather (the group covers it). Megatron asserts tp_size x ep_size > 1 (the layout gate
    #   below) and moe_enable_deepep (the importers); DeepEP's SMs taken from the GEMMs
    #   (moe_deepep_num_sms, 20) are not modelled.
    moe_token_dispatcher: Literal["alltoall", "allgather", "flex"] = "alltoall"
    # Ring-attention CP overlaps the KV exchange with the blocks already local (Megatron-Core CP);
    # half hidden is an assumption until calibrated.
    cp_overlap_fraction: float = Field(0.5, ge=0, le=1)
    # DP gradient sync hidden under backward: one named default for every model (DP_OVERLAP_FRACTION).
    dp_overlap_fraction: float = Field(DP_OVERLAP_FRACTION, ge=0, le=1)
    # What the gradient sync (ZeRO 0-2) can hide under: with gradient accumulation each model chunk's
    # reduction is launched in its last micro-batch's backward only (Megatron schedules.py runs the
    # first m - 1 under no_sync; DeepSpeed reduces at the accumulation boundary), the chunks one after
    # another, the last bucket (1 - dp_overlap_fraction) after that backward; the ZeRO-1/2 weight
    # all-gather before each chunk's first forward (--overlap-param-gather). One chunk: exposed =
    # max((1 - f) t, t - that backward). dp_overlap_fraction 0: after the flush, whole.
    # "step": (1 - f) t with no bound (the behaviour before this field).
    dp_overlap_window: Literal["last-micro-batch", "step"] = "last-micro-batch"
    # Megatron-Core's gradient buckets (megatron/core/distributed/distributed_data_parallel.py, read in
    # the megatron-core 0.8.0 wheel): with --overlap-grad-reduce a bucket holds max(40,000,000,
    # 1,000,000 x DP) parameters; a chunk's buckets reduce one after another as their gradients are
    # ready in the last micro-batch's backward (param_and_grad_buffer.py register_grad_ready), and with
    # --overlap-param-gather its updated weights are gathered bucket by bucket ahead of the forward
    # (optimizer/distrib_optimizer.py: the first bucket after the optimizer step, the next in each
    # forward pre-hook), so one bucket of a chunk stays exposed: the share that can hide is
    # dp_overlap_fraction x (1 - bucket / the chunk's parameters), none when they fit one bucket.
    # None: dp_overlap_fraction alone (the behaviour before this field).
    dp_bucket_min_params: float | None = Field(None, gt=0)
    dp_bucket_params_per_rank: float = Field(1e6, ge=0)
    # Transformer Engine userbuffers (Megatron --tp-comm-overlap; read in the transformer-engine-cu12
    # 1.9.0 wheel, pytorch/module/base.py initialize_ub defaults): with sequence parallelism each TP
    # block (column GEMM -> row GEMM) overlaps its collectives with one GEMM each. Forward: the input
    # all-gather by ring exchange with the column GEMM (tp - 1 chunk transfers, each beside a GEMM
    # chunk), the output reduce-scatter pipelined with the row GEMM in tp_userbuffer_pipeline_splits
    # splits (the last split's exposed); backward: the output-gradient all-gather by ring exchange with
    # the row GEMM's data gradient, the input re-gather in bulk beside the column GEMM's data gradient,
    # the data-gradient reduce-scatter in bulk beside its weight gradient (exposed: what outlasts the
    # GEMM). It replaces tp_overlap_fraction and the SP backward re-gather on dense attention + MLP
    # layers; other layers (MoE, MLA, hybrid blocks) keep them. Off: tp_overlap_fraction alone.
    tp_userbuffers: bool = False
    tp_userbuffer_pipeline_splits: int = Field(4, ge=1)   # TE 1.9: num_splits 4 for "pipeline"
    # Scatter/gather of pipeline sends across the TP ranks (arXiv 2104.04473 sec. 4.1).
    pp_scatter_gather: bool = True
    # Blocking pipeline sends: Megatron-LM 2021 (megatron/p2p_communication.py) issues
    # batch_isend_irecv, waits on every request and then torch.cuda.synchronize(), so a stage
    # cannot start its next op until its outgoing activation / gradient has arrived: the transfer
    # occupies the sender as well as delaying the receiver. Megatron-Core overlaps the sends
    # (--overlap-p2p-comm): False, the receiver-only delay.
    pp_blocking_send: bool = False
    # Megatron-Core config.variable_seq_lengths: the pipeline exchanges each micro-batch's shape
    # before its p2p sends, so every micro-batch keeps its own length (verl sets it for its Megatron
    # backend; rlsim's behaviour before this field). False: one p2p shape for every micro-batch of a
    # step (Megatron-Core's default), so with pp > 1 a framework pads each micro-batch to the
    # longest of the batch (NeMo RL v0.5 megatron_policy_worker pad_full_seq_to); the padding costs
    # GEMMs, norms and logits, not packed attention (llm/training.py `_one_pipeline_shape`).
    pp_variable_seq_lengths: bool = True
    # ZeRO-3 / FSDP: the per-layer parameter all-gather (forward, and again in backward) and the
    # per-layer gradient reduce-scatter, each hidden under compute by its own fraction. None: the
    # dp_overlap_fraction (the behaviour before these fields). verl FSDP prefetches the next layer's
    # all-gather while the current one computes (torch FSDP forward_prefetch / backward_prefetch
    # BACKWARD_PRE, verl fsdp_workers.py) and reduce-scatters on a side stream: ~0.8-0.9 hidden.
    fsdp_gather_overlap_fraction: float | None = Field(None, ge=0, le=1)
    fsdp_reduce_overlap_fraction: float | None = Field(None, ge=0, le=1)
    # Ulysses sequence parallelism (train_layout.ulysses_sp with cp > 1): 4 all-to-alls per layer
    # forward (q, k, v to head-sharded full sequences, the attention output back), backward twice
    # (the gradients of the four, plus their recomputation with full recompute). verl
    # (verl/utils/ulysses.py SeqAllToAll) issues them synchronously on the compute stream: 0 hidden.
    ulysses_overlap_fraction: float = Field(0.0, ge=0, le=1)
    # Sequence parallelism re-gathers the input of each column-parallel linear (QKV and FC1) in
    # backward for the weight gradient instead of storing it (Korthikanti et al. 2022, arXiv
    # 2205.05198 sec. 4.2.2; Megatron LinearWithGradAccumulationAndAsyncCommunication), issued
    # asynchronously under the data-gradient GEMM: `sp_backward_allgather` switches the mechanism,
    # the overlap fraction says how much of it hides. Off by default (the behaviour before it).
    sp_backward_allgather: bool = False
    sp_backward_allgather_overlap_fraction: float = Field(0.0, ge=0, le=1)
    # Bytes per parameter of the data-parallel gradient reduction (all-reduce, ZeRO reduce-scatter,
    # FSDP reduce-scatter). fp32: Megatron-LM forces accumulate_allreduce_grads_in_fp32 for bf16
    # ("bfloat16 requires gradient accumulation and all-reduce to be done in fp32",
    # megatron/training/arguments.py) and verl's FSDP reduces in fp32 (mixed_precision.reduce_dtype
    # fp32, verl fsdp_workers.py). The 2021 / 2022 stacks keep 2 (their value before this default;
    # the papers do not state the dtype of the gradient reduction).
    grad_reduce_bytes_per_param: float = Field(4.0, gt=0)
    # The collective that reduces the gradients under ZeRO-1 / 2: "reduce-scatter", each rank receiving
    # its shard's sum (Megatron-Core's distributed optimizer); "all-reduce", every rank receiving the
    # whole sum and keeping its shard's slices, twice the reduce-scatter's bytes on the wire: DeepSpeed's
    # DeepSpeedZeroOptimizer.average_tensor all-reduces each bucket (deepspeed 0.19.6 runtime/zero/
    # stage_1_and_2.py, use_multi_rank_bucket_allreduce: True by default, zero/config.py, ->
    # allreduce_and_scatter -> allreduce_bucket: dist.all_reduce; reduce_scatter: false, its
    # gradient_reduction_w_predivide, all-reduces too).
    zero_grad_reduce: Literal["reduce-scatter", "all-reduce"] = "reduce-scatter"
    # ZeRO-2 reduces every micro-batch's gradients, not the optimizer step's last alone: DeepSpeed's
    # partitioned gradients are reduced bucket by bucket in each backward's gradient hooks (deepspeed 0.19.6
    # runtime/zero/stage_1_and_2.py process_gradients: `if self.partition_gradients or self.overlap_comm:
    # self.reduce_ready_partitions_and_remove_grads`; engine.py allreduce_gradients: "ZeRO stage >= 2
    # communicates during non gradient accumulation boundaries as well"), on the compute stream unless
    # overlap_comm: the step's first m - 1 reductions add (m - 1) x the gradient reduction x (1 -
    # dp_overlap_fraction). False: one reduction a step (Megatron-Core's no_sync; DeepSpeed's ZeRO 0-1).
    zero2_reduce_every_micro_batch: bool = False
    # ZeRO-3 gathers and reduces the input embedding and output head in every micro-batch, as the layers:
    # DeepSpeed's ZeRO-3 fetches every submodule's parameters in its pre-forward hook and reduce-scatters
    # each parameter's gradient through the IPG bucket in every backward (deepspeed 0.19.6 runtime/zero/
    # parameter_offload.py _pre_forward_module_hook -> partitioned_param_coordinator.py fetch_sub_module;
    # stage3.py reduce_independent_p_g_buckets_and_remove_grads, independent_gradient_partition_epilogue:
    # "called after every backward"); no root unit kept gathered across micro-batches. The step's first
    # m - 1 micro-batches add (m - 1) x (the embedding and head's gather + reduce-scatter) x (1 -
    # dp_overlap_fraction). False: once a step (FSDP's root unit).
    zero3_outer_sync_every_micro_batch: bool = False
    # ZeRO-3 waits, at the end of each backward, for the reduce-scatter of its last IPG bucket (stage3.py
    # independent_gradient_partition_epilogue: __reduce_and_partition_ipg_grads of what the bucket holds,
    # then reduce_and_partition_stream.synchronize()): that bucket's reduction is exposed in full, every
    # micro-batch. The bucket is filled in backward order (output head, layers last to first, input
    # embedding) and reduced before a gradient that would overflow memory.zero_reduce_bucket_params
    # elements (reduce_independent_p_g_buckets_and_remove_grads; each layer's gradients taken together).
    # False: the per-layer reduce-scatters hide by their fractions alone (FSDP).
    zero3_backward_waits_last_bucket: bool = False
    # Adam step streams fp32 master, momentum and variance in and out (24 B), reads an fp32 main
    # gradient (4 B) and writes the bf16 weight (2 B): 30 B per parameter (ZeRO arXiv 1910.02054).
    optimizer_traffic_bytes_per_param: float = Field(30.0, ge=0)
    # With sequence parallelism each TP rank computes the gradients of the parameters it holds whole from its
    # own slice of the sequence, so after the DP sync Megatron all-reduces them over the TP group, flattened
    # into one buffer, not overlapped (megatron-core 0.8.0 distributed/finalize_model_grads.py
    # _allreduce_layernorm_grads, after finish_grad_sync; 0.10.0 / 0.12.0 the same): the parameters marked
    # `sequence_parallel` (the norms: fusions/fused_layer_norm.py, TE LayerNormLinear / LayerNormMLP
    # layer_norm_weight / _bias, TE RMSNorm / LayerNorm; row-parallel linear biases: tensor_parallel/layers.py
    # RowParallelLinear, TE Linear row mode, LayerNormMLP fc2_bias; the MoE router: transformer/moe/router.py)
    # and the q / k norms, in their main_grad dtype (grad_reduce_bytes_per_param). llm/training.py
    # _sp_grad_sync_s. Off: no such all-reduce (the behaviour before this field).
    sp_grad_all_reduce: bool = True
    # Gradient clipping's global norm: before the optimizer step get_grad_norm_fp32 all-reduces one fp32 scalar
    # (the local sum of squares) over the model-parallel group, or every training rank with the distributed
    # optimizer (megatron-core 0.8.0 optimizer/clip_grads.py get_grad_norm_fp32, optimizer.py
    # MixedPrecisionOptimizer.step under clip_grad > 0, OptimizerConfig.clip_grad 1.0; distrib_optimizer.py
    # get_model_parallel_group: "the entire world"; 0.12.0 get_grad_stats_parallel_group the same). Every stack
    # rlsim names clips: verl optim.clip_grad 1.0 (0.9.1 workers/config/optimizer.py), NeMo RL
    # policy.max_grad_norm 1.0, torch's clip_grad_norm_ under FSDP all-reduces the shards' norm over the mesh.
    # A collective of every stage: each one's optimizer starts when the last has synced (llm/training.py
    # _grad_stats_sync_s). Off: no clipping (the behaviour before this field).
    grad_norm_all_reduce: bool = True
    # Megatron's count of zero gradients, one more fp32 scalar all-reduced over the same group
    # (clip_grads.py count_zeros_fp32), only with --log-num-zeros-in-grad (OptimizerConfig.log_num_zeros_in_grad,
    # default False; verl and NeMo RL leave it).
    grad_zeros_all_reduce: bool = False

    @field_validator("moe_token_dispatcher", mode="before")
    @classmethod
    def _dispatcher_modelled(cls, value: Any) -> Any:
        """Megatron-Core's other dispatchers are refused by name, saying what rlsim prices."""
        if value in UNMODELLED_DISPATCHERS:
            raise RlsimError(f"Megatron-Core's {value!r} token dispatcher is not one rlsim prices "
                             f"({UNMODELLED_DISPATCHERS[value]})",
                             fix="rlsim prices 'alltoall' (the k routed copies "
                                 "all-to-all over EP), 'allgather' (the tokens all-gathered over expert-TP x EP) and "
                                 "'flex' (DeepEP's dispatch and combine): use one of them")
        return value

    @field_validator(*GATED_KNOBS["comm"], mode="after")
    @classmethod
    def _switch_applies(cls, value: Any, info: ValidationInfo) -> Any:
        """The userbuffer splits need tp_userbuffers, the SP re-gather's overlap sp_backward_allgather, the
        overlap window and Megatron-Core's buckets a dp_overlap_fraction above 0 (dp_hidden_share)."""
        return _gated_knob_applies("comm", cls, value, info)

    @model_validator(mode="after")
    def _bucket_rank_share_needs_buckets(self) -> "CommParams":
        """dp_bucket_params_per_rank sizes Megatron-Core's buckets only with dp_bucket_min_params set
        (away from its default without it, it would be silently ignored)."""
        if (self.dp_bucket_min_params is None and "dp_bucket_params_per_rank" in self.model_fields_set
                and self.dp_bucket_params_per_rank != type(self).model_fields["dp_bucket_params_per_rank"].default):
            raise RlsimError("dp_bucket_params_per_rank applies only with dp_bucket_min_params set",
                             fix="set both, or remove dp_bucket_params_per_rank")
        return self

    def dp_hidden_share(self, chunk_params: float, dp: int) -> float:
        """The share of a model chunk's data-parallel sync that can hide under compute: the
        dp_overlap_fraction, times 1 - bucket / the chunk's parameters with Megatron-Core's buckets
        (dp_bucket_min_params; none within one bucket)."""
        if self.dp_bucket_min_params is None:
            return self.dp_overlap_fraction
        bucket = max(self.dp_bucket_min_params, self.dp_bucket_params_per_rank * dp)
        return self.dp_overlap_fraction * max(0.0, 1.0 - bucket / chunk_params) if chunk_params > 0 else 0.0


# Rates of a copy through pageable memory (tensor.cpu() / .to("cpu") without pin_memory: the CUDA
# driver stages it through a pinned buffer and copies it on the CPU, one thread). Device -> host fills
# freshly allocated pages (PyTorch's CPU allocator maps every large tensor afresh, a page fault per
# 4 KiB); host -> device copies out of written pages. Measured as the copies themselves, GPU tensor
# to fresh pageable pages and back, on two lent H200 nodes (Firecracker VMs, 16 vCPUs;
# `python benchmarks/host_pageable_copy.py --device cuda`, 2026-12-04, benchmarks/measured/
# h200-2026-12-04b): the mean of four runs at 1 and 4 GiB, 1.19-1.51 GB/s out, 6.26-8.33 GB/s in
# (pinned 55 GB/s both ways, and so a non-blocking .to("cpu"), which torch pins). Before: the host
# side alone on the 2-core CI VM, 2.8 and 7.0 GB/s; the same host-side script on the GPU nodes gives
# 1.7-1.9 and 5.1-5.7 GB/s. A bare host's page faults cost less than a VM's.
# Defaults of schedule.host_copies and train_params.offload.
PAGEABLE_OFFLOAD_BPS = 1.3e9
PAGEABLE_ONLOAD_BPS = 7.1e9

# Host CPU time of one rule reward on one worker (workload.reward): a + b x response tokens for a
# response that ends with its answer, and a' + b' x tokens for one the engine cut at its length cap
# (no final answer: the extractor searches the whole text). Measured on the project's CPU VM (AMD
# EPYC, one thread, machine-speed reference 3.7 ms) by `python benchmarks/reward_cost.py`
# (2026-12-04, benchmarks/measured/cpu-vm-2026-12-04), fitted over responses of 250 - 8000 tokens.
# MATH_VERIFY_*: Hugging Face Math-Verify 0.9.0 as NeMo RL's math environment calls it (math_metric,
# LaTeX gold in \boxed{}, expression + LaTeX prediction targets: cited from memory of
# nemo_rl/environments/math_environment.py), the default rule reward: 0.70 / 0.82 / 1.42 / 2.80 ms a
# finished response, 6.3 / 5.5 / 7.2 / 12.1 ms a capped one. Before: an assumed 0.05 s a sample.
MATH_VERIFY_CPU_S_PER_SAMPLE = 5.9e-4
MATH_VERIFY_CPU_S_PER_TOKEN = 2.8e-7
MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE = 5.2e-3
MATH_VERIFY_CAPPED_CPU_S_PER_TOKEN = 8.2e-7
# VERL_NAIVE_*: verl 0.6.0's NaiveRewardManager.__call__ per sample (index the DataProto batch, sum
# its masks, decode prompt and response, default_compute_score: math_dapo, which reads the last 300
# characters), 0.11 / 0.17 / 0.38 / 0.92 ms a response: mostly the tokenizer's decode.
VERL_NAIVE_CPU_S_PER_SAMPLE = 7.2e-5
VERL_NAIVE_CPU_S_PER_TOKEN = 1.05e-7
VERL_NAIVE_CAPPED_CPU_S_PER_SAMPLE = 8.8e-5
VERL_NAIVE_CAPPED_CPU_S_PER_TOKEN = 1.03e-7

# Megatron-Core's optimizer_cpu_offload (HybridDeviceOptimizer, megatron-core 0.16.1
# optimizer/cpu_offloading/hybrid_optimizer.py and optimizer/__init__.py, read in its wheel): the
# offloaded share of the parameters (optimizer_offload_fraction) keeps fp32 copies and their AdamW
# state in pinned host memory for good; each optimizer step copies their fp32 gradients to the host,
# runs torch.optim.AdamW(fused=True) on the host, and copies the fp32 parameters back (on side
# streams, the host step between the copies; overlap_cpu_optimizer_d2h_h2d off by default).
# HOST_ADAM_PARAMS_PER_S: torch 2.13's fused CPU AdamW on one thread of the project's CPU VM (AMD
# EPYC), fp32, 16M and 64M parameters: 2.01 and 1.92e9 a second (benchmarks/host_adam.py,
# benchmarks/measured/cpu-vm-2026-12-04/host_adam.txt; 2.07 - 2.09e9 on a quieter run). One thread:
# Ray starts an actor without num_cpus with OMP_NUM_THREADS=1 (cited from memory), as NeMo RL's
# Megatron workers run; a rank given more threads steps faster (--set offload.host_adam_params_per_s).
HOST_ADAM_PARAMS_PER_S = 2.0e9
HYBRID_OPTIMIZER_COPY_BYTES_PER_PARAM = 8.0     # a fp32 gradient out + a fp32 parameter back
# torch.optim.AdamW on CPU tensors as FSDP's CPU offload steps it (verl builds AdamW without fused or
# foreach, NeMo RL's DTensor configs set both false; foreach and fused are torch's defaults on CUDA
# only): the for-loop implementation, 0.13e9 a second at 64M parameters on one thread of the
# project's CPU VM (0.20e9 at 16M; benchmarks/host_adam.py, benchmarks/measured/cpu-vm-2026-12-04/
# host_adam.txt), the larger tensors of a model's shard the slower.
HOST_ADAM_LOOP_PARAMS_PER_S = 1.3e8


class OffloadParams(StrictModel):
    """Per-phase offload of the training state to host memory (`train_params.offload.<field>`):
    verl `actor.fsdp_config.param_offload / optimizer_offload`, NeMo RL `optimizer_cpu_offload`; and
    FSDP's CPU offload (`fsdp_cpu_offload`, below), where the sharded state never leaves the host.
    A training step reloads what is offloaded before it and offloads it after (each byte twice
    over the host link); a forward-only pass (log-probs, reference) reloads and offloads the weights.
    Off by default. Not the colocated switch's `schedule.switch.offload_optimizer` (which moves the
    optimizer states between rollout and training): set one or the other."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    params: bool = False
    grads: bool = False
    optimizer: bool = False
    # torch FSDP's CPU offload (FSDP2 CPUOffloadPolicy(pin_memory=True), FSDP1 CPUOffload(offload_params=
    # True); verl fsdp2 `offload_policy`, NeMo RL `dtensor_cfg.cpu_offload`), ZeRO-3 only: the sharded
    # parameters, their gradients and the optimizer state live in pinned host memory for good. Each
    # all-gather first copies the layer's shard in (host_param_bytes_per_param: the shards' own dtype,
    # fp32 in verl and NeMo RL), each reduced gradient shard is copied out (grad_reduce_bytes_per_param),
    # every micro-batch, hidden as the gathers and reduce-scatters they ride with (llm/training.py
    # fsdp_cpu_offload_s); the optimizer steps on the CPU (host_adam_loop_params_per_s). Not with the
    # per-phase offload above (nothing is left on the device to move).
    fsdp_cpu_offload: bool = False
    host_param_bytes_per_param: float = Field(4.0, gt=0)
    host_adam_loop_params_per_s: float = Field(HOST_ADAM_LOOP_PARAMS_PER_S, gt=0)
    # When the round trip is paid. "update": once per training phase, reloaded before its first
    # optimizer step and offloaded after its last (verl's fsdp / megatron workers: update_actor loads
    # the parameters and the optimizer once, runs every mini-batch in update_policy, offloads once,
    # workers/fsdp_workers.py). "optimizer_step": at every optimizer step: an offloaded optimizer is
    # Megatron-Core's optimizer_cpu_offload (NeMo RL's: its state lives on the host and steps there,
    # below); offloaded parameters or gradients make their round trip.
    scope: Literal["update", "optimizer_step"] = "update"
    # Share of the optimizer state offloaded (Megatron-Core optimizer_offload_fraction; verl offloads
    # it all: 1). With scope optimizer_step the offloaded share stays on the host (Megatron-Core's
    # HybridDeviceOptimizer, above): the device holds none of it, and each optimizer step pays its
    # gradients out and parameters back (host_step_bytes_per_param over the host link) and the host's
    # AdamW over it (host_adam_params_per_s, one rank's). With scope update it is the share moved.
    optimizer_fraction: float = Field(1.0, ge=0, le=1)
    host_adam_params_per_s: float = Field(HOST_ADAM_PARAMS_PER_S, gt=0)
    host_step_bytes_per_param: float = Field(HYBRID_OPTIMIZER_COPY_BYTES_PER_PARAM, ge=0)
    # Achieved share of the device's host link. None: the topology's host link efficiency (its
    # `host.efficiency`, as schedule.switch.host_link_efficiency: the same link); a value here
    # overrides it for the offload copies (was a separate 0.8 before).
    host_link_efficiency: float | None = Field(None, gt=0, le=1)
    # The offloaded state goes through pageable host memory: each copy at the slower of the link and
    # the host's pageable rate, out at pageable_offload_Bps, back in at pageable_onload_Bps. verl 0.6.0
    # moves its optimizer state with .to("cpu") / .to(device) (utils/fsdp_utils.py
    # offload_fsdp_optimizer / load_fsdp_optimizer, utils/megatron_utils.py offload_megatron_optimizer)
    # and FSDP parameters with flat_param_to(cpu) (read in its wheel). Off: pinned copies.
    pageable: bool = False
    pageable_offload_Bps: float = Field(PAGEABLE_OFFLOAD_BPS, gt=0)
    pageable_onload_Bps: float = Field(PAGEABLE_ONLOAD_BPS, gt=0)

    @property
    def any(self) -> bool:
        return self.params or self.grads or self.optimizer

    @field_validator("fsdp_cpu_offload", mode="after")
    @classmethod
    def _cpu_offload_alone(cls, value: bool, info: ValidationInfo) -> bool:
        """FSDP's CPU offload leaves nothing on the device for the per-phase offload to move."""
        data = info.data or {}
        if value and any(data.get(name) for name in ("params", "grads", "optimizer")):
            raise RlsimError("keeps the sharded state on the host for good: the per-phase offload (params, grads, "
                             "optimizer) has nothing left to move",
                             fix="set one or the other")
        return value

    @field_validator("pageable_offload_Bps", "pageable_onload_Bps", mode="before")
    @classmethod
    def _bw(cls, v: Any) -> Any:
        return parse_bandwidth(v) if isinstance(v, str) else v

    @field_validator("host_link_efficiency", "scope", "optimizer_fraction", "host_adam_params_per_s",
                     "host_step_bytes_per_param", "host_param_bytes_per_param", "host_adam_loop_params_per_s",
                     mode="after")
    @classmethod
    def _link_needs_an_offload(cls, value: Any, info: ValidationInfo) -> Any:
        """host_link_efficiency rates the offload copies, scope times them: no offload, nothing to read;
        the optimizer's share and its host step read an optimizer offload (the latter of scope
        optimizer_step)."""
        return _gated_knob_applies("offload", cls, value, info)

    @model_validator(mode="after")
    def _pageable_needs_an_offload(self) -> "OffloadParams":
        """pageable and its rates act on an offloaded state only (else they would be silently ignored);
        rates at their defaults, as a whole dump gives them, change nothing and pass."""
        rates = self.set_off_default(("pageable_offload_Bps", "pageable_onload_Bps"))
        if self.pageable and not self.any:
            raise RlsimError("pageable applies to an offloaded state",
                             fix="set params, grads or optimizer, or remove it")
        if self.pageable and not (self.params or self.grads) and self.scope == "optimizer_step":
            raise RlsimError("pageable applies to a copied state: Megatron-Core's cpu-offloaded optimizer (optimizer "
                             "with scope optimizer_step) copies through pinned memory (pin_cpu_grads, pin_cpu_params)",
                             fix="remove pageable, or offload params or grads too")
        if rates and not self.pageable:
            raise RlsimError(f"{', '.join(rates)} apply only with pageable: true",
                             fix="remove them or set pageable")
        return self


class TrainParams(StrictModel):
    """All constants of the training cost model; `train_params:` in a workload or scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute: ComputeParams = ComputeParams()
    comm: CommParams = CommParams()
    memory: MemoryParams = MemoryParams()
    offload: OffloadParams = OffloadParams()
    check_memory: bool = True

    @model_validator(mode="after")
    def _gradient_partition_on_host_is_zero_offloads(self) -> "TrainParams":
        """memory.grad_partition_on_host is ZeRO-Offload's (the optimizer steps on the host beside its
        gradient partition): without offload.optimizer it describes no run, and offload.grads would move
        a partition the device does not hold."""
        if not self.memory.grad_partition_on_host:
            return self
        if not self.offload.optimizer:
            raise RlsimError("memory.grad_partition_on_host is DeepSpeed's ZeRO-Offload, whose optimizer steps on the "
                             "host",
                             fix="set offload.optimizer: true (scope: optimizer_step), or remove "
                                 "memory.grad_partition_on_host")
        if self.offload.grads:
            raise RlsimError("memory.grad_partition_on_host keeps the gradient partition on the host already: "
                             "offload.grads has nothing to move",
                             fix="remove offload.grads, or memory.grad_partition_on_host")
        return self

    @model_validator(mode="after")
    def _device_grad_buffer_is_zero_offloads(self) -> "TrainParams":
        """memory.zero_offload_device_grad_buffers is ZeRO-Offload's (cpu_offload: the optimizer steps on the
        host): without offload.optimizer no run allocates it."""
        if self.memory.zero_offload_device_grad_buffers and not self.offload.optimizer:
            raise RlsimError("memory.zero_offload_device_grad_buffers is DeepSpeed's ZeRO-Offload buffer "
                             "(stage_1_and_2.py temp_grad_buffer_for_gpu_offload, allocated under cpu_offload only)",
                             fix="set offload.optimizer: true (scope: optimizer_step), or remove "
                                 "memory.zero_offload_device_grad_buffers")
        return self

    @model_validator(mode="after")
    def _last_bucket_has_a_size(self) -> "TrainParams":
        """comm.zero3_backward_waits_last_bucket reads the bucket's size, memory.zero_reduce_bucket_params."""
        if self.comm.zero3_backward_waits_last_bucket and self.memory.zero_reduce_bucket_params <= 0:
            raise RlsimError("comm.zero3_backward_waits_last_bucket waits for the last IPG bucket of "
                             "memory.zero_reduce_bucket_params elements, which is 0",
                             fix="set "
                                 "memory.zero_reduce_bucket_params (DeepSpeed's reduce_bucket_size, 5e8), or remove "
                                 "comm.zero3_backward_waits_last_bucket")
        return self

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, source: str | None = None,
                     field_name: str = "train_params") -> "TrainParams":
        try:
            return cls.model_validate(dict(mapping or {}))
        except ValidationError as exc:
            raise validation_error(exc, source=source, prefix=field_name, model=cls,
                                   fix="see docs/cost-models-training.md for the fields and their types") from None


RESERVE_KEYS = frozenset({"max_new_tokens", "reserve_init_ratio", "reserve_min_ratio_factor", "reserve_decay_steps",
                          "reserve_clip_tokens", "retract_headroom_steps"})


# InferenceParams' constants of the collective formula used without a network model (no run takes it).
FALLBACK_COLLECTIVE_KEYS = ("fallback_step_latency_s", "fallback_collective_efficiency")


class InferenceParams(StrictModel):
    """Modelling constants of the rollout engine (`workload.inference.<field>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- CPU side of a step (docs/cost-models-inference.md, "beyond the roofline") --------------
    # Fixed CPU work per step (scheduler, input preparation, output hand-off). formulas.md: the
    # per-step scheduler, launch and sampling overhead is "a few ms"; rlsim took the low end, 2 ms,
    # for all of it; the CUDA-graph replay below is now counted apart, so 2 ms - 0.3 ms here.
    step_overhead_s: float = Field(1.7e-3, ge=0)
    # CPU work per running sequence and step (scheduling, sampling bookkeeping, detokenization),
    # per attention replica (each has its own scheduler). An estimate, not fitted: checked against
    # NIM's Llama-3.1-8B ITL rise (frameworks.md: 5.9 ms at 50 -> 12.7 ms at 200 concurrent, ~45
    # us per added sequence for KV reads, compute and CPU together), of which it is a fifth. Its
    # scheduler share, measured on the host (vLLM 0.11's V1 scheduler, benchmarks/vllm_scheduler_cpu.py,
    # benchmarks/measured/cpu-vm-2026-12-04): 5.9-6.5 us at 16-256 requests, 7.7-8.9 at 512-1024;
    # the model runner's share is not measured.
    cpu_per_seq_s: float = Field(1e-5, ge=0)
    # Kernel launches. CUDA graphs (vLLM default) replay a step's launches in a fixed time
    # (frameworks.md: "a few hundred microseconds"), for steps of up to cuda_graph_max_batch
    # tokens per replica (vLLM's largest captured size, 512 by default); eager steps (above it, or
    # enforce_eager) launch every kernel from the CPU: per step (embedding, final norm, LM head,
    # sampler), per layer (norms, QKV, rotary, KV write, attention, output projection, MLP GEMMs,
    # activation, TP all-reduces: vLLM's Llama forward) and per MoE layer on top (router, top-k,
    # align, expert GEMMs, activation, combine / sum, dispatch: vLLM's fused-MoE path), each at the
    # device's launch_overhead_s (hardware/devices.py) unless launch_overhead_s is set. The CPU
    # launches while the GPU runs the kernels already queued: an eager step lasts the longer of the
    # two (launch-bound at small batch).
    enforce_eager: bool = False
    cuda_graph_max_batch: int = Field(512, ge=0)
    cuda_graph_replay_s: float = Field(3e-4, ge=0)
    launches_per_step: float = Field(10.0, ge=0)
    launches_per_layer: float = Field(12.0, ge=0)
    launches_per_moe_layer: float = Field(10.0, ge=0)
    launch_overhead_s: float | None = Field(None, ge=0)
    # GPU time between two eagerly launched kernels, where a replayed graph leaves a few tenths of a
    # microsecond: an eager step's kernels stand this far apart even when the CPU launches ahead of
    # them, so it is slower than the graph step at every batch. Measured on the lent H100
    # (benchmarks/measured/h100-2026-12-06/decode_graphs.json, a Llama-3.1-8B step of 421-452 kernels
    # at batch 256 / 64, where the host's ~14 us a launch stays well ahead of the kernels' 22-47 us):
    # (eager step - the kernels' GPU time) / kernels = 1.76 / 1.53 us (graph: 0.11 / 0.17 us); the
    # launch-bound batches 1-16 give 1.25-1.79 us. An eager step's gaps are the larger of this times
    # its launches and cuda_graph_replay_s (never shorter than the graph step).
    eager_kernel_gap_s: float = Field(1.6e-6, ge=0)
    # Async scheduling (vLLM --async-scheduling; an engine that prepares step i+1 while the GPU
    # runs step i): a step lasts max(CPU, GPU) instead of their sum. vLLM default: off.
    async_scheduling: bool = False
    # -- token budget, prefix cache, length cap ---------------------------------------------------
    # Tokens a step may process (vLLM max_num_batched_tokens). None: unbounded (rlsim before this
    # option: one prefill step of everything admitted). vLLM V1 defaults (EngineArgs, offline LLM
    # class): 16384 on GPUs of >= 70 GiB, 8192 below; V0 without chunked prefill: max(max_model_len,
    # 2048). Without chunked_prefill, the prefills admitted together run as blocking steps of at
    # most this many tokens (a longer prompt alone); with it (vLLM V1: always on), each step also
    # carries the running decodes and prefill chunks fill the rest of the budget.
    max_num_batched_tokens: int | None = Field(None, ge=1)
    chunked_prefill: bool = False
    # vLLM V1 default on: a sample of a prompt (one group id) admitted while another sample of it
    # runs hits the prompt's cached pages (computes its last token only) and shares them (callers
    # that pass no group ids share nothing; pages whose last sample left are not kept).
    enable_prefix_caching: bool = True
    # vLLM max_model_len: prompt + response of a sequence stop there (NeMo RL sets it to
    # max_total_sequence_length: response <= T-max - prompt). None: the response lengths as given.
    max_model_len: int | None = Field(None, ge=2)
    # -- admission of waiting sequences (docs/cost-models-inference.md, "Admission") ------------------
    # kv: admit while the KV cache holds the sequence and one more step of every running one, preempt
    # the newest when a step does not fit, to the head of the queue (vLLM). reserve: SGLang's
    # scheduler (sglang 0.4.6 managers/schedule_policy.py PrefillAdder, scheduler.py): a request is
    # admitted only if its context + min(max_new_tokens, reserve_clip_tokens) fits beside what the
    # running ones may still need, min(max_new_tokens - generated, reserve_clip_tokens) x the
    # new-token ratio each; once one does not fit none is tried until a request finishes; the ratio
    # starts at reserve_init_ratio when the engine is idle and falls by (init - init x
    # reserve_min_ratio_factor) / reserve_decay_steps per decode step; a decode step that does not fit
    # retracts the requests with the fewest generated tokens to the back of the queue until
    # retract_headroom_steps steps of the rest fit, and sets the ratio to (generated +
    # retract_headroom_steps x running) / (running x max_new_tokens), at most 1.
    admission: Literal["kv", "reserve"] = "kv"
    # reserve: each request's generation cap (SGLang's sampling max_new_tokens: verl 0.5-0.6 pass
    # data.max_response_length; verl 0.7's server passes max_response_length + max_prompt_length - the
    # prompt's length, more for a short prompt, which the 4096-token clip hides for caps beyond it).
    # None: the workload's response_length max when the run has one, else reserve_clip_tokens.
    max_new_tokens: int | None = Field(None, ge=1)
    # sglang 0.4.6 global_config.py (SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
    # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, retract_decode_steps) and schedule_policy.py
    # (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION); the same in 0.5.2 and in 0.5.6 (srt/environ.py).
    reserve_init_ratio: float = Field(0.7, gt=0, le=1)
    reserve_min_ratio_factor: float = Field(0.14, ge=0, le=1)
    reserve_decay_steps: float = Field(600.0, gt=0)
    reserve_clip_tokens: int = Field(4096, ge=1)
    retract_headroom_steps: int = Field(20, ge=1)

    @field_validator(*RESERVE_KEYS, mode="after")
    @classmethod
    def _reserve_keys_need_reserve(cls, value: Any, info: ValidationInfo) -> Any:
        """The reservation constants apply to admission: reserve only (set away from their defaults
        with kv they would be silently ignored; at their defaults, as a whole dump gives them, they
        change nothing). A field validator, so the error names the key."""
        name = info.field_name or ""
        if value != cls.model_fields[name].default and (info.data or {}).get("admission", "reserve") != "reserve":
            raise RlsimError("applies to admission: reserve (SGLang's scheduler)",
                             fix=f"remove {name} or set admission: reserve")
        return value
    # -- dispatch of a round's requests to the rollout instances (read by rl/schedules/batches.py) --
    # per-prompt: a prompt's n samples go to one instance, whole prompts dealt round-robin in round
    # order. The frameworks' way: one vLLM request with SamplingParams(n) per prompt; verl hands each
    # rollout worker whole prompts with rollout.n and its fully-async Rollouter routes a prompt's n
    # requests together (frameworks.md: "a sample is one prompt with its rollout.n trajectories");
    # NeMo RL repeats each prompt num_generations_per_prompt times in place (repeat_interleave) and
    # shards the batch contiguously over its vLLM workers. Prefix caching then shares the prompt's
    # prefill, and a prompt's correlated lengths (response_length.group_correlation) stay together.
    # per-sample: every sequence dealt round-robin on its own (rlsim before this option).
    dispatch: Literal["per-prompt", "per-sample"] = "per-prompt"
    hbm_efficiency: float | None = Field(None, gt=0, le=1)   # None: the device's (hardware.md 0.75-0.85)
    gemm_efficiency: float | None = Field(None, gt=0, le=1)  # None: the device's
    # hardware.md: decode attention / MLA kernels on 910C reach ~65% of compute (CloudMatrix paper).
    attention_compute_efficiency: float = Field(0.65, gt=0, le=1)
    # Tokens of a KV-cache page (vLLM --block-size: 16 on CUDA, platforms/cuda.py
    # check_and_update_config). Sizes the pages a sliding-window layer keeps a running sequence
    # (cdiv(window - 1, size) + 1) and a Mamba hybrid's attention page (llm/kv_pool.py); a full-attention
    # model's tokens are counted one by one, so it applies to a model with sliding-window, Mamba or
    # linear-attention layers only.
    kv_block_size: int = Field(16, ge=1)
    # Llama 4's chunked-attention layers under the hybrid KV cache manager (each keeps a chunk's pages
    # a sequence, as a window). vLLM 0.11 turns the manager off for them unless
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (config/__init__.py VllmConfig.__post_init__,
    # "latency regression"), and then caches them as full attention (v1/core/kv_cache_utils.py
    # unify_hybrid_kv_cache_specs): off by default. Applies to a model with chunked attention only.
    hybrid_kv_chunked_attention: bool = False
    # vLLM's hybrid KV cache manager (llm/kv_pool.py): each kind of layer drawn as its own group, a
    # sliding-window layer a window's pages a sequence. Off, a model that mixes full-attention with
    # sliding-window or chunked layers caches every layer's every token: vLLM turns the window specs
    # into full-attention ones (v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs). vLLM 0.9 - 0.11
    # run the manager unless --disable-hybrid-kv-cache-manager (config/scheduler.py
    # disable_hybrid_kv_cache_manager, False; 0.9.2 config.py SchedulerConfig); vLLM 0.8.5 has none
    # and unifies every such model (get_kv_cache_config calls unify_hybrid_kv_cache_specs
    # unconditionally): the vllm-0.8 engines run it off whatever they are given
    # (engine_software.py VLLM_08_NO_HYBRID_KV). Applies under kv_pool: vllm to such a model only.
    hybrid_kv_cache_manager: bool = True
    # -- the engine's KV memory (llm/kv_pool.py, llm/sglang_pool.py) -------------------------------
    # vllm: vLLM V1's one hybrid pool of pages (windows and Mamba states drawn per running sequence).
    # sglang: SGLang's pools (read in the sglang 0.5.2 / 0.5.6 wheels, model_executor/model_runner.py
    # profile_max_num_token, set_num_token_hybrid, handle_max_mamba_cache; mem_cache/memory_pool.py
    # SWAKVPool, HybridLinearKVPool, MambaPool): a token pool of the attention layers, page size 1; a
    # sliding-window model's split into a full-attention and an SWA pool by swa_full_tokens_ratio,
    # unless SGLang turns its hybrid SWA memory off for the architecture (Gemma 2 / 3, gpt-oss: every
    # layer then caches every token); a Mamba / linear-attention model's states in a pool of fixed
    # slots taken from the memory first, which bounds the running requests. The named SGLang engines
    # set it.
    kv_pool: Literal["vllm", "sglang"] = "vllm"
    # SGLang --swa-full-tokens-ratio: an SWA layer's tokens / a full layer's (ServerArgs.swa_full_tokens_ratio,
    # 0.8 in 0.5.2 and 0.5.6). Applies with kv_pool: sglang on a model SGLang keeps an SWA pool for.
    swa_full_tokens_ratio: float = Field(0.8, gt=0)
    # SGLang --max-mamba-cache-size without a radix cache on the states: the Mamba state slots. Unset
    # (None), SGLang takes --max-running-requests when it is given, else 512 (0.5.6 model_runner.py
    # handle_max_mamba_cache; 0.5.2 the same in ModelRunner.__init__): rollout_layout.max_num_seqs where
    # max_running_requests_given, else llm/sglang_pool.py SGLANG_MAMBA_SLOTS_UNSET. Applies with kv_pool:
    # sglang on a Mamba / linear-attention model whose states have no radix cache.
    mamba_slots: int | None = Field(None, ge=1)
    # Whether the engine is started with --max-running-requests = rollout_layout.max_num_seqs, as verl 0.6
    # and 0.7 pass it (sglang_rollout.py, async_sglang_server.py: max_running_requests = rollout.max_num_seqs):
    # the named SGLang engines set it where the workload gives rollout_layout.max_num_seqs (without it,
    # SGLang's request pool and rlsim's engine default stand). Sizes mamba_slots when unset. Applies with
    # kv_pool: sglang.
    max_running_requests_given: bool = False
    # SGLang 0.5.6 keeps its radix cache for a Gated DeltaNet hybrid (Qwen3-Next: MambaRadixCache) and
    # then sizes the state pool by memory: --mamba-full-memory-ratio (0.9) of state to token memory,
    # and bounds the running requests to the slots // mamba_slots_per_request (model_runner.py
    # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, 3). It turns the radix cache off for Mamba-2 hybrids
    # (Nemotron-H: "disable radix cache"), as 0.5.2 did for every state model
    # (linear_attention_radix_cache false); with enable_prefix_caching false there is none either.
    linear_attention_radix_cache: bool = True
    mamba_full_memory_ratio: float = Field(0.9, gt=0)
    mamba_slots_per_request: int = Field(3, ge=1)
    # vLLM reserves activation peak (profiled at max_num_batched_tokens) and CUDA-graph memory:
    # a couple of GB for 7B-70B models.
    workspace_bytes: float = Field(2e9, ge=0)
    activation_bytes: float = Field(2, gt=0)        # bf16 activations (TP all-reduce, EP combine)
    # Activations a pipeline-parallel engine sends a stage boundary per token: vLLM's decoder models
    # hand on IntermediateTensors {"hidden_states", "residual"} (read in the vllm 0.11.0 wheel:
    # model_executor/models/llama.py), each split over the TP ranks for the send and re-gathered
    # after it (v1/worker/gpu_worker.py: send_tensor_dict(all_gather_group=get_tp_group())). Read
    # only with rollout_layout.pp > 1.
    pipeline_send_tensors: int = Field(2, ge=1)
    dispatch_bytes: float = Field(2, gt=0)          # EP dispatch payload per element (1 with int8 dispatch)
    absorb_mla: bool = True                         # MLA decode in the latent space (DeepSeek kernels)
    # Used only when no CollectiveModel is given: time = launch + steps(op, n) x step latency +
    # busbw factor x bytes / (scale-up link x eff), the nccl-tests convention (ring all-reduce
    # 2(n-1) steps, all-to-all n-1). hardware.md: CloudMatrix node-to-node latency < 1 us; NCCL
    # small all-reduces on 8 NVLink GPUs take ~10 us over 14 ring steps. A scenario's run always has
    # one, so a scenario refuses them (FALLBACK_COLLECTIVE_KEYS); the standalone predictors read them.
    fallback_step_latency_s: float = Field(1e-6, ge=0)
    fallback_collective_efficiency: float = Field(0.8, gt=0, le=1)
    # The engine's own TP all-reduce (vLLM and SGLang custom_all_reduce.py, on unless
    # disable_custom_all_reduce; read in the vllm 0.8.5 / 0.11.0 and sglang 0.4.6 - 0.5.6 wheels): a
    # TP group of 2, 4, 6 or 8 GPUs of one node reduces buffers under custom_all_reduce_max_bytes
    # (8 MiB in all of them) with a kernel over peer memory, one barrier per shot instead of NCCL's
    # protocol steps: one shot (every rank reads each peer's whole buffer) or two (reduce-scatter,
    # then all-gather); rlsim prices the cheaper on the node's links (network/collectives.py
    # custom_all_reduce_lines). Other groups and sizes: NCCL. verl turns it off for vLLM
    # (disable_custom_all_reduce=True in every rollout it starts). Off: NCCL for every all-reduce
    # (rlsim's own default, its behaviour before this field).
    custom_all_reduce: bool = False
    custom_all_reduce_max_bytes: float = Field(8 * 2**20, gt=0)
    # -- speculative decoding (docs/cost-models-inference.md "Speculative decoding", llm/speculative.py) --
    # vLLM's speculative_config / SGLang's --speculative-algorithm: the drafter. draft_model: a separate
    # small model (speculative_draft_model); eagle / eagle3: an EAGLE head of speculative_draft_layers
    # layers of the target's shape sharing its embedding and LM head (vLLM llama_eagle.py, llama_eagle3.py);
    # mtp: the target's own multi-token-prediction layers (DeepSeek-V3's num_nextn_predict_layers: 1,
    # vLLM deepseek_mtp.py; verl's rollout.mtp). None: no speculation (rlsim before these fields).
    speculative_method: Literal["draft_model", "eagle", "eagle3", "mtp"] | None = None
    # Tokens drafted a sequence and step (vLLM num_speculative_tokens, SGLang --speculative-num-steps):
    # the target verifies this many + 1 positions a sequence in one forward.
    num_speculative_tokens: int = Field(0, ge=0, validate_default=True)
    # The chance that the target accepts a drafted token, each drawn independently (Leviathan et al.
    # 2023, arXiv 2211.17192: E = (1 - a^(k+1)) / (1 - a) tokens a step). It depends on the draft, the
    # data and the sampling temperature, so it has no default: required with speculative_method (measure
    # it: vLLM's spec_decode acceptance metrics, SGLang's accept length = E).
    speculative_acceptance_rate: float | None = Field(None, ge=0, le=1, validate_default=True)
    # The draft model of speculative_method draft_model (a preset name or a config.json path, as
    # workload.model); served with the target's layout and dtypes.
    speculative_draft_model: str | None = Field(None, validate_default=True)
    # Layers of an eagle / eagle3 / mtp drafter, of the target's shape: 1 (an EAGLE head is one decoder
    # layer, vLLM LlamaModel in llama_eagle.py / llama_eagle3.py; DeepSeek-V3's num_nextn_predict_layers
    # is 1). Each draft forward runs them all.
    speculative_draft_layers: int = Field(1, ge=1)
    # The drafter's input projection in hidden x hidden units; None: the method's (llm/speculative.py
    # DRAFT_FC_INPUTS: eagle 2, eagle3 3, mtp 2, draft_model 0).
    speculative_draft_fc_inputs: int | None = Field(None, ge=0)
    # The drafter's first forward: false (vLLM 0.11's default, SpeculativeConfig.disable_padded_drafter_batch
    # False; gpu_model_runner.py propose_draft_token_ids -> EagleProposer.prepare_inputs_padded: "all tokens
    # are included as inputs to the speculator, with the rejected tokens used as padding") runs it over
    # the k + 1 positions the target verified a sequence; true (vLLM's disable_padded_drafter_batch,
    # prepare_inputs) over the E tokens the step accepted, as SGLang 0.4.6.post5's draft-extend does
    # (eagle_utils.py prepare_extend_after_decode: extend_lens = accept_length + 1; engine sglang sets it;
    # 0.5.2 and 0.5.6 replay a graph padded to k + 1 a sequence). Either way its LM head scores one row a
    # sequence.
    speculative_disable_padded_drafter_batch: bool = False
    # Whether an eagle / eagle3 / mtp drafter holds an LM head of its own beside the target's (its memory);
    # None: the method's (llm/speculative.py DRAFT_OWN_LM_HEAD: vLLM's MTP module its own, an EAGLE head
    # the target's; the SGLang engines share it for mtp too).
    speculative_draft_own_lm_head: bool | None = None
    # KV slots a running sequence holds beyond its context for the drafts it verifies and will write; None:
    # the method's (llm/speculative.py lookahead_tokens): vLLM 0.11 allocates computed + new + lookahead
    # slots a running request each step (kv_cache_manager.py allocate_slots), new = 1 + k (the sampled token
    # and the k drafts it verifies), lookahead num_speculative_tokens for an EAGLE-style drafter (eagle,
    # eagle3, mtp: v1/core/sched/scheduler.py __init__, `if speculative_config.use_eagle():
    # self.num_lookahead_tokens = self.num_spec_tokens`): 2 k, k for a draft model (no use_eagle); its
    # admission and preemption count them. The SGLang engines set 0 (speculative/eagle_worker.py draft: its
    # draft and verify slots are allocated and restored within the step).
    speculative_lookahead_tokens: int | None = Field(None, ge=0)

    @field_validator("custom_all_reduce_max_bytes", mode="after")
    @classmethod
    def _custom_size_needs_custom(cls, value: float, info: ValidationInfo) -> float:
        default = cls.model_fields["custom_all_reduce_max_bytes"].default
        if value != default and not (info.data or {}).get("custom_all_reduce", True):
            raise RlsimError("applies only with custom_all_reduce: true",
                             fix="remove custom_all_reduce_max_bytes or set custom_all_reduce: true")
        return value

    @field_validator("num_speculative_tokens", mode="after")
    @classmethod
    def _drafts_need_a_method(cls, value: int, info: ValidationInfo) -> int:
        method = (info.data or {}).get("speculative_method")
        if value and method is None:
            raise RlsimError("drafted tokens need a drafter",
                             fix="set speculative_method (draft_model, eagle, eagle3 or "
                                 "mtp), or remove num_speculative_tokens")
        if not value and method is not None:
            raise RlsimError(f"speculative_method {method} drafts num_speculative_tokens a step, which is 0",
                             fix="give "
                                 "num_speculative_tokens of 1 or more (vLLM's num_speculative_tokens), or remove "
                                 "speculative_method")
        return value

    @field_validator("speculative_acceptance_rate", mode="after")
    @classmethod
    def _acceptance_with_speculation(cls, value: float | None, info: ValidationInfo) -> float | None:
        """Given with speculation, and only with it: no default (it depends on the draft, the data and
        the temperature)."""
        method = (info.data or {}).get("speculative_method")
        if value is None and method is not None:
            raise RlsimError(f"speculative_method {method} needs the rate at which the target accepts a drafted "
                             "token, which depends on the draft, the data and the sampling temperature",
                             fix="give "
                                 "speculative_acceptance_rate (0 to 1; measured, e.g. vLLM's spec_decode acceptance "
                                 "metrics: a measured mean of L tokens a step gives it, (1 - a^(k+1)) / (1 - a) = L)")
        if value is not None and method is None:
            raise RlsimError("applies with speculative_method",
                             fix="remove speculative_acceptance_rate or set speculative_method")
        return value

    @field_validator("speculative_draft_model", mode="after")
    @classmethod
    def _draft_model_for_its_method(cls, value: str | None, info: ValidationInfo) -> str | None:
        method = (info.data or {}).get("speculative_method")
        if value is None and method == "draft_model":
            raise RlsimError("speculative_method draft_model needs the draft",
                             fix="give speculative_draft_model (a model preset or a config.json path)")
        if value is not None and method != "draft_model":
            raise RlsimError(f"applies with speculative_method: draft_model, not {method}",
                             fix="remove speculative_draft_model or set speculative_method: draft_model")
        return value

    @field_validator("speculative_draft_layers", "speculative_draft_fc_inputs",
                     "speculative_disable_padded_drafter_batch", "speculative_draft_own_lm_head",
                     "speculative_lookahead_tokens", mode="after")
    @classmethod
    def _head_shape_for_a_head(cls, value: Any, info: ValidationInfo) -> Any:
        """The head's shape (its layers, its own LM head) applies to a drafter of the target's layers
        (eagle, eagle3, mtp); the fc inputs, the first forward's padding and the lookahead slots to any drafter; away from
        their defaults only."""
        name = info.field_name or ""
        method = (info.data or {}).get("speculative_method")
        heads = ("eagle", "eagle3", "mtp") if name in ("speculative_draft_layers", "speculative_draft_own_lm_head") \
            else ("draft_model", "eagle", "eagle3", "mtp")
        if value != cls.model_fields[name].default and method not in heads:
            raise RlsimError(f"applies with speculative_method {' / '.join(heads)}, not {method}",
                             fix=f"remove {name}")
        return value

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, source: str = "<inference>",
                     field_name: str = "inference") -> "InferenceParams":
        try:
            return cls.model_validate(dict(mapping or {}))
        except ValidationError as exc:
            raise validation_error(exc, source=source, prefix=field_name, model=cls,
                                   fix="see docs/cost-models-inference.md for the fields") from None


# InferenceParams' speculative-decoding keys: a served model (reward model, teacher) prefills and decodes
# nothing, so it takes none of them from the rollout engine's (rl/llm_costs.py _resolve_one).
SPECULATIVE_KEYS = ("speculative_method", "num_speculative_tokens", "speculative_acceptance_rate",
                    "speculative_draft_model", "speculative_draft_layers", "speculative_draft_fc_inputs",
                    "speculative_disable_padded_drafter_batch", "speculative_draft_own_lm_head",
                    "speculative_lookahead_tokens")


@dataclass(frozen=True)
class TrainSoftware:
    """A software stack: `params` for the cost model, and the layout options it always uses
    (`recompute`, `zero`, `sequence_parallel`) or lacks (`context_parallel`, `pipeline_parallel`,
    `tensor_parallel`)."""

    name: str
    params: TrainParams
    recompute: tuple[str, ...]          # recompute modes the stack offers / was run with
    zero: tuple[int, ...]               # ZeRO stages it offers
    sequence_parallel: bool | None      # None: on whenever tp > 1
    context_parallel: bool              # whether cp > 1 exists
    pipeline_parallel: bool             # whether pp > 1 (and interleaved chunks, vpp > 1) exist
    tensor_parallel: bool               # whether tp > 1 exists
    source: str = ""
    # where a layout it lacks runs instead: the fix of a refused layout (the framework's other backend)
    lacking_fix: str = "pick another workload.train_software (megatron-core has every dimension)"
    # The layout keys ("zero", "recompute") whose values above bound a given train_layout too, not only the
    # planner's search (search_limits): the trainer has no other (transformers' gradient checkpointing is
    # whole layers or none; verl's FSDP shards as ZeRO-3 or -2). Elsewhere they are the stack's defaults
    # and a given other value a what-if (the 2021 / 2022 Megatron stacks under a later distributed optimizer).
    bounded: tuple[str, ...] = ()
    # Megatron's methods of full recompute (--recompute-method; TrainLayout.recompute_method) the stack runs and
    # its planner searches (SearchSpace.recompute_method): "block" lets full recompute cover the first N
    # layers of each model chunk. Where "recompute" is bounded, a train_layout away from uniform 1 is refused.
    recompute_methods: tuple[str, ...] = ("uniform", "block")
    # Whether the routed experts take a tensor-parallel size of their own (etp 1 beside tp > 1: MoE parallel
    # folding, the experts over EP alone with the TP ranks lent to EP), which the planner then searches beside
    # etp = tp (SearchSpace.expert_tp_folding). Without it the experts split over the stack's TP as its dense
    # layers do (etp = tp), the only MoE layout the planner offers there.
    expert_tensor_parallel: bool = False
    # The trainer's refusal of pipeline stages (pp > 1) for a model whose output layer ties its input
    # embedding (tie_word_embeddings), quoted with its source; "" where it runs them (Megatron keeps a copy
    # on the last stage and all-reduces their gradients: llm/training.py _tied_embedding_sync_s). The
    # planner searches pp 1 alone for such a model there (search_limits).
    tied_pipeline_refusal: str = ""
    # Whether the stack's Megatron-Core refuses the allgather token dispatcher beside variable_seq_lengths=True
    # (comm.pp_variable_seq_lengths, read at pp > 1): megatron-core 0.10.0 on (DISPATCHER_VARIABLE_LENGTH_REFUSAL);
    # 0.8.0 has no such check, and Megatron-LM of 2021 / 2022 no token dispatcher.
    refuses_allgather_variable_lengths: bool = False

    def refused_dispatcher(self, layout: Mapping[str, Any], comm: "CommParams") -> str | None:
        """The refusal of `layout`'s pipeline (pp > 1) beside comm.moe_token_dispatcher allgather and
        comm.pp_variable_seq_lengths true on a stack whose Megatron-Core refuses the pair
        (refuses_allgather_variable_lengths); None otherwise."""
        pp = layout.get("pp", 1)
        if (not self.refuses_allgather_variable_lengths or comm.moe_token_dispatcher != "allgather"
                or not comm.pp_variable_seq_lengths or pp in (1, None)):
            return None
        return (f"the allgather token dispatcher (train_params.comm.moe_token_dispatcher) beside variable-length "
                f"pipeline sends (train_params.comm.pp_variable_seq_lengths: true, Megatron's variable_seq_lengths) "
                f"at pp={pp}: {self.name} (Megatron-Core 0.10 or later) refuses the pair at start-up "
                f"({DISPATCHER_VARIABLE_LENGTH_REFUSAL})")

    def check_dispatcher(self, layout: Mapping[str, Any], comm: "CommParams", source: str | None = None) -> None:
        """RlsimError at workload.train_params.comm.moe_token_dispatcher where refused_dispatcher refuses
        `layout` beside `comm`, naming the three fixes."""
        refused = self.refused_dispatcher(layout, comm)
        if refused:
            raise RlsimError(refused, source=source, field=DISPATCHER_FIELD,
                             fix=f"set {DISPATCHER_FIELD}: alltoall, or workload.train_params.comm."
                                 "pp_variable_seq_lengths: false (one p2p shape, each micro-batch padded to the "
                                 "longest, as NeMo RL runs it), or workload.train_layout.pp: 1")

    def refused_tied_pipeline(self, layout: Mapping[str, Any], model: Any) -> str | None:
        """The message "pp=<p>: <stack> ... (the trainer's refusal)" where `layout` pipelines (pp > 1) a `model` whose
        output layer ties its input embedding (ModelSpec.tied_embeddings, the config's tie_word_embeddings:
        a value head keeps the flag) on a stack that refuses it (tied_pipeline_refusal); None otherwise."""
        pp = layout.get("pp", 1)
        if not self.tied_pipeline_refusal or not getattr(model, "tied_embeddings", False) or pp in (1, None):
            return None
        return (f"pp={pp}: {self.name} runs no pipeline stages for {getattr(model, 'name', 'the model')}, whose "
                f"output layer ties its input embedding (tie_word_embeddings): {self.tied_pipeline_refusal}")

    def refuses_pipelines_for(self, model: Any) -> bool:
        """Whether this stack runs no pipeline stages at all for `model` (refused_tied_pipeline at any pp > 1)."""
        return self.refused_tied_pipeline({"pp": 2}, model) is not None

    def tied_pipeline_fix(self) -> str:
        """The fix of a layout refused_tied_pipeline refuses."""
        return f"set pp: 1 and vpp: 1, a model without tied embeddings, or {self.lacking_fix}"

    def layout_fields(self, **fields: Any) -> dict[str, Any]:
        """Training-layout fields with this stack's settings (the first recompute mode and ZeRO
        stage, its sequence parallelism) unless `fields` give them; RlsimError for a TP, PP or CP it lacks."""
        fields.setdefault("recompute", self.recompute[0])
        fields.setdefault("zero", self.zero[0])
        fields.setdefault("sequence_parallel", self.sequence_parallel)
        refused = self.lacked_dimension(fields)
        if refused:
            key, message = refused
            raise RlsimError(message, field=f"workload.train_layout.{key}", fix=self.lacked_fix(key))
        return fields

    def lacked_dimension(self, layout: Mapping[str, Any]) -> tuple[str, str] | None:
        """(the layout key, "<key>=<value>: <stack> has no <dimension>") of the first parallel
        dimension `layout` uses above 1 that this stack lacks; None where it lacks none."""
        lacks = (("tp", self.tensor_parallel, "tensor parallelism"), ("pp", self.pipeline_parallel, "pipeline "
                 "parallelism"), ("vpp", self.pipeline_parallel, "interleaved pipeline chunks"),
                 ("cp", self.context_parallel, "context parallelism"))
        for key, offered, what in lacks:
            if not offered and layout.get(key, 1) not in (1, None):
                return key, f"{key}={layout[key]}: {self.name} has no {what}"
        return None

    def unoffered_setting(self, layout: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """(the layout key, "<key>=<value>: <stack> runs <key> <offered> only", the fix) of the first ZeRO
        stage or recompute mode `layout` gives that this stack does not run (a `bounded` key outside the values
        the planner searches on it: search_limits); None where it gives none."""
        for key, offered in (("zero", self.zero), ("recompute", self.recompute)):
            value = layout.get(key)
            if key in self.bounded and value is not None and value not in offered:
                shown = ", ".join(map(str, offered))
                return (key, f"{key}={value}: {self.name} runs {key} {shown} only",
                        f"set {key}: {' or '.join(map(str, offered))}, or another workload.train_software")
        return self._unoffered_recompute_method(layout) if "recompute" in self.bounded else None

    def _unoffered_recompute_method(self, layout: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """unoffered_setting's answer for a recompute_method outside recompute_methods, or a recompute_num_layers
        above 1 on a stack that recomputes whole layers one by one only (uniform 1)."""
        method, layers = layout.get("recompute_method"), layout.get("recompute_num_layers")
        if method is not None and method not in self.recompute_methods:
            return ("recompute_method", f"recompute_method={method}: {self.name} runs recompute_method "
                    f"{', '.join(self.recompute_methods)} only", f"drop recompute_method, or {self.lacking_fix}")
        if self.recompute_methods == ("uniform",) and layers not in (None, 1):
            return ("recompute_num_layers", f"recompute_num_layers={layers}: {self.name} checkpoints each layer "
                    "on its own (recompute_num_layers 1 only)", f"drop recompute_num_layers, or {self.lacking_fix}")
        return None

    def lacked_fix(self, key: str) -> str:
        """The fix of a layout that sets `key` above 1 on this stack."""
        return f"set {'pp: 1 and vpp: 1' if key in ('pp', 'vpp') else f'{key}: 1'}, or {self.lacking_fix}"

    def search_limits(self, model: Any = None) -> dict[str, list]:
        """The planner search-space fields this stack pins (`SearchSpace(**limits)`); with `model`, no
        pipeline where the stack refuses one for it (refused_tied_pipeline)."""
        out: dict[str, list] = {"recompute": list(self.recompute), "zero": list(self.zero),
                                "recompute_method": list(self.recompute_methods)}
        piped = self.pipeline_parallel and (model is None or not self.refuses_pipelines_for(model))
        for key, offered in (("tp", self.tensor_parallel), ("pp", piped), ("vpp", piped),
                             ("cp", self.context_parallel)):
            if not offered:
                out[key] = [1]
        return out

    def replace(self, **fields: Any) -> "TrainSoftware":
        return replace(self, **fields)


# Megatron-LM as in Narayanan et al. 2021 (arXiv 2104.04473, sec. 5): full activation recomputation
# (Table 1 note), materialized attention (FlashAttention came in 2022), no sequence parallelism (2022,
# arXiv 2205.05198), no distributed optimizer (ZeRO 0), no context parallelism, TP all-reduces and
# pipeline sends on the compute stream, the DP all-reduce after the flush, and blocking
# point-to-point (batch_isend_irecv + wait + cuda.synchronize in megatron/p2p_communication.py).
# The 2021 runs checkpoint every layer's input (Table 1's full recompute, --checkpoint-activations): the
# planner searches that alone there; a block layout given by hand is a what-if (recompute is not bounded).
MEGATRON_2021_RECOMPUTE_METHODS = ("uniform",)
MEGATRON_2021 = TrainSoftware(
    name="megatron-2021",
    params=TrainParams(compute=ComputeParams(flash_attention=False),
                       comm=CommParams(tp_overlap_fraction=0.0, dp_overlap_fraction=0.0, pp_blocking_send=True,
                                       grad_reduce_bytes_per_param=2.0),
                       memory=MemoryParams(grad_bytes_per_param=2.0)),
    recompute=("full",), zero=(0,), sequence_parallel=False, context_parallel=False,
    pipeline_parallel=True, tensor_parallel=True, recompute_methods=MEGATRON_2021_RECOMPUTE_METHODS,
    source="arXiv 2104.04473; NVIDIA/Megatron-LM 2021 (megatron/p2p_communication.py, schedules.py)")

# Megatron-Core's MoE parallel folding: --expert-tensor-parallel-size (expert_tensor_parallel_size, tp when
# unset) gives the routed experts a TP size of their own, EP x etp dividing TP x CP x DP
# (megatron/core/parallel_state.py initialize_model_parallel, core_r0.10.0 on); fine-grained MoE trains at
# etp 1 there (NeMo RL v0.5's recipes via grpo_math_1B.yaml, AReaL 1.0.4's alloc_mode.py default: 1;
# ../shared/reference/published-results.md V6 notes). Megatron-LM of 2021 / 2022 had no MoE layers:
# those stacks split any experts over their TP (etp = tp).
MCORE_EXPERT_TENSOR_PARALLEL = True
# megatron-core 0.10.0 (and 0.12.0, 0.13.0) transformer/transformer_config.py TransformerConfig.__post_init__:
# `if self.moe_token_dispatcher_type in ['allgather', 'alltoall_seq']: if self.variable_seq_lengths is True:
# raise ValueError("Token dispatcher type: ... does not support variable sequence length, please use alltoall
# dispatcher instead.")`; 0.8.0 has no such check. The frameworks rlsim imports run Megatron-Core 0.12 or later
# (verl, NeMo RL's Megatron-Bridge, AReaL, SkyRL), the versions the megatron-core stacks stand for.
DISPATCHER_VARIABLE_LENGTH_REFUSAL = ("megatron-core 0.10.0 transformer/transformer_config.py __post_init__: "
                                      "'Token dispatcher type: allgather does not support variable sequence length, "
                                      "please use alltoall dispatcher instead.'")
MCORE_REFUSES_ALLGATHER_VARIABLE_LENGTHS = True
DISPATCHER_FIELD = "workload.train_params.comm.moe_token_dispatcher"

# Megatron-Core (NVIDIA/Megatron-LM core_r0.x, 2024-2025) with its default flags: FlashAttention
# (--attention-backend flash / TE fused attention), sequence parallelism with TP (arXiv 2205.05198),
# the distributed optimizer (ZeRO 1, --use-distributed-optimizer) first and ZeRO 0-3 offered (FSDP),
# selective recomputation first (--recompute-granularity selective, arXiv 2205.05198) and full /
# none offered, context parallelism (ring attention, --context-parallel-size), non-blocking
# pipeline sends; TP / DP overlap off (--tp-comm-overlap and --overlap-grad-reduce default False).
# Its constants are TrainParams' defaults: the stack every workload uses unless it names another.
MEGATRON_CORE = TrainSoftware(
    name="megatron-core", params=TrainParams(),
    recompute=("selective", "none", "full"), zero=(1, 0, 2, 3), sequence_parallel=None, context_parallel=True,
    pipeline_parallel=True, tensor_parallel=True, expert_tensor_parallel=MCORE_EXPERT_TENSOR_PARALLEL,
    refuses_allgather_variable_lengths=MCORE_REFUSES_ALLGATHER_VARIABLE_LENGTHS,
    source="NVIDIA/Megatron-LM megatron/core (training/arguments.py defaults); arXiv 2205.05198")

# Megatron-LM as in Korthikanti et al. 2022 (arXiv 2205.05198): sequence parallelism with TP
# (sec. 4.2.2) and selective activation recomputation (sec. 5) on top of the 2021 stack, full
# recompute still offered; attention materialized (the paper's Table 4 runs predate FlashAttention
# in Megatron), blocking pipeline sends (megatron/p2p_communication.py as in 2021), TP all-reduces
# and the DP all-reduce on the critical path, no distributed optimizer, no context parallelism;
# the SP backward re-gather of the column-parallel inputs (sec. 4.2.2) on, issued asynchronously
# under the data-gradient GEMM (assumed half hidden).
MEGATRON_2022 = TrainSoftware(
    name="megatron-2022",
    params=TrainParams(compute=ComputeParams(flash_attention=False),
                       comm=CommParams(tp_overlap_fraction=0.0, dp_overlap_fraction=0.0, pp_blocking_send=True,
                                       sp_backward_allgather=True, sp_backward_allgather_overlap_fraction=0.5,
                                       grad_reduce_bytes_per_param=2.0),
                       memory=MemoryParams(grad_bytes_per_param=2.0)),
    recompute=("selective", "full", "none"), zero=(0,), sequence_parallel=None, context_parallel=False,
    pipeline_parallel=True, tensor_parallel=True,
    source="arXiv 2205.05198; NVIDIA/Megatron-LM 2022 (megatron/mpu/layers.py, p2p_communication.py)")

# Megatron-Core with the overlap flags its performance runs use (NVIDIA/Megatron-LM README, the
# r0.8.0 H100 table, V7: "fine-grained DP/TP/PP overlap"): --overlap-grad-reduce and
# --overlap-param-gather (the DP reduce-scatter / all-gather bucketed under backward / forward: all
# but one bucket of a chunk hide, Megatron-Core's bucket size: dp_bucket_min_params),
# --tp-comm-overlap (TE userbuffers: each TP collective beside one GEMM by TE's default method,
# tp_userbuffers; layers it does not cover keep 0.8 hidden, assumed), --overlap-p2p-comm
# (non-blocking sends, as megatron-core), the SP backward re-gather async under the data-gradient
# GEMM (on those layers: assumed 0.8 hidden, like the TP overlap).
MCORE_DDP_BUCKET_MIN_PARAMS = 40_000_000   # megatron-core 0.8.0 distributed_data_parallel.py
MEGATRON_CORE_OVERLAP = TrainSoftware(
    name="megatron-core-overlap",
    params=TrainParams(comm=CommParams(tp_overlap_fraction=0.8, dp_overlap_fraction=1.0,
                                       dp_bucket_min_params=MCORE_DDP_BUCKET_MIN_PARAMS, tp_userbuffers=True,
                                       sp_backward_allgather=True, sp_backward_allgather_overlap_fraction=0.8)),
    recompute=("selective", "none", "full"), zero=(1, 0, 2, 3), sequence_parallel=None, context_parallel=True,
    pipeline_parallel=True, tensor_parallel=True, expert_tensor_parallel=MCORE_EXPERT_TENSOR_PARALLEL,
    refuses_allgather_variable_lengths=MCORE_REFUSES_ALLGATHER_VARIABLE_LENGTHS,
    source="NVIDIA/Megatron-LM README (r0.8.0 performance runs); megatron-core 0.8.0 megatron/core/distributed "
           "(bucket size, overlap), optimizer/distrib_optimizer.py; transformer-engine 1.9.0 "
           "pytorch/module/base.py initialize_ub (userbuffer methods)")

# Hugging Face transformers' model code (read in the transformers 5.25.0 wheel, models/llama and
# models/qwen2 modeling_*.py), every element-wise op its own kernel, bytes per element with 2-byte
# activations. RMSNorm in fp32: the cast up (read 2, write 4), pow (4 + 4), mean (read 4), the scale
# (4 + 4), the cast down (4 + 2), the weight (2 + 2): 36 a norm, two a layer. The residual adds read
# 2 + 2 and write 2, no dropout: 6 each, two a layer. act_fn(gate) * up: SiLU (2 + 2) and the product
# (2 + 2 + 2): 10 per FFN unit. apply_rotary_pos_emb, q * cos (2 + 2), rotate_half's negated half and
# cat (1 + 1, 2 + 2), * sin (2 + 2), the sum (2 + 2 + 2): 20 per rotated element.
HF_RMSNORM_BYTES_PER_HIDDEN = 36.0
HF_RESIDUAL_BYTES_PER_HIDDEN = 6.0
HF_SWIGLU_BYTES_PER_FFN = 10.0
HF_ROPE_BYTES_PER_ELEMENT = 20.0
# What autograd keeps of that model code for the backward (counted with saved_tensors_hooks on the
# layer written op for op: benchmarks/hf_saved_activations.py, 225,400 B a token a Qwen2.5-7B layer):
# Qwen2RMSNorm / LlamaRMSNorm keep the input cast up to fp32 (pow and the rsqrt scale read it: 4 B)
# and the normalized bf16 product the weight multiplies (2 B): 6 a hidden element, where Megatron's
# fused norm keeps its bf16 input (2); act_fn(gate) * up keeps gate_proj's output (SiLU's input),
# act_fn's output and up_proj's output (the product's operands), and down_proj its input, the
# product: 4 tensors of the FFN's width, where Megatron's fused SwiGLU keeps 3. No dropout in the
# models' layers (attention_dropout 0 with SDPA / flash, no hidden dropout): no masks. The rotary
# embedding keeps nothing (its products' other operands are the cos / sin tables), nor the residual
# adds; the per-token rsqrt (4 B a norm) and the attention's log-sum-exp (4 B a head) are left out
# (8 + 112 B of the 225,400).
HF_SAVED_RMSNORM_BYTES_PER_HIDDEN = 6.0
HF_SAVED_GATED_FFN_TENSORS = 4.0
# Liger's kernels keep less (liger-kernel 0.8.5 ops/rms_norm.py: ctx.save_for_backward(X, W, RSTD), the
# bf16 input; ops/swiglu.py: ctx.save_for_backward(a, b), gate and up, the product kept by down_proj):
# Megatron's counts, still without dropout masks.
LIGER_SAVED_GATED_FFN_TENSORS = 3.0

# Hugging Face transformers under DeepSpeed ZeRO or torch FSDP, as TRL's GRPOTrainer runs it (and
# verl's FSDP, OpenRLHF's and AReaL's trainers without Liger kernels): the model code's unfused
# element-wise ops (above), FlashAttention-2 / SDPA attention, gradient checkpointing (full
# recompute) or none, ZeRO 3 first and 0-2 offered, no tensor-parallel sequence parallelism unless a
# layout asks for it, context parallelism as the frameworks add it (verl's Ulysses, NeMo RL's
# DTensor cp); the collectives' constants are TrainParams' (ZeRO-3's per-layer gathers).
# Tensor parallelism as the frameworks that have it add it to the model code (NeMo RL's DTensor
# tensor_parallel_size, OpenRLHF's DeepSpeed AutoTP ds.tensor_parallel_size, AReaL's FSDP engine t);
# no pipeline stages: none of the trainers that run transformers' model code splits it into stages
# (HF_PIPELINE_PARALLEL below).
# Pipeline parallelism of the trainers on transformers' model code (read in their wheels): verl 0.9.1's
# FSDP engine builds a (ddp, fsdp) mesh and a (dp, sp) Ulysses one (workers/engine/fsdp/utils.py
# create_device_mesh, transformer_impl.py _init_device_mesh; 0.7.0 workers/fsdp_workers.py the same),
# OpenRLHF 0.11.2's DeepSpeed strategy a (dp, sp, tp) one (utils/deepspeed/deepspeed.py
# setup_distributed), AReaL 1.0.4's FSDP engine asserts it (engine/fsdp_utils/parallel.py
# ParallelHelper.from_parallel_strategy: "Pipeline parallelism is not supported in FSDP"), SkyRL
# 0.3.0's FSDP workers a (dp, sp) mesh (backends/skyrl_train/workers/worker.py), accelerate 1.16's
# ParallelismConfig (TRL's GRPOTrainer) dp_replicate / dp_shard / tp / cp / sp and no pp, NeMo RL's
# dtensor_cfg tensor / context / sequence parallel only (/work/shared/reference/frameworks.md: its
# pipeline stages are its Megatron backend's). Pipelines are their Megatron backends'.
HF_PIPELINE_PARALLEL = False
HF_MEGATRON_BACKEND_FIX = ("pick a Megatron stack (workload.train_software: megatron-core), which is the "
                           "framework's Megatron backend (verl actor.strategy: megatron, NeMo RL "
                           "policy.megatron_cfg.enabled, AReaL actor.backend megatron:..., SkyRL strategy megatron)")
# transformers' gradient checkpointing recomputes whole decoder layers or nothing (transformers 4.57.1
# modeling_layers.py GradientCheckpointingLayer, the base of models/qwen2 Qwen2DecoderLayer, switched on
# by PreTrainedModel.gradient_checkpointing_enable; verl 0.6.1 workers/fsdp_workers.py takes it as a bool,
# enable_gradient_checkpointing): Megatron's selective recomputation of the attention core is not there.
HF_BOUNDED = ("recompute",)
HF_RECOMPUTE_METHODS = ("uniform",)   # each decoder layer checkpointed on its own: no groups, no block
HF_TRANSFORMERS = TrainSoftware(
    name="hf-transformers",
    params=TrainParams(compute=ComputeParams(norm_traffic_bytes_per_hidden=2 * HF_RMSNORM_BYTES_PER_HIDDEN,
                                             residual_traffic_bytes_per_hidden=2 * HF_RESIDUAL_BYTES_PER_HIDDEN,
                                             gated_act_traffic_bytes_per_ffn=HF_SWIGLU_BYTES_PER_FFN,
                                             rope_traffic_bytes_per_element=HF_ROPE_BYTES_PER_ELEMENT),
                       memory=MemoryParams(norm_saved_bytes_per_hidden=HF_SAVED_RMSNORM_BYTES_PER_HIDDEN,
                                           gated_ffn_saved_tensors=HF_SAVED_GATED_FFN_TENSORS, mask_bytes=0.0,
                                           logits_bytes_per_elem=HF_LOGITS_BYTES_PER_ELEM,
                                           grad_buffer_persists=False)),
    recompute=("full", "none"), zero=(3, 2, 1, 0), sequence_parallel=False, context_parallel=True,
    pipeline_parallel=HF_PIPELINE_PARALLEL, tensor_parallel=True, lacking_fix=HF_MEGATRON_BACKEND_FIX,
    bounded=HF_BOUNDED, recompute_methods=HF_RECOMPUTE_METHODS,
    source="transformers 5.25.0 models/llama/modeling_llama.py, models/qwen2/modeling_qwen2.py (LlamaRMSNorm, "
           "apply_rotary_pos_emb, LlamaMLP, LlamaDecoderLayer)")

# Liger's Triton kernels patched into transformers' model (liger-kernel 0.8.5 ops/rms_norm.py, rope.py,
# swiglu.py, read in its wheel): RMSNorm one kernel (read X 2, write Y 2: 4 a norm), RoPE in place
# on q and k (read 2, write 2 a rotated element), SiLU x up one kernel (read 2 + 2, write 2); the
# residual adds stay transformers'. TRL use_liger_kernel, verl model.use_liger, OpenRLHF
# ds.use_liger_kernel (their fused linear cross entropy is not used: the frameworks compute the
# log-probs from the logits themselves).
LIGER_RMSNORM_BYTES_PER_HIDDEN = 4.0
LIGER_ROPE_BYTES_PER_ELEMENT = 4.0
LIGER_SWIGLU_BYTES_PER_FFN = 6.0
HF_TRANSFORMERS_LIGER = HF_TRANSFORMERS.replace(
    name="hf-transformers-liger",
    params=TrainParams(compute=ComputeParams(norm_traffic_bytes_per_hidden=2 * LIGER_RMSNORM_BYTES_PER_HIDDEN,
                                             residual_traffic_bytes_per_hidden=2 * HF_RESIDUAL_BYTES_PER_HIDDEN,
                                             gated_act_traffic_bytes_per_ffn=LIGER_SWIGLU_BYTES_PER_FFN,
                                             rope_traffic_bytes_per_element=LIGER_ROPE_BYTES_PER_ELEMENT),
                       memory=MemoryParams(gated_ffn_saved_tensors=LIGER_SAVED_GATED_FFN_TENSORS, mask_bytes=0.0,
                                           logits_bytes_per_elem=HF_LOGITS_BYTES_PER_ELEM,
                                           grad_buffer_persists=False)),
    source="liger-kernel 0.8.5 liger_kernel/ops/rms_norm.py, rope.py, swiglu.py; transformers 5.25.0 (residual adds)")

# The trainers on transformers' model code as stacks of their own (the same constants: the model code's,
# with Liger's kernels where the config asks for them), so that a layout they cannot run is refused and
# the planner does not offer one. Three add no tensor parallelism to it:
# - verl's FSDP workers: a (ddp, fsdp) mesh and Ulysses' (dp, sp), no TP (verl 0.9.1
#   workers/engine/fsdp/utils.py create_device_mesh, transformer_impl.py _init_device_mesh; 0.7.0
#   workers/fsdp_workers.py); their cp is Ulysses (ulysses_sequence_parallel_size).
# - SkyRL's FSDP workers: a (dp, sp) mesh, no TP (skyrl 0.3.0 backends/skyrl_train/workers/worker.py,
#   distributed/fsdp_utils.py create_device_mesh); cp is Ulysses (sequence_parallel_size).
# - TRL's GRPOTrainer under accelerate: GRPOConfig refuses cp_size / sp_size > 1 (trl 1.16.0
#   trainer/grpo_config.py __post_init__), and accelerate 1.16 runs tp_size > 1 only on a model already
#   loaded tensor-parallel (accelerator.py prepare_model: "Model should undergo tensor parallel before
#   passing it to accelerate"), which GRPOTrainer's create_model_from_path does not ask for; rlsim's
#   import models its data-parallel backends (DDP, DeepSpeed ZeRO, FSDP) only. A tp_plan "auto" through
#   model_init_kwargs is not a TP trainer either: create_model_from_path sets device_map "auto" unless
#   given (trl 1.16.0 trainer/utils.py), which from_pretrained refuses beside a tp_plan; without a mesh
#   (a YAML cannot pass accelerate's) transformers lays its TP over every rank (4.57.1
#   integrations/tensor_parallel.py initialize_tensor_parallelism: init_device_mesh((tp_size,)), tp_size the
#   world's), leaving no data parallelism; accelerate then wraps the model in nothing, no DDP (prepare_model,
#   tp_enabled); and the weight sync to vLLM reads a non-FSDP model's param.data, a DTensor shard under TP,
#   not its full_tensor() (generation/vllm_generation.py _iter_named_params).
# - NeMo RL's DTensor policy (policy.dtensor_cfg): torch FSDP2 fully_shard over the dp x cp ranks with
#   DTensor TP (tensor_parallel_size, sequence_parallel) and context parallelism (context_parallel_size);
#   no pipeline stages (its pipelines are megatron_cfg's).
# - AReaL's FSDP engine: TP through its plan (t of actor.backend fsdp:dXtY), Ulysses as c, no pipeline.
# Three shard with FSDP2 only, and so run ZeRO 3 only (bounded: a layout at another stage is refused):
# - NeMo RL's dtensor_cfg has no sharding knob: the DTensor workers fully_shard every decoder layer with
#   fully_shard's default reshard_after_forward (True: ZeRO-3), the root unit kept whole (nemo-automodel
#   0.7.0 components/distributed/parallelizer.py, whose FSDP2Config.reshard_after_forward defaults to None:
#   resharded unless pipelined; NeMo RL v0.5's dtensor_cfg keys, examples/configs/grpo_math_1B.yaml:
#   enabled, cpu_offload, sequence_parallel, activation_checkpointing, tensor_parallel_size,
#   context_parallel_size, custom_parallel_plan, pass no such override; NeMo RL's own source is not on
#   PyPI, nemo-rl there is an empty 0.0.0). activation_checkpointing is a bool: True checkpoints whole
#   decoder layers (or their attention and MLP each: parallelizer.py _apply), full recompute, or nothing.
# - AReaL 1.0.4 engine/fsdp_utils/parallel.py parallelize_model: fully_shard(..., reshard_after_forward=True)
#   on each decoder layer (apply_fsdp2) over the dp x sp mesh, no config key changes it; ParallelHelper
#   asserts pp_size == 1; gradient_checkpointing is transformers' gradient_checkpointing_enable (whole
#   layers); its TP plan shards the norms' sequence (SequenceParallel) whenever t > 1.
# - SkyRL 0.3.0 has FSDP2 only (trainer.strategy fsdp2 renamed fsdp, train/utils/utils.py validate_cfg;
#   FSDPStrategy asserts "fsdp"): fsdp_strategy.py fully_shard with fsdp_config.reshard_after_forward
#   (True, False: the layer kept gathered from its forward to its backward, memory.zero3_reshard_after_forward,
#   not ZeRO-2's unsharded parameters; or an int), sharded over fsdp_size ranks (HSDP: zero_shard_size).
VERL_FSDP_FIX = "verl's Megatron backend: actor_rollout_ref.actor.strategy=megatron (workload.train_software: megatron-core)"
SKYRL_FSDP_FIX = "SkyRL's Megatron backend: trainer.strategy=megatron (workload.train_software: megatron-core)"
NEMO_RL_DTENSOR_FIX = ("NeMo RL's Megatron backend: policy.megatron_cfg.enabled=true with policy.dtensor_cfg.enabled=false "
                       "(workload.train_software: megatron-core)")
AREAL_FSDP_FIX = "AReaL's Megatron backend: actor.backend=megatron:d..t..p.. (workload.train_software: megatron-core)"
FSDP2_ZERO = (3,)
TRL_FIX = "another framework: TRL's GRPOTrainer runs data parallelism only (DDP, DeepSpeed ZeRO, FSDP)"
# verl's FSDP shards as ZeRO-3 (FULL_SHARD / HYBRID_SHARD) or, with fsdp_config.reshard_after_forward false,
# ZeRO-2 (SHARD_GRAD_OP / _HYBRID_SHARD_ZERO2): verl 0.9.1 workers/engine/fsdp/utils.py get_sharding_strategy;
# never unsharded (ZeRO 0) nor optimizer-only (ZeRO 1).
VERL_FSDP_ZERO = (3, 2)


def _trainer_stack(base: TrainSoftware, name: str, source: str, **dimensions: Any) -> TrainSoftware:
    """A trainer's stack: ``base``'s constants (the model code's, Liger's where asked) under the
    parallel dimensions and ZeRO stages the trainer runs, its sources before ``base``'s."""
    return base.replace(name=name, source=f"{source}; {base.source}", **dimensions)


_ZERO_BOUNDED = (*HF_BOUNDED, "zero")   # the recompute modes and the ZeRO stages both the trainer's only
_VERL_FSDP = {"tensor_parallel": False, "zero": VERL_FSDP_ZERO, "lacking_fix": VERL_FSDP_FIX, "bounded": _ZERO_BOUNDED}
_VERL_SOURCE = "verl 0.9.1 workers/engine/fsdp (device meshes, get_sharding_strategy)"
_TRL = {"tensor_parallel": False, "context_parallel": False, "lacking_fix": TRL_FIX}
_TRL_SOURCE = "trl 1.16.0 trainer/grpo_config.py; accelerate 1.16.0 accelerator.py"
VERL_FSDP = _trainer_stack(HF_TRANSFORMERS, "verl-fsdp", _VERL_SOURCE, **_VERL_FSDP)
VERL_FSDP_LIGER = _trainer_stack(HF_TRANSFORMERS_LIGER, "verl-fsdp-liger", _VERL_SOURCE, **_VERL_FSDP)
SKYRL_FSDP = _trainer_stack(HF_TRANSFORMERS, "skyrl-fsdp", "skyrl 0.3.0 backends/skyrl_train/workers/worker.py "
                            "(device mesh), distributed/fsdp_strategy.py (fully_shard)", tensor_parallel=False,
                            zero=FSDP2_ZERO, bounded=_ZERO_BOUNDED, lacking_fix=SKYRL_FSDP_FIX)
NEMO_RL_DTENSOR = _trainer_stack(HF_TRANSFORMERS, "nemo-rl-dtensor", "NeMo RL v0.5 policy.dtensor_cfg "
                                 "(examples/configs/grpo_math_1B.yaml); nemo-automodel 0.7.0 "
                                 "components/distributed/parallelizer.py (fully_shard, TP plan)",
                                 zero=FSDP2_ZERO, bounded=_ZERO_BOUNDED, lacking_fix=NEMO_RL_DTENSOR_FIX)
AREAL_FSDP = _trainer_stack(HF_TRANSFORMERS, "areal-fsdp", "areal 1.0.4 engine/fsdp_engine.py, "
                            "engine/fsdp_utils/parallel.py (mesh, TP plan, fully_shard)", zero=FSDP2_ZERO,
                            sequence_parallel=None, bounded=_ZERO_BOUNDED, lacking_fix=AREAL_FSDP_FIX)
# AReaL 1.0.4's archon engine (experimental/engine/archon_engine.py) trains its own torchtitan-style model
# code (experimental/models/archon/qwen2|qwen3/model/model.py), op for op transformers' (RMSNorm cast up to
# fp32, pow, mean, rsqrt, cast down, weight; rotate_half RoPE; F.silu(w1(x)) * w3(x); eager unless
# actor.archon.enable_compile): the hf-transformers constants. Its parallelism is torchtitan's: fully_shard
# over dp x cp (FSDP2: ZeRO 3 only), a TP plan with SequenceParallel norms (infra/parallelize.py apply_tp),
# Ulysses cp, pipeline stages (models/archon/pipeline_parallel.py, actor.backend archon:dXpY).
# Its experts fold as torchtitan's: ArchonParallelDims takes expert_tensor_parallel_size, 1 (alloc_mode.py's
# default: EP borrows the TP ranks) or tp (qwen3 infra/parallelize.py apply_moe_ep_tp; frameworks/areal.py
# imports both). The other stacks on transformers' model code split the experts by the model's TP plan as
# its other linear layers (etp = tp).
ARCHON_EXPERT_TENSOR_PARALLEL = True
# Its pipelines are torch.distributed.pipelining schedules over fully_shard-ed stages (archon_runner.py
# schedule.step): MemoryParams.zero3_sync_last_micro_batch_only, read at pp > 1 only.
# Each layer is kept gathered from its forward through its backward under pipelines, resharded without
# them (reshard_after_forward_policy "default": MemoryParams.zero3_reshard_after_forward "unless_pipelined";
# frameworks/areal.py maps the policy's other values over it).
ARCHON_PIPELINE_FSDP = {"zero3_sync_last_micro_batch_only": True, "zero3_reshard_after_forward": RESHARD_UNLESS_PIPELINED}
# Archon refuses pipelines for a tied model: areal 1.0.4 experimental/engine/archon_utils.py
# prepare_training_config ("PP weight tying constraint"), run by every archon engine's initialize.
ARCHON_TIED_PIPELINE_REFUSAL = ("AReaL's archon engine raises \"Pipeline Parallelism (PP=p) is not supported with "
                                "weight tying (tie_word_embeddings=True)\" (areal 1.0.4 experimental/engine/"
                                "archon_utils.py prepare_training_config)")
AREAL_ARCHON = _trainer_stack(HF_TRANSFORMERS, "areal-archon", "areal 1.0.4 experimental/engine/archon_engine.py, "
                              "experimental/models/archon (model code, infra/parallelize.py, pipeline_parallel.py)",
                              params=HF_TRANSFORMERS.params.model_copy(update={"memory": HF_TRANSFORMERS.params.memory
                                                                               .model_copy(update=ARCHON_PIPELINE_FSDP)}),
                              zero=FSDP2_ZERO, sequence_parallel=None, pipeline_parallel=True, bounded=_ZERO_BOUNDED,
                              expert_tensor_parallel=ARCHON_EXPERT_TENSOR_PARALLEL, lacking_fix=AREAL_FSDP_FIX,
                              tied_pipeline_refusal=ARCHON_TIED_PIPELINE_REFUSAL)
TRL_ACCELERATE = _trainer_stack(HF_TRANSFORMERS, "trl", _TRL_SOURCE, **_TRL)
TRL_ACCELERATE_LIGER = _trainer_stack(HF_TRANSFORMERS_LIGER, "trl-liger", _TRL_SOURCE, **_TRL)

# The entropy over the vocabulary, (forward, backward) bytes per bf16 logit, by kernel (workload.entropy
# .kernel): each kernel's distinct tensors read and written once (a row's re-reads inside one kernel
# stay in L2, as the loss count above assumes); the per-token results and TP all-reduces of one float a
# token are left out. The backward, where the entropy is in the update's loss, ends with its gradient
# added to the log-probs' (read 2 + 2, write 2).
# - eager: verl's entropy_from_logits (verl 0.6.0 / 0.9.1 utils/torch_functional.py) op by op: softmax
#   (read 2, write 2), logsumexp as torch runs it (amax read 2; the subtraction read 2, write 2; exp_
#   read 2, write 2; sum read 2: 12), probabilities x logits (read 4, write 2), sum (read 2): 24.
#   Backward through autograd: logsumexp's (subtract, exp, multiply: 4 each), the product's two
#   (4 each), softmax's (read 4, write 2), two additions of the three gradients into the logits' (6
#   each), the addition to the log-probs' (6): 44.
# - compiled: the same function under torch.compile (verl actor.use_torch_compile, its default).
#   Measured, not counted: the count of one kernel reading the logits (2) and a backward reading them
#   and writing their gradient (4, and the addition 6) was 5.5x short forward and 2.7x forward +
#   backward on a lent H100 (benchmarks/device_logits.py; benchmarks/measured/h100-2026-12-06,
#   logits.json: 4096 tokens x Qwen2.5's 151,936 logits, 2.92 ms forward, 4.32 ms both): Inductor
#   splits the reduction over so long a row and drops its online softmax, so the rows are read in
#   several passes. The times as bytes at the H100's streaming rate (3.35 TB/s x its 0.70): 11.0
#   forward, 16.3 - 11.0 backward and the addition (6): 11.3. The eager counts here measured
#   0.94-1.15x there, and are kept.
# - vocab-parallel: verl's megatron workers (0.6.0 workers/actor/megatron_actor.py logits_processor,
#   utils/megatron/tensor_parallel.py _VocabParallelEntropy): the logits cloned (read 2, write 2), max
#   (2), subtraction (4), exp_ (4), sum (2), div_ (4), the compiled product-sum (read 4): 24. Backward:
#   sub_ (4), mul_ by the logits (6), mul_ by the gradient (4), add_ (4), mul_(-1) (4), the addition
#   at the clone (6): 28.
# - eager-log-softmax: SkyRL's chunked_entropy_from_logits (skyrl-train 0.3.1 utils/torch_utils.py) op
#   by op: log_softmax (read 2, write 2), exp (4), the product (read 4, write 2), sum (read 2): 16.
#   Backward: the product's two (4 each), exp's (read 4, write 2), the two log-prob gradients added
#   (6), log_softmax's (read 4, write 2), the addition to the log-probs' (6): 32.
# - eager-chunked-fp32: verl's entropy_from_logits_with_chunking op by op: each chunk of 2048 rows cast
#   up to fp32 (read 2, write 4) and the eager sequence on it (48): 54; backward the eager-fp32 one
#   (88) and the cast's (read 4, write 2): 94.
# - verl-fused-torch: inside verl's fused log-prob kernel (VERL_FUSED_TORCH_BYTES, which counts its
#   forward): its backward's entropy gradient alone, 88.
# - eager-fp32: the eager sequence on logits already cast up to fp32 (OpenRLHF's compute_entropy after
#   Actor.forward's cast): each element 4 bytes, twice the eager counts.
ENTROPY_KERNEL_BYTES: dict[str, tuple[float, float]] = {"eager": (24.0, 44.0), "compiled": (11.0, 11.3),
                                                        "vocab-parallel": (24.0, 28.0), "eager-fp32": (48.0, 88.0),
                                                        "eager-log-softmax": (16.0, 32.0),
                                                        "eager-chunked-fp32": (54.0, 94.0),
                                                        "verl-fused-torch": (0.0, 88.0)}

# What each entropy kernel holds beside the logits at its peak, bytes per logit (the passes that compute
# it: MemoryParams.entropy_logits_bytes_per_elem):
# - eager: the softmax's output (2) and logsumexp's shifted copy, exponentiated in place (2: aten
#   ReduceOps.cpp logsumexp_out_impl, (self - maxes).exp_()); the product pd x logits comes after it
#   is freed: 4 (verl 0.6.0 utils/torch_functional.py entropy_from_logits).
# - compiled: Inductor's reductions keep row partials, no tensor of the logits' size: 0 (assumed).
# - vocab-parallel: the logits' clone, exponentiated and divided in place (2).
# - eager-fp32: the eager sequence on fp32 logits (8).
# - eager-log-softmax (SkyRL's chunked_entropy_from_logits), eager-chunked-fp32 and verl-fused-torch:
#   chunks of rows, none of the logits' size: 0.
# Counted in the forward-only pass that computes it (old log-prob) and in an update that computes it
# for its metrics alone (outside autograd: SkyRL's chunked_entropy_from_logits under no_grad without
# the entropy loss); an update whose loss takes it holds ENTROPY_KERNEL_UPDATE_MEMORY_BYTES.
ENTROPY_KERNEL_MEMORY_BYTES: dict[str, float] = {"eager": 4.0, "compiled": 0.0, "vocab-parallel": 2.0,
                                                 "eager-fp32": 8.0, "eager-log-softmax": 0.0,
                                                 "eager-chunked-fp32": 0.0, "verl-fused-torch": 0.0}
# What each kernel holds beside the logits at the update's peak where its loss takes the entropy's
# gradient (workload.entropy.in_loss: verl's update_policy calls _forward_micro_batch with
# calculate_entropy = entropy_coeff != 0, grad enabled, verl 0.6.1 workers/actor/dp_actor.py), bytes
# per logit: autograd keeps the tensors the backward reads until the backward runs, and the logits'
# backward is the first the backward runs, every layer's activations still held. An unchunked kernel
# keeps part of its forward peak (eager: softmax's output, 2, which the product reads too; the
# shifted copy or the product beside it, 2: 4; eager-fp32 8; vocab-parallel: _VocabParallelEntropy
# saves its clone, 2), its peak the same. Chunked kernels keep every chunk's: eager-chunked-fp32
# (verl's entropy_from_logits_with_chunking) each chunk's fp32 copy, which logsumexp and the product
# save, and fp32 softmax: 8; eager-log-softmax (SkyRL's chunked_entropy_from_logits with
# requires_grad, skyrl 0.3.0 utils/torch_utils.py) log_softmax's and exp's outputs: 4. compiled: the
# compiled graph saves its inputs and row results and recomputes the rest in its backward: 0
# (assumed, as its forward); verl-fused-torch: the fused kernel keeps no tensor of the logits' size: 0.
# Recomputed (entropy.recompute: torch.utils.checkpoint) the same tensors come back in the backward's
# recompute, every layer's activations still held: the same peak.
ENTROPY_KERNEL_UPDATE_MEMORY_BYTES: dict[str, float] = {"eager": 4.0, "compiled": 0.0, "vocab-parallel": 2.0,
                                                        "eager-fp32": 8.0, "eager-log-softmax": 4.0,
                                                        "eager-chunked-fp32": 8.0, "verl-fused-torch": 0.0}

# The log-probabilities of the sampled tokens taken from the logits, (forward, backward) bytes per bf16
# logit, where a framework's trainer does not run the stacks' Megatron vocab-parallel cross entropy
# (loss_traffic_bytes_per_logit 52, 38 of it forward): the importers give the sum as
# train_params.compute.loss_traffic_bytes_per_logit and the forward's share as loss_forward_share.
# flash-attn's Triton cross entropy (flash-attn 2.8.3 flash_attn/ops/triton/cross_entropy.py, as verl's
# FSDP workers call it: utils/torch_functional.py logprobs_from_logits; verl[fsdp] requires flash-attn):
# the forward kernel reads each row once (an online softmax: 2), the backward reads it and writes the
# gradient (4).
FLASH_ATTN_CROSS_ENTROPY_BYTES = (2.0, 4.0)
# A log-softmax under torch.compile, the temperature's division and the fp32 cast fused into it (AReaL's
# _gather_logprobs / _gather_logprobs_entropy, areal 1.0.4 utils/functional/vocab_parallel.py, on its
# FSDP engine without TP, in chunks of 1024 tokens), the entropy in the same compiled function.
# Measured, not counted: the count of one reduction kernel reading the logits (2) and a backward
# reading them and writing the gradient (4) was 7.7x short on a lent H100 (benchmarks/device_logits.py;
# benchmarks/measured/h100-2026-12-06, logits.json: 12.2 ms forward + backward for 4096 tokens x
# 151,936 logits): 46.0 bytes a logit at the H100's streaming rate (3.35 TB/s x its 0.70), split
# forward / backward as the count splits it (a third forward).
COMPILED_LOG_SOFTMAX_BYTES = (46.0 / 3, 46.0 * 2 / 3)
# TRL's fused LM head (trl 1.16.0 trainer/utils.py add_fused_lm_head, kernels/chunked_logprob.py; on
# CUDA, every GRPO / RLOO pass of the policy and the reference): cuBLAS writes the logits of
# [4096-token, vocabulary-chunk] tiles, a Triton kernel reads each tile once (2; the temperature, the
# entropy and the other outputs it asks for ride in the same kernel); the backward recomputes the
# tile and the kernel reads it and writes the gradient in place (4).
TRL_FUSED_LM_HEAD_BYTES = (2.0, 4.0)
# verl's fused log-prob kernel, torch backend (model.use_fused_kernels, fused_kernel_options.impl_backend
# torch; verl 0.6.0 utils/experimental/torch_functional.py FusedLinearForPPO): the head's GEMM per chunk
# of 512 tokens, then on the chunk's logits the division by the temperature (read 2, write 2), the cast
# to fp32 (read 2, write 4), softmax and log_softmax (8 each), logsumexp (amax 4, subtract 8, exp 8,
# sum 4), the probabilities x logits and its sum (12 + 4), the entropy always among them: 66. The
# backward projects the chunk again (logits_recompute) and redoes the division, the cast and the
# softmax (4 + 6 + 8), builds the log-probs' gradient (a zeroed one-hot 4, one-hot - probs 12, x the
# gradient 8, added to 0: 8), casts it back and divides it (6 + 4): 60. Where the loss takes the
# entropy, its gradient adds log_softmax, logsumexp, the product and its sum, two products, a sum
# and the addition (8 + 24 + 16 + 8 + 12 + 8 + 12): 88 (ENTROPY_KERNEL_BYTES "verl-fused-torch").
VERL_FUSED_TORCH_BYTES = (66.0, 60.0)
# The logits divided by the sampling temperature first (verl 0.6 dp_actor and its megatron workers:
# div_ in place, read 2, write 2) and the gradient divided back in the backward (read 2, write 2).
TEMPERATURE_SCALE_BYTES = (4.0, 4.0)
# The bf16 logits cast up to fp32 first (OpenRLHF's Actor.forward: output["logits"].to(torch.float32)):
# read 2, write 4; the backward casts the gradient back (read 4, write 2).
FP32_CAST_BYTES = (6.0, 6.0)


def logprob_traffic(kernel: tuple[float, float], temperature_scaled: bool,
                    fp32_logits: bool = False) -> dict[str, float]:
    """train_params.compute's loss keys for a log-prob ``kernel`` ((forward, backward) bytes per bf16
    logit), with the logits' temperature scaling where the trainer runs it; ``fp32_logits``: both on
    logits cast up to fp32 first (twice the bytes, and the cast's)."""
    scale = 2.0 if fp32_logits else 1.0
    forward, backward = kernel[0] * scale, kernel[1] * scale
    if temperature_scaled:
        forward, backward = forward + TEMPERATURE_SCALE_BYTES[0] * scale, backward + TEMPERATURE_SCALE_BYTES[1] * scale
    if fp32_logits:
        forward, backward = forward + FP32_CAST_BYTES[0], backward + FP32_CAST_BYTES[1]
    return {"loss_traffic_bytes_per_logit": forward + backward, "loss_forward_share": forward / (forward + backward)}


DEFAULT_TRAIN_SOFTWARE = MEGATRON_CORE.name
TRAIN_SOFTWARE: dict[str, TrainSoftware] = {s.name: s for s in (MEGATRON_CORE, MEGATRON_CORE_OVERLAP, MEGATRON_2022,
                                                                 MEGATRON_2021, HF_TRANSFORMERS, HF_TRANSFORMERS_LIGER,
                                                                 VERL_FSDP, VERL_FSDP_LIGER, SKYRL_FSDP,
                                                                 NEMO_RL_DTENSOR, AREAL_FSDP, AREAL_ARCHON,
                                                                 TRL_ACCELERATE, TRL_ACCELERATE_LIGER)}


def train_software(name: str, field: str = "workload.train_software", source: str | None = None) -> TrainSoftware:
    """The named stack; RlsimError naming the known ones otherwise."""
    try:
        return TRAIN_SOFTWARE[name]
    except KeyError:
        raise RlsimError(f"unknown training software {name!r}", source=source, field=field,
                         fix=f"use one of: {', '.join(TRAIN_SOFTWARE)}") from None


@dataclass(frozen=True)
class LayoutGate:
    """The part of the training layout a train_params.comm or .memory knob acts on: whether a layout has it
    (`applies`, on anything with tp / pp / cp / ep / zero / ulysses_sp / sp: llm's TrainLayout, a
    TrainLayoutKeys), the setting that gives it (`needs`, as the refusal names it), what the knob
    acts on there (`why`) and how to get it (`fix`)."""

    applies: Callable[[Any], bool]
    needs: str
    why: str
    fix: str


_FSDP_GATE = LayoutGate(lambda lay: lay.zero >= 3, "ZeRO-3 (train_layout.zero: 3)",
                        "the per-layer parameter all-gathers and gradient reduce-scatters of FSDP / ZeRO-3",
                        "set workload.train_layout.zero: 3")
# train_params.comm knobs that only one part of the training layout reads (llm/training.py
# _layer_cost): the layout's counterpart of GATED_KNOBS, whose gates are switches of the knob's own
# section. A knob given off its stack's value where the given layout lacks that part is refused
# (inapplicable_given_key); a layout the planner picks (train_layout: auto) may have it.
LAYOUT_GATED_COMM: dict[str, LayoutGate] = {
    "fsdp_gather_overlap_fraction": _FSDP_GATE,
    "fsdp_reduce_overlap_fraction": _FSDP_GATE,
    "cp_overlap_fraction": LayoutGate(lambda lay: lay.cp > 1 and not lay.ulysses_sp,
                                      "ring-attention context parallelism (train_layout.cp > 1, ulysses_sp false)",
                                      "its KV all-gathers and reduce-scatters",
                                      "set workload.train_layout.cp above 1 without ulysses_sp"),
    "ulysses_overlap_fraction": LayoutGate(lambda lay: lay.cp > 1 and lay.ulysses_sp,
                                           "Ulysses sequence parallelism (train_layout.cp > 1, ulysses_sp true)",
                                           "its all-to-alls around attention",
                                           "set workload.train_layout.cp above 1 and ulysses_sp: true"),
    # TP collectives. TE userbuffers replace the flat overlap share and the backward re-gather on a
    # dense model's layers only (MoE, MLA and hybrid layers keep them), which the gate cannot see:
    # those two stay admitted under userbuffers.
    "tp_overlap_fraction": LayoutGate(lambda lay: lay.tp > 1 or lay.expert_tp > 1,
                                      "tensor parallelism (train_layout.tp > 1, or etp > 1 on an MoE model)",
                                      "the share of its per-layer all-reduces (or all-gathers and "
                                      "reduce-scatters, the routed experts' over expert TP) hidden",
                                      "set workload.train_layout.tp above 1"),
    "tp_userbuffers": LayoutGate(lambda lay: lay.sp, "sequence parallelism (train_layout.tp > 1, "
                                 "sequence_parallel not false)", "the TP all-gathers and reduce-scatters "
                                 "it overlaps with their GEMMs", "set workload.train_layout.tp above 1"),
    "sp_backward_allgather": LayoutGate(lambda lay: lay.sp, "sequence parallelism (train_layout.tp > 1, "
                                        "sequence_parallel not false)", "the re-gather of the QKV / FC1 inputs "
                                        "for the weight gradients", "set workload.train_layout.tp above 1"),
    "ep_overlap_fraction": LayoutGate(lambda lay: lay.ep > 1, "expert parallelism (train_layout.ep > 1)",
                                      "the share of its all-to-alls hidden", "set workload.train_layout.ep above 1"),
    # Megatron-Core's dispatchers move tokens when tp_size (expert TP) or ep_size is above 1
    # (0.13.0 MoEAllGatherTokenDispatcher.token_dispatch, MoEAlltoAllTokenDispatcher)
    "moe_token_dispatcher": LayoutGate(lambda lay: lay.ep > 1 or lay.expert_tp > 1,
                                       "expert parallelism or expert tensor parallelism (train_layout.ep > 1, or "
                                       "etp > 1, or tp > 1 with etp unset)", "how the routed tokens reach their "
                                       "experts' ranks and come back", "set workload.train_layout.ep above 1"),
    # Megatron's all-reduce of the sequence-parallel parameters' gradients (llm/training.py _sp_grad_sync_s)
    "sp_grad_all_reduce": LayoutGate(lambda lay: lay.sp, "sequence parallelism (train_layout.tp > 1, "
                                     "sequence_parallel not false)", "the TP all-reduce of the norms' (and "
                                     "router's, row-parallel biases') gradients after the DP sync",
                                     "set workload.train_layout.tp above 1"),
    # pipeline sends (llm/training.py _p2p_times, pipeline.py): only between stages
    **dict.fromkeys(("pp_blocking_send", "pp_variable_seq_lengths"), LayoutGate(
        lambda lay: lay.pp > 1, "pipeline parallelism (train_layout.pp > 1)", "the sends between stages",
        "set workload.train_layout.pp above 1")),
    # DeepSpeed's ZeRO-1 / 2 gradient reduction (llm/training.py _dp_and_optimizer)
    "zero_grad_reduce": LayoutGate(lambda lay: lay.zero in (1, 2), "ZeRO-1 or 2 (train_layout.zero: 1 or 2)",
                                   "the collective that reduces the gradients to their owners' partitions",
                                   "set workload.train_layout.zero: 1 or 2"),
    "zero2_reduce_every_micro_batch": LayoutGate(lambda lay: lay.zero == 2, "ZeRO-2 (train_layout.zero: 2)",
                                                 "the partitioned gradients' reduction in each backward",
                                                 "set workload.train_layout.zero: 2"),
    **dict.fromkeys(("zero3_outer_sync_every_micro_batch", "zero3_backward_waits_last_bucket"), LayoutGate(
        lambda lay: lay.zero >= 3, "ZeRO-3 (train_layout.zero: 3)", "DeepSpeed ZeRO-3's per-micro-batch "
        "collectives", "set workload.train_layout.zero: 3")),
    "pp_scatter_gather": LayoutGate(lambda lay: lay.pp > 1 and lay.tp > 1 and not lay.sp, "pipeline and tensor "
                                    "parallelism without sequence parallelism (train_layout.pp > 1, tp > 1, "
                                    "sequence_parallel: false)", "the split of each replicated send over the TP "
                                    "ranks (with sequence parallelism each rank sends its own slice)",
                                    "set workload.train_layout.pp and tp above 1 and sequence_parallel: false"),
}
# train_params.compute knobs that only one part of the training layout reads: the same rule as
# LAYOUT_GATED_COMM. The busiest EP rank's load (llm/expert_load.py) exists with ep > 1 alone.
LAYOUT_GATED_COMPUTE: dict[str, LayoutGate] = {
    "moe_load_imbalance": LayoutGate(lambda lay: lay.ep > 1, "expert parallelism (train_layout.ep > 1)",
                                     "the busiest EP rank's routed tokens over the mean, which pace the routed "
                                     "experts and the all-to-alls", "set workload.train_layout.ep above 1"),
    **dict.fromkeys(("moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity"), LayoutGate(
        lambda lay: lay.ep > 1, "expert parallelism (train_layout.ep > 1)", "the cap (or pad) of the busiest EP "
        "rank's routed tokens at the experts' capacity", "set workload.train_layout.ep above 1")),
}
# train_params.memory knobs that only ZeRO-3 reads (llm/memory.py, the gathered working set), or only
# ZeRO-1 / 2 (its backward buffers): the same rule as LAYOUT_GATED_COMM.
LAYOUT_GATED_MEMORY: dict[str, LayoutGate] = dict.fromkeys(("zero3_prefetch_layers", "zero3_outer_gathered",
                                                            "zero3_reshard_after_forward", "zero3_max_live_params"),
                                                           LayoutGate(
    lambda lay: lay.zero >= 3, "ZeRO-3 (train_layout.zero: 3)",
    "the whole parameters and gradients FSDP / ZeRO-3 hold beside their shards", "set workload.train_layout.zero: 3"))
# DeepSpeed ZeRO-1 / 2 / 3's backward buffers (llm/memory.py zero_backward_buffers_bytes)
LAYOUT_GATED_MEMORY.update(dict.fromkeys(("zero_reduce_bucket_params", "zero_reduce_buckets",
                                          "zero_reduce_buckets_kept"), LayoutGate(
    lambda lay: lay.zero >= 1, "ZeRO-1, 2 or 3 (train_layout.zero: 1-3)",
    "DeepSpeed's gradient reduction buckets", "set workload.train_layout.zero: 1, 2 or 3")))
# torch's pipelining under FSDP2 (llm/training.py _layer_cost, llm/memory.py zero3_working_set_bytes)
LAYOUT_GATED_MEMORY["zero3_sync_last_micro_batch_only"] = LayoutGate(
    lambda lay: lay.zero >= 3 and lay.pp > 1, "ZeRO-3 under pipeline parallelism (train_layout.zero: 3, pp > 1)",
    "the once-a-step gradient reduce-scatter and gather of FSDP2 stages under torch's pipelining",
    "set workload.train_layout.zero: 3 and pp above 1")
LAYOUT_GATED_MEMORY["zero_allreduce_copies"] = LayoutGate(
    lambda lay: lay.zero in (1, 2), "ZeRO-1 or 2 (train_layout.zero: 1 or 2)",
    "the flattened copy ZeRO-1 / 2's all-reduce makes of a bucket (ZeRO-3's reduce-scatter copy is "
    "zero_reduce_buckets')", "set workload.train_layout.zero: 1 or 2")
LAYOUT_GATED_MEMORY["grad_partition_on_host"] = LayoutGate(
    lambda lay: lay.zero >= 2, "ZeRO-2 or 3 (train_layout.zero: 2 or 3)",
    "where ZeRO-Offload's gradient partition lives (ZeRO-1 holds the whole gradients on the device)",
    "set workload.train_layout.zero: 2 or 3")
LAYOUT_GATED_MEMORY["zero_offload_device_grad_buffers"] = LayoutGate(
    lambda lay: lay.zero in (1, 2), "ZeRO-1 or 2 (train_layout.zero: 1 or 2)",
    "ZeRO-Offload's device buffer of the largest parameter's gradient (stage_1_and_2.py; ZeRO-3 has none)",
    "set workload.train_layout.zero: 1 or 2")
LAYOUT_GATED_MEMORY["zero_step_grad_copy_bytes_per_param"] = LayoutGate(
    lambda lay: lay.zero >= 1, "ZeRO-1, 2 or 3 (train_layout.zero: 1-3)",
    "the copies of the gradient partition DeepSpeed's ZeRO optimizer step makes",
    "set workload.train_layout.zero: 1, 2 or 3")
LAYOUT_GATED_MEMORY["zero_step_sub_group_params"] = LayoutGate(
    lambda lay: lay.zero >= 3, "ZeRO-3 (train_layout.zero: 3)",
    "the optimizer sub-group DeepSpeed's ZeRO-3 step copies the gradient partition by",
    "set workload.train_layout.zero: 3")
LAYOUT_GATED_MEMORY["zero2_accumulated_grad_partitions"] = LayoutGate(
    lambda lay: lay.zero == 2, "ZeRO-2 (train_layout.zero: 2)",
    "the gradient partitions ZeRO-2 accumulates over an optimizer step's micro-batches",
    "set workload.train_layout.zero: 2")

InapplicableKey = tuple[str, str, str]   # (dotted field, what is wrong, fix)


@dataclass(frozen=True)
class TrainLayoutKeys:
    """The train_layout keys the applicability checks read, with llm's TrainLayout defaults (the config
    layer does not build the layout itself: the cost layers do, and report its errors)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 1
    micro_batch: int = 1
    ulysses_sp: bool = False
    sequence_parallel: bool | None = None
    max_tokens_per_micro_batch: int | None = None
    logprob_max_tokens_per_micro_batch: int | None = None
    etp: int | None = None

    @classmethod
    def of(cls, layout: Mapping[str, Any]) -> "TrainLayoutKeys | None":
        """The keys of a given layout; None when one is not of its type (the layout's own error)."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = field.name
            value = layout.get(name, field.default)
            if (name.endswith("max_tokens_per_micro_batch") or name == "etp") and \
                    (value is None or str(value).lower() in ("auto", "none")):
                value = None
            kind = bool if name in ("ulysses_sp", "sequence_parallel") else int
            if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
                return None
            values[name] = value
        return cls(**values)

    @property
    def sp(self) -> bool:
        """Sequence parallelism as TrainLayout resolves it: with TP unless turned off."""
        return self.tp > 1 and self.sequence_parallel is not False

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel size as TrainLayout resolves it: etp, or tp when unset."""
        return self.tp if self.etp is None else self.etp


def inapplicable_given_key(layout: Mapping[str, Any] | str, train_params: "TrainParams", stack_params: "TrainParams",
                           forward_micro_batch: int | None, replans: bool) -> InapplicableKey | None:
    """The first key of a scenario's training side that the user gave and its layout makes
    inapplicable (it cannot change any prediction), or None. `layout`: workload.train_layout (a
    stack's recompute / zero / sequence_parallel under the user's keys: the stacks never set
    sequence_parallel true, ulysses_sp, micro_batch or the token budgets); `train_params` /
    `stack_params`: the run's TrainParams and its stack's (a comm or memory knob off the stack's
    value is the user's);
    `forward_micro_batch`: schedule.forward_micro_batch; `replans`: schedule.failures re-plan the
    layout (the planner's search reads micro_batch). etp on a dense model needs the model:
    llm/train_layout.py TrainLayout.check_model refuses it."""
    if not isinstance(layout, Mapping):
        return None   # auto: the planner picks the layout, under which these may apply
    lay = TrainLayoutKeys.of(layout)
    if lay is None:
        return None
    return (_inapplicable_layout_key(lay, replans)
            or (None if replans else _inapplicable_gated_knob(lay, train_params, stack_params))   # a re-plan may change the layout
            or _inapplicable_forward_micro_batch(lay, forward_micro_batch))


def _inapplicable_layout_key(lay: TrainLayoutKeys, replans: bool) -> InapplicableKey | None:
    field = "workload.train_layout"
    if lay.ulysses_sp and lay.cp == 1:
        return (f"{field}.ulysses_sp", "ulysses_sp: true applies with context parallelism (cp > 1): Ulysses "
                "splits the sequence over the cp ranks, and cp is 1",
                f"remove {field}.ulysses_sp, or set {field}.cp above 1")
    if lay.sequence_parallel and lay.tp == 1:
        return (f"{field}.sequence_parallel", "sequence_parallel: true applies with tensor parallelism (tp > 1): "
                "it splits the norms' and dropouts' activations over the TP group, and tp is 1",
                f"remove {field}.sequence_parallel, or set {field}.tp above 1")
    if lay.max_tokens_per_micro_batch is not None and lay.micro_batch != 1 and not replans:
        return (f"{field}.micro_batch", f"micro_batch={lay.micro_batch} is not read with a token budget: "
                f"max_tokens_per_micro_batch={lay.max_tokens_per_micro_batch} packs each replica's sequences "
                "into the fewest micro-batches of at most that many tokens",
                f"remove {field}.micro_batch, or {field}.max_tokens_per_micro_batch for micro-batches of "
                "micro_batch sequences")
    return None


def _inapplicable_gated_knob(lay: TrainLayoutKeys, train_params: Any, stack_params: Any) -> InapplicableKey | None:
    gated = [("comm", knob, gate) for knob, gate in LAYOUT_GATED_COMM.items()]
    gated += [("memory", knob, gate) for knob, gate in LAYOUT_GATED_MEMORY.items()]
    gated += [("compute", knob, gate) for knob, gate in LAYOUT_GATED_COMPUTE.items()]
    for section, knob, gate in gated:
        given, stack = getattr(train_params, section), getattr(stack_params, section)
        if getattr(given, knob) != getattr(stack, knob) and not gate.applies(lay):
            field = f"workload.train_params.{section}.{knob}"
            return (field, f"applies only with {gate.needs} ({gate.why}); this layout has tp {lay.tp}, pp {lay.pp}, "
                    f"cp {lay.cp}{', ulysses_sp' if lay.ulysses_sp else ''}, ep {lay.ep}, zero {lay.zero}"
                    f"{', sequence parallelism' if lay.sp else ''}", f"remove {field}, or {gate.fix}")
    return None


def _inapplicable_forward_micro_batch(lay: TrainLayoutKeys, forward_micro_batch: int | None) -> InapplicableKey | None:
    budget_key = ("logprob_max_tokens_per_micro_batch" if lay.logprob_max_tokens_per_micro_batch is not None
                  else "max_tokens_per_micro_batch" if lay.max_tokens_per_micro_batch is not None else None)
    if forward_micro_batch is None or budget_key is None:
        return None
    return ("schedule.forward_micro_batch", f"forward_micro_batch={forward_micro_batch} is not read with a token "
            f"budget: workload.train_layout.{budget_key}={getattr(lay, budget_key)} packs the forward-only passes "
            "(log-probs, reference) into micro-batches of at most that many tokens",
            "remove schedule.forward_micro_batch, or the token budgets (workload.train_layout."
            "logprob_max_tokens_per_micro_batch and max_tokens_per_micro_batch) for forward micro-batches of "
            "forward_micro_batch rows")


def flash_ratio_read_past(compute: "ComputeParams", stack_compute: "ComputeParams",
                          has_mamba: bool) -> InapplicableKey | None:
    """compute.flash_efficiency_ratio given (off its stack's value) where nothing reads it: it rates
    the flash attention kernels and the Mamba-2 scans (llm/train_compute.py), so with
    flash_attention false and no model with Mamba layers it changes no prediction."""
    if compute.flash_attention or has_mamba or compute.flash_efficiency_ratio == stack_compute.flash_efficiency_ratio:
        return None
    field = "workload.train_params.compute.flash_efficiency_ratio"
    return (field, "applies with flash attention (compute.flash_attention: true) or to a model with Mamba layers "
            "(the scans it rates); this run has flash attention off and no Mamba layer",
            f"remove {field}, or set workload.train_params.compute.flash_attention: true")


@dataclass(frozen=True)
class TrainedShapes:
    """What the trained and forwarded models' layers hold, as far as the training constants care
    (llm/train_compute.py layer_times): Mamba-2 mixers, dense FFNs of a gated (SwiGLU) or plain (GELU)
    activation, routed experts, TE userbuffer blocks (llm/training.py trained_shapes builds it)."""

    mamba: bool
    gated_ffn: bool
    plain_ffn: bool
    experts: bool
    userbuffer_blocks: bool = True   # a dense attention + MLP layer (llm/training.py has_userbuffer_blocks)


def train_constants_read_past(train: "TrainParams", stack: "TrainParams", shapes: TrainedShapes) -> list[InapplicableKey]:
    """Training constants given (off the stack's value) that the models' layers leave nothing to act
    on (llm/train_compute.py, llm/memory.py): the flash ratio and the materialized-attention backward
    factor (flash_ratio_read_past; the factor also prices the Mamba-2 scans' backward), a dense FFN's
    activation traffic of the kind no model has (SwiGLU reads gated_act_traffic_bytes_per_ffn, GELU
    act_traffic_bytes_per_ffn; routed experts are gated), the MoE token shuffle, token dispatcher and load imbalance
    without experts, the stored score bytes with flash attention (no score matrix is kept), TE userbuffers without a dense
    attention + MLP layer (MoE, MLA and hybrid layers keep tp_overlap_fraction)."""
    compute, flash = train.compute, train.compute.flash_attention
    found = flash_ratio_read_past(compute, stack.compute, shapes.mamba)
    out = [found] if found else []
    gates = {"compute.backward_flops_factor": (not flash or shapes.mamba, "materialized attention (flash_attention: "
                                               "false) or a model with Mamba layers", "flash_attention: false"),
             "compute.act_traffic_bytes_per_ffn": (shapes.plain_ffn, "a dense FFN with a plain (GELU) activation",
                                                   "a model with a GELU FFN"),
             "compute.gated_act_traffic_bytes_per_ffn": (shapes.gated_ffn or shapes.experts, "a gated (SwiGLU) FFN "
                                                         "or routed experts", "a model with a SwiGLU FFN or experts"),
             **dict.fromkeys(("compute.moe_permute_traffic_bytes_per_hidden", "compute.moe_permute_fusion",
                              "compute.moe_fused_permute_traffic_bytes_per_hidden",
                              "compute.moe_fused_permute_token_traffic_bytes_per_hidden", "compute.moe_router_dtype"),
                             (shapes.experts, "a model with routed experts", "an MoE model")),
             "comm.moe_token_dispatcher": (shapes.experts, "a model with routed experts", "an MoE model"),
             "compute.moe_load_imbalance": (shapes.experts, "a model with routed experts", "an MoE model"),
             **dict.fromkeys(("compute.moe_expert_capacity_factor", "compute.moe_pad_expert_input_to_capacity"),
                             (shapes.experts, "a model with routed experts", "an MoE model")),
             "memory.score_bytes_per_elem": (not flash, "materialized attention (flash_attention: false)",
                                             "flash_attention: false"),
             "comm.tp_userbuffers": (shapes.userbuffer_blocks, "a dense attention + MLP layer (TE userbuffers "
                                     "overlap its TP blocks; MoE, MLA and hybrid layers keep tp_overlap_fraction)",
                                     "a dense model")}
    for key, (applies, needs, fix) in gates.items():
        section, name = key.split(".")
        given, stacks = getattr(getattr(train, section), name), getattr(getattr(stack, section), name)
        if not applies and given != stacks:
            field = f"workload.train_params.{key}"
            out.append((field, f"{name} applies with {needs}, and this run has none",
                        f"remove {field}, or give {fix}"))
    return out


def engine_constants_read_past(inference: "InferenceParams", *, mla: bool, moe: bool, paged: bool,
                               engine_tp: int | None, engine_ep: int | None, chunked: bool = False,
                               engine_pp: int = 1, pool_knobs: Mapping[str, bool] | None = None,
                               mixed_windows: bool = False) -> list[InapplicableKey]:
    """Engine constants the rollout's models or layout leave nothing to act on (llm/inference.py
    StepCost): MLA absorption without an MLA model, the KV page size without sliding-window, Mamba or
    linear-attention layers (``paged``: a model has some), the chunked layers' paging without chunked
    attention (``chunked``) or with the hybrid KV cache manager off, the manager's switch on a model
    that does not mix full attention with sliding-window or chunked layers (``mixed_windows``:
    kv_pool.mixes_windows), the MoE launches without experts, the EP dispatch
    payload without expert parallelism, the activation bytes with neither TP nor EP collectives nor
    stage sends, the stage sends' tensors without pipeline stages, SGLang's pool constants where its
    pools leave them nothing (``pool_knobs``: llm/sglang_pool.py pool_knobs_applicable, any model's). (field, why, fix) of each given
    away from its default (no named engine sets them). `engine_tp` / `engine_ep` None: the layout is
    planned, so the layout-gated two may apply (a planned layout has one stage)."""
    planned = engine_tp is None or engine_ep is None
    ep = moe and not planned and engine_ep > 1
    vllm_pool = inference.kv_pool == "vllm"   # vLLM's pages: SGLang's pools have none (page size 1)
    gates = {"absorb_mla": (mla, "an MLA model (DeepSeek-style latent attention)", "a model with MLA"),
             "kv_block_size": (paged and vllm_pool, "a model with sliding-window, Mamba or linear-attention layers "
                               "(whose pages it sizes; full attention is counted a token at a time) under kv_pool: vllm",
                               "a model with such layers under kv_pool: vllm"),
             "hybrid_kv_chunked_attention": (chunked and vllm_pool and inference.hybrid_kv_cache_manager,
                                             "a model with chunked attention (Llama 4's attention_chunk_size) under "
                                             "kv_pool: vllm with hybrid_kv_cache_manager on", "a Llama 4 model"),
             "hybrid_kv_cache_manager": (mixed_windows and vllm_pool, "a model that mixes full-attention with "
                                         "sliding-window or chunked layers under kv_pool: vllm",
                                         "such a model (Gemma 2 / 3, gpt-oss, Llama 4) under kv_pool: vllm"),
             "launches_per_moe_layer": (moe, "a model with experts", "an MoE model"),
             "dispatch_bytes": (planned or ep, "expert parallelism in the engine (rollout_layout.ep > 1)",
                                "workload.rollout_layout.ep above 1 on an MoE model"),
             "activation_bytes": (planned or ep or engine_tp > 1 or engine_pp > 1, "TP or EP collectives or "
                                  "pipeline sends in the engine (rollout_layout.tp, ep or pp > 1)",
                                  "workload.rollout_layout.tp above 1"),
             "pipeline_send_tensors": (engine_pp > 1, "pipeline stages in the engine (rollout_layout.pp > 1)",
                                       "workload.rollout_layout.pp above 1"),
             **_sglang_pool_gates(pool_knobs or {})}
    return [(f"workload.inference.{key}", f"{key} applies with {needs}, and there is none here",
             f"remove workload.inference.{key}, or give {fix}") for key, (applies, needs, fix) in gates.items()
            if not applies and inference.set_off_default((key,))]


# What each SGLang pool constant needs (InferenceParams.kv_pool: sglang and the model's layers).
_SGLANG_POOL_NEEDS = {
    "swa_full_tokens_ratio": ("kv_pool: sglang and a sliding-window model SGLang keeps an SWA pool for (not Gemma 2 / "
                              "3 nor gpt-oss, whose hybrid SWA memory it turns off)", "such a model under kv_pool: sglang"),
    "mamba_slots": ("kv_pool: sglang and a Mamba / linear-attention model without a radix cache on its states",
                    "such a model under kv_pool: sglang"),
    "mamba_full_memory_ratio": ("kv_pool: sglang and a linear-attention model with a radix cache on its states "
                                "(linear_attention_radix_cache and enable_prefix_caching)", "such a model"),
    "mamba_slots_per_request": ("kv_pool: sglang and a linear-attention model with a radix cache on its states "
                                "(linear_attention_radix_cache and enable_prefix_caching)", "such a model"),
    "linear_attention_radix_cache": ("kv_pool: sglang (SGLang's pools)", "kv_pool: sglang"),
    "max_running_requests_given": ("kv_pool: sglang (SGLang's pools)", "kv_pool: sglang"),
}


def _sglang_pool_gates(applies: Mapping[str, bool]) -> dict[str, tuple[bool, str, str]]:
    return {key: (applies.get(key, False), needs, fix) for key, (needs, fix) in _SGLANG_POOL_NEEDS.items()}


def stack_params(software: TrainSoftware, overrides: Mapping[str, Any] | None, source: str | None = None,
                 field_name: str = "workload.train_params") -> TrainParams:
    """The stack's TrainParams with `overrides` (a nested mapping: compute / comm / memory / offload / check_memory)
    applied on top, validated (the stack's values of knobs the overrides' switches made inapplicable
    set back to their defaults: without_inapplicable_stack_values)."""
    base = software.params.model_dump()
    given = dict(overrides or {})
    for key, value in given.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return TrainParams.from_mapping(without_inapplicable_stack_values(base, given), source=source,
                                   field_name=field_name)
