"""Prompt / response length distributions for RL rollouts.

- ``lognormal``: median and sigma of log-length; truncated at ``max`` with the cut-off mass put AT the
  cap (overlong responses are truncated, formulas.md). A lognormal with sigma ~1 gives p99 ~10x median.
- ``empirical``: lengths read from a CSV or JSON file, resampled through their empirical quantiles.
- ``group_correlation`` (rho in [0, 1)): the samples of one prompt share a per-prompt difficulty
  factor. Each sample's standard normal is z = sqrt(rho) z_prompt + sqrt(1 - rho) z_sample, so the
  marginal distribution is unchanged and the correlation of log-lengths (lognormal) or of normal
  scores (empirical) inside a group is rho.
- ``drift_per_step``: the median grows by a factor (1 + drift) per training step (reasoning grows
  longer over training, formulas.md): median(step) = median (1 + drift)^step, capped at ``max``.
"""
from __future__ import annotations

import csv
import dataclasses
import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..presets import read_text
from ..scenario import LAW_ONLY_KEYS

# A lognormal sigma past this spreads p99 / median beyond e^23 (1e10): no length law, and exp(sigma z)
# of a draw overflows far above it (sigma 1e308 leaked numpy's overflow warning)
MAX_LOG_SIGMA = 10.0
_KEYS = {"dist", "median", "sigma", "max", "min", "group_correlation", "drift_per_step", "file", "column"}
_erf = np.frompyfunc(math.erf, 1, 1)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf(z / math.sqrt(2.0)).astype(float))


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths; all fields are the scenario keys of the same name."""

    dist: str = "lognormal"
    median: float = 2048.0
    sigma: float = 1.0
    max: int | None = None               # cap; the cut-off mass sits at the cap
    min: int = 1
    group_correlation: float = 0.0       # per-prompt difficulty factor (0: independent samples)
    drift_per_step: float = 0.0          # relative growth of the median per step
    values: tuple[int, ...] = ()         # empirical lengths (sorted)
    source: str = dataclasses.field(default="", compare=False)   # file, for error messages
    where: str = dataclasses.field(default="", compare=False)    # scenario key, e.g. response_length

    def _field(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def __post_init__(self) -> None:
        src = self.source or None
        if self.dist not in ("lognormal", "empirical"):
            raise RlsimError(f"unknown length distribution {self.dist!r}", source=src, field=self._field("dist"),
                             fix="use lognormal or empirical")
        if self.dist == "lognormal":
            if not self.median > 0:
                raise RlsimError(f"median must be > 0, got {self.median}", source=src, field=self._field("median"),
                                 fix="give the median length in tokens, e.g. median: 2048")
            if not self.sigma >= 0:
                raise RlsimError(f"sigma must be >= 0, got {self.sigma}", source=src, field=self._field("sigma"),
                                 fix="give the spread of log-length, e.g. sigma: 1.0 (p99 ~10x the median)")
            if self.sigma > MAX_LOG_SIGMA:   # exp(sigma z) overflows, and no length law spreads so far
                raise RlsimError(f"sigma {self.sigma:g} spreads lengths past any cap (p99 is e^(2.33 sigma) x the median)",
                                 source=src, field=self._field("sigma"),
                                 fix=f"give at most {MAX_LOG_SIGMA:g} (1.0 gives p99 ~10x the median)")
        elif not self.values:
            raise RlsimError("an empirical distribution needs lengths", source=src, field=self._field("file"),
                             fix="give a CSV or JSON file of lengths")
        if self.min < 1:
            raise RlsimError(f"min must be >= 1, got {self.min}", source=src, field=self._field("min"),
                             fix="give the shortest length in tokens, at least 1 (min: 1 is the default)")
        for name in ("median", "max", "min"):
            value = getattr(self, name)
            if value is not None and value > MAX_TOKENS:
                raise RlsimError(f"{name} {value:.3g} is not a token count", source=src, field=self._field(name),
                                 fix=f"give at most {MAX_TOKENS:.0e} tokens")
        if self.max is not None and self.max < self.min:
            raise RlsimError(f"max ({self.max}) is below min ({self.min})", source=src, field=self._field("max"),
                             fix="give max >= min (the cap and the floor of the lengths)")
        if not 0.0 <= self.group_correlation < 1.0:
            raise RlsimError(f"group_correlation must be in [0, 1), got {self.group_correlation}",
                             source=src, field=self._field("group_correlation"),
                             fix="give the share of a length's log-variance shared by a prompt's samples, e.g. 0.5 "
                                 "(0: independent samples)")
        if not self.drift_per_step > -1.0:
            raise RlsimError(f"drift_per_step must be > -1, got {self.drift_per_step}", source=src,
                             field=self._field("drift_per_step"),
                             fix="give the median's relative growth a step above -1, e.g. 0.01 (0: no drift)")

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str = "<lengths>",
                     field: str = "length") -> LengthDistribution:
        """`{dist: lognormal, median: 2048, sigma: 1.0, max: 16384, group_correlation: 0.5,
        drift_per_step: 0.01}` or `{dist: empirical, file: lengths.csv, max: 16384}`; a relative file
        path is read next to the source file."""
        if not isinstance(mapping, Mapping):
            raise RlsimError(f"expected a mapping, got {mapping!r}", source=source, field=field,
                             fix="write e.g. {dist: lognormal, median: 2048, sigma: 1.0, max: 16384}")
        unknown = sorted(set(mapping) - _KEYS)
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), sorted(_KEYS), n=1, cutoff=0.75)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise RlsimError(f"unknown key(s) {unknown}{hint}", source=source, field=f"{field}.{unknown[0]}",
                             fix=f"use {', '.join(sorted(_KEYS))}")
        dist = str(mapping.get("dist", "lognormal")).lower()
        if dist not in LAW_ONLY_KEYS:   # before the keys of the other law: `dist: lognorm` blamed median
            close = difflib.get_close_matches(dist, sorted(LAW_ONLY_KEYS), n=1, cutoff=0.6)
            raise RlsimError(f"unknown length distribution {dist!r}" + (f"; did you mean '{close[0]}'?" if close
                                                                       else ""), source=source, field=f"{field}.dist",
                             fix="use lognormal or empirical")
        # keys of the other law are refused, not dropped: an empirical law has its file's shape, a
        # lognormal one reads no file
        foreign = [k for law, keys in LAW_ONLY_KEYS.items() if law != dist for k in keys]
        for key in foreign:
            if key in mapping:
                raise RlsimError(f"{key} does not apply to dist: {dist}", source=source, field=f"{field}.{key}",
                                 fix=f"remove {key}" + (" (the file sets the shape; drift_per_step and max still "
                                                       "apply)" if dist == "empirical" else
                                                       ", or set dist: empirical to read lengths from a file"))
        kwargs: dict[str, Any] = {"dist": dist, "source": source, "where": field}
        for key, kind in (("median", float), ("sigma", float), ("max", int), ("min", int),
                          ("group_correlation", float), ("drift_per_step", float)):
            if mapping.get(key) is not None:
                kwargs[key] = _number(mapping[key], kind, source, f"{field}.{key}")
        if dist == "empirical":
            if "file" not in mapping:
                raise RlsimError("an empirical distribution needs a file", source=source, field=f"{field}.file",
                                 fix="add file: PATH (CSV with a length column, or a JSON list)")
            path = Path(str(mapping["file"]))
            if not path.is_absolute() and source and Path(source).parent.is_dir() and not path.exists():
                path = Path(source).parent / path
            if not path.exists():   # named with the key that gave it, in the file that gave the key
                raise RlsimError(f"length file not found: {mapping['file']}", source=source, field=f"{field}.file",
                                 fix="check the path (relative paths are read next to the file that names them, "
                                     "else from the working folder)")
            kwargs["values"] = tuple(sorted(read_lengths(path, mapping.get("column"), field=f"{field}.column",
                                                         file_field=f"{field}.file")))
        return cls(**kwargs)

    # ---- sampling ---------------------------------------------------------------------------
    def share_at_cap(self) -> float:
        """The share of the first step's lengths cut to the cap: the lognormal's tail above it, or the
        file's lengths at or above it; 0 without a cap."""
        if self.max is None:
            return 0.0
        if self.dist == "empirical":
            return float(np.mean(np.asarray(self.values) >= self.max))
        if self.sigma == 0:
            return 1.0 if self.median >= self.max else 0.0
        return 0.5 * math.erfc((math.log(self.max) - math.log(self.median)) / (self.sigma * math.sqrt(2.0)))

    def median_at(self, step: int = 0) -> float:
        base = self.median if self.dist == "lognormal" else float(np.median(self.values))
        return base * (1.0 + self.drift_per_step) ** step

    def _normals(self, rng: np.random.Generator, n_prompts: int, k: int) -> np.ndarray:
        rho = self.group_correlation
        z = rng.standard_normal((n_prompts, k))
        if rho > 0.0:
            z = math.sqrt(rho) * rng.standard_normal((n_prompts, 1)) + math.sqrt(1.0 - rho) * z
        return z

    def sample(self, rng: np.random.Generator, n_prompts: int, samples_per_prompt: int = 1,
               step: int = 0) -> np.ndarray:
        """Integer lengths of shape (n_prompts, samples_per_prompt), in [min, max]."""
        if n_prompts < 0 or samples_per_prompt < 1:
            raise ValueError("need n_prompts >= 0 and samples_per_prompt >= 1")
        z = self._normals(rng, n_prompts, samples_per_prompt)
        growth = (1.0 + self.drift_per_step) ** step
        if self.dist == "lognormal":
            lengths = self.median * growth * np.exp(self.sigma * z)
        else:
            values = np.asarray(self.values, dtype=float)
            # Empirical quantile of the normal score: keeps the file's distribution exactly.
            idx = np.minimum((_normal_cdf(z) * len(values)).astype(np.int64), len(values) - 1)
            lengths = values[idx] * growth
        lengths = np.maximum(np.rint(lengths), self.min)
        if self.max is not None:
            lengths = np.minimum(lengths, self.max)  # the cut-off mass sits at the cap
        return lengths.astype(np.int64)


# A law whose cap cuts this share of its lengths or more is noted beside the run's figures: the cap,
# not the law, then sets the lengths (`--set workload.response_length.max=10` under a median of 2048
# ran without a word; a new-user trial). A reporting threshold, not a modelling constant.
CAP_NOTE_SHARE = 0.9


def cap_notes(*laws: LengthDistribution) -> list[str]:
    """A note for each law whose cap cuts CAP_NOTE_SHARE of its lengths or more."""
    notes = []
    for law in laws:
        share = law.share_at_cap()
        if share >= CAP_NOTE_SHARE:
            notes.append(f"{law.where or 'lengths'}: {share:.0%} of the lengths are cut to the cap max={law.max} "
                         f"(median {law.median_at():g}): the cap, not the law, sets them; raise max or lower the "
                         "median if your run's lengths are not")
    return notes


def _number(value: Any, kind: type, source: str, field: str) -> Any:
    if isinstance(value, bool):
        raise RlsimError(f"expected a number, got {value!r}", source=source, field=field)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise RlsimError(f"expected a number, got {value!r}", source=source, field=field) from None
    if not math.isfinite(number):
        raise RlsimError(f"expected a finite number, got {value!r}", source=source, field=field,
                         fix="give a finite number (lengths are tokens; a cap is max: N)")
    if kind is int:
        if number != int(number):
            raise RlsimError(f"expected an integer, got {value!r}", source=source, field=field)
        return int(number)
    return number


# What a length file holds, said where its content is wrong
LENGTH_FILE_FIX = "give one whole token count a line under a header naming the column (length), or a JSON list"


def read_lengths(path: str | Path, column: str | None = None, field: str = "column",
                 file_field: str = "file") -> list[int]:
    """Lengths from a JSON list (or {"lengths": [...]}) or a CSV (column `column`, else `length`,
    `response_length`, or the only column of a file that names no column asked for). `field`: the
    key that gave `column`, named when that column is missing; `file_field` the key that gave the
    file, named where its content is wrong (a CSV's by its line)."""
    path = Path(path)
    src = str(path)
    text = read_text(path, what="length file", fix="check the path (relative paths are read next to the scenario file)")
    if path.suffix.lower() == ".json":
        data = _read_json(text, src, file_field)
        if isinstance(data, dict):
            data = data.get(column or "lengths")
        elif column:
            raise RlsimError(f"column {column!r} asked for, but the file is a plain JSON list", source=src,
                             field=field, fix="remove column, or write {\"COLUMN\": [...]}")
        if not isinstance(data, list):
            raise RlsimError("expected a JSON list of lengths or {\"lengths\": [...]}", source=src, field=file_field,
                             fix="write [512, 1024, ...] or {\"lengths\": [512, 1024, ...]}")
        raw = [(f"entry {i}", value) for i, value in enumerate(data)]
    else:
        raw = _csv_lengths(text, column, src, field, file_field)
    out = []
    for where, value in raw:
        if isinstance(value, bool) or not _is_number(value) or not 1 <= float(value) < MAX_TOKENS:
            raise RlsimError(f"{where} is not a positive length: {value!r}", source=src, field=file_field,
                             fix=f"give whole token counts from 1 to {MAX_TOKENS:.0e}")
        out.append(int(round(float(value))))
    if not out:
        raise RlsimError("no lengths in file", source=src, field=file_field, fix=LENGTH_FILE_FIX)
    return out


def _csv_lengths(text: str, column: str | None, src: str, field: str, file_field: str) -> list[tuple[str, Any]]:
    """(its line, the value) of each length of a CSV's column (read_lengths), blank rows left out."""
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise RlsimError("empty length file", source=src, field=file_field, fix=LENGTH_FILE_FIX)
    header = [c.strip() for c in rows[0]]
    has_header = not _is_number(header[0])
    col = 0
    if has_header:
        names = [column] if column else ["length", "response_length", "len"]
        hits = [header.index(n) for n in names if n in header]
        if hits:
            col = hits[0]
        elif len(header) == 1 and not column:
            col = 0
        else:
            raise RlsimError(f"no column {column!r} in {header}" if column else f"no length column in {header}",
                             source=src, field=field,
                             fix=f"use one of {header}" if column else "name the column `length` or set column: NAME")
    elif column:
        raise RlsimError(f"column {column!r} asked for, but the file has no header row", source=src, field=field,
                         fix="add a header row naming the column, or remove column")
    first = 1 if has_header else 0
    return [(f"line {first + i + 1}", r[col] if col < len(r) else "") for i, r in enumerate(rows[first:])
            if r and any(c.strip() for c in r)]


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


# A length past this is not a token count (the longest context windows are ~1e7 tokens).
MAX_TOKENS = 1e9


def _read_json(text: str, src: str, field: str) -> Any:
    """JSON text of a length file; NaN / Infinity and integers past the digit limit are refused."""
    def refuse(constant: str) -> Any:
        raise RlsimError(f"{constant} is not a length", source=src, fix="give whole token counts")
    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise RlsimError(f"not valid JSON: {exc}", source=src, field=field,
                         fix=f"correct the JSON at line {exc.lineno}, column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:   # an integer of more than 4,300 digits; nested too deep
        if isinstance(exc, RlsimError):
            raise
        raise RlsimError("a value cannot be read (a number too long or nesting too deep)", source=src,
                         fix="give a JSON list of whole token counts") from None
