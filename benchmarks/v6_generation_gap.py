"""Issue 12, V6 (NeMo RL v0.5): where the on-policy misses sit, read from the published steps.

A colocated on-policy step is the sum of its phases (generation, reward wait, log-prob and
reference passes, training, refit, switches), so taking rlsim's non-generation phases as given, the
published step implies a generation time: published step - (rlsim's step - rlsim's generation). A
1-step-off step overlaps generation with training, so its published step only bounds one round's
generation from above. Printed per row with the engine's layout: TP size, the nodes one engine spans
(8 GPUs a DGX-H100 node), the sequences per engine, CUDA graphs or eager, sync or async engine.

    PYTHONPATH=. python benchmarks/v6_generation_gap.py [--set KEY=VALUE ...]

`--set` items go to every row as in `rlsim validate --set`, e.g. the trainer rate the V7 table and
the cross-prediction point to: `--set topology.device.gemm_efficiency=0.54` (the non-generation
phases grow with it, so the implied generation shrinks).
"""
from __future__ import annotations

import argparse

from simulator.validation import nemo_rl

GPUS_PER_NODE = 8   # dgx-h100, the V6 rows' topology


def engine_facts(row: nemo_rl.Row) -> str:
    engines = row.gen_gpus // row.gen_tp
    # a generation round: the step's prompts, or DAPO's larger generation batch
    round_prompts = nemo_rl.scenario(row)["workload"].get("dynamic_sampling", {}).get("gen_prompts", row.prompts)
    per_engine = round_prompts * row.gens // engines
    nodes = -(-row.gen_tp // GPUS_PER_NODE)
    return (f"TP{row.gen_tp} ({nodes} node{'s' if nodes > 1 else ''}), {per_engine} seqs, "
            f"{'graphs' if row.graphs else 'eager'}, {'async' if row.async_engine else 'sync'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    overrides = tuple(parser.parse_args(argv).overrides)
    print("| row | engine | published step | rlsim step | rlsim generate | other phases | implied generate | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for row in nemo_rl.ROWS:
        result = nemo_rl.simulate_row(row, overrides)
        if "refused" in result:
            print(f"| {row.key} {row.policy} | {engine_facts(row)} | {row.step_s:g} | refused: {result['refused']} |")
            continue
        step, generate = result["step_s"], result["stages"]["generate"]
        if row.off_policy:   # overlapped: the published step only bounds one round's generation
            print(f"| {row.key} {row.policy} | {engine_facts(row)} | {row.step_s:g} | {step:.1f} | {generate:.1f} "
                  f"| (overlapped) | <= {row.step_s:g} | <= {row.step_s / generate:.2f} |")
            continue
        other = step - generate
        implied = row.step_s - other
        print(f"| {row.key} {row.policy} | {engine_facts(row)} | {row.step_s:g} | {step:.1f} | {generate:.1f} "
              f"| {other:.1f} | {implied:.1f} | {implied / generate:.2f} |")


if __name__ == "__main__":
    main()
