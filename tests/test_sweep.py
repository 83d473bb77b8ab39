"""Sweeps: grid expansion, the resumable results file, executors, interruption (SIGINT, a killed worker)."""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.overrides import parse_assignment
from simulator.sweep import (
    ID_COLUMN,
    BaseScenario,
    DaskExecutor,
    LocalExecutor,
    Point,
    ResultsStore,
    SerialExecutor,
    SweepAborted,
    expand_grid,
    grid_overrides,
    make_points,
    parse_grid,
    points_from_values,
    run_sweep,
    simulate_point,
)


def fake_point(values: dict) -> dict:
    """A stand-in for simulate(): a closed-form summary shaped like `rlsim run --json`."""
    nodes = int(values.get("topology.nodes", 1))
    staleness = float(values.get("schedule.staleness", 0))
    if nodes > 64:
        raise RlsimError("does not fit", field="topology.nodes", fix="use fewer nodes")
    step = 100.0 / nodes ** 0.9 * (1 - 0.1 * staleness)
    return {"schedule": values.get("schedule.kind", "colocated"), "devices": 8 * nodes, "iterations": 2,
            "step_time_s": step, "tokens_per_s": 1e6 / step, "bubble_fraction": 0.1,
            "bubbles_by_cause": {"long_tail": 0.05}, "staleness": {"max": staleness, "mean": staleness / 2}}


def slow_fake_point(values: dict) -> dict:
    time.sleep(0.05)
    return fake_point(values)


def killer_point(values: dict) -> dict:
    if values["topology.nodes"] == 5:
        time.sleep(0.3)  # let the earlier points finish and be saved first
        os.kill(os.getpid(), signal.SIGKILL)
    return fake_point(values)


class Counter:
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __call__(self, values: dict) -> dict:
        self.seen.append(dict(values))
        return fake_point(values)


# --------------------------------------------------------------------------- grid

def test_parse_grid_reads_yaml_scalars_and_lists():
    grid = parse_grid(["schedule.kind=colocated,stalesync", "schedule.staleness=0,0.5,1",
                       "workload.train_layout=[1,2],{tp: 4}", "x.flag=true,false"])
    assert grid == {"schedule.kind": ["colocated", "stalesync"], "schedule.staleness": [0, 0.5, 1],
                    "workload.train_layout": [[1, 2], {"tp": 4}], "x.flag": [True, False]}


def test_parse_grid_keeps_a_comma_inside_yaml_quotes():
    """--grid "workload.description='a, b',c" gave three points ('a, 'b' and c; an audit)."""
    grid = parse_grid(["workload.description='a, b',c", 'x.y="p, \\"q\\"",it\'s', "x.z=['u, v', 2],{k: 'w, x'}",
                       "x.w='it''s, fine',z"])
    assert grid == {"workload.description": ["a, b", "c"], "x.y": ['p, "q"', "it's"],
                    "x.z": [["u, v", 2], {"k": "w, x"}], "x.w": ["it's, fine", "z"]}


@pytest.mark.parametrize("item", ["nokey", "=1,2", "a.b=", "a.b=1,,2", "a.b=1,1",
                                  "a.b=1,1.0"])   # one number in two forms: the same point twice
def test_parse_grid_rejects_bad_items(item):
    with pytest.raises(RlsimError) as exc:
        parse_grid([item])
    assert "fix:" in str(exc.value)


def test_parse_grid_rejects_a_repeated_key():
    with pytest.raises(RlsimError, match="twice"):
        parse_grid(["a=1", "a=2"])


scalars = st.one_of(st.integers(-10**6, 10**6), st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.sampled_from(["colocated", "stalesync", "one-step-off", "dgx-h100"]))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b.c", "d.e.f"]), st.lists(scalars, min_size=1, max_size=4, unique=True),
                       min_size=1, max_size=3))
def test_expand_grid_is_the_full_product_with_distinct_stable_ids(grid):
    points = make_points(grid, "base")
    assert len(points) == math.prod(len(v) for v in grid.values())
    assert len({p.id for p in points}) == len(points)
    assert [p.id for p in make_points(grid, "base")] == [p.id for p in points]
    assert {p.id for p in make_points(grid, "other")}.isdisjoint({p.id for p in points})
    for p in points:  # a point travels as --set items and reads back unchanged
        assert dict(parse_assignment(item) for item in grid_overrides(p.values)) == p.values


def test_expand_grid_order_is_first_key_slowest():
    assert expand_grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


@pytest.mark.parametrize("grid, said", [({"topology.nodes": [1, 1]}, "repeats a value"),
                                        ({"topology.nodes": [1, 1.0]}, "repeats a value"),   # one setting
                                        ({"topology.nodes": []}, "has no values")])
def test_expand_grid_refuses_what_parse_grid_refuses(grid, said):
    """A sweep audit: from Python, {'topology.nodes': [1, 1]} made two points of one id, both computed,
    and a result of one row for the grid's two; [1, 1.0] simulated one setting twice; [] ran no point
    and said only that the results file held other sweeps' rows. parse_grid refuses all three."""
    with pytest.raises(RlsimError, match=said) as exc:
        expand_grid(grid)
    assert exc.value.field == "topology.nodes" and exc.value.fix


def test_points_of_one_id_are_refused_from_the_list_and_by_run_sweep(tmp_path):
    values = [{"topology.nodes": 1}, {"topology.nodes": 2}, {"topology.nodes": 1}]
    with pytest.raises(RlsimError, match="points 0 and 2 are one point") as exc:
        points_from_values(values, "fp")
    assert exc.value.fix == "list each point once"
    one, two = points_from_values(values[:2], "fp")
    seen = Counter()
    with pytest.raises(RlsimError, match="points 0 and 2 are one point"):
        run_sweep([one, two, Point(2, one.values, one.id, one.base)], seen,
                  store=ResultsStore(tmp_path / "r.csv"))
    assert not seen.seen and not (tmp_path / "r.csv").exists()


# --------------------------------------------------------------------------- results file and resume

@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_resume_computes_only_missing_points(tmp_path, suffix):
    grid = {"topology.nodes": [1, 2, 4], "schedule.staleness": [0, 1]}
    store = ResultsStore(tmp_path / f"results{suffix}")
    first = Counter()
    run_sweep(make_points({"topology.nodes": [1, 2], "schedule.staleness": [0, 1]}, "b"), first, store=store)
    assert len(first.seen) == 4
    second = Counter()
    result = run_sweep(make_points(grid, "b"), second, store=store, grid=grid)
    assert [v["topology.nodes"] for v in second.seen] == [4, 4]
    assert result.computed == 2 and len(result.rows) == 6
    objects = result.run_objects()
    assert [o["grid"] for o in objects] == expand_grid(grid)
    for obj in objects:
        expected = fake_point(obj["grid"])
        assert {k: obj[k] for k in expected} == expected  # JSON is exact, not a CSV float round trip
        assert obj["topology.nodes"] == obj["grid"]["topology.nodes"]
    third = Counter()
    run_sweep(make_points(grid, "b"), third, store=store)
    assert third.seen == []


def test_changed_base_scenario_recomputes(tmp_path):
    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(make_points({"topology.nodes": [1, 2]}, "base-a"), fake_point, store=store)
    again = Counter()
    run_sweep(make_points({"topology.nodes": [1, 2]}, "base-b"), again, store=store)
    assert len(again.seen) == 2


def test_user_error_points_are_rows_not_crashes(tmp_path):
    store = ResultsStore(tmp_path / "results.csv")
    result = run_sweep(make_points({"topology.nodes": [128, 1]}, ""), fake_point, store=store)
    objects = result.run_objects()
    assert "does not fit" in objects[0]["error"] and "error" not in objects[1]
    again = Counter()
    run_sweep(make_points({"topology.nodes": [128, 1]}, ""), again, store=store)
    assert again.seen == []  # the same input would give the same error


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_extended_grid_rewrites_the_reused_rows_point_index(tmp_path, suffix):
    """Reused rows kept the index they were saved with: seed=0,1 then seed=0,5,1 left two rows at
    index 1, and the file differed from a fresh seed=0,5,1 sweep's (a determinism trial)."""
    grown = ResultsStore(tmp_path / f"grown{suffix}")
    run_sweep(make_points({"topology.nodes": [1, 2]}, ""), fake_point, store=grown)
    run_sweep(make_points({"topology.nodes": [1, 5, 2]}, ""), fake_point, store=grown)
    fresh = ResultsStore(tmp_path / f"fresh{suffix}")
    run_sweep(make_points({"topology.nodes": [1, 5, 2]}, ""), fake_point, store=fresh)
    assert grown.path.read_bytes() == fresh.path.read_bytes()


def test_a_grid_integer_past_64_bits_is_stored_as_its_text_and_resumes(tmp_path):
    """A grid value of 1e30 written as digits (found by fuzzing) made pyarrow raise OverflowError
    out of the Parquet writer: a traceback. It is stored as its JSON text, as the CSV has it."""
    store = ResultsStore(tmp_path / "results.parquet")
    huge = 10**30
    run_sweep(make_points({"topology.nodes": [1, huge]}, ""), fake_point, store=store)
    stored = store.read()
    assert len(stored) == 2 and str(huge) in set(map(str, stored["grid.topology.nodes"]))
    counter = Counter()
    run_sweep(make_points({"topology.nodes": [1, huge]}, ""), counter, store=store)
    assert counter.seen == []                          # both points found again: nothing recomputed


def test_csv_tolerates_a_half_written_last_line(tmp_path):
    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(make_points({"topology.nodes": [1, 2]}, ""), fake_point, store=store)
    with open(store.path, "a") as fh:
        fh.write("deadbeef,7,3")  # a crash mid-write
    assert len(store.read()) == 2
    counter = Counter()
    run_sweep(make_points({"topology.nodes": [1, 2, 3]}, ""), counter, store=store)
    assert counter.seen == [{"topology.nodes": 3}]
    assert len(store.read()) == 3


def test_finished_file_does_not_depend_on_completion_order(tmp_path):
    grid = {"topology.nodes": [1, 2, 3, 4]}
    a, b = ResultsStore(tmp_path / "a.csv"), ResultsStore(tmp_path / "b.csv")
    run_sweep(make_points(grid, ""), fake_point, store=a)
    points = make_points(grid, "")
    run_sweep(points[::-1], fake_point, store=b)
    assert a.path.read_bytes() == b.path.read_bytes()


def test_bad_results_suffix_is_a_user_error(tmp_path):
    with pytest.raises(RlsimError, match="csv or .parquet"):
        ResultsStore(tmp_path / "results.txt")


# --------------------------------------------------------------------------- executors

def test_local_pool_and_dask_give_rows_identical_to_serial(tmp_path):
    grid = {"topology.nodes": [1, 2, 4, 8], "schedule.staleness": [0, 1]}
    paths = {}
    executors = {"serial": SerialExecutor(), "local": LocalExecutor(jobs=2),
                 "dask": DaskExecutor(jobs=2, processes=False)}
    for name, executor in executors.items():
        store = ResultsStore(tmp_path / f"{name}.csv")
        result = run_sweep(make_points(grid, "b"), slow_fake_point, store=store, executor=executor)
        assert result.computed == 8
        paths[name] = store.path
    assert paths["local"].read_bytes() == paths["serial"].read_bytes()
    assert paths["dask"].read_bytes() == paths["serial"].read_bytes()


def modules_loaded(values: dict) -> dict:
    """Which of the modules a test asked workers to preload this process has."""
    return {"loaded": sorted(m for m in values["modules"] if m in sys.modules), "pid": os.getpid()}


def test_each_worker_imports_the_preload_modules_when_it_starts(monkeypatch):
    """The point function's modules are loaded before a worker's first point (`rlsim sweep`
    preloads simulator.api): imported once in this process when workers fork from it (they
    inherit them), else by the pool's initializer, once per worker."""
    wanted = ["colorsys", "wave"]   # small stdlib modules nothing here imports
    for name in wanted:
        monkeypatch.delitem(sys.modules, name, raising=False)
    points = make_points({"modules": [wanted], "i": [0, 1, 2, 3]}, "")
    rows = [s for _, s, _ in LocalExecutor(jobs=2, preload=tuple(wanted)).map_unordered(modules_loaded, points)]
    assert all(r["loaded"] == wanted for r in rows)
    forked = multiprocessing.get_start_method() == "fork"
    assert (set(wanted) <= set(sys.modules)) == forked   # here when forked, else only in the workers
    for name in wanted:
        monkeypatch.delitem(sys.modules, name, raising=False)
    bare = [s for _, s, _ in LocalExecutor(jobs=2).map_unordered(modules_loaded, points)]
    assert all(r["loaded"] == [] for r in bare)


def test_the_sweep_command_preloads_the_simulator_in_its_workers():
    from simulator.sweep import POINT_MODULES, make_executor
    assert "simulator.api" in POINT_MODULES
    assert make_executor("local", 2).preload == POINT_MODULES
    assert make_executor("dask", 2).preload == POINT_MODULES


def test_a_stopped_pool_has_ended_its_manager_thread_when_the_sweep_returns():
    """A pool left early (Ctrl-C, SIGTERM) is shut down without waiting, which drops its reference to the
    manager thread; the sweep joins that thread itself, else CPython's exit hook wakes it through a pipe
    it may be closing (a rare 'Bad file descriptor' traceback as a SIGTERMed sweep exits)."""
    import threading
    from concurrent.futures.process import _ExecutorManagerThread

    points = make_points({"topology.nodes": list(range(1, 9))}, "")
    results = LocalExecutor(jobs=2).map_unordered(slow_fake_point, points)
    next(results)
    results.close()   # as an exception raised at the consumer's yield does
    assert not [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]


def test_killed_worker_keeps_finished_points_and_rerun_computes_the_rest(tmp_path):
    grid = {"topology.nodes": list(range(1, 9))}
    store = ResultsStore(tmp_path / "results.csv")
    with pytest.raises(SweepAborted):
        run_sweep(make_points(grid, ""), killer_point, store=store, executor=LocalExecutor(jobs=2))
    saved = store.done_ids()
    assert 1 <= len(saved) < 8
    assert all(not pd.isna(v) for v in store.read()["tokens_per_s"])  # only whole rows
    rerun = Counter()
    result = run_sweep(make_points(grid, ""), rerun, store=store)
    assert len(rerun.seen) == 8 - len(saved)
    assert {p.id for p in make_points(grid, "") if p.values in rerun.seen}.isdisjoint(saved)
    assert len(result.rows) == 8


CHILD = textwrap.dedent("""
    import sys, time
    from simulator.sweep import LocalExecutor, ResultsStore, make_points, run_sweep

    def slow(values):
        time.sleep(0.15)
        return {"devices": values["n"], "step_time_s": 1.0, "tokens_per_s": float(values["n"])}

    def progress(done, total):
        print(done, flush=True)  # printed only after the row is durable

    if __name__ == "__main__":
        run_sweep(make_points({"n": list(range(40))}, ""), slow, store=ResultsStore(sys.argv[1]),
                  executor=LocalExecutor(jobs=2), progress=progress)
""")


def test_sigint_half_way_keeps_every_finished_point(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    results = tmp_path / "results.csv"
    proc = subprocess.Popen([sys.executable, str(script), str(results)], stdout=subprocess.PIPE, text=True)
    reported = 0
    for line in proc.stdout:  # wait until some points are saved, then Ctrl-C
        reported = int(line)
        if reported >= 6:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    reported = max([reported] + [int(x) for x in rest.split()])
    assert proc.returncode != 0
    store = ResultsStore(results)
    saved = store.done_ids()
    assert reported <= len(saved) < 40
    counter = Counter()
    run_sweep(make_points({"n": list(range(40))}, ""),
              lambda v: (counter.seen.append(v), {"devices": v["n"], "step_time_s": 1.0})[1], store=store)
    assert len(counter.seen) == 40 - len(saved)


# --------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("args", [["--grid", "nokey"], ["--grid", "a=1", "--jobs", "0"],
                                  ["--grid", "a=1", "--executor", "nope"], ["--grid", "a=1", "--scheduler", "tcp://x:1"],
                                  ["--grid", "a=1", "--price", "h100=abc"], ["--grid", "a=1", "--target-tokens-per-s", "-5"],
                                  ["--grid", "a=1", "--format", "txt"], [],
                                  # a device name in capitals, and one device priced twice (the last won)
                                  ["--grid", "a=1", "--price", "H100=3"],
                                  ["--grid", "a=1", "--price", "h100=3", "--price", "h100=4"],
                                  # an option and a --set of one key (the --set won without a word)
                                  ["--grid", "seed=0", "--iterations", "3", "--set", "iterations=1"],
                                  ["--grid", "seed=0", "--schedule", "colocated", "--set", "schedule.kind=stalesync"]])
def test_sweep_cli_bad_input_exits_2_without_traceback(args, capsys):
    from simulator.cli import main
    try:
        rc = main(["sweep", *args])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert out == "" and "Traceback" not in err and err.strip()


@pytest.mark.parametrize("args, said", [
    (["--set", "seed=3", "--grid", "seed=0,1"], "--set seed=3 is replaced by --grid seed=..."),
    (["--seed", "3", "--grid", "seed=0,1"], "--seed 3 is replaced by --grid seed=..."),
    (["--iterations", "3", "--grid", "iterations=1,2"], "--iterations 3 is replaced by --grid iterations=..."),
    (["--schedule", "stalesync", "--grid", "schedule.kind=colocated,stalesync"],
     "--schedule stalesync is replaced by --grid schedule.kind=...")])
def test_a_base_setting_the_grid_replaces_in_every_point_is_refused(tmp_path, capsys, args, said):
    """--seed 3 --grid seed=0,1 ran seeds 0 and 1 and dropped the 3 without a word (an audit)."""
    from simulator.cli import main
    rc = main(["sweep", *args, "--set", "iterations=1" if "--iterations" not in args else "seed=0", "--jobs", "1",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("grid, said", [
    ("schedule=stalesync,stalesync", "--grid 'schedule=stalesync,stalesync' repeats a value"),
    ("schedule=stalesync,", "--grid 'schedule=stalesync,' has an empty value"),
    ("schedule=stalesync,nosuch", "the value 'nosuch' cannot be read")])
def test_a_bad_grid_item_is_the_grids_error_not_a_set_item_under_it(tmp_path, capsys, grid, said):
    """--set schedule.staleness=2 --grid schedule=stalesync,stalesync said 'rlsim: error: --set
    schedule.staleness=2: field 'schedule': --grid ... repeats a value' (a sweep audit): the --set item
    under the grid's section was blamed for the grid's own fault, and a reader fixed the wrong flag."""
    from simulator.cli import main
    rc = main(["sweep", "--set", "schedule.staleness=2", "--grid", grid, "--iterations", "1", "--jobs", "1",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlsim: error: --grid: field 'schedule': ") and said in err, err
    assert "--set schedule.staleness=2" not in err and not (tmp_path / "out").exists()


def test_parse_grid_errors_name_the_grid_as_their_source():
    for items in (["a=1,1"], ["a=1,"], ["a=1", "a=2"], ["a=1,.nan"]):
        with pytest.raises(RlsimError) as exc:
            parse_grid(items)
        assert exc.value.source == "--grid" and exc.value.field == "a", items


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_points_warnings_are_said_naming_its_row(tmp_path, capsys, json_flag):
    """A sweep audit: --grid schedule.rollout_fraction=0.5,0.75 printed two identical rows and no word
    that 0.75 ran the 0.5 split (whole replicas and instances); `rlsim run` says it as a warning, the
    sweep said its rows' notes only. Each warning now goes to stderr once, naming the rows it holds for."""
    from simulator.cli import main
    rc = main(["sweep", "--schedule", "disaggregated", "--grid", "schedule.rollout_fraction=0.5,0.75",
               "--iterations", "1", "--jobs", "1", "--out", str(tmp_path / "out"), *json_flag])
    out, err = capsys.readouterr()
    said = ("rlsim: warning: [schedule.rollout_fraction=0.75] schedule.rollout_fraction=0.75 asks 288 of 384 "
            "devices to generate")
    assert rc == 0 and said in err and "[schedule.rollout_fraction=0.5]" not in err, err
    if json_flag:
        assert [len(o["warnings"]) for o in json.loads(out)] == [0, 1]
    else:
        assert "rlsim: warning" not in out, out


def test_an_interrupted_capacity_bisection_does_not_promise_every_candidate_left(tmp_path):
    """A sweep audit: a bisection over 6 sizes stopped with 3 saved said "run the same command again to
    compute the other 3", where the search needs fewer: it says the search goes on instead."""
    from simulator.commands.sweep import _saved_note
    points = make_points({"topology.supernodes": [1, 2, 3, 4, 6, 8]}, "fp")
    store = ResultsStore(tmp_path / "r.csv")
    run_sweep(points[:3], Counter(), store=store)
    assert _saved_note(store, points).endswith("run the same command again to compute the other 3")
    said = _saved_note(store, points, bisecting=True)
    assert said.startswith("3 of the 6 candidates are saved in ") and "compute the other" not in said
    assert "go on with the search" in said


def test_a_set_key_under_a_grid_section_is_still_kept(capsys):
    from simulator.commands.sweep import _refuse_replaced_by_grid
    from simulator.sweep import parse_grid

    class Args:
        overrides, iterations, seed, schedule, topology, workload = ["schedule.staleness=2"], 2, None, None, None, None
    _refuse_replaced_by_grid(Args(), parse_grid(["schedule=stalesync,async", "seed=0,1"]))   # nothing refused


@pytest.mark.parametrize("base, grid, said, fix", [
    (dict(overrides=("iterations=3",)), {"iterations": [1, 2]},
     "BaseScenario.overrides item 'iterations=3' is replaced by the grid's iterations in every point",
     "drop 'iterations=3' from BaseScenario.overrides, or drop iterations from the grid"),
    (dict(seed=3), {"seed": [0, 1]}, "BaseScenario(seed=3) is replaced by the grid's seed in every point",
     "drop seed=3 from BaseScenario(...), or drop seed from the grid"),
    (dict(schedule="stalesync"), {"schedule.kind": ["colocated", "stalesync"]},
     "BaseScenario(schedule='stalesync') is replaced by the grid's schedule.kind", "drop schedule='stalesync'")])
def test_the_api_refuses_a_base_the_grid_replaces_up_front(tmp_path, base, grid, said, fix):
    """run_sweep over a BaseScenario whose overrides repeat a grid key failed at every point ('overrides
    iterations is given twice', one row each), and one whose option the grid sets (seed=3 beside a seed
    grid) ran the grid's values without a word: refused before any point runs, as the CLI refuses them
    (commands/sweep.py _refuse_replaced_by_grid), naming the key and the fix."""
    import functools

    from simulator.sweep import BaseScenario, simulate_point
    scenario = BaseScenario(**base)
    store = ResultsStore(tmp_path / "r.csv")
    with pytest.raises(RlsimError) as err:
        run_sweep(make_points(grid, scenario.fingerprint()), functools.partial(simulate_point, scenario), store=store)
    assert said in str(err.value) and fix in err.value.fix and err.value.field == next(iter(grid))
    assert not (tmp_path / "r.csv").exists()


def test_the_api_keeps_a_base_key_under_a_grid_section():
    """BaseScenario(overrides=('schedule.staleness=2',)) beside a grid of schedule kinds applies to each
    kind (BaseScenario.keywords puts the section first), as the CLI keeps it: not refused."""
    import functools

    from simulator.sweep import BaseScenario
    scenario = BaseScenario(overrides=("schedule.staleness=2",))
    seen = run_sweep(make_points({"schedule": [{"kind": "stalesync"}]}, ""), functools.partial(_overrides_of, scenario))
    assert seen.rows["error"].tolist() == [""]
    assert seen.rows["overrides"].tolist() == ['schedule={"kind": "stalesync"} | schedule.staleness=2']


def _overrides_of(base, values):
    return {"overrides": " | ".join(base.keywords(values)["overrides"])}


def test_sweep_help_has_examples():
    r = subprocess.run([sys.executable, "-m", "simulator", "sweep", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "examples:" in r.stdout and "--grid" in r.stdout


def test_run_objects_carry_grid_values_as_json(tmp_path):
    result = run_sweep(make_points({"schedule.kind": ["colocated", "stalesync"]}, ""), fake_point,
                       store=ResultsStore(tmp_path / "r.csv"))
    text = json.dumps(result.run_objects())
    back = json.loads(text)
    assert [o["grid"]["schedule.kind"] for o in back] == ["colocated", "stalesync"]
    assert list(pd.read_csv(tmp_path / "r.csv")[ID_COLUMN]) == sorted(p.id for p in result.points)


# --------------------------------------------------------------------------- with the real simulator

SMALL_ARGS = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
              "--set", "workload.prompts_per_step=32", "--set", "workload.samples_per_prompt=4",
              "--set", "workload.mini_batch_prompts=32"]


def _rlsim(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_real_sweep_json_resume_and_dask_rows_match(tmp_path):
    pytest.importorskip("simulator.api", reason="the simulate API is not built yet")
    grid = ["--grid", "topology.nodes=1,2", "--grid", "schedule.kind=colocated,stalesync"]
    r = _rlsim("sweep", *SMALL_ARGS, *grid, "--jobs", "2", "--out", str(tmp_path / "local"), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)  # stdout is one JSON document, nothing else
    assert [row["grid"] for row in rows] == expand_grid({"topology.nodes": [1, 2],
                                                         "schedule.kind": ["colocated", "stalesync"]})
    for row in rows:
        assert row["devices"] == 8 * row["grid"]["topology.nodes"]
        assert row["schedule"] == row["grid"]["schedule.kind"]
        assert row["device_hours_per_1000_steps"] == pytest.approx(row["devices"] * row["step_time_s"] / 3.6)
    assert (tmp_path / "local" / "report.html").exists() and (tmp_path / "local" / "scaling.png").exists()
    again = _rlsim("sweep", *SMALL_ARGS, *grid, "--out", str(tmp_path / "local"))
    assert again.returncode == 0 and "0 computed now" in again.stdout
    d = _rlsim("sweep", *SMALL_ARGS, *grid, "--jobs", "1", "--executor", "dask", "--out", str(tmp_path / "dask"),
               "--json")
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout) == rows
    assert (tmp_path / "dask" / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()


def test_real_capacity_search_on_the_command_line(tmp_path):
    pytest.importorskip("simulator.api", reason="the simulate API is not built yet")
    r = _rlsim("sweep", *SMALL_ARGS, "--grid", "topology.nodes=1,2,4,8", "--target-step-time-s", "1e9",
               "--price", "h100=2.0", "--jobs", "1", "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    selected = [row for row in rows if row["selected"]]
    assert [row["grid"]["topology.nodes"] for row in selected] == [1]  # any size meets a huge step time
    assert selected[0]["cost_per_step"] == pytest.approx(8 * 2.0 * selected[0]["steady_step_time_s"] / 3600)
    assert len(rows) <= 3  # bisection did not evaluate every candidate
    assert json.loads((tmp_path / "capacity.json").read_text())["value"] == 1


def test_sweep_cli_all_points_failed_exits_2_and_keeps_the_rows(tmp_path, capsys):
    from simulator.cli import main
    # values that load (a whole TP size) but cannot run (it divides no head count of the model)
    rc = main(["sweep", "--grid", "workload.train_layout.tp=3,5", "--iterations", "1", "--jobs", "1",
               "--executor", "local", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 2 and "every point of the sweep failed" in err and "workload.train_layout.tp" in err
    assert "Traceback" not in err
    assert len((tmp_path / "results.csv").read_text().strip().splitlines()) == 3  # header + both rows


@pytest.mark.parametrize("grid, field", [("schedule.kind=colocated,bogus", "schedule.kind"),
                                         ("topology.supernodes=1,4k", "topology.supernodes"),
                                         ("workload=grpo-qwen2.5-7b,no-such-preset", "workload"),
                                         # seed=true's points were taken for seed=1's (1 == True), which load
                                         ("seed=1,true", "seed"),
                                         # a file not found named no key, in a row of a sweep that exited 0
                                         ("workload=no-such-file.yaml,grpo-qwen2.5-7b", "workload")])
def test_a_value_that_cannot_be_read_is_refused_before_anything_runs(tmp_path, capsys, grid, field):
    from simulator.cli import main
    rc = main(["sweep", "--grid", grid, "--iterations", "1", "--jobs", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and f"--grid: field '{field}': the value" in err and "cannot be read" in err
    assert "Traceback" not in err and not (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("grid, fix", [("foo=1,2", "use one of: iterations"),
                                       ("schedule.knd=colocated,stalesync", "write --grid schedule.kind=..."),
                                       ("topology.nods=1,2", "write --grid topology.nodes=...")])
def test_a_misspelt_grid_key_is_refused_as_the_keys_error_not_its_first_values(tmp_path, capsys, grid, fix):
    """--grid foo=1,2 was refused as a bad value ('drop 1 from --grid foo=...'; an audit)."""
    from simulator.cli import main
    key = grid.split("=")[0]
    rc = main(["sweep", "--grid", grid, "--iterations", "1", "--jobs", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and f"the key '{key}' names no scenario field, whatever its value" in err and fix in err
    assert "drop" not in err and "Traceback" not in err


def test_an_address_that_answers_in_another_protocol_is_a_user_error(monkeypatch):
    """`--scheduler tcp://10.0.0.5:8786` (the sweep --help example) reached a server that was not Dask:
    distributed read a garbage frame length and raised MemoryError, a traceback; now exit 2 naming it."""
    distributed = pytest.importorskip("distributed")

    def answering_garbage(*args, **kwargs):
        raise MemoryError("Unable to allocate 3.1 EiB")
    monkeypatch.setattr(distributed, "Client", answering_garbage)
    with pytest.raises(RlsimError, match="answered, but not as a Dask scheduler"):
        list(DaskExecutor(address="tcp://127.0.0.1:9").map_unordered(lambda p: {}, make_points({"i": [0]}, "")))


def test_a_dask_worker_that_sees_other_inputs_is_refused_naming_it(tmp_path, monkeypatch):
    """A cluster of one's own reads the scenario from each worker's disk, and the docs said it needs
    no shared disk: a worker with another file (or none) at the path computed other inputs' rows."""
    from simulator.sweep import BaseScenario, make_executor, same_inputs_on_workers
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("iterations: 1\n")
    base = BaseScenario(spec="s.yaml")

    class Cluster:   # client.run: the function run on each worker, {address: its answer}
        def __init__(self, *others: str) -> None:
            self.others = others

        def run(self, function, *args):
            return {"tcp://a:1": function(*args), **{f"tcp://b:{i}": v for i, v in enumerate(self.others)}}

    same_inputs_on_workers(base, Cluster())   # every worker sees what this process does
    with pytest.raises(RlsimError, match="the Dask worker tcp://b:0 reads other contents"):
        same_inputs_on_workers(base, Cluster("0123456789abcdef"))
    with pytest.raises(RlsimError, match="worker tcp://b:0 cannot read the scenario or a file it names .*s.yaml"):
        same_inputs_on_workers(base, Cluster("error: s.yaml: cannot read file"))
    assert make_executor("dask", scheduler="tcp://a:1", base=base).check_workers is not None   # what the CLI makes
    assert make_executor("dask", base=base).check_workers is None   # a LocalCluster shares this disk


def test_a_sweep_with_nothing_left_to_compute_starts_no_dask_cluster(monkeypatch):
    distributed = pytest.importorskip("distributed")

    def unreachable(*args, **kwargs):
        raise AssertionError("no point to evaluate: nothing should connect")
    monkeypatch.setattr(distributed, "Client", unreachable)
    assert list(DaskExecutor(address="tcp://127.0.0.1:9").map_unordered(lambda p: {}, [])) == []
    assert list(DaskExecutor(jobs=2).map_unordered(lambda p: {}, [])) == []


def test_grid_helpers_refuse_what_they_would_split_into_letters():
    # parse_grid("a=1,2") read "cannot read --grid 'a'"; expand_grid({"a": "12"}) ran '1' and '2'
    from simulator.sweep import LocalExecutor

    assert parse_grid("topology.nodes=1,2") == {"topology.nodes": [1, 2]}
    with pytest.raises(RlsimError):
        expand_grid({"a": "12"})
    with pytest.raises(RlsimError):
        LocalExecutor(0)   # ran as one job


def test_a_reused_out_names_an_earlier_commands_files_but_not_its_own_results(tmp_path, capsys):
    """`sweep --out` into a folder of a run (or an older capacity search) left their files beside the
    sweep's without a word; its own results file, which it resumes from, is not named."""
    from simulator.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / "capacity.json").write_text("{}\n")
    args = ["sweep", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--grid", "seed=1",
            "--iterations", "1", "--jobs", "1", "--out", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "capacity.json" in err and "earlier run" in err
    (out / "capacity.json").unlink()
    assert main(args) == 0   # resumed: every point from results.csv, which stays untouched
    assert "earlier run" not in capsys.readouterr().err


def test_a_value_that_loads_in_some_point_is_kept_for_its_rows():
    """nodes: 8 alone over CloudMatrix384 (whole supernodes of 48 nodes) does not load, but it does
    with topology.preset=dgx-h100: the grid runs, the CloudMatrix points are error rows."""
    from simulator.commands.sweep import _refuse_unreadable_values
    from simulator.errors import RlsimError
    from simulator.sweep import BaseScenario
    base = BaseScenario(workload="grpo-qwen2.5-7b")
    _refuse_unreadable_values(base, {"topology.preset": ["dgx-h100", "cloudmatrix384"], "topology.nodes": [8]})
    with pytest.raises(RlsimError, match="the value 1.5 cannot be read"):
        _refuse_unreadable_values(base, {"topology.preset": ["dgx-h100", "dgx-a100"], "topology.nodes": [8, 1.5]})


def test_a_results_file_shared_by_two_sweeps_says_so_and_tells_their_rows_apart(tmp_path):
    """A second base scenario (--seed 5) into the same --out: the file held 4 rows for a 2-point sweep,
    with nothing to tell them apart and nothing said (found by a new-user trial)."""
    args = [*SMALL_ARGS, "--grid", "topology.nodes=1,2", "--jobs", "1", "--out", str(tmp_path)]
    assert _rlsim("sweep", *args).returncode == 0
    second = _rlsim("sweep", *args, "--seed", "5")
    assert second.returncode == 0 and "also holds 2 point(s) of other sweeps" in second.stderr
    frame = pd.read_csv(tmp_path / "results.csv")
    assert len(frame) == 4 and frame["base_fingerprint"].nunique() == 2
    again = _rlsim("sweep", *args, "--seed", "5")   # a rerun resumes its own rows and says the others
    assert "2 from the results file" in again.stdout


@pytest.mark.parametrize("extra", [[], ["--grid", "schedule.staleness=0,1", "--target-tokens-per-s", "1"]])
def test_search_where_no_capacity_search_reads_it_is_an_error(capsys, extra):
    from simulator.cli import main
    rc = main(["sweep", "--grid", "topology.supernodes=1,2", "--search", "scan", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "field '--search'" in err and "Traceback" not in err


def test_the_critical_paths_segments_stay_in_the_summary_json_not_a_flat_column():
    """critical_path.steps grew with the iterations into one JSON cell of the results file (2.4 KB a
    step); summary_json keeps it whole."""
    from simulator.sweep import Point, make_row
    summary = {"step_time_s": 1.0, "critical_path": {"step_time_s": 1.0, "steps": [{"iteration": 0}]}}
    row = make_row(Point(0, {"n": 1}, "id"), summary)
    assert "critical_path.steps" not in row and row["critical_path.step_time_s"] == 1.0
    assert json.loads(row["summary_json"])["critical_path"]["steps"] == [{"iteration": 0}]


def test_a_grid_over_a_whole_section_keeps_the_set_keys_under_it():
    """--grid schedule=async --set schedule.staleness=2 ran async at its default staleness (the grid
    value came after the --set and replaced the section; found by a regression hunt)."""
    from simulator.scenario import load_scenario
    from simulator.sweep import BaseScenario
    base = BaseScenario(workload="grpo-qwen2.5-7b", overrides=("schedule.staleness=2", "topology.nodes=1"),
                        topology="dgx-h100")
    keywords = base.keywords({"schedule": "async"})   # a kind alone: the schedule keyword, as --schedule
    assert keywords["schedule"] == "async" and not any(o.startswith("schedule=") for o in keywords["overrides"])
    assert load_scenario(None, **keywords).schedule.staleness == 2
    keywords = base.keywords({"schedule": {"kind": "async"}})   # a mapping: the section, before the --set keys
    assert keywords["overrides"][0].startswith("schedule=")
    assert load_scenario(None, **keywords).schedule.staleness == 2


def test_a_grid_section_runs_before_the_grid_keys_under_it_in_either_order():
    """--grid schedule.staleness=1,2 --grid schedule=stalesync,... failed every point ('give --set
    schedule first') where the other order ran, under the same point ids (an audit)."""
    from simulator.scenario import load_scenario
    from simulator.sweep import BaseScenario
    base = BaseScenario(workload="grpo-qwen2.5-7b", topology="dgx-h100")
    for values in ({"schedule.staleness": 2, "schedule": "stalesync"}, {"schedule": "stalesync", "schedule.staleness": 2}):
        scenario = load_scenario(None, **base.keywords(values))
        assert (scenario.schedule.kind, scenario.schedule.staleness) == ("stalesync", 2)
    assert make_points({"a.b": [1], "a": [{}]})[0].id == make_points({"a": [{}], "a.b": [1]})[0].id


def test_a_seeded_points_console_cells_carry_its_interval(tmp_path, capsys):
    """A --seeds capacity search decided on the median with no interval shown: 54,161 'no' where its
    interval [52,755, 55,242] crossed the 55,000 target (a capacity trial)."""
    from simulator.cli import main
    assert main(["sweep", "--grid", "topology.supernodes=1", "--seeds", "2", "--iterations", "2", "--jobs", "1",
                 "--executor", "local", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip("│ ").startswith("1 "))
    assert row.count("[") == 2   # the steady step and tokens/s, each with its [low, high]


def test_the_sweep_table_names_what_its_intervals_cover():
    """2-3 seeds give a point's [min, max], which covers 50-75% of the median, not 95%: the header
    said [ci95] whatever the seeds (a user trial); from 6 seeds it is the 95% interval."""
    from simulator.commands.sweep import _interval_header
    ranged = {"ci95": {"steady_tokens_per_s": [1.0, 2.0]}}
    assert _interval_header([]) == ""
    assert _interval_header([{**ranged, "seeds": 3}, {**ranged, "seeds": 8}]) == " \\[75%: min..max of 3]"
    assert _interval_header([{**ranged, "seeds": 8}]) == " \\[ci95]"


def test_a_one_seed_points_cells_carry_no_interval():
    """A sweep point with a distribution value at one seed is one replica: its ci95 is [x, x], shown as
    '86.7 [86.7, 86.7]' under a '[0%: min..max of 1]' header (a review)."""
    from simulator.commands.sweep import _interval, _interval_header
    one = {"ci95": {"steady_tokens_per_s": [4668.0, 4668.0]}, "steady_tokens_per_s": 4668.0, "seeds": 1}
    assert _interval_header([one]) == "" and _interval(one, "steady_tokens_per_s", "{:,.0f}") == ""
    two = {**one, "ci95": {"steady_tokens_per_s": [4600.0, 4700.0]}, "seeds": 2}
    assert _interval_header([one, two]) == " \\[50%: min..max of 2]"
    assert _interval(two, "steady_tokens_per_s", "{:,.0f}") == " [4,600, 4,700]"


def test_a_sweep_over_sizes_with_a_fixed_rollout_pool_says_only_the_trainer_grows():
    from simulator.commands.sweep import _fixed_pool_notes
    rows = [{"devices": 8, "pools": {"rollout": 2, "train": 6}}, {"devices": 16, "pools": {"rollout": 2, "train": 14}}]
    (note,) = _fixed_pool_notes(rows)
    assert "rollout pool is 2 devices at every size (8..16 devices)" in note and "schedule.rollout_devices" in note
    assert _fixed_pool_notes([rows[0], {"devices": 16, "pools": {"rollout": 4, "train": 12}}]) == []
    assert _fixed_pool_notes([{"devices": 8, "pools": {"actor": 8}}, {"devices": 16, "pools": {"actor": 16}}]) == []


def test_a_base_scenarios_overrides_given_as_one_string_are_one_override():
    """BaseScenario(overrides='KEY=VALUE') set each letter as an override (the point then failed on
    'w'); a list is kept as a tuple (the frozen dataclass stays hashable); a non-string is refused."""
    from simulator.sweep import BaseScenario
    one = BaseScenario(overrides="workload.prompts_per_step=8")
    assert one.overrides == ("workload.prompts_per_step=8",)
    assert one == BaseScenario(overrides=["workload.prompts_per_step=8"])
    assert hash(one) == hash(BaseScenario(overrides=("workload.prompts_per_step=8",)))
    assert one.keywords({})["overrides"] == ["workload.prompts_per_step=8"]
    with pytest.raises(RlsimError, match="BaseScenario.overrides must be 'KEY=VALUE' strings, got 8"):
        BaseScenario(overrides=["iterations=2", 8])


def test_a_sweep_point_with_a_distribution_value_runs_its_first_draw_at_one_seed(tmp_path, capsys):
    """A distribution in a grid value or in the base was refused by every point ('a single run takes
    a number ... run it with --seeds N', with --seeds 2 given; a sweeps trial): one seed is one
    replica, as `rlsim run` takes it, under its own fingerprint (the refused rows stay apart)."""
    import functools

    from simulator.cli import main
    from simulator.commands.replicas import sweep_replicated
    from simulator.sweep import BaseScenario, simulate_point

    dist = {"dist": "uniform", "low": 0.8, "high": 1.2}
    base = BaseScenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", iterations=1)
    assert base.value_error({"workload.response_length.sigma": dist}, "workload.response_length.sigma") is None
    plain = functools.partial(simulate_point, base)
    assert sweep_replicated(base, 1, plain, "f", {"seed": [0, 1]}) == (plain, "f")
    evaluate, fingerprint = sweep_replicated(base, 1, plain, "f", {"workload.response_length.sigma": [dist]})
    assert evaluate is not plain and fingerprint != "f"
    drawn = BaseScenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", iterations=1,
                         overrides=("workload.response_length.sigma={dist: uniform, low: 0.8, high: 1.2}",))
    assert sweep_replicated(drawn, 1, plain, "f", {"seed": [0]})[1] != "f"
    assert main(["sweep", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
                 "--set", "workload.prompts_per_step=16", "--set", "workload.mini_batch_prompts=16", "--jobs", "1",
                 "--grid", "workload.response_length.sigma={dist: uniform, low: 0.8, high: 1.2},0.5", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 and all("error" not in row for row in rows)


def test_a_base_scenario_no_point_can_load_is_refused_before_anything_runs(tmp_path, capsys):
    """staleness: -1 under a grid of seeds ran every point into an error row, then failed (a sweeps
    trial); a base that some point's value repairs still runs (test above: a topology preset)."""
    from simulator.cli import main
    out = tmp_path / "sweep"
    assert main(["sweep", "--grid", "seed=0,1,2", "--set", "schedule.staleness=-1", "--iterations", "1",
                 "--out", str(out)]) == 2
    assert "--set schedule.staleness=-1" in capsys.readouterr().err and not out.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
def test_a_second_sweep_into_a_folder_being_written_is_refused(tmp_path, capsys):
    """Two sweeps at once on one --out: Parquet kept one sweep's rows and both said all was saved; a
    CSV's shared temporary file failed the second after its points ran (a sweeps trial)."""
    import fcntl

    from simulator.cli import main
    from simulator.commands.sweep import LOCK_NAME
    out = tmp_path / "shared"
    out.mkdir()
    with (out / LOCK_NAME).open("a") as other:   # the first sweep, running
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["sweep", "--grid", "seed=0,1", "--iterations", "1", "--out", str(out)]) == 2
    assert f"another sweep is writing {out}" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]   # nothing run, nothing written


def test_seeds_1_wins_over_the_scenarios_replicas_as_run_takes_it(capsys):
    """`rlsim run --seeds 1` over a scenario with replicas: 3 runs one plain run; `rlsim sweep --seeds 1`
    failed every point ('replicas: 3 asks for 3 runs over seeds, and simulate runs one', a review)."""
    from simulator.cli import main
    assert main(["sweep", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
                 "--set", "workload.prompts_per_step=16", "--set", "workload.mini_batch_prompts=16",
                 "--set", "replicas=3", "--seeds", "1", "--jobs", "1", "--grid", "seed=0", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and "error" not in rows[0] and "seeds" not in rows[0]


@pytest.mark.parametrize("call, field", [
    # one mapping where a list of them goes: a ValueError 'dictionary update sequence element #0'
    (lambda: points_from_values({"topology.nodes": 2}, "x"), "values"),
    (lambda: points_from_values([2, 4], "x"), "values"),
    # pairs where a mapping goes: an AttributeError ('list' object has no attribute 'items')
    (lambda: simulate_point(BaseScenario(iterations=1), [("topology.nodes", 2)]), "values"),
])
def test_wrong_point_values_are_named(call, field):
    """A notebook's weak-scaling sweep with its values in the wrong shape raised from inside rlsim
    (a capacity planner's audit)."""
    with pytest.raises(RlsimError) as caught:
        call()
    assert caught.value.field == field and "{'topology.nodes'" in caught.value.fix


def test_run_sweep_without_a_point_function_is_named():
    """run_sweep(points, None) raised a TypeError from inside the executor (a capacity planner's audit)."""
    from simulator.sweep import run_sweep
    with pytest.raises(RlsimError) as caught:
        run_sweep(points_from_values([{"topology.nodes": 1}], "x"), None)
    assert caught.value.field == "evaluate" and "simulate_point" in caught.value.fix


def test_a_grid_of_numpy_values_makes_the_points_of_the_same_python_values():
    """expand_grid takes a numpy array ("a numpy array is fine"), but its np.int64 values reached
    grid_overrides' json.dumps: a TypeError (not JSON serializable) from inside run_sweep, after the
    points had ids of their own (another sweep than the same values as a list)."""
    import numpy as np
    plain = make_points({"topology.nodes": [1, 2], "workload.response_length.sigma": [0.5, 1.0]}, "base")
    given = make_points({"topology.nodes": np.array([1, 2]),
                         "workload.response_length.sigma": np.linspace(0.5, 1.0, 2)}, "base")
    assert [(p.id, p.values) for p in given] == [(p.id, p.values) for p in plain]
    assert all(type(p.values["topology.nodes"]) is int for p in given)
    assert grid_overrides(given[0].values) == ["topology.nodes=1", "workload.response_length.sigma=0.5"]
