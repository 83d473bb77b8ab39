"""LoRA training (workload.lora): a frozen base takes no weight gradient, gradient sync or optimizer
state; rank-r adapters (A: K x r per sub-matrix, B: r x N) train beside the targeted matmuls."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import embedding_params, layer_shapes, with_lora
from simulator.llm.memory import memory_per_device
from simulator.llm.train_compute import gemm_times
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import TrainParams, rates_for, train_step_cost, uniform_sequences
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams

QWEN = load_model("qwen2.5-7b")          # hidden 3584, 28 heads / 4 KV heads of 128, FFN 18944, untied
NODE = load_topology({"preset": "dgx-h100", "nodes": 1})
BIG = 1e15


def lora(rank: int, targets="all-linear"):
    return SimpleNamespace(rank=rank, targets=targets)


def test_adapters_sit_beside_every_targeted_matmul_with_one_a_per_sub_matrix():
    model = with_lora(QWEN, lora(64))
    h, r, f = 3584, 64, 18944
    qkv_out = (28 + 2 * 4) * 128
    # q, k, v: three A (h x r) and one B (r x 4608); o: h x r, r x h; gate and up: two A, B r x 2f; down
    expected = r * (3 * h + qkv_out) + r * (h + h) + r * (2 * h + 2 * f) + r * (f + h)
    shape = layer_shapes(model)[0]
    assert shape.trainable_dense_params == pytest.approx(expected)
    assert shape.dense_params == pytest.approx(layer_shapes(QWEN)[0].dense_params + expected)
    assert model.params_adapter_active == pytest.approx(28 * expected)
    assert not any(g.trainable for g in shape.gemms if not g.adapter)
    # 4 N + 6 N_adapter: no weight gradient for the frozen base (6 N + ... in full fine-tuning)
    attention = QWEN.train_flops_per_token(1000) - 6 * QWEN.params_compute
    assert model.train_flops_per_token(1000) == pytest.approx(4 * QWEN.params_compute + 6 * 28 * expected + attention)


def test_targets_take_layer_matmuls_or_hugging_face_modules():
    assert with_lora(QWEN, lora(8, ["q_proj", "v_proj"])).adapter_targets == ("qkv",)
    assert with_lora(QWEN, lora(8, ["o", "down_proj"])).adapter_targets == ("o", "mlp_down")
    moe = load_model("qwen3-30b-a3b")
    assert with_lora(moe, lora(8, ["gate_proj", "gate"])).adapter_targets == ("expert_up", "router")
    with pytest.raises(RlsimError) as err:
        with_lora(QWEN, lora(8, ["lm_head"]))
    assert err.value.field == "workload.lora.targets" and "mlp_up" in err.value.fix
    assert with_lora(QWEN, None) is QWEN


def test_a_frozen_matmul_takes_its_data_gradient_and_no_weight_gradient():
    model = with_lora(QWEN, lora(16, ["qkv"]))
    rates = rates_for(NODE.device_spec(0), TrainParams())
    tokens = np.array([4096.0])
    times = gemm_times(layer_shapes(model)[0], tokens, tp=1, ep=1, rates=rates, params=TrainParams().compute)
    base = gemm_times(layer_shapes(QWEN)[0], tokens, tp=1, ep=1, rates=rates, params=TrainParams().compute)
    for name in ("qkv", "o", "mlp_up", "mlp_down"):
        fwd, dgrad, wgrad = times[name]
        assert wgrad[0] == 0.0 and dgrad[0] == base[name][1][0] and fwd[0] == base[name][0][0]
    assert times["qkv.lora_a"][2][0] > 0 and times["qkv.lora_b"][2][0] > 0
    assert "o.lora_a" not in times


def test_gradients_and_optimizer_states_are_the_adapters_and_the_base_is_held_whole():
    model = with_lora(QWEN, lora(64))
    mem = memory_per_device(model, TrainLayout(dp=8, zero=1), 2048, BIG)
    full = memory_per_device(QWEN, TrainLayout(dp=8, zero=1), 2048, BIG)
    adapters = model.params_adapter_active
    assert mem.gradients_bytes == pytest.approx(4.0 * adapters)          # ZeRO-1: every rank's whole gradient
    assert mem.optimizer_bytes == pytest.approx(12.0 * adapters / 8)     # sharded over the 8 ranks
    assert mem.weights_bytes == pytest.approx(full.weights_bytes + 2.0 * adapters)
    assert mem.activations_bytes == pytest.approx(full.activations_bytes)


def test_the_data_parallel_sync_and_the_optimizer_move_the_adapters_only():
    model = with_lora(QWEN, lora(64))
    params = TrainParams(comm=CommParams(dp_overlap_fraction=0.0, grad_norm_all_reduce=False))
    seqs = uniform_sequences(16, 1024)
    lay = TrainLayout(dp=8, zero=1, recompute="full")
    step = train_step_cost(model, lay, NODE, sequences=seqs, params=params)
    full = train_step_cost(QWEN, lay, NODE, sequences=seqs, params=params)
    net, ranks = CollectiveModel(NODE), list(range(8))
    adapters = model.params_adapter_active
    expected = (net.cost("reduce_scatter", ranks, adapters * CommParams().grad_reduce_bytes_per_param).time_s
                + net.cost("all_gather", ranks, adapters * 2.0).time_s)
    assert step.comm_exposed_s["dp"] == pytest.approx(expected, rel=1e-9)
    trained = sum(embedding_params(QWEN)) + sum(s.params for s in layer_shapes(QWEN))
    assert step.optimizer_s == pytest.approx(full.optimizer_s * adapters / trained, rel=1e-9)
    assert step.compute_s < full.compute_s


def test_the_reference_forward_runs_the_base_model():
    from simulator.rl.llm_costs import LlmCosts
    from simulator.scenario import load_scenario

    sc = load_scenario({"workload": "grpo-qwen2.5-7b", "topology": {"preset": "dgx-h100", "nodes": 1}},
                       overrides=["workload.lora={rank: 16}"])
    costs = LlmCosts(sc, load_topology(sc.topology))
    assert costs.models["actor"].adapter_rank == 16 and costs.models["reference"].adapter_rank == 0
    assert costs.models["reference"] == dataclasses.replace(costs.models["actor"], adapter_rank=0, adapter_targets=())
    with pytest.raises(RlsimError) as err:
        load_scenario({"workload": "grpo-qwen2.5-7b"}, overrides=["workload.lora={rank: 0}"])
    assert err.value.field == "workload.lora.rank"


@settings(max_examples=25, deadline=None)
@given(rank=st.sampled_from([4, 16, 64]), zero=st.sampled_from([0, 1, 2, 3]), dp=st.sampled_from([1, 2, 8]),
       targets=st.sampled_from(["all-linear", ["q_proj", "v_proj"], ["down_proj"]]))
def test_lora_never_holds_more_state_than_full_fine_tuning(rank, zero, dp, targets):
    """Adapters far smaller than the base: the frozen base's gradients and optimizer states it no
    longer holds outweigh the adapters' weights and states, at any ZeRO stage and DP size."""
    layout = TrainLayout(dp=dp, zero=zero if dp > 1 else 0)
    full = memory_per_device(QWEN, layout, 2048, BIG)
    adapted = memory_per_device(with_lora(QWEN, lora(rank, targets)), layout, 2048, BIG)
    assert adapted.total_bytes < full.total_bytes
    assert adapted.weights_bytes >= full.weights_bytes     # the base is all there, and the adapters


def test_an_adapter_refit_sends_the_adapters_peft_counts():
    """Qwen2.5-7B, rank 32, all-linear: r x (in + out) over q, k, v, o, gate, up, down in each of 28
    layers (PEFT's count, 80.7M), and a lora_A and a lora_B per module (14 tensors a layer)."""
    from simulator.scenario import LoraSpec

    model = with_lora(load_model("qwen2.5-7b"), LoraSpec(rank=32))
    h, kv, ffn = 3584, 512, 18944
    per_layer = 32 * ((h + h) * 2 + (h + kv) * 2 + (h + ffn) * 3)
    assert model.params_adapter_total == 28 * per_layer == pytest.approx(80.74e6, rel=1e-4)
    assert model.adapter_tensor_count == 28 * 14
    assert load_model("qwen2.5-7b").params_adapter_total == 0


@pytest.mark.parametrize(("override", "field"), [("workload.reference_cpu_offload=true", "workload.reference_cpu_offload"),
                                                 ("schedule.reference_swap_copies=3", "schedule.reference_swap_copies")])
def test_a_lora_reference_is_the_resident_base_and_takes_no_host_copies(override, field, capsys):
    """With workload.lora the reference is the actor's base with its adapters disabled (verl's
    ref_in_actor): a host-resident or swapped reference is refused, naming workload.lora; the CLI
    exits 2 without a traceback."""
    from simulator.cli import main
    from simulator.scenario import load_scenario
    with pytest.raises(RlsimError, match="workload.lora") as err:
        load_scenario(overrides=["workload.lora={rank: 8}", "workload.train_layout.zero=3", override])
    assert err.value.field == field
    load_scenario(overrides=["workload.train_layout.zero=3", override])        # without LoRA: a reference of its own
    assert main(["run", "--set", "workload.lora={rank: 8}", "--set", override, "--iterations", "1"]) == 2
    err_text = capsys.readouterr().err
    assert field in err_text and "workload.lora" in err_text and "Traceback" not in err_text
