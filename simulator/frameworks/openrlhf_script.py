"""Reading an OpenRLHF launch script: the flags of its ``openrlhf.cli.train_ppo_ray`` command as a
flat config (``--actor.num_nodes 2`` -> ``{"actor.num_nodes": 2}``).

OpenRLHF (0.10+) takes dotted argparse flags, so its config is the command line itself, usually a
shell script (``ray job submit ... -- python3 -m openrlhf.cli.train_ppo_ray --flag value \\ ...``).
The script's own ``NAME=value`` / ``export NAME=value`` lines resolve ``$NAME`` and ``${NAME}`` in
the flags; a variable the script does not set stays ``${NAME}``, an error when its key is read
(shell.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import RlsimError
from .shell import command_end, note_assignment, script_lines, split_line

COMMAND = "openrlhf.cli.train_ppo_ray"


def read_script(path: str | Path, arity: Mapping[str, int | str]) -> dict[str, Any]:
    """The flags of the script's train_ppo_ray command as {dotted name: value}. ``arity``: OpenRLHF's
    flags that take no value (0), a fixed count (2) or a list ('+', '*'); any other flag takes one
    value (or none, read as a switch, when the next token is a flag)."""
    source = str(path)
    variables: dict[str, str] = {}
    for line in script_lines(path, "OpenRLHF script",
                             "give the path of a shell script that runs python3 -m openrlhf.cli.train_ppo_ray"):
        if COMMAND in line or line.lstrip().startswith("--"):
            tokens = _command_tokens(line, variables, source)
            return _flags(tokens, arity, source)
        note_assignment(line, variables)
    raise RlsimError(f"no `{COMMAND}` command in the script", source=source,
                     fix=f"give a script that runs `python3 -m {COMMAND} --flag value ...` (or a file of its flags)")


def _command_tokens(line: str, variables: Mapping[str, str], source: str) -> list[str]:
    tokens = split_line(line, variables, source, "train_ppo_ray")
    start = next((i + 1 for i, token in enumerate(tokens) if token.endswith(COMMAND)
                  or token.endswith("train_ppo_ray.py")), 0)
    tokens = tokens[start:]
    return tokens[:command_end(tokens)]


def _flags(tokens: list[str], arity: Mapping[str, int | str], source: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            raise RlsimError(f"{token!r} is not a --flag of train_ppo_ray", source=source,
                             fix="give each option as --name value (OpenRLHF's argparse flags)")
        name, eq, inline = token[2:].partition("=")
        if not name:
            raise RlsimError(f"{token!r} names no flag", source=source, fix="give each option as --name value")
        if eq:
            flat[name] = _value(inline)
            i += 1
            continue
        values, i = _values_after(tokens, i + 1, arity.get(name, 1))
        if name in arity and arity[name] == 0:
            flat[name] = True
        elif arity.get(name) in (2, "+", "*"):
            flat[name] = [_value(v) for v in values]
        else:
            flat[name] = _value(values[0]) if values else True
    return flat


def _values_after(tokens: list[str], i: int, count: int | str) -> tuple[list[str], int]:
    """The values of a flag from tokens[i]: ``count`` of them, or up to the next --flag."""
    if count == 0:
        return [], i
    end = i
    while end < len(tokens) and not tokens[end].startswith("--"):
        end += 1
        if isinstance(count, int) and end - i == count:
            break
    return tokens[i:end], end


def _value(text: str) -> Any:
    """A token as argparse's type would read it: numbers and true / false as such, the rest text."""
    if text.startswith("${"):
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):   # YAML 1.1 reads 1e-3 (no dot) as text; argparse's float() does not
        try:
            return float(value)
        except ValueError:
            return text
    return value if isinstance(value, (int, float, bool)) or value is None else text
