"""Sweep speed-up: an 8-point grid with --jobs 1 versus --jobs 2 (local process pool), and the Dask
executor on a LocalCluster of 2 workers. Prints wall times, speed-ups and what they are made of;
asserts nothing.

    python benchmarks/bench_sweep.py            # the real simulator (simulator.simulate), 8 points
    python benchmarks/bench_sweep.py --fake     # a CPU-bound stand-in: the executor's own overhead
    python benchmarks/bench_sweep.py --cli      # the command itself: `rlsim sweep --jobs 1` vs `--jobs 2`
    PYTHONPATH=/tmp/base python benchmarks/bench_sweep.py   # the same on older code (a checkout)

The acceptance figure (issue 13 item 5) is jobs=2 at least 1.7x faster than jobs=1 on an idle
2-core machine. On a machine whose cores are busy with other work (a shared VM: see the load
average printed) the measured speed-up is capped by the free cores, so the benchmark also prints
the figure that load does not move: the CPU time of each run. jobs=1 costs the CPU time of its
points; jobs=2 costs, on its critical path, the CPU time of its busiest worker (its start-up, the
imports its initializer does, and its points). Their ratio is the speed-up on two free cores,
less only what is not CPU (process start, pipes). The point function's modules are imported in
this process first and one point is run to fill the model caches, both left out of the figures
(`rlsim sweep --jobs 1` pays them once; each worker of --jobs 2 once, at the same time as the other;
a forked worker inherits them here). Also printed: the pool's start-up (two workers
started, one empty point each, shut down) and its overhead per point (empty points).

jobs=2 runs twice: points handed out in grid order, then costliest first (the work estimate
`rlsim sweep` uses; --fake: the stand-in's exact cost). The Dask LocalCluster runs once per start
method (spawn, Dask's default; forkserver; fork, rlsim's on Linux), with its start-up (cluster up,
the simulator imported in each worker), the points and the close timed apart: the speed-up
without the start-up is what a long-lived cluster gives; with it, what one command waits for.
docs/guides/sweeps.md explains the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

from speed_reference import reference_ms

from simulator.sweep import (
    BaseScenario,
    DaskExecutor,
    LocalExecutor,
    ResultsStore,
    make_points,
    parse_grid,
    run_sweep,
    simulate_point,
)

# 8 valid points over keys every run reads: 2 schedules x 4 seeds.
REAL_GRID = ["schedule.kind=colocated,stalesync", "seed=0,1,2,3"]
FAKE_GRID = ["a=0,1,2,3", "b=0,1"]   # see fake_cost
PRELOAD = ("simulator.api",)


FAKE_UNIT_S = 0.05   # the fake point (a, b) burns FAKE_UNIT_S x (1 + a) x (1 + b): 0.05-0.4 s, 1.5 s in all


def fake_cost(values: dict) -> float:
    """The fake point's CPU seconds: uneven on purpose, so the dispatch order shows."""
    return FAKE_UNIT_S * (1 + values["a"]) * (1 + values["b"])


def busy_point(values: dict) -> dict:
    """Burn CPU for fake_cost(values) seconds in pure Python (holds the GIL, like the simulator does)."""
    end = time.process_time() + fake_cost(values)
    x = 0
    while time.process_time() < end:
        x += 1
    return {"devices": 8, "step_time_s": 1.0, "tokens_per_s": float(sum(values.values()))}


def empty_point(values: dict) -> dict:
    return {"devices": 8}


def accounted(evaluate, values: dict) -> dict:
    """The point's summary plus the pid that ran it and that process's CPU time before and after it."""
    before = time.process_time()
    out = dict(evaluate(values))
    out["bench"] = {"pid": os.getpid(), "cpu_before_s": before, "cpu_after_s": time.process_time()}
    return out


def executor(kind: str, jobs: int, preload: bool):
    cls = LocalExecutor if kind == "local" else DaskExecutor
    extra = {"preload": PRELOAD} if preload and "preload" in {f.name for f in dataclasses.fields(cls)} else {}
    return cls(jobs=jobs, **extra)


def timed(points, evaluate, ex, cost=None) -> tuple[float, float, float, float]:
    """(wall s, CPU s of this process, CPU s of the busiest worker from its start (0: ran in this
    process), the part of that spent before its first point: process start-up and imports).
    `cost`: points handed out costliest first (older code without it: grid order)."""
    extra = {"cost": cost} if cost is not None and "cost" in inspect.signature(run_sweep).parameters else {}
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = time.process_time()
        start = time.perf_counter()
        result = run_sweep(points, functools.partial(accounted, evaluate),
                           store=ResultsStore(Path(tmp) / "results.csv"), executor=ex, **extra)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    assert result.computed == len(points) and not result.rows["error"].astype(str).str.len().any()
    total: dict[int, float] = {}
    startup: dict[int, float] = {}
    rows = zip(result.rows["bench.pid"], result.rows["bench.cpu_before_s"], result.rows["bench.cpu_after_s"],
               strict=True)
    for pid, before, after in rows:
        pid = int(pid)
        total[pid] = max(total.get(pid, 0.0), float(after))
        startup[pid] = min(startup.get(pid, float("inf")), float(before))
    workers = [p for p in total if p != os.getpid()]
    if not workers:
        return elapsed, cpu, 0.0, 0.0
    busiest = max(workers, key=total.__getitem__)
    return elapsed, cpu, total[busiest], startup[busiest]


def pool_overhead(preload: bool) -> tuple[float, float]:
    """(start-up s: 2 workers, one empty point each, shut down; overhead s per further empty point)."""
    two = make_points(parse_grid(["i=0,1"]), "overhead")
    many = make_points(parse_grid(["i=" + ",".join(map(str, range(66)))]), "overhead")
    start_s = min(_wall(two, preload) for _ in range(3))
    many_s = min(_wall(many, preload) for _ in range(3))
    return start_s, (many_s - start_s) / (len(many) - len(two))


def _wall(points, preload: bool) -> float:
    start = time.perf_counter()
    run_sweep(points, empty_point, executor=executor("local", 2, preload))
    return time.perf_counter() - start


def cli_figures(grid: list[str], iterations: int, repeats: int = 3) -> None:
    """`rlsim sweep` as a user runs it, in fresh interpreters, jobs 1 and 2 alternating: wall (min of
    `repeats`) and the CPU of the command and its workers together (the overhead --jobs 2 adds)."""
    import resource
    import subprocess
    argv = [sys.executable, "-m", "simulator.cli", "sweep", "--iterations", str(iterations)]
    for item in grid:
        argv += ["--grid", item]
    walls: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for jobs in (1, 2):
            usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([*argv, "--jobs", str(jobs)], check=True, capture_output=True)
            walls[jobs].append(time.perf_counter() - start)
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[jobs].append(usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime)
    for jobs in (1, 2):
        print(f"rlsim sweep --jobs {jobs}: wall min {min(walls[jobs]):.2f} s, CPU (command + workers) "
              f"min {min(cpus[jobs]):.2f} s", flush=True)
    print(f"speed-up (wall min) {min(walls[1]) / min(walls[2]):.2f}x; CPU --jobs 2 / --jobs 1 "
          f"{min(cpus[2]) / min(cpus[1]):.2f}", flush=True)


def dask_figures(points, evaluate, cost, preload: bool, t1: float, cpu1: float) -> None:
    """A LocalCluster of 2 worker processes, started by each start method: its start-up (cluster up,
    each worker with the point function's modules imported), the points' wall time after it, the
    sum (what `rlsim sweep --executor dask` waits for) and the close."""
    methods = ["spawn", "forkserver", "fork"] if hasattr(DaskExecutor, "start") else ["spawn"]
    for method in methods:
        ex = executor("dask", 2, preload)
        if not hasattr(DaskExecutor, "start"):   # older code: start-up inside the timed call
            td, _, busiest, before = timed(points, evaluate, ex)
            print(f"dask LocalCluster(2 workers, spawn), start-up included: {td:7.2f} s wall, speed-up "
                  f"{t1 / td:.2f}x; busiest worker {busiest:.2f} s CPU ({before:.2f} s before its first point)")
            return
        ex.start_method = method
        start = time.perf_counter()
        ex.start()
        up_s = time.perf_counter() - start
        with ex:
            td, _, busiest, before = timed(points, evaluate, ex, cost)
            start = time.perf_counter()
        ex.close()
        close_s = time.perf_counter() - start
        print(f"dask LocalCluster(2 workers, {method}{', the rlsim default here' if method == multiprocessing.get_start_method() else ''}): "
              f"start-up {up_s:.2f} s wall; points {td:.2f} s wall, speed-up {t1 / td:.2f}x without the start-up, "
              f"{t1 / (up_s + td):.2f}x with it; close {close_s:.2f} s; busiest worker {busiest:.2f} s CPU "
              f"({before:.2f} s of it before its first point: its start and imports), speed-up on 2 free cores "
              f"{cpu1 / busiest:.2f}x, {cpu1 / (busiest - before):.2f}x without its start", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fake", action="store_true", help="CPU-bound stand-in instead of the simulator")
    parser.add_argument("--iterations", type=int, default=2, help="iterations per simulated point")
    parser.add_argument("--grid", action="append", help=f"grid items (default: {' '.join(REAL_GRID)})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="base scenario overrides")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--cli", action="store_true", help="time the `rlsim sweep` command itself")
    args = parser.parse_args()
    if args.cli:
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, speed reference "
              f"{reference_ms():.1f} ms (about 8 ms quiet)", flush=True)
        cli_figures(args.grid or REAL_GRID, args.iterations)
        print(f"load average {os.getloadavg()[0]:.2f}, speed reference {reference_ms():.1f} ms", flush=True)
        return 0
    if args.fake:
        grid, evaluate, preload, cost = parse_grid(args.grid or FAKE_GRID), busy_point, False, fake_cost
    else:
        base = BaseScenario(overrides=tuple(args.overrides), iterations=args.iterations)
        grid, evaluate, preload = parse_grid(args.grid or REAL_GRID), functools.partial(simulate_point, base), True
        cost = getattr(base, "work_units", None)   # what `rlsim sweep` orders by (older code: none)
    points = make_points(grid, "bench")
    import simulator
    print(f"{len(points)} points, {'fake CPU-bound point' if args.fake else 'simulator.simulate'}; code "
          f"{Path(simulator.__file__).parent.parent}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}, speed reference {reference_ms():.1f} ms (about 8 ms quiet)", flush=True)
    start_s, per_point_s = pool_overhead(preload=False)
    print(f"process pool (2 workers): start-up + shut-down {start_s * 1e3:.0f} ms, "
          f"{per_point_s * 1e3:.2f} ms per empty point", flush=True)
    if preload:  # as `rlsim sweep --jobs 1` does before its first point (workers do it in their initializer)
        cpu0 = time.process_time()
        for name in PRELOAD:
            __import__(name)
        print(f"import of {', '.join(PRELOAD)} in this process: {time.process_time() - cpu0:.2f} s CPU "
              "(not in the figures below; a forked worker inherits it)", flush=True)
        cpu0 = time.process_time()
        evaluate(points[0].values)   # the model caches' first fill: --jobs 1 pays it once, each worker once
        print(f"warm-up point in this process: {time.process_time() - cpu0:.2f} s CPU (likewise left out)",
              flush=True)
    if cost is not None:
        cpu0 = time.process_time()
        estimates = [cost(p.values) for p in points]
        print(f"cost estimate of the {len(points)} points (in this process, inside the jobs=2 figures): "
              f"{(time.process_time() - cpu0) * 1e3:.0f} ms CPU; {len(set(estimates))} distinct values", flush=True)
    t1, cpu1, _, _ = timed(points, evaluate, executor("local", 1, preload))
    print(f"jobs=1 (in process): {t1:7.2f} s wall ({t1 / len(points) * 1000:.0f} ms per point), "
          f"{cpu1:.2f} s CPU", flush=True)
    for label, order in (("grid order", None), ("costliest first", cost)):
        t2, cpu2, busiest, start = timed(points, evaluate, executor("local", 2, preload), order)
        print(f"jobs=2 (processes, {label}): {t2:7.2f} s wall, speed-up {t1 / t2:.2f}x; CPU: busiest worker "
              f"{busiest:.2f} s ({start:.2f} s of it before its first point), this process {cpu2:.2f} s; "
              f"speed-up on 2 free cores (CPU jobs=1 / busiest worker) {cpu1 / busiest:.2f}x", flush=True)
    if not args.no_dask:
        dask_figures(points, evaluate, cost, preload, t1, cpu1)
    print(f"load average {os.getloadavg()[0]:.2f}, speed reference {reference_ms():.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
