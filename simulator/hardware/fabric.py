"""A hierarchical cluster as arrays: links per level, routes and capacities answered by arithmetic.

Every hierarchical preset is symmetric inside a level: a device hangs off its scale-up switch (or
its server's L1 switch, or a full mesh inside its server), its rail's scale-out leaf and its host;
leaves hang off one spine. `Fabric` numbers the directed links by level, so a device-to-device
route is a few array lookups and a collective's link loads are one `numpy.bincount` - no per-edge
Python object. The networkx graph of the same cluster (`build_graph`, node for node and edge for
edge what the graph builder always made) is built only when asked, for inspection and for paths
that leave the devices (host ids, switch ids).

Edge ids (N devices, M servers, L leaves, P the widest full-mesh server), each link both ways
(`2i` up / away from the device, `2i + 1` down):
  [0, 2N)        device <-> its scale-up parent (scale-up switch, or the server's L1 switch)
  [2N, 4N)       device <-> its scale-out leaf (the NIC)
  [4N, 6N)       device <-> its host (PCIe)
  [6N, 6N + 2M)  L1 <-> L2 (two-tier scale-up)
  then 2L        leaf <-> spine
  then N x P     device -> device inside a full-mesh server (`r * P + local of the peer`)
One more slot past the end is a sentinel (no latency, infinite bandwidth) for the -1 that pads
routes shorter than four hops.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .devices import DeviceSpec

if TYPE_CHECKING:
    import networkx as nx

PLANES = ("scaleup", "scaleout", "host")
UP_KINDS = ("switch", "two-tier", "mesh")
_SWITCH, _TWO_TIER, _MESH = 0, 1, 2
MAX_HOPS = 4  # device -> L1 -> L2 -> L1 -> device, or device -> leaf -> spine -> leaf -> device


@dataclass(frozen=True)
class LinkSpec:
    bw_Bps: float
    latency_s: float
    efficiency: float


@dataclass(frozen=True)
class GroupPlan:
    """One `groups:` entry (or the whole file) after validation: what the builder lays out."""

    name: str
    spec: DeviceSpec
    per_node: int
    per_domain: int
    num_nodes: int
    up_kind: str  # one of UP_KINDS
    up: LinkSpec
    uplink_bw_Bps: float  # a two-tier server's L1 -> L2 link
    host: LinkSpec
    nic: LinkSpec | None  # None without a scale-out network


@dataclass(frozen=True)
class ScaleoutPlan:
    nodes_per_leaf: int
    oversubscription: float
    latency_s: float
    efficiency: float


class FlowTable:
    """Concurrent point-to-point flows as three arrays (src rank, dst rank, bytes), one row per flow;
    iterates as the (src, dst, bytes) tuples of Python numbers it stands for, so a FlowTable is
    what a tuple of flows was to anyone who walks it (FlowNetwork), and the array paths of the
    topology take its columns without converting tuples."""

    __slots__ = ("src", "dst", "nbytes")

    def __init__(self, src: Any, dst: Any, nbytes: Any) -> None:
        self.src = np.asarray(src, dtype=np.int64)
        self.dst = np.asarray(dst, dtype=np.int64)
        self.nbytes = np.asarray(nbytes, dtype=float)
        if not self.src.shape == self.dst.shape == self.nbytes.shape or self.src.ndim != 1:
            raise ValueError("FlowTable: src, dst and nbytes must be 1-d arrays of one length")

    @classmethod
    def uniform(cls, src: Any, dst: Any, nbytes: float) -> FlowTable:
        """Flows src[i] -> dst[i] that all carry ``nbytes``."""
        src = np.asarray(src, dtype=np.int64)
        return cls(src, dst, np.full(len(src), float(nbytes)))

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self) -> Any:
        return zip(self.src.tolist(), self.dst.tolist(), self.nbytes.tolist(), strict=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlowTable):
            return NotImplemented
        return all(np.array_equal(x, y) for x, y in ((self.src, other.src), (self.dst, other.dst),
                                                      (self.nbytes, other.nbytes)))

    def __hash__(self) -> int:
        return hash((self.src.tobytes(), self.dst.tobytes(), self.nbytes.tobytes()))

    def __repr__(self) -> str:
        return f"FlowTable({list(self)!r})"


@dataclass(frozen=True)
class _Routes:
    """The routes of a fixed list of (src, dst) pairs: hop ids (-1 padded), the links used (each
    hop in row order) renumbered 0..k-1 in ``link`` and the capacities of those hops."""

    ids: np.ndarray          # (pairs, MAX_HOPS)
    flow: np.ndarray         # per used hop: its pair's row
    link: np.ndarray         # per used hop: its link, renumbered compactly
    links: int               # distinct links used
    capacity: np.ndarray     # per used hop: its link's capacity


# Route sets kept per fabric, by their (src, dst) pairs (the phases of a collective reuse them for
# its latency and its link loads, across sizes and ops); a speed knob only: results never depend
# on what is kept.
ROUTE_CACHE_ENTRIES = 64
# Up to this many pairs, routes are found pair by pair in Python (``Fabric._few_route_ids``) and
# their links numbered through a dict: cheaper than the fixed cost of the array operations. Speed
# only: both ways give the same ids.
SMALL_ROUTES = 32


class Fabric:
    """The arrays of one hierarchical cluster; built once, never changed."""

    def __init__(self, groups: Sequence[GroupPlan], scaleout: ScaleoutPlan | None) -> None:
        self.groups = tuple(groups)
        self.scaleout = scaleout
        self._lay_out_devices()
        self._lay_out_leaves()
        self._lay_out_links()
        self._routes: dict[bytes, _Routes] = {}

    # ---- construction ------------------------------------------------------------------------
    def _lay_out_devices(self) -> None:
        node, domain, local, group, specs = [], [], [], [], []
        node_base = domain_base = 0
        for gi, g in enumerate(self.groups):
            servers = np.arange(g.num_nodes)
            node.append(np.repeat(node_base + servers, g.per_node))
            domain.append(np.repeat(domain_base + servers // g.per_domain, g.per_node))
            local.append(np.tile(np.arange(g.per_node), g.num_nodes))
            group.append(np.full(g.num_nodes * g.per_node, gi))
            specs.extend([g.spec] * (g.num_nodes * g.per_node))
            node_base += g.num_nodes
            domain_base += g.num_nodes // g.per_domain
        self.node = np.concatenate(node)
        self.domain = np.concatenate(domain)
        self.local = np.concatenate(local)
        self.group = np.concatenate(group)
        self.specs = specs
        self.num_devices, self.num_nodes, self.num_domains = len(self.node), node_base, domain_base
        kinds = np.array([UP_KINDS.index(g.up_kind) for g in self.groups])
        self.kind = kinds[self.group]
        self.node_kind = kinds[self.group[np.searchsorted(self.node, np.arange(node_base))]]
        self.domain_first_node = self.node[np.searchsorted(self.domain, np.arange(domain_base))]
        self.node_domain = np.zeros(node_base, dtype=np.int64)
        self.node_domain[self.node] = self.domain
        self.node_first_rank = np.searchsorted(self.node, np.arange(node_base))

    def _lay_out_leaves(self) -> None:
        """Leaves numbered in order of first appearance (rank order), as the graph builder adds
        them; a leaf's downlink bandwidth is the sum of the NICs on it, added in rank order."""
        self.leaf = np.full(self.num_devices, -1)
        self.leaf_names: list[str] = []
        self.leaf_down_Bps = np.zeros(0)
        if self.scaleout is None:
            return
        grp = self.node // self.scaleout.nodes_per_leaf
        width = int(self.local.max()) + 1
        keys = grp * width + self.local
        self.leaf = _first_appearance(keys)
        in_order = np.empty(int(self.leaf.max()) + 1, dtype=np.int64)
        in_order[self.leaf] = keys
        self.leaf_names = [f"leaf.{k % width}.{k // width}" for k in in_order.tolist()]
        nic_bw = np.array([g.nic.bw_Bps if g.nic else 0.0 for g in self.groups])[self.group]
        self.leaf_down_Bps = np.bincount(self.leaf, weights=nic_bw, minlength=len(in_order))

    def _lay_out_links(self) -> None:
        n, m, leaves = self.num_devices, self.num_nodes, len(self.leaf_names)
        self.out_base, self.host_base, self.l12_base = 2 * n, 4 * n, 6 * n
        self.ls_base = self.l12_base + 2 * m
        self.mesh_base = self.ls_base + 2 * leaves
        mesh_groups = [g.per_node for g in self.groups if g.up_kind == "mesh"]
        self.mesh_width = max(mesh_groups, default=0)
        size = self.mesh_base + n * self.mesh_width + 1   # + the sentinel
        self.bw = np.full(size, np.inf)
        self.latency = np.zeros(size)
        self.efficiency = np.ones(size)
        self.plane = np.zeros(size, dtype=np.int8)
        g = self.group

        ranks = np.arange(n)
        tree_up = self.kind != _MESH
        self._set_links(2 * ranks[tree_up], [gp.up for gp in self.groups], g[tree_up], "scaleup")
        if self.scaleout is not None:
            self._set_links(self.out_base + 2 * ranks, [gp.nic for gp in self.groups], g, "scaleout")
        self._set_links(self.host_base + 2 * ranks, [gp.host for gp in self.groups], g, "host")
        two_tier = np.flatnonzero(self.node_kind == _TWO_TIER)
        if len(two_tier):
            owner = self.group[self.node_first_rank[two_tier]]
            links = [LinkSpec(gp.uplink_bw_Bps, gp.up.latency_s, gp.up.efficiency) for gp in self.groups]
            self._set_links(self.l12_base + 2 * two_tier, links, owner, "scaleup")
        if leaves:
            so = self.scaleout
            ids = self.ls_base + 2 * np.arange(leaves)
            for half in (0, 1):
                self.bw[ids + half] = self.leaf_down_Bps / so.oversubscription
                self.latency[ids + half] = so.latency_s
                self.efficiency[ids + half] = so.efficiency
                self.plane[ids + half] = PLANES.index("scaleout")
        if self.mesh_width:
            mesh = np.flatnonzero(self.kind == _MESH)
            per_node = np.array([gp.per_node for gp in self.groups])[g[mesh]]
            src = np.repeat(mesh, per_node)
            peer_local = np.concatenate([np.arange(p) for p in per_node.tolist()])
            keep = peer_local != self.local[src]
            src, peer_local = src[keep], peer_local[keep]
            ids = self.mesh_base + src * self.mesh_width + peer_local
            self._set_one_way(ids, [gp.up for gp in self.groups], g[src], "scaleup")
        self.capacity = self.bw * self.efficiency

    def _set_links(self, up_ids: np.ndarray, links: list[LinkSpec | None], owner: np.ndarray, plane: str) -> None:
        """Both directions of the links `up_ids` (the up half), each with its owner group's spec."""
        for half in (0, 1):
            self._set_one_way(up_ids + half, links, owner, plane)

    def _set_one_way(self, ids: np.ndarray, links: list[LinkSpec | None], owner: np.ndarray, plane: str) -> None:
        bw = np.array([lk.bw_Bps if lk else np.inf for lk in links])
        lat = np.array([lk.latency_s if lk else 0.0 for lk in links])
        eff = np.array([lk.efficiency if lk else 1.0 for lk in links])
        self.bw[ids], self.latency[ids], self.efficiency[ids] = bw[owner], lat[owner], eff[owner]
        self.plane[ids] = PLANES.index(plane)

    def is_mesh_node(self, node: int) -> bool:
        return bool(self.node_kind[node] == _MESH)

    # ---- routes ------------------------------------------------------------------------------
    def route_ids(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """(len(u), MAX_HOPS) edge ids of the routes from devices u to devices v, hop by hop, -1
        past the last hop: the graph's structural routes (a direct full-mesh link; else the scale-up
        tree inside one domain; else the scale-out leaf, or leaf-spine-leaf)."""
        u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
        if u.ndim == 1 and len(u) <= SMALL_ROUTES:
            return self._few_route_ids(u, v)
        return self._route_ids_arrays(u, v)

    def _route_ids_arrays(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """route_ids as array operations (any number of pairs)."""
        kind_u, node_u, node_v = self.kind[u], self.node[u], self.node[v]
        tree = (self.domain[u] == self.domain[v]) & (kind_u != _MESH)  # one domain: one group
        up = np.where(tree, 2 * u, self.out_base + 2 * u)
        down = np.where(tree, 2 * v + 1, self.out_base + 2 * v + 1)
        mid_up, mid_down = self.l12_base + 2 * node_u, self.l12_base + 2 * node_v + 1   # L1 -> L2 -> L1
        four = (kind_u == _TWO_TIER) & (node_u != node_v)
        if self.scaleout is not None:   # or leaf -> spine -> leaf
            leaf_u, leaf_v = self.leaf[u], self.leaf[v]
            mid_up = np.where(tree, mid_up, self.ls_base + 2 * leaf_u)
            mid_down = np.where(tree, mid_down, self.ls_base + 2 * leaf_v + 1)
            four = np.where(tree, four, leaf_u != leaf_v)
        out = np.stack([up, np.where(four, mid_up, down), np.where(four, mid_down, -1), np.where(four, down, -1)],
                       axis=1)
        if self.mesh_width:   # a direct link inside a full-mesh server beats any switch
            direct = (kind_u == _MESH) & (node_u == node_v)
            out[direct] = -1
            out[direct, 0] = self.mesh_base + u[direct] * self.mesh_width + self.local[v[direct]]
        out[u == v] = -1
        return out

    def _few_route_ids(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """route_ids pair by pair on Python ints: the same ids as the array operations, which cost
        ~60 us a call whatever the count (a collective's phases ask a few pairs each). Reads only
        the ends' attributes (an attribute list of every device cost ~2 ms at 24k devices)."""
        n = len(u)
        ends = np.concatenate([u, v])
        kind, node, domain, leaf, local = (a[ends].tolist() for a in (self.kind, self.node, self.domain, self.leaf,
                                                                      self.local))
        out = []
        for i, (a, b) in enumerate(zip(u.tolist(), v.tolist(), strict=True)):
            j = n + i   # b's attributes
            if a == b:
                out.append((-1, -1, -1, -1))
                continue
            kind_a, node_a, node_b = kind[i], node[i], node[j]
            if kind_a == _MESH and node_a == node_b and self.mesh_width:   # a direct full-mesh link
                out.append((self.mesh_base + a * self.mesh_width + local[j], -1, -1, -1))
                continue
            tree = domain[i] == domain[j] and kind_a != _MESH
            base = 0 if tree else self.out_base
            up, down = base + 2 * a, base + 2 * b + 1
            if tree or self.scaleout is None:   # L1 -> L2 -> L1
                four = kind_a == _TWO_TIER and node_a != node_b
                mid_up, mid_down = self.l12_base + 2 * node_a, self.l12_base + 2 * node_b + 1
            else:                               # leaf -> spine -> leaf
                four = leaf[i] != leaf[j]
                mid_up, mid_down = self.ls_base + 2 * leaf[i], self.ls_base + 2 * leaf[j] + 1
            out.append((up, mid_up, mid_down, down) if four else (up, down, -1, -1))
        return np.array(out, dtype=np.int64).reshape(n, MAX_HOPS)

    def path_latency_s(self, ids: np.ndarray) -> np.ndarray:
        """Per route: its links' latencies summed hop by hop (the padding adds 0.0)."""
        lat = self.latency[ids]
        total = lat[:, 0]
        for hop in range(1, MAX_HOPS):
            total = total + lat[:, hop]
        return total

    def routes(self, src: np.ndarray, dst: np.ndarray, check: Callable[[np.ndarray, np.ndarray], None] | None = None,
               ) -> _Routes:
        """``route_ids(src, dst)`` with the used hops laid out for link loads, kept per pair list.
        ``check``: the caller's validation of the pairs, run when their routes are first built (a
        pair list that fails it is never kept, so it fails on every call)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        key = src.tobytes() + dst.tobytes()
        hit = self._routes.get(key)
        if hit is None:
            if check is not None:
                check(src, dst)
            ids = self.route_ids(src, dst)
            flat = ids.reshape(-1)
            used = flat >= 0
            used_ids = flat[used]
            link, links = _compact(used_ids)
            hit = _Routes(ids, np.repeat(np.arange(len(src)), MAX_HOPS)[used], link, links, self.capacity[used_ids])
            if len(self._routes) >= ROUTE_CACHE_ENTRIES:
                self._routes.clear()
            self._routes[key] = hit
        return hit

    def max_link_time_s(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                        check: Callable[[np.ndarray, np.ndarray], None] | None = None) -> float:
        """The time of the most loaded link when every flow src -> dst of nbytes takes its route:
        loads summed flow by flow (bincount adds in input order), then max(load / capacity).
        ``check``: as in ``routes``."""
        r = self.routes(src, dst, check)
        if not len(r.link):
            return 0.0
        loads = np.bincount(r.link, weights=np.asarray(nbytes, dtype=float)[r.flow], minlength=r.links)
        return float(np.max(loads[r.link] / r.capacity))

    def all_to_all_link_time_s(self, ranks: np.ndarray, bytes_per_pair: float) -> float:
        """``max_link_time_s`` of a uniform all-to-all (every ordered pair of distinct ``ranks`` sends
        ``bytes_per_pair`` on its route) from per-level counts, O(n) instead of n(n-1) routes: the
        same loads. On the routes (``route_ids``): a pair of one full-mesh server has its own link; a
        pair of one domain climbs its devices' scale-up links (a two-tier pair on two servers also
        their L1 -> L2 uplinks); any other pair takes both NICs, and the leaves' spine links when
        the two sit on different leaves."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if len(ranks) < 2:
            return 0.0
        n, cap = len(ranks), self.capacity
        in_domain = _label_counts(self.domain[ranks])   # each rank's group members in its domain, itself too
        on_node = _label_counts(self.node[ranks])
        mesh = self.kind[ranks] == _MESH
        pairs: list[np.ndarray] = []   # pairs' shares per link over that link's capacity
        tree = ~mesh
        pairs.append((in_domain[tree] - 1) / cap[2 * ranks[tree]])
        meshed = mesh & (on_node > 1)
        if meshed.any():   # one link per peer of the server: a pair's share each
            mesh_cap = np.array([g.up.bw_Bps * g.up.efficiency for g in self.groups])[self.group[ranks[meshed]]]
            pairs.append(1.0 / mesh_cap)
        two_tier = self.kind[ranks] == _TWO_TIER
        if two_tier.any():   # a node's uplink: its members' shares to the domain's members off the node
            nodes, first = np.unique(self.node[ranks[two_tier]], return_index=True)
            members, domain_members = on_node[two_tier][first], in_domain[two_tier][first]
            pairs.append(members * (domain_members - members) / cap[self.l12_base + 2 * nodes])
        off_domain = n - in_domain
        pairs.append(off_domain / cap[self.out_base + 2 * ranks])
        if self.scaleout is not None:   # a leaf's spine link: its members' shares to other domains on other leaves
            leaf = self.leaf[ranks]
            on_leaf = _label_counts(leaf)
            on_leaf_in_domain = _label_counts(leaf * self.num_domains + self.domain[ranks])
            through = np.bincount(leaf, weights=off_domain - (on_leaf - on_leaf_in_domain))
            used = np.flatnonzero(through > 0)
            pairs.append(through[used] / cap[self.ls_base + 2 * used])
        return float(np.concatenate(pairs).max()) * bytes_per_pair

    # ---- names (the graph's node ids) ------------------------------------------------------
    def edge_name(self, eid: int) -> tuple[str, str]:
        """The graph's (u, v) node ids of edge `eid`."""
        n = self.num_devices
        if eid >= self.mesh_base:
            src, peer_local = divmod(eid - self.mesh_base, self.mesh_width)
            return f"dev{src}", f"dev{int(self.node_first_rank[self.node[src]]) + peer_local}"
        half, i = eid % 2, eid // 2
        if eid < 2 * n:
            r = i
            parent = (f"sw{int(self.domain[r])}" if self.kind[r] == _SWITCH else f"l1.{int(self.node[r])}")
            pair = (f"dev{r}", parent)
        elif eid < 4 * n:
            r = i - n
            pair = (f"dev{r}", self.leaf_names[int(self.leaf[r])])
        elif eid < 6 * n:
            r = i - 2 * n
            pair = (f"dev{r}", f"host{int(self.node[r])}")
        elif eid < self.ls_base:
            node = i - 3 * n
            pair = (f"l1.{node}", f"l2.{int(self.node_domain[node])}")
        else:
            pair = (self.leaf_names[i - self.ls_base // 2], "spine")
        return pair if half == 0 else (pair[1], pair[0])

    def edge_attrs(self, eid: int) -> dict[str, Any]:
        return {"bw_Bps": float(self.bw[eid]), "latency_s": float(self.latency[eid]),
                "efficiency": float(self.efficiency[eid]), "plane": PLANES[int(self.plane[eid])]}

    # ---- group signatures --------------------------------------------------------------------
    def signature(self, ranks: np.ndarray) -> tuple:
        """Topology.group_signature of a hierarchical cluster, as compact bytes. Every level is
        symmetric (one spec per group and level), so what a group sees depends only on which of its
        ranks share a domain, a node, a local position and a scale-out leaf (each numbered by first
        appearance), on each rank's device group, NIC and leaf-uplink capacities (a partly filled
        leaf group has a narrower uplink), and on the order of its ranks (``_rank_order``) - not on
        where the group sits: the data-parallel groups of different pipeline stages (other local
        positions, other nodes) share one signature when their sharing pattern is the same."""
        if len(ranks) <= SMALL_ROUTES:
            few = self._few_signature(ranks)
            if few is not None:
                return few
        group, domain = self.group[ranks], self.domain[ranks]
        order = _rank_order(ranks)
        node, local = _first_appearance(self.node[ranks]), _first_appearance(self.local[ranks])
        if (group == group[0]).all() and (domain == domain[0]).all():
            return ("domain", int(group[0]), np.stack([node, local]).tobytes(), order)
        ints = np.stack([group, _first_appearance(domain), node, local, _first_appearance(self.leaf[ranks])])
        caps = np.stack([self.capacity[self.out_base + 2 * ranks], self.capacity[self.ls_base + 2 * self.leaf[ranks]]])
        return ("multi", len(ranks), ints.tobytes(), caps.tobytes(), order)

    def _few_signature(self, ranks: np.ndarray) -> tuple | None:
        """``signature`` of a few ranks of one group and domain on Python ints (the same tuple, at a
        fraction of the array operations' fixed cost); None for ranks across groups or domains."""
        group, domain = self.group[ranks].tolist(), self.domain[ranks].tolist()
        if not group or group.count(group[0]) != len(group) or domain.count(domain[0]) != len(domain):
            return None
        r = ranks.tolist()
        order = b"" if all(a < b for a, b in zip(r[:-1], r[1:], strict=True)) else _rank_order(ranks)
        labels = [_first_appearance_list(self.node[ranks].tolist()), _first_appearance_list(self.local[ranks].tolist())]
        return ("domain", group[0], np.array(labels, dtype=np.int64).tobytes(), order)

    # ---- the networkx graph (inspection, paths off the devices) --------------------------------
    def build_graph(self) -> tuple[nx.DiGraph, dict[str, dict[str, str]]]:
        """The directed graph and the per-plane parent maps, in the order the builder always used."""
        b = _GraphBuilder()
        leaves: dict[tuple[int, int], float] = {}
        node_base = domain_base = rank = 0
        npl = self.scaleout.nodes_per_leaf if self.scaleout else 1
        for g in self.groups:
            for n in range(g.num_nodes):
                rank = self._add_server(b, g, node_base + n, domain_base + n // g.per_domain,
                                        n % g.per_domain == 0, rank, leaves, npl)
            node_base += g.num_nodes
            domain_base += g.num_nodes // g.per_domain
        if self.scaleout is not None and leaves:
            so = self.scaleout
            link = LinkSpec(1.0, so.latency_s, so.efficiency)
            b.node("spine", kind="switch", tier="spine")
            for (rail, grp), down_bw in leaves.items():  # one aggregated spine; uplink = downlink / oversubscription
                b.link(f"leaf.{rail}.{grp}", "spine", link, "scaleout", bw_Bps=down_bw / so.oversubscription)
        return b.graph(), {p: m for p, m in b.parents.items() if m}

    @staticmethod
    def _add_server(b: _GraphBuilder, g: GroupPlan, node: int, domain: int, first_in_domain: bool, rank: int,
                    leaves: dict[tuple[int, int], float], nodes_per_leaf: int) -> int:
        host_id = f"host{node}"
        b.node(host_id, kind="host", node=node, domain=domain)
        if g.up_kind == "switch" and first_in_domain:
            b.node(f"sw{domain}", kind="switch", tier="scaleup", domain=domain)
        if g.up_kind == "two-tier":
            b.node(f"l1.{node}", kind="switch", tier="L1", node=node, domain=domain)
            if first_in_domain:
                b.node(f"l2.{domain}", kind="switch", tier="L2", domain=domain)
            b.link(f"l1.{node}", f"l2.{domain}", g.up, "scaleup", bw_Bps=g.uplink_bw_Bps)
        local_ids = []
        for local in range(g.per_node):
            dev_id = f"dev{rank}"
            local_ids.append(dev_id)
            b.node(dev_id, kind="device", rank=rank, device=g.spec.name, node=node, domain=domain,
                   local=local, group=g.name)
            b.link(dev_id, host_id, g.host, "host")
            if g.up_kind == "switch":
                b.link(dev_id, f"sw{domain}", g.up, "scaleup")
            elif g.up_kind == "two-tier":
                b.link(dev_id, f"l1.{node}", g.up, "scaleup")
            if g.nic is not None:
                leaf = (local, node // nodes_per_leaf)
                if leaf not in leaves:
                    leaves[leaf] = 0.0
                    b.node(f"leaf.{leaf[0]}.{leaf[1]}", kind="switch", tier="leaf", rail=local)
                leaves[leaf] += g.nic.bw_Bps
                b.link(dev_id, f"leaf.{leaf[0]}.{leaf[1]}", g.nic, "scaleout")
            rank += 1
        if g.up_kind == "mesh":  # full mesh inside the server: one direct link per ordered pair
            for x in local_ids:
                for y in local_ids:
                    if x < y:
                        b.link(x, y, g.up, "scaleup", tree=False)
        return rank


class _GraphBuilder:
    """Accumulates nodes, edges and per-plane parent maps; adds edges in both directions."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, dict[str, Any]]] = []
        self.edges: list[tuple[str, str, dict[str, Any]]] = []
        self.parents: dict[str, dict[str, str]] = {p: {} for p in PLANES}

    def node(self, node_id: str, **attrs: Any) -> None:
        self.nodes.append((node_id, attrs))

    def link(self, child: str, parent: str, link: LinkSpec, plane: str, bw_Bps: float | None = None,
             tree: bool = True) -> None:
        attrs = {"bw_Bps": bw_Bps if bw_Bps is not None else link.bw_Bps, "latency_s": link.latency_s,
                 "efficiency": link.efficiency, "plane": plane}
        self.edges.append((child, parent, attrs))
        self.edges.append((parent, child, dict(attrs)))
        if tree:
            self.parents[plane][child] = parent

    def graph(self) -> nx.DiGraph:
        import networkx as nx
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.edges)
        return g


def _compact(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Each id's link number 0..k-1 and k, the distinct ids. The numbering is any one-to-one map
    (the loads sum each link's flows in flow order whatever its number): first appearance for a few
    ids (a dict), sorted order (numpy.unique) for many."""
    if len(ids) <= 4 * SMALL_ROUTES:
        link = _first_appearance_list(ids.tolist())
        return np.array(link, dtype=np.int64), max(link, default=-1) + 1
    distinct, link = np.unique(ids, return_inverse=True)
    return link.reshape(-1), len(distinct)


def _rank_order(ranks: np.ndarray) -> bytes:
    """b"" for ranks in ascending order (every group the schedules form); else the permutation that
    sorts them: callers sort sub-groups of a group by rank (collectives), so two groups share costs
    only if sorting picks the same positions in both."""
    if len(ranks) < 2 or (ranks[1:] > ranks[:-1]).all():
        return b""
    return np.argsort(ranks, kind="stable").astype(np.int64).tobytes()


def _label_counts(labels: np.ndarray) -> np.ndarray:
    """For each position, how many positions hold its label (itself included)."""
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)]


def _first_appearance_list(values: list[int]) -> list[int]:
    """_first_appearance of a few Python ints."""
    numbers: dict[int, int] = {}
    return [numbers.setdefault(x, len(numbers)) for x in values]


def _first_appearance(values: np.ndarray) -> np.ndarray:
    """Each value's label, the labels numbered 0, 1, ... in order of first appearance."""
    if len(values) < 2 or (values[1:] >= values[:-1]).all():   # sorted (the usual group): runs
        return np.concatenate([[0], np.cumsum(values[1:] != values[:-1])]).astype(np.int64)
    n = len(values)
    low, width = int(values.min()), int(values.max()) + 1
    if low < 0 or width > 4 * n + 64:   # values far apart: by sorting
        unique, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        number = np.empty(len(unique), dtype=np.int64)
        number[np.argsort(first, kind="stable")] = np.arange(len(unique))
        return number[inverse.reshape(-1)]
    first = np.full(width, n)                     # small labels (local positions, leaves): a table
    np.minimum.at(first, values, np.arange(n))    # each value's first position (n: absent)
    present = int((first < n).sum())
    number = np.empty(width, dtype=np.int64)
    number[np.argsort(first, kind="stable")[:present]] = np.arange(present)
    return number[values]
