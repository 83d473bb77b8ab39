"""Bounds (issue 14, class 4): each limit refuses before any work, names the field and its override,
and the override lifts it; the YAML loader refuses alias bombs; sweeps refuse huge grids."""
import pytest
import yaml

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.presets import MAX_EXPANDED_NODES, load_yaml_text
from simulator.scenario import WORK_S_PER_UNIT, Limits, load_scenario, work_estimate

TINY = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100"]


def _err(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_iterations_past_the_limit_are_refused_and_the_override_lifts_it():
    with pytest.raises(RlsimError, match=r"limits\.max_iterations") as info:
        load_scenario(None, iterations=1_000_000)
    assert info.value.field == "iterations"
    assert load_scenario(None, iterations=20_000, overrides=["limits.max_iterations=20000"]).iterations == 20_000


def test_iterations_of_thirty_digits_in_yaml(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text("workload: grpo-qwen2.5-7b\niterations: " + "1" + "0" * 30 + "\n")
    code, err = _err(capsys, "run", str(path))
    assert code == 2 and "long.yaml" in err and "iterations" in err and "limits.max_iterations" in err


def test_a_million_nodes_is_refused_before_the_graph_is_built(capsys):
    code, err = _err(capsys, "run", *TINY, "--iterations", "1", "--set", "topology.nodes=1000000")
    assert code == 2 and "8,000,000 devices" in err and "limits.max_devices" in err
    code, err = _err(capsys, "comm", "--topology", "dgx-h100", "--set", "topology.nodes=1000000", "--op",
                     "all_reduce", "--bytes", "1MiB", "--group", "node:0")
    assert code == 2 and "limits.max_devices" in err


def test_the_device_limit_is_overridable(capsys):
    code, err = _err(capsys, "comm", "--topology", "dgx-h100", "--set", "topology.nodes=2", "--set",
                     "limits.max_devices=8", "--op", "all_reduce", "--bytes", "1MiB", "--group", "node:0")
    assert code == 2 and "16 devices" in err
    code, _ = _err(capsys, "comm", "--topology", "dgx-h100", "--set", "topology.nodes=2", "--set",
                   "limits.max_devices=16", "--op", "all_reduce", "--bytes", "1MiB", "--group", "node:0")
    assert code == 0


def test_a_tiny_length_budget_is_refused_by_segments(capsys):
    code, err = _err(capsys, "run", *TINY, "--iterations", "1", "--schedule", "async", "--set",
                     "schedule.partial_rollout=true", "--set", "schedule.length_budget=1")
    assert code == 2 and "schedule.length_budget" in err and "8,192 segments" in err and "length_budget >= 32" in err


def test_work_estimate_closed_form():
    # (overprovision and partial_rollout, refused together since a property hunt, each on its own)
    sc = load_scenario(None, workload="grpo-qwen2.5-7b", iterations=3,
                       overrides=["schedule.kind=async", "schedule.overprovision=0.5"])
    est = work_estimate(sc, 16)
    # 512 x 16 samples x 1.5 overprovision, plus 10 units per device, per iteration
    assert est.units == 3 * (512 * 16 * 3 // 2 + 10 * 16) and est.ahead == 0
    sc = load_scenario(None, workload="grpo-qwen2.5-7b", iterations=3,
                       overrides=["schedule.kind=async", "schedule.partial_rollout=true", "schedule.length_budget=4096"])
    # 512 x 16 samples x ceil(8192 / 4096) segments, plus 10 units per device, per iteration
    assert work_estimate(sc, 16).units == 3 * (512 * 16 * 2 + 10 * 16)
    # AReaL admits every round its bound opens: 64 rounds past the last iteration (it ran out of memory
    # at 2 iterations while the estimate counted 2 rounds)
    areal = load_scenario(None, workload="grpo-qwen2.5-7b", iterations=2,
                          overrides=["schedule.kind=areal", "schedule.max_head_offpolicyness=64"])
    est = work_estimate(areal, 16)
    assert est.units == (2 + 64) * 512 * 16 + 2 * 10 * 16 and "2 iterations + 64 rounds ahead" in est.describe()
    assert est.seconds == pytest.approx(est.units * WORK_S_PER_UNIT)


def test_max_work_refuses_a_run_before_it_starts(capsys):
    code, err = _err(capsys, "run", *TINY, "--iterations", "2", "--set", "limits.max_work=1000")
    assert code == 2 and "limits.max_work" in err and "work units" in err


def test_max_work_names_the_term_that_makes_the_work(capsys):
    # `--set workload.prompts_per_step=100000000` was reported as field 'iterations' (a new-user trial)
    code, err = _err(capsys, "run", *TINY, "--set", "workload.prompts_per_step=100000000")
    assert code == 2 and "field 'workload.prompts_per_step'" in err and "--set workload.prompts_per_step=" in err
    code, err = _err(capsys, "run", *TINY, "--iterations", "9000", "--set", "workload.prompts_per_step=16",
                     "--set", "workload.mini_batch_prompts=16", "--set", "limits.max_work=100000")
    assert code == 2 and "field 'iterations'" in err


def test_limits_default_stays_out_of_the_snapshot():
    assert "limits" not in load_scenario(None).to_dict()
    assert load_scenario(None, overrides=["limits.max_devices=9"]).to_dict()["limits"]["max_devices"] == 9
    assert Limits().max_iterations == 10_000


BOMB = "".join(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


def test_a_yaml_alias_bomb_is_refused(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + BOMB)
    assert len(path.read_bytes()) < 500
    code, err = _err(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and "bomb.yaml" in err and "expands" in err
    assert not (tmp_path / "out" / "scenario.yaml").exists()


def test_alias_expansion_is_counted_not_walked():
    data = load_yaml_text("a: &a [1, 2]\nb: [*a, *a]\n", source="x")   # small sharing is fine
    assert data == {"a": [1, 2], "b": [[1, 2], [1, 2]]}
    wide = "a: &a [" + ",".join(["1"] * 1001) + "]\nb: &b [" + ",".join(["*a"] * 1000) + "]\n"
    with pytest.raises(RlsimError, match="expands"):
        load_yaml_text(wide, source="x")
    assert MAX_EXPANDED_NODES == 1_000_000


def test_a_recursive_alias_is_refused(capsys):
    with pytest.raises(RlsimError, match="contains it"):
        load_yaml_text("a: &x [1, *x]\n", source="rec.yaml")
    code, err = _err(capsys, "run", "--set", "planner=&x [*x]")
    assert code == 2 and "Traceback" not in err


def test_a_million_point_grid_is_refused_and_max_points_lifts_it(capsys):
    values = ",".join(str(i) for i in range(1000))
    code, err = _err(capsys, "sweep", "--grid", f"seed={values}", "--grid", f"iterations={values}")
    assert code == 2 and "1,000,000 points" in err and "--max-points" in err
    code, err = _err(capsys, "sweep", "--grid", "seed=0,1,2", "--max-points", "2")
    assert code == 2 and "3 points" in err
    # seeds multiply what runs: 3 points x 4 seeds = 12 simulations, past 10 (before any is run)
    code, err = _err(capsys, "sweep", "--grid", "seed=0,1,2", "--seeds", "4", "--max-points", "10")
    assert code == 2 and "3 points" in err and "12 simulations" in err


def test_yaml_safe_dump_of_a_loaded_file_is_bounded(tmp_path):
    """What the loader accepts can be written back (the snapshot) without blowing up."""
    data = load_yaml_text("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", source="x")
    assert len(yaml.safe_dump(data)) < 200


def test_plan_refuses_a_global_batch_past_the_limit(capsys):
    code, err = _err(capsys, "plan", "--model", "llama3.1-8b", "--topology", "dgx-h100",
                     "--global-batch", "1000000000000", "--seq-len", "4096")
    assert code == 2 and "limits.max_global_batch" in err
    code, err = _err(capsys, "plan", "--model", "llama3.1-8b", "--topology", "dgx-h100",
                     "--global-batch", "64", "--seq-len", "10000000000")
    assert code == 2 and "--seq-len" in err


@pytest.mark.parametrize("argv, field", [(["run", "--seeds", "1000000"], "--seeds"),
                                         (["run", "--set", "replicas=1000000"], "replicas"),
                                         (["sensitivity", "--samples", "1000000"], "--samples")])
def test_a_million_simulations_are_refused_before_any_runs(capsys, argv, field):
    code, err = _err(capsys, *argv)
    assert code == 2 and f"field '{field}'" in err and "limits.max_runs" in err
