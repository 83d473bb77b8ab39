"""Find every command example the project shows its users: the epilogs of `rlsim --help` and of each
subcommand's --help, and the shell blocks of README.md and docs/**/*.md. Used by
tests/test_doc_examples.py, which runs them.

A fenced block counts as a shell example when its info string is `bash`/`sh`/`shell`/`console` or empty
and one of its lines starts with `rlsim `; its python blocks are examples too. A block preceded by the
line `<!-- example: fragment -->` is shown as a fragment of code (names defined in the prose) and is
not run; the test checks that every other python block runs.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRAGMENT_MARK = "<!-- example: fragment -->"
SHELL_INFO = {"", "bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^```(?P<info>[\w-]*)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)
# Steps of a documented install line that the test does not repeat (tests/test_packaging.py installs).
_INSTALL_STEPS = ("python3 -m venv", ". .venv/bin/activate", "pip install", "python -m pytest")


@dataclass(frozen=True)
class Command:
    """One `rlsim` invocation: argv after `rlsim`, where stdout goes (`> FILE`), and whether a
    non-zero exit is accepted by the example itself (`cmd || echo ...`)."""
    argv: tuple[str, ...]
    stdout_to: str | None = None
    may_fail: bool = False

    def __str__(self) -> str:
        return "rlsim " + shlex.join(self.argv) + (f" > {self.stdout_to}" if self.stdout_to else "")


@dataclass
class Example:
    source: str                      # "README.md:15", "rlsim sweep --help"
    commands: list[Command] = field(default_factory=list)
    python: str | None = None        # a python block's code

    @property
    def id(self) -> str:
        return self.source


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def help_epilogs() -> dict[str, str]:
    """`rlsim --help`'s epilog and each subcommand's, keyed by the command line that shows it."""
    from simulator import cli
    parser = cli.build_parser()
    texts = {"rlsim --help": parser.epilog or ""}
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        texts[f"rlsim {name} --help"] = p.epilog or ""
    return texts


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) for each line starting with `rlsim ` or holding `&& rlsim `,
    with backslash continuations joined."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        start, line = i, lines[i].strip()
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1].rstrip() + " " + lines[i].strip()
        if line.startswith("rlsim ") or "&& rlsim " in line:
            out.append((start, line))
        i += 1
    return out


def commands_of(line: str) -> list[Command]:
    """The rlsim commands of a shell line; install steps around them are left out."""
    commands = []
    for part in line.split("&&"):
        part = part.strip()
        if not part or part.startswith(_INSTALL_STEPS):
            continue
        may_fail = "||" in part
        part = part.split("||")[0]
        tokens = shlex.split(part, comments=True)
        stdout_to = None
        if ">" in tokens:
            at = tokens.index(">")
            stdout_to, tokens = tokens[at + 1], tokens[:at]
        if not tokens or tokens[0] != "rlsim":
            raise ValueError(f"not an rlsim command: {part!r}")
        commands.append(Command(tuple(tokens[1:]), stdout_to, may_fail))
    return commands


def _doc_examples(path: Path) -> list[Example]:
    text, rel = path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix()
    examples = []
    for m in _FENCE.finditer(text):
        info, body = m.group("info").lower(), m.group("body")
        line_no = text.count("\n", 0, m.start()) + 1
        fragment = text[:m.start()].rstrip().endswith(FRAGMENT_MARK)
        if info == "python" and not fragment:
            examples.append(Example(f"{rel}:{line_no}", python=body))
        elif info in SHELL_INFO and not fragment:
            # one example per block: its commands run in order in one folder (`... > mine.yaml`, then
            # `rlsim run mine.yaml`)
            commands = [c for _, line in shell_lines(body) for c in commands_of(line)]
            if commands:
                examples.append(Example(f"{rel}:{line_no + 1}", commands))
    return examples


def all_examples() -> list[Example]:
    examples = []
    for where, text in help_epilogs().items():
        for n, line in shell_lines(text):
            examples.append(Example(f"{where} #{n + 1}", commands_of(line)))
    for path in doc_files():
        examples.extend(_doc_examples(path))
    return [e for e in examples if e.commands or e.python is not None]


# A figure quoted in the prose, annotated with the command that prints it (tests/test_doc_figures.py):
#   <!-- figure: COMMAND ; PATH ; VALUE [; TOLERANCE] -->
# on the line that shows VALUE (docs/internals.md "The docs' examples and figures").
FIGURE_MARK = re.compile(r"<!--\s*figure:(?P<body>.*?)-->")
_FIGURE_PATH = re.compile(r"^(?P<path>[\w.-]+)(?:\s*(?P<op>[*/])\s*(?P<factor>[\d.eE+-]+))?$")
_FIGURE_VALUE = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<decimals>\d+))?$")


@dataclass(frozen=True)
class Figure:
    """One annotated figure: where it is, the prose line around it (markers removed), the command
    whose JSON holds it, the dotted path into that JSON and its scale, the value as printed and the
    tolerance of the comparison."""
    source: str                      # "docs/planner.md:375"
    line: str
    command: Command
    path: str
    factor: float                    # the JSON value times this is compared with the value
    value: str
    tolerance: float
    relative: bool = False

    @property
    def expected(self) -> float:
        return float(self.value.replace(",", ""))


def _figure_tolerance(text: str | None, value: str) -> tuple[float, bool]:
    """TOLERANCE: `0.05` (absolute) or `1%` (relative); absent, half a unit of the value's last
    printed digit (what rounding to the printed figure allows)."""
    if text is None:
        decimals = _FIGURE_VALUE.match(value).group("decimals") or ""
        return 0.5 * 10.0 ** -len(decimals), False
    if text.endswith("%"):
        return float(text[:-1]) / 100, True
    return float(text), False


def parse_figure(body: str, source: str, line: str) -> Figure:
    """A marker's text after `figure:`; ValueError naming the source and the part that is wrong."""
    parts = [p.strip() for p in body.split(";")]
    if len(parts) not in (3, 4):
        raise ValueError(f"{source}: a figure marker is 'COMMAND ; PATH ; VALUE [; TOLERANCE]', "
                         f"got {len(parts)} parts: {body.strip()!r}")
    command_text, path_text, value = parts[:3]
    commands = commands_of(command_text) if command_text.startswith("rlsim ") else []
    if len(commands) != 1 or commands[0].stdout_to or "--json" not in commands[0].argv:
        raise ValueError(f"{source}: the command must be one `rlsim ... --json`, got {command_text!r}")
    path = _FIGURE_PATH.match(path_text)
    if path is None:
        raise ValueError(f"{source}: the path must be dotted keys (list indices as numbers), "
                         f"optionally '/ N' or '* N', got {path_text!r}")
    if _FIGURE_VALUE.match(value) is None:
        raise ValueError(f"{source}: the value must be a number as printed (1,047,680, 108.4), got {value!r}")
    factor = float(path.group("factor") or 1)
    factor = 1 / factor if path.group("op") == "/" else factor
    try:
        tolerance, relative = _figure_tolerance(parts[3] if len(parts) == 4 else None, value)
    except ValueError:
        raise ValueError(f"{source}: the tolerance must be a number or a percentage, got {parts[3]!r}") from None
    return Figure(source, line, commands[0], path.group("path"), factor, value, tolerance, relative)


def figures_in(path: Path) -> tuple[list[Figure], list[str]]:
    """The figure markers of a markdown file, outside fenced blocks, and the problems of those that
    do not parse."""
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    figures, problems, fenced = [], [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        prose = FIGURE_MARK.sub("", line)
        for mark in FIGURE_MARK.finditer(line):
            try:
                figures.append(parse_figure(mark.group("body"), f"{rel}:{n}", prose))
            except ValueError as exc:
                problems.append(str(exc))
    return figures, problems


def all_figures() -> tuple[list[Figure], list[str]]:
    figures, problems = [], []
    for path in doc_files():
        found, wrong = figures_in(path)
        figures.extend(found)
        problems.extend(wrong)
    return figures, problems
