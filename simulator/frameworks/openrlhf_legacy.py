"""OpenRLHF's flag names before 0.10 (flat: ``--colocate_all_models``, ``--pretrain``), read as 0.11.2's.

The table is OpenRLHF 0.9.10's train_ppo_ray.py argparse flags (read in its wheel: `pip download
--no-deps openrlhf==0.9.10`), each with the 0.11.2 flag that took its place; 0.9.10 places and runs
the models as 0.11.2 does (the same placement groups, colocation flags and async queue). Two
defaults differ and are taken from 0.9.10 when a script speaks its names: the forward and training
micro-batches (8 and 4 samples, 1 and 1 in 0.11.2). 0.8.11's --prompt_max_len / --generate_max_len
(read in its wheel) are 0.11.2's data.max_len (their sum) and rollout.max_new_tokens, its --bf16 param_dtype bf16.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# 0.9.10 flag -> the 0.11.2 flag(s) it became (a tuple: one old flag set two new ones).
LEGACY: dict[str, str | tuple[str, ...]] = {
    **{f"{role}_{k}": f"{role}.{k}" for role in ("ref", "reward", "actor", "critic")
       for k in ("num_nodes", "num_gpus_per_node")},
    "colocate_actor_ref": "train.colocate_actor_ref", "colocate_critic_reward": "train.colocate_critic_reward",
    "colocate_all_models": "train.colocate_all",
    **{f"vllm_{k}": f"vllm.{k}" for k in ("num_engines", "tensor_parallel_size", "sync_backend", "sync_with_ray",
                                          "enable_sleep", "gpu_memory_utilization")},
    "enable_prefix_caching": "vllm.enable_prefix_caching", "enforce_eager": "vllm.enforce_eager",
    "enable_vllm_is_correction": "algo.advantage.is_correction_level",
    "vllm_is_truncated_threshold": "algo.advantage.is_correction_threshold",
    "vllm_is_correction_type": "algo.advantage.is_correction_mode",
    "async_train": "train.async_enable", "async_queue_size": "train.async_queue_size",
    "partial_rollout": "train.partial_rollout_enable",
    "eval_steps": "eval.steps", "save_steps": "ckpt.save_steps", "logging_steps": "logger.logging_steps",
    "ckpt_path": "ckpt.path", "save_hf_ckpt": "ckpt.save_hf", "disable_ds_ckpt": "ckpt.disable_ds",
    "max_ckpt_num": "ckpt.max_num", "max_ckpt_mem": "ckpt.max_mem", "load_checkpoint": "ckpt.load_enable",
    "best_metric_key": "ckpt.best_metric_key", "use_ds_universal_ckpt": "ds.use_universal_ckpt",
    "save_path": "ckpt.output_dir",
    "zero_stage": "ds.zero_stage", "gradient_checkpointing": "actor.gradient_checkpointing_enable",
    "deepcompile": "ds.deepcompile", "param_dtype": "ds.param_dtype", "enable_ema": "train.enable_ema",
    "ema_beta": "train.ema_beta", "zpg": "ds.zpg", "adam_offload": "ds.adam_offload",
    "actor_init_on_gpu": "ds.actor_init_on_gpu", "attn_implementation": "ds.attn_implementation",
    "use_liger_kernel": "ds.use_liger_kernel", "grad_accum_dtype": "ds.grad_accum_dtype",
    "overlap_comm": "ds.overlap_comm", "gradient_checkpointing_use_reentrant": "actor.gradient_checkpointing_reentrant",
    "disable_fast_tokenizer": "data.disable_fast_tokenizer", "dataloader_num_workers": "data.dataloader_num_workers",
    "deepspeed_enable_sleep": "ds.enable_sleep", "ds_tensor_parallel_size": "ds.tensor_parallel_size",
    "packing_samples": "ds.packing_samples", "use_dynamic_batch": "train.dynamic_batch_enable",
    "rollout_max_tokens_per_gpu": "rollout.max_tokens_per_gpu", "train_max_tokens_per_gpu": "train.max_tokens_per_gpu",
    "load_in_4bit": "ds.load_in_4bit", "lora_rank": "ds.lora.rank", "lora_alpha": "ds.lora.alpha",
    "target_modules": "ds.lora.target_modules", "lora_dropout": "ds.lora.dropout",
    "num_episodes": "train.num_episodes", "rollout_batch_size": "rollout.batch_size",
    "vllm_generate_batch_size": "rollout.vllm_generate_batch_size", "micro_rollout_batch_size": "rollout.micro_batch_size",
    "max_epochs": "train.max_epochs", "max_len": "data.max_len", "max_new_tokens": "rollout.max_new_tokens",
    "max_samples": "data.max_samples", "max_norm": "actor.max_norm", "l2": "actor.adam.weight_decay",
    "ptx_coef": "actor.ptx_coef", "eps_clip": "actor.eps_clip", "eps_clip_low_high": "actor.eps_clip_low_high",
    "dual_clip": "actor.dual_clip", "value_clip": "critic.value_clip", "lambd": "algo.advantage.lambd",
    "gamma": "algo.advantage.gamma", "micro_train_batch_size": "train.micro_batch_size",
    "train_batch_size": "train.batch_size", "normalize_reward": "reward.normalize_enable", "top_p": "rollout.top_p",
    "temperature": "rollout.temperature", "seed": "train.seed", "full_determinism": "train.full_determinism_enable",
    "freezing_actor_steps": "critic.freezing_steps", "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "save_value_network": "critic.save_value_network", "actor_learning_rate": "actor.adam.lr",
    "critic_learning_rate": "critic.adam.lr", "lr_warmup_ratio": "actor.lr_warmup_ratio",
    "lr_scheduler": "actor.lr_scheduler", "kl_target": "algo.kl.target", "kl_horizon": "algo.kl.horizon",
    "init_kl_coef": "algo.kl.init_coef", "policy_loss_type": "actor.policy_loss_type",
    "kl_estimator": "algo.kl.estimator", "aux_loss_coef": "actor.aux_loss_coef",
    "entropy_loss_coef": "actor.entropy_coef", "adam_betas": "actor.adam.betas",
    "reward_clip_range": "reward.clip_range", "advantage_estimator": "algo.advantage.estimator",
    "use_kl_loss": "algo.kl.use_loss", "no_advantage_std_norm": "algo.advantage.no_std_norm",
    "overlong_buffer_len": "reward.overlong_buffer_len", "overlong_penalty_factor": "reward.overlong_penalty_factor",
    "stop_properly_penalty_coef": "reward.stop_properly_penalty_coef", "ring_attn_size": "ds.ring_attn_size",
    "ring_head_stride": "ds.ring_attn_head_stride", "pretrain": "actor.model_name_or_path",
    "reward_pretrain": "reward.model_name_or_path", "remote_rm_url": "reward.remote_url",
    "critic_pretrain": "critic.model_name_or_path", "value_head_prefix": "ds.value_head_prefix",
    "ref_reward_offload": ("ref.offload", "reward.offload"), "agent_func_path": "train.agent_func_path",
    "prompt_data": "data.prompt_dataset", "prompt_data_probs": "data.prompt_probs", "prompt_split": "data.prompt_split",
    "eval_dataset": "eval.dataset", "eval_split": "eval.split", "eval_temperature": "eval.temperature",
    "eval_n_samples_per_prompt": "eval.n_samples_per_prompt", "input_key": "data.input_key",
    "label_key": "data.label_key", "input_template": "data.input_template",
    "apply_chat_template": "data.apply_chat_template", "use_wandb": "logger.wandb.key",
    "wandb_org": "logger.wandb.org", "wandb_group": "logger.wandb.group", "wandb_project": "logger.wandb.project",
    "wandb_run_name": "logger.wandb.run_name", "dynamic_filtering": "algo.dynamic_filtering_enable",
    "dynamic_filtering_reward_range": "algo.dynamic_filtering_range", "use_tensorboard": "logger.tensorboard_dir",
    "perf": "logger.perf",
    # 0.8.11's length and precision flags, which 0.9 dropped (OpenRLHF's README scripts pass them): see
    # LEGACY_LENGTHS for the pair's total; --bf16, a switch there, is 0.11.2's param_dtype bf16
    "generate_max_len": "rollout.max_new_tokens", "prompt_max_len": "data.max_len", "bf16": "ds.param_dtype",
}
# 0.9.10's defaults where 0.11.2's differ (its argparse: micro_rollout_batch_size 8, micro_train_batch_size 4).
LEGACY_DEFAULTS: dict[str, Any] = {"rollout.micro_batch_size": 8, "train.micro_batch_size": 4}
# 0.9.10 switches whose 0.11.2 flag takes a value (or that 0.11.2 dropped).
LEGACY_SWITCHES = ("enable_vllm_is_correction", "actor_init_on_gpu", "perf", "ref_reward_offload", "bf16")
# 0.8.11's argparse defaults of its two length flags (train_ppo_ray.py: --prompt_max_len 1024, --generate_max_len
# 1024): its engines' max_len is --max_len if given, else their sum; the generation stops at generate_max_len
# (ppo_utils/experience_maker.py: max_tokens=max_new_tokens)
LEGACY_LENGTHS: dict[str, int] = {"prompt_max_len": 1024, "generate_max_len": 1024}


def legacy_arity(arity: Mapping[str, int | str]) -> dict[str, int | str]:
    """The values each 0.9.10 flag takes: its 0.11.2 flag's, or none for the switches above."""
    out: dict[str, int | str] = {name: 0 for name in LEGACY_SWITCHES}
    for old, new in LEGACY.items():
        if old not in out and isinstance(new, str) and new in arity:
            out[old] = arity[new]
    return out


def translated(flat: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The flags with each 0.9.10 name replaced by its 0.11.2 one (a 0.11.2 name given too wins),
    and the old names read."""
    out = {key: value for key, value in flat.items() if key not in LEGACY}
    old = [key for key in flat if key in LEGACY]
    for key in old:
        if key in LEGACY_LENGTHS or (key == "bf16" and not flat[key]):
            continue
        targets = LEGACY[key]
        for new in (targets,) if isinstance(targets, str) else targets:
            value = flat[key]
            if key == "enable_vllm_is_correction":   # 0.9's switch became a level (token: its TIS)
                value = "token" if value else "off"
            if key == "bf16":
                value = "bf16"
            out.setdefault(new, value)
    if any(key in flat for key in LEGACY_LENGTHS):
        lengths = {key: flat.get(key, default) for key, default in LEGACY_LENGTHS.items()}
        out.setdefault("rollout.max_new_tokens", lengths["generate_max_len"])
        out.setdefault("data.max_len", flat.get("max_len", lengths["prompt_max_len"] + lengths["generate_max_len"]))
    return out, old
