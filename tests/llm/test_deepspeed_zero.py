"""DeepSpeed ZeRO-1 / 2 as deepspeed 0.19.6 runtime/zero/stage_1_and_2.py holds and reduces the gradients:
its reduction buckets and ZeRO-2's accumulated partition (memory.zero_reduce_bucket_params,
zero_reduce_buckets, zero2_accumulated_grad_partitions: MemoryBreakdown.zero_buffers_bytes), the buckets'
all-reduce (comm.zero_grad_reduce) and ZeRO-2's reduction in every micro-batch's backward
(comm.zero2_reduce_every_micro_batch); ZeRO-3 as runtime/zero/stage3.py holds its bucket and its
reduce-scatter's copy, and partitioned_param_coordinator.py its live-parameter window
(memory.zero3_max_live_params)."""
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
    assert "DeepSpeed ZeRO backward buffers" in b.describe()


def test_zero_0_holds_no_deepspeed_buffers_and_zero3_its_buckets_alone():
    """ZeRO-3 holds the buckets (its IPG bucket and the reduce-scatter's copy: 2 x 5e8 x 2 B), never
    ZeRO-2's accumulated partition (it adds each micro-batch into its partition in place)."""
    for zero, expected in ((0, 0.0), (3, 2 * BUCKET * 2.0)):
        b = memory_per_device(QWEN, TrainLayout(dp=8, zero=zero), 2048, BIG, params=DEEPSPEED_MEMORY, micro_batches=4)
        assert b.zero_buffers_bytes == expected


def test_by_default_no_stack_holds_the_buffers():
    """Megatron-Core's buckets are views of its gradient buffer, FSDP reduces per layer: 0 by default."""
    b = memory_per_device(QWEN, TrainLayout(dp=8, zero=2), 2048, BIG, micro_batches=4)
    assert b.zero_buffers_bytes == 0.0


def test_a_bucket_count_without_buckets_is_refused():
    with pytest.raises(ValueError, match="zero_reduce_buckets applies only with zero_reduce_bucket_params"):
        MemoryParams(zero_reduce_buckets=2)


def _dp_exposed(comm: CommParams, zero: int) -> float:
    lay = TrainLayout(dp=8, zero=zero, recompute="full")
    params = TrainParams(comm=comm.model_copy(update={"grad_norm_all_reduce": False}),   # the DP sync alone
                         memory=MemoryParams(grad_bytes_per_param=2.0))
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
    ("memory", "zero_reduce_bucket_params", 5e8, 0), ("memory", "zero2_accumulated_grad_partitions", 1, 1),
    ("memory", "zero3_max_live_params", 1e9, 2),
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


def _stage_whole_params(model) -> tuple[float, float, float]:
    """(the stage's parameters, its largest layer's, its embedding + head's) on one device, tp = pp = 1."""
    from simulator.llm.layer_costs import embedding_params, layer_shapes

    shapes = layer_shapes(model)
    emb, head = embedding_params(model)
    outer = emb + (0.0 if model.tied_head else head)
    return sum(lay.params for lay in shapes) + outer, max(lay.params for lay in shapes), outer


@pytest.mark.parametrize(("model_name", "cap"), [("llama3.1-8b", 1e9), ("qwen2.5-0.5b", 1e9), ("llama3.1-8b", 1e8)])
def test_deepspeeds_zero3_window_holds_the_stage_up_to_the_live_cap_beside_the_layers_gradient(model_name, cap):
    """The gathered bytes = 2 B x (min(the stage's parameters, stage3_max_live_parameters) + the largest
    layer's gradient); FSDP's count (3 layers and the root's parameters and gradients) without the cap.
    Qwen2.5-0.5B (0.49e9 parameters) is gathered whole under the 1e9 cap."""
    model = load_model(model_name)
    whole, layer, outer = _stage_whole_params(model)
    lay = TrainLayout(dp=8, zero=3)
    b = memory_per_device(model, lay, 2048, BIG, params=MemoryParams(zero3_max_live_params=cap))
    assert b.gathered_bytes == pytest.approx(2.0 * (min(whole, cap) + layer), rel=1e-9)
    fsdp = memory_per_device(model, lay, 2048, BIG)
    assert fsdp.gathered_bytes == pytest.approx(2.0 * (3 * layer + 2 * outer), rel=1e-9)
    assert b.weights_bytes == fsdp.weights_bytes and b.gradients_bytes == fsdp.gradients_bytes


def test_a_forward_only_pass_under_deepspeeds_zero3_holds_the_window_without_gradients():
    from simulator.llm.memory import forward_memory_per_device

    model = load_model("llama3.1-8b")
    whole, _, _ = _stage_whole_params(model)
    b = forward_memory_per_device(model, TrainLayout(dp=8, zero=3), 4096, 4096, BIG,
                                  params=MemoryParams(zero3_max_live_params=1e9))
    assert b.gathered_bytes == pytest.approx(2.0 * min(whole, 1e9), rel=1e-9)


@pytest.mark.parametrize("knob", [{"zero3_prefetch_layers": 2}, {"zero3_outer_gathered": False},
                                  {"zero3_reshard_after_forward": False}])
def test_the_live_cap_beside_fsdps_working_set_knobs_is_refused(knob):
    """The cap replaces FSDP's layer prefetch, root unit and reshard switch: set with them, they would not be read."""
    with pytest.raises(ValueError, match=f"zero3_max_live_params .* so {next(iter(knob))} is not read"):
        MemoryParams(zero3_max_live_params=1e9, **knob)


def test_deepspeeds_zero3_reduces_its_bf16_gradients_per_layer_and_micro_batch():
    """DeepSpeed's reduce_scatter in the bf16 communication dtype: the per-layer reduce-scatter halves
    from fp32 (grad_reduce_bytes_per_param 4 -> 2); the gathers stay."""
    lay = TrainLayout(dp=8, zero=3, recompute="full")
    seqs = uniform_sequences(32, 1024)

    def dp_s(reduce_bytes: float) -> float:
        params = TrainParams(comm=CommParams(grad_reduce_bytes_per_param=reduce_bytes, fsdp_gather_overlap_fraction=0.0,
                                             fsdp_reduce_overlap_fraction=0.0, dp_overlap_fraction=0.0),
                             memory=MemoryParams(grad_bytes_per_param=reduce_bytes), check_memory=False)
        return train_step_cost(QWEN, lay, ONE_NODE, sequences=seqs, params=params).comm_exposed_s["dp"]

    from simulator.llm.layer_costs import layer_shapes

    net, ranks = CollectiveModel(ONE_NODE), list(range(8))
    _, _, outer = _stage_whole_params(QWEN)

    def saved(n: float) -> float:   # one reduce-scatter of n parameters' gradients, fp32 less bf16
        return net.cost("reduce_scatter", ranks, n * 4.0).time_s - net.cost("reduce_scatter", ranks, n * 2.0).time_s
    # 32 sequences on 8 GPUs: 4 micro-batches, each reducing every layer; the root's once a step (rlsim's FSDP)
    expected = 4 * sum(saved(lay.params) for lay in layer_shapes(QWEN)) + saved(outer)
    assert dp_s(4.0) - dp_s(2.0) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero3s_kept_ipg_bucket_stays_between_steps_as_part_of_the_buffers(zero):
    """memory.zero_reduce_buckets_kept (DeepSpeed's ZeRO-3 IPG bucket, allocated at init: stage3.py
    _setup_for_real_optimizer): 1 x 5e8 x 2 B kept between steps (kept_buffers_bytes), a part of the
    backward's buffers: the total unchanged; the gradients kept beside it where the buffer persists,
    none once the gradients are offloaded."""
    from simulator.params import OffloadParams
    from simulator.rl.llm_costs import kept_gradient_bytes

    kept = DEEPSPEED_MEMORY.model_copy(update={"zero_reduce_buckets_kept": 1})
    lay = TrainLayout(dp=8, zero=zero)
    b, base = (memory_per_device(QWEN, lay, 2048, BIG, params=p, micro_batches=4) for p in (kept, DEEPSPEED_MEMORY))
    bucket = 0.0 if zero == 0 else BUCKET * 2.0
    assert b.kept_buffers_bytes == bucket and base.kept_buffers_bytes == 0.0 and b.total_bytes == base.total_bytes
    for persists in (True, False):
        params = TrainParams(memory=kept.model_copy(update={"grad_buffer_persists": persists}))
        assert kept_gradient_bytes(b, params) == (b.gradients_bytes if persists else 0.0) + bucket
        moved = params.model_copy(update={"offload": OffloadParams(grads=True)})
        assert kept_gradient_bytes(b, moved) == 0.0


@pytest.mark.parametrize("given", [{"zero_reduce_buckets_kept": 1},
                                   {"zero_reduce_bucket_params": BUCKET, "zero_reduce_buckets_kept": 2}])
def test_more_kept_buckets_than_buckets_are_refused(given):
    with pytest.raises(ValueError, match="zero_reduce_buckets_kept .* counts kept buckets"):
        MemoryParams(**given)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_offloads_gradient_partition_is_on_the_host_from_zero2_on(zero):
    """memory.grad_partition_on_host (DeepSpeed's ZeRO-Offload): ZeRO-2's copy_grads_in_partition returns
    early under cpu_offload, ZeRO-3's grad_partitions_flat_buffer is on the host: no gradient partition on
    the device (2 B x params / 8 less), the buckets still there. ZeRO-1 keeps the whole param.grad until
    the boundary's reduction: not read."""
    n = _trained_params()
    lay = TrainLayout(dp=8, zero=zero)
    buckets = dict(grad_bytes_per_param=2.0, zero_reduce_bucket_params=BUCKET, zero_reduce_buckets=2)
    on_device = memory_per_device(QWEN, lay, 2048, BIG, params=MemoryParams(**buckets), micro_batches=4)
    on_host = memory_per_device(QWEN, lay, 2048, BIG, params=MemoryParams(**buckets, grad_partition_on_host=True),
                                micro_batches=4)
    assert on_device.gradients_bytes == pytest.approx(2.0 * (n if zero == 1 else n / 8), rel=1e-12)
    assert on_host.gradients_bytes == (on_device.gradients_bytes if zero == 1 else 0.0)
    assert on_host.zero_buffers_bytes == on_device.zero_buffers_bytes == 2 * BUCKET * 2.0
    assert on_device.total_bytes - on_host.total_bytes == pytest.approx(0.0 if zero == 1 else 2.0 * n / 8, rel=1e-12)


def test_a_host_gradient_partition_outside_zero_offload_is_refused():
    """It is ZeRO-Offload's: with the optimizer offloaded (offload.optimizer), never beside ZeRO-2's
    accumulated partition (accumulated on the host) nor offload.grads (nothing on the device to move)."""
    from simulator.params import OffloadParams

    with pytest.raises(ValueError, match="remove zero2_accumulated_grad_partitions, or grad_partition_on_host"):
        MemoryParams(grad_partition_on_host=True, zero2_accumulated_grad_partitions=1)
    on_host = MemoryParams(grad_partition_on_host=True)
    with pytest.raises(ValueError, match="set offload.optimizer: true"):
        TrainParams(memory=on_host)
    with pytest.raises(ValueError, match="remove offload.grads"):
        TrainParams(memory=on_host, offload=OffloadParams(optimizer=True, grads=True))
    TrainParams(memory=on_host, offload=OffloadParams(optimizer=True, scope="optimizer_step"))
    with pytest.raises(RlsimError) as info:
        TrainParams.from_mapping({"memory": {"grad_partition_on_host": True}}, source="s.yaml")
    assert "offload.optimizer" in str(info.value)


def test_a_host_gradient_partition_at_zero1_is_refused_naming_its_field():
    scenario = {"topology": {"preset": "dgx-h100", "nodes": 1},
                "workload": {"model": "qwen2.5-7b", "prompts_per_step": 8, "samples_per_prompt": 4,
                             "train_layout": {"zero": 1},
                             "train_params": {"memory": {"grad_partition_on_host": True},
                                              "offload": {"optimizer": True, "scope": "optimizer_step"}}}}
    with pytest.raises(RlsimError) as info:
        load_scenario(scenario)
    assert info.value.field == "workload.train_params.memory.grad_partition_on_host"
    assert "ZeRO-2 or 3" in str(info.value)
    scenario["workload"]["train_layout"]["zero"] = 2
    load_scenario(scenario)


@pytest.mark.parametrize(("zero", "dp"), [(1, 2), (2, 8)])
def test_deepspeeds_optimizer_step_copies_set_the_peak_where_they_exceed_the_backward(zero, dp):
    """memory.zero_step_grad_copy_bytes_per_param 6 (stage_1_and_2.py step(): the partition flattened in bf16,
    2, and cast to fp32, 4): after the backward the device holds weights + optimizer state + the bf16
    partition (2 B x params / dp, the others' gradients freed first at ZeRO-1) + 6 B x params / dp. Short
    sequences: the step's peak is the total (at ZeRO-1 only on few ranks: the backward holds the whole
    gradients); long ones: the backward's (the max of the phases, not a sum)."""
    n = _trained_params()
    memory = MemoryParams(grad_bytes_per_param=2.0, zero_step_grad_copy_bytes_per_param=6.0)
    lay = TrainLayout(dp=dp, zero=zero, recompute="full", micro_batch=1)
    short = memory_per_device(QWEN, lay, 128, BIG, params=memory, micro_batches=1)
    step = short.weights_bytes + short.optimizer_bytes + (2.0 + 6.0) * n / dp
    assert short.step_copies_bytes == pytest.approx(6.0 * n / dp, rel=1e-12)
    assert short.step_bytes == pytest.approx(step, rel=1e-12) and short.step_bytes > short.backward_bytes
    assert short.total_bytes == short.step_bytes and short.as_dict()["step_bytes"] == short.step_bytes
    assert "the optimizer step" in short.describe()
    long = memory_per_device(QWEN, lay, 65536, BIG, params=memory, micro_batches=1)
    assert long.backward_bytes > long.step_bytes and long.total_bytes == long.backward_bytes
    bare = memory_per_device(QWEN, lay, 128, BIG, params=MemoryParams(grad_bytes_per_param=2.0), micro_batches=1)
    assert bare.total_bytes == bare.backward_bytes == short.backward_bytes and "step_bytes" not in bare.as_dict()


def test_step_copies_beside_a_host_gradient_partition_are_refused():
    with pytest.raises(ValueError, match="remove zero_step_grad_copy_bytes_per_param, or grad_partition_on_host"):
        MemoryParams(grad_partition_on_host=True, zero_step_grad_copy_bytes_per_param=6.0)


@pytest.mark.parametrize(("dp", "sub_group"), [(8, 1e9), (2, 1e9), (2, 0.0)])
def test_zero3_optimizer_step_copies_one_sub_group_beside_the_kept_partition_and_bucket(dp, sub_group):
    """ZeRO-3's step (stage3.py _prepare_fp32_grad_for_sub_group): each sub-group's gradients flattened in
    bf16 (2 B) and cast to fp32 (4 B), one sub-group at a time, beside the weights' shard, the optimizer
    state, the kept bf16 partition (2 B x params / dp: grad_partitions_flat_buffer) and the kept IPG
    bucket (5e8 x 2 B): 6 B x min(params / dp, sub_group_size) (Qwen2.5-7B / 8: 0.95e9 elements, under the
    1e9 cap; / 2: 3.8e9, capped; no cap: the whole partition)."""
    n = _trained_params()
    memory = MemoryParams(grad_bytes_per_param=2.0, grad_buffer_persists=True, zero_reduce_bucket_params=BUCKET,
                          zero_reduce_buckets=2, zero_reduce_buckets_kept=1, zero3_max_live_params=1e9,
                          zero_step_grad_copy_bytes_per_param=6.0, zero_step_sub_group_params=sub_group)
    lay = TrainLayout(dp=dp, zero=3, recompute="full", micro_batch=1)
    b = memory_per_device(QWEN, lay, 128, BIG, params=memory, micro_batches=1)
    copied = min(n / dp, sub_group) if sub_group else n / dp
    assert b.step_copies_bytes == pytest.approx(6.0 * copied, rel=1e-12)
    step = b.weights_bytes + b.optimizer_bytes + 2.0 * n / dp + 6.0 * copied + BUCKET * 2.0
    assert b.step_bytes == pytest.approx(step, rel=1e-12) and b.total_bytes == max(b.backward_bytes, b.step_bytes)
    bare = memory_per_device(QWEN, lay, 128, BIG, micro_batches=1, params=memory.model_copy(
        update={"zero_step_grad_copy_bytes_per_param": 0.0, "zero_step_sub_group_params": 0.0}))
    assert bare.backward_bytes == b.backward_bytes and bare.total_bytes == bare.backward_bytes


def test_a_sub_group_without_step_copies_is_refused():
    with pytest.raises(ValueError, match="set zero_step_grad_copy_bytes_per_param, or remove zero_step_sub_group"):
        MemoryParams(zero_step_sub_group_params=1e9)



def _zero3_dp_exposed(comm: CommParams, memory: MemoryParams | None = None) -> float:
    lay = TrainLayout(dp=8, zero=3, recompute="full")
    params = TrainParams(comm=comm, memory=memory or MemoryParams(grad_bytes_per_param=2.0))
    return train_step_cost(QWEN, lay, ONE_NODE, sequences=uniform_sequences(32, 1024), params=params).comm_exposed_s["dp"]


def _outer_params(model) -> float:
    from simulator.llm.layer_costs import embedding_params

    emb, head = embedding_params(model)
    return emb + (0.0 if model.tied_head else head)


def test_deepspeeds_zero3_gathers_and_reduces_the_embedding_and_head_every_micro_batch():
    """No overlap, 4 micro-batches a replica: 3 more all-gathers and reduce-scatters of the embedding and
    head (bf16) than FSDP's root unit, synced once a step."""
    net, ranks = CollectiveModel(ONE_NODE), list(range(8))
    outer = _outer_params(QWEN) * 2.0
    once = CommParams(grad_reduce_bytes_per_param=2.0)
    every = CommParams(grad_reduce_bytes_per_param=2.0, zero3_outer_sync_every_micro_batch=True)
    added = 3 * (net.cost("reduce_scatter", ranks, outer).time_s + net.cost("all_gather", ranks, outer).time_s)
    assert _zero3_dp_exposed(every) - _zero3_dp_exposed(once) == pytest.approx(added, rel=1e-9)


@pytest.mark.parametrize(("model_name", "with_outer", "expected"), [
    ("llama3.1-8b", True, "embedding"),    # 128256 x 4096 = 525e6 > 5e8: the embedding alone, last
    ("qwen2.5-7b", False, "two layers")])  # 28 layers of 233e6: buckets of 2, the last 2 layers'
def test_zero3s_last_bucket_holds_what_follows_the_last_full_one_in_backward_order(model_name, with_outer, expected):
    from simulator.llm.layer_costs import embedding_params, layer_shapes
    from simulator.llm.training import _last_bucket_elements

    model = load_model(model_name)
    outer, inner = _last_bucket_elements(model, TrainLayout(dp=8, zero=3), 0, BUCKET, with_outer)
    if expected == "embedding":
        assert (outer, inner) == (embedding_params(model)[0], 0.0)
    else:
        layer = layer_shapes(model)[0].trainable_dense_params
        assert 2 * layer <= BUCKET < 3 * layer and model.num_layers % 2 == 0
        assert (outer, inner) == (0.0, pytest.approx(2 * layer, rel=1e-12))


def test_deepspeeds_zero3_waits_for_its_last_bucket_after_every_backward():
    """Per-layer reduce-scatters half hidden (fsdp_reduce_overlap_fraction 0.5), 4 micro-batches: each
    backward's end waits for the hidden half of the last bucket's reduce-scatter (Qwen2.5-7B's last two
    layers, the embedding reduced apart): 4 x 0.5 x reduce_scatter(2 layers x 2 B)."""
    from simulator.llm.layer_costs import layer_shapes

    net, ranks = CollectiveModel(ONE_NODE), list(range(8))
    memory = MemoryParams(grad_bytes_per_param=2.0, zero_reduce_bucket_params=BUCKET, zero_reduce_buckets=2)
    base = CommParams(grad_reduce_bytes_per_param=2.0, fsdp_reduce_overlap_fraction=0.5)
    waits = base.model_copy(update={"zero3_backward_waits_last_bucket": True})
    last = 2 * layer_shapes(QWEN)[0].trainable_dense_params * 2.0
    added = 4 * 0.5 * net.cost("reduce_scatter", ranks, last).time_s
    assert _zero3_dp_exposed(waits, memory) - _zero3_dp_exposed(base, memory) == pytest.approx(added, rel=1e-9)


@pytest.mark.parametrize("knob", ["zero3_outer_sync_every_micro_batch", "zero3_backward_waits_last_bucket"])
def test_zero3s_per_micro_batch_knobs_below_zero3_are_refused_naming_their_field(knob):
    scenario = {"topology": {"preset": "dgx-h100", "nodes": 1},
                "workload": {"model": "qwen2.5-7b", "prompts_per_step": 8, "samples_per_prompt": 4,
                             "train_layout": {"zero": 2},
                             "train_params": {"comm": {knob: True}, "memory": {"zero_reduce_bucket_params": BUCKET}}}}
    with pytest.raises(RlsimError) as info:
        load_scenario(scenario)
    assert info.value.field == f"workload.train_params.comm.{knob}"
    assert "ZeRO-3" in str(info.value)


def test_the_last_bucket_wait_without_a_bucket_size_is_refused():
    with pytest.raises(ValueError, match="zero_reduce_bucket_params"):
        TrainParams(comm=CommParams(zero3_backward_waits_last_bucket=True))
