"""Issue 12, V6 (NeMo RL v0.5): which of rlsim's own constants could close a row's miss?

benchmarks/v6_unknowns.py shows that the inputs the runs did not publish cannot reach most V6
steps. This script asks the same question of rlsim's modelling constants. It takes each constant
that is an assumption, a single measurement or a published range. It sets the constant to the low
and the high end of a plausible range, one at a time, and reruns every row:
- a measured range: the GEMM plateau 0.685-0.75 (the sustained plateaus of a lent H200 and H100,
  0.685 and 0.698, to the GEMMs inside their fused training steps, 0.70-0.77), the HBM streaming
  rate 0.65-0.75 (the decode steps of the H200 at batch 1 to the H100's at batch 256;
  benchmarks/measured/h200-2026-12-04, h100-2026-12-06; before 2026-12-06 hardware.md's
  0.70-0.80 and 0.75-0.85);
- a single measurement or an assumed value, at half and at twice its default: the engine's step
  overhead (formulas.md "a few ms"), its workspace, the refit's per-tensor CPU time (one verl
  measurement), vLLM sleep mode's 11.3 s (one measurement), the switches' fixed overhead and the
  host-link efficiency of the pinned copies (up to 1.0), the pageable copies' two rates (measured
  on lent GPU nodes, 1.19-1.51 and 6.26-8.33 GB/s: benchmarks/host_pageable_copy.py --device cuda);
- the per-sequence CPU time, up to the whole ~45 us a sequence of NIM's inter-token-latency slope;
- the rule reward's CPU time per sample (an assumption, "tens of ms"), at half and at twice 0.05 s.
For each row the table gives the published gap (published - predicted step) and each constant's
swing: the step at the low end minus the V6 step, and at the high end minus the V6 step. A
constant "could close" a row when its swing, in the gap's direction, covers at least the gap.
Prints the table of docs/validation.md ("What rlsim's own constants can explain").

    PYTHONPATH=. python benchmarks/v6_assumptions.py          # ~1 min on 2 cores
"""
from __future__ import annotations

import time

from simulator.api import simulate
from simulator.params import MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE, PAGEABLE_OFFLOAD_BPS, PAGEABLE_ONLOAD_BPS
from simulator.scenario import SwitchParams
from simulator.validation import nemo_rl

SLEEP = SwitchParams().sleep_wake_s
# (label, --set key, low, high)
CONSTANTS: tuple[tuple[str, str, float, float], ...] = (
    ("gemm", "topology.device.gemm_efficiency", 0.685, 0.75),
    ("hbm", "topology.device.hbm_efficiency", 0.65, 0.75),
    ("step_ovh", "workload.inference.step_overhead_s", 0.85e-3, 3.4e-3),
    ("per_seq", "workload.inference.cpu_per_seq_s", 0.5e-5, 4.5e-5),
    ("workspace", "workload.inference.workspace_bytes", 1e9, 4e9),
    ("tensor", "schedule.refit_tensor_overhead_s", 0.42e-3, 1.68e-3),
    ("sleepwake", "schedule.switch.sleep_wake_s", SLEEP / 2, SLEEP * 2),
    ("sw_ovh", "schedule.switch.overhead_s", 0.25, 1.0),
    ("host_eff", "schedule.switch.host_link_efficiency", 0.425, 1.0),
    ("page_out", "schedule.host_copies.offload_Bps", PAGEABLE_OFFLOAD_BPS / 2, PAGEABLE_OFFLOAD_BPS * 2),
    ("page_in", "schedule.host_copies.onload_Bps", PAGEABLE_ONLOAD_BPS / 2, PAGEABLE_ONLOAD_BPS * 2),
    ("reward", "workload.reward.capped_cpu_s_per_sample", MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE / 2,
     MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE * 2),
)


def step(row: nemo_rl.Row, items: tuple[str, ...] = ()) -> float | None:
    """The row's steady step with the --set ``items``; None where one does not apply to it: the
    switch constants and the pageable rates (the switch's optimizer copies are the rows' only
    pageable ones) on the 1-step-off rows, which never switch (split pools)."""
    if row.off_policy and any(item.startswith(("schedule.switch.", "schedule.host_copies.")) for item in items):
        return None
    return nemo_rl.published_step_s(simulate(nemo_rl.row_scenario(row, items)))


def _swing(value: float | None, base: float) -> str:
    return "-" if value is None else f"{value - base:+.1f}"


def main() -> None:
    start, runs = time.perf_counter(), 0
    print("| row | gap s | " + " | ".join(label for label, *_ in CONSTANTS) + " | could close |")
    print("|---|---|" + "---|" * len(CONSTANTS) + "---|")
    for row in nemo_rl.ROWS:
        base = step(row)
        gap = row.step_s - base
        cells, closers = [], []
        for label, key, low, high in CONSTANTS:
            lo, hi = step(row, (f"{key}={low!r}",)), step(row, (f"{key}={high!r}",))
            runs += 2
            cells.append(f"{_swing(lo, base)} / {_swing(hi, base)}")
            reach = [v - base for v in (lo, hi) if v is not None]
            if reach and (max(reach) >= gap if gap > 0 else min(reach) <= gap):
                closers.append(label)
        print(f"| {row.name.removeprefix('V6 nemo-rl ')} | {gap:+.1f} | " + " | ".join(cells)
              + f" | {', '.join(closers) or 'none'} |")
    print(f"\nswing = step at the low end - V6 step / at the high end - V6 step (s); {runs} runs in "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
