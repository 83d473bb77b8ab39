"""Megatron-Core's DistributedDataParallelConfig keys as verl's actor.megatron.override_ddp_config passes
them (simulator/frameworks/megatron_ddp.py; Megatron-Core 0.13.0 distributed/distributed_data_parallel*.py):
overlap_grad_reduce as the megatron-core-overlap stack's gradient side, bucket_size as its bucket."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.params import MCORE_DDP_BUCKET_MIN_PARAMS, MEGATRON_CORE_OVERLAP

CFG = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
DDP = "actor_rollout_ref.actor.megatron.override_ddp_config"
MEGATRON = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2"]


def _import(*ddp: str, base: list[str] = MEGATRON):
    return import_config("verl", CFG, [*base, *(f"+{DDP}.{kv}" for kv in ddp)])


def _comm(result) -> dict:
    return result.scenario["workload"].get("train_params", {}).get("comm", {})


def test_overlap_grad_reduce_true_is_the_overlap_stacks_gradient_side():
    result = _import("overlap_grad_reduce=true")
    stack = MEGATRON_CORE_OVERLAP.params.comm
    assert _comm(result) == {"dp_overlap_fraction": stack.dp_overlap_fraction,
                             "dp_bucket_min_params": stack.dp_bucket_min_params}
    assert "tp_overlap_fraction" not in _comm(result) and "tp_userbuffers" not in _comm(result)
    assert result.report()["mapped"][f"{DDP}.overlap_grad_reduce"].startswith(
        "workload.train_params.comm.dp_overlap_fraction")
    # overlap_param_gather left out (Megatron-Core's False): rlsim hides the gather as the reduction, said so
    assert any(n.startswith(f"{DDP}.overlap_param_gather false") for n in result.notes)


@pytest.mark.parametrize("ddp", [[], ["overlap_grad_reduce=false"]])
def test_overlap_grad_reduce_false_or_absent_is_verls_default_nothing_written(ddp):
    assert _comm(_import(*ddp)) == {}


def test_bucket_size_is_the_bucket_with_overlap_and_dropped_without():
    assert _comm(_import("overlap_grad_reduce=true", "bucket_size=10000000")) == {
        "dp_overlap_fraction": 1.0, "dp_bucket_min_params": 10_000_000, "dp_bucket_params_per_rank": 0}
    without = _import("bucket_size=10000000")
    assert _comm(without) == {} and f"{DDP}.bucket_size" in without.report()["ignored"]
    with pytest.raises(RlsimError) as info:
        _import("overlap_grad_reduce=true", "bucket_size=-3")
    assert info.value.field == f"{DDP}.bucket_size"
    assert MCORE_DDP_BUCKET_MIN_PARAMS == 40_000_000   # Megatron-Core 0.13: max(40000000, 1000000 x dp)


def test_overlap_param_gather_is_taken_equal_to_overlap_grad_reduce():
    report = _import("overlap_grad_reduce=true", "overlap_param_gather=true").report()
    assert f"{DDP}.overlap_param_gather" in report["ignored"]
    assert not any("overlap_param_gather false" in n for n in report["notes"])
    alone = _import("overlap_param_gather=true").report()   # rlsim would expose the gather: not modelled
    assert f"{DDP}.overlap_param_gather" in alone["unsupported"]
    assert f"{DDP}.overlap_param_gather" in _import("overlap_param_gather=false").report()["ignored"]
    # without the distributed optimizer there is no weight gather
    no_zero = _import("use_distributed_optimizer=false", "overlap_param_gather=true").report()
    assert f"{DDP}.overlap_param_gather" in no_zero["ignored"]


def test_use_distributed_optimizer_replaces_the_megatron_sections_own():
    assert _import("use_distributed_optimizer=false").scenario["workload"]["train_layout"]["zero"] == 0
    on = _import("use_distributed_optimizer=true", base=[*MEGATRON,
                                                         "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false"])
    assert on.scenario["workload"]["train_layout"]["zero"] == 1
    assert on.report()["mapped"][f"{DDP}.use_distributed_optimizer"].startswith("workload.train_layout.zero")


@pytest.mark.parametrize("key", ["average_in_collective", "check_for_nan_in_grad", "check_for_large_grads"])
def test_keys_without_time_are_ignored(key):
    assert f"{DDP}.{key}" in _import(f"{key}=true").report()["ignored"]


def test_overlap_grad_reduce_shortens_the_training_step_across_nodes():
    """2 nodes x 8 GPUs at TP 4: DP 4 over the nodes' network, the gradient reduce-scatter hides under
    the last micro-batch's backward, all but one bucket."""
    from simulator.api import simulate
    base = ["trainer.nnodes=2", "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=4"]
    times = [simulate(_import(*ddp, base=base).scenario, iterations=1, keep_samples=False
                      ).summary["stage_time_s"]["train_actor"] for ddp in ([], ["overlap_grad_reduce=true"])]
    assert times[1] < times[0]


REF_DDP, CRITIC_DDP = "actor_rollout_ref.ref.megatron.override_ddp_config", "critic.megatron.override_ddp_config"
PPO = [*MEGATRON, "critic.strategy=megatron", "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"]


@pytest.mark.parametrize("actor", [[], ["overlap_grad_reduce=true"]])
def test_the_references_ddp_overrides_are_never_read(actor):
    """verl 0.6.0 builds the reference without a DDP wrapper (megatron_workers.py wrap_with_ddp=False; the
    engine worker's forward_only likewise): its override_ddp_config is ignored, equal to the actor's or not."""
    result = _import(*actor, base=[*MEGATRON, f"+{REF_DDP}.overlap_grad_reduce=true", f"+{REF_DDP}.bucket_size=1000"])
    for key in ("overlap_grad_reduce", "bucket_size"):
        assert "builds no DDP" in result.ignored[f"{REF_DDP}.{key}"]
    assert _comm(result) == _comm(_import(*actor))


def test_the_critics_ddp_overrides_are_the_actors_where_equal_else_unsupported():
    """rlsim prices the critic's gradient sync with the actor's train_params.comm and layout
    (rl/llm_costs.py critic_train_params): a critic key equal to the actor's effective value (given, or
    verl's ddp_config_dict default) takes the actor key's status; one unlike it is unsupported, said so."""
    equal = _import("overlap_grad_reduce=true", base=[*PPO, f"+{CRITIC_DDP}.overlap_grad_reduce=true"])
    assert f"{CRITIC_DDP}.overlap_grad_reduce" in equal.mapped
    default = _import(base=[*PPO, f"+{CRITIC_DDP}.overlap_grad_reduce=false", f"+{CRITIC_DDP}.grad_reduce_in_fp32=true"])
    assert {f"{CRITIC_DDP}.overlap_grad_reduce", f"{CRITIC_DDP}.grad_reduce_in_fp32"} <= set(default.mapped)
    unlike = _import(base=[*PPO, f"+{CRITIC_DDP}.overlap_grad_reduce=true", f"+{CRITIC_DDP}.bucket_size=1000"])
    for key in ("overlap_grad_reduce", "bucket_size"):
        assert "the actor's DDP settings" in unlike.unsupported[f"{CRITIC_DDP}.{key}"]
    assert _comm(unlike) == _comm(_import(base=PPO))
    no_critic = _import(base=[*MEGATRON, f"+{CRITIC_DDP}.overlap_grad_reduce=true"])
    assert "no critic" in no_critic.ignored[f"{CRITIC_DDP}.overlap_grad_reduce"]
