"""The SGLang engines and the Mamba / linear-attention models (engine_software.py), read in the sglang
0.4.6.post5 / 0.5.2 / 0.5.6 wheels: the versions that have no such architecture (srt/models/) refuse
the model; the radix cache and overlap scheduler SGLang turns off by the architecture are off."""
from __future__ import annotations

import pytest

from simulator.engine_software import (
    ENGINE_SOFTWARE,
    GATED_DELTANET,
    MAMBA2,
    model_forced,
    refuse_missing_architecture,
    state_layer_kind,
)
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.inference import StepCost
from simulator.params import InferenceParams
from simulator.planner.base import RolloutSpace
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

NEMOTRON = "nemotron-h-8b"          # 24 Mamba-2 layers
QWEN3_NEXT = "qwen3-next-80b-a3b"   # 36 Gated DeltaNet layers


def _scenario(engine: str, model: str, rollout_layout: dict | None = None, inference: dict | None = None) -> dict:
    workload = {"model": model, "prompts_per_step": 8, "samples_per_prompt": 4, "engine": engine,
                "rollout_layout": rollout_layout or {"tp": 4 if model == QWEN3_NEXT else 1}}
    if inference is not None:
        workload["inference"] = inference
    return {"topology": {"preset": "dgx-h100", "nodes": 4 if model == QWEN3_NEXT else 1}, "workload": workload,
            "iterations": 1}


def _costs(engine: str, model: str, **kwargs) -> LlmCosts:
    sc = load_scenario(_scenario(engine, model, **kwargs))
    return LlmCosts(sc, load_topology(sc.topology))


def test_each_sglang_version_runs_the_state_layers_its_wheel_has_models_for():
    """0.4.6.post5: no Mamba nor linear-attention model; 0.5.2: qwen3_next.py, no nemotron_h.py; 0.5.6
    both."""
    assert state_layer_kind(load_model(NEMOTRON)) == MAMBA2
    assert state_layer_kind(load_model(QWEN3_NEXT)) == GATED_DELTANET
    assert state_layer_kind(load_model("llama3.1-8b")) is None
    assert ENGINE_SOFTWARE["sglang"].state_layer_kinds == frozenset()
    assert ENGINE_SOFTWARE["sglang-0.5.2"].state_layer_kinds == {GATED_DELTANET}
    assert ENGINE_SOFTWARE["sglang-0.5.6"].state_layer_kinds == {MAMBA2, GATED_DELTANET}
    # vLLM (tests/test_vllm_engine_models.py): V1 from 0.9 both, before none
    assert all(e.state_layer_kinds == {MAMBA2, GATED_DELTANET} for name, e in ENGINE_SOFTWARE.items()
               if name.startswith("vllm-v1"))


@pytest.mark.parametrize(("engine", "model", "kind"), [("sglang", NEMOTRON, "24 Mamba-2"),
                                                        ("sglang", QWEN3_NEXT, "36 Gated DeltaNet"),
                                                        ("sglang-0.5.2", NEMOTRON, "24 Mamba-2")])
def test_an_engine_without_the_architecture_refuses_the_model(engine, model, kind):
    """A run and the planner refuse it, naming workload.engine, the model and the engines that run it."""
    with pytest.raises(RlsimError) as run:
        _costs(engine, model)
    assert run.value.field == "workload.engine"
    assert f"workload.engine {engine} cannot run workload.model {model}: its {kind} layers" in run.value.message
    assert run.value.fix.startswith("use workload.engine sglang-0.5.6 or vllm-v1")
    from simulator.autoplan import engine_rollout
    sc = load_scenario(_scenario(engine, model))
    with pytest.raises(RlsimError, match=f"cannot run workload.model {model}"):
        engine_rollout(sc.workload, load_model(model), load_topology(sc.topology), range(8), RolloutSpace(), set())


@pytest.mark.parametrize(("engine", "model"), [("sglang-0.5.2", QWEN3_NEXT), ("sglang-0.5.6", QWEN3_NEXT),
                                                ("sglang-0.5.6", NEMOTRON), ("vllm-v1", NEMOTRON),
                                                ("vllm-v1", QWEN3_NEXT), ("sglang", "llama3.1-8b")])
def test_an_engine_with_the_architecture_runs_it(engine, model):
    refuse_missing_architecture(engine, load_model(model))
    refuse_missing_architecture(None, load_model(model))
    assert _costs(engine, model).model.name == model


def _forced(engine: str | None, model: str, **given) -> tuple[dict[str, bool], list[str]]:
    params, notes = model_forced(engine, InferenceParams(async_scheduling=True, **given), load_model(model))
    return {"prefix": params.enable_prefix_caching, "overlap": params.async_scheduling}, notes


@pytest.mark.parametrize(("engine", "model", "given", "runs"), [
    # 0.5.6: Mamba-2 -> no radix cache; Qwen3-Next with the radix cache -> no overlap scheduler
    ("sglang-0.5.6", NEMOTRON, {}, {"prefix": False, "overlap": True}),
    ("sglang-0.5.6", QWEN3_NEXT, {"linear_attention_radix_cache": True}, {"prefix": True, "overlap": False}),
    ("sglang-0.5.6", QWEN3_NEXT, {"linear_attention_radix_cache": True, "enable_prefix_caching": False},
     {"prefix": False, "overlap": True}),
    # 0.5.2: a Gated DeltaNet hybrid -> no radix cache, the overlap scheduler on
    ("sglang-0.5.2", QWEN3_NEXT, {"linear_attention_radix_cache": False}, {"prefix": False, "overlap": True}),
    # attention only, vLLM, no engine: as given
    ("sglang-0.5.6", "llama3.1-8b", {}, {"prefix": True, "overlap": True}),
    ("vllm-v1", NEMOTRON, {}, {"prefix": True, "overlap": True}),
    (None, QWEN3_NEXT, {}, {"prefix": True, "overlap": True})])
def test_sglang_forces_its_radix_cache_and_overlap_scheduler_by_the_model(engine, model, given, runs):
    """What each SGLang version runs the model with, and a note for each value it changes."""
    ran, notes = _forced(engine, model, **given)
    assert ran == runs
    changed = [key for key, field in (("prefix", "enable_prefix_caching"), ("overlap", "async_scheduling"))
               if ran[key] != given.get(field, True)]
    assert len(notes) == len(changed)
    for note in notes:
        assert note.startswith(f"workload.engine {engine} runs {model} with inference.") and "whatever it is given" in note


def test_a_run_and_the_planner_take_the_forced_settings_and_say_so():
    """LlmCosts runs the forced values (a served model starts from the engine's own), the run's
    summary notes say it, and the planner's constants (engine_rollout, per candidate too) hold them."""
    from simulator.api import simulate
    from simulator.autoplan import engine_rollout
    costs = _costs("sglang-0.5.6", QWEN3_NEXT)
    assert costs.inference_params.async_scheduling is False and costs._engine_params.async_scheduling is True
    assert costs.engine_notes == model_forced("sglang-0.5.6", costs._engine_params, costs.model)[1] != []
    assert _costs("sglang-0.5.6", "llama3.1-8b").engine_notes == []
    sc = load_scenario(_scenario("sglang-0.5.6", NEMOTRON))
    _space, inference, at_layout = engine_rollout(sc.workload, load_model(NEMOTRON), load_topology(sc.topology),
                                                  range(8), RolloutSpace(), set())
    assert inference.enable_prefix_caching is False and at_layout(1, 256).enable_prefix_caching is False
    # a workload that gives prefix caching is told too (64 slots: the engine fits beside the trainer)
    given = _scenario("sglang-0.5.6", NEMOTRON, rollout_layout={"tp": 1, "gpu_memory_utilization": 0.6},
                      inference={"enable_prefix_caching": True, "mamba_slots": 64})
    notes = simulate(load_scenario(given)).summary["notes"]
    assert any(n.startswith("workload.engine sglang-0.5.6 runs nemotron-h-8b with inference.enable_prefix_caching "
                            "false whatever it is given (true here)") for n in notes)


def test_sglangs_state_slots_follow_the_running_cap_it_is_given():
    """--max-mamba-cache-size unset: --max-running-requests when given (verl: rollout.max_num_seqs),
    else 512; a given mamba_slots wins."""
    from simulator.llm.sglang_pool import SGLANG_MAMBA_SLOTS_UNSET, mamba_slots
    assert SGLANG_MAMBA_SLOTS_UNSET == 512
    assert mamba_slots(InferenceParams(kv_pool="sglang"), 256) == 512
    assert mamba_slots(InferenceParams(kv_pool="sglang", max_running_requests_given=True), 256) == 256
    assert mamba_slots(InferenceParams(kv_pool="sglang", max_running_requests_given=True, mamba_slots=64), 256) == 64


@pytest.mark.parametrize(("engine", "layout", "inference", "passed"), [
    ("sglang-0.5.6", {"tp": 1, "max_num_seqs": 256}, None, True),
    ("sglang-0.5.2", {"tp": 1, "max_num_seqs": 256}, None, True),
    ("sglang-0.5.6", {"tp": 1}, None, False),
    ("sglang-0.5.6", "auto", None, False),
    ("sglang-0.5.6", {"tp": 1, "max_num_seqs": 256}, {"max_running_requests_given": False}, False),
    ("vllm-v1", {"tp": 1, "max_num_seqs": 256}, None, False)])
def test_a_named_sglang_engine_is_given_the_running_cap_the_workload_gives(engine, layout, inference, passed):
    workload = load_scenario(_scenario(engine, QWEN3_NEXT, rollout_layout=layout, inference=inference)).workload
    assert workload.inference.max_running_requests_given is passed


def test_nemotron_h_runs_as_many_slots_as_the_running_cap_sglang_is_given():
    """Nemotron-H-8B on one H100 under sglang-0.5.6: max_num_seqs 256 given -> 256 slots of 102,137,856
    bytes, the tokens the rest; unset -> 512; mamba_slots 128 wins; 1,024 (verl's default) do not fit,
    as SGLang's 'Not enough memory', and the fix names the running cap."""
    slot = 102_137_856
    given = _costs("sglang-0.5.6", NEMOTRON, rollout_layout={"tp": 1, "max_num_seqs": 256})
    cost = StepCost(given.model, given.device, given.rollout_layout, given.inference_params)
    assert cost.max_running == 256 and cost.state_bytes_per_seq_dev == slot
    assert cost.kv_capacity_tokens == int((cost.kv_free_bytes_dev - 256 * slot) // (4 * 2 * 8 * 128 * 2))
    unset = _costs("sglang-0.5.6", NEMOTRON)
    assert StepCost(unset.model, unset.device, unset.rollout_layout, unset.inference_params).max_running == 512
    fixed = _costs("sglang-0.5.6", NEMOTRON, rollout_layout={"tp": 1, "max_num_seqs": 256}, inference={"mamba_slots": 128})
    assert StepCost(fixed.model, fixed.device, fixed.rollout_layout, fixed.inference_params).max_running == 128
    with pytest.raises(RlsimError, match="1024 Mamba state slots") as refused:
        _costs("sglang-0.5.6", NEMOTRON, rollout_layout={"tp": 1, "max_num_seqs": 1024})
    assert "follows rollout_layout.max_num_seqs" in refused.value.fix


def test_the_passed_running_cap_round_trips_and_is_refused_only_off_sglang():
    """The snapshot keeps it (a reload does not pass the engine's own 2048); a full-attention model under
    an SGLang engine runs with it; under vLLM's pool it acts on nothing and is refused."""
    from simulator.api import simulate
    sc = load_scenario(_scenario("sglang-0.5.6", "llama3.1-8b", rollout_layout={"tp": 1}))
    again = load_scenario(sc.to_dict())
    assert again.workload.inference.max_running_requests_given is False
    given = load_scenario(_scenario("sglang-0.5.6", "llama3.1-8b", rollout_layout={
        "tp": 1, "max_num_seqs": 64, "gpu_memory_utilization": 0.6}))
    assert load_scenario(given.to_dict()).workload.inference.max_running_requests_given is True
    assert simulate(given).summary["makespan_s"] > 0
    with pytest.raises(RlsimError, match="max_running_requests_given applies with kv_pool: sglang"):
        simulate(load_scenario(_scenario("vllm-v1", "llama3.1-8b", rollout_layout={"tp": 1, "gpu_memory_utilization": 0.6},
                                         inference={"max_running_requests_given": True})))
