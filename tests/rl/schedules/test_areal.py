"""AReaL (areal): generation never stops, the head off-policyness bound, interruptible generation."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator

from .test_nemo_rl import check_accounting, count_reprefill, gen_bound_costs
from .test_schedules import lognormal, run, scenario


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), eta=st.integers(0, 4), interruptible=st.booleans())
def test_every_trajectory_is_consumed_once_or_dropped_and_its_head_within_the_bound(seed, eta, interruptible):
    sc = scenario("areal", iterations=5, seed=seed, max_head_offpolicyness=eta, interruptible=interruptible)
    rec, tl, sm, s = run(sc, gen_bound_costs(prefill_s_per_token=1e-5))
    check_accounting(sm, eta)
    assert s["samples"]["consumed"] == 5 * 64 and s["pools"]["rollout"] == 12   # 3/4 generate by default
    # no round started before the weights reached round - eta
    assert (sm["first_version"] >= sm["round"] - eta).all()


def test_generation_never_stops_a_plan_admits_every_open_round():
    # eta 2 from t = 0: rounds 0, 1, 2 join one plan on each instance (same start), no drain between them
    sm = run(scenario("areal", iterations=3, max_head_offpolicyness=2, interruptible=False), gen_bound_costs())[2]
    first = sm[sm["start"] == 0.0]
    assert set(first["round"]) == {0, 1, 2}


def test_interruptible_resumes_with_new_weights_and_re_prefills_the_prefix(monkeypatch):
    seen = count_reprefill(monkeypatch)
    off = run(scenario("areal", iterations=4, interruptible=False), gen_bound_costs())[2]
    assert sum(seen) == 0 and (off["first_version"] == off["version"]).all()
    on = run(scenario("areal", iterations=4, interruptible=True), gen_bound_costs())[2]
    assert sum(seen) > 0                                   # resumed prefixes prefilled again
    assert (on["first_version"] < on["version"]).any()     # some trajectories span versions


@pytest.mark.parametrize("seed", range(4))
def test_interruptible_pays_off_on_a_long_tail(seed):
    # a long tail (sigma 1.5, cap 40x the median) with a bound that leaves room (eta 4): without
    # interruption an instance loads new weights only once its plan has drained to the tail
    c = gen_bound_costs(prefill_s_per_token=1e-6)
    tps = {}
    for interruptible in (False, True):
        sc = scenario("areal", iterations=6, seed=seed, max_head_offpolicyness=4, interruptible=interruptible)
        tps[interruptible] = run(sc, c, resp=lognormal(200, 1.5, 8000))[3]["makespan_s"]
    assert tps[True] <= tps[False] * (1 + 1e-9)


def test_runs_on_a_real_workload():
    small = ["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=8",
             "workload.response_length.max=2048", "schedule.max_head_offpolicyness=2"]
    for interruptible in ("false", "true"):
        r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                               schedule="areal", iterations=3, overrides=[*small, f"schedule.interruptible={interruptible}"])
        check_accounting(r.samples, 2)
        assert r.summary["samples"]["consumed"] == 3 * 32
        assert np.isfinite(r.summary["steady_tokens_per_s"])


def test_a_trainer_takes_interruptible_trajectories_as_they_finish_not_at_their_plans_end():
    """Each trajectory leaves its rollout worker as it finishes: step 0 starts when the batch's last
    eligible trajectory is ready (its reward scored on its own as it ends, on its instance's
    workers), not when the instance's plan of
    every open round ends (found by a fuzzing trial: 9.0 s against 3.6 s). Without interrupts an
    open round waits for the plan's end, and so do the trajectories: they are ready from it."""
    small = ["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=8",
             "workload.response_length.max=2048", "workload.response_length.median=256",
             # 0.05 s a sample whatever its length
             "workload.reward.cpu_s_per_sample=0.05", "workload.reward.capped_cpu_s_per_sample=0.05",
             "workload.reward.cpu_s_per_token=0", "workload.reward.capped_cpu_s_per_token=0"]
    for interruptible in (True, False):
        r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=2,
                               schedule={"kind": "areal", "max_head_offpolicyness": 1, "interruptible": interruptible},
                               overrides=small)
        s, batch = r.samples, 32
        check_accounting(s, 1)
        batch_ready = float(np.sort(s["ready"])[batch - 1])    # every sample is eligible for step 0
        start = float(r.iterations["start"][0])
        consumed = s[s["consumed_iteration"] == 0]
        if interruptible:
            assert start == pytest.approx(batch_ready, abs=1e-6)
            assert (consumed["ready"] - consumed["finish"]).min() == pytest.approx(0.05)   # one sample, idle worker
            for instance in np.unique(s["instance"]):     # a one-device instance's one worker: one at a time
                assert np.diff(np.sort(s[s["instance"] == instance]["ready"])).min() >= 0.05 - 1e-9
        else:     # each instance's plan returns its trajectories together: ready from the plan's end
            assert start == pytest.approx(batch_ready, abs=1e-6)
            for _, plan in s.groupby(["instance", "start"]):
                assert (plan["ready"] >= plan["finish"].max() - 1e-9).all()


def test_a_trainer_waiting_between_plans_wakes_when_its_batch_is_ready():
    """At a weight update every interruptible instance loads the weights before it plans again, so a
    trainer that started waiting then saw no running plan to time its wake by, and slept until a
    plan ended: the seed's step 1 started at 2,268 s with its batch ready at 732 s (a regression
    trial). Each step starts when the previous one ended or its batch was ready, the later."""
    r = simulator.simulate(schedule="areal", iterations=3, keep_samples=True)
    its, s = r.iterations, r.samples
    for k in range(1, len(its)):
        ready = float(s[s["consumed_iteration"] == k]["ready"].max())
        assert its["start"][k] <= max(its["end"][k - 1], ready) + 1e-6
