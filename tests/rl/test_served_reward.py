"""workload.reward.served in runs on the cost models: the reward model's engines on devices of their
own, priced as a prefill of each sample under the model's score head, and the trainer relieved of
its forward pass."""
import numpy as np
import pytest

import simulator
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model, with_value_head
from simulator.llm.inference import InferenceParams, RolloutLayout, StepCost, instance_device
from simulator.llm.served import ServedScoring
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

from .test_distillation import SMALL as DISTILLATION_SMALL
from .test_distillation import _run as _small_run

REWARD_MODEL = ["workload.reward.kind=model", "workload.reward.model=qwen2.5-7b"]
SMALL = {**DISTILLATION_SMALL, "overrides": DISTILLATION_SMALL["overrides"] + REWARD_MODEL}
SERVED = ["workload.reward.served.devices=8", "workload.reward.served.layout.tp=2"]


def _run(*overrides: str, schedule: str = "colocated", nodes: int = 2) -> dict:
    """test_distillation's small run, scored by a Qwen2.5-7B reward model."""
    return _small_run(*REWARD_MODEL, *overrides, schedule=schedule, nodes=nodes)


def test_the_reward_model_runs_on_its_own_engines_and_not_on_the_trainer():
    on_trainer = _run(nodes=1)
    served = _run(*SERVED)
    pool = served["reward_model_pool"]
    assert (pool["devices"], pool["engines"]) == (8, 4)
    assert served["pools"]["reward_model"] == 8 and served["pools"]["actor"] == 8
    assert 0 < pool["busy_s"] <= served["makespan_s"]
    assert served["stage_time_s"]["reward"] > 0
    # the trainer no longer runs the reward forward, and the scoring overlaps generation
    assert served["steady_step_time_s"] < on_trainer["steady_step_time_s"]


def test_a_served_sample_costs_a_prefill_under_the_score_head_without_a_log_probability_pass():
    """LlmCosts prices the pool as ServedScoring on the reward model under its value head, on the
    engine layout and constants given, with no log-probability pass (bytes per logit 0)."""
    sc = load_scenario({"topology": {"preset": "dgx-h100", "nodes": 2}, "workload": "grpo-qwen2.5-7b"},
                       overrides=SMALL["overrides"][3:] + SERVED + ["workload.reward.served.inference.enforce_eager=true"])
    topology = load_topology(sc.topology)
    costs = LlmCosts(sc, topology)
    ranks = range(8, 16)
    prompt, response = np.array([300, 1000]), np.array([2000, 50])
    got = costs.served("reward_model", prompt, response, ranks)
    params = InferenceParams.model_validate({**costs.inference_params.model_dump(), "enforce_eager": True})
    step = StepCost(with_value_head(load_model("qwen2.5-7b")), instance_device(topology, [8, 9]),
                    RolloutLayout(tp=2), params, collectives=costs.collectives, ranks=[8, 9])
    want = ServedScoring(step, 4, 0.0).each(prompt, response)
    assert got.pool_s == pytest.approx(want.pool_s, rel=1e-12) and got.alone_s == pytest.approx(want.alone_s, rel=1e-12)
    assert costs.served_instance_devices("reward_model") == 2
    with pytest.raises(ValueError, match="serves no teacher"):
        costs.served_instance_devices("teacher")


def test_the_reward_model_and_a_teacher_take_the_last_devices_in_verls_order():
    summary = _run(*SERVED, "workload.distillation.teacher=qwen2.5-32b", "workload.distillation.devices=8",
                   "workload.distillation.layout.tp=4", nodes=3)
    assert list(summary["pools"])[-2:] == ["reward_model", "teacher"]
    assert summary["reward_model_pool"]["busy_s"] > 0 and summary["teacher_pool"]["busy_s"] > 0


@pytest.mark.parametrize("schedule", ["colocated", "one-step-off", "verl-fully-async"])
def test_the_critical_path_is_the_same_walked_online_or_after_the_run(schedule):
    """The reward model's rows, recorded at the run's end, never explain a wait."""
    small = {**SMALL, "overrides": SMALL["overrides"] + SERVED}
    online = simulator.simulate(schedule=schedule, keep_samples=False, **small).summary["critical_path"]
    offline = simulator.simulate(schedule=schedule, keep_samples=True, **small).summary["critical_path"]
    assert online["steady"] == offline["steady"]


def test_a_sample_longer_than_the_reward_models_kv_cache_is_refused_by_its_layout():
    with pytest.raises(RlsimError, match="the reward model's KV cache") as err:
        _run(*SERVED, "workload.reward.served.layout.gpu_memory_utilization=0.2",
             "workload.response_length={dist: lognormal, median: 400000, sigma: 0.1, max: 500000}")
    assert err.value.field == "workload.reward.served.layout"


def test_the_console_shows_the_reward_model_pool_in_run_and_compare(capsys, tmp_path):
    from simulator.cli import main
    scenario = tmp_path / "rm.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: {model: qwen2.5-7b, prompts_per_step: 16, "
                        "samples_per_prompt: 4, mini_batch_prompts: 16, train_layout: {tp: 2, recompute: full}, "
                        # (0.8: vLLM's default 0.9 leaves no room for the actor's and the reference's weights)
                        "rollout_layout: {tp: 2, gpu_memory_utilization: 0.8}, reward: {kind: model, handover: batch, served: {devices: 8, layout: {tp: 2}}}}\n")
    assert main(["run", str(scenario), "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert "reward model pool busy (4 engines)" in out and "stage: reward" in out
    assert "of which for the reward model" in out
    assert main(["compare", str(scenario), "--iterations", "2", "--schedules", "colocated,one-step-off"]) == 0
    out = capsys.readouterr().out
    assert "reward model pool" in out and "reward_model 8" in out


def test_a_reward_model_woken_on_the_trainers_devices_costs_its_scoring_and_its_sleep_and_wake():
    """reward.served without devices (verl 0.9's colocated reward model): the reward stage on the
    trainer's devices is the batch on engines over those devices (its pool time, no less than its
    longest sample) plus served.sleep_wake_s plus the weight shard to host and back."""
    over = SMALL["overrides"][3:] + ["workload.reward.served.layout.tp=2"]
    topology_spec = {"preset": "dgx-h100", "nodes": 1}
    plain = load_scenario({"topology": topology_spec, "workload": "grpo-qwen2.5-7b"}, overrides=over)
    later = load_scenario({"topology": topology_spec, "workload": "grpo-qwen2.5-7b"},
                          overrides=[*over, "workload.reward.served.sleep_wake_s=5"])
    topology = load_topology(plain.topology)
    lens = np.array([1200, 3000, 800, 2500] * 8)
    woken = LlmCosts(plain, topology).forward("reward", lens, range(8))
    slower = LlmCosts(later, topology).forward("reward", lens, range(8))
    assert slower.time_s - woken.time_s == pytest.approx(5.0 - 11.3)      # vLLM's measured 11.3 s by default
    costs = LlmCosts(plain, topology)
    scoring = costs.served("reward_model", lens, np.zeros(len(lens), np.int64), range(8))
    shard = with_value_head(load_model("qwen2.5-7b")).weight_bytes(2.0) / 2
    link = float(topology.host_copy_Bps(range(8), costs.switch_params.host_link_efficiency).min())
    assert woken.time_s == pytest.approx(max(scoring.pool_s.sum(), scoring.alone_s.max()) + 11.3 + 2 * shard / link)
    assert woken.flops == pytest.approx(scoring.flops.sum())
    summary = simulator.simulate(load_scenario(plain, iterations=2), keep_samples=False).summary
    assert "reward_model" not in summary["pools"] and summary["stage_time_s"]["reward"] > 11.3


def test_a_reward_model_on_the_trainers_devices_takes_no_handover_and_sleeps_only_there():
    base = {"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4}}
    for reward, message in (({"kind": "model", "served": {}, "handover": "sample"}, "handover applies to a reward"),
                            ({"kind": "model", "served": {"devices": 4, "sleep_wake_s": 2}}, "sleep_wake_s applies")):
        with pytest.raises(RlsimError, match=message):
            load_scenario({**base, "workload": {**base["workload"], "reward": reward}})


def test_a_reward_model_woken_on_fewer_devices_than_an_engine_is_refused_by_its_layout():
    sc = load_scenario({"topology": {"preset": "dgx-h100", "nodes": 1}, "workload": "grpo-qwen2.5-7b"},
                       overrides=SMALL["overrides"][3:] + ["workload.reward.served.layout.tp=4"])
    with pytest.raises(RlsimError, match="take 4 devices") as err:
        LlmCosts(sc, load_topology(sc.topology)).forward("reward", np.array([1000, 2000]), range(2))
    assert err.value.field == "workload.reward.served.layout"


def test_a_reward_model_woken_beside_the_resident_training_state_must_fit_in_memory():
    """Its engines' share of HBM plus what training keeps on the devices through the phase (the rollout
    engine asleep) must fit: past it an error names the share that fits; at that share it runs."""
    over = SMALL["overrides"][3:] + ["workload.reward.served.layout.tp=2"]
    spec = {"topology": {"preset": "dgx-h100", "nodes": 1}, "workload": "grpo-qwen2.5-7b"}
    lens = np.array([1200, 3000, 800, 2500] * 8)

    def reward(share: float):
        sc = load_scenario(spec, overrides=[*over, f"workload.reward.served.layout.gpu_memory_utilization={share}"])
        return LlmCosts(sc, load_topology(sc.topology)).forward("reward", lens, range(8))

    with pytest.raises(RlsimError, match="woken on the trainer's devices") as err:
        reward(0.95)
    assert err.value.field == "workload.reward.served.layout.gpu_memory_utilization"
    fits = float(err.value.fix.split("<= ")[1].split(" ")[0])
    assert 0.3 < fits < 0.95 and reward(fits - 0.01).time_s > 0


def test_a_reward_model_woken_on_two_device_kinds_is_checked_on_each_with_its_own_shares(tmp_path):
    """The resident rollout engine's share of the largest kind's HBM (an H200's 141 GiB) was added to
    the smallest kind's (an H100's 80 GiB): a pool where each kind fits was refused (an audit). Each
    kind is now checked with its own shares, and the error names the kind that binds."""
    path = tmp_path / "h100-h200.yaml"
    path.write_text("name: h100-h200\ndevices_per_node: 8\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  h100: {device: h100, nodes: 1}\n  h200: {device: h200, nodes: 1}\n")
    over = SMALL["overrides"][3:] + ["workload.reward.served.layout.tp=2", "schedule.switch.engine_sleep=false",
                                     "schedule.switch.engine_resident=true"]
    lens = np.array([1200, 3000, 800, 2500] * 8)

    def reward(engine_share: float, reward_share: float):
        sc = load_scenario({"topology": str(path), "workload": "grpo-qwen2.5-7b"}, overrides=[
            *over, f"workload.rollout_layout.gpu_memory_utilization={engine_share}",
            f"workload.reward.served.layout.gpu_memory_utilization={reward_share}"])
        return LlmCosts(sc, load_topology(sc.topology)).forward("reward", lens, range(16))

    assert reward(0.4, 0.4).time_s > 0   # 0.8 of each kind's HBM + ~8 GB of training state
    with pytest.raises(RlsimError, match="on h100's 85.9 GB") as err:
        reward(0.5, 0.45)
    fits = float(err.value.fix.split("<= ")[1].split(" ")[0])
    assert 0.3 < fits < 0.45 and reward(0.5, fits - 0.01).time_s > 0
