"""The architectures each named engine version has (engine_software.py), read in the vllm 0.7.3 /
0.8.5 / 0.9.2 / 0.10.1.1 / 0.11.0 wheels' vllm/model_executor/models/registry.py and the sglang
0.4.6.post5 wheel's srt/models/: an engine without the model's architecture refuses it."""
from __future__ import annotations

import pytest

from simulator.engine_software import ENGINE_SOFTWARE, MODEL_CLASSES, refuse_missing_architecture
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.model_presets import PRESETS
from simulator.planner.base import RolloutSpace
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

# engine -> the presets' model types it lacks (state layers and architectures)
LACKS = {"vllm-v0": {"nemotron_h", "qwen3_next", "qwen3", "qwen3_moe", "gemma3_text", "gpt_oss"},
         "vllm-0.8": {"nemotron_h", "qwen3_next", "gpt_oss"}, "vllm-0.8-async": {"nemotron_h", "qwen3_next", "gpt_oss"},
         "vllm-v1": set(), "vllm-v1-async": set(), "vllm-v1-server": set(),
         "sglang": {"nemotron_h", "qwen3_next", "gpt_oss"}, "sglang-0.5.2": {"nemotron_h"}, "sglang-0.5.6": set()}
ONE_PER_TYPE = {load_model(name).model_type: name for name in reversed(list(PRESETS))}


def _refused(engine: str, model: str) -> bool:
    try:
        refuse_missing_architecture(engine, load_model(model))
    except RlsimError:
        return True
    return False


def test_every_engine_refuses_exactly_the_preset_architectures_its_version_lacks():
    assert set(LACKS) == set(ENGINE_SOFTWARE)
    for engine, lacks in LACKS.items():
        assert {t for t, name in ONE_PER_TYPE.items() if _refused(engine, name)} == lacks, engine
    assert set(MODEL_CLASSES) == {t for lacks in LACKS.values() for t in lacks} - {"nemotron_h", "qwen3_next"}


@pytest.mark.parametrize(("engine", "model", "message", "fix"), [
    ("vllm-0.8", "qwen3-next-80b-a3b", "its 36 Gated DeltaNet layers need a model file such as qwen3_next.py "
     "(Qwen3-Next), which vllm 0.8.5's vllm/model_executor/models/registry.py does not have",
     "use workload.engine sglang-0.5.6 or vllm-v1"),
    ("vllm-v0", "nemotron-h-8b", "its 24 Mamba-2 layers need a model file such as nemotron_h.py (Nemotron-H), "
     "which vllm 0.7.3's vllm/model_executor/models/registry.py does not have", "use workload.engine sglang-0.5.6 or vllm-v1"),
    ("vllm-0.8-async", "gpt-oss-20b", "its architecture (gpt_oss: GptOssForCausalLM) is not in vllm 0.8.5's "
     "vllm/model_executor/models/registry.py", "use workload.engine vllm-v1, vllm-v1-async, vllm-v1-server, "
     "sglang-0.5.2, sglang-0.5.6 (a later version)"),
    ("vllm-v0", "qwen3-8b", "its architecture (qwen3: Qwen3ForCausalLM) is not in vllm 0.7.3's", "use workload.engine "
     "vllm-v1, vllm-v1-async, vllm-v1-server, vllm-0.8, vllm-0.8-async, sglang, sglang-0.5.2, sglang-0.5.6"),
    ("sglang", "gpt-oss-120b", "(gpt_oss: GptOssForCausalLM) is not in sglang 0.4.6.post5's srt/models/",
     "use workload.engine vllm-v1")])
def test_a_run_and_the_planner_refuse_an_architecture_the_version_lacks(engine, model, message, fix):
    from simulator.autoplan import engine_rollout
    topology = {"preset": "dgx-h100", "nodes": 4}
    sc = load_scenario({"topology": topology, "iterations": 1, "workload": {
        "model": model, "prompts_per_step": 8, "samples_per_prompt": 4, "engine": engine, "rollout_layout": {"tp": 8}}})
    with pytest.raises(RlsimError) as run:
        LlmCosts(sc, load_topology(sc.topology))
    assert run.value.field == "workload.engine"
    assert f"workload.engine {engine} cannot run workload.model {model}: " in run.value.message
    assert message in run.value.message and run.value.fix.startswith(fix)
    with pytest.raises(RlsimError, match=f"cannot run workload.model {model}"):
        engine_rollout(sc.workload, load_model(model), load_topology(sc.topology), range(8), RolloutSpace(), set())


@pytest.mark.parametrize(("engine", "model"), [("vllm-0.8", "qwen3-8b"), ("vllm-0.8", "gemma-3-4b"),
                                                ("vllm-0.8-async", "qwen3-30b-a3b"), ("vllm-v0", "llama3.1-8b"),
                                                ("vllm-v0", "deepseek-v3"), ("vllm-v1", "gpt-oss-20b"),
                                                ("sglang", "gemma-3-4b"), ("vllm-v0", "gpt-7.5b")])
def test_an_engine_with_the_architecture_loads_it(engine, model):
    """Including rlsim's own GPT-style models, which no registry is asked about."""
    assert not _refused(engine, model)
