"""Training keys the layout or the model makes inapplicable are refused where the user gives them
(params.py inapplicable_given_key, llm/train_layout.py TrainLayout.check_model); they were read past with the
same prediction."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm import load_model
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import _fsdp_hidden, train_step_cost
from simulator.network.collectives import CollectiveModel
from simulator.params import LAYOUT_GATED_COMM, LAYOUT_GATED_MEMORY, CommParams, MemoryParams, TrainParams
from simulator.scenario import load_scenario

# the audit's base: a dense model, train layout tp 2, cp 1, zero 1
BASE = ["topology.preset=dgx-h100", "topology.nodes=4"]
LAYOUT, COMM, MEMORY = "workload.train_layout", "workload.train_params.comm", "workload.train_params.memory"
BUDGET = f"{LAYOUT}.max_tokens_per_micro_batch=20000"
LOGPROB_BUDGET = f"{LAYOUT}.logprob_max_tokens_per_micro_batch=20000"


def load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated", overrides=[*BASE, *overrides])


@pytest.mark.parametrize("overrides, field", [
    ([f"{LAYOUT}.ulysses_sp=true"], f"{LAYOUT}.ulysses_sp"),
    ([f"{LAYOUT}.tp=1", f"{LAYOUT}.sequence_parallel=true"], f"{LAYOUT}.sequence_parallel"),
    ([f"{COMM}.fsdp_gather_overlap_fraction=0.9"], f"{COMM}.fsdp_gather_overlap_fraction"),
    ([f"{COMM}.fsdp_reduce_overlap_fraction=0.9"], f"{COMM}.fsdp_reduce_overlap_fraction"),
    ([f"{COMM}.cp_overlap_fraction=0.1"], f"{COMM}.cp_overlap_fraction"),
    ([f"{LAYOUT}.cp=2", f"{LAYOUT}.ulysses_sp=true", f"{COMM}.cp_overlap_fraction=0.1"],
     f"{COMM}.cp_overlap_fraction"),
    ([f"{COMM}.ulysses_overlap_fraction=0.5"], f"{COMM}.ulysses_overlap_fraction"),
    ([f"{LAYOUT}.cp=2", f"{COMM}.ulysses_overlap_fraction=0.5"], f"{COMM}.ulysses_overlap_fraction"),
    ([f"{LAYOUT}.tp=1", f"{COMM}.tp_overlap_fraction=0.5"], f"{COMM}.tp_overlap_fraction"),
    ([f"{LAYOUT}.tp=1", f"{COMM}.tp_userbuffers=true"], f"{COMM}.tp_userbuffers"),
    ([f"{LAYOUT}.sequence_parallel=false", f"{COMM}.sp_backward_allgather=true"], f"{COMM}.sp_backward_allgather"),
    ([f"{COMM}.ep_overlap_fraction=0.5"], f"{COMM}.ep_overlap_fraction"),   # a dense model: ep 1
    ([f"{LAYOUT}.tp=1", f"{COMM}.moe_token_dispatcher=allgather"], f"{COMM}.moe_token_dispatcher"),
    ([f"{COMM}.pp_blocking_send=true"], f"{COMM}.pp_blocking_send"),         # pp 1
    ([f"{COMM}.pp_variable_seq_lengths=false"], f"{COMM}.pp_variable_seq_lengths"),
    ([f"{LAYOUT}.tp=1", f"{LAYOUT}.pp=2", f"{COMM}.pp_scatter_gather=false"], f"{COMM}.pp_scatter_gather"),
    # with sequence parallelism each TP rank sends its own slice: nothing to scatter and gather
    ([f"{LAYOUT}.pp=2", f"{COMM}.pp_scatter_gather=false"], f"{COMM}.pp_scatter_gather"),
    ([f"{MEMORY}.zero3_prefetch_layers=2"], f"{MEMORY}.zero3_prefetch_layers"),   # zero 1
    ([f"{MEMORY}.zero3_outer_gathered=false"], f"{MEMORY}.zero3_outer_gathered"),
    ([BUDGET, f"{LAYOUT}.micro_batch=4"], f"{LAYOUT}.micro_batch"),
    ([BUDGET, "schedule.forward_micro_batch=4"], "schedule.forward_micro_batch"),
    ([LOGPROB_BUDGET, "schedule.forward_micro_batch=4"], "schedule.forward_micro_batch"),
])
def test_a_key_the_layout_makes_inapplicable_is_refused_at_its_field(overrides, field):
    with pytest.raises(RlsimError) as exc:
        load(*overrides)
    assert exc.value.field == field
    assert exc.value.fix and field.rsplit(".", 1)[-1] in exc.value.fix


@pytest.mark.parametrize("overrides", [
    [f"{LAYOUT}.cp=2", f"{COMM}.cp_overlap_fraction=0.1"],
    [f"{LAYOUT}.cp=2", f"{LAYOUT}.ulysses_sp=true", f"{COMM}.ulysses_overlap_fraction=0.5"],
    [f"{LAYOUT}.zero=3", f"{COMM}.fsdp_gather_overlap_fraction=0.9", f"{COMM}.fsdp_reduce_overlap_fraction=0.9"],
    [f"{LAYOUT}.zero=3", f"{MEMORY}.zero3_prefetch_layers=0", f"{MEMORY}.zero3_outer_gathered=false"],
    [f"{LAYOUT}.sequence_parallel=true"],                       # tp 2
    [f"{LAYOUT}.tp=1", f"{LAYOUT}.sequence_parallel=false"],
    [f"{COMM}.cp_overlap_fraction=0.5"],                         # the stack's value: changes nothing
    [LOGPROB_BUDGET, f"{LAYOUT}.micro_batch=4"],                 # training micro-batches still take it
    [BUDGET, f"{LAYOUT}.micro_batch=1"],                         # the preset's own micro_batch: 1
    ["schedule.forward_micro_batch=4"],
    [f"{COMM}.tp_overlap_fraction=0.5", f"{COMM}.sp_backward_allgather=true"],   # tp 2 with SP
    [f"{LAYOUT}.pp=2", f"{LAYOUT}.sequence_parallel=false", f"{COMM}.pp_blocking_send=true",
     f"{COMM}.pp_scatter_gather=false", f"{COMM}.pp_variable_seq_lengths=false"],
    ["workload.train_software=megatron-core-overlap", f"{LAYOUT}.tp=1"],   # the stack's userbuffers: not the user's
    # a re-plan after a failure may choose another layout, under which the knob applies
    [f"{COMM}.pp_blocking_send=true", "schedule.failures=[{at_s: 100, fail: 'devices:0-1'}]"],
    # a re-plan after a failure searches micro-batch sizes from the running one
    [BUDGET, f"{LAYOUT}.micro_batch=4", "schedule.failures=[{at_s: 100, fail: 'devices:0-1'}]"],
    # a stack's own layout settings are not the user's: megatron-2021 turns sequence parallelism off
    ["workload.train_software=megatron-2021", f"{LAYOUT}.tp=1"],
])
def test_the_same_keys_where_they_apply_load(overrides):
    load(*overrides)


def _flipped(value):
    if value == "reduce-scatter":   # comm.zero_grad_reduce
        return "all-reduce"
    if value in ("alltoall", "allgather"):   # comm.moe_token_dispatcher
        return "allgather" if value == "alltoall" else "alltoall"
    return (not value) if isinstance(value, bool) else 0.9 if value != 0.9 else 0.1


def _read_past_by_design(knob: str, comm: CommParams, model) -> bool:
    """TE userbuffers act on a dense model's attention + MLP layers only, in place of the flat TP
    overlap share and the backward re-gather: the gates, blind to the model, admit these."""
    if knob == "tp_userbuffers":
        return model.is_moe
    if knob == "moe_token_dispatcher":   # a dense model has no routed token to dispatch (train_constants_read_past)
        return not model.is_moe
    if knob == "zero3_backward_waits_last_bucket":   # it waits for what the reduce-scatters hide: none by default
        return _fsdp_hidden(comm)[1] == 0
    return knob in ("tp_overlap_fraction", "sp_backward_allgather") and comm.tp_userbuffers and not model.is_moe


# (model, layouts) on one 8-GPU node: each gate's part of the layout present and absent
GATE_LAYOUTS = (
    ("qwen2.5-7b", [TrainLayout(tp=2, zero=1), TrainLayout(tp=2, zero=3), TrainLayout(tp=2, cp=2),
                    TrainLayout(tp=2, cp=2, ulysses_sp=True), TrainLayout(tp=1),
                    TrainLayout(tp=2, sequence_parallel=False), TrainLayout(tp=2, pp=2),
                    TrainLayout(tp=2, pp=2, sequence_parallel=False), TrainLayout(tp=1, pp=2)]),
    # tp 1 with etp 2: the routed experts' expert-TP gathers are the only TP collectives (tp_overlap_fraction's)
    ("qwen3-30b-a3b", [TrainLayout(tp=1, ep=1), TrainLayout(tp=1, ep=2), TrainLayout(tp=2, ep=2),
                       TrainLayout(tp=1, ep=2, etp=2)]),
)


@pytest.mark.parametrize("knob", sorted(LAYOUT_GATED_COMM))
def test_a_gated_comm_knob_moves_the_step_only_on_the_layouts_its_gate_admits(knob):
    """The gate is never too narrow (the knob moves nothing where it is refused) and not too wide (it
    moves the step on each layout the gate admits, but where TE userbuffers take the knob's place or
    nothing is hidden to wait for: _read_past_by_design), with userbuffers off and on, and with half of
    FSDP's reduce-scatters hidden."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    net = CollectiveModel(topo)
    seqs = np.array([512] * 8 + [4096] * 8)   # every replica gets both: pp_variable_seq_lengths acts on the send shapes
    # DeepSpeed's reduction bucket (memory only below ZeRO-3: check_memory off), which the last-bucket wait reads
    buckets = MemoryParams(zero_reduce_bucket_params=5e8)
    for name, layouts in GATE_LAYOUTS:
        model = load_model(name)
        for comm in (CommParams(), CommParams(tp_userbuffers=True), CommParams(fsdp_reduce_overlap_fraction=0.5)):
            moved_comm = comm.model_copy(update={knob: _flipped(getattr(comm, knob))})
            for lay in (lay.resolve(8) for lay in layouts):
                base, moved = (train_step_cost(model, lay, topo, None, seqs, collectives=net,
                                               params=TrainParams(comm=c, memory=buckets,
                                                                  check_memory=False)).step_time_s
                               for c in (comm, moved_comm))
                admitted = LAYOUT_GATED_COMM[knob].applies(lay)
                assert admitted if moved != base else not admitted or _read_past_by_design(knob, comm, model), \
                    (name, lay, comm)


def test_expert_tp_on_a_dense_model_is_refused_and_equal_to_tp_on_an_moe_model_is_not():
    with pytest.raises(RlsimError) as exc:
        TrainLayout(tp=2, etp=2, dp=16).check_model(load_model("qwen2.5-7b"))
    assert exc.value.field == f"{LAYOUT}.etp" and "dense" in str(exc.value)
    TrainLayout(tp=4, ep=8, etp=4, dp=96).check_model(load_model("qwen3-30b-a3b"))


def test_a_tp_that_does_not_divide_the_key_value_heads_is_refused():
    """Megatron-Core splits the query groups over TP: qwen3-30b-a3b's 4 KV heads take TP 4, not 8
    (it ran with half a KV head per rank); an MLA model has no groups, so TP 8 of DeepSeek-V3 stays."""
    TrainLayout(tp=4, ep=8, etp=1, dp=8).check_model(load_model("qwen3-30b-a3b"))
    with pytest.raises(RlsimError, match="does not divide the 4 key-value heads") as exc:
        TrainLayout(tp=8, ep=8, etp=1, dp=4).check_model(load_model("qwen3-30b-a3b"))
    assert exc.value.field == f"{LAYOUT}.tp" and "1, 2, 4" in str(exc.value)
    TrainLayout(tp=8, ep=8, etp=1, dp=8).check_model(load_model("deepseek-v3"))


def test_the_cli_exits_2_naming_the_key(capsys):
    argv = ["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", "topology.nodes=4",
            "--schedule", "colocated", "--json", "--iterations", "2"]
    assert main([*argv, "--set", f"{LAYOUT}.etp=2"]) == 2
    err = capsys.readouterr().err
    assert f"'{LAYOUT}.etp'" in err and "dense model" in err and "Traceback" not in err
    assert main([*argv, "--set", f"{COMM}.fsdp_gather_overlap_fraction=0.9"]) == 2
    err = capsys.readouterr().err
    assert f"'{COMM}.fsdp_gather_overlap_fraction'" in err and "zero: 3" in err and "Traceback" not in err


# A gated memory knob's moved value, and what it needs beside it to act (a bucket count needs buckets).
MOVED_MEMORY = {"zero3_prefetch_layers": ({}, 2), "zero3_outer_gathered": ({}, False),
                "zero3_reshard_after_forward": ({}, False), "zero3_max_live_params": ({}, 1e8),
                "zero3_sync_last_micro_batch_only": ({}, True),   # pp > 1 only: tests/llm/test_pipelined_fsdp.py
                "zero_reduce_bucket_params": ({}, 5e8), "zero_reduce_buckets": ({"zero_reduce_bucket_params": 5e8}, 2),
                "zero2_accumulated_grad_partitions": ({}, 1),
                "zero_reduce_buckets_kept": ({"zero_reduce_bucket_params": 5e8}, 1),
                "grad_partition_on_host": ({}, True),
                "zero_offload_device_grad_buffers": ({}, 1),
                "zero_allreduce_copies": ({"zero_reduce_bucket_params": 5e8}, 1),
                "zero_step_grad_copy_bytes_per_param": ({}, 1000.0),   # past the backward's peak
                "zero_step_sub_group_params": ({"zero_step_grad_copy_bytes_per_param": 1000.0}, 1e6)}


@pytest.mark.parametrize("knob", sorted(LAYOUT_GATED_MEMORY))
def test_a_gated_memory_knob_moves_the_memory_only_on_the_layouts_its_gate_admits(knob):
    """4 micro-batches an optimizer step: ZeRO-2's accumulated partition needs more than one. The kept
    buckets move what stays between steps (kept_buffers_bytes), a part of the total."""
    from simulator.llm.memory import memory_per_device

    model = load_model("qwen2.5-7b")
    beside, value = MOVED_MEMORY[knob]
    for zero in (0, 1, 2, 3):
        lay = TrainLayout(tp=2, zero=zero).resolve(8)
        base = MemoryParams(**beside)
        moved = base.model_copy(update={knob: value})
        totals = [(b.total_bytes, b.kept_buffers_bytes) for b in (
            memory_per_device(model, lay, 4096, 1e15, params=p, micro_batches=4) for p in (base, moved))]
        assert (totals[0] != totals[1]) == LAYOUT_GATED_MEMORY[knob].applies(lay), (zero, knob)
