"""`rlsim run`: simulate one scenario and print its summary."""
from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "simulate one RL post-training scenario (timeline, bubbles, throughput)"
# loaded during the CLI's start-up (cli._start_up); run() needs them first
PRELOAD = ("simulator.api", "simulator.rl.llm_costs", "simulator.uncertainty.replicas")
EXAMPLES = """examples:
  rlsim run                                    # the seed scenario: GRPO Pangu Ultra MoE on CloudMatrix384
  rlsim run --workload grpo-qwen2.5-7b --topology dgx-h100 --set topology.nodes=4 --schedule colocated
  rlsim run --set schedule.kind=stalesync --set schedule.staleness=2 --iterations 8 --json
  rlsim run my-scenario.yaml --out results/    # scenario.yaml, CSVs and trace.json (open in ui.perfetto.dev)
  rlsim run --from-verl workloads/frameworks/verl-grpo-qwen2.5-7b.yaml data.train_batch_size=512 --topology hgx-h20
  rlsim run --from-verl workloads/frameworks/verl-fully-async-qwen2.5-7b.yaml --print-scenario > mine.yaml
  rlsim run --from-nemo-rl workloads/frameworks/nemo-rl-grpo-llama3.1-8b.yaml --set workload.response_length.median=900
  rlsim run --from-areal workloads/frameworks/areal-grpo-qwen2.5-1.5b.yaml rollout.max_head_offpolicyness=4 --iterations 6
  rlsim run --from-openrlhf workloads/frameworks/openrlhf-reinforce-qwen2.5-7b-hybrid.sh vllm.enable_sleep=false vllm.gpu_memory_utilization=0.3 --iterations 3
  rlsim run --from-trl workloads/frameworks/trl-grpo-qwen2.5-7b-server.yaml num_processes=4 vllm_serve.tensor_parallel_size=4 steps_per_generation=16 --iterations 3
  rlsim run --from-skyrl workloads/frameworks/skyrl-grpo-qwen2.5-1.5b-gsm8k.sh trainer.fully_async.enabled=true trainer.placement.colocate_all=false trainer.placement.policy_num_gpus_per_node=4 trainer.placement.ref_num_gpus_per_node=4 generator.inference_engine.num_engines=4 trainer.policy_mini_batch_size=1024 trainer.fully_async.num_parallel_generation_workers=2048 trainer.algorithm.policy_loss_type=rollout_is generator.batched=false --iterations 3
"""


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import add_common, add_framework_import
    parser.add_argument("scenario", nargs="?", help="scenario YAML (default: the seed scenario)")
    parser.add_argument("--topology", help="topology preset name or YAML path (with --from-*: sized from the config)")
    add_framework_import(parser)
    parser.add_argument("--workload", help="workload preset name or YAML path")
    parser.add_argument("--iterations", type=int, help="training iterations to simulate")
    parser.add_argument("--seed", type=int, help="random seed")
    add_common(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import SCHEDULE_KINDS_HELP, out_dir
    add_scenario_arguments(parser)
    parser.add_argument("--schedule", help=SCHEDULE_KINDS_HELP)
    parser.add_argument("--out", type=out_dir, help="write scenario.yaml, summary.json, CSVs, trace.json, plots and report.html here "
                             "(with --seeds: summary.json and replicas.csv)")
    from .replicas import add_replica_arguments
    add_replica_arguments(parser)   # --seeds N, --jobs (issue 13)


def refuse_twice_given(args: argparse.Namespace) -> None:
    """A value given both as an option (--iterations, --seed, --schedule, --topology) and by a --set
    item of the same key: the --set won without a word. (`rlsim sweep` refuses an option or --set item
    its --grid replaces the same way.)"""
    from ..errors import RlsimError
    from ..overrides import parse_assignment
    keys = {parse_assignment(o)[0] for o in args.overrides}
    same = {"iterations": ("iterations",), "seed": ("seed",), "schedule": ("schedule", "schedule.kind"),
            "topology": ("topology", "topology.preset")}
    for name, clashes in same.items():
        clash = sorted(k for k in clashes if k in keys)
        if getattr(args, name, None) is not None and clash:
            raise RlsimError(f"{name} is given twice: as --{name} and as --set {clash[0]}", field=clash[0],
                             fix=f"give one of them (--{name}, or --set {clash[0]}=...)")


def scenario_keywords(args: argparse.Namespace, imported: object = None) -> dict:
    refuse_twice_given(args)
    overrides = list(args.overrides)
    if getattr(args, "seeds", None) == 1:
        # --seeds wins over the scenario's replicas: (one plain run), over a --set replicas=N too (given
        # twice, the key was refused)
        from ..overrides import parse_assignment
        overrides = [item for item in overrides if parse_assignment(item)[0] != "replicas"] + ["replicas=1"]
    kw = {"overrides": overrides, "iterations": args.iterations, "seed": args.seed}
    if imported is not None:   # the framework config gave topology, workload and schedule
        return kw
    if args.topology is not None:
        kw["topology"] = args.topology
    if args.workload is not None:
        kw["workload"] = args.workload
    return kw


def run(args: argparse.Namespace) -> int:
    from .common import config_named, framework_import, stale_outputs_said
    imported = framework_import(args)
    with config_named(imported), stale_outputs_said(args.out):
        return _run(args, imported)


def _run(args: argparse.Namespace, imported: Any) -> int:
    from ..api import simulate
    from .common import print_framework_listing, print_json, print_warnings, say_replaced_topology
    if imported is not None and args.print_scenario:
        return print_scenario(imported, args)
    kw = scenario_keywords(args, imported)
    say_replaced_topology(args)
    if args.schedule is not None:
        kw["schedule"] = args.schedule
    if imported is not None:
        print_framework_listing(imported)
        args.scenario = imported.scenario
    from .replicas import run_replicated
    code = run_replicated(args, kw)   # --seeds N / replicas: / distribution values (issue 13)
    if code is not None:
        return code
    from .common import Progress
    with Progress("iteration") as progress:   # the per-sample table only when --out writes it (flat memory)
        result = simulate(args.scenario, progress=progress, keep_samples=bool(args.out), **kw)
    if imported is not None:
        result.summary["framework_import"] = imported.report()
    if args.out:
        result.write(args.out)
        # --- report hook (issue 5): plots (PNG + SVG) and report.html beside the data files ---
        from ..report.html import write_report
        write_report(result, args.out)
    print_warnings(result.summary)
    if args.json:
        print_json(result.summary)
        from ..metrics import summary_notes
        for note in summary_notes(result.summary):   # stdout stays one JSON document
            print(f"note: {note}", file=sys.stderr)
    else:
        from ..report.console import print_summary  # rich: once there is something to print
        print_summary(result.summary, out_dir=args.out)
    return 0


def print_scenario(imported: object, args: argparse.Namespace) -> int:
    """--print-scenario: validate the imported scenario (with --set, --iterations, --seed) and print it.
    The flags of the command it would have run are refused (they were dropped: --json still printed
    YAML)."""
    from ..errors import RlsimError
    from ..scenario import load_scenario
    unused = {"json": False, "out": None, "seeds": None, "jobs": 1, "vary": [], "samples": None, "schedules": None,
              "metric": None}
    for name, default in unused.items():
        if getattr(args, name, default) != default:
            flag = f"--{name}"
            raise RlsimError(f"{flag} does not apply with --print-scenario (it prints the scenario as YAML and "
                             "exits)", field=flag, fix=f"drop {flag}, or drop --print-scenario to run")
    load_scenario(imported.scenario, **scenario_keywords(args, imported))
    sys.stdout.write(imported_scenario_yaml(imported, args))
    return 0


def imported_scenario_yaml(imported: Any, args: argparse.Namespace) -> str:
    """The imported scenario with the command's --set, --iterations and --seed applied, as YAML that
    `rlsim run FILE` re-loads (--print-scenario's output; a --from-* sweep's base in its --out)."""
    extra = [f"iterations={args.iterations}"] * (args.iterations is not None) + [f"seed={args.seed}"] * (args.seed is not None)
    return imported.scenario_yaml([*args.overrides, *extra])
