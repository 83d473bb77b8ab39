"""What every framework importer shares (simulator/frameworks/common.py)."""
import importlib
from pathlib import Path

import pytest

from simulator.frameworks import import_config

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"


def test_a_teacher_or_reward_models_unknown_path_is_fixed_in_its_own_key_not_workload_model():
    """--set workload.model=PRESET replaces the policy: the hint a teacher's, reward model's and
    critic's unknown path gave (a guides trial)."""
    from simulator.errors import RlsimError
    from simulator.frameworks.common import model_for
    with pytest.raises(RlsimError) as info:
        model_for("Qwen/Qwen9-999B", "distillation.teacher_models.teacher_model.model_path", "v.yaml", policy=False)
    assert "workload.model" not in info.value.fix
    assert info.value.fix.startswith("pass distillation.teacher_models.teacher_model.model_path=")
    with pytest.raises(RlsimError) as info:
        model_for(None, "reward_model.model.path", "v.yaml", policy=False)
    assert "workload.model" not in info.value.fix
    with pytest.raises(RlsimError) as info:
        model_for("Qwen/Qwen9-999B", "actor_rollout_ref.model.path", "v.yaml")
    assert "--set workload.model=PRESET" in info.value.fix   # the policy's: --set can give it instead


def test_a_key_the_import_wrote_and_a_set_made_inapplicable_says_how_to_clear_it(capsys):
    """--set schedule.refit=reshard after a verl import: 'remove schedule.refit_gather_bytes_per_param',
    a key the user never wrote (a guides trial); --set KEY=null clears it, and the run goes."""
    from simulator.cli import main
    base = ["run", "--from-verl", "workloads/frameworks/verl-grpo-qwen2.5-7b.yaml", "--set", "schedule.refit=reshard",
            "--iterations", "1", "--set", "workload.prompts_per_step=16", "--set", "workload.mini_batch_prompts=16"]
    assert main(base) == 2
    assert "--set schedule.refit_gather_bytes_per_param=null clears it" in capsys.readouterr().err
    assert main([*base, "--set", "schedule.refit_gather_bytes_per_param=null", "--json"]) == 0


# (framework, its module, a step run before the importer writes train_params.memory, the shipped
# example, the overrides that make its trainer FSDP's)
MEMORY_WRITERS = [("areal", "areal", "_teacher", "areal-grpo-qwen2.5-1.5b.yaml", []),
                  ("nemo-rl", "nemo_rl", "_multi_turn", "nemo-rl-grpo-llama3.1-8b.yaml",
                   ["policy.dtensor_cfg.enabled=true", "policy.megatron_cfg.enabled=false"]),
                  ("skyrl", "skyrl_mapping", "_multi_turn", "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh", [])]


@pytest.mark.parametrize(("framework", "module", "step", "example", "fsdp"), MEMORY_WRITERS)
def test_importers_merge_their_memory_settings_beside_what_an_earlier_step_wrote(monkeypatch, framework, module, step,
                                                                                 example, fsdp):
    """The FSDP importers add their master-state bytes to workload.train_params.memory (and the rest of
    train_params) as verl's does (setdefault(...).update), never replacing a part an earlier step
    filled: a key an earlier step writes there survives, beside the importer's own."""
    mod = importlib.import_module(f"simulator.frameworks.{module}")
    original = getattr(mod, step)

    def earlier(v, w, *args):
        w["train_params"] = {"memory": {"zero3_reshard_after_forward": False}, "comm": {"dp_overlap_fraction": 0.5}}
        return original(v, w, *args)

    monkeypatch.setattr(mod, step, earlier)
    params = import_config(framework, EXAMPLES / example, fsdp).scenario["workload"]["train_params"]
    assert params["memory"]["zero3_reshard_after_forward"] is False and params["comm"]["dp_overlap_fraction"] == 0.5
    assert params["memory"]["resident_weight_bytes_per_param"] == 4.0   # the importer's fp32 master shard


@pytest.mark.parametrize(("framework", "example", "fsdp"), [(f, e, o) for f, _, _, e, o in MEMORY_WRITERS])
def test_fsdp_importers_price_the_fp32_master_adamw_step_as_verls(framework, example, fsdp):
    """SkyRL, NeMo RL's DTensor policy and AReaL's FSDP engine train an fp32 master shard with torch
    AdamW, as verl's FSDP workers do: the step reads and writes the shard (8), reads its gradient (4)
    and reads and writes m and v (16), 28 B a parameter like verl's import, not Megatron's 30 (which
    writes a bf16 copy back)."""
    verl = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").scenario["workload"]["train_params"]
    params = import_config(framework, EXAMPLES / example, fsdp).scenario["workload"]["train_params"]
    assert params["comm"]["optimizer_traffic_bytes_per_param"] == verl["comm"]["optimizer_traffic_bytes_per_param"] == 28


def test_areal_fsdp_step_traffic_follows_its_optimizer_and_megatron_keeps_rlsims_default():
    """AReaL's FSDP engine: AnyPrecisionAdamW (adam_bf16) reads and writes three bf16 states (12) over the
    fp32 shard (12): 24; SGD without momentum the shard and gradient alone: 12. Its megatron engine is
    Megatron's distributed optimizer: rlsim's default (no field)."""
    example = EXAMPLES / "areal-grpo-qwen2.5-1.5b.yaml"
    for kind, step in (("adam_bf16", 24), ("sgd", 12)):
        params = import_config("areal", example, [f"actor.optimizer.type={kind}"]).scenario["workload"]["train_params"]
        assert params["comm"]["optimizer_traffic_bytes_per_param"] == step
    megatron = import_config("areal", example, ["actor.backend=megatron:d4"]).scenario["workload"]
    assert "optimizer_traffic_bytes_per_param" not in megatron.get("train_params", {}).get("comm", {})


def test_nemo_rl_dtensor_policy_reads_no_megatron_optimizer_offload():
    """policy.megatron_cfg.* is listed ignored when the DTensor policy trains (it builds torch's AdamW):
    its optimizer_cpu_offload offloads nothing there (rlsim applied Megatron-Core's hybrid optimizer)."""
    opt = "policy.megatron_cfg.optimizer"
    r = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                      ["policy.dtensor_cfg.enabled=true", "policy.megatron_cfg.enabled=false",
                       f"{opt}.optimizer_cpu_offload=true", f"+{opt}.optimizer_offload_fraction=0.5"])
    assert f"{opt}.optimizer_cpu_offload" in r.ignored
    assert "offload" not in r.scenario["workload"]["train_params"]
