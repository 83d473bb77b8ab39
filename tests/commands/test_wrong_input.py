"""Values that passed validation and crashed later, and wrong input accepted silently (issue 14,
classes 2 and 5), and the progress shown on a terminal (class 4)."""
import io

import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.commands import common

TINY = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1"]


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("price", ["nan", "inf", "-1", "h100=nan"])
def test_a_price_that_is_not_a_price_is_refused_before_the_sweep(capsys, price):
    code, _, err = _run(capsys, "sweep", "--price", price, "--json", "--grid", "seed=1")
    assert code == 2 and "--price" in err and "Traceback" not in err


def test_a_price_of_a_misspelt_device_is_refused_before_the_sweep(capsys, tmp_path):
    # --price h10=2.5 ran every point, then stopped on "no price for device 'h100'" (a new-user trial)
    code, _, err = _run(capsys, "sweep", *TINY, "--price", "h10=2.5", "--grid", "seed=1,2", "--out", str(tmp_path / "s"))
    assert code == 2 and "did you mean 'h100'" in err and "--price h100=2.5" in err
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())   # nothing ran


@pytest.mark.parametrize("argv", [["plan", "--target-tokens-per-s", "nan"], ["sweep", "--target-step-time-s", "inf",
                                                                             "--grid", "seed=1"]])
def test_targets_are_finite_and_positive(capsys, argv):
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "finite number > 0" in err


def test_rollout_devices_past_the_devices_is_refused(capsys):
    code, _, err = _run(capsys, "run", *TINY, "--set", "schedule.kind=disaggregated",
                        "--set", "schedule.rollout_devices=10000")
    assert code == 2 and "schedule.rollout_devices" in err and "at most 6" in err


@pytest.mark.parametrize("setting", ["workload.response_length.sigma=.inf", "workload.response_length.median=.nan",
                                     "workload.response_length.max=1e300", "iterations=true",
                                     "workload.prompts_per_step=false"])
def test_wrong_numbers_are_refused_naming_the_field(capsys, setting):
    code, _, err = _run(capsys, "run", *TINY, "--set", setting)
    assert code == 2 and setting.split("=")[0] in err


def test_a_device_left_idle_by_the_layout_is_said(capsys):
    """7 devices, TP2 training: 1 device idles. The run is well defined (its idle device-hours are the
    cost a planner should see, and the placement bubble shows it), so it runs, with a warning on
    stderr and in the summary, instead of a refusal. (7, not 3: one TP2 replica cannot hold the
    actor's update beside the resident reference's weights.)"""
    code, _, err = _run(capsys, "run", *TINY, "--schedule", "colocated", "--set", "topology.devices_per_node=7",
                        "--json")
    assert code == 0 and "warning: 1 of 7 devices idle" in err
    result = simulate(None, workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated", iterations=1,
                      overrides=["topology.devices_per_node=7"])
    assert "idle the whole run" in result.summary["warnings"][0]
    plain = simulate(None, workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated", iterations=1)
    assert plain.summary["warnings"] == []


class _Recorder:
    def __init__(self):
        self.calls, self.estimates = [], []

    def estimate(self, estimate):
        self.estimates.append(estimate)

    def __call__(self, done, total):
        self.calls.append((done, total))


def test_simulate_reports_the_estimate_and_each_iteration():
    progress = _Recorder()
    simulate(None, workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated", iterations=3,
             overrides=["workload.prompts_per_step=8", "workload.mini_batch_prompts=8"], progress=progress)
    assert progress.calls == [(1, 3), (2, 3), (3, 3)]
    assert progress.estimates[0].units == 3 * (8 * 16 + 10 * 8)


def test_the_bar_draws_only_on_a_terminal_and_long_runs_are_announced(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    common.Progress()(1, 3)                # StringIO is no terminal: nothing drawn
    assert err.getvalue() == ""
    with common.Progress(enabled=True) as bar:
        bar(2, 3)
    assert "2/3" in err.getvalue()
    monkeypatch.setattr(common, "ANNOUNCE_ESTIMATE_S", 0.0)
    progress = _Recorder()
    simulate(None, workload="grpo-qwen2.5-7b", topology="dgx-h100", iterations=1, progress=progress)
    common.Progress().estimate(progress.estimates[0])
    assert "rlsim: this run is about" in err.getvalue() and "work units" in err.getvalue()


def test_a_parquet_sweep_of_mixed_grid_values_is_written_and_resumed(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("topology: {preset: dgx-h100, nodes: 1}\nworkload: grpo-qwen2.5-7b\niterations: 1\n")
    # an int and a string in one column; both read as a scenario, neither runs (the layout refuses them)
    argv = ["sweep", str(tiny), "--grid", "workload.train_layout.tp=3,x", "--jobs", "1", "--out", str(tmp_path / "o"),
            "--format", "parquet", "--json"]
    for _ in range(2):   # the second run reads the file back
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and "every point of the sweep failed" in err


def test_a_failed_sweep_points_error_is_printed_whole_under_its_table(capsys):
    """A narrow table (a pipe, a CI log: 120 columns) cut a point's error ("does not fill doma");
    each failed point's error follows the table whole (found by a new-user trial)."""
    code, out, _ = _run(capsys, "sweep", "--workload", "grpo-qwen2.5-7b", "--iterations", "1",
                        "--grid", "topology.preset=dgx-h100,cloudmatrix384",
                        "--grid", "topology.nodes=8", "--set", "workload.prompts_per_step=16",
                        "--set", "workload.mini_batch_prompts=16")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("error (topology.preset=cloudmatrix384"))
    assert line.endswith("(fix: use a multiple of nodes_per_domain=48)")



@pytest.mark.parametrize("command", [["run", "--iterations", "1"], ["compare", "--iterations", "1"],
                                     ["sweep", "--grid", "seed=0", "--iterations", "1"], ["plan"]])
@pytest.mark.parametrize("items, field, words", [
    (["topology.nodes=1", "topology.nodes=2"], "topology.nodes", "is given twice"),
    (["schedule.failures[0].at_s=1"], "schedule.failures.0.at_s", "is not given, so it has no item 0"),
    (["workload.response_length.median=-1"], "workload.response_length.median", "median must be > 0"),
    (["topology.scaleout=2"], "topology.scaleout", "expected a mapping"),
    (["topology.device=2"], "topology.device", "expected a device name or mapping"),
    (["workload.model=nope"], "workload.model", "unknown model 'nope'"),   # plan named it 'model'
    (["workload.model="], "workload.model", "empty model name"),   # plan said 'missing --model' beside a scenario
    (["topology.preset.foo=1"], "topology.preset", "not a mapping"),   # was field 'foo' of '<topology mapping>'
    (["topology.preset={}"], "topology.preset", "not a mapping"),   # was field 'device' of '<topology mapping>'
    (["topology.preset=[1]"], "topology.preset", "not [1]"),   # was field 'topology'
    (["workload.train_params.compute.flash_attention.foo=1"], "workload.train_params.compute.flash_attention",
     "is a boolean, not a mapping"),   # was 'Input should be a valid boolean', its fix the docs
])
def test_odd_set_items_exit_2_naming_the_field_and_the_fix(capsys, tmp_path, command, items, field, words):
    """A --set fuzz of run / compare / sweep / plan: a key set twice ran the last (exit 0), an item of a
    list not given was blamed on the scenario, a negative median gave no fix."""
    path = tmp_path / "s.yaml"
    path.write_text("topology: {preset: dgx-h100, nodes: 1}\nworkload: grpo-qwen2.5-7b\n")
    code, _, err = _run(capsys, command[0], str(path), *command[1:], *(arg for item in items for arg in ("--set", item)))
    assert code == 2 and "Traceback" not in err
    assert f"field '{field}'" in err and words in err and "(fix: " in err
