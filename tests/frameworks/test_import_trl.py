"""`--from-trl`: TRL 1.16.0 GRPO configs turned into scenarios (simulator/frameworks/trl.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.frameworks.common import in_table
from simulator.frameworks.trl_rules import RULES
from simulator.scenario import load_scenario

from .padded_attention import attention_squares, padded_tokens, row_keys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
COLOCATE = EXAMPLES / "trl-grpo-qwen2.5-1.5b-colocate.yaml"
SERVER = EXAMPLES / "trl-grpo-qwen2.5-7b-server.yaml"
DATA = Path(__file__).resolve().parent / "data"


def fields(name: str) -> list[str]:
    return [line for line in (DATA / name).read_text().splitlines() if line and not line.startswith("#")]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_field_of_trls_dataclasses_is_in_the_table():
    """GRPOConfig over TrainingArguments, ModelConfig, the grpo script's and `trl vllm-serve`'s arguments,
    as their 1.16.0 wheels define them: none falls to 'unknown'."""
    missing = [name for name in fields("trl-1.16.0-grpo-fields.txt") if not in_table(name, RULES)]
    missing += [f"vllm_serve.{name}" for name in fields("trl-1.16.0-vllm-serve-fields.txt")
                if not in_table(f"vllm_serve.{name}", RULES)]
    assert not missing


def test_the_colocated_example_is_trls_step():
    """A generation batch of per_device x processes x steps_per_generation (= gradient accumulation)
    samples in groups of num_generations; one engine a GPU holding its slice at once (max_num_seqs),
    TRL's 4096-token step budget; ZeRO-3 from TRL's zero3; gradient checkpointing; resident engines."""
    r = import_config("trl", COLOCATE)
    w, s = r.scenario["workload"], r.scenario["schedule"]
    assert (w["prompts_per_step"], w["samples_per_prompt"], w["mini_batch_prompts"], w["ppo_epochs"]) == (32, 16, 32, 1)
    assert w["train_layout"] == {"tp": 1, "pp": 1, "cp": 1, "zero": 3, "micro_batch": 4, "recompute": "full"}
    assert w["train_software"] == "trl"   # transformers' model code, no TP nor CP (params.TRL_ACCELERATE)
    assert w["rollout_layout"]["max_num_seqs"] == 4 * 1 * 16 and w["rollout_layout"]["gpu_memory_utilization"] == 0.3
    assert w["inference"] == {"max_num_batched_tokens": 4096} and w["engine"] == "vllm-v1"
    assert w["reference"] is False and w["reward"] == {"kind": "rule", "handover": "batch"}
    assert w["response_length"]["max"] == 2048 and w["model"] == "qwen2.5-1.5b"
    assert s == {"kind": "colocated", "refit": "full-tensors", "forward_micro_batch": 4, "distqueue": {"packed": False},
                 "switch": {"offload_optimizer": False, "engine_resident": True}}
    assert r.scenario["topology"] == {"preset": "dgx-h100", "nodes": 1}
    # four processes on one machine: four of its eight GPUs
    assert import_config("trl", COLOCATE, ["num_processes=4"]).scenario["topology"] == \
        {"preset": "dgx-h100", "nodes": 1, "devices_per_node": 4}
    assert not r.unknown and not r.unsupported
    load_scenario(r.scenario)


def test_the_server_example_is_split_pools():
    r = import_config("trl", SERVER)
    w, s = r.scenario["workload"], r.scenario["schedule"]
    assert s["kind"] == "disaggregated" and s["rollout_devices"] == 1
    # 8 x 7 x steps_per_generation 8 = 448 samples = 56 prompts x 8; an optimizer step every 4 slices
    assert (w["prompts_per_step"], w["mini_batch_prompts"], w["reference"]) == (56, 28, True)
    assert w["engine"] == "vllm-v1-server" and w["rollout_layout"]["gpu_memory_utilization"] == 0.9
    assert "max_num_seqs" not in w["rollout_layout"]          # the server's own default
    wide = import_config("trl", SERVER, ["vllm_serve.tensor_parallel_size=4", "num_processes=4",
                                         "steps_per_generation=16"])
    assert wide.scenario["schedule"]["rollout_devices"] == 4 and wide.scenario["workload"]["rollout_layout"]["tp"] == 4
    assert wide.scenario["workload"]["prompts_per_step"] == 8 * 4 * 16 // 8
    load_scenario(wide.scenario)
    assert "server mode only" in import_config("trl", COLOCATE, ["+vllm_serve.tensor_parallel_size=2"]).ignored[
        "vllm_serve.tensor_parallel_size"]


def test_vllm_options_trl_forwards_to_vllm_serve_are_read_or_listed():
    """`trl vllm-serve` forwards arguments its parser does not know to `vllm serve`
    (cli/commands/vllm_serve.py, scripts/vllm_serve.py build_command)."""
    r = import_config("trl", SERVER, ["vllm_serve.max_num_seqs=512", "vllm_serve.max_num_batched_tokens=16384",
                                      "vllm_serve.enable_chunked_prefill=false", "vllm_serve.pipeline_parallel_size=2",
                                      "vllm_serve.block_size=32", "num_processes=6"])
    w = r.scenario["workload"]
    assert (w["rollout_layout"]["max_num_seqs"], w["rollout_layout"]["pp"]) == (512, 2)
    assert (w["inference"]["max_num_batched_tokens"], w["inference"]["chunked_prefill"]) == (16384, False)
    assert r.scenario["schedule"]["rollout_devices"] == 2                  # tp 1 x pp 2 x dp 1
    assert "forwards" in r.unsupported["vllm_serve.block_size"] and not r.unknown
    load_scenario(r.scenario)


def test_data_parallel_servers_of_a_dense_model_are_refused():
    """TRL: data_parallel_size above 1 'for dense models is not supported/useful and will error out'."""
    with pytest.raises(RlsimError, match="dense model") as info:
        import_config("trl", SERVER, ["vllm_serve.data_parallel_size=2", "num_processes=6"])
    assert info.value.field == "vllm_serve.data_parallel_size" and "tensor_parallel_size" in info.value.fix
    moe = import_config("trl", SERVER, ["vllm_serve.data_parallel_size=2", "num_processes=6",
                                        "model_name_or_path=Qwen/Qwen3-30B-A3B"])
    assert moe.scenario["schedule"]["rollout_devices"] == 2


@pytest.mark.parametrize(("overrides", "field", "words"), [
    (["generation_batch_size=512", "steps_per_generation=4"], "generation_batch_size", "both given"),
    (["generation_batch_size=100"], "generation_batch_size", "not a multiple"),
    (["num_generations=24"], "num_generations", "whole groups"),
    (["num_generations=1", "gradient_accumulation_steps=1"], "num_generations", "at least 2"),
    (["steps_per_generation=6"], "gradient_accumulation_steps", "whole prompt groups"),
    (["use_vllm=false"], "use_vllm", "transformers' generate"),
    (["vllm_mode=remote"], "vllm_mode", "not one of TRL's"),
    (["bf16=false"], "bf16", "fp32 training"),
    (["vllm_tensor_parallel_size=3"], "vllm_tensor_parallel_size", "does not divide the 8 processes"),
])
def test_what_trl_refuses_and_what_rlsim_cannot_run_are_errors(overrides, field, words):
    with pytest.raises(RlsimError, match=words) as info:
        import_config("trl", COLOCATE, overrides)
    assert info.value.field == field and info.value.source == str(COLOCATE)


def test_the_old_log_prob_pass_follows_trls_rule():
    """Without the vLLM importance-sampling correction TRL skips the old log-probs only when each
    generation batch is one optimizer step, trained once."""
    def recompute(*overrides):
        return import_config("trl", COLOCATE, list(overrides)).scenario["schedule"].get("recompute_logprob", True)
    assert recompute() is True
    assert recompute("vllm_importance_sampling_correction=false") is False
    assert recompute("vllm_importance_sampling_correction=false", "num_iterations=2") is True
    assert recompute("vllm_importance_sampling_correction=false", "steps_per_generation=32") is True


@pytest.mark.parametrize(("launcher", "overrides", "zero", "extra"), [
    ("zero2", [], 2, {}),
    ("zero1", [], 1, {}),
    ("multi_gpu", [], 0, {}),
    ("fsdp2", [], 3, {"refit_gather_bytes_per_param": 4.0}),
    ("fsdp1", ["+accelerate.fsdp_config.fsdp_sharding_strategy=SHARD_GRAD_OP"], 2, {}),
    ("fsdp1", ["+accelerate.fsdp_config.fsdp_sharding_strategy=shard_grad_op"], 2, {}),
    ("fsdp1", ["+accelerate.fsdp_config.fsdp_sharding_strategy=NO_SHARD"], 0, {}),
    ("fsdp1", ["+accelerate.fsdp_config.fsdp_sharding_strategy=2"], 2, {}),
])
def test_the_accelerate_config_sets_the_backend(launcher, overrides, zero, extra):
    r = import_config("trl", COLOCATE, [f"accelerate_config={launcher}", *overrides])
    assert r.scenario["workload"]["train_layout"]["zero"] == zero
    assert all(r.scenario["schedule"].get(k) == value for k, value in extra.items())
    assert not r.unknown


@pytest.mark.parametrize("value", ["false", "f", "0"])
def test_fsdp2_reshard_after_forward_false_is_zero3_kept_gathered_to_the_backward(value):
    """accelerate 1.16.0's FSDP2 (utils/fsdp_utils.py fsdp2_prepare_model: fully_shard(reshard_after_forward=
    the plugin's bool, str_to_bool of the config's string)) shards every layer's state: ZeRO-3, each
    layer kept whole from its forward through its backward (as verl's fsdp2 and SkyRL's imports map it)."""
    r = import_config("trl", COLOCATE, ["accelerate_config=fsdp2",
                                        f"+accelerate.fsdp_config.fsdp_reshard_after_forward={value}"])
    w = r.scenario["workload"]
    assert w["train_layout"]["zero"] == 3
    assert w["train_params"]["memory"]["zero3_reshard_after_forward"] is False
    assert not r.unknown
    load_scenario(r.scenario)
    kept = import_config("trl", COLOCATE, ["accelerate_config=fsdp2"]).scenario["workload"]
    assert kept["train_layout"]["zero"] == 3 and "memory" not in kept["train_params"]


def test_fsdp2_reshard_after_forward_refuses_a_sharding_strategy_name():
    """accelerate 1.16.0's FSDP2 plugin reads the value as a bool (str_to_bool: 'invalid truth value
    full_shard'); FULL_SHARD / SHARD_GRAD_OP are FSDP1's names."""
    key = "accelerate.fsdp_config.fsdp_reshard_after_forward"
    with pytest.raises(RlsimError, match="FSDP2 takes true or false") as info:
        import_config("trl", COLOCATE, ["accelerate_config=fsdp2", f"+{key}=SHARD_GRAD_OP"])
    assert info.value.field == key and "fsdp_version" in info.value.fix
    with pytest.raises(RlsimError, match="1 or 2") as info:
        import_config("trl", COLOCATE, ["accelerate_config=fsdp2", "accelerate.fsdp_config.fsdp_version=3"])
    assert info.value.field == "accelerate.fsdp_config.fsdp_version"


@pytest.mark.parametrize("value", ["SHARD_GRAD_OP", "NO_SHARD", "false"])
def test_fsdp1_shards_by_its_sharding_strategy_not_reshard_after_forward(value):
    """`accelerate launch` (1.16.0 commands/launch.py, utils/launch.py) always sets FSDP_SHARDING_STRATEGY
    (FULL_SHARD, its argument's default, unless the config gives fsdp_sharding_strategy), and FSDP1's
    Accelerator.prepare_model takes sharding_strategy before reshard_after_forward: the latter is read by
    no one, so TRL's FSDP1 runs FULL_SHARD (ZeRO-3) whatever it says."""
    key = "accelerate.fsdp_config.fsdp_reshard_after_forward"
    r = import_config("trl", COLOCATE, ["accelerate_config=fsdp1", f"{key}={value}"])
    assert r.scenario["workload"]["train_layout"]["zero"] == 3
    assert "fsdp_sharding_strategy" in r.ignored[key]
    fsdp2 = "accelerate.fsdp_config.fsdp_sharding_strategy"
    r = import_config("trl", COLOCATE, ["accelerate_config=fsdp2", f"+{fsdp2}=SHARD_GRAD_OP"])
    assert r.scenario["workload"]["train_layout"]["zero"] == 3 and "FSDP2" in r.ignored[fsdp2]


def test_an_accelerate_config_file_and_its_offload(tmp_path):
    config = tmp_path / "ds.yaml"
    config.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 16, "num_machines": 2,
                                      "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "cpu",
                                                           "offload_param_device": "none"}}))
    r = import_config("trl", COLOCATE, [f"accelerate_config={config}", "~num_processes"])
    assert r.scenario["workload"]["train_params"]["offload"] == {"optimizer": True, "scope": "optimizer_step"}
    assert r.scenario["workload"]["train_params"]["memory"]["grad_partition_on_host"] is True   # ZeRO-Offload's
    assert r.scenario["topology"]["nodes"] == 2 and r.scenario["workload"]["prompts_per_step"] == 4 * 16 * 16 // 16
    both = import_config("trl", COLOCATE, [f"accelerate_config={config}",
                                           "+accelerate.deepspeed_config.offload_param_device=cpu"])
    assert both.scenario["workload"]["train_params"]["offload"] == {"fsdp_cpu_offload": True,
                                                                    "host_param_bytes_per_param": 2.0}
    assert "grad_partition_on_host" not in both.scenario["workload"]["train_params"]["memory"]
    load_scenario(r.scenario)
    load_scenario(both.scenario)
    with pytest.raises(RlsimError, match="stage 3 only") as info:
        import_config("trl", COLOCATE, ["accelerate_config=zero2", "accelerate.deepspeed_config.offload_param_device=cpu"])
    assert info.value.field == "accelerate.deepspeed_config.offload_param_device"
    with pytest.raises(RlsimError, match="neither one TRL ships nor a file") as info:
        import_config("trl", COLOCATE, ["accelerate_config=zero4"])
    assert info.value.field == "accelerate_config"


def test_distributed_type_no_runs_one_process_whatever_the_count():
    """TRL's shipped single_gpu config says num_processes 8 beside distributed_type NO: accelerate's
    simple launcher runs one process."""
    r = import_config("trl", COLOCATE, ["accelerate_config=single_gpu", "gradient_accumulation_steps=16"])
    assert r.scenario["workload"]["prompts_per_step"] == 4 * 1 * 16 // 16
    assert r.scenario["topology"] == {"preset": "dgx-h100", "nodes": 1, "devices_per_node": 1}
    assert "one process" in r.ignored["num_processes"]


def test_without_an_accelerate_config_accelerate_runs_ddp_on_every_gpu():
    r = import_config("trl", COLOCATE, ["~accelerate_config", "~num_processes"])
    assert r.scenario["workload"]["train_layout"]["zero"] == 0
    assert r.scenario["workload"]["prompts_per_step"] == 4 * 8 * 16 // 16
    assert any("accelerate's defaults without a config file" in note for note in r.notes)


def test_sleep_mode_lora_and_a_reward_model():
    r = import_config("trl", COLOCATE, ["vllm_enable_sleep_mode=true", "use_peft=true", "lora_r=32",
                                        "reward_model_name_or_path=Qwen/Qwen2.5-0.5B", "beta=0.04",
                                        "attn_implementation=eager"])
    w, s = r.scenario["workload"], r.scenario["schedule"]
    assert s["switch"] == {"offload_optimizer": False, "engine_sleep": True, "engine_sleep_level": 2}
    assert w["lora"] == {"rank": 32, "targets": ["q_proj", "v_proj"]} and s["lora_refit"] == "full"
    assert w["reward"] == {"kind": "model", "model": "qwen2.5-0.5b"} and w["reference"] is True
    assert r.scenario["workload"]["train_params"]["compute"]["flash_attention"] is False   # eager: scores materialized
    load_scenario(r.scenario)
    liger = import_config("trl", COLOCATE, ["use_liger_kernel=true"])
    assert liger.scenario["workload"]["train_software"] == "trl-liger"


def test_a_typo_is_an_error_naming_the_key_it_is_close_to(capsys):
    code, _, err = cli(capsys, "run", "--from-trl", str(COLOCATE), "per_device_train_batchsize=8", "--print-scenario")
    assert code == 2 and "per_device_train_batchsize" in err and "Traceback" not in err


def test_the_cli_prints_a_reloadable_scenario_and_runs(capsys, tmp_path):
    code, out, _ = cli(capsys, "run", "--from-trl", str(SERVER), "--print-scenario")
    assert code == 0
    path = tmp_path / "trl.yaml"
    path.write_text(out)
    assert load_scenario(path).schedule.kind == "disaggregated"
    code, out, _ = cli(capsys, "run", "--from-trl", str(COLOCATE), "--iterations", "2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["framework_import"]["framework"] == "trl"
    assert doc["samples"]["consumed"] == 2 * 512


def test_the_guide_lists_every_table_entry():
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    missing = [key for key in RULES if f"`{key}`" not in guide]
    assert not missing, f"docs/guides/frameworks.md lacks {missing} (regenerate its TRL table from RULES)"


FUZZ_KEYS = ["per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "generation_batch_size",
             "steps_per_generation", "num_iterations", "max_completion_length", "beta", "vllm_gpu_memory_utilization",
             "vllm_tensor_parallel_size", "num_processes", "accelerate_config", "use_vllm", "vllm_mode", "bf16",
             "use_peft", "lora_r", "lora_target_modules", "reward_model_name_or_path", "attn_implementation",
             "+accelerate.deepspeed_config.offload_param_device", "+accelerate.fsdp_config.fsdp_sharding_strategy",
             "+vllm_serve.tensor_parallel_size", "+vllm_serve.dtype", "+vllm_serve.max_model_len"]
FUZZ_VALUES = ["0", "-1", "1.5", "abc", "null", "true", "[1,2]", "{a: 1}", "1e30", "3", "''", "fsdp1", "cpu"]


@settings(max_examples=80, deadline=None)
@given(config=st.sampled_from([COLOCATE, SERVER]), key=st.sampled_from(FUZZ_KEYS), value=st.sampled_from(FUZZ_VALUES))
def test_a_bad_value_is_an_error_naming_the_config_never_a_crash(config, key, value):
    try:
        load_scenario(import_config("trl", config, [f"{key}={value}"]).scenario)
    except RlsimError as exc:
        assert exc.message


def test_rloo_and_grpo_differ_by_the_fields_trl_declares():
    """The keys only one trainer's config has are the difference of what RLOOConfig and GRPOConfig
    declare themselves (their 1.16.0 wheels)."""
    from simulator.frameworks.trl_rules import GRPO_ONLY_KEYS, RLOO_ONLY_KEYS
    grpo, rloo = (set(fields(f"trl-1.16.0-{name}-config-own-fields.txt")) for name in ("grpo", "rloo"))
    assert set(GRPO_ONLY_KEYS) == grpo - rloo and set(RLOO_ONLY_KEYS) == rloo - grpo
    assert all(in_table(key, RULES) for key in rloo)


def test_an_rloo_config_always_computes_the_old_log_probs_and_runs_the_reference_by_default():
    """trl rloo: RLOOTrainer computes the old log-probs on every generation (no
    vllm_importance_sampling_correction to turn off), and its beta defaults to 0.05: the reference on;
    the same config as GRPO (one optimizer step a generation, correction off) skips the first pass."""
    grpo = import_config("trl", COLOCATE, ["~beta", "vllm_importance_sampling_correction=false"])
    assert grpo.scenario["schedule"]["recompute_logprob"] is False and grpo.scenario["workload"]["reference"] is False
    rloo = import_config("trl", COLOCATE, ["~beta"], schedule="rloo")
    assert "recompute_logprob" not in rloo.scenario["schedule"] and rloo.scenario["workload"]["reference"] is True
    assert any("trl rloo" in note for note in rloo.notes) and any("beta not given" in n and "0.05" in n
                                                                  for n in rloo.notes)
    assert rloo.scenario["workload"]["description"].startswith("imported from the TRL RLOO config")
    inferred = import_config("trl", COLOCATE, ["+normalize_advantages=true"])
    assert "normalize_advantages is RLOOConfig's" in " ".join(inferred.notes)
    assert inferred.scenario["workload"]["samples_per_prompt"] == 16 and "recompute_logprob" not in inferred.scenario[
        "schedule"]


@pytest.mark.parametrize(("trainer", "over", "field"), [
    ("rloo", ["+loss_type=dapo"], "loss_type"),
    ("rloo", ["vllm_importance_sampling_correction=false"], "vllm_importance_sampling_correction"),
    ("grpo", ["+reward_clip_range=[-1,1]"], "reward_clip_range"),
    ("colocated", [], "--framework-schedule")])
def test_a_key_of_the_other_trainers_config_is_refused(trainer, over, field):
    with pytest.raises(RlsimError) as err:
        import_config("trl", COLOCATE, over, schedule=trainer)
    assert err.value.field == field


def test_rloo_from_the_command_line(capsys):
    code, out, err = cli(capsys, "run", "--from-trl", str(COLOCATE), "~beta", "--framework-schedule", "rloo",
                         "--iterations", "1", "--json")
    assert code == 0, err
    stages = json.loads(out)["stage_time_s"]
    assert stages["old_logprob"] > 0 and stages["reference"] > 0 and "trl rloo" in err
    code, out, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"),
                         "--framework-schedule", "rloo", "--iterations", "1")
    assert code == 2 and "verl configs (its recipe) and TRL's" in err


def test_the_log_probs_go_through_trls_fused_lm_head():
    """TRL 1.16 scores every pass through its fused LM head: a Triton kernel reads each cuBLAS tile of
    logits once (2 B a logit) and in the backward reads the recomputed tile (its GEMM again) and writes
    its gradient (4), over the completion positions alone; the entropy rides in it (no workload.entropy).
    (The example's flash_attention_2 takes its padded rows' attention over their real tokens.)"""
    w = import_config("trl", COLOCATE).scenario["workload"]
    assert w["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 6.0, "loss_forward_share": pytest.approx(1 / 3),
                                            "logits_recompute": True, "head_response_only": True,
                                            "attention_skips_padding": True, "pad_rows_to": "batch"}
    assert "entropy" not in w


def test_an_fp32_lm_head_runs_its_gemms_in_fp32_on_fp32_tiles():
    """cast_lm_head_to_fp32: the head in fp32 outside autocast (head_dtype fp32) and the fused kernel's
    tiles fp32, twice the bytes a logit."""
    compute = import_config("trl", COLOCATE, ["cast_lm_head_to_fp32=true"]).scenario["workload"]["train_params"]["compute"]
    assert compute == {"loss_traffic_bytes_per_logit": 12.0, "loss_forward_share": pytest.approx(1 / 3),
                       "logits_recompute": True, "head_response_only": True, "head_dtype": "fp32",
                       "attention_skips_padding": True, "pad_rows_to": "batch"}


def test_padded_rows_attention_as_trls_attn_implementation_runs_it():
    """TRL pads its rows to the batch's longest prompt and completion (no fixed width: pad_rows_to batch,
    rows of 100, 300 | 200, 900 tokens in two micro-batches all 900 wide) and passes their
    attention_mask: flash_attention_2 / 3 (and their Hub kernels) unpad them for the attention, rows of
    100 and 300 tokens 100^2 + 300^2; sdpa, and unset (transformers' default, SDPA), run the padded
    width, 2 x 300^2; eager materializes the scores; model_init_kwargs' choice overrides the script's
    (scripts/grpo.py); flex attention is not modelled."""
    def imported(*over):
        return import_config("trl", COLOCATE, list(over))

    def compute(r):
        return r.scenario["workload"]["train_params"]["compute"]

    flash = imported()   # the example's attn_implementation: flash_attention_2
    assert row_keys(compute(flash)) == {"attention_skips_padding": True, "pad_rows_to": "batch"}
    assert padded_tokens(compute(flash), [100, 300, 200, 900], 2) == [2 * 900, 2 * 900]
    assert attention_squares(compute(flash), [100, 300]) == 100 ** 2 + 300 ** 2
    for impl in ("flash_attention_3", "kernels-community/vllm-flash-attn3"):
        assert row_keys(compute(imported(f"attn_implementation={impl}"))) == {"attention_skips_padding": True,
                                                                              "pad_rows_to": "batch"}
    for over in (["attn_implementation=sdpa"], ["~attn_implementation"], ["attn_implementation=null"]):
        r = imported(*over)
        assert row_keys(compute(r)) == {"pad_rows_to": "batch"} and attention_squares(compute(r), [100, 300]) == 2 * 300 ** 2
    init = imported("+model_init_kwargs.attn_implementation=eager")
    assert row_keys(compute(init)) == {"flash_attention": False, "pad_rows_to": "batch"}
    assert "model_init_kwargs.attn_implementation" in init.mapped and "overrides it" in init.ignored["attn_implementation"]
    flex = imported("attn_implementation=flex_attention")
    assert row_keys(compute(flex)) == {"pad_rows_to": "batch"} and "attn_implementation" in flex.unsupported
    for r in (flash, init):
        load_scenario(r.scenario)


@pytest.mark.parametrize(("launcher", "memory", "comm"), [
    ("zero1", {"grad_bytes_per_param": 2.0, "zero_reduce_bucket_params": 5e8, "zero_reduce_buckets": 1, "zero_allreduce_copies": 1,
               "zero_step_grad_copy_bytes_per_param": 6.0},
     {"grad_reduce_bytes_per_param": 2.0, "zero_grad_reduce": "all-reduce"}),
    ("zero2", {"grad_bytes_per_param": 2.0, "zero_reduce_bucket_params": 5e8, "zero_reduce_buckets": 1, "zero_allreduce_copies": 1,
               "zero_step_grad_copy_bytes_per_param": 6.0, "zero2_accumulated_grad_partitions": 1},
     {"grad_reduce_bytes_per_param": 2.0, "zero_grad_reduce": "all-reduce", "zero2_reduce_every_micro_batch": True}),
    ("zero3", {"grad_bytes_per_param": 2.0, "grad_buffer_persists": True, "zero_reduce_bucket_params": 5e8,
               "zero_reduce_buckets": 2, "zero_reduce_buckets_kept": 1,
               "zero3_max_live_params": 1e9, "zero_step_grad_copy_bytes_per_param": 6.0,
               "zero_step_sub_group_params": 1e9}, {"grad_reduce_bytes_per_param": 2.0, "zero3_outer_sync_every_micro_batch": True,
                                               "zero3_backward_waits_last_bucket": True}),
    ("multi_gpu", None, None)])
def test_accelerates_deepspeed_zero_stages_hold_and_reduce_the_gradients_as_deepspeed_does(launcher, memory, comm):
    """accelerate's DeepSpeedPlugin builds no reduce_bucket_size, overlap_comm nor stage3_* sizes: DeepSpeed's
    defaults (simulator/frameworks/deepspeed_zero.py); DDP takes none of it."""
    r = import_config("trl", COLOCATE, [f"accelerate_config={launcher}"])
    params = r.scenario["workload"]["train_params"]
    assert (params.get("memory"), params.get("comm")) == (memory, comm)
    load_scenario(r.scenario)
