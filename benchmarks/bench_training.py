"""Speed of one training-step cost query (target: <= 5 ms). Prints figures; asserts nothing.

    python benchmarks/bench_training.py

Cold: a fresh query (new sequences, so the step cache misses; the CollectiveModel's own cache is
warm after the first call, as it is inside a simulation or a planner sweep). Cached: the same query
again.
"""
from __future__ import annotations

import time

import numpy as np
from speed_reference import reference_ms

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.training import TrainLayout, TrainParams, forward_cost, train_step_cost, uniform_sequences
from simulator.validation.megatron import ROWS, _predict_row, predict_row


def _time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms\n")
    cases = [
        ("qwen2.5-7b tp4 pp2 dp2, 16x H100, 256 ragged seqs packed", "qwen2.5-7b", "dgx-h100", 2,
         TrainLayout(tp=4, pp=2, zero=1, recompute="selective", micro_batch=2), "packed", 256),
        ("qwen2.5-7b tp4 dp4, 16x H100, 256 ragged seqs padded", "qwen2.5-7b", "dgx-h100", 2,
         TrainLayout(tp=4, zero=1, recompute="full", micro_batch=1), "padded", 256),
        ("qwen3-30b-a3b tp2 ep8 pp2, 32x H100, 512 ragged seqs packed", "qwen3-30b-a3b", "dgx-h100", 4,
         TrainLayout(tp=2, ep=8, pp=2, zero=1, recompute="full", micro_batch=1), "packed", 512),
        ("llama3.1-70b tp8 pp4 vpp2 dp2, 64x H100, 512 uniform 4096", "llama3.1-70b", "dgx-h100", 8,
         TrainLayout(tp=8, pp=4, vpp=2, zero=1, recompute="full", micro_batch=1), "padded", 512),
    ]
    print(f"{'query':<62} {'median':>8} {'min ms':>8} {'cached ms':>10} {'step s':>8}")
    for label, model_name, preset, nodes, layout, packing, n in cases:
        model = load_model(model_name)
        topo = load_topology({"preset": preset, "nodes": nodes})
        params = TrainParams()
        if "uniform" in label:
            seqs_list = [uniform_sequences(n, 4096 - k) for k in range(12)]
        else:
            seqs_list = [np.clip(rng.lognormal(np.log(1500), 0.8, n).astype(int), 64, 8192) for _ in range(12)]
        def query(seqs, model=model, layout=layout, topo=topo, packing=packing, params=params):
            return train_step_cost(model, layout, topo, None, seqs, packing=packing, params=params)

        def fwd_query(seqs, model=model, layout=layout, topo=topo, packing=packing, params=params):
            return forward_cost(model, layout, topo, None, seqs, packing=packing, params=params)

        query(seqs_list[0])  # warms the CollectiveModel cache, as inside a simulation
        cold = []
        for seqs in seqs_list[1:]:
            t0 = time.perf_counter()
            r = query(seqs)
            cold.append(time.perf_counter() - t0)
        cached = _time(lambda s=seqs_list[-1]: query(s), 5)
        print(f"{label:<62} {np.median(cold) * 1e3:8.2f} {min(cold) * 1e3:8.2f} {cached * 1e3:10.3f} "
              f"{r.step_time_s:8.2f}")
        fwd = [_time(lambda s=s: fwd_query(s), 1) for s in seqs_list[1:]]
        print(f"{'  forward_cost of the same':<62} {np.median(fwd) * 1e3:8.2f} {min(fwd) * 1e3:8.2f}")
    print("\nMegatron Table 1 rows (first query each, collectives cold):")
    for name, tp, pp, gpus, batch, _ in ROWS:
        _predict_row.cache_clear()
        t0 = time.perf_counter()
        r = predict_row(name, tp, pp, gpus, batch)
        print(f"  {name:<12} pp={pp:<3} m={r.pipeline.micro_batches:<4} vpp={r.layout.vpp}  "
              f"{(time.perf_counter() - t0) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
