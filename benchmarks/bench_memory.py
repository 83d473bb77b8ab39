"""Memory of a run over its length: RSS after the default scenario at 10 and at 100 iterations.

Each count runs in a fresh interpreter (`simulator.simulate(None, iterations=N)`), which prints its
resident set size after the run with the result still held (gc collected) and after the result is
dropped, its peak RSS, and the bytes of the result's own tables (the per-sample record `samples`,
one row per generated sample, and the timeline): what a run must keep grows with its length by
exactly those; everything else should not.

    python benchmarks/bench_memory.py                          # 10 and 100 iterations
    python benchmarks/bench_memory.py --iterations 10 30 --baseline /tmp/base   # and older code

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
result = simulator.simulate(None, iterations=int(sys.argv[1]))
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


def measure(iterations: int, code_dir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code_dir))
    done = subprocess.run([sys.executable, "-c", CHILD, str(iterations)], env=env, capture_output=True, text=True,
                          cwd=code_dir)
    if done.returncode != 0:
        raise SystemExit(f"{iterations} iterations failed in {code_dir}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, nargs=2, default=[10, 100], metavar=("SHORT", "LONG"))
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    args = parser.parse_args()
    dirs = {"this": HERE, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    print(f"speed reference {reference_ms():.1f} ms (about 8 ms quiet); load average {os.getloadavg()[0]:.2f}",
          flush=True)
    short, long = args.iterations
    for name, path in dirs.items():
        rows = {n: measure(n, path) for n in (short, long)}
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
    print(f"speed reference {reference_ms():.1f} ms; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
