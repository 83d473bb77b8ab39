"""The busiest expert-parallel rank paces an MoE layer (llm/expert_load.py, ComputeParams.moe_load_imbalance):
the derived factor against a Monte Carlo of the exact routing law and its limits; a toy MoE layer at a
given factor in closed form (the routed-expert GEMMs and activation, the all-to-alls and expert-TP
gathers at the busiest rank's rows; attention, router and shared experts untouched); the knob's checks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.expert_load import busiest_rank_factor, expected_max_standard_normal, routed_load_factor
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import DeviceRates, gemm_times, layer_times
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import (
    TrainParams,
    _Comm,
    _groups,
    _layer_cost,
    train_step_cost,
    uniform_sequences,
)
from simulator.params import ComputeParams
from simulator.scenario import load_scenario

QWEN_MOE = load_model("qwen3-30b-a3b")   # hidden 2048, top-8 of 128 experts, no shared experts
MOE_LAYER = next(s for s in layer_shapes(QWEN_MOE) if s.moe)
TOKENS = np.array([4096.0, 1024.0])
LATENCY, RATE = 1e-5, 1e11


def _monte_carlo_factor(tokens: int, k: int, experts: int, ep: int, trials: int, seed: int = 0) -> float:
    """E[max over ranks of routed copies] / mean, sampling the exact law: each token's k distinct experts
    of E (a rank's E / ep of them: one multivariate hypergeometric draw a token), seeded."""
    rng = np.random.default_rng(seed)
    per_token = rng.multivariate_hypergeometric([experts // ep] * ep, k, size=(trials, tokens))
    return float(per_token.sum(axis=1).max(axis=1).mean() / (tokens * k / ep))


@pytest.mark.parametrize("tokens, k, experts, ep", [(512, 4, 16, 4), (256, 2, 8, 8), (1024, 8, 128, 8),
                                                    (300, 8, 64, 32)])
def test_the_derived_factor_matches_a_monte_carlo_of_the_exact_law(tokens, k, experts, ep) -> None:
    """The normal approximation (with the exact expected maximum of ep normals) within 5% of the
    excess over 1 a seeded Monte Carlo of the sampling-without-replacement law gives (2000 draws: its
    own standard error is ~2% of the excess)."""
    derived = float(busiest_rank_factor(tokens, k, experts, ep))
    sampled = _monte_carlo_factor(tokens, k, experts, ep, trials=2000)
    assert derived - 1 == pytest.approx(sampled - 1, rel=0.05)


def test_expected_maximum_of_standard_normals_closed_forms() -> None:
    assert expected_max_standard_normal(1) == 0.0
    assert expected_max_standard_normal(2) == pytest.approx(1 / np.sqrt(np.pi), rel=1e-9)
    assert expected_max_standard_normal(3) == pytest.approx(1.5 / np.sqrt(np.pi), rel=1e-9)


def test_the_factors_limits() -> None:
    assert busiest_rank_factor(4096.0, 8, 128, 1) == 1.0   # one rank waits for nobody
    assert busiest_rank_factor(0.0, 8, 128, 8) == 1.0      # nothing routed
    assert busiest_rank_factor(8.0, 8, 8, 4) == 1.0         # every token to every expert: no randomness
    assert busiest_rank_factor(1e14, 8, 128, 8) - 1 < 1e-5  # T -> infinity
    by_ep = [float(busiest_rank_factor(4096.0, 8, 128, ep)) for ep in (1, 2, 4, 8, 16, 32, 64)]
    assert by_ep == sorted(by_ep) and len(set(by_ep)) == len(by_ep)   # grows with ep
    assert routed_load_factor(128, 8, TOKENS, tp=2, ep=1, etp=2, imbalance=None) is None
    assert routed_load_factor(0, 0, TOKENS, tp=1, ep=4, etp=1, imbalance=None) is None
    np.testing.assert_array_equal(routed_load_factor(128, 8, TOKENS, tp=1, ep=4, etp=1, imbalance=1.3), [1.3, 1.3])
    # the EP group routes ep x T x etp / tp tokens together
    np.testing.assert_array_equal(routed_load_factor(128, 8, TOKENS, tp=2, ep=4, etp=1, imbalance=None),
                                  busiest_rank_factor(TOKENS * 4 / 2, 8, 128, 4))


@settings(max_examples=60, deadline=None)
@given(tokens=st.floats(1.0, 1e7), more=st.floats(1.0, 1e3), k=st.integers(1, 8), per_rank=st.integers(1, 16),
       ep=st.sampled_from([2, 4, 8, 16, 64]))
def test_the_factor_is_at_least_one_and_falls_as_tokens_grow(tokens, more, k, per_rank, ep) -> None:
    experts = max(per_rank * ep, k)
    experts += (-experts) % ep
    f = float(busiest_rank_factor(tokens, k, experts, ep))
    assert f >= 1.0
    assert float(busiest_rank_factor(tokens * more, k, experts, ep)) <= f


# A compute-bound device without launches or shape ramp: a GEMM's time is linear in its rows.
LINEAR = DeviceRates(peak_flops=1e15, gemm_efficiency=0.8, hbm_Bps=1e30)
FLAT = dict(gemm_ramp_dim=0.0, gemm_ramp_k=0.0)


def _times(layer, ep: int, imbalance: float | None, tp: int = 1, etp: int = 1, **knobs):
    params = ComputeParams(**FLAT, moe_load_imbalance=imbalance, **knobs)
    return layer_times(layer, QWEN_MOE.hidden, QWEN_MOE.ffn_hidden, True, TOKENS, TOKENS ** 2, tp=tp, sp=tp > 1,
                       ep=ep, etp=etp, rates=LINEAR, params=params)


@pytest.mark.parametrize("factor", [1.25, 2.0])
def test_a_toy_moe_layer_adds_factor_minus_one_of_its_routed_expert_gemms(factor) -> None:
    """At moe_load_imbalance f the layer's forward and backward grow by (f - 1) x its routed-expert
    GEMMs' time at the mean (the GEMMs linear in their rows here) plus (f - 1) x the routed experts'
    SwiGLU traffic; attention, router and elementwise norms unchanged; full recompute repeats the
    forward, so its grows by the same."""
    even = _times(MOE_LAYER, 8, 1.0)
    busy = _times(MOE_LAYER, 8, factor)
    gemms = gemm_times(MOE_LAYER, TOKENS, tp=1, ep=8, rates=LINEAR, params=ComputeParams(**FLAT, moe_load_imbalance=1.0))
    fwd = sum(gemms[name][0] for name in ("expert_up", "expert_down"))
    bwd = sum(gemms[name][1] + gemms[name][2] for name in ("expert_up", "expert_down"))
    routed_units = QWEN_MOE.moe_ffn_hidden * QWEN_MOE.experts_per_token
    act = TOKENS * ComputeParams().gated_act_traffic_bytes_per_ffn * routed_units / LINEAR.hbm_Bps
    np.testing.assert_allclose(busy.fwd_s - even.fwd_s, (factor - 1) * (fwd + act), rtol=1e-9)
    np.testing.assert_allclose(busy.bwd_s - even.bwd_s, (factor - 1) * (bwd + 2.0 * act), rtol=1e-9)
    np.testing.assert_array_equal(busy.attn_fwd_s, even.attn_fwd_s)
    busy_gemms = gemm_times(MOE_LAYER, TOKENS, tp=1, ep=8, rates=LINEAR,
                            params=ComputeParams(**FLAT, moe_load_imbalance=factor))
    for name in ("qkv", "o", "router"):
        np.testing.assert_array_equal(busy_gemms[name][0], gemms[name][0])
    np.testing.assert_allclose(busy_gemms["expert_up"][0], factor * gemms["expert_up"][0], rtol=1e-12)


def test_shared_experts_stay_at_the_mean() -> None:
    """A model with a shared expert (DeepSeek-V3): its GEMMs run over the rank's own tokens."""
    v3 = next(s for s in layer_shapes(load_model("deepseek-v3")) if s.moe)
    even = gemm_times(v3, TOKENS, tp=1, ep=8, rates=LINEAR, params=ComputeParams(**FLAT, moe_load_imbalance=1.0))
    busy = gemm_times(v3, TOKENS, tp=1, ep=8, rates=LINEAR, params=ComputeParams(**FLAT, moe_load_imbalance=1.5))
    np.testing.assert_array_equal(busy["shared_up"][0], even["shared_up"][0])
    np.testing.assert_allclose(busy["expert_down"][1], 1.5 * even["expert_down"][1], rtol=1e-12)


def test_ep_one_or_a_dense_layer_is_byte_identical_whatever_the_knob() -> None:
    dense = layer_shapes(load_model("qwen2.5-7b"))[0]
    for layer, ep in ((MOE_LAYER, 1), (dense, 8)):
        base, knob = _times(layer, ep, None), _times(layer, ep, 3.0)
        np.testing.assert_array_equal(knob.fwd_s, base.fwd_s)
        np.testing.assert_array_equal(knob.bwd_s, base.bwd_s)
    assert not dataclasses.replace(MOE_LAYER, moe=False).moe   # the dense path takes no factor


class _LinearNet:
    """Every collective costs LATENCY + bytes / RATE."""

    def cost(self, op, ranks, nbytes):
        return type("Cost", (), {"time_s": LATENCY + nbytes / RATE})()


def _one(nbytes: np.ndarray) -> np.ndarray:
    return LATENCY + nbytes / RATE


@pytest.mark.parametrize("imbalance", [None, 1.0, 1.4])
def test_the_all_to_alls_and_expert_tp_gathers_move_the_busiest_ranks_rows(imbalance) -> None:
    """tp 2, ep 4, etp 2 (SP): the dispatch + combine all-to-alls of T / tp x k copies x h x 2 bytes and
    the expert-TP gather + scatter of k x A x etp / tp, each x the factor (derived: T x ep x etp / tp
    tokens routed together); attention's TP collectives at the mean."""
    lay = TrainLayout(tp=2, ep=4, etp=2, zero=1).resolve(8)
    params = TrainParams(compute=ComputeParams(moe_load_imbalance=imbalance))
    times = _times(MOE_LAYER, 4, imbalance, tp=2, etp=2)
    cost = _layer_cost(MOE_LAYER, times, QWEN_MOE, lay, TOKENS, _groups(lay, tuple(range(8))), 0,
                       _Comm(_LinearNet()), params)
    f = busiest_rank_factor(TOKENS * 4, 8, 128, 4) if imbalance is None else imbalance
    k, h = QWEN_MOE.experts_per_token, QWEN_MOE.hidden
    np.testing.assert_allclose(cost.fwd_comm["ep"], 2 * _one(TOKENS / 2 * k * h * 2.0 * f), rtol=1e-12)
    a = TOKENS * h * 2.0
    np.testing.assert_allclose(cost.fwd_comm["tp"], 2 * _one(a) + 2 * _one(k * a * f), rtol=1e-12)


def test_the_derived_factor_slows_an_ep_step_and_a_measured_one_more() -> None:
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    seqs = uniform_sequences(16, 2048)
    lay = TrainLayout(tp=2, ep=4, recompute="full", zero=1)

    def step(imbalance: float | None) -> float:
        return train_step_cost(QWEN_MOE, lay, topo, sequences=seqs, packing="packed",
                               params=TrainParams(compute=ComputeParams(moe_load_imbalance=imbalance))).step_time_s

    assert step(1.0) < step(None) < step(1.3)


FIELD = "workload.train_params.compute.moe_load_imbalance"


def _load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated",
                         overrides=["topology.preset=dgx-h100", "topology.nodes=1", *overrides])


def test_the_knob_is_at_least_one() -> None:
    with pytest.raises(ValueError):
        ComputeParams(moe_load_imbalance=0.9)
    with pytest.raises(RlsimError) as exc:
        _load("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", f"{FIELD}=0.5")
    assert exc.value.field == FIELD


def test_the_knob_loads_from_set_under_ep_and_is_refused_without_it_or_without_experts() -> None:
    sc = _load("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", f"{FIELD}=1.2")
    assert sc.workload.train_params.compute.moe_load_imbalance == 1.2
    with pytest.raises(RlsimError) as exc:   # ep 1: no EP rank waits for another
        _load("workload.model=qwen3-30b-a3b", f"{FIELD}=1.2")
    assert exc.value.field == FIELD and "ep above 1" in exc.value.fix
    with pytest.raises(RlsimError) as exc:   # a dense model routes nothing
        _load(f"{FIELD}=1.2")
    assert exc.value.field == FIELD
