"""Pipeline-parallel schedules (1F1B and interleaved 1F1B) as a small exact event model.

Each device runs its operations in the fixed order Megatron-LM issues them
(`forward_backward_pipelining_with[out]_interleaving`, arXiv 2104.04473 section 2.2); an operation
starts when the device is free and its input has arrived (the upstream operation's end plus the
point-to-point transfer). With uniform stages and free transfers this reproduces the closed forms
exactly: 1F1B makespan (m + p - 1)(t_f + t_b), interleaved bubble (p - 1) / (v m) of the ideal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from ..errors import RlsimError

FORWARD = "forward"
BACKWARD = "backward"
IDLE = "idle"


@dataclass(frozen=True)
class StageInterval:
    """One busy or idle interval of one pipeline rank (device group of a stage)."""

    stage: int
    state: str           # forward | backward | idle
    start: float
    end: float
    micro_batch: int = -1
    chunk: int = -1      # virtual stage (model chunk) on this device; -1 for idle


@dataclass(frozen=True)
class PipelineResult:
    """Times of one pipeline flush; `starts` / `ends` are flat per operation (see `ops`)."""

    pp: int
    vpp: int
    micro_batches: int
    makespan_s: float
    busy_s: tuple[float, ...]          # per stage: forward + backward time
    starts: tuple[float, ...] = field(repr=False, default=())
    ends: tuple[float, ...] = field(repr=False, default=())

    @property
    def bubble_fraction(self) -> float:
        """Idle device-time / device-time over the flush (0 for a single stage)."""
        if self.makespan_s <= 0:
            return 0.0
        return 1.0 - sum(self.busy_s) / (self.pp * self.makespan_s)

    @cached_property
    def ops(self) -> tuple[tuple[tuple[str, int, int, float, float], ...], ...]:
        """Per stage, in issue order: (kind 'F'|'B', micro_batch, chunk, start, end)."""
        out = []
        for s in range(self.pp):
            out.append(tuple((kind, i, c, self.starts[op], self.ends[op])
                             for (kind, i, c), op in zip(issue_order(self.pp, self.vpp, self.micro_batches, s),
                                                         _compiled(self.pp, self.vpp, self.micro_batches)[s][0],
                                                         strict=True)))
        return tuple(out)

    def stage_end_s(self, stage: int) -> float:
        """When the stage finishes its last operation."""
        ops = _compiled(self.pp, self.vpp, self.micro_batches)[stage][0]
        return max((self.ends[op] for op in ops), default=0.0)

    @cached_property
    def intervals(self) -> tuple[StageInterval, ...]:
        """Busy intervals and the idle gaps between them, per stage, from 0 to the makespan."""
        out: list[StageInterval] = []
        for stage, ops in enumerate(self.ops):
            clock = 0.0
            for kind, micro, chunk, start, end in ops:
                if start > clock:
                    out.append(StageInterval(stage, IDLE, clock, start))
                out.append(StageInterval(stage, FORWARD if kind == "F" else BACKWARD, start, end, micro, chunk))
                clock = end
            if self.makespan_s > clock:
                out.append(StageInterval(stage, IDLE, clock, self.makespan_s))
        return tuple(out)


@lru_cache(maxsize=32)
def issue_order(pp: int, vpp: int, micro_batches: int, stage: int) -> tuple[tuple[str, int, int], ...]:
    """(kind, micro_batch, chunk) in the order Megatron-LM issues them on one pipeline rank.

    Warm-up forwards: p - s - 1 (1F1B) or 2 (p - s - 1) + (v - 1) p (interleaved); then one
    forward, one backward; then the cool-down backwards. Forward k runs chunk (k // p) mod v of
    micro-batch (k // (p v)) p + k mod p; backwards visit the chunks in reverse."""
    p, v, m = pp, vpp, micro_batches
    total = m * v
    if v == 1:
        warmup = min(p - stage - 1, m)
    else:
        warmup = total if m == p else min((p - stage - 1) * 2 + (v - 1) * p, total)

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    order = [fwd(k) for k in range(warmup)]
    remaining = total - warmup
    for k in range(remaining):
        order.append(fwd(warmup + k))
        order.append(bwd(k))
    order.extend(bwd(k) for k in range(remaining, total))
    return tuple(order)


@lru_cache(maxsize=16)
def _compiled(pp: int, vpp: int, m: int) -> tuple[tuple[list[int], list[int], list[int]], ...]:
    """Per stage: flat ids of its operations, of their dependencies and of the transfer before them.

    Operation ids: forward (j, i) -> j m + i, backward -> V m + j m + i. Dependency -1 and transfer
    -1 index sentinels that read 'ready at 0' and 'no transfer'."""
    n_v = pp * vpp
    out = []
    for s in range(pp):
        ops, deps, xfer = [], [], []
        for kind, i, c in issue_order(pp, vpp, m, s):
            j = c * pp + s
            if kind == "F":
                ops.append(j * m + i)
                deps.append((j - 1) * m + i if j > 0 else -1)
                xfer.append((j - 1) * m + i if j > 0 else -1)
            else:
                ops.append(n_v * m + j * m + i)
                if j == n_v - 1:
                    deps.append(j * m + i)
                    xfer.append(-1)
                else:
                    deps.append(n_v * m + (j + 1) * m + i)
                    xfer.append(j * m + i)
        out.append((ops, deps, xfer))
    return tuple(out)


def simulate_pipeline(forward_s: np.ndarray, backward_s: np.ndarray, p2p_s: np.ndarray | float = 0.0, *,
                      pp: int, vpp: int = 1) -> PipelineResult:
    """Simulate one flush of a 1F1B (vpp = 1) or interleaved 1F1B (vpp > 1) pipeline.

    forward_s, backward_s: shape (pp * vpp, m) — time of virtual stage j (chunk j // pp on rank
    j % pp) for micro-batch i. p2p_s: a scalar, or shape (pp * vpp - 1, m) — transfer time across
    the boundary after virtual stage j (activations forward, gradients backward)."""
    fw = np.asarray(forward_s, dtype=float)
    bw = np.asarray(backward_s, dtype=float)
    n_virtual = pp * vpp
    if fw.ndim != 2 or fw.shape[0] != n_virtual or bw.shape != fw.shape:
        raise ValueError(f"forward/backward times must have shape ({n_virtual}, m), got {fw.shape} / {bw.shape}")
    m = fw.shape[1]
    if m < 1:
        raise RlsimError("a pipeline needs at least one micro-batch", field="micro_batch",
                         fix="give the step at least one sequence per data-parallel rank")
    if vpp > 1 and m % pp:
        raise RlsimError(f"the interleaved schedule needs micro-batches ({m}) to be a multiple of pp ({pp})",
                         field="vpp", fix="change the batch, the micro-batch size or pp, or set vpp: 1")
    n_ops = 2 * n_virtual * m
    dur = np.concatenate([fw.ravel(), bw.ravel()]).tolist()
    xfer = (np.broadcast_to(np.asarray(p2p_s, dtype=float), (n_virtual - 1, m)).ravel().tolist()
            if n_virtual > 1 else [])
    xfer.append(0.0)                 # index -1: no transfer
    end = [-1.0] * n_ops + [0.0]     # index -1: ready at time 0
    start = [0.0] * n_ops
    compiled = _compiled(pp, vpp, m)
    pointer = [0] * pp
    free = [0.0] * pp
    left = n_ops
    sweep = 0
    while left:
        progressed = 0
        for s in (range(pp) if sweep % 2 == 0 else range(pp - 1, -1, -1)):
            ops, deps, xf = compiled[s]
            k, t, n = pointer[s], free[s], len(ops)
            k0 = k
            while k < n:
                ready = end[deps[k]]
                if ready < 0:
                    break
                ready += xfer[xf[k]]
                if ready > t:
                    t = ready
                op = ops[k]
                start[op] = t
                t += dur[op]
                end[op] = t
                k += 1
            pointer[s], free[s] = k, t
            progressed += k - k0
        left -= progressed
        sweep += 1
        if not progressed:  # cannot happen for Megatron's orders; guards against a bad order
            raise RuntimeError("pipeline schedule deadlocked")
    busy_v = fw.sum(axis=1) + bw.sum(axis=1)
    busy = busy_v.reshape(vpp, pp).sum(axis=0)
    return PipelineResult(pp=pp, vpp=vpp, micro_batches=m, makespan_s=max(free), busy_s=tuple(busy.tolist()),
                          starts=tuple(start), ends=tuple(end[:n_ops]))


def forward_only_makespan(forward_s: np.ndarray, p2p_s: np.ndarray | float = 0.0) -> float:
    """Makespan of forward passes streamed through a pipeline (no backward): stage s starts
    micro-batch i when it is free and the input arrived. Max-plus scan per stage, in numpy.

    forward_s: shape (stages, m); p2p_s: scalar or shape (stages - 1, m)."""
    fw = np.asarray(forward_s, dtype=float)
    n, m = fw.shape
    arrive = np.zeros(m)
    end = np.zeros(m)
    p2p = np.broadcast_to(np.asarray(p2p_s, dtype=float), (max(n - 1, 1), m))
    for j in range(n):
        cum = np.cumsum(fw[j])
        prev = cum - fw[j]  # work done before micro-batch i on this stage
        # end_i = max(end_{i-1}, arrive_i) + f_i  ==  cum_i + max_{k<=i}(arrive_k - prev_k)
        end = cum + np.maximum.accumulate(arrive - prev)
        if j < n - 1:
            arrive = end + p2p[j]
    return float(end[-1]) if m else 0.0
