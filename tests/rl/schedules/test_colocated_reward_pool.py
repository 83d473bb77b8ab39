"""A colocated step's reward model on devices of its own (schedule.aux_devices {reward: N}: verl's
reward_pool): the driver hands the batch over and waits, so the forwards are the reward model's pass
on its pool and then the actor's own passes, one after the other; every device's time is accounted."""
import numpy as np
import pytest

from simulator.api import simulate
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.metrics import per_device_time
from simulator.scenario import load_scenario

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16",
         "workload.reward.kind=model"]
BASE = {"workload": "grpo-qwen2.5-7b", "topology": {"preset": "dgx-h100", "nodes": 2}, "schedule": "colocated",
        "iterations": 1}


def _run(*extra: str):
    return simulate(**BASE, overrides=[*SMALL, *extra])


def test_the_reward_models_pass_runs_on_its_pool_before_the_actors_passes():
    r = _run("schedule.aux_devices={reward: 8}")
    s = r.summary
    assert s["pools"] == {"actor": 8, "aux-reward": 8}
    (it,) = r.record.iterations
    stages = s["stage_time_s"]
    # in turn, not side by side: fetch, the reward model's pass, then the old log-prob and reference passes
    assert it["forwards_end"] - it["start"] == pytest.approx(
        stages["fetch"] + stages["reward"] + stages["old_logprob"] + stages["reference"])
    tl = r.timeline
    scored = tl[(tl["pool"] == "aux-reward") & (tl["state"] == "forward")]
    assert set(scored["label"]) == {"reward"} and (scored["rank_start"] == 8).all()
    assert np.allclose(per_device_time(tl, s["devices"]), s["makespan_s"])
    assert s["verl_timing_s"]["reward"] == pytest.approx(stages["reward"])   # verl's timer: the pass, once


def test_a_smaller_pool_scores_slower_and_the_actor_keeps_the_rest():
    eight, two = _run("schedule.aux_devices={reward: 8}"), _run("schedule.aux_devices={reward: 2}")
    assert two.summary["pools"] == {"actor": 14, "aux-reward": 2}
    assert two.summary["stage_time_s"]["reward"] > 2 * eight.summary["stage_time_s"]["reward"]


@pytest.mark.parametrize(("item", "words"), [
    ("schedule.aux_devices=8", "reward model's pool alone"),
    ("schedule.aux_devices={reference: 8}", "reward model's pool alone"),
    ("schedule.aux_devices={reward: 3}", "not whole replicas"),
])
def test_what_a_colocated_step_cannot_set_apart_is_refused(item, words):
    with pytest.raises(RlsimError, match=words) as err:
        _run(item)
    assert err.value.field.startswith("schedule.aux_devices")


def test_fuse_actor_keeps_its_own_aux_pool():
    with pytest.raises(RlsimError, match="fuse: actor has its own aux pool"):
        load_scenario(**BASE, overrides=[*SMALL, "schedule.fuse=actor", "schedule.aux_devices={reward: 8}"])


def test_verls_legacy_reward_model_on_its_resource_pool():
    """verl 0.6's reward_model.enable_resource_pool: the reward_pool beside the job's GPUs, as
    schedule.aux_devices {reward: nnodes x n_gpus_per_node}; the topology holds both."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
    rm = ["reward_model.enable=true", "reward_model.model.path=Qwen/Qwen2.5-7B-Instruct"]
    pooled = import_config("verl", example, [*rm, "reward_model.enable_resource_pool=true", "reward_model.nnodes=1",
                                             "reward_model.n_gpus_per_node=8"])
    assert pooled.scenario["schedule"]["aux_devices"] == {"reward": 8}
    assert "reward_model.enable_resource_pool" in pooled.mapped
    plain = import_config("verl", example, rm)
    topology = (pooled.scenario["topology"], plain.scenario["topology"])
    assert load_scenario(pooled.scenario).schedule.aux_devices == {"reward": 8}
    assert topology[0]["nodes"] == topology[1]["nodes"] + 1   # a node for the reward pool
    with pytest.raises(RlsimError) as err:
        import_config("verl", example, [*rm, "reward_model.enable_resource_pool=true", "reward_model.nnodes=0",
                                        "reward_model.n_gpus_per_node=8"])
    assert err.value.field == "reward_model.nnodes"
    with pytest.raises(RlsimError) as err:   # verl's default 0 GPUs a node: main_ppo refuses it first
        import_config("verl", example, [*rm, "reward_model.enable_resource_pool=true", "reward_model.nnodes=1"])
    assert err.value.field == "reward_model.n_gpus_per_node"
