"""The cluster as a directed networkx graph: devices, switches, hosts and links, plus queries.

Two YAML forms build the same graph (docs/network.md has the schema):
- hierarchical: servers of `devices_per_node` devices, `nodes_per_domain` servers per scale-up
  domain (NVSwitch / UB / NVL72), a rail-optimized leaf-spine scale-out fabric, one host per server;
  `groups` puts several device kinds in one graph.
- explicit: `graph: {nodes: [...], links: [...]}`.

Routing is structural where the graph is a tree per plane (every hierarchical preset): a path
climbs to the lowest common ancestor in the fastest plane that joins both ends. A hierarchical
topology keeps its links as arrays per level (hardware/fabric.py): device-to-device routes,
capacities, latencies, group signatures and a collective's link loads are array arithmetic, and
the networkx graph is built only on first access of `.graph` (inspection, paths from or to a host
or switch id). Explicit graphs are networkx from the start, routed on the per-plane trees or by a
cached networkx shortest path. All of it is deterministic.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import RlsimError, one_typo_from
from ..presets import preset_names, resolve
from ..scenario import LIMITS_FIX, Limits
from ..units import is_unitless, parse_bandwidth, parse_seconds, whole_number
from .collective_params import CollectiveParams
from .devices import DeviceSpec, catalog_device, device_from_mapping
from .fabric import PLANES, Fabric, FlowTable, GroupPlan, ScaleoutPlan
from .fabric import LinkSpec as _LinkSpec

if TYPE_CHECKING:
    import networkx as nx

Edge = tuple[str, str]
Flow = tuple[int, int, float]  # (src rank, dst rank, bytes)
LEVELS = ("device", "node", "domain", "cluster")

# Defaults of the hierarchical form. Presets set their own values with sources; these are the
# fallbacks for a user's file that leaves a field out.
# NVLink / UB protocol efficiency: nccl-tests measure 365-370 GB/s ring all-reduce busbw on
# 450 GB/s NVLink4 (~0.8) (hardware.md, nccl-tests doc/PERFORMANCE.md).
DEFAULT_SCALEUP_EFFICIENCY = 0.80
DEFAULT_SCALEUP_LATENCY_S = 0.5e-6  # per hop device<->switch; NVSwitch port-to-port is sub-microsecond
# InfiniBand / RoCE: nccl-tests reach 46-48 GB/s busbw per 400 Gb/s (50 GB/s) NDR NIC (hardware.md).
DEFAULT_SCALEOUT_EFFICIENCY = 0.94
DEFAULT_SCALEOUT_LATENCY_S = 1.0e-6  # per hop; NIC + switch, ~2 us GPU-to-GPU across one leaf
DEFAULT_HOST_EFFICIENCY = 0.85  # PCIe payload efficiency after TLP headers (PCI-SIG, ~85% for 256 B payloads)
DEFAULT_HOST_LATENCY_S = 1.0e-6  # one PCIe round of DMA setup
# A graph link that leaves latency / efficiency out takes its plane's defaults, as the
# hierarchical form's sections do.
_PLANE_DEFAULTS = {"scaleup": (DEFAULT_SCALEUP_LATENCY_S, DEFAULT_SCALEUP_EFFICIENCY),
                   "scaleout": (DEFAULT_SCALEOUT_LATENCY_S, DEFAULT_SCALEOUT_EFFICIENCY),
                   "host": (DEFAULT_HOST_LATENCY_S, DEFAULT_HOST_EFFICIENCY)}
DEFAULT_NODES_PER_LEAF = 32  # a 64-port NDR leaf (Quantum-2 QM9700): 32 ports down, 32 up, non-blocking
# Routing weight, not a physical figure: a path costs its latency plus the time to move 1 GB, so
# wider links win over fewer hops.
_ROUTE_PROBE_BYTES = 1e9


class Topology:
    """A built cluster graph and its queries. Build it with `load_topology`."""

    def __init__(self, name: str, source: str, graph: nx.DiGraph | None, devices: list[str],
                 specs: list[DeviceSpec], parents: dict[str, dict[str, str]] | None = None,
                 description: str = "", collectives: Mapping[str, Any] | None = None,
                 fabric: Fabric | None = None) -> None:
        """`graph` (explicit topologies) or `fabric` (hierarchical ones; the graph is built from it
        on first access of `.graph`)."""
        if (graph is None) == (fabric is None):
            raise ValueError("give a graph or a fabric")
        self.name = name
        self.source = source
        self.description = description
        self.collectives = dict(collectives or {})  # raw `collectives:` section, read by network/
        self._graph = graph
        self._fabric = fabric
        self.devices = devices
        self._specs = specs
        self._parents_map = parents
        self._rank_of_id: dict[str, int] | None = None   # device node id -> rank, built on first use
        self._node_ranks: dict[int, Sequence[int]] = {}
        self._domain_ranks: dict[int, Sequence[int]] = {}
        if fabric is not None:   # ranks fill a node, then a domain, in order: contiguous ranges
            self._node_of = fabric.node.tolist()
            self._domain_of = fabric.domain.tolist()
            self._node_ranks = _contiguous_runs(self._node_of)
            self._domain_ranks = _contiguous_runs(self._domain_of)
            self._kinds_total = len({id(g.spec) for g in fabric.groups})
        else:
            attrs = graph.nodes
            self._node_of = [int(attrs[d]["node"]) for d in devices]
            self._domain_of = [int(attrs[d]["domain"]) for d in devices]
            for rank in range(len(devices)):
                self._node_ranks.setdefault(self._node_of[rank], []).append(rank)
                self._domain_ranks.setdefault(self._domain_of[rank], []).append(rank)
            self._kinds_total = len({id(s) for s in specs})
        self._path_cache: dict[tuple[int | str, int | str], list[Edge]] = {}  # by ranks and by node ids
        self._latency_cache: dict[tuple[int | str, int | str], float] = {}
        # Usable bandwidth per directed edge, read once from the graph (as paths and latencies are:
        # the graph is not changed after the build). A 24k-device all-reduce plan asks ~200k times.
        self._capacity_cache: dict[Edge, float] = {}
        self._edge_ids: dict[Edge, int] = {}  # fabric edges path() has named -> their id
        self._edge_names: dict[int, Edge] = {}
        self._run_signatures: dict[tuple[int, int, int], tuple] = {}  # (group, first local, length)
        self._cost_graph: nx.DiGraph | None = None
        self._kind_table: tuple[list[str], list[DeviceSpec], list[int]] | None = None

    @property
    def graph(self) -> nx.DiGraph:
        """The networkx graph (node attributes, edge attributes); a hierarchical topology builds
        it on first access, node for node and edge for edge what the builder always made."""
        if self._graph is None:
            with _cyclic_gc_paused():
                self._graph, self._parents_map = self._fabric.build_graph()
        return self._graph

    @property
    def _parents(self) -> dict[str, dict[str, str]]:
        """Per plane, each tree node's parent (hierarchical topologies; built with the graph)."""
        if self._parents_map is None and self._fabric is not None:
            _ = self.graph
        return self._parents_map or {}

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}, devices={self.num_devices}, nodes={self.num_nodes}, "
                f"domains={self.num_domains}, kinds={self.device_kinds()})")

    # ---- sizes and membership --------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_nodes(self) -> int:
        return len(self._node_ranks)

    @property
    def num_domains(self) -> int:
        return len(self._domain_ranks)

    def _check_rank(self, rank: int) -> int:
        if isinstance(rank, bool) or not isinstance(rank, int):   # (a numpy integer read "out of range")
            raise RlsimError(f"device rank {rank!r} is not a Python int", field="rank",
                             fix="pass ranks as int (e.g. [int(r) for r in ranks], or a range)")
        if not 0 <= rank < len(self.devices):
            raise RlsimError(f"device rank {rank!r} is out of range 0..{len(self.devices) - 1}", field="rank",
                             fix=f"topology {self.name!r} has {len(self.devices)} devices")
        return rank

    def device_spec(self, rank: int) -> DeviceSpec:
        return self._specs[self._check_rank(rank)]

    def distinct_specs(self, ranks: Iterable[int]) -> list[DeviceSpec]:
        """The distinct DeviceSpecs of `ranks`, in first-seen order (devices.distinct_devices); every
        rank is range-checked, and the scan stops once every kind of the topology has been seen."""
        kinds: list[DeviceSpec] = []
        specs = self._specs
        if ranks.__class__ is range:
            low, high = (min(ranks[0], ranks[-1]), max(ranks[0], ranks[-1])) if ranks else (0, 0)
        else:
            if not isinstance(ranks, (list, tuple)) or set(map(type, ranks)) != {int}:
                ranks = [int(r) for r in ranks]
            low, high = (min(ranks), max(ranks)) if ranks else (0, 0)
        if ranks and (low < 0 or high >= len(specs)):
            for r in ranks:   # the first one out of range names itself in the error
                self._check_rank(r)
        for r in ranks:
            s = specs[r]
            if not any(s is k for k in kinds):
                kinds.append(s)
                if len(kinds) == self._kinds_total:
                    break
        return kinds

    def host_links(self, ranks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(bandwidth per direction, protocol efficiency) of each device's own link to its host
        memory (PCIe, UB, NVLink-C2C), in the order of `ranks`: the topology's `host:` section, or
        in an explicit graph the device's link to a node of kind host (the fastest of several). A
        graph device without one: its catalog host link at DEFAULT_HOST_EFFICIENCY. The link the
        copies to and from host memory run on."""
        ranks = [self._check_rank(r) for r in ranks]
        if self._fabric is not None:
            ids = self._fabric.host_base + 2 * np.asarray(ranks, dtype=np.int64)
            return self._fabric.bw[ids].astype(float), self._fabric.efficiency[ids].astype(float)
        links = [self._graph_host_link(r) for r in ranks]
        return np.array([bw for bw, _ in links], dtype=float), np.array([eff for _, eff in links], dtype=float)

    def host_copy_Bps(self, ranks: Sequence[int], efficiency: float | None = None) -> np.ndarray:
        """The rate of copies to and from host memory on each rank's host link (host_links):
        bandwidth x the link's efficiency, or x ``efficiency`` where given (a knob of the copies)."""
        bw, link_efficiency = self.host_links(ranks)
        return bw * (link_efficiency if efficiency is None else efficiency)

    def _graph_host_link(self, rank: int) -> tuple[float, float]:
        graph, device = self.graph, self.devices[rank]
        links = [(d["bw_Bps"] * d["efficiency"], d["bw_Bps"], d["efficiency"])
                 for _, peer, d in graph.out_edges(device, data=True) if graph.nodes[peer].get("kind") == "host"]
        if not links:
            return self._specs[rank].host_link_bw_Bps, DEFAULT_HOST_EFFICIENCY
        _, bw, efficiency = max(links)
        return float(bw), float(efficiency)

    def node_of(self, rank: int) -> int:
        return self._node_of[self._check_rank(rank)]

    def domain_of(self, rank: int) -> int:
        return self._domain_of[self._check_rank(rank)]

    def ranks_of_node(self, i: int) -> list[int]:
        if i not in self._node_ranks:
            raise RlsimError(f"node {i} does not exist", field="node",
                             fix=f"topology {self.name!r} has nodes 0..{self.num_nodes - 1}")
        return list(self._node_ranks[i])

    def ranks_of_domain(self, i: int) -> list[int]:
        if i not in self._domain_ranks:
            raise RlsimError(f"domain {i} does not exist", field="domain",
                             fix=f"topology {self.name!r} has domains 0..{self.num_domains - 1}")
        return list(self._domain_ranks[i])

    @property
    def replicas_alike(self) -> bool:
        """Whether every group of ranks laid out alike sees the same network: a hierarchical cluster
        of one device group (every node, domain and rail alike). False for an explicit graph (a
        link may differ anywhere) or several groups (device kinds, link rates): a layout's
        collectives are then priced on its slowest group of each kind, not its first."""
        return self._fabric is not None and len(self._fabric.groups) == 1

    def group_signature(self, ranks: Iterable[int]) -> tuple:
        """A cache key equal for groups that see the same network (the same paths, link
        capacities and latencies, shared links alike), position by position.

        Hierarchical topologies (every level symmetric): which ranks share a domain, a node, a local
        position and a scale-out leaf (each numbered by first appearance), each rank's device group
        and its NIC and leaf-uplink capacities (a partly filled leaf group has a narrower uplink), and
        the order of the ranks (Fabric.signature) - not where the group sits. Explicit graphs: the ranks."""
        if ranks.__class__ is range and ranks.step == 1 and self._fabric is not None and len(ranks):
            run = self._run_signature(ranks.start, len(ranks))
            if run is not None:
                return run
            if 0 <= ranks.start and ranks.stop <= len(self.devices):   # in range: no per-rank checks
                return self._fabric.signature(np.arange(ranks.start, ranks.stop))
        ranks = tuple(ranks)
        if self._fabric is None or not ranks:
            return ("ranks", ranks)
        n, first = len(ranks), ranks[0]
        if (first.__class__ is int and ranks == tuple(range(first, first + n)) and set(map(type, ranks)) == {int}):
            run = self._run_signature(first, n)
            if run is not None:
                return run
        self.check_ranks(ranks)
        return self._fabric.signature(np.array(ranks, dtype=np.int64))

    def _run_signature(self, first: int, n: int) -> tuple | None:
        """The signature of the run first..first + n - 1 when it lies inside one domain (None
        otherwise): it depends only on its group, the local position it starts at and its length,
        so it is computed once per such triple."""
        if not (n and 0 <= first and first + n <= len(self.devices)
                and self._domain_of[first] == self._domain_of[first + n - 1]):
            return None
        fabric = self._fabric
        assert fabric is not None
        run = (int(fabric.group[first]), int(fabric.local[first]), n)
        hit = self._run_signatures.get(run)
        if hit is None:
            hit = self._run_signatures[run] = fabric.signature(np.arange(first, first + n))
        return hit

    def device_kinds(self) -> list[str]:
        return list(self.device_counts())

    def kind_of(self, rank: int) -> str:
        """The device kind of ``rank``, as device_counts names it."""
        labels, _, per_rank = self._kinds()
        return labels[per_rank[self._check_rank(rank)]]

    def kind_specs(self) -> dict[str, DeviceSpec]:
        """Each device kind's spec, by the names device_counts gives them."""
        labels, specs, _ = self._kinds()
        return dict(sorted(zip(labels, specs, strict=True)))

    def _kinds(self) -> tuple[list[str], list[DeviceSpec], list[int]]:
        """Device kinds by their whole spec: (names, specs, each rank's kind). Devices of one name
        whose specs differ (a group's `{base: h100, gemm_efficiency: 0.6}` beside plain h100s, a node's
        calibrated profile) were one kind by name, one count and one price, no mixed-cluster note; each
        is now a kind of its own named NAME@GROUP (an explicit graph's NAME@NODE, its first device).
        The catalog's own spec among them keeps the bare name, which a price for NAME also prices."""
        if self._kind_table is None:
            specs: list[DeviceSpec] = []
            places: list[str] = []
            of_object: dict[int, int] = {}   # id(spec) -> kind: ranks share a few spec objects
            per_rank: list[int] = []
            for rank, spec in enumerate(self._specs):
                kind = of_object.get(id(spec))
                if kind is None:
                    kind = next((i for i, seen in enumerate(specs) if seen == spec), len(specs))
                    if kind == len(specs):
                        specs.append(spec)
                        places.append(self._fabric.groups[int(self._fabric.group[rank])].name
                                      if self._fabric is not None else self.devices[rank])
                    of_object[id(spec)] = kind
                per_rank.append(kind)
            names = Counter(spec.name for spec in specs)
            labels = [spec.name if names[spec.name] == 1 or spec == catalog_device(spec.name) else f"{spec.name}@{place}"
                      for spec, place in zip(specs, places, strict=True)]
            self._kind_table = (labels, specs, per_rank)
        return self._kind_table

    def device_groups(self) -> dict[str, DeviceSpec]:
        """A topology of `groups:` whose devices differ: each group's name and device; {} for one
        kind of device or an explicit graph (its `topology.device.*` fields are every device's)."""
        if self._fabric is None or len({id(g.spec) for g in self._fabric.groups}) < 2:
            return {}
        return {g.name: g.spec for g in self._fabric.groups}

    def device_counts(self) -> dict[str, int]:
        """Devices of each kind (_kinds: by spec, named by the device's name) in name order (a mixed
        cluster's cost weighs each kind's price)."""
        labels, _, per_rank = self._kinds()
        return dict(sorted(Counter(labels[kind] for kind in per_rank).items()))

    # ---- placement helpers -----------------------------------------------------------------
    def place(self, count: int, start: int = 0) -> list[int]:
        """`count` consecutive ranks from `start` (ranks fill a node, then a domain, in order)."""
        if count < 1 or start < 0 or start + count > len(self.devices):
            raise RlsimError(f"cannot place {count} devices from rank {start}", field="devices",
                             fix=f"topology {self.name!r} has {len(self.devices)} devices")
        return list(range(start, start + count))

    def group_by_node(self, ranks: Iterable[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for r in ranks:
            out.setdefault(self.node_of(r), []).append(r)
        return out

    def group_by_domain(self, ranks: Iterable[int]) -> dict[int, list[int]]:
        ranks = list(ranks)
        self.check_ranks(ranks)
        if self._fabric is not None and len(ranks) > 16:
            domains = self._fabric.domain[np.array(ranks, dtype=np.int64)]
            if (domains[1:] >= domains[:-1]).all():   # sorted by domain (a sorted group): cut the runs
                cuts = np.flatnonzero(np.r_[True, domains[1:] != domains[:-1]]).tolist()
                ends = [*cuts[1:], len(ranks)]
                return {d: ranks[a:b] for d, a, b in zip(domains[cuts].tolist(), cuts, ends, strict=True)}
        domain_of = self._domain_of
        out: dict[int, list[int]] = {}
        for r in ranks:
            out.setdefault(domain_of[r], []).append(r)
        return out

    def shared_level(self, ranks: Iterable[int]) -> str:
        """The fastest level containing every rank: device, node, domain or cluster."""
        ranks = list(ranks)
        if not ranks:
            raise RlsimError("empty device group", field="group", fix="give at least one device")
        if len(set(ranks)) == 1:
            self._check_rank(ranks[0])
            return "device"
        if len({self.node_of(r) for r in ranks}) == 1:
            return "node"
        if len({self.domain_of(r) for r in ranks}) == 1:
            return "domain"
        return "cluster"

    # ---- paths -----------------------------------------------------------------------------
    def _node_id(self, x: int | str) -> str:
        if isinstance(x, str):
            if x not in self._index and x not in self.graph:
                raise RlsimError(f"no graph node {x!r}", field="node", fix="use a rank or a node id of the graph")
            return x
        return self.devices[self._check_rank(x)]

    @property
    def _index(self) -> dict[str, int]:
        if self._rank_of_id is None:
            self._rank_of_id = {node_id: rank for rank, node_id in enumerate(self.devices)}
        return self._rank_of_id

    def path(self, a: int | str, b: int | str) -> list[Edge]:
        """Directed edges from a to b (ranks or graph node ids); [] when a == b."""
        # Keyed by what was passed: a hit was checked when it was stored (rank keys are ints, graph
        # node ids strings, so the two never collide); a miss resolves and checks both ends.
        hit = self._path_cache.get((a, b))
        if hit is not None and a.__class__ is not bool and b.__class__ is not bool:
            return hit
        if self._fabric is not None and a.__class__ is int and b.__class__ is int:
            found = self._path_cache[(a, b)] = self._fabric_path(self._check_rank(a), self._check_rank(b))
            return found
        u, v = self._node_id(a), self._node_id(b)
        found = self._path_cache.get((u, v))
        if found is None:
            if self._fabric is not None and u in self._index and v in self._index:
                found = self._fabric_path(self._index[u], self._index[v])
            else:
                found = self._route(u, v)
            self._path_cache[(u, v)] = found
        self._path_cache[(a, b)] = found
        return found

    def _fabric_path(self, a: int, b: int) -> list[Edge]:
        ids = self._fabric.route_ids(np.array([a]), np.array([b]))[0]
        return [self._edge_named(e) for e in ids.tolist() if e >= 0]

    def _edge_named(self, eid: int) -> Edge:
        """The graph's name of fabric edge `eid`, remembered both ways (capacity_Bps, edge)."""
        name = self._edge_names.get(eid)
        if name is None:
            name = self._edge_names[eid] = self._fabric.edge_name(eid)
            self._edge_ids[name] = eid
        return name

    def _route(self, u: str, v: str) -> list[Edge]:
        if u == v:
            return []
        if self.graph.has_edge(u, v):  # a direct link (full mesh) beats any switch
            return [(u, v)]
        for plane in PLANES:
            parents = self._parents.get(plane)
            if not parents or u not in parents and v not in parents:
                continue
            up_u = self._chain(parents, u)
            up_v = self._chain(parents, v)
            if up_u[-1] != up_v[-1]:
                continue
            on_v = {n: i for i, n in enumerate(up_v)}
            i = next(i for i, n in enumerate(up_u) if n in on_v)
            nodes = up_u[:i + 1] + up_v[:on_v[up_u[i]]][::-1]
            return list(zip(nodes[:-1], nodes[1:], strict=True))
        return self._shortest(u, v)

    @staticmethod
    def _chain(parents: dict[str, str], node: str) -> list[str]:
        chain = [node]
        while chain[-1] in parents:
            chain.append(parents[chain[-1]])
        return chain

    def _shortest(self, u: str, v: str) -> list[Edge]:
        import networkx as nx
        if self._cost_graph is None:
            # Prefer fast, short paths: cost = latency + the time to move _ROUTE_PROBE_BYTES, so
            # bandwidth dominates.
            self._cost_graph = nx.DiGraph()
            self._cost_graph.add_weighted_edges_from(
                (a, b, d["latency_s"] + _ROUTE_PROBE_BYTES / (d["bw_Bps"] * d["efficiency"]))
                for a, b, d in self.graph.edges(data=True))
        try:
            nodes = nx.dijkstra_path(self._cost_graph, u, v)
        except nx.NetworkXNoPath:
            raise RlsimError(f"no path from {u!r} to {v!r}", source=self.source, field="graph.links",
                             fix="connect the two parts of the graph") from None
        return list(zip(nodes[:-1], nodes[1:], strict=False))

    def edge(self, e: Edge) -> dict[str, Any]:
        eid = self._edge_ids.get(e)
        if eid is not None:
            return self._fabric.edge_attrs(eid)
        return self.graph.edges[e]

    def _edge_value(self, e: Edge, key: str) -> Any:
        eid = self._edge_ids.get(e)
        if eid is not None:
            return self._fabric.edge_attrs(eid)[key]
        return self.graph.edges[e][key]

    def capacity_Bps(self, e: Edge) -> float:
        """Usable bandwidth of a directed edge: physical bandwidth x protocol efficiency."""
        hit = self._capacity_cache.get(e)
        if hit is None:
            eid = self._edge_ids.get(e)
            if eid is not None:
                hit = float(self._fabric.capacity[eid])
            else:
                d = self.graph.edges[e]
                hit = d["bw_Bps"] * d["efficiency"]
            self._capacity_cache[e] = hit
        return hit

    def path_latency_s(self, a: int | str, b: int | str) -> float:
        hit = self._latency_cache.get((a, b))
        if hit is None or a.__class__ is bool or b.__class__ is bool:
            hit = self._latency_cache[(a, b)] = sum(self._edge_value(e, "latency_s") for e in self.path(a, b))
        return hit

    def path_bw_Bps(self, a: int | str, b: int | str, effective: bool = False) -> float:
        """The narrowest link on the path (per direction); with effective=True, x efficiency."""
        edges = self.path(a, b)
        if not edges:
            return float("inf")
        if effective:
            return min(self.capacity_Bps(e) for e in edges)
        return min(self._edge_value(e, "bw_Bps") for e in edges)

    def bottleneck_bw_Bps(self, ranks: Iterable[int]) -> float:
        """The narrowest physical link (per direction) on the ring through `ranks` in rank order;
        inf for a single device."""
        ring = sorted(set(ranks))
        if len(ring) < 2:
            return float("inf")
        if self._fabric is None:
            return min(self.path_bw_Bps(a, b) for a, b in zip(ring, ring[1:] + ring[:1], strict=True))
        self.check_ranks(ring)
        src = np.array(ring)
        ids = self._fabric.route_ids(src, np.roll(src, -1))
        return float(self._fabric.bw[ids].min())

    def plane_of(self, a: int | str, b: int | str) -> str:
        """The plane a path runs on ('scaleup', 'scaleout', 'host'): that of its slowest link."""
        edges = self.path(a, b)
        if not edges:
            return "device"
        slow = min(edges, key=lambda e: self._edge_value(e, "bw_Bps"))
        return self._edge_value(slow, "plane")

    # ---- whole collectives' worth of paths at once (network/collectives.py) ------------------
    def check_ranks(self, ranks: Sequence[int]) -> None:
        """`_check_rank` of every rank, in one pass when all are ints in range (the first bad
        one names itself in the error)."""
        if not ranks or set(map(type, ranks)) == {int} and min(ranks) >= 0 and max(ranks) < len(self.devices):
            return
        for r in ranks:
            self._check_rank(r)

    def max_link_time_s(self, flows: Sequence[Flow] | FlowTable) -> float:
        """Concurrent flows (src rank, dst rank, bytes), each on its path: the time of the most
        loaded link, max over links of (bytes routed over it / (bw x efficiency)); 0 for none."""
        if not flows:
            return 0.0
        if self._fabric is None:
            loads: dict[Edge, float] = {}
            path = self.path
            for src, dst, nbytes in flows:
                for e in path(src, dst):
                    loads[e] = loads.get(e, 0.0) + nbytes
            cap = self.capacity_Bps
            return max((load / cap(e) for e, load in loads.items()), default=0.0)
        if isinstance(flows, FlowTable):   # the ranks checked once per pair list, with its routes
            return self._fabric.max_link_time_s(flows.src, flows.dst, flows.nbytes, check=self._check_ends)
        table = np.array(flows, dtype=float)
        ends = table[:, :2].astype(np.int64)
        if (ends != table[:, :2]).any() or ends.min() < 0 or ends.max() >= len(self.devices):
            self.check_ranks([r for f in flows for r in f[:2]])   # names the bad rank
        return self._fabric.max_link_time_s(ends[:, 0], ends[:, 1], table[:, 2])

    def _check_ends(self, src: np.ndarray, dst: np.ndarray) -> None:
        """The range check of a FlowTable's ranks (the first bad one names itself)."""
        n = len(self.devices)
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            self.check_ranks([int(r) for pair in zip(src, dst, strict=True) for r in pair])

    def all_to_all_link_time_s(self, ranks: Sequence[int], bytes_per_pair: float) -> float | None:
        """``max_link_time_s`` of the flows of a uniform all-to-all over ``ranks`` (every ordered pair
        of distinct ranks, ``bytes_per_pair`` each), counted per link level without listing the pairs
        (Fabric.all_to_all_link_time_s); None for an explicit graph, whose links may differ anywhere."""
        if self._fabric is None:
            return None
        self.check_ranks(ranks)
        return self._fabric.all_to_all_link_time_s(np.asarray(ranks, dtype=np.int64), bytes_per_pair)

    def max_path_latency_s(self, pairs: Iterable[tuple[int, int]] | FlowTable) -> float:
        """The largest path latency over (src rank, dst rank) pairs (or a FlowTable's flows); 0.0
        for none."""
        if isinstance(pairs, FlowTable) and self._fabric is not None:
            if not len(pairs):
                return 0.0
            routes = self._fabric.routes(pairs.src, pairs.dst, check=self._check_ends)
            return float(self._fabric.path_latency_s(routes.ids).max())
        pairs = [(a, b) for a, b, *_ in pairs]
        if not pairs:
            return 0.0
        if self._fabric is None:
            lat = self.path_latency_s
            return max(lat(a, b) for a, b in pairs)
        ends = np.array(pairs)
        if ends.dtype.kind != "i" or ends.min() < 0 or ends.max() >= len(self.devices):
            self.check_ranks([r for pair in pairs for r in pair])   # names the bad rank
        ids = self._fabric.route_ids(ends[:, 0], ends[:, 1])
        return float(self._fabric.path_latency_s(ids).max())

    def fully_linked(self, ranks: Sequence[int]) -> bool:
        """Whether every ordered pair of distinct ranks has its own direct link (a full mesh)."""
        if self._fabric is None:
            g, ids = self.graph, self.devices
            return all(g.has_edge(ids[a], ids[b]) for a in ranks for b in ranks if a != b)
        if len(ranks) < 2:
            return True
        nodes = {self.node_of(r) for r in ranks}
        return len(nodes) == 1 and self._fabric.is_mesh_node(nodes.pop())


def _contiguous_runs(labels: list[int]) -> dict[int, Sequence[int]]:
    """label -> range of the positions holding it, for labels that each occupy one run."""
    values = np.asarray(labels)
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    return {label: range(s, e) for label, s, e in zip(values[starts].tolist(), starts.tolist(), ends.tolist(),
                                                        strict=True)}


# =========================================================================================
# Loading
# =========================================================================================
def load_topology(spec: str | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                  max_devices: int | None = None, spec_source: str | None = None) -> Topology:
    """A preset name, a YAML path or a mapping (`{preset: dgx-h100, nodes: 16}`) -> Topology.

    `overrides` are preset parameters merged over the file (as `--set topology.nodes=16` gives);
    more devices than `max_devices` (default: the scenario's limits.max_devices) are refused before
    the graph is built. An error in a key the caller wrote (the overrides, or a mapping spec's keys
    besides its preset) names it as `topology.<field>` where it was written: "--set" for the
    overrides, `spec_source` (e.g. the scenario's file) for the mapping; an error in the preset's own
    file names that file."""
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, Mapping) and "preset" in spec:
        _check_preset_name(spec["preset"], spec_source)
    written = dict(spec) if isinstance(spec, Mapping) else {}
    written.pop("preset", None)
    given = dict(overrides or {})
    try:
        if isinstance(spec, Mapping) and "preset" in spec:
            base, source = resolve("topologies", spec["preset"], field="topology.preset")
            mapping = _merge(_without_replaced_size(base, written), _device_over_base(base, written))
        else:
            mapping, source = resolve("topologies", dict(spec) if isinstance(spec, Mapping) else spec)
        mapping = _merge(_without_replaced_size(mapping, given), _device_over_base(mapping, given))
        mapping.pop("preset", None)
        name = str(mapping.get("name") or (spec if isinstance(spec, str) else "custom"))
        description = str(mapping.get("description", ""))
        with _cyclic_gc_paused():
            if "graph" in mapping:
                return _build_explicit(name, description, mapping, source)
            return _build_hierarchical(name, description, mapping, source,
                                       Limits().max_devices if max_devices is None else max_devices)
    except RlsimError as exc:
        raise _as_written(exc, ((given, "--set"), (written, spec_source))) from None


def _check_preset_name(preset: Any, source: str | None) -> None:
    """A mapping's `preset:` names a preset or a YAML file: a mapping, list or number there (`--set
    topology.preset.foo=1` made one of the name) is refused by that key, its fix the keys beside it."""
    if isinstance(preset, (str, Path)):
        return
    shown = "a mapping" if isinstance(preset, Mapping) else f"{preset!r}"
    raise RlsimError(f"topology.preset names a preset or a YAML file, not {shown}", source=source,
                     field="topology.preset",
                     fix=f"give topology.preset one of {', '.join(preset_names('topologies'))} or a path, and the "
                         "topology's own keys beside it (topology.nodes, topology.device.<field>, ...), not under it")


def _as_written(exc: RlsimError, layers: Iterable[tuple[Mapping[str, Any], str | None]]) -> RlsimError:
    """``exc`` re-named where its field was written: the first layer (keys, label) holding the
    field's dotted path, or a field a cross-field check read beside it (``exc.related``: one side of
    a conflict), as `topology.<field>` in that label; a field missing everywhere, in the first layer
    that wrote its parent (`--set topology.groups.x.nodes=1` made group x, which has no device);
    else ``exc`` as it is."""
    read = [name.split(".") for name in (exc.field, *exc.related) if name]
    layers = list(layers)
    for shorter in (0, 1):
        for keys, label in layers:
            if label and any(len(parts) - shorter >= 1 and _holds(keys, parts[:len(parts) - shorter])
                             for parts in read):
                return RlsimError(exc.message, source=label, field=f"topology.{exc.field}", fix=exc.fix,
                                  related=[f"topology.{name}" for name in exc.related])
    return exc


def _holds(keys: Mapping[str, Any], path: Sequence[str]) -> bool:
    node: Any = keys
    for part in path:
        node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
    return node is not _ABSENT


_ABSENT = object()


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Build without the cyclic garbage collector: a 24,576-device graph is ~190k small dicts, and
    each full collection the allocations trigger walks all the graph built so far, which made the
    build superlinear (issue 13: 40-50% of its CPU time). A cycle the build leaves is reclaimed by
    the first collection after it; the collector is back on (if it was on) when the build returns
    or raises."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _without_replaced_size(base: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """`base` less its size keys (nodes / domains / supernodes / racks) when `given` sizes the
    cluster: a preset's `nodes: 1` is a default that `{preset: dgx-h100, supernodes: 2}` replaces,
    in whichever unit (two size keys given together stay an error)."""
    if not any(given.get(k) is not None for k in _COUNT_KEYS):
        return base
    return {k: v for k, v in base.items() if k not in _COUNT_KEYS}


def _device_over_base(base: Mapping[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` with a device mapping that names no device (`{gemm_efficiency: 0.6}`, as `--set
    topology.device.gemm_efficiency=0.6` gives) over the base's catalog device: it overrides that
    device's fields instead of describing a new device from scratch."""
    out = dict(given)
    device, under = given.get("device"), base.get("device")
    if _unnamed(device) and isinstance(under, str):
        out["device"] = {"base": under, **device}
    elif _unnamed(device) and under is None and isinstance(base.get("groups"), Mapping):
        # groups that each name their device: the fields lay over every group's (a shared device
        # would be read past by every such group), a group's own given fields over them
        out.pop("device")
        out["groups"] = _groups_with_device_fields(base["groups"], given.get("groups"), device)
        return out
    groups, base_groups = given.get("groups"), base.get("groups")
    if isinstance(groups, Mapping) and isinstance(base_groups, Mapping):   # a group's device likewise
        out["groups"] = dict(groups)
        for name, group in groups.items():
            base_group = base_groups.get(name)
            under = base_group.get("device") if isinstance(base_group, Mapping) else None
            if isinstance(group, Mapping) and _unnamed(group.get("device")) and isinstance(under, str):
                out["groups"][name] = {**group, "device": {"base": under, **group["device"]}}
    return out


def _groups_with_device_fields(base_groups: Mapping[str, Any], given_groups: Any,
                               fields: Mapping[str, Any]) -> dict[str, Any]:
    """`given_groups` with `fields` (an unnamed device mapping given for the whole topology) laid
    over each base group's device: its catalog name as the base, or its own mapping; the group's
    own given device fields over them."""
    given_groups = given_groups if isinstance(given_groups, Mapping) else {}
    out = dict(given_groups)
    for name, base_group in base_groups.items():
        entry = given_groups.get(name)
        entry = dict(entry) if isinstance(entry, Mapping) else {}
        own = entry.get("device")
        under = base_group.get("device") if isinstance(base_group, Mapping) else None
        if isinstance(own, str) or (isinstance(own, Mapping) and not _unnamed(own)):
            continue   # the group names its device anew: nothing to lay over
        if isinstance(under, str):
            under = {"base": under}
        if not isinstance(under, Mapping):
            continue
        out[name] = {**entry, "device": {**under, **fields, **(own or {})}}
    return out


def _unnamed(device: Any) -> bool:
    """A device mapping that names no device (fields to lay over the one it replaces)."""
    return isinstance(device, Mapping) and not {"name", "base"} & set(device)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# A link rate or latency given as a bare number is read in SI base units (bytes/s, seconds); one
# past these bounds is a unit left out (nic_bw: 400 meant 400 Gb/s and ran at 400 B/s: a step of
# 7.3 million s), refused rather than simulated. No network link is slower than 1 MB/s, and none
# has a latency of 100 ms (a cross-site link: tens of ms; latency: 0.5 meant 0.5 us).
MIN_BARE_LINK_BPS = 1e6
MAX_BARE_LINK_LATENCY_S = 0.1


class _Reader:
    """Field access on a YAML mapping that names the file and the dotted field on error."""

    def __init__(self, mapping: Mapping[str, Any], source: str, prefix: str = "") -> None:
        if not isinstance(mapping, Mapping):
            raise RlsimError(f"expected a mapping, got {mapping!r}", source=source, field=prefix or None,
                             fix=f"give {prefix or 'it'} as a mapping of its keys (see docs/scenario-reference.md), "
                                 f"or leave it out for its defaults")
        self.m, self.source, self.prefix = mapping, source, prefix

    def where(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def sub(self, key: str) -> _Reader | None:
        value = self.m.get(key)
        return None if value is None else _Reader(value, self.source, self.where(key))

    def require(self, key: str, fix: str) -> Any:
        if self.m.get(key) is None:
            raise RlsimError("missing required field", source=self.source, field=self.where(key), fix=fix)
        return self.m[key]

    def count(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.m.get(key, default)
        if value is None:
            raise RlsimError("missing required field", source=self.source, field=self.where(key),
                             fix="give a whole number")
        # 2e0 is 2; np.int64(2) is 2 (a notebook's topology mapping)
        whole = whole_number(value) is not None or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole or value < minimum:
            near = max(minimum, int(value)) if isinstance(value, (int, float)) and math.isfinite(value) else minimum
            raise RlsimError(f"expected a whole number >= {minimum}, got {value!r}", source=self.source,
                             field=self.where(key), fix=f"give a whole number >= {minimum}, e.g. {key}: {near}")
        return int(value)

    def positive(self, key: str, parser, default: float) -> float:
        raw = self.m.get(key)
        value = default if raw is None else parser(raw, self.where(key), self.source)
        if not value > 0:
            raise RlsimError(f"must be > 0, got {raw!r}", source=self.source, field=self.where(key),
                             fix="give a positive quantity, e.g. '400Gb/s'")
        if parser is parse_bandwidth and is_unitless(raw) and 0 < value < MIN_BARE_LINK_BPS:
            raise RlsimError(f"{raw!r} reads as {raw} bytes/s (a bare number is bytes/s): no link is that slow",
                             source=self.source, field=self.where(key),
                             fix=f"give the unit, e.g. '{raw}Gb/s' or '{raw}GB/s'")
        return value

    def latency(self, key: str, default: float) -> float:
        raw = self.m.get(key)
        value = default if raw is None else parse_seconds(raw, self.where(key), self.source)
        if value < 0:
            raise RlsimError(f"must be >= 0, got {raw!r}", source=self.source, field=self.where(key))
        if is_unitless(raw) and value > MAX_BARE_LINK_LATENCY_S:
            raise RlsimError(f"{raw!r} reads as {raw} s (a bare number is seconds): no link is that slow",
                             source=self.source, field=self.where(key), fix=f"give the unit, e.g. '{raw}us'")
        return value

    def fraction(self, key: str, default: float) -> float:
        value = self.m.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise RlsimError(f"must be a number in (0, 1], got {value!r}", source=self.source,
                             field=self.where(key), fix="give the share of the peak it reaches, e.g. 0.8")
        return float(value)

    def number(self, key: str, default: float, minimum: float = 0.0) -> float:
        value = self.m.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < minimum:
            raise RlsimError(f"must be a number >= {minimum}, got {value!r}", source=self.source,
                             field=self.where(key))
        return float(value)

    def link(self, key_bw: str, default_bw: float, default_latency: float, default_eff: float) -> _LinkSpec:
        return _LinkSpec(self.positive(key_bw, parse_bandwidth, default_bw),
                         self.latency("latency", default_latency), self.fraction("efficiency", default_eff))

    def check_keys(self, allowed: Iterable[str]) -> None:
        allowed = set(allowed)
        for key in self.m:
            if key not in allowed:
                fix = f"use one of: {', '.join(sorted(allowed))}"
                if not self.prefix and _WORKLOAD_KEYS & set(self.m):
                    fix = "this is a workload file, not a topology: give it as --workload FILE"
                raise RlsimError(f"unknown field {key!r}{one_typo_from(key, allowed)}", source=self.source,
                                 field=self.where(key), fix=fix)


# Keys of a workload file (workloads/*.yaml): a topology given one is a workload file passed as --topology
_WORKLOAD_KEYS = frozenset({"model", "prompts_per_step", "samples_per_prompt", "response_length"})


_TOP_KEYS = {"name", "description", "sources", "collectives", "device", "devices_per_node", "nodes", "domains", "supernodes",
             "racks", "nodes_per_domain", "scaleup", "scaleout", "host", "groups",
             "device_profile"}  # device_profile: a calibrated profile YAML (hardware/profiles.py)
_GROUP_KEYS = _TOP_KEYS - {"name", "description", "sources", "collectives", "groups", "scaleout"} | {"nic_bw"}
# the fields of the link sections (_group_plan, _build_hierarchical read these and no others)
_SCALEUP_KEYS = {"kind", "bw", "latency", "efficiency", "oversubscription", "max_devices"}
_SCALEOUT_KEYS = {"nic_bw", "nodes_per_leaf", "oversubscription", "latency", "efficiency"}
_HOST_KEYS = {"bw", "latency", "efficiency"}
_COUNT_KEYS = ("nodes", "domains", "supernodes", "racks")


def _section(reader: _Reader, key: str, allowed: set[str]) -> dict[str, Any]:
    """A link section of a file or group (`scaleup`, `host`): {} when absent; a value that is not
    a mapping, or an unknown field in it, is an error naming its dotted field."""
    value = reader.m.get(key)
    if value is None:
        return {}
    section = _Reader(value, reader.source, reader.where(key))
    section.check_keys(allowed)
    return dict(value)


def _device_spec(raw: Any, source: str, field: str, profile: Any = None) -> DeviceSpec:
    """A device entry, with a calibrated profile applied when the entry (`device: {name: cpu,
    profile: PATH}`, an explicit node's `profile:`) or the topology (`device_profile:`) names one."""
    return _profiled_device(raw, source, field, profile)[0]


def _profiled_device(raw: Any, source: str, field: str, profile: Any = None,
                     profile_field: str = "device_profile") -> tuple[DeviceSpec, DeviceSpec, str]:
    """(the device with its profile applied, the device without it, the profile's dotted field)."""
    if isinstance(raw, Mapping) and "profile" in raw:
        raw = dict(raw)
        profile, profile_field = raw.pop("profile"), f"{field}.profile"
    spec = device_from_mapping(raw, source, field)
    if profile is None:
        return spec, spec, profile_field
    from .profiles import device_with_profile
    base = Path(source).parent if source and Path(source).exists() else None
    return device_with_profile(spec, profile, base_dir=base, source=source, field=profile_field), spec, profile_field


def _check_collectives(mapping: Mapping[str, Any], source: str) -> None:
    """The `collectives:` section's fields (collective_params.py; network/collectives.py prices with
    them), read with the topology (the cost model read them first, past where an error names the
    --set item)."""
    if mapping.get("collectives") is not None:
        _Reader(mapping["collectives"], source, "collectives")
        CollectiveParams.from_mapping(mapping["collectives"], source)


def _build_hierarchical(name: str, description: str, mapping: dict[str, Any], source: str,
                        max_devices: int) -> Topology:
    top = _Reader(mapping, source)
    top.check_keys(_TOP_KEYS)
    _check_collectives(mapping, source)
    groups_raw = mapping.get("groups")
    if groups_raw is None:
        groups = [("main", top)]
    else:
        if not isinstance(groups_raw, Mapping) or not groups_raw:
            raise RlsimError("groups must be a non-empty mapping name -> group", source=source, field="groups")
        groups = [(str(k), _Reader(v, source, f"groups.{k}")) for k, v in groups_raw.items()]
        for _, g in groups:
            g.check_keys(_GROUP_KEYS)

    out_r = top.sub("scaleout")
    if out_r is not None:
        out_r.check_keys(_SCALEOUT_KEYS)
    nodes_per_leaf = out_r.count("nodes_per_leaf", DEFAULT_NODES_PER_LEAF) if out_r else DEFAULT_NODES_PER_LEAF
    plans: list[GroupPlan] = []
    num_devices = num_domains = 0
    for gname, g in groups:
        plan = _group_plan(gname, g, top, out_r, num_devices, max_devices, may_be_empty=groups_raw is not None)
        if not plan.num_nodes:   # a group of 0 nodes is left out (a sweep over "with and without it")
            continue
        plans.append(plan)
        num_devices += plan.num_nodes * plan.per_node
        num_domains += plan.num_nodes // plan.per_domain
    if not plans:
        raise RlsimError("every group has 0 nodes: the topology has no devices", source=source,
                         field=f"groups.{groups[0][0]}.nodes", fix="give at least one group a node")

    scaleout = None
    if out_r is not None:
        scaleout = ScaleoutPlan(nodes_per_leaf, out_r.number("oversubscription", 1.0, minimum=1.0),
                                out_r.latency("latency", DEFAULT_SCALEOUT_LATENCY_S),
                                out_r.fraction("efficiency", DEFAULT_SCALEOUT_EFFICIENCY))
    if groups_raw is not None:
        stray = [k for k in _COUNT_KEYS if top.m.get(k) is not None]
        if stray:   # related: the groups' side of it, so the --set that gave them is named
            raise RlsimError("with groups, counts belong to each group", source=source, field=stray[0],
                             related=["groups"],
                             fix=f"set groups.NAME.{stray[0]} instead (--set topology.groups.NAME.{stray[0]}=N; "
                                 f"groups here: {', '.join(name for name, _ in groups)}); groups given over a "
                                 f"preset of one kind also clear its count and device: --set "
                                 f"topology.{stray[0]}=null --set topology.device=null")
        if top.m.get("device") is not None and all("device" in g.m for _, g in groups):
            raise RlsimError(f"every group names its own device, so the topology's device ({top.m['device']!r}) "
                             "would be read past", source=source, field="device",
                             fix="set groups.NAME.device for the group it is meant for, or give device fields "
                                 "without a name (--set topology.device.gemm_efficiency=...): they lay over "
                                 "every group's device")
    if num_domains > 1 and out_r is None:
        raise RlsimError(f"{num_domains} scale-up domains but no scale-out network joins them (disconnected graph)",
                         source=source, field="scaleout", fix="add scaleout: {nic_bw: 400Gb/s} or use one domain")
    # Connected by construction: one domain is joined by its scale-up network (a mesh domain is one
    # server), and with more than one every device has a NIC on a leaf under the one spine.
    fabric = Fabric(plans, scaleout)
    devices = [f"dev{r}" for r in range(fabric.num_devices)]
    return Topology(name, source, None, devices, fabric.specs, None, description, mapping.get("collectives"),
                    fabric=fabric)


def _check_link_given_once(dev_raw: Any, dev_field: str, section: _Reader, device_key: str,
                           profiled: tuple[DeviceSpec, DeviceSpec, str]) -> None:
    """A device mapping's link rate (scaleup_bw_Bps / host_link_bw_Bps), or a device profile's
    measured one, is only the default of the link section's `bw`: given beside that `bw` it would
    be read past, so it is an error. ``profiled``: _profiled_device's triple."""
    if section.m.get("bw") is None:
        return
    bw = section.where("bw")
    if isinstance(dev_raw, Mapping) and device_key in dev_raw:
        raise RlsimError(f"{device_key} is the default of {bw}, which this topology sets "
                         f"({section.m['bw']}): the device's value would be read past", source=section.source,
                         field=f"{dev_field}.{device_key}",
                         fix=f"set the topology's {bw} instead (--set topology.{bw}=...)")
    spec, plain, profile_field = profiled
    if getattr(spec, device_key) != getattr(plain, device_key):
        raise RlsimError(f"the device profile's measured {device_key} ({getattr(spec, device_key):.4g} B/s) is the "
                         f"default of {bw}, which this topology sets ({section.m['bw']}): one of the two would be "
                         "read past", source=section.source, field=profile_field,
                         fix=f"to use the measured rate, unset the topology's (--set topology.{bw}=null); to keep the "
                             f"topology's, drop {device_key} from the profile")


def _device_and_profile(g: _Reader, top: _Reader, dev_raw: Any, dev_field: str) -> tuple[Any, Any]:
    """(device entry, profile path or None) of one group: the profile of the more specific level wins
    (a group's own `device_profile` over a `profile:` in the file's shared device entry, a group's
    own device entry's `profile:` over the file's `device_profile`); both at one level is an error,
    as one of them would be read past."""
    entry_has = isinstance(dev_raw, Mapping) and "profile" in dev_raw
    entry_level = g if "device" in g.m else top
    profile_level = g if "device_profile" in g.m else top if "device_profile" in top.m else None
    if not entry_has or profile_level is None:
        return dev_raw, g.m.get("device_profile", top.m.get("device_profile"))
    if entry_level is profile_level:
        raise RlsimError("a device profile is given twice: the device entry's profile and device_profile beside it; "
                         "one would be read past", source=top.source, field=f"{dev_field}.profile",
                         fix=f"keep one of {dev_field}.profile and {profile_level.where('device_profile')} (from the "
                             f"command line, --set topology.{dev_field}.profile=PATH replaces the entry's)")
    if profile_level is g:   # the group's own device_profile over the shared entry's profile
        return {k: v for k, v in dev_raw.items() if k != "profile"}, g.m["device_profile"]
    return dev_raw, None     # the group's own entry's profile over the file's device_profile


def _group_plan(gname: str, g: _Reader, top: _Reader, out_r: _Reader | None, devices_before: int,
                max_devices: int, may_be_empty: bool = False) -> GroupPlan:
    """One group's (or the whole file's) devices, counts and links, checked; a group (``may_be_empty``)
    may count 0 nodes."""
    source = top.source

    def get(key: str) -> Any:
        return g.m.get(key, top.m.get(key))

    dev_field = g.where("device") if "device" in g.m or g is not top else "device"
    dev_raw = get("device")
    if dev_raw is None:
        import difflib
        others = [str(k) for k in (top.m.get("groups") or {}) if str(k) != gname]
        close = difflib.get_close_matches(gname, others, n=1)
        if close and g is not top:   # a size given to a group name one typo away: a new group without a device
            raise RlsimError(f"group {gname!r} is not a group of this topology (it has {', '.join(others)}) and "
                             "names no device", source=source, field=g.where("device"),
                             fix=f"did you mean groups.{close[0]}? (a new group needs its own device: ...)")
        raise RlsimError("missing required field", source=source, field=dev_field,
                         fix="name a device, e.g. device: h100")
    entry, profile = _device_and_profile(g, top, dev_raw, dev_field)
    profiled = _profiled_device(entry, source, dev_field, profile,
                                g.where("device_profile") if "device_profile" in g.m else "device_profile")
    spec = profiled[0]
    per_node = g.count("devices_per_node", top.m.get("devices_per_node", 8))
    per_domain = g.count("nodes_per_domain", top.m.get("nodes_per_domain", 1))
    given = [k for k in _COUNT_KEYS if g.m.get(k) is not None]
    if len(given) != 1:
        raise RlsimError(f"give exactly one of {', '.join(_COUNT_KEYS)} (got {given or 'none'})",
                         source=source, field=g.where("nodes"),
                         fix="e.g. nodes: 2 (servers) or supernodes: 1 / racks: 1 (scale-up domains)")
    count = g.count(given[0], minimum=0 if may_be_empty else 1)
    num_nodes = count if given[0] == "nodes" else count * per_domain
    if num_nodes % per_domain:
        raise RlsimError(f"{num_nodes} nodes do not fill domains of {per_domain} nodes", source=source,
                         field=g.where("nodes"), fix=f"use a multiple of nodes_per_domain={per_domain}",
                         related=[g.where("nodes_per_domain")])
    if devices_before + num_nodes * per_node > max_devices:
        raise RlsimError(f"{devices_before + num_nodes * per_node:,} devices is past limits.max_devices="
                         f"{max_devices:,}", source=source, field=g.where(given[0]),
                         fix=LIMITS_FIX.format(name="max_devices"))
    up_r = _Reader(_merge(_section(top, "scaleup", _SCALEUP_KEYS), _section(g, "scaleup", _SCALEUP_KEYS)),
                   source, g.where("scaleup") if "scaleup" in g.m else "scaleup")
    if up_r.m.get("max_devices") is not None:   # the domain's physical size (an NVL72 rack: 72 GPUs)
        largest = up_r.count("max_devices")
        if per_node * per_domain > largest:
            raise RlsimError(f"{per_domain} nodes of {per_node} devices is {per_node * per_domain} devices in one "
                             f"scale-up domain, past its {largest}", source=source, field=g.where("nodes_per_domain"),
                             fix=f"give at most {largest // per_node} nodes per domain (scaleup.max_devices "
                                 f"{largest}), and more domains for more devices")
    up_kind = up_r.m.get("kind", "switch")
    if up_kind not in ("switch", "two-tier", "mesh"):
        raise RlsimError(f"unknown scale-up kind {up_kind!r}", source=source, field=up_r.where("kind"),
                         fix="use switch, two-tier or mesh")
    if up_kind != "two-tier" and up_r.m.get("oversubscription", 1) != 1:   # only a two-tier domain has uplinks
        raise RlsimError(f"oversubscription applies to a two-tier scale-up (its L1 -> L2 uplinks); a {up_kind} "
                         "has none, so it would be read past", source=source, field=up_r.where("oversubscription"),
                         fix="remove it, or set scaleup.kind: two-tier")
    if up_kind == "mesh" and per_domain != 1:
        raise RlsimError("a full-mesh scale-up spans one server", source=source,
                         field=g.where("nodes_per_domain"), fix="set nodes_per_domain: 1")
    _check_link_given_once(dev_raw, dev_field, up_r, "scaleup_bw_Bps", profiled)
    # a full mesh's scaleup.bw is one link's, and a device has one to each peer: its scale-up rate (the
    # catalog's, what reads it off the device) is theirs together (910B: 7 x 28 = 196 GB/s; it was 28)
    peers = per_node - 1 if up_kind == "mesh" and per_node > 1 else 1
    up = up_r.link("bw", spec.scaleup_bw_Bps / peers, DEFAULT_SCALEUP_LATENCY_S, DEFAULT_SCALEUP_EFFICIENCY)
    uplink_bw = per_node * up.bw_Bps / up_r.number("oversubscription", 1.0, minimum=1.0)
    host_r = _Reader(_merge(_section(top, "host", _HOST_KEYS), _section(g, "host", _HOST_KEYS)), source,
                     g.where("host") if "host" in g.m else "host")
    _check_link_given_once(dev_raw, dev_field, host_r, "host_link_bw_Bps", profiled)
    host = host_r.link("bw", spec.host_link_bw_Bps, DEFAULT_HOST_LATENCY_S, DEFAULT_HOST_EFFICIENCY)
    if (up.bw_Bps * peers, host.bw_Bps) != (spec.scaleup_bw_Bps, spec.host_link_bw_Bps):
        # the device's link rates are those of its links here: what reads them off the device (host
        # copies, a one-device ring) takes the topology's scaleup.bw / host.bw, as the graph does
        spec = dataclasses.replace(spec, scaleup_bw_Bps=up.bw_Bps * peers, host_link_bw_Bps=host.bw_Bps)
    nic = None
    if out_r is None and "nic_bw" in g.m:   # one domain, no scale-out plane: the NIC carries nothing
        raise RlsimError("nic_bw applies to the scale-out plane, and this topology has none (one domain)",
                         source=source, field=g.where("nic_bw"),
                         fix="remove nic_bw, or give a scaleout: section (several domains)")
    if out_r is not None:
        out_defaults = out_r.m
        nic_reader = _Reader({**out_defaults, "nic_bw": g.m.get("nic_bw", out_defaults.get("nic_bw"))}, source,
                             g.prefix if "nic_bw" in g.m else "scaleout")   # the reader adds "nic_bw"
        nic = _LinkSpec(nic_reader.positive("nic_bw", parse_bandwidth, 0.0),
                        out_r.latency("latency", DEFAULT_SCALEOUT_LATENCY_S),
                        out_r.fraction("efficiency", DEFAULT_SCALEOUT_EFFICIENCY))
    return GroupPlan(gname, spec, per_node, per_domain, num_nodes, up_kind, up, uplink_bw, host, nic)


def _check_node_given_on_all_or_none(node_given: list[tuple[bool, str]], source: str) -> None:
    """A device without `node` is a server of its own, numbered by its device index, which may be a
    server number another device names: every device gives its server, or none does."""
    if any(given for given, _ in node_given) and not all(given for given, _ in node_given):
        where = next(field for given, field in node_given if not given)
        raise RlsimError("this device gives no node where others do (it would be numbered by its device index, "
                         "which may be another device's server)", source=source, field=where,
                         fix="give node: N on every device (or on none: one server a device)")


def _check_servers_in_one_domain(graph: nx.DiGraph, devices: list[str], nodes: list[Any], source: str) -> None:
    """Every device of one server (graph node attribute `node`) names one scale-up domain: a server
    sits inside its domain (the collectives group by domain, the layouts by server within it)."""
    position = {str(raw.get("id")): i for i, raw in enumerate(nodes)}   # every entry is a mapping with an id by now
    first: dict[int, tuple[int, str]] = {}
    for device in devices:
        node, domain = graph.nodes[device]["node"], graph.nodes[device]["domain"]
        seen_domain, seen = first.setdefault(node, (domain, device))
        if domain != seen_domain:
            raise RlsimError(f"device {device!r} is on node {node} with {seen!r}, which is in domain {seen_domain}, "
                             f"but it says domain {domain}", source=source,
                             field=f"graph.nodes[{position[device]}].domain",
                             fix=f"a server sits inside one scale-up domain: give every device of node {node} "
                                 f"domain {seen_domain}, or give {device!r} a node of its own")


def _build_explicit(name: str, description: str, mapping: dict[str, Any], source: str) -> Topology:
    top = _Reader(mapping, source)
    top.check_keys({"name", "description", "sources", "collectives", "graph", "device_profile"})
    _check_collectives(mapping, source)
    graph_r = top.sub("graph")
    assert graph_r is not None
    graph_r.check_keys({"nodes", "links"})
    nodes = graph_r.require("nodes", "list the nodes: [{id: g0, kind: device, device: h100, node: 0}, ...]")
    links = graph_r.require("links", "list the links: [{a: g0, b: sw0, bw: 450GB/s, plane: scaleup}, ...]")
    if not isinstance(nodes, list) or not isinstance(links, list):
        raise RlsimError("nodes and links must be lists", source=source, field="graph")
    import networkx as nx
    g = nx.DiGraph()
    devices: list[str] = []
    specs: list[DeviceSpec] = []
    node_given: list[tuple[bool, str]] = []   # (device gave `node`, its field) per device
    for i, raw in enumerate(nodes):
        r = _Reader(raw, source, f"graph.nodes[{i}]")
        r.check_keys({"id", "kind", "device", "node", "domain", "profile"})
        node_id = str(r.require("id", "give every node a unique id"))
        kind = r.m.get("kind", "device" if "device" in r.m else "switch")
        if kind not in ("device", "switch", "host", "nic"):
            raise RlsimError(f"unknown node kind {kind!r}", source=source, field=r.where("kind"),
                             fix="use device, switch, host or nic")
        if kind != "device":   # a device's keys on another kind would be read past
            r.check_keys({"id", "kind", "node"})
        if node_id in g:
            raise RlsimError(f"duplicate node id {node_id!r}", source=source, field=r.where("id"))
        attrs: dict[str, Any] = {"kind": kind}
        if kind == "device":
            spec = _device_spec(r.require("device", "name a catalog device, e.g. h100"), source,
                                r.where("device"), r.m.get("profile", mapping.get("device_profile")))
            node = r.count("node", len(devices), minimum=0)
            node_given.append(("node" in r.m, r.where("node")))
            attrs.update(rank=len(devices), device=spec.name, node=node,
                         domain=r.count("domain", node, minimum=0))
            devices.append(node_id)
            specs.append(spec)
        elif "node" in r.m:
            attrs["node"] = r.count("node", 0, minimum=0)
        g.add_node(node_id, **attrs)
    if not devices:
        raise RlsimError("the graph has no device", source=source, field="graph.nodes",
                         fix="add nodes of kind device")
    _check_node_given_on_all_or_none(node_given, source)
    _check_servers_in_one_domain(g, devices, nodes, source)
    for i, raw in enumerate(links):
        r = _Reader(raw, source, f"graph.links[{i}]")
        r.check_keys({"a", "b", "bw", "latency", "efficiency", "plane", "duplex"})
        a = str(r.require("a", "name the link's first node id"))
        z = str(r.require("b", "name the link's second node id"))
        for end, key in ((a, "a"), (z, "b")):
            if end not in g:
                raise RlsimError(f"unknown node {end!r}", source=source, field=r.where(key),
                                 fix="declare it under graph.nodes")
        r.require("bw", "give the per-direction bandwidth, e.g. bw: 400Gb/s")
        if a == z:   # its duplex pair would be itself: said as "given twice" before
            raise RlsimError(f"a link from {a!r} to itself", source=source, field=r.where("b"),
                             fix="give the node at the other end of the link")
        plane = r.m.get("plane", "scaleout")
        if plane not in PLANES:
            raise RlsimError(f"unknown plane {plane!r}", source=source, field=r.where("plane"),
                             fix=f"use one of {', '.join(PLANES)}")
        latency, efficiency = _PLANE_DEFAULTS[plane]
        attrs = {"bw_Bps": r.positive("bw", parse_bandwidth, 0.0), "latency_s": r.latency("latency", latency),
                 "efficiency": r.fraction("efficiency", efficiency), "plane": plane}
        duplex = r.m.get("duplex", True)
        if not isinstance(duplex, bool):
            raise RlsimError(f"expected true or false, got {duplex!r}", source=source, field=r.where("duplex"),
                             fix="write duplex: true (both directions, the default) or false")
        for u, v in ((a, z), (z, a)) if duplex else ((a, z),):
            if g.has_edge(u, v):   # a second link would replace the first without a word
                raise RlsimError(f"a link from {u!r} to {v!r} is given twice", source=source, field=r.where("a"),
                                 fix="give each link once (one bandwidth per direction)")
            g.add_edge(u, v, **dict(attrs))
    if not nx.is_weakly_connected(g):
        parts = sorted(nx.weakly_connected_components(g), key=lambda c: -len(c))
        stray = sorted(parts[1])[:3]
        raise RlsimError(f"the graph is disconnected ({len(parts)} parts; e.g. {stray} cannot reach the rest)",
                         source=source, field="graph.links", fix="add links that join every part")
    return Topology(name, source, g, devices, specs, None, description, mapping.get("collectives"))
