"""The schedule config as one pydantic class per kind (issue 10 item 3, config half): knobs that do
not apply are refused with the full field name and the fix; shared attributes readable on every kind."""
import json

import pytest

from simulator import presets
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.scenario import (
    COMMON_KNOBS,
    PER_KIND_KNOBS,
    SCHEDULE_CLASSES,
    SCHEDULE_KINDS,
    ScheduleConfig,
    load_scenario,
)
from tests.fresh_python import json_of_fresh_python

SHARED = ("kind", "effective_placement", "effective_staleness", "effective_threshold", "partial_rollout",
          "length_budget", "overprovision", "failures", "recovery", "distqueue", "switch", "fuse",
          "consolidate_share", "tail_threshold", "low_batch_share", "weight_sync_efficiency", "rollout_fraction",
          "rollout_devices", "aux_fraction", "micro_batching", "pack_tokens", "reuse_stage_costs")
RUN = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
       "--set", "workload.prompts_per_step=16", "--set", "workload.samples_per_prompt=4",
       "--set", "workload.mini_batch_prompts=16"]


def test_every_field_is_common_or_per_kind():
    assert set(ScheduleConfig.model_fields) == COMMON_KNOBS | PER_KIND_KNOBS
    assert tuple(SCHEDULE_CLASSES) == SCHEDULE_KINDS


@pytest.mark.parametrize("workload", presets.preset_names("workloads"))
@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_every_preset_loads_under_every_kind_with_shared_attributes(workload, kind):
    sampling = presets.resolve("workloads", workload)[0].get("dynamic_sampling") or {}
    if (kind.startswith("verl-") or kind == "areal") and "gen_prompts" in sampling:
        # verl 0.9's v1 buffer, verl's fully_async Rollouter and AReaL start prompts one at a time: a
        # preset's generation batch is refused, named
        with pytest.raises(RlsimError) as err:
            load_scenario(workload=workload, schedule=kind)
        assert err.value.field == "workload.dynamic_sampling.gen_prompts"
        sc = load_scenario(workload=workload, schedule=kind, overrides=["workload.dynamic_sampling.gen_prompts=null"])
        assert sc.workload.dynamic_sampling.gen_prompts is None
        return
    sc = load_scenario(workload=workload, schedule=kind)
    assert type(sc.schedule) is SCHEDULE_CLASSES[kind] and isinstance(sc.schedule, ScheduleConfig)
    for name in SHARED:
        getattr(sc.schedule, name)
    assert load_scenario(sc).schedule == sc.schedule
    assert sc.with_schedule(weight_sync_efficiency=0.5).schedule.weight_sync_efficiency == 0.5


@pytest.mark.parametrize("kind, knob, value, accepted_by", [
    ("disaggregated", "staleness", 2, "one-step-off / stalesync / async"),
    ("colocated", "rollout_fraction", 0.25, "disaggregated"),
    ("colocated", "stream_threshold", 0.5, "stalesync"),
    ("async", "stream_threshold", 0.5, "stalesync"),
    ("async", "fuse", "actor", "colocated / stalesync"),
    ("one-step-off", "failures", [{"at_s": 1, "fail": "node:0"}], "colocated / disaggregated / stalesync"),
    ("disaggregated", "placement", "colocated", "stalesync"),
])
def test_inapplicable_knob_is_refused_naming_the_field_and_the_kinds(kind, knob, value, accepted_by):
    with pytest.raises(RlsimError) as exc:
        load_scenario(workload="grpo-qwen2.5-7b", schedule={"kind": kind, knob: value})
    assert exc.value.field == f"schedule.{knob}"
    assert f"kind: {kind}" in str(exc.value) and accepted_by in str(exc.value)


def test_stalesync_knobs_follow_its_placement():
    split = load_scenario(workload="grpo-qwen2.5-7b",
                          schedule={"kind": "stalesync", "placement": "disaggregated", "rollout_fraction": 0.25})
    assert split.schedule.effective_placement == "disaggregated" and split.schedule.rollout_fraction == 0.25
    load_scenario(workload="grpo-qwen2.5-7b", schedule={"kind": "stalesync", "fuse": "actor", "consolidate_share": 0.4})
    with pytest.raises(RlsimError, match="schedule.fuse"):
        load_scenario(workload="grpo-qwen2.5-7b", schedule={"kind": "stalesync", "placement": "disaggregated",
                                                            "fuse": "actor"})
    with pytest.raises(RlsimError, match="schedule.rollout_fraction") as exc:
        load_scenario(workload="grpo-qwen2.5-7b", schedule={"kind": "stalesync", "rollout_fraction": 0.25})
    # the kind takes it on its other placement: the message says which (it said "does not apply to
    # kind: stalesync; it applies to kind: stalesync")
    assert "with placement: colocated; it applies with placement: disaggregated" in str(exc.value)


def test_inapplicable_knob_exits_2_on_the_cli(capsys):
    assert main(["run", *RUN, "--schedule", "disaggregated", "--set", "schedule.staleness=2", "--json"]) == 2
    err = capsys.readouterr().err
    assert "schedule.staleness" in err and "Traceback" not in err


def test_unknown_kind_names_schedule_kind():
    with pytest.raises(RlsimError) as exc:
        load_scenario(workload="grpo-qwen2.5-7b", schedule="sometimes")
    assert exc.value.field == "schedule.kind"


def test_applicable_fields_keep_only_what_the_kind_takes():
    sc = load_scenario(workload="grpo-qwen2.5-7b", schedule={"kind": "stalesync", "staleness": 2, "fuse": "actor"})
    assert sc.schedule.applicable_fields("disaggregated") == {"kind": "disaggregated"}
    assert sc.schedule.applicable_fields("async") == {"kind": "async", "staleness": 2}


def test_sweep_over_kinds_gives_a_per_row_error_for_a_knob_only_some_take(capsys):
    rc = main(["sweep", *RUN, "--json", "--set", "schedule.staleness=2", "--grid", "schedule.kind=colocated,async"])
    out = capsys.readouterr()
    rows = {r["grid"]["schedule.kind"]: r for r in json.loads(out.out)}
    assert rc == 0
    assert "schedule.staleness" in rows["colocated"]["error"]
    assert rows["async"].get("error") is None and rows["async"]["staleness"]["max"] <= 2


def test_compare_keeps_the_knobs_that_apply(capsys):
    # staleness goes to async (it takes it), not to colocated (it does not); no schedule.kind needed
    # (a comparison refuses it: the compared kinds replace it)
    rc = main(["compare", *RUN, "--schedules", "colocated,async", "--set", "schedule.staleness=2", "--json"])
    assert rc == 0, capsys.readouterr().err



BUILT = """
import json
from simulator import scenario
sc = scenario.load_scenario(schedule="one-step-off")
print(json.dumps([k for k, c in scenario.SCHEDULE_CLASSES.items() if c.__pydantic_complete__]))
"""


def test_a_scenario_builds_only_its_own_kinds_schedule_class():
    assert json_of_fresh_python(BUILT) == ["one-step-off"]


MADE_ON_FIRST_USE = """
import json, pickle
from simulator import scenario
looked = ("areal" in scenario.SCHEDULE_CLASSES, list(scenario.SCHEDULE_CLASSES), len(scenario.SCHEDULE_CLASSES))
before = scenario.built_in_classes_made()
sc = scenario.load_scenario(schedule="areal")
back = pickle.loads(pickle.dumps(sc))
from simulator.scenario import ArealSchedule
print(json.dumps({"before": before, "after": scenario.built_in_classes_made(), "looked": looked,
                  "same": type(back.schedule) is ArealSchedule is scenario.SCHEDULE_CLASSES["areal"],
                  "equal": back == sc, "names": [ArealSchedule.__name__, ArealSchedule.__qualname__,
                                                 ArealSchedule.__module__]}))
"""


def test_a_kinds_class_is_made_on_first_use_once_and_pickles_by_its_module_name():
    out = json_of_fresh_python(MADE_ON_FIRST_USE)
    assert out["before"] == []                  # membership, iteration and len make no class
    assert out["looked"] == [True, list(SCHEDULE_KINDS), len(SCHEDULE_KINDS)]
    assert out["after"] == ["areal"]
    assert out["same"] and out["equal"]
    assert out["names"] == ["ArealSchedule", "ArealSchedule", "simulator.scenario"]


def test_an_unknown_module_name_is_still_an_attribute_error():
    import simulator.scenario as scenario
    with pytest.raises(AttributeError, match="NoSuchSchedule"):
        scenario.NoSuchSchedule  # noqa: B018


@pytest.mark.parametrize("schedule, field, says", [
    ({"kind": "bogus"}, "schedule.kind",
     "Input tag 'bogus' found using 'kind' does not match any of the expected tags: 'colocated', 'disaggregated', "),
    ({"kind": 5}, "schedule.kind", "Input tag '5' found using 'kind'"),
    (5, "schedule", "Input should be a valid dictionary or object to extract fields from (got 5)"),
    ({"kind": "stalesync", "staleness": -1}, "schedule.staleness", "must be greater than or equal to 0 (got -1)"),
])
def test_schedule_errors_read_as_a_union_discriminated_on_kind(schedule, field, says):
    with pytest.raises(RlsimError) as err:
        load_scenario(schedule=schedule)
    assert err.value.field == field and says in str(err.value)


def test_a_schedule_instance_of_its_kinds_class_is_kept():
    from simulator.scenario import Scenario, StaleSyncSchedule
    given = StaleSyncSchedule(staleness=2)
    sc = Scenario.model_validate({**load_scenario().model_dump(exclude={"schedule"}), "schedule": given})
    assert sc.schedule is given


def test_mutable_defaults_are_not_shared_between_scenarios():
    a, b = load_scenario(), load_scenario()
    assert a.planner == b.planner == {} and a.planner is not b.planner
    assert a.schedule.failures == b.schedule.failures == [] and a.schedule.failures is not b.schedule.failures


# --- knobs a sibling knob of the schedule makes inapplicable ---

@pytest.mark.parametrize("schedule, field, says", [
    ({"kind": "colocated", "aux_fraction": 0.25}, "schedule.aux_fraction", "or set schedule.fuse: actor"),
    ({"kind": "stalesync", "fuse": "full", "aux_fraction": 0.25}, "schedule.aux_fraction", "applies to fuse: actor"),
    ({"kind": "one-step-off", "length_budget": 512}, "schedule.length_budget",
     "or set schedule.partial_rollout: true"),
    ({"kind": "async", "partial_rollout": False, "length_budget": 512}, "schedule.length_budget",
     "applies only with schedule.partial_rollout: true"),
    ({"kind": "colocated", "distqueue": {"pad_to": "batch_max"}}, "schedule.distqueue",
     "remove schedule.distqueue.pad_to, or set schedule.distqueue.packed: false"),
])
def test_a_knob_its_sibling_makes_inapplicable_is_refused(schedule, field, says):
    with pytest.raises(RlsimError) as err:
        load_scenario(workload="grpo-qwen2.5-7b", schedule=schedule)
    assert err.value.field == field and says in str(err.value)


@pytest.mark.parametrize("schedule", [
    {"kind": "colocated", "fuse": "actor", "aux_fraction": 0.25},
    {"kind": "colocated", "aux_fraction": 0.125},                 # the default: changes nothing
    {"kind": "async", "partial_rollout": True, "length_budget": 512},
    {"kind": "colocated", "distqueue": {"packed": False, "pad_to": "batch_max"}},
    {"kind": "colocated", "distqueue": {"packed": True, "pad_to": "config_max"}},
])
def test_the_knobs_load_where_they_apply_and_round_trip(schedule):
    sc = load_scenario(workload="grpo-qwen2.5-7b", schedule=schedule)
    assert load_scenario(sc.to_dict()).schedule == sc.schedule


def test_a_knob_its_sibling_makes_inapplicable_exits_2_on_the_cli(capsys):
    assert main(["run", *RUN, "--schedule", "colocated", "--set", "schedule.aux_fraction=0.3", "--json"]) == 2
    err = capsys.readouterr().err
    assert "schedule.aux_fraction" in err and "fuse: actor" in err and "Traceback" not in err
