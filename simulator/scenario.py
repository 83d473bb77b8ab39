"""The scenario: topology + workload + schedule + run length, validated once and frozen.

Input is a YAML file, a mapping or nothing (the built-in default = the seed scenario of
../shared/reference/seeds.md: GRPO on Pangu Ultra MoE on one CloudMatrix384 supernode).
Workloads are presets (``workloads/*.yaml``) or mappings; a mapping with ``preset:`` starts from
that preset and overrides its keys. Units are parsed here (the YAML boundary); inside, SI only.
Every modelling constant of the rl layer is a field of one of the models below, with its source.
"""
# No `from __future__ import annotations` in this module: pydantic would compile each field's string
# annotation back into an object while the models build at import (start-up, benchmarks/bench_startup.py);
# a forward reference is quoted instead.

import copy
import difflib
import functools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticKnownError

from . import presets
from .engine_software import ENGINE_SOFTWARE, device_dependent_fields, given_under_engine
from .errors import CrossFieldError, ReadPastError, RlsimError, one_typo_from, validation_error
from .overrides import apply_overrides, parse_assignment, string_items
from .params import (
    DEFAULT_TRAIN_SOFTWARE,
    ENTROPY_KERNEL_BYTES,
    ENTROPY_KERNEL_MEMORY_BYTES,
    ENTROPY_KERNEL_UPDATE_MEMORY_BYTES,
    FALLBACK_COLLECTIVE_KEYS,
    MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE,
    MATH_VERIFY_CAPPED_CPU_S_PER_TOKEN,
    MATH_VERIFY_CPU_S_PER_SAMPLE,
    MATH_VERIFY_CPU_S_PER_TOKEN,
    PAGEABLE_OFFLOAD_BPS,
    PAGEABLE_ONLOAD_BPS,
    RESERVE_KEYS,
    TRAIN_SOFTWARE,
    InferenceParams,
    TrainParams,
    inapplicable_given_key,
    without_inapplicable_stack_values,
)
from .paths import folder_of, with_paths_from
from .strict_model import StrictModel, passes_value_on
from .units import parse_bandwidth, parse_seconds, plain_values

# The built-in kinds; SCHEDULE_CLASSES (below) also holds kinds added by register_schedule_config.
SCHEDULE_KINDS = BUILTIN_SCHEDULE_KINDS = ("colocated", "disaggregated", "one-step-off", "stalesync", "async",
                                           "verl-fully-async", "nemo-rl-async", "areal", "verl-colocate-async",
                                           "verl-separate-async", "verl-sync")

DEFAULT_SCENARIO: dict[str, Any] = {
    "topology": {"preset": "cloudmatrix384", "supernodes": 1},
    "workload": "grpo-pangu-ultra-moe",
    "schedule": {"kind": "stalesync"},
    "iterations": 4,
    "seed": 0,
}


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DynamicSampling(_Strict):
    """DAPO dynamic sampling: generate ``gen_prompts`` per round, keep groups with a reward signal."""
    gen_prompts: int | None = Field(None, gt=0)        # default: prompts_per_step / keep_fraction
    # Share of groups whose n samples do not all get the same reward. DAPO paper (arXiv 2503.14476)
    # reports the share of all-correct/all-wrong groups growing during training; 0.5 is a mid-run guess.
    keep_fraction: float = Field(0.5, gt=0, le=1)
    # Generation batches a step may take before the framework gives up: a step whose first
    # max_gen_batches batches leave fewer than prompts_per_step groups with a signal stops the run
    # (verl recipe/dapo: algorithm.filter_groups.max_num_gen_batches, 0 = no cap, raises "Generated
    # too many"; NeMo RL grpo.dynamic_sampling_max_gen_batches raises "reached the maximum allowed
    # number of batches"; frameworks.md "regenerate up to max_num_gen_batches"). None: no cap.
    max_gen_batches: int | None = Field(None, ge=1)


class LoraSpec(_Strict):
    """LoRA training of the actor (arXiv 2106.09685; verl actor_rollout_ref.model.lora_rank /
    target_modules): its base weights frozen (no weight gradient, gradient sync or optimizer state,
    the embedding and head included), rank-`rank` adapters beside the `targets` matmuls trained
    (llm/layer_costs.py). The reference forward runs the base model (verl's ref_in_actor: the actor
    with its adapters disabled)."""
    rank: int = Field(gt=0)
    # The layer matmuls adapted, by llm/layer_costs.py's names (qkv, o, mlp_up, mlp_down, router,
    # expert_up, expert_down, shared_up, shared_down, q_down, q_up, kv_down, kv_up, q, mamba_in,
    # mamba_out: those the model has) or their Hugging Face modules (q_proj, k_proj, v_proj, o_proj,
    # gate_proj, up_proj, down_proj, ...: PEFT's target_modules), or "all-linear" (every one: PEFT's
    # all-linear, which leaves out the output head).
    targets: list[str] | Literal["all-linear"] = "all-linear"


class MultiTurnSpec(_Strict):
    """Multi-turn (agentic, tool-calling) rollouts (llm/multi_turn.py): each sample is up to
    ``max_turns`` assistant turns, each but the last ended by a tool or environment call of
    ``tool_latency_s`` whose answer (``observation_tokens``) the next turn reads. The response
    length law counts every token after the prompt, the observations included (verl's
    response_length and response mask), so training and rewards see the same sequences as before.
    The turn count, observations and latencies describe the user's task and tools: no default."""
    # Assistant turns at most: verl rollout.multi_turn.max_assistant_turns, SkyRL generator.max_turns,
    # NeMo RL grpo.max_rollout_turns, TRL max_tool_calling_iterations + 1.
    max_turns: int | None = Field(None, gt=0)      # (None only until checked: the three are required)
    # Their mean: 1 + a geometric number of further turns, cut at max_turns. None: every sample
    # takes max_turns.
    mean_turns: float | None = Field(None, ge=1)
    # A tool answer's tokens (mean; verl caps them at multi_turn.max_tool_response_length).
    observation_tokens: float | None = Field(None, ge=0)
    # A tool call's seconds on the host (mean): the sample is out of the engine meanwhile.
    tool_latency_s: float | None = Field(None, ge=0)
    # Lognormal shapes of the two (0: every call the same; no public measurement to default to:
    # take them from the task's tool logs).
    observation_sigma: float = Field(0.0, ge=0)
    tool_latency_sigma: float = Field(0.0, ge=0)
    # How turns meet: false, each sample sends its next turn when its own tool answers (verl's agent
    # loop, SkyRL's generator, NeMo RL with async_engine: run_async_multi_turn_rollout); true, the
    # batch in lock-step: every sample's turn k is generated, then the tools all run, then turn k + 1
    # (NeMo RL's run_multi_turn_rollout: generate the batch, step the environments, repeat).
    lockstep: bool = False
    # A turn's assistant tokens at most (SkyRL generator.sampling_params.max_generate_length, NeMo RL
    # generation.max_new_tokens: each engine call's cap). None: none of its own (verl's agent loop
    # gives each turn what is left of response_length). A response needs ceil(tokens / cap) turns.
    max_turn_tokens: int | None = Field(None, gt=0)
    # Whether a sample's context, cached while it is out on its tool (inference.enable_prefix_caching),
    # can be evicted: true, the engine keeps a finished turn's pages as free-but-cached and the other
    # sequences' pages evict them least recently freed first, its tail first, so the next turn
    # re-prefills what went (vLLM v1 block_pool.py's free block queue; SGLang's radix cache LRU:
    # RolloutEngine.keep_freed_contexts); false, the context always stays cached (no eviction).
    cache_eviction: bool = True

    @model_validator(mode="after")
    def _the_task_is_given(self) -> "MultiTurnSpec":
        """The tools' seconds and answer tokens describe the user's task (no framework config holds
        them): missing, the error says what to give (after the fields' own checks, which name theirs)."""
        meaning = {"max_turns": "the turn cap", "observation_tokens": "the tokens a tool's answer appends (mean)",
                   "tool_latency_s": "a turn's tool calls' seconds (mean)"}
        missing = [key for key in meaning if getattr(self, key) is None]
        if missing:   # each named with its own meaning (the turn cap was listed when only the tools were missing)
            example = {"max_turns": "4", "observation_tokens": "200", "tool_latency_s": "2"}
            raise RlsimError(f"{', '.join(missing)} not given: {'; '.join(meaning[key] for key in missing)}, which "
                             "describe your task and tools",
                             fix=f"give {', '.join(missing)}, e.g. "
                                 + " ".join(f"--set workload.multi_turn.{key}={example[key]}" for key in missing))
        return self

    @model_validator(mode="after")
    def _mean_within_the_cap(self) -> "MultiTurnSpec":
        if self.mean_turns is not None and self.mean_turns > self.max_turns:
            raise RlsimError(f"mean_turns {self.mean_turns:g} is above max_turns {self.max_turns}",
                             fix="lower mean_turns, or raise max_turns")
        return self


# What the teacher's prompt-logprob pass moves per vocabulary logit on every device of an instance
# (vLLM V1, cited from memory of the public code: gpu_model_runner._get_prompt_logprobs_dict computes
# the full-vocabulary logits of every prompt position, all-gathered over TP; Sampler.compute_logprobs
# takes their fp32 log_softmax and gather_logprobs the sampled token's and its rank): the bf16 logits
# written and read (2 + 2), the fp32 log-probabilities written (4) and read by the rank count (4).
PROMPT_LOGPROB_BYTES_PER_LOGIT = 12.0
# ... and with a top-k asked (topk > 0), gather_logprobs' torch.topk reads them once more (4).
TOPK_BYTES_PER_LOGIT = 4.0
# What the teacher hands back per returned log-probability: an int32 token id and an fp32 value
# (verl's teacher_ids / teacher_logprobs tensors), carried with the sample to the trainer (DistQueue).
TEACHER_BYTES_PER_LOGPROB = 8.0


# vLLM sleep mode's own time per RL step (a sleep after the engine's work and a wake_up before the
# next), beyond the weight bytes the host link is charged for: measured 11.3 s per step in a colocated
# RL loop, the same at 16 and at 256 samples per rollout (hardware.md "Colocated switch costs seen in
# the wild", vllm-project/vime issue 442). schedule.switch.sleep_wake_s (the rollout engine's) and
# reward.served.sleep_wake_s (a reward model woken on the trainer's devices).
VLLM_SLEEP_WAKE_S = 11.3


class ServedSpec(_Strict):
    """A model served by inference engines on devices of its own, set apart at the end of the job's
    ranks (a verl resource pool of nnodes x n_gpus_per_node): each sample is sent to an engine as one
    request of its whole sequence, which the engine prefills (rl/schedules/served.py, llm/served.py).
    A reward model may instead be served on the trainer's devices (devices None: verl's colocated
    reward model, woken after generation to score the batch and put back to sleep)."""
    devices: int | None = Field(None, gt=0)             # the pool: whole instances of `layout`
    # The engine's layout (workload.rollout_layout's keys, instances excepted). {}: tp 1.
    layout: dict[str, Any] = Field(default_factory=dict)
    # Its engine constants (workload.inference's keys) over the rollout engine's: verl's teacher and
    # reward-model rollout configs have their own (enforce_eager, max_num_batched_tokens 8192, chunked
    # prefill; its importer gives them). {}: the rollout engine's.
    inference: dict[str, Any] = Field(default_factory=dict)
    # Each engine answers one request at a time: its client posts a sample and waits for the answer
    # before the next (AReaL's RemoteInfEngine.compute_logp, a blocking request per trajectory on each
    # of the controller's workers), so an engine batches nothing. False: as many in flight as the
    # engine batches (verl's reward and teacher loops post every sample as it comes).
    one_at_a_time: bool = False
    # On the trainer's devices (devices None): the engines' sleep after scoring and wake_up before it,
    # beyond the weight shard's copies to host and back (vLLM sleep level 1: a reward model's weights
    # are never re-synced, so they are kept on the host; experimental/reward_loop compute_rm_score:
    # wake_up, score, sleep). Default: vLLM's measured per-step figure.
    sleep_wake_s: float = Field(VLLM_SLEEP_WAKE_S, ge=0)

    @field_validator("layout", mode="after")
    @classmethod
    def _no_instances(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The pool's size is `devices`: an instance count of its own would say it twice."""
        if "instances" in value:
            raise RlsimError("instances does not apply: the pool is `devices` devices of whole instances (tp x ep x pp "
                             "each)",
                             fix="remove layout.instances, or set devices")
        return value

    @model_validator(mode="after")
    def _sleeps_on_the_trainer_only(self) -> "ServedSpec":
        """Engines on devices of their own stay up: their sleep and wake-up apply on the trainer's."""
        if self.devices is not None and "sleep_wake_s" in self.model_fields_set:
            raise RlsimError("sleep_wake_s applies to engines woken on the trainer's devices (devices unset); "
                             "engines on devices of their own stay up",
                             fix="remove sleep_wake_s, or devices")
        return self


class DistillationSpec(ServedSpec):
    """On-policy distillation from a teacher served by inference engines of its own (verl 0.9
    `distillation`, experimental/teacher_loop: the agent loop sends each finished sample, after its
    reward, to a teacher engine as a prompt of its whole sequence with max_tokens 1 and
    prompt_logprobs, and the sample is ready for training when the teacher answers). The teacher's
    devices are set apart from the job's, at the end of its ranks (verl's distillation resource pool,
    distillation.nnodes x n_gpus_per_node). AReaL 1.0's teacher on inference servers scores the
    trainer's batch instead, one request at a time on each server (handover step, one_at_a_time)."""
    teacher: str                                        # model preset (or HF config.json path)
    devices: int = Field(gt=0)                          # the teacher's pool: always devices of its own
    # When the teacher is handed the samples: "sample", each finished sample after its reward, in the
    # rollout (verl's teacher loop); "step", the trainer's batch after its reference pass, the trainer
    # waiting for the answers (AReaL's rl_trainer: teacher.compute_logp(rollout_batch) after ref_logp).
    handover: Literal["sample", "step"] = "sample"
    # Log-probabilities returned per token: the top-k of verl's forward_kl_topk loss
    # (distillation_loss.topk); 0: the sampled token's only (the estimator losses k1 / k3, verl's default).
    topk: int = Field(0, ge=0)
    prompt_logprob_bytes_per_logit: float = Field(PROMPT_LOGPROB_BYTES_PER_LOGIT, ge=0)
    topk_bytes_per_logit: float = Field(TOPK_BYTES_PER_LOGIT, ge=0)
    bytes_per_logprob: float = Field(TEACHER_BYTES_PER_LOGPROB, ge=0)

    @property
    def logprob_pass_bytes_per_logit(self) -> float:
        """Bytes the log-probability pass moves per logit: the top-k's read only when one is asked."""
        return self.prompt_logprob_bytes_per_logit + (self.topk_bytes_per_logit if self.topk else 0.0)

    def payload_bytes(self, tokens: Any) -> Any:
        """What the teacher returns with samples of ``tokens`` tokens: max(topk, 1) log-probabilities a token."""
        return tokens * max(self.topk, 1) * self.bytes_per_logprob


class EntropySpec(_Strict):
    """The policy's entropy over the vocabulary, computed from the logits beside the log-probs in the
    passes named (verl: its old log-prob pass always, compute_log_prob(calculate_entropy=True); its
    update where actor.entropy_coeff != 0 or actor.calculate_entropy): memory-bound work on the
    (tokens, vocab / tp) logits of the last stage, llm/train_compute.py logits_times."""
    passes: list[Literal["old_logprob", "update"]] = Field(min_length=1)
    # The update's loss takes the entropy's gradient (an entropy bonus: verl entropy_coeff != 0, OpenRLHF
    # actor.entropy_coef != 0), so its backward pays the kernel's backward bytes; False: computed for
    # the metrics alone.
    in_loss: bool = False
    # How it is computed (params.ENTROPY_KERNEL_BYTES: the op sequences counted): eager (torch's ops
    # one by one), compiled (the same under torch.compile: one fused reduction), vocab-parallel (verl's
    # megatron workers' _VocabParallelEntropy), eager-fp32 (op by op on fp32 logits: OpenRLHF's),
    # eager-log-softmax (through log_softmax, op by op: SkyRL's), eager-chunked-fp32 (chunks cast up to
    # fp32, then op by op: verl's entropy_from_logits_with_chunking) or verl-fused-torch (inside verl's
    # fused log-prob kernel, whose loss count holds its forward: the gradient alone).
    kernel: Literal["eager", "compiled", "vocab-parallel", "eager-fp32", "eager-log-softmax",
                    "eager-chunked-fp32", "verl-fused-torch"] = "eager"
    # The update's backward recomputes the entropy's forward first (torch.utils.checkpoint: verl
    # actor.entropy_checkpointing), paying its forward bytes again; with in_loss only.
    recompute: bool = False
    # Bytes per logit forward, and backward in the update: None, the kernel's.
    forward_bytes_per_logit: float | None = Field(None, ge=0)
    backward_bytes_per_logit: float | None = Field(None, ge=0)
    # Bytes per logit the update holds beside the logits where its loss takes the entropy (autograd's
    # saved tensors, with in_loss only): None, the kernel's (params.ENTROPY_KERNEL_UPDATE_MEMORY_BYTES).
    update_memory_bytes_per_logit: float | None = Field(None, ge=0)
    # Bytes per logit of the log-probs' gradient where the update computes the entropy and the
    # log-probs' cross entropy cannot write it over the logits then (verl's packed path:
    # params.FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT, set by its importer); 0: written in place, or
    # counted by the stack's own logits bytes (memory.logits_bytes_per_elem). Held beside the logits at
    # the update's peak, with the entropy's own bytes; the update must compute the entropy.
    logprob_grad_bytes_per_logit: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _backward_in_the_update(self) -> "EntropySpec":
        if len(set(self.passes)) < len(self.passes):
            raise RlsimError(f"passes {self.passes} names a pass twice",
                             fix="give each once")
        if self.logprob_grad_bytes_per_logit and "update" not in self.passes:
            raise RlsimError("logprob_grad_bytes_per_logit applies where the update computes the entropy",
                             fix="remove it, or add update to passes")
        if self.in_loss and "update" not in self.passes:
            raise RlsimError("in_loss applies where the update computes the entropy",
                             fix="remove it, or add update to passes")
        if self.recompute and not self.in_loss:
            raise RlsimError("recompute applies where the update's loss takes the entropy's gradient (its backward "
                             "redoes the forward)",
                             fix="remove it, or set in_loss: true")
        for key in ("backward_bytes_per_logit", "update_memory_bytes_per_logit"):
            if getattr(self, key) is not None and not self.in_loss:
                raise RlsimError(f"{key} applies where the update's loss takes the entropy's gradient",
                                 fix="remove it, or set in_loss: true")
        return self

    def memory_bytes_per_logit(self, pass_name: str) -> float:
        """Bytes per logit the entropy holds beside the logits at ``pass_name``'s peak (old_logprob,
        update): autograd's saved tensors in an update whose loss takes it
        (ENTROPY_KERNEL_UPDATE_MEMORY_BYTES, or update_memory_bytes_per_logit), else the kernel's forward
        peak (ENTROPY_KERNEL_MEMORY_BYTES); in the update, plus the log-probs' gradient where the entropy
        keeps it from the logits (logprob_grad_bytes_per_logit); 0 in a pass that does not compute it."""
        if pass_name not in self.passes:
            return 0.0
        gradient = self.logprob_grad_bytes_per_logit if pass_name == "update" else 0.0
        if pass_name == "update" and self.in_loss:
            return gradient + (ENTROPY_KERNEL_UPDATE_MEMORY_BYTES[self.kernel] if self.update_memory_bytes_per_logit
                               is None else self.update_memory_bytes_per_logit)
        return gradient + ENTROPY_KERNEL_MEMORY_BYTES[self.kernel]

    def bytes_per_logit(self, pass_name: str) -> tuple[float, float]:
        """(forward, backward) bytes per logit the entropy adds to ``pass_name`` (old_logprob, update)."""
        if pass_name not in self.passes:
            return 0.0, 0.0
        forward, backward = ENTROPY_KERNEL_BYTES[self.kernel]
        forward = forward if self.forward_bytes_per_logit is None else self.forward_bytes_per_logit
        backward = backward if self.backward_bytes_per_logit is None else self.backward_bytes_per_logit
        if pass_name != "update" or not self.in_loss:
            return forward, 0.0
        return forward, backward + (forward if self.recompute else 0.0)


class CriticBatchingSpec(_Strict):
    """PPO's critic micro-batching where it differs from the actor's (verl's critic has its own
    ppo_micro_batch_size_per_gpu / ppo_max_token_len_per_gpu, default 32768: "doubled for critic", and
    forward_* for its value pass). None: the actor's (its train_layout's micro-batching, and the old
    log-prob pass's: schedule.forward_micro_batch, train_layout.logprob_max_tokens_per_micro_batch).
    The mode stays the actor's: a token budget beside one, a sample count beside the other."""
    micro_batch: int | None = Field(None, gt=0)
    max_tokens_per_micro_batch: int | None = Field(None, gt=0)
    forward_micro_batch: int | None = Field(None, gt=0)
    forward_max_tokens_per_micro_batch: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_mode(self) -> "CriticBatchingSpec":
        for count, budget in (("micro_batch", "max_tokens_per_micro_batch"),
                              ("forward_micro_batch", "forward_max_tokens_per_micro_batch")):
            if getattr(self, count) is not None and getattr(self, budget) is not None:
                raise RlsimError(f"{count} and {budget} both given: a token budget sets the micro-batches",
                                 fix="give one")
        return self


class CriticOffloadSpec(_Strict):
    """Where PPO's critic keeps its state between its own passes (verl
    critic.model.fsdp_config.param_offload / optimizer_offload: CriticWorker loads its parameters
    before compute_values and update_critic and its optimizer state before update_critic, and offloads
    them after, verl 0.6.0 workers/fsdp_workers.py). What stays on the devices sits beside the actor's
    training and, colocated, beside the rollout engine (rl/llm_costs.py critic_resident_bytes)."""
    params: bool = False
    optimizer: bool = False


class CriticOptimizerSpec(_Strict):
    """PPO's critic's optimizer where it is not the actor's (verl's critic.optim.optimizer /
    optimizer_impl, built apart from the actor's: verl 0.6.1 workers/fsdp_workers.py CriticWorker
    build_optimizer(critic_module.parameters(), config.optim)): its state's bytes a parameter and its
    step's HBM traffic a parameter, in place of the actor's train_params.memory.optimizer_bytes_per_param
    and train_params.comm.optimizer_traffic_bytes_per_param (rl/llm_costs.py critic_train_params).
    None: the actor's."""
    optimizer_bytes_per_param: float | None = Field(None, ge=0)
    optimizer_traffic_bytes_per_param: float | None = Field(None, ge=0)


# The rule verifier's CPU-time fields (rl/llm_costs.py LlmCosts.reward_cpu_s)
RULE_COST_KEYS = ("cpu_s_per_sample", "cpu_s_per_token", "capped_cpu_s_per_sample", "capped_cpu_s_per_token")


class RewardSpec(_Strict):
    kind: Literal["rule", "model"] = "rule"
    model: str | None = None                           # reward-model preset (kind: model); default = actor
    # Rule verifier's host CPU time per sample on one worker: cpu_s_per_sample + cpu_s_per_token x
    # response tokens for a response that ends with its answer; capped_cpu_s_per_sample +
    # capped_cpu_s_per_token x tokens for one the engine cut at its length cap (min of the response
    # law's max and workload.inference.max_model_len - prompt), where the answer extractor searches the
    # whole text. Defaults: Math-Verify as NeMo RL calls it, measured (params.MATH_VERIFY_*,
    # benchmarks/reward_cost.py); verl's importer gives its reward manager's (params.VERL_NAIVE_*).
    cpu_s_per_sample: float = Field(MATH_VERIFY_CPU_S_PER_SAMPLE, ge=0)
    cpu_s_per_token: float = Field(MATH_VERIFY_CPU_S_PER_TOKEN, ge=0)
    capped_cpu_s_per_sample: float = Field(MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE, ge=0)
    capped_cpu_s_per_token: float = Field(MATH_VERIFY_CAPPED_CPU_S_PER_TOKEN, ge=0)
    # Host CPU workers for rule rewards; default = 1 per device (CloudMatrix384: 192 Kunpeng CPUs
    # of many cores each for 384 NPUs, hardware.md), overridable.
    workers_per_device: float = Field(1.0, gt=0)
    # A fixed pool of rule-reward workers shared by the whole job, in place of workers_per_device:
    # NeMo RL's environment actors (env.<name>.num_workers: 8 in grpo_math_1B.yaml, 64 in the DAPO
    # recipes), which verify a whole batch once its generation is done. None: workers_per_device.
    workers: int | None = Field(None, ge=1)
    # What the workers are handed: "batch", the samples an engine returns together, once the last is
    # done (NeMo RL's synchronous rollout: the LLM class generates the batch, then one environment step
    # scores it; verl's driver scores the generated batch); "sample", each sample when it finishes (NeMo
    # RL with async_engine: run_async_multi_turn_rollout scores each sample in its own task as it
    # completes; AReaL's rollout workflow scores each trajectory as it ends), so verification overlaps
    # generation. None: the schedule's (ScheduleConfig.default_reward_handover).
    handover: Literal["batch", "sample"] | None = None
    # A reward model's sharded weights on the host for good, FSDP's CPU offload (verl's
    # RewardModelWorker: CPUOffload(offload_params=True) / CPUOffloadPolicy always, the module cast to
    # bf16 first: cpu_offload_bytes_per_param 2): each forward copies every layer's shard in.
    cpu_offload: bool = False
    cpu_offload_bytes_per_param: float = Field(2.0, gt=0)
    # A reward model served by inference engines (kind: model), in place of a forward pass on the
    # trainer: verl 0.9's reward loop (experimental/reward_loop: a discriminative model behind vLLM's
    # /classify). With served.devices on devices of its own (reward.reward_model.enable_resource_pool),
    # each finished sample posted as one request of prompt and response as it is handed over
    # (handover); without, woken on the trainer's devices after generation to score the batch
    # (compute_rm_score). None: the forward pass.
    served: ServedSpec | None = None

    @field_validator("cpu_offload", "cpu_offload_bytes_per_param", mode="after")
    @classmethod
    def _offload_needs_a_model_reward(cls, value: Any, info: ValidationInfo) -> Any:
        """A reward model's CPU offload applies to kind: model (a rule reward holds no weights)."""
        name = info.field_name or ""
        if (info.data or {}).get("kind") == "rule" and value != cls.model_fields[name].default:
            raise RlsimError("applies to a reward model: kind: rule holds no weights",
                             fix=f"remove reward.{name}, or set reward.kind: model")
        return value

    @field_validator("model", mode="after")
    @classmethod
    def _model_needs_a_model_reward(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The reward-model preset is read for kind: model only (a rule reward runs on the host CPUs)."""
        if value is not None and (info.data or {}).get("kind") == "rule":
            raise RlsimError("applies to a reward model: kind: rule scores on the host CPUs (cpu_s_per_sample)",
                             fix="remove reward.model, or set reward.kind: model")
        return value

    @field_validator(*RULE_COST_KEYS, "workers_per_device", mode="after")
    @classmethod
    def _rule_constants_need_a_rule_reward(cls, value: float, info: ValidationInfo) -> float:
        """The rule verifier's CPU time and workers apply to kind: rule only (a reward model is a
        forward pass on the devices); at their defaults, as a whole dump gives them, they pass."""
        name = info.field_name or ""
        if (info.data or {}).get("kind") == "model" and value != cls.model_fields[name].default:
            raise RlsimError("applies to rule rewards: kind: model scores with a forward pass on the devices",
                             fix=f"remove reward.{name}, or set reward.kind: rule")
        return value

    @model_validator(mode="after")
    def _one_worker_rule(self) -> "RewardSpec":
        if self.workers is not None and "workers_per_device" in self.model_fields_set:
            raise RlsimError("workers and workers_per_device both given",
                             fix="give workers (a pool shared by the job) or workers_per_device, not both")
        if self.kind == "model" and self.workers is not None:
            raise RlsimError("workers applies to rule rewards (kind: rule); a reward model runs on the devices",
                             fix="remove reward.workers, or set reward.kind: rule")
        if self.served is not None and self.served.devices is None and self.handover is not None:
            raise RlsimError("handover applies to a reward model on devices of its own (served.devices): on the "
                             "trainer's devices it scores the generated batch at once",
                             fix="remove reward.handover, or give served.devices")
        if self.kind == "model" and self.handover is not None and self.served is None:
            raise RlsimError("handover applies to rule rewards (kind: rule) and a reward model on devices of its "
                             "own (served.devices): a reward model on the trainer scores in a forward pass",
                             fix="remove reward.handover, or set reward.kind: rule")
        return self

    @field_validator("served", mode="after")
    @classmethod
    def _served_is_a_reward_model(cls, value: ServedSpec | None, info: ValidationInfo) -> ServedSpec | None:
        """A served reward model is a model (kind: model) whose weights stay in its engines."""
        data = info.data or {}
        if value is not None and data.get("kind") == "rule":
            raise CrossFieldError("applies to a reward model (kind: model): a rule reward runs on the host CPUs",
                                  "kind", fix="remove reward.served, or set reward.kind: model")
        if value is not None and data.get("cpu_offload"):
            raise CrossFieldError("a served reward model keeps its weights in its engines: reward.cpu_offload (FSDP's "
                                  "offload of one on the trainer) does not apply", "cpu_offload",
                                  fix="remove reward.cpu_offload")
        return value

    def workers_on(self, devices: int) -> float:
        """The rule-reward workers that verify the samples of ``devices`` devices: the job's shared
        pool (workers), or workers_per_device x devices, at least one."""
        return float(self.workers) if self.workers is not None else max(1.0, self.workers_per_device * devices)

    def handover_of(self, schedule: "ScheduleConfig") -> str:
        """What the workers are handed: handover, or the schedule's default (default_reward_handover)."""
        return self.handover or schedule.default_reward_handover


class WorkloadConfig(_Strict):
    name: str = ""
    description: str = ""
    model: str
    algorithm: Literal["grpo", "dapo", "ppo"] = "grpo"
    prompts_per_step: int = Field(gt=0)
    samples_per_prompt: int = Field(gt=0)
    mini_batch_prompts: int | None = Field(None, gt=0)  # default: the whole step in one optimizer step
    ppo_epochs: int = Field(1, ge=1)
    # DAPO dynamic sampling is its own switch, off unless given (verl algorithm.filter_groups.enable,
    # NeMo RL grpo.use_dynamic_sampling: both default off; frameworks.md), for any algorithm.
    dynamic_sampling: DynamicSampling | None = None
    prompt_length: dict[str, Any] = Field(default_factory=lambda: {"dist": "lognormal", "median": 512,
                                                                   "sigma": 0.5, "max": 2048})
    response_length: dict[str, Any] = Field(default_factory=lambda: {"dist": "lognormal", "median": 2048,
                                                                     "sigma": 1.0, "max": 16384})
    train_layout: dict[str, Any] | Literal["auto"] = "auto"
    # A named training software stack (simulator/params.py TRAIN_SOFTWARE, docs/cost-models-training.md):
    # its cost-model constants, and the recompute / ZeRO / sequence-parallel defaults of train_layout.
    train_software: str = DEFAULT_TRAIN_SOFTWARE
    # Trainer constants (compute, comm, memory, check_memory). Given keys override the stack's values;
    # once validated this holds the stack's values with the overrides applied (what the run uses).
    train_params: TrainParams = Field(default_factory=TrainParams)
    # A named rollout-engine version (simulator/engine_software.py ENGINE_SOFTWARE: vllm-v1, ...): its
    # defaults under the given inference / rollout_layout keys (_apply_engine; the values vLLM picks by
    # the GPU's memory are resolved by the cost layers on the rollout devices). None: rlsim's own.
    engine: str | None = None
    inference: InferenceParams = Field(default_factory=InferenceParams)   # rollout-engine constants
    rollout_layout: dict[str, Any] | Literal["auto"] = "auto"
    # KL reference model forward. Default (None): on for grpo / ppo, off for dapo (DAPO, arXiv
    # 2503.14476, removes the KL term; verl's DAPO recipe has no reference model: frameworks.md);
    # `reference: true` keeps it for any algorithm (NeMo RL v0.5 runs it even at KL 0: V6).
    reference: bool | None = None
    # The reference model's sharded weights live on the host for good, FSDP's CPU offload (verl builds
    # its FSDP reference with CPUOffload(offload_params=True) / CPUOffloadPolicy whatever its config
    # says, verl 0.6.0 workers/fsdp_workers.py): each forward copies every layer's shard in first, at
    # reference_cpu_offload_bytes_per_param (verl's reference: fp32, its FSDPEngineConfig model_dtype),
    # hidden as the gathers (llm/training.py fsdp_cpu_offload_s). ZeRO-3 layouts only.
    reference_cpu_offload: bool = False
    reference_cpu_offload_bytes_per_param: float = Field(4.0, gt=0)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    critic_model: str | None = None                     # PPO: default = the actor's architecture
    # PPO: the critic's per-phase offload; None: the actor's (train_params.offload)
    critic_offload: CriticOffloadSpec | None = None
    # PPO: the critic's optimizer state and step traffic; None: the actor's (train_params)
    critic_optimizer: CriticOptimizerSpec | None = None
    critic_batching: CriticBatchingSpec | None = None   # PPO: None, the actor's micro-batching
    lora: LoraSpec | None = None                        # LoRA training of the actor; None: full
    multi_turn: MultiTurnSpec | None = None             # agentic rollouts; None: one turn each
    distillation: DistillationSpec | None = None       # on-policy distillation; None: none
    entropy: EntropySpec | None = None                 # the entropy over the vocabulary; None: none
    dtype: str = "bf16"

    @field_validator("train_software")
    @classmethod
    def _known_software(cls, v: str) -> str:
        if v not in TRAIN_SOFTWARE:
            raise RlsimError(f"unknown training software {v!r}",
                             fix=f"use one of: {', '.join(TRAIN_SOFTWARE)}")
        return v

    @field_validator("reference_cpu_offload_bytes_per_param", mode="after")
    @classmethod
    def _bytes_need_the_offload(cls, value: float, info: ValidationInfo) -> float:
        """The host shards' bytes are read with reference_cpu_offload only."""
        if not (info.data or {}).get("reference_cpu_offload") and value != cls.model_fields[info.field_name].default:
            raise RlsimError("applies with reference_cpu_offload: true",
                             fix="remove it, or set workload.reference_cpu_offload")
        return value

    @field_validator("critic_model", "critic_offload", "critic_optimizer", "critic_batching", mode="after")
    @classmethod
    def _critic_needs_ppo(cls, value: Any, info: ValidationInfo) -> Any:
        """Only PPO has a critic (rl/algorithms.py: its value and training stages)."""
        algorithm = (info.data or {}).get("algorithm")
        if value is not None and algorithm is not None and algorithm != "ppo":
            raise RlsimError(f"applies to algorithm: ppo only ({algorithm} has no critic)",
                             fix=f"remove {info.field_name}, or set algorithm: ppo")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str | None) -> str | None:
        if v is not None and v not in ENGINE_SOFTWARE:
            raise RlsimError(f"unknown engine {v!r}",
                             fix=f"use one of: {', '.join(ENGINE_SOFTWARE)} (or leave it unset "
                                 "for rlsim's own defaults)")
        return v

    @field_validator("rollout_layout")
    @classmethod
    def _no_instance_count(cls, v: dict[str, Any] | str) -> dict[str, Any] | str:
        # RolloutLayout has the field for standalone rollouts (simulate_rollout); in a run the pool
        # sets it, so a given value would be overwritten without a word
        if isinstance(v, dict) and "instances" in v:
            raise RlsimError("instances does not apply to a run: the rollout devices (the pool: all "
                             "devices colocated, schedule.rollout_devices split) hold devices / (tp x ep x pp) "
                             "instances",
                             fix="remove the key (the summary's layouts.rollout.instances reports them)")
        return v

    @model_validator(mode="before")
    @classmethod
    def _apply_software(cls, data: Any) -> Any:
        """The named stack under the user's train_params and train_layout keys."""
        software = data.get("train_software", DEFAULT_TRAIN_SOFTWARE) if isinstance(data, Mapping) else None
        if not isinstance(software, str) or software not in TRAIN_SOFTWARE:
            return data   # the field's own validation names a non-string or unknown stack
        stack = TRAIN_SOFTWARE[data.get("train_software", DEFAULT_TRAIN_SOFTWARE)]
        data = dict(data)
        user = data.get("train_params")
        if user is None or isinstance(user, Mapping):
            data["train_params"] = without_inapplicable_stack_values(deep_merge(stack.params.model_dump(), user or {}),
                                                                      user or {})
        layout = data.get("train_layout")
        if isinstance(layout, Mapping):
            data["train_layout"] = {**{k: v for k, v in stack.layout_fields().items()}, **layout}
        return _apply_engine(data)

    @field_validator("mini_batch_prompts", mode="after")
    @classmethod
    def _mini_batch_divides_the_step(cls, value: int | None, info: ValidationInfo) -> int | None:
        step = (info.data or {}).get("prompts_per_step")
        if value is not None and isinstance(step, int) and step % value:
            # the three nearest the value given, by ratio (7 of 512: 16, 8, 4; the largest below it alone left 8 out)
            divisors = sorted(sorted((d for d in range(1, step + 1) if step % d == 0),
                                     key=lambda d: (abs(math.log(d / value)), d))[:3], reverse=True)
            raise CrossFieldError(f"mini_batch_prompts={value} must divide prompts_per_step={step} (an optimizer "
                                  "step takes that many prompts of the step's)", "prompts_per_step",
                                  fix=f"give a divisor of {step}, e.g. {', '.join(map(str, divisors))}, or leave it "
                                      "unset (one optimizer step a step)")
        return value

    @model_validator(mode="after")
    def _check(self) -> "WorkloadConfig":
        stack = TRAIN_SOFTWARE[self.train_software]
        lacked = stack.lacked_dimension(self.train_layout) if isinstance(self.train_layout, dict) else None
        if lacked:   # a TP, PP or CP the stack (the framework's trainer) does not run
            key, message = lacked
            raise CrossFieldError(f"train_layout.{message}", "train_software", at=f"train_layout.{key}",
                                  fix=stack.lacked_fix(key))
        unoffered = stack.unoffered_setting(self.train_layout) if isinstance(self.train_layout, dict) else None
        if unoffered:   # a ZeRO stage or recompute mode the stack's trainer has not (its planner search has neither)
            key, message, fix = unoffered
            raise CrossFieldError(f"train_layout.{message}", "train_software", at=f"train_layout.{key}", fix=fix)
        limit, prompt_max = self.inference.max_model_len, self.prompt_length.get("max")
        if limit is not None and isinstance(prompt_max, (int, float)) and prompt_max >= limit:
            raise CrossFieldError(f"prompt_length.max={prompt_max} leaves no room for a response under "
                                  f"inference.max_model_len={limit} (the engine refuses such a prompt)",
                                  "inference.max_model_len", at="prompt_length.max",
                                  fix="lower prompt_length.max below max_model_len or raise max_model_len")
        turns, longest = self.multi_turn, self.response_length.get("max")
        if turns is not None and turns.max_turn_tokens is not None and isinstance(longest, (int, float)) \
                and longest > turns.max_turns * turns.max_turn_tokens:
            raise CrossFieldError(f"workload.response_length.max={longest:g} does not fit workload.multi_turn."
                                  f"max_turns={turns.max_turns} turns of workload.multi_turn.max_turn_tokens="
                                  f"{turns.max_turn_tokens}", "multi_turn.max_turns", "multi_turn.max_turn_tokens",
                                  at="response_length.max",
                                  fix="lower response_length.max, or raise max_turns or max_turn_tokens")
        if turns is not None and "cache_eviction" in turns.model_fields_set and not self.inference.enable_prefix_caching:
            raise CrossFieldError("workload.multi_turn.cache_eviction is about a context kept in the prefix cache, "
                                  "but inference.enable_prefix_caching is false (every turn re-prefills its whole "
                                  "context)", "inference.enable_prefix_caching", at="multi_turn.cache_eviction",
                                  fix="drop cache_eviction, or set inference.enable_prefix_caching: true")
        if self.reference is None:
            object.__setattr__(self, "reference", self.algorithm != "dapo")
        return self

    @property
    def batch_samples(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def mini_batches(self) -> int:
        return self.prompts_per_step // (self.mini_batch_prompts or self.prompts_per_step)


class SwitchParams(_Strict):
    """Colocated train<->inference switch. Costs come from bytes moved; these are the constants."""
    # Optimizer states and gradients go to host memory during rollout (seeds.md, RL Fusion).
    offload_optimizer: bool = True
    # The gradient buffer is freed at the switch to rollout and re-allocated zero-filled at the switch
    # back, instead of crossing the host link: after the optimizer step it holds nothing the next step
    # reads. Megatron-Core's RL offload does this (megatron-core 0.16 param_and_grad_buffer.py
    # _ParamAndGradBuffer.offload_to_cpu(move_grads=True): grad_data.storage().resize_(0);
    # reload_from_cpu: resize_ and zero_()), which NeMo RL's colocated Megatron worker calls (cited
    # from memory of its public code). The zero fill is one write of the buffer at the HBM rate.
    # Off: the gradients go to host and back with the optimizer state (or stay resident without
    # offload_optimizer).
    free_gradients: bool = False
    # The optimizer-state offload and onload go through pageable host memory, at
    # schedule.host_copies.offload_Bps / onload_Bps where slower than the host link: Megatron-Core's RL
    # offload moves the optimizer's fp32 main parameters and states with .cpu() / .cuda()
    # (megatron-core 0.16 optimizer/optimizer.py MegatronOptimizer.offload_to_cpu / restore_from_cpu,
    # "Function used for RL training"); NeMo RL's worker moves them with .to("cpu") (cited from
    # memory of its public code). Off: pinned copies at the host link's rate.
    optimizer_pageable: bool = False
    # Fraction of the host-link peak reached by the copies to and from host memory. None: the
    # topology's host link efficiency (its `host.efficiency`, topology.DEFAULT_HOST_EFFICIENCY 0.85:
    # PCIe payload after TLP headers; a preset's own, e.g. 0.90 for NVLink-C2C), the link the
    # copies run on; a value here overrides it for these copies.
    host_link_efficiency: float | None = Field(None, gt=0, le=1)
    # Bucketed parameters: no redundant weight copy when EP changes between phases (RL Fusion).
    # Without buckets a full extra copy of the inference shard is staged (memory and copy time).
    bucketed: bool = True
    # Fixed per-switch framework overhead (process-group switch, allocator, barrier). Assumption.
    overhead_s: float = Field(0.5, ge=0)
    # The training weights go to host memory for the rollout phase too and come back after it
    # (NeMo RL v0.5 colocated Megatron: megatron_policy_worker offload_after_refit moves the model to
    # the CPU, prepare_for_lp_inference moves it back). Off: they stay resident (RL Fusion).
    offload_weights: bool = False
    # vLLM sleep mode level 1 (NeMo RL vllm_worker finish_generation -> sleep, prepare_for_generation ->
    # wake_up): after generation the engine's weight shard goes to host memory (the KV cache is
    # freed) and is copied back before the next refit overwrites it. Off: it stays in HBM.
    engine_sleep: bool = False
    # Releasing and re-allocating the KV cache pool without sleep mode (an engine that keeps its
    # weights and frees its pool: hundreds of ms to seconds; hardware.md "colocated switch costs").
    # Assumption: 1 s. With engine_sleep, sleep_wake_s below applies instead.
    kv_realloc_s: float = Field(1.0, ge=0)
    # vLLM sleep mode's own time per RL step with `engine_sleep` (sleep after generation + wake_up
    # before the next), beyond the bytes the host link is charged for: measured 11.3 s per step in a
    # colocated RL loop, the same at 16 and at 256 samples per rollout (66.9% and 12.2% of the step:
    # a fixed cost; hardware.md "Colocated switch costs seen in the wild", vllm-project/vime issue
    # 442). Half is charged on each switch in place of kv_realloc_s: sleep frees the KV pool, wake_up
    # re-creates it. The source names no model size: if its weight copies are inside the 11.3 s, the
    # host-link bytes count them twice (under ~1 s a step for a model of up to ~8B at PCIe 5 rates).
    sleep_wake_s: float = Field(VLLM_SLEEP_WAKE_S, ge=0)
    # vLLM's sleep level with `engine_sleep` (vllm/v1/worker/gpu_worker.py sleep, device_allocator/
    # cumem.py, read in the 0.11.0 wheel): 1 copies the weights to pinned host memory and back (the
    # host-link bytes above); 2 discards them (only buffers are kept), as a refit overwrites them next:
    # no weight bytes. verl 0.6+ sleeps at level 2 with vLLM >= 0.8.5 (verl/third_party/vllm
    # VLLM_SLEEP_LEVEL; level 1 with layered_summon), verl 0.4-0.5 at level 1. Default 1.
    engine_sleep_level: Literal[1, 2] = 1
    # The engine keeps its weights and KV pool in HBM through training (verl rollout.free_cache_engine:
    # false: the hybrid engine neither sleeps nor frees its cache): no release and re-allocation
    # (kv_realloc_s) and no sleep, but training runs beside the engine's gpu_memory_utilization share
    # of HBM, which its memory check takes off the usable HBM (train_params.memory.hbm_usable_fraction).
    engine_resident: bool = False

    @field_validator("kv_realloc_s", "overhead_s", "sleep_wake_s", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        return parse_seconds(v) if isinstance(v, str) else v

    @field_validator("engine_resident", mode="after")
    @classmethod
    def _resident_engine_does_not_sleep(cls, value: bool, info: ValidationInfo) -> bool:
        if value and (info.data or {}).get("engine_sleep"):
            raise RlsimError("an engine that stays resident does not sleep",
                             fix="set schedule.switch.engine_sleep: false, or engine_resident: false")
        return value

    @field_validator("optimizer_pageable", mode="after")
    @classmethod
    def _optimizer_copies_exist(cls, value: bool, info: ValidationInfo) -> bool:
        """Pageable optimizer copies need the optimizer offload (else nothing is copied)."""
        if value and not (info.data or {}).get("offload_optimizer", True):
            raise RlsimError("applies only with schedule.switch.offload_optimizer: true (the optimizer state then "
                             "crosses the host link)",
                             fix="remove it or set offload_optimizer: true")
        return value

    @field_validator("kv_realloc_s", "sleep_wake_s", "engine_sleep_level", mode="after")
    @classmethod
    def _fixed_cost_applies(cls, value: float, info: ValidationInfo) -> float:
        """kv_realloc_s is the switch's KV cost without sleep mode, sleep_wake_s and the sleep level
        with it: setting the one that does not apply would be silently ignored (validators run on
        given values only). An engine_sleep that failed its own check (absent from the data validated)
        is the one error: what it would gate is not judged against a value never read."""
        if "engine_sleep" not in (info.data or {}):
            return value
        sleeps = bool(info.data["engine_sleep"])
        if (info.field_name == "kv_realloc_s") == sleeps:
            needs = "false" if sleeps else "true"
            raise RlsimError(f"applies only with schedule.switch.engine_sleep: {needs} (kv_realloc_s without sleep "
                             "mode; sleep_wake_s and engine_sleep_level with it)",
                             fix=f"remove it or set engine_sleep: {needs}")
        return value


class DistQueueParams(_Strict):
    """The sample queue between producers (rollout) and consumers (trainer)."""
    # Aggregate queue service bandwidth. Assumption: one host's 200 Gb/s VPC/DPU port (hardware.md,
    # CloudMatrix384 VPC plane) at every cluster size: a conservative bound, since DistQueue shards
    # over the training hosts (which would multiply it); the seed scenario keeps the queue < 0.1% busy.
    bw_Bps: float = Field(parse_bandwidth("25GB/s"), gt=0)
    hierarchical: bool = True     # one reader per TP x PP group, then an intra-group broadcast
    packed: bool = True           # no padding: real tokens only
    # Padded payloads pad every sample to the workload's configured prompt max + response max (the
    # fixed-shape tensors of verl's DataProto), or with 'batch_max' to the batch's longest sample.
    pad_to: Literal["config_max", "batch_max"] = "config_max"
    # Per-token payload: token id int32 (4) + old log-prob fp32 (4) + reference log-prob fp32 (4)
    # + loss mask int8 (1) + advantage fp32 (4) = 17 B (verl DataProto fields; assumption on dtypes).
    bytes_per_token: float = Field(17.0, gt=0)

    @field_validator("bw_Bps", mode="before")
    @classmethod
    def _bw(cls, v: Any) -> Any:
        return parse_bandwidth(v) if isinstance(v, str) else v


class HybridRollout(_Strict):
    """verl 0.9 separate_async's hybrid replicas lent to generation (trainer.v1.separate_async.
    hybrid_rollout with enable_switch; HybridRolloutSwitchConfig, verl/trainer/config/config.py,
    0.9.1): after a step the trainer's devices may serve rollout requests, the next step taking them
    back once this share of train_batch_size groups is sampleable (at least one mini-batch). Defaults
    are verl's."""
    switch_threshold_ratio: float = Field(0.4, gt=0, le=1)
    # Raise the ratio by step_up after release_steps steps in a row that waited for their samples
    # (more than a poll), lower it by step_down (down to 1 / parameter_sync_step) after as many that did not.
    adaptive_switch_threshold: bool = True
    switch_threshold_step_up: float = Field(0.05, ge=0, le=1)
    switch_threshold_step_down: float = Field(0.03, ge=0, le=1)
    switch_threshold_release_steps: int = Field(2, ge=1)
    # The switches' costs are averaged over the last this many of each direction.
    switch_cost_window_size: int = Field(3, ge=1)


class DynamicResources(_Strict):
    """verl 0.9.1 fully_async's dynamic resource controller (async_training.use_dynamic_resource_scheduling;
    verl/experimental/fully_async_policy/dynamic_schedule, read 2026-12-05): the trainer's devices hold
    rollout replicas, asleep at the start; after a weight sync the policy may wake them with the new
    weights and add them to the load balancer; the next step waits until the message queue holds
    int(deactivate_ratio x the samples a sync consumes), then takes them back (out of the balancer,
    their requests aborted and retried on the standalone servers, asleep). Defaults are verl's."""
    # async_training.dynamic_schedule_policy: "default" (adaptive ratio, activation only when the
    # expected gain beats the switch cost), "fixed_ratio" (no adaptation, no cost test) or
    # "static_fully_async" (never activates: the replicas stay asleep).
    policy: Literal["default", "fixed_ratio", "static_fully_async"] = "default"
    # async_training.dynamic_schedule_deactivate_ratio: the initial ratio (verl: in (0, 1]).
    deactivate_ratio: float = Field(0.3, gt=0, le=1)
    # async_training.dynamic_schedule_enable_rebalance: after an activation, every active replica's
    # requests are aborted and routed afresh (sticky sessions cleared) to the least-loaded server.
    rebalance: bool = True
    # Rollouter.wait_for_enough_samples polls the queue size every poll_interval seconds (default 1.0).
    poll_interval_s: float = Field(1.0, gt=0)
    # The default policy's constants (dynamic_schedule/default_policy.py): the switch cost assumed
    # before one is measured (DEFAULT_SWITCH_THRESHOLD_S) and the cycles it averages over
    # (SWITCH_OVERHEAD_WINDOW_SIZE); the ratio's step up when the trainer waited for samples, the
    # waited share clipped to [step_up_min, step_up_max] (DEACTIVATE_RATIO_INCREASE_MIN / MAX), and
    # down when it did not (DEACTIVATE_RATIO_DECREASE_STEP: no floor in verl); the seconds a sample
    # is assumed to take before one is measured (INITIAL_PER_SAMPLE_TIME_S, "deliberately pessimistic").
    switch_cost_s: float = Field(10.0, ge=0)
    switch_cost_window_size: int = Field(3, ge=1)
    ratio_step_up_min: float = Field(0.02, ge=0, le=1)
    ratio_step_up_max: float = Field(0.1, ge=0, le=1)
    ratio_step_down: float = Field(0.02, ge=0, le=1)
    initial_sample_s: float = Field(1000.0, ge=0)

    @model_validator(mode="after")
    def _steps(self) -> "DynamicResources":
        if self.ratio_step_up_min > self.ratio_step_up_max:
            raise RlsimError("ratio_step_up_min must not exceed ratio_step_up_max",
                             fix="lower ratio_step_up_min, or raise ratio_step_up_max")
        return self


class HostCopies(_Strict):
    """Copies between the devices and pageable host memory (schedule.host_copies; the switch's
    optimizer copies: schedule.switch.optimizer_pageable). `tensor.cpu()` / `.to("cpu")` without
    pin_memory lands in pageable memory: the CUDA driver stages each piece through a pinned buffer
    and copies it on the CPU, so such a copy runs at the slower of the host link and that CPU copy
    (docs/schedules.md "Pageable host copies")."""
    # The reference pass's state-dict swaps (schedule.reference_swap_copies) go through pageable
    # memory: the first copy out to the host, the others in. For a framework whose swap copies out
    # with a blocking .to("cpu"); off (pinned) for NeMo RL's, whose use_reference_model is recalled
    # to copy out with .to("cpu", non_blocking=True, copy=True), which torch pins (measured,
    # docs/validation.md "Pageable copies on a GPU node").
    reference_swap: bool = False
    # Device -> pageable host: the driver stages the copy and the CPU fills freshly allocated pages
    # (PyTorch's CPU allocator maps every large tensor afresh), a page fault per 4 KiB. Measured: 1.3
    # GB/s, a GPU tensor's .to("cpu") on lent H200 nodes (benchmarks/host_pageable_copy.py --device
    # cuda, 2026-12-04: 1.19-1.51 GB/s; VMs, whose page faults cost more than a bare host's).
    offload_Bps: float = Field(PAGEABLE_OFFLOAD_BPS, gt=0)
    # Pageable host -> device: out of written pages through the staging buffer. Measured the same
    # way: 7.1 GB/s (6.26-8.33 GB/s). Both: params.PAGEABLE_*_BPS, as train_params.offload's.
    onload_Bps: float = Field(PAGEABLE_ONLOAD_BPS, gt=0)

    @field_validator("offload_Bps", "onload_Bps", mode="before")
    @classmethod
    def _bw(cls, v: Any) -> Any:
        return parse_bandwidth(v) if isinstance(v, str) else v


class FailureEvent(_Strict):
    """A device failure at ``at_s`` simulated seconds (schedule.failures); ``fail`` names the
    devices like `rlsim comm --group`: node:I, nodes:I-J, domain:I, devices:I-J or a rank list."""
    at_s: float = Field(ge=0)
    fail: str

    @field_validator("at_s", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        return parse_seconds(v) if isinstance(v, str) else v


class RecoveryConfig(_Strict):
    """What a failure costs the schedule (schedule.recovery). Same assumptions as the planner's
    RecoveryParams (docs/planner.md)."""
    # work lost back to: the start of the step in flight ('step': the last completed step's weights
    # are kept in memory / a per-step checkpoint) or the last checkpoint ('checkpoint')
    lose_to: Literal["step", "checkpoint"] = "step"
    checkpoint_every_steps: int = Field(10, ge=1)   # assumed checkpoint cadence (planner RecoveryParams)
    # a failed device takes its whole server out (Llama 3, arXiv 2407.21783 sec. 3.3.4)
    drop_whole_node: bool = True
    # reload + re-initialise: "restart within minutes" (MegaScale, arXiv 2402.15627); 120 s assumed
    restart_s: float = Field(120.0, ge=0)
    # where the running layout's neighbourhood leaves survivors idle, also search the planner's
    # whole space on them and keep the faster (planner RecoveryParams.widen: a checkpoint reloads
    # under another TP / PP / EP); false: the neighbourhood alone
    widen: bool = True

    @field_validator("checkpoint_every_steps", mode="after")
    @classmethod
    def _cadence_needs_checkpoints(cls, value: int, info: ValidationInfo) -> int:
        """The cadence says where a failure rolls back to under lose_to: checkpoint only (with 'step'
        the runners never read it: rl/schedules/colocated.py, split_failures.py)."""
        if value != cls.model_fields["checkpoint_every_steps"].default and (info.data or {}).get("lose_to") == "step":
            raise RlsimError("applies only with recovery.lose_to: checkpoint (lose_to: step rolls back to the start "
                             "of the step in flight)",
                             fix="remove schedule.recovery.checkpoint_every_steps, or set "
                                 "schedule.recovery.lose_to: checkpoint")
        return value


# Knobs every schedule kind honours (the rest are per kind: ScheduleConfig.ACCEPTS, docs/scenario-reference.md).
COMMON_KNOBS = frozenset({"kind", "overprovision", "low_batch_share", "distqueue",
                          "weight_sync_efficiency", "refit", "refit_tensor_overhead_s", "refit_gather_bytes_per_param",
                          "lora_refit",
                          "micro_batching", "pack_tokens",
                          "reuse_stage_costs", "forward_micro_batch", "reference_swap_copies", "reference_swap_own_copies",
                          "host_copies"})
# Knobs of a colocated placement (stages time-share the devices) and of split pools (a rollout pool and
# a training pool), read by rl/pools.py, rl/llm_costs.py and the runners in rl/schedules/.
COLOCATED_KNOBS = frozenset({"fuse", "aux_fraction", "switch"})
# refit_overlap: the full-tensor refit between two sets of devices (split pools; also StaleSync's,
# whose trainers re-sync the whole colocated pool after its tail consolidation: rl/llm_costs.py weight_sync_s).
SPLIT_KNOBS = frozenset({"rollout_fraction", "rollout_devices", "tail_threshold", "refit_overlap"})
# Rollout may run ahead of training (staleness >= 1): bounded staleness and interruptible rollouts.
STALE_KNOBS = frozenset({"staleness", "partial_rollout", "length_budget"})
# A pool of its own for the reference / reward / critic beside split pools' trainer (rl/pools.py).
AUX_POOL_KNOBS = frozenset({"aux_devices"})
AUX_POOL_ROLES = ("reference", "reward", "critic")   # rl/schedules/training.py AUX_ROLES
# Why a knob is limited to some kinds, said in the refusal (the rest: the kinds' placements differ).
KNOB_REASONS = {**{k: "it needs rollout to run ahead of training (staleness >= 1)" for k in STALE_KNOBS},
                "stream_threshold": "only StaleSync waits for a share of the batch",
                "refit_overlap": "it overlaps the full-tensor refit's broadcast with its gather, a refit from the "
                                 "trainers to other devices (split pools, StaleSync's tail consolidation); the "
                                 "colocated kind reshards on the devices that trained",
                "reward_during_forwards": "only the synchronous colocated step (verl's hybrid engine) waits for "
                                          "its whole batch's rewards before training",
                "between_gen_batches": "only the synchronous colocated step generates a step's batches one after "
                                       "another on the devices that train",
                "aux_devices": "a pool of its own for the reference, reward and critic is built beside the "
                               "training pool of the kinds that train one step at a time there (disaggregated, "
                               "one-step-off, async, stalesync on split pools); colocated: {reward: N} (verl's "
                               "reward_pool), or fuse: actor with aux_fraction",
                "round_batches": "only one-step-off trains step k on round k (verl's one_step_off_policy)",
                "failures": "failures are modelled on colocated placements and synchronous split pools",
                "recovery": "failures are modelled on colocated placements and synchronous split pools"}
FAILURE_KNOBS = frozenset({"failures", "recovery"})   # rl/schedules/failures.py check_supported
# Every knob that only some kinds take (each field of ScheduleConfig is here or in COMMON_KNOBS).
# verl fully_async_policy (../shared/reference/frameworks.md), NeMo RL async GRPO, AReaL.
VERL_ASYNC_KNOBS = frozenset({"require_batches", "trigger_parameter_sync_step", "staleness_threshold",
                              "max_inflight_prompts_per_server", "partial_rollout", "request_routing"})
NEMO_ASYNC_KNOBS = frozenset({"max_trajectory_age_steps", "in_flight_weight_updates", "async_engine",
                              "recompute_kv_after_update"})
# verl 0.9's v1 trainer in its async modes (trainer.v1.trainer_mode colocate_async / separate_async).
VERL_V1_KNOBS = frozenset({"num_warmup_batches", "max_off_policy_threshold", "max_off_policy_strategy",
                           "poll_interval_s", "recompute_logprob"})
# ... and in its sync mode (trainer.v1.trainer_mode sync): no warm-up, no version control.
VERL_V1_SYNC_KNOBS = frozenset({"poll_interval_s", "recompute_logprob", "max_inflight_gen_batches", "switch"})
AREAL_KNOBS = frozenset({"max_head_offpolicyness", "interruptible", "interrupt_keeps_kv", "max_concurrent_rollouts",
                         "consumer_batch_size", "recompute_logprob"})
PER_KIND_KNOBS = frozenset().union(COLOCATED_KNOBS, SPLIT_KNOBS, STALE_KNOBS, FAILURE_KNOBS, AUX_POOL_KNOBS,
                                   VERL_ASYNC_KNOBS, NEMO_ASYNC_KNOBS, AREAL_KNOBS, VERL_V1_KNOBS, VERL_V1_SYNC_KNOBS,
                                   {"parameter_sync_step", "hybrid_rollout", "dynamic_resources", "placement", "stream_threshold", "consolidate_share", "reward_during_forwards",
                                    "between_gen_batches", "round_batches"})


class ScheduleConfig(_Strict):
    """Every schedule knob with its neutral default, readable on every kind; the per-kind classes
    below (discriminated on ``kind``) refuse a knob given to a kind that does not use it."""

    # Built on first validation: a scenario builds its own kind's class only (Scenario._schedule_class),
    # not the eight of them (tens of ms at start-up; benchmarks/bench_startup.py).
    model_config = ConfigDict(defer_build=True)

    # knobs accepted beyond COMMON_KNOBS; the base class (built directly, not from a scenario) takes all
    ACCEPTS: ClassVar[frozenset[str]] = PER_KIND_KNOBS
    # Where the stages run by default ('colocated': time-share the actor's devices; 'disaggregated':
    # a rollout and a training pool), whether rollout may run ahead of training and the staleness
    # it then defaults to, and the share of a batch that must be ready (None: any full batch).
    PLACEMENT: ClassVar[str] = "colocated"
    RUNS_AHEAD: ClassVar[bool] = False
    DEFAULT_STALENESS: ClassVar[float] = 1.0
    DEFAULT_THRESHOLD: ClassVar[float | None] = None
    # What the kind's rollout hands its rule-reward workers by default (workload.reward.handover):
    # "batch", what an engine call returns, scored together (verl's driver, NeMo RL's LLM class);
    # "sample", each trajectory as it ends (a streaming rollout: StaleSync's samples into DistQueue,
    # AReaL's rollout workflow)
    REWARD_HANDOVER: ClassVar[str] = "batch"

    kind: str = "colocated"
    placement: Literal["colocated", "disaggregated"] | None = None  # stalesync only; default colocated
    fuse: Literal["actor", "full"] = "full"
    aux_fraction: float = Field(0.125, gt=0, lt=1)     # fuse=actor: share of devices for ref/reward/critic
    rollout_fraction: float = Field(0.5, gt=0, lt=1)
    rollout_devices: int | None = Field(None, gt=0)
    # Split pools: devices of their own for the reference, reward and critic models, taken from the
    # job's devices before the rollout / training split. Their forward passes run there beside the
    # actor's log-prob pass, the critic's update beside the actor's (OpenRLHF's default placement:
    # each model on its own GPUs, dispatched together in make_experience and fit together in ppo_train,
    # openrlhf/trainer/ppo_utils/experience_maker.py and ppo_trainer.py, read in the 0.11.2 wheel).
    # N: one pool of N devices running their passes in turn; {reference: 4, critic+reward: 8}: a pool
    # per model (or per `+`-joined group sharing one), side by side, the roles left out on the trainer.
    # None: they run on the training pool, after the actor's passes.
    aux_devices: int | dict[str, int] | None = None
    staleness: float | None = Field(None, ge=0)        # default per kind: 0 sync, 1 otherwise
    stream_threshold: float | None = Field(None, gt=0, le=1)  # default: 0.5 stalesync, 1 otherwise
    partial_rollout: bool = False
    length_budget: int | None = Field(None, gt=0)     # tokens per rollout segment (partial rollout)
    overprovision: float = Field(0.0, ge=0, le=4)      # generate (1+x) x batch, drop the slowest
    # one-step-off: step k trains the whole of round k, the batch generated beside step k - 1 (verl
    # one_step_off_policy: the trainer takes the generate_sequences result of the previous iteration,
    # whole, so no GRPO group is split and nothing ages out). False: the first batch of eligible samples,
    # oldest first, across rounds (streaming; a round's stragglers may join a later step).
    round_batches: bool = False
    # Colocated StaleSync: the tail consolidates once it fits on at most this share of the rollout
    # instances (the rest switch to training). Policy choice, not a published value: 0.5 gives the
    # trainers at least half the pool, so a whole batch trains in about twice its full-pool time.
    consolidate_share: float = Field(0.5, gt=0, lt=1)
    tail_threshold: float = Field(0.9, gt=0, lt=1)     # share finished before the tail consolidates
    # Metrics: a rollout instance runs "at low batch" while fewer than this share of its batch
    # slots hold a sequence (the long tail after the queue drains). Reporting threshold, no effect.
    low_batch_share: float = Field(0.5, gt=0, le=1)
    switch: SwitchParams = Field(default_factory=SwitchParams)
    distqueue: DistQueueParams = Field(default_factory=DistQueueParams)
    # Weight broadcast trainer -> rollout: fraction of link bandwidth achieved by bucketed transfers
    # (verl checkpoint-engine, hardware.md: bucketed 3.6x faster than per-tensor). Assumption 0.8.
    weight_sync_efficiency: float = Field(0.8, gt=0, le=1)
    # How the trainer's weights reach the engine (rl/llm_costs.py weight_sync_s). 'reshard': every
    # device receives only its inference shard (RL Fusion-style resharding). 'full-tensors': NeMo RL's
    # refit (v0.5 megatron_policy_worker stream_weights_via_ipc_zmq / broadcast_weights_for_collective
    # over Megatron-Bridge export_hf_weights): each parameter is rebuilt as a full HF tensor on every
    # training rank (TP / EP all-gather, PP broadcast) and handed to the engine, which keeps its TP
    # shard; split pools then broadcast every full tensor to every rollout device. Each device so
    # receives the whole model (frameworks.md: the sync time "is dominated by gathering parameters
    # from the training layout, not by the broadcast").
    refit: Literal["reshard", "full-tensors"] = "reshard"
    # full-tensors on split pools: the broadcast of one bucket overlaps the gather of the next (NeMo
    # RL streams buckets, packed_broadcast_producer; the two use separate NCCL communicators): the
    # refit lasts max(gather, broadcast); False: gather + broadcast (one stream). Assumption. Also
    # read by colocated StaleSync's refit after a tail consolidation (trainers -> the whole pool);
    # given with reshard or where no refit leaves the trainers' devices it is refused (_read_past_refit).
    refit_overlap: bool = True
    # With workload.lora: what a refit sends once the engine holds the frozen base (after the first).
    # 'adapters': the adapters alone (verl: after base_sync_done, rollout_mode collects the LoRA
    # parameters only and the engine loads them as an adapter, fsdp_workers.py 0.6.0), wherever the
    # engine keeps its weights; an engine that discards them at sleep level 2 gets the base again each
    # time (verl does so: base and adapters), so the whole model goes then. 'full': the whole model.
    lora_refit: Literal["adapters", "full"] = "adapters"
    # full-tensors: CPU time per named tensor of the model's Hugging Face state dict on every training
    # rank (Megatron-Bridge's export builds each tensor in its own conversion task, issuing its TP / EP
    # gathers, before it is packed for the engine). The gathers run on the GPU while the CPU goes on,
    # so the refit's gather part is the longer of its bytes over the links and hf_tensor_count x this.
    # hardware.md (verl checkpoint-engine, H20): Qwen3-30B-A3B syncs in 15.8 s tensor by tensor,
    # "dominated by producing parameters in the trainer": 15.8 s / its 18,867 tensors = 0.84 ms.
    # 0: off. 'reshard' (bucketed) pays none.
    refit_tensor_overhead_s: float = Field(8.4e-4, ge=0)
    # full-tensors: bytes a parameter the trainer gathers into each full tensor. None: the engine's
    # weight dtype (Megatron's bf16 model weights, gathered over TP / PP / EP). verl's FSDP actor keeps
    # its sharded parameters in fp32 (fsdp_workers.py: model_dtype fp32 for the actor by default) and
    # gathers each with DTensor.full_tensor() over the whole FSDP group (rollout_mode; read in the verl
    # 0.6.0 wheel): its importer gives 4.
    refit_gather_bytes_per_param: float | None = Field(None, gt=0)
    # How a mini-batch is cut into training micro-batches when samples are packed (distqueue.packed):
    # 'balanced' = token-balanced micro-batches of about `pack_tokens` x micro_batch tokens (verl
    # use_dynamic_bsz + seqlen_balancing.get_seqlen_balanced_partitions; Megatron THD packing);
    # 'sequence' = one micro-batch per `micro_batch` samples in generation order (variable-length
    # micro-batches: a long sample stalls every pipeline stage behind it, docs/schedules.md).
    micro_batching: Literal["balanced", "sequence"] = "balanced"
    # Token budget of one packed row; default = prompt max + response max of the workload (the
    # fixed row width a padded batch would use, so a packed row never exceeds the longest sample's memory).
    pack_tokens: int | None = Field(None, gt=0)
    # Packed rows per micro-batch of the forward-only passes (old log-probs, reference): their token
    # budget is forward_micro_batch x pack_tokens (NeMo RL: policy.logprob_batch_size, with sequence
    # packing sequence_packing.logprob_mb_tokens = logprob_batch_size x max_total_sequence_length;
    # verl: log_prob_max_token_len_per_gpu). None: the training micro_batch.
    forward_micro_batch: int | None = Field(None, gt=0)
    # Host copies of the training weight shard around each reference pass: the trainer keeps the
    # reference model's state dict in host memory and swaps it in (NeMo RL v0.5 Megatron policy worker
    # use_reference_model: the model's state dict copied to the CPU, the reference's loaded into the
    # model, then the model's loaded back: 3 copies). 0: the reference weights stay resident (verl's
    # separate reference worker). Each copy is the shard over the host link (switch.host_link_efficiency).
    reference_swap_copies: int = Field(0, ge=0)
    # Of reference_swap_copies, the copies of the reference's own weights (SkyRL's dispatch moves the
    # reference model in for its forward and out after: skyrl 0.3.0 worker_dispatch.py), each the
    # reference's shard at a frozen model's bytes (rl/llm_costs.py frozen_weights_params: its dtype,
    # weight_bytes_per_param, no master copy; FSDPRefWorkerBase loads it HFModelWrapper(bf16=
    # trainer.bf16)), half in and half out; the others copy the trainer's resident shard. 0: every copy
    # the trainer's (NeMo RL's swap loads the reference's state dict into the model's own parameters).
    reference_swap_own_copies: int = Field(0, ge=0)
    # Which host copies go through pageable memory, and its rates (HostCopies; after the fields it checks).
    host_copies: HostCopies = Field(default_factory=HostCopies)
    # verl-separate-async: lend the trainer's devices to generation between steps (verl 0.9
    # trainer.v1.separate_async.hybrid_rollout.enable_switch, off by default); None: never lent.
    hybrid_rollout: HybridRollout | None = None
    # verl-fully-async with request_routing: lend the trainer's devices to the Rollouter between steps
    # (verl 0.9.1 async_training.use_dynamic_resource_scheduling, off by default); None: never lent.
    dynamic_resources: DynamicResources | None = None
    # The rule rewards are scored while the forward passes run (old log-prob, reference, critic) and
    # gathered before the update: verl's reward_model.launch_reward_fn_async ("custom reward function
    # executed async on CPU, during log_prob": verl 0.5 verl/trainer/ppo/ray_trainer.py fit() launches
    # compute_reward_async.remote after generation, before old_log_prob / ref / values, and ray.get()s
    # it in the "adv" block, before the critic and actor updates). False: the step waits for them before switching
    # to training. Colocated kind only; not with dynamic sampling (its filter needs the rewards first).
    reward_during_forwards: bool = False
    # What the engine does between the generation batches of a dynamic-sampling step (colocated kind):
    # "stay" awake (rlsim's engine kept up); "sleep" after each batch and wake before the next, the
    # engine's half of a switch pair each (NeMo RL: finish_generation after each rollout and
    # prepare_for_generation before the next, cited from memory); "reshard": also the weights re-synced
    # into it before each batch (verl: every generate_sequences call enters the rollout sharding manager,
    # which gathers the FSDP state dict, loads it into vLLM and wakes it, and sleeps it on exit: verl 0.5
    # fsdp_workers.py generate_sequences, sharding_manager/fsdp_vllm.py).
    between_gen_batches: Literal["stay", "sleep", "reshard"] = "stay"
    # Speed: evaluate the full training / forward cost model once per (stage, pool size, batch size)
    # and scale later batches by their model FLOPs (linear + attention terms). False = every call exact.
    reuse_stage_costs: bool = True
    # Device failures during the run (docs/schedules.md "Failures"): colocated placements (colocated,
    # stalesync) and synchronous disaggregated runs.
    # (a plain [] default: pydantic copies it per instance; default_factory=list would have pydantic
    # read the builtin's signature, which compiles tokenize's regex: ~10 ms of start-up)
    failures: list[FailureEvent] = []
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    # verl fully_async_policy (frameworks.md; verl recipe/fully_async_policy): the Trainer takes
    # require_batches x ppo_mini_batch prompts per local update, bumps the parameter version after
    # trigger_parameter_sync_step local updates; the Rollouter may start at most
    # (1 + staleness_threshold) x trigger x require x mini prompts per version (a quota, not a
    # version lag); at most max_inflight_prompts_per_server prompts (x n requests) run per server.
    require_batches: int = Field(1, ge=1)
    trigger_parameter_sync_step: int = Field(1, ge=1)
    staleness_threshold: float = Field(0.0, ge=0, le=64)
    max_inflight_prompts_per_server: int = Field(16, ge=1)
    # verl 0.9.1's fully_async Rollouter (experimental/fully_async_policy/fully_async_rollouter.py):
    # every trajectory its own request to the server with the fewest in flight (its load balancer,
    # resumed where it ran), and the cap global: rollout servers x max_inflight_prompts_per_server
    # prompts (async_training.concurrent_samples_per_replica), at most the quota. False: verl
    # 0.4-0.7's, a prompt's n requests on the server with the fewest prompts, the cap per server.
    request_routing: bool = False
    # NeMo RL async GRPO: trajectories may be up to this many versions old; in-flight weight updates
    # let the engine take new weights between decode steps instead of draining (frameworks.md).
    max_trajectory_age_steps: int = Field(1, ge=1, le=64)
    in_flight_weight_updates: bool = False
    # NeMo RL grpo.async_grpo.recompute_kv_cache_after_weight_updates: after an in-flight update the
    # engine recomputes the KV of the sequences it holds under the new weights, i.e. re-prefills each
    # one's prompt and tokens so far (frameworks.md: "a sequence that resumes after a sync ...
    # re-prefills its whole prefix"); false: the KV is kept.
    recompute_kv_after_update: bool = False
    # NeMo RL async GRPO with vLLM's async engine (vllm_cfg.async_engine; its AsyncTrajectoryCollector
    # submits every prompt group of a batch on its own as soon as the age bound admits the batch): an
    # engine starting its next plan takes every round the bound admits at that moment, queued in
    # round order (continuous batching across rounds: one round's tail shares the engine with the
    # next round's start); a round that opens while a plan runs joins the running engine then, and
    # each trajectory leaves the engine as it finishes (rl/schedules/nemo_rl.py, Generation.admit).
    # False: an engine generates one round per plan and returns its batch at the plan's end.
    async_engine: bool = False
    # AReaL (rl/schedules/areal.py, AReaL 1.0.4's StalenessManager): a rollout starts while accepted +
    # running < (max_head_offpolicyness + version + 1) x batch, so rollout i in start order starts at
    # version floor(i / batch) - this or later: a bound on starts, not on the age of a trained sample
    # (nothing is dropped for age). Default 4: assumption (AReaL's own default is 0, which is
    # synchronous; frameworks.md gives none for its asynchronous runs).
    max_head_offpolicyness: int = Field(4, ge=0, le=64)
    # The weight update interrupts in-flight requests, sent again after it (AReaL 1.0.4 always does);
    # false: they finish first (a what-if).
    interruptible: bool = True
    # An interrupted request keeps its KV cache over the weight update and resumes where it stopped,
    # prefilling nothing again (vLLM's pause_generation mode "keep": SkyRL 0.3's fully-async trainer,
    # unless clear_kv_cache_on_weight_sync); false: it is aborted and re-prefills prompt + tokens so far
    # (AReaL's pause, which ends the requests with "abort"). Only with interruptible.
    interrupt_keeps_kv: bool = False
    # AReaL rollout.max_concurrent_rollouts: rollouts (prompts with their n trajectories) in flight at
    # once; None: the consumer batch, AReaL's default.
    max_concurrent_rollouts: int | None = Field(None, gt=0)
    # AReaL rollout.consumer_batch_size: the batch its start rule counts in ((eta + version + 1) x this);
    # None: prompts_per_step, as AReaL's recipes set it (${train_dataset.batch_size}).
    consumer_batch_size: int | None = Field(None, gt=0)
    # AReaL actor.recompute_logprob / use_decoupled_loss: a forward pass of the actor recomputes the
    # (proximal) log-probs before the update. True: the decoupled PPO loss of AReaL's asynchronous
    # recipes needs the proximal policy's log-probs (arXiv 2505.24298); false: the rollout's are used.
    # Also colocated, disaggregated and one-step-off: false skips the old log-prob pass (TRL's
    # GRPOTrainer without vllm_importance_sampling_correction, its optimizer steps aligned with its
    # generations, takes the old log-probs as the detached current ones: trl 1.16.0
    # trainer/grpo_trainer.py; verl's algorithm.rollout_correction.bypass_mode takes the rollout's).
    recompute_logprob: bool = True
    # verl 0.9's v1 trainer, async modes (rl/schedules/verl_v1.py; verl/trainer/ppo/v1, read in the verl
    # 0.9.1 wheel). Batches of train_batch_size prompts submitted before the first step beyond the
    # step's own (trainer.v1.<mode>.num_warmup_batches, default 1: the prefetch window).
    num_warmup_batches: float = Field(1.0, ge=0, le=64)
    # separate_async: local updates (one ppo mini-batch each, train_batch_size / this prompts) per
    # weight sync (trainer.v1.separate_async.parameter_sync_step, default 4).
    parameter_sync_step: int = Field(4, ge=1)
    # trainer.v1.sampler.max_off_policy_threshold (default 8): a group whose prompt was submitted at
    # step s trains at step t only while t - s + 1 <= this; None: no version control.
    max_off_policy_threshold: int | None = Field(8, gt=0)
    # trainer.v1.sampler.max_off_policy_strategy: 'drop' evicts finished groups past the threshold and
    # submits as many new prompts; 'wait' holds the sampling while an in-flight prompt reaches it.
    max_off_policy_strategy: Literal["drop", "wait"] = "drop"
    # The replay buffer looks for finished groups every poll_interval seconds while the trainer waits
    # (verl/trainer/ppo/v1/replay_buffer.py ReplayBuffer(poll_interval=2.0); not in verl's config).
    poll_interval_s: float = Field(2.0, gt=0)
    # verl 0.9 v1 sync mode with DAPO (algorithm.filter_groups.max_inflight_gen_batches, default 1):
    # prompts pending or generating at once, in train_batch_size units (the refills' bound).
    max_inflight_gen_batches: int = Field(1, ge=1)

    @classmethod
    def accepts(cls, placement: str | None = None) -> frozenset[str]:
        """The knobs this kind takes (on ``placement`` where the kind has a choice)."""
        return COMMON_KNOBS | cls.ACCEPTS

    @staticmethod
    def kinds_accepting(knob: str) -> list[str]:
        """The kinds that take ``knob`` (on some placement)."""
        return [k for k, c in SCHEDULE_CLASSES.items() if knob in c.accepts("colocated") | c.accepts("disaggregated")]

    def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
        """(field, why, fix) of knobs this kind accepts but, with the others given, reads nowhere: a
        kind's own rule (none by default; _read_past_keys raises the first)."""
        return []

    def applicable_fields(self, kind: str) -> dict[str, Any]:
        """The knobs set on this schedule that ``kind`` also takes (compare: the same scenario under
        another kind), as a mapping for load_scenario."""
        cls = SCHEDULE_CLASSES[kind]
        keep = cls.accepts(self.placement) if kind == self.kind else cls.accepts()
        data = self.model_dump(mode="json", exclude_unset=True)
        return {**{k: v for k, v in data.items() if k in keep}, **_reference_swap_switch(data, keep), "kind": kind}

    @field_validator("switch", "distqueue", "recovery", mode="before")
    @classmethod
    def _null_section_is_its_defaults(cls, value: Any) -> Any:
        """`--set schedule.switch=null` clears a section (an import's, as its errors advise) to its
        defaults; it was "Input should be a valid dictionary" (found by a new-user trial)."""
        return {} if value is None else value

    @field_validator(*sorted(PER_KIND_KNOBS), mode="before")
    @classmethod
    @passes_value_on
    def _applies(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        if name is None or name in cls.accepts((info.data or {}).get("placement")):
            return value
        if name == "switch" and isinstance(value, Mapping) and set(value) <= {"host_link_efficiency"}:
            return value   # the reference swaps' host copies read it on any placement (_read_past_switch)
        kinds = cls.kinds_accepting(name)
        kind = (info.data or {}).get("kind", "this kind")
        why = f": {KNOB_REASONS[name]}" if name in KNOB_REASONS else ""
        if name in STALE_KNOBS and cls.RUNS_AHEAD:   # a framework's kind: it runs ahead, by its own rules
            why = f": {kind} runs ahead under its own knobs ({', '.join(sorted(cls.ACCEPTS - SPLIT_KNOBS))})"
        placement = (info.data or {}).get("placement") or "colocated"   # stalesync's default
        # an RlsimError: its own fix, not the generic one after "(got 3)" (validation_error)
        if kind in kinds:   # this kind takes it on its other placement
            other = [p for p in ("colocated", "disaggregated") if p != placement and name in cls.accepts(p)]
            raise RlsimError(f"does not apply to kind: {kind} with placement: {placement}{why}; it applies with "
                             f"placement: {' / '.join(other)}",
                             fix=f"remove schedule.{name} or change schedule.placement")
        raise RlsimError(f"does not apply to kind: {kind}{why}; it applies to kind: {' / '.join(kinds) or 'none'}",
                         fix=f"remove schedule.{name} or change schedule.kind (a kind named alone, --schedule "
                             f"{kind}, keeps only the knobs it takes)")

    @field_validator("aux_fraction", mode="after")
    @classmethod
    def _aux_needs_an_aux_pool(cls, value: float, info: ValidationInfo) -> float:
        """aux_fraction sizes the aux pool of fuse: actor (rl/pools.py); fuse: full has none."""
        fuse = (info.data or {}).get("fuse")
        if fuse == "full" and value != cls.model_fields["aux_fraction"].default:
            raise RlsimError("applies to fuse: actor (the share of devices of its aux pool for the reference, reward "
                             "and critic); fuse: full runs them on the actor's devices",
                             fix="remove schedule.aux_fraction, or set schedule.fuse: actor")
        return value

    @field_validator("aux_devices", mode="before")
    @classmethod
    def _aux_shape(cls, value: Any) -> Any:
        """A count or a mapping of counts, said once (not as the union's two errors)."""
        counts = value.values() if isinstance(value, Mapping) else [value]
        if value is not None and (not isinstance(value, (int, Mapping)) or any(
                isinstance(n, bool) or not isinstance(n, int) for n in counts)):
            raise RlsimError("takes a device count or a mapping of device counts",
                             fix="give a device count (8) or one per model ({reference: 4, critic+reward: 8})")
        return value

    @field_validator("aux_devices", mode="after")
    @classmethod
    def _aux_groups(cls, value: int | dict[str, int] | None) -> int | dict[str, int] | None:
        """A device count, or {role or role+role: devices} over the reference, reward and critic, each
        role in one group at most."""
        counts = [value] if isinstance(value, int) else list((value or {}).values())
        if any(n < 1 for n in counts):   # _aux_shape has refused what is not a whole number
            raise RlsimError("a pool of no device",
                             fix="give a device count >= 1 (or one per model: {reference: 4, critic+reward: 8})")
        seen: list[str] = []
        for group in value if isinstance(value, dict) else ():
            roles = group.split("+")
            wrong = [role for role in roles if role not in AUX_POOL_ROLES or role in seen]
            if wrong:
                unknown = [role for role in wrong if role not in AUX_POOL_ROLES]
                named = "" if [group] == (unknown or wrong) else f"{group!r}: "   # 'foo' said once
                raise RlsimError(named + (f"{', '.join(map(repr, unknown))} is no model of an aux pool" if unknown
                                          else f"{', '.join(map(repr, wrong))} is in another pool already"),
                                 fix=f"name the models of each pool among {', '.join(AUX_POOL_ROLES)}, each in one "
                                     "pool at most, several joined by + (critic+reward)")
            seen += roles
        if isinstance(value, dict) and not value:
            raise RlsimError("an empty mapping sets no pool apart",
                             fix="give a device count or one pool per model")
        return value

    @model_validator(mode="after")
    def _aux_pool_keeps_no_failures(self) -> "ScheduleConfig":
        """Failures re-plan the rollout and training pools (rl/schedules/split_failures.py); a third
        pool beside them is not re-planned, so the two are refused together, not half modelled."""
        if self.aux_devices is not None and self.failures:
            raise RlsimError("schedule.failures are not modelled with an aux pool (schedule.aux_devices)",
                             fix="remove one of them")
        return self

    @field_validator("recompute_kv_after_update", mode="after")
    @classmethod
    def _recompute_needs_in_flight(cls, value: bool, info: ValidationInfo) -> bool:
        """Only an in-flight update finds sequences mid-generation: without it the engines drain first."""
        if value and not (info.data or {}).get("in_flight_weight_updates", False):
            raise RlsimError("applies only with schedule.in_flight_weight_updates: true (without them the engines "
                             "drain before an update, holding no KV to recompute)",
                             fix="remove it, or set in_flight_weight_updates: true")
        return value

    @field_validator("length_budget", mode="after")
    @classmethod
    def _budget_needs_partial_rollout(cls, value: int | None, info: ValidationInfo) -> int | None:
        """length_budget cuts partial rollouts into segments; without them it is read nowhere (the
        reverse, partial_rollout without a budget, is refused when the run starts: rl/schedules)."""
        if value is not None and not (info.data or {}).get("partial_rollout", True):
            raise RlsimError("applies only with schedule.partial_rollout: true (the tokens of one partial-rollout "
                             "segment)",
                             fix="remove schedule.length_budget, or set schedule.partial_rollout: true")
        return value

    @field_validator("distqueue", mode="after")
    @classmethod
    def _padding_applies(cls, value: DistQueueParams) -> DistQueueParams:
        """pad_to sets the width of padded payloads: with packed payloads (real tokens only) it would
        be silently ignored. Checked here, not in DistQueueParams, which also prices padded payloads
        of a packed queue on request (rl/distqueue.py payload_bytes(packed=False))."""
        if value.set_off_default(("pad_to",)) and value.packed:
            raise RlsimError("pad_to: applies to padded payloads (distqueue.packed: false); packed payloads carry "
                             "real tokens only",
                             fix="remove schedule.distqueue.pad_to, or set schedule.distqueue.packed: false")
        return value

    @field_validator("reference_swap_own_copies", mode="after")
    @classmethod
    def _own_copies_are_swap_copies(cls, value: int, info: ValidationInfo) -> int:
        """The reference's own copies are some of the swap's copies."""
        copies = (info.data or {}).get("reference_swap_copies") or 0
        if value > copies:
            raise RlsimError(f"{value} of the reference swap's {copies} copies: reference_swap_own_copies counts "
                             "some of schedule.reference_swap_copies",
                             fix="give at most that many, or raise reference_swap_copies")
        return value

    @field_validator("host_copies", mode="after")
    @classmethod
    def _host_copies_apply(cls, value: HostCopies, info: ValidationInfo) -> HostCopies:
        """A pageable reference swap needs its copies; the rates need a pageable copy (the reference
        swap's, or the switch's optimizer copies), else they would be silently ignored."""
        data = info.data or {}
        if value.reference_swap and not data.get("reference_swap_copies"):
            raise RlsimError("reference_swap: applies only with schedule.reference_swap_copies >= 1",
                             fix="remove it or set reference_swap_copies")
        switch = data.get("switch")
        rates = value.set_off_default(("offload_Bps", "onload_Bps"))
        if rates and not (value.reference_swap or (switch is not None and switch.optimizer_pageable)):
            raise RlsimError(f"{', '.join(rates)}: apply only with host_copies.reference_swap or "
                             "switch.optimizer_pageable true",
                             fix="remove them or set one of those")
        return value

    @property
    def default_reward_handover(self) -> str:
        """The kind's REWARD_HANDOVER, or "sample" with vLLM's async engine (async_engine: NeMo RL's
        run_async_multi_turn_rollout scores each sample in its own task as it completes)."""
        return "sample" if self.async_engine else self.REWARD_HANDOVER

    @property
    def _kind_class(self) -> type["ScheduleConfig"]:
        return SCHEDULE_CLASSES.get(self.kind, type(self))

    @property
    def effective_placement(self) -> str:
        kind = self._kind_class
        return (self.placement or kind.PLACEMENT) if "placement" in kind.ACCEPTS else kind.PLACEMENT

    @property
    def effective_staleness(self) -> float:
        kind = self._kind_class
        if not kind.RUNS_AHEAD:
            return 0.0
        return kind.DEFAULT_STALENESS if self.staleness is None else float(self.staleness)

    def step_prompts(self, workload: "WorkloadConfig") -> int:
        """Prompts one step trains (the summary's samples.batch / samples_per_prompt)."""
        return workload.prompts_per_step

    @property
    def rounds_ahead(self) -> int:
        """Rounds the run may generate past its last iteration (work_estimate): its age bound where
        generation is admitted up to it regardless of the trainer (AReaL, NeMo RL async); 0 where a
        trainer's step gates the next round."""
        return 0

    @property
    def staleness_bound(self) -> float | None:
        """The bound the summary reports on the versions a trained sample may lag (summary
        staleness.bound); None where the kind counts staleness without bounding it."""
        return self.effective_staleness

    @property
    def effective_threshold(self) -> float:
        """Share of a batch that must come from the current round before training starts on it
        (StaleSync only; other policies start on any B eligible samples)."""
        default = self._kind_class.DEFAULT_THRESHOLD
        if default is None:
            return 0.0
        return default if self.stream_threshold is None else float(self.stream_threshold)




def _made_on_first_use(make: Callable[[], type[ScheduleConfig]]) -> Callable[[], type[ScheduleConfig]]:
    """A built-in kind's config class, made by ``make`` when it is first asked for (SCHEDULE_CLASSES,
    or its name imported from this module) and the same class ever after. Making one costs as much
    as a model that builds (pydantic collects its 34 fields, defer_build or not), and a run uses the
    classes of one or two of the eight kinds (benchmarks/bench_startup.py)."""
    @functools.cache
    def made() -> type[ScheduleConfig]:
        cls = make()
        cls.__qualname__ = cls.__name__   # found (pickle, imports) under its name here: __getattr__ below
        return cls
    return made


@_made_on_first_use
def _colocated() -> type[ScheduleConfig]:
    class ColocatedSchedule(ScheduleConfig):
        """Synchronous RL on one pool: every stage time-shares the devices (RL Fusion / hybrid engine)."""
        ACCEPTS: ClassVar[frozenset[str]] = COLOCATED_KNOBS | FAILURE_KNOBS | AUX_POOL_KNOBS | {
            "reward_during_forwards", "between_gen_batches", "recompute_logprob"}
        kind: Literal["colocated"] = "colocated"

        @field_validator("aux_devices", mode="after")
        @classmethod
        def _reward_pool_only(cls, value: Any, info: ValidationInfo) -> Any:
            """verl's reward_pool (main_ppo.py init_resource_pool_mgr): the reward model on devices
            of its own, which the hybrid engine's driver hands each batch and waits for
            (ray_trainer.py: compute_rm_score before the log-prob passes). The colocated step has no
            other aux pool: fuse: actor keeps its own (aux_fraction)."""
            if value is None:
                return value
            if not (isinstance(value, dict) and list(value) == ["reward"]):
                raise RlsimError("a colocated step sets apart the reward model's pool alone ({reward: N}: verl's "
                                 "reward_pool, scored in the driver's turn)",
                                 fix="give {reward: N}, or fuse: actor with "
                                     "aux_fraction for the reference, reward and critic beside the actor")
            if (info.data or {}).get("fuse", "full") != "full":
                raise RlsimError("fuse: actor has its own aux pool (aux_fraction)",
                                 fix="give one of them")
            return value
    return ColocatedSchedule


@_made_on_first_use
def _disaggregated() -> type[ScheduleConfig]:
    class DisaggregatedSchedule(ScheduleConfig):
        """Synchronous RL on split pools: a rollout pool and a training pool, weights broadcast between."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | FAILURE_KNOBS | AUX_POOL_KNOBS | {"recompute_logprob"}
        PLACEMENT: ClassVar[str] = "disaggregated"
        kind: Literal["disaggregated"] = "disaggregated"
    return DisaggregatedSchedule


@_made_on_first_use
def _one_step_off() -> type[ScheduleConfig]:
    class OneStepOffSchedule(ScheduleConfig):
        """Split pools; rollout of step k+1 overlaps training of step k (staleness 1 by default)."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | STALE_KNOBS | AUX_POOL_KNOBS | {"round_batches",
                                                                                       "recompute_logprob"}
        PLACEMENT: ClassVar[str] = "disaggregated"
        RUNS_AHEAD: ClassVar[bool] = True
        kind: Literal["one-step-off"] = "one-step-off"

        @model_validator(mode="after")
        def _whole_rounds_lose_nothing(self) -> "ScheduleConfig":
            """round_batches trains each round whole: a cut or dropped sample would leave it short."""
            if self.round_batches:
                for key, on in (("partial_rollout", self.partial_rollout), ("overprovision", self.overprovision > 0)):
                    if on:
                        raise RlsimError(f"round_batches trains each round whole, which {key} cuts",
                                         fix=f"remove schedule.{key} or schedule.round_batches")
            return self
    return OneStepOffSchedule


@_made_on_first_use
def _stalesync() -> type[ScheduleConfig]:
    class StaleSyncSchedule(ScheduleConfig):
        """Quasi-asynchronous within a staleness bound, training starts at a threshold share of the batch;
        on the colocated placement (default) or on split pools (``placement: disaggregated``)."""
        ACCEPTS: ClassVar[frozenset[str]] = STALE_KNOBS | {"placement", "stream_threshold", "refit_overlap"}
        RUNS_AHEAD: ClassVar[bool] = True
        DEFAULT_THRESHOLD: ClassVar[float | None] = 0.5
        REWARD_HANDOVER: ClassVar[str] = "sample"      # samples stream into DistQueue as they complete
        kind: Literal["stalesync"] = "stalesync"

        @classmethod
        def accepts(cls, placement: str | None = None) -> frozenset[str]:
            if placement == "disaggregated":   # split pools; failures are not modelled there (failures.py)
                return COMMON_KNOBS | cls.ACCEPTS | SPLIT_KNOBS | AUX_POOL_KNOBS
            return COMMON_KNOBS | cls.ACCEPTS | COLOCATED_KNOBS | FAILURE_KNOBS | {"consolidate_share"}
    return StaleSyncSchedule


@_made_on_first_use
def _async() -> type[ScheduleConfig]:
    class AsyncSchedule(ScheduleConfig):
        """Split pools, continuous generation; the trainer consumes within the staleness bound."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | STALE_KNOBS | AUX_POOL_KNOBS
        PLACEMENT: ClassVar[str] = "disaggregated"
        RUNS_AHEAD: ClassVar[bool] = True
        REWARD_HANDOVER: ClassVar[str] = "sample"      # continuous generation: each sample as it ends
        kind: Literal["async"] = "async"
    return AsyncSchedule


@_made_on_first_use
def _verl_fully_async() -> type[ScheduleConfig]:
    class VerlFullyAsyncSchedule(ScheduleConfig):
        """verl's fully_async_policy: a Rollouter and a Trainer on split pools joined by a message queue;
        a per-version quota of started prompts (staleness_threshold), partial rollouts cancelled at a sync."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | VERL_ASYNC_KNOBS | {"dynamic_resources", "switch"}
        PLACEMENT: ClassVar[str] = "disaggregated"
        RUNS_AHEAD: ClassVar[bool] = True
        kind: Literal["verl-fully-async"] = "verl-fully-async"

        def step_prompts(self, workload: "WorkloadConfig") -> int:
            """A step is a parameter version: trigger_parameter_sync_step local updates of
            require_batches mini-batches (rl/schedules/verl_async.py); prompts_per_step is not read."""
            mini = workload.mini_batch_prompts or workload.prompts_per_step
            return self.trigger_parameter_sync_step * self.require_batches * mini

        @property
        def staleness_bound(self) -> float | None:
            """None: verl limits the prompts started per version (staleness_threshold, a quota), not the
            age of a trained sample, which it counts only (docs/schedules.md)."""
            return None

        def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
            """verl cancels in-flight requests at a sync only when the Rollouter may start more than a
            version consumes (rl/schedules/verl_async.py: partial_rollout and staleness_threshold > 0):
            at 0 nothing is in flight at a sync. Its Rollouter sends each prompt's n requests to the
            server with the fewest prompts, its own dispatch: workload.inference.dispatch is not read. Its
            Rollouter aborts nothing (overprovision) and its servers' slots are not accounted
            (low_batch_share)."""
            out = self._read_past_lending()
            if self.partial_rollout and self.staleness_threshold == 0:
                out.append(("schedule.partial_rollout", "partial_rollout acts only with staleness_threshold > 0: at "
                            "0 the Rollouter starts no more than a version consumes, so nothing is in flight at a "
                            "sync to cancel", "set schedule.staleness_threshold above 0, or remove "
                            "schedule.partial_rollout"))
            if self.overprovision > 0:
                out.append(("schedule.overprovision", "verl's Rollouter generates the prompts its quota admits and "
                            "aborts none (kind verl-fully-async: staleness_threshold sets how many run ahead), so "
                            "schedule.overprovision is not read", "remove schedule.overprovision, or raise "
                            "schedule.staleness_threshold"))
            if "low_batch_share" in self.model_fields_set:
                out.append(("schedule.low_batch_share", "kind verl-fully-async does not account its servers' batch "
                            "slots (summary rollout.occupancy is null), so schedule.low_batch_share is not read",
                            "remove schedule.low_batch_share"))
            if workload.inference.set_off_default(("dispatch",)):
                out.append(("workload.inference.dispatch", "verl's Rollouter sends each prompt's n requests to the "
                            "rollout server with the fewest prompts (kind verl-fully-async's own dispatch), so "
                            "workload.inference.dispatch is not read", "remove workload.inference.dispatch, or run "
                            "another kind"))
            # verl 0.9.1 experimental/fully_async_policy: fully_async_rollouter.py asserts data.gen_batch_size
            # == 1 ("currently only support 1", its yaml) and nothing there reads algorithm.filter_groups
            return out + _read_past_sampling(workload, "verl's fully_async Rollouter (kind verl-fully-async)", {
                "gen_prompts": "streams prompts one at a time (verl asserts data.gen_batch_size == 1) and queues "
                               "every kept group for a later step: it draws no generation batch",
                "max_gen_batches": "has no generation batches to cap (verl's fully_async reads no "
                                   "algorithm.filter_groups.max_num_gen_batches)"})

        def _read_past_lending(self) -> list[tuple[str, str, str]]:
            """The dynamic resource controller is verl 0.9.1's (request_routing); the switch prices only
            the trainer's devices lent with it."""
            if self.dynamic_resources is not None and not self.request_routing:
                return [("schedule.dynamic_resources", "the dynamic resource controller is verl 0.9.1's, whose "
                         "Rollouter routes each request (schedule.request_routing), which this run does not use",
                         "set schedule.request_routing: true, or remove schedule.dynamic_resources")]
            if self.dynamic_resources is None and set(self.switch.model_fields_set) - {"host_link_efficiency"}:
                return [("schedule.switch", "on verl-fully-async the trainer's devices switch only when they are "
                         "lent to the Rollouter (schedule.dynamic_resources), which this run does not do",
                         "remove schedule.switch, or give schedule.dynamic_resources")]
            return []
    return VerlFullyAsyncSchedule


@_made_on_first_use
def _nemo_rl_async() -> type[ScheduleConfig]:
    class NemoAsyncSchedule(ScheduleConfig):
        """NeMo RL async GRPO on split pools (rl/schedules/nemo_rl.py): a trajectory whose generation
        started with weights v trains at step k only if k - v <= max_trajectory_age_steps (older ones are
        dropped as stale), generation runs ahead up to that bound; in_flight_weight_updates: the engines
        take new weights between decode steps (KV kept) instead of draining first (frameworks.md)."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | NEMO_ASYNC_KNOBS
        PLACEMENT: ClassVar[str] = "disaggregated"
        RUNS_AHEAD: ClassVar[bool] = True
        kind: Literal["nemo-rl-async"] = "nemo-rl-async"

        @property
        def effective_staleness(self) -> float:
            return float(self.max_trajectory_age_steps)

        @property
        def rounds_ahead(self) -> int:
            return self.max_trajectory_age_steps

        @property
        def cuts_generation(self) -> bool:
            """Generation is cut at a weight update (rl/llm_costs.py keeps engine copies for it)."""
            return self.in_flight_weight_updates
    return NemoAsyncSchedule


@_made_on_first_use
def _areal() -> type[ScheduleConfig]:
    class ArealSchedule(ScheduleConfig):
        """AReaL 1.0.4 (rl/schedules/areal.py): a rollout starts while running < max_concurrent_rollouts
        and accepted + running < (max_head_offpolicyness + version + 1) x batch; nothing is dropped for
        age; the weight update interrupts in-flight requests, sent again after it with their prefix
        re-prefilled. Typical split 3/4 generating."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | AREAL_KNOBS
        PLACEMENT: ClassVar[str] = "disaggregated"
        RUNS_AHEAD: ClassVar[bool] = True
        REWARD_HANDOVER: ClassVar[str] = "sample"      # the rollout workflow scores each trajectory as it ends
        kind: Literal["areal"] = "areal"
        # AReaL's typical split: 3/4 of the devices generate, 1/4 train (frameworks.md)
        rollout_fraction: float = Field(0.75, gt=0, lt=1)

        @property
        def effective_staleness(self) -> float:
            return float(self.max_head_offpolicyness)

        @property
        def rounds_ahead(self) -> int:
            return self.max_head_offpolicyness

        @property
        def staleness_bound(self) -> float | None:
            """None: AReaL bounds when a rollout starts (its oldest token's weights), not the age of a
            trained sample: a slow rollout started within the bound trains when it completes."""
            return None

        def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
            """AReaL's engine client sends each request to the next server in turn (its own dispatch),
            aborts nothing (overprovision), and its servers' slots are not accounted (low_batch_share);
            its dynamic filter judges each rollout as it completes, with no generation batch."""
            out = []
            if self.overprovision > 0:
                out.append(("schedule.overprovision", "AReaL generates the rollouts its capacity admits and aborts "
                            "none (kind areal: max_head_offpolicyness and max_concurrent_rollouts set how many run), "
                            "so schedule.overprovision is not read", "remove schedule.overprovision"))
            if "low_batch_share" in self.model_fields_set:
                out.append(("schedule.low_batch_share", "kind areal does not account its servers' batch slots "
                            "(summary rollout.occupancy is null), so schedule.low_batch_share is not read",
                            "remove schedule.low_batch_share"))
            if workload.inference.set_off_default(("dispatch",)):
                out.append(("workload.inference.dispatch", "AReaL sends each request of a prompt to the next rollout "
                            "server in turn (kind areal's own dispatch), so workload.inference.dispatch is not read",
                            "remove workload.inference.dispatch, or run another kind"))
            if self.interrupt_keeps_kv and not self.interruptible:
                out.append(("schedule.interrupt_keeps_kv", "with interruptible false no request is interrupted at a "
                            "weight update (they finish first), so there is no KV cache to keep",
                            "set schedule.interruptible: true, or remove schedule.interrupt_keeps_kv"))
            elif self.interrupt_keeps_kv and self.max_head_offpolicyness == 0:
                out.append(("schedule.interrupt_keeps_kv", "with max_head_offpolicyness 0 no rollout of the next "
                            "version starts before its weights, so none is in flight at a weight update to keep "
                            "its KV cache", "raise schedule.max_head_offpolicyness, or remove "
                            "schedule.interrupt_keeps_kv"))
            # AReaL 1.0.4 rl_trainer.py train(dynamic_filter_fn) -> prepare_batch(should_accept_fn): each
            # rollout accepted or rejected as it completes; no generation batch, no count of them
            return out + _read_past_sampling(workload, "AReaL (kind areal)", {
                "gen_prompts": "starts rollouts one at a time as its capacity admits, its dynamic filter "
                               "(should_accept_fn) judging each as it completes: it draws no generation batch",
                "max_gen_batches": "has no generation batches to cap (a rejected rollout frees its place, "
                                   "without limit)"})
    return ArealSchedule


class _VerlV1Async(ScheduleConfig):
    """What verl 0.9's v1 trainer does in both async modes (rl/schedules/verl_v1.py): train_batch_size
    prompts submitted each step (and num_warmup_batches x that before the first), partial rollouts
    aborted and resumed around every weight update, a replay buffer that samples the oldest finished
    groups and evicts those past max_off_policy_threshold."""
    RUNS_AHEAD: ClassVar[bool] = True
    REWARD_HANDOVER: ClassVar[str] = "sample"   # the agent loop scores each trajectory as it ends

    @property
    def staleness_bound(self) -> float | None:
        """threshold - 1 versions under 'drop' (a prompt submitted at step s trains by step s + T - 1,
        its tokens generated with weights s or later); None under 'wait' or without a threshold, where
        verl holds or counts the age without bounding it."""
        if self.max_off_policy_threshold is None or self.max_off_policy_strategy != "drop":
            return None
        return float(self.max_off_policy_threshold - 1)

    @property
    def rounds_ahead(self) -> int:
        return math.ceil(self.num_warmup_batches)

    def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
        """verl's load balancer routes each request to the server with the fewest in flight (the kind's
        own dispatch), aborts nothing but at an update (overprovision), and the servers' slots are not
        accounted (low_batch_share); the strategy acts only with a threshold."""
        out = []
        name = f"kind {self.kind}"
        if self.overprovision > 0:
            ahead = self.RUNS_AHEAD   # the async modes' warm-up sets how many run ahead; sync runs none ahead
            out.append(("schedule.overprovision", f"{name} generates the prompts verl submits and aborts none"
                        + (" (num_warmup_batches sets how many run ahead)" if ahead else "")
                        + ", so schedule.overprovision is not read",
                        "remove schedule.overprovision" + (", or raise schedule.num_warmup_batches" if ahead else "")))
        if "low_batch_share" in self.model_fields_set:
            out.append(("schedule.low_batch_share", f"{name} does not account its servers' batch slots (summary "
                        "rollout.occupancy is null), so schedule.low_batch_share is not read",
                        "remove schedule.low_batch_share"))
        if workload.inference.set_off_default(("dispatch",)):
            out.append(("workload.inference.dispatch", "verl's load balancer sends each request to the rollout "
                        f"server with the fewest requests in flight ({name}'s own dispatch), so "
                        "workload.inference.dispatch is not read", "remove workload.inference.dispatch"))
        if self.max_off_policy_threshold is None and "max_off_policy_strategy" in self.model_fields_set:
            out.append(("schedule.max_off_policy_strategy", "the strategy acts only with a "
                        "max_off_policy_threshold (null: no version control)", "remove "
                        "schedule.max_off_policy_strategy, or give schedule.max_off_policy_threshold"))
        return out + _read_past_v1_sampling(workload, name)


def _read_past_v1_sampling(workload: "WorkloadConfig", name: str) -> list[tuple[str, str, str]]:
    """verl 0.9's v1 replay buffer refills filtered groups one prompt at a time (data.gen_batch_size
    forced to 1 under DAPO) and ignores max_num_gen_batches (it warns: no cap)."""
    return _read_past_sampling(workload, f"{name}'s replay buffer", {
        "gen_prompts": "refills each filtered group with fresh prompts one at a time (verl forces "
                       "data.gen_batch_size to 1 under DAPO)",
        "max_gen_batches": "ignores algorithm.filter_groups.max_num_gen_batches (no cap: verl warns)"})


def _read_past_sampling(workload: "WorkloadConfig", who: str, whys: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The dynamic-sampling keys (gen_prompts, max_gen_batches) ``who`` does not read, each with its why:
    a kind that starts prompts one at a time has no generation batch to size or cap."""
    sampling, out = workload.dynamic_sampling, []
    for key, why in whys.items():
        if sampling is not None and getattr(sampling, key) is not None:
            out.append((f"workload.dynamic_sampling.{key}", f"{who} {why}, so workload.dynamic_sampling.{key} "
                        "is not read", f"remove workload.dynamic_sampling.{key}"))
    return out


@_made_on_first_use
def _verl_colocate_async() -> type[ScheduleConfig]:
    class VerlColocateAsyncSchedule(_VerlV1Async):
        """verl 0.9 trainer.v1.trainer_mode colocate_async: one pool; generation runs until a batch of
        groups has finished, the rest is aborted keeping its tokens, the engines sleep, the actor trains
        and resyncs, and the aborted requests resume beside the next step's prompts."""
        ACCEPTS: ClassVar[frozenset[str]] = VERL_V1_KNOBS | {"switch"}
        kind: Literal["verl-colocate-async"] = "verl-colocate-async"
    return VerlColocateAsyncSchedule


@_made_on_first_use
def _verl_separate_async() -> type[ScheduleConfig]:
    class VerlSeparateAsyncSchedule(_VerlV1Async):
        """verl 0.9 trainer.v1.trainer_mode separate_async: a standalone rollout pool generates without
        pause but at a sync; the trainer runs parameter_sync_step local updates (a ppo mini-batch each)
        per weight sync, which aborts the in-flight requests and resumes them with the new weights."""
        ACCEPTS: ClassVar[frozenset[str]] = SPLIT_KNOBS | VERL_V1_KNOBS | {"parameter_sync_step", "hybrid_rollout",
                                                                         "switch"}
        PLACEMENT: ClassVar[str] = "disaggregated"
        kind: Literal["verl-separate-async"] = "verl-separate-async"

        def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
            """The v1 kinds' rules, and the switch prices only the hybrid replicas' (hybrid_rollout)."""
            out = super().read_past(workload)
            if self.hybrid_rollout is None and set(self.switch.model_fields_set) - {"host_link_efficiency"}:
                out.append(("schedule.switch", "on verl-separate-async the trainer's devices switch only when "
                            "they are lent to generation (schedule.hybrid_rollout), which this run does not do",
                            "remove schedule.switch, or give schedule.hybrid_rollout"))
            return out
    return VerlSeparateAsyncSchedule


@_made_on_first_use
def _verl_sync() -> type[ScheduleConfig]:
    class VerlSyncSchedule(_VerlV1Async):
        """verl 0.9 trainer.v1.trainer_mode sync (its default): one pool; the step's train_batch_size
        prompts are submitted, the replay buffer waits for them all (under DAPO it refills two prompts
        per filtered group while the rest generate, then drains and discards the surplus), the engines
        sleep, the actor trains, and the woken engines take the new weights."""
        ACCEPTS: ClassVar[frozenset[str]] = VERL_V1_SYNC_KNOBS
        RUNS_AHEAD: ClassVar[bool] = False
        kind: Literal["verl-sync"] = "verl-sync"

        @property
        def staleness_bound(self) -> float | None:
            return 0.0

        @property
        def rounds_ahead(self) -> int:
            return 0

        def read_past(self, workload: "WorkloadConfig") -> list[tuple[str, str, str]]:
            """The v1 kinds' rules, and max_inflight_gen_batches bounds DAPO's refills only."""
            out = super().read_past(workload)
            if "max_inflight_gen_batches" in self.model_fields_set and workload.dynamic_sampling is None:
                out.append(("schedule.max_inflight_gen_batches", "max_inflight_gen_batches bounds DAPO's refills "
                            "(algorithm.filter_groups), and this workload has no dynamic sampling",
                            "remove schedule.max_inflight_gen_batches, or give workload.dynamic_sampling"))
            return out
    return VerlSyncSchedule


class _KindClasses(MutableMapping[str, type[ScheduleConfig]]):
    """kind -> its config class. A built-in kind's class is made on its first look-up; `kind in
    SCHEDULE_CLASSES` and iterating the kinds make none."""

    def __init__(self, makers: Mapping[str, Callable[[], type[ScheduleConfig]]]) -> None:
        self._entries: dict[str, Callable[[], type[ScheduleConfig]]] = dict(makers)

    def __getitem__(self, kind: str) -> type[ScheduleConfig]:
        return self._entries[kind]()

    def __setitem__(self, kind: str, config: type[ScheduleConfig]) -> None:
        self._entries[kind] = lambda: config

    def __delitem__(self, kind: str) -> None:
        del self._entries[kind]

    def __contains__(self, kind: object) -> bool:
        return kind in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


_BUILTIN_CLASSES: dict[str, Callable[[], type[ScheduleConfig]]] = {
    "colocated": _colocated, "disaggregated": _disaggregated, "one-step-off": _one_step_off,
    "stalesync": _stalesync, "async": _async, "verl-fully-async": _verl_fully_async,
    "nemo-rl-async": _nemo_rl_async, "areal": _areal, "verl-colocate-async": _verl_colocate_async,
    "verl-separate-async": _verl_separate_async, "verl-sync": _verl_sync}
_CLASS_NAMES = {"ColocatedSchedule": "colocated", "DisaggregatedSchedule": "disaggregated",
                "OneStepOffSchedule": "one-step-off", "StaleSyncSchedule": "stalesync", "AsyncSchedule": "async",
                "VerlFullyAsyncSchedule": "verl-fully-async", "NemoAsyncSchedule": "nemo-rl-async",
                "ArealSchedule": "areal", "VerlColocateAsyncSchedule": "verl-colocate-async",
                "VerlSeparateAsyncSchedule": "verl-separate-async", "VerlSyncSchedule": "verl-sync"}
SCHEDULE_CLASSES: MutableMapping[str, type[ScheduleConfig]] = _KindClasses(_BUILTIN_CLASSES)


def built_in_classes_made() -> list[str]:
    """The built-in kinds whose config class exists in this process (tests/test_cli.py)."""
    return [kind for kind, make in _BUILTIN_CLASSES.items() if make.cache_info().currsize]


def __getattr__(name: str) -> type[ScheduleConfig]:
    """The built-in kinds' classes by name (``from simulator.scenario import ArealSchedule``)."""
    if name in _CLASS_NAMES:
        return _BUILTIN_CLASSES[_CLASS_NAMES[name]]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def validated_schedule(value: Any) -> ScheduleConfig:
    """The `schedule:` mapping validated by its kind's class (SCHEDULE_CLASSES[kind]), with the errors
    of a pydantic union discriminated on `kind`: only that one class is built (ScheduleConfig's
    defer_build), where a union builds every kind's."""
    tag = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    if not isinstance(value, (Mapping, ScheduleConfig)):
        raise PydanticKnownError("model_attributes_type")
    cls = SCHEDULE_CLASSES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise PydanticKnownError("union_tag_invalid", {
            "discriminator": "'kind'", "tag": str(tag), "expected_tags": ", ".join(map(repr, SCHEDULE_CLASSES))})
    return value if type(value) is cls else cls.model_validate(value)


class Limits(_Strict):
    """Bounds on the work one run may take (issue 14: a run past one is refused before any work,
    naming the bound and how to raise it, e.g. ``--set limits.max_iterations=50000``). Policy
    values, not measurements: each sits well above the presets and published setups and below what
    runs for hours on a laptop (docs/scenario-reference.md "limits")."""
    # RL steps per run: published runs train hundreds to a few thousand steps (DAPO, arXiv 2503.14476:
    # ~5,000); a simulated step costs ~0.05-1 s here, so 10,000 steps stay within hours.
    max_iterations: int = Field(10_000, ge=1)
    # Devices in the topology: the largest published training clusters are ~100k GPUs (Llama 3,
    # arXiv 2407.21783: 16k H100 per job); a grpo-qwen2.5-7b step on 16,384 devices takes ~25 s here.
    max_devices: int = Field(131_072, ge=1)
    # Segments a partial rollout cuts the longest response into (ceil(response max / length_budget)):
    # Kimi k1.5 style budgets cut a 16k-32k response into a handful; 256 segments of an 8k response
    # (length_budget 32) take ~30 s per async step here, a budget of 1 token would take hours.
    max_segments_per_sample: int = Field(256, ge=1)
    # Work of the whole run, in units of one sample segment or one device per iteration (work_estimate):
    # 5e7 units is ~2 min at WORK_S_PER_UNIT and holds a full 5,000-step DAPO run of 8,192 samples a step.
    max_work: int = Field(50_000_000, ge=1)
    # `rlsim plan`: sequences of one training step (--global-batch); the planner's cost grows with it
    # (a million sequences ran past 2 min here). DAPO's step is 8,192 (512 x 16); 65,536 is 8x that.
    max_global_batch: int = Field(65_536, ge=1)
    # Simulations one command runs: replicas (--seeds N, replicas:) and sensitivity designs
    # (samples x (keys + 2) x seeds). 1,000 runs of a 1 s scenario are ~17 min on one core.
    max_runs: int = Field(1_000, ge=1)


class OutputConfig(_Strict):
    """What a run keeps of its own record (docs/scenario-reference.md "output")."""
    # Per-sample rows kept: null (default) keeps one row per generated sample for the whole run (the
    # per-sample table, the report's length and staleness figures, the critical path of every step);
    # N keeps at least the last N rows (0: only those still in play) and folds older ones into
    # counts and sums, so a long Monte-Carlo run's memory stays flat (~94 bytes a sample otherwise:
    # 73 MiB for 100 steps of the default scenario, benchmarks/bench_memory.py). Every figure that
    # counts samples stays the same; the table then holds the kept rows (samples.rows_kept), and the
    # critical path, walked during the run, covers every step (only the kept ones with
    # schedule.failures: critical_path.steps_walked). `rlsim run` without --out keeps no table at all
    # (api.simulate keep_samples=False).
    keep_sample_rows: int | None = Field(None, ge=0)
    # Whose timer names the summary adds beside rlsim's stages where a step is run as verl's hybrid
    # engine or one_step_off_policy runs it (colocated fuse: full, one-step-off): verl's `timing_s/...`
    # (verl_timing_s, always there) and, with nemo-rl, NeMo RL's `timing/train/...` too
    # (nemo_rl_timing_s; the console shows those); with openrlhf, OpenRLHF's `timing/...`
    # (openrlhf_timing_s: metrics.OPENRLHF_TIMERS on the hybrid engine, colocated fuse: full;
    # openrlhf_split_timing on disaggregated / one-step-off). rlsim run --from-nemo-rl sets nemo-rl,
    # --from-openrlhf openrlhf.
    timers: Literal["verl", "nemo-rl", "openrlhf"] = "verl"


# Wall seconds per work unit on this project's 2-core VM, re-measured 2026-12-04 (stage-cost reuse and the
# array engine runs made runs ~100x faster than the first 1e-4): the seed scenario, 60 StaleSync
# iterations, 721,920 units in 1.1 s; grpo-qwen2.5-7b async with partial rollouts on 4 DGX H100 nodes,
# 3.9M units in 3.7 s (~1e-6 s a unit); 2e-6 leaves room for slower paths. A rough rate for the estimate only.
WORK_S_PER_UNIT = 2e-6
DEVICE_UNITS = 10      # a device costs about ten sample segments per iteration (the figures above)


@dataclass(frozen=True)
class WorkEstimate:
    units: int
    iterations: int
    samples: int          # sample segments per iteration
    devices: int
    ahead: int = 0        # rounds generated past the last iteration (ScheduleConfig.rounds_ahead)

    @property
    def seconds(self) -> float:
        return self.units * WORK_S_PER_UNIT

    def describe(self) -> str:
        rounds = f"{self.iterations:,} iterations" + (f" + {self.ahead:,} rounds ahead" if self.ahead else "")
        return (f"about {self.units:,} work units (({rounds}) x {self.samples:,} sample segments + "
                f"{self.iterations:,} iterations x {DEVICE_UNITS} x {self.devices:,} devices), roughly "
                f"{self.seconds:,.0f} s here")


def work_estimate(scenario: "Scenario", n_devices: int) -> WorkEstimate:
    """The run's work before it starts: iterations x (sample segments per step + DEVICE_UNITS x devices)."""
    w, sched = scenario.workload, scenario.schedule
    samples = w.batch_samples * (1 + sched.overprovision)
    if w.dynamic_sampling is not None:
        samples = samples / w.dynamic_sampling.keep_fraction
    longest = w.response_length.get("max")
    if sched.partial_rollout and sched.length_budget and isinstance(longest, (int, float)):
        samples *= math.ceil(longest / sched.length_budget)
    per_step = math.ceil(samples)
    ahead = sched.rounds_ahead
    units = (scenario.iterations + ahead) * per_step + scenario.iterations * DEVICE_UNITS * n_devices
    return WorkEstimate(units, scenario.iterations, per_step, n_devices, ahead)


def check_segments(scenario: "Scenario") -> None:
    """Partial rollout: the longest response cut into more than limits.max_segments_per_sample is refused."""
    sched = scenario.schedule
    longest = scenario.workload.response_length.get("max")
    if not (sched.partial_rollout and sched.length_budget and isinstance(longest, (int, float))):
        return
    segments, limit = math.ceil(longest / sched.length_budget), scenario.limits.max_segments_per_sample
    if segments > limit:
        raise RlsimError(f"length_budget {sched.length_budget} cuts the longest response ({longest:g} tokens) into "
                         f"{segments:,} segments, past limits.max_segments_per_sample={limit}",
                         source=scenario.source, field="schedule.length_budget",
                         fix=f"give length_budget >= {math.ceil(longest / limit)}, or "
                             + LIMITS_FIX.format(name="max_segments_per_sample"))


def check_work(scenario: "Scenario", n_devices: int) -> WorkEstimate:
    """The estimate, or an RlsimError when it is past limits.max_work (before any simulation)."""
    check_segments(scenario)
    estimate = work_estimate(scenario, n_devices)
    if estimate.units > scenario.limits.max_work:
        # the field is what makes the work: the batch where one iteration alone is past the limit (an
        # --set of it is then blamed: `--set workload.prompts_per_step=1e8` was reported as field
        # 'iterations'), else the iterations
        batch = estimate.samples + DEVICE_UNITS * estimate.devices > scenario.limits.max_work
        field = "workload.prompts_per_step" if batch else "iterations"
        raise RlsimError(f"the run is {estimate.describe()}: past limits.max_work={scenario.limits.max_work:,}",
                         source=scenario.source, field=field,
                         fix="fewer iterations, a smaller batch or fewer devices, or "
                             + LIMITS_FIX.format(name="max_work"),
                         related=("workload.samples_per_prompt", "iterations") if batch else ("topology",))
    return estimate


def load_limits(mapping: Mapping[str, Any], source: str) -> Limits:
    """The limits section of a command that reads no scenario (comm): `--set limits.KEY=N` items."""
    try:
        return Limits.model_validate(mapping)
    except ValidationError as exc:
        raise validation_error(exc, source=source, prefix="limits", model=Limits) from None


LIMITS_FIX = "raise it with --set limits.{name}=N (or limits: {{{name}: N}} in the scenario)"


class Scenario(_Strict):
    topology: dict[str, Any]
    workload: WorkloadConfig
    # one of SCHEDULE_CLASSES, chosen by `kind` (a missing kind is colocated): _schedule_class
    schedule: Any = Field(default_factory=lambda: _colocated()())
    iterations: int = Field(4, ge=1)
    seed: int = Field(0, ge=0)
    # replicas over seeds seed, seed+1, ... (docs/guides/uncertainty.md); used by simulator.uncertainty
    replicas: int = Field(1, ge=1)
    # planner settings for `layout: auto` and failure re-plans (simulator.planner.planner_settings keys:
    # space, rollout, recovery, params such as eval_cost_s)
    planner: dict[str, Any] = {}   # copied per instance (ScheduleConfig.failures says why not a factory)
    limits: Limits = Field(default_factory=Limits)
    output: OutputConfig = Field(default_factory=OutputConfig)
    source: str = "<defaults>"
    # the registry `schedule` is validated by, for errors.validation_error's field suggestions
    field_models: ClassVar[dict[str, Mapping[str, type]]] = {"schedule": SCHEDULE_CLASSES}
    # (knob, why) of each knob of the scenario's schedule section that a kind named alone left out
    # (load_scenario's schedule="KIND": schedule_under_kind); no field: snapshots hold the knobs kept
    _schedule_left_out: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @property
    def schedule_left_out(self) -> tuple[tuple[str, str], ...]:
        """(knob, why) of the schedule knobs of the scenario that the kind named alone (``schedule="KIND"``,
        --schedule KIND) does not take or reads past, left out of the run (api.simulate notes them); an
        import's output.timers (a dotted key) where the kind has not the phases they name."""
        return self._schedule_left_out

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule_kind(cls, v: Any) -> Any:
        """A plain string is shorthand for {kind: ...}; a mapping without a kind is colocated."""
        if isinstance(v, str):
            return {"kind": v}
        if isinstance(v, Mapping) and "kind" not in v:
            return {**v, "kind": "colocated"}
        return v

    @field_validator("schedule")
    @classmethod
    def _schedule_class(cls, v: Any) -> ScheduleConfig:
        return validated_schedule(v)

    def to_dict(self) -> dict[str, Any]:
        """The config snapshot written beside outputs (re-loadable with load_scenario). The schedule
        keeps only the knobs that were given (a default knob would be refused by kinds without it)."""
        data = self.model_dump(mode="json", exclude={"source"})
        if data.get("replicas") == 1:
            del data["replicas"]          # the default: snapshots stay as they were before replicas
        if self.limits == Limits():
            del data["limits"]            # the defaults: snapshots and fingerprints stay as they were
        if self.output == OutputConfig():
            del data["output"]            # likewise
        reward = data["workload"]["reward"]
        if self.workload.reward.handover is None:
            del reward["handover"]                # likewise
        if self.workload.reward.workers is not None:
            del reward["workers_per_device"]      # the other rule: refused beside workers on a reload
        if self.workload.inference.admission == "kv":   # vLLM's admission: snapshots stay as they were, and
            for key in ("admission", *RESERVE_KEYS):      # the reservation keys would be refused on a reload
                del data["workload"]["inference"][key]
        if self.workload.engine:   # the fields the engine resolves per device stay unset in the snapshot
            inference = self.workload.inference
            for key in device_dependent_fields(self.workload.engine) - inference.model_fields_set:
                del data["workload"]["inference"][key]
        data["schedule"] = self.schedule.model_dump(mode="json", exclude_unset=True)
        data["schedule"]["kind"] = self.schedule.kind
        return data

    def with_schedule(self, **fields: Any) -> "Scenario":
        data = self.to_dict()
        data["schedule"] = {**data["schedule"], **fields}
        return _validate(data, self.source)


def _apply_engine(data: dict[str, Any]) -> dict[str, Any]:
    """workload.engine's device-independent defaults under the given inference and rollout_layout
    keys; the ones vLLM picks by the GPU's memory stay unset here and are resolved by the cost layers
    (engine_software.resolved). An unknown engine is left to the field's validation to report."""
    name, given = data.get("engine"), _given_fields(data.get("inference"))
    if not isinstance(name, str) or name not in ENGINE_SOFTWARE or given is None:
        return data
    data["inference"], data["rollout_layout"] = given_under_engine(name, given, data.get("rollout_layout", "auto"))
    return data


def _given_fields(inference: Any) -> dict[str, Any] | None:
    """The inference keys a workload gives (a mapping, or the set fields of an InferenceParams);
    None for anything else (its validation reports it)."""
    if inference is None:
        return {}
    if isinstance(inference, InferenceParams):
        return inference.model_dump(exclude_unset=True)
    return dict(inference) if isinstance(inference, Mapping) else None


def register_schedule_config(config: type[ScheduleConfig]) -> type[ScheduleConfig]:
    """Add a schedule kind's config class (its ``kind`` a one-value Literal) to the scenario's
    ``schedule:`` kinds; rl/schedules/registry.py calls it when a kind is registered."""
    SCHEDULE_CLASSES[config.model_fields["kind"].default] = config
    return config


def unregister_schedule_config(kind: str) -> None:
    """Remove a kind added by register_schedule_config (the built-in kinds stay)."""
    if kind in SCHEDULE_CLASSES and kind not in BUILTIN_SCHEDULE_KINDS:
        del SCHEDULE_CLASSES[kind]


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top``'s keys laid over it, nested mappings merged key by key (copies)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# A kind named alone (load_scenario's schedule="KIND", --schedule KIND, a sweep's schedule=KIND grid
# value) over a schedule section travels under this key from scenario_data to _validate (removed
# there): {"left_out": [(knob, why)] the kind does not take, "droppable": the knobs kept from the
# section, left out too where the kind reads them past}.
_KIND_ALONE = "_schedule_kind_alone"

# The file a workload section was read from travels under this key from scenario_data to _validate
# (removed there), so that an error in a `--workload FILE` names FILE, not the scenario around it.
_WORKLOAD_SOURCE = "_workload_source"


def workload_name(spec: str | Path) -> str:
    """The name of a workload given as a preset name or a path: the preset name whole
    (`grpo-qwen2.5-7b`, where Path.stem would cut at the last dot), a file name less its extension."""
    path = Path(str(spec))
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        return path.name[: -len(path.suffix)]
    return path.name


def _check_law_numbers(workload: Any, source: str, workload_file: str | None, set_keys: Iterable[str]) -> None:
    """A length law's numbers are numbers when the scenario loads (llm/lengths.py checks their
    ranges): the planner and the costs read its caps before a run builds the law (`max: 1k` was a
    traceback)."""
    if not isinstance(workload, Mapping):
        return
    for law in ("prompt_length", "response_length"):
        mapping = workload.get(law)
        for key in LAW_NUMBER_KEYS if isinstance(mapping, Mapping) else ():
            value = mapping.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                field = f"workload.{law}.{key}"
                raise RlsimError(f"expected a finite number, got {value!r}", field=field,
                                 source=_error_source([field], source, workload_file, set_keys),
                                 fix=f"give {field} as a number of tokens" if key in ("median", "max", "min")
                                 else f"give {field} as a number")


def _leaf_paths(mapping: Mapping[str, Any], prefix: str) -> tuple[str, ...]:
    """The dotted paths of a nested mapping's leaves (a mapping's own path when it is empty)."""
    out: list[str] = []
    for key, value in mapping.items():
        path = f"{prefix}.{key}"
        out.extend(_leaf_paths(value, path) if isinstance(value, Mapping) and value else (path,))
    return tuple(out)


def _resolve_workload(spec: Any, field: str = "workload") -> tuple[dict[str, Any], str | None]:
    """The workload section as a mapping (a preset read, a `preset:` key merged under the keys beside
    it) and the file (or built-in preset file) it comes from: None for a plain mapping. Each preset
    file is read once. ``field``: where a name was written (`workload.preset` under a mapping)."""
    if isinstance(spec, (str, Path)):
        mapping, label = presets.resolve("workloads", spec, field=field)
        if _TOPOLOGY_FILE_KEYS & set(mapping) and "model" not in mapping:   # (11 schema errors before)
            raise RlsimError("this is a topology file, not a workload", source=label, field="workload",
                             fix="give it as --topology FILE (or topology: {preset: FILE} in a scenario)")
        mapping = with_paths_from(mapping, folder_of(label))   # a file's model: path is read next to it
        mapping.setdefault("name", workload_name(spec))
        return mapping, label
    if isinstance(spec, Mapping):
        spec = dict(spec)
        if "preset" in spec:
            preset = spec.pop("preset")
            base, label = _resolve_workload(preset, "workload.preset")
            return deep_merge(_without_replaced_laws(base, spec), spec), label if isinstance(preset, (str, Path)) else None
        return spec, None
    raise RlsimError(f"workload must be a preset name, a path or a mapping, got {type(spec).__name__}",
                     field="workload", fix=f"e.g. workload: {presets.preset_names('workloads')[0]}, or "
                                           "workload: {preset: NAME, KEY: VALUE, ...}")


# The keys of a length law (workload.prompt_length / response_length) only one `dist` reads; the
# rest (max, min, group_correlation, drift_per_step) apply to both. llm/lengths.py refuses a key of
# the other law.
LAW_ONLY_KEYS = {"lognormal": ("median", "sigma"), "empirical": ("file", "column")}
# The numeric keys of a length law (llm/lengths.py LengthDistribution.from_mapping reads them)
LAW_NUMBER_KEYS = ("median", "sigma", "max", "min", "group_correlation", "drift_per_step")


def _without_replaced_laws(base: dict[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """`base` (a preset's workload) less the keys of a length law that the `dist` laid over it makes
    inapplicable (a preset's median and sigma under `dist: empirical`, its file under lognormal): the
    law refuses keys that do not apply, and these the user did not give. Cap, floor, correlation and
    drift carry over."""
    out = dict(base)
    for key in ("prompt_length", "response_length"):
        given, under = spec.get(key), base.get(key)
        if isinstance(given, Mapping) and isinstance(under, Mapping) and "dist" in given:
            foreign = LAW_ONLY_KEYS.get(str(under.get("dist", "lognormal")).lower(), ())
            if str(given["dist"]).lower() != str(under.get("dist", "lognormal")).lower():
                out[key] = {k: v for k, v in under.items() if k not in foreign}
    return out


def _normalise_topology(spec: Any) -> dict[str, Any]:
    if isinstance(spec, (str, Path)):
        if not str(spec).strip():   # named by the key given (topology, --topology), not the preset it becomes
            raise RlsimError("empty topology name", field="topology",
                             fix=f"give a preset name ({', '.join(presets.preset_names('topologies'))}) or a "
                                 "path to a YAML file")
        return {"preset": str(spec)}
    if isinstance(spec, Mapping):
        return dict(spec)
    raise RlsimError(f"topology must be a preset name, a path or a mapping, got {type(spec).__name__}",
                     field="topology", fix=f"e.g. topology: {presets.preset_names('topologies')[0]}, or "
                                           "topology: {preset: NAME, nodes: N}")


def _check_workload_base(workload: Any, source: str, workload_file: str | None) -> None:
    """A workload mapping with neither a preset (or file) under it nor the keys every workload needs:
    most often a few keys written to lay over a preset that was left out (three 'Field required'
    errors said what was missing, not how to get it)."""
    if workload_file is not None or not isinstance(workload, Mapping):
        return
    missing = [name for name, spec in WorkloadConfig.model_fields.items() if spec.is_required() and name not in workload]
    misspelt = [key for key in workload if key not in WorkloadConfig.model_fields
                and difflib.get_close_matches(str(key), missing, n=1, cutoff=0.75)]
    if missing and not misspelt:   # a misspelt key: the field errors below name it and what it is one typo from
        raise RlsimError(f"the workload gives no {', '.join(missing)} and names no preset to take them from",
                         source=source, field=f"workload.{missing[0]}",
                         fix=f"add workload.preset: NAME ({', '.join(presets.preset_names('workloads'))}, or a "
                             f"workload YAML) under the keys, or give {', '.join(missing)}")


def _validate(data: dict[str, Any], source: str) -> Scenario:
    """The validated scenario; under a kind named alone (_KIND_ALONE), the section's knobs the kind
    reads past (a ReadPastError) are left out too, as `rlsim compare` leaves them out of its kinds, and
    a framework's timers it has not the phases of unless this command's --set gives them."""
    data = dict(data)
    alone = data.pop(_KIND_ALONE, None)
    if alone is None:
        return _validate_as_given(data, source)
    read_past: list[tuple[str, str]] = []
    timers: list[tuple[str, str]] = []
    validate = ((lambda schedule: _validate_as_given({**data, "schedule": schedule}, source)) if alone["timers_given"]
                else (lambda schedule: _without_foreign_timers({**data, "schedule": schedule}, source, timers)))
    scenario = validated_reading_past(validate, data["schedule"], alone["droppable"], read_past)
    kind = scenario.schedule.kind
    scenario._schedule_left_out = (*(tuple(item) for item in alone["left_out"]),
                                   *((knob, f"is not read under {kind} ({why})") for knob, why in read_past),
                                   *timers[-1:])
    return scenario


def _without_foreign_timers(data: dict[str, Any], source: str, dropped: list[tuple[str, str]]) -> Scenario:
    """_validate_as_given, a framework's timer names (output.timers, an import's) left out where the kind
    named alone has not their phases (listed in ``dropped``), as `rlsim compare` leaves them out of
    its kinds (api._with_own_timers)."""
    try:
        return _validate_as_given(dict(data), source)
    except ReadPastError as exc:   # timers the kind has not the phases of (a value they may not take: its error)
        output = data.get("output")
        if exc.field != "output.timers" or not isinstance(output, Mapping) or "timers" not in output:
            raise
    dropped.append(("output.timers", f"{output['timers']} names phases {data['schedule'].get('kind')} has not"))
    return _validate_as_given({**data, "output": {k: v for k, v in output.items() if k != "timers"}}, source)


def validated_reading_past(validate: Callable[[dict[str, Any]], Scenario], schedule: Mapping[str, Any],
                           droppable: Iterable[str], dropped: list[tuple[str, str]]) -> Scenario:
    """``validate(schedule)``, each knob of ``droppable`` that the kind reads past (the ReadPastError
    naming it: a verl import's colocated `switch` under verl-fully-async without dynamic_resources)
    left out of the schedule and listed in ``dropped`` as (knob, why); any other error is raised."""
    schedule, droppable = dict(schedule), set(droppable)
    while True:
        try:
            return validate(dict(schedule))
        except ReadPastError as exc:
            knob = (exc.field or "").removeprefix("schedule.").split(".")[0]
            if not (exc.field or "").startswith("schedule.") or knob not in schedule or knob not in droppable:
                raise
            dropped.append((knob, exc.message))
            del schedule[knob]


def _validate_as_given(data: dict[str, Any], source: str) -> Scenario:
    workload_file, set_keys = data.pop(_WORKLOAD_SOURCE, (None, ()))
    _check_workload_base(data.get("workload"), source, workload_file)
    _check_law_numbers(data.get("workload"), source, workload_file, set_keys)
    try:
        scenario = Scenario.model_validate({**data, "source": source})
    except ValidationError as exc:
        fix = "see docs/scenario-reference.md for the allowed values"
        skip = frozenset(SCHEDULE_CLASSES)
        error = validation_error(exc, source=source, skip=skip, fix=fix, model=Scenario, data=data)
        where = _error_source(error.fields, source, workload_file, set_keys, error.related)
        if where != source:
            error = validation_error(exc, source=where, skip=skip, fix=fix, model=Scenario, data=data)
        raise error from None
    if scenario.schedule.reward_during_forwards and scenario.workload.dynamic_sampling is not None:
        raise RlsimError("reward_during_forwards cannot apply with dynamic sampling: its filter needs each "
                         "generation batch's rewards before the next batch and before training",
                         source=source, field="schedule.reward_during_forwards",
                         fix="remove schedule.reward_during_forwards (or workload.dynamic_sampling)")
    if scenario.schedule.reward_during_forwards and scenario.workload.reward.kind != "rule":
        raise RlsimError("reward_during_forwards overlaps the rule reward's host CPU scoring with the forward passes; "
                         "a reward model scores with a forward pass on the devices, so there is nothing to overlap",
                         source=source, field="schedule.reward_during_forwards",
                         fix="remove schedule.reward_during_forwards (or set workload.reward.kind: rule)")
    if scenario.schedule.overprovision > 0 and scenario.workload.dynamic_sampling is not None:
        raise RlsimError("overprovision cannot apply with dynamic sampling: it aborts the slowest sequences of a "
                         "round, and the filter keeps whole groups (dynamic sampling's extra prompts are its own "
                         "over-generation)", source=source, field="schedule.overprovision",
                         fix="remove schedule.overprovision (dynamic_sampling.gen_prompts sets how many prompts a "
                             "generation batch draws), or workload.dynamic_sampling")
    if scenario.schedule.overprovision > 0 and scenario.schedule.partial_rollout:
        # found by tests/rl/schedules/test_kind_knob_properties.py: the cut applied to each length_budget
        # segment aborted sequences that were only at their budget (colocated StaleSync: a round short
        # of its batch, an internal assertion), or aborted none (async: overprovision silently unread)
        raise RlsimError("overprovision cannot apply with partial_rollout: it aborts the slowest sequences of a "
                         "round, and a partial rollout cuts every long sequence at length_budget and resumes it "
                         "later, so no segment tells the slowest sequences apart", source=source,
                         field="schedule.overprovision",
                         fix="remove schedule.overprovision, or schedule.partial_rollout (both shorten the long tail)")
    if scenario.workload.dynamic_sampling is not None and scenario.workload.samples_per_prompt == 1:
        raise RlsimError("dynamic sampling filters out groups whose samples all get one reward; a group of one "
                         "sample has no reward spread, and verl's filter keeps it (std > 0 or a single sample: "
                         "recipe/dapo dapo_ray_trainer.py), so nothing would be filtered", source=source,
                         field="workload.dynamic_sampling",
                         fix="remove workload.dynamic_sampling, or raise workload.samples_per_prompt")
    if scenario.workload.reference_cpu_offload and not scenario.workload.reference:
        raise RlsimError("reference_cpu_offload applies to the reference pass, which this workload does not run",
                         source=source, field="workload.reference_cpu_offload",
                         fix="remove workload.reference_cpu_offload, or set workload.reference: true")
    if "lora_refit" in scenario.schedule.model_fields_set and scenario.workload.lora is None:
        raise RlsimError("lora_refit applies to LoRA training (workload.lora): a full fine-tune sends its whole "
                         "model", source=source, field="schedule.lora_refit",
                         fix="remove schedule.lora_refit, or give workload.lora")
    _check_lora_reference(scenario, source)
    if scenario.workload.reference_cpu_offload and scenario.schedule.reference_swap_copies:
        raise RlsimError("a reference whose shards live on the host (FSDP's CPU offload) has no weights on the "
                         "devices to swap", source=source, field="schedule.reference_swap_copies",
                         fix="give one of workload.reference_cpu_offload (verl) and schedule.reference_swap_copies "
                             "(NeMo RL)")
    if scenario.schedule.set_off_default(("reference_swap_copies",)) and not scenario.workload.reference:
        dapo = " (dapo's default)" if scenario.workload.algorithm == "dapo" else ""
        raise RlsimError(f"reference_swap_copies applies to the reference pass, which this workload does not run: "
                         f"workload.reference is false{dapo}", source=source, field="schedule.reference_swap_copies",
                         fix="remove schedule.reference_swap_copies, or set workload.reference: true")
    if "between_gen_batches" in scenario.schedule.model_fields_set and scenario.workload.dynamic_sampling is None:
        raise RlsimError("between_gen_batches applies to dynamic sampling, whose step generates several batches",
                         source=source, field="schedule.between_gen_batches",
                         fix="remove schedule.between_gen_batches (or give workload.dynamic_sampling)")
    _refuse_inapplicable_training_key(scenario, source, workload_file, set_keys)
    _refuse_dispatcher_beside_variable_lengths(scenario, source, workload_file, set_keys)
    _refuse_a_batch_that_never_fills(scenario, source)
    for field, why, fix in _read_past_keys(scenario):
        raise ReadPastError(why, source=source, field=field, fix=fix)
    if scenario.iterations > scenario.limits.max_iterations:
        raise RlsimError(f"{_count(scenario.iterations)} iterations is past limits.max_iterations="
                         f"{scenario.limits.max_iterations}", source=source, field="iterations",
                         fix=LIMITS_FIX.format(name="max_iterations"))
    return scenario



def _check_lora_reference(scenario: Scenario, source: str) -> None:
    """With workload.lora the reference is the actor's resident base with its adapters disabled (verl's
    ref_in_actor: no reference worker is built), so there are no reference weights to keep on the host
    (reference_cpu_offload) or to swap in and out (reference_swap_copies)."""
    if scenario.workload.lora is None:
        return
    for given, field in ((scenario.workload.reference_cpu_offload, "workload.reference_cpu_offload"),
                         (scenario.schedule.reference_swap_copies, "schedule.reference_swap_copies")):
        if given:
            raise RlsimError(f"{field.split('.')[1]} prices host copies of a separate reference model; with "
                             "workload.lora the reference is the actor's base with its adapters disabled (verl's "
                             "ref_in_actor), resident on the devices already", source=source, field=field,
                             fix=f"remove {field}, or train without workload.lora")


def _refuse_a_batch_that_never_fills(scenario: Scenario, source: str) -> None:
    """AReaL's start rule lets (eta + version + 1) x consumer_batch_size rollouts start by each version
    (rl/schedules/areal.py); a trained batch larger than that consumer batch outgrows it by a step's
    shortfall each version, and some step's batch never fills (AReaL's prepare_batch waits, then
    times out)."""
    sched, prompts = scenario.schedule, scenario.workload.prompts_per_step
    consumer = getattr(sched, "consumer_batch_size", None)
    if sched.kind == "areal" and consumer is not None and consumer < prompts:
        raise RlsimError(f"consumer_batch_size {consumer} is below the {prompts} prompts a step trains: by version v "
                         f"AReaL starts at most (max_head_offpolicyness + v + 1) x {consumer} rollouts, so a later "
                         "step's batch never fills and its trainer waits forever", source=source,
                         field="schedule.consumer_batch_size",
                         fix=f"set schedule.consumer_batch_size to at least {prompts} (AReaL's recipes: "
                             "${train_dataset.batch_size}), or remove it")


def _refuse_inapplicable_training_key(scenario: Scenario, source: str, workload_file: str | None,
                                      set_keys: Iterable[str]) -> None:
    """A train_layout, train_params.comm / .memory or forward_micro_batch key given that the training layout
    makes inapplicable (params.py inapplicable_given_key) is an error naming it."""
    w, schedule = scenario.workload, scenario.schedule
    found = inapplicable_given_key(w.train_layout, w.train_params, TRAIN_SOFTWARE[w.train_software].params,
                                   schedule.forward_micro_batch, bool(schedule.failures))
    if found is not None:
        field, message, fix = found
        raise RlsimError(message, source=_error_source([field], source, workload_file, set_keys), field=field,
                         fix=fix)


def _refuse_dispatcher_beside_variable_lengths(scenario: Scenario, source: str, workload_file: str | None,
                                               set_keys: Iterable[str]) -> None:
    """The allgather token dispatcher beside variable-length pipeline sends at pp > 1 on a stack whose
    Megatron-Core refuses the pair (params.TrainSoftware.check_dispatcher) is an error; a planned layout is
    checked where the planner has picked it (rl/llm_costs.py LlmCosts)."""
    w = scenario.workload
    if not isinstance(w.train_layout, Mapping):
        return
    fields = ["workload.train_params.comm.moe_token_dispatcher", "workload.train_params.comm.pp_variable_seq_lengths",
              "workload.train_layout.pp"]
    TRAIN_SOFTWARE[w.train_software].check_dispatcher(w.train_layout, w.train_params.comm,
                                                      _error_source(fields, source, workload_file, set_keys))


ReadPast = list[tuple[str, str, str]]   # (full dotted field, why it is read past, the fix)


def _read_past_keys(scenario: Scenario) -> ReadPast:
    """Keys given away from their defaults that this scenario never reads, so they change no
    prediction (an error, not a silent drop). Presets, engines and importers give none of them."""
    sched = scenario.schedule
    return (_read_past_fallback(scenario.workload.inference) + _read_past_refit(sched) + _read_past_recovery(sched)
            + _read_past_switch(sched) + _read_past_micro_batching(scenario) + _read_past_row_width(scenario)
            + sched.read_past(scenario.workload)
            + _read_past_aux_pools(scenario)
            + _read_past_timers(scenario))


def has_framework_timers(sched: ScheduleConfig) -> bool:
    """Whether the summary carries framework timer names (metrics.verl_phases): a step run as verl's
    hybrid engine (colocated, fuse: full) or one_step_off_policy runs it: one phase after another on
    the trainer (an aux pool of split pools runs some beside the others, which verl's timers do not
    split; the colocated step's reward pool scores in the driver's turn, verl's `reward`)."""
    if sched.aux_devices is not None and sched.kind != "colocated":
        return False
    return sched.kind == "one-step-off" or (sched.kind == "colocated" and sched.fuse == "full")


def _read_past_timers(scenario: Scenario) -> ReadPast:
    """output.timers names phases only a run of the framework's shape has: nemo-rl a colocated (fuse:
    full) or one-step-off step, openrlhf its hybrid engine (colocated, fuse: full) or its trainers
    beside engines of their own (disaggregated, one-step-off)."""
    sched, timers = scenario.schedule, scenario.output.timers
    openrlhf = (sched.kind == "colocated" and has_framework_timers(sched)) or sched.kind in ("disaggregated",
                                                                                            "one-step-off")
    if timers == "verl" or (timers == "nemo-rl" and has_framework_timers(sched)) or (timers == "openrlhf" and openrlhf):
        return []
    run_as = f"kind {sched.kind}" + (f" with fuse: {sched.fuse}" if sched.kind == "colocated" else "")
    shape = ("OpenRLHF's hybrid engine (kind colocated, fuse: full) or split pools (disaggregated, one-step-off)"
             if timers == "openrlhf" else "a colocated (fuse: full) or one-step-off step")
    has = "verl's phases (verl_timing_s)" if has_framework_timers(sched) else "only rlsim's stages (stage_time_s)"
    return [("output.timers", f"timers: {timers} names the phases of {shape}; {run_as} has {has}",
             f"remove output.timers (set by rlsim run --from-{timers}: --set output.timers=verl)")]


def _read_past_fallback(inference: InferenceParams) -> ReadPast:
    """A run prices every rollout collective with the network model on the instance's own ranks
    (rl/llm_costs.py; layout: auto's planner too): the fallback formula serves only the standalone
    predictors called without a topology (decode_step_time_s; rlsim validate V3)."""
    return [(f"workload.inference.{key}", f"{key} is not read by a run: every rollout collective is priced by the "
             "network model on the instance's ranks (the fallback formula serves the standalone predictors without "
             "a topology, e.g. rlsim validate V3)",
             f"remove workload.inference.{key} (the topology's links and latencies set the collectives' times)")
            for key in inference.set_off_default(FALLBACK_COLLECTIVE_KEYS)]


def _read_past_refit(sched: ScheduleConfig) -> ReadPast:
    """The full-tensor refit's constants under refit: reshard; its overlap where every refit stays on
    the devices that trained (colocated StaleSync whose tail never consolidates: rl/llm_costs.py
    weight_sync_s reads refit_overlap only from one set of devices to another)."""
    out: ReadPast = []
    full = sched.refit == "full-tensors"
    whats = {"refit_overlap": "the overlap of its broadcast with its gather",
             "refit_tensor_overhead_s": "the CPU time of building each full tensor",
             "refit_gather_bytes_per_param": "the bytes a parameter its full tensors gather"}
    for key in sched.set_off_default(tuple(whats)):
        if not full:
            what = whats[key]
            out.append((f"schedule.{key}", f"{key} applies to refit: full-tensors ({what}); refit: reshard sends "
                        "each device its shard, without any of these", f"remove schedule.{key}, or set schedule.refit: "
                        "full-tensors"))
        elif key == "refit_overlap" and sched.effective_placement == "colocated" and not (
                sched.effective_staleness >= 1 and sched.effective_threshold < 1):
            out.append(("schedule.refit_overlap", "refit_overlap applies to a refit from the trainers to other "
                        "devices, which StaleSync on the colocated placement runs after a tail consolidation only: "
                        f"at staleness {sched.effective_staleness:g} and stream_threshold "
                        f"{sched.effective_threshold:g} the tail never consolidates",
                        "remove schedule.refit_overlap, or set schedule.staleness >= 1 and stream_threshold < 1"))
    return out


def _read_past_recovery(sched: ScheduleConfig) -> ReadPast:
    """schedule.recovery prices the failures of schedule.failures: without any it is never read."""
    if sched.failures:
        return []
    return [(f"schedule.recovery.{key}", f"recovery.{key} sets what a failure costs, and this run has no "
             "schedule.failures", "remove schedule.recovery, or give schedule.failures")
            for key in sched.recovery.set_off_default(RecoveryConfig.model_fields)]


def _read_past_micro_batching(scenario: Scenario) -> ReadPast:
    """schedule.micro_batching orders packed samples into training micro-batches (rl/llm_costs.py
    micro_batched): padded samples (distqueue.packed: false) and a training token budget
    (train_layout.max_tokens_per_micro_batch, which cuts by tokens in any order) never read it. A
    failure re-plan searches micro-batch sizes from it: accepted there."""
    sched, layout = scenario.schedule, scenario.workload.train_layout
    if not sched.set_off_default(("micro_batching",)) or sched.failures:
        return []
    budget = layout.get("max_tokens_per_micro_batch") if isinstance(layout, Mapping) else None
    if sched.distqueue.packed and (budget is None or str(budget).lower() in ("auto", "none")):
        return []
    why = ("the samples are padded (schedule.distqueue.packed: false): each micro-batch holds micro_batch of them "
           "in order" if not sched.distqueue.packed else f"workload.train_layout.max_tokens_per_micro_batch={budget} "
           "cuts the micro-batches by tokens")
    return [("schedule.micro_batching", f"micro_batching: {sched.micro_batching} orders packed samples into "
             f"micro-batches, and {why}", "remove schedule.micro_batching, or pack the samples "
             "(schedule.distqueue.packed: true) without a training token budget")]


def _read_past_row_width(scenario: Scenario) -> ReadPast:
    """train_params.compute.pad_rows_to (the width of padded rows) and attention_skips_padding (their
    attention over the real tokens): packed samples (schedule.distqueue.packed: true) carry no
    padding, so neither is read there."""
    if not scenario.schedule.distqueue.packed:
        return []
    compute = scenario.workload.train_params.compute
    given = {"pad_rows_to": (compute.pad_rows_to is not None, "the width of padded rows"),
             "attention_skips_padding": (compute.attention_skips_padding, "whether padded rows' attention skips "
                                         "their padding")}
    return [(f"workload.train_params.compute.{key}", f"{key} is {what}, and the samples are packed "
             "(schedule.distqueue.packed: true)", f"remove workload.train_params.compute.{key}, or set "
             "schedule.distqueue.packed: false") for key, (set_, what) in given.items() if set_]


def _reward_field(workload: WorkloadConfig) -> str:
    """Why no reward model runs on the trainer: a rule reward, or one served on engines of its own."""
    return "reward.served.devices: on engines of its own" if workload.reward.served is not None else "reward.kind"


def _read_past_aux_pools(scenario: Scenario) -> ReadPast:
    """A pool of schedule.aux_devices (or fuse: actor's, of aux_fraction) for a model the workload does not
    run stays idle the whole run."""
    pools = scenario.schedule.aux_devices
    w = scenario.workload
    runs = {"reference": bool(w.reference),
            "reward": w.reward.kind == "model" and (w.reward.served is None or w.reward.served.devices is None),
            "critic": w.algorithm == "ppo"}
    for group in pools if isinstance(pools, dict) else ():
        idle = [role for role in group.split("+") if not runs[role]]
        if idle:
            return [(f"schedule.aux_devices.{group}", f"the workload runs no {' / '.join(idle)} model (workload."
                     f"{'reference' if 'reference' in idle else _reward_field(w) if 'reward' in idle else 'algorithm'}), "
                     "so this pool would stay idle", f"remove {' / '.join(idle)} from schedule.aux_devices")]
    if isinstance(pools, int) and not any(runs.values()):
        return [("schedule.aux_devices", "the workload runs no reference, reward model or critic: the aux pool "
                 "would stay idle", "remove schedule.aux_devices")]
    if getattr(scenario.schedule, "fuse", None) == "actor" and not any(runs.values()):
        return [("schedule.fuse", "fuse: actor splits off an aux pool (schedule.aux_fraction) for the reference, "
                 "reward model and critic, and the workload runs none of them: the pool would stay idle",
                 "remove schedule.fuse (fuse: full keeps every device on the actor) and schedule.aux_fraction")]
    return []


def _read_past_switch(sched: ScheduleConfig) -> ReadPast:
    """switch.host_link_efficiency rates the copies over the host link (rl/llm_costs.py switch,
    engine_cycle, reference_swap_s): with none of them it is never read."""
    switch = sched.switch
    # only a colocated placement switches phases, and split pools whose trainer lends its devices
    colocated = (sched.effective_placement == "colocated" or sched.hybrid_rollout is not None
                 or sched.dynamic_resources is not None)
    engine = _read_past_engine_switch(switch, colocated)
    if engine:
        return engine
    if switch.engine_resident and sched.between_gen_batches == "sleep" and sched.set_off_default(("between_gen_batches",)):
        return [("schedule.between_gen_batches", "between_gen_batches: sleep puts the engine to sleep between "
                 "generation batches, and this engine stays resident (switch.engine_resident)",
                 "give stay (or reshard: the weights synced into the awake engine), or engine_resident: false")]
    copies = (colocated and (switch.offload_optimizer or switch.offload_weights
                             or (switch.engine_sleep and switch.engine_sleep_level == 1))) or sched.reference_swap_copies
    if copies or not switch.set_off_default(("host_link_efficiency",)):
        return []
    if not colocated:
        return [("schedule.switch.host_link_efficiency", "on split pools switch.host_link_efficiency rates only the "
                 "reference pass's host copies (schedule.reference_swap_copies), and this run makes none",
                 "remove schedule.switch.host_link_efficiency, or set schedule.reference_swap_copies")]
    return [("schedule.switch.host_link_efficiency", "switch.host_link_efficiency rates the copies over the host "
             "link, and this run makes none: switch.offload_optimizer and offload_weights are false, the engine does "
             "not sleep at level 1 and reference_swap_copies is 0",
             "remove schedule.switch.host_link_efficiency, or turn one of those copies on")]


def _read_past_engine_switch(switch: SwitchParams, colocated: bool) -> ReadPast:
    """engine_resident acts on a colocated placement's phase switch only; kv_realloc_s prices the KV
    pool's release and re-allocation, which a resident engine does not pay (a sleeping one's is
    refused by SwitchParams itself)."""
    if switch.engine_resident and not colocated:
        return [("schedule.switch.engine_resident", "on split pools the rollout engine never gives way to training: "
                 "it is resident anyway", "remove schedule.switch.engine_resident")]
    if switch.engine_resident and switch.set_off_default(("kv_realloc_s",)):
        return [("schedule.switch.kv_realloc_s", "kv_realloc_s prices releasing and re-allocating the KV pool, and "
                 "this engine stays resident (engine_resident): nothing is released", "remove schedule.switch.kv_realloc_s")]
    return []


def error_source(fields: list[str], source: str, workload_name: str | None = None) -> str:
    """Where the fields at fault of a scenario read from ``source`` were written, for an error a model
    raises after the scenario loaded (a TP size that does not divide the heads, a length law's
    sigma): a workload file's own key names that file (it named the scenario file). The scenario file
    is read again, on this error path only. ``workload_name``: the loaded workload's name; a file's
    workload of another name was replaced (--workload, --set workload=...) and is not blamed."""
    path = Path(source)
    if not fields or not path.is_file():
        return source
    try:
        workload = presets.read_yaml(path).get("workload")
    except RlsimError:
        return source
    named = workload.get("preset") if isinstance(workload, Mapping) else workload
    if not isinstance(named, (str, Path)):
        return source
    found = with_paths_from({"workload": str(named)}, folder_of(path))["workload"]
    if not Path(found).is_file() and not Path(str(named)).is_file():
        return source   # a built-in preset: a key the user left to it is not theirs to fix there
    if workload_name is not None and _resolve_workload(found)[0].get("name") != workload_name:
        return source   # the run's workload replaced the file's
    beside = _leaf_paths({k: v for k, v in workload.items() if k != "preset"}, "workload") \
        if isinstance(workload, Mapping) else ()
    return _error_source(fields, source, found if Path(found).is_file() else str(named), beside)


def _error_source(fields: list[str], source: str, workload_file: str | None, set_keys: Iterable[str],
                  related: Iterable[str] = ()) -> str:
    """Where the fields at fault were written: the workload file when they all lie in a workload read
    from a file (and no --set gave them, nor any ``related`` field a cross-field check read beside
    them), else the scenario's source."""
    if not workload_file or not fields:
        return source
    given = tuple(set_keys)
    if related and any(f == k or f.startswith(k + ".") or k.startswith(f + ".") for f in related for k in given):
        return f"{source} (workload from {workload_file})"   # one side of the conflict is the scenario's
    # a field is the scenario's where it or a key under it was given there (a law's `max` given, the
    # law's error at workload.response_length)
    from_file = [f.split(".")[0] == "workload"
                 and not any(f == k or f.startswith(k + ".") or k.startswith(f + ".") for k in given) for f in fields]
    if all(from_file):
        return workload_file
    return f"{source} (workload from {workload_file})" if any(from_file) else source


# Keys only a topology file has at its top level: a scenario given one is a topology file passed
# where a scenario goes (`rlsim run topologies/dgx-h100.yaml`)
_TOPOLOGY_FILE_KEYS = frozenset({"devices_per_node", "scaleup", "scaleout", "host", "nodes_per_domain", "domains",
                                 "supernodes", "racks", "graph", "groups", "collectives", "device_profile"})

# Keys a workload file has at its top level (workloads/*.yaml): a scenario given two of them and no
# workload / topology section is a workload file passed where a scenario goes
# (`rlsim run workloads/grpo-qwen2.5-7b.yaml` said "write workload.description")
_WORKLOAD_FILE_KEYS = frozenset({"model", "prompts_per_step", "samples_per_prompt", "response_length",
                                 "prompt_length", "train_layout", "rollout_layout"})


def check_top_level(data: Mapping[str, Any], source: str) -> None:
    """An unknown top-level key (a YAML typo, a --set without its section) names the section it belongs to."""
    known = set(Scenario.model_fields) - {"source"}
    for key in data:
        if key not in known:
            home = [s for s, model in (("workload", WorkloadConfig), ("schedule", ScheduleConfig))
                    if key in model.model_fields]
            # a section's name one typo off (`topologi:`): named, as a section's misspelt key is (errors.py)
            hint = "" if home else one_typo_from(str(key), known)
            meant = hint.removeprefix("; did you mean '").removesuffix("'?")
            fix = (f"write {home[0]}.{key}" if home else f"rename {key} to {meant}" if meant
                   else f"use one of: {', '.join(sorted(known))}")
            if _TOPOLOGY_FILE_KEYS & set(data):
                fix = ("this is a topology file, not a scenario: give it as --topology FILE (or "
                       "topology: {preset: FILE} in a scenario)")
            elif len(_WORKLOAD_FILE_KEYS & set(data)) >= 2 and not {"workload", "topology"} & set(data):
                fix = ("this is a workload file, not a scenario: give it as --workload FILE (or "
                       "workload: FILE in a scenario)")
            raise RlsimError(f"unknown scenario key {key!r}{hint}", source=source, field=key, fix=fix)


def compared_schedules(given: Mapping[str, Any], kinds: Iterable[str],
                       set_knobs: Collection[str] = ()) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The schedule mapping of each kind in a comparison of `given` (a scenario's schedule section):
    the knobs given that the kind takes, so that a knob only some kinds take (`rollout_devices` in
    colocated vs one-step-off) goes to those, but a partial rollout without a length budget to a kind
    that cuts one at it (_unbudgeted_partial_rollout; ``set_knobs``: the knobs --set gives after);
    and the knobs none of the kinds takes (the caller validates the scenario as given when there are
    any: a knob its own kind does not take either is the error, naming the knob and the kinds that
    take it)."""
    given = dict(given)
    given_kind, placement = given.get("kind", "colocated"), given.get("placement")
    accepted = {kind: SCHEDULE_CLASSES[kind].accepts(placement if kind == given_kind else None) for kind in kinds}
    taken = set().union(*accepted.values()) | {"kind", "placement"}
    unused = [key for key in given if key not in taken]
    per_kind = {kind: {**{k: v for k, v in given.items() if k in keep}, **_reference_swap_switch(given, keep),
                       "kind": kind} for kind, keep in accepted.items()}
    for section in per_kind.values():
        if _unbudgeted_partial_rollout(given, section, set_knobs):
            del section["partial_rollout"]
    return per_kind, unused


def schedule_under_kind(given: Any, kind: str, set_knobs: Collection[str] = ()) -> tuple[dict[str, Any],
                                                                                       list[tuple[str, str]]]:
    """The schedule section under ``kind`` named alone over ``given`` (the scenario's section): the
    knobs given that the kind takes (compared_schedules, as `rlsim compare` gives each of its kinds
    them), and (knob, why) of those it does not take, left out; ``set_knobs``: the knobs --set gives
    beside it. An unknown kind: {kind} alone, for the schema to refuse."""
    if not isinstance(given, Mapping) or not isinstance(kind, str) or kind not in SCHEDULE_CLASSES:
        return {"kind": kind}, []
    per_kind, unused = compared_schedules(given, [kind], set_knobs)
    left_out = []
    for knob in unused:
        takers = ScheduleConfig.kinds_accepting(knob)
        why = f"applies to {' / '.join(takers)}" if takers else "is no schedule knob of any kind"
        if kind in takers:   # on the kind's other placement (stalesync's split pools)
            placement = next(p for p in ("disaggregated", "colocated") if knob in SCHEDULE_CLASSES[kind].accepts(p))
            why = f"is taken by {kind} with placement: {placement} only (set schedule.placement: {placement})"
        left_out.append((knob, why))
    section = per_kind[kind]
    if "partial_rollout" in given and "partial_rollout" not in section and "partial_rollout" not in unused:
        left_out.append(("partial_rollout", f"is {given.get('kind')}'s (resumed after a weight sync, no "
                                            f"length_budget); {kind} cuts a partial rollout at a "
                                            "schedule.length_budget the section does not give"))
    return section, left_out


def _unbudgeted_partial_rollout(given: Mapping[str, Any], section: Mapping[str, Any], set_knobs: Collection[str]) -> bool:
    """Whether ``section`` (a kind's over ``given``) keeps a partial rollout of a kind that has no
    length budget (verl-fully-async: aborted at a weight sync, resumed after it) for a kind that cuts
    one at schedule.length_budget (one-step-off, stalesync, async), with no budget given: that kind
    refuses it as the run starts (rl/schedules/input_checks.py _check_partial_rollout)."""
    if not section.get("partial_rollout"):   # before the classes: a kind's class is made on first use
        return False
    own = SCHEDULE_CLASSES.get(given.get("kind", "colocated"))
    kind = SCHEDULE_CLASSES[section["kind"]]
    return own is not None \
        and "length_budget" not in own.accepts(given.get("placement")) \
        and "length_budget" in kind.accepts(section.get("placement")) \
        and "length_budget" not in section and "length_budget" not in set_knobs


def schedule_left_out_notes(scenario: Scenario) -> list[str]:
    """A note per schedule knob of the scenario that the kind named alone left out (Scenario.schedule_left_out)."""
    kind = scenario.schedule.kind
    return [f"{knob if '.' in knob else f'schedule.{knob}'} {why}; {kind} runs without it (a kind named alone keeps "
            "the scenario's schedule knobs it takes)" for knob, why in scenario.schedule_left_out]


def _reference_swap_switch(given: Mapping[str, Any], keep: Iterable[str]) -> dict[str, Any]:
    """For a kind that takes no `switch` (split pools): the given switch.host_link_efficiency when
    the reference swaps read it (schedule.reference_swap_copies), as that kind's switch section."""
    switch = given.get("switch")
    if "switch" in keep or not given.get("reference_swap_copies") or not isinstance(switch, Mapping) \
            or "host_link_efficiency" not in switch:
        return {}
    return {"switch": {"host_link_efficiency": switch["host_link_efficiency"]}}


# The keys that size a cluster, one of which a topology gives (hardware/topology.py _COUNT_KEYS).
TOPOLOGY_SIZE_KEYS = ("nodes", "domains", "supernodes", "racks")


def _without_replaced_size(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`data` less the topology size keys that a --set / grid size key replaces: the default
    topology's `supernodes: 1` does not survive `--set topology.preset=dgx-h100 --set topology.nodes=8`
    (the size given last, in its own unit, wins; two size keys in the overrides stay an error)."""
    topology = data.get("topology")
    given = {parse_assignment(o)[0] for o in overrides} & {f"topology.{k}" for k in TOPOLOGY_SIZE_KEYS}
    if not given or not isinstance(topology, Mapping):
        return data
    return {**data, "topology": {k: v for k, v in topology.items() if k not in TOPOLOGY_SIZE_KEYS}}


def load_scenario(spec: str | Path | Mapping[str, Any] | Scenario | None = None, *,
                  topology: Any = None, workload: Any = None, schedule: Any = None,
                  overrides: Iterable[str] = (), iterations: int | None = None,
                  seed: int | None = None) -> Scenario:
    """Build the validated, frozen scenario. Keywords replace whole sections, but for ``schedule``
    given as a kind name alone ("colocated"): it keeps the knobs of the scenario's schedule section
    that the kind takes (as `rlsim compare` does) and leaves out the others, and those it reads past,
    each listed in Scenario.schedule_left_out (a run's summary notes them); a mapping replaces the
    section. ``overrides`` are ``--set KEY=VALUE`` items applied last (a preset-name section becomes
    {preset: name, ...}; `schedule.kind=KIND` changes the kind, every knob staying as given)."""
    data, source = scenario_data(spec, topology=topology, workload=workload, schedule=schedule,
                                 overrides=overrides, iterations=iterations, seed=seed)
    _refuse_distributions(data, source)
    return _validate(data, source)


def validate_scenario(data: dict[str, Any], source: str) -> Scenario:
    """The validated scenario of a mapping that scenario_data made (distribution values drawn)."""
    _refuse_distributions(data, source)
    return _validate(data, source)


# --- distribution-value hook (docs/guides/uncertainty.md): a numeric key given as {dist: ...} is
# sampled per replica by simulator.uncertainty; a plain load refuses it, naming the dotted key.
LENGTH_LAW_KEYS = frozenset({"workload.prompt_length", "workload.response_length"})  # their `dist` is the law


def distribution_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose value is a parameter distribution (a mapping with `dist`, not a length law);
    list items by their index (schedule.failures.0.at_s)."""
    out: list[str] = []
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    for key, value in items:
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if "dist" in value and dotted not in LENGTH_LAW_KEYS:
                out.append(dotted)
            else:
                out.extend(distribution_keys(value, dotted + "."))
        elif isinstance(value, list):
            out.extend(distribution_keys(value, dotted + "."))
    return out


def _refuse_distributions(data: Mapping[str, Any], source: str) -> None:
    keys = distribution_keys(data)
    if keys:
        raise RlsimError(f"{keys[0]!r} is a distribution; a single run takes a number", source=source,
                         field=keys[0], fix="run it with --seeds N (each replica samples it), or "
                                            "simulator.uncertainty.replicate(...)")


# The source of a scenario given as a mapping (no file: simulate({...}), an imported framework config)
MAPPING_SOURCE = "<scenario mapping>"


def scenario_data(spec: str | Path | Mapping[str, Any] | Scenario | None = None, *,
                  topology: Any = None, workload: Any = None, schedule: Any = None,
                  overrides: Iterable[str] = (), iterations: int | None = None,
                  seed: int | None = None) -> tuple[dict[str, Any], str]:
    """load_scenario's merged mapping (presets resolved, overrides applied) and source, not validated."""
    overrides = string_items(overrides, field="overrides", what="'KEY=VALUE' strings",
                             example="overrides=['iterations=2']")   # a lone string is one item
    if isinstance(spec, Scenario):
        data, source = spec.to_dict(), spec.source
    elif spec is None:
        # named with what replaced its sections (an error row of `sweep --workload X` said only
        # "<default scenario>", as if X had not been given)
        given = "".join(f", {name} {value}" for name, value in (("topology", topology), ("workload", workload),
                                                                 ("schedule", schedule)) if isinstance(value, (str, Path)))
        data, source = copy.deepcopy(DEFAULT_SCENARIO), f"<default scenario{given}>"
    elif isinstance(spec, Mapping):
        data, source = deep_merge({k: v for k, v in DEFAULT_SCENARIO.items() if k in ("iterations", "seed")},
                                   spec), MAPPING_SOURCE
    elif isinstance(spec, (str, Path)):   # its relative paths read next to it (simulator/paths.py)
        data, source = with_paths_from(presets.read_yaml(spec), folder_of(spec)), str(spec)
    else:
        raise RlsimError(f"a scenario is a YAML path, a mapping or a Scenario, got {type(spec).__name__}",
                         field="scenario", fix="e.g. simulate('my-run.yaml') or simulate({'workload': ...})")
    if topology is not None:
        data["topology"] = topology
    if workload is not None:
        data["workload"] = workload
    schedule, overrides = _kind_named_by_set(data, schedule, overrides)
    alone = None if schedule is None else _put_schedule(data, schedule, overrides)
    if isinstance(data.get("schedule"), str):
        data["schedule"] = {"kind": data["schedule"]}
    if iterations is not None:
        data["iterations"] = iterations
    if seed is not None:
        data["seed"] = seed
    # numpy numbers (a notebook's) as the Python numbers YAML gives: np.int64 nodes were refused
    data = apply_overrides(_without_replaced_size(plain_values(data), overrides), overrides)
    check_top_level(data, source)
    if "topology" not in data:
        data["topology"] = copy.deepcopy(DEFAULT_SCENARIO["topology"])
    if "workload" not in data:
        raise RlsimError("no workload given", source=source, field="workload",
                         fix=f"name a preset ({', '.join(presets.preset_names('workloads'))}) or a mapping")
    # the keys written beside a `preset:` belong to this scenario (its file or --set), not the preset's
    beside = _leaf_paths({k: v for k, v in data["workload"].items() if k != "preset"}, "workload") \
        if isinstance(data["workload"], Mapping) else ()
    try:
        data["topology"] = _normalise_topology(data["topology"])
        data["workload"], workload_source = _resolve_workload(data["workload"])
    except RlsimError as exc:   # a section of the wrong type, an unknown preset: named by this scenario
        raise (exc if exc.source else exc.with_source(source)) from None
    if workload_source:
        set_keys = tuple(str(item).split("=", 1)[0].strip() for item in overrides)
        data[_WORKLOAD_SOURCE] = (workload_source, (*set_keys, *beside))
    if isinstance(data.get("schedule"), str):
        data["schedule"] = {"kind": data["schedule"]}
    if alone:
        data[_KIND_ALONE] = alone
    return data, source


def kind_set_alone(overrides: Iterable[str]) -> tuple[str | None, list[str]]:
    """`--set schedule=KIND` (a kind's name, not a mapping) names the kind alone, as --schedule KIND
    does: (KIND, the other overrides). (None, the overrides) where no item does, or where another item
    gives the section or a key under it before (apply_overrides refuses the second; two
    `schedule=` items replace the section, the last winning, as before)."""
    items = list(overrides)
    keys = [parse_assignment(item) for item in items]
    at = [i for i, (key, _) in enumerate(keys) if key == "schedule"]
    if len(at) != 1 or not isinstance(keys[at[0]][1], str) \
            or any(key.startswith("schedule.") for key, _ in keys[:at[0]]):
        return None, items
    return keys[at[0]][1], items[:at[0]] + items[at[0] + 1:]


def _kind_named_by_set(data: dict[str, Any], schedule: Any, overrides: list[str]) -> tuple[Any, list[str]]:
    """The schedule keyword and the overrides left, `--set schedule=KIND` taken as the keyword
    schedule="KIND" (kind_set_alone: it keeps the section's knobs KIND takes, where it replaced the
    section whole); applied last, it wins over a keyword kind, and a mapping keyword is the section it
    keeps knobs of."""
    kind, rest = kind_set_alone(overrides)
    if kind is None:
        return schedule, overrides
    if schedule is not None and not isinstance(schedule, str):
        data["schedule"] = schedule
    return kind, rest


def _put_schedule(data: dict[str, Any], schedule: Any, overrides: list[str]) -> dict[str, Any] | None:
    """The `schedule` keyword into ``data``: a mapping replaces the section; a kind named alone keeps
    the section's knobs it takes (schedule_under_kind), the others left out, returned for _KIND_ALONE
    (with an import's timers, which _validate leaves out where the kind has not their phases), unless an
    override replaces the section or its kind (then the kind alone, as before: None)."""
    set_keys = {parse_assignment(o)[0] for o in overrides}
    if not isinstance(schedule, str) or set_keys & {"schedule", "schedule.kind"}:
        data["schedule"] = {"kind": schedule} if isinstance(schedule, str) else schedule
        return None
    given = data.get("schedule")
    set_knobs = {key.split(".")[1] for key in set_keys if key.startswith("schedule.")}
    section, left_out = schedule_under_kind({"kind": given} if isinstance(given, str) else given, schedule,
                                            set_knobs)
    data["schedule"] = section
    droppable = sorted(set(section) - {"kind", "placement"} - set_knobs)
    # also an import's timers the kind may not have; not those this command's --set gives (as its knobs)
    return {"left_out": left_out, "droppable": droppable, "timers_given": bool(set_keys & {"output", "output.timers"})}


def _count(n: int) -> str:
    """1000000 -> '1,000,000'; a count too long to read at a glance in e notation."""
    return f"{n:,}" if n < 10**15 else f"{float(n):.3g}"
