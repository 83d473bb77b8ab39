"""DeepSpeed ZeRO-1 / 2 as deepspeed 0.19.6 runtime/zero/stage_1_and_2.py holds and reduces the gradients:
its reduction buckets and ZeRO-2's accumulated partition (memory.zero_reduce_bucket_params,
zero_reduce_buckets, zero2_accumulated_grad_partitions: MemoryBreakdown.zero_buffers_bytes), the buckets'
all-reduce (comm.zero_grad_reduce) and ZeRO-2's reduction in every micro-batch's backward
(comm.zero2_reduce_every_micro_batch)."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.memory import MemoryParams, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import TrainParams, _stage_params, train_step_cost, uniform_sequences
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams
from simulator.scenario import load_scenario

QWEN = load_model("qwen2.5-7b")
ONE_NODE = load_topology({"preset": "dgx-h100", "nodes": 1})
BIG = 1e15
BUCKET = 5e8
DEEPSPEED_MEMORY = MemoryParams(grad_bytes_per_param=2.0, zero_reduce_bucket_params=BUCKET, zero_reduce_buckets=2,
                                zero2_accumulated_grad_partitions=1)


def _trained_params() -> float:
    (dense, expert), = _stage_params(QWEN, TrainLayout(dp=8))
    return dense + expert


@pytest.mark.parametrize(("zero", "micro_batches", "partitions"), [(1, 4, 0), (2, 1, 0), (2, 4, 1)])
def test_zero_1_2_hold_their_buckets_and_zero2_an_accumulated_partition_through_the_backward(
        zero, micro_batches, partitions):
    """Bytes per GPU = the closed form: 2 buckets x 5e8 elements x 2 B, and at ZeRO-2 with several
    micro-batches one more bf16 gradient partition (2 B x params / dp); the gradients themselves (2 B,
    full at ZeRO-1, a partition at ZeRO-2) and the rest as before."""
    n = _trained_params()
    lay = TrainLayout(dp=8, zero=zero)
    b = memory_per_device(QWEN, lay, 2048, BIG, params=DEEPSPEED_MEMORY, micro_batches=micro_batches)
    base = memory_per_device(QWEN, lay, 2048, BIG, params=MemoryParams(grad_bytes_per_param=2.0),
                             micro_batches=micro_batches)
    assert b.zero_buffers_bytes == pytest.approx(2 * BUCKET * 2.0 + partitions * 2.0 * n / 8, rel=1e-12)
    assert b.gradients_bytes == pytest.approx(2.0 * (n / 8 if zero == 2 else n), rel=1e-12)
    assert b.total_bytes - base.total_bytes == pytest.approx(b.zero_buffers_bytes, rel=1e-12)
    assert b.as_dict()["zero_buffers_bytes"] == b.zero_buffers_bytes
    assert "ZeRO-1/2 backward buffers" in b.describe()


@pytest.mark.parametrize("zero", [0, 3])
def test_zero_0_and_3_hold_no_deepspeed_zero_1_2_buffers(zero):
    b = memory_per_device(QWEN, TrainLayout(dp=8, zero=zero), 2048, BIG, params=DEEPSPEED_MEMORY, micro_batches=4)
    assert b.zero_buffers_bytes == 0.0


def test_by_default_no_stack_holds_the_buffers():
    """Megatron-Core's buckets are views of its gradient buffer, FSDP reduces per layer: 0 by default."""
    b = memory_per_device(QWEN, TrainLayout(dp=8, zero=2), 2048, BIG, micro_batches=4)
    assert b.zero_buffers_bytes == 0.0


def test_a_bucket_count_without_buckets_is_refused():
    with pytest.raises(ValueError, match="zero_reduce_buckets applies only with zero_reduce_bucket_params"):
        MemoryParams(zero_reduce_buckets=2)


def _dp_exposed(comm: CommParams, zero: int) -> float:
    lay = TrainLayout(dp=8, zero=zero, recompute="full")
    params = TrainParams(comm=comm, memory=MemoryParams(grad_bytes_per_param=2.0))
    return train_step_cost(QWEN, lay, ONE_NODE, sequences=uniform_sequences(32, 1024), params=params).comm_exposed_s["dp"]


def test_deepspeed_all_reduces_its_buckets_and_zero2_reduces_every_micro_batch():
    """No overlap, 32 sequences on 8 GPUs: 4 micro-batches a replica. ZeRO-1: one all-reduce of the bf16
    gradients and the weights' all-gather; ZeRO-2: 4 all-reduces and the all-gather."""
    net, ranks = CollectiveModel(ONE_NODE), list(range(8))
    n = _trained_params()
    reduce = net.cost("all_reduce", ranks, n * 2.0).time_s
    gather = net.cost("all_gather", ranks, n * 2.0).time_s
    deepspeed = CommParams(grad_reduce_bytes_per_param=2.0, zero_grad_reduce="all-reduce",
                           zero2_reduce_every_micro_batch=True)
    assert _dp_exposed(deepspeed, 1) == pytest.approx(reduce + gather, rel=1e-9)
    assert _dp_exposed(deepspeed, 2) == pytest.approx(4 * reduce + gather, rel=1e-9)
    scatter = net.cost("reduce_scatter", ranks, n * 2.0).time_s
    assert _dp_exposed(CommParams(grad_reduce_bytes_per_param=2.0), 2) == pytest.approx(scatter + gather, rel=1e-9)


@pytest.mark.parametrize(("section", "knob", "value", "zero"), [
    ("memory", "zero_reduce_bucket_params", 5e8, 3), ("memory", "zero2_accumulated_grad_partitions", 1, 1),
    ("comm", "zero_grad_reduce", "all-reduce", 0), ("comm", "zero2_reduce_every_micro_batch", True, 1)])
def test_a_knob_of_another_zero_stage_is_refused_naming_its_field(section, knob, value, zero):
    scenario = {"topology": {"preset": "dgx-h100", "nodes": 1},
                "workload": {"model": "qwen2.5-7b", "prompts_per_step": 8, "samples_per_prompt": 4,
                             "train_layout": {"zero": zero},
                             "train_params": {section: {knob: value}}}}
    with pytest.raises(RlsimError) as info:
        load_scenario(scenario)
    assert info.value.field == f"workload.train_params.{section}.{knob}"
    assert "ZeRO-" in str(info.value)
