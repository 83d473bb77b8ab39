"""Medians and 95% intervals over replicas.

The interval is the distribution-free order-statistic confidence interval of the median: with the
N values sorted, [x_(l), x_(u)] where l is the largest rank with P(B < l) <= 2.5% and u = N + 1 - l,
B ~ Binomial(N, 1/2). Its coverage is at least 95% for N >= 6 (exact binomial tail, no resampling,
so no random numbers); below 6 replicas it is [min, max] and covers 1 - 2^(1-N) (75% at N = 3).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RlsimError
from .distributions import get_dotted


def median_ci_ranks(n: int, level: float = 0.95) -> tuple[int, int]:
    """1-based ranks (l, u) of the order-statistic CI of the median of n values."""
    alpha = (1.0 - level) / 2.0
    cdf = 0.0
    low = 1
    for k in range(n + 1):                 # cdf = P(B <= k - 1) before adding term k
        term = math.comb(n, k) / 2.0 ** n
        if cdf + term > alpha:
            low = max(1, k)
            break
        cdf += term
    return low, n + 1 - low


def ci_coverage(n: int, level: float = 0.95) -> float:
    """The exact coverage of median_ci's interval over n values: P(l <= B <= u - 1), B ~ Binomial(n,
    1/2); at least ``level`` from n = 6 (95%), 1 - 2^(1-n) below (the [min, max] of 3 values: 75%)."""
    low, high = median_ci_ranks(n, level)
    return float(sum(math.comb(n, k) for k in range(low, high)) / 2.0 ** n)


def interval_label(n: int, level: float = 0.95) -> str:
    """'95% interval', or what the interval of fewer values covers: '75% interval ([min, max] of 3)'."""
    coverage = ci_coverage(n, level)
    if coverage >= level:
        return f"{level:.0%} interval"
    return f"{coverage:.0%} interval ([min, max] of {n})"


def interval_over(n: int, unit: str, level: float = 0.95) -> str:
    """'95% interval over 8 seeds', or, below the level, what the [min, max] of the n covers: '50%
    interval over 2 replicas: the [min, max]' (interval_label's "(... of 2)" repeated the count)."""
    coverage = ci_coverage(n, level)
    if coverage >= level:
        return f"{level:.0%} interval over {n} {unit}"
    return f"{coverage:.0%} interval over {n} {unit}: the [min, max]"


def median_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high) of the values (one or more numbers; 0 < level < 1)."""
    if not 0 < level < 1:
        raise RlsimError(f"level must lie in (0, 1), got {level!r}", field="level", fix="e.g. level=0.95")
    try:
        if values is None:
            raise TypeError
        x = np.sort(np.asarray(values, dtype=float).ravel())
        if np.isnan(x).any():
            raise ValueError
    except (TypeError, ValueError):
        raise RlsimError(f"values must be numbers, got {values!r}"[:200], field="values",
                         fix="give a list of numbers, e.g. the per-seed figures") from None
    if not len(x):
        raise RlsimError("no values: a median needs one or more", field="values", fix="give a list of numbers")
    low, high = median_ci_ranks(len(x), level)
    return float(np.median(x)), float(x[low - 1]), float(x[high - 1])


def metric_figure(summaries: Sequence[Mapping[str, Any]], metric: str) -> float:
    """The median of `metric` (a dotted key of the run summary) over the summaries; an RlsimError
    naming --metric when it is not a numeric figure there (sensitivity and compare_replicas)."""
    try:
        return float(np.median([float(get_dotted(s, metric)) for s in summaries]))
    except (KeyError, TypeError, ValueError, AttributeError):   # AttributeError: a metric that is no text
        raise RlsimError(f"no numeric figure {metric!r} in the run summary", field="--metric",
                         fix="use a key of `rlsim run --json`, e.g. steady_tokens_per_s or bubbles_by_cause.long_tail"
                         ) from None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def numeric_leaves(summary: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Dotted name -> value of every numeric figure (nested mappings flattened the way sweep rows
    are: bubbles_by_cause.long_tail)."""
    from ..sweep import flatten
    return {name: value for name, value in flatten(summary, prefix).items() if is_number(value)}


def aggregate(summaries: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The first summary with every numeric figure replaced by its median over all summaries (a
    figure equal in all keeps its value and type), and the ci95 of each figure by dotted name."""
    leaves = [numeric_leaves(s) for s in summaries]
    ci95: dict[str, list[float]] = {}
    medians: dict[str, Any] = {}
    for name, first in leaves[0].items():
        values = [leaf.get(name) for leaf in leaves]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            continue
        if all(v == first for v in values):
            medians[name] = first
            ci95[name] = [float(first), float(first)]
            continue
        mid, low, high = median_ci([float(v) for v in values])
        medians[name] = mid
        ci95[name] = [low, high]
    doc = _replace_leaves(summaries[0], medians)
    kept = _first_replicas_own(summaries, set(medians))
    if kept:   # lists and texts are no medians: said, so a reader does not take them for ones
        doc["from_replica_0"] = kept
    return doc, ci95


def _first_replicas_own(summaries: Sequence[Mapping[str, Any]], medians: set[str]) -> list[str]:
    """Dotted names of the figures that differ between replicas and have no median (lists such as
    critical_path.steps, texts such as the bottleneck): the document keeps the first replica's."""
    from ..sweep import flatten
    flat = [flatten(s) for s in summaries]
    return sorted(name for name, first in flat[0].items()
                  if name not in medians and any(other.get(name) != first for other in flat[1:]))


def _replace_leaves(summary: Mapping[str, Any], values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out[key] = _replace_leaves(value, values, name + ".")
        else:
            out[key] = values.get(name, value)
    return out
