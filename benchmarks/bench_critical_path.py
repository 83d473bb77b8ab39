"""Cost of the critical path (rl/critical_path.py) beside the simulation it explains. Prints
figures; asserts nothing.

    python benchmarks/bench_critical_path.py

For each case: the simulation's wall time (simulate, which includes the critical path), the
critical path's own time (critical_paths + summarize on the same record, best of 5) and its share.
"""
from __future__ import annotations

import json
import time

from speed_reference import reference_ms

import simulator
from simulator.rl import critical_path as cp

CASES = {
    "seed10": ("10 steps, the seed scenario (stalesync, cloudmatrix384)", dict(iterations=10)),
    "run100": ("100 steps, grpo-qwen2.5-7b on 4 x dgx-h100 (stalesync)",
               dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4},
                    schedule="stalesync", iterations=100)),
    "supernodes64": ("one step, cloudmatrix384 x 64 supernodes = 24,576 NPUs (colocated)",
                     dict(schedule="colocated", iterations=1, overrides=["topology.supernodes=64"])),
}


def main() -> None:
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms", flush=True)
    for name, (label, kw) in CASES.items():
        t0 = time.perf_counter()
        r = simulator.simulate(**kw)
        sim_s = time.perf_counter() - t0
        best = float("inf")
        for _ in range(5):
            t1 = time.perf_counter()
            cp.summarize(cp.critical_paths(r.record, r.timeline), r.record.samples.flat())
            best = min(best, time.perf_counter() - t1)
        size = len(json.dumps(r.summary["critical_path"]))
        print(f"{name:13s} simulate {sim_s:7.2f} s | critical path {best * 1e3:7.1f} ms ({best / sim_s:.2%}) | "
              f"{len(r.timeline)} timeline rows, critical_path JSON {size / 1e3:.1f} kB | {label}", flush=True)


if __name__ == "__main__":
    main()
