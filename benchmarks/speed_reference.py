"""The machine-speed reference every benchmark prints, so figures compare across noisy machines."""
from __future__ import annotations

import time


def reference_ms(repeats: int = 7) -> float:
    """This machine's speed right now: the best of ``repeats`` runs of a fixed pure-Python loop (about
    8 ms on the project's 2-core VM when quiet). Shared VMs slow down by up to 2x under neighbours'
    load; divide a figure by it to compare runs."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        acc = 0.0
        for i in range(100_000):
            acc = (acc if acc >= i else float(i)) + 1e-3
        best = min(best, time.perf_counter() - t0)
    return best * 1e3
