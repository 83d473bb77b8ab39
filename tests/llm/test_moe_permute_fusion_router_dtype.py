"""Megatron-Core's moe_permute_fusion and moe_router_dtype (ComputeParams): the fused token shuffle
(Transformer Engine's permutation kernels) moves k x 12 + 4 bytes a hidden unit a token, forward and
backward alike; the router GEMM at its dtype's peak (fp64: its three passes, with the casts around them;
fp32: its two gradients, the forward on the bf16 operands) and the combine's reduce-scatter in that dtype;
both refused where nothing reads them."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import ModelSpec
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import DeviceRates, gemm_times, layer_times, router_rates
from simulator.llm.training import TrainParams, _combine_bytes_ratio, rates_for
from simulator.params import ComputeParams
from simulator.scenario import load_scenario

MODEL = ModelSpec(name="t", num_layers=2, hidden=512, ffn_hidden=1024, num_heads=8, num_kv_heads=8, head_dim=64,
                  vocab=2048, num_experts=16, experts_per_token=4, moe_ffn_hidden=256, first_k_dense=1)
DENSE, MOE = layer_shapes(MODEL)
TOKENS, SQ = np.array([512.0, 4096.0]), np.array([512.0**2, 4096.0**2])
H100 = DeviceRates(peak_flops=989e12, gemm_efficiency=0.8, hbm_Bps=3.35e12 * 0.7, launch_s=5e-6)


def _times(layer, tp: int, sp: bool, **knobs):
    return layer_times(layer, 512, 1024, True, TOKENS, SQ, tp=tp, sp=sp, ep=4, rates=H100,
                       params=ComputeParams(**knobs))


@pytest.mark.parametrize("tp, sp", [(1, False), (4, True)])
def test_the_fused_shuffle_moves_k_copies_of_12_bytes_and_4_a_token_forward_and_backward(tp, sp) -> None:
    """TE's fused kernels: the permute reads a token once and writes its k copies, the chunk sorts read and
    write each copy, the unpermute reads the k copies and writes the token once: (k x 12 + 4) x hidden
    bytes a token (split by TP with SP), over HBM; the backward (the mirror kernels) the same bytes."""
    off = _times(MOE, tp, sp, moe_permute_traffic_bytes_per_hidden=0.0)
    fused = _times(MOE, tp, sp, moe_permute_fusion=True)
    shuffle = TOKENS * (4 * 12.0 + 4.0) * 512 / tp / H100.hbm_Bps
    np.testing.assert_allclose(fused.fwd_s - off.fwd_s, shuffle, rtol=1e-9)
    np.testing.assert_allclose(fused.bwd_s - off.bwd_s, shuffle, rtol=1e-9)
    unfused = _times(MOE, tp, sp)   # 16 a copy forward, twice that backward
    np.testing.assert_allclose(unfused.fwd_s - off.fwd_s, TOKENS * 4 * 16.0 * 512 / tp / H100.hbm_Bps, rtol=1e-9)
    np.testing.assert_array_equal(_times(DENSE, tp, sp, moe_permute_fusion=True).fwd_s, _times(DENSE, tp, sp).fwd_s)


# compute-bound rates without a shape ramp or launch: a GEMM is max(2 m n k / peak, bytes / HBM)
FLAT = dict(gemm_ramp_dim=0.0, gemm_ramp_k=0.0)


def _router(dtype: str | None, hbm: float = 3.35e12) -> tuple[np.ndarray, ...]:
    rates = DeviceRates(peak_flops=989e12, gemm_efficiency=1.0, hbm_Bps=hbm, router=None if dtype is None else
                        router_rates(dtype, {"fp32": 67e12, "fp64": 67e12}[dtype], 989e12, 2.0))
    return gemm_times(MOE, TOKENS, tp=1, ep=4, rates=rates, params=ComputeParams(**FLAT))["router"]


def _roofline(flops: np.ndarray, peak: float, operand_bytes: np.ndarray, hbm: float = 3.35e12) -> np.ndarray:
    return np.maximum(flops / peak, operand_bytes / hbm)


def test_the_fp64_router_runs_its_three_gemms_at_the_fp64_peak_with_their_casts() -> None:
    """router_gating_linear in fp64: torch.mm forward, data and weight gradient, each at the fp64 peak
    with 8-byte operands, plus casting the bf16 input and weight up and the result back, (2 + 8) bytes an
    element of m k + k n."""
    m, k, n = TOKENS, 512.0, 16.0
    flops, elems, cast = 2 * m * k * n, m * k + k * n + m * n, 10.0 * (m * k + k * n) / 3.35e12
    for got in _router("fp64"):
        np.testing.assert_allclose(got, _roofline(flops, 67e12, 8.0 * elems) + cast, rtol=1e-12)


def test_the_fp32_router_runs_its_forward_on_bf16_and_its_gradients_at_the_fp32_peak() -> None:
    """Megatron-Core 0.13.0 with Transformer Engine: the forward's GEMM takes the bf16 operands (an fp32
    output), as without a router dtype; the two gradients run on fp32 operands at the fp32 peak, with the
    casts (2 + 4) x (m k + k n)."""
    m, k, n = TOKENS, 512.0, 16.0
    flops, elems = 2 * m * k * n, m * k + k * n + m * n
    fwd, dgrad, wgrad = _router("fp32")
    np.testing.assert_array_equal(fwd, _router(None)[0])
    for got in (dgrad, wgrad):
        np.testing.assert_allclose(got, _roofline(flops, 67e12, 4.0 * elems) + 6.0 * (m * k + k * n) / 3.35e12,
                                   rtol=1e-12)


def test_the_router_dtype_leaves_the_other_gemms_and_the_catalogs_peaks_price_it() -> None:
    h100 = get_device("h100")
    base = gemm_times(MOE, TOKENS, tp=1, ep=4, rates=rates_for(h100, TrainParams()), params=ComputeParams())
    fp64 = gemm_times(MOE, TOKENS, tp=1, ep=4, rates=rates_for(h100, TrainParams(
        compute=ComputeParams(moe_router_dtype="fp64"))), params=ComputeParams())
    for name in base:
        for got, want in zip(fp64[name], base[name], strict=True):
            assert (got > want).all() if name == "router" else (got == want).all()
    rates = rates_for(get_device("h100"), TrainParams(compute=ComputeParams(moe_router_dtype="fp64")))
    assert rates.router.peak_flops == (67e12,) * 3 and rates.router.elem_bytes == (8.0,) * 3
    rates = rates_for(get_device("h100"), TrainParams(compute=ComputeParams(moe_router_dtype="fp32")))
    assert rates.router.peak_flops == (989e12, 67e12, 67e12) and rates.router.cast_bytes == (0.0, 6.0, 6.0)
    with pytest.raises(RlsimError) as exc:   # no fp64 figure in the catalog
        rates_for(get_device("h20"), TrainParams(compute=ComputeParams(moe_router_dtype="fp64")))
    assert exc.value.field == "workload.train_params.compute.moe_router_dtype"


def test_the_combines_reduce_scatter_moves_the_probabilities_dtype() -> None:
    assert _combine_bytes_ratio(ComputeParams()) == 1.0
    assert _combine_bytes_ratio(ComputeParams(moe_router_dtype="fp32")) == 2.0
    assert _combine_bytes_ratio(ComputeParams(moe_router_dtype="fp64")) == 4.0


def _load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated",
                         overrides=["topology.preset=dgx-h100", "topology.nodes=1", "workload.model=qwen3-30b-a3b",
                                    *overrides])


C = "workload.train_params.compute."


def test_the_shuffles_bytes_apply_only_to_their_own_path() -> None:
    compute = _load(f"{C}moe_permute_fusion=true", f"{C}moe_fused_permute_traffic_bytes_per_hidden=10",
                    f"{C}moe_router_dtype=fp64").workload.train_params.compute
    assert (compute.moe_permute_fusion, compute.moe_fused_permute_traffic_bytes_per_hidden,
            compute.moe_router_dtype) == (True, 10.0, "fp64")
    for items, field in (([f"{C}moe_fused_permute_traffic_bytes_per_hidden=10"], "moe_fused_permute_traffic"),
                         ([f"{C}moe_fused_permute_token_traffic_bytes_per_hidden=2"], "moe_fused_permute_token"),
                         ([f"{C}moe_permute_fusion=true", f"{C}moe_permute_traffic_bytes_per_hidden=20"],
                          "moe_permute_traffic")):
        with pytest.raises(RlsimError) as exc:
            _load(*items)
        assert field in str(exc.value) and "moe_permute_fusion" in str(exc.value)
    with pytest.raises(RlsimError):
        _load(f"{C}moe_router_dtype=fp16")
