"""The SGLang engines and the Mamba / linear-attention models (engine_software.py): the versions that
have no such architecture refuse the model, read in the sglang 0.4.6.post5 / 0.5.2 / 0.5.6 wheels'
srt/models/."""
from __future__ import annotations

import pytest

from simulator.engine_software import (
    ENGINE_SOFTWARE,
    GATED_DELTANET,
    MAMBA2,
    refuse_missing_architecture,
    state_layer_kind,
)
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
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
    both; the vLLM engines are not restricted here."""
    assert state_layer_kind(load_model(NEMOTRON)) == MAMBA2
    assert state_layer_kind(load_model(QWEN3_NEXT)) == GATED_DELTANET
    assert state_layer_kind(load_model("llama3.1-8b")) is None
    assert ENGINE_SOFTWARE["sglang"].state_layer_kinds == frozenset()
    assert ENGINE_SOFTWARE["sglang-0.5.2"].state_layer_kinds == {GATED_DELTANET}
    assert ENGINE_SOFTWARE["sglang-0.5.6"].state_layer_kinds == {MAMBA2, GATED_DELTANET}
    assert all(e.state_layer_kinds is None for name, e in ENGINE_SOFTWARE.items() if name.startswith("vllm"))


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
