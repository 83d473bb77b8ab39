"""Every numeric field of the scenario's models is finite and not a bool (issue 14, classes 2 and 5):
`.inf` / `.nan` and `true` / `false` are refused at validation, naming the full dotted field, for
every field the models declare (walked from the models, so a new field is covered without an edit)."""
import typing

import pytest
from pydantic import BaseModel

from simulator.cli import main
from simulator.scenario import SCHEDULE_CLASSES, ScheduleConfig, WorkloadConfig
from simulator.strict_model import StrictModel, takes_bool

TINY = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1"]


def _numeric_fields(model: type[BaseModel], prefix: str):
    for name, info in model.model_fields.items():
        if typing.get_origin(info.annotation) is list:   # schedule.failures: a list of events, not --set
            continue
        args = (info.annotation, *typing.get_args(info.annotation))
        nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        for sub in nested:
            yield from _numeric_fields(sub, f"{prefix}{name}.")
        if not nested and any(a in (int, float) for a in args) and not takes_bool(info.annotation):
            yield f"{prefix}{name}", float in args


FIELDS = sorted(set(_numeric_fields(WorkloadConfig, "workload.")) | set(_numeric_fields(ScheduleConfig, "schedule."))
                | {("iterations", False), ("seed", False), ("limits.max_work", False)})


def _kind_for(key: str) -> list[str]:
    """--set schedule.kind=K for a kind that takes the knob (others refuse it as inapplicable)."""
    if not key.startswith("schedule."):
        return []
    knob = key.split(".")[1]
    kinds = [k for k, c in SCHEDULE_CLASSES.items() if knob in c.accepts()] or ScheduleConfig.kinds_accepting(knob)
    extra = ["--set", "schedule.placement=disaggregated"] if kinds and kinds[0] == "stalesync" and knob in (
        "rollout_fraction", "rollout_devices", "tail_threshold") else []
    return ["--set", f"schedule.kind={kinds[0]}", *extra] if kinds else []


def test_the_walk_finds_the_fields():
    keys = {k for k, _ in FIELDS}
    assert {"schedule.staleness", "workload.inference.step_overhead_s", "schedule.switch.overhead_s",
            "workload.train_params.comm.tp_overlap_fraction", "workload.prompts_per_step"} <= keys
    assert len(keys) > 60


def _groups(keys):
    """Keys that one run can set together (the same schedule kind), so every field is checked in a
    few runs: pydantic lists every invalid field of one validation."""
    groups: dict[tuple, list[str]] = {}
    for key in keys:
        # the seed is read (and checked) before validation; iterations is given without --iterations
        # (the two together are refused: the --set would win)
        alone = (key,) if key in ("seed", "iterations") else ()
        groups.setdefault((*_kind_for(key), *alone), []).append(key)
    return sorted(groups.items())


def _check_group(capsys, kind_args, keys, value, says):
    tiny = TINY[:-2] if "iterations" in keys else TINY   # TINY ends with --iterations 1
    argv = ["run", *tiny, *[a for a in kind_args if a not in ("seed", "iterations")]]
    for key in keys:
        argv += ["--set", f"{key}={value}"]
    code = main(argv)
    err = capsys.readouterr().err
    missing = [k for k in keys if f"'{k}'" not in err]
    assert code == 2 and not missing and says in err.lower() and "Traceback" not in err, (missing, err[:500])


@pytest.mark.parametrize("kind_args, keys", _groups([k for k, is_float in FIELDS if is_float]))
@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_every_float_field_refuses_non_finite(capsys, kind_args, keys, value):
    _check_group(capsys, kind_args, keys, value, "finite")


@pytest.mark.parametrize("kind_args, keys", _groups([k for k, _ in FIELDS]))
def test_every_number_field_refuses_a_bool(capsys, kind_args, keys):
    _check_group(capsys, kind_args, keys, "true", "true")


def test_bool_fields_still_take_bools():
    class M(StrictModel):
        flag: bool = False
        either: bool | int = 0
        n: int = 0
    assert M(flag=True, either=True).flag is True
    with pytest.raises(ValueError, match="a bool"):
        M(n=True)


def test_staleness_inf_was_an_overflow_and_is_now_refused(capsys):
    code = main(["run", *TINY, "--schedule", "stalesync", "--set", "schedule.staleness=.inf", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "schedule.staleness" in err and "finite" in err


def test_a_quoted_number_is_text_not_the_number_unless_the_field_reads_units():
    """prompts_per_step: '64' ran as 64 (lax mode; found by a new-user trial); a field whose validator
    reads text (a bandwidth '25GB/s') still takes it."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    with pytest.raises(RlsimError, match="text: write the number without quotes") as caught:
        load_scenario({"workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": "64"}})
    assert caught.value.field == "workload.prompts_per_step"
    sc = load_scenario({"workload": "grpo-qwen2.5-7b", "schedule": {"kind": "colocated",
                                                                     "distqueue": {"bw_Bps": "25GB/s"}}})
    assert sc.schedule.distqueue.bw_Bps == 25e9


def test_a_quoted_number_is_text_for_a_schedule_knob_whose_validator_only_gates_it():
    """schedule.staleness: '1' ran as 1: the applicability gate is a "before" validator, and the rule
    skipped every field such a validator reads, though the gate reads no text."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    with pytest.raises(RlsimError, match="text: write the number without quotes") as caught:
        load_scenario({"workload": "grpo-qwen2.5-7b", "schedule": {"kind": "stalesync", "staleness": "1"}})
    assert caught.value.field == "schedule.staleness"
    assert load_scenario({"workload": "grpo-qwen2.5-7b",
                          "schedule": {"kind": "stalesync", "staleness": 1}}).schedule.staleness == 1


def test_a_validator_marked_as_passing_its_value_on_keeps_the_quoted_number_rule():
    from pydantic import field_validator

    from simulator.strict_model import passes_value_on

    class Gated(StrictModel):
        n: int = 0

        @field_validator("n", mode="before")
        @classmethod
        @passes_value_on
        def _gate(cls, value):
            return value

    class Parsing(StrictModel):
        n: int = 0

        @field_validator("n", mode="before")
        @classmethod
        def _parse(cls, value):
            return int(value.rstrip("x")) if isinstance(value, str) else value

    with pytest.raises(ValueError, match="without quotes"):
        Gated(n="3")
    assert Parsing(n="3x").n == 3


@pytest.mark.parametrize("value, said", [("yes", "text: write true or false"), ("no", "text: write true or false"),
                                         (1, "a number: write true or false")])
def test_text_or_a_number_is_not_a_flag(value, said):
    """partial_rollout: "yes" (or 1) ran as true and "no" as false while a quoted number was refused
    (found by a new-user trial); a bool, and None where the field takes it, still pass."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario

    schedule = {"kind": "stalesync", "partial_rollout": value, "length_budget": 1024}
    with pytest.raises(RlsimError, match=said) as caught:
        load_scenario({"workload": "grpo-qwen2.5-7b", "schedule": schedule})
    assert caught.value.field == "schedule.partial_rollout"
    assert load_scenario({"workload": "grpo-qwen2.5-7b",
                          "schedule": {**schedule, "partial_rollout": True}}).schedule.partial_rollout is True

    class M(StrictModel):
        maybe: bool | None = None
        either: bool | int = 0
    assert M(maybe=None).maybe is None and M(either=3).either == 3   # a number goes where a number may
