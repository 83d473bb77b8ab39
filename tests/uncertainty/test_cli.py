"""`--seeds N` and `rlsim sensitivity` on the command line (a tiny real scenario)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

SMALL = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
         "--set", "topology.nodes=1", "--set", "workload.prompts_per_step=8",
         "--set", "workload.samples_per_prompt=2", "--set", "workload.mini_batch_prompts=4"]



def _without_prompts(argv: list[str]) -> list[str]:
    """SMALL less its --set of the prompts per step (a grid over it refuses a base --set of the key)."""
    out = list(argv)
    at = out.index("workload.prompts_per_step=8")
    return out[:at - 1] + out[at + 1:]

def main_output(capsys, *args: str) -> tuple[int, str, str]:
    from simulator.cli import main
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def rlsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=300)


def test_run_seeds_json_is_byte_identical_across_processes_and_jobs():
    a = rlsim("run", *SMALL, "--seeds", "3", "--json")
    b = rlsim("run", *SMALL, "--seeds", "3", "--json", "--jobs", "2")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    doc = json.loads(a.stdout)
    assert doc["seeds"] == 3 and doc["replicas"]["seed"] == [0, 1, 2]
    low, high = doc["ci95"]["tokens_per_s"]
    assert low <= doc["tokens_per_s"] <= high


def test_one_seed_keeps_the_plain_run_output(capsys):
    plain = main_output(capsys, "run", *SMALL, "--json")
    one = main_output(capsys, "run", *SMALL, "--json", "--seeds", "1")
    assert plain[0] == 0 and plain[1] == one[1] and "ci95" not in plain[1]
    # --seeds 1 wins over the scenario's replicas: (the plain run refused replicas 3 before)
    over = main_output(capsys, "run", *SMALL, "--json", "--set", "replicas=3", "--seeds", "1")
    assert over[0] == 0, over[2]
    assert over[1] == plain[1]


def test_compare_seeds_out_writes_each_schedules_replicas_as_run_does(tmp_path, capsys):
    import pandas as pd
    code, out, _ = main_output(capsys, "compare", *SMALL, "--schedules", "colocated,disaggregated", "--seeds", "2",
                               "--json", "--out", str(tmp_path))
    assert code == 0
    docs = json.loads(out)
    assert json.loads((tmp_path / "comparison.json").read_text()) == docs
    for doc in docs:
        folder = tmp_path / doc["schedule"]
        assert json.loads((folder / "summary.json").read_text()) == doc
        replicas = pd.read_csv(folder / "replicas.csv")
        assert list(replicas["seed"]) == [0, 1] and replicas["step_time_s"].median() == doc["step_time_s"]
        snapshot = yaml.safe_load((folder / "scenario.yaml").read_text())   # each schedule's own input
        assert snapshot["schedule"]["kind"] == doc["schedule"] and snapshot["replicas"] == 2


def test_bad_distribution_exits_2_naming_the_key(capsys):
    code, _, err = main_output(capsys, "run", *SMALL, "--set", "workload.response_length.sigma={dist: normal, mean: 1}")
    assert code == 2 and "workload.response_length.sigma.sd" in err


def test_sensitivity_json_list_and_out(tmp_path, capsys):
    code, out, err = main_output(capsys, "sensitivity", *SMALL, "--vary", "workload.response_length.sigma=0.5..1.0",
                                 "--vary", "topology.device.hbm_efficiency=0.6..0.9", "--samples", "0", "--json",
                                 "--out", str(tmp_path))
    assert code == 0, err
    rows = json.loads(out)
    assert [row["rank"] for row in rows] == [1, 2]
    assert {row["key"] for row in rows} == {"workload.response_length.sigma", "topology.device.hbm_efficiency"}
    assert all(row["swing"] >= 0 and row["sobol_first"] is None for row in rows)
    # each row says what it measured: the metric, its figure at base, the seeds and Sobol samples
    assert {(row["metric"], row["seeds"], row["samples"]) for row in rows} == {("steady_tokens_per_s", 1, 0)}
    assert len({row["base"] for row in rows}) == 1 and rows[0]["base"] > 0
    assert (tmp_path / "tornado.svg").exists() and (tmp_path / "report.html").exists()
    assert json.loads((tmp_path / "sensitivity.json").read_text()) == rows


def _noisy_sobol_frame(*args, **kwargs):
    """A sensitivity frame whose Sobol estimates leave [0, 1] (4 base samples gave 1.11 / 1.27 on a
    7B scenario): what the command prints around, not how it was computed."""
    import pandas as pd
    frame = pd.DataFrame({"key": ["workload.response_length.median"], "low": [800.0], "high": [1600.0],
                          "figure_low": [1920.0], "figure_high": [2873.0], "swing": [953.0], "rank": [1],
                          "sobol_first": [1.11], "sobol_first_ci95": [0.92], "sobol_total": [1.27],
                          "sobol_total_ci95": [0.42]})
    frame.attrs.update(metric="steady_tokens_per_s", base=2252.0, seeds=1, samples=4)
    return frame


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_sensitivity_says_noisy_sobol_estimates_with_and_without_json(capsys, monkeypatch, json_flag):
    """The console said "note: Sobol indices outside [0, 1] or first above total (...)"; --json printed
    the same estimates with no word on stderr, where its other notes go (a sweep audit)."""
    from simulator.uncertainty import sensitivity_runs
    monkeypatch.setattr(sensitivity_runs, "sensitivity", _noisy_sobol_frame)
    code, out, err = main_output(capsys, "sensitivity", *SMALL, "--vary", "workload.response_length.median=800..1600",
                                 *json_flag)
    said = "Sobol indices outside [0, 1] or first above total (workload.response_length.median 1.11 / 1.27)"
    assert code == 0 and said in (err if json_flag else out), (out, err)
    if json_flag:
        assert json.loads(out)[0]["sobol_first"] == 1.11


def test_sensitivity_bad_vary_exits_2(capsys):
    code, _, err = main_output(capsys, "sensitivity", *SMALL, "--vary", "workload.response_length.sigma=1..0.5")
    assert code == 2 and "--vary" in err


def test_sweep_seeds_rows_carry_medians_and_intervals(capsys):
    code, out, err = main_output(capsys, "sweep", *_without_prompts(SMALL), "--grid", "workload.prompts_per_step=8,16", "--seeds", "2", "--jobs", "1",
                                 "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [row["seeds"] for row in rows] == [2, 2]
    assert all(row["ci95"]["tokens_per_s"][0] <= row["tokens_per_s"] <= row["ci95"]["tokens_per_s"][1]
               for row in rows)


def test_sweep_takes_the_scenarios_replicas_and_refuses_them_as_a_grid_key(capsys):
    # replicas: (here --set replicas=2) was read past by sweep; the docs give it as --seeds' default
    code, out, err = main_output(capsys, "sweep", *_without_prompts(SMALL), "--grid", "workload.prompts_per_step=8,16",
                                 "--set", "replicas=2", "--jobs", "1", "--json")
    assert code == 0, err
    assert [row["seeds"] for row in json.loads(out)] == [2, 2]
    code, _, err = main_output(capsys, "sweep", *SMALL, "--grid", "replicas=1,2", "--jobs", "1")
    assert code == 2 and "field '--grid'" in err


def test_sensitivity_takes_a_framework_config_as_its_base(capsys):
    # --from-verl was accepted and dropped: the seed scenario was analysed instead
    vary = ["--iterations", "1", "--samples", "0", "--vary", "topology.device.gemm_efficiency=0.5..0.8", "--json"]
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
    code, imported, _ = main_output(capsys, "sensitivity", "--from-verl", str(config), *vary)
    assert code == 0
    code, seed, _ = main_output(capsys, "sensitivity", *vary)
    assert code == 0 and json.loads(imported)[0]["figure_low"] != json.loads(seed)[0]["figure_low"]
    code, _, err = main_output(capsys, "sensitivity", "--from-verl", "/nonexistent.yaml", *vary)
    assert code == 2 and "/nonexistent.yaml" in err


def test_run_seeds_out_says_the_files_it_writes(tmp_path, capsys):
    # it printed the single run's list (scenario.yaml, CSVs, trace.json) over a folder of two files (fuzzing)
    from simulator.cli import main

    out = tmp_path / "rep"
    assert main(["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", "workload.prompts_per_step=8",
                 "--set", "workload.samples_per_prompt=2", "--set", "workload.mini_batch_prompts=8", "--iterations", "1",
                 "--seeds", "2", "--out", str(out)]) == 0
    said = capsys.readouterr().out.replace("\n", " ")
    assert sorted(p.name for p in out.iterdir()) == ["replicas.csv", "scenario.yaml", "summary.json"]
    assert "replicas.csv" in said and "scenario.yaml" in said and "trace.json" not in said
    # the snapshot, as a plain run's, runs the same replicas again (it was not written)
    assert main(["run", str(out / "scenario.yaml"), "--out", str(tmp_path / "again")]) == 0
    for name in ("summary.json", "scenario.yaml"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()


def test_a_few_seeds_say_their_intervals_coverage(capsys):
    """--seeds 3: the text, the verdict and the JSON say the [min, max] covers 75%, not 95%."""
    code, out, err = main_output(capsys, "compare", *SMALL, "--schedules", "colocated,async", "--seeds", "3")
    assert code == 0, err
    assert "75% interval ([min, max] of 3) over 3 seeds" in out and "95% CI" not in out
    assert "75% interval over 3 seeds: the [min, max]" in out
    code, out, err = main_output(capsys, "compare", *SMALL, "--schedules", "colocated,async", "--seeds", "3", "--json")
    docs = json.loads(out)
    assert docs[0]["ci_coverage"] == 0.75 and docs[1]["vs_baseline"]["ci_coverage"] == 0.75


def test_plan_intervals_say_their_coverage_and_one_draw_says_it_has_none(tmp_path, capsys):
    """plan --seeds labelled every row '95%' (one replica too) and its JSON had no ci_coverage; a plain
    run of distribution values printed a '0% interval' of one seed (found by a new-user trial)."""
    scenario = tmp_path / "d.yaml"
    scenario.write_text("workload: {preset: grpo-qwen2.5-7b, response_length: {dist: lognormal, "
                        "median: {dist: uniform, low: 600, high: 1100, integer: true}, sigma: 1.0}}\n"
                        "topology: {preset: dgx-h100, nodes: 1}\niterations: 1\n")
    code, out, err = main_output(capsys, "plan", str(scenario), "--seeds", "3", "--top", "1", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert all("ci_coverage" in row and (row["seeds"] > 1 or row["ci_coverage"] < 0.95) for row in rows)
    code, out, err = main_output(capsys, "run", str(scenario), "--set", "workload.prompts_per_step=8",
                                 "--set", "workload.samples_per_prompt=2", "--set", "workload.mini_batch_prompts=4")
    assert code == 0, err
    assert "one seed (one draw of the distribution values" in out and "0% interval" not in out


def test_replicated_tables_say_their_figures_are_medians_apart(capsys):
    """A replicated table prints each figure's own median: the bubble causes' medians need not sum to
    the total's, which the text now says once (run and compare), and a single seed does not."""
    from simulator.commands.replicas import MEDIANS_APART
    for args in (("run", *SMALL, "--seeds", "3"), ("compare", *SMALL, "--schedules", "colocated,async", "--seeds", "3")):
        code, out, err = main_output(capsys, *args)
        assert code == 0, err
        assert out.count(MEDIANS_APART) == 1
    code, out, err = main_output(capsys, "run", *SMALL)
    assert code == 0, err
    assert MEDIANS_APART not in out
