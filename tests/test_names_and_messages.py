"""Names and messages (issue 14 class 9): workload names kept whole, errors in a --workload file
naming that file, config.json errors naming the config.json key, `--price =2` named as such."""
import json
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.llm.architecture import load_model
from simulator.scenario import load_scenario, workload_name

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("spec, name", [("grpo-qwen2.5-7b", "grpo-qwen2.5-7b"), ("dapo-qwen2.5-32b", "dapo-qwen2.5-32b"),
                                        ("dir/my.v2.yaml", "my.v2"), ("w.yml", "w"), ("plain", "plain")])
def test_workload_name_keeps_the_dots_of_a_preset_name(spec, name):
    assert workload_name(spec) == name


def test_the_two_qwen2_5_workloads_keep_distinct_names():
    names = {load_scenario(workload=w).workload.name for w in ("grpo-qwen2.5-7b", "dapo-qwen2.5-32b")}
    assert names == {"grpo-qwen2.5-7b", "dapo-qwen2.5-32b"}


@pytest.fixture
def bad_workload(tmp_path):
    text = (ROOT / "workloads" / "grpo-qwen2.5-7b.yaml").read_text()
    lines = [("prompts_per_step: -3" if ln.startswith("prompts_per_step:") else ln) for ln in text.splitlines()]
    path = tmp_path / "bad-workload.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_error_in_a_workload_file_names_the_file(bad_workload):
    with pytest.raises(RlsimError) as info:
        load_scenario(workload=str(bad_workload))
    assert info.value.source == str(bad_workload) and info.value.field == "workload.prompts_per_step"
    assert "<default scenario" not in str(info.value)


def test_an_error_in_a_workload_file_under_a_preset_key_names_the_file(bad_workload):
    with pytest.raises(RlsimError) as info:
        load_scenario(workload={"preset": str(bad_workload), "name": "mine"})
    assert info.value.source == str(bad_workload) and info.value.field == "workload.prompts_per_step"


def test_a_set_value_keeps_the_scenario_as_its_source(bad_workload):
    with pytest.raises(RlsimError) as info:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.prompts_per_step=-2"])
    assert info.value.source == "<default scenario, workload grpo-qwen2.5-7b>"
    with pytest.raises(RlsimError) as both:   # one error from the file, one from --set: both named
        load_scenario(workload=str(bad_workload), overrides=["workload.samples_per_prompt=-2"])
    assert str(bad_workload) in str(both.value) and f"<default scenario, workload {bad_workload}>" in str(both.value)


def test_cli_names_the_workload_file(bad_workload, capsys):
    assert main(["run", "--workload", str(bad_workload), "--iterations", "1"]) == 2
    assert str(bad_workload) in capsys.readouterr().err


def test_an_error_found_while_running_names_the_scenario_file(tmp_path):
    # the vpp check runs in the training cost model, which knows the field but not the file
    path = tmp_path / "mine.yaml"
    path.write_text("workload:\n  preset: grpo-qwen2.5-7b\n  train_layout: {tp: 1, pp: 6, vpp: 2}\n"
                    "topology: {preset: dgx-h100, nodes: 2}\n")
    with pytest.raises(RlsimError) as info:
        simulate(str(path), iterations=1)
    assert info.value.source == str(path) and info.value.field == "workload.train_layout.vpp"
    assert str(info.value).startswith(f"{path}: field 'workload.train_layout.vpp'")


def _config(tmp_path, **cfg):
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 100, "intermediate_size": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **cfg}))
    return path


@pytest.mark.parametrize("cfg, key", [
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"intermediate_size": 0}, "intermediate_size"),
    ({"num_attention_heads": 6, "num_key_value_heads": 4, "head_dim": 16}, "num_key_value_heads"),
    ({"num_attention_heads": 6}, "num_attention_heads"),   # 6 heads do not divide hidden 64, no head_dim
    ({"hidden_size": "wide"}, "hidden_size"),
])
def test_config_json_errors_name_the_config_key(tmp_path, cfg, key):
    with pytest.raises(RlsimError) as info:
        load_model(str(_config(tmp_path, **cfg)))
    assert info.value.field == key and info.value.source.endswith("config.json")
    internal = {"num_layers", "vocab", "ffn_hidden", "num_kv_heads", "hidden"} - {key}
    assert not any(f"'{name}'" in str(info.value) or f"{name} must" in str(info.value) for name in internal)


def test_gpt2_keys_are_named_as_written(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 0, "vocab_size": 100}))
    with pytest.raises(RlsimError) as info:
        load_model(str(path))
    assert info.value.field == "n_layer" and "n_layer must be > 0" in str(info.value)


@pytest.mark.parametrize("price", ["=2", " =2"])
def test_a_price_without_a_device_name_is_named(price, capsys):
    assert main(["sweep", "--grid", "seed=1", "--iterations", "1", "--price", price]) == 2
    err = capsys.readouterr().err
    assert "names no device" in err and "--price 2" in err and "h100" in err
