"""`--from-openrlhf`: OpenRLHF 0.11.2 launch scripts turned into scenarios (simulator/frameworks/openrlhf.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import import_config, openrlhf
from simulator.frameworks.openrlhf_script import read_script
from simulator.scenario import load_scenario

from .padded_attention import attention_squares, row_keys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
HYBRID = EXAMPLES / "openrlhf-reinforce-qwen2.5-7b-hybrid.sh"
ASYNC = EXAMPLES / "openrlhf-ppo-llama3.1-8b-async.sh"
DATA = Path(__file__).resolve().parent / "data"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.sh"
    path.write_text(text)
    return path


def test_a_script_is_read_as_bash_passes_its_command(tmp_path):
    """Continuation lines, the script's own variables ($X, ${X}, ${X:-default}), switches, flags of
    two values, --flag=value, and the command's end at a pipe; an unset variable stays ${NAME}."""
    path = script(tmp_path, 'export MODEL="Qwen/Qwen2.5-7B"\nN=8\n'
                            'ray job submit -- python3 -m openrlhf.cli.train_ppo_ray \\\n'
                            '  --actor.model_name_or_path $MODEL --rollout.n_samples_per_prompt ${N} \\\n'
                            '  --train.colocate_all --reward.clip_range -5 5 --algo.kl.init_coef 1e-3 \\\n'
                            '  --data.max_len=${MAX_LEN:-4096} --logger.wandb.key ${WANDB} 2>&1 | tee log.txt\n'
                            'echo done --not.a.flag 1\n')
    flat = read_script(path, openrlhf.ARITY)
    assert flat == {"actor.model_name_or_path": "Qwen/Qwen2.5-7B", "rollout.n_samples_per_prompt": 8,
                    "train.colocate_all": True, "reward.clip_range": [-5, 5], "algo.kl.init_coef": 0.001,
                    "data.max_len": 4096, "logger.wandb.key": "${WANDB}"}
    with pytest.raises(RlsimError, match="cannot resolve") as info:
        import_config("openrlhf", HYBRID, ["actor.model_name_or_path=${HF_MODEL}"])
    assert info.value.field == "actor.model_name_or_path"


@pytest.mark.parametrize(("text", "words"), [("echo hello\n", "no `openrlhf.cli.train_ppo_ray` command"),
                                             ("python3 -m openrlhf.cli.train_ppo_ray stray --a 1\n", "not a --flag"),
                                             ("python3 -m openrlhf.cli.train_ppo_ray --a 'open\n", "close the quotes")])
def test_a_script_without_a_readable_command_is_refused(tmp_path, text, words):
    with pytest.raises(RlsimError) as info:
        read_script(script(tmp_path, text), openrlhf.ARITY)
    assert words in str(info.value) and info.value.source == str(tmp_path / "train.sh")


def test_ring_attention_packs_the_rows_as_openrlhf_forces_it(tmp_path):
    """train_ppo_ray.py: --ds.ring_attn_size > 1 without --ds.packing_samples turns packing on."""
    text = HYBRID.read_text().replace("--ds.packing_samples", "--ds.ring_attn_size 2")
    r = import_config("openrlhf", script(tmp_path, text))
    s = r.scenario["schedule"]
    assert s["distqueue"]["packed"] is True and s["micro_batching"] == "sequence"
    assert r.scenario["workload"]["train_layout"]["cp"] == 2
    assert any("turns it on" in note for note in r.notes)
    unpacked = import_config("openrlhf", script(tmp_path, HYBRID.read_text().replace("--ds.packing_samples", "")))
    assert unpacked.scenario["schedule"]["distqueue"]["packed"] is False


def test_the_hybrid_engine_example_runs_to_the_same_json_as_its_scenario(capsys):
    """train.colocate_all: colocated, vLLM sleeping at level 1, DeepSpeed's states to the host around
    each update, the reference on the actor's GPUs; every flag accounted for."""
    r = import_config("openrlhf", HYBRID)
    assert not r.unknown and not r.unsupported
    w, s = r.scenario["workload"], r.scenario["schedule"]
    assert s["kind"] == "colocated" and s["refit"] == "full-tensors"
    assert s["switch"] == {"offload_optimizer": True, "free_gradients": False, "engine_sleep": True,
                           "engine_sleep_level": 1}
    assert (w["algorithm"], w["prompts_per_step"], w["samples_per_prompt"], w["mini_batch_prompts"]) == \
        ("grpo", 128, 8, 16)
    assert w["reference"] is True and w["reward"] == {"kind": "rule", "handover": "sample"}
    assert w["train_layout"] == {"tp": 1, "pp": 1, "cp": 1, "zero": 3, "recompute": "full", "micro_batch": 4}
    assert w["response_length"]["max"] == 4096 and w["inference"]["max_model_len"] == 5120
    assert r.scenario["topology"] == {"preset": "dgx-h100", "nodes": 1}
    code, imported, err = cli(capsys, "run", "--from-openrlhf", str(HYBRID), "--iterations", "2", "--json")
    assert code == 0, err
    code, saved, err = cli(capsys, "run", str(DATA / "openrlhf-reinforce-qwen2.5-7b-hybrid.scenario.yaml"),
                           "--iterations", "2", "--json")
    assert code == 0, err
    doc = json.loads(imported)
    assert doc.pop("framework_import")["framework"] == "openrlhf"
    assert json.dumps(doc, indent=2) + "\n" == saved


def test_default_placement_puts_reference_critic_and_reward_model_on_an_aux_pool():
    """No colocation flag: the engines, the actor, the reference, the critic and the reward model
    each on GPUs of their own; async: one-step-off with round batches, staleness = the queue."""
    r = import_config("openrlhf", ASYNC)
    assert not r.unknown and not r.unsupported
    s, w = r.scenario["schedule"], r.scenario["workload"]
    assert (s["kind"], s["staleness"], s["round_batches"]) == ("one-step-off", 1, True)
    assert s["rollout_devices"] == 8 and s["aux_devices"] == {"reference": 4, "critic": 8, "reward": 4}
    assert w["algorithm"] == "ppo" and w["reward"] == {"kind": "model", "model": "llama3.1-8b"}
    assert r.scenario["topology"]["nodes"] == 4                            # 8 actor + 8 vLLM + 16
    assert import_config("openrlhf", ASYNC, ["train.async_queue_size=2"]).scenario["schedule"]["staleness"] == 2
    sync = import_config("openrlhf", ASYNC, ["train.async_enable=false"]).scenario["schedule"]
    assert sync["kind"] == "disaggregated" and "staleness" not in sync
    beside = import_config("openrlhf", ASYNC, ["train.colocate_actor_ref=true", "ref.num_gpus_per_node=8",
                                               "train.colocate_critic_reward=true", "reward.num_gpus_per_node=8"])
    assert beside.scenario["schedule"]["aux_devices"] == {"critic+reward": 8}   # the reward model on the critic's
    assert "no GPUs of its own" in beside.ignored["ref.num_gpus_per_node"]
    together = import_config("openrlhf", ASYNC, ["train.colocate_all=true", "ref.num_gpus_per_node=8"])
    assert "aux_devices" not in together.scenario["schedule"]             # async: the DeepSpeed models colocated
    assert together.scenario["schedule"]["kind"] == "one-step-off"


def test_the_async_example_runs_with_its_aux_pool(capsys):
    code, out, err = cli(capsys, "run", "--from-openrlhf", str(ASYNC), "--iterations", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pools"] == {"rollout": 8, "train": 8, "aux-reference": 4, "aux-critic": 8, "aux-reward": 4}
    assert "verl_timing_s" not in doc   # verl's phases do not split passes that run side by side
    timers = doc["openrlhf_timing_s"]      # OpenRLHF's: the forwards' wall, whichever pool ends them
    assert timers["make_experience"] + timers["ppo_train"] + timers["broadcast"] + timers["other"] == \
        pytest.approx(timers["step_total"])
    assert doc["staleness"]["max"] <= 1


_ASYNC_SUMMARIES: dict[str, str] = {}   # the summary of the imported order, run once


@settings(max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(["reference", "critic", "reward"]))
def test_the_aux_devices_key_order_does_not_change_the_run(order):
    """YAML mappings are unordered (yaml.safe_dump sorts them): {critic, reference, reward} gave 72.47 s
    a step and the imported {reference, critic, reward} 73.81 s, the critic's 8 GPUs laid inside one node
    or across two by the order. Every order now gives the same summary, byte for byte."""
    from simulator.api import simulate
    from simulator.json_text import json_text

    def summary(groups):
        scenario = import_config("openrlhf", ASYNC).scenario
        aux = scenario["schedule"]["aux_devices"]
        scenario["schedule"]["aux_devices"] = {group: aux[group] for group in groups}
        return json_text(simulate(scenario, iterations=2, keep_samples=False).summary, indent=2, sort_keys=False)
    if "imported" not in _ASYNC_SUMMARIES:
        _ASYNC_SUMMARIES["imported"] = summary(["reference", "critic", "reward"])
    assert summary(order) == _ASYNC_SUMMARIES["imported"]


@pytest.mark.parametrize(("overrides", "field", "words"), [
    (["vllm.num_engines=2"], "vllm.num_engines", "hybrid engine needs"),
    (["ref.num_gpus_per_node=4"], "ref.num_gpus_per_node", "OpenRLHF asserts it"),
    (["vllm.num_engines=0"], "vllm.num_engines", "no vLLM engines"),
    (["~reward.remote_url"], "reward.model_name_or_path", "no reward"),
    (["train.batch_size=100"], "train.batch_size", "whole number of prompt groups"),
    (["algo.advantage.estimator=ppo"], "algo.advantage.estimator", "advantage estimators"),
    (["ds.tensor_parallel_size=3"], "ds.tensor_parallel_size", "not divisible"),
])
def test_what_openrlhf_refuses_is_refused_naming_the_flag(overrides, field, words):
    with pytest.raises(RlsimError) as info:
        import_config("openrlhf", HYBRID, overrides)
    assert info.value.field == field and words in str(info.value) and info.value.fix


def test_dynamic_batching_offload_and_lora_are_read():
    r = import_config("openrlhf", HYBRID, ["train.dynamic_batch_enable=true", "train.max_tokens_per_gpu=8192",
                                           "ds.adam_offload=true", "ds.lora.rank=32", "+ds.lora.target_modules=q_proj"])
    w, s = r.scenario["workload"], r.scenario["schedule"]
    assert w["train_layout"]["max_tokens_per_micro_batch"] == 8192 == w["train_layout"]["logprob_max_tokens_per_micro_batch"]
    assert "micro_batch" not in w["train_layout"] and "forward_micro_batch" not in s
    assert "token budgets" in r.ignored["train.micro_batch_size"]
    assert w["train_params"]["offload"] == {"optimizer": True, "scope": "optimizer_step"}
    assert s["switch"]["offload_optimizer"] is False and "on the host already" in r.ignored["ds.enable_sleep"]
    assert w["lora"] == {"rank": 32, "targets": ["q_proj"]}


def test_deepspeed_sleep_beside_engines_of_their_own_is_the_per_phase_offload():
    """ppo_train reloads and offloads DeepSpeed's states around each fit whatever the placement."""
    r = import_config("openrlhf", ASYNC, ["+ds.enable_sleep=true"])
    assert r.scenario["workload"]["train_params"]["offload"] == {"optimizer": True, "grads": True}
    assert r.mapped["ds.enable_sleep"].startswith("workload.train_params.offload")
    with pytest.raises(RlsimError, match="Async RLHF is not supported") as info:
        import_config("openrlhf", ASYNC, ["+train.colocate_all=true", "+vllm.enable_sleep=true"])
    assert info.value.field == "vllm.enable_sleep"


def test_vllm_without_sleep_stays_resident_and_partial_rollouts_run_as_the_locked_mode():
    r = import_config("openrlhf", HYBRID, ["vllm.enable_sleep=false"])
    assert r.scenario["schedule"]["switch"]["engine_resident"] is True
    r = import_config("openrlhf", ASYNC, ["+train.partial_rollout_enable=true"])
    assert "the same step cycle" in r.mapped["train.partial_rollout_enable"] and not r.unsupported
    assert r.scenario["schedule"] == import_config("openrlhf", ASYNC).scenario["schedule"]
    same = import_config("openrlhf", ASYNC, ["+rollout.vllm_generate_batch_size=1024"])
    assert "OpenRLHF's default" in same.ignored["rollout.vllm_generate_batch_size"] and not same.unsupported
    more = import_config("openrlhf", ASYNC, ["+rollout.vllm_generate_batch_size=2048"])
    assert "over-sampling" in more.unsupported["rollout.vllm_generate_batch_size"]
    with pytest.raises(RlsimError, match="needs --train.async_enable"):
        import_config("openrlhf", ASYNC, ["+rollout.vllm_generate_batch_size=2048", "train.async_enable=false"])
    with pytest.raises(RlsimError, match="requires --train.async_enable") as info:
        import_config("openrlhf", ASYNC, ["+train.partial_rollout_enable=true", "train.async_enable=false"])
    assert info.value.field == "train.partial_rollout_enable"


def test_unknown_flags_are_listed_and_overrides_must_name_known_ones(tmp_path):
    path = script(tmp_path, HYBRID.read_text().replace("--ds.zero_stage 3", "--ds.zero_stag 3 --ds.brand_new"))
    r = import_config("openrlhf", path)
    assert "did you mean 'ds.zero_stage'" in r.unknown["ds.zero_stag"] and r.unknown["ds.brand_new"]
    with pytest.raises(RlsimError, match="names a key the config does not have"):
        import_config("openrlhf", HYBRID, ["train.batchsize=64"])


def test_every_mapped_rule_names_an_rlsim_section_and_the_guide_lists_them():
    for key, rule in openrlhf.RULES.items():
        assert rule.reason or rule.target, key
        if rule.status == "mapped":
            assert rule.target.split(".")[0] in ("workload", "schedule", "topology"), key
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    missing = [key for key in openrlhf.RULES if f"`{key}`" not in guide]
    assert not missing, f"docs/guides/frameworks.md lacks {missing} (regenerate its tables from RULES)"


def test_every_switch_and_list_flag_is_one_of_openrlhfs():
    """ARITY names only flags the table covers (a typo there would read a value as a flag)."""
    from simulator.frameworks.common import in_table
    assert all(in_table(name, openrlhf.RULES) for name in openrlhf.ARITY)


def test_a_script_in_the_names_before_0_10_imports_as_its_0_11_twin(tmp_path):
    """0.9.10's flat flags (its argparse, read in its wheel) read as the 0.11.2 flags that replaced
    them, with 0.9.10's own micro-batch defaults (8 forward, 4 training samples) where it sets none."""
    from simulator.frameworks.openrlhf_legacy import LEGACY
    old = script(tmp_path, "python3 -m openrlhf.cli.train_ppo_ray --actor_num_nodes 1 --actor_num_gpus_per_node 8 "
                           "--vllm_num_engines 4 --vllm_tensor_parallel_size 2 --colocate_all_models "
                           "--vllm_enable_sleep --deepspeed_enable_sleep --pretrain Qwen/Qwen2.5-7B-Instruct "
                           "--remote_rm_url http://rm --ref_reward_offload --zero_stage 3 --train_batch_size 64 "
                           "--rollout_batch_size 32 --n_samples_per_prompt 8 --max_new_tokens 2048 --max_len 3072 "
                           "--advantage_estimator group_norm --init_kl_coef 1e-3 --gradient_checkpointing "
                           "--packing_samples --enable_vllm_is_correction --use_wandb $TOKEN\n")
    new = tmp_path / "new.sh"
    new.write_text("python3 -m openrlhf.cli.train_ppo_ray --actor.num_nodes 1 --actor.num_gpus_per_node 8 "
                   "--vllm.num_engines 4 --vllm.tensor_parallel_size 2 --train.colocate_all --vllm.enable_sleep "
                   "--ds.enable_sleep --actor.model_name_or_path Qwen/Qwen2.5-7B-Instruct --reward.remote_url "
                   "http://rm --ref.offload --reward.offload --ds.zero_stage 3 --train.batch_size 64 "
                   "--rollout.batch_size 32 --rollout.n_samples_per_prompt 8 --rollout.max_new_tokens 2048 "
                   "--data.max_len 3072 --algo.advantage.estimator group_norm --algo.kl.init_coef 1e-3 "
                   "--actor.gradient_checkpointing_enable --ds.packing_samples --rollout.micro_batch_size 8 "
                   "--train.micro_batch_size 4 --algo.advantage.is_correction_level token\n")
    r_old, r_new = import_config("openrlhf", old), import_config("openrlhf", new)
    for r in (r_old, r_new):
        r.scenario["workload"].pop("name"), r.scenario["workload"].pop("description")
    assert r_old.scenario == r_new.scenario
    assert not r_old.unknown and set(r_old.mapped) == set(r_new.mapped) - {"rollout.micro_batch_size",
                                                                             "train.micro_batch_size"}
    assert any("before 0.10" in note and "colocate_all_models -> train.colocate_all" in note for note in r_old.notes)
    assert r_old.scenario["workload"]["train_layout"]["micro_batch"] == 4       # 0.9.10's default
    assert all(isinstance(new_name, tuple) or new_name.split(".")[0] in ("ref", "reward", "actor", "critic", "train",
                                                                           "vllm", "algo", "eval", "ckpt", "logger",
                                                                           "ds", "data", "rollout")
               for new_name in LEGACY.values())


def test_every_legacy_name_lands_in_the_table():
    from simulator.frameworks.common import in_table
    from simulator.frameworks.openrlhf_legacy import LEGACY
    targets = [name for value in LEGACY.values() for name in ((value,) if isinstance(value, str) else value)]
    assert all(in_table(name, openrlhf.RULES) for name in targets)


TOKENS = ["--actor.num_nodes", "--train.colocate_all", "--reward.clip_range", "--ds.lora.target_modules", "--x",
          "--a=b", "--=c", "-5", "1e-3", "$X", "${Y}", "${Z:-3}", "'quoted value'", '"q', "|", "2>&1", "&&", ";", "\\\n",
          "\n", "X=1", "export Y=two", "python3 -m openrlhf.cli.train_ppo_ray", "#", "--", "=", "true", "[1,2]"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(TOKENS), max_size=30))
def test_any_script_reads_or_is_refused_naming_the_file(tmp_path, parts):
    """Whatever a script holds, the reader returns flags or an RlsimError naming the script."""
    path = script(tmp_path, " ".join(parts) + "\n")
    try:
        flat = read_script(path, openrlhf.ARITY)
    except RlsimError as exc:
        assert exc.source == str(path) and exc.fix
        return
    assert all(isinstance(key, str) and key for key in flat)


def test_the_hybrid_engine_reports_openrlhfs_timers_summing_to_the_step(capsys):
    """output.timers: openrlhf: generation holds the engine's sleep and wake (and the rule rewards it
    scores), ppo_train DeepSpeed's state moves around the fit, broadcast the engine's weights woken
    before the new ones; the named timers and `other` (the fixed switch overhead, the fetch) make
    the step."""
    code, out, err = cli(capsys, "run", "--from-openrlhf", str(HYBRID), "--iterations", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    timers, stages, verl = doc["openrlhf_timing_s"], doc["stage_time_s"], doc["verl_timing_s"]
    assert sum(v for k, v in timers.items() if k != "step_total") == pytest.approx(timers["step_total"], rel=1e-9)
    assert timers["step_total"] == pytest.approx(verl["step"])
    sleep_wake = 11.3   # schedule.switch.sleep_wake_s: vLLM's sleep + wake a step
    assert timers["generation"] > stages["generate"] + sleep_wake
    assert timers["make_experience"] == pytest.approx(stages["old_logprob"] + stages["reference"], rel=1e-9)
    assert stages["train_actor"] < timers["ppo_train"] < stages["train_actor"] + 2      # the optimizer's moves
    assert stages["weight_sync"] < timers["broadcast"] < stages["weight_sync"] + 1      # the weights woken
    assert timers["other"] == pytest.approx(2 * 0.5, abs=0.01)   # two switches' overhead_s, the fetch
    code, out, err = cli(capsys, "run", "--from-openrlhf", str(HYBRID), "--iterations", "3")
    assert "openrlhf timing/make_experience" in " ".join(out.split())
    for kind in ("async", "stalesync"):   # no OpenRLHF trainer runs these
        with pytest.raises(RlsimError, match="OpenRLHF's hybrid engine") as info:
            load_scenario({"topology": {"preset": "dgx-h100", "nodes": 2}, "workload": "grpo-qwen2.5-7b",
                           "schedule": kind, "output": {"timers": "openrlhf"}})
        assert info.value.field == "output.timers"


def test_compare_keeps_the_framework_timers_where_the_kind_has_them(capsys):
    """The importer's output.timers names phases; a compared kind without them (stalesync) runs with
    rlsim's own names instead of being refused (a NeMo RL import compared as stalesync was)."""
    code, out, err = cli(capsys, "compare", "--from-openrlhf", str(HYBRID), "--schedules", "colocated,stalesync",
                         "--iterations", "2", "--json")
    assert code == 0, err
    runs = {doc["schedule"]: doc for doc in json.loads(out)}
    assert "openrlhf_timing_s" in runs["colocated"] and "openrlhf_timing_s" not in runs["stalesync"]
    code, out, err = cli(capsys, "compare", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"),
                         "--schedules", "colocated,stalesync", "--iterations", "2", "--json")
    assert code == 0, err
    runs = {doc["schedule"]: doc for doc in json.loads(out)}
    assert "nemo_rl_timing_s" in runs["colocated"] and "nemo_rl_timing_s" not in runs["stalesync"]


def test_the_deepspeed_actor_runs_transformers_code_liger_or_not():
    """OpenRLHF's actor is transformers' model under DeepSpeed: hf-transformers, or
    hf-transformers-liger with --ds.use_liger_kernel (Liger's RMSNorm, RoPE, SwiGLU: less traffic)."""
    plain = import_config("openrlhf", HYBRID)
    liger = import_config("openrlhf", HYBRID, ["+ds.use_liger_kernel=true"])
    assert plain.scenario["workload"]["train_software"] == "hf-transformers"
    assert liger.scenario["workload"]["train_software"] == "hf-transformers-liger"
    assert "ds.use_liger_kernel" in liger.mapped


def test_log_probs_and_entropy_as_openrlhfs_actor_takes_them():
    """Actor.forward casts the logits to fp32 (6 B a logit each way), divides them by a temperature that
    is not 1 (8 + 8 in fp32) and runs flash-attn's cross entropy on them (4 + 8); the update computes the
    entropy op by op on the fp32 logits where actor.entropy_coef is given, in its loss where it is not 0."""
    def workload(*over):
        return import_config("openrlhf", HYBRID, list(over)).scenario["workload"]

    plain = workload()
    assert plain["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 24.0,
                                                "loss_forward_share": pytest.approx(10 / 24)}
    assert "entropy" not in plain
    hot = workload("rollout.temperature=0.7", "actor.entropy_coef=0")
    assert hot["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 40.0,
                                              "loss_forward_share": pytest.approx(18 / 40)}
    assert hot["entropy"] == {"passes": ["update"], "kernel": "eager-fp32"}
    assert workload("actor.entropy_coef=0.01")["entropy"] == {"passes": ["update"], "in_loss": True,
                                                              "kernel": "eager-fp32"}


def test_padded_rows_attention_as_openrlhfs_attn_implementation_runs_it():
    """Without packing each micro-batch is right-padded to its longest sample (replay_buffer.py: no fixed
    width) and goes through the model with its attention_mask: flash_attention_2 (the default) unpads it
    for the attention, rows of 100 and 300 tokens 100^2 + 300^2; sdpa runs the padded width, 2 x 300^2;
    eager materializes the scores (flash_attention false); packed rows run flash_attention_2 whatever
    the flag says (train_ppo_ray.py); flex attention is not modelled."""
    def imported(*over):
        return import_config("openrlhf", HYBRID, ["ds.packing_samples=false", *over])

    def compute(r):
        return r.scenario["workload"]["train_params"]["compute"]

    flash = imported()
    assert row_keys(compute(flash)) == {"attention_skips_padding": True}
    assert "pad_rows_to" not in compute(flash)
    assert attention_squares(compute(flash), [100, 300]) == 100 ** 2 + 300 ** 2
    sdpa = imported("ds.attn_implementation=sdpa")
    assert row_keys(compute(sdpa)) == {} and "ds.attn_implementation" in sdpa.mapped
    assert attention_squares(compute(sdpa), [100, 300]) == 2 * 300 ** 2
    eager = imported("ds.attn_implementation=eager")
    assert row_keys(compute(eager)) == {"flash_attention": False}
    flex = imported("ds.attn_implementation=flex_attention")
    assert row_keys(compute(flex)) == {} and "ds.attn_implementation" in flex.unsupported
    packed = import_config("openrlhf", HYBRID, ["ds.attn_implementation=eager"])
    assert row_keys(compute(packed)) == {} and "swaps in flash_attention_2" in packed.ignored["ds.attn_implementation"]
    for r in (flash, sdpa, eager):
        load_scenario(r.scenario)


# DeepSpeed ZeRO-3 (stage3.py): the bf16 partition kept from init, the IPG bucket and its reduce-scatter copy,
# stage3_max_live_parameters' 1e9 window (simulator/frameworks/deepspeed_zero.py)
ZERO3_MEMORY = {"grad_bytes_per_param": 2.0, "grad_buffer_persists": True, "zero_reduce_bucket_params": 5e8,
                "zero_reduce_buckets": 2, "zero_reduce_buckets_kept": 1,
                "zero3_max_live_params": 1e9, "zero_step_grad_copy_bytes_per_param": 6.0,
                "zero_step_sub_group_params": 1e9}
# ... of them, what only the device's optimizer step holds (not under ZeRO-Offload: stage3.py _prepare_sub_group)
ZERO3_DEVICE_STEP = ("grad_buffer_persists", "zero_step_grad_copy_bytes_per_param", "zero_step_sub_group_params")
# ... and every micro-batch's embedding / head sync and the wait for the last bucket
ZERO3_COMM = {"grad_reduce_bytes_per_param": 2.0, "zero3_outer_sync_every_micro_batch": True,
              "zero3_backward_waits_last_bucket": True}


def _zero_params(*overrides: str) -> tuple[dict, dict, object]:
    r = import_config("openrlhf", ASYNC, list(overrides))
    tp = r.scenario["workload"].get("train_params", {})
    return tp.get("memory", {}), tp.get("comm", {}), r


def test_a_zero2_actor_holds_and_reduces_its_gradients_as_deepspeed_does():
    """get_train_ds_config's reduce_bucket_size "auto" (DeepSpeed's 5e8 elements), bf16 gradients reduced
    in bf16, each bucket all-reduced from its flattened copy (allreduce_bucket: a bucket, 1, and the copy,
    zero_allreduce_copies 1), ZeRO-2's reduction in every backward and its accumulated partition
    (simulator/frameworks/deepspeed_zero.py); ds.overlap_comm adds DeepSpeed's second bucket (2)."""
    memory, comm, r = _zero_params("ds.zero_stage=2")
    assert memory == {"grad_bytes_per_param": 2.0, "zero_reduce_bucket_params": 5e8, "zero_reduce_buckets": 1, "zero_allreduce_copies": 1,
                      "zero_step_grad_copy_bytes_per_param": 6.0, "zero2_accumulated_grad_partitions": 1}
    assert comm == {"grad_reduce_bytes_per_param": 2.0, "zero_grad_reduce": "all-reduce",
                    "zero2_reduce_every_micro_batch": True}
    load_scenario(r.scenario)
    memory, _, r = _zero_params("ds.zero_stage=2", "+ds.overlap_comm=true")
    assert (memory["zero_reduce_buckets"], memory["zero_allreduce_copies"]) == (2, 1)
    assert r.mapped["ds.overlap_comm"].startswith("workload.train_params.memory.zero_reduce_buckets")
    load_scenario(r.scenario)


@pytest.mark.parametrize(("stage", "overlap", "buckets"), [(1, False, 1), (2, False, 1), (2, True, 2)])
def test_zero_1_2_hold_the_all_reduces_flattened_copy_beside_their_buckets(stage, overlap, buckets):
    """allreduce_bucket all-reduces `self.flatten(bucket)` (stage_1_and_2.py): a bucket-sized torch.cat of the
    slices the bucket holds for each owning rank, beside the contiguous bucket(s) it was copied from. The
    update's backward buffers on the async example's 8-GPU actor: (buckets + 1) x 5e8 x 2 B, whatever the
    model (the buckets are allocated whole)."""
    from simulator.llm.architecture import load_model
    from simulator.llm.memory import memory_per_device
    from simulator.llm.train_layout import TrainLayout

    overrides = [f"ds.zero_stage={stage}"] + (["+ds.overlap_comm=true"] if overlap else [])
    sc = load_scenario(import_config("openrlhf", ASYNC, overrides).scenario)
    b = memory_per_device(load_model("llama3.1-8b"), TrainLayout(dp=8, zero=stage), 2048, 1e15,
                          params=sc.workload.train_params.memory, micro_batches=1)
    assert b.zero_buffers_bytes == (buckets + 1) * 5e8 * 2.0


@pytest.mark.parametrize(("stage", "memory", "comm"), [
    (0, {"grad_bytes_per_param": 2.0}, {"grad_reduce_bytes_per_param": 2.0}),
    (1, {"grad_bytes_per_param": 2.0, "zero_reduce_bucket_params": 5e8, "zero_reduce_buckets": 1, "zero_allreduce_copies": 1,
         "zero_step_grad_copy_bytes_per_param": 6.0},
     {"grad_reduce_bytes_per_param": 2.0, "zero_grad_reduce": "all-reduce"}),
    (3, ZERO3_MEMORY, ZERO3_COMM)])
def test_each_zero_stage_takes_its_own_deepspeed_keys(stage, memory, comm):
    got_memory, got_comm, r = _zero_params(f"ds.zero_stage={stage}")
    assert (got_memory, got_comm) == (memory, comm)
    load_scenario(r.scenario)


def test_zero_offload_keeps_no_accumulated_partition_and_zero3_reads_past_overlap_comm():
    """ZeRO-Offload copies each backward's partition to the host (copy_grads_in_partition's cpu_offload
    branch): no second partition on the GPU. ZeRO-3 is rlsim's FSDP model: overlap_comm is not read."""
    memory, _, r = _zero_params("ds.zero_stage=2", "+ds.adam_offload=true")
    assert "zero2_accumulated_grad_partitions" not in memory and memory["zero_reduce_bucket_params"] == 5e8
    assert memory["grad_partition_on_host"] is True   # copy_grads_in_partition returns early: no partition on the GPU
    assert "zero_step_grad_copy_bytes_per_param" not in memory   # the step reads the host's fp32 partition
    load_scenario(r.scenario)
    memory, _, r = _zero_params("ds.zero_stage=1", "+ds.adam_offload=true")   # the whole param.grad on the GPU
    assert "grad_partition_on_host" not in memory
    load_scenario(r.scenario)
    _, _, r = _zero_params("+ds.overlap_comm=true")
    assert "ZeRO-3" in r.ignored["ds.overlap_comm"]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_offload_keeps_a_device_buffer_of_the_largest_parameter_at_zero_1_2(stage):
    """stage_1_and_2.py allocates temp_grad_buffer_for_gpu_offload (largest_param_numel, bf16, on the GPU)
    under cpu_offload at ZeRO-1 and 2 alike and never frees it; stage3.py has none. The async example's
    actor (Llama-3.1-8B, tp 1): its embedding, 128256 x 4096 x 2 B = 1.05 GB, resident between steps too."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts, kept_state_bytes

    memory, _, r = _zero_params(f"ds.zero_stage={stage}", "+ds.adam_offload=true")
    assert memory.get("zero_offload_device_grad_buffers") == (1 if stage < 3 else None)
    assert "zero_offload_device_grad_buffers" not in _zero_params(f"ds.zero_stage={stage}")[0]
    sc = load_scenario(r.scenario)
    costs = LlmCosts(sc, load_topology(sc.topology))
    lay = costs.layout(8)
    state = costs._resident_memory(costs.pool(list(range(8))))
    assert state.offload_staging_bytes == (128256 * 4096 * 2.0 if stage < 3 else 0.0)
    bare = sc.workload.train_params.model_copy(update={"memory": sc.workload.train_params.memory.model_copy(
        update={"zero_offload_device_grad_buffers": 0})})
    kept = kept_state_bytes(costs.model, lay, 80 * 2**30, sc.workload.train_params)
    assert kept - kept_state_bytes(costs.model, lay, 80 * 2**30, bare) == pytest.approx(state.offload_staging_bytes)


def test_zero3_under_zero_offload_keeps_no_gradient_partition_on_the_gpu_between_steps():
    """stage3.py allocates grad_partitions_flat_buffer on self.device, the host under offload_optimizer."""
    memory, _, r = _zero_params("+ds.adam_offload=true")
    assert memory == {**{k: v for k, v in ZERO3_MEMORY.items() if k not in ZERO3_DEVICE_STEP},
                      "grad_partition_on_host": True}
    load_scenario(r.scenario)


@pytest.mark.parametrize(("stage", "grads", "buckets"), [(1, 6.0, False), (3, 4.0, True)])
def test_fp32_gradient_accumulation_as_deepspeed_runs_it_at_zero1_and_zero3(stage, grads, buckets):
    """--ds.grad_accum_dtype fp32 beside bf16 weights: ZeRO-1 runs BF16_Optimizer (a whole fp32 gradient
    buffer beside the bf16 gradients: 4 + 2 B a parameter, one all-reduce a step, no IPG buckets), ZeRO-3
    keeps an fp32 partition (4 B) and still reduces in bf16."""
    memory, comm, r = _zero_params(f"ds.zero_stage={stage}", "+ds.grad_accum_dtype=fp32")
    assert memory["grad_bytes_per_param"] == grads and comm["grad_reduce_bytes_per_param"] == 2.0
    assert ("zero_reduce_bucket_params" in memory) == buckets
    # BF16_Optimizer: not stage_1_and_2's step; ZeRO-3: the fp32 partition's flat copy alone (.to(fp32) returns it)
    assert memory.get("zero_step_grad_copy_bytes_per_param") == (4.0 if stage == 3 else None)
    assert memory["grad_buffer_persists"] is True   # ZeRO-1: BF16_Optimizer's fp32 buffer; ZeRO-3: the partition
    assert memory.get("kept_grad_bytes_per_param") == (4.0 if stage == 1 else None)
    assert r.mapped["ds.grad_accum_dtype"].startswith("workload.train_params.memory.grad_bytes_per_param")
    load_scenario(r.scenario)


@pytest.mark.parametrize(("overrides", "step_copy"), [(["+ds.adam_offload=true"], None),
                                                     (["ds.param_dtype=fp16"], 4.0)])
def test_zero1_fp32_accumulation_without_bf16_optimizer_keeps_an_fp32_grad_accum_a_parameter(overrides, step_copy):
    """ZeRO-1 under ZeRO-Offload, or with fp16 weights, runs DeepSpeedZeroOptimizer (engine.py
    _do_optimizer_sanity_check: BF16_Optimizer only for bf16 without cpu offload), whose
    use_grad_accum_attribute (stage_1_and_2.py: a separate accumulation dtype at ZeRO-1) casts each
    param.grad to an fp32 param.grad_accum in the gradient hook and frees it (_fill_param_grad_accum_attribute):
    4 B a parameter, whole (ZeRO-1), reduced in the 16-bit communication dtype (get_gradient_for_reduction:
    .to(self.dtype)), the buckets as ever; the device step's flat copy is already fp32 (4, no cast); freed
    after the step (free_grad_in_param_list), not kept."""
    memory, comm, r = _zero_params("ds.zero_stage=1", "+ds.grad_accum_dtype=fp32", *overrides)
    assert memory["grad_bytes_per_param"] == 4.0 and comm["grad_reduce_bytes_per_param"] == 2.0
    assert memory["zero_reduce_bucket_params"] == 5e8 and comm["zero_grad_reduce"] == "all-reduce"
    assert memory.get("zero_step_grad_copy_bytes_per_param") == step_copy
    assert "grad_buffer_persists" not in memory and "kept_grad_bytes_per_param" not in memory
    assert r.mapped["ds.grad_accum_dtype"].startswith("workload.train_params.memory.grad_bytes_per_param")
    load_scenario(r.scenario)


@pytest.mark.parametrize("offload", [[], ["+ds.adam_offload=true"]])
def test_zero2_fp32_accumulation_holds_and_reduces_what_bf16_does(offload):
    """deepspeed 0.19.6's ZeRO-2 takes the grad_accum attribute at ZeRO-1 only (stage_1_and_2.py
    use_grad_accum_attribute: not partition_gradients): the partition's gradients are copied into the bf16
    grads_in_partition and accumulated there (get_all_grad_tensors returns them as they are; only a missing
    gradient's zeros take the fp32 dtype), reduced in bf16, flattened and cast at the step as without it;
    under ZeRO-Offload the host's fp32 buffers either way. So the keys are bf16's, the value read (ignored,
    with the reason), not left unsupported."""
    bare, bare_comm, _ = _zero_params("ds.zero_stage=2", *offload)
    memory, comm, r = _zero_params("ds.zero_stage=2", "+ds.grad_accum_dtype=fp32", *offload)
    assert (memory, comm) == (bare, bare_comm) and memory["grad_bytes_per_param"] == 2.0
    assert "ZeRO-2" in r.ignored["ds.grad_accum_dtype"] and "ds.grad_accum_dtype" not in r.unsupported


def test_zero3_fp32_accumulation_beside_fp16_weights_keeps_an_fp32_partition():
    """stage3.py allocates grad_partitions_flat_buffer in gradient_accumulation_dtype, whatever the 16-bit
    weights: fp16 as bf16."""
    memory, comm, _ = _zero_params("ds.param_dtype=fp16", "+ds.grad_accum_dtype=fp32")
    assert memory["grad_bytes_per_param"] == 4.0 and comm["grad_reduce_bytes_per_param"] == 2.0


def test_fp32_gradient_accumulation_elsewhere_is_refused_or_listed_unsupported():
    """ZeRO-0 refuses the mix (engine.py _do_optimizer_sanity_check); bf16 is the model's dtype, DeepSpeed's
    default; a 16-bit accumulation of the other 16-bit dtype is not modelled."""
    with pytest.raises(RlsimError) as info:
        _zero_params("ds.zero_stage=0", "+ds.grad_accum_dtype=fp32")
    assert info.value.field == "ds.grad_accum_dtype" and "zero_stage 1-3" in info.value.fix
    memory, _, r = _zero_params("ds.zero_stage=2", "+ds.grad_accum_dtype=fp16")
    assert "fp16" in r.unsupported["ds.grad_accum_dtype"] and memory["grad_bytes_per_param"] == 2.0
    _, _, r = _zero_params("+ds.grad_accum_dtype=bf16")
    assert "default" in r.ignored["ds.grad_accum_dtype"]
    with pytest.raises(RlsimError, match="not a DeepSpeed dtype"):
        _zero_params("+ds.grad_accum_dtype=fp8")


def test_zero1_fp32_accumulation_keeps_its_fp32_buffer_beside_the_log_prob_pass():
    """BF16_Optimizer allocates its whole fp32 gradient buffer at init and only zeroes it after a step
    (bf16_optimizer.py clear_hp_grads), freeing the bf16 param.grad (zero_grad set_to_none): the actor's
    log-prob pass runs beside 4 B a parameter of kept gradients, whole on every rank (ZeRO-1), not 6."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts, kept_gradient_bytes

    r = import_config("openrlhf", ASYNC, ["ds.zero_stage=1", "+ds.grad_accum_dtype=fp32"])
    sc = load_scenario(r.scenario)
    costs = LlmCosts(sc, load_topology(sc.topology))
    pool = costs.pool(list(range(8)))
    state, params = costs._resident_memory(pool), sc.workload.train_params
    assert costs.layout(8).zero == 1
    trained = state.gradients_bytes / 6.0   # the whole model's parameters (unpartitioned at ZeRO-1)
    assert 7.9e9 < trained < 8.1e9           # Llama-3.1-8B
    assert kept_gradient_bytes(state, params) == pytest.approx(4.0 * trained)
    beside, _ = costs._forward_beside_bytes("actor", pool)
    assert beside == pytest.approx(state.optimizer_bytes + 4.0 * trained)


@pytest.mark.parametrize("script", [HYBRID, ASYNC])
def test_deepspeed_sleep_with_zero1_fp32_accumulation_is_refused(script):
    """offload_deepspeed_states calls model.optimizer.offload_states, which BF16_Optimizer lacks (deepspeed
    0.19.6 defines it in stage_1_and_2.py and stage3.py only): OpenRLHF fails at the actor's init. Without
    ds.enable_sleep, at ZeRO-3, or under ds.adam_offload (ZeRO-1 then runs DeepSpeedZeroOptimizer, and
    offload_deepspeed_states returns at once) it imports."""
    with pytest.raises(RlsimError) as info:
        import_config("openrlhf", script, ["ds.zero_stage=1", "+ds.grad_accum_dtype=fp32", "+ds.enable_sleep=true"])
    assert info.value.field == "ds.enable_sleep" and "BF16_Optimizer" in str(info.value)
    assert "--ds.enable_sleep" in info.value.fix and "--ds.grad_accum_dtype" in info.value.fix
    for ok in (["ds.zero_stage=1", "+ds.grad_accum_dtype=fp32", "+ds.enable_sleep=false"],
               ["ds.zero_stage=3", "+ds.grad_accum_dtype=fp32", "+ds.enable_sleep=true"],
               ["ds.zero_stage=1", "+ds.grad_accum_dtype=fp32", "+ds.enable_sleep=true", "+ds.adam_offload=true"]):
        import_config("openrlhf", script, ok)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_offloads_update_holds_no_gradient_partition_from_zero2_on(stage):
    """Under ds.adam_offload the async example's actor (Llama-3.1-8B on 8 GPUs) holds no gradient partition
    on the GPU at ZeRO-2 / 3 (2 B x params / 8 without the offload), its buckets still there; at ZeRO-1
    the whole bf16 gradients (2 B x params) either way."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts

    def states(*overrides: str):
        sc = load_scenario(import_config("openrlhf", ASYNC, [f"ds.zero_stage={stage}", *overrides]).scenario)
        costs = LlmCosts(sc, load_topology(sc.topology))
        return costs._resident_memory(costs.pool(list(range(8))))
    on_gpu, offloaded = states(), states("+ds.adam_offload=true")
    trained = on_gpu.gradients_bytes / (2.0 if stage == 1 else 2.0 / 8)
    assert 7.9e9 < trained < 8.1e9
    assert offloaded.gradients_bytes == (on_gpu.gradients_bytes if stage == 1 else 0.0)
    assert offloaded.zero_buffers_bytes >= 2 * 5e8 * 2.0   # a bucket and its copy, on the GPU


def test_zero3s_ipg_bucket_stays_beside_the_other_phases_unless_deepspeed_sleeps():
    """stage3.py allocates the IPG bucket at init and frees it only in offload_states
    (contiguous_grad_buffer): the async example's actor keeps 5e8 x 2 B = 1 GB beside its bf16 gradient
    partition between steps; under ZeRO-Offload the bucket alone (the partition is on the host, the bucket
    on the GPU, and offload_deepspeed_states returns at once); --ds.enable_sleep's per-phase offload frees
    both."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts, kept_gradient_bytes

    def kept(*overrides: str) -> tuple[float, float]:
        sc = load_scenario(import_config("openrlhf", ASYNC, list(overrides)).scenario)
        costs = LlmCosts(sc, load_topology(sc.topology))
        state = costs._resident_memory(costs.pool(list(range(8))))
        return kept_gradient_bytes(state, sc.workload.train_params), state.gradients_bytes
    held, grads = kept()
    assert held == pytest.approx(grads + 5e8 * 2.0) and 1.9e9 < grads < 2.1e9   # 2 B x 8B / 8
    assert kept("+ds.adam_offload=true")[0] == pytest.approx(5e8 * 2.0)
    assert kept("+ds.enable_sleep=true")[0] == 0.0


def test_the_engine_share_fix_names_what_frees_a_kept_zero3_bucket():
    """The hybrid example under ds.adam_offload (the gradient partition on the host, so no kept gradient
    buffer) at vllm.gpu_memory_utilization 0.97: the resident state still holds ZeRO-3's IPG bucket
    (5e8 x 2 B), and the fix names what frees it (the switch's free_gradients; not the per-phase
    offload.grads, which ZeRO-Offload's host partition refuses); following it frees 1 GB. Without
    ds.adam_offload and ds.enable_sleep the fix names the kept gradient buffer, as before."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts, resident_training_bytes

    def refused(*overrides: str, switch: dict | None = None) -> tuple[RlsimError, LlmCosts]:
        scenario = import_config("openrlhf", HYBRID, ["vllm.gpu_memory_utilization=0.97", *overrides]).scenario
        scenario["schedule"]["switch"].update(switch or {})
        sc = load_scenario(scenario)
        costs = LlmCosts(sc, load_topology(sc.topology))
        with pytest.raises(RlsimError) as info:
            costs.rollout_phase_bytes(costs.layout(8))
        return info.value, costs
    error, costs = refused("+ds.adam_offload=true")
    assert "free DeepSpeed's kept reduction bucket (schedule.switch.free_gradients: true:" in error.fix
    assert "kept gradient buffer" not in error.fix and "offload.grads" not in error.fix
    _, freed = refused("+ds.adam_offload=true", switch={"free_gradients": True})
    held = [resident_training_bytes(c.model, c.layout(8), c.switch_params, 80 * 2**30, 0.0, c.train_params)
            for c in (costs, freed)]
    assert held[0] - held[1] == pytest.approx(5e8 * 2.0, rel=1e-12)
    error, _ = refused("ds.enable_sleep=false")
    assert "offload the kept gradient buffer" in error.fix and "kept reduction bucket" not in error.fix

