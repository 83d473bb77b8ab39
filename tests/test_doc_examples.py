"""Every example the project shows runs (issue 14 class 8): the command lines of `rlsim --help` and
of each subcommand's --help, and the shell and python blocks of README.md and docs/ (found by
tests/doc_examples.py, so a new example is tested without an edit here).

Each distinct command runs once, in-process (cli.main), in a scratch folder that holds the repository's
`workloads/` and `topologies/` and the placeholder scenario files the examples name (`my.yaml`, ...).
It must exit 0 (an example written `cmd || echo ...` may also exit 3, validate --strict's miss) and
leave no traceback. Examples that take minutes (a calibration, a Sobol analysis, a 1,536-GPU plan
search, a cold default comparison) are listed in SLOW with the reason: the default run checks that
their arguments parse and the files they name exist, and RLSIM_DOC_EXAMPLES=all runs them whole
(`RLSIM_DOC_EXAMPLES=all python -m pytest -q tests/test_doc_examples.py`). Examples that need what a
test machine lacks (a GPU, a Dask cluster at a given address) are in NEEDS.
The figures quoted in the prose are checked by tests/test_doc_figures.py (`<!-- figure: ... -->`).
"""
from __future__ import annotations

import contextlib
import io
import os
import shlex
from pathlib import Path

import pytest

from simulator import cli
from tests.doc_examples import REPO, Command, Example, all_examples, doc_files

RUN_ALL = os.environ.get("RLSIM_DOC_EXAMPLES") == "all"

# Placeholder files the examples name: a small scenario of the user's (qwen2.5-7b on one DGX-H100 node).
PLACEHOLDER_SCENARIO = """\
topology: {preset: dgx-h100, nodes: 1}
workload: grpo-qwen2.5-7b
schedule: {kind: colocated}
iterations: 2
"""
PLACEHOLDERS = ("my.yaml", "my-scenario.yaml", "scenario.yaml")

# Command text (or its start) -> why it is slow (minutes on the 2-core VM). Run with RLSIM_DOC_EXAMPLES=all.
SLOW = {
    "rlsim calibrate": "micro-benchmarks a real device for 20-100 s",
    "rlsim sensitivity": "one-at-a-time swings and Sobol samples: 30-130 s",
    "rlsim compare --seeds 32": "32 seeds x 3 schedules of the seed scenario (~60 s)",
    "rlsim run --seeds 16": "16 replicas of the seed scenario (~20 s)",
    "rlsim plan --topology dgx-a100 --set topology.nodes=192": "searches layouts of a 145.6B model on 1,536 GPUs (~50 s)",
    "rlsim plan --topology dgx-h100 --set topology.nodes=4 --model llama3.1-8b": "a 2,300-layout search (~10 s)",
    "rlsim plan --topology dgx-h100 --set topology.nodes=16": "a 16-node layout search (~10 s)",
    "rlsim compare --out results": "the seed scenario under three schedules, with plots (~25 s)",
    "rlsim compare --schedules colocated,one-step-off,async": "three schedules of a 7B step (~10 s)",
    "rlsim validate": "every validation case (~15 s cold)",
    "rlsim sweep": "a sweep of the seed scenario (10-40 s)",
    "python docs/guide-capacity-planning.md": "weak scaling to 4 supernodes (~60 s)",
    "python docs/tutorial.md": "three schedules of the seed scenario with figures (~20 s)",
    "python docs/calibration.md": "two 2-iteration runs and a fit (~10 s)",
    "python docs/guides/uncertainty.md": "replicas and a sensitivity frame (~60 s)",
}
# Examples that need what a test machine may lack: run only when it is there.
NEEDS = {
    "--from-log": "a log of your own training run (verl-run.jsonl, ...)",
    "--device cuda": "a CUDA device",
    "--scheduler tcp://10.0.0.5:8786": "a Dask scheduler at 10.0.0.5:8786",
    "--backend torch": "torch",
    "rlsim calibrate": "torch",
}


def _unique_examples() -> list[tuple[str, list[Example]]]:
    """Examples keyed by what runs (the same command in --help, README and the tutorial runs once)."""
    by_key: dict[str, list[Example]] = {}
    for example in all_examples():
        key = " ; ".join(map(str, example.commands)) if example.commands else f"python {example.source.split(':')[0]}"
        by_key.setdefault(key, []).append(example)
    return sorted(by_key.items())


EXAMPLES = _unique_examples()


def _slow_reason(text: str) -> str | None:
    return next((why for start, why in SLOW.items() if text.startswith(start)), None)


def _missing_need(text: str) -> str | None:
    """What the example needs and this machine lacks (found without importing torch, which is slow)."""
    import importlib.util
    for marker, need in NEEDS.items():
        if marker not in text:
            continue
        if need == "torch" and importlib.util.find_spec("torch") is not None:
            continue
        if need == "a CUDA device" and RUN_ALL and importlib.util.find_spec("torch") is not None:
            import torch
            if torch.cuda.is_available():
                continue
        return need
    return None


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    for name in ("workloads", "topologies"):
        (tmp_path / name).symlink_to(REPO / name)
    for name in PLACEHOLDERS:
        (tmp_path / name).write_text(PLACEHOLDER_SCENARIO)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(command: Command, where: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(command.argv))
    if command.stdout_to:
        (where / command.stdout_to).write_text(out.getvalue())
    allowed = (0, 3) if command.may_fail else (0,)
    assert code in allowed, f"{command} exited {code}:\n{err.getvalue()[-2000:]}"
    assert "Traceback" not in out.getvalue() + err.getvalue()


def _check_arguments(command: Command, where: Path, files: bool = True) -> None:
    """What the default run checks of a slow example: its arguments parse, the files it names exist
    (`files`: not for an example that needs the user's own files)."""
    parser = cli.build_parser()
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            parser.parse_args(list(command.argv))
        except SystemExit as exc:
            pytest.fail(f"{command}: arguments do not parse ({exc.code}): {err.getvalue()}")
    for token in command.argv if files else ():
        if token.endswith((".yaml", ".yml", ".json")) and "=" not in token and not token.startswith("-"):
            written = command.stdout_to == token or token.endswith(("profile.yaml", "cpu.yaml", "h100.yaml"))
            assert written or (where / token).exists(), f"{command}: {token} does not exist"


@pytest.mark.parametrize("key, examples", EXAMPLES, ids=[k[:90] for k, _ in EXAMPLES])
def test_example_runs(key, examples, scratch):
    """Each command of the example runs whole, or (slow, or needing what is not here) has its
    arguments checked; a block's commands run in order in one folder."""
    example, held = examples[0], []
    if example.python is not None:
        why = _missing_need(key) or (None if RUN_ALL else _slow_reason(key))
        code = compile(example.python, example.source, "exec")
        if why:
            pytest.skip(f"{example.source}: {why}; compiled only")
        exec(code, {"__name__": "__doc_example__"})
        return
    for command in example.commands:
        why = _missing_need(str(command)) or (None if RUN_ALL else _slow_reason(str(command)))
        if why:
            _check_arguments(command, scratch, files=not _missing_need(str(command)))
            held.append(f"{command}: {why}")
        else:
            _run(command, scratch)
    if held:
        pytest.skip("arguments checked, not run (RLSIM_DOC_EXAMPLES=all runs the slow ones): " + "; ".join(held))


def test_examples_are_found():
    """The extraction finds the examples (a changed fence or epilog would silently test nothing)."""
    sources = {e.source.split(":")[0].split(" #")[0] for _, group in EXAMPLES for e in group}
    assert {"rlsim --help", "rlsim sweep --help", "rlsim plan --help", "README.md", "docs/tutorial.md",
            "docs/guide-capacity-planning.md", "docs/guides/frameworks.md"} <= sources
    assert len(EXAMPLES) >= 50


def test_every_python_block_runs_or_is_marked_a_fragment():
    marked = sum(p.read_text(encoding="utf-8").count("<!-- example: fragment -->") for p in doc_files())
    python = [e for _, group in EXAMPLES for e in group if e.python is not None]
    assert marked >= 5 and len(python) >= 4


def test_docs_and_presets_cite_paths_inside_the_repository():
    """No link to ../shared/... or a machine path (/work/...): the reference notes are in docs/reference/."""
    files = [*doc_files(), *(REPO / "topologies").glob("*.yaml"), *(REPO / "workloads").rglob("*.yaml")]
    bad = [f"{p.relative_to(REPO)}:{n}" for p in files
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if "../shared/" in line or "/work/" in line]
    assert not bad, bad
    for path in (REPO / "docs").rglob("*.md"):
        for target in _links(path.read_text(encoding="utf-8")):
            assert (path.parent / target).exists(), f"{path.relative_to(REPO)} links to missing {target}"


def _links(text: str) -> list[str]:
    import re
    return [m for m in re.findall(r"\]\(([^)#\s]+)\)", text) if "://" not in m and not m.startswith("mailto:")]


def test_commands_split_like_a_shell():
    from tests.doc_examples import commands_of
    cmd, = commands_of("rlsim run --set 'a={x: 1, y: 2}' --json > out.json   # a comment")
    assert cmd.argv == ("run", "--set", "a={x: 1, y: 2}", "--json") and cmd.stdout_to == "out.json"
    cmd, = commands_of(". .venv/bin/activate && pip install . && rlsim compare --out results")
    assert cmd.argv == ("compare", "--out", "results")
    assert commands_of("rlsim validate --strict || echo missed")[0].may_fail
    assert shlex.join(cmd.argv) == "compare --out results"
