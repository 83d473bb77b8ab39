"""`rlsim sensitivity`: which inputs move a figure most (one-at-a-time swings, a tornado chart,
Sobol indices with SALib)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "rank the inputs that move a figure most (tornado chart, Sobol indices)"
# the modules run() imports first, loaded at start-up with the generated code cached (cli._preload)
PRELOAD = ("simulator.api", "simulator.rl.llm_costs", "simulator.uncertainty.replicas",
           "simulator.uncertainty.sensitivity_runs", "simulator.report.tornado")
EXAMPLES = """examples:
  rlsim sensitivity --iterations 2                 # the default keys (length law, overheads, efficiencies)
  rlsim sensitivity --vary workload.response_length.median=1024..4096 --vary topology.scaleup.efficiency=0.6..0.9
  rlsim sensitivity my.yaml --metric steady_step_time_s --seeds 4 --samples 8 --out sens/ --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import out_dir, positive_int
    from .run import add_scenario_arguments
    add_scenario_arguments(parser)
    parser.add_argument("--schedule", help="schedule kind of the base scenario")
    parser.add_argument("--vary", action="append", default=[], metavar="KEY=LOW..HIGH",
                        help="a key and its range (repeatable; default: length median and sigma, step overhead, "
                             "device GEMM and HBM efficiencies, scale-up and scale-out efficiencies)")
    parser.add_argument("--metric", default=None,   # None: runs.DEFAULT_METRIC (--print-scenario refuses a given one)
                        help="the figure of the run summary to explain (dotted for nested; default steady_tokens_per_s)")
    parser.add_argument("--seeds", type=positive_int, metavar="N", help="each figure the median over N seeds")
    parser.add_argument("--samples", type=int, default=None,
                        help="Sobol base samples (runs: samples x (keys + 2); 0 skips; default 4, needs SALib)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--out", type=out_dir, help="write tornado.png/.svg, sensitivity.json and report.html here")


def run(args: argparse.Namespace) -> int:
    from ..errors import RlsimError
    from .common import config_named, framework_import, stale_outputs_said
    if args.samples is not None and args.samples < 0:
        raise RlsimError(f"--samples must be >= 0, got {args.samples}", field="--samples", fix="e.g. --samples 8")
    imported = framework_import(args)   # --from-verl / --from-nemo-rl / --from-areal: the base scenario (they were dropped)
    with config_named(imported), stale_outputs_said(args.out):
        return _sensitivity(args, imported)


def _sensitivity(args: argparse.Namespace, imported: Any) -> int:
    from ..report.tornado import conclusion, figure_text, sensitivity_records, write_sensitivity_report
    from ..uncertainty import sensitivity_runs as runs
    from .common import print_framework_listing, print_json, say_replaced_topology
    from .run import print_scenario, scenario_keywords
    if imported is not None and args.print_scenario:
        return print_scenario(imported, args)
    kw = scenario_keywords(args, imported)
    say_replaced_topology(args)
    if args.schedule is not None:
        kw["schedule"] = args.schedule
    if imported is not None:
        print_framework_listing(imported)
        args.scenario = imported.scenario
    _say_schedule_left_out(args.scenario, kw)
    args.metric = args.metric or runs.DEFAULT_METRIC
    frame = runs.sensitivity(args.scenario, args.vary or None, seeds=args.seeds, metric=args.metric,
                             samples=runs.DEFAULT_SAMPLES if args.samples is None else args.samples, jobs=args.jobs, **kw)
    if args.out:
        write_sensitivity_report(frame, args.out)
    notes = (runs.collapsed_note(frame), runs.sobol_sample_note(frame.attrs.get("samples")))
    note = "; ".join(text for text in notes if text)
    if frame.attrs.get("warm_up_only"):   # the ranking would be the warm-up step's (a partial batch)
        note = ((note + "; ") if note else "") + (
            "one iteration of a schedule that runs ahead of its trainer: every figure is its warm-up step's (a "
            "partial first batch), so the ranking is the warm-up's; run 2 or more iterations (--iterations)")
    noisy = runs.sobol_outside(frame)
    noisy_note = (f"note: Sobol indices outside [0, 1] or first above total ({noisy}): estimates from "
                  f"{frame.attrs['samples']} base samples are noise at this size; raise --samples") if noisy else ""
    if args.json:   # the notes on stderr, as the console's below
        print_json(sensitivity_records(frame))
        for text in (noisy_note, f"note: {note}" if note else ""):
            if text:
                print(text, file=sys.stderr)
        return 0
    print(f"{args.metric} at base: {figure_text(frame.attrs['base'], 6)} (median over {frame.attrs['seeds']} seed(s))")
    print(frame.to_string(index=False, float_format=figure_text))
    print(conclusion(frame))
    if noisy_note:
        print(noisy_note)
    if note:
        print(f"note: {note}")
    if args.out:
        print(f"tornado chart and report.html in {args.out}")
    return 0


def _say_schedule_left_out(scenario: Any, keywords: dict[str, Any]) -> None:
    """--schedule KIND (or --set schedule=KIND) keeps the knobs of the scenario's schedule section that
    KIND takes; the others, left out of every run, are said on stderr (the ranking shows no run's notes)."""
    from ..errors import RlsimError
    from ..scenario import kind_set_alone, load_scenario
    from .common import say_schedule_left_out
    if keywords.get("schedule") is None and kind_set_alone(keywords.get("overrides") or ())[0] is None:
        return
    try:
        base = load_scenario(scenario, **keywords)
    except RlsimError:   # a distribution value, or a bad scenario: the runs say why
        return
    say_schedule_left_out(base)
