"""Speed of the schedule layer on the real cost models. Prints figures; asserts nothing.

    python benchmarks/bench_schedules.py            # all cases
    python benchmarks/bench_schedules.py step       # one case: step | run100 | verl64 | supernodes64 | nemo40 | areal6 | v1col6 | v1dapo4 | v1hyb6

Targets (issue 4): one GRPO step with 16,384 sequences on cloudmatrix384 <= 0.5 s; a 100-step run
<= 30 s; cloudmatrix384 with supernodes=64 (24,576 NPUs) one step <= 10 s; one verl fully-async
step of 8,192 trajectories on 64:64 devices < 1 s (issue 11). nemo40 (no target): the engine runs
an async engine continues at each admission (2.4 s on 2026-12-04 at a 4.5 ms reference; 1.0 s before
the admission, 26 s when each admission re-ran the engine from its start). areal6 (no target): the
seed under AReaL 1.0.4's start rule, each prompt's 16 requests dealt to the servers one by one (3.1 s
on 2026-12-05 at a 3.9 ms reference; 2.6 s for the kind as it was, whole rounds per instance; 17.7 s
when add_many rebuilt its id map and rebound its record lists at every add, quadratic in the run).
v1col6 (no target): verl 0.9's colocate_async on a 28K-capped long tail, every request its own
engine event (12.1 s on 2026-12-05 at a 24.6 ms reference, areal6 18.8 s beside it).
v1dapo4 (no target): verl 0.9's sync mode with DAPO at keep 0.3 on the same long tail, the filtered
groups refilled while the rest generate (about 2.6x the prompts of v1col6's steps).
v1hyb6 (no target): verl 0.9's separate_async on 8 rollout + 24 trainer GPUs, the trainer's lent to
generation every step (hybrid_rollout): requests cut and moved at each hand-back.
"""
from __future__ import annotations

import sys
import time

from speed_reference import reference_ms

import simulator

REPEATS = 3
CASES = {
    "step": ("one GRPO step, 16,384 sequences, cloudmatrix384 (seed, colocated)",
             dict(schedule="colocated", iterations=1, overrides=["workload.prompts_per_step=1024"])),
    "run100": ("100 steps, grpo-qwen2.5-7b on 4 x dgx-h100 (stalesync)",
               dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4},
                    schedule="stalesync", iterations=100)),
    "verl64": ("one verl fully-async step, 8,192 trajectories, 64 rollout : 64 train H100 (s=0.5, partial)",
               dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 16},
                    schedule="verl-fully-async", iterations=1,
                    overrides=["schedule.rollout_devices=64", "workload.mini_batch_prompts=512",
                               "schedule.staleness_threshold=0.5", "schedule.partial_rollout=true"])),
    "supernodes64": ("one step, cloudmatrix384 x 64 supernodes = 24,576 NPUs (seed batch, colocated)",
                     dict(schedule="colocated", iterations=1, overrides=["topology.supernodes=64"])),
    "nemo40": ("40 steps, V6 qwen3-30b-a3b 1-step-off (nemo-rl-async, async engine: rounds admitted mid-run)",
               None),
    "areal6": ("6 steps of the seed on cloudmatrix384 (areal: rollouts under AReaL's start rule, requests dealt "
               "to the servers one by one)", dict(schedule="areal", iterations=6)),
    "v1col6": ("6 steps of grpo-qwen2.5-7b, 28K cap, 4 x dgx-h100 (verl-colocate-async: a batch ahead, requests "
               "routed one by one, aborted and resumed at each update)",
               dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4},
                    schedule="verl-colocate-async", iterations=6, overrides=["workload.response_length.max=28672"])),
    "v1dapo4": ("4 steps of grpo-qwen2.5-7b as DAPO at keep 0.3, 28K cap, 4 x dgx-h100 (verl-sync: refills "
                "streamed within max_inflight_gen_batches, drained, surplus discarded)",
                dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4}, schedule="verl-sync",
                     iterations=4, overrides=["workload.response_length.max=28672",
                                              "workload.dynamic_sampling.keep_fraction=0.3"])),
    "v1hyb6": ("6 steps of grpo-qwen2.5-7b, 28K cap, 8 + 24 dgx-h100 GPUs (verl-separate-async with hybrid_rollout: "
               "the trainer's GPUs lent to generation between steps)",
               dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4},
                    schedule="verl-separate-async", iterations=6,
                    overrides=["workload.response_length.max=28672", "schedule.rollout_devices=8",
                               "schedule.hybrid_rollout={}"])),
}


def _kwargs(name: str) -> dict:
    """The case's simulate keywords (nemo40: the V6 row's scenario, 40 steps)."""
    if name != "nemo40":
        return CASES[name][1]
    from simulator.validation import nemo_rl
    row = next(r for r in nemo_rl.ROWS if r.key == "qwen3-30b-a3b" and r.off_policy)
    return {"scenario": {**nemo_rl.scenario(row), "iterations": 40}}


def main(names: list[str]) -> None:
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms", flush=True)
    simulator.simulate(schedule="colocated", iterations=1,
                       overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])  # warm imports
    for name in names or list(CASES):
        label, kw = CASES[name][0], _kwargs(name)
        dt, r = float("inf"), None
        for _ in range(REPEATS if name in ("step", "verl64") else 1):   # the short cases: best of a few
            t0 = time.perf_counter()
            r = simulator.simulate(**kw)
            dt = min(dt, time.perf_counter() - t0)
        s = r.summary
        print(f"{name:13s} {dt:8.2f} s wall  | {label} | devices {s['devices']}, "
              f"{s['samples']['generated']} samples, {len(r.timeline)} timeline rows, "
              f"{s['tokens_per_s']:,.0f} tokens/s simulated", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
