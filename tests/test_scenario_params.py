"""Trainer / engine constants and training stacks reachable from YAML and --set (issue 10 item 6),
and validation errors with full dotted paths, every error listed (item 7)."""
import json

import pytest

import simulator
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.params import DP_OVERLAP_FRACTION, MEGATRON_2021, TRAIN_SOFTWARE, TrainParams
from simulator.planner.hetero import HeteroParams
from simulator.scenario import load_scenario

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16"]
RUN = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1", "--schedule", "colocated"]
PLAN = ["plan", "--topology", "dgx-h100", "--model", "qwen2.5-7b", "--global-batch", "64", "--seq-len", "2048",
        "--json", "--top", "1"]


def _sets(items):
    return [a for item in items for a in ("--set", item)]


def _run(*extra):
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated", iterations=1,
                       overrides=[*SMALL, *extra])
    return simulator.simulate(sc).summary


def _json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_default_stack_is_todays_defaults():
    assert TRAIN_SOFTWARE["megatron-core"].params == TrainParams()
    sc = load_scenario(workload="grpo-qwen2.5-7b")
    assert sc.workload.train_software == "megatron-core"
    assert sc.workload.train_params == TrainParams()
    assert TrainParams().comm.dp_overlap_fraction == DP_OVERLAP_FRACTION
    assert HeteroParams().dp_overlap_fraction is None   # None: the training model's one default


def test_stack_values_under_user_overrides():
    sc = load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.train_software=megatron-2021",
                                                              "workload.train_params.compute.flash_attention=true"])
    p = sc.workload.train_params
    assert p.compute.flash_attention and p.comm.pp_blocking_send == MEGATRON_2021.params.comm.pp_blocking_send
    assert sc.workload.train_layout["sequence_parallel"] is False
    assert load_scenario(sc).workload == sc.workload   # the snapshot re-loads to the same values


def test_inference_and_train_params_change_the_run_through_the_api():
    base = _run()
    slow_engine = _run("workload.inference.step_overhead_s=0.02")
    no_flash = _run("workload.train_params.compute.flash_attention=false")
    assert slow_engine["stage_time_s"]["generate"] > base["stage_time_s"]["generate"]
    assert no_flash["stage_time_s"]["train_actor"] > base["stage_time_s"]["train_actor"]


def test_run_and_sweep_honour_the_constants(capsys):
    base = _json(capsys, ["run", *RUN, *_sets(SMALL), "--json"])
    slow = _json(capsys, ["run", *RUN, *_sets(SMALL), "--set", "workload.inference.step_overhead_s=0.02", "--json"])
    assert slow["step_time_s"] > base["step_time_s"]
    rows = _json(capsys, ["sweep", *RUN, *_sets(SMALL), "--json",
                          "--grid", "workload.train_params.compute.flash_attention=true,false"])
    by = {r["grid"]["workload.train_params.compute.flash_attention"]: r for r in rows}
    assert by[False]["stage_time_s"]["train_actor"] > by[True]["stage_time_s"]["train_actor"]
    assert by[True]["step_time_s"] == base["step_time_s"]


def test_plan_honours_train_params_software_and_inference(capsys):
    base = _json(capsys, PLAN)[0]
    no_flash = _json(capsys, [*PLAN, "--set", "workload.train_params.compute.flash_attention=false"])[0]
    old = _json(capsys, [*PLAN, "--set", "workload.train_software=megatron-2021"])[0]
    assert no_flash["step_time_s"] > base["step_time_s"]
    assert old["layout"]["recompute"] == "full" and old["layout"]["zero"] == 0
    roll = ["plan", "--topology", "dgx-h100", "--model", "qwen2.5-7b", "--stage", "rollout", "--json", "--top", "1"]
    fast = _json(capsys, roll)[0]
    slow = _json(capsys, [*roll, "--set", "workload.inference.step_overhead_s=0.02"])[0]
    assert slow["step_time_s"] > fast["step_time_s"]


def test_plan_searches_sequence_parallel(capsys):
    rows = _json(capsys, [*PLAN, "--set", "planner.space.sequence_parallel=[true,false]", "--top", "3"])
    assert all("sequence_parallel" in r["layout"] for r in rows)


@pytest.mark.parametrize("key, named", [("train_params.compute.flash_attention=false", "workload.train_params"),
                                        ("foo=2", "'foo'"),
                                        ("workload.train_params.compute.flash_atention=false",
                                         "workload.train_params.compute.flash_atention"),
                                        ("workload.inference.step_overhed_s=1", "workload.inference.step_overhed_s"),
                                        ("planner.space.foo=1", "planner.space.foo")])
def test_unknown_set_key_exits_2_in_plan(capsys, key, named):
    assert main([*PLAN, "--set", key]) == 2
    err = capsys.readouterr().err
    assert named in err and "fix" in err


@pytest.mark.parametrize("command", ["run", "compare"])
@pytest.mark.parametrize("key", ["workload.inference.nope=1", "planner.space.foo=1", "train_params.x=1"])
def test_unknown_set_key_exits_2_in_run_and_compare(capsys, command, key):
    given = RUN if command == "run" else [*RUN[:-2], "--schedules", "colocated"]   # options are given whole
    assert main([command, *given, "--set", key]) == 2
    err = capsys.readouterr().err
    assert key.split("=")[0].split(".")[-1] in err and "fix" in err


@pytest.mark.parametrize("key, meant", [
    ("workload.train_params.comm.tp_userbufers=true", "tp_userbuffers"),     # a nested params model
    ("workload.inference.custom_allreduce=false", "custom_all_reduce"),
    ("schedule.stalenes=2", "staleness"),                                     # the schedule registry
    ("schedule.switch.sleep_wake=3", "sleep_wake_s"),                         # inside a schedule class
    ("limits.max_iteration=3", "max_iterations"),
])
def test_a_mistyped_key_names_the_field_it_is_close_to(key, meant):
    with pytest.raises(RlsimError, match=f"did you mean '{meant}'") as exc:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[key])
    assert exc.value.field == key.split("=")[0]


def test_a_key_close_to_no_field_gets_no_suggestion():
    with pytest.raises(RlsimError) as exc:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.totally_unrelated=1"])
    assert "did you mean" not in str(exc.value)


def test_a_mistyped_planner_key_names_the_field_it_is_close_to(capsys):
    assert main([*PLAN, "--set", "planner.space.tpp=1"]) == 2
    assert "did you mean 'tp'" in capsys.readouterr().err


def test_a_mistyped_rollout_layout_key_names_the_field_it_is_close_to(capsys):
    """The rollout layout is validated when the run builds its engines, not by load_scenario."""
    assert main(["run", *RUN, "--set", "workload.rollout_layout.max_num_seq=64"]) == 2
    assert "did you mean 'max_num_seqs'" in capsys.readouterr().err


def test_unknown_software_names_the_stacks():
    with pytest.raises(RlsimError, match="megatron-2021") as exc:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.train_software=megatron-1999"])
    assert exc.value.field == "workload.train_software"


def test_every_validation_error_is_listed_with_its_dotted_path_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("workload:\n  preset: grpo-qwen2.5-7b\n  inference: {step_overhead_s: -1}\n"
                    "  train_params: {compute: {flash_attention: maybe}}\n"
                    "schedule: {kind: disaggregated, staleness: 2}\niterations: 0\n")
    with pytest.raises(RlsimError) as exc:
        load_scenario(path)
    text = str(exc.value)
    assert str(path) in text and "4 errors" in text
    assert exc.value.fields == ["workload.train_params.compute.flash_attention", "workload.inference.step_overhead_s",
                                "schedule.staleness", "iterations"]


def test_llm_layer_errors_carry_the_workload_prefix_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("workload:\n  preset: grpo-qwen2.5-7b\n  rollout_layout: {tp: 0, ep: 0}\n")
    with pytest.raises(RlsimError) as exc:
        simulator.simulate(path, topology="dgx-h100", iterations=1)
    assert str(path) in str(exc.value)
    assert exc.value.fields == ["workload.rollout_layout.tp", "workload.rollout_layout.ep"]


def test_issue12_v7_trainer_mechanisms_reach_the_scenario_and_switch_off():
    """The V7 mechanisms are train_params fields: --set reaches them, the old behaviour is one value
    away (window "step", backward ratio null, 16 B loss, 2 B gradients), bad values name the path."""
    sets = ["workload.train_params.comm.dp_overlap_fraction=0.8",   # the window bounds a hidden share: needs one
            "workload.train_params.comm.dp_overlap_window=step", "workload.train_params.comm.grad_reduce_bytes_per_param=2",
            "workload.train_params.compute.flash_backward_efficiency_ratio=null",
            "workload.train_params.compute.loss_traffic_bytes_per_logit=16"]
    p = load_scenario(workload="grpo-qwen2.5-7b", overrides=sets).workload.train_params
    assert (p.comm.dp_overlap_window, p.comm.grad_reduce_bytes_per_param) == ("step", 2.0)
    assert p.compute.flash_backward_efficiency_ratio is None and p.compute.loss_traffic_bytes_per_logit == 16.0
    d = TrainParams()
    assert (d.comm.dp_overlap_window, d.comm.grad_reduce_bytes_per_param) == ("last-micro-batch", 4.0)
    with pytest.raises(RlsimError, match="workload.train_params.comm.dp_overlap_window"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.train_params.comm.dp_overlap_window=sometimes"])
