"""verl's fully_async_policy: its modes run, its quota and queue hold, closed forms, and the
mechanism on a long-tail workload."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator import metrics
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import RolloutEngine, RolloutLayout
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario


def const(value):
    return lambda rng, n_prompts, n, step: np.full((n_prompts, n), value, int)


def lognormal(median, sigma, cap):
    def sample(rng, n_prompts, n, step):
        return np.clip(np.round(rng.lognormal(np.log(median), sigma, size=(n_prompts, n))), 1, cap).astype(int)
    return sample


def scenario(kind="verl-fully-async", iterations=4, prompts=8, n=4, mini=4, workload=None, **sched):
    return load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": prompts,
                                                           "samples_per_prompt": n, "mini_batch_prompts": mini,
                                                           **(workload or {})},
                          "schedule": {"kind": kind, **sched}, "iterations": iterations})


def run(sc, costs=None, devices=16, resp=None, prompt=None):
    costs = costs or FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8)
    rec = run_schedule(sc, costs, devices, prompt or const(50), resp or lognormal(400, 1.0, 4000))
    tl, sm = rec.timeline.to_frame(), rec.samples.to_frame()
    return rec, tl, sm, metrics.summary(rec, tl, sm)


MODES = [dict(staleness_threshold=0.0, trigger_parameter_sync_step=2),
         dict(staleness_threshold=0.5, partial_rollout=False),
         dict(staleness_threshold=0.5, partial_rollout=True)]


@pytest.mark.parametrize("mode", MODES, ids=["streaming-s0-trigger2", "s0.5", "s0.5-partial"])
def test_each_mode_runs_and_reports_verl_quantities(mode):
    sc = scenario(**mode)
    rec, tl, sm, s = run(sc)
    verl = s["verl"]
    assert s["iterations"] == 4 and len(verl["per_version"]) == 4
    assert set(verl["timing_s"]) >= {"step", "gen", "update_actor", "ref"}
    assert 0 <= verl["idle_ratio"] < 1
    phases = s["verl_timing_s"]   # verl's named phases + other make the step, as the other verl kinds' do
    assert phases["other"] >= -1e-9
    assert sum(x for k, x in phases.items() if k != "step") == pytest.approx(phases["step"], rel=1e-12)
    per_version = sc.schedule.trigger_parameter_sync_step * sc.schedule.require_batches * 4
    assert s["samples"]["consumed"] == 4 * per_version * 4          # versions x prompts x n
    assert "old_logprob" not in s["stage_time_s"]                 # the rollout's own log-probs


CASE = st.fixed_dictionaries({
    "s": st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]),
    "trigger": st.integers(1, 3),
    "require": st.integers(1, 2),
    "partial": st.booleans(),
    "cap": st.sampled_from([1, 2, 16]),
    "slots": st.sampled_from([2, 8, 64]),
    "routing": st.booleans(),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_quota_queue_and_samples_hold(case):
    sc = scenario(iterations=3, staleness_threshold=case["s"], trigger_parameter_sync_step=case["trigger"],
                  require_batches=case["require"], partial_rollout=case["partial"] and case["s"] > 0,   # read past at 0
                  max_inflight_prompts_per_server=case["cap"], request_routing=case["routing"])
    sc = sc.model_copy(update={"seed": case["seed"]})
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, instance_max_seqs=case["slots"])
    rec, tl, sm, s = run(sc, costs, devices=12)
    verl = s["verl"]
    quota = int((1 + case["s"]) * case["trigger"] * case["require"] * 4 + 1e-9)
    assert verl["quota_prompts"] == quota
    assert all(started <= quota for started in verl["started_per_version"])
    # every trajectory consumed at most once, nothing lost: generated = consumed + dropped
    consumed = sm[sm.consumed_iteration >= 0]
    assert s["samples"]["generated"] == len(sm) == len(consumed) + int(sm.dropped.sum())
    assert len(consumed) == 3 * case["trigger"] * case["require"] * 4 * 4
    assert sm["sample"].is_unique
    # whole prompts only: a group is consumed entirely by one version
    per_group = consumed.groupby("group")["consumed_iteration"].agg(["nunique", "size"])
    assert (per_group["nunique"] == 1).all() and (per_group["size"] == 4).all()
    # device time tiles the run on every rank
    per_device = metrics.per_device_time(tl, 12)
    assert np.allclose(per_device, rec.makespan_s)
    if not (case["partial"] and case["s"] > 0):
        assert verl["partial_ratio"] == 0.0


def assert_no_kept_group_lost(sm, n, fifo):
    """Every group DAPO's filter keeps is trained once, whole, by one step, or still queued at the
    run's end (unused); only the filter drops one (no_signal). With ``fifo`` (verl's message queue)
    none still queued completed before one trained."""
    assert sm["sample"].is_unique and (sm.groupby(["round", "group"]).size() == n).all()
    consumed = sm.consumed_iteration >= 0
    assert (consumed ^ sm.dropped).all()
    assert set(sm.loc[sm.dropped, "drop_reason"]) <= {"no_signal", "unused"}
    per_group = sm[consumed].groupby("group")["consumed_iteration"].agg(["nunique", "size"])
    assert (per_group["nunique"] == 1).all() and (per_group["size"] == n).all()
    unused = sm[sm.drop_reason == "unused"]
    if fifo and len(unused):
        assert float(sm.loc[consumed, "returned"].max()) <= float(unused["returned"].min()) + 1e-9


DAPO_CASE = st.fixed_dictionaries({
    "variant": st.sampled_from(["fully-async", "request-routed", "lent", "areal"]),
    "keep": st.sampled_from([0.3, 0.6, 0.9]),
    "s": st.sampled_from([0.0, 0.5, 1.0]),
    "trigger": st.integers(1, 2),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DAPO_CASE)
def test_no_kept_group_is_lost_or_trained_twice_under_dynamic_sampling(case):
    """A streaming Rollouter has no generation round: a group with a reward signal beyond a round's
    batch waits in the queue for a later step (verl's fully_async put every generated sample in the
    queue; the draw's surplus mark was dropped by the 0.4-0.7 Rollouter, 60 of 392 trajectories
    on a 4-step DAPO run)."""
    variant, dapo = case["variant"], {"dynamic_sampling": {"keep_fraction": case["keep"]}}
    if variant == "areal":
        sc = scenario("areal", iterations=3, workload=dapo, max_head_offpolicyness=int(case["s"]))
    else:
        lent = {"dynamic_resources": {"policy": "fixed_ratio", "switch_cost_s": 0.1}} if variant == "lent" else {}
        sc = scenario(iterations=3, workload=dapo, staleness_threshold=case["s"], partial_rollout=case["s"] > 0,
                      trigger_parameter_sync_step=case["trigger"], request_routing=variant != "fully-async", **lent)
    sc = sc.model_copy(update={"seed": case["seed"]})
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, switch_s=0.2, instance_max_seqs=8)
    rec, tl, sm, s = run(sc, costs, devices=12)
    per_step = 8 if variant == "areal" else case["trigger"] * 4
    assert s["samples"]["consumed"] == 3 * per_step * 4
    assert_no_kept_group_lost(sm, 4, fifo=variant != "areal")


def test_a_resumed_request_re_prefills_its_prefix():
    # a partial trajectory resubmitted with g tokens = a request whose prompt is prompt + g
    model = load_model("qwen2.5-7b")
    layout = RolloutLayout(tp=1)
    resumed = RolloutEngine(model, get_device("h100"), layout)
    resumed.add(0, 512, 1000, 0.0, generated=300)
    fresh = RolloutEngine(model, get_device("h100"), layout)
    fresh.add(0, 512 + 300, 700, 0.0)
    assert resumed.run()[0].time_s == pytest.approx(fresh.run()[0].time_s, rel=1e-12)
    fake = FakeCosts(prefill_s_per_token=1e-4, decode_s_per_token=1e-3).rollout_server(range(1))
    fake.add_many([0], [512], [1000], 0.0, [300])
    assert fake.advance_to(10.0)[0].time_s == pytest.approx(1e-4 * 812 + 1e-3 * 700)


@pytest.mark.parametrize("routing", [False, True], ids=["prompt-routing", "request-routing"])
def test_streaming_with_no_staleness_is_synchronous_split_pool_training(routing):
    # s = 0, trigger 1, one local update per version = the whole batch: each version generates its
    # batch, trains on it, syncs - the disaggregated schedule (old-logprob forward free here, since
    # fully async skips it), and a closed form on equal lengths
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, instance_max_seqs=1000,
                      forward_device_s_per_token=0.0)
    verl = run(scenario(staleness_threshold=0.0, require_batches=2, max_inflight_prompts_per_server=1000,
                        request_routing=routing), costs, resp=const(500))[3]
    sync = run(scenario("disaggregated"), costs, resp=const(500))[3]
    assert verl["step_time_s"] == pytest.approx(sync["step_time_s"], rel=1e-9)
    tokens = 8 * 4 * 550
    fetch = 2 * tokens * 17 / 25e9          # the queue writes then serves the batch (packed, hierarchical)
    closed = 500 * 1e-3 + fetch + tokens * 1e-3 / 8 + 0.7
    assert verl["step_time_s"] == pytest.approx(closed, rel=1e-9)


def test_staleness_one_is_about_one_step_off():
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, instance_max_seqs=1000,
                      forward_device_s_per_token=0.0)
    verl = run(scenario(iterations=6, staleness_threshold=1.0, require_batches=2,
                        max_inflight_prompts_per_server=1000), costs, resp=const(500))[3]
    off = run(scenario("one-step-off", iterations=6), costs, resp=const(500))[3]
    assert verl["steady_step_time_s"] == pytest.approx(off["steady_step_time_s"], rel=0.05)


def _long_tail(kind, nodes, **sched):
    over = [f"topology.nodes={nodes}", "workload.response_length.max=28672"] + \
        [f"schedule.{key}={value}" for key, value in sched.items()]
    return simulator.simulate(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule=kind, iterations=3,
                              overrides=over).summary


def test_on_a_long_tail_fully_async_beats_colocated_and_gains_with_scale():
    # Qwen2.5-7B, 28K cap, 512 prompts x 16; equal device counts; steady-state throughput
    gain = {}
    for nodes in (4, 16):
        sync = _long_tail("colocated", nodes)["steady_tokens_per_s"]
        rates = [_long_tail("verl-fully-async", nodes, staleness_threshold=s, partial_rollout=str(s > 0).lower())
                 for s in (0.0, 0.5, 1.0)]
        steady = [r["steady_tokens_per_s"] for r in rates]
        assert steady == sorted(steady)                       # a larger threshold never lowers throughput
        assert all(0 <= r["verl"]["idle_ratio"] <= 1 for r in rates)
        gain[nodes] = steady[1] / sync
        assert gain[nodes] > 1.0
    assert gain[16] > gain[4]


@pytest.mark.parametrize("cap", [1, 3])
def test_verl_09s_rollouter_routes_requests_one_by_one_under_a_global_cap(cap):
    # request_routing (verl 0.9.1): at most servers x cap prompts in flight across the pool (not cap a
    # server), and a prompt's trajectories spread over the servers; verl 0.4-0.7's keeps them together
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.3, instance_max_seqs=4)
    runs = {routing: run(scenario(iterations=3, staleness_threshold=1.0, partial_rollout=True, request_routing=routing,
                                  max_inflight_prompts_per_server=cap), costs, devices=12)
            for routing in (False, True)}
    servers = 3                                     # 6 rollout devices, 2 a server
    for routing, (_rec, _tl, sm, s) in runs.items():
        spans = sm.groupby("group").agg(start=("start", "min"), end=("finish", "max"), where=("instance", "nunique"))
        in_flight = [int(((spans.start <= t) & (spans.end > t)).sum()) for t in spans.start]
        assert max(in_flight) <= min(servers * cap, s["verl"]["quota_prompts"])
        assert (spans["where"].max() > 1) == routing
        assert s["samples"]["consumed"] == 3 * 4 * 4         # versions x (trigger x require x mini) x n


def test_partial_rollout_at_a_zero_threshold_and_a_dispatch_are_refused():
    # verl cancels nothing at a sync when the Rollouter starts no more than a version consumes, and
    # sends a prompt's requests to the least-loaded server itself: both keys would be read past
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError) as err:
        scenario(partial_rollout=True)
    assert err.value.field == "schedule.partial_rollout" and "staleness_threshold > 0" in err.value.message
    scenario(partial_rollout=True, staleness_threshold=0.5)
    with pytest.raises(RlsimError) as err:
        load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4,
                                                        "mini_batch_prompts": 4, "inference": {"dispatch": "per-sample"}},
                       "schedule": {"kind": "verl-fully-async"}})
    assert err.value.field == "workload.inference.dispatch"


@pytest.mark.parametrize("mode", MODES[1:], ids=["s0.5", "s0.5-partial"])
def test_trainer_waits_for_the_reward_of_the_samples_it_consumes(mode):
    # A group is complete when its last trajectory ends, usable once rewarded: no train work on it before.
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8,
                      reward_s_per_sample=0.01)
    rec, tl, sm, s = run(scenario(**mode), costs=costs)
    work = tl[(tl.pool == "train") & tl.state.isin(["fetch", "forward", "train"])]
    for iteration, consumed in sm[sm.consumed_iteration >= 0].groupby("consumed_iteration"):
        # one update per version: its fetch starts once every sample it takes is rewarded
        assert work[work.iteration == iteration].start.min() >= consumed.ready.max() - 1e-9


def test_the_summary_says_the_staleness_is_counted_not_bounded():
    """verl bounds the prompts started per version, not a sample's age: the summary reports no bound
    (it reported 1.0 beside a max of 3)."""
    s = run(scenario(iterations=5, staleness_threshold=2.0, partial_rollout=True))[3]
    assert s["staleness"]["bound"] is None and s["staleness"]["max"] >= 1
    assert all("never binds" not in note for note in metrics.summary_notes(s))


def test_overprovision_is_refused_it_aborts_nothing_here():
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError, match="overprovision is not read") as exc:
        scenario(overprovision=0.5)
    assert exc.value.field == "schedule.overprovision"


def test_a_step_is_a_parameter_version_and_a_prompts_per_step_it_does_not_read_is_said():
    """The batch the summary reports is what a version trains (trigger x require x mini prompts x n);
    a workload.prompts_per_step that differs is said in the warnings (it was read past, and the
    console showed 'trained samples / step 2,048 of 8,192')."""
    small = {"workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4,
                          "mini_batch_prompts": 4}, "topology": "fake", "iterations": 2}
    result = simulator.simulate({**small, "schedule": {"kind": "verl-fully-async"}}, costs=FakeCosts(
        instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8))
    samples = result.summary["samples"]
    assert samples["batch"] == 4 * 4 and samples["trained_per_step"] == 16
    assert any("not workload.prompts_per_step 8" in w for w in result.summary["warnings"])
    result = simulator.simulate({**small, "schedule": {"kind": "verl-fully-async", "trigger_parameter_sync_step": 2}},
                                costs=FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5,
                                                instance_max_seqs=8))
    assert result.summary["samples"]["batch"] == 32 and not result.summary.get("warnings")


def test_rollout_occupancy_is_not_measured_here_and_low_batch_share_is_refused():
    """The servers run their engines request by request, with no slot accounting: the summary said
    0% occupancy beside a generate stage of 86 s, and low_batch_share changed nothing."""
    from simulator.errors import RlsimError

    s = run(scenario())[3]
    assert s["rollout"]["occupancy"] is None and s["rollout"]["low_batch_fraction"] is None
    with pytest.raises(RlsimError, match="low_batch_share is not read"):
        scenario(low_batch_share=0.9)


@pytest.mark.parametrize("mode", MODES, ids=["streaming-s0-trigger2", "s0.5", "s0.5-partial"])
def test_a_server_idle_with_no_server_generating_waits_on_the_trainer_not_a_long_tail(mode):
    """Servers idle until the sync were all labelled long_tail, also once no server was generating
    (the quota spent, the Rollouter paused for the trainer): 71% of a verl import's rollout long_tail
    (an idle-time trial). The long tail is the wait while another server still generates."""
    tl = run(scenario(**mode))[1]
    rollout = tl[tl["pool"] == "rollout"]
    generating = rollout[rollout["state"] == "generate"]
    for row in rollout[(rollout["state"] == "idle") & (rollout["cause"] == "long_tail")].itertuples():
        mid = (row.start + row.end) / 2
        others = generating[(generating["rank_start"] != row.rank_start) & (generating["start"] <= mid)
                            & (generating["end"] >= mid)]
        assert len(others), f"long_tail at {row.start:.2f}-{row.end:.2f} s with no server generating"


def test_the_trainers_wait_for_each_local_updates_batch_is_explained_on_the_critical_path():
    """A step of several local updates waits for each update's batch; the walk matched only the
    step's last ready time, so the other waits stayed unexplained 'dependency' (47.5% of a verl
    import's path, an idle-time trial). Each is now that sample's reward latency and generation."""
    from simulator.rl import critical_path as cp
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8,
                      reward_s_per_sample=0.01)   # a reward latency: a batch is ready after its last finish
    rec, tl, _, _ = run(scenario(staleness_threshold=0.0, trigger_parameter_sync_step=2), costs)
    path = cp.of_run(rec, tl)
    assert path["share"].get("dependency", 0.0) < 1e-9     # 16% before
    assert path["share"]["generate"] + path["share"].get("long_tail", 0.0) > 0.25


def test_the_trainers_wait_for_rule_rewards_is_labelled_reward():
    """The trainer's wait for a batch was all `gen`, the rule rewards' share too (a carried item:
    reward_wait_fraction said 0 on this kind). Now `gen` runs to the moment the batch's groups have
    all finished generating, `reward` from there to the last one scored; verl's timing_s/gen still
    holds both, as verl's trainer times its queue read."""
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8,
                      reward_s_per_sample=0.4)
    rec, tl, sm, s = run(scenario(staleness_threshold=0.0), costs, resp=const(300))
    idle = tl[(tl["pool"] == "train") & (tl["state"] == "idle") & (tl["cause"] == "dependency")]
    waits = idle[idle["label"] == "reward"]
    assert len(waits) > 0 and s["reward_wait_fraction"] > 0
    for k, wait in waits.groupby("iteration"):
        batch = sm[sm["consumed_iteration"] == k]
        assert float(wait["end"].max()) == pytest.approx(batch["ready"].max())           # to the last reward
        assert float(wait["start"].min()) >= batch["finish"].max() - 1e-9                # after the last finish
    gen_waits = idle[idle["label"] == "gen"]
    per_version = [v["gen_s"] for v in s["verl"]["per_version"]]
    spent = float((gen_waits["end"] - gen_waits["start"]).sum() + (waits["end"] - waits["start"]).sum())
    assert spent == pytest.approx(sum(per_version), rel=1e-9)


def test_a_versions_quota_forgives_float_round_off():
    # (1 + 0.16) x 25 is 28.999999999999996 in floats: 29 samples, not 28 (an audit's mutation passed)
    from simulator.rl.schedules.verl_async import version_quota
    assert version_quota(0.16, 25) == 29 and version_quota(0.1, 30) == 33 and version_quota(0.0, 32) == 32
    assert version_quota(0.5, 5) == 7   # a real fraction still floors


class _OwnRolloutFlops(FakeCosts):
    """FakeCosts whose rollout forward is not a third of its training token (LoRA's base takes no weight
    gradient: 4 N + 6 N_adapter a training token against 2 N a forward one)."""

    def rollout_flops_per_token(self, context_len):
        return 7.0


def test_generated_tokens_are_counted_at_the_costs_rollout_flops_as_rollout_counts_them():
    """verl-fully-async counted a generated token at a third of a training token (train_flops_per_token
    / 3), not the rollout's forward that the other kinds' rollout() reports: with LoRA that is
    (4 N + 6 N_adapter) / 3 for 2 N, MFU off by a third (a constants audit)."""
    costs = _OwnRolloutFlops(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=8)
    rec, _, sm, _ = run(scenario(), costs=costs, resp=const(400))
    assert len(sm) > 0
    assert rec.gen_flops == pytest.approx(7.0 * 450 * len(sm), rel=1e-12)
