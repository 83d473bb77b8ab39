"""Input decoding never raises a Python error (issue 14, class 1): non-UTF-8 files, YAML nested too
deep, integers past Python's digit limit, NaN / Infinity in a config.json -> exit 2 naming the file."""
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


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_a_config_json_are_refused(tmp_path, capsys, constant):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": ' + constant + ', "hidden_size": 4096}')
    code, err = _run(capsys, "--set", f"workload.model={tmp_path}", "--iterations", "1")
    assert code == 2 and "config.json" in err and constant.lstrip("-") in err
