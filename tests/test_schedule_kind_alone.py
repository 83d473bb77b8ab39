"""A schedule kind named alone (--schedule KIND, the API's schedule="KIND", a sweep's grid value
schedule=A,B) over a scenario whose schedule section gives knobs keeps the knobs KIND takes
(scenario.compared_schedules, as `rlsim compare` does) and names those it leaves out; before, the
section was replaced whole and a verl import's engine sleep, refit and micro-batching were dropped
without a word. `--set schedule.kind=KIND` stays strict."""
import json

import pytest

import simulator
from simulator.cli import main
from simulator.errors import ReadPastError, RlsimError
from simulator.scenario import load_scenario, schedule_left_out_notes
from simulator.sweep import BaseScenario, simulate_point

# the schedule section of a verl import (rlsim run --from-verl workloads/frameworks/verl-grpo-qwen2.5-7b.yaml
# --print-scenario), on a small batch
SCENARIO = """\
topology: {preset: dgx-h100, nodes: 1}
workload: {preset: grpo-qwen2.5-7b, prompts_per_step: 32, samples_per_prompt: 4, mini_batch_prompts: 16}
iterations: 2
schedule:
  kind: colocated
  switch: {offload_optimizer: false, free_gradients: true, engine_sleep: true, engine_sleep_level: 2}
  refit: full-tensors
  micro_batching: sequence
"""
KEPT = {"refit": "full-tensors", "micro_batching": "sequence"}


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "imported.yaml"
    path.write_text(SCENARIO)
    return str(path)


def given(scenario):
    return scenario.schedule.model_dump(mode="json", exclude_unset=True)


def test_a_kind_alone_keeps_the_knobs_it_takes_as_set_schedule_kind_does(scenario_file):
    alone = simulator.simulate(scenario_file, schedule="colocated")
    strict = simulator.simulate(scenario_file, overrides=["schedule.kind=colocated"])
    replaced = simulator.simulate(scenario_file, schedule={"kind": "colocated"})   # a mapping replaces the section
    assert given(alone.scenario) == given(strict.scenario) == {**KEPT, "kind": "colocated", "switch": {
        "offload_optimizer": False, "free_gradients": True, "engine_sleep": True, "engine_sleep_level": 2}}
    assert alone.scenario.schedule_left_out == ()
    assert alone.summary["steady_tokens_per_s"] == strict.summary["steady_tokens_per_s"]
    # the kept knobs change the figure: the section replaced whole (the old --schedule) runs otherwise
    assert given(replaced.scenario) == {"kind": "colocated"}
    assert replaced.summary["steady_tokens_per_s"] != alone.summary["steady_tokens_per_s"]


def test_a_knob_the_kind_does_not_take_is_left_out_and_named(scenario_file):
    result = simulator.simulate(scenario_file, schedule="disaggregated")
    assert given(result.scenario) == {**KEPT, "kind": "disaggregated"}
    knob, why = result.scenario.schedule_left_out[0]
    assert (knob, len(result.scenario.schedule_left_out)) == ("switch", 1)
    assert why.startswith("applies to colocated / ")
    notes = [n for n in result.summary["notes"] if n.startswith("schedule.switch ")]
    assert len(notes) == 1 and "disaggregated runs without it" in notes[0]
    # --set schedule.kind stays strict: the knob is the user's to remove
    with pytest.raises(RlsimError, match="does not apply to kind: disaggregated") as err:
        load_scenario(scenario_file, overrides=["schedule.kind=disaggregated"])
    assert err.value.field == "schedule.switch"


def test_a_knob_the_kind_reads_past_is_left_out_and_named(scenario_file):
    """verl-fully-async takes a switch only beside dynamic_resources (a ReadPastError): left out, as
    `rlsim compare` leaves it out of that column."""
    scenario = load_scenario(scenario_file, schedule="verl-fully-async")
    assert given(scenario) == {**KEPT, "kind": "verl-fully-async"}
    assert [knob for knob, _ in scenario.schedule_left_out] == ["switch"]
    assert scenario.schedule_left_out[0][1].startswith("is not read under verl-fully-async (")
    with pytest.raises(ReadPastError):
        load_scenario(scenario_file, overrides=["schedule.kind=verl-fully-async"])


def test_a_set_knob_beside_a_kind_alone_stays_strict(scenario_file):
    with pytest.raises(RlsimError, match="does not apply to kind: disaggregated") as err:
        load_scenario(scenario_file, schedule="disaggregated", overrides=["schedule.switch.engine_sleep=false"])
    assert err.value.field == "schedule.switch"
    # and a --set knob the kind takes wins over the file's
    assert load_scenario(scenario_file, schedule="disaggregated",
                         overrides=["schedule.micro_batching=balanced"]).schedule.micro_batching == "balanced"


def test_a_scenario_object_keeps_its_knobs_under_a_kind_alone(scenario_file):
    base = load_scenario(scenario_file)
    assert given(load_scenario(base, schedule="disaggregated")) == {**KEPT, "kind": "disaggregated"}


def test_a_sweep_grid_value_of_a_kind_alone_keeps_the_knobs(scenario_file):
    base = BaseScenario(spec=scenario_file)
    scenario, _ = base.loaded({"schedule": "disaggregated"})
    assert given(scenario) == {**KEPT, "kind": "disaggregated"}
    assert [knob for knob, _ in scenario.schedule_left_out] == ["switch"]
    point = simulate_point(base, {"schedule": "colocated"})
    assert point["steady_tokens_per_s"] == simulator.simulate(scenario_file, schedule="colocated").summary[
        "steady_tokens_per_s"]
    assert any("disaggregated runs without it" in n for n in simulate_point(base, {"schedule": "disaggregated"})["notes"])


def test_the_cli_names_the_knobs_left_out(scenario_file, capsys):
    assert main(["run", scenario_file, "--schedule", "disaggregated", "--json"]) == 0
    out = capsys.readouterr()
    notes = json.loads(out.out)["notes"]
    assert any(n.startswith("schedule.switch applies to ") and "disaggregated runs without it" in n for n in notes)
    assert main(["sweep", scenario_file, "--grid", "schedule=colocated,disaggregated", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("rlsim: note: schedule.switch applies to ") == 1   # disaggregated's; colocated takes it
    assert "disaggregated runs without it" in err
    assert main(["sensitivity", scenario_file, "--schedule", "disaggregated", "--samples", "0", "--iterations", "1",
                 "--vary", "workload.response_length.median=512..1024", "--json"]) == 0
    assert "rlsim: note: schedule.switch applies to " in capsys.readouterr().err


# verl-fully-async's partial rollout (abort at a weight sync, resume after it: no length budget), as a
# verl import gives it (workloads/frameworks/verl-fully-async-qwen2.5-7b.yaml --print-scenario)
FULLY_ASYNC = """\
topology: {preset: dgx-h100, nodes: 1}
workload: {preset: grpo-qwen2.5-7b, prompts_per_step: 32, samples_per_prompt: 4, mini_batch_prompts: 16}
iterations: 2
schedule:
  kind: verl-fully-async
  rollout_devices: 4
  trigger_parameter_sync_step: 2
  staleness_threshold: 0.5
  partial_rollout: true
"""


@pytest.mark.parametrize("kind", ["one-step-off", "stalesync", "async"])
def test_a_partial_rollout_without_a_budget_is_left_out_of_a_kind_that_cuts_at_one(tmp_path, kind):
    """one-step-off / stalesync / async cut a partial rollout at schedule.length_budget; verl-fully-async's
    has none. Kept, it refused the run ('partial_rollout needs a per-segment length budget'), where the
    section replaced whole (before kinds alone kept knobs) ran: it is left out and named."""
    path = tmp_path / "fully-async.yaml"
    path.write_text(FULLY_ASYNC)
    result = simulator.simulate(str(path), schedule=kind)
    assert "partial_rollout" not in given(result.scenario)
    left_out = dict(result.scenario.schedule_left_out)
    assert "length_budget" in left_out["partial_rollout"]
    assert any(n.startswith("schedule.partial_rollout ") for n in result.summary["notes"])
    if kind != "stalesync":   # split pools: the section's rollout_devices kept
        assert result.scenario.schedule.rollout_devices == 4
    # a budget given beside the kind keeps it: the user's partial rollout, cut at that budget
    budget = load_scenario(str(path), schedule=kind, overrides=["schedule.length_budget=512"])
    assert budget.schedule.partial_rollout and "partial_rollout" not in dict(budget.schedule_left_out)
    # the section's own kind keeps it, as it runs it
    assert load_scenario(str(path), schedule="verl-fully-async").schedule.partial_rollout


def test_a_knob_the_kind_takes_on_its_other_placement_says_so(tmp_path):
    """stalesync named alone runs its colocated placement: a split pool's rollout_devices is left out,
    and the note says stalesync takes it with placement: disaggregated only (it read 'applies to ... /
    stalesync / ...; stalesync runs without it')."""
    path = tmp_path / "split.yaml"
    path.write_text(FULLY_ASYNC.replace("verl-fully-async", "one-step-off").replace(
        "  trigger_parameter_sync_step: 2\n  staleness_threshold: 0.5\n  partial_rollout: true\n", ""))
    why = dict(load_scenario(str(path), schedule="stalesync").schedule_left_out)["rollout_devices"]
    assert why == "is taken by stalesync with placement: disaggregated only (set schedule.placement: disaggregated)"


def test_compare_gives_no_kind_a_partial_rollout_it_would_cut_without_a_budget(tmp_path):
    """`rlsim compare` of a verl-fully-async scenario (partial_rollout: resumed after a sync) against
    async failed: 'under kind async: partial_rollout needs a per-segment length budget' (a review).
    compared_schedules leaves it out of the kinds that cut one at length_budget, as a kind named
    alone does; the section's own kind keeps it."""
    from simulator.scenario import compared_schedules
    path = tmp_path / "fully-async.yaml"
    path.write_text(FULLY_ASYNC)
    cmp = simulator.compare(str(path), ["verl-fully-async", "async"], iterations=2)
    assert set(cmp.results) == {"verl-fully-async", "async"}
    section = {"kind": "verl-fully-async", "partial_rollout": True, "rollout_devices": 4}
    per_kind, _ = compared_schedules(section, ["verl-fully-async", "async", "stalesync"])
    assert per_kind["verl-fully-async"]["partial_rollout"] and "partial_rollout" not in per_kind["async"]
    budgeted, _ = compared_schedules(section, ["async"], set_knobs=("length_budget",))
    assert budgeted["async"]["partial_rollout"]


def test_a_kind_named_alone_leaves_out_an_imports_timers_it_has_not_the_phases_of(tmp_path):
    """A NeMo RL import's scenario names its timers (output.timers: nemo-rl), a colocated / one-step-off
    step's phases: --schedule async was refused at output.timers (a review), where compare leaves them
    out of such a kind; the kind named alone does too, and says so; a kind with the phases keeps them."""
    path = tmp_path / "nemo.yaml"
    path.write_text(FULLY_ASYNC.replace("verl-fully-async", "colocated").replace(
        "  rollout_devices: 4\n  trigger_parameter_sync_step: 2\n  staleness_threshold: 0.5\n  partial_rollout: true\n",
        "") + "output: {timers: nemo-rl}\n")
    scenario = load_scenario(str(path), schedule="async")
    assert "timers" not in (scenario.to_dict().get("output") or {})
    assert dict(scenario.schedule_left_out)["output.timers"] == "nemo-rl names phases async has not"
    assert "output.timers nemo-rl names phases async has not; async runs without it" in \
        " ".join(schedule_left_out_notes(scenario))
    assert load_scenario(str(path), schedule="one-step-off").to_dict()["output"]["timers"] == "nemo-rl"
    with pytest.raises(RlsimError) as info:   # --set schedule.kind stays strict
        load_scenario(str(path), overrides=["schedule.kind=async"])
    assert info.value.field == "output.timers"


@pytest.mark.parametrize("timers", ["output.timers=nemo-rl", "output={timers: openrlhf}"])
@pytest.mark.parametrize("kind", [{"schedule": "async"}, {"overrides": ["schedule=stalesync"]}])
def test_timers_given_by_set_that_the_kind_alone_has_not_the_phases_of_are_refused(timers, kind):
    """`--schedule async --set output.timers=nemo-rl` ran without the timers and a note, where a --set
    schedule knob the kind does not take is refused and docs/scenario-reference.md says another kind
    refuses them: the user asked for them on this command, so the kind's refusal stands (a scenario
    file's or an import's timers are still left out, above)."""
    keywords = dict(kind)
    keywords["overrides"] = [*keywords.get("overrides", ()), timers]
    with pytest.raises(RlsimError) as info:
        load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, **keywords)
    assert info.value.field == "output.timers"
    assert "has only rlsim's stages" in info.value.message


def test_set_schedule_to_a_kind_is_the_kind_named_alone(scenario_file):
    """`--set schedule=KIND` replaced the section whole (the verl import's switch, refit and
    micro-batching dropped without a note) where --schedule KIND keeps the knobs KIND takes: a user
    typing either means the same, so both give the same scenario and the same note."""
    alone = load_scenario(scenario_file, schedule="disaggregated")
    by_set = load_scenario(scenario_file, overrides=["schedule=disaggregated"])
    assert by_set.to_dict() == alone.to_dict() and given(by_set) == {**KEPT, "kind": "disaggregated"}
    assert by_set.schedule_left_out == alone.schedule_left_out and by_set.schedule_left_out[0][0] == "switch"
    # a knob set after the kind: as beside --schedule (the set one wins; one the kind does not take is refused)
    after = load_scenario(scenario_file, overrides=["schedule=disaggregated", "schedule.micro_batching=balanced"])
    assert after.schedule.micro_batching == "balanced" and after.schedule.refit == "full-tensors"
    with pytest.raises(RlsimError, match="does not apply to kind: disaggregated"):
        load_scenario(scenario_file, overrides=["schedule=disaggregated", "schedule.switch.engine_sleep=false"])
    # a knob set before it is still refused (the section item would drop it), a mapping still replaces
    with pytest.raises(RlsimError, match="dropping --set schedule.micro_batching=balanced"):
        load_scenario(scenario_file, overrides=["schedule.micro_batching=balanced", "schedule=disaggregated"])
    assert given(load_scenario(scenario_file, overrides=["schedule={kind: disaggregated}"])) == {"kind": "disaggregated"}
    # applied last, it wins over the keyword's kind; a mapping keyword is the section it keeps knobs of
    assert load_scenario(scenario_file, schedule="async", overrides=["schedule=disaggregated"]).to_dict() == \
        alone.to_dict()
    over = load_scenario(scenario_file, schedule={"kind": "colocated", "refit": "full-tensors", "fuse": "off"},
                         overrides=["schedule=disaggregated"])
    assert given(over) == {"kind": "disaggregated", "refit": "full-tensors"}


def test_the_cli_takes_set_schedule_as_schedule(scenario_file, capsys):
    """run, sweep (--set), sensitivity and plan give `--set schedule=KIND` the scenario and the note of
    --schedule KIND; compare refuses it as it refuses --set schedule.kind (each compared kind replaced it)."""
    assert main(["run", scenario_file, "--schedule", "disaggregated", "--json"]) == 0
    alone = capsys.readouterr().out
    assert main(["run", scenario_file, "--set", "schedule=disaggregated", "--json"]) == 0
    assert capsys.readouterr().out == alone
    assert main(["sweep", scenario_file, "--set", "schedule=disaggregated", "--grid", "seed=0", "--json"]) == 0
    assert "rlsim: note: schedule.switch applies to " in capsys.readouterr().err
    assert main(["sensitivity", scenario_file, "--set", "schedule=disaggregated", "--samples", "0", "--iterations",
                 "1", "--vary", "workload.response_length.median=512..1024", "--json"]) == 0
    assert "rlsim: note: schedule.switch applies to " in capsys.readouterr().err
    assert main(["plan", scenario_file, "--set", "schedule=disaggregated", "--top", "1", "--json"]) == 0
    plan_out = capsys.readouterr()
    assert "rlsim: note: schedule.switch applies to " in plan_out.err
    assert main(["plan", scenario_file, "--set", "schedule.kind=disaggregated", "--top", "1", "--json"]) == 2
    assert "field 'schedule.switch'" in capsys.readouterr().err   # schedule.kind stays strict
    for value in ("stalesync", "{kind: stalesync}"):
        assert main(["compare", scenario_file, "--set", f"schedule={value}"]) == 2
        err = capsys.readouterr().err
        assert "field 'schedule'" in err and "--schedules" in err


# AReaL (ahead of its trainer: the actor's state kept beside the reference's) does not fit this step
# on one H100 node where stalesync does: its refusal names schedule.forward_micro_batch
STALESYNC = SCENARIO.split("schedule:")[0] + "schedule: {kind: stalesync, staleness: 0}\n"


def test_a_sweep_row_of_a_kind_alone_blames_the_grid_value(tmp_path):
    """A point's error at a schedule field under a grid value schedule=KIND named the scenario file
    (which runs its own kind) where a grid key's error names its value: it names --grid schedule="KIND"
    over the file, with the value to drop."""
    path = tmp_path / "s.yaml"
    path.write_text(STALESYNC)
    with pytest.raises(RlsimError) as info:
        simulate_point(BaseScenario(spec=str(path), iterations=1), {"schedule": "areal"})
    assert info.value.source == f'--grid schedule="areal" (over {path})'
    assert info.value.field == "schedule.forward_micro_batch"
    assert info.value.fix.endswith('; or drop "areal" from --grid schedule=...')
    # a --set knob's error stays the --set item's
    with pytest.raises(RlsimError) as info:
        simulate_point(BaseScenario(spec=str(path), overrides=("schedule.staleness=1",)), {"schedule": "colocated"})
    assert info.value.source.startswith("--set schedule.staleness=1")
