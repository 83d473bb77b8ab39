"""Report pages: figures (PNG + SVG) and one self-contained report.html beside the summary table.

`write_report(result, out_dir)` is the single call `rlsim run` / `rlsim compare` make for `--out`;
`write_sweep_report(...)` is the one `rlsim sweep` makes.
"""
from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..capacity import steady_tokens_per_s
from ..errors import RlsimError
from . import critical_path, plots, summary

REPORT_NAME = "report.html"

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}
.scroll{max-width:100%;overflow-x:auto}td{overflow-wrap:anywhere;max-width:28em}
.conclusion{font-size:1.25em;font-weight:600;background:#f4f8fc;border-left:4px solid #4c72b0;padding:.5em .8em}
details summary{cursor:pointer;color:#335;margin:1em 0}.note{color:#555;font-size:13px}
.fig{margin:1.5em 0}.fig img{max-width:100%;border:1px solid #eee}
.layout{display:flex;gap:2em;align-items:flex-start;flex-wrap:wrap}
.selected{background:#e6f4e6;font-weight:bold}.err{color:#b00}
.warn{color:#8a4b00;font-size:13px;font-weight:600}"""


# --------------------------------------------------------------------------- run / compare

def write_report(result: Any, out_dir: str | Path) -> Path:
    """Figures and report.html for a SimulationResult (`.summary`, `.timeline`, `.samples`) or a
    ComparisonResult (`.results`: name -> SimulationResult; each result's own files are written into
    a sub-folder named after it). Returns the report path."""
    if not (hasattr(result, "results") or (hasattr(result, "summary") and hasattr(result, "timeline"))):
        raise RlsimError(f"write_report takes a simulation or comparison result, got {type(result).__name__}",
                         field="result", fix="pass simulate(...) or compare(...), not its .results mapping")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():   # a FileExistsError from mkdir before
        raise RlsimError(f"{out} is a file; write_report takes a folder", field="out_dir",
                         fix="give a folder (new or existing)")
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Any] = dict(result.results) if hasattr(result, "results") else \
        {str(result.summary.get("schedule", "run")): result}
    if hasattr(result, "results"):
        # A comparison has no data writer of its own: each schedule's files go into a sub-folder.
        for name, run in runs.items():
            if hasattr(run, "write"):
                run.write(out / _slug(name))
    # a comparison of one schedule (compare --schedules stalesync) is still a comparison: its file names
    # and title (they were a run's: timeline.png, "rlsim run")
    comparison = hasattr(result, "results")
    figures: list[tuple[str, str]] = []
    for name, run in runs.items():
        stem = f"timeline_{_slug(name)}" if comparison else "timeline"
        fig = plots.gantt_figure(run.timeline, sample_note=True,
                                 title=f"Timeline: {name} (hatched = bubble: idle by cause, switch, sync, fetch)")
        figures.append((stem, _save(fig, out, stem)))
    figures.append(("time_by_state", _save(plots.state_bars_figure(runs), out, "time_by_state")))
    for name, run in runs.items():   # a comparison's schedules generate different samples: one figure each
        samples = getattr(run, "samples", None)
        if samples is not None and not samples.empty:
            stem = f"response_lengths_{_slug(name)}" if comparison else "response_lengths"
            figures.append((stem, _save(plots.response_length_figure(samples, name=name), out, stem)))
    summaries = {name: run.summary for name, run in runs.items()}
    table = (f"<p class='conclusion'>{html.escape(summary.conclusion(summaries))}</p>" + _notes_section(summaries)
             + summary.key_table(summaries) + critical_path.section(summaries)
             + _collapsed(_summary_table(summaries), "all summary fields"))
    title = "rlsim comparison" if comparison else f"rlsim run: {next(iter(runs))}"
    return _write_page(out, title, table, figures)


def _notes_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The runs' warnings and notes as paragraphs under the conclusion (they were only rows of the collapsed
    table, where a one-iteration warm-up or a device left idle went unseen). In a comparison a line that
    not every schedule gave names the ones that did, as the console does."""
    lines: dict[tuple[str, str], list[str]] = {}
    for name, s in summaries.items():
        for kind, texts in (("warning", s.get("warnings") or []), ("note", summary.notes_of(s))):
            for text in texts:
                lines.setdefault((kind, str(text)), []).append(name)
    ordered = sorted(lines.items(), key=lambda item: item[0][0] != "warning")   # warnings first, stable
    out = []
    for (kind, text), names in ordered:
        whose = "" if len(summaries) == 1 or len(names) == len(summaries) else f" ({', '.join(names)})"
        out.append(f"<p class='{'warn' if kind == 'warning' else 'note'}'>{kind}{html.escape(whose)}: "
                   f"{html.escape(text)}</p>")
    return "".join(out)


def _collapsed(table_html: str, label: str) -> str:
    return f"<details><summary>{html.escape(label)}</summary><div class='scroll'>{table_html}</div></details>"


def _summary_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    # the per-step critical-path chains have their own section (critical_path.section)
    flat = {name: {k: v for k, v in _flatten(s).items() if k != "critical_path.steps"} for name, s in summaries.items()}
    keys: list[str] = []
    for f in flat.values():
        keys.extend(k for k in f if k not in keys)
    head = "<tr><th>metric</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in flat) + "</tr>"
    body = "".join("<tr><td>" + html.escape(k) + "</td>" + "".join(f"<td>{_cell(f.get(k))}</td>" for f in flat.values())
                   + "</tr>" for k in keys)
    return f"<table>{head}{body}</table>"


# --------------------------------------------------------------------------- sweep

def sweep_frame(objects: Sequence[Mapping[str, Any]], grid_keys: Sequence[str]) -> pd.DataFrame:
    """Sweep run objects as a flat table: one column per grid key and per (dotted) summary field."""
    rows = []
    for obj in objects:
        row = {k: _label(obj.get("grid", {}).get(k)) for k in grid_keys}
        row.update({k: v for k, v in _flatten({k: v for k, v in obj.items() if k != "grid"}).items()
                    if k not in grid_keys})
        rows.append(row)
    return pd.DataFrame(rows)


def _label(value: Any) -> Any:
    """Grid values that are mappings or lists become their compact JSON, so they can label and group."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (Mapping, list, tuple)) else value


def write_sweep_report(objects: Sequence[Mapping[str, Any]], grid_keys: Sequence[str], out_dir: str | Path, *,
                       capacity: Mapping[str, Any] | None = None) -> Path:
    """Figures chosen by what the grid varies (size -> scaling; staleness -> trade-off; else the
    throughput per grid value) and report.html with the table of every point."""
    _check_sweep_objects(objects, grid_keys)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame = sweep_frame(objects, grid_keys)
    ok = frame[frame["error"].fillna("") == ""] if "error" in frame else frame
    ok = plots.steady_rows(ok)   # the figures plot the steady state, as the console and the capacity pick read
    figures: list[tuple[str, str]] = []
    others = list(grid_keys)
    if not ok.empty and "devices" in ok and ok["devices"].nunique() > 1 and "tokens_per_s" in ok:
        group = _group_column(ok, [k for k in grid_keys if ok[k].nunique() > 1 and not _is_size_key(k)])
        figures.append(("scaling", _save(plots.scaling_figure(
            ok, group=group, title="Throughput (steady state) versus cluster size"), out, "scaling")))
    stale = [k for k in grid_keys if "staleness" in k]
    if stale and not ok.empty and "tokens_per_s" in ok:
        rest = [k for k in grid_keys if k != stale[0] and ok[k].nunique() > 1]
        frame_s = ok.rename(columns={stale[0]: "staleness_bound"})
        group = _group_column(frame_s, rest)
        figures.append(("staleness", _save(plots.staleness_figure(
            frame_s, group=group, title="Throughput (steady state) versus staleness"), out, "staleness")))
        others = []
    if not figures and not ok.empty and "tokens_per_s" in ok and others:
        figures.append(("sweep", _save(_metric_figure(ok, others), out, "sweep")))
    table = _sweep_table(frame, grid_keys)
    note = _capacity_note(capacity, objects, grid_keys) if capacity is not None else ""
    return _write_page(out, "rlsim sweep", note + f"<div class='scroll'>{table}</div>", figures)


def _check_sweep_objects(objects: Any, grid_keys: Any) -> None:
    """The run objects a sweep returns (SweepResult.run_objects()) and the keys their grids vary: a
    frame or None raised an AttributeError or a TypeError, a key no point varies drew an empty column
    (a notebook trial)."""
    if isinstance(objects, (str, bytes)) or not isinstance(objects, Sequence) \
            or not all(isinstance(obj, Mapping) for obj in objects):
        raise RlsimError(f"objects: a {type(objects).__name__} is not a list of sweep run objects", field="objects",
                         fix="pass SweepResult.run_objects() (the sweep --json list)")
    if isinstance(grid_keys, (str, bytes)) or not isinstance(grid_keys, Sequence):
        raise RlsimError(f"grid_keys must be a list of the grid's keys, got {grid_keys!r}", field="grid_keys",
                         fix="e.g. list(SweepResult.grid)")
    varied = {key for obj in objects for key in (obj.get("grid") or {})}
    unknown = [key for key in grid_keys if key not in varied]
    if unknown and objects:
        raise RlsimError(f"grid_keys {unknown} are not keys the points' grids vary ({', '.join(sorted(varied)) or 'none'})",
                         field="grid_keys", fix="e.g. list(SweepResult.grid)")


def _capacity_note(capacity: Mapping[str, Any], objects: Sequence[Mapping[str, Any]],
                   grid_keys: Sequence[str]) -> str:
    """The answer first, with the target it answers and the baseline (smallest configuration evaluated)."""
    target = capacity.get("target") or {}
    wants = [f"at least {target['tokens_per_s']:,.0f} tokens/s" if target.get("tokens_per_s") else "",
             f"a step of at most {target['step_time_s']:,.1f} s" if target.get("step_time_s") else ""]
    wanted = " and ".join(w for w in wants if w) or "the target"
    value = capacity.get("value")
    answer = (f"{html.escape(json.dumps(value))} meets {wanted}" if capacity.get("found")
              else f"no evaluated configuration meets {wanted}"
              + ("" if capacity.get("plateau") else "; widen the grid"))
    for note in capacity.get("notes") or []:
        answer += f". Note: {html.escape(note)}"
    ok = [o for o in objects if not o.get("error") and isinstance(steady_tokens_per_s(o), (int, float))]
    baseline = ""
    if ok:
        first = min(ok, key=lambda o: (o.get("devices") or 0, steady_tokens_per_s(o)))
        grid = {k: first.get("grid", {}).get(k) for k in grid_keys}
        baseline = (f"<br><span class='note'>Target: {wanted} (steady state). Baseline (smallest configuration "
                    f"evaluated): {html.escape(json.dumps(grid))}, {first.get('devices', '-')} devices, "
                    f"{steady_tokens_per_s(first):,.0f} tokens/s (steady).</span>")
    return f"<p class='conclusion'>Capacity: {answer}{baseline}</p>"


def _is_size_key(key: str) -> bool:
    return key.split(".")[-1] in ("supernodes", "nodes", "racks", "devices")


def _group_column(frame: pd.DataFrame, keys: Sequence[str]) -> str | None:
    """One column to colour lines by: the single varying key, or a joined label of several."""
    if not keys:
        return None
    if len(keys) == 1:
        return keys[0]
    frame["_group"] = _grid_labels(frame, keys)
    return "_group"


def _grid_labels(frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """One "a, b" label per grid point; a null grid value reads "null" (pandas' str conversion keeps
    a missing value missing, which the join cannot take)."""
    def text(value: Any) -> str:
        return "null" if value is None or (isinstance(value, float) and value != value) else str(value)
    return frame[list(keys)].apply(lambda column: column.map(text)).agg(", ".join, axis=1)


def _metric_figure(frame: pd.DataFrame, keys: Sequence[str]):
    fig = plots.Figure(figsize=(8, 4.2), layout="constrained")
    ax = fig.add_subplot()
    labels = _grid_labels(frame, keys)
    ax.bar(range(len(frame)), frame["tokens_per_s"].to_numpy(float), color=plots.STATE_COLORS["generate"])
    ax.set_xticks(range(len(frame)), list(labels), rotation=30, ha="right", fontsize=8)
    ax.set_xlabel(", ".join(keys))
    ax.set_ylabel("tokens/s")
    ax.set_title("Throughput (steady state) per grid point")
    ax.grid(axis="y", alpha=0.3)
    return fig


# steady-state figures first (the capacity pick and the cost columns read them), whole-run ones after
_SWEEP_COLUMNS = ["devices", "steady_step_time_s", "steady_tokens_per_s", "steady_tokens_per_s_per_device",
                  "steady_bubble_fraction", "step_time_s", "tokens_per_s", "bubble_fraction", "mfu", "staleness.mean",
                  "device_hours_per_1m_tokens", "cost_per_1m_tokens", "meets_target", "error"]


def _sweep_table(frame: pd.DataFrame, grid_keys: Sequence[str]) -> str:
    cols = list(grid_keys) + [c for c in _SWEEP_COLUMNS if c in frame]
    head = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
    body = []
    for _, row in frame.iterrows():
        cls = ' class="selected"' if row.get("selected") is True else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in cols) + "</tr>")
    return f"<table>{head}{''.join(body)}</table>"


# --------------------------------------------------------------------------- page

def _save(fig: Any, out: Path, stem: str) -> str:
    plots.save_figure(fig, out, stem)
    return stem


def _write_page(out: Path, title: str, table_html: str, figures: Sequence[tuple[str, str]]) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             "<div class='layout'><div><h2>Summary</h2>", table_html, "</div></div>"]
    for _, stem in figures:
        data = base64.b64encode((out / f"{stem}.png").read_bytes()).decode()
        parts.append(f"<div class='fig'><h2>{html.escape(stem.replace('_', ' '))}</h2>"
                     f"<img alt='{html.escape(stem)}' src='data:image/png;base64,{data}'>"
                     f"<div><a href='{html.escape(stem)}.svg'>SVG</a> · <a href='{html.escape(stem)}.png'>PNG</a>"
                     "</div></div>")
    parts.append("</body></html>\n")
    path = out / REPORT_NAME
    path.write_text("".join(parts))
    return path


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return html.escape(json.dumps(value))
    text = str(value)
    return f"<span class='err'>{html.escape(text)}</span>" if text.startswith(("error", "rlsim")) else html.escape(text)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(name))
