"""`--from-skyrl`: SkyRL 0.3.0 launch scripts and configs turned into scenarios (simulator/frameworks/skyrl.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.frameworks.common import in_table
from simulator.frameworks.skyrl import read_script
from simulator.frameworks.skyrl_rules import DEFAULTS, RULES
from simulator.scenario import load_scenario

from .padded_attention import attention_squares, padded_tokens, row_keys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "workloads" / "frameworks" / "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh"
DATA = Path(__file__).resolve().parent / "data"
SPLIT = ["trainer.placement.colocate_all=false", "generator.inference_engine.num_engines=4",
         "trainer.placement.policy_num_gpus_per_node=4", "trainer.placement.ref_num_gpus_per_node=4"]
ASYNC = [*SPLIT, "trainer.fully_async.enabled=true", "trainer.train_batch_size=256",
         "trainer.fully_async.num_parallel_generation_workers=512", "trainer.algorithm.policy_loss_type=rollout_is",
         "generator.batched=false"]


def fields() -> list[str]:
    text = (DATA / "skyrl-0.3.0-config-fields.txt").read_text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_every_field_of_skyrls_config_is_in_the_table_and_every_default_is_a_field():
    names = fields()
    assert not [name for name in names if not in_table(name, RULES)]
    assert not [key for key in DEFAULTS if key not in names]


@pytest.mark.parametrize(("key", "value", "strategy"), [
    ("trainer.policy.fsdp_config.mixed_precision.reduce_dtype", "bf16", "fsdp2"),
    ("trainer.policy.fsdp_config.mixed_precision.param_dtype", "fp32", "fsdp2"),
    ("trainer.policy.megatron_config.ddp_config.grad_reduce_in_fp32", "false", "megatron")])
def test_the_trainers_compute_and_reduction_dtypes_are_listed_unsupported_not_read_past(key, value, strategy):
    """skyrl 0.3.0 fsdp_strategy.py builds FSDP2's MixedPrecisionPolicy from mixed_precision.param_dtype and
    reduce_dtype, megatron_worker.py copies ddp_config onto Megatron's DDP config: a dtype other than the
    bf16 compute / fp32 reduction rlsim prices is listed unsupported; SkyRL's defaults are ignored."""
    chosen = [f"trainer.strategy={strategy}"]
    assert key not in import_config("skyrl", EXAMPLE, chosen).unsupported
    changed = import_config("skyrl", EXAMPLE, [*chosen, f"{key}={value}"])
    assert key in changed.unsupported and "not" in changed.unsupported[key]
    assert "trainer.policy.fsdp_config.mixed_precision.buffer_dtype" not in RULES   # not read: the catch-all's


def test_the_example_is_skyrls_colocated_step(capsys, tmp_path):
    r = import_config("skyrl", EXAMPLE)
    assert r.unknown == {} and r.unsupported == {}
    assert load_scenario(r.scenario).to_dict() == load_scenario(DATA / "skyrl-grpo-qwen2.5-1.5b-gsm8k.scenario.yaml").to_dict()
    code = main(["run", "--from-skyrl", str(EXAMPLE), "--print-scenario"])
    printed = capsys.readouterr().out
    assert code == 0 and printed.startswith("# rlsim scenario imported from a skyrl config")
    (tmp_path / "printed.yaml").write_text(printed)
    assert load_scenario(tmp_path / "printed.yaml").to_dict() == load_scenario(r.scenario).to_dict()
    assert main(["run", "--from-skyrl", str(EXAMPLE), "--iterations", "1", "--json"]) == 0


@pytest.mark.parametrize(("key", "value", "renamed"), [
    ("generator.num_inference_engines", 4, "generator.inference_engine.num_engines"),
    ("generator.inference_engine_tensor_parallel_size", 2, "generator.inference_engine.tensor_parallel_size"),
    ("generator.gpu_memory_utilization", 0.7, "generator.inference_engine.gpu_memory_utilization"),
    ("trainer.no_such_key", 1, None),
])
def test_a_key_skyrl_refuses_in_a_yaml_is_an_error_naming_its_new_name(tmp_path, key, value, renamed):
    """skyrl 0.3.0 builds its dataclasses strictly (validate_dict_keys_against_dataclass): skyrl_train's
    flat generator keys are refused there."""
    section, _, name = key.partition(".")
    config = tmp_path / "old.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"policy": {"model": {"path": "Qwen/Qwen2.5-1.5B-Instruct"}}},
                                      section: {name: value}} if section == "generator" else
                                     {"trainer": {"policy": {"model": {"path": "Qwen/Qwen2.5-1.5B-Instruct"}},
                                                  name: value}}))
    with pytest.raises(RlsimError, match="SkyRL refuses it") as info:
        import_config("skyrl", config)
    assert info.value.field == key and (renamed is None or renamed in info.value.fix)


def test_an_entry_of_a_dict_field_is_the_fields_not_refused(tmp_path):
    config = tmp_path / "kwargs.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"policy": {"model": {"path": "Qwen/Qwen2.5-1.5B-Instruct"}}},
                                      "generator": {"inference_engine": {"engine_init_kwargs": {"swap_space": 4}}}}))
    r = import_config("skyrl", config)
    assert not r.unknown and "engine options" in r.unsupported["generator.inference_engine.engine_init_kwargs.swap_space"]


def test_use_sample_packing_is_read_as_remove_microbatch_padding():
    """SkyRL 0.3.0 remaps the deprecated trainer.use_sample_packing (config.py), refusing both at once."""
    r = import_config("skyrl", EXAMPLE, ["trainer.use_sample_packing=false"])
    assert r.scenario["schedule"]["distqueue"]["packed"] is False and "trainer.use_sample_packing" in r.mapped
    assert import_config("skyrl", EXAMPLE).scenario["schedule"]["distqueue"]["packed"] is True
    with pytest.raises(RlsimError, match="both") as info:
        import_config("skyrl", EXAMPLE, ["trainer.use_sample_packing=false", "trainer.remove_microbatch_padding=false"])
    assert info.value.field == "trainer.use_sample_packing"


def test_enable_chunked_prefill_is_not_passed_to_vllm():
    """SkyRL 0.3.0 builds the vLLM server's arguments without it (inference_servers/utils.py)."""
    r = import_config("skyrl", EXAMPLE, ["generator.inference_engine.enable_chunked_prefill=false"])
    assert r.scenario["workload"]["inference"]["chunked_prefill"] is True
    assert "does not pass it" in r.ignored["generator.inference_engine.enable_chunked_prefill"]


def test_the_script_reader_takes_the_training_commands_arguments_with_its_variables(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('NUM=4\nMODEL="Qwen/Qwen2.5-7B-Instruct"\necho "trainer.epochs=3 is not an argument"\n'
                      'uv run -m skyrl.train.entrypoints.main_base \\\n  trainer.policy.model.path=$MODEL \\\n'
                      '  trainer.placement.policy_num_gpus_per_node=${NUM} generator.inference_engine.num_engines=$NUM '
                      '"$@" > log.txt\n')
    assert read_script(script) == ["trainer.policy.model.path=Qwen/Qwen2.5-7B-Instruct",
                                   "trainer.placement.policy_num_gpus_per_node=4",
                                   "generator.inference_engine.num_engines=4"]
    empty = tmp_path / "empty.sh"
    empty.write_text("echo hi\n")
    with pytest.raises(RlsimError, match="no SkyRL training command"):
        read_script(empty)


def test_arguments_a_comment_line_cuts_off_the_training_command_are_an_error(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("uv run -m skyrl.train.entrypoints.main_base \\\n  trainer.epochs=3 \\\n"
                      "  # trainer.policy.model.path=x \\\n  generator.inference_engine.num_engines=4\n")
    with pytest.raises(RlsimError, match="line 4 .*comment on line 3"):
        read_script(script)


def test_a_yaml_of_the_same_tree_imports_to_the_same_scenario(tmp_path):
    flat = dict(item.split("=", 1) for item in read_script(EXAMPLE) if not item.startswith("data."))
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    config = tmp_path / "skyrl-grpo-qwen2.5-1.5b-gsm8k.yaml"
    config.write_text(yaml.safe_dump(tree))
    from_yaml, from_script = import_config("skyrl", config).scenario, import_config("skyrl", EXAMPLE).scenario
    for scenario in (from_yaml, from_script):
        scenario["workload"].pop("description")
    assert from_yaml == from_script


def test_split_pools_swap_the_reference_with_the_policy_or_give_it_gpus_of_its_own():
    shared = import_config("skyrl", EXAMPLE, SPLIT)
    s, w = shared.scenario["schedule"], shared.scenario["workload"]
    assert s["kind"] == "disaggregated" and s["rollout_devices"] == 4 and "switch" not in s
    # the policy's weights out and back, the reference's in and out; the optimizer out and back
    assert s["reference_swap_copies"] == 4 and w["train_params"]["offload"] == {"optimizer": True}
    assert shared.scenario["topology"] == {"preset": "dgx-h100", "nodes": 1}
    own = import_config("skyrl", EXAMPLE, [*SPLIT, "trainer.placement.colocate_policy_ref=false",
                                            "trainer.placement.policy_num_gpus_per_node=2",
                                            "trainer.placement.ref_num_gpus_per_node=2"])
    s = own.scenario["schedule"]
    assert s["aux_devices"] == {"reference": 2} and "reference_swap_copies" not in s
    assert "offload" not in own.scenario["workload"]["train_params"]
    no_ref = import_config("skyrl", EXAMPLE, [*SPLIT, "trainer.algorithm.use_kl_loss=false"]).scenario
    assert no_ref["workload"]["reference"] is False and "reference_swap_copies" not in no_ref["schedule"]
    for imported in (shared, own):
        load_scenario(imported.scenario)


def test_fully_async_is_arealss_start_rule_on_the_rollouts_log_probs():
    r = import_config("skyrl", EXAMPLE, ASYNC)
    s = r.scenario["schedule"]
    assert (s["kind"], s["max_head_offpolicyness"], s["max_concurrent_rollouts"]) == ("areal", 4, 512)
    assert s["recompute_logprob"] is False and s["interruptible"] is True and s["interrupt_keeps_kv"] is True
    cleared = import_config("skyrl", EXAMPLE, [*ASYNC, "trainer.fully_async.clear_kv_cache_on_weight_sync=true"])
    assert cleared.scenario["schedule"]["interrupt_keeps_kv"] is False     # the running requests re-prefill
    assert "dispatch" not in r.scenario["workload"]["inference"]   # the areal kind routes its own requests
    assert load_scenario(r.scenario).schedule.kind == "areal"
    own_ref = import_config("skyrl", EXAMPLE, [*ASYNC, "trainer.placement.colocate_policy_ref=false"])
    assert "aux_devices" not in own_ref.scenario["schedule"]    # beside an async run: listed, not modelled
    assert "trainer.placement.ref_num_gpus_per_node" in own_ref.unsupported


@pytest.mark.parametrize(("over", "field"), [
    (["trainer.placement.colocate_all=true"], "trainer.placement.colocate_all"),
    (["trainer.policy_mini_batch_size=128"], "trainer.policy_mini_batch_size"),
    (["trainer.fully_async.num_parallel_generation_workers=2048"],
     "trainer.fully_async.num_parallel_generation_workers"),
    (["trainer.algorithm.policy_loss_type=regular"], "trainer.algorithm.policy_loss_type"),
    (["generator.batched=true"], "generator.batched")])
def test_fully_async_refuses_what_skyrls_trainer_asserts(over, field):
    with pytest.raises(RlsimError) as err:
        import_config("skyrl", EXAMPLE, [*ASYNC, *over])
    assert err.value.field == field


def test_the_old_log_prob_pass_is_skipped_only_as_skyrl_skips_it():
    def old_pass(*over: str) -> bool:
        return import_config("skyrl", EXAMPLE, list(over)).scenario["schedule"]["recompute_logprob"]
    assert old_pass() is True                                          # the regular PPO loss
    assert old_pass("trainer.algorithm.policy_loss_type=dppo") is False
    assert old_pass("trainer.algorithm.policy_loss_type=rollout_is",
                    "trainer.algorithm.off_policy_correction.tis_ratio_type=token") is True
    assert old_pass("trainer.algorithm.policy_loss_type=rollout_is", "trainer.algorithm.use_kl_in_reward=true",
                    "trainer.algorithm.use_kl_loss=false") is True
    assert old_pass("trainer.algorithm.policy_loss_type=rollout_is", "generator.sampling_params.logprobs=null") is True


def test_megatrons_expert_tp_left_out_is_megatron_cores_tp():
    """SkyRL 0.3.0's megatron_config.expert_tensor_parallel_size defaults to None, which megatron_strategy.py
    hands to mpu.initialize_model_parallel (and megatron_worker.py to the bridge's provider) as is:
    Megatron-Core's default, the experts split over tp (train_layout.etp unset); a given size is taken."""
    moe = ["trainer.strategy=megatron", "trainer.policy.model.path=Qwen/Qwen3-30B-A3B",
           "trainer.policy.megatron_config.tensor_model_parallel_size=2",
           "trainer.policy.megatron_config.expert_model_parallel_size=4"]
    left_out = import_config("skyrl", EXAMPLE, moe)
    assert "etp" not in left_out.scenario["workload"]["train_layout"]
    given = import_config("skyrl", EXAMPLE, [*moe, "trainer.policy.megatron_config.expert_tensor_parallel_size=1"])
    assert given.scenario["workload"]["train_layout"]["etp"] == 1


def test_megatron_dynamic_sampling_and_a_critic_are_read():
    r = import_config("skyrl", EXAMPLE, [
        "trainer.strategy=megatron", "trainer.policy.megatron_config.tensor_model_parallel_size=2",
        "trainer.policy.megatron_config.pipeline_model_parallel_size=2", "trainer.max_tokens_per_microbatch=8192",
        "trainer.algorithm.dynamic_sampling.type=filter", "trainer.algorithm.dynamic_sampling.max_sample_batches=4",
        "trainer.critic.model.path=Qwen/Qwen2.5-1.5B-Instruct", "trainer.algorithm.advantage_estimator=gae",
        "trainer.placement.critic_num_gpus_per_node=8"])
    w = r.scenario["workload"]
    assert w["train_layout"] == {"tp": 2, "pp": 2, "cp": 1, "ep": 1, "zero": 1, "recompute": "full",
                                 "max_tokens_per_micro_batch": 8192, "logprob_max_tokens_per_micro_batch": 8192}
    assert "train_software" not in w and w["algorithm"] == "ppo"
    assert w["dynamic_sampling"] == {"gen_prompts": 1024, "max_gen_batches": 4}
    assert "forward_micro_batch" not in r.scenario["schedule"]
    assert "max_tokens_per_microbatch" in r.ignored["trainer.micro_train_batch_size_per_gpu"]
    load_scenario(r.scenario)
    assert w["critic_offload"] == {"params": True, "optimizer": True}     # swapped with the policy (colocate_all)
    replace = import_config("skyrl", EXAMPLE, ["trainer.algorithm.dynamic_sampling.type=replace"])
    assert "dynamic_sampling" not in replace.scenario["workload"]
    assert "trainer.algorithm.dynamic_sampling.type" in replace.unsupported


@pytest.mark.parametrize(("over", "field"), [
    (["+trainer.my_knob=1"], "trainer.my_knob"),
    (["trainer.my_knob=1"], "trainer.my_knob"),
    (["generator.inference_engine.num_engines=4"], "generator.inference_engine.num_engines"),
    (["trainer.placement.ref_num_gpus_per_node=4"], "trainer.placement.ref_num_gpus_per_node"),
    (["trainer.strategy=deepspeed"], "trainer.strategy"),
    # the engines' GPUs (num_engines x tp x pp x dp) must be the colocated policy's
    (["generator.inference_engine.pipeline_parallel_size=2"], "generator.inference_engine.num_engines"),
    (["trainer.policy_mini_batch_size=300"], "trainer.policy_mini_batch_size")])
def test_what_skyrl_refuses_is_an_error_naming_the_key(over, field):
    with pytest.raises(RlsimError) as err:
        import_config("skyrl", EXAMPLE, over)
    assert err.value.field == field and err.value.fix


def test_pipeline_parallel_engines_are_the_rollout_layouts_pp_and_count_their_gpus():
    staged = import_config("skyrl", EXAMPLE, [*SPLIT[:1], "generator.inference_engine.num_engines=2",
                                              "generator.inference_engine.pipeline_parallel_size=2", *SPLIT[2:]])
    flat = import_config("skyrl", EXAMPLE, SPLIT)
    assert staged.scenario["workload"]["rollout_layout"]["pp"] == 2 and "pp" not in flat.scenario["workload"][
        "rollout_layout"]
    assert staged.scenario["schedule"]["rollout_devices"] == flat.scenario["schedule"]["rollout_devices"] == 4
    load_scenario(staged.scenario)


def test_expert_parallel_engines_are_one_engines_attention_replicas():
    """SkyRL's engine of data_parallel_size x tensor_parallel_size GPUs with vLLM's expert parallelism
    over them (it asserts ep = dp x tp): rlsim's ep = dp attention replicas of one instance."""
    moe = [*SPLIT[:1], "trainer.policy.model.path=Qwen/Qwen3-30B-A3B", "generator.inference_engine.num_engines=1",
           "generator.inference_engine.tensor_parallel_size=2", "generator.inference_engine.data_parallel_size=2",
           *SPLIT[2:]]
    r = import_config("skyrl", EXAMPLE, [*moe, "generator.inference_engine.expert_parallel_size=4"])
    assert r.scenario["workload"]["rollout_layout"]["ep"] == 2 and r.scenario["workload"]["rollout_layout"]["tp"] == 2
    assert r.scenario["schedule"]["rollout_devices"] == 4
    load_scenario(r.scenario)
    flat = import_config("skyrl", EXAMPLE, moe)   # dp without EP: engines of their own
    assert "ep" not in flat.scenario["workload"]["rollout_layout"]
    with pytest.raises(RlsimError) as err:
        import_config("skyrl", EXAMPLE, [*moe, "generator.inference_engine.expert_parallel_size=2"])
    assert err.value.field == "generator.inference_engine.expert_parallel_size" and "give 4" in err.value.fix


def test_the_guide_lists_every_table_entry():
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    missing = [key for key in RULES if f"`{key}`" not in guide]
    assert not missing, f"docs/guides/frameworks.md lacks {missing} (regenerate its SkyRL table from RULES)"


def test_multi_turn_maps_the_turns_their_cap_and_the_context_bound():
    # SkyRL's agent loop: max_turns turns of at most max_generate_length, stopping once the context
    # passes max_input_length; batched generation is single-turn
    turns = ["generator.batched=false", "generator.max_turns=4", "generator.max_input_length=2048"]
    r = import_config("skyrl", EXAMPLE, turns)
    workload = r.scenario["workload"]
    assert workload["multi_turn"] == {"max_turns": 4, "max_turn_tokens": 1024}
    assert workload["response_length"]["max"] == min(4 * 1024, 2048 - 1 + 1024)
    assert "generator.max_turns" in r.mapped and "generator.max_input_length" in r.mapped
    batched = import_config("skyrl", EXAMPLE, ["generator.max_turns=4", "generator.max_input_length=2048"])
    assert "multi_turn" not in batched.scenario["workload"] and "single-turn" in batched.ignored["generator.max_turns"]
    assert batched.scenario["workload"]["response_length"]["max"] == 1024
    with pytest.raises(RlsimError) as refused:      # SkyRL's validate_generator_cfg asserts it
        import_config("skyrl", EXAMPLE, ["generator.batched=false", "generator.max_turns=4",
                                         "generator.max_input_length=256"])
    assert refused.value.field == "generator.max_input_length"
    sets = ["--set", "workload.multi_turn.tool_latency_s=1", "--set", "workload.multi_turn.observation_tokens=100"]
    # (the example's 40-sequence micro-batches of 1.5K tokens do not fit at 3K)
    assert main(["run", "--from-skyrl", str(EXAMPLE), *turns, "trainer.micro_train_batch_size_per_gpu=4",
                 "trainer.micro_forward_batch_size_per_gpu=4", *sets, "--iterations", "1", "--json"]) == 0


def test_log_probs_and_entropy_as_skyrls_policy_takes_them():
    """The HF policy divides its logits by the temperature and takes flash-attn's cross entropy (6 B a
    logit forward, 8 backward); its update's forward computes the entropy through log_softmax op by op,
    or compiled with use_torch_compile, in the loss with use_entropy_loss; megatron keeps the stack's."""
    def workload(*over):
        return import_config("skyrl", EXAMPLE, list(over)).scenario["workload"]

    plain = workload()
    assert plain["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 14.0,
                                                "loss_forward_share": pytest.approx(6 / 14)}
    assert plain["entropy"] == {"passes": ["update"], "kernel": "eager-log-softmax"}
    assert workload("trainer.policy.use_torch_compile=true", "trainer.algorithm.use_entropy_loss=true")["entropy"] == {
        "passes": ["update"], "in_loss": True, "kernel": "compiled"}


@pytest.mark.parametrize("bf16, host_bytes", [("true", 2.0), ("false", 4.0)])
def test_a_reference_offloaded_by_fsdp2_lives_on_the_host_in_the_trainers_dtype(bf16, host_bytes):
    # FSDP2's CPUOffloadPolicy (fsdp_strategy.py) instead of the manual swap: no swap copies, each
    # forward copies the host shards in (HFModelWrapper loads them in bf16 with trainer.bf16)
    imported = import_config("skyrl", EXAMPLE, ["trainer.ref.fsdp_config.cpu_offload=true", f"trainer.bf16={bf16}"])
    w, s = imported.scenario["workload"], imported.scenario["schedule"]
    assert w["reference_cpu_offload"] is True and w["reference_cpu_offload_bytes_per_param"] == host_bytes
    assert "reference_swap_copies" not in s
    assert "trainer.ref.fsdp_config.cpu_offload" in imported.mapped
    swapped = import_config("skyrl", EXAMPLE, []).scenario
    assert "reference_cpu_offload" not in swapped["workload"] and swapped["schedule"]["reference_swap_copies"] == 2
    load_scenario(imported.scenario)


def test_another_backends_sections_are_read_past_for_every_model():
    imported = import_config("skyrl", EXAMPLE, ["trainer.strategy=megatron", "trainer.ref.fsdp_config.cpu_offload=true",
                                                "trainer.critic.fsdp_config.cpu_offload=true"])
    assert "reference_cpu_offload" not in imported.scenario["workload"]
    for key in ("trainer.ref.fsdp_config.cpu_offload", "trainer.critic.fsdp_config.cpu_offload"):
        assert "megatron" in imported.ignored[key]


def test_skyrl_fsdp_policy_trains_fp32_parameters_whatever_bf16_says():
    """SkyRL's FSDP policy loads fp32 (HFModelWrapper(bf16=inference_only_init)): its shard is the
    master copy, 4 + 4 + 8 bytes a parameter; megatron keeps rlsim's 18."""
    master = {"resident_weight_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0, "optimizer_bytes_per_param": 8.0}
    for bf16 in ("true", "false"):
        r = import_config("skyrl", EXAMPLE, [f"trainer.bf16={bf16}"])
        assert r.scenario["workload"]["train_params"]["memory"] == master


def test_padded_rows_attention_as_skyrls_flash_attn_runs_it():
    """trainer.remove_microbatch_padding false: the training batch left-padded to its longest prompt +
    response (preprocess.py: no fixed width, pad_rows_to batch: rows of 100, 300 | 200, 900 tokens in two
    micro-batches all 900 wide) goes through the FSDP model with its attention_mask; flash_attention_2
    (trainer.flash_attn, the default) unpads it for the attention, rows of 100 and 300 tokens 100^2 +
    300^2; sdpa (flash_attn false) runs the padded width, 2 x 300^2. Packed micro-batches without flash
    attention: SkyRL asserts. Megatron: its attention runs the padding whichever backend."""
    def compute(*over):
        return import_config("skyrl", EXAMPLE, list(over)).scenario["workload"]["train_params"]["compute"]

    padded = "trainer.remove_microbatch_padding=false"
    flash = compute(padded)
    assert row_keys(flash) == {"attention_skips_padding": True, "pad_rows_to": "batch"}
    assert padded_tokens(flash, [100, 300, 200, 900], 2) == [2 * 900, 2 * 900]
    assert attention_squares(flash, [100, 300]) == 100 ** 2 + 300 ** 2
    sdpa = import_config("skyrl", EXAMPLE, [padded, "trainer.flash_attn=false"])
    assert row_keys(sdpa.scenario["workload"]["train_params"]["compute"]) == {"pad_rows_to": "batch"}
    assert attention_squares(sdpa.scenario["workload"]["train_params"]["compute"], [100, 300]) == 2 * 300 ** 2
    assert "trainer.flash_attn" in sdpa.mapped
    load_scenario(sdpa.scenario)
    assert row_keys(compute()) == {}                                   # packed rows: nothing to skip
    with pytest.raises(RlsimError, match="Flash attention 2 should be used") as info:
        compute("trainer.flash_attn=false")
    assert info.value.field == "trainer.flash_attn"
    megatron = import_config("skyrl", EXAMPLE, ["trainer.strategy=megatron", padded, "trainer.flash_attn=false"])
    assert row_keys(megatron.scenario["workload"].get("train_params", {}).get("compute", {})) == {}
    assert "trainer.flash_attn" in megatron.ignored


@pytest.mark.parametrize(("key", "value"), [
    ("trainer.policy.fsdp_config.mixed_precision.param_dtype", "bfloat16"),
    ("trainer.policy.fsdp_config.mixed_precision.reduce_dtype", "float32"),
    ("trainer.policy.fsdp_config.mixed_precision.reduce_dtype", "32"),
    ("trainer.policy.fsdp_config.mixed_precision.reduce_dtype", 32)])
def test_a_dtype_spelled_as_skyrl_also_reads_it_is_its_default(key, value):
    """skyrl 0.3.0 fsdp_utils.py PrecisionType.to_dtype reads 'bfloat16' as 'bf16' and 'float32', '32' or 32
    as 'fp32' (BFLOAT_LIST, FLOAT_LIST): the same MixedPrecisionPolicy as the defaults, ignored as those."""
    r = import_config("skyrl", EXAMPLE, ["trainer.strategy=fsdp2", f"{key}={value}"])
    assert key not in r.unsupported and key in r.ignored


@pytest.mark.parametrize(("key", "value", "strategy"), [
    ("trainer.ref.fsdp_config.mixed_precision.reduce_dtype", "bf16", "fsdp2"),
    ("trainer.ref.megatron_config.ddp_config.grad_reduce_in_fp32", "false", "megatron")])
def test_the_references_gradient_reduction_dtype_is_read_past(key, value, strategy):
    """The reference runs forward passes only (no backward, no gradient to reduce): its reduction dtype
    changes nothing, ignored with that reason (its param_dtype, the forward's compute, stays unsupported)."""
    r = import_config("skyrl", EXAMPLE, [f"trainer.strategy={strategy}", f"{key}={value}"])
    assert key not in r.unsupported and "forward" in r.ignored[key]
    compute = "trainer.ref.fsdp_config.mixed_precision.param_dtype"
    assert compute in import_config("skyrl", EXAMPLE, ["trainer.strategy=fsdp2", f"{compute}=fp32"]).unsupported


def test_the_policys_reshard_after_forward_is_fully_shards_and_stays_zero_3():
    """SkyRL 0.3.0 passes fsdp_config.reshard_after_forward to fully_shard (distributed/fsdp_strategy.py): false
    keeps each layer whole from its forward through its backward (train_params.memory.zero3_reshard_after_forward,
    as verl's fsdp2 import maps it), still ZeRO 3 (was listed unsupported and priced as true); an int reshards to
    that many ranks, listed unsupported; SkyRL's default true writes nothing."""
    key = "trainer.policy.fsdp_config.reshard_after_forward"
    plain = import_config("skyrl", EXAMPLE)
    assert "zero3_reshard_after_forward" not in plain.scenario["workload"]["train_params"].get("memory", {})
    kept = import_config("skyrl", EXAMPLE, [f"{key}=false"])
    w = kept.scenario["workload"]
    assert w["train_params"]["memory"]["zero3_reshard_after_forward"] is False and w["train_layout"]["zero"] == 3
    assert key in kept.mapped and w["train_software"] == "skyrl-fsdp"
    assert load_scenario(kept.scenario).workload.train_params.memory.zero3_reshard_after_forward is False
    ranks = import_config("skyrl", EXAMPLE, [f"{key}=4"])
    assert "not modelled" in ranks.unsupported[key]
    assert "zero3_reshard_after_forward" not in ranks.scenario["workload"]["train_params"].get("memory", {})
    with pytest.raises(RlsimError) as err:
        import_config("skyrl", EXAMPLE, [f"{key}=sometimes"])
    assert err.value.field == key and "=false" in err.value.fix
    megatron = import_config("skyrl", EXAMPLE, ["trainer.strategy=megatron", f"{key}=false"])
    assert key in megatron.ignored and "memory" not in megatron.scenario["workload"].get("train_params", {})


def test_the_policys_fsdp_size_below_its_gpus_is_hsdp():
    """create_device_mesh (distributed/fsdp_utils.py): fsdp_size below the policy's GPUs builds a (ddp, fsdp)
    mesh, the state sharded over fsdp_size ranks and replicated across: train_layout.zero_shard_size (was
    listed unsupported, priced as a shard over all 8); -1 or the GPUs or more shard over all of them."""
    key = "trainer.policy.fsdp_config.fsdp_size"
    for size, shard in ((-1, None), (8, None), (16, None), (4, 4), (2, 2)):
        layout = import_config("skyrl", EXAMPLE, [f"{key}={size}"]).scenario["workload"]["train_layout"]
        assert layout.get("zero_shard_size") == shard, size
    hsdp = import_config("skyrl", EXAMPLE, [f"{key}=4"])
    assert key in hsdp.mapped and load_scenario(hsdp.scenario).workload.train_layout["zero_shard_size"] == 4
    with pytest.raises(RlsimError) as err:
        import_config("skyrl", EXAMPLE, [f"{key}=3"])
    assert err.value.field == key and "does not divide the policy's 8 GPUs" in err.value.message


def test_the_fsdp2_stack_refuses_a_zero_stage_skyrl_does_not_shard_at(capsys):
    """SkyRL's FSDP2 workers shard as ZeRO 3 only (params.SKYRL_FSDP): a layout at ZeRO 2 is refused naming
    the field and the stages it has."""
    code = main(["run", "--from-skyrl", str(EXAMPLE), "--set", "workload.train_layout.zero=2", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "workload.train_layout.zero" in err and "skyrl-fsdp runs zero 3 only" in err
