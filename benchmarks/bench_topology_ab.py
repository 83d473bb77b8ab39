"""A/B of the 24,576-NPU step (issue 13 item 4) between two checkouts, in fresh processes taken in
turns (so both see the same neighbours' load). Prints wall and CPU seconds and the speed reference;
asserts nothing.

    git archive main | tar -x -C /tmp/topo-main        # today's main, say
    python benchmarks/bench_topology_ab.py /tmp/topo-main . supernodes64 3 2
    python benchmarks/bench_topology_ab.py /tmp/topo-main . build 2 3

Cases: supernodes64 (simulate(schedule="colocated", iterations=1, overrides=["topology.supernodes=64"]),
bench_schedules.py's case) and build (load_topology("cloudmatrix384", {"supernodes": 64})).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _one(case: str, repeats: int) -> dict:
    sys.path.insert(0, str(HERE))
    from speed_reference import reference_ms

    import simulator
    from simulator.hardware.topology import load_topology
    simulator.simulate(schedule="colocated", iterations=1,
                       overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])  # warm imports
    if case == "supernodes64":
        def run() -> object:
            return simulator.simulate(schedule="colocated", iterations=1, overrides=["topology.supernodes=64"])
    else:
        def run() -> object:
            return load_topology("cloudmatrix384", {"supernodes": 64})
    out: dict = {"ref_ms": reference_ms(), "wall_s": [], "cpu_s": []}
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        out["wall_s"].append(time.perf_counter() - t0)
        out["cpu_s"].append(time.process_time() - c0)
    out["ref_ms"] = min(out["ref_ms"], reference_ms())
    return out


def main(a: str, b: str, case: str, rounds: int, repeats: int) -> None:
    trees = {"A": str(Path(a).resolve()), "B": str(Path(b).resolve())}
    results: dict[str, list[dict]] = {k: [] for k in trees}
    for i in range(rounds):
        order = list(trees) if i % 2 == 0 else list(trees)[::-1]
        for name in order:
            env = dict(os.environ, PYTHONPATH=trees[name])
            done = subprocess.run([sys.executable, __file__, "--one", case, str(repeats)], env=env,
                                  capture_output=True, text=True, check=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, results[name][-1], flush=True)
    for key in ("wall_s", "cpu_s"):
        best = {}
        for name, tree in trees.items():
            values = sorted(t for r in results[name] for t in r[key])
            best[name] = values[0]
            ref = min(r["ref_ms"] for r in results[name])
            print(f"{name} {tree}: {key} min {values[0]:.3f} s, median {values[len(values) // 2]:.3f} s "
                  f"(speed reference min {ref:.2f} ms)")
        print(f"{key}: A / B = {best['A'] / best['B']:.2f}x")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--one":
        print(json.dumps(_one(sys.argv[2], int(sys.argv[3]))))
    elif len(sys.argv) == 6:
        main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:   # it compares two checkouts: nothing to run on its own (an IndexError before)
        sys.exit("usage: python benchmarks/bench_topology_ab.py CHECKOUT_A CHECKOUT_B supernodes64|build ROUNDS REPEATS")
