"""Dispatch of a round's requests to rollout instances (workload.inference.dispatch)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules.batches import RoundDraws, prompt_index

from .test_schedules import const, run, scenario


def draws(prompts: int, n: int, dispatch: str | None, seed: int = 0) -> RoundDraws:
    workload = {"inference": {"dispatch": dispatch}} if dispatch else None
    sc = scenario("colocated", prompts=prompts, n=n, workload=workload)
    return RoundDraws(sc, np.random.default_rng(seed), const(50), const(200))


@settings(max_examples=40, deadline=None)
@given(prompts=st.integers(1, 40), n=st.integers(1, 9), n_inst=st.integers(1, 12))
def test_per_prompt_keeps_every_prompt_whole_on_one_instance(prompts, n, n_inst):
    d = draws(prompts, n, "per-prompt")
    shares = [d.share(0, i, n_inst) for i in range(n_inst)]
    assert sorted(np.concatenate([s.group for s in shares]).tolist()) == sorted(d.draw(0).group.tolist())
    where = {}
    for i, s in enumerate(shares):
        for g in set(s.group.tolist()):
            assert g not in where                       # a prompt lives on one instance only
            where[g] = i
            assert int(np.sum(s.group == g)) == n         # with all its n samples
    # whole prompts dealt round-robin in draw order: prompt j -> instance j mod n_inst
    order = list(dict.fromkeys(d.draw(0).group.tolist()))
    assert [where[g] for g in order] == [j % n_inst for j in range(prompts)]


@settings(max_examples=20, deadline=None)
@given(prompts=st.integers(1, 20), n=st.integers(1, 9), n_inst=st.integers(1, 12))
def test_per_sample_is_the_sequence_round_robin(prompts, n, n_inst):
    d = draws(prompts, n, "per-sample")
    batch = d.draw(0)
    for i in range(n_inst):
        assert np.array_equal(d.share(0, i, n_inst).group, batch.group[i::n_inst])


def test_prompt_index_counts_group_changes():
    assert prompt_index(np.array([7, 7, 3, 3, 3, 9])).tolist() == [0, 0, 1, 1, 1, 2]
    assert prompt_index(np.zeros(0, int)).tolist() == []


def test_default_is_per_prompt_and_a_bad_value_is_an_error():
    assert scenario().workload.inference.dispatch == "per-prompt"
    with pytest.raises(RlsimError, match="dispatch"):
        scenario(workload={"inference": {"dispatch": "random"}})


def _two_prompt_lengths(long: int, short: int):
    def sample(rng, n_prompts, n, step):
        return np.array([[long] * n if p % 2 == 0 else [short] * n for p in range(n_prompts)])
    return sample


@pytest.mark.parametrize("dispatch", ["per-prompt", "per-sample"])
def test_a_long_prompt_concentrates_on_one_instance_in_closed_form(dispatch):
    # 2 prompts x 4 samples over 2 one-slot instances; prompt 0's responses are all L tokens, prompt
    # 1's all S: per prompt, one instance decodes 4 L (the round lasts 4 L d); per sample, each
    # instance decodes 2 L + 2 S
    n, long, short, d = 4, 1000, 100, 1e-3
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=1, decode_s_per_token=d,
                      sync_s=0.0, switch_s=0.0)
    sc = scenario("colocated", iterations=1, prompts=2, n=n, workload={"inference": {"dispatch": dispatch}})
    s = run(sc, costs, devices=2, prompt=const(10), resp=_two_prompt_lengths(long, short))[3]
    expected = n * long * d if dispatch == "per-prompt" else n / 2 * (long + short) * d
    assert s["stage_time_s"]["generate"] == pytest.approx(expected)


def test_per_prompt_hands_the_engine_whole_prefix_groups(monkeypatch):
    # the engine's prefix cache shares a prefill among one call's sequences of one group id
    seen: list[np.ndarray] = []
    rollout = FakeCosts.rollout

    def recording(self, prompt_lens, response_lens, ranks, groups=None):
        seen.append(np.asarray(groups))
        return rollout(self, prompt_lens, response_lens, ranks, groups)
    monkeypatch.setattr(FakeCosts, "rollout", recording)
    for dispatch, per_call in (("per-prompt", 8), ("per-sample", 2)):
        seen.clear()
        sc = scenario("colocated", iterations=1, prompts=8, n=8, workload={"inference": {"dispatch": dispatch}})
        run(sc, FakeCosts(instance_devices=2, train_group_devices=2), devices=8)
        assert len(seen) == 4
        for groups in seen:
            assert set(np.unique(groups, return_counts=True)[1].tolist()) == {per_call}


def test_dynamic_sampling_sub_rounds_run_one_after_another_in_closed_form():
    # keep_fraction 1 and gen_prompts = half the batch: exactly two sub-rounds of 4 prompts x 4;
    # equal lengths on 2 one-slot instances: each sub-round lasts 2 prompts x 4 samples x L d on
    # every instance, and the second starts when the first is scored, so generation is twice that
    n, length, d = 4, 500, 1e-3
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=1, decode_s_per_token=d,
                      sync_s=0.0, switch_s=0.0)
    sc = scenario("colocated", iterations=1, prompts=8, n=n,
                  workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 1.0}})
    rec, _, sm, s = run(sc, costs, devices=2, prompt=const(10), resp=const(length))
    one_sub_round = 2 * n * length * d
    assert s["stage_time_s"]["generate"] == pytest.approx(2 * one_sub_round)
    starts = sorted(set(sm["start"].round(9)))
    assert starts == pytest.approx([0.0, one_sub_round])


def test_stalesync_runs_the_leading_generation_batches_whole_and_cuts_the_last_one():
    # colocated StaleSync with two sub-rounds of 4 prompts x 4 on 4 one-device instances: the first
    # prompt of each sub-round answers 2,000 tokens, the others 100. The first sub-round runs whole
    # (the filter needs it scored before it knows a second is needed), so the second starts when its
    # long prompt ends, 2,000 d in; StaleSync cuts only the second one's tail (where it generated both
    # at once before, and cut them together)
    n, d = 4, 1e-3
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=64, decode_s_per_token=d,
                      sync_s=0.0, switch_s=0.0)
    sc = scenario("stalesync", iterations=1, prompts=8, n=n, staleness=1, stream_threshold=0.5,
                  workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 1.0}})

    def lengths(rng, n_prompts, n_samples, step):
        return np.array([[2000 if p % 4 == 0 else 100] * n_samples for p in range(n_prompts)])
    rec, tl, sm, s = run(sc, costs, devices=4, prompt=const(10), resp=lengths)
    first = 2000 * d
    lead = sm["start"] < first / 2
    assert lead.sum() == 4 * n and (sm.loc[~lead, "start"] >= first - 1e-9).all()    # one batch, then the other
    assert sm.loc[lead, "finish"].max() == pytest.approx(first)                        # the first one not cut
    tails = tl[tl["label"] == "tail"]
    assert len(tails) and tails["start"].min() > first                                 # the second one's
    assert s["stage_time_s"]["tail_generate"] > 0


@pytest.mark.parametrize(("between", "extra"), [("stay", 0.0), ("sleep", 2 * 0.25), ("reshard", 2 * 0.25 + 0.4)])
def test_the_engine_sleeps_and_is_resharded_between_generation_batches(between, extra):
    """Two sub-rounds on one colocated pool: with `sleep` the second starts after the engine's sleep and
    wake (FakeCosts: two switches), with `reshard` also after a weight sync; the generate stage and the
    timeline keep them apart (stage switch_between_batches, a switch and a sync interval)."""
    n, length, d, switch_s, sync_s = 4, 500, 1e-3, 0.25, 0.4
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=1, decode_s_per_token=d,
                      sync_s=sync_s, switch_s=switch_s)
    sc = scenario("colocated", iterations=1, prompts=8, n=n, between_gen_batches=between,
                  workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 1.0}})
    rec, tl, sm, s = run(sc, costs, devices=2, prompt=const(10), resp=const(length))
    one_sub_round = 2 * n * length * d
    # (the step's own switch to rollout first)
    assert sorted(set(sm["start"].round(9))) == pytest.approx([switch_s, switch_s + one_sub_round + extra])
    assert s["stage_time_s"]["generate"] == pytest.approx(2 * one_sub_round)
    assert s["stage_time_s"].get("switch_between_batches", 0.0) == pytest.approx(2 * switch_s if extra else 0.0)
    labels = set(tl["label"])
    assert ("between generation batches" in labels) == (between != "stay")
    assert ("reshard before a generation batch" in labels) == (between == "reshard")


@pytest.mark.parametrize("between", ["stay", "sleep", "reshard"])
def test_an_engine_that_stays_up_between_generation_batches_idles_through_the_tail_and_the_rewards(between):
    """Two sub-rounds on two colocated instances, one of long responses and one of short, rule rewards
    between them: each instance is busy generating its own sequences only (closed form: tokens x
    decode time), the short one waits out the long one's tail (long_tail) and both wait for the
    filter's rewards (dependency, reward) before the next batch, and the generate stage is the two
    sub-rounds' spans, the same whether the engine stays up, sleeps or is resharded between them.
    With ``stay`` the whole step was one record per instance, from the first batch's start to its
    last end: the short instance's tail and the rewards' wait counted as generation (and the stage
    held the wait: 18.4 s for 16 s of generation)."""
    n, d, reward_s = 4, 1e-3, 0.3
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=1, decode_s_per_token=d,
                      sync_s=0.4, switch_s=0.25, reward_s_per_sample=reward_s)
    sc = scenario("colocated", iterations=1, prompts=8, n=n, between_gen_batches=between,
                  workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 1.0}})

    def lengths(rng, n_prompts, n_samples, step):   # instance 0 takes the even prompts, 1 the odd ones
        return np.array([[1000 if p % 2 == 0 else 100] * n_samples for p in range(n_prompts)])
    rec, tl, sm, s = run(sc, costs, devices=2, prompt=const(10), resp=lengths)
    actor = tl[tl["pool"] == "actor"]
    device_s = (actor["end"] - actor["start"]) * actor["rank_count"]
    for instance, length in ((0, 1000), (1, 100)):
        mine = (actor["rank_start"] == instance) & (actor["state"] == "generate")
        assert device_s[mine].sum() == pytest.approx(2 * 2 * n * length * d)   # two sub-rounds of 2 x n sequences
    long_batch = 2 * n * 1000 * d                                                # a sub-round's span
    assert s["stage_time_s"]["generate"] == pytest.approx(2 * long_batch)
    tail = actor[(actor["rank_start"] == 1) & (actor["cause"] == "long_tail")]
    assert (tail["end"] - tail["start"]).sum() == pytest.approx(2 * (long_batch - 2 * n * 100 * d))
    first_rewards = actor[(actor["label"] == "reward") & (actor["end"] < 2 * long_batch)]
    assert (first_rewards["end"] - first_rewards["start"]).sum() == pytest.approx(2 * n * reward_s)   # 8 samples, one worker


def test_between_gen_batches_needs_dynamic_sampling_and_the_colocated_kind():
    with pytest.raises(RlsimError) as err:
        scenario("colocated", between_gen_batches="sleep")
    assert err.value.field == "schedule.between_gen_batches"
    with pytest.raises(RlsimError) as err:
        scenario("disaggregated", between_gen_batches="sleep",
                 workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4}})
    assert "between_gen_batches" in str(err.value)


@pytest.mark.parametrize(("kind", "reward_s"), [("disaggregated", 0.0), ("disaggregated", 0.3), ("one-step-off", 0.3)])
def test_split_pool_sub_rounds_wait_for_every_instance_and_its_rewards(kind, reward_s):
    # the same two sub-rounds on a rollout pool of 2 one-slot instances: the second starts on both
    # when the slower instance's first is generated and scored - one sub-round + the reward later -
    # where a split pool generated both at once before (the first round's starts were all 0)
    n, length, d = 4, 500, 1e-3
    # each instance's 8 samples of a sub-round on its one worker: reward_s for the batch
    costs = FakeCosts(instance_devices=1, train_group_devices=1, instance_max_seqs=1, decode_s_per_token=d,
                      sync_s=0.0, switch_s=0.0, reward_s_per_sample=reward_s / 8)
    sc = scenario(kind, iterations=1, prompts=8, n=n, rollout_devices=2,
                  workload={"algorithm": "dapo", "dynamic_sampling": {"gen_prompts": 4, "keep_fraction": 1.0}})
    rec, tl, sm, s = run(sc, costs, devices=4, prompt=const(10), resp=const(length))
    one_sub_round = 2 * n * length * d
    first = sm[sm["round"] == 0]
    assert sorted(set(first["start"].round(9))) == pytest.approx([0.0, one_sub_round + reward_s])
    assert first["finish"].max() == pytest.approx(2 * one_sub_round + reward_s)
    waits = tl[(tl["state"] == "idle") & (tl["label"] == "reward") & (tl["iteration"] == 0) & (tl["pool"] == "rollout")]
    assert float((waits["end"] - waits["start"]).sum()) == pytest.approx(2 * reward_s)     # per instance


@pytest.mark.parametrize("kind", ["colocated", "disaggregated"])
def test_a_step_that_spends_its_generation_batches_stops_the_run(kind):
    # keep_fraction 1 and gen_prompts 3 for a batch of 8: exactly ceil(8 / 3) = 3 sub-rounds a step;
    # a cap of 3 runs as without one, a cap of 2 stops at step 0 as verl / NeMo RL raise there
    from simulator.errors import RlsimError

    def sampling(cap):
        sub = {"gen_prompts": 3, "keep_fraction": 1.0, **({"max_gen_batches": cap} if cap else {})}
        return scenario(kind, iterations=2, prompts=8, n=2, workload={"algorithm": "dapo", "dynamic_sampling": sub})

    uncapped, capped = run(sampling(None))[3], run(sampling(3))[3]
    assert capped == uncapped
    with pytest.raises(RlsimError) as err:
        run(sampling(2))
    assert err.value.field == "workload.dynamic_sampling.max_gen_batches"   # the original, not simpy's copy
    assert err.value.fix.startswith("raise max_gen_batches")
    assert "step 0: after 2 generation batches of 3 prompts only 6 of the 8 groups" in str(err.value)


def _pooled_reward(monkeypatch, seen: list[int]) -> None:
    """FakeCosts' rule reward at 0.01 s a sample on one worker, counting the samples of each call."""
    def pooled(self, prompt_lens, response_lens):
        seen.append(len(response_lens))
        return np.full(len(response_lens), 0.01)

    monkeypatch.setattr(FakeCosts, "reward_cpu_s", pooled)


def test_a_shared_reward_pool_verifies_every_sample_stored_together(monkeypatch):
    # reward.workers: the job's pool verifies the samples of every plan stored together (a synchronous
    # round: all instances) as one batch once the last is done; without it, each instance's own
    # samples as one batch from its plan's end on its own workers (one a device: 2 an instance)
    seen: list[int] = []
    _pooled_reward(monkeypatch, seen)
    for reward, per_call in (({"workers": 4}, 32), ({}, 8)):
        seen.clear()
        sc = scenario("colocated", iterations=1, prompts=8, n=4, workload={"reward": reward})
        sm = run(sc, FakeCosts(instance_devices=2, train_group_devices=2), devices=8)[2]
        assert set(seen) == {per_call}
        if reward:
            assert sm["ready"].to_numpy() == pytest.approx(sm["finish"].max() + 0.01 * 32 / 4)
        else:
            for _, own in sm.groupby("instance"):
                assert own["ready"].to_numpy() == pytest.approx(own["finish"].max() + 0.01 * 8 / 2)


def test_split_pool_instances_queue_on_the_shared_reward_pool(monkeypatch):
    # 4 instances finish their 8 equal samples together: on a pool of 4 workers each batch takes
    # 8 x 0.01 / 4 = 0.02 s of the whole pool, so they are done 0.02, 0.04, 0.06, 0.08 s after the
    # finish (first come, first served); each instance's own workers would have them all at 0.02 s
    seen: list[int] = []
    _pooled_reward(monkeypatch, seen)
    costs = FakeCosts(instance_devices=1, train_group_devices=1, decode_s_per_token=1e-3)
    sc = scenario("disaggregated", iterations=1, prompts=8, n=4, workload={"reward": {"workers": 4}},
                  rollout_devices=4)
    _, _, sm, summary = run(sc, costs, devices=8, prompt=const(10), resp=const(100))
    waits = sorted(set((sm["ready"] - sm["finish"]).round(9).tolist()))
    assert waits == pytest.approx([0.02, 0.04, 0.06, 0.08])
    assert set(seen) == {8}
    pool = summary["reward_pool"]            # the pool's own figures: 4 batches x 0.02 s of all of it
    assert pool["workers"] == 4 and pool["busy_s"] == pytest.approx(0.08)
    assert pool["utilization"] == pytest.approx(0.08 / summary["makespan_s"])


def test_samples_handed_over_as_they_finish_overlap_the_pool_with_generation(monkeypatch):
    # reward.handover sample: each sample goes to the pool when it finishes (a quarter of 4 workers
    # for 0.01 s); with finishes 0.01 s or more apart nobody waits, so every sample is scored 0.01 s
    # after its finish - not all at the batch's last finish + 32 x 0.01 / 4 as handover batch has it
    seen: list[int] = []
    _pooled_reward(monkeypatch, seen)

    def spread(rng, n_prompts, n, step):       # every sample its own length, 10 tokens (0.01 s) apart
        return 100 + 10 * np.arange(n_prompts * n).reshape(n_prompts, n)

    costs = FakeCosts(instance_devices=2, train_group_devices=2, decode_s_per_token=1e-3)
    for handover in ("sample", "batch"):
        sc = scenario("colocated", iterations=1, prompts=8, n=4,
                      workload={"reward": {"workers": 4, "handover": handover}})
        sm = run(sc, costs, devices=8, prompt=const(10), resp=spread)[2]
        wait = (sm["ready"] - sm["finish"]).to_numpy()
        if handover == "sample":
            assert wait == pytest.approx(0.01)
        else:
            assert sm["ready"].to_numpy() == pytest.approx(sm["finish"].max() + 0.01 * 32 / 4)



class PooledCosts(FakeCosts):
    """FakeCosts whose rule reward is 0.01 s a sample on one worker (the scenario's pool has them)."""

    def reward_cpu_s(self, prompt_lens, response_lens):
        return np.full(len(response_lens), 0.01)


@settings(max_examples=16, deadline=None)
@given(kind=st.sampled_from(["colocated", "disaggregated", "one-step-off", "stalesync"]),
       handover=st.sampled_from(["batch", "sample"]), workers=st.integers(1, 6), seed=st.integers(0, 3))
def test_the_shared_pool_conserves_its_work_and_never_hurries_a_sample(kind, handover, workers, seed):
    # whatever the schedule and hand-over: each sample is ready at least one sample's time after it
    # finished, the pool is never busier than the work handed to it (k samples x 0.01 s / workers),
    # and every drawn sample is stored once
    costs = PooledCosts(instance_devices=1, train_group_devices=1)
    split = {} if kind in ("colocated", "stalesync") else {"rollout_devices": 4}
    sc = scenario(kind, iterations=3, prompts=8, n=4, seed=seed,
                  workload={"reward": {"workers": workers, "handover": handover}}, **split)
    _, _, sm, summary = run(sc, costs, devices=8, prompt=const(10), resp=_spread_lengths(seed))
    assert ((sm["ready"] - sm["finish"]) >= 0.01 - 1e-9).all()
    assert summary["reward_pool"]["busy_s"] <= len(sm) * 0.01 / workers + 1e-9
    assert sm.groupby(["round", "group"]).size().max() <= 4      # no prompt's sample stored twice


def _spread_lengths(seed: int):
    def sample(rng, n_prompts, n, step):
        return 20 + (np.arange(n_prompts * n).reshape(n_prompts, n) * (7 + seed)) % 90
    return sample


@settings(max_examples=16, deadline=None)
@given(kind=st.sampled_from(["colocated", "disaggregated", "one-step-off", "stalesync"]),
       handover=st.sampled_from([None, "batch", "sample"]), seed=st.integers(0, 3))
def test_each_instances_own_worker_verifies_what_it_is_handed_in_turn(kind, handover, seed):
    # workers_per_device: 1 on one-device instances: one worker each. Handed a batch (the default
    # where an engine returns its plan together), an instance's k samples are ready k x 0.01 s or
    # more after its last finish; handed each sample, they are scored first come first served, one
    # at a time (scored_i = max(finish_i, scored_i-1) + 0.01), and ready then or when the plan
    # returned them together (the same time for all of them), the later
    costs = PooledCosts(instance_devices=1, train_group_devices=1)
    split = {} if kind in ("colocated", "stalesync") else {"rollout_devices": 4}
    reward = {"workers_per_device": 1} | ({"handover": handover} if handover else {})
    sc = scenario(kind, iterations=3, prompts=8, n=4, seed=seed, workload={"reward": reward}, **split)
    _, _, sm, _ = run(sc, costs, devices=8, prompt=const(10), resp=_spread_lengths(seed))
    assert ((sm["ready"] - sm["finish"]) >= 0.01 - 1e-9).all()
    assert sm.groupby(["round", "group"]).size().max() <= 4
    for _, own in sm.groupby("instance"):
        if (handover or sc.schedule.REWARD_HANDOVER) == "sample":     # StaleSync streams its samples
            scored, previous = [], 0.0
            for finish in np.sort(own["finish"].to_numpy()):
                previous = max(finish, previous) + 0.01
                scored.append(previous)
            own = own.sort_values("finish", kind="stable").assign(scored=scored)
            assert (own["ready"] >= own["scored"] - 1e-9).all()
            held = own[own["ready"] > own["scored"] + 1e-9]          # returned after they were scored
            assert (held["ready"] == held.groupby("start")["ready"].transform("max")).all()
        else:
            for _, batch in own.groupby("start"):                    # one plan's samples: one batch
                assert batch["ready"].nunique() == 1
                assert batch["ready"].iloc[0] >= batch["finish"].max() + 0.01 * len(batch) - 1e-9


class LengthPricedCosts(FakeCosts):
    """FakeCosts whose rule reward takes 1 ms per 100 response tokens on one worker."""

    def reward_cpu_s(self, prompt_lens, response_lens):
        return np.asarray(response_lens, float) * 1e-5


def test_a_batch_of_unequal_samples_takes_its_summed_time_over_the_pool_and_at_least_its_longest():
    # the job's pool of 4 (handover batch): a round's samples, each priced by its length, are ready
    # sum / 4 after the last finish; on a pool wider than the batch, its longest sample's time
    def spread(rng, n_prompts, n, step):
        return 100 + 10 * np.arange(n_prompts * n).reshape(n_prompts, n)

    for workers in (4, 64):
        sc = scenario("colocated", iterations=1, prompts=8, n=4, workload={"reward": {"workers": workers}})
        sm = run(sc, LengthPricedCosts(instance_devices=2, train_group_devices=2, decode_s_per_token=1e-3),
                 devices=8, prompt=const(10), resp=spread)[2]
        each = sm["response_len"].to_numpy() * 1e-5
        want = max(each.sum() / workers, each.max())
        assert sm["ready"].to_numpy() == pytest.approx(sm["finish"].max() + want, rel=1e-9)
