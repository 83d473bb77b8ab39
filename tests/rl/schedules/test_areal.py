"""AReaL (areal) as AReaL 1.0.4 runs: the start rule (max_concurrent_rollouts, max_head_offpolicyness),
requests dealt round-robin, the trainer's batch choice, the interrupting weight update, closed forms."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator import metrics
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules.batches import GROUP_IDS_PER_ROUND

from .test_verl_async import const, lognormal, run, scenario

PROMPTS, N = 8, 4


def areal(iterations=4, **sched):
    return scenario("areal", iterations=iterations, prompts=PROMPTS, n=N, **sched)


def costs(slots=8, **kw):
    return FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=slots, **kw)


def start_index(sm):
    """Each sample's rollout in start order: round x batch + its place in the round (groups are drawn,
    and started, in that order)."""
    return sm["round"] * PROMPTS + (sm["group"] - sm["round"] * GROUP_IDS_PER_ROUND)


def test_a_run_reports_areals_timers_and_trains_whole_batches():
    rec, tl, sm, s = run(areal())
    timing = s["areal"]["timing_s"]
    assert set(timing) == {"step", "rollout", "recompute_logp", "ref_logp", "train_step", "update_weights"}
    assert timing["update_weights"] >= 0.5 - 1e-9                  # the broadcast at least
    assert s["samples"]["consumed"] == 4 * PROMPTS * N
    assert s["staleness"]["bound"] is None                        # the rule bounds starts, not ages
    assert "old_logprob" in s["stage_time_s"]                     # the decoupled loss's proximal log-probs
    off = run(areal(recompute_logprob=False))[3]
    assert "old_logprob" not in off["stage_time_s"] and off["areal"]["timing_s"]["recompute_logp"] == 0.0


CASE = st.fixed_dictionaries({
    "eta": st.integers(0, 4),
    "concurrent": st.sampled_from([None, 1, 3, 8, 40]),
    "interruptible": st.booleans(),
    "keep_kv": st.booleans(),
    "slots": st.sampled_from([2, 8, 64]),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_the_start_rule_and_the_samples_hold(case):
    sc = areal(iterations=4, max_head_offpolicyness=case["eta"], max_concurrent_rollouts=case["concurrent"],
               interruptible=case["interruptible"],
               interrupt_keeps_kv=case["interruptible"] and case["keep_kv"] and case["eta"] > 0,
               ).model_copy(update={"seed": case["seed"]})
    rec, tl, sm, s = run(sc, costs(case["slots"]), devices=12)
    # nothing lost or duplicated, nothing dropped for age: generated = consumed + unused at the end
    consumed = sm[sm.consumed_iteration >= 0]
    assert sm["sample"].is_unique and len(consumed) == 4 * PROMPTS * N
    assert set(sm.loc[sm.dropped, "drop_reason"]) <= {"unused"}
    # whole rollouts, one step each
    per_group = consumed.groupby("group")["consumed_iteration"].agg(["nunique", "size"])
    assert (per_group["nunique"] == 1).all() and (per_group["size"] == N).all()
    # accepted + running < (eta + version + 1) x batch at each start: rollout i starts at version v only
    # if i < (eta + v + 1) x batch (all started before it are accepted or running; none rejected here)
    index = start_index(sm)
    assert (sm["first_version"] >= index // PROMPTS - case["eta"]).all()
    # running < max_concurrent_rollouts (default the batch) at each start: the rollouts started before
    # a rollout and not yet complete when it starts
    groups = sm.assign(index=index).groupby("index").agg(start=("start", "min"), done=("returned", "max"))
    cap = case["concurrent"] or PROMPTS
    for i, row in groups.iterrows():
        earlier = groups[groups.index < i]
        assert int((earlier["done"] > row["start"] + 1e-9).sum()) < cap
    # device time tiles the run on every rank
    assert np.allclose(metrics.per_device_time(tl, 12), rec.makespan_s)
    if not case["interruptible"]:
        assert s["areal"]["partial_ratio"] == 0.0


def test_the_trainer_takes_the_earliest_started_of_the_completed_rollouts():
    rec, tl, sm, s = run(areal(iterations=5, max_head_offpolicyness=2, max_concurrent_rollouts=24), costs())
    sm = sm.assign(index=start_index(sm))
    groups = sm.groupby("index").agg(done=("returned", "max"), step=("consumed_iteration", "max"))
    choices = 0
    for k, start in enumerate(it["start"] for it in rec.iterations):
        taken = groups[groups.step == k]
        waiting = groups[(groups.done <= start + 1e-9) & ((groups.step > k) | (groups.step < 0))]
        assert len(taken) == PROMPTS
        if len(waiting):   # complete rollouts left for later: all started after every one taken
            assert taken.index.max() < waiting.index.min()
            choices += 1
    assert choices >= 3     # the case has steps where more rollouts were complete than a batch


def test_with_no_off_policyness_each_step_is_generation_then_training_then_the_update():
    # eta 0: a batch starts only at a new version and the trainer waits for all of it; equal lengths,
    # free forwards: the disaggregated schedule, and a closed form
    fake = costs(slots=1000, forward_device_s_per_token=0.0)
    on = run(areal(max_head_offpolicyness=0, rollout_fraction=0.5), fake, resp=const(500))[3]
    sync = run(scenario("disaggregated", prompts=PROMPTS, n=N), fake, resp=const(500))[3]
    assert on["step_time_s"] == pytest.approx(sync["step_time_s"], rel=1e-9)
    tokens = PROMPTS * N * 550
    fetch = 2 * tokens * 17 / 25e9
    closed = 500 * 1e-3 + fetch + tokens * 1e-3 / 8 + 0.5
    assert on["step_time_s"] == pytest.approx(closed, rel=1e-9)
    assert on["areal"]["partial_ratio"] == 0.0                      # nothing in flight at an update


def test_the_update_interrupts_in_flight_requests_and_they_resume_re_prefilled():
    fake = costs(prefill_s_per_token=1e-4, train_device_s_per_token=1e-6)   # generation-bound
    on = run(areal(iterations=5, max_head_offpolicyness=2), fake)[3]
    assert on["areal"]["partial_ratio"] > 0 and on["areal"]["max_partial_span"] >= 2
    rec, tl, sm, off = run(areal(iterations=5, max_head_offpolicyness=2, interruptible=False), fake)
    assert off["areal"]["partial_ratio"] == 0.0
    waits = tl[(tl.pool == "train") & (tl.label == "wait for in-flight requests")]
    assert (waits.end - waits.start).sum() > 0                       # the update waits for them instead


def test_requests_paused_in_place_keep_their_kv_and_skip_the_re_prefill():
    # interrupt_keeps_kv (SkyRL's pause mode keep): the same rollouts, each resumed request prefilling
    # only its last token; with a free prefill there is nothing to save and the runs are equal
    # (long prompts, a generation-bound run: resumed requests on the critical path)
    fake = costs(prefill_s_per_token=1e-4, decode_s_per_token=2e-3, train_device_s_per_token=1e-6,
                 forward_device_s_per_token=1e-7)
    prompt = const(2000)
    aborted = run(areal(iterations=6), fake, devices=12, prompt=prompt)
    kept = run(areal(iterations=6, interrupt_keeps_kv=True), fake, devices=12, prompt=prompt)
    assert kept[3]["areal"]["partial_ratio"] == aborted[3]["areal"]["partial_ratio"] > 0
    assert kept[0].makespan_s < aborted[0].makespan_s
    assert kept[3]["samples"]["consumed"] == aborted[3]["samples"]["consumed"] == 6 * PROMPTS * N
    assert kept[2]["sample"].is_unique and np.allclose(metrics.per_device_time(kept[1], 12), kept[0].makespan_s)
    free = costs(prefill_s_per_token=0.0, decode_s_per_token=2e-3, train_device_s_per_token=1e-6,
                 forward_device_s_per_token=1e-7)
    same = [run(areal(iterations=6, interrupt_keeps_kv=keep), free, devices=12)[0].makespan_s
            for keep in (False, True)]
    assert same[0] == same[1]
    with pytest.raises(RlsimError) as err:
        areal(interruptible=False, interrupt_keeps_kv=True)
    assert err.value.field == "schedule.interrupt_keeps_kv"
    # at max_head_offpolicyness 0 no rollout is in flight at an update: the knob was read past (a trial)
    with pytest.raises(RlsimError, match="max_head_offpolicyness 0") as err:
        areal(max_head_offpolicyness=0, interrupt_keeps_kv=True)
    assert err.value.field == "schedule.interrupt_keeps_kv"
    with pytest.raises(RlsimError) as err:
        scenario("verl-fully-async", interrupt_keeps_kv=True)
    assert err.value.field == "schedule.interrupt_keeps_kv"


def test_requests_of_one_rollout_go_to_the_servers_in_turn():
    # 4 requests a rollout dealt to the servers in turn: each rollout spans servers, each server
    # gets the same number of requests (+-1 over the run)
    rec, tl, sm, s = run(areal(iterations=2), costs(), devices=12)
    servers = sm["instance"].nunique()
    assert servers > 1
    assert (sm.groupby("group")["instance"].nunique() == min(N, servers)).all()


@pytest.mark.parametrize("seed", range(4))
def test_off_policyness_pays_off_on_a_long_tail(seed):
    # eta 0 waits for each batch's longest rollout; eta 1 trains on the batch the next version's
    # rollouts run beside. (Not monotone beyond: more rollouts in flight are more requests to
    # interrupt and re-prefill at each update, and more queueing on the servers' slots.)
    fake = costs(prefill_s_per_token=1e-6)
    spans = []
    for eta in (0, 1):
        sc = areal(iterations=6, max_head_offpolicyness=eta, max_concurrent_rollouts=40).model_copy(
            update={"seed": seed})
        spans.append(run(sc, fake, resp=lognormal(200, 1.5, 8000))[3]["makespan_s"])
    assert spans[1] < spans[0]


def test_knobs_it_does_not_read_are_refused():
    with pytest.raises(RlsimError) as err:
        areal(overprovision=0.5)
    assert err.value.field == "schedule.overprovision"
    with pytest.raises(RlsimError) as err:
        simulator.scenario.load_scenario({
            "topology": "fake", "schedule": {"kind": "areal"},
            "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4,
                         "inference": {"dispatch": "per-sample"}}})
    assert err.value.field == "workload.inference.dispatch"


def test_runs_on_a_real_workload():
    small = ["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=8",
             "workload.response_length.max=2048", "schedule.max_head_offpolicyness=2"]
    for interruptible in ("false", "true"):
        r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                               schedule="areal", iterations=3, overrides=[*small, f"schedule.interruptible={interruptible}"])
        s = r.samples
        assert r.summary["samples"]["consumed"] == 3 * 32
        assert (s["first_version"] <= s["version"]).all()
        assert np.isfinite(r.summary["steady_tokens_per_s"])


def test_a_step_starts_when_the_previous_ended_or_its_batch_was_ready():
    r = simulator.simulate(schedule="areal", iterations=3, keep_samples=True)
    its, s = r.iterations, r.samples
    for k in range(1, len(its)):
        ready = float(s[s["consumed_iteration"] == k]["ready"].max())
        assert its["start"][k] <= max(its["end"][k - 1], ready) + 1e-6


def test_dynamic_sampling_rejects_groups_without_signal_and_keeps_every_other():
    """AReaL's filter rejects a rollout whose rewards do not differ (its place is freed for another);
    every accepted rollout trains, this step or a later one: none is dropped as a round's surplus."""
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="areal",
                           iterations=4, overrides=[
                               "workload.prompts_per_step=8", "workload.samples_per_prompt=4",
                               "workload.mini_batch_prompts=8", "workload.response_length.max=2048",
                               "workload.algorithm=dapo", "workload.dynamic_sampling.keep_fraction=0.5"])
    s = r.summary
    assert s["samples"]["consumed"] == 4 * 32
    assert set(s["samples"]["dropped"]) <= {"no_signal", "unused"} and s["samples"]["dropped"]["no_signal"] > 0
    assert s["areal"]["rollouts_accepted"] * 4 == s["samples"]["consumed"] + s["samples"]["dropped"].get("unused", 0)


def test_a_rollout_counts_toward_a_batch_once_its_rewards_are_in():
    """arun_episode scores each trajectory before it returns: a rollout still being scored is not a
    result yet, so the batch is the earliest started of the rewarded ones, none used before its reward."""
    fake = costs(reward_s_per_sample=1.0, train_device_s_per_token=1e-7)   # scoring-bound: slow rewards, fast training
    rec, tl, sm, s = run(areal(iterations=5, max_head_offpolicyness=2, max_concurrent_rollouts=24), fake)
    sm = sm.assign(index=start_index(sm))
    groups = sm.groupby("index").agg(ready=("ready", "max"), step=("consumed_iteration", "max"))
    choices, prev_end = 0, 0.0
    for k, it in enumerate(rec.iterations):
        taken = groups[groups.step == k]
        assert len(taken) == PROMPTS and (taken.ready <= it["start"] + 1e-9).all()
        # the step starts once the batch's worth is rewarded (or the previous step has ended)
        left = groups[(groups.step >= k) | (groups.step < 0)].ready.sort_values()
        assert it["start"] == pytest.approx(max(prev_end, left.iloc[PROMPTS - 1]), abs=1e-9)
        prev_end = it["end"]
        waiting = groups[(groups.ready <= it["start"] + 1e-9) & ((groups.step > k) | (groups.step < 0))]
        if len(waiting):
            assert taken.index.max() < waiting.index.min()
            choices += 1
    assert choices >= 2
    assert s["reward_wait_fraction"] > 0                  # the rewards' share of the trainer's wait is said
