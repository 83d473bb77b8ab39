"""Calibration: fits recover known parameters, micro-benchmarks run, gloo collectives fit, errors are clear."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.calibration.backend import DecodeShape, TimingPolicy, get_backend
from simulator.calibration.fitting import (
    collective_shape,
    fit_collective,
    fit_decode,
    fit_gemm,
    fit_link,
    match_catalog,
    nonneg_relative_lstsq,
    predict_collective_s,
)
from simulator.calibration.microbench import (
    CollectiveSample,
    CopySample,
    DecodeSample,
    GemmSample,
    MicrobenchConfig,
    run_microbench,
)
from simulator.errors import RlsimError

torch = pytest.importorskip("torch")


# ---- fits on synthetic samples (closed form: the generating parameters come back) ----------------
@settings(max_examples=40, deadline=None)
@given(latency=st.floats(1e-7, 1e-3), bw=st.floats(1e8, 1e12))
def test_link_fit_recovers_latency_and_bandwidth(latency: float, bw: float) -> None:
    sizes = [2**k for k in range(10, 28, 3)]
    samples = [CopySample("h2d", s, latency + s / bw) for s in sizes]
    lat, fitted_bw, err = fit_link(samples)
    assert fitted_bw == pytest.approx(bw, rel=1e-6)
    assert lat == pytest.approx(latency, rel=1e-5, abs=1e-12)
    assert err < 1e-6


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0, 10), b=st.floats(0, 10), noise=st.floats(0, 0.3), seed=st.integers(0, 1000))
def test_nonneg_lstsq_never_negative(a: float, b: float, noise: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(8), np.linspace(1, 8, 8)])
    t = x @ np.array([a, b]) * rng.lognormal(0, noise, 8) + 1e-3
    coef = nonneg_relative_lstsq(x, t)
    assert np.all(coef >= 0)


@pytest.mark.parametrize("plateau,ramp_index,k_index,launch_s", [(0.8, 20, 30, 2e-5), (0.55, 30, 10, 0.0),
                                                                (1.0, 10, 20, 5e-6), (0.7, 0, 25, 1e-5)])
def test_gemm_fit_recovers_the_shape_curve(plateau: float, ramp_index: int, k_index: int, launch_s: float) -> None:
    from simulator.calibration.fitting import RAMP_DIM_GRID, gemm_curve_time_s

    peak, mem_bw = 100e9, 20e9
    ramp_dim, ramp_k = RAMP_DIM_GRID[ramp_index], RAMP_DIM_GRID[k_index]
    shapes = [(32, 32, 32), (64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1, 1024, 256),
              (16, 1024, 256), (64, 1024, 256), (1024, 256, 64), (1024, 1024, 16), (2048, 2048, 2048)]
    probes = [GemmSample(m, n, k, "fp32", 1.0) for m, n, k in shapes]
    m, n, k = (np.array([getattr(p, a) for p in probes], dtype=float) for a in "mnk")
    times = gemm_curve_time_s(m, n, k, np.array([p.bytes for p in probes]), peak, plateau, ramp_dim, ramp_k,
                              launch_s, mem_bw)
    samples = [GemmSample(p.m, p.n, p.k, "fp32", float(t)) for p, t in zip(probes, times, strict=True)]
    fit = fit_gemm(samples, mem_bw, {"fp32": peak})["fp32"]
    assert fit.efficiency == pytest.approx(plateau)
    assert fit.ramp_dim == pytest.approx(ramp_dim) and fit.ramp_k == pytest.approx(ramp_k)
    assert fit.launch_overhead_s == pytest.approx(launch_s, abs=1e-12)
    assert fit.rate_flops == pytest.approx(peak * plateau)
    assert fit.max_fit_error < 1e-9
    assert [f for f, _ in fit.curve] == sorted(f for f, _ in fit.curve)


def test_gemm_curve_matches_the_training_cost_model() -> None:
    """The fit's curve is the training model's gemm_time_s, shape for shape (one formula, two callers)."""
    from simulator.calibration.fitting import gemm_curve_time_s
    from simulator.llm.train_compute import ComputeParams, DeviceRates, gemm_time_s

    rates = DeviceRates(peak_flops=80e9, gemm_efficiency=0.6, hbm_Bps=12e9, launch_s=3e-5)
    params = ComputeParams(dtype="fp32", activation_bytes=4.0, gemm_ramp_dim=25.0, gemm_ramp_k=60.0)
    for m, n, k in [(1, 1024, 256), (40, 768, 256), (256, 256, 256), (1024, 256, 64)]:
        sample = GemmSample(m, n, k, "fp32", 1.0)
        expected = gemm_curve_time_s(np.array([m]), np.array([n]), np.array([k]), np.array([sample.bytes]),
                                     80e9, 0.6, 25.0, 60.0, 3e-5, 12e9)[0]
        assert float(gemm_time_s(m, n, k, rates, params)) == pytest.approx(expected, rel=1e-12)


def test_gemm_fit_without_a_peak_uses_the_best_rate() -> None:
    samples = [GemmSample(n, n, n, "fp32", 2.0 * n**3 / (50e9 * n / (n + 64))) for n in (32, 128, 512)]
    fit = fit_gemm(samples, 1e12)["fp32"]
    assert max(e for _, e in fit.curve) == pytest.approx(1.0)  # the best sample defines the peak
    assert 0 < fit.efficiency <= 1


def test_decode_fit_recovers_engine_parameters() -> None:
    peak, bw, att = 100e9, 20e9, 0.65
    overhead, per_layer, ge, he = 50e-6, 120e-6, 0.4, 0.7
    samples = []
    for layers in (1, 2, 4):
        for batch in (1, 8, 32):
            for kv in (64, 256):
                shape = DecodeShape(batch, 256, 1024, layers, kv)
                probe = DecodeSample(shape, "fp32", 1.0)
                linear = 2.0 * batch * shape.weight_elems / (peak * ge)
                attention = (shape.flops - 2.0 * batch * shape.weight_elems) / (peak * att)
                t = overhead + per_layer * layers + max(linear + attention, probe.bytes / (bw * he))
                samples.append(DecodeSample(shape, "fp32", t))
    fit = fit_decode(samples, peak, bw, att)
    assert fit.gemm_efficiency == pytest.approx(ge)
    assert fit.hbm_efficiency == pytest.approx(he)
    assert fit.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert fit.per_layer_s == pytest.approx(per_layer, rel=1e-6)


@pytest.mark.parametrize("op,n,steps,factor", [("all_reduce", 2, 2, 1.0), ("all_reduce", 8, 14, 1.75),
                                               ("all_gather", 4, 3, 0.75), ("broadcast", 4, 3, 1.0)])
def test_collective_shape_follows_nccl_tests(op: str, n: int, steps: float, factor: float) -> None:
    assert collective_shape(op, n) == (pytest.approx(steps), pytest.approx(factor))


def test_collective_fit_recovers_synthetic_ring() -> None:
    latency, bw = 30e-6, 5e9
    samples = [CollectiveSample("all_reduce", 4, s, 6 * latency + 1.5 * s / bw) for s in (2**12, 2**16, 2**20, 2**24)]
    fit = fit_collective(samples, "gloo")
    assert fit.latency_s == pytest.approx(latency, rel=1e-6)
    assert fit.bw_Bps == pytest.approx(bw, rel=1e-6)
    assert predict_collective_s(fit, 2**20) == pytest.approx(samples[2].time_s)


def test_catalog_matching() -> None:
    assert match_catalog("cuda", "NVIDIA H100 80GB HBM3") == "h100"
    assert match_catalog("cuda", "NVIDIA H200") == "h200"
    assert match_catalog("cuda", "NVIDIA H20") == "h20"
    assert match_catalog("cuda", "NVIDIA A100-SXM4-80GB", 85e9) == "a100-80gb"
    assert match_catalog("cuda", "NVIDIA A100-SXM4-40GB", 42e9) == "a100-40gb"
    assert match_catalog("npu", "Ascend910B2") == "ascend-910b2"
    assert match_catalog("cuda", "Some Future GPU") is None
    assert match_catalog("cpu", "AMD EPYC") == "cpu"


# ---- real measurements on this machine ------------------------------------------------------------------
QUICK = MicrobenchConfig(
    gemm_shapes=[(64, 64, 64), (128, 128, 128), (256, 256, 256), (8, 512, 256)], dtypes=["fp32"],
    copy_sizes_bytes=[2**20, 2**24], host_copy_sizes_bytes=[2**20, 2**22], decode_layers=[1, 2],
    decode_batches=[1, 8], decode_kv_lens=[64], collectives=False)


def test_quick_microbench_produces_a_valid_profile() -> None:
    from simulator.calibration.fitting import build_profile

    backend = get_backend("torch", "cpu", timing=TimingPolicy(samples=3, min_batch_s=1e-3))
    result = run_microbench(backend, QUICK)
    assert len(result.gemm) == 4 and len(result.decode) == 4
    assert all(s.time_s > 0 for s in result.gemm + result.copy + result.decode)
    profile = build_profile(result, "cpu")
    assert profile.device == "cpu"
    assert profile.peak_source.startswith("measured")
    # The peak is the best rate observed, so no sample beats it.
    best = max(g.flops / g.time_s for g in result.gemm)
    assert profile.peak_flops["fp32"] == pytest.approx(best)
    assert 0 < profile.gemm_efficiency <= 1 and profile.hbm_efficiency == 1.0
    assert profile.hbm_bw_Bps > 1e8 and profile.launch_overhead_s >= 0
    assert profile.decode_gemm_efficiency is not None


# A wall-clock measurement on a shared 2-core VM: a neighbour's burst can slow one size's batch by
# 30-40%, and the whole VM drifts by tens of percent for seconds at a time (a fresh-clone CI run saw
# three measurements in a row miss by 20-24%). Noise mostly adds time, so after each measurement the
# fit is judged on it and on each size's fastest time so far (as time_collectives keeps a size's
# fastest launch); the first within 20% passes. Up to this many measurements (one CI run of seven
# missed after six, its worst size at +24%: each more measurement only lowers the fastest times).
GLOO_MEASUREMENTS = 10


def _worst_fit_error(sizes: list[int], times: list[float]) -> tuple[float, list[str]]:
    fit = fit_collective([CollectiveSample("all_reduce", 2, s, t) for s, t in zip(sizes, times, strict=True)], "gloo")
    assert fit.bw_Bps > 0 and fit.latency_s >= 0
    errors = [predict_collective_s(fit, s) / t - 1 for s, t in zip(sizes, times, strict=True)]
    return max(abs(e) for e in errors), [f"{e:+.0%}" for e in errors]


@pytest.mark.wall_clock
def test_gloo_collective_fit_reproduces_measured_times_within_20_percent() -> None:
    """Acceptance: 2 gloo processes, all-reduce over 4 KiB..16 MiB, latency/bandwidth fit."""
    backend = get_backend("torch", "cpu", timing=TimingPolicy(samples=25, min_batch_s=2e-3))
    sizes = [2**k for k in range(12, 25, 2)]
    tries: list[tuple[float, list[str]]] = []
    fastest = [float("inf")] * len(sizes)
    for _ in range(GLOO_MEASUREMENTS):
        times = backend.time_collectives("all_reduce", 2, sizes)
        fastest = [min(a, b) for a, b in zip(fastest, times, strict=True)]
        tries += [_worst_fit_error(sizes, times), _worst_fit_error(sizes, fastest)]
        if min(worst for worst, _ in tries[-2:]) <= 0.20:
            break
    assert min(worst for worst, _ in tries[-2:]) <= 0.20, tries


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RlsimError, match="no CUDA device") as info:
        get_backend("torch", "cuda")
    assert info.value.field == "--device" and "cpu" in info.value.fix


def test_npu_without_torch_npu_is_a_clear_error() -> None:
    try:
        import torch_npu  # noqa: F401
        pytest.skip("torch_npu is installed")
    except ImportError:
        pass
    with pytest.raises(RlsimError, match="torch_npu"):
        get_backend("torch", "npu")


def test_unknown_backend_and_device() -> None:
    with pytest.raises(RlsimError, match="backend"):
        get_backend("jax", "cpu")
    with pytest.raises(RlsimError, match="device"):
        get_backend("torch", "tpu")


def test_microbench_config_errors_name_the_field() -> None:
    with pytest.raises(RlsimError) as info:
        MicrobenchConfig.from_mapping({"gemm_shapes": "big"})
    assert info.value.field.startswith("microbench.gemm_shapes")
    with pytest.raises(RlsimError, match="microbench.nonsense"):
        MicrobenchConfig.from_mapping({"nonsense": 1})


def test_core_import_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, simulator, simulator.hardware.profiles, simulator.calibration.runlogs, "
            "simulator.calibration.fitting, simulator.commands.calibrate; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_collective_fit_recovers_a_protocol_switch_and_keeps_one_regime_when_enough() -> None:
    """Synthetic ring all-reduce times (n = 2: 2 steps, bus factor 1): a switch at 128 KiB from
    (100 us, 0.5 GB/s) to (20 us, 1.5 GB/s) is recovered; a single line stays one regime."""
    sizes = [2**k for k in range(12, 25, 2)]

    def ring(lat: float, bw: float, s: int) -> float:
        return 2 * lat + s / bw

    switched = [ring(100e-6, 0.5e9, s) if s < 2**17 else ring(20e-6, 1.5e9, s) for s in sizes]
    fit = fit_collective([CollectiveSample("all_reduce", 2, s, t) for s, t in zip(sizes, switched, strict=True)],
                         "gloo")
    assert fit.max_fit_error < 1e-9 and 2**16 < fit.large_from_bytes < 2**18
    assert fit.latency_s == pytest.approx(100e-6) and fit.bw_Bps == pytest.approx(1.5e9)
    line = [ring(50e-6, 1e9, s) for s in sizes]
    one = fit_collective([CollectiveSample("all_reduce", 2, s, t) for s, t in zip(sizes, line, strict=True)], "gloo")
    assert one.large_from_bytes is None and one.bw_Bps == pytest.approx(1e9)
    assert predict_collective_s(one, 2**20) == pytest.approx(ring(50e-6, 1e9, 2**20))
