"""report/critical_path.py: the report's critical-path section."""
from __future__ import annotations

import numpy as np

from simulator.report import critical_path as section
from simulator.report.html import _summary_table
from simulator.rl import critical_path as cp
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario


def _summary():
    sc = load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 4, "samples_per_prompt": 4},
                        "schedule": {"kind": "colocated"}, "iterations": 3})
    def lengths(rng, n_prompts, n, step):
        return np.full((n_prompts, n), 200, int)
    rec = run_schedule(sc, FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2), 4,
                       lengths, lengths)
    timeline = rec.timeline.to_frame()
    return {"schedule": "colocated", "critical_path": cp.summarize(cp.critical_paths(rec, timeline), rec.samples.flat())}


def test_section_lists_the_causes_on_the_path_and_the_last_chain():
    s = _summary()
    page = section.section({"colocated": s})
    crit = s["critical_path"]
    on_path = [c for c, v in crit["free_delta_s"].items() if v > 0]
    assert {"generate", "switch", "train", "weight_sync"} <= set(on_path)
    for cause in on_path:
        assert f"<td>{cause}</td><td>{crit['share'][cause]:.1%}</td>" in page
    assert "<td>planning</td>" not in page                      # causes not on the path are left out
    assert page.count("<li>") == len(crit["steps"][-1]["chain"])
    assert section.section({"colocated": {"schedule": "colocated"}}) == ""


def test_summary_table_leaves_the_per_step_chains_to_the_section():
    table = _summary_table({"colocated": _summary()})
    assert "critical_path.free_delta_s.train" in table and "critical_path.steps" not in table
