"""FSDP2 stages under torch.distributed.pipelining (memory.zero3_sync_last_micro_batch_only, the
areal-archon stack's): every backward but a stage's last keeps its layers gathered and its gradients
unsharded (torch 2.13 pipelining/stage.py backward_maybe_with_nosync), the reduce-scatter runs once
after the last (perform_reduce_grad); without resharding after the forward one gather a step."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import MemoryParams, layout_stage_layers, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import (
    TrainParams,
    _fsdp_layer_comm,
    _pool_setup,
    _stage_arrays,
    fsdp_cpu_offload_s,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import AREAL_ARCHON, CommParams, OffloadParams

ONE_NODE = load_topology({"preset": "dgx-h100", "nodes": 1})
QWEN = load_model("qwen2.5-7b")
BIG = 1e15
HIDDEN_NONE = CommParams(fsdp_gather_overlap_fraction=0.0, fsdp_reduce_overlap_fraction=0.0)


def _params(once: bool, reshard: bool) -> TrainParams:
    memory = MemoryParams(zero3_reshard_after_forward=reshard, zero3_sync_last_micro_batch_only=once)
    return TrainParams(comm=HIDDEN_NONE, memory=memory)


def _dp_rows(layout: TrainLayout, params: TrainParams, replicas: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed dp comm of every virtual stage and micro-batch (the concatenated replicas)."""
    ranks = list(range(layout.devices))
    _, rates, comm, groups = _pool_setup(layout, ONE_NODE, ranks, params, CollectiveModel(ONE_NODE))
    n = sum(replicas)
    arrays = _stage_arrays(QWEN, layout, np.full(n, 1024.0), np.full(n, 1024.0 ** 2), groups, comm, rates, params,
                           replica_sizes=replicas)
    full = _stage_arrays(QWEN, layout, np.full(n, 1024.0), np.full(n, 1024.0 ** 2), groups, comm, rates, params,
                         forward_only=True, replica_sizes=replicas)
    return full.fwd_comm, arrays.comm["dp"]


def _stage_sync(layout: TrainLayout, stage: int, params: TrainParams) -> tuple[float, float]:
    """One gather and one reduce-scatter of the stage's layers (_fsdp_layer_comm summed)."""
    ranks = list(range(layout.devices))
    _, _, comm, groups = _pool_setup(layout, ONE_NODE, ranks, params, CollectiveModel(ONE_NODE))
    shapes = layer_shapes(QWEN)
    layers = layout_stage_layers(QWEN.num_layers, layout)[stage]
    pairs = [_fsdp_layer_comm(shapes[i], layout, groups, stage, comm, params) for i in layers]
    return sum(g for g, _ in pairs), sum(r for _, r in pairs)


def test_under_pipelines_a_stage_gathers_once_and_reduce_scatters_once_a_step():
    """m micro-batches a replica at pp 2: the stage's FSDP comm is one gather (the first forward) and one
    reduce-scatter (the last backward) of its layers, not m of each; every replica alike."""
    layout, m = TrainLayout(dp=4, pp=2, zero=3, recompute="full"), 6
    fwd, dp = _dp_rows(layout, _params(once=True, reshard=False), [m] * 4)
    for stage in range(2):
        gather, reduce = _stage_sync(layout, stage, _params(True, False))
        for r in range(4):
            cols = slice(r * m, (r + 1) * m)
            assert fwd[stage, cols].tolist() == pytest.approx([gather] + [0.0] * (m - 1), rel=1e-12)
            # the comm rows: the forward's gather with the backward's reduce-scatter
            assert dp[stage, cols].sum() == pytest.approx(gather + reduce, rel=1e-12)
            assert dp[stage, cols][-1] == pytest.approx(reduce, rel=1e-12)
    off, dp_off = _dp_rows(layout, _params(once=False, reshard=False), [m] * 4)
    assert dp_off.sum() == pytest.approx(m * dp.sum(), rel=1e-12)


def test_resharded_after_the_forward_only_the_reduce_scatter_is_once():
    """zero3_reshard_after_forward true beside it: the forward's and the backward's gathers every
    micro-batch (as without pipelines), the reduce-scatter once."""
    layout, m = TrainLayout(dp=4, pp=2, zero=3, recompute="full"), 4
    _, once = _dp_rows(layout, _params(once=True, reshard=True), [m] * 4)
    _, every = _dp_rows(layout, _params(once=False, reshard=True), [m] * 4)
    gather, reduce = _stage_sync(layout, 0, _params(True, True))
    assert every[0, :m].sum() == pytest.approx(m * (2 * gather + reduce), rel=1e-12)
    assert once[0, :m].sum() == pytest.approx(m * 2 * gather + reduce, rel=1e-12)


def test_at_pp_1_the_switch_changes_nothing():
    """No pipeline: FSDP's per-micro-batch collectives, to the bit, and the same memory."""
    layout, seqs = TrainLayout(dp=8, zero=3, recompute="full"), uniform_sequences(32, 1024)
    on = train_step_cost(QWEN, layout, ONE_NODE, sequences=seqs, params=_params(True, False))
    off = train_step_cost(QWEN, layout, ONE_NODE, sequences=seqs, params=_params(False, False))
    assert on.step_time_s == off.step_time_s and on.comm_exposed_s == off.comm_exposed_s
    assert on.memory == off.memory


def test_a_pipelined_step_holds_the_stage_s_unsharded_gradients_in_the_reduce_dtype():
    """Beside the whole layers, the stage's trained parameters' accumulated gradients at
    zero3_accumulated_grad_bytes_per_param (archon's fp32 reduce dtype: 4); one micro-batch accumulates nothing."""
    layout = TrainLayout(dp=4, pp=2, zero=3)
    on = memory_per_device(QWEN, layout, 2048, BIG, params=_params(True, False).memory, micro_batches=4)
    off = memory_per_device(QWEN, layout, 2048, BIG, params=_params(False, False).memory, micro_batches=4)
    # the heavier stage's trained parameters: its dense layers and its end of the model (embedding or head)
    trained = off.gradients_bytes / MemoryParams().grad_bytes_per_param * 4   # the gradient shard x dp
    assert on.gathered_bytes - off.gathered_bytes == pytest.approx(4.0 * trained, rel=1e-9)
    single = memory_per_device(QWEN, layout, 2048, BIG, params=_params(True, False).memory, micro_batches=1)
    assert single.gathered_bytes == off.gathered_bytes


def test_resharded_after_the_forward_the_stage_still_holds_its_layers_whole():
    """zero3_reshard_after_forward true under the switch: torch's pipelining skips the reshard after each
    backward but the last, so from the first backward every layer of the stage is whole, as without
    resharding after the forward (it held the computing layers alone); one micro-batch: FSDP's own."""
    layout = TrainLayout(dp=4, pp=2, zero=3)
    resharding = memory_per_device(QWEN, layout, 2048, BIG, params=_params(True, True).memory, micro_batches=4)
    whole = memory_per_device(QWEN, layout, 2048, BIG, params=_params(True, False).memory, micro_batches=4)
    assert resharding.gathered_bytes == whole.gathered_bytes
    single = memory_per_device(QWEN, layout, 2048, BIG, params=_params(True, True).memory, micro_batches=1)
    plain = memory_per_device(QWEN, layout, 2048, BIG, params=_params(False, True).memory, micro_batches=1)
    assert single.gathered_bytes == plain.gathered_bytes < whole.gathered_bytes


def test_the_step_gets_faster_and_the_offload_copies_follow_the_collectives():
    layout, seqs = TrainLayout(dp=4, pp=2, zero=3, recompute="full"), uniform_sequences(32, 1024)
    on = train_step_cost(QWEN, layout, ONE_NODE, sequences=seqs, params=_params(True, False))
    off = train_step_cost(QWEN, layout, ONE_NODE, sequences=seqs, params=_params(False, False))
    assert on.comm_exposed_s["dp"] < off.comm_exposed_s["dp"] and on.step_time_s < off.step_time_s
    offload = OffloadParams(fsdp_cpu_offload=True)
    params = _params(True, False).model_copy(update={"offload": offload})
    states = memory_per_device(QWEN, layout, 1024, BIG)
    once, host = fsdp_cpu_offload_s(states, layout, 8, 1e10, params)
    every, _ = fsdp_cpu_offload_s(states, layout, 8, 1e10, _params(False, False).model_copy(update={"offload": offload}))
    assert every == pytest.approx(8 * once, rel=1e-12)


def test_the_archon_stack_sets_it_and_it_is_refused_where_nothing_reads_it():
    assert AREAL_ARCHON.params.memory.zero3_sync_last_micro_batch_only
    with pytest.raises(ValueError, match="zero3_sync_last_micro_batch_only"):
        MemoryParams(zero3_accumulated_grad_bytes_per_param=2.0)
    assert MemoryParams(zero3_sync_last_micro_batch_only=True, zero3_accumulated_grad_bytes_per_param=2.0)
