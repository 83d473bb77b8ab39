"""Where built-in presets live, and turning a name, a path or a mapping into a YAML mapping.

The preset folders sit at the repository root (``topologies/``, ``workloads/``) and are installed
as the data packages ``simulator.builtin.topologies`` / ``simulator.builtin.workloads`` (see
setup.cfg), so ``pip install .`` finds them by name as well as a source checkout does.
"""
from __future__ import annotations

import copy
import importlib.resources
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import RlsimError, one_typo_from

_KINDS = ("topologies", "workloads")
# The repository root when running from a source checkout (the preset folders beside simulator/):
# resolved once, not on each of the two or three preset reads of every load_scenario.
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def preset_dir(kind: str) -> Path:
    """The folder of built-in presets of one kind ('topologies' or 'workloads')."""
    if kind not in _KINDS:
        raise ValueError(f"unknown preset kind {kind!r}")
    source_tree = _SOURCE_ROOT / kind
    if source_tree.is_dir():
        return source_tree
    return Path(str(importlib.resources.files(f"simulator.builtin.{kind}")))


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in preset_dir(kind).glob("*.yaml"))


# Parsed YAML mappings of files by their text (at most this many, text up to _PARSED_MAX_CHARS
# each): every load_scenario reads its topology and workload presets, and parsing them was ~1 ms of
# a seed step. Keyed by the whole text, so an edited file is parsed again; a speed knob only.
_PARSED_MAX_ENTRIES = 64
_PARSED_MAX_CHARS = 1 << 16
_parsed: dict[str, dict[str, Any]] = {}


def read_yaml(path: str | Path, *, what: str = "file", fix: str = "check the path") -> dict[str, Any]:
    """Read one YAML mapping (a fresh copy, the caller's to change); errors name the file (and
    `fix` says how to get a good one)."""
    path = Path(path)
    text = read_text(path, what=what, fix=fix)
    parsed = _parsed.get(text)
    if parsed is None:
        parsed = load_yaml_text(text, source=str(path))
        if not isinstance(parsed, dict):
            empty = parsed is None   # an empty or comment-only file
            raise RlsimError("the file is empty (no keys)" if empty else
                             f"expected a YAML mapping at the top level (key: value lines), got {type(parsed).__name__}",
                             source=str(path), fix=f"give the {what}'s keys as key: value lines" if empty else
                             "write key: value lines at the top level, not a list or a lone value")
        if len(text) <= _PARSED_MAX_CHARS:
            if len(_parsed) >= _PARSED_MAX_ENTRIES:
                _parsed.clear()
            _parsed[text] = copy.deepcopy(parsed)
        return parsed
    return copy.deepcopy(parsed)


def read_text(path: str | Path, *, what: str = "file", fix: str = "check the path") -> str:
    """A file's text as UTF-8; unreadable or not UTF-8 is an RlsimError naming the file."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RlsimError(f"cannot read {what}: {exc.strerror}", source=str(path), fix=fix) from None
    except UnicodeDecodeError as exc:
        raise RlsimError(f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=str(path),
                         fix="save the file as UTF-8") from None


# libyaml's safe loader where PyYAML was built with it: the same documents, ~7x faster to parse
# (the presets were 14% of a seed step).
class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader with YAML 1.2's exponent floats: PyYAML (YAML 1.1) reads `9e-1`, `1e9` or
    `1.5e3` (no point, or no exponent sign) as strings, which a number field then refused as "not a number" while
    pydantic's fields took them. The subclass keeps PyYAML's own loaders unchanged."""


def _construct_mapping_once(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A mapping whose keys are given once: PyYAML keeps the last of a repeated key and drops the
    first without a word (a second `data:` block replaced the whole first one). Keys a `<<` merge
    brings in may be overridden, as YAML means them."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark,
                f"key {key!r} is given twice (first at line {seen[key] + 1}): the first would be dropped",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


def _mapping_value(loader: Any, node: yaml.MappingNode) -> Any:
    """SafeConstructor.construct_yaml_map (a generator: the mapping first, filled after, for
    recursive structures) with the repeated-key check."""
    data: dict[Any, Any] = {}
    yield data
    data.update(_construct_mapping_once(loader, node))


_SafeLoader.add_constructor("tag:yaml.org,2002:map", _mapping_value)


_SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"))
_SAFE_LOADER = _SafeLoader


def yaml_value(text: str) -> Any:
    """One YAML scalar or flow value (a `--set` item's value, a framework override's) with the
    loader of the files."""
    return yaml.load(text, Loader=_SAFE_LOADER)


def load_yaml_text(text: str, *, source: str, field: str | None = None) -> Any:
    """YAML text to data; syntax errors, nesting too deep to read and numbers Python refuses
    (integers of more than 4,300 digits) are RlsimErrors naming the source."""
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        tab = "\t" in text and "cannot start any token" in str(exc)   # YAML indents with spaces only
        raise RlsimError(f"not valid YAML: {_yaml_problem(exc)}", source=source, field=field,
                         fix="indent with spaces: YAML does not take tabs" if tab else
                         "correct the YAML syntax at that line") from None
    except RecursionError:
        raise RlsimError("YAML nested too deep to read", source=source, field=field,
                         fix="flatten the structure (a scenario needs a few levels)") from None
    except ValueError as exc:   # int() of a number with more than sys.get_int_max_str_digits() digits
        raise RlsimError(f"a value cannot be read: {exc}", source=source, field=field,
                         fix="give numbers of a sensible size") from None
    check_expansion(data, source, field)
    return data


# YAML aliases (*name) share one object; copying, validating or writing the data expands every use.
# A 467-byte "billion laughs" file expands to billions of nodes (2 GB written in 25 s, issue 14).
# Scenarios, presets and framework configs are a few hundred to a few thousand nodes.
MAX_EXPANDED_NODES = 1_000_000


def check_expansion(data: Any, source: str, field: str | None) -> None:
    """Refuse data whose aliases expand past MAX_EXPANDED_NODES, and an alias inside itself (a
    recursive structure: every later copy or comparison recurses without end)."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_ids:
            raise RlsimError("a YAML alias refers to a structure that contains it", source=source, field=field,
                             fix="write the values out instead of the recursive alias")
        open_ids.add(key)
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(child) for child in children)
        open_ids.discard(key)
        sizes[key] = total
        return total

    try:
        total = size(data)
    except RecursionError:
        raise RlsimError("YAML nested too deep to read", source=source, field=field,
                         fix="flatten the structure (a scenario needs a few levels)") from None
    if total > MAX_EXPANDED_NODES:
        raise RlsimError(f"the YAML expands to {total:,} values (aliases repeat their anchors), past "
                         f"{MAX_EXPANDED_NODES:,}", source=source, field=field,
                         fix="write the values out instead of nesting aliases; a scenario is a few hundred values")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """'line 2, column 1: expected the node content, but found ...' (PyYAML's own text names a
    '<unicode string>' instead of the file, and spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _singular(kind: str) -> str:
    """'topologies' -> 'topology', 'workloads' -> 'workload' (for messages and field names)."""
    return kind[:-3] + "y" if kind.endswith("ies") else kind.removesuffix("s")


def resolve(kind: str, spec: str | Path | dict[str, Any], field: str | None = None) -> tuple[dict[str, Any], str]:
    """A preset name, a file path or a mapping -> (mapping, source label for error messages).
    ``field``: where the name was written, for its errors (`workload.preset`; default the section)."""
    field = field or _singular(kind)
    if isinstance(spec, dict):
        return dict(spec), f"<{_singular(kind)} mapping>"
    text = str(spec)
    if not text.strip():   # Path("") is the current folder: "cannot read file: Is a directory"
        raise RlsimError(f"empty {_singular(kind)} name", field=field,
                         fix=f"give a preset name ({', '.join(preset_names(kind))}) or a path to a YAML file")
    candidate = Path(text)
    # a file of that name, not a folder (an --out folder named after a preset is not the preset)
    if candidate.suffix in (".yaml", ".yml", ".json") or candidate.is_file():
        if not candidate.exists():
            raise RlsimError("file not found", source=text, fix="check the path")
        mapping = read_yaml(candidate)
        if kind in ("topologies", "workloads") and "preset" in mapping:   # was dropped or three errors
            one = _singular(kind)
            raise RlsimError(f"a {one} file does not take preset: (a scenario's {one} mapping does)", source=str(candidate),
                             field="preset", fix=f"write it in the scenario as {one}: {{preset: {mapping['preset']}, "
                                                 "...} (the keys beside it lay over the preset), or copy the "
                                                 "preset's keys into this file")
        return mapping, str(candidate)
    builtin = preset_dir(kind) / f"{text}.yaml"
    if builtin.exists():
        return read_yaml(builtin), f"{kind}/{text}.yaml"
    names = ", ".join(preset_names(kind)) or "(none)"
    raise RlsimError(f"unknown {_singular(kind)} preset {text!r}{one_typo_from(text, preset_names(kind))}",
                     field=field,
                     fix=f"use one of: {names}, or a path to a YAML file")
