"""On-policy distillation (workload.distillation): what a teacher pool costs a step and what it
costs to simulate. Prints figures; asserts nothing.

    python benchmarks/bench_distillation.py [--iterations N] [--prompts P]

The scenario: GRPO on Qwen2.5-7B (the grpo-qwen2.5-7b preset, P x 16 samples) on one DGX-H100, with
a Qwen2.5-32B teacher on one or two more (TP 2 or 4), synchronous (colocated: the batch
reaches the teacher when generation ends) and fully async (verl-fully-async: the teacher scores
while training runs).
"""
from __future__ import annotations

import argparse
import time

from speed_reference import reference_ms

import simulator

TEACHER = ["workload.distillation.teacher=qwen2.5-32b"]
CASES = {
    "no teacher": (1, []),
    "8 GPUs, TP 2": (2, TEACHER + ["workload.distillation.devices=8", "workload.distillation.layout.tp=2"]),
    "8 GPUs, TP 4": (2, TEACHER + ["workload.distillation.devices=8", "workload.distillation.layout.tp=4"]),
    "16 GPUs, TP 2": (3, TEACHER + ["workload.distillation.devices=16", "workload.distillation.layout.tp=2"]),
}


def case(schedule: str, nodes: int, overrides: list[str], iterations: int, prompts: int) -> tuple[dict, float]:
    """The case's summary and the seconds it took to simulate."""
    start = time.perf_counter()
    summary = simulator.simulate(schedule=schedule, workload="grpo-qwen2.5-7b", keep_samples=False,
                                 topology={"preset": "dgx-h100", "nodes": nodes}, iterations=iterations,
                                 overrides=[f"workload.prompts_per_step={prompts}",
                                            f"workload.mini_batch_prompts={min(64, prompts)}", *overrides]).summary
    return summary, time.perf_counter() - start


def arguments(doc: str) -> argparse.Namespace:
    """--iterations and --prompts of a served-model benchmark (``doc``: its docstring)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag, default in (("--iterations", 3), ("--prompts", 256)):
        parser.add_argument(flag, type=int, default=default)
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__)
    print(f"machine-speed reference: {reference_ms():.2f} ms; grpo-qwen2.5-7b, {args.prompts} x 16 samples, "
          f"student on 8 H100, {args.iterations} steps")
    for schedule in ("colocated", "verl-fully-async"):
        for label, (nodes, overrides) in CASES.items():
            summary, wall = case(schedule, nodes, overrides, args.iterations, args.prompts)
            busy = summary.get("teacher_pool", {}).get("utilization")
            print(f"{schedule:17s} {label:27s}: step {summary['steady_step_time_s']:7.1f} s, teacher busy "
                  f"{'-' if busy is None else f'{busy:5.1%}':>5s} | wall {wall:5.2f} s")


if __name__ == "__main__":
    main()
