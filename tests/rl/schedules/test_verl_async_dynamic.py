"""verl 0.9.1 fully_async's dynamic resource controller (schedule.dynamic_resources): its policies'
rules in closed form, the lent devices' record, the rebalance, and invariants over random cases."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules.verl_async_dynamic import DefaultPolicy, FixedRatioPolicy, StaticPolicy
from simulator.scenario import DynamicResources

from .test_verl_async import lognormal, run, scenario


def routed(iterations=6, **sched):
    sched = {"staleness_threshold": 0.5, "partial_rollout": True, **sched}
    return scenario(iterations=iterations, prompts=16, mini=8, request_routing=True, **sched)


def slow_rollout(**kw):
    """A generation-bound run: the trainer waits for its samples (what lending is for)."""
    base = dict(instance_devices=2, train_group_devices=2, sync_s=0.3, switch_s=0.2, instance_max_seqs=8,
                decode_s_per_token=2e-3, train_device_s_per_token=1e-5, forward_device_s_per_token=3e-6)
    return FakeCosts(**{**base, **kw})


def cycle(**kw):
    return {"per_sync": 100, "generated": 100, "expected": 100, "wait_s": [], "wait_samples": [],
            "activate_s": 0.0, "deactivate_s": 0.0, **kw}


def test_the_default_policy_adapts_its_ratio_as_verl_does():
    policy = DefaultPolicy(DynamicResources())
    assert policy.wait_samples(128) == int(128 * 0.3)
    policy.update(cycle(wait_samples=[5]))            # 5 of 100 waited for: +0.05
    assert policy.ratio == pytest.approx(0.35)
    policy.update(cycle(wait_samples=[1]))            # 0.01 clipped up to the 0.02 floor of a step up
    assert policy.ratio == pytest.approx(0.37)
    policy.update(cycle(wait_samples=[40, 40]))       # 0.8 clipped down to 0.1
    assert policy.ratio == pytest.approx(0.47)
    policy.update(cycle())                            # nothing waited for: -0.02
    assert policy.ratio == pytest.approx(0.45)
    for _ in range(30):                               # no floor (verl sets none): the threshold goes to 0
        policy.update(cycle())
    assert policy.ratio < 0 and policy.wait_samples(100) <= 0
    capped = DefaultPolicy(DynamicResources(deactivate_ratio=0.95))
    capped.update(cycle(wait_samples=[50]))
    assert capped.ratio == 1.0


def test_the_default_policy_lends_when_the_shortfall_outweighs_a_switch_pair():
    policy = DefaultPolicy(DynamicResources())
    # no shortfall: the queue's surplus over the expected pace (40) reaches the ratio's share (30)
    assert not policy.should_activate(cycle(generated=140))
    # a shortfall of 30 - 10 = 20 samples; no sample waited for yet: 1000 s each, against 10 s
    first = cycle(generated=110)
    assert policy.should_activate(first) and first["benefit_s"] == pytest.approx(20 * 1000.0)
    # a measured 0.4 s a sample (8 s for 20 waited): 8 s gained, less than 10 s of switching
    assert not policy.should_activate(cycle(generated=110, wait_s=[8.0], wait_samples=[20]))
    policy.update(cycle(activate_s=2.0, deactivate_s=1.0))   # measured switches replace the 10 s
    policy.update(cycle(activate_s=4.0, deactivate_s=1.0))
    measured = cycle(generated=110)
    assert policy.should_activate(measured) and measured["switch_cost_s"] == pytest.approx(4.0)
    assert measured["benefit_s"] == pytest.approx((policy.ratio * 100 - 10) * 0.4)


def test_fixed_ratio_lends_on_the_shortfall_alone_and_static_never():
    fixed = FixedRatioPolicy(DynamicResources(deactivate_ratio=0.5))
    assert fixed.should_activate(cycle(generated=149)) and not fixed.should_activate(cycle(generated=150))
    fixed.update(cycle(wait_samples=[50]))
    assert fixed.ratio == 0.5
    static = StaticPolicy(DynamicResources())
    assert not static.should_activate(cycle(generated=0)) and static.wait_samples(100) == 0


def test_static_policy_is_fully_async_with_nothing_lent():
    costs = slow_rollout()
    plain = run(routed(), costs, devices=12)
    static = run(routed(dynamic_resources={"policy": "static_fully_async"}), costs, devices=12)
    assert static[0].makespan_s == plain[0].makespan_s
    assert [v["step_s"] for v in static[3]["verl"]["per_version"]] == [v["step_s"] for v in plain[3]["verl"]["per_version"]]
    assert static[3]["verl"]["dynamic_resources"]["activations"] == 0


def test_lent_devices_generate_from_the_activation_until_the_queue_holds_the_threshold():
    costs = slow_rollout()
    sc = routed(dynamic_resources={"policy": "fixed_ratio", "deactivate_ratio": 0.5})
    rec, tl, sm, s = run(sc, costs, devices=12, resp=lognormal(400, 0.5, 4000))
    steps = s["verl"]["per_version"]
    ends = np.cumsum([step["step_s"] for step in steps])
    lent = tl[(tl.pool == "train") & (tl.state == "generate")]
    assert len(lent) and steps[0]["lent"] == 0
    for k, step in enumerate(steps[1:], start=1):
        assert step["lent"] == steps[k - 1]["activated"]
        spans = lent[(lent.end > ends[k - 1] + 1e-9) & (lent.start < ends[k] - 1e-9)]
        assert len(spans) == 0 or step["wait_for_enough_samples_s"] > 0   # lent spans: none if nothing waited
        if step["lent"]:   # generation on the trainer's devices only inside the lent span
            assert (spans.start >= ends[k - 1] - 1e-9).all()
            assert (spans.end <= ends[k - 1] + step["wait_for_enough_samples_s"] + 1e-9).all()
            # the wait is whole polls of 1 s
            assert step["wait_for_enough_samples_s"] == pytest.approx(round(step["wait_for_enough_samples_s"]))
            assert step["deactivate_s"] == pytest.approx(0.2) and step["activate_s"] >= 0.2
    assert s["samples"]["consumed"] == 6 * 8 * 4 and sm["sample"].is_unique   # versions x mini x n
    assert np.allclose(metrics.per_device_time(tl, 12), rec.makespan_s)


def test_the_activation_follows_the_default_policy_cycle_by_cycle():
    costs = slow_rollout(switch_s=0.05)
    sc = routed(iterations=8, dynamic_resources={"switch_cost_s": 0.5})
    steps = run(sc, costs, devices=12, resp=lognormal(400, 0.5, 4000))[3]["verl"]["per_version"]
    costs_seen: list[float] = []
    completed = 1
    for k, step in enumerate(steps):
        assert step["expected"] == 8 * completed      # a sync consumes one mini-batch of 8 prompts here
        shortfall = step["deactivate_ratio"] * 8 - (step["generated"] - step["expected"])
        window = costs_seen[-3:]
        if shortfall > 0:
            assert step["switch_cost_s"] == pytest.approx(np.mean(window) if window else 0.5)
            assert step["activated"] == (step["benefit_s"] > step["switch_cost_s"])
        else:
            assert not step["activated"]
        if step["activate_s"] + step["deactivate_s"] > 0:
            costs_seen.append(step["activate_s"] + step["deactivate_s"])
        completed += 1     # every window here produces samples
        if k + 1 < len(steps):
            up = min(0.1, max(0.02, step["wait_samples"] / 8)) if step["wait_samples"] else -0.02
            assert steps[k + 1]["deactivate_ratio"] == pytest.approx(min(1.0, step["deactivate_ratio"] + up))
    assert any(step["activated"] for step in steps)


@pytest.mark.parametrize("rebalance", [False, True])
def test_the_rebalance_gives_the_woken_replicas_the_requests_in_flight(rebalance):
    # staleness 0: the version's quota is in flight on the standalone servers when the replicas wake,
    # so they get work only if those requests are aborted and routed afresh
    costs = slow_rollout()
    sc = routed(staleness_threshold=0.0, partial_rollout=False,
                dynamic_resources={"policy": "fixed_ratio", "deactivate_ratio": 1.0, "rebalance": rebalance})
    rec, tl, sm, s = run(sc, costs, devices=12, resp=lognormal(400, 0.5, 4000))
    assert s["verl"]["dynamic_resources"]["activations"] > 0
    lent = tl[(tl.pool == "train") & (tl.state == "generate")]
    assert (len(lent) > 0) == rebalance
    assert np.allclose(metrics.per_device_time(tl, 12), rec.makespan_s)


def test_dynamic_resources_is_verl_091s_and_its_switch_only_with_it():
    with pytest.raises(RlsimError) as err:
        scenario(request_routing=False, dynamic_resources={})
    assert err.value.field == "schedule.dynamic_resources"
    with pytest.raises(RlsimError) as err:
        scenario(request_routing=True, switch={"offload_optimizer": False})
    assert err.value.field == "schedule.switch"
    with pytest.raises(RlsimError) as err:
        scenario("verl-separate-async", dynamic_resources={})
    assert err.value.field == "schedule.dynamic_resources"
    with pytest.raises(RlsimError, match="ratio_step_up_min"):
        scenario(request_routing=True, dynamic_resources={"ratio_step_up_min": 0.2, "ratio_step_up_max": 0.1})
    with pytest.raises(RlsimError) as err:   # two trainer devices: no rollout instance of 4 to lend
        run(scenario(request_routing=True, dynamic_resources={}, rollout_devices=8), slow_rollout(instance_devices=4),
            devices=10)
    assert err.value.field == "schedule.dynamic_resources"


CASE = st.fixed_dictionaries({
    "policy": st.sampled_from(["default", "fixed_ratio", "static_fully_async"]),
    "ratio": st.sampled_from([0.1, 0.3, 1.0]),
    "rebalance": st.booleans(),
    "s": st.sampled_from([0.0, 0.5, 1.0]),
    "trigger": st.integers(1, 2),
    "cap": st.sampled_from([1, 4]),
    "slots": st.sampled_from([2, 8]),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_every_sample_is_accounted_once_and_the_quota_holds_while_devices_are_lent(case):
    dynamic = {"policy": case["policy"], "deactivate_ratio": case["ratio"], "rebalance": case["rebalance"],
               "switch_cost_s": 0.1}
    sc = scenario(iterations=4, staleness_threshold=case["s"], partial_rollout=case["s"] > 0, request_routing=True,
                  trigger_parameter_sync_step=case["trigger"], max_inflight_prompts_per_server=case["cap"],
                  dynamic_resources=dynamic).model_copy(update={"seed": case["seed"]})
    costs = slow_rollout(instance_max_seqs=case["slots"])
    rec, tl, sm, s = run(sc, costs, devices=12)
    verl = s["verl"]
    assert all(started <= verl["quota_prompts"] for started in verl["started_per_version"])
    consumed = sm[sm.consumed_iteration >= 0]
    assert s["samples"]["generated"] == len(sm) == len(consumed) + int(sm.dropped.sum())
    assert len(consumed) == 4 * case["trigger"] * 4 * 4 and sm["sample"].is_unique
    per_group = consumed.groupby("group")["consumed_iteration"].agg(["nunique", "size"])
    assert (per_group["nunique"] == 1).all() and (per_group["size"] == 4).all()
    assert np.allclose(metrics.per_device_time(tl, 12), rec.makespan_s)
    if case["policy"] == "static_fully_async":
        assert not len(tl[(tl.pool == "train") & (tl.state == "generate")])
