"""Chrome-trace / Perfetto JSON from a timeline: one process per pool, one track per device group.

Event format (Trace Event Format): complete events ``ph: "X"`` with ``ts`` and ``dur`` in
microseconds, ``pid``/``tid`` integers named by ``ph: "M"`` metadata events. An interval on a
step's critical path (the summary's ``critical_path``, rl/critical_path.py) gets the category
``critical_path`` beside its state and ``args.critical_path_s`` (its seconds on the path; a reward
latency on the idle row that waits for it): in
Perfetto, filter on the category to see the chain.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import pandas as pd


def chrome_trace(timeline: pd.DataFrame, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    pools = sorted(timeline["pool"].unique()) if len(timeline) else []
    pid_of = {p: i + 1 for i, p in enumerate(pools)}
    for pool, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pool}})
    tracks = timeline[["pool", "rank_start", "rank_count"]].drop_duplicates().sort_values(["pool", "rank_start"])
    tid_of: dict[tuple, int] = {}
    tracks_in_pool: dict[str, int] = {}  # tids count from 1 within each pool
    for pool, start, count in tracks.itertuples(index=False):
        tid = tracks_in_pool.get(pool, 0) + 1
        tracks_in_pool[pool] = tid_of[(pool, int(start), int(count))] = tid
        name = f"devices {start}" if count == 1 else f"devices {start}-{start + count - 1}"
        events.append({"ph": "M", "name": "thread_name", "pid": pid_of[pool], "tid": tid, "args": {"name": name}})
    critical = _critical_spans(summary or {})
    reward_marks = _reward_rows(timeline, summary or {})
    for index, row in enumerate(timeline.itertuples(index=False)):
        name = row.state if row.state != "idle" else f"idle:{row.cause}"
        track = (row.pool, int(row.rank_start), int(row.rank_count))
        event = {"ph": "X", "name": name, "cat": row.state, "pid": pid_of[row.pool], "tid": tid_of[track],
                 "ts": round(row.start * 1e6, 3), "dur": _rounded_span_us(row.start, row.end),
                 "args": {"iteration": int(row.iteration), "label": row.label, "devices": int(row.rank_count)}}
        on_path = _overlap(critical.get(track), row.start, row.end) + reward_marks.get(index, 0.0)
        if on_path > 0:
            event["cat"] = f"{row.state},critical_path"
            event["args"]["critical_path_s"] = on_path
        events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"summary_schedule":
            (summary or {}).get("schedule", "")}}


def _critical_spans(summary: Mapping[str, Any]) -> dict[tuple, tuple[list[float], list[float]]]:
    """Per track (pool, rank_start, rank_count): the starts and ends of its critical-path elements, in order."""
    spans: dict[tuple, list[tuple[float, float]]] = {}
    for step in (summary.get("critical_path") or {}).get("steps", []):
        for element in step["chain"]:
            if element["phase"] == "reward":    # a sample's reward latency: no interval of its own
                continue
            track = (element["pool"], *element["ranks"])
            spans.setdefault(track, []).append((element["start_s"], element["end_s"]))
    out = {}
    for track, pieces in spans.items():
        pieces.sort()
        out[track] = ([a for a, _ in pieces], [b for _, b in pieces])
    return out


def _reward_rows(timeline: pd.DataFrame, summary: Mapping[str, Any]) -> dict[int, float]:
    """Row position -> seconds of a path's reward latency it shows. The latency has no interval of
    its own on the sample's track: the wait for it does, as an idle row (a colocated pool's 'reward'
    dependency, the trainer waiting on split pools). One row a piece, the one labelled reward first,
    then one of the sample's pool, so the path's seconds are counted once."""
    rewards = [(element["pool"], element["start_s"], element["end_s"])
               for step in (summary.get("critical_path") or {}).get("steps", [])
               for element in step["chain"] if element["phase"] == "reward"]
    if not rewards or timeline.empty:
        return {}
    idle = timeline.reset_index(drop=True)
    idle = idle[idle["state"] == "idle"]
    marks: dict[int, float] = {}
    for pool, start, end in rewards:
        rows = idle[(idle["start"] < end) & (idle["end"] > start)]
        if rows.empty:
            continue
        best = min(rows.itertuples(), key=lambda r: (r.label != "reward", r.pool != pool,
                                                     -min(end, r.end) + max(start, r.start), r.pool, r.rank_start))
        marks[best.Index] = marks.get(best.Index, 0.0) + min(end, best.end) - max(start, best.start)
    return marks


def _rounded_span_us(start: float, end: float) -> float:
    """The duration between the rounded start and the rounded end (microseconds, 3 decimals), so that
    an event ends where the next one on its track starts (rounding the two apart overlapped them by
    1 ns)."""
    return round(round(end * 1e6, 3) - round(start * 1e6, 3), 3)


def _overlap(spans: tuple[list[float], list[float]] | None, start: float, end: float) -> float:
    """Seconds of [start, end] covered by the (disjoint, sorted) spans."""
    if not spans:
        return 0.0
    starts, ends = spans
    total, i = 0.0, max(0, bisect.bisect_right(starts, start) - 1)
    while i < len(starts) and starts[i] < end:
        total += max(0.0, min(end, ends[i]) - max(start, starts[i]))
        i += 1
    return total
