"""Capacity questions: the smallest size (or the cheapest configuration) that reaches a target.

A target is a throughput (`tokens_per_s`) or a step time (`step_time_s`). The search runs over the
ordered candidate values of one scenario key (`topology.supernodes`, `topology.nodes`, ...) and
asks a batch point function for results, so the sweep machinery (executors, resumable results
file) does the work. Cost figures come from the run summary and a price per device-hour.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import RlsimError
from .units import whole_number

SECONDS_PER_HOUR = 3600.0
STEPS_PER_REPORT = 1000  # the issue asks for device-hours per 1,000 steps
TOKENS_PER_REPORT = 1_000_000  # device-hours and cost per 1M trained tokens (the cheapest pick's measure)

# evaluate_batch([{key: value}, ...]) -> [(summary or None, error text), ...] in the same order
BatchFunction = Callable[[list[dict[str, Any]]], list[tuple[dict[str, Any] | None, str]]]


@dataclass(frozen=True)
class Target:
    """What "enough" means: at least `tokens_per_s`, and/or at most `step_time_s`."""

    tokens_per_s: float | None = None
    step_time_s: float | None = None

    def __post_init__(self) -> None:
        if self.tokens_per_s is None and self.step_time_s is None:
            raise RlsimError("a capacity target needs tokens/s or a step time", field="target",
                             fix="give --target-tokens-per-s X or --target-step-time-s S")
        for name in ("tokens_per_s", "step_time_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not (math.isfinite(value) and value > 0)):
                raise RlsimError(f"target {name} must be a positive number, got {value}", field=name,
                                 fix="give a positive number")

    def met_by(self, summary: Mapping[str, Any] | None) -> bool:
        if not summary:
            return False
        if self.tokens_per_s is not None and not steady_tokens_per_s(summary) >= self.tokens_per_s:
            return False
        if self.step_time_s is not None and not steady_step_time_s(summary) <= self.step_time_s:
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.tokens_per_s is not None:
            parts.append(f">= {self.tokens_per_s:,.0f} tokens/s (steady)")
        if self.step_time_s is not None:
            parts.append(f"<= {self.step_time_s:,.1f} s per step (steady)")
        return " and ".join(parts)


# A capacity question is about the run's steady state: the warm-up step (StaleSync's partial batch,
# a pipeline filling) is paid once, so whole-run figures made the answer depend on --iterations
# (8 nodes at 2 iterations, 4 at 8 for one StaleSync target). A summary without the steady figures
# (a hand-made one) is read at its whole-run figures.
def steady_figure(summary: Mapping[str, Any], key: str) -> Any:
    """The summary's steady-state figure ``steady_<key>``, else its whole-run ``<key>`` (None if neither)."""
    value = summary.get(f"steady_{key}")
    return value if isinstance(value, (int, float)) else summary.get(key)


def steady_tokens_per_s(summary: Mapping[str, Any]) -> float:
    return float(steady_figure(summary, "tokens_per_s") or 0.0)


def steady_step_time_s(summary: Mapping[str, Any]) -> float:
    value = steady_figure(summary, "step_time_s")
    return math.inf if value is None else float(value)


def price_per_device_hour(summary: Mapping[str, Any], prices: float | Mapping[str, float] | None) -> float | None:
    """The price of one device-hour for this run: one number for every device, or a mapping from
    device catalog name (`h100`, `ascend-910c`) to price, matched against the summary's device kind;
    a kind the mapping leaves out (or every kind, without ``prices``) takes its device entry's
    `price_per_hour` where the topology gives one (the summary's device_prices; it was read nowhere).
    ``summary`` may be a SimulationResult, whose device kinds and counts are beside its summary."""
    _check_prices(prices)
    if isinstance(prices, (int, float)):
        return float(prices)
    if _is_result(summary):   # its device kinds, counts and prices are beside its summary
        summary = {**summary.summary, "device_kinds": list(summary.device_kinds),
                   "device_counts": dict(getattr(summary, "device_counts", {}) or {}),
                   "device_prices": dict(getattr(summary, "device_prices", {}) or {})}
    own = summary.get("device_prices") or {}
    if prices is None and not own:
        return None
    given = prices or {}
    kinds = _device_kinds(summary)
    if not kinds:
        raise RlsimError("cannot price this run: its summary names no device kind", field="prices",
                         fix="pass the SimulationResult (it holds the device kinds) rather than its summary, or "
                             "give one price per device-hour for every device instead of a mapping")
    found = {k: _price_of(k, given, own) for k in kinds}
    missing = [k for k, price in found.items() if price is None]
    if missing:
        known = sorted({**own, **given})
        raise RlsimError(f"no price for device {missing[0]!r}", field="prices",
                         fix=f"add a price for {missing[0]} (--price {missing[0]}=USD, or price_per_hour in its "
                             f"device entry; known: {', '.join(known) or 'none'})")
    # A mixed cluster: each kind's price weighed by its count (a sweep point's device_counts); where
    # the summary has no counts, the most expensive kind rather than an under-reported cost.
    counts = summary.get("device_counts")
    if isinstance(counts, Mapping) and counts and set(counts) == set(kinds):
        return sum(float(found[k]) * n for k, n in counts.items()) / sum(counts.values())
    return max(float(found[k]) for k in kinds)


def _is_result(summary: Any) -> bool:
    """Whether ``summary`` is a SimulationResult (its summary and device kinds beside), not a summary."""
    return hasattr(summary, "summary") and hasattr(summary, "device_kinds")


def _check_prices(prices: Any) -> None:
    """None, one number, or a mapping of device kind -> number: the --price text ('h100=2.5') raised a
    TypeError ('string indices') from the lookup, and a text or a bool in a mapping was read as a number."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if prices is None or number(prices):
        return
    if not isinstance(prices, Mapping) or not all(isinstance(k, str) and number(v) for k, v in prices.items()):
        raise RlsimError(f"prices are one price per device-hour or a mapping of device kind -> price, got {prices!r}",
                         field="prices", fix="e.g. prices=2.5 or prices={'h100': 2.5, 'ascend-910c': 2.0}")


def _price_of(kind: str, given: Mapping[str, float], own: Mapping[str, float]) -> float | None:
    """A kind's price: the one given for it, else its device entry's price_per_hour, else the one
    given for its device name (a kind NAME@GROUP is a modified device of that name: Topology._kinds);
    None for none."""
    name = kind.rpartition("@")[0]
    for table, key in ((given, kind), (own, kind), (given, name)):
        if key and key in table:
            return table[key]
    return None


def _device_kinds(summary: Mapping[str, Any]) -> list[str]:
    for key in ("device_kinds", "device_kind", "device"):
        value = summary.get(key)
        if isinstance(value, str):
            return [value]
        if isinstance(value, Mapping):
            return sorted(value)
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
    return []


def cost_fields(summary: Mapping[str, Any], price: float | None = None) -> dict[str, float | None]:
    """Device-hours per 1,000 steps, and with a price the cost per step and per hour, at the steady
    figures. ``summary`` may be a SimulationResult (as price_per_device_hour takes one)."""
    if _is_result(summary):   # not subscriptable
        summary = summary.summary
    if not isinstance(summary, Mapping) or not isinstance(summary.get("devices"), numbers.Real):   # a KeyError before
        raise RlsimError("cannot cost this run: its summary has no device count ('devices')", field="devices",
                         fix="pass a run summary (simulate(...).summary, a sweep row) or the SimulationResult")
    if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float))
                              or not math.isfinite(price) or price < 0):   # negative and NaN costs came out
        raise RlsimError(f"a price per device-hour must be a finite number >= 0, got {price!r}", field="price",
                         fix="e.g. 2.5")
    devices = float(summary["devices"])
    step_s = steady_step_time_s(summary)
    tokens_per_s = steady_tokens_per_s(summary)
    per_million = devices * TOKENS_PER_REPORT / tokens_per_s / SECONDS_PER_HOUR if tokens_per_s > 0 else None
    out: dict[str, float | None] = {
        "device_hours_per_1000_steps": devices * step_s * STEPS_PER_REPORT / SECONDS_PER_HOUR,
        # per trained token: comparable across schedules that train different shares of a batch per
        # step (StaleSync on split pools with staleness 0 trains half a batch: its device-hours per step look cheap)
        "device_hours_per_1m_tokens": per_million,
        "price_per_device_hour": price,
        "cost_per_hour": None,
        "cost_per_step": None,
        "cost_per_1m_tokens": None,
    }
    if price is not None:
        out["cost_per_hour"] = devices * price
        out["cost_per_step"] = devices * price * step_s / SECONDS_PER_HOUR
        out["cost_per_1m_tokens"] = per_million * price if per_million is not None else None
    return out


@dataclass
class Probe:
    value: Any
    summary: dict[str, Any] | None
    error: str
    meets: bool


# Diagnosis of a search that found nothing (CapacityAnswer.notes). Not modelling constants: they
# decide when the answer says "a larger grid will not help" instead of "widen the grid".
# A size step that turns into less than this share of its device growth as throughput is a plateau
# (the fixed batch, not the cluster, bounds the step: more devices only idle).
PLATEAU_SCALING_EFFICIENCY = 0.25
# A larger size slower than a smaller one by more than this share breaks bisection's assumption.
MONOTONE_TOLERANCE = 0.02


@dataclass
class CapacityAnswer:
    key: str
    target: Target
    value: Any | None                  # the smallest candidate that meets the target; None if none does
    summary: dict[str, Any] | None     # its run summary (with cost fields)
    probes: list[Probe] = field(default_factory=list)  # every evaluated candidate, in candidate order
    candidates: list[Any] = field(default_factory=list)  # every candidate value, sorted

    def _sized(self) -> list[Probe]:
        return [p for p in self.probes if p.summary and steady_tokens_per_s(p.summary) and p.summary.get("devices")]

    @property
    def plateau(self) -> str | None:
        """When nothing met the target and throughput barely grows from the smallest to the largest
        size evaluated: why a larger grid will not help (the batch, not the cluster, bounds the step)."""
        ok = self._sized()
        if self.value is not None or len(ok) < 2:
            return None
        first, last = ok[0].summary, ok[-1].summary
        rate_first, rate_last = steady_tokens_per_s(first), steady_tokens_per_s(last)
        gain, growth = rate_last / rate_first, last["devices"] / first["devices"]
        if growth <= 1 or (gain - 1) >= PLATEAU_SCALING_EFFICIENCY * (growth - 1):
            return None
        from .metrics import warm_up_only
        if warm_up_only(first):   # one iteration of a schedule that runs ahead: its figures are the warm-up's
            return (f"the figures are each run's one warm-up step ({first.get('schedule')} at one iteration: a "
                    f"partial first batch), not a steady state, so neither the answer nor a plateau can be read "
                    f"from them: run 2 or more iterations (--iterations)")
        return (f"throughput barely grows with {self.key}: {rate_first:,.0f} tokens/s at "
                f"{ok[0].value}, {rate_last:,.0f} at {ok[-1].value} ({gain:.2f}x for {growth:.2f}x "
                f"the devices); the batch, not the cluster, bounds the step, so a larger grid will not reach "
                f"{self.target.describe()}: grow the batch with the size (workload.prompts_per_step) or change "
                f"the schedule")

    @property
    def notes(self) -> list[str]:
        """Why the answer may not be what a larger grid would give: throughput that falls with the
        size (bisection assumes more is never worse) or stops growing with it (the plateau)."""
        ok, notes = self._sized(), []
        worse = [(a, b) for a, b in zip(ok, ok[1:], strict=False)
                 if steady_tokens_per_s(b.summary) < (1 - MONOTONE_TOLERANCE) * steady_tokens_per_s(a.summary)]
        if worse:
            a, b = worse[0]
            notes.append(f"throughput falls from {self.key}={a.value} ({steady_tokens_per_s(a.summary):,.0f} tokens/s) "
                         f"to {b.value} ({steady_tokens_per_s(b.summary):,.0f}): bisection assumes a larger size is never "
                         f"worse; check every value with --search scan")
        if self.plateau:
            notes.append(self.plateau)
        skipped = self._skipped_below_an_error()
        if skipped:
            notes.append(skipped)
        return notes

    def _skipped_below_an_error(self) -> str | None:
        """Bisection takes a candidate that raised an error as too small (it does not fit) and runs
        none below it: right for a size, not for a key whose errors are not at one end (a tp that does
        not divide the heads between two that run)."""
        probed = [p.value for p in self.probes]
        errored = [p for p in self.probes if p.error]
        below = [v for v in self.candidates if errored and v < errored[-1].value and v not in probed]
        if not below:
            return None
        return (f"{self.key}={errored[-1].value} raised an error ({errored[-1].error}); bisection took it as too "
                f"small and ran none of the {len(below)} smaller value(s) ({', '.join(map(str, below[:5]))}"
                f"{', ...' if len(below) > 5 else ''}): if errors are not only at the small end, check every "
                "value with --search scan")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "target": {"tokens_per_s": self.target.tokens_per_s,
                                            "step_time_s": self.target.step_time_s},
                "value": self.value, "found": self.value is not None, "summary": self.summary,
                "plateau": self.plateau is not None, "notes": self.notes,
                "evaluated": [{"value": p.value, "meets_target": p.meets, "error": p.error,
                               "tokens_per_s": (p.summary or {}).get("tokens_per_s"),
                               "step_time_s": (p.summary or {}).get("step_time_s"),
                               "steady_tokens_per_s": (p.summary or {}).get("steady_tokens_per_s"),
                               "steady_step_time_s": (p.summary or {}).get("steady_step_time_s"),
                               "devices": (p.summary or {}).get("devices")} for p in self.probes]}


def find_smallest(key: str, candidates: Sequence[Any], target: Target, evaluate_batch: BatchFunction, *,
                  strategy: Literal["bisect", "scan"] = "bisect", width: int = 1,
                  prices: float | Mapping[str, float] | None = None) -> CapacityAnswer:
    """The smallest candidate value of `key` whose run meets `target`.

    `bisect` assumes more is never worse (if value v meets the target, every larger one does); it
    probes `width` evenly spaced candidates per round (set width to the number of workers), so it
    needs about log_(width+1)(n) rounds. `scan` evaluates every candidate and assumes nothing. A
    candidate that raises a user error (it does not fit in memory) counts as not meeting the target.
    """
    _check_target(target)
    given_width, width = width, whole_number(width)   # "2": a TypeError mid-search; np.int64(2) is 2
    if width is None or width < 1:
        raise RlsimError(f"width must be a whole number >= 1 (candidates probed a round), got {given_width!r}",
                         field="width", fix="e.g. width=2 (one probe per worker)")
    if isinstance(candidates, (str, bytes, Mapping)) or not isinstance(candidates, Iterable):   # "1,2,4": its letters
        raise RlsimError(f"the candidate values of {key} must be a list, got {type(candidates).__name__} "
                         f"{candidates!r}", field=key, fix="e.g. [1, 2, 4, 8]")
    try:
        values = sorted(candidates)
    except TypeError:
        raise RlsimError("capacity search needs candidate values that can be ordered (sizes)", field=key,
                         fix="search a size key such as topology.nodes or topology.supernodes") from None
    if not values:
        raise RlsimError("no candidate values to search", field=key, fix="give at least one value")
    results: dict[int, Probe] = {}

    def probe(indices: list[int]) -> None:
        todo = [i for i in indices if i not in results]
        if not todo:
            return
        for i, (summary, error) in zip(todo, evaluate_batch([{key: values[i]} for i in todo]), strict=True):
            results[i] = Probe(values[i], summary, error, target.met_by(summary))

    if strategy == "scan":
        probe(list(range(len(values))))
    elif strategy == "bisect":
        lo, hi = -1, len(values)   # invariant: values[lo] fails (or lo = -1), values[hi] meets (or hi = n)
        while hi - lo > 1:
            inside = hi - lo - 1
            k = max(1, min(width, inside))
            picks = sorted({lo + 1 + (j + 1) * inside // (k + 1) for j in range(k)} or {lo + 1})
            picks = [min(max(p, lo + 1), hi - 1) for p in picks]
            probe(picks)
            for i in picks:
                if results[i].meets:
                    hi = min(hi, i)
            lo = max([i for i in picks if i < hi and not results[i].meets], default=lo)
    else:
        raise RlsimError(f"unknown search strategy {strategy!r}", field="strategy", fix="use bisect or scan")

    meeting = [i for i in sorted(results) if results[i].meets]
    best = meeting[0] if meeting else None
    summary = None
    if best is not None:
        s = dict(results[best].summary or {})
        s.update(cost_fields(s, price_per_device_hour(s, prices)))
        summary = s
    return CapacityAnswer(key, target, values[best] if best is not None else None, summary,
                          [results[i] for i in sorted(results)], values)


def _check_target(target: Any) -> None:
    """A capacity target is a Target: a number raised an AttributeError ('met_by') from inside."""
    if not isinstance(target, Target):
        raise RlsimError(f"a capacity target is a Target, got {type(target).__name__} {target!r}", field="target",
                         fix="e.g. Target(tokens_per_s=60_000) or Target(step_time_s=120)")


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def cheapest(rows: Sequence[Mapping[str, Any]], target: Target,
             prices: float | Mapping[str, float] | None = None) -> dict[str, Any] | None:
    """Among run summaries (e.g. sweep rows), the cheapest that meets the target.

    With a price for every row that meets the target (``prices``, or its device entries'
    price_per_hour: the summary's device_prices): lowest cost per trained token (per 1M tokens: the
    cost of a fixed amount of training, also when a schedule trains only part of a batch per step),
    ties to fewer devices. Without: fewest devices, ties to more trained tokens/s. None if no row
    meets the target. (The entries' prices priced each row's cost columns but the pick went by
    device count alone: the dearer configuration picked beside its own cost figures.)
    """
    _check_target(target)
    meeting = []
    for row in rows:
        if row.get("error") or not target.met_by(row):
            continue
        enriched = dict(row)
        enriched.update(cost_fields(row, price_per_device_hour(row, prices)))
        meeting.append(enriched)
    priced = prices is not None or (meeting and all(r["price_per_device_hour"] is not None for r in meeting))
    best: tuple | None = None
    chosen: dict[str, Any] | None = None
    for row in meeting:
        if priced:
            key = (_or_inf(row["cost_per_1m_tokens"]), row["devices"], -steady_tokens_per_s(row))
        else:
            key = (row["devices"], -steady_tokens_per_s(row))
        if best is None or key < best:
            best, chosen = key, row
    return chosen
