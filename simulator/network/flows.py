"""Transfers as flows on graph paths, sharing links max-min fairly, inside a simpy environment.

Whenever a flow starts or ends, every active flow is advanced to `now` at its old rate, rates are
recomputed by progressive filling (the max-min fair allocation: raise all rates together, freeze
the flows of a link when it fills, repeat), and one wake-up is scheduled at the next completion.
A stale wake-up (the flow set changed since) is ignored by a generation number, so the cost per
event is one recompute, not one per flow.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import simpy

from ..errors import RlsimError
from ..hardware.topology import Edge, Topology
from .collectives import CollectiveModel

# A flow whose remaining time at its rate is below this is complete (float round-off of rate x dt).
_DONE_TOLERANCE_S = 1e-12


@dataclass
class _Flow:
    fid: int
    edges: list[Edge]
    size: float
    remaining: float
    done: simpy.Event
    rate: float = 0.0
    delivered: float = 0.0
    started_at: float = 0.0


@dataclass
class FlowRecord:
    """A finished flow, for accounting and tests."""

    fid: int
    src: str
    dst: str
    size: float
    delivered: float
    start_s: float
    end_s: float


@dataclass
class FlowStats:
    max_link_utilization: float = 0.0  # the largest (sum of rates / capacity) seen on any link
    recomputes: int = 0
    finished: list[FlowRecord] = field(default_factory=list)


class FlowNetwork:
    """Contention-aware network over a Topology. `transfer` and `collective` return simpy events."""

    def __init__(self, env: simpy.Environment, topology: Topology, model: CollectiveModel | None = None,
                 keep_records: bool = False) -> None:
        self.env = env
        self.topology = topology
        self.model = model or CollectiveModel(topology)
        self.stats = FlowStats()
        self._keep_records = keep_records
        self._flows: dict[int, _Flow] = {}
        self._next_id = 0  # per network, so two runs number flows alike
        self._last_t = float(env.now)
        self._generation = 0

    # ---- public ----------------------------------------------------------------------------
    def transfer(self, src: int | str, dst: int | str, nbytes: float) -> simpy.Process:
        """Move nbytes from src to dst (ranks or graph node ids): path latency, then a fair share."""
        if not nbytes >= 0:
            raise RlsimError(f"transfer size must be >= 0, got {nbytes!r}", field="bytes")
        edges = self.topology.path(src, dst)
        latency = sum(self.topology.edge(e)["latency_s"] for e in edges)
        return self.env.process(self._transfer(edges, float(nbytes), latency))

    def collective(self, op: str, ranks: Sequence[int], nbytes: float, algorithm: str | None = None) -> simpy.Process:
        """Run the collective's phases as concurrent flows; the process value is its duration."""
        plan = self.model.plan(op, ranks, nbytes, algorithm)
        return self.env.process(self._collective(plan))

    def active_flows(self) -> int:
        return len(self._flows)

    def link_rates(self) -> dict[Edge, float]:
        """Current sum of flow rates per directed edge (bytes/s)."""
        out: dict[Edge, float] = {}
        for f in self._flows.values():
            for e in f.edges:
                out[e] = out.get(e, 0.0) + f.rate
        return out

    # ---- processes -------------------------------------------------------------------------
    def _transfer(self, edges: list[Edge], nbytes: float, latency_s: float):
        start = self.env.now
        if latency_s > 0:
            yield self.env.timeout(latency_s)
        if edges and nbytes > 0:
            yield self._start([(edges, nbytes)])[0]
        return self.env.now - start

    def _collective(self, plan):
        start = self.env.now
        if plan.launch_s > 0:
            yield self.env.timeout(plan.launch_s)
        path = self.topology.path
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield self.env.timeout(phase.latency_s)
            if phase.bw_time_s is not None:  # analytic phase (very large all-to-all): no per-pair flows
                yield self.env.timeout(phase.bw_time_s)
            elif phase.flows:
                events = self._start([(path(a, b), nbytes) for a, b, nbytes in phase.flows if nbytes > 0])
                yield self.env.all_of(events)
        return self.env.now - start

    # ---- flow bookkeeping ------------------------------------------------------------------
    def _start(self, items: list[tuple[list[Edge], float]]) -> list[simpy.Event]:
        self._advance()
        events = []
        for edges, nbytes in items:
            done = self.env.event()
            events.append(done)
            if not edges or nbytes <= 0:
                done.succeed()
                continue
            fid = self._next_id
            self._next_id += 1
            self._flows[fid] = _Flow(fid, list(edges), nbytes, nbytes, done, started_at=float(self.env.now))
        self._reschedule()
        return events

    def _advance(self) -> None:
        now = float(self.env.now)
        dt = now - self._last_t
        if dt > 0:
            for f in self._flows.values():
                moved = min(f.remaining, f.rate * dt)
                f.remaining -= moved
                f.delivered += moved
        self._last_t = now

    def _wake(self, generation: int) -> None:
        if generation != self._generation:
            return  # the flow set changed after this wake-up was scheduled
        self._advance()
        finished = [f for f in self._flows.values()
                    if f.remaining <= 0 or (f.rate > 0 and f.remaining / f.rate <= _DONE_TOLERANCE_S)]
        for f in finished:
            f.delivered += f.remaining  # round-off below the tolerance
            f.remaining = 0.0
            del self._flows[f.fid]
            if self._keep_records:
                src, dst = f.edges[0][0], f.edges[-1][1]
                self.stats.finished.append(FlowRecord(f.fid, src, dst, f.size, f.delivered, f.started_at,
                                                      float(self.env.now)))
            f.done.succeed()
        self._reschedule()

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._flows:
            return
        self._recompute_rates()
        next_s = min(f.remaining / f.rate for f in self._flows.values())
        gen = self._generation
        wake = self.env.timeout(max(0.0, next_s))
        wake.callbacks.append(lambda _event: self._wake(gen))

    def _recompute_rates(self) -> None:
        """Max-min fair rates by progressive filling over link capacities (bw x efficiency)."""
        self.stats.recomputes += 1
        cap = self.topology.capacity_Bps
        residual: dict[Edge, float] = {}
        on_edge: dict[Edge, list[int]] = {}
        for fid, f in self._flows.items():
            for e in f.edges:
                if e not in residual:
                    residual[e] = cap(e)
                    on_edge[e] = []
                on_edge[e].append(fid)
        unfrozen = {e: len(v) for e, v in on_edge.items()}
        frozen: set[int] = set()
        while len(frozen) < len(self._flows):
            share = min(residual[e] / n for e, n in unfrozen.items() if n > 0)
            tight = [e for e, n in unfrozen.items() if n > 0 and residual[e] / n <= share * (1 + 1e-12)]
            for e in tight:
                for fid in on_edge[e]:
                    if fid in frozen:
                        continue
                    frozen.add(fid)
                    f = self._flows[fid]
                    f.rate = share
                    for fe in f.edges:
                        residual[fe] -= share
                        unfrozen[fe] -= 1
        util = max((sum(self._flows[i].rate for i in fids) / cap(e) for e, fids in on_edge.items()), default=0.0)
        self.stats.max_link_utilization = max(self.stats.max_link_utilization, util)
