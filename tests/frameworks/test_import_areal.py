"""`--from-areal`: AReaL 1.0.4 experiment configs turned into scenarios (simulator/frameworks/areal.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import areal, import_config
from simulator.frameworks.areal import parse_backend
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "workloads" / "frameworks" / "areal-grpo-qwen2.5-1.5b.yaml"
DATA = Path(__file__).resolve().parent / "data"
DEFAULTS = DATA / "areal-1.0.4-grpo-defaults.yaml"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_example_runs_to_the_same_json_as_its_hand_written_scenario(capsys):
    code, imported, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "--iterations", "2", "--json")
    assert code == 0, err
    code, hand, err = cli(capsys, "run", str(DATA / "areal-grpo-qwen2.5-1.5b.scenario.yaml"), "--iterations", "2",
                          "--json")
    assert code == 0, err
    doc = json.loads(imported)
    report = doc.pop("framework_import")
    assert json.dumps(doc, indent=2) + "\n" == hand
    assert report["framework"] == "areal" and not report["unknown"] and not report["unsupported"]
    assert report["mapped"]["rollout.max_head_offpolicyness"] == "schedule.max_head_offpolicyness"
    assert doc["areal"]["max_head_offpolicyness"] == 2


def test_a_saved_config_at_areals_defaults_imports_whole(capsys):
    """The whole GRPOConfig at its dataclass defaults (as a run saves it): every key accounted for, the
    inactive engines' sections ignored, only SGLang's scheduler knobs unsupported."""
    r = import_config("areal", DEFAULTS)
    assert not r.unknown
    assert set(r.unsupported) == {"sglang.max_prefill_tokens", "sglang.schedule_conservativeness",
                                  "sglang.schedule_policy"}
    assert "trains with fsdp" in r.ignored["actor.megatron.wrap_with_ddp"]
    assert "runs on sglang" in r.ignored["vllm.max_num_seqs"]
    s = r.scenario
    assert s["schedule"]["kind"] == "areal" and s["schedule"]["max_head_offpolicyness"] == 0
    assert s["schedule"]["recompute_logprob"] is False                   # AReaL's defaults: neither flag
    assert s["workload"]["reference"] is False and "no ref section" in r.ignored["actor.kl_ctl"]
    assert s["workload"]["inference"]["enable_prefix_caching"] is False  # disable_radix_cache: true
    assert s["workload"]["mini_batch_prompts"] == 64                     # 256 / ppo_n_minibatches 4
    assert s["workload"]["train_layout"]["micro_batch"] == 64            # a mini-batch per rank in one
    code, _, err = cli(capsys, "run", "--from-areal", str(DEFAULTS), "--iterations", "1")
    assert code == 2 and "does not fit" in err and "actor.mb_spec.n_mbs" in err    # ... which does not fit
    # a budget below the longest sequence (prompt max + max_new_tokens: 18,219) is refused, as AReaL's
    # ffd_allocate raises on it (utils/seqpack.py: "larger than capacity"); the stage-cost reuse had
    # hidden it where the heaviest batch was not costed itself
    code, _, err = cli(capsys, "run", "--from-areal", str(DEFAULTS), "actor.mb_spec.max_tokens_per_mb=16384",
                       "actor.gradient_checkpointing=true", "--iterations", "2")
    assert code == 2 and "exceeds the micro-batch token budget" in err
    code, _, err = cli(capsys, "run", "--from-areal", str(DEFAULTS), "actor.mb_spec.max_tokens_per_mb=32768",
                       "actor.gradient_checkpointing=true", "--iterations", "2")
    assert code == 0, err


@pytest.mark.parametrize(("spec", "engine", "attn", "ffn"), [
    ("sglang:d4t2", "sglang", {"dp": 4, "tp": 2}, {"dp": 4, "tp": 2}),
    ("fsdp[actor]:d8", "fsdp", {"dp": 8}, {"dp": 8}),
    ("sglang[gen]:d4", "sglang", {"dp": 4}, {"dp": 4}),
    ("fsdp:d2 t2", "fsdp", {"dp": 2, "tp": 2}, {"dp": 2, "tp": 2}),
    (" megatron : d2 p2\tt2 ", "megatron", {"dp": 2, "pp": 2, "tp": 2}, {"dp": 2, "pp": 2, "tp": 2}),
    ("megatron:d2p2t2", "megatron", {"dp": 2, "pp": 2, "tp": 2}, {"dp": 2, "pp": 2, "tp": 2}),
    ("megatron:(attn:d1p4t2|ffn:d1p4e2)", "megatron", {"pp": 4, "tp": 2}, {"pp": 4, "ep": 2}),
    ("megatron:attn:d4|ffn:d4", "megatron", {"dp": 4}, {"dp": 4}),              # parentheses are optional
    ("megatron:( attn: d1 c2 | ffn: e2 )", "megatron", {"cp": 2}, {"ep": 2}),
])
def test_backend_specs_parse_as_areals_grammar(spec, engine, attn, ffn):
    name, dims = parse_backend(spec, "actor.backend", "x.yaml", ("sglang", "fsdp", "megatron"))
    assert name == engine
    for part, sizes in (("attn", attn), ("ffn", ffn)):
        assert {k: v for k, v in dims[part].items() if v != 1} == {k: v for k, v in sizes.items() if v != 1}


@pytest.mark.parametrize(("spec", "words"), [
    ("sglang", "not an AReaL backend"), ("torch:d4", "not an AReaL backend"),
    ("fsdp(actor):d4", "not an AReaL backend"),                      # a name goes in brackets: fsdp[actor]
    ("fsdp:d4x2", "not a parallel spec"), ("fsdp:d2p2", "FSDP supports"), ("fsdp:d0", "not a parallel spec"),
    ("sglang:d2e2", "not a parallel spec"), ("sglang:d2c2", "not a parallel spec"),   # INF_DIM_TYPE: d t p
    ("sglang:(attn:d2|ffn:d2)", "not a parallel spec"),                 # hybrid sections: training backends only
    ("megatron[actor]:(attn:d2|ffn:d2)", "not a parallel spec"),        # ... and without a name
    ("megatron:(attn:d2e2|ffn:d2)", "not a parallel spec"),             # attn takes c d t p, ffn d e t p
])
def test_a_bad_backend_spec_is_named(spec, words):
    with pytest.raises(RlsimError) as err:
        parse_backend(spec, "actor.backend", "x.yaml", ("fsdp", "megatron", "sglang"))
    assert words in err.value.message and err.value.field == "actor.backend"


@pytest.mark.parametrize(("spec", "words"), [
    ("megatron:(attn:d2p2t2|ffn:d2p2e4)", "expert world 16 (d2 x p2 x t1 x e4) is not the attention world 8"),
    ("megatron:(attn:d4t2|ffn:d2t2e4)", "expert world 16 (d2 x p1 x t2 x e4) is not the attention world 8"),
    ("archon:(attn:d2t2|ffn:d4e2)", "expert world 8 (d4 x p1 x t1 x e2) is not the attention world 4"),
    ("megatron:(attn:d2t2|ffn:e8)", "the attention world 4 does not divide over the ffn part's p1 x t1 x e8"),
    ("megatron:(attn:d2p2t2|ffn:p1e2)", "the ffn part's p1 is not the attention's p2")])
def test_a_hybrid_specs_ffn_part_spans_the_attentions_gpus(spec, words):
    """AReaL's hybrid_train_para (api/alloc_mode.py): the ffn part's p is the attention's (inherited when
    left out), its d derived from the attention world when left out (which p x t x e must divide), and the
    expert world d x p x t x e must be the attention's; else it raises. rlsim took such specs (the ffn d unread)."""
    with pytest.raises(RlsimError) as err:
        parse_backend(spec, "actor.backend", "x.yaml", ("fsdp", "megatron", "archon"))
    assert words in err.value.message and err.value.field == "actor.backend" and err.value.fix


def test_megatron_backend_and_expert_layout():
    r = import_config("areal", EXAMPLE, ["actor.backend=megatron:(attn:d2p2t2|ffn:d1p2e4)",
                                         "actor.path=Qwen/Qwen3-30B-A3B", "rollout.backend=sglang:d2t4"])
    layout = r.scenario["workload"]["train_layout"]
    assert (layout["tp"], layout["pp"], layout["ep"], layout["zero"], layout["recompute"]) == (2, 2, 4, 1, "full")
    assert "etp" in layout and layout["etp"] == 1
    assert r.scenario["schedule"]["rollout_devices"] == 8
    assert r.scenario["topology"] == {"preset": "dgx-h100", "nodes": 2}
    load_scenario(r.scenario)


MEGATRON_MOE = ["actor.path=Qwen/Qwen3-30B-A3B", "rollout.backend=sglang:d2t4"]


@pytest.mark.parametrize(("backend", "ep", "etp"), [
    ("megatron:d4t2e4", 4, 1),                         # a plain spec: expert_tensor_parallel_size 1, not tp 2
    ("megatron:d4t2", 1, 1),                           # ep 1 too: the experts whole on each rank, DP over tp x dp
    ("megatron:d8e8", 8, None),                        # tp 1: expert tp 1 is tp
    ("megatron:(attn:d4t2|ffn:d1t2e4)", 4, None),      # the ffn part's t = tp
    ("megatron:(attn:d4t2|ffn:d2e4)", 4, 1),           # an ffn part without t: 1
    ("megatron:(attn:d2t4|ffn:d2t2e2)", 2, 2)])        # any other t: Megatron-Core takes it
def test_the_megatron_engines_expert_tp_is_areals_not_megatrons_default(backend, ep, etp):
    """AReaL 1.0.4's megatron engine hands ParallelStrategy.expert_tensor_parallel_size to
    mpu.initialize_model_parallel (engine/megatron_engine.py): 1 for a plain spec (alloc_mode.py's dataclass
    default), the ffn part's t for a hybrid one (1 when it gives none). It never leaves it None, so
    Megatron-Core's default (etp = tp) never applies; rlsim took it for a plain spec (etp unset: tp)."""
    r = import_config("areal", EXAMPLE, [f"actor.backend={backend}", *MEGATRON_MOE])
    layout = r.scenario["workload"]["train_layout"]
    assert (layout.get("ep", 1), layout.get("etp")) == (ep, etp)
    assert r.mapped["actor.backend"].startswith("workload.train_layout")
    load_scenario(r.scenario)


@pytest.mark.parametrize("backend", ["megatron:d2t2", "megatron:(attn:d2t2|ffn:d4)"])
def test_the_megatron_engines_expert_tp_on_a_dense_model_is_left_out_and_the_backend_stays_mapped(backend):
    """A dense model has no experts to split: no etp (a scenario refuses it), and actor.backend, which
    gives the whole layout, stays mapped (it was listed ignored, 'a dense model', beside a hybrid spec)."""
    r = import_config("areal", EXAMPLE, [f"actor.backend={backend}"])
    assert "etp" not in r.scenario["workload"]["train_layout"]
    assert "actor.backend" in r.mapped and "actor.backend" not in r.ignored
    load_scenario(r.scenario)


def test_the_megatron_engines_expert_tp_beside_a_model_of_a_grid_is_said(capsys):
    """A model the import does not know (a sweep's --grid key: a key without a value): its experts are known
    only by e > 1; at e 1 a note says the expert tp rlsim leaves at tp, and how to give AReaL's."""
    r = import_config("areal", EXAMPLE, ["actor.backend=megatron:d2t2"], user_sets=("workload.model",))
    assert "etp" not in r.scenario["workload"]["train_layout"]
    assert any("workload.train_layout.etp=1" in note for note in r.notes)


@pytest.mark.parametrize(("model", "etp"), [("qwen3-30b-a3b", 1), ("qwen2.5-7b", None)])
def test_the_megatron_engines_expert_tp_follows_the_model_given_by_set(capsys, model, etp):
    """The --set model was not read: at e 1 AReaL's expert tp 1 was left out and an MoE model trained its
    experts over tp 2 (a note said to give etp). Its value is now read, as the config's own model is."""
    code = main(["run", "--from-areal", str(EXAMPLE), "actor.backend=megatron:d2t2", "--set", f"workload.model={model}",
                 "--print-scenario"])
    out, err = capsys.readouterr()
    assert code == 0, err
    workload = yaml.safe_load(out)["workload"]
    assert workload["model"] == model and workload["train_layout"].get("etp") == etp
    assert "workload.train_layout.etp=1" not in out
    r = import_config("areal", EXAMPLE, ["actor.backend=megatron:d2t2"], user_sets={"workload.model": model})
    assert r.scenario["workload"]["train_layout"].get("etp") == etp and "model" not in r.scenario["workload"]


@pytest.mark.parametrize(("backend", "ulysses"), [("fsdp:d2c2", True), ("archon:d2c2", True),
                                                  ("megatron:d2c2", None), ("fsdp:d4", None)])
def test_the_context_size_of_fsdp_and_archon_is_ulysses(backend, ulysses):
    """AReaL's FSDP engine makes sp_size its c size and patches attention with Ulysses
    (fsdp_utils/parallel.py, fsdp_engine.py); Archon slices with its ulysses module; Megatron's c is its own CP."""
    r = import_config("areal", EXAMPLE, [f"actor.backend={backend}"])
    layout = r.scenario["workload"]["train_layout"]
    assert layout.get("ulysses_sp") is ulysses and layout["cp"] == (2 if "c2" in backend else 1)
    load_scenario(r.scenario)


def test_colocation_runs_colocated_and_lists_what_it_does_not_read():
    r = import_config("areal", EXAMPLE, ["rollout.scheduling_strategy.type=colocation", "actor.backend=fsdp:d4"])
    s = r.scenario["schedule"]
    assert s["kind"] == "colocated" and s["switch"]["offload_weights"] is True
    assert "one batch per step" in r.unsupported["rollout.max_head_offpolicyness"]     # eta 2 given
    assert r.scenario["topology"] == {"preset": "dgx-h100", "nodes": 1, "devices_per_node": 4}
    load_scenario(r.scenario)
    with pytest.raises(RlsimError) as err:
        import_config("areal", EXAMPLE, ["rollout.scheduling_strategy.type=colocation", "rollout.backend=sglang:d2"])
    assert err.value.field == "rollout.backend"


def test_pipeline_parallel_servers_are_the_rollout_layouts_pp():
    """AReaL starts each server on t x p GPUs (vLLMConfig / SGLangConfig.build_args with pp_size)."""
    staged = import_config("areal", EXAMPLE, ["rollout.backend=sglang:d2p2t1"])
    assert staged.scenario["workload"]["rollout_layout"]["pp"] == 2
    flat = import_config("areal", EXAMPLE, ["rollout.backend=sglang:d4t1"])
    assert "pp" not in flat.scenario["workload"]["rollout_layout"]
    assert staged.scenario["schedule"]["rollout_devices"] == flat.scenario["schedule"]["rollout_devices"]
    load_scenario(staged.scenario)
    with pytest.raises(RlsimError) as err:   # AReaL's grammar: an inference backend takes d / t / p
        import_config("areal", EXAMPLE, ["rollout.backend=sglang:d2c2t1"])
    assert err.value.field == "rollout.backend" and "d/t/p sizes" in str(err.value)


def test_the_proximal_log_prob_pass_follows_should_compute_prox_logp():
    cases = {("true", "recompute", "false"): True, ("true", "loglinear", "false"): False,
             ("false", "recompute", "true"): True, ("false", "recompute", "false"): False}
    for (decoupled, method, recompute), expected in cases.items():
        r = import_config("areal", EXAMPLE, [f"actor.use_decoupled_loss={decoupled}",
                                             f"+actor.prox_logp_method={method}", f"actor.recompute_logprob={recompute}"])
        assert r.scenario["schedule"]["recompute_logprob"] is expected, (decoupled, method, recompute)


def test_the_reference_runs_with_a_kl_term_and_a_ref_section():
    assert import_config("areal", EXAMPLE, ["actor.kl_ctl=0.01"]).scenario["workload"]["reference"] is True
    assert import_config("areal", EXAMPLE).scenario["workload"]["reference"] is False


def test_a_reference_of_another_model_or_budget_is_unsupported_not_ignored():
    # "ignored" says no effect on step time: a 7B reference beside a 1.5B actor has one (a trial)
    r = import_config("areal", EXAMPLE, ["actor.kl_ctl=0.01", "ref.path=Qwen/Qwen2.5-7B-Instruct",
                                         "ref.mb_spec.max_tokens_per_mb=2048"])
    assert "ref.path" in r.unsupported and "ref.mb_spec.max_tokens_per_mb" in r.unsupported
    same = import_config("areal", EXAMPLE, ["actor.kl_ctl=0.01"])
    assert "ref.path" in same.ignored and "ref.mb_spec.max_tokens_per_mb" in same.ignored


def test_a_consumer_batch_below_the_batch_is_refused_against_the_config(capsys):
    code, _, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "rollout.consumer_batch_size=64", "--iterations", "1")
    assert code == 2 and "rollout.consumer_batch_size" in err and "never fills" in err
    assert "Traceback" not in err and "schedule.consumer_batch_size" not in err


def test_a_consumer_batch_left_out_is_refused_naming_the_config_key(capsys):
    """AReaL's default consumer_batch_size 1 lets one rollout start a version: the error names AReaL's
    key and its recipes' value, not rlsim's schedule field."""
    code, _, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "~rollout.consumer_batch_size", "--iterations", "1")
    assert code == 2 and "field 'rollout.consumer_batch_size'" in err and "AReaL default" in err
    assert "rollout.consumer_batch_size=${train_dataset.batch_size}" in err and "schedule." not in err
    code, _, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "~rollout.consumer_batch_size",
                       "--set", "schedule.consumer_batch_size=256", "--iterations", "1")
    assert code == 0, err


def test_a_vllm_rollout_reads_the_vllm_section():
    r = import_config("areal", EXAMPLE, ["rollout.backend=vllm:d2t2", "+vllm.enforce_eager=true",
                                         "+vllm.gpu_memory_utilization=0.7"])
    w = r.scenario["workload"]
    # AReaL runs vLLM's OpenAI server (engine/vllm_ext/areal_vllm_server.py): its usage context's defaults
    assert w["engine"] == "vllm-v1-server" and w["rollout_layout"]["tp"] == 2
    assert any("OpenAI server" in note and "vllm-v1-server" in note for note in r.notes)
    assert w["inference"]["enforce_eager"] is True and w["rollout_layout"]["gpu_memory_utilization"] == 0.7
    assert "sglang" not in " ".join(r.mapped)                 # the SGLang section is the other engine's
    assert "do not apply" in r.ignored["sglang.mem_fraction_static"]
    load_scenario(r.scenario)


def test_ignore_eos_is_unsupported_not_a_sampling_setting():
    """AReaL hands gconfig.ignore_eos to both engines (sglang_remote.py, vllm_remote.py): every response
    runs to max_new_tokens, which rlsim's length law does not say."""
    assert "max_new_tokens" in import_config("areal", EXAMPLE, ["+gconfig.ignore_eos=true"]).unsupported[
        "gconfig.ignore_eos"]
    assert "gconfig.ignore_eos" in import_config("areal", EXAMPLE, ["+gconfig.ignore_eos=false"]).ignored


def test_n_mbs_beside_a_token_budget_is_a_minimum_count_rlsim_does_not_take():
    """AReaL's allocate_balanced_mbs takes n_mbs as min_groups beside max_tokens_per_mb (utils/data.py)."""
    budget = ["actor.mb_spec.max_tokens_per_mb=32768"]
    r = import_config("areal", EXAMPLE, [*budget, "actor.mb_spec.n_mbs=4"])
    assert "min_groups" in r.unsupported["actor.mb_spec.n_mbs"] and "actor.mb_spec.n_mbs" not in r.mapped
    assert "token budget" in import_config("areal", EXAMPLE, [*budget, "actor.mb_spec.n_mbs=1"]).ignored[
        "actor.mb_spec.n_mbs"]
    samples = import_config("areal", EXAMPLE, ["~actor.mb_spec.max_tokens_per_mb", "actor.mb_spec.n_mbs=4"])
    assert samples.mapped["actor.mb_spec.n_mbs"].startswith("workload.train_layout.micro_batch")


def test_unknown_keys_are_an_error_unless_added():
    with pytest.raises(RlsimError):
        import_config("areal", EXAMPLE, ["actor.ppo_n_minibatchs=2"])
    r = import_config("areal", EXAMPLE, ["+actor.brand_new_knob=1"])
    assert "actor.brand_new_knob" in r.ignored or "actor.brand_new_knob" in r.unknown


def test_every_mapped_rule_names_an_rlsim_section():
    for key, rule in areal.RULES.items():
        assert rule.reason or rule.target, key
        if rule.status == "mapped":
            assert rule.target.split(".")[0] in ("workload", "schedule", "topology"), key


def test_the_guide_lists_every_table_entry():
    guide = (ROOT / "docs" / "guides" / "frameworks.md").read_text()
    missing = [key for key in areal.RULES if f"`{key}`" not in guide]
    assert not missing, f"docs/guides/frameworks.md lacks {missing} (regenerate its tables from RULES)"


def test_the_console_prints_areals_timers_under_its_names(capsys):
    code, out, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "--iterations", "3")
    assert code == 0, err
    text = " ".join(out.split())
    for name in ("rollout", "recompute_logp", "ref_logp", "train_step", "update_weights"):
        assert f"areal timeperf/{name}" in text


def test_a_critic_section_runs_ppo_with_areals_critic_timers(capsys):
    """rl_trainer builds a critic engine from a critic section and runs compute_values and its
    ppo_update each step: workload ppo, the critic's budget and offload, AReaL's critic timers."""
    overrides = ["+critic.path=Qwen/Qwen2.5-0.5B-Instruct", "+critic.backend=fsdp:d4",
                 "+critic.mb_spec.max_tokens_per_mb=8192", "+critic.offload=true",
                 "+critic.scheduling_strategy.type=colocation", "+critic.ppo_n_minibatches=1"]
    r = import_config("areal", EXAMPLE, overrides)
    w = r.scenario["workload"]
    assert w["algorithm"] == "ppo" and w["critic_model"] == "qwen2.5-0.5b"
    assert w["critic_batching"] == {"max_tokens_per_micro_batch": 8192, "forward_max_tokens_per_micro_batch": 8192}
    assert w["critic_offload"] == {"params": True, "optimizer": True}
    assert not r.unsupported and "actor's layout" in r.ignored["critic.backend"]
    code, out, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), *overrides, "--iterations", "2", "--json")
    assert code == 0, err
    timing = json.loads(out)["areal"]["timing_s"]
    assert timing["critic_values"] > 0 and timing["critic_train_step"] > 0
    r = import_config("areal", EXAMPLE, ["+critic.path=Qwen/Qwen2.5-0.5B-Instruct",
                                         "+critic.scheduling_strategy.type=separation"])
    assert "GPUs of its own" in r.unsupported["critic.scheduling_strategy.type"]


def test_the_fsdp_engine_runs_transformers_code_with_sequence_parallel_norms_under_tp():
    """AReaL's FSDP engine trains transformers' model code under its own stack (areal-fsdp: ZeRO 3, TP,
    Ulysses, no pipeline) and its TP plan shards the norms' sequence (SequenceParallel(),
    areal/engine/fsdp_utils/parallel.py); Megatron keeps rlsim's Megatron-Core stack."""
    tp = import_config("areal", EXAMPLE, ["actor.backend=fsdp:d2t2", "rollout.backend=sglang:d4"]).scenario["workload"]
    assert tp["train_software"] == "areal-fsdp" and tp["train_layout"]["sequence_parallel"] is True
    plain = import_config("areal", EXAMPLE).scenario["workload"]
    assert "sequence_parallel" not in plain["train_layout"]
    megatron = import_config("areal", EXAMPLE, ["actor.backend=megatron:d2t2", "rollout.backend=sglang:d4"])
    assert "train_software" not in megatron.scenario["workload"]


def test_the_archon_engine_runs_its_torchtitan_code_under_its_own_stack():
    """AReaL 1.0.4's archon engine trains torchtitan-style model code written op for op as transformers'
    (experimental/models/archon/qwen2/model/model.py: the hf-transformers constants) under FSDP2 (ZeRO 3),
    TP with SequenceParallel norms, Ulysses cp and pipeline stages (areal-archon); its log-probs are the
    fsdp engine's (utils/functional/vocab_parallel.py gather_logprobs: compiled without TP)."""
    w = import_config("areal", EXAMPLE, ["actor.backend=archon:d4"]).scenario["workload"]
    assert w["train_software"] == "areal-archon"
    assert w["train_params"]["compute"]["loss_traffic_bytes_per_logit"] == pytest.approx(46.0)
    r = import_config("areal", EXAMPLE, ["actor.backend=archon:d1t2p2", "rollout.backend=sglang:d4"])
    layout = r.scenario["workload"]["train_layout"]
    assert (layout["tp"], layout["pp"], layout["zero"], layout["sequence_parallel"]) == (2, 2, 3, True)
    assert "loss_traffic_bytes_per_logit" not in r.scenario["workload"]["train_params"].get("compute", {})
    load_scenario(r.scenario)


@pytest.mark.parametrize(("ac_mode", "recompute", "status"), [
    (None, "full", None), ("full", "full", "mapped"), ("none", "none", "mapped"),
    ("selective", "full", "unsupported"), ("memory_budget", "full", "unsupported")])
def test_archons_gradient_checkpointing_by_its_ac_mode(ac_mode, recompute, status):
    """archon_utils.build_ac_config: gradient_checkpointing with actor.archon.ac_mode (default selective,
    torchtitan's op-level SAC, not modelled: priced as full recompute, said), none: no checkpointing."""
    given = [] if ac_mode is None else [f"+actor.archon.ac_mode={ac_mode}"]
    r = import_config("areal", EXAMPLE, ["actor.backend=archon:d4", "actor.gradient_checkpointing=true", *given])
    assert r.scenario["workload"]["train_layout"]["recompute"] == recompute
    if status is None:
        assert any("op-level selective" in note for note in r.notes)
    else:
        assert "actor.archon.ac_mode" in getattr(r, status)


def test_archon_offloads_by_its_own_key_not_the_fsdp_engines():
    """archon_engine.py reads actor.archon.offload_params (CPUOffloadPolicy), never actor.fsdp.*."""
    on = import_config("areal", EXAMPLE, ["actor.backend=archon:d4", "+actor.archon.offload_params=true"])
    assert on.scenario["workload"]["train_params"]["offload"] == {"fsdp_cpu_offload": True}
    off = import_config("areal", EXAMPLE, ["actor.backend=archon:d4", "+actor.fsdp.offload_params=true"])
    assert "offload" not in off.scenario["workload"]["train_params"]
    assert "archon" in off.ignored["actor.fsdp.offload_params"]


MOE = ["actor.path=Qwen/Qwen3-30B-A3B", "rollout.backend=sglang:d4"]


@pytest.mark.parametrize(("backend", "ep", "etp"), [
    ("archon:d4e2", 2, None),                        # tp 1: expert tp 1 is tp
    ("archon:d2t2e2", 2, 1),                         # a plain spec: expert_tensor_parallel_size 1, EP borrows TP
    ("archon:(attn:d2t2|ffn:d2e2)", 2, 1),           # an ffn part without t: the same
    ("archon:(attn:d2t2|ffn:d1t2e2)", 2, None),      # ffn t = tp: ExpertTensorParallel, experts split by tp too
    ("archon:d2t2", 1, None)])                       # ep 1: the experts TP-split (TensorParallel)
def test_archons_expert_parallelism_folds_as_its_parallel_dims(backend, ep, etp):
    """archon_engine.py builds ArchonParallelDims with ep = the e size and etp = expert_tensor_parallel_size
    (alloc_mode.py: 1 for a plain spec, the ffn part's t for a hybrid one); qwen3 infra/parallelize.py
    apply_moe_ep_tp: etp 1 shards experts over ep alone (the TP ranks borrowed by EP), etp = tp over ep x tp,
    ep 1 over tp. rlsim's MoE folding (train_layout.etp: None is tp) says the same. The e size was dropped."""
    r = import_config("areal", EXAMPLE, [f"actor.backend={backend}", *MOE])
    layout = r.scenario["workload"]["train_layout"]
    assert (layout.get("ep", 1), layout.get("etp")) == (ep, etp)
    load_scenario(r.scenario)


@pytest.mark.parametrize(("backend", "words"), [
    ("archon:(attn:d2t4|ffn:d2t2e2)", "expert tensor parallel size 2 is neither 1 nor the tp 4"),
    ("archon:d1t2c2e2", "ep 2 is not a multiple of cp x tp = 4"),           # etp 1: EP borrows cp x tp
    ("archon:(attn:d1c4|ffn:d2e2)", "ep 2 is not a multiple of cp = 4")])   # etp = tp: EP borrows cp
def test_archons_expert_layout_constraints_are_refused_by_field(backend, words):
    """ArchonParallelDims.__post_init__ raises on these: refused naming actor.backend."""
    with pytest.raises(RlsimError) as err:
        import_config("areal", EXAMPLE, [f"actor.backend={backend}", *MOE])
    assert words in err.value.message and err.value.field == "actor.backend" and err.value.fix


def test_archons_expert_parallelism_on_a_dense_model_is_refused_as_megatrons(capsys):
    code, _, err = cli(capsys, "run", "--from-areal", str(EXAMPLE), "actor.backend=archon:d2e2", "--iterations", "1")
    assert code == 2 and "dense model" in err and "actor.backend" in err


@pytest.mark.parametrize(("given", "vpp", "status"), [
    ([], 2, None),                                                          # Interleaved1F1B: 2 stages a rank
    (["+actor.archon.pp_schedule=1F1B"], 1, "mapped"),
    (["+actor.archon.pp_schedule=Interleaved1F1B"], 2, "mapped"),
    (["+actor.archon.pp_schedule=InterleavedZeroBubble"], 2, "unsupported"),
    (["+actor.archon.pp_schedule=ZBVZeroBubble"], 2, "unsupported"),
    (["+actor.archon.pp_layers_per_stage=4"], 4, "mapped"),     # ceil((28 + 1 + 1) / 4) = 8 stages over p 2
    (["+actor.archon.pp_layers_per_stage=15", "+actor.archon.pp_schedule=1F1B"], 1, "mapped")])   # 2 over 2
def test_archons_pipeline_runs_its_schedules_stages_per_rank(given, vpp, status):
    """models/archon/pipeline_parallel.py pipeline_llm: 1 stage a rank for 1F1B, 2 for the interleaved and
    zero-bubble schedules (AReaL's default Interleaved1F1B), or ceil((layers + first_less + last_less) /
    pp_layers_per_stage) / p; the zero-bubble ones priced as interleaved 1F1B at their stages and said."""
    r = import_config("areal", EXAMPLE, ["actor.backend=archon:d1p2", *given])
    assert r.scenario["workload"]["train_layout"]["vpp"] == vpp
    if status is not None:
        assert "actor.archon.pp_schedule" in getattr(r, status) or "actor.archon.pp_layers_per_stage" in r.mapped
    load_scenario(r.scenario)


@pytest.mark.parametrize(("given", "words"), [
    (["+actor.archon.pp_layers_per_stage=10"], "3 virtual stages do not divide over p 2"),
    (["+actor.archon.pp_layers_per_stage=15"], "Interleaved1F1B runs 2 or more stages a rank"),
    (["+actor.archon.pp_layers_per_stage=4", "+actor.archon.pp_schedule=1F1B"], "1F1B runs 1 stage a rank"),
    (["+actor.archon.pp_layers_per_stage=5", "+actor.archon.pp_schedule=ZBVZeroBubble"],
     "ZBVZeroBubble runs 2 stages a rank"),
    (["+actor.archon.pp_schedule=GPipe"], "not one of AReaL's choices")])
def test_archons_pipeline_stages_refused_as_pipeline_llm_refuses_them(given, words):
    with pytest.raises(RlsimError) as err:
        import_config("areal", EXAMPLE, ["actor.backend=archon:d1p2", *given])
    assert words in err.value.message and err.value.field.startswith("actor.archon.pp_") and err.value.fix


def test_archons_pipeline_keys_without_a_pipeline_are_ignored():
    r = import_config("areal", EXAMPLE, ["actor.backend=archon:d4", "+actor.archon.pp_schedule=1F1B"])
    assert "vpp" not in r.scenario["workload"]["train_layout"] and "no pipeline" in r.ignored["actor.archon.pp_schedule"]


@pytest.mark.parametrize(("backend", "policy", "reshard"), [
    ("archon:d1p2", None, False), ("archon:d4", None, True), ("archon:d4", "never", False),
    ("archon:d1p2", "always", True), ("archon:d1p2", "default", False)])
def test_archons_reshard_policy_keeps_a_pipelines_layers_gathered(backend, policy, reshard):
    """qwen2/qwen3 infra/parallelize.py apply_fsdp: reshard_after_forward_policy default reshards after the
    forward unless pipelines are on (each micro-batch's all-gather avoided), always / never as said ->
    train_params.memory.zero3_reshard_after_forward: default is the areal-archon stack's own value
    ("unless_pipelined", read at the layout's pp, as `rlsim plan` and layout: auto read it: nothing
    written), always / never written over it."""
    given = [] if policy is None else [f"+actor.archon.reshard_after_forward_policy={policy}"]
    r = import_config("areal", EXAMPLE, [f"actor.backend={backend}", *given])
    memory = r.scenario["workload"].get("train_params", {}).get("memory", {})
    assert memory.get("zero3_reshard_after_forward") is {"always": True, "never": False}.get(policy)
    if policy is not None:
        assert "actor.archon.reshard_after_forward_policy" in r.mapped
    workload = load_scenario(r.scenario).workload
    assert workload.train_params.memory.reshards_after_forward(workload.train_layout["pp"]) is reshard


def test_archons_pipeline_splits_into_at_least_a_micro_batch_a_stage():
    """archon_engine.py _prepare_mb_list: under pipelines at least p x stages-a-rank micro-batches, a
    multiple of p (n_mbs_divisor), however few mb_spec.n_mbs asks for."""
    def micro_batch(*given: str) -> int:
        r = import_config("areal", EXAMPLE, ["actor.backend=archon:d1p2", "actor.mb_spec.max_tokens_per_mb=null",
                                             *given])
        return r.scenario["workload"]["train_layout"]["micro_batch"], r.scenario["schedule"]["forward_micro_batch"]
    samples = 256 * 4   # a mini-batch's samples on the one data-parallel rank
    assert micro_batch() == (samples // 4, samples // 4)                              # p 2 x 2 stages
    assert micro_batch("+actor.archon.pp_schedule=1F1B") == (samples // 2, samples // 2)
    assert micro_batch("actor.mb_spec.n_mbs=5") == (-(-samples // 6), -(-samples // 6))   # 5 up to a multiple of 2
    r = import_config("areal", EXAMPLE, ["actor.backend=archon:d1p2"])
    assert any("at least 4 micro-batches" in note for note in r.notes)   # a token budget: said


def test_the_fsdp_engine_refuses_a_zero_stage_it_does_not_shard_at(capsys):
    """AReaL 1.0.4's FSDP engine fully_shards every layer with reshard_after_forward=True (fsdp_utils/parallel.py):
    areal-fsdp runs ZeRO 3 only, a layout at ZeRO 2 refused naming the field."""
    code = main(["run", "--from-areal", str(EXAMPLE), "--set", "workload.train_layout.zero=2", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "workload.train_layout.zero" in err and "areal-fsdp runs zero 3 only" in err


TEACHER = ["+teacher.engine_type=rollout", "+teacher.path=Qwen/Qwen2.5-7B-Instruct", "+teacher.rollout.backend=sglang:d4t2",
           "+teacher.rl_loss_weight=1.0"]


def test_a_teacher_on_inference_servers_scores_the_trainers_batch_one_request_at_a_time():
    """AReaL's on-policy distillation: the teacher's servers on GPUs of their own (the topology holds
    them), the rollout's engine settings, handed the trainer's batch (handover step), each server
    answering one blocking request at a time (one_at_a_time)."""
    r = import_config("areal", EXAMPLE, TEACHER)
    spec = r.scenario["workload"]["distillation"]
    assert spec == {"teacher": "qwen2.5-7b", "devices": 8, "layout": {"tp": 2, "gpu_memory_utilization": 0.8},
                    "handover": "step", "one_at_a_time": True}
    assert r.scenario["topology"]["nodes"] == 2                   # 4 rollout + 4 actor GPUs, 8 for the teacher
    assert not any(key.startswith("teacher") for key in r.unsupported)
    assert {"teacher.engine_type", "teacher.path", "teacher.rollout.backend"} <= set(r.mapped)
    load_scenario(r.scenario)
    assert "distillation" not in import_config("areal", EXAMPLE).scenario["workload"]
    assert "teacher.offload" in import_config("areal", EXAMPLE, [*TEACHER, "+teacher.offload=true"]).unsupported
    own = import_config("areal", EXAMPLE, [key for key in TEACHER if "teacher.path" not in key])
    assert own.scenario["workload"]["distillation"]["teacher"] == own.scenario["workload"]["model"]   # the rollout's


@pytest.mark.parametrize(("extra", "field"), [
    (["+teacher.engine_type=train", "+teacher.path=Qwen/Qwen2.5-7B-Instruct"], "teacher.engine_type"),
    (["+teacher.path=Qwen/Qwen2.5-7B-Instruct", "+teacher.rollout.backend=sglang4"], "teacher.rollout.backend"),
])
def test_a_teacher_that_cannot_be_served_is_named(extra, field):
    with pytest.raises(RlsimError) as err:
        import_config("areal", EXAMPLE, extra)
    assert err.value.field == field


def test_the_fsdp_engine_takes_its_log_probs_with_a_compiled_log_softmax():
    """AReaL's FSDP engine without TP: the torch.compile'd log-softmax (the fp32 cast, the temperature and
    the entropy fused in) at the bytes a logit its time on an H100 came to (46, a third forward);
    with TP its vocab-parallel log-softmax and the megatron engine keep the stack's Megatron count."""
    def workload(*over):
        return import_config("areal", EXAMPLE, list(over)).scenario["workload"]

    assert workload()["train_params"]["compute"] == {"loss_traffic_bytes_per_logit": 46.0,
                                                     "loss_forward_share": pytest.approx(1 / 3)}
    assert "compute" not in workload("actor.backend=fsdp:d2t2", "rollout.backend=sglang:d4").get("train_params", {})
    assert "train_params" not in workload("actor.backend=megatron:d2p2", "rollout.backend=sglang:d4")


def test_a_legacy_allocation_mode_is_read_as_the_two_backends():
    """AReaL 0.3 - 0.5 configs give `allocation_mode: sglang.d4p1t1+d4p1t1` and a bare actor backend;
    the import failed on the absent rollout.backend (a trial)."""
    legacy = ["~rollout.backend", "actor.backend=fsdp", "+allocation_mode=sglang.d2p1t2+d4p1t1"]
    modern = import_config("areal", EXAMPLE, ["rollout.backend=sglang:d2t2", "actor.backend=fsdp:d4"])
    r = import_config("areal", EXAMPLE, legacy)
    assert "allocation_mode" in r.mapped
    assert r.scenario["workload"]["rollout_layout"] == modern.scenario["workload"]["rollout_layout"]
    assert r.scenario["workload"]["train_layout"] == modern.scenario["workload"]["train_layout"]
    assert r.scenario["topology"] == modern.scenario["topology"]
    with pytest.raises(RlsimError) as info:
        import_config("areal", EXAMPLE, ["~rollout.backend", "actor.backend=fsdp", "+allocation_mode=sglang.d4+d4+d4"])
    assert info.value.field == "allocation_mode"


def test_the_fsdp_engine_keeps_an_fp32_master_shard_and_archon_its_dtype():
    """AReaL's FSDP engine stores parameters in optimizer_dtype (fp32): 4 + 4 bytes and the optimizer's
    state by optimizer.type; archon keeps bf16 parameters, gradients and AdamW state; megatron rlsim's 18."""
    def memory(*overrides):
        return import_config("areal", EXAMPLE, list(overrides)).scenario["workload"].get("train_params", {}).get(
            "memory")
    assert memory() == {"resident_weight_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0,
                        "optimizer_bytes_per_param": 8.0}
    assert memory("+actor.optimizer.type=adam_bf16")["optimizer_bytes_per_param"] == 6.0
    assert memory("+actor.optimizer.type=sgd")["optimizer_bytes_per_param"] == 0.0
    assert memory("actor.backend=archon:d4") == {"grad_bytes_per_param": 2.0, "optimizer_bytes_per_param": 4.0}
    assert memory("actor.backend=megatron:d4") is None
    with pytest.raises(RlsimError, match="not one of AReaL's archon") as err:
        memory("actor.backend=archon:d4", "+actor.optimizer.type=adam_bf16")
    assert err.value.field == "actor.optimizer.type"


def test_the_megatron_engine_hands_optimizer_type_to_megatron_core():
    """AReaL 1.0.4 megatron_engine.py: optimizer.type goes to Megatron-Core's OptimizerConfig. adam: rlsim's
    Megatron defaults; sgd: an fp32 momentum (sgd_momentum 0.9) beside the 4-byte main parameters, 8 B a
    parameter, its step 2 (bf16 weights written) + 4 (main gradient read) + 2 x 8 = 22 B; adam_bf16 turns on
    the precision-aware optimizer with bf16 moments: listed unsupported, the state left at rlsim's fp32 one."""
    def imported(*overrides):
        return import_config("areal", EXAMPLE, ["actor.backend=megatron:d4", *overrides])
    assert "train_params" not in imported().scenario["workload"]
    sgd = imported("+actor.optimizer.type=sgd").scenario["workload"]["train_params"]
    assert sgd["memory"] == {"optimizer_bytes_per_param": 8.0}
    assert sgd["comm"] == {"optimizer_traffic_bytes_per_param": 2 + 4 + 2 * 8}
    bf16 = imported("+actor.optimizer.type=adam_bf16")
    assert "precision-aware" in bf16.unsupported["actor.optimizer.type"]
    assert bf16.scenario == imported().scenario
    with pytest.raises(RlsimError, match="megatron engine") as err:
        imported("+actor.optimizer.type=lion")
    assert err.value.field == "actor.optimizer.type"


def test_sglangs_torchao_quantization_is_listed_unsupported_not_read_past():
    """AReaL hands sglang.torchao_config to the SGLang server, which quantizes the served weights with it
    (int8wo, fp8wo, ...): not the bf16 engine rlsim prices, so listed unsupported; AReaL's default '' is
    ignored."""
    assert "sglang.torchao_config" in import_config("areal", DEFAULTS).ignored
    quantized = import_config("areal", EXAMPLE, ["+sglang.torchao_config=int8wo"])
    assert "weight_dtype" in quantized.unsupported["sglang.torchao_config"]


def test_pad_to_maximum_pads_the_packed_micro_batches_not_the_samples():
    """AReaL's engines always pack a micro-batch (fsdp_engine.py _prepare_mb_list: pack_tensor_dict);
    actor.pad_to_maximum tops each packed micro-batch up to mb_spec.max_tokens_per_mb with one padding
    sequence (utils/data.py pad_mb_list), which rlsim does not model: the rows stay packed (they were
    read as padded samples, each micro-batch at its longest) and the key is listed unsupported."""
    padded = import_config("areal", EXAMPLE, ["actor.pad_to_maximum=true"])
    assert padded.scenario["schedule"]["distqueue"] == {"packed": True}
    assert "one padding sequence" in padded.unsupported["actor.pad_to_maximum"]
    assert padded.scenario == import_config("areal", EXAMPLE).scenario


def test_the_step_traffic_follows_each_engines_master_copy():
    """The step updates its master shard in place (verl_optimizer.fsdp_step_traffic: the shard read and
    written, its gradient read, each state read and written): FSDP's fp32 shard with AdamW 8 + 4 + 16 = 28,
    sgd 12; archon's bf16 parameters with bf16 AdamW 4 + 2 + 8 = 14, sgd 6; megatron rlsim's default 30."""
    def traffic(*overrides):
        train = import_config("areal", EXAMPLE, list(overrides)).scenario["workload"].get("train_params", {})
        return train.get("comm", {}).get("optimizer_traffic_bytes_per_param")
    assert (traffic(), traffic("+actor.optimizer.type=sgd")) == (28.0, 12.0)
    assert (traffic("actor.backend=archon:d4"), traffic("actor.backend=archon:d4", "+actor.optimizer.type=sgd")) == (
        14.0, 6.0)
    assert traffic("actor.backend=megatron:d4") is None


MEGATRON_DENSE = ["actor.backend=megatron:d2p2t2", "rollout.backend=sglang:d2t4"]
R = "actor.megatron"


def test_megatrons_recompute_method_and_layers_map_as_verls_overrides_do():
    """AReaL 1.0.4 hands actor.megatron.recompute_* to Megatron-Core's TransformerConfig with
    gradient_checkpointing (megatron_engine.py: mbridge's set_extra_args), defaults full, uniform, 1: read as
    verl's override_transformer_config is (frameworks/megatron_recompute.py)."""
    plain = import_config("areal", EXAMPLE, MEGATRON_DENSE)
    layout = plain.scenario["workload"]["train_layout"]
    assert layout["recompute"] == "full" and {"recompute_method", "recompute_num_layers"}.isdisjoint(layout)
    block = import_config("areal", EXAMPLE, [*MEGATRON_DENSE, f"{R}.recompute_method=block",
                                             f"{R}.recompute_num_layers=3"])
    layout = block.scenario["workload"]["train_layout"]
    assert (layout["recompute"], layout["recompute_method"], layout["recompute_num_layers"]) == ("full", "block", 3)
    assert {f"{R}.recompute_method", f"{R}.recompute_num_layers"} <= set(block.mapped)
    assert f"{R}.recompute_method" not in block.unsupported
    uniform = import_config("areal", EXAMPLE, [*MEGATRON_DENSE, f"{R}.recompute_num_layers=2"])
    assert uniform.scenario["workload"]["train_layout"]["recompute_num_layers"] == 2
    load_scenario(block.scenario)
    selective = import_config("areal", EXAMPLE, [*MEGATRON_DENSE, f"{R}.recompute_granularity=selective",
                                                 f"{R}.recompute_num_layers=null"])
    assert selective.scenario["workload"]["train_layout"]["recompute"] == "selective"
    off = import_config("areal", EXAMPLE, [*MEGATRON_DENSE, "actor.gradient_checkpointing=false",
                                           f"{R}.recompute_method=block", f"{R}.recompute_num_layers=3"])
    assert off.scenario["workload"]["train_layout"]["recompute"] == "none"
    assert "gradient_checkpointing" in off.ignored[f"{R}.recompute_method"]
    assert "gradient_checkpointing" in off.ignored[f"{R}.recompute_num_layers"]


@pytest.mark.parametrize(("over", "field", "words"), [
    ([f"{R}.recompute_granularity=selective"], "recompute_num_layers", "1, areal's default with recompute_granularity"),
    ([f"{R}.recompute_method=null"], "recompute_method", "full needs uniform or block"),
    ([f"{R}.recompute_num_layers=null"], "recompute_num_layers", "needs a number of layers"),
    ([f"{R}.recompute_method=chunked"], "recompute_method", "refuses it"),
])
def test_megatrons_recompute_keys_are_refused_as_megatrons_config_refuses_them(over, field, words):
    with pytest.raises(RlsimError) as err:
        import_config("areal", EXAMPLE, [*MEGATRON_DENSE, *over])
    assert err.value.field == f"{R}.{field}" and words in err.value.message and err.value.fix
