"""The chunk a state-space layer's chunked scan runs on: a Mamba-2 model's config.json chunk_size
(default SSD_CHUNK_TOKENS), a Gated DeltaNet layer's GDN_CHUNK_TOKENS. It sets the scan's FLOPs
(ModelSpec.ssm_flops_per_token) and the sequence length its kernels' shape ramp is taken at in
training (train_compute.layer_times)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.llm.architecture import GDN_CHUNK_TOKENS, SSD_CHUNK_TOKENS, load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import DeviceRates, layer_times
from simulator.params import ComputeParams

TOY = {"preset": "nemotron-h-8b", "num_hidden_layers": 8, "hybrid_override_pattern": "M-M-M-M-"}
RATES = DeviceRates(peak_flops=1e15, gemm_efficiency=1.0, hbm_Bps=1e13, launch_s=0.0)
PARAMS = ComputeParams()


def _scan_closed_form_s(flops: float, chunk: int) -> float:
    """F / (peak x plateau x flash ratio x shape), the shape ramp of Q.K^T and A.V at a chunk of Q:
    1 / (1 + (2 ramp_dim / Q + (ramp_dim + ramp_k) / Q) / 2)."""
    ramp = 0.5 * (2 * PARAMS.gemm_ramp_dim / chunk) + 0.5 * ((PARAMS.gemm_ramp_dim + PARAMS.gemm_ramp_k) / chunk)
    return flops * (1.0 + ramp) / (RATES.peak_flops * RATES.gemm_efficiency * PARAMS.flash_efficiency_ratio)


def _scan_forward_s(model, tokens: float) -> tuple[float, float]:
    """(the forward time a layer's scan adds, that scan's FLOPs) for the model's first scanning layer."""
    layer = next(x for x in layer_shapes(model) if x.ssm_flops_per_token)
    t, sq = np.array([tokens]), np.array([tokens * 2048.0])

    def fwd(shape) -> float:
        return float(layer_times(shape, model.hidden, model.ffn_hidden, model.gated_ffn, t, sq, tp=1, sp=False,
                                 ep=1, rates=RATES, params=PARAMS, backward=False).fwd_s[0])
    return fwd(layer) - fwd(dataclasses.replace(layer, ssm_flops_per_token=0.0)), tokens * layer.ssm_flops_per_token


def test_a_mamba_models_chunk_is_its_config_chunk_size():
    assert load_model(TOY).ssd_chunk_tokens == SSD_CHUNK_TOKENS == 128
    wide = load_model({**TOY, "chunk_size": 256})
    assert wide.ssd_chunk_tokens == 256
    # 2 H (Q (N + P) + 2 N P) a Mamba layer, beside the conv's 2 x kernel x conv channels
    heads, p, n = wide.mamba_num_heads, wide.mamba_head_dim, wide.ssm_state_size
    conv = 2.0 * wide.mamba_conv_kernel * wide.mamba_conv_dim
    assert wide.ssm_flops_per_token() == 4 * (2.0 * heads * (256 * (n + p) + 2 * n * p) + conv)
    assert wide.ssm_flops_per_token() > load_model(TOY).ssm_flops_per_token()


@pytest.mark.parametrize("chunk", [64, 128, 256])
def test_a_mamba_scan_is_timed_at_its_own_chunk(chunk):
    model = load_model({**TOY, "chunk_size": chunk})
    added, flops = _scan_forward_s(model, 4096.0)
    assert added == pytest.approx(_scan_closed_form_s(flops, chunk), rel=1e-12)


def test_a_gated_deltanet_scan_is_timed_at_its_chunk_not_mambas():
    # it was timed at the Mamba-2 chunk (128): its scan 1.25 / 1.5 of the closed form at 64, i.e. 17% short
    added, flops = _scan_forward_s(load_model("qwen3-next-80b-a3b"), 4096.0)
    assert added == pytest.approx(_scan_closed_form_s(flops, GDN_CHUNK_TOKENS), rel=1e-12)
    assert added > _scan_closed_form_s(flops, SSD_CHUNK_TOKENS)


def test_a_chunk_of_no_tokens_is_refused_at_chunk_size():
    with pytest.raises(RlsimError) as info:
        load_model({**TOY, "chunk_size": 0})
    assert info.value.field == "chunk_size"
