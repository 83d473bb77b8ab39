"""The console's rows of the rollout engines' counts (summary['rollout'], metrics.rollout_counts):
preemptions with the contexts they prefilled again, the prefix cache's share of the prefill tokens,
multi-turn contexts evicted and prefilled again - each where it happened, none where the counts are
null (not measured) or zero, in `rlsim run`'s table and `rlsim compare`'s, one line each at 80 columns."""
from __future__ import annotations

import re

import pytest

import simulator
from simulator.llm.inference import ENGINE_COUNTERS
from simulator.report import console
from simulator.rl.fake_costs import FakeCosts

LABEL_WIDTH, VALUE_WIDTH = 37, 36     # the run table's widest label and value: 80 columns in all

# prefilled_tokens counts every prefill: 700 tokens admitted for the first time, the 1,234 preempted and 200
# evicted tokens prefilled again, the 400 resumed ones (metrics.rollout_counts)
COUNTS = {"preemptions": 3, "preemption_reprefill_tokens": 1234, "prefilled_tokens": 2534, "prompt_hit_tokens": 300,
          "retained_context_tokens": 900, "evicted_context_tokens": 500, "eviction_reprefill_tokens": 200,
          "resume_reprefill_tokens": 400}


def test_each_count_that_happened_is_a_row_in_closed_form():
    assert console.engine_count_rows(COUNTS) == [
        ("rollout preemptions (re-prefilled)", "3 (1,234 tokens)"),
        ("first prefills hit in prefix cache", "30.0% of 1,000"),          # 300 / (300 + 700)
        ("contexts evicted / re-prefilled", "500 / 200 tokens"),
        ("resumed partial rollouts re-prefilled", "400 tokens")]


def test_the_hit_share_leaves_re_prefills_out():
    """A StaleSync run re-prefills its resumed tail (resume_reprefill_tokens); the share read 28% on
    the seed against colocated's 93% for the same prompts: it is the prefix cache's hit rate of the
    tokens admitted for the first time, whatever a schedule prefills again."""
    first = {**dict.fromkeys(ENGINE_COUNTERS, 0), "prefilled_tokens": 700, "prompt_hit_tokens": 300}
    again = {**first, "prefilled_tokens": 700 + 5_000, "resume_reprefill_tokens": 5_000}
    assert console.engine_count_rows(first)[0] == console.engine_count_rows(again)[0] == \
        ("first prefills hit in prefix cache", "30.0% of 1,000")


def test_stalesync_and_colocated_hit_the_same_share_of_the_same_prompts():
    # a real run: StaleSync's resumed tail prefills 272k tokens again, its prompts hit as colocated's
    shares = []
    for schedule in ("colocated", "stalesync"):
        rollout = simulator.simulate(
            workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, iterations=3, schedule=schedule,
            overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4", "workload.train_layout.tp=2",
                       "workload.mini_batch_prompts=16"]).summary["rollout"]
        shares.append(console.engine_count_rows(rollout))
    assert shares[1][1][1].endswith("tokens") and shares[0][0] == shares[1][0]


@pytest.mark.parametrize("rollout", [dict.fromkeys(ENGINE_COUNTERS, 0), dict.fromkeys(ENGINE_COUNTERS),
                                     {"occupancy": 0.5, "low_batch_fraction": 0.1}],
                         ids=["zero", "not-measured", "absent"])
def test_counts_that_are_zero_null_or_absent_show_no_row(rollout):
    assert console.engine_count_rows(rollout) == []


def test_only_what_happened_shows():
    # prefills without a hit, no preemption, nothing evicted: no row; an eviction never prefilled again is one
    assert console.engine_count_rows({**dict.fromkeys(ENGINE_COUNTERS, 0), "prefilled_tokens": 10}) == []
    assert console.engine_count_rows({**dict.fromkeys(ENGINE_COUNTERS, 0), "evicted_context_tokens": 7}) == \
        [("contexts evicted / re-prefilled", "7 / 0 tokens")]


def test_the_rows_fit_the_tables_width_at_large_counts():
    huge = {key: 9_876_543_210 for key in ENGINE_COUNTERS}
    for label, value in console.engine_count_rows(huge):
        assert len(label) <= LABEL_WIDTH and len(value) <= VALUE_WIDTH, (label, value)


def _summary(**rollout: int) -> dict:
    small = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=1,
                 overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=2",
                            "workload.mini_batch_prompts=4"])
    summary = simulator.simulate(None, costs=FakeCosts(instance_devices=2, train_group_devices=2), **small).summary
    # FakeCosts' engines count nothing; a resumed sequence's re-prefill the schedule counts (StaleSync's
    # tail consolidation resumes the cut tail)
    assert all(summary["rollout"][key] == 0 for key in ENGINE_COUNTERS if key != "resume_reprefill_tokens")
    return {**summary, "rollout": {**summary["rollout"], **rollout}}


def test_run_console_prints_the_rows_one_line_each_at_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    console.print_summary(_summary())
    plain = capsys.readouterr().out
    assert not re.search("preemptions|prefix cache|evicted", plain)
    console.print_summary(_summary(**{**COUNTS, "preemption_reprefill_tokens": 9_876_543_210}))
    lines = capsys.readouterr().out.splitlines()
    for label in ("rollout preemptions (re-prefilled)", "first prefills hit in prefix cache",
                  "contexts evicted / re-prefilled"):
        line = next(line for line in lines if label in line)
        assert len(line) <= 80
    # beside the occupancy rows they explain
    order = [next(i for i, line in enumerate(lines) if text in line)
             for text in ("rollout time at low batch", "rollout preemptions", "trained samples")]
    assert order == sorted(order)


def _row(schedule: str, **rollout) -> dict:
    return {"workload": "w", "devices": 16, "schedule": schedule, "placement": "split", "steady_tokens_per_s": 100.0,
            "steady_step_time_s": 10.0, "step_time_s": 11.0, "tokens_per_s": 90.0, "tokens_per_s_per_device": 5.6,
            "generated_tokens_per_s": 120.0, "steady_bubble_fraction": 0.2, "bubble_fraction": 0.1,
            "bubbles_by_cause": {"long_tail": 0.1}, "rollout": {"occupancy": 0.5, "low_batch_fraction": 0.1, **rollout},
            "mfu": 0.3, "peak_memory_bytes": 5e10, "staleness": {"max": 0}, "pools": {"train": 8, "rollout": 8},
            "notes": []}


def test_compare_shows_a_count_row_where_any_run_has_it(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    zero = dict.fromkeys(ENGINE_COUNTERS, 0)
    console.print_comparison([_row("colocated", **zero), _row("disaggregated", **zero)])
    assert not re.search("preemptions|prefix cache|re-prefilled", capsys.readouterr().out)
    console.print_comparison([_row("colocated", **zero), _row("disaggregated", **COUNTS), _row("stalesync")])
    out = capsys.readouterr().out
    cells = {label: re.split(r"\s*│\s*", line.strip("│ "))[1:]
             for line in out.splitlines() for label in ("rollout preemptions", "first prefills hit in prefix cache",
                                                        "contexts re-prefilled (tokens)") if label in line}
    # the third run's summary has no counts (not measured): "-", as a run without a hit
    assert cells == {"rollout preemptions": ["0", "3", "-"], "first prefills hit in prefix cache": ["-", "30.0%", "-"],
                     "contexts re-prefilled (tokens)": ["0", "200", "-"]}


def test_a_tight_kv_pool_shows_its_preemptions_in_the_run_table(capsys, monkeypatch):
    # a real run: the engines' counts reach the console (tests/rl/test_rollout_counts.py's tight pool)
    monkeypatch.setenv("COLUMNS", "80")
    summary = simulator.simulate(
        workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, iterations=2, schedule="colocated",
        overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4", "workload.train_layout.tp=2",
                   "workload.mini_batch_prompts=16", "workload.rollout_layout.gpu_memory_utilization=0.21"]).summary
    counts = summary["rollout"]
    assert counts["preemptions"] > 0
    console.print_summary(summary)
    out = capsys.readouterr().out
    assert f"{counts['preemptions']:,} ({counts['preemption_reprefill_tokens']:,} tokens)" in out


def test_a_resumed_partial_rollouts_re_prefill_has_its_row():
    zero = dict.fromkeys(ENGINE_COUNTERS, 0)
    assert console.engine_count_rows({**zero, "resume_reprefill_tokens": 12_345}) == \
        [("resumed partial rollouts re-prefilled", "12,345 tokens")]
    assert all(len(label) <= 37 for label, _ in console.engine_count_rows({**zero, "resume_reprefill_tokens": 1}))
