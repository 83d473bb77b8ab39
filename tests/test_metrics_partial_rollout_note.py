"""Partial rollouts with a small length budget over few iterations never finish the capped samples:
each round resumes a cut sample by one segment, so a response of the law's max needs ceil(max /
length_budget) rounds (a report audit: the longest trained 6,652 of a law with 42% at 8,192, tokens/s
9.1k against 32.6k without partial rollouts). Correct behaviour, said by a note: how many cut
samples the run left unfinished, and that the run is too short for the budget."""
import pytest

import simulator
from simulator.metrics import summary_notes
from simulator.rl.fake_costs import FakeCosts

BUDGET, LONGEST = 512, 8192            # grpo-qwen2.5-7b's response law: max 8,192, so 16 segments
SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
             overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=4"])


def _run(schedule: str, iterations: int, budget: int | None = BUDGET) -> dict:
    partial = [] if budget is None else ["schedule.partial_rollout=true", f"schedule.length_budget={budget}"]
    return simulator.simulate(None, schedule=schedule, costs=FakeCosts(instance_devices=2, train_group_devices=2),
                              iterations=iterations,
                              **{**SMALL, "overrides": [*SMALL["overrides"], *partial]}).summary


def _note(summary: dict) -> list[str]:
    return [n for n in summary_notes(summary) if "schedule.length_budget" in n and "never finished" in n]


@pytest.mark.parametrize("schedule", ["async", "stalesync"])
def test_a_run_shorter_than_the_budgets_segments_says_how_many_cut_samples_never_finished(schedule):
    summary = _run(schedule, 3)
    cut = summary["samples_in_flight"]["cut"]
    assert 0 < cut <= summary["samples_in_flight"]["trajectories"]
    assert summary["staleness"]["length_budget"] == BUDGET and summary["staleness"]["segments_longest"] == 16
    [note] = _note(summary)
    assert f"{cut:,} cut" in note and "3 iterations" in note and "16 segments" in note
    assert "--iterations" in note and "schedule.length_budget" in note
    assert note in summary["notes"]


def test_enough_iterations_for_the_longest_response_or_no_budget_gives_no_note():
    assert not _note(_run("async", 16))             # as many rounds as the longest response's segments
    whole = _run("async", 3, budget=None)
    assert whole["samples_in_flight"]["cut"] == 0 and "length_budget" not in whole["staleness"] and not _note(whole)


def test_the_note_on_a_synthetic_summary():
    base = {"schedule": "async", "iterations": 4, "samples_in_flight": {"trajectories": 40, "cut": 25},
            "staleness": {"bound": 1.0, "max": 1.0, "partial_rollout": True, "length_budget": 1024,
                          "segments_longest": 8}}
    [note] = _note(base)
    assert note.startswith("partial rollouts: 25 cut samples never finished by the run's end")
    assert not _note({**base, "iterations": 8})
    assert not _note({**base, "samples_in_flight": {"trajectories": 40, "cut": 0}})


def test_the_budgets_figures_are_better_neither_way():
    # under staleness.*, read "lower is better" by name; they are the scenario's input
    from simulator.uncertainty.compare import better_direction
    assert better_direction("staleness.length_budget") is None and better_direction("staleness.segments_longest") is None
    assert better_direction("staleness.max") == "lower" and better_direction("samples_in_flight.cut") is None
