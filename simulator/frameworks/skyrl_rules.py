"""SkyRL's key table for `--from-skyrl`: every field of SkyRLTrainConfig (data, trainer, generator,
environment), as data.

Names and defaults as in skyrl 0.3.0 (skyrl/train/config/config.py, read in its wheel); the field
list the tests check the table against: tests/frameworks/data/skyrl-0.3.0-config-fields.txt.
"""
from __future__ import annotations

from typing import Any

from .common import OPTIMIZER_SETTINGS, SAMPLING_SETTINGS, Rule, ignored, mapped, unsupported

DEFAULTS_SOURCE = "SkyRL 0.3.0 skyrl/train/config/config.py (SkyRLTrainConfig's dataclass defaults)"
# SkyRL's defaults for the keys rlsim reads when a config leaves them out.
DEFAULTS: dict[str, Any] = {
    "trainer.placement.colocate_all": True, "trainer.placement.colocate_policy_ref": True,
    "trainer.placement.policy_num_nodes": 1, "trainer.placement.policy_num_gpus_per_node": 1,
    "trainer.placement.critic_num_nodes": 1, "trainer.placement.critic_num_gpus_per_node": 1,
    "trainer.placement.ref_num_nodes": 1, "trainer.placement.ref_num_gpus_per_node": 1,
    "trainer.strategy": "fsdp", "trainer.policy.model.path": "Qwen/Qwen2.5-1.5B-Instruct",
    "trainer.policy.optimizer_config.offload_after_step": True, "trainer.policy.fsdp_config.cpu_offload": False,
    "trainer.critic.optimizer_config.offload_after_step": True, "trainer.critic.fsdp_config.cpu_offload": False,
    "trainer.ref.fsdp_config.cpu_offload": False,
    "trainer.policy.fsdp_config.fsdp_size": -1, "trainer.policy.sequence_parallel_size": 1,
    "trainer.policy.megatron_config.tensor_model_parallel_size": 1,
    "trainer.policy.megatron_config.pipeline_model_parallel_size": 1,
    "trainer.policy.megatron_config.context_parallel_size": 1,
    "trainer.policy.megatron_config.expert_model_parallel_size": 1,
    "trainer.policy.megatron_config.expert_tensor_parallel_size": None,
    "trainer.policy.model.lora.rank": 0,
    "trainer.algorithm.advantage_estimator": "grpo", "trainer.algorithm.use_kl_in_reward": False,
    "trainer.algorithm.use_kl_loss": True, "trainer.algorithm.policy_loss_type": "regular",
    "trainer.algorithm.dynamic_sampling.type": None, "trainer.algorithm.dynamic_sampling.max_sample_batches": 30,
    "trainer.algorithm.off_policy_correction.tis_ratio_type": None,
    "trainer.algorithm.off_policy_correction.sequence_mask_metric": None,
    "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_low": None,
    "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_high": None,
    "trainer.algorithm.off_policy_correction.token_mask_is_threshold_low": None,
    "trainer.algorithm.off_policy_correction.token_mask_is_threshold_high": None,
    "trainer.algorithm.use_tis": False, "trainer.algorithm.use_entropy_loss": False,
    "trainer.policy.use_torch_compile": False,
    "trainer.fully_async.enabled": False, "trainer.fully_async.max_staleness_steps": 4,
    "trainer.fully_async.num_parallel_generation_workers": 768,
    "trainer.fully_async.clear_kv_cache_on_weight_sync": False,
    "trainer.gradient_checkpointing": True, "trainer.bf16": True, "trainer.update_epochs_per_batch": 1,
    "trainer.train_batch_size": 1024, "trainer.policy_mini_batch_size": 256, "trainer.critic_mini_batch_size": 256,
    "trainer.micro_train_batch_size_per_gpu": 1, "trainer.micro_forward_batch_size_per_gpu": 1,
    "trainer.max_tokens_per_microbatch": -1, "trainer.remove_microbatch_padding": True,
    "trainer.max_prompt_length": 512, "trainer.flash_attn": True,
    "generator.inference_engine.num_engines": 1, "generator.inference_engine.backend": "vllm",
    "generator.inference_engine.tensor_parallel_size": 1, "generator.inference_engine.pipeline_parallel_size": 1,
    "generator.inference_engine.expert_parallel_size": 1, "generator.inference_engine.data_parallel_size": 1,
    "generator.inference_engine.enable_prefix_caching": True, "generator.inference_engine.enable_chunked_prefill": True,
    "generator.inference_engine.max_num_batched_tokens": 8192, "generator.inference_engine.enforce_eager": False,
    "generator.inference_engine.gpu_memory_utilization": 0.8, "generator.inference_engine.max_num_seqs": 1024,
    "generator.inference_engine.model_dtype": "bfloat16",
    "generator.n_samples_per_prompt": 5, "generator.batched": False, "generator.max_turns": 1,
    "generator.sampling_params.max_generate_length": 1024, "generator.sampling_params.logprobs": 1,
}

_LOG = "logging, checkpoints, profiling and evaluation: rlsim step times exclude them"
_LOSS = "loss / advantage / reward arithmetic on tensors the step already holds: no modelled cost"
_DATA = "data loading and prompt formatting on the host: no modelled cost"
_LORA = "used only with lora.rank > 0"
_QAT = "used only with fake_int4_qat.enabled"
_MTP = "used only with multi-token prediction heads (mtp.enabled)"
_ENV = "the environment's reward code runs on the host per trajectory: rlsim's rule reward stands for it"
_NOT_TRAINED = "the model settings of a model this run does not build"
# The reference runs forward passes only: no gradient to reduce, whatever its reduction dtype
_NO_BACKWARD = "the reference runs forward passes only: it reduces no gradient"


class _PrecisionSpelling:
    """A neutral value that any of SkyRL's spellings of one dtype equals: skyrl 0.3.0
    backends/skyrl_train/distributed/fsdp_utils.py PrecisionType.to_dtype reads every entry of its
    BFLOAT_LIST ('bf16', 'bfloat16') or FLOAT_LIST ('fp32', 'float32', '32', 32) as one torch dtype."""

    def __init__(self, *spellings: Any) -> None:
        self.spellings = spellings

    def __eq__(self, other: object) -> bool:
        return not isinstance(other, bool) and any(other == s for s in self.spellings)

    def __hash__(self) -> int:
        return hash(self.spellings)

    def __repr__(self) -> str:
        return repr(self.spellings[0])


SKYRL_BF16 = _PrecisionSpelling("bf16", "bfloat16")
SKYRL_FP32 = _PrecisionSpelling("fp32", "float32", "32", 32)


def _model_keys(prefix: str) -> dict[str, Rule]:
    """A model section's LoRA and fake-INT4 settings (policy, ref, critic)."""
    return {
        f"{prefix}.model.lora.rank": unsupported("LoRA training is not imported (--set workload.lora...)", neutral=0),
        f"{prefix}.model.lora.*": ignored(_LORA),
        f"{prefix}.model.fake_int4_qat.enabled": unsupported("fake-INT4 quantization-aware training is not modelled",
                                                             neutral=False),
        f"{prefix}.model.fake_int4_qat.*": ignored(_QAT),
    }


MEGATRON_SIZES = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
                  "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
                  "expert_tensor_parallel_size": "etp"}


def _megatron_keys(prefix: str) -> dict[str, Rule]:
    """A Megatron section (policy's or ref's): the policy's parallel sizes mapped (the reference runs
    with them: its own, where they differ, unsupported), the rest Megatron options."""
    section = f"{prefix}.megatron_config"
    policy = prefix == "trainer.policy"
    return {
        **{f"{section}.{key}": mapped(f"workload.train_layout.{knob}", "null: tp" if knob == "etp" else "")
           if policy else unsupported("the reference runs with the policy's layout (its own sizes, where they "
                                      "differ, are not modelled)") for key, knob in MEGATRON_SIZES.items()},
        # megatron_worker.py copies ddp_config onto Megatron's DistributedDataParallelConfig: grad_reduce_in_fp32
        # (SkyRL's default true) is the fp32 gradient reduction rlsim prices
        f"{section}.ddp_config.grad_reduce_in_fp32": unsupported(
            "a bf16 gradient reduction is not mapped (train_params.comm.grad_reduce_bytes_per_param)", neutral=True)
        if policy else ignored(_NO_BACKWARD),
        f"{section}.ddp_config.*": ignored("Megatron's DDP overlaps: rlsim's megatron stack prices its own overlap"),
        f"{section}.hf_export_config.*": ignored(_LOG),
        f"{section}.lora_config.*": ignored(_LORA),
        f"{section}.empty_cuda_cache": ignored("allocator housekeeping: no modelled cost"),
        f"{section}.dist_ckpt_optim_fully_reshardable": ignored(_LOG),
        f"{section}.moe_per_layer_logging": ignored(_LOG),
        **{f"{section}.{k}": ignored(_LOSS) for k in (
            "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_router_score_function",
            "moe_router_enable_expert_bias", "moe_router_dtype", "freeze_moe_router")},
        # megatron_worker.py hands it to the Megatron-Bridge provider beside variable_seq_lengths=True
        # (skyrl_mapping.py: skyrl_token_dispatcher)
        f"{section}.moe_token_dispatcher_type": mapped(
            "workload.train_params.comm.moe_token_dispatcher", "alltoall, SkyRL's default; allgather is refused: "
            "SkyRL sets variable_seq_lengths=True, beside which Megatron-Core refuses it") if policy else unsupported(
            "the reference runs with the policy's train_params (its own dispatcher is not modelled)",
            neutral="alltoall"),
        f"{section}.moe_grouped_gemm": unsupported("grouped expert GEMMs are what rlsim prices", neutral=True),
        f"{section}.moe_enable_routing_replay": unsupported("routing replay (the rollout's expert choices "
                                                            "returned and replayed) is not modelled", neutral=False),
        f"{section}.mtp_num_layers": unsupported("multi-token prediction heads are not modelled", neutral=None),
        **{f"{section}.{k}": ignored(_MTP) for k in ("mtp_loss_weight", "mtp_loss_chunk_size", "mtp_loss_topk")},
        f"{section}.optimizer_config_kwargs": unsupported("Megatron optimizer options (CPU offload, precision-aware "
                                                          "optimizer) are not read"),
        f"{section}.transformer_config_kwargs": unsupported("Megatron transformer options are not read (SkyRL's "
                                                            "default: full recompute of one layer's core attention, "
                                                            "read from trainer.gradient_checkpointing)"),
        f"{section}.model_config_kwargs": unsupported("model config overrides are not read"),
    }


def _fsdp_keys(prefix: str) -> dict[str, Rule]:
    """An FSDP section: the policy's read; the reference's and the critic's run with the policy's layout."""
    section = f"{prefix}.fsdp_config"
    policy = prefix == "trainer.policy"
    other = "the reference and the critic run with the policy's layout and offload"
    if policy:
        cpu_offload = mapped("workload.train_params.offload.fsdp_cpu_offload", "FSDP2's CPUOffloadPolicy")
    elif prefix == "trainer.ref":
        cpu_offload = mapped("workload.reference_cpu_offload", "FSDP2's CPUOffloadPolicy: the reference's shards "
                             "live on the host in trainer.bf16's dtype (HFModelWrapper) and each forward copies "
                             "them in; under megatron not read")
    else:
        cpu_offload = unsupported(other, neutral=False)
    return {
        f"{section}.cpu_offload": cpu_offload,
        f"{section}.fsdp_size": mapped("workload.train_layout.zero_shard_size", "-1 (SkyRL's default) or the "
                                       "policy's GPUs or more: shard over every GPU; below: HSDP (create_device_mesh: "
                                       "a (ddp, fsdp) mesh), the state sharded over fsdp_size consecutive ranks, "
                                       "replicated across")
        if policy else unsupported(other, neutral=-1),
        f"{section}.reshard_after_forward": mapped(
            "workload.train_params.memory.zero3_reshard_after_forward", "fully_shard's: false keeps each layer "
            "whole from its forward through its backward, which then gathers nothing (still ZeRO 3); an int "
            "(reshard to that many ranks) unsupported, priced as true")
        if policy else unsupported(other, neutral=True),
        # skyrl 0.3.0 fsdp_strategy.py _fsdp_init_model: MixedPrecisionPolicy(param_dtype, reduce_dtype) from
        # these two (buffer_dtype is not read); rlsim prices bf16 compute with an fp32 gradient reduction
        f"{section}.mixed_precision.param_dtype": unsupported("an FSDP compute dtype other than bf16 is not "
                                                              "modelled (workload.dtype)", neutral=SKYRL_BF16),
        f"{section}.mixed_precision.reduce_dtype": unsupported(
            "a gradient reduction other than fp32 is not mapped (train_params.comm.grad_reduce_bytes_per_param)",
            neutral=SKYRL_FP32) if prefix != "trainer.ref" else ignored(_NO_BACKWARD),
        f"{section}.mixed_precision.*": ignored("not read by SkyRL's FSDP2 strategy (fsdp_strategy.py: param_dtype "
                                                "and reduce_dtype only)"),
        f"{section}.mixed_precision": ignored("bf16 compute with fp32 reduction: rlsim's mixed precision"),
        f"{section}.wrap_policy": ignored("FSDP wrapping details: rlsim shards per layer"),
    }


_PLACEMENT: dict[str, Rule] = {
    "trainer.placement.colocate_all": mapped("schedule.kind", "true: colocated (the engines and every model share "
                                             "the GPUs in turn); false: split pools (disaggregated, or areal with "
                                             "fully_async)"),
    "trainer.placement.colocate_policy_ref": mapped("schedule.reference_swap_copies", "split pools with a reference: "
                                                    "true shares the policy's GPUs, swapped in and out around its "
                                                    "forward; false: GPUs of its own (schedule.aux_devices)"),
    "trainer.placement.policy_num_nodes": mapped("topology.nodes", "the policy's GPUs (the whole job when colocated)"),
    "trainer.placement.policy_num_gpus_per_node": mapped("topology.nodes", "the policy's GPUs per node"),
    "trainer.placement.ref_num_nodes": mapped("schedule.aux_devices", "the reference's own GPUs (split pools, "
                                              "colocate_policy_ref false)"),
    "trainer.placement.ref_num_gpus_per_node": mapped("schedule.aux_devices", "the reference's own GPUs per node"),
    "trainer.placement.critic_num_nodes": mapped("schedule.aux_devices", "the critic's own GPUs (split pools)"),
    "trainer.placement.critic_num_gpus_per_node": mapped("schedule.aux_devices", "the critic's own GPUs per node"),
}

_TRAINER: dict[str, Rule] = {
    "trainer.strategy": mapped("workload.train_layout", "fsdp / fsdp2: ZeRO-3 over the policy's GPUs (Ulysses "
                               "sequence_parallel_size as cp; train_software skyrl-fsdp: no TP, no pipeline); "
                               "megatron: its megatron_config sizes"),
    "trainer.sequence_parallel_backend": unsupported("Ulysses is the sequence-parallel backend rlsim prices",
                                                     neutral="ulysses"),
    "trainer.policy.model.path": mapped("workload.model", "Hugging Face id or folder -> model preset, or the "
                                                          "folder's config.json"),
    **_model_keys("trainer.policy"),
    "trainer.policy.optimizer_config.offload_after_step": mapped("schedule.switch.offload_optimizer",
                                                                 "colocate_all: the optimizer state to the host "
                                                                 "after each step"),
    "trainer.policy.optimizer_config.*": ignored(OPTIMIZER_SETTINGS),
    **_fsdp_keys("trainer.policy"),
    "trainer.policy.sequence_parallel_size": mapped("workload.train_layout.cp", "Ulysses (ulysses_sp)"),
    "trainer.policy.use_torch_compile": mapped("workload.entropy.kernel", "fsdp: the update's entropy over the "
                                               "vocabulary under torch.compile (compiled) or op by op through "
                                               "log_softmax (eager-log-softmax)"),
    "trainer.policy.record_memory": ignored(_LOG),
    "trainer.policy.torch_profiler_config.*": ignored(_LOG),
    **_megatron_keys("trainer.policy"),
    "trainer.policy.model_config_kwargs": unsupported("model config overrides are not read"),
    "trainer.policy.language_model_only": ignored("a multimodal model's vision tower skipped: rlsim models the "
                                                  "language model"),
    "trainer.policy.inference_only_init": unsupported("an inference-only policy worker does not train",
                                                      neutral=False),
    "trainer.ref.model.path": mapped("workload.reference", "the policy's model (SkyRL's default) is the reference "
                                     "rlsim runs; another is not imported"),
    **_model_keys("trainer.ref"),
    "trainer.ref.sequence_parallel_size": unsupported("the reference runs with the policy's layout", neutral=1),
    **_fsdp_keys("trainer.ref"),
    **_megatron_keys("trainer.ref"),
    "trainer.ref.model_config_kwargs": unsupported("model config overrides are not read"),
    "trainer.ref.language_model_only": ignored("a multimodal model's vision tower skipped: rlsim models the "
                                               "language model"),
    "trainer.critic.model.path": mapped("workload.algorithm", "set (with advantage_estimator gae): ppo, its value "
                                        "model"),
    **_model_keys("trainer.critic"),
    "trainer.critic.optimizer_config.offload_after_step": mapped("workload.critic_offload.optimizer",
                                                                 "colocate_all: the critic's optimizer state on "
                                                                 "the host outside its update"),
    "trainer.critic.optimizer_config.*": ignored(OPTIMIZER_SETTINGS),
    **_fsdp_keys("trainer.critic"),
    "trainer.critic.sequence_parallel_size": unsupported("the critic runs with the policy's layout", neutral=1),
    "trainer.critic.model_config_kwargs": unsupported("model config overrides are not read"),
}

_ALGORITHM: dict[str, Rule] = {
    "trainer.algorithm.advantage_estimator": mapped("workload.algorithm", "gae: ppo (a critic); grpo, rloo, "
                                                    "reinforce++ and the rest: no critic"),
    "trainer.algorithm.use_kl_loss": mapped("workload.reference", "either KL term runs the reference forward"),
    "trainer.algorithm.use_kl_in_reward": mapped("workload.reference", "either KL term runs the reference forward "
                                                 "(and the old log-prob pass)"),
    "trainer.algorithm.policy_loss_type": mapped("schedule.recompute_logprob", "rollout_is / dppo train on the "
                                                 "rollout's log-probs: no old log-prob pass"),
    "trainer.algorithm.off_policy_correction.tis_ratio_type": mapped("schedule.recompute_logprob",
                                                                     "set: the old log-prob pass runs"),
    **{f"trainer.algorithm.off_policy_correction.{k}": mapped("schedule.recompute_logprob", "set: the old log-prob "
                                                              "pass runs") for k in (
        "sequence_mask_metric", "outlier_token_is_threshold_low", "outlier_token_is_threshold_high",
        "token_mask_is_threshold_low", "token_mask_is_threshold_high")},
    "trainer.algorithm.use_tis": mapped("schedule.recompute_logprob", "deprecated token TIS: the old log-prob pass "
                                        "runs"),
    "trainer.algorithm.dynamic_sampling.type": mapped("workload.dynamic_sampling", "filter: DAPO's (whole batches "
                                                      "of train_batch_size prompts until enough groups have a "
                                                      "signal); replace is not modelled"),
    "trainer.algorithm.dynamic_sampling.max_sample_batches": mapped("workload.dynamic_sampling.max_gen_batches",
                                                                    "-1: no cap"),
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": ignored("used only with dynamic_sampling replace"),
    "trainer.algorithm.zero_variance_filter": ignored(_LOSS),
    "trainer.algorithm.use_entropy_loss": mapped("workload.entropy.in_loss", "fsdp: the update's loss takes the "
                                                 "entropy's gradient"),
    "trainer.algorithm.*": ignored(_LOSS),
}

_FULLY_ASYNC: dict[str, Rule] = {
    "trainer.fully_async.enabled": mapped("schedule.kind", "areal: SkyRL's staleness manager is AReaL's"),
    "trainer.fully_async.max_staleness_steps": mapped("schedule.max_head_offpolicyness"),
    "trainer.fully_async.num_parallel_generation_workers": mapped("schedule.max_concurrent_rollouts",
                                                                  "groups generating at once"),
    "trainer.fully_async.clear_kv_cache_on_weight_sync": mapped("schedule.interrupt_keeps_kv", "negated: the "
                                                                "requests paused over a weight sync keep their KV "
                                                                "unless it is cleared (with prefix caching on)"),
    "trainer.fully_async.sample_full_batch": unsupported("dropping zero-variance groups and pulling more (async "
                                                         "DAPO) is not modelled", neutral=False),
    "trainer.fully_async.simulate_training": unsupported("SkyRL's simulated trainer is not modelled", neutral=False),
    **{f"trainer.fully_async.{k}": ignored("used only with simulate_training") for k in (
        "simulate_training_step_seconds", "simulate_weight_sync_seconds")},
}

_BATCHES: dict[str, Rule] = {
    "trainer.train_batch_size": mapped("workload.prompts_per_step"),
    "trainer.policy_mini_batch_size": mapped("workload.mini_batch_prompts"),
    "trainer.critic_mini_batch_size": unsupported("the critic trains on the policy's mini-batches"),
    "trainer.update_epochs_per_batch": mapped("workload.ppo_epochs"),
    "trainer.micro_train_batch_size_per_gpu": mapped("workload.train_layout.micro_batch", "samples a micro-batch"),
    "trainer.micro_forward_batch_size_per_gpu": mapped("schedule.forward_micro_batch", "samples a forward "
                                                       "micro-batch"),
    "trainer.max_tokens_per_microbatch": mapped("workload.train_layout.max_tokens_per_micro_batch",
                                                "and logprob_max_tokens_per_micro_batch; -1: sample counts"),
    "trainer.recompute_old_logprobs_per_minibatch": ignored("per mini-batch or whole: the same forward work"),
    "trainer.remove_microbatch_padding": mapped("schedule.distqueue.packed", "true: packed (THD) micro-batches"),
    "trainer.use_sample_packing": mapped("schedule.distqueue.packed", "SkyRL's deprecated alias of "
                                         "trainer.remove_microbatch_padding (config.py remaps it)"),
    "trainer.max_prompt_length": mapped("workload.prompt_length.max"),
    "trainer.gradient_checkpointing": mapped("workload.train_layout.recompute", "full"),
    "trainer.gradient_checkpointing_use_reentrant": ignored("reentrant or not: the same recompute"),
    "trainer.bf16": mapped("workload.dtype", "true: bf16"),
    "trainer.flash_attn": mapped("workload.train_params.compute", "fsdp: flash_attention_2 (true; padded rows: "
                                 "attention_skips_padding) or sdpa (false; refused with packed micro-batches)"),
    "trainer.logprobs_chunk_size": ignored("log-probs from the logits in chunks: memory, not modelled time"),
    "trainer.fused_lm_head_logprob": unsupported("the fused LM-head log-prob kernel is not modelled", neutral=False),
    "trainer.fused_lm_head_logprob_backend": ignored("used only with fused_lm_head_logprob"),
    "trainer.mtp.enabled": unsupported("training the multi-token prediction heads (the draft loss) is not modelled; "
                                       "the rollout's MTP speculation it sets is (workload.inference."
                                       "speculative_method mtp)", neutral=False),
    "trainer.mtp.*": ignored(_MTP),
    "trainer.update_ref_every_epoch": ignored("between epochs: rlsim step times exclude it"),
    "trainer.use_expandable_segments": ignored("allocator setting: no modelled cost"),
    **{f"trainer.{k}": ignored("run length: rlsim simulates `iterations` steps (--iterations N)")
       for k in ("epochs", "max_training_steps")},
    **{f"trainer.{k}": ignored(_LOG) for k in (
        "seed", "resume_mode", "resume_path", "log_path", "ckpt_path", "max_ckpts_to_keep", "ckpt_interval",
        "hf_save_interval", "export_path", "eval_batch_size", "eval_before_train", "eval_interval",
        "disable_fast_tokenizer", "project_name", "run_name", "logger", "enable_ray_gpu_monitor", "tags",
        "dump_data_batch", "dump_eval_results", "print_example_interval", "num_logger_eval_samples",
        "num_logger_train_samples", "log_example_interval")},
}

_ENGINE: dict[str, Rule] = {
    "generator.inference_engine.num_engines": mapped("schedule.rollout_devices", "x tensor x pipeline x data "
                                                     "parallel sizes: the rollout GPUs"),
    "generator.inference_engine.tensor_parallel_size": mapped("workload.rollout_layout.tp"),
    "generator.inference_engine.expert_parallel_size": mapped("workload.rollout_layout.ep", "SkyRL asserts it is "
                                                              "data_parallel_size x tensor_parallel_size: one engine's "
                                                              "experts over all its GPUs, its data-parallel ranks "
                                                              "rlsim's attention replicas (ep = data_parallel_size)"),
    "generator.inference_engine.data_parallel_size": mapped("schedule.rollout_devices", "with expert parallelism the "
                                                            "engine's attention replicas (workload.rollout_layout.ep); "
                                                            "without, data-parallel ranks of an "
                                                            "engine: instances of their own here"),
    "generator.inference_engine.pipeline_parallel_size": mapped("workload.rollout_layout.pp", "vLLM's pipeline "
                                                                "stages of one engine (AsyncLLM, as SkyRL needs)"),
    "generator.inference_engine.backend": mapped("workload.engine", "vllm (SkyRL 0.3's only backend)"),
    "generator.inference_engine.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization"),
    "generator.inference_engine.max_num_seqs": mapped("workload.rollout_layout.max_num_seqs"),
    "generator.inference_engine.max_num_batched_tokens": mapped("workload.inference.max_num_batched_tokens"),
    "generator.inference_engine.enforce_eager": mapped("workload.inference.enforce_eager"),
    "generator.inference_engine.enable_prefix_caching": mapped("workload.inference.enable_prefix_caching"),
    "generator.inference_engine.enable_chunked_prefill": ignored("SkyRL 0.3.0 does not pass it to vLLM "
                                                                 "(inference_servers/utils.py builds the server's "
                                                                 "arguments without it): vLLM's chunked prefill stays on"),
    "generator.inference_engine.model_dtype": mapped("workload.rollout_layout.weight_dtype", "and kv_dtype"),
    "generator.inference_engine.weight_sync_backend": ignored("NCCL or CUDA IPC: the weights go tensor by tensor "
                                                              "either way (schedule.refit full-tensors)"),
    "generator.inference_engine.weight_transfer_threshold_cuda_ipc_GB": ignored("the CUDA IPC transfer's chunk "
                                                                                "size: no modelled cost"),
    "generator.inference_engine.run_engines_locally": unsupported("engines outside the job (remote servers) are "
                                                                  "not modelled", neutral=True),
    "generator.inference_engine.external_proxy_url": unsupported("external inference servers are not modelled",
                                                                 neutral=None),
    "generator.inference_engine.external_server_urls": unsupported("external inference servers are not modelled",
                                                                   neutral=None),
    "generator.inference_engine.enable_pd": unsupported("prefill-decode disaggregation is not modelled",
                                                        neutral=False),
    "generator.inference_engine.num_prefill": ignored("used only with enable_pd"),
    "generator.inference_engine.speculative_config": mapped("workload.inference.speculative_method",
                                                            "vLLM's speculative_config: method (eagle, eagle3, mtp) "
                                                            "and num_speculative_tokens"),
    "generator.inference_engine.engine_init_kwargs": unsupported("engine options passed through are not read"),
    "generator.inference_engine.router_init_kwargs": unsupported("the router's options are not read: requests go "
                                                                 "to the least-loaded engine"),
    "generator.inference_engine.fully_sharded_loras": ignored(_LORA),
    "generator.inference_engine.enable_return_routed_experts": unsupported("returning the routed experts (routing "
                                                                           "replay) is not modelled", neutral=False),
    **{f"generator.inference_engine.{k}": ignored("process and logging settings of the engines: no modelled cost")
       for k in ("vllm_v1_disable_multiproc", "enable_ray_prometheus_stats", "use_expandable_segments",
                 "served_model_name", "distributed_executor_backend", "language_model_only")},
}

_GENERATOR: dict[str, Rule] = {
    "generator.n_samples_per_prompt": mapped("workload.samples_per_prompt"),
    "generator.sampling_params.max_generate_length": mapped("workload.response_length.max"),
    "generator.sampling_params.logprobs": mapped("schedule.recompute_logprob", "null: no rollout log-probs, so "
                                                 "the old log-prob pass runs whatever the loss"),
    "generator.sampling_params.*": ignored(SAMPLING_SETTINGS),
    "generator.batched": mapped("workload.inference.dispatch", "false (SkyRL's default): each trajectory its own "
                                "request; true: one batched generate call per engine"),
    "generator.max_turns": mapped("workload.multi_turn.max_turns", "above 1: the agent loop, each trajectory on its "
                                  "own, every turn at most max_generate_length (multi_turn.max_turn_tokens); the "
                                  "environments' seconds and answer tokens come with --set"),
    "generator.max_input_length": mapped("workload.response_length.max", "multi-turn: a trajectory stops before a "
                                         "turn once its context passes it: min(max_turns x max_generate_length, "
                                         "max_input_length - 1 + max_generate_length)"),
    "generator.step_wise_trajectories": unsupported("step-wise multi-turn trajectories are not modelled",
                                                    neutral=False),
    "generator.vision_language_generator": unsupported("multimodal rollouts are not modelled", neutral=False),
    "generator.merge_stepwise_output": ignored("used only with step_wise_trajectories"),
    "generator.use_cache_salt": ignored("the prefix cache keyed by the weight version: a single-turn prompt's "
                                        "samples share it either way"),
    "generator.eval_sampling_params.*": ignored(_LOG),
    "generator.eval_sampling_params": ignored(_LOG),
    "generator.eval_n_samples_per_prompt": ignored(_LOG),
    **{f"generator.{k}": ignored(_LOSS) for k in (
        "zero_reward_on_non_stop", "apply_overlong_filtering", "use_conversation_multi_turn",
        "append_eos_token_after_stop_str_in_multi_turn")},
    "generator.chat_template.*": ignored(_DATA),
    "generator.chat_template_kwargs": ignored(_DATA),
}

RULES: dict[str, Rule] = {
    "data.*": ignored(_DATA),
    **_PLACEMENT, **_TRAINER, **_ALGORITHM, **_FULLY_ASYNC, **_BATCHES, **_ENGINE, **_GENERATOR,
    "environment.env_class": ignored(_ENV),
    "environment.*": ignored(_ENV),
}
