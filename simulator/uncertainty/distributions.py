"""Parameter distributions: a numeric scenario key given as `{dist: uniform, low: 600, high: 1100}`
(also normal, lognormal, triangular), checked once and sampled per replica from a passed Generator."""
from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..scenario import LENGTH_LAW_KEYS, distribution_keys

# law -> (required parameters, optional parameters)
LAWS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "uniform": (("low", "high"), ()),
    "normal": (("mean", "sd"), ("min", "max")),
    "lognormal": (("median", "sigma"), ("min", "max")),
    "triangular": (("low", "mode", "high"), ()),
}
_COMMON = ("dist", "integer")
EXAMPLES = {"uniform": "{dist: uniform, low: 600, high: 1100}", "normal": "{dist: normal, mean: 0.8, sd: 0.05}",
            "lognormal": "{dist: lognormal, median: 2048, sigma: 0.3}",
            "triangular": "{dist: triangular, low: 0.6, mode: 0.8, high: 0.9}"}


@dataclass(frozen=True)
class Distribution:
    key: str                      # full dotted scenario key
    law: str
    params: dict[str, float]
    integer: bool = False

    @classmethod
    def from_mapping(cls, key: str, spec: Mapping[str, Any], source: str) -> Distribution:
        law = str(spec.get("dist", "")).lower()
        if law not in LAWS:
            raise RlsimError(f"unknown distribution {spec.get('dist')!r}", source=source, field=f"{key}.dist",
                             fix=f"use one of {', '.join(LAWS)}, e.g. {EXAMPLES['uniform']}")
        required, optional = LAWS[law]
        for name in spec:
            if name not in (*required, *optional, *_COMMON):
                raise RlsimError(f"unknown field {name!r} of a {law} distribution", source=source,
                                 field=f"{key}.{name}", fix=f"write e.g. {EXAMPLES[law]}")
        params: dict[str, float] = {}
        for name in (*required, *optional):
            if name not in spec:
                if name in required:
                    raise RlsimError(f"a {law} distribution needs {name!r}", source=source, field=f"{key}.{name}",
                                     fix=f"write e.g. {EXAMPLES[law]}")
                continue
            value = spec[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RlsimError(f"must be a finite number, got {value!r}", source=source, field=f"{key}.{name}",
                                 fix=f"write e.g. {EXAMPLES[law]}")
            params[name] = float(value)
        integer = spec.get("integer", False)
        if not isinstance(integer, bool):   # a string "no" read as true
            raise RlsimError(f"must be true or false, got {integer!r}", source=source, field=f"{key}.integer",
                             fix="write integer: true (draws rounded to whole numbers) or leave it out")
        dist = cls(key, law, params, integer)
        dist._check(source)
        return dist

    def _check(self, source: str) -> None:
        fault = self._parameter_fault()
        if fault is not None:
            name, problem, fix = fault
            raise RlsimError(f"bad {self.law} distribution: {problem}", source=source, field=f"{self.key}.{name}",
                             fix=fix)
        if self.integer:
            low, high = self.whole_support()
            if low > high:
                raise RlsimError(f"bad {self.law} distribution: integer: true and no whole number lies in "
                                 f"{self._support_text()}", source=source, field=self.key,
                                 fix="widen the range to hold a whole number, or drop integer: true")

    def _parameter_fault(self) -> tuple[str, str, str] | None:
        """(the parameter at fault, what is wrong with its value, what to give it), or None when the
        parameters make a law."""
        p = self.params
        if self.law in ("uniform", "triangular") and p["low"] > p["high"]:
            swapped = {**p, "low": p["high"], "high": p["low"]}
            if self.law == "triangular":
                return ("low", f"low must be <= high: low {p['low']:g} above high {p['high']:g}",
                        f"give low <= mode <= high, e.g. {_law_text(self.law, swapped)}")
            return ("low", f"low must be <= high: low {p['low']:g} above high {p['high']:g}",
                    f"swap them: {_law_text(self.law, swapped)}")
        if self.law == "triangular" and not p["low"] <= p["mode"] <= p["high"]:
            return ("mode", f"mode {p['mode']:g} outside low..high {p['low']:g}..{p['high']:g}",
                    f"give a mode within {p['low']:g}..{p['high']:g} (the most likely value)")
        if self.law == "normal" and p["sd"] < 0:
            return "sd", f"sd must be >= 0, got {p['sd']:g}", f"give sd 0 or more, e.g. sd: {abs(p['sd']):g}"
        if self.law == "lognormal" and p["median"] <= 0:
            return ("median", f"median must be > 0, got {p['median']:g}",
                    "give a median above 0 (the law's middle value; its log is the normal's mean)")
        if self.law == "lognormal" and p["sigma"] < 0:
            return ("sigma", f"sigma must be >= 0, got {p['sigma']:g}",
                    f"give sigma 0 or more (the spread of the log), e.g. sigma: {abs(p['sigma']):g}")
        if "min" in p and "max" in p and p["min"] > p["max"]:
            return ("min", f"min must be <= max: min {p['min']:g} above max {p['max']:g}",
                    f"give min <= max, e.g. min: {p['max']:g}, max: {p['min']:g}")
        return None

    def whole_support(self) -> tuple[float, float]:
        """The whole numbers an integer law's draws take: ceil(low)..floor(high) of a uniform or a
        triangular, ceil(min)..floor(max) of a normal or lognormal (infinite where unbounded)."""
        p = self.params
        if self.law in ("uniform", "triangular"):
            return float(math.ceil(p["low"])), float(math.floor(p["high"]))
        low, high = p.get("min", -math.inf), p.get("max", math.inf)
        return (float(math.ceil(low)) if math.isfinite(low) else low,
                float(math.floor(high)) if math.isfinite(high) else high)

    def _support_text(self) -> str:
        p = self.params
        names = ("low", "high") if self.law in ("uniform", "triangular") else ("min", "max")
        return f"{p.get(names[0], -math.inf):g}..{p.get(names[1], math.inf):g}"

    def sample(self, rng: np.random.Generator) -> float | int:
        if self.integer:
            return self._sample_whole(rng)
        p = self.params
        if self.law == "uniform":
            value = rng.uniform(p["low"], p["high"])
        elif self.law == "normal":
            value = rng.normal(p["mean"], p["sd"])
        elif self.law == "lognormal":
            value = p["median"] * math.exp(rng.normal(0.0, 1.0) * p["sigma"])
        else:
            value = rng.triangular(p["low"], p["mode"], p["high"]) if p["low"] < p["high"] else p["low"]
        return min(max(float(value), p.get("min", -math.inf)), p.get("max", math.inf))

    def _sample_whole(self, rng: np.random.Generator) -> int:
        """An integer law's draw, each whole number of its support with the weight of its whole unit
        bin: rounding a continuous draw over low..high gave the two ends half bins (P(4) = P(9) = 0.10
        and 0.20 for 5..8 of a uniform 4..9)."""
        p = self.params
        low, high = self.whole_support()
        if self.law == "uniform":
            return int(rng.integers(int(low), int(high), endpoint=True))
        if self.law == "triangular":   # the law stretched over low - 0.5..high + 0.5 (its shape kept), rounded
            if low == high:
                return int(low)
            share = (p["mode"] - p["low"]) / (p["high"] - p["low"])
            value = rng.triangular(low - 0.5, low - 0.5 + share * (high - low + 1), high + 0.5)
            return int(min(max(math.floor(value + 0.5), low), high))
        # an unbounded law has no end bins; its draw is rounded, then held to the whole numbers
        # within min..max (a fractional bound rounded past it: min 4.5 gave 4)
        value = rng.normal(p["mean"], p["sd"]) if self.law == "normal" else (
            p["median"] * math.exp(rng.normal(0.0, 1.0) * p["sigma"]))
        return int(min(max(round(float(value)), low), high))

    def bounds(self) -> tuple[float, float]:
        """A low..high range for sensitivity: the support, or the 2.5-97.5% quantiles of unbounded laws;
        whole ends for an integer law (the values its draws take)."""
        low, high = self._continuous_bounds()
        if not self.integer:
            return low, high
        floor, ceiling = self.whole_support()
        if self.law in ("uniform", "triangular"):
            return floor, ceiling
        return (min(max(float(round(low)), floor), ceiling), max(min(float(round(high)), ceiling), floor))

    def _continuous_bounds(self) -> tuple[float, float]:
        p = self.params
        if self.law in ("uniform", "triangular"):
            return p["low"], p["high"]
        if self.law == "normal":
            lo, hi = p["mean"] - 1.96 * p["sd"], p["mean"] + 1.96 * p["sd"]
        else:
            lo, hi = p["median"] * math.exp(-1.96 * p["sigma"]), p["median"] * math.exp(1.96 * p["sigma"])
        # draws are clipped to [min, max]: so is the range (both ends; a clip past the 95% range
        # leaves the value every draw takes, not an inverted range)
        floor, ceiling = p.get("min", -math.inf), p.get("max", math.inf)
        return min(max(lo, floor), ceiling), max(min(hi, ceiling), floor)


def _law_text(law: str, params: Mapping[str, float]) -> str:
    """A law as YAML: {dist: uniform, low: 0.8, high: 1.2}."""
    return "{" + ", ".join([f"dist: {law}", *(f"{name}: {value:g}" for name, value in params.items())]) + "}"


def find_distributions(data: Mapping[str, Any], source: str) -> list[Distribution]:
    """Every distribution value of a scenario mapping, sorted by dotted key (the draw order)."""
    keys = sorted(distribution_keys(data))
    for key in keys:
        if key.rpartition(".")[0] in LENGTH_LAW_KEYS and key.endswith(".dist"):   # drawn, then refused as a law name
            raise RlsimError("a length law's dist is its name (lognormal or empirical), not a number to draw",
                             source=source, field=key, fix=f"draw its numbers instead, e.g. {key[:-5]}.median="
                                                           "{dist: uniform, low: 600, high: 1100}")
    return [Distribution.from_mapping(key, get_dotted(data, key), source) for key in keys]


def get_dotted(data: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key; a list item by its index (schedule.failures.0.at_s)."""
    node: Any = data
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def put_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value


def first_draw(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` with each distribution value at the first replica's draw (plan_replicas draws replica
    i from SeedSequence(seed).spawn(N)[i], the same first stream for any N); a copy of ``data``
    when it has none. A seed that is not a whole number >= 0 draws from 0 (the load says why)."""
    dists = find_distributions(data, source)
    if not dists:
        return dict(data)
    seed = data.get("seed", 0)
    seed = seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else 0
    return draw(data, dists, np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]))[0]


def draw(data: Mapping[str, Any], dists: list[Distribution], rng: np.random.Generator
         ) -> tuple[dict[str, Any], dict[str, float | int]]:
    """A copy of `data` with every distribution replaced by one draw, and the values drawn."""
    out = copy.deepcopy(dict(data))
    drawn: dict[str, float | int] = {}
    for dist in dists:
        drawn[dist.key] = dist.sample(rng)
        put_dotted(out, dist.key, drawn[dist.key])
    return out, drawn
