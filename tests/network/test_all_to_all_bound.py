"""A large all-to-all is priced without routing its n(n-1) pairs: on a hierarchical cluster the link
loads are counted per level (CollectiveModel._injection_bound_s, Fabric.all_to_all_link_time_s).
Those loads are the ones the pair-by-pair routing gives, so the two prices agree to rounding on any
cluster and any group - an oversubscribed spine, a two-tier scale-up with thin uplinks, a full mesh
beside fast NICs (each of which the per-device bound it replaced priced as a non-blocking fabric)."""
from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.network.collectives import CollectiveModel, CollectiveParams
from tests.hardware.test_fabric import presets

GiB = 2**30
EXACT = CollectiveParams(exact_all_to_all_max_devices=100_000)
BOUND = CollectiveParams(exact_all_to_all_max_devices=1)


def _both(topology, group, nbytes=GiB):
    exact = CollectiveModel(topology, EXACT).cost("all_to_all", group, nbytes)
    bound = CollectiveModel(topology, BOUND).cost("all_to_all", group, nbytes)
    return exact.time_s, bound.time_s


def test_an_oversubscribed_spine_slows_a_large_all_to_all_as_routing_it_does():
    """40 DGX H100 nodes, 8 a leaf, the spine at half the leaves' NIC rate. A leaf holds one rail of
    8 nodes; each of its 8 GPUs sends a pair's share to the n - 8 GPUs off its node, all but the 7
    on its leaf over the leaf's uplink of 8 NICs / 2: 2 (n - 15) shares a NIC's time (the old bound:
    the NIC's n - 8, 1.95x less)."""
    topology = load_topology({"preset": "dgx-h100", "nodes": 40,
                              "scaleout": {"oversubscription": 2, "nodes_per_leaf": 8}})
    group = list(range(topology.num_devices))
    exact, bound = _both(topology, group)
    assert bound == pytest.approx(exact, rel=1e-9)
    n = len(group)
    nic = topology.capacity_Bps(topology.path(0, 8)[0])
    phase = CollectiveModel(topology, BOUND).plan("all_to_all", group, GiB).phases[0]
    launch = topology.device_spec(0).launch_overhead_s
    assert bound == pytest.approx(launch + phase.latency_s + 2 * (n - 15) * (GiB / n) / nic, rel=1e-9)


def test_thin_two_tier_uplinks_slow_a_large_all_to_all_as_routing_it_does():
    """One CloudMatrix384 supernode whose L1 -> L2 uplinks carry half a node's UB rate."""
    topology = load_topology({"preset": "cloudmatrix384", "scaleup": {"oversubscription": 2}})
    exact, bound = _both(topology, list(range(topology.num_devices)))
    assert bound == pytest.approx(exact, rel=1e-9)


def test_a_full_mesh_beside_fast_nics_sends_one_pair_a_link():
    """Ascend 910B servers (8-NPU HCCS mesh, 28 GB/s a link) with NICs fast enough that the mesh
    bounds the phase: each of a device's 7 mesh links carries one peer's bytes, not all 7."""
    topology = load_topology({"preset": "ascend-910b", "nodes": 2, "scaleout": {"nic_bw": "40TB/s"}})
    exact, bound = _both(topology, list(range(16)))
    assert bound == pytest.approx(exact, rel=1e-9)


def test_an_explicit_full_mesh_sends_one_pair_a_link():
    """An explicit graph keeps the per-device bound; in a full mesh a device's peers each have their
    own link, so it counts one pair's bytes on the link to a peer (it counted all k - 1)."""
    ids = [f"n{i}" for i in range(4)]
    graph = {"nodes": [{"id": x, "device": "h100", "node": 0} for x in ids],
             "links": [{"a": a, "b": b, "bw": "100GB/s", "plane": "scaleup"}
                       for i, a in enumerate(ids) for b in ids[i + 1:]]}
    topology = load_topology({"name": "mesh4", "graph": graph})
    assert nx.density(topology.graph) == 1.0
    exact, bound = _both(topology, [0, 1, 2, 3])
    assert bound == pytest.approx(exact, rel=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=presets(scaleout_only=True), data=st.data())
def test_the_counted_loads_are_the_routed_ones_on_any_cluster_and_group(spec, data):
    topology = load_topology(spec)
    ranks = list(range(topology.num_devices))
    group = sorted(data.draw(st.lists(st.sampled_from(ranks), min_size=2, max_size=len(ranks), unique=True)))
    exact, bound = _both(topology, group, data.draw(st.sampled_from([1.0, 4096.0, float(GiB)])))
    assert bound == pytest.approx(exact, rel=1e-9)
