"""schedule.recompute_logprob on the synchronous kinds (colocated, disaggregated): false leaves the
old log-prob pass out of every step, which then ends earlier by exactly that pass (a closed form on
equal lengths: tokens x the forward's device-seconds a token / the trainer's devices)."""
import pytest

from simulator.errors import RlsimError

from .test_verl_async import const, run, scenario

PROMPTS, N, PROMPT, RESPONSE = 8, 4, 50, 400
FORWARD_S_PER_TOKEN = 3e-4   # FakeCosts.forward_device_s_per_token


@pytest.mark.parametrize(("kind", "sched", "trainer_devices"),
                         [("colocated", {}, 16), ("disaggregated", {"rollout_devices": 8}, 8)])
def test_skipping_the_old_log_prob_pass_saves_exactly_it(kind, sched, trainer_devices):
    def steady(recompute):
        sc = scenario(kind, iterations=3, prompts=PROMPTS, n=N, mini=PROMPTS, recompute_logprob=recompute, **sched)
        return run(sc, resp=const(RESPONSE), prompt=const(PROMPT))[3]
    with_pass, without = steady(True), steady(False)
    pass_s = PROMPTS * N * (PROMPT + RESPONSE) * FORWARD_S_PER_TOKEN / trainer_devices
    assert with_pass["stage_time_s"]["old_logprob"] == pytest.approx(pass_s)
    assert "old_logprob" not in without["stage_time_s"]
    assert with_pass["steady_step_time_s"] - without["steady_step_time_s"] == pytest.approx(pass_s)


def test_one_step_off_leaves_the_pass_out_of_its_trainer():
    """One-step-off overlaps the trainer with the next round's generation: the pass leaves the
    trainer's stage times (the step itself is the longer side's)."""
    def stages(recompute):
        sc = scenario("one-step-off", iterations=3, prompts=PROMPTS, n=N, mini=PROMPTS, recompute_logprob=recompute,
                      rollout_devices=8)
        return run(sc, resp=const(RESPONSE), prompt=const(PROMPT))[3]["stage_time_s"]
    assert stages(True)["old_logprob"] > 0 and "old_logprob" not in stages(False)


def test_the_kinds_that_always_run_it_refuse_the_knob():
    with pytest.raises(RlsimError, match="recompute_logprob"):
        scenario("stalesync", recompute_logprob=False)
