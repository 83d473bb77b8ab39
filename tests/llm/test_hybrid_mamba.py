"""Hybrid Mamba-2 / attention models (Nemotron-H): parameter counts, FLOPs as the sum of the block
kinds, KV only for attention layers plus a constant state per sequence, in the inference and the
training cost paths."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutLayout, StepCost
from simulator.llm.layer_costs import layer_shapes

H100 = get_device("h100")
NEMOTRON = load_model("nemotron-h-8b")
# A toy of each kind: 4 Mamba + 4 MLP blocks (pure state-space), and the same with 2 attention blocks.
TOY = {"preset": "nemotron-h-8b", "num_hidden_layers": 8, "hybrid_override_pattern": "M-M-M-M-"}
PURE_SSM = load_model(TOY)
HYBRID = load_model({**TOY, "num_hidden_layers": 10, "hybrid_override_pattern": "M-M*-M-M*-"})


def test_block_counts_and_published_size():
    m = NEMOTRON
    assert (m.num_mamba_layers, m.num_attention_layers, m.num_ffn_layers) == (24, 4, 24)
    assert not m.gated_ffn                           # squared-ReLU FFN: two matrices
    assert m.params_total == pytest.approx(8.0e9, rel=0.02)
    assert load_model("nemotron-h-56b").num_attention_layers == 10


def test_mamba_parameters_closed_form():
    """in_proj h x (2 d_inner + 2 G N + H), conv (d_inner + 2 G N) x (kernel + 1), 3 H, norm d_inner,
    out_proj d_inner x h."""
    m = NEMOTRON
    h, inner, g, n, heads = 4096, 128 * 64, 8, 128, 128
    conv = inner + 2 * g * n
    assert m.mamba_params == h * (2 * inner + 2 * g * n + heads) + conv * 5 + 3 * heads + inner + inner * h


def test_kv_counts_only_attention_layers_and_state_is_per_sequence():
    assert PURE_SSM.kv_bytes_per_token() == 0
    assert HYBRID.kv_bytes_per_token(2) == 2 * 2 * 8 * 128 * 2       # 2 attention layers, 8 KV heads, d 128
    per_layer = 128 * 64 * 128 + 3 * (128 * 64 + 2 * 8 * 128)       # SSM state + conv window
    assert PURE_SSM.ssm_state_elems_per_sequence() == 4 * per_layer
    assert HYBRID.ssm_state_elems_per_sequence() == 4 * per_layer


def test_hybrid_flops_are_the_sum_of_its_layer_kinds():
    """Forward FLOPs per token = 2 x (matrices of each block kind x its count + LM head) + the
    attention pairs of the attention blocks + the scan of the Mamba blocks (conv / norm vectors,
    < 0.1%, are in N but not in the layer shapes)."""
    s = 3000.0
    shapes = layer_shapes(HYBRID)
    kinds = {"M": [x for x in shapes if x.ssm_flops_per_token], "*": [x for x in shapes if x.attn_heads],
             "-": [x for x in shapes if x.has_mlp]}
    assert {k: len(v) for k, v in kinds.items()} == {"M": 4, "*": 2, "-": 4}
    by_kind = sum(x.matmul_flops_per_token() + x.attention_flops_per_token(s) + x.ssm_flops_per_token
                  for x in shapes)
    head = 2.0 * HYBRID.vocab * HYBRID.hidden
    assert HYBRID.forward_flops_per_token(s) == pytest.approx(by_kind + head, rel=1e-3)
    assert HYBRID.attention_flops_per_context_token() == 2 * 2 * 32 * (128 + 128)
    assert HYBRID.train_flops_per_token(s) == pytest.approx(3 * HYBRID.forward_flops_per_token(s))
    assert all(x.tp_reductions == 1.0 for x in shapes)


def test_pure_ssm_decode_step_is_constant_in_context():
    cost = StepCost(PURE_SSM, H100, RolloutLayout())
    assert cost.kv_s_per_token == 0 and cost.decode_attn_s_per_ctx == 0
    assert cost.decode_step_s(64, 0) == cost.decode_step_s(64, 10**7)
    hybrid = StepCost(HYBRID, H100, RolloutLayout())
    assert hybrid.decode_step_s(64, 10**6) > hybrid.decode_step_s(64, 0)   # its attention layers read KV


def test_state_pages_are_drawn_from_the_pool_and_read_every_step():
    layout = RolloutLayout(max_num_seqs=64)
    params = InferenceParams()
    cost = StepCost(HYBRID, H100, layout, params)
    state = HYBRID.ssm_state_elems_per_sequence() * 2
    hbm = H100.hbm_bytes * layout.gpu_memory_utilization
    assert cost.kv_free_bytes_dev == pytest.approx(hbm - HYBRID.weight_bytes(2) - params.workspace_bytes)
    assert cost.kv_capacity_replica == int(cost.kv_free_bytes_dev // HYBRID.kv_bytes_per_token(2))
    # vLLM's groups of 2 layers: the 4 Mamba layers are 2 state groups, each drawing one attention
    # block a sequence, 16 x cdiv(one layer's state, 16 x one token's attention page) tokens
    layer_state, token_page = state / 4, 2 * 8 * 128 * 2
    block = 16 * -(-layer_state // (16 * token_page))
    assert block == 528
    assert cost.seq_kv_tokens == 2 * block
    # The memory line of a decode step: weights + 2 x state per sequence (read + write) + KV.
    _, _, m0, _, _ = cost.decode_lines(32, 0.0)
    assert m0 == pytest.approx(cost.weight_read_s(32) + 32 * 2 * state / cost.bw)


def test_training_path_runs_hybrid_blocks():
    import numpy as np

    from simulator.llm.train_compute import DeviceRates, layer_times
    from simulator.params import ComputeParams

    rates = DeviceRates(peak_flops=989e12, gemm_efficiency=0.75, hbm_Bps=2.68e12)
    shapes = {("ssm" if x.ssm_flops_per_token else "attn" if x.attn_heads else "mlp"): x
              for x in layer_shapes(NEMOTRON)}
    tokens, sq = np.array([4096.0]), np.array([4096.0 * 4096])
    times = {k: layer_times(x, 4096, 21504, False, tokens, sq, tp=1, sp=False, ep=1, rates=rates,
                            params=ComputeParams()) for k, x in shapes.items()}
    for t in times.values():
        assert t.fwd_s[0] > 0 and t.bwd_s[0] > t.fwd_s[0]
    assert times["ssm"].attn_fwd_s[0] == 0 and times["mlp"].attn_fwd_s[0] == 0 and times["attn"].attn_fwd_s[0] > 0


def test_bad_patterns_are_clear():
    with pytest.raises(RlsimError, match="unknown block kind") as info:
        load_model({**TOY, "hybrid_override_pattern": "M-E-M-M-"})
    assert info.value.field == "hybrid_override_pattern"
    with pytest.raises(RlsimError, match="8 layers"):
        load_model({**TOY, "hybrid_override_pattern": "M-M-"})
    with pytest.raises(RlsimError, match="ssm_state_size"):
        load_model({**TOY, "ssm_state_size": 0})


def test_a_pure_state_model_runs_as_many_sequences_as_its_pool_holds_states():
    """No attention layer: a sequence draws no page a token (the token capacity is unbounded) and its
    state a sequence, one group of all 4 Mamba layers; the pool bounds the running sequences."""
    state = PURE_SSM.ssm_state_elems_per_sequence() * 2
    params = InferenceParams()
    roomy = StepCost(PURE_SSM, H100, RolloutLayout(max_num_seqs=256), params)
    assert roomy.seq_kv_tokens == 0 and roomy.max_running == 256   # 256 states fit in tens of GB
    assert roomy.seq_pool_bytes_dev == pytest.approx(state)
    # gpu_memory_utilization leaving room for 10 states beside the weights and workspace
    hbm_share = (PURE_SSM.weight_bytes(2) + params.workspace_bytes + 10.5 * state) / H100.hbm_bytes
    tight = StepCost(PURE_SSM, H100, RolloutLayout(max_num_seqs=256, gpu_memory_utilization=hbm_share), params)
    assert tight.max_running == 10


def test_mamba_cache_dtype_sizes_the_state_and_applies_to_state_models_only():
    bf16 = StepCost(HYBRID, H100, RolloutLayout())
    fp32 = StepCost(HYBRID, H100, RolloutLayout(mamba_cache_dtype="fp32"))
    assert fp32.state_bytes_per_seq_dev == pytest.approx(2 * bf16.state_bytes_per_seq_dev)
    fp32_layer_state = 4 * (HYBRID.ssm_state_elems_per_sequence() // 4)   # 4 bytes an element, 4 Mamba layers
    assert fp32.seq_kv_tokens == 2 * 16 * -(-fp32_layer_state // (16 * 4096)) == 2 * 1056
    assert StepCost(HYBRID, H100, RolloutLayout(kv_dtype="fp8")).state_bytes_per_seq_dev == \
        pytest.approx(bf16.state_bytes_per_seq_dev)   # the KV cache's dtype is not the state's
    with pytest.raises(RlsimError, match="rollout_layout.mamba_cache_dtype.*remove"):
        StepCost(load_model("qwen2.5-7b"), H100, RolloutLayout(mamba_cache_dtype="fp32"))
    with pytest.raises(RlsimError, match="rollout_layout.mamba_cache_dtype.*auto"):
        RolloutLayout.from_mapping({"mamba_cache_dtype": "float64"})
