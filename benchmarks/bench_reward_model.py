"""A reward model served on GPUs of its own (workload.reward.served) against the same model's forward
pass on the trainer (workload.reward.kind: model) and a rule reward: what each costs a step and what it
costs to simulate. Prints figures; asserts nothing.

    python benchmarks/bench_reward_model.py [--iterations N] [--prompts P]

The scenario: GRPO on Qwen2.5-7B (the grpo-qwen2.5-7b preset, P x 16 samples) on one DGX-H100, scored
by a Qwen2.5-7B reward model (a value head on its trunk): a forward pass on the trainer, vLLM engines
woken on the trainer's GPUs after generation (verl 0.9's colocated reward model), or engines on one
more node (TP 1, 2 or 4), each sample handed over as it finishes (verl 0.9's reward loop with a pool
of its own); verl's reward-model engine constants (eager, a token budget of 8192 with chunked
prefill); synchronous (colocated) and fully async (verl-fully-async).
"""
from __future__ import annotations

from bench_distillation import arguments, case
from speed_reference import reference_ms

MODEL = ["workload.reward.kind=model", "workload.reward.model=qwen2.5-7b"]
ENGINE = [*MODEL, "workload.reward.served.inference.enforce_eager=true",
          "workload.reward.served.inference.max_num_batched_tokens=8192",
          "workload.reward.served.inference.chunked_prefill=true"]
SERVED = [*ENGINE, "workload.reward.handover=sample"]
CASES = {
    "rule reward": (1, []),
    "RM forward on the trainer": (1, MODEL),
    "RM woken on the trainer, TP 2": (1, [*ENGINE, "workload.reward.served.layout.tp=2"]),
    "RM served, 8 GPUs, TP 1": (2, [*SERVED, "workload.reward.served.devices=8"]),
    "RM served, 8 GPUs, TP 2": (2, [*SERVED, "workload.reward.served.devices=8", "workload.reward.served.layout.tp=2"]),
    "RM served, 8 GPUs, TP 4": (2, [*SERVED, "workload.reward.served.devices=8", "workload.reward.served.layout.tp=4"]),
}


def main() -> None:
    args = arguments(__doc__)
    print(f"machine-speed reference: {reference_ms():.2f} ms; grpo-qwen2.5-7b, {args.prompts} x 16 samples, "
          f"trainer on 8 H100, {args.iterations} steps")
    for schedule in ("colocated", "verl-fully-async"):
        for label, (nodes, overrides) in CASES.items():
            if schedule != "colocated" and "woken" in label:   # verl's fully async takes a standalone RM only
                continue
            summary, wall = case(schedule, nodes, overrides, args.iterations, args.prompts)
            busy = summary.get("reward_model_pool", {}).get("utilization")
            reward_s = summary["stage_time_s"].get("reward", 0.0)
            print(f"{schedule:17s} {label:30s}: step {summary['steady_step_time_s']:7.1f} s, reward {reward_s:5.1f} s "
                  f"a step, pool busy {'-' if busy is None else f'{busy:5.1%}':>5s} | wall {wall:5.2f} s")


if __name__ == "__main__":
    main()
