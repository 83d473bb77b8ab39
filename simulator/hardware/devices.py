"""Accelerator specifications: a frozen DeviceSpec per catalog entry, overridable from YAML.

Every figure cites its source; "hardware.md" is docs/reference/hardware.md (public datasheet and
paper values collected for this project). Peak figures are dense (no sparsity). Bandwidths are
per direction, GB/s = 1e9 bytes/s. Memory capacities are binary (GiB = 2^30 bytes): see GIB.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RlsimError, one_typo_from
from ..units import is_unitless, parse_bandwidth, parse_bytes, parse_flops, parse_seconds, text_number_fix

# Achievable fractions shared by most devices (hardware.md, "Achievable fractions seen in practice").
DEFAULT_GEMM_EFFICIENCY = 0.75  # large BF16 GEMMs reach ~70-80% of peak on H100/A100
# The 700 W Hopper SXM parts (H100, H800, H200: one processor, one power limit) run a training job's
# GEMMs power-limited. Measured on a lent H200 (benchmarks/measured/h200-2026-12-04): the V7 / V6
# trainer GEMMs back to back, random operands, after 30 s and 120 s of load: 0.686 / 0.685 of peak at
# 1455-1500 MHz and 690-693 W; the V7 1.7B, 7.1B and 16B models' GEMMs in a fused (torch.compile)
# forward + backward on that GPU: 0.69-0.73. Only an unfused step, whose many memory-bound kernels
# let the clock recover, ran its GEMMs at 0.80, as bursts of a few ms do (0.79-0.83). Trainers fuse:
# the sustained figure. (validation M1 checks one GPU's micro-batch against it.) On a lent H100
# (benchmarks/measured/h100-2026-12-06) the same sweep after 30 s: 0.698 at 1350 MHz and 699 W. Each
# part takes its own plateau; the H800 is the H100's board. One chip of each was measured, so their
# 2% apart is not split into chip-to-chip spread and the memory's share of the board's power.
H200_GEMM_EFFICIENCY = 0.685
H100_SXM_GEMM_EFFICIENCY = 0.698
# Flash-attention kernels against the trainer stacks' ratios to the GEMM plateau (ComputeParams
# flash_efficiency_ratio 0.85 forward / flash_backward_efficiency_ratio 0.73: FlashAttention-2 on an
# A100). Measured on the lent H200 (cuDNN's flash kernels through torch SDPA, head dim 128, 4096 causal
# tokens, inside the V7 1.7B micro-batch): forward 0.61 / 0.54 and backward 0.50 / 0.52 of the GEMM
# rate beside them (unfused / compiled step), i.e. 0.72, 0.63, 0.68, 0.71 of the A100 ratios: 0.69
# (tests/validation/test_measured_h200.py recomputes it from the raw files). The lent H100's compiled
# 1.7B micro-batch gave 0.68 / 0.65 (benchmarks/measured/h100-2026-12-06), inside that spread.
HOPPER_FLASH_EFFICIENCY_SCALE = 0.69
DEFAULT_HBM_EFFICIENCY = 0.80  # HBM streaming in decode reaches ~75-85% of peak bandwidth
# A decode step's streaming rate, measured: a Llama-3.1-8B decode step replayed as a CUDA graph
# (benchmarks/device_decode_graphs.py, 1024 cached positions a sequence), the batch-1 step's bytes over
# its time less the graph's replay (InferenceParams.cuda_graph_replay_s, 0.3 ms). H100 (benchmarks/
# measured/h100-2026-12-06): 0.700 of 3.35 TB/s, 0.69-0.75 at batch 4-256, a plain copy 0.90; H200
# (benchmarks/measured/h200-2026-12-04): 0.653 of 4.8 TB/s, 0.64-0.69 at batch 4-256, a copy 0.88.
# The default's 0.80 (hardware.md's 75-85%) overstated both; the H800 has the H100's memory.
H100_HBM_EFFICIENCY = 0.70
H200_HBM_EFFICIENCY = 0.65
# CUDA kernel launch costs a few microseconds (NVIDIA CUDA best-practices guide, "~5 us");
# no public figure for Ascend, so the same value is assumed there until calibrated.
DEFAULT_LAUNCH_OVERHEAD_S = 5e-6

_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp32", "fp64")


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator. SI units: FLOP/s, bytes, bytes/s (per direction), seconds, watts."""

    name: str
    peak_flops: Mapping[str, float]
    hbm_bytes: float
    hbm_bw_Bps: float
    scaleup_bw_Bps: float  # per device, per direction, on NVLink / UB / HCCS
    host_link_bw_Bps: float  # device <-> host memory, per direction
    gemm_efficiency: float = DEFAULT_GEMM_EFFICIENCY
    hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY
    launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S
    # The device's flash-attention kernels against the trainer stack's flash ratios (which come from
    # FlashAttention-2 on an A100): 1 there; a trainer's attention runs at ratio x this x the plateau.
    flash_efficiency_scale: float = 1.0
    # vLLM's / SGLang's custom all-reduce (custom_all_reduce.py: CUDA IPC peer memory) runs on it;
    # False: an engine's TP all-reduce is the collective library's (vllm-ascend's NPU communicator: HCCL)
    peer_memory_all_reduce: bool = True
    price_per_hour: float | None = None  # USD per device-hour; None when no public list price
    power_w: float | None = None  # board power (TDP), watts
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops", dict(self.peak_flops))
        bad = [k for k in self.peak_flops if k not in _DTYPES]
        if bad:
            raise RlsimError(f"unknown dtype(s) {bad} in peak_flops of device {self.name!r}",
                             field="peak_flops", fix=f"use {', '.join(_DTYPES)}")
        for key, value in self.peak_flops.items():
            if not value > 0:
                raise RlsimError(f"peak_flops[{key}] of device {self.name!r} must be > 0, got {value}",
                                 field=f"peak_flops.{key}")
        for name in ("hbm_bytes", "hbm_bw_Bps", "scaleup_bw_Bps", "host_link_bw_Bps"):
            if not getattr(self, name) > 0:
                raise RlsimError(f"{name} of device {self.name!r} must be > 0, got {getattr(self, name)}",
                                 field=name)
        for name in ("gemm_efficiency", "hbm_efficiency", "flash_efficiency_scale"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise RlsimError(f"{name} of device {self.name!r} must be in (0, 1], got {value}", field=name,
                                 fix=f"give {name} as a share of the peak, e.g. 0.75")
        if self.launch_overhead_s < 0:
            raise RlsimError(f"launch_overhead_s of device {self.name!r} must be >= 0", field="launch_overhead_s",
                             fix="give a time of at least 0, e.g. 5us")

    def __hash__(self) -> int:  # peak_flops is a dict, so hash a frozen view of every field
        return hash((self.name, tuple(sorted(self.peak_flops.items())), self.hbm_bytes, self.hbm_bw_Bps,
                     self.scaleup_bw_Bps, self.host_link_bw_Bps, self.gemm_efficiency, self.hbm_efficiency,
                     self.launch_overhead_s, self.flash_efficiency_scale, self.price_per_hour, self.power_w))

    def peak(self, dtype: str = "bf16", *, field: str = "dtype") -> float:
        """Dense peak FLOP/s for a dtype; RlsimError if the device has no figure for it, naming
        ``field`` (the caller's dotted key the dtype came from, e.g. ``workload.dtype``)."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise RlsimError(f"device {self.name!r} has no peak figure for dtype {dtype!r}",
                             field=field, fix=f"use one of {sorted(self.peak_flops)}") from None

    def replace(self, **fields: Any) -> DeviceSpec:
        return dataclasses.replace(self, **fields)


T = 1e12  # TFLOP/s, TB/s
G = 1e9  # GB/s
# Memory capacities: a datasheet's "80 GB" of HBM is 80 x 2^30 bytes (JEDEC JESD100B.01: the prefix G
# for semiconductor storage capacity is 2^30; HBM dies are binary, e.g. H100's five 16 GiB HBM3
# stacks). The driver reports within 0.5% of it: nvidia-smi totals 81,920 MiB on an A100 80GB,
# 81,559 MiB on an H100 80GB, 143,771 MiB on an H200 141GB. vLLM's gpu_memory_utilization and the
# memory-fit checks apply to this total; hardware.md's table writes capacities in its GB = 1e9.
GIB = float(2 ** 30)

_CATALOG: dict[str, DeviceSpec] = {
    spec.name: spec for spec in [
        DeviceSpec(
            name="ascend-910c", description="Huawei Ascend 910C (2 dies per package)",
            # hardware.md / CloudMatrix384 paper arXiv 2506.12708: 752 TFLOPS BF16 (376 per die);
            # INT8 ~1,504 TOPS derived as 2x BF16.
            peak_flops={"bf16": 752 * T, "fp16": 752 * T, "int8": 1504 * T},  # fp16 = bf16: assumed
            hbm_bytes=128 * GIB, hbm_bw_Bps=3.2 * T,  # hardware.md: 128 GB (64 per die), 3.2 TB/s
            scaleup_bw_Bps=392 * G,  # arXiv 2506.12708: UB 392 GB/s unidirectional per NPU (hardware.md: some sources 196)
            # hardware.md: host via Kunpeng CPUs over UB, ~160 GB/s per CPU; 4 CPUs per 8 NPUs -> 80 per NPU.
            host_link_bw_Bps=80 * G,
            gemm_efficiency=0.80,  # arXiv 2506.12708: INT8 GEMM reaches 77-83% of peak on 910C (taken for BF16 too)
            hbm_efficiency=0.84,  # arXiv 2506.12708: decode MLA kernels reach ~84% of HBM bandwidth
            peer_memory_all_reduce=False,  # vllm-ascend reduces over HCCL (no CUDA IPC kernel)
        ),
        DeviceSpec(
            name="ascend-910b2", description="Huawei Ascend 910B2",
            # hardware.md: 353.8 TFLOPS FP16 (BF16 assumed equal: same cube unit), INT8 ~708 TOPS.
            peak_flops={"bf16": 353.8 * T, "fp16": 353.8 * T, "int8": 708 * T},
            hbm_bytes=64 * GIB, hbm_bw_Bps=1.6 * T,  # hardware.md: 64 GB, 1.6 TB/s
            scaleup_bw_Bps=196 * G,  # hardware.md: HCCS ~196 GB/s per NPU in an 8-NPU server
            host_link_bw_Bps=32 * G,  # hardware.md says "PCIe"; PCIe 4.0 x16 ~32 GB/s per direction assumed
            power_w=400,  # Atlas 800T A2 datasheet: 910B module ~400 W
            peer_memory_all_reduce=False,  # vllm-ascend reduces over HCCL (no CUDA IPC kernel)
        ),
        DeviceSpec(
            name="ascend-910b3", description="Huawei Ascend 910B3",
            peak_flops={"bf16": 294.9 * T, "fp16": 294.9 * T},  # hardware.md: 294.9 TFLOPS FP16
            hbm_bytes=64 * GIB, hbm_bw_Bps=1.6 * T,  # hardware.md: as 910B2
            scaleup_bw_Bps=196 * G,  # hardware.md: as 910B2
            host_link_bw_Bps=32 * G,  # as 910B2 (PCIe 4.0 x16 assumed)
            power_w=400,  # as 910B2
            peer_memory_all_reduce=False,  # vllm-ascend reduces over HCCL (no CUDA IPC kernel)
        ),
        DeviceSpec(
            name="a100-40gb", description="NVIDIA A100 SXM 40GB",
            # NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16, 624 TOPS INT8, 19.5 TFLOPS FP32, 19.5 FP64 Tensor Core
            # (cuBLAS's DGEMM runs on the FP64 tensor cores: the fp64 matmul peak; 9.7 without them).
            peak_flops={"bf16": 312 * T, "fp16": 312 * T, "int8": 624 * T, "fp32": 19.5 * T, "fp64": 19.5 * T},
            hbm_bytes=40 * GIB, hbm_bw_Bps=1.555 * T,  # A100 datasheet: 40 GB HBM2, 1.555 TB/s
            scaleup_bw_Bps=300 * G,  # NVLink3 600 GB/s both directions (hardware.md)
            host_link_bw_Bps=32 * G,  # PCIe4 x16, 32 GB/s per direction (hardware.md)
            power_w=400,  # A100 SXM datasheet TDP
        ),
        DeviceSpec(
            name="a100-80gb", description="NVIDIA A100 SXM 80GB",
            peak_flops={"bf16": 312 * T, "fp16": 312 * T, "int8": 624 * T, "fp32": 19.5 * T,  # datasheet
                        "fp64": 19.5 * T},  # FP64 Tensor Core, as the 40GB's
            hbm_bytes=80 * GIB, hbm_bw_Bps=2.039 * T,  # hardware.md: 80 GB, 2.039 TB/s
            scaleup_bw_Bps=300 * G,  # NVLink3 (hardware.md)
            host_link_bw_Bps=32 * G,  # PCIe4 (hardware.md)
            power_w=400,  # A100 SXM datasheet TDP
        ),
        DeviceSpec(
            name="h100", description="NVIDIA H100 SXM 80GB",
            # hardware.md / H100 datasheet: 989 TFLOPS BF16 dense, 1,979 FP8/INT8, 67 FP32 (non-tensor; TF32
            # tensor 495 dense, which torch's fp32 matmul does not use by default), 67 FP64 Tensor Core (34
            # without: cuBLAS's DGEMM runs on the tensor cores).
            peak_flops={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T, "fp32": 67 * T,
                        "fp64": 67 * T},
            hbm_bytes=80 * GIB, hbm_bw_Bps=3.35 * T,  # hardware.md
            scaleup_bw_Bps=450 * G,  # NVLink4 900 GB/s both (hardware.md)
            host_link_bw_Bps=64 * G,  # PCIe5 x16 (hardware.md)
            gemm_efficiency=H100_SXM_GEMM_EFFICIENCY, hbm_efficiency=H100_HBM_EFFICIENCY,  # measured, above
            flash_efficiency_scale=HOPPER_FLASH_EFFICIENCY_SCALE,
            power_w=700,  # H100 SXM datasheet TDP
        ),
        DeviceSpec(
            name="h800", description="NVIDIA H800 SXM 80GB (export variant, reduced NVLink)",
            peak_flops={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T, "fp32": 67 * T},
            hbm_bytes=80 * GIB, hbm_bw_Bps=3.35 * T,  # hardware.md
            scaleup_bw_Bps=200 * G,  # hardware.md: NVLink 400 GB/s both directions
            host_link_bw_Bps=64 * G,  # PCIe5 (hardware.md)
            gemm_efficiency=H100_SXM_GEMM_EFFICIENCY, hbm_efficiency=H100_HBM_EFFICIENCY,  # the H100's
            flash_efficiency_scale=HOPPER_FLASH_EFFICIENCY_SCALE,
            power_w=700,  # same board as H100 SXM
        ),
        DeviceSpec(
            name="h20", description="NVIDIA H20 96GB",
            peak_flops={"bf16": 148 * T, "fp16": 148 * T, "fp8": 296 * T, "int8": 296 * T},  # hardware.md
            hbm_bytes=96 * GIB, hbm_bw_Bps=4.0 * T,  # hardware.md
            scaleup_bw_Bps=450 * G,  # hardware.md: NVLink 900 GB/s both
            host_link_bw_Bps=64 * G,  # PCIe5 (hardware.md)
            power_w=400,  # H20 product brief TDP
        ),
        DeviceSpec(
            name="h200", description="NVIDIA H200 SXM 141GB",
            # H200 datasheet: the H100 SXM's compute (FP64 Tensor Core 67 TFLOPS)
            peak_flops={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T, "fp32": 67 * T,
                        "fp64": 67 * T},
            hbm_bytes=141 * GIB, hbm_bw_Bps=4.8 * T,  # hardware.md
            hbm_efficiency=H200_HBM_EFFICIENCY,  # measured, above
            scaleup_bw_Bps=450 * G,  # NVLink4 900 GB/s both (hardware.md)
            host_link_bw_Bps=64 * G,  # PCIe5 (hardware.md)
            gemm_efficiency=H200_GEMM_EFFICIENCY, flash_efficiency_scale=HOPPER_FLASH_EFFICIENCY_SCALE,
            power_w=700,  # H200 SXM datasheet TDP
        ),
        DeviceSpec(
            name="b200", description="NVIDIA B200 (HGX)",
            peak_flops={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "int8": 4500 * T},  # hardware.md
            hbm_bytes=180 * GIB, hbm_bw_Bps=8 * T,  # hardware.md: 180 GB (192 in some specs: the stacks' raw size; 180 is what a B200 exposes), 8 TB/s
            scaleup_bw_Bps=900 * G,  # NVLink5 1.8 TB/s both (hardware.md)
            host_link_bw_Bps=64 * G,  # hardware.md: PCIe5/6, sources differ; PCIe5 x16 taken
            power_w=1000,  # HGX B200 datasheet: 1,000 W per GPU
        ),
        DeviceSpec(
            name="gb200", description="NVIDIA GB200 (Blackwell GPU in an NVL72 rack)",
            peak_flops={"bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "int8": 5000 * T},  # hardware.md
            hbm_bytes=186 * GIB, hbm_bw_Bps=8 * T,  # hardware.md
            scaleup_bw_Bps=900 * G,  # NVLink5 1.8 TB/s both (hardware.md)
            # NVLink-C2C 900 GB/s both directions per Grace, shared by its 2 GPUs -> 225 GB/s per GPU per direction
            # (NVIDIA's GB200 NVL72 figure for the Grace link; hardware.md names the link without a rate: assumed).
            host_link_bw_Bps=225 * G,
            power_w=1200,  # GB200 NVL72 spec: ~1.2 kW per Blackwell GPU
        ),
        DeviceSpec(
            name="cpu", description="host CPU as a compute device (placeholder: fill by `rlsim calibrate`)",
            # Placeholders of a typical 2-socket server, to be replaced by calibration: ~2 TFLOPS FP32/BF16
            # with AVX-512, 256 GB DRAM at ~200 GB/s; "scale-up" is the socket-to-socket link (~64 GB/s).
            peak_flops={"bf16": 2 * T, "fp32": 2 * T},
            hbm_bytes=256 * GIB, hbm_bw_Bps=200 * G,
            scaleup_bw_Bps=64 * G, host_link_bw_Bps=200 * G,
            gemm_efficiency=0.5, hbm_efficiency=0.6,  # placeholders until calibrated
            launch_overhead_s=1e-6,  # placeholder: a function call, no device launch
            peer_memory_all_reduce=False,  # no GPU peer memory
        ),
    ]
}


def distinct_devices(topology: Any, ranks: Any) -> list[DeviceSpec]:
    """The distinct DeviceSpecs of `ranks` on `topology` (anything with ``device_spec(rank)``), in
    first-seen order; kinds are few, so they are compared by identity."""
    fast = getattr(topology, "distinct_specs", None)
    if fast is not None:   # a Topology: one range check, and it stops once every kind is seen
        return fast(ranks)
    kinds: list[DeviceSpec] = []
    spec = topology.device_spec
    for r in ranks:
        s = spec(int(r))
        if not any(s is k for k in kinds):
            kinds.append(s)
    return kinds


def worst_case_device(kinds: Sequence[DeviceSpec], dtype: str = "bf16", *, dtype_field: str = "dtype") -> DeviceSpec:
    """One device that is no faster than any of `kinds` at anything: what an engine or trainer spanning
    kinds runs at (its devices wait for each other). Each rate separately: per dtype the lowest
    sustained peak (peak x gemm_efficiency), the lowest sustained HBM bandwidth (x hbm_efficiency), the
    lowest flash-attention rate, the smallest HBM, the slowest links, the longest launch. It keeps the
    efficiencies of the kind with the lowest sustained `dtype` rate (ties: HBM) and rescales the peaks
    to them, so that each product is the minimum; only the dtypes every kind has stay. One kind: it."""
    if len(kinds) == 1:
        return kinds[0]
    base = min(kinds, key=lambda k: (k.peak(dtype, field=dtype_field) * k.gemm_efficiency,
                                     k.hbm_bw_Bps * k.hbm_efficiency))
    shared = [d for d in base.peak_flops if all(d in k.peak_flops for k in kinds)]
    peaks = {d: min(k.peak_flops[d] * k.gemm_efficiency for k in kinds) / base.gemm_efficiency for d in shared}
    gemm = peaks[dtype] * base.gemm_efficiency
    # a trainer's attention runs at peak x plateau x flash ratio x this scale: the slowest kind's rate
    flash = min(k.peak(dtype) * k.gemm_efficiency * k.flash_efficiency_scale for k in kinds) / gemm
    names = "+".join(dict.fromkeys(k.name for k in kinds))
    return base.replace(
        name=names, peak_flops=peaks, hbm_bytes=min(k.hbm_bytes for k in kinds),
        hbm_bw_Bps=min(k.hbm_bw_Bps * k.hbm_efficiency for k in kinds) / base.hbm_efficiency,
        scaleup_bw_Bps=min(k.scaleup_bw_Bps for k in kinds), host_link_bw_Bps=min(k.host_link_bw_Bps for k in kinds),
        launch_overhead_s=max(k.launch_overhead_s for k in kinds), flash_efficiency_scale=min(flash, 1.0),
        peer_memory_all_reduce=all(k.peer_memory_all_reduce for k in kinds), price_per_hour=None, power_w=None,
        description=f"the slowest of {names} at each rate")


def device_names() -> list[str]:
    return sorted(_CATALOG)


def catalog_device(name: str) -> DeviceSpec | None:
    """The catalog entry of exactly this name, None for a name of the user's own."""
    return _CATALOG.get(name)


def get_device(name: str) -> DeviceSpec:
    """A catalog entry by its lower-case name, e.g. 'h100', 'ascend-910c'."""
    spec = _CATALOG.get(str(name).strip().lower())
    if spec is None:
        raise RlsimError(f"unknown device {name!r}", field="device", fix=f"use one of: {', '.join(device_names())}")
    return spec


# YAML field -> parser of its unit-bearing value.
_PARSERS = {
    "hbm_bytes": parse_bytes, "hbm_bw_Bps": parse_bandwidth, "scaleup_bw_Bps": parse_bandwidth,
    "host_link_bw_Bps": parse_bandwidth, "launch_overhead_s": parse_seconds,
}


# A device figure given as a bare number is read in SI base units (bytes, bytes/s, FLOP/s); one below
# these floors is a unit left out (hbm_bytes: 80 read as 80 bytes: "engine share 0.0 GB" named the
# rollout layout, not the device), refused with the unit to add. The floors sit far below any device,
# a CPU that `rlsim calibrate` measures included (tens of GFLOP/s, GB/s of memory bandwidth).
_BARE_FLOORS = {"hbm_bytes": (1e8, "GB"), "hbm_bw_Bps": (1e7, "TB/s"), "scaleup_bw_Bps": (1e6, "GB/s"),
                "host_link_bw_Bps": (1e6, "GB/s"), "peak_flops": (1e6, "T")}


def check_bare(key: str, raw: Any, value: float, where: str, source: str | None) -> None:
    """Refuses a device figure given as a bare number below its key's floor (_BARE_FLOORS): a unit left out."""
    floor = _BARE_FLOORS.get(key)
    if floor and is_unitless(raw) and 0 < value < floor[0]:   # 0: its own error
        raise RlsimError(f"{raw!r} reads as {raw} in SI base units (a bare number): no device is that small",
                         source=source, field=where, fix=f"give the unit, e.g. '{raw}{floor[1]}'")


def device_from_mapping(value: str | Mapping[str, Any], source: str | None = None,
                        field_name: str = "device") -> DeviceSpec:
    """A catalog name, or a mapping `{name: h100, gemm_efficiency: 0.7, hbm_bw_Bps: 3TB/s, ...}`.

    In a mapping, `name` (or `base`) picks the catalog entry that the other keys override; with no
    catalog entry every field must be given. Units are parsed ('80GB', '3.35TB/s', '989T')."""
    if isinstance(value, str):
        try:
            return get_device(value)
        except RlsimError as exc:
            raise RlsimError(f"unknown device {value!r}", source=source, field=field_name, fix=exc.fix) from None
    if not isinstance(value, Mapping):
        raise RlsimError(f"expected a device name or mapping, got {value!r}", source=source, field=field_name,
                         fix="name a catalog device (e.g. h100), or give a mapping such as {name: h100, "
                             "hbm_bytes: 80GB}")
    data = dict(value)
    base = data.pop("base", None)
    if base is not None and str(base).lower() not in _CATALOG:   # a name may be new; a base is the catalog's
        raise RlsimError(f"unknown base device {base!r}", source=source, field=f"{field_name}.base",
                         fix=f"use a catalog device: {', '.join(device_names())}")
    base_name = base or data.get("name")
    known = {f.name for f in dataclasses.fields(DeviceSpec)}
    fields: dict[str, Any] = {}
    for key, raw in data.items():
        where = f"{field_name}.{key}"
        if key not in known:
            raise RlsimError(f"unknown device field {key!r}{one_typo_from(key, known | {'base'})}", source=source,
                             field=where,
                             fix=f"use one of: {', '.join(sorted(known | {'base'}))}")
        if key == "peak_flops":
            if not isinstance(raw, Mapping):
                raise RlsimError("peak_flops must be a mapping dtype -> FLOP/s", source=source, field=where)
            fields[key] = {str(k): parse_flops(v, f"{where}.{k}", source) for k, v in raw.items()}
            for dtype, flops in raw.items():
                check_bare(key, flops, fields[key][str(dtype)], f"{where}.{dtype}", source)
        elif key in _PARSERS:
            fields[key] = _PARSERS[key](raw, where, source)
            check_bare(key, raw, fields[key], where, source)
        elif key == "name":   # a catalog device's name as the catalog spells it ('H100' picks h100: profiles match it)
            fields[key] = str(raw).lower() if str(raw).lower() in _CATALOG else str(raw)
        elif key == "description":
            fields[key] = str(raw)
        elif key == "peer_memory_all_reduce":
            if not isinstance(raw, bool):
                raise RlsimError(f"expected true or false, got {raw!r}", source=source, field=where,
                                 fix=f"write {key}: true or {key}: false")
            fields[key] = raw
        elif raw is None:
            fields[key] = None
        elif isinstance(raw, str):   # float() would read '0.6'; a quoted number is text, as in the scenario
            raise RlsimError(f"expected a number, got {raw!r} (text)", source=source, field=where,
                             fix=text_number_fix(raw))
        else:
            try:
                fields[key] = float(raw)
            except (TypeError, ValueError):
                raise RlsimError(f"expected a number, got {raw!r}", source=source, field=where) from None
            if isinstance(raw, bool) or not math.isfinite(fields[key]) or fields[key] < 0:   # a price, a power
                raise RlsimError(f"expected a finite number >= 0, got {raw!r}", source=source, field=where)
    try:
        if base_name is not None and str(base_name).lower() in _CATALOG:
            base = get_device(str(base_name))
            if "peak_flops" in fields:
                fields["peak_flops"] = {**base.peak_flops, **fields["peak_flops"]}
            return base.replace(**fields)
        missing = [f.name for f in dataclasses.fields(DeviceSpec)
                   if f.default is dataclasses.MISSING and f.name not in fields]
        if missing:
            raise RlsimError(f"custom device needs fields {missing}", source=source, field=field_name,
                             fix=f"give them, or set name/base to a catalog device: {', '.join(device_names())}")
        return DeviceSpec(**fields)
    except RlsimError as exc:
        if exc.source is None:  # add the file and the full field path to a spec-level error
            message = str(exc).removeprefix(f"field '{exc.field}': ")
            if exc.fix:
                message = message.removesuffix(f" (fix: {exc.fix})")
            raise RlsimError(message, source=source, field=f"{field_name}.{exc.field or ''}".rstrip("."),
                             fix=exc.fix) from None
        raise
