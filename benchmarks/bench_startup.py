"""Start-up of the command line: `rlsim run --help`, and `rlsim run` up to its first event.

"First event" is the first `simpy.Environment.step()` of `rlsim run` on the default scenario: the
moment the simulation starts, after the interpreter started, the command line was parsed, the
scenario was read and validated, the topology built and the schedule set up. The child process
exits there (os._exit), so the figure is everything a user waits for before simulating starts.
Each figure is the wall time of a fresh interpreter (min and median of --repeats), so it includes
Python's own start-up (`python -c pass`, printed too), with byte code cached as in an installed
package (PYTHONDONTWRITEBYTECODE is dropped for the children; a warm-up run writes __pycache__).

    python benchmarks/bench_startup.py                       # this checkout
    python benchmarks/bench_startup.py --baseline /tmp/base  # and a copy of older code, interleaved

With --baseline DIR the same commands run with PYTHONPATH=DIR (a checkout of the code to compare
with, e.g. `git archive COMMIT | tar -x -C DIR`), alternating with this checkout's, and the ratios
are printed. The CPU time (user + system of the child) is printed beside the wall time: on a
shared machine it moves much less with the neighbours' load. Prints the machine-speed reference (benchmarks/speed_reference.py) and the load
average beside the figures; asserts nothing.

    python benchmarks/bench_startup.py --instructions --baseline /tmp/base

--instructions also counts the instructions of `rlsim run` to its first event (valgrind's
cachegrind, PYTHONHASHSEED=0; ~20 s a count): a figure the neighbours' load does not move, for
comparing changes of a few percent on a busy machine.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from speed_reference import reference_ms

HERE = Path(__file__).resolve().parents[1]

# Runs `rlsim run ARGS...` and exits at the first simulated event.
FIRST_EVENT_DRIVER = """
import os, sys
import simpy
def _first_event(self):
    sys.stdout.write("first-event\\n"); sys.stdout.flush()
    os._exit(0)
simpy.Environment.step = _first_event
from simulator.cli import main
code = main(sys.argv[1:])
sys.stdout.write(f"no event (exit {code})\\n"); sys.stdout.flush()
os._exit(1)
"""

CASES = {
    "python -c pass": ["-c", "pass"],
    "rlsim run --help": ["-c", "import sys; from simulator.cli import main; sys.exit(main(['run', '--help']))"],
    "rlsim run -> first event": ["-c", FIRST_EVENT_DRIVER, "run"],
}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], code_dir: Path) -> tuple[float, float]:
    """(wall s, CPU s user + system) of one fresh interpreter running `argv`."""
    # As an installed package runs: with byte code cached (the first, warm-up run writes it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code_dir)
    cpu0, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, cwd=code_dir)
    elapsed, cpu = time.perf_counter() - start, _children_cpu_s() - cpu0
    if done.returncode != 0 or (argv[-1] == "run" and "first-event" not in done.stdout):
        raise SystemExit(f"{argv[:2]} failed in {code_dir}: {done.stdout[-500:]} {done.stderr[-2000:]}")
    return elapsed, cpu


def instructions(code_dir: Path) -> int:
    """Instructions (cachegrind's I refs) of one fresh interpreter running `rlsim run` to its first event."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(code_dir), PYTHONHASHSEED="0")
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           sys.executable, *CASES["rlsim run -> first event"]],
                          env=env, capture_output=True, text=True, cwd=code_dir)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if "first-event" not in done.stdout or not found:
        raise SystemExit(f"cachegrind failed in {code_dir}: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def print_instructions(dirs: dict[str, Path]) -> None:
    if shutil.which("valgrind") is None:
        print("instructions: valgrind not found")
        return
    counts = {name: instructions(path) for name, path in dirs.items()}
    line = "rlsim run -> first event  " + "  ".join(f"{name}: {n / 1e9:.3f} G instructions" for name, n in counts.items())
    if "baseline" in counts:
        line += f"  ratio {counts['baseline'] / counts['this']:.3f}x"
    print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    dirs = {"this": HERE}
    if args.baseline:
        dirs["baseline"] = args.baseline.resolve()
    print(f"speed reference {reference_ms():.1f} ms (about 8 ms quiet); load average {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {(c, d): [] for c in CASES for d in dirs}
    for path in dirs.values():
        time_once(CASES["rlsim run -> first event"], path)  # warm-up: byte code and the OS file cache
    for _ in range(args.repeats):
        for case, argv in CASES.items():
            for name, path in dirs.items():  # interleaved: both see the same neighbours' load
                times[case, name].append(time_once(argv, path))
    for case in CASES:
        line = f"{case:<26}"
        for name in dirs:
            walls = [w for w, _ in times[case, name]]
            cpus = [c for _, c in times[case, name]]
            line += (f"  {name}: wall min {min(walls):.3f} median {statistics.median(walls):.3f} s, "
                     f"CPU min {min(cpus):.3f} s")
        if args.baseline:
            base, this = times[case, "baseline"], times[case, "this"]
            line += (f"  ratio (min) wall {min(w for w, _ in base) / min(w for w, _ in this):.2f}x "
                     f"CPU {min(c for _, c in base) / min(c for _, c in this):.2f}x")
        print(line)
    print(f"speed reference {reference_ms():.1f} ms; load average {os.getloadavg()[0]:.2f}")
    if args.instructions:
        print_instructions(dirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
