"""Gated DeltaNet linear-attention layers (Qwen3-Next: ModelSpec.linear_layers) in closed form: the
config read, the parameters and state, the layers' shapes, the engine's state and decode, a training
step and a whole run."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import GDN_CHUNK_TOKENS, GDN_RECURRENT_FLOPS_PER_STATE_ELEM, load_model
from simulator.llm.inference import RolloutLayout, StepCost
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.model_presets import PRESETS
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import train_step_cost

NEXT = load_model("qwen3-next-80b-a3b")
HEADS, DK, DV, CONV = 32, 128, 128, 2 * 16 * 128 + 32 * 128


def test_qwen3_next_reads_its_linear_layers_and_counts_its_published_size():
    """Qwen3-Next-80B-A3B (model card: 80B in total, 3B activated): 36 Gated DeltaNet layers, one
    gated attention layer in four; its KV cache on those 12 layers alone."""
    assert NEXT.linear_layers == tuple(i for i in range(48) if (i + 1) % 4)
    assert NEXT.num_attention_layers == 12 and NEXT.attention_output_gate and NEXT.num_shared_experts == 1
    assert NEXT.params_total / 1e9 == pytest.approx(80, rel=0.01)
    non_embedding_active = (NEXT.params_active - NEXT.params_embedding - NEXT.params_lm_head) / 1e9
    assert non_embedding_active == pytest.approx(3, rel=0.1)
    assert NEXT.kv_elems_per_token() == 2 * 12 * 2 * 256
    assert NEXT.ssm_state_elems_per_sequence() == 36 * (HEADS * DK * DV + 3 * CONV)
    # layer_types says the same as full_attention_interval
    cfg = {k: v for k, v in PRESETS["qwen3-next-80b-a3b"].items() if k != "full_attention_interval"}
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
    assert load_model({**cfg, "layer_types": types}) == NEXT.replace(name="custom")


def test_a_linear_layer_has_the_mixers_projections_and_no_attention_core():
    shapes = layer_shapes(NEXT)
    linear, attention = shapes[0], shapes[3]
    assert linear.attn_heads == 0 and {g.name for g in linear.gemms} >= {"gdn_in", "gdn_out", "expert_up"}
    assert attention.attn_heads == 16 and "qkv" in {g.name for g in attention.gemms}
    qkv = next(g for g in attention.gemms if g.name == "qkv")
    assert qkv.n_out == (2 * 16 + 2 * 2) * 256    # the output gate's query half
    per_layer = HEADS * (4.0 * GDN_CHUNK_TOKENS * (DK + DV) + 6.0 * DK * DV) + 2.0 * 4 * CONV
    assert linear.ssm_flops_per_token == pytest.approx(per_layer)
    assert NEXT.ssm_flops_per_token(recurrent=True) == pytest.approx(
        36 * (GDN_RECURRENT_FLOPS_PER_STATE_ELEM * HEADS * DK * DV + 2.0 * 4 * CONV))


def test_missing_linear_keys_are_named():
    cfg = {k: v for k, v in PRESETS["qwen3-next-80b-a3b"].items() if k != "linear_num_value_heads"}
    with pytest.raises(RlsimError, match="linear_num_value_heads") as err:
        load_model(cfg)
    assert err.value.field == "linear_num_value_heads"
    with pytest.raises(RlsimError, match="not a multiple"):
        load_model({**PRESETS["qwen3-next-80b-a3b"], "linear_num_value_heads": 24, "linear_num_key_heads": 16})


@pytest.mark.parametrize("tp, ep", [(2, 1), (4, 1), (1, 4)])
def test_the_engine_keeps_a_state_a_sequence_and_reads_it_each_step(tp, ep):
    """A sequence's 36 layers of state (bf16, split over TP), reserved for max_num_seqs as vLLM's
    Mamba-style cache is, read and written every decode step (a replica's sequences on a device)."""
    layout = RolloutLayout(tp=tp, ep=ep, max_num_seqs=64)
    cost = StepCost(NEXT, get_device("h200"), layout)
    state = 36 * (HEADS * DK * DV + 3 * CONV) * 2 / tp
    assert cost.state_bytes_per_seq_dev == pytest.approx(state)
    assert cost.decode_seq_read_s == pytest.approx(2 * state / cost.bw / ep)
    n, context = 32, 32 * 4000.0
    _, _, m0, _, _ = cost.decode_lines(n, context)
    assert m0 == pytest.approx(cost.weight_read_s(n) + n * 2 * state / cost.bw / ep + cost.kv_s_per_token * context)


def test_a_training_step_and_its_flops_count_the_delta_rule():
    topology = load_topology({"preset": "dgx-h100", "nodes": 1})
    small = load_model({**PRESETS["qwen3-next-80b-a3b"], "num_hidden_layers": 8, "num_experts": 64})
    layout = TrainLayout.from_mapping({"tp": 1, "ep": 8, "zero": 1, "recompute": "full", "micro_batch": 1})
    lengths = np.full(32, 2048)
    step = train_step_cost(small, layout, topology, list(range(8)), lengths, packing="packed")
    assert step.step_time_s > 0
    # model FLOPs: 6 N + 3 x (attention on 2 layers + the delta rule on 6) a token, PaLM's count
    per_token = small.train_flops_per_token(2048.0)
    assert per_token == pytest.approx(6 * small.params_compute + 3 * small.attention_flops_per_context_token() * 2048
                                      + 3 * small.linear_flops_per_token())
    assert small.attention_flops_per_context_token() == pytest.approx(2 * 2 * 16 * (256 + 256))


def test_a_whole_run_of_a_small_qwen3_next(tmp_path):
    import json

    from simulator.api import simulate

    config = tmp_path / "qwen3-next-small" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({**PRESETS["qwen3-next-80b-a3b"], "num_hidden_layers": 8, "num_experts": 64}))
    summary = simulate({"topology": {"preset": "dgx-h100", "nodes": 1}, "schedule": "colocated", "iterations": 2,
                        "workload": {"model": str(config), "algorithm": "grpo", "prompts_per_step": 8,
                                     "samples_per_prompt": 4, "reference": False,
                                     "response_length": {"dist": "lognormal", "median": 1000, "sigma": 0.5, "max": 4000},
                                     "rollout_layout": {"tp": 1}, "train_layout": {"tp": 1, "ep": 8, "zero": 1,
                                                                                   "recompute": "full", "micro_batch": 1}}},
                       keep_samples=False).summary
    assert summary["stage_time_s"]["generate"] > 0 and summary["stage_time_s"]["train_actor"] > 0
