"""Errors reached from `rlsim run --set KEY=VALUE` name the full dotted key the user set (the path
`--set` takes), not the low-level function's bare argument, and exit 2 without a traceback."""
import pytest

from simulator.cli import main

TINY = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1"]


@pytest.mark.parametrize("argv, field", [
    (["--set", "workload.train_params.compute.dtype=fp4"], "workload.train_params.compute.dtype"),
    (["--set", "workload.train_layout={tp: 1, pp: 2, vpp: 2}"], "workload.train_layout.vpp"),
    (["--set", "workload.train_layout.logprob_max_tokens_per_micro_batch=64"],
     "workload.train_layout.logprob_max_tokens_per_micro_batch"),
    (["--schedule", "disaggregated", "--set", "workload.train_params.memory.weight_bytes_per_param=400"],
     "workload.train_layout"),
    (["--set", "schedule.failures=[{at_s: 10, fail: bogus}]"], "schedule.failures.0.fail"),
    (["--set", "schedule.failures=[{at_s: 50, fail: 'node:0'}, {at_s: 10, fail: 'node:99'}]"],
     "schedule.failures.1.fail"),
    (["--set", "schedule.failures=[{at_s: 10, fail: all}]"], "schedule.failures.0.fail"),
    (["--set", "workload.dtype=fp4"], "workload.dtype"),
    (["--set", "workload.model=bogus-model"], "workload.model"),
    (["--set", "workload.rollout_layout.ep=3"], "workload.rollout_layout.ep"),
    (["--set", "workload.train_layout.tp=3"], "workload.train_layout.tp"),
    # read when the topology is, not by the cost model (it named the preset file and 'collectives.*')
    (["--set", "topology.collectives.step_overhead_s=-1"], "topology.collectives.step_overhead_s"),
])
def test_run_errors_name_the_key_set(capsys, argv, field):
    code = main(["run", *TINY, *argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"field '{field}'" in err


def test_comm_group_keeps_naming_the_option(capsys):
    code = main(["comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1MiB", "--group", "bogus"])
    err = capsys.readouterr().err
    assert code == 2 and "field '--group'" in err


def test_a_value_given_by_set_is_blamed_on_the_set_item_not_the_file(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: dgx-h100\nworkload: grpo-qwen2.5-7b\niterations: 1\n")
    code = main(["run", str(scenario), "--set", "topology.nodes=-1"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: --set topology.nodes=-1 (over {scenario}): field 'topology.nodes'" in err


def test_a_value_the_file_gave_still_names_the_file(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: -1}\nworkload: grpo-qwen2.5-7b\niterations: 1\n")
    code = main(["run", str(scenario), "--set", "workload.train_layout.tp=2"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {scenario}: field 'topology.nodes'" in err and "--set" not in err.split("field")[0]


def test_set_item_for_matches_the_key_its_section_and_its_sub_keys():
    from simulator.errors import set_item_for
    items = ["topology.nodes=2", "workload.train_layout={tp: 3}", "workload.batch.prompts=3"]
    assert set_item_for(["topology.nodes"], items) == "topology.nodes=2"
    assert set_item_for(["workload.train_layout.tp"], items) == "workload.train_layout={tp: 3}"
    assert set_item_for(["workload.batch"], items) == "workload.batch.prompts=3"
    assert set_item_for(["topology.nodes", "workload.model"], items) is None   # the file gave one
    assert set_item_for([], items) is None
    # items that filled a section together share its fault; a later item of the key itself wins
    sections = ["workload.multi_turn.max_turns=1", "workload.multi_turn.tool_latency_s=2"]
    assert set_item_for(["workload.multi_turn"], sections) == ", ".join(sections)
    assert set_item_for(["workload.multi_turn"], [*sections, "workload.multi_turn=null"]) == "workload.multi_turn=null"


def test_a_bad_key_of_the_workload_file_names_that_file_not_the_scenario(tmp_path, capsys):
    """The model's checks (a TP size, a length law's sigma) named the scenario file for a key its
    workload file gave (found by a new-user trial); a key the scenario gives beside the preset stays
    the scenario's."""
    workload = tmp_path / "wl.yaml"
    workload.write_text("model: qwen2.5-7b\nprompts_per_step: 64\nsamples_per_prompt: 8\n"
                        "train_layout: {tp: 3, pp: 1, zero: 1, recompute: full, micro_batch: 1}\n")
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: wl.yaml\niterations: 1\n")
    assert main(["run", str(scenario)]) == 2
    assert f"error: {workload.resolve()}: field 'workload.train_layout" in capsys.readouterr().err
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\niterations: 1\n"
                        "workload: {preset: wl.yaml, train_layout: {tp: 5, pp: 1}}\n")
    assert main(["run", str(scenario)]) == 2
    assert f"error: {scenario}: field 'workload.train_layout" in capsys.readouterr().err


def test_a_bad_predict_item_is_blamed_on_it_not_the_scenario(tmp_path, capsys):
    """calibrate --predict topology.nodez=2 said 'run8.yaml: field topology.nodez' (found by a
    new-user trial); it names the --predict item over the file, as --set does."""
    scenario = tmp_path / "run8.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 1}\nworkload: grpo-qwen2.5-7b\nschedule: colocated\n"
                        "iterations: 1\n")
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "timing_s/step": 600}\n{"step": 2, "timing_s/step": 610}\n')   # near its step
    code = main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), "--predict", "topology.nodez=2",
                 "--out", str(tmp_path / "fit.yaml")])   # not the working folder's rlsim-calibration.yaml
    err = capsys.readouterr().err
    assert code == 2 and f"error: --predict topology.nodez=2 (over {scenario}): field 'topology.nodez'" in err


def test_a_schedule_kind_one_typo_away_names_the_kind(capsys):
    code = main(["run", *TINY, "--set", "schedule.kind=colocatd"])
    err = capsys.readouterr().err
    assert code == 2 and "did you mean 'colocated'" in err and "field 'schedule.kind'" in err


def test_a_workload_the_command_line_replaced_is_not_blamed(tmp_path, capsys):
    """--workload bad.yaml over a scenario naming good.yaml: the error named good.yaml, which the run
    does not use (found by a regression hunt)."""
    good = tmp_path / "good.yaml"
    good.write_text("model: qwen2.5-7b\nprompts_per_step: 64\nsamples_per_prompt: 8\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: qwen2.5-7b\nprompts_per_step: 64\nsamples_per_prompt: 8\n"
                   "train_layout: {tp: 5, pp: 1}\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: good.yaml\niterations: 1\n")
    assert main(["run", str(scenario), "--workload", str(bad)]) == 2
    assert "good.yaml" not in capsys.readouterr().err


def test_a_conflict_names_where_either_side_was_written(tmp_path, capsys):
    """A cross-field check (mini_batch_prompts must divide prompts_per_step; nodes must fill
    nodes_per_domain) named the preset file that gave the field at fault, when the user's file or
    --set gave the other side (found by a new-user trial)."""
    scenario = tmp_path / "mb.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 1}\niterations: 1\n"
                        "workload: {preset: grpo-qwen2.5-7b, prompts_per_step: 64}\n")
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"error: {scenario} (workload from " in err and "field 'workload.mini_batch_prompts'" in err
    assert main(["run", *TINY, "--set", "workload.prompts_per_step=64"]) == 2
    assert "error: --set workload.prompts_per_step=64 (over " in capsys.readouterr().err
    assert main(["run", *TINY, "--set", "topology.nodes_per_domain=2"]) == 2
    err = capsys.readouterr().err
    assert "error: --set topology.nodes_per_domain=2 (over " in err and "field 'topology.nodes'" in err


def test_a_conflict_inside_the_preset_alone_names_the_preset(tmp_path, capsys):
    workload = tmp_path / "wl.yaml"
    workload.write_text("model: qwen2.5-7b\nprompts_per_step: 64\nsamples_per_prompt: 8\nmini_batch_prompts: 48\n")
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: wl.yaml\niterations: 1\n")
    assert main(["run", str(scenario)]) == 2
    assert f"error: {workload.resolve()}: field 'workload.mini_batch_prompts'" in capsys.readouterr().err


def test_validation_error_lists_the_fields_a_cross_field_check_read():
    from pydantic import BaseModel, ValidationError, field_validator

    from simulator.errors import CrossFieldError, validation_error

    class Pair(BaseModel):
        whole: int
        part: int

        @field_validator("part")
        @classmethod
        def _divides(cls, value, info):
            if info.data["whole"] % value:
                raise CrossFieldError("part must divide whole", "whole")
            return value

    with pytest.raises(ValidationError) as caught:
        Pair(whole=7, part=2)
    error = validation_error(caught.value, prefix="pair")
    assert error.fields == ["pair.part"] and error.related == ["pair.whole"]
    assert error.reworded("again", None).related == ["pair.whole"]


def test_a_model_level_conflict_is_reported_at_its_field_with_the_other_side_related(capsys):
    assert main(["run", *TINY, "--set", "workload.inference.max_model_len=1000"]) == 2
    err = capsys.readouterr().err
    assert "error: --set workload.inference.max_model_len=1000 (over " in err
    assert "field 'workload.prompt_length.max'" in err


def test_a_seed_written_as_a_float_is_told_how_to_write_it(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: dgx-h100\nworkload: grpo-qwen2.5-7b\niterations: 1\nseed: 1000.0\n")
    assert main(["run", str(scenario)]) == 2
    assert "(fix: write seed: 1000)" in capsys.readouterr().err


def test_a_quantity_a_validator_cannot_read_is_one_message_with_its_own_fix(tmp_path, capsys):
    """failures[0].at_s: soon said "field '...at_s': field 'time': ... (fix: ...) (got 'soon') (fix:
    ...)": two fields and two fixes (a notebook trial)."""
    scenario = tmp_path / "f.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: grpo-qwen2.5-7b\niterations: 1\n"
                        "schedule: {kind: colocated, failures: [{at_s: soon, fail: 'node:1'}]}\n")
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "field 'schedule.failures.0.at_s': cannot read 'soon' as a time (fix: write a number of seconds" in err
    assert err.count("field '") == 1 and err.count("(fix:") == 1


def test_a_required_key_left_out_of_a_section_blames_who_gave_the_section(tmp_path, capsys):
    # the distillation section given by --set, then by the user's scenario over a workload preset,
    # lacks its devices: the error named the preset file and a generic fix
    code = main(["run", *TINY, "--set", "workload.distillation.teacher=qwen2.5-7b"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --set workload.distillation.teacher=qwen2.5-7b" in err
    assert "field 'workload.distillation.devices'" in err and "give workload.distillation.devices" in err
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("workload:\n  preset: grpo-qwen2.5-7b\n  distillation:\n    teacher: qwen2.5-7b\n")
    code = main(["run", str(scenario), "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {scenario} (workload from" in err


def test_a_served_reward_models_conflict_blames_the_set_that_gave_either_side(tmp_path, capsys):
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("workload:\n  preset: grpo-qwen2.5-7b\n  reward:\n    kind: model\n    model: qwen2.5-7b\n"
                        "    served: {devices: 8}\n")
    code = main(["run", str(scenario), "--iterations", "1", "--set", "workload.reward.cpu_offload=true"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --set workload.reward.cpu_offload=true" in err
    assert "field 'workload.reward.served'" in err


@pytest.mark.parametrize("item, close", [("topology.node=2", "nodes"),
                                         ("topology.collectives.step_overhead=1", "step_overhead_s")])
def test_a_topology_key_one_typo_away_names_the_field(capsys, item, close):
    code = main(["run", *TINY, "--set", item])
    err = capsys.readouterr().err
    assert code == 2 and f"error: --set {item}" in err and f"did you mean '{close}'?" in err
