"""TRL's key table for `--from-trl`: every field of GRPOConfig (over transformers' TrainingArguments),
ModelConfig and the grpo script's arguments, the keys its CLI hands to `accelerate launch`, the
accelerate config's keys (``accelerate.*``) and `trl vllm-serve`'s (``vllm_serve.*``), as data.

Names and defaults as in trl 1.16.0 (trl/trainer/grpo_config.py, base_config.py, model_config.py,
scripts/grpo.py, scripts/utils.py, scripts/vllm_serve.py) and transformers 5.25.0
(training_args.py), read in their wheels.
"""
from __future__ import annotations

from typing import Any

from .common import OPTIMIZER_SETTINGS, SAMPLING_SETTINGS, Rule, ignored, mapped, unsupported

DEFAULTS_SOURCE = "TRL 1.16.0's dataclass defaults"
# `trl rloo` (RLOOConfig, trl/trainer/rloo_config.py, 1.16.0) against `trl grpo` (GRPOConfig): the same
# fields and generation loop but for these; its defaults that differ; the fields GRPOConfig alone has.
RLOO_ONLY_KEYS = ("normalize_advantages", "reward_clip_range")
RLOO_DEFAULTS: dict[str, Any] = {"beta": 0.05, "num_generations": 2}
GRPO_ONLY_KEYS = (
    "cast_lm_head_to_fp32", "delta", "entropy_coef", "entropy_coef_delta", "entropy_coef_max", "entropy_coef_min",
    "entropy_target", "importance_sampling_level", "log_completions_hub_repo", "loss_type",
    "max_tool_calling_iterations", "multi_objective_aggregation", "off_policy_mask_threshold", "sapo_temperature_neg",
    "sapo_temperature_pos", "scale_rewards", "top_entropy_quantile", "use_adaptive_entropy", "use_bias_correction_kl",
    "vespo_k_neg", "vespo_k_pos", "vespo_lambda_neg", "vespo_lambda_pos", "vllm_importance_sampling_cap",
    "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode")
# TRL's defaults for the keys rlsim reads when a config leaves them out.
DEFAULTS: dict[str, Any] = {
    "model_name_or_path": None, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "num_generations": 8, "max_completion_length": 512, "generation_batch_size": None, "steps_per_generation": None,
    "use_vllm": False, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False, "vllm_gpu_memory_utilization": 0.3,
    "vllm_tensor_parallel_size": 1, "vllm_max_model_length": None, "beta": 0.0, "num_iterations": 1,
    "vllm_importance_sampling_correction": True, "gradient_checkpointing": True, "bf16": None, "fp16": False,
    "use_peft": False, "lora_r": 16, "lora_target_modules": None, "reward_funcs": None,
    "reward_model_name_or_path": None, "attn_implementation": None, "use_liger_kernel": False,
    "vllm_serve.tensor_parallel_size": 1, "vllm_serve.data_parallel_size": 1,
    "vllm_serve.gpu_memory_utilization": 0.9, "vllm_serve.enforce_eager": False,
    "vllm_serve.enable_prefix_caching": None, "vllm_serve.max_model_len": None, "vllm_serve.kv_cache_dtype": "auto",
    "vllm_serve.dtype": "auto",
}

_LOG = "logging, checkpoints, evaluation and the Hub: rlsim step times exclude them"
_LOSS = "loss / advantage / reward arithmetic on tensors the step already holds: no modelled cost"
_DATA = "data loading and prompt formatting on the host: no modelled cost"
_LAUNCH = "where the processes meet (launcher): no effect on step time"
_SERVER_ADDRESS = "where the vLLM server listens: no effect on step time"
# transformers' attention implementation on TRL's padded rows (trl._attention, common.hf_attention_compute)
_ATTENTION = ("flash_attention_2 / 3: the padded rows' attention over their real tokens (compute."
              "attention_skips_padding); sdpa or unset: over the padded width; eager: compute.flash_attention false")
_BACKEND = ("rlsim reads the training backend from the accelerate config (accelerate_config, accelerate.*); "
            "a Trainer-level DeepSpeed / FSDP config is not read")

_TRAINING_ARGUMENTS: dict[str, Rule] = {
    "per_device_train_batch_size": mapped("workload.train_layout.micro_batch", "samples a micro-batch (and a "
                                                                               "log-prob chunk)"),
    "gradient_accumulation_steps": mapped("workload.mini_batch_prompts", "slices per optimizer step"),
    "gradient_checkpointing": mapped("workload.train_layout.recompute", "full (TRL's default: on)"),
    "gradient_checkpointing_kwargs": ignored("reentrant or not: the same recompute"),
    "activation_checkpointing": unsupported("transformers' activation_checkpointing plugin is not read: "
                                            "gradient_checkpointing sets the recompute", neutral=None),
    "activation_checkpointing_kwargs": ignored("used with activation_checkpointing"),
    "bf16": mapped("workload.dtype", "bf16 mixed precision (TRL's default unless fp16)"),
    "fp16": mapped("workload.dtype"),
    "bf16_full_eval": ignored(_LOG), "fp16_full_eval": ignored(_LOG),
    "tf32": ignored("TF32 matmuls of fp32 tensors: the step runs in bf16 / fp16"),
    "torch_compile": unsupported("torch.compile's kernel speed-up is not modelled (train_params.compute.* is the knob)",
                                 neutral=False),
    "torch_compile_backend": ignored("used with torch_compile"), "torch_compile_mode": ignored("used with torch_compile"),
    "use_liger_kernel": mapped("workload.train_software", "true: trl-liger (Liger's RMSNorm, RoPE and SwiGLU "
                                                          "kernels), false trl (hf-transformers' constants, no TP, CP "
                                                          "nor pipeline)"),
    "liger_kernel_config": unsupported("a subset of Liger's kernels is not modelled (all of them or none)",
                                       neutral=None),
    "torch_empty_cache_steps": unsupported("emptying the CUDA cache every N steps is not modelled", neutral=None),
    "optim": unsupported("rlsim prices AdamW's state (two fp32 moments); another optimizer's is not modelled",
                         neutral="adamw_torch_fused"),
    "optim_args": ignored(OPTIMIZER_SETTINGS), "optim_target_modules": ignored(OPTIMIZER_SETTINGS),
    **{key: ignored(OPTIMIZER_SETTINGS) for key in (
        "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "lr_scheduler_kwargs.*", "warmup_steps",
        "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "label_smoothing_factor")},
    "num_train_epochs": ignored("run length: rlsim simulates `iterations` steps (--iterations N)"),
    "max_steps": ignored("run length: rlsim simulates `iterations` steps (--iterations N)"),
    "average_tokens_across_devices": ignored(_LOSS),
    "auto_find_batch_size": unsupported("TRL refuses it for GRPO", neutral=False),
    "use_cpu": unsupported("training on the CPU is not modelled", neutral=False),
    "use_cache": ignored("the KV cache of transformers' generate: vLLM generates"),
    "neftune_noise_alpha": ignored("noise added to the embeddings: no modelled cost"),
    "full_determinism": unsupported("deterministic kernels are not modelled", neutral=False),
    "seed": ignored("seeding: no effect on step time"), "data_seed": ignored("seeding: no effect on step time"),
    "accelerator_config": unsupported("accelerate's batch dispatch options are not modelled", neutral=None),
    "accelerator_config.*": unsupported("accelerate's batch dispatch options are not modelled"),
    "parallelism_config": unsupported("tensor / context parallelism of the Trainer is not modelled (TRL refuses cp "
                                      "and sp for GRPO)", neutral=None),
    "parallelism_config.*": unsupported("tensor / context parallelism of the Trainer is not modelled"),
    "deepspeed": unsupported(_BACKEND, neutral=None), "deepspeed.*": unsupported(_BACKEND),
    "fsdp": unsupported(_BACKEND, neutral=None), "fsdp_config": unsupported(_BACKEND, neutral=None),
    "fsdp_config.*": unsupported(_BACKEND),
    "ddp_bucket_cap_mb": unsupported("DDP's bucket size is not modelled (rlsim's gradient sync overlap is the "
                                     "training stack's)", neutral=None),
    **{key: ignored("a DDP option with no modelled cost") for key in (
        "ddp_find_unused_parameters", "ddp_broadcast_buffers", "ddp_static_graph", "ddp_backend", "ddp_timeout")},
    "local_rank": ignored("set by the launcher"),
    **{key: ignored(_DATA) for key in (
        "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
        "dataloader_prefetch_factor", "dataloader_multiprocessing_context", "dataloader_in_order",
        "remove_unused_columns", "label_names", "train_sampling_strategy", "length_column_name", "shuffle_dataset")},
    **{key: ignored(_LOG) for key in (
        "output_dir", "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node",
        "logging_nan_inf_filter", "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm",
        "report_to", "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
        "eval_strategy", "eval_steps", "eval_delay", "per_device_eval_batch_size", "prediction_loss_only",
        "eval_on_start", "include_for_metrics", "eval_do_concat_batches", "eval_use_gather_object", "eval_accumulation_steps",
        "batch_eval_metrics", "save_only_model", "save_strategy", "save_steps", "save_on_each_node",
        "save_total_limit", "enable_jit_checkpoint", "push_to_hub", "hub_token", "hub_private_repo", "hub_model_id",
        "hub_strategy", "hub_always_push", "hub_revision", "load_best_model_at_end", "metric_for_best_model",
        "greater_is_better", "ignore_data_skip", "restore_callback_states_from_checkpoint", "skip_memory_metrics",
        "debug", "do_train", "do_eval", "do_predict", "resume_from_checkpoint")},
}

_GRPO: dict[str, Rule] = {
    "model_init_kwargs": unsupported("from_pretrained arguments are not modelled", neutral=None),
    "model_init_kwargs.attn_implementation": mapped("workload.train_params.compute", _ATTENTION),
    "model_init_kwargs.torch_dtype": ignored("the weights' load dtype: the Trainer's bf16 / fp16 sets the compute "
                                             "dtype"),
    "model_init_kwargs.dtype": ignored("the weights' load dtype: the Trainer's bf16 / fp16 sets the compute dtype"),
    "model_init_kwargs.use_cache": ignored("the KV cache of transformers' generate: vLLM generates"),
    "model_init_kwargs.*": unsupported("from_pretrained arguments are not modelled"),
    "trust_remote_code": ignored("where the model's code comes from: no effect on step time"),
    "router_aux_loss_coef": ignored(_LOSS), "disable_dropout": ignored(_LOSS),
    "cast_lm_head_to_fp32": mapped("workload.train_params.compute.head_dtype", "true: fp32, the head's GEMMs at the "
                                   "device's fp32 peak and its fused kernel on fp32 tiles (the model must not tie its "
                                   "embeddings, as TRL requires)"),
    "num_generations": mapped("workload.samples_per_prompt"),
    "num_generations_eval": ignored(_LOG),
    "max_completion_length": mapped("workload.response_length.max"),
    "ds3_gather_for_generation": ignored("generation with transformers only: vLLM gets the weights by the sync"),
    "pad_to_multiple_of": unsupported("padding to a multiple is not modelled", neutral="auto"),
    "generation_batch_size": mapped("workload.prompts_per_step", "samples a generation / num_generations"),
    "steps_per_generation": mapped("workload.prompts_per_step", "slices of per_device_train_batch_size x processes "
                                                                "a generation"),
    **{key: ignored(SAMPLING_SETTINGS) for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")},
    "generation_kwargs": unsupported("extra sampling parameters are not read (a max_tokens there changes the "
                                     "lengths)", neutral=None),
    "generation_kwargs.*": unsupported("extra sampling parameters are not read (a max_tokens there changes the "
                                       "lengths)"),
    "chat_template_kwargs": ignored(_DATA), "chat_template_kwargs.*": ignored(_DATA),
    "cache_implementation": ignored("transformers' generate only: vLLM generates"),
    "use_vllm": mapped("schedule.kind", "vLLM generates (else transformers' generate: not modelled)"),
    "vllm_mode": mapped("schedule.kind", "colocate: colocated; server: disaggregated"),
    "vllm_model_impl": unsupported("the transformers backend inside vLLM is not modelled", neutral="vllm"),
    "vllm_enable_sleep_mode": mapped("schedule.switch.engine_sleep", "colocate: sleep level 2 after each generation"),
    "vllm_structured_outputs_regex": unsupported("guided decoding is not modelled", neutral=None),
    **{key: ignored(_SERVER_ADDRESS) for key in ("vllm_server_base_url", "vllm_server_host", "vllm_server_port",
                                                 "vllm_server_timeout", "vllm_group_port")},
    "vllm_gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization", "colocate"),
    "vllm_max_model_length": mapped("workload.inference.max_model_len", "colocate"),
    "vllm_tensor_parallel_size": mapped("workload.rollout_layout.tp", "colocate"),
    "beta": mapped("workload.reference", "!= 0: the reference model's forward"),
    "num_iterations": mapped("workload.ppo_epochs", "passes over each generation batch"),
    **{key: ignored(_LOSS) for key in (
        "epsilon", "delta", "epsilon_high", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos",
        "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "importance_sampling_level", "reward_weights",
        "multi_objective_aggregation", "scale_rewards", "loss_type", "mask_truncated_completions",
        "top_entropy_quantile", "entropy_coef", "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max",
        "entropy_coef_delta", "entropy_target", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_clip_min", "vllm_importance_sampling_cap", "off_policy_mask_threshold",
        "use_bias_correction_kl")},
    "sync_ref_model": ignored("the reference mixed with the policy every ref_model_sync_steps steps: a weight "
                              "update hundreds of steps apart, not modelled"),
    "ref_model_mixup_alpha": ignored("used with sync_ref_model"), "ref_model_sync_steps": ignored("used with "
                                                                                                  "sync_ref_model"),
    "max_tool_calling_iterations": unsupported("tool calls (multi-turn rollouts) are not modelled", neutral=None),
    "vllm_importance_sampling_correction": mapped("schedule.recompute_logprob", "needs the old log-probs' forward"),
    # RLOOConfig's own (trl rloo): reward arithmetic
    **{key: ignored(_LOSS) for key in RLOO_ONLY_KEYS},
    **{key: ignored(_LOG) for key in ("log_completions", "log_multimodal", "num_completions_to_print",
                                      "log_unique_prompts", "log_completions_hub_repo")},
    "use_transformers_continuous_batching": unsupported("transformers' continuous batching is not modelled: "
                                                        "use_vllm", neutral=False),
    "transformers_continuous_batching_config": unsupported("transformers' continuous batching is not modelled",
                                                           neutral=None),
    "use_transformers_paged": unsupported("transformers' paged generation is not modelled", neutral=False),
}

_MODEL_AND_SCRIPT: dict[str, Rule] = {
    "model_name_or_path": mapped("workload.model", "Hugging Face id or folder -> model preset"),
    "model_revision": ignored("a checkpoint revision: no effect on step time"),
    "dtype": ignored("the weights' load dtype: the Trainer's bf16 / fp16 sets the compute dtype"),
    "attn_implementation": mapped("workload.train_params.compute", _ATTENTION),
    "use_peft": mapped("workload.lora", "LoRA adapters (PEFT)"),
    "lora_r": mapped("workload.lora.rank"), "lora_target_modules": mapped("workload.lora.targets"),
    "lora_alpha": ignored("LoRA scaling: no modelled cost"), "lora_dropout": ignored("LoRA dropout: no modelled cost"),
    "lora_task_type": ignored("PEFT's task label"), "use_rslora": ignored("LoRA scaling: no modelled cost"),
    "lora_target_parameters": unsupported("LoRA on parameters (MoE experts) is not modelled", neutral=None),
    "lora_modules_to_save": unsupported("fully trained extra modules beside LoRA are not modelled", neutral=None),
    "use_dora": unsupported("DoRA's magnitude vectors are not modelled", neutral=False),
    "load_in_8bit": unsupported("8-bit base weights are not modelled", neutral=False),
    "load_in_4bit": unsupported("4-bit base weights (QLoRA) are not modelled", neutral=False),
    **{key: ignored("used with load_in_4bit") for key in ("bnb_4bit_quant_type", "use_bnb_nested_quant",
                                                         "bnb_4bit_quant_storage")},
    "reward_funcs": mapped("workload.reward.kind", "rule rewards on the trainer processes, after the batch"),
    "reward_model_name_or_path": mapped("workload.reward.model", "a reward model's forward"),
    **{key: ignored(_DATA) for key in ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split",
                                       "dataset_streaming", "datasets", "streaming", "test_split_size")},
    "ignore_bias_buffers": ignored("a DDP workaround for bool buffers: no modelled cost"),
    "env": ignored("environment variables the TRL CLI sets"), "env.*": ignored("environment variables the TRL CLI sets"),
}

_LAUNCHER: dict[str, Rule] = {
    "accelerate_config": mapped("workload.train_layout.zero", "the accelerate config: the training backend"),
    "config_file": mapped("workload.train_layout.zero", "accelerate's own name for accelerate_config"),
    "num_processes": mapped("topology.nodes", "training processes, one a GPU"),
    "num_machines": mapped("topology.nodes", "nodes the training processes span"),
    "mixed_precision": ignored("the Trainer's bf16 / fp16 flags set the mixed precision"),
    **{key: ignored(_LAUNCH) for key in ("main_process_port", "main_process_ip", "machine_rank", "rdzv_backend",
                                         "same_network")},
    "dynamo_backend": unsupported("torch.compile through accelerate is not modelled", neutral="no"),
}

_A = "accelerate"
_ACCELERATE: dict[str, Rule] = {
    f"{_A}.distributed_type": mapped("workload.train_layout.zero", "DEEPSPEED: its stage; FSDP2: 3; FSDP1: its "
                                                                   "sharding strategy's; MULTI_GPU: 0 (DDP)"),
    f"{_A}.num_processes": mapped("topology.nodes", "training processes (num_processes overrides it)"),
    f"{_A}.num_machines": mapped("topology.nodes", "(num_machines overrides it)"),
    f"{_A}.mixed_precision": ignored("the Trainer's bf16 / fp16 flags set the mixed precision"),
    f"{_A}.deepspeed_config.zero_stage": mapped("workload.train_layout.zero"),
    f"{_A}.deepspeed_config.offload_optimizer_device": mapped("workload.train_params.offload", "cpu: ZeRO-Offload, the "
                                                                                             "optimizer on the host"),
    f"{_A}.deepspeed_config.offload_param_device": mapped("workload.train_params.offload", "cpu: ZeRO-3's parameters "
                                                                                         "on the host"),
    f"{_A}.deepspeed_config.gradient_accumulation_steps": ignored("the Trainer's gradient_accumulation_steps applies"),
    f"{_A}.deepspeed_config.gradient_clipping": ignored(OPTIMIZER_SETTINGS),
    f"{_A}.deepspeed_config.zero3_init_flag": ignored("how the model is first built: no effect on step time"),
    f"{_A}.deepspeed_config.zero3_save_16bit_model": ignored(_LOG),
    f"{_A}.deepspeed_config.deepspeed_multinode_launcher": ignored(_LAUNCH),
    f"{_A}.deepspeed_config.deepspeed_config_file": unsupported("a DeepSpeed JSON is not read: give its stage and "
                                                                "offload as accelerate.deepspeed_config keys",
                                                                neutral=None),
    f"{_A}.fsdp_config.fsdp_version": mapped("workload.train_layout.zero", "FSDP1 or FSDP2"),
    f"{_A}.fsdp_config.fsdp_sharding_strategy": mapped("workload.train_layout.zero", "FSDP1: FULL_SHARD 3, "
                                                                                     "SHARD_GRAD_OP 2, NO_SHARD 0 "
                                                                                     "(FSDP2 does not read it)"),
    f"{_A}.fsdp_config.fsdp_reshard_after_forward": mapped(
        "workload.train_params.memory.zero3_reshard_after_forward", "FSDP2 (fully_shard's): ZeRO-3, false keeps "
        "each layer whole from its forward through its backward; FSDP1 does not read it (fsdp_sharding_strategy)"),
    f"{_A}.fsdp_config.fsdp_offload_params": mapped("workload.train_params.offload.fsdp_cpu_offload"),
    f"{_A}.fsdp_config.fsdp_activation_checkpointing": mapped("workload.train_layout.recompute", "full"),
    f"{_A}.fsdp_config.fsdp_auto_wrap_policy": unsupported("rlsim shards and gathers layer by layer (a transformer "
                                                           "layer a unit)", neutral="TRANSFORMER_BASED_WRAP"),
    f"{_A}.fsdp_config.fsdp_transformer_layer_cls_to_wrap": ignored("the layer class FSDP wraps: rlsim's unit"),
    f"{_A}.fsdp_config.fsdp_backward_prefetch": unsupported("rlsim overlaps the gathers as its training stack says "
                                                            "(train_params.comm.fsdp_*)", neutral="BACKWARD_PRE"),
    f"{_A}.fsdp_config.fsdp_forward_prefetch": ignored("the next layer's gather issued early: rlsim overlaps the "
                                                       "gathers with compute (train_params.comm.fsdp_*)"),
    **{f"{_A}.fsdp_config.{key}": ignored("start-up and checkpoint options: no effect on step time") for key in (
        "fsdp_cpu_ram_efficient_loading", "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params")},
    f"{_A}.use_cpu": unsupported("training on the CPU is not modelled", neutral=False),
    f"{_A}.dynamo_config.dynamo_backend": unsupported("torch.compile through accelerate is not modelled", neutral="NO"),
    **{f"{_A}.{key}": ignored(_LAUNCH) for key in (
        "compute_environment", "debug", "machine_rank", "main_training_function", "rdzv_backend", "same_network",
        "main_process_ip", "main_process_port", "gpu_ids", "enable_cpu_affinity", "downcast_bf16")},
    **{f"{_A}.{key}": ignored("TPU settings: not used on GPUs") for key in ("tpu_env", "tpu_use_cluster",
                                                                           "tpu_use_sudo")},
}

_S = "vllm_serve"
_VLLM_SERVE: dict[str, Rule] = {
    f"{_S}.tensor_parallel_size": mapped("workload.rollout_layout.tp", "server mode"),
    f"{_S}.data_parallel_size": mapped("schedule.rollout_devices", "x vllm_serve.tensor_parallel_size; above 1 "
                                       "refused for a dense model (TRL: it errors out)"),
    f"{_S}.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization", "server mode"),
    f"{_S}.enforce_eager": mapped("workload.inference.enforce_eager"),
    f"{_S}.enable_prefix_caching": mapped("workload.inference.enable_prefix_caching", "unset: vLLM's default (on)"),
    f"{_S}.max_model_len": mapped("workload.inference.max_model_len"),
    f"{_S}.kv_cache_dtype": mapped("workload.rollout_layout.kv_dtype"),
    f"{_S}.dtype": mapped("workload.rollout_layout.weight_dtype"),
    f"{_S}.vllm_model_impl": unsupported("the transformers backend inside vLLM is not modelled", neutral="vllm"),
    f"{_S}.speculative_config": mapped("workload.inference.speculative_method", "vLLM's speculative_config JSON: "
                                       "method (eagle, eagle3, mtp) and num_speculative_tokens; the acceptance rate "
                                       "is left to --set workload.inference.speculative_acceptance_rate"),
    f"{_S}.model": ignored("the served model: the trained one"),
    **{f"{_S}.{key}": ignored(_SERVER_ADDRESS) for key in ("host", "port", "log_level")},
    **{f"{_S}.{key}": ignored("no effect on step time") for key in ("revision", "trust_remote_code",
                                                                    "distributed_executor_backend")},
    # `trl vllm-serve` forwards the arguments its parser does not know to `vllm serve` (cli/commands/
    # vllm_serve.py parse_args_and_config(return_remaining_strings=True); scripts/vllm_serve.py
    # build_command appends them): vLLM's own options, read here where rlsim has the field
    f"{_S}.max_num_seqs": mapped("workload.rollout_layout.max_num_seqs", "forwarded to vllm serve"),
    f"{_S}.max_num_batched_tokens": mapped("workload.inference.max_num_batched_tokens", "forwarded to vllm serve"),
    f"{_S}.enable_chunked_prefill": mapped("workload.inference.chunked_prefill", "forwarded to vllm serve"),
    f"{_S}.pipeline_parallel_size": mapped("workload.rollout_layout.pp", "forwarded to vllm serve; the server's "
                                           "GPUs: tensor x pipeline x data parallel sizes"),
    f"{_S}.*": unsupported("a vllm serve option `trl vllm-serve` forwards (scripts/vllm_serve.py): not modelled, "
                           "the server preset's defaults stand"),
}

RULES: dict[str, Rule] = {**_TRAINING_ARGUMENTS, **_GRPO, **_MODEL_AND_SCRIPT, **_LAUNCHER, **_ACCELERATE,
                          **_VLLM_SERVE}
