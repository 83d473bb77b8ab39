"""Figures (matplotlib, Agg canvas, no pyplot): timelines, time by state, scaling, staleness, response lengths.

Each ``*_figure`` function takes plain data (DataFrames, mappings) and returns a Figure, so notebooks
can show it and :func:`save_figure` can write it as PNG and SVG. Writing is deterministic: SVG ids
use a fixed hash salt and no dates go into the files.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker
import numpy as np
import pandas as pd

# Figures are built with matplotlib.figure.Figure directly, never pyplot: savefig then renders PNG
# with the Agg canvas, needs no display, and leaves a notebook's inline backend alone.
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..errors import RlsimError
from ..rl.timeline import BUSY_STATES

# Fixed colours so the same state looks the same in every figure and report.
STATE_COLORS: dict[str, str] = {
    "generate": "#4c72b0", "rollout": "#4c72b0", "prefill": "#64b5cd", "decode": "#4c72b0",
    "train": "#dd8452", "logprob": "#c44e52", "reference": "#8172b3", "reward": "#937860",
    "critic": "#da8bc3", "switch": "#8c8c8c", "sync": "#55a868", "weight_sync": "#55a868",
    "offload": "#b0b0b0", "reload": "#b0b0b0", "transfer": "#ccb974", "fetch": "#ccb974",
    "forward": "#8da0cb",
}
CAUSE_COLORS: dict[str, str] = {
    "long_tail": "#e377c2", "dependency": "#ffbf00", "pipeline_bubble": "#17becf",
    "switch": "#7f7f7f", "weight_sync": "#2ca02c", "staleness": "#bcbd22", "data": "#9edae5",
    "placement": "#c7c7c7", "tool_wait": "#8c564b", "": "#d9d9d9",
}
IDLE_STATE = "idle"
_THOUSANDS = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}")
_FALLBACK = matplotlib.colormaps["tab20"].colors


def _color(table: Mapping[str, str], key: str, category: str, known: Sequence[str]) -> Any:
    """The table's colour of ``key``, else a fixed colour by the category's place among ``known``
    (the category names: "idle: placement", "train", ...)."""
    if key in table:
        return table[key]
    return _FALLBACK[sorted(known).index(category) % len(_FALLBACK)]


def _category(state: str, cause: str) -> str:
    return f"idle: {cause or 'other'}" if state == IDLE_STATE else state


def _is_bubble(category: str) -> bool:
    """Drawn hatched: idle time, and the states the summary counts as bubbles too (switch, sync,
    fetch, plan, failures: metrics.STATE_CAUSE), busy only with work that is not the step's."""
    return category.startswith("idle") or category not in BUSY_STATES


def _category_color(category: str, categories: Sequence[str]) -> Any:
    if category.startswith("idle: "):
        cause = category[len("idle: "):]
        return _color(CAUSE_COLORS, "" if cause == "other" else cause, category, list(categories))
    return _color(STATE_COLORS, category, category, list(categories))


# --------------------------------------------------------------------------- timeline

def _columns(frame: Any, columns: Sequence[str], what: str, example: str) -> pd.DataFrame:
    """``frame`` as a DataFrame holding ``columns``; else an RlsimError naming what is missing (a
    KeyError or AttributeError from deep inside a figure before)."""
    if not isinstance(frame, pd.DataFrame):
        raise RlsimError(f"{what} must be a pandas DataFrame, got {type(frame).__name__}", field=what,
                         fix=f"pass e.g. {example}")
    missing = [c for c in columns if c not in frame]
    if missing:
        raise RlsimError(f"{what} has no column {', '.join(map(repr, missing))}", field=what, fix=f"pass e.g. {example}")
    return frame


def _with_ranks(timeline: pd.DataFrame) -> pd.DataFrame:
    """Group records carry rank_start / rank_count (rl/timeline.py); per-device rows are groups of one."""
    if isinstance(timeline, pd.DataFrame) and "rank_start" in timeline and "rank_count" in timeline:
        return _columns(timeline, ("pool", "state", "start", "end"), "timeline", "result.timeline")
    _columns(timeline, ("device", "pool", "state", "start", "end"), "timeline", "result.timeline")
    return timeline.assign(rank_start=timeline["device"].astype(int), rank_count=1)


def device_classes(timeline: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(pool, first rank, end rank) ranges whose devices share every record: the elementary
    intervals between group boundaries. One lane per class shows each distinct behaviour once."""
    frame = _with_ranks(timeline)
    out: list[tuple[str, int, int]] = []
    for pool in sorted(frame["pool"].unique(), key=str):
        rows = frame[frame["pool"] == pool]
        starts = rows["rank_start"].to_numpy(int)
        ends = starts + rows["rank_count"].to_numpy(int)
        bounds = np.unique(np.concatenate([starts, ends]))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            covered = ((starts <= a) & (ends >= b)).any()
            if covered:
                out.append((pool, int(a), int(b)))
    return out


def gantt_figure(timeline: pd.DataFrame, *, max_lanes_per_pool: int = 6, title: str | None = None,
                 time_window_s: tuple[float, float] | None = None, sample_note: bool = True) -> Figure:
    """A timeline with one lane per class of devices that behave alike (up to `max_lanes_per_pool`
    evenly chosen per pool, first and last kept); busy states in solid colours, idle intervals
    hatched and coloured by their cause. Accepts group records or per-device rows. With
    `sample_note` (the default: a notebook's figure drew 6 of 16 devices unsaid), the title says when
    only a sample of the device groups is drawn."""
    if isinstance(max_lanes_per_pool, bool) or not isinstance(max_lanes_per_pool, int) or max_lanes_per_pool < 1:
        raise RlsimError(f"max_lanes_per_pool must be a whole number >= 1, got {max_lanes_per_pool!r}",
                         field="max_lanes_per_pool", fix="e.g. 6")
    frame = _with_ranks(timeline)
    lanes = _lanes(frame, max_lanes_per_pool) if not frame.empty else []
    if sample_note and lanes:
        classes = len(device_classes(frame))
        if classes > len(lanes):
            title = f"{title or 'Timeline'}\nshowing a sample: {len(lanes)} of {classes} device groups"
    fig = Figure(figsize=(11, 1.4 + 0.34 * max(1, len(lanes))), layout="constrained")
    ax = fig.add_subplot()
    if frame.empty:
        ax.text(0.5, 0.5, "empty timeline", ha="center", va="center", transform=ax.transAxes)
        return fig
    if time_window_s is not None:
        lo, hi = _window(time_window_s)
        frame = frame[(frame["end"] > lo) & (frame["start"] < hi)]
    causes = frame["cause"].fillna("").astype(str)
    categories = sorted({_category(s, c) for s, c in zip(frame["state"], causes, strict=True)})
    used: dict[str, Any] = {}
    first, last = frame["rank_start"].to_numpy(int), (frame["rank_start"] + frame["rank_count"]).to_numpy(int)
    for y, (pool, a, b) in enumerate(lanes):
        mask = (frame["pool"].to_numpy() == pool) & (first <= a) & (last >= b)
        rows = frame[mask]
        for (state, cause), group in rows.groupby(["state", causes[mask]], sort=True):
            category = _category(state, cause)
            color = _category_color(category, categories)
            spans = list(zip(group["start"], group["end"] - group["start"], strict=True))
            idle = _is_bubble(category)
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color, edgecolor="white" if idle else "none",
                           hatch="///" if idle else None, linewidth=0)
            used[category] = (color, idle)
    ax.set_yticks(range(len(lanes)), [_lane_label(*lane) for lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    ax.set_title(title or "Timeline by pool (hatched = bubble: idle by cause, switch, sync, fetch)")
    if time_window_s is not None:
        ax.set_xlim(*time_window_s)
    handles = [Patch(facecolor=c, hatch="///" if idle else None, edgecolor="white", label=name)
               for name, (c, idle) in sorted(used.items(), key=lambda kv: (kv[0].startswith("idle"), kv[0]))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _window(window: Any) -> tuple[float, float]:
    """``time_window_s`` as (start, end) seconds, start < end (a string, one number or a NaN raised
    numpy's and matplotlib's errors; a reversed pair drew a reversed axis)."""
    pair = tuple(window) if isinstance(window, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                 for v in pair) or not pair[0] < pair[1]:
        raise RlsimError(f"time_window_s must be (start, end) seconds with start < end, got {window!r}",
                         field="time_window_s", fix="e.g. time_window_s=(0, 300)")
    return float(pair[0]), float(pair[1])


def _lane_label(pool: str, a: int, b: int) -> str:
    return f"{pool} · dev {a}" if b - a == 1 else f"{pool} · devs {a}-{b - 1}"


def _lanes(frame: pd.DataFrame, per_pool: int) -> list[tuple[str, int, int]]:
    lanes: list[tuple[str, int, int]] = []
    classes = device_classes(frame)
    for pool in dict.fromkeys(c[0] for c in classes):
        mine = [c for c in classes if c[0] == pool]
        if len(mine) > per_pool:
            picks = np.linspace(0, len(mine) - 1, per_pool).round().astype(int)
            mine = [mine[i] for i in sorted(set(picks))]
        lanes.extend(mine)
    return lanes


# --------------------------------------------------------------------------- time by state

def time_by_state(timeline: pd.DataFrame, devices: int, iterations: int) -> pd.Series:
    """Mean seconds per device per iteration in each state (idle split by cause); group records
    count once per device they cover."""
    if timeline.empty:
        return pd.Series(dtype=float)
    frame = _with_ranks(timeline)
    categories = [_category(s, c) for s, c in zip(frame["state"], frame["cause"].fillna(""), strict=True)]
    seconds = ((frame["end"] - frame["start"]) * frame["rank_count"]).groupby(categories).sum()
    return seconds / max(1, devices) / max(1, iterations)


def state_bars_figure(results: Mapping[str, Any], *, title: str | None = None) -> Figure:
    """Stacked bars, one per schedule: seconds per device per iteration in each state, over the whole
    run (the bar height is the whole-run step, warm-up included, not the steady step).

    `results` maps a name to a SimulationResult-like object (`.timeline`, `.summary` with
    `devices` and `iterations`)."""
    if not isinstance(results, Mapping) or not all(hasattr(r, "timeline") and hasattr(r, "summary")
                                                   for r in results.values()):
        raise RlsimError("results must map names to simulation results", field="results",
                         fix="pass e.g. comparison.results, or {'run': simulate(...)}")
    per_run = {name: time_by_state(r.timeline, int(r.summary["devices"]), int(r.summary["iterations"]))
               for name, r in results.items()}
    table = pd.DataFrame(per_run).fillna(0.0)
    busy = sorted(c for c in table.index if not _is_bubble(c))
    idle = sorted(c for c in table.index if _is_bubble(c))
    table = table.loc[busy + idle]
    fig = Figure(figsize=(max(5.5, 1.6 * len(per_run) + 3.5), 4.5), layout="constrained")
    ax = fig.add_subplot()
    bottom = np.zeros(len(table.columns))
    x = np.arange(len(table.columns))
    for category, values in table.iterrows():
        is_idle = _is_bubble(category)
        ax.bar(x, values.to_numpy(), bottom=bottom, color=_category_color(category, list(table.index)),
               hatch="///" if is_idle else None, edgecolor="white", linewidth=0.5, label=category)
        bottom += values.to_numpy()
    ax.set_xticks(x, list(table.columns))
    ax.set_ylabel("seconds per device per iteration (whole run)")
    # two lines: one run's figure (5.5 in) clipped the title on one
    ax.set_title(title or "Where device time goes, by schedule\n(whole run; hatched = bubble)")
    handles, labels = ax.get_legend_handles_labels()  # top of the stack first, as the eye reads it
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig


# --------------------------------------------------------------------------- scaling and staleness

def scaling_efficiency(devices: Sequence[float], tokens_per_s: Sequence[float]) -> np.ndarray:
    """Throughput per device relative to the smallest configuration: (T_n / n) / (T_1 / n_1)."""
    d = np.asarray(devices, dtype=float)
    t = np.asarray(tokens_per_s, dtype=float)
    if d.shape != t.shape or d.ndim != 1 or not d.size:   # numpy broadcast [1, 2] against [1]: a wrong answer
        raise RlsimError(f"devices and tokens_per_s must be two lists of one length, got {d.size} and {t.size}",
                         field="devices", fix="give one tokens/s figure per device count")
    base = int(np.argmin(d))
    # finite positive counts, finite figures >= 0 (NaN compares false), the base figure > 0
    if not (np.all(d > 0) and np.all(np.isfinite(d)) and np.all(t >= 0) and np.all(np.isfinite(t)) and t[base] > 0):
        raise RlsimError("devices must be counts > 0 and tokens_per_s finite figures >= 0, the smallest "
                         f"configuration's > 0; got {d.tolist()} and {t.tolist()}", field="devices",
                         fix="give each configuration's device count and its tokens/s")
    return (t / d) / (t[base] / d[base])


def steady_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows whose tokens/s is the steady state where they carry it (a sweep's run objects,
    capacity.steady_figure's rule): the whole run's counts the warm-up step, which the tables beside
    a figure leave out (a notebook's figure showed efficiency 0.35 against its table's 0.38)."""
    if "steady_tokens_per_s" not in rows:
        return rows
    steady = pd.to_numeric(rows["steady_tokens_per_s"], errors="coerce")
    if "tokens_per_s" not in rows:   # a table of steady figures alone
        return rows.assign(tokens_per_s=steady)
    return rows.assign(tokens_per_s=steady.fillna(pd.to_numeric(rows["tokens_per_s"], errors="coerce")))


def _tokens_label(rows: pd.DataFrame) -> str:
    """The throughput axis' name: the steady state's where steady_rows took it (the axes said
    "tokens/s" beside tables that show both)."""
    return "steady tokens/s" if "steady_tokens_per_s" in rows else "tokens/s"


def scaling_figure(rows: pd.DataFrame, *, group: str | None = None, title: str | None = None) -> Figure:
    """Tokens/s against devices (left) and scaling efficiency (right), with the linear ideal; the
    steady-state tokens/s where the rows carry it."""
    throughput = ("steady_tokens_per_s",) if isinstance(rows, pd.DataFrame) and "steady_tokens_per_s" in rows \
        else ("tokens_per_s",)
    _columns(rows, ("devices", *throughput), "rows", "sweep.rows (devices, tokens_per_s or steady_tokens_per_s)")
    rows = steady_rows(rows)
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax, ax_eff = fig.subplots(1, 2)
    groups = [(None, rows)] if group is None or group not in rows else list(rows.groupby(group, sort=True))
    for name, sub in groups:
        sub = sub.dropna(subset=["devices", "tokens_per_s"]).sort_values("devices")
        if sub.empty:
            continue
        d, t = sub["devices"].to_numpy(float), sub["tokens_per_s"].to_numpy(float)
        label = None if name is None else str(name)
        line = ax.plot(d, t, marker="o", label=label or "simulated")[0]
        ax.plot(d, t[0] * d / d[0], linestyle="--", color=line.get_color(), alpha=0.5,
                label=f"linear ({label})" if label else "linear ideal")
        ax_eff.plot(d, scaling_efficiency(d, t), marker="o", color=line.get_color(), label=label or "simulated")
    ax.set_xlabel("devices")
    ax.set_ylabel(_tokens_label(rows))
    ax.yaxis.set_major_formatter(_THOUSANDS)
    ax.set_title(title or "Throughput versus cluster size")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncol=min(4, max(1, len(labels))),
               frameon=False)  # below the axes: never over the data
    ax_eff.set_xlabel("devices")
    ax_eff.set_ylabel("scaling efficiency (tokens/s per device vs smallest)")
    ax_eff.set_ylim(0, max(1.1, ax_eff.get_ylim()[1]))
    ax_eff.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax_eff.set_title("Scaling efficiency")
    for a in (ax, ax_eff):
        a.grid(alpha=0.3)
    return fig


def staleness_figure(rows: pd.DataFrame, *, x: str = "staleness_bound", group: str | None = "schedule",
                     title: str | None = None) -> Figure:
    """Tokens/s (left axis; the steady state where the rows carry it) and measured mean staleness
    (right axis) against the staleness bound."""
    _columns(rows, (x, "tokens_per_s"), "rows", f"sweep.rows ({x}, tokens_per_s)")
    rows = steady_rows(rows)
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    groups = [(None, rows)] if group is None or group not in rows else list(rows.groupby(group, sort=True))
    for name, sub in groups:
        sub = sub.sort_values(x)
        label = _tokens_label(rows) if name is None else f"{name}: {_tokens_label(rows)}"
        line = ax.plot(sub[x], sub["tokens_per_s"], marker="o", label=label)[0]
        if "staleness.mean" in sub and pd.to_numeric(sub["staleness.mean"], errors="coerce").nunique() > 1:
            # a flat line (a schedule the bound does not apply to) says nothing: left out
            ax2.plot(sub[x], sub["staleness.mean"], marker="s", linestyle="--", color=line.get_color(),
                     alpha=0.6, label="mean staleness" if name is None else f"{name}: mean staleness")
    ax.set_xlabel("staleness bound (batches)")
    ax.set_ylabel(_tokens_label(rows))
    ax.yaxis.set_major_formatter(_THOUSANDS)
    ax2.set_ylabel("measured mean staleness (batches)")
    ax.set_title(title or "Throughput versus staleness")
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    fig.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=8, loc="outside lower center",
               ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    return fig


# --------------------------------------------------------------------------- lengths

RESPONSE_LENGTH_COLUMNS = ("response_len", "response_length", "response_tokens")


def response_length_figure(samples: pd.DataFrame, *, column: str | None = None, bins: int = 60,
                           title: str | None = None, name: str | None = None) -> Figure:
    """Histogram of generated response lengths (log-scaled counts show the long tail), with the
    median and the 99th percentile marked. Samples still generating at the run's end (drop_reason
    unfinished) are left out, and the title says how many: their lengths are drawn, never generated.
    ``name``: the run's (a comparison's schedule), named in the title."""
    if hasattr(samples, "samples") and hasattr(samples, "summary"):   # a SimulationResult: its table
        samples = samples.samples
    samples = samples if samples is not None else pd.DataFrame()   # simulate(keep_samples=False) keeps none
    if column is not None:
        _columns(samples, [column], "samples", "result.samples with its response_len column")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise RlsimError(f"bins must be a whole number >= 1, got {bins!r}", field="bins", fix="e.g. bins=60")
    column = column or next((c for c in RESPONSE_LENGTH_COLUMNS if c in samples), None)
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    unfinished = (samples["drop_reason"] == "unfinished").to_numpy() if "drop_reason" in samples \
        else np.zeros(len(samples), bool)
    if column is None or samples.empty or unfinished.all():
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return fig
    lengths = samples[column].to_numpy(float)[~unfinished]
    ax.hist(lengths, bins=bins, color=STATE_COLORS["generate"], alpha=0.85)
    ax.set_yscale("log")
    for q, style in ((50, "-"), (99, "--")):
        v = float(np.percentile(lengths, q))
        ax.axvline(v, color="black", linestyle=style, linewidth=1, label=f"p{q} = {v:,.0f} tokens")
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("samples (log scale)")
    left_out = f"; {int(unfinished.sum()):,} unfinished at the run's end left out" if unfinished.any() else ""
    whose = f": {name}" if name else ""
    ax.set_title(title or f"Response-length distribution{whose} ({len(lengths):,} samples{left_out})")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return fig


# --------------------------------------------------------------------------- writing

def save_figure(fig: Figure, out_dir: str | Path, stem: str, *, dpi: int = 110) -> list[Path]:
    """Write `stem`.png and `stem`.svg into out_dir; the same figure gives the same bytes."""
    if not callable(getattr(fig, "savefig", None)):
        raise RlsimError(f"fig: a {type(fig).__name__} is not a figure", field="fig",
                         fix="pass a figure a *_figure function returned")
    if not stem or Path(stem).name != stem:
        raise RlsimError(f"stem {stem!r} is not a file name", field="stem",
                         fix="give a name without folders (out_dir says where)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RlsimError(f"{out} is a file, not a folder", field="out_dir", fix="give a folder to write into")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    with matplotlib.rc_context({"svg.hashsalt": "rlsim"}):
        fig.savefig(paths[0], dpi=dpi, metadata={"Software": None})
        fig.savefig(paths[1], metadata={"Date": None, "Creator": None})
    return paths
