"""ZeRO-1 / 2's flattened copy of a bucket while it is all-reduced (deepspeed 0.19.6 runtime/zero/
stage_1_and_2.py allreduce_bucket: tensor = self.flatten(bucket), a torch.cat of the bucket's slices by
owning rank) exists only where the bucket spans several ranks' slices: with one data-parallel rank
average_tensor merges the whole bucket into one slice (partition 0) and torch's flatten_dense_tensors
returns a view of a lone tensor. memory.zero_allreduce_copies, counted where the layout's ZeRO group has
more than one rank; the IPG buckets themselves (setup_buckets) are allocated whatever the dp."""
from __future__ import annotations

import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.memory import MemoryParams, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.params import TrainParams, inapplicable_given_key

QWEN = load_model("qwen2.5-7b")
BUCKET = 5e8
DEEPSPEED = MemoryParams(grad_bytes_per_param=2.0, zero_reduce_bucket_params=BUCKET, zero_reduce_buckets=1,
                         zero_allreduce_copies=1)


@pytest.mark.parametrize(("zero", "layout", "buffers"), [
    (1, {"dp": 8}, 2), (2, {"dp": 8}, 2), (1, {"dp": 1, "tp": 8}, 1), (2, {"dp": 1, "tp": 8}, 1),
    (2, {"dp": 1, "cp": 2, "tp": 4}, 2)])   # cp 2: the ZeRO group is dp x cp, two ranks
def test_the_allreduce_copy_is_held_only_where_the_zero_group_has_several_ranks(zero, layout, buffers):
    """Backward buffers on one GPU = the closed form: (the bucket + the copy where dp x cp > 1) x 5e8 x 2 B."""
    b = memory_per_device(QWEN, TrainLayout(zero=zero, recompute="full", **layout), 2048, 1e15, params=DEEPSPEED,
                          micro_batches=1)
    assert b.zero_buffers_bytes == buffers * BUCKET * 2.0


def test_the_openrlhf_import_charges_the_copy_by_the_layouts_dp():
    """The async example's ZeRO-2 actor: 1 bucket (2 with ds.overlap_comm) + 1 copy, 2e9 B on its 8-GPU dp;
    the same keys on one data-parallel rank hold the bucket alone, 1e9 B (was 2e9: the copy charged at
    import whatever the dp)."""
    from simulator.frameworks import import_config
    from simulator.scenario import load_scenario
    from tests.frameworks.test_import_openrlhf import ASYNC

    for overlap, buckets in ((False, 1), (True, 2)):
        r = import_config("openrlhf", ASYNC, ["ds.zero_stage=2"] + (["+ds.overlap_comm=true"] if overlap else []))
        memory = r.scenario["workload"]["train_params"]["memory"]
        assert (memory["zero_reduce_buckets"], memory["zero_allreduce_copies"]) == (buckets, 1)
        params = load_scenario(r.scenario).workload.train_params.memory
        for dp, held in ((8, buckets + 1), (1, buckets)):
            b = memory_per_device(load_model("llama3.1-8b"), TrainLayout(dp=dp, tp=8 // dp, zero=2), 2048, 1e15,
                                  params=params, micro_batches=1)
            assert b.zero_buffers_bytes == held * BUCKET * 2.0, (overlap, dp)


def test_the_key_is_zero_1_2s_and_needs_a_bucket_size():
    """ZeRO-3's reduce-scatter copies its bucket even on one rank (reduce_scatter_coalesced's torch.cat
    of several tensors): that copy is zero_reduce_buckets', and this key is refused off ZeRO 1-2 by name;
    without zero_reduce_bucket_params it would size nothing."""
    with pytest.raises(ValueError, match="zero_reduce_bucket_params"):
        MemoryParams(zero_allreduce_copies=1)
    given = TrainParams(memory=DEEPSPEED)
    for zero in (1, 2):
        assert inapplicable_given_key({"zero": zero}, given, TrainParams(), None, False) is None
    field, _, fix = inapplicable_given_key({"zero": 3}, given, TrainParams(), None, False)
    assert field == "workload.train_params.memory.zero_allreduce_copies" and "zero: 1 or 2" in fix
    # at ZeRO-0 the bucket size itself is refused first
    assert inapplicable_given_key({"zero": 0}, given, TrainParams(), None, False) is not None


def test_the_hetero_stage_bytes_follow_the_dp_as_the_training_model():
    """plan --balance's memory check on one data-parallel rank (tp 8) and on 8 equals llm/memory.py's."""
    from simulator.planner.hetero import HeteroStepModel

    stm = HeteroStepModel(QWEN, load_topology({"preset": "dgx-h100", "nodes": 1}), 2048, 1,
                          train_params=TrainParams(memory=DEEPSPEED))
    for tp, dp in ((8, 1), (1, 8)):
        mine = stm.stage_memory_bytes(tp, 1, dp, [QWEN.num_layers], 2, micro_batches=1)
        theirs = memory_per_device(QWEN, TrainLayout(tp=tp, dp=dp, zero=2, recompute="full"), 2048, 80e9,
                                   params=DEEPSPEED, micro_batches=1)
        assert mine[0] == pytest.approx(theirs.total_bytes, rel=1e-9)
