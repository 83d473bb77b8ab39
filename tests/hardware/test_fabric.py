"""The array fabric of hierarchical topologies answers exactly what its networkx graph answers.

Each random symmetric preset is built once (arrays; the graph built lazily from them) and once more
as a graph-only topology over that same graph and its per-plane trees (the networkx path that
explicit topologies take). Routes, latencies, capacities, bottlenecks and collective costs must be
equal to the last bit."""
from __future__ import annotations

import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import Topology, load_topology
from simulator.network.collectives import CollectiveModel

DEVICES = ["h100", "a100-80gb", "ascend-910c"]


@st.composite
def _group(draw: st.DrawFn, scaleout: bool, in_groups: bool = False, wide: bool = False) -> dict:
    """One group of a preset; ``wide``: 2-4 devices a node, 2-3 nodes a domain (but a mesh) and
    3-6 domains, so that groups span domains, servers and leaves in many ways."""
    kind = draw(st.sampled_from(["switch", "two-tier", "mesh"]))
    per_domain = 1 if kind == "mesh" else draw(st.integers(2 if wide else 1, 3))
    domains = st.integers(3, 6) if wide else st.integers(1, 3) if scaleout else st.just(1)
    group = {"device": draw(st.sampled_from(DEVICES)), "devices_per_node": draw(st.integers(2 if wide else 1, 4)),
             "nodes_per_domain": per_domain, "domains": draw(domains),
             "scaleup": {"kind": kind}}
    if kind == "two-tier":   # the only scale-up with uplinks to oversubscribe
        group["scaleup"]["oversubscription"] = draw(st.sampled_from([1.0, 2.0]))
    if in_groups and scaleout and draw(st.booleans()):
        group["nic_bw"] = draw(st.sampled_from(["200Gb/s", "400Gb/s"]))
    return group


@st.composite
def presets(draw: st.DrawFn, scaleout_only: bool = False) -> dict:
    """A random symmetric preset; ``scaleout_only``: always a scale-out network, wide groups
    (``_group``) and leaves of up to 4 nodes (leaf boundaries that cut domains in several ways)."""
    scaleout = scaleout_only or draw(st.booleans())
    mapping: dict = {"name": "random"}
    if scaleout:
        mapping["scaleout"] = {"nic_bw": "400Gb/s", "nodes_per_leaf": draw(st.integers(1, 4 if scaleout_only else 3)),
                               "oversubscription": draw(st.sampled_from([1.0, 1.5, 3.0])),
                               "efficiency": draw(st.sampled_from([0.9, 0.94]))}
    groups = draw(st.integers(1, 2 if scaleout else 1))
    if groups == 1:
        mapping.update(draw(_group(scaleout, wide=scaleout_only)))
    else:
        mapping["groups"] = {f"g{i}": draw(_group(scaleout, True, scaleout_only)) for i in range(groups)}
    return mapping


def _graph_twin(t: Topology) -> Topology:
    """The same cluster on the networkx path: the fabric's lazily built graph and plane trees."""
    return Topology(t.name, t.source, t.graph, list(t.devices), [t.device_spec(r) for r in range(t.num_devices)],
                    t._parents, t.description, t.collectives)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(presets(), st.data())
def test_array_and_graph_paths_agree(mapping: dict, data: st.DataObject):
    t = load_topology(mapping)
    twin = _graph_twin(t)
    n = t.num_devices
    assert nx.is_weakly_connected(t.graph)
    ranks = st.integers(0, n - 1)
    for _ in range(6):
        a, b = data.draw(ranks), data.draw(ranks)
        assert t.path(a, b) == twin.path(a, b)
        assert t.path_latency_s(a, b) == twin.path_latency_s(a, b)
        assert t.path_bw_Bps(a, b, effective=True) == twin.path_bw_Bps(a, b, effective=True)
        assert t.plane_of(a, b) == twin.plane_of(a, b)
        for e in t.path(a, b):
            assert t.capacity_Bps(e) == twin.capacity_Bps(e) and t.edge(e) == twin.edge(e)
    group = sorted(data.draw(st.sets(ranks, min_size=1, max_size=min(n, 12))))
    assert t.bottleneck_bw_Bps(group) == twin.bottleneck_bw_Bps(group)
    assert t.fully_linked(group) == twin.fully_linked(group)
    pairs = [(a, b) for a in group for b in group]
    assert t.max_path_latency_s(pairs) == twin.max_path_latency_s(pairs)
    flows = tuple((a, b, float(1 + (a * 7 + b) % 5) * 1e6) for a, b in pairs)
    assert t.max_link_time_s(flows) == twin.max_link_time_s(flows)
    fast, slow = CollectiveModel(t), CollectiveModel(twin)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"):
        x, y = fast.cost(op, group, 3.0 * 2**20), slow.cost(op, group, 3.0 * 2**20)
        assert (x.algorithm, x.time_s, x.busbw_Bps) == (y.algorithm, y.time_s, y.busbw_Bps)
        assert fast.lines(op, group) == slow.lines(op, group)


OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p")


def _assert_same_costs(t: Topology, a: list[int], b: list[int]) -> None:
    """Every collective on ``a`` and on ``b``, each priced by its own fresh model (no shared cache),
    costs exactly the same: algorithm, time and both bandwidths, and the same per-size lines."""
    ma, mb = CollectiveModel(t), CollectiveModel(t)
    for op in OPS:
        ga, gb = (a[:2], b[:2]) if op == "p2p" else (a, b)
        if op == "p2p" and len(a) < 2:
            continue
        for nbytes in (8.0, 3.0 * 2**20, 2.0**31):
            assert ma.cost(op, ga, nbytes) == mb.cost(op, gb, nbytes), (op, ga, gb, nbytes)
        assert ma.lines(op, ga) == mb.lines(op, gb), (op, ga, gb)


@st.composite
def _groups(draw: st.DrawFn, t: Topology) -> list[int]:
    """A group of 2-10 ranks (strided or any set), ascending, descending or in a drawn order."""
    n = t.num_devices
    size = draw(st.integers(min(n, 2), min(n, 10)))
    if draw(st.booleans()):
        stride = draw(st.integers(1, max(1, (n - 1) // max(size - 1, 1))))
        start = draw(st.integers(0, n - 1 - stride * (size - 1)))
        a = list(range(start, start + stride * size, stride))
    else:
        a = sorted(draw(st.sets(st.integers(0, n - 1), min_size=size, max_size=size)))
    flip = draw(st.sampled_from(["ascending", "ascending", "descending", "drawn"]))
    if flip == "descending":
        return a[::-1]
    return [a[i] for i in draw(st.permutations(range(size)))] if flip == "drawn" else a


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(presets(), presets(scaleout_only=True)), st.data())
def test_equal_signatures_mean_equal_costs(mapping: dict, data: st.DataObject):
    """A group shifted by every whole number of ranks (other local positions, nodes, domains,
    leaves): wherever the copy shares the group's signature, its routes are the group's up to a
    relabelling of links (``_assert_isomorphic_routes``), and for two of them every collective
    costs exactly the same. A shared signature is what lets the DP groups of different pipeline
    stages share one collective plan."""
    t = load_topology(mapping)
    a = data.draw(_groups(t))
    signature, priced = t.group_signature(a), 0
    for shift in range(-min(a), t.num_devices - max(a)):
        b = [r + shift for r in a]
        if shift and t.group_signature(b) == signature:
            _assert_isomorphic_routes(t, a, b)
            if priced < 2:
                _assert_same_costs(t, a, b)
                priced += 1


def _assert_isomorphic_routes(t: Topology, a: list[int], b: list[int]) -> None:
    """Why equal signatures price alike: position i of ``a`` -> position i of ``b`` carries every
    route (pair of positions) onto a route of the same hops, and the links they use onto links of
    the same capacity and latency, one to one (two routes share a link in ``a`` iff they share the
    image link in ``b``). Any set of flows between positions then loads corresponding links with the
    same bytes in the same order, so every link time, latency and maximum is the same float."""
    f = t._fabric
    pa = np.array([(x, y) for x in a for y in a])
    pb = np.array([(x, y) for x in b for y in b])
    ra, rb = f.route_ids(pa[:, 0], pa[:, 1]), f.route_ids(pb[:, 0], pb[:, 1])
    assert ((ra < 0) == (rb < 0)).all()
    used = ra >= 0
    image: dict[int, int] = {}
    for x, y in zip(ra[used].tolist(), rb[used].tolist(), strict=True):
        assert image.setdefault(x, y) == y
    assert len(set(image.values())) == len(image)
    ids_a, ids_b = np.array(list(image), dtype=np.int64), np.array(list(image.values()), dtype=np.int64)
    assert (f.capacity[ids_a] == f.capacity[ids_b]).all() and (f.latency[ids_a] == f.latency[ids_b]).all()
    assert [t.device_spec(x) for x in a] == [t.device_spec(y) for y in b]
    assert t.fully_linked(sorted(a)) == t.fully_linked(sorted(b))
    assert np.argsort(a).tolist() == np.argsort(b).tolist()   # sorting picks the same positions


def test_stage_groups_share_a_signature_where_their_sharing_pattern_matches():
    """CloudMatrix384 x 4 (48-NPU pipeline-stage blocks of 6 nodes): the DP groups of stages 0 and 1
    (local position 0 of nodes 6j and 6j + 1) meet the 32-node leaves alike and share a signature
    and every cost; stage 2 splits across leaves differently (5 + 3 nodes of a supernode on each
    side of a leaf boundary, against 6 + 2) and keeps its own signature."""
    t = load_topology("cloudmatrix384", {"supernodes": 4})
    stage = {s: list(range(8 * s, t.num_devices, 48)) for s in range(3)}
    assert t.group_signature(stage[0]) == t.group_signature(stage[1]) != t.group_signature(stage[2])
    _assert_same_costs(t, stage[0], stage[1])
    wide = {s: list(range(8 * s, t.num_devices, 192)) for s in range(6)}   # 2 per supernode: one pattern
    assert len({t.group_signature(g) for g in wide.values()}) == 1
    _assert_same_costs(t, wide[0], wide[5])
    assert t.group_signature([0, 1, 2]) == t.group_signature(range(4, 7)) == t.group_signature([8, 9, 10])
    assert t.group_signature([2, 1, 0]) != t.group_signature([0, 1, 2])   # order kept


def test_graph_is_built_only_when_asked():
    t = load_topology("dgx-h100", {"nodes": 4})
    CollectiveModel(t).cost("all_reduce", list(range(32)), 2**30)
    assert t.path(0, 9)[1] == ("leaf.0.0", "spine") and t._graph is None
    assert t.path(0, "host0") == [("dev0", "host0")] and t._graph is not None


def test_hierarchical_runs_without_networkx():
    code = ("import sys\nfrom simulator.hardware.topology import load_topology\n"
            "from simulator.network.collectives import CollectiveModel\n"
            "t = load_topology('cloudmatrix384', {'supernodes': 2})\n"
            "CollectiveModel(t).cost('all_reduce', list(range(0, 768, 8)), 2**30)\n"
            "t.bottleneck_bw_Bps(range(768)); t.group_signature(range(0, 768, 3))\n"
            "assert 'networkx' not in sys.modules, 'networkx imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("preset, params", [("cloudmatrix384", {"supernodes": 2}), ("dgx-h100", {"nodes": 3}),
                                            ("hetero-a100-h100", {}), ("ascend-910b", {})])
def test_presets_agree_with_their_graph(preset: str, params: dict):
    t = load_topology(preset, params)
    twin = _graph_twin(t)
    n = t.num_devices
    group = list(range(0, n, max(1, n // 24)))
    assert t.bottleneck_bw_Bps(range(n)) == twin.bottleneck_bw_Bps(range(n))
    for ranks in (list(range(n)), group, group[::-1]):
        assert list(t.group_by_domain(ranks).items()) == list(twin.group_by_domain(ranks).items())
    fast, slow = CollectiveModel(t), CollectiveModel(twin)
    for op in ("all_reduce", "all_gather", "all_to_all"):
        assert fast.cost(op, group, 2.0**28) == slow.cost(op, group, 2.0**28)


@settings(max_examples=25, deadline=None)
@given(presets(), st.data())
def test_a_run_inside_a_domain_has_the_signature_of_any_run_like_it(mapping: dict, data: st.DataObject):
    """group_signature keeps one signature per (group, first local position, length) for runs of
    consecutive ranks inside one domain; every such run computes to that same signature."""
    import numpy as np
    t = load_topology(mapping)
    f = t._fabric
    a = data.draw(st.integers(0, t.num_devices - 1))
    domain_end = max(t.ranks_of_domain(t.domain_of(a))) + 1
    n = data.draw(st.integers(1, domain_end - a))
    first = t.group_signature(range(a, a + n))
    twins = [b for b in range(t.num_devices - n + 1) if f.group[b] == f.group[a] and f.local[b] == f.local[a]
             and t.domain_of(b) == t.domain_of(b + n - 1)]
    for b in twins:
        assert t.group_signature(list(range(b, b + n))) == first == f.signature(np.arange(b, b + n))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1, 40), min_size=1, max_size=60) | st.lists(st.integers(0, 10**9), min_size=1, max_size=8))
def test_first_appearance_numbers_values_in_order_of_first_sight(values: list[int]):
    """Both ways of labelling (the table for small labels, sorting for far-apart or negative ones):
    label i is the i-th distinct value met, equal labels iff equal values."""
    from simulator.hardware.fabric import _first_appearance
    seen: dict[int, int] = {}
    expected = [seen.setdefault(v, len(seen)) for v in values]
    assert _first_appearance(np.array(values, dtype=np.int64)).tolist() == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(presets(), st.data())
def test_few_pairs_route_as_the_array_operations_route_them(mapping: dict, data: st.DataObject):
    """Fabric._few_route_ids (pair by pair, the path of a few pairs) gives every pair the ids of
    the array operations (any count), self-pairs included."""
    f = load_topology(mapping)._fabric
    n = f.num_devices
    u = np.repeat(np.arange(n), n)
    v = np.tile(np.arange(n), n)
    assert np.array_equal(f._few_route_ids(u, v), f._route_ids_arrays(u, v))
    k = data.draw(st.integers(0, min(8, n * n)))
    a, b = u[:k], v[::-1][:k]
    assert f.route_ids(a, b).shape == (k, 4) and np.array_equal(f.route_ids(a, b), f._route_ids_arrays(a, b))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=0, max_size=300))
def test_compact_link_numbers_are_one_to_one(ids: list[int]):
    """fabric._compact numbers equal ids alike and distinct ids apart, 0..k-1 (a dict for a few ids,
    numpy.unique for many)."""
    from simulator.hardware.fabric import _compact
    link, k = _compact(np.array(ids, dtype=np.int64))
    assert k == len(set(ids)) and sorted(set(link.tolist())) == list(range(k))
    assert len({(i, j) for i, j in zip(ids, link.tolist(), strict=True)}) == k


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(presets(), st.data())
def test_few_ranks_sign_as_the_array_operations_sign_them(mapping: dict, data: st.DataObject):
    """Fabric.signature of a few ranks (the Python path, one group and domain) is the tuple the
    array operations give, in any rank order; across domains the Python path declines."""
    t = load_topology(mapping)
    f = t._fabric
    ranks = np.array(data.draw(st.lists(st.integers(0, t.num_devices - 1), min_size=1, max_size=12, unique=True)))
    few = f._few_signature(ranks)
    with_arrays = _array_signature(f, ranks)
    one_domain = len(set(f.domain[ranks].tolist())) == 1 and len(set(f.group[ranks].tolist())) == 1
    assert (few == with_arrays) if one_domain else few is None
    assert f.signature(ranks) == with_arrays


def _array_signature(f, ranks: np.ndarray) -> tuple:
    """Fabric.signature with the Python path for a few ranks turned off."""
    from simulator.hardware import fabric
    small, fabric.SMALL_ROUTES = fabric.SMALL_ROUTES, 0
    try:
        return f.signature(ranks)
    finally:
        fabric.SMALL_ROUTES = small
