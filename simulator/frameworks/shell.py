"""Reading a framework's launch script (OpenRLHF's, SkyRL's): its lines with continuations joined,
its ``NAME=value`` / ``export NAME=value`` assignments resolving ``$NAME``, ``${NAME}`` and
``${NAME:-default}`` and ``$((...))`` (bash's integer arithmetic) in later lines (a variable the script
does not set stays ``${NAME}``, an error where its key is read), a line split as the shell splits it,
and where a command ends."""
from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import RlsimError

# Tokens that end the command (a pipe, a redirection, the next command of the line).
SHELL_STOPS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# What a comment may start after (bash: a `#` starting a word begins a comment).
_WORD_BREAKS = " \t\n;&|()<>"
# The start of a line that reads as a command's argument, not a command: a Hydra override of a dotted
# key (``a.b=1``), ``+key`` / ``~key``, a ``--flag`` / ``-f``.
_ARGUMENT = re.compile(r"(?:[+~]+[A-Za-z_]|--?[A-Za-z]|[A-Za-z_][\w-]*\.[\w.-]*=)")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def script_lines(path: str | Path, what: str, fix: str) -> list[str]:
    """The script's commands as bash reads them: continuation lines joined, comments left out (a
    comment ends at its line's end, a trailing backslash in it included, so it ends a continued
    command there), a quoted newline kept; ``what`` / ``fix`` for the error of an unreadable file. Lines
    that a comment cut off its command (_refuse_orphaned_arguments) are an error."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RlsimError(f"cannot read the {what}: {exc}", source=str(path), fix=fix) from None
    lines = _logical_lines(text.replace("\r\n", "\n"))
    _refuse_orphaned_arguments(lines, str(path))
    return [line.text for line in lines]


@dataclass(frozen=True)
class _LogicalLine:
    """One command line of a script: its text, the number of its first physical line, and the number
    of the line whose comment ended it where the command ran on past its first line (or the comment
    swallowed a trailing backslash), else None."""
    text: str
    first: int
    cut_by_comment: int | None


def _logical_lines(text: str) -> list[_LogicalLine]:
    """The text's command lines as bash reads them (script_lines)."""
    lines: list[_LogicalLine] = []
    buffer: list[str] = []
    first = line = 1
    quote, comment, i = "", None, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and quote != "'" and text.startswith("\n", i + 1):   # a continuation: bash drops both
            i, line = i + 2, line + 1
            continue
        if char == "\\" and quote != "'":
            buffer.append(text[i:i + 2])
            i += 2
            continue
        if char == "\n" and not quote:
            lines.append(_LogicalLine("".join(buffer), first, comment))
            buffer, comment, i = [], None, i + 1
            first = line = line + 1
            continue
        if char == "#" and not quote and (not buffer or buffer[-1] in _WORD_BREAKS):
            end = len(text) if text.find("\n", i) < 0 else text.find("\n", i)
            cuts = "".join(buffer).strip() and (line > first or text[i:end].endswith("\\"))
            comment, i = (line if cuts else None), end
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        line += char == "\n"
        buffer.append(char)
        i += 1
    if buffer or comment:
        lines.append(_LogicalLine("".join(buffer), first, comment))
    return lines


def _refuse_orphaned_arguments(lines: list[_LogicalLine], source: str) -> None:
    """An error where a comment ended a continued command and the next non-blank line reads as its
    arguments (a Hydra ``key.sub=value``, ``+key`` / ``~key``, a ``--flag``): bash would run that
    line as a command of its own (`command not found`), the training command without them."""
    for at, line in enumerate(lines):
        if line.cut_by_comment is None:
            continue
        after = next((later for later in lines[at + 1:] if later.text.strip()), None)
        if after is not None and _ARGUMENT.match(after.text.lstrip()):
            word = after.text.split()[0]
            raise RlsimError(
                f"line {after.first} ({word!r} ...) is not an argument of the command above it: the comment on line "
                f"{line.cut_by_comment} ends that command (bash ends a comment at its line's end, a trailing "
                f"backslash included), so bash runs line {after.first} as a command of its own", source=source,
                fix=f"remove the comment on line {line.cut_by_comment} or move it out of the continued command "
                    "(above it)")


def note_assignment(line: str, variables: dict[str, str]) -> None:
    """A ``NAME=value`` line's value (resolved, unquoted) into ``variables``; other lines leave it."""
    match = _ASSIGNMENT.match(line)
    if match:
        variables[match.group(1)] = _unquoted(expanded(match.group(2).strip(), variables))


def split_line(line: str, variables: Mapping[str, str], source: str, command: str) -> list[str]:
    """The line's tokens as the shell splits them, its variables resolved (``command``: its name,
    for the error of an unclosed quote)."""
    try:
        return shlex.split(expanded(line, variables))
    except ValueError as exc:
        raise RlsimError(f"cannot split the command line: {exc}", source=source,
                         fix=f"close the quotes of the {command} command") from None


def command_end(tokens: list[str]) -> int:
    """The index where the command that starts the tokens ends (a pipe, a redirection, the next one)."""
    return next((i for i, token in enumerate(tokens) if token in SHELL_STOPS or token.startswith((">", "1>", "2>"))),
                len(tokens))


def python_command_arguments(line: str, variables: Mapping[str, str], source: str) -> list[str]:
    """The arguments of the line's Python command (``python -m MODULE ...`` or ``... SCRIPT.py ...``), its
    variables resolved, up to where that command ends; none where the line runs no Python entry point."""
    tokens = split_line(line, variables, source, "training")
    start = next((i + 2 if token == "-m" else i + 1 for i, token in enumerate(tokens)
                  if token == "-m" or token.endswith(".py")), None)
    if start is None:
        return []
    tokens = tokens[start:]
    return tokens[:command_end(tokens)]


def _unquoted(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return " ".join(parts)


def expanded(text: str, variables: Mapping[str, str]) -> str:
    """$NAME / ${NAME} / ${NAME:-default} replaced from the script's assignments; an unknown one
    kept as ${NAME} (Values refuses it when the key is read); $((...)) evaluated as bash's integer
    arithmetic (_arithmetic). Inside single quotes nothing is expanded, as bash leaves it."""
    return "".join(part if quoted else _expanded_unquoted(part, variables)
                   for part, quoted in _single_quoted_parts(text))


def _single_quoted_parts(text: str) -> list[tuple[str, bool]]:
    """The text cut into (part, inside single quotes) in order, the quotes kept with their part; a single
    quote inside double quotes (or escaped with a backslash outside them) is a character, as in bash."""
    parts: list[tuple[str, bool]] = []
    start, i, double = 0, 0, False
    while i < len(text):
        char = text[i]
        if char == "\\" and not double:
            i += 2
            continue
        if char == '"':
            double = not double
        elif char == "'" and not double:
            end = text.find("'", i + 1)
            if end < 0:   # unclosed: the shell's split says so (split_line)
                break
            parts += [(text[start:i], False), (text[i:end + 1], True)]
            start = i = end + 1
            continue
        i += 1
    return [part for part in [*parts, (text[start:], False)] if part[0]]


def _expanded_unquoted(text: str, variables: Mapping[str, str]) -> str:
    """expanded() of text outside single quotes."""
    text = _arithmetic_expanded(text, variables)
    def value_of(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        return "${" + name + "}"
    return _VARIABLE.sub(value_of, text)


_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$?([A-Za-z_][A-Za-z0-9_]*)")


def _arithmetic_expanded(text: str, variables: Mapping[str, str]) -> str:
    """Each $(( EXPR )) of the text replaced by its value (bash's arithmetic expansion); one that does
    not evaluate (a variable the script does not set to a whole number, a division by zero) by ${NAME}
    of its first name, which Values refuses when its key is read, as an unset variable."""
    out, start = [], 0
    while (begin := text.find("$((", start)) >= 0:
        depth, end = 2, begin + 3
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        if depth:
            break
        expression = text[begin + 3:end - 2]
        out += [text[start:begin], _arithmetic(expression, variables)]
        start = end
    return "".join(out) + text[start:]


def _arithmetic(expression: str, variables: Mapping[str, str]) -> str:
    """bash's value of one arithmetic expression (names bare or as $NAME / ${NAME}; + - * / %, / and %
    truncating toward zero as C's)."""
    names = [match.group(1) or match.group(2) for match in _NAME.finditer(expression)]
    try:
        python = _NAME.sub(lambda m: str(int(variables[m.group(1) or m.group(2)])), expression)
        return str(_evaluate(ast.parse(python.strip(), mode="eval").body))
    except (KeyError, ValueError, SyntaxError, ZeroDivisionError):
        return "${" + (names[0] if names else "arithmetic") + "}"


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Mod)):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, (ast.Div, ast.Mod)):
            if right == 0:
                raise ZeroDivisionError
            quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
            return quotient if isinstance(node.op, ast.Div) else left - quotient * right
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
            else left * right
    raise ValueError("not bash's integer arithmetic")
