"""Durability of `rlsim sweep` (issue 14, item 7): workers die with the main process (SIGKILL,
SIGTERM), the resume key covers every referenced file's contents, a damaged or foreign results file
is a clear error or a recovered tail, integers stay integers, and nothing finished is lost."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.errors import RlsimError
from simulator.sweep import BaseScenario, ResultsStore, make_points, run_sweep
from simulator.sweep_files import referenced_files

psutil = pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parent.parent


class Counter:
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __call__(self, values: dict) -> dict:
        self.seen.append(dict(values))
        return {"devices": 8, "step_time_s": 2.0, "tokens_per_s": 10.0 * len(self.seen), "iterations": 3}


# --------------------------------------------------------------------------- the pool dies with the parent

def _rlsim(*args: str, **kwargs) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a SIGABRT makes the process print every thread's stack (see _exited)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "simulator", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _alive(procs) -> list:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _exited(proc: subprocess.Popen, sig: int, timeout_s: float = 30.0) -> str:
    """The stopped sweep's stderr once it has exited; if it is still running after `timeout_s`, it is
    aborted and the test fails with every thread's stack as faulthandler prints them (so a rare
    hang in CI says where it waits)."""
    try:
        return proc.communicate(timeout=timeout_s)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        err = proc.communicate(timeout=15)[1]
        pytest.fail(f"the sweep had not exited {timeout_s:.0f} s after {signal.Signals(sig).name}; "
                    f"its threads when aborted:\n{err[-6000:]}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_main_sweep_process_leaves_no_worker(tmp_path, sig):
    out = tmp_path / "sweep"
    # enough work (60 points of 8 steps, several seconds at any speed) to be still running when the
    # signal comes 0.5 s after the workers start: a sweep that ended first would test nothing
    seeds = ",".join(str(seed) for seed in range(1, 61))
    proc = _rlsim("sweep", "--grid", f"seed={seeds}", "--iterations", "8", "--jobs", "2", "--out", str(out))
    main = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    workers: list = []
    while time.monotonic() < deadline and len(workers) < 2:  # the pool is up and computing
        workers = main.children(recursive=True)
        time.sleep(0.05)
    assert len(workers) >= 2, "the sweep did not start its workers"
    time.sleep(0.5)
    workers = main.children(recursive=True)
    proc.send_signal(sig)
    stopped = time.monotonic()
    while _alive(workers) and time.monotonic() - stopped < 5:
        time.sleep(0.05)
    assert not _alive(workers), f"workers outlived the sweep: {_alive(workers)}"
    err = _exited(proc, sig)
    assert proc.returncode != 0
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        assert "Traceback" not in err
        assert "points are saved in" in err and "run the same command again" in err


# --------------------------------------------------------------------------- referenced files in the key

def test_edited_referenced_file_invalidates_exactly_the_affected_points(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("profile.yaml").write_text("peak_flops: 1\n")
    Path("topo.yaml").write_text("preset: dgx-h100\ndevice_profile: profile.yaml\n")
    Path("a.json").write_text('{"hidden_size": 1}\n')
    Path("b.json").write_text('{"hidden_size": 2}\n')
    Path("scenario.yaml").write_text("iterations: 1\ntopology: topo.yaml\n")
    base = BaseScenario(spec="scenario.yaml")
    grid = {"workload.model": ["a.json", "b.json"]}

    def points():
        return make_points(grid, base.fingerprint(), base.base_dirs())

    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(points(), Counter(), store=store)
    unchanged = Counter()
    run_sweep(points(), unchanged, store=store)
    assert unchanged.seen == []
    Path("b.json").write_text('{"hidden_size": 3}\n')        # a file one grid value names
    only_b = Counter()
    run_sweep(points(), only_b, store=store)
    assert only_b.seen == [{"workload.model": "b.json"}]
    Path("profile.yaml").write_text("peak_flops: 2\n")       # named by the topology the scenario names
    every = Counter()
    run_sweep(points(), every, store=store)
    assert len(every.seen) == 2


def test_an_input_edited_during_the_sweep_stops_it_before_the_next_row_is_saved(tmp_path, monkeypatch):
    """A point reads the scenario and the files it names when it runs: an edit half-way stored rows
    of the new contents under ids of the old, and a resume served them as the old ones' (an audit)."""
    from simulator.sweep import InputsChanged, InputWatch
    monkeypatch.chdir(tmp_path)
    Path("scenario.yaml").write_text("iterations: 1\n")
    Path("a.json").write_text('{"hidden_size": 1}\n')
    base = BaseScenario(spec="scenario.yaml")

    def edits(path: str, at: int):
        def evaluate(values: dict) -> dict:
            if values["seed"] == at:   # the user saves the file while this point runs
                Path(path).write_text(Path(path).read_text() + "# edited\n")
            return {"step_time_s": 1.0}
        return evaluate

    grid = {"seed": [0, 1, 2]}
    store = ResultsStore(tmp_path / "results.csv")
    watch = InputWatch(base, grid)
    with pytest.raises(InputsChanged, match="the scenario file scenario.yaml changed .* seed=1 .* not saved"):
        run_sweep(make_points(grid, watch.fingerprint, base.base_dirs()), edits("scenario.yaml", 1), store=store,
                  check_inputs=watch)
    assert len(store.done_ids()) == 1   # seed 0, read before the edit, stays under its id
    grid = {"seed": [0], "workload.model": ["a.json"]}   # a file a grid value names
    watch = InputWatch(base, grid)
    with pytest.raises(InputsChanged, match="the file a.json changed"):
        run_sweep(make_points(grid, watch.fingerprint, base.base_dirs()), edits("a.json", 0), check_inputs=watch)


def test_the_sweep_command_stops_when_its_scenario_is_edited_and_keeps_the_earlier_rows(tmp_path, monkeypatch,
                                                                                        capsys):
    import simulator.sweep as sweep
    from simulator.cli import main
    spec = tmp_path / "scenario.yaml"
    spec.write_text("workload: grpo-qwen2.5-7b\niterations: 1\n")

    def edited_at_seed_1(base, values):
        if values["seed"] == 1:
            spec.write_text("workload: grpo-qwen2.5-7b\niterations: 2\n")
        return {"step_time_s": 1.0}

    monkeypatch.setattr(sweep, "simulate_point", edited_at_seed_1)
    out = tmp_path / "out"
    rc = main(["sweep", str(spec), "--grid", "seed=0,1,2", "--jobs", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and f"the scenario file {spec} changed while the sweep ran" in err and "Traceback" not in err
    assert len(ResultsStore(out / "results.csv").done_ids()) == 1


def test_referenced_files_follow_workload_and_topology_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("lens.csv").write_text("100\n200\n")
    Path("w.yaml").write_text("response_length: {kind: empirical, file: lens.csv}\n")
    found = referenced_files(["w.yaml", "workload.batch_samples=4"])
    assert len(found) == 2 and "w.yaml" in found and all(Path(f).name in ("w.yaml", "lens.csv") for f in found)
    before = BaseScenario(workload="w.yaml").fingerprint()
    Path("lens.csv").write_text("100\n300\n")
    assert BaseScenario(workload="w.yaml").fingerprint() != before


def test_a_file_named_from_the_home_folder_is_in_the_point_id(tmp_path, monkeypatch):
    """'~/w.yaml' (which the loaders expand) named no file here, so its contents were no part of the
    point id and a resume served rows of the file before its edit (an audit)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "lens.csv").write_text("100\n200\n")
    (tmp_path / "w.yaml").write_text("response_length: {kind: empirical, file: ~/lens.csv}\n")
    assert len(referenced_files(["workload=~/w.yaml"])) == 2   # the file, and the one it names the same way
    grid = {"workload": ["~/w.yaml"]}
    before = make_points(grid, "base", [])[0].id
    (tmp_path / "lens.csv").write_text("100\n300\n")
    assert make_points(grid, "base", [])[0].id != before
    assert referenced_files(["~nosuchuser-rlsim/w.yaml"]) == {}


@pytest.mark.wall_clock
def test_yaml_alias_bomb_in_a_referenced_file_is_walked_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [*{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}]")
    Path("bomb.yaml").write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    assert list(referenced_files(["bomb.yaml"])) == ["bomb.yaml"]
    assert time.monotonic() - started < 2


# --------------------------------------------------------------------------- damaged results files

def _finished_store(tmp_path, n: int = 4) -> ResultsStore:
    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(make_points({"topology.nodes": list(range(1, n + 1))}, "b"), Counter(), store=store)
    return store


def test_a_row_cut_in_the_middle_of_the_file_names_the_file_and_line(tmp_path):
    store = _finished_store(tmp_path)
    lines = store.path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"
    store.path.write_text("".join(lines))
    with pytest.raises(RlsimError) as info:
        run_sweep(make_points({"topology.nodes": [1, 2, 3, 4]}, "b"), Counter(), store=store)
    text = str(info.value)
    assert str(store.path) in text and "line 3" in text and "delete line 3" in text


def test_a_cut_last_row_is_skipped_with_a_warning_and_kept_aside(tmp_path, capsys):
    store = _finished_store(tmp_path)
    data = store.path.read_text()
    last = data.rstrip("\n").rfind("\n") + 1
    store.path.write_text(data[: last + (len(data) - last) // 2] + "\n")   # the last row cut, newline kept
    again = Counter()
    result = run_sweep(make_points({"topology.nodes": [1, 2, 3, 4]}, "b"), again, store=store)
    assert len(again.seen) == 1 and len(result.rows) == 4
    assert "line 5" in capsys.readouterr().err
    assert store.path.with_name("results.csv.broken").read_text().count("\n") == 1
    assert len(ResultsStore(store.path).done_ids()) == 4   # the file reads clean again


def test_a_foreign_csv_is_refused_not_merged(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(RlsimError, match="not the header of an rlsim sweep results file") as info:
        run_sweep(make_points({"topology.nodes": [1]}, "b"), Counter(), store=ResultsStore(path))
    assert str(path) in str(info.value) and "line 1" in str(info.value)
    assert path.read_text() == "a,b\n1,2\n"


def test_non_utf8_bytes_in_a_middle_row_are_a_clear_error(tmp_path):
    store = _finished_store(tmp_path)
    lines = store.path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"grid", b"gr\xe9d", 1) if b"grid" in lines[1] else lines[1][:20] + b"\xe9" + lines[1][20:]
    store.path.write_bytes(b"".join(lines))
    with pytest.raises(RlsimError, match="line 2"):
        store.done_ids()


def test_integer_columns_stay_integers_after_a_resume_with_other_grids(tmp_path):
    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(make_points({"topology.nodes": [1, 2]}, "b"), Counter(), store=store)
    run_sweep(make_points({"schedule.staleness": [0, 1]}, "b"), Counter(), store=store)  # adds a column
    again = run_sweep(make_points({"topology.nodes": [1, 2]}, "b"), Counter(), store=store)
    assert again.computed == 0
    grids = [o["grid"]["topology.nodes"] for o in again.run_objects()]
    assert grids == [1, 2] and all(type(g) is int for g in grids)
    with open(store.path, newline="") as fh:
        cells = [row["grid.topology.nodes"] for row in csv.DictReader(fh)]
    assert sorted(cells) == ["", "", "1", "2"]
    assert all(type(v) is int for v in store.read()["point_index"])


def test_sweep_cli_reports_a_damaged_results_file_with_exit_2(tmp_path, capsys):
    from simulator.cli import main
    out = tmp_path / "s"
    out.mkdir()
    (out / "results.csv").write_text("a,b\n1,2\n")
    assert main(["sweep", "--grid", "seed=1", "--iterations", "1", "--jobs", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "results.csv" in err and "Traceback" not in err


def test_nothing_finished_is_lost_after_sigterm_and_a_rerun_completes(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "--grid", "seed=1,2,3,4,5,6", "--iterations", "1", "--jobs", "2", "--out", str(out), "--json"]
    proc = _rlsim(*args)
    results = out / "results.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not results.exists() or results.read_text().count("\n") < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    saved = ResultsStore(results).done_ids()
    assert proc.returncode in (0, 128 + signal.SIGTERM)
    if proc.returncode:
        assert f"{len(saved)} of 6 points are saved" in err
    rerun = subprocess.run([sys.executable, "-m", "simulator", *args], env={**os.environ, "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert len(json.loads(rerun.stdout)) == 6
    assert saved <= ResultsStore(results).done_ids()


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_a_second_ctrl_c_while_the_sweep_stops_keeps_its_saved_note(tmp_path, executor):
    """`timeout -s INT` signals the command and then its process group, so the sweep gets SIGINT twice.
    On Dask the second one landed in the clean-up: the sweep's "N of M points are saved ...; run the same
    command again" was cut off or followed by a bare "rlsim: interrupted" (a sweep audit). The first
    signal stops the sweep; one more while it stops is ignored."""
    if executor == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "sweep"
    seeds = ",".join(str(seed) for seed in range(1, 41))
    proc = _rlsim("sweep", "--grid", f"seed={seeds}", "--iterations", "2", "--jobs", "2", "--executor", executor,
                  "--out", str(out))
    results = out / "results.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not results.exists() or results.read_text().count("\n") < 2):
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it was interrupted: it tests nothing"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)   # past the first one's handler: CPython folds two signals that come together into one
    proc.send_signal(signal.SIGINT)
    err = _exited(proc, signal.SIGINT, 60)
    # -SIGINT: the second came as the interpreter exited (its KeyboardInterrupt there ends the process by
    # SIGINT itself); a shell sees 130 either way
    assert proc.returncode in (128 + signal.SIGINT, -signal.SIGINT), err
    assert "rlsim: sweep interrupted: " in err and "points are saved in" in err, err
    assert "rlsim: interrupted" not in err and "Traceback" not in err, err


# --------------------------------------------------------------------------- signals in the pool loop

class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signum)


def test_a_signal_after_the_repeat_window_stops_the_clean_up_again(monkeypatch):
    """The second of `timeout`'s two signals (milliseconds apart) is the same stop and ignored; a Ctrl-C
    pressed later, while a slow clean-up runs, is the user's second press and interrupts it."""
    from simulator.commands import sweep as sweep_command

    clock = [100.0]
    monkeypatch.setattr(sweep_command.time, "monotonic", lambda: clock[0])
    with sweep_command._stopped_once():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        clock[0] += 0.1
        os.kill(os.getpid(), signal.SIGINT)   # the process group's copy: ignored
        time.sleep(0.05)
        clock[0] += sweep_command.REPEATED_SIGNAL_WINDOW_S
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)


def test_signals_in_the_pool_loop_are_raised_where_the_loop_looks():
    """A SIGTERM during the local pool's wait is recorded, not raised mid-lock; raise_pending runs the
    handler that was in place, which is back afterwards; one that comes after the last look is raised
    when the block ends, not dropped."""
    from simulator.sweep import _SignalsDeferred

    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        with _SignalsDeferred() as deferred:
            signal.raise_signal(signal.SIGTERM)          # would raise _Stop right here without the block
            reached = True                               # still running: nothing raised yet
            with pytest.raises(_Stop):
                deferred.raise_pending()
        assert reached and signal.getsignal(signal.SIGTERM) is _raise_stop
        with pytest.raises(_Stop):
            with _SignalsDeferred():
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is _raise_stop
        with _SignalsDeferred() as deferred:
            deferred.raise_pending()                     # none came: nothing happens
    finally:
        signal.signal(signal.SIGTERM, previous)


class ByNodes(Counter):
    """A point function whose summary depends on the point's values only (not on the call order)."""

    def __call__(self, values: dict) -> dict:
        self.seen.append(dict(values))
        return {"devices": 8 * values["topology.nodes"], "step_time_s": 2.0, "tokens_per_s": 10.5, "iterations": 3}


@pytest.mark.parametrize(("first", "second"), [("csv", "parquet"), ("parquet", "csv")])
def test_a_sweep_run_again_with_the_other_format_computes_nothing_again(tmp_path, capsys, first, second):
    pytest.importorskip("pyarrow")
    points = make_points({"topology.nodes": [1, 2, 3]}, "b")
    before = run_sweep(points[:2], ByNodes(), store=ResultsStore(tmp_path / f"results.{first}"))
    again = ByNodes()
    after = run_sweep(points, again, store=ResultsStore(tmp_path / f"results.{second}"))
    assert again.seen == [{"topology.nodes": 3}]    # only the point the first run lacked
    assert f"2 finished point(s) copied from results.{first}" in capsys.readouterr().err
    assert after.run_objects()[:2] == before.run_objects()
    assert ResultsStore(tmp_path / f"results.{first}").done_ids() == {p.id for p in points[:2]}   # left as it was
    (tmp_path / "fresh").mkdir()
    fresh = run_sweep(points, ByNodes(), store=ResultsStore(tmp_path / "fresh" / f"results.{second}"))
    assert after.rows.to_dict("records") == fresh.rows.to_dict("records")   # the same rows, typed alike
    assert list(after.rows.dtypes) == list(fresh.rows.dtypes)


def test_a_damaged_results_file_of_the_other_format_is_left_out_with_a_warning(tmp_path, capsys):
    # garbage in results.parquet beside a CSV sweep stopped it ("Parquet magic bytes not found")
    (tmp_path / "results.parquet").write_text("garbage")
    points = make_points({"topology.nodes": [1, 2]}, "b")
    seen = ByNodes()
    run_sweep(points, seen, store=ResultsStore(tmp_path / "results.csv"))
    assert len(seen.seen) == 2
    assert "results.parquet beside results.csv cannot be read" in capsys.readouterr().err


def test_a_grid_cell_edited_by_hand_shows_its_points_value_and_is_said(tmp_path, capsys):
    # the row's id names topology.nodes=2; a hand edit to 7 labelled its figures as the 7-node point's
    import csv

    points = make_points({"topology.nodes": [1, 2]}, "b")
    path = tmp_path / "results.csv"
    run_sweep(points, ByNodes(), store=ResultsStore(path))
    rows = list(csv.DictReader(path.open()))
    for row in rows:
        if row["grid.topology.nodes"] == "2":
            row["grid.topology.nodes"] = "7"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    again = run_sweep(points, ByNodes(), store=ResultsStore(path))
    assert [obj["grid"]["topology.nodes"] for obj in again.run_objects()] == [1, 2]
    assert "1 row(s) hold a grid.topology.nodes that is not their point's" in capsys.readouterr().err


def test_a_results_cell_longer_than_the_csv_modules_default_limit_reads_back(tmp_path):
    # a 60-iteration run's summary_json / critical path (~2.4 KB an iteration) passed the csv module's
    # 131,072-character field limit: the sweep could not read its own file and lost every row (fuzzing)
    import csv

    from simulator.sweep_files import read_results_csv

    path = tmp_path / "results.csv"
    big = json.dumps({"steps": ["x" * 1000] * 300})
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([["point_id", "summary_json"], ["a" * 16, big]])
    limit = csv.field_size_limit()
    header, rows, tail = read_results_csv(path, required=("point_id",), text_columns=("point_id", "summary_json"))
    assert tail is None and rows[0]["summary_json"] == big and csv.field_size_limit() == limit


def test_a_model_named_by_its_folder_is_followed_to_its_config(tmp_path, monkeypatch):
    """model: m (a folder holding config.json): an edit of m/config.json left a sweep reusing stale
    figures (found by a new-user trial); the folder stands for its config.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"hidden_size": 1}')
    (tmp_path / "w.yaml").write_text("model: m\n")
    before = referenced_files(["w.yaml"])
    assert any(name.endswith("config.json") for name in before)
    (tmp_path / "m" / "config.json").write_text('{"hidden_size": 2}')
    assert referenced_files(["w.yaml"]) != before


def test_a_scenarios_fingerprint_follows_its_contents_not_its_path(tmp_path, monkeypatch):
    """sc.yaml, its absolute path and a byte-identical copy elsewhere recomputed every point (the
    files' digests were keyed by the path as found); an edit to a file it names still counts."""
    monkeypatch.chdir(tmp_path)
    Path("lens.csv").write_text("100\n200\n")
    text = "workload: {preset: grpo-qwen2.5-7b, response_length: {kind: empirical, file: lens.csv}}\n"
    Path("sc.yaml").write_text(text)
    (tmp_path / "elsewhere").mkdir()
    Path("elsewhere/sc_copy.yaml").write_text(text)
    Path("elsewhere/lens.csv").write_text("100\n200\n")
    prints = {BaseScenario(spec=spec).fingerprint()
              for spec in ("sc.yaml", str(tmp_path / "sc.yaml"), "elsewhere/sc_copy.yaml")}
    assert len(prints) == 1
    Path("elsewhere/lens.csv").write_text("100\n300\n")
    assert BaseScenario(spec="elsewhere/sc_copy.yaml").fingerprint() not in prints
    Path("w.yaml").write_text("preset: grpo-qwen2.5-7b\n")
    assert BaseScenario(workload="w.yaml").fingerprint() == BaseScenario(workload=str(tmp_path / "w.yaml")).fingerprint()
