"""Files a sweep depends on: the referenced-file digest of the resume key, and a results CSV reader
that never crashes on a damaged or foreign file.

``referenced_files`` walks the inputs of a sweep (the scenario file, ``--workload`` / ``--topology``,
``--set`` values, grid values) for strings that name existing files, and follows YAML / JSON files
into the files they name (``model: config.json``, ``device_profile:``, empirical length files), so
an edit to any of them changes the point ids that depend on it and nothing else.

``read_results_csv`` reads the results file with the csv module (no type guessing across rows, so
integer columns stay integers), checks every row, and says which line is broken and how to recover.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RlsimError

_PARSED_SUFFIXES = (".yaml", ".yml", ".json")
MAX_REFERENCED_FILES = 256          # a guard against a scenario that names thousands of files
MAX_PARSED_BYTES = 8 * 1024 * 1024  # larger files are hashed, not searched for further references
_MAX_REFERENCE_LENGTH = 1024


# --------------------------------------------------------------------------- referenced files

def referenced_files(values: Iterable[Any], base_dirs: Sequence[Path] = ()) -> dict[str, str]:
    """{path as found: sha256 of its bytes} for every string in `values` (nested mappings and lists
    too; 'KEY=VALUE' items are split) naming an existing file, relative to the working folder or one
    of `base_dirs`, and, transitively, for the files that YAML / JSON files among them name."""
    found: dict[str, str] = {}
    queue: list[tuple[Any, tuple[Path, ...]]] = [(v, tuple(base_dirs)) for v in values]
    seen_files: set[Path] = set()
    while queue and len(found) < MAX_REFERENCED_FILES:
        value, dirs = queue.pop(0)
        for text in _strings(value):
            for path in _candidates(text, dirs):
                resolved = path.resolve()
                if resolved in seen_files:
                    continue
                seen_files.add(resolved)
                digest, content = _digest(path)
                if digest is None:
                    continue
                found[str(path)] = digest
                if content is not None:
                    queue.append((content, (resolved.parent,)))
    return dict(sorted(found.items()))


def _strings(value: Any) -> list[str]:
    """Every string in a tree (shared sub-trees, as YAML aliases make, are visited once)."""
    out: list[str] = []
    stack, visited = [value], set()
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if id(item) in visited:
                continue
            visited.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
            if isinstance(item, dict):
                stack.extend(k for k in item if isinstance(k, str))
        elif isinstance(item, str):
            out.append(item)
            key, sep, rest = item.partition("=")
            if sep and rest:
                out.append(rest.strip().strip("'\""))
    return out


def _candidates(text: str, dirs: Sequence[Path]) -> list[Path]:
    if not text or len(text) > _MAX_REFERENCE_LENGTH or "\n" in text or "\x00" in text:
        return []
    out = []
    # '~/x.yaml' as the loaders read it (hardware/profiles.py, paths.py expand the user): unexpanded it
    # named no file, so its contents were left out of the point id and a resume served stale rows
    for path in [_user_expanded(Path(text)), *(d / text for d in dirs)]:
        try:
            if path.is_file():
                out.append(path)
            elif path.is_dir() and (path / "config.json").is_file():   # a model named by its folder
                out.append(path / "config.json")
        except (OSError, ValueError):
            continue
    out.extend(_preset_files(text))
    return out


def _user_expanded(path: Path) -> Path:
    try:
        return path.expanduser()
    except RuntimeError:   # '~nobody/x': no such user, so no file (as the loaders find none)
        return path


def _preset_files(text: str) -> list[Path]:
    """A built-in preset name ('dgx-h100') stands for its YAML file (edited in a source checkout)."""
    if "/" in text or "\\" in text or text.startswith("."):
        return []
    from .presets import preset_dir
    out = []
    for kind in ("topologies", "workloads"):
        try:
            path = preset_dir(kind) / f"{text}.yaml"
            if path.is_file():
                out.append(path)
        except (OSError, ValueError):
            continue
    return out


def _digest(path: Path) -> tuple[str | None, Any]:
    """(sha256 hex, parsed content if it may name further files); (None, None) if unreadable."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, None
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix.lower() not in _PARSED_SUFFIXES or len(data) > MAX_PARSED_BYTES:
        return digest, None
    try:
        import yaml
        return digest, yaml.safe_load(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - any unreadable content is reported by the loader; here it only adds no references
        return digest, None


# --------------------------------------------------------------------------- results CSV

@dataclass(frozen=True)
class BrokenTail:
    """The last row of a results file cannot be read: `offset` is where it starts (bytes)."""

    line: int
    offset: int
    reason: str


_POINT_ID = re.compile(r"[0-9a-f]{16}")
_INT = re.compile(r"[+-]?\d{1,300}")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan|infinity)", re.IGNORECASE)
_SURROGATE = re.compile("[\udc80-\udcff]")


def read_results_csv(path: Path, *, required: Sequence[str], text_columns: Sequence[str]
                     ) -> tuple[list[str], list[dict[str, Any]], BrokenTail | None]:
    """(header, rows, broken tail) of a results CSV.

    A last line with no newline is a write cut by a kill (not a finished point) and is left out
    silently. A last row that is broken otherwise is returned as `BrokenTail` (the caller warns and
    drops it); a broken row before the last, or a header without the `required` columns (a foreign
    CSV), is an RlsimError naming the file, the line and the fix. Cells are read as int, float or
    bool where they look like one, else text (`text_columns` always text); empty cells are None.
    """
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    data = data[:end]
    if not data.strip():
        return [], [], None
    line_offsets = [0] + [m.end() for m in re.finditer(b"\n", data)]
    records = _records(data.decode("utf-8", errors="surrogateescape"))
    header_line, header, header_problem = records[0]
    if header_problem or _SURROGATE.search("".join(header)) or not set(required) <= set(header):
        missing = ", ".join(c for c in required if c not in header)
        raise RlsimError(f"line 1 is not the header of an rlsim sweep results file (no {missing or 'readable'} "
                         "column)", source=str(path),
                         fix="give --out a folder of its own, or move this file away and run again")
    rows: list[dict[str, Any]] = []
    for index, (line, fields, problem) in enumerate(records[1:], start=1):
        problem = problem or _row_problem(header, fields)
        if problem:
            if index == len(records) - 1 and line == len(line_offsets) - 1:  # one physical line, the last
                return header, rows, BrokenTail(line, line_offsets[line - 1], problem)
            raise RlsimError(f"line {line} is broken ({problem})", source=str(path),
                             fix=f"delete line {line} of {path} (that point is computed again) and run the same "
                                 "command; or give --out a new folder")
        rows.append({name: _cell(name, text, text_columns) for name, text in zip(header, fields, strict=True)})
    return header, rows, None


def _records(text: str) -> list[tuple[int, list[str], str]]:
    """(first line number, fields, problem) per CSV record; a quoting error ends the reading. A field
    may be as long as the file (a long run's summary_json and critical path: ~2.4 KB an iteration,
    past the csv module's 131,072-character default at ~55 iterations, which lost every row)."""
    reader = csv.reader(io.StringIO(text), strict=True)
    out: list[tuple[int, list[str], str]] = []
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))   # the module's limit is global: restored below
    try:
        while True:
            line = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return out
            except csv.Error as exc:
                out.append((line, [], f"unreadable CSV: {exc}"))
                return out
            if fields:
                out.append((line, fields, ""))
    finally:
        csv.field_size_limit(limit)


def _row_problem(header: Sequence[str], fields: Sequence[str]) -> str:
    if len(fields) != len(header):
        return f"{len(fields)} fields where the header has {len(header)}"
    row = dict(zip(header, fields, strict=True))
    if _SURROGATE.search("".join(fields)):
        return "bytes that are not UTF-8"
    if "point_id" in row and not _POINT_ID.fullmatch(row["point_id"]):
        return f"point_id {row['point_id'][:40]!r} is not a point id"
    summary = row.get("summary_json", "")
    if summary:
        try:
            if not isinstance(json.loads(summary), dict):
                return "summary_json is not a JSON object"
        except ValueError:
            return "summary_json is not complete JSON"
    return ""


def _cell(name: str, text: str, text_columns: Sequence[str]) -> Any:
    if name in text_columns:
        return text
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        value = float(text)
        # digits past a float's range are kept as written, not read as infinity
        return text if value in (float("inf"), float("-inf")) and "inf" not in text.lower() else value
    return text


def quarantine_tail(path: Path, tail: BrokenTail) -> Path:
    """Move a broken last row out of the results file into FILE.broken (kept, not deleted)."""
    data = path.read_bytes()
    aside = path.with_name(path.name + ".broken")
    with open(aside, "ab") as fh:
        fh.write(data[tail.offset:])
    with open(path, "r+b") as fh:
        fh.truncate(tail.offset)
    return aside


def warn(message: str) -> None:
    print(f"rlsim: warning: {message}", file=sys.stderr)
