"""SkyRL's config -> rlsim's workload and schedule (the run's shape: skyrl.py reads the config and
says how skyrl 0.3.0 runs a step)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import RlsimError
from ..params import FLASH_ATTN_CROSS_ENTROPY_BYTES, logprob_traffic
from .common import (
    HF_FLASH_ATTENTION,
    HF_SDPA,
    MULTI_TURN_NOTE,
    SPECULATION_NOTE,
    Status,
    Values,
    begin_workload,
    capped_length,
    flat_speculation,
    hf_attention_compute,
    hf_train_software,
    hsdp_shard_size,
    megatron_token_dispatcher,
    merge_train_params,
    without_inapplicable_layout_keys,
)
from .skyrl_rules import MEGATRON_SIZES
from .verl_optimizer import fsdp_step_traffic

# SkyRL's megatron worker sets the Megatron-Bridge provider's variable_seq_lengths True, then its
# moe_token_dispatcher_type from megatron_config (MegatronConfig default "alltoall")
SKYRL_VARIABLE_SEQ_LENGTHS = "skyrl 0.3.0 backends/skyrl_train/workers/megatron/megatron_worker.py"

# skyrl 0.3.0 pins vllm 0.23.0 (its wheel's METADATA, extra "fsdp") and runs it as HTTP servers with
# its own max_num_seqs / max_num_batched_tokens: rlsim's server preset stands for the rest.
ENGINE = "vllm-v1-server"
ENGINE_NOTE = (f"SkyRL 0.3.0 runs vllm 0.23.0 servers: rlsim's {ENGINE} preset (vLLM 0.11's server defaults) "
               "stands for the settings SkyRL does not pass")
# Losses trained on the rollout's log-probs (skyrl ppo_utils LOSSES_WITHOUT_OLD_LOGPROBS).
ROLLOUT_LOGPROB_LOSSES = ("rollout_is", "dppo")
ENGINE_KEY = "generator.inference_engine"


def mode_of(v: Values) -> str:
    """colocated, split or async, as SkyRL's entry points choose (its fully-async trainer asserts
    colocate_all off)."""
    colocated, fully_async = v.flag("trainer.placement.colocate_all"), v.flag("trainer.fully_async.enabled")
    if fully_async and colocated:
        raise RlsimError("fully_async with colocate_all: SkyRL's fully-async trainer refuses it (\"colocate_all is "
                         "not supported for async training yet\")", source=v.result.source,
                         field="trainer.placement.colocate_all", fix="set trainer.placement.colocate_all=false")
    if fully_async:
        v.result.schedule_rule = "areal (fully_async.enabled: SkyRL's staleness manager is AReaL's)"
        return "async"
    v.result.schedule_rule = ("colocated (placement.colocate_all: the engines and the models share the GPUs in turn)"
                              if colocated else "disaggregated (colocate_all false: the engines on GPUs of their own)")
    return "colocated" if colocated else "split"


# SkyRL's FSDP policy and critic train fp32 parameters whatever trainer.bf16 says (skyrl 0.3.0
# backends/skyrl_train/workers/fsdp/fsdp_worker.py: the policy's HFModelWrapper(bf16=
# cfg.policy.inference_only_init), false for a trained policy, the critic's bf16=False;
# model_wrapper.py: torch_dtype=torch.bfloat16 if bf16 else torch.float32): that fp32 shard is the
# master copy, FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
# (distributed/fsdp_strategy.py) casts it only while a layer is gathered, the gradients come back
# fp32 and optim.AdamW keeps m and v fp32: 4 + 4 + 8 bytes a parameter, not Megatron's 18. (The
# reference loads in trainer.bf16's dtype: its weights stay at weight_bytes_per_param.)
FSDP_MASTER_STATE = {"resident_weight_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0,
                     "optimizer_bytes_per_param": 8.0}
# Its optimizer step updates that fp32 shard in place, no bf16 copy to write back as Megatron's
# distributed optimizer does (rlsim's default 30): verl_optimizer.fsdp_step_traffic, 28 B a parameter
FSDP_MASTER_STEP = {"optimizer_traffic_bytes_per_param": fsdp_step_traffic(
    FSDP_MASTER_STATE["resident_weight_bytes_per_param"], FSDP_MASTER_STATE["optimizer_bytes_per_param"])}


def strategy_of(v: Values) -> str:
    strategy = v("trainer.strategy")
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        raise RlsimError(f"trainer.strategy {strategy!r} is not one of SkyRL's", source=v.result.source,
                         field="trainer.strategy", fix="use fsdp or megatron")
    return "megatron" if strategy == "megatron" else "fsdp"


def rollout_gpus(v: Values) -> int:
    """num_engines x tensor x pipeline x data parallel (SkyRL's count: utils.py, trainer.py)."""
    if v(f"{ENGINE_KEY}.backend") != "vllm":
        raise RlsimError(f"inference backend {v(f'{ENGINE_KEY}.backend')!r} is not SkyRL 0.3's", source=v.result.source,
                         field=f"{ENGINE_KEY}.backend", fix="use vllm")
    return (v.count(f"{ENGINE_KEY}.num_engines") * v.count(f"{ENGINE_KEY}.tensor_parallel_size")
            * v.count(f"{ENGINE_KEY}.pipeline_parallel_size") * v.count(f"{ENGINE_KEY}.data_parallel_size"))


def uses_reference(v: Values) -> bool:
    """SkyRL builds a reference model for either KL term (use_ref_model in trainer.build_models)."""
    return v.flag("trainer.algorithm.use_kl_loss") or v.flag("trainer.algorithm.use_kl_in_reward")


def has_critic(v: Values) -> bool:
    """RayPPOTrainer.has_critic: a critic model path."""
    return bool(v("trainer.critic.model.path"))


def gpus_of(v: Values, role: str) -> int:
    return v.count(f"trainer.placement.{role}_num_nodes") * v.count(f"trainer.placement.{role}_num_gpus_per_node")


# ---- the workload ---------------------------------------------------------------------------------
def _multi_turn(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> tuple[int, str]:
    """SkyRL's agent loop (0.3.0 skyrl_gym_generator.py agent_loop): with generator.max_turns > 1 each
    trajectory turns until its environment is done (at max_turns), every engine call capped at
    max_generate_length, and stops before a turn once its context passes max_input_length, so a
    response holds at most max_input_length - 1 + max_generate_length tokens. Batched generation is
    single-turn (generate_batched). Returns the response law's cap and the key it comes from."""
    turn_cap = v.count("generator.sampling_params.max_generate_length")
    turns, prompt_cap = v.count("generator.max_turns"), v.count("trainer.max_prompt_length")
    max_input = v.whole("generator.max_input_length", prompt_cap)
    single = "single-turn generation: the response law is capped at max_generate_length"
    if turns == 1 or v.flag("generator.batched"):
        if turns > 1:
            decided["generator.max_turns"] = ("ignored", "batched generation is single-turn (generate_batched)")
        if v.given("generator.max_input_length"):
            decided["generator.max_input_length"] = ("ignored", single)
        return turn_cap, "generator.sampling_params.max_generate_length"
    if max_input < prompt_cap:   # SkyRL's validate_generator_cfg asserts it
        raise RlsimError(f"max_input_length {max_input} is below max_prompt_length {prompt_cap}", source=v.result.source,
                         field="generator.max_input_length", fix="give max_input_length >= trainer.max_prompt_length")
    w["multi_turn"] = {"max_turns": turns, "max_turn_tokens": turn_cap}
    decided["generator.sampling_params.max_generate_length"] = ("mapped", "workload.multi_turn.max_turn_tokens: each "
                                                                          "engine call's cap")
    v.result.notes.append(MULTI_TURN_NOTE)
    return min(turns * turn_cap, max_input - 1 + turn_cap), "generator.max_input_length"


def workload(v: Values, policy_gpus: int, mode: str, model_given: bool,
             decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    src = v.result.source
    w = begin_workload(v, "trainer.policy.model.path", "SkyRL config", model_given, decided)
    prompts, mini = v.count("trainer.train_batch_size"), v.count("trainer.policy_mini_batch_size")
    if prompts % mini:
        raise RlsimError(f"train_batch_size {prompts} is not a multiple of policy_mini_batch_size {mini} (SkyRL's "
                         "validate_batch_sizes refuses it)", source=src, field="trainer.policy_mini_batch_size",
                         fix="give a divisor of train_batch_size")
    estimator = str(v("trainer.algorithm.advantage_estimator"))
    if estimator == "gae" and not has_critic(v):
        raise RlsimError("advantage_estimator gae needs a critic (trainer.critic.model.path)", source=src,
                         field="trainer.critic.model.path", fix="give the critic's model path, or use grpo")
    w.update(algorithm="ppo" if has_critic(v) else "grpo", prompts_per_step=prompts,
             samples_per_prompt=v.count("generator.n_samples_per_prompt"), mini_batch_prompts=mini,
             ppo_epochs=v.count("trainer.update_epochs_per_batch"))
    w["prompt_length"] = capped_length("prompt_length", v.count("trainer.max_prompt_length"),
                                       "trainer.max_prompt_length", src, v.result.notes)
    cap, cap_key = _multi_turn(v, w, decided)
    w["response_length"] = capped_length("response_length", cap, cap_key, src, v.result.notes)
    strategy = strategy_of(v)
    w["train_layout"] = without_inapplicable_layout_keys(
        _train_layout(v, strategy, policy_gpus, decided), w.get("model"),
        {"etp": "trainer.policy.megatron_config.expert_tensor_parallel_size"}, decided)
    if strategy == "fsdp":   # transformers' model code under FSDP2 (megatron: Megatron's)
        w["train_software"] = hf_train_software(False, "skyrl-fsdp")   # ZeRO 3, no TP: params.SKYRL_FSDP
        merge_train_params(w, {"memory": FSDP_MASTER_STATE, "comm": FSDP_MASTER_STEP})
        _reshard_after_forward(v, w, decided)
        _logits_passes(v, w)
        _hf_attention(v, w)
    else:   # SkyRL's megatron worker: the policy's dispatcher beside variable_seq_lengths=True
        megatron_token_dispatcher(v, "trainer.policy.megatron_config.moe_token_dispatcher_type", w, decided,
                                  variable_seq_lengths=SKYRL_VARIABLE_SEQ_LENGTHS)
    if strategy != "fsdp" and v.given("trainer.flash_attn"):
        # padded megatron rows are re-padded to each micro-batch's longest (megatron_model_wrapper.py
        # remove_left_padding) and Megatron's attention runs their padding: no compute key either way
        decided["trainer.flash_attn"] = ("ignored", "megatron: it picks Transformer Engine's flash or fused attention "
                                                    "backend (megatron_worker.py), fused kernels both, which rlsim "
                                                    "prices alike")
    w["rollout_layout"] = _rollout_layout(v)
    w["engine"] = ENGINE
    v.result.notes.append(ENGINE_NOTE)
    w["inference"] = _inference(v, mode)
    _speculation(v, w, decided)
    w["reference"] = uses_reference(v)
    w["dtype"] = "bf16" if v.flag("trainer.bf16") else "fp32"
    if v.flag("trainer.policy.fsdp_config.cpu_offload") and strategy == "fsdp":
        merge_train_params(w, {"offload": {"fsdp_cpu_offload": True}})
    if w["reference"] and v.flag("trainer.ref.fsdp_config.cpu_offload") and strategy == "fsdp":
        # FSDP2's CPUOffloadPolicy keeps the reference's shards on the host, loaded in bf16 with
        # trainer.bf16 (fsdp_worker.py FSDPRefWorkerBase: HFModelWrapper(bf16=cfg.bf16)); no swap then
        w["reference_cpu_offload"] = True
        w["reference_cpu_offload_bytes_per_param"] = 2.0 if v.flag("trainer.bf16") else 4.0
    _dynamic_sampling(v, w, mode, decided)
    return w


def _logits_passes(v: Values, w: dict[str, Any]) -> None:
    """SkyRL's HF policy (model_wrapper.py HFModelWrapper.forward) divides the logits by the sampling
    temperature in place and takes the log-probs with flash-attn's Triton cross entropy (a skyrl-train
    requirement); its update's forward (worker.py) computes the entropy too, through log_softmax op by
    op or under torch.compile (trainer.policy.use_torch_compile), in the loss with use_entropy_loss."""
    merge_train_params(w, {"compute": logprob_traffic(FLASH_ATTN_CROSS_ENTROPY_BYTES, True)})
    entropy: dict[str, Any] = {"passes": ["update"]}
    if v.flag("trainer.algorithm.use_entropy_loss"):
        entropy["in_loss"] = True
    entropy["kernel"] = "compiled" if v.flag("trainer.policy.use_torch_compile") else "eager-log-softmax"
    w["entropy"] = entropy


def _role_sections(v: Values, section: str) -> list[str]:
    """The given keys of one backend's section of every model (trainer.strategy picks one backend for all)."""
    return [key for key in v.flat for role in ("policy", "ref", "critic")
            if key.startswith(f"trainer.{role}.{section}.")]


def _hf_attention(v: Values, w: dict[str, Any]) -> None:
    """The FSDP models' attention: flash_attention_2 with trainer.flash_attn, else sdpa (model_wrapper.py
    HFModelWrapper: attn_implementation). Packed micro-batches (trainer.remove_microbatch_padding) need
    flash_attention_2, which SkyRL asserts; padded ones (the training batch left-padded to its longest
    prompt + response: dataset/preprocess.py convert_prompts_responses_to_batch_tensors, no fixed width,
    and sliced into micro-batches untrimmed: compute.pad_rows_to batch) go through
    the model with their attention_mask (HFModelWrapper.forward), which flash_attention_2 unpads for the
    attention alone (common.hf_attention_compute)."""
    flash = v.flag("trainer.flash_attn")
    if v.flag("trainer.remove_microbatch_padding"):
        if not flash:
            raise RlsimError("packed micro-batches without flash attention: SkyRL asserts \"Flash attention 2 should "
                             "be used for `remove_microbatch_padding`\" (model_wrapper.py)", source=v.result.source,
                             field="trainer.flash_attn", fix="pass trainer.flash_attn=true, or "
                             "trainer.remove_microbatch_padding=false")
        return
    knobs = hf_attention_compute(HF_FLASH_ATTENTION[0] if flash else HF_SDPA, padded=True)
    w.setdefault("train_params", {}).setdefault("compute", {}).update({"pad_rows_to": "batch", **(knobs or {})})


def _fsdp_shard_size(v: Values, world: int) -> int | None:
    """SkyRL's create_device_mesh (skyrl 0.3.0 backends/skyrl_train/distributed/fsdp_utils.py): the
    policy's fsdp_size over its ``world`` GPUs (FSDPStrategy; common.hsdp_shard_size)."""
    key = "trainer.policy.fsdp_config.fsdp_size"
    return hsdp_shard_size(v(key), key, world, "policy", v.result.source)


def _reshard_after_forward(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The policy's fsdp_config.reshard_after_forward, fully_shard's (skyrl 0.3.0 distributed/fsdp_strategy.py
    _fsdp_init_model): true (SkyRL's default) reshards each layer after its forward; false keeps it gathered
    through its backward (workload.train_params.memory.zero3_reshard_after_forward false: still ZeRO-3, the
    state sharded between steps); an int reshards to that many ranks, not modelled (priced as true)."""
    key = "trainer.policy.fsdp_config.reshard_after_forward"
    value = v(key)
    if value is None or value is True:
        return
    if value is False:
        merge_train_params(w, {"memory": {"zero3_reshard_after_forward": False}})
        return
    if isinstance(value, int) and value >= 1:
        decided[key] = ("unsupported", f"{value}: resharding to {value} ranks after the forward (FSDP2's int "
                                       "reshard_after_forward) is not modelled: priced as true (the whole shard group)")
        return
    raise RlsimError(f"expected true, false or a rank count, got {value!r}", source=v.result.source, field=key,
                     fix=f"pass {key}=true or {key}=false")


def _train_layout(v: Values, strategy: str, policy_gpus: int,
                  decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    recompute = "full" if v.flag("trainer.gradient_checkpointing") else "none"
    if strategy == "megatron":
        section = "trainer.policy.megatron_config"
        layout: dict[str, Any] = {knob: v.count(f"{section}.{key}") for key, knob in MEGATRON_SIZES.items()
                                  if knob != "etp"}
        if v(f"{section}.expert_tensor_parallel_size") is not None:
            layout["etp"] = v.count(f"{section}.expert_tensor_parallel_size")
        layout.update(zero=1, recompute=recompute)   # Megatron's distributed optimizer (SkyRL's DDP config)
        for key in _role_sections(v, "fsdp_config"):
            decided[key] = ("ignored", "the models run with megatron (trainer.strategy): FSDP settings do not apply")
    else:
        sp = v.count("trainer.policy.sequence_parallel_size")
        layout = {"tp": 1, "pp": 1, "cp": sp, "zero": 3, "recompute": recompute}
        if sp > 1:
            layout["ulysses_sp"] = True
        if (shard := _fsdp_shard_size(v, policy_gpus)) is not None:
            layout["zero_shard_size"] = shard
        for key in _role_sections(v, "megatron_config"):
            decided[key] = ("ignored", "the models run with fsdp (trainer.strategy): Megatron settings do not apply")
    tokens = v("trainer.max_tokens_per_microbatch")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        layout["max_tokens_per_micro_batch"] = layout["logprob_max_tokens_per_micro_batch"] = tokens
        for key in ("trainer.micro_train_batch_size_per_gpu", "trainer.micro_forward_batch_size_per_gpu"):
            if v.given(key):
                decided[key] = ("ignored", "max_tokens_per_microbatch > 0: the token budget forms the micro-batches")
    else:
        layout["micro_batch"] = v.count("trainer.micro_train_batch_size_per_gpu")
    return layout


def _rollout_layout(v: Values) -> dict[str, Any]:
    layout: dict[str, Any] = {"tp": v.count(f"{ENGINE_KEY}.tensor_parallel_size"),
                              "gpu_memory_utilization": v.fraction(f"{ENGINE_KEY}.gpu_memory_utilization"),
                              "max_num_seqs": v.count(f"{ENGINE_KEY}.max_num_seqs")}
    ep, dp, tp = (v.count(f"{ENGINE_KEY}.{name}_parallel_size") for name in ("expert", "data", "tensor"))
    if ep > 1 and ep != dp * tp:   # SkyRL's validate_cfg asserts it (skyrl_train/utils/utils.py)
        raise RlsimError(f"expert_parallel_size {ep} is not data_parallel_size x tensor_parallel_size = {dp} x {tp}, "
                         "which SkyRL requires", source=v.result.source, field=f"{ENGINE_KEY}.expert_parallel_size",
                         fix=f"give {dp * tp}, or change data_parallel_size")
    if ep > 1:   # vLLM's enable_expert_parallel over the engine's dp x tp GPUs: dp attention replicas
        layout["ep"] = dp
    if v.count(f"{ENGINE_KEY}.pipeline_parallel_size") > 1:
        layout["pp"] = v.count(f"{ENGINE_KEY}.pipeline_parallel_size")
    layout["weight_dtype"] = layout["kv_dtype"] = v.dtype(f"{ENGINE_KEY}.model_dtype")
    return layout


def _speculation(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """SkyRL 0.3's speculative decoding: generator.inference_engine.speculative_config, passed to vLLM as it is;
    trainer.mtp.enabled sets it to {method: mtp, num_speculative_tokens: trainer.mtp.num_speculative_tokens}
    where it is not given (train/utils/utils.py _apply_mtp_config), beside training the MTP heads, which is
    not modelled (the key stays unsupported)."""
    tp = v.count(f"{ENGINE_KEY}.tensor_parallel_size")
    if flat_speculation(v, f"{ENGINE_KEY}.speculative_config", w, decided, tp):
        return
    if v.given("trainer.mtp.enabled") and v.flag("trainer.mtp.enabled"):
        k = v.count("trainer.mtp.num_speculative_tokens") if v.given("trainer.mtp.num_speculative_tokens") else 1
        w["inference"].update({"speculative_method": "mtp", "num_speculative_tokens": k})
        if v.given("trainer.mtp.num_speculative_tokens"):
            decided["trainer.mtp.num_speculative_tokens"] = ("mapped", "workload.inference.num_speculative_tokens")
        v.result.notes.append(SPECULATION_NOTE)


def _inference(v: Values, mode: str) -> dict[str, Any]:
    """The engine settings SkyRL passes (its own defaults, not vLLM's), and how requests reach it."""
    inference: dict[str, Any] = {
        "max_num_batched_tokens": v.count(f"{ENGINE_KEY}.max_num_batched_tokens"),
        "enforce_eager": v.flag(f"{ENGINE_KEY}.enforce_eager"),
        "enable_prefix_caching": v.flag(f"{ENGINE_KEY}.enable_prefix_caching"),
        "chunked_prefill": True}   # enable_chunked_prefill is never passed to vLLM (inference_servers/utils.py)
    if mode != "async":   # each trajectory its own request (SkyRL's agent loop), or one batched call per engine
        inference["dispatch"] = "per-prompt" if v.flag("generator.batched") else "per-sample"
    return inference


def _dynamic_sampling(v: Values, w: dict[str, Any], mode: str, decided: dict[str, tuple[Status, str]]) -> None:
    """DAPO's filter (trainer_utils.handle_dynamic_sampling): batches of train_batch_size prompts, the
    groups with a signal kept, until a batch is full; a step that needs max_sample_batches stops."""
    kind = v("trainer.algorithm.dynamic_sampling.type")
    if kind is None:
        return
    if mode == "async":
        raise RlsimError("dynamic sampling with fully_async: SkyRL's fully-async trainer refuses it", source=v.result.source,
                         field="trainer.algorithm.dynamic_sampling.type", fix="use fully_async.sample_full_batch, or "
                         "a synchronous run")
    if kind != "filter":
        decided["trainer.algorithm.dynamic_sampling.type"] = ("unsupported", f"{kind}: only filter (DAPO's) is "
                                                              "modelled; this run generates one batch a step")
        return
    cap = v("trainer.algorithm.dynamic_sampling.max_sample_batches")
    w["dynamic_sampling"] = {"gen_prompts": w["prompts_per_step"]}
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
        w["dynamic_sampling"]["max_gen_batches"] = cap


# ---- the schedule ---------------------------------------------------------------------------------
def old_logprob_pass(v: Values) -> bool:
    """RayPPOTrainer._skip_policy_forward negated: the pass runs unless the loss trains on the rollout's
    log-probs (which the engine returns: sampling_params.logprobs), without the KL reward penalty or an
    off-policy correction."""
    correction = "trainer.algorithm.off_policy_correction"
    corrected = (v(f"{correction}.tis_ratio_type") is not None or v(f"{correction}.sequence_mask_metric") is not None
                 or v(f"{correction}.outlier_token_is_threshold_low") is not None
                 or v(f"{correction}.outlier_token_is_threshold_high") is not None
                 or (v(f"{correction}.token_mask_is_threshold_low") is not None
                     and v(f"{correction}.token_mask_is_threshold_high") is not None)
                 or v.flag("trainer.algorithm.use_tis"))
    skip = (v("trainer.algorithm.policy_loss_type") in ROLLOUT_LOGPROB_LOSSES
            and v("generator.sampling_params.logprobs") is not None
            and not v.flag("trainer.algorithm.use_kl_in_reward") and not corrected)
    return not skip


def schedule_of(v: Values, mode: str, w: dict[str, Any], policy_gpus: int, engine_gpus: int,
             decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    s: dict[str, Any] = {"kind": {"colocated": "colocated", "split": "disaggregated", "async": "areal"}[mode],
                         # the FSDP / Megatron weight extractors gather each parameter whole and send it
                         # (fsdp_worker.broadcast_to_inference_engines: weight_extractor.extract_weights)
                         "refit": "full-tensors", "recompute_logprob": old_logprob_pass(v),
                         "distqueue": {"packed": v.flag("trainer.remove_microbatch_padding")}}
    if "micro_batch" in w["train_layout"]:
        s["forward_micro_batch"] = v.count("trainer.micro_forward_batch_size_per_gpu")
    if mode == "colocated":
        _colocated(v, s, w, policy_gpus, engine_gpus)
        return s
    s["rollout_devices"] = engine_gpus
    _split_models(v, s, w, mode, policy_gpus, decided)
    if mode == "async":
        _fully_async(v, s, w)
    return s


def _manual_offload(v: Values, role: str) -> bool:
    """The role's FSDP strategy moves its state by hand (FSDPStrategy.manual_offload: no cpu_offload)."""
    return not v.flag(f"trainer.{role}.fsdp_config.cpu_offload") if strategy_of(v) == "fsdp" else True


def _colocated(v: Values, s: dict[str, Any], w: dict[str, Any], policy_gpus: int, engine_gpus: int) -> None:
    """The engines on the policy's GPUs: sleep level 2 after generating; the policy's weights and
    (offload_after_step) optimizer to the host after the weight sync (WorkerDispatch._finish_weight_sync);
    the reference swapped in for its forward and out for the policy's; a critic's weights in for its
    forward and its update (out between, for the reference's and the policy's), its optimizer for the
    update (verl's critic offload)."""
    src = v.result.source
    if engine_gpus != policy_gpus:
        raise RlsimError(f"colocate_all with {engine_gpus} engine GPUs beside {policy_gpus} policy GPUs (SkyRL asserts "
                         "they are the same)", source=src, field=f"{ENGINE_KEY}.num_engines",
                         fix="give num_engines x tensor x data parallel = the policy's GPUs")
    for role, used in (("ref", uses_reference(v)), ("critic", has_critic(v))):
        if used and gpus_of(v, role) != policy_gpus:
            raise RlsimError(f"colocate_all with {gpus_of(v, role)} {role} GPUs beside {policy_gpus} policy GPUs (SkyRL "
                             "asserts they are the same)", source=src, field=f"trainer.placement.{role}_num_gpus_per_node",
                             fix=f"give the {role} the policy's nodes and GPUs per node")
    manual = _manual_offload(v, "policy")
    s["switch"] = {"offload_weights": manual,
                   "offload_optimizer": manual and v.flag("trainer.policy.optimizer_config.offload_after_step"),
                   "engine_sleep": True, "engine_sleep_level": 2}
    if uses_reference(v) and _manual_offload(v, "ref"):   # the reference's own shard (bf16), in and out
        s["reference_swap_copies"] = s["reference_swap_own_copies"] = 2
    if has_critic(v) and _manual_offload(v, "critic"):
        w["critic_offload"] = {"params": True,
                               "optimizer": v.flag("trainer.critic.optimizer_config.offload_after_step")}


def _split_models(v: Values, s: dict[str, Any], w: dict[str, Any], mode: str, policy_gpus: int,
                  decided: dict[str, tuple[Status, str]]) -> None:
    """Split pools: a reference sharing the policy's GPUs is swapped with it around its forward (the
    policy's weights out and back, the reference's in and out: 4 copies of the shard; its optimizer
    out and back as a per-update offload); a reference or critic on GPUs of their own."""
    src, aux = v.result.source, {}
    if uses_reference(v) and v.flag("trainer.placement.colocate_policy_ref"):
        if gpus_of(v, "ref") != policy_gpus:
            raise RlsimError(f"colocate_policy_ref with {gpus_of(v, 'ref')} reference GPUs beside {policy_gpus} policy "
                             "GPUs (SkyRL asserts they are the same)", source=src,
                             field="trainer.placement.ref_num_gpus_per_node",
                             fix="give the reference the policy's nodes and GPUs per node, or colocate_policy_ref=false")
        manual = _manual_offload(v, "policy")
        own = 2 if _manual_offload(v, "ref") else 0   # the reference's own shard (bf16), in and out
        copies = (2 if manual else 0) + own           # beside the policy's fp32 shard, out and back
        if copies:
            s["reference_swap_copies"] = copies
        if own:
            s["reference_swap_own_copies"] = own
        if manual and v.flag("trainer.policy.optimizer_config.offload_after_step"):
            w.setdefault("train_params", {}).setdefault("offload", {})["optimizer"] = True
    elif uses_reference(v):
        aux["reference"] = gpus_of(v, "ref")
    if has_critic(v):
        aux["critic"] = gpus_of(v, "critic")
    if aux and mode == "async":   # (the placement keys name the reference "ref")
        roles = tuple(f"trainer.placement.{'ref' if model == 'reference' else model}_num_" for model in aux)
        for key in [k for k in v.flat if k.startswith(roles)]:
            decided[key] = ("unsupported", "a model on GPUs of its own beside an asynchronous run is not modelled: "
                                           "rlsim runs it on the trainer's")
    elif aux:
        s["aux_devices"] = aux


def _fully_async(v: Values, s: dict[str, Any], w: Mapping[str, Any]) -> None:
    """SkyRL's fully-async trainer as AReaL's start rule, with its own assertions."""
    src, section = v.result.source, "trainer.fully_async"
    mini, workers = w["mini_batch_prompts"], v.count(f"{section}.num_parallel_generation_workers")
    staleness = v.natural(f"{section}.max_staleness_steps")
    if w["prompts_per_step"] != mini:
        raise RlsimError("fully_async with train_batch_size != policy_mini_batch_size: SkyRL's fully-async trainer "
                         "refuses it", source=src, field="trainer.policy_mini_batch_size",
                         fix=f"give policy_mini_batch_size {w['prompts_per_step']}")
    if not mini <= workers <= mini * (staleness + 1):
        raise RlsimError(f"num_parallel_generation_workers {workers} outside [{mini}, {mini * (staleness + 1)}] "
                         "(mini-batch .. mini-batch x (max_staleness_steps + 1)): SkyRL refuses it", source=src,
                         field=f"{section}.num_parallel_generation_workers", fix="give a count in that range")
    if s["recompute_logprob"]:
        raise RlsimError("fully_async trains on the rollout's log-probs: SkyRL refuses a loss that recomputes them "
                         f"(policy_loss_type {v('trainer.algorithm.policy_loss_type')!r})", source=src,
                         field="trainer.algorithm.policy_loss_type", fix="use rollout_is or dppo")
    if v.flag("generator.batched"):
        raise RlsimError("fully_async with batched generation: SkyRL refuses it (a batched call cannot pause)",
                         source=src, field="generator.batched", fix="set generator.batched=false")
    # the weight sync pauses generation in place (pause_generation: vLLM's mode "keep"), the requests'
    # KV kept unless clear_kv_cache_on_weight_sync resets the running requests' cache (with prefix
    # caching on: fsdp_worker.broadcast_to_inference_engines' reset_prefix_cache)
    cleared = v.flag(f"{section}.clear_kv_cache_on_weight_sync") and v.flag(f"{ENGINE_KEY}.enable_prefix_caching")
    s.update(max_head_offpolicyness=staleness, max_concurrent_rollouts=workers, interruptible=True,
             interrupt_keeps_kv=not cleared)
