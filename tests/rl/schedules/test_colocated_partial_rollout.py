"""Colocated partial rollout (issue 14, class 2): a length budget that leaves fewer than a batch of
finished samples in a round no longer ends in AssertionError; the engine generates further segments
of the carried sequences until the trainer's batch is ready (StaleSync: its threshold share of the
batch, stream_threshold; a whole batch at stream_threshold 1)."""
import pytest

from simulator.api import simulate

TINY = {
    "topology": {"preset": "dgx-h100", "nodes": 1},
    "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 4, "samples_per_prompt": 4, "mini_batch_prompts": 4,
                 "prompt_length": {"dist": "lognormal", "median": 32, "sigma": 0.5, "max": 128},
                 "response_length": {"dist": "lognormal", "median": 128, "sigma": 1.0, "max": 512}},
    "iterations": 4,
}


def _run(kind, **sched):
    return simulate({**TINY, "schedule": {"kind": kind, **sched}})


@pytest.mark.parametrize("threshold, least", [(1.0, 16), (0.5, 8)])
@pytest.mark.parametrize("budget", [16, 64])
def test_a_small_budget_trains_at_least_the_threshold_share(budget, threshold, least):
    result = _run("stalesync", partial_rollout=True, length_budget=budget, stream_threshold=threshold)
    samples = result.iterations["samples"]
    assert ((samples >= least) & (samples <= 16)).all(), samples.tolist()
    assert result.summary["step_time_s"] > 0


@pytest.mark.parametrize("budget", [512, 100_000])
def test_a_budget_at_or_past_the_longest_response_is_refused(budget):
    """length_budget >= response max never cuts a sequence: the run was byte for byte the one without
    partial rollout, the knob read past; it is refused, naming the budget."""
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError) as info:
        _run("stalesync", staleness=1, partial_rollout=True, length_budget=budget)
    assert info.value.field == "schedule.length_budget" and "below 512" in info.value.fix
    assert _run("stalesync", staleness=1, partial_rollout=True, length_budget=511).summary["step_time_s"] > 0
