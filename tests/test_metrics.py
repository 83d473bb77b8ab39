"""Metrics from a timeline: bubbles by cause, exact device-seconds, scaling efficiency."""
import numpy as np
import pytest

from simulator import metrics
from simulator.rl.timeline import GroupClock, Timeline, expand_devices


def _timeline():
    tl = Timeline()
    a = GroupClock(tl, "actor", 0, 4)
    a.per_instance("generate", np.array([1.0, 3.0]), 3.0, 2, 0, "long_tail")
    a.busy("switch", 4.0, 0, cause="switch")
    a.busy("train", 9.0, 0)
    a.busy("sync", 10.0, 0, cause="weight_sync")
    return tl.to_frame()


def test_bubbles_by_cause_are_fractions_of_device_seconds():
    tl = _timeline()
    frac, by = metrics.bubbles(tl)
    total = 4 * 10.0
    assert by["long_tail"] == pytest.approx(2 * 2.0 / total)
    assert by["switch"] == pytest.approx(4 * 1.0 / total)
    assert by["weight_sync"] == pytest.approx(4 * 1.0 / total)
    assert frac == pytest.approx(sum(by.values()))


def test_device_seconds_stay_exact_without_expanding():
    tl = _timeline()
    assert np.allclose(metrics.per_device_time(tl, 4), 10.0)
    per_dev = expand_devices(tl)
    assert len(per_dev) == tl["rank_count"].sum()
    assert (per_dev.groupby("device").apply(lambda f: (f.end - f.start).sum()) == 10.0).all()
    states = metrics.time_in_states(tl)
    assert states["device_s"].sum() == pytest.approx(40.0)


def test_scaling_efficiency():
    frame = metrics.scaling_efficiency([384, 1536], [35_000, 127_000])
    assert frame["scaling_efficiency"].iloc[1] == pytest.approx(127 / 140)


def test_the_reward_wait_counts_a_pools_wait_on_the_teacher_but_not_the_teachers_own_idle():
    """AReaL's trainer idles on the teacher's log-probabilities in rows labelled teacher: 5% of the
    device time read 0.4% (only 'reward' was counted; a guides trial). The teacher pool's own idle
    rows are labelled teacher too, and are no wait for rewards."""
    import pandas as pd

    from simulator.metrics import reward_wait_share
    rows = [("train", "idle", "reward", 0.0, 1.0, 4), ("train", "idle", "teacher", 1.0, 3.0, 4),
            ("train", "train", "train_actor", 3.0, 10.0, 4), ("teacher", "idle", "teacher", 0.0, 10.0, 4),
            ("rollout", "generate", "round 0", 0.0, 10.0, 8)]
    timeline = pd.DataFrame(rows, columns=["pool", "state", "label", "start", "end", "rank_count"])
    assert reward_wait_share(timeline) == pytest.approx((1.0 + 2.0) * 4 / (10.0 * 16))


def test_mfu_counts_the_generation_flops_of_the_samples_trained():
    """MFU = (training FLOPs + the generation FLOPs of the samples finished within the run) / (peak x
    devices x makespan): its only check was 0 < mfu < 1, so dropping the generation passed (an audit)."""
    from tests.rl.schedules.test_schedules import _costs, run, scenario
    rec, _, samples, summary = run(scenario("one-step-off", iterations=4, seed=3), _costs({"slots": 4}), devices=16)
    finished = samples["finish"] <= rec.makespan_s + 1e-9
    share = samples.loc[finished, "generated_tokens"].sum() / samples["generated_tokens"].sum()
    assert share > 0 and rec.gen_flops > 0
    expected = (rec.flops + rec.gen_flops * share) / (rec.peak_flops * rec.n_devices * rec.makespan_s)
    assert summary["mfu"] == pytest.approx(expected, rel=1e-9)
    assert summary["mfu"] > rec.flops / (rec.peak_flops * rec.n_devices * rec.makespan_s)
