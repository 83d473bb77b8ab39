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
