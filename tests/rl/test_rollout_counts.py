"""The run summary's rollout counts (metrics.rollout_counts, llm.inference.ENGINE_COUNTERS): every
kind that runs rollout engines reports them (integers, never a silent 0 nor a missing key), a
closed form where nothing is cut (each sample's prompt prefilled or hit once), a pool that
preempts, and the same bytes twice."""
import json

import pytest

import simulator
from simulator.llm.inference import ENGINE_COUNTERS
from simulator.metrics import rollout_counts
from simulator.rl.schedules import registry

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, iterations=2,
             overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                        "workload.train_layout.tp=2"])
# separate_async trains train_batch_size / parameter_sync_step prompts per local update (its own check)
MINI_BATCH = {"verl-separate-async": 8}


def _run(schedule: str, *overrides: str, keep_samples: bool = False):
    mini = f"workload.mini_batch_prompts={MINI_BATCH.get(schedule, 16)}"
    small = {**SMALL, "overrides": [*SMALL["overrides"], mini, *overrides]}
    return simulator.simulate(schedule=schedule, keep_samples=keep_samples, **small)


@pytest.mark.parametrize("schedule", registry.kinds())
def test_every_kind_reports_its_engines_counts(schedule):
    counts = _run(schedule).summary["rollout"]
    assert all(isinstance(counts[key], int) for key in ENGINE_COUNTERS), counts
    assert counts["prefilled_tokens"] > 0 and counts["prompt_hit_tokens"] >= 0


def test_an_uncut_run_prefills_or_hits_each_generated_samples_prompt_once():
    # colocated, nothing cut nor resumed, a roomy pool (no preemption): every sample's prompt is
    # computed by its prefill but the tokens a running sibling held (its prompt's last token again),
    # so prefilled + hit = the prompts' tokens, and prefilled >= one prompt a group
    result = _run("colocated", keep_samples=True)
    counts, samples = result.summary["rollout"], result.samples
    assert counts["preemptions"] == counts["preemption_reprefill_tokens"] == 0
    prompts = int(samples["prompt_len"].sum())
    assert counts["prefilled_tokens"] + counts["prompt_hit_tokens"] == prompts
    firsts = samples.groupby(["round", "group"])["prompt_len"].first()
    assert counts["prefilled_tokens"] >= int(firsts.sum())


def test_a_tight_pool_preempts_and_the_bytes_repeat():
    tight = ("workload.rollout_layout.gpu_memory_utilization=0.21",)
    first, again = (_run("colocated", *tight).summary for _ in range(2))
    assert first["rollout"]["preemptions"] > 0
    assert first["rollout"]["preemption_reprefill_tokens"] > first["rollout"]["preemptions"]
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert _run("colocated").summary["rollout"]["preemptions"] == 0


@pytest.mark.parametrize("schedule, knobs", [
    ("colocated", ["schedule.overprovision=0.25"]),
    ("stalesync", []),
    ("nemo-rl-async", ["schedule.in_flight_weight_updates=true"]),
])
def test_a_cut_run_counts_its_engines_up_to_the_cuts(schedule, knobs):
    # over-provisioning aborts the slowest samples and a cut stops generation at a weight update: the
    # counts are the engines' up to the cut (ResumableRun.counts_at, checked against a fresh engine in
    # tests/llm/test_engine_counts.py); here they are reported and repeat byte for byte
    first, again = (_run(schedule, *knobs).summary for _ in range(2))
    assert json.dumps(first["rollout"], sort_keys=True) == json.dumps(again["rollout"], sort_keys=True)
    assert first["rollout"]["prefilled_tokens"] > 0


def test_a_run_that_generated_without_counting_reports_null_not_0():
    class Record:   # the fields rollout_counts reads
        rollout = {"instance_s": 1.0, "slot_s": 0.5, "low_batch_s": 0.0}
    assert rollout_counts(Record(), generated_tokens=10.0) == dict.fromkeys(ENGINE_COUNTERS)
    assert rollout_counts(Record(), generated_tokens=0.0) == dict.fromkeys(ENGINE_COUNTERS, 0)
