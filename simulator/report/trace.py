"""Chrome-trace / Perfetto JSON from a timeline: one process per pool, one track per device group.

Event format (Trace Event Format): complete events ``ph: "X"`` with ``ts`` and ``dur`` in
microseconds, ``pid``/``tid`` integers named by ``ph: "M"`` metadata events.
"""
from __future__ import annotations

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
    for row in timeline.itertuples(index=False):
        name = row.state if row.state != "idle" else f"idle:{row.cause}"
        events.append({"ph": "X", "name": name, "cat": row.state, "pid": pid_of[row.pool],
                       "tid": tid_of[(row.pool, int(row.rank_start), int(row.rank_count))],
                       "ts": round(row.start * 1e6, 3), "dur": round((row.end - row.start) * 1e6, 3),
                       "args": {"iteration": int(row.iteration), "label": row.label, "devices": int(row.rank_count)}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"summary_schedule":
            (summary or {}).get("schedule", "")}}
