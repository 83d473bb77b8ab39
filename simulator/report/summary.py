"""What a planner reads first: a one-line conclusion and a short table in human units (%, GB, s,
tokens/s) for a run or a comparison; the full summary stays below, collapsed."""
from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

from ..capacity import steady_figure

CAUSE_WORDS = {"long_tail": "long tail", "dependency": "waiting on a dependency (samples, weights or rewards)", "switch": "role switch",
               "weight_sync": "weight sync", "pipeline_bubble": "pipeline bubble", "placement": "placement",
               "data": "data loading", "tool_wait": "engines waiting on their samples' tools"}


def _get(summary: Mapping[str, Any], key: str) -> Any:
    value: Any = summary
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _tokens(summary: Mapping[str, Any]) -> float | None:
    return steady_figure(summary, "tokens_per_s")


def _trains_on_older_weights(summary: Mapping[str, Any]) -> bool:
    """Whether a staleness figure means something: a bound above 0, or none (counted, not bounded:
    verl-fully-async); a synchronous schedule's bound is 0."""
    stale = _get(summary, "staleness")
    return isinstance(stale, Mapping) and "bound" in stale and (stale["bound"] is None or stale["bound"] > 0)


def _step(summary: Mapping[str, Any]) -> float | None:
    return steady_figure(summary, "step_time_s")


def _bubble(summary: Mapping[str, Any]) -> Any:
    """The steady-state bubble fraction, beside the steady step and tokens/s (whole run if absent)."""
    return steady_figure(summary, "bubble_fraction")


def notes_of(summary: Mapping[str, Any]) -> list[str]:
    """The run's notes as its summary carries them (api: the figures' notes, the length caps', the
    pools' device kinds', a packed row's, a compared kind's knobs left out), else those its figures
    give (a summary from elsewhere). The console printed only the second: the others reached --json alone."""
    from ..metrics import summary_notes
    notes = summary.get("notes")
    return list(notes) if notes is not None else summary_notes(summary)


def has_steady_window(summary: Mapping[str, Any]) -> bool:
    """Whether the run has steady figures apart from its whole-run ones: two or more iterations (with one,
    metrics.steady_state returns the run itself; a pipelined kind's one step is its warm-up). A summary
    without an iteration count (one from elsewhere) is read as it says."""
    from ..metrics import warm_up_only
    iterations = summary.get("iterations")
    return not warm_up_only(summary) and (not isinstance(iterations, int) or iterations >= 2)


def window_words(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """What the headline figures cover: "steady state", or "whole run" where a run has no steady window
    (the report said "bubbles 44% in steady state" of a one-iteration warm-up)."""
    return "steady state" if all(has_steady_window(s) for s in summaries.values()) else "whole run"


def biggest_bubble(summary: Mapping[str, Any]) -> tuple[str, float] | None:
    causes = _get(summary, "steady_bubbles_by_cause") or _get(summary, "bubbles_by_cause") or {}
    numeric = {k: float(v) for k, v in causes.items() if isinstance(v, (int, float)) and v > 0}
    if not numeric:
        return None
    cause = max(numeric, key=numeric.__getitem__)
    return cause, numeric[cause]


def conclusion(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """'stalesync 1.19x colocated (tokens/s, steady state), bubbles 11% vs 5%' for a comparison;
    '12,345 tokens/s, step 41.2 s, bubbles 23% (most: long tail, 15%)' for one run."""
    names = list(summaries)
    if len(names) == 1:
        s = summaries[names[0]]
        parts = [f"{_number(_tokens(s))} tokens/s", f"step {_number(_step(s))} s"]
        if isinstance(_bubble(s), (int, float)):
            steady = " in steady state" if _get(s, "steady_bubble_fraction") is not None \
                and has_steady_window(s) else ""
            parts.append(f"bubbles {_bubble(s):.0%} of device time{steady}")
        top = biggest_bubble(s)
        if top:
            parts[-1] += f" (most: {CAUSE_WORDS.get(top[0], top[0])}, {top[1]:.0%})"
        return f"{names[0]}: " + ", ".join(parts)
    base = names[0]
    rated = [n for n in names if isinstance(_tokens(summaries[n]), (int, float))]
    if not rated or not _tokens(summaries[base]):
        return "comparison of " + ", ".join(names)
    best = max(rated, key=lambda n: _tokens(summaries[n]))
    other = base if best != base else max((n for n in rated if n != base), key=lambda n: _tokens(summaries[n]),
                                          default=base)
    ratio = _tokens(summaries[best]) / max(_tokens(summaries[other]), 1e-12)
    text = f"{best} {ratio:.2f}x {other} (tokens/s, {window_words(summaries)})"
    bubbles = [_bubble(summaries[n]) for n in (best, other)]
    if all(isinstance(b, (int, float)) for b in bubbles):
        text += f", bubbles {bubbles[0]:.0%} vs {bubbles[1]:.0%}"
    return text


def _number(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _pct(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "-"


def _gb(value: Any) -> str:
    return f"{value / 1e9:,.1f} GB" if isinstance(value, (int, float)) else "-"


Row = tuple[str, Callable[[Mapping[str, Any]], str]]
KEY_ROWS: list[Row] = [
    ("devices", lambda s: _number(_get(s, "devices"))),
    ("step time, steady state", lambda s: f"{_number(_step(s))} s"),
    ("tokens/s, steady state", lambda s: _number(_tokens(s))),
    ("tokens/s per device, steady state", lambda s: _number(steady_figure(s, "tokens_per_s_per_device"))),
    ("bubbles (idle device time), steady state", lambda s: _pct(_bubble(s))),
    ("biggest bubble cause, steady state", lambda s: (lambda t: f"{CAUSE_WORDS.get(t[0], t[0])} {t[1]:.1%}" if t else "-")(
        biggest_bubble(s))),
    ("MFU (whole run)", lambda s: _pct(_get(s, "mfu"))),
    ("peak memory per device", lambda s: _gb(_get(s, "peak_memory_bytes"))),
    ("rollout slot occupancy", lambda s: _pct(_get(s, "rollout.occupancy"))),
    ("staleness max / mean (batches)", lambda s: (
        f"{_get(s, 'staleness.max'):.0f} / {_get(s, 'staleness.mean'):.2f}"
        if _trains_on_older_weights(s) and isinstance(_get(s, "staleness.mean"), (int, float))
        else "does not apply")),
]


def key_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The short table: one column per run, rows in human units; rows no run has are left out."""
    head = "<tr><th>metric</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in summaries) + "</tr>"
    body = []
    base = next(iter(summaries.values()))
    window = window_words(summaries)
    for label, cell in KEY_ROWS:
        label = label.replace("steady state", window)
        cells = [cell(s) for s in summaries.values()]
        if all(c in ("-", "- s") for c in cells):
            continue
        body.append(f"<tr><td>{html.escape(label)}</td>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                    + "</tr>")
    if len(summaries) > 1 and _tokens(base):
        ratios = [f"{_tokens(s) / _tokens(base):.2f}x" if _tokens(s) else "-" for s in summaries.values()]
        body.insert(3, f"<tr><td>vs {html.escape(next(iter(summaries)))}</td>"
                    + "".join(f"<td>{r}</td>" for r in ratios) + "</tr>")
    return f"<table class='key'>{head}{''.join(body)}</table>"
