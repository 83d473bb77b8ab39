"""The figures the docs quote in prose and tables are what the commands print (docs/internals.md "The
docs' examples and figures").

A figure is annotated on the line that shows it with a comment the renderer hides,
`<!-- figure: COMMAND ; PATH ; VALUE [; TOLERANCE] -->` (found by tests/doc_examples.py). The default
run checks that every marker parses, that its command's arguments parse and that its VALUE stands
verbatim in the line it annotates (so the marker cannot drift from the text); RLSIM_DOC_EXAMPLES=all
runs each distinct command once, in-process, in a scratch folder holding `workloads/` and
`topologies/`, and compares the JSON value at PATH with VALUE.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
from pathlib import Path

import pytest

from simulator import cli
from tests.doc_examples import REPO, Command, Figure, all_figures, figures_in

RUN_ALL = os.environ.get("RLSIM_DOC_EXAMPLES") == "all"
FIGURES, PROBLEMS = all_figures()
_OUTPUTS: dict[Command, object] = {}          # each distinct command runs once a test session


def command_output(command: Command) -> object:
    """The JSON a command prints (cached by the command)."""
    if command not in _OUTPUTS:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(command.argv))
        assert code == 0, f"{command} exited {code}:\n{err.getvalue()[-2000:]}"
        _OUTPUTS[command] = json.loads(out.getvalue())
    return _OUTPUTS[command]


def value_at(output: object, path: str) -> object:
    """The value at a dotted path; a number key indexes a list."""
    for key in path.split("."):
        output = output[int(key)] if isinstance(output, list) else output[key]
    return output


def figure_mismatch(figure: Figure, output: object) -> str | None:
    """Why the figure differs from the command's output (None where it agrees)."""
    where = f"{figure.source}: `{figure.command}` at {figure.path}"
    try:
        raw = value_at(output, figure.path)
    except (KeyError, IndexError, ValueError, TypeError):
        return f"{where}: no such value in the command's JSON (expected {figure.value})"
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return f"{where}: {raw!r} is not a number (expected {figure.value})"
    got = raw * figure.factor
    allowed = figure.tolerance * abs(figure.expected) if figure.relative else figure.tolerance
    if abs(got - figure.expected) <= allowed * (1 + 1e-9):
        return None
    return f"{where}: expected {figure.value} (within {allowed:.3g}), got {got:.6g}"


def value_in_line(figure: Figure) -> bool:
    """VALUE stands in the annotated line as a whole number (108.4 is not found in 2108.45)."""
    return re.search(rf"(?<![\d.,]){re.escape(figure.value)}(?!\d|[.,]\d)", figure.line) is not None


@pytest.fixture(scope="module")
def scratch_dir(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("doc_figures")
    for name in ("workloads", "topologies"):
        (where / name).symlink_to(REPO / name)
    return where


def test_figure_markers_parse_and_match_their_line():
    """Every marker parses, its command's arguments parse, and its value is in the prose it annotates."""
    assert not PROBLEMS, "\n".join(PROBLEMS)
    parser = cli.build_parser()
    for figure in FIGURES:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                parser.parse_args(list(figure.command.argv))
            except SystemExit:
                pytest.fail(f"{figure.source}: `{figure.command}` does not parse: {err.getvalue()}")
        assert value_in_line(figure), f"{figure.source}: {figure.value} is not in its line: {figure.line.strip()!r}"


def test_figures_are_found():
    """The finder sees the annotated docs (a changed marker syntax would silently check nothing)."""
    docs = {f.source.split(":")[0] for f in FIGURES}
    assert {"docs/cost-models-inference.md", "docs/guides/frameworks.md", "docs/schedules.md",
            "docs/planner.md"} <= docs
    assert len(FIGURES) >= 8


@pytest.mark.skipif(not RUN_ALL, reason="runs the commands: RLSIM_DOC_EXAMPLES=all")
@pytest.mark.parametrize("figure", FIGURES, ids=[f"{f.source}={f.value}" for f in FIGURES])
def test_figure_is_what_its_command_prints(figure, scratch_dir, monkeypatch):
    monkeypatch.chdir(scratch_dir)
    mismatch = figure_mismatch(figure, command_output(figure.command))
    assert mismatch is None, mismatch


SEED_STEP = "rlsim run --workload grpo-qwen2.5-7b --iterations 2 --json"


def test_a_wrong_figure_fails_naming_doc_line_command_expected_and_got(scratch_dir, monkeypatch):
    """The checker itself, on a tmp doc: the seed's 2-step run, 108.4 s a step, quoted as 99.9 s."""
    figure, = _write_doc_text(f"intro\nthe step takes 99.9 s <!-- figure: {SEED_STEP} ; step_time_s ; 99.9 -->\n")
    monkeypatch.chdir(scratch_dir)
    output = command_output(figure.command)
    message = figure_mismatch(figure, output)
    assert message == f"doc.md:2: `{SEED_STEP}` at step_time_s: expected 99.9 (within 0.05), got 108.414"
    right, = _write_doc_text(f"108.4 s <!-- figure: {SEED_STEP} ; step_time_s ; 108.4 -->")
    assert figure_mismatch(right, output) is None
    assert "no such value" in figure_mismatch(dataclasses.replace(right, path="summary.step"), output)


def test_marker_syntax_scale_and_tolerance():
    """Closed forms: the default tolerance is half the last printed digit; `/ N` scales; `2%` is relative."""
    output = {"peak": 28550871552.0, "rows": [{"tps": 42286.8}]}
    gb, = _write_doc_text("peak 28.55 GB <!-- figure: rlsim run --json ; peak / 1e9 ; 28.55 -->")
    assert (gb.factor, gb.tolerance, gb.relative) == (1e-9, 0.005, False)
    assert figure_mismatch(gb, output) is None
    tps, = _write_doc_text("| 42,287 <!-- figure: rlsim run --json ; rows.0.tps ; 42,287 --> |")
    assert tps.expected == 42287 and tps.tolerance == 0.5 and figure_mismatch(tps, output) is None
    off, = _write_doc_text("| 42,000 <!-- figure: rlsim run --json ; rows.0.tps ; 42,000 ; 1% --> |")
    assert off.relative and figure_mismatch(off, output) is None
    tight, = _write_doc_text("| 42,000 <!-- figure: rlsim run --json ; rows.0.tps ; 42,000 ; 0.5% --> |")
    assert "expected 42,000 (within 210), got 42286.8" in figure_mismatch(tight, output)


def test_the_value_must_stand_in_its_line_and_bad_markers_are_named():
    shifted, = _write_doc_text("step 2108.45 s <!-- figure: rlsim run --json ; a ; 108.4 -->")
    assert not value_in_line(shifted)
    ended, = _write_doc_text("a step of 108.4. <!-- figure: rlsim run --json ; a ; 108.4 -->")
    assert value_in_line(ended)
    for body, says in (("rlsim run --json ; a", "got 2 parts"), ("rlsim run ; a ; 1", "one `rlsim ... --json`"),
                       ("rlsim run --json ; a b ; 1", "the path must be"), ("rlsim run --json ; a ; 1.2x", "the value"),
                       ("rlsim run --json ; a ; 1 ; lots", "the tolerance")):
        _, problems = _figures_and_problems(f"x <!-- figure: {body} -->")
        assert len(problems) == 1 and problems[0].startswith("doc.md:1: ") and says in problems[0], problems
    assert _figures_and_problems("```markdown\n<!-- figure: shown, not checked -->\n```\n") == ([], [])


def _figures_and_problems(text: str) -> tuple[list[Figure], list[str]]:
    import tempfile
    with tempfile.TemporaryDirectory() as where:
        doc = Path(where) / "doc.md"
        doc.write_text(text, encoding="utf-8")
        return figures_in(doc)


def _write_doc_text(text: str) -> list[Figure]:
    figures, problems = _figures_and_problems(text)
    assert not problems, problems
    return figures
