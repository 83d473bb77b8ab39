"""ZeRO-Offload's device buffer of the largest parameter (deepspeed 0.19.6 runtime/zero/stage_1_and_2.py
__init__ under cpu_offload: temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel) on the GPU in
the model's dtype, kept to the end): memory.zero_offload_device_grad_buffers, MemoryBreakdown
.offload_staging_bytes, ZeRO 1-2 with offload.optimizer only."""
from __future__ import annotations

import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.memory import MemoryParams, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.params import OffloadParams, TrainParams, inapplicable_given_key

QWEN = load_model("qwen2.5-7b")   # untied: a 152064 x 3584 embedding and head
EMBEDDING = 152064 * 3584
BIG = 1e15
OFFLOAD = dict(grad_bytes_per_param=2.0, zero_reduce_bucket_params=5e8, zero_reduce_buckets=2)


def _memory(buffers: int, zero: int, **layout: int):
    host = {"grad_partition_on_host": True} if zero == 2 else {}
    params = MemoryParams(**OFFLOAD, **host, zero_offload_device_grad_buffers=buffers)
    return memory_per_device(QWEN, TrainLayout(zero=zero, recompute="full", **layout), 2048, BIG, params=params,
                             micro_batches=4)


@pytest.mark.parametrize(("zero", "layout", "tensor"), [
    (2, {"dp": 8}, EMBEDDING), (1, {"dp": 8}, EMBEDDING), (2, {"dp": 4, "tp": 2}, EMBEDDING / 2),
    (1, {"dp": 4, "pp": 2}, EMBEDDING)])   # pp 2: the embedding on the first stage, the head on the last
def test_zero_offload_holds_a_buffer_of_the_largest_parameter_on_the_device(zero, layout, tensor):
    """Bytes per GPU = the closed form: 1 x the embedding (or head) per device after TP x 2 B (1.09 GB at
    tp 1), added to the backward's peak, whatever dp; 0 without the key."""
    without, held = _memory(0, zero, **layout), _memory(1, zero, **layout)
    assert without.offload_staging_bytes == 0.0
    assert held.offload_staging_bytes == pytest.approx(2.0 * tensor, rel=1e-12)
    assert held.total_bytes - without.total_bytes == pytest.approx(2.0 * tensor, rel=1e-9)
    assert "ZeRO-Offload's device gradient buffer 1.1 GB" in _memory(1, 2, dp=8).describe()


def test_under_lora_the_buffer_is_of_the_largest_adapter():
    """LoRA trains its adapters alone: the largest trained tensor is rank 32 x the fused gate + up
    projection's 2 x 18944 outputs (lora_b), far below the frozen embedding."""
    from types import SimpleNamespace

    from simulator.llm.layer_costs import with_lora

    lora = with_lora(QWEN, SimpleNamespace(rank=32, targets="all-linear"))
    params = MemoryParams(**OFFLOAD, grad_partition_on_host=True, zero_offload_device_grad_buffers=1)
    held = memory_per_device(lora, TrainLayout(dp=8, zero=2), 2048, BIG, params=params)
    assert held.offload_staging_bytes == pytest.approx(2.0 * 32 * 2 * 18944, rel=1e-12)


def test_the_key_is_zero_offloads_and_of_zero_1_2_alone():
    """Without offload.optimizer no run allocates it; a layout of ZeRO 0 or 3 does not read it (stage3.py
    keeps its offloaded gradient buffers on the host), named by key."""
    memory = MemoryParams(zero_offload_device_grad_buffers=1)
    with pytest.raises(ValueError, match="offload.optimizer: true"):
        TrainParams(memory=memory)
    params = TrainParams(memory=memory, offload=OffloadParams(optimizer=True, scope="optimizer_step"))
    for zero, refused in ((0, True), (1, False), (2, False), (3, True)):
        found = inapplicable_given_key({"zero": zero}, params, TrainParams(), None, False)
        assert (found is not None and found[0] == "workload.train_params.memory.zero_offload_device_grad_buffers"
                and "zero: 1 or 2" in found[2]) == refused, zero


def test_the_hetero_stage_bytes_count_the_buffer_as_the_training_model():
    """plan --balance's memory check (ZeRO 1-2) equals llm/memory.py's with the buffer (pp 1 and 2)."""
    from simulator.planner.hetero import HeteroStepModel

    params = MemoryParams(**OFFLOAD, grad_partition_on_host=True, zero_offload_device_grad_buffers=1)
    train = TrainParams(memory=params, offload=OffloadParams(optimizer=True, scope="optimizer_step"))
    stm = HeteroStepModel(QWEN, load_topology({"preset": "dgx-h100", "nodes": 1}), 2048, 1, train_params=train)
    for pp in (1, 2):
        layers = [QWEN.num_layers // pp] * pp
        mine = stm.stage_memory_bytes(1, pp, 8 // pp, layers, 2, micro_batches=4)
        theirs = memory_per_device(QWEN, TrainLayout(pp=pp, dp=8 // pp, zero=2, recompute="full"), 2048, 80e9,
                                   params=params, micro_batches=4)
        assert max(mine) == pytest.approx(theirs.total_bytes, rel=1e-9)
    bare = HeteroStepModel(QWEN, load_topology({"preset": "dgx-h100", "nodes": 1}), 2048, 1,
                           train_params=TrainParams(memory=MemoryParams(**OFFLOAD, grad_partition_on_host=True),
                                                    offload=OffloadParams(optimizer=True, scope="optimizer_step")))
    assert (stm.stage_memory_bytes(1, 1, 8, [QWEN.num_layers], 2, micro_batches=4)[0]
            - bare.stage_memory_bytes(1, 1, 8, [QWEN.num_layers], 2, micro_batches=4)[0]) == pytest.approx(
        2.0 * EMBEDDING, rel=1e-9)
