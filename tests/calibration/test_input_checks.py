"""Input checks of `rlsim calibrate`: bad log rows, micro-benchmark settings, --threads and the flags
of the other mode are refused with an error naming the file, the field or the flag (exit 2, no
traceback), and nothing is written before the check. None of these runs a micro-benchmark."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibration import logfit
from simulator.calibration.microbench import MicrobenchConfig
from simulator.calibration.runlogs import _normalize, read_run_log
from simulator.cli import main
from simulator.errors import RlsimError

SCENARIO = {"topology": {"preset": "dgx-h100", "nodes": 1}, "schedule": "colocated", "iterations": 2, "seed": 0,
            "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "samples_per_prompt": 4,
                         "mini_batch_prompts": 8,
                         "response_length": {"dist": "lognormal", "median": 256, "sigma": 1.0, "max": 1024}}}
GOOD_LOG = "".join(f'{{"step":{i},"timing_s/gen":{200 + i}}}\n' for i in range(1, 5))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["calibrate", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _log(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# 1. the step column ---------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "text", "words"), [
    ("s.jsonl", '{"step":"abc","timing_s/gen":1}\n{"step":2,"timing_s/gen":2}\n', "'abc' is not a number"),
    ("s.csv", "step,timing_s/gen\n,1\n2,3\n3,4\n", "line 2: has no step number"),
    ("n.jsonl", '{"timing_s/gen":1}\n{"step":2,"timing_s/gen":2}\n', "line 1: has no step number"),
    ("f.jsonl", '{"step":1.7,"timing_s/gen":1}\n{"step":2,"timing_s/gen":2}\n', "1.7 is not a whole number"),
])
def test_bad_step_column_names_the_file_and_row(tmp_path: Path, name: str, text: str, words: str) -> None:
    path = _log(tmp_path, name, text)
    with pytest.raises(RlsimError) as info:
        read_run_log(path)
    assert info.value.source == path and info.value.field == "step"
    assert words in str(info.value)


# 2. non-finite times, ragged CSV, JSON booleans ---------------------------------------------------
@pytest.mark.parametrize(("name", "text", "words"), [
    ("i.jsonl", '{"step":1,"timing_s/gen":200}\n{"step":2,"timing_s/gen":Infinity}\n', "line 2: timing_s/gen is inf, not a finite"),
    ("i.csv", "step,timing_s/gen\n1,200\n2,1e400\n", "line 3: timing_s/gen is inf, not a finite"),
    ("b.jsonl", '{"step":1,"timing_s/gen":true}\n{"step":2,"timing_s/gen":2}\n', "line 1: true is not a number"),
])
def test_non_finite_or_boolean_times_are_refused(tmp_path: Path, name: str, text: str, words: str) -> None:
    with pytest.raises(RlsimError) as info:
        read_run_log(_log(tmp_path, name, text))
    assert info.value.field == "timing_s/gen" and words in str(info.value)


def test_ragged_csv_is_refused(tmp_path: Path) -> None:
    path = _log(tmp_path, "r.csv", "step,timing_s/gen\n1,2,3,4\n2,3\n")
    with pytest.raises(RlsimError, match="line 2 has 4 fields, the header 2") as info:
        read_run_log(path)
    assert info.value.source == path


# 3. micro-benchmark settings and --threads ------------------------------------------------------
@pytest.mark.parametrize(("setting", "field"), [
    ({"dtypes": ["fp64"]}, "microbench.dtypes.0"), ({"dtypes": []}, "microbench.dtypes"),
    ({"copy_sizes_bytes": [-5]}, "microbench.copy_sizes_bytes.0"),
    ({"gemm_shapes": [[0, 0, 0]]}, "microbench.gemm_shapes.0.0"),
    ({"max_gemm_call_s": -1}, "microbench.max_gemm_call_s"),
    ({"max_gemm_call_s": float("inf")}, "microbench.max_gemm_call_s"),
    ({"decode_layers": [0]}, "microbench.decode_layers.0"), ({"decode_batches": [0]}, "microbench.decode_batches.0"),
    ({"decode_dtype": "int8"}, "microbench.decode_dtype"), ({"decode_num_heads": 3}, "microbench.decode_num_heads"),
    ({"collective_world_size": 0}, "microbench.collective_world_size"),
    ({"collective_ops": ["gather"]}, "microbench.collective_ops.0"),
])
def test_microbench_settings_are_bounded(setting: dict, field: str) -> None:
    with pytest.raises(RlsimError) as info:
        MicrobenchConfig.from_mapping(setting, source="--set microbench.*")
    assert info.value.field == field


def test_microbench_defaults_are_valid() -> None:
    MicrobenchConfig()


@pytest.mark.parametrize("threads", ["100000", "0", "-5"])
def test_threads_is_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path, threads: str) -> None:
    code, err = _cli(capsys, "--device", "cpu", "--threads", threads, "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and "field '--threads'" in err
    assert not (tmp_path / "p.yaml").exists()


def test_bad_microbench_setting_through_the_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = _cli(capsys, "--device", "cpu", "--set", "microbench.dtypes=[fp64]", "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and "microbench.dtypes.0" in err and "fp64" in err


# 4. flags of the other mode ------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [["--scenario", "x.yaml"], ["--fit", "topology.device.gemm_efficiency"],
                                   ["--skip-steps", "1"], ["--max-evaluations", "3"], ["--log-run", "r"],
                                   ["--predict", "topology.nodes=2"], ["--predict-scenario", "x.yaml"]])
def test_log_flags_are_refused_with_device(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           extra: list[str]) -> None:
    code, err = _cli(capsys, "--device", "cpu", *extra, "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and f"{extra[0]} applies to --from-log" in err


def test_replay_settings_need_replay(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = _cli(capsys, "--device", "cpu", "--set", "replay.num_prompts=8", "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and "field 'replay.num_prompts'" in err and "--replay" in err


@pytest.mark.parametrize("extra", [["--threads", "7"], ["--threads", "1"], ["--backend", "torch"]])
def test_device_flags_are_refused_with_from_log(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                extra: list[str]) -> None:
    log = _log(tmp_path, "ok.jsonl", GOOD_LOG)
    code, err = _cli(capsys, "--from-log", log, "--scenario", "x.yaml", *extra, "--out", str(tmp_path / "o.yaml"))
    assert code == 2 and f"{extra[0]} applies to --device" in err


@pytest.mark.parametrize("name", ["ok.jsonl", "ok.csv"])
def test_log_run_needs_a_wandb_export(tmp_path: Path, name: str) -> None:
    text = GOOD_LOG if name.endswith(".jsonl") else "step,timing_s/gen\n1,200\n2,201\n"
    with pytest.raises(RlsimError) as info:
        read_run_log(_log(tmp_path, name, text), run="runZ")
    assert info.value.field == "--log-run"


# 5. --skip-steps and --predict names; nothing written before --predict is checked -----------------
def test_skip_steps_error_names_the_flag(tmp_path: Path) -> None:
    run = logfit.LoggedRun(read_run_log(_log(tmp_path, "ok.jsonl", GOOD_LOG)), SCENARIO)
    with pytest.raises(RlsimError) as info:
        logfit.fit_runs([run], skip_steps=10)
    assert info.value.field == "--skip-steps" and "no steps left after skipping 10" in str(info.value)


def test_a_log_without_steps_says_so(tmp_path: Path) -> None:
    run = logfit.LoggedRun(read_run_log(_log(tmp_path, "h.csv", "step,timing_s/gen\n")), SCENARIO)
    with pytest.raises(RlsimError, match="the log has no steps"):
        logfit.fit_runs([run])


@pytest.mark.parametrize(("item", "words"), [("topology.nodes", "field '--predict'"), ("bogus.key=1", "--predict")])
def test_bad_predict_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path, item: str,
                                    words: str) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "o.yaml"
    code, err = _cli(capsys, "--from-log", _log(tmp_path, "ok.jsonl", GOOD_LOG), "--scenario", str(scenario),
                     "--predict", item, "--out", str(out))
    assert code == 2 and words in err and "'--set'" not in err
    assert not out.exists()


# 6. a logged stage the scenario lacks is left out of the fit, with a note -------------------------
def test_stage_the_scenario_lacks_is_left_out_with_a_note() -> None:
    truth = logfit.simulate_timings(SCENARIO)
    frame = _frame({"timing_s/gen": truth["generate"], "timing_s/update_actor": truth["update_actor"],
                    "timing_s/update_critic": 100.0, "timing_s/values": 40.0})
    fit = logfit.fit_runs([logfit.LoggedRun(_normalize(frame, "critic.jsonl"), SCENARIO)],
                          ["topology.device.gemm_efficiency"], max_evaluations=2)
    assert set(fit.stages["critic.jsonl"]) == {"generate", "update_actor"}
    assert any("left out of the fit" in n and "values, update_critic" in n for n in fit.notes)
    assert fit.rms_before < 0.05


def test_no_simulated_stage_at_all_is_an_error() -> None:
    frame = _frame({"timing_s/update_critic": 100.0})
    with pytest.raises(RlsimError, match="simulates none of the logged stages"):
        logfit.fit_runs([logfit.LoggedRun(_normalize(frame, "critic.jsonl"), SCENARIO)],
                        ["topology.device.gemm_efficiency"], max_evaluations=2)


def _frame(columns: dict[str, float]):
    import pandas as pd
    return pd.DataFrame([{"step": s, **{k: v * (1.0 + 0.001 * s) for k, v in columns.items()}}
                         for s in range(1, 5)]).astype({"step": np.int64})


@pytest.mark.parametrize("name, text", [
    ("log.jsonl", '{"step": 1, "timing_s/gen": 1.0, "timing_s/gen": 2.0}\n'),   # json kept the last
    ("log.csv", "step,timing_s/gen,timing_s/gen\n1,1.0,2.0\n"),                   # pandas renamed one x.1
])
def test_a_timing_given_twice_in_one_record_is_refused(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RlsimError, match="twice"):
        read_run_log(path)
