"""`rlsim compare`: the same scenario under several schedules, side by side."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .run import add_scenario_arguments, scenario_keywords

HELP = "compare schedules (colocated, disaggregated, stalesync, ...) on one scenario"
# loaded during the CLI's start-up (cli._start_up); run() needs them first
PRELOAD = ("simulator.api", "simulator.rl.llm_costs", "simulator.uncertainty.replicas", "simulator.report.console")
DEFAULT_SCHEDULES = "colocated,disaggregated,stalesync"
EXAMPLES = """examples:
  rlsim compare                                           # seed scenario: colocated vs disaggregated vs stalesync
  rlsim compare --schedules colocated,one-step-off,async --workload grpo-qwen2.5-7b --topology dgx-h100
  rlsim compare --json --iterations 2
  rlsim compare --from-verl workloads/frameworks/verl-grpo-qwen2.5-7b.yaml --schedules colocated,one-step-off \\
      --set schedule.rollout_devices=4
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import out_dir
    add_scenario_arguments(parser)
    parser.add_argument("--schedules", default=None,   # None: DEFAULT_SCHEDULES (--print-scenario refuses a given one)
                        help="comma-separated schedule kinds (default: colocated,disaggregated,stalesync)")
    # --- report hook (issue 5) ---
    parser.add_argument("--out", type=out_dir, help="write each schedule's data (a folder per schedule), plots and report.html here "
                             "(with --seeds: comparison.json and each schedule's summary.json / replicas.csv)")
    from .replicas import add_replica_arguments
    add_replica_arguments(parser)   # --seeds N, --jobs (issue 13)


def run(args: argparse.Namespace) -> int:
    from .common import config_named, framework_import, stale_outputs_said
    imported = framework_import(args)
    with config_named(imported), stale_outputs_said(args.out):
        return _compare(args, imported)


def _compare(args: argparse.Namespace, imported: Any) -> int:
    from ..api import compare, schedule_list
    from ..errors import RlsimError
    from ..report.console import print_comparison
    from ..scenario import SCHEDULE_CLASSES
    from .common import print_framework_listing, print_json, print_warnings, say_replaced_topology
    from .run import print_scenario
    if imported is not None and args.print_scenario:
        return print_scenario(imported, args)
    kinds = [k.strip() for k in (DEFAULT_SCHEDULES if args.schedules is None else args.schedules).split(",")]
    if any(not k for k in kinds) and any(kinds):   # 'colocated,,async' ran two kinds, the empty one dropped
        raise RlsimError(f"--schedules {args.schedules!r} has an empty item", field="--schedules",
                         fix="list the kinds with one comma between each, e.g. --schedules colocated,async")
    kinds = [k for k in kinds if k]
    bad = [k for k in kinds if k not in SCHEDULE_CLASSES]
    if bad or len(kinds) < 1:
        what = f"unknown schedule(s) {', '.join(bad)}" if bad else "no schedule given"
        raise RlsimError(what, field="--schedules", fix=f"use {', '.join(SCHEDULE_CLASSES)}")
    try:
        schedule_list(kinds)
    except RlsimError as exc:
        raise RlsimError(str(exc).split(": ", 1)[-1].split(" (fix:")[0], field="--schedules", fix=exc.fix) from None
    if imported is not None:
        print_framework_listing(imported)
        args.scenario = imported.scenario
    from .replicas import compare_replicated
    say_replaced_topology(args)
    _say_knobs_kept_out(args.overrides, kinds)
    code = compare_replicated(args, kinds, scenario_keywords(args, imported))   # --seeds N (issue 13)
    if code is not None:
        return code
    # the per-sample tables only for the report's files (--out): without, memory stays flat
    result = compare(args.scenario, kinds, keep_samples=bool(args.out), **scenario_keywords(args, imported))
    if imported is not None:
        for summary in result.rows():
            summary["framework_import"] = imported.report()
    if args.out:
        # --- report hook (issue 5): per-schedule data, plots (PNG + SVG) and report.html into --out ---
        from ..report.html import write_report
        write_report(result, args.out)
    for kind, run in result.results.items():   # said as `rlsim run` says them
        print_warnings(run.summary, prefix=f"{kind}: ")
    if args.json:
        print_json(result.rows())
    else:
        print_comparison(result.rows())
        if args.out:   # as `rlsim run --out` says it
            print(f"wrote {args.out}/ (report.html, and per schedule its scenario.yaml, summary.json, CSVs, "
                  "trace.json and plots)")
    return 0



def _say_knobs_kept_out(overrides: list[str], kinds: list[str]) -> None:
    """A --set schedule knob that only some compared kinds take goes to those; the others' columns
    run without it, said on stderr (a knob none of them takes is an error, api.compared_scenarios)."""
    from ..api import knobs_kept_out
    for knob, takers, others in knobs_kept_out(overrides, kinds):
        print(f"rlsim: note: schedule.{knob} applies to {', '.join(takers)}; {', '.join(others)} "
              f"run{'s' if len(others) == 1 else ''} without it", file=sys.stderr)
