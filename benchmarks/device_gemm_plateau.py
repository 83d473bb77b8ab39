"""The sustained GEMM rate of a GPU at the shapes of the V7 / V6 trainers: the measurement behind the
Hopper SXM catalog plateaus (H200 0.685, run on 2026-12-04: benchmarks/measured/h200-2026-12-04; H100
0.698, run on 2026-12-06: benchmarks/measured/h100-2026-12-06; docs/validation.md V7). A prepared device check: one run, a few minutes, prints figures.

    python benchmarks/device_gemm_plateau.py --device cuda [--json] [--sustain-s 20] [--out h100.yaml]
    python benchmarks/device_gemm_plateau.py --device cpu --smoke     # the script itself, on a CPU

With `--out PATH` it also writes a device profile of the `--catalog` device whose gemm_efficiency is
the FLOP-weighted plateau over every shape (one plateau, as rlsim's device has one), for
`rlsim validate --case V6 --case V7 --set topology.device_profile=PATH`. An H200 has the
H100's SMs, clocks and power limit: measured there with `--catalog h100`, the profile says so in
`measured_on`.

What it does: bf16 `matmul` (fp32 on a CPU) at every per-GPU GEMM of the V7 Megatron-Core rows (the
layer's forward, data-gradient and weight-gradient GEMMs and the LM head of one 4096-token
micro-batch at the row's TP) and of the V6 Qwen3-32B trainer (TP4). First the GPU is held busy for
`--sustain-s` seconds of back-to-back GEMMs, so it reaches the clocks its power limit allows under
a training load (a burst of a few ms runs at boost clocks); then every shape is timed with the GPU
still loaded. For each shape: TFLOP/s, the share of the catalog peak, and the plateau it implies
through rlsim's own shape ramp (llm/train_compute.shape_efficiency); per row, the FLOP-weighted
plateau: the value `topology.device.gemm_efficiency` would take. The SM clock is read through NVML
when pynvml is installed. It asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from simulator.hardware.devices import get_device
from simulator.llm.train_compute import shape_efficiency
from simulator.params import ComputeParams
from simulator.validation.megatron_core import ROWS, SEQ_LEN, VOCAB

TOKENS = SEQ_LEN   # one micro-batch of one 4096-token sequence (V7: micro-batch 1)


@dataclass(frozen=True)
class Shape:
    row: str
    name: str
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def layer_shapes(row: str, hidden: int, ffn: int, qkv: int, tp: int, vocab: int, tokens: int) -> list[Shape]:
    """Forward (m=tokens, n, k), data gradient (tokens, k, n) and weight gradient (k, n, tokens) of
    each linear of one layer at tensor parallelism tp, and the LM head's three."""
    linears = [("qkv", qkv // tp, hidden), ("proj", hidden, hidden // tp), ("fc1", ffn // tp, hidden),
               ("fc2", hidden, ffn // tp), ("lm_head", vocab // tp, hidden)]
    out = []
    for name, n, k in linears:
        out += [Shape(row, f"{name} fwd", tokens, n, k), Shape(row, f"{name} dgrad", tokens, k, n),
                Shape(row, f"{name} wgrad", k, n, tokens)]
    return out


def all_shapes(smoke: bool) -> list[Shape]:
    if smoke:   # a few small GEMMs: the script's path on a CPU in seconds
        return layer_shapes("smoke", 256, 1024, 768, 1, 1024, 128)
    shapes = []
    for label, _heads, hidden, _layers, tp, _pp, _gpus, _batch, _pub in ROWS:
        shapes += layer_shapes(f"V7 {label} tp{tp}", hidden, 4 * hidden, 3 * hidden, tp, VOCAB, TOKENS)
    # V6 Qwen3-32B trainer, TP4: hidden 5120, 64 query heads + 8 KV heads of 128, SwiGLU FFN 25600
    shapes += layer_shapes("V6 qwen3-32b tp4", 5120, 2 * 25600, 64 * 128 + 2 * 8 * 128, 4, 151_936, TOKENS)
    return shapes


def _clock_and_power() -> tuple[float | None, float | None]:
    """GPU 0's SM clock (MHz) and board power draw (W) through NVML; (None, None) without pynvml."""
    try:
        import pynvml
    except ImportError:
        return None, None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return (float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)


class Timer:
    def __init__(self, torch, device: str, dtype) -> None:
        self.torch, self.device, self.dtype = torch, device, dtype
        self.cache: dict[Shape, tuple] = {}

    def operands(self, s: Shape) -> tuple:
        if s not in self.cache:
            t = self.torch
            # Random operands: a tensor core's power, hence the clock a power limit allows, follows
            # its bits' switching (an H200's 8192^3 product ran 13% faster on zeros than on random data).
            self.cache[s] = (t.randn((s.m, s.k), dtype=self.dtype, device=self.device),
                             t.randn((s.k, s.n), dtype=self.dtype, device=self.device),
                             t.empty((s.m, s.n), dtype=self.dtype, device=self.device))
        return self.cache[s]

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def run(self, s: Shape, calls: int) -> None:
        a, b, c = self.operands(s)
        for _ in range(calls):
            self.torch.matmul(a, b, out=c)

    def seconds_per_call(self, s: Shape, min_s: float) -> float:
        self.run(s, 2)
        self.sync()
        calls, elapsed = 1, 0.0
        while True:
            start = time.perf_counter()
            self.run(s, calls)
            self.sync()
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                return elapsed / calls
            calls *= 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--catalog", default="h100", help="catalog device whose peak the shares are of")
    parser.add_argument("--sustain-s", type=float, default=20.0, help="seconds of load before timing")
    parser.add_argument("--min-s", type=float, default=0.2, help="seconds each shape is timed for")
    parser.add_argument("--smoke", action="store_true", help="a few small shapes (the script on a CPU)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write a device profile YAML of --catalog with the plateau")
    args = parser.parse_args()
    import torch

    dtype_name = "bf16" if args.device == "cuda" else "fp32"
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    peak = get_device(args.catalog).peak(dtype_name)
    ramps = ComputeParams()
    timer = Timer(torch, args.device, dtype)
    shapes = all_shapes(args.smoke)
    clock_before = _clock_and_power()[0]
    deadline, loaded = time.perf_counter() + args.sustain_s, (None, None)
    while time.perf_counter() < deadline:   # hold the load: power-capped clocks, warm caches
        for s in shapes:
            timer.run(s, 1)
        loaded = _clock_and_power()   # read while the last round's kernels still run
        timer.sync()
    results = []
    for s in shapes:
        t = timer.seconds_per_call(s, args.min_s)
        share = s.flops / t / peak
        shape = float(shape_efficiency(s.m, s.n, s.k, ramps.gemm_ramp_dim, ramps.gemm_ramp_k))
        results.append({"row": s.row, "gemm": s.name, "m": s.m, "n": s.n, "k": s.k, "tflops": s.flops / t / 1e12,
                        "share_of_peak": share, "implied_plateau": share / shape})
    rows: dict[str, list[dict]] = {}
    for r in results:
        rows.setdefault(r["row"], []).append(r)
    summary = {row: sum(r["implied_plateau"] * r["m"] * r["n"] * r["k"] for r in rs)
               / sum(r["m"] * r["n"] * r["k"] for r in rs) for row, rs in rows.items()}
    weight = sum(r["m"] * r["n"] * r["k"] for r in results)
    doc = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "dtype": dtype_name,
           "catalog": args.catalog, "peak_tflops": peak / 1e12, "sustain_s": args.sustain_s,
           "sm_clock_mhz_before_after": [clock_before, _clock_and_power()[0]],
           "under_load_sm_clock_mhz_power_w": list(loaded), "shapes": results,
           "flop_weighted_plateau_by_row": summary,
           "flop_weighted_plateau": sum(r["implied_plateau"] * r["m"] * r["n"] * r["k"] for r in results) / weight}
    if args.out:
        _write_profile(args.out, doc, torch.__version__)
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"{doc['device']} {dtype_name}, peak {peak / 1e12:.0f} TFLOP/s ({args.catalog}), "
          f"after {args.sustain_s:g} s of load; SM clock MHz before/after: {doc['sm_clock_mhz_before_after']}; "
          f"under load (MHz, W): {doc['under_load_sm_clock_mhz_power_w']}")
    for r in results:
        print(f"  {r['row']:<18} {r['gemm']:<14} {r['m']:>6} x {r['n']:>6} x {r['k']:>6}  "
              f"{r['tflops']:8.1f} TFLOP/s  {r['share_of_peak']:6.1%} of peak  plateau {r['implied_plateau']:.3f}")
    print(f"FLOP-weighted plateau per row (topology.device.gemm_efficiency; catalog "
          f"{get_device(args.catalog).gemm_efficiency:g}):")
    for row, value in summary.items():
        print(f"  {row:<18} {value:.3f}")


def _write_profile(path: str, doc: dict, torch_version: str) -> None:
    """A device profile of the catalog device with the overall plateau (at most 1) as gemm_efficiency."""
    from simulator.hardware.profiles import DeviceProfile, save_profile

    plateau = doc["flop_weighted_plateau"]
    save_profile(DeviceProfile(
        device=doc["catalog"], gemm_efficiency=min(1.0, plateau),
        measured_on={"framework": f"torch {torch_version}", "device": doc["device"], "dtype": doc["dtype"],
                     "sustain_s": doc["sustain_s"], "sm_clock_mhz_before_after": doc["sm_clock_mhz_before_after"],
                     "under_load_sm_clock_mhz_power_w": doc["under_load_sm_clock_mhz_power_w"]},
        notes=[f"benchmarks/device_gemm_plateau.py: FLOP-weighted plateau {plateau:.4f} over "
               f"{len(doc['shapes'])} GEMM shapes of the V7 rows and the V6 Qwen3-32B trainer"]), path)


if __name__ == "__main__":
    main()
