"""Issue 12, V2 (RL Fusion one supernode, 35k tokens/s published): the seed scenario under StaleSync
with each framework cost that rlsim models for NeMo RL v0.5 (docs/validation.md V6) switched on,
alone and all together. The seed is RL Fusion's own design (bucketed reshard, weights resident, no
engine sleep, one reward worker per device); the press figure's setup is not published, so this
asks how much of the gap to the press figure (+19% at the seed's etp = tp = 8, +92% at etp 1) the
costs another framework is known to pay would explain, not what RL Fusion pays. Each configuration is `rlsim run` with these --set keys:

- +refit: schedule.refit full-tensors (every parameter gathered as a full tensor on every rank,
  with its per-tensor CPU time);
- +sleepwake: schedule.switch.engine_sleep (vLLM sleep mode: the engine's weights to host and back,
  its measured 11.3 s a step);
- +offload: schedule.switch.offload_weights (the training weights to host during rollout);
- +refswap: schedule.reference_swap_copies 3 (the reference state dict swapped in from host);
- +pppad: train_params.comm.pp_variable_seq_lengths false (one pipeline p2p shape, padded);
- +engine: workload.engine vllm-v1 (vLLM V1's step budget and caps);
- +rewardpool: workload.reward.workers 64 (a shared pool of 64 rule-reward workers, the DAPO
  recipe's count, in place of one per NPU).

    PYTHONPATH=. python benchmarks/v2_framework_costs.py
"""
from __future__ import annotations

import time

from simulator.api import simulate

PUBLISHED = 35_000.0
ITERATIONS = 4          # as the V2 case (simulator/validation/rl_fusion.py)
COSTS: dict[str, list[str]] = {
    "+refit": ["schedule.refit=full-tensors"],
    "+sleepwake": ["schedule.switch.engine_sleep=true"],
    "+offload": ["schedule.switch.offload_weights=true"],
    "+refswap": ["schedule.reference_swap_copies=3"],
    "+pppad": ["workload.train_params.comm.pp_variable_seq_lengths=false"],
    "+engine": ["workload.engine=vllm-v1"],
    "+rewardpool": ["workload.reward.workers=64"],
}
CONFIGS: dict[str, list[str]] = {"seed": [], **COSTS, "all": [item for sets in COSTS.values() for item in sets]}


def steady(sets: list[str]) -> tuple[float, float]:
    """(steady tokens/s, steady step s) of the seed scenario under StaleSync with ``sets``."""
    summary = simulate(None, overrides=["schedule.kind=stalesync", *sets], iterations=ITERATIONS).summary
    return float(summary["steady_tokens_per_s"]), float(summary["steady_step_time_s"])


def main() -> None:
    start = time.perf_counter()
    print("| configuration | tokens/s | vs published 35k | step s |")
    print("|---|---|---|---|")
    for name, sets in CONFIGS.items():
        tokens_per_s, step_s = steady(sets)
        print(f"| {name} | {tokens_per_s:,.0f} | {tokens_per_s / PUBLISHED - 1:+.1%} | {step_s:.1f} |")
    print(f"\n{len(CONFIGS)} runs in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
