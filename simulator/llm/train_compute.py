"""Per-layer compute time of a training micro-batch on one device: roofline with a GEMM efficiency
curve, memory-bound elementwise work, attention (flash or materialized scores). Vectorized over
micro-batches (numpy arrays of tokens and of sum of squared sequence lengths).

Formulas are written out in docs/cost-models-training.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from .layer_costs import LayerShape


class ComputeParams(BaseModel):
    """Compute constants; reachable from YAML as `train_params.compute.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str = "bf16"
    # Efficiency curve: achieved / plateau = F / (F + peak x gemm_ramp_s). A GEMM reaches half the
    # plateau (DeviceSpec.gemm_efficiency) when it holds gemm_ramp_s of peak work: small GEMMs
    # under-fill the SMs (tile and wave quantization, NVIDIA "Matrix Multiplication Background" user
    # guide). 4 us puts a 1024^3 GEMM on A100 at ~63% of the plateau, as that guide's curves show.
    gemm_ramp_s: float = 4e-6
    # FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward (arXiv 2307.08691, fig. 4)
    # against ~80% for large GEMMs: ~0.85 of the GEMM plateau.
    flash_attention: bool = True
    flash_efficiency_ratio: float = 0.85
    # Causal flash kernels skip the masked half of the score matrix (arXiv 2307.08691 sec. 3.1).
    flash_causal_fraction: float = 0.5
    # Flash backward recomputes the scores: 2.5x the forward FLOPs (arXiv 2307.08691 sec. 3.1:
    # 5 matmuls backward vs 2 forward).
    flash_backward_factor: float = 2.5
    # Materialized attention (no flash; Megatron-LM 2021 CoreAttention): bytes moved per score
    # element. Forward: baddbmm writes 2, fused scale-mask-softmax reads 2 + writes 2, dropout reads
    # 2 + writes 2 + mask 1, the A.V bmm reads 2 -> 13. Backward: the A.V grad bmm writes 2, dropout
    # backward reads 2 + mask 1 + writes 2, softmax backward reads 2 + 2 and writes 2, the Q.K grad
    # bmms read 2 -> 15.
    score_traffic_fwd_bytes: float = 13.0
    score_traffic_bwd_bytes: float = 15.0
    # Elementwise traffic per token per layer, forward (bytes per hidden unit, 2-byte activations):
    # 2 LayerNorms read 2 + write 2 each -> 8; 2 bias-dropout-residual-adds read 2 + 2, write 2 and
    # a 1-byte mask each -> 14; activation function per FFN unit: GELU read 2 + write 2 -> 4, SwiGLU
    # reads 2 x 2 and writes 2 -> 6.
    norm_traffic_bytes_per_hidden: float = 8.0
    residual_traffic_bytes_per_hidden: float = 14.0
    act_traffic_bytes_per_ffn: float = 4.0
    gated_act_traffic_bytes_per_ffn: float = 6.0
    # Backward of an elementwise op reads its saved input and the incoming gradient and writes the
    # outgoing one: ~2x the forward traffic.
    backward_traffic_factor: float = 2.0
    # Backward matmuls: data gradient + weight gradient, each the forward's size (2x forward FLOPs).
    backward_flops_factor: float = 2.0
    # Loss on the last stage: fp32 logits written, softmax read + write, gradient written: 4 x 4 B.
    loss_traffic_bytes_per_logit: float = 16.0
    activation_bytes: float = 2.0


@dataclass(frozen=True)
class DeviceRates:
    peak_flops: float
    gemm_efficiency: float
    hbm_Bps: float          # achievable: hbm_bw_Bps x hbm_efficiency


def gemm_time_s(flops: np.ndarray, nbytes: np.ndarray, rates: DeviceRates, params: ComputeParams,
                efficiency_scale: float = 1.0) -> np.ndarray:
    """Roofline of one GEMM with the efficiency curve: max(compute, memory)."""
    ramp = rates.peak_flops * params.gemm_ramp_s
    eff = rates.gemm_efficiency * efficiency_scale * flops / (flops + ramp)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(flops > 0, flops / (rates.peak_flops * np.maximum(eff, 1e-300)), 0.0)
    return np.maximum(compute, nbytes / rates.hbm_Bps)


@dataclass(frozen=True)
class LayerTimes:
    """Per micro-batch arrays (seconds on one device) for one layer."""

    fwd_s: np.ndarray          # forward compute
    bwd_s: np.ndarray          # backward compute
    attn_fwd_s: np.ndarray     # the attention-core part of fwd_s (what selective recompute repeats)


def layer_times(layer: LayerShape, hidden: int, ffn: int, gated: bool, tokens: np.ndarray, sq_sum: np.ndarray,
                *, tp: int, sp: bool, ep: int, rates: DeviceRates, params: ComputeParams) -> LayerTimes:
    """Compute time of one layer for micro-batches of `tokens` tokens on this device (after CP)
    whose sequences have sum of squared lengths `sq_sum` (attention work, after CP)."""
    a = params.activation_bytes
    fwd = np.zeros_like(tokens, dtype=float)
    bwd = np.zeros_like(fwd)
    k = layer.experts_per_token
    for g in layer.gemms:
        k_in = g.params / g.n_out
        if g.expert:
            # Every device holds E / ep experts; balanced routing gives each expert
            # tokens x ep x k / E tokens; the device's total is tokens x k expert-rows.
            n_local = layer.num_experts / ep
            rows = tokens * ep * k / layer.num_experts
            flops_one = 2.0 * rows * g.params / tp
            bytes_one = a * (g.params / tp + rows * k_in + rows * g.n_out / tp)
            t = n_local * gemm_time_s(flops_one, bytes_one, rates, params)
        else:
            flops = 2.0 * tokens * g.params / tp
            nbytes = a * (g.params / tp + tokens * k_in + tokens * g.n_out / tp)
            t = gemm_time_s(flops, nbytes, rates, params)
        fwd = fwd + t
        bwd = bwd + params.backward_flops_factor * t
    # Attention core: Q.K^T and A.V over each sequence's own keys.
    heads = layer.attn_heads / tp
    attn_flops = 2.0 * sq_sum * heads * (layer.qk_head_dim + layer.v_head_dim)
    if params.flash_attention:
        flops = attn_flops * params.flash_causal_fraction
        attn_f = gemm_time_s(flops, np.zeros_like(flops), rates, params, params.flash_efficiency_ratio)
        attn_b = params.flash_backward_factor * attn_f
    else:
        score_elems = sq_sum * heads
        attn_f = gemm_time_s(attn_flops, np.zeros_like(attn_flops), rates, params) \
            + score_elems * params.score_traffic_fwd_bytes / rates.hbm_Bps
        attn_b = params.backward_flops_factor * gemm_time_s(attn_flops, np.zeros_like(attn_flops), rates, params) \
            + score_elems * params.score_traffic_bwd_bytes / rates.hbm_Bps
    # Elementwise: norms and residual adds per hidden unit (split by TP only with SP), activation
    # function per FFN unit (always split by TP; MoE: top-k experts + shared).
    ffn_units = ffn
    act_bytes = params.gated_act_traffic_bytes_per_ffn if gated else params.act_traffic_bytes_per_ffn
    if layer.moe:
        up = sum(g.n_out * (k if g.expert else 1) for g in layer.gemms if g.name.endswith("_up"))
        ffn_units = up / 2  # MoE experts are gated: the up projection holds up + gate
        act_bytes = params.gated_act_traffic_bytes_per_ffn
    elem = tokens * ((params.norm_traffic_bytes_per_hidden + params.residual_traffic_bytes_per_hidden) * hidden
                     / (tp if sp else 1) + act_bytes * ffn_units / tp) / rates.hbm_Bps
    fwd = fwd + attn_f + elem
    bwd = bwd + attn_b + params.backward_traffic_factor * elem
    return LayerTimes(fwd, bwd, attn_f)


def logits_times(hidden: int, vocab: int, tokens: np.ndarray, *, tp: int, rates: DeviceRates,
                 params: ComputeParams) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) of the vocab-parallel output layer and the loss on the last stage."""
    flops = 2.0 * tokens * hidden * vocab / tp
    nbytes = params.activation_bytes * (hidden * vocab / tp + tokens * hidden + tokens * vocab / tp)
    gemm = gemm_time_s(flops, nbytes, rates, params)
    loss = tokens * vocab / tp * params.loss_traffic_bytes_per_logit / rates.hbm_Bps
    return gemm + loss / 2, params.backward_flops_factor * gemm + loss / 2
