"""The `rlsim` command line: parse, call, print. Each subcommand lives in simulator/commands/;
their shared argument and output helpers in simulator/commands/common.py (nothing imports this module).

Exit codes (public contract): 0 ok (also when the reader of stdout goes away early, as
`rlsim ... | head -1` does), 2 bad input (RlsimError, argparse errors), 3 `validate --strict` with a
case outside its tolerance, 1 internal error, 130 Ctrl-C, 143 SIGTERM (sweep).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from .errors import RlsimError, blamed_on_set

# Subcommand modules, in the order `rlsim --help` lists them. Each module defines
# HELP (one line), EXAMPLES (text), add_arguments(parser) and run(args) -> int; optionally
# PRELOAD, the modules its run() imports first (loaded during the start-up, see _start_up).
COMMANDS = ["presets", "comm", "validate", "run", "compare", "sweep", "plan", "calibrate", "sensitivity"]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # an option is given whole: `compare --schedule stalesync` ran as --schedules, a one-column
        # comparison, and `run --iter 2` passed (found by a new-user trial); subcommands inherit it
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # argparse's own exits with 2 already; keep its text short
        # the top-level parser reports a subcommand's unknown words: the usage shown is the subcommand's
        command = self._command_parser() if message.startswith("unrecognized arguments:") else None
        (command or self).print_usage(sys.stderr)
        # hinted from the words given, before a fix naming options is appended (whose words it read back)
        hint = self._did_you_mean(message.split(":", 1)[1].split()) if message.startswith("unrecognized arguments:") else ""
        if message.startswith("unrecognized arguments:") and "=" in message and \
                any(flag in getattr(self, "argv_given", sys.argv) for flag in ("--from-verl", "--from-nemo-rl", "--from-areal",
                                                                          "--from-openrlhf", "--from-trl", "--from-skyrl")):
            # framework overrides placed after another option: argparse has no slot for them there
            message += (" (fix: give the config's key=value overrides right after its path: "
                        "--from-verl / --from-nemo-rl / --from-areal / --from-openrlhf / --from-trl / --from-skyrl CONFIG key=value ... "
                        "--topology ...)")
        self.exit(2, f"rlsim: error: {message}{hint}\n")

    def _command_parser(self) -> argparse.ArgumentParser | None:
        """The parser of the subcommand the arguments given invoke, where this parser has subcommands
        and they name one of them (None else)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(_command_named(getattr(self, "argv_given", sys.argv[1:])) or "")
        return None

    def _did_you_mean(self, words: list[str]) -> str:
        """A close option of this parser for each unrecognized option word (abbreviations are refused)."""
        options = [o for o in self._option_string_actions if o.startswith("--")]
        command = self._command_parser()   # the top-level parser reports a subcommand's unknown words
        options += [o for o in getattr(command, "_option_string_actions", ()) if o.startswith("--")]
        hints = []
        for word in words:
            name = word.split("=")[0]
            close = [o for o in options if o.startswith(name)][:1] or difflib.get_close_matches(name, options, n=1,
                                                                                                cutoff=0.75)
            if word.startswith("--") and name.strip("-") and close and close[0] != name:   # "--=3" names none
                hints.append(f"{name} -> {close[0]}")
        return f" (did you mean: {', '.join(hints)}?)" if hints else ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only`` (one of COMMANDS) the parser of that subcommand alone: `rlsim
    run` neither imports the other command modules nor what their options need (calibrate's log
    fit pulls numpy in for its defaults; benchmarks/bench_startup.py). Any other ``only`` (a typo,
    None) builds every subcommand, so argparse's "invalid choice" lists them all."""
    parser = _Parser(prog="rlsim", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Discrete-event simulator of LLM RL post-training on clusters.",
                     epilog="examples:\n  rlsim compare --out results\n"
                            "  rlsim run --schedule stalesync --set schedule.staleness=2 --json\n"
                            "  rlsim sweep --grid topology.supernodes=1,2,4 --jobs 2 --out sweep\n"
                            "  rlsim plan --topology dgx-h100 --set topology.nodes=4 --model llama3.1-8b\n"
                            "  rlsim comm --topology dgx-h100 --op all_reduce --bytes 1GiB --group node:0\n"
                            "  rlsim presets\n  rlsim validate\n\n"
                            "run `rlsim COMMAND --help` for a command's options and examples.")
    from .version import __version__
    parser.add_argument("--version", action="version", version=f"rlsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [only] if only in COMMANDS else COMMANDS:
        try:
            module = importlib.import_module(f"simulator.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"simulator.commands.{name}":
                continue  # not built yet
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP, epilog=module.EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(handler=module.run)
    return parser


def _command_named(argv: list[str] | None) -> str | None:
    """The subcommand `argv` invokes: its first word that is not an option (the top-level parser
    takes no option with a value), or None."""
    words = sys.argv[1:] if argv is None else argv
    return next((word for word in words if not word.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader of stdout went away (`| head -1`): not an error. Point stdout at /dev/null so
        # the interpreter's final flush does not fail (and turn the exit code into 120).
        _silence_stdout()
        return 0


_STARTED = False   # the first main() of a process runs its start-up (_start_up)

# pydantic looks for plugins (the "pydantic" entry-point group) when it builds its first model: a read
# of every installed distribution's metadata, ~20 M instructions (1.7%) of `rlsim run`'s start-up with
# the 91 distributions of the development environment (benchmarks/bench_startup.py). The command line
# uses no pydantic plugin, so its start-up turns them off before the first model is built, unless the
# environment sets this variable itself (to any value: empty keeps every plugin, as pydantic's default).
PYDANTIC_PLUGINS_VARIABLE, PYDANTIC_PLUGINS_OFF = "PYDANTIC_DISABLE_PLUGINS", "__all__"


@contextlib.contextmanager
def _start_up() -> Iterator[bool]:
    """The first main() of a process (yields True there): pydantic's plugin look-up off where
    pydantic is not loaded yet (PYDANTIC_PLUGINS_OFF), the cyclic garbage collector paused while the
    command line is parsed and the command's modules load (they make long-lived objects only, yet the collector
    walked them ~140 times: a fifth of `rlsim run`'s start-up, benchmarks/bench_startup.py), then
    what they made frozen (gc.freeze: left out of later collections) and the collector restored
    as it was. Later calls (tests, notebooks) change nothing."""
    global _STARTED
    if _STARTED:
        yield False
        return
    _STARTED = True
    if "pydantic" not in sys.modules:   # else models may exist, built with plugins: leave them so
        os.environ.setdefault(PYDANTIC_PLUGINS_VARIABLE, PYDANTIC_PLUGINS_OFF)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield True
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def _preload(names: tuple[str, ...], first: bool) -> None:
    """Import a command's PRELOAD modules. In the first main(), with the code that dataclasses and
    typing generate taken from earlier start-ups (codecache.py: 22% of `rlsim run`'s start-up); here,
    after the parse, so that --help loads none of it."""
    if not (first and names):
        for name in names:
            importlib.import_module(name)
        return
    from .codecache import generated_code_cached
    with generated_code_cached():
        for name in names:
            importlib.import_module(name)


def _main(argv: list[str] | None) -> int:
    with _start_up() as first:
        parser = build_parser(only=_command_named(argv))
        parser.argv_given = list(sys.argv[1:] if argv is None else argv)   # for its error's hint
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help (0) or a usage error (2): return the code, for callers of main()
            return int(exc.code or 0)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 0
        _preload(getattr(sys.modules[args.handler.__module__], "PRELOAD", ()), first)
    try:
        # imported after the parse: --help loads none of it
        from .overrides import refuse_a_key_given_twice
        refuse_a_key_given_twice(getattr(args, "overrides", None) or [])
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handling below, not at exit
        return code
    except RlsimError as exc:
        exc = blamed_on_set(exc, getattr(args, "overrides", None) or [])
        # calibrate --predict KEY=VALUE (the predicted run) and sensitivity --vary KEY=LOW..HIGH, as --set
        for flag, dest in (("--predict", "predict"), ("--vary", "vary")):
            items = getattr(args, dest, None)
            if items and isinstance(items, list):
                exc = blamed_on_set(exc, [str(item) for item in items], flag)
        print(f"rlsim: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise   # main's: the reader went away, not an error
    except OSError as exc:   # a file the filesystem refuses (an output where a folder is, a full disk)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"rlsim: error: {where}{exc.strerror or exc} (fix: check that path; for an output, give --out "
              "another folder)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlsim: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
