"""`rlsim validate`: predicted versus published figures for every registered validation case."""
from __future__ import annotations

import argparse
import sys

HELP = "compare the simulator's predictions with published measurements"
EXAMPLES = """examples:
  rlsim validate
  rlsim validate --json
  rlsim validate --case megatron
  rlsim validate --case V7 --set topology.device.gemm_efficiency=0.6
  rlsim validate --case V7 --set workload.train_layout.recompute=full
  rlsim validate --case V6 --case V7 --set topology.device.gemm_efficiency=0.54
  rlsim validate --case V6 --set workload.inference.hbm_efficiency=0.7

--set KEY=VALUE predicts the selected cases with a change, to test a hypothesis against the
published figures: V6 takes any scenario key (applied to each row's scenario), V1 and V7 take
topology.device.* (over the row's catalog device), topology.device_profile (a profile `rlsim
calibrate` measured on that device), workload.train_params.* (over the case's stack) and the
recipe a published row leaves open, workload.train_layout.micro_batch / recompute / vpp (over each
row's layout: a row fixes its tp, pp and dp), V3 and V5 topology.device.* and workload.inference.*;
a selected case that does not take a key is an error (exit 2): narrow --case.

Each case prints predicted, published and the signed error (predicted / published - 1); a case is
green when |error| <= its tolerance. Cases live in simulator/validation/ (see docs/validation.md).

Exit code: 0, also when a case misses (the table says which); with --strict, 3 when any case is
outside its tolerance or could not run (a miss is not bad input, which exits 2). For CI:
  rlsim validate --strict --json > validation.json || echo "a case missed"
"""
STRICT_MISS_EXIT = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import add_common

    parser.add_argument("--case", action="append", default=None, metavar="TEXT",
                        help="run only cases whose name contains TEXT, or of the family TEXT names (V3: the "
                             "V3 cases, not V6's deepseek-v3 rows); repeatable: any of them")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit {STRICT_MISS_EXIT} when any case misses its tolerance or cannot run (default: exit 0)")
    add_common(parser, set_help="predict the selected cases with a change (repeatable), e.g. --set "
                                "topology.device.gemm_efficiency=0.6 (V1, V3, V5, V6, V7 take keys; see below)")


def run(args: argparse.Namespace) -> int:
    from ..errors import RlsimError
    from ..overrides import parse_assignment
    from ..validation import run_cases
    from .common import Progress, print_json
    for item in args.overrides:   # the scenario's refusal pointed at --seeds, which validate does not have
        key, value = parse_assignment(item)
        if isinstance(value, dict) and "dist" in value and not key.endswith(("_length", "_length.dist")):
            raise RlsimError("a distribution value: validate predicts each published figure once, with numbers",
                             field=key, fix=f"give {key} a number; draw it over seeds with rlsim run --seeds N")
    if any(not text.strip() for text in args.case or []):   # matched every case: all 62 ran
        raise RlsimError("an empty --case text", field="--case",
                         fix="give a text of the cases' names, e.g. --case V6 or --case megatron")
    with Progress("case") as progress:
        results = run_cases(args.case, progress=progress, overrides=tuple(args.overrides))
    if not results:
        raise RlsimError(f"no validation case matches {' or '.join(map(repr, args.case or []))}", field="--case",
                         fix="run `rlsim validate` to list the cases")
    for r in results:
        if r.failure:
            print(f"rlsim: warning: case {r.case!r} could not run: {r.failure}", file=sys.stderr)
    given = list(args.overrides)
    if args.json:   # each case says what it was predicted with, so a saved document explains itself
        print_json([{**r.as_dict(), **({"overrides": given} if given else {})} for r in results])
    else:
        if given:
            print("predicted with --set " + " --set ".join(given))
        print(format_table(results))
    missed = [r.case for r in results if not r.ok]
    if args.strict and missed:
        print(f"rlsim: validate --strict: {len(missed)} of {len(results)} case(s) outside tolerance: "
              f"{', '.join(dict.fromkeys(missed))}", file=sys.stderr)
        return STRICT_MISS_EXIT
    return 0


def format_table(results) -> str:
    width = max(len(r.case) for r in results)
    mwidth = max(len(r.metric) for r in results)
    lines = [f"{'case':<{width}}  {'metric':<{mwidth}}  {'predicted':>10}  {'published':>10}  {'error':>7}  ok"]
    for r in results:
        pred = "-" if r.predicted is None else _num(r.predicted)
        err = "-" if r.error is None else f"{r.error:+.1%}"
        mark = "yes" if r.ok else ("n/a" if r.error is None else f"NO ({r.criterion})")
        mark += " (in-sample)" if r.in_sample else ""
        lines.append(f"{r.case:<{width}}  {r.metric:<{mwidth}}  {pred:>10}  {_num(r.published):>10}  {err:>7}  {mark}")
    green = sum(r.ok for r in results)
    inside = sum(r.ok for r in results if r.in_sample)
    lines.append(f"{green} of {len(results)} cases within tolerance" + (
        f" ({inside} of them in-sample: a constant set from the same figure, or true by construction; "
        "--json says why)" if inside else ""))
    return "\n".join(lines)


def _num(x: float) -> str:
    """Four significant figures for small numbers (ratios, fractions), one decimal for large ones."""
    return f"{x:.4g}" if abs(x) < 100 else f"{x:.1f}"
