"""presets.read_yaml: parsed files are kept by their text; every read returns its own copy."""
import pytest

from simulator import presets
from simulator.errors import RlsimError


def test_read_yaml_returns_a_fresh_copy_each_read(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("a: {b: [1, 2]}\nc: x\n")
    first = presets.read_yaml(path)
    first["a"]["b"].append(3)
    first["c"] = "changed"
    assert presets.read_yaml(path) == {"a": {"b": [1, 2]}, "c": "x"}


def test_read_yaml_sees_an_edited_file_even_of_the_same_size(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("a: 1\n")
    assert presets.read_yaml(path) == {"a": 1}
    path.write_text("a: 2\n")          # same size, possibly the same mtime: the text is the key
    assert presets.read_yaml(path) == {"a": 2}


def test_read_yaml_keeps_the_aliases_shared_as_the_parser_gives_them(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("a: &x [1, 2]\nb: *x\n")
    for _ in range(2):                 # parsed, then from the kept copy
        data = presets.read_yaml(path)
        assert data["a"] is data["b"] and data == {"a": [1, 2], "b": [1, 2]}


def test_read_yaml_errors_again_on_every_read(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("- 1\n- 2\n")
    for _ in range(2):
        with pytest.raises(RlsimError, match="mapping at the top level"):
            presets.read_yaml(path)


def test_kept_parses_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(presets, "_parsed", {})
    for i in range(presets._PARSED_MAX_ENTRIES + 5):
        path = tmp_path / f"{i}.yaml"
        path.write_text(f"a: {i}\n")
        assert presets.read_yaml(path) == {"a": i}
    assert len(presets._parsed) <= presets._PARSED_MAX_ENTRIES


@pytest.mark.parametrize("text, key, line", [
    ("data:\n  batch: 16\n  max_len: 512\ndata:\n  batch: 32\n", "data", 1),   # the first block was dropped
    ("iterations: 1\niterations: 2\n", "iterations", 1),
    ("schedule:\n  kind: colocated\n  kind: stalesync\n", "kind", 2),
])
def test_a_key_given_twice_is_an_error_naming_its_lines(text, key, line):
    from simulator.errors import RlsimError
    from simulator.presets import load_yaml_text

    with pytest.raises(RlsimError) as info:
        load_yaml_text(text, source="s.yaml")
    assert f"key '{key}' is given twice (first at line {line})" in str(info.value)


def test_a_merge_key_may_be_overridden():
    from simulator.presets import load_yaml_text

    text = "base: &b {tp: 1, pp: 2}\nlayout:\n  <<: *b\n  tp: 4\n"
    assert load_yaml_text(text, source="s.yaml")["layout"] == {"tp": 4, "pp": 2}


@pytest.mark.parametrize(("kind", "text"), [("topologies", "preset: dgx-a100\nnodes: 1\n"),
                                            ("workloads", "preset: grpo-qwen2.5-7b\nprompts_per_step: 64\n")])
def test_a_preset_key_in_a_topology_or_workload_file_is_refused_not_dropped(tmp_path, kind, text):
    """A topology file's `preset: dgx-a100` was dropped without a word (it ran as the file's own
    device); a workload file's gave three errors (a new-user trial). The inline mapping takes it."""
    from simulator.presets import resolve
    path = tmp_path / "file.yaml"
    path.write_text(text)
    with pytest.raises(RlsimError) as caught:
        resolve(kind, str(path))
    assert caught.value.field == "preset" and "{preset: " in caught.value.fix


@pytest.mark.parametrize("text, said, fix", [
    ("# nothing here\n", "the file is empty", "key: value lines"),
    ("- a\n- b\n", "got list", "not a list"),
    ("workload:\n\tpreset: grpo-qwen2.5-7b\n", "not valid YAML", "does not take tabs"),
])
def test_an_empty_a_list_or_a_tab_indented_file_says_what_is_wrong(tmp_path, text, said, fix):
    # "expected a YAML mapping at the top level" with no fix for an empty file, and a tab's
    # "cannot start any token" without the word tab (found by a new-user trial)
    from simulator.presets import read_yaml

    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(RlsimError, match=said) as caught:
        read_yaml(path)
    assert fix in caught.value.fix and caught.value.source == str(path)


def test_a_preset_or_device_field_one_typo_away_says_did_you_mean():
    # `--workload grpo-qwen2.5-7bb` and `topology.device.gemm_efficency` listed every name, none
    # picked out (found by a new-user trial)
    from simulator.hardware.devices import device_from_mapping

    with pytest.raises(RlsimError, match="did you mean 'grpo-qwen2.5-7b'"):
        presets.resolve("workloads", "grpo-qwen2.5-7bb")
    with pytest.raises(RlsimError, match="did you mean 'dgx-h100'"):
        presets.resolve("topologies", "dgx-h10")
    with pytest.raises(RlsimError, match="did you mean 'gemm_efficiency'"):
        device_from_mapping({"base": "h100", "gemm_efficency": 0.5})
