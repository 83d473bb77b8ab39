"""The console's stage rows say what each schedule's `stage_time_s.generate` is: a colocated pool's
round wall time, a split pool's mean busy time of a rollout instance (docs/internals.md
`stage_time_s`). Every row read "stage: generate (per step, whole run)", so one prompt on split pools
showed 1.21 s against colocated's 9.65 s for the same 9.85 s generation."""
from __future__ import annotations

import pytest

import simulator
from simulator.report import console
from simulator.rl.fake_costs import FakeCosts

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=2,
             overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=2", "workload.mini_batch_prompts=4"])


def _stage_rows(schedule: str, capsys: pytest.CaptureFixture[str]) -> tuple[dict, dict[str, float]]:
    summary = simulator.simulate(None, costs=FakeCosts(instance_devices=2, train_group_devices=2), schedule=schedule,
                                 **SMALL).summary
    console.print_summary(summary)
    rows = {}
    for line in capsys.readouterr().out.split("note:")[0].splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0].startswith("stage: "):
            rows[cells[0]] = float(cells[1].split()[0].replace(",", ""))
    return summary, rows


@pytest.mark.parametrize(("schedule", "meaning"), [
    ("colocated", "round wall time"), ("stalesync", "round wall time"), ("verl-sync", "round wall time"),
    ("disaggregated", "mean instance busy"), ("one-step-off", "mean instance busy"),
    ("verl-fully-async", "mean instance busy")])
def test_the_generate_row_says_what_its_figure_is(schedule, meaning, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    summary, rows = _stage_rows(schedule, capsys)
    generate = summary["stage_time_s"]["generate"]
    label = f"stage: generate, {meaning} (per step, whole run)"
    assert rows[label] == pytest.approx(generate, rel=0.01)
    # the other stages keep their label; the summary's keys are as they were (contract_check)
    assert all(stage in ("generate", "tail_generate") or f"stage: {stage} (per step, whole run)" in rows
               for stage in summary["stage_time_s"])


def test_stalesync_colocated_tail_is_wall_time_too(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    summary, rows = _stage_rows("stalesync", capsys)
    assert "tail_generate" in summary["stage_time_s"]
    assert "stage: tail_generate, round wall time (per step, whole run)" in rows


def test_a_placement_without_a_meaning_keeps_the_plain_label():
    assert console.stage_label("generate", None) == "  stage: generate (per step, whole run)"
    assert console.stage_label("train_actor", "disaggregated") == "  stage: train_actor (per step, whole run)"
