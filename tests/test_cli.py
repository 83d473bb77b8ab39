"""Start-up of the command line (issue 13 item 4; figures in benchmarks/bench_startup.py): what `rlsim`
imports before it parses `run`, and before `rlsim run` reaches its first simulated event. Each check
runs a fresh interpreter (this process has imported everything already) and reads its sys.modules,
so a new top-level import of a heavy or optional module on these paths fails here."""
from pathlib import Path

import pytest

from simulator import cli
from tests.fresh_python import json_of_fresh_python

ROOT = Path(__file__).resolve().parents[1]

# `rlsim run --help` and the parse of `rlsim run`: argparse and the command's own helpers only.
NOT_BEFORE_PARSE = ("numpy", "pandas", "pyarrow", "pydantic", "networkx", "simpy", "rich", "scipy",
                    "matplotlib", "simulator.scenario", "simulator.api", "simulator.calibration",
                    "simulator.planner", "simulator.autoplan", "simulator.commands.calibrate",
                    "simulator.commands.plan", "simulator.commands.sweep")
# `rlsim run` on the default scenario (stalesync, explicit layouts) up to its first event: what the
# results, the report, other commands and other schedule kinds need comes later or never.
NOT_BEFORE_FIRST_EVENT = ("pandas", "pyarrow", "rich", "scipy", "matplotlib", "dask", "SALib", "networkx",
                          "simulator.metrics", "simulator.report", "simulator.sweep", "simulator.calibration",
                          "simulator.planner", "simulator.autoplan", "simulator.frameworks",
                          "simulator.rl.critical_path", "simulator.rl.schedules.areal",
                          "simulator.rl.schedules.nemo_rl", "simulator.rl.schedules.verl_async",
                          "simulator.rl.schedules.segments", "simulator.rl.schedules.disaggregated",
                          "simulator.rl.schedules.split_failures", "simulator.rl.fake_costs")

PARSE_RUN = """
import json, sys
from simulator import cli
args = cli.build_parser(only=cli._command_named(["run"])).parse_args(["run"])
print(json.dumps({"handler": args.handler.__module__, "modules": sorted(sys.modules)}))
"""

# As benchmarks/bench_startup.py: the first simpy step reports the modules loaded and exits.
FIRST_EVENT = """
import json, os, sys
import simpy
def _first_event(self):
    from pydantic.plugin import _loader
    from simulator import scenario
    print(json.dumps({"modules": sorted(sys.modules), "kind_classes": scenario.built_in_classes_made(),
                      "plugins_looked_up": _loader._plugins is not None,
                      "plugins_variable": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}))
    sys.stdout.flush()
    os._exit(0)
simpy.Environment.step = _first_event
from simulator.cli import main
main(["run"])
print(json.dumps({"no event": True}))
"""


def _modules_of(code: str) -> dict:
    return _modules_of_args(code)


def _modules_of_args(code: str, *args: str) -> dict:
    return json_of_fresh_python(code, *args)


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_parsing_run_imports_no_model_and_no_other_command():
    out = _modules_of(PARSE_RUN)
    assert out["handler"] == "simulator.commands.run"
    assert _loaded(out["modules"], NOT_BEFORE_PARSE) == []


def test_run_reaches_its_first_event_without_results_report_planner_or_other_kinds():
    out = _modules_of(FIRST_EVENT)
    assert "no event" not in out
    modules = out["modules"]
    assert "simulator.rl.schedules.stalesync" in modules   # the default scenario's kind did load
    assert _loaded(modules, NOT_BEFORE_FIRST_EVENT) == []
    # of the eight kinds' config classes, only stalesync's and the colocated runner's it uses are made
    assert out["kind_classes"] == ["colocated", "stalesync"]


@pytest.mark.parametrize("given, looked_up, variable", [(None, False, "__all__"), ("", True, ""),
                                                        ("logfire", True, "logfire")])
def test_the_command_line_turns_pydantic_plugins_off_unless_the_environment_says(monkeypatch, given, looked_up,
                                                                                 variable):
    if given is None:
        monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", given)
    out = _modules_of(FIRST_EVENT)
    assert (out["plugins_looked_up"], out["plugins_variable"]) == (looked_up, variable)


@pytest.mark.parametrize("argv, command", [(["run", "--json"], "run"), (["--help"], None),
                                           (["-h", "plan", "--top", "3"], "plan"), ([], None)])
def test_the_command_named_is_the_first_word_that_is_not_an_option(argv, command):
    assert cli._command_named(argv) == command


def test_a_one_command_parser_reads_its_command_as_the_full_parser_does():
    argv = ["run", "--schedule", "colocated", "--iterations", "2", "--set", "seed=3", "--json"]
    full, one = cli.build_parser().parse_args(argv), cli.build_parser(only="run").parse_args(argv)
    assert vars(one) == vars(full)


def test_an_unknown_command_still_lists_every_command(capsys):
    assert cli.main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert all(f"'{name}'" in err for name in cli.COMMANDS)


START_UP_GC = """
import gc, json, sys
from simulator import cli
seen = []
def note(phase, info):
    if phase == "start":
        seen.append(info["generation"])
gc.callbacks.append(note)
with open(sys.argv[1], "w") as out:
    sys.stdout = sys.stderr = out
    assert cli.main(["run", "--set", "no_such_key=1"]) == 2   # refused once run() loads the scenario
    first = (gc.isenabled(), gc.get_freeze_count(), "simulator.api" in sys.modules, len(seen))
    gc.disable()
    assert cli.main(["run", "--help"]) == 0
    second = (gc.isenabled(), gc.get_freeze_count())
sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
print(json.dumps({"first": first, "second": second}))
"""


def test_the_first_main_pauses_the_collector_preloads_freezes_and_restores_it(tmp_path):
    out = _modules_of_args(START_UP_GC, str(tmp_path / "output.txt"))
    enabled, frozen, preloaded, collections = out["first"]
    assert "no_such_key" in (tmp_path / "output.txt").read_text()
    assert enabled and frozen > 10_000 and preloaded   # run's PRELOAD loaded with the collector paused
    assert collections < 30                            # ~140 while the modules load without the pause
    assert out["second"] == [False, frozen]            # a later call leaves the collector as it found it


# `rlsim run` to its first event with the generated-code table at argv[1]: how many texts dataclasses
# and typing compiled (sys.audit "compile" events there or in codecache.py) and the table's size.
CODE_TABLE = """
import json, os, sys
from pathlib import Path
sys.dont_write_bytecode = False
from simulator import codecache
codecache.cache_path = lambda: Path(sys.argv[1])
compiled = []
def audit(event, args):
    if event == "compile" and args[0] is not None and sys._getframe(1).f_code.co_filename.endswith(
            ("dataclasses.py", "typing.py", "codecache.py")):
        compiled.append(1)
sys.addaudithook(audit)
import simpy
def _first_event(self):
    print(json.dumps({"compiled": len(compiled), "table": len(codecache.read_table(Path(sys.argv[1])))}))
    sys.stdout.flush()
    os._exit(0)
simpy.Environment.step = _first_event
from simulator.cli import main
main(["run"])
"""


def test_a_second_start_up_compiles_none_of_the_generated_code_of_the_first(tmp_path):
    table = str(tmp_path / "table.marshal")
    first = _modules_of_args(CODE_TABLE, table)
    second = _modules_of_args(CODE_TABLE, table)
    # the second compiles only what happens outside the table's window (simpy's import, before main)
    assert first["table"] > 500 and second["table"] == first["table"]
    assert first["compiled"] - second["compiled"] == first["table"]


@pytest.mark.parametrize("argv, hint", [
    (["compare", "--schedule", "stalesync"], "--schedule -> --schedules"),
    (["run", "--iter", "2"], "--iter -> --iterations"),
])
def test_an_abbreviated_option_is_refused_with_the_whole_one_named(capsys, argv, hint):
    """argparse took `compare --schedule stalesync` as --schedules (a one-column comparison) and
    `run --iter 2` as --iterations without a word (found by a new-user trial)."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and hint in err


def test_a_set_key_with_an_empty_part_names_the_item(capsys):
    # `topology..nodes=2` was blamed on a built-in topology file ("unknown field ''")
    assert cli.main(["run", "--set", "topology..nodes=2"]) == 2
    err = capsys.readouterr().err
    assert "--set 'topology..nodes=2'" in err and "empty part" in err and "topologies/" not in err


def test_version_prints_the_package_version(capsys):
    from simulator.version import __version__
    assert cli.main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"rlsim {__version__}"


def test_a_help_example_continued_on_the_next_line_shows_its_backslash():
    """A lone backslash at a line's end in an EXAMPLES string is Python's line continuation: compare's
    and calibrate's --help printed two example lines as one, a run of spaces inside it."""
    import re

    from tests.doc_examples import help_epilogs
    joined = [f"{where}: {line}" for where, text in help_epilogs().items() for line in text.splitlines()
              if re.search(r"\S {3,}--", line)]
    assert joined == []


@pytest.mark.parametrize("argv, usage", [
    (["calibrate", "--iterations", "3"], "usage: rlsim calibrate "),
    (["run", "--bogus"], "usage: rlsim run "),
])
def test_an_option_a_subcommand_lacks_shows_the_subcommands_usage(capsys, argv, usage):
    """An audit (2026-12-07): `rlsim calibrate --iterations 3` printed the top-level usage
    (`rlsim [-h] [--version] COMMAND ...`), not the options calibrate takes."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: " + " ".join(argv[1:]) in err
    assert "COMMAND ..." not in err


def test_an_unknown_subcommand_still_shows_the_top_level_usage(capsys):
    assert cli.main(["simulate"]) == 2
    assert capsys.readouterr().err.startswith("usage: rlsim [-h] [--version] COMMAND ...")


def _plan_header(capsys, stage: str) -> list[str]:
    """The column titles of `rlsim plan --stage STAGE`'s table (qwen2.5-7b on one DGX H100 node)."""
    argv = ["plan", "--stage", stage, "--topology", "dgx-h100", "--model", "qwen2.5-7b", "--top", "1"]
    if stage == "train":
        argv += ["--global-batch", "64", "--seq-len", "2048"]
    assert cli.main(argv) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in header.strip("┃").split("┃")]


def test_a_plan_table_says_what_its_time_is_and_has_no_empty_columns(capsys):
    """An audit (2026-12-07): `rlsim plan --stage rollout` showed empty "naive s" and "TP level" columns
    (a rollout layout has no training placement), and "step s" read as an RL step where it is one
    optimizer step (training) or the batch's generation (rollout)."""
    rollout = _plan_header(capsys, "rollout")
    assert "rollout s" in rollout and not {"step s", "naive s", "TP level"} & set(rollout)
    train = _plan_header(capsys, "train")
    assert {"optimizer step s", "naive s", "TP level"} <= set(train) and "step s" not in train
