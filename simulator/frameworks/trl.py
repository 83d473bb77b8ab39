"""TRL GRPO and RLOO configs -> rlsim scenarios: `rlsim run --from-trl CONFIG.yaml [key=value ...]`.

CONFIG is the YAML `trl grpo --config` (or `trl rloo --config`: ``--framework-schedule rloo``, or
inferred from a key only RLOOConfig has) reads (GRPOConfig, ModelConfig and the script's fields, flat;
the keys that are no field go to `accelerate launch`: ``accelerate_config``, ``num_processes``); a
``key=value`` after it sets a key as TRL's ``--key value`` does. The server of ``vllm_mode: server``
is another command (`trl vllm-serve`): its arguments are ``vllm_serve.<name>=value``. Key names and
defaults: trl_rules.py. How TRL 1.16.0's GRPOTrainer runs a step (trainer/grpo_trainer.py,
generation/vllm_generation.py, generation/vllm_client.py, scripts/vllm_serve.py, read in its wheel):

- one rlsim step is one generation batch: ``generation_batch_size`` samples (default
  per_device_train_batch_size x processes x steps_per_generation, steps_per_generation defaulting to
  gradient_accumulation_steps), i.e. that / num_generations prompts of num_generations samples;
- before generating, the weights go into vLLM if the optimizer has stepped since (sync_weights: each
  parameter gathered whole on its own, ZeRO-3's GatheredParameters or FSDP's summon_full_params, then
  loaded into the colocated engine or streamed over NCCL to the server) -> ``refit: full-tensors``;
- generation, the rewards, the old log-probs (a forward of the policy in chunks of
  per_device_train_batch_size: always with vLLM while vllm_importance_sampling_correction is on, else
  only when the optimizer steps do not line up with the generations), the reference's (beta != 0);
- the batch is shuffled and trained in steps_per_generation slices of per_device_train_batch_size x
  processes samples, num_iterations times, an optimizer step every gradient_accumulation_steps slices;
- ``vllm_mode: colocate``: each group of vllm_tensor_parallel_size processes runs an offline vLLM
  (LLM class) on its own GPUs for its own slice (max_num_seqs = per_device_train_batch_size x
  vllm_tensor_parallel_size x steps_per_generation, max_num_batched_tokens 4096), asleep (level 2)
  between generations with vllm_enable_sleep_mode, else resident -> ``colocated``;
  ``vllm_mode: server``: `vllm serve` on GPUs of its own (tensor x data parallel), the trainer waiting
  for each batch -> ``disaggregated``.

RLOOTrainer (trainer/rloo_trainer.py, 1.16.0) runs the same loop, but always computes the old
log-probs (no vllm_importance_sampling_correction) and defaults beta to 0.05 (the reference forward
on) and num_generations to 2; its leave-one-out baseline is reward arithmetic (GRPO's stage graph).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from ..params import TRL_FUSED_LM_HEAD_BYTES, logprob_traffic
from ..presets import resolve
from .common import (
    DEFAULT_TOPOLOGY,
    DTYPES,
    HF_EAGER,
    SPECULATION_NOTE,
    VLLM_SPECULATIVE_FLAGS,
    FrameworkImport,
    Status,
    Values,
    begin_import,
    begin_workload,
    capped_length,
    classify,
    flat_speculation,
    hf_attention_compute,
    hf_train_software,
    model_for,
    size_topology,
    speculative_entry_status,
    vllm_speculation,
)
from .deepspeed_zero import merge_train_params, zero_train_params
from .trl_accelerate import accelerate_keys
from .trl_rules import DEFAULTS, DEFAULTS_SOURCE, GRPO_ONLY_KEYS, RLOO_DEFAULTS, RLOO_ONLY_KEYS, RULES

# The offline engine TRL's colocated mode starts (LLM class) and the server `trl vllm-serve` runs; TRL
# 1.16 wants vllm 0.22 - 0.31, whose defaults rlsim has not read: vLLM 0.11's stand for them.
COLOCATED_ENGINE, SERVER_ENGINE = "vllm-v1", "vllm-v1-server"
ENGINE_NOTE = "TRL 1.16.0 runs vllm 0.22-0.31: rlsim's {engine} preset (vLLM 0.9-0.11's defaults) stands for it"
COLOCATED_STEP_TOKENS = 4096   # vllm_generation.py: LLM(max_num_batched_tokens=4096)
# PEFT's default LoRA targets for the Llama / Qwen / Mistral families (peft utils/constants.py
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), taken when lora_target_modules is unset.
PEFT_DEFAULT_TARGETS = ["q_proj", "v_proj"]
DISTRIBUTED_TYPES = ("DEEPSPEED", "FSDP", "MULTI_GPU", "NO")
# FSDP1's sharding strategies by name or ShardingStrategy value (accelerate 1.16.0 utils/constants.py
# FSDP_SHARDING_STRATEGY, 1-based; HYBRID_SHARD(_ZERO2) 4-5 not modelled) -> the ZeRO stage.
FSDP1_STAGES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, 1: 3, 2: 2, 3: 0}
# FSDP2's reshard_after_forward, a bool read through str() by accelerate 1.16.0 (utils/launch.py
# prepare_*_env: FSDP_RESHARD_AFTER_FORWARD, then utils/environment.py str_to_bool's words).
FSDP2_RESHARD_WORDS = {**dict.fromkeys(("y", "yes", "t", "true", "on", "1"), True),
                       **dict.fromkeys(("n", "no", "f", "false", "off", "0"), False)}
_FSDP = "accelerate.fsdp_config."


def import_trl(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
               schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """A TRL GRPO or RLOO YAML plus ``key=value`` overrides -> FrameworkImport (vllm_mode says the
    schedule; ``schedule``, --framework-schedule, the trainer: grpo or rloo)."""
    source = str(path)
    _, result, v = begin_import("trl", path, overrides, what="TRL config", rules=RULES,
                                defaults=DEFAULTS, defaults_source=DEFAULTS_SOURCE,   # RLOO's: _is_rloo
                                schedule=None, schedule_fix="", refuses="TRL's argument parser")
    rloo = _is_rloo(v, schedule)
    launcher = v.flat.get("accelerate_config", v.flat.get("config_file"))
    if launcher is not None:
        accelerate, where = accelerate_keys(launcher, path, source)
        v.flat = {**accelerate, **v.flat}   # the TRL config's keys (an accelerate.<key>=value override) win
        result.notes.append(f"accelerate config: {where}")
    flat = v.flat
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    server = _server_mode(v, decided)
    processes, machines = _processes(v, topology, launcher is not None, decided)
    workload = _workload(v, processes, server, "workload.model" in user_sets, rloo, decided)
    sched = _schedule(v, server, workload, rloo)
    total = processes + sched.get("rollout_devices", 0)
    per_node = processes // machines if not server and processes % machines == 0 else None
    topo, note = size_topology(topology, total, "the training processes" + (" and the vLLM server's GPUs"
                                                                           if server else ""),
                               source, any(k.startswith("topology.") for k in user_sets), per_node)
    result.notes.append(note)
    result.scenario = {"topology": topo, "workload": workload, "schedule": sched}
    classify(result, flat, RULES, decided)
    result.notes.append("response-length law: not in a config; rlsim's default law capped at max_completion_length "
                        "(set --set workload.response_length.median / workload.prompt_length to refine)")
    return result


def _is_rloo(v: Values, trainer: str | None) -> bool:
    """Which trainer the config is for: --framework-schedule grpo / rloo, else rloo where it gives a key
    only RLOOConfig has. A key of the other trainer's config only is refused, as TRL's parser does;
    the trainer's own defaults stand for the keys left out."""
    src = v.result.source
    if trainer not in (None, "grpo", "rloo"):
        raise RlsimError(f"--framework-schedule {trainer} is not a TRL trainer", field="--framework-schedule",
                         fix="give grpo or rloo for a TRL config (trl grpo / trl rloo), or none: grpo unless the "
                             "config has an RLOOConfig key")
    own = next((key for key in RLOO_ONLY_KEYS if v.given(key)), None)
    rloo = trainer == "rloo" or (trainer is None and own is not None)
    other = next((key for key in (RLOO_ONLY_KEYS if not rloo else GRPO_ONLY_KEYS) if v.given(key)), None)
    if other is not None:
        name, alt = ("GRPOConfig", "rloo") if not rloo else ("RLOOConfig", "grpo")
        raise RlsimError(f"{other} is not a field of TRL's {name} (trl {'grpo' if not rloo else 'rloo'} refuses it)",
                         source=src, field=other, fix=f"remove {other}, or import the config as "
                                                      f"--framework-schedule {alt}")
    v.defaults = {**DEFAULTS, **(RLOO_DEFAULTS if rloo else {})}
    if rloo:
        v.defaults_source = f"{DEFAULTS_SOURCE} (RLOOConfig)"
        v.result.notes.append("trl rloo" + (f" ({own} is RLOOConfig's)" if trainer is None else "") + ": "
                              "RLOOTrainer's loop, GRPO's stage graph (the leave-one-out baseline is reward "
                              "arithmetic); the old log-probs always computed")
    return rloo


def _server_mode(v: Values, decided: dict[str, tuple[Status, str]]) -> bool:
    """vLLM colocated with the trainer or behind its own server; transformers' generate is refused."""
    if not v.flag("use_vllm"):
        raise RlsimError("use_vllm is false: TRL then generates with transformers' generate inside the trainer, "
                         "which rlsim does not model", source=v.result.source, field="use_vllm",
                         fix="pass use_vllm=true (vllm_mode colocate or server)")
    mode = v("vllm_mode")
    if mode not in ("colocate", "server"):
        raise RlsimError(f"vllm_mode {mode!r} is not one of TRL's", source=v.result.source, field="vllm_mode",
                         fix="use colocate or server")
    server = mode == "server"
    for key in (("vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_max_model_length",
                 "vllm_enable_sleep_mode") if server else ()):
        if v.given(key):
            decided[key] = ("ignored", "colocate mode only: the server takes its own (vllm_serve.*)")
    for key in (() if server else [k for k in v.flat if k.startswith("vllm_serve.")]):
        decided[key] = ("ignored", "server mode only (vllm_mode: server)")
    v.result.schedule_rule = ("disaggregated (vllm_mode server: vLLM on GPUs of its own)" if server
                              else "colocated (vllm_mode colocate: vLLM inside the training processes)")
    return server


def _processes(v: Values, topology: str | None, configured: bool,
               decided: dict[str, tuple[Status, str]]) -> tuple[int, int]:
    """Training processes (one a GPU) and the machines they span: num_processes / num_machines, else
    the accelerate config's; without an accelerate config, accelerate's own defaults (every GPU of one
    machine)."""
    if not configured and not v.given("num_processes"):
        preset, _ = resolve("topologies", topology or DEFAULT_TOPOLOGY)
        per_node = preset.get("devices_per_node")
        count = per_node if isinstance(per_node, int) and per_node > 0 else 8
        v.result.notes.append(f"no accelerate_config: accelerate's defaults without a config file, {count} "
                              "processes (every GPU of one machine) under DDP (MULTI_GPU); give accelerate_config "
                              "(zero3, fsdp2, ... or a path) and num_processes for yours")
        return count, 1
    if v("accelerate.distributed_type") == "NO":   # accelerate's simple launcher: one process, whatever the count
        for key in ("num_processes", "accelerate.num_processes", "num_machines", "accelerate.num_machines"):
            if v.given(key):
                decided[key] = ("ignored", "distributed_type NO: accelerate runs one process on one GPU")
        return 1, 1
    processes = v.count("num_processes") if v.given("num_processes") else v.count("accelerate.num_processes")
    machines = (v.count("num_machines") if v.given("num_machines")
                else v.whole("accelerate.num_machines", 1) or 1)
    if processes % machines:
        raise RlsimError(f"{processes} processes do not split evenly over {machines} machines", source=v.result.source,
                         field="num_processes", fix="give a multiple of num_machines")
    return processes, machines


def _batches(v: Values, processes: int) -> dict[str, int]:
    """prompts_per_step, samples_per_prompt, mini_batch_prompts and ppo_epochs from TRL's batch keys,
    with GRPOConfig.__post_init__'s checks (TRL refuses what they refuse)."""
    src = v.result.source
    per_device, accumulation = v.count("per_device_train_batch_size"), v.count("gradient_accumulation_steps")
    n, iterations = v.count("num_generations"), v.count("num_iterations")
    gen_size, steps = v.whole("generation_batch_size"), v.whole("steps_per_generation")
    slice_size = per_device * processes
    if gen_size is not None and steps is not None:
        raise RlsimError("generation_batch_size and steps_per_generation both given: TRL refuses it", source=src,
                         field="generation_batch_size", fix="give one of them")
    if gen_size is not None and gen_size % slice_size:
        raise RlsimError(f"generation_batch_size {gen_size} is not a multiple of the global batch "
                         f"{per_device} x {processes} = {slice_size} (TRL refuses it)", source=src,
                         field="generation_batch_size", fix=f"give a multiple of {slice_size}")
    steps = steps or (gen_size // slice_size if gen_size else accumulation)
    samples = slice_size * steps
    if n < 2 or samples % n:
        raise RlsimError(f"a generation batch of {samples} samples is not whole groups of num_generations {n} "
                         "(TRL refuses it; it needs at least 2)", source=src, field="num_generations",
                         fix=f"give num_generations >= 2 dividing {samples}")
    if steps % accumulation or (slice_size * accumulation) % n:
        raise RlsimError(f"an optimizer step of {accumulation} slices of {slice_size} samples is not whole prompt "
                         f"groups of a generation batch of {steps} slices: rlsim's optimizer steps take whole groups "
                         "of one batch", source=src, field="gradient_accumulation_steps",
                         fix=f"give gradient_accumulation_steps dividing {steps} whose slices hold whole groups of {n}")
    prompts = samples // n
    return {"prompts_per_step": prompts, "samples_per_prompt": n, "ppo_epochs": iterations,
            "mini_batch_prompts": prompts * accumulation // steps, "per_device": per_device, "steps": steps}


def _workload(v: Values, processes: int, server: bool, model_given: bool, rloo: bool,
              decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    src = v.result.source
    w = begin_workload(v, "model_name_or_path", f"TRL {'RLOO' if rloo else 'GRPO'} config", model_given, decided)
    batches = _batches(v, processes)
    w.update(algorithm="grpo", **{k: batches[k] for k in ("prompts_per_step", "samples_per_prompt",
                                                          "mini_batch_prompts", "ppo_epochs")})
    w["response_length"] = capped_length("response_length", v("max_completion_length"), "max_completion_length",
                                         src, v.result.notes)
    w["train_layout"] = _train_layout(v, batches["per_device"])
    w["train_software"] = hf_train_software(v.flag("use_liger_kernel"), "trl")   # no TP, no CP: params.TRL_ACCELERATE
    w["dtype"] = _dtype(v)
    w["reference"] = _number(v, "beta") != 0
    w["reward"] = _reward(v)
    _lora(v, w, decided)
    # every row as wide as the generation batch's longest (compute.pad_rows_to: batch): _attention
    w["train_params"] = {"compute": {**_fused_head(v), "pad_rows_to": "batch", **_attention(v, decided)}}
    _fsdp_reshard(v, w, decided)
    offload = _offload(v, w["train_layout"]["zero"])
    if offload:
        w["train_params"]["offload"] = offload
    if v("accelerate.distributed_type") == "DEEPSPEED":   # accelerate 1.16.0 utils/dataclasses.py DeepSpeedPlugin:
        # no reduce_bucket_size, overlap_comm nor stage3_* sizes in the config it builds: DeepSpeed's defaults
        on_host = bool(offload.get("fsdp_cpu_offload"))   # offload_param_device cpu: the whole sharded state
        merge_train_params(w, zero_train_params(w["train_layout"]["zero"], overlap_comm=False, optimizer_on_host=bool(
            offload.get("optimizer")) or on_host, params_on_host=on_host))
    _engine(v, w, server, processes, batches)
    if server:
        _server_speculation(v, w, decided)
    return w


def _fused_head(v: Values) -> dict[str, Any]:
    """The log-probs through TRL's fused LM head (params.TRL_FUSED_LM_HEAD_BYTES; the entropy rides in
    it): the completion positions alone (the prompt's and the padding's labels are -100), its tiles
    projected again in the backward; with cast_lm_head_to_fp32 (GRPO) the head's GEMMs in fp32
    outside autocast and its tiles fp32 (twice the bytes)."""
    fp32 = v.flat.get("cast_lm_head_to_fp32") is not None and v.flag("cast_lm_head_to_fp32")
    kernel = tuple(2.0 * b for b in TRL_FUSED_LM_HEAD_BYTES) if fp32 else TRL_FUSED_LM_HEAD_BYTES
    return {**logprob_traffic(kernel, False), "logits_recompute": True, "head_response_only": True,
            **({"head_dtype": "fp32"} if fp32 else {})}


def _engine(v: Values, w: dict[str, Any], server: bool, processes: int, batches: Mapping[str, int]) -> None:
    if server:
        s = "vllm_serve."
        w["rollout_layout"] = {"tp": v.count(s + "tensor_parallel_size"),
                               "gpu_memory_utilization": v.fraction(s + "gpu_memory_utilization"),
                               "weight_dtype": _served_dtype(v, s + "dtype"), "kv_dtype": _served_dtype(v, s + "kv_cache_dtype")}
        w["inference"] = {"enforce_eager": v.flag(s + "enforce_eager")}
        if v(s + "enable_prefix_caching") is not None:
            w["inference"]["enable_prefix_caching"] = v.flag(s + "enable_prefix_caching")
        _forwarded_server_options(v, w)
        cap = v.whole(s + "max_model_len")
        w["engine"] = SERVER_ENGINE
    else:
        tp = v.count("vllm_tensor_parallel_size")
        if processes % tp:
            raise RlsimError(f"vllm_tensor_parallel_size {tp} does not divide the {processes} processes (TRL refuses "
                             "it: each group of that many processes runs one engine)", source=v.result.source,
                             field="vllm_tensor_parallel_size", fix=f"give a divisor of {processes}")
        w["rollout_layout"] = {"tp": tp, "gpu_memory_utilization": v.fraction("vllm_gpu_memory_utilization"),
                               "max_num_seqs": batches["per_device"] * tp * batches["steps"],
                               "weight_dtype": "bf16", "kv_dtype": "bf16"}
        w["inference"] = {"max_num_batched_tokens": COLOCATED_STEP_TOKENS}
        cap = v.whole("vllm_max_model_length")
        w["engine"] = COLOCATED_ENGINE
    if cap is not None:
        w["inference"]["max_model_len"] = cap
    v.result.notes.append(ENGINE_NOTE.format(engine=w["engine"]))


def _refuse_data_parallel_servers_of_a_dense_model(v: Values, model: str | None) -> None:
    """TRL 1.16 scripts/vllm_serve.py ScriptArguments.data_parallel_size: "For dense models, keep this
    at 1. Setting this above `1` for dense models is not supported/useful and will error out (see vLLM
    PR #30739)"."""
    data_parallel = v.count("vllm_serve.data_parallel_size")
    if data_parallel == 1 or model is None:
        return
    from ..llm.architecture import load_model
    try:
        moe = bool(load_model(model).is_moe)
    except RlsimError:   # a model rlsim cannot read: its own error comes later
        return
    if not moe:
        raise RlsimError(f"vllm_serve.data_parallel_size {data_parallel} with a dense model ({model}): TRL says "
                         "it is not supported above 1 for dense models and errors out (scripts/vllm_serve.py)",
                         source=v.result.source, field="vllm_serve.data_parallel_size",
                         fix="set vllm_serve.data_parallel_size=1 and give the server its GPUs by "
                             "vllm_serve.tensor_parallel_size")


def _forwarded_server_options(v: Values, w: dict[str, Any]) -> None:
    """vLLM options `trl vllm-serve` forwards to `vllm serve` that rlsim has fields for."""
    s = "vllm_serve."
    if v(s + "max_num_seqs") is not None:
        w["rollout_layout"]["max_num_seqs"] = v.count(s + "max_num_seqs")
    if v(s + "pipeline_parallel_size") is not None and v.count(s + "pipeline_parallel_size") > 1:
        w["rollout_layout"]["pp"] = v.count(s + "pipeline_parallel_size")
    if v(s + "max_num_batched_tokens") is not None:
        w["inference"]["max_num_batched_tokens"] = v.count(s + "max_num_batched_tokens")
    if v(s + "enable_chunked_prefill") is not None:
        w["inference"]["chunked_prefill"] = v.flag(s + "enable_chunked_prefill")


def _server_speculation(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """`trl vllm-serve --speculative_config JSON` (scripts/vllm_serve.py: forwarded to `vllm serve
    --speculative-config`) -> workload.inference's speculative keys (common.vllm_speculation): a JSON
    string, or the object the command line's YAML reading made of it (its entries flattened)."""
    key = "vllm_serve.speculative_config"
    given = v.flat.get(key)
    if given is None:
        flat_speculation(v, key, w, decided, w["rollout_layout"]["tp"])
        return
    try:
        config = json.loads(given) if isinstance(given, str) else given
    except json.JSONDecodeError as exc:
        raise RlsimError(f"not a JSON object: {exc}", source=v.result.source, field=key,
                         fix=f"pass {key}='{{\"method\": \"eagle\", \"num_speculative_tokens\": 3}}'") from None
    if not isinstance(config, Mapping):
        raise RlsimError(f"expected a JSON object, got {given!r}", source=v.result.source, field=key,
                         fix=f"pass {key}='{{\"method\": \"eagle\", \"num_speculative_tokens\": 3}}'")
    w["inference"].update(vllm_speculation(config, key, v.result.source, w["rollout_layout"]["tp"]))
    for name in config:
        status, reason = speculative_entry_status(name)
        if status == "unsupported":
            v.result.unsupported[f"{key}.{name}"] = reason
        elif name in VLLM_SPECULATIVE_FLAGS:   # a flag of its own key (the others map with the JSON's key)
            v.result.mapped[f"{key}.{name}"] = reason
    v.result.notes.append(SPECULATION_NOTE)


def _served_dtype(v: Values, key: str) -> str:
    """`trl vllm-serve`'s --dtype / --kv-cache-dtype: auto is the model's own (bf16 for the presets)."""
    value = v(key)
    if value == "auto":
        return "bf16"
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    if isinstance(value, str) and value.startswith("fp8"):
        return "fp8"
    raise RlsimError(f"{value!r} is not a dtype rlsim models", source=v.result.source, field=key,
                     fix="use auto, bfloat16, float16 or fp8")


def _train_layout(v: Values, per_device: int) -> dict[str, Any]:
    """The accelerate backend as a ZeRO stage over the training processes (tp 1, pp 1); micro-batches
    of per_device_train_batch_size padded samples; recompute from gradient_checkpointing (or FSDP's
    activation checkpointing)."""
    kind = v("accelerate.distributed_type") or "MULTI_GPU"
    if kind not in DISTRIBUTED_TYPES:
        raise RlsimError(f"distributed_type {kind!r} is not one rlsim models", source=v.result.source,
                         field="accelerate.distributed_type", fix=f"use one of {', '.join(DISTRIBUTED_TYPES)}")
    zero = {"DEEPSPEED": _deepspeed_stage, "FSDP": _fsdp_stage}.get(kind, lambda _v: 0)(v)
    recompute = v.flag("gradient_checkpointing") or v.flag("accelerate.fsdp_config.fsdp_activation_checkpointing")
    return {"tp": 1, "pp": 1, "cp": 1, "zero": zero, "micro_batch": per_device,
            "recompute": "full" if recompute else "none"}


def _deepspeed_stage(v: Values) -> int:
    stage = v("accelerate.deepspeed_config.zero_stage")
    stage = 2 if stage is None else stage   # accelerate's DeepSpeedPlugin default
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise RlsimError(f"ZeRO stage {stage!r} is not one of 0-3", source=v.result.source,
                         field="accelerate.deepspeed_config.zero_stage", fix="give 2 or 3")
    return int(stage)


def _fsdp_version(v: Values) -> int:
    version = v(_FSDP + "fsdp_version")
    version = 1 if version is None else version   # accelerate 1.16.0's FullyShardedDataParallelPlugin default
    if isinstance(version, bool) or version not in (1, 2):
        raise RlsimError(f"FSDP version {version!r} is not one accelerate runs", source=v.result.source,
                         field=_FSDP + "fsdp_version", fix="give 1 or 2")
    return int(version)


def _fsdp_stage(v: Values) -> int:
    """FSDP2 shards every layer's state (ZeRO-3) whatever its reshard_after_forward (_fsdp_reshard);
    FSDP1 by its sharding strategy alone (accelerate 1.16.0: `accelerate launch` always sets
    FSDP_SHARDING_STRATEGY, FULL_SHARD unless the config gives one, and Accelerator.prepare_model takes
    it before reshard_after_forward), as accelerate reads it: a name in any case or its 1-based value."""
    if _fsdp_version(v) == 2:
        return 3
    key = _FSDP + "fsdp_sharding_strategy"
    strategy = v(key)
    strategy = "FULL_SHARD" if strategy is None else strategy
    if isinstance(strategy, str):
        strategy = int(strategy) if strategy.isdigit() else strategy.upper()
    if isinstance(strategy, bool) or not isinstance(strategy, (str, int)) or strategy not in FSDP1_STAGES:
        raise RlsimError(f"FSDP sharding {strategy!r} is not modelled (hybrid sharding replicates across nodes)",
                         source=v.result.source, field=key, fix="use FULL_SHARD, SHARD_GRAD_OP or NO_SHARD")
    return FSDP1_STAGES[strategy]


def _fsdp_reshard(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """FSDP2's reshard_after_forward (accelerate 1.16.0 utils/fsdp_utils.py fsdp2_prepare_model: fully_shard's
    kwarg): false keeps each layer whole from its forward through its backward, still ZeRO-3 (workload
    .train_params.memory.zero3_reshard_after_forward false, as verl's fsdp2 and SkyRL's imports map it).
    FSDP1 reads its sharding strategy instead, FSDP2 not that strategy (_fsdp_stage)."""
    if v("accelerate.distributed_type") != "FSDP":
        return
    key, strategy = _FSDP + "fsdp_reshard_after_forward", _FSDP + "fsdp_sharding_strategy"
    if _fsdp_version(v) == 1:
        if v.given(key):
            decided[key] = ("ignored", "FSDP1 shards by fsdp_sharding_strategy, which `accelerate launch` always "
                                       "sets (FULL_SHARD unless given) and the Accelerator reads first: give "
                                       "fsdp_sharding_strategy (SHARD_GRAD_OP for ZeRO-2)")
        return
    if v.given(strategy):
        decided[strategy] = ("ignored", "FSDP2 reads fsdp_reshard_after_forward (a bool), not FSDP1's strategy")
    value = v(key)
    reshard = value if value is None or isinstance(value, bool) else FSDP2_RESHARD_WORDS.get(str(value).lower())
    if reshard is None and value is not None:
        raise RlsimError(f"FSDP2 takes true or false here, got {value!r}", source=v.result.source, field=key,
                         fix=f"pass {key}=true or false, or {_FSDP}fsdp_version=1 for FSDP1's sharding strategies "
                             "(as fsdp_sharding_strategy)")
    if reshard is False:
        merge_train_params(w, {"memory": {"zero3_reshard_after_forward": False}})


def _offload(v: Values, zero: int) -> dict[str, Any]:
    """DeepSpeed's ZeRO-Offload (the optimizer on the host, stepping there at each optimizer step)
    and, at stage 3, its parameter offload with it (the sharded state on the host for good: rlsim's
    fsdp_cpu_offload, DeepSpeed's bf16 partitions); FSDP's offload_params likewise (fp32 shards)."""
    src = v.result.source
    d = "accelerate.deepspeed_config."
    optimizer = v(d + "offload_optimizer_device") or "none"
    params = v(d + "offload_param_device") or "none"
    if v.flag("accelerate.fsdp_config.fsdp_offload_params"):
        if zero != 3:
            raise RlsimError("FSDP's CPU offload is modelled on fully sharded parameters only", source=src,
                             field="accelerate.fsdp_config.fsdp_offload_params",
                             fix="use fsdp_sharding_strategy FULL_SHARD (or fsdp_version 2), or no offload")
        return {"fsdp_cpu_offload": True}
    for key, device in ((d + "offload_optimizer_device", optimizer), (d + "offload_param_device", params)):
        if device not in ("none", "cpu"):
            raise RlsimError(f"offload to {device!r} is not modelled", source=src, field=key, fix="use cpu or none")
    if params == "cpu":
        if zero != 3 or optimizer != "cpu":
            raise RlsimError("DeepSpeed offloads parameters at ZeRO stage 3 only, and rlsim models it with the "
                             "optimizer offloaded too", source=src, field=d + "offload_param_device",
                             fix="give zero_stage 3 and offload_optimizer_device cpu, or offload_param_device none")
        return {"fsdp_cpu_offload": True, "host_param_bytes_per_param": 2.0}
    if optimizer == "cpu":
        return {"optimizer": True, "scope": "optimizer_step"}
    return {}


def _dtype(v: Values) -> str:
    if v.flag("fp16"):
        return "fp16"
    if v("bf16") is None or v.flag("bf16"):
        return "bf16"
    raise RlsimError("neither bf16 nor fp16: fp32 training is not modelled", source=v.result.source, field="bf16",
                     fix="pass bf16=true")


def _number(v: Values, key: str) -> float:
    value = v(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RlsimError(f"expected a number, got {value!r}", source=v.result.source, field=key, fix=f"pass {key}=0.01")
    return float(value)


def _reward(v: Values) -> dict[str, Any]:
    """A reward model's forward (the grpo script's reward_model_name_or_path), else rule rewards
    scored on the trainer processes once the batch is generated."""
    path = v("reward_model_name_or_path")
    if not path:
        return {"kind": "rule", "handover": "batch"}
    model, how = model_for(path, "reward_model_name_or_path", v.result.source, policy=False)
    v.result.notes.append(f"reward_model_name_or_path {path!r} -> {how}")
    return {"kind": "model", "model": model}


def _attention(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """The compute keys of the model's attention: transformers' attn_implementation, the script's
    (ModelConfig) overridden by model_init_kwargs' (scripts/grpo.py, rloo.py: model_init_kwargs.update),
    unset transformers' default, SDPA. TRL's rows are padded, prompts on the left and completions on the
    right to the batch's longest (grpo_trainer.py _generate_and_score_completions: pad; sliced into
    micro-batches untrimmed: compute.pad_rows_to batch), and go through the model with their attention_mask (_get_per_token_logps_and_entropies), which a flash
    implementation unpads for the attention alone (common.hf_attention_compute)."""
    script, init = "attn_implementation", "model_init_kwargs.attn_implementation"
    key = init if v.given(init) and v(init) is not None else script
    if key == init and v.given(script):
        decided[script] = ("ignored", f"{init} overrides it (scripts/grpo.py: model_init_kwargs.update)")
    impl = v(key) if v.given(key) else None
    knobs = hf_attention_compute(impl, padded=True)
    if knobs is None:
        decided[key] = ("unsupported", f"{impl!r} is not modelled: rlsim prices flash_attention_2 / 3 (and their "
                                       "Hub kernels), sdpa and eager")
        return {}
    if v.given(key):
        what = ("the scores materialized (compute.flash_attention false)" if impl == HF_EAGER else
                "a flash kernel: the padded rows' attention over their real tokens (compute.attention_skips_padding)"
                if knobs else "SDPA's fused kernel over the padded width")
        decided[key] = ("mapped", f"{'unset (transformers default sdpa)' if impl is None else repr(impl)}: {what}")
    return knobs


def _lora(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    if not v.flag("use_peft"):
        for key in ("lora_r", "lora_target_modules"):
            if v.given(key):
                decided[key] = ("ignored", "used with use_peft")
        return
    targets = v("lora_target_modules")
    if targets is None:
        targets = PEFT_DEFAULT_TARGETS
        v.result.notes.append(f"lora_target_modules unset: PEFT's default for the Llama / Qwen / Mistral families, "
                              f"{PEFT_DEFAULT_TARGETS}")
    names = targets if isinstance(targets, list) else [targets]
    w["lora"] = {"rank": v.count("lora_r"),
                 "targets": "all-linear" if names == ["all-linear"] else [str(name) for name in names]}


def _schedule(v: Values, server: bool, w: Mapping[str, Any], rloo: bool) -> dict[str, Any]:
    """colocated or disaggregated; the tensor-by-tensor refit (FSDP gathers fp32 shards: accelerate
    upcasts the parameters under mixed precision); padded micro-batches; the log-prob chunks (RLOO's
    always, GRPO's unless its optimizer steps line up with its generations)."""
    s: dict[str, Any] = {"kind": "disaggregated" if server else "colocated", "refit": "full-tensors",
                         "forward_micro_batch": w["train_layout"]["micro_batch"], "distqueue": {"packed": False}}
    v.result.notes.append("the weight sync is TRL's parameter-by-parameter one (schedule.refit: full-tensors)")
    if v("accelerate.distributed_type") == "FSDP":
        s["refit_gather_bytes_per_param"] = 4.0
    if "lora" in w:
        s["lora_refit"] = "full"   # sync_weights merges the adapters and sends every parameter
    batches = w["prompts_per_step"] // w["mini_batch_prompts"]
    aligned = batches == 1 and w["ppo_epochs"] == 1
    if aligned and not rloo and not v.flag("vllm_importance_sampling_correction"):
        s["recompute_logprob"] = False
        v.result.notes.append("vllm_importance_sampling_correction off with one optimizer step a generation: TRL "
                              "takes the old log-probs as the current ones (no old log-prob pass)")
    if server:
        _refuse_data_parallel_servers_of_a_dense_model(v, w.get("model"))
        s["rollout_devices"] = (v.count("vllm_serve.tensor_parallel_size") * v.count("vllm_serve.data_parallel_size")
                                * w["rollout_layout"].get("pp", 1))
        return s
    if v.flag("vllm_enable_sleep_mode"):
        s["switch"] = {"offload_optimizer": False, "engine_sleep": True, "engine_sleep_level": 2}
    else:
        s["switch"] = {"offload_optimizer": False, "engine_resident": True}
        v.result.notes.append("vllm_enable_sleep_mode off: the engines keep their vllm_gpu_memory_utilization share of "
                              "HBM through training (schedule.switch.engine_resident)")
    return s
