"""The host's AdamW rate: what Megatron-Core's cpu-offloaded optimizer runs on the CPU each step.

Megatron-Core's optimizer_cpu_offload (HybridDeviceOptimizer) steps the offloaded share of the
optimizer on the host with torch.optim.AdamW(fused=True) over fp32 parameters, gradients and the two
moments (megatron-core 0.16.1 optimizer/__init__.py). This times that step on this host's CPU, at 1
thread (a Ray actor without num_cpus runs with OMP_NUM_THREADS=1) and at every thread count asked,
over tensors of the sizes given, and prints parameters a second (`train_params.offload.
host_adam_params_per_s`, default params.HOST_ADAM_PARAMS_PER_S). Each size runs after a warm-up step,
for about `--seconds` each.

    python benchmarks/host_adam.py                          # 1 thread, 16M and 64M parameters (~10 s)
    python benchmarks/host_adam.py --threads 1 2 4 --sizes 64e6
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from speed_reference import reference_ms


def adamw_rate(size: int, threads: int, seconds: float, fused: bool = True) -> float:
    """Parameters a second of torch's AdamW step on ``size`` fp32 parameters with ``threads`` threads."""
    import torch
    torch.set_num_threads(threads)
    param = torch.nn.Parameter(torch.randn(size))
    param.grad = torch.randn(size)
    optimizer = torch.optim.AdamW([param], lr=1e-4, fused=fused) if fused else \
        torch.optim.AdamW([param], lr=1e-4, foreach=False)
    optimizer.step()                       # warm-up: the moments are allocated here
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        optimizer.step()
        steps += 1
    return size * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--sizes", type=float, nargs="+", default=[16e6, 64e6])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401 - the optional extra
    except ImportError:
        print("torch is not installed (pip install torch==2.13.0): skipped")
        return 0
    rows = [{"threads": threads, "params": int(size), "fused": fused,
             "params_per_s": adamw_rate(int(size), threads, args.seconds, fused)}
            for threads in args.threads for size in args.sizes for fused in (True, False)]
    reference = round(reference_ms(), 2)
    if args.json:
        print(json.dumps({"reference_ms": reference, "rows": rows}, indent=1))
        return 0
    print(f"machine-speed reference: {reference} ms; torch.optim.AdamW on fp32 CPU tensors")
    for row in rows:
        kind = "fused" if row["fused"] else "for-loop"
        print(f"threads {row['threads']:2d}  {row['params'] / 1e6:6.0f}M params  {kind:8s} "
              f"{row['params_per_s'] / 1e9:.2f}e9 params/s")
    fused = [row["params_per_s"] for row in rows if row["fused"] and row["threads"] == min(args.threads)]
    print(f"  --set workload.train_params.offload.host_adam_params_per_s={min(fused):.2e}   "
          f"(fused, {min(args.threads)} thread{'s' if min(args.threads) > 1 else ''}, the slowest size)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
