"""verl's optimizer choice (actor.optim / critic.optim: optimizer, optimizer_impl) as the optimizer
state's bytes and its step's traffic (simulator/frameworks/verl_optimizer.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.params import TrainParams
from simulator.rl.llm_costs import critic_train_params
from simulator.scenario import CriticOptimizerSpec, load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
CFG = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
ACTOR = "actor_rollout_ref.actor"
PPO = ["algorithm.adv_estimator=gae", "+critic.model.path=Qwen/Qwen2.5-7B", "+critic.ppo_micro_batch_size_per_gpu=4"]


def _train_params(*overrides: str) -> dict:
    return import_config("verl", CFG, list(overrides)).scenario["workload"]["train_params"]


def test_torch_adamw_keeps_m_and_v_in_the_fp32_shard_and_steps_28_bytes():
    # master read + written (2 x 4), gradient read (4), m and v read and written (2 x 8)
    train = _train_params()
    assert train["memory"]["optimizer_bytes_per_param"] == 8.0
    assert train["comm"]["optimizer_traffic_bytes_per_param"] == 2 * 4 + 4 + 2 * 8
    bf16 = _train_params(f"{ACTOR}.fsdp_config.model_dtype=bf16")
    assert bf16["memory"]["optimizer_bytes_per_param"] == 4.0
    assert bf16["comm"]["optimizer_traffic_bytes_per_param"] == 2 * 2 + 2 + 2 * 4


@pytest.mark.parametrize(("impl", "name", "state"), [
    ("bitsandbytes.optim", "AdamW8bit", 2 * (1 + 4 / 256)),     # uint8 m, v and an fp32 absmax per 256
    ("torchao.optim", "AdamW8bit", 2 * (1 + 4 / 256)),          # uint8 codes, an fp32 scale per 256
    ("torchao.optim", "AdamW4bit", 2 * (0.5 + 4 / 128)),        # packed 4-bit codes, an fp32 scale per 128
    ("torchao.optim", "AdamWFp8", 2 * (1 + 4 / 256)),
    ("torchao.optim", "_AdamW", 8.0),                            # zeros_like the fp32 shard
    ("bitsandbytes.optim", "AdamW", 8.0),                        # optim_bits 32
    ("torch.optim", "SGD", 0.0),                                 # verl passes no momentum
])
def test_each_known_optimizer_sizes_its_state_and_step(impl, name, state):
    train = _train_params(f"{ACTOR}.optim.optimizer_impl={impl}", f"{ACTOR}.optim.optimizer={name}")
    assert train["memory"]["optimizer_bytes_per_param"] == pytest.approx(state)
    assert train["comm"]["optimizer_traffic_bytes_per_param"] == pytest.approx(2 * 4 + 4 + 2 * state)


def test_eight_bit_adam_frees_the_state_it_does_not_keep():
    """The training state of the run: 8-bit Adam holds 8 - 2.03125 B a parameter less (over the FSDP
    shard of the 7B model on 8 GPUs) than torch's AdamW, and its step streams fewer bytes."""
    from simulator.api import simulate
    base = simulate(import_config("verl", CFG).scenario, iterations=1, keep_samples=False).summary
    eight = simulate(import_config("verl", CFG, [f"{ACTOR}.optim.optimizer_impl=bitsandbytes.optim",
                                                 f"{ACTOR}.optim.optimizer=AdamW8bit"]).scenario,
                     iterations=1, keep_samples=False).summary
    params = 7_615_616_512   # Qwen2.5-7B
    freed = base["peak_memory_by_phase"]["train"] - eight["peak_memory_by_phase"]["train"]
    assert freed == pytest.approx(params / 8 * (8 - 2 * (1 + 4 / 256)), rel=0.02)
    assert eight["stage_time_s"]["train_actor"] < base["stage_time_s"]["train_actor"]


def test_an_unknown_optimizer_is_refused_naming_its_key():
    with pytest.raises(RlsimError, match="torch.optim.Lion") as info:
        import_config("verl", CFG, [f"{ACTOR}.optim.optimizer=Lion"])
    assert info.value.field == f"{ACTOR}.optim.optimizer" and "bitsandbytes.optim.AdamW8bit" in info.value.fix
    with pytest.raises(RlsimError) as info:
        import_config("verl", CFG, [f"{ACTOR}.optim.optimizer_impl=apex.optimizers"])
    assert info.value.field == f"{ACTOR}.optim.optimizer_impl"


def test_megatron_sgd_keeps_a_momentum_beside_its_main_parameters():
    megatron = [f"{ACTOR}.strategy=megatron"]
    assert "comm" not in _train_params(*megatron)        # Adam: rlsim's 12 and 30
    train = _train_params(*megatron, f"{ACTOR}.optim.optimizer=sgd")
    assert train["memory"]["optimizer_bytes_per_param"] == 8.0            # fp32 main params + momentum
    assert train["comm"]["optimizer_traffic_bytes_per_param"] == 2 + 4 + 2 * 8
    with pytest.raises(RlsimError, match="Megatron-Core") as info:
        import_config("verl", CFG, [*megatron, f"{ACTOR}.optim.optimizer=AdamW8bit"])
    assert info.value.field == f"{ACTOR}.optim.optimizer"


def test_overrides_that_change_the_state_are_listed_unsupported():
    r = import_config("verl", CFG, [f"+{ACTOR}.optim.override_optimizer_config.amsgrad=true",
                                    f"+{ACTOR}.optim.override_optimizer_config.eps=1e-6"])
    assert f"{ACTOR}.optim.override_optimizer_config.amsgrad" in r.unsupported
    assert f"{ACTOR}.optim.override_optimizer_config.eps" in r.ignored


MEGATRON_091 = Path(__file__).resolve().parent / "data" / "verl-0.9.1-generated-ppo-megatron-trainer.yaml"
QUICK_091 = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
             f"{ACTOR}.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
             "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.name=vllm",
             "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "data.train_batch_size=256",
             f"{ACTOR}.ppo_mini_batch_size=64", "trainer.n_gpus_per_node=1"]


@pytest.mark.parametrize("section", [f"{ACTOR}.optim", "critic.optim"])
def test_megatrons_precision_aware_optimizer_is_listed_unsupported_not_read_past(section):
    """verl 0.9.1's McoreOptimizerConfig.use_precision_aware_optimizer hands bf16 moments / main gradients
    to Megatron-Core (utils/megatron/optimizer.py): not rlsim's fp32 state, so listed unsupported; its
    dtypes are read with it on only; at verl's defaults (False, fp32) both are ignored."""
    default = import_config("verl", MEGATRON_091, QUICK_091)
    assert f"{section}.use_precision_aware_optimizer" in default.ignored
    assert f"{section}.exp_avg_dtype" in default.ignored and not default.unsupported
    on = import_config("verl", MEGATRON_091, [*QUICK_091, f"{section}.use_precision_aware_optimizer=true",
                                              f"{section}.exp_avg_dtype=bf16", f"{section}.main_grads_dtype=bf16"])
    assert set(on.unsupported) == {f"{section}.use_precision_aware_optimizer"}
    assert "precision-aware" in on.unsupported[f"{section}.use_precision_aware_optimizer"]
    assert "use_precision_aware_optimizer true only" in on.ignored[f"{section}.exp_avg_dtype"]


def test_the_critic_takes_its_own_optimizer_where_it_differs():
    same = import_config("verl", CFG, PPO).scenario["workload"]
    assert "critic_optimizer" not in same
    imported = import_config("verl", CFG, [*PPO, "+critic.optim.optimizer_impl=torchao.optim",
                                           "+critic.optim.optimizer=AdamW4bit"])
    own = imported.scenario["workload"]
    state = 2 * (0.5 + 4 / 128)
    assert own["critic_optimizer"] == {"optimizer_bytes_per_param": state,
                                       "optimizer_traffic_bytes_per_param": 2 * 4 + 4 + 2 * state}
    assert own["train_params"]["memory"]["optimizer_bytes_per_param"] == 8.0   # the actor's stays
    assert "workload.critic_optimizer" in imported.mapped["critic.optim.optimizer"]
    load_scenario(imported.scenario)


def test_critic_train_params_takes_the_critic_optimizer():
    actor = TrainParams()
    critic = critic_train_params(actor, None, CriticOptimizerSpec(optimizer_bytes_per_param=1.0,
                                                                  optimizer_traffic_bytes_per_param=14.0))
    assert critic.memory.optimizer_bytes_per_param == 1.0 and critic.comm.optimizer_traffic_bytes_per_param == 14.0
    assert actor.memory.optimizer_bytes_per_param == 12.0          # the actor's constants untouched
    assert critic_train_params(actor, None, None) is actor


def test_critic_optimizer_needs_ppo():
    sc = import_config("verl", CFG).scenario
    sc["workload"]["critic_optimizer"] = {"optimizer_bytes_per_param": 2.0}
    with pytest.raises(RlsimError, match="ppo"):
        load_scenario(sc)


def test_megatrons_cpu_offloaded_optimizer_is_mapped_as_nemo_rls_where_verl_builds_it():
    """actor.optim.override_optimizer_config.optimizer_cpu_offload under megatron: verl hands it to
    Megatron-Core's OptimizerConfig (init_megatron_optim_config), which builds the HybridDeviceOptimizer
    NeMo RL's optimizer_cpu_offload builds: the same train_params.offload (scope optimizer_step, the
    share offloaded). Megatron's default share 0.0 offloads nothing (a note); under fsdp the torch
    optimizer's constructor takes no such argument, and beside verl's per-phase offload rlsim has no
    second scope: both unsupported, the offload left as it was."""
    key = f"{ACTOR}.optim.override_optimizer_config"
    megatron = [f"{ACTOR}.strategy=megatron", f"+{key}.optimizer_cpu_offload=true"]
    r = import_config("verl", CFG, [*megatron, f"+{key}.optimizer_offload_fraction=0.5"])
    offload = r.scenario["workload"]["train_params"]["offload"]
    nemo_cfg = EXAMPLES / "nemo-rl-grpo-llama3.1-8b.yaml"
    opt = "policy.megatron_cfg.optimizer"
    nemo = import_config("nemo-rl", nemo_cfg, [f"{opt}.optimizer_cpu_offload=true", f"+{opt}.optimizer_offload_fraction=0.5"])
    assert offload == nemo.scenario["workload"]["train_params"]["offload"] == {
        "optimizer": True, "scope": "optimizer_step", "optimizer_fraction": 0.5}
    assert f"{key}.optimizer_cpu_offload" in r.mapped and f"{key}.optimizer_offload_fraction" in r.mapped
    load_scenario(r.scenario)
    default = import_config("verl", CFG, megatron)
    assert default.scenario["workload"]["train_params"]["offload"] == {"optimizer": False}
    assert any("nothing is offloaded" in note for note in default.notes)
    fsdp = import_config("verl", CFG, [f"+{key}.optimizer_cpu_offload=true"])
    assert "constructor" in fsdp.unsupported[f"{key}.optimizer_cpu_offload"]
    assert "scope" not in fsdp.scenario["workload"]["train_params"]["offload"]   # the example's per-phase keys alone
    both = import_config("verl", CFG, [*megatron, f"+{ACTOR}.megatron.optimizer_offload=true"])
    assert "one scope" in both.unsupported[f"{key}.optimizer_cpu_offload"]
    assert both.scenario["workload"]["train_params"]["offload"] == {"optimizer": True, "pageable": True}
