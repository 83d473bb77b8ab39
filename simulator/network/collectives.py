"""Collectives over any device group: algorithm by group shape, cost on an idle network.

Every algorithm is a list of phases; a phase is a set of concurrent point-to-point flows
(src rank, dst rank, bytes) plus its latency. On an idle network a phase takes
    latency + max over links (bytes routed over the link / (bw x efficiency)),
the time of the most loaded link when every flow is routed on its graph path, so contention inside
the collective (two ring edges on one NIC, a shared leaf uplink) is counted. `FlowNetwork` runs the
same phases as simpy flows so that other traffic slows them. nccl-tests conventions throughout
(doc/PERFORMANCE.md): nbytes is the full buffer S, algbw = S / t, busbw = algbw x factor.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RlsimError, counted
from ..hardware.collective_params import CollectiveParams
from ..hardware.fabric import FlowTable
from ..hardware.topology import Topology
from .ops import ALGORITHMS, OPS

Flow = tuple[int, int, float]  # (src rank, dst rank, bytes)
# The size CollectiveModel.line_time_s plans each algorithm at: any positive size gives the same line
# (phase bytes are proportional to the buffer); 1 MiB keeps the rounding of bytes / bandwidth small.
LINE_REFERENCE_BYTES = float(2 ** 20)
# The TP sizes vLLM's and SGLang's custom all-reduce run on (CustomAllreduce._SUPPORTED_WORLD_SIZES in
# vllm 0.8.5 / 0.11.0 and sglang 0.4.6 - 0.5.6 custom_all_reduce.py).
CUSTOM_ALL_REDUCE_GROUP_SIZES = (2, 4, 6, 8)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw: all-reduce 2(n-1)/n; gather, scatter, all-to-all (n-1)/n; else 1."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Phase:
    """Concurrent flows plus a latency; `bw_time_s` is set instead of flows for analytic phases.
    The algorithms give their flows as a FlowTable (arrays; it iterates as (src, dst, bytes) tuples)."""

    flows: FlowTable | tuple[Flow, ...]
    latency_s: float
    bw_time_s: float | None = None


@dataclass(frozen=True)
class CollectivePlan:
    op: str
    algorithm: str
    devices: int
    bytes: float
    launch_s: float
    phases: tuple[Phase, ...]


@dataclass(frozen=True)
class CollectiveCost:
    op: str
    algorithm: str
    devices: int
    bytes: float
    time_s: float
    algbw_Bps: float
    busbw_Bps: float

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "devices": self.devices, "bytes": self.bytes, "algorithm": self.algorithm,
                "time_s": self.time_s, "algbw_Bps": self.algbw_Bps, "busbw_Bps": self.busbw_Bps}


class CollectiveModel:
    """Chooses an algorithm per (op, group, size) by least idle-network time, and caches costs."""

    def __init__(self, topology: Topology, params: CollectiveParams | None = None) -> None:
        self.topology = topology
        self.params = params or CollectiveParams.from_mapping(topology.collectives, topology.source)
        self._cache: dict[tuple, CollectiveCost] = {}  # by group signature
        self._exact: dict[tuple, CollectiveCost] = {}  # by the exact rank tuple
        self._plans: dict[tuple, tuple[CollectivePlan, float]] = {}   # with its time
        self._signatures: dict[tuple, tuple] = {}  # (op, ranks) -> group signature
        self._by_group: dict[tuple[int, ...], tuple] = {}  # normalized group -> its signature
        # Results of the cost models built on this network model (llm/training.py), keyed by value:
        # they depend on the topology and the parameters this object fixes, so they live and die with it.
        self.memo: dict[str, dict[tuple, Any]] = {}
        self._lines: dict[tuple, tuple[tuple[float, float], ...]] = {}  # (op, signature) -> per algorithm

    # ---- public ----------------------------------------------------------------------------
    def cost(self, op: str, ranks: Sequence[int], nbytes: float, algorithm: str | None = None) -> CollectiveCost:
        # Cheap key first: no per-rank work on a hit. A range hashes in O(1), so large contiguous groups
        # passed as ranges stay cheap even at thousands of ranks.
        exact = (op, ranks if isinstance(ranks, (range, tuple)) else tuple(ranks), nbytes, algorithm)
        hit = self._exact.get(exact)
        if hit is not None:
            return hit
        # The signature of the group in the order the algorithms use it (sorted; p2p and the
        # broadcast root keep their place), so that equal signatures mean equal plans. It does not
        # depend on the size: kept per (op, group), so a new size skips the per-rank work.
        signature = self._signatures.get(exact[:2])
        if signature is None:
            signature = self._signature(exact[:2], op, ranks)
        key = (op, signature, nbytes, algorithm)
        hit = self._cache.get(key)
        if hit is not None:
            self._exact[exact] = hit
            return hit
        plan, time_s = self._planned(op, ranks, nbytes, algorithm)
        n = plan.devices
        algbw = plan.bytes / time_s if time_s > 0 else 0.0
        result = CollectiveCost(op, plan.algorithm, n, plan.bytes, time_s, algbw, algbw * bus_factor(op, n))
        self._cache[key] = self._exact[exact] = result
        return result

    def signature(self, op: str, ranks: Sequence[int]) -> tuple:
        """The group signature ``cost`` keys ``op`` on ``ranks`` by: equal signatures give equal
        costs at every size (the ranks are checked as ``cost`` checks them)."""
        key = (op, ranks if isinstance(ranks, (range, tuple)) else tuple(ranks))
        hit = self._signatures.get(key)
        return hit if hit is not None else self._signature(key, op, ranks)

    def _signature(self, key: tuple, op: str, ranks: Sequence[int]) -> tuple:
        """The signature of (op, ranks), kept under ``key``: the ops that normalize a group alike
        (all but p2p and broadcast sort it) share one signature per normalized group."""
        group = tuple(self._normalize(op, ranks))
        signature = self._by_group.get(group)
        if signature is None:
            signature = self._by_group[group] = self.topology.group_signature(group)
        self._signatures[key] = signature
        return signature

    def line_time_s(self, op: str, ranks: Sequence[int], nbytes: float) -> float:
        """``cost(op, ranks, nbytes).time_s`` (the cheapest algorithm) from ``lines(op, ranks)``, for
        callers that ask many sizes (the rollout engine: one per batch size); equal to cost() up to
        rounding."""
        if isinstance(nbytes, bool) or not nbytes >= 0 or math.isinf(nbytes) or op not in OPS:
            return self.cost(op, ranks, nbytes).time_s          # cost() raises the error
        return line_time_s(self.lines(op, ranks), nbytes)

    def lines(self, op: str, ranks: Sequence[int]) -> tuple[tuple[float, float], ...]:
        """(launch + latencies, seconds per byte) of each candidate algorithm, in plan()'s order
        (empty for a single device). Every algorithm's phases carry bytes proportional to the buffer
        and a fixed latency, so its time is a line in the size: planned once per (op, group
        signature) at LINE_REFERENCE_BYTES, then evaluated at any size (``line_time_s``)."""
        key = (op, ranks if isinstance(ranks, (range, tuple)) else tuple(ranks))
        signature = self._signatures.get(key)
        if signature is None:
            signature = self._signature(key, op, ranks)
        hit = self._lines.get((op, signature))
        if hit is None:
            hit = self._lines[(op, signature)] = self._algorithm_lines(op, ranks)
        return hit

    def _algorithm_lines(self, op: str, ranks: Sequence[int]) -> tuple[tuple[float, float], ...]:
        """(launch + latencies, seconds per byte) of each candidate algorithm, in plan()'s order."""
        group = self._normalize(op, ranks)
        if len(group) == 1:
            return ()
        launch = self._launch_s(group)
        out = []
        for build in self._candidates(op, group, LINE_REFERENCE_BYTES).values():
            phases = build()
            fixed = launch + sum(p.latency_s for p in phases)
            out.append((fixed, sum(self.phase_bw_time_s(p) for p in phases) / LINE_REFERENCE_BYTES))
        return tuple(out)

    def plan(self, op: str, ranks: Sequence[int], nbytes: float, algorithm: str | None = None) -> CollectivePlan:
        """The cheapest algorithm's phases (or the named algorithm's)."""
        return self._planned(op, ranks, nbytes, algorithm)[0]

    def _planned(self, op: str, ranks: Sequence[int], nbytes: float,
                 algorithm: str | None = None) -> tuple[CollectivePlan, float]:
        """plan() and its plan_time_s (the time the choice already computed), kept per group and size."""
        if op not in OPS:
            raise RlsimError(f"unknown collective {op!r}", field="op", fix=f"use one of: {', '.join(OPS)}")
        if isinstance(nbytes, bool) or not nbytes >= 0 or math.isinf(nbytes):
            raise RlsimError(f"bytes must be a finite number >= 0, got {nbytes!r}", field="bytes")
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise RlsimError(f"unknown algorithm {algorithm!r}", field="algorithm",
                             fix=f"use one of: {', '.join(ALGORITHMS)}")
        group = self._normalize(op, ranks)
        nbytes = float(nbytes)
        key = (op, tuple(group), nbytes, algorithm)
        hit = self._plans.get(key)
        if hit is not None:
            return hit
        launch = self._launch_s(group)
        if len(group) == 1 or nbytes == 0:
            local = CollectivePlan(op, "local", len(group), nbytes, 0.0, ())
            result = (local, self.plan_time_s(local))
        else:
            candidates = self._candidates(op, group, nbytes)
            if algorithm is not None:
                if algorithm not in candidates:
                    raise RlsimError(f"algorithm {algorithm!r} does not apply to {op} on this group",
                                     field="algorithm", fix=f"use one of: {', '.join(candidates)}")
                candidates = {algorithm: candidates[algorithm]}
            best = None
            for name, build in candidates.items():  # dict order breaks ties deterministically
                plan = CollectivePlan(op, name, len(group), nbytes, launch, tuple(build()))
                t = self.plan_time_s(plan)
                if best is None or t < best[1]:
                    best = (plan, t)
            assert best is not None
            result = best
        self._plans[key] = result
        return result

    def plan_time_s(self, plan: CollectivePlan) -> float:
        return plan.launch_s + sum(p.latency_s + self.phase_bw_time_s(p) for p in plan.phases)

    def phase_bw_time_s(self, phase: Phase) -> float:
        if phase.bw_time_s is not None:
            return phase.bw_time_s
        return self.topology.max_link_time_s(phase.flows)

    # ---- group handling --------------------------------------------------------------------
    def _normalize(self, op: str, ranks: Sequence[int]) -> list[int]:
        group = list(ranks)
        if not group:
            raise RlsimError("empty device group", field="group", fix="give at least one device")
        self.topology.check_ranks(group)  # range check with a clear error
        if op == "p2p":
            if len(group) != 2:
                raise RlsimError(f"p2p needs exactly 2 devices (source, destination), got {len(group)}",
                                 field="group", fix="e.g. --group 0,8")
            return group if group[0] != group[1] else group[:1]
        if len(set(group)) != len(group):
            raise RlsimError("a device appears twice in the group", field="group", fix="list each device once")
        if op == "broadcast":  # the first rank is the root
            return group[:1] + sorted(group[1:])
        return sorted(group)

    def _launch_s(self, group: Sequence[int]) -> float:
        if self.params.launch_overhead_s is not None:
            return self.params.launch_overhead_s
        return max(spec.launch_overhead_s for spec in self.topology.distinct_specs(group))

    def _step_latency_s(self, pairs: Iterable[tuple[int, int]] | FlowTable) -> float:
        """One algorithm step: the slowest hop's wire latency plus the per-step software overhead."""
        return self.topology.max_path_latency_s(pairs) + self.params.step_overhead_s

    # ---- rings -----------------------------------------------------------------------------
    def _rings(self, group: list[int]) -> list[list[int]]:
        """Channels: one ring inside a domain; across domains, one ring per rotation so each channel
        leaves every domain through a different device (and NIC): as many channels as the smallest
        domain has members (a domain of 4 beside one of 8 lends 4 NICs; before, unequal domains got
        one ring, one NIC)."""
        by_domain = self.topology.group_by_domain(group)
        sizes = {len(v) for v in by_domain.values()}
        if len(by_domain) == 1 or min(sizes) == 1:
            return [group]
        if len(sizes) == 1:
            k = sizes.pop()
            members = np.array(list(by_domain.values()))   # domains x k
            channels = min(k, self.params.max_channels)
            rotations = (np.arange(channels)[:, None] + np.arange(k)) % k   # ring c: member (c + i) % k
            rings = members[:, rotations]                                  # domains x channels x k
            # every other domain walked backwards from member c - 1 to c, so a ring leaves a domain and
            # enters the next through the same position: one rail, as NCCL keeps a rail-optimized
            # fabric's rings (before: every hop crossed rails through the spine, slowed by its
            # oversubscription; found by a network audit); each NIC still sends one channel, receives one
            rings[1::2] = rings[1::2, :, ::-1]
            if len(rings) % 2 and k > 2:
                # an odd domain count: the last domain, walked forwards like the first, would leave through
                # member c - 1 and the wrap-around enter the first through member c, across rails (found
                # by an audit). The domain before it now leaves through c + 1 (its last two members swapped:
                # ..., c + 2, c, c + 1; one hop two apart, inside the scale-up domain) and the last walks
                # from c + 1 round to c; each NIC still sends one channel and receives one. Two members a
                # domain cannot close an odd cycle on one rail: its entry and exit alternate between them.
                rings[-2, :, -2:] = rings[-2, :, :-3:-1].copy()
                rings[-1] = np.roll(rings[-1], -1, axis=1)
            return rings.transpose(1, 0, 2).reshape(channels, -1).tolist()
        channels = min(min(sizes), self.params.max_channels)
        return [self._ring_over_unequal_domains(list(by_domain.values()), c, min(sizes)) for c in range(channels)]

    @staticmethod
    def _ring_over_unequal_domains(domains: list[list[int]], channel: int, common: int) -> list[int]:
        """Channel `channel`'s ring over domains of unequal size (positions below `common`, the smallest
        domain's size, exist in each): every domain is entered and left at positions that the hop
        between two domains shares, one rail, as for equal domains (before, each domain was walked from
        position c and left at its own size's c - 1: a domain of 4 beside one of 8 crossed rails at
        each hop, through the spine; found by an audit). Even domains enter at c and leave at c - 1,
        odd ones the reverse; with an odd count the last leaves at c + 1 and the first enters there.
        Two positions in common cannot close an odd cycle on one rail: then each domain from c."""
        count, c = len(domains), channel
        if count % 2 and common < 3:
            return [m[(c + i) % len(m)] for m in domains for i in range(len(m))]
        enter = [c if d % 2 == 0 else (c - 1) % common for d in range(count)]
        leave = [(c - 1) % common if d % 2 == 0 else c for d in range(count)]
        if count % 2:
            leave[-1] = enter[0] = (c + 1) % common
        ring: list[int] = []
        for members, first, last in zip(domains, enter, leave, strict=True):
            ring += [members[first], *(m for i, m in enumerate(members) if i not in (first, last)), members[last]]
        return ring

    @staticmethod
    def _ring_flows(rings: list[list[int]], bytes_per_ring_edge: float) -> FlowTable:
        """One flow per distinct ring edge (first-seen order) carrying its rings' shares, the
        shares added ring by ring (as a running sum would: bincount adds in input order)."""
        share = bytes_per_ring_edge / len(rings)
        if len(rings) == 1:  # a ring of distinct ranks uses each edge once
            ring = rings[0]
            return FlowTable.uniform(ring, ring[1:] + ring[:1], share)
        a = np.array(rings, dtype=np.int64)
        return CollectiveModel._edge_flows(a.reshape(-1), np.roll(a, -1, axis=1).reshape(-1), share)

    @staticmethod
    def _edge_flows(a: np.ndarray, b: np.ndarray, share: float) -> FlowTable:
        """One flow per distinct edge a[i] -> b[i] (first-seen order) carrying `share` per listing."""
        _, first, inverse = np.unique(a * (int(max(a.max(), b.max())) + 1) + b, return_index=True,
                                      return_inverse=True)
        sums = np.bincount(inverse.reshape(-1), weights=np.full(len(a), share))
        order = np.argsort(first, kind="stable")
        at = first[order]
        return FlowTable(a[at], b[at], sums[order])

    def _ring(self, op: str, group: list[int], nbytes: float) -> list[Phase]:
        n = len(group)
        if op in ("all_reduce", "all_gather", "reduce_scatter"):
            flows = self._ring_flows(self._rings(group), (2 if op == "all_reduce" else 1) * (n - 1) / n * nbytes)
            step = self._step_latency_s(flows)   # every ring edge once
            if op == "all_reduce":  # reduce-scatter then all-gather: 2(n-1) steps of S/n
                return [Phase(flows, 2 * (n - 1) * step)]
            return [Phase(flows, (n - 1) * step)]
        # broadcast: NCCL splits it over its ring channels, each a pipelined chain from the root (the
        # ring cut before it) carrying S / channels; one chain through one NIC crossed nodes at 47 GB/s
        # where the all-gather of the same group ran at 365 (found by a network audit)
        rings = self._rings(sorted(group))
        if len(rings) == 1:
            chain = FlowTable.uniform(group[:-1], group[1:], nbytes)
        else:
            cuts = np.array([ring[ring.index(group[0]):] + ring[:ring.index(group[0])] for ring in rings],
                            dtype=np.int64)
            chain = self._edge_flows(cuts[:, :-1].reshape(-1), cuts[:, 1:].reshape(-1), nbytes / len(rings))
        return [Phase(chain, (n - 1) * self._step_latency_s(chain))]

    # ---- tree ------------------------------------------------------------------------------
    def _tree(self, op: str, group: list[int], nbytes: float) -> list[Phase]:
        """Pipelined binary tree (NCCL's double binary tree for all-reduce, a binomial-depth tree
        for broadcast): floor(log2 n) steps deep (rank i of the heap sits at depth floor(log2(i + 1)),
        the deepest is the last); every parent->child edge carries S (all-reduce: S up and S down,
        2 x depth steps)."""
        n = len(group)
        depth = n.bit_length() - 1
        parent = [group[(i - 1) // 2] for i in range(1, n)]  # heap-ordered binary tree
        down = FlowTable.uniform(parent, group[1:], nbytes)
        step = self._step_latency_s(down)
        if op == "broadcast":
            return [Phase(down, depth * step)]
        both = FlowTable.uniform(np.concatenate([down.dst, down.src]), np.concatenate([down.src, down.dst]), nbytes)
        return [Phase(both, 2 * depth * step)]

    # ---- hierarchical ----------------------------------------------------------------------
    def _hierarchical(self, op: str, group: list[int], nbytes: float) -> list[Phase]:
        """Intra-domain reduce-scatter, inter-domain collective on each rail (devices with the same
        position in their domain) over S/k, intra-domain all-gather."""
        domains = list(self.topology.group_by_domain(group).values())
        k, m = len(domains[0]), len(domains)
        # one ring per domain and one per rail, their edges listed ring after ring (each edge once)
        members = np.array(domains, dtype=np.int64)                      # domains x k
        intra_src, intra_dst = members.reshape(-1), np.roll(members, -1, axis=1).reshape(-1)
        rails = members.T                                                # rail j: member j of every domain
        rail_src, rail_dst = rails.reshape(-1), np.roll(rails, -1, axis=1).reshape(-1)
        intra_step = self._step_latency_s(FlowTable.uniform(intra_src, intra_dst, 0.0))
        inter_step = self._step_latency_s(FlowTable.uniform(rail_src, rail_dst, 0.0))

        mesh = all(self._fully_linked(d) for d in domains)

        def intra(bytes_per_edge: float) -> Phase:
            if mesh:  # full mesh inside each domain: every pair exchanges its share at once
                parts = [self._pairwise(d, bytes_per_edge / (k - 1)).flows for d in domains]
                flows = FlowTable(*(np.concatenate([getattr(f, c) for f in parts]) for c in ("src", "dst", "nbytes")))
                return Phase(flows, self._pairwise(domains[0], 0.0).latency_s)
            return Phase(FlowTable.uniform(intra_src, intra_dst, bytes_per_edge), (k - 1) * intra_step)

        def inter(bytes_per_edge: float, steps: int) -> Phase:
            return Phase(FlowTable.uniform(rail_src, rail_dst, bytes_per_edge), steps * inter_step)

        if op == "all_reduce":
            return [intra((k - 1) / k * nbytes), inter(2 * (m - 1) / m * nbytes / k, 2 * (m - 1)),
                    intra((k - 1) / k * nbytes)]
        if op == "all_gather":  # rails gather their m pieces of S/n, then domains gather k x m pieces
            return [inter((m - 1) * nbytes / (k * m), m - 1), intra((k - 1) / k * nbytes)]
        return [intra((k - 1) / k * nbytes), inter((m - 1) * nbytes / (k * m), m - 1)]  # reduce_scatter

    # ---- direct (every pair at once) -------------------------------------------------------
    def _pairwise(self, group: list[int], bytes_per_pair: float) -> Phase:
        n = len(group)
        p = self.params
        latency = (self._step_latency_s(FlowTable.uniform([group[0]] * (n - 1), group[1:], 0.0))
                   + (n - 2) * p.step_overhead_s)
        if n <= p.exact_all_to_all_max_devices:
            src, dst = np.repeat(group, n), np.tile(group, n)
            pair = src != dst                 # every ordered pair of distinct ranks, row by row
            return Phase(FlowTable.uniform(src[pair], dst[pair], bytes_per_pair), latency)
        return Phase((), latency, self._injection_bound_s(group, bytes_per_pair))

    def _injection_bound_s(self, group: list[int], bytes_per_pair: float) -> float:
        """Large all-to-all. A hierarchical cluster: its most loaded link, the loads counted per link
        level (Topology.all_to_all_link_time_s: the loads the pairs' routes give, a thin spine or
        two-tier uplink included; the per-device bound read every fabric as non-blocking and a full
        mesh's k - 1 links as one). An explicit graph: each device's bytes to its own domain leave on
        its scale-up links (a full mesh: one peer's on each) and the rest on its scale-out link; the
        slowest device bounds the phase (non-blocking fabric)."""
        topo = self.topology
        counted = topo.all_to_all_link_time_s(group, bytes_per_pair)
        if counted is not None:
            return counted
        by_domain = topo.group_by_domain(group)
        n = len(group)
        worst = 0.0
        for members in by_domain.values():
            k = len(members)
            a = members[0]
            up_peer = members[1] if k > 1 else None
            out_peer = next((r for d, ms in by_domain.items() for r in ms if d != topo.domain_of(a)), None)
            on_up = 1 if k > 1 and self._fully_linked(members) else k - 1   # pairs sharing a's link to up_peer
            t_up = on_up * bytes_per_pair / topo.path_bw_Bps(a, up_peer, effective=True) if up_peer is not None else 0.0
            t_out = ((n - k) * bytes_per_pair / topo.path_bw_Bps(a, out_peer, effective=True)
                     if out_peer is not None else 0.0)
            worst = max(worst, t_up, t_out)
        return worst

    def _direct(self, op: str, group: list[int], nbytes: float) -> list[Phase]:
        n = len(group)
        piece = nbytes / n
        if op == "all_to_all":  # each rank's buffer S holds n pieces of S/n, one per destination
            return [self._pairwise(group, piece)]
        if op == "all_reduce":  # direct reduce-scatter, then direct all-gather
            return [self._pairwise(group, piece), self._pairwise(group, piece)]
        return [self._pairwise(group, piece)]

    # ---- choosing --------------------------------------------------------------------------
    def _candidates(self, op: str, group: list[int], nbytes: float) -> dict[str, Any]:
        topo = self.topology
        if op == "p2p":
            a, b = group
            lat = topo.path_latency_s(a, b) + self.params.step_overhead_s
            return {"direct": lambda: [Phase(FlowTable.uniform([a], [b], nbytes), lat)]}
        if op == "all_to_all":
            return {"direct": lambda: self._direct(op, group, nbytes)}
        out: dict[str, Any] = {"ring": lambda: self._ring(op, group, nbytes)}
        if op in ("all_reduce", "broadcast") and len(group) > 2:
            out["tree"] = lambda: self._tree(op, group, nbytes)
        if op in ("all_reduce", "all_gather", "reduce_scatter"):
            domains = topo.group_by_domain(group)
            sizes = {len(v) for v in domains.values()}
            if len(domains) > 1 and len(sizes) == 1 and min(sizes) > 1:
                out["hierarchical"] = lambda: self._hierarchical(op, group, nbytes)
            if self._fully_linked(group):  # a full mesh: every pair has its own link
                out["direct"] = lambda: self._direct(op, group, nbytes)
        return out

    def custom_all_reduce_lines(self, ranks: Sequence[int]) -> tuple[tuple[float, float], ...]:
        """(launch + latencies, seconds per byte) of a rollout engine's own all-reduce on ``ranks``
        (vLLM / SGLang custom_all_reduce.py: 2, 4, 6 or 8 GPUs of one node, through peer memory):
        one shot (every rank reads each peer's whole buffer after one barrier) and two shots (a
        reduce-scatter and an all-gather through peer memory, a barrier each). Empty when the group
        does not qualify (the engine falls back to NCCL) or its devices have no CUDA peer memory
        (DeviceSpec.peer_memory_all_reduce: Ascend's engines reduce over HCCL)."""
        group = sorted(set(ranks))
        n = len(group)
        if n not in CUSTOM_ALL_REDUCE_GROUP_SIZES or len({self.topology.node_of(r) for r in group}) > 1:
            return ()
        if not all(self.topology.device_spec(r).peer_memory_all_reduce for r in group):   # not a CUDA device
            return ()
        key = ("custom_all_reduce", self.topology.group_signature(tuple(group)))
        hit = self._lines.get(key)
        if hit is None:
            src, dst = np.repeat(group, n), np.tile(group, n)
            pair = src != dst
            barrier = self._step_latency_s(FlowTable.uniform(src[pair], dst[pair], 0.0))
            launch, ref = self._launch_s(group), LINE_REFERENCE_BYTES
            one_shot = self.topology.max_link_time_s(FlowTable.uniform(src[pair], dst[pair], ref))
            two_shot = 2 * self.topology.max_link_time_s(FlowTable.uniform(src[pair], dst[pair], ref / n))
            hit = self._lines[key] = ((launch + barrier, one_shot / ref), (launch + 2 * barrier, two_shot / ref))
        return hit

    def _fully_linked(self, group: list[int]) -> bool:
        return len(group) <= self.params.direct_max_devices and self.topology.fully_linked(group)


def line_time_s(lines: Sequence[tuple[float, float]], nbytes: float) -> float:
    """The cheapest algorithm's time at ``nbytes`` from ``CollectiveModel.lines`` (0 without
    algorithms or bytes); ties go to the first, as CollectiveModel.plan."""
    if nbytes == 0 or not lines:
        return 0.0
    return min(fixed + slope * nbytes for fixed, slope in lines)


def parse_group(topology: Topology, spec: str) -> list[int]:
    """`all`, `node:I`, `nodes:I-J`, `domain:I`, `devices:I-J` (inclusive) or `0,8,...` -> ranks."""
    text = str(spec).strip()
    fix = "use all, node:I, nodes:I-J, domain:I, devices:I-J or a comma list like 0,8"

    def bad(why: str) -> RlsimError:
        return RlsimError(f"bad group {text!r}: {why}", field="--group", fix=fix)

    def span(value: str) -> tuple[int, int]:
        lo, sep, hi = value.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise bad(f"{value!r} is not I or I-J") from None
        if a > b:
            raise bad(f"range {value!r} runs backwards")
        return a, b

    if text == "all":
        return list(range(topology.num_devices))
    kind, sep, rest = text.partition(":")
    try:
        if sep and kind in ("node", "nodes"):
            a, b = span(rest)
            if b >= topology.num_nodes:
                raise bad(f"node {b} does not exist ({topology.name} has {counted(topology.num_nodes, 'node')})")
            return [r for i in range(a, b + 1) for r in topology.ranks_of_node(i)]
        if sep and kind in ("domain", "domains"):
            a, b = span(rest)
            if b >= topology.num_domains:
                raise bad(f"domain {b} does not exist ({topology.name} has {counted(topology.num_domains, 'domain')})")
            return [r for i in range(a, b + 1) for r in topology.ranks_of_domain(i)]
        if sep and kind in ("devices", "device"):
            a, b = span(rest)
            ranks = list(range(a, b + 1))
        elif not sep:
            items = [x.strip() for x in text.split(",")]
            if "" in items and any(items):   # '0,,1' and '0,1,' were read as 0,1
                raise bad("an empty item in the comma list")
            try:
                ranks = [int(x) for x in items if x]
            except ValueError:
                raise bad("not a comma list of device indices") from None
        else:
            raise bad(f"unknown group kind {kind!r}")
    except RlsimError as exc:
        if exc.field == "--group":
            raise
        raise bad(str(exc)) from None
    if not ranks:
        raise bad("no devices")
    out_of_range = [r for r in ranks if not 0 <= r < topology.num_devices]
    if out_of_range:
        raise bad(f"device {out_of_range[0]} does not exist ({topology.name} has {counted(topology.num_devices, 'device')})")
    return ranks
