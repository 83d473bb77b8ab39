"""`--seeds N` / `replicas:` on run, compare and sweep (face layer): the flags, the replica path of
each command and the interval lines it prints. The commands call in here with one line each."""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from .common import positive_int, print_json

# the figures the human output shows with their intervals
SHOWN = ("steady_tokens_per_s", "steady_step_time_s", "tokens_per_s", "step_time_s", "bubble_fraction", "mfu")


def add_replica_arguments(parser: argparse.ArgumentParser, *, jobs: bool = True) -> None:
    parser.add_argument("--seeds", type=positive_int, metavar="N",
                        help="N replicas on seeds seed, seed+1, ...: figures become medians with a 95%% interval "
                             "(default: the scenario's replicas:, else 1; --seed values less than N apart share replicas)")
    if jobs:
        parser.add_argument("--jobs", type=positive_int, default=1, help="replicas run in parallel (default 1)")


def _plan(args: argparse.Namespace, keywords: dict[str, Any]) -> Any:
    """The replica plan; --jobs with a plain single run (nothing to run in parallel) is refused."""
    from ..uncertainty import plan_replicas
    plan = plan_replicas(args.scenario, seeds=getattr(args, "seeds", None), **keywords)
    if not plan.varies and getattr(args, "jobs", 1) != 1:   # it was read past
        raise RlsimError(f"--jobs {args.jobs} runs replicas in parallel, and this is one run", field="--jobs",
                         fix="add --seeds N (or replicas: N, or a distribution value), or drop --jobs")
    return plan


def run_replicated(args: argparse.Namespace, keywords: dict[str, Any]) -> int | None:
    """`rlsim run` over replicas when --seeds, `replicas:` or a distribution value asks for it;
    None when the plain single run applies (its output stays byte-identical)."""
    from ..uncertainty.replicas import run_replicas, summarize
    plan = _plan(args, keywords)
    if not plan.varies:
        return None
    summaries = run_replicas(plan, jobs=args.jobs)
    doc = summarize(plan, summaries)
    if args.out:
        write_replicas(Path(args.out), doc, summaries, replicas_snapshot(plan))
    if args.json:
        print_json(doc)
    else:
        from ..report.console import print_summary
        print_summary(doc, out_dir=args.out, wrote="scenario.yaml; summary.json: medians and intervals; replicas.csv: one row a replica")
        print_intervals(doc)
        if doc["seeds"] > 1:
            print(MEDIANS_APART)
    return 0


def compare_replicated(args: argparse.Namespace, kinds: list[str], keywords: dict[str, Any]) -> int | None:
    """`rlsim compare` over replicas (paired seeds); None when one seed and no distribution apply."""
    from ..uncertainty.compare import compare_replica_runs
    plan = _plan(args, keywords)
    if not plan.varies:
        return None
    docs, runs = compare_replica_runs(args.scenario, kinds, seeds=plan.n, jobs=args.jobs, **keywords)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "comparison.json").write_text(json.dumps(docs, indent=2, default=float) + "\n")
        from ..api import schedule_list
        from ..scenario import compared_schedules
        ran = schedule_list(kinds)   # as compare_replica_runs ran them, each with its own schedule section
        per_kind, _ = compared_schedules(plan.data.get("schedule") or {}, ran)
        for kind, doc, summaries in zip(ran, docs, runs, strict=True):   # as `rlsim run --seeds` writes each
            write_replicas(out / doc["schedule"], doc, summaries, replicas_snapshot(plan, per_kind[kind]))
    if args.json:
        print_json(docs)
    else:
        from ..report.console import print_comparison
        print_comparison(docs)
        for doc in docs:
            print_intervals(doc, title=f"{doc['schedule']}: ")
        if docs and docs[0]["seeds"] > 1:
            print(MEDIANS_APART)
        for doc in docs[1:]:
            print(doc["vs_baseline"]["verdict"])
    return 0


# The median summary takes each figure's median on its own: a bubble cause's or a stage's median need not
# sum with the others' to the total's (the median of a sum is not the sum of the medians).
MEDIANS_APART = ("each figure in the table is its own median over the seeds: the bubble causes and stages need "
                 "not sum to the totals")


def print_intervals(doc: dict[str, Any], title: str = "") -> None:
    from ..uncertainty.intervals import interval_label
    n = doc["seeds"]
    parts = [f"{name} {_num(doc[name])} [{_num(doc['ci95'][name][0])}, {_num(doc['ci95'][name][1])}]"
             for name in SHOWN if name in doc.get("ci95", {})]
    if n == 1:   # one draw of the distribution values: its figures, no interval to give
        parts = [f"{name} {_num(doc[name])}" for name in SHOWN if name in doc.get("ci95", {})]
        print(f"{title}one seed (one draw of the distribution values; --seeds N for an interval): " + "; ".join(parts))
    else:
        print(f"{title}median and {interval_label(n)} over {n} seeds: " + "; ".join(parts))
    for key, values in doc.get("replicas", {}).get("sampled", {}).items():
        print(f"  sampled {key}: " + ", ".join(_num(v) for v in values))


def _num(value: float) -> str:
    value = float(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def replicas_snapshot(plan: Any, schedule: dict[str, Any] | None = None) -> str:
    """scenario.yaml of a replicated run: the input the replicas ran (presets resolved, --set applied,
    distribution values kept) with its first seed and replica count, so `rlsim run OUT/scenario.yaml`
    runs the same replicas; ``schedule``: a compared kind's section."""
    from ..api import scenario_snapshot
    # a "_" key is load_scenario's own transport (the workload file's name for its errors), no scenario field
    data = {**{k: v for k, v in plan.data.items() if not k.startswith("_")}, "seed": plan.seeds[0], "replicas": plan.n}
    if schedule is not None:
        data["schedule"] = schedule
    return scenario_snapshot(data, plan.source)


def write_replicas(out: Path, doc: dict[str, Any], summaries: list[dict[str, Any]], snapshot: str) -> None:
    """scenario.yaml (``snapshot``, as a plain run writes one), summary.json (medians, ci95, seeds) and
    replicas.csv (one flattened row per replica)."""
    import pandas as pd

    from ..sweep import flatten
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(snapshot)
    (out / "summary.json").write_text(json.dumps(doc, indent=2, default=float) + "\n")
    rows = [{"replica": i, "seed": doc["replicas"]["seed"][i],
             **{f"sampled.{k}": v[i] for k, v in doc["replicas"]["sampled"].items()}, **flatten(s)}
            for i, s in enumerate(summaries)]
    pd.DataFrame(rows).to_csv(out / "replicas.csv", index=False)


def sweep_seeds(args: argparse.Namespace, base: Any) -> int:
    """A sweep point's replicas: --seeds N, else the base scenario's `replicas:` (a file's key or
    --set replicas=N; it was read past), else 1."""
    if getattr(args, "seeds", None):
        return int(args.seeds)
    return _scenario_replicas(base)


def _scenario_replicas(base: Any) -> int:
    """The base scenario's `replicas:` where it asks for more than one, else 1."""
    from ..scenario import scenario_data
    data, _ = scenario_data(base.spec, topology=base.topology, workload=base.workload, schedule=base.schedule,
                            overrides=base.overrides, iterations=base.iterations, seed=base.seed)
    replicas = data.get("replicas", 1)
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1 else 1


def one_seed_base(args: argparse.Namespace, base: Any) -> Any:
    """The sweep's base scenario with --seeds 1 winning over its `replicas: N`, as `rlsim run --seeds 1`
    runs one plain run (scenario_keywords' replicas=1): every point failed on 'replicas: N asks for N
    runs over seeds, and simulate runs one'. A --set replicas=N item gives way to it (kept beside it,
    simulate refused every point: 'overrides replicas is given twice'). Unchanged otherwise (its
    fingerprint too)."""
    if getattr(args, "seeds", None) != 1 or _scenario_replicas(base) == 1:
        return base
    import dataclasses

    from ..overrides import parse_assignment
    kept = tuple(item for item in base.overrides if parse_assignment(item)[0] != "replicas")
    return dataclasses.replace(base, overrides=(*kept, "replicas=1"))


def sweep_replicated(base: Any, seeds: int, evaluate: Any, fingerprint: str,
                     grid: Mapping[str, Sequence[Any]] | None = None) -> tuple[Any, str]:
    """With --seeds N every sweep point is N replicas (its row: medians, ci95, seeds); the results
    file's fingerprint includes N, so a resumed sweep never mixes single-seed and replica rows. One
    seed with a distribution value (in the base or the grid) is one replica, its first draw, as
    `rlsim run` takes it (a single run refused every such point)."""
    if seeds == 1 and not base.has_distributions(grid or {}):
        return evaluate, fingerprint
    from ..uncertainty.replicas import replicate_point
    digest = hashlib.sha256(f"{fingerprint}|seeds={seeds}".encode()).hexdigest()[:16]
    return functools.partial(replicate_point, base, seeds), digest


def plan_replicated(args: argparse.Namespace, rows_of: Any, overrides: list[str]) -> int | None:
    """`rlsim plan` over replicas: the planner has no seed, so its figures move only with distribution
    values; each candidate of replica 0's ranking gets the median and ci95 over the replicas that
    list its layout. `overrides`: the --set items the plan's scenario loads with (plan.scenario_overrides).
    None when one replica and no distribution apply."""
    from ..overrides import parse_assignment
    from ..uncertainty import plan_replicas
    from ..uncertainty.intervals import aggregate, ci_coverage, interval_over
    plan = plan_replicas(args.scenario, seeds=args.seeds, overrides=overrides)
    if not plan.distributions and any(parse_assignment(o)[0] == "seed" for o in args.overrides):
        raise RlsimError("seed picks the replicas' draws of distribution values, and this plan has none "
                         "(the planner itself has no randomness)", source="--set", field="seed",
                         fix="drop --set seed, or give a workload key as a distribution (docs/guides/uncertainty.md)")
    if not plan.varies:
        return None
    if getattr(args, "balance", False):
        raise RlsimError("--balance splits one run's layers and micro-batches, and this plan has replicas (--seeds, "
                         "replicas: or a distribution value)", field="--balance",
                         fix="drop --balance, or give the plan fixed values")
    runs = [rows_of(plan.scenario(i)) for i in range(plan.n)]
    rows = []
    for row in runs[0]:
        key = json.dumps(row.get("layout"), sort_keys=True)
        same = [r for rows_i in runs for r in rows_i if json.dumps(r.get("layout"), sort_keys=True) == key]
        doc, ci95 = aggregate(same)
        # what each row's interval covers: it is over the replicas that list the layout, not all of them
        rows.append({**doc, "seeds": len(same), "ci95": ci95, "ci_coverage": ci_coverage(len(same))})
    if args.json:
        print_json(rows)
        return 0
    print(f"{args.stage} layouts, medians and intervals over {plan.n} replica{'s' if plan.n != 1 else ''} "
          "(each over the replicas that list the layout):")
    for i, row in enumerate(rows, 1):
        ci = row["ci95"]
        spread = (interval_over(row["seeds"], "replicas") if row["seeds"] > 1
                  else "one replica: no interval")
        print(f"#{i} {row.get('layout')}: step {_num(row['step_time_s'])} s {_pair(ci, 'step_time_s')}, "
              f"tokens/s {_num(row['tokens_per_s'])} {_pair(ci, 'tokens_per_s')} ({spread})")
    return 0


def _pair(ci95: dict[str, list[float]], name: str) -> str:
    low, high = ci95.get(name, [float("nan")] * 2)
    return f"[{_num(low)}, {_num(high)}]"
