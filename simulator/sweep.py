"""Parameter sweeps: grid expansion, executors (local process pool, Dask), a resumable results file.

A sweep is a list of points (one value per grid key) evaluated by a *point function*
``evaluate(values) -> summary dict``. The runner takes that function as an argument, so tests
inject a fake and the CLI injects :func:`simulate_point` (the real simulator).

Resumability: every finished point is written to the results file the moment it finishes
(CSV: one appended, fsync'ed line; Parquet: an atomic rewrite through ``os.replace``), keyed by a
point id that hashes the base scenario and the point's values. Re-running skips ids already in
the file, so Ctrl-C or a killed worker loses no finished point. When a sweep completes, the file
is rewritten sorted by point id, so the same sweep gives the same bytes however the workers raced.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import importlib
import io
import itertools
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from .atomic import replace_durably
from .errors import RlsimError
from .overrides import parse_assignment
from .sweep_files import BrokenTail, quarantine_tail, read_results_csv, referenced_files, warn
from .units import plain_values

PointFunction = Callable[[dict[str, Any]], dict[str, Any]]
PointCost = Callable[[Mapping[str, Any]], float]   # a point's values -> its estimated cost (any unit)

# Columns every results row carries besides the flattened summary and the grid values.
ID_COLUMN = "point_id"
INDEX_COLUMN = "point_index"
BASE_COLUMN = "base_fingerprint"   # the base scenario's fingerprint: rows of several sweeps in one file tell apart
ERROR_COLUMN = "error"
JSON_COLUMN = "summary_json"
GRID_PREFIX = "grid."


class SweepAborted(RuntimeError):
    """The sweep stopped before every point finished (a worker died); finished points are saved."""


# --------------------------------------------------------------------------- grid

def _value_identity(value: Any) -> str:
    """What makes two grid values the same setting: numbers by value (1 and 1.0 ran the same point
    twice), anything else by its JSON text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return json.dumps(value, sort_keys=True, default=str)


def parse_grid(items: Iterable[str]) -> dict[str, list[Any]]:
    """['schedule.kind=colocated,stalesync', 'topology.supernodes=1,2'] -> ordered {key: [values]}.

    Each value is read as a YAML scalar (as `--set` does): '2' -> 2, '0.5' -> 0.5, 'true' -> True.
    """
    from .overrides import string_items
    grid: dict[str, list[Any]] = {}
    for item in string_items(items, field="--grid", what="KEY=V1,V2 items",   # one string is one item, not letters
                             example="parse_grid(['topology.nodes=1,2'])"):
        key, raw = _split_grid_item(item)
        values = [_yaml_scalar(v, key) for v in _split_values(raw)]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise RlsimError(f"--grid {item!r} has a value that is not a finite number", source="--grid",
                             field=key,
                             fix="give finite numbers (.inf / .nan are no setting of a scenario key)")
        if not values or any(v == "" for v in values):
            raise RlsimError(f"--grid {item!r} has an empty value", source="--grid", field=key,
                             fix="write KEY=V1,V2,... with no empty entries")
        if key in grid:
            raise RlsimError(f"--grid names {key!r} twice", source="--grid", field=key,
                             fix="give each key once with all its values")
        if len({_value_identity(v) for v in values}) != len(values):
            raise RlsimError(f"--grid {item!r} repeats a value", source="--grid", field=key, fix="list each value once")
        grid[key] = values
    return grid


def _split_grid_item(item: str) -> tuple[str, str]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise RlsimError(f"cannot read --grid {item!r}", field="--grid",
                         fix="write KEY=V1,V2,..., e.g. --grid topology.supernodes=1,2,4")
    parse_assignment(f"{key}=0")  # same key rules as --set
    return key, raw


def _split_values(raw: str) -> list[str]:
    """Split on commas outside brackets and YAML quotes, so a value may be a YAML list or mapping
    ('[1,2]') or a quoted text with a comma ("'a, b'"; split there, it gave two values)."""
    out, depth, current, i = [], 0, "", 0
    while i < len(raw):
        ch = raw[i]
        if ch in "'\"" and current.rstrip()[-1:] in ("", "[", "{", ",", ":"):   # a quote opens a scalar
            end = _quoted_end(raw, i)
            current, i = current + raw[i:end], end
            continue
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    out.append(current.strip())
    return out


def _quoted_end(raw: str, start: int) -> int:
    """The index after the YAML quoted scalar opening at ``start`` ('' escapes a single quote, a
    backslash a double quote's next letter); the text's end where it is not closed (YAML says why)."""
    quote, i = raw[start], start + 1
    while i < len(raw):
        if quote == '"' and raw[i] == "\\":
            i += 2
            continue
        if raw[i] == quote:
            if quote == "'" and raw[i + 1:i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    return len(raw)


def _yaml_scalar(raw: str, key: str) -> Any:
    return parse_assignment(f"{key}={raw}")[1]   # as --set reads it (bounds included)


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product, first key slowest, in the order given."""
    for key, values in grid.items():   # a string's letters were taken as its values ('12' -> '1', '2')
        if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):   # a numpy array is fine
            raise RlsimError(f"the values of {key!r} must be a list, got {values!r}", field=str(key),
                             fix=f"e.g. {{{key!r}: [1, 2]}}")
    columns = {key: list(values) for key, values in grid.items()}   # an iterator is read once
    for key, values in columns.items():
        _refuse_empty_or_repeated(str(key), values)
    keys = list(columns)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(columns[k] for k in keys))]


def _refuse_empty_or_repeated(key: str, values: list[Any]) -> None:
    """A grid key with no values (no point at all) or one setting twice (two points of one id, or 1 and
    1.0: one setting simulated twice), refused from Python as parse_grid refuses them."""
    if not values:
        raise RlsimError(f"the grid key {key!r} has no values: the grid would have no point", source="grid",
                         field=key, fix=f"give it one value or more, e.g. {{{key!r}: [1, 2]}}, or leave it out")
    seen: dict[str, Any] = {}
    for value in plain_values(values):
        identity = _value_identity(value)
        if identity in seen:
            same = seen[identity]
            raise RlsimError(f"the grid key {key!r} repeats a value ({same!r} and {value!r} are one setting)",
                             source="grid", field=key, fix="list each value once")
        seen[identity] = value


def grid_overrides(values: Mapping[str, Any]) -> list[str]:
    """A point as `--set` items; JSON is valid YAML, so each value reads back unchanged."""
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def point_id(values: Mapping[str, Any], base_fingerprint: str = "",
             files: Mapping[str, str] | None = None) -> str:
    """A stable id of (base scenario, point values, contents of the files the values name): the key
    that makes a sweep resumable."""
    payload: dict[str, Any] = {"base": base_fingerprint, "values": dict(values)}
    if files:
        payload["files"] = dict(files)
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Point:
    index: int
    values: dict[str, Any]
    id: str
    base: str = ""   # the base scenario's fingerprint (BASE_COLUMN)


def make_points(grid: Mapping[str, Sequence[Any]], base_fingerprint: str = "",
                base_dirs: Sequence[Path] | None = None) -> list[Point]:
    return points_from_values(expand_grid(grid), base_fingerprint, base_dirs)


def points_from_values(values: Iterable[Mapping[str, Any]], base_fingerprint: str = "",
                       base_dirs: Sequence[Path] | None = None) -> list[Point]:
    """Points from an explicit list (keys that move together, e.g. devices and batch for weak scaling).

    With `base_dirs` (the folders relative paths are read from), a value naming a file (a model
    config.json, a topology YAML) puts that file's contents into the point's id."""
    cache: dict[str, dict[str, str]] = {}

    def files_of(v: Mapping[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for value in v.values():
            key = json.dumps(value, sort_keys=True, default=str)
            if key not in cache:
                cache[key] = referenced_files([value], base_dirs or ())
            out.update(cache[key])
        return out

    if isinstance(values, Mapping) or not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
        raise RlsimError(f"points_from_values takes a list of mappings, one a point, got {type(values).__name__}",
                         field="values", fix=POINT_VALUES_FIX)
    # numpy values (expand_grid over np.arange) as the Python values they hold: one id, JSON-able
    values = [plain_values(point_values(v)) for v in values]
    points = [Point(i, dict(v), point_id(v, base_fingerprint, files_of(v) if base_dirs is not None else None),
                    base_fingerprint) for i, v in enumerate(values)]
    refuse_repeated_points(points)
    return points


def refuse_repeated_points(points: Sequence[Point]) -> None:
    """Two points of one id (the same values over the same base) were both computed, and the sweep's
    result kept one row of the two: refused, naming both."""
    first: dict[str, int] = {}
    for point in points:
        earlier = first.setdefault(point.id, point.index)
        if earlier != point.index:
            raise RlsimError(f"points {earlier} and {point.index} are one point (the same values "
                             f"{json.dumps(point.values, sort_keys=True, default=str)} over the same base): "
                             "a sweep runs each point once", source="points", field="values",
                             fix="list each point once")


POINT_VALUES_FIX = "give each point's values as a mapping, e.g. [{'topology.nodes': 2}, {'topology.nodes': 4}]"


def point_values(values: Any) -> Mapping[str, Any]:
    """A point's values: a mapping of dotted key -> value (a list of pairs raised from inside)."""
    if not isinstance(values, Mapping):
        raise RlsimError(f"a point's values are a mapping of dotted key -> value, got {type(values).__name__} "
                         f"{values!r}", field="values", fix=POINT_VALUES_FIX)
    return values


# --------------------------------------------------------------------------- rows

def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'staleness': {'max': 1}} -> {'staleness.max': 1}; lists become JSON text."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, default=_json_default)
        else:
            out[name] = value
    return out


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


# Summary keys kept out of the results file's flat columns (still whole in summary_json): the
# critical path's per-step segments grow with the iterations (2.4 KB a step, a cell of 240 KB at
# 100 steps) and read as one JSON text in a spreadsheet.
NOT_FLATTENED = frozenset({"critical_path.steps"})


def make_row(point: Point, summary: Mapping[str, Any] | None, error: str = "") -> dict[str, Any]:
    """One results row: id, index, grid values, flattened summary, error text, and the exact summary JSON."""
    row: dict[str, Any] = {ID_COLUMN: point.id, INDEX_COLUMN: point.index}
    if point.base:
        row[BASE_COLUMN] = point.base
    for key, value in point.values.items():
        row[GRID_PREFIX + key] = json.dumps(value) if isinstance(value, (list, dict)) else value
    row.update({k: v for k, v in flatten(summary or {}).items() if k not in NOT_FLATTENED})
    row[ERROR_COLUMN] = error
    row[JSON_COLUMN] = json.dumps(dict(summary or {}), sort_keys=True, default=_json_default)
    return row


def row_to_run_object(row: Mapping[str, Any], grid_keys: Sequence[str]) -> dict[str, Any]:
    """A results row back to the `sweep --json` object: the run summary plus `grid` (and each grid
    value under its dotted key, unless that would shadow a summary key)."""
    summary = json.loads(row[JSON_COLUMN]) if isinstance(row.get(JSON_COLUMN), str) and row[JSON_COLUMN] else {}
    grid = {k: _restore(row.get(GRID_PREFIX + k)) for k in grid_keys}
    out = dict(summary)
    for key, value in grid.items():
        out.setdefault(key, value)
    out["grid"] = grid
    err = row.get(ERROR_COLUMN)
    if isinstance(err, str) and err:
        out["error"] = err
    return out


def _restore(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


# --------------------------------------------------------------------------- results file

class ResultsStore:
    """The results file (CSV or Parquet) that makes a sweep resumable.

    ``append(row)`` makes the row durable before it returns. Rows may have different columns
    (grid keys differ between sweeps sharing a folder; error rows have no summary).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".csv", ".parquet"):
            raise RlsimError(f"unknown results file type {suffix!r}", source=str(self.path),
                             fix="use a .csv or .parquet file name")
        self.format = suffix[1:]
        self._rows: list[dict[str, Any]] | None = None
        self._warned_tail: BrokenTail | None = None
        self._tail_checked = False

    # reading -----------------------------------------------------------------
    def read(self) -> pd.DataFrame:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame()
        if self.format == "parquet":
            return self._read_parquet()
        header, rows, tail = self._read_csv()
        self._tail_checked = False  # the file may have been changed by another hand since
        if tail is not None and tail != self._warned_tail:
            self._warned_tail = tail
            warn(f"{self.path} line {tail.line} is an unfinished row ({tail.reason}); it is left out and "
                 f"moved to {self.path.name}.broken when the next point is saved (that point is computed again)")
        if not header:
            return pd.DataFrame()
        return pd.DataFrame(rows, columns=header, dtype=object)

    def _read_csv(self) -> tuple[list[str], list[dict[str, Any]], BrokenTail | None]:
        try:
            return read_results_csv(self.path, required=(ID_COLUMN, INDEX_COLUMN, JSON_COLUMN),
                                    text_columns=(ID_COLUMN, ERROR_COLUMN, JSON_COLUMN))
        except OSError as exc:
            raise RlsimError(f"cannot read the results file: {exc.strerror}", source=str(self.path),
                             fix="check its permissions, or give --out another folder") from None

    def _read_parquet(self) -> pd.DataFrame:
        try:
            frame = pd.read_parquet(self.path)
        except ImportError:
            raise RlsimError("writing Parquet needs pyarrow", source=str(self.path),
                             fix="pip install pyarrow, or use --format csv") from None
        except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a damaged file have no common base
            raise RlsimError(f"cannot read the results file: {exc}", source=str(self.path),
                             fix="move it away (finished points in it are then computed again), "
                                 "or give --out another folder") from None
        if ID_COLUMN not in frame or JSON_COLUMN not in frame:
            raise RlsimError(f"not an rlsim sweep results file (no {ID_COLUMN!r} column)", source=str(self.path),
                             fix="give --out a folder of its own, or move this file away and run again")
        return frame

    def done_ids(self) -> set[str]:
        frame = self.read()
        if frame.empty or ID_COLUMN not in frame:
            return set()
        return set(frame[ID_COLUMN].astype(str))

    def sibling(self) -> ResultsStore:
        """The results file of the other format in the same folder (results.csv <-> results.parquet)."""
        other = ".parquet" if self.format == "csv" else ".csv"
        return ResultsStore(self.path.with_suffix(other))

    def carry_over(self, points: Sequence[Point]) -> int:
        """Copy the rows of `points` that the folder's results file of the other format holds and this
        one lacks (a sweep run again with the other --format), each rebuilt from its summary JSON so
        the columns take this format's types: no finished point is computed again. The other file is
        left as it is. Returns the number of rows copied."""
        sibling = self.sibling()
        if not sibling.path.exists():
            return 0
        done = self.done_ids()
        wanted = {p.id: p for p in points if p.id not in done}
        try:
            frame = sibling.read() if wanted else pd.DataFrame()
        except RlsimError as exc:   # a damaged file of the other format: not this sweep's (it blocked it)
            warn(f"{sibling.path.name} beside {self.path.name} cannot be read ({exc.message}): left out, "
                 "its points (if any) are computed again")
            return 0
        if frame.empty or ID_COLUMN not in frame:
            return 0
        rows = [_rebuilt_row(wanted[str(r[ID_COLUMN])], r) for r in
                frame.drop_duplicates(ID_COLUMN, keep="last").to_dict("records") if str(r[ID_COLUMN]) in wanted]
        if self.format == "csv":
            for row in rows:
                self.append(row)
        elif rows:
            self._write_parquet(pd.DataFrame(self._cached_rows() + rows))
            self._rows = None
        return len(rows)

    # writing -----------------------------------------------------------------
    def append(self, row: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)   # the API's store in a new folder: no point lost
        if self.format == "csv":
            self._append_csv(row)
        else:
            rows = self._cached_rows()
            rows.append(dict(row))
            self._write_parquet(pd.DataFrame(rows))

    def finalize(self, index_of: Mapping[str, int] | None = None) -> None:
        """Rewrite the file sorted by point id (atomic), so a finished sweep's bytes do not depend on
        which worker finished first. ``index_of``: this sweep's point ids -> their place in its grid,
        written over the index a row was saved with (an extended or reordered grid moves them)."""
        frame = self.read()
        if frame.empty:
            return
        frame = frame.drop_duplicates(ID_COLUMN, keep="last").sort_values(ID_COLUMN, kind="stable")
        if index_of:
            ids = frame[ID_COLUMN].astype(str)
            frame[INDEX_COLUMN] = [index_of.get(pid, old) for pid, old in zip(ids, frame[INDEX_COLUMN], strict=True)]
        frame = frame[_canonical_columns(frame.columns)].reset_index(drop=True)
        if self.format == "csv":
            tmp = self.path.with_name(self.path.name + ".tmp")
            frame.to_csv(tmp, index=False, lineterminator="\n")
            replace_durably(tmp, self.path)
        else:
            self._write_parquet(frame)
        self._rows = None

    def _append_csv(self, row: Mapping[str, Any]) -> None:
        _truncate_partial_line(self.path)
        self._drop_broken_tail()
        header = _csv_header(self.path)
        if header is not None and set(row) - set(header):
            # New columns (a different grid or a first successful row after errors): rewrite once.
            frame = pd.concat([self.read(), pd.DataFrame([dict(row)], dtype=object)], ignore_index=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            frame.to_csv(tmp, index=False, lineterminator="\n")
            replace_durably(tmp, self.path)
            return
        columns = header if header is not None else list(row)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if header is None:
            writer.writerow(columns)
        writer.writerow(["" if row.get(c) is None else row.get(c, "") for c in columns])
        with open(self.path, "a", newline="") as fh:
            fh.write(buffer.getvalue())  # one write: a crash leaves at most one partial last line
            fh.flush()
            os.fsync(fh.fileno())

    def _drop_broken_tail(self) -> None:
        """A broken last row (a cut write) would sit in the middle once a row follows it: move it aside."""
        if self._tail_checked or not self.path.exists():
            return
        self._tail_checked = True  # later rows are this process's own whole lines
        _, _, tail = self._read_csv()
        if tail is not None:
            quarantine_tail(self.path, tail)

    def _cached_rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = self.read().to_dict("records")
        return self._rows

    def _write_parquet(self, frame: pd.DataFrame) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            _parquet_safe(frame).to_parquet(tmp, index=False)
        except ImportError:
            raise RlsimError("writing Parquet needs pyarrow", source=str(self.path),
                             fix="pip install pyarrow, or use --format csv") from None
        replace_durably(tmp, self.path)


def _rebuilt_row(point: Point, stored: Mapping[str, Any]) -> dict[str, Any]:
    """A row read back from a results file (CSV cells are text) made again from its summary JSON."""
    text = stored.get(JSON_COLUMN)
    summary = json.loads(text) if isinstance(text, str) and text else {}
    error = stored.get(ERROR_COLUMN)
    return make_row(point, summary or None, error if isinstance(error, str) else "")


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns that mix value types (a grid of `0,true`), hold lists / mappings or integers
    past 64 bits (a grid value of 1e30 written as digits) become their JSON text, as the CSV file
    writes them: a Parquet column has one type, its integers 64 bits."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype != object:
            continue
        values = [v for v in out[column] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        kinds = {type(v) for v in values}
        huge = any(isinstance(v, int) and not -2**63 <= v < 2**63 for v in values)
        if len(kinds) > 1 or kinds & {list, dict, tuple} or huge:
            out[column] = [v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)
                           for v in out[column]]
    return out


def _canonical_columns(columns: Iterable[str]) -> list[str]:
    """Column order that does not depend on which row arrived first."""
    columns = list(columns)
    head = [c for c in (ID_COLUMN, INDEX_COLUMN, BASE_COLUMN) if c in columns]
    tail = [c for c in (ERROR_COLUMN, JSON_COLUMN) if c in columns]
    grid = sorted(c for c in columns if c.startswith(GRID_PREFIX))
    rest = sorted(c for c in columns if c not in head + tail + grid)
    return head + grid + rest + tail


def _csv_header(path: Path) -> list[str] | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, newline="") as fh:
        first = fh.readline()
    if not first.endswith("\n"):
        return None
    return next(csv.reader([first]))


def _truncate_partial_line(path: Path) -> None:
    """Drop a last line left half-written by a killed process, so the next row starts clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


# --------------------------------------------------------------------------- executors

def _evaluate_safely(evaluate: PointFunction, values: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Run one point; a user-caused error (a layout that does not fit) becomes the row's error,
    because re-running would give the same answer."""
    try:
        return dict(evaluate(values)), ""
    except RlsimError as exc:
        return None, str(exc)


WATCHDOG_PERIOD_S = 0.5
_PR_SET_PDEATHSIG = 1


# What the real point function (simulate_point) imports: a worker loads it once, when it starts,
# not inside its first point (benchmarks/bench_sweep.py measures both).
POINT_MODULES = ("simulator.api",)


def _worker_init(parent_pid: int, preload: Sequence[str] = ()) -> None:
    """Initializer of each local pool worker: Ctrl-C is left to the parent (which saves what
    finished and stops the pool), and the worker dies with its parent however that one ends
    (SIGKILL included): the kernel's parent-death signal on Linux, and a watchdog thread that
    polls the parent's pid everywhere (a worker must never outlive the sweep and spin on).
    Then the modules in `preload` are imported, once per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker must not inherit the parent's handler
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="rlsim-parent-watchdog", daemon=True).start()
    _preload(preload)


def _preload(modules: Sequence[str]) -> None:
    for name in modules:
        importlib.import_module(name)


def _set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watchdog alone
        pass


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        if os.getppid() != parent_pid:
            os._exit(1)


class Executor(Protocol):
    """Evaluates points, yielding each as it finishes. ``with executor:`` keeps what it starts (a Dask
    cluster) for every call inside the block; the local executors start nothing that outlives a call."""

    def map_unordered(self, evaluate: PointFunction, points: Sequence[Point]
                      ) -> Iterator[tuple[Point, dict[str, Any] | None, str]]: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


class _NothingHeld:
    """``with executor:`` for an executor whose calls hold nothing between them."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class SerialExecutor(_NothingHeld):
    """In this process: no pickling, the baseline for --jobs 1."""

    def map_unordered(self, evaluate: PointFunction, points: Sequence[Point]):
        for point in points:
            yield (point, *_evaluate_safely(evaluate, point.values))


@dataclass
class LocalExecutor(_NothingHeld):
    """A pool of local worker processes, one point per task, handed out in the order given (the
    pool's queue is first in, first out); results come back as they finish. Each worker imports
    `preload` when it starts. The pool lives for one call: started by fork it costs ~40 ms
    (benchmarks/bench_sweep.py)."""

    jobs: int = 2
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:   # 0 ran one
            raise RlsimError(f"jobs must be a whole number >= 1, got {self.jobs!r}", field="jobs",
                             fix="e.g. LocalExecutor(jobs=2) (rlsim: --jobs 2)")

    def map_unordered(self, evaluate: PointFunction, points: Sequence[Point]):
        if not points:
            return
        if self.jobs <= 1:
            yield from SerialExecutor().map_unordered(evaluate, points)
            return
        if multiprocessing.get_start_method() == "fork":
            # forked workers inherit this process's modules: import them once here, not once per
            # worker (each import is ~0.4 s of CPU on a worker's critical path)
            _preload(self.preload)
        pool = ProcessPoolExecutor(max_workers=self.jobs, initializer=_worker_init,
                                   initargs=(os.getpid(), self.preload))
        pending: dict[Future, Point] = {}
        clean = False
        try:
            with _SignalsDeferred() as deferred:
                for point in points:
                    pending[pool.submit(_evaluate_safely, evaluate, point.values)] = point
                yield from self._drain(pending, deferred)
            clean = True
        finally:
            # taken before shutdown, which drops the pool's reference to it when it does not wait
            manager = getattr(pool, "_executor_manager_thread", None)
            if not clean:  # Ctrl-C, SIGTERM or a dead worker: do not wait for running points
                _stop_workers(list((getattr(pool, "_processes", None) or {}).values()))
            pool.shutdown(wait=clean, cancel_futures=True)
            if not clean and manager is not None:
                # CPython's exit hook (concurrent/futures/process.py _python_exit, 3.11) wakes the pool's
                # manager thread through a pipe that thread may be closing at that moment: a "Bad file
                # descriptor" traceback at exit. Let the manager finish first (its workers are gone).
                manager.join(MANAGER_JOIN_S)

    @staticmethod
    def _drain(pending: dict[Future, Point], deferred: _SignalsDeferred):
        """Yield the points as they finish; a Ctrl-C or SIGTERM that came meanwhile is raised here,
        between two waits (see _SignalsDeferred)."""
        while pending:
            done, _ = wait(pending, timeout=SIGNAL_POLL_S, return_when=FIRST_COMPLETED)
            deferred.raise_pending()
            broken = False
            for future in sorted(done, key=lambda f: pending[f].index):
                point = pending.pop(future)
                try:
                    summary, error = future.result()
                except BrokenProcessPool:
                    broken = True  # hand over every point that did finish before stopping
                    continue
                yield point, summary, error
            if broken:
                raise SweepAborted("a worker process died")


# How often the local pool's main loop looks for a deferred Ctrl-C / SIGTERM while no point finishes.
SIGNAL_POLL_S = 0.2
# The longest a stopped sweep waits for its pool's manager thread to end (it ends within a poll
# once the workers are stopped).
MANAGER_JOIN_S = 5.0


class _SignalsDeferred:
    """Within, SIGINT and SIGTERM are recorded instead of raising wherever the main thread happens to
    be; `raise_pending` then runs the handler that was in place (KeyboardInterrupt, the CLI's
    Terminated) at a point of the caller's choosing. Why: concurrent.futures.wait takes every pending
    future's lock in turn, and an exception raised by a signal handler between two of those
    acquisitions leaves some locks held; the pool's manager thread then blocks on them forever, so the
    stopped sweep never exits (the rare hang of tests/test_sweep_durability.py's SIGTERM case).
    Outside the main thread (an embedding program) nothing is changed."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._pending: list[tuple[int, Any]] = []

    def __enter__(self) -> _SignalsDeferred:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def _record(self, signum: int, frame: Any) -> None:
        self._pending.append((signum, frame))

    def raise_pending(self) -> None:
        """Run the previous handler of the first signal recorded (it raises, or the default action
        ends the process); nothing when none came."""
        if not self._pending:
            return
        signum, frame = self._pending.pop(0)
        handler = self._previous.get(signum)
        self._restore()
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(signum)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:   # a signal that came after the last look is not dropped
            self.raise_pending()
        self._restore()


def _stop_workers(processes: Sequence[Any], grace_s: float = 2.0) -> None:
    """SIGTERM every worker, then SIGKILL those still alive after `grace_s`, and reap them."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(1.0)


# How a LocalCluster that rlsim starts makes its worker processes: as the local pool does (Python's
# default start method: fork on Linux up to Python 3.13, forkserver from 3.14, spawn on macOS and
# Windows). Dask's own default, spawn, starts each worker as a fresh interpreter that imports dask,
# distributed, numpy, pandas and the simulator (~1.5-2 s of CPU each, before its first point); a
# forked worker inherits them from this process, which imports the preload modules first.
# benchmarks/bench_sweep.py measures the three. A Dask configuration that names a method
# (DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD, ~/.config/dask) is kept;
# DaskExecutor(start_method=...) sets one from the API.
DASK_DEFAULT_START_METHOD = "spawn"   # distributed.yaml's `distributed.worker.multiprocessing-method`

# Dask settings of a LocalCluster that rlsim starts. A Dask worker samples the stack of the thread
# running a task every 10 ms (distributed.worker.profile: the dashboard's profile page); on the
# simulator's pure-Python points that sampling took 50-80% more CPU per point than the same point
# in a local pool worker (benchmarks/bench_sweep.py, "busiest worker"). rlsim's LocalCluster has no
# dashboard, so no one reads the profile: it is off. A cluster of one's own keeps its settings
# (docs/guides/sweeps.md says how to turn it off there).
LOCAL_CLUSTER_DASK_CONFIG: dict[str, Any] = {"distributed.worker.profile.enabled": False}


@contextmanager
def _workers_started_deaf() -> Iterator[None]:
    """Worker processes started inside ignore SIGINT and take SIGTERM's default, as the local pool's
    do (_pool_worker_init): a terminal's Ctrl-C reaches the whole process group, and each Dask worker
    printed its KeyboardInterrupt (or the sweep's Terminated, inherited by a forked worker) while the
    sweep itself stopped cleanly. The parent ignores SIGINT for the cluster's start only (an ignored
    signal stays ignored across fork and exec); outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler)
                for signum, handler in ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, signal.SIG_DFL))}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass
class DaskExecutor:
    """Dask distributed: a running scheduler at `address`, or a LocalCluster of `jobs` workers.

    The cluster (or the connection) is made by :meth:`start` (or the first call with a point to
    evaluate) and kept until :meth:`close`: inside ``with executor:`` every ``map_unordered`` call
    (the batches of a capacity search) uses the same one; outside, each call closes what it
    started. Each worker imports `preload` once, when the cluster starts (a LocalCluster's workers
    as they start; a running cluster's through one ``client.run``, which finds the modules already
    loaded on a long-lived worker). docs/guides/sweeps.md has the measured costs."""

    address: str | None = None
    jobs: int = 2
    processes: bool = True
    preload: tuple[str, ...] = ()
    start_method: str | None = None   # None: multiprocessing.get_start_method() (see above)
    # check_workers(client): run once on a cluster of one's own (`address`), whose workers read the
    # scenario and its files from their own disk: raises where they would read other contents
    check_workers: Callable[[Any], None] | None = None
    _cluster: Any = field(default=None, repr=False)
    _client: Any = field(default=None, repr=False)
    _held: bool = field(default=False, repr=False)

    def __enter__(self) -> DaskExecutor:
        self._held = True   # started by the first call that has a point to evaluate
        return self

    def __exit__(self, *exc: object) -> None:
        self._held = False
        self.close()

    def start(self) -> Any:
        """The client, connected (and the LocalCluster up, its workers with `preload` imported)."""
        if self._client is not None:
            return self._client
        try:
            from distributed import Client
        except ImportError:
            raise RlsimError("the Dask executor needs dask[distributed]", field="--executor",
                             fix="pip install 'rlsim[dask]', or use --executor local") from None
        try:
            if self.address:
                client = Client(self.address, timeout="10s")
            else:
                self._cluster = self._local_cluster()
                client = Client(self._cluster)
        except (OSError, ValueError, MemoryError) as exc:
            self.close()
            if isinstance(exc, (ValueError, MemoryError)) and not self.address:
                raise  # a LocalCluster fault is ours, not the user's
            if isinstance(exc, MemoryError):   # something answered, but not in Dask's protocol (a huge frame length)
                exc = OSError(f"{self.address} answered, but not as a Dask scheduler")
            # distributed raises ValueError for a malformed address ('missing port number')
            raise RlsimError(f"cannot reach the Dask scheduler: {exc}", field="--scheduler",
                             fix="check the address (tcp://HOST:8786), or leave --scheduler out for a local cluster") \
                from None
        self._client = client
        if self.preload and self.address:
            client.run(_preload, list(self.preload))   # once per worker; instant where already imported
        if self.check_workers and self.address:
            try:
                self.check_workers(client)
            except RlsimError:
                self.close()
                raise
        return client

    def _local_cluster(self) -> Any:
        import dask
        from distributed import LocalCluster

        key = "distributed.worker.multiprocessing-method"
        method = dask.config.get(key)
        if method == DASK_DEFAULT_START_METHOD:   # the user's own Dask setting, if any, is kept
            method = self.start_method or multiprocessing.get_start_method()
        options: dict[str, Any] = {"n_workers": max(1, self.jobs), "threads_per_worker": 1,
                                   "processes": self.processes, "dashboard_address": None}
        if self.preload:
            if method == "fork" or not self.processes:
                _preload(self.preload)   # inherited by a forked worker; shared by a thread worker
            if self.processes:
                options["preload"] = list(self.preload)   # each worker imports them before it says it is ready
        with dask.config.set({**LOCAL_CLUSTER_DASK_CONFIG, key: method}), _workers_started_deaf():
            return LocalCluster(**options)

    def close(self) -> None:
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    def map_unordered(self, evaluate: PointFunction, points: Sequence[Point]):
        if not points:   # a resumed sweep with nothing left starts no cluster
            return
        client = self.start()
        from distributed import as_completed

        try:
            futures = {}
            for position, point in enumerate(points):
                # pure=False: a repeated point is re-run, never served from another sweep's cache;
                # priority: the scheduler hands out points in the order given (the first highest)
                futures[client.submit(_evaluate_safely, evaluate, point.values, pure=False,
                                      priority=len(points) - position,
                                      key=f"rlsim-point-{point.id}-{point.index}")] = point
            for future in as_completed(list(futures)):
                point = futures[future]
                try:
                    summary, error = future.result()
                except Exception as exc:  # KilledWorker and friends: stop, keep what finished
                    if type(exc).__name__ == "KilledWorker":
                        raise SweepAborted(f"a Dask worker died: {exc}") from None
                    raise
                yield point, summary, error
        finally:
            if not self._held:
                self.close()


def make_executor(kind: str, jobs: int = 1, scheduler: str | None = None,
                  preload: tuple[str, ...] = POINT_MODULES, base: BaseScenario | None = None) -> Executor:
    """The executor of `rlsim sweep`; its workers import `preload` (the real point function's
    modules) once each, when they start. With `scheduler` and `base`, each worker of that cluster
    must see the base scenario as this process does (same_inputs_on_workers)."""
    if kind == "local":
        if scheduler:
            raise RlsimError("--scheduler needs --executor dask", field="--scheduler",
                             fix="add --executor dask, or drop --scheduler")
        return LocalExecutor(jobs=jobs, preload=preload)
    if kind == "dask":
        check = functools.partial(same_inputs_on_workers, base) if base is not None and scheduler else None
        return DaskExecutor(address=scheduler, jobs=jobs, preload=preload, check_workers=check)
    raise RlsimError(f"unknown executor {kind!r}", field="--executor", fix="use local or dask")


def same_inputs_on_workers(base: BaseScenario, client: Any) -> None:
    """Each worker of a cluster of one's own reads the scenario, the files it names and the simulator
    from its own disk and working folder: a worker whose fingerprint of `base` differs from this
    process's (another file at that path, none, another rlsim) would compute other inputs' rows
    under this sweep's ids. Refused, naming the worker."""
    here = base.fingerprint()
    for worker, there in sorted(client.run(_fingerprint_or_error, base).items()):
        if there != here:
            seen = f"cannot read the scenario or a file it names ({there.removeprefix('error: ')})" \
                if there.startswith("error: ") else "reads other contents of the scenario or the files it names " \
                "(or runs another rlsim)"
            raise RlsimError(f"the Dask worker {worker} {seen}",
                             field="--scheduler", fix="give the workers the same files at the same paths and the "
                             "same rlsim (a shared folder, started from this directory), or leave --scheduler out")


def _fingerprint_or_error(base: BaseScenario) -> str:
    try:
        return base.fingerprint()
    except RlsimError as exc:
        return f"error: {exc}"


# --------------------------------------------------------------------------- runner

@dataclass
class SweepResult:
    grid: dict[str, list[Any]]
    points: list[Point]
    rows: pd.DataFrame          # this sweep's rows, in grid order
    computed: int               # points evaluated by this call (the rest came from the file)
    path: Path | None

    def run_objects(self) -> list[dict[str, Any]]:
        """One run object per point, with its grid values: the `sweep --json` document before the cost
        fields the command adds to each (capacity.cost_fields: device-hours per 1,000 steps and per 1M
        tokens, and with --price the cost)."""
        return [row_to_run_object(r, list(self.grid)) for r in self.rows.to_dict("records")]


def run_sweep(points: Sequence[Point], evaluate: PointFunction, *, store: ResultsStore | None = None,
              executor: Executor | None = None, progress: Callable[[int, int], None] | None = None,
              grid: Mapping[str, Sequence[Any]] | None = None, cost: PointCost | None = None,
              siblings: Iterable[str] = (), check_inputs: Callable[[Point], None] | None = None) -> SweepResult:
    """Evaluate every point not already in `store`; each finished point is saved as it finishes.
    `siblings`: ids of the same command's other points (a capacity search runs its candidates in
    batches), not said as other sweeps' rows in the store.

    `cost(values)` estimates a point's cost: the points are handed to the executor costliest first
    (:func:`dispatch_order`); the results do not depend on the order. `progress(done, total)` is
    called after each point. Ctrl-C (KeyboardInterrupt) and a dead worker (SweepAborted) propagate
    after the finished points are on disk. `check_inputs(point)` (an :class:`InputWatch`) runs before
    each finished point is kept: it raises (InputsChanged) where an input changed since the ids were
    made, and that point is not saved.
    """
    if not callable(evaluate):   # a TypeError 'NoneType object is not callable' from inside the executor
        raise RlsimError(f"evaluate must be a function of a point's values, got {evaluate!r}", field="evaluate",
                         fix="pass e.g. simulate_point bound to a BaseScenario: functools.partial(simulate_point, base)")
    refuse_repeated_points(points)   # hand-made Points too
    base = _bound_base(evaluate)
    if base is not None:   # before any point runs: each would fail on the same clash, or read past it
        base.refuse_replaced_by_grid(grid or _grid_from_points(points))
    executor = executor or SerialExecutor()
    if store and (copied := store.carry_over(points)):
        warn(f"{copied} finished point(s) copied from {store.sibling().path.name} into {store.path.name} "
             f"(the sweep ran before with the other --format); they are not computed again")
    done = store.done_ids() if store else set()
    todo = dispatch_order([p for p in points if p.id not in done], cost)
    new_rows: list[dict[str, Any]] = []
    finished = len(points) - len(todo)
    if progress:
        progress(finished, len(points))
    results = executor.map_unordered(evaluate, todo)
    try:
        for point, summary, error in results:
            if check_inputs:
                check_inputs(point)
            row = make_row(point, summary, error)
            if store:
                store.append(row)
            new_rows.append(row)
            finished += 1
            if progress:
                progress(finished, len(points))
    finally:
        close = getattr(results, "close", None)
        if close:
            close()  # shut the executor down now, not when the generator is collected
    if store:
        store.finalize({p.id: p.index for p in points})
        frame = store.read()
    else:
        frame = pd.DataFrame(new_rows)
    ids = [p.id for p in points]
    if not frame.empty:
        mine = frame[ID_COLUMN].astype(str).isin(ids)
        foreign = frame.loc[~mine, ID_COLUMN].astype(str)
        others = int(foreign[~foreign.isin(set(siblings))].nunique())
        if store and others:   # kept (a rerun of their command resumes from them), and said
            warn(f"{store.path.name} also holds {others} point(s) of other sweeps (another base scenario, grid or "
                 f"input files; the {BASE_COLUMN} column tells them apart): this sweep's {len(ids)} are the ones "
                 "shown; give a fresh --out to keep one sweep per file")
        frame = frame[mine].drop_duplicates(ID_COLUMN, keep="last")
        order = {pid: i for i, pid in enumerate(ids)}
        frame = frame.assign(_order=frame[ID_COLUMN].astype(str).map(order)).sort_values("_order")
        frame = frame.drop(columns="_order").reset_index(drop=True)
        frame[INDEX_COLUMN] = range(len(frame))
        frame = _grid_cells_of_points(frame, points, store.path.name if store else "")
    grid_dict = {k: list(v) for k, v in (grid or _grid_from_points(points)).items()}
    return SweepResult(grid_dict, list(points), frame, len(new_rows), store.path if store else None)


def _bound_base(evaluate: PointFunction) -> BaseScenario | None:
    """The BaseScenario a point function is bound to (functools.partial(simulate_point, base), the
    replicas' partial(replicate_point, base, seeds)); None for another function (tests' fakes)."""
    if not isinstance(evaluate, functools.partial):
        return None
    return next((a for a in (*evaluate.args, *evaluate.keywords.values()) if isinstance(a, BaseScenario)), None)


def _grid_cells_of_points(frame: pd.DataFrame, points: Sequence[Point], file_name: str) -> pd.DataFrame:
    """A row's id hashes its point's values, so a grid cell edited by hand in the results file (seed
    2 -> 7) showed another point's label on this point's figures: such cells take the point's
    value, and the edit is said."""
    by_id = {p.id: p.values for p in points}
    ids = frame[ID_COLUMN].astype(str).tolist()
    for key in dict.fromkeys(k for p in points for k in p.values):
        column = GRID_PREFIX + key
        if column not in frame:
            continue
        cells = [json.dumps(v) if isinstance(v := by_id[i].get(key), (list, dict)) else v for i in ids]
        edited = [row for row, (cell, was) in enumerate(zip(cells, frame[column].tolist(), strict=True))
                  if not _same_cell(cell, was)]
        if edited:
            warn(f"{file_name}: {len(edited)} row(s) hold a {column} that is not their point's (edited by hand?): "
                 f"the point's value is shown, e.g. {cells[edited[0]]!r} where the file says "
                 f"{frame[column].iloc[edited[0]]!r}")
            frame[column] = frame[column].astype(object)
            for row in edited:
                frame.iat[row, frame.columns.get_loc(column)] = cells[row]
    return frame


def _same_cell(value: Any, cell: Any) -> bool:
    """A point's grid value and the cell read back for it (CSV gives 1.0 for 1, NaN for None)."""
    if value is None:
        return cell is None or (isinstance(cell, float) and math.isnan(cell))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not isinstance(cell, (bool, str)):
        try:
            return float(value) == float(cell)
        except (TypeError, ValueError):
            return False
    return value == cell or str(value) == str(cell)


def dispatch_order(points: Sequence[Point], cost: PointCost | None) -> list[Point]:
    """Longest processing time first: the costliest estimate first, ties in grid order. Workers
    take the next point as they free up, so the last point to start is a cheap one and the workers
    finish close together (Graham's LPT rule: within 4/3 of the best split for any number of
    workers; grid order can leave the costliest point for last, with one worker busy and the
    others idle). Without `cost`, grid order."""
    if cost is None:
        return list(points)
    estimates = {p.index: cost(p.values) for p in points}
    return sorted(points, key=lambda p: (-estimates[p.index], p.index))


def _grid_from_points(points: Sequence[Point]) -> dict[str, list[Any]]:
    keys: dict[str, list[Any]] = {}
    for p in points:
        for k, v in p.values.items():
            if v not in keys.setdefault(k, []):
                keys[k].append(v)
    return keys


# --------------------------------------------------------------------------- the real point function

def _order_free(overrides: Sequence[str]) -> list[str]:
    """The --set items as the fingerprint hashes them: sorted when no key repeats or lies under
    another (their order then changes nothing, and reordering them kept no finished point), in the
    given order otherwise (a later item wins, a section then one of its keys)."""
    keys = [str(item).split("=", 1)[0].strip() for item in overrides]
    nested = any(a == b or b.startswith(a + ".") or b.startswith(a + "[")
                 for i, a in enumerate(keys) for j, b in enumerate(keys) if i != j)
    return list(overrides) if nested else sorted(overrides)


def _parsed(text: str) -> Any:
    """A scenario file's YAML, for the files it names (None where it does not parse: its load says why)."""
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _content_or_text(value: str | None) -> str | None:
    """An option naming a file as the sha256 of its bytes (a path to it is no part of a result); else as given."""
    if value is None:
        return None
    try:
        path = Path(value)
        if path.is_file():
            return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except (OSError, ValueError):
        pass
    return value


# The options (BaseScenario's fields, the CLI's flags) a grid key replaces in every point, as `rlsim run`
# pairs them with --set keys: a grid of seeds replaces seed, one of schedule kinds the schedule named.
GRID_REPLACED_OPTIONS: dict[str, tuple[str, ...]] = {
    "iterations": ("iterations",), "seed": ("seed",), "schedule": ("schedule", "schedule.kind"),
    "topology": ("topology", "topology.preset"), "workload": ("workload",)}


@dataclass(frozen=True)
class BaseScenario:
    """What a sweep varies around: a scenario file (or None for the defaults), or a scenario mapping
    (a framework config's import: `rlsim sweep --from-verl`), plus CLI options.

    Picklable, so it travels to worker processes and Dask workers (a mapping travels whole: each
    worker runs the same scenario, whatever its disk holds).
    """

    spec: str | Mapping[str, Any] | None = None
    topology: str | None = None
    workload: str | None = None
    schedule: str | None = None
    overrides: tuple[str, ...] = ()
    iterations: int | None = None
    seed: int | None = None
    # what a mapping `spec` is called where a changed input is named ('the scenario imported from the
    # verl config job.yaml'); a file is named by its path
    spec_name: str | None = None

    def __post_init__(self) -> None:
        # a lone string is one override (iterating it gave its letters); a list becomes a tuple (hashable)
        from .overrides import string_items
        items = string_items(self.overrides, field="BaseScenario.overrides", what="'KEY=VALUE' strings",
                             example="BaseScenario(overrides=('iterations=2',))")
        object.__setattr__(self, "overrides", tuple(items))

    def refuse_replaced_by_grid(self, grid: Iterable[str]) -> None:
        """An overrides item or option whose key a grid key sets in every point is refused, as the CLI
        refuses one (commands/sweep.py _refuse_replaced_by_grid): an overrides item failed every point
        ('overrides iterations is given twice', simulate's check), an option (seed=3 beside a seed grid)
        was read past without a word. An item under a grid section (schedule.staleness=2 beside a grid
        of schedules) is kept: it applies to each grid value (keywords)."""
        keys = set(grid)
        for item in self.overrides:
            try:
                key = parse_assignment(item)[0]
            except RlsimError:   # not KEY=VALUE: each point's row says so, as simulate refuses it
                continue
            if key in keys:
                raise RlsimError(f"BaseScenario.overrides item {item!r} is replaced by the grid's {key} in every "
                                 "point", source="BaseScenario.overrides", field=key,
                                 fix=f"drop {item!r} from BaseScenario.overrides, or drop {key} from the grid")
        for option, option_keys in GRID_REPLACED_OPTIONS.items():
            given = getattr(self, option)
            clash = next((key for key in option_keys if key in keys), None)
            if given is not None and clash:
                raise RlsimError(f"BaseScenario({option}={given!r}) is replaced by the grid's {clash} in every point",
                                 source="BaseScenario", field=clash,
                                 fix=f"drop {option}={given!r} from BaseScenario(...), or drop {clash} from the grid")

    def fingerprint(self) -> str:
        """Hash of everything that decides a point's result except its grid values: the options, the
        contents (not the paths) of the scenario file and of every file it, --workload, --topology
        and --set name, transitively (model config.json, device profiles, length files), and the
        simulator's own code and presets, so an edit to any of them recomputes the points (an
        error row too: the same code and input give the same error, other code may not)."""
        payload, _ = self._fingerprint_payload()
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def input_digests(self) -> dict[str, str]:
        """The fingerprint's inputs that live on disk, one by one under the name a user knows them
        by ({'the scenario file my.yaml': sha256, ...}): what tells which of them changed."""
        payload, files = self._fingerprint_payload()
        out = {f"the file {path}": digest for path, digest in files.items()}
        if self.spec:
            name = f"the scenario file {self.spec}" if isinstance(self.spec, (str, Path)) else \
                self.spec_name or "the scenario mapping"
            out[name] = hashlib.sha256(payload["spec_text"].encode()).hexdigest()
        out["the simulator's code or built-in presets"] = payload["code"]
        return out

    def _fingerprint_payload(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(what the fingerprint hashes, {path: sha256} of the files the inputs name)."""
        text = ""
        if isinstance(self.spec, Mapping):   # an imported scenario: its contents, key order aside
            text = json.dumps(self.spec, sort_keys=True, default=str)
        elif self.spec:
            try:
                text = Path(self.spec).read_bytes().decode("utf-8", errors="replace")
            except OSError as exc:
                raise RlsimError(f"cannot read file: {exc.strerror}", source=self.spec, fix="check the path") \
                    from None
        from .version import __version__, code_fingerprint
        payload = {"spec_text": text, "topology": _content_or_text(self.topology),
                   "workload": _content_or_text(self.workload), "schedule": self.schedule,
                   "overrides": _order_free(self.overrides), "iterations": self.iterations, "seed": self.seed,
                   "version": __version__, "code": code_fingerprint()}
        # the files by their contents alone: a path to them (the scenario's own, an install's
        # preset folder) moved every point id (a copy or another working folder recomputed them all)
        spec_content = self.spec if isinstance(self.spec, Mapping) else _parsed(text) if self.spec else None
        files = referenced_files([spec_content, self.topology, self.workload, *self.overrides], self.base_dirs())
        if files:
            payload["files"] = sorted(set(files.values()))
        return payload, files

    def base_dirs(self) -> list[Path]:
        """Folders a relative path in the sweep's inputs may be read from (the scenario file's; a
        mapping's paths read from the working folder, as simulate reads them)."""
        return [Path(self.spec).parent] if isinstance(self.spec, (str, Path)) and self.spec else []

    def work_units(self, values: Mapping[str, Any]) -> int:
        """The point's work estimate (scenario.work_estimate: iterations x (sample segments per step
        + DEVICE_UNITS x devices), the estimate limits.max_work checks): the cost by which a sweep
        hands out its points, costliest first. It loads the point's scenario and topology, ~8 ms at
        384 devices and ~65 ms at 24,576 here (a point simulates in 0.5-2 s); 0 for a point
        that does not load (it is evaluated all the same, and its row says why)."""
        from .scenario import work_estimate

        try:
            scenario, topology = self.loaded(values)
        except RlsimError:
            return 0
        return work_estimate(scenario, topology.num_devices).units

    def value_error(self, values: Mapping[str, Any], key: str) -> RlsimError | None:
        """The error of the point ``values`` where it is ``key``'s value's own (its type, its range, a
        name or a file that does not exist): the scenario and topology loaded, nothing simulated. None
        when it loads, or fails on another field (a layout that does not fit: the point's row says so)."""
        from .errors import set_item_for

        try:
            self.loaded(values)
        except RlsimError as exc:
            if set_item_for(exc.fields, [key]):
                return exc
            # a file the value names that is not there: the error is the file's, and the file is the value
            missing = not exc.fields and isinstance(values.get(key), str) and exc.source == values[key]
            return exc if missing else None
        return None

    def loaded(self, values: Mapping[str, Any]) -> tuple[Any, Any]:
        """The point's scenario and topology, nothing simulated (RlsimError where they do not load);
        its distribution values at their first replica's draws (a single run refuses a distribution:
        a sweep point with one runs it as replicas)."""
        from .hardware.topology import load_topology
        from .scenario import scenario_data, validate_scenario
        from .uncertainty.distributions import first_draw
        data, source = scenario_data(self.spec, **self.keywords(values))
        scenario = validate_scenario(first_draw(data, source), source)
        return scenario, load_topology(scenario.topology, max_devices=scenario.limits.max_devices,
                                       spec_source=scenario.source)

    def has_distributions(self, grid: Mapping[str, Sequence[Any]]) -> bool:
        """Whether the base scenario or a grid value gives a key as a distribution."""
        from .overrides import set_dotted
        from .scenario import distribution_keys, scenario_data

        def nested(key: str, value: Any) -> dict[str, Any]:   # a length law's dist: is its name, no draw
            out: dict[str, Any] = {}
            set_dotted(out, key, value)
            return out
        if any(distribution_keys(nested(key, value)) for key, values in grid.items() for value in values):
            return True
        try:
            return bool(distribution_keys(scenario_data(self.spec, **self.keywords())[0]))
        except RlsimError:   # a base that does not load: its points' rows say why
            return False

    def keywords(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        # a grid value of a whole section (schedule=async) goes before the --set keys under it, which
        # then apply to each grid value (after them it would replace the section they set); so it
        # does before the grid keys under it, whatever order --grid gave them in (the point id is
        # order-free, so the other order failed every point under the same ids)
        # A kind named alone (schedule=async) is load_scenario's schedule keyword, as --schedule is: it
        # keeps the knobs of the scenario's schedule section that the kind takes (a verl import's switch,
        # refit and micro-batching were dropped by a section replaced whole); a mapping replaces it.
        values = dict(values or {})
        schedule = values.pop("schedule") if isinstance(values.get("schedule"), str) else self.schedule
        grid = _sections_first(grid_overrides(values))
        base_keys = [str(item).split("=", 1)[0].strip() for item in self.overrides]
        first = [g for g in grid if any(k.startswith(g.split("=", 1)[0].strip() + ".") for k in base_keys)]
        overrides = [*first, *self.overrides, *(g for g in grid if g not in first)]
        return {"topology": self.topology, "workload": self.workload, "schedule": schedule,
                "overrides": overrides, "iterations": self.iterations, "seed": self.seed}


class InputsChanged(SweepAborted):
    """An input of the sweep changed on disk while it ran; the rows saved before match their ids."""


class InputWatch:
    """The sweep's inputs as its point ids were made from them. ``watch(point)``, called before the
    point's row is saved, raises InputsChanged where one changed since. Why: a point reads the
    scenario and the files it names when it runs, so an edit during a sweep stored rows of the new
    contents under ids of the old ones, and every resume served them as the old ones' (~15 ms a
    point, the fingerprint again; a point runs for 0.5-2 s)."""

    def __init__(self, base: BaseScenario, grid: Mapping[str, Sequence[Any]] | None = None) -> None:
        self.base = base
        self.fingerprint = base.fingerprint()
        self._digests = base.input_digests()
        self._dirs = base.base_dirs()
        self._value_files = {_value_key(value): referenced_files([value], self._dirs)
                             for values in (grid or {}).values() for value in values}

    def __call__(self, point: Point) -> None:
        if self.base.fingerprint() != self.fingerprint:
            now = self.base.input_digests()
            self._stop(_changed(self._digests, now) or ["an input of the base scenario"], point)
        for value in point.values.values():
            was = self._value_files.get(_value_key(value))
            if was is not None and (now := referenced_files([value], self._dirs)) != was:
                self._stop(_changed(was, now, prefix="the file "), point)

    @staticmethod
    def _stop(changed: Sequence[str], point: Point) -> None:
        values = ", ".join(f"{key}={json.dumps(value)}" for key, value in point.values.items())
        raise InputsChanged(f"{' and '.join(changed)} changed while the sweep ran; the point {values or '(base)'} "
                            "that finished after the change is not saved (it may have read the new contents, and "
                            "its id names the old ones)")


def _value_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _changed(before: Mapping[str, str], after: Mapping[str, str], prefix: str = "") -> list[str]:
    """The names whose digest differs (or that one side lacks), in a stable order."""
    return [prefix + name for name in dict.fromkeys([*before, *after]) if before.get(name) != after.get(name)]


def _sections_first(items: Sequence[str]) -> list[str]:
    """KEY=VALUE items, each section before the keys under it (fewer key parts first, a stable sort:
    keys of one depth lie under none of each other, and set apart their order changes nothing)."""
    def depth(item: str) -> int:
        key = item.split("=", 1)[0]
        return key.count(".") + key.count("[")
    return sorted(items, key=depth)


def _blamed_on_grid_kind(exc: RlsimError, values: Mapping[str, Any]) -> RlsimError:
    """An error of a schedule field in a point whose grid value names the kind alone (schedule=KIND,
    load_scenario's keyword, so no override simulate could blame) is the grid value's, as a grid key's
    error is its value's (errors.blamed_on_set): it named the scenario file, which runs its own kind.
    A --set item's error (a knob that kind does not take) stays the item's."""
    from .errors import blamed_on_set
    kind = values.get("schedule")
    if not isinstance(kind, str) or str(exc.source or "").startswith("--set "):
        return exc
    item = f"schedule={json.dumps(kind)}"
    blamed = blamed_on_set(exc, [item], "--grid")
    if blamed is exc:
        return exc
    drop = f"drop {json.dumps(kind)} from --grid schedule=..."
    return blamed.reworded(blamed.message, f"{exc.fix}; or {drop}" if exc.fix else drop)


def simulate_point(base: BaseScenario, values: Mapping[str, Any]) -> dict[str, Any]:
    """The real point function: simulate the base scenario with the point's values set."""
    from .api import simulate

    point_values(values)
    try:
        result = simulate(base.spec, keep_samples=False, **base.keywords(values))   # a point keeps its summary only
    except RlsimError as exc:   # simulate names the override that gave the value: a grid value is --grid's
        exc = _blamed_on_grid_kind(exc, values)
        text, items = str(exc.source or ""), grid_overrides(values)
        grid = next((item for item in items if text.startswith(f"--set {item}")), None)
        if grid:
            text = "--grid " + text.removeprefix("--set ")
        if isinstance(base.spec, Mapping) and base.spec_name:   # a row names the import, not '<scenario mapping>'
            from .scenario import MAPPING_SOURCE
            text = text.replace(MAPPING_SOURCE, f"<{base.spec_name}>")
        raise (exc.with_source(text) if text != str(exc.source or "") else exc) from None
    summary = dict(result.summary)
    # The device kinds let a capacity question price the run per device-hour (capacity.py); the run
    # read them off the topology it built (building it again cost a point up to a second at 24k devices).
    summary.setdefault("device_kinds", result.device_kinds)
    if len(result.device_counts) > 1:   # a mixed cluster: its cost weighs each kind's price by its count
        summary.setdefault("device_counts", result.device_counts)
    if result.device_prices:   # the prices the topology's device entries give (price_per_hour)
        summary.setdefault("device_prices", result.device_prices)
    return summary
