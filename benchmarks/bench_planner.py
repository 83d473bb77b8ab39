"""Planner speed and re-planning cost (prints figures; no asserts).

    python benchmarks/bench_planner.py [--quick]

1. Search speed on a 384-device topology (dgx-h100, nodes=48): candidates examined (after the
   divisibility rules), full cost-model evaluations, and the rate of each.
2. Re-planning after a node failure (neighbourhood search around the running layout): measured
   wall time, the modelled planning cost, and both as a fraction of the simulated step time.
3. Heterogeneous balancing on hetero-a100-h100 (8 + 8 nodes): uniform vs balanced step time and
   utilization.
4. Seconds per evaluation, what planner.eval_cost_s and planner.refused_cost_fraction model: the
   default scenario's `layout: auto` training search (autoplan.auto_training_evaluator, the evaluator
   a run plans with; --quick: grpo-qwen2.5-7b on one DGX H100 node), each evaluator call timed
   (time.perf_counter) and sorted by its outcome: timed (the step simulated), refused before timing
   (RefusedBeforeTiming: memory, the rollout phase, the pools, room beside a tail) or refused while
   timing. Prints the mean seconds of each, the refused / timed ratio and the machine-speed reference
   (benchmarks/speed_reference.py), so a user can set eval_cost_s to the planning host's figure.
"""
from __future__ import annotations

import argparse
import time

from speed_reference import reference_ms

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.planner import plan_hetero, plan_training, replan_on_failure
from simulator.planner.base import RefusedBeforeTiming


class TimedEvaluator:
    """An evaluator whose every call is timed, by outcome: timed, refused before timing, refused while timing."""

    def __init__(self, evaluator) -> None:
        self.evaluator = evaluator
        self.micro_batch_counts = getattr(evaluator, "micro_batch_counts", None)   # the search reads it
        self.seconds: dict[str, list[float]] = {"timed": [], "refused before timing": [], "refused while timing": []}

    def __call__(self, choice, ranks):
        t0 = time.perf_counter()
        outcome = "timed"
        try:
            return self.evaluator(choice, ranks)
        except RefusedBeforeTiming:
            outcome = "refused before timing"
            raise
        except RlsimError:
            outcome = "refused while timing"
            raise
        finally:
            self.seconds[outcome].append(time.perf_counter() - t0)

    def judge(self, choice, ranks):
        """The checks before timing alone (the block-recompute probes, planner/search.py _Work.judge),
        charged as a refusal before timing: timed as one. Without it the probes were timed whole."""
        t0 = time.perf_counter()
        try:
            return self.evaluator.judge(choice, ranks)
        finally:
            self.seconds["refused before timing"].append(time.perf_counter() - t0)


def cost_per_evaluation(quick: bool) -> None:
    """Section 4: the seconds an evaluation of `layout: auto`'s training search takes, by outcome."""
    from simulator.autoplan import auto_training_evaluator, planning_ranks, train_batch, train_space
    from simulator.llm.layer_costs import with_lora
    from simulator.planner import planner_settings
    from simulator.scenario import load_scenario

    sc = load_scenario(overrides=["workload.train_layout=auto"]) if not quick else load_scenario(
        workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, overrides=["workload.train_layout=auto"])
    topo = load_topology(sc.topology, max_devices=sc.limits.max_devices, spec_source=sc.source)
    model = with_lora(load_model(sc.workload.model), sc.workload.lora, sc.source)
    _, ranks = planning_ranks(sc, topo.num_devices)
    settings = planner_settings(sc.planner, source=sc.source)
    shape = train_batch(sc)
    timed = TimedEvaluator(auto_training_evaluator(sc, topo, model, shape, len(ranks)))
    space = train_space(settings.space, sc.workload.train_software, sc.planner, packed_step=True)
    speed = reference_ms()
    t0 = time.perf_counter()
    plan = plan_training(model, topo, *shape, ranks=ranks, space=space, params=settings.params, evaluator=timed, top=1)
    wall = time.perf_counter() - t0
    print(f"[cost per evaluation] {model.name} on {topo.name} x{len(ranks)} (layout: auto's training search), "
          f"machine-speed reference {speed:.1f} ms")
    print(f"  {plan.evaluated} evaluations in {wall:.2f} s; best {plan.best.choice}")
    mean = {k: sum(v) / len(v) for k, v in timed.seconds.items() if v}
    for outcome, values in timed.seconds.items():
        if values:
            print(f"  {outcome}: {len(values)}, {1e3 * mean[outcome]:.3f} ms each")
    if "timed" in mean and "refused before timing" in mean:
        ratio = mean["refused before timing"] / mean["timed"]
        print(f"  refused before timing / timed: {ratio:.3f} (planner.refused_cost_fraction "
              f"{settings.params.refused_cost_fraction:g}); a timed evaluation {1e3 * mean['timed']:.2f} ms "
              f"(planner.eval_cost_s {1e3 * settings.params.eval_cost_s:g} ms)")


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
    cost_per_evaluation(args.quick)


if __name__ == "__main__":
    main()
