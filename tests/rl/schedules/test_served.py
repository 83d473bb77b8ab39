"""On-policy distillation's teacher pool in the schedules (rl/schedules/served.py): each sample is
ready when the teacher has scored it after its reward, on the devices set apart for the teacher."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import metrics
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import run_schedule
from simulator.scenario import load_scenario

from .test_verl_async import const, lognormal

PROMPTS, N, PROMPT, RESPONSE = 8, 4, 50, 400
TEACHER_S_PER_TOKEN = 2e-4


def scenario(kind="colocated", iterations=3, teacher_devices=1, topk=0, handover="sample", one_at_a_time=False,
             **sched):
    # separate_async trains one mini-batch per local update (parameter_sync_step 4 by default)
    mini = PROMPTS // 4 if kind == "verl-separate-async" else PROMPTS
    workload = {"model": "fake", "prompts_per_step": PROMPTS, "samples_per_prompt": N, "mini_batch_prompts": mini}
    if teacher_devices:
        workload["distillation"] = {"teacher": "fake", "devices": teacher_devices, "topk": topk, "handover": handover,
                                    "one_at_a_time": one_at_a_time}
    return load_scenario({"topology": "fake", "workload": workload, "schedule": {"kind": kind, **sched},
                          "iterations": iterations})


def run(sc, devices, resp=None, teacher_devices=1, **rates):
    """The run on FakeCosts (``rates``: its served engines' rates over this module's teacher's)."""
    costs = FakeCosts(instance_devices=2, train_group_devices=2, sync_s=0.5, instance_max_seqs=64,
                      **{"teacher_s_per_token": TEACHER_S_PER_TOKEN, "teacher_devices": teacher_devices, **rates})
    rec = run_schedule(sc, costs, devices, const(PROMPT), resp or const(RESPONSE))
    tl, sm = rec.timeline.to_frame(), rec.samples.to_frame()
    return rec, tl, sm, metrics.summary(rec, tl, sm)


def test_a_synchronous_step_waits_for_the_teacher_to_score_its_whole_batch():
    """Colocated, equal lengths: the batch leaves the engine together and one teacher engine scores
    its samples one after another, so the step grows by exactly samples x tokens x its time a token
    (less the DistQueue fetch of the samples scored first, which now lands during the wait)."""
    with_teacher = run(scenario(), 17)
    without = run(scenario(teacher_devices=0), 16)[3]
    batch_s = PROMPTS * N * (PROMPT + RESPONSE) * TEACHER_S_PER_TOKEN
    rec, tl, _, summary = with_teacher
    fetch_hidden = without["stage_time_s"]["fetch"] - summary["stage_time_s"]["fetch"]
    assert 0 < fetch_hidden < 1e-4
    assert summary["steady_step_time_s"] - without["steady_step_time_s"] == pytest.approx(batch_s - fetch_hidden)
    assert rec.pools["teacher"].start == 16 and rec.pools["teacher"].count == 1
    assert summary["teacher_pool"]["busy_s"] == pytest.approx(3 * batch_s)
    assert summary["stage_time_s"]["teacher"] == pytest.approx(batch_s)     # a step's mean
    teacher_rows = tl[tl["pool"] == "teacher"]
    busy = teacher_rows[teacher_rows["state"] == "forward"]
    assert ((busy["end"] - busy["start"]).sum()) == pytest.approx(3 * batch_s)
    assert set(teacher_rows.loc[teacher_rows["state"] == "idle", "cause"]) == {"dependency"}


def test_the_critical_path_carries_the_teachers_latency_as_its_own_cause():
    """The colocated closed form: the batch leaves the engine together and the teacher scores it in
    samples x tokens x its time a token, which the path holds as cause teacher, not reward."""
    from simulator.rl import critical_path as cp
    rec, tl, _, _ = run(scenario(distqueue={"bw_Bps": 1e30}), 17)
    summary = cp.summarize(cp.critical_paths(rec, tl), rec.samples.flat())
    batch_s = PROMPTS * N * (PROMPT + RESPONSE) * TEACHER_S_PER_TOKEN
    for step in summary["steps"]:
        assert step["s_by_cause"]["teacher"] == pytest.approx(batch_s, rel=1e-9)
        assert "reward" not in step["s_by_cause"]                   # FakeCosts' rewards take no time
        assert sum(step["s_by_cause"].values()) == pytest.approx(step["length_s"], rel=1e-9)
    samples = rec.samples.to_frame()
    assert (samples["ready"] - samples["scored"]).max() == pytest.approx(batch_s, rel=1e-9)
    assert (samples["scored"] >= samples["returned"]).all()


def test_two_teacher_engines_halve_the_wait():
    one = run(scenario(teacher_devices=1), 17)[3]["steady_step_time_s"]
    two = run(scenario(teacher_devices=2), 18, teacher_devices=1)[3]["steady_step_time_s"]
    batch_s = PROMPTS * N * (PROMPT + RESPONSE) * TEACHER_S_PER_TOKEN
    assert one - two == pytest.approx(batch_s / 2, abs=1e-4)    # the hidden fetches differ by microseconds


def test_the_teacher_pool_must_be_whole_engines_and_leave_devices_to_the_job():
    with pytest.raises(RlsimError, match="whole teacher engines") as err:
        run(scenario(teacher_devices=3), 19, teacher_devices=2)
    assert err.value.field == "workload.distillation.devices" and "give 2 or 4" in err.value.fix
    with pytest.raises(RlsimError, match="leave none") as err:
        run(scenario(teacher_devices=16), 16)
    assert err.value.field == "workload.distillation.devices"


def test_the_samples_carry_the_teachers_log_probabilities_to_the_trainer():
    """DistQueue: each sample's payload grows by its tokens x max(topk, 1) x 8 bytes (id and value)."""
    plain = run(scenario(teacher_devices=0), 16)[0].queue["bytes_written"]
    sampled = run(scenario(), 17)[0].queue["bytes_written"]
    top32 = run(scenario(topk=32), 17)[0].queue["bytes_written"]
    tokens = 3 * PROMPTS * N * (PROMPT + RESPONSE)
    assert sampled - plain == pytest.approx(tokens * 8)
    assert top32 - plain == pytest.approx(tokens * 32 * 8)


KINDS = ["colocated", "disaggregated", "one-step-off", "async", "stalesync", "nemo-rl-async", "areal",
         "verl-fully-async", "verl-sync", "verl-colocate-async", "verl-separate-async"]


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(KINDS), teacher_devices=st.integers(1, 3), sigma=st.floats(0.0, 1.5),
       seed=st.integers(0, 3))
def test_every_kind_conserves_device_time_and_no_sample_is_trained_before_its_teacher(kind, teacher_devices, sigma,
                                                                                        seed):
    sc = scenario(kind, iterations=3, teacher_devices=teacher_devices).model_copy(update={"seed": seed})
    rec, tl, sm, summary = run(sc, 16 + teacher_devices, resp=lognormal(400, sigma, 2000))
    per_device = metrics.per_device_time(tl, rec.n_devices)
    assert per_device == pytest.approx(np.full(rec.n_devices, rec.makespan_s), rel=1e-9, abs=1e-6)
    consumed = sm[sm["consumed_iteration"] >= 0]
    alone = (consumed["prompt_len"] + consumed["response_len"]) * TEACHER_S_PER_TOKEN
    assert (consumed["ready"] >= consumed["finish"] + alone - 1e-9).all()
    assert summary["teacher_pool"]["busy_s"] <= rec.makespan_s + 1e-9
    teacher = tl[tl["pool"] == "teacher"]
    assert set(teacher["rank_start"]) == {16} and set(teacher["state"]) <= {"forward", "idle"}


def test_a_teacher_handed_the_trainers_batch_holds_the_trainer_for_its_answers():
    """AReaL's teacher (handover step, one request at a time on each engine): the trainer hands over
    its batch after the forward passes and waits; two engines of one device each take the samples
    dealt round-robin, so the wait is S / 2 samples x tokens x the time a token, on the trainer's
    devices (idle, label teacher, which the critical path holds as teacher). The rollout hands no
    sample to the teacher (ready = scored) and the samples carry no log-probabilities through DistQueue."""
    sc = scenario(teacher_devices=2, handover="step", one_at_a_time=True, distqueue={"bw_Bps": 1e30})
    rec, tl, sm, summary = run(sc, 18)
    plain_rec, _, _, plain = run(scenario(teacher_devices=0, distqueue={"bw_Bps": 1e30}), 16)
    wait_s = PROMPTS * N // 2 * (PROMPT + RESPONSE) * TEACHER_S_PER_TOKEN
    assert summary["steady_step_time_s"] - plain["steady_step_time_s"] == pytest.approx(wait_s, rel=1e-9)
    assert (sm["ready"] == sm["scored"]).all()
    assert rec.queue["bytes_written"] == plain_rec.queue["bytes_written"]
    waits = tl[(tl["pool"] == "actor") & (tl["label"] == "teacher")]
    assert set(waits["state"]) == {"idle"} and set(waits["cause"]) == {"dependency"}
    assert (waits["end"] - waits["start"]).groupby(waits["iteration"]).max().tolist() == pytest.approx([wait_s] * 3)
    assert summary["teacher_pool"]["busy_s"] == pytest.approx(3 * wait_s)
    from simulator.rl import critical_path as cp
    for step in cp.summarize(cp.critical_paths(rec, tl), rec.samples.flat())["steps"]:
        assert step["s_by_cause"]["teacher"] == pytest.approx(wait_s, rel=1e-9)


def test_one_request_at_a_time_deals_the_batch_round_robin_to_the_engines():
    """Three engines, 32 samples: the first two engines take 11 each, the last 10; the wait is 11
    samples' time, where a pool sharing its work evenly would take 32 / 3."""
    sc = scenario(teacher_devices=3, handover="step", one_at_a_time=True, distqueue={"bw_Bps": 1e30})
    summary = run(sc, 19)[3]
    plain = run(scenario(teacher_devices=0, distqueue={"bw_Bps": 1e30}), 16)[3]
    tau = (PROMPT + RESPONSE) * TEACHER_S_PER_TOKEN
    assert summary["steady_step_time_s"] - plain["steady_step_time_s"] == pytest.approx(11 * tau, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(KINDS), one_at_a_time=st.booleans(), sigma=st.floats(0.0, 1.5), seed=st.integers(0, 3))
def test_every_kind_conserves_device_time_with_the_teacher_at_the_trainer(kind, one_at_a_time, sigma, seed):
    sc = scenario(kind, teacher_devices=2, handover="step", one_at_a_time=one_at_a_time).model_copy(
        update={"seed": seed})
    rec, tl, sm, summary = run(sc, 18, resp=lognormal(400, sigma, 2000))
    per_device = metrics.per_device_time(tl, rec.n_devices)
    assert per_device == pytest.approx(np.full(rec.n_devices, rec.makespan_s), rel=1e-9, abs=1e-6)
    assert 0 < summary["teacher_pool"]["busy_s"] <= rec.makespan_s + 1e-9
    assert (sm["ready"] == sm["scored"]).all()
