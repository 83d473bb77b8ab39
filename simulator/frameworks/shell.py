"""Reading a framework's launch script (OpenRLHF's, SkyRL's): its lines with continuations joined,
its ``NAME=value`` / ``export NAME=value`` assignments resolving ``$NAME``, ``${NAME}`` and
``${NAME:-default}`` in later lines (a variable the script does not set stays ``${NAME}``, an error
where its key is read), a line split as the shell splits it, and where a command ends."""
from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from ..errors import RlsimError

# Tokens that end the command (a pipe, a redirection, the next command of the line).
SHELL_STOPS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def script_lines(path: str | Path, what: str, fix: str) -> list[str]:
    """The script's lines, continuation lines joined; ``what`` / ``fix`` for the error of an
    unreadable file."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RlsimError(f"cannot read the {what}: {exc}", source=str(path), fix=fix) from None
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def note_assignment(line: str, variables: dict[str, str]) -> None:
    """A ``NAME=value`` line's value (resolved, unquoted) into ``variables``; other lines leave it."""
    match = _ASSIGNMENT.match(line)
    if match:
        variables[match.group(1)] = _unquoted(expanded(match.group(2).strip(), variables))


def split_line(line: str, variables: Mapping[str, str], source: str, command: str) -> list[str]:
    """The line's tokens as the shell splits them, its variables resolved (``command``: its name,
    for the error of an unclosed quote)."""
    try:
        return shlex.split(expanded(line, variables), comments=True)
    except ValueError as exc:
        raise RlsimError(f"cannot split the command line: {exc}", source=source,
                         fix=f"close the quotes of the {command} command") from None


def command_end(tokens: list[str]) -> int:
    """The index where the command that starts the tokens ends (a pipe, a redirection, the next one)."""
    return next((i for i, token in enumerate(tokens) if token in SHELL_STOPS or token.startswith((">", "1>", "2>"))),
                len(tokens))


def _unquoted(text: str) -> str:
    try:
        parts = shlex.split(text, comments=True)
    except ValueError:
        return text
    return " ".join(parts)


def expanded(text: str, variables: Mapping[str, str]) -> str:
    """$NAME / ${NAME} / ${NAME:-default} replaced from the script's assignments; an unknown one
    kept as ${NAME} (Values refuses it when the key is read)."""
    def value_of(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        return "${" + name + "}"
    return _VARIABLE.sub(value_of, text)
