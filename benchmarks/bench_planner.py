"""Planner speed and re-planning cost (prints figures; no asserts).

    python benchmarks/bench_planner.py [--quick]

1. Search speed on a 384-device topology (dgx-h100, nodes=48): candidates examined (after the
   divisibility rules), full cost-model evaluations, and the rate of each.
2. Re-planning after a node failure (neighbourhood search around the running layout): measured
   wall time, the modelled planning cost, and both as a fraction of the simulated step time.
3. Heterogeneous balancing on hetero-a100-h100 (8 + 8 nodes): uniform vs balanced step time and
   utilization.
"""
from __future__ import annotations

import argparse
import time

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.planner import plan_hetero, plan_training, replan_on_failure


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a smaller model/batch for a fast run")
    args = ap.parse_args()
    topo = load_topology("dgx-h100", {"nodes": 48})
    model = load_model("llama3.1-8b" if args.quick else "llama3.1-70b")
    batch, seq = (384, 4096) if args.quick else (1536, 4096)
    t0 = time.perf_counter()
    plan = plan_training(model, topo, batch, seq, top=3)
    wall = time.perf_counter() - t0
    examined = plan.evaluated + sum(v for k, v in plan.pruned.items() if k == "recompute_dominated")
    infeasible = sum(v for k, v in plan.pruned.items() if k.startswith("infeasible"))
    full = plan.evaluated - infeasible
    print(f"[search] {model.name} on {topo.name} x{topo.num_devices}, batch {batch} x {seq}")
    print(f"  enumerated {plan.enumerated}, examined {examined} (incl. {plan.pruned.get('recompute_dominated', 0)} "
          f"dominated), evaluated {plan.evaluated} ({infeasible} rejected by the memory check, {full} full "
          f"train_step_cost queries) in {wall:.2f} s")
    print(f"  rate: {plan.evaluated / wall:.0f} evaluations/s, {full / wall:.0f} full cost queries/s; "
          f"1000 evaluations take {1000 * wall / plan.evaluated:.1f} s")
    best = plan.best
    print(f"  best {best.choice} step {best.evaluation.step_time_s:.3f} s, {best.evaluation.tflops_per_device:.0f} "
          f"TFLOP/s/dev, naive placement {best.naive.step_time_s if best.naive else float('nan'):.3f} s")

    step = best.evaluation.step_time_s
    failed = topo.ranks_of_node(5)[:1]
    t0 = time.perf_counter()
    rp = replan_on_failure(model, topo, batch, seq, failed=failed, current=best.choice)
    wall = time.perf_counter() - t0
    print(f"[replan] device {failed[0]} fails -> {len(rp.survivors)} survivors, new {rp.plan.best.choice}")
    print(f"  {rp.plan.evaluated} evaluations, wall {wall:.3f} s = {wall / step:.2%} of the {step:.2f} s step; "
          f"modelled planning cost {rp.planning_cost_s:.3f} s = {rp.planning_cost_s / step:.2%}")

    het = load_topology("hetero-a100-h100", {"groups": {"a100": {"nodes": 8}, "h100": {"nodes": 8}}})
    gpt = load_model("gpt-7.5b")
    t0 = time.perf_counter()
    hp = plan_hetero(gpt, het, 512, 2048)
    wall = time.perf_counter() - t0
    u, b = hp.uniform, hp.balanced
    print(f"[hetero] {gpt.name} on {het.name} ({het.num_devices} devices), batch 512 x 2048, {wall:.2f} s")
    print(f"  uniform  tp{u.tp} pp{u.pp} dp{u.dp}: step {u.step_time_s:.3f} s, utilization {u.utilization:.3f}")
    print(f"  balanced tp{b.tp} pp{b.pp} dp{b.dp}: step {b.step_time_s:.3f} s, utilization {b.utilization:.3f}, "
          f"layers {list(b.layers_per_stage)}, micro-batches per replica {sorted(set(b.microbatches_per_replica))}")
    print(f"  speedup {hp.speedup:.2f}x")


if __name__ == "__main__":
    main()
