"""Multi-turn rollouts (workload.multi_turn): what tool turns cost a step and what they cost to
simulate. Prints figures; asserts nothing.

    python benchmarks/bench_multi_turn.py [--iterations N] [--prompts P]

The scenario: GRPO on Qwen2.5-7B, colocated on one DGX-H100 (the grpo-qwen2.5-7b preset, 512 x 16
samples unless --prompts), one turn against four (200-token tool answers, 2 s tools), with the
contexts never evicted while out on their tools, with the prefix cache off, with spread turn counts
and latencies, and in lock-step.
"""
from __future__ import annotations

import argparse
import time

from speed_reference import reference_ms

import simulator

TURNS = ["workload.multi_turn.max_turns=4", "workload.multi_turn.observation_tokens=200",
         "workload.multi_turn.tool_latency_s=2"]
CASES = {
    "one turn": [],
    "4 turns, 2 s tools": TURNS,
    "4 turns, never evicted": TURNS + ["workload.multi_turn.cache_eviction=false"],
    "4 turns, no prefix cache": TURNS + ["workload.inference.enable_prefix_caching=false"],
    "mean 2.5 turns, tools sigma 1": TURNS + ["workload.multi_turn.mean_turns=2.5",
                                             "workload.multi_turn.tool_latency_sigma=1"],
    "4 turns in lock-step": TURNS + ["workload.multi_turn.lockstep=true"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=512)
    args = parser.parse_args()
    print(f"machine-speed reference: {reference_ms():.2f} ms; grpo-qwen2.5-7b, {args.prompts} x 16 samples, "
          f"colocated on 8 H100, {args.iterations} steps")
    for label, overrides in CASES.items():
        start = time.perf_counter()
        summary = simulator.simulate(schedule="colocated", workload="grpo-qwen2.5-7b", keep_samples=False,
                                     topology={"preset": "dgx-h100", "nodes": 1}, iterations=args.iterations,
                                     overrides=[f"workload.prompts_per_step={args.prompts}",
                                                f"workload.mini_batch_prompts={min(128, args.prompts)}",
                                                *overrides]).summary
        wall = time.perf_counter() - start
        print(f"{label:30s}: step {summary['steady_step_time_s']:7.1f} s, generate "
              f"{summary['stage_time_s']['generate']:6.1f} s, tool_wait {summary['bubbles_by_cause']['tool_wait']:5.1%}, "
              f"long_tail {summary['bubbles_by_cause']['long_tail']:5.1%} | wall {wall:5.2f} s")


if __name__ == "__main__":
    main()
