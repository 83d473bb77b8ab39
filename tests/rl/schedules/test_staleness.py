"""The staleness rule (rl/schedules/staleness.py) at fractional bounds: every test drew whole ones,
where ceil and floor agree (an audit's mutation of the rule to floor passed)."""
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules.staleness import COUNT_TOL, ceil_count, min_version
from tests.rl.schedules.test_schedules import _costs, run, scenario


def test_the_oldest_version_a_step_may_use_rounds_up():
    assert [min_version(3, s) for s in (0, 0.5, 1, 1.5, 2, 3.2)] == [3, 3, 2, 2, 1, 0]
    assert ceil_count(0.5 * 6) == 3   # round-off forgiven


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["one-step-off", "async", "stalesync"]), bound=st.floats(0.5, 3.0),
       seed=st.integers(0, 1000))
@example(kind="one-step-off", bound=1.9999999999999996, seed=0)   # round-off of 2 (found by CI)
def test_no_consumed_sample_is_older_than_a_fractional_bound(kind, bound, seed):
    """one-step-off at staleness 1.5 trained samples 2 versions old under floor (an audit's check)."""
    sc = scenario(kind, iterations=5, seed=seed, staleness=bound)
    _, _, samples, summary = run(sc, _costs({"slots": 4}), devices=16)
    consumed = samples["consumed_iteration"] >= 0
    # the rule forgives round-off (COUNT_TOL): a bound of 1.9999999999999996 is 2
    assert samples.loc[consumed, "staleness"].max() <= math.floor(bound + COUNT_TOL)
    assert summary["staleness"]["max"] <= bound + COUNT_TOL


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bound=st.sampled_from([0, 0.5, 1, 2]), threshold=st.sampled_from([0.25, 0.5, 1.0]),
       devices=st.sampled_from([8, 16]), slots=st.sampled_from([2, 1000]), dapo=st.booleans(),
       partial=st.booleans(), reward_s=st.sampled_from([0.01, 0.2]), seed=st.integers(0, 1000))
def test_colocated_stalesync_ages_no_sample_out(bound, threshold, devices, slots, dapo, partial, reward_s, seed):
    """A colocated StaleSync step waits for the rule rewards of the samples the next step may no
    longer take, so none is dropped as stale: at a bound below 1 the round is generated whole and
    its last finishers, still being scored when the devices stopped generating, aged out (every
    such case with a reward latency); at 1 or more the tail joins the next batch."""
    sched = {"staleness": bound, "stream_threshold": threshold}
    if partial and bound >= 1:   # a partial rollout needs a bound of at least 1
        sched.update(partial_rollout=True, length_budget=500)
    workload = {"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 0.6}} if dapo else None
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, switch_s=0.1, instance_max_seqs=slots,
                      reward_s_per_sample=reward_s)
    _, _, samples, summary = run(scenario("stalesync", seed=seed, workload=workload, **sched), costs, devices=devices)
    assert "stale" not in summary["samples"]["dropped"]
    assert (samples["drop_reason"] != "stale").all()
