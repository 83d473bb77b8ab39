"""The cluster as a directed networkx graph: devices, switches, hosts and links, plus queries.

Two YAML forms build the same graph (docs/network.md has the schema):
- hierarchical: servers of `devices_per_node` devices, `nodes_per_domain` servers per scale-up
  domain (NVSwitch / UB / NVL72), a rail-optimized leaf-spine scale-out fabric, one host per server;
  `groups` puts several device kinds in one graph.
- explicit: `graph: {nodes: [...], links: [...]}`.

Routing is structural where the graph is a tree per plane (every hierarchical preset): a node's
parent per plane is kept, and a path climbs to the lowest common ancestor in the fastest plane that
joins both ends. Anything else (explicit graphs, host-to-remote paths) falls back to a cached
networkx shortest path. Both are deterministic.
"""
from __future__ import annotations

import contextlib
import copy
import gc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from ..errors import RlsimError
from ..presets import resolve
from ..scenario import LIMITS_FIX, Limits
from ..units import parse_bandwidth, parse_seconds
from .devices import DeviceSpec, device_from_mapping

Edge = tuple[str, str]
PLANES = ("scaleup", "scaleout", "host")
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
DEFAULT_NODES_PER_LEAF = 32  # a 64-port NDR leaf (Quantum-2 QM9700): 32 ports down, 32 up, non-blocking
# Routing weight, not a physical figure: a path costs its latency plus the time to move 1 GB, so
# wider links win over fewer hops.
_ROUTE_PROBE_BYTES = 1e9


@dataclass(frozen=True)
class _LinkSpec:
    bw_Bps: float
    latency_s: float
    efficiency: float


class Topology:
    """A built cluster graph and its queries. Build it with `load_topology`."""

    def __init__(self, name: str, source: str, graph: nx.DiGraph, devices: list[str],
                 specs: list[DeviceSpec], parents: dict[str, dict[str, str]] | None = None,
                 description: str = "", collectives: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.source = source
        self.description = description
        self.collectives = dict(collectives or {})  # raw `collectives:` section, read by network/
        self.graph = graph
        self.devices = devices
        self._specs = specs
        self._parents = parents or {}
        self._index = {node_id: rank for rank, node_id in enumerate(devices)}
        attrs = graph.nodes
        self._node_of = [int(attrs[d]["node"]) for d in devices]
        self._domain_of = [int(attrs[d]["domain"]) for d in devices]
        self._node_ranks: dict[int, list[int]] = {}
        self._domain_ranks: dict[int, list[int]] = {}
        for rank in range(len(devices)):
            self._node_ranks.setdefault(self._node_of[rank], []).append(rank)
            self._domain_ranks.setdefault(self._domain_of[rank], []).append(rank)
        self._domain_first_node = {d: min(self._node_of[r] for r in rs) for d, rs in self._domain_ranks.items()}
        self._path_cache: dict[tuple[int | str, int | str], list[Edge]] = {}  # by ranks and by node ids
        self._latency_cache: dict[tuple[int | str, int | str], float] = {}
        # Usable bandwidth per directed edge, read once from the graph (as paths and latencies are:
        # the graph is not changed after the build). A 24k-device all-reduce plan asks ~200k times.
        self._capacity_cache: dict[Edge, float] = {}
        self._kinds_total = len({id(s) for s in specs})
        self._sig_info: list[tuple] | None = None
        self._cost_graph: nx.DiGraph | None = None

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
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(self.devices):
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
        ranks = [int(r) for r in ranks]
        if ranks and (min(ranks) < 0 or max(ranks) >= len(specs)):
            for r in ranks:   # the first one out of range names itself in the error
                self._check_rank(r)
        for r in ranks:
            s = specs[r]
            if not any(s is k for k in kinds):
                kinds.append(s)
                if len(kinds) == self._kinds_total:
                    break
        return kinds

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

    def group_signature(self, ranks: Iterable[int]) -> tuple:
        """A cache key equal for groups that see the same network (the same paths, link
        capacities and latencies, shared links alike), position by position.

        Hierarchical topologies (symmetric switches): inside one domain only the device group, which
        ranks share a node (node offsets numbered by first appearance) and local positions matter. Across domains, each rank is
        described by its device group, its domain (numbered by first appearance in the group), node
        offset and local position, its scale-out leaf (numbered by first appearance: two ranks share
        a leaf uplink iff they share the label) and the capacities of its NIC and of its leaf's
        uplink (a partly filled leaf group has a narrower one). Explicit graphs: the ranks."""
        ranks = tuple(ranks)
        if not (self._parents and ranks):
            return ("ranks", ranks)
        info = self._signature_info()
        first = info[ranks[0]]
        if all(info[r][1] == first[1] and info[r][0] == first[0] for r in ranks):
            # the nodes of one domain hang off the same scale-up switches alike (switch, two-tier; a
            # mesh domain is one node), so only which ranks share a node matters: node offsets are
            # numbered by first appearance in the group
            nodes: dict[int, int] = {}
            return ("domain", first[0], tuple((nodes.setdefault(info[r][2], len(nodes)), info[r][3]) for r in ranks))
        domains: dict[int, int] = {}
        leaves: dict[Any, int] = {}
        sig = []
        for r in ranks:
            group, domain, offset, local, leaf, nic_Bps, up_Bps = info[r]
            sig.append((group, domains.setdefault(domain, len(domains)), offset, local,
                        leaves.setdefault(leaf, len(leaves)), nic_Bps, up_Bps))
        return ("multi", tuple(sig))

    def _signature_info(self) -> list[tuple]:
        """Per rank: (group, domain, node offset in domain, local, scale-out leaf, NIC capacity,
        leaf uplink capacity); built once."""
        if self._sig_info is None:
            attrs = self.graph.nodes
            up = self._parents.get("scaleout", {})
            out = []
            for dev in self.devices:
                a = attrs[dev]
                leaf = up.get(dev)
                parent = up.get(leaf) if leaf is not None else None
                nic = self.capacity_Bps((dev, leaf)) if leaf is not None and self.graph.has_edge(dev, leaf) else None
                uplink = (self.capacity_Bps((leaf, parent))
                          if parent is not None and self.graph.has_edge(leaf, parent) else None)
                out.append((a.get("group"), a["domain"], a["node"] - self._domain_first_node[a["domain"]],
                            a.get("local"), leaf, nic, uplink))
            self._sig_info = out
        return self._sig_info

    def device_kinds(self) -> list[str]:
        return sorted({s.name for s in self._specs})

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
        out: dict[int, list[int]] = {}
        for r in ranks:
            out.setdefault(self.domain_of(r), []).append(r)
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
            if x not in self.graph:
                raise RlsimError(f"no graph node {x!r}", field="node", fix="use a rank or a node id of the graph")
            return x
        return self.devices[self._check_rank(x)]

    def path(self, a: int | str, b: int | str) -> list[Edge]:
        """Directed edges from a to b (ranks or graph node ids); [] when a == b."""
        # Keyed by what was passed: a hit was checked when it was stored (rank keys are ints, graph
        # node ids strings, so the two never collide); a miss resolves and checks both ends.
        hit = self._path_cache.get((a, b))
        if hit is not None and a.__class__ is not bool and b.__class__ is not bool:
            return hit
        u, v = self._node_id(a), self._node_id(b)
        found = self._path_cache.get((u, v))
        if found is None:
            found = self._route(u, v)
            self._path_cache[(u, v)] = found
        self._path_cache[(a, b)] = found
        return found

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
            raise RlsimError(f"no path from {u!r} to {v!r}", source=self.source, field="links",
                             fix="connect the two parts of the graph") from None
        return list(zip(nodes[:-1], nodes[1:], strict=False))

    def edge(self, e: Edge) -> dict[str, Any]:
        return self.graph.edges[e]

    def capacity_Bps(self, e: Edge) -> float:
        """Usable bandwidth of a directed edge: physical bandwidth x protocol efficiency."""
        hit = self._capacity_cache.get(e)
        if hit is None:
            d = self.graph.edges[e]
            hit = self._capacity_cache[e] = d["bw_Bps"] * d["efficiency"]
        return hit

    def path_latency_s(self, a: int | str, b: int | str) -> float:
        hit = self._latency_cache.get((a, b))
        if hit is None or a.__class__ is bool or b.__class__ is bool:
            hit = self._latency_cache[(a, b)] = sum(self.graph.edges[e]["latency_s"] for e in self.path(a, b))
        return hit

    def path_bw_Bps(self, a: int | str, b: int | str, effective: bool = False) -> float:
        """The narrowest link on the path (per direction); with effective=True, x efficiency."""
        edges = self.path(a, b)
        if not edges:
            return float("inf")
        if effective:
            return min(self.capacity_Bps(e) for e in edges)
        return min(self.graph.edges[e]["bw_Bps"] for e in edges)

    def bottleneck_bw_Bps(self, ranks: Iterable[int]) -> float:
        """The narrowest physical link (per direction) on the ring through `ranks` in rank order;
        inf for a single device."""
        ring = sorted(set(ranks))
        if len(ring) < 2:
            return float("inf")
        return min(self.path_bw_Bps(a, b) for a, b in zip(ring, ring[1:] + ring[:1], strict=True))

    def plane_of(self, a: int | str, b: int | str) -> str:
        """The plane a path runs on ('scaleup', 'scaleout', 'host'): that of its slowest link."""
        edges = self.path(a, b)
        if not edges:
            return "device"
        slow = min(edges, key=lambda e: self.graph.edges[e]["bw_Bps"])
        return self.graph.edges[slow]["plane"]


# =========================================================================================
# Loading
# =========================================================================================
def load_topology(spec: str | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                  max_devices: int | None = None) -> Topology:
    """A preset name, a YAML path or a mapping (`{preset: dgx-h100, nodes: 16}`) -> Topology.

    `overrides` are preset parameters merged over the file (as `--set topology.nodes=16` gives);
    more devices than `max_devices` (default: the scenario's limits.max_devices) are refused before
    the graph is built."""
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, Mapping) and "preset" in spec:
        inner = dict(spec)
        base, source = resolve("topologies", inner.pop("preset"))
        mapping = _merge(_without_replaced_size(base, inner), inner)
    else:
        mapping, source = resolve("topologies", dict(spec) if isinstance(spec, Mapping) else spec)
    mapping = _merge(_without_replaced_size(mapping, overrides or {}), dict(overrides or {}))
    mapping.pop("preset", None)
    name = str(mapping.get("name") or (spec if isinstance(spec, str) else "custom"))
    description = str(mapping.get("description", ""))
    with _cyclic_gc_paused():
        if "graph" in mapping:
            return _build_explicit(name, description, mapping, source)
        return _build_hierarchical(name, description, mapping, source,
                                   Limits().max_devices if max_devices is None else max_devices)


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


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class _Reader:
    """Field access on a YAML mapping that names the file and the dotted field on error."""

    def __init__(self, mapping: Mapping[str, Any], source: str, prefix: str = "") -> None:
        if not isinstance(mapping, Mapping):
            raise RlsimError(f"expected a mapping, got {mapping!r}", source=source, field=prefix or None)
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
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise RlsimError(f"expected a whole number >= {minimum}, got {value!r}", source=self.source,
                             field=self.where(key))
        return value

    def positive(self, key: str, parser, default: float) -> float:
        raw = self.m.get(key)
        value = default if raw is None else parser(raw, self.where(key), self.source)
        if not value > 0:
            raise RlsimError(f"must be > 0, got {raw!r}", source=self.source, field=self.where(key),
                             fix="give a positive quantity, e.g. '400Gb/s'")
        return value

    def latency(self, key: str, default: float) -> float:
        raw = self.m.get(key)
        value = default if raw is None else parse_seconds(raw, self.where(key), self.source)
        if value < 0:
            raise RlsimError(f"must be >= 0, got {raw!r}", source=self.source, field=self.where(key))
        return value

    def fraction(self, key: str, default: float) -> float:
        value = self.m.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise RlsimError(f"must be a number in (0, 1], got {value!r}", source=self.source,
                             field=self.where(key))
        return float(value)

    def number(self, key: str, default: float, minimum: float = 0.0) -> float:
        value = self.m.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
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
                raise RlsimError(f"unknown field {key!r}", source=self.source, field=self.where(key),
                                 fix=f"use one of: {', '.join(sorted(allowed))}")


_TOP_KEYS = {"name", "description", "sources", "collectives", "device", "devices_per_node", "nodes", "domains", "supernodes",
             "racks", "nodes_per_domain", "scaleup", "scaleout", "host", "groups",
             "device_profile"}  # device_profile: a calibrated profile YAML (hardware/profiles.py)
_GROUP_KEYS = _TOP_KEYS - {"name", "description", "sources", "collectives", "groups", "scaleout"} | {"nic_bw"}
_COUNT_KEYS = ("nodes", "domains", "supernodes", "racks")


class _Builder:
    """Accumulates nodes, edges and per-plane parent maps; adds edges in both directions."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, dict[str, Any]]] = []
        self.edges: list[tuple[str, str, dict[str, Any]]] = []
        self.parents: dict[str, dict[str, str]] = {p: {} for p in PLANES}

    def node(self, node_id: str, **attrs: Any) -> None:
        self.nodes.append((node_id, attrs))

    def link(self, child: str, parent: str, link: _LinkSpec, plane: str, bw_Bps: float | None = None,
             tree: bool = True) -> None:
        attrs = {"bw_Bps": bw_Bps if bw_Bps is not None else link.bw_Bps, "latency_s": link.latency_s,
                 "efficiency": link.efficiency, "plane": plane}
        self.edges.append((child, parent, attrs))
        self.edges.append((parent, child, dict(attrs)))
        if tree:
            self.parents[plane][child] = parent

    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.edges)
        return g


def _device_spec(raw: Any, source: str, field: str, profile: Any = None) -> DeviceSpec:
    """A device entry, with a calibrated profile applied when the entry (`device: {name: cpu,
    profile: PATH}`, an explicit node's `profile:`) or the topology (`device_profile:`) names one."""
    profile_field = "device_profile"
    if isinstance(raw, Mapping) and "profile" in raw:
        raw = dict(raw)
        profile, profile_field = raw.pop("profile"), f"{field}.profile"
    spec = device_from_mapping(raw, source, field)
    if profile is None:
        return spec
    from pathlib import Path

    from .profiles import device_with_profile
    base = Path(source).parent if source and Path(source).exists() else None
    return device_with_profile(spec, profile, base_dir=base, source=source, field=profile_field)


def _build_hierarchical(name: str, description: str, mapping: dict[str, Any], source: str,
                        max_devices: int) -> Topology:
    top = _Reader(mapping, source)
    top.check_keys(_TOP_KEYS)
    groups_raw = mapping.get("groups")
    if groups_raw is None:
        groups = [("main", top)]
    else:
        if not isinstance(groups_raw, Mapping) or not groups_raw:
            raise RlsimError("groups must be a non-empty mapping name -> group", source=source, field="groups")
        groups = [(str(k), _Reader(v, source, f"groups.{k}")) for k, v in groups_raw.items()]
        for _, g in groups:
            g.check_keys(_GROUP_KEYS)

    b = _Builder()
    devices: list[str] = []
    specs: list[DeviceSpec] = []
    out_r = top.sub("scaleout")
    out_defaults = out_r.m if out_r else {}
    leaves: dict[tuple[int, int], float] = {}  # (rail, leaf group) -> NIC bandwidth attached
    nodes_per_leaf = out_r.count("nodes_per_leaf", DEFAULT_NODES_PER_LEAF) if out_r else DEFAULT_NODES_PER_LEAF
    node_base = domain_base = 0
    for gname, g in groups:
        def get(key: str, _g: _Reader = g) -> Any:
            return _g.m.get(key, top.m.get(key))

        dev_field = g.where("device") if "device" in g.m else "device"
        dev_raw = get("device")
        if dev_raw is None:
            raise RlsimError("missing required field", source=source, field=dev_field,
                             fix="name a device, e.g. device: h100")
        spec = _device_spec(dev_raw, source, dev_field, get("device_profile"))
        per_node = g.count("devices_per_node", top.m.get("devices_per_node", 8))
        per_domain = g.count("nodes_per_domain", top.m.get("nodes_per_domain", 1))
        given = [k for k in _COUNT_KEYS if g.m.get(k) is not None]
        if len(given) != 1:
            raise RlsimError(f"give exactly one of {', '.join(_COUNT_KEYS)} (got {given or 'none'})",
                             source=source, field=g.where("nodes"),
                             fix="e.g. nodes: 2 (servers) or supernodes: 1 / racks: 1 (scale-up domains)")
        count = g.count(given[0])
        num_nodes = count if given[0] == "nodes" else count * per_domain
        if num_nodes % per_domain:
            raise RlsimError(f"{num_nodes} nodes do not fill domains of {per_domain} nodes", source=source,
                             field=g.where("nodes"), fix=f"use a multiple of nodes_per_domain={per_domain}")
        if len(devices) + num_nodes * per_node > max_devices:
            raise RlsimError(f"{len(devices) + num_nodes * per_node:,} devices is past limits.max_devices="
                             f"{max_devices:,}", source=source, field=g.where(given[0]),
                             fix=LIMITS_FIX.format(name="max_devices"))
        up_r = _Reader(_merge(top.m.get("scaleup") or {}, g.m.get("scaleup") or {}), source,
                       g.where("scaleup") if "scaleup" in g.m else "scaleup")
        up_kind = up_r.m.get("kind", "switch")
        if up_kind not in ("switch", "two-tier", "mesh"):
            raise RlsimError(f"unknown scale-up kind {up_kind!r}", source=source, field=up_r.where("kind"),
                             fix="use switch, two-tier or mesh")
        if up_kind == "mesh" and per_domain != 1:
            raise RlsimError("a full-mesh scale-up spans one server", source=source,
                             field=g.where("nodes_per_domain"), fix="set nodes_per_domain: 1")
        up = up_r.link("bw", spec.scaleup_bw_Bps, DEFAULT_SCALEUP_LATENCY_S, DEFAULT_SCALEUP_EFFICIENCY)
        uplink_bw = per_node * up.bw_Bps / up_r.number("oversubscription", 1.0, minimum=1.0)
        host_r = _Reader(_merge(top.m.get("host") or {}, g.m.get("host") or {}), source, "host")
        host = host_r.link("bw", spec.host_link_bw_Bps, DEFAULT_HOST_LATENCY_S, DEFAULT_HOST_EFFICIENCY)
        nic_raw = g.m.get("nic_bw", out_defaults.get("nic_bw")) if out_r else None
        nic = None
        if out_r is not None:
            nic_reader = _Reader({**out_defaults, "nic_bw": nic_raw}, source,
                                 g.where("nic_bw") if "nic_bw" in g.m else "scaleout")
            nic = _LinkSpec(nic_reader.positive("nic_bw", parse_bandwidth, 0.0),
                            out_r.latency("latency", DEFAULT_SCALEOUT_LATENCY_S),
                            out_r.fraction("efficiency", DEFAULT_SCALEOUT_EFFICIENCY))

        for n in range(num_nodes):
            node = node_base + n
            domain = domain_base + n // per_domain
            host_id = f"host{node}"
            b.node(host_id, kind="host", node=node, domain=domain)
            if up_kind == "switch" and n % per_domain == 0:
                b.node(f"sw{domain}", kind="switch", tier="scaleup", domain=domain)
            if up_kind == "two-tier":
                b.node(f"l1.{node}", kind="switch", tier="L1", node=node, domain=domain)
                if n % per_domain == 0:
                    b.node(f"l2.{domain}", kind="switch", tier="L2", domain=domain)
                b.link(f"l1.{node}", f"l2.{domain}", up, "scaleup", bw_Bps=uplink_bw)
            local_ids = []
            for local in range(per_node):
                rank = len(devices)
                dev_id = f"dev{rank}"
                local_ids.append(dev_id)
                b.node(dev_id, kind="device", rank=rank, device=spec.name, node=node, domain=domain,
                       local=local, group=gname)
                devices.append(dev_id)
                specs.append(spec)
                b.link(dev_id, host_id, host, "host")
                if up_kind == "switch":
                    b.link(dev_id, f"sw{domain}", up, "scaleup")
                elif up_kind == "two-tier":
                    b.link(dev_id, f"l1.{node}", up, "scaleup")
                if nic is not None:
                    leaf = (local, node // nodes_per_leaf)
                    if leaf not in leaves:
                        leaves[leaf] = 0.0
                        b.node(f"leaf.{leaf[0]}.{leaf[1]}", kind="switch", tier="leaf", rail=local)
                    leaves[leaf] += nic.bw_Bps
                    b.link(dev_id, f"leaf.{leaf[0]}.{leaf[1]}", nic, "scaleout")
            if up_kind == "mesh":  # full mesh inside the server: one direct link per ordered pair
                for x in local_ids:
                    for y in local_ids:
                        if x < y:
                            b.link(x, y, up, "scaleup", tree=False)
        node_base += num_nodes
        domain_base += num_nodes // per_domain

    if out_r is not None and leaves:
        oversub = out_r.number("oversubscription", 1.0, minimum=1.0)
        link = _LinkSpec(1.0, out_r.latency("latency", DEFAULT_SCALEOUT_LATENCY_S),
                         out_r.fraction("efficiency", DEFAULT_SCALEOUT_EFFICIENCY))
        b.node("spine", kind="switch", tier="spine")
        for (rail, grp), down_bw in leaves.items():  # one aggregated spine; uplink = downlink / oversubscription
            b.link(f"leaf.{rail}.{grp}", "spine", link, "scaleout", bw_Bps=down_bw / oversub)
    if groups_raw is not None:
        stray = [k for k in _COUNT_KEYS if top.m.get(k) is not None]
        if stray:
            raise RlsimError("with groups, counts belong to each group", source=source, field=stray[0],
                             fix=f"set groups.NAME.{stray[0]} instead")
    if domain_base > 1 and out_r is None:
        raise RlsimError(f"{domain_base} scale-up domains but no scale-out network joins them (disconnected graph)",
                         source=source, field="scaleout", fix="add scaleout: {nic_bw: 400Gb/s} or use one domain")
    graph = b.graph()
    parents = {p: m for p, m in b.parents.items() if m}
    if not nx.is_weakly_connected(graph):
        raise RlsimError("the graph is disconnected", source=source, field="scaleout",
                         fix="add a scaleout section that joins the servers")
    return Topology(name, source, graph, devices, specs, parents, description, mapping.get("collectives"))


def _build_explicit(name: str, description: str, mapping: dict[str, Any], source: str) -> Topology:
    top = _Reader(mapping, source)
    top.check_keys({"name", "description", "sources", "collectives", "graph", "device_profile"})
    graph_r = top.sub("graph")
    assert graph_r is not None
    graph_r.check_keys({"nodes", "links"})
    nodes = graph_r.require("nodes", "list the nodes: [{id: g0, kind: device, device: h100, node: 0}, ...]")
    links = graph_r.require("links", "list the links: [{a: g0, b: sw0, bw: 450GB/s, plane: scaleup}, ...]")
    if not isinstance(nodes, list) or not isinstance(links, list):
        raise RlsimError("nodes and links must be lists", source=source, field="graph")
    g = nx.DiGraph()
    devices: list[str] = []
    specs: list[DeviceSpec] = []
    for i, raw in enumerate(nodes):
        r = _Reader(raw, source, f"graph.nodes[{i}]")
        r.check_keys({"id", "kind", "device", "node", "domain", "profile"})
        node_id = str(r.require("id", "give every node a unique id"))
        kind = r.m.get("kind", "device" if "device" in r.m else "switch")
        if kind not in ("device", "switch", "host", "nic"):
            raise RlsimError(f"unknown node kind {kind!r}", source=source, field=r.where("kind"),
                             fix="use device, switch, host or nic")
        if node_id in g:
            raise RlsimError(f"duplicate node id {node_id!r}", source=source, field=r.where("id"))
        attrs: dict[str, Any] = {"kind": kind}
        if kind == "device":
            spec = _device_spec(r.require("device", "name a catalog device, e.g. h100"), source,
                                r.where("device"), r.m.get("profile", mapping.get("device_profile")))
            node = r.count("node", len(devices), minimum=0)
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
        plane = r.m.get("plane", "scaleout")
        if plane not in PLANES:
            raise RlsimError(f"unknown plane {plane!r}", source=source, field=r.where("plane"),
                             fix=f"use one of {', '.join(PLANES)}")
        attrs = {"bw_Bps": r.positive("bw", parse_bandwidth, 0.0),
                 "latency_s": r.latency("latency", DEFAULT_SCALEOUT_LATENCY_S),
                 "efficiency": r.fraction("efficiency", DEFAULT_SCALEOUT_EFFICIENCY), "plane": plane}
        g.add_edge(a, z, **attrs)
        if r.m.get("duplex", True):
            g.add_edge(z, a, **dict(attrs))
    if not nx.is_weakly_connected(g):
        parts = sorted(nx.weakly_connected_components(g), key=lambda c: -len(c))
        stray = sorted(parts[1])[:3]
        raise RlsimError(f"the graph is disconnected ({len(parts)} parts; e.g. {stray} cannot reach the rest)",
                         source=source, field="graph.links", fix="add links that join every part")
    return Topology(name, source, g, devices, specs, None, description, mapping.get("collectives"))
