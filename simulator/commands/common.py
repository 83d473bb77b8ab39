"""Argument and output helpers shared by the `rlsim` subcommands (face layer).

Commands import these from here, never from `simulator.cli` (nothing imports the dispatcher).
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The built-in schedule kinds (scenario.BUILTIN_SCHEDULE_KINDS, spelled out so that building the parser
# does not import the scenario schema; tests/commands/test_run.py checks the two agree).
SCHEDULE_KINDS_HELP = ("colocated | disaggregated | one-step-off | stalesync | async | verl-fully-async | "
                       "nemo-rl-async | areal | verl-colocate-async | verl-separate-async | verl-sync")


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


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0 (nan, inf and 0 refused here, not deep in a search)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def out_dir(text: str) -> str:
    """argparse `type=` of an output folder: refuse, before any simulation runs, an existing file,
    a path under a file, and a folder that cannot be created or written."""
    if not text.strip():   # Path("") is the working folder: the outputs would land among its files
        raise argparse.ArgumentTypeError("an empty path; give a folder (new or existing), e.g. results")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder (new or existing)")
    _check_writable(path, text, "folder")
    return text


def out_file(text: str, example: str = "profile.yaml") -> str:
    """argparse `type=` of an output file: refuse a folder, a path under a file, and a place that
    cannot be written, before any measurement runs (`example`: the file name a message suggests)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path; give a file name, e.g. {example}")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name, e.g. {text.rstrip('/')}/{example}")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written (permissions); give another path")
    _check_writable(path.parent, text, "file")
    return text


def _check_writable(path: Path, text: str, what: str) -> None:
    """The nearest existing folder of `path` must be a folder we may create entries in."""
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise argparse.ArgumentTypeError(f"{text!r} goes through a broken link {str(probe)!r}; give another {what}")
        probe = probe.parent
    if not probe.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} cannot be created: {str(probe)!r} is a file, not a folder; "
                                         f"give another {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: no permission in {str(probe)!r}; "
                                         f"give another {what}")
    # os.access says yes to root, and nothing of read-only or special filesystems (/sys, /proc): a
    # file made and removed there is the test
    import tempfile
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {exc.strerror or exc} in {str(probe)!r}; "
                                         f"give another {what}") from None


def say_replaced_topology(args: Any) -> None:
    """--topology T beside a scenario file whose topology is sized (nodes: 4): T replaces the file's
    whole topology, size included; said on stderr, since the run is then T's default size."""
    from ..errors import RlsimError
    from ..overrides import parse_assignment
    from ..presets import read_yaml
    from ..scenario import TOPOLOGY_SIZE_KEYS
    scenario = getattr(args, "scenario", None)
    if getattr(args, "topology", None) is None or not isinstance(scenario, str):
        return
    try:
        given = read_yaml(scenario).get("topology")
    except RlsimError:   # the scenario's own load reports a bad file
        return
    sized = {k: v for k, v in given.items() if k in TOPOLOGY_SIZE_KEYS} if isinstance(given, Mapping) else {}
    set_keys = {parse_assignment(o)[0] for o in getattr(args, "overrides", ()) or ()}
    kept = sorted(k for k in sized if f"topology.{k}" not in set_keys)
    if kept:
        sizes = ", ".join(f"{k}: {sized[k]}" for k in kept)
        print(f"rlsim: note: --topology {args.topology} replaces {scenario}'s topology with its {sizes}: the run "
              f"takes {args.topology}'s own size; add --set topology.{kept[0]}={sized[kept[0]]} to keep it",
              file=sys.stderr)


def say_schedule_left_out(scenario: Any) -> None:
    """The knobs of a scenario's schedule section that a kind named alone (--schedule KIND, a grid value
    schedule=KIND) does not take or reads past, left out of its runs: said on stderr where the output
    shows no run's notes (sweep, sensitivity; `rlsim run` prints them with its summary)."""
    from ..scenario import schedule_left_out_notes
    for note in schedule_left_out_notes(scenario):
        print(f"rlsim: note: {note}", file=sys.stderr)


def print_warnings(summary: Mapping[str, Any], prefix: str = "") -> None:
    """A run summary's warnings on stderr (`prefix`: which of several runs, e.g. 'stalesync: ')."""
    for warning in summary.get("warnings", []):
        print(f"rlsim: warning: {prefix}{warning}", file=sys.stderr)


def print_json(document: Any) -> None:
    """One JSON document on stdout; a non-finite float (no JSON number) is written as null."""
    from ..json_text import json_text
    sys.stdout.write(json_text(document, indent=2, sort_keys=False) + "\n")


def add_framework_import(parser: argparse.ArgumentParser, print_scenario: bool = True) -> None:
    """--from-verl / --from-nemo-rl / --from-areal / --from-trl CONFIG.yaml, --from-openrlhf / --from-skyrl SCRIPT.sh
    [key=value ...],
    --framework-schedule, and --print-scenario unless ``print_scenario`` is False (a command that has
    no single run to print: `rlsim run --from-X --print-scenario` prints what sweep and plan import)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--from-verl", nargs="+", metavar="ARG",
                       help="CONFIG.yaml [KEY=VALUE ...]: a verl Hydra YAML and the overrides its scripts pass "
                            "(key=value, +key=value, ++key=value), turned into a scenario (docs/guides/frameworks.md)")
    group.add_argument("--from-nemo-rl", nargs="+", metavar="ARG",
                       help="RECIPE.yaml [KEY=VALUE ...]: a NeMo RL recipe YAML and key=value overrides, "
                            "turned into a scenario")
    group.add_argument("--from-areal", nargs="+", metavar="ARG",
                       help="CONFIG.yaml [KEY=VALUE ...]: an AReaL experiment YAML (or the config.yaml a run saves) "
                            "and key=value overrides, turned into a scenario")
    group.add_argument("--from-openrlhf", nargs="+", metavar="ARG",
                       help="SCRIPT.sh [FLAG=VALUE ...]: an OpenRLHF launch script (its train_ppo_ray command's "
                            "--flags) and flag=value overrides (actor.num_nodes=2 for --actor.num_nodes 2), turned "
                            "into a scenario")
    group.add_argument("--from-trl", nargs="+", metavar="ARG",
                       help="CONFIG.yaml [KEY=VALUE ...]: a TRL GRPO or RLOO config (the YAML `trl grpo --config` / "
                            "`trl rloo --config` reads, with "
                            "accelerate_config / num_processes; vllm_serve.* for the server of vllm_mode server) and "
                            "key=value overrides, turned into a scenario")
    group.add_argument("--from-skyrl", nargs="+", metavar="ARG",
                       help="CONFIG [KEY=VALUE ...]: a SkyRL launch script (the key=value arguments of its "
                            "skyrl.train.entrypoints.main_base command) or a YAML of SkyRL's config, and key=value "
                            "overrides, turned into a scenario")
    parser.add_argument("--framework-schedule", choices=("colocated", "one-step-off", "fully-async", "colocate-async",
                                                         "separate-async", "sync", "grpo", "rloo"),
                        help="which verl recipe (colocated ... sync) or TRL trainer (grpo, rloo) the YAML is for "
                             "(default: inferred from its keys)")
    if not print_scenario:
        return
    parser.add_argument("--print-scenario", action="store_true",
                        help="with --from-verl / --from-nemo-rl / --from-areal / --from-openrlhf / --from-trl / "
                             "--from-skyrl: print the scenario as YAML (re-loadable by "
                             "`rlsim run FILE`) and exit")


def framework_import(args: argparse.Namespace, also_set: tuple[str, ...] = ()) -> Any:
    """The FrameworkImport of --from-verl / --from-nemo-rl / --from-areal / --from-openrlhf / --from-trl /
    --from-skyrl, or None. Refuses what would replace the
    imported sections (a scenario file, --workload, --schedule) and the flags without an import.
    ``also_set``: the scenario keys the command sets beside --set (sweep's --grid keys), which the
    import leaves to the user as it leaves a --set key (topology.nodes: no check of the config's size)."""
    from ..errors import RlsimError
    chosen = [(name, items) for name, items in (("verl", getattr(args, "from_verl", None)),
                                                  ("nemo-rl", getattr(args, "from_nemo_rl", None)),
                                                  ("areal", getattr(args, "from_areal", None)),
                                                  ("openrlhf", getattr(args, "from_openrlhf", None)),
                                                  ("trl", getattr(args, "from_trl", None)),
                                                  ("skyrl", getattr(args, "from_skyrl", None))) if items]
    if not chosen:
        for flag, given in (("--print-scenario", getattr(args, "print_scenario", False)),
                            ("--framework-schedule", args.framework_schedule)):
            if given:
                raise RlsimError(f"{flag} needs --from-verl, --from-nemo-rl, --from-areal, --from-openrlhf, --from-trl "
                                 "or --from-skyrl",
                                 field=flag, fix="add --from-verl CONFIG.yaml, --from-nemo-rl RECIPE.yaml, --from-areal "
                                                 "CONFIG.yaml, --from-openrlhf SCRIPT.sh, --from-trl CONFIG.yaml or "
                                                 "--from-skyrl SCRIPT.sh")
        return None
    framework, items = chosen[0]
    stray = args.scenario
    if stray and "=" in str(stray) and not Path(str(stray)).exists():   # an override after another option
        raise RlsimError(f"{stray!r} came after another option, where it reads as a scenario file",
                         field=f"--from-{framework}",
                         fix=f"give the config's overrides right after its path: --from-{framework} CONFIG {stray} "
                             "... --topology ...")
    for what, given in (("a scenario file", args.scenario), ("--workload", getattr(args, "workload", None)),
                        ("--schedule", getattr(args, "schedule", None))):
        if given:
            raise RlsimError(f"{what} cannot be combined with --from-{framework} (the config gives the scenario)",
                             field=f"--from-{framework}",
                             fix=f"drop it; change the config's keys right after its path (--from-{framework} CONFIG "
                                 "key=value ...), rlsim's scenario keys with --set KEY=VALUE")
    from ..frameworks import import_config
    from ..overrides import parse_assignment
    # each key the command sets with its value (the last --set of a key wins, as the overrides apply); a
    # --grid key's values differ by point: None (frameworks/common.model_set_by_user)
    user_sets = {**dict(parse_assignment(item) for item in args.overrides), **dict.fromkeys(also_set)}
    imported = import_config(framework, items[0], items[1:], topology=args.topology,
                             schedule=args.framework_schedule, user_sets=user_sets)
    imported.user_keys = tuple(user_sets)
    return imported


STALE_SCAN_MAX_FILES = 10_000   # an --out folder past this many files is not scanned for stale outputs


@contextmanager
def stale_outputs_said(out: str | Path | None, own_prefixes: tuple[str, ...] = ()) -> Iterator[None]:
    """A reused --out folder keeps the files an earlier run wrote that this one does not (another
    schedule's report, a --seeds run's files beside a plain run's): after the command, the files
    there before and untouched since are named on stderr, so none passes for this run's. Files whose
    names start with one of ``own_prefixes`` are the command's own store, read and kept on purpose (a
    sweep's results file, which it resumes from)."""
    folder = Path(out) if out else None
    files = list(itertools.islice(folder.rglob("*"), STALE_SCAN_MAX_FILES + 1)) if folder and folder.is_dir() else []
    if len(files) > STALE_SCAN_MAX_FILES:
        files = []
    before = {path: _stamp(path) for path in files if path.is_file()}
    yield
    stale = sorted(str(path.relative_to(folder)) for path, stamp in before.items()
                   if path.is_file() and _stamp(path) == stamp and not path.name.startswith(own_prefixes))
    if stale:
        shown = ", ".join(stale[:8]) + (f" and {len(stale) - 8} more" if len(stale) > 8 else "")
        print(f"rlsim: warning: {out} holds {len(stale)} file(s) of an earlier run that this one did not write: "
              f"{shown} (they do not describe this run: remove them, or give a fresh --out)", file=sys.stderr)


def _stamp(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_mtime_ns, info.st_size, info.st_ino


def config_named(imported: Any) -> Any:
    """The context in which an imported scenario's errors name the framework config and its keys
    (FrameworkImport.naming_config); nothing without an import."""
    from contextlib import nullcontext
    return imported.naming_config() if imported is not None else nullcontext()


def print_framework_listing(imported: Any) -> None:
    """Every key that did not map, with its reason, on stderr (stdout stays the command's output)."""
    sys.stderr.write("\n".join(f"rlsim: {line}" for line in imported.listing()) + "\n")


# A run estimated to take longer than this is announced on stderr before it starts (terminal or not).
ANNOUNCE_ESTIMATE_S = 30.0


class Progress:
    """Progress of one long command on stderr: an estimate before a long run (``estimate``), and a tqdm
    bar with ETA (``__call__(done, total)``) only when stderr is a terminal, so stdout stays clean for
    --json and logs get no bar. ``unit``: what is counted (iteration, case, candidate)."""

    def __init__(self, unit: str = "iteration", enabled: bool | None = None) -> None:
        self.unit = unit
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar: Any = None

    def estimate(self, estimate: Any) -> None:
        if estimate.seconds >= ANNOUNCE_ESTIMATE_S:
            sys.stderr.write(f"rlsim: this run is {estimate.describe()}\n")

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None or self.bar.total != total:   # a sweep learns its total as it resumes
            from tqdm import tqdm
            self.close()
            self.bar = tqdm(total=total, unit=self.unit, file=sys.stderr, dynamic_ncols=True, leave=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
