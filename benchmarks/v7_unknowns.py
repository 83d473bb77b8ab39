"""Issue 12, V7 (Megatron-Core r0.8.0): which readings of the unpublished recipe fit the table's shape?

The README gives each row's model, TP, PP, GPUs and batch, and the overlap flags; it does not give
the micro-batch, the activation recompute, the gradient-reduce precision or the interleaving. The
V7 case reads them as micro-batch 1, no recompute, fp32 reduce (Megatron-LM forces it for bf16) and
V1's chunk rule (simulator/validation/megatron_core.py). This script prices every row over those
unknowns, the hardware and rlsim's defaults held fixed:
- micro-batch 1 / 2 / 4 (a size that does not fit in the H100's memory is skipped);
- recompute none / selective / full;
- gradient reduce 4 / 2 bytes a parameter (fp32 / bf16);
- PP > 1 rows: V1's chunk rule / no interleaving (vpp 1).

Two tables. Per row: the range over the unknowns and whether the published TFLOP/s lies inside it.
Per uniform reading (the same settings on every row; "mb <= 4": the largest of 1, 2, 4 that fits
the row): the median and max |error|, then the rate factor that would centre it (the median of
published / predicted) and the errors left after it. A reading whose rows all miss by one factor
has the table's shape and leaves one per-GPU rate to explain; a reading whose errors scatter has
not. The factor is a diagnostic, not a fit rlsim takes: nothing here changes a default.

    PYTHONPATH=. python benchmarks/v7_unknowns.py           # ~10 s on 2 cores
    PYTHONPATH=. python benchmarks/v7_unknowns.py --json
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

from simulator.errors import RlsimError
from simulator.validation import megatron_core

MICRO_BATCHES = (1, 2, 4)
RECOMPUTES = ("none", "selective", "full")
GRAD_REDUCE_BYTES = (4, 2)
CHUNKS = ("rule", 1)          # V1's chunk rule (the case's reading) or vpp 1; PP > 1 rows only
LAYOUT = "workload.train_layout."
REDUCE = "workload.train_params.comm.grad_reduce_bytes_per_param"


def overrides(micro_batch: int, recompute: str, reduce_bytes: int, chunks: str | int) -> tuple[str, ...]:
    """The `rlsim validate --set` items of one reading (the case's own values left out)."""
    items = [f"{LAYOUT}micro_batch={micro_batch}", f"{LAYOUT}recompute={recompute}", f"{REDUCE}={reduce_bytes}"]
    if chunks != "rule":
        items.append(f"{LAYOUT}vpp={chunks}")
    return tuple(items)


def price(row: tuple, micro_batch: int, recompute: str, reduce_bytes: int, chunks: str | int) -> float | None:
    """The row's TFLOP/s per GPU under one reading; None where it does not fit in memory."""
    try:
        return float(megatron_core.tflops(row, overrides(micro_batch, recompute, reduce_bytes, chunks)))
    except RlsimError as exc:
        if "does not fit in device memory" not in str(exc):
            raise
        return None


def readings(row: tuple) -> list[tuple[Any, ...]]:
    """Every (micro_batch, recompute, reduce_bytes, chunks) that applies to ``row``."""
    pp = row[5]
    return list(itertools.product(MICRO_BATCHES, RECOMPUTES, GRAD_REDUCE_BYTES, CHUNKS if pp > 1 else ("rule",)))


def row_range(row: tuple) -> dict[str, Any]:
    priced = [(value, reading) for reading in readings(row)
              if (value := price(row, *reading)) is not None]
    published = row[-1]
    low, at_low = min(priced)
    high, at_high = max(priced)
    near = [reading for value, reading in priced if abs(value / published - 1) <= megatron_core.TARGET_MEDIAN]
    return {"row": row[0], "published": published, "case": float(megatron_core.tflops(row)),
            "low": low, "high": high, "at_low": at_low, "at_high": at_high,
            "inside": low <= published <= high, "readings": len(priced), "within_target": len(near)}


def largest_fitting(row: tuple, cap: int, recompute: str, reduce_bytes: int, chunks: str | int) -> float | None:
    """The row's TFLOP/s at the largest micro-batch up to ``cap`` that fits."""
    for micro_batch in sorted((m for m in MICRO_BATCHES if m <= cap), reverse=True):
        value = price(row, micro_batch, recompute, reduce_bytes, chunks)
        if value is not None:
            return value
    return None


def uniform_reading(cap: int, recompute: str, reduce_bytes: int, chunks: str | int) -> dict[str, Any]:
    values = [largest_fitting(row, cap, recompute, reduce_bytes, chunks) for row in megatron_core.ROWS]
    pairs = [(value, row[-1]) for value, row in zip(values, megatron_core.ROWS, strict=True) if value is not None]
    errors = [value / published - 1 for value, published in pairs]
    factor = statistics.median(published / value for value, published in pairs)
    left = [value * factor / published - 1 for value, published in pairs]
    return {"micro_batch": f"<= {cap}" if cap > 1 else "1", "recompute": recompute,
            "reduce_bytes": reduce_bytes, "chunks": chunks, "rows": len(pairs),
            "median": statistics.median(abs(e) for e in errors), "max": max(abs(e) for e in errors),
            "errors": errors, "factor": factor,
            "left_median": statistics.median(abs(e) for e in left), "left_max": max(abs(e) for e in left)}


def _reading(reading: tuple[Any, ...]) -> str:
    micro_batch, recompute, reduce_bytes, chunks = reading
    vpp = "" if chunks == "rule" else f", vpp {chunks}"
    return f"mb {micro_batch}, {recompute}, {'fp32' if reduce_bytes == 4 else 'bf16'} reduce{vpp}"


def print_tables(rows: list[dict[str, Any]], uniform: list[dict[str, Any]]) -> None:
    print("| row | published | case | range over the unknowns | published inside | readings within 8% | fastest at |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        span = (f"{r['low']:.0f} - {r['high']:.0f} ({r['low'] / r['published'] - 1:+.0%} .. "
                f"{r['high'] / r['published'] - 1:+.0%})")
        print(f"| {r['row']} | {r['published']:g} | {r['case']:.0f} | {span} | {'yes' if r['inside'] else 'NO'} | "
              f"{r['within_target']} of {r['readings']} | {_reading(r['at_high'])} |")
    print("\n| micro-batch | recompute | reduce | chunks | median | max | rate factor | left: median | left: max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for u in sorted(uniform, key=lambda u: u["left_max"]):
        print(f"| {u['micro_batch']} | {u['recompute']} | {'fp32' if u['reduce_bytes'] == 4 else 'bf16'} | "
              f"{u['chunks']} | {u['median']:.1%} | {u['max']:.1%} | {u['factor']:.3f} | "
              f"{u['left_median']:.1%} | {u['left_max']:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [row_range(row) for row in megatron_core.ROWS]
    uniform = [uniform_reading(*reading)
               for reading in itertools.product(MICRO_BATCHES, RECOMPUTES, GRAD_REDUCE_BYTES, CHUNKS)]
    if args.json:
        print(json.dumps({"rows": rows, "uniform": uniform}, indent=1))
        return
    print_tables(rows, uniform)
    print(f"\n{sum(r['inside'] for r in rows)} of {len(rows)} published rows inside their range; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
