"""Argument and output helpers shared by the `rlsim` subcommands (face layer).

Commands import these from here, never from `simulator.cli` (nothing imports the dispatcher).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_common(parser: argparse.ArgumentParser, *, json_flag: bool = True, overrides: bool = True,
               set_help: str = "override a scenario key (repeatable), e.g. --set topology.nodes=16") -> None:
    if overrides:
        parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help=set_help)
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (so 0 is refused as such, not taken as 'missing')."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def out_dir(text: str) -> str:
    """argparse `type=` of an output folder: refuse an existing file before any simulation runs."""
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder (new or existing)")
    return text


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, allow_nan=False, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
