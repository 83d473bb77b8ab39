"""Direct tests of simulator/overrides.py: `--set KEY=VALUE` into nested mappings."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.overrides import apply_overrides, parse_assignment, section, set_dotted


@pytest.mark.parametrize(("item", "expected"), [
    ("topology.nodes=16", ("topology.nodes", 16)),
    ("schedule.staleness=0.5", ("schedule.staleness", 0.5)),
    ("schedule.partial_rollout=true", ("schedule.partial_rollout", True)),
    ("planner.space.tp=[16, 8]", ("planner.space.tp", [16, 8])),
    ("workload.model=qwen2.5-7b", ("workload.model", "qwen2.5-7b")),
    ("a.b=x=y", ("a.b", "x=y")),            # only the first '=' separates
    (" seed = 3", ("seed", 3)),             # spaces around the key are trimmed
    ("workload.name=", ("workload.name", "")),
    ("a={b: 1}", ("a", {"b": 1})),
    ("a=@home", ("a", "@home")),            # not YAML: kept as the raw text
    # YAML 1.2 exponent floats, which PyYAML's YAML 1.1 reads as strings (found by fuzzing topology keys)
    ("topology.host.efficiency=9e-1", ("topology.host.efficiency", 0.9)),
    ("a=1.5e3", ("a", 1500.0)),
    ("a=-2E+2", ("a", -200.0)),
    ("a=1e", ("a", "1e")),
    ("a=400Gb/s", ("a", "400Gb/s")),
])
def test_parse_assignment(item: str, expected: tuple[str, object]) -> None:
    assert parse_assignment(item) == expected


@pytest.mark.parametrize("item, message, fix", [
    ("a=[unclosed", "the list opened with '[' is not closed (no ']' ends it)", "close it: --set 'a=[unclosed]'"),
    ("a=[1, [2", "the list opened with '[' is not closed (no ']' ends it)", "close it: --set 'a=[1, [2]]'"),
    ("a={b: 1", "the mapping opened with '{' is not closed (no '}' ends it)", "close it: --set 'a={b: 1}'"),
    ("a=[1]]", "cannot read the list '[1]]': did not find expected <document start>", "--set 'a=[1, 2]'"),
])
def test_a_list_or_mapping_yaml_cannot_read_is_refused_naming_the_bracket(item: str, message: str, fix: str) -> None:
    """An audit (2026-12-07): `--set key=[1` was kept as the text '[1', which a number field refused with
    "write the number without quotes" (there were none)."""
    with pytest.raises(RlsimError) as info:
        parse_assignment(item)
    assert info.value.field == "a" and info.value.message == message and fix in info.value.fix


@pytest.mark.parametrize("item, key, fix", [
    ("workload.response_length.sigma={dist:uniform,low:0.8,high:1.2}", "dist:uniform",
     "{dist: uniform, low: 0.8, high: 1.2}"),
    ("topology={preset:dgx-h100, nodes: 2}", "preset:dgx-h100", "{preset: dgx-h100, nodes: 2}"),
    ("schedule.failures=[{at_s:10, fail: 1}]", "at_s:10", "[{at_s: 10, fail: 1}]"),
])
def test_a_mapping_key_with_no_space_after_its_colon_is_refused_as_such(item: str, key: str, fix: str) -> None:
    """A sweep audit: --set 'workload.response_length.sigma={dist:uniform,low:0.8,high:1.2}' (no spaces)
    is YAML for the keys 'dist:uniform', 'low:0.8', 'high:1.2' with no values, and was refused as
    "expected a finite number, got {'dist:uniform': None, ...} (fix: give ... as a number)": the
    distribution meant went unsaid."""
    with pytest.raises(RlsimError, match=f"the key '{key}' with no value") as exc:
        parse_assignment(item)
    assert exc.value.field == item.split("=")[0] and fix in exc.value.fix
    assert parse_assignment("workload.name={a: 'x:y'}")[1] == {"a": "x:y"}   # a colon inside a value stays


@pytest.mark.parametrize("item", ["topology.nodes", "=3", "  =3", ""])
def test_parse_assignment_refuses_a_missing_key_or_sign(item: str) -> None:
    with pytest.raises(RlsimError) as info:
        parse_assignment(item)
    assert info.value.field == "--set" and "KEY=VALUE" in info.value.fix


def test_set_dotted_makes_mappings_and_turns_preset_names_into_mappings() -> None:
    data: dict = {"topology": "dgx-h100", "workload": {"model": "x"}}
    set_dotted(data, "topology.nodes", 4)
    set_dotted(data, "workload.response_length.max", 16384)
    set_dotted(data, "schedule.kind", "async")
    assert data == {"topology": {"preset": "dgx-h100", "nodes": 4},
                    "workload": {"model": "x", "response_length": {"max": 16384}},
                    "schedule": {"kind": "async"}}


def test_set_dotted_refuses_to_walk_through_a_scalar() -> None:
    data = {"iterations": 3}
    with pytest.raises(RlsimError) as info:
        set_dotted(data, "iterations.max", 4)
    assert info.value.field == "iterations.max" and "'iterations'" in str(info.value)
    assert data == {"iterations": 3}


def test_a_key_under_a_planned_layout_is_refused_naming_it() -> None:
    # 'auto' is no preset: it became {'preset': 'auto'}, refused as an unknown layout key 'preset'
    with pytest.raises(RlsimError) as err:
        apply_overrides({}, ["workload.train_layout=auto", "workload.train_layout.pp=2"])
    assert err.value.field == "workload.train_layout.pp" and err.value.source == "--set"
    assert "'workload.train_layout' is 'auto'" in err.value.message
    # a later whole value that would drop an earlier key under it is an error, not a silent drop
    # (--set schedule.staleness=4 --set schedule=async ran at async's default staleness)
    with pytest.raises(RlsimError, match="dropping --set workload.train_layout.pp=2") as err:
        apply_overrides({}, ["workload.train_layout.pp=2", "workload.train_layout=auto"])
    assert err.value.field == "workload.train_layout"
    assert apply_overrides({}, ["seed=1", "seed=2"]) == {"seed": 2}   # the same key again: the later wins


def test_apply_overrides_copies_and_applies_in_order() -> None:
    base = {"topology": {"preset": "dgx-h100", "nodes": 1}, "seed": 0}
    before = copy.deepcopy(base)
    out = apply_overrides(base, ["topology.nodes=2", "seed=5", "topology.nodes=8"])
    assert out == {"topology": {"preset": "dgx-h100", "nodes": 8}, "seed": 5}
    assert base == before  # the input is not touched
    out["topology"]["nodes"] = 99
    assert base["topology"]["nodes"] == 1  # a deep copy


def test_section() -> None:
    items = ["topology.nodes=2", "topology.groups.a.nodes=3", "topologyx.nodes=5", "workload.model=m", "topology=x"]
    assert section(items, "topology") == {"nodes": 2, "groups": {"a": {"nodes": 3}}}
    assert section(items, "schedule") == {}


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=6)
paths = st.lists(names, min_size=1, max_size=4)
scalars = st.integers(-10**6, 10**6) | st.booleans() | names


def _get(mapping: dict, path: list[str]) -> object:
    for part in path:
        mapping = mapping[part]
    return mapping


def _render(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@given(st.lists(st.tuples(paths, scalars), min_size=1, max_size=8))
def test_last_write_wins_on_nested_keys(writes: list[tuple[list[str], object]]) -> None:
    # Keep only writes that never pass through a key made a leaf by an earlier write (that is an error).
    kept: list[tuple[list[str], object]] = []
    for path, value in writes:
        clash = any(path[:len(p)] == p and len(p) < len(path) or p[:len(path)] == path and len(path) < len(p)
                    for p, _ in kept)
        if not clash:
            kept.append((path, value))
    items = [f"{'.'.join(p)}={_render(v)}" for p, v in kept]
    out = apply_overrides({}, items)
    final = {tuple(p): v for p, v in kept}
    for path, value in final.items():
        got = _get(out, list(path))
        # a word such as 'yes' or 'null' reads as YAML; compare with what YAML makes of the text
        assert got == parse_assignment(f"k={_render(value)}")[1]
    assert section([f"top.{i}" for i in items], "top") == out


@given(paths, scalars, st.dictionaries(names, scalars, max_size=4))
def test_overrides_keep_unrelated_keys(path: list[str], value: object, others: dict) -> None:
    base = {"Z-" + k: v for k, v in others.items()}  # disjoint from the written keys
    out = apply_overrides(base, [f"{'.'.join(path)}={_render(value)}"])
    assert {k: v for k, v in out.items() if k.startswith("Z-")} == base


def test_keys_set_under_a_schedule_given_as_a_string_join_its_kind():
    """--set schedule=stalesync --set schedule.staleness=1 made {preset: stalesync, staleness: 1}
    (found by a new-user trial); a scenario file's `schedule: stalesync` is the kind."""
    from simulator.overrides import apply_overrides
    out = apply_overrides({}, ["schedule=stalesync", "schedule.staleness=1", "workload=grpo-qwen2.5-7b",
                               "workload.prompts_per_step=64"])
    assert out["schedule"] == {"kind": "stalesync", "staleness": 1}
    assert out["workload"] == {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 64}


def test_a_list_item_is_set_by_its_position_as_errors_name_it():
    """schedule.failures.0.at_s (and failures[0].at_s, as the topology's errors write list items) sets
    the item a scenario gave; it was refused as an unknown key (found by a new-user trial)."""
    from simulator.errors import RlsimError
    from simulator.overrides import apply_overrides
    base = {"schedule": {"failures": [{"at_s": 10, "fail": "node:0"}, {"at_s": 50, "fail": "node:1"}]}}
    out = apply_overrides(base, ["schedule.failures.0.at_s=20", "schedule.failures[1].fail=node:2"])
    assert out["schedule"]["failures"] == [{"at_s": 20, "fail": "node:0"}, {"at_s": 50, "fail": "node:2"}]
    assert base["schedule"]["failures"][0]["at_s"] == 10   # a copy
    with pytest.raises(RlsimError, match="has 2 item"):
        apply_overrides(base, ["schedule.failures.2.at_s=5"])
    with pytest.raises(RlsimError, match="is a list"):
        apply_overrides(base, ["schedule.failures.at_s=5"])


def test_an_item_of_a_list_not_given_is_refused_naming_the_list():
    """`--set schedule.failures[0].at_s=1` on a scenario with no failures made {'0': {'at_s': 1}},
    refused as 'Input should be a valid list' and blamed on the scenario file (a --set fuzz)."""
    with pytest.raises(RlsimError, match="'schedule.failures' is not given, so it has no item 0") as info:
        apply_overrides({"schedule": {"kind": "colocated"}}, ["schedule.failures[0].at_s=1"])
    assert info.value.field == "schedule.failures.0.at_s" and info.value.fix == "set the whole list (schedule.failures=[...])"


def test_a_key_given_twice_is_refused():
    """The last of two items of one key won without a word (a --set fuzz): the first was read past."""
    from simulator.overrides import refuse_a_key_given_twice
    refuse_a_key_given_twice(["topology.nodes=1", "topology.supernodes=1", "schedule=async", "schedule.staleness=2"])
    for items in (["topology.nodes=1", "topology.nodes=2"], ["schedule=async", "schedule=stalesync"],
                  ["iterations=2", "iterations=2"], ["schedule.failures[0].at_s=1", "schedule.failures.0.at_s=2"]):
        with pytest.raises(RlsimError, match="is given twice") as info:
            refuse_a_key_given_twice(items)
        assert info.value.field == parse_assignment(items[0])[0] and "once" in info.value.fix
