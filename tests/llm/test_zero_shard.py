"""ZeRO state sharded inside groups of train_layout.zero_shard_size ranks and replicated across them
(PyTorch HSDP / verl fsdp_size, Megatron-Core's partial distributed optimizer): the layout's
checks, the memory it holds, the collectives it runs, the refit gather it spans."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import MemoryParams, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import (
    TrainParams,
    _Comm,
    _fsdp_layer_comm,
    _groups,
    _stage_params,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams

TWO_NODES = load_topology({"preset": "dgx-h100", "nodes": 2})
QWEN = load_model("qwen2.5-7b")
MOE = load_model("qwen3-30b-a3b")
BIG = 1e15


def test_the_shard_size_must_divide_the_dp_x_cp_ranks_and_its_copies_the_expert_dp_group():
    with pytest.raises(RlsimError) as err:
        TrainLayout(zero=0, zero_shard_size=8)
    assert err.value.field == "train_layout.zero_shard_size" and "zero" in err.value.fix
    with pytest.raises(RlsimError) as err:
        TrainLayout(zero=3, zero_shard_size=0)
    assert err.value.field == "train_layout.zero_shard_size"
    with pytest.raises(RlsimError) as err:
        TrainLayout(zero=3, cp=2, zero_shard_size=16).resolve(24)     # dp 12 x cp 2 = 24 ranks
    assert err.value.field == "workload.train_layout.zero_shard_size" and "divisor of 24" in err.value.fix
    # 4 copies of the state, and an expert-DP group of 16 / 8 = 2 ranks: not divisible
    with pytest.raises(RlsimError) as err:
        TrainLayout(ep=8, etp=1, zero=1, zero_shard_size=4).resolve(16)
    assert err.value.field == "workload.train_layout.zero_shard_size" and "expert-DP" in str(err.value)
    lay = TrainLayout(ep=8, etp=1, zero=1, zero_shard_size=8).resolve(32)
    assert (lay.zero_shard, lay.zero_replicas, lay.expert_dp, lay.expert_zero_shard) == (8, 4, 4, 1)
    assert lay.as_dict()["zero_shard_size"] == 8
    assert "zero_shard_size" not in TrainLayout(dp=8).as_dict()
    assert TrainLayout.from_mapping({"zero": 3, "zero_shard_size": "auto"}).zero_shard_size is None
    full = TrainLayout(dp=16, cp=2, zero=3)
    assert (full.zero_shard, full.zero_replicas, full.expert_zero_shard) == (32, 1, 32)


@settings(max_examples=30, deadline=None)
@given(zero=st.sampled_from([1, 2, 3]), copies=st.sampled_from([1, 2, 4, 8]), shard=st.sampled_from([1, 2, 4, 8]))
def test_a_device_holds_the_states_of_a_fully_sharded_job_of_the_shard_size(zero, copies, shard):
    """The states of dp = shard x copies with zero_shard_size = shard are those of dp = shard
    fully sharded (the same 1 / shard of each sharded state); activations do not depend on it."""
    hsdp = memory_per_device(QWEN, TrainLayout(dp=shard * copies, zero=zero, zero_shard_size=shard), 2048, BIG)
    alone = memory_per_device(QWEN, TrainLayout(dp=shard, zero=zero), 2048, BIG)
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "gathered_bytes"):
        assert getattr(hsdp, part) == pytest.approx(getattr(alone, part), rel=1e-12)


def test_moe_expert_states_shard_over_the_expert_dp_group_split_into_the_same_copies():
    # dp 32, ep 8, etp 1: expert-DP 4; shard 8 -> 4 copies -> expert state whole on each of its 1 rank
    # (as dp 8 alone: dense over 8, experts over an expert-DP group of 1)
    sharded = memory_per_device(MOE, TrainLayout(dp=32, ep=8, etp=1, zero=1, zero_shard_size=8), 2048, BIG)
    alone = memory_per_device(MOE, TrainLayout(dp=8, ep=8, etp=1, zero=1), 2048, BIG)
    full = memory_per_device(MOE, TrainLayout(dp=32, ep=8, etp=1, zero=1), 2048, BIG)
    assert sharded.optimizer_bytes == pytest.approx(alone.optimizer_bytes, rel=1e-12)
    assert sharded.optimizer_bytes > full.optimizer_bytes
    # dp 64, shard 32: 2 copies; expert-DP 8 split into 2 copies of 4
    lay = TrainLayout(dp=64, ep=8, etp=1, zero=1, zero_shard_size=32)
    assert lay.expert_zero_shard == 4
    assert memory_per_device(MOE, lay, 2048, BIG).optimizer_bytes == pytest.approx(
        memory_per_device(MOE, TrainLayout(dp=32, ep=8, etp=1, zero=1), 2048, BIG).optimizer_bytes, rel=1e-12)


def test_fsdp_per_layer_comm_gathers_in_the_shard_group_and_all_reduces_the_shard_across_copies():
    net = CollectiveModel(TWO_NODES)
    layer = layer_shapes(QWEN)[0]
    n, gb = layer.dense_params, CommParams().grad_reduce_bytes_per_param
    params = TrainParams(comm=CommParams(fsdp_gather_overlap_fraction=0.0, fsdp_reduce_overlap_fraction=0.0))
    lay = TrainLayout(dp=16, zero=3, zero_shard_size=8)
    gather, reduce = _fsdp_layer_comm(layer, lay, _groups(lay, tuple(range(16))), 0, _Comm(net), params)
    node = list(range(8))
    assert gather == pytest.approx(net.cost("all_gather", node, n * 2.0).time_s, rel=1e-12)
    assert reduce == pytest.approx(net.cost("reduce_scatter", node, n * gb).time_s
                                   + net.cost("all_reduce", [0, 8], n * gb / 8).time_s, rel=1e-12)
    # a shard group of the whole dp x cp group is the fully sharded job, to the bit
    whole = TrainLayout(dp=16, zero=3, zero_shard_size=16)
    flat = TrainLayout(dp=16, zero=3)
    assert _fsdp_layer_comm(layer, whole, _groups(whole, tuple(range(16))), 0, _Comm(net), params) == \
        _fsdp_layer_comm(layer, flat, _groups(flat, tuple(range(16))), 0, _Comm(net), params)


def test_zero1_sync_and_optimizer_follow_the_shard_group():
    """ZeRO-1 with no overlap: the exposed DP time is the shard group's reduce-scatter and weight
    all-gather plus the copies' all-reduce of a shard; the optimizer updates 1 / shard of the model."""
    net = CollectiveModel(TWO_NODES)
    params = TrainParams(comm=CommParams(dp_overlap_fraction=0.0, grad_norm_all_reduce=False))
    seqs = uniform_sequences(32, 1024)
    lay = TrainLayout(dp=16, zero=1, recompute="full", zero_shard_size=8)
    hsdp = train_step_cost(QWEN, lay, TWO_NODES, sequences=seqs, params=params)
    flat = train_step_cost(QWEN, dataclasses.replace(lay, zero_shard_size=None), TWO_NODES, sequences=seqs,
                           params=params)
    (dense, _), = _stage_params(QWEN, lay)          # layers, embedding and head (no final norm)
    n, gb = dense, CommParams().grad_reduce_bytes_per_param
    node = list(range(8))
    expected = (net.cost("reduce_scatter", node, n * gb).time_s + net.cost("all_reduce", [0, 8], n * gb / 8).time_s
                + net.cost("all_gather", node, n * 2.0).time_s)
    assert hsdp.comm_exposed_s["dp"] == pytest.approx(expected, rel=1e-9)
    assert hsdp.optimizer_s == pytest.approx(2 * flat.optimizer_s, rel=1e-12)
    assert hsdp.compute_s == pytest.approx(flat.compute_s, rel=1e-12)


def test_without_reshard_after_forward_the_backward_gathers_nothing_and_every_layer_stays_whole():
    """FSDP2 reshard_after_forward=False (memory.zero3_reshard_after_forward): one all-gather per
    layer and micro-batch (the forward's) instead of two, and at the backward's peak the stage's
    every layer is whole beside the computing layer's gradient and the root unit."""
    from simulator.llm.layer_costs import embedding_params
    from simulator.params import MemoryParams

    one_node = load_topology({"preset": "dgx-h100", "nodes": 1})
    lay, seqs = TrainLayout(dp=8, zero=3, recompute="full"), uniform_sequences(32, 1024)
    comm = CommParams(fsdp_gather_overlap_fraction=0.0, fsdp_reduce_overlap_fraction=1.0, grad_norm_all_reduce=False)
    resharded = train_step_cost(QWEN, lay, one_node, sequences=seqs, params=TrainParams(comm=comm))
    kept = train_step_cost(QWEN, lay, one_node, sequences=seqs,
                           params=TrainParams(comm=comm, memory=MemoryParams(zero3_reshard_after_forward=False)))
    net, ranks = CollectiveModel(one_node), list(range(8))
    outer = sum(embedding_params(QWEN))      # the root unit, synced once after the flush
    after_flush = (net.cost("reduce_scatter", ranks, outer * CommParams().grad_reduce_bytes_per_param).time_s
                   + net.cost("all_gather", ranks, outer * 2.0).time_s)
    assert resharded.comm_exposed_s["dp"] - after_flush == pytest.approx(
        2 * (kept.comm_exposed_s["dp"] - after_flush), rel=1e-9)
    assert kept.step_time_s < resharded.step_time_s
    layer = layer_shapes(QWEN)[0].dense_params
    whole = memory_per_device(QWEN, TrainLayout(dp=8, zero=3), 2048, BIG,
                              params=MemoryParams(zero3_reshard_after_forward=False)).gathered_bytes
    assert whole == pytest.approx(2.0 * ((QWEN.num_layers + 1) * layer + 2 * outer), rel=1e-12)


def test_fsdp_cpu_offload_streams_the_shards_and_steps_on_the_host():
    """offload.fsdp_cpu_offload (FSDP2 CPUOffloadPolicy): no sharded state on the device; per
    micro-batch each layer's fp32 shard comes in before each of its two all-gathers and its reduced
    gradient shard goes out, hidden as the gathers / reduce-scatters are; AdamW runs on the CPU."""
    from simulator.llm.training import fsdp_cpu_offload_s, offload_Bps
    from simulator.params import HOST_ADAM_LOOP_PARAMS_PER_S, OffloadParams

    one_node = load_topology({"preset": "dgx-h100", "nodes": 1})
    lay, seqs = TrainLayout(dp=8, zero=3, recompute="full", micro_batch=1), uniform_sequences(32, 1024)
    comm = CommParams(fsdp_gather_overlap_fraction=0.5, fsdp_reduce_overlap_fraction=0.75)
    on = TrainParams(comm=comm, offload=OffloadParams(fsdp_cpu_offload=True))
    step = train_step_cost(QWEN, lay, one_node, sequences=seqs, params=on)
    base = train_step_cost(QWEN, lay, one_node, sequences=seqs, params=TrainParams(comm=comm))
    states = memory_per_device(QWEN, lay, 1024, BIG)
    host = offload_Bps(one_node, list(range(8)), on)
    held, trained = states.weights_bytes / 2.0, states.gradients_bytes / 4.0
    micro_batches = 32 // 8
    copies = micro_batches * (2 * held * 4.0 / host * 0.5 + trained * 4.0 / host * 0.25)
    host_step = trained / HOST_ADAM_LOOP_PARAMS_PER_S
    assert fsdp_cpu_offload_s(states, lay, micro_batches, host, on) == pytest.approx((copies, host_step), rel=1e-12)
    assert step.offload_s == pytest.approx(copies + host_step, rel=1e-9)
    assert step.optimizer_s == 0.0 and base.optimizer_s > 0
    assert step.memory.weights_bytes == step.memory.gradients_bytes == step.memory.optimizer_bytes == 0.0
    assert step.memory.gathered_bytes == base.memory.gathered_bytes
    with pytest.raises(ValueError, match="per-phase"):
        OffloadParams(fsdp_cpu_offload=True, optimizer=True)
    with pytest.raises(ValueError, match="fsdp_cpu_offload"):
        OffloadParams(host_adam_loop_params_per_s=1e9)


@settings(max_examples=20, deadline=None)
@given(zero=st.sampled_from([1, 2, 3]), dp=st.sampled_from([8, 16, 32]))
def test_a_smaller_shard_group_holds_at_least_as_much_state(zero, dp):
    sizes = [size for size in (1, 2, 4, 8, 16, 32) if dp % size == 0]
    totals = [memory_per_device(QWEN, TrainLayout(dp=dp, zero=zero, zero_shard_size=size), 2048, BIG).total_bytes
              for size in sizes]
    assert all(a >= b for a, b in zip(totals, totals[1:], strict=False))


def test_a_moe_optimizer_step_updates_its_dense_and_expert_shards_apart():
    """dp 16, ep 8 (expert-DP 2), shard 8: each device updates 1/8 of the dense parameters and 1/1 of
    its experts (2 copies of the expert-DP group), at the optimizer's bytes per parameter over the
    HBM (one shard for both, an audit's mutation, passed: no test had a MoE optimizer step)."""
    from simulator.llm.training import rates_for
    lay = TrainLayout(dp=16, ep=8, etp=1, zero=1, recompute="full", zero_shard_size=8)
    assert (lay.zero_shard, lay.expert_zero_shard) == (8, 1)
    params = TrainParams()
    cost = train_step_cost(MOE, lay, TWO_NODES, sequences=uniform_sequences(16, 1024), params=params)
    (dense, expert), = _stage_params(MOE, lay)
    assert dense > 0 and expert > 0
    rates = rates_for(TWO_NODES.device_spec(0), params)
    expected = (dense / 8 + expert / 1) * params.comm.optimizer_traffic_bytes_per_param / rates.hbm_Bps
    assert cost.optimizer_s == pytest.approx(expected, rel=1e-12)


def test_fsdp_cpu_offload_copies_the_same_parameters_whatever_the_shards_dtype():
    """The shards' parameter count (fsdp_cpu_offload_s reads it back from the resident bytes) does
    not change with an fp32 master shard: its host copies are priced at host_param_bytes_per_param."""
    from simulator.llm.training import fsdp_cpu_offload_s
    from simulator.params import OffloadParams

    lay = TrainLayout(dp=8, zero=3, recompute="full", micro_batch=1)
    offload = OffloadParams(fsdp_cpu_offload=True)
    fp32 = MemoryParams(resident_weight_bytes_per_param=4.0, optimizer_bytes_per_param=8.0)
    bf16_states = memory_per_device(QWEN, lay, 1024, BIG)
    fp32_states = memory_per_device(QWEN, lay, 1024, BIG, params=fp32)
    assert fp32_states.weights_bytes == pytest.approx(2 * bf16_states.weights_bytes, rel=1e-12)
    assert fsdp_cpu_offload_s(fp32_states, lay, 4, 50e9, TrainParams(offload=offload, memory=fp32)) == pytest.approx(
        fsdp_cpu_offload_s(bf16_states, lay, 4, 50e9, TrainParams(offload=offload)), rel=1e-12)
