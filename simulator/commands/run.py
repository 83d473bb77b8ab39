"""`rlsim run`: simulate one scenario and print its summary."""
from __future__ import annotations

import argparse

HELP = "simulate one RL post-training scenario (timeline, bubbles, throughput)"
EXAMPLES = """examples:
  rlsim run                                    # the seed scenario: GRPO Pangu Ultra MoE on CloudMatrix384
  rlsim run --workload grpo-qwen2.5-7b --topology dgx-h100 --set topology.nodes=4 --schedule colocated
  rlsim run --set schedule.kind=stalesync --set schedule.staleness=2 --iterations 8 --json
  rlsim run my-scenario.yaml --out results/    # scenario.yaml, CSVs and trace.json (open in ui.perfetto.dev)
"""


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import add_common
    parser.add_argument("scenario", nargs="?", help="scenario YAML (default: the seed scenario)")
    parser.add_argument("--topology", help="topology preset name or YAML path")
    parser.add_argument("--workload", help="workload preset name or YAML path")
    parser.add_argument("--iterations", type=int, help="training iterations to simulate")
    parser.add_argument("--seed", type=int, help="random seed")
    add_common(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import out_dir
    add_scenario_arguments(parser)
    parser.add_argument("--schedule", help="colocated | disaggregated | one-step-off | stalesync | async")
    parser.add_argument("--out", type=out_dir, help="write scenario.yaml, summary.json, CSVs and trace.json here")
    from .replicas import add_replica_arguments
    add_replica_arguments(parser)   # --seeds N, --jobs (issue 13)


def scenario_keywords(args: argparse.Namespace) -> dict:
    kw = {"overrides": args.overrides, "iterations": args.iterations, "seed": args.seed}
    if args.topology:
        kw["topology"] = args.topology
    if args.workload:
        kw["workload"] = args.workload
    return kw


def run(args: argparse.Namespace) -> int:
    from ..api import simulate
    from ..report.console import print_summary
    from .common import print_json
    kw = scenario_keywords(args)
    if args.schedule:
        kw["schedule"] = args.schedule
    from .replicas import run_replicated
    code = run_replicated(args, kw)   # --seeds N / replicas: / distribution values (issue 13)
    if code is not None:
        return code
    result = simulate(args.scenario, **kw)
    if args.out:
        result.write(args.out)
        # --- report hook (issue 5): plots (PNG + SVG) and report.html beside the data files ---
        from ..report.html import write_report
        write_report(result, args.out)
    if args.json:
        print_json(result.summary)
    else:
        print_summary(result.summary, out_dir=args.out)
    return 0
