"""verl's timing_s phase names next to rlsim's own (metrics.verl_timing): they add up to the step."""
import numpy as np
import pytest

import simulator
from simulator.rl.fake_costs import FakeCosts

from .rl.schedules.test_schedules import const, lognormal, run, scenario

NAMED = ("gen", "reward", "old_log_prob", "ref", "update_actor", "wait_prev_gen", "values", "update_critic")


def test_hybrid_engine_phases_in_closed_form():
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, switch_s=0.1, reward_s_per_sample=0.3,
                  decode_s_per_token=1e-3, train_device_s_per_token=1e-3, forward_device_s_per_token=2e-4)
    sc = scenario("colocated", iterations=3, workload={"reference": True})
    s = run(sc, c, devices=8, prompt=const(100), resp=const(500))[3]
    v = s["verl_timing_s"]
    tokens = 64 * 600
    # the queue takes the writes during the reward wait, so the trainer's fetch is its read alone
    fetch = tokens * sc.schedule.distqueue.bytes_per_token / sc.schedule.distqueue.bw_Bps
    # verl's gen holds generate_sequences' switch to rollout mode (the weight sync in it) and back
    assert v["gen"] == pytest.approx(0.5 + 2 * 0.1 + 0.7)
    assert v["reward"] == pytest.approx(0.3 * 16 / 2)             # each instance's 16 samples on its 2 workers
    assert v["old_log_prob"] == pytest.approx(tokens * 2e-4 / 8) and v["ref"] == pytest.approx(tokens * 2e-4 / 8)
    assert v["update_actor"] == pytest.approx(tokens * 1e-3 / 8)
    assert v["other"] == pytest.approx(fetch)                     # the DistQueue fetch alone
    assert v["step"] == pytest.approx(s["step_time_s"])
    assert "wait_prev_gen" not in v


@pytest.mark.parametrize("kind,workload", [("colocated", {}), ("one-step-off", {}), ("colocated", {"algorithm": "ppo"}),
                                           ("one-step-off", {"reference": True})])
def test_phases_add_up_to_the_step(kind, workload):
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.2, reward_s_per_sample=0.05)
    rec, _, _, s = run(scenario(kind, iterations=4, seed=3, workload=workload), c, resp=lognormal(400, 1.0, 4000))
    v = s["verl_timing_s"]
    assert sum(v.get(k, 0.0) for k in NAMED) + v["other"] == pytest.approx(v["step"], rel=1e-12)
    assert v["other"] >= -1e-9 and all(v[k] >= 0 for k in v)
    assert ("gen" in v) == (kind == "colocated") and ("wait_prev_gen" in v) == (kind == "one-step-off")
    # one-step-off's warm-up step waits for a whole first generation: the steady steps, as verl's logs
    assert v["step"] == pytest.approx(s["steady_step_time_s" if kind == "one-step-off" else "step_time_s"], rel=1e-12)
    if kind == "one-step-off":   # the trainer's wait over steps 1..3, not step 0's whole first generation
        its = rec.iterations
        assert v["wait_prev_gen"] == pytest.approx(np.mean([its[k]["start"] - its[k - 1]["end"] for k in (1, 2, 3)]))
        assert its[0]["start"] > v["wait_prev_gen"]
        timeline = rec.timeline.to_frame()    # the trainer's phases over the same steps (other stays glue)
        trained = timeline[(timeline["label"] == "train_actor") & (timeline["iteration"] >= 1)]
        assert v["update_actor"] == pytest.approx((trained["end"] - trained["start"]).sum() / 3)


@pytest.mark.parametrize("kind,sched", [("async", {}), ("disaggregated", {}), ("colocated", {"fuse": "actor"}),
                                        ("stalesync", {}), ("nemo-rl-async", {}), ("areal", {})])
def test_only_the_verl_modes_carry_them(kind, sched):
    s = run(scenario(kind, iterations=2, **sched))[3]
    assert "verl_timing_s" not in s


def test_on_a_real_workload_the_named_phases_cover_the_step():
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                           iterations=2, overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=4",
                                                    "workload.mini_batch_prompts=8"])
    v = r.summary["verl_timing_s"]
    stages = r.summary["stage_time_s"]
    assert v["gen"] == pytest.approx(stages["generate"] + stages["switch_to_rollout"] + stages["switch_to_train"]
                                     + stages["weight_sync"], rel=1e-12)
    assert v["update_actor"] == stages["train_actor"]
    assert v["other"] == pytest.approx(stages["fetch"], rel=1e-9)


def _with_nemo_timers(kind, **workload):
    from simulator.scenario import load_scenario
    base = scenario(kind, iterations=3, workload=workload or None)
    return load_scenario(base, overrides=["output.timers=nemo-rl"])


@pytest.mark.parametrize("kind", ["colocated", "one-step-off"])
def test_nemo_rl_timers_are_verls_phases_under_nemo_names(kind):
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, switch_s=0.1, reward_s_per_sample=0.3)
    s = run(_with_nemo_timers(kind, reference=True), c)[3]
    v, nemo = s["verl_timing_s"], s["nemo_rl_timing_s"]
    assert nemo["policy_and_reference_logprobs"] == pytest.approx(v["old_log_prob"] + v["ref"])
    assert nemo["policy_training"] == v["update_actor"] and nemo["reward_calculation"] == v["reward"]
    assert nemo["weight_sync"] == pytest.approx(s["stage_time_s"]["weight_sync"]) and nemo["weight_sync"] > 0
    # NeMo RL's generation is the generation alone (verl's gen also holds the switches and the sync)
    wraps = v["gen"] - nemo["generation"] if kind == "colocated" else 0.0
    if kind == "colocated":
        assert nemo["generation"] == pytest.approx(s["stage_time_s"]["generate"])
    assert nemo["other"] == pytest.approx(v["other"] + wraps - nemo["weight_sync"])   # the refit has its own timer
    assert ("generation" in nemo) == (kind == "colocated") and ("exposed_generation" in nemo) == (kind != "colocated")
    assert sum(x for k, x in nemo.items() if k != "total_step_time") == pytest.approx(nemo["total_step_time"])
    assert nemo["total_step_time"] == v["step"]


def test_verl_timers_by_default_and_nemo_timers_refused_where_no_step_has_them():
    from simulator.errors import RlsimError
    assert "nemo_rl_timing_s" not in run(scenario("colocated", iterations=2))[3]
    with pytest.raises(RlsimError, match="kind stalesync has only rlsim's stages") as caught:
        _with_nemo_timers("stalesync")
    assert caught.value.field == "output.timers"
    with pytest.raises(RlsimError, match="kind colocated with fuse: actor"):
        from simulator.scenario import load_scenario
        load_scenario(scenario("colocated", fuse="actor"), overrides=["output.timers=nemo-rl"])


def test_the_nemo_rl_import_names_its_timers_nemo_rls(capsys):
    from pathlib import Path

    from simulator.cli import main
    recipe = Path(__file__).resolve().parents[1] / "workloads" / "frameworks" / "nemo-rl-grpo-llama3.1-8b.yaml"
    assert main(["run", "--from-nemo-rl", str(recipe),
                 "--set", "iterations=1", "--print-scenario"]) == 0
    assert "output: {timers: nemo-rl}" in capsys.readouterr().out


def test_dynamic_sampling_counts_the_filters_reward_wait_once():
    """With the engine put to sleep between generation batches, the wait for a batch's rewards sat
    inside `gen` and in `reward` both: `other` came out negative (-1.95 s on a verl DAPO import, a
    framework-knob trial). It is reward time: generation does not grow with the rewards' cost."""
    def timing(cpu_s_per_sample):
        r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=2,
                               schedule={"kind": "colocated", "between_gen_batches": "sleep"},
                               overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16",
                                          "workload.dynamic_sampling={gen_prompts: 16, keep_fraction: 0.5}",
                                          f"workload.reward.cpu_s_per_sample={cpu_s_per_sample}"])
        return r.summary["verl_timing_s"]
    cheap, dear = timing(0.001), timing(0.5)
    assert dear["gen"] == pytest.approx(cheap["gen"], rel=1e-9)
    assert dear["reward"] > cheap["reward"] + 1.0 and dear["other"] >= 0


@pytest.mark.parametrize("handover", ["sample", "batch"])
@pytest.mark.parametrize("timers", ["verl", "openrlhf"])
def test_a_reward_model_on_devices_of_its_own_is_timed_by_the_drivers_wait(handover, timers):
    """A hybrid-engine step scored by a reward model served on GPUs of its own (reward.served.devices):
    `reward` added the pool's busy seconds, which run beside the generation on other devices, to the
    trainer's wait for the last scores, so `other` came out at minus that time (-79.2 s a step for
    grpo-qwen2.5-7b on 12 + 4 H100s, a user trial). The driver's phase is its wait (the actor's idle
    labelled reward); the pool's busy time stays stage_time_s.reward."""
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, schedule="colocated",
                           iterations=2, overrides=["workload.prompts_per_step=64", "workload.mini_batch_prompts=64",
                                                    "workload.reward.kind=model", "workload.reward.served.devices=4",
                                                    f"workload.reward.handover={handover}", f"output.timers={timers}"])
    s, timeline = r.summary, r.timeline
    v = s["verl_timing_s"]
    waits = timeline[(timeline["pool"] == "actor") & (timeline["state"] == "idle") & (timeline["label"] == "reward")]
    wait = float(((waits["end"] - waits["start"]) * waits["rank_count"]).sum()) / s["pools"]["actor"] / 2
    assert s["stage_time_s"]["reward"] > wait + 1.0          # the pool's busy time, mostly under the generation
    assert v["reward"] == pytest.approx(wait, rel=1e-9)
    assert v["other"] == pytest.approx(s["stage_time_s"]["fetch"], rel=1e-6)
    assert all(value >= 0 for value in v.values())
    if timers == "openrlhf":
        assert all(value >= 0 for value in s["openrlhf_timing_s"].values())
        # what no OpenRLHF timer holds: rlsim's fixed switch overhead, twice a step, and the fetch
        assert s["openrlhf_timing_s"]["other"] == pytest.approx(2 * 0.5 + s["stage_time_s"]["fetch"], rel=1e-6)


def test_one_step_off_beside_a_reward_model_on_devices_of_its_own_waits_for_it_in_wait_prev_gen():
    """one-step-off's `reward` took the reward pool's busy seconds, apportioned by the trainer's idle
    rows labelled reward, beside wait_prev_gen that holds that wait: `other` -15.1 s a step (128
    prompts on 12 + 4 H100s, 3 steps). The pool scores beside the generation; the trainer's wait for
    its last answers is part of its wait for the previous generation."""
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2},
                           schedule="one-step-off", iterations=3,
                           overrides=["workload.prompts_per_step=128", "workload.mini_batch_prompts=64",
                                      "workload.reward.kind=model", "workload.reward.served.devices=4"])
    v, its = r.summary["verl_timing_s"], r.iterations
    assert r.summary["stage_time_s"]["reward"] > 10.0
    assert v["reward"] == 0.0
    assert v["wait_prev_gen"] == pytest.approx(np.mean([its["start"][k] - its["end"][k - 1] for k in (1, 2)]))
    assert v["other"] >= 0 and all(value >= 0 for value in v.values())
    assert sum(v.get(k, 0.0) for k in NAMED) + v["other"] == pytest.approx(v["step"], rel=1e-12)


def test_the_reward_wait_is_named_inside_the_dependency_bubble():
    """The console showed a colocated step's wait for rule rewards as "bubble: dependency" while
    the critical path called the same seconds "reward" (a user trial): the summary says which share
    of the idle time was that wait (idle rows labelled reward), inside dependency."""
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, switch_s=0.1, decode_s_per_token=1e-3,
                  reward_s_per_sample=0.3)
    rec, timeline, _, s = run(scenario("colocated", iterations=3), c, devices=8, prompt=const(100), resp=const(500))
    waits = timeline[(timeline["state"] == "idle") & (timeline["label"] == "reward")]
    total = float(((timeline["end"] - timeline["start"]) * timeline["rank_count"]).sum())
    assert s["reward_wait_fraction"] == pytest.approx(
        float(((waits["end"] - waits["start"]) * waits["rank_count"]).sum()) / total)
    assert 0 < s["reward_wait_fraction"] <= s["bubbles_by_cause"]["dependency"] + 1e-12


def _openrlhf(kind, c, **sched):
    from simulator.scenario import load_scenario
    sc = load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8,
                                                         "samples_per_prompt": 8, "reference": True},
                        "schedule": {"kind": kind, "rollout_devices": 8, "distqueue": {"bw_Bps": 1e30}, **sched},
                        "iterations": 4, "seed": 0, "output": {"timers": "openrlhf"}})
    return run(sc, c, devices=12 + sum((sched.get("aux_devices") or {}).values()), prompt=const(100), resp=const(500))


@pytest.mark.parametrize("aux", [None, {"reference": 2}])
def test_openrlhfs_split_timers_in_closed_form(aux):
    """OpenRLHF beside engines of its own: its synchronous trainer (disaggregated) times the generation
    it waits for, then make_experience, ppo_train, broadcast, all on the step; the asynchronous one
    (one-step-off) times the batch's generation on the generator (off the trainer's path) and
    broadcasts under the vLLM lock, waiting there for the next batch. Equal lengths: gen 0.5 s a
    round, the forwards max(old log-probs on 4, reference on 4 or on the aux pool's 2), train on 4."""
    c = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.7, decode_s_per_token=1e-3,
                  train_device_s_per_token=1e-3, forward_device_s_per_token=2e-4)
    tokens = 64 * 600
    forwards = max(tokens * 2e-4 / 4, tokens * 2e-4 / 2) if aux else 2 * tokens * 2e-4 / 4
    train = tokens * 1e-3 / 4
    extra = {"aux_devices": aux} if aux else {}
    sync = _openrlhf("disaggregated", c, **extra)[3]["openrlhf_timing_s"]
    assert sync["generation"] == pytest.approx(0.5) and sync["make_experience"] == pytest.approx(forwards)
    assert sync["ppo_train"] == pytest.approx(train) and sync["broadcast"] == pytest.approx(0.7)
    assert sync["step_total"] == pytest.approx(0.5 + forwards + train + 0.7) and sync["other"] == pytest.approx(0, abs=1e-9)
    asynchronous = _openrlhf("one-step-off", c, staleness=1, round_batches=True, **extra)[3]["openrlhf_timing_s"]
    assert asynchronous["generation"] == pytest.approx(0.5)          # the round on the engines
    # trainer-bound (forwards + train + sync > 0.5): no wait at the lock, the step is the trainer's
    assert asynchronous["broadcast"] == pytest.approx(0.7)
    assert asynchronous["step_total"] == pytest.approx(forwards + train + 0.7)
    # generator-bound: the trainer waits at the lock for the next batch, inside broadcast
    fast = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.1, decode_s_per_token=1e-3,
                     train_device_s_per_token=1e-6, forward_device_s_per_token=1e-7)
    bound = _openrlhf("one-step-off", fast, staleness=1, round_batches=True, **extra)[3]["openrlhf_timing_s"]
    assert bound["broadcast"] > 0.1 + 0.3
    assert bound["make_experience"] + bound["ppo_train"] + bound["broadcast"] == pytest.approx(bound["step_total"])
    assert bound["step_total"] >= bound["generation"] - 1e-9
