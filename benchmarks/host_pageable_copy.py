"""The host side of a pageable copy between a GPU and host memory, measured on this host.

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

    python benchmarks/host_pageable_copy.py [--gib 1] [--repeats 5]

It measures the host it runs on: on a GPU node, its figures are that node's (the link side, a
PCIe 5 x16 DMA at ~50 GB/s, is far above them and does not bound a pageable copy).
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    offload, onload = best_rates(args.gib, args.repeats)
    print(f"offload (into fresh pageable pages): {offload / 1e9:.2f} GB/s")
    print(f"onload (out of written pageable pages): {onload / 1e9:.2f} GB/s")
    print(f"machine-speed reference: {reference_ms():.2f} ms")
    print(f"--set schedule.host_copies.offload_Bps={offload:.3g} --set schedule.host_copies.onload_Bps={onload:.3g}")


if __name__ == "__main__":
    main()
