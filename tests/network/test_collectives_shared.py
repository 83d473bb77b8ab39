"""Costs shared between CollectiveModels of equal networks (Topology.value_key): equal answers,
no sharing across different networks or parameters, and no topology kept alive."""
import gc
import weakref

from simulator.hardware.topology import load_topology
from simulator.network import collectives
from simulator.network.collectives import CollectiveModel, CollectiveParams

GiB = 2**30
CASES = [("all_reduce", list(range(16))), ("all_gather", list(range(0, 32, 8))), ("all_to_all", list(range(8))),
         ("p2p", [0, 9]), ("reduce_scatter", [1, 3, 9, 11])]


def _costs(model):
    return [model.cost(op, ranks, nbytes) for op, ranks in CASES for nbytes in (4.0, 3e6, GiB)]


def _unshared(topology, params=None):
    model = CollectiveModel(topology, params)
    # A model with tables of its own, as before the sharing: what every shared answer must equal.
    model._cache, model._exact, model._signatures, model._by_group, model._lines = {}, {}, {}, {}, {}
    return model


def test_a_rebuilt_topology_gets_the_same_costs_as_a_model_of_its_own():
    first = CollectiveModel(load_topology("dgx-h100", {"nodes": 4}))
    expected = _costs(first)
    again = load_topology("dgx-h100", {"nodes": 4})
    shared = CollectiveModel(again)
    assert shared._cache is first._cache                      # equal networks share the tables
    assert _costs(shared) == expected == _costs(_unshared(again))


def test_different_networks_or_parameters_do_not_share():
    base = load_topology("dgx-h100", {"nodes": 4})
    other = load_topology("dgx-h100", {"nodes": 4, "scaleout": {"nic_bw": "200Gb/s"}})
    assert base.value_key() != other.value_key()
    assert CollectiveModel(other)._cache is not CollectiveModel(base)._cache
    slow = CollectiveParams(step_overhead_s=5e-6)
    assert CollectiveModel(base, slow)._cache is not CollectiveModel(base)._cache
    assert _costs(CollectiveModel(other)) == _costs(_unshared(other))
    assert _costs(CollectiveModel(base, slow)) == _costs(_unshared(base, slow))
    assert _costs(CollectiveModel(base, slow)) != _costs(CollectiveModel(base))


def test_explicit_graphs_keep_their_own_tables():
    graph = {"graph": {"nodes": [{"id": "a", "device": "h100"}, {"id": "b", "device": "h100"}],
                       "links": [{"a": "a", "b": "b", "bw": "100GB/s"}]}}
    t = load_topology(graph)
    assert t.value_key() is None
    assert CollectiveModel(t)._cache is not CollectiveModel(load_topology(graph))._cache


def test_the_shared_tables_keep_no_topology_alive():
    t = load_topology("dgx-h100", {"nodes": 4})
    _costs(CollectiveModel(t))
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


def test_the_shared_store_is_bounded(monkeypatch):
    monkeypatch.setattr(collectives, "SHARED_NETWORKS", 2)
    monkeypatch.setattr(collectives, "_SHARED", collectives.OrderedDict())
    for nodes in (4, 5, 6):
        CollectiveModel(load_topology("dgx-h100", {"nodes": nodes}))
    assert len(collectives._SHARED) == 2
    monkeypatch.setattr(collectives, "SHARED_ENTRIES_PER_NETWORK", 3)
    t = load_topology("dgx-h100", {"nodes": 6})
    model = CollectiveModel(t)
    expected = _costs(model)
    again = CollectiveModel(load_topology("dgx-h100", {"nodes": 6}))   # past the bound: emptied
    assert len(again._cache) == 0 and _costs(again) == expected
