"""The array fabric of hierarchical topologies answers exactly what its networkx graph answers.

Each random symmetric preset is built once (arrays; the graph built lazily from them) and once more
as a graph-only topology over that same graph and its per-plane trees (the networkx path that
explicit topologies take). Routes, latencies, capacities, bottlenecks and collective costs must be
equal to the last bit."""
from __future__ import annotations

import subprocess
import sys

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import Topology, load_topology
from simulator.network.collectives import CollectiveModel

DEVICES = ["h100", "a100-80gb", "ascend-910c"]


@st.composite
def _group(draw: st.DrawFn, scaleout: bool, in_groups: bool = False) -> dict:
    kind = draw(st.sampled_from(["switch", "two-tier", "mesh"]))
    per_domain = 1 if kind == "mesh" else draw(st.integers(1, 3))
    group = {"device": draw(st.sampled_from(DEVICES)), "devices_per_node": draw(st.integers(1, 4)),
             "nodes_per_domain": per_domain, "domains": draw(st.integers(1, 3) if scaleout else st.just(1)),
             "scaleup": {"kind": kind, "oversubscription": draw(st.sampled_from([1.0, 2.0]))}}
    if in_groups and scaleout and draw(st.booleans()):
        group["nic_bw"] = draw(st.sampled_from(["200Gb/s", "400Gb/s"]))
    return group


@st.composite
def presets(draw: st.DrawFn) -> dict:
    scaleout = draw(st.booleans())
    mapping: dict = {"name": "random"}
    if scaleout:
        mapping["scaleout"] = {"nic_bw": "400Gb/s", "nodes_per_leaf": draw(st.integers(1, 3)),
                               "oversubscription": draw(st.sampled_from([1.0, 1.5, 3.0])),
                               "efficiency": draw(st.sampled_from([0.9, 0.94]))}
    groups = draw(st.integers(1, 2 if scaleout else 1))
    if groups == 1:
        mapping.update(draw(_group(scaleout)))
    else:
        mapping["groups"] = {f"g{i}": draw(_group(scaleout, True)) for i in range(groups)}
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


@settings(max_examples=20, deadline=None)
@given(presets(), st.data())
def test_equal_signatures_mean_equal_costs(mapping: dict, data: st.DataObject):
    """Groups of one shape placed elsewhere share a signature only if every collective costs the same."""
    t = load_topology(mapping)
    n = t.num_devices
    size = data.draw(st.integers(2, min(n, 8))) if n >= 2 else 1
    start = data.draw(st.integers(0, n - size))
    step = data.draw(st.integers(1, max(1, (n - start - 1) // max(size - 1, 1))))
    a = list(range(start, start + size))
    b = list(range(start, min(n, start + step * size), step))[:size]
    if len(b) < size or t.group_signature(a) != t.group_signature(b):
        return
    ma, mb = CollectiveModel(t), CollectiveModel(t)
    for op in ("all_reduce", "all_gather", "broadcast"):
        assert ma.cost(op, a, 2**20).time_s == mb.cost(op, b, 2**20).time_s


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
