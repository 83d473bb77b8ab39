"""`rlsim sweep --from-verl` and `rlsim plan --from-verl`: a framework config as the base of a sweep
and as the scenario a plan plans, through the one import `run` uses (commands/common.framework_import)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pandas as pd
import pytest

from simulator.cli import main
from simulator.sweep import BaseScenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
DATA = Path(__file__).resolve().parent / "data"
VERL = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")
# the shipped example at a batch of 16 prompts: a point runs in about a second
SMALL = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16"]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_sweep_of_an_imported_config_is_its_runs_with_the_grid_values_set(tmp_path, capsys):
    code, out, err = cli(capsys, "sweep", "--from-verl", VERL, *SMALL, "--grid", "topology.nodes=1,2",
                         "--iterations", "1", "--jobs", "1", "--json", "--out", str(tmp_path))
    assert code == 0, err
    assert "25 keys mapped" in err   # the import's listing, on stderr as `run` prints it
    rows = json.loads(out)
    # the base it writes to --out is the same scenario as a file: the same rows
    code, again, err = cli(capsys, "sweep", str(tmp_path / "imported-scenario.yaml"), "--grid", "topology.nodes=1,2",
                           "--jobs", "1", "--json")
    assert code == 0, err
    assert json.loads(again) == rows
    assert [row["grid"] for row in rows] == [{"topology.nodes": 1}, {"topology.nodes": 2}]
    for row in rows:
        nodes = row["grid"]["topology.nodes"]
        code, single, err = cli(capsys, "run", "--from-verl", VERL, *SMALL, "--set", f"topology.nodes={nodes}",
                                "--iterations", "1", "--json")
        assert code == 0, err
        summary = json.loads(single)
        summary.pop("framework_import")
        assert summary["devices"] == 8 * nodes
        for key, value in summary.items():   # figure for figure: the row is the run's summary and more
            assert row[key] == value, key


def test_an_identical_command_resumes_and_a_changed_override_is_another_sweep(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--from-verl", VERL, *SMALL, "--grid", "topology.nodes=1,2", "--iterations", "1", "--jobs", "1",
            "--out", str(out)]
    code, text, err = cli(capsys, *argv)
    assert code == 0, err
    assert "2 points, 2 computed now, 0 from the results file" in text
    saved = (out / "imported-scenario.yaml").read_text()
    assert "verl config" in saved and "prompts_per_step: 16" in saved   # the base, with the import's listing
    code, text, err = cli(capsys, *argv)
    assert code == 0, err
    assert "2 points, 0 computed now, 2 from the results file" in text   # nothing recomputed
    # another import override changes the imported scenario: its points are not the old sweep's
    changed = [item if item != "data.train_batch_size=16" else "data.train_batch_size=32" for item in argv]
    code, text, err = cli(capsys, *changed)
    assert code == 0, err
    assert "2 points, 2 computed now, 0 from the results file" in text
    assert "prompts_per_step: 32" in (out / "imported-scenario.yaml").read_text()
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 4 and frame["base_fingerprint"].nunique() == 2


def test_a_mapping_base_is_fingerprinted_by_its_contents_and_travels_whole():
    scenario = {"workload": {"model": "qwen2.5-7b", "prompts_per_step": 16}, "topology": {"preset": "dgx-h100"}}
    base = BaseScenario(spec=scenario, spec_name="the scenario imported from job.yaml")
    reordered = BaseScenario(spec={"topology": {"preset": "dgx-h100"},
                                   "workload": {"prompts_per_step": 16, "model": "qwen2.5-7b"}})
    other = BaseScenario(spec={**scenario, "workload": {"model": "qwen2.5-7b", "prompts_per_step": 32}})
    assert base.fingerprint() == reordered.fingerprint() != other.fingerprint()
    assert pickle.loads(pickle.dumps(base)).fingerprint() == base.fingerprint()   # what a worker gets
    assert "the scenario imported from job.yaml" in base.input_digests()
    assert base.base_dirs() == []   # a mapping's relative paths read from the working folder, as simulate's


def test_a_sweep_rows_error_names_the_import_not_a_mapping(capsys):
    code, out, err = cli(capsys, "sweep", "--from-verl", VERL, *SMALL, "--grid", "workload.rollout_layout.tp=2,3",
                         "--iterations", "1", "--jobs", "1", "--json")
    assert code == 0, err
    failed = [row for row in json.loads(out) if row.get("error")]
    assert len(failed) == 1 and failed[0]["grid"] == {"workload.rollout_layout.tp": 3}
    assert f"<the scenario imported from {VERL}>" in failed[0]["error"]
    assert "<scenario mapping>" not in failed[0]["error"]


def test_the_grid_keys_are_the_users_in_the_import_as_set_keys_are(capsys):
    # the import sizes the topology from the config unless the user does: a grid of sizes does
    code, _, err = cli(capsys, "sweep", "--from-verl", VERL, *SMALL, "--grid", "topology.nodes=1,2",
                       "--iterations", "1", "--jobs", "1", "--json")
    assert code == 0, err
    assert "topology dgx-h100 sized by the topology.* items of --set / --grid" in err and "x 1 nodes = 8 GPUs" not in err


@pytest.mark.parametrize(("flag", "config"), [
    ("--from-verl", "verl-grpo-qwen2.5-7b.yaml"), ("--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml"),
    ("--from-areal", "areal-grpo-qwen2.5-1.5b.yaml"), ("--from-openrlhf", "openrlhf-reinforce-qwen2.5-7b-hybrid.sh"),
    ("--from-trl", "trl-grpo-qwen2.5-1.5b-colocate.yaml"), ("--from-skyrl", "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh")])
def test_every_framework_sweeps_over_rlsims_keys_and_plans(capsys, flag, config):
    # seed is an rlsim scenario key, and AReaL's and TRL's configs have a `seed` of their own: the
    # grid's is rlsim's (it was refused as the config's)
    argv = [flag, str(EXAMPLES / config), "--iterations", "2", "--json"]
    code, out, err = cli(capsys, "sweep", *argv, "--grid", "seed=0,1", "--jobs", "1")
    assert code == 0, err
    rows = json.loads(out)
    assert [row["grid"] for row in rows] == [{"seed": 0}, {"seed": 1}] and not any(row.get("error") for row in rows)
    code, single, err = cli(capsys, "run", *argv, "--set", "seed=1")
    assert code == 0, err
    assert rows[1]["steady_tokens_per_s"] == json.loads(single)["steady_tokens_per_s"]
    # and plan ranks layouts of the job's trainer on the devices the import gives it (AReaL's example
    # splits 8 GPUs into 4 of rollout and 4 of training: the plan's are the training pool's)
    code, out, err = cli(capsys, "plan", flag, str(EXAMPLES / config), "--top", "1", "--json")
    assert code == 0, err
    pools = json.loads(single)["pools"]
    assert json.loads(out)[0]["devices"] == pools.get("train", pools.get("actor"))


@pytest.mark.parametrize(("argv", "field", "said"), [
    # a key of the config's own table: the scenario key it maps to is the grid's
    (["--grid", "data.train_batch_size=16,32"], "data.train_batch_size", "--grid workload.prompts_per_step=..."),
    (["--grid", "topology.nodes=1,2", "--schedule", "async"], "--from-verl", "--schedule cannot be combined"),
    (["--grid", "topology.nodes=1,2", "--workload", "grpo-qwen2.5-7b"], "--from-verl", "--workload cannot be combined"),
    (["--grid", "topology.nodes=1,2", "trainer.nnodes=2"], "--from-verl", "right after its path"),
    (["--grid", "topology.nodes=1,2", "--set", "data.train_batch_size=8"], "data.train_batch_size",
     "after the config path"),
])
def test_a_sweep_refuses_what_cannot_go_with_an_import(capsys, argv, field, said):
    code, _, err = cli(capsys, "sweep", "--from-verl", VERL, "--iterations", "1", "--jobs", "1", *argv)
    assert code == 2 and "Traceback" not in err
    assert f"field '{field}'" in err and said in err


def test_plan_plans_the_imported_scenario_as_its_scenario_file(capsys):
    code, imported, err = cli(capsys, "plan", "--from-verl", VERL, "--top", "3", "--json")
    assert code == 0, err
    assert "25 keys mapped" in err
    code, hand, err = cli(capsys, "plan", str(DATA / "verl-grpo-qwen2.5-7b.scenario.yaml"), "--top", "3", "--json")
    assert code == 0, err
    rows = json.loads(imported)
    assert rows and rows == json.loads(hand)   # the same model, batch, lengths, topology and pools
    assert all(row["devices"] == 8 for row in rows)
    # the config's size and --topology reach the plan as they reach `run`
    code, out, err = cli(capsys, "plan", "--from-verl", VERL, "trainer.nnodes=2", "--topology", "dgx-a100",
                         "--top", "1", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["devices"] == 16


@pytest.mark.parametrize(("argv", "field", "said"), [
    (["--from-verl", VERL, "--model", "qwen2.5-7b"], "--model", "--model cannot be combined with --from-verl"),
    ([str(DATA / "verl-grpo-qwen2.5-7b.scenario.yaml"), "--from-verl", VERL], "--from-verl",
     "a scenario file cannot be combined"),
    (["--framework-schedule", "sync"], "--framework-schedule", "needs --from-verl"),
])
def test_plan_refuses_what_cannot_go_with_an_import(capsys, argv, field, said):
    code, _, err = cli(capsys, "plan", *argv)
    assert code == 2 and "Traceback" not in err
    assert f"field '{field}'" in err and said in err
