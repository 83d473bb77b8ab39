"""V4: nccl-tests bus bandwidth through CollectiveModel (hardware.md, nccl-tests doc/PERFORMANCE.md)."""
from __future__ import annotations

from . import Case, register

SOURCE = "nccl-tests busbw, hardware.md (published-results.md V4)"
GiB = 2**30


def busbw_GBps(topology: str, nodes: int, op: str, ranks: list[int], nbytes: float) -> float:
    from ..hardware.topology import load_topology
    from ..network.collectives import CollectiveModel

    topo = load_topology({"preset": topology, "nodes": nodes})
    return CollectiveModel(topo).cost(op, ranks, nbytes).busbw_Bps / 1e9


@register
def cases():
    yield Case("V4 nccl 8x H100 all_reduce 1GiB", "busbw GB/s", 367.5,
               lambda: busbw_GBps("dgx-h100", 1, "all_reduce", list(range(8)), GiB), source=SOURCE,
               note="dgx-h100 node 0, ring over NVSwitch (365-370 published; midpoint)",
               in_sample="dgx-h100's NVSwitch efficiency (topologies/dgx-h100.yaml) is set from this nccl-tests figure")
    yield Case("V4 nccl 8x A100 all_reduce 1GiB", "busbw GB/s", 232.0,
               lambda: busbw_GBps("dgx-a100", 1, "all_reduce", list(range(8)), GiB), source=SOURCE,
               note="dgx-a100 node 0")
    yield Case("V4 nccl NDR per NIC all_reduce 1GiB", "busbw GB/s", 47.0,
               lambda: busbw_GBps("dgx-h100", 2, "all_reduce", [0, 8], GiB), source=SOURCE,
               note="dgx-h100 x2, GPU 0 of each node: one 400 Gb/s NDR NIC each (46-48 published; midpoint)",
               in_sample="dgx-h100's NIC efficiency (topologies/dgx-h100.yaml) is set from this nccl-tests figure")
