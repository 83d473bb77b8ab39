"""Megatron-Core's moe_token_dispatcher_type as the frameworks give it -> workload.train_params.comm.
moe_token_dispatcher (frameworks/common.py megatron_token_dispatcher): verl and SkyRL map it and refuse
allgather beside the variable_seq_lengths=True they set (Megatron-Core refuses the pair), NeMo RL maps both,
AReaL 1.0.4 never reads it; verl and NeMo RL map flex with moe_enable_deepep (either without the other
refused, as Megatron-Core refuses it); Megatron-Core's other dispatchers are refused naming the key."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
FIELD = "workload.train_params.comm.moe_token_dispatcher"


def _dispatcher(imported) -> str | None:
    return imported.scenario["workload"].get("train_params", {}).get("comm", {}).get("moe_token_dispatcher")


VERL_KEY = "actor_rollout_ref.actor.megatron.override_transformer_config.moe_token_dispatcher_type"
VERL_MOE = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4"]
SKYRL_KEY = "trainer.policy.megatron_config.moe_token_dispatcher_type"
SKYRL_MOE = ["trainer.strategy=megatron", "trainer.policy.model.path=Qwen/Qwen3-30B-A3B",
             "trainer.policy.megatron_config.tensor_model_parallel_size=2",
             "trainer.policy.megatron_config.expert_model_parallel_size=4"]
NEMO_KEY = "policy.megatron_cfg.moe_token_dispatcher_type"
NEMO_MOE = ["policy.model_name=Qwen/Qwen3-30B-A3B", "policy.megatron_cfg.tensor_model_parallel_size=2",
            "policy.megatron_cfg.pipeline_model_parallel_size=1", "policy.megatron_cfg.expert_model_parallel_size=8"]
CASES = {"verl": ("verl-grpo-qwen2.5-7b.yaml", VERL_KEY, VERL_MOE),
         "skyrl": ("skyrl-grpo-qwen2.5-1.5b-gsm8k.sh", SKYRL_KEY, SKYRL_MOE),
         "nemo-rl": ("nemo-rl-grpo-llama3.1-8b.yaml", NEMO_KEY, NEMO_MOE)}


def _import(framework: str, value: str | None = None):
    """The framework's MoE import, with its dispatcher key given ``value`` (SkyRL's dataclass tree has the
    key: no Hydra '+')."""
    config, key, moe = CASES[framework]
    given = [] if value is None else [f"{'' if framework == 'skyrl' else '+'}{key}={value}"]
    return import_config(framework, EXAMPLES / config, [*moe, *given])


@pytest.mark.parametrize("framework", sorted(CASES))
def test_alltoall_is_mapped_and_left_out_is_the_stacks_alltoall(framework):
    key = CASES[framework][1]
    left_out = _import(framework)
    assert _dispatcher(left_out) is None   # the stack's default: alltoall
    given = _import(framework, "alltoall")
    assert _dispatcher(given) == "alltoall" and key in given.mapped
    load_scenario(given.scenario)


@pytest.mark.parametrize("framework, where", [("verl", "verl 0.6.1 models/mcore/config_converter.py"),
                                              ("skyrl", "skyrl 0.3.0 backends/skyrl_train/workers/megatron")])
def test_allgather_beside_the_frameworks_variable_seq_lengths_is_refused(framework, where):
    """verl and SkyRL set Megatron's variable_seq_lengths=True, beside which Megatron-Core 0.10 - 0.13
    refuses the allgather dispatcher at start-up ("please use alltoall dispatcher instead")."""
    key = CASES[framework][1]
    with pytest.raises(RlsimError) as exc:
        _import(framework, "allgather")
    assert exc.value.field == key and where in exc.value.message and "variable_seq_lengths" in exc.value.message
    assert exc.value.fix == f"pass {key}=alltoall"


def test_nemo_rl_maps_allgather_and_the_scenario_prices_it():
    imported = _import("nemo-rl", "allgather")
    assert _dispatcher(imported) == "allgather" and NEMO_KEY in imported.mapped
    scenario = load_scenario(imported.scenario)
    assert scenario.workload.train_params.comm.moe_token_dispatcher == "allgather"


def test_nemo_rl_on_a_dense_model_lists_it_ignored():
    """Either dispatcher moves nothing without routed experts: not passed on (the scenario would refuse it)."""
    recipe = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    dense = import_config("nemo-rl", recipe, ["policy.megatron_cfg.tensor_model_parallel_size=2",
                                              f"+{NEMO_KEY}=allgather"])
    assert _dispatcher(dense) is None and "moves nothing" in dense.ignored[NEMO_KEY]
    load_scenario(dense.scenario)


@pytest.mark.parametrize("framework", sorted(CASES))
@pytest.mark.parametrize("value, said", [("alltoall_seq", "alltoall"), ("ring", "unknown")])
def test_other_dispatchers_are_refused_naming_the_key(framework, value, said):
    key = CASES[framework][1]
    with pytest.raises(RlsimError) as exc:
        _import(framework, value)
    assert exc.value.field == key and said in exc.value.message and "alltoall" in exc.value.fix


def test_areal_never_reads_it():
    """AReaL 1.0.4's megatron engine runs alltoall whatever actor.megatron.moe_token_dispatcher_type says."""
    imported = import_config("areal", EXAMPLES / "areal-grpo-qwen2.5-1.5b.yaml",
                             ["actor.backend=megatron:(attn:d2p2t2|ffn:d1p2e4)", "actor.path=Qwen/Qwen3-30B-A3B",
                              "rollout.backend=sglang:d2t4", "actor.megatron.moe_token_dispatcher_type=allgather"])
    assert _dispatcher(imported) is None
    assert "Ignoring mcore_config.moe_token_dispatcher_type" in imported.ignored["actor.megatron.moe_token_dispatcher_type"]


DEEPEP_KEYS = {"verl": "actor_rollout_ref.actor.megatron.override_transformer_config.moe_enable_deepep",
               "nemo-rl": "policy.megatron_cfg.moe_enable_deepep"}


def _import_deepep(framework: str, dispatcher: str | None, deepep: str | None):
    config, key, moe = CASES[framework]
    given = [f"+{key}={dispatcher}"] if dispatcher is not None else []
    given += [f"+{DEEPEP_KEYS[framework]}={deepep}"] if deepep is not None else []
    return import_config(framework, EXAMPLES / config, [*moe, *given])


@pytest.mark.parametrize("framework", sorted(DEEPEP_KEYS))
def test_flex_with_deepep_is_mapped_and_the_scenario_prices_it(framework):
    """verl's override_transformer_config / NeMo RL's megatron_cfg moe_token_dispatcher_type flex beside
    moe_enable_deepep true: rlsim's flex, both keys listed mapped."""
    imported = _import_deepep(framework, "flex", "true")
    assert _dispatcher(imported) == "flex"
    assert CASES[framework][1] in imported.mapped and DEEPEP_KEYS[framework] in imported.mapped
    assert load_scenario(imported.scenario).workload.train_params.comm.moe_token_dispatcher == "flex"


@pytest.mark.parametrize("framework", sorted(DEEPEP_KEYS))
@pytest.mark.parametrize("dispatcher, deepep, said, fix", [
    ("flex", None, "DeepEP is not enabled", "=true"), ("flex", "false", "DeepEP is not enabled", "=true"),
    (None, "true", "only supported with flex", "=flex"), ("alltoall", "true", "only supported with flex", "=flex")])
def test_flex_and_deepep_apart_are_refused_as_megatron_refuses_them(framework, dispatcher, deepep, said, fix):
    """megatron-core 0.13.0: MoEFlexTokenDispatcher asserts moe_enable_deepep; TransformerConfig refuses
    moe_enable_deepep beside any other dispatcher. Refused at moe_enable_deepep, the fix naming the pair."""
    with pytest.raises(RlsimError) as exc:
        _import_deepep(framework, dispatcher, deepep)
    err = exc.value
    assert err.field == DEEPEP_KEYS[framework] and said in err.message and "megatron-core 0.13.0" in err.message
    assert fix in err.fix


@pytest.mark.parametrize("framework", sorted(DEEPEP_KEYS))
def test_deepep_false_beside_alltoall_is_megatrons_default(framework):
    imported = _import_deepep(framework, "alltoall", "false")
    assert _dispatcher(imported) == "alltoall"


def test_skyrl_flex_is_refused_at_its_key():
    """SkyRL's moe_enable_deepep is not mapped: its flex is refused, naming the scenario key that sets it."""
    with pytest.raises(RlsimError) as exc:
        _import("skyrl", "flex")
    assert exc.value.field == SKYRL_KEY and "DeepEP" in exc.value.message and FIELD in exc.value.fix
