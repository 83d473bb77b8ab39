"""The tornado chart of a sensitivity table (simulator.uncertainty.sensitivity_runs) and its report page."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# matplotlib (and the report pages' modules, which load it) are imported where a chart is drawn:
# `rlsim sensitivity` without --out and the --json records need neither (about a second of start-up).

STEM = "tornado"


def figure_text(value: float, digits: int = 4) -> str:
    """A figure with thousands separators at `digits` significant digits; from 10**digits up the
    whole number (56,030, not the 5.603e+04 of ',.4g')."""
    value = float(value)
    return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{value:,.{digits}g}"


def tornado_figure(frame: pd.DataFrame, *, base: float | None = None, metric: str = "figure",
                   title: str | None = None) -> Figure:
    """One horizontal bar per key (largest swing on top) from its figure at low to its figure at high,
    centred on the base figure; bars are labelled with the key's low and high values."""
    from matplotlib.figure import Figure

    from . import plots
    rows = frame.sort_values("swing", ascending=True, kind="stable")
    fig = Figure(figsize=(9, 0.5 * len(rows) + 1.6))
    ax = fig.add_subplot(1, 1, 1)
    centre = float(base) if base is not None else float(rows[["figure_low", "figure_high"]].mean().mean())
    for y, row in enumerate(rows.itertuples(index=False)):
        # both ends on one side of the base (an optimum inside the range): half-height bars, low above
        # high, so that neither hides the other
        same_side = (row.figure_low - centre) * (row.figure_high - centre) > 0
        for value, color, label, shift in ((row.figure_low, "#4c72b0", row.low, -0.15),
                                           (row.figure_high, "#dd8452", row.high, 0.15)):
            at = y + (shift if same_side else 0.0)
            ax.barh(at, value - centre, left=centre, color=color, height=0.3 if same_side else 0.6)
            ax.text(value, at, f" {figure_text(label)} ", va="center", fontsize=8,
                    ha="left" if value > centre or (value == centre and label == row.high) else "right")
    ax.axvline(centre, color="#222", linewidth=1)
    ax.set_yticks(range(len(rows)), [str(k) for k in rows["key"]], fontsize=9)
    ax.set_xlabel(metric)
    ax.xaxis.set_major_formatter(plots._THOUSANDS)
    ax.set_title(title or f"{metric}: one-at-a-time swings (blue: key at low, orange: at high)", fontsize=10)
    ax.margins(x=0.15)
    fig.tight_layout()
    return fig


# what each record repeats of the design (frame.attrs), so a row read alone says what it measured
RECORD_ATTRS = ("metric", "base", "seeds", "samples")


def sensitivity_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The `rlsim sensitivity --json` list (and sensitivity.json): one object per key, NaN Sobol
    indices as null, each with the metric, its figure at base, the seeds and the Sobol samples."""
    design = {k: frame.attrs[k] for k in RECORD_ATTRS if k in frame.attrs}
    records = []
    for row in frame.to_dict(orient="records"):
        out = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
        out["rank"] = int(out["rank"])
        records.append({**out, **design})
    return records


def write_sensitivity_report(frame: pd.DataFrame, out_dir: str | Path) -> Path:
    """tornado.png/.svg, sensitivity.json and a report.html with the table and the chart."""
    from . import plots
    from .html import _cell, _write_page
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metric = str(frame.attrs.get("metric", "figure"))
    plots.save_figure(tornado_figure(frame, base=frame.attrs.get("base"), metric=metric), out, STEM)
    (out / "sensitivity.json").write_text(json.dumps(sensitivity_records(frame), indent=2) + "\n")
    head = ("<p class='conclusion'>" + html.escape(conclusion(frame)) + "</p>"
            "<p class='note'>Swing: the figure's range over the key at its low value, its base value and its high "
            "value, the other keys at base (over low and high alone where the range leaves the base value out; "
            "a knob with an optimum inside its range swings by its larger drop). Sobol first-order: the share of the figure's variance the key explains alone; "
            "total: with its interactions; ci95: the half-width of its 95% bootstrap interval.</p>")
    cols = ["rank", "key", "low", "high", "figure_low", "figure_high", "swing", "sobol_first", "sobol_first_ci95",
            "sobol_total", "sobol_total_ci95"]
    body = "".join("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in cols) + "</tr>"
                   for r in sensitivity_records(frame))
    table = head + "<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>" + body + "</table>"
    return _write_page(out, f"Sensitivity of {metric}", table, [("tornado", STEM)])


def conclusion(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "nothing varied"
    top = frame.sort_values("rank").iloc[0]
    metric = frame.attrs.get("metric", "the figure")
    if not top["swing"]:
        return f"no varied key moves {metric} over its range (every swing is 0)"
    base = frame.attrs.get("base")
    share = f" ({top['swing'] / abs(base):.0%} of the base {figure_text(base)})" if base else ""
    return (f"{top['key']} moves {metric} most: {figure_text(top['figure_low'])} at {figure_text(top['low'])} vs "
            f"{figure_text(top['figure_high'])} at {figure_text(top['high'])}, a swing of "
            f"{figure_text(top['swing'])}{share}")
