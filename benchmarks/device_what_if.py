"""V6 and V7 with the H100 changed: what a measured device would do to the two H100 validations.

    PYTHONPATH=. python benchmarks/device_what_if.py --set gemm_efficiency=0.6
    PYTHONPATH=. python benchmarks/device_what_if.py --set gemm_efficiency=0.62 --set hbm_efficiency=0.78

`--set FIELD=VALUE` changes a field of the catalog H100 (hardware/devices.py DeviceSpec: the figure
benchmarks/device_gemm_plateau.py measures is `gemm_efficiency`) in every V6 row (NeMo RL v0.5,
the scenario of simulator/validation/nemo_rl.py) and every V7 row (Megatron-Core r0.8.0,
simulator/validation/megatron_core.py); nothing else changes. Prints each row's prediction and
error, and the aggregates the acceptance of issue 12 names (V6 median / max / ordering, V7
median and strong scaling), beside the catalog's. A what-if, not a default: docs/validation.md V7
says when such a value may become the catalog's (a measurement, not a fit to these tables).
`rlsim validate --case V6 --set topology.device.FIELD=VALUE` (and `--case V7`) gives the same
figures case by case; this script prints the two devices side by side.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Any

import yaml

from simulator.validation import megatron_core, nemo_rl


def v6(device: dict[str, Any]) -> dict[nemo_rl.Row, float]:
    """Each row's steady step with the device fields as `rlsim validate --set topology.device.*` gives them."""
    items = tuple(f"topology.device.{field}={value}" for field, value in device.items())
    return {row: float(nemo_rl.simulate_row(row, items)["step_s"]) for row in nemo_rl.ROWS}


def v7(device: dict[str, Any]) -> tuple[list[float], float]:
    pairs = tuple(sorted(device.items()))
    tflops = [megatron_core.predict_row(*row[1:8], device=pairs).tflops_per_device for row in megatron_core.ROWS]
    return tflops, float(megatron_core.strong_scaling(pairs))


def report(name: str, device: dict[str, Any]) -> None:
    steps = v6(device)
    errors = {row: steps[row] / row.step_s - 1 for row in nemo_rl.ROWS}
    right = sum(steps[on] > steps[off] for on, off in nemo_rl.pairs())
    print(f"== {name}")
    print("V6 (NeMo RL v0.5): step s, error")
    for row in nemo_rl.ROWS:
        print(f"  {row.key} {row.policy} {row.algo} {row.gpus}: {steps[row]:.1f} vs {row.step_s:g} "
              f"({errors[row]:+.1%})")
    abs_errors = [abs(e) for e in errors.values()]
    print(f"  median |error| {statistics.median(abs_errors):.1%} (<= 15%), max {max(abs_errors):.1%} (<= 30%), "
          f"ordering {right} / {len(nemo_rl.pairs())}")
    tflops, scaling = v7(device)
    v7_errors = [t / row[-1] - 1 for t, row in zip(tflops, megatron_core.ROWS, strict=True)]
    print("V7 (Megatron-Core r0.8.0): TFLOP/s per GPU, error")
    print("  " + ", ".join(f"{row[0]} {t:.0f} ({e:+.1%})" for row, t, e in zip(megatron_core.ROWS, tflops, v7_errors,
                                                                          strict=True)))
    print(f"  median |error| {statistics.median(abs(e) for e in v7_errors):.1%} (<= 8%), "
          f"strong scaling {scaling:.2f} (published {42 / 47:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="an H100 field, e.g. gemm_efficiency=0.6 (repeatable)")
    args = parser.parse_args()
    device = {}
    for item in args.set:
        field, _, value = item.partition("=")
        if not field or not value:
            parser.error(f"--set {item!r}: expected FIELD=VALUE")
        device[field] = yaml.safe_load(value)
    report("catalog H100", {})
    if device:
        report("H100 with " + ", ".join(f"{k}={v}" for k, v in device.items()), device)


if __name__ == "__main__":
    main()
