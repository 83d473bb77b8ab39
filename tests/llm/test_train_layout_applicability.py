"""Training keys the layout or the model makes inapplicable are refused where the user gives them
(params.py inapplicable_given_key, llm/train_layout.py TrainLayout.check_model); they were read past with the
same prediction."""
from __future__ import annotations

import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm import load_model
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import train_step_cost, uniform_sequences
from simulator.network.collectives import CollectiveModel
from simulator.params import LAYOUT_GATED_COMM, CommParams, TrainParams
from simulator.scenario import load_scenario

# the audit's base: a dense model, train layout tp 2, cp 1, zero 1
BASE = ["topology.preset=dgx-h100", "topology.nodes=4"]
LAYOUT, COMM = "workload.train_layout", "workload.train_params.comm"
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
    [f"{LAYOUT}.sequence_parallel=true"],                       # tp 2
    [f"{LAYOUT}.tp=1", f"{LAYOUT}.sequence_parallel=false"],
    [f"{COMM}.cp_overlap_fraction=0.5"],                         # the stack's value: changes nothing
    [LOGPROB_BUDGET, f"{LAYOUT}.micro_batch=4"],                 # training micro-batches still take it
    [BUDGET, f"{LAYOUT}.micro_batch=1"],                         # the preset's own micro_batch: 1
    ["schedule.forward_micro_batch=4"],
    # a re-plan after a failure searches micro-batch sizes from the running one
    [BUDGET, f"{LAYOUT}.micro_batch=4", "schedule.failures=[{at_s: 100, fail: 'devices:0-1'}]"],
    # a stack's own layout settings are not the user's: megatron-2021 turns sequence parallelism off
    ["workload.train_software=megatron-2021", f"{LAYOUT}.tp=1"],
])
def test_the_same_keys_where_they_apply_load(overrides):
    load(*overrides)


@pytest.mark.parametrize("knob", sorted(LAYOUT_GATED_COMM))
def test_a_gated_comm_knob_moves_the_step_only_on_the_layouts_its_gate_admits(knob):
    """The gate is neither too wide (the knob moves nothing where it is refused) nor too narrow (it
    moves the step on each layout the gate admits)."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    net = CollectiveModel(topo)
    seqs = uniform_sequences(16, 2048)
    layouts = [TrainLayout(tp=2, zero=1), TrainLayout(tp=2, zero=3), TrainLayout(tp=2, cp=2),
               TrainLayout(tp=2, cp=2, ulysses_sp=True)]
    value = 0.9 if getattr(CommParams(), knob) != 0.9 else 0.1
    for lay in (lay.resolve(8) for lay in layouts):
        base, moved = (train_step_cost(load_model("qwen2.5-7b"), lay, topo, None, seqs, params=params,
                                       collectives=net).step_time_s
                       for params in (TrainParams(), TrainParams(comm=CommParams(**{knob: value}))))
        assert (moved != base) == LAYOUT_GATED_COMM[knob].applies(lay), lay


def test_expert_tp_on_a_dense_model_is_refused_and_equal_to_tp_on_an_moe_model_is_not():
    with pytest.raises(RlsimError) as exc:
        TrainLayout(tp=2, etp=2, dp=16).check_model(load_model("qwen2.5-7b"))
    assert exc.value.field == f"{LAYOUT}.etp" and "dense" in str(exc.value)
    TrainLayout(tp=4, ep=8, etp=4, dp=96).check_model(load_model("qwen3-30b-a3b"))


def test_the_cli_exits_2_naming_the_key(capsys):
    argv = ["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", "topology.nodes=4",
            "--schedule", "colocated", "--json", "--iterations", "2"]
    assert main([*argv, "--set", f"{LAYOUT}.etp=2"]) == 2
    err = capsys.readouterr().err
    assert f"'{LAYOUT}.etp'" in err and "dense model" in err and "Traceback" not in err
    assert main([*argv, "--set", f"{COMM}.fsdp_gather_overlap_fraction=0.9"]) == 2
    err = capsys.readouterr().err
    assert f"'{COMM}.fsdp_gather_overlap_fraction'" in err and "zero: 3" in err and "Traceback" not in err
