"""Run logs: verl-style JSONL / CSV reading, per-stage scale factors, prediction at other scales."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.calibration.runlogs import (
    fit_stage_scales,
    read_run_log,
    stages_from_summary,
    synthetic_log,
    write_jsonl,
)
from simulator.errors import RlsimError

TRUE_S = {"generate": 120.0, "old_log_prob": 14.0, "reference": 12.0, "update_actor": 55.0}


def _log(tmp_path: Path, fmt: str = "jsonl", seed: int = 0, noise: float = 0.03):
    frame = synthetic_log(np.random.default_rng(seed), steps=12, true_s=TRUE_S, noise=noise)
    path = tmp_path / f"log.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        write_jsonl(frame, path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_reads_stages_and_metrics(tmp_path: Path, fmt: str) -> None:
    log = read_run_log(_log(tmp_path, fmt))
    assert log.stages == ["generate", "old_log_prob", "reference", "update_actor"]
    assert list(log.frame["step"]) == list(range(1, 13))
    for column in ("step_s", "throughput_tokens_per_s_per_device", "response_length_mean", "response_length_max"):
        assert column in log.frame.columns
    means = log.stage_means(skip_steps=1)
    for stage, seconds in TRUE_S.items():
        assert means[stage] == pytest.approx(seconds, rel=0.05)


@settings(max_examples=20, deadline=None)
@given(scales=st.lists(st.floats(0.3, 3.0), min_size=4, max_size=4), seed=st.integers(0, 10_000))
def test_scale_factors_recover_truth_over_prediction(scales: list[float], seed: int) -> None:
    """If the model predicts true / scale, the fitted factor is the scale (within the 3% noise)."""
    frame = synthetic_log(np.random.default_rng(seed), steps=20, true_s=TRUE_S, noise=0.03)
    from simulator.calibration.runlogs import RunLog, _normalize
    log: RunLog = _normalize(frame, "<synthetic>")
    predicted = {stage: TRUE_S[stage] / k for stage, k in zip(TRUE_S, scales, strict=True)}
    fit = fit_stage_scales(log, predicted, skip_steps=1)
    for stage, k in zip(TRUE_S, scales, strict=True):
        assert fit.factors[stage] == pytest.approx(k, rel=0.04)
        assert fit.spread[stage] < 0.1
    scaled = fit.apply(predicted)
    for stage in TRUE_S:
        assert scaled[stage] == pytest.approx(TRUE_S[stage], rel=0.04)


def test_warmup_step_is_skipped(tmp_path: Path) -> None:
    log = read_run_log(_log(tmp_path, noise=0.0))
    with_warmup = fit_stage_scales(log, TRUE_S, skip_steps=0)
    without = fit_stage_scales(log, TRUE_S, skip_steps=1)
    assert without.factors["generate"] == pytest.approx(1.0)
    assert with_warmup.factors["generate"] > 1.0  # the 1.5x first step pulls it up


def test_per_step_predictions(tmp_path: Path) -> None:
    log = read_run_log(_log(tmp_path, noise=0.0))
    per_step = list(np.full(12, 60.0))  # half of the logged generate time on every step
    fit = fit_stage_scales(log, {"generate": per_step})
    assert fit.factors == {"generate": pytest.approx(2.0)}
    with pytest.raises(RlsimError, match="one per logged step"):
        fit_stage_scales(log, {"generate": [1.0, 2.0]})


def test_summary_stage_names_map_to_log_names() -> None:
    mapped = stages_from_summary({"generate": 10.0, "reference": 2.0, "old_logprob": 1.0, "train": 5.0,
                                  "weight_sync": 0.5})
    assert mapped == {"generate": 10.0, "reference": 2.0, "old_log_prob": 1.0, "update_actor": 5.0}


def test_bad_logs_are_clear(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timing_s/gen": 1.0}\nnot json\n')
    with pytest.raises(RlsimError, match="line 2"):
        read_run_log(path)
    path.write_text(json.dumps({"timing_s/gen": "slow"}) + "\n")
    with pytest.raises(RlsimError) as info:
        read_run_log(path)
    assert info.value.field == "timing_s/gen"
    path.write_text(json.dumps({"loss": 1.0}) + "\n")
    with pytest.raises(RlsimError, match="no stage timing"):
        read_run_log(path)
    with pytest.raises(RlsimError, match="format"):
        read_run_log(tmp_path / "x.tsv") if (tmp_path / "x.tsv").write_text("a") else None
    with pytest.raises(RlsimError, match="not found"):
        read_run_log(tmp_path / "missing.jsonl")
    log = read_run_log(_log(tmp_path))
    with pytest.raises(RlsimError, match="no predicted stage"):
        fit_stage_scales(log, {"critic": 1.0})
    with pytest.raises(RlsimError, match="no steps left"):
        fit_stage_scales(log, TRUE_S, skip_steps=100)


def test_nemo_rl_names_and_unknown_metrics(tmp_path: Path) -> None:
    """NeMo RL timers (timing/train/<name>) read as stages; other metric names listed, not read."""
    path = tmp_path / "nemo.jsonl"
    rows = [{"step": s, "timing/train/generation": 10.0 + s, "timing/train/policy_and_reference_logprobs": 2.0,
             "timing/train/policy_training": 5.0, "timing/train/total_step_time": 20.0, "train/loss": 0.1}
            for s in (1, 2, 3)]
    write_jsonl(__import__("pandas").DataFrame(rows), path)
    log = read_run_log(path)
    assert log.stages == ["generate", "update_actor", "logprobs"]
    assert log.timings == [*log.stages, "step_s"]
    assert list(log.frame["generate"]) == [11.0, 12.0, 13.0]
    assert log.ignored == ["train/loss"]


def test_step_time_alone_is_a_log_and_nothing_known_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "step.jsonl"
    path.write_text('{"timing/train/total_step_time": 64.8}\n{"timing/train/total_step_time": 65.0}\n')
    assert read_run_log(path).timings == ["step_s"]
    path.write_text('{"timing/train/total_time": 1.0, "loss": 2.0}\n')
    with pytest.raises(RlsimError, match="no stage timing") as info:
        read_run_log(path)
    assert "total_step_time" in str(info.value.fix)


def test_json_array_of_records(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text(json.dumps([{"_step": 0, "_runtime": 3.0, "timing_s/gen": 4.0, "timing_s/step": 6.0},
                                {"_step": 1, "_runtime": 9.0, "timing_s/gen": 5.0, "timing_s/step": 7.0}]))
    log = read_run_log(path)
    assert list(log.frame["step"]) == [0, 1] and list(log.frame["step_s"]) == [6.0, 7.0]
    assert log.ignored == []


def test_wandb_csv_export(tmp_path: Path) -> None:
    """A wandb panel export: "RUN - KEY" columns with __MIN / __MAX aggregates; rows of other metrics dropped."""
    path = tmp_path / "wandb_export.csv"
    path.write_text("Step,a - timing_s/gen,a - timing_s/gen__MIN,a - timing_s/gen__MAX,b - timing_s/gen,a - actor/lr\n"
                    "1,10,9,11,20,0.1\n2,12,11,13,22,0.1\n3,,,,,0.1\n")
    with pytest.raises(RlsimError, match="2 runs"):
        read_run_log(path)
    log = read_run_log(path, run="a")
    assert list(log.frame["generate"]) == [10.0, 12.0] and list(log.frame["step"]) == [1, 2]
    assert log.ignored == ["actor/lr"]
    with pytest.raises(RlsimError, match="no run 'c'"):
        read_run_log(path, run="c")


@pytest.mark.parametrize("flavour", ["verl", "nemo-rl"])
def test_timings_log_round_trips_through_the_reader(tmp_path: Path, flavour: str) -> None:
    from simulator.calibration.runlogs import timings_log
    stages = {"generate": 9.0, "update_actor": 3.0, "weight_sync": 0.5, "step_s": 14.0}
    stages["old_log_prob" if flavour == "verl" else "logprobs"] = 1.5
    frame = timings_log(np.random.default_rng(0), stages, steps=4, flavour=flavour)
    frame.to_csv(tmp_path / "log.csv", index=False)
    log = read_run_log(tmp_path / "log.csv")
    assert log.stage_means() == {s: pytest.approx(v) for s, v in stages.items() if s != "step_s"}
    with pytest.raises(RlsimError, match="logs no stage"):
        timings_log(np.random.default_rng(0), {"logprobs" if flavour == "verl" else "old_log_prob": 1.0},
                    steps=1, flavour=flavour)


def test_nemo_rl_bare_timer_names_are_read_as_the_guide_says(tmp_path: Path) -> None:
    path = tmp_path / "bare.jsonl"
    path.write_text("".join(json.dumps({"step": s, "generation": 2.0, "total_step_time": 4.0}) + "\n" for s in (1, 2)))
    log = read_run_log(path)
    assert log.stages == ["generate"] and log.timings == ["generate", "step_s"]


@pytest.mark.parametrize("text, match", [
    # found by fuzzing: the parser's own limits escaped as tracebacks, overflowing values went through
    ('{"step": 1, "timing_s/step": ' + "9" * 5000 + "}\n", "line 1 is not JSON"),
    ("[" * 10000 + "]" * 10000, "nested too deeply"),
    ('{"step": 1, "timing_s/step": 1e308}\n', "past 1e\\+07 s"),
    ('{"step": 1e300, "timing_s/step": 10}\n', "past 2\\^53"),
])
def test_a_log_past_what_a_run_writes_is_refused(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(text)
    with pytest.raises(RlsimError, match=match):
        read_run_log(path)


def _write_records(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(record) for record in records))
    return path


def test_a_resumed_run_keeps_the_later_record_of_a_relogged_step_and_says_so(tmp_path: Path) -> None:
    # steps 4-5 ran twice (resumed from a step-3 checkpoint): before, both records were read as steps
    first = [{"step": s, "timing_s/gen": 10.0, "timing_s/update_actor": 5.0} for s in range(1, 6)]
    resumed = [{"step": s, "timing_s/gen": 20.0, "timing_s/update_actor": 6.0} for s in range(4, 8)]
    log = read_run_log(_write_records(tmp_path, first + resumed))
    assert list(log.frame["step"]) == [1, 2, 3, 4, 5, 6, 7]
    assert list(log.frame["generate"]) == [10.0] * 3 + [20.0] * 4
    assert log.notes == ["step(s) 4, 5 logged twice (a resumed run logs them again): the later record of each kept"]


def test_records_of_one_step_with_different_timings_are_merged(tmp_path: Path) -> None:
    # a logger that writes one step's metrics in two calls (generation, then training)
    records = [{"step": 1, "timing/train/generation": 30.0}, {"step": 1, "timing/train/policy_training": 9.0},
               {"step": 2, "timing/train/generation": 31.0, "timing/train/policy_training": 8.0}]
    log = read_run_log(_write_records(tmp_path, records))
    assert list(log.frame["step"]) == [1, 2]
    assert list(log.frame["generate"]) == [30.0, 31.0] and list(log.frame["update_actor"]) == [9.0, 8.0]
    assert log.notes == []


@pytest.mark.parametrize("name, text, field", [
    ("nan.jsonl", '{"step": 1, "timing_s/gen": 10}\n{"step": 2, "timing_s/gen": NaN}\n', "timing_s/gen"),
    ("nan.csv", "step,timing_s/gen\n1,10\n2,nan\n", "timing_s/gen"),
    ("negative.csv", "step,timing_s/gen\n-1,10\n2,11\n", "step")])
def test_a_nan_timing_or_a_negative_step_is_refused_not_dropped(tmp_path, name, text, field):
    """A NaN phase read as a metric the record did not log, and the step left the fit without a word;
    a negative step was taken as one (found by a new-user trial). An empty CSV cell stays 'not logged'."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RlsimError) as caught:
        read_run_log(path)
    assert caught.value.field == field
    blank = tmp_path / "blank.csv"
    blank.write_text("step,timing_s/gen,perf/throughput\n1,10,\n2,11,500\n")
    assert list(read_run_log(blank).frame["generate"]) == [10.0, 11.0]


def test_a_trl_trainer_state_is_read_through_its_log_history(tmp_path: Path) -> None:
    """trainer_state.json (what every Hugging Face / TRL run writes): its log_history records, TRL's
    step_time the step, its profiling timers the phases; the Trainer's other records (the final
    summary, an eval) carry no timing and leave the steps alone."""
    history = [{"step": 1, "step_time": 20.0, "loss": 0.1, "profiling/Time taken: GRPOTrainer.vLLM.generate": 12.0,
                "profiling/Time taken: GRPOTrainer.sync_weights": 1.5,
                "profiling/Time taken: GRPOTrainer._calculate_rewards": 0.2, "completions/mean_length": 300.0},
               {"step": 2, "step_time": 22.0, "loss": 0.1, "profiling/Time taken: GRPOTrainer.vLLM.generate": 14.0,
                "profiling/Time taken: GRPOTrainer.sync_weights": 1.5,
                "profiling/Time taken: GRPOTrainer._calculate_rewards": 0.2, "completions/mean_length": 320.0},
               {"step": 2, "train_runtime": 50.0, "train_samples_per_second": 3.0}]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 2, "log_history": history, "max_steps": 2}))
    log = read_run_log(path)
    assert list(log.frame["step_s"]) == [20.0, 22.0] and list(log.frame["generate"]) == [12.0, 14.0]
    assert log.stage_means() == {"generate": 13.0, "sync_weights": 1.5, "reward": 0.2}
    assert log.ignored == ["completions/mean_length", "loss", "train_runtime", "train_samples_per_second"]
    one = tmp_path / "one.json"   # a one-record JSON log without log_history reads as a line, as before
    one.write_text(json.dumps({"step": 1, "train/step_time": 9.0}))
    assert list(read_run_log(one).frame["step_s"]) == [9.0]


def test_trl_rloo_and_wandb_names(tmp_path: Path) -> None:
    path = tmp_path / "trl.jsonl"
    path.write_text(json.dumps({"train/global_step": 3, "train/step_time": 8.0,
                                "profiling/Time taken: RLOOTrainer.transformers.generate": 5.0}) + "\n")
    log = read_run_log(path)
    assert list(log.frame["step"]) == [3] and log.stage_means() == {"generate": 5.0}


def test_the_synthetic_log_is_in_verls_names() -> None:
    # it mixed TRL's and AReaL's names (the last framework's key of each stage won)
    frame = synthetic_log(np.random.default_rng(0), steps=2, true_s=TRUE_S)
    assert {c for c in frame.columns if "/" in c} == {
        "timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor", "timing_s/step",
        "perf/throughput", "response_length/mean", "response_length/max"}


@pytest.mark.parametrize("extra, words", [
    ({"timing/train/generation": 11.8}, "timing_s/gen and timing/train/generation both time generate"),
    ({"timing/train/total_step_time": 16.8}, "timing_s/step and timing/train/total_step_time both time the whole"),
])
def test_two_frameworks_names_for_one_phase_are_refused(tmp_path: Path, extra, words) -> None:
    # the two generation timers were summed (23.6 s for 11.8), the second step time dropped, unsaid
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps({"step": s, "timing_s/gen": 11.8, "timing_s/step": 16.8, **extra}) + "\n"
                            for s in (1, 2)))
    with pytest.raises(RlsimError, match=words):
        read_run_log(path)


def test_errors_name_the_line_of_the_file(tmp_path: Path) -> None:
    """Steps from 100 with validation-only records between them (steps on lines 1, 3, 5, ...): a bad
    value on line 11 was 'step row 6', and a negative or missing time had no place at all."""
    lines = []
    for step in range(100, 107):
        lines.append({"step": step, "timing_s/gen": 11.8, "timing_s/update_actor": 0.8, "timing_s/step": 16.8})
        lines.append({"step": step, "val/score": 0.5})
    path = tmp_path / "lines.jsonl"
    for line, key, value, words in ((11, "timing_s/gen", "12.1 s", "line 11: '12.1 s' is not a number"),
                                    (9, "timing_s/update_actor", -0.8, "line 9: timing_s/update_actor is -0.8 s, below 0"),
                                    (9, "timing_s/update_actor", None, "line 9: timing_s/update_actor is missing")):
        broken = [dict(record) for record in lines]
        broken[line - 1][key] = value
        path.write_text("".join(json.dumps(record) + "\n" for record in broken))
        with pytest.raises(RlsimError, match=words):
            read_run_log(path)


def test_a_phase_longer_than_its_step_is_noted(tmp_path: Path) -> None:
    # a generation time in milliseconds fitted without a word
    path = tmp_path / "ms.jsonl"
    path.write_text("".join(json.dumps({"step": s, "timing_s/gen": 11800.0 if s == 3 else 11.8, "timing_s/step": 16.8})
                            + "\n" for s in (1, 2, 3)))
    notes = read_run_log(path).notes
    assert notes == ["timing_s/gen is longer than the whole step at step(s) 3: check its unit (seconds), unless "
                     "the run overlaps it with other steps (an asynchronous engine)"]


def test_one_json_object_a_byte_order_mark_and_rlsims_own_iterations_are_read(tmp_path: Path) -> None:
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps({"step": 1, "timing_s/gen": 11.8, "timing_s/step": 16.8}, indent=2))
    assert read_run_log(pretty).frame["generate"].tolist() == [11.8]      # was 'line 1 is not JSON'
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"steady_step_time_s": 3.0, "mfu": 0.4}, indent=2))
    with pytest.raises(RlsimError, match="no stage timing found"):
        read_run_log(summary)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + b'{"step": 1, "timing_s/gen": 11.8}\n{"step": 2, "timing_s/gen": 12.0}\n')
    assert read_run_log(bom).frame["generate"].tolist() == [11.8, 12.0]
    iterations = tmp_path / "iterations.csv"   # rlsim run --out's: its step time, no other names listed
    iterations.write_text("iteration,start,forwards_end,train_end,samples,tokens,response_tokens,staleness_mean,"
                          "staleness_max,queue_read_bytes,queue_payload_bytes,end,step_time_s\n"
                          "0,1.0,2.0,3.0,64,1000,900,0,0,10,10,3.5,3.5\n1,3.5,4.0,5.0,64,1000,900,0,0,10,10,6.0,2.5\n")
    log = read_run_log(iterations)
    assert log.frame["step_s"].tolist() == [3.5, 2.5] and log.ignored == []


def test_verl_console_output_is_read(tmp_path: Path) -> None:
    """verl's console logger ('step:N - key:value - ...', after Ray's prefix) among the process's
    other output: its step lines are the records, the rest is skipped and counted."""
    path = tmp_path / "train.log"
    path.write_text("INFO: starting\n"
                    "(TaskRunner pid=812) step:1 - timing_s/gen:11.800 - timing_s/step:16.800 - actor/lr:0.000\n"
                    "Training Progress:  50%|#####     | 1/2\n"
                    "(TaskRunner pid=812) step:2 - timing_s/gen:12.100 - timing_s/step:17.000 - actor/lr:0.000\n")
    log = read_run_log(path)
    assert log.frame["generate"].tolist() == [11.8, 12.1] and log.frame["step"].tolist() == [1, 2]
    assert log.ignored == ["actor/lr"]
    assert log.notes == ["read as verl console output: 2 'step:N - key:value' line(s); 2 other line(s) skipped"]


def test_a_stage_factor_is_the_relative_least_squares_one_and_its_spread_the_coefficient_of_variation():
    """Measured 1 s and 2 s against a prediction of 1 s: the factor minimising sum (f p - m)^2 / m^2
    is sum(r) / sum(r^2) with r = p / m = (1, 1/2): 1.5 / 1.25 = 1.2 (mean(m / p) gives 1.5); the
    spread of m / p = (1, 2) is 0.5 / 1.5 = 1/3, unchanged by a common scale (an audit's mutations
    of both passed: its logs were near-constant)."""
    import pandas as pd

    from simulator.calibration.runlogs import RunLog
    for scale in (1.0, 10.0):
        log = RunLog(pd.DataFrame({"step": [1, 2], "generate": [1.0 * scale, 2.0 * scale]}), "two-steps")
        scales = fit_stage_scales(log, {"generate": 1.0 * scale}, skip_steps=0)
        assert scales.factors["generate"] == pytest.approx(1.2)
        assert scales.spread["generate"] == pytest.approx(1 / 3)


def test_verls_file_logger_records_are_read_as_their_metrics(tmp_path: Path) -> None:
    """verl 0.9.1's FileLogger (trainer.logger=['file']) writes {"step": N, "data": {...}} a line:
    read as the data's metrics at step N, with a note (it was 'no stage timing found')."""
    frame = synthetic_log(np.random.default_rng(0), steps=4, true_s=TRUE_S, noise=0.03)
    path = tmp_path / "file_logger.jsonl"
    path.write_text("".join(json.dumps({"step": step, "data": {k: v for k, v in record.items() if k != "step"}}) + "\n"
                            for step, record in enumerate(frame.to_dict("records"), start=5)))
    log = read_run_log(path)
    assert list(log.frame["step"]) == [5, 6, 7, 8]
    assert list(log.frame["generate"]) == pytest.approx(list(frame["timing_s/gen"]))
    assert log.notes == ['read as verl FileLogger records ({"step": N, "data": {...}}): 4 record(s)']
    path.write_text(json.dumps({"step": 3, "data": {"timing_s/gen": 1.0}}))   # a one-step file: one object
    assert list(read_run_log(path).frame["step"]) == [3]
    path.write_text("".join(json.dumps({"step": step, "data": {"step": 2, "timing_s/gen": 1.0}}) + "\n"
                            for step in (2, 1)))
    with pytest.raises(RlsimError, match="line 2: step 1 holds data with step 2") as info:
        read_run_log(path)
    assert info.value.field == "data.step" and info.value.source == str(path)


def test_a_checkpoint_inside_verls_step_timer_is_taken_out_of_the_step_and_one_after_it_is_not(
        tmp_path: Path) -> None:
    """verl 0.9.1's trainer times save_checkpoint inside `timing_s/step` and testing after it: a
    15 s save at steps 3 and 6 had stayed in the fitted step time (the audit's switch cost +91%).
    It is taken out; a 20 s validation the step does not hold is left, and a note names each."""
    frame = synthetic_log(np.random.default_rng(0), steps=8, true_s=TRUE_S, noise=0.01)
    clean = frame["timing_s/step"].copy()
    saved = frame["step"].isin([3, 6])
    frame.loc[saved, "timing_s/save_checkpoint"] = 15.0
    frame.loc[saved, "timing_s/step"] += 15.0
    frame.loc[frame["step"] == 6, "timing_s/testing"] = 20.0     # after the step timer: not in it
    path = tmp_path / "verl.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v == v}) + "\n"
                            for r in frame.to_dict("records")))
    log = read_run_log(path)
    assert list(log.frame["step_s"]) == pytest.approx(list(clean))
    assert log.notes[0].startswith("timing_s/save_checkpoint (steps 3, 6) taken out of timing_s/step")
    assert log.notes[1].startswith("timing_s/testing (step 6) not fitted, nor taken out of timing_s/step")
    assert "timing_s/save_checkpoint" not in log.ignored
    path.write_text(json.dumps({"step": 1, "timing_s/step": 9.0, "timing_s/save_checkpoint": -1.0}) + "\n")
    with pytest.raises(RlsimError, match="timing_s/save_checkpoint is -1 s") as info:
        read_run_log(path)
    assert info.value.field == "timing_s/save_checkpoint"


def test_openrlhfs_wandb_and_tensorboard_names_are_read(tmp_path: Path) -> None:
    """OpenRLHF 0.11.2 logs its timers to wandb and TensorBoard under `train/` (utils/logging_utils.py
    WandbLogger / TensorboardLogger.log_train: "train/%s" % k), with its step as train/global_step: a
    real run's export holds train/timing/generation, not the console's timing/generation."""
    rows = [{"train/global_step": step, "train/timing/generation": 10.0 + step, "train/timing/make_experience": 3.0,
             "train/timing/ppo_train": 5.0, "train/timing/broadcast": 1.0, "train/timing/step_total": 19.0 + step,
             "train/policy_loss": 0.1} for step in (1, 2, 3)]
    path = tmp_path / "openrlhf-wandb.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    log = read_run_log(path)
    assert log.stages == ["generate", "make_experience", "ppo_train", "broadcast"]
    assert log.frame["step_s"].tolist() == [20.0, 21.0, 22.0]
    assert log.frame["generate"].tolist() == [11.0, 12.0, 13.0]
    assert log.ignored == ["train/policy_loss"]
    assert log.matched_names.startswith("OpenRLHF's")
    path.write_text(json.dumps({**rows[0], "timing/generation": 11.0}) + "\n")   # the console's and wandb's names
    with pytest.raises(RlsimError, match="both time generate"):
        read_run_log(path)


def test_tensorboard_scalars_in_long_form_are_read_as_one_column_per_tag(tmp_path: Path) -> None:
    """TensorBoard scalars exported with their tags (tbparse's SummaryReader(DIR).scalars: step, tag,
    value; TensorBoard's get_scalars(): run, tag, step, value), one row per tag and step, are read
    as a log of one column per tag; several runs need --log-run; an error names the file's line."""
    rows = [(1, "timing_s/gen", 12.0), (1, "timing_s/step", 30.0), (2, "timing_s/gen", 11.0),
            (2, "timing_s/step", 29.0), (1, "actor/pg_loss", 0.3)]
    path = tmp_path / "scalars.csv"
    path.write_text("step,tag,value\n" + "".join(f"{s},{t},{v}\n" for s, t, v in rows))
    log = read_run_log(path)
    assert log.frame["step"].tolist() == [1, 2]
    assert log.frame["generate"].tolist() == [12.0, 11.0]
    assert log.frame["step_s"].tolist() == [30.0, 29.0]
    assert log.ignored == ["actor/pg_loss"]
    two = "run,tag,step,value,wall_time\n" + "".join(f"{run},{t},{s},{v},1.0\n" for run in ("a", "b")
                                                     for s, t, v in rows)
    path.write_text(two)
    with pytest.raises(RlsimError, match="2 runs: a, b") as error:
        read_run_log(path)
    assert error.value.field == "run"
    assert read_run_log(path, run="b").frame["generate"].tolist() == [12.0, 11.0]
    path.write_text("step,tag,value\n1,timing_s/gen,12\n2,timing_s/gen,-1\n")
    with pytest.raises(RlsimError, match=r"line 3: timing_s/gen is -1 s"):
        read_run_log(path)


def test_a_tensorboard_download_of_one_tag_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """TensorBoard's per-tag CSV download (Wall time, Step, Value) holds no tag name: said as such."""
    path = tmp_path / "run-.-tag-timing_s_gen.csv"
    path.write_text("Wall time,Step,Value\n1700000000.1,1,12.5\n1700000100.2,2,11.9\n")
    with pytest.raises(RlsimError, match="one TensorBoard tag") as error:
        read_run_log(path)
    assert "step, tag, value" in (error.value.fix or "")
    assert error.value.source == str(path)


def test_a_cumulative_timing_is_refused_naming_its_column(tmp_path: Path) -> None:
    """A timing that grows by at least half its first value at every step is a clock since the run
    started (a wall-clock column under a step-time name), not each step's seconds: the fit had taken
    it, moving the switch cost of the round trip from 2.0 to 3.3 s with only a misfit note."""
    path = tmp_path / "cumulative.jsonl"
    rows = [{"step": step, "timing_s/gen": 10.0 + 0.1 * step, "timing_s/step": 30.0 * step} for step in range(1, 6)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(RlsimError, match="timing_s/step grows by") as error:
        read_run_log(path)
    assert error.value.field == "timing_s/step" and error.value.source == str(path)
    assert "differences" in (error.value.fix or "")
    # a step time that grows as responses lengthen is a step time: read
    rows = [{"step": step, "timing_s/gen": 10.0 + step, "timing_s/step": 30.0 + 3 * step} for step in range(1, 30)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_run_log(path).frame["step_s"].iloc[-1] == 117.0
    # three steps cannot tell (a short log of a ramp): read
    path.write_text("".join(json.dumps({"step": s, "timing_s/step": 30.0 * s}) + "\n" for s in range(1, 4)))
    assert len(read_run_log(path).frame) == 3


def test_a_phase_missing_from_the_first_steps_only_says_they_lead_and_why(tmp_path: Path) -> None:
    """verl's PPO with trainer.critic_warmup N updates the critic alone for its first steps (ray_trainer.py:
    `if critic_warmup <= global_steps:` around update_actor), so timing_s/update_actor starts at step N:
    the error says the steps lead the log, and that dropping them (warm-up) is the fix."""
    path = tmp_path / "critic-warmup.jsonl"
    rows = [{"step": step, "timing_s/gen": 10.0, "timing_s/values": 2.0, "timing_s/step": 20.0,
             **({"timing_s/update_actor": 5.0} if step > 2 else {})} for step in range(1, 6)]
    path.write_text("".join(json.dumps(row) + "\n" for row in reversed(rows)))   # file order does not matter
    with pytest.raises(RlsimError, match=r"line 4: timing_s/update_actor is missing at the first 2 steps \(1, 2\)"
                       ) as error:
        read_run_log(path)
    assert "critic_warmup" in error.value.fix and "drop steps 1, 2" in error.value.fix


def test_a_wandb_run_name_may_hold_the_separator(tmp_path: Path) -> None:
    """wandb's panel export writes "RUN - KEY" with the run's display name as given (verl passes its
    trainer.experiment_name): a name such as "qwen7b - grpo" holds " - " itself, and its timings were
    read as the run "qwen7b"'s metric "grpo - timing_s/gen" (no stage timing found)."""
    path = tmp_path / "wandb_export.csv"
    path.write_text("Step,qwen7b - grpo - timing_s/gen,qwen7b - grpo - timing_s/gen__MIN,qwen7b - grpo - timing_s/step\n"
                    "1,10,9,20\n2,12,11,22\n")
    log = read_run_log(path)
    assert log.frame["generate"].tolist() == [10.0, 12.0] and log.frame["step_s"].tolist() == [20.0, 22.0]
    assert read_run_log(path, run="qwen7b - grpo").frame["generate"].tolist() == [10.0, 12.0]


def test_a_tensorboard_json_download_of_one_tag_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """The TensorBoard UI's JSON download of one tag is [[wall_time, step, value], ...]: it was refused
    as 'record 1 is not a JSON object', without saying what it is."""
    path = tmp_path / "run-.-tag-timing_s_gen.json"
    path.write_text(json.dumps([[1700000000.1, 1, 12.5], [1700000100.2, 2, 11.9]]))
    with pytest.raises(RlsimError, match="TensorBoard's download of one tag") as error:
        read_run_log(path)
    assert "step, tag, value" in (error.value.fix or "") and error.value.source == str(path)
    path.write_text(json.dumps([[1, 2], {"step": 1}]))   # not triples: the usual error
    with pytest.raises(RlsimError, match="record 1 is not a JSON object"):
        read_run_log(path)


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_csv_with_another_delimiter_is_refused_naming_it(tmp_path: Path, delimiter: str) -> None:
    """A spreadsheet's ';'-delimited export (a decimal-comma locale) read as 'line 2 has 2 fields, the
    header 1' without naming the delimiter."""
    path = tmp_path / "semicolons.csv"
    path.write_text(delimiter.join(["step", "timing_s/gen", "timing_s/step"]) + "\n"
                    + delimiter.join(["1", "11,8", "16,8"]) + "\n")
    with pytest.raises(RlsimError, match=re.escape(f"the file looks {delimiter!r}-delimited")) as error:
        read_run_log(path)
    assert "commas" in (error.value.fix or "") and error.value.source == str(path)
    path.write_text("step\n1\n")   # one column and no other delimiter: the usual 'no stage timing'
    with pytest.raises(RlsimError, match="no stage timing found"):
        read_run_log(path)


def test_verls_adv_timer_is_read_into_the_reward_stage(tmp_path: Path) -> None:
    """verl 0.7.0's ray_trainer.py times `adv` inside its step, after the forwards: it ray.get()s the
    rule rewards launched with reward_model.launch_reward_fn_async there (their wait: rlsim's reward
    phase, schedule.reward_during_forwards) and does the advantage arithmetic. It was ignored: an
    async-reward run's reward stage read as the task's launch (0.01 s) alone."""
    path = tmp_path / "adv.jsonl"
    rows = [{"step": step, "timing_s/gen": 10.0, "timing_s/reward": 0.01, "timing_s/adv": 3.0 + step,
             "timing_s/step": 20.0} for step in (1, 2, 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    log = read_run_log(path)
    assert log.frame["reward"].tolist() == pytest.approx([4.01, 5.01, 6.01])
    assert log.frame["step_s"].tolist() == [20.0, 20.0, 20.0]   # inside the step: not taken out
    assert "timing_s/adv" not in log.ignored
    assert any(note.startswith("timing_s/adv read into the reward stage") for note in log.notes)
    path.write_text(json.dumps({"step": 1, "timing_s/reward": 1.0, "timing_s/adv": -2.0}) + "\n")
    with pytest.raises(RlsimError, match="record 1: timing_s/adv is -2 s") as info:
        read_run_log(path)
    assert info.value.field == "timing_s/adv"
    # without verl's reward timer there is no reward stage to add it to: listed as not read
    path.write_text(json.dumps({"step": 1, "timing_s/gen": 10.0, "timing_s/adv": 2.0}) + "\n")
    log = read_run_log(path)
    assert "timing_s/adv" in log.ignored and "reward" not in log.frame.columns


@pytest.mark.parametrize("make", ["synthetic_log", "timings_log"])
def test_the_example_logs_take_a_seed_or_a_generator_and_name_anything_else(make):
    """synthetic_log(7, ...) (numpy's seed-or-Generator convention) raised AttributeError: 'int'
    object has no attribute 'lognormal' from inside; a seed now makes the Generator it seeds."""
    import numpy as np

    from simulator.calibration import runlogs
    function = getattr(runlogs, make)
    keywords = {"steps": 3, "noise": 0.05}
    timings = {"generate": 10.0, "step_s": 20.0} if make == "timings_log" else {"generate": 10.0}
    seeded = function(7, timings, **keywords) if make == "timings_log" else function(7, true_s=timings, **keywords)
    given = (function(np.random.default_rng(7), timings, **keywords) if make == "timings_log"
             else function(np.random.default_rng(7), true_s=timings, **keywords))
    assert seeded.equals(given)
    with pytest.raises(RlsimError) as caught:
        function("7", timings, **keywords) if make == "timings_log" else function("7", true_s=timings, **keywords)
    assert caught.value.field == "rng" and caught.value.fix
