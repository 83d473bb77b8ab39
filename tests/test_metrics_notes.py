"""Figures that mislead unless said (issue 14 class 6): StaleSync with staleness 0 on split pools
trains partial batches and drops samples as stale, so its step time looks best; a staleness bound of 2
or more on colocated StaleSync never binds. The summary carries the counts, the notes say it, and the
cheapest pick ranks by trained tokens."""
import pytest

import simulator
from simulator.capacity import Target, cheapest, cost_fields
from simulator.metrics import STALE_NOTE_SHARE, summary_notes
from simulator.rl.fake_costs import FakeCosts

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=4,
             overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=4"])


def _run(staleness, placement="colocated"):
    return simulator.simulate(None, schedule="stalesync", costs=FakeCosts(instance_devices=2, train_group_devices=2),
                              **{**SMALL, "overrides": [*SMALL["overrides"], f"schedule.staleness={staleness}",
                                                        f"schedule.placement={placement}"]}).summary


@pytest.fixture(scope="module")
def runs():
    return {**{s: _run(s) for s in (0, 1, 2)}, "split 0": _run(0, "disaggregated")}


def test_staleness_0_trains_partial_batches_and_says_so(runs):
    """On split pools the trainer starts on the threshold share of its round; at a bound of 0 the
    rest of the round ages out before the next step."""
    zero, one = runs["split 0"]["samples"], runs[1]["samples"]
    assert zero["batch"] == one["batch"] == 32
    assert zero["trained_per_step"] * 4 == zero["consumed"]
    assert zero["trained_per_step"] == zero["batch"] / 2 and zero["stale_fraction"] == pytest.approx(0.375)
    assert one["trained_per_step"] > zero["trained_per_step"] and one["stale_fraction"] == 0.0
    assert runs["split 0"]["step_time_s"] < runs[1]["step_time_s"]   # why it misleads: the shorter step
    assert zero["stale_fraction"] >= STALE_NOTE_SHARE
    assert any("as stale" in n and "tokens/s" in n for n in summary_notes(runs["split 0"]))
    assert not any("as stale" in n for n in summary_notes(runs[1]))


def test_colocated_staleness_0_is_the_synchronous_step(runs):
    """On one pool a bound of 0 lets no tail be cut away: the round is generated whole and trained
    whole (it trained the threshold share and dropped the rest of the round as stale, 37.5%)."""
    zero = runs[0]["samples"]
    assert zero["trained_per_step"] == zero["batch"] == 32 and zero["dropped"] == {}
    assert not any("as stale" in n for n in summary_notes(runs[0]))


def test_a_bound_that_never_binds_is_named(runs):
    assert runs[2]["staleness"]["max"] == 1.0   # colocated StaleSync: one version behind at most
    assert runs[2]["step_time_s"] == runs[1]["step_time_s"]
    assert any("never binds" in n and "colocated StaleSync" in n for n in summary_notes(runs[2]))
    assert not any("never binds" in n for n in summary_notes(runs[1]))


def test_notes_on_synthetic_summaries():
    base = {"schedule": "stalesync", "placement": "colocated", "staleness": {"bound": 1.0, "max": 1.0},
            "samples": {"stale_fraction": 0.0, "trained_per_step": 8192, "batch": 8192}}
    assert summary_notes(base) == []
    dropping = {**base, "samples": {"stale_fraction": 0.375, "trained_per_step": 4096, "batch": 8192}}
    assert "38%" in summary_notes(dropping)[0] and "4,096" in summary_notes(dropping)[0]
    loose = {**base, "staleness": {"bound": 3.0, "max": 1.0}}
    assert "bound 3 never binds" in summary_notes(loose)[0]
    # a fractional bound is its floor (whole versions): the run says so (the what-if notebook said it did)
    half = {**base, "staleness": {"bound": 0.5, "max": 0.0}}
    assert summary_notes(half) == ["staleness bound 0.5 acts as 0: weights versions are whole steps, so a sample is "
                                   "at most 0 version(s) old either way (docs/schedules.md)"]
    assert summary_notes({**base, "staleness": {"bound": float("inf"), "max": 5.0}}) == []
    # a split-pool run too short to lag its bound says so, not that the bound never binds
    short = {**base, "placement": "disaggregated", "iterations": 3, "staleness": {"bound": 8.0, "max": 2.0}}
    assert "bound 8 not reached in 3 iteration(s)" in summary_notes(short)[0]
    long = {**short, "iterations": 20}
    assert "bound 8 never binds" in summary_notes(long)[0]
    # partial rollouts: a resumed sample's staleness is its last version's, while the bound also holds
    # back resumed work (async 1 vs 2 ran differently under the note "gives the same run"; a new-user trial)
    resumed = {**long, "staleness": {"bound": 8.0, "max": 2.0, "partial_rollout": True}}
    assert not any("never binds" in note for note in summary_notes(resumed))


def test_cheapest_ranks_by_trained_tokens_not_by_step():
    """A half-batch config with the shorter step but fewer trained tokens/s per device loses."""
    whole = {"grid": {"s": 1}, "devices": 64, "step_time_s": 450.0, "tokens_per_s": 56_000.0, "device_kinds": ["h100"]}
    half = {"grid": {"s": 0}, "devices": 64, "step_time_s": 410.0, "tokens_per_s": 18_000.0, "device_kinds": ["h100"]}
    target = Target(tokens_per_s=10_000)
    assert cheapest([half, whole], target, 2.0)["grid"] == {"s": 1}
    assert cheapest([half, whole], target)["grid"] == {"s": 1}
    fields = cost_fields(whole, 2.0)
    assert fields["device_hours_per_1m_tokens"] == pytest.approx(64 * 1e6 / 56_000 / 3600)
    assert fields["cost_per_1m_tokens"] == pytest.approx(2.0 * fields["device_hours_per_1m_tokens"])


def test_steady_bubbles_are_those_of_the_steady_window_beside_the_steady_step():
    """Bubbles were whole-run figures printed beside steady-state ones: a NeMo RL 1-step-off import
    read 'bubbles 25%' where its steady steps idle 3% (an idle-time trial)."""
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="one-step-off", iterations=3,
                           overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
    its, t = r.iterations, r.timeline
    low, high = float(its["end"].iloc[0]), float(its["end"].iloc[-1])
    start, end = t["start"].clip(lower=low), t["end"].clip(upper=high)
    seconds = ((end - start).clip(lower=0) * t["rank_count"])
    idle = ~t["state"].isin(["generate", "forward", "train"])
    expected = float(seconds[idle].sum() / seconds.sum())
    assert r.summary["steady_bubble_fraction"] == pytest.approx(expected, rel=1e-12)
    assert sum(r.summary["steady_bubbles_by_cause"].values()) == pytest.approx(expected, rel=1e-9)
    assert r.summary["steady_bubble_fraction"] < r.summary["bubble_fraction"]   # the pipeline's fill left out


def test_a_split_pool_critical_path_that_names_the_side_that_waits_is_qualified():
    """The seed one-step-off run with its experts not TP-sharded (etp 1, ep 32: its etp = tp update
    paces the run itself): 'bottleneck train' (206 s free delta a step), while its rollout pool is
    busy throughout and its trainer 61%: generation sets the pace (an idle-time trial)."""
    r = simulator.simulate(schedule="one-step-off", iterations=4, keep_samples=False,
                           overrides=["workload.train_layout.ep=32", "workload.train_layout.etp=1"])
    busy = r.summary["steady_busy_by_pool"]
    assert busy["rollout"] > 0.95 > busy["train"] + 0.1
    assert r.summary["critical_path"]["bottleneck"] == "train"
    assert any("the rollout side sets the pace" in note for note in r.summary["notes"])
    # where the path's side is the busy one, nothing is said
    fine = {"steady_busy_by_pool": {"rollout": 0.99, "train": 0.31}, "critical_path": {"bottleneck": "generate"}}
    assert not any("sets the pace" in note for note in summary_notes(fine))


def test_a_consolidated_tail_that_outlasts_the_training_beside_it_is_said():
    """3 CloudMatrix supernodes: colocated StaleSync's trainers idled 40% of the steady state waiting
    for the tail, and it lost to colocated with nothing said (a capacity trial)."""
    summary = {"schedule": "stalesync", "stage_time_s": {"tail_generate": 290.8, "train_actor": 51.6,
                                                         "old_logprob": 13.3, "reference": 13.3},
               "steady_bubbles_by_cause": {"long_tail": 0.404}}
    (note,) = [n for n in summary_notes(summary) if "consolidated tail" in n]
    assert "290.8 s" in note and "78.2 s" in note and "40%" in note and "partial_rollout" in note
    quiet = {**summary, "steady_bubbles_by_cause": {"long_tail": 0.05}}
    assert not any("consolidated tail" in n for n in summary_notes(quiet))


def test_training_that_outlasts_the_consolidated_tail_is_said():
    """2 DGX-H100 nodes, Qwen2.5-7B: colocated StaleSync trains on the devices its tail leaves for 252 s
    beside an 88 s tail; the tail's devices waited 30% of the steady state and StaleSync ran 0.78x
    colocated with nothing said (a notebook trial)."""
    summary = {"schedule": "stalesync", "stage_time_s": {"tail_generate": 88.3, "train_actor": 163.8,
                                                         "old_logprob": 44.1, "reference": 44.1},
               "steady_bubbles_by_cause": {"long_tail": 0.007, "dependency": 0.303}}
    (note,) = [n for n in summary_notes(summary) if "consolidated tail" in n]
    assert "252.0 s" in note and "88.3 s" in note and "30%" in note and "consolidate_share" in note
    shorter = {**summary, "stage_time_s": {"tail_generate": 300.0, "train_actor": 100.0}}
    assert not any("consolidated tail" in n for n in summary_notes(shorter))
    quiet = {**summary, "steady_bubbles_by_cause": {"dependency": 0.1}}
    assert not any("consolidated tail" in n for n in summary_notes(quiet))


def test_a_packed_row_shorter_than_the_longest_sample_is_said():
    """schedule.pack_tokens below prompt max + response max: such a sample runs as a micro-batch of
    its own, sequence mode in effect (unsaid before; a schedule trial)."""
    def notes(*extra):
        return simulator.simulate(None, schedule="colocated", costs=FakeCosts(instance_devices=2, train_group_devices=2),
                                  **{**SMALL, "overrides": [*SMALL["overrides"], *extra]}).summary["notes"]
    said = [n for n in notes("schedule.pack_tokens=512") if "pack_tokens" in n]
    assert len(said) == 1 and "512 is below" in said[0]
    assert not any("pack_tokens" in n for n in notes("schedule.pack_tokens=65536"))
    assert not any("pack_tokens" in n for n in notes())
