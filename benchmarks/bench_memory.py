"""Memory of a run over its length: RSS after the default scenario at 10 and at 100 iterations.

Each count runs in a fresh interpreter (`simulator.simulate(None, iterations=N)`), which prints its
resident set size after the run with the result still held (gc collected) and after the result is
dropped, its peak RSS, and the bytes of the result's own tables (the per-sample record `samples`,
one row per generated sample, and the timeline): what a run must keep grows with its length by
exactly those; everything else should not. Each count runs twice: keeping every per-sample row
(the default) and with `--set output.keep_sample_rows=0` (rows folded into counts: the issue 13
target, RSS flat within 5% from 10 to 100 iterations). `--topology-calls N` also runs N one-step
24,576-NPU calls (cloudmatrix384 x 64 supernodes) in one process and prints RSS after each: no cache
may keep a topology alive (issue 13).

    python benchmarks/bench_memory.py                          # 10 and 100 iterations, both modes
    python benchmarks/bench_memory.py --iterations 10 30 --baseline /tmp/base   # and older code
    python benchmarks/bench_memory.py --topology-calls 5 --modes        # only the 24k calls

Prints the machine-speed reference and the load average; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from speed_reference import reference_ms

HERE = Path(__file__).resolve().parents[1]

CHILD = """
import gc, json, resource, sys, time
import simulator

def rss_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20

start = time.perf_counter()
result = simulator.simulate(None, iterations=int(sys.argv[1]), overrides=sys.argv[2:])
wall = time.perf_counter() - start
gc.collect()
held = rss_mib()
tables = sum(float(f.memory_usage(index=True, deep=True).sum()) for f in (result.samples, result.timeline,
                                                                        result.iterations))
samples = len(result.samples)
del result
gc.collect()
print(json.dumps({"wall_s": wall, "rss_held": held, "rss_dropped": rss_mib(), "tables_mib": tables / 2**20,
                  "samples": samples,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TOPOLOGY_CHILD = """
import gc, resource, sys
import simulator

def rss_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20

for call in range(int(sys.argv[1])):
    simulator.simulate(None, schedule="colocated", iterations=1, overrides=["topology.supernodes=64"])
    gc.collect()
    print(f"call {call + 1}: RSS {rss_mib():.1f} MiB", flush=True)
"""

MODES = {"all": [], "keep0": ["output.keep_sample_rows=0"]}   # every row (the default); rows folded


def measure(iterations: int, code_dir: Path, overrides: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code_dir))
    done = subprocess.run([sys.executable, "-c", CHILD, str(iterations), *overrides], env=env, capture_output=True,
                          text=True, cwd=code_dir)
    if done.returncode != 0:
        raise SystemExit(f"{iterations} iterations failed in {code_dir}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, nargs=2, default=[10, 100], metavar=("SHORT", "LONG"))
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with (all rows only: "
                        "older code has no output.keep_sample_rows)")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES),
                        help="which retention modes to measure (none: skip the iteration counts)")
    parser.add_argument("--topology-calls", type=int, default=0, metavar="N",
                        help="also N one-step 24,576-NPU calls in one process, RSS after each")
    args = parser.parse_args()
    dirs = {"this": HERE, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    print(f"speed reference {reference_ms():.1f} ms (about 8 ms quiet); load average {os.getloadavg()[0]:.2f}",
          flush=True)
    short, long = args.iterations
    cases = [(f"{name} {mode}", path, MODES[mode]) for name, path in dirs.items() for mode in args.modes
             if name == "this" or not MODES[mode]]
    for name, path, overrides in cases:
        rows = {n: measure(n, path, overrides) for n in (short, long)}
        for n, m in rows.items():
            print(f"{name:8s} {n:4d} iterations: RSS {m['rss_held']:6.1f} MiB with the result held, "
                  f"{m['rss_dropped']:6.1f} MiB after dropping it, peak {m['peak']:6.1f} MiB; result tables "
                  f"{m['tables_mib']:5.1f} MiB ({m['samples']} samples); {m['wall_s']:.1f} s", flush=True)
        a, b = rows[short], rows[long]
        held = b["rss_held"] / a["rss_held"] - 1
        beyond = (b["rss_held"] - b["tables_mib"]) / (a["rss_held"] - a["tables_mib"]) - 1
        print(f"{name:8s} {short} -> {long} iterations: RSS held {held:+.1%} "
              f"({(b['rss_held'] - a['rss_held']) / (long - short):.2f} MiB per iteration), "
              f"RSS less the result's tables {beyond:+.1%}, peak {b['peak'] / a['peak'] - 1:+.1%}", flush=True)
    for name, path in dirs.items():
        if args.topology_calls:
            print(f"{name}: {args.topology_calls} one-step calls on 24,576 NPUs in one process", flush=True)
            done = subprocess.run([sys.executable, "-c", TOPOLOGY_CHILD, str(args.topology_calls)], cwd=path,
                                  env=dict(os.environ, PYTHONPATH=str(path)), capture_output=True, text=True)
            print(done.stdout.rstrip() if done.returncode == 0 else done.stderr[-2000:], flush=True)
    print(f"speed reference {reference_ms():.1f} ms; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
