"""Input decoding never raises a Python error (issue 14, class 1): non-UTF-8 files, YAML nested too
deep, integers past Python's digit limit, NaN / Infinity in a config.json -> exit 2 naming the file."""
import json

import pytest

from simulator.cli import main


def _run(capsys, *argv):
    code = main(["run", *argv])
    return code, capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_named(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"iterations: 1\ndescription: caf\xe9\n")
    code, err = _run(capsys, str(path))
    assert code == 2 and "latin1.yaml" in err and "UTF-8" in err and "Traceback" not in err


def test_yaml_nested_too_deep_is_refused(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    code, err = _run(capsys, str(path))
    assert code == 2 and "deep.yaml" in err


@pytest.mark.parametrize("where", ["set", "file"])
def test_an_integer_past_the_digit_limit_is_refused(tmp_path, capsys, where):
    huge = "9" * 5000
    if where == "set":
        code, err = _run(capsys, "--set", f"workload.prompts_per_step={huge}")
        assert "workload.prompts_per_step" in err
    else:
        path = tmp_path / "huge.yaml"
        path.write_text(f"iterations: {huge}\n")
        code, err = _run(capsys, str(path))
        assert "huge.yaml" in err
    assert code == 2


@pytest.mark.parametrize("constant, read_as", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf")])
def test_non_finite_numbers_in_a_config_json_are_refused(tmp_path, capsys, constant, read_as):
    """NaN / Infinity parse (a key rlsim does not read may hold one: Nemotron-H's time_step_limit);
    a key it reads refuses one, by name."""
    from simulator.llm.model_presets import PRESETS

    cfg = json.dumps({**PRESETS["llama3.1-8b"], "time_step_limit": [0.0, 1.0]}).replace("1.0]", constant + "]")
    (tmp_path / "config.json").write_text(cfg.replace('"num_hidden_layers": 32', '"num_hidden_layers": ' + constant))
    code, err = _run(capsys, "--set", f"workload.model={tmp_path}", "--iterations", "1")
    assert code == 2 and "config.json" in err and "field 'num_hidden_layers'" in err
    assert f"expected an integer, got {read_as}" in err and "Traceback" not in err


# ---- the remaining loaders: empirical length files, sweep results, MoE config values ----------

@pytest.mark.parametrize("name, content, says", [
    ("l.csv", b"1\n2\n\xe9\n", "UTF-8"),
    ("l.json", b"[1, NaN]", "NaN"),
    ("l.json", b"[1, " + b"9" * 5000 + b"]", "cannot be read"),
    ("l.json", b"[1, 1e999]", "not a positive length"),
    ("l.csv", b"a,length\n1\n2,3\n", "line 2 is not a positive length"),   # the row without a length column
    ("l.csv", b"length\n1e400\n", "not a positive length"),
])
def test_empirical_length_files_are_named(tmp_path, capsys, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    code, err = _run(capsys, "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
                     "--set", "workload.response_length.dist=empirical", "--set", f"workload.response_length.file={path}")
    assert code == 2 and name in err and says in err and "Traceback" not in err


def test_a_string_where_an_moe_config_expects_a_number(tmp_path, capsys):
    cfg = ('{"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 4, "vocab_size": 1000, '
           '"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512, "intermediate_size": 0, '
           '"shared_expert_intermediate_size": "big"}')
    (tmp_path / "config.json").write_text(cfg)
    code, err = _run(capsys, "--set", f"workload.model={tmp_path}", "--iterations", "1")
    assert code == 2 and "config.json" in err and "shared_expert_intermediate_size" in err


def test_a_config_json_error_names_the_key_it_read(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"n_embd": "wide", "n_head": 16, "n_layer": 4, "vocab_size": 10}')
    code, err = _run(capsys, "--set", f"workload.model={tmp_path}", "--iterations", "1")
    assert code == 2 and "'n_embd'" in err


def test_a_results_file_with_a_huge_integer_cell_is_read(tmp_path):
    from simulator.sweep_files import read_results_csv
    path = tmp_path / "results.csv"
    path.write_text("point_id,index,x,summary_json\n" + "a" * 16 + ",0," + "9" * 5000 + ",{}\n")
    header, rows, tail = read_results_csv(path, required=("point_id",), text_columns=("point_id", "summary_json"))
    assert rows[0]["x"] == "9" * 5000 and tail is None
