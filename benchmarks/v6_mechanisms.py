"""Issue 12, V6 (NeMo RL v0.5): the steady step of every row with each NeMo RL mechanism switched off
(main), alone, and all on: schedule.refit full-tensors by its bytes alone (+refit) and with its
per-tensor CPU time (+tensors: full-tensors with schedule.refit_tensor_overhead_s),
switch.offload_weights + engine_sleep by their bytes and free_gradients (+offload: the colocated
rows, with the switches' fixed time as before, 2 x kv_realloc_s a step), vLLM sleep mode with its measured time
(+sleepwake: engine_sleep with switch.sleep_wake_s), schedule.async_engine (the 1-step-off rows),
schedule.reference_swap_copies (the reference state dict swapped in from host memory), the
optimizer offload and the reference swap through pageable host memory (+pageable:
switch.optimizer_pageable and schedule.host_copies.reference_swap; off: pinned copies),
the log-prob passes' own token budget (+logprob: train_layout.logprob_max_tokens_per_micro_batch =
logprob_batch_size x T-max; off: the training budget), the MoE token shuffle of the trainer
(train_params.compute.moe_permute_traffic_bytes_per_hidden), one pipeline p2p shape (+pppad:
train_params.comm.pp_variable_seq_lengths false, the rows with pp > 1) and the named vLLM engine
(+engine: workload.engine vllm-v1 / vllm-v1-async; off: rlsim's engine defaults with the rows'
former hand-set caps, max_num_seqs 1024 sync / 128 async) and the recipe's shared rule-reward pool
(+rewardpool: workload.reward.workers, NeMo RL's env.<name>.num_workers; off: one worker per device
of the instance).
Prints the table of docs/validation.md.

    PYTHONPATH=. python benchmarks/v6_mechanisms.py
"""
from __future__ import annotations

import statistics
from typing import Any

from simulator.api import simulate
from simulator.scenario import SwitchParams
from simulator.validation import nemo_rl

MECHANISMS = ("refit", "tensors", "offload", "sleepwake", "async", "refswap", "pageable", "logprob", "moeshuffle",
              "pppad", "engine", "rewardpool")
CONFIGS: dict[str, set[str]] = {"main": set(), **{f"+{m}": {m} for m in MECHANISMS}, "all": set(MECHANISMS)}


def scenario_with(row: nemo_rl.Row, on: set[str]) -> dict[str, Any]:
    """The row's scenario with the mechanisms not in ``on`` back at rlsim's defaults."""
    sc = nemo_rl.scenario(row)
    sched = sc["schedule"]
    if not on & {"refit", "tensors"}:
        sched.pop("refit", None)
    if "tensors" not in on and "refit" in on:   # full tensors by their bytes alone
        sched["refit_tensor_overhead_s"] = 0.0
    switch = sched.get("switch")
    if "pageable" not in on:   # pinned host copies at the host link's rate
        sched.pop("host_copies", None)
        if switch is not None:
            del switch["optimizer_pageable"]
    if switch is not None:     # the colocated rows
        if "offload" not in on:
            del switch["offload_weights"]
            del switch["free_gradients"]
        if "sleepwake" not in on:
            if "offload" in on:     # the engine's bytes, the fixed time of two switches as before
                switch["sleep_wake_s"] = 2 * SwitchParams().kv_realloc_s
            else:
                del switch["engine_sleep"]
        if not switch:
            sched.pop("switch")
    if "async" not in on:
        sched.pop("async_engine", None)
    if "refswap" not in on:    # no swap: nothing to copy through pageable memory either
        sched.pop("reference_swap_copies", None)
        sched.pop("host_copies", None)
    if "logprob" not in on:
        sc["workload"]["train_layout"].pop("logprob_max_tokens_per_micro_batch")
    train_params = sc["workload"].setdefault("train_params", {})
    if "moeshuffle" not in on and row.ep > 1:   # the MoE rows (a dense model refuses the key)
        train_params.setdefault("compute", {})["moe_permute_traffic_bytes_per_hidden"] = 0.0
    if "pppad" not in on:
        train_params.pop("comm", None)
    if "engine" not in on:
        engine = sc["workload"].pop("engine")
        sc["workload"]["rollout_layout"]["max_num_seqs"] = 128 if engine == "vllm-v1-async" else 1024
    if "rewardpool" not in on:
        sc["workload"].pop("reward")
    return sc


def main() -> None:
    steps = {row: {name: nemo_rl.published_step_s(simulate(scenario_with(row, on))) for name, on in CONFIGS.items()}
             for row in nemo_rl.ROWS}
    print("| row | published | " + " | ".join(CONFIGS) + " |")
    print("|---|---|" + "---|" * len(CONFIGS))
    for row, by in steps.items():
        cells = [f"{by[n]:.1f} ({by[n] / row.step_s - 1:+.0%})" for n in CONFIGS]
        print(f"| {row.key} {row.policy} {row.gpus} | {row.step_s:g} | " + " | ".join(cells) + " |")
    for name in CONFIGS:
        errors = [abs(by[name] / row.step_s - 1) for row, by in steps.items()]
        right = sum((steps[a][name] > steps[b][name]) for a, b in nemo_rl.pairs())
        print(f"{name}: median {statistics.median(errors):.1%} max {max(errors):.1%} "
              f"ordering {right}/{len(nemo_rl.pairs())}")


if __name__ == "__main__":
    main()
