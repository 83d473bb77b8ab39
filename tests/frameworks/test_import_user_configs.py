"""Framework configs as their users write them (example scripts' overrides, Hydra forms), through the
importers: a key that changes the step time is mapped to the field it changes, never listed as ignored."""
from __future__ import annotations

from pathlib import Path

from simulator.frameworks import import_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
VERL = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
ROLLOUT = "actor_rollout_ref.rollout"


def test_verl_rollout_response_length_given_apart_from_the_data_cap_is_the_generation_cap():
    """verl 0.6's rollout.yaml sets response_length: ${oc.select:data.max_response_length,512} and its
    engines generate up to it (vllm_rollout_spmd.py / vllm_async_server.py max_tokens=config.response_length;
    responses padded to it): given apart from data.max_response_length (1024 in the example) it is the cap."""
    longer = import_config("verl", VERL, [f"{ROLLOUT}.response_length=2048"])
    assert longer.scenario["workload"]["response_length"]["max"] == 2048
    assert longer.report()["mapped"][f"{ROLLOUT}.response_length"].startswith("workload.response_length.max")
    # at the data cap (verl's interpolation, or the same value given twice) it changes nothing: ignored
    same = import_config("verl", VERL, [f"{ROLLOUT}.response_length=1024"])
    assert same.scenario["workload"]["response_length"]["max"] == 1024
    assert f"{ROLLOUT}.response_length" in same.report()["ignored"]
    assert import_config("verl", VERL, []).scenario["workload"]["response_length"]["max"] == 1024


MEGATRON = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2"]
GRAD_FP32 = "actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32"


def test_verl_megatron_grad_reduce_in_fp32_false_halves_the_gradient_buffer_and_its_reduction():
    """verl's Megatron DDP config sets grad_reduce_in_fp32 True (0.6.1 / 0.7.0 / 0.9.1 utils/megatron_utils.py
    ddp_config_dict), which override_ddp_config replaces; Megatron-Core's DDP then keeps main_grad in the
    parameters' dtype (grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype): false is a bf16
    gradient buffer (2 bytes a parameter, not 4) reduced in bf16."""
    off = import_config("verl", VERL, [*MEGATRON, f"+{GRAD_FP32}=false"])
    params = off.scenario["workload"]["train_params"]
    assert params["memory"]["grad_bytes_per_param"] == 2 and params["comm"]["grad_reduce_bytes_per_param"] == 2
    assert off.report()["mapped"][GRAD_FP32].startswith("workload.train_params.memory.grad_bytes_per_param")
    # true is verl's own value, rlsim's default: nothing written
    on = import_config("verl", VERL, [*MEGATRON, f"+{GRAD_FP32}=true"]).scenario["workload"].get("train_params", {})
    assert "grad_bytes_per_param" not in on.get("memory", {})
    assert "grad_reduce_bytes_per_param" not in on.get("comm", {})


def test_openrlhf_0_8_length_and_precision_flags_read_as_their_0_11_twins(tmp_path):
    """OpenRLHF 0.8.11's train_ppo_ray.py (read in its wheel) caps a prompt at --prompt_max_len and the
    generation at --generate_max_len (experience_maker.py: max_tokens=max_new_tokens), its engines' length at
    max_len or prompt_max_len + generate_max_len (both 1024 by default), and trains in bf16 with --bf16; the
    flags OpenRLHF's README scripts pass. 0.11.2's: rollout.max_new_tokens, data.max_len, ds.param_dtype."""
    head = ("python3 -m openrlhf.cli.train_ppo_ray --actor_num_nodes 1 --actor_num_gpus_per_node 8 "
            "--vllm_num_engines 4 --vllm_tensor_parallel_size 2 --colocate_all_models --pretrain "
            "meta-llama/Llama-3.1-8B-Instruct --remote_rm_url http://rm --train_batch_size 128 "
            "--rollout_batch_size 128 --n_samples_per_prompt 4 --advantage_estimator group_norm ")
    old = tmp_path / "old.sh"
    old.write_text(head + "--prompt_max_len 1024 --generate_max_len 512 --bf16\n")
    new = tmp_path / "new.sh"
    new.write_text(head + "--max_new_tokens 512 --max_len 1536 --param_dtype bf16\n")
    r_old, r_new = import_config("openrlhf", old), import_config("openrlhf", new)
    assert not r_old.unknown, r_old.unknown
    for r in (r_old, r_new):
        r.scenario["workload"].pop("name"), r.scenario["workload"].pop("description")
    assert r_old.scenario == r_new.scenario
    assert r_old.scenario["workload"]["response_length"]["max"] == 512
    assert r_old.scenario["workload"]["inference"]["max_model_len"] == 1536
    # 0.8.11's defaults where one is left out: 1024 each
    only_prompt = tmp_path / "prompt.sh"
    only_prompt.write_text(head + "--prompt_max_len 2048 --bf16\n")
    workload = import_config("openrlhf", only_prompt).scenario["workload"]
    assert (workload["response_length"]["max"], workload["inference"]["max_model_len"]) == (1024, 3072)


SKYRL = EXAMPLES / "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh"


def test_skyrl_train_flat_keys_in_a_script_or_override_are_refused_naming_their_new_name(tmp_path):
    """skyrl_train's example scripts pass generator.num_inference_engines=...; skyrl 0.3.0 refuses it, and
    rlsim's error names the 0.3.0 key (generator.inference_engine.num_engines) as it does for a YAML: the
    script's arguments and the command line's overrides went through the generic unknown-key error first."""
    import pytest

    from simulator.errors import RlsimError
    old = tmp_path / "old.sh"
    old.write_text(SKYRL.read_text().replace("generator.inference_engine.num_engines=$NUM_GPUS",
                                             "generator.num_inference_engines=$NUM_GPUS"))
    for path, overrides in ((old, []), (SKYRL, ["generator.gpu_memory_utilization=0.7"])):
        with pytest.raises(RlsimError, match="SkyRL refuses it") as info:
            import_config("skyrl", path, overrides)
        renamed = ("generator.inference_engine.num_engines" if path == old else
                   "generator.inference_engine.gpu_memory_utilization")
        assert renamed in info.value.fix and info.value.field.startswith("generator.")


def test_a_scripts_arithmetic_expansion_is_evaluated_as_bash_does(tmp_path):
    """Launch scripts size one count from others: TOTAL=$((NUM_NODES * NUM_GPUS)), $((NUM_GPUS / TP)) inline.
    bash's integer arithmetic ($VAR or bare names, + - * / %, / truncating), then the value is the key's;
    before, the expression's words were split into tokens and the key read as an unknown override."""
    import pytest

    from simulator.errors import RlsimError
    from simulator.frameworks.shell import expanded
    variables = {"NUM_NODES": "2", "NUM_GPUS": "8", "TP": "3"}
    assert expanded("x=$((NUM_NODES * NUM_GPUS))", variables) == "x=16"
    assert expanded("x=$(( $NUM_GPUS / TP + 1 ))", variables) == "x=3"          # 8 / 3 = 2 (integer) + 1
    assert expanded("x=$(((NUM_GPUS - 10) / 4))", variables) == "x=0"            # -2 / 4 truncates to 0
    assert expanded("x=$((NUM_GPUS % TP))", variables) == "x=2"
    # a variable the script does not set: ${NAME}, refused where its key is read, as an unset $NAME
    assert expanded("x=$((UNSET * 2))", variables) == "x=${UNSET}"
    unset = tmp_path / "unset.sh"
    unset.write_text(SKYRL.read_text().replace("trainer.train_batch_size=1024", "trainer.train_batch_size=$((UNSET * 2))"))
    with pytest.raises(RlsimError, match="UNSET") as info:
        import_config("skyrl", unset)
    assert info.value.field == "trainer.train_batch_size"
    script = tmp_path / "sky.sh"
    script.write_text(SKYRL.read_text().replace("NUM_GPUS=8", "NUM_NODES=1\nGPUS_PER_NODE=8\nNUM_GPUS=$((NUM_NODES * "
                                                                         "GPUS_PER_NODE))")
                      .replace("generator.inference_engine.num_engines=$NUM_GPUS",
                               "generator.inference_engine.num_engines=$(( NUM_GPUS / 2 ))")
                      .replace("generator.inference_engine.tensor_parallel_size=1",
                               "generator.inference_engine.tensor_parallel_size=2"))
    r = import_config("skyrl", script)
    assert r.scenario["workload"]["rollout_layout"]["tp"] == 2
    assert r.report()["source"] == str(script) and not r.unknown


def test_a_launch_script_leaves_single_quoted_text_unexpanded_as_bash_does():
    """bash expands nothing inside single quotes; inside double quotes a single quote is a character."""
    from simulator.frameworks.shell import expanded

    names = {"A": "1", "B": "two"}
    assert expanded("x=$A y='$B' z=\"$B '$A'\"", names) == "x=1 y='$B' z=\"two '1'\""
    assert expanded("$((A + 1)) '$((A + 1))'", names) == "2 '$((A + 1))'"
    assert expanded("w=\\'$A", names) == "w=\\'1"   # an escaped quote opens nothing
