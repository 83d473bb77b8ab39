"""Sensitivity of one figure to scenario keys: one-at-a-time swings (the tornado) and, with SALib
installed, first-order and total Sobol indices over the same ranges."""
from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .. import presets
from ..errors import RlsimError
from ..overrides import set_dotted
from ..units import whole_number
from .distributions import get_dotted, put_dotted
from .intervals import metric_figure
from .replicas import ReplicaPlan, check_runs, plan_replicas, run_many

DEFAULT_METRIC = "steady_tokens_per_s"
DEFAULT_SAMPLES = 4
# key -> (factor low, factor high) around the base value; efficiencies are capped at 1. The GEMM
# efficiency reaches down to 0.72 x: Megatron-Core's published H100 rates (validation V7) are met at
# 0.54 of peak against the H100's measured 0.698 (docs/validation.md, the capacity guide's advice),
# so a range that stopped higher left out the value the evidence points to.
DEFAULT_VARY: dict[str, tuple[float, float]] = {
    "workload.response_length.median": (0.75, 1.25),
    "workload.response_length.sigma": (0.75, 1.25),
    "workload.inference.step_overhead_s": (0.5, 2.0),
    "topology.device.gemm_efficiency": (0.72, 1.15),
    "topology.device.hbm_efficiency": (0.85, 1.15),
    "topology.scaleup.efficiency": (0.85, 1.15),
    "topology.scaleout.efficiency": (0.85, 1.15),
}
INTEGER_KEYS = ("workload.response_length.median", "workload.prompt_length.median")
COLUMNS = ["key", "low", "high", "figure_low", "figure_high", "swing", "rank", "sobol_first", "sobol_first_ci95",
           "sobol_total", "sobol_total_ci95"]


def parse_vary(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    """['workload.response_length.median=600..1100'] -> {key: (600.0, 1100.0)}."""
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        key, _, raw = item.partition("=")
        low, sep, high = raw.partition("..")
        try:
            pair = (float(low), float(high))
        except ValueError:
            pair = (math.nan, math.nan)
        if not key.strip() or not sep or not all(math.isfinite(v) for v in pair) or pair[0] > pair[1]:
            raise RlsimError(f"cannot read --vary {item!r}", field="--vary",
                             fix="write KEY=LOW..HIGH with LOW <= HIGH, e.g. workload.response_length.median=600..1100")
        if key.strip() in out:   # the last range won without a word
            raise RlsimError(f"--vary gives {key.strip()} twice", field="--vary", fix="give each key one range")
        out[key.strip()] = pair
    return out


# Keys a varied run does not read: the seeds come from --seeds (a swing of 0 and Sobol indices of
# 0 before, for a key that does move the figure)
NOT_VARIED = {"seed": "the seeds are --seeds N (the figure is their median)",
              "replicas": "the replicas are --seeds N"}


def given_ranges(vary: Any) -> dict[str, tuple[float, float]] | None:
    """`vary` as sensitivity takes it (a mapping key -> (low, high), 'KEY=LOW..HIGH' items, one such
    string, or None for the default set) as checked ranges: two finite numbers, LOW <= HIGH."""
    ranges = _read_ranges(vary)
    for key in ranges or ():
        from ..scenario import check_top_level
        check_top_level({key.split(".")[0]: None}, "--vary")   # 'foo.bar' said as --grid says it
        if key in NOT_VARIED:
            raise RlsimError(f"{key} cannot be varied: {NOT_VARIED[key]}", field="--vary",
                             fix=f"drop --vary {key}=...; give --seeds N for N seeds")
    return ranges


def _read_ranges(vary: Any) -> dict[str, tuple[float, float]] | None:
    if vary is None:
        return None
    if isinstance(vary, str):
        return parse_vary([vary])
    if not isinstance(vary, Mapping):
        if isinstance(vary, Sequence) and all(isinstance(item, str) for item in vary):
            return parse_vary(vary)
        raise RlsimError(f"vary must map keys to (low, high) or list 'KEY=LOW..HIGH' items, got {vary!r}"[:200],
                         field="--vary", fix="e.g. {'workload.response_length.median': (600, 1100)}")
    out: dict[str, tuple[float, float]] = {}
    for key, pair in vary.items():
        try:
            low, high = (float(x) for x in pair)
        except (TypeError, ValueError):
            low = high = math.nan
        if not isinstance(key, str) or not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise RlsimError(f"cannot read the range {pair!r} of {key!r}", field="--vary",
                             fix="give (LOW, HIGH): two finite numbers with LOW <= HIGH")
        out[key] = (low, high)
    return out


def set_key(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key of a scenario mapping; `topology.device.X` keeps the topology's device (by name)."""
    if key.startswith("topology.device."):
        topo = data.setdefault("topology", {})
        device = topo.get("device", _preset_value(topo, "device"))
        if isinstance(device, str):
            topo["device"] = {"name": device}
        elif isinstance(device, Mapping):
            topo["device"] = dict(device)
    set_dotted(data, key, value)


def _preset_value(topology: Mapping[str, Any], key: str) -> Any:
    name = topology.get("preset")
    if not name:
        return None
    try:
        return get_dotted(presets.resolve("topologies", name)[0], key)
    except (KeyError, TypeError):
        return None


def _scenario_number(plan: ReplicaPlan, key: str, getters: tuple[Any, ...] | None = None) -> int | float | None:
    """The first number a key has in the scenario (the file, the validated workload, the topology
    preset, the device), as it is there; None when none of them gives one."""
    for getter in getters or (_from_data, _from_validated, _from_topology):
        value = getter(plan, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def base_value(plan: ReplicaPlan, key: str) -> float:
    """The value a key has in the scenario (the validated workload, the topology preset, the device)."""
    value = _scenario_number(plan, key)
    if value is not None:
        return float(value)
    raise RlsimError(f"no base value found for {key!r} to vary around", source=plan.source, field=key,
                     fix=f"give the range: --vary {key}=LOW..HIGH")


def _from_data(plan: ReplicaPlan, key: str) -> Any:
    try:
        return get_dotted(plan.data, key)
    except (KeyError, TypeError):
        return None


def _from_validated(plan: ReplicaPlan, key: str) -> Any:
    node: Any = plan.scenario(0)
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
        if node is None:
            return None
    return node


def _from_topology(plan: ReplicaPlan, key: str) -> Any:
    if not key.startswith("topology."):
        return None
    rest = key[len("topology."):]
    group, _, field = rest.partition(".device.") if rest.startswith("groups.") else ("", "", "")
    if rest.startswith("device.") or field:
        from ..hardware.topology import load_topology
        topology = load_topology(plan.scenario(0).topology)
        spec = topology.device_groups().get(group[len("groups."):]) if field else topology.device_spec(0)
        return getattr(spec, field or rest[len("device."):], None) if spec is not None else None
    return _preset_value(plan.data.get("topology", {}), rest)


def default_ranges(plan: ReplicaPlan, distributions: Sequence[Any] | None = None) -> dict[str, tuple[float, float]]:
    """DEFAULT_VARY's factors around each base value, plus every distribution's 95% range
    (``distributions``: those of the plan before centring; None: the plan's)."""
    out: dict[str, tuple[float, float]] = {}
    groups = _device_groups(plan)
    for default_key, (f_low, f_high) in DEFAULT_VARY.items():
        # a mixed cluster's device field, group by group around each group's own value (one value
        # for every kind around the first device's gave the others another factor)
        keys = ([f"topology.groups.{name}.{default_key[len('topology.'):]}" for name in groups]
                if groups and default_key.startswith("topology.device.") else [default_key])
        for key in keys:
            value = base_value(plan, key)
            high = value * f_high
            if key.endswith("efficiency"):
                high = min(1.0, high)
            ends = (_tidy(value * f_low), _tidy(high))
            # a whole-number key's ends as its runs take them (_with rounds): a median of 1001 showed
            # 750.75..1251.25 for runs at 751 and 1251
            out[key] = (float(round(ends[0])), float(round(ends[1]))) if key in INTEGER_KEYS else ends
    for dist in plan.distributions if distributions is None else distributions:
        out[dist.key] = dist.bounds()
    return out


def _tidy(value: float) -> float:
    """A range end to 12 significant digits: 0.92, not the product's 0.9199999999999999."""
    return float(f"{value:.12g}")


def _device_groups(plan: ReplicaPlan) -> list[str]:
    """The group names of a topology whose groups hold different devices ([] for one kind)."""
    from ..hardware.topology import load_topology
    try:
        return list(load_topology(plan.scenario(0).topology).device_groups())
    except RlsimError:   # a topology it cannot read: the run says why
        return []


def _whole_number_keys(plan: ReplicaPlan, keys: Sequence[str]) -> frozenset[str]:
    """The keys whose scenario value is a whole number (topology.nodes, prompts_per_step) or that are
    listed as such (the length medians): varied over whole numbers (their fields refuse 1.0). Read
    once per key, not per varied run."""
    out = set(INTEGER_KEYS) & set(keys)
    for key in set(keys) - out:
        # a device's fields are rates and sizes; a topology it cannot read (costs given in its place)
        # leaves the key a number
        getters = (_from_data, _from_validated) + (() if key.startswith("topology.device.") else (_from_topology,))
        try:
            value = _scenario_number(plan, key, getters)
        except RlsimError:
            value = None
        if isinstance(value, int):
            out.add(key)
    return frozenset(out)


def _base_within(plan: ReplicaPlan, key: str, span: tuple[float, float]) -> bool:
    """Whether the key's value in the (centred) base scenario lies within its varied range (not
    known: taken as within, the range was made around it)."""
    try:
        value = _scenario_number(plan, key)   # the topology's device too (a gemm_efficiency range away from 0.75)
    except RlsimError:
        return True
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    return min(span) - 1e-12 <= float(value) <= max(span) + 1e-12


def _check_whole_ends(ranges: Mapping[str, tuple[float, float]], whole: frozenset[str]) -> None:
    """A given range of a whole-number key ends on whole numbers: its runs round the values (a
    1.5..2.5 range of topology.nodes ran 2 nodes at both ends and showed no swing)."""
    for key in sorted(whole & set(ranges)):
        low, high = ranges[key]
        if not (float(low).is_integer() and float(high).is_integer()):
            raise RlsimError(f"{key} takes whole numbers, and the range {low:g}..{high:g} ends between them",
                             field="--vary", fix=f"give whole ends, e.g. --vary {key}={math.floor(low)}..{math.ceil(high)}")


def _with(plan: ReplicaPlan, values: Mapping[str, float], whole: frozenset[str]) -> ReplicaPlan:
    data = copy.deepcopy(plan.data)
    for key, value in values.items():
        set_key(data, key, int(round(value)) if key in whole else float(value))
    return dataclasses.replace(plan, data=data)


def sensitivity(spec: Any = None, vary: Mapping[str, tuple[float, float]] | Sequence[str] | None = None, *,
                seeds: int | None = None, metric: str = DEFAULT_METRIC, samples: int | None = DEFAULT_SAMPLES,
                jobs: int = 1, costs: Any = None, **keywords: Any) -> pd.DataFrame:
    """One row per varied key (COLUMNS), ranked by swing; `frame.attrs` holds the base figure,
    the metric and the seeds. `vary` maps key -> (low, high) or is a list of 'KEY=LOW..HIGH';
    None takes the default set. `samples` (0 or None: skip) is the Sobol base sample count."""
    from ..api import check_scenario_keywords
    check_scenario_keywords(keywords, "sensitivity")   # a typo raised a TypeError naming scenario_data
    ranges = given_ranges(vary)
    given_samples, samples = samples, None if samples is None else whole_number(samples)   # np.int64(8) is 8
    if given_samples is not None and (samples is None or samples < 0):
        raise RlsimError(f"samples must be a whole number >= 0 (0: no Sobol indices), got {given_samples!r}",
                         field="--samples", fix="e.g. --samples 64")
    plan = plan_replicas(spec, seeds=seeds, **keywords)
    distributions = plan.distributions
    plan = _centred(plan)
    given = bool(ranges)
    # the default set adds the scenario's own distributions (read before centring cleared them)
    ranges = dict(ranges) if ranges else default_ranges(plan, distributions)
    keys = list(ranges)
    # an integer law's key is whole whatever its centred value reads as
    whole = _whole_number_keys(plan, keys) | {d.key for d in distributions if d.integer and d.key in ranges}
    if given:
        _check_whole_ends(ranges, whole)
    _check_design_runs(plan, len(keys), samples)
    # the base first: a metric that is no figure of the summary is said before the other runs
    base = run_many([plan], jobs=jobs, costs=costs)[0]
    base_figure = metric_figure(base, metric)
    plans = [_with(plan, {k: ranges[k][side]}, whole) for k in keys for side in (0, 1)]
    figures = [base_figure] + [metric_figure(r, metric) for r in run_many(plans, jobs=jobs, costs=costs)]
    rows = []
    for i, key in enumerate(keys):
        f_low, f_high = figures[1 + 2 * i], figures[2 + 2 * i]
        # the figure's range over low, base and high where the key's base value lies in its range
        # (|high - low| when the base figure lies between them, not 0 where both ends move the figure
        # the same way: a knob with an optimum inside); |high - low| where the range leaves the base
        # out (its jump from the base is not the key's swing over the range)
        inner = _base_within(plan, key, ranges[key])
        points = (f_low, f_high, figures[0]) if inner else (f_low, f_high)
        rows.append({"key": key, "low": ranges[key][0], "high": ranges[key][1], "figure_low": f_low,
                     "figure_high": f_high, "swing": max(points) - min(points)})
    frame = pd.DataFrame(rows, columns=COLUMNS[:6])
    frame["rank"] = frame["swing"].rank(ascending=False, method="first").astype(int)
    indices = sobol_indices(plan, ranges, metric, samples, jobs, costs, whole)
    for column in SOBOL_COLUMNS:
        frame[column] = indices[column]
    frame = frame[COLUMNS]
    frame = frame.sort_values("rank", kind="stable").reset_index(drop=True)
    from ..metrics import warm_up_only
    # a default factor range around a base of 0 is 0..0: its swing of 0 is no finding (said in a note)
    collapsed = [] if given else [k for k, (low, high) in ranges.items() if low == high == 0
                                  and k not in {d.key for d in distributions}]
    frame.attrs.update({"metric": metric, "base": figures[0], "seeds": plan.n, "samples": samples or 0,
                        "warm_up_only": any(warm_up_only(summary) for summary in base), "collapsed": collapsed})
    return frame


def _check_design_runs(plan: ReplicaPlan, keys: int, samples: int | None) -> None:
    """limits.max_runs against the whole design, before its first run: (1 + 2 keys) x seeds
    one-at-a-time runs and, with SALib and samples > 0, samples x (keys + 2) x seeds Sobol runs
    (the Sobol part was refused after the one-at-a-time runs had been done)."""
    from importlib.util import find_spec
    swings = (1 + 2 * keys) * plan.n
    sobol = samples * (keys + 2) * plan.n if samples and find_spec("SALib") is not None else 0
    what = (f"this design ({swings:,} one-at-a-time runs and {sobol:,} for the Sobol design of {samples:,} samples)"
            if sobol else "this design")
    check_runs(plan.data, plan.source, swings + sobol, what, "--samples" if sobol else "limits.max_runs")


def _centred(plan: ReplicaPlan) -> ReplicaPlan:
    """Distribution values replaced by the middle of their 95% range (the base of the swings); an
    integer law's middle rounded half up to a whole number (4..9 -> 7: its key refused 6.5)."""
    if not plan.distributions:
        return plan
    data = copy.deepcopy(plan.data)
    for dist in plan.distributions:
        low, high = dist.bounds()
        middle = (low + high) / 2
        put_dotted(data, dist.key, math.floor(middle + 0.5) if dist.integer else middle)
    return dataclasses.replace(plan, data=data, distributions=[], draws=[])


# Slack of a Sobol index estimate beyond its range before it is called noise (the estimators are
# unbiased but unbounded: a few base samples give indices past 1 or a first-order above the total).
SOBOL_SLACK = 0.05


def sobol_sample_note(samples: int | None) -> str:
    """'' or the note that a Sobol design of `samples` base samples, not a power of 2, loses the
    sequence's balance (SALib's own UserWarning, said once in rlsim's words)."""
    if not samples or samples & (samples - 1) == 0:
        return ""
    return (f"--samples {samples} is not a power of 2: the Sobol sequence is balanced only at powers of 2 "
            f"(give {1 << (samples - 1).bit_length()} or {1 << (samples.bit_length() - 1)})")


def collapsed_note(frame: pd.DataFrame) -> str:
    """'' or the note naming the default keys whose base value is 0, so their factor range is 0..0
    and their swing of 0 says nothing of their effect."""
    keys = frame.attrs.get("collapsed") or []
    if not keys:
        return ""
    them = "its" if len(keys) == 1 else "their"
    return (f"{', '.join(keys)} {'is' if len(keys) == 1 else 'are'} 0 in the scenario, so {them} default range "
            f"(a factor of the base value) is 0..0 and {them} swing of 0 says nothing of {them} effect; give a "
            f"range, e.g. --vary {keys[0]}=LOW..HIGH")


def sobol_outside(frame: pd.DataFrame) -> str:
    """The keys whose Sobol estimates leave [0, 1] or have first-order above total by more than
    SOBOL_SLACK, as 'key first / total' items; '' when none (or no indices were computed)."""
    out = []
    for _, row in frame.iterrows():
        first, total = row.get("sobol_first"), row.get("sobol_total")
        if first is None or total is None or pd.isna(first) or pd.isna(total):
            continue
        if min(first, total) < -SOBOL_SLACK or max(first, total) > 1 + SOBOL_SLACK or first > total + SOBOL_SLACK:
            out.append(f"{row['key']} {first:.2f} / {total:.2f}")
    return ", ".join(out)


# SALib's bootstrap resamples behind each index's 95% interval (its default count)
SOBOL_RESAMPLES = 100
# the frame's Sobol columns and SALib's names for them (the *_ci95 are the intervals' half-widths)
SOBOL_COLUMNS = {"sobol_first": "S1", "sobol_first_ci95": "S1_conf", "sobol_total": "ST",
                 "sobol_total_ci95": "ST_conf"}


def _design_bounds(span: tuple[float, float], whole: bool) -> list[float]:
    """A key's bounds in the Sobol problem: its range (a held key's widened by 1e-12, SALib refuses an
    empty one); a whole-number key's widened by half a unit each side, so that rounding gives each
    whole value of LOW..HIGH one unit of the design (rounding draws over LOW..HIGH gave the two ends
    half bins: 0.25 / 0.5 / 0.25 over 7..9)."""
    low, high = span
    if high <= low:
        return [low, low + 1e-12]
    return [low - 0.5, high + 0.5] if whole else [low, high]


def _design_value(value: float, span: tuple[float, float], whole: bool) -> float:
    """A design point's value of a key: a whole-number key's rounded half up into LOW..HIGH."""
    if not whole or span[1] <= span[0]:
        return float(value)
    return float(min(max(math.floor(value + 0.5), span[0]), span[1]))


def sobol_indices(plan: ReplicaPlan, ranges: Mapping[str, tuple[float, float]], metric: str,
                  samples: int | None, jobs: int, costs: Any,
                  whole: frozenset[str] = frozenset()) -> dict[str, list[float | None]]:
    """SOBOL_COLUMNS -> one value per key of ``ranges`` (in its order): first-order and total Sobol
    indices (SALib, Saltelli sampling without second order, seeded) and the half-widths of their 95%
    bootstrap intervals; None everywhere when SALib is missing or samples is 0. `whole`: the keys
    varied over whole numbers."""
    given = list(ranges)
    keys = sorted(given)   # the design's columns in one order whatever the --vary order (Saltelli's points follow it)
    if not samples or samples < 1:   # before SALib's import (scipy.stats: seconds): no design to run
        return {column: [None] * len(keys) for column in SOBOL_COLUMNS}
    try:
        from SALib.analyze import sobol as sobol_analyze
        from SALib.sample import sobol as sobol_sample
    except ImportError:
        return {column: [None] * len(keys) for column in SOBOL_COLUMNS}
    problem = {"num_vars": len(keys), "names": keys, "bounds": [_design_bounds(ranges[key], key in whole) for key in keys]}
    with warnings.catch_warnings():   # not a power of 2: said once in rlsim's words (sobol_sample_note)
        warnings.filterwarnings("ignore", message=".*balance properties of Sobol")
        points = sobol_sample.sample(problem, int(samples), calc_second_order=False, seed=plan.seeds[0])
    plans = [_with(plan, {key: _design_value(value[key], ranges[key], key in whole) for key in given}, whole)
             for value in (dict(zip(keys, row, strict=True)) for row in points)]
    y = np.array([metric_figure(r, metric) for r in run_many(plans, jobs=jobs, costs=costs)])
    if np.ptp(y) == 0:
        return {column: [0.0] * len(keys) for column in SOBOL_COLUMNS}
    # SALib seeds its bootstrap only with a truthy seed (else numpy's global RNG: the intervals moved
    # from run to run at seed 0, the default; a trial): the scenario's seed + 1, never 0
    result = sobol_analyze.analyze(problem, y, calc_second_order=False, num_resamples=SOBOL_RESAMPLES,
                                   seed=plan.seeds[0] + 1)
    # a key held at one value explains nothing: 0, not the estimators' rounding noise (-1e-14)
    fixed = {key: high <= low for key, (low, high) in ranges.items()}
    out: dict[str, list[float | None]] = {}
    for column, name in SOBOL_COLUMNS.items():
        by_key = dict(zip(keys, result[name], strict=True))
        out[column] = [0.0 if fixed[key] else float(by_key[key]) for key in given]
    return out

