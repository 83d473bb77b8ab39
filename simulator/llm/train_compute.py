"""Per-layer compute time of a training micro-batch on one device: a shape-aware GEMM roofline
(efficiency ramps with the GEMM's dimensions, plus a launch overhead), memory-bound elementwise work, attention (flash or materialized scores). Vectorized over
micro-batches (numpy arrays of tokens and of sum of squared sequence lengths).

Formulas are written out in docs/cost-models-training.md.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..params import ComputeParams
from .expert_load import routed_load_factor
from .layer_costs import LayerShape

__all__ = ["ComputeParams", "DeviceRates", "LayerTimes", "RouterRates", "attention_time_s", "expert_load",
           "fused_shuffle_bytes", "gemm_time_s", "gemm_times", "layer_times", "logits_times", "router_rates",
           "shape_efficiency"]


@dataclass(frozen=True)
class DeviceRates:
    peak_flops: float
    gemm_efficiency: float
    hbm_Bps: float          # achievable: hbm_bw_Bps x hbm_efficiency
    launch_s: float = 0.0   # fixed time per GEMM kernel (ComputeParams.gemm_launch_s or the device's)
    flash_scale: float = 1.0   # the device's flash kernels against the stack's ratios (DeviceSpec)
    # The output layer's GEMMs where ComputeParams.head_dtype differs: its peak and its operands' bytes
    head_peak_flops: float | None = None
    head_elem_bytes: float | None = None
    # An MoE router's GEMMs where ComputeParams.moe_router_dtype is set (router_rates)
    router: RouterRates | None = None


# Bytes of a router dtype's value (ComputeParams.moe_router_dtype)
ROUTER_DTYPE_BYTES = {"fp32": 4.0, "fp64": 8.0}


@dataclass(frozen=True)
class RouterRates:
    """The router GEMM's forward, data-gradient and weight-gradient passes under Megatron-Core's
    moe_router_dtype (ComputeParams.moe_router_dtype): each pass's peak, its operands' bytes and the
    bytes its casts move per element of the input (m x k) and the weight (k x n)."""

    peak_flops: tuple[float, float, float]
    elem_bytes: tuple[float, float, float]
    cast_bytes: tuple[float, float, float]


def router_rates(dtype: str, router_peak: float, activation_peak: float, activation_bytes: float) -> RouterRates:
    """Megatron-Core 0.13.0 moe_utils.py router_gating_linear: fp64 runs its three GEMMs by torch.mm in
    fp64 (casting the bf16 operands up and the results back); fp32 its forward by Transformer Engine's
    GEMM on the bf16 operands (an fp32 output: the activations' peak, no cast), its two gradients on
    fp32 operands (cast up and back). ``router_peak``: the device's peak at ``dtype``."""
    r = ROUTER_DTYPE_BYTES[dtype]
    cast = activation_bytes + r
    if dtype == "fp64":
        return RouterRates((router_peak,) * 3, (r,) * 3, (cast,) * 3)
    return RouterRates((activation_peak, router_peak, router_peak), (activation_bytes, r, r), (0.0, cast, cast))


def shape_efficiency(m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float,
                     ramp_dim: float, ramp_k: float) -> np.ndarray:
    """Achieved / plateau of an (m x k) . (k x n) GEMM: 1 / (1 + ramp_dim (1/m + 1/n) + ramp_k / k);
    0 for an empty dimension."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    with np.errstate(divide="ignore"):
        inv = ramp_dim * (1.0 / m + 1.0 / n) + ramp_k / k
    ok = np.isfinite(inv) & (m > 0) & (n > 0) & (k > 0)
    return np.where(ok, 1.0 / (1.0 + np.where(ok, inv, 0.0)), 0.0)


def gemm_time_s(m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float, rates: DeviceRates,
                params: ComputeParams, *, efficiency_scale: float = 1.0,
                elem_bytes: float | None = None) -> np.ndarray:
    """One GEMM (m x k) . (k x n): launch + max(F / (peak x plateau x shape efficiency),
    operand bytes / HBM); F = 2 m n k. Empty GEMMs (a zero dimension) take no time."""
    a = params.activation_bytes if elem_bytes is None else elem_bytes
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    flops = 2.0 * m * n * k
    eff = rates.gemm_efficiency * efficiency_scale * shape_efficiency(m, n, k, params.gemm_ramp_dim, params.gemm_ramp_k)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(flops > 0, flops / (rates.peak_flops * np.maximum(eff, 1e-300)), 0.0)
    memory = a * (m * k + k * n + m * n) / rates.hbm_Bps
    return np.where(flops > 0, rates.launch_s + np.maximum(compute, memory), 0.0)


def attention_time_s(flops: np.ndarray, seq_len: np.ndarray, rates: DeviceRates, params: ComputeParams,
                     efficiency_scale: float = 1.0) -> np.ndarray:
    """Attention-core matmuls of `flops` over sequences of (token-weighted) length `seq_len`: one
    kernel launch, compute at the plateau x the shape ramp over the sequence dimensions (per head,
    Q.K^T is (s x d) . (d x s) and A.V is (s x s) . (s x d): the mean of the two ramps; the head-dim
    part is in the measured flash efficiency)."""
    s = np.asarray(seq_len, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(s > 0, 1.0 / np.maximum(s, 1e-300), 0.0)
        ramp = 0.5 * (2.0 * params.gemm_ramp_dim * inv) + 0.5 * ((params.gemm_ramp_dim + params.gemm_ramp_k) * inv)
        shape = np.where(s > 0, 1.0 / (1.0 + ramp), 0.0)
        eff = rates.gemm_efficiency * efficiency_scale * shape
        compute = np.where(flops > 0, flops / (rates.peak_flops * np.maximum(eff, 1e-300)), 0.0)
    return np.where(flops > 0, rates.launch_s + compute, 0.0)


@dataclass(frozen=True)
class LayerTimes:
    """Per micro-batch arrays (seconds on one device) for one layer."""

    fwd_s: np.ndarray          # forward compute
    bwd_s: np.ndarray | None   # backward compute (None: asked for the forward only)
    attn_fwd_s: np.ndarray     # the attention-core part of fwd_s (what selective recompute repeats)


@dataclass(frozen=True)
class _GemmPlan:
    """The per-layer GEMM dimensions on one device, stacked for one vectorized roofline call."""

    expert: np.ndarray   # (G,) bool: rows are the routed expert-rows, else the tokens
    n_dim: np.ndarray    # (G,) local output width N
    k_dim: np.ndarray    # (G,) local input width K
    count: tuple[float, ...]  # GEMMs of this shape on the device (E / ep experts, else 1)
    up_units: float      # MoE: FFN units of the up projections (top-k experts + shared)
    routed_up_units: float   # MoE: the top-k routed experts' part of up_units
    counts: np.ndarray   # (G, 1) ``count`` as a column
    # (G, 1) the weight gradient's share: 0 for a frozen (LoRA base) weight, else 1; None: all train
    wgrad: np.ndarray | None = None
    router: int | None = None   # the index of the MoE router's GEMM (None: none)


@lru_cache(maxsize=1024)
def _gemm_plan(layer: LayerShape, tp: int, ep: int, etp: int | None = None) -> _GemmPlan:
    """A pure function of the layer's value (a frozen dataclass): cached by value, so equal shapes
    share a plan and nothing depends on object identity. Do not modify the returned arrays.
    Expert GEMMs are split by the expert TP size `etp` (None: tp)."""
    etp = tp if etp is None else etp
    dims = [g.local_dims(etp if g.expert else tp) for g in layer.gemms]
    k = layer.experts_per_token
    count = tuple(layer.num_experts / ep if g.expert else 1.0 for g in layer.gemms)
    return _GemmPlan(expert=np.array([g.expert for g in layer.gemms], dtype=bool),
                     n_dim=np.array([d[0] for d in dims], dtype=float),
                     k_dim=np.array([d[1] for d in dims], dtype=float),
                     count=count,
                     up_units=float(sum(g.n_out * (k if g.expert else 1) for g in layer.gemms
                                        if g.name.endswith("_up"))),
                     routed_up_units=float(sum(g.n_out * k for g in layer.gemms if g.expert and g.name.endswith("_up"))),
                     counts=np.array(count, dtype=float).reshape(-1, 1),
                     wgrad=None if all(g.trainable for g in layer.gemms) else
                     np.array([1.0 if g.trainable else 0.0 for g in layer.gemms]).reshape(-1, 1),
                     router=next((i for i, g in enumerate(layer.gemms) if g.name == "router"), None))


def _rooflines(plan: _GemmPlan, rows: np.ndarray, rates: DeviceRates, params: ComputeParams) -> np.ndarray:
    """(3 G, micro-batches): each GEMM's forward, then data-gradient, then weight-gradient time."""
    n_g, n_m = rows.shape
    n_col = np.broadcast_to(plan.n_dim[:, None], (n_g, n_m))
    k_col = np.broadcast_to(plan.k_dim[:, None], (n_g, n_m))
    t = gemm_time_s(np.concatenate([rows, rows, k_col]), np.concatenate([n_col, k_col, n_col]),
                    np.concatenate([k_col, n_col, rows]), rates, params)
    return _with_router_dtype(t, plan, rows, rates, params)


def _with_router_dtype(t: np.ndarray, plan: _GemmPlan, rows: np.ndarray, rates: DeviceRates,
                       params: ComputeParams) -> np.ndarray:
    """``t`` (the GEMMs' forward rows, then their data- and weight-gradient rows if it holds 3 G) with
    the router's passes priced at its dtype (DeviceRates.router; unchanged without one): each pass's
    roofline at its peak and operand bytes, plus its casts' bytes over HBM."""
    router, i = rates.router, plan.router
    if router is None or i is None:
        return t
    n_g = len(plan.count)
    m, n, k = rows[i], np.full_like(rows[i], plan.n_dim[i]), np.full_like(rows[i], plan.k_dim[i])
    cast_elems = m * k + k * n
    for p, (a, b, c) in enumerate(((m, n, k), (m, k, n), (k, n, m))[:len(t) // n_g]):
        at_peak = replace(rates, peak_flops=router.peak_flops[p])
        t[p * n_g + i] = (gemm_time_s(a, b, c, at_peak, params, elem_bytes=router.elem_bytes[p])
                          + router.cast_bytes[p] * cast_elems / rates.hbm_Bps)
    return t


def _expert_rows(plan: _GemmPlan, layer: LayerShape, tokens: np.ndarray, tp: int, ep: int, etp: int,
                 load: np.ndarray | None = None) -> np.ndarray:
    """(G, micro-batches) rows of each GEMM: the tokens, or the routed expert-rows of an expert GEMM
    (every device holds E / ep experts; balanced routing gives each tokens x ep x k / E tokens, the
    device's total tokens x k expert-rows, x etp / tp under MoE parallel folding), x ``load`` on the
    busiest EP rank (expert_load.routed_load_factor; None: the mean)."""
    rows = np.empty((len(plan.count), tokens.size))
    rows[:] = tokens
    if plan.expert.any():
        mean = tokens * ep * layer.experts_per_token / layer.num_experts * (etp / tp)
        rows[plan.expert] = mean if load is None else mean * load
    return rows


def expert_load(layer: LayerShape, tokens: np.ndarray, tp: int, ep: int, etp: int,
                params: ComputeParams) -> np.ndarray | None:
    """The busiest EP rank's routed rows over the mean per micro-batch of `tokens` (an MoE layer
    under ep > 1; else None): ComputeParams.moe_load_imbalance, or derived (llm/expert_load.py)."""
    if not layer.moe:
        return None
    return routed_load_factor(layer.num_experts, layer.experts_per_token, tokens, tp=tp, ep=ep, etp=etp,
                              imbalance=params.moe_load_imbalance, capacity_factor=params.moe_expert_capacity_factor,
                              pad_to_capacity=params.moe_pad_expert_input_to_capacity)


def gemm_times(layer: LayerShape, tokens: np.ndarray, *, tp: int, ep: int, rates: DeviceRates,
               params: ComputeParams, etp: int | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per GEMM of the layer, by name: its (forward, data-gradient, weight-gradient) time per
    micro-batch on one device, the rooflines ``layer_times`` sums (for collectives overlapped with
    one GEMM: trainer TE userbuffers)."""
    tokens = np.asarray(tokens, dtype=float)
    etp = tp if etp is None else etp
    plan = _gemm_plan(layer, tp, ep, etp)
    load = expert_load(layer, tokens, tp, ep, etp, params)
    t = _rooflines(plan, _expert_rows(plan, layer, tokens, tp, ep, etp, load), rates, params)
    n_g = len(plan.count)
    return {g.name: (plan.count[i] * t[i], plan.count[i] * t[n_g + i], plan.count[i] * t[2 * n_g + i] * g.trainable)
            for i, g in enumerate(layer.gemms)}


def _gemm_sums(plan: _GemmPlan, rows: np.ndarray, rates: DeviceRates, params: ComputeParams,
               backward: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(forward, backward or None) GEMM time of a layer per micro-batch: every GEMM's roofline in
    one call, three per weight: forward (rows, N, K), then the backward data gradient dX = dY . W^T
    (rows, K, N) and weight gradient dW = X^T . dY (K, N, rows): the reduction runs over the tokens.
    Summed GEMM by GEMM in the layer's order: ``add.accumulate`` along the GEMMs adds row after row
    (the same float additions as a loop of ``total + count x time``)."""
    n_g, n_m = rows.shape
    if not n_g:
        return np.zeros(n_m), np.zeros(n_m) if backward else None
    if not backward:   # N and K one value per GEMM: numpy broadcasts them (the same floats, less work)
        t = _with_router_dtype(gemm_time_s(rows, plan.n_dim[:, None], plan.k_dim[:, None], rates, params), plan,
                               rows, rates, params)
        return np.add.accumulate(plan.counts * t, axis=0)[-1], None
    t = _rooflines(plan, rows, rates, params)
    fwd = np.add.accumulate(plan.counts * t[:n_g], axis=0)[-1]
    wgrad = t[2 * n_g:] if plan.wgrad is None else t[2 * n_g:] * plan.wgrad   # a frozen weight takes none
    bwd = np.add.accumulate(plan.counts * (t[n_g:2 * n_g] + wgrad), axis=0)[-1]
    return fwd, bwd


def layer_times(layer: LayerShape, hidden: int, ffn: int, gated: bool, tokens: np.ndarray, sq_sum: np.ndarray,
                *, tp: int, sp: bool, ep: int, rates: DeviceRates, params: ComputeParams,
                etp: int | None = None, backward: bool = True) -> LayerTimes:
    """Compute time of one layer for micro-batches of `tokens` tokens on this device (after CP)
    whose sequences have sum of squared lengths `sq_sum` (attention work, after CP). `etp`: expert
    tensor-parallel size (None: tp); expert rows scale by etp / tp so the expert FLOPs of a TP
    group's tokens stay spread over its tp ranks (MoE parallel folding). ``backward`` False: the
    forward only (``bwd_s`` None; the forward arrays are the same floats)."""
    tokens = np.asarray(tokens, dtype=float)
    etp = tp if etp is None else etp
    plan = _gemm_plan(layer, tp, ep, etp)
    k = layer.experts_per_token
    n_m = tokens.size
    load = expert_load(layer, tokens, tp, ep, etp, params)
    fwd, bwd = _gemm_sums(plan, _expert_rows(plan, layer, tokens, tp, ep, etp, load), rates, params, backward)
    # Attention core: Q.K^T and A.V over each sequence's own keys; sequences of token-weighted mean
    # length sq_sum / tokens set the shape ramp.
    heads = layer.attn_heads / tp
    if layer.window:   # w (2 s - w) a sequence past its window (ModelSpec.windowed_sq), bounded per micro-batch
        sq_sum = np.minimum(np.asarray(sq_sum, dtype=float), 2.0 * layer.window * tokens)
    attn_flops = 2.0 * sq_sum * heads * (layer.qk_head_dim + layer.v_head_dim)
    with np.errstate(divide="ignore", invalid="ignore"):
        seq_len = np.where(tokens > 0, sq_sum / np.maximum(tokens, 1e-300), 0.0)
    attn_f, attn_b = _attention_times(attn_flops, seq_len, sq_sum, heads, rates, params, backward)
    # Elementwise: norms and residual adds per hidden unit (split by TP only with SP), activation
    # function per FFN unit (always split by TP; MoE: top-k experts + shared).
    ffn_units = ffn if layer.has_mlp else 0   # a hybrid's attention or Mamba block has no FFN
    act_bytes = params.gated_act_traffic_bytes_per_ffn if gated else params.act_traffic_bytes_per_ffn
    if layer.moe:   # MoE experts are gated: the up projection holds up + gate; the routed ones' on the
        # busiest EP rank's rows
        ffn_units = plan.up_units / 2 if load is None else (plan.up_units + (load - 1.0) * plan.routed_up_units) / 2
        act_bytes = params.gated_act_traffic_bytes_per_ffn
    # MoE: the routed copies of the device's tokens (split by TP with SP, as the dispatch) are
    # shuffled into expert order and back around the all-to-alls; the fused kernels' backward moves
    # the forward's bytes (their mirrors), the unfused ops' backward_traffic_factor x them (in elem)
    shuffle = k * hidden * params.moe_permute_traffic_bytes_per_hidden / (tp if sp else 1) \
        if layer.moe and not params.moe_permute_fusion else 0.0
    fused = tokens * fused_shuffle_bytes(layer, hidden, params) / (tp if sp else 1) / rates.hbm_Bps
    norm_bytes = params.norm_traffic_bytes_per_hidden   # a layer's two norms; Gemma's sandwich norms four
    if layer.norms != 2:
        norm_bytes = norm_bytes * layer.norms / 2
    elem = tokens * ((norm_bytes + params.residual_traffic_bytes_per_hidden) * hidden
                     / (tp if sp else 1) + act_bytes * ffn_units / tp + shuffle
                     + params.rope_traffic_bytes_per_element * layer.rope_elements / tp) / rates.hbm_Bps
    fwd = fwd + attn_f + elem + fused
    if backward:
        bwd = bwd + attn_b + params.backward_traffic_factor * elem + fused
    if layer.ssm_flops_per_token:   # Mamba-2 SSD / Gated DeltaNet chunked scan: matmul-like kernels, rated as flash attention
        scan = attention_time_s(tokens * layer.ssm_flops_per_token / tp, np.full(n_m, float(layer.scan_chunk_tokens)),
                                rates, params, params.flash_efficiency_ratio)
        fwd = fwd + scan
        if backward:
            bwd = bwd + params.backward_flops_factor * scan
    return LayerTimes(fwd, bwd, attn_f)


def fused_shuffle_bytes(layer: LayerShape, hidden: int, params: ComputeParams) -> float:
    """Bytes a token of an MoE layer moves through Transformer Engine's fused permute / chunk sort /
    unpermute kernels, forward (ComputeParams.moe_permute_fusion): k x the per-copy bytes + the
    per-token bytes, x hidden; 0 unfused or without experts."""
    if not (layer.moe and params.moe_permute_fusion):
        return 0.0
    return hidden * (layer.experts_per_token * params.moe_fused_permute_traffic_bytes_per_hidden
                     + params.moe_fused_permute_token_traffic_bytes_per_hidden)


def _attention_times(attn_flops: np.ndarray, seq_len: np.ndarray, sq_sum: np.ndarray, heads: float,
                     rates: DeviceRates, params: ComputeParams, backward: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(forward, backward or None) attention-core time: flash attention, or materialized scores
    (sq_sum x heads of them, their HBM traffic on top)."""
    if params.flash_attention:
        flops = attn_flops * params.flash_causal_fraction
        attn_f = attention_time_s(flops, seq_len, rates, params, params.flash_efficiency_ratio * rates.flash_scale)
        if not backward:
            return attn_f, None
        ratio_b = params.flash_efficiency_ratio if params.flash_backward_efficiency_ratio is None \
            else params.flash_backward_efficiency_ratio
        return attn_f, params.flash_backward_factor * attention_time_s(flops, seq_len, rates, params,
                                                                        ratio_b * rates.flash_scale)
    score_elems = sq_sum * heads
    core = attention_time_s(attn_flops, seq_len, rates, params)
    attn_f = core + score_elems * params.score_traffic_fwd_bytes / rates.hbm_Bps
    if not backward:
        return attn_f, None
    return attn_f, params.backward_flops_factor * core + score_elems * params.score_traffic_bwd_bytes / rates.hbm_Bps


def logits_times(hidden: int, vocab: int, tokens: np.ndarray, *, tp: int, rates: DeviceRates,
                 params: ComputeParams, head_trains: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) of the vocab-parallel output layer, the loss and the entropy over the
    vocabulary (where the pass computes it) on the last stage (`head_trains` False: a frozen head,
    LoRA's, takes no weight gradient)."""
    tokens = np.asarray(tokens, dtype=float)
    v, h = np.full_like(tokens, vocab / tp), np.full_like(tokens, float(hidden))
    # Forward (tokens, V / tp, H), data gradient (tokens, H, V / tp), weight gradient (H, V / tp,
    # tokens) in one roofline call.
    head_rates = rates if rates.head_peak_flops is None else replace(rates, peak_flops=rates.head_peak_flops)
    t = gemm_time_s(np.stack([tokens, tokens, h]), np.stack([v, h, v]), np.stack([h, v, tokens]), head_rates, params,
                    elem_bytes=rates.head_elem_bytes)
    gemm = t[0]
    grad = t[1] + t[2] if head_trains else t[1]
    if params.logits_recompute:   # a fused head that kept no logits projects them again
        grad = grad + gemm
    loss = tokens * vocab / tp * params.loss_traffic_bytes_per_logit / rates.hbm_Bps
    share = params.loss_forward_share
    entropy = tokens * vocab / tp / rates.hbm_Bps   # x bytes per logit
    return (gemm + loss * share + entropy * params.entropy_traffic_bytes_per_logit,
            grad + loss * (1.0 - share) + entropy * params.entropy_backward_traffic_bytes_per_logit)
