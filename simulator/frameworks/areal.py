"""AReaL (inclusionAI/AReaL) experiment configs -> rlsim scenarios: `rlsim run --from-areal CONFIG.yaml [key=value ...]`.

Key names as in AReaL 1.0.4 (areal/api/cli_args.py: GRPOConfig / PPOConfig, read in its wheel; the
config.yaml a run saves beside its logs is the same tree). The GPUs are the engines' own: the
rollout's ``rollout.backend`` (``sglang:d4t2``) and the actor's ``actor.backend`` (``fsdp:d4``,
``megatron:d2t2p2``). Schedule: ``rollout.scheduling_strategy.type: colocation`` -> colocated (the
actor and the engine share the GPUs in turn); else areal (split pools, asynchronous:
rl/schedules/areal.py).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from ..llm.architecture import DTYPE_BYTES
from ..params import COMPILED_LOG_SOFTMAX_BYTES, logprob_traffic
from .common import (
    DTYPES,
    OPTIMIZER_SETTINGS,
    SAMPLING_SETTINGS,
    FrameworkImport,
    Rule,
    Status,
    Values,
    begin_import,
    begin_workload,
    capped_length,
    classify,
    has_experts,
    hf_train_software,
    ignored,
    inactive_section,
    mapped,
    merge_train_params,
    model_for,
    model_set_by_user,
    size_topology,
    unsupported,
    without_inapplicable_layout_keys,
    world_divides,
)
from .megatron_recompute import KEYS as RECOMPUTE_KEYS
from .megatron_recompute import megatron_recompute, recompute_rules
from .verl_optimizer import (
    MEGATRON_GRAD_BYTES,
    MEGATRON_OPTIMIZER_STATE,
    MEGATRON_WEIGHT_WRITE_BYTES,
    fsdp_step_traffic,
)

DEFAULTS_SOURCE = "AReaL 1.0.4 areal/api/cli_args.py (PPOConfig's dataclass defaults)"
# AReaL's defaults for the keys rlsim reads when a config leaves them out (its dataclass fields).
DEFAULTS: dict[str, Any] = {
    "train_dataset.batch_size": 1, "train_dataset.max_length": None, "gconfig.n_samples": 1,
    "gconfig.max_new_tokens": 16384, "gconfig.max_tokens": 32768, "actor.ppo_n_minibatches": 4,
    "actor.kl_ctl": 0.1, "actor.recompute_logprob": False, "actor.use_decoupled_loss": False,
    "actor.prox_logp_method": "recompute", "actor.gradient_checkpointing": False, "actor.dtype": "bfloat16",
    "actor.mb_spec.n_mbs": 1, "actor.mb_spec.max_tokens_per_mb": None, "actor.fsdp.offload_params": False,
    "actor.megatron.virtual_pipeline_parallel_size": 1, "actor.megatron.recompute_granularity": "full",
    "actor.megatron.recompute_method": "uniform", "actor.megatron.recompute_num_layers": 1,
    "actor.megatron.ddp.use_distributed_optimizer": True, "actor.archon.ac_mode": "selective",
    "actor.archon.offload_params": False, "actor.archon.pp_schedule": "Interleaved1F1B",
    "actor.archon.pp_layers_per_stage": None, "actor.archon.pp_first_stage_less_layers": 1,
    "actor.archon.pp_last_stage_less_layers": 1, "actor.archon.reshard_after_forward_policy": "default",
    "rollout.max_head_offpolicyness": 0,
    "rollout.max_concurrent_rollouts": None, "rollout.consumer_batch_size": 1,
    "rollout.scheduling_strategy.type": "separation",
    "actor.scheduling_strategy.type": "separation", "cluster.n_gpus_per_node": 8,
    "sglang.mem_fraction_static": 0.9, "sglang.max_running_requests": None, "sglang.disable_cuda_graph": False,
    "sglang.disable_radix_cache": True, "sglang.context_length": 32768, "sglang.disable_custom_all_reduce": False,
    "sglang.cuda_graph_max_bs": None, "sglang.dtype": "bfloat16", "sglang.kv_cache_dtype": "auto",
    "sglang.chunked_prefill_size": -1,
    "vllm.gpu_memory_utilization": 0.9, "vllm.max_num_seqs": 256, "vllm.enforce_eager": False,
    "vllm.max_model_len": 32768, "vllm.no_enable_prefix_caching": True, "vllm.no_enable_chunked_prefill": False,
    "vllm.dtype": "bfloat16",
}
# AReaL 1.0.4 pins sglang 0.5.10.post1 (its wheel's METADATA, extra "sglang"): rlsim's newest SGLang
# preset stands for it. Its vLLM server is vLLM's OpenAI server (engine/vllm_ext/areal_vllm_server.py
# runs vllm.entrypoints.openai's run_server on make_arg_parser's arguments; cli_args.py
# vLLMConfig.build_cmd starts it): the server's usage-context defaults, as `vllm serve`.
SGLANG_ENGINE, VLLM_ENGINE = "sglang-0.5.6", "vllm-v1-server"
ENGINE_NOTE = {"sglang": f"AReaL 1.0.4 pins sglang 0.5.10.post1: rlsim's nearest preset {SGLANG_ENGINE} (its "
                         "running-request and chunked-prefill defaults) stands for it",
               "vllm": f"AReaL's vLLM server (vLLM's OpenAI server, engine/vllm_ext/areal_vllm_server.py): "
                       f"rlsim's {VLLM_ENGINE} (the server's step-token budget; max_num_seqs from vllm.max_num_seqs)"}

_LOG = "logging, tracing and bookkeeping: no effect on step time"
_LOSS = "loss / reward arithmetic on tensors the step already holds: no modelled cost"
_LR = OPTIMIZER_SETTINGS
_VAL = "evaluation between steps: rlsim step times exclude it"
_SAMPLING = SAMPLING_SETTINGS
_LORA = "used only with use_lora"
_NAMING = "process naming, logging and timeouts: no effect on step time"

RULES: dict[str, Rule] = {
    **{k: ignored("experiment naming and seeding: no effect on step time")
       for k in ("experiment_name", "trial_name", "seed", "tokenizer_path")},
    "cluster.n_nodes": ignored("the cluster AReaL's launcher may use, not the job: the job's GPUs are its engines' "
                               "backend world sizes"),
    "cluster.n_gpus_per_node": mapped("topology.nodes", "GPUs per node of the job"),
    "cluster.*": ignored("cluster bookkeeping (name resolution, file roots): no effect on step time"),
    "allocation_mode": unsupported("the legacy allocation string of AReaL's SPMD launchers: rlsim reads the per-engine "
                                   "backend fields (rollout.backend, actor.backend), and a decoupled one "
                                   "('sglang.d4p1t1+d4p1t1', AReaL 0.3 - 0.5) as them where no rollout.backend is "
                                   "given", neutral=""),
    "async_training": unsupported("AReaL 0.3 - 0.5's switch: false generates each batch after the weight update "
                                  "(rollout_batch), not read here: give rollout.max_head_offpolicyness=0 for that",
                                  neutral=True),
    "enable_offload": ignored("enables torch_memory_saver for the offloads, which are read where they are set"),
    **{k: ignored("run length: rlsim simulates `iterations` steps (--iterations N)")
       for k in ("total_train_epochs", "total_train_steps", "total_train_n_seqs")},
    "train_dataset.batch_size": mapped("workload.prompts_per_step", "AReaL's consumer batch"),
    "train_dataset.max_length": mapped("workload.prompt_length.max", "longer prompts are filtered out"),
    "train_dataset.*": ignored("data loading on the host: no modelled cost"),
    "valid_dataset": ignored(_VAL), "valid_dataset.*": ignored(_VAL),
    "eval_gconfig": ignored(_VAL), "eval_gconfig.*": ignored(_VAL), "evaluator.*": ignored(_VAL),
    **{f"{k}.*": ignored(_LOG) for k in ("saver", "stats_logger", "recover", "perf_tracer", "memory_profiler",
                                          "scheduler")},
    "perf_tracer": ignored(_LOG), "memory_profiler": ignored(_LOG),
    "gconfig.n_samples": mapped("workload.samples_per_prompt"),
    "gconfig.max_new_tokens": mapped("workload.response_length.max"),
    "gconfig.max_tokens": mapped("workload.inference.max_model_len", "prompt + response stop there (AReaL cuts "
                                 "max_new_tokens to max_tokens - prompt per request)"),
    "gconfig.min_new_tokens": unsupported("a minimum response length is not modelled", neutral=0),
    "gconfig.use_beam_search": unsupported("beam search is not modelled", neutral=False),
    "gconfig.ignore_eos": unsupported("both engines get it (engine/sglang_remote.py, vllm_remote.py): every response "
                                      "runs to max_new_tokens, which changes the length law; set "
                                      "workload.response_length", neutral=False),
    "gconfig.*": ignored(_SAMPLING),
    "rollout.backend": mapped("workload.rollout_layout", "the engine (sglang / vllm), its tp and pp (servers of t x "
                                                         "p GPUs); d x t x p = the rollout GPUs"),
    "rollout.scheduling_strategy.type": mapped("schedule.kind", "colocation: colocated; separation: areal"),
    "rollout.scheduling_strategy.*": ignored("process placement details: the GPUs are the backends'"),
    "rollout.max_head_offpolicyness": mapped("schedule.max_head_offpolicyness"),
    "rollout.max_concurrent_rollouts": mapped("schedule.max_concurrent_rollouts"),
    "rollout.consumer_batch_size": mapped("schedule.consumer_batch_size", "the batch the start rule counts in"),
    "rollout.queue_size": unsupported("the input queue's own bound is not modelled (a prompt is always ready)",
                                      neutral=None),
    "rollout.pause_grace_period": unsupported("the wait after pausing generation is not modelled", neutral=0.0),
    "rollout.routing_strategy": unsupported("requests go to the servers in turn (round_robin)", neutral="round_robin"),
    "rollout.use_lora": unsupported("LoRA adapters in the engine are not imported", neutral=False),
    "rollout.*": ignored("the rollout client's bookkeeping (names, timeouts, tracing, the agent service): no effect "
                         "on step time"),
    "actor.path": mapped("workload.model", "Hugging Face id or folder -> model preset, or the folder's config.json"),
    "actor.backend": mapped("workload.train_layout", "fsdp / archon: ZeRO-3 over d x c with tp t, c Ulysses "
                                                     "sequence parallelism (ulysses_sp); train_software areal-fsdp "
                                                     "(ZeRO 3 only, no pipeline) / areal-archon (ZeRO 3 only, p "
                                                     "pipeline stages, e expert parallelism: its experts' tp 1, or "
                                                     "the ffn part's t); megatron: its d/t/p/c/e, the experts' tp 1 "
                                                     "(or the ffn part's t); d x t x p x c = the training GPUs"),
    "actor.scheduling_strategy.type": mapped("schedule.kind", "colocation (target rollout): colocated"),
    "actor.scheduling_strategy.*": ignored("process placement details: the GPUs are the backends'"),
    "actor.ppo_n_minibatches": mapped("workload.mini_batch_prompts", "train_dataset.batch_size / ppo_n_minibatches"),
    "actor.mb_spec.max_tokens_per_mb": mapped("workload.train_layout.max_tokens_per_micro_batch",
                                              "and logprob_max_tokens_per_micro_batch: compute_logp splits the batch "
                                              "by the same spec"),
    "actor.mb_spec.n_mbs": mapped("workload.train_layout.micro_batch", "without max_tokens_per_mb: a mini-batch's "
                                  "samples per DP rank / n_mbs; with it (a minimum count) unsupported above 1"),
    "actor.mb_spec.*": ignored("packing details: rlsim fills the micro-batches longest first within the budget"),
    "actor.pad_to_maximum": unsupported("each packed micro-batch topped up to mb_spec.max_tokens_per_mb with one "
                                        "padding sequence (utils/data.py pad_mb_list) is not modelled: rlsim packs "
                                        "them without it", neutral=False),
    "actor.gradient_checkpointing": mapped("workload.train_layout.recompute"),
    "actor.dtype": mapped("workload.dtype"),
    "actor.kl_ctl": mapped("workload.reference", "> 0 with a ref section: the reference forward runs"),
    "actor.recompute_logprob": mapped("schedule.recompute_logprob", "the actor's forward pass before the update"),
    "actor.use_decoupled_loss": mapped("schedule.recompute_logprob", "needs the proximal log-probs"),
    "actor.prox_logp_method": mapped("schedule.recompute_logprob", "loglinear skips the forward pass"),
    "actor.offload": unsupported("the actor's offload between phases on split pools is not modelled", neutral=False),
    "actor.fsdp.offload_params": mapped("workload.train_params.offload.fsdp_cpu_offload", "FSDP2's CPUOffloadPolicy"),
    "actor.fsdp.*": ignored("FSDP wrapping and loading details: no modelled effect"),
    "actor.megatron.virtual_pipeline_parallel_size": mapped("workload.train_layout.vpp"),
    **recompute_rules("actor.megatron", "with actor.gradient_checkpointing (mbridge's set_extra_args), else ignored"),
    "actor.megatron.ddp.use_distributed_optimizer": mapped("workload.train_layout.zero", "true: 1, false: 0"),
    "actor.megatron.*": unsupported("Megatron option not modelled (overlaps, fusions, dtypes, checkpoint bridges)"),
    # AReaL 1.0.4 never hands it to Megatron: the mbridge engine takes mbridge's TransformerConfig (alltoall
    # beside variable_seq_lengths=True, as models/mcore/common.py keeps "aligned with mbridge base defaults"),
    # bridge_type megatron-bridge overrides it to alltoall with a warning (models/mcore/registry.py)
    "actor.megatron.moe_token_dispatcher_type": ignored(
        "AReaL 1.0.4's megatron engine runs the alltoall dispatcher whatever it says (models/mcore/registry.py: "
        "\"Ignoring mcore_config.moe_token_dispatcher_type\"; mbridge's config): rlsim's alltoall"),
    "actor.archon.ac_mode": mapped("workload.train_layout.recompute", "with gradient_checkpointing: full full, none "
                                                                      "none; selective (the default: torchtitan's "
                                                                      "op-level SAC) and memory_budget unsupported, "
                                                                      "priced as full"),
    "actor.archon.offload_params": mapped("workload.train_params.offload.fsdp_cpu_offload", "FSDP2's CPUOffloadPolicy"),
    "actor.archon.pp_schedule": mapped("workload.train_layout.vpp", "with p > 1, its stages a rank: 1F1B 1, "
                                       "Interleaved1F1B (the default) 2 or by pp_layers_per_stage; InterleavedZeroBubble "
                                       "/ ZBVZeroBubble unsupported, priced as Interleaved1F1B at their stages"),
    "actor.archon.pp_layers_per_stage": mapped("workload.train_layout.vpp", "ceil((layers + pp_first_stage_less_"
                                               "layers + pp_last_stage_less_layers) / it) stages over p"),
    **{f"actor.archon.pp_{end}_stage_less_layers": unsupported(
        "archon weighs the embedding / the output as this many layers when it splits the layers over the stages "
        "(pipeline_parallel.py generate_llm_fqn_per_model_part): rlsim splits the layers evenly and prices the "
        "embedding and the output on the first and last stages; read in the stage count of pp_layers_per_stage",
        neutral=1) for end in ("first", "last")},
    "actor.archon.reshard_after_forward_policy": mapped("workload.train_params.memory.zero3_reshard_after_forward",
                                                        "default: false with p > 1 (each layer kept gathered from "
                                                        "its forward through its backward), true without; always "
                                                        "true; never false"),
    "actor.archon.*": unsupported("Archon (torchtitan) option not modelled"),
    "actor.use_lora": unsupported("LoRA training is not imported (--set workload.lora...)", neutral=False),
    **{f"actor.{k}": ignored(_LORA) for k in ("lora_rank", "lora_alpha", "target_modules", "peft_type")},
    "actor.weight_update_mode": unsupported("weights go to the engines over the network (xccl); through the disk is "
                                            "not modelled", neutral="xccl"),
    "actor.attn_impl": unsupported("the packed micro-batches' attention is priced as a flash kernel's varlen one "
                                   "(cu_seqlens); another implementation over a packed row is not modelled",
                                   neutral="flash_attention_2"),
    "actor.enable_tree_training": unsupported("tree training is not modelled", neutral=False),
    "actor.optimizer": ignored(_LR), "actor.optimizer.*": ignored(_LR),
    "actor.optimizer.type": mapped("workload.train_params.memory.optimizer_bytes_per_param",
                                   "fsdp: adam AdamW's fp32 m and v (8 bytes), adam_bf16 AnyPrecisionAdamW's bf16 m, "
                                   "v and Kahan compensation (6), sgd none; archon: AdamW's state in actor.dtype; "
                                   "with its step's traffic (comm.optimizer_traffic_bytes_per_param, over the master "
                                   "shard: fsdp adam 28, adam_bf16 24, sgd 12; archon bf16 adam 14, sgd 6); "
                                   "megatron: adam rlsim's Megatron defaults (12, step 30), sgd Megatron-Core's fp32 "
                                   "momentum beside the main parameters (8, step 22), adam_bf16 (Megatron's "
                                   "precision-aware optimizer) listed unsupported"),
    **{f"actor.{k}": ignored(_NAMING) for k in ("experiment_name", "trial_name", "admin_api_key", "log_level",
                                                "request_timeout", "setup_timeout")},
    "actor.scheduling_spec": ignored(_NAMING), "actor.scheduling_spec.*": ignored(_NAMING),
    "actor.init_from_scratch": ignored("how the weights are initialised: no effect on step time"),
    "actor.disable_dropout": ignored("dropout off: the same kernels"),
    "actor.temperature": ignored("the logits' division by it is fused into the compiled log-softmax (fsdp, tp 1; "
                                 "workload.train_params.compute.loss_traffic_bytes_per_logit) or counted in the "
                                 "vocab-parallel one's Megatron count"),
    "actor.is_critic": unsupported("a value head in the actor is not imported", neutral=False),
    "actor.use_kernels": unsupported("the Hugging Face kernel hub's kernels are not modelled", neutral=False),
    "actor.grad_reduce_dtype": unsupported("gradients are reduced in fp32 (train_params.comm.grad_reduce_bytes_per_"
                                           "param)", neutral="float32"),
    "actor.optimizer_dtype": unsupported("the optimizer state is fp32 (train_params.memory)", neutral="float32"),
    "actor.*": ignored(_LOSS),
    "ref": ignored("no reference section: no reference model"),
    "ref.scheduling_strategy.type": unsupported("a reference on its own GPUs is not modelled: rlsim runs it on the "
                                                "trainer's", neutral="colocation"),
    "ref.offload": unsupported("the reference's offload between phases is not modelled", neutral=False),
    "ref.*": ignored("the reference is the actor's model, run on the actor's GPUs with its layout"),
    "critic": ignored("no critic: GRPO"),
    "critic.path": mapped("workload.algorithm", "a critic section: ppo, its value model (workload.critic_model when "
                                                "it is not the actor's)"),
    "critic.mb_spec.max_tokens_per_mb": mapped("workload.critic_batching.max_tokens_per_micro_batch",
                                               "and its value pass's budget"),
    "critic.offload": mapped("workload.critic_offload", "true: its parameters and optimizer state on the host "
                                                        "outside its phases (torch_memory_saver)"),
    "critic.backend": unsupported("the critic runs with the actor's layout; a layout of its own is not modelled"),
    "critic.scheduling_strategy.type": unsupported("a critic on GPUs of its own is not modelled: rlsim runs it on "
                                                   "the trainer's", neutral="colocation"),
    "critic.ppo_n_minibatches": unsupported("the critic trains on the actor's mini-batches"),
    **{f"critic.{k}": ignored(_NAMING) for k in ("experiment_name", "trial_name", "admin_api_key", "log_level",
                                                 "request_timeout", "setup_timeout")},
    "critic.scheduling_spec": ignored(_NAMING), "critic.scheduling_spec.*": ignored(_NAMING),
    "critic.optimizer": ignored(_LR), "critic.optimizer.*": ignored(_LR),
    "critic.mb_spec.*": ignored("packing details: rlsim fills the micro-batches longest first within the budget"),
    "critic.scheduling_strategy.*": ignored("process placement details: the GPUs are the backends'"),
    "critic.*": ignored("the critic's loss arithmetic and engine details, as the actor's: no modelled cost"),
    # AReaL 1.0's on-policy distillation (cli_args.py TeacherConfig, trainer/rl_trainer.py, read in the
    # 1.0.4 wheel): a teacher served by inference servers of its own scores the trainer's batch after
    # the reference pass (teacher.compute_logp), each controller worker posting its share one request
    # after another (infra/remote_inf_engine.py compute_logp)
    "teacher": ignored("no teacher"),
    "teacher.engine_type": mapped("workload.distillation", "rollout: the teacher on inference servers; train (the "
                                  "legacy train-engine teacher) is not modelled"),
    "teacher.path": mapped("workload.distillation.teacher"),
    "teacher.rollout.backend": mapped("workload.distillation.devices", "the teacher's servers: d x t x p GPUs of their "
                                      "own (t, p: workload.distillation.layout.tp, pp), beside the job's (the topology holds "
                                      "them); the engine's memory and batching settings are the rollout's sglang / "
                                      "vllm section, as AReaL copies it"),
    "teacher.rollout.scheduling_strategy.type": unsupported("a teacher colocated with another model is not modelled: "
                                                            "rlsim serves it on GPUs of its own", neutral="separation"),
    "teacher.offload": unsupported("offloading the teacher's servers between steps is not modelled", neutral=False),
    **{f"teacher.{k}": ignored("a loss weight: no effect on step time") for k in ("rl_loss_weight",
                                                                                  "distill_loss_weight")},
    "teacher.rollout.*": ignored("the teacher client's naming, timeouts and staleness settings: its scoring is one "
                                 "blocking request a trajectory, whatever they say"),
    "teacher.train.*": ignored("read with teacher.engine_type train only"),
    "teacher.*": unsupported("this teacher option is not modelled"),
    "dynamic_bs": unsupported("a dynamic batch of accepted rollouts is not modelled", neutral=False),
    "sglang.mem_fraction_static": mapped("workload.rollout_layout.gpu_memory_utilization"),
    "sglang.max_running_requests": mapped("workload.rollout_layout.max_num_seqs"),
    "sglang.disable_cuda_graph": mapped("workload.inference.enforce_eager"),
    "sglang.disable_radix_cache": mapped("workload.inference.enable_prefix_caching", "negated"),
    "sglang.context_length": mapped("workload.inference.max_model_len", "with gconfig.max_tokens, the lower"),
    "sglang.disable_custom_all_reduce": mapped("workload.inference.custom_all_reduce", "negated"),
    "sglang.cuda_graph_max_bs": mapped("workload.inference.cuda_graph_max_batch"),
    "sglang.chunked_prefill_size": mapped("workload.inference.chunked_prefill", "-1 (AReaL's default): off; N: "
                                          "chunks of N tokens (max_num_batched_tokens)"),
    "sglang.dtype": mapped("workload.rollout_layout.weight_dtype"),
    "sglang.kv_cache_dtype": mapped("workload.rollout_layout.kv_dtype"),
    **{f"sglang.{k}": ignored(_LOG) for k in (
        "model_path", "random_seed", "skip_tokenizer_init", "disable_outlines_disk_cache", "log_level",
        "log_level_http", "log_requests", "log_requests_level", "show_time_cost", "enable_metrics",
        "decode_log_interval", "enable_nan_detection", "enable_p2p_check", "enable_memory_saver",
        "allow_auto_truncate", "enable_multithread_load", "enable_return_routed_experts", "enable_multimodal",
        "max_loaded_loras", "lora_backend", "max_lora_rank", "lora_paths", "sampling_backend",
        "triton_attention_reduce_in_fp32", "triton_attention_num_kv_splits", "torch_compile_max_bs")},
    **{f"sglang.{k}": unsupported("SGLang option not modelled", neutral=value) for k, value in (
        ("enable_torch_compile", False), ("enable_dp_attention", False), ("enable_ep_moe", False), ("dp_size", 1),
        ("ep_size", 1), ("cpu_offload_gb", 0), ("enable_lora", None), ("num_continuous_decode_steps", 1),
        ("enable_mixed_chunk", False), ("disable_cuda_graph_padding", False), ("cuda_graph_bs", None),
        ("enable_nccl_nvls", False), ("disable_overlap_schedule", False), ("attention_backend", "fa3"))},
    # SGLang's --torchao-config quantizes the served weights (int8wo, int4wo-128, fp8wo, ...: sglang
    # layers/torchao_utils.py apply_torchao_config_to_model); AReaL hands it to the server as is
    "sglang.torchao_config": unsupported("weights quantized by torchao in the engine are not mapped: give "
                                         "workload.rollout_layout.weight_dtype", neutral=""),
    "sglang.*": unsupported("SGLang option not modelled (the named engine's defaults stand)"),
    "vllm.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization"),
    "vllm.max_num_seqs": mapped("workload.rollout_layout.max_num_seqs"),
    "vllm.enforce_eager": mapped("workload.inference.enforce_eager"),
    "vllm.max_model_len": mapped("workload.inference.max_model_len", "with gconfig.max_tokens, the lower"),
    "vllm.no_enable_prefix_caching": mapped("workload.inference.enable_prefix_caching", "negated"),
    "vllm.no_enable_chunked_prefill": mapped("workload.inference.chunked_prefill", "negated"),
    "vllm.dtype": mapped("workload.rollout_layout.weight_dtype", "and kv_dtype"),
    **{f"vllm.{k}": ignored(_LOG) for k in (
        "model", "seed", "skip_tokenizer_init", "worker_extension_cls", "uvicorn_log_level", "block_size",
        "disable_sliding_window", "max_lora_rank", "max_loras", "lora_modules", "distributed_executor_backend",
        "gdn_prefill_backend")},
    **{f"vllm.{k}": unsupported("vLLM option not modelled", neutral=value) for k, value in (
        ("cpu_offload_gb", 0), ("enable_lora", False), ("enable_sleep_mode", False))},
    "vllm.*": unsupported("vLLM option not modelled (the named engine's defaults stand)"),
}


def import_areal(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
                 schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """An AReaL experiment config plus overrides -> FrameworkImport (the config says its schedule)."""
    flat, result, v = begin_import("areal", path, overrides, what="AReaL config", rules=RULES, defaults=DEFAULTS,
                                   defaults_source=DEFAULTS_SOURCE, schedule=schedule,
                                   schedule_fix="set rollout.scheduling_strategy.type=colocation or separation in "
                                                "the config")
    source = result.source
    user_model = model_set_by_user(user_sets)
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    rollout_spec, actor_spec = _backends(v, decided)
    rollout_engine, rollout_dims = parse_backend(rollout_spec, "rollout.backend", source, ("sglang", "vllm"))
    train_engine, train_dims = parse_backend(actor_spec, "actor.backend", source, ("fsdp", "megatron", "archon"))
    colocated = _colocated(v)
    result.schedule_rule = ("colocated (rollout.scheduling_strategy colocation: the engine and the actor share the "
                            "GPUs in turn)" if colocated else "areal (separation: asynchronous split pools)")
    inactive_section(flat, "vllm" if rollout_engine == "sglang" else "sglang",
                     f"the rollout runs on {rollout_engine} (rollout.backend): this engine's settings do not apply",
                     decided)
    for other in ("fsdp", "megatron", "archon"):
        if other != train_engine:
            inactive_section(flat, f"actor.{other}", f"the actor trains with {train_engine} (actor.backend): "
                             "this engine's settings do not apply", decided)
    train_gpus = _world(train_dims, "attn")
    rollout_gpus = _world(rollout_dims, "attn")
    if colocated and rollout_gpus != train_gpus:
        raise RlsimError(f"colocated engines on {rollout_gpus} GPUs beside an actor on {train_gpus}",
                         source=source, field="rollout.backend",
                         fix="give the rollout and the actor backends the same world size (d x t x p x c)")
    workload = _workload(v, rollout_engine, rollout_dims, train_engine, train_dims, "workload.model" in user_sets,
                         decided, user_model)
    sched = _schedule(v, colocated, rollout_gpus, train_dims["attn"]["dp"], workload, decided,
                      "schedule.consumer_batch_size" in user_sets, train_engine)
    gpus = (train_gpus if colocated else train_gpus + rollout_gpus) + workload.get("distillation", {}).get("devices", 0)
    per_node = v.count("cluster.n_gpus_per_node")
    topo, note = size_topology(topology, gpus, "rollout.backend + actor.backend (+ teacher.rollout.backend) world sizes",
                               source,
                               any(k.startswith("topology.") for k in user_sets), min(per_node, gpus))
    result.notes.append(note)
    if not any(k.startswith("topology.") or k.startswith("schedule.rollout") for k in user_sets):
        world_divides(v, train_gpus, workload["train_layout"], ["actor.backend"], f"AReaL's {train_engine} engine",
                      "actor.backend")
    result.scenario = {"topology": topo, "workload": workload, "schedule": sched}
    classify(result, flat, RULES, decided)
    result.notes.append("response-length law: not in a config; rlsim's default law capped at gconfig.max_new_tokens "
                        "(set --set workload.response_length.max / .median to refine)")
    return result


def _backends(v: Values, decided: dict[str, tuple[Status, str]]) -> tuple[Any, Any]:
    """rollout.backend and actor.backend, or where a config of AReaL 0.3 - 0.5 gives neither, its
    allocation_mode read as them: 'sglang.d4p1t1+d4p1t1' (the generation's engine and sizes, then
    the trainer's: its engine named there or by a bare actor.backend, else FSDP) -> sglang:d4p1t1 and fsdp:d4p1t1 (its
    decoupled allocation; a trial met the error on the absent rollout.backend)."""
    rollout, actor = v("rollout.backend"), v("actor.backend")
    mode = v("allocation_mode") if v.given("allocation_mode") else None
    if rollout is not None or not mode or (actor is not None and ":" in str(actor)):
        return rollout, actor
    match = re.fullmatch(r"(\w+)[.:]([dptce\d]+)\+(?:(\w+)[.:])?([dptce\d]+)", str(mode).strip())
    if not match:
        raise RlsimError(f"allocation_mode {mode!r} is not a decoupled allocation rlsim reads, and the config gives "
                         "no rollout.backend / actor.backend", source=v.result.source, field="allocation_mode",
                         fix="give rollout.backend=ENGINE:DIMS actor.backend=ENGINE:DIMS (e.g. sglang:d4 and fsdp:d4)")
    # the trainer's engine: named in the string, else the actor's bare backend (0.5: `backend: fsdp`), else FSDP
    engine = match.group(3) or (str(actor).strip() if actor is not None else "fsdp")
    rollout, actor = f"{match.group(1)}:{match.group(2)}", f"{engine}:{match.group(4)}"
    decided["allocation_mode"] = ("mapped", f"AReaL 0.3 - 0.5's allocation: rollout.backend {rollout}, "
                                            f"actor.backend {actor}")
    return rollout, actor


_DIM_NAMES = {"d": "dp", "p": "pp", "t": "tp", "c": "cp", "e": "ep"}
# AReaL 1.0.4's ALLOCATION_GRAMMAR (api/alloc_mode.py:594-638): sizes are NUMBER /[1-9][0-9]*/,
# whitespace between tokens is ignored (%ignore WS); an inference backend takes d / t / p
# (INF_DIM_TYPE), a training one d / p / t / c / e, or the hybrid attn (c d t p) | ffn (d e t p)
# sections, parentheses optional ("("? attn_section "|" ffn_section ")"?) and no name.
INFERENCE_BACKENDS = ("sglang", "vllm")
_SIZE = r"\s*[1-9]\d*"
_HEAD = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\[\s*([A-Za-z_]\w*)\s*\]\s*)?:(.*)", re.S)


def _dims_pattern(letters: str) -> str:
    return rf"(?:\s*[{letters}]{_SIZE})+\s*"


_HYBRID = re.compile(rf"\s*\(?\s*attn\s*:({_dims_pattern('cdtp')})\|\s*ffn\s*:({_dims_pattern('detp')})\)?\s*",
                     re.S)


def parse_backend(value: Any, key: str, source: str, engines: tuple[str, ...]) -> tuple[str, dict[str, dict[str, int]]]:
    """``engine[name]:dims`` as AReaL's grammar reads it (ModelAllocation.from_str: ``sglang:d4t2``,
    ``fsdp[actor]:d8``, ``megatron:(attn:d1p4t2|ffn:d1p4e2)``, ``fsdp:d2 t2``) -> (engine, {"attn":
    sizes, "ffn": sizes}); a plain spec gives both parts the same sizes."""
    text = "" if value is None else str(value)
    head = _HEAD.fullmatch(text)
    if not head or head.group(1) not in engines:
        raise RlsimError(f"{key} {value!r} is not an AReaL backend spec", source=source, field=key,
                         fix=f"give ENGINE:DIMS or ENGINE[NAME]:DIMS with ENGINE one of {', '.join(engines)}, "
                             f"e.g. {engines[0]}:d4t2")
    engine, named, spec = head.group(1), head.group(2) is not None, head.group(3)
    letters = "dtp" if engine in INFERENCE_BACKENDS else "dptce"
    hybrid = None if engine in INFERENCE_BACKENDS or named else _HYBRID.fullmatch(spec)
    parts = {"attn": hybrid.group(1), "ffn": hybrid.group(2)} if hybrid else {"attn": spec, "ffn": spec}
    if not hybrid and not re.fullmatch(_dims_pattern(letters), spec):
        raise RlsimError(f"{key}: {spec.strip()!r} is not a parallel spec of {engine}'s {'/'.join(letters)} sizes",
                         source=source, field=key,
                         fix="write sizes >= 1 as d4t2p2 (data, tensor, pipeline: an inference backend takes no "
                             "c / e)" if letters == "dtp" else "write sizes >= 1 as d4t2p2c1e1 (data, tensor, "
                             "pipeline, context, expert), or ENGINE:(attn:DIMS|ffn:DIMS) without a [NAME]")
    if hybrid:
        dims = {part: _sizes(text_dims) for part, text_dims in parts.items()}
        _check_ffn_world(dims, parts["ffn"], key, source)
    else:   # one mapping for both parts: `dims["ffn"] is dims["attn"]` tells a plain spec (no expert t of its own)
        sizes = _sizes(spec)
        dims = {"attn": sizes, "ffn": sizes}
    if engine == "fsdp" and (dims["attn"]["pp"] > 1 or dims["attn"]["ep"] > 1 or dims["ffn"]["ep"] > 1):
        raise RlsimError(f"{key} {text.strip()!r}: FSDP supports data, tensor and context parallelism only",
                         source=source, field=key, fix="drop the p / e sizes, or use megatron")
    return engine, dims


def _check_ffn_world(dims: dict[str, dict[str, int]], ffn_text: str, key: str, source: str) -> None:
    """A hybrid spec's ffn part as AReaL's hybrid_train_para (api/alloc_mode.py) takes it: its p the
    attention's (inherited when left out), its d derived from the attention world when left out (which
    p x t x e must divide), its world d x p x t x e the attention's; it raises on the rest. Fills in the
    inherited p and derived d."""
    attn, ffn = dims["attn"], dims["ffn"]
    given = set(re.findall(r"([dptce])\s*\d+", ffn_text))
    world = _world(dims, "attn")
    spec = f"{key}: AReaL's hybrid spec"
    if "p" in given and ffn["pp"] != attn["pp"]:
        raise RlsimError(f"{spec}: the ffn part's p{ffn['pp']} is not the attention's p{attn['pp']} (alloc_mode.py "
                         "refuses it)", source=source, field=key,
                         fix=f"give the ffn part p{attn['pp']}, or leave its p out (it takes the attention's)")
    ffn["pp"] = attn["pp"]
    rest = ffn["pp"] * ffn["tp"] * ffn["ep"]
    if "d" not in given:
        if world % rest:
            raise RlsimError(f"{spec}: the attention world {world} does not divide over the ffn part's p{ffn['pp']} "
                             f"x t{ffn['tp']} x e{ffn['ep']} = {rest} (alloc_mode.py cannot derive its d)",
                             source=source, field=key, fix=f"give the ffn part t x e dividing {world // ffn['pp']}")
        ffn["dp"] = world // rest
    elif ffn["dp"] * rest != world:
        raise RlsimError(f"{spec}: its expert world {ffn['dp'] * rest} (d{ffn['dp']} x p{ffn['pp']} x t{ffn['tp']} x "
                         f"e{ffn['ep']}) is not the attention world {world} (alloc_mode.py refuses it)",
                         source=source, field=key,
                         fix="give the ffn part d x p x t x e = " + str(world) + ", or leave its d out (derived)")


def _sizes(text_dims: str) -> dict[str, int]:
    """'d4 t2' -> {dp: 4, tp: 2, pp: 1, cp: 1, ep: 1} (a repeated letter: the last, as AReaL's transformer)."""
    sizes = {name: 1 for name in _DIM_NAMES.values()}
    for letter, size in re.findall(r"([dptce])\s*(\d+)", text_dims):
        sizes[_DIM_NAMES[letter]] = int(size)
    return sizes


def _world(dims: Mapping[str, Mapping[str, int]], part: str) -> int:
    sizes = dims[part]
    return sizes["dp"] * sizes["tp"] * sizes["pp"] * sizes["cp"]


def _colocated(v: Values) -> bool:
    """AReaL's _is_actor_rollout_colocated: the rollout colocated with the actor, or the reverse."""
    kinds = ("separation", "colocation")
    return "colocation" in (_choice(v, "rollout.scheduling_strategy.type", kinds),
                            _choice(v, "actor.scheduling_strategy.type", kinds))


def _dtype(value: Any, key: str, source: str) -> str:
    if str(value) not in DTYPES:
        raise RlsimError(f"unknown dtype {value!r}", source=source, field=key, fix=f"use one of: {', '.join(DTYPES)}")
    return DTYPES[str(value)]


def _workload(v: Values, rollout_engine: str, rollout_dims: Mapping[str, Mapping[str, int]], train_engine: str,
              train_dims: Mapping[str, Mapping[str, int]], model_given: bool,
              decided: dict[str, tuple[Status, str]], user_model: Any = None) -> dict[str, Any]:
    """``user_model``: the --set workload.model's value, where known (model_set_by_user): the model the run
    trains, whose experts decide the expert TP default as the config's model's do."""
    src = v.result.source
    w = begin_workload(v, "actor.path", "AReaL config", model_given, decided)
    model = w.get("model", user_model)   # the model trained: the config's, or the one --set gives
    prompts, n = v.count("train_dataset.batch_size"), v.count("gconfig.n_samples")
    minis = v.count("actor.ppo_n_minibatches")
    if prompts % minis:
        fits = [d for d in range(minis, 0, -1) if prompts % d == 0][:3]
        raise RlsimError(f"ppo_n_minibatches {minis} does not divide the batch of {prompts} prompts", source=src,
                         field="actor.ppo_n_minibatches",
                         fix=f"rlsim's mini-batches take whole prompt groups: use one of {fits}, or change "
                             "train_dataset.batch_size")
    w.update(algorithm="grpo", prompts_per_step=prompts, samples_per_prompt=n, mini_batch_prompts=prompts // minis,
             ppo_epochs=1)
    engine_len = v.count("sglang.context_length" if rollout_engine == "sglang" else "vllm.max_model_len")
    max_tokens = min(v.count("gconfig.max_tokens"), engine_len)
    w["prompt_length"] = capped_length("prompt_length", min(v.whole("train_dataset.max_length", max_tokens - 1),
                                                            max_tokens - 1), "train_dataset.max_length", src,
                                       v.result.notes)
    w["response_length"] = capped_length("response_length", min(v.count("gconfig.max_new_tokens"), max_tokens),
                                         "gconfig.max_new_tokens", src, v.result.notes)
    w["train_layout"] = without_inapplicable_layout_keys(
        _train_layout(v, train_engine, train_dims, prompts * n // minis, model, decided), model, {}, decided)   # etp: set on MoE models only (_megatron_expert_tp, _archon_experts)
    if train_engine != "megatron":   # transformers' model code (archon: torchtitan's, op for op the same) under
        # FSDP2 (ZeRO 3), TP, Ulysses (archon: pipelines too): params.AREAL_FSDP, AREAL_ARCHON
        w["train_software"] = hf_train_software(False, f"areal-{train_engine}")
        if w["train_layout"].get("tp", 1) == 1:   # with TP its vocab-parallel log-softmax: Megatron's count
            merge_train_params(w, {"compute": logprob_traffic(COMPILED_LOG_SOFTMAX_BYTES, False)})
    w["rollout_layout"] = _rollout_layout(v, rollout_engine, rollout_dims)
    w["engine"] = SGLANG_ENGINE if rollout_engine == "sglang" else VLLM_ENGINE
    v.result.notes.append(ENGINE_NOTE[rollout_engine])
    w["inference"] = _inference(v, rollout_engine, max_tokens)
    w["reference"] = _reference(v, decided)
    _critic(v, w, decided)
    _teacher(v, w)
    w["dtype"] = _dtype(v("actor.dtype"), "actor.dtype", src)
    _resident_state(v, w, train_engine, decided)
    if train_engine != "megatron" and v.flag(f"actor.{train_engine}.offload_params"):
        merge_train_params(w, {"offload": {"fsdp_cpu_offload": True}})
    if train_engine == "archon" and (reshard := _archon_reshard_after_forward(v)) is not None:
        merge_train_params(w, {"memory": {"zero3_reshard_after_forward": reshard}})
    return w


# AReaL 1.0.4's FSDP engine loads the model in actor.optimizer_dtype (float32, the value rlsim takes;
# areal/engine/fsdp_engine.py _create_device_model: "Load weights in optimizer_dtype (typically fp32)
# to maintain master weights. FSDP2 MP casts to compute dtype on-the-fly"): that shard is the master
# copy (4 bytes), FSDP2 casts each reduced gradient shard back to it (4), and the optimizer state is
# by optimizer.type (_create_optimizer): torch.optim.AdamW's fp32 m and v (8), AnyPrecisionAdamW's
# bf16 m, v and Kahan compensation (engine/fsdp_utils/optimizer.py: 6), SGD without momentum none.
# The archon engine keeps its parameters in actor.dtype, no master copy (experimental/engine/
# archon_engine.py: model.to(config.dtype)), its gradients and AdamW's m and v in that dtype too
# (archon_utils.create_optimizer: adam or sgd only).
AREAL_FSDP_OPTIMIZER_BYTES = {"adam": 8.0, "adam_bf16": 6.0, "sgd": 0.0}
AREAL_FP32_MASTER_BYTES = 4.0


def _resident_state(v: Values, w: dict[str, Any], train_engine: str,
                    decided: dict[str, tuple[Status, str]]) -> None:
    """The FSDP and archon engines' resident training state a parameter, onto workload.train_params.memory
    (the megatron engine's is Megatron's distributed optimizer: _megatron_optimizer)."""
    kind = str(v("actor.optimizer.type") or "adam")
    if train_engine == "megatron":
        _megatron_optimizer(v, w, kind, decided)
        return
    if kind not in AREAL_FSDP_OPTIMIZER_BYTES or (train_engine == "archon" and kind == "adam_bf16"):
        raise RlsimError(f"actor.optimizer.type {kind!r} is not one of AReaL's {train_engine} engine's",
                         source=v.result.source, field="actor.optimizer.type",
                         fix="use adam or sgd" + (", or adam_bf16 with the fsdp engine" if train_engine == "archon"
                                                  else " or adam_bf16"))
    if train_engine == "archon":
        master = DTYPE_BYTES[w["dtype"]]   # the parameters in actor.dtype are their own master copy
        memory = {"grad_bytes_per_param": master, "optimizer_bytes_per_param": 2 * master if kind == "adam" else 0.0}
    else:
        master = AREAL_FP32_MASTER_BYTES
        memory = {"resident_weight_bytes_per_param": master, "grad_bytes_per_param": master,
                  "optimizer_bytes_per_param": AREAL_FSDP_OPTIMIZER_BYTES[kind]}
    # the step updates the master shard in place, no low-precision copy to write back as Megatron's
    # distributed optimizer does (rlsim's default 30): fsdp's AdamW 28, adam_bf16 24, sgd 12 B a
    # parameter; archon's in bf16 (archon_engine.py model.to(config.dtype); archon_utils.create_optimizer
    # AdamW over those parameters, its m and v in their dtype) AdamW 14, sgd 6
    step = fsdp_step_traffic(master, memory["optimizer_bytes_per_param"])
    merge_train_params(w, {"memory": memory, "comm": {"optimizer_traffic_bytes_per_param": step}})


# AReaL 1.0.4's megatron engine hands optimizer.type to Megatron-Core's OptimizerConfig (engine/
# megatron_engine.py _create_optimizer: adam or sgd, sgd_momentum left at Megatron's 0.9): adam is rlsim's
# Megatron default (12 B a parameter, a 30 B step), sgd keeps one fp32 momentum beside the main parameters
# (verl_optimizer.MEGATRON_OPTIMIZER_STATE). adam_bf16 becomes adam with the precision-aware optimizer and
# bf16 exp_avg / exp_avg_sq (_normalize_adam_bf16_config), which rlsim does not model.
AREAL_MEGATRON_ADAM_BF16 = ("the megatron engine turns adam_bf16 into Megatron's precision-aware optimizer with "
                            "bf16 moments (megatron_engine.py _normalize_adam_bf16_config), which is not "
                            "modelled: rlsim prices fp32 moments")


def _megatron_optimizer(v: Values, w: dict[str, Any], kind: str, decided: dict[str, tuple[Status, str]]) -> None:
    """The megatron engine's optimizer.type onto workload.train_params (sgd's state and step), or listed
    unsupported (adam_bf16)."""
    if kind == "adam_bf16":
        decided["actor.optimizer.type"] = ("unsupported", AREAL_MEGATRON_ADAM_BF16)
        return
    if kind not in MEGATRON_OPTIMIZER_STATE:
        raise RlsimError(f"actor.optimizer.type {kind!r} is not one of AReaL's megatron engine's",
                         source=v.result.source, field="actor.optimizer.type", fix="use adam, sgd or adam_bf16")
    if kind == "adam":
        return
    state = MEGATRON_OPTIMIZER_STATE[kind]
    step = MEGATRON_WEIGHT_WRITE_BYTES + MEGATRON_GRAD_BYTES + 2 * state
    merge_train_params(w, {"memory": {"optimizer_bytes_per_param": state},
                           "comm": {"optimizer_traffic_bytes_per_param": step}})


def _teacher(v: Values, w: dict[str, Any]) -> None:
    """AReaL's teacher on inference servers (teacher.engine_type rollout) -> workload.distillation:
    its model (teacher.path), its servers' GPUs and TP (teacher.rollout.backend), handed the trainer's
    batch after the reference pass (handover step), each server answering one request at a time."""
    if not any(key.startswith("teacher.") for key in v.flat):   # no section, or teacher: null (AReaL's default)
        return
    src = v.result.source
    if str(v("teacher.engine_type") or "rollout") != "rollout":
        raise RlsimError("the legacy train-engine teacher (teacher.engine_type train) is not modelled", source=src,
                         field="teacher.engine_type", fix="serve the teacher on inference servers: "
                                                          "teacher.engine_type=rollout with teacher.rollout.backend")
    engine, dims = parse_backend(v("teacher.rollout.backend"), "teacher.rollout.backend", src, ("sglang", "vllm"))
    if v("teacher.path"):
        teacher, how = model_for(v("teacher.path"), "teacher.path", src, policy=False)
        v.result.notes.append(f"teacher.path {v('teacher.path')!r} -> {how}")
    else:   # _init_teacher_rollout: the path overrides the shared engine config's model, the rollout's
        teacher = w["model"]
        v.result.notes.append(f"teacher.path empty: AReaL serves the rollout's model ({teacher}) as the teacher")
    layout = _rollout_layout(v, engine, dims)
    layout = {key: layout[key] for key in ("tp", "ep", "pp", "gpu_memory_utilization", "max_num_seqs") if key in layout}
    w["distillation"] = {"teacher": teacher, "devices": _world(dims, "attn"), "layout": layout, "handover": "step",
                         "one_at_a_time": True}


def _critic(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """A critic section: PPO (rl_trainer builds a critic engine and runs compute_values and its
    ppo_update each step), its value model where it is not the actor's, its token budget and offload.
    It must share the actor's GPUs (scheduling_strategy colocation, its recipes' placement)."""
    if not v.section("critic"):
        return
    src = v.result.source
    w["algorithm"] = "ppo"
    if v.given("critic.path") and v("critic.path") != v("actor.path"):
        w["critic_model"], how = model_for(v("critic.path"), "critic.path", src, policy=False)
        v.result.notes.append(f"critic.path {v('critic.path')!r} -> {how}")
    if v.given("critic.backend") and v("critic.backend") == v("actor.backend"):
        decided["critic.backend"] = ("ignored", "the actor's layout, with which rlsim runs the critic")
    tokens = v.whole("critic.mb_spec.max_tokens_per_mb")
    if tokens is not None and "max_tokens_per_micro_batch" in w["train_layout"]:
        w["critic_batching"] = {"max_tokens_per_micro_batch": tokens, "forward_max_tokens_per_micro_batch": tokens}
    elif tokens is not None:
        decided["critic.mb_spec.max_tokens_per_mb"] = ("unsupported", "a token budget beside the actor's sample "
                                                       "micro-batches (give actor.mb_spec.max_tokens_per_mb too)")
    if v.flag("critic.offload"):
        w["critic_offload"] = {"params": True, "optimizer": True}
    if v.given("critic.ppo_n_minibatches") and v("critic.ppo_n_minibatches") == v("actor.ppo_n_minibatches"):
        decided["critic.ppo_n_minibatches"] = ("ignored", "the actor's mini-batches, on which rlsim trains the critic")


def _reference(v: Values, decided: dict[str, tuple[Status, str]]) -> bool:
    """AReaL builds a reference engine only with actor.kl_ctl > 0 and a ref section (rl_trainer.py)."""
    kl = _number(v, "actor.kl_ctl")
    if kl > 0 and not v.section("ref"):
        decided["actor.kl_ctl"] = ("ignored", "no ref section: AReaL builds no reference model, so no KL term runs")
    if kl > 0 and v.section("ref"):   # rlsim prices the reference pass as the actor's model at its budget
        if v.given("ref.path") and v("ref.path") != v("actor.path"):
            decided["ref.path"] = ("unsupported", "a reference model other than the actor's is not modelled: rlsim "
                                                  "prices the reference pass with the actor's model")
        budget = "ref.mb_spec.max_tokens_per_mb"
        if v.given(budget) and v(budget) != v("actor.mb_spec.max_tokens_per_mb"):
            decided[budget] = ("unsupported", "a reference budget of its own is not modelled: rlsim prices the "
                                              "reference pass at the actor's actor.mb_spec.max_tokens_per_mb")
    return kl > 0 and v.section("ref")


def _number(v: Values, key: str) -> float:
    value = v(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RlsimError(f"expected a number, got {value!r}", source=v.result.source, field=key, fix=f"pass {key}=0.1")
    return float(value)


def _choice(v: Values, key: str, choices: tuple[str, ...]) -> str:
    value = v(key)
    if value not in choices:
        raise RlsimError(f"{value!r} is not one of AReaL's choices", source=v.result.source, field=key,
                         fix=f"use one of: {', '.join(choices)}")
    return str(value)


def _train_layout(v: Values, engine: str, dims: Mapping[str, Mapping[str, int]], mini_samples: int,
                  model: Any, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    attn, ffn = dims["attn"], dims["ffn"]
    layout: dict[str, Any] = {"tp": attn["tp"], "pp": attn["pp"], "cp": attn["cp"]}
    checkpointing = v.flag("actor.gradient_checkpointing")
    if engine == "megatron":
        layout["ep"] = ffn["ep"]
        layout.update(_megatron_expert_tp(v, dims, model))
        layout["vpp"] = v.whole("actor.megatron.virtual_pipeline_parallel_size", 1)
        layout["zero"] = 1 if v.flag("actor.megatron.ddp.use_distributed_optimizer") else 0
        layout.update(megatron_recompute(v, "actor.megatron", decided) if checkpointing else {"recompute": "none"})
        for key in (f"actor.megatron.{name}" for name in RECOMPUTE_KEYS):
            if not checkpointing and v.given(key):
                decided[key] = ("ignored", "used only with gradient_checkpointing")
    else:
        layout.update(zero=3, recompute=_archon_recompute(v, decided) if engine == "archon" and checkpointing
                      else "full" if checkpointing else "none")
        if engine == "archon" and not checkpointing and v.given("actor.archon.ac_mode"):
            decided["actor.archon.ac_mode"] = ("ignored", "used only with gradient_checkpointing")
        if attn["tp"] > 1:   # both TP plans shard the norms' sequence (SequenceParallel(): areal 1.0.4
            layout["sequence_parallel"] = True   # engine/fsdp_utils/parallel.py, archon's infra/parallelize.py apply_tp)
        if attn["cp"] > 1:   # c is Ulysses there: fsdp_utils/parallel.py sp_size = cp_size, fsdp_engine.py
            layout["ulysses_sp"] = True   # patches attention with Ulysses; archon slices with archon/ulysses
        if engine == "archon":
            layout.update(_archon_experts(v, dims))
            layout.update(_archon_pipeline(v, attn["pp"], model, decided))
    tokens = v.whole("actor.mb_spec.max_tokens_per_mb")
    least = _micro_batch_count(v, engine, layout)
    if tokens is not None and least > v.whole("actor.mb_spec.n_mbs", 1):
        v.result.notes.append(f"archon's pipeline splits a batch into at least {least} micro-batches, a multiple of "
                              f"p {layout['pp']} (archon_engine.py _prepare_mb_list: p x stages a rank), which "
                              "rlsim's token budget (actor.mb_spec.max_tokens_per_mb) does not enforce; it also pads "
                              "each to the budget (force_pad_to_maximum), which rlsim does not model")
    if tokens is not None:   # compute_logp splits the batch by the same spec
        layout["max_tokens_per_micro_batch"] = layout["logprob_max_tokens_per_micro_batch"] = tokens
        if v.whole("actor.mb_spec.n_mbs", 1) == 1:
            decided["actor.mb_spec.n_mbs"] = ("ignored", "1: the token budget sets the micro-batches")
        else:   # AReaL: at least n_mbs micro-batches (utils/data.py allocate_balanced_mbs, min_groups=n_mbs)
            decided["actor.mb_spec.n_mbs"] = ("unsupported", "with max_tokens_per_mb AReaL splits into at least "
                                              "n_mbs micro-batches (min_groups): rlsim's token budget sets the count "
                                              "alone (priced as n_mbs 1)")
    else:   # a mini-batch's samples per data-parallel rank in n_mbs micro-batches
        per_rank = -(-mini_samples // attn["dp"])
        layout["micro_batch"] = -(-per_rank // least)
    return layout


def _expert_tp(dims: Mapping[str, Mapping[str, int]]) -> int:
    """The experts' tensor-parallel size AReaL hands its engines (alloc_mode.py ParallelStrategy
    .expert_tensor_parallel_size): 1 for a plain spec (its dataclass default: parse_backend gives both parts one
    mapping), the hybrid spec's ffn t."""
    return 1 if dims["ffn"] is dims["attn"] else dims["ffn"]["tp"]


def _megatron_expert_tp(v: Values, dims: Mapping[str, Mapping[str, int]], model: Any) -> dict[str, int]:
    """The megatron engine's expert tensor-parallel size: ParallelStrategy.expert_tensor_parallel_size, which
    megatron_engine.py hands to mpu.initialize_model_parallel (areal 1.0.4): 1 for a plain spec (alloc_mode.py's
    dataclass default), the hybrid spec's ffn t (1 when it gives none). AReaL never leaves it None, so
    Megatron-Core's default (the experts split over tp) does not apply. train_layout.etp where it differs from
    tp, on a model with experts (a dense model has none to split; the config's model or the one --set gives;
    a model not known here, a sweep's --grid key, is taken as MoE at e > 1, and at e 1 a note says how to
    give it)."""
    attn, ffn = dims["attn"], dims["ffn"]
    etp = _expert_tp(dims)
    if etp == attn["tp"]:
        return {}
    if model is None and ffn["ep"] == 1:
        v.result.notes.append(f"actor.backend: AReaL's megatron engine splits the experts over expert tp {etp} "
                              f"(expert_tensor_parallel_size), not tp {attn['tp']}; the model, given by a --grid, "
                              f"is not read here: for an MoE model give --set workload.train_layout.etp={etp}")
    return {"etp": etp} if has_experts(model, ffn["ep"]) else {}


def _micro_batch_count(v: Values, engine: str, layout: Mapping[str, Any]) -> int:
    """The fewest micro-batches a batch splits into: mb_spec.n_mbs; under archon's pipeline at least p x
    stages a rank, rounded up to a multiple of p (archon_engine.py _prepare_mb_list: n_mbs=max(p x stages,
    n_mbs), n_mbs_divisor=p; utils/seqpack.py rounds the count up to the divisor)."""
    n_mbs, pp = v.whole("actor.mb_spec.n_mbs", 1), layout["pp"]
    if engine != "archon" or pp == 1:
        return n_mbs
    count = max(pp * layout.get("vpp", 1), n_mbs)
    return -(-count // pp) * pp


def _archon_experts(v: Values, dims: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """Archon's expert layout (models/archon/parallel_dims.py ArchonParallelDims; qwen3 infra/parallelize.py
    apply_moe_ep_tp) as rlsim's MoE folding: ep the e size; the experts' tp (etp) 1 for a plain spec
    (alloc_mode.py: expert_tensor_parallel_size defaults to 1) or the ffn part's t, 1 or tp. With ep > 1,
    etp 1 shards the experts over ep alone, the TP ranks borrowed by EP (train_layout.etp 1), etp = tp over
    ep x tp (etp unset: tp); with ep 1 the experts are TP-split (unset). Its checks refuse the rest."""
    attn, ffn = dims["attn"], dims["ffn"]
    ep, tp, cp = ffn["ep"], attn["tp"], attn["cp"]
    etp = _expert_tp(dims)
    src = v.result.source
    if etp not in (1, tp):
        raise RlsimError(f"archon's expert tensor parallel size {etp} is neither 1 nor the tp {tp} "
                         "(ArchonParallelDims refuses it)", source=src, field="actor.backend",
                         fix=f"give the ffn part t1 or t{tp}, e.g. archon:(attn:d{attn['dp']}t{tp}|ffn:t{tp}e{ep})")
    borrowed, what = (cp, "cp") if etp == tp else (cp * tp, "cp x tp")
    if ep > 1 and ep % borrowed:
        raise RlsimError(f"archon's ep {ep} is not a multiple of {what} = {borrowed}: its expert groups span whole "
                         f"{what} groups (ArchonParallelDims refuses it)", source=src, field="actor.backend",
                         fix=f"give an e size that is a multiple of {borrowed}" +
                             (f", or the ffn part t{tp} (then ep need be a multiple of cp alone)" if etp != tp else ""))
    if ep == 1:
        return {}
    return {"ep": ep, "etp": etp} if etp != tp else {"ep": ep}


# Archon's pipeline schedules (cli_args.py ArchonEngineConfig.pp_schedule; models/archon/pipeline_parallel.py
# pipeline_llm): 1F1B runs one stage a rank, the others two by default (or by pp_layers_per_stage); the
# zero-bubble ones split the backward into input and weight gradients, which rlsim's 1F1B / interleaved
# event model (llm/pipeline.py) does not: priced as Interleaved1F1B at the same stages a rank.
ARCHON_PP_SCHEDULES = ("1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble")
ARCHON_ZERO_BUBBLE = ("InterleavedZeroBubble", "ZBVZeroBubble")
ARCHON_PP_KEYS = ("actor.archon.pp_schedule", "actor.archon.pp_layers_per_stage",
                  "actor.archon.pp_first_stage_less_layers", "actor.archon.pp_last_stage_less_layers")


def _archon_pipeline(v: Values, pp: int, model: Any, decided: dict[str, tuple[Status, str]]) -> dict[str, int]:
    """train_layout.vpp: the stages a rank of archon's pipeline schedule (none without a pipeline)."""
    if pp == 1:
        for key in ARCHON_PP_KEYS:
            if v.given(key):
                decided[key] = ("ignored", "no pipeline (actor.backend p 1): archon builds no pipeline stages")
        return {}
    key = "actor.archon.pp_schedule"
    schedule = _choice(v, key, ARCHON_PP_SCHEDULES)
    per_stage = v.whole("actor.archon.pp_layers_per_stage")
    stages = (1 if schedule == "1F1B" else 2) if per_stage is None else \
        _archon_stages_from_layers(v, pp, schedule, per_stage, model, decided)
    if schedule in ARCHON_ZERO_BUBBLE:
        decided[key] = ("unsupported", f"{schedule} (zero-bubble: the backward split into its input and weight "
                                       "gradients) is not modelled: priced as Interleaved1F1B at its "
                                       f"{stages} stages a rank")
    elif not v.given(key):
        v.result.notes.append(f"archon's pipeline runs {key} {schedule} (AReaL's default): {stages} stages a rank "
                              f"(train_layout.vpp {stages})")
    return {"vpp": stages}


def _archon_stages_from_layers(v: Values, pp: int, schedule: str, per_stage: int, model: Any,
                               decided: dict[str, tuple[Status, str]]) -> int:
    """pipeline_llm with pp_layers_per_stage: ceil((layers + first_less + last_less) / it) virtual stages, a
    multiple of p, 1 a rank for 1F1B, 2 or more for the others, exactly 2 for ZBVZeroBubble."""
    key, default = "actor.archon.pp_layers_per_stage", 1 if schedule == "1F1B" else 2
    if model is None:
        decided[key] = ("unsupported", f"the model is given by a --grid, its layer count not read here: priced at "
                                       f"{schedule}'s {default} stages a rank")
        return default
    from ..llm.architecture import load_model
    layers = int(load_model(model).num_layers)
    first, last = v.natural("actor.archon.pp_first_stage_less_layers"), v.natural("actor.archon.pp_last_stage_less_layers")
    virtual = -(-(layers + first + last) // per_stage)
    src, counted = v.result.source, f"ceil(({layers} + {first} + {last}) / {per_stage})"
    if virtual % pp:
        raise RlsimError(f"{virtual} virtual stages do not divide over p {pp} ({counted}: pipeline_llm refuses "
                         "them)", source=src, field=key,
                         fix=f"give a pp_layers_per_stage that makes a multiple of {pp} stages, or drop it "
                             f"({schedule}'s {default} stages a rank)")
    stages = virtual // pp
    wants = {"1F1B": (stages == 1, "1 stage"), "ZBVZeroBubble": (stages == 2, "2 stages")}.get(
        schedule, (stages >= 2, "2 or more stages"))
    if not wants[0]:
        raise RlsimError(f"{schedule} runs {wants[1]} a rank, and pp_layers_per_stage {per_stage} gives {stages} "
                         f"({counted} / p {pp}: pipeline_llm refuses it)", source=src, field=key,
                         fix=f"drop pp_layers_per_stage ({schedule}'s {default} stages a rank), or use "
                             + ("Interleaved1F1B" if schedule == "1F1B" else "1F1B" if stages == 1 else
                                "a pp_layers_per_stage giving 2 stages a rank"))
    return stages


# Archon's FSDP2 reshard policy (cli_args.py ArchonEngineConfig.reshard_after_forward_policy; qwen2 / qwen3
# infra/parallelize.py apply_fsdp): default reshards each block after its forward unless pipelines are on
# ("to avoid per-microbatch all-gathers"), always / never as said. "default" is the areal-archon stack's
# own value (params.ARCHON_PIPELINE_FSDP: zero3_reshard_after_forward "unless_pipelined", read at the
# layout's pp, so that a plan or layout: auto prices it as a run does); the others are written over it.
ARCHON_RESHARD_POLICIES = {"default": None, "always": True, "never": False}


def _archon_reshard_after_forward(v: Values) -> bool | None:
    """memory.zero3_reshard_after_forward of actor.archon.reshard_after_forward_policy; None: the stack's."""
    return ARCHON_RESHARD_POLICIES[_choice(v, "actor.archon.reshard_after_forward_policy",
                                           tuple(ARCHON_RESHARD_POLICIES))]


# Archon's activation checkpointing (areal 1.0.4 experimental/engine/archon_utils.py build_ac_config, with
# gradient_checkpointing) by actor.archon.ac_mode: full checkpoints whole blocks, none nothing; selective
# (the default, selective_ac_option "op": infra/parallelize.py _get_op_sac_save_list keeps the matmuls' and
# the attention's outputs, recomputes the element-wise ops) and memory_budget are rlsim's neither.
ARCHON_AC_MODES = ("full", "none", "selective", "memory_budget")
ARCHON_UNMODELLED_AC = ("torchtitan's op-level selective activation checkpointing (the matmuls' and attention's "
                        "outputs kept, the element-wise ops recomputed) is not modelled: priced as full recompute")


def _archon_recompute(v: Values, decided: dict[str, tuple[Status, str]]) -> str:
    key = "actor.archon.ac_mode"
    mode = _choice(v, key, ARCHON_AC_MODES)
    if mode in ("full", "none"):
        return mode
    reason = ARCHON_UNMODELLED_AC if mode == "selective" else ("memory_budget (torch.compile's min-cut "
                                                               "recompute) is not modelled: priced as full recompute")
    if v.given(key):
        decided[key] = ("unsupported", reason)
    else:
        v.result.notes.append(f"gradient_checkpointing on archon runs {key} selective (AReaL's default): {reason}")
    return "full"


def _rollout_layout(v: Values, engine: str, dims: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    src, sizes = v.result.source, dims["attn"]   # d / t / p only: parse_backend refuses c and e
    layout: dict[str, Any] = {"tp": sizes["tp"]}
    if sizes["pp"] > 1:   # vLLM's pipeline_parallel_size / SGLang's pp_size (AReaL's build_args)
        layout["pp"] = sizes["pp"]
    if engine == "sglang":
        layout["gpu_memory_utilization"] = v.fraction("sglang.mem_fraction_static")
        if v("sglang.max_running_requests") is not None:
            layout["max_num_seqs"] = v.count("sglang.max_running_requests")
        dtype, kv = _dtype(v("sglang.dtype"), "sglang.dtype", src), str(v("sglang.kv_cache_dtype") or "auto").lower()
    else:
        layout["gpu_memory_utilization"] = v.fraction("vllm.gpu_memory_utilization")
        layout["max_num_seqs"] = v.count("vllm.max_num_seqs")
        dtype, kv = _dtype(v("vllm.dtype"), "vllm.dtype", src), "auto"
    layout["weight_dtype"] = layout["kv_dtype"] = dtype
    if kv.startswith("fp8"):
        layout["kv_dtype"] = "fp8"
    elif kv != "auto":
        raise RlsimError(f"kv_cache_dtype {kv!r} is not one rlsim prices", source=src, field="sglang.kv_cache_dtype",
                         fix="use auto (the weights' dtype) or fp8")
    return layout


def _inference(v: Values, engine: str, max_tokens: int) -> dict[str, Any]:
    """The engine's switches as AReaL passes them (both engines' own defaults differ from AReaL's:
    it turns SGLang's radix cache and vLLM's prefix caching off)."""
    inference: dict[str, Any] = {"max_model_len": max_tokens}
    if engine == "sglang":
        inference["enforce_eager"] = v.flag("sglang.disable_cuda_graph")
        inference["enable_prefix_caching"] = not v.flag("sglang.disable_radix_cache")
        if v.flag("sglang.disable_custom_all_reduce"):
            inference["custom_all_reduce"] = False
        if v("sglang.cuda_graph_max_bs") is not None and not inference["enforce_eager"]:
            inference["cuda_graph_max_batch"] = v.count("sglang.cuda_graph_max_bs")
        chunk = v("sglang.chunked_prefill_size")   # SGLang: -1 turns chunked prefill off
        if chunk is not None and chunk != -1:
            inference.update(chunked_prefill=True, max_num_batched_tokens=v.count("sglang.chunked_prefill_size"))
        else:
            inference["chunked_prefill"] = False
    else:
        inference["enforce_eager"] = v.flag("vllm.enforce_eager")
        inference["enable_prefix_caching"] = not v.flag("vllm.no_enable_prefix_caching")
        if v.flag("vllm.no_enable_chunked_prefill"):
            inference["chunked_prefill"] = False
    return inference


def _recomputes_logprob(v: Values) -> bool:
    """PPOActorConfig.should_compute_prox_logp: the decoupled loss recomputes the proximal log-probs
    unless prox_logp_method is loglinear; without it, recompute_logprob alone."""
    if v.flag("actor.use_decoupled_loss"):
        return _choice(v, "actor.prox_logp_method", ("recompute", "loglinear", "metrics")) != "loglinear"
    return v.flag("actor.recompute_logprob")


def _refuse_a_consumer_batch_below_the_batch(v: Values, consumer: int, prompts: int) -> None:
    """AReaL's start rule lets (eta + version + 1) x consumer_batch_size rollouts start by each
    version: below the trained batch a later step's batch never fills (its default 1, cli_args.py
    RolloutConfig, lets one rollout start)."""
    given = v.given("rollout.consumer_batch_size")
    raise RlsimError(f"rollout.consumer_batch_size {consumer}{'' if given else ' (AReaL default)'} is below the "
                     f"{prompts} prompts a step trains (train_dataset.batch_size): by version v AReaL starts at most "
                     f"(max_head_offpolicyness + v + 1) x {consumer} rollouts, so a later step's batch never fills "
                     "and its trainer waits forever", source=v.result.source, field="rollout.consumer_batch_size",
                     fix="set rollout.consumer_batch_size=${train_dataset.batch_size} (AReaL's recipes) or at least "
                         f"{prompts}")


def _schedule(v: Values, colocated: bool, rollout_gpus: int, train_dp: int, w: Mapping[str, Any],
              decided: dict[str, tuple[Status, str]], consumer_set: bool = False, engine: str = "fsdp") -> dict[str, Any]:
    """consumer_set: the user's --set gives schedule.consumer_batch_size (it replaces the config's);
    engine: the actor's (its micro-batch count: _micro_batch_count)."""
    s: dict[str, Any] = {"kind": "colocated" if colocated else "areal"}
    eta = v.natural("rollout.max_head_offpolicyness")
    if colocated:
        _colocated_switch(v, s, w)
        neutral = {"rollout.max_head_offpolicyness": 0, "rollout.consumer_batch_size": w["prompts_per_step"]}
        for key in ("rollout.max_head_offpolicyness", "rollout.max_concurrent_rollouts", "rollout.consumer_batch_size"):
            if v.given(key) and v(key) != neutral.get(key, object()):
                decided[key] = ("unsupported", "colocated: rlsim generates one batch per step (AReaL's colocated mode "
                                               "generating ahead across the switch is not modelled)")
        if not _recomputes_logprob(v):
            for key in ("actor.recompute_logprob", "actor.use_decoupled_loss"):
                decided[key] = ("unsupported", "rlsim's colocated kind always runs the old log-prob pass")
    else:
        s["rollout_devices"] = rollout_gpus
        s["max_head_offpolicyness"] = eta
        if v("rollout.max_concurrent_rollouts") is not None:
            s["max_concurrent_rollouts"] = v.count("rollout.max_concurrent_rollouts")
        s["recompute_logprob"] = _recomputes_logprob(v)
        consumer = v.count("rollout.consumer_batch_size")
        if consumer < w["prompts_per_step"] and not consumer_set:
            _refuse_a_consumer_batch_below_the_batch(v, consumer, w["prompts_per_step"])
        if consumer != w["prompts_per_step"]:
            s["consumer_batch_size"] = consumer
            v.result.notes.append(f"rollout.consumer_batch_size {consumer} is not train_dataset.batch_size "
                                  f"{w['prompts_per_step']}: AReaL's start rule counts in batches of {consumer} "
                                  f"(at most {consumer} rollouts in flight unless max_concurrent_rollouts says more); "
                                  "its recipes set ${train_dataset.batch_size}")
    # the FSDP and Megatron engines always pack each micro-batch (fsdp_engine.py _prepare_mb_list:
    # pack_tensor_dict; attention over cu_seqlens); pad_to_maximum pads the packed rows, not the samples
    s["distqueue"] = {"packed": True}
    layout = w["train_layout"]
    if "max_tokens_per_micro_batch" not in layout:   # compute_logp: the batch per rank in n_mbs micro-batches
        per_rank = -(-w["prompts_per_step"] * w["samples_per_prompt"] // train_dp)
        s["forward_micro_batch"] = -(-per_rank // _micro_batch_count(v, engine, layout))
    return s


def _colocated_switch(v: Values, s: dict[str, Any], w: Mapping[str, Any]) -> None:
    """AReaL's colocated step offloads the engine between phases (SGLang release_memory_occupation:
    its memory released and re-mapped, no weight copy; vLLM's /sleep, level 1 by default) and the
    actor during the rollout (torch_memory_saver; rl_trainer.py _offload_rollout / _onload_model)."""
    s["switch"] = {"offload_weights": True}
    if w["engine"] == VLLM_ENGINE:
        s["switch"].update(engine_sleep=True, engine_sleep_level=1)
    v.result.notes.append("colocated: the engine gives its memory back between phases (SGLang: released and "
                          "re-mapped, the KV pool re-allocated; vLLM: sleep level 1) and the actor's weights go to "
                          "the host during the rollout (torch_memory_saver), as AReaL's colocated mode does")
