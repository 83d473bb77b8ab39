"""Calibrating on logged runs: a log rlsim writes under known parameters is recovered (round trip),
the overlay reproduces the fit through `rlsim run --set`, uncertainty flags what a log cannot pin,
and the V6 cross-prediction machinery runs (fit on a 1-step-off row, predict its on-policy row)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.calibration import logfit
from simulator.calibration.runlogs import RunLog, _normalize, timings_log
from simulator.cli import main
from simulator.errors import RlsimError

# A small colocated GRPO step on one DGX-H100 (64 sequences, short responses): ~0.1 s to simulate.
SCENARIO = {"topology": {"preset": "dgx-h100", "nodes": 1}, "schedule": "colocated", "iterations": 2, "seed": 0,
            "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "samples_per_prompt": 4,
                         "mini_batch_prompts": 8,
                         "response_length": {"dist": "lognormal", "median": 256, "sigma": 1.0, "max": 1024}}}
TRUE = {"workload.inference.step_overhead_s": 4e-3, "topology.device.gemm_efficiency": 0.55,
        "schedule.switch.overhead_s": 2.0}
# verl's gen holds the switches and the sync; its generate_sequences, the generation alone, tells them apart
VERL_STAGES = ("generate", "generate_sequences", "old_log_prob", "reference", "update_actor", "step_s")


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate --from-log without --out writes rlsim-calibration.yaml in the working folder: the
    test's own, not the checkout's."""
    monkeypatch.chdir(tmp_path)


def _true_items(true: dict[str, float]) -> list[str]:
    return ["topology.device.name=h100", *(f"{k}={v}" for k, v in true.items())]


def _logged_run(stages=VERL_STAGES, flavour: str = "verl", noise: float = 0.003,
                true: dict[str, float] = TRUE) -> logfit.LoggedRun:
    truth = logfit.simulate_timings(SCENARIO, _true_items(true))
    frame = timings_log(np.random.default_rng(0), {s: truth[s] for s in stages}, steps=6, noise=noise,
                        flavour=flavour)
    return logfit.LoggedRun(_normalize(frame, "<rlsim log>"), SCENARIO)


def test_round_trip_recovers_known_parameters_within_5_percent() -> None:
    fit = logfit.fit_runs([_logged_run()], list(TRUE), max_evaluations=20)
    for key, true in TRUE.items():
        assert fit.start[key] != pytest.approx(true, rel=0.2)        # the fit starts well away
        assert fit.values[key] == pytest.approx(true, rel=0.05)
        assert 0 < fit.sigma[key] < 0.05 * true                       # pinned by the log
    assert fit.rms_after < 0.01 < fit.rms_before
    assert fit.items[0] == "topology.device.name=h100"


def test_overlay_reproduces_the_fit_through_rlsim_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CLI round trip on a NeMo RL-named CSV: the overlay's --set items, given to `rlsim run`, give
    the fitted phases; --predict runs another size."""
    keys = "workload.inference.step_overhead_s,topology.device.gemm_efficiency"
    run = _logged_run(stages=("generate", "logprobs", "update_actor", "step_s"), flavour="nemo-rl",
                      true={k: TRUE[k] for k in keys.split(",")})
    log = tmp_path / "nemo.csv"
    frame = run.log.frame.rename(columns={"generate": "timing/train/generation", "update_actor":
                                          "timing/train/policy_training", "logprobs":
                                          "timing/train/policy_and_reference_logprobs",
                                          "step_s": "timing/train/total_step_time"})
    frame.assign(**{"train/loss": 0.5}).to_csv(log, index=False)
    scenario = tmp_path / "run.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), "--fit", keys, "--out", str(out),
                 "--predict", "topology.nodes=2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fitted"]["workload.inference.step_overhead_s"]["value"] == pytest.approx(4e-3, rel=0.05)
    assert any("train/loss" in note for note in doc["notes"])
    overlay = yaml.safe_load(out.read_text())
    assert overlay["set"] == doc["set"]
    assert overlay["overlay"]["topology"]["device"]["name"] == "h100"
    args = ["run", str(scenario), "--json"] + [a for item in overlay["set"] for a in ("--set", item)]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert logfit.predicted_timings(summary)["generate"] == pytest.approx(
        doc["runs"][str(log)]["generate"]["after_s"])
    big = doc["prediction"]
    assert big["fitted"]["step_s"] > big["default"]["step_s"]      # the slower fitted engine, at 16 GPUs


def test_uncertainty_flags_parameters_one_log_cannot_separate() -> None:
    """The generation time alone cannot tell a per-step overhead from a slower HBM: their sigmas say so."""
    run = _logged_run(stages=("generate",), noise=0.01)
    keys = ["workload.inference.step_overhead_s", "workload.inference.hbm_efficiency"]
    fit = logfit.fit_runs([run], keys, max_evaluations=4)
    relative = {k: fit.sigma[k] / fit.values[k] for k in keys}
    assert relative == {k: np.inf for k in keys}


def test_v6_machinery_fit_one_step_off_predict_on_policy() -> None:
    """Fit one parameter on the Llama 1-step-off row; the prediction of its on-policy row is reported
    (the error is the figure of the note, not asserted)."""
    from simulator.calibration.crosscheck import cross_prediction
    from simulator.validation.nemo_rl import ROWS

    llama = [r for r in ROWS if r.key == "llama3.1-8b"]
    off = [r for r in llama if r.off_policy]
    on = [r for r in llama if not r.off_policy]
    out = cross_prediction(off, on, ["topology.device.gemm_efficiency"], max_evaluations=2)
    fit_row, predict_row = out["rows"]
    assert (fit_row["role"], predict_row["role"]) == ("fit", "predict")
    assert abs(fit_row["fitted_error"]) <= abs(fit_row["default_error"]) + 1e-9   # the fit moved toward its row
    assert predict_row["published_s"] == on[0].step_s
    assert np.isfinite(predict_row["fitted_error"])
    # the defaults' prediction is the V6 case's figure (the last 5 of 10 steps, as the table measured)
    from simulator.validation.nemo_rl import simulate_row
    assert predict_row["default_s"] == pytest.approx(simulate_row(on[0])["step_s"], rel=1e-12)


def test_bad_fit_requests_are_clear(tmp_path: Path) -> None:
    with pytest.raises(RlsimError, match="not a fit parameter") as info:
        logfit.fit_parameters(["workload.inference.step_overhead"])
    assert "step_overhead_s" in str(info.value.fix)
    with pytest.raises(RlsimError, match="no logged run"):
        logfit.fit_runs([])
    log = tmp_path / "x.jsonl"
    log.write_text('{"timing_s/gen": 1.0}\n')
    assert main(["calibrate", "--from-log", str(log)]) == 2          # no --scenario
    assert main(["calibrate"]) == 2                                   # neither --device nor --from-log
    assert main(["calibrate", "--from-log", str(log), "--scenario", "a.yaml", "--scenario", "b.yaml",
                 "--scenario", "c.yaml"]) == 2
    assert main(["calibrate", "--from-log", str(log), "--scenario", "a.yaml", "--device", "cpu"]) == 2


def test_phase_times_below_a_microsecond_are_not_fitted_and_out_may_go_to_a_new_folder(tmp_path: Path,
                                                                                         capsys) -> None:
    # found by fuzzing: 1e-300 s phases overflowed the fit (scipy ValueError), a missing --out folder
    # failed after the whole fit (FileNotFoundError)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text("".join(json.dumps({"step": s, "timing_s/step": 1e-300}) + "\n" for s in (1, 2, 3)))
    assert main(["calibrate", "--from-log", str(tiny), "--scenario", str(scenario), "--max-evaluations", "2"]) == 2
    assert "no phase time of at least 1e-06 s" in capsys.readouterr().err
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "timing_s/step": 30.0}) + "\n" for s in (1, 2, 3)))
    out = tmp_path / "new" / "folder" / "fit.yaml"
    assert main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), "--max-evaluations", "2",
                 "--out", str(out)]) == 0
    assert out.is_file()


def test_a_hetero_scenarios_overlay_names_no_device_and_reaches_every_group() -> None:
    # topology.device.name=a100-80gb (the first device) beside a groups topology was read past:
    # the overlay undid its own fit and the fit came out 0.75 +- inf
    hetero = {**SCENARIO, "topology": "hetero-a100-h100"}
    from simulator.scenario import load_scenario

    items = logfit.overlay_items(load_scenario(hetero), {"topology.device.gemm_efficiency": 0.4})
    assert items == ["topology.device.gemm_efficiency=0.4"]
    slow = logfit.simulate_timings(hetero, items)["update_actor"]
    assert slow > 1.2 * logfit.simulate_timings(hetero)["update_actor"]


def test_runs_on_different_devices_do_not_share_a_fitted_device_field() -> None:
    # the overlay named the first run's device, turning the others into it
    h100 = _logged_run(stages=("generate", "step_s"))
    a100 = logfit.LoggedRun(h100.log, {**SCENARIO, "topology": {"preset": "dgx-a100", "nodes": 1}}, name="a100")
    with pytest.raises(RlsimError) as info:
        logfit.fit_runs([h100, a100], ["topology.device.gemm_efficiency"], max_evaluations=2)
    assert info.value.field == "--fit" and "different devices" in info.value.message


@pytest.mark.parametrize("extra, field", [
    (["--fit", "topology.device.gemm_efficiency", "--fit", "topology.device.gemm_efficiency"], "--fit"),
    (["--fit", "topology.device.gemm_efficiency", "--predict", "topology.device.gemm_efficiency=0.5"], "--predict"),
    (["--predict", "topology.nodes=2", "--predict", "topology.nodes=4"], "--predict"),   # the last won
])
def test_calibrate_from_log_refuses_keys_given_twice_or_fitted_and_predicted(tmp_path, capsys, extra, field) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps({"step": s, "timing_s/gen": 10.0, "timing_s/step": 20.0}) for s in range(4)))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    assert main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), *extra,
                 "--out", str(tmp_path / "o.yaml")]) == 2
    assert f"field '{field}'" in capsys.readouterr().err


def test_the_same_log_twice_is_refused(tmp_path, capsys) -> None:
    # counted twice: every sigma shrank by sqrt(2)
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps({"step": s, "timing_s/gen": 10.0}) for s in range(4)))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    assert main(["calibrate", "--from-log", str(log), "--from-log", str(log), "--scenario", str(scenario),
                 "--out", str(tmp_path / "o.yaml")]) == 2
    assert "given twice" in capsys.readouterr().err


def test_a_fitted_key_the_scenario_reads_past_is_blamed_on_fit() -> None:
    # it named the scenario file and a key the user never wrote there ('remove it (got 11.3)')
    run = _logged_run(stages=("generate", "step_s"))
    with pytest.raises(RlsimError) as info:
        logfit.fit_runs([run], ["schedule.switch.sleep_wake_s"], max_evaluations=2)
    assert info.value.field == "--fit" and "cannot be fitted on this scenario" in info.value.message


@pytest.mark.parametrize("change, key", [
    ({"schedule": "disaggregated"}, "schedule.switch.overhead_s"),             # no switch: refused at its default
    ({"workload": {**SCENARIO["workload"], "reward": {"kind": "model"}}},      # refused only away from its default
     "workload.reward.cpu_s_per_sample"),
])
def test_a_fitted_key_refused_at_any_value_the_fit_tries_is_blamed_on_fit(change, key) -> None:
    # the section's error ('schedule.switch' of the key) and an error at the fit's first trial value
    # (outside the first evaluation) named the scenario file and a value the user never wrote
    run = logfit.LoggedRun(_logged_run(stages=("generate", "step_s")).log, {**SCENARIO, **change})
    with pytest.raises(RlsimError) as info:
        logfit.fit_runs([run], [key], max_evaluations=3)
    assert info.value.field == "--fit" and info.value.source is None
    assert info.value.message.startswith(f"{key} cannot be fitted on this scenario")


def test_a_fitted_key_that_moves_no_logged_phase_is_refused() -> None:
    # a log of the generation alone (verl's generate_sequences) and the awake engine's KV re-allocation:
    # '1 +- inf', exit 0 (verl's gen holds the switches: it moves that one)
    run = _logged_run(stages=("generate_sequences",))
    with pytest.raises(RlsimError, match=r"kv_realloc_s moves none of the logged phases \(generate_sequences\)") \
            as info:
        logfit.fit_runs([run], ["schedule.switch.kv_realloc_s"], max_evaluations=3)
    assert info.value.field == "--fit"


def test_the_python_api_checks_skip_steps_and_takes_one_key_as_a_string() -> None:
    # skip_steps=-1 fitted the last step alone; a lone key was read letter by letter ('w')
    run = _logged_run(stages=("generate", "step_s"))
    with pytest.raises(RlsimError) as info:
        logfit.fit_runs([run], ["topology.device.gemm_efficiency"], skip_steps=-1)
    assert info.value.field == "--skip-steps"
    fit = logfit.fit_runs([run], "workload.inference.step_overhead_s", max_evaluations=2)
    assert fit.keys == ["workload.inference.step_overhead_s"]


def test_a_log_the_scenario_cannot_describe_is_said_and_unpinned_sigmas_say_so() -> None:
    """Every phase 8x slower than the scenario's: the GEMM rate runs to its floor and the note says
    so; the default keys on a verl log leave the two engine keys unpinned (inf, pinned false in
    JSON, which writes inf as null) and the unfitted switch cost as a misfit above the log's spread."""
    run = _logged_run()
    slower = run.log.frame.assign(**{stage: run.log.frame[stage] * 8 for stage in run.log.timings})
    fit = logfit.fit_runs([logfit.LoggedRun(RunLog(slower, "x8"), SCENARIO)], list(TRUE), max_evaluations=20)
    assert any(note.startswith("topology.device.gemm_efficiency ended near its bound") for note in fit.notes)
    fit = logfit.fit_runs([run], max_evaluations=40)
    pinned = {key: entry["pinned"] for key, entry in fit.to_json()["fitted"].items()}
    assert pinned == {"workload.inference.step_overhead_s": False, "workload.inference.hbm_efficiency": False,
                      "topology.device.gemm_efficiency": True}
    assert any(note.startswith("the fit leaves") and "step-to-step spread" in note for note in fit.notes)


def test_a_prediction_on_another_device_does_not_take_the_fitted_device_field(tmp_path: Path) -> None:
    # the H100's fitted GEMM rate was laid over an A100 without a word
    run = _logged_run(stages=("generate", "update_actor", "step_s"))
    fit = logfit.fit_runs([run], ["topology.device.gemm_efficiency"], max_evaluations=4)
    assert fit.devices == ["h100"]
    with pytest.raises(RlsimError) as info:
        logfit.predict({**SCENARIO, "topology": {"preset": "dgx-a100", "nodes": 1}}, [], fit)
    assert info.value.field == "--predict-scenario" and "a100" in info.value.message
    assert logfit.predict(SCENARIO, ["topology.nodes=2"], fit)["fitted"]["step_s"] > 0


def test_the_overlay_holds_the_set_items_the_fit_ran_under(tmp_path: Path, capsys) -> None:
    """--set workload.inference.hbm_efficiency=0.6 was left out of the overlay's set: and use: line,
    so the overlay gave another generation time than the fit's (and its header dropped --fit)."""
    truth = logfit.simulate_timings(SCENARIO, ["workload.inference.hbm_efficiency=0.6", *_true_items(TRUE)])
    log = tmp_path / "verl.jsonl"
    timings_log(np.random.default_rng(0), {s: truth[s] for s in VERL_STAGES}, steps=4, noise=0.003).to_json(
        log, orient="records", lines=True)
    scenario = tmp_path / "run.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "o.yaml"
    assert main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), "--fit",
                 "topology.device.gemm_efficiency", "--set", "workload.inference.hbm_efficiency=0.6",
                 "--max-evaluations", "6", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["set"][0] == "workload.inference.hbm_efficiency=0.6"
    assert doc["use"].startswith(f"use: rlsim run {scenario} --set workload.inference.hbm_efficiency=0.6")
    header = out.read_text().splitlines()[0]
    assert header.startswith(f"# rlsim calibrate --from-log {log} --scenario {scenario} --fit "
                             "topology.device.gemm_efficiency --max-evaluations 6")
    assert header.endswith("--set workload.inference.hbm_efficiency=0.6")
    assert main(["run", str(scenario), "--json", *(a for item in doc["set"] for a in ("--set", item))]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert logfit.predicted_timings(summary)["generate"] == pytest.approx(
        doc["runs"][str(log)]["generate"]["after_s"])


def test_figures_read_off_the_log_but_not_fitted_are_named() -> None:
    # perf/throughput was read and left out of the fit without a word (unknown names get a note)
    run = _logged_run(stages=("generate", "step_s"))
    run.log.frame["throughput_tokens_per_s_per_device"] = 1000.0
    fit = logfit.fit_runs([run], ["workload.inference.step_overhead_s"], max_evaluations=2)
    assert any("read, not fitted" in note and "perf/throughput" in note for note in fit.notes)


def test_the_rule_rewards_cost_is_recovered_from_a_logs_reward_time() -> None:
    """A verl log's timing_s/reward pins the scorer's CPU time a sample: a log written at 20 ms a
    finished response (a slow, sympy-style scorer) is fitted back within 5%. Its finished and capped
    parts together it cannot separate (one mix of the two in every step): the fit says so."""
    key = "workload.reward.cpu_s_per_sample"
    run = _logged_run(stages=("generate", "reward", "update_actor", "step_s"), true={key: 0.02})
    fit = logfit.fit_runs([run], [key], max_evaluations=20)
    assert fit.start[key] != pytest.approx(0.02, rel=0.2)
    assert fit.values[key] == pytest.approx(0.02, rel=0.05) and 0 < fit.sigma[key] < 0.05 * 0.02
    both = logfit.fit_runs([run], [key, "workload.reward.capped_cpu_s_per_sample"], max_evaluations=20)
    assert all(both.sigma[k] > 0.2 * both.values[k] for k in both.values)      # not pinned: wide


def test_an_openrlhf_log_round_trips_through_its_own_timers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """OpenRLHF's timer names (timing/generation, make_experience, ppo_train, broadcast, step_total)
    read back as its phases and fitted against a scenario with output.timers: openrlhf, whose
    generation holds the engine's switch parts: the known parameters come back within 5%."""
    scenario = {**SCENARIO, "output": {"timers": "openrlhf"}}
    truth = logfit.simulate_timings(scenario, _true_items(TRUE))
    stages = ("generate", "make_experience", "ppo_train", "broadcast", "step_s")
    frame = timings_log(np.random.default_rng(0), {s: truth[s] for s in stages}, steps=6, noise=0.003,
                        flavour="openrlhf")
    assert {"timing/generation", "timing/make_experience", "timing/step_total"} <= set(frame.columns)
    assert _normalize(frame, "<log>").stages == ["generate", "make_experience", "ppo_train", "broadcast"]
    log, path = tmp_path / "openrlhf.jsonl", tmp_path / "run.yaml"
    log.write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict(orient="records")))
    path.write_text(yaml.safe_dump(scenario))
    assert main(["calibrate", "--from-log", str(log), "--scenario", str(path), "--fit", ",".join(TRUE),
                 "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)["fitted"]
    for key, true in TRUE.items():
        assert fitted[key]["value"] == pytest.approx(true, rel=0.05)


def test_a_skyrl_log_round_trips_through_its_own_timers() -> None:
    """SkyRL's Timer names (timing/generate, fwd_logprobs_values_reward, policy_train, sync_weights,
    step): read back as the generate, logprobs, update_actor and sync_weights phases (its sync holding
    the switch back to generation, where the switch overhead enters), the known parameters recovered
    within 5%."""
    stages = ("generate", "logprobs", "update_actor", "sync_weights", "step_s")
    truth = logfit.simulate_timings(SCENARIO, _true_items(TRUE))
    assert truth["sync_weights"] > truth["weight_sync"] > 0           # the switch back is in SkyRL's sync
    frame = timings_log(np.random.default_rng(0), {s: truth[s] for s in stages}, steps=6, noise=0.003,
                        flavour="skyrl")
    assert {"timing/generate", "timing/fwd_logprobs_values_reward", "timing/policy_train", "timing/sync_weights",
            "timing/step"} == set(frame.columns) - {"step"}
    log = _normalize(frame.assign(**{"timing/convert_to_training_input": 0.1}), "<log>")
    assert log.stages == ["generate", "update_actor", "logprobs", "sync_weights"]
    assert log.ignored == ["timing/convert_to_training_input"]
    fit = logfit.fit_runs([logfit.LoggedRun(log, SCENARIO)], list(TRUE), max_evaluations=20)
    for key, true in TRUE.items():
        assert fit.values[key] == pytest.approx(true, rel=0.05)


def test_a_trl_log_round_trips_through_its_own_timers() -> None:
    """TRL's step_time and profiling timers (vLLM.generate, sync_weights, as GRPOTrainer logs them):
    read back as the step, the generate phase and the sync_weights phase (the weights loaded into
    the woken engine, where the switch overhead enters), the known parameters recovered within 5%."""
    stages = ("generate", "sync_weights", "step_s")
    truth = logfit.simulate_timings(SCENARIO, _true_items(TRUE))
    frame = timings_log(np.random.default_rng(0), {s: truth[s] for s in stages}, steps=6, noise=0.003,
                        flavour="trl")
    assert set(frame.columns) - {"step"} == {"profiling/Time taken: GRPOTrainer.vLLM.generate",
                                             "profiling/Time taken: GRPOTrainer.sync_weights", "step_time"}
    log = _normalize(frame.assign(**{"completions/mean_length": 300.0}), "<log>")
    assert log.timings == ["generate", "sync_weights", "step_s"] and log.ignored == ["completions/mean_length"]
    fit = logfit.fit_runs([logfit.LoggedRun(log, SCENARIO)], list(TRUE), max_evaluations=20)
    for key, true in TRUE.items():
        assert fit.values[key] == pytest.approx(true, rel=0.05)


def test_an_areal_log_round_trips_through_its_own_timers() -> None:
    """AReaL's timeperf/<name> timers on split pools (kind areal): `rollout` the trainer's wait for
    its batch, the passes as AReaL times them (the steps after the first); no whole step is timed.
    The known parameters recovered within 5%; colocated, its rollout timer is the generation."""
    scenario = {**SCENARIO, "iterations": 4, "schedule": {"kind": "areal", "rollout_devices": 2}}
    true = {k: TRUE[k] for k in ("workload.inference.step_overhead_s", "topology.device.gemm_efficiency")}
    stages = ("rollout", "old_log_prob", "reference", "update_actor", "weight_sync")
    truth = logfit.simulate_timings(scenario, _true_items(true))
    assert 0 < truth["rollout"] < truth["generate"]        # the wait: the trainer's own work overlaps
    frame = timings_log(np.random.default_rng(0), {s: truth[s] for s in stages}, steps=6, noise=0.003,
                        flavour="areal")
    assert set(frame.columns) - {"step"} == {"timeperf/rollout", "timeperf/recompute_logp", "timeperf/ref_logp",
                                             "timeperf/train_step", "timeperf/update_weights"}
    log = _normalize(frame.assign(**{"timeperf/save": 0.5}), "<log>")
    assert log.timings == ["old_log_prob", "reference", "update_actor", "weight_sync", "rollout"]
    assert log.ignored == ["timeperf/save"]
    fit = logfit.fit_runs([logfit.LoggedRun(log, scenario)], list(true), max_evaluations=20)
    for key, value in true.items():
        assert fit.values[key] == pytest.approx(value, rel=0.05)
    colocated = logfit.simulate_timings(SCENARIO, _true_items(true))
    assert colocated["rollout"] == colocated["generate"]


def test_the_fits_sigma_is_the_residual_variance_over_the_degrees_of_freedom():
    """One parameter, three residuals (1, -1, 0) of unit sensitivity: s^2 = 2 / (3 - 1) and
    sigma = sqrt(s^2 / (J^T J)) = sqrt(1 / 3) (an audit's mutation to s^2 = 2 / 3 passed the ratio
    checks)."""
    sigma = logfit._uncertainty(np.array([[1.0], [1.0], [1.0]]), np.array([1.0, -1.0, 0.0]), np.array([1.0]))
    assert sigma[0] == pytest.approx(np.sqrt(1 / 3))


def test_too_few_residuals_leave_a_sigma_undefined_but_an_unseen_parameter_unpinned():
    """An audit (2026-12-07): 3 steps of one step time fitting the 3 default keys printed '+- n/a'
    (pinned null: too few residuals) under a note saying the three were 'reported unpinned (sigma
    inf)'. A direction the logs do not see is unpinned whatever the residual count: inf; a sigma of
    a parameter the logs do see stays undefined (nan) without a residual variance."""
    alike = np.ones((3, 3))                               # one logged figure moved alike by all three
    assert np.isinf(logfit._uncertainty(alike, np.zeros(3), np.ones(3))).all()
    both = np.column_stack([np.eye(2), [1.0, 1.0]])      # 2 residuals, 3 parameters: one null direction
    assert np.isinf(logfit._uncertainty(both, np.zeros(2), np.ones(3))).all()
    separate = np.eye(2)                                  # each seen, no degrees of freedom left
    assert np.isnan(logfit._uncertainty(separate, np.zeros(2), np.ones(2))).all()
    partly = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    sigma = logfit._uncertainty(partly, np.zeros(3), np.ones(3))
    assert np.isinf(sigma[:2]).all() and np.isnan(sigma[2])


def test_nearly_alike_parameters_are_not_pinned_and_the_spread_floors_the_residual_variance():
    """Two columns at a normalized singular-value ratio of ~1e-3 (they move the residuals almost
    alike) were 'pinned' from a near-zero residual: now inf, the third parameter still pinned; and a
    fit whose residuals are 0 takes the logs' own spread for its noise, not 0."""
    base = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    other = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    jac = np.column_stack([base, base * (1 + 1e-3 * other), other])
    sigma = logfit._uncertainty(jac, np.full(5, 1e-6), np.ones(3))
    assert np.isinf(sigma[:2]).all() and np.isfinite(sigma[2])
    assert [members for _, members in logfit.weak_directions(jac)] == [[0, 1]]
    sigma = logfit._uncertainty(np.ones((3, 1)), np.zeros(3), np.ones(1), spread=0.01)
    assert sigma[0] == pytest.approx(0.01 / np.sqrt(3))


def test_a_noise_free_log_does_not_pin_the_step_overhead_against_the_hbm_rate() -> None:
    """A log rlsim writes without noise under 4 ms / 0.5 / 0.55 (the audit's low0.jsonl): the step
    overhead and the engine HBM rate enter only the generation, alike; the fit lands on 6.2 ms / 0.67
    and had reported both pinned (4-6 sigma off). Now they are not, a note names the pair and what
    separates them, and a second run of another model size does: both recovered within 1%."""
    keys = list(logfit.DEFAULT_FIT_KEYS)
    true = dict(zip(keys, (4e-3, 0.5, 0.55), strict=True))
    fit = logfit.fit_runs([_logged_run(true=true, noise=0.0)], keys)
    pinned = {key: entry["pinned"] for key, entry in fit.to_json()["fitted"].items()}
    assert pinned == {keys[0]: False, keys[1]: False, keys[2]: True}
    assert any(note.startswith(f"{keys[0]} and {keys[1]} move the logged phases almost alike")
               and "model size" in note for note in fit.notes)
    small = ("workload.model=qwen2.5-1.5b",)
    truth = logfit.simulate_timings(SCENARIO, [*_true_items(true), *small])
    frame = timings_log(np.random.default_rng(1), {s: truth[s] for s in VERL_STAGES}, steps=6, noise=0.003)
    second = logfit.LoggedRun(_normalize(frame, "<1.5b log>"), SCENARIO, small)
    both = logfit.fit_runs([_logged_run(true=true), second], keys, max_evaluations=30)
    for key, value in true.items():
        assert both.values[key] == pytest.approx(value, rel=0.01) and 0 < both.sigma[key] < 0.05 * value
    assert not any("almost alike" in note for note in both.notes)


def test_outlying_warm_up_steps_are_named_with_the_skip_steps_that_leaves_them_out() -> None:
    """Three warm-up steps at 1.6x with the default --skip-steps 1 (the audit's verl_warm3.jsonl) were
    fitted without a word (GEMM rate -7.6%) and inflated the log's spread, hiding the misfit: now a
    note names steps 2 and 3 and --skip-steps 3, the robust spread lets the misfit note through, and
    --skip-steps 3 recovers the value without either note."""
    key = "topology.device.gemm_efficiency"
    run = _logged_run(true={key: 0.55}, noise=0.01)
    warm = run.log.frame.copy()
    warm.loc[:2, run.log.timings] *= 1.6
    warm_run = logfit.LoggedRun(RunLog(warm, "warm"), SCENARIO)
    fit = logfit.fit_runs([warm_run], [key])
    outlier_notes = [note for note in fit.notes if "robust sigmas from their phase's median" in note]
    # (the figures are the log's noise draws: one per logged phase and step, generate_sequences among them)
    assert len(outlier_notes) == 1 and outlier_notes[0].startswith("warm: step(s) 2 (1.61x), 3 (1.59x) lie")
    assert outlier_notes[0].endswith("if they are warm-up, give --skip-steps 3")
    assert any(note.startswith("the fit leaves") for note in fit.notes)
    skipped = logfit.fit_runs([warm_run], [key], skip_steps=3)
    assert skipped.values[key] == pytest.approx(0.55, rel=0.01)
    assert not any("robust sigmas" in note or note.startswith("the fit leaves") for note in skipped.notes)
    assert logfit._log_spread([{"a": np.array([1.0, 1.01, 0.99, 1.0, 1.6])}]) == pytest.approx(1.4826 * 0.01)


def test_a_log_the_fit_cannot_explain_is_an_error_naming_the_file_and_the_names_it_was_read_by(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A verl log in milliseconds fitted to its bounds at 99% rms and wrote an overlay (exit 0); a CSV
    of gen_time,step_time was read as TRL's step_time (GEMM -> 1). Both now exit 2 naming the file
    (the first its column and unit, before the fit; the second whose names were matched), with no
    overlay; a log the fit explains says whose names it was read by."""
    scenario = tmp_path / "run.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    run = _logged_run()
    in_ms = tmp_path / "ms.jsonl"
    keys = {"generate": "timing_s/gen", "old_log_prob": "timing_s/old_log_prob", "reference": "timing_s/ref",
            "update_actor": "timing_s/update_actor", "step_s": "timing_s/step"}
    frame = run.log.frame.rename(columns=keys)
    in_ms.write_text("".join(json.dumps({k: v * (1 if k == "step" else 1000) for k, v in r.items()}) + "\n"
                             for r in frame.to_dict("records")))
    wrong = tmp_path / "wrong.csv"
    # another logger's columns: its step_time a quarter of the run's step (the audit's wrongcols.csv)
    wrong.write_text("gen_time,step_time\n" + "".join(f"{g / 8:.3f},{t / 4:.3f}\n"
                                                       for g, t in zip(frame["timing_s/gen"], frame["timing_s/step"],
                                                                       strict=True)))
    out = tmp_path / "fitted.yaml"
    # the log in milliseconds is refused before the fit, naming its column (UNIT_SLIP_RATIO)
    for log, start, words in ((in_ms, "field 'timing_s/gen': timing_s/gen's median", ("milliseconds", "1000")),
                              (wrong, "field '--from-log': the fit leaves", ("TRL's (step_time)",))):
        assert main(["calibrate", "--from-log", str(log), "--scenario", str(scenario), "--out", str(out),
                     "--max-evaluations", "8"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rlsim: error: {log}: {start}") and "Traceback" not in err
        assert all(word in err for word in words) and not out.exists()
    in_s = tmp_path / "s.jsonl"
    in_s.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict("records")))
    assert main(["calibrate", "--from-log", str(in_s), "--scenario", str(scenario), "--out", str(out), "--json",
                 "--fit", "topology.device.gemm_efficiency", "--max-evaluations", "8"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert f"{in_s}: timings read by verl's (timing_s/gen, timing_s/old_log_prob, timing_s/ref, " \
           "timing_s/update_actor, timing_s/step) metric names" in notes


def test_framework_timers_are_read_off_a_summary_as_the_frameworks_time_them():
    """The fits compare a log with predicted_timings, and the round trips make the log from the same
    function, so a timer mapped wrongly cancels out (an audit's mutations passed): NeMo RL's one
    log-prob timer holds the policy's and the reference's passes (and SkyRL's the critic's values);
    AReaL's timers are the mean of the steps after the first."""
    summary = {"stage_time_s": {"generate": 10.0, "old_logprob": 2.0, "reference": 3.0, "values": 4.0,
                                "train": 5.0},
               "steady_step_time_s": 30.0,
               "areal": {"per_step": [{"rollout_s": 100.0, "recompute_logp_s": 50.0},
                                      {"rollout_s": 8.0, "recompute_logp_s": 2.0},
                                      {"rollout_s": 10.0, "recompute_logp_s": 4.0}]}}
    timings = logfit.predicted_timings(summary)
    assert timings["logprobs"] == 2.0 + 3.0 + 4.0 and timings["step_s"] == 30.0
    assert timings["rollout"] == 9.0 and timings["old_log_prob"] == 3.0   # the warm-up step (100 s) left out


def test_the_predicted_step_is_over_the_steps_the_phases_are():
    """A hybrid engine's verl phases are the whole run's; the predicted step was the steady one
    beside them (phases + other summed 13.458 s against a 13.309 s step; a calibration audit)."""
    verl = {"gen": 8.0, "old_log_prob": 1.0, "ref": 1.0, "update_actor": 3.0, "reward": 0.1, "other": 0.358,
            "step": 13.458}
    timings = logfit.predicted_timings({"stage_time_s": {"generate": 8.0}, "steady_step_time_s": 13.309,
                                        "verl_timing_s": verl})
    assert timings["step_s"] == 13.458
    assert logfit.predicted_timings({"stage_time_s": {"generate": 8.0}, "steady_step_time_s": 13.309})["step_s"] \
        == 13.309


NEMO_STAGES = ("generate", "logprobs", "update_actor", "step_s")


@settings(max_examples=8, deadline=None, derandomize=True)
@given(step_overhead=st.floats(1e-3, 0.04), gemm=st.floats(0.15, 0.95), switch=st.floats(0.5, 30.0),
       flavour=st.sampled_from(["verl", "nemo-rl"]))
def test_the_round_trip_holds_across_parameter_sets(step_overhead: float, gemm: float, switch: float,
                                                    flavour: str) -> None:
    """Issue 12 item 7 over many known parameter sets, not one: a log rlsim writes under them (0.3% noise)
    in verl's names (its gen and generate_sequences tell the switch apart) or NeMo RL's (no switch
    timer: step overhead and GEMM rate) is fitted back within 5%, each value pinned (sigma < 5%) and
    within 4 sigma of the truth (the uncertainty is honest)."""
    true = {"workload.inference.step_overhead_s": step_overhead, "topology.device.gemm_efficiency": gemm}
    if flavour == "verl":
        true["schedule.switch.overhead_s"] = switch
    run = _logged_run(stages=VERL_STAGES if flavour == "verl" else NEMO_STAGES, flavour=flavour, true=true)
    fit = logfit.fit_runs([run], list(true))
    for key, value in true.items():
        assert fit.values[key] == pytest.approx(value, rel=0.05)
        assert 0 < fit.sigma[key] < 0.05 * value
        assert abs(fit.values[key] - value) < 4 * fit.sigma[key]


def test_a_timing_far_beyond_the_simulated_phase_is_refused_before_the_fit_naming_its_column() -> None:
    """A verl log in milliseconds was caught only after the fit (its rms error at the bounds): the
    timings are compared with the scenario's simulated phases first, and a column whose median is over
    UNIT_SLIP_RATIO times its phase is refused naming the column and the unit (closed form: the ratio)."""
    run = _logged_run()
    keys = {"generate": "timing_s/gen", "generate_sequences": "timing_s/generate_sequences",
            "old_log_prob": "timing_s/old_log_prob", "reference": "timing_s/ref",
            "update_actor": "timing_s/update_actor", "step_s": "timing_s/step"}
    in_ms = run.log.frame.rename(columns=keys)
    in_ms[list(keys.values())] *= 1000.0
    ms_run = logfit.LoggedRun(_normalize(in_ms, "ms.jsonl"), SCENARIO)
    with pytest.raises(RlsimError, match=r"timing_s/gen's median .* is 1\d\d\dx the simulated generate") as error:
        logfit.fit_runs([ms_run], ["topology.device.gemm_efficiency"], max_evaluations=2)
    assert error.value.field == "timing_s/gen" and error.value.source == "ms.jsonl"
    assert "milliseconds" in (error.value.fix or "") and "1000" in (error.value.fix or "")
    measured = {"generate": np.array([1.0, 1.0, 3.0])}   # median 1 s
    for predicted, refused in ((1.0 / (logfit.UNIT_SLIP_RATIO + 1), True), (1.0 / (logfit.UNIT_SLIP_RATIO - 1), False)):
        if refused:
            with pytest.raises(RlsimError, match="timing_s/gen's median"):
                logfit._refuse_unit_slip(ms_run, measured, {"generate": predicted})
        else:
            logfit._refuse_unit_slip(ms_run, measured, {"generate": predicted})
