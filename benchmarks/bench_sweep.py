"""Sweep speed-up: a 24-point grid with --jobs 1 versus --jobs 2 (local process pool), and the Dask
executor on a LocalCluster. Prints wall times and the speed-up; asserts nothing.

    python benchmarks/bench_sweep.py            # the real simulator (simulator.simulate)
    python benchmarks/bench_sweep.py --fake     # a CPU-bound stand-in: the executor's own overhead

The acceptance figure is jobs=2 at least 1.6x faster than jobs=1; on a machine whose cores are
busy with other work the speed-up is capped by the free cores, so also note `os.getloadavg()`.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

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

# 24 points: 4 x 3 x 2 over keys every schedule reads.
REAL_GRID = ["schedule.kind=colocated,disaggregated,one-step-off,stalesync", "schedule.staleness=0,1,2",
             "seed=0,1"]
FAKE_GRID = ["a=0,1,2,3", "b=0,1,2", "c=0,1"]


def busy_point(values: dict, seconds: float = 0.25) -> dict:
    """Burn CPU for about `seconds` in pure Python (holds the GIL, like the simulator does)."""
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1
    return {"devices": 8, "step_time_s": 1.0, "tokens_per_s": float(sum(values.values()))}


def timed(points, evaluate, executor) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_sweep(points, evaluate, store=ResultsStore(Path(tmp) / "results.csv"), executor=executor)
        elapsed = time.perf_counter() - start
    assert result.computed == len(points)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fake", action="store_true", help="CPU-bound stand-in instead of the simulator")
    parser.add_argument("--iterations", type=int, default=2, help="iterations per simulated point")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="base scenario overrides")
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    if args.fake:
        grid, evaluate = parse_grid(FAKE_GRID), busy_point
    else:
        base = BaseScenario(overrides=tuple(args.overrides), iterations=args.iterations)
        grid, evaluate = parse_grid(REAL_GRID), functools.partial(simulate_point, base)
    points = make_points(grid, "bench")
    print(f"{len(points)} points, {'fake CPU-bound point' if args.fake else 'simulator.simulate'}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    t1 = timed(points, evaluate, LocalExecutor(jobs=1))
    print(f"jobs=1 (in process): {t1:7.2f} s  ({t1 / len(points) * 1000:.0f} ms per point)", flush=True)
    t2 = timed(points, evaluate, LocalExecutor(jobs=2))
    print(f"jobs=2 (processes):  {t2:7.2f} s  speed-up {t1 / t2:.2f}x", flush=True)
    if not args.no_dask:
        td = timed(points, evaluate, DaskExecutor(jobs=2))
        print(f"dask LocalCluster(2 workers, processes): {td:7.2f} s  speed-up {t1 / td:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
