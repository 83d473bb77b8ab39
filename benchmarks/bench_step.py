"""Seed-scenario steps through the API: this checkout against a copy of older code, interleaved.

    python benchmarks/bench_step.py --baseline /tmp/base            # step and run100
    python benchmarks/bench_step.py --baseline /tmp/base step       # one case: step | run10 | run100
    python benchmarks/bench_step.py --baseline /tmp/base step run10 --instructions --rounds 0

Each case runs in a fresh interpreter per tree (PYTHONPATH=DIR for the baseline, e.g. a
`git archive main | tar -x -C DIR` copy; this checkout for the other), alternating, --rounds times;
inside the child one warm-up simulation (a small batch), then the case best of its repeats. Prints
per tree the best wall and CPU (process) time, the ratios baseline / this checkout, whether the
summaries are byte-identical, the machine-speed reference (benchmarks/speed_reference.py) and the
load average. On a shared machine the CPU time moves much less with the neighbours' load than the
wall time. Asserts nothing. Without --baseline: this checkout's figures only.

--instructions also counts each case's instructions (valgrind's cachegrind, PYTHONHASHSEED=0): a
child with the warm-up and the case less one with the warm-up alone, so imports and the warm-up
do not count; a figure the neighbours' load does not move (~2 min a count for run10; --rounds 0
skips the timed rounds).

Targets (issue 13 item 4): one seed step (``simulator.simulate(iterations=1)``) >= 5x and 100 steps
>= 5x against the code before, results byte-identical.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from speed_reference import reference_ms

HERE = Path(__file__).resolve().parents[1]
CASES = {"step": (1, 5), "run10": (10, 2), "run100": (100, 1)}   # iterations, repeats

CHILD = """
import hashlib, json, sys, time
import simulator
iterations, repeats = int(sys.argv[1]), int(sys.argv[2])
simulator.simulate(iterations=1, overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
wall = cpu = float("inf")
for _ in range(repeats):
    w0, c0 = time.perf_counter(), time.process_time()
    summary = simulator.simulate(iterations=iterations).summary
    cpu = min(cpu, time.process_time() - c0)
    wall = min(wall, time.perf_counter() - w0)
digest = hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()
print(json.dumps({"wall": wall, "cpu": cpu, "digest": digest, "file": simulator.__file__}))
"""


INSTRUCTIONS_CHILD = """
import sys
import simulator
simulator.simulate(iterations=1, overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
if int(sys.argv[1]):
    simulator.simulate(iterations=int(sys.argv[1]))
print("done")
"""


def _instructions(tree: Path, iterations: int) -> int:
    """Instructions (cachegrind's I refs) of a fresh interpreter: the warm-up, then ``iterations`` steps."""
    # One BLAS thread: OpenBLAS workers spin under valgrind and made counts of one tree vary by 40%.
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           sys.executable, "-c", INSTRUCTIONS_CHILD, str(iterations)],
                          env=env, capture_output=True, text=True, cwd=tree)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if "done" not in done.stdout or not found:
        raise SystemExit(f"cachegrind failed in {tree}: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def print_instructions(trees: list[tuple[str, Path]], cases: list[str]) -> None:
    if shutil.which("valgrind") is None:
        print("instructions: valgrind not found")
        return
    for label, tree in trees:
        floor = _instructions(tree, 0)
        line = []
        for name in cases:
            n = _instructions(tree, CASES[name][0]) - floor
            line.append(f"{name} {n / 1e9:.3f} G")
        print(f"instructions {label}: warm-up and imports {floor / 1e9:.3f} G | " + " | ".join(line), flush=True)


def _child(tree: Path, iterations: int, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(iterations), str(repeats)], env=env,
                         capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], default=[])
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    trees = [("baseline", args.baseline.resolve())] if args.baseline else []
    trees.append(("this", HERE))
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms, load {os.getloadavg()[0]:.2f}", flush=True)
    for name in (args.cases or ["step", "run100"]) if args.rounds > 0 else []:
        iterations, repeats = CASES[name]
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for label, tree in trees:
                got = _child(tree, iterations, repeats)
                old = best.get(label)
                best[label] = {"wall": min(got["wall"], old["wall"]) if old else got["wall"],
                               "cpu": min(got["cpu"], old["cpu"]) if old else got["cpu"], "digest": got["digest"]}
        line = " | ".join(f"{label} wall {b['wall']:.3f} s cpu {b['cpu']:.3f} s" for label, b in best.items())
        if args.baseline:
            base, this = best["baseline"], best["this"]
            line += (f" | ratio wall {base['wall'] / this['wall']:.2f}x cpu {base['cpu'] / this['cpu']:.2f}x"
                     f" | identical: {base['digest'] == this['digest']}")
        print(f"{name:7s} {line}", flush=True)
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms, load {os.getloadavg()[0]:.2f}", flush=True)
    if args.instructions:
        print_instructions(trees, args.cases or ["step", "run10"])


if __name__ == "__main__":
    main()
