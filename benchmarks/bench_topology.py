"""Scale figures for the hardware and network layers. Prints, asserts nothing.

    python benchmarks/bench_topology.py
"""
from __future__ import annotations

import time
import timeit

import simpy

from simulator.hardware.topology import load_topology
from simulator.network.collectives import CollectiveModel
from simulator.network.flows import FlowNetwork

GiB = 2**30


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    print("build times (requirement <= 5 s each; the networkx graph is built on first .graph access):")
    big = {}
    for preset, params in [("cloudmatrix384", {"supernodes": 16}), ("cloudmatrix384", {"supernodes": 64}),
                           ("dgx-h100", {"nodes": 1024}), ("gb200-nvl72", {"racks": 64})]:
        topo, dt = _timed(lambda p=preset, q=params: load_topology(p, q))
        big.setdefault(preset, topo)
        graph, dt_graph = _timed(lambda t=topo: t.graph)
        print(f"  {preset:<16} {params}  {topo.num_devices:>6} devices  {dt:6.3f} s  | graph: {graph.number_of_nodes():>6}"
              f" nodes  {graph.number_of_edges():>6} edges  {dt_graph:6.3f} s")

    print("collective costs (first call builds the plan; cached calls are dictionary hits):")
    cases = [("dgx-h100 node:0 all_reduce", big["dgx-h100"], "all_reduce", list(range(8))),
             ("dgx-h100 8 nodes all_reduce", big["dgx-h100"], "all_reduce", list(range(64))),
             ("cloudmatrix384 supernode all_reduce", big["cloudmatrix384"], "all_reduce", list(range(384))),
             ("cloudmatrix384 EP64 all_to_all", big["cloudmatrix384"], "all_to_all", list(range(64))),
             ("dgx-h100 all 8192 all_reduce (list)", big["dgx-h100"], "all_reduce", list(range(8192))),
             # Callers with contiguous groups pass a range: O(1) to hash, so the hit stays cheap.
             ("dgx-h100 all 8192 all_reduce (range)", big["dgx-h100"], "all_reduce", range(8192))]
    for label, topo, op, ranks in cases:
        model = CollectiveModel(topo)
        cost, first = _timed(lambda m=model, o=op, r=ranks: m.cost(o, r, GiB))
        n = 20000
        cached = timeit.timeit(lambda m=model, o=op, r=ranks: m.cost(o, r, GiB), number=n) / n
        print(f"  {label:<38} {cost.algorithm:<12} busbw {cost.busbw_Bps / 1e9:7.1f} GB/s  "
              f"first {first * 1e3:8.2f} ms  cached {cached * 1e6:6.2f} us")

    print("flow simulation (max-min recompute at every start/end):")
    topo = load_topology("dgx-h100", {"nodes": 4})
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    for i in range(32):
        for j in range(0, 32, 3):
            if i != j:
                net.transfer(i, j, 1e8 * (1 + (i * 7 + j) % 5))
    (_, dt) = _timed(env.run)
    print(f"  {net._next_id} concurrent transfers on dgx-h100 x4: {net.stats.recomputes} recomputes, "
          f"{dt:.3f} s wall, {env.now * 1e3:.2f} ms simulated")


if __name__ == "__main__":
    main()
