"""`rlsim calibrate --from-log`: fit named mechanism parameters to logged runs, write the overlay,
predict other setups (simulator/calibration/logfit.py)."""
from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path
from typing import Any

from ..errors import RlsimError

DEFAULT_OVERLAY = "rlsim-calibration.yaml"


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    from ..calibration.logfit import DEFAULT_FIT_KEYS, MAX_EVALUATIONS, SKIP_STEPS
    from .common import positive_int

    parser.add_argument("--from-log", action="append", default=[], metavar="LOG",
                        help="a verl / NeMo RL / OpenRLHF / SkyRL / TRL / AReaL per-step log (JSONL, JSON, CSV, wandb CSV "
                             "export, TensorBoard scalars as step,tag,value CSV); repeatable, "
                             "each with its --scenario")
    parser.add_argument("--scenario", action="append", default=[], metavar="S",
                        help="the scenario YAML of each --from-log run, in order (one for all is fine)")
    parser.add_argument("--fit", action="append", default=None, metavar="KEY[,KEY...]",
                        help=f"parameters to fit, repeatable (default {','.join(DEFAULT_FIT_KEYS)}; "
                             "see docs/calibration.md)")
    parser.add_argument("--skip-steps", type=int, default=SKIP_STEPS, metavar="N",
                        help=f"warm-up steps of each log left out (default {SKIP_STEPS})")
    parser.add_argument("--max-evaluations", type=positive_int, default=MAX_EVALUATIONS, metavar="N",
                        help=f"least-squares evaluations of the simulator (default {MAX_EVALUATIONS})")
    parser.add_argument("--log-run", default=None, metavar="NAME", help="the run of a multi-run wandb export (or TensorBoard scalars)")
    parser.add_argument("--predict", action="append", default=[], metavar="KEY=VALUE",
                        help="predict the (first / --predict-scenario) scenario with this change too (repeatable)")
    parser.add_argument("--predict-scenario", default=None, metavar="S",
                        help="another scenario to predict with the fitted values (e.g. another schedule)")


def _runs(args: argparse.Namespace) -> list[Any]:
    from ..calibration.logfit import LoggedRun, check_skip_steps
    from ..calibration.runlogs import read_run_log

    logs, scenarios = list(args.from_log), list(args.scenario)
    if not scenarios:
        raise RlsimError("a logged run needs the scenario it ran", field="--scenario",
                         fix="add --scenario S.yaml (the setup of the run: model, devices, layouts, batch)")
    if len(scenarios) == 1:
        scenarios = scenarios * len(logs)
    if len(scenarios) != len(logs):
        raise RlsimError(f"{len(logs)} logs and {len(scenarios)} scenarios", field="--scenario",
                         fix="give one --scenario per --from-log, in order, or one for all")
    check_skip_steps(args.skip_steps)
    pairs = [(str(Path(log).resolve()), str(scenario)) for log, scenario in zip(logs, scenarios, strict=True)]
    twice = next((log for (log, _), pair in zip(zip(logs, scenarios, strict=True), pairs, strict=True)
                  if pairs.count(pair) > 1), None)
    if twice is not None:   # counted twice, every sigma shrank by sqrt(2)
        raise RlsimError(f"{twice} is given twice with the same scenario", field="--from-log",
                         fix="give each logged run once")
    return [LoggedRun(read_run_log(log, run=args.log_run), scenario, tuple(args.overrides), name=log)
            for log, scenario in zip(logs, scenarios, strict=True)]


def _listed(items: list[str], flag: str) -> list[str]:
    """The keys of repeatable, comma-separated KEY[,KEY...] items; a key given twice is an error."""
    keys = [key.strip() for item in items for key in item.split(",") if key.strip()]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise RlsimError(f"{flag} names {', '.join(twice)} twice", field=flag, fix="name each key once")
    return keys


def _check_predictions(items: list[str], fitted: list[str]) -> None:
    """--predict items: each key once, none of them a fitted key (the fit's value replaced it in the
    'fitted' column under the item's label)."""
    from ..overrides import parse_assignment
    keys = [parse_assignment(item)[0] for item in items]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:   # the last won, labelled with both
        raise RlsimError(f"--predict gives {', '.join(twice)} twice", field="--predict", fix="give each key once")
    clash = [key for key in keys if key in fitted]
    if clash:
        raise RlsimError(f"--predict sets {clash[0]}, which --fit fits: the fitted value would replace it",
                         field="--predict", fix=f"drop --predict {clash[0]}=..., or leave it out of --fit")


def run_from_log(args: argparse.Namespace) -> int:
    from ..calibration.logfit import fit_runs, predict, write_overlay
    from .common import out_file, print_json

    if args.device is not None or args.replay:
        raise RlsimError("--from-log fits logged runs; --device / --replay measure a device", field="--from-log",
                         fix="run the two separately")
    try:
        out = Path(out_file(args.out or DEFAULT_OVERLAY, DEFAULT_OVERLAY))
    except argparse.ArgumentTypeError as exc:
        raise RlsimError(str(exc), field="--out", fix="give --out a writable OVERLAY.yaml path") from None
    runs = _runs(args)
    keys = _listed(args.fit, "--fit")
    _check_predictions(args.predict, keys)
    fit = fit_runs(runs, keys, skip_steps=args.skip_steps, max_evaluations=args.max_evaluations)
    use = use_line(runs, fit.items)
    write_overlay(fit, out, [shlex.join(_command(args)), use])
    target = args.predict_scenario or runs[0].scenario
    document: dict[str, Any] = {"overlay": str(out), **fit.to_json(), "use": use}
    if args.predict or args.predict_scenario:
        document["prediction"] = {"scenario": str(target), "set": list(args.predict),
                                  **predict(target, [*args.overrides, *args.predict], fit)}
    if args.json:
        print_json(document)
        return 0
    _print(document)
    return 0


def _command(args: argparse.Namespace) -> list[str]:
    """The calibrate command that made an overlay, for its header: every option the fit depends on."""
    from ..calibration.logfit import MAX_EVALUATIONS, SKIP_STEPS
    words = ["rlsim", "calibrate"]
    for log in args.from_log:
        words += ["--from-log", log]
    for scenario in args.scenario:
        words += ["--scenario", scenario]
    for option, given, default in (("--fit", ",".join(args.fit or []), ""),
                                   ("--skip-steps", args.skip_steps, SKIP_STEPS),
                                   ("--max-evaluations", args.max_evaluations, MAX_EVALUATIONS),
                                   ("--log-run", args.log_run, None)):
        if given != default:
            words += [option, str(given)]
    for item in args.overrides:
        words += ["--set", item]
    return words


def use_line(runs: list[Any], items: list[str]) -> str:
    """`use: rlsim run S --set ...`: the overlay's items on the runs' scenario (S when they differ)."""
    scenarios = {str(run.scenario) if isinstance(run.scenario, (str, Path)) else "S" for run in runs}
    target = scenarios.pop() if len(scenarios) == 1 else "S"
    return "use: " + shlex.join(["rlsim", "run", target, *(word for item in items for word in ("--set", item))])


def _figure(value: float) -> str:
    return "inf" if math.isinf(value) else ("n/a" if math.isnan(value) else f"{value:.4g}")


def _print(doc: dict[str, Any]) -> None:
    print(f"fitted ({doc['evaluations']} evaluations; rms relative error {doc['rms_relative_error']['before']:.1%} "
          f"-> {doc['rms_relative_error']['after']:.1%}); overlay written to {doc['overlay']}")
    for key, f in doc["fitted"].items():
        bound = "  (at a bound)" if f["at_bound"] else ""
        print(f"  {key:40s} {f['value']:.4g} +- {_figure(f['sigma'])}   (was {f['start']:.4g}){bound}")
    for run, stages in doc["runs"].items():
        print(f"  {run}: stage  measured  default  fitted (s)")
        for stage, v in stages.items():
            print(f"    {stage:16s} {v['measured_s']:9.3f} {v['before_s']:9.3f} {v['after_s']:9.3f}")
    prediction = doc.get("prediction")
    if prediction:
        print(f"prediction: {prediction['scenario']} {' '.join(prediction['set'])}: stage  default  fitted (s)")
        for stage, fitted in prediction["fitted"].items():
            print(f"    {stage:16s} {prediction['default'][stage]:9.3f} {fitted:9.3f}")
    for note in doc["notes"]:
        print(f"note: {note}")
    print(doc["use"])
