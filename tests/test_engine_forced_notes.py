"""What a named engine forces is said: `rlsim plan --stage rollout` (console and --json) gives the
notes `rlsim run` gives (engine_software.model_forced), and SGLang's overlap scheduler, off with
pipeline stages, has its note in both (stage_forced_notes)."""
from __future__ import annotations

import json

from simulator.engine_software import SGLANG_STAGES_NO_OVERLAP, stage_forced_notes

RADIX_OFF = ("workload.engine sglang-0.5.6 runs nemotron-h-8b with inference.enable_prefix_caching false whatever it "
             "is given (true here)")
STAGES = f"workload.engine sglang-0.5.6 runs with inference.async_scheduling false whatever it is given at rollout_layout.pp 2: {SGLANG_STAGES_NO_OVERLAP}"
PLAN = ["plan", "--topology", "dgx-h100", "--model", "nemotron-h-8b", "--stage", "rollout", "--set",
        "workload.engine=sglang-0.5.6", "--set", "planner.rollout.pp=[1,2]", "--top", "8"]


def test_the_stage_note_only_for_an_overlapping_engine_with_stages():
    assert stage_forced_notes("sglang-0.5.6", 2) == [STAGES]
    assert stage_forced_notes("sglang-0.5.6", 1) == stage_forced_notes("vllm-v1", 2) == stage_forced_notes(None, 2) == []


def test_plan_json_gives_each_rollout_candidate_the_engines_notes(capsys):
    from simulator.cli import main
    assert main([*PLAN, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["layout"].get("pp", 1) for row in rows} == {1, 2}
    for row in rows:
        assert row["notes"][0].startswith(RADIX_OFF)
        assert row["notes"][1:] == ([STAGES] if row["layout"].get("pp", 1) == 2 else [])


def test_plan_console_prints_each_note_once(capsys):
    from simulator.cli import main
    assert main(PLAN) == 0
    out = capsys.readouterr().out
    assert out.count(f"note: {RADIX_OFF}") == 1 and out.count(f"note: {STAGES}") == 1
    assert main(["plan", "--topology", "dgx-h100", "--model", "llama3.1-8b", "--stage", "rollout"]) == 0
    assert "note: workload.engine" not in capsys.readouterr().out


def test_a_run_with_stages_under_sglang_says_its_overlap_scheduler_is_off():
    from simulator.api import simulate
    from simulator.scenario import load_scenario
    staged = {"topology": {"preset": "dgx-h100", "nodes": 1}, "iterations": 1, "workload": {
        "model": "llama3.1-8b", "prompts_per_step": 8, "samples_per_prompt": 4, "engine": "sglang-0.5.6",
        "rollout_layout": {"tp": 1, "pp": 2, "gpu_memory_utilization": 0.6}}}
    notes = simulate(load_scenario(staged)).summary["notes"]
    assert [n for n in notes if n.startswith("workload.engine")] == [STAGES]
    staged["workload"]["rollout_layout"]["pp"] = 1
    assert not any(n.startswith("workload.engine") for n in simulate(load_scenario(staged)).summary["notes"])
