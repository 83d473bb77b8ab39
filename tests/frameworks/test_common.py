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
