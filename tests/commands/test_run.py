"""`rlsim run` / `rlsim compare` through the console script: contract, exit codes, determinism."""
import json
import shutil
import subprocess

import pytest

RLSIM = shutil.which("rlsim")
SMALL = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "2",
         "--set", "workload.prompts_per_step=32", "--set", "workload.samples_per_prompt=4",
         "--set", "workload.mini_batch_prompts=16"]

pytestmark = pytest.mark.skipif(RLSIM is None, reason="rlsim is not installed")


def call(*args):
    return subprocess.run([RLSIM, *args], capture_output=True, text=True, timeout=300)


def test_run_json_is_byte_identical_across_processes():
    a, b = call("run", *SMALL, "--schedule", "stalesync", "--json"), call("run", *SMALL, "--schedule",
                                                                        "stalesync", "--json")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    d = json.loads(a.stdout)
    assert d["schedule"] == "stalesync" and d["iterations"] == 2


@pytest.mark.parametrize("args", [["--set", "schedule.staleness=-1"], ["--topology", "no-such-cluster"]])
def test_bad_input_exits_2_without_traceback(args):
    r = call("run", *args)
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    assert "error" in r.stderr


def test_compare_json_and_table(tmp_path):
    r = call("compare", *SMALL, "--json")
    rows = json.loads(r.stdout)
    assert [x["schedule"] for x in rows] == ["colocated", "disaggregated", "stalesync"]
    t = call("compare", *SMALL)
    assert t.returncode == 0 and "tokens/s" in t.stdout and "disaggregated" in t.stdout


def test_run_out_dir(tmp_path):
    r = call("run", *SMALL, "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "trace.json").exists() and (tmp_path / "o" / "scenario.yaml").exists()


@pytest.mark.parametrize("command, flag", [("run", ["--json"]), ("run", ["--seeds", "2"]), ("run", ["--jobs", "2"]),
                                           ("compare", ["--schedules", "colocated,async"]),
                                           ("sensitivity", ["--metric", "mfu"])])
def test_print_scenario_refuses_the_flags_of_the_run_it_replaces(capsys, command, flag):
    # they were dropped: --json still printed YAML; compare's --schedules and sensitivity's --metric too
    from pathlib import Path

    from simulator.cli import main

    config = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
    assert main([command, "--from-verl", str(config), "--print-scenario", *flag]) == 2
    assert f"field '{flag[0]}'" in capsys.readouterr().err
    assert main([command, "--from-verl", str(config), "--print-scenario"]) == 0


@pytest.mark.parametrize("argv, field", [
    (["run", "--iterations", "1", "--set", "iterations=2"], "iterations"),          # the --set won
    (["run", "--iterations", "1", "--schedule", "colocated", "--set", "schedule.kind=stalesync"], "schedule.kind"),
    (["run", "--iterations", "1", "--jobs", "2"], "--jobs"),                           # one run: nothing in parallel
    (["compare", "--iterations", "1", "--jobs", "2"], "--jobs"),
    (["sensitivity", "--iterations", "1", "--samples", "0", "--vary", "workload.response_length.sigma=0.5..1",
      "--vary", "workload.response_length.sigma=0.6..1"], "--vary"),                   # the last range won
])
def test_options_that_were_read_past_are_errors(capsys, argv, field):
    from simulator.cli import main

    assert main(argv) == 2
    assert f"field '{field}'" in capsys.readouterr().err


def test_schedule_help_names_every_built_in_kind():
    """`rlsim run --schedule` / `rlsim sweep --schedule` list the kinds the schema has (the help named
    five of the eight)."""
    from simulator.commands.common import SCHEDULE_KINDS_HELP
    from simulator.scenario import BUILTIN_SCHEDULE_KINDS

    assert SCHEDULE_KINDS_HELP.split(" | ") == list(BUILTIN_SCHEDULE_KINDS)


@pytest.mark.parametrize("option, field", [("--schedule", "schedule.kind"), ("--topology", "topology"),
                                           ("--workload", "workload")])
def test_an_empty_name_is_an_error_not_the_default(option, field, capsys):
    """`--schedule ""` ran the seed scenario's StaleSync; `--topology ""` read the current folder."""
    from simulator.cli import main

    assert main(["run", option, "", "--iterations", "1"]) == 2
    assert f"field '{field}'" in capsys.readouterr().err


def test_a_frameworks_kind_refuses_the_generic_staleness_knobs_naming_its_own():
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario

    with pytest.raises(RlsimError, match="areal runs ahead under its own knobs .*max_head_offpolicyness"):
        load_scenario(schedule={"kind": "areal", "staleness": 2})
    with pytest.raises(RlsimError, match=r"needs rollout to run ahead of training \(staleness >= 1\)"):
        load_scenario(schedule={"kind": "colocated", "staleness": 2})


def test_the_snapshot_reloads_from_any_folder(tmp_path, monkeypatch, capsys):
    """scenario.yaml keeps a relative length file (or topology file) as an absolute path: reloaded from
    another folder, it read that folder's file or failed ('cannot read length file')."""
    from simulator.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "lens.csv").write_text("len\n" + "\n".join(str(100 + 37 * i % 3000) for i in range(200)) + "\n")
    (src / "scen.yaml").write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload:\n  preset: grpo-qwen2.5-7b\n"
                                   "  response_length: {dist: empirical, file: lens.csv, max: 8192}\n"
                                   "schedule: {kind: colocated}\niterations: 1\n")
    monkeypatch.chdir(src)
    assert main(["run", "scen.yaml", "--out", str(tmp_path / "out"), "--json"]) == 0
    first = capsys.readouterr().out
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "lens.csv").write_text("len\n5\n6\n")   # a different file of the same name there
    monkeypatch.chdir(other)
    assert main(["run", str(tmp_path / "out" / "scenario.yaml"), "--json"]) == 0
    assert capsys.readouterr().out == first


def test_a_folder_named_after_a_preset_is_not_the_preset(tmp_path, monkeypatch, capsys):
    """`rlsim run --topology dgx-h100 --out dgx-h100`, then a reload from that folder's parent: the
    folder was read as the topology file ('cannot read file: Is a directory')."""
    from simulator.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["run", "--topology", "dgx-h100", "--workload", "grpo-qwen2.5-7b", "--iterations", "1", "--json"]
    assert main([*args, "--out", "dgx-h100"]) == 0
    first = capsys.readouterr().out
    assert main(["run", "dgx-h100/scenario.yaml", "--json"]) == 0
    assert capsys.readouterr().out == first


def test_compare_says_each_kinds_warnings(capsys):
    """`rlsim run` prints a summary's warnings; `rlsim compare` printed none (a split that moved, idle
    devices, a verl-fully-async batch that is not prompts_per_step)."""
    from simulator.cli import main

    assert main(["compare", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", "topology.nodes=2",
                 "--iterations", "1", "--schedules", "colocated,verl-fully-async", "--json"]) == 0
    err = capsys.readouterr().err
    assert "rlsim: warning: verl-fully-async: kind verl-fully-async trains 128 prompts a step" in err
    assert "warning: colocated" not in err


def test_a_topology_flag_beside_a_sized_scenario_says_it_replaces_the_size(tmp_path, capsys):
    """--topology replaces the file's whole topology, its nodes included: said on stderr, with the
    --set that keeps the size (found by a new-user trial: a 4-node file ran on one node silently)."""
    from simulator.cli import main
    path = tmp_path / "sized.yaml"
    path.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: grpo-qwen2.5-7b\n")
    assert main(["run", str(path), "--topology", "dgx-h200", "--iterations", "1", "--json"]) == 0
    err = capsys.readouterr().err
    assert "replaces" in err and "nodes: 2" in err and "--set topology.nodes=2" in err
    assert main(["run", str(path), "--topology", "dgx-h200", "--set", "topology.nodes=2", "--iterations", "1",
                 "--json"]) == 0
    assert "replaces" not in capsys.readouterr().err
