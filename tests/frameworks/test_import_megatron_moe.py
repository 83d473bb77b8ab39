"""The Megatron-Core MoE kernel settings verl's override_transformer_config and NeMo RL's megatron_cfg both
pass to the TransformerConfig (frameworks/megatron_moe.py, one set of rules): moe_permute_fusion and
moe_router_dtype -> workload.train_params.compute, not passed on a dense model, an unknown dtype refused;
NeMo RL's recipe keys under the same rules as verl's."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.frameworks.megatron_moe import MOE_KERNEL_RULES
from simulator.frameworks.nemo_rl import RULES as NEMO_RULES
from simulator.frameworks.verl import RULES as VERL_RULES
from simulator.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
RECIPE = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
M = "policy.megatron_cfg"
MOE = ["policy.model_name=Qwen/Qwen3-30B-A3B", f"{M}.tensor_model_parallel_size=2",
       f"{M}.pipeline_model_parallel_size=1", f"{M}.expert_model_parallel_size=8"]
VERL_SECTION = "actor_rollout_ref.actor.megatron.override_transformer_config"


def _compute(imported) -> dict:
    compute = imported.scenario["workload"].get("train_params", {}).get("compute", {})
    return {k: v for k, v in compute.items() if k in ("moe_permute_fusion", "moe_router_dtype")}


def test_verl_and_nemo_rl_read_the_keys_by_one_rule():
    for key, rule in MOE_KERNEL_RULES.items():
        assert NEMO_RULES[f"{M}.{key}"] is rule and VERL_RULES[f"{VERL_SECTION}.{key}"] is rule


@pytest.mark.parametrize("given, compute", [
    ({"moe_permute_fusion": "true"}, {"moe_permute_fusion": True}),
    ({"moe_router_dtype": "fp64"}, {"moe_router_dtype": "fp64"}),
    ({"moe_permute_fusion": "true", "moe_router_dtype": "fp32"}, {"moe_permute_fusion": True, "moe_router_dtype": "fp32"}),
    ({"moe_permute_fusion": "false", "moe_router_dtype": "null"}, {})])
def test_nemo_rl_maps_the_fused_permute_and_the_router_dtype(given, compute):
    imported = import_config("nemo-rl", RECIPE, [*MOE, *(f"+{M}.{k}={v}" for k, v in given.items())])
    assert _compute(imported) == compute
    assert all(f"{M}.{k}" in imported.mapped for k in given)
    loaded = load_scenario(imported.scenario).workload.train_params.compute
    assert (loaded.moe_permute_fusion, loaded.moe_router_dtype) == (compute.get("moe_permute_fusion", False),
                                                                    compute.get("moe_router_dtype"))


def test_nemo_rl_on_a_dense_model_lists_them_ignored_and_refuses_an_unknown_dtype():
    dense = import_config("nemo-rl", RECIPE, [f"+{M}.moe_permute_fusion=true", f"+{M}.moe_router_dtype=fp64"])
    assert _compute(dense) == {}
    assert all("no routed experts" in dense.ignored[f"{M}.{k}"] for k in ("moe_permute_fusion", "moe_router_dtype"))
    load_scenario(dense.scenario)
    with pytest.raises(RlsimError) as exc:
        import_config("nemo-rl", RECIPE, [*MOE, f"+{M}.moe_router_dtype=fp16"])
    assert exc.value.field == f"{M}.moe_router_dtype"
