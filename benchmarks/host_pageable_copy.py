"""A pageable copy between a GPU and host memory, measured on this host (its host side, or the copy).

`tensor.cpu()` / `.to("cpu")` without `pin_memory` lands in pageable memory: the CUDA driver DMAs
each piece into a pinned staging buffer and copies it on into the destination on the CPU, so a
pageable copy runs at the slower of the link and that CPU copy. Into a freshly allocated tensor
(PyTorch's CPU allocator takes a fresh mmap for every large tensor and returns it when the tensor
goes) the CPU copy also takes a page fault per 4 KiB page; out of a tensor already written it is a
plain memcpy. This script times both with torch on one CPU thread (the driver's copy thread is one):
`offload` = a fresh tensor filled by copy_ (device -> pageable host), `onload` = a copy out of a
written tensor (pageable host -> the staging buffer). Best of --repeats, --gib GiB each. It prints the
two rates and the `--set` items that give them to rlsim (schedule.host_copies.offload_Bps /
onload_Bps), with the machine-speed reference (benchmarks/speed_reference.py).

    python benchmarks/host_pageable_copy.py [--gib 1] [--repeats 5] [--device cuda]

With `--device cuda` (a GPU node) it first times the copies themselves, the driver's staging
included: a GPU tensor's `.to("cpu")` into fresh pages, `copy_` into a written pageable tensor, back
in from pageable memory, and both ways through pinned memory; the `--set` line then gives the GPU
copies (rlsim's defaults are the mean of four such runs on two lent H200 nodes: 1.3 and 7.1 GB/s,
where the host side alone gave 1.7-1.9 and 5.1-5.7). It also says whether a non-blocking
`.to("cpu")` lands pinned. Without it, the host side alone: a proxy on a machine with no GPU.
"""
from __future__ import annotations

import argparse
import time

import torch
from speed_reference import reference_ms


def best_rates(gib: float, repeats: int) -> tuple[float, float]:
    """(fresh-pages copy, written-pages copy) in bytes/s, best of ``repeats``."""
    torch.set_num_threads(1)
    source = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    nbytes = source.numel() * source.element_size()
    fresh, written = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        target = torch.empty_like(source)
        target.copy_(source)
        fresh.append(nbytes / (time.perf_counter() - start))
        start = time.perf_counter()
        target.copy_(source)
        written.append(nbytes / (time.perf_counter() - start))
        del target
    return max(fresh), max(written)


def _timed_rate(nbytes: int, copy) -> float:
    """Bytes/s of one device copy, host clock around it and a device sync after it."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    copy()
    torch.cuda.synchronize()
    return nbytes / (time.perf_counter() - start)


def device_rates(gib: float, repeats: int) -> dict[str, float]:
    """The copies themselves on a GPU node, best of ``repeats`` (bytes/s): a GPU tensor out with
    `.to("cpu")` (fresh pageable pages, as Megatron-Core's and NeMo RL's offloads), the same with
    non_blocking=True, into a written pageable tensor, back in from pageable memory, and both ways
    through pinned memory (the link)."""
    torch.set_num_threads(1)
    gpu = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32, device="cuda")
    nbytes = gpu.numel() * gpu.element_size()
    written = torch.empty(gpu.shape, dtype=gpu.dtype)
    written.fill_(1.0)
    pinned = torch.empty(gpu.shape, dtype=gpu.dtype, pin_memory=True)
    out = gpu.to("cpu", non_blocking=True, copy=True)
    torch.cuda.synchronize()
    print(f"non_blocking .to('cpu') lands pinned: {out.is_pinned()}")
    del out
    copies = {
        "offload_fresh_pageable": lambda: gpu.to("cpu"),
        # torch pins the destination of a non-blocking device -> host .to() (its caching host
        # allocator: after the first copy the block is reused); NeMo RL's Megatron worker is
        # recalled to copy its state dict out this way (docs/validation.md)
        "offload_non_blocking_to": lambda: gpu.to("cpu", non_blocking=True, copy=True),
        "offload_written_pageable": lambda: written.copy_(gpu),
        "onload_pageable": lambda: gpu.copy_(written),
        "offload_pinned": lambda: pinned.copy_(gpu),
        "onload_pinned": lambda: gpu.copy_(pinned),
    }
    return {name: max(_timed_rate(nbytes, copy) for _ in range(repeats)) for name, copy in copies.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: also time the GPU copies themselves (a GPU node)")
    args = parser.parse_args(argv)
    device = device_rates(args.gib, args.repeats) if args.device == "cuda" else {}
    for name, rate in device.items():
        print(f"{name}: {rate / 1e9:.2f} GB/s")
    offload, onload = best_rates(args.gib, args.repeats)
    print(f"offload (into fresh pageable pages): {offload / 1e9:.2f} GB/s")
    print(f"onload (out of written pageable pages): {onload / 1e9:.2f} GB/s")
    print(f"machine-speed reference: {reference_ms():.2f} ms")
    if device:   # the copies themselves, not the host-side proxy
        offload, onload = device["offload_fresh_pageable"], device["onload_pageable"]
    print(f"--set schedule.host_copies.offload_Bps={offload:.3g} --set schedule.host_copies.onload_Bps={onload:.3g}")


if __name__ == "__main__":
    main()
