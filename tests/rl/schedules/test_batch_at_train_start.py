"""A colocated step picks its batch when its trainers start, not when the threshold share was ready.

Colocated StaleSync that does not split the pool (staleness 0, or a step whose tail leaves no room)
generates the whole round on every device and only then switches to training. The step took the
samples ready by the moment its threshold share f B was ready (long before the round ended) and left
the rest of the round, ready and within the bound, to be dropped as `stale` at the next step: at
staleness 0 it trained half of every batch it had generated whole (2,048-sample batches: 1,024 trained,
1,024 dropped, 37.5% of the generated samples) while the devices still paid the round's whole long
tail. The invariant: no sample ready, and eligible, before a step's trainers start is left behind
while the step trains fewer than a batch."""
import math

import pytest

from simulator.api import simulate
from simulator.rl.fake_costs import FakeCosts
from tests.rl.schedules.test_schedules import run, scenario

SMALL = {"workload": "grpo-qwen2.5-7b", "topology": "dgx-h100", "iterations": 3,
         "overrides": ["topology.nodes=2", "workload.prompts_per_step=128", "workload.mini_batch_prompts=64"]}


def _run(*overrides):
    return simulate(None, schedule="stalesync", **{**SMALL, "overrides": [*SMALL["overrides"], *overrides]})


def _left_behind(result) -> list[tuple[int, int, int]]:
    """(step, trained, left): steps that trained fewer than a batch while samples ready before their
    trainers switched to training (the step's fetch start less its switch), within the bound and
    never consumed by an earlier step, were left for a later step or dropped."""
    s, samples = result.summary, result.samples
    bound, batch = s["staleness"]["bound"], s["samples"]["batch"]
    switch_s = s["stage_time_s"]["switch_to_train"]
    out = []
    for row in result.iterations.itertuples():
        k = row.iteration
        trained = int((samples.consumed_iteration == k).sum())
        left = samples[((samples.consumed_iteration > k) | samples.dropped)
                       & (samples.ready <= row.start - switch_s - 1e-6)
                       & (samples.version >= math.ceil(k - bound - 1e-9)) & (samples.version <= k)]
        if trained < batch and len(left):
            out.append((k, trained, len(left)))
    return out


def test_staleness_0_trains_the_round_it_generated():
    """Without a split the round is generated whole before training: at a bound of 0 a step trains
    every sample of it (1,024 of 2,048 before), and waits for the rule rewards of the last
    finishers, still being scored when its devices stop generating, as the colocated kind does
    (they aged out as stale: 7 of 65,536 on the seed over 8 iterations, the round's longest)."""
    zero = _run("schedule.staleness=0")
    samples = zero.summary["samples"]
    assert _left_behind(zero) == []
    assert samples["batch"] == 2048 and samples["trained_per_step"] == samples["batch"]
    assert samples["dropped"] == {} and samples["stale_fraction"] == 0.0
    sync = simulate(None, schedule="colocated", **SMALL).summary
    assert zero.summary["tokens_per_s"] == pytest.approx(sync["tokens_per_s"], rel=0.01)
    assert zero.summary["makespan_s"] == pytest.approx(sync["makespan_s"], rel=0.01)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("reward_s", [0.01, 0.2])
def test_at_staleness_0_stalesync_is_the_synchronous_step(seed, reward_s):
    """At a bound of 0 colocated StaleSync is the synchronous colocated step with its own reward
    handover (each sample scored as it finishes), figure for figure: the step waits for the last
    rule rewards of its round. It switched to training when generation ended and left the round's
    last finishers (its longest responses), still being scored, to age out as stale: 3 to 5 of
    256 samples over 4 steps here, and a shorter makespan from training fewer tokens."""
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2,
                      reward_s_per_sample=reward_s)
    rec, _, samples, summary = run(scenario("stalesync", seed=seed, staleness=0), costs, devices=16)
    sync_rec, _, sync_samples, sync = run(scenario("colocated", seed=seed, workload={"reward": {"handover": "sample"}}),
                                          costs, devices=16)
    assert summary["samples"]["dropped"] == {} and (samples["consumed_iteration"] >= 0).all()
    assert [it["samples"] for it in rec.iterations] == [summary["samples"]["batch"]] * 4
    assert rec.makespan_s == sync_rec.makespan_s
    assert summary["tokens_per_s"] == sync["tokens_per_s"]
    assert samples["consumed_iteration"].tolist() == sync_samples["consumed_iteration"].tolist()


def test_a_step_that_runs_synchronous_takes_every_ready_sample():
    """A partial rollout's steps that do not split (the round's budgeted segments end before a tail
    could consolidate) took the samples ready at the threshold share and left hundreds of ready ones
    to the next step; they now take up to a whole batch of what is ready when training starts."""
    heavy = _run("workload.response_length.sigma=2.0", "workload.response_length.median=400",
                 "schedule.staleness=1", "schedule.partial_rollout=true", "schedule.length_budget=1024")
    assert _left_behind(heavy) == []
    assert heavy.summary["samples"]["trained_per_step"] <= heavy.summary["samples"]["batch"]


def _older_left_behind(result) -> list[tuple[int, int]]:
    """(step, samples): steps that trained a sample of a newer weights version while older samples,
    ready before the step started and within the bound, were left (oldest weights first)."""
    s, samples = result.summary, result.samples
    bound = s["staleness"]["bound"]
    out = []
    for row in result.iterations.itertuples():
        k = row.iteration
        took = samples[samples.consumed_iteration == k]
        left = samples[((samples.consumed_iteration > k) | samples.dropped) & (samples.ready <= row.start - 1e-6)
                       & (samples.version >= math.ceil(k - bound - 1e-9)) & (samples.version < took.version.max())]
        if len(left):
            out.append((k, len(left)))
    return out


def test_a_split_pool_trainer_busy_past_its_batch_takes_the_oldest_ready_by_its_start():
    """A trainer still training step k - 1 when step k's batch was ready took the samples ready at
    that moment; samples of older weights that became ready before it was free were passed over for
    newer ones (step 4 of this run: 803 samples of version 3 trained, 3 of version 2 left unused)."""
    run = simulate(None, schedule="async", **{**SMALL, "iterations": 5,
                                              "overrides": [*SMALL["overrides"], "schedule.staleness=2"]})
    assert _older_left_behind(run) == []
    assert (run.iterations["samples"] == run.summary["samples"]["batch"]).all()
