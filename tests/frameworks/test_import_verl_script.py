"""A verl launch script (`python3 -m verl.trainer.main_ppo key=value ...`, as verl's examples/*/run_*.sh):
its training command's Hydra overrides read over verl's defaults, as a YAML with the same keys."""
from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest
import yaml

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.frameworks.common import unflatten
from simulator.frameworks.shell import script_lines
from simulator.frameworks.verl_script import read_verl_script

OVERRIDES = {
    "algorithm.adv_estimator": "grpo",
    "data.train_batch_size": 256,
    "data.max_prompt_length": 512,
    "data.max_response_length": 1024,
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 8,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 8,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "actor_rollout_ref.rollout.n": 4,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 2,
}


def _script(tmp_path, body: str):
    path = tmp_path / "run_qwen2_5_7b.sh"
    path.write_text(body)
    return path


def _script_of(overrides: dict) -> str:
    """A launch script as verl's examples write it: variables, a continued command, extra arguments, a tee."""
    args = []
    for key, value in overrides.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        args.append(f"    {key}=$MODEL \\" if key == "actor_rollout_ref.model.path" else
                    f"    {key}=$((NNODES)) \\" if key == "trainer.nnodes" else f"    {key}={text} \\")
    return ("set -x\nexport VLLM_USE_V1=1\nMODEL=Qwen/Qwen2.5-7B-Instruct\nNNODES=2\n\n"
            "python3 -m verl.trainer.main_ppo \\\n" + "\n".join(args)
            + "\n    trainer.logger=['console','wandb'] \\\n    trainer.total_epochs=15 $@ 2>&1 | tee verl_demo.log\n")


def test_a_launch_script_imports_as_a_yaml_of_its_overrides(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(unflatten({**OVERRIDES, "trainer.total_epochs": 15})))
    script = _script(tmp_path, _script_of(OVERRIDES))
    from_yaml, from_script = import_config("verl", config), import_config("verl", script)
    def named_apart(scenario: dict) -> dict:   # the workload is named after its file
        workload = {k: v for k, v in scenario["workload"].items() if k not in ("name", "description")}
        return {**scenario, "workload": workload}

    assert named_apart(from_script.scenario) == named_apart(from_yaml.scenario)
    assert from_script.scenario["workload"]["name"] == "run_qwen2_5_7b"
    assert from_script.scenario["topology"]["nodes"] == 2
    assert from_script.scenario["workload"]["rollout_layout"]["tp"] == 2


def test_overrides_after_a_script_apply_on_top_of_its_command(tmp_path):
    script = _script(tmp_path, _script_of(OVERRIDES))
    more = import_config("verl", script, ["trainer.nnodes=4"])
    assert more.scenario["topology"]["nodes"] == 4


def test_a_script_without_a_verl_command_names_the_script_and_the_fix(tmp_path):
    script = _script(tmp_path, "set -x\necho nothing to train here\n")
    with pytest.raises(RlsimError, match="no verl training command") as err:
        import_config("verl", script)
    assert str(script) in str(err.value) and "main_ppo" in str(err.value)


def test_a_key_verl_does_not_have_is_refused_as_hydra_refuses_it(tmp_path):
    script = _script(tmp_path, "python3 -m verl.trainer.main_ppo trainer.nnodes=1 trainer.n_gpus_per_node=8 "
                               "actor_rollout_ref.rollout.tensor_model_paralel_size=2\n")
    with pytest.raises(RlsimError, match="tensor_model_paralel_size.* names a key the config does not have"):
        import_config("verl", script)


def test_a_comment_line_inside_a_continued_command_ends_it_as_bash_does(tmp_path):
    """bash ends a comment at its line's end, its trailing backslash included: the command stops at
    the comment line, and the lines after it are a command of their own, not its arguments."""
    script = _script(tmp_path, "python3 -m verl.trainer.main_ppo \\\n    trainer.nnodes=1 \\\n"
                               "    trainer.n_gpus_per_node=8 \\\n    # actor_rollout_ref.rollout.n=4 \\\n\n"
                               "echo done\n")
    assert read_verl_script(script, ["trainer", "actor_rollout_ref"]) == ["trainer.nnodes=1",
                                                                          "trainer.n_gpus_per_node=8"]


@pytest.mark.parametrize("comment", ["    # actor_rollout_ref.rollout.n=4 \\\n", "    # commented out\n"])
def test_arguments_orphaned_by_a_comment_line_are_an_error_naming_the_lines(tmp_path, comment):
    script = _script(tmp_path, "set -x\npython3 -m verl.trainer.main_ppo \\\n    trainer.nnodes=1 \\\n" + comment
                     + "    trainer.n_gpus_per_node=8 \\\n    actor_rollout_ref.rollout.n=4\n")
    with pytest.raises(RlsimError, match="line 5 .*not an argument of the command") as err:
        read_verl_script(script, ["trainer", "actor_rollout_ref"])
    assert str(script) in str(err.value) and "line 4" in str(err.value)
    assert "remove the comment on line 4 or move it out of the continued command" in str(err.value)


def test_a_comment_after_the_last_argument_swallows_the_backslash_as_bash_does(tmp_path):
    script = _script(tmp_path, "python3 -m verl.trainer.main_ppo trainer.nnodes=1 \\\n"
                               "    trainer.n_gpus_per_node=8 # the node's GPUs \\\n    +trainer.extra=1\n")
    with pytest.raises(RlsimError, match="line 3 .*'\\+trainer.extra=1'.*line 2"):
        read_verl_script(script, ["trainer"])


def test_the_logical_lines_are_the_commands_bash_runs(tmp_path):
    """script_lines against bash itself: each logical line echoed by bash is one of rlsim's lines."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash on this machine")
    body = ("echo A \\\n  a.b=1 \\\n  # c.d=2 \\\n\necho 'q # not a comment' \\\n  \"x\\\ny\" e=5#f # g \\\n"
            "echo B # h\n# echo C \\\necho D\n")
    script = _script(tmp_path, body)
    ran = subprocess.run([bash, str(script)], capture_output=True, text=True, check=True).stdout.splitlines()
    mine = [" ".join(shlex.split(line)) for line in script_lines(script, "script", "fix")]
    assert [line.removeprefix("echo ") for line in mine if line] == ran
