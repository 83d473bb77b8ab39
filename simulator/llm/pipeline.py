"""Pipeline-parallel schedules (1F1B and interleaved 1F1B) as a small exact event model.

Each device runs its operations in the fixed order Megatron-LM issues them
(`forward_backward_pipelining_with[out]_interleaving`, arXiv 2104.04473 section 2.2); an operation
starts when the device is free and its input has arrived (the upstream operation's end plus the
point-to-point transfer). With uniform stages and free transfers this reproduces the closed forms
exactly: 1F1B makespan (m + p - 1)(t_f + t_b), interleaved bubble (p - 1) / (v m) of the ideal.
"""
from __future__ import annotations

from collections.abc import Sequence
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
    # End of every op by op id (one trailing 0 for the 'ready at 0' sentinel) and the transfer
    # times (one trailing 0); starts are derived from them on demand.
    end_s: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(1))
    xfer_s: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(1))

    @cached_property
    def ends(self) -> tuple[float, ...]:
        return tuple(self.end_s[:-1].tolist())

    @cached_property
    def starts(self) -> tuple[float, ...]:
        """max(device free, upstream end + transfer), the arithmetic of the simulation."""
        sched = _compiled(self.pp, self.vpp, self.micro_batches)
        out = np.empty(sched.n_ops)
        out[sched.order] = np.maximum(self.end_s[sched.prev], self.end_s[sched.dep] + self.xfer_s[sched.xfer])
        return tuple(out.tolist())

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
                                                         _compiled(self.pp, self.vpp, self.micro_batches).stage_ops[s],
                                                         strict=True)))
        return tuple(out)

    def stage_end_s(self, stage: int) -> float:
        """When the stage finishes its last operation."""
        # Ends never decrease along a device's issue order: the last op ends last.
        ops = stage_op_ids(self.pp, self.vpp, self.micro_batches, stage)
        return float(self.end_s[ops[-1]]) if len(ops) else 0.0

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


@dataclass(frozen=True)
class PathOp:
    """One operation on a pipeline's critical chain, with the transfer that fed it (0 when the
    device, not the input, was the later of the two: the op waited for its own stage)."""

    stage: int
    kind: str            # forward | backward
    micro_batch: int
    chunk: int
    start: float
    end: float
    p2p_before_s: float = 0.0


def critical_chain(result: PipelineResult, stage: int | None = None) -> tuple[PathOp, ...]:
    """The chain of operations that set when ``stage`` (default: the last to finish) ends its last
    operation, in time order from 0.

    An operation starts at max(its device's previous op's end, its upstream op's end + transfer)
    (the simulation's arithmetic): the chain steps back to whichever is later (the device on a tie:
    the stage was busy), so op durations plus the transfers taken tile [0, end of the last op]."""
    pp, vpp, m = result.pp, result.vpp, result.micro_batches
    if stage is None:
        stage = max(range(pp), key=result.stage_end_s)
    ops = stage_op_ids(pp, vpp, m, stage)
    if not len(ops):
        return ()
    sched = _compiled(pp, vpp, m)
    n = sched.n_ops
    by_op = np.empty((3, n), dtype=np.int64)  # prev, dep, xfer per op id (schedule rows are in level order)
    by_op[:, sched.order] = np.stack([sched.prev, sched.dep, sched.xfer])
    prev, dep, xfer = (row.tolist() for row in by_op)
    end, xf = result.end_s.tolist(), result.xfer_s.tolist()
    n_virtual = pp * vpp
    chain: list[PathOp] = []
    op = int(ops[-1])
    while op >= 0:
        device_free, arrived = end[prev[op]], end[dep[op]] + xf[xfer[op]]
        from_input = arrived > device_free
        start = arrived if from_input else device_free
        virtual, micro = divmod(op % (n_virtual * m), m)
        chain.append(PathOp(virtual % pp, FORWARD if op < n_virtual * m else BACKWARD, micro, virtual // pp,
                            start, end[op], xf[xfer[op]] if from_input else 0.0))
        op = dep[op] if from_input else prev[op]
    return tuple(reversed(chain))


def _warmup_forwards(p: int, v: int, m: int, stage: int) -> int:
    """Forwards a rank issues before its first backward (Megatron-LM's schedules)."""
    total = m * v
    if v == 1:
        return min(p - stage - 1, m)
    return total if m == p else min((p - stage - 1) * 2 + (v - 1) * p, total)


@lru_cache(maxsize=32)
def issue_order(pp: int, vpp: int, micro_batches: int, stage: int) -> tuple[tuple[str, int, int], ...]:
    """(kind, micro_batch, chunk) in the order Megatron-LM issues them on one pipeline rank.

    Warm-up forwards: p - s - 1 (1F1B) or 2 (p - s - 1) + (v - 1) p (interleaved); then one
    forward, one backward; then the cool-down backwards. Forward k runs chunk (k // p) mod v of
    micro-batch (k // (p v)) p + k mod p; backwards visit the chunks in reverse."""
    p, v, m = pp, vpp, micro_batches
    total = m * v
    warmup = _warmup_forwards(p, v, m, stage)

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


@dataclass(frozen=True)
class _Schedule:
    """A (pp, vpp, m) schedule compiled once: every operation's predecessor on its device, its
    upstream dependency and the transfer before it, in a topological order grouped by DAG level.

    Operation ids: forward (j, i) -> j m + i, backward -> V m + j m + i. Index -1 reads the
    sentinels 'ready at 0' (ends) and 'no transfer' (transfers)."""

    stage_ops: tuple[tuple[int, ...], ...]     # per stage, op ids in issue order
    order: np.ndarray                          # op ids, level by level
    prev: np.ndarray                           # per entry of `order`: previous op on the device or -1
    dep: np.ndarray                            # upstream op or -1
    xfer: np.ndarray                           # transfer index or -1
    bounds: tuple[tuple[int, int], ...]        # [lo, hi) of each level in `order`
    rows: tuple[tuple[int, int, int, int], ...] = field(repr=False)  # (op, prev, dep, xfer) per entry

    _levels: dict[int, list[tuple[np.ndarray, ...]]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_ops(self) -> int:
        return len(self.order)

    def levels(self, k: int) -> list[tuple[np.ndarray, ...]]:
        """Per level, flat indices (op, prev, dep, xfer) of k systems laid side by side: system r's
        ends at offset r (n_ops + 1), its transfers at r (n_x + 1); -1 maps to each system's sentinel."""
        hit = self._levels.get(k)
        if hit is None:
            n1 = self.n_ops + 1
            nx1 = int(self.xfer.max(initial=-1)) + 2  # n_x + 1: the last transfer index is used
            rows = np.arange(k)[:, None]

            def flat(a: np.ndarray, size: int) -> np.ndarray:
                return ((a % size)[None, :] + rows * size).ravel()

            hit = [(flat(self.order[lo:hi], n1), flat(self.prev[lo:hi], n1), flat(self.dep[lo:hi], n1),
                    flat(self.xfer[lo:hi], nx1)) for lo, hi in self.bounds]
            self._levels[k] = hit
        return hit


@lru_cache(maxsize=8192)
def issue_arrays(pp: int, vpp: int, micro_batches: int, stage: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`issue_order` as arrays: (is_forward, micro_batch, chunk), vectorized for deep pipelines.
    Cached: do not modify the returned arrays."""
    p, v, m = pp, vpp, micro_batches
    total = m * v
    warmup = _warmup_forwards(p, v, m, stage)
    remaining = total - warmup
    k_f = np.arange(total)
    # Position of forward k and backward k in the issue order.
    pos_f = np.where(k_f < warmup, k_f, warmup + 2 * (k_f - warmup))
    k_b = np.arange(total)
    pos_b = np.where(k_b < remaining, warmup + 2 * k_b + 1, total + k_b)
    n = 2 * total
    is_fwd = np.zeros(n, dtype=bool)
    micro = np.empty(n, dtype=np.int64)
    chunk = np.empty(n, dtype=np.int64)
    is_fwd[pos_f] = True
    micro[pos_f] = (k_f // (p * v)) * p + k_f % p
    chunk[pos_f] = (k_f // p) % v
    micro[pos_b] = (k_b // (p * v)) * p + k_b % p
    chunk[pos_b] = v - 1 - (k_b // p) % v
    for a in (is_fwd, micro, chunk):
        a.setflags(write=False)
    return is_fwd, micro, chunk


@lru_cache(maxsize=8192)
def stage_op_ids(pp: int, vpp: int, m: int, stage: int) -> np.ndarray:
    """Op ids of one stage in issue order (forward (j, i) -> j m + i, backward -> V m + j m + i).
    Cached: do not modify the returned array."""
    is_f, i, c = issue_arrays(pp, vpp, m, stage)
    j = c * pp + stage
    n_v = pp * vpp
    ops = np.where(is_f, j * m + i, n_v * m + j * m + i)
    ops.setflags(write=False)
    return ops


@lru_cache(maxsize=128)
def _compiled(pp: int, vpp: int, m: int) -> _Schedule:
    n_v = pp * vpp
    n = 2 * n_v * m
    prev = np.full(n, -1, dtype=np.int64)
    dep = np.full(n, -1, dtype=np.int64)
    xfer = np.full(n, -1, dtype=np.int64)
    stage_ops = []
    for s in range(pp):
        is_f, i, c = issue_arrays(pp, vpp, m, s)
        j = c * pp + s
        ops = stage_op_ids(pp, vpp, m, s)
        last = j == n_v - 1
        dep[ops] = np.where(is_f, np.where(j > 0, (j - 1) * m + i, -1),
                            np.where(last, j * m + i, n_v * m + (j + 1) * m + i))
        xfer[ops] = np.where(is_f, np.where(j > 0, (j - 1) * m + i, -1), np.where(last, -1, j * m + i))
        prev[ops[1:]] = ops[:-1]
        stage_ops.append(ops.tolist())
    # Levels: an operation is one level above the later of its device predecessor and its
    # dependency. Walk the devices in sweeps (each advances until it meets an unfinished input).
    unset = -2
    level = [unset] * n + [-1]  # index -1: the 'ready at 0' sentinel
    dep_l, prev_l = dep.tolist(), prev.tolist()
    pointer = [0] * pp
    left, sweep = n, 0
    while left:
        progressed = 0
        for s in (range(pp) if sweep % 2 == 0 else range(pp - 1, -1, -1)):
            ops, k = stage_ops[s], pointer[s]
            k0, n_s = k, len(ops)
            while k < n_s:
                op = ops[k]
                d = level[dep_l[op]]
                if d == unset:
                    break
                p = level[prev_l[op]]
                level[op] = (d if d > p else p) + 1
                k += 1
            pointer[s] = k
            progressed += k - k0
        left -= progressed
        sweep += 1
        if not progressed:  # cannot happen for Megatron's orders; guards against a bad order
            raise RuntimeError("pipeline schedule deadlocked")
    lv = np.array(level[:n], dtype=np.int64)
    order = np.argsort(lv, kind="stable")  # by level, then op id
    lv = lv[order]
    cuts = np.flatnonzero(np.diff(lv)) + 1
    edges = [0, *cuts.tolist(), n]
    prev, dep, xfer = prev[order], dep[order], xfer[order]
    rows = tuple(zip(order.tolist(), prev.tolist(), dep.tolist(), xfer.tolist(), strict=True))
    return _Schedule(tuple(tuple(o) for o in stage_ops), order, prev, dep, xfer,
                     tuple(zip(edges[:-1], edges[1:], strict=True)), rows)


# Average operations per DAG level from which the level-by-level numpy pass beats the plain loop
# (about 5 us per numpy level vs 0.3 us per op in the loop on CPython 3.11; speed only).
_VECTOR_MIN_WIDTH = 16.0


def _ends(sched: _Schedule, dur: np.ndarray, xfer: np.ndarray) -> np.ndarray:
    """End time of every operation (index = op id; one extra trailing 0 for the -1 sentinel).

    dur: (k, n_ops) op durations; xfer: (k, n_x + 1) transfer times of k systems (last column 0),
    simulated together; returns (k, n_ops + 1). Each op ends at max(device free, upstream end +
    transfer) + duration — the same arithmetic, in the same order, whichever pass runs."""
    k = xfer.shape[0]
    n = sched.n_ops
    if k * n / max(len(sched.bounds), 1) >= _VECTOR_MIN_WIDTH:
        # Level by level: the k systems side by side in flat arrays (system r at offset r (n + 1)).
        end = np.zeros(k * (n + 1))
        d = np.concatenate([dur, np.zeros((k, 1))], axis=1).ravel()
        xf = xfer.ravel()
        for o, p, dp, x in sched.levels(k):
            end[o] = np.maximum(end[p], end[dp] + xf[x]) + d[o]
        return end.reshape(k, n + 1)
    out = np.empty((k, n + 1))
    rows = sched.rows
    r = 0
    while r + 1 < k:  # two systems per pass: one walk over the rows
        xf, xg = xfer[r].tolist(), xfer[r + 1].tolist()
        df, dg = dur[r].tolist(), dur[r + 1].tolist()
        e, g = [0.0] * (n + 1), [0.0] * (n + 1)
        for o, p, dp, x in rows:
            a = e[p]
            b = e[dp] + xf[x]
            e[o] = (a if a >= b else b) + df[o]
            a = g[p]
            b = g[dp] + xg[x]
            g[o] = (a if a >= b else b) + dg[o]
        out[r], out[r + 1] = e, g
        r += 2
    if r < k:
        xf, dl = xfer[r].tolist(), dur[r].tolist()
        e = [0.0] * (n + 1)
        for o, p, dp, x in rows:
            a = e[p]
            b = e[dp] + xf[x]
            e[o] = (a if a >= b else b) + dl[o]
        out[r] = e
    return out


# Uniform micro-batches (every micro-batch with the same op and transfer times, e.g. equal-length
# sequences) reach a periodic steady state: each block of pp micro-batches then ends exactly one
# period later than the block before (max-plus linearity). The long pipeline is then built from a
# short one instead of simulated op by op. The short pipeline must hold PERIODIC_SETTLE_BLOCKS
# steady blocks on every stage, and the period is checked against two longer exact simulations;
# anything else (or too short a pipeline to gain) takes the exact op-by-op path. Speed only.
PERIODIC_SETTLE_BLOCKS = 2
PERIODIC_REL_TOL = 1e-9        # agreement asked of the check, relative to the makespan
PERIODIC_MIN_GAIN = 2.0        # use it only when it simulates at most half the operations
# Block lengths tried, in multiples of pp micro-batches: the steady state can repeat every second
# block (cyclicity 2 in max-plus terms) when stage times interlock unevenly.
PERIODIC_BLOCK_PP_MULTIPLES = (1, 2)


def _uniform(a: np.ndarray) -> bool:
    return bool(np.all(a == a[..., :1]))


def _short_micro_batches(pp: int, vpp: int, m: int, block: int) -> int:
    """Smallest micro-batch count congruent to m mod ``block`` (a multiple of pp) whose every stage
    has PERIODIC_SETTLE_BLOCKS steady blocks (2 block vpp issue slots each) after its warm-up."""
    short = m % block
    while short < pp or any(short * vpp - _warmup_forwards(pp, vpp, short, s) < PERIODIC_SETTLE_BLOCKS * block * vpp
                            for s in range(pp)):
        short += block
    return short


@lru_cache(maxsize=256)
def _periodic_map(pp: int, vpp: int, m: int, short: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """For every op id of the m-micro-batch schedule: the op id of the short schedule it copies and
    how many periods later it ends. Per stage, issue slots before the short schedule's cool-down
    are the same ops; each inserted block of ``block`` micro-batches (2 block vpp slots) repeats the
    short schedule's last steady block one period later per block; the cool-down comes `blocks` later."""
    blocks = (m - short) // block
    width = 2 * block * vpp
    src = np.empty(2 * pp * vpp * m + 1, dtype=np.int64)
    shift = np.zeros(2 * pp * vpp * m + 1)
    src[-1] = -1  # the 'ready at 0' sentinel maps to itself
    for s in range(pp):
        ops_m, ops_s = stage_op_ids(pp, vpp, m, s), stage_op_ids(pp, vpp, short, s)
        warmup = _warmup_forwards(pp, vpp, short, s)
        cut = warmup + 2 * (short * vpp - warmup)  # the short schedule's first cool-down slot
        t = np.arange(len(ops_m))
        inserted = (t >= cut) & (t < cut + blocks * width)
        after = t >= cut + blocks * width
        slot = np.where(inserted, cut - width + (t - cut) % width, np.where(after, t - blocks * width, t))
        src[ops_m] = ops_s[slot]
        shift[ops_m] = np.where(inserted, (t - cut) // width + 1, np.where(after, blocks, 0))
    src.setflags(write=False)
    shift.setflags(write=False)
    return src, shift


def _simulate_short(fw: np.ndarray, bw: np.ndarray, xfer_row: np.ndarray, pp: int, vpp: int,
                    m: int, short: int) -> np.ndarray:
    """Exact ends of the first `short` micro-batches of uniform pipelines (k systems)."""
    k = xfer_row.shape[0]
    n_virtual = pp * vpp
    f, b = fw[:, :, :short], bw[:, :, :short]
    dur = np.concatenate([f.reshape(f.shape[0], -1), b.reshape(b.shape[0], -1)], axis=1)
    xfer = np.zeros((k, (n_virtual - 1) * short + 1))
    xfer[:, :-1] = xfer_row[:, :-1].reshape(k, max(n_virtual - 1, 0), m)[:, :, :short].reshape(k, -1)
    return _ends(_compiled(pp, vpp, short), np.broadcast_to(dur, (k, dur.shape[1])), xfer)


def _periodic_ends(fw: np.ndarray, bw: np.ndarray, xfer: np.ndarray, pp: int, vpp: int) -> np.ndarray | None:
    """Ends of uniform pipelines built from their periodic steady state, or None (use the exact path)."""
    m = fw.shape[2]
    if pp < 2 or not (_uniform(fw) and _uniform(bw)):
        return None
    k, n_virtual = xfer.shape[0], pp * vpp
    if n_virtual > 1 and not _uniform(xfer[:, :-1].reshape(k, n_virtual - 1, m)):
        return None
    for multiple in PERIODIC_BLOCK_PP_MULTIPLES:
        block = multiple * pp
        short = _short_micro_batches(pp, vpp, m, block)
        if 3 * short + 3 * block > m / PERIODIC_MIN_GAIN:
            return None
        e_short, e_next, e_check = (_simulate_short(fw, bw, xfer, pp, vpp, m, short + j * block) for j in range(3))
        last = int(stage_op_ids(pp, vpp, short, 0)[-1])
        last_next = int(stage_op_ids(pp, vpp, short + block, 0)[-1])
        period = (e_next[:, last_next] - e_short[:, last])[:, None]
        # the period must predict both longer pipelines
        if all(np.allclose(e_short[:, src] + shift * period, exact, rtol=0.0,
                           atol=PERIODIC_REL_TOL * float(exact.max()))
               for src, shift, exact in (_periodic_map(pp, vpp, short + j * block, short, block) + (e,)
                                         for j, e in ((1, e_next), (2, e_check)))):
            src, shift = _periodic_map(pp, vpp, m, short, block)
            return e_short[:, src] + shift * period
    return None


def simulate_pipelines(forward_s: np.ndarray, backward_s: np.ndarray, p2p_s: Sequence[np.ndarray | float], *,
                       pp: int, vpp: int = 1, layout_field: str | None = None) -> list[PipelineResult]:
    """`simulate_pipeline` for several systems in one pass: one per entry of `p2p_s` (e.g. with and
    without transfers). forward_s / backward_s: (pp * vpp, m) shared by all systems, or
    (len(p2p_s), pp * vpp, m), one per system (e.g. the data-parallel replicas of a ragged batch).
    `layout_field`: the dotted key of the layout the errors name their fields under (e.g.
    ``workload.train_layout`` gives ``workload.train_layout.vpp``); None names the bare field."""
    fw = np.asarray(forward_s, dtype=float)
    bw = np.asarray(backward_s, dtype=float)
    n_virtual = pp * vpp
    k = len(p2p_s)
    if fw.ndim == 2:
        fw, bw = fw[None], bw[None] if bw.ndim == 2 else bw
    if fw.ndim != 3 or fw.shape[1] != n_virtual or fw.shape[0] not in (1, k) or bw.shape != fw.shape:
        raise ValueError(f"forward/backward times must have shape ({n_virtual}, m) or ({k}, {n_virtual}, m), "
                         f"got {np.shape(forward_s)} / {np.shape(backward_s)}")
    m = fw.shape[2]
    if m < 1:
        raise RlsimError("a pipeline needs at least one micro-batch", field=_under(layout_field, "micro_batch"),
                         fix="give the step at least one sequence per data-parallel rank")
    check_interleaved_micro_batches(m, pp, vpp, layout_field)
    n_x = (n_virtual - 1) * m
    xfer = np.zeros((k, n_x + 1))  # last column: index -1, no transfer
    for r, p in enumerate(p2p_s):
        if n_virtual > 1:
            xfer[r, :n_x] = np.broadcast_to(np.asarray(p, dtype=float), (n_virtual - 1, m)).ravel()
    ends = _periodic_ends(fw, bw, xfer, pp, vpp)
    if ends is None:
        dur = np.concatenate([fw.reshape(fw.shape[0], -1), bw.reshape(bw.shape[0], -1)], axis=1)
        ends = _ends(_compiled(pp, vpp, m), np.broadcast_to(dur, (k, dur.shape[1])), xfer)
    busy_v = fw.sum(axis=2) + bw.sum(axis=2)
    busy_all = busy_v.reshape(-1, vpp, pp).sum(axis=1).tolist()
    last = [int(ops[-1]) for ops in (stage_op_ids(pp, vpp, m, s) for s in range(pp)) if len(ops)]
    out = []
    for r, (end, xf) in enumerate(zip(ends, xfer, strict=True)):
        busy = tuple(busy_all[r if len(busy_all) > 1 else 0])
        out.append(PipelineResult(pp=pp, vpp=vpp, micro_batches=m, makespan_s=float(end[last].max()), busy_s=busy,
                                  end_s=end, xfer_s=xf))
    return out


def check_interleaved_micro_batches(m: int, pp: int, vpp: int, layout_field: str | None = None) -> None:
    """RlsimError where an interleaved pipeline (vpp > 1) is given ``m`` micro-batches, not a multiple of
    ``pp``, training or forward-only alike: Megatron-Core runs both through
    forward_backward_pipelining_with_interleaving, which raises "number of microbatches (m) is not
    divisible by pipeline-model-parallel-size (pp) when using interleaved schedule" (megatron-core 0.8.0
    and 0.9.0 pipeline_parallel/schedules.py, before its forward_only branch). 0.10.0 keeps the rule at
    its default microbatch_group_size_per_vp_stage = pp (model_parallel_config.py): a last group of
    0 < m mod N < pp micro-batches raises "The remainder of M ... should be 0, or larger than or equal to
    the pipeline-parallel size"; a larger group size, which relaxes it, runs another issue order than
    the one simulated here. On areal-archon the refusal is rlsim's, not the trainer's: torch's
    ScheduleInterleaved1F1B runs m micro-batches in max(1, m // pp) rounds where they divide m (torch 2.13
    distributed/pipelining/schedules.py __init__: "requires the number of microbatches to be a multiple of
    the number of rounds"), rounds of m // rounds, not pp (_get_warmup_ops, forward_stage_index): another
    issue order than this Megatron one, and AReaL's archon engine splits a batch into a multiple of pp
    anyway (areal 1.0.4 archon_engine.py _prepare_mb_list: n_mbs_divisor=pp), which a fixed micro_batch
    does not model and a token budget does (training._token_budget_micro_batches rounds up to pp).
    `layout_field`: as `simulate_pipelines`'."""
    if vpp > 1 and m % pp:
        raise RlsimError(f"the interleaved schedule (vpp {vpp}) rlsim prices, Megatron-Core's, needs each data-parallel "
                         f"replica's micro-batches ({m}) to be a multiple of pp ({pp}): Megatron-Core refuses other "
                         f"counts (\"number of microbatches ({m}) is not divisible by pipeline-model-parallel-size "
                         f"({pp}) when using interleaved schedule\", pipeline_parallel/schedules.py); torch's "
                         "Interleaved1F1B (areal-archon) runs them in another order, not priced", field=_under(layout_field, "vpp"),
                         fix=f"a batch and micro-batch size that give each replica a multiple of {pp} micro-batches "
                             "(its samples / micro_batch), a token budget (max_tokens_per_micro_batch: its count "
                             "rounds up to a multiple of pp, as archon's actor.mb_spec.max_tokens_per_mb), another "
                             "pp, or vpp: 1")


def _under(prefix: str | None, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def simulate_pipeline(forward_s: np.ndarray, backward_s: np.ndarray, p2p_s: np.ndarray | float = 0.0, *,
                      pp: int, vpp: int = 1, layout_field: str | None = None) -> PipelineResult:
    """Simulate one flush of a 1F1B (vpp = 1) or interleaved 1F1B (vpp > 1) pipeline.

    forward_s, backward_s: shape (pp * vpp, m) — time of virtual stage j (chunk j // pp on rank
    j % pp) for micro-batch i. p2p_s: a scalar, or shape (pp * vpp - 1, m) — transfer time across
    the boundary after virtual stage j (activations forward, gradients backward). `layout_field`:
    as `simulate_pipelines`."""
    return simulate_pipelines(forward_s, backward_s, [p2p_s], pp=pp, vpp=vpp, layout_field=layout_field)[0]


def forward_only_makespans(forward_s: np.ndarray, p2p_s: np.ndarray | float = 0.0) -> np.ndarray:
    """``forward_only_makespan`` of several pipelines of one shape in one pass (the data-parallel
    replicas of a batch): forward_s (replicas, stages, m), p2p_s scalar or (replicas, stages - 1, m).
    Each row is scanned as the one-pipeline form scans it (accumulations run along the micro-batch
    axis, one row at a time), so every makespan is the same float."""
    fw = np.asarray(forward_s, dtype=float)
    k, n, m = fw.shape
    if not m:
        return np.zeros(k)
    arrive = np.zeros((k, m))
    end = np.zeros((k, m))
    p2p = np.broadcast_to(np.asarray(p2p_s, dtype=float), (k, max(n - 1, 1), m))
    for j in range(n):
        cum = np.cumsum(fw[:, j], axis=1)
        prev = cum - fw[:, j]
        end = cum + np.maximum.accumulate(arrive - prev, axis=1)
        if j < n - 1:
            arrive = end + p2p[:, j]
    return end[:, -1].copy()


@lru_cache(maxsize=64)
def _forward_only_order(pp: int, vpp: int, m: int) -> tuple[tuple[int, int], ...]:
    """(virtual stage, micro-batch) of every forward of an interleaved forward-only pass, in one
    order that keeps each rank's issue order and puts every forward after its input's. A rank issues
    them as Megatron's interleaved schedule does with forward_only (all forwards are warm-up ones:
    forward k runs chunk (k // p) mod v of micro-batch (k // (p v)) p + k mod p); a last group of
    fewer than p micro-batches skips the missing ones."""
    per_rank = []
    for stage in range(pp):
        ops = []
        for k in range(-(-m // pp) * pp * vpp):
            micro_batch = (k // (pp * vpp)) * pp + k % pp
            if micro_batch < m:
                ops.append((((k // pp) % vpp) * pp + stage, micro_batch))
        per_rank.append(ops)
    done: set[tuple[int, int]] = set()
    cursor, order = [0] * pp, []
    while len(order) < pp * vpp * m:
        before = len(order)
        for stage, ops in enumerate(per_rank):   # each rank runs on until it waits on an input
            while cursor[stage] < len(ops) and (ops[cursor[stage]][0] == 0
                                                or (ops[cursor[stage]][0] - 1, ops[cursor[stage]][1]) in done):
                done.add(ops[cursor[stage]])
                order.append(ops[cursor[stage]])
                cursor[stage] += 1
        if len(order) == before:   # every rank waits on another: not an issue order Megatron could run
            raise AssertionError(f"interleaved forward order deadlocks at pp {pp}, vpp {vpp}, {m} micro-batches")
    return tuple(order)


def interleaved_forward_makespans(forward_s: np.ndarray, p2p_s: np.ndarray | float, pp: int) -> np.ndarray:
    """Forward-only makespans of several pipelines whose pp x v virtual stages (rows) share pp ranks:
    row j runs on rank j mod pp (Megatron's interleaved layout), each rank in its issue order
    (_forward_only_order), a forward starting when its rank is free and its input arrived.
    forward_s (replicas, stages, m); p2p_s scalar or (replicas, stages - 1, m). With v = 1 it is
    forward_only_makespans; uniform chunks of t, free transfers, m a multiple of p: m v t + (p - 1) t."""
    fw = np.asarray(forward_s, dtype=float)
    k, n, m = fw.shape
    if not m:
        return np.zeros(k)
    p2p = np.broadcast_to(np.asarray(p2p_s, dtype=float), (k, max(n - 1, 1), m))
    end = np.zeros((k, n, m))
    free = np.zeros((k, pp))
    for stage, micro_batch in _forward_only_order(pp, n // pp, m):
        rank = stage % pp
        start = free[:, rank] if stage == 0 else np.maximum(free[:, rank], end[:, stage - 1, micro_batch]
                                                            + p2p[:, stage - 1, micro_batch])
        end[:, stage, micro_batch] = free[:, rank] = start + fw[:, stage, micro_batch]
    return free.max(axis=1)


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
