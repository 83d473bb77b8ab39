"""`rlsim sweep`: a grid over any scenario key, on local processes or Dask, resumable; capacity search."""
from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from . import common

# The sweep machinery (pandas, executors) is imported inside run(), so `rlsim --help` and the other
# commands do not pay for it.

HELP = "run a scenario over a grid of values (local processes or Dask), resumable; find the capacity for a target"
# loaded during the CLI's start-up (cli._start_up); run() needs them first
PRELOAD = ("simulator.sweep", "simulator.capacity", "simulator.api", "simulator.rl.llm_costs")
EXAMPLES = """examples:
  rlsim sweep --schedule stalesync --grid schedule.staleness=0,1,2 --grid schedule.placement=colocated,disaggregated --out sweep
  rlsim sweep my.yaml --grid topology.supernodes=1,2,4 --jobs 4 --out scaling --json
  rlsim sweep --grid topology.supernodes=1,2,3,4,6,8 --target-tokens-per-s 75000 --out capacity
  rlsim sweep --workload grpo-qwen2.5-7b --grid topology.preset=dgx-h100,dgx-a100 --grid topology.nodes=2,4,8 \\
      --target-tokens-per-s 40000 --price h100=2.5 --price a100-80gb=1.6
  rlsim sweep --grid schedule.staleness=0,1,2 --executor dask --scheduler tcp://10.0.0.5:8786 --out s
  rlsim sweep --from-verl workloads/frameworks/verl-grpo-qwen2.5-7b.yaml data.train_batch_size=128 \\
      --grid topology.nodes=1,2,4 --seeds 3 --out verl-scaling

With --from-verl (--from-nemo-rl, --from-areal, --from-openrlhf, --from-trl, --from-skyrl) the
config, imported as `rlsim run --from-verl` imports it, is the base scenario: the config's own keys
go right after its path; --grid and --set take rlsim's scenario keys (topology.nodes, schedule.*,
workload.*). The imported scenario is written to --out as imported-scenario.yaml; a changed config
or override that changes it is another sweep (its points are computed anew, not resumed).

Re-running the same command with the same --out computes only the points not yet in the results file
(results.csv or results.parquet), so an interrupted sweep resumes where it stopped; run again with
the other --format, it copies the finished points from the other file instead of computing them.
With --target-*, a single --grid key is searched by bisection (smallest value that meets the target);
several keys are swept in full and the cheapest configuration that meets the target is selected
(per 1M trained tokens: a schedule that trains part of a batch per step is not cheaper for it).
A note says when throughput stops growing with the size (a fixed batch bounds the step) or a
schedule drops samples as stale."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario YAML (default: the seed scenario)")
    parser.add_argument("--topology", help="topology preset name or YAML path (with --from-*: sized from the config)")
    common.add_framework_import(parser, print_scenario=False)
    parser.add_argument("--workload", help="workload preset name or YAML path")
    parser.add_argument("--schedule", help=f"schedule kind: {common.SCHEDULE_KINDS_HELP}")
    parser.add_argument("--iterations", type=int, help="RL iterations per point")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2,...",
                        help="values of one scenario key (repeatable; the grid is their product)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel workers (default: the number of CPUs)")
    parser.add_argument("--executor", choices=["local", "dask"], default="local",
                        help="local process pool (default) or Dask distributed")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="Dask scheduler address (default: start a LocalCluster)")
    parser.add_argument("--out", type=lambda text: Path(common.out_dir(text)), help="folder for the results file, plots and report.html")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv", help="results file format")
    parser.add_argument("--target-tokens-per-s", type=common.positive_number, help="capacity target: at least this many tokens/s")
    parser.add_argument("--target-step-time-s", type=common.positive_number, help="capacity target: at most this step time (s)")
    parser.add_argument("--max-points", type=common.positive_int, default=DEFAULT_MAX_POINTS, metavar="N",
                        help=f"refuse a sweep of more than N simulations: grid points x --seeds "
                             f"(default {DEFAULT_MAX_POINTS:,})")
    parser.add_argument("--price", action="append", default=[], metavar="[DEVICE=]USD",
                        help="price per device-hour, one number or per device kind (repeatable)")
    parser.add_argument("--search", choices=["bisect", "scan"], default=None,
                        help="capacity search over one key (with --target-*): bisect (the default; assumes more "
                             "is never worse) or scan")
    common.add_common(parser)
    from .replicas import add_replica_arguments
    add_replica_arguments(parser, jobs=False)   # --seeds N: each point a median over N replicas (issue 13)


def run(args: argparse.Namespace) -> int:
    from ..sweep import parse_grid
    grid = parse_grid(args.grid)
    # --from-verl ...: the base scenario; the grid keys are the user's, as --set keys are (no check of
    # the config's own size under a grid of sizes)
    imported = common.framework_import(args, also_set=tuple(grid))
    if imported is not None:   # before config_named, which would word it as a --set key's error
        _refuse_config_keys_in_grid(imported, grid)
    # a reused --out: the files of an earlier command there (a run's report, an old capacity.json) are
    # said; the results file is the sweep's own store, which it resumes from
    with common.config_named(imported), common.stale_outputs_said(args.out, own_prefixes=("results.",)), \
            contextlib.ExitStack() as held:
        return _run(args, held, grid, imported)


# The file of --out that holds a --from-* sweep's base scenario (the import, its --set keys applied)
IMPORTED_SCENARIO_NAME = "imported-scenario.yaml"


def _base_scenario(args: argparse.Namespace, grid: dict[str, list[Any]], imported: Any) -> Any:
    """The sweep's base: the scenario file and options, or the imported config's scenario (a mapping
    that travels to every worker whole, its contents in the points' ids)."""
    from ..sweep import BaseScenario
    if imported is None:
        return BaseScenario(spec=args.scenario, topology=args.topology, workload=args.workload,
                            schedule=args.schedule, overrides=tuple(args.overrides),
                            iterations=args.iterations, seed=args.seed)
    common.print_framework_listing(imported)
    return BaseScenario(spec=imported.scenario, overrides=tuple(args.overrides), iterations=args.iterations,
                        seed=args.seed, spec_name=f"the scenario imported from {imported.source}")


def _refuse_config_keys_in_grid(imported: Any, grid: dict[str, list[Any]]) -> None:
    """A --grid key of the framework's own table (data.train_batch_size) is not a scenario key: said
    with the scenario key it maps to, rather than as a scenario key that does not exist. A key under a
    scenario section is the scenario's, whatever the framework calls its own (AReaL's and TRL's `seed`)."""
    from ..frameworks.common import rule_for
    from ..scenario import Scenario
    sections = set(Scenario.model_fields) - {"source"}
    for key in grid:
        rule = None if key.split(".")[0] in sections else rule_for(key, imported.rules)
        if rule is None:
            continue
        target = f"sweep the scenario key it sets (--grid {rule.target}=...), or " if rule.target else ""
        raise RlsimError(f"{key} is a key of the {imported.framework} config {imported.source}, and --grid takes "
                         "rlsim's scenario keys", source="--grid", field=key,
                         fix=f"{target}give one value after the config path ({key}=VALUE) and run one sweep a value")


def _target(args: argparse.Namespace, grid: dict[str, list[Any]]) -> Any:
    """The capacity target of --target-tokens-per-s / --target-step-time-s (None without one);
    --search beside several keys or without a target is an error."""
    from ..capacity import Target
    if args.target_tokens_per_s is None and args.target_step_time_s is None:
        if args.search is not None:   # it would be read past: a sweep without a target runs every point
            raise RlsimError(f"--search {args.search} chooses how a capacity search (--target-tokens-per-s or "
                             "--target-step-time-s) walks one --grid key; this sweep has no target and runs every "
                             "point", field="--search", fix="add a --target-*, or drop --search")
        return None
    if args.search is not None and len(grid) > 1:   # several keys: swept in full, the cheapest picked
        raise RlsimError(f"--search {args.search} walks one --grid key; with {len(grid)} keys every point runs "
                         "and the cheapest that meets the target is picked", field="--search",
                         fix="drop --search, or search one key")
    return Target(args.target_tokens_per_s, args.target_step_time_s)


def _run(args: argparse.Namespace, held: contextlib.ExitStack, grid: dict[str, list[Any]], imported: Any) -> int:
    from ..sweep import (
        InputsChanged,
        InputWatch,
        ResultsStore,
        SweepAborted,
        make_executor,
        make_points,
        run_sweep,
        simulate_point,
    )

    if "replicas" in grid:   # a point's replicas are the sweep's (--seeds), not a grid value
        raise RlsimError("replicas is not a grid key: every point runs the same replicas", field="--grid",
                         fix="give --seeds N (or replicas: N in the scenario) for every point")
    jobs = _checked_counts(args)
    _refuse_replaced_by_grid(args, grid)
    base = _base_scenario(args, grid, imported)
    from .replicas import one_seed_base, sweep_replicated, sweep_seeds
    base = one_seed_base(args, base)   # --seeds 1 over a scenario's replicas: N: one plain run a point
    seeds = sweep_seeds(args, base)   # --seeds, else the scenario's replicas: (read once)
    _check_grid_size(grid, args.max_points, seeds)
    _refuse_unreadable_values(base, grid)
    _refuse_unloadable_base(base, grid)
    _say_schedule_left_out(base, grid)
    watch = InputWatch(base, grid)   # an input edited while the sweep runs stops it (its ids name the old one)
    fingerprint = watch.fingerprint
    prices = _parse_prices(args.price)   # before the output folder and the executor: nothing made for a typo
    executor = make_executor(args.executor, jobs, args.scheduler, base=base)
    store = None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        held.enter_context(_one_writer(args.out))   # held until the outputs are written
        store = ResultsStore(args.out / f"results.{args.format}")
        if imported is not None:   # what the points varied around, re-loadable by `rlsim sweep FILE`
            from .run import imported_scenario_yaml
            (args.out / IMPORTED_SCENARIO_NAME).write_text(imported_scenario_yaml(imported, args))
    target = _target(args, grid)
    evaluate = functools.partial(simulate_point, base)
    evaluate, fingerprint = sweep_replicated(base, seeds, evaluate, fingerprint, grid)

    points = make_points(grid, fingerprint, base.base_dirs())
    # one executor for the whole command: a Dask cluster starts once, not once per capacity batch
    with common.Progress("point") as progress, _stopped_once(), executor:
        searching = target is not None and len(grid) == 1 and _orderable(next(iter(grid.values())))
        try:
            if searching:
                objects, answer = _capacity_search(grid, target, evaluate, store, executor, fingerprint,
                                                   prices, args.search or "bisect", jobs, progress, base.base_dirs(),
                                                   watch=watch)
                sweep = None
            else:
                sweep = run_sweep(points, evaluate, store=store, executor=executor, progress=progress, grid=grid,
                                  cost=base.work_units,   # costliest first: the workers finish together
                                  check_inputs=watch)
                objects = [_enrich(o, prices) for o in sweep.run_objects()]
                answer = _select_cheapest(objects, target, prices) if target else None
        except InputsChanged as exc:
            where = f"; the points saved before in {store.path} keep their ids (of the old contents)" if store else ""
            print(f"rlsim: sweep stopped: {exc}{where}. Run the same command again to sweep the new contents.",
                  file=sys.stderr)
            return 1
        except SweepAborted as exc:
            where = f"; finished points are saved in {store.path}" if store else ""
            print(f"rlsim: sweep stopped: {exc}{where}. Run the same command again to compute the rest.",
                  file=sys.stderr)
            return 1
        except KeyboardInterrupt as exc:
            progress.close()
            bisecting = searching and (args.search or "bisect") == "bisect"
            print(f"rlsim: sweep {_stopped_by(exc)}: {_saved_note(store, points, bisecting)}", file=sys.stderr)
            return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)

    return _said_and_written(args, grid, imported, objects, sweep, store, answer, target)


def _said_and_written(args: argparse.Namespace, grid: dict[str, list[Any]], imported: Any, objects: list[dict],
                      sweep: Any, store: Any, answer: dict | None, target: Any) -> int:
    """The finished sweep's warnings, outputs and table (or JSON); its exit code: 2 when every point
    failed, else 0."""
    for warning in _row_warnings(objects, list(grid)):   # as `rlsim run` says them, with or without --json
        print(f"rlsim: warning: {warning}", file=sys.stderr)
    if args.out:
        _write_outputs(args.out, objects, list(grid), answer, target)
    if args.json:
        common.print_json(objects)
    else:
        _print_table(objects, list(grid), sweep, store, answer, target)
        if imported is not None and args.out:
            print(f"base scenario: {args.out / IMPORTED_SCENARIO_NAME} (imported from {imported.source})")
    if objects and all(o.get("error") for o in objects):
        # Nothing was simulated: bad input for every point. The rows are printed and saved above.
        ran = ""
        probed, values = len((answer or {}).get("evaluated") or []), len(grid.get((answer or {}).get("key"), []))
        if probed and probed < values:   # the capacity bisection stopped early
            ran = (f" The capacity search ran {probed} of the {values} values (bisection takes an error as too "
                   "small); --search scan runs every value.")
        print(f"rlsim: error: every point of the sweep failed; the first: {objects[0]['error']}. "
              f"Fix the grid or the base scenario (each row's error says which field).{ran}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------- interruption

class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the pool is stopped, finished points are already saved."""


# How long after the first stop signal further ones count as the same stop and are ignored: `timeout -s INT`
# signals the command and then its process group within milliseconds; a Ctrl-C given later, while a slow
# clean-up runs, is the user's second press and stops the clean-up as before.
REPEATED_SIGNAL_WINDOW_S = 2.0


@contextlib.contextmanager
def _stopped_once() -> Iterator[None]:
    """While the sweep runs, the first SIGINT raises KeyboardInterrupt and the first SIGTERM Terminated
    (handled as Ctrl-C is), so the same clean-up runs and the user is told what is saved; a signal within
    REPEATED_SIGNAL_WINDOW_S of that one is ignored. Why: `timeout -s INT` signals the command and then its
    process group, so the sweep gets two, and on Dask the second broke off the clean-up and its
    "3 of 12 points are saved" note ("rlsim: interrupted" in its place; a sweep audit)."""
    first: list[float] = []

    def handler(signum: int, frame: object) -> None:
        now = time.monotonic()
        if first and now - first[0] < REPEATED_SIGNAL_WINDOW_S:
            return
        first[:] = [now]
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    try:
        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread (an embedding program): leave the signals alone
        yield
        return
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


# The lock file a sweep holds in its --out folder (results.*: the sweep's own, not a stale output).
LOCK_NAME = "results.lock"


@contextlib.contextmanager
def _one_writer(out: Path) -> Iterator[None]:
    """One sweep at a time writes an --out folder: two read, extend and rewrite one results file (a
    Parquet store kept one sweep's rows; a CSV one's shared temporary name failed the other), so a
    second is refused before it runs a point. The lock is the OS's (flock): a killed sweep holds it
    no longer. Where the OS has no flock (Windows) there is no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with (out / LOCK_NAME).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RlsimError(f"another sweep is writing {out}", field="--out",
                             fix="wait for it to finish, or give this sweep another --out") from None
        yield


def _checked_counts(args: argparse.Namespace) -> int:
    """The worker count (--jobs, default one per CPU), --iterations checked, and no option given
    twice (as an option and a --set of its key)."""
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise RlsimError(f"--jobs must be at least 1, got {jobs}", field="--jobs", fix="give --jobs 1 or more")
    if args.iterations is not None and args.iterations < 1:
        raise RlsimError("--iterations must be at least 1", field="--iterations", fix="give --iterations 1 or more")
    from .run import refuse_twice_given
    refuse_twice_given(args)   # an option and a --set of one key (one and a --grid key: _refuse_replaced_by_grid)
    return jobs




def _refuse_replaced_by_grid(args: argparse.Namespace, grid: dict[str, list[Any]]) -> None:
    """A base --set item or option whose key the grid sets in every point was read past without a
    word (--seed 3 --grid seed=0,1 ran seeds 0 and 1): refused, as `rlsim run` refuses a key given
    twice. A --set key under a grid section (--set schedule.staleness=2 --grid schedule=...) is kept:
    it applies to each grid value."""
    from ..overrides import parse_assignment
    from ..sweep import GRID_REPLACED_OPTIONS
    for item in args.overrides:
        key = parse_assignment(item)[0]
        if key in grid:
            raise RlsimError(f"--set {item} is replaced by --grid {key}=... in every point", field=key,
                             fix=f"drop --set {item}, or drop {key} from --grid")
    for option, keys in GRID_REPLACED_OPTIONS.items():
        given = getattr(args, option, None)
        clash = next((key for key in keys if key in grid), None)
        if given is not None and clash:
            raise RlsimError(f"--{option} {given} is replaced by --grid {clash}=... in every point", field=clash,
                             fix=f"drop --{option}, or drop {clash} from --grid")


def _stopped_by(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def _saved_note(store: Any, points: list[Any], bisecting: bool = False) -> str:
    """'3 of 8 points are saved in out/results.csv; run the same command again to compute the other 5'.
    A capacity bisection computes the candidates it still needs, not every one left: said so."""
    if store is None:
        return "no point was saved (no --out); give --out DIR to make a sweep resumable"
    try:
        saved = len(store.done_ids() & {p.id for p in points})
    except RlsimError:
        saved = 0
    rest = len(points) - saved
    if bisecting:
        return (f"{saved} of the {len(points)} candidates are saved in {store.path}; run the same command again to "
                "go on with the search (it computes only the candidates the bisection still needs)")
    again = f"run the same command again to compute the other {rest}" if rest else "all of them are done"
    return f"{saved} of {len(points)} points are saved in {store.path}; {again}"


# --------------------------------------------------------------------------- capacity

def _capacity_search(grid, target, evaluate, store, executor, fingerprint, prices, strategy, jobs, progress,
                     base_dirs, *, watch=None):
    from ..capacity import find_smallest
    from ..sweep import make_points, run_sweep

    (key, values), = grid.items()
    seen: dict[str, dict[str, Any]] = {}
    candidates = [p.id for p in make_points(grid, fingerprint, base_dirs)]   # this search's, in any batch

    def evaluate_batch(batch: list[dict[str, Any]]) -> list[tuple[dict | None, str]]:
        points = make_points({key: [b[key] for b in batch]}, fingerprint, base_dirs)
        result = run_sweep(points, evaluate, store=store, executor=executor, progress=progress, grid={key: values},
                           siblings=candidates, check_inputs=watch)
        out = []
        for obj in result.run_objects():
            seen[json.dumps(obj["grid"][key])] = obj
            summary = {k: v for k, v in obj.items() if k not in ("grid", "error", key)}
            out.append((summary if not obj.get("error") else None, obj.get("error", "")))
        return out

    # a fixed number of probes per round, not the worker count: where throughput is not monotone in
    # the size, which candidates a round probes decides the answer (--jobs 2 answered 4 supernodes where
    # --jobs 1 and 6 answered 2), and the answer must not depend on the machine
    answer = find_smallest(key, values, target, evaluate_batch, strategy=strategy, width=CAPACITY_PROBES_PER_ROUND,
                           prices=prices)
    objects = []
    for probe in answer.probes:
        obj = _enrich(seen[json.dumps(probe.value)], prices)
        obj["meets_target"] = probe.meets
        obj["selected"] = answer.value is not None and probe.value == answer.value
        objects.append(obj)
    return objects, answer.to_dict()


def _orderable(values: list[Any]) -> bool:
    """Bisection needs sizes (numbers); other values (presets, mappings) are swept in full."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _select_cheapest(objects: list[dict[str, Any]], target, prices) -> dict[str, Any]:
    from ..capacity import cheapest

    chosen = cheapest(objects, target, prices)
    for obj in objects:
        obj["meets_target"] = not obj.get("error") and target.met_by(obj)
        obj["selected"] = chosen is not None and obj["grid"] == chosen["grid"]
    return {"target": {"tokens_per_s": target.tokens_per_s, "step_time_s": target.step_time_s},
            "found": chosen is not None, "value": chosen["grid"] if chosen else None, "summary": chosen}


def _enrich(obj: dict[str, Any], prices) -> dict[str, Any]:
    if obj.get("error") or "devices" not in obj or "step_time_s" not in obj:
        return obj
    from ..capacity import cost_fields, price_per_device_hour

    out = dict(obj)
    out.update(cost_fields(obj, price_per_device_hour(obj, prices)))
    return out


# Candidates a capacity bisection probes per round (in parallel over the workers): about log_3(n)
# rounds; the same candidates whatever --jobs is.
CAPACITY_PROBES_PER_ROUND = 2

# Points one sweep may hold: the grid is a product, so a few long value lists reach millions of points
# (each a full simulation of ~0.1-10 s). 10,000 points is a day of 1 s points on 8 workers at most.
DEFAULT_MAX_POINTS = 10_000


def _check_grid_size(grid: dict[str, list[Any]], limit: int, seeds: int) -> None:
    """Points x seeds is what runs: 1,000 points at --seeds 32 are 32,000 simulations."""
    points = math.prod(len(values) for values in grid.values())
    if points * seeds > limit:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in grid.items())
        runs = f" x {seeds} seeds = {points * seeds:,} simulations" if seeds > 1 else ""
        raise RlsimError(f"the grid has {points:,} points ({sizes}){runs}, past --max-points {limit:,}",
                         field="--grid", fix="give fewer values or seeds, or raise --max-points N")


def _refuse_unreadable_values(base: Any, grid: dict[str, list[Any]]) -> None:
    """A grid value the scenario cannot take in any of its points (a typo such as 4k for a count, a
    preset that does not exist) is bad input, refused before anything runs. A value that loads in some
    point (a CloudMatrix size crossed with a topology.preset of GPU nodes) or loads but cannot run (a
    layout that does not fit) stays a row whose error says why."""
    from ..sweep import _value_identity, expand_grid
    every = None   # the grid's points, expanded only when a value fails over the base alone
    for key, values in grid.items():
        for value in values:
            error = base.value_error({key: value}, key)   # over the base alone: one load, mostly enough
            if error is None:
                continue
            every = every if every is not None else expand_grid(grid)
            # by the grid's own identity: with ==, seed=true's points were seed=1's too (1 == True)
            points = [point for point in every if _value_identity(point[key]) == _value_identity(value)]
            if all(base.value_error(point, key) is not None for point in points):
                raise _refusal(key, value, error)


# The loaders' words for a key the scenario does not have (scenario.py, the topology's; pydantic's extra_forbidden).
_UNKNOWN_KEY = ("unknown scenario key", "unknown field", "Extra inputs are not permitted")


def _refusal(key: str, value: Any, error: RlsimError) -> RlsimError:
    """The refusal of a grid value that no point can take; where the key itself names no field (a
    typo: the same error for every value), the key's, with its did-you-mean (it said "drop 1")."""
    field = error.field or ""
    if any(words in error.message for words in _UNKNOWN_KEY) and (key == field or key.startswith(field + ".")):
        meant = re.search(r"did you mean '([^']+)'", error.message)
        parent = field.rpartition(".")[0]
        spelt = f"{parent + '.' if parent else ''}{meant.group(1)}{key[len(field):]}" if meant else ""
        fix = f"write --grid {spelt}=..." if spelt else error.fix or "see docs/scenario-reference.md for the keys"
        return RlsimError(f"the key {key!r} names no scenario field, whatever its value: "
                          f"{re.sub(r' [(]got .*[)]$', '', error.message)}", source="--grid", field=key, fix=fix)
    shown = repr(value) if isinstance(value, str) else json.dumps(value)   # as typed: true, not True
    return RlsimError(f"the value {shown} cannot be read: {error.message}", source="--grid",
                      field=key, fix=f"{error.fix + '; or ' if error.fix else ''}drop {shown} from --grid {key}=...")


def _refuse_unloadable_base(base: Any, grid: dict[str, list[Any]]) -> None:
    """A base scenario that loads in none of the grid's points (staleness: -1 under a grid of seeds)
    is bad input, said once before anything runs, as `rlsim run` says it: every point was run into
    an error row and the sweep failed at its end."""
    from ..sweep import expand_grid

    def error_of(values: dict[str, Any]) -> RlsimError | None:
        try:
            base.loaded(values)
        except RlsimError as exc:
            return exc
        return None

    error = error_of({})
    if error is None or any(error_of(point) is None for point in expand_grid(grid)):
        return
    raise error


def _say_schedule_left_out(base: Any, grid: dict[str, list[Any]]) -> None:
    """Each kind named alone (--schedule KIND, a grid value schedule=KIND) keeps the knobs of the
    scenario's schedule section that it takes; the others, left out of its points, are said once per
    kind on stderr (each point's summary notes them too, which the table does not show)."""
    from .common import say_schedule_left_out
    kinds = [value for value in grid.get("schedule", ()) if isinstance(value, str)]
    for values in [{"schedule": kind} for kind in kinds] or [{}]:
        try:
            scenario, _ = base.loaded(values)
        except RlsimError:   # the points' rows say why
            continue
        say_schedule_left_out(scenario)


def _parse_prices(items: list[str]) -> float | dict[str, float] | None:
    if not items:
        return None
    mapping: dict[str, float] = {}
    single: float | None = None
    for item in items:
        name, sep, raw = item.rpartition("=")
        try:
            value = float(raw)
        except ValueError:
            raise RlsimError(f"cannot read --price {item!r}", field="--price",
                             fix="write USD per device-hour, e.g. --price 2.5 or --price h100=2.5") from None
        if not math.isfinite(value) or value < 0:
            raise RlsimError(f"--price {item!r} is not a price", field="--price",
                             fix="give a finite price >= 0 in USD per device-hour, e.g. --price 2.5")
        if sep and not name.strip():
            from ..hardware.devices import device_names
            raise RlsimError(f"--price {item!r} names no device before '='", field="--price",
                             fix=f"write --price {raw} (every device) or --price DEVICE={raw}, DEVICE one "
                                 f"of: {', '.join(device_names())}")
        if sep:
            name = name.strip()
            from ..hardware.devices import device_names
            catalog = device_names()
            if name not in catalog and name.lower() in catalog:   # catalog names are lower case
                raise RlsimError(f"--price {item!r}: no device {name!r}", field="--price",
                                 fix=f"write --price {name.lower()}={raw}")
            close = difflib.get_close_matches(name.lower(), catalog, n=1, cutoff=0.75)
            if name not in catalog and close:   # a typo ran the whole sweep before "no price for h100"
                raise RlsimError(f"--price {item!r}: no catalog device {name!r}; did you mean {close[0]!r}?",
                                 field="--price", fix=f"write --price {close[0]}={raw} (a device your topology "
                                                      "file names itself is priced by that name)")
            if name in mapping:   # the last one won without a word
                raise RlsimError(f"--price gives {name!r} twice", field="--price", fix="give each device one price")
            mapping[name] = value
        else:
            single = value
    if single is not None and mapping:
        raise RlsimError("--price mixes one price for all devices with per-device prices", field="--price",
                         fix="give either --price USD or --price DEVICE=USD ...")
    return single if single is not None else mapping


# --------------------------------------------------------------------------- output

def _write_outputs(out: Path, objects, grid_keys, answer, target) -> None:
    from ..report.html import write_sweep_report
    if answer is not None:
        (out / "capacity.json").write_text(json.dumps(answer, indent=2, default=str) + "\n")
    write_sweep_report(objects, grid_keys, out, capacity=answer)


def _interval(obj: dict, key: str, spec: Any) -> str:
    """' [low, high]': a --seeds point's ci95 of the steady tokens/s and step, beside its
    median (a capacity answer decides on the median: the interval shows how near the target it is)."""
    span = (obj.get("ci95") or {}).get(key) if key in ("steady_tokens_per_s", "steady_step_time_s") else None
    if not isinstance(span, (list, tuple)) or len(span) != 2 or not _has_interval(obj):
        return ""
    return f" [{_fmt(span[0], spec)}, {_fmt(span[1], spec)}]"


def _has_interval(obj: dict) -> bool:
    """Whether a point has an interval to show: two or more seeds. One seed (a distribution value's
    first draw) carries ci95 [x, x], which the table showed as '[0%: min..max of 1]' beside every cell;
    `rlsim run` says of one seed that it has no interval to give."""
    seeds = obj.get("seeds")
    return isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 1


def _interval_header(seeded: list[dict]) -> str:
    """' [ci95]', or what the intervals of the fewest seeds cover: below 6 seeds a point's interval is
    the [min, max] of its values (' [75%: min..max of 3]'), which is no 95% interval."""
    from ..uncertainty.intervals import ci_coverage
    seeded = [obj for obj in seeded if _has_interval(obj)]
    if not seeded:
        return ""
    fewest = min(int(obj.get("seeds") or 1) for obj in seeded)
    coverage = ci_coverage(fewest)
    text = "ci95" if coverage >= 0.95 else f"{coverage:.0%}: min..max of {fewest}"
    return f" \\[{text}]"   # \\[: not a rich tag


def _print_table(objects, grid_keys, sweep, store, answer, target) -> None:
    from ..report.console import Console, Table

    console = Console(width=max(120, Console().width))
    table = Table(show_lines=False)
    # steady-state figures (after the warm-up step), as run / compare lead with and the capacity
    # target and the cost columns read; the whole-run ones are in the results file
    metrics = [("steady_step_time_s", "step, steady (s)", "{:,.1f}"), ("steady_tokens_per_s", "tokens/s, steady", "{:,.0f}"),
               ("steady_bubble_fraction", "bubbles, steady", "{:.1%}"), ("devices", "devices", "{:d}"),
               ("device_hours_per_1m_tokens", "dev-h/1M tok", _three_figures), ("cost_per_1m_tokens", "$/1M tok", _three_figures)]
    if all(o.get("cost_per_1m_tokens") is None for o in objects):
        metrics = [m for m in metrics if m[0] != "cost_per_1m_tokens"]
    for key in grid_keys:
        table.add_column(key, no_wrap=True)
    seeded = [obj for obj in objects if (obj.get("ci95") or {}).get("steady_tokens_per_s")]
    label = _interval_header(seeded)
    for key, title, _ in metrics:   # a --seeds point's cells carry its ci95 (results.csv, docs/guides/uncertainty.md)
        ranged = bool(seeded) and key in ("steady_step_time_s", "steady_tokens_per_s")
        table.add_column(title + (label if ranged else ""), justify="right")
    if target is not None:
        table.add_column("meets target")
    errors = any(obj.get("error") for obj in objects)
    if errors:
        table.add_column("error", overflow="fold", min_width=30)
    for obj in objects:
        cells = [json.dumps(obj["grid"][k]) if not isinstance(obj["grid"][k], str) else obj["grid"][k]
                 for k in grid_keys]
        cells += [_fmt(obj.get(k), f) + _interval(obj, k, f) for k, _, f in metrics]
        if target is not None:
            cells.append("[bold green]selected[/bold green]" if obj.get("selected") else
                         "yes" if obj.get("meets_target") else "no")
        if errors:
            cells.append(f"[red]{obj.get('error', '')}[/red]")
        table.add_row(*cells)
    console.print(table)
    for obj in objects:   # whole, where a narrow table (a log, a pipe: 120 columns) cut them
        if obj.get("error"):
            where = ", ".join(f"{k}={obj['grid'][k]}" for k in grid_keys)
            console.print(f"error ({where}): {obj['error']}", markup=False, soft_wrap=True)
    for note in [*_row_notes(objects, grid_keys), *_fixed_pool_notes(objects)]:
        console.print(f"note: {note}", markup=False)
    if sweep is not None:
        console.print(f"{len(sweep.points)} points, {sweep.computed} computed now, "
                      f"{len(sweep.points) - sweep.computed} from the results file")
    if store is not None:
        console.print(f"results: {store.path}")
    if answer is not None and target is not None:
        notes = answer.get("notes") or []
        if answer.get("found"):
            value = answer["value"]   # the cheapest point's grid values, or the bisected key's value
            shown = ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) \
                else f"{answer['key']}={value}"
            console.print(f"capacity: {shown} meets {target.describe()}")
        elif answer.get("plateau"):
            console.print(f"capacity: no candidate meets {target.describe()}")
        else:
            console.print(f"capacity: no candidate meets {target.describe()}; widen the grid")
        for note in notes:
            console.print(f"note: {note}", markup=False)


def _fixed_pool_notes(objects) -> list[str]:
    """A split-pool sweep over cluster sizes whose rollout pool keeps one size (schedule.rollout_devices
    given, as an imported verl or NeMo RL scenario has it): only the trainer grows, so the schedule
    looks as if it stops scaling (a user trial: one-step-off's bubbles 19% -> 68% from 1 to 4 nodes)."""
    sized = [obj for obj in objects if not obj.get("error") and isinstance(obj.get("pools"), dict)
             and "rollout" in obj["pools"] and "train" in obj["pools"]]
    devices = {obj.get("devices") for obj in sized}
    rollout = {obj["pools"]["rollout"] for obj in sized}
    if len(devices) < 2 or len(rollout) != 1:
        return []
    return [f"the rollout pool is {rollout.pop()} devices at every size ({min(devices)}..{max(devices)} devices): only the "
            "training pool grows (schedule.rollout_devices); to scale both, give schedule.rollout_fraction "
            "instead, or sweep (size, rollout_devices) pairs from Python (sweep.points_from_values: --grid takes "
            "every combination)"]


def _row_notes(objects, grid_keys) -> list[str]:
    """summary_notes of each row (a schedule dropping samples as stale, a bound that never binds),
    each once, naming the rows; and whether the selected row is one of them."""
    from ..metrics import summary_notes
    return _by_rows(objects, grid_keys, summary_notes)


def _row_warnings(objects, grid_keys) -> list[str]:
    """Each row's warnings (a split the granules moved, devices idle the whole run: what `rlsim run` says
    on stderr), each once, naming the rows."""
    return _by_rows(objects, grid_keys, lambda obj: obj.get("warnings") or [])


def _by_rows(objects, grid_keys, texts_of: Any) -> list[str]:
    """'[ROW; ROW] text' for each text of the rows without an error, each text once."""
    by_text: dict[str, list[str]] = {}
    for obj in objects:
        if obj.get("error"):
            continue
        label = ", ".join(f"{k}={obj['grid'][k]}" for k in grid_keys)
        for text in texts_of(obj):
            by_text.setdefault(text, []).append(label + (" (selected)" if obj.get("selected") else ""))
    return [f"[{'; '.join(rows)}] {text}" for text, rows in by_text.items()]


def _fmt(value: Any, fmt: Any) -> str:
    if value is None:
        return "-"
    try:
        return fmt(value) if callable(fmt) else fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _three_figures(value: float) -> str:
    """Three significant figures, without an exponent: a per-token cost of 0.091 against 0.187
    device-hours read 0.1 and 0.2 at one decimal."""
    digits = max(0, 2 - math.floor(math.log10(abs(value)))) if value else 0
    return f"{value:,.{digits}f}"

