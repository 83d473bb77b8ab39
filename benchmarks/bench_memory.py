"""Memory of a run over its length: RSS after the default scenario at 10 and at 100 iterations.

Two paths. The CLI: `rlsim run --iterations N --json` in a child process, its peak RSS read with
resource.getrusage(RUSAGE_CHILDREN) (the default `rlsim run` keeps no per-sample table: rows fold
into counts once the online critical path has walked their steps; the issue 13 target is this,
flat within 5% from 10 to 100 iterations). The API, below:

Each count runs in a fresh interpreter (`simulator.simulate(None, iterations=N)`), which prints its
resident set size after the run with the result still held (gc collected) and after the result is
dropped, its peak RSS, and the bytes of the result's own tables (the per-sample record `samples`,
one row per generated sample, and the timeline): what a run must keep grows with its length by
exactly those; everything else should not. Each count runs in three modes: keeping every
per-sample row (the API default), with `--set output.keep_sample_rows=0` (the table cut, rows
folded into counts), and `simulate(keep_samples=False)` (no table: what `rlsim run` does). `--topology-calls N` also runs N one-step
24,576-NPU calls (cloudmatrix384 x 64 supernodes) in one process and prints RSS after each: no cache
may keep a topology alive (issue 13).

    python benchmarks/bench_memory.py                          # 10 and 100 iterations: CLI, and API modes
    python benchmarks/bench_memory.py --modes                  # the CLI path only
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
fold = "<keep_samples=False>" in sys.argv
result = simulator.simulate(None, iterations=int(sys.argv[1]), overrides=[a for a in sys.argv[2:] if not a.startswith("<")],
                            **({"keep_samples": False} if fold else {}))
wall = time.perf_counter() - start
gc.collect()
held = rss_mib()
tables = sum(float(f.memory_usage(index=True, deep=True).sum()) for f in (result.samples, result.timeline,
                                                                        result.iterations) if f is not None)
samples = len(result.samples) if result.samples is not None else 0
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

# --growth: what the run allocates between two iterations and still holds (tracemalloc snapshots
# taken from the progress callback, diffed; the top lines by size), keep_samples=False as `rlsim run`.
GROWTH_CHILD = """
import sys, tracemalloc
import simulator

a, b = int(sys.argv[1]), int(sys.argv[2])
snaps = {}

class Probe:
    def estimate(self, work):
        pass

    def __call__(self, done, total):
        if done in (a, b):
            snaps[done] = tracemalloc.take_snapshot()

tracemalloc.start(1)
simulator.simulate(None, iterations=b, progress=Probe(), keep_samples=False)
diff = snaps[b].filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]).compare_to(snaps[a], "lineno")
print(f"held at iteration {a}: {sum(s.size for s in snaps[a].statistics('filename')) / 2**20:.2f} MiB; "
      f"at {b}: {sum(s.size for s in snaps[b].statistics('filename')) / 2**20:.2f} MiB")
for stat in diff[:8]:
    frame = stat.traceback[-1] if stat.traceback else None
    where = " <- ".join(f"{f.filename.split('/simulator/')[-1]}:{f.lineno}" for f in list(stat.traceback)[::-1][:3])
    print(f"  {stat.size_diff / 2**10:+9.1f} KiB ({stat.count_diff:+d} blocks)  {where}")
"""

# every row (the API default); rows folded under a bound; simulate(keep_samples=False), as `rlsim run`
MODES = {"all": [], "keep0": ["output.keep_sample_rows=0"], "nosamples": ["<keep_samples=False>"]}

# The CLI run measured in a child of a child: its grandchild's peak RSS is the only figure in
# RUSAGE_CHILDREN, so the figure is `rlsim run` alone (not this script, not an earlier run).
CLI_CHILD = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "simulator", "run", "--iterations", sys.argv[1], "--json", *sys.argv[2:]],
                      capture_output=True, text=True)
if done.returncode:
    raise SystemExit(done.stderr[-2000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def _child_line(child: str, iterations: int, code_dir: Path, args: list[str], what: str) -> str:
    """The last stdout line of ``child`` (python -c) run with ``iterations`` and ``args`` from ``code_dir``."""
    env = dict(os.environ, PYTHONPATH=str(code_dir))
    done = subprocess.run([sys.executable, "-c", child, str(iterations), *args], env=env, capture_output=True,
                          text=True, cwd=code_dir)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed in {code_dir}: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def measure_cli(iterations: int, code_dir: Path, extra: list[str]) -> float:
    """Peak RSS (MiB) of `rlsim run --iterations N --json` from ``code_dir``."""
    return float(_child_line(CLI_CHILD, iterations, code_dir, extra, f"rlsim run --iterations {iterations}"))


def report_cli(dirs: dict[str, Path], short: int, long: int) -> None:
    for name, path in dirs.items():
        peak = {n: measure_cli(n, path, []) for n in (short, long)}
        print(f"{name:8s} rlsim run --json: peak RSS {peak[short]:6.1f} MiB at {short} iterations, "
              f"{peak[long]:6.1f} MiB at {long}: {peak[long] / peak[short] - 1:+.1%} "
              f"({(peak[long] - peak[short]) / (long - short):.2f} MiB per iteration)", flush=True)


def measure(iterations: int, code_dir: Path, overrides: list[str]) -> dict:
    return json.loads(_child_line(CHILD, iterations, code_dir, overrides, f"{iterations} iterations"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, nargs=2, default=[10, 100], metavar=("SHORT", "LONG"))
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with (all rows only: "
                        "older code has no output.keep_sample_rows)")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES),
                        help="which retention modes to measure (none: skip the iteration counts)")
    parser.add_argument("--no-cli", action="store_true", help="skip the `rlsim run` (CLI) path")
    parser.add_argument("--growth", action="store_true", help="also tracemalloc: what the run still holds at "
                        "the long count beyond the short one (keep_samples=False; slow: ~3x the run)")
    parser.add_argument("--topology-calls", type=int, default=0, metavar="N",
                        help="also N one-step 24,576-NPU calls in one process, RSS after each")
    args = parser.parse_args()
    dirs = {"this": HERE, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    print(f"speed reference {reference_ms():.1f} ms (about 8 ms quiet); load average {os.getloadavg()[0]:.2f}",
          flush=True)
    short, long = args.iterations
    if not args.no_cli:
        report_cli(dirs, short, long)
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
    if args.growth:
        done = subprocess.run([sys.executable, "-c", GROWTH_CHILD, str(short), str(long)], cwd=HERE,
                              env=dict(os.environ, PYTHONPATH=str(HERE)), capture_output=True, text=True)
        print(done.stdout.rstrip() if done.returncode == 0 else done.stderr[-2000:], flush=True)
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
