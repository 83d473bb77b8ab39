"""From micro-benchmark samples to a DeviceProfile: efficiency curves, fixed overheads, bandwidths.

Every fit minimises relative error (small and large sizes count alike) with non-negative
coefficients, and reports the worst relative error with which it reproduces its own samples.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import RlsimError
from ..hardware.devices import get_device
from ..hardware.profiles import CollectiveFit, DeviceProfile, GemmFit
from .microbench import CollectiveSample, CopySample, DecodeSample, GemmSample, MicrobenchResult

# torch device name fragments -> catalog entry, most specific first (gb200 before b200, h200 before h20).
_CATALOG_MATCH = (("gb200", "gb200"), ("b200", "b200"), ("h200", "h200"), ("h100", "h100"),
                  ("h800", "h800"), ("h20", "h20"), ("910c", "ascend-910c"), ("910b3", "ascend-910b3"),
                  ("910b", "ascend-910b2"))
A100_80GB_MIN_BYTES = 60e9  # A100 comes in 40 and 80 GB; split the two by reported memory


def nonneg_relative_lstsq(features: np.ndarray, t: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Coefficients c >= 0 minimising sum(w * ((features @ c) / t - 1)^2) (active-set, few columns)."""
    features = np.asarray(features, dtype=float)
    t = np.asarray(t, dtype=float)
    root_w = np.sqrt(np.ones(len(t)) if weights is None else np.asarray(weights, dtype=float))
    a = features / t[:, None] * root_w[:, None]
    active = list(range(features.shape[1]))
    coef = np.zeros(features.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], root_w, rcond=None)
        if np.all(sol >= 0):
            coef[:] = 0.0
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef


def max_relative_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return float(np.max(np.abs(p / m - 1.0))) if len(m) else 0.0


# Grids of the GEMM curve fit: plateau (fraction of peak) and the two shape ramps (elements, 0 = none).
PLATEAU_GRID = tuple(round(0.01 * i, 2) for i in range(5, 101))
RAMP_DIM_GRID = (0.0, *(float(x) for x in np.logspace(-1, 3, 41)))


def gemm_curve_time_s(m: np.ndarray, n: np.ndarray, k: np.ndarray, nbytes: np.ndarray, peak: float,
                      plateau: float, ramp_dim: float, ramp_k: float, launch_s: float,
                      mem_bw_Bps: float) -> np.ndarray:
    """The training cost model's GEMM time (llm.train_compute.gemm_time_s): launch + max(F / (peak x
    plateau x shape), bytes / memory bw), shape = 1 / (1 + ramp_dim (1/m + 1/n) + ramp_k / k)."""
    from ..llm.train_compute import shape_efficiency
    flops = 2.0 * np.asarray(m, dtype=float) * n * k
    compute = flops / (peak * plateau * shape_efficiency(m, n, k, ramp_dim, ramp_k))
    return launch_s + np.maximum(compute, np.asarray(nbytes, dtype=float) / mem_bw_Bps)


def fit_gemm(samples: Sequence[GemmSample], mem_bw_Bps: float,
             peak_flops: dict[str, float] | None = None) -> dict[str, GemmFit]:
    """Per dtype, the training cost model's GEMM curve fitted to every timed shape: plateau and the
    two shape ramps on a grid, the launch overhead (>= 0) in closed form for each grid point,
    minimising the squared relative error of time (small and large shapes weigh alike). Skinny and
    short-reduction shapes in the grid pin the ramps. `peak_flops` (catalog) defaults to the best
    rate observed."""
    out: dict[str, GemmFit] = {}
    grid = np.array(RAMP_DIM_GRID)
    plateaus = np.array(PLATEAU_GRID)[None, None, :, None]
    for dtype in sorted({s.dtype for s in samples}):
        rows = [s for s in samples if s.dtype == dtype]
        m, n, k = (np.array([getattr(s, a) for s in rows], dtype=float) for a in "mnk")
        flops = np.array([s.flops for s in rows])
        nbytes = np.array([s.bytes for s in rows])
        t = np.array([s.time_s for s in rows])
        peak = (peak_flops or {}).get(dtype, float(np.max(flops / t)))
        # inverse shape efficiency [ramp_dim, ramp_k, 1, sample] = 1 + ramp_dim (1/m + 1/n) + ramp_k / k
        inv = 1.0 + grid[:, None, None, None] * (1.0 / m + 1.0 / n) + grid[None, :, None, None] / k
        # roof[d, dk, p, i]: the model without launch; the launch minimising sum((launch + roof) / t - 1)^2.
        roof = np.maximum(flops * inv / (peak * plateaus), nbytes / mem_bw_Bps)
        w = 1.0 / t**2
        launch = np.maximum(0.0, ((t - roof) * w).sum(-1) / w.sum())
        score = (((launch[..., None] + roof) / t - 1.0) ** 2).sum(-1)
        di, ki, pi = np.unravel_index(int(np.argmin(score)), score.shape)
        plateau, ramp_dim, ramp_k = PLATEAU_GRID[pi], RAMP_DIM_GRID[di], RAMP_DIM_GRID[ki]
        launch_s = float(launch[di, ki, pi])
        predicted = gemm_curve_time_s(m, n, k, nbytes, peak, plateau, ramp_dim, ramp_k, launch_s, mem_bw_Bps)
        curve = sorted((float(f), float(f / x / peak)) for f, x in zip(flops, t, strict=True))
        out[dtype] = GemmFit(rate_flops=peak * plateau, launch_overhead_s=launch_s, ramp_dim=ramp_dim,
                             ramp_k=ramp_k, efficiency=plateau, curve=curve,
                             max_fit_error=max_relative_error(predicted, t))
    return out


def fit_link(samples: Sequence[CopySample], bytes_factor: float = 1.0) -> tuple[float, float, float]:
    """time = latency + bytes_factor x bytes / bw -> (latency_s, bw_Bps, max_fit_error)."""
    if not samples:
        raise RlsimError("no copy samples to fit", field="microbench", fix="time at least one copy size")
    s = np.array([x.nbytes for x in samples], dtype=float) * bytes_factor
    t = np.array([x.time_s for x in samples])
    latency, inv_bw = nonneg_relative_lstsq(np.column_stack([np.ones(len(t)), s]), t)
    bw = 1.0 / inv_bw if inv_bw > 0 else float(np.max(s / t))
    return float(latency), float(bw), max_relative_error(latency + s / bw, t)


# Efficiencies tried when fitting the decode step (the engine's gemm_efficiency / hbm_efficiency).
DECODE_EFFICIENCY_GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))


@dataclass(frozen=True)
class DecodeFit:
    """The rollout engine's decode formula fitted to decode-like steps:
    step = overhead_s + per_layer_s x layers + max(compute / gemm_efficiency, memory / hbm_efficiency)."""

    overhead_s: float
    per_layer_s: float
    gemm_efficiency: float
    hbm_efficiency: float
    max_fit_error: float


def _decode_parts(samples: Sequence[DecodeSample], peak_flops: float, bw_Bps: float,
                  attention_efficiency: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: linear-layer seconds at full peak, attention seconds, memory seconds at full bw
    (the terms of llm.inference.StepCost.decode_lines)."""
    linear = np.array([2.0 * s.shape.batch * s.shape.weight_elems for s in samples]) / peak_flops
    attention = np.array([s.shape.flops - 2.0 * s.shape.batch * s.shape.weight_elems for s in samples])
    memory = np.array([s.bytes for s in samples]) / bw_Bps
    return linear, attention / (peak_flops * attention_efficiency), memory


def fit_decode(samples: Sequence[DecodeSample], peak_flops: float, bw_Bps: float,
               attention_efficiency: float) -> DecodeFit:
    """Grid over the two efficiencies, least squares (non-negative, relative) for the overheads."""
    linear, attention, memory = _decode_parts(samples, peak_flops, bw_Bps, attention_efficiency)
    t = np.array([s.time_s for s in samples])
    layers = np.array([s.shape.num_layers for s in samples], dtype=float)
    best: DecodeFit | None = None
    best_score = np.inf
    for ge in DECODE_EFFICIENCY_GRID:
        for he in DECODE_EFFICIENCY_GRID:
            roof = np.maximum(linear / ge + attention, memory / he)
            coef = _nonneg_offsets(np.column_stack([np.ones(len(t)), layers]), t - roof, t)
            predicted = roof + coef[0] + coef[1] * layers
            score = float(np.sum((predicted / t - 1.0) ** 2))
            if score < best_score - 1e-15:
                best_score = score
                best = DecodeFit(float(coef[0]), float(coef[1]), ge, he, max_relative_error(predicted, t))
    assert best is not None
    return best


def _nonneg_offsets(features: np.ndarray, residual: np.ndarray, t: np.ndarray) -> np.ndarray:
    """c >= 0 minimising sum(((features @ c - residual) / t)^2)."""
    a = features / t[:, None]
    y = residual / t
    active = list(range(features.shape[1]))
    coef = np.zeros(features.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if np.all(sol >= 0):
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef


def collective_shape(op: str, n: int) -> tuple[float, float]:
    """(latency steps, bus-bandwidth factor) of a ring collective (nccl-tests PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return float(n - 1), (n - 1) / n
    if op == "broadcast":
        return float(n - 1), 1.0
    raise RlsimError(f"no collective model for {op!r}", field="collective_ops")


# Lawson's iteratively re-weighted least squares, which converges to the minimax fit: the acceptance
# measure of a collective fit is its worst relative error, so that is what the fit minimises.
MINIMAX_ITERATIONS = 200
MINIMAX_EXACT = 1e-12  # a worst relative error this small is an exact fit: stop re-weighting


def nonneg_relative_minimax(features: np.ndarray, t: np.ndarray,
                            iterations: int = MINIMAX_ITERATIONS) -> np.ndarray:
    """Coefficients c >= 0 (approximately) minimising max |(features @ c) / t - 1| (Lawson's algorithm)."""
    features, t = np.asarray(features, dtype=float), np.asarray(t, dtype=float)
    weights = np.full(len(t), 1.0 / len(t))
    best = nonneg_relative_lstsq(features, t)
    best_error = max_relative_error(features @ best, t)
    for _ in range(iterations):
        coef = nonneg_relative_lstsq(features, t, weights)
        residual = np.abs(features @ coef / t - 1.0)
        error = float(np.max(residual))
        if error < best_error:
            best, best_error = coef, error
        weights = weights * residual
        total = weights.sum()
        if best_error <= MINIMAX_EXACT or not np.isfinite(total) or total <= 0:
            break  # an exact fit, or the weights have collapsed onto points fitted exactly
        weights = weights / total
    return best


def _linear_collective(steps: float, factor: float, s: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(latency per step, bandwidth) minimising the worst relative error (non-negative)."""
    latency, inv_bw = nonneg_relative_minimax(np.column_stack([np.full(len(t), steps), factor * s]), t)
    bw = 1.0 / inv_bw if inv_bw > 0 else float(np.max(factor * s / t))
    return float(latency), bw


def fit_collective(samples: Sequence[CollectiveSample], backend: str) -> CollectiveFit:
    """Latency per step and bandwidth of one op's samples (all of one world size): one regime, or two
    (a protocol switch between two timed sizes, each side with >= 2 sizes) when that fits better."""
    ops = {(s.op, s.world_size) for s in samples}
    if len(ops) != 1:
        raise ValueError(f"fit one op and world size at a time, got {sorted(ops)}")
    op, n = ops.pop()
    steps, factor = collective_shape(op, n)
    order = np.argsort([x.nbytes for x in samples], kind="stable")
    s = np.array([samples[i].nbytes for i in order], dtype=float)
    t = np.array([samples[i].time_s for i in order])
    latency, bw = _linear_collective(steps, factor, s, t)
    best = CollectiveFit(backend=backend, op=op, world_size=n, latency_s=latency, bw_Bps=bw,
                         max_fit_error=max_relative_error(steps * latency + factor * s / bw, t))
    for k in range(2, len(s) - 1):
        small_lat, small_bw = _linear_collective(steps, factor, s[:k], t[:k])
        large_lat, large_bw = _linear_collective(steps, factor, s[k:], t[k:])
        candidate = CollectiveFit(backend=backend, op=op, world_size=n, latency_s=small_lat, bw_Bps=large_bw,
                                  max_fit_error=0.0, small_bw_Bps=small_bw,
                                  large_from_bytes=float(np.sqrt(s[k - 1] * s[k])), large_latency_s=large_lat)
        error = max_relative_error([predict_collective_s(candidate, x) for x in s], t)
        if error < best.max_fit_error - 1e-12:
            best = candidate.model_copy(update={"max_fit_error": error})
    return best


def predict_collective_s(fit: CollectiveFit, nbytes: float) -> float:
    steps, factor = collective_shape(fit.op, fit.world_size)
    if fit.large_from_bytes is None:
        return steps * fit.latency_s + factor * nbytes / fit.bw_Bps
    if nbytes >= fit.large_from_bytes:
        return steps * float(fit.large_latency_s or 0.0) + factor * nbytes / fit.bw_Bps
    return steps * fit.latency_s + factor * nbytes / float(fit.small_bw_Bps or fit.bw_Bps)


def match_catalog(device: str, model: str, memory_bytes: float | None = None) -> str | None:
    """The catalog entry of a torch device name (None for the CPU or an unknown accelerator)."""
    if device == "cpu":
        return "cpu"
    low = model.lower()
    if "a100" in low:
        return "a100-80gb" if (memory_bytes or 0) >= A100_80GB_MIN_BYTES else "a100-40gb"
    for fragment, name in _CATALOG_MATCH:
        if fragment in low:
            return name
    return None


_DIST = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


def build_profile(result: MicrobenchResult, device: str) -> DeviceProfile:
    """Fit every figure of a micro-benchmark run into a profile.

    CPU: the peak is unknown, so peak_flops is the best GEMM rate observed and the memory
    bandwidth the largest copy's rate (efficiencies then read "of the best seen"). An accelerator
    found in the catalog keeps its datasheet peaks and gets measured efficiencies against them."""
    facts = dict(result.facts)
    catalog_name = match_catalog(device, str(facts.get("model", "")), facts.get("memory_bytes"))
    catalog = get_device(catalog_name) if catalog_name and device != "cpu" else None
    notes: list[str] = []

    copies = sorted((c for c in result.copy if c.kind == "copy"), key=lambda c: c.nbytes)
    if not copies:
        raise RlsimError("no device copy was timed", field="microbench.copy_sizes_bytes", fix="give one size or more")
    copy_curve = [(int(c.nbytes), 2.0 * c.nbytes / c.time_s) for c in copies]  # read + write
    sustained_bw = copy_curve[-1][1]
    if catalog is not None:
        hbm_bw, hbm_eff = catalog.hbm_bw_Bps, min(1.0, sustained_bw / catalog.hbm_bw_Bps)
    else:
        hbm_bw, hbm_eff = sustained_bw, 1.0
        notes.append(f"memory bandwidth is the largest copy's rate ({copies[-1].nbytes} B, read + write): "
                     "no datasheet peak, so hbm_efficiency is 1")

    gemm = fit_gemm(result.gemm, sustained_bw, dict(catalog.peak_flops) if catalog else None)
    if not gemm:
        raise RlsimError("no GEMM was timed", field="microbench.gemm_shapes", fix="give one shape or more")
    main = max(gemm, key=lambda d: gemm[d].rate_flops)
    if catalog is not None:
        peak = {d: catalog.peak_flops[d] for d in gemm if d in catalog.peak_flops}
        peak_source = f"catalog ({catalog.name}); efficiencies measured against it"
    else:
        peak = {d: max(s.flops / s.time_s for s in result.gemm if s.dtype == d) for d in gemm}
        peak_source = "measured: the best GEMM rate observed per dtype (the CPU has no datasheet peak here)"
        notes.append(f"gemm_efficiency is the asymptotic rate of {main} GEMMs over the best rate observed")

    h2d = [c for c in result.copy if c.kind == "h2d"]
    host_bw = fit_link(h2d)[1] if h2d else None
    if device == "cpu":
        notes.append("host<->device copies on a CPU are memory copies; host_link_bw_Bps is their rate")

    decode_fit = None
    decode = [s for s in result.decode if s.dtype in peak]
    if decode:
        from ..llm.inference import InferenceParams  # the engine's attention efficiency, unchanged
        decode_fit = fit_decode(decode, peak[decode[0].dtype], hbm_bw * hbm_eff,
                                InferenceParams().attention_compute_efficiency)

    collective = None
    scaleup = None
    if result.collectives:
        first_op = result.collectives[0].op
        collective = fit_collective([c for c in result.collectives if c.op == first_op], _DIST[device])
        scaleup = collective.bw_Bps
        notes.append(f"scaleup_bw_Bps is the fitted {collective.backend} {collective.op} bandwidth between "
                     f"{collective.world_size} local processes")

    return DeviceProfile(
        device=catalog_name or device, measured_on=facts, peak_source=peak_source,
        peak_flops=peak, gemm_efficiency=gemm[main].efficiency, hbm_bytes=facts.get("memory_bytes"),
        hbm_bw_Bps=hbm_bw, hbm_efficiency=hbm_eff, launch_overhead_s=gemm[main].launch_overhead_s,
        gemm_ramp_dim=gemm[main].ramp_dim, gemm_ramp_k=gemm[main].ramp_k,
        host_link_bw_Bps=host_bw, scaleup_bw_Bps=scaleup,
        decode_step_overhead_s=decode_fit.overhead_s if decode_fit else None,
        decode_overhead_per_layer_s=decode_fit.per_layer_s if decode_fit else None,
        decode_gemm_efficiency=decode_fit.gemm_efficiency if decode_fit else None,
        decode_hbm_efficiency=decode_fit.hbm_efficiency if decode_fit else None,
        decode_fit_error=decode_fit.max_fit_error if decode_fit else None, gemm=gemm,
        copy_curve=copy_curve, collective=collective, notes=notes)
