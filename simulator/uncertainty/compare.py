"""Schedules compared over the same seeds (paired): medians, intervals and whether a difference is
larger than the noise (the 95% interval of the per-seed ratio against the first schedule)."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..scenario import compared_schedules
from .intervals import ci_coverage, median_ci, metric_figure
from .replicas import plan_replicas, run_many, summarize

DEFAULT_METRIC = "steady_tokens_per_s"


def compare_replicas(spec: Any = None, schedules: Iterable[str] | str = ("colocated", "disaggregated", "stalesync"),
                     *, seeds: int | None = None, jobs: int = 1, costs: Any = None,
                     metric: str = DEFAULT_METRIC, **keywords: Any) -> list[dict[str, Any]]:
    """One replica summary per schedule (as replicate's), every replica of every schedule on the same
    seeds and parameter draws; each schedule after the first carries `vs_baseline` (ratio of
    `metric` per seed, its median and 95% interval, and a verdict sentence)."""
    from ..api import check_scenario_keywords
    check_scenario_keywords(keywords, "compare_replicas")   # a typo raised a TypeError naming scenario_data
    return compare_replica_runs(spec, schedules, seeds=seeds, jobs=jobs, costs=costs, metric=metric, **keywords)[0]


def compare_replica_runs(spec: Any = None, schedules: Iterable[str] | str = ("colocated", "disaggregated", "stalesync"),
                         *, seeds: int | None = None, jobs: int = 1, costs: Any = None,
                         metric: str = DEFAULT_METRIC, **keywords: Any) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """compare_replicas' summaries and, per schedule, the run summary of each replica (what
    `rlsim compare --seeds N --out DIR` writes as each schedule's replicas.csv)."""
    from ..api import check_no_single_kind, check_scenario_keywords, schedule_list
    check_scenario_keywords(keywords, "compare_replica_runs")
    check_no_single_kind(keywords)   # each compared kind replaces it: refused, as compare refuses it
    kinds = schedule_list(schedules)
    base = plan_replicas(spec, seeds=seeds, **keywords)
    per_kind, unused = compared_schedules(base.data.get("schedule") or {}, kinds)
    if unused:
        base.scenario(0)   # raises: the knob's error names it and the kinds that take it
    plans = [dataclasses.replace(base, data={**base.data, "schedule": per_kind[kind]}) for kind in kinds]
    runs = run_many(plans, jobs=jobs, costs=costs)
    docs = [summarize(plan, summaries) for plan, summaries in zip(plans, runs, strict=True)]
    for kind, doc, summaries in zip(kinds[1:], docs[1:], runs[1:], strict=True):
        doc["vs_baseline"] = paired_ratio(kind, kinds[0], summaries, runs[0], metric)
    return docs, runs


def paired_ratio(kind: str, baseline: str, runs: Sequence[Mapping[str, Any]],
                 baseline_runs: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """The per-seed ratio metric(kind) / metric(baseline): median, 95% interval, verdict (an
    RlsimError naming --metric when it is not a numeric figure of the summaries)."""
    pairs = [(metric_figure([a], metric), metric_figure([b], metric)) for a, b in zip(runs, baseline_runs, strict=True)]
    ratios = [a / b for a, b in pairs if b != 0]
    zero = len(pairs) - len(ratios)
    if not ratios:   # no ratio to take: said (a NaN ratio and verdict, not JSON, before)
        return {"baseline": baseline, "metric": metric, "ratio": None, "ci95": None,
                "verdict": f"{kind} vs {baseline}: no ratio, {baseline}'s {metric} is 0 on every seed"}
    mid, low, high = median_ci(ratios)
    text = verdict(kind, baseline, low, high, len(ratios), metric)
    if zero:
        text += f"; {zero} seed{'s' if zero != 1 else ''} left out, where {baseline}'s {metric} is 0"
    return {"baseline": baseline, "metric": metric, "ratio": mid, "ci95": [low, high],
            "ci_coverage": ci_coverage(len(ratios)), "verdict": text}


# Which way a summary figure is better, by fnmatch patterns over its dotted name or a parent's
# (stage_time_s.generate is read by stage_time_s); the first list to match wins, checked from the
# full name up. Not better either way: a hardware ceiling, counts, layouts, shares of the path.
# (Read off the name's ending, peak_memory_bytes, reward_wait_fraction, stage_time_s.* and
# staleness.* were said to beat a baseline where they were higher: an audit.)
NEITHER_WAY = ("roofline_tokens_per_s", "critical_path.share", "critical_path.steady.share",
               "staleness.length_budget", "staleness.segments_longest")   # a partial rollout's input, not a result
HIGHER_IS_BETTER = ("*_per_s", "*_per_s_per_device", "mfu", "*efficiency*", "*throughput*", "*goodput*",
                    "steady_busy_by_pool", "rollout.occupancy")
LOWER_IS_BETTER = ("*_s", "*bytes*", "peak_memory*", "*bubble*", "*wait*", "*idle*", "*stale*",
                   "*dropped*", "*low_batch*", "*delta*")


def better_direction(metric: str) -> str | None:
    """'higher' or 'lower' where the figure is better that way (the tables above), else None."""
    from fnmatch import fnmatchcase
    parts = metric.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        for direction, patterns in ((None, NEITHER_WAY), ("higher", HIGHER_IS_BETTER), ("lower", LOWER_IS_BETTER)):
            if any(fnmatchcase(name, pattern) for pattern in patterns):
                return direction
    return None


def verdict(kind: str, baseline: str, low: float, high: float, n: int, metric: str) -> str:
    """'stalesync beats colocated by 12-17% (steady_tokens_per_s, 95% CI over 32 seeds)'; for a
    figure better neither way (better_direction None), 'its X is 12-17% higher', no winner named."""
    direction = better_direction(metric)
    if n == 1:   # one ratio: no interval, so no word on which is ahead ('beats by 18.4-18.4%' before)
        return (f"{kind} vs {baseline}: {metric} {(low - 1) * 100:+.1f}% on one seed, with no interval to tell it "
                "from the noise (give --seeds 6 or more for a 95% one)")
    coverage = ci_coverage(n)
    where = (f"({metric}, 95% CI over {n} seeds)" if coverage >= 0.95
             else f"({metric}, {coverage:.0%} interval over {n} seed{'s' if n != 1 else ''}: the [min, max]; "
                  "6 or more seeds give 95%)")
    if direction != "higher":   # the metric's own change, as its ratio interval has it (not a rate's 1 - 1 / ratio)
        ahead, behind = (f"{kind} beats {baseline}", f"{kind} trails {baseline}") if direction else (
            f"{kind} vs {baseline}", f"{kind} vs {baseline}")
        if high < 1:
            return f"{ahead}: its {metric} is {_span(1 - high, 1 - low)}% lower {where}"
        if low > 1:
            return f"{behind}: its {metric} is {_span(low - 1, high - 1)}% higher {where}"
        return (f"{kind} vs {baseline}: {metric} {(low - 1) * 100:+.1f}% to {(high - 1) * 100:+.1f}%, "
                f"not larger than the noise {where}")
    gain_low, gain_high = low - 1, high - 1
    if gain_low > 0:
        return f"{kind} beats {baseline} by {_span(gain_low, gain_high)}% {where}"
    if gain_high < 0:
        return f"{kind} trails {baseline} by {_span(-gain_high, -gain_low)}% {where}"
    return (f"{kind} vs {baseline}: {gain_low * 100:+.1f}% to {gain_high * 100:+.1f}%, "
            f"not larger than the noise {where}")


def _span(low: float, high: float) -> str:
    """'12-17'; one decimal when the whole numbers would read the same ('37.6-38.4')."""
    if _pct(low) == _pct(high):
        return f"{low * 100:.1f}-{high * 100:.1f}"
    return f"{_pct(low)}-{_pct(high)}"


def _pct(fraction: float) -> str:
    value = round(fraction * 100, 9)   # 1 - 0.9 is 0.0999...: '10', not '10.0'
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"
