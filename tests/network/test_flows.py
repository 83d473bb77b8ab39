"""Max-min fair flows inside simpy: contention, conservation, capacity."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.network.collectives import CollectiveModel
from simulator.network.flows import FlowNetwork

# Four devices on one switch, zero latency, 10 GB/s per direction, efficiency 1: rates are exact.
STAR = {
    "name": "star",
    "graph": {
        "nodes": [{"id": f"d{i}", "device": "h100", "node": i} for i in range(4)] + [{"id": "sw", "kind": "switch"}],
        "links": [{"a": f"d{i}", "b": "sw", "bw": "10GB/s", "latency": 0, "efficiency": 1.0} for i in range(4)],
    },
}
STAR_T = load_topology(STAR)


def _run(topology, transfers):
    """transfers: (start_s, src, dst, bytes) -> list of durations, the network."""
    env = simpy.Environment()
    net = FlowNetwork(env, topology, keep_records=True)
    procs = []

    def later(t, s, d, b):
        yield env.timeout(t)
        duration = yield net.transfer(s, d, b)
        return duration

    for t, s, d, b in transfers:
        procs.append(env.process(later(t, s, d, b)))
    env.run()
    return [p.value for p in procs], net


def test_one_flow_runs_at_link_speed():
    (d,), _ = _run(STAR_T, [(0, 0, 1, 1e9)])
    assert d == pytest.approx(0.1, rel=1e-12)


def test_two_equal_flows_on_one_bottleneck_take_twice_as_long():
    (one,), _ = _run(STAR_T, [(0, 0, 1, 1e9)])
    durations, _ = _run(STAR_T, [(0, 0, 1, 1e9), (0, 0, 2, 1e9)])  # both leave d0 on one link
    assert durations == pytest.approx([2 * one, 2 * one], rel=1e-12)


def test_flows_on_disjoint_links_do_not_slow_each_other():
    (one,), _ = _run(STAR_T, [(0, 0, 1, 1e9)])
    durations, _ = _run(STAR_T, [(0, 0, 1, 1e9), (0, 2, 3, 1e9)])
    assert durations == pytest.approx([one, one], rel=1e-12)


def test_late_flow_gets_the_link_after_the_first_ends():
    # 1 GB at 10 GB/s alone for 0.05 s, shares 5 GB/s until the first finishes.
    durations, _ = _run(STAR_T, [(0, 0, 1, 1e9), (0.05, 0, 2, 1e9)])
    assert durations[0] == pytest.approx(0.15, rel=1e-9)  # 0.5 GB alone, 0.5 GB at half rate
    assert durations[1] == pytest.approx(0.15, rel=1e-9)  # 0.5 GB shared (0.1 s), 0.5 GB alone (0.05 s)


def test_max_min_gives_unused_share_to_the_unconstrained_flow():
    # d0->d1 and d0->d2 share d0's uplink (5 GB/s each); sw->d2 carries d0->d2 (5) and d3->d2,
    # so max-min gives d3->d2 the remaining 5, not a fair half of its own idle uplink.
    env = simpy.Environment()
    net = FlowNetwork(env, STAR_T)
    for s, d in [(0, 1), (0, 2), (3, 2)]:
        net.transfer(s, d, 1e12)
    env.run(until=1e-3)
    rates = net.link_rates()
    assert rates[("d0", "sw")] == pytest.approx(10e9)
    assert rates[("sw", "d2")] == pytest.approx(10e9)
    assert rates[("d3", "sw")] == pytest.approx(5e9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.2), st.integers(0, 3), st.integers(0, 3), st.floats(1e3, 5e9)),
                min_size=1, max_size=12))
def test_bytes_are_conserved_and_no_link_exceeds_capacity(transfers):
    durations, net = _run(STAR_T, transfers)
    sent = sum(b for _, s, d, b in transfers if s != d)
    delivered = sum(r.delivered for r in net.stats.finished)
    assert delivered == pytest.approx(sent, rel=1e-9)
    for r in net.stats.finished:
        assert r.delivered == pytest.approx(r.size, rel=1e-9)
        assert r.end_s - r.start_s >= r.size / 10e9 * (1 - 1e-9)  # never faster than the link
    assert net.stats.max_link_utilization <= 1 + 1e-9
    assert net.active_flows() == 0


def test_collective_on_an_idle_network_matches_the_cost_model():
    t = load_topology("dgx-h100", {"nodes": 2})
    model = CollectiveModel(t)
    for op, ranks in [("all_reduce", list(range(8))), ("all_gather", list(range(16))),
                      ("all_to_all", list(range(16))), ("all_reduce", list(range(16)))]:
        env = simpy.Environment()
        proc = FlowNetwork(env, t, model).collective(op, ranks, 2**30)
        env.run()
        # max-min flows cannot beat the most loaded link, and on these symmetric patterns meet it
        assert proc.value == pytest.approx(model.cost(op, ranks, 2**30).time_s, rel=1e-9)


def test_concurrent_collectives_slow_each_other_only_when_they_share_links():
    t = load_topology("dgx-h100", {"nodes": 2})
    model = CollectiveModel(t)
    alone = model.cost("all_reduce", list(range(16)), 2**30).time_s

    def both(second):
        env = simpy.Environment()
        net = FlowNetwork(env, t, model)
        a = net.collective("all_reduce", list(range(16)), 2**30)
        net.collective(*second)
        env.run()
        return a.value

    assert both(("p2p", [0, 8], 2**30)) > alone * 1.05  # shares GPU 0's NIC
    assert both(("all_gather", [1, 2], 2**20)) < alone * 1.05  # a small NVLink job barely matters


def test_a_transfer_pays_its_paths_latency_then_its_bytes():
    """Every flow test had zero latency, so a transfer without its path latency passed (an audit's
    mutation): on a star of 2 us links, 1 GB between two devices takes 2 x 2 us + 1e9 / 10 GB/s."""
    slow = {**STAR, "graph": {**STAR["graph"], "links": [{**link, "latency": "2us"} for link in STAR["graph"]["links"]]}}
    (duration,), _ = _run(load_topology(slow), [(0, 0, 1, 1e9)])
    assert duration == pytest.approx(2 * 2e-6 + 0.1, rel=1e-12)
