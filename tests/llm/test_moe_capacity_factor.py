"""Megatron-Core's token dropping under expert parallelism (ComputeParams.moe_expert_capacity_factor,
moe_pad_expert_input_to_capacity; llm/expert_load.py routed_load_factor): the capacity caps the busiest
EP rank's rows at the factor x the mean, min(derived or measured, factor); padded, every rank computes
the capacity, the factor itself; the knobs' checks."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.llm.architecture import load_model
from simulator.llm.expert_load import busiest_rank_factor, routed_load_factor
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import DeviceRates, gemm_times
from simulator.params import ComputeParams
from simulator.scenario import load_scenario

QWEN_MOE = load_model("qwen3-30b-a3b")   # top-8 of 128 experts
MOE_LAYER = next(s for s in layer_shapes(QWEN_MOE) if s.moe)
TOKENS = np.array([4096.0, 256.0, 16.0])
RATES = DeviceRates(peak_flops=1e15, gemm_efficiency=1.0, hbm_Bps=1e12)


def _factor(**knobs) -> np.ndarray:
    return routed_load_factor(128, 8, TOKENS, tp=1, ep=8, etp=1, **knobs)


def test_the_capacity_caps_the_busiest_rank_and_the_pad_fixes_it_at_the_factor() -> None:
    derived = busiest_rank_factor(TOKENS * 8, 8, 128, 8)
    assert derived[0] < 1.05 < derived[-1]   # thousands of tokens under the cap, a few over it
    np.testing.assert_allclose(_factor(imbalance=None, capacity_factor=1.05), np.minimum(derived, 1.05), rtol=0)
    np.testing.assert_allclose(_factor(imbalance=1.5, capacity_factor=1.2), np.full(3, 1.2), rtol=0)
    np.testing.assert_allclose(_factor(imbalance=1.1, capacity_factor=1.2), np.full(3, 1.1), rtol=0)
    np.testing.assert_allclose(_factor(imbalance=None, capacity_factor=1.3, pad_to_capacity=True), np.full(3, 1.3))
    np.testing.assert_allclose(_factor(imbalance=None, capacity_factor=0.8), np.minimum(derived, 0.8), rtol=0)
    np.testing.assert_array_equal(_factor(imbalance=None), derived)   # dropless: unchanged
    assert routed_load_factor(128, 8, TOKENS, tp=1, ep=1, etp=1, imbalance=None, capacity_factor=1.3,
                              pad_to_capacity=True) is None   # ep 1: the mean (the knobs are refused there)


@pytest.mark.parametrize("capacity, pad, imbalance, same_as", [(1.2, False, 1.5, 1.2), (1.2, False, 1.1, 1.1),
                                                               (1.3, True, 1.1, 1.3)])
def test_the_layers_expert_gemms_run_at_the_capped_rows(capacity, pad, imbalance, same_as) -> None:
    """The capped layer's GEMMs are the layer at a measured imbalance of min(imbalance, capacity) (padded:
    the capacity): the same floats."""
    capped = gemm_times(MOE_LAYER, TOKENS, tp=1, ep=8, rates=RATES, params=ComputeParams(
        moe_load_imbalance=imbalance, moe_expert_capacity_factor=capacity, moe_pad_expert_input_to_capacity=pad))
    plain = gemm_times(MOE_LAYER, TOKENS, tp=1, ep=8, rates=RATES, params=ComputeParams(moe_load_imbalance=same_as))
    for name in plain:
        for got, want in zip(capped[name], plain[name], strict=True):
            np.testing.assert_array_equal(got, want)


FIELD = "workload.train_params.compute.moe_expert_capacity_factor"
PAD = "workload.train_params.compute.moe_pad_expert_input_to_capacity"


def _load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated",
                         overrides=["topology.preset=dgx-h100", "topology.nodes=1", *overrides])


def test_the_knobs_load_under_ep_and_are_refused_without_it_or_a_factor() -> None:
    moe = ["workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2"]
    sc = _load(*moe, f"{FIELD}=1.25", f"{PAD}=true")
    compute = sc.workload.train_params.compute
    assert (compute.moe_expert_capacity_factor, compute.moe_pad_expert_input_to_capacity) == (1.25, True)
    with pytest.raises(RlsimError) as exc:   # the pad without a factor: Megatron-Core refuses it too
        _load(*moe, f"{PAD}=true")
    assert "moe_expert_capacity_factor" in str(exc.value)
    with pytest.raises(RlsimError) as exc:   # ep 1: no busiest rank to cap
        _load("workload.model=qwen3-30b-a3b", f"{FIELD}=1.25")
    assert exc.value.field == FIELD
    with pytest.raises(RlsimError):
        _load(*moe, f"{FIELD}=0")
