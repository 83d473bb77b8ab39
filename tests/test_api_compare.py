"""simulator.compare's schedules argument (issue 14, item 11): a string is one schedule, an empty
list and repeated kinds are errors, never silently an empty or collapsed table."""
import json

import pytest

import simulator
from simulator.api import schedule_list
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=1,
             overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=2",
                        "workload.mini_batch_prompts=4"])


def fake() -> FakeCosts:
    return FakeCosts(instance_devices=2, train_group_devices=2)


def test_a_string_is_one_schedule_not_its_letters():
    cmp = simulator.compare(None, "colocated", costs=fake(), **SMALL)
    assert list(cmp.results) == ["colocated"]
    assert list(cmp.table["schedule"]) == ["colocated"]


def test_a_tuple_and_a_generator_are_lists_of_schedules():
    cmp = simulator.compare(None, (k for k in ("colocated", "stalesync")), costs=fake(), **SMALL)
    assert list(cmp.results) == ["colocated", "stalesync"]


@pytest.mark.parametrize("schedules, words", [([], "no schedule"), ((), "no schedule"),
                                               (["colocated", "colocated"], "more than once"),
                                               (["colocated", 3], "must be schedule kinds"), (7, "schedule kinds")])
def test_bad_schedule_lists_are_user_errors(schedules, words):
    with pytest.raises(RlsimError, match=words) as info:
        simulator.compare(None, schedules, costs=fake(), **SMALL)
    assert info.value.field == "schedules" and info.value.fix


def test_schedule_list_keeps_the_order():
    assert schedule_list(["stalesync", "colocated"]) == ["stalesync", "colocated"]
    assert schedule_list("async") == ["async"]


@pytest.mark.parametrize("value, words", [("colocated,colocated", "more than once"), (",", "no schedule given"),
                                          ("colocated,nope", "unknown schedule"),
                                          ("colocated,,async", "empty item"), ("colocated,async,", "empty item")])
def test_cli_compare_schedules_errors_exit_2(value, words, capsys):
    from simulator.cli import main
    assert main(["compare", "--schedules", value]) == 2
    err = capsys.readouterr().err
    assert words in err and "--schedules" in err and "Traceback" not in err


def test_a_knob_only_some_compared_kinds_take_goes_to_those():
    """`compare --schedules colocated,one-step-off --set schedule.rollout_devices=4` (the compare
    --help example): the split kind gets the knob, colocated runs without it."""
    from simulator.api import compared_scenarios
    keywords = {**SMALL, "schedule": "colocated", "overrides": [*SMALL["overrides"], "schedule.rollout_devices=4"]}
    scenarios = compared_scenarios(None, ["colocated", "one-step-off"], keywords)
    assert scenarios["one-step-off"].schedule.rollout_devices == 4
    assert "rollout_devices" not in scenarios["colocated"].schedule.model_dump(exclude_unset=True)


def test_a_knob_no_compared_kind_takes_is_still_an_error():
    with pytest.raises(RlsimError, match="schedule.bogus"):
        simulator.compare(None, ["colocated", "one-step-off"], costs=fake(),
                          **{**SMALL, "overrides": [*SMALL["overrides"], "schedule.bogus=1"]})


def test_a_set_knob_the_base_kind_takes_but_no_compared_kind_takes_is_an_error():
    """The default scenario is StaleSync, which takes `staleness`; comparing colocated and
    disaggregated under `--set schedule.staleness=2` would drop it from every column."""
    from simulator.api import compared_scenarios
    keywords = {**SMALL, "schedule": "stalesync", "overrides": [*SMALL["overrides"], "schedule.staleness=2"]}
    with pytest.raises(RlsimError, match="none of the compared kinds") as caught:
        compared_scenarios(None, ["colocated", "disaggregated"], keywords)
    assert caught.value.field == "schedule.staleness" and "stalesync" in str(caught.value)
    assert compared_scenarios(None, ["colocated", "stalesync"], keywords)["stalesync"].schedule.staleness == 2


def test_a_split_knob_goes_to_the_compared_split_kind_beside_the_base_kinds_own_knobs():
    """A colocated scenario with a knob only its kind takes (switch), compared as disaggregated with
    --set schedule.rollout_fraction: the fraction is the compared kind's, not an error 'for kind
    colocated' (a NeMo RL import was refused so; found by a new-user trial)."""
    from simulator.api import compared_scenarios
    keywords = {**SMALL, "schedule": {"kind": "colocated", "switch": {"engine_sleep": True}},
                "overrides": [*SMALL["overrides"], "schedule.rollout_fraction=0.25"]}
    scenarios = compared_scenarios(None, ["disaggregated"], keywords)
    assert scenarios["disaggregated"].schedule.rollout_fraction == 0.25
    keywords["overrides"] = [*keywords["overrides"], "schedule.bogus=1"]
    with pytest.raises(RlsimError, match="schedule.bogus"):   # a key no kind takes is still refused
        compared_scenarios(None, ["disaggregated"], keywords)


def test_a_schedule_kind_given_to_a_comparison_is_an_error():
    # --set schedule.kind=X was replaced by the compared kinds without a word
    import pytest

    from simulator.api import compare
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError) as err:
        compare(None, ["colocated", "stalesync"], iterations=1, overrides=["schedule.kind=async"])
    assert err.value.field == "schedule.kind"


def test_a_compared_kinds_refusal_and_notes_name_the_kind(capsys):
    # which of the compared kinds refused a knob, and whose default a note was about, went unsaid (fuzzing)
    from simulator.cli import main
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError, match="under kind verl-fully-async"):
        simulator.compare(None, ["colocated", "verl-fully-async"], overrides=["schedule.partial_rollout=true"],
                          iterations=1)
    # (two nodes: areal's 4 training devices of one cannot hold the actor's update beside the resident reference)
    argv = ["compare", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", "topology.nodes=2",
            "--set", "workload.prompts_per_step=8",
            "--set", "workload.samples_per_prompt=2", "--set", "workload.mini_batch_prompts=8", "--set",
            "schedule.staleness=2", "--schedules", "async,areal", "--iterations", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "note (async): staleness bound 2" in out.replace("\n", " ")


def test_a_knob_of_a_kind_neither_compared_nor_the_scenarios_own_names_its_kinds():
    """`--set schedule.max_head_offpolicyness=1` comparing colocated and disaggregated on the StaleSync
    default: the error named stalesync (not compared) and sent the user to schedule.kind, which
    compare refuses; it names the compared kinds and the one that takes the knob (areal)."""
    from simulator.api import compared_scenarios
    keywords = {**SMALL, "schedule": "stalesync",
                "overrides": [*SMALL["overrides"], "schedule.max_head_offpolicyness=1"]}
    with pytest.raises(RlsimError, match="none of the compared kinds") as caught:
        compared_scenarios(None, ["colocated", "disaggregated"], keywords)
    assert caught.value.field == "schedule.max_head_offpolicyness" and "areal" in caught.value.fix
    with pytest.raises(RlsimError, match="unknown field .bogus.") as unknown:   # the schema's error
        compared_scenarios(None, ["colocated", "disaggregated"],
                           {**SMALL, "overrides": [*SMALL["overrides"], "schedule.bogus=1"]})
    assert "compared kinds" not in str(unknown.value)


def test_the_compare_command_says_which_columns_run_without_a_set_knob(capsys):
    """--set schedule.staleness=3 over async, areal and nemo-rl-async: only async takes it; the
    other columns ran without it and nothing said so (found by a new-user trial)."""
    from simulator.cli import main
    # (two nodes: areal's 4 training devices of one cannot hold the actor's update beside the resident reference)
    argv = ["compare", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
            "--set", "topology.nodes=2", "--set", "workload.prompts_per_step=32", "--set", "workload.mini_batch_prompts=32",
            "--schedules", "async,areal", "--set", "schedule.staleness=3", "--json"]
    assert main(argv) == 0
    assert "schedule.staleness applies to async; areal runs without it" in capsys.readouterr().err


def test_an_imports_knob_a_compared_kind_reads_past_is_left_out_of_that_kind_and_said(capsys):
    """A verl config (colocated, its switch from the offload keys) compared with verl-fully-async: the
    switch is read only with dynamic_resources there, so every comparison was refused, and the
    advised `--set schedule.switch=null` failed too (found by a new-user trial). That column now
    runs without it and a note says so; the scenario's own kind still refuses what it reads past,
    and `schedule.switch=null` clears a section to its defaults."""
    from simulator.cli import main

    config = ["--from-verl", "workloads/frameworks/verl-grpo-qwen2.5-7b.yaml", "data.train_batch_size=16",
              "actor_rollout_ref.actor.ppo_mini_batch_size=16"]
    argv = ["compare", *config, "--schedules", "colocated,verl-fully-async", "--iterations", "1", "--json"]
    assert main(argv) == 0
    rows = {row["schedule"]: row for row in json.loads(capsys.readouterr().out)}
    assert any(note.startswith("schedule.switch is not read under verl-fully-async") for note in
               rows["verl-fully-async"]["notes"])
    assert not any("schedule.switch is not read" in note for note in rows["colocated"]["notes"])
    run = ["run", *config, "--iterations", "1", "--json", "--set", "schedule.kind=verl-fully-async"]
    assert main(run) == 2 and "field 'schedule.switch'" in capsys.readouterr().err
    assert main([*run, "--set", "schedule.switch=null"]) == 0


def test_the_console_prints_every_note_the_summary_carries(capsys):
    """A packed row below the longest sample (api._pack_note) reached --json only: the console printed
    the notes its figures give (metrics.summary_notes), not the summary's own list."""
    from simulator.report.console import notes_of, print_summary

    result = simulator.simulate(None, costs=fake(), **{**SMALL, "overrides": [*SMALL["overrides"],
                                                                               "schedule.pack_tokens=512"]})
    notes = result.summary["notes"]
    assert any("pack_tokens" in note for note in notes) and notes_of(result.summary) == notes
    print_summary(result.summary)
    out = capsys.readouterr().out
    assert "schedule.pack_tokens 512" in out.replace("\n", " ")
    # the per-device rate is the whole run's (it read "tokens/s per device" under the steady rows)
    assert "tokens/s per device (whole run)" in out
    # one iteration has no steady window: its rows say so (they read "steady state"; a report audit)
    table = out.split("note:")[0]
    assert "bubble fraction (one step only)" in table and "steady state" not in table
    # a stage's seconds are a step's, over the whole run (the row said only "stage: generate"), and a
    # colocated run's generate is the round's wall time (tests/report/test_console_stage_rows.py)
    generate = result.summary["stage_time_s"]["generate"]
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if "stage: generate" in line)
    label = " ".join(line.split("│")[1].strip() for line in lines[at:at + 2])   # wrapped at 80 columns
    shown = float(lines[at].split("│")[2].split()[0].replace(",", ""))
    assert label.startswith("stage: generate, round wall time (per step, whole run)")
    assert shown == pytest.approx(generate, rel=0.01)


@pytest.mark.parametrize("value", ["true", "[1, 2]", "-1", ".nan"])
def test_a_schedule_that_is_no_mapping_is_refused_naming_it(value):
    """compare of a scenario whose schedule is neither a mapping nor a kind (`--set schedule=true`)
    raised a TypeError from the compared kinds' sections (a --set fuzz); the schema's error names it."""
    with pytest.raises(RlsimError) as info:
        simulator.compare(None, ["colocated", "stalesync"], overrides=[f"schedule={value}"], iterations=1)
    assert info.value.field == "schedule" and "valid dictionary" in info.value.message


def test_timers_given_by_set_that_no_compared_kind_has_the_phases_of_are_refused():
    """--set output.timers=nemo-rl compared as async and stalesync ran both without them (a note on
    each), where a --set schedule knob none of the compared kinds takes is refused: it would change
    nothing in the comparison. A kind that has the phases keeps them, the others run without."""
    with pytest.raises(RlsimError) as info:
        simulator.compare(None, ["async", "stalesync"], overrides=["output.timers=nemo-rl"], iterations=1,
                          costs=FakeCosts())
    assert info.value.field == "output.timers"
    assert "none of the compared kinds (async, stalesync)" in info.value.message
    cmp = simulator.compare(None, ["colocated", "stalesync"], overrides=["output.timers=nemo-rl"], iterations=1,
                            costs=FakeCosts())
    assert "nemo_rl_timing_s" in cmp.results["colocated"].summary
    assert "nemo_rl_timing_s" not in cmp.results["stalesync"].summary


def test_timers_no_framework_names_are_refused_not_left_out():
    """compare left out an output.timers its kinds refused whatever the refusal: a value that names no
    framework (--set output.timers=nope) ran as if not given, exit 0 (a --set fuzz); run refuses it.
    A framework's timers a kind has not the phases of are still left out of that kind."""
    with pytest.raises(RlsimError) as info:
        simulator.compare(None, ["colocated", "stalesync"], overrides=["output.timers=nope"], iterations=1,
                          costs=FakeCosts())
    assert info.value.field == "output.timers" and "'nope'" in info.value.message
