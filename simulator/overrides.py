"""`--set KEY=VALUE` overrides: dotted keys into a nested mapping, values read as YAML scalars."""
from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

import yaml

from .errors import RlsimError
from .presets import check_expansion, yaml_value


def string_items(value: Any, *, field: str, what: str, example: str) -> list[str]:
    """An API argument that takes one string or a list of them, as a list (a lone string is one item,
    not its letters); anything else, or an item that is not a string, is an RlsimError naming
    ``field`` (``what``: the items, for the message; ``example``: a call that works)."""
    if isinstance(value, str):
        value = [value]
    try:
        items = list(value if value is not None else ())
    except TypeError:
        raise RlsimError(f"{field} must be {what} or a list of them, got {type(value).__name__}", field=field,
                         fix=f"e.g. {example}") from None
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise RlsimError(f"{field} must be {what}, got {bad[0]!r}", field=field, fix=f"e.g. {example}")
    return items


def parse_assignment(item: str) -> tuple[str, Any]:
    """'topology.nodes=16' -> ('topology.nodes', 16)."""
    key, sep, raw = item.partition("=")
    key = _INDEX.sub(r".\1", key.strip())   # a list item as errors name it: failures[0].at_s is failures.0.at_s
    if not sep or not key:
        raise RlsimError(f"cannot read --set {item!r}", field="--set", fix="write KEY=VALUE, e.g. topology.nodes=16")
    if "" in key.split("."):   # `topology..nodes` was blamed on a built-in file ("unknown field ''")
        raise RlsimError(f"--set {item!r}: the key {key!r} has an empty part", field="--set",
                         fix="write the dotted key without a doubled, leading or trailing dot, e.g. topology.nodes=16")
    try:
        value = yaml_value(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        if raw.strip().startswith(tuple(_FLOW_CLOSERS)):   # a list or mapping meant: say what is wrong with it
            raise _unreadable_flow(key, raw.strip(), exc) from None
        value = raw   # not YAML (`@home`): the text as written
    except (RecursionError, ValueError):   # nesting too deep; an integer of more than 4,300 digits
        raise RlsimError(f"cannot read the value of --set {key}", field=key,
                         fix="give a number of a sensible size or a plain value") from None
    check_expansion(value, "--set", key)
    _refuse_colon_without_space(key, raw.strip(), value)
    return key, value


def _refuse_colon_without_space(key: str, raw: str, value: Any) -> None:
    """A flow mapping written without a space after its colons ({dist:uniform,low:1}) is YAML for keys
    'dist:uniform', 'low:1' with no values: refused as that, with the value spaced as the fix (it was
    refused further on as a number that is not one, the mapping meant unsaid)."""
    glued = _glued_key(value)
    if glued is None:
        return
    spaced = re.sub(r",(?=\S)", ", ", re.sub(r"(?<=[\w\]}'\"]):(?=[^\s/])", ": ", raw))
    raise RlsimError(f"YAML reads {raw} as the key {glued!r} with no value (a mapping's colon needs a space "
                     "after it)", field=key, fix=f"write a space after each colon: {spaced}")


def _glued_key(value: Any) -> str | None:
    """The first mapping key inside ``value`` that holds a colon and maps to nothing, or None."""
    if isinstance(value, dict):
        for name, item in value.items():
            if item is None and isinstance(name, str) and ":" in name:
                return name
            found = _glued_key(item)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _glued_key(item)
            if found is not None:
                return found
    return None


# The flow collections a `--set` value may open, by their opening bracket: the bracket closing each.
_FLOW_CLOSERS = {"[": "]", "{": "}"}


def _unclosed(text: str) -> str:
    """The brackets ``text`` leaves open, as the closers that would close them, innermost first
    ('[1, [2' -> ']]'); quotes are not tracked (an error message's guess, not a parser)."""
    stack: list[str] = []
    for char in text:
        if char in _FLOW_CLOSERS:
            stack.append(_FLOW_CLOSERS[char])
        elif stack and char == stack[-1]:
            stack.pop()
    return "".join(reversed(stack))


def _unreadable_flow(key: str, raw: str, exc: yaml.YAMLError) -> RlsimError:
    """The error of a `--set` value that opens a list or mapping YAML cannot read: a bracket left open
    at the end of the value, with the value closed as the fix; any other fault with YAML's own words."""
    what = "list" if raw.startswith("[") else "mapping"
    closers = _unclosed(raw)
    mark = getattr(exc, "problem_mark", None)
    if closers and mark is not None and mark.index >= len(raw):   # the text ended with a bracket open
        return RlsimError(f"the {what} opened with '{raw[0]}' is not closed (no '{closers[-1]}' ends it)",
                          field=key, fix=f"close it: --set '{key}={raw}{closers}'")
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    example = "[1, 2]" if what == "list" else "{a: 1}"
    return RlsimError(f"cannot read the {what} {raw!r}: {problem}", field=key,
                      fix=f"write a YAML flow {what}, e.g. --set '{key}={example}' (a text that starts with a "
                          f"bracket goes in quotes: --set '{key}=\"{raw}\"')")


# What a string given for a section stands for when keys are set under it: `--set schedule=stalesync`
# then `--set schedule.staleness=1` is {kind: stalesync, staleness: 1}, as in a scenario file.
STRING_STANDS_FOR = {"schedule": "kind"}


def set_dotted(mapping: dict[str, Any], key: str, value: Any) -> None:
    """Set mapping['a']['b'] for key 'a.b', making intermediate mappings; a string at an
    intermediate level is a preset name and becomes {'preset': name} (a schedule's string its kind:
    STRING_STANDS_FOR; 'auto', a planned layout, is an error: it has no keys to set)."""
    parts = key.split(".")
    node: Any = mapping
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):   # a list given before (schedule.failures): its items by position
            node = node[_position(node, parts, i, key)]
            if not isinstance(node, (dict, list)):
                raise RlsimError(f"cannot set {key!r}: {'.'.join(parts[:i + 1])!r} is not a mapping", source="--set",
                                 field=key, fix="set the item itself")
            continue
        child = node.get(part)
        if child is None and parts[i + 1].isdigit():   # an item of a list not given: made {'0': ...}, refused
            where = ".".join(parts[:i + 1])            # as 'a valid list' and blamed on the scenario file
            raise RlsimError(f"cannot set {key!r}: {where!r} is not given, so it has no item {parts[i + 1]}",
                             source="--set", field=key, fix=f"set the whole list ({where}=[...])")
        if child is None:
            child = {}
        elif child == "auto":   # a layout the planner chooses: no keys of its own to set
            where = ".".join(parts[:i + 1])
            raise RlsimError(f"cannot set {key!r}: {where!r} is 'auto' (the planner chooses it), not a mapping",
                             source="--set", field=key, fix=f"drop {where}=auto to give the layout's keys, or drop --set {key}")
        elif isinstance(child, str):   # `schedule: stalesync` names a kind, the other sections a preset
            child = {STRING_STANDS_FOR.get(".".join(parts[:i + 1]), "preset"): child}
        elif not isinstance(child, (dict, list)):
            raise RlsimError(f"cannot set {key!r}: {'.'.join(parts[:i + 1])!r} is not a mapping", source="--set",
                             field=key, fix="set the parent key instead")
        node[part] = child
        node = child
    if isinstance(node, list):
        node[_position(node, parts, len(parts) - 1, key)] = value
    else:
        node[parts[-1]] = value


_INDEX = re.compile(r"\[(\d+)\]")


def _position(items: list, parts: list[str], i: int, key: str) -> int:
    """The list position ``parts[i]`` names (a whole number below the list's length)."""
    where = ".".join(parts[:i])
    if not parts[i].isdigit():
        raise RlsimError(f"cannot set {key!r}: {where!r} is a list", source="--set", field=key,
                         fix=f"name an item by its position ({where}.0.KEY), or set the whole list ({where}=[...])")
    position = int(parts[i])
    if position >= len(items):
        raise RlsimError(f"cannot set {key!r}: {where!r} has {len(items)} item(s), none at position {position}",
                         source="--set", field=key, fix=f"set the whole list ({where}=[...]) to add items")
    return position


def refuse_a_key_given_twice(items: Iterable[str], flag: str = "--set") -> None:
    """A command line's ``flag`` items that give one key twice: the last won without a word
    (`--set topology.nodes=1 --set topology.nodes=2` ran 2 nodes, `--set schedule=async --set
    schedule=stalesync` stalesync), so the first was read past; an error naming the key."""
    first: dict[str, str] = {}
    for item in items:
        key = parse_assignment(item)[0]
        if key in first:
            raise RlsimError(f"{flag} {key} is given twice ({first[key]}, then {item}): only the last would apply",
                             source=flag, field=key, fix=f"give {flag} {key}=... once")
        first[key] = str(item)


def apply_overrides(mapping: dict[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """A deep copy of mapping with every KEY=VALUE applied in order. An item that replaces a section
    an earlier item set a key under is an error: it would drop that key without a word
    (`--set schedule.staleness=4 --set schedule=async` ran at async's default staleness)."""
    out = copy.deepcopy(mapping)
    given: list[tuple[str, str]] = []
    for item in items:
        key, value = parse_assignment(item)
        dropped = [earlier for name, earlier in given if name.startswith(key + ".")]
        if dropped:
            raise RlsimError(f"--set {item} replaces {key}, dropping --set {dropped[0]} given before it",
                             source="--set", field=key, fix=f"give --set {item} first, then the keys under {key}")
        set_dotted(out, key, value)
        given.append((key, str(item)))
    return out


def section(items: Iterable[str], prefix: str) -> dict[str, Any]:
    """The overrides under one top-level key: section(['topology.nodes=2'], 'topology') -> {'nodes': 2}."""
    out: dict[str, Any] = {}
    for item in items:
        key, value = parse_assignment(item)
        if key.startswith(prefix + "."):
            set_dotted(out, key[len(prefix) + 1:], value)
    return out
