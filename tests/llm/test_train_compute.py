"""Shape-aware GEMM model of the training cost model (issue 6): closed forms and invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.llm.layer_costs import Gemm
from simulator.llm.train_compute import ComputeParams, DeviceRates, gemm_time_s, layer_times, shape_efficiency

H100 = DeviceRates(peak_flops=989e12, gemm_efficiency=0.8, hbm_Bps=3.35e12 * 0.9, launch_s=5e-6)
dims = st.floats(1, 1e5)


@settings(max_examples=60, deadline=None)
@given(m=dims, n=dims, k=dims, r=st.floats(0, 500), rk=st.floats(0, 500), grow=st.floats(1, 100))
def test_shape_efficiency_is_a_monotone_fraction(m: float, n: float, k: float, r: float, rk: float,
                                                 grow: float) -> None:
    e = float(shape_efficiency(m, n, k, r, rk))
    assert 0 < e <= 1
    assert float(shape_efficiency(n, m, k, r, rk)) == pytest.approx(e)           # output dims alike
    for bigger in ((m * grow, n, k), (m, n * grow, k), (m, n, k * grow)):
        assert float(shape_efficiency(*bigger, r, rk)) >= e * (1 - 1e-12)


def test_one_small_dimension_gives_the_half_plateau_ramp() -> None:
    big = 1e12
    for d in (1.0, 16.0, 64.0, 1000.0):
        assert float(shape_efficiency(d, big, big, 16.0, 99.0)) == pytest.approx(d / (d + 16.0))
        assert float(shape_efficiency(big, big, d, 99.0, 30.0)) == pytest.approx(d / (d + 30.0))
    assert float(shape_efficiency(0, 10, 10, 16, 16)) == 0.0


def test_large_gemms_barely_move_and_skinny_ones_hit_the_memory_roofline() -> None:
    params = ComputeParams()
    m, n, k = 2048, 4608, 12288   # GPT-145B QKV at tp 8, 2048 tokens
    ideal = 2.0 * m * n * k / (H100.peak_flops * H100.gemm_efficiency)
    t = float(gemm_time_s(m, n, k, H100, params))
    assert ideal < t - H100.launch_s < 1.02 * ideal
    # One row: bytes of the weight dominate; time = launch + weight bytes / HBM.
    t1 = float(gemm_time_s(1, n, k, H100, params))
    assert t1 == pytest.approx(H100.launch_s + 2.0 * (k + n * k + n) / H100.hbm_Bps)
    assert float(gemm_time_s(0, n, k, H100, params)) == 0.0


def test_backward_of_short_sequences_pays_the_reduction_ramp() -> None:
    from simulator.llm.architecture import ModelSpec
    from simulator.llm.layer_costs import layer_shapes

    model = ModelSpec(name="t", num_layers=1, hidden=256, ffn_hidden=704, num_heads=4, num_kv_heads=4,
                      head_dim=64, vocab=2048, tied_embeddings=False, gated_ffn=True, max_position_embeddings=256)
    layer = layer_shapes(model)[0]
    rates = DeviceRates(peak_flops=6e10, gemm_efficiency=1.0, hbm_Bps=1e13, launch_s=0.0)
    tokens, sq = np.array([64.0, 4096.0]), np.array([64.0**2, 4096.0**2])

    def ratio(ramp_k: float) -> np.ndarray:
        p = ComputeParams(dtype="fp32", activation_bytes=4.0, gemm_ramp_dim=16.0, gemm_ramp_k=ramp_k,
                          flash_attention=False, score_traffic_fwd_bytes=0, score_traffic_bwd_bytes=0,
                          norm_traffic_bytes_per_hidden=0, residual_traffic_bytes_per_hidden=0,
                          gated_act_traffic_bytes_per_ffn=0)
        t = layer_times(layer, 256, 704, True, tokens, sq, tp=1, sp=False, ep=1, rates=rates, params=p)
        return t.bwd_s / t.fwd_s

    # Equal ramps: the three GEMMs of a weight share dims, backward = 2 x forward (attention too).
    assert ratio(16.0) == pytest.approx(2.0, rel=1e-9)
    # A costlier reduction ramp slows the weight gradient (k = tokens) below its forward for short
    # sequences; for long ones the forward's own short reduction (k = hidden) is the slower one.
    r = ratio(100.0)
    assert r[0] > 2.0 > r[1]


def test_tensor_parallel_split_follows_megatron() -> None:
    col, row = Gemm("qkv", 256 * 768, 768), Gemm("o", 256 * 256, 256, split="k")
    assert col.local_dims(4) == (192, 256) and row.local_dims(4) == (256, 64)


def test_replay_prediction_follows_the_fitted_ramps() -> None:
    from simulator.calibration.replay import ReplayConfig, predict_stages
    from simulator.hardware.profiles import DeviceProfile

    base = DeviceProfile(device="cpu", peak_flops={"fp32": 8e10}, gemm_efficiency=0.9, hbm_bw_Bps=1.2e10,
                         hbm_efficiency=1.0, launch_overhead_s=1e-5, gemm_ramp_dim=10.0, gemm_ramp_k=10.0)
    config = ReplayConfig()
    lens = config.response_lengths()
    first = predict_stages(config, base, lens)
    slower = predict_stages(config, base.model_copy(update={"gemm_ramp_k": 100.0}), lens)
    assert slower["train"] > first["train"] and slower["reference"] > first["reference"]
    assert slower["train"] / first["train"] > slower["reference"] / first["reference"]  # weight gradients


def _attention_parts(params: ComputeParams, rates: DeviceRates = H100) -> tuple[float, float]:
    """(forward, backward) attention-core time of one layer: layer_times with and without the
    squared-length work (the GEMMs and the elementwise traffic cancel)."""
    from simulator.llm.architecture import ModelSpec
    from simulator.llm.layer_costs import layer_shapes

    model = ModelSpec(name="t", num_layers=1, hidden=1024, ffn_hidden=4096, num_heads=8, num_kv_heads=8,
                      head_dim=128, vocab=2048, tied_embeddings=False, gated_ffn=False, max_position_embeddings=4096)
    layer = layer_shapes(model)[0]
    tokens = np.array([4096.0])
    with_attn = layer_times(layer, 1024, 4096, False, tokens, tokens**2, tp=1, sp=False, ep=1, rates=rates, params=params)
    without = layer_times(layer, 1024, 4096, False, tokens, 0 * tokens, tp=1, sp=False, ep=1, rates=rates, params=params)
    return float(with_attn.fwd_s[0] - without.fwd_s[0]), float(with_attn.bwd_s[0] - without.bwd_s[0])


@pytest.mark.parametrize("ratio_b", [0.73, 0.5, 0.85])
def test_flash_backward_runs_at_its_own_efficiency_ratio(ratio_b: float) -> None:
    """Backward = factor x (launch + F / (peak x plateau x ratio_b x ramp)) against the forward's
    launch + F / (peak x plateau x ratio_f x ramp): the compute parts stand as ratio_f / ratio_b."""
    p = ComputeParams(flash_backward_efficiency_ratio=ratio_b)
    fwd, bwd = _attention_parts(p)
    launch = H100.launch_s
    assert (bwd / p.flash_backward_factor - launch) / (fwd - launch) == pytest.approx(p.flash_efficiency_ratio / ratio_b)
    same = ComputeParams(flash_backward_efficiency_ratio=None)   # switched off: the forward's ratio
    f0, b0 = _attention_parts(same)
    assert f0 == pytest.approx(fwd) and b0 == pytest.approx(same.flash_backward_factor * f0)


@pytest.mark.parametrize("scale", [0.69, 0.5])
def test_a_devices_flash_scale_rates_both_attention_passes(scale: float) -> None:
    """DeviceSpec.flash_efficiency_scale multiplies both flash ratios: the compute part of each pass
    (time less its launch) stands as 1 / scale against the same device at scale 1."""
    import dataclasses

    p = ComputeParams()
    fwd, bwd = _attention_parts(p)
    f_s, b_s = _attention_parts(p, dataclasses.replace(H100, flash_scale=scale))
    launch = H100.launch_s
    assert (f_s - launch) / (fwd - launch) == pytest.approx(1 / scale)
    assert (b_s / p.flash_backward_factor - launch) / (bwd / p.flash_backward_factor - launch) == pytest.approx(1 / scale)


def test_loss_traffic_is_bytes_per_logit_over_hbm() -> None:
    """The cross-entropy part of the output layer: T x V / tp x loss_traffic_bytes_per_logit / HBM,
    38 of its 52 B in forward (six fp32 passes), 14 in backward; the default is Megatron's unfused
    kernel sequence (52 B)."""
    from simulator.llm.train_compute import logits_times

    tokens = np.array([4096.0, 1000.0])
    base = ComputeParams(loss_traffic_bytes_per_logit=0.0)
    for tp in (1, 4):
        f0, b0 = logits_times(2048, 131072, tokens, tp=tp, rates=H100, params=base)
        f, b = logits_times(2048, 131072, tokens, tp=tp, rates=H100, params=ComputeParams())
        want = tokens * 131072 / tp * 52.0 / H100.hbm_Bps
        np.testing.assert_allclose((f - f0) + (b - b0), want, rtol=1e-12)
        np.testing.assert_allclose(f - f0, want * 38 / 52, rtol=1e-12)


def test_entropy_traffic_is_its_bytes_per_logit_over_hbm() -> None:
    """The entropy over the vocabulary a pass computes adds T x V / tp x its bytes per logit / HBM,
    forward and (in an update whose loss takes it) backward, beside the loss; 0 adds nothing."""
    from simulator.llm.train_compute import logits_times

    tokens = np.array([4096.0, 1000.0])
    base = ComputeParams()
    with_entropy = base.model_copy(update={"entropy_traffic_bytes_per_logit": 24.0,    # as the cost layer sets it
                                           "entropy_backward_traffic_bytes_per_logit": 44.0})
    for tp in (1, 4):
        f0, b0 = logits_times(2048, 131072, tokens, tp=tp, rates=H100, params=base)
        f, b = logits_times(2048, 131072, tokens, tp=tp, rates=H100, params=with_entropy)
        per_byte = tokens * 131072 / tp / H100.hbm_Bps
        np.testing.assert_allclose(f - f0, per_byte * 24.0, rtol=1e-12)
        np.testing.assert_allclose(b - b0, per_byte * 44.0, rtol=1e-12)


def test_a_fused_head_that_keeps_no_logits_projects_them_again_in_the_backward() -> None:
    """logits_recompute: the backward adds the forward's GEMM (the head's projection) to its two."""
    from simulator.llm.train_compute import gemm_time_s, logits_times

    tokens = np.array([4096.0, 1000.0])
    base = ComputeParams()
    f0, b0 = logits_times(2048, 131072, tokens, tp=2, rates=H100, params=base)
    f, b = logits_times(2048, 131072, tokens, tp=2, rates=H100, params=base.model_copy(update={"logits_recompute": True}))
    projection = gemm_time_s(tokens, np.full_like(tokens, 131072 / 2), np.full_like(tokens, 2048.0), H100, base)
    np.testing.assert_array_equal(f, f0)
    np.testing.assert_allclose(b - b0, projection, rtol=1e-12)


@pytest.mark.parametrize("tp, sp", [(1, False), (4, True)])
def test_moe_token_shuffle_is_its_bytes_over_hbm(tp: int, sp: bool) -> None:
    """The MoE permute / chunk sorts / unpermute add tokens x top-k x hidden x bytes (split by TP
    with SP, as the dispatch) over HBM forward, backward_traffic_factor times that backward; a
    dense layer pays nothing."""
    from simulator.llm.architecture import ModelSpec
    from simulator.llm.layer_costs import layer_shapes

    model = ModelSpec(name="t", num_layers=2, hidden=512, ffn_hidden=1024, num_heads=8, num_kv_heads=8,
                      head_dim=64, vocab=2048, num_experts=16, experts_per_token=4, moe_ffn_hidden=256,
                      first_k_dense=1)
    dense, moe = layer_shapes(model)[0], layer_shapes(model)[1]
    assert moe.moe and not dense.moe
    tokens, sq = np.array([512.0, 4096.0]), np.array([512.0**2, 4096.0**2])

    def times(layer, bytes_per_hidden: float):
        p = ComputeParams(moe_permute_traffic_bytes_per_hidden=bytes_per_hidden)
        return layer_times(layer, 512, 1024, True, tokens, sq, tp=tp, sp=sp, ep=4, rates=H100, params=p)

    on, off = times(moe, 16.0), times(moe, 0.0)
    shuffle = tokens * 4 * 512 * 16.0 / tp / H100.hbm_Bps
    assert on.fwd_s - off.fwd_s == pytest.approx(shuffle, rel=1e-9)
    assert on.bwd_s - off.bwd_s == pytest.approx(ComputeParams().backward_traffic_factor * shuffle, rel=1e-9)
    np.testing.assert_array_equal(times(dense, 16.0).fwd_s, times(dense, 0.0).fwd_s)


@pytest.mark.parametrize("model_name", ["qwen2.5-7b", "qwen3-30b-a3b", "deepseek-v3"])
@pytest.mark.parametrize("flash", [True, False])
def test_forward_only_layer_times_are_the_full_calls_forward_floats(model_name: str, flash: bool) -> None:
    """layer_times(backward=False) gives the same forward arrays, bit for bit, and no backward;
    the GEMM sums (add.accumulate over the GEMMs) equal a loop of one roofline call per GEMM."""
    from simulator.llm.architecture import load_model
    from simulator.llm.layer_costs import layer_shapes
    from simulator.llm.train_compute import _gemm_plan, _gemm_sums

    model = load_model(model_name)
    params = ComputeParams(flash_attention=flash)
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 40_000, 37).astype(float)
    sq = tokens * rng.integers(1, 4096, 37)
    for layer in {id(s): s for s in layer_shapes(model)}.values():
        kwargs = {"tp": 4, "sp": True, "ep": 2, "rates": H100, "params": params, "etp": 1}
        full = layer_times(layer, int(model.hidden), int(model.ffn_hidden), True, tokens, sq, **kwargs)
        fwd = layer_times(layer, int(model.hidden), int(model.ffn_hidden), True, tokens, sq, backward=False, **kwargs)
        assert fwd.bwd_s is None and full.bwd_s is not None
        assert fwd.fwd_s.tobytes() == full.fwd_s.tobytes() and fwd.attn_fwd_s.tobytes() == full.attn_fwd_s.tobytes()
        plan = _gemm_plan(layer, 4, 2, 1)
        rows = np.where(plan.expert[:, None], tokens * 0.37, tokens)
        f_ref, b_ref = np.zeros(tokens.size), np.zeros(tokens.size)
        for g, count in enumerate(plan.count):
            n, k = plan.n_dim[g], plan.k_dim[g]
            f_ref = f_ref + count * gemm_time_s(rows[g], n, k, H100, params)
            b_ref = b_ref + count * (gemm_time_s(rows[g], k, n, H100, params) + gemm_time_s(k, n, rows[g], H100, params))
        f_got, b_got = _gemm_sums(plan, rows, H100, params, backward=True)
        assert f_got.tobytes() == f_ref.tobytes() and b_got.tobytes() == b_ref.tobytes()
        assert _gemm_sums(plan, rows, H100, params, backward=False)[0].tobytes() == f_ref.tobytes()


@pytest.mark.parametrize("tp", [1, 4])
def test_rope_traffic_is_its_rotated_elements_over_hbm(tp: int) -> None:
    """RoPE's unfused traffic adds tokens x (query + key heads) x head dim x bytes / tp over HBM
    forward (MLA: every query head's and the shared key's rope part), backward_traffic_factor times
    that backward; learned absolute positions rotate nothing."""
    from simulator.llm.architecture import ModelSpec, load_model
    from simulator.llm.layer_costs import layer_shapes

    gqa = layer_shapes(load_model("qwen2.5-7b"))[0]
    mla = layer_shapes(load_model("deepseek-v3"))[0]
    gpt = layer_shapes(ModelSpec(name="t", num_layers=1, hidden=256, ffn_hidden=1024, num_heads=4, num_kv_heads=4,
                                 head_dim=64, vocab=2048, max_position_embeddings=256))[0]
    assert gqa.rope_elements == (28 + 4) * 128 and mla.rope_elements == (128 + 1) * 64 and gpt.rope_elements == 0
    tokens, sq = np.array([512.0, 4096.0]), np.array([512.0**2, 4096.0**2])

    def times(bytes_per_element: float):
        p = ComputeParams(rope_traffic_bytes_per_element=bytes_per_element)
        return layer_times(gqa, 3584, 18944, True, tokens, sq, tp=tp, sp=False, ep=1, rates=H100, params=p)

    on, off = times(20.0), times(0.0)
    rope = tokens * (28 + 4) * 128 * 20.0 / tp / H100.hbm_Bps
    assert on.fwd_s - off.fwd_s == pytest.approx(rope, rel=1e-9)
    assert on.bwd_s - off.bwd_s == pytest.approx(ComputeParams().backward_traffic_factor * rope, rel=1e-9)


def test_hf_transformers_stack_prices_the_unfused_elementwise_ops() -> None:
    """The hf-transformers stack against Megatron-Core's constants, one Qwen2.5-7B layer: the forward
    differs by exactly the extra bytes of transformers' fp32 RMSNorms (2 x 36 against 8), residual
    adds without dropout (12 against 14), SiLU and product (10 against 6 a FFN unit) and unfused RoPE
    (20 a rotated element) over HBM."""
    from simulator.llm.architecture import load_model
    from simulator.llm.layer_costs import layer_shapes
    from simulator.params import HF_TRANSFORMERS, MEGATRON_CORE

    layer = layer_shapes(load_model("qwen2.5-7b"))[0]
    tokens, sq = np.array([4096.0]), np.array([4096.0**2])

    def forward(stack) -> float:
        times = layer_times(layer, 3584, 18944, True, tokens, sq, tp=1, sp=False, ep=1, rates=H100,
                            params=stack.params.compute)
        return float(times.fwd_s[0])

    extra = 4096 * ((72 + 12 - 8 - 14) * 3584 + (10 - 6) * 18944 + 20 * (28 + 4) * 128) / H100.hbm_Bps
    assert forward(HF_TRANSFORMERS) - forward(MEGATRON_CORE) == pytest.approx(extra, rel=1e-9)


def test_a_head_in_another_dtype_runs_its_gemms_at_that_dtypes_peak_and_bytes() -> None:
    """head_dtype fp32 (TRL's cast_lm_head_to_fp32): the output layer's three GEMMs at the device's
    fp32 peak with 4-byte operands; the layers and the loss unchanged."""
    from simulator.hardware.devices import get_device
    from simulator.llm.train_compute import gemm_time_s, logits_times
    from simulator.llm.training import rates_for
    from simulator.params import TrainParams

    h100 = get_device("h100")
    plain = TrainParams()
    fp32 = plain.model_copy(update={"compute": plain.compute.model_copy(update={"head_dtype": "fp32"})})
    rates, head = rates_for(h100, plain), rates_for(h100, fp32)
    assert head.head_peak_flops == h100.peak("fp32") and head.head_elem_bytes == 4 and rates.head_peak_flops is None
    tokens = np.array([4096.0])
    f, b = logits_times(2048, 131072, tokens, tp=1, rates=head, params=fp32.compute)
    f0, b0 = logits_times(2048, 131072, tokens, tp=1, rates=rates, params=plain.compute)
    at_fp32 = DeviceRates(peak_flops=h100.peak("fp32"), gemm_efficiency=rates.gemm_efficiency, hbm_Bps=rates.hbm_Bps,
                          launch_s=rates.launch_s)
    shapes = {"forward": (tokens, [131072.0], [2048.0]), "data": (tokens, [2048.0], [131072.0]),
              "weight": ([2048.0], [131072.0], tokens)}
    extra = {name: float(gemm_time_s(*map(np.asarray, dims), at_fp32, plain.compute, elem_bytes=4)[0]
                         - gemm_time_s(*map(np.asarray, dims), rates, plain.compute)[0]) for name, dims in shapes.items()}
    assert (f - f0)[0] == pytest.approx(extra["forward"], rel=1e-9)
    assert (b - b0)[0] == pytest.approx(extra["data"] + extra["weight"], rel=1e-9)
    assert extra["forward"] > 5 * float(gemm_time_s(*map(np.asarray, shapes["forward"]), rates, plain.compute)[0])


@pytest.mark.parametrize("tp, ep", [(2, 4), (4, 8)])
def test_moe_folding_moves_expert_rows_not_expert_flops(tp, ep):
    """Under MoE parallel folding a device's expert GEMMs take tokens x ep x k / E x etp / tp rows of
    weights split etp ways, so their FLOPs do not depend on etp (an audit's mutation dropping
    etp / tp from the rows passed every test: etp < tp multiplied the expert compute by tp / etp)."""
    import numpy as np

    from simulator.llm.architecture import load_model
    from simulator.llm.layer_costs import layer_shapes
    from simulator.llm.train_compute import _expert_rows, _gemm_plan

    layer = next(shape for shape in layer_shapes(load_model("qwen3-30b-a3b")) if shape.moe)
    tokens = np.array([4096.0])
    flops = {}
    for etp in (1, tp):
        plan = _gemm_plan(layer, tp, ep, etp)
        rows = _expert_rows(plan, layer, tokens, tp, ep, etp)[:, 0]
        assert np.allclose(rows[plan.expert], 4096 * ep * layer.experts_per_token / layer.num_experts * etp / tp)
        flops[etp] = float(np.sum((2 * rows * plan.n_dim * plan.k_dim * plan.count)[plan.expert]))
    assert flops[1] == pytest.approx(flops[tp], rel=1e-12)
