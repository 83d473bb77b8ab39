"""report/trace.py marks the intervals of each step's critical path (rl/critical_path.py)."""
from __future__ import annotations

import math

import numpy as np

from simulator.report.trace import chrome_trace
from simulator.rl import critical_path as cp
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario


def _lengths(median):
    def sample(rng, n_prompts, n, step):
        return np.clip(np.round(rng.lognormal(np.log(median), 0.8, size=(n_prompts, n))), 1, 4000).astype(int)
    return sample


def test_marked_intervals_hold_exactly_the_path_time():
    sc = load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 4, "samples_per_prompt": 4},
                        "schedule": {"kind": "one-step-off"}, "iterations": 4, "seed": 2})
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, reward_s_per_sample=1e-3, instance_max_seqs=4)
    rec = run_schedule(sc, costs, 8, _lengths(100), _lengths(400))
    timeline = rec.timeline.to_frame()
    summary = {"critical_path": cp.summarize(cp.critical_paths(rec, timeline), rec.samples.flat())}
    events = [e for e in chrome_trace(timeline, summary)["traceEvents"] if e["ph"] == "X"]
    marked = [e for e in events if "critical_path_s" in e["args"]]
    assert marked and all(e["cat"].endswith(",critical_path") for e in marked)
    assert all(e["args"]["critical_path_s"] <= e["dur"] * 1e-6 + 1e-9 for e in marked)
    steps = summary["critical_path"]["steps"]
    # the reward latency too, on the idle row that waits for it (left unmarked before: the marked
    # seconds fell short of the makespan by the path's reward segments, an idle-time trial)
    path_s = sum(s["length_s"] for s in steps)
    assert math.isclose(sum(e["args"]["critical_path_s"] for e in marked), path_s, rel_tol=1e-9)
    # without a critical path in the summary nothing is marked
    assert not any("critical_path_s" in e["args"] for e in chrome_trace(timeline, {})["traceEvents"] if e["ph"] == "X")


def test_events_on_a_track_end_where_the_next_starts_after_rounding():
    """ts and dur were rounded apart (to the nanosecond), so an event could end 1 ns past the next
    one's start on its track; dur is now the rounded end less the rounded start."""
    from simulator.des import Timeline
    from simulator.report.trace import chrome_trace

    rec = Timeline()
    bounds = [0.0, 0.1234567894, 0.2469135786, 1.0000000006, 1.3333333337]
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        rec.add("actor", 0, 1, "generate", start, end, iteration=0)
    events = [e for e in chrome_trace(rec.to_frame())["traceEvents"] if e["ph"] == "X"]
    for this, following in zip(events[:-1], events[1:], strict=True):
        assert round(this["ts"] + this["dur"], 3) == following["ts"]
