"""`--from-verl` / `--from-nemo-rl`: framework configs turned into scenarios (issue 11 item 6)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.api import simulate
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import import_config, nemo_rl, verl
from simulator.frameworks.common import apply_hydra_overrides, model_for, resolve_interpolations
from simulator.scenario import load_scenario

from .padded_attention import attention_squares, row_keys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
DATA = Path(__file__).resolve().parent / "data"
FLAG = {"verl": "--from-verl", "nemo-rl": "--from-nemo-rl"}
SHIPPED = [("verl", "verl-grpo-qwen2.5-7b"), ("verl", "verl-fully-async-qwen2.5-7b"),
           ("verl", "verl-one-step-off-qwen2.5-7b"), ("nemo-rl", "nemo-rl-grpo-llama3.1-8b"),
           ("nemo-rl", "nemo-rl-grpo-llama3.1-8b-async-1off"), ("verl", "verl-v1-colocate-async-qwen2.5-7b"),
           ("verl", "verl-v1-sync-dapo-qwen2.5-7b")]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_colocated_example_runs_to_the_same_json_as_its_hand_written_scenario(capsys):
    code, imported, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                              "--iterations", "1", "--json")
    assert code == 0, err
    assert "actor_rollout_ref.ref.fsdp_config.param_offload" in err      # the listing, on stderr
    code, hand, err = cli(capsys, "run", str(DATA / "verl-grpo-qwen2.5-7b.scenario.yaml"), "--iterations", "1", "--json")
    assert code == 0, err
    doc = json.loads(imported)
    report = doc.pop("framework_import")
    assert json.dumps(doc, indent=2) + "\n" == hand                     # byte for byte, minus the import report
    assert report["framework"] == "verl" and report["source"].endswith("verl-grpo-qwen2.5-7b.yaml")
    # the reference's micro-batch equals the old log-prob pass's, which rlsim's forward passes share
    assert "equal" in report["mapped"]["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"]
    # verl forces the FSDP reference's CPU offload whatever the key says: ignored, with the reason
    assert "CPUOffload" in report["ignored"]["actor_rollout_ref.ref.fsdp_config.param_offload"]
    assert report["mapped"]["data.train_batch_size"] == "workload.prompts_per_step"
    assert report["ignored"]["trainer.logger"]


@pytest.mark.parametrize(("framework", "name"), SHIPPED[1:])
def test_every_other_example_runs_to_the_same_json_as_its_hand_written_scenario(capsys, framework, name):
    code, imported, err = cli(capsys, "run", FLAG[framework], str(EXAMPLES / f"{name}.yaml"), "--iterations", "1",
                              "--json")
    assert code == 0, err
    code, hand, err = cli(capsys, "run", str(DATA / f"{name}.scenario.yaml"), "--iterations", "1", "--json")
    assert code == 0, err
    doc = json.loads(imported)
    doc.pop("framework_import")
    assert json.dumps(doc, indent=2) + "\n" == hand


@pytest.mark.parametrize(("framework", "name"), SHIPPED)
def test_print_scenario_of_each_example_loads_as_its_hand_written_scenario(capsys, tmp_path, framework, name):
    code, printed, err = cli(capsys, "run", FLAG[framework], str(EXAMPLES / f"{name}.yaml"), "--print-scenario")
    assert code == 0, err
    path = tmp_path / "printed.yaml"
    path.write_text(printed)
    assert printed.startswith("# rlsim scenario imported from")
    assert load_scenario(path).to_dict() == load_scenario(DATA / f"{name}.scenario.yaml").to_dict()


def test_a_printed_scenario_names_a_relative_topology_file_so_it_loads_from_any_folder(capsys, tmp_path,
                                                                                        monkeypatch):
    """--topology t.yaml (relative) was printed as topology: {preset: t.yaml}, which a run from another
    folder could not find (a review): the printed scenario names the file absolute."""
    import shutil
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    shutil.copy(ROOT / "topologies" / "dgx-h100.yaml", here / "t.yaml")
    monkeypatch.chdir(here)
    code, printed, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                             "--topology", "t.yaml", "--print-scenario")
    assert code == 0, err
    (elsewhere / "s.yaml").write_text(printed)
    monkeypatch.chdir(elsewhere)
    assert load_scenario(elsewhere / "s.yaml").topology["preset"] == str((here / "t.yaml").resolve())


def test_every_shipped_example_says_it_is_written_for_rlsim():
    for _, name in SHIPPED:
        head = (EXAMPLES / f"{name}.yaml").read_text().splitlines()[0]
        assert head.startswith("# An example written for rlsim"), name


def test_unsupported_and_unknown_keys_are_listed_in_the_json(capsys):
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                         "actor_rollout_ref.model.enable_activation_offload=true", "+my.custom_knob=3",
                         "data.train_batch_size=64", "--iterations", "1", "--json")
    assert code == 0, err
    report = json.loads(out)["framework_import"]
    assert "not modelled" in report["unsupported"]["actor_rollout_ref.model.enable_activation_offload"]
    assert "my.custom_knob" in report["unknown"]
    assert json.loads(out)["devices"] == 8


def _imported_workload(capsys, tmp_path, flag, example, *overrides):
    """The workload of an example config imported with `overrides`, through --print-scenario."""
    code, printed, err = cli(capsys, "run", flag, str(EXAMPLES / example), *overrides, "--print-scenario")
    assert code == 0, err
    path = tmp_path / "printed.yaml"
    path.write_text(printed)
    return load_scenario(path).workload


def test_engine_knobs_offload_and_expert_tp_map_onto_the_modelled_fields(capsys, tmp_path):
    """The knobs issue 12 modelled are mapped, not listed as unsupported; only the ones given."""
    workload = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml",
                                  "actor_rollout_ref.rollout.enforce_eager=true",
                                  "actor_rollout_ref.rollout.enable_chunked_prefill=true",
                                  "actor_rollout_ref.rollout.max_num_batched_tokens=8192",
                                  "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true")
    assert workload.inference.enforce_eager and workload.inference.chunked_prefill
    assert workload.inference.max_num_batched_tokens == 8192
    assert workload.train_params.offload.optimizer and not workload.train_params.offload.params
    assert workload.train_params.offload.pageable             # verl moves it with .to("cpu")
    assert workload.inference.enable_prefix_caching          # not given: rlsim's default stands


def test_verl_rollout_name_is_the_named_engine_under_the_knobs_verl_passes(capsys, tmp_path):
    # rollout.name vllm (verl's default): vLLM V1 through the LLM class, with the step budget and
    # chunked prefill verl always hands it (8192 tokens by default, not the LLM class's 16384 on an H100)
    plain = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml")
    assert plain.engine == "vllm-v1"
    assert (plain.inference.max_num_batched_tokens, plain.inference.chunked_prefill) == (8192, True)
    assert plain.inference.cuda_graph_max_batch == 512 and not plain.inference.async_scheduling
    given = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml",
                               "actor_rollout_ref.rollout.max_num_batched_tokens=16384")
    assert given.inference.max_num_batched_tokens == 16384
    # another engine is listed as unsupported and keeps rlsim's own engine defaults
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    other = import_config("verl", cfg, ["actor_rollout_ref.rollout.name=hf"])
    assert "engine" not in other.scenario["workload"]
    assert "hf" in other.unsupported["actor_rollout_ref.rollout.name"]
    assert import_config("verl", cfg).mapped["actor_rollout_ref.rollout.name"].startswith("workload.engine")


def test_verl_free_cache_engine_sleeps_at_level_2_unless_layered_summon():
    """verl 0.6+ puts vLLM (>= 0.8.5) to sleep at level 2, discarding the weights a refit overwrites;
    layered_summon keeps level 1 (verl/third_party/vllm VLLM_SLEEP_LEVEL, vllm_rollout.py)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    switch = import_config("verl", cfg, ["actor_rollout_ref.rollout.free_cache_engine=true"]).scenario["schedule"]["switch"]
    assert {k: switch[k] for k in ("engine_sleep", "engine_sleep_level")} == {"engine_sleep": True, "engine_sleep_level": 2}
    layered = import_config("verl", cfg, ["actor_rollout_ref.rollout.free_cache_engine=true",
                                          "actor_rollout_ref.rollout.layered_summon=true"])
    assert layered.scenario["schedule"]["switch"]["engine_sleep_level"] == 1
    assert layered.mapped["actor_rollout_ref.rollout.layered_summon"].startswith("schedule.switch.engine_sleep_level")


@pytest.mark.parametrize("offload", ["false", "true"])
def test_verl_colocated_keeps_the_optimizer_on_the_devices_unless_optimizer_offload(offload):
    """verl's hybrid engine moves the optimizer to the host only under optimizer_offload (the
    per-phase offload); the colocated switch never does (it was offloaded by rlsim's default, so a
    config that runs out of memory in verl fitted, and with optimizer_offload it moved twice)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    result = import_config("verl", cfg, [f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={offload}"])
    schedule, workload = result.scenario["schedule"], result.scenario["workload"]
    assert schedule["switch"]["offload_optimizer"] is False and schedule["switch"]["free_gradients"] is True
    assert workload.get("train_params", {}).get("offload", {}).get("optimizer", False) is (offload == "true")
    assert any("optimizer state stays on the devices" in note for note in result.notes)
    # FSDP's note names FSDP's key alone (a Megatron actor has a note of its own)
    note = next(note for note in result.notes if "optimizer state stays on the devices" in note)
    assert "actor.fsdp_config.optimizer_offload" in note and "megatron" not in note


@pytest.mark.parametrize(("overrides", "workers", "handover"), [
    ([], 1, None), (["reward_model.reward_manager=dapo"], 1, None), (["reward_model.reward_manager=prime"], None, None),
    (["actor_rollout_ref.rollout.mode=async"], 8, "sample"),
    (["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.agent.num_workers=3"], 3, "sample")])
def test_verl_rule_rewards_are_its_reward_managers_loop(overrides, workers, handover):
    """verl's driver scores the batch with the naive / dapo manager one sample after another (one
    worker); the agent loop scores each sample as it ends on its rollout.agent.num_workers workers;
    both at the manager's measured cost a sample. Another manager keeps rlsim's workers, said in the
    import table."""
    from simulator import params
    result = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", overrides)
    reward = result.scenario["workload"]["reward"]
    assert (reward.get("workers"), reward.get("handover")) == (workers, handover)
    assert (reward["cpu_s_per_sample"], reward["capped_cpu_s_per_token"]) == (
        params.VERL_NAIVE_CPU_S_PER_SAMPLE, params.VERL_NAIVE_CAPPED_CPU_S_PER_TOKEN)
    if workers is None:
        assert "reward_model.reward_manager" in result.ignored
    if len(overrides) == 2:
        assert result.mapped["actor_rollout_ref.rollout.agent.num_workers"].startswith("workload.reward.workers")


def test_verl_colocated_resident_optimizer_counts_against_the_engine_memory(capsys):
    """At gpu_memory_utilization 0.8 a 7B FSDP trainer's resident state no longer fits beside the
    engine on 8 H100s: exit 2 naming the verl key (verl would run out of memory)."""
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                       "actor_rollout_ref.rollout.gpu_memory_utilization=0.9", "--iterations", "1")
    assert code == 2 and "resident training state" in err and "gpu_memory_utilization" in err


def test_dapo_generation_batches_pay_what_each_framework_does_between_them():
    """verl's DAPO on the hybrid engine: every generation batch is a generate_sequences call, which
    re-syncs the weights into the woken engine and puts it to sleep after (reshard); NeMo RL: vLLM
    sleeps after each batch and wakes for the next (sleep)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    dapo = import_config("verl", cfg, ["+algorithm.filter_groups.enable=true"])
    assert "dynamic_sampling" in dapo.scenario["workload"]
    assert dapo.scenario["schedule"]["between_gen_batches"] == "reshard"
    assert "between_gen_batches" not in import_config("verl", cfg).scenario["schedule"]
    nemo = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml", ["grpo.use_dynamic_sampling=true"])
    assert nemo.scenario["schedule"]["between_gen_batches"] == "sleep"
    load_scenario(dapo.scenario)
    load_scenario(nemo.scenario)


def test_verl_agent_loop_mode_deals_each_sample_as_its_own_request():
    """rollout.mode async (verl's agent loop, default from 0.7): the batch is repeated n times and each
    sample goes to the server with the fewest requests so far, so a prompt's samples spread over the
    engines (per-sample dispatch); sync keeps a prompt's samples on one engine (per-prompt)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    agent = import_config("verl", cfg, ["actor_rollout_ref.rollout.mode=async"])
    assert agent.scenario["workload"]["inference"]["dispatch"] == "per-sample"
    assert agent.mapped["actor_rollout_ref.rollout.mode"].startswith("workload.inference.dispatch")
    assert "dispatch" not in import_config("verl", cfg).scenario["workload"]["inference"]
    fully = import_config("verl", EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml", ["actor_rollout_ref.rollout.mode=async"])
    assert "dispatch" not in fully.scenario["workload"].get("inference", {})   # its Rollouter keeps prompts whole


def test_verl_enforce_eager_default_changed_with_the_version_so_the_import_says_which_it_took():
    """verl 0.4-0.5 default enforce_eager true, 0.6+ false (their ppo_trainer.yaml): not given, rlsim
    keeps CUDA graphs and says so; given, it is the engine knob and no note is left."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    assert verl.ENFORCE_EAGER_NOTE in import_config("verl", cfg).notes
    assert verl.MAX_NUM_SEQS_NOTE in import_config("verl", cfg).notes
    given = import_config("verl", cfg, ["actor_rollout_ref.rollout.enforce_eager=true"])
    assert verl.ENFORCE_EAGER_NOTE not in given.notes
    assert given.scenario["workload"]["inference"]["enforce_eager"] is True


def test_verl_max_num_seqs_default_is_the_verl_that_runs_the_recipe():
    """rollout.max_num_seqs not given: verl 0.6-0.8's 1024 for the recipes they run, 0.9's 256 (its
    rollout.yaml) for the v1 recipes only 0.9 has; a note says which was taken, none where it is given."""
    legacy = import_config("verl", EXAMPLES / "verl-one-step-off-qwen2.5-7b.yaml")
    assert legacy.scenario["workload"]["rollout_layout"]["max_num_seqs"] == 1024
    assert verl.MAX_NUM_SEQS_DEFAULT_NOTE in legacy.notes
    # one note for the default taken: the generic "not given: verl's default 1024" repeated it (an audit)
    assert [n for n in legacy.notes if "rollout.max_num_seqs not given" in n] == [verl.MAX_NUM_SEQS_DEFAULT_NOTE]
    v1 = import_config("verl", EXAMPLES / "verl-v1-sync-dapo-qwen2.5-7b.yaml")
    assert v1.scenario["workload"]["rollout_layout"]["max_num_seqs"] == verl.VERL_09_MAX_NUM_SEQS == 256
    assert verl.MAX_NUM_SEQS_V1_NOTE in v1.notes and verl.MAX_NUM_SEQS_DEFAULT_NOTE not in v1.notes
    given = import_config("verl", EXAMPLES / "verl-v1-sync-dapo-qwen2.5-7b.yaml",
                          ["actor_rollout_ref.rollout.max_num_seqs=512"])
    assert given.scenario["workload"]["rollout_layout"]["max_num_seqs"] == 512
    assert verl.MAX_NUM_SEQS_V1_NOTE not in given.notes


def test_verl_sglang_rollout_runs_sglang_056_under_the_knobs_verl_passes():
    """verl 0.7's SGLang server takes tp, mem_fraction_static, max_running_requests = max_num_seqs and
    disable_cuda_graph = enforce_eager; SGLang 0.5.6's defaults stand for the rest (blocking prefill
    steps of 8192 tokens, overlap scheduling, its CUDA-graph cap by TP), the other vLLM knobs never
    reach it, and free_cache_engine releases memory without vLLM's sleep mode or a weights backup."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    result = import_config("verl", cfg, ["actor_rollout_ref.rollout.name=sglang",
                                         "actor_rollout_ref.rollout.enforce_eager=true",
                                         "actor_rollout_ref.rollout.max_num_batched_tokens=4096",
                                         "actor_rollout_ref.rollout.free_cache_engine=true"])
    workload, schedule = result.scenario["workload"], result.scenario["schedule"]
    assert workload["engine"] == verl.SGLANG_ENGINE == "sglang-0.5.6"
    assert workload["rollout_layout"]["max_num_seqs"] == 256        # the example's rollout.max_num_seqs
    assert workload["inference"] == {"enforce_eager": True}   # SGLang's custom all-reduce stays on
    assert "SGLang" in result.ignored["actor_rollout_ref.rollout.max_num_batched_tokens"]
    assert verl.SGLANG_VERSION_NOTE in result.notes
    assert "engine_sleep" not in schedule.get("switch", {})
    assert "torch_memory_saver" in result.mapped["actor_rollout_ref.rollout.free_cache_engine"]
    run = simulate(result.scenario, iterations=1)
    assert run.summary["layouts"]["rollout"]["max_num_seqs"] == 256


def test_verl_async_reward_function_overlaps_the_log_prob_passes():
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    key = "+reward_model.launch_reward_fn_async"
    on = import_config("verl", cfg, [f"{key}=true"])
    assert on.scenario["schedule"]["reward_during_forwards"] is True
    assert load_scenario(on.scenario).schedule.reward_during_forwards
    assert "reward_during_forwards" not in import_config("verl", cfg, [f"{key}=false"]).scenario["schedule"]
    # dynamic sampling scores before its filter; split pools score as instances finish
    dapo = import_config("verl", cfg, [f"{key}=true", "+algorithm.filter_groups.enable=true"])
    assert "reward_during_forwards" not in dapo.scenario["schedule"]
    assert "reward_model.launch_reward_fn_async" in dapo.ignored
    split = import_config("verl", EXAMPLES / "verl-one-step-off-qwen2.5-7b.yaml", [f"{key}=true"])
    assert "reward_model.launch_reward_fn_async" in split.unsupported


def test_nemo_rl_eager_engine_and_optimizer_offload_are_mapped(capsys, tmp_path):
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml",
                                  "policy.generation.vllm_cfg.enforce_eager=true",
                                  "policy.megatron_cfg.optimizer.optimizer_cpu_offload=true",
                                  "policy.megatron_cfg.optimizer.optimizer_offload_fraction=0.75")
    offload = workload.train_params.offload
    assert workload.inference.enforce_eager and offload.optimizer and offload.scope == "optimizer_step"
    assert offload.optimizer_fraction == 0.75


def test_nemo_rl_cpu_offload_without_a_fraction_offloads_nothing_as_megatron_does():
    """Megatron-Core's optimizer_offload_fraction defaults to 0.0: optimizer_cpu_offload alone keeps
    the optimizer state on the devices (HybridDeviceOptimizer puts no parameter on the host); said."""
    result = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                           ["policy.megatron_cfg.optimizer.optimizer_cpu_offload=true"])
    assert result.scenario["workload"]["train_params"]["offload"] == {"optimizer": False}
    assert any("nothing is offloaded" in note for note in result.notes)


def test_nemo_rl_vllm_pipeline_stages_are_the_engines_pp(capsys, tmp_path):
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml",
                                  "policy.generation.vllm_cfg.pipeline_parallel_size=2")
    assert workload.rollout_layout["pp"] == 2
    plain = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml")
    assert "pp" not in plain.scenario["workload"]["rollout_layout"]
    assert main(["run", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"),
                 "policy.generation.vllm_cfg.pipeline_parallel_size=2", "--iterations", "1", "--json"]) == 0


def test_hydra_override_forms():
    flat = {"a.b": 1, "a.c.d": 2}
    out = apply_hydra_overrides(flat, ["a.b=5", "+x.y=[1, 2]", "++a.c.d=null", "~a.b"], "cfg")
    assert out == {"a.c.d": None, "x.y": [1, 2]}
    with pytest.raises(RlsimError, match="override"):
        apply_hydra_overrides(flat, ["a..b=1"], "cfg")
    with pytest.raises(RlsimError, match="override"):
        apply_hydra_overrides(flat, ["other.yaml"], "cfg")
    # Hydra: "Could not delete from config ... does not exist" (it was accepted silently; a trial)
    known = {"a.e"}.__contains__
    with pytest.raises(RlsimError, match="deletes a key the config does not have") as info:
        apply_hydra_overrides(flat, ["~a.bb"], "cfg", known=known)
    assert info.value.fix == "did you mean ~a.b?"
    assert apply_hydra_overrides(flat, ["~a.e", "~a.c"], "cfg", known=known) == {"a.b": 1}   # a default key; a section


def test_interpolations_and_nemo_mul_resolve():
    flat = resolve_interpolations({"p.t": 4096, "p.m": 2, "p.k": "${mul:${p.t}, ${p.m}}", "p.n": "${p.t}",
                                   "p.e": "${oc.env:HOME}"})
    assert (flat["p.k"], flat["p.n"], flat["p.e"]) == (8192, 4096, "${oc.env:HOME}")


def test_omegaconfs_select_and_relative_references_resolve():
    """verl's generated configs: ${oc.select:key,default} (the default where the key is absent, a YAML
    scalar) and ${.sibling} / ${..parent_sibling} references."""
    flat = resolve_interpolations({
        "a.mini": 64, "c.mini": "${oc.select:a.mini,256}", "c.none": "${oc.select:a.gone,null}",
        "c.path": '${oc.select:a.gone,"~/m"}', "c.flag": "${oc.select:a.gone,false}", "c.t": 32768,
        "c.f": "${.t}", "c.d.g": "${..t}", "c.m": "${oc.select:.mini,null}", "c.chain": "${oc.select:c.f,1}"})
    assert (flat["c.mini"], flat["c.none"], flat["c.path"], flat["c.flag"]) == (64, None, "~/m", False)
    assert (flat["c.f"], flat["c.d.g"], flat["c.m"], flat["c.chain"]) == (32768, 32768, 64, 32768)


@pytest.mark.parametrize(("given", "preset"), [
    ("Qwen/Qwen2.5-Math-7B", "qwen2.5-math-7b"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"), ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama3.1-70b"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("unsloth/DeepSeek-V3-0324-BF16", "deepseek-v3"),
    ("/data/models/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("~/models/Qwen2.5-32B/", "qwen2.5-32b"),
    # the small models of the frameworks' own examples (verl's quickstart, NeMo RL's grpo_math_1B)
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"), ("Qwen/Qwen2.5-1.5B", "qwen2.5-1.5b"),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b"), ("meta-llama/Llama-3.2-1B-Instruct", "llama3.2-1b"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"), ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"), ("Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3-30b-a3b")])
def test_model_paths_map_to_presets(given, preset):
    assert model_for(given, "actor_rollout_ref.model.path", "cfg")[0] == preset


@pytest.mark.parametrize("given", [None, "", "  "])
def test_a_config_without_a_model_says_so(given):
    with pytest.raises(RlsimError, match="names no model") as err:
        model_for(given, "policy.model_name", "cfg")
    assert "policy.model_name=HF_ID" in err.value.fix


def test_a_folder_with_a_config_json_is_used_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert model_for(str(tmp_path), "policy.model_name", "cfg")[0] == str(tmp_path / "config.json")


def test_an_unmappable_model_is_a_clear_error_and_set_workload_model_fixes_it(capsys):
    cfg = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    code, out, err = cli(capsys, "run", "--from-verl", cfg, "actor_rollout_ref.model.path=acme/Mystery-9B", "--print-scenario")
    assert code == 2 and "Traceback" not in err
    assert "actor_rollout_ref.model.path" in err and "--set workload.model=PRESET" in err
    code, out, err = cli(capsys, "run", "--from-verl", cfg, "actor_rollout_ref.model.path=acme/Mystery-9B",
                         "--set", "workload.model=qwen2.5-7b", "--print-scenario")
    assert code == 0, err
    assert yaml.safe_load(out)["workload"]["model"] == "qwen2.5-7b"


def test_topology_is_sized_from_the_pools_unless_set(capsys):
    cfg = str(EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml")
    r = import_config("verl", cfg, ["trainer.nnodes=2", "rollout.nnodes=3"], topology="hgx-h20")
    assert r.scenario["topology"] == {"preset": "hgx-h20", "nodes": 5}
    assert r.scenario["schedule"]["rollout_devices"] == 24
    code, out, err = cli(capsys, "run", "--from-verl", cfg, "--set", "topology.nodes=4", "--print-scenario")
    assert code == 0, err
    assert yaml.safe_load(out)["topology"]["nodes"] == 4
    with pytest.raises(RlsimError, match="not whole"):
        import_config("verl", cfg, ["trainer.n_gpus_per_node=4"])


def test_a_job_on_part_of_each_node_keeps_its_gpus_per_node(capsys):
    """verl's 1-GPU quickstart and NeMo RL's 1-GPU default run on part of a server: the topology keeps
    the config's GPUs per node (on the server's links), where it asked for whole 8-GPU nodes before;
    4 GPUs on each of 2 nodes stay 2 nodes, their rings crossing the NICs."""
    cfg = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    one = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    assert import_config("verl", cfg, one).scenario["topology"] == {"preset": "dgx-h100", "nodes": 1,
                                                                     "devices_per_node": 1}
    code, out, err = cli(capsys, "run", "--from-verl", cfg, *one, "--iterations", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["devices"] == 1
    two = import_config("verl", cfg, ["trainer.nnodes=2", "trainer.n_gpus_per_node=4"])
    assert two.scenario["topology"] == {"preset": "dgx-h100", "nodes": 2, "devices_per_node": 4}
    assert any("4 of each node's 8 devices" in note for note in two.notes)
    split = ["actor_rollout_ref.hybrid_engine=false", "+rollout.nnodes=1", "+rollout.n_gpus_per_node=4",
             "trainer.n_gpus_per_node=4"]
    assert import_config("verl", cfg, split).scenario["topology"] == {"preset": "dgx-h100", "nodes": 2,
                                                                       "devices_per_node": 4}
    nemo = import_config("nemo-rl", EXAMPLES / _NEMO, ["cluster.num_nodes=2", "cluster.gpus_per_node=2"])
    assert nemo.scenario["topology"] == {"preset": "dgx-h100", "nodes": 2, "devices_per_node": 2}
    load_scenario(nemo.scenario)


def test_verl_critic_offload_is_its_own_and_a_critic_free_run_ignores_the_critic():
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    ppo = ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B"]
    micro = "+critic.ppo_micro_batch_size_per_gpu=4"   # verl asks a critic for one without use_dynamic_bsz
    default = import_config("verl", cfg, [*ppo, micro]).scenario["workload"]
    assert default["critic_offload"] == {"params": False, "optimizer": False}   # verl's defaults, not the actor's
    moved = import_config("verl", cfg, [*ppo, micro, "+critic.model.fsdp_config.param_offload=true",
                                        "+critic.model.fsdp_config.optimizer_offload=true"])
    assert moved.scenario["workload"]["critic_offload"] == {"params": True, "optimizer": True}
    assert "critic.model.fsdp_config.param_offload" in moved.mapped
    load_scenario(moved.scenario)
    # the critic's layout keys read as the actor's are mapped, others not; its micro-batching is its own
    same = import_config("verl", cfg, [*ppo, "+critic.ppo_micro_batch_size_per_gpu=8", "+critic.ppo_epochs=3",
                                       "+critic.ppo_mini_batch_size=64"])
    assert "critic.ppo_epochs" in same.unsupported and "actor.ppo_epochs" in same.unsupported["critic.ppo_epochs"]
    assert "critic.ppo_mini_batch_size" in same.mapped   # the example's actor takes 64 too
    assert same.scenario["workload"]["critic_batching"] == {"micro_batch": 8, "forward_micro_batch": 8}
    dynamic = import_config("verl", cfg, [*ppo, "actor_rollout_ref.actor.use_dynamic_bsz=true"])
    assert dynamic.scenario["workload"]["critic_batching"] == {   # verl's critic default: "doubled for critic"
        "max_tokens_per_micro_batch": 32768, "forward_max_tokens_per_micro_batch": 32768}
    mixed = import_config("verl", cfg, [*ppo, "+critic.use_dynamic_bsz=true"])
    assert "critic_batching" not in mixed.scenario["workload"] and "actor's mode" in mixed.unsupported[
        "critic.use_dynamic_bsz"]
    load_scenario(dynamic.scenario)
    megatron = import_config("verl", cfg, [*ppo, micro, "actor_rollout_ref.actor.strategy=megatron",
                                           "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
                                           "+critic.strategy=megatron", "+critic.megatron.param_offload=true",
                                           "+critic.model.fsdp_config.optimizer_offload=true"])
    assert megatron.scenario["workload"]["critic_offload"] == {"params": True, "optimizer": False}
    assert "megatron" in megatron.ignored["critic.model.fsdp_config.optimizer_offload"]   # the other backend's
    grpo = import_config("verl", cfg, ["+critic.model.fsdp_config.param_offload=true", "+critic.ppo_epochs=2"])
    assert "critic_offload" not in grpo.scenario["workload"]
    assert all("critic-free" in grpo.ignored[key] for key in ("critic.model.fsdp_config.param_offload",
                                                              "critic.ppo_epochs"))


# verl's quickstart PPO arguments (docs/start/quickstart.rst) a dumped config carries; the engine named
# (the generated file leaves rollout.name '???', which verl makes the user give)
QUICKSTART = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.name=vllm",
              "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "data.train_batch_size=256",
              "actor_rollout_ref.actor.ppo_mini_batch_size=64", "trainer.n_gpus_per_node=1"]


@pytest.mark.parametrize("name, unsupported, kernel", [
    ("verl-0.6.0-generated-ppo-trainer.yaml", set(), "eager"),   # padded rows (use_remove_padding false): op by op
    ("verl-0.6.0-generated-ppo-megatron-trainer.yaml", set(), "vocab-parallel"),
    ("verl-0.7.0-generated-ppo-trainer.yaml", {"critic.model.use_remove_padding"}, "compiled"),   # 0.7's critic pads
    ("verl-0.7.0-generated-ppo-megatron-trainer.yaml", set(), "vocab-parallel"),
    ("verl-0.9.1-generated-ppo-trainer.yaml", set(), "compiled"),
    ("verl-0.9.1-generated-ppo-megatron-trainer.yaml", set(), "vocab-parallel")])
def test_verls_whole_default_config_imports_with_every_key_accounted_for(capsys, name, unsupported, kernel):
    """verl 0.6.0's, 0.7.0's and 0.9.1's generated PPO configs (every key of their defaults, as a dumped
    config has them), FSDP and megatron workers: no key unknown, none unsupported but 0.7's padded critic;
    torch.compile (verl's default true) is the old log-prob pass's entropy kernel where the rows are packed
    (0.6's padded rows take it op by op). Profilers, Hydra targets,
    sections verl does not run (reward model, multi-turn, the agent loop) and the reference's and
    critic's copies of the actor's options at the actor's values are accounted for, not listed; the
    critic's own micro-batching is mapped (workload.critic_batching)."""
    imported = import_config("verl", DATA / name, QUICKSTART)
    assert imported.unknown == {}
    assert set(imported.unsupported) == unsupported
    assert imported.scenario["workload"]["entropy"] == {"passes": ["old_logprob"], "kernel": kernel}
    assert imported.scenario["workload"]["algorithm"] == "ppo"
    assert imported.scenario["topology"]["devices_per_node"] == 1
    code, out, err = cli(capsys, "run", "--from-verl", str(DATA / name), *QUICKSTART, "--iterations", "1", "--json")
    assert code == 0, err
    stages = json.loads(out)["stage_time_s"]
    assert 0 < stages["train_critic"] < stages["train_actor"]   # the value head: no 152k-vocab logits


def test_the_fsdp_engine_config_copies_verls_legacy_workers_do_not_read_are_ignored():
    """verl's FSDPEngineConfig repeats strategy and ulysses_sequence_parallel_size for its new engine
    workers; the legacy ones (use_legacy_worker_impl auto, verl 0.6's default) read the role's own."""
    over = [*QUICKSTART, "actor_rollout_ref.actor.strategy=fsdp2", "critic.strategy=fsdp2",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size=2",
            "trainer.n_gpus_per_node=2"]
    imported = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml", over)
    assert not {k for k in imported.unsupported if "strategy" in k or "ulysses" in k}
    assert "legacy workers" in imported.ignored["actor_rollout_ref.actor.fsdp_config.strategy"]
    new = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml",
                        [*QUICKSTART, "trainer.use_legacy_worker_impl=disable"])
    assert "new engine workers" in new.unsupported["trainer.use_legacy_worker_impl"]


def test_copies_of_actor_options_take_the_actors_status_at_equal_values():
    imported = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml", QUICKSTART)
    assert "as actor_rollout_ref.actor.fsdp_config.forward_prefetch" in imported.ignored[
        "actor_rollout_ref.ref.fsdp_config.forward_prefetch"]
    differs = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml",
                            [*QUICKSTART, "actor_rollout_ref.ref.fsdp_config.forward_prefetch=true"])
    assert "reference forward" in differs.unsupported["actor_rollout_ref.ref.fsdp_config.forward_prefetch"]
    megatron = import_config("verl", DATA / "verl-0.6.0-generated-ppo-megatron-trainer.yaml", QUICKSTART)
    t = "megatron.override_transformer_config.recompute_granularity"   # selected as a whole section
    assert "as actor_rollout_ref.actor." + t in megatron.ignored.get(f"actor_rollout_ref.ref.{t}", "") + \
        megatron.mapped.get(f"actor_rollout_ref.ref.{t}", "")


def test_verl_keeps_its_fsdp_reference_and_reward_model_on_the_host():
    """verl 0.6.0 builds its FSDP reference (and reward model) with CPU offload whatever the config
    says: the import sets reference_cpu_offload (at ref.fsdp_config.model_dtype's bytes) and
    reward.cpu_offload; its megatron reference is not offloaded."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    fsdp = import_config("verl", cfg).scenario["workload"]
    assert fsdp["reference_cpu_offload"] is True and fsdp["reference_cpu_offload_bytes_per_param"] == 4
    bf16 = import_config("verl", cfg, ["+actor_rollout_ref.ref.fsdp_config.model_dtype=bf16"]).scenario["workload"]
    assert bf16["reference_cpu_offload_bytes_per_param"] == 2
    megatron = import_config("verl", cfg, ["actor_rollout_ref.actor.strategy=megatron"]).scenario["workload"]
    assert "reference_cpu_offload" not in megatron
    no_kl = import_config("verl", cfg, ["actor_rollout_ref.actor.use_kl_loss=false"]).scenario["workload"]
    assert "reference_cpu_offload" not in no_kl
    rm = import_config("verl", cfg, ["reward_model.enable=true", "+reward_model.model.path=Qwen/Qwen2.5-7B"])
    assert rm.scenario["workload"]["reward"]["cpu_offload"] is True
    load_scenario(rm.scenario)
    # verl's whole config with a reward model: its copies of the actor's options at equal values are
    # accounted for; its own forward budget (a copy of the critic's) and a code sandbox are not modelled
    whole = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml",
                          [*QUICKSTART, "reward_model.enable=true", "reward_model.model.path=Qwen/Qwen2.5-0.5B-Instruct",
                           "actor_rollout_ref.actor.use_dynamic_bsz=true", "reward_model.sandbox_fusion.url=http://sandbox"])
    assert {k for k in whole.unsupported if k.startswith("reward_model.")} == {
        "reward_model.forward_max_token_len_per_gpu", "reward_model.sandbox_fusion.url"}
    assert "as actor_rollout_ref.actor.strategy" in whole.mapped["reward_model.strategy"]


def test_a_fully_async_partial_rollout_at_a_zero_threshold_is_listed_ignored():
    # verl cancels nothing at a sync there (and rlsim refuses the pair): the import leaves it out
    cfg = EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml"
    r = import_config("verl", cfg, ["async_training.staleness_threshold=0"])
    assert "partial_rollout" not in r.scenario["schedule"]
    assert "staleness_threshold 0" in r.ignored["async_training.partial_rollout"]
    load_scenario(r.scenario)
    assert import_config("verl", cfg).scenario["schedule"]["partial_rollout"] is True   # at 0.5 it is read


def test_schedule_is_inferred_from_the_keys_or_given():
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    assert import_config("verl", cfg).scenario["schedule"]["kind"] == "colocated"
    split = ["actor_rollout_ref.hybrid_engine=false", "+rollout.nnodes=1", "+rollout.n_gpus_per_node=4",
             "trainer.n_gpus_per_node=4"]
    assert import_config("verl", cfg, split).scenario["schedule"]["kind"] == "one-step-off"
    fa = import_config("verl", cfg, split, schedule="fully-async")
    assert fa.scenario["schedule"]["kind"] == "verl-fully-async" and "framework-schedule" in fa.schedule_rule
    load_scenario(fa.scenario)
    with pytest.raises(RlsimError, match="rollout pool"):
        import_config("verl", cfg, schedule="one-step-off")


def test_verl_kl_and_estimators():
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    no_kl = import_config("verl", cfg, ["actor_rollout_ref.actor.use_kl_loss=false"]).scenario["workload"]
    assert no_kl["reference"] is False
    ppo = import_config("verl", cfg, ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B",
                                      "+critic.ppo_micro_batch_size_per_gpu=4"])
    assert (ppo.scenario["workload"]["algorithm"], ppo.scenario["workload"]["critic_model"]) == ("ppo", "qwen2.5-7b")
    dapo = import_config("verl", cfg, ["+algorithm.filter_groups.enable=true", "+data.gen_batch_size=768"])
    assert dapo.scenario["workload"]["dynamic_sampling"] == {"gen_prompts": 768}


def test_the_cap_on_generation_batches_is_mapped_where_it_applies():
    # verl: max_num_gen_batches > 0 caps the sub-rounds (0 or less: no cap); without filter_groups it is ignored
    cfg, on = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", "+algorithm.filter_groups.enable=true"
    capped = import_config("verl", cfg, [on, "+algorithm.filter_groups.max_num_gen_batches=10"])
    # a generation batch of data.train_batch_size prompts: verl's default for data.gen_batch_size, said
    # (rlsim's own default, prompts_per_step / keep_fraction, ran silently before: 512 against verl's 256)
    assert capped.scenario["workload"]["dynamic_sampling"] == {"gen_prompts": 256, "max_gen_batches": 10}
    assert any("data.gen_batch_size not given" in note for note in capped.notes)
    assert "algorithm.filter_groups.max_num_gen_batches" in capped.mapped
    free = import_config("verl", cfg, [on, "+algorithm.filter_groups.max_num_gen_batches=0"])
    assert free.scenario["workload"]["dynamic_sampling"] == {"gen_prompts": 256}
    off = import_config("verl", cfg, ["+algorithm.filter_groups.max_num_gen_batches=10"])
    assert "dynamic_sampling" not in off.scenario["workload"]
    assert "algorithm.filter_groups.max_num_gen_batches" in off.ignored
    for bad in ("2.5", "many"):   # refused, not taken as no cap
        with pytest.raises(RlsimError, match="max_num_gen_batches"):
            import_config("verl", cfg, [on, f"+algorithm.filter_groups.max_num_gen_batches={bad}"])
    # NeMo RL: grpo.dynamic_sampling_max_gen_batches with use_dynamic_sampling (the V6 DAPO recipe's 10)
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    dapo = import_config("nemo-rl", nemo, ["grpo.use_dynamic_sampling=true", "grpo.batch_multiplier=3",
                                           "grpo.dynamic_sampling_max_gen_batches=10"])
    w = dapo.scenario["workload"]
    assert w["dynamic_sampling"]["max_gen_batches"] == 10
    assert load_scenario(dapo.scenario).workload.dynamic_sampling.max_gen_batches == 10
    plain = import_config("nemo-rl", nemo, ["grpo.dynamic_sampling_max_gen_batches=10"])
    assert "grpo.dynamic_sampling_max_gen_batches" in plain.ignored


def test_nemo_rl_environment_workers_are_the_jobs_reward_pool():
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"   # env.math.num_workers: 8
    r = import_config("nemo-rl", nemo)
    assert r.scenario["workload"]["reward"] == {"workers": 8, "handover": "batch"} and "env.math.num_workers" in r.mapped
    assert load_scenario(r.scenario).workload.reward.workers == 8
    same = import_config("nemo-rl", nemo, ["env.math.num_workers=64", "+env.dapo.num_workers=64"])
    assert same.scenario["workload"]["reward"] == {"workers": 64, "handover": "batch"}
    # the async engine's rollout scores each sample as it finishes
    scored = import_config("nemo-rl", nemo, ["policy.generation.vllm_cfg.async_engine=true"])
    assert scored.scenario["workload"]["reward"] == {"workers": 8, "handover": "sample"}
    mixed = import_config("nemo-rl", nemo, ["+env.dapo.num_workers=64"])
    assert "reward" not in mixed.scenario["workload"]
    assert {"env.math.num_workers", "env.dapo.num_workers"} <= set(mixed.unsupported)


def test_nemo_defaults_chain_and_batch_checks(tmp_path):
    base = yaml.safe_load((EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml").read_text())
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "recipe.yaml").write_text("defaults: base.yaml\ngrpo:\n  num_prompts_per_step: 32\n"
                                          "  use_dynamic_sampling: true\n  batch_multiplier: 3\n")
    r = import_config("nemo-rl", tmp_path / "recipe.yaml")
    w = r.scenario["workload"]
    assert (w["prompts_per_step"], w["algorithm"], w["dynamic_sampling"]) == (32, "dapo", {"gen_prompts": 96})
    assert w["reference"] is True and load_scenario(r.scenario).workload.reference is True
    (tmp_path / "bad.yaml").write_text("defaults: missing.yaml\n")
    with pytest.raises(RlsimError, match="base config"):
        import_config("nemo-rl", tmp_path / "bad.yaml")
    with pytest.raises(RlsimError, match="whole prompt groups"):
        import_config("nemo-rl", tmp_path / "recipe.yaml", ["policy.train_global_batch_size=500"])


def test_a_hydra_self_entry_places_the_files_own_keys(tmp_path):
    """Hydra's `_self_` under defaults: is where the file's own keys merge (entries after it override
    them), not a base file ("base config '_self_' not found" before)."""
    base = yaml.safe_load((EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml").read_text())
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "late.yaml").write_text("grpo:\n  num_prompts_per_step: 16\n")
    (tmp_path / "first.yaml").write_text("defaults: [base.yaml, _self_]\ngrpo:\n  num_prompts_per_step: 32\n")
    (tmp_path / "after.yaml").write_text("defaults: [base.yaml, _self_, late.yaml]\ngrpo:\n  num_prompts_per_step: 32\n")
    assert import_config("nemo-rl", tmp_path / "first.yaml").scenario["workload"]["prompts_per_step"] == 32
    assert import_config("nemo-rl", tmp_path / "after.yaml").scenario["workload"]["prompts_per_step"] == 16


@pytest.mark.parametrize("files, says", [
    ({"r.yaml": "defaults: 5\n"}, "defaults must be a file path or a list"),     # a TypeError traceback before
    ({"r.yaml": "defaults: true\n"}, "defaults must be a file path or a list"),
    ({"r.yaml": "defaults: r.yaml\n"}, "is a cycle: r.yaml -> r.yaml"),           # cycles ran to a depth cap,
    ({"r.yaml": "defaults: [b.yaml]\n", "b.yaml": "defaults: r.yaml\n"}, "cycle"),  # then dropped the rest
    ({"r.yaml": "defaults:\n- policy@policy: big\n- _self_\n"}, "'policy@policy: big' selects a Hydra config group"),
])
@pytest.mark.parametrize("framework", ["verl", "nemo-rl"])
def test_a_bad_defaults_entry_is_an_error_naming_it(tmp_path, files, says, framework):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(RlsimError, match=says) as info:
        import_config(framework, tmp_path / "r.yaml")
    assert info.value.field == "defaults"


def test_nemo_split_pools_on_policy_is_disaggregated():
    r = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b-async-1off.yaml", ["grpo.async_grpo.enabled=false"])
    assert r.scenario["schedule"]["kind"] == "disaggregated" and r.scenario["schedule"]["rollout_devices"] == 8
    load_scenario(r.scenario)


def test_flags_are_refused_where_they_do_not_apply(capsys):
    code, _, err = cli(capsys, "run", "--print-scenario")
    assert code == 2 and "--from-verl" in err
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"), "--workload",
                       "grpo-qwen2.5-7b", "--print-scenario")
    assert code == 2 and "cannot be combined" in err


@pytest.mark.parametrize("module", [verl, nemo_rl])
def test_tables_name_rlsim_sections_and_reasons(module):
    for key, rule in module.RULES.items():
        assert rule.reason or rule.target, key
        if rule.status == "mapped":
            assert rule.target.split(".")[0] in ("workload", "schedule", "topology"), key


def test_examples_are_not_workload_presets(capsys):
    code, out, _ = cli(capsys, "presets", "--json")
    doc = json.loads(out)
    assert not any("verl" in name or "nemo" in name or "areal" in name for name in doc["workloads"])
    assert "verl-grpo-qwen2.5-7b.yaml" in {Path(p).name for p in doc["framework_configs"]}


@pytest.mark.parametrize("module", [verl, nemo_rl])
def test_the_guide_lists_every_table_entry(module):
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    missing = [key for key in module.RULES if f"`{key}`" not in guide]
    assert not missing, f"docs/guides/frameworks.md lacks {missing} (regenerate its tables from RULES)"


def test_nemo_rl_multi_turn_runs_in_lockstep_unless_the_engine_is_async(capsys, tmp_path):
    # run_multi_turn_rollout steps the batch turn by turn; with async_engine each sample goes on its own
    recipe = "nemo-rl-grpo-llama3.1-8b.yaml"
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", recipe, "grpo.max_rollout_turns=4", *_TOOLS)
    assert (workload.multi_turn.max_turns, workload.multi_turn.lockstep) == (4, True)
    assert workload.response_length["max"] == workload.inference.max_model_len - 1   # the turns share T-max
    assert workload.multi_turn.max_turn_tokens == workload.inference.max_model_len   # max_new_tokens: T-max here
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", recipe, "grpo.max_rollout_turns=2",
                                  "policy.generation.max_new_tokens=1024", *_TOOLS)
    assert (workload.multi_turn.max_turn_tokens, workload.response_length["max"]) == (1024, 2048)
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", recipe, "grpo.max_rollout_turns=4",
                                  "policy.generation.vllm_cfg.async_engine=true", *_TOOLS)
    assert workload.multi_turn.lockstep is False
    assert _imported_workload(capsys, tmp_path, "--from-nemo-rl", recipe, "grpo.max_rollout_turns=1").multi_turn is None


def test_nemo_rl_megatron_expert_tp_and_uneven_stages_are_mapped(capsys, tmp_path):
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml",
                                  "policy.model_name=Qwen/Qwen3-30B-A3B",
                                  "policy.megatron_cfg.enabled=true",
                                  "policy.megatron_cfg.pipeline_model_parallel_size=2",
                                  "policy.megatron_cfg.num_layers_in_first_pipeline_stage=23",
                                  "policy.megatron_cfg.num_layers_in_last_pipeline_stage=25",
                                  "policy.megatron_cfg.expert_tensor_parallel_size=1")
    layout = workload.train_layout
    assert {k: layout[k] for k in ("pp", "pp_first_stage_layers", "pp_last_stage_layers", "etp")} == \
        {"pp": 2, "pp_first_stage_layers": 23, "pp_last_stage_layers": 25, "etp": 1}


NEMO_MOE = ["policy.model_name=Qwen/Qwen3-30B-A3B", "policy.megatron_cfg.tensor_model_parallel_size=2",
            "policy.megatron_cfg.pipeline_model_parallel_size=1", "policy.megatron_cfg.expert_model_parallel_size=8"]


def test_nemo_rl_megatron_expert_tp_left_out_is_its_base_recipes_1():
    """NeMo RL v0.5's grpo_math_1B.yaml gives megatron_cfg.expert_tensor_parallel_size 1, which every recipe
    chained to it inherits (../shared/reference/nemo-v05: the llama3.1-8b recipe, which sets no expert sizes,
    runs at 1); a recipe with its base inlined and the key left out was imported at etp unset (= tp), the
    experts split 2 ways more than NeMo RL splits them. Said in a note; on a dense model left out and unsaid."""
    recipe = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    key = "policy.megatron_cfg.expert_tensor_parallel_size"
    moe = import_config("nemo-rl", recipe, NEMO_MOE)
    assert moe.scenario["workload"]["train_layout"]["etp"] == 1
    assert any(note.startswith(f"{key} not given: nemo-rl's default 1") for note in moe.notes)
    load_scenario(moe.scenario)
    given = import_config("nemo-rl", recipe, [*NEMO_MOE, f"+{key}=2"])
    assert given.scenario["workload"]["train_layout"]["etp"] == 2
    null = import_config("nemo-rl", recipe, [*NEMO_MOE, f"+{key}=null"])      # Megatron's default: tp
    assert "etp" not in null.scenario["workload"]["train_layout"]
    dense = import_config("nemo-rl", recipe, ["policy.megatron_cfg.tensor_model_parallel_size=2"])
    assert "etp" not in dense.scenario["workload"]["train_layout"]
    assert key not in dense.ignored and not any(key in note for note in dense.notes)


@pytest.mark.parametrize(("model", "etp"), [("qwen3-30b-a3b", 1), ("qwen2.5-7b", None)])
def test_nemo_rl_expert_tp_default_follows_the_model_given_by_set(capsys, model, etp):
    """The model given by --set was not known to the import: at ep 1 it took it as dense and left NeMo RL's
    etp 1 out, so an MoE model trained its experts over tp 2 (etp = tp). The --set value is now read: etp 1
    on an MoE model, left out on a dense one, as the recipe's own model decides it."""
    recipe = str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml")
    code, printed, err = cli(capsys, "run", "--from-nemo-rl", recipe, "policy.megatron_cfg.tensor_model_parallel_size=2",
                             "--set", f"workload.model={model}", "--print-scenario")
    assert code == 0, err
    workload = yaml.safe_load(printed)["workload"]
    assert workload["model"] == model and workload["train_layout"]["ep"] == 1
    assert workload["train_layout"].get("etp") == etp
    by_recipe = import_config("nemo-rl", recipe, ["policy.megatron_cfg.tensor_model_parallel_size=2",
                                                  f"policy.model_name={'Qwen/Qwen3-30B-A3B' if etp else 'Qwen/Qwen2.5-7B'}"])
    assert by_recipe.scenario["workload"]["train_layout"].get("etp") == etp   # as the recipe's own model


# verl's megatron workers recompute as Megatron's TransformerConfig overrides say (none by default)
VERL_FULL_RECOMPUTE = "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full"
# Megatron-Core's TransformerConfig needs a method and a layer count with full (verl's defaults: null)
VERL_UNIFORM_1 = ("+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform",
                  "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers=1")


def test_verl_megatron_recompute_comes_from_the_transformer_config_overrides():
    """verl's megatron workers do not read the hf model's enable_gradient_checkpointing (its FSDP
    workers do): recompute_granularity null (verl's default) is none, full full (uniform), selective
    the attention core (modules other than core_attn are not modelled); recompute_method and
    recompute_num_layers map to train_layout's (uniform groups, block's first layers of each chunk)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"]
    t = "actor_rollout_ref.actor.megatron.override_transformer_config"
    plain = import_config("verl", cfg, megatron)
    assert plain.scenario["workload"]["train_layout"]["recompute"] == "none"
    assert "do not read it" in plain.ignored["actor_rollout_ref.model.enable_gradient_checkpointing"]
    full = import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=full", f"+{t}.recompute_method=uniform",
                                       f"+{t}.recompute_num_layers=1", f"+{t}.recompute_modules=[core_attn]"])
    assert full.scenario["workload"]["train_layout"]["recompute"] == "full"
    assert f"{t}.recompute_method" in full.mapped and "selective only" in full.ignored[f"{t}.recompute_modules"]
    assert {"recompute_method", "recompute_num_layers"}.isdisjoint(full.scenario["workload"]["train_layout"])
    block = import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=full", f"+{t}.recompute_method=block",
                                        f"+{t}.recompute_num_layers=3"])
    layout = block.scenario["workload"]["train_layout"]
    assert (layout["recompute"], layout["recompute_method"], layout["recompute_num_layers"]) == ("full", "block", 3)
    assert f"{t}.recompute_method" in block.mapped and f"{t}.recompute_num_layers" in block.mapped
    uniform = import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=full",
                                          f"+{t}.recompute_method=uniform", f"+{t}.recompute_num_layers=4"])
    assert uniform.scenario["workload"]["train_layout"]["recompute_num_layers"] == 4
    ignored = import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=selective",
                                          f"+{t}.recompute_method=block"])
    assert "recompute_method" not in ignored.scenario["workload"]["train_layout"]
    assert "full only" in ignored.ignored[f"{t}.recompute_method"]
    with pytest.raises(RlsimError, match="recompute_method"):
        import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=full", f"+{t}.recompute_method=bogus"])
    # what Megatron-Core's TransformerConfig.__post_init__ refuses (verl leaves method and layers null)
    for over, field in (([f"+{t}.recompute_granularity=full"], "recompute_method"),
                        ([f"+{t}.recompute_granularity=full", f"+{t}.recompute_method=block"], "recompute_num_layers"),
                        ([f"+{t}.recompute_granularity=selective", f"+{t}.recompute_num_layers=3"],
                         "recompute_num_layers")):
        with pytest.raises(RlsimError) as err:
            import_config("verl", cfg, [*megatron, *over])
        assert err.value.field == f"{t}.{field}" and "TransformerConfig" in err.value.message
    selective = import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=selective",
                                            f"+{t}.recompute_modules=[core_attn,mlp]"])
    assert selective.scenario["workload"]["train_layout"]["recompute"] == "selective"
    assert "mlp" in selective.unsupported[f"{t}.recompute_modules"]
    fsdp = import_config("verl", cfg, ["actor_rollout_ref.model.enable_gradient_checkpointing=false"])
    assert fsdp.scenario["workload"]["train_layout"]["recompute"] == "none"   # the FSDP workers read it
    with pytest.raises(RlsimError, match="recompute_granularity"):
        import_config("verl", cfg, [*megatron, f"+{t}.recompute_granularity=partial"])


@pytest.mark.parametrize("framework, config, prefix", [
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", "policy.megatron_cfg"),
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "actor_rollout_ref.actor.megatron")])
def test_expert_tp_on_a_dense_model_and_sequence_parallel_at_tp_1_are_ignored(capsys, tmp_path, framework, config,
                                                                              prefix):
    """NeMo RL's recipes give expert_tensor_parallel_size 1 for every model and sequence_parallel may
    be on at tp 1: neither acts there, and a scenario refuses both (etp on a dense model,
    sequence_parallel true at tp 1), so the import leaves them out, listed as ignored."""
    # (verl: the engine at 0.5, its Megatron reference's weights on the host: ref.megatron.param_offload;
    # the actor's weights and its gradient buffer, 30.5 GB a GPU at TP1, too: actor.megatron.param_offload)
    backend = ["policy.megatron_cfg.enabled=true"] if framework == "nemo-rl" else [
        "actor_rollout_ref.actor.strategy=megatron", f"+{VERL_FULL_RECOMPUTE}", *VERL_UNIFORM_1,
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "actor_rollout_ref.ref.megatron.param_offload=true",
        "actor_rollout_ref.actor.megatron.param_offload=true"]
    keys = [f"{prefix}.expert_tensor_parallel_size", f"{prefix}.sequence_parallel"]
    argv = [FLAG[framework], str(EXAMPLES / config), *backend, f"{prefix}.tensor_model_parallel_size=1",
            f"{keys[0]}=1", f"{keys[1]}=true"]
    code, printed, err = cli(capsys, "run", *argv, "--print-scenario")
    assert code == 0, err
    layout = yaml.safe_load(printed)["workload"]["train_layout"]
    assert "etp" not in layout and "sequence_parallel" not in layout
    code, out, err = cli(capsys, "run", *argv, "--json", "--iterations", "1")
    assert code == 0, err
    ignored = json.loads(out)["framework_import"]["ignored"]
    assert "dense model" in ignored[keys[0]] and "tensor parallel size 1" in ignored[keys[1]]


def test_verl_dynamic_batch_size_is_a_token_budget_whatever_the_micro_batch_size(capsys, tmp_path):
    """use_dynamic_bsz: the micro-batches hold ppo_max_token_len_per_gpu tokens (verl ignores
    ppo_micro_batch_size_per_gpu then); the log-prob passes their own budget when given."""
    a = _imported_workload(capsys, tmp_path, "--from-verl", "verl-one-step-off-qwen2.5-7b.yaml")
    b = _imported_workload(capsys, tmp_path, "--from-verl", "verl-one-step-off-qwen2.5-7b.yaml",
                           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                           "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576")
    assert a.train_layout["max_tokens_per_micro_batch"] == b.train_layout["max_tokens_per_micro_batch"] == 12288
    assert "micro_batch" not in b.train_layout   # not read beside the budget: a scenario refuses it there
    assert b.train_layout["logprob_max_tokens_per_micro_batch"] == 24576
    assert "logprob_max_tokens_per_micro_batch" not in a.train_layout   # verl's default: the training budget
    # without dynamic batch size the log-prob passes take log_prob_micro_batch_size_per_gpu samples
    code, printed, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                             "--print-scenario")
    assert code == 0, err
    assert yaml.safe_load(printed)["schedule"]["forward_micro_batch"] == 16


def test_verl_log_prob_token_budget_is_read_beside_sample_count_training_micro_batches(capsys, tmp_path):
    """rollout.log_prob_use_dynamic_bsz is verl's own switch for the log-prob passes: with
    actor.use_dynamic_bsz false the import listed it (and its budget) as mapped and dropped both."""
    workload = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml",
                                  "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
                                  "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048")
    assert workload.train_layout["logprob_max_tokens_per_micro_batch"] == 2048
    assert workload.train_layout["micro_batch"] == 4   # training keeps its sample-count micro-batches
    default = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml",
                                 "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true")
    assert default.train_layout["logprob_max_tokens_per_micro_batch"] == 16384   # verl: the actor's budget
    r = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                      ["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048"])
    assert "log_prob_use_dynamic_bsz" in r.ignored["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"]


def test_verl_token_budgets_are_per_gpu_under_ulysses(capsys, tmp_path):
    """verl's actor packs max_token_len_per_gpu x ulysses_sequence_parallel_size tokens a micro-batch,
    which the sp ranks split: rlsim's budget is a micro-batch's, so it is scaled by the sp size."""
    plain = _imported_workload(capsys, tmp_path, "--from-verl", "verl-one-step-off-qwen2.5-7b.yaml")
    sp = _imported_workload(capsys, tmp_path, "--from-verl", "verl-one-step-off-qwen2.5-7b.yaml",
                            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert sp.train_layout["max_tokens_per_micro_batch"] == 2 * plain.train_layout["max_tokens_per_micro_batch"]
    assert sp.train_layout["logprob_max_tokens_per_micro_batch"] == sp.train_layout["max_tokens_per_micro_batch"]


def test_verl_megatron_token_budgets_are_per_gpu_under_context_parallelism(capsys):
    """verl's megatron actor and critic multiply max_token_len_per_gpu by context_parallel_size
    (megatron_actor.py, megatron_critic.py): a 1,024-token budget at cp 2 holds the example's
    1,536-token samples (refused before), and the log-prob and critic budgets scale too."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                "+actor_rollout_ref.actor.megatron.context_parallel_size=2",
                "+actor_rollout_ref.actor.use_dynamic_bsz=true", "+actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024",
                "+actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048"]
    workload = import_config("verl", cfg, megatron).scenario["workload"]
    layout = workload["train_layout"]
    assert (layout["max_tokens_per_micro_batch"], layout["logprob_max_tokens_per_micro_batch"]) == (2048, 4096)
    ppo = import_config("verl", cfg, [*megatron, "algorithm.adv_estimator=gae", "+critic.ppo_max_token_len_per_gpu=1024",
                                      "+critic.model.path=Qwen/Qwen2.5-7B-Instruct"]).scenario["workload"]
    assert ppo["critic_batching"]["max_tokens_per_micro_batch"] == 2048
    code, _, err = cli(capsys, "run", "--from-verl", str(cfg), *megatron,
                       "actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "--iterations", "1", "--json")
    assert code == 0, err


def test_verl_padded_samples_get_no_micro_batch_order():
    """use_remove_padding false: padded samples, which schedule.micro_batching does not order (a
    scenario refuses it there); with packing the fixed micro-batches keep generation order."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    padded = import_config("verl", cfg, ["actor_rollout_ref.model.use_remove_padding=false"]).scenario
    assert "micro_batching" not in padded["schedule"] and padded["schedule"]["distqueue"] == {"packed": False}
    # verl's batches are fixed-width: every row data.max_prompt_length + max_response_length (512 + 1024)
    assert padded["workload"]["train_params"]["compute"]["pad_rows_to"] == 1536
    # its FSDP workers' flash_attention_2 unpads the rows for the attention alone
    assert padded["workload"]["train_params"]["compute"]["attention_skips_padding"] is True
    load_scenario(padded)
    packed = import_config("verl", cfg, []).scenario["workload"]["train_params"]["compute"]
    assert "pad_rows_to" not in packed and "attention_skips_padding" not in packed
    assert import_config("verl", cfg, []).scenario["schedule"]["micro_batching"] == "sequence"


def test_verls_fsdp_rows_and_attention_as_its_workers_run_them():
    """Padded rows: the legacy FSDP workers run verl's fixed-width rows (pad_rows_to prompt max + response
    max), 0.9's engine workers re-pad each micro-batch to its longest (to_padded_tensor: no width).
    override_config.attn_implementation: flash_attention_2 (the default) unpads them for the attention,
    rows of 100 and 300 tokens 100^2 + 300^2 at any width; sdpa runs the width, 2 x 1536^2; eager
    materializes the scores; flex, or sdpa over packed rows, is not modelled; megatron ignores it."""
    cfg, key = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", "+actor_rollout_ref.model.override_config.attn_implementation"
    padded = "actor_rollout_ref.model.use_remove_padding=false"

    def imported(*over, config=cfg):
        r = import_config("verl", config, list(over))
        return r, r.scenario["workload"].get("train_params", {}).get("compute", {})

    _, flash = imported(padded)
    assert row_keys(flash) == {"pad_rows_to": 1536, "attention_skips_padding": True}
    assert attention_squares(flash, [100, 300]) == 100 ** 2 + 300 ** 2
    sdpa_import, sdpa = imported(padded, f"{key}=sdpa")
    assert row_keys(sdpa) == {"pad_rows_to": 1536} and attention_squares(sdpa, [100, 300]) == 2 * 1536 ** 2
    assert "actor_rollout_ref.model.override_config.attn_implementation" in sdpa_import.mapped
    assert row_keys(imported(padded, f"{key}=eager")[1]) == {"pad_rows_to": 1536, "flash_attention": False}
    for over in ([padded, f"{key}=flex_attention"], [f"{key}=sdpa"]):
        r, compute = imported(*over)
        assert "actor_rollout_ref.model.override_config.attn_implementation" in r.unsupported
        assert "attention_skips_padding" not in compute and "flash_attention" not in compute
    engine, compute = imported(*QUICKSTART, padded, config=DATA / "verl-0.9.1-generated-ppo-trainer.yaml")
    assert row_keys(compute) == {"attention_skips_padding": True}      # each micro-batch at its longest
    load_scenario(engine.scenario)
    megatron, compute = imported(padded, f"{key}=eager", "actor_rollout_ref.actor.strategy=megatron",
                                 "actor_rollout_ref.ref.strategy=megatron", "critic.strategy=megatron")
    assert row_keys(compute) == {} and "Megatron's attention" in megatron.ignored[key.lstrip("+")]


def test_verl_megatron_workers_pack_their_rows_whatever_the_hf_models_padding_key_says(capsys):
    """verl 0.6's megatron workers always pack (preprocess_packed_seqs), 0.7's as
    actor.megatron.use_remove_padding says (default true); model.use_remove_padding is the FSDP
    workers' key: under megatron it is listed as ignored, and the padded step costs more."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
                "actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "actor_rollout_ref.model.use_remove_padding=false"]
    packed = import_config("verl", cfg, megatron)
    assert packed.scenario["schedule"]["distqueue"] == {"packed": True}
    assert packed.scenario["schedule"]["micro_batching"] == "sequence"     # fixed micro-batches, packed, in order
    assert "do not read it" in packed.ignored["actor_rollout_ref.model.use_remove_padding"]
    off = "+actor_rollout_ref.actor.megatron.use_remove_padding=false"
    padded = import_config("verl", cfg, [*megatron, off, "+actor_rollout_ref.ref.megatron.use_remove_padding=false"])
    assert padded.scenario["schedule"]["distqueue"] == {"packed": False}
    # verl 0.7's bshd rows are re-padded to each micro-batch's longest (preprocess_bshd), not to a
    # fixed width, and Megatron's attention runs that padding
    compute = padded.scenario["workload"]["train_params"].get("compute", {})
    assert "pad_rows_to" not in compute and "attention_skips_padding" not in compute
    assert "actor_rollout_ref.actor.megatron.use_remove_padding" in padded.mapped
    assert "equals" in padded.mapped["actor_rollout_ref.ref.megatron.use_remove_padding"]
    fsdp = import_config("verl", cfg, ["actor_rollout_ref.model.use_remove_padding=false"])
    assert fsdp.scenario["schedule"]["distqueue"] == {"packed": False}   # the FSDP workers read it
    steps = []
    for extra in ([], [off]):
        code, out, err = cli(capsys, "run", "--from-verl", str(cfg), *megatron, *extra, "--iterations", "1", "--json")
        assert code == 0, err
        steps.append(json.loads(out)["stage_time_s"]["train_actor"])
    assert steps[0] < steps[1]


def test_verl_deprecated_global_micro_batches_are_divided_by_the_data_parallel_ranks(tmp_path):
    """verl's workers divide ppo_micro_batch_size / log_prob_micro_batch_size (no _per_gpu) by the
    data-parallel ranks (fsdp: world / ulysses sp; megatron: world / (tp pp cp)): 32 and 128 over 8
    FSDP ranks are the example's 4 and 16 a GPU, the same scenario; both keys of a pair, or a global
    one under the ranks, are refused as verl refuses them."""
    example = (EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").read_text()
    cfg = tmp_path / "verl-grpo-qwen2.5-7b.yaml"   # the example's name: its workload's name
    cfg.write_text(example.replace("ppo_micro_batch_size_per_gpu: 4", "ppo_micro_batch_size: 32")
                   .replace("log_prob_micro_batch_size_per_gpu: 16", "log_prob_micro_batch_size: 128"))
    per_gpu = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    glob = import_config("verl", cfg)
    for scenario in (glob.scenario, per_gpu.scenario):
        scenario["workload"].pop("description")   # names the file's folder
    assert glob.scenario == per_gpu.scenario
    assert "32 // 8 data-parallel ranks = 4" in glob.mapped["actor_rollout_ref.actor.ppo_micro_batch_size"]
    assert "128 // 8" in glob.mapped["actor_rollout_ref.rollout.log_prob_micro_batch_size"]
    assert "equal" in glob.mapped["actor_rollout_ref.ref.log_prob_micro_batch_size"]   # as the old log-prob pass's
    sp = import_config("verl", cfg, ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]).scenario
    assert (sp["workload"]["train_layout"]["micro_batch"], sp["schedule"]["forward_micro_batch"]) == (8, 32)
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"]
    with pytest.raises(RlsimError, match="TypeError") as caught:   # verl's validate_config: None x megatron_dp
        import_config("verl", cfg, megatron)
    assert caught.value.field == "actor_rollout_ref.actor.ppo_micro_batch_size"
    assert "ppo_micro_batch_size_per_gpu" in caught.value.fix
    with pytest.raises(RlsimError, match="both ppo_micro_batch_size and ppo_micro_batch_size_per_gpu"):
        import_config("verl", cfg, ["+actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    with pytest.raises(RlsimError, match="less than the 8 data-parallel ranks"):
        import_config("verl", cfg, ["actor_rollout_ref.rollout.log_prob_micro_batch_size=4"])
    dynamic = import_config("verl", cfg, ["+actor_rollout_ref.actor.use_dynamic_bsz=true"])
    assert "token budget" in dynamic.ignored["actor_rollout_ref.actor.ppo_micro_batch_size"]


def test_verl_global_micro_batches_under_megatron_run_only_where_verl_runs_them(tmp_path):
    """verl 0.6.0 - 0.7.0 under megatron: a global actor.ppo_micro_batch_size fails verl's validate_config
    (megatron_dp x ppo_micro_batch_size_per_gpu, None), and a global rollout.log_prob_micro_batch_size
    beside a per-GPU actor leaves the old log-prob pass's size None (megatron_workers.py): both refused,
    naming the key; the reference's global one is divided by Megatron's data-parallel world (8 / (tp 4)
    = 2 ranks: 32 // 2 = 16 a GPU, the old log-prob pass's here)."""
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"]
    cfg = tmp_path / "verl-grpo-qwen2.5-7b.yaml"
    example = (EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").read_text()
    cfg.write_text(example.replace("log_prob_micro_batch_size_per_gpu: 16", "log_prob_micro_batch_size: 32"))
    with pytest.raises(RlsimError, match="compute_log_prob asserts") as caught:
        import_config("verl", cfg, megatron)
    assert caught.value.field == "actor_rollout_ref.rollout.log_prob_micro_batch_size"
    ref_only = cfg.read_text().replace("log_prob_micro_batch_size: 32\n", "log_prob_micro_batch_size_per_gpu: 16\n", 1)
    cfg.write_text(ref_only)
    imported = import_config("verl", cfg, megatron)
    assert imported.scenario["schedule"]["forward_micro_batch"] == 16
    assert [k for k in (*imported.mapped, *imported.unsupported) if k.endswith("log_prob_micro_batch_size")] == [
        "actor_rollout_ref.ref.log_prob_micro_batch_size"]


def test_verl_fsdp_global_ppo_micro_batch_is_held_to_verls_rule_micro_times_sp_at_least_n_gpus(tmp_path):
    """verl's FSDP ActorConfig.validate refuses ppo_micro_batch_size x ulysses_sequence_parallel_size
    < n_gpus: 3 x sp 2 = 6 < 8 refused (naming the rule, asking for 4), 4 x 2 = 8 runs at 4 // (8 / 2)
    = 1 a GPU."""
    cfg = tmp_path / "verl-grpo-qwen2.5-7b.yaml"
    cfg.write_text((EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").read_text()
                   .replace("ppo_micro_batch_size_per_gpu: 4", "ppo_micro_batch_size: 3"))
    sp = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]
    rule = r"3 x ulysses_sequence_parallel_size 2 is less than n_gpus 8: verl refuses it \(ppo_micro_batch_size x ulysses"
    with pytest.raises(RlsimError, match=rule) as caught:
        import_config("verl", cfg, sp)
    assert caught.value.field == "actor_rollout_ref.actor.ppo_micro_batch_size" and "at least 4" in caught.value.fix
    ok = import_config("verl", cfg, [*sp, "actor_rollout_ref.actor.ppo_micro_batch_size=4"])
    assert ok.scenario["workload"]["train_layout"]["micro_batch"] == 1


def test_verl_critic_global_micro_batch_is_divided_by_the_critics_own_data_parallel_ranks():
    """verl's CriticWorker divides critic.ppo_micro_batch_size / forward_micro_batch_size by the world
    over the critic's own critic.ulysses_sequence_parallel_size (default 1, fsdp_workers.py), not the
    actor's; its FSDP rule (FSDPCriticConfig.validate) counts the critic's too. Actor sp 2 on 8 GPUs,
    critic sp absent: 32 // 8 = 4 and 64 // 8 = 8 a GPU (the actor's 4 ranks gave 8 and 16); 6 x 1 < 8
    refused (6 x the actor's 2 passed); under megatron the critic's own critic.megatron layout (tp 2:
    32 // 4 = 8), not the actor's (tp 4: 16)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    ppo = ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B",
           "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]
    glob = ["+critic.ppo_micro_batch_size=32", "+critic.forward_micro_batch_size=64"]
    imported = import_config("verl", cfg, [*ppo, *glob])
    assert imported.scenario["workload"]["critic_batching"] == {"micro_batch": 4, "forward_micro_batch": 8}
    assert "32 // 8 data-parallel ranks" in imported.mapped["critic.ppo_micro_batch_size"]
    own = import_config("verl", cfg, [*ppo, *glob, "+critic.ulysses_sequence_parallel_size=2"])
    assert own.scenario["workload"]["critic_batching"] == {"micro_batch": 8, "forward_micro_batch": 16}
    with pytest.raises(RlsimError, match="6 x ulysses_sequence_parallel_size 1 is less than n_gpus 8") as caught:
        import_config("verl", cfg, [*ppo, "+critic.ppo_micro_batch_size=6"])
    assert caught.value.field == "critic.ppo_micro_batch_size"
    megatron = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=1", "actor_rollout_ref.actor.strategy=megatron",
                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4", "+critic.strategy=megatron",
                "+critic.megatron.tensor_model_parallel_size=2", "+critic.ppo_micro_batch_size=32"]
    critic = import_config("verl", cfg, [*ppo, *megatron]).scenario["workload"]["critic_batching"]
    assert critic["micro_batch"] == 8


def test_verls_megatron_critic_computes_its_values_at_its_update_micro_batch():
    """verl's megatron CriticWorker.compute_values passes ppo_micro_batch_size_per_gpu as the value pass's
    micro-batch (megatron_workers.py, 0.6.1 and 0.7.0): its forward_micro_batch_size keys are read past."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    ppo = ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B", "actor_rollout_ref.actor.strategy=megatron",
           "actor_rollout_ref.actor.megatron.param_offload=true", "+critic.strategy=megatron",
           "+critic.ppo_micro_batch_size_per_gpu=2", "+critic.forward_micro_batch_size_per_gpu=16"]
    imported = import_config("verl", cfg, ppo)
    assert imported.scenario["workload"]["critic_batching"] == {"micro_batch": 2, "forward_micro_batch": 2}
    assert "compute_values" in imported.ignored["critic.forward_micro_batch_size_per_gpu"]
    fsdp = import_config("verl", cfg, ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B",
                                       "+critic.ppo_micro_batch_size_per_gpu=2",
                                       "+critic.forward_micro_batch_size_per_gpu=16"])
    assert fsdp.scenario["workload"]["critic_batching"] == {"micro_batch": 2, "forward_micro_batch": 16}


def test_verl_remax_is_refused_for_its_greedy_baseline_generation():
    """adv_estimator remax: verl's trainer generates a second, greedy response a prompt for the
    baseline (ray_trainer.py gen_max), a stage rlsim does not model: refused, naming the key."""
    with pytest.raises(RlsimError, match="greedy") as caught:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["algorithm.adv_estimator=remax"])
    assert caught.value.field == "algorithm.adv_estimator"
    rloo = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["algorithm.adv_estimator=rloo"])
    assert rloo.scenario["workload"]["algorithm"] == "grpo"   # the other critic-free estimators: grpo's graph


def test_verl_critic_enable_decides_whether_a_critic_runs_as_verls_need_critic_does(capsys):
    """need_critic (trainer/ppo/utils.py): critic.enable where it is not null, else a critic under gae
    only. true beside grpo trains a critic whose values the estimator does not read (rlsim's ppo
    graph: its two stages appear); false beside gae is refused (GAE reads the critic's values)."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    on = ["+critic.enable=true", "+critic.ppo_micro_batch_size_per_gpu=4"]
    enabled = import_config("verl", cfg, on)
    assert enabled.scenario["workload"]["algorithm"] == "ppo" and "critic.enable" in enabled.mapped
    assert any("does not read them" in note for note in enabled.notes)
    disabled = import_config("verl", cfg, ["+critic.enable=false", "+critic.ppo_micro_batch_size_per_gpu=4"])
    assert disabled.scenario["workload"]["algorithm"] == "grpo"
    assert "critic.enable false" in disabled.ignored["critic.ppo_micro_batch_size_per_gpu"]
    with pytest.raises(RlsimError, match="GAE needs the critic's values") as caught:
        import_config("verl", cfg, ["+critic.enable=false", "algorithm.adv_estimator=gae"])
    assert caught.value.field == "critic.enable"
    code, out, err = cli(capsys, "run", "--from-verl", str(cfg), *on, "--iterations", "1", "--json")
    assert code == 0, err
    assert {"critic_values", "train_critic"} <= set(json.loads(out)["stage_time_s"])


@pytest.mark.parametrize("overrides, field, says", [
    # verl 0.6's synchronous vLLM rollout: chunked prefill on, a step budget under max_model_len
    (["data.max_response_length=8192"], "actor_rollout_ref.rollout.max_num_batched_tokens", "synchronous"),
    # vLLM's SchedulerConfig without chunked prefill, whatever the mode
    (["+actor_rollout_ref.rollout.enable_chunked_prefill=false", "+actor_rollout_ref.rollout.mode=async",
      "+actor_rollout_ref.rollout.max_model_len=9000"], "actor_rollout_ref.rollout.max_num_batched_tokens",
     "without chunked prefill"),
    (["data.train_batch_size=32"], "actor_rollout_ref.actor.ppo_mini_batch_size", "smaller than"),
    (["algorithm.adv_estimator=gae"], "critic.ppo_micro_batch_size_per_gpu", "critic.use_dynamic_bsz is false"),
])
def test_verl_refuses_what_verl_refuses(overrides, field, says):
    with pytest.raises(RlsimError, match=says) as caught:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", overrides)
    assert caught.value.field == field


def test_verl_step_budgets_verl_and_vllm_accept_are_imported():
    """The agent loop (rollout.mode async) with chunked prefill takes a step budget under max_model_len
    (vLLM chunks the prefill); a large enough budget runs in the synchronous rollout too."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    agent = import_config("verl", cfg, ["data.max_response_length=8192", "+actor_rollout_ref.rollout.mode=async"])
    assert agent.scenario["workload"]["inference"]["max_num_batched_tokens"] == 8192
    sync = import_config("verl", cfg, ["data.max_response_length=8192",
                                       "+actor_rollout_ref.rollout.max_num_batched_tokens=8704"])
    assert sync.scenario["workload"]["inference"]["max_num_batched_tokens"] == 8704


def test_verl_refuses_a_reference_without_a_micro_batch_size(tmp_path):
    """main_ppo's validate_config asks the reference for a log-prob micro-batch size when the actor's
    use_dynamic_bsz is false and a KL term needs the reference."""
    cfg = tmp_path / "no-ref-micro.yaml"
    cfg.write_text((EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").read_text().replace(
        "  ref:\n    log_prob_micro_batch_size_per_gpu: 16\n", "  ref:\n"))
    with pytest.raises(RlsimError, match="actor.use_dynamic_bsz is false") as caught:
        import_config("verl", cfg)
    assert caught.value.field == "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
    import_config("verl", cfg, ["actor_rollout_ref.actor.use_kl_loss=false"])   # no reference: not asked


def test_verl_megatron_expert_tp_default_is_said_where_verl_versions_differ():
    """expert_tensor_parallel_size: verl 0.6.0's megatron config gives 1, 0.6.1 / 0.7.0 null (Megatron's
    expert TP = tp, rlsim's when absent): absent on an MoE model at tp > 1, the import says which it took;
    0.6.0's generated config carries its 1, read as given."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    moe = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
           "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B"]
    absent = import_config("verl", cfg, moe)
    assert "etp" not in absent.scenario["workload"]["train_layout"]
    assert any("verl 0.6.0 defaulted to 1" in note for note in absent.notes)
    given = import_config("verl", cfg, [*moe, "+actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1"])
    assert given.scenario["workload"]["train_layout"]["etp"] == 1 and not any("0.6.0 defaulted" in n for n in given.notes)
    dense = import_config("verl", cfg, moe[:2])
    assert not any("0.6.0 defaulted" in note for note in dense.notes)
    v060 = import_config("verl", DATA / "verl-0.6.0-generated-ppo-megatron-trainer.yaml",
                         [*QUICKSTART, "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B",
                          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=4"])
    assert v060.scenario["workload"]["train_layout"]["etp"] == 1
    # verl 0.9.1: engine/megatron.yaml null, which workers/engine/megatron/transformer_impl.py hands to
    # mpu.initialize_model_parallel (and the bridge's provider) as None: Megatron-Core's etp = tp
    v091 = import_config("verl", DATA / "verl-0.9.1-generated-ppo-megatron-trainer.yaml",
                         [*QUICKSTART, "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B",
                          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=4"])
    assert "etp" not in v091.scenario["workload"]["train_layout"]



@pytest.mark.parametrize(("model", "moe"), [("qwen3-30b-a3b", True), ("qwen2.5-7b", False)])
def test_verl_expert_tp_follows_the_model_given_by_set(capsys, model, moe):
    """verl's import decided its expert TP on the config's model only: a model given by --set was taken
    as dense at ep 1, so an MoE one lost the config's expert_tensor_parallel_size 1 (ignored as "a dense
    model": its experts then split over tp 4) and the note on verl 0.6.0's default. The --set value is now
    read, as NeMo RL's and AReaL's imports read it."""
    cfg = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    key = "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size"
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"]
    code, printed, err = cli(capsys, "run", "--from-verl", cfg, *megatron, f"+{key}=1", "--set", f"workload.model={model}",
                             "--print-scenario")
    assert code == 0, err
    workload = yaml.safe_load(printed)["workload"]
    assert workload["model"] == model and workload["train_layout"].get("etp") == (1 if moe else None)
    absent = import_config("verl", cfg, megatron, user_sets={"workload.model": model})
    assert any("verl 0.6.0 defaulted to 1" in note for note in absent.notes) is moe
    given = import_config("verl", cfg, [*megatron, f"+{key}=1"], user_sets={"workload.model": model})
    assert (key in given.ignored) is not moe
    by_config = import_config("verl", cfg, [*megatron, f"actor_rollout_ref.model.path={'Qwen/Qwen3-30B-A3B' if moe else 'Qwen/Qwen2.5-7B'}"])
    assert any("verl 0.6.0 defaulted to 1" in note for note in by_config.notes) is moe   # as the config's own model
    grid = import_config("verl", cfg, megatron, user_sets={"workload.model": None})   # a --grid key: unknown
    assert not any("verl 0.6.0 defaulted to 1" in note for note in grid.notes)

def test_verl_cudagraph_capture_sizes_cap_vllms_graphs():
    """rollout.cudagraph_capture_sizes: vLLM captures those batch sizes and runs eager above the
    largest (cuda_graph_max_batch); with enforce_eager or SGLang it does not apply; not a list: exit 2."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    key = "actor_rollout_ref.rollout.cudagraph_capture_sizes"
    result = import_config("verl", cfg, [f"{key}=[1,2,4,8,16,32]"])
    assert result.scenario["workload"]["inference"]["cuda_graph_max_batch"] == 32
    assert key in result.mapped
    eager = import_config("verl", cfg, [f"{key}=[1,2,4]", "actor_rollout_ref.rollout.enforce_eager=true"])
    assert "cuda_graph_max_batch" not in eager.scenario["workload"]["inference"] and "enforce_eager" in eager.ignored[key]
    sglang = import_config("verl", cfg, [f"{key}=[1,2,4]", "actor_rollout_ref.rollout.name=sglang"])
    assert "SGLang" in sglang.ignored[key]
    with pytest.raises(RlsimError, match="cudagraph_capture_sizes"):
        import_config("verl", cfg, [f"{key}=7"])


def test_verl_rollout_mode_default_is_noted():
    """verl's rollout.mode default moved from sync (0.6) to async (0.7): an import that does not give
    it takes sync and says how to match verl 0.7."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    assert verl.MODE_NOTE in import_config("verl", cfg).notes
    given = import_config("verl", cfg, ["actor_rollout_ref.rollout.mode=async"])
    assert verl.MODE_NOTE not in given.notes and given.scenario["workload"]["inference"]["dispatch"] == "per-sample"


def test_verl_turns_vllms_custom_all_reduce_off():
    """verl starts every vLLM rollout with disable_custom_all_reduce=True: NCCL for the TP all-reduces."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    assert import_config("verl", cfg).scenario["workload"]["inference"]["custom_all_reduce"] is False
    run = simulate(import_config("verl", cfg).scenario, iterations=1)
    assert run.summary["steady_step_time_s"] > 0


def test_nemo_rl_tp_rollout_notes_the_custom_all_reduce_default():
    cfg = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    assert nemo_rl.CUSTOM_ALL_REDUCE_NOTE not in import_config("nemo-rl", cfg).notes   # TP 1: no all-reduce
    tp2 = import_config("nemo-rl", cfg, ["policy.generation.vllm_cfg.tensor_parallel_size=2"])
    assert nemo_rl.CUSTOM_ALL_REDUCE_NOTE in tp2.notes
    assert "custom_all_reduce" not in tp2.scenario["workload"]["inference"]   # the engine's own (on)


def test_nemo_rl_colocated_megatron_frees_its_gradients_dtensor_copies_them():
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    megatron = import_config("nemo-rl", nemo)
    assert megatron.scenario["schedule"]["switch"]["free_gradients"] is True
    dtensor = import_config("nemo-rl", nemo, ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"])
    assert "free_gradients" not in dtensor.scenario["schedule"]["switch"]


def test_verl_megatron_grad_offload_is_ignored_as_verl_ignores_it():
    """verl 0.5-0.7 read actor.megatron.grad_offload and never use it; its Megatron offload frees the
    gradients with the parameters. The offloaded state goes through pageable memory (.to("cpu"))."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    r = import_config("verl", cfg, ["actor_rollout_ref.actor.strategy=megatron",
                                    "actor_rollout_ref.actor.megatron.grad_offload=true",
                                    "actor_rollout_ref.actor.megatron.param_offload=true"])
    assert r.scenario["workload"]["train_params"]["offload"] == {"params": True, "pageable": True}
    assert "never use it" in r.ignored["actor_rollout_ref.actor.megatron.grad_offload"]
    alone = import_config("verl", cfg, ["actor_rollout_ref.actor.strategy=megatron",
                                        "actor_rollout_ref.actor.megatron.grad_offload=true"])
    assert "offload" not in alone.scenario["workload"]["train_params"]


def test_verl_ulysses_maps_onto_cp_with_ulysses_all_to_alls(capsys, tmp_path):
    # it was refused as "not modelled" while the trainer models Ulysses (train_layout.ulysses_sp, cp)
    workload = _imported_workload(capsys, tmp_path, "--from-verl", "verl-grpo-qwen2.5-7b.yaml",
                                  "actor_rollout_ref.actor.strategy=fsdp",
                                  "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert workload.train_layout["cp"] == 2 and workload.train_layout["ulysses_sp"] is True
    assert workload.train_layout["zero"] == 3
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                       "actor_rollout_ref.actor.strategy=megatron",
                       "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "--print-scenario")
    assert code == 2 and "actor_rollout_ref.actor.ulysses_sequence_parallel_size" in err


@pytest.mark.parametrize(("items", "status"), [
    (("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",), "unsupported"),     # 16 for the old log-probs
    (("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192",
      "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8192"), "mapped"),          # both default to the actor's
    (("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096"),
     "unsupported"),
    (("actor_rollout_ref.actor.use_kl_loss=false",), "ignored"),                        # no reference forward
])
def test_verl_reference_micro_batching_is_the_old_log_prob_passes_where_equal(capsys, items, status):
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), *items, "--iterations", "1", "--json")
    assert code == 0, err
    report = json.loads(out)["framework_import"]
    ref_keys = [k for k in report[status] if k.startswith("actor_rollout_ref.ref.log_prob")]
    assert ref_keys, report


def test_verl_fsdp2_reshard_after_forward_and_the_reduce_dtype_are_mapped(capsys, tmp_path):
    fsdp2 = ("actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false",
             "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16")
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, *fsdp2)
    assert workload.train_params.memory.zero3_reshard_after_forward is False
    assert workload.train_params.comm.grad_reduce_bytes_per_param == 2
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), "actor_rollout_ref.actor.strategy=fsdp",
                         "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false", "--iterations", "1", "--json")
    assert code == 0, err                                # FSDP1 does not read it: ignored, and the default runs
    doc = json.loads(out)
    assert "FSDP1" in doc["framework_import"]["ignored"]["actor_rollout_ref.actor.fsdp_config.reshard_after_forward"]
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL),
                       "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=int8", "--print-scenario")
    assert code == 2 and "reduce_dtype" in err and "Traceback" not in err


def test_verl_lora_maps_onto_workload_lora(capsys, tmp_path):
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, "actor_rollout_ref.model.lora_rank=32",
                                  "+actor_rollout_ref.model.target_modules=[q_proj,v_proj]")
    assert workload.lora.rank == 32 and workload.lora.targets == ["q_proj", "v_proj"]
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, "actor_rollout_ref.model.lora_rank=8")
    assert workload.lora.targets == "all-linear"                         # verl's default target_modules
    # with LoRA verl builds no reference worker (ref_in_actor): no host-resident reference shards
    assert workload.reference and not workload.reference_cpu_offload
    full = _imported_workload(capsys, tmp_path, "--from-verl", _VERL)
    assert full.lora is None and full.reference_cpu_offload
    # (the engine at 0.5, the Megatron reference's weights on the host: ref.megatron.param_offload; the
    # actor's weights and gradient buffer too: actor.megatron.param_offload)
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), "actor_rollout_ref.actor.strategy=megatron",
                         f"+{VERL_FULL_RECOMPUTE}", *VERL_UNIFORM_1, "actor_rollout_ref.model.lora_rank=8",
                         "actor_rollout_ref.ref.megatron.param_offload=true",
                         "actor_rollout_ref.actor.megatron.param_offload=true",
                         "actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "--iterations", "1", "--json")
    assert code == 0, err                                  # verl's megatron workers do not read it
    assert "megatron" in json.loads(out)["framework_import"]["ignored"]["actor_rollout_ref.model.lora_rank"]


def test_verl_megatron_reference_param_offload_keeps_its_shard_on_the_host(capsys, tmp_path):
    """verl's Megatron reference keeps its weight shard on the GPUs (ref.megatron.param_offload false,
    verl's default) or, with param_offload, on the host: loaded before each forward and offloaded after,
    2 copies of the shard a pass (schedule.reference_swap_copies), none of it beside the engine or the
    update. Under fsdp the key is not read (the FSDP reference is on the host either way)."""
    from simulator.llm.architecture import load_model
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"]
    runs, schedules = {}, {}
    for offload in ("false", "true"):
        given = [*megatron, f"actor_rollout_ref.ref.megatron.param_offload={offload}"]
        code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), *given, "--iterations", "1", "--json")
        assert code == 0, err
        runs[offload] = json.loads(out)
        code, printed, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), *given, "--print-scenario")
        (tmp_path / "printed.yaml").write_text(printed)
        schedules[offload] = load_scenario(tmp_path / "printed.yaml").schedule
    assert (schedules["false"].reference_swap_copies, schedules["true"].reference_swap_copies) == (0, 2)
    shard = load_model("qwen2.5-7b").params_total * 2.0 / 4      # bf16 over TP 4
    for phase in ("rollout", "train"):
        held = runs["false"]["peak_memory_by_phase"][phase] - runs["true"]["peak_memory_by_phase"][phase]
        assert held == pytest.approx(shard, rel=1e-3), phase
    assert runs["true"]["stage_time_s"]["reference"] > runs["false"]["stage_time_s"]["reference"]   # the copies
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL),
                         "actor_rollout_ref.ref.megatron.param_offload=true", "--iterations", "1", "--json")
    assert code == 0, err
    assert "strategy is fsdp" in json.loads(out)["framework_import"]["ignored"]["actor_rollout_ref.ref.megatron.param_offload"]


_TOOLS = ("--set", "workload.multi_turn.tool_latency_s=2", "--set", "workload.multi_turn.observation_tokens=150")
_VERL_TURNS = "actor_rollout_ref.rollout.multi_turn"


def test_verl_multi_turn_maps_its_turn_cap_and_asks_for_the_tools(capsys, tmp_path):
    # verl's tool agent loop: max_assistant_turns is the cap; the tools' seconds and answers come with --set
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, f"{_VERL_TURNS}.enable=true",
                                  f"{_VERL_TURNS}.max_assistant_turns=5", *_TOOLS)
    assert (workload.multi_turn.max_turns, workload.multi_turn.tool_latency_s) == (5, 2.0)
    assert _imported_workload(capsys, tmp_path, "--from-verl", _VERL, f"{_VERL_TURNS}.max_assistant_turns=5"
                              ).multi_turn is None                # enable false: one turn a sample
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), f"{_VERL_TURNS}.enable=true",
                       f"{_VERL_TURNS}.max_assistant_turns=5", "--iterations", "1")
    assert code == 2 and "tool_latency_s" in err and "--set workload.multi_turn" in err
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), f"{_VERL_TURNS}.enable=true", *_TOOLS)
    assert code == 2 and f"{_VERL_TURNS}.max_assistant_turns" in err       # no cap: verl's null
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), f"{_VERL_TURNS}.enable=true",
                         f"{_VERL_TURNS}.max_assistant_turns=3", f"{_VERL_TURNS}.max_user_turns=2",
                         f"{_VERL_TURNS}.max_parallel_calls=4", *_TOOLS, "--iterations", "1", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert "interaction" in report["framework_import"]["unsupported"][f"{_VERL_TURNS}.max_user_turns"]
    assert "together" in report["framework_import"]["ignored"][f"{_VERL_TURNS}.max_parallel_calls"]
    assert report["framework_import"]["mapped"][f"{_VERL_TURNS}.max_assistant_turns"]


def test_fsdp_cpu_offload_maps_from_verl_offload_policy_and_nemo_rl_dtensor_cpu_offload(capsys, tmp_path):
    policy = "actor_rollout_ref.actor.fsdp_config.offload_policy=true"
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, "actor_rollout_ref.actor.strategy=fsdp2",
                                  policy, "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true")
    offload = workload.train_params.offload
    assert offload.fsdp_cpu_offload and not offload.optimizer   # verl turns the per-phase offload off
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), policy, "--iterations", "1", "--json")
    assert code == 0, err                                   # the fsdp strategy (FSDP1) does not read it
    assert "FSDP1" in json.loads(out)["framework_import"]["ignored"]["actor_rollout_ref.actor.fsdp_config.offload_policy"]
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", _NEMO, "policy.megatron_cfg.enabled=false",
                                  "policy.dtensor_cfg.enabled=true", "policy.dtensor_cfg.cpu_offload=true")
    assert workload.train_params.offload.fsdp_cpu_offload


def test_verl_fsdp_size_below_the_world_is_hsdp(capsys, tmp_path):
    """verl's create_device_mesh: fsdp_size between 1 and the world runs HSDP (a (ddp, fsdp) mesh):
    train_layout.zero_shard_size; -1 or the world or more shards over all ranks."""
    two_nodes = ("trainer.nnodes=2", "actor_rollout_ref.actor.fsdp_config.fsdp_size=8")
    workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, *two_nodes)
    assert workload.train_layout["zero_shard_size"] == 8 and workload.train_layout["zero"] == 3
    for whole in ("-1", "16", "32"):
        workload = _imported_workload(capsys, tmp_path, "--from-verl", _VERL, "trainer.nnodes=2",
                                      f"actor_rollout_ref.actor.fsdp_config.fsdp_size={whole}")
        assert "zero_shard_size" not in workload.train_layout
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), "trainer.nnodes=2",
                       "actor_rollout_ref.actor.fsdp_config.fsdp_size=6", "--print-scenario")
    assert code == 2 and "actor_rollout_ref.actor.fsdp_config.fsdp_size" in err and "Traceback" not in err
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / _VERL), *two_nodes, "--json")
    assert code == 0, err
    assert json.loads(out)["layouts"]["train"]["zero_shard_size"] == 8


def test_nemo_rl_kv_recompute_after_in_flight_updates_is_mapped(capsys, tmp_path):
    key = "grpo.async_grpo.recompute_kv_cache_after_weight_updates"
    config = "nemo-rl-grpo-llama3.1-8b-async-1off.yaml"     # in-flight updates on
    code, printed, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / config), f"{key}=true", "--print-scenario")
    assert code == 0, err
    path = tmp_path / "printed.yaml"
    path.write_text(printed)
    assert load_scenario(path).schedule.recompute_kv_after_update is True
    code, out, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / config), f"{key}=true",
                         "grpo.async_grpo.in_flight_weight_updates=false", "--iterations", "1", "--json")
    assert code == 0, err
    report = json.loads(out)["framework_import"]
    assert "in_flight_weight_updates" in report["ignored"][key]
    code, out, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"), f"{key}=true",
                         "--iterations", "1", "--json")                 # on-policy: the async keys read nothing
    assert code == 0, err
    assert "on-policy" in json.loads(out)["framework_import"]["ignored"][key]


def test_nemo_rl_fp8_kv_cache_maps_onto_the_kv_dtype(capsys, tmp_path):
    # it was refused ("not mapped") though the engine prices an fp8 KV cache (rollout_layout.kv_dtype)
    workload = _imported_workload(capsys, tmp_path, "--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml",
                                  "policy.generation.vllm_cfg.kv_cache_dtype=fp8_e4m3")
    assert workload.rollout_layout["kv_dtype"] == "fp8" and workload.rollout_layout["weight_dtype"] == "bf16"
    auto = _imported_workload(capsys, tmp_path, "--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml")
    assert auto.rollout_layout["kv_dtype"] == "bf16"
    code, _, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"),
                       "policy.generation.vllm_cfg.kv_cache_dtype=int4", "--print-scenario")
    assert code == 2 and "kv_cache_dtype" in err


_NEMO, _VERL = "nemo-rl-grpo-llama3.1-8b.yaml", "verl-grpo-qwen2.5-7b.yaml"


@pytest.mark.parametrize("flag, config, item, field", [
    # values of the wrong type went into int() / float() / min(): tracebacks (found by fuzzing)
    ("--from-verl", _VERL, "actor_rollout_ref.rollout.gpu_memory_utilization=null",
     "actor_rollout_ref.rollout.gpu_memory_utilization"),
    ("--from-verl", _VERL, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=abc",
     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    ("--from-verl", _VERL, "++async_training.trigger_parameter_sync_step=[1,2]",
     "async_training.trigger_parameter_sync_step"),
    ("--from-verl", _VERL, "trainer.n_gpus_per_node=.nan", "trainer.n_gpus_per_node"),
    ("--from-verl", _VERL, "actor_rollout_ref.actor.use_kl_loss=perhaps", "actor_rollout_ref.actor.use_kl_loss"),
    ("--from-nemo-rl", _NEMO, "policy.megatron_cfg.context_parallel_size=1e400",
     "policy.megatron_cfg.context_parallel_size"),
    ("--from-nemo-rl", _NEMO, "data.max_input_seq_length=abc", "data.max_input_seq_length"),
    ("--from-nemo-rl", _NEMO, "policy.generation.vllm_cfg.tensor_parallel_size=null",
     "policy.generation.vllm_cfg.tensor_parallel_size"),
    ("--from-nemo-rl", _NEMO, "policy.generation.vllm_cfg.gpu_memory_utilization=1.5",
     "policy.generation.vllm_cfg.gpu_memory_utilization"),
    ("--from-nemo-rl", _NEMO, "policy.sequence_packing.enabled=maybe", "policy.sequence_packing.enabled"),
    ("--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b-async-1off.yaml", "grpo.async_grpo.max_trajectory_age_steps=null",
     "grpo.async_grpo.max_trajectory_age_steps"),
])
def test_a_config_value_of_the_wrong_type_is_an_error_naming_its_key(capsys, flag, config, item, field):
    assert main(["run", flag, str(EXAMPLES / config), item, "--set", "iterations=2"]) == 2
    err = capsys.readouterr().err
    assert f"field '{field}'" in err and "Traceback" not in err


def test_the_backend_that_does_not_train_is_listed_ignored_not_mapped():
    # its keys were listed as mapped (e.g. to workload.train_layout.tp) though they changed nothing
    r = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                      ["+actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"])
    key = "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"
    assert key in r.ignored and "strategy is fsdp" in r.ignored[key] and key not in r.mapped
    assert r.scenario["workload"]["train_layout"]["tp"] == 1
    nemo = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                         ["+policy.dtensor_cfg.tensor_parallel_size=4"])
    assert "policy.dtensor_cfg.tensor_parallel_size" in nemo.ignored
    assert "policy.dtensor_cfg.enabled" not in nemo.ignored   # the switch itself is read
    dtensor = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                            ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"])
    assert "policy.megatron_cfg.tensor_model_parallel_size" in dtensor.ignored


@pytest.mark.parametrize("framework, config, overrides, field", [
    # NeMo RL's Policy refuses both backends; rlsim ran Megatron without a word
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", ["policy.dtensor_cfg.enabled=true"], "policy.dtensor_cfg.enabled"),
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", ["policy.dtensor_cfg.enabled='true'"], "policy.dtensor_cfg.enabled"),
    # a string 'false' read as colocated (only the boolean false split the pools), listed as mapped
    ("verl", "verl-grpo-qwen2.5-7b.yaml", ["+actor_rollout_ref.hybrid_engine='false'"], "actor_rollout_ref.hybrid_engine"),
    ("verl", "verl-grpo-qwen2.5-7b.yaml", ["+actor_rollout_ref.hybrid_engine=0"], "actor_rollout_ref.hybrid_engine"),
    # any mode but async was read as sync
    ("verl", "verl-grpo-qwen2.5-7b.yaml", ["+actor_rollout_ref.rollout.mode=ASYNC"], "actor_rollout_ref.rollout.mode"),
])
def test_switches_with_values_the_framework_refuses_are_errors(framework, config, overrides, field):
    with pytest.raises(RlsimError) as info:
        import_config(framework, EXAMPLES / config, overrides)
    assert info.value.field == field


@pytest.mark.parametrize("framework, config, override, field", [
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
     "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    # a check across two fields: the side the override just changed first
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "data.train_batch_size=96",
     "data.train_batch_size, actor_rollout_ref.actor.ppo_mini_batch_size"),
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", "policy.generation.vllm_cfg.tensor_parallel_size=3",
     "policy.generation.vllm_cfg.tensor_parallel_size"),
])
def test_an_imported_scenarios_error_names_the_config_and_its_key(capsys, framework, config, override, field):
    # they named '<scenario mapping>' and rlsim's field, which the user never wrote
    code, _, err = cli(capsys, "run", FLAG[framework], str(EXAMPLES / config), override, "--iterations", "1")
    assert code == 2
    assert f"{config}: field '{field}'" in err and "rlsim's workload" in err and "after the config path" in err


def test_an_error_of_the_users_own_set_keeps_the_scenario_key(capsys):
    code, _, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                       "--set", "workload.rollout_layout.tp=3", "--iterations", "1")
    assert code == 2 and "field 'workload.rollout_layout.tp'" in err


def test_a_typo_of_a_known_key_is_unknown_with_the_key_it_is_close_to():
    # it was listed 'unsupported: option not modelled' by its section's catch-all, the typo unseen
    r = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                      ["+policy.megatron_cfg.tensor_model_paralel_size=2"])
    assert "did you mean 'policy.megatron_cfg.tensor_model_parallel_size'" in \
        r.unknown["policy.megatron_cfg.tensor_model_paralel_size"]
    v = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                      ["actor_rollout_ref.actor.strategy=megatron",
                       "+actor_rollout_ref.actor.megatron.tensor_model_paralel_size=2"])
    assert "actor_rollout_ref.actor.megatron.tensor_model_paralel_size" in v.unknown


def test_a_count_past_two_to_the_53_is_refused_by_the_importer():
    # 1e30 passed as 1000000000000000019884624838656 and failed later on a work limit
    with pytest.raises(RlsimError) as info:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["data.train_batch_size=1e30"])
    assert info.value.field == "data.train_batch_size" and "2^53" in info.value.message


def test_a_bad_framework_override_is_named_as_one_not_as_a_set_item():
    # "field '--set': cannot read --set '=5'" for a verl override
    with pytest.raises(RlsimError) as info:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["=5"])
    assert "cannot read the override '=5'" in str(info.value) and "--set" not in str(info.value)


@pytest.mark.parametrize("framework, config, key", [
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "data.train_batch_size"),
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", "grpo.num_prompts_per_step"),
])
def test_a_framework_key_given_to_set_says_to_pass_it_after_the_config(capsys, framework, config, key):
    # "unknown scenario key 'data'" with a list of scenario keys as the fix
    code, _, err = cli(capsys, "run", FLAG[framework], str(EXAMPLES / config), "--set", f"{key}=8")
    assert code == 2 and f"field '{key}'" in err and "after the config path" in err


def test_a_nemo_rl_override_of_a_key_the_config_lacks_is_refused_as_hydra_does(capsys):
    """NeMo RL applies overrides with Hydra's parser: grpo.num_prompts_per_stp=32 ran on (exit 0,
    listed as unknown) with the batch unchanged (found by a new-user trial)."""
    cfg = str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml")
    code, _, err = cli(capsys, "run", "--from-nemo-rl", cfg, "grpo.num_prompts_per_stp=32", "--iterations", "1")
    assert code == 2 and "field 'grpo.num_prompts_per_stp'" in err and "did you mean grpo.num_prompts_per_step" in err
    assert import_config("nemo-rl", cfg, ["+grpo.num_prompts_per_stp=32"]).unknown
    import_config("nemo-rl", cfg, ["grpo.num_prompts_per_step=32"])   # a key of NeMo RL's table


@pytest.mark.parametrize(("framework", "config", "override", "parser"), [
    ("skyrl", "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh", "trainer.epoch=3", "SkyRL's config"),
    ("trl", "trl-grpo-qwen2.5-1.5b-colocate.yaml", "num_generation=8", "TRL's argument parser"),
    ("openrlhf", "openrlhf-ppo-llama3.1-8b-async.sh", "bogus.flag=1", "OpenRLHF's argument parser")])
def test_a_framework_without_hydra_is_not_told_to_add_the_key_with_plus(framework, config, override, parser):
    """SkyRL's refusal was fixed with 'write +trainer.epoch=3', which SkyRL refuses; TRL's and
    OpenRLHF's argument parsers have no '+' either (a new-user trial)."""
    with pytest.raises(RlsimError) as caught:
        import_config(framework, EXAMPLES / config, [override])
    assert f"{parser}" in caught.value.fix and "+" not in caught.value.fix


@pytest.mark.parametrize(("framework", "config", "belongs"), [
    ("trl", "areal-grpo-qwen2.5-1.5b.yaml", "areal"), ("verl", "nemo-rl-grpo-llama3.1-8b.yaml", "nemo-rl"),
    ("nemo-rl", "verl-grpo-qwen2.5-7b.yaml", "verl"), ("areal", "trl-grpo-qwen2.5-7b-server.yaml", "trl")])
def test_a_config_given_to_another_frameworks_importer_is_named_for_what_it_is(framework, config, belongs):
    """An AReaL config read as TRL's said 'use_vllm is false'; a NeMo RL recipe read as verl's, after
    the hint's +model.path, ran verl's defaults (a new-user trial)."""
    with pytest.raises(RlsimError) as caught:
        import_config(framework, EXAMPLES / config)
    assert caught.value.field == f"--from-{framework}" and caught.value.fix.startswith(f"give it as --from-{belongs}")
    import_config(belongs, EXAMPLES / config)


def test_verl_reference_batching_under_dynamic_bsz_is_said_where_it_differs():
    """With a dynamic log-prob budget of 48,000 for the old log-prob pass, verl's reference reads its
    own (default: the actor's 24,000): rlsim prices both at 48,000, which was listed against
    ref.log_prob_micro_batch_size_per_gpu, a key verl does not read then (a framework audit)."""
    keys = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=48000"]
    imported = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", keys)
    assert "not read" in imported.ignored["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"]
    assert any("reference forward reads its own micro-batching in verl (24,000 tokens" in n for n in imported.notes)
    same = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                         [*keys, "+actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=48000"])
    assert "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu" in same.mapped
    assert not any("reads its own micro-batching" in n for n in same.notes)


def test_verl_gen_batch_size_without_dynamic_sampling_is_not_reported_as_mapped():
    """+data.gen_batch_size=768 was listed as mapped (to dynamic sampling's generation batch) and set
    nothing: without algorithm.filter_groups.enable no dynamic sampling runs (a framework audit)."""
    imported = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["+data.gen_batch_size=768"])
    assert "data.gen_batch_size" in imported.unsupported and "data.gen_batch_size" not in imported.mapped
    assert "dynamic_sampling" not in imported.scenario["workload"]


def test_a_verl_override_of_a_key_the_config_lacks_is_refused_as_hydra_does(capsys):
    """verl composes its config with Hydra (struct mode): data.train_batch_siz=512 is refused there
    ("To append to your config use +..."); rlsim listed it as unknown and ran on (exit 0)."""
    cfg = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    code, _, err = cli(capsys, "run", "--from-verl", cfg, "data.train_batch_siz=512", "--iterations", "1")
    assert code == 2 and "field 'data.train_batch_siz'" in err and "did you mean data.train_batch_size" in err
    assert "+data.train_batch_siz=512" in err and "Traceback" not in err
    # added with +, as Hydra takes it: listed as unknown; a verl key the file leaves out is verl's own
    assert import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["+data.train_batch_siz=512"]).unknown
    for item in ("actor_rollout_ref.rollout.enforce_eager=true", "trainer.logger=[console]",
                 "actor_rollout_ref.actor.optim.lr=1e-6"):
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [item])


def test_the_topology_note_says_a_set_size_replaces_the_configs(capsys):
    """--set topology.nodes=2 runs 16 GPUs: the note no longer reports the config's 8 as the run's."""
    code, out, err = cli(capsys, "run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                         "--set", "topology.nodes=2", "--iterations", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["devices"] == 16
    assert "sized by the topology.* items of --set / --grid (the config's 8 GPUs" in err and "x 1 nodes = 8 GPUs" not in err
    # the framework's own checks of its world (verl's micro-batch over the data-parallel ranks) read
    # the config's size: the note says so and how to have them read the run's (a new-user trial)
    assert "checks of its world read the config's 8 GPUs, not the run's" in err


@pytest.mark.parametrize("extra", [["data.train_batch_size=128"], ["data.train_batch_size=128", "actor_rollout_ref.rollout.n=4"]])
def test_overrides_after_another_option_say_where_they_go(capsys, extra):
    """One override after --topology read as a scenario file ('cannot be combined', fix: --set, which
    refuses a verl key); two gave argparse's bare 'unrecognized arguments' (found by a new-user trial)."""
    cfg = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    code, _, err = cli(capsys, "run", "--from-verl", cfg, "--topology", "dgx-h200", *extra)
    assert code == 2 and "right after its path" in err and "Traceback" not in err
    # the fix's own flags were read back as unrecognized words: "did you mean: --from-verl -> --from-verl,
    # ..., --topology -> --topology?" (an audit, 2026-12-07); only the words given are hinted
    assert "did you mean" not in err


def test_a_config_is_sized_in_the_racks_of_a_rack_topology():
    """72 GPUs on gb200-nvl72 (sized in racks) were refused as 'not sized in nodes' (fix: topology.PARAM):
    found by a new-user trial. 40 GPUs are not whole racks: the error names topology.racks."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    imported = import_config("verl", cfg, ["trainer.n_gpus_per_node=4", "trainer.nnodes=18", "data.train_batch_size=576",
                                           "actor_rollout_ref.actor.ppo_mini_batch_size=72"], topology="gb200-nvl72")
    assert imported.scenario["topology"] == {"preset": "gb200-nvl72", "racks": 1}
    with pytest.raises(RlsimError) as caught:
        import_config("verl", cfg, ["trainer.n_gpus_per_node=4", "trainer.nnodes=10", "data.train_batch_size=640",
                                    "actor_rollout_ref.actor.ppo_mini_batch_size=80"], topology="gb200-nvl72")
    assert caught.value.field == "topology.racks"
    assert caught.value.fix.startswith("size the config's world to 72 GPUs (trainer.nnodes x n_gpus_per_node)")


def test_a_micro_batch_verl_would_refuse_is_refused():
    """ppo_micro_batch_size_per_gpu 3 against 64 samples a data-parallel rank ran (found by a new-user
    trial); verl's workers assert that it divides the rank's share of the mini-batch."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    with pytest.raises(RlsimError, match="does not divide the 64 samples") as caught:
        import_config("verl", cfg, ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"])
    assert caught.value.field == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    import_config("verl", cfg, ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"])


def test_a_memory_error_of_an_imported_layout_names_the_keys_of_the_values_it_quotes_first(capsys):
    """An FSDP layout's out-of-memory error named actor.strategy (which sets the layout) and fixes
    verl's FSDP has no key for, where micro_batch=4 was ppo_micro_batch_size_per_gpu's (a trial)."""
    # (at the example's 0.6 the old log-prob pass fits beside the resident engine, 27.1 of 27.5 GB)
    code = main(["run", "--from-verl", str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                 "actor_rollout_ref.rollout.free_cache_engine=false",
                 "actor_rollout_ref.rollout.gpu_memory_utilization=0.65", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "does not fit in device memory" in err
    named = err.split("field '")[1].split("'")[0].split(", ")
    # the overrides that kept the engine resident beside the step come first (it named only the
    # layout's keys), then the key of the micro-batch the message quotes
    # (the old log-prob pass is refused first, beside the engine: its micro-batch key)
    assert named[:3] == ["actor_rollout_ref.rollout.free_cache_engine",
                         "actor_rollout_ref.rollout.gpu_memory_utilization",
                         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"]
    assert "change actor_rollout_ref.rollout.free_cache_engine" in err


def test_a_global_batch_that_does_not_divide_the_step_is_said_in_sequences():
    """65 prompts a step against train_global_batch_size 512: the workload's error offered divisors
    of 65 prompts (13, 5, 1) as the fix for a key that counts sequences, and 13 then failed again
    (a user trial). The recipe's key gets its own units: multiples of num_generations_per_prompt."""
    with pytest.raises(RlsimError) as err:
        import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml", ["grpo.num_prompts_per_step=65"])
    assert err.value.field == "policy.train_global_batch_size"
    assert "65 x 32 = 2080 sequences" in err.value.message and "416, 160, 32" in err.value.fix
    fixed = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                          ["grpo.num_prompts_per_step=65", "policy.train_global_batch_size=416"])
    assert fixed.scenario["workload"]["mini_batch_prompts"] == 13


@pytest.mark.parametrize("framework, config, override, named", [
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", "policy.megatron_cfg.tensor_model_parallel_size=16",
     "policy.megatron_cfg.tensor_model_parallel_size"),
    ("nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", "policy.megatron_cfg.pipeline_model_parallel_size=3",
     "policy.megatron_cfg.pipeline_model_parallel_size"),
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=16",
     "actor_rollout_ref.actor.ulysses_sequence_parallel_size"),
    ("verl", "verl-grpo-qwen2.5-7b.yaml", "+actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=3",
     "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size")])
def test_a_layout_error_names_the_parallel_size_the_command_line_changed(framework, config, override, named):
    """A replica too large for the devices said "fix: change policy.dtensor_cfg.enabled" (the flag
    that maps the whole layout) for a TP the user had just raised, and PP 3 on NeMo RL's 16 GPUs ran
    with one idle where Megatron refuses the world size at start-up (a user trial)."""
    strategy = ["actor_rollout_ref.actor.strategy=megatron"] if "megatron." in override else []
    with pytest.raises(RlsimError) as err:
        imported = import_config(framework, EXAMPLES / config, [*strategy, override])
        with imported.naming_config():
            simulate(imported.scenario, iterations=1)
    assert err.value.field.startswith(named) and err.value.fix.startswith(f"change {named} ")


def test_verls_rollout_expert_parallelism_is_one_engine_of_tp_x_dp_gpus():
    """verl's rollout expert_parallel_size is vLLM's EP over tp x data_parallel_size GPUs (verl
    requires that product): tp 4, ep 4 is one 4-GPU engine, which rlsim's ep (attention replicas,
    tp x ep GPUs an instance) had made 16 GPUs (a regression trial)."""
    rollout = "actor_rollout_ref.rollout"
    plain = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                          [f"{rollout}.tensor_model_parallel_size=4", f"{rollout}.expert_parallel_size=4"])
    assert (plain.scenario["workload"]["rollout_layout"]["tp"], plain.scenario["workload"]["rollout_layout"]["ep"]) == (4, 1)
    wide = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [
        f"{rollout}.tensor_model_parallel_size=2", f"{rollout}.expert_parallel_size=4", f"{rollout}.data_parallel_size=2"])
    assert wide.scenario["workload"]["rollout_layout"]["ep"] == 2
    for bad, field in ((["expert_parallel_size=3"], "expert_parallel_size"), (["data_parallel_size=2"], "data_parallel_size")):
        with pytest.raises(RlsimError) as err:
            import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [f"{rollout}.{item}" for item in bad])
        assert err.value.field == f"{rollout}.{field}"


def test_verls_rollout_expert_parallelism_over_the_tp_gpus_alone_is_said_as_what_it_prices():
    """EP = tp at data_parallel_size 1: vLLM 0.11 gives each of the engine's tp GPUs E/tp whole experts in
    place of 1/tp of each, with no dispatch (fused_moe/config.py FusedMoEParallelConfig.make; layer.py
    forward_impl: the same tensor-parallel all-reduce after the MoE): the same bytes, expected FLOPs and
    collective a GPU as rollout_layout.ep 1, which the import takes and says so; on a dense model EP does
    nothing (ignored)."""
    rollout, key = "actor_rollout_ref.rollout", "actor_rollout_ref.rollout.expert_parallel_size"
    moe = ["actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B", f"{rollout}.tensor_model_parallel_size=4"]
    plain = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", moe)
    expert = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [*moe, f"{key}=4"])
    assert expert.scenario["workload"]["rollout_layout"] == plain.scenario["workload"]["rollout_layout"]
    assert "whole experts" in expert.mapped[key] and "data_parallel_size 1" in expert.mapped[key]
    assert any(note.startswith(f"{key} 4 = tensor_model_parallel_size 4") for note in expert.notes)
    dense = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                          [f"{rollout}.tensor_model_parallel_size=4", f"{key}=4"])
    assert "dense" in dense.ignored[key]


def test_a_changed_key_the_error_is_not_about_is_not_named_first():
    """Weights that do not fit the engine's share named the overridden max_num_seqs first (it maps
    under the same layout; a regression trial): a changed key leads only when the message names it."""
    rollout = "actor_rollout_ref.rollout"
    with pytest.raises(RlsimError) as err:
        imported = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [
            "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B", f"{rollout}.max_num_seqs=512",
            f"{rollout}.gpu_memory_utilization=0.3"])
        with imported.naming_config():
            simulate(imported.scenario, iterations=1)
    assert not err.value.field.startswith(f"{rollout}.max_num_seqs")


def test_trainers_of_transformers_model_code_get_its_stack():
    """verl's FSDP workers and NeMo RL's DTensor policy run transformers' model code: verl's FSDP
    workers its stack without TP, verl-fsdp (verl-fsdp-liger with model.use_liger: the constants of
    hf-transformers(-liger)), NeMo RL's DTensor nemo-rl-dtensor (FSDP2 ZeRO 3 with its tensor_parallel_size);
    the Megatron backends keep Megatron-Core."""
    verl_cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    assert import_config("verl", verl_cfg).scenario["workload"]["train_software"] == "verl-fsdp"
    liger = import_config("verl", verl_cfg, ["+actor_rollout_ref.model.use_liger=true"])
    assert liger.scenario["workload"]["train_software"] == "verl-fsdp-liger"
    megatron = import_config("verl", verl_cfg, ["actor_rollout_ref.actor.strategy=megatron",
                                                "+actor_rollout_ref.model.use_liger=true"])
    assert "train_software" not in megatron.scenario["workload"]
    assert "do not read it" in megatron.ignored["actor_rollout_ref.model.use_liger"]
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    assert "train_software" not in import_config("nemo-rl", nemo).scenario["workload"]    # Megatron recipe
    dtensor = import_config("nemo-rl", nemo, ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"])
    assert dtensor.scenario["workload"]["train_software"] == "nemo-rl-dtensor"
    load_scenario(dtensor.scenario)


DTENSOR = ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"]


def test_nemo_rls_dtensor_policy_is_its_fsdp2_stack_with_tp_and_cp():
    """NeMo RL's DTensor policy: nemo-rl-dtensor (FSDP2's fully_shard, ZeRO 3 only; DTensor TP and CP, no
    pipeline), its tensor / context parallel sizes and sequence_parallel read into the layout."""
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    r = import_config("nemo-rl", nemo, [*DTENSOR, "+policy.dtensor_cfg.tensor_parallel_size=2",
                                        "+policy.dtensor_cfg.context_parallel_size=2",
                                        "+policy.dtensor_cfg.sequence_parallel=true"])
    w = r.scenario["workload"]
    assert w["train_software"] == "nemo-rl-dtensor" and "nemo-rl-dtensor" in r.mapped["policy.dtensor_cfg.enabled"]
    assert {k: w["train_layout"][k] for k in ("tp", "cp", "pp", "zero", "sequence_parallel")} == \
        {"tp": 2, "cp": 2, "pp": 1, "zero": 3, "sequence_parallel": True}
    load_scenario(r.scenario)


@pytest.mark.parametrize(("key", "value", "says", "fix"), [
    ("zero", 2, "nemo-rl-dtensor runs zero 3 only", "set zero: 3"),
    ("pp", 2, "nemo-rl-dtensor has no pipeline parallelism", "policy.megatron_cfg.enabled=true")])
def test_a_layout_nemo_rls_dtensor_policy_cannot_run_is_refused_naming_the_field(capsys, key, value, says, fix):
    code, _, err = cli(capsys, "run", "--from-nemo-rl", str(EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"), *DTENSOR,
                       "--set", f"workload.train_layout.{key}={value}", "--iterations", "1")
    assert code == 2 and f"workload.train_layout.{key}" in err and says in err and fix in err


def test_verls_bypass_mode_skips_the_old_log_prob_pass():
    """algorithm.rollout_correction.bypass_mode (verl 0.7): fit() takes the rollout's log-probs as the old
    ones and runs no old_log_prob pass, on the hybrid engine and the one-step-off recipe alike; the
    fully_async recipe runs none anyway."""
    bypass = "+algorithm.rollout_correction.bypass_mode=true"
    hybrid = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [bypass])
    assert hybrid.scenario["schedule"]["recompute_logprob"] is False
    assert "algorithm.rollout_correction.bypass_mode" in hybrid.mapped
    off = import_config("verl", EXAMPLES / "verl-one-step-off-qwen2.5-7b.yaml", [bypass])
    assert off.scenario["schedule"]["recompute_logprob"] is False
    run = simulate(off.scenario, iterations=2)
    assert "old_logprob" not in run.summary["stage_time_s"]
    fully = import_config("verl", EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml", [bypass])
    assert "recompute_logprob" not in fully.scenario["schedule"]
    assert "already" in fully.ignored["algorithm.rollout_correction.bypass_mode"]
    assert "recompute_logprob" not in import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml").scenario["schedule"]


def test_verl_07_megatron_lora_is_megatron_bridges():
    """verl 0.7's megatron workers train LoRA from model.lora (Megatron-Bridge; model.lora_rank is the
    fsdp workers'): its Megatron module names as the Hugging Face ones, the whole model sent at each
    sync (the bridge exports the HF state dict)."""
    cfg = DATA / "verl-0.7.0-generated-ppo-megatron-trainer.yaml"
    lora = import_config("verl", cfg, [*QUICKSTART, "actor_rollout_ref.model.lora.rank=16",
                                       "actor_rollout_ref.model.lora.target_modules=[linear_qkv,linear_fc1]"])
    assert lora.scenario["workload"]["lora"] == {"rank": 16, "targets": ["q_proj", "k_proj", "v_proj", "gate_proj",
                                                                         "up_proj"]}
    assert lora.scenario["schedule"]["lora_refit"] == "full"
    assert "lora" not in import_config("verl", cfg, QUICKSTART).scenario["workload"]
    with pytest.raises(RlsimError, match="not one of Megatron's modules") as info:
        import_config("verl", cfg, [*QUICKSTART, "actor_rollout_ref.model.lora.rank=16",
                                    "actor_rollout_ref.model.lora.target_modules=[q_proj]"])
    assert info.value.field == "actor_rollout_ref.model.lora.target_modules"
    fsdp = import_config("verl", DATA / "verl-0.7.0-generated-ppo-trainer.yaml",
                         [*QUICKSTART, "actor_rollout_ref.model.lora_rank=8"])
    assert fsdp.scenario["workload"]["lora"]["rank"] == 8


def test_verl_07_reward_manager_name_is_read_as_the_deprecated_key():
    """verl 0.7 names the reward manager reward_manager.name (reward_model.reward_manager deprecated):
    naive / dapo with the synchronous rollout are scored by the driver, one worker."""
    cfg = DATA / "verl-0.7.0-generated-ppo-trainer.yaml"
    over = [*QUICKSTART, "actor_rollout_ref.rollout.mode=sync"]
    assert import_config("verl", cfg, [*over, "reward_manager.name=dapo"]).scenario["workload"]["reward"]["workers"] == 1
    other = import_config("verl", cfg, [*over, "reward_manager.name=prime"])
    assert "workers" not in other.scenario["workload"]["reward"] and "prime" in other.ignored["reward_manager.name"]


def test_verl_09_scores_rule_rewards_in_its_reward_loop_workers():
    """verl 0.9 (the agent loop only: rollout.mode sync is removed) streams each finished sample to one of
    reward.num_workers reward-loop workers (experimental/reward_loop): workers and handover by sample."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    reward = import_config("verl", cfg, [*QUICKSTART, "reward.num_workers=4"]).scenario["workload"]["reward"]
    assert (reward["kind"], reward["workers"], reward["handover"]) == ("rule", 4, "sample")
    v1 = import_config("verl", cfg, [*QUICKSTART, "trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async"])
    assert v1.scenario["schedule"]["kind"] == "verl-colocate-async" and "trainer.v1.trainer_mode" in v1.mapped
    assert "trainer.use_v1" in v1.mapped


V1_ASYNC = ["actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=4", "trainer.n_gpus_per_node=4"]


def test_verl_09_v1_async_modes_as_their_trainers_run_them():
    """trainer.v1.trainer_mode colocate_async / separate_async (verl 0.9.1 trainer/ppo/v1): the kinds
    verl-colocate-async / verl-separate-async with the mode's warm-up, local updates and replay-buffer
    keys; the other mode's keys and the standalone pool outside separate_async are not read."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    sep = import_config("verl", cfg, [*QUICKSTART, *V1_ASYNC, "trainer.v1.trainer_mode=separate_async",
                                      "trainer.v1.separate_async.num_warmup_batches=2",
                                      "trainer.v1.sampler.max_off_policy_threshold=3"])
    s = sep.scenario["schedule"]
    assert (s["kind"], s["rollout_devices"], s["parameter_sync_step"], s["num_warmup_batches"],
            s["max_off_policy_threshold"]) == ("verl-separate-async", 4, 4, 2, 3)
    assert sep.unknown == {} and all("use_torch_compile" in key for key in sep.unsupported)   # all else read
    assert "trainer_mode colocate_async" in sep.ignored["trainer.v1.colocate_async.num_warmup_batches"]
    col = import_config("verl", cfg, [*QUICKSTART, *V1_ASYNC, "trainer.v1.trainer_mode=colocate_async"])
    assert col.scenario["schedule"]["kind"] == "verl-colocate-async" and "rollout_devices" not in col.scenario["schedule"]
    assert "actor_rollout_ref.rollout.nnodes" in col.unsupported
    assert "parameter_sync_step" not in col.scenario["schedule"]
    dapo = import_config("verl", cfg, [*QUICKSTART, "trainer.v1.trainer_mode=colocate_async",
                                       "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                                       "actor_rollout_ref.rollout.n=8"])
    assert dapo.scenario["workload"]["dynamic_sampling"] == {}   # a filtered group replaced by one new prompt
    assert "between_gen_batches" not in dapo.scenario["schedule"]
    load_scenario(dapo.scenario)
    sync = import_config("verl", cfg, [*QUICKSTART, "trainer.v1.sampler.max_off_policy_threshold=3"])
    assert sync.scenario["schedule"]["kind"] == "verl-sync"
    assert "no-op" in sync.ignored["trainer.v1.sampler.max_off_policy_threshold"]


def test_verl_09_sync_mode_runs_its_replay_buffer_and_a_legacy_config_the_legacy_trainer(tmp_path):
    """verl 0.9 runs main_ppo through its v1 trainer, sync mode by default (kind verl-sync): DAPO's
    filter_groups there refills one prompt at a time (no gen_prompts, no cap) within
    max_inflight_gen_batches; use_v1 false, or a config with no v1 key (verl 0.4-0.7), is the
    legacy trainer (kind colocated, DAPO in generation batches)."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    dapo = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
            "algorithm.filter_groups.max_num_gen_batches=5", "algorithm.filter_groups.max_inflight_gen_batches=2",
            "+data.gen_batch_size=384", "actor_rollout_ref.rollout.n=8"]
    v1 = import_config("verl", cfg, [*QUICKSTART, *dapo])
    assert v1.scenario["schedule"]["kind"] == "verl-sync" and "trainer.use_v1 true" in v1.schedule_rule
    assert v1.scenario["schedule"]["max_inflight_gen_batches"] == 2 and v1.scenario["workload"]["dynamic_sampling"] == {}
    assert "ignores it" in v1.ignored["algorithm.filter_groups.max_num_gen_batches"]
    assert "one at a time" in v1.ignored["data.gen_batch_size"]
    assert "between_gen_batches" not in v1.scenario["schedule"]
    load_scenario(v1.scenario)
    legacy = import_config("verl", cfg, [*QUICKSTART, *dapo, "trainer.use_v1=false"])
    assert legacy.scenario["schedule"]["kind"] == "colocated"
    assert legacy.scenario["workload"]["dynamic_sampling"] == {"gen_prompts": 384, "max_gen_batches": 5}
    assert "v1 sync mode" in legacy.ignored["algorithm.filter_groups.max_inflight_gen_batches"]
    plain = import_config("verl", cfg, [*QUICKSTART])
    assert plain.scenario["schedule"]["kind"] == "verl-sync" and "max_inflight_gen_batches" not in plain.scenario["schedule"]
    # at rollout.n 1 every group is one sample, which DAPO's filter keeps: no dynamic sampling runs
    single = import_config("verl", cfg, [*QUICKSTART, *dapo[:-1], "trainer.use_v1=false"])
    assert "dynamic_sampling" not in single.scenario["workload"]
    assert "nothing is filtered" in single.ignored["algorithm.filter_groups.enable"]
    load_scenario(single.scenario)
    old = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
    assert old.scenario["schedule"]["kind"] == "colocated" and any("trainer.use_v1=true" in n for n in old.notes)
    new = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["+trainer.use_v1=true"])
    assert new.scenario["schedule"]["kind"] == "verl-sync"


def test_verl_09_separate_async_lends_the_trainers_devices_with_enable_switch():
    """trainer.v1.separate_async.hybrid_rollout.enable_switch: schedule.hybrid_rollout with the keys given and
    the hybrid engine's switch (its replicas sleep between lent spans); off, or without the hybrid engine's
    replicas (hybrid_engine false, which verl warns it ignores), its keys are listed as ignored."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    mode = [*QUICKSTART, *V1_ASYNC, "trainer.v1.trainer_mode=separate_async"]
    section = "trainer.v1.separate_async.hybrid_rollout"
    lent = import_config("verl", cfg, [*mode, f"{section}.enable_switch=true", f"{section}.switch_threshold_ratio=0.6"])
    s = lent.scenario["schedule"]
    assert s["hybrid_rollout"]["switch_threshold_ratio"] == 0.6 and s["switch"]["engine_sleep"] is True
    assert f"{section}.enable_switch" in lent.mapped and "actor_rollout_ref.rollout.free_cache_engine" in lent.mapped
    assert load_scenario(lent.scenario).schedule.hybrid_rollout.switch_threshold_ratio == 0.6
    off = import_config("verl", cfg, [*mode, f"{section}.switch_threshold_ratio=0.6"])
    assert "hybrid_rollout" not in off.scenario["schedule"] and "switch" not in off.scenario["schedule"]
    assert "enable_switch" in off.ignored[f"{section}.switch_threshold_ratio"]
    bare = import_config("verl", cfg, [*mode, f"{section}.enable_switch=true", "actor_rollout_ref.hybrid_engine=false"])
    assert "hybrid_rollout" not in bare.scenario["schedule"] and "hybrid_engine false" in bare.ignored[
        f"{section}.enable_switch"]


def test_verl_09_fully_async_keys_are_read():
    """verl 0.9's fully_async (experimental/fully_async_policy/config, 0.9.1): its global concurrency cap
    per replica as rlsim's per-server cap, the standalone replicas' memory share as the pool's, its
    validation switch ignored, its dynamic resource controller as schedule.dynamic_resources."""
    example = EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml"
    r = import_config("verl", example, ["+async_training.concurrent_samples_per_replica=8",
                                        "+actor_rollout_ref.rollout.standalone_gpu_memory_utilization=0.7",
                                        "+async_training.use_trainer_do_validate=false",
                                        "+async_training.use_dynamic_resource_scheduling=true",
                                        "+async_training.dynamic_schedule_deactivate_ratio=0.5",
                                        "+async_training.dynamic_schedule_enable_rebalance=false"])
    assert r.unknown == {} and r.unsupported == {}
    s = r.scenario["schedule"]
    assert s["max_inflight_prompts_per_server"] == 8 and s["request_routing"]
    assert s["dynamic_resources"] == {"deactivate_ratio": 0.5, "rebalance": False}
    assert s["switch"]["engine_sleep"] is True    # the lent replicas sleep as the hybrid engine's do
    assert load_scenario(r.scenario).schedule.dynamic_resources.deactivate_ratio == 0.5
    assert "async_training.use_dynamic_resource_scheduling" in r.mapped
    assert any("gpu_memory_utilization" in note and "lent replicas" in note for note in r.notes)
    assert r.scenario["workload"]["rollout_layout"]["gpu_memory_utilization"] == 0.7
    assert "standalone" in r.ignored["actor_rollout_ref.rollout.gpu_memory_utilization"]
    # a verl 0.9 key: the 0.9 Rollouter even without concurrent_samples_per_replica; off: its knobs unread
    lent = import_config("verl", example, ["+async_training.use_dynamic_resource_scheduling=true"]).scenario
    assert lent["schedule"]["request_routing"] and lent["schedule"]["dynamic_resources"] == {}
    off = import_config("verl", example, ["+async_training.dynamic_schedule_policy=fixed_ratio"])
    assert "dynamic_resources" not in off.scenario["schedule"]
    assert "use_dynamic_resource_scheduling" in off.ignored["async_training.dynamic_schedule_policy"]
    with pytest.raises(RlsimError) as err:      # only_hybrid: every replica on the trainer's GPUs
        import_config("verl", example, ["+async_training.use_dynamic_resource_scheduling=true", "rollout.nnodes=0"])
    assert err.value.field == "rollout.nnodes"
    colocated = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                              ["+actor_rollout_ref.rollout.standalone_gpu_memory_utilization=0.7"])
    assert "fully_async" in colocated.ignored["actor_rollout_ref.rollout.standalone_gpu_memory_utilization"]


def test_a_fully_async_dapo_config_writes_no_dynamic_sampling_as_fully_async_filters_nothing():
    """verl 0.9.1's fully_async filters no group: its Rollouter queues every sample it generates and
    nothing under experimental/fully_async_policy reads algorithm.filter_groups. The import lists the
    switch and its sub-keys ignored with that reason and writes no workload.dynamic_sampling (it wrote
    {}, filtering groups verl trains on); the verl-fully-async kind still runs one given by hand."""
    example = EXAMPLES / "verl-fully-async-qwen2.5-7b.yaml"
    r = import_config("verl", example, ["+algorithm.filter_groups.enable=true",
                                        "+algorithm.filter_groups.max_num_gen_batches=10",
                                        "+algorithm.filter_groups.metric=acc"])
    assert "dynamic_sampling" not in r.scenario["workload"]
    assert "filters no group" in r.ignored["algorithm.filter_groups.enable"]
    assert "_process_single_sample_streaming" in r.ignored["algorithm.filter_groups.enable"]
    for key in ("algorithm.filter_groups.max_num_gen_batches", "algorithm.filter_groups.metric"):
        assert "filters no group" in r.ignored[key]
    assert "one at a time" in r.ignored["data.gen_batch_size"]
    assert not any("keep_fraction" in note for note in r.notes)
    plain = import_config("verl", example)
    assert {k: v for k, v in r.scenario.items() if k != "workload"} == {
        k: v for k, v in plain.scenario.items() if k != "workload"}
    # a fork that filters: dynamic sampling given by hand runs under the kind, as before
    sc = load_scenario(r.scenario, overrides=["iterations=2", "workload.response_length.max=1024",
                                              "workload.dynamic_sampling={}"])
    run = simulate(sc)
    assert run.summary["samples"]["consumed"] == 2 * sc.workload.prompts_per_step * sc.workload.samples_per_prompt
    assert set(run.summary["samples"]["dropped"]) <= {"no_signal", "unused"}


@pytest.mark.parametrize(("over", "field"), [
    (["actor_rollout_ref.rollout.checkpoint_engine.backend=naive"], "actor_rollout_ref.rollout.checkpoint_engine.backend"),
    (["trainer.v1.separate_async.parameter_sync_step=3"], "trainer.v1.separate_async.parameter_sync_step"),
    (["trainer.v1.trainer_mode=fully_async"], "trainer.v1.trainer_mode")])
def test_verl_09_separate_async_refuses_what_verl_asserts(over, field):
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    with pytest.raises(RlsimError) as err:
        import_config("verl", cfg, [*QUICKSTART, *V1_ASYNC, "trainer.v1.trainer_mode=separate_async", *over])
    assert err.value.field == field


@pytest.mark.parametrize("value", ["3", "true", "[1,2]"])
def test_lora_targets_that_are_no_module_names_are_an_error(value):
    with pytest.raises(RlsimError, match="not a module name") as info:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                      ["actor_rollout_ref.model.lora_rank=8", f"+actor_rollout_ref.model.target_modules={value}"])
    assert info.value.field == "actor_rollout_ref.model.target_modules"


def test_another_verl_versions_defaults_come_from_its_generated_config_as_a_base(tmp_path):
    """A partial config takes rlsim's verl defaults (0.6 / 0.7's); with verl 0.9.1's generated config as
    its `defaults:` base it takes 0.9's: the agent loop, rewards in reward.num_workers workers."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({
        "defaults": [str(DATA / "verl-0.9.1-generated-ppo-trainer.yaml")],
        "data": {"train_batch_size": 256, "max_prompt_length": 512, "max_response_length": 1024},
        "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-7B-Instruct"},
                              "actor": {"ppo_mini_batch_size": 64, "ppo_micro_batch_size_per_gpu": 4},
                              "rollout": {"name": "vllm", "tensor_model_parallel_size": 2, "n": 8,
                                          "log_prob_micro_batch_size_per_gpu": 8},
                              "ref": {"log_prob_micro_batch_size_per_gpu": 8}},
        "algorithm": {"adv_estimator": "grpo"}, "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}))
    imported = import_config("verl", mine)
    assert imported.unknown == {}
    reward = imported.scenario["workload"]["reward"]
    assert (reward["workers"], reward["handover"]) == (8, "sample")   # 0.9.1's reward.num_workers default


def test_verl_09_one_step_off_as_its_recipe_sets_it():
    """verl 0.9's one_step_off recipe (experimental/one_step_off_policy/config): a rollout pool of its own,
    the NCCL checkpoint engine (rank 0 broadcasting buckets: rlsim's split-pool sync) and bypass mode
    (no old log-prob pass)."""
    recipe = ["+rollout.nnodes=1", "+rollout.n_gpus_per_node=4", "trainer.n_gpus_per_node=4",
              "actor_rollout_ref.rollout.free_cache_engine=false", "actor_rollout_ref.rollout.calculate_log_probs=true",
              "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
              "algorithm.rollout_correction.bypass_mode=true"]
    r = import_config("verl", DATA / "verl-0.9.1-generated-ppo-trainer.yaml", [*QUICKSTART, *recipe])
    s = r.scenario["schedule"]
    assert (s["kind"], s["rollout_devices"], s["refit"], s["recompute_logprob"]) == ("one-step-off", 4, "full-tensors",
                                                                                      False)
    assert "nccl" in r.ignored["actor_rollout_ref.rollout.checkpoint_engine.backend"]
    other = import_config("verl", DATA / "verl-0.9.1-generated-ppo-trainer.yaml",
                          [*QUICKSTART, "actor_rollout_ref.rollout.checkpoint_engine.backend=nixl"])
    assert "actor_rollout_ref.rollout.checkpoint_engine.backend" in other.unsupported


_TEACHER = "distillation.teacher_models.teacher_model"


def test_verl_09_distillation_puts_its_teacher_on_a_pool_of_its_own():
    """verl 0.9's on-policy distillation: the teacher's model, its pool beside the trainer's (the
    topology holds both), its inference config's own engine constants, top-k with forward_kl_topk."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    teacher = ["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
               f"{_TEACHER}.model_path=Qwen/Qwen2.5-7B-Instruct", f"{_TEACHER}.inference.tensor_model_parallel_size=1"]
    imported = import_config("verl", cfg, [*QUICKSTART, *teacher])
    spec = imported.scenario["workload"]["distillation"]
    assert (spec["teacher"], spec["devices"], spec["layout"]["tp"], spec["topk"]) == ("qwen2.5-7b", 1, 1, 0)
    assert spec["inference"] == {"enforce_eager": True, "max_num_batched_tokens": 8192, "chunked_prefill": True}
    assert imported.scenario["topology"]["nodes"] == 2          # 1 GPU training + 1 GPU teacher, a GPU a node
    assert imported.unknown == {} and not any(key.startswith("distillation") for key in imported.unsupported)
    assert "distillation.enabled" in imported.mapped and f"{_TEACHER}.model_path" in imported.mapped
    top = import_config("verl", cfg, [*QUICKSTART, *teacher, "distillation.distillation_loss.loss_mode=forward_kl_topk"])
    assert top.scenario["workload"]["distillation"]["topk"] == 32                  # verl's default topk
    load_scenario(imported.scenario)                                                # a scenario rlsim runs
    assert "distillation" not in import_config("verl", cfg, QUICKSTART).scenario["workload"]
    with pytest.raises(RlsimError, match="teacher pool") as err:
        import_config("verl", cfg, [*QUICKSTART, "distillation.enabled=true", f"{_TEACHER}.model_path=Qwen/Qwen2.5-7B"])
    assert err.value.field == "distillation.nnodes"
    with pytest.raises(RlsimError, match="several teachers") as err:
        import_config("verl", cfg, [*QUICKSTART, *teacher, "+distillation.teacher_models.math.model_path=Qwen/Qwen2.5-7B"])
    assert err.value.field.startswith("distillation.teacher_models.math")


_RM = "reward.reward_model"


def test_verl_09_reward_model_on_a_pool_of_its_own_or_woken_on_the_trainers_gpus():
    """verl 0.9's reward loop with a reward model: on a resource pool of its own, its engines on their
    devices (the topology holds both) with its rollout config's own constants, each sample handed over
    as it finishes; colocated, the same engines woken on the trainer's GPUs (no devices, noted)."""
    cfg = DATA / "verl-0.9.1-generated-ppo-trainer.yaml"
    rm = [f"{_RM}.enable=true", f"{_RM}.model_path=Qwen/Qwen2.5-7B-Instruct", f"{_RM}.rollout.name=vllm"]
    pool = [f"{_RM}.enable_resource_pool=true", f"{_RM}.nnodes=2", f"{_RM}.n_gpus_per_node=1"]
    imported = import_config("verl", cfg, [*QUICKSTART, *rm, *pool])
    reward = imported.scenario["workload"]["reward"]
    assert (reward["kind"], reward["model"], reward["handover"]) == ("model", "qwen2.5-7b", "sample")
    assert reward["served"] == {"devices": 2, "layout": {"tp": 2, "gpu_memory_utilization": 0.5, "max_num_seqs": 1024},
                                "inference": {"enforce_eager": True, "max_num_batched_tokens": 8192,
                                              "chunked_prefill": True}}
    assert imported.scenario["topology"]["nodes"] == 3          # 1 GPU training + 2 for the reward model, a GPU a node
    assert imported.unknown == {} and list(k for k in imported.unsupported if k.startswith(_RM)) == \
        [f"{_RM}.rollout.enable_prefix_caching"]
    assert {f"{_RM}.enable", f"{_RM}.enable_resource_pool", f"{_RM}.nnodes",
            f"{_RM}.rollout.tensor_model_parallel_size"} <= set(imported.mapped)
    assert "reward.num_workers" in imported.ignored
    load_scenario(imported.scenario)                                                # a scenario rlsim runs
    colocated = import_config("verl", cfg, [*QUICKSTART, *rm])
    assert colocated.scenario["workload"]["reward"] == {"kind": "model", "model": "qwen2.5-7b",
                                                        "served": {k: reward["served"][k] for k in ("layout", "inference")}}
    assert f"{_RM}.rollout.tensor_model_parallel_size" in colocated.mapped and f"{_RM}.nnodes" in colocated.ignored
    assert any("colocated" in note and "sleep" in note for note in colocated.notes)
    load_scenario(colocated.scenario)
    plain = import_config("verl", cfg, QUICKSTART)
    assert plain.scenario["workload"]["reward"]["kind"] == "rule"
    assert not any(key.startswith(f"{_RM}.") for key in [*plain.unsupported, *plain.mapped] if key != f"{_RM}.enable")
    assert "enable false" in plain.ignored[f"{_RM}.rollout.enable_prefix_caching"]
    with pytest.raises(RlsimError, match="without a pool") as err:
        import_config("verl", cfg, [*QUICKSTART, *rm, f"{_RM}.enable_resource_pool=true"])
    assert err.value.field == f"{_RM}.nnodes"
    with pytest.raises(RlsimError, match="only on a pool of its own") as err:   # fully_async / separate_async assert it
        import_config("verl", cfg, [*QUICKSTART, *rm, "+rollout.nnodes=1", "+rollout.n_gpus_per_node=1"],
                      schedule="fully-async")
    assert err.value.field == f"{_RM}.enable_resource_pool"
    judge = import_config("verl", cfg, [*QUICKSTART, *rm, *pool, "reward.custom_reward_function.path=judge.py"])
    assert "reward.custom_reward_function.path" in judge.unsupported


def test_verl_takes_its_log_probs_as_its_workers_do():
    """FSDP workers: flash-attn's Triton cross entropy (2 B a logit forward, 4 backward), after the
    logits' division by the temperature (4 + 4), which verl 0.9's engine workers skip at temperature 1;
    megatron workers: Megatron's vocab-parallel cross entropy (38 + 14) after the division."""
    def compute(name, *over):   # less 0.6's padded rows' width (its use_remove_padding false)
        compute = import_config("verl", DATA / name, [*QUICKSTART, *over]).scenario["workload"]["train_params"]["compute"]
        return {key: value for key, value in compute.items() if key not in ("pad_rows_to", "attention_skips_padding")}

    legacy = compute("verl-0.6.0-generated-ppo-trainer.yaml")
    assert legacy == {"loss_traffic_bytes_per_logit": 14.0, "loss_forward_share": pytest.approx(6 / 14)}
    engine = compute("verl-0.9.1-generated-ppo-trainer.yaml")
    assert engine == {"loss_traffic_bytes_per_logit": 6.0, "loss_forward_share": pytest.approx(2 / 6)}
    assert compute("verl-0.9.1-generated-ppo-trainer.yaml", "actor_rollout_ref.rollout.temperature=0.7") == legacy
    v1 = import_config("verl", EXAMPLES / "verl-v1-colocate-async-qwen2.5-7b.yaml").scenario["workload"]   # 0.9's keys
    assert v1["train_params"]["compute"] == engine
    megatron = compute("verl-0.9.1-generated-ppo-megatron-trainer.yaml")
    assert megatron == {"loss_traffic_bytes_per_logit": 60.0, "loss_forward_share": pytest.approx(42 / 60)}


def test_verl_entropy_follows_its_loss_and_metrics_keys():
    """The old log-prob pass computes the entropy always; the update where entropy_coeff != 0 (its loss
    takes the gradient) or calculate_entropy (metrics only); use_torch_compile picks the kernel the
    workers read (0.6's legacy workers the actor's key, 0.9's engine workers its fsdp_config's)."""
    def entropy(name, *over):   # packed rows (0.6's default pads them: its entropy then op by op, below)
        return import_config("verl", DATA / name, [*QUICKSTART, "actor_rollout_ref.model.use_remove_padding=true",
                                                   *over]).scenario["workload"]["entropy"]

    v06, v09 = "verl-0.6.0-generated-ppo-trainer.yaml", "verl-0.9.1-generated-ppo-trainer.yaml"
    # (packed rows: flash-attn's in-place backward off in an update computing the entropy, its gradient a new tensor)
    assert entropy(v06, "actor_rollout_ref.actor.entropy_coeff=0.001") == {
        "passes": ["old_logprob", "update"], "in_loss": True, "kernel": "compiled", "logprob_grad_bytes_per_logit": 2.0}
    assert entropy(v09, "actor_rollout_ref.actor.calculate_entropy=true") == {
        "passes": ["old_logprob", "update"], "kernel": "compiled", "logprob_grad_bytes_per_logit": 2.0}
    assert entropy(v06, "actor_rollout_ref.actor.use_torch_compile=false")["kernel"] == "eager"
    assert entropy(v09, "actor_rollout_ref.actor.use_torch_compile=false")["kernel"] == "compiled"   # not read
    assert entropy(v09, "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false")["kernel"] == "eager"
    # fp32 chunks op by op; the update's backward recomputing it (in the loss only)
    chunked = [f"actor_rollout_ref.actor.{k}" for k in ("use_torch_compile=false", "entropy_from_logits_with_chunking=true",
                                                         "entropy_checkpointing=true", "entropy_coeff=0.01")]
    assert entropy(v06, *chunked) == {"passes": ["old_logprob", "update"], "in_loss": True, "recompute": True,
                                      "kernel": "eager-chunked-fp32", "logprob_grad_bytes_per_logit": 2.0}
    assert "recompute" not in entropy(v06, "actor_rollout_ref.actor.entropy_checkpointing=true")
    imported = import_config("verl", DATA / v09, [*QUICKSTART, "actor_rollout_ref.actor.entropy_checkpointing=true"])
    assert "workers' copy" in imported.ignored["actor_rollout_ref.actor.entropy_checkpointing"]   # 0.9 reads fsdp_config's
    assert "compute no entropy" in imported.ignored["actor_rollout_ref.ref.entropy_checkpointing"]


def test_verls_padded_rows_take_the_entropy_op_by_op_whatever_compile_and_chunking_say():
    """model.use_remove_padding false: dp_actor.py's padded branch (0.6.1: 275-279; 0.9.1's engine alike)
    calls verl_F.entropy_from_logits itself, neither the compiled function nor the chunked one (which the
    packed branch takes); entropy_checkpointing still recomputes it. The keys it does not read are listed
    as ignored."""
    padded = "actor_rollout_ref.model.use_remove_padding=false"
    for name, options in (("verl-0.6.0-generated-ppo-trainer.yaml", "actor_rollout_ref.actor"),
                          ("verl-0.9.1-generated-ppo-trainer.yaml", "actor_rollout_ref.actor.fsdp_config")):
        over = [*QUICKSTART, padded, "actor_rollout_ref.actor.entropy_coeff=0.01", *(
            f"{options}.{key}=true" for key in ("entropy_from_logits_with_chunking", "entropy_checkpointing",
                                                "use_torch_compile"))]
        r = import_config("verl", DATA / name, over)
        assert r.scenario["workload"]["entropy"] == {"passes": ["old_logprob", "update"], "in_loss": True,
                                                     "recompute": True, "kernel": "eager"}
        for key in ("use_torch_compile", "entropy_from_logits_with_chunking"):
            assert "op by op" in r.ignored[f"{options}.{key}"]
        packed = import_config("verl", DATA / name, [*over, "actor_rollout_ref.model.use_remove_padding=true"])
        assert packed.scenario["workload"]["entropy"]["kernel"] == "compiled"


def test_verls_fused_kernels_take_the_log_probs_and_the_entropy_on_their_torch_backend():
    """model.use_fused_kernels (impl_backend torch): the fused kernel's bytes a logit (66 forward, the
    entropy among them; 60 backward) with the head projected again in the backward, and the entropy's
    gradient alone where the loss takes it; the triton backend and the megatron workers' fused forward
    are listed as unsupported and priced as without them."""
    fused = [*QUICKSTART, "actor_rollout_ref.model.use_fused_kernels=true"]
    w = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml", fused).scenario["workload"]
    assert w["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 126.0, "logits_recompute": True,
                                            "loss_forward_share": pytest.approx(66 / 126), "pad_rows_to": 1024,
                                            "attention_skips_padding": True}
    assert "entropy" not in w
    bonus = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml",
                          [*fused, "actor_rollout_ref.actor.entropy_coeff=0.01"]).scenario["workload"]
    assert bonus["entropy"] == {"passes": ["update"], "in_loss": True, "kernel": "verl-fused-torch"}
    triton = import_config("verl", DATA / "verl-0.6.0-generated-ppo-trainer.yaml",
                           [*fused, "actor_rollout_ref.model.fused_kernel_options.impl_backend=triton"])
    assert "triton kernel" in triton.unsupported["actor_rollout_ref.model.use_fused_kernels"]
    assert triton.scenario["workload"]["train_params"]["compute"]["loss_traffic_bytes_per_logit"] == 14.0


def test_nemo_rls_prompt_cap_leaves_a_token_and_verls_fully_async_step_counts_its_required_batches():
    """A prompt of T-max leaves vLLM's max_model_len no room (an audit's mutation to T-max passed: the
    example gives data.max_input_seq_length); a fully async step is require_batches x
    trigger_parameter_sync_step x ppo_mini_batch_size prompts (the example's require_batches is 1,
    where dropping it passed)."""
    nemo = import_config("nemo-rl", "workloads/frameworks/nemo-rl-grpo-llama3.1-8b.yaml",
                         ["~data.max_input_seq_length"])
    assert nemo.scenario["workload"]["prompt_length"]["max"] == 4096 - 1
    fully = import_config("verl", "workloads/frameworks/verl-fully-async-qwen2.5-7b.yaml",
                          ["async_training.require_batches=2"])
    assert fully.scenario["workload"]["prompts_per_step"] == 2 * 4 * 32


@pytest.mark.parametrize("overrides, field", [
    (["actor_rollout_ref.actor.use_dynamic_bsz=false", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"],
     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    (["actor_rollout_ref.actor.use_dynamic_bsz=false", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
      "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"],
     "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
])
def test_sample_count_micro_batches_of_no_size_are_refused_as_verl_refuses_them(overrides, field):
    # verl: "Please set at least one of ...": rlsim took micro-batch 1 without a word (a trial)
    with pytest.raises(RlsimError, match="Please set at least one of") as info:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", overrides)
    assert info.value.field == field


@pytest.mark.parametrize("override, field", [
    ("policy.generation.colocated.enabled=true", "policy.generation.colocated.enabled"),
    ("policy.generation.vllm_cfg.async_engine=false", "policy.generation.vllm_cfg.async_engine"),
])
def test_async_grpo_on_what_nemo_rl_refuses_it_on_is_refused(override, field):
    # both ran (the colocation unsaid, 59.49 s as split pools; a trial)
    with pytest.raises(RlsimError) as info:
        import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b-async-1off.yaml", [override])
    assert info.value.field == field


def test_a_nemo_recipe_without_its_vllm_pipeline_size_takes_nemo_rls_default():
    # grpo_math_1B v0.5.0 gives 1; a recipe without its defaults base failed "got None" (a trial)
    r = import_config("nemo-rl", EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml",
                      ["~policy.generation.vllm_cfg.pipeline_parallel_size"])
    assert r.scenario["workload"]["rollout_layout"].get("pp", 1) == 1


def test_a_split_pool_without_its_size_says_what_chose_split_pools():
    with pytest.raises(RlsimError, match="async_training.. keys") as info:
        import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", ["+async_training.staleness_threshold=0.5"])
    assert info.value.field == "rollout.n_gpus_per_node"


FP32_MASTER = {"resident_weight_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0, "optimizer_bytes_per_param": 8.0}


def test_verl_fsdp_actor_keeps_its_fp32_shard_as_the_master_copy():
    """verl's FSDP actor loads fp32 (fsdp_config.model_dtype's default): 4 + 4 + 8 bytes a parameter,
    its gradients and AdamW's state in model_dtype; the Megatron actor keeps rlsim's 18."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    memory = import_config("verl", cfg).scenario["workload"]["train_params"]["memory"]
    assert memory == FP32_MASTER
    bf16 = import_config("verl", cfg, ["actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"])
    assert bf16.scenario["workload"]["train_params"]["memory"] == {
        "resident_weight_bytes_per_param": 2.0, "grad_bytes_per_param": 2.0, "optimizer_bytes_per_param": 4.0}
    assert "resident_weight_bytes_per_param" in bf16.mapped["actor_rollout_ref.actor.fsdp_config.model_dtype"]
    megatron = import_config("verl", cfg, ["actor_rollout_ref.actor.strategy=megatron"]).scenario["workload"]
    assert "memory" not in megatron.get("train_params", {})
    load_scenario(import_config("verl", cfg).scenario)


def test_nemo_rl_dtensor_keeps_an_fp32_master_shard_and_megatron_its_18_bytes():
    nemo = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    assert "memory" not in import_config("nemo-rl", nemo).scenario["workload"].get("train_params", {})
    dtensor = import_config("nemo-rl", nemo, ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"])
    assert dtensor.scenario["workload"]["train_params"]["memory"] == FP32_MASTER
    load_scenario(dtensor.scenario)


def test_an_absent_use_remove_padding_takes_the_default_of_the_verl_the_recipe_is_read_as():
    """model.use_remove_padding defaults to false in verl 0.6 (model/hf_model.yaml) and true from 0.7
    (0.7.0, 0.9.1): a config without it is read as verl 0.6 (padded rows), its v1 recipes (verl 0.9
    only) as 0.9 (packed), each with a note naming the default taken and the key to set; a config that
    gives it, or a megatron actor (which does not read it), gets no note."""
    key = "actor_rollout_ref.model.use_remove_padding"
    legacy = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml", [f"~{key}"])
    assert legacy.scenario["schedule"]["distqueue"]["packed"] is False
    assert verl.REMOVE_PADDING_NOTE in legacy.notes and f"{key}=true" in verl.REMOVE_PADDING_NOTE
    v1 = import_config("verl", EXAMPLES / "verl-v1-colocate-async-qwen2.5-7b.yaml", [f"~{key}"])
    assert v1.scenario["schedule"]["distqueue"]["packed"] is True
    assert verl.REMOVE_PADDING_V1_NOTE in v1.notes and f"{key}=false" in verl.REMOVE_PADDING_V1_NOTE
    for given in (import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"),
                  import_config("verl", EXAMPLES / "verl-v1-colocate-async-qwen2.5-7b.yaml", [f"{key}=false"])):
        assert not {verl.REMOVE_PADDING_NOTE, verl.REMOVE_PADDING_V1_NOTE} & set(given.notes)
    assert given.scenario["schedule"]["distqueue"]["packed"] is False
    megatron = import_config("verl", EXAMPLES / "verl-grpo-qwen2.5-7b.yaml",
                             [f"~{key}", "actor_rollout_ref.actor.strategy=megatron"])
    assert not {verl.REMOVE_PADDING_NOTE, verl.REMOVE_PADDING_V1_NOTE} & set(megatron.notes)
    load_scenario(legacy.scenario)
    load_scenario(v1.scenario)


def test_an_absent_use_remove_padding_packs_a_v1_recipes_rows_and_its_entropy_follows():
    """Under a v1 recipe (verl 0.9) an absent model.use_remove_padding is 0.9's true: the rows are packed
    and the entropy keeps its compiled kernel (the entropy read the key's 0.6 default, false, and took the
    padded rows' op-by-op kernel beside packed rows)."""
    example = ROOT / "workloads" / "frameworks" / "verl-v1-sync-dapo-qwen2.5-7b.yaml"
    r = import_config("verl", example, ["~actor_rollout_ref.model.use_remove_padding"])
    assert r.scenario["schedule"]["distqueue"] == {"packed": True}
    assert r.scenario["workload"]["entropy"]["kernel"] == "compiled"
