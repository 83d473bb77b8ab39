"""verl (volcengine/verl) configs -> rlsim scenarios: `rlsim run --from-verl CONFIG.yaml [key=value ...]`.

Reads verl's Hydra YAML (``actor_rollout_ref.rollout.n`` ...) plus the overrides its shell scripts
pass. Semantics of the knobs: ../shared/reference/frameworks.md "verl". The key table (RULES) says,
per key, which rlsim key it sets, or why it is ignored (no effect on time) or unsupported (changes
time, rlsim does not model it). docs/guides/frameworks.md prints the tables.

Which verl entry point (recipe) a YAML is for is not always written in it. The rule
(``recipe_of``): ``--framework-schedule`` if given; else ``trainer.v1.trainer_mode`` colocate_async
/ separate_async (verl 0.9's v1 trainer) -> kind verl-colocate-async / verl-separate-async; else any
``async_training.*`` key ->
fully_async_policy (kind verl-fully-async); else ``actor_rollout_ref.hybrid_engine: false`` or a
top-level ``rollout.*`` pool -> one_step_off_policy (kind one-step-off); else main_ppo's hybrid
engine: verl 0.9's v1 trainer in its sync mode (kind verl-sync) when the config says it is verl 0.9's
(``trainer.use_v1: true``, ``trainer.v1.trainer_mode: sync`` or a key only 0.9 has), else the
legacy trainer of verl 0.4-0.7 (kind colocated).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from ..llm.architecture import DTYPE_BYTES
from ..params import (
    FLASH_ATTN_CROSS_ENTROPY_BYTES,
    FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT,
    MEGATRON_CROSS_ENTROPY_BYTES,
    VERL_FUSED_TORCH_BYTES,
    VERL_NAIVE_CAPPED_CPU_S_PER_SAMPLE,
    VERL_NAIVE_CAPPED_CPU_S_PER_TOKEN,
    VERL_NAIVE_CPU_S_PER_SAMPLE,
    VERL_NAIVE_CPU_S_PER_TOKEN,
    logprob_traffic,
)
from .common import (
    DTYPES,
    HF_FLASH_ATTENTION,
    MULTI_TURN_NOTE,
    SPECULATION_NOTE,
    FrameworkImport,
    Rule,
    Status,
    Values,
    apply_hydra_overrides,
    begin_workload,
    capped_length,
    classify,
    flag,
    has_experts,
    hf_attention_compute,
    hf_train_software,
    hsdp_shard_size,
    ignored,
    in_table,
    inactive_section,
    mapped,
    megatron_token_dispatcher,
    merge_train_params,
    model_for,
    model_set_by_user,
    overridden_keys,
    positive_int,
    read_config,
    resolve_interpolations,
    rule_for,
    size_topology,
    speculative_entry_status,
    table_status,
    unsupported,
    vllm_speculation,
    without_inapplicable_layout_keys,
    world_divides,
)
from .megatron_ddp import ddp_rules, megatron_ddp_overlap
from .megatron_moe import megatron_moe_kernels
from .megatron_recompute import megatron_recompute, recompute_rules
from .verl_optimizer import critic_optimizer, hybrid_device_offload, optimizer_fields, override_decisions
from .verl_script import is_script, read_verl_script
from .verl_transformer import (
    TRANSFORMER_RULES,
    converter_router_dtype,
    megatron_expert_capacity,
    megatron_pipeline_split,
)

RECIPES = ("colocated", "one-step-off", "fully-async", "colocate-async", "separate-async", "sync")
KIND_OF_RECIPE = {"colocated": "colocated", "one-step-off": "one-step-off", "fully-async": "verl-fully-async",
                  "colocate-async": "verl-colocate-async", "separate-async": "verl-separate-async",
                  "sync": "verl-sync"}
SPLIT_RECIPES = ("one-step-off", "fully-async", "separate-async")        # a rollout pool of its own
V1_RECIPES = ("colocate-async", "separate-async", "sync")                # verl 0.9's v1 trainer
AGENT_LOOP_RECIPES = ("fully-async", *V1_RECIPES)                        # rollout.mode not read: async servers
V1_MODES = {"colocate_async": "colocate-async", "separate_async": "separate-async"}   # trainer.v1.trainer_mode
# trainer.v1.separate_async.hybrid_rollout (HybridRolloutSwitchConfig) -> schedule.hybrid_rollout, same names
# async_training.dynamic_schedule_* (verl 0.9.1 fully_async) -> schedule.dynamic_resources.*
DYNAMIC_SCHEDULE_KEYS = {"policy": "policy", "deactivate_ratio": "deactivate_ratio", "enable_rebalance": "rebalance"}
HYBRID_ROLLOUT_KEYS = ("switch_threshold_ratio", "adaptive_switch_threshold", "switch_threshold_step_up",
                       "switch_threshold_step_down", "switch_threshold_release_steps", "switch_cost_window_size")
# Keys only verl 0.9's configs have: a config that gives one is read as verl 0.9 runs it.
V1_ONLY_KEYS = ("algorithm.filter_groups.max_inflight_gen_batches",)

A = "actor_rollout_ref"
TEACHER = "distillation.teacher_models.teacher_model"   # verl 0.9's single teacher (distillation.teacher_models)
RM_ROLLOUT = "reward.reward_model.rollout"              # verl 0.9's reward model's engine (a RolloutConfig)
# A served model's engine keys (its RolloutConfig: the teacher's inference, the reward model's rollout)
# -> its rlsim section's (workload.distillation, workload.reward.served), and how each value is read
SERVED_ENGINE_KEYS = (("tensor_model_parallel_size", "layout.tp", "count"),
                      ("gpu_memory_utilization", "layout.gpu_memory_utilization", "fraction"),
                      ("max_num_seqs", "layout.max_num_seqs", "count"), ("enforce_eager", "inference.enforce_eager", "flag"),
                      ("max_num_batched_tokens", "inference.max_num_batched_tokens", "count"),
                      ("enable_chunked_prefill", "inference.chunked_prefill", "flag"))
# verl's own defaults for the keys rlsim maps, used when a YAML leaves them out (verl
# verl/trainer/config/ppo_trainer.yaml, v0.4-v0.5; read again in the 0.4.1, 0.5.0, 0.6.0, 0.6.1 and 0.7.0
# wheels: the same in all, except rollout.name (no default from 0.6), enforce_eager, below, and
# model.use_remove_padding, true from 0.7: REMOVE_PADDING_NOTE).
DEFAULTS_SOURCE = "verl/trainer/config/ppo_trainer.yaml"
DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024, "data.max_prompt_length": 512, "data.max_response_length": 512,
    f"{A}.rollout.n": 1, f"{A}.actor.ppo_mini_batch_size": 256, f"{A}.actor.ppo_epochs": 1,
    f"{A}.actor.strategy": "fsdp", f"{A}.actor.use_kl_loss": False, "algorithm.use_kl_in_reward": False,
    f"{A}.actor.entropy_coeff": 0, f"{A}.actor.use_torch_compile": True, f"{A}.rollout.temperature": 1.0,
    f"{A}.actor.fsdp_config.use_torch_compile": True,
    "algorithm.adv_estimator": "gae", f"{A}.rollout.tensor_model_parallel_size": 2, f"{A}.rollout.expert_parallel_size": 1,
    f"{A}.rollout.data_parallel_size": 1, f"{A}.rollout.pipeline_model_parallel_size": 1,
    f"{A}.rollout.gpu_memory_utilization": 0.5, f"{A}.rollout.max_num_seqs": 1024, f"{A}.rollout.dtype": "bfloat16",
    f"{A}.model.enable_gradient_checkpointing": True, f"{A}.model.use_remove_padding": False,
    f"{A}.actor.use_dynamic_bsz": False, f"{A}.actor.ppo_max_token_len_per_gpu": 16384,
    "trainer.nnodes": 1, "trainer.n_gpus_per_node": 8, f"{A}.rollout.free_cache_engine": True,
    f"{A}.rollout.name": "vllm",
    # rollout.yaml (verl 0.6.0): agent.num_workers, the agent loop's workers (rollout.mode async)
    f"{A}.rollout.agent.num_workers": 8,
    # verl hands these two to vLLM explicitly (its vLLM rollout reads max_num_batched_tokens with 8192
    # as the default and refuses chunked prefill with a budget below max_model_len), so they hold
    # over the engine's own defaults whether the config gives them or not
    f"{A}.rollout.max_num_batched_tokens": 8192, f"{A}.rollout.enable_chunked_prefill": True,
    "critic.model.fsdp_config.param_offload": False, "critic.model.fsdp_config.optimizer_offload": False,
    # verl 0.9.1's distillation.yaml and its teacher's inference (a RolloutConfig with its own values)
    "distillation.enabled": False, "distillation.nnodes": 0, "distillation.n_gpus_per_node": 8,
    "distillation.distillation_loss.loss_mode": "k3", "distillation.distillation_loss.topk": 32,
    f"{TEACHER}.inference.tensor_model_parallel_size": 2, f"{TEACHER}.inference.gpu_memory_utilization": 0.5,
    f"{TEACHER}.inference.max_num_seqs": 1024, f"{TEACHER}.inference.enforce_eager": True,
    f"{TEACHER}.inference.max_num_batched_tokens": 8192, f"{TEACHER}.inference.enable_chunked_prefill": True,
    **{f"{TEACHER}.inference.{k}": 1 for k in ("data_parallel_size", "expert_parallel_size",
                                                "pipeline_model_parallel_size")},
    # verl 0.9.1's reward.yaml: the reward model and its engine (a RolloutConfig with its own values)
    "reward.reward_model.enable": False, "reward.reward_model.enable_resource_pool": False,
    "reward.reward_model.nnodes": 0, "reward.reward_model.n_gpus_per_node": 8,
    f"{RM_ROLLOUT}.tensor_model_parallel_size": 2, f"{RM_ROLLOUT}.gpu_memory_utilization": 0.5,
    f"{RM_ROLLOUT}.max_num_seqs": 1024, f"{RM_ROLLOUT}.enforce_eager": True,
    f"{RM_ROLLOUT}.max_num_batched_tokens": 8192, f"{RM_ROLLOUT}.enable_chunked_prefill": True,
    f"{RM_ROLLOUT}.enable_prefix_caching": True,
    **{f"{RM_ROLLOUT}.{k}": 1 for k in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size")},
}
# The keys verl always hands to vLLM (their verl default when the config leaves them out).
ENGINE_KEYS_ALWAYS = ("max_num_batched_tokens", "enable_chunked_prefill")
# verl's vLLM rollout drives vLLM V1 (vLLM >= 0.8) through the offline LLM class: the vllm-v1 engine
# (engine_software.py), under the knobs verl passes (max_num_seqs, the two above, enforce_eager when given).
VLLM_ENGINE = "vllm-v1"
# verl's SGLang rollout as verl 0.7.0 runs it (the latest release read; its `sglang` extra pins SGLang
# 0.5.6): an SGLang server (verl/workers/rollout/sglang_rollout/async_sglang_server.py) given tp_size,
# mem_fraction_static = gpu_memory_utilization, max_running_requests = max_num_seqs and
# disable_cuda_graph = enforce_eager; SGLang's own defaults stand for the rest, so the other vLLM knobs
# (ENGINE_KEYS) never reach it. verl 0.6 passes max_num_seqs too (its SPMD engine, sglang_rollout.py, not
# enforce_eager) with SGLang 0.5.2 (0.6.0) or 0.5.5 (0.6.1); verl 0.5 passed neither, with SGLang
# 0.4.6.post5. The import notes say so.
SGLANG_ENGINE = "sglang-0.5.6"
SGLANG_KEYS = ("enforce_eager",)   # of ENGINE_KEYS, the ones verl hands SGLang
_NOT_PASSED_TO_SGLANG = (f"verl's SGLang rollout does not hand it to SGLang (its own default stands: workload.engine "
                         f"{SGLANG_ENGINE})")
SGLANG_VERSION_NOTE = (f"{A}.rollout.name sglang: read as verl 0.7.0 runs it ({SGLANG_ENGINE}; max_num_seqs and "
                       "enforce_eager passed); verl 0.6.0 pins SGLang 0.5.2 (--set workload.engine=sglang-0.5.2; "
                       "its rollout.mode sync engine does not pass enforce_eager); verl 0.5 pinned 0.4.6.post5 "
                       "(sglang) and passed neither max_num_seqs nor enforce_eager")

# The importer reads a config as verl 0.6+ runs it (read in the 0.4.1 - 0.7.0 wheels): its vLLM rollout
# hands vLLM rollout.max_num_seqs and enforce_eager, whose default is false. verl 0.4-0.5 defaulted
# enforce_eager to true (eager: no CUDA graphs) and passed no max_num_seqs (vllm_rollout_spmd.py: vLLM's
# own default stands, 1024 on GPUs of >= 70 GiB). The import notes say so.
ENFORCE_EAGER_NOTE = (f"{A}.rollout.enforce_eager not given: verl 0.6+ default false (CUDA graphs), which rlsim "
                      "takes; verl 0.4-0.5 defaulted to true (eager): give it to match your verl version")
ROLLOUT_MODES = ("sync", "async")   # verl 0.6 / 0.7 rollout.yaml `mode`
MODE_NOTE = (f"{A}.rollout.mode not given: verl 0.6's default sync (per-prompt dispatch), which rlsim takes; verl 0.7 "
             "defaults to async (its agent loop: per-sample dispatch): give rollout.mode=async to match verl 0.7")
V1_NOTE = ("no trainer.use_v1 / trainer.v1.* key: read as verl 0.4-0.7's main_ppo runs it (the legacy trainer, kind "
           "colocated); verl 0.9 runs its v1 trainer by default: pass trainer.use_v1=true (kind verl-sync) to match it")
MAX_NUM_SEQS_NOTE = (f"{A}.rollout.max_num_seqs: verl 0.6+ hands it to vLLM, as rlsim reads it; verl 0.4-0.5 did not "
                     "(vLLM's own default ran: 1024 sequences on GPUs of >= 70 GiB, 256 below)")
# rollout.max_num_seqs' default: 1024 in verl 0.6 - 0.8 (trainer/config/rollout/rollout.yaml, read in the
# 0.6.1, 0.7.0 and 0.8.0 wheels; DEFAULTS), 256 in 0.9 (the 0.9.1 wheel's rollout.yaml). As for
# use_remove_padding, a config is read as verl 0.6 runs it save the v1 recipes, which only 0.9 has.
VERL_09_MAX_NUM_SEQS = 256
MAX_NUM_SEQS_DEFAULT_NOTE = (f"{A}.rollout.max_num_seqs not given: verl 0.6-0.8's default "
                             f"{DEFAULTS[f'{A}.rollout.max_num_seqs']}, which rlsim takes; "
                             f"verl 0.9 defaults to {VERL_09_MAX_NUM_SEQS}: give {A}.rollout.max_num_seqs="
                             f"{VERL_09_MAX_NUM_SEQS} to match it")
MAX_NUM_SEQS_V1_NOTE = (f"{A}.rollout.max_num_seqs not given: verl 0.9's default {VERL_09_MAX_NUM_SEQS}, which rlsim "
                        "takes for its v1 trainer; verl 0.6-0.8 defaulted to 1024")

# verl rollout / actor keys -> the rlsim field they set (only when the config gives them: rlsim's own
# defaults stand otherwise, see docs/guides/frameworks.md).
ENGINE_KEYS = {"enforce_eager": "enforce_eager", "max_num_batched_tokens": "max_num_batched_tokens",
               "enable_chunked_prefill": "chunked_prefill", "enable_prefix_caching": "enable_prefix_caching"}
OFFLOAD_KEYS = {"param_offload": "params", "grad_offload": "grads", "optimizer_offload": "optimizer"}
MEGATRON_OFFLOAD_KEYS = ("param_offload", "optimizer_offload")   # grad_offload has no effect in verl
FSDP_OFFLOAD_KEYS = ("param_offload", "optimizer_offload")       # the fsdp_config offload keys mapped
# verl 0.6.0 moves the offloaded state with .to("cpu") / flat_param_to(cpu): pageable host memory
OFFLOAD_NOTE = "per-phase offload to host, through pageable memory (offload.pageable)"
# FSDP's (a Megatron actor gets VERL_MEGATRON_SWITCH_NOTE)
VERL_SWITCH_NOTE = ("colocated switch: the optimizer state stays on the devices through the rollout unless "
                    "actor.fsdp_config.optimizer_offload moves it (schedule.switch.offload_optimizer: "
                    "false; the gradients are freed, free_gradients: true), so it counts against the engine's "
                    "gpu_memory_utilization")
VERL_MEGATRON_SWITCH_NOTE = ("colocated switch: the optimizer state stays on the devices through the rollout unless "
                             "actor.megatron.optimizer_offload moves it (schedule.switch.offload_optimizer: false), "
                             "and Megatron-Core's gradient buffer stays allocated unless actor.megatron.param_offload "
                             "frees it with the parameters (free_gradients: false): both count against the engine's "
                             "gpu_memory_utilization")

_LOG = "logging / bookkeeping of the driver: no effect on step time"
_CKPT = "checkpoint files: rlsim step times exclude checkpointing"
_VAL = "validation runs between steps: rlsim step times exclude validation"
_LOSS = "loss arithmetic on tensors the step already holds: no modelled cost"
_LR = "optimizer hyper-parameters (learning rate, schedule): no effect on step time"
_PROFILE = "profiler / tracing settings: rlsim step times exclude profiling"
_FSDP = ("rlsim prices FSDP as ZeRO-3 on tp 1: per-layer parameter all-gathers and gradient reduce-scatters "
         "with their overlap (workload.train_params.comm.fsdp_*); FSDP's other options are not modelled")
_DATA = "data loading and prompt formatting on the host: no modelled cost"

# verl's Megatron reference with ref.megatron.param_offload (workers/megatron_workers.py, 0.5 - 0.7:
# the reference module offloaded after it is built; compute_ref_log_prob loads it to the GPUs before
# its forward, load_megatron_model_to_gpu, and offloads it after, offload_megatron_model_to_cpu,
# which copies the shard to the host again; cited from memory of its public code): 2 copies a pass.
MEGATRON_REFERENCE_SWAP_COPIES = 2
REFERENCE_SWAP_NOTE = ("megatron: true keeps the reference's shard in host memory, loaded to the GPUs before each "
                       "forward and offloaded after (megatron_workers.py compute_ref_log_prob): "
                       f"{MEGATRON_REFERENCE_SWAP_COPIES} copies of the shard a pass; false (verl's default) keeps it "
                       "on the GPUs beside the actor")

# verl's megatron workers pack the rows (THD, no padding) whatever model.use_remove_padding says:
# 0.6.0 / 0.6.1 always (models/mcore/model_forward.py gptmodel_forward: preprocess_packed_seqs), 0.7.0
# as actor.megatron.use_remove_padding says (workers/actor/megatron_actor.py: data_format "thd" if it
# else "bshd"; engine/megatron.yaml default true), which the reference copies (ref/megatron_ref.yaml)
MEGATRON_REMOVE_PADDING_RULES = {
    "actor": mapped("schedule.distqueue.packed", "megatron (verl 0.7): true packs the rows (THD), false pads them "
                                                 "(BSHD); verl 0.6 always packs, as rlsim does when it is absent"),
    "ref": unsupported("the reference forward packs as the actor's actor.megatron.use_remove_padding says in rlsim",
                       neutral=True)}

# verl's workers turn a deprecated global micro-batch (ppo_micro_batch_size, log_prob_micro_batch_size,
# without _per_gpu) into the per-GPU one by dividing it by the data-parallel ranks (0.6.0 - 0.7.0
# fsdp_workers.py: world // ulysses_sequence_parallel_size; megatron_workers.py: Megatron's data-parallel
# world, world // (tp x pp x cp)), and refuse a config that gives both (check_mutually_exclusive)
GLOBAL_MICRO_BATCH_NOTE = ("deprecated global micro-batch: verl divides it by the data-parallel ranks (fsdp: the world "
                           "/ ulysses_sequence_parallel_size; megatron: the world / (tp x pp x cp)) for the per-GPU one")

# verl 0.6.0 - 0.7.0 under actor.strategy megatron: validate_config (utils/config.py, ~line 104) computes
# minimal_bsz = megatron_dp x actor.ppo_micro_batch_size_per_gpu, None x int (a TypeError) where only the
# global ppo_micro_batch_size is given, and ActorConfig.validate (workers/config/actor.py) would refuse it
# below the whole world (no Ulysses ranks to count); the megatron worker sets the old log-prob pass's
# per-GPU size only from the actor's global one (megatron_workers.py "normalize config"), so a global
# rollout.log_prob_micro_batch_size beside a per-GPU actor leaves it None, which megatron_actor.py
# compute_log_prob asserts against. The reference's and the critic's run (divided by Megatron's DP world).
MEGATRON_GLOBAL_MICRO_BATCH_REFUSED = {
    f"{A}.actor.ppo_micro_batch_size": "verl's validate_config multiplies actor.ppo_micro_batch_size_per_gpu (None "
                                       "here) by Megatron's data-parallel world and fails (TypeError)",
    f"{A}.rollout.log_prob_micro_batch_size": "verl's megatron worker sets the old log-prob pass's per-GPU size only "
                                              "from a global actor.ppo_micro_batch_size, which megatron cannot run: "
                                              "it stays None, which megatron_actor.py compute_log_prob asserts "
                                              "against"}
# verl's FSDP actor and critic refuse a global ppo_micro_batch_size below the world over their Ulysses
# ranks (0.6.0 - 0.7.0 workers/config/actor.py ActorConfig.validate, critic.py FSDPCriticConfig.validate)
FSDP_GLOBAL_MICRO_BATCH_RULE = "ppo_micro_batch_size x ulysses_sequence_parallel_size >= n_gpus"

# verl 0.9's megatron optim (McoreOptimizerConfig, workers/config/optimizer.py) opts into Megatron's
# precision-aware optimizer: utils/megatron/optimizer.py init_megatron_optim_config hands
# use_precision_aware_optimizer and main_grads_dtype / exp_avg_dtype / exp_avg_sq_dtype to Megatron-Core
# (bf16 only; TE FusedAdam), so the moments and the main gradients (and the DDP grad buckets:
# workers/engine/megatron/transformer_impl.py _resolve_override_ddp_config) may be bf16, not the fp32
# state rlsim prices; the three dtypes are read with the switch on only
PRECISION_AWARE_OPTIMIZER_NOTE = ("Megatron's precision-aware optimizer (moments and main gradients in "
                                  "exp_avg_dtype / exp_avg_sq_dtype / main_grads_dtype) is not modelled: rlsim "
                                  "prices fp32 moments and main gradients")


def _precision_aware_optimizer_rules(section: str) -> dict[str, Rule]:
    """``section``'s (actor.optim / critic.optim) precision-aware optimizer keys."""
    return {f"{section}.use_precision_aware_optimizer": unsupported(PRECISION_AWARE_OPTIMIZER_NOTE, neutral=False),
            **{f"{section}.{k}": ignored("read with use_precision_aware_optimizer true only (utils/megatron/"
                                         "optimizer.py init_megatron_optim_config)")
               for k in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")}}


# verl's Megatron DDP config sets grad_reduce_in_fp32 True (0.6.1 - 0.9.1 utils/megatron_utils.py
# ddp_config_dict), which actor.megatron.override_ddp_config replaces key by key; Megatron-Core's DDP keeps
# main_grad in the parameters' dtype without it (distributed_data_parallel.py: grad_dtype = torch.float if
# grad_reduce_in_fp32 else param.dtype): the buffer and its data-parallel reduction in bf16
VERL_DDP = f"{A}.actor.megatron.override_ddp_config"
GRAD_REDUCE_IN_FP32 = f"{VERL_DDP}.grad_reduce_in_fp32"
# verl's own DDP keys beside override_ddp_config (ddp_config_dict, 0.6.1 utils/megatron_utils.py): the
# values a role's override replaces; use_distributed_optimizer is the megatron section's own
VERL_DDP_DEFAULTS = {"grad_reduce_in_fp32": True, "overlap_grad_reduce": False}
# The reference builds no DDP wrapper (0.6.0 workers/megatron_workers.py: the ref model with
# wrap_with_ddp=False, its override_ddp_config never handed on; the engine worker's forward_only likewise:
# workers/engine/megatron/transformer_impl.py), and rlsim prices the critic with the actor's train_params.comm
# and layout (rl/llm_costs.py critic_train_params), while its CriticWorker builds its own DDP from
# critic.megatron.override_ddp_config
REF_DDP, CRITIC_DDP = f"{A}.ref.megatron.override_ddp_config", "critic.megatron.override_ddp_config"
REF_DDP_NOTE = ("verl's reference builds no DDP (forward only: megatron_workers.py wrap_with_ddp=False), so it "
                "never reads its override_ddp_config")
CRITIC_DDP_NOTE = ("rlsim prices the critic's gradient sync with the actor's DDP settings (its train_params.comm and "
                   "layout): a critic value unlike the actor's is not modelled")
GRAD_REDUCE_IN_FP32_NOTE = ("and workload.train_params.comm.grad_reduce_bytes_per_param: false keeps Megatron's "
                            "main_grad buffer in bf16 and reduces it so (2 bytes a parameter); true, verl's own "
                            "value, fp32 (4: rlsim's default)")


RULES: dict[str, Rule] = {
    # data
    "data.train_batch_size": mapped("workload.prompts_per_step"),
    "data.max_prompt_length": mapped("workload.prompt_length.max", "rlsim's default length law capped here"),
    "data.max_response_length": mapped("workload.response_length.max", "rlsim's default length law capped here"),
    "data.gen_batch_size": mapped("workload.dynamic_sampling.gen_prompts", "prompts per dynamic-sampling round"),
    **{f"data.{k}": ignored(_DATA) for k in (
        "train_files", "val_files", "prompt_key", "reward_fn_key", "tokenizer", "return_raw_input_ids",
        "return_raw_chat", "return_full_prompt", "shuffle", "filter_overlong_prompts", "truncation",
        "val_batch_size", "seed", "image_key", "dataloader_num_workers", "use_shm", "trust_remote_code",
        "filter_overlong_prompts_workers", "custom_cls.*", "return_multi_modal_inputs", "sampler.*", "datagen.*",
        "apply_chat_template_kwargs", "apply_chat_template_kwargs.*", "validation_shuffle", "video_key",
        "image_patch_size", "tool_config_path", "train_max_samples", "val_max_samples", "audio_key", "function_tool_path",
        "mm_processor_kwargs", "mm_processor_kwargs.*")},
    # actor / model
    f"{A}.hybrid_engine": mapped("schedule.kind", "true: colocated hybrid engine; false: split pools"),
    f"{A}.model.path": mapped("workload.model", "Hugging Face id -> model preset, or the folder's config.json"),
    f"{A}.model.enable_gradient_checkpointing": mapped("workload.train_layout.recompute", "fsdp / fsdp2: true full, "
                                                       "false none (the megatron workers do not read it)"),
    f"{A}.model.use_remove_padding": mapped("schedule.distqueue.packed", "fsdp / fsdp2: no padding in payloads and "
                                            "micro-batches (the megatron workers do not read it)"),
    f"{A}.model.enable_activation_offload": unsupported("activation offload to host is not modelled", neutral=False),
    f"{A}.model.lora_rank": mapped("workload.lora.rank", "fsdp / fsdp2: LoRA adapters of that rank beside the frozen "
                                   "base (0: full fine-tuning); the megatron workers do not read it"),
    f"{A}.model.target_modules": mapped("workload.lora.targets", "PEFT's target_modules: all-linear or module names"),
    f"{A}.model.lora_alpha": ignored("a scale on the adapters' output: no effect on step time"),
    f"{A}.model.exclude_modules": unsupported("modules left out of the LoRA targets by name are not modelled"),
    f"{A}.model.use_fused_kernels": mapped("workload.train_params.compute", "fsdp / fsdp2, impl_backend torch: the "
                                          "log-probs and the entropy in verl's fused kernel (loss bytes, the head "
                                          "projected again in the backward: logits_recompute); the triton backend "
                                          "and the megatron workers' fused forward are not modelled"),
    f"{A}.model.fused_kernel_options.impl_backend": mapped("workload.train_params.compute", "torch: verl's fused "
                                                           "kernel in torch ops; triton: not modelled"),
    f"{A}.model.override_config.attn_implementation": mapped(
        "workload.train_params.compute", "fsdp / fsdp2: flash_attention_2 (verl's default): padded rows' attention "
        "over their real tokens (attention_skips_padding); sdpa: over the padded width; eager: flash_attention false"),
    **{f"{A}.model.{k}": ignored("model loading options: no effect on step time") for k in (
        "external_lib", "override_config.*", "override_config", "trust_remote_code", "custom_chat_template",
        "use_shm", "tokenizer_path", "hf_config_path")},
    f"{A}.model.use_liger": mapped("workload.train_software", "fsdp / fsdp2: true verl-fsdp-liger (Liger's "
                                                             "RMSNorm, RoPE, SwiGLU), false verl-fsdp (hf-transformers' "
                                                             "constants, no TP, no pipeline)"),
    f"{A}.model.fused_kernel_options.*": unsupported("fused log-prob kernels are not modelled (read with "
                                                     "use_fused_kernels only)"),
    f"{A}.nccl_timeout": ignored("a collective's time-out: no effect on step time"),
    f"{A}.actor.freeze_vision_tower": ignored("vision-language models only: rlsim's models have no vision tower"),
    f"{A}.actor.strategy": mapped("workload.train_layout", "megatron: its TP/PP/EP/CP; fsdp/fsdp2: tp 1, zero 3 "
                                                           "(train_software verl-fsdp: no TP, no pipeline)"),
    f"{A}.actor.ppo_mini_batch_size": mapped("workload.mini_batch_prompts", "prompts per optimizer step"),
    f"{A}.actor.ppo_micro_batch_size_per_gpu": mapped("workload.train_layout.micro_batch"),
    f"{A}.actor.ppo_micro_batch_size": mapped("workload.train_layout.micro_batch", GLOBAL_MICRO_BATCH_NOTE),
    f"{A}.actor.use_dynamic_bsz": mapped("workload.train_layout.max_tokens_per_micro_batch", "true: micro-batches "
                                         "within ppo_max_token_len_per_gpu tokens; false: schedule.micro_batching "
                                         "sequence"),
    f"{A}.actor.ppo_max_token_len_per_gpu": mapped("workload.train_layout.max_tokens_per_micro_batch",
                                                   "token budget of a micro-batch (use_dynamic_bsz)"),
    f"{A}.actor.ppo_epochs": mapped("workload.ppo_epochs"),
    f"{A}.actor.use_kl_loss": mapped("workload.reference", "a KL term needs the reference forward"),
    f"{A}.actor.ulysses_sequence_parallel_size": mapped("workload.train_layout.cp", "fsdp / fsdp2: the sequence "
                                                        "split over cp ranks by Ulysses all-to-alls (ulysses_sp: "
                                                        "true); the megatron backend splits by context_parallel_size"),
    f"{A}.actor.use_torch_compile": mapped("workload.entropy.kernel", "fsdp / fsdp2: the entropy over the "
                                           "vocabulary the old log-prob pass computes (and an update with "
                                           "entropy_coeff != 0) under torch.compile (compiled) or op by op (eager)"),
    f"{A}.actor.entropy_coeff": mapped("workload.entropy.in_loss", "!= 0: the update computes the entropy too and "
                                       "its loss takes its gradient; 0: the old log-prob pass only"),
    # torch.compile's one use is the entropy: the reference's log-probs come with none
    # (compute_ref_log_prob: calculate_entropy False) and the critic's value head has no vocabulary
    **{f"{A}.ref.{k}": ignored("the reference computes no entropy (compute_ref_log_prob: calculate_entropy "
                               "false), the one use of torch.compile") for k in (
        "use_torch_compile", "fsdp_config.use_torch_compile")},
    **{f"critic.{k}": ignored("the critic's value head has no vocabulary: no entropy, the one use of "
                              "torch.compile") for k in (
        "use_torch_compile", "model.fsdp_config.use_torch_compile", "fsdp.use_torch_compile")},
    **{f"{section}.{name}": ignored("the reference and the critic compute no entropy") for section in (
        f"{A}.ref", f"{A}.ref.fsdp_config", "critic.model.fsdp_config", "critic.fsdp")
       for name in ("entropy_checkpointing", "entropy_from_logits_with_chunking")},
    f"{A}.actor.entropy_from_logits_with_chunking": mapped(
        "workload.entropy.kernel", "fsdp / fsdp2: true: the entropy in chunks cast up to fp32 (eager-chunked-fp32; "
        "compiled: the same fused kernel)"),
    f"{A}.actor.entropy_checkpointing": mapped(
        "workload.entropy.recompute", "fsdp / fsdp2: true: an update whose loss takes the entropy recomputes its "
        "forward in the backward"),
    f"{A}.actor.optim.*": ignored(_LR),
    **{f"{A}.actor.optim.{k}": mapped(
        "workload.train_params.memory.optimizer_bytes_per_param",
        "the optimizer the actor's workers build (fsdp: optimizer_impl's class optimizer, torch.optim AdamW by "
        "default; megatron: Megatron-Core's adam or sgd): its state's bytes a parameter, and its step's traffic "
        "(train_params.comm.optimizer_traffic_bytes_per_param); an optimizer rlsim does not know is refused")
       for k in ("optimizer", "optimizer_impl")},
    **_precision_aware_optimizer_rules(f"{A}.actor.optim"),
    f"{A}.actor.checkpoint.*": ignored(_CKPT),
    **{f"{A}.actor.{k}": ignored(_LOSS) for k in (
        "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode",
        "kl_loss_coef", "kl_loss_type", "grad_clip", "shuffle", "policy_loss.*")},
    f"{A}.actor.megatron.tensor_model_parallel_size": mapped("workload.train_layout.tp"),
    f"{A}.actor.megatron.pipeline_model_parallel_size": mapped("workload.train_layout.pp"),
    f"{A}.actor.megatron.virtual_pipeline_model_parallel_size": mapped("workload.train_layout.vpp"),
    f"{A}.actor.megatron.expert_model_parallel_size": mapped("workload.train_layout.ep"),
    f"{A}.actor.megatron.context_parallel_size": mapped("workload.train_layout.cp"),
    f"{A}.actor.megatron.sequence_parallel": mapped("workload.train_layout.sequence_parallel"),
    f"{A}.actor.megatron.use_distributed_optimizer": mapped("workload.train_layout.zero", "true: 1, false: 0"),
    f"{A}.actor.megatron.expert_tensor_parallel_size": mapped("workload.train_layout.etp", "MoE parallel folding"),
    **{f"{A}.actor.megatron.{k}": mapped(f"workload.train_params.offload.{OFFLOAD_KEYS[k]}", OFFLOAD_NOTE)
       for k in MEGATRON_OFFLOAD_KEYS},
    f"{A}.actor.megatron.grad_offload": ignored(
        "verl 0.5-0.7 read it and never use it (workers/megatron_workers.py _is_offload_grad); the Megatron "
        "offload frees the gradient buffers with the parameters (utils/megatron_utils.py: storage().resize_(0))"),
    f"{A}.actor.megatron.seed": ignored("random seed: no effect on step time"),
    f"{A}.actor.megatron.*": unsupported("Megatron option not modelled"),
    **ddp_rules(VERL_DDP),
    GRAD_REDUCE_IN_FP32: mapped("workload.train_params.memory.grad_bytes_per_param", GRAD_REDUCE_IN_FP32_NOTE),
    **{f"{A}.actor.megatron.{k}": ignored("checkpoint / model loading: no effect on step time") for k in (
        "use_dist_checkpointing", "dist_checkpointing_path", "use_mbridge")},
    f"{A}.actor.megatron.forward_only": unsupported("a forward-only Megatron engine for training is not modelled",
                                                    neutral=False),
    f"{A}.actor.megatron.override_transformer_config.*": unsupported("a Megatron TransformerConfig override not "
                                                                     "modelled"),
    **recompute_rules(f"{A}.actor.megatron.override_transformer_config"),
    f"{A}.actor.megatron.override_transformer_config.moe_token_dispatcher_type": mapped(
        "workload.train_params.comm.moe_token_dispatcher", "alltoall, verl's (models/mcore/config_converter.py); "
        "allgather is refused: verl sets variable_seq_lengths=True, beside which Megatron-Core refuses it; flex "
        "(DeepEP) with moe_enable_deepep true"),
    **TRANSFORMER_RULES,
    f"{A}.actor.megatron.override_transformer_config.moe_enable_deepep": mapped(
        "workload.train_params.comm.moe_token_dispatcher", "true with moe_token_dispatcher_type flex (DeepEP's "
        "kernels), as Megatron-Core pairs them; either without the other is refused"),
    f"{A}.actor.megatron.override_transformer_config.attention_backend": unsupported(
        "attention kernels other than flash are not modelled", neutral="flash"),
    f"{A}.actor.load_weight": ignored("model loading options: no effect on step time"),
    f"{A}.actor.data_loader_seed": ignored(_DATA),
    f"{A}.rollout.layer_name_map.*": ignored("parameter names the refit maps: no effect on step time"),
    "critic.nccl_timeout": ignored("a collective's time-out: no effect on step time"),
    f"{A}.actor.fsdp_config.*": unsupported(_FSDP),
    # FSDP options at verl's defaults, which rlsim's FSDP model is: per-layer wrapping (min_num_params 0:
    # verl's transformer-layer auto-wrap), no forward prefetch, flat parameters, a training engine
    **{f"{A}.actor.fsdp_config.{k}": unsupported(_FSDP, neutral=value) for k, value in (
        ("wrap_policy.min_num_params", 0), ("forward_prefetch", False), ("use_orig_params", False),
        ("forward_only", False), ("entropy_checkpointing", False), ("entropy_from_logits_with_chunking", False))},
    **{f"{A}.actor.fsdp_config.{k}": mapped(f"workload.train_params.offload.{OFFLOAD_KEYS[k]}", OFFLOAD_NOTE)
       for k in FSDP_OFFLOAD_KEYS},
    f"{A}.actor.fsdp_config.fsdp_size": mapped("workload.train_layout.zero_shard_size", "fsdp / fsdp2: below the "
                                               "trainer's world, HSDP (create_device_mesh: a (ddp, fsdp) mesh): "
                                               "states sharded over fsdp_size consecutive ranks, replicated across; "
                                               "-1 or the world or more: over all ranks"),
    f"{A}.actor.fsdp_config.reshard_after_forward": mapped(
        "workload.train_params.memory.zero3_reshard_after_forward", "fsdp2 (fully_shard's reshard_after_forward): false "
        "keeps each layer whole from its forward through its backward, which then gathers nothing; the fsdp "
        "strategy (FSDP1) does not read it"),
    f"{A}.actor.fsdp_config.offload_policy": mapped(
        "workload.train_params.offload.fsdp_cpu_offload", "fsdp2: FSDP2's CPUOffloadPolicy (the sharded state on "
        "the host, copied per layer and micro-batch, the optimizer step on the CPU), in place of param_offload / "
        "optimizer_offload, which verl then turns off; the fsdp strategy does not read it"),
    f"{A}.actor.fsdp_config.mixed_precision.reduce_dtype": mapped(
        "workload.train_params.comm.grad_reduce_bytes_per_param", "the dtype FSDP reduces gradients in (verl's "
        "default fp32: 4 bytes)"),
    f"{A}.actor.fsdp_config.model_dtype": mapped("schedule.refit_gather_bytes_per_param",
                                                 "the dtype of the actor's sharded parameters (verl's default fp32), "
                                                 "each gathered whole over the FSDP group at every refit; and "
                                                 "workload.train_params.memory: that shard is the master copy "
                                                 "(resident_weight_bytes_per_param), its gradients and AdamW's m "
                                                 "and v are in its dtype"),
    # reference and rollout
    f"{A}.ref.*": unsupported("the reference forward uses the trainer's layout and micro-batching in rlsim"),
    f"{REF_DDP}.*": ignored(REF_DDP_NOTE),
    f"{A}.ref.fsdp_config.param_offload": ignored(
        "verl 0.6.0 builds the FSDP reference with CPUOffload(offload_params=True) whatever this says "
        "(workers/fsdp_workers.py: 'We force reference policy to use CPUOffload'): the import sets "
        "workload.reference_cpu_offload under fsdp / fsdp2 (each forward copies every layer's fp32 shard in)"),
    f"{A}.ref.megatron.param_offload": mapped("schedule.reference_swap_copies", REFERENCE_SWAP_NOTE),
    f"{A}.ref.fsdp_config.model_dtype": mapped("workload.reference_cpu_offload_bytes_per_param",
                                               "fsdp / fsdp2: the dtype of the reference's host shards (verl's default "
                                               "fp32: 4 bytes), copied in at every forward"),
    f"{A}.rollout.over_sample_rate": unsupported("verl 0.6's SGLang multi-turn rollout aborts the last requests once "
                                                 "(1 - rate) of them are done (verl 0.9 reads it nowhere): not "
                                                 "modelled", neutral=0),
    f"{A}.rollout.multi_stage_wake_up": unsupported("SGLang's staged wake-up is not modelled", neutral=False),
    f"{A}.rollout.skip_rollout": unsupported("rollouts loaded from a dump are not modelled", neutral=False),
    f"{A}.rollout.skip_dump_dir": ignored("read with skip_rollout only"),
    f"{A}.rollout.skip_tokenizer_init": ignored("the engine's start-up: token ids in and out either way"),
    f"{A}.rollout.name": mapped("workload.engine", f"vllm: {VLLM_ENGINE} (vLLM V1 through the LLM class, "
                                f"under the knobs verl passes); sglang: {SGLANG_ENGINE} (SGLang's defaults)"),
    f"{A}.rollout.mode": mapped("workload.inference.dispatch", "async (verl's agent loop, the default from 0.7): "
                                "per-sample, each sample its own request to the next server (AsyncLLMServerManager, "
                                "least requests so far); sync: per-prompt"),
    f"{A}.rollout.n": mapped("workload.samples_per_prompt"),
    f"{A}.rollout.tensor_model_parallel_size": mapped("workload.rollout_layout.tp"),
    # verl 0.6.0 workers/config/rollout.py RolloutConfig asserts expert_parallel_size = tensor_model_parallel_size
    # x data_parallel_size: one engine of tp x dp GPUs, attention data-parallel dp ways, experts over all of
    # them (vLLM's enable_expert_parallel) - rlsim's rollout_layout.ep is that dp (EP_OVER_TP_NOTE at dp 1)
    f"{A}.rollout.expert_parallel_size": mapped("workload.rollout_layout.ep", "vLLM's EP over the engine's tp x "
                                                "data_parallel_size GPUs: rlsim's ep is the data_parallel_size; at "
                                                "data_parallel_size 1 ep 1 prices the same per GPU (said in a note); "
                                                "ignored on a dense model"),
    f"{A}.rollout.data_parallel_size": mapped("workload.rollout_layout.ep", "with expert_parallel_size = tp x dp: "
                                              "attention data-parallel inside one engine (rlsim's ep)"),
    f"{A}.rollout.pipeline_model_parallel_size": unsupported(
        "verl raises NotImplementedError for a vllm, sglang or trtllm rollout with pipeline_model_parallel_size > 1 "
        "(workers/config/rollout.py, 0.6.0 and 0.9.1); rlsim prices such engines (workload.rollout_layout.pp)",
        neutral=1),
    f"{A}.rollout.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization"),
    f"{A}.rollout.max_num_seqs": mapped("workload.rollout_layout.max_num_seqs"),
    f"{A}.rollout.dtype": mapped("workload.rollout_layout.weight_dtype", "and kv_dtype"),
    f"{A}.rollout.prompt_length": ignored("verl sets it from data.max_prompt_length (mapped there)"),
    f"{A}.rollout.response_length": ignored(
        "verl sets it from data.max_response_length (mapped there); given apart from it, it is the cap"),
    f"{A}.rollout.max_model_len": ignored("lengths are capped by data.max_*_length (mapped there); read only to "
                                          "refuse a max_num_batched_tokens below it, as verl and vLLM do"),
    **{f"{A}.rollout.{k}": ignored("sampling parameters: the same per-token cost (their effect on lengths "
                                   "belongs in workload.response_length)")
       for k in ("top_k", "top_p", "do_sample", "seed")},
    f"{A}.rollout.temperature": mapped("workload.train_params.compute.loss_traffic_bytes_per_logit", "the trainer "
                                       "divides the logits by it before the log-probs (verl 0.9's FSDP engine "
                                       "workers skip it at 1.0); its effect on lengths belongs in "
                                       "workload.response_length"),
    f"{A}.rollout.ignore_eos": unsupported("generating to the cap changes the length law; set "
                                           "workload.response_length", neutral=False),
    **{f"{A}.rollout.{k}": mapped(f"workload.inference.{target}", "the engine knob of the same meaning")
       for k, target in ENGINE_KEYS.items()},
    f"{A}.rollout.cudagraph_capture_sizes": mapped("workload.inference.cuda_graph_max_batch",
                                                   "the largest size (vLLM pads a step to the next captured size and "
                                                   "runs eager above the largest); vLLM only"),
    f"{A}.rollout.free_cache_engine": mapped("schedule.switch.engine_sleep", "colocated: verl's sharding manager puts "
                                             "vLLM to sleep after generation and wakes it for the weight sync: level 2 "
                                             "(weights discarded; verl 0.6+ with vLLM >= 0.8.5), level 1 with "
                                             "layered_summon (verl 0.4-0.5: level 1); false: the engine stays "
                                             "resident through training (schedule.switch.engine_resident)"),
    f"{A}.rollout.log_prob_use_dynamic_bsz": mapped("workload.train_layout.logprob_max_tokens_per_micro_batch",
                                                   "true: log-prob micro-batches within log_prob_max_token_len_per_gpu "
                                                   "tokens (verl's default: the actor's use_dynamic_bsz)"),
    f"{A}.rollout.log_prob_max_token_len_per_gpu": mapped("workload.train_layout.logprob_max_tokens_per_micro_batch",
                                                         "token budget of a log-prob micro-batch (verl's default: "
                                                         "ppo_max_token_len_per_gpu)"),
    f"{A}.rollout.log_prob_micro_batch_size_per_gpu": mapped("schedule.forward_micro_batch", "samples per log-prob "
                                                             "micro-batch without dynamic batch size"),
    f"{A}.rollout.log_prob_micro_batch_size": mapped("schedule.forward_micro_batch", GLOBAL_MICRO_BATCH_NOTE),
    **{f"{A}.rollout.{k}": ignored("engine start-up / logging options: no effect on step time")
       for k in ("load_format", "disable_log_stats", "update_weights_bucket_megabytes")},
    f"{A}.rollout.layered_summon": mapped("schedule.switch.engine_sleep_level", "colocated with free_cache_engine: "
                                          "true keeps vLLM's sleep at level 1 (weights to host and back)"),
    f"{A}.rollout.engine_kwargs.*": unsupported("engine-specific options are not modelled"),
    f"{A}.rollout.val_kwargs.*": ignored(_VAL),
    f"{A}.rollout.multi_turn.*": unsupported("this multi-turn option is not modelled"),
    f"{A}.rollout.multi_turn.enable": mapped("workload.multi_turn", "the tool agent loop (tool_agent_loop.py): each "
                                             "sample turns until max_assistant_turns, its tools' answers counted in "
                                             "response_length; the tools' seconds and answer tokens come with --set"),
    f"{A}.rollout.multi_turn.max_assistant_turns": mapped("workload.multi_turn.max_turns"),
    f"{A}.rollout.multi_turn.max_user_turns": unsupported("user turns (an interaction in the loop) are not modelled",
                                                          neutral=None),
    f"{A}.rollout.multi_turn.max_parallel_calls": ignored("a turn's tool calls run together: "
                                                          "workload.multi_turn.tool_latency_s is their seconds"),
    **{f"{A}.rollout.multi_turn.{k}": ignored("a character cap on a tool's text: its tokens are "
                                              "workload.multi_turn.observation_tokens")
       for k in ("max_tool_response_length", "tool_response_truncate_side")},
    **{f"{A}.rollout.multi_turn.{k}": ignored("which tools run and how their text is formatted: their seconds and "
                                              "tokens are workload.multi_turn's")
       for k in ("tool_config_path", "function_tool_path", "format", "use_inference_chat_template",
                 "tokenization_sanity_check_mode")},
    f"{A}.rollout.calculate_log_probs": ignored("the engine returns its sampling log-probs with the tokens (no pass "
                                                "of its own): main_ppo still runs its old_log_prob pass (mapped), "
                                                "verl-fully-async trains on these instead"),
    f"{A}.rollout.agent.num_workers": mapped("workload.reward.workers", "the agent loop (rollout.mode async, fully_async): "
                                             "each worker scores its samples as they end, in its RewardManagerWorker"),
    f"{A}.rollout.agent.*": unsupported("agent-loop workers are not modelled"),
    f"{A}.rollout.agent.default_agent_loop": unsupported("an agent loop other than one generation a prompt (tools, "
                                                         "multi-turn) is not modelled", neutral="single_turn_agent"),
    # keys verl 0.7.0 added (its generated ppo_trainer / ppo_megatron_trainer configs, read in the 0.7.0 wheel)
    f"{A}.actor.calculate_entropy": mapped("workload.entropy.passes", "true: the update computes the entropy "
                                           "over the vocabulary (for its metrics) whatever entropy_coeff"),
    **{f"{A}.actor.{k}": ignored(_LOSS) for k in ("loss_scale_factor", "tau_pos", "tau_neg")},
    f"{A}.actor.rollout_n": ignored("a copy of rollout.n the actor's loss reads"),
    f"{A}.actor.router_replay.mode": unsupported("MoE routing replay (the rollout's expert choices recorded and "
                                                 "replayed in training) is not modelled", neutral="disabled"),
    f"{A}.actor.router_replay.*": ignored("used with router_replay.mode"),
    f"{A}.model.lora_adapter_path": ignored("where the adapters are loaded from: no effect on step time"),
    # verl 0.7's megatron workers: Megatron-Bridge's LoRA from model.lora (workers/config/megatron_peft.py)
    f"{A}.model.lora.rank": mapped("workload.lora.rank", "megatron: Megatron-Bridge's LoRA (0: full fine-tuning)"),
    f"{A}.model.lora.target_modules": mapped("workload.lora.targets", "Megatron's module names"),
    f"{A}.model.lora.type": unsupported("adapters other than LoRA (DoRA) are not modelled", neutral="lora"),
    f"{A}.model.lora.merge": mapped("schedule.lora_refit", "verl 0.9 megatron: true merges the adapters into each sync "
                                                           "(the whole model); false sends the adapters once the "
                                                           "base is synced (engine/megatron/transformer_impl.py)"),
    f"{A}.model.lora.exclude_modules": unsupported("modules left out of the LoRA targets by name are not modelled",
                                                   neutral=[]),
    **{f"{A}.model.lora.{k}": ignored("LoRA scaling, dropout, initialisation, dtype, adapter path and vision "
                                      "freezing: no modelled cost") for k in (
        "alpha", "dropout", "dropout_position", "lora_A_init_method", "lora_B_init_method", "a2a_experimental",
        "dtype", "adapter_path", "freeze_vision_model", "freeze_vision_projection", "freeze_language_model")},
    **{f"{A}.{role}.megatron.{k}": rule for role in ("actor", "ref") for k, rule in (
        ("dist_checkpointing_prefix", ignored("checkpoint naming: no effect on step time")),
        ("vanilla_mbridge", ignored("which Megatron-Bridge converts the weights: no modelled cost")),
        ("use_remove_padding", MEGATRON_REMOVE_PADDING_RULES[role]),
        ("dtype", unsupported("a Megatron compute dtype other than bf16 is not modelled (workload.dtype)",
                              neutral="bfloat16")),
        ("forward_only", ignored("whether the engine is built for forward passes only: the role decides")))},
    f"{A}.model.tiled_mlp.enabled": unsupported("the MLP run in sequence tiles (to save memory) is not modelled",
                                                neutral=False),
    f"{A}.model.tiled_mlp.num_shards": ignored("used with tiled_mlp.enabled"),
    f"{A}.rollout.enable_rollout_routing_replay": unsupported("recording the engine's expert choices for routing "
                                                              "replay is not modelled", neutral=False),
    f"{A}.rollout.logprobs_mode": ignored("which log-probs the engine returns (processed or raw): no effect on step "
                                          "time"),
    f"{A}.rollout.prometheus.*": ignored(_LOG),
    f"{A}.rollout.quantization": unsupported("a quantized engine (online fp8) is not mapped: give "
                                             "workload.rollout_layout.weight_dtype", neutral=None),
    f"{A}.rollout.quantization_config_file": ignored("used with rollout.quantization"),
    **{f"{A}.{role}.fsdp_config.{k}": rule for role in ("actor", "ref") for k, rule in (
        ("dtype", unsupported("an FSDP compute dtype other than bf16 is not modelled (workload.dtype)",
                              neutral="bfloat16")),
        ("seed", ignored("seeding: no effect on step time")),
        ("full_determinism", unsupported("deterministic kernels are not modelled", neutral=False)),
        ("forward_only", ignored("whether the engine is built for forward passes only: the role decides")))},
    # critic / reward
    "critic.model.path": mapped("workload.critic_model", "with a critic (adv_estimator gae, or critic.enable)"),
    "critic.enable": mapped("workload.algorithm", "null (verl's default): a critic under adv_estimator gae only; true: "
                                                  "a critic (its values and training) whatever the estimator, rlsim's "
                                                  "ppo stage graph; false under gae is refused (GAE reads its values)"),
    "critic.model.fsdp_config.param_offload": mapped("workload.critic_offload.params", "CriticWorker: the parameters "
                                                     "in before compute_values and update_critic, out after"),
    "critic.model.fsdp_config.optimizer_offload": mapped("workload.critic_offload.optimizer", "CriticWorker: the "
                                                         "optimizer state in before update_critic, out after"),
    "critic.megatron.param_offload": mapped("workload.critic_offload.params", "critic.strategy megatron: its "
                                            "CriticWorker loads and offloads them as the fsdp one does"),
    "critic.megatron.optimizer_offload": mapped("workload.critic_offload.optimizer", "critic.strategy megatron: its "
                                                "CriticWorker loads and offloads it as the fsdp one does"),
    "critic.*": unsupported("the critic trains with the actor's layout and micro-batching in rlsim (a key with an "
                            "actor counterpart, CRITIC_AS_ACTOR, is mapped where it equals it)"),
    f"{CRITIC_DDP}.*": unsupported(f"{CRITIC_DDP_NOTE} (a key equal to the actor's effective value takes its "
                                   "status)"),
    "critic.optim.*": ignored(_LR),
    **{f"critic.optim.{k}": mapped(
        "workload.critic_optimizer", "the critic's own optimizer (built apart from the actor's, as the actor's is): "
        "its state's bytes a parameter and its step's traffic where they differ from the actor's")
       for k in ("optimizer", "optimizer_impl")},
    **_precision_aware_optimizer_rules("critic.optim"),
    **{f"critic.{k}": ignored(_LOSS) for k in ("grad_clip", "loss_agg_mode", "shuffle")},
    **{f"critic.model.{k}": ignored("model loading options: no effect on step time") for k in (
        "external_lib", "override_config.*", "override_config", "trust_remote_code", "use_shm", "tokenizer_path")},
    "critic.model.lora_rank": unsupported("LoRA on the critic is not modelled (it trains whole)", neutral=0),
    "critic.model.lora_alpha": ignored("a scale on the adapters' output: no effect on step time"),
    "critic.model.target_modules": ignored("read with critic.model.lora_rank > 0 only"),
    "critic.rollout_n": ignored("verl's copy of actor_rollout_ref.rollout.n (mapped)"),
    "critic.checkpoint.*": ignored(_CKPT),
    "critic.cliprange_value": ignored(_LOSS),
    "reward_model.enable": mapped("workload.reward.kind", "true: a reward-model forward, false: rule reward"),
    "reward_model.model.path": mapped("workload.reward.model"),
    "reward_model.*": unsupported("the reward model runs with rlsim's forward layout"),
    **{f"reward_model.model.{k}": ignored("model loading options: no effect on step time") for k in (
        "input_tokenizer", "external_lib", "trust_remote_code", "use_shm")},
    "reward_model.model.fsdp_config.param_offload": ignored(
        "verl's RewardModelWorker keeps its shards on the host whatever this says (CPUOffload / CPUOffloadPolicy "
        "always): workload.reward.cpu_offload"),
    "reward_model.enable_resource_pool": mapped("schedule.aux_devices", "true: verl's reward_pool (main_ppo.py "
                                                "init_resource_pool_mgr) of reward_model.nnodes x n_gpus_per_node "
                                                "GPUs beside the job's, the reward model's forward on them while the "
                                                "hybrid engine's driver waits (ray_trainer.py compute_rm_score, "
                                                "before the log-prob passes): {reward: N}; on the split-pool "
                                                "trainers not modelled"),
    **{f"reward_model.{k}": ignored("read with enable_resource_pool only") for k in ("nnodes", "n_gpus_per_node")},
    "reward_model.sandbox_fusion.url": unsupported("a code sandbox's execution time is not modelled (give it as "
                                                   "workload.reward.cpu_s_per_sample)", neutral=None),
    "reward_model.sandbox_fusion.*": ignored("read with sandbox_fusion.url only"),
    "reward_model.overlong_buffer.*": ignored("DAPO's overlong length penalty: arithmetic on each score in the rule "
                                              "reward manager, inside workload.reward.cpu_s_per_sample"),
    "reward_model.reward_kwargs.*": ignored("arguments of the rule function: its CPU time is "
                                            "workload.reward.cpu_s_per_sample"),
    "reward_model.reward_manager": mapped("workload.reward.workers", "naive / dapo with the synchronous rollout: the driver "
                                          "loops over the batch, one worker, at the naive manager's measured cost a "
                                          "sample (params.VERL_NAIVE_*); the agent loop: rollout.agent.num_workers, "
                                          "at that cost; other managers: that cost"),
    "reward_manager.name": mapped("workload.reward.workers", "verl 0.7's name for reward_model.reward_manager (which "
                                                            "it deprecates): as that key"),
    "reward_manager.source": ignored("where the manager class is registered: no effect on step time"),
    "reward_manager.module.*": ignored("a custom manager's module: its CPU time is workload.reward.cpu_s_per_sample"),
    "transfer_queue.enable": unsupported("verl's TransferQueue data path is not modelled", neutral=False),
    "transfer_queue.*": ignored("used with transfer_queue.enable"),
    # verl 0.9 (its generated ppo_trainer / ppo_megatron_trainer configs, read in the 0.9.1 wheel): the
    # reward section (the reward loop's workers score each finished sample the agent loop streams to
    # one of them: experimental/reward_loop/reward_loop.py, agent_loop.py _compute_score)
    "reward.num_workers": mapped("workload.reward.workers", "verl 0.9's reward loop: each finished sample scored by "
                                                            "one of these workers as the agent loop hands it over"),
    "reward.reward_manager.name": mapped("workload.reward.workers", "verl 0.9's place for reward_manager.name: as "
                                                                    "that key"),
    "reward.reward_manager.source": ignored("where the manager class is registered: no effect on step time"),
    "reward.reward_manager.module.*": ignored("a custom manager's module: its CPU time is "
                                              "workload.reward.cpu_s_per_sample"),
    "reward.custom_reward_function.*": ignored("the rule's CPU time is workload.reward.cpu_s_per_sample"),
    # verl 0.9's reward model (experimental/reward_loop: vLLM engines behind /classify, read in the
    # 0.9.1 wheel): on a resource pool of its own (enable_resource_pool) the agent loop streams each
    # finished sample to it; colocated, the trainer wakes it on its own GPUs to score the batch
    "reward.reward_model.enable": mapped("workload.reward.served", "true: a reward model (kind: model) served by "
                                         "vLLM engines"),
    "reward.reward_model.enable_resource_pool": mapped("workload.reward.served.devices", "true: the reward "
                                                       "model's engines on devices of their own score each sample "
                                                       "as it is handed over; false: woken on the trainer's devices "
                                                       "after generation to score the batch, then put to sleep"),
    **{f"reward.reward_model.{k}": mapped("workload.reward.served.devices", "the reward model's resource pool: "
                                          "nnodes x n_gpus_per_node, beside the trainer's (the topology holds both)")
       for k in ("nnodes", "n_gpus_per_node")},
    "reward.reward_model.model_path": mapped("workload.reward.model"),
    **{f"{RM_ROLLOUT}.{k}": mapped(f"workload.reward.served.{to}") for k, to, _ in SERVED_ENGINE_KEYS},
    **{f"{RM_ROLLOUT}.{k}": unsupported("a reward-model engine with data, expert or pipeline parallelism is not "
                                        "imported (set workload.reward.served.layout.ep)", neutral=1)
       for k in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size")},
    f"{RM_ROLLOUT}.enable_prefix_caching": unsupported(
        "the reward model's prefix cache is not modelled: each sample prefills its whole sequence, where a "
        "prompt's n samples could share the prompt's", neutral=False),
    f"{RM_ROLLOUT}.free_cache_engine": ignored("the engines' first sleep after start-up: colocated, compute_rm_score "
                                               "wakes them and puts them back to sleep around every scoring whatever "
                                               "it says (workload.reward.served.sleep_wake_s)"),
    "reward.reward_model.*": ignored("used with reward.reward_model.enable: the engine's name and loading options, "
                                     "no effect beyond the pool and layout mapped"),
    **{f"{prefix}sandbox_fusion.url": unsupported("a code sandbox's execution time is not modelled (give it as "
                                                  "workload.reward.cpu_s_per_sample)", neutral=None)
       for prefix in ("", "reward.")},
    **{f"{prefix}sandbox_fusion.*": ignored("read with sandbox_fusion.url only") for prefix in ("", "reward.")},
    # verl 0.9's on-policy distillation (trainer/config/distillation/distillation.yaml, workers/config/
    # distillation.py, experimental/teacher_loop; read in the 0.9.1 wheel): one teacher served by
    # engines on a resource pool of its own, each finished sample scored after its reward
    "distillation.enabled": mapped("workload.distillation", "true: a teacher served by inference engines on devices "
                                   "of its own scores each finished sample after its reward (verl's teacher loop)"),
    "distillation.*": ignored("used with distillation.enabled"),
    **{f"distillation.{k}": mapped("workload.distillation.devices", "the teacher's resource pool: nnodes x "
                                   "n_gpus_per_node, beside the trainer's (the topology holds both)")
       for k in ("nnodes", "n_gpus_per_node")},
    f"{TEACHER}.model_path": mapped("workload.distillation.teacher"),
    **{f"{TEACHER}.inference.{k}": mapped(f"workload.distillation.{to}") for k, to, _ in SERVED_ENGINE_KEYS},
    **{f"{TEACHER}.inference.{k}": unsupported("a teacher engine with data or expert parallelism is not imported "
                                               "(set workload.distillation.layout.ep)", neutral=1)
       for k in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size")},
    f"{TEACHER}.inference.enable_prefix_caching": ignored(
        "a request that asks prompt log-probabilities needs every position's logits: vLLM V1 skips the prefix "
        "cache for it (SGLang matches none past logprob_start_len 0), so every sample prefills its whole "
        "sequence, as rlsim prices it"),
    f"{TEACHER}.inference.free_cache_engine": ignored("the teacher's engines sleep and wake with the rollout's: "
                                                      "their wake-up is not priced"),
    "distillation.distillation_loss.topk": mapped("workload.distillation.topk", "with loss_mode forward_kl_topk: "
                                                  "the top-k log-probabilities the teacher returns per token"),
    "distillation.distillation_loss.loss_mode": mapped("workload.distillation.topk", "forward_kl_topk: topk "
                                                       "log-probabilities a token; the estimators (k1, k3, ...): the "
                                                       "sampled token's"),
    "distillation.teacher_models.*": unsupported("several teachers routed by teacher_key are not modelled (one "
                                                 "teacher: teacher_models.teacher_model)"),
    f"{TEACHER}.*": ignored("the teacher's key, replica count (its pool over its engines), engine name and "
                            "loading options: no effect beyond the pool and layout mapped"),
    **{f"{A}.{part}.{feature}.{flag}": unsupported(why, neutral=False) for part, feature, flag, why in (
        ("model", "mtp", "enable", "multi-token prediction heads are not modelled beyond the rollout's speculation "
                                   "(enable_rollout)"),
        ("model", "mtp", "enable_train", "training the multi-token prediction heads is not modelled"),
        ("rollout", "mtp", "enable", "the rollout's MTP config (model.mtp by default) is mapped with enable_rollout; "
                                     "without it the MTP weights are loaded and not used"),
        ("actor", "qat", "enable", "quantization-aware training is not modelled"),
        ("rollout", "qat", "enable", "a quantization-aware rollout is not modelled"),
        ("rollout", "disaggregation", "enabled", "prefill / decode disaggregated serving is not modelled"))},
    **{f"{A}.{part}.{feature}.*": ignored(f"used with {feature}.enable{'d' if feature == 'disaggregation' else ''}")
       for part, feature in (("model", "mtp"), ("rollout", "mtp"), ("actor", "qat"), ("rollout", "qat"),
                             ("rollout", "disaggregation"))},
    **{f"skip.{phase}.enable": unsupported("replaying dumped rollouts in place of generation (a debugging aid) is not "
                                           "modelled", neutral=False) for phase in ("rollout", "async_rollout",
                                                                                    "rollout_tq")},
    "skip.*": ignored("used with skip.<phase>.enable"),
    "trainer.use_v1": mapped("schedule.kind", "true (verl 0.9's default): the v1 trainer in its trainer.v1.trainer_mode; "
                             "false: the legacy trainer's hybrid-engine step (colocated)"),
    "trainer.v1.trainer_mode": mapped("schedule.kind", "sync: verl-sync; colocate_async: verl-colocate-async; "
                                      "separate_async: verl-separate-async"),
    "trainer.v1.colocate_async.num_warmup_batches": mapped("schedule.num_warmup_batches"),
    "trainer.v1.separate_async.num_warmup_batches": mapped("schedule.num_warmup_batches"),
    "trainer.v1.separate_async.parameter_sync_step": mapped("schedule.parameter_sync_step"),
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": mapped(
        "schedule.hybrid_rollout", "the trainer's devices lent to generation between steps (with the switch of "
        "the hybrid engine: schedule.switch)"),
    **{f"trainer.v1.separate_async.hybrid_rollout.{key}": mapped(f"schedule.hybrid_rollout.{key}")
       for key in HYBRID_ROLLOUT_KEYS},
    "trainer.v1.separate_async.hybrid_rollout.*": ignored("used with hybrid_rollout.enable_switch"),
    "trainer.v1.sampler.max_off_policy_threshold": mapped("schedule.max_off_policy_threshold"),
    "trainer.v1.sampler.max_off_policy_strategy": mapped("schedule.max_off_policy_strategy"),
    "trainer.v1.sampler.custom_sampler.*": unsupported("a replay buffer of your own is not modelled", neutral=None),
    "trainer.v1.sampler.sync_refill_failed_groups": ignored("failed rollouts are not modelled"),
    "trainer.v1.*": ignored("the v1 trainer's other settings: none changes the step's time"),
    "trainer.checkpoint_callback_class": ignored(_LOG),
    f"{A}.rollout.checkpoint_engine.backend": unsupported("a checkpoint engine other than naive (in-process, the hybrid "
                                                          "engine) or nccl (actor rank 0 broadcasting buckets to the "
                                                          "rollout, double-buffered) is not modelled"),
    f"{A}.rollout.checkpoint_engine.*": ignored("the sync's bucket size and engine options: rlsim prices the per-tensor "
                                                "sync by its bytes and tensors"),
    f"{A}.rollout.nnodes": mapped("schedule.rollout_devices", "trainer.v1 separate_async's standalone rollout pool: "
                                  "nnodes x n_gpus_per_node"),
    f"{A}.rollout.n_gpus_per_node": mapped("schedule.rollout_devices", "with actor_rollout_ref.rollout.nnodes"),
    f"{A}.rollout.full_determinism": unsupported("deterministic kernels are not modelled", neutral=False),
    f"{A}.rollout.moe_load_balance_metrics_interval": ignored(_LOG),
    f"{A}.rollout.router_config_path": unsupported("a custom request router is not modelled", neutral=None),
    f"{A}.rollout.scheduling_policy": unsupported("engine scheduling other than first-come first-served is not "
                                                  "modelled", neutral="fcfs"),
    f"{A}.actor.calculate_sum_pi_squared": unsupported("another pass over the vocabulary in the update is not "
                                                       "modelled", neutral=False),
    f"{A}.actor.entropy_from_logits_chunk_size": ignored("the entropy's chunking: memory only"),
    f"{A}.actor.pad_to_length": unsupported("padding the batch to a fixed length is not modelled", neutral=False),
    f"{A}.actor.use_prefix_grouper": unsupported("a group's shared prompt computed once in training is not modelled",
                                                 neutral=False),
    **{f"{A}.{role}.fsdp_config.{k}": rule for role in ("actor", "ref") for k, rule in (
        ("pad_to_length_bucket", ignored("used with pad_to_length")),
        ("qat.*", ignored("used with actor.qat.enable")),
        ("turbo_config.*", ignored("settings of verl 0.9's fsdp turbo engine (engine/fsdp/fsdp_turbo_impl.py), which "
                                   "these workers do not run")),
        ("use_no_sync_for_gradient_accumulation", unsupported(
            "FSDP's gradients reduced once over the accumulated micro-batches is not modelled (rlsim reduce-scatters "
            "each micro-batch's)", neutral=False)))},
    **{f"{A}.{role}.megatron.{k}": rule for role in ("actor", "ref") for k, rule in (
        ("dist_ckpt_optim_fully_reshardable", ignored("checkpoint layout: no effect on step time")),
        ("distrib_optim_fully_reshardable_mem_efficient", ignored("checkpoint layout: no effect on step time")),
        ("dynamic_context_parallel", unsupported("a context-parallel size chosen per batch is not modelled",
                                                 neutral=False)),
        ("entropy_from_logits_chunk_size", ignored("the entropy's chunking: memory only")),
        ("entropy_from_logits_with_chunking", ignored("the entropy's chunking: memory only")),
        ("pad_bshd_to_minibatch_max", ignored("padding of unpacked rows: rlsim pads as "
                                              "actor.megatron.use_remove_padding says")),
        ("pad_to_length", unsupported("padding the batch to a fixed length is not modelled", neutral=False)),
        ("pad_to_length_bucket", ignored("used with pad_to_length")),
        ("qat.enable", unsupported("quantization-aware training is not modelled", neutral=False)),
        ("qat.*", ignored("used with qat.enable")),
        ("router_replay.mode", unsupported("MoE routing replay is not modelled", neutral="disabled")),
        ("router_replay.*", ignored("used with router_replay.mode")),
        ("use_megatron_fsdp", unsupported("Megatron's own FSDP is not modelled (its distributed optimizer is)",
                                          neutral=False)))},
    f"{A}.rollout.qat": ignored("no quantization-aware rollout section (null)"),
    "algorithm.filter_groups.max_inflight_gen_batches": mapped("schedule.max_inflight_gen_batches", "verl 0.9's v1 "
                                                               "sync mode with DAPO: prompts in flight, in batches"),
    "reward_model.launch_reward_fn_async": mapped("schedule.reward_during_forwards", "colocated: the rule reward "
                                                  "runs during the log-prob passes and is gathered before the update"),
    "custom_reward_function.*": ignored("the rule's CPU time is workload.reward.cpu_s_per_sample"),
    # algorithm
    "algorithm.adv_estimator": mapped("workload.algorithm", "gae: ppo (with a critic); grpo and critic-free "
                                                             "estimators: grpo's stage graph; remax (a greedy "
                                                             "baseline generation) is refused"),
    "algorithm.use_kl_in_reward": mapped("workload.reference", "a KL term needs the reference forward"),
    **{f"algorithm.{k}": ignored("advantage arithmetic on the host: no modelled cost")
       for k in ("gamma", "lam", "norm_adv_by_std_in_grpo", "kl_penalty", "kl_ctrl.*")},
    "algorithm.filter_groups.enable": mapped("workload.dynamic_sampling", "DAPO dynamic sampling"),
    "algorithm.filter_groups.metric": ignored("which reward decides 'no signal': keep_fraction is the rlsim knob"),
    "algorithm.filter_groups.max_num_gen_batches": mapped("workload.dynamic_sampling.max_gen_batches",
                                                          "0 or less: no cap"),
    "algorithm.use_pf_ppo": unsupported("preference-feedback PPO re-sampling is not modelled", neutral=False),
    # rollout importance sampling (verl 0.6: weights from the rollout's own log-probs, which vLLM returns
    # with each sample): arithmetic in the loss
    "algorithm.rollout_is": ignored(_LOSS),
    **{f"algorithm.rollout_is_{k}": ignored(_LOSS) for k in (
        "level", "mode", "threshold", "threshold_lower", "veto_threshold")},
    "algorithm.pf_ppo.*": ignored("used only with use_pf_ppo"),
    # rollout correction (verl 0.7: algorithm.rollout_correction): bypass_mode takes the rollout's own
    # log-probs as the old ones, so fit() skips the old_log_prob pass (ray_trainer.py
    # apply_bypass_mode; read in the 0.7.0 and 0.9.1 wheels); the rest is loss arithmetic
    "algorithm.rollout_correction.bypass_mode": mapped("schedule.recompute_logprob", "true: no old_log_prob pass "
                                                                                    "(the rollout's log-probs)"),
    "algorithm.rollout_correction.*": ignored(_LOSS),
    # trainer and pools
    "trainer.nnodes": mapped("topology.nodes", "training pool nodes (the whole job when colocated)"),
    "trainer.n_gpus_per_node": mapped("topology.nodes", "training pool GPUs per node"),
    "trainer.balance_batch": unsupported("rlsim balances micro-batches by tokens", neutral=True),
    "trainer.critic_warmup": unsupported("steps without actor updates are not modelled", neutral=0),
    **{f"trainer.{k}": ignored(_LOG) for k in (
        "project_name", "experiment_name", "logger", "log_val_generations", "rollout_data_dir",
        "validation_data_dir", "ray_wait_register_center_timeout", "device", "profile_steps", "wandb_proxy")},
    **{f"trainer.{k}": ignored(_CKPT) for k in (
        "save_freq", "resume_mode", "resume_from_path", "default_hdfs_dir", "default_local_dir",
        "del_local_ckpt_after_load", "max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep", "esi_redundant_time")},
    **{f"trainer.{k}": ignored(_VAL) for k in ("val_before_train", "test_freq", "val_only")},
    **{f"trainer.{k}": ignored("run length: rlsim simulates `iterations` steps (--iterations N)")
       for k in ("total_epochs", "total_training_steps")},
    "ray_init.*": ignored("Ray start-up options: no effect on step time"),
    "ray_kwargs.*": ignored("Ray start-up options: no effect on step time"),
    "trainer.use_legacy_worker_impl": ignored("which worker classes verl instantiates (auto: its fsdp / megatron "
                                              "workers, whose costs rlsim models)"),
    # profilers and tracing (verl 0.6 carries a section per worker): off unless enabled, and rlsim's
    # step times exclude profiling
    **{f"{section}.profiler.*": ignored(_PROFILE) for section in (
        f"{A}.actor", f"{A}.ref", f"{A}.rollout", "critic", "reward_model")},
    "global_profiler.*": ignored(_PROFILE),
    f"{A}.rollout.trace.*": ignored(_PROFILE),
    "rollout.nnodes": mapped("schedule.rollout_devices", "rollout pool nodes"),
    "rollout.n_gpus_per_node": mapped("schedule.rollout_devices", "rollout pool GPUs per node"),
    **{f"rollout.{k}": ignored("run length / validation cadence of the Rollouter") for k in (
        "total_rollout_steps", "total_epochs", "test_freq")},
    # fully_async_policy
    "async_training.staleness_threshold": mapped("schedule.staleness_threshold"),
    "async_training.trigger_parameter_sync_step": mapped("schedule.trigger_parameter_sync_step"),
    "async_training.require_batches": mapped("schedule.require_batches"),
    "async_training.partial_rollout": mapped("schedule.partial_rollout"),
    "async_training.use_rollout_log_probs": unsupported("rlsim's verl-fully-async always uses the rollout's "
                                                        "log-probs (no old_log_prob pass)", neutral=True),
    "async_training.compute_prox_log_prob": unsupported("the proximal log-prob forward is not modelled", neutral=False),
    # verl 0.9's fully_async (experimental/fully_async_policy, read in the 0.9.1 wheel)
    "async_training.concurrent_samples_per_replica": mapped(
        "schedule.max_inflight_prompts_per_server", "verl 0.9: the Rollouter runs at most rollout servers x this "
        "prompts at once, its load balancer routing each of their requests (schedule.request_routing: true)"),
    "async_training.use_trainer_do_validate": ignored("validation on the trainer: rlsim step times exclude it"),
    "async_training.use_dynamic_resource_scheduling": mapped(
        "schedule.dynamic_resources", "verl 0.9: the trainer's GPUs lent to the Rollouter between steps (with the "
        "hybrid engine's switch, schedule.switch; schedule.request_routing: true)"),
    **{f"async_training.dynamic_schedule_{key}": mapped(f"schedule.dynamic_resources.{knob}")
       for key, knob in DYNAMIC_SCHEDULE_KEYS.items()},
    f"{A}.rollout.standalone_gpu_memory_utilization": mapped(
        "workload.rollout_layout.gpu_memory_utilization", "verl 0.9 fully_async: its standalone replicas' (the rollout "
        "pool's) in place of gpu_memory_utilization; null: that one"),
}


def recipe_of(values: Values, explicit: str | None) -> tuple[str, str]:
    """(recipe, the rule that chose it) — see the module docstring."""
    if explicit:
        if explicit not in RECIPES:
            raise RlsimError(f"unknown verl schedule {explicit!r}", field="--framework-schedule",
                             fix=f"use one of: {', '.join(RECIPES)}")
        return explicit, f"{KIND_OF_RECIPE[explicit]} (--framework-schedule {explicit})"
    mode = values("trainer.v1.trainer_mode") if values.given("trainer.v1.trainer_mode") else None
    if mode is not None and mode not in ("sync", *V1_MODES):   # verl's get_trainer_cls refuses it too
        raise RlsimError(f"unknown v1 trainer mode {mode!r}", source=values.result.source,
                         field="trainer.v1.trainer_mode", fix="pass trainer.v1.trainer_mode=sync, colocate_async or "
                                                              "separate_async")
    if mode in V1_MODES and not (values.given("trainer.use_v1") and not values.flag("trainer.use_v1")):
        return V1_MODES[mode], f"{KIND_OF_RECIPE[V1_MODES[mode]]} (trainer.v1.trainer_mode {mode}: verl 0.9's v1 trainer)"
    if values.section("async_training"):
        return "fully-async", "verl-fully-async (async_training.* keys: the fully_async_policy recipe)"
    if (values.given(f"{A}.hybrid_engine") and not values.flag(f"{A}.hybrid_engine")) or values.section("rollout"):
        return "one-step-off", "one-step-off (hybrid_engine false / a rollout.* pool: the one_step_off_policy recipe)"
    if values.given("trainer.use_v1") and not values.flag("trainer.use_v1"):
        return "colocated", "colocated (trainer.use_v1 false: main_ppo's legacy hybrid-engine trainer)"
    why = next((f"{key} {'true' if key == 'trainer.use_v1' else 'given'}"
                for key in ("trainer.use_v1", "trainer.v1.trainer_mode", *V1_ONLY_KEYS) if values.given(key)), None)
    if why is not None:
        return "sync", f"verl-sync ({why}: verl 0.9's v1 trainer in its sync mode)"
    values.result.notes.append(V1_NOTE)
    return "colocated", "colocated (main_ppo's hybrid engine: no async_training, no rollout pool)"


# verl's config sections (its defaults' and table's top-level keys): a launch script's overrides are those
# of its training command under them (verl_script.read_verl_script)
VERL_SECTIONS = frozenset(key.split(".")[0] for key in (*DEFAULTS, *RULES))


def _verl_key(key: str) -> bool:
    """A key of verl's own config as rlsim knows it: its defaults, its table (a section's catch-all
    too, unless the key is one typo away from a listed one)."""
    return key in DEFAULTS or in_table(key, RULES)


def import_verl(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
                schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """A verl YAML plus Hydra overrides -> FrameworkImport. ``user_sets`` are the rlsim ``--set``
    keys that follow (a model or topology size given there is not needed from the config)."""
    source = str(path)
    # verl's entry points compose the config with Hydra (struct mode): a plain override of a key
    # the config lacks is refused there; rlsim's table and defaults stand for verl's full config
    if is_script(path):   # a launch script: its command's overrides over verl's defaults, then the given ones
        base = read_verl_script(path, VERL_SECTIONS)
        flat = resolve_interpolations(apply_hydra_overrides({}, [*base, *overrides], source, _verl_key))
    else:
        flat = read_config(path, overrides, what="verl config", known=_verl_key)
    result = FrameworkImport("verl", source, {}, rules=RULES, overridden=overridden_keys(overrides))
    values = Values(flat, DEFAULTS, result, DEFAULTS_SOURCE)
    recipe, result.schedule_rule = recipe_of(values, schedule)
    user_model = model_set_by_user(user_sets)
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    workload = _workload(values, recipe, "workload.model" in user_sets, decided, user_model)
    strategy = str(values(f"{A}.actor.strategy"))
    inactive_section(flat, f"{A}.actor.fsdp_config" if strategy == "megatron" else f"{A}.actor.megatron",
                     f"{A}.actor.strategy is {strategy}: this backend's settings do not apply", decided)
    sched = _schedule(values, recipe, workload, decided)
    _logprob_gradient(values, workload, sched)
    _reward_model(values, recipe, workload, decided)
    reward_pool = _legacy_reward_pool(values, recipe, sched, decided)
    _distillation(values, workload, decided)
    user_sizes = any(k.startswith("topology.") or k.startswith("schedule.rollout") for k in user_sets)
    served = [("reward model", "reward.reward_model", workload["reward"].get("served", {}).get("devices", 0)),
              ("reward model", "reward_model", reward_pool),
              ("teacher", "distillation", workload.get("distillation", {}).get("devices", 0))]
    result.scenario["topology"] = _topology(values, recipe, sched, topology, user_sizes, served)
    if not user_sizes:   # the trainer's world: trainer.nnodes x n_gpus_per_node (its own pool when split)
        m = f"{A}.actor.megatron"    # the active backend's parallel sizes only
        keys = ([f"{m}.tensor_model_parallel_size", f"{m}.pipeline_model_parallel_size", f"{m}.context_parallel_size"]
                if strategy == "megatron" else [f"{A}.actor.ulysses_sequence_parallel_size"])
        world_divides(values, values.count("trainer.nnodes") * values.count("trainer.n_gpus_per_node"),
                      workload["train_layout"], keys, f"verl's {strategy} worker", f"{A}.actor.strategy")
    result.scenario["workload"] = workload
    result.scenario["schedule"] = sched
    _sections_not_run(values, recipe, decided)
    _other_roles_ddp(values, decided)
    _copies_of_the_actor(values, decided)
    classify(result, flat, RULES, decided)
    result.notes.append("response-length law: not in a verl config; rlsim's default law "
                        f"{_law(workload['response_length'])} capped at data.max_response_length (or the "
                        "rollout.response_length given apart from it) "
                        "(set it with --set workload.response_length.median=... / .sigma=...)")
    return result


def _distillation(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.9's on-policy distillation (distillation.enabled) -> workload.distillation: the teacher's
    model, its pool (nnodes x n_gpus_per_node, beside the trainer's), its engines' layout and
    constants (its inference config has its own: eager, a token budget of 8192 with chunked prefill),
    and the log-probabilities it returns (top-k with loss_mode forward_kl_topk)."""
    if not v.flag("distillation.enabled"):
        return
    src = v.result.source
    others = sorted({key.split(".")[2] for key in v.flat if key.startswith("distillation.teacher_models.")} -
                    {"teacher_model"})
    if others:
        raise RlsimError(f"several teachers (teacher_models {', '.join(others)}) routed by teacher_key are not "
                         "modelled", source=src, field=f"distillation.teacher_models.{others[0]}",
                         fix="distil from one teacher (distillation.teacher_models.teacher_model)")
    nodes = v.natural("distillation.nnodes")   # verl's default 0: no pool, which it refuses at start
    if not nodes:
        raise RlsimError("distillation.enabled without a teacher pool (distillation.nnodes 0)", source=src,
                         field="distillation.nnodes", fix="pass distillation.nnodes=N distillation.n_gpus_per_node=G")
    teacher, how = model_for(v(f"{TEACHER}.model_path"), f"{TEACHER}.model_path", src, policy=False)
    v.result.notes.append(f"{TEACHER}.model_path {v(f'{TEACHER}.model_path')!r} -> {how}")
    inference = f"{TEACHER}.inference"
    topk = v("distillation.distillation_loss.topk") if v("distillation.distillation_loss.loss_mode") == \
        "forward_kl_topk" else 0
    if not topk:
        decided["distillation.distillation_loss.topk"] = ("ignored", "read with loss_mode forward_kl_topk only")
    w["distillation"] = {
        "teacher": teacher, "devices": nodes * v.count("distillation.n_gpus_per_node"), **_served_engine(v, inference),
        "topk": positive_int(topk, "distillation.distillation_loss.topk", src) if topk else 0}


def _served_engine(v: Values, prefix: str) -> dict[str, dict[str, Any]]:
    """A served model's engine config under ``prefix`` (SERVED_ENGINE_KEYS) -> {layout, inference}."""
    out: dict[str, dict[str, Any]] = {"layout": {}, "inference": {}}
    for key, to, read in SERVED_ENGINE_KEYS:
        section, name = to.split(".")
        out[section][name] = getattr(v, read)(f"{prefix}.{key}")
    return out


def _reward_model(v: Values, recipe: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.9's reward model (reward.reward_model.enable: vLLM engines behind /classify) ->
    workload.reward kind model (default: the actor's architecture under a score head) served by
    engines of its layout and constants (reward.served; its rollout config has its own: eager, a token
    budget of 8192 with chunked prefill, TP 2). On a resource pool of its own (enable_resource_pool):
    its devices (nnodes x n_gpus_per_node), each sample handed over as the agent loop finishes it;
    colocated: no devices, woken on the trainer's after generation to score the batch."""
    rm = "reward.reward_model"
    if not v.flag(f"{rm}.enable"):
        for key in v.flat:
            if key.startswith(f"{rm}.") and key != f"{rm}.enable":
                decided[key] = ("ignored", "no reward model (reward.reward_model.enable false)")
        return
    src = v.result.source
    path = v(f"{rm}.model_path")
    w["reward"] = {"kind": "model",
                   **({"model": model_for(path, f"{rm}.model_path", src, policy=False)[0]} if path else {})}
    for key in v.flat:     # the rule reward's workers and manager: the workers post to the model's engines
        if key.startswith(("reward.num_workers", "reward.reward_manager.", "reward.custom_reward_function.")):
            decided[key] = ("ignored", "with a reward model the reward loop's workers post each sample to its "
                                       "engines: their CPU time is not priced")
    if v("reward.custom_reward_function.path"):
        decided["reward.custom_reward_function.path"] = (
            "unsupported", "a custom reward function beside a reward model (a generative judge that generates "
                           "through it) is not modelled: rlsim prices the discriminative /classify path")
    served = _served_engine(v, RM_ROLLOUT)
    if not v.flag(f"{rm}.enable_resource_pool"):   # woken on the trainer's GPUs after generation
        if recipe in ("fully-async", "separate-async"):   # verl asserts a standalone reward model there
            raise RlsimError(f"verl's {recipe} trainer runs a reward model only on a pool of its own", source=src,
                             field=f"{rm}.enable_resource_pool", fix=f"pass {rm}.enable_resource_pool=true "
                                                                     f"{rm}.nnodes=N {rm}.n_gpus_per_node=G")
        v.result.notes.append(COLOCATED_REWARD_MODEL_NOTE)
        for key in (f"{rm}.nnodes", f"{rm}.n_gpus_per_node"):
            decided[key] = ("ignored", "read with enable_resource_pool only: colocated, the reward model's engines "
                                       "use the trainer's GPUs")
        w["reward"]["served"] = served
        return
    nodes = v.natural(f"{rm}.nnodes")   # verl refuses a pool of 0 nodes at start
    if not nodes:
        raise RlsimError("reward.reward_model.enable_resource_pool without a pool (reward.reward_model.nnodes 0)",
                         source=src, field=f"{rm}.nnodes", fix=f"pass {rm}.nnodes=N {rm}.n_gpus_per_node=G")
    w["reward"].update(handover="sample", served={"devices": nodes * v.count(f"{rm}.n_gpus_per_node"), **served})


COLOCATED_REWARD_MODEL_NOTE = (
    "reward model colocated (reward.reward_model.enable_resource_pool false): verl 0.9 wakes its vLLM engines on "
    "the trainer's GPUs after generation, scores the batch and puts them back to sleep (compute_rm_score): "
    "workload.reward.served without devices, the engines' sleep and wake-up at vLLM's measured "
    "reward.served.sleep_wake_s and their weight shard to host and back")


# Recipes that start DAPO's prompts one at a time: why they read neither max_num_gen_batches nor
# gen_batch_size (workload.dynamic_sampling.max_gen_batches / gen_prompts, which their kinds refuse)
_V1_ONE_AT_A_TIME = ("the v1 replay buffer ignores it (its warning): filtered groups are replaced by new prompts "
                     "until the batch is full", "the v1 trainer fetches prompts one at a time under DAPO (it forces "
                     "data.gen_batch_size to 1)")
ONE_PROMPT_AT_A_TIME = dict.fromkeys(V1_RECIPES, _V1_ONE_AT_A_TIME)
# verl 0.9.1 experimental/fully_async_policy filters no group: fully_async_rollouter.py
# _process_single_sample_streaming puts every sample it generates into the message queue, and nothing
# under experimental/fully_async_policy or experimental/separation reads algorithm.filter_groups (only
# the v1 trainer's ReplayBuffer does: trainer/ppo/v1/trainer_base.py). So the import writes no
# workload.dynamic_sampling under that recipe (the verl-fully-async kind still runs one given by hand:
# a fork may filter).
FULLY_ASYNC_NO_FILTER = ("verl 0.9.1's fully_async filters no group: its Rollouter puts every sample it generates in "
                         "the message queue (fully_async_rollouter.py _process_single_sample_streaming) and nothing "
                         "under experimental/fully_async_policy reads algorithm.filter_groups (only the v1 trainer's "
                         "ReplayBuffer does): no workload.dynamic_sampling written")
FULLY_ASYNC_FILTER_KEY = ("DAPO's filter setting, read with algorithm.filter_groups.enable, which verl 0.9.1's "
                          "fully_async does not read (it filters no group)")
FULLY_ASYNC_GEN_BATCH = ("fully_async's Rollouter streams prompts one at a time (it asserts data.gen_batch_size == 1): "
                         "no generation batch")


def _fully_async_filter(v: Values, decided: dict[str, tuple[Status, str]]) -> None:
    """algorithm.filter_groups under the fully-async recipe: every key given listed ignored
    (FULLY_ASYNC_NO_FILTER), data.gen_batch_size too."""
    for key in v.flat:
        if key.startswith("algorithm.filter_groups."):
            decided[key] = ("ignored", FULLY_ASYNC_NO_FILTER if key.endswith(".enable") else FULLY_ASYNC_FILTER_KEY)
    if v.given("data.gen_batch_size"):
        decided["data.gen_batch_size"] = ("ignored", FULLY_ASYNC_GEN_BATCH)


def _response_cap_key(v: Values, decided: dict[str, tuple[Status, str]]) -> str:
    """The key whose value caps a response: rollout.response_length where the config gives it apart from
    data.max_response_length (verl's rollout.yaml interpolates it from there; its engines generate up to
    it: vllm_rollout_spmd.py / vllm_async_server.py max_tokens=config.response_length, responses padded
    to it), else data.max_response_length."""
    key = f"{A}.rollout.response_length"
    if not v.given(key) or v(key) == v("data.max_response_length"):
        return "data.max_response_length"
    decided[key] = ("mapped", "workload.response_length.max: verl's engines generate up to it (max_tokens), "
                              "not data.max_response_length, which only sets its default")
    decided["data.max_response_length"] = ("ignored", f"{key} is given: verl generates up to it (mapped there)")
    return key


def _dynamic_sampling(v: Values, recipe: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """DAPO dynamic sampling (algorithm.filter_groups): the prompts of a generation batch and the cap
    on batches per step (recipe/dapo's trainer raises past it; 0 or less, its default: no cap). The
    v1 trainer evicts a filtered group and submits new prompts for it, one at a time (replay_buffer.py:
    one in the async modes, two of credit in the sync mode, which max_inflight_gen_batches bounds:
    ONE_PROMPT_AT_A_TIME); fully_async filters nothing (_fully_async_filter)."""
    cap_key = "algorithm.filter_groups.max_num_gen_batches"
    inflight_key = "algorithm.filter_groups.max_inflight_gen_batches"
    if recipe == "fully-async" and v.flag("algorithm.filter_groups.enable"):
        _fully_async_filter(v, decided)
        return
    if not (recipe == "sync" and v.flag("algorithm.filter_groups.enable")) and v.given(inflight_key):
        decided[inflight_key] = ("ignored", "used only by verl 0.9's v1 sync mode with algorithm.filter_groups.enable")
    if v.flag("algorithm.filter_groups.enable") and w.get("samples_per_prompt") == 1:
        # a group of one sample has no reward spread, and DAPO's filter keeps it (std > 0 or a single
        # sample): nothing is filtered, so no dynamic sampling runs (rlsim refuses it at n = 1)
        decided["algorithm.filter_groups.enable"] = ("ignored", f"with {A}.rollout.n 1 every group is one sample, "
                                                                "which the filter keeps: nothing is filtered")
        for key in (cap_key, inflight_key, "data.gen_batch_size"):
            if v.given(key):
                decided[key] = ("ignored", "dynamic sampling filters nothing at rollout.n 1")
        return
    if not v.flag("algorithm.filter_groups.enable"):
        decided[cap_key] = ("ignored", "used only with algorithm.filter_groups.enable")
        if v("data.gen_batch_size") is not None:   # it was listed as mapped and set nothing (a framework audit)
            decided.setdefault("data.gen_batch_size", (
                "unsupported", "rlsim reads it as dynamic sampling's generation batch, which runs only with "
                "algorithm.filter_groups.enable; without it verl's trainer may still batch its dataloader by "
                "it (recalled, not read here): a step here trains data.train_batch_size prompts; give that "
                "key the prompts your steps train"))
        return
    v.result.notes.append("the share of groups with a reward signal is not in a verl config: rlsim's default "
                          "workload.dynamic_sampling.keep_fraction 0.5 (set yours with --set "
                          "workload.dynamic_sampling.keep_fraction=...)")
    if recipe in ONE_PROMPT_AT_A_TIME:   # no generation batch to size or cap: the kinds refuse both keys
        w["dynamic_sampling"] = {}
        cap_why, gen_why = ONE_PROMPT_AT_A_TIME[recipe]
        decided[cap_key] = ("ignored", cap_why)
        if v.given("data.gen_batch_size"):
            decided["data.gen_batch_size"] = ("ignored", gen_why)
        return
    src = v.result.source
    gen = v("data.gen_batch_size")
    if not gen:   # verl's ppo_trainer.yaml: gen_batch_size: ${data.train_batch_size} (recalled, not read here)
        gen = v.count("data.train_batch_size")
        v.result.notes.append(f"data.gen_batch_size not given: verl's default, data.train_batch_size ({gen} prompts "
                              "a generation batch); rlsim's own default would be prompts_per_step / keep_fraction")
    sampling = {"gen_prompts": positive_int(gen, "data.gen_batch_size", src)}
    cap = v(cap_key)
    no_cap = cap is None or (isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap <= 0)
    if not no_cap:   # anything else must be a whole number of batches (a bad value is refused)
        sampling["max_gen_batches"] = positive_int(cap, cap_key, src)
    w["dynamic_sampling"] = sampling


def _train_software(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl's FSDP workers run transformers' model code (Liger's kernels in it with model.use_liger);
    its Megatron workers keep rlsim's Megatron-Core stack."""
    if str(v(f"{A}.actor.strategy")) == "megatron":
        if v.given(f"{A}.model.use_liger"):
            decided[f"{A}.model.use_liger"] = ("ignored", "the megatron workers do not read it")
        return
    w["train_software"] = hf_train_software(v.flag(f"{A}.model.use_liger"), "verl-fsdp")   # no TP: params.VERL_FSDP


def _entropy(v: Values, recipe: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl's old log-prob pass computes the policy's entropy over the vocabulary (compute_log_prob with
    calculate_entropy=True), its update where entropy_coeff != 0 or calculate_entropy (verl 0.6.0
    workers/actor/dp_actor.py, 0.9.1 trainer/ppo/ray_trainer.py). The FSDP workers compile it as
    use_torch_compile says, chunk it in fp32 with entropy_from_logits_with_chunking and recompute it
    in the backward with entropy_checkpointing (0.6 / 0.7's legacy workers read the actor's keys, 0.9's
    engine workers its fsdp_config's); the megatron workers run _VocabParallelEntropy."""
    coeff = v(f"{A}.actor.entropy_coeff")
    in_loss = coeff is not None and float(coeff) != 0   # the loss subtracts it (else the metrics alone)
    update = in_loss or flag(v.flat.get(f"{A}.actor.calculate_entropy", False), f"{A}.actor.calculate_entropy",
                             v.result.source)
    spec: dict[str, Any] = {"passes": ["old_logprob", "update"] if update else ["old_logprob"]}
    if in_loss:
        spec["in_loss"] = True
    if str(v(f"{A}.actor.strategy")) == "megatron":
        for name in ENTROPY_OPTIONS:
            for key in (f"{A}.actor.{name}", f"{A}.actor.fsdp_config.{name}"):
                if v.given(key):
                    decided[key] = ("ignored", "the megatron workers do not read it: their entropy is "
                                               "_VocabParallelEntropy (workload.entropy.kernel vocab-parallel)")
        w["entropy"] = {**spec, "kernel": "vocab-parallel"}
        return
    engine_workers = _engine_workers(v)
    read = {name: _entropy_option_read(v, name, engine_workers, decided) for name in ENTROPY_OPTIONS}
    if in_loss and read["entropy_checkpointing"]:
        spec["recompute"] = True
    eager = "eager-chunked-fp32" if read["entropy_from_logits_with_chunking"] else "eager"
    w["entropy"] = {**spec, "kernel": "compiled" if read["use_torch_compile"] else eager}
    if not _fsdp_packs(v, recipe):
        _padded_rows_entropy(v, engine_workers, w["entropy"], decided)


def _padded_rows_entropy(v: Values, engine_workers: bool, entropy: dict[str, Any],
                         decided: dict[str, tuple[Status, str]]) -> None:
    """Padded rows (model.use_remove_padding false) take the entropy with verl_F.entropy_from_logits op by
    op on the response positions whatever torch.compile and the chunking say (0.6.1 dp_actor.py
    _forward_micro_batch's padded branch, 275-279; 0.9.1's engine prepare_model_outputs alike): the
    compiled or chunked function is the packed branch's (entropy_checkpointing still applies)."""
    entropy["kernel"] = "eager"
    for name in ("use_torch_compile", "entropy_from_logits_with_chunking"):
        key = f"{A}.actor.{'fsdp_config.' if engine_workers else ''}{name}"
        if v.given(key):
            decided[key] = ("ignored", "padded rows (model.use_remove_padding false): verl takes their entropy with "
                                       "entropy_from_logits op by op (dp_actor.py)")


# the FSDP workers' entropy options: the legacy workers read the actor's, the engine workers its fsdp_config's
ENTROPY_OPTIONS = ("use_torch_compile", "entropy_from_logits_with_chunking", "entropy_checkpointing")


def _entropy_option_read(v: Values, name: str, engine_workers: bool, decided: dict[str, tuple[Status, str]]) -> bool:
    """The value of the entropy option ``name`` these FSDP workers (``engine_workers``: verl 0.9's, else
    the legacy ones) read, the copy they do not read listed as ignored; absent: verl's default
    (torch.compile on, the others off)."""
    legacy, engine = f"{A}.actor.{name}", f"{A}.actor.fsdp_config.{name}"
    read, other = (engine, legacy) if engine_workers else (legacy, engine)
    if v.given(other):
        decided[other] = ("ignored", f"the {'legacy' if engine_workers else 'new engine'} workers' copy: these "
                                     f"workers read {read}")
    if v.given(read):
        decided[read] = ("mapped", f"{RULES[legacy].target}: {RULES[legacy].reason}")
    return v.flag(read) if v.given(read) or name == "use_torch_compile" else False


def _engine_workers(v: Values) -> bool:
    """Whether verl runs its engine workers (0.9, which has no legacy workers: a config without
    trainer.use_legacy_worker_impl that has the FSDP engine's torch.compile option or 0.9's v1 trainer
    keys; or use_legacy_worker_impl disable) rather than 0.6 / 0.7's legacy fsdp workers."""
    impl = v.flat.get("trainer.use_legacy_worker_impl")
    nine = v.given(f"{A}.actor.fsdp_config.use_torch_compile") or any(
        key == "trainer.use_v1" or key.startswith("trainer.v1.") for key in v.flat)
    return impl == "disable" or (impl is None and nine)


def _logprob_traffic(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The log-probs' bytes per logit as verl's workers take them: flash-attn's Triton cross entropy on
    the FSDP workers (the megatron workers keep the stack's Megatron vocab-parallel cross entropy),
    after the logits' division by the rollout temperature (0.6's dp_actor and the megatron workers
    always; 0.9's FSDP engine not at temperature 1: _scale_logits_by_temperature); with
    model.use_fused_kernels on the torch backend, its fused kernel (_fused_kernel)."""
    megatron = str(v(f"{A}.actor.strategy")) == "megatron"
    compute = w.setdefault("train_params", {}).setdefault("compute", {})
    if _fused_kernel(v, megatron, decided):
        compute.update(logprob_traffic(VERL_FUSED_TORCH_BYTES, False), logits_recompute=True)
        in_loss = w["entropy"].get("in_loss", False)   # its forward is the kernel's; its gradient, where taken
        w.pop("entropy")
        if in_loss:
            w["entropy"] = {"passes": ["update"], "in_loss": True, "kernel": "verl-fused-torch"}
        return
    scaled = megatron or not _engine_workers(v) or float(v(f"{A}.rollout.temperature")) != 1.0
    kernel = MEGATRON_CROSS_ENTROPY_BYTES if megatron else FLASH_ATTN_CROSS_ENTROPY_BYTES
    compute.update(logprob_traffic(kernel, scaled))


def _logprob_gradient(v: Values, w: dict[str, Any], s: dict[str, Any]) -> None:
    """The FSDP workers' packed path turns flash-attn's in-place backward off where the update computes
    the entropy (dp_actor.py: inplace_backward = False if calculate_entropy): the log-probs' gradient is
    a new tensor beside the logits (params.FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT). Not with the
    fused kernel (no flash-attn cross entropy), the megatron workers' vocab-parallel one, or padded rows."""
    entropy = w.get("entropy") or {}
    if (str(v(f"{A}.actor.strategy")) in ("fsdp", "fsdp2") and s["distqueue"]["packed"]
            and "update" in entropy.get("passes", []) and entropy.get("kernel") != "verl-fused-torch"):
        entropy["logprob_grad_bytes_per_logit"] = FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT


def _fused_kernel(v: Values, megatron: bool, decided: dict[str, tuple[Status, str]]) -> bool:
    """Whether the FSDP workers take the log-probs and the entropy in verl's fused kernel on its torch
    backend (model.use_fused_kernels, fused_kernel_options.impl_backend); the triton backend and the
    megatron workers' fused forward are listed as unsupported (priced as without them)."""
    key, backend_key = f"{A}.model.use_fused_kernels", f"{A}.model.fused_kernel_options.impl_backend"
    if not (v.given(key) and v.flag(key)):
        return False
    backend = str(v.flat.get(backend_key) or "torch")
    if megatron or backend != "torch":
        what = "the megatron workers' fused forward" if megatron else f"verl's fused {backend} kernel"
        decided[key] = ("unsupported", f"{what} is not modelled: priced as without it")
        if v.given(backend_key):
            decided[backend_key] = ("unsupported", f"{what} is not modelled")
        return False
    return True


def _law(law: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in law.items()) + "}"


def _workload(v: Values, recipe: str, model_given: bool, decided: dict[str, tuple[Status, str]],
              user_model: Any = None) -> dict[str, Any]:
    """``user_model``: the --set workload.model's value, where known (model_set_by_user): the model the run
    trains, whose experts decide the expert TP keys and note as the config's model's do."""
    src = v.result.source
    w = begin_workload(v, f"{A}.model.path", "verl config", model_given, decided)
    w["algorithm"] = _algorithm(v)
    mini = v.count(f"{A}.actor.ppo_mini_batch_size")
    if recipe == "fully-async":
        require = v.whole("async_training.require_batches", 1)
        trigger = v.whole("async_training.trigger_parameter_sync_step", 1)
        w["prompts_per_step"] = require * trigger * mini
        decided["data.train_batch_size"] = ("ignored", "fully_async: one step = one parameter version = "
                                            "trigger_parameter_sync_step x require_batches x ppo_mini_batch_size prompts")
        decided["data.gen_batch_size"] = ("ignored", "fully_async: the Rollouter's feed size, no effect on the quota")
    else:
        w["prompts_per_step"] = v.count("data.train_batch_size")
        # main_ppo's validate_config -> ActorConfig.validate (0.6.0 - 0.7.0; one_step_off_policy's entry point
        # runs the same, recalled from its public code, not read here)
        if recipe in ("colocated", "one-step-off") and w["prompts_per_step"] < mini and \
                not v.flag(f"{A}.actor.use_dynamic_bsz"):
            raise RlsimError(f"data.train_batch_size {w['prompts_per_step']} is smaller than "
                             f"actor.ppo_mini_batch_size {mini}: verl refuses it (workers/config/actor.py validate)",
                             source=src, field=f"{A}.actor.ppo_mini_batch_size",
                             fix=f"pass {A}.actor.ppo_mini_batch_size={w['prompts_per_step']} or less, or a larger "
                                 "data.train_batch_size")
    w["samples_per_prompt"] = v.count(f"{A}.rollout.n")
    w["mini_batch_prompts"] = mini
    if recipe == "separate-async":   # verl asserts it (trainer_separate_async.py)
        key = "trainer.v1.separate_async.parameter_sync_step"
        sync_steps = v.whole(key, 4)
        if w["prompts_per_step"] != sync_steps * mini:
            raise RlsimError(f"separate_async needs data.train_batch_size = parameter_sync_step x ppo_mini_batch_size "
                             f"({sync_steps} x {mini}), not {w['prompts_per_step']}", source=src, field=key,
                             fix=f"pass data.train_batch_size={sync_steps * mini}, or a parameter_sync_step that "
                                 "makes it so")
    w["ppo_epochs"] = v.count(f"{A}.actor.ppo_epochs")
    _dynamic_sampling(v, recipe, w, decided)
    w["prompt_length"] = capped_length("prompt_length", v("data.max_prompt_length"), "data.max_prompt_length", src, v.result.notes)
    cap_key = _response_cap_key(v, decided)
    w["response_length"] = capped_length("response_length", v(cap_key), cap_key, src, v.result.notes)
    m = f"{A}.actor.megatron"
    model = w.get("model", user_model)   # the model trained: the config's, or the one --set gives
    w["train_layout"] = without_inapplicable_layout_keys(
        _train_layout(v, decided), model, {"sequence_parallel": f"{m}.sequence_parallel",
                                           "etp": f"{m}.expert_tensor_parallel_size"}, decided)
    _expert_tp_default(v, w["train_layout"], model)
    if str(v(f"{A}.actor.strategy")) == "megatron":
        megatron_pipeline_split(v, w["train_layout"], model, decided)
    _train_software(v, w, decided)
    _entropy(v, recipe, w, decided)
    _logprob_traffic(v, w, decided)
    w["rollout_layout"] = _rollout_layout(v, recipe, decided, model)
    _engine_and_offload(v, w, decided)
    _check_step_budget(v, recipe, w)
    _fsdp_params(v, w, decided)
    _actor_optimizer(v, w, decided)
    _hybrid_device_optimizer(v, w, decided)
    if str(v(f"{A}.actor.strategy")) == "megatron":
        megatron_token_dispatcher(v, VERL_DISPATCHER, w, decided, variable_seq_lengths=VERL_VARIABLE_SEQ_LENGTHS,
                                  deepep_key=VERL_DEEPEP)
        megatron_expert_capacity(v, w, decided)
        if v.given(GRAD_REDUCE_IN_FP32) and not v.flag(GRAD_REDUCE_IN_FP32):
            merge_train_params(w, {"memory": {"grad_bytes_per_param": DTYPE_BYTES["bf16"]},
                                   "comm": {"grad_reduce_bytes_per_param": DTYPE_BYTES["bf16"]}})
        megatron_ddp_overlap(v, VERL_DDP, w, decided)
        megatron_moe_kernels(v, _TRANSFORMER, w, model, decided, router_default=converter_router_dtype(
            model, v.flag(f"{m}.use_mbridge")))
    _lora(v, w, decided)
    _multi_turn(v, w, decided)
    mode = v(f"{A}.rollout.mode")
    if mode is not None and mode not in ROLLOUT_MODES:   # verl's own check: sync or async only
        raise RlsimError(f"unknown rollout mode {mode!r}", source=src, field=f"{A}.rollout.mode",
                         fix=f"pass {A}.rollout.mode=sync or {A}.rollout.mode=async")
    if recipe not in AGENT_LOOP_RECIPES and mode == "async":
        # verl's agent loop (verl/experimental/agent_loop): the batch repeated n times, each sample its
        # own request to the server with the fewest requests so far: a prompt's samples spread over them
        w.setdefault("inference", {})["dispatch"] = "per-sample"
    elif recipe not in AGENT_LOOP_RECIPES and not v.given(f"{A}.rollout.mode"):
        v.result.notes.append(MODE_NOTE)   # rollout.yaml: mode sync in verl 0.6.x, async from 0.7.0
    w["reference"] = v.flag(f"{A}.actor.use_kl_loss") or v.flag("algorithm.use_kl_in_reward")
    # with LoRA verl builds no reference worker (ref_in_actor: the actor with its adapters disabled)
    if w["reference"] and str(v(f"{A}.actor.strategy")) in ("fsdp", "fsdp2") and "lora" not in w:
        w["reference_cpu_offload"] = True   # verl forces it on its FSDP reference (fsdp_workers.py)
        w["reference_cpu_offload_bytes_per_param"] = _dtype_bytes(v, f"{A}.ref.fsdp_config.model_dtype")
        v.result.notes.append(REFERENCE_OFFLOAD_NOTE)
    _reward_and_critic(v, w, recipe, decided)
    return w


REFERENCE_OFFLOAD_NOTE = ("reference model: verl 0.6.0 builds its FSDP reference with CPU offload whatever "
                          "ref.fsdp_config says (fsdp_workers.py 'We force reference policy to use CPUOffload'): "
                          "workload.reference_cpu_offload: true, each reference forward copies every layer's fp32 "
                          "shard from the host")
REWARD_OFFLOAD_NOTE = ("reward model: verl 0.6.0's RewardModelWorker keeps its bf16 shards on the host (CPUOffload / "
                       "CPUOffloadPolicy always): workload.reward.cpu_offload: true")


def _sections_not_run(v: Values, recipe: str, decided: dict[str, tuple[Status, str]]) -> None:
    """Sections a config carries but verl does not run (a dumped or generated config has them all):
    their keys that the table would list as unsupported are listed as ignored, with why."""
    off = []
    if not v.flag("reward_model.enable"):
        off.append(("reward_model", "no reward model (reward_model.enable false)"))
    if not v.flag(f"{A}.rollout.multi_turn.enable"):
        off.append((f"{A}.rollout.multi_turn", "multi-turn rollouts off (rollout.multi_turn.enable false)"))
    if not v.flag(f"{A}.model.use_fused_kernels"):
        off.append((f"{A}.model.fused_kernel_options", "use_fused_kernels false"))
    if recipe not in AGENT_LOOP_RECIPES and str(v(f"{A}.rollout.mode") or "sync") != "async":
        off.append((f"{A}.rollout.agent", "the agent loop runs with rollout.mode async only"))
    for key in v.flat:
        if key in decided or key.startswith("reward_model.sandbox_fusion."):   # the rule reward's sandbox
            continue
        rule = rule_for(key, RULES)
        for section, why in off:
            if key.startswith(section + ".") and rule is not None and rule.status == "unsupported":
                decided[key] = ("ignored", why)
    _engine_config_copies(v, decided)


# verl 0.6's FSDPEngineConfig repeats two worker options for its new engine workers; the legacy ones
# (trainer.use_legacy_worker_impl auto / enable: main_ppo.py) read the actor's and critic's own
LEGACY_READS_OWN = ("strategy", "ulysses_sequence_parallel_size")


def _engine_config_copies(v: Values, decided: dict[str, tuple[Status, str]]) -> None:
    """The fsdp_config copies of strategy and ulysses_sequence_parallel_size are not read by verl's
    legacy workers (its default): ignored; the new engine workers (disable) are not modelled."""
    impl = str(v.flat.get("trainer.use_legacy_worker_impl") or "auto")
    if impl == "disable":
        decided["trainer.use_legacy_worker_impl"] = ("unsupported", "verl's new engine workers (verl.workers.roles) "
                                                     "are not modelled as such: rlsim prices its fsdp / megatron workers")
        return
    for section in (f"{A}.actor.fsdp_config", f"{A}.ref.fsdp_config", "critic.model.fsdp_config"):
        for name in LEGACY_READS_OWN:
            key = f"{section}.{name}"
            if key in v.flat and key not in decided:
                decided[key] = ("ignored", f"the new engine workers' copy: verl's legacy workers (use_legacy_worker_impl "
                                           f"{impl}) read the role's own {name}")


# Sections whose keys repeat the actor's (verl's configs give the reference, the critic and the FSDP
# engine their own copy of each option, by interpolation): (the copy's prefix, the actor's), the
# longest first
ACTOR_COPIES = (
    (f"{A}.ref.fsdp_config.", f"{A}.actor.fsdp_config."),
    ("reward_model.model.fsdp_config.", f"{A}.actor.fsdp_config."),
    ("reward_model.model.", f"{A}.model."),
    (f"{A}.ref.megatron.", f"{A}.actor.megatron."),
    ("critic.megatron.", f"{A}.actor.megatron."),
    ("critic.model.fsdp_config.", f"{A}.actor.fsdp_config."),
    ("critic.fsdp.", f"{A}.actor.fsdp_config."),   # verl 0.9's critic engine config
    ("critic.model.", f"{A}.model."),
    (f"{A}.actor.fsdp_config.", f"{A}.actor."),
    (f"{A}.ref.", f"{A}.actor."),
    ("critic.", f"{A}.actor."),
    ("reward_model.", f"{A}.actor."),
    (f"{A}.actor.", f"{A}.model."),
)
_ABSENT = object()


def _other_roles_ddp(v: Values, decided: dict[str, tuple[Status, str]]) -> None:
    """The reference's override_ddp_config ignored (REF_DDP_NOTE); the critic's (where its section runs:
    else decided already) the actor key's status where it equals the actor's effective value (its given
    override, verl's ddp_config_dict default, the megatron section's use_distributed_optimizer),
    unsupported where it does not (CRITIC_DDP_NOTE)."""
    for key in v.flat:
        if key in decided:
            continue
        if key.startswith(f"{REF_DDP}."):
            decided[key] = ("ignored", REF_DDP_NOTE)
        elif key.startswith(f"{CRITIC_DDP}."):
            bare = key[len(CRITIC_DDP) + 1:]
            actor_key = f"{VERL_DDP}.{bare}"
            defaults = {**VERL_DDP_DEFAULTS, "use_distributed_optimizer": v(f"{A}.actor.megatron.use_distributed_optimizer")}
            actor = v.flat.get(actor_key, defaults.get(bare, _ABSENT))
            if actor is not _ABSENT and actor == v.flat[key]:
                status, reason = decided.get(actor_key) or table_status(actor_key, actor, RULES)
                decided[key] = (status, f"as {actor_key}, which it equals here ({reason})")
            else:
                decided[key] = ("unsupported", f"{CRITIC_DDP_NOTE} (the actor's {bare}: "
                                               f"{'unset' if actor is _ABSENT else repr(actor)})")


def _copies_of_the_actor(v: Values, decided: dict[str, tuple[Status, str]]) -> None:
    """A key the table covers only by a section's catch-all (or not at all) that repeats an actor key
    the table lists, with the same value, takes that key's status: rlsim runs the reference and the
    critic as the actor. Where the values differ the catch-all stands (the copy is not modelled)."""
    for key, value in v.flat.items():
        if key in decided or key in RULES:
            continue
        actor_key = _actor_original(key)
        if actor_key is None:
            continue
        actor_value = v.flat.get(actor_key, DEFAULTS.get(actor_key, _ABSENT))
        if actor_value is not _ABSENT and actor_value == value:   # the actor's own status, as decided or by the table
            status, reason = decided.get(actor_key) or table_status(actor_key, value, RULES)
            decided[key] = (status, f"as {actor_key}, which it equals here ({reason})")


def _actor_original(key: str) -> str | None:
    """The actor key the table lists that ``key`` copies, through copies of copies (the reference's
    fsdp_config.use_torch_compile -> the actor's fsdp_config's -> actor.use_torch_compile); None if none."""
    for _ in range(len(ACTOR_COPIES)):
        prefix, actor_prefix = next(((p, a) for p, a in ACTOR_COPIES if key.startswith(p)), ("", ""))
        if not prefix:
            return None
        key = actor_prefix + key[len(prefix):]
        if key in RULES or _covered_by_own_section(key):
            return key
    return None


def _covered_by_own_section(key: str) -> bool:
    """A key a section's own catch-all lists (model.mtp.* for model.mtp.method), not one a whole
    backend's catch-all covers by default (actor.megatron.*, actor.fsdp_config.*)."""
    parts = key.split(".")
    section = next((".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)
                    if ".".join(parts[:n]) + ".*" in RULES), None)
    return section is not None and section not in BACKEND_SECTIONS


BACKEND_SECTIONS = (f"{A}.actor.megatron", f"{A}.actor.fsdp_config")


def _algorithm(v: Values) -> str:
    """rlsim's algorithm (ppo: the stage graph with a critic's values and training) from the estimator
    and critic.enable, as verl decides whether a critic runs (0.6.0 - 0.7.0 trainer/ppo/utils.py
    need_critic: critic.enable where it is not null, else a critic under gae only)."""
    estimator = str(v("algorithm.adv_estimator"))
    if estimator == "remax":
        # ray_trainer.py fit() (0.6.0 - 0.7.0): AdvantageEstimator.REMAX generates again, greedily
        # (do_sample False), one response a prompt, with its own generate_sequences call (the hybrid
        # engine's switch and weight sync around it) and reward, for the baseline: a stage rlsim's
        # stage graphs do not have
        raise RlsimError("adv_estimator remax: verl generates a second, greedy response a prompt for its baseline "
                         "(its own generation, switch and reward each step), which rlsim does not model",
                         source=v.result.source, field="algorithm.adv_estimator",
                         fix="import with algorithm.adv_estimator=grpo to price the step without the greedy baseline "
                             "generation (it then leaves that generation out)")
    enable = v("critic.enable")
    critic = estimator == "gae" if enable is None else flag(enable, "critic.enable", v.result.source)
    if estimator == "gae" and not critic:   # compute_advantage reads the critic's values: verl fails without
        raise RlsimError("critic.enable false with adv_estimator gae: GAE needs the critic's values (verl's "
                         "compute_advantage reads batch['values'], which no critic computes)", source=v.result.source,
                         field="critic.enable", fix="remove critic.enable (or set it true), or pick a critic-free "
                                                    "adv_estimator")
    if estimator != "gae" and critic:
        v.result.notes.append(f"critic.enable true with adv_estimator {estimator!r}: verl computes the critic's values "
                              "and trains it each step though the estimator does not read them: rlsim's ppo stage "
                              "graph (with a critic)")
        return "ppo"
    if estimator not in ("gae", "grpo"):
        v.result.notes.append(f"algorithm.adv_estimator {estimator!r}: critic-free, simulated with grpo's stage graph")
    return "ppo" if critic else "grpo"


def _train_layout(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    strategy = str(v(f"{A}.actor.strategy"))
    micro = None if v.flag(f"{A}.actor.use_dynamic_bsz") else _micro_batch_per_gpu(v, f"{A}.actor",
                                                                                  "ppo_micro_batch_size", decided)
    layout: dict[str, Any] = {"recompute": "full" if v.flag(f"{A}.model.enable_gradient_checkpointing") else "none",
                              "micro_batch": micro or 1}
    if strategy == "megatron":
        m = f"{A}.actor.megatron"
        layout.update(_megatron_recompute(v, decided))
        for key, rl in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                        ("virtual_pipeline_model_parallel_size", "vpp"), ("expert_model_parallel_size", "ep"),
                        ("context_parallel_size", "cp")):
            layout[rl] = v.whole(f"{m}.{key}", 1)
        if v.given(f"{m}.sequence_parallel"):
            layout["sequence_parallel"] = v.flag(f"{m}.sequence_parallel")
        # the distributed optimizer unless the config turns it off (null: Megatron's default, on)
        distributed = f"{m}.use_distributed_optimizer"
        layout["zero"] = 1 if v(distributed) is None or v.flag(distributed) else 0
        if v.given(override := f"{VERL_DDP}.use_distributed_optimizer"):   # ddp_config_dict.update: it wins
            layout["zero"] = 1 if v.flag(override) else 0
        ulysses = v.whole(f"{A}.actor.ulysses_sequence_parallel_size", 1)
        if ulysses > 1:
            raise RlsimError(f"ulysses_sequence_parallel_size {ulysses} with the megatron backend: it splits the "
                             "sequence by context_parallel_size", source=v.result.source,
                             field=f"{A}.actor.ulysses_sequence_parallel_size",
                             fix=f"set it to 1 and give {m}.context_parallel_size")
        if (etp := v.whole(f"{m}.expert_tensor_parallel_size")) is not None:
            layout["etp"] = etp
        return layout
    if strategy not in ("fsdp", "fsdp2"):
        raise RlsimError(f"unknown actor strategy {strategy!r}", source=v.result.source, field=f"{A}.actor.strategy",
                         fix="use fsdp, fsdp2 or megatron")
    v.result.notes.append(f"{A}.actor.strategy {strategy}: " + _FSDP)
    ulysses = v.whole(f"{A}.actor.ulysses_sequence_parallel_size", 1)
    if ulysses > 1:   # verl's FSDP workers: a (dp, sp) device mesh, sp = this size
        layout.update(cp=ulysses, ulysses_sp=True)
    if (shard := _fsdp_shard_size(v)) is not None:
        layout["zero_shard_size"] = shard
    return {"tp": 1, "pp": 1, "zero": 3, **layout}


# verl's megatron workers build the TransformerConfig from megatron.override_transformer_config (the
# hf_model's enable_gradient_checkpointing is read by the FSDP workers only: verl 0.6.0 fsdp_workers.py;
# megatron_workers.py reads neither it nor any other recompute switch)
_TRANSFORMER = f"{A}.actor.megatron.override_transformer_config"


# verl's megatron workers: TransformerConfig's moe_token_dispatcher_type "alltoall" and variable_seq_lengths
# True, override_transformer_config on top (0.6.1 models/mcore/config_converter.py _get_base_transformer_config,
# utils/megatron_utils.py)
VERL_DISPATCHER = f"{_TRANSFORMER}.moe_token_dispatcher_type"
VERL_DEEPEP = f"{_TRANSFORMER}.moe_enable_deepep"
VERL_VARIABLE_SEQ_LENGTHS = "verl 0.6.1 models/mcore/config_converter.py"


def _megatron_recompute(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """rlsim's recompute fields from Megatron's TransformerConfig overrides (megatron_recompute.py; verl's
    defaults: all null, recompute none)."""
    decided[f"{A}.model.enable_gradient_checkpointing"] = (
        "ignored", f"verl's megatron workers do not read it: {_TRANSFORMER}.recompute_granularity sets recompute")
    return megatron_recompute(v, _TRANSFORMER, decided)


def _fsdp_shard_size(v: Values) -> int | None:
    """verl's create_device_mesh (workers/fsdp_workers.py, 0.6.0): the actor's fsdp_size over the
    trainer's GPUs (common.hsdp_shard_size; it sets the mesh of the actor, rollout and reference worker)."""
    key = f"{A}.actor.fsdp_config.fsdp_size"
    world = v.count("trainer.nnodes") * v.count("trainer.n_gpus_per_node")
    return hsdp_shard_size(v(key), key, world, "trainer", v.result.source)


def _rollout_layout(v: Values, recipe: str, decided: dict[str, tuple[Status, str]], model: Any) -> dict[str, Any]:
    r = f"{A}.rollout"
    dtype = str(v(f"{r}.dtype"))
    if dtype not in DTYPES:
        raise RlsimError(f"unknown dtype {dtype!r}", source=v.result.source, field=f"{r}.dtype",
                         fix=f"use one of: {', '.join(DTYPES)}")
    standalone = f"{r}.standalone_gpu_memory_utilization"
    share = f"{r}.gpu_memory_utilization"
    if v.given(standalone) and v(standalone) is not None and recipe == "fully-async":
        decided[share], share = ("ignored", "fully_async's standalone replicas take standalone_gpu_memory_utilization"), \
            standalone
    elif v.given(standalone):
        decided[standalone] = ("ignored", "null: gpu_memory_utilization stands" if v(standalone) is None
                               else "used by verl 0.9's fully_async standalone replicas only")
    layout = {"tp": v.count(f"{r}.tensor_model_parallel_size"), "ep": _engine_data_parallel(v, model, decided),
              "gpu_memory_utilization": v.fraction(share),
              "weight_dtype": DTYPES[dtype], "kv_dtype": DTYPES[dtype]}
    layout["max_num_seqs"] = _max_num_seqs(v, recipe)   # vLLM's max_num_seqs, SGLang's max_running_requests
    return layout


def _max_num_seqs(v: Values, recipe: str) -> int:
    """rollout.max_num_seqs; absent, the default of the verl that runs the recipe (MAX_NUM_SEQS_DEFAULT_NOTE),
    with a note saying which was taken."""
    key = f"{A}.rollout.max_num_seqs"
    if v.given(key):
        return v.count(key)
    if recipe in V1_RECIPES:
        v.result.notes.append(MAX_NUM_SEQS_V1_NOTE)
        return VERL_09_MAX_NUM_SEQS
    v.result.notes.append(MAX_NUM_SEQS_DEFAULT_NOTE)   # names the default taken: Values' own note would repeat it
    return int(DEFAULTS[key])


# vLLM's expert parallelism at data_parallel_size 1 (EP = the engine's tp GPUs): each holds E/tp whole experts
# in place of 1/tp of each, and the tokens are not dispatched (vLLM 0.11 model_executor/layers/fused_moe/
# config.py FusedMoEParallelConfig.make: ep_size = tp x dp, tp 1; layer.py forward_impl: dispatch / combine only
# at dp > 1, the tensor-parallel all-reduce after the MoE either way)
EP_OVER_TP_NOTE = ("EP = tp at data_parallel_size 1: each of the engine's tp GPUs holds E/tp whole experts in place "
                   "of 1/tp of each, with no dispatch (vLLM 0.11 fused_moe FusedMoEParallelConfig.make, forward_impl: "
                   "the same tensor-parallel all-reduce after the MoE): the same weight bytes, expected FLOPs and "
                   "collective a GPU as rlsim's rollout_layout.ep 1 prices; the uneven load over the GPUs' experts "
                   "is not modelled")


def _engine_data_parallel(v: Values, model: Any, decided: dict[str, tuple[Status, str]]) -> int:
    """rlsim's rollout ep (attention data-parallel inside one engine whose experts span tp x ep GPUs)
    from verl's rollout expert_parallel_size and data_parallel_size: verl refuses an EP other than
    tp x dp, and a dp without EP is more engines (rlsim's instances), not one. EP over the tp GPUs alone
    (dp 1) is rlsim's ep 1, said so (EP_OVER_TP_NOTE); on a dense model EP does nothing."""
    r, src = f"{A}.rollout", v.result.source
    tp, ep, dp = v.count(f"{r}.tensor_model_parallel_size"), v.count(f"{r}.expert_parallel_size"), \
        v.count(f"{r}.data_parallel_size")
    if ep > 1 and ep != tp * dp:
        raise RlsimError(f"expert_parallel_size {ep} is not tensor_model_parallel_size x data_parallel_size = "
                         f"{tp} x {dp}, which verl's rollout config requires", source=src,
                         field=f"{r}.expert_parallel_size", fix=f"give {tp * dp}, or change data_parallel_size")
    if ep == 1 and dp > 1:
        raise RlsimError(f"data_parallel_size {dp} without expert parallelism: rlsim models data parallelism as "
                         "more rollout engines (instances), one per tp GPUs", source=src,
                         field=f"{r}.data_parallel_size", fix="set it to 1 (the engines are the data parallelism)")
    if ep > 1 and dp == 1:
        key = f"{r}.expert_parallel_size"
        if not has_experts(model, 1):
            decided[key] = ("ignored", "a dense model has no expert layers for vLLM's expert parallelism")
        else:
            decided[key] = ("mapped", f"workload.rollout_layout.ep: 1, {EP_OVER_TP_NOTE}")
            v.result.notes.append(f"{key} {ep} = tensor_model_parallel_size {tp} x data_parallel_size 1: rlsim's "
                                  f"rollout_layout.ep 1 ({EP_OVER_TP_NOTE})")
    return dp


def _engine_name(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """workload.engine from rollout.name: vLLM and SGLang are named engines; another is listed as
    unsupported and keeps rlsim's own engine defaults."""
    name = v(f"{A}.rollout.name")
    if name in ("vllm", "sglang"):
        w["engine"] = VLLM_ENGINE if name == "vllm" else SGLANG_ENGINE
    else:
        decided[f"{A}.rollout.name"] = ("unsupported", f"{name!r}: rlsim names the vLLM and SGLang engines "
                                        f"(priced as rlsim's own engine defaults)")


def _capture_sizes(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """rollout.cudagraph_capture_sizes (verl 0.6+: the CUDA-graph batch sizes vLLM captures, a list;
    verl's sync rollout hands it as CompilationConfig cudagraph_capture_sizes, its server as
    cuda_graph_sizes): vLLM pads a step to the next captured size and runs eager above the largest,
    so the largest is rlsim's cuda_graph_max_batch. Unset (null) or with enforce_eager: vLLM's own."""
    key = f"{A}.rollout.cudagraph_capture_sizes"
    sizes = v(key) if v.given(key) else None
    if not sizes:
        return {}
    if not isinstance(sizes, list | tuple) or not all(isinstance(x, int) and x > 0 for x in sizes):
        raise RlsimError(f"expected a list of positive batch sizes, got {sizes!r}", source=v.result.source,
                         field=key, fix="give a list such as [1, 2, 4, 8, 16, 32], or null for vLLM's own")
    if v.flag(f"{A}.rollout.enforce_eager"):
        decided[key] = ("ignored", "enforce_eager: no CUDA graphs are captured")
        return {}
    return {"cuda_graph_max_batch": max(sizes)}


def _engine_and_offload(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The engine knobs and per-phase offload the config gives, onto workload.inference / train_params."""
    _engine_name(v, w, decided)
    if w.get("engine") == SGLANG_ENGINE:
        decided.update({f"{A}.rollout.{key}": ("ignored", _NOT_PASSED_TO_SGLANG)
                        for key in (*ENGINE_KEYS, "cudagraph_capture_sizes")
                        if key not in SGLANG_KEYS and v.given(f"{A}.rollout.{key}")})
        engine = {ENGINE_KEYS[key]: v(f"{A}.rollout.{key}") for key in SGLANG_KEYS if v.given(f"{A}.rollout.{key}")}
        v.result.notes.append(SGLANG_VERSION_NOTE)
    else:
        engine = {target: v(f"{A}.rollout.{key}") for key, target in ENGINE_KEYS.items()
                  if v.given(f"{A}.rollout.{key}") or key in ENGINE_KEYS_ALWAYS}
        engine.update(_capture_sizes(v, decided))
        # verl starts every vLLM rollout with disable_custom_all_reduce=True (vllm_rollout_spmd.py,
        # vllm_async_server.py, 0.5 - 0.7): its TP all-reduces go through NCCL
        engine["custom_all_reduce"] = False
        if w.get("engine") == VLLM_ENGINE:   # what verl 0.4-0.5 did differently
            v.result.notes.append(MAX_NUM_SEQS_NOTE)
            if not v.given(f"{A}.rollout.enforce_eager"):
                v.result.notes.append(ENFORCE_EAGER_NOTE)
    _speculative_rollout(v, engine, w.get("engine") == SGLANG_ENGINE, decided)
    if engine:
        w["inference"] = engine
    megatron = str(v(f"{A}.actor.strategy")) == "megatron"
    section = f"{A}.actor.megatron" if megatron else f"{A}.actor.fsdp_config"
    keys = MEGATRON_OFFLOAD_KEYS if megatron else FSDP_OFFLOAD_KEYS
    offload = {OFFLOAD_KEYS[key]: v.flag(f"{section}.{key}") for key in keys if v.given(f"{section}.{key}")}
    if any(offload.values()):   # verl moves the offloaded state with .to("cpu"): pageable host memory
        offload["pageable"] = True
    if offload:
        w.setdefault("train_params", {})["offload"] = offload


# verl 0.9.1's model.mtp (workers/config/model.py MtpConfig): its defaults, for the keys a config leaves out
MTP = f"{A}.model.mtp"
MTP_DEFAULTS = {"method": "mtp", "num_speculative_tokens": 1, "speculative_algorithm": "EAGLE",
                "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
VLLM_SPECULATIVE_CONFIG = f"{A}.rollout.engine_kwargs.vllm.speculative_config"


def _mtp_section(v: Values) -> str:
    """The MTP config the rollout reads: its own rollout.mtp where the config gives it (verl 0.9.1's rollout
    config interpolates model.mtp into it, rollout.yaml), else model.mtp."""
    own = f"{A}.rollout.mtp"
    return own if v.section(own) else MTP


def _mtp_value(v: Values, name: str) -> Any:
    value = v.flat.get(f"{_mtp_section(v)}.{name}")
    return MTP_DEFAULTS[name] if value is None else value


def _speculative_rollout(v: Values, engine: dict[str, Any], sglang: bool, decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.9.1's speculative rollout -> workload.inference's speculative keys (the acceptance rate left to
    the user: SPECULATION_NOTE). model.mtp.enable with enable_rollout: vLLM gets speculative_config {method,
    num_speculative_tokens} under rollout.engine_kwargs.vllm.speculative_config's own entries
    (vllm_async_server.py, utils.py build_mtp_speculative_config); SGLang EAGLE over the MTP layers with
    speculative_num_steps drafts (async_sglang_server.py; with speculative_eagle_topk 1 SGLang verifies
    num_steps + 1, server_args.py). Without MTP, rollout.engine_kwargs.vllm.speculative_config alone reaches
    vLLM too (its engine_kwargs are passed whole)."""
    src = v.result.source
    section = _mtp_section(v)
    mtp = all(v.given(f"{section}.{key}") and v.flag(f"{section}.{key}") for key in ("enable", "enable_rollout"))
    if sglang:
        if mtp:
            engine.update(_sglang_mtp(v, decided))
            v.result.notes.append(SPECULATION_NOTE)
        return
    entries = {k[len(VLLM_SPECULATIVE_CONFIG) + 1:]: value for k, value in v.flat.items()
               if k.startswith(VLLM_SPECULATIVE_CONFIG + ".") and value is not None}
    if not mtp and not entries:
        return
    config = {"method": _mtp_value(v, "method"), "num_speculative_tokens": _mtp_value(v, "num_speculative_tokens")} \
        if mtp else {}
    engine.update(vllm_speculation({**config, **entries}, VLLM_SPECULATIVE_CONFIG if entries else section, src,
                                   v.count(f"{A}.rollout.tensor_model_parallel_size")))
    reason = "workload.inference.speculative_method / num_speculative_tokens"
    for name in entries:
        decided[f"{VLLM_SPECULATIVE_CONFIG}.{name}"] = speculative_entry_status(name)
    if mtp:
        _mark_mtp(v, ("enable", "enable_rollout", "method", "num_speculative_tokens"), reason, decided)
    v.result.notes.append(SPECULATION_NOTE)


def _sglang_mtp(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """SGLang's EAGLE over the model's MTP layers: speculative_num_steps drafts a step; tree drafts
    (speculative_eagle_topk above 1) are refused."""
    src, section = v.result.source, _mtp_section(v)
    algorithm = str(_mtp_value(v, "speculative_algorithm")).upper()
    if algorithm not in ("EAGLE", "NEXTN"):   # NEXTN: SGLang's other name of EAGLE over MTP layers (server_args.py)
        raise RlsimError(f"SGLang speculative algorithm {algorithm} over the MTP layers is not modelled", source=src,
                         field=f"{section}.speculative_algorithm", fix=f"pass {section}.speculative_algorithm=EAGLE")
    if _mtp_value(v, "speculative_eagle_topk") != 1:
        raise RlsimError("SGLang's tree drafts (speculative_eagle_topk above 1) are not modelled", source=src,
                         field=f"{section}.speculative_eagle_topk", fix=f"pass {section}.speculative_eagle_topk=1")
    _mark_mtp(v, ("enable", "enable_rollout", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                  "speculative_num_draft_tokens"), "workload.inference.speculative_method mtp / num_speculative_tokens "
              "(speculative_num_steps; SGLang verifies num_steps + 1 with topk 1)", decided)
    return {"speculative_method": "mtp", "num_speculative_tokens": positive_int(
        _mtp_value(v, "speculative_num_steps"), f"{section}.speculative_num_steps", src)}


def _mark_mtp(v: Values, names: tuple[str, ...], reason: str, decided: dict[str, tuple[Status, str]]) -> None:
    """The MTP keys the rollout's speculation read, mapped, in model.mtp and its rollout copy alike."""
    for section in (MTP, f"{A}.rollout.mtp"):
        for name in names:
            if v.given(f"{section}.{name}"):
                decided[f"{section}.{name}"] = ("mapped", reason)


def _expert_tp_default(v: Values, layout: Mapping[str, Any], model: Any) -> None:
    """actor.megatron.expert_tensor_parallel_size absent on an MoE model at tp > 1: rlsim takes verl
    0.6.1+'s default, null (Megatron's expert TP = tp: engine/megatron.yaml 0.6.1, 0.7.0, 0.9.1, whose
    workers/engine/megatron/transformer_impl.py hands it to mpu.initialize_model_parallel as None), and says
    that verl 0.6.0 defaulted to 1 (its engine/megatron.yaml), which splits the experts differently.
    ``model``: the config's, or the one --set gives (None: a sweep's --grid key, judged by its ep)."""
    key = f"{A}.actor.megatron.expert_tensor_parallel_size"
    if str(v(f"{A}.actor.strategy")) != "megatron" or v.given(key) or layout.get("tp", 1) == 1:
        return
    if has_experts(model, layout.get("ep", 1)):
        v.result.notes.append(f"{key} not given: verl 0.6.1+'s default null (Megatron's: the experts split over tp "
                              f"{layout['tp']}), which rlsim takes; verl 0.6.0 defaulted to 1: give {key}=1 to match it")


def _check_step_budget(v: Values, recipe: str, w: dict[str, Any]) -> None:
    """A vLLM step budget (rollout.max_num_batched_tokens) below max_model_len (rollout.max_model_len,
    else data.max_prompt_length + max_response_length, as verl sets it) is refused where verl or vLLM
    refuse it: vLLM's SchedulerConfig without chunked prefill (vllm/config/scheduler.py _verify_args,
    0.11.0), verl 0.6's synchronous rollout with it (vllm_rollout_spmd.py: "Enable chunked prefill,
    max_num_batched_tokens is smaller than max_model_len"; verl 0.7's agent-loop servers have no such check)."""
    if w.get("engine") != VLLM_ENGINE:
        return
    r = f"{A}.rollout"
    budget, chunked = v.count(f"{r}.max_num_batched_tokens"), v.flag(f"{r}.enable_chunked_prefill")
    given = v(f"{r}.max_model_len")
    longest = (positive_int(given, f"{r}.max_model_len", v.result.source) if given is not None
               else w["prompt_length"]["max"] + w["response_length"]["max"])
    sync = recipe not in AGENT_LOOP_RECIPES and str(v(f"{r}.mode") or "sync") == "sync"
    if budget >= longest or (chunked and not sync):
        return
    who = ("verl 0.6's synchronous vLLM rollout refuses it with chunked prefill (vllm_rollout_spmd.py)" if chunked
           else "vLLM refuses it without chunked prefill (SchedulerConfig)")
    raise RlsimError(f"max_num_batched_tokens {budget} is below max_model_len {longest}: {who}", source=v.result.source,
                     field=f"{r}.max_num_batched_tokens",
                     fix=f"pass {r}.max_num_batched_tokens={longest} or more" + (
                         f" (or {r}.mode=async, verl 0.7's agent loop, which accepts it with chunked prefill)"
                         if chunked else f", or {r}.enable_chunked_prefill=true"))


def _fsdp_params(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The FSDP actor's reshard_after_forward (fsdp2's fully_shard kwarg; FSDP1 never reads it, verl
    0.6.0 workers/fsdp_workers.py) and the dtype of its gradient reduction (MixedPrecision's
    reduce_dtype, fp32 by default there), onto workload.train_params."""
    strategy = str(v(f"{A}.actor.strategy"))
    if strategy not in ("fsdp", "fsdp2"):
        return
    reshard = f"{A}.actor.fsdp_config.reshard_after_forward"
    if v.given(reshard) and strategy == "fsdp":
        decided[reshard] = ("ignored", "the fsdp strategy (FSDP1, FULL_SHARD / HYBRID_SHARD) does not read it; fsdp2 "
                                       "does")
    elif v.given(reshard) and not v.flag(reshard):
        w.setdefault("train_params", {}).setdefault("memory", {})["zero3_reshard_after_forward"] = False
    _offload_policy(v, w, strategy, decided)
    reduce = f"{A}.actor.fsdp_config.mixed_precision.reduce_dtype"
    if v.given(reduce):
        dtype = str(v(reduce)).lower()
        if dtype not in MODEL_DTYPES:
            raise RlsimError(f"unknown reduce_dtype {dtype!r}", source=v.result.source, field=reduce,
                             fix=f"give one of {', '.join(sorted(MODEL_DTYPES))}")
        w.setdefault("train_params", {}).setdefault("comm", {})["grad_reduce_bytes_per_param"] = \
            DTYPE_BYTES[MODEL_DTYPES[dtype]]
    _fsdp_master_state(v, w)


def _fsdp_master_state(v: Values, w: dict[str, Any]) -> None:
    """The FSDP actor's (and critic's) resident training state, onto workload.train_params.memory:
    verl loads the trained model in fsdp_config.model_dtype, fp32 unless set (verl 0.6.1
    workers/fsdp_workers.py: `torch.float32 if self._is_actor`, "we have to create model in fp32.
    Otherwise, the optimizer is in bf16"; FSDPEngineConfig.model_dtype "fp32"; the critic's
    model_dtype "fp32"; verl 0.9.1 workers/engine/fsdp/transformer_impl.py the same). That shard is
    the master copy: MixedPrecision(param_dtype=bf16) casts it only while a layer is gathered (the
    working set, weight_bytes_per_param), FSDP casts each reduced gradient shard back to the
    parameters' dtype, and torch.optim.AdamW (optim.optimizer_impl torch.optim, optimizer AdamW)
    keeps m and v in it (zeros_like(p)): b + b + 2 b a parameter, 16 at fp32 where Megatron's
    distributed optimizer keeps 18."""
    per_param = _dtype_bytes(v, f"{A}.actor.fsdp_config.model_dtype")
    w.setdefault("train_params", {}).setdefault("memory", {}).update(
        resident_weight_bytes_per_param=per_param, grad_bytes_per_param=per_param)


def _optimizer_of(v: Values, section: str, strategy: str, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """The train_params fields of the optimizer ``section`` (actor.optim, critic.optim) names under
    ``strategy`` (verl_optimizer.optimizer_fields), over the FSDP shard's dtype (fsdp_config.model_dtype)."""
    decided.update(override_decisions(v, section))
    if strategy == "megatron" and v.given(f"{section}.optimizer_impl"):
        decided[f"{section}.optimizer_impl"] = ("ignored", "the megatron workers build Megatron-Core's optimizer "
                                                           "by optim.optimizer alone")
    return optimizer_fields(v, section, strategy, _dtype_bytes(v, f"{A}.actor.fsdp_config.model_dtype"))


def _actor_optimizer(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The actor's optimizer state and step traffic, onto workload.train_params (none for
    Megatron-Core's Adam: rlsim's defaults)."""
    merge_train_params(w, _optimizer_of(v, f"{A}.actor.optim", str(v(f"{A}.actor.strategy")), decided))


# verl's megatron workers hand actor.optim.override_optimizer_config to Megatron-Core's OptimizerConfig
# key by key (0.6.1 / 0.7.0 utils/megatron/optimizer.py init_megatron_optim_config: optim_args[k] = v):
# optimizer_cpu_offload builds its HybridDeviceOptimizer over optimizer_offload_fraction of the state,
# as NeMo RL's policy.megatron_cfg.optimizer does; verl's load_megatron_optimizer knows that optimizer
# (utils/megatron_utils.py: "if we are using HybridDeviceOptimizer, ... only move gpu optimizer state").
# The FSDP workers pass the dict to the torch optimizer's constructor (workers/config/optimizer.py
# build_optimizer: optimizer_args.update(override_optimizer_config)), which takes neither key.
HYBRID_OPTIMIZER = f"{A}.actor.optim.override_optimizer_config.optimizer_cpu_offload"
HYBRID_OPTIMIZER_SHARE = f"{A}.actor.optim.override_optimizer_config.optimizer_offload_fraction"


def _hybrid_device_optimizer(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The actor's Megatron-Core cpu-offloaded optimizer (HYBRID_OPTIMIZER) -> workload.train_params.offload
    of scope optimizer_step (verl_optimizer.hybrid_device_offload); unsupported under fsdp and beside
    verl's own per-phase offload (actor.megatron.param_offload / optimizer_offload, scope update: rlsim's
    offload times every offloaded state by one scope)."""
    given = [key for key in (HYBRID_OPTIMIZER, HYBRID_OPTIMIZER_SHARE) if v.given(key)]
    if not given:
        return
    if str(v(f"{A}.actor.strategy")) != "megatron":
        decided.update({key: ("unsupported", "fsdp: verl passes override_optimizer_config to the torch optimizer's "
                                             "constructor (build_optimizer), which takes no such argument")
                        for key in given})
        return
    if not (v.given(HYBRID_OPTIMIZER) and v.flag(HYBRID_OPTIMIZER)):
        decided.update({key: ("ignored", "Megatron-Core's optimizer_cpu_offload is off: the state stays on the "
                                         "devices") for key in given})
        return
    per_phase = [key for key in (f"{A}.actor.megatron.{name}" for name in MEGATRON_OFFLOAD_KEYS)
                 if v.given(key) and v.flag(key)]
    if per_phase:
        decided.update({key: ("unsupported", f"beside {', '.join(per_phase)} (verl's per-phase offload, once an "
                                             "update): rlsim's train_params.offload takes one scope")
                        for key in given})
        return
    merge_train_params(w, {"offload": hybrid_device_offload(v, HYBRID_OPTIMIZER, HYBRID_OPTIMIZER_SHARE)})
    decided[HYBRID_OPTIMIZER] = ("mapped", "workload.train_params.offload.optimizer: Megatron-Core's "
                                           "HybridDeviceOptimizer (offload.scope optimizer_step), as NeMo RL's")
    if v.given(HYBRID_OPTIMIZER_SHARE):
        decided[HYBRID_OPTIMIZER_SHARE] = ("mapped", "workload.train_params.offload.optimizer_fraction")


def _critic_optimizer(v: Values, w: dict[str, Any], strategy: str, decided: dict[str, tuple[Status, str]]) -> None:
    """The critic's optimizer (critic.optim, built apart from the actor's) onto workload.critic_optimizer
    where its state or step traffic differs from the actor's."""
    own = critic_optimizer(_optimizer_of(v, "critic.optim", strategy, decided), w.get("train_params") or {})
    if own is not None:
        w["critic_optimizer"] = own


LORA_NOTE = ("LoRA: the engine serves the adapter (verl passes enable_lora to vLLM) and rlsim does not price its LoRA "
             "kernels; a refit sends the adapters alone at sleep level 1 (layered_summon) and the base with them at "
             "level 2, as verl does (schedule.lora_refit)")


def _offload_policy(v: Values, w: dict[str, Any], strategy: str, decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.6.0 fsdp_workers.py: under fsdp2 `offload_policy` builds the actor with
    CPUOffloadPolicy(pin_memory=True) and turns the per-phase param / optimizer offload off."""
    key = f"{A}.actor.fsdp_config.offload_policy"
    if not v.flag(key):
        return
    if strategy == "fsdp":
        decided[key] = ("ignored", "the fsdp strategy (FSDP1) does not read it; fsdp2 does")
        return
    section = w.setdefault("train_params", {})
    per_phase = section.pop("offload", {})
    for name in FSDP_OFFLOAD_KEYS:
        if per_phase.get(OFFLOAD_KEYS[name]):
            decided[f"{A}.actor.fsdp_config.{name}"] = ("ignored", "offload_policy: verl turns the per-phase "
                                                                  "offload off (the state is on the host for good)")
    section["offload"] = {"fsdp_cpu_offload": True}


# Megatron's LoRA module names (Megatron-Bridge, verl 0.7 model.lora.target_modules) as the Hugging
# Face modules they hold (workload.lora.targets reads either)
MEGATRON_LORA_MODULES = {"linear_qkv": ("q_proj", "k_proj", "v_proj"), "linear_proj": ("o_proj",),
                         "linear_fc1": ("gate_proj", "up_proj"), "linear_fc2": ("down_proj",)}


def _megatron_lora(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.7's megatron workers: Megatron-Bridge's LoRA when model.lora.rank > 0 (else full
    fine-tuning); the fsdp workers read model.lora_rank and leave model.lora to the megatron ones."""
    key = f"{A}.model.lora"
    given = [k for k in v.flat if k.startswith(key + ".")]
    rank = v(f"{key}.rank")
    rank = 0 if rank in (None, 0) else positive_int(rank, f"{key}.rank", v.result.source)
    if str(v(f"{A}.actor.strategy")) != "megatron" or not rank:
        why = ("the fsdp workers read model.lora_rank" if str(v(f"{A}.actor.strategy")) != "megatron"
               else "model.lora.rank 0: full fine-tuning")
        decided.update({k: ("ignored", why) for k in given})
        return
    names = v(f"{key}.target_modules") or list(MEGATRON_LORA_MODULES)
    names = list(names) if isinstance(names, list) else [names]
    unknown = [name for name in names if not isinstance(name, str) or name not in MEGATRON_LORA_MODULES]
    if unknown:
        raise RlsimError(f"LoRA target {unknown[0]!r} is not one of Megatron's modules rlsim knows", source=v.result.source,
                         field=f"{key}.target_modules", fix=f"use {', '.join(MEGATRON_LORA_MODULES)}")
    w["lora"] = {"rank": rank, "targets": [hf for name in names for hf in MEGATRON_LORA_MODULES[str(name)]]}
    v.result.notes.append("LoRA (megatron): the sync exports the whole Hugging Face state dict through "
                          "Megatron-Bridge (0.7.0 megatron_workers.py rollout_mode; 0.9 with model.lora.merge or the "
                          "vanilla bridge: schedule.lora_refit full), else the adapters once the base is synced")


def _megatron_lora_sends_whole(v: Values) -> bool:
    """Whether the megatron workers' sync sends the whole model with LoRA: verl 0.7 always does (the bridge
    exports the HF state dict); verl 0.9 (model.lora.merge present) unless the adapters stay unmerged on
    Megatron-Bridge's own export (vanilla_mbridge false), which sends the adapters once the base is synced."""
    if not v.given(f"{A}.model.lora.merge"):
        return True
    return v.flag(f"{A}.model.lora.merge") or v.flag(f"{A}.actor.megatron.vanilla_mbridge")


def _multi_turn(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl's tool agent loop (0.9.1 experimental/agent_loop/tool_agent_loop.py): with
    rollout.multi_turn.enable a sample turns until max_assistant_turns (or its response_length,
    tool answers included, is spent): workload.multi_turn.max_turns; null leaves rlsim no cap."""
    key = f"{A}.rollout.multi_turn"
    if not v.flag(f"{key}.enable"):
        return
    turns = v(f"{key}.max_assistant_turns")
    if turns is None:
        raise RlsimError("multi-turn rollouts with no turn cap: verl stops a sample only when its response_length is "
                         "spent, which rlsim cannot tell from the config", source=v.result.source,
                         field=f"{key}.max_assistant_turns",
                         fix=f"pass {key}.max_assistant_turns=N, the most assistant turns your task's samples take")
    w["multi_turn"] = {"max_turns": positive_int(turns, f"{key}.max_assistant_turns", v.result.source)}
    agent = f"{A}.rollout.agent.default_agent_loop"
    if v(agent) == "tool_agent":
        decided[agent] = ("mapped", "the tool agent loop: workload.multi_turn")
    v.result.notes.append(MULTI_TURN_NOTE)


def _lora(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """verl's LoRA (fsdp_workers.py, 0.6.0: get_peft_model on the actor; its reference is the actor
    with the adapters disabled): workload.lora."""
    _megatron_lora(v, w, decided)
    m = f"{A}.model"
    rank = v(f"{m}.lora_rank")
    rank = 0 if rank in (None, 0) else positive_int(rank, f"{m}.lora_rank", v.result.source)
    others = [f"{m}.{k}" for k in ("target_modules", "lora_alpha", "exclude_modules") if v.given(f"{m}.{k}")]
    if not rank:
        decided.update({key: ("ignored", "used only with lora_rank > 0") for key in others})
        return
    if str(v(f"{A}.actor.strategy")) == "megatron":
        decided.update({key: ("ignored", "verl's megatron workers do not read it (their LoRA is model.lora)")
                        for key in (f"{m}.lora_rank", *others)})
        return
    targets = v(f"{m}.target_modules") or "all-linear"
    names = targets if isinstance(targets, list) else [targets]
    if not all(isinstance(name, str) and name for name in names):
        raise RlsimError(f"target_modules {targets!r} is not a module name or a list of them", source=v.result.source,
                         field=f"{m}.target_modules", fix="give all-linear or a list such as [q_proj, v_proj]")
    w["lora"] = {"rank": rank, "targets": "all-linear" if names == ["all-linear"] else names}
    v.result.notes.append(LORA_NOTE)


def _legacy_reward_pool(v: Values, recipe: str, sched: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> int:
    """verl 0.6 / 0.7's reward model (reward_model.enable) on a reward_pool of its own: the hybrid
    engine's step hands its batch to it and waits (schedule.aux_devices {reward: N}, set apart after
    the actor's devices). Its devices, or 0: no pool, or a trainer this is not modelled on (said)."""
    key = "reward_model.enable_resource_pool"
    if not (v.flag("reward_model.enable") and v.flag(key)):
        return 0
    if recipe != "colocated":
        decided[key] = ("unsupported", f"a reward model on a pool of its own beside verl's {recipe} trainer is not "
                                       "modelled (the hybrid engine's is: schedule.aux_devices {reward: N})")
        return 0
    per_node, nodes = v.count("reward_model.n_gpus_per_node"), v.natural("reward_model.nnodes")
    if not nodes:   # main_ppo checks n_gpus_per_node, then "config.reward_model.nnodes must be greater than 0"
        raise RlsimError("reward_model.enable_resource_pool without a pool (reward_model.nnodes 0)",
                         source=v.result.source, field="reward_model.nnodes",
                         fix="pass reward_model.nnodes=N reward_model.n_gpus_per_node=G")
    sched["aux_devices"] = {"reward": nodes * per_node}
    for name in ("nnodes", "n_gpus_per_node"):
        decided[f"reward_model.{name}"] = ("mapped", "schedule.aux_devices: the reward pool's nodes x GPUs a node")
    return nodes * per_node


def _reward_and_critic(v: Values, w: dict[str, Any], recipe: str, decided: dict[str, tuple[Status, str]]) -> None:
    if v.flag("reward_model.enable"):
        path = v("reward_model.model.path")
        model = model_for(path, "reward_model.model.path", v.result.source, policy=False)[0] if path else None
        w["reward"] = {"kind": "model", **({"model": model} if model else {})}
        if str(v.flat.get("reward_model.strategy", "fsdp")) in ("fsdp", "fsdp2"):
            w["reward"]["cpu_offload"] = True
            v.result.notes.append(REWARD_OFFLOAD_NOTE)
    else:
        w["reward"] = {"kind": "rule", **_verl_rule_reward(v, recipe, decided)}
    if w["algorithm"] != "ppo":   # verl builds no critic without GAE or critic.enable (need_critic)
        why = ("no critic: critic.enable false" if v("critic.enable") is not None else
               f"no critic: adv_estimator {v('algorithm.adv_estimator')!r} is critic-free")
        inactive_section({key: x for key, x in v.flat.items() if key != "critic.enable"}, "critic", why, decided)
        return
    if v("critic.model.path"):
        w["critic_model"] = model_for(v("critic.model.path"), "critic.model.path", v.result.source, policy=False)[0]
    _critic_as_actor(v, w, decided)
    # verl's critic keeps its own offload flags (false by default), not the actor's, under its backend
    # (CriticWorker of fsdp_workers.py / megatron_workers.py: the same load-and-offload around its passes)
    strategy = _strategy(v, "critic")
    backend, other = (("critic.megatron", "critic.model.fsdp_config") if strategy == "megatron"
                      else ("critic.model.fsdp_config", "critic.megatron"))
    w["critic_offload"] = {"params": v.flag(f"{backend}.param_offload"),
                           "optimizer": v.flag(f"{backend}.optimizer_offload")}
    _critic_optimizer(v, w, strategy, decided)
    inactive_section(v.flat, other, f"critic.strategy is {strategy}: this backend's settings do not apply", decided)


# the torch dtype names verl's fsdp_config.model_dtype takes, as rlsim's dtypes (their bytes:
# llm.architecture.DTYPE_BYTES)
MODEL_DTYPES = {"fp32": "fp32", "float32": "fp32", **{k: v for k, v in DTYPES.items() if v in ("bf16", "fp16")}}


def _fsdp_refit_dtype(v: Values, s: dict[str, Any]) -> None:
    """The FSDP actor's refit gathers its sharded parameters (DTensor.full_tensor() per name,
    fsdp_workers.py rollout_mode, verl 0.6.0) in their own dtype: fp32 unless fsdp_config.model_dtype
    says otherwise (fsdp_workers.py: torch.float32 for the actor)."""
    if str(v(f"{A}.actor.strategy")) not in ("fsdp", "fsdp2"):
        return
    s["refit_gather_bytes_per_param"] = _dtype_bytes(v, f"{A}.actor.fsdp_config.model_dtype")


def _dtype_bytes(v: Values, key: str) -> float:
    """Bytes a parameter of an fsdp_config.model_dtype (FSDPEngineConfig's default fp32)."""
    dtype = str(v.flat.get(key) or "fp32").lower()
    if dtype not in MODEL_DTYPES:
        raise RlsimError(f"unknown model_dtype {dtype!r}", source=v.result.source, field=key,
                         fix=f"give one of {', '.join(sorted(MODEL_DTYPES))}")
    return DTYPE_BYTES[MODEL_DTYPES[dtype]]


def _verl_rule_reward(v: Values, recipe: str, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """The rule reward as verl scores it: its reward manager's measured cost a sample (the naive
    manager with math_dapo, params.VERL_NAIVE_*), and with the synchronous rollout the trainer's
    driver loops over the batch itself (ray_trainer.py compute_reward: one worker). The agent loop
    (rollout.mode async, fully_async) scores each sample as it ends in its AgentLoopWorker's
    RewardManagerWorker (verl/experimental/agent_loop/agent_loop.py), one Ray actor each: a pool of
    rollout.agent.num_workers, handed each sample."""
    key = next((k for k in ("reward.reward_manager.name", "reward_manager.name") if v.given(k)),
               "reward_model.reward_manager")
    manager = str(v(key) or "naive")
    reward: dict[str, Any] = {"cpu_s_per_sample": VERL_NAIVE_CPU_S_PER_SAMPLE, "cpu_s_per_token": VERL_NAIVE_CPU_S_PER_TOKEN,
                              "capped_cpu_s_per_sample": VERL_NAIVE_CAPPED_CPU_S_PER_SAMPLE,
                              "capped_cpu_s_per_token": VERL_NAIVE_CAPPED_CPU_S_PER_TOKEN}
    agents = f"{A}.rollout.agent.num_workers"
    driver = recipe not in AGENT_LOOP_RECIPES and str(v(f"{A}.rollout.mode") or "sync") == "sync"
    if not driver and v.given("reward.num_workers"):   # verl 0.9: the reward loop's own workers
        reward.update(workers=v.count("reward.num_workers"), handover="sample")
        if v.given(agents):
            decided[agents] = ("ignored", "verl 0.9 scores in the reward loop's workers (reward.num_workers)")
    elif not driver:
        reward.update(workers=v.count(agents), handover="sample")
    elif v.given(agents):
        decided[agents] = ("ignored", "used by the agent loop only (rollout.mode async)")
    if driver and manager in ("naive", "dapo"):
        reward["workers"] = 1
    elif v.given(key):
        decided[key] = ("ignored", f"{manager}: scored at the naive manager's measured cost a sample on "
                                   f"{'the agent loop' if not driver else 'rlsim'}'s workers (give yours: "
                                   "workload.reward.cpu_s_per_sample)")
    return reward


def _reward_overlap(v: Values, recipe: str, w: dict[str, Any], s: dict[str, Any],
                    decided: dict[str, tuple[Status, str]]) -> None:
    """reward_model.launch_reward_fn_async: main_ppo launches the rule reward as a Ray task after
    generation and gathers it at the advantage, so it overlaps the log-prob passes."""
    key = "reward_model.launch_reward_fn_async"
    if not v.given(key):
        return
    if recipe in ("colocate-async", "sync"):
        decided[key] = ("ignored", "the v1 agent loop scores each trajectory as it ends")
    elif recipe != "colocated":
        decided[key] = ("unsupported" if v.flag(key) else "ignored",
                        "split pools score each instance's samples as they finish (in the previous generation's wait)")
    elif "dynamic_sampling" in w:
        decided[key] = ("ignored", "dynamic sampling scores each generation batch before its filter and training")
    elif w["reward"]["kind"] != "rule":
        decided[key] = ("ignored", "a reward model scores on the devices (the async task is the rule reward's)")
    elif v.flag(key):
        s["reward_during_forwards"] = True


def _schedule(v: Values, recipe: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    s: dict[str, Any] = {"kind": KIND_OF_RECIPE[recipe]}
    if recipe in SPLIT_RECIPES:
        s["rollout_devices"] = _v1_rollout_gpus(v) if recipe == "separate-async" else _rollout_gpus(v)
        if recipe == "one-step-off" and "dynamic_sampling" not in w:
            # fit_one_step_off: the trainer takes the previous iteration's generate_sequences result
            # whole (no group split across steps, nothing ages out); verl recipe/one_step_off_policy,
            # cited from memory of its public code
            s["round_batches"] = True
        decided[f"{A}.rollout.free_cache_engine"] = ("ignored", "split pools: the rollout engine never gives way "
                                                   "to training, so it never sleeps")
        # verl's split-pool recipes sync the trainer's weights to the rollout tensor by tensor (each
        # full parameter gathered on the trainer, then broadcast): hardware.md's verl measurement,
        # Qwen3-30B-A3B 16 <-> 16 on H20 in 15.8 s, "dominated by producing parameters in the trainer",
        # is what refit: full-tensors (with refit_tensor_overhead_s) prices; reshard would send each
        # rollout device its shard alone (0.38 s there)
        s["refit"] = "full-tensors"
        v.result.notes.append("split pools: the weight sync is verl's tensor-by-tensor one (schedule.refit: "
                              "full-tensors, as hardware.md's verl measurement); --set schedule.refit=reshard for a "
                              "sharded sync")
    else:
        decided.update({k: ("ignored", "colocated: one pool (trainer.*)") for k in ("rollout.nnodes", "rollout.n_gpus_per_node")})
        _hybrid_engine_switch(v, w, s, decided)
        # The hybrid engine loads the trainer's weights into the engine tensor by tensor too, each a
        # full tensor (FSDP: the sharding manager's load_weights of param.full_tensor() per name;
        # Megatron: its per-tensor generator gathers over TP / PP / EP; cited from memory of verl's
        # public code): refit full-tensors, as the split pools' sync above (reshard sent shards)
        s["refit"] = "full-tensors"
        if "dynamic_sampling" in w and recipe == "colocated":
            # every generate_sequences call switches the hybrid engine to rollout mode and back (the
            # state dict loaded into the engine, woken; put to sleep after: verl 0.5 fsdp_workers.py with
            # sharding_manager/fsdp_vllm.py, 0.6 rollout_mode / trainer_mode), one per generation batch
            s["between_gen_batches"] = "reshard"
    _fsdp_refit_dtype(v, s)
    _reward_overlap(v, recipe, w, s, decided)
    if recipe == "fully-async":
        decided[f"{A}.rollout.mode"] = ("ignored", "the fully_async Rollouter serves requests asynchronously: "
                                        "that is the verl-fully-async kind")
        for key in ("require_batches", "trigger_parameter_sync_step", "staleness_threshold", "partial_rollout"):
            if v.given(f"async_training.{key}"):
                s[key] = v(f"async_training.{key}")
            else:
                v.result.notes.append(f"async_training.{key} not given: rlsim's default (VerlFullyAsyncSchedule)")
        if v.given("async_training.concurrent_samples_per_replica"):   # a verl 0.9 config: its Rollouter
            s["max_inflight_prompts_per_server"] = v.count("async_training.concurrent_samples_per_replica")
            s["request_routing"] = True
        _dynamic_resources(v, w, s, decided)
        if not s.get("request_routing"):
            v.result.notes.append("no async_training.concurrent_samples_per_replica: read as verl 0.4-0.7's Rollouter "
                                  "(a prompt's requests on one server, max_inflight_prompts_per_server a server); "
                                  "verl 0.9's routes each request and caps the pool: give that key")
        if s.get("partial_rollout") and not s.get("staleness_threshold"):   # verl reads it past there too
            del s["partial_rollout"]
            decided["async_training.partial_rollout"] = (
                "ignored", "with staleness_threshold 0 the Rollouter starts no more than a version consumes, so a "
                "sync finds no request in flight to cancel")
    s["distqueue"] = {"packed": _removes_padding(v, recipe, decided)}
    _micro_batching(v, s, w["train_layout"], decided)
    _reference_micro_batches(v, bool(w.get("reference")), decided)
    _megatron_reference_offload(v, w, s, decided)
    _hf_rows(v, w, s["distqueue"]["packed"], decided)
    _bypass_mode(v, recipe, s, decided)
    _checkpoint_engine(v, recipe, decided)
    _v1_schedule(v, recipe, w, s, decided)
    if "lora" in w and str(v(f"{A}.actor.strategy")) == "megatron" and _megatron_lora_sends_whole(v):
        s["lora_refit"] = "full"
    return s


def _megatron_reference_offload(v: Values, w: dict[str, Any], s: dict[str, Any],
                                decided: dict[str, tuple[Status, str]]) -> None:
    """verl's Megatron reference keeps its weight shard on the GPUs (ref.megatron.param_offload false,
    verl's default) or, with param_offload, in host memory between its forwards: 2 copies of the
    shard a pass (schedule.reference_swap_copies). Its FSDP reference lives on the host for good
    (workload.reference_cpu_offload, set in _workload)."""
    key = f"{A}.ref.megatron.param_offload"
    if not v.given(key):
        return
    if str(v(f"{A}.actor.strategy")) != "megatron":
        decided[key] = ("ignored", f"{A}.actor.strategy is {v(f'{A}.actor.strategy')}: the megatron reference's "
                                   "setting does not apply")
    elif not w.get("reference") or "lora" in w:
        decided[key] = ("ignored", "no reference worker: no KL term" if not w.get("reference") else
                        "with LoRA verl builds no reference worker (the actor's base with its adapters disabled)")
    elif v.flag(key):   # the reference's own shard, in and out
        s["reference_swap_copies"] = s["reference_swap_own_copies"] = MEGATRON_REFERENCE_SWAP_COPIES


def _hybrid_engine_switch(v: Values, w: dict[str, Any], s: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The hybrid engine's switch between training and rollout on the trainer's devices (main_ppo's
    colocated step, and separate_async's replicas lent to generation)."""
    # The hybrid engine's switch to rollout leaves the optimizer where the trainer keeps it: verl
    # moves it to the host only under optimizer_offload, after each update (fsdp_workers.py /
    # megatron_workers.py: offload_fsdp_optimizer / offload_megatron_optimizer under
    # _is_offload_optimizer; cited from memory of its public code), which is the per-phase offload
    # (train_params.offload.optimizer) mapped above. FSDP: optimizer.zero_grad() frees the gradients
    # (set_to_none) before the rollout (verl 0.6.1 workers/actor/dp_actor.py update_policy). Megatron:
    # the DDP grad buffer stays allocated (zeroed, not freed: megatron_actor.py zero_grad_buffer), freed
    # only with the parameters under param_offload (train_params.offload.params; the stack's
    # memory.grad_buffer_persists, rl/llm_costs.py kept_gradient_bytes)
    megatron = str(v(f"{A}.actor.strategy")) == "megatron"
    s["switch"] = {"offload_optimizer": False, "free_gradients": not megatron}
    if megatron:
        v.result.notes.append(VERL_MEGATRON_SWITCH_NOTE)
    elif not ((w.get("train_params") or {}).get("offload") or {}).get("fsdp_cpu_offload"):
        v.result.notes.append(VERL_SWITCH_NOTE)   # under offload_policy no state stays on the devices
    if v.flag(f"{A}.rollout.free_cache_engine") and w.get("engine") == SGLANG_ENGINE:
        # the hybrid engine (trainer and rollout in one process) starts SGLang without
        # enable_weights_cpu_backup (verl 0.7 async_sglang_server.py: only RolloutMode.COLOCATED,
        # a separate judge process, backs its weights up)
        decided[f"{A}.rollout.free_cache_engine"] = (
            "mapped", "sglang: SGLang releases and re-maps its memory (torch_memory_saver) without copying the "
            "weights to the host (verl's hybrid engine sets no enable_weights_cpu_backup): rlsim's switch "
            "re-allocating the KV pool (schedule.switch.kv_realloc_s), not vLLM's sleep mode")
    elif v.flag(f"{A}.rollout.free_cache_engine"):
        # verl 0.6+ with vLLM >= 0.8.5: sleep level 2 (the weights discarded, a refit overwrites them);
        # level 1 with layered_summon (verl/third_party/vllm VLLM_SLEEP_LEVEL, vllm_rollout.py)
        s["switch"].update({"engine_sleep": True,
                            "engine_sleep_level": 1 if v.flag(f"{A}.rollout.layered_summon") else 2})
    else:   # false: the engine neither sleeps nor frees its cache; training runs beside its share of HBM
        s["switch"]["engine_resident"] = True


def _checkpoint_engine(v: Values, recipe: str, decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.9's weight sync engines rlsim prices as refit full-tensors: naive (the hybrid engine
    loads each tensor in its own process) and nccl (actor rank 0 gathers each tensor and broadcasts
    buckets to the rollout workers, two buffers in flight: checkpoint_engine/nccl_checkpoint_engine.py,
    0.9.1; refit_overlap). nixl, mooncake, hccl and the delta engines are not modelled."""
    key = f"{A}.rollout.checkpoint_engine.backend"
    backend = v(key) if v.given(key) else None
    if recipe == "separate-async" and (backend or "naive") == "naive":   # verl asserts it (trainer_separate_async.py)
        raise RlsimError("separate_async needs a checkpoint engine that reaches another pool", source=v.result.source,
                         field=key, fix=f"pass {key}=nccl")
    if backend == "naive" or (backend == "nccl" and recipe in SPLIT_RECIPES):
        decided[key] = ("ignored", f"{backend}: the per-tensor sync rlsim prices (schedule.refit full-tensors)")


def _bypass_mode(v: Values, recipe: str, s: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """algorithm.rollout_correction.bypass_mode: the old log-probs are the rollout's, no pass computes
    them; the fully_async recipe trains on the rollout's already (its kind runs none)."""
    key = "algorithm.rollout_correction.bypass_mode"
    if not v.flag(key):
        return
    if recipe == "fully-async":
        decided[key] = ("ignored", "the fully_async recipe trains on the rollout's log-probs already (kind "
                                   "verl-fully-async runs no old_log_prob pass)")
        return
    s["recompute_logprob"] = False


def _micro_batching(v: Values, s: dict[str, Any], layout: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """use_dynamic_bsz: micro-batches within a token budget (verl rearrange_micro_batches: the fewest
    that hold the budget, balanced by length), the log-prob passes within their own; else
    ppo_micro_batch_size_per_gpu samples in order (log_prob_micro_batch_size_per_gpu for the log-probs)."""
    r = f"{A}.rollout"
    # verl's dp_actor takes (log_prob_)max_token_len_per_gpu x ulysses_sequence_parallel_size tokens a
    # micro-batch, which the sp ranks split: the budget is each GPU's share (recalled from its public
    # code); its megatron actor and critic multiply it by context_parallel_size (0.6.0 - 0.7.0
    # megatron_actor.py compute_log_prob / update_policy, megatron_critic.py): cp either way
    per_gpu = layout.get("cp", 1)
    if not v.flag(f"{A}.actor.use_dynamic_bsz"):
        _micro_batch_given(v, f"{A}.actor", "ppo_micro_batch_size", "use_dynamic_bsz")
        _check_micro_divides_mini(v, layout)
        if s["distqueue"]["packed"]:   # padded samples: no packed order for a scenario to take
            s["micro_batching"] = "sequence"
        decided[f"{A}.actor.ppo_max_token_len_per_gpu"] = ("ignored", "used only with use_dynamic_bsz: true")
        _log_prob_micro_batches(v, s, layout, decided, per_gpu)
        return
    s["micro_batching"] = "balanced"
    layout.pop("micro_batch", None)   # the token budget cuts the micro-batches: a scenario refuses micro_batch beside it
    layout["max_tokens_per_micro_batch"] = v.count(f"{A}.actor.ppo_max_token_len_per_gpu") * per_gpu
    for key in (f"{A}.actor.ppo_micro_batch_size_per_gpu", f"{A}.actor.ppo_micro_batch_size"):
        if v.given(key):
            decided[key] = ("ignored", "use_dynamic_bsz: the token budget sets the micro-batches")
    if v.given(f"{r}.log_prob_use_dynamic_bsz") and not v.flag(f"{r}.log_prob_use_dynamic_bsz"):
        decided[f"{r}.log_prob_use_dynamic_bsz"] = ("unsupported", "sample-count log-prob micro-batches beside a "
                                                    "training token budget: rlsim's log-prob passes take the budget")
    elif v.given(f"{r}.log_prob_max_token_len_per_gpu"):
        layout["logprob_max_tokens_per_micro_batch"] = v.count(f"{r}.log_prob_max_token_len_per_gpu") * per_gpu
    elif per_gpu > 1:   # verl's default budget is the actor's, per GPU: scaled as it is
        layout["logprob_max_tokens_per_micro_batch"] = layout["max_tokens_per_micro_batch"]
    for key in (f"{r}.log_prob_micro_batch_size_per_gpu", f"{r}.log_prob_micro_batch_size"):
        if v.given(key):
            decided[key] = ("ignored", "use_dynamic_bsz: the log-prob passes take a token budget")


def _hf_rows(v: Values, w: dict[str, Any], packed: bool, decided: dict[str, tuple[Status, str]]) -> None:
    """The FSDP workers' rows and attention (the megatron workers' bshd rows, 0.7, are re-padded to each
    micro-batch's longest, models/mcore/util.py preprocess_bshd, as rlsim pads without a width, and
    Megatron's attention runs their padding). The legacy workers run verl's fixed-width rows (prompt max +
    response max) through the model; 0.9's engine workers re-pad each micro-batch's nested rows to its
    longest (engine/fsdp/transformer_impl.py prepare_model_inputs: to_padded_tensor). The model loads with
    override_config.attn_implementation, flash_attention_2 unless it says otherwise (0.6.1
    fsdp_workers.py _build_model_optimizer; 0.9.1 workers/config/model.py), which unpads padded rows for
    the attention alone (common.hf_attention_compute)."""
    key = f"{A}.model.override_config.attn_implementation"
    if str(v(f"{A}.actor.strategy")) == "megatron":
        if v.given(key):
            decided[key] = ("ignored", "the megatron workers run Megatron's attention, not transformers'")
        return
    impl = v.flat.get(key, HF_FLASH_ATTENTION[0])
    knobs = hf_attention_compute(impl, padded=not packed)
    if knobs is None:
        decided[key] = ("unsupported", f"{impl!r} is not modelled{' on packed rows' if packed else ''}: rlsim prices "
                                       "flash_attention_2 / 3 (packed or padded rows), sdpa and eager (padded rows)")
    if packed:
        return
    compute = w.setdefault("train_params", {}).setdefault("compute", {})
    if not _engine_workers(v):
        compute["pad_rows_to"] = w["prompt_length"]["max"] + w["response_length"]["max"]
    compute.update(knobs or {})


# verl's FSDP default of model.use_remove_padding: false through 0.6 (trainer/config/model/hf_model.yaml,
# read in the 0.6.1 wheel), true from 0.7 (the 0.7.0 and 0.9.1 wheels' hf_model.yaml). The importer reads
# a config as verl 0.6 runs it (DEFAULTS, MODE_NOTE) save its v1 recipes, which only verl 0.9 has: their
# absent key takes 0.9's default. Either way a note says which was taken.
REMOVE_PADDING_NOTE = (f"{A}.model.use_remove_padding not given: verl 0.6's default false (every row padded to prompt "
                       "max + response max), which rlsim takes; verl 0.7+ defaults to true (rows packed): give "
                       f"{A}.model.use_remove_padding=true to match it")
REMOVE_PADDING_V1_NOTE = (f"{A}.model.use_remove_padding not given: verl 0.9's default true (rows packed), which rlsim "
                          f"takes for its v1 trainer; verl 0.6 defaulted to false: give {A}.model.use_remove_padding="
                          "false to pad the rows")


def _fsdp_packs(v: Values, recipe: str) -> bool:
    """Whether the FSDP workers pack their rows: model.use_remove_padding, absent verl 0.6's false, 0.9's
    true for the v1 recipes (REMOVE_PADDING_NOTE)."""
    key = f"{A}.model.use_remove_padding"
    return v.flag(key) if v.given(key) else recipe in V1_RECIPES


def _removes_padding(v: Values, recipe: str, decided: dict[str, tuple[Status, str]]) -> bool:
    """Whether verl's actor packs its rows (no padding): the FSDP workers as model.use_remove_padding
    says (absent: verl 0.6's false, 0.9's true for the v1 recipes, with a note); the megatron workers
    as actor.megatron.use_remove_padding says (verl 0.7, default true) and always where it is absent
    (verl 0.6: MEGATRON_REMOVE_PADDING_RULES). The reference's copy that equals the actor's is mapped
    with it."""
    if str(v(f"{A}.actor.strategy")) != "megatron":
        if not v.given(f"{A}.model.use_remove_padding"):
            v.result.notes.append(REMOVE_PADDING_V1_NOTE if recipe in V1_RECIPES else REMOVE_PADDING_NOTE)
        return _fsdp_packs(v, recipe)
    key, ref_key = f"{A}.actor.megatron.use_remove_padding", f"{A}.ref.megatron.use_remove_padding"
    if v.given(f"{A}.model.use_remove_padding"):
        decided[f"{A}.model.use_remove_padding"] = (
            "ignored", "the megatron workers do not read it: verl 0.6 always packs (preprocess_packed_seqs), 0.7 "
                       f"reads {key}")
    packed = v.flag(key) if v.given(key) else True
    if v.given(ref_key) and v.flag(ref_key) == packed:
        decided[ref_key] = ("mapped", f"the reference forward packs as the actor ({key}), which it equals here")
    return packed


def _micro_batch_given(v: Values, section: str, name: str, dynamic: str) -> None:
    """verl refuses sample-count micro-batches of no size (0.6.0 utils/config.py validate_config and
    workers/config/actor.py, critic.py: check_mutually_exclusive, "Please set at least one of '{name}'
    or '{name}_per_gpu'"); rlsim took 1 without a word (a trial). ``dynamic``: the dotted key whose
    false asks for them (relative to ``section`` unless it holds a dot past it)."""
    if v(f"{section}.{name}") is None and v(f"{section}.{name}_per_gpu") is None:
        switch = dynamic if "." in dynamic else f"{section}.{dynamic}"
        raise RlsimError(f"{switch} is false and no micro-batch size is given: verl asks for one "
                         f"('Please set at least one of {name} or {name}_per_gpu')", source=v.result.source,
                         field=f"{section}.{name}_per_gpu",
                         fix=f"pass {section}.{name}_per_gpu=N, or {switch}=true with a token budget")


def _micro_batch_per_gpu(v: Values, section: str, name: str,
                         decided: dict[str, tuple[Status, str]] | None = None) -> int | None:
    """The per-GPU micro-batch verl's workers run for ``section``'s ``name`` (ppo_micro_batch_size,
    log_prob_micro_batch_size): ``{name}_per_gpu`` as given, or the deprecated global ``{name}``
    divided by the data-parallel ranks (GLOBAL_MICRO_BATCH_NOTE); None where neither is given. Both
    given, or a global one smaller than the ranks (0 a GPU): refused, as verl refuses them."""
    per_gpu, total = f"{section}.{name}_per_gpu", f"{section}.{name}"
    if v(total) is None:
        return v.whole(per_gpu)
    src = v.result.source
    if v(per_gpu) is not None:   # check_mutually_exclusive (utils/config.py, workers/config/actor.py)
        raise RlsimError(f"both {name} and {name}_per_gpu are given: verl refuses the pair ('Please remove "
                         f"{total} because only *_{name}_per_gpu is supported')", source=src, field=total,
                         fix=f"remove {total} and keep {per_gpu}")
    return _global_micro_batch_share(v, total, decided)


def _global_micro_batch_share(v: Values, key: str, decided: dict[str, tuple[Status, str]] | None) -> int:
    """A deprecated global micro-batch ``key`` over the data-parallel ranks, as verl's workers divide
    it (GLOBAL_MICRO_BATCH_NOTE). Refused where verl refuses it: under megatron the actor's and the
    old log-prob pass's (MEGATRON_GLOBAL_MICRO_BATCH_REFUSED); a ppo_micro_batch_size under the FSDP
    rule micro x ulysses_sequence_parallel_size >= n_gpus (FSDP_GLOBAL_MICRO_BATCH_RULE); any other
    under one sample a GPU."""
    src, name = v.result.source, key.rsplit(".", 1)[1]
    if key in MEGATRON_GLOBAL_MICRO_BATCH_REFUSED and str(v(f"{A}.actor.strategy")) == "megatron":
        raise RlsimError(f"{key} (deprecated, global) with actor.strategy megatron: "
                         f"{MEGATRON_GLOBAL_MICRO_BATCH_REFUSED[key]}", source=src, field=key,
                         fix=f"remove {key} and give {key}_per_gpu=N (the micro-batch a GPU)")
    role = "critic" if key.startswith("critic.") else "actor"
    total, ranks = positive_int(v(key), key, src), _data_parallel_ranks(v, role)
    if name == "ppo_micro_batch_size" and _strategy(v, role) != "megatron":
        sp, world = _ulysses_ranks(v, role), _trainer_world(v)
        if total * sp < world:
            raise RlsimError(f"{name} {total} x ulysses_sequence_parallel_size {sp} is less than n_gpus {world}: verl "
                             f"refuses it ({FSDP_GLOBAL_MICRO_BATCH_RULE})", source=src, field=key,
                             fix=f"give at least {-(-world // sp)}, or {key}_per_gpu=N")
    share = total // ranks
    if not share:
        raise RlsimError(f"{name} {total} is less than the {ranks} data-parallel ranks it is divided over: 0 samples "
                         "a GPU, which verl cannot run (its micro-batches split by 0)", source=src, field=key,
                         fix=f"give at least {ranks}, or {key}_per_gpu=N")
    if decided is not None:
        decided[key] = ("mapped", f"{total} // {ranks} data-parallel ranks = {share} samples a GPU "
                                  f"({GLOBAL_MICRO_BATCH_NOTE})")
    return share


def _strategy(v: Values, role: str) -> str:
    """The backend of ``role``'s workers: the actor's actor.strategy, the critic's critic.strategy (absent:
    the actor's, as the trainer config that sets one sets both: ppo_trainer.yaml's dp_critic.yaml fsdp,
    ppo_megatron_trainer.yaml's megatron_critic.yaml megatron)."""
    return str(v.flat.get("critic.strategy") or v(f"{A}.actor.strategy")) if role == "critic" \
        else str(v(f"{A}.actor.strategy"))


def _trainer_world(v: Values) -> int:
    """verl's n_gpus in validate_config: trainer.n_gpus_per_node x trainer.nnodes."""
    return v.count("trainer.nnodes") * v.count("trainer.n_gpus_per_node")


def _ulysses_ranks(v: Values, role: str) -> int:
    """The Ulysses ranks ``role``'s FSDP workers split a sequence over: each role reads its own
    ulysses_sequence_parallel_size (0.6.0 - 0.7.0 fsdp_workers.py: ActorRolloutRefWorker reads
    actor.ulysses_sequence_parallel_size, CriticWorker critic.ulysses_sequence_parallel_size, whose
    dp_critic.yaml default is 1, not the actor's)."""
    section = "critic" if role == "critic" else f"{A}.actor"
    return v.whole(f"{section}.ulysses_sequence_parallel_size", 1)


def _data_parallel_ranks(v: Values, role: str = "actor") -> int:
    """The ranks verl divides ``role``'s global micro-batch by: the trainer's world over its Ulysses
    ranks (fsdp) or over tp x pp x cp (megatron's data-parallel world), each role's own."""
    if _strategy(v, role) == "megatron":
        m = "critic.megatron" if role == "critic" else f"{A}.actor.megatron"
        split = (v.whole(f"{m}.tensor_model_parallel_size", 1) * v.whole(f"{m}.pipeline_model_parallel_size", 1)
                 * v.whole(f"{m}.context_parallel_size", 1))
    else:
        split = _ulysses_ranks(v, role)
    return max(1, _trainer_world(v) // split)


def _log_prob_micro_batches(v: Values, s: dict[str, Any], layout: dict[str, Any],
                            decided: dict[str, tuple[Status, str]], per_gpu: int) -> None:
    """The log-prob passes' micro-batches beside sample-count training ones: a token budget when
    rollout.log_prob_use_dynamic_bsz is true (verl reads it on its own; its budget defaults to the
    actor's ppo_max_token_len_per_gpu), else log_prob_micro_batch_size_per_gpu samples."""
    r = f"{A}.rollout"
    if v.flag(f"{r}.log_prob_use_dynamic_bsz"):
        budget = (f"{r}.log_prob_max_token_len_per_gpu" if v.given(f"{r}.log_prob_max_token_len_per_gpu")
                  else f"{A}.actor.ppo_max_token_len_per_gpu")
        layout["logprob_max_tokens_per_micro_batch"] = v.count(budget) * per_gpu
        for key in (f"{r}.log_prob_micro_batch_size_per_gpu", f"{r}.log_prob_micro_batch_size"):
            if v.given(key):
                decided[key] = ("ignored", "log_prob_use_dynamic_bsz: the log-prob passes take a token budget")
        return
    if v.given(f"{r}.log_prob_max_token_len_per_gpu"):
        decided[f"{r}.log_prob_max_token_len_per_gpu"] = ("ignored", "used only with log_prob_use_dynamic_bsz: true")
    _micro_batch_given(v, r, "log_prob_micro_batch_size", "log_prob_use_dynamic_bsz")
    if (forward := _micro_batch_per_gpu(v, r, "log_prob_micro_batch_size", decided)) is not None:
        s["forward_micro_batch"] = forward


_REF_BATCHING = ("log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size", "log_prob_use_dynamic_bsz",
                 "log_prob_max_token_len_per_gpu")


def _forward_batching(v: Values, role: str) -> tuple[bool, int | None]:
    """(token budget or not, its tokens or the samples a micro-batch) of a log-prob pass as verl reads
    `role`'s keys (rollout: the old log-probs; ref: the reference): log_prob_use_dynamic_bsz and
    log_prob_max_token_len_per_gpu default to the actor's use_dynamic_bsz and ppo_max_token_len_per_gpu
    (trainer/config/rollout/rollout.yaml and ref/ref.yaml, 0.6.0)."""
    key = f"{A}.{role}.log_prob_use_dynamic_bsz"
    dynamic = v.flag(key) if v.given(key) else v.flag(f"{A}.actor.use_dynamic_bsz")
    if dynamic:
        budget = f"{A}.{role}.log_prob_max_token_len_per_gpu"
        return True, v.count(budget if v.given(budget) else f"{A}.actor.ppo_max_token_len_per_gpu")
    return False, _micro_batch_per_gpu(v, f"{A}.{role}", "log_prob_micro_batch_size")


# The critic's keys that rlsim takes from the actor's (its layout and epochs; its micro-batching is its
# own, CRITIC_BATCHING): the critic key -> the actor's counterpart
CRITIC_AS_ACTOR = {
    "critic.strategy": f"{A}.actor.strategy",
    "critic.ppo_mini_batch_size": f"{A}.actor.ppo_mini_batch_size",
    "critic.ppo_epochs": f"{A}.actor.ppo_epochs",
    "critic.ulysses_sequence_parallel_size": f"{A}.actor.ulysses_sequence_parallel_size",
    "critic.model.enable_gradient_checkpointing": f"{A}.model.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": f"{A}.model.use_remove_padding",
}
# The critic's own micro-batching keys -> workload.critic_batching's fields
CRITIC_BATCHING = {"critic.ppo_micro_batch_size_per_gpu": "micro_batch",
                   "critic.ppo_max_token_len_per_gpu": "max_tokens_per_micro_batch",
                   "critic.forward_micro_batch_size_per_gpu": "forward_micro_batch",
                   "critic.forward_max_token_len_per_gpu": "forward_max_tokens_per_micro_batch"}
CRITIC_TOKEN_BUDGET_KEYS = ("critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu")
CRITIC_GLOBAL_MICRO_BATCH_KEYS = ("critic.ppo_micro_batch_size", "critic.forward_micro_batch_size")
CRITIC_BATCH_SIZE_KEYS = ("critic.ppo_micro_batch_size_per_gpu", "critic.forward_micro_batch_size_per_gpu",
                          *CRITIC_GLOBAL_MICRO_BATCH_KEYS)
# verl's megatron CriticWorker computes the values in micro-batches of ppo_micro_batch_size_per_gpu
# (0.6.1 / 0.7.0 megatron_workers.py compute_values: data.meta_info["micro_batch_size"] =
# self.config.ppo_micro_batch_size_per_gpu); its forward_micro_batch_size keys are not read there
MEGATRON_CRITIC_FORWARD_KEYS = ("critic.forward_micro_batch_size_per_gpu", "critic.forward_micro_batch_size")
MEGATRON_CRITIC_FORWARD = ("the megatron critic computes its values in micro-batches of ppo_micro_batch_size_per_gpu "
                           "(megatron_workers.py compute_values): not read")
# verl 0.6.0 trainer/config/critic/critic.yaml: "Max tokens per GPU in one PPO batch (doubled for critic)"
VERL_CRITIC_MAX_TOKEN_LEN = 32768


def _critic_as_actor(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """rlsim's critic trains with the actor's layout and epochs: each such critic key given is mapped
    where it reads as the actor's counterpart, unsupported where it differs. Its micro-batching is its
    own (_critic_batching)."""
    for key, actor_key in CRITIC_AS_ACTOR.items():
        if not v.given(key):
            continue
        if v(key) == v(actor_key):
            decided[key] = ("mapped", f"the critic trains as the actor ({actor_key}), which it equals here")
        else:
            decided[key] = ("unsupported", f"differs from {actor_key}: rlsim's critic takes the actor's layout, "
                                           "micro-batching mode and epochs")
    _critic_batching(v, w, decided)


def _critic_batching(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """workload.critic_batching from verl's critic keys, with verl's critic defaults (critic.yaml /
    dp_critic.yaml 0.6.0: ppo_max_token_len_per_gpu 32768, "doubled for critic"; the value pass's
    budget and micro-batch default to the update's), in the actor's mode (a critic use_dynamic_bsz
    that differs is unsupported: the actor's micro-batching then runs)."""
    actor_dynamic = v.flag(f"{A}.actor.use_dynamic_bsz")
    dynamic = flag(v.flat.get("critic.use_dynamic_bsz", actor_dynamic), "critic.use_dynamic_bsz", v.result.source)
    given = [key for key in ("critic.use_dynamic_bsz", *CRITIC_BATCHING) if v.given(key)] + [
        key for key in CRITIC_GLOBAL_MICRO_BATCH_KEYS if v(key) is not None]
    if not dynamic:   # CriticConfig.__post_init__ (workers/config/critic.py) asks for a size
        _micro_batch_given(v, "critic", "ppo_micro_batch_size", "use_dynamic_bsz")
    if dynamic != actor_dynamic:
        decided.update({key: ("unsupported", "a critic use_dynamic_bsz unlike the actor's: rlsim's critic batches in "
                                             "the actor's mode (the actor's micro-batching runs)") for key in given})
        return
    layout = w["train_layout"]
    per_gpu = layout.get("cp", 1)   # verl's budget x the Ulysses ranks or Megatron's context-parallel ones
    if dynamic:
        budget = v.whole("critic.ppo_max_token_len_per_gpu") or VERL_CRITIC_MAX_TOKEN_LEN
        forward = v.whole("critic.forward_max_token_len_per_gpu") or budget
        batching = {"max_tokens_per_micro_batch": budget * per_gpu, "forward_max_tokens_per_micro_batch": forward * per_gpu}
        unread = CRITIC_BATCH_SIZE_KEYS
    else:
        micro = _micro_batch_per_gpu(v, "critic", "ppo_micro_batch_size", decided)
        unread = CRITIC_TOKEN_BUDGET_KEYS
        if _strategy(v, "critic") == "megatron":   # MEGATRON_CRITIC_FORWARD: the value pass takes the update's
            forward = micro
            unread = (*unread, *MEGATRON_CRITIC_FORWARD_KEYS)
        else:
            # verl divides the global forward_micro_batch_size with the global ppo_micro_batch_size
            # (fsdp_workers.py CriticWorker, whose forward_micro_batch_size defaults to it: dp_critic.yaml)
            forward = (_global_micro_batch_share(v, "critic.forward_micro_batch_size", decided)
                       if v("critic.ppo_micro_batch_size") is not None
                       and v("critic.forward_micro_batch_size") is not None
                       else v.whole("critic.forward_micro_batch_size_per_gpu")) or micro
        batching = {k: n for k, n in (("micro_batch", micro), ("forward_micro_batch", forward)) if n is not None}
    for key in given:
        if key in MEGATRON_CRITIC_FORWARD_KEYS and key in unread:
            decided[key] = ("ignored", MEGATRON_CRITIC_FORWARD)
        elif key in unread:
            decided[key] = ("ignored", f"critic.use_dynamic_bsz {str(dynamic).lower()}: not read")
        elif key in CRITIC_BATCHING:
            decided[key] = ("mapped", f"workload.critic_batching.{CRITIC_BATCHING[key]}")
        elif key in CRITIC_GLOBAL_MICRO_BATCH_KEYS:   # mapped with its per-GPU share (_global_micro_batch_share)
            continue
        else:
            decided[key] = ("mapped", "the critic batches in the actor's mode, which it equals here")
    if batching:
        w["critic_batching"] = batching


def _reference_micro_batches(v: Values, reference: bool, decided: dict[str, tuple[Status, str]]) -> None:
    """The reference forward's micro-batching (ref.log_prob_*, its own keys in verl) is the old
    log-prob pass's in rlsim (schedule.forward_micro_batch, train_layout.logprob_max_tokens_per_micro_batch):
    mapped where the two read the same, unsupported where they differ; ignored without a reference."""
    given = [f"{A}.ref.{k}" for k in _REF_BATCHING if v.given(f"{A}.ref.{k}")]
    if reference and not v.flag(f"{A}.actor.use_dynamic_bsz"):   # main_ppo's validate_config asks the reference
        _micro_batch_given(v, f"{A}.ref", "log_prob_micro_batch_size", f"{A}.actor.use_dynamic_bsz")
    if not reference:
        why = "no reference forward (use_kl_loss and use_kl_in_reward are off)"
        decided.update({key: ("ignored", why) for key in given})
        return
    ref, old = _forward_batching(v, "ref"), _forward_batching(v, "rollout")
    unread = ([f"{A}.ref.log_prob_micro_batch_size_per_gpu", f"{A}.ref.log_prob_micro_batch_size"] if ref[0]
              else [f"{A}.ref.log_prob_max_token_len_per_gpu"])
    for key in (key for key in unread if key in given):   # the other mode's key: verl does not read it
        given.remove(key)
        decided[key] = ("ignored", f"not read with the reference's dynamic batching {'on' if ref[0] else 'off'}")
    if ref == old:
        why = ("the reference forward takes the old log-prob pass's micro-batching (rollout.log_prob_*), which "
               "these equal here")
        decided.update({key: ("mapped", why) for key in given})
        return
    why = ("differs from the old log-prob pass's (rollout.log_prob_*): rlsim's forward passes share one "
           "micro-batching (schedule.forward_micro_batch, train_layout.logprob_max_tokens_per_micro_batch)")
    decided.update({key: ("unsupported", why) for key in given})
    if not given:   # the reference's own defaults differ from the old log-prob pass's given keys: said, not silent
        what = f"{ref[1]:,} tokens" if ref[0] else f"micro-batches of {ref[1]} samples"
        v.result.notes.append(f"the reference forward reads its own micro-batching in verl ({what}, its defaults: "
                              "the actor's), which differs from the old log-prob pass's; rlsim prices both forward "
                              "passes at the old log-prob pass's (give actor_rollout_ref.ref.log_prob_* equal to "
                              "rollout.log_prob_* to match)")


def _check_micro_divides_mini(v: Values, layout: Mapping[str, Any]) -> None:
    """verl's workers split the mini-batch (ppo_mini_batch_size x rollout.n samples) over the
    data-parallel ranks and assert that the micro-batch divides each rank's share (fsdp_workers.py /
    megatron_workers.py: ppo_mini_batch_size % ppo_micro_batch_size_per_gpu == 0; cited from memory
    of its public code): a config verl refuses is refused here too."""
    key = next((k for k in (f"{A}.actor.ppo_micro_batch_size_per_gpu", f"{A}.actor.ppo_micro_batch_size")
                if v(k) is not None), None)
    if key is None:
        return
    samples = v.count(f"{A}.actor.ppo_mini_batch_size") * v.count(f"{A}.rollout.n")
    devices = v.count("trainer.nnodes") * v.count("trainer.n_gpus_per_node")
    model_parallel = layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1)
    dp = devices // model_parallel if model_parallel and devices % model_parallel == 0 else 0
    micro = layout.get("micro_batch", 1)
    share = samples // dp if dp else 0   # verl floors it: ppo_mini_batch_size //= the data-parallel size
    if share and share % micro:
        fit = [d for d in range(1, share + 1) if share % d == 0]
        raise RlsimError(f"{key.rsplit('.', 1)[1]} {v(key)} ({micro} samples a GPU) does not divide the {share} samples of a "
                         f"mini-batch per data-parallel rank (ppo_mini_batch_size x rollout.n = {samples} // {dp}): "
                         "verl's workers assert it", source=v.result.source, field=key,
                         fix=f"give a divisor of {share} (e.g. {', '.join(map(str, fit[-3:]))})")


def _v1_rollout_gpus(v: Values) -> int:
    """separate_async's standalone pool: actor_rollout_ref.rollout.nnodes x n_gpus_per_node (verl
    asserts both > 0)."""
    src, pool = v.result.source, f"{A}.rollout"
    if not v.given(f"{pool}.nnodes"):
        raise RlsimError("separate_async needs its rollout pool's size", source=src, field=f"{pool}.nnodes",
                         fix=f"pass {pool}.nnodes=N {pool}.n_gpus_per_node=G after the config path")
    return positive_int(v(f"{pool}.nnodes"), f"{pool}.nnodes", src) * \
        positive_int(v.flat.get(f"{pool}.n_gpus_per_node", 8), f"{pool}.n_gpus_per_node", src)


def _v1_schedule(v: Values, recipe: str, w: dict[str, Any], s: dict[str, Any],
                 decided: dict[str, tuple[Status, str]]) -> None:
    """verl 0.9's v1 trainer keys: the async modes' warm-up, local updates and replay buffer; the keys
    of a mode not run, and the buffer's in the sync mode (a no-op there: replay_buffer.py), ignored."""
    mode = {"colocate-async": "colocate_async", "separate-async": "separate_async"}.get(recipe)
    for other in ("colocate_async", "separate_async"):
        for key in v.flat:
            if key.startswith(f"trainer.v1.{other}.") and other != mode:
                decided[key] = ("ignored", f"used with trainer.v1.trainer_mode {other}")
    nnodes = f"{A}.rollout.nnodes"
    if mode != "separate_async" and v.given(nnodes):
        decided[nnodes] = ("ignored", "0: no pool of its own") if not v(nnodes) else (
            "unsupported", "a standalone rollout pool is trainer.v1's separate_async mode (this config runs "
                           f"{KIND_OF_RECIPE[recipe]}; the recipes' pool is the top-level rollout.*)")
    if mode != "separate_async" and v.given(f"{A}.rollout.n_gpus_per_node"):
        decided[f"{A}.rollout.n_gpus_per_node"] = ("ignored", "used with actor_rollout_ref.rollout.nnodes")
    sampler = ("max_off_policy_threshold", "max_off_policy_strategy")
    inflight = "algorithm.filter_groups.max_inflight_gen_batches"
    if recipe == "sync" and v.flag("algorithm.filter_groups.enable") and v.given(inflight):
        s["max_inflight_gen_batches"] = v.count(inflight)
    if mode is None:
        decided.update({f"trainer.v1.sampler.{key}": ("ignored", "the sync mode samples on-policy (a no-op there)")
                        for key in sampler if v.given(f"trainer.v1.sampler.{key}")})
        return
    knobs = [(f"trainer.v1.{mode}.num_warmup_batches", "num_warmup_batches")]
    if mode == "separate_async":
        knobs.append(("trainer.v1.separate_async.parameter_sync_step", "parameter_sync_step"))
        _hybrid_rollout(v, w, s, decided)
    knobs += [(f"trainer.v1.sampler.{key}", key) for key in sampler]
    for key, knob in knobs:
        if v.given(key):
            s[knob] = v(key)
        else:
            v.result.notes.append(f"{key} not given: verl 0.9.1's default, rlsim's (schedule.{knob})")
    if s.get("max_off_policy_threshold", 8) is None:
        s.pop("max_off_policy_strategy", None)
        if v.given("trainer.v1.sampler.max_off_policy_strategy"):
            decided["trainer.v1.sampler.max_off_policy_strategy"] = ("ignored", "max_off_policy_threshold null: "
                                                                      "no version control")


def _hybrid_rollout(v: Values, w: dict[str, Any], s: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """separate_async's hybrid replicas lent to generation (hybrid_rollout.enable_switch): verl ignores
    it without the hybrid engine's replicas (hybrid_engine false: it warns)."""
    section = "trainer.v1.separate_async.hybrid_rollout"
    given = [key for key in HYBRID_ROLLOUT_KEYS if v.given(f"{section}.{key}")]
    why = None
    if not v.flag(f"{section}.enable_switch"):
        why = "used only with hybrid_rollout.enable_switch"
    elif v.given(f"{A}.hybrid_engine") and not v.flag(f"{A}.hybrid_engine"):
        why = "hybrid_engine false: no replicas on the trainer's devices to lend (verl ignores enable_switch)"
        decided[f"{section}.enable_switch"] = ("ignored", why)
    if why is not None:
        decided.update({f"{section}.{key}": ("ignored", why) for key in given})
        return
    s["hybrid_rollout"] = {key: v(f"{section}.{key}") for key in given}
    decided.pop(f"{A}.rollout.free_cache_engine", None)   # the lent replicas do sleep between their spans
    _hybrid_engine_switch(v, w, s, decided)


def _dynamic_resources(v: Values, w: dict[str, Any], s: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """fully_async's dynamic resource controller (verl 0.9.1 use_dynamic_resource_scheduling): the
    trainer's replicas lent to the Rollouter, a verl 0.9 config (its Rollouter: request_routing)."""
    given = [key for key in DYNAMIC_SCHEDULE_KEYS if v.given(f"async_training.dynamic_schedule_{key}")]
    if not v.flag("async_training.use_dynamic_resource_scheduling"):
        decided.update({f"async_training.dynamic_schedule_{key}": ("ignored", "used with "
                        "use_dynamic_resource_scheduling") for key in given})
        return
    if v.given(f"{A}.rollout.standalone_gpu_memory_utilization") and v(f"{A}.rollout.standalone_gpu_memory_utilization") is not None:
        v.result.notes.append("the trainer's lent replicas take the standalone servers' memory share here "
                              "(standalone_gpu_memory_utilization); verl gives them gpu_memory_utilization")
    s["dynamic_resources"] = {DYNAMIC_SCHEDULE_KEYS[key]: v(f"async_training.dynamic_schedule_{key}") for key in given}
    s["request_routing"] = True
    decided.pop(f"{A}.rollout.free_cache_engine", None)   # the lent replicas do sleep between their spans
    _hybrid_engine_switch(v, w, s, decided)


def _rollout_gpus(v: Values) -> int:
    src = v.result.source
    if v.flag("async_training.use_dynamic_resource_scheduling") and v.flat.get("rollout.nnodes") == 0:
        raise RlsimError("rollout.nnodes 0 (no standalone rollout servers: verl's only_hybrid, every replica on the "
                         "trainer's GPUs) is not modelled: rlsim's verl-fully-async needs a rollout pool", source=src,
                         field="rollout.nnodes", fix="give the rollout pool its GPUs (rollout.nnodes=N "
                         "rollout.n_gpus_per_node=G), or import the run as verl's colocated trainer")
    if not (v.given("rollout.nnodes") or v.given("rollout.n_gpus_per_node")):
        # say what chose split pools: an async_training.* key or hybrid_engine false (a trial read it as
        # a missing key of the main_ppo config it had)
        raise RlsimError(f"split pools need the rollout pool's size; the schedule is {v.result.schedule_rule}",
                         source=src, field="rollout.n_gpus_per_node",
                         fix="pass rollout.nnodes=N rollout.n_gpus_per_node=G after the config path, or remove what "
                             "chose the split-pool recipe")
    return (positive_int(v.flat.get("rollout.nnodes", 1), "rollout.nnodes", src)
            * positive_int(v.flat.get("rollout.n_gpus_per_node", 8), "rollout.n_gpus_per_node", src))


def _topology(v: Values, recipe: str, sched: dict[str, Any], spec: str | None, user_sizes: bool,
              served: list[tuple[str, str, int]]) -> dict[str, Any]:
    """The topology holding the trainer's pool, a split rollout pool and the ``served`` models'
    devices (name, verl section, devices: a reward model's and a distillation teacher's, which rlsim
    sets apart at the end of the job's ranks)."""
    src = v.result.source
    per_node = v.count("trainer.n_gpus_per_node")
    train = v.count("trainer.nnodes") * per_node
    where = "trainer.nnodes x n_gpus_per_node"
    if recipe in SPLIT_RECIPES:
        pool = f"{A}.rollout" if recipe == "separate-async" else "rollout"
        where = f"{train} training ({where}) + {sched['rollout_devices']} rollout ({pool}.nnodes x n_gpus_per_node)"
        train += sched["rollout_devices"]
        if positive_int(v.flat.get(f"{pool}.n_gpus_per_node", 8), f"{pool}.n_gpus_per_node", src) != per_node:
            per_node = None   # pools of different node widths: sized in the preset's whole nodes
    for name, section, devices in served:
        if devices:
            where = f"{where} + {devices} {name} ({section}.nnodes x n_gpus_per_node)"
            train += devices
            if v.count(f"{section}.n_gpus_per_node") != per_node:
                per_node = None
    topology, note = size_topology(spec, train, where, src, user_sizes, per_node)
    v.result.notes.append(note)
    return topology
