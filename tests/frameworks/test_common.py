"""What every framework importer shares (simulator/frameworks/common.py)."""
import pytest


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
