"""AReaL's archon engine keeps each layer gathered from its forward through its backward under pipelines
and reshards it without them (reshard_after_forward_policy "default": areal 1.0.4 experimental/models/
archon/qwen2|qwen3/infra/parallelize.py apply_fsdp). The importer wrote false for a pipelined config while
the areal-archon stack kept true, so `rlsim plan` and `layout: auto` priced an archon pp 2 layout
resharding after the forward (9.55 s and 44.4 GB below) and a run of the imported config not (9.11 s,
50.0 GB). The stack's value is now the policy itself ("unless_pipelined"), read at the layout's pp by
the cost model that both the plan and the run call."""
from __future__ import annotations

import json

import pytest

import simulator
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.params import TRAIN_SOFTWARE, MemoryParams

SCENARIO = """topology: {preset: dgx-h100, nodes: 1}
workload: {preset: grpo-qwen2.5-7b, train_software: areal-archon, prompts_per_step: 16, mini_batch_prompts: 16}
schedule: colocated
iterations: 1
"""
LAYOUT = {"tp": 1, "pp": 2, "cp": 1, "zero": 3, "recompute": "full", "micro_batch": 1}
KEY = "workload.train_params.memory.zero3_reshard_after_forward"


def test_the_stack_reshards_unless_pipelined_and_a_given_value_holds_at_any_pp():
    memory = TRAIN_SOFTWARE["areal-archon"].params.memory
    assert memory.reshards_after_forward(1) and not memory.reshards_after_forward(2)
    for given in (True, False):
        assert {MemoryParams(zero3_reshard_after_forward=given).reshards_after_forward(pp) for pp in (1, 4)} == {given}
    assert all(TRAIN_SOFTWARE[name].params.memory.reshards_after_forward(2)
               for name in ("areal-fsdp", "nemo-rl-dtensor", "verl-fsdp", "megatron-core"))
    with pytest.raises(RlsimError, match="zero3_reshard_after_forward"):
        simulator.simulate(workload={"preset": "grpo-qwen2.5-7b", "train_software": "areal-archon"},
                           topology={"preset": "dgx-h100", "nodes": 1}, overrides=[f"{KEY}=sometimes"])


def _plan(path, capsys, *extra: str) -> dict:
    space = [f"planner.space.{k}=[{v}]" for k, v in LAYOUT.items() if k != "zero"] + ["planner.space.vpp=[1]"]
    argv = ["plan", str(path), "--top", "1", "--json"]
    for item in [*space, *extra]:
        argv += ["--set", item]
    assert main(argv) == 0
    (best,) = json.loads(capsys.readouterr().out)
    assert {k: best["layout"][k] for k in LAYOUT} == LAYOUT
    return best


def _run(path, *extra: str) -> tuple[float, float]:
    s = simulator.simulate(str(path), overrides=[f"workload.train_layout={json.dumps(LAYOUT)}", *extra],
                           keep_samples=False).summary
    return s["stage_time_s"]["train_actor"], s["peak_memory_by_phase"]["train"]


def test_plan_and_run_price_an_archon_pipeline_keeping_its_layers_gathered(tmp_path, capsys):
    path = tmp_path / "archon.yaml"
    path.write_text(SCENARIO)
    plan = _plan(path, capsys)
    kept = _plan(path, capsys, f"{KEY}=false")   # what the importer wrote for archon's default policy at pp 2
    resharded = _plan(path, capsys, f"{KEY}=true")
    assert (plan["step_time_s"], plan["memory_per_device_bytes"]) == (kept["step_time_s"],
                                                                     kept["memory_per_device_bytes"])
    # resharding gathers each layer again in the backward; its peak is the same, as torch's pipelining
    # leaves every layer of a stage whole from its first backward on (set_reshard_after_backward(False))
    assert resharded["step_time_s"] > plan["step_time_s"]
    assert resharded["memory_per_device_bytes"] == plan["memory_per_device_bytes"]
    run = _run(path)
    assert run == _run(path, f"{KEY}=false") and run != _run(path, f"{KEY}=true")


@pytest.mark.parametrize("value", ["sometimes", 1, None])
def test_a_value_neither_boolean_nor_the_policy_gets_one_message(value):
    """The union's two members said apart (a 'bool' sub-field and a literal) read as two errors; one
    message names the three values it takes."""
    with pytest.raises(ValueError, match="is neither true, false nor 'unless_pipelined'") as err:
        MemoryParams(zero3_reshard_after_forward=value)
    assert len(err.value.errors()) == 1
    assert MemoryParams(zero3_reshard_after_forward="unless_pipelined").reshards_after_forward(2) is False
