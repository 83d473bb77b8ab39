"""A reward model served on engines of its own (workload.reward.served; rl/schedules/served.py): each
sample is scored by its pool as it is handed over, in place of a forward pass on the trainer, and a
distillation teacher's pool comes after it."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario

from .test_served import KINDS
from .test_served import run as served_run
from .test_verl_async import const, lognormal

PROMPTS, N, PROMPT, RESPONSE = 8, 4, 50, 400
RM_S_PER_TOKEN, TEACHER_S_PER_TOKEN = 2e-4, 1e-4
SAMPLE_TOKENS = PROMPT + RESPONSE


def scenario(kind="colocated", iterations=3, rm_devices=1, teacher_devices=0, handover="batch", **sched):
    mini = PROMPTS // 4 if kind == "verl-separate-async" else PROMPTS
    workload = {"model": "fake", "prompts_per_step": PROMPTS, "samples_per_prompt": N, "mini_batch_prompts": mini}
    if rm_devices:
        workload["reward"] = {"kind": "model", "served": {"devices": rm_devices}, "handover": handover}
    if teacher_devices:
        workload["distillation"] = {"teacher": "fake", "devices": teacher_devices}
    return load_scenario({"topology": "fake", "workload": workload, "schedule": {"kind": kind, **sched},
                          "iterations": iterations})


def run(sc, devices, resp=None):
    return served_run(sc, devices, resp, reward_model_s_per_token=RM_S_PER_TOKEN,
                      teacher_s_per_token=TEACHER_S_PER_TOKEN)


def test_a_synchronous_step_waits_for_the_reward_model_to_score_its_batch_on_its_own_devices():
    """Colocated, equal lengths, the batch handed over when it leaves the engine: one reward-model
    engine scores its samples one after another, so the step is the rule-reward step (FakeCosts'
    rules take no time) plus samples x tokens x its time a token, and the trainer runs no reward
    forward (its forward rows are the old log-prob and reference passes only)."""
    rec, tl, sm, summary = run(scenario(distqueue={"bw_Bps": 1e30}), 17)
    rule = run(scenario(rm_devices=0, distqueue={"bw_Bps": 1e30}), 16)[3]
    batch_s = PROMPTS * N * SAMPLE_TOKENS * RM_S_PER_TOKEN
    assert summary["steady_step_time_s"] - rule["steady_step_time_s"] == pytest.approx(batch_s, rel=1e-9)
    assert (rec.pools["reward_model"].start, rec.pools["reward_model"].count) == (16, 1)
    assert summary["reward_model_pool"]["busy_s"] == pytest.approx(3 * batch_s)
    assert summary["stage_time_s"]["reward"] == pytest.approx(batch_s)     # a step's mean
    assert set(tl.loc[(tl["pool"] != "reward_model") & (tl["state"] == "forward"), "label"]) == {"old_logprob", "reference"}
    assert ((sm["scored"] - sm["returned"]).max()) == pytest.approx(batch_s, rel=1e-9)


def test_the_critical_path_holds_the_reward_models_latency_as_reward():
    from simulator.rl import critical_path as cp
    rec, tl, _, _ = run(scenario(distqueue={"bw_Bps": 1e30}), 17)
    summary = cp.summarize(cp.critical_paths(rec, tl), rec.samples.flat())
    batch_s = PROMPTS * N * SAMPLE_TOKENS * RM_S_PER_TOKEN
    for step in summary["steps"]:
        assert step["s_by_cause"]["reward"] == pytest.approx(batch_s, rel=1e-9)
        assert sum(step["s_by_cause"].values()) == pytest.approx(step["length_s"], rel=1e-9)


def test_the_teacher_pipelines_behind_the_reward_model():
    """Both served, one engine each, the batch handed over at once: sample i's reward is ready at
    i x tau_rm and the faster teacher (tau_t < tau_rm) takes each as it comes, so the last sample is
    ready tau_t after the last reward: the step grows by S x tau_rm + tau_t, not the sum of both batches.
    The pools follow the job's devices in verl's order: the reward model's, then the teacher's."""
    rec, _, sm, summary = run(scenario(teacher_devices=1, distqueue={"bw_Bps": 1e30}), 18)
    rule = run(scenario(rm_devices=0, distqueue={"bw_Bps": 1e30}), 16)[3]
    samples = PROMPTS * N
    tau_rm, tau_t = SAMPLE_TOKENS * RM_S_PER_TOKEN, SAMPLE_TOKENS * TEACHER_S_PER_TOKEN
    assert summary["steady_step_time_s"] - rule["steady_step_time_s"] == pytest.approx(samples * tau_rm + tau_t,
                                                                                        rel=1e-6)
    assert rec.pools["reward_model"].start == 16 and rec.pools["teacher"].start == 17
    assert ((sm["ready"] - sm["scored"]).min()) == pytest.approx(tau_t, rel=1e-9)


def test_handed_over_as_each_sample_finishes_the_scoring_hides_under_generation():
    """With handover sample and lengths spread out, most samples are scored while the engine still
    generates the long ones: the step grows by less than a batch handed over at once."""
    resp = lognormal(400, 1.0, 2000)
    at_once = run(scenario(handover="batch"), 17, resp)[3]["steady_step_time_s"]
    streamed = run(scenario(handover="sample"), 17, resp)[3]["steady_step_time_s"]
    rule = run(scenario(rm_devices=0), 16, resp)[3]["steady_step_time_s"]
    assert rule < streamed < at_once


@pytest.mark.parametrize(("reward", "field", "message"), [
    ({"kind": "rule", "served": {"devices": 8}}, "workload.reward.served", "applies to a reward model"),
    ({"kind": "model", "cpu_offload": True, "served": {"devices": 8}}, "workload.reward.served",
     "cpu_offload .FSDP's offload of one on the trainer. does not apply"),
    ({"kind": "model", "served": {"devices": 8, "layout": {"instances": 2}}}, "workload.reward.served.layout",
     "instances does not apply"),
    ({"kind": "model", "handover": "sample"}, "workload.reward", "handover applies to rule rewards"),
])
def test_bad_reward_model_sections_are_refused_by_their_field(reward, field, message):
    with pytest.raises(RlsimError, match=message) as err:
        load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8,
                                                         "samples_per_prompt": 4, "reward": reward}})
    assert err.value.field == field


def test_the_pools_must_be_whole_engines_and_leave_devices_to_the_job():
    costs = dict(instance_devices=2, train_group_devices=2, reward_model_devices=2)
    with pytest.raises(RlsimError, match="whole reward model engines") as err:
        run_schedule(scenario(rm_devices=3), FakeCosts(**costs), 19, const(PROMPT), const(RESPONSE))
    assert err.value.field == "workload.reward.served.devices" and "give 2 or 4" in err.value.fix
    with pytest.raises(RlsimError, match="the reward model's 8 and the teacher's 8 devices leave none") as err:
        run_schedule(scenario(rm_devices=8, teacher_devices=8), FakeCosts(), 16, const(PROMPT), const(RESPONSE))
    assert err.value.field == "workload.reward.served.devices"
    with pytest.raises(RlsimError, match="served reward model's pool") as err:
        run(scenario(failures=[{"at_s": 10, "fail": "node:0"}]), 17)
    assert err.value.field == "schedule.failures" and "workload.reward.served" in err.value.fix


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(KINDS), handover=st.sampled_from(["batch", "sample"]), teacher=st.booleans(),
       sigma=st.floats(0.0, 1.5), seed=st.integers(0, 3))
def test_every_kind_conserves_device_time_and_trains_no_sample_before_its_reward_model(kind, handover, teacher,
                                                                                         sigma, seed):
    sc = scenario(kind, rm_devices=2, teacher_devices=int(teacher), handover=handover).model_copy(
        update={"seed": seed})
    rec, tl, sm, summary = run(sc, 18 + int(teacher), resp=lognormal(400, sigma, 2000))
    per_device = metrics.per_device_time(tl, rec.n_devices)
    assert per_device == pytest.approx(np.full(rec.n_devices, rec.makespan_s), rel=1e-9, abs=1e-6)
    consumed = sm[sm["consumed_iteration"] >= 0]
    alone = (consumed["prompt_len"] + consumed["response_len"]) * RM_S_PER_TOKEN
    assert (consumed["scored"] >= consumed["finish"] + alone - 1e-9).all()
    assert (consumed["ready"] >= consumed["scored"] - 1e-9).all()
    assert summary["reward_model_pool"]["busy_s"] <= rec.makespan_s + 1e-9
    pool = tl[tl["pool"] == "reward_model"]
    assert set(pool["rank_start"]) == {16} and set(pool["state"]) <= {"forward", "idle"}
