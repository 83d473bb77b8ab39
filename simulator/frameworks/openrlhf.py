"""OpenRLHF launch scripts -> rlsim scenarios: `rlsim run --from-openrlhf SCRIPT.sh [key=value ...]`.

Flag names and defaults as in OpenRLHF 0.11.2 (openrlhf/cli/train_ppo_ray.py, read in its wheel:
`pip download --no-deps openrlhf==0.11.2`); the script's command is read by openrlhf_script.py and a
``key=value`` after the script sets a flag (``actor.num_nodes=2`` for ``--actor.num_nodes 2``).
How OpenRLHF runs a step (read in the same wheel, trainer/ppo_trainer.py, ppo_trainer_async.py,
ppo_utils/experience_maker.py, ray/vllm_engine.py):

- ``--train.colocate_all`` (the hybrid engine): the vLLM engines, actor, reference, critic and reward
  model share the actor's GPUs in turn -> ``colocated``; the engines sleep (level 1) between
  generations with ``--vllm.enable_sleep``, DeepSpeed's optimizer state, fp32 master weights and
  gradients go to the host around each update with ``--ds.enable_sleep``.
- otherwise the engines run on GPUs of their own and the actor on its own -> ``disaggregated``
  (generation, then make_experience and ppo_train, then the weight broadcast); the reference, the
  critic and a reward model each run on GPUs of their own unless ``colocate_actor_ref`` /
  ``colocate_critic_reward`` say otherwise -> ``schedule.aux_devices``, a pool each (their passes
  beside each other's and the actor's, as make_experience dispatches them); ``--ds.enable_sleep``
  there is the per-phase offload around each fit.
- ``--train.async_enable``: a generator fills a queue of ``async_queue_size`` batches while the
  trainer trains, each batch whole, generated under a lock the weight broadcast also takes ->
  ``one-step-off`` with ``round_batches`` and staleness = the queue size.

The flat names before 0.10 (``--colocate_all_models``, ``--pretrain``) are read as 0.11.2's
(openrlhf_legacy.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from ..params import FLASH_ATTN_CROSS_ENTROPY_BYTES, logprob_traffic
from .common import (
    HF_FLASH_ATTENTION,
    OPTIMIZER_SETTINGS,
    SAMPLING_SETTINGS,
    FrameworkImport,
    Rule,
    Status,
    Values,
    apply_hydra_overrides,
    begin_workload,
    capped_length,
    classify,
    hf_attention_compute,
    hf_train_software,
    ignored,
    in_table,
    mapped,
    model_for,
    overridden_keys,
    size_topology,
    unsupported,
    world_divides,
)
from .deepspeed_zero import merge_train_params, zero_train_params
from .openrlhf_legacy import LEGACY, LEGACY_DEFAULTS, LEGACY_LENGTHS, legacy_arity, translated
from .openrlhf_script import read_script

DEFAULTS_SOURCE = "OpenRLHF 0.11.2 openrlhf/cli/train_ppo_ray.py (its argparse defaults)"
# OpenRLHF's defaults for the flags rlsim reads when a script leaves them out.
DEFAULTS: dict[str, Any] = {
    "actor.num_nodes": 1, "actor.num_gpus_per_node": 8, "ref.num_nodes": 1, "ref.num_gpus_per_node": 8,
    "critic.num_nodes": 1, "critic.num_gpus_per_node": 8, "reward.num_nodes": 1, "reward.num_gpus_per_node": 8,
    "train.colocate_all": False, "train.colocate_actor_ref": False, "train.colocate_critic_reward": False,
    "vllm.num_engines": None, "vllm.tensor_parallel_size": 1, "vllm.gpu_memory_utilization": 0.95,
    "vllm.enable_prefix_caching": False, "vllm.enforce_eager": False, "vllm.enable_sleep": False,
    "train.async_enable": False, "train.async_queue_size": 1, "ds.zero_stage": 2, "ds.enable_sleep": False,
    "ds.adam_offload": False, "ds.tensor_parallel_size": 1, "ds.ring_attn_size": 1, "ds.packing_samples": False,
    "ds.param_dtype": "bf16", "ds.attn_implementation": "flash_attention_2",
    "actor.gradient_checkpointing_enable": False, "train.dynamic_batch_enable": False,
    "train.max_tokens_per_gpu": 16192, "rollout.max_tokens_per_gpu": None, "rollout.batch_size": 1024,
    "rollout.micro_batch_size": 1, "rollout.n_samples_per_prompt": 1, "rollout.max_new_tokens": None,
    "rollout.vllm_generate_batch_size": None, "train.batch_size": 128, "train.micro_batch_size": 1,
    "train.max_epochs": 1, "data.max_len": 2048, "algo.advantage.estimator": "gae", "algo.kl.init_coef": 0.01,
    "actor.model_name_or_path": None, "critic.model_name_or_path": None, "reward.model_name_or_path": None,
    "reward.remote_url": None, "train.agent_func_path": None, "ref.offload": False,
    "algo.dynamic_filtering_enable": False, "ds.lora.rank": 0, "ds.lora.target_modules": "all-linear",
    "rollout.temperature": 1.0, "actor.entropy_coef": None,
}
# Flags with no value (store_true) and with several (nargs), for reading a script's command line.
SWITCHES = (
    "train.colocate_actor_ref", "train.colocate_critic_reward", "train.colocate_all", "vllm.sync_with_ray",
    "vllm.enable_prefix_caching", "vllm.enforce_eager", "vllm.enable_sleep", "train.async_enable",
    "train.partial_rollout_enable", "ckpt.save_hf", "ckpt.disable_ds", "ckpt.load_enable", "ds.use_universal_ckpt",
    "actor.gradient_checkpointing_enable", "ds.deepcompile", "train.enable_ema", "ds.adam_offload",
    "ds.use_liger_kernel", "ds.overlap_comm", "actor.gradient_checkpointing_reentrant", "data.disable_fast_tokenizer",
    "ds.enable_sleep", "ds.packing_samples", "train.dynamic_batch_enable", "ds.load_in_4bit",
    "reward.normalize_enable", "train.full_determinism_enable", "critic.save_value_network", "algo.kl.unbiased_gradient",
    "algo.kl.use_loss", "algo.advantage.no_std_norm", "ref.offload", "reward.offload", "data.apply_chat_template",
    "algo.dynamic_filtering_enable", "actor.freeze_visual_encoder", "use_ms", "actor.muon.nesterov",
    "actor.muon.no_nesterov", "critic.muon.nesterov", "critic.muon.no_nesterov")
ARITY: dict[str, int | str] = {
    **{name: 0 for name in SWITCHES},
    **{name: 2 for name in ("actor.eps_clip_low_high", "reward.clip_range", "algo.dynamic_filtering_range",
                            "actor.adam.betas", "critic.adam.betas")},
    "algo.advantage.is_correction_threshold": "+", "ds.lora.target_modules": "*"}
# OpenRLHF 0.11.2 pins vllm==0.29.0 (its "vllm" extra) and drives it through AsyncLLMEngine
# (ray/vllm_engine.py), each prompt a request to the least-loaded engine: rlsim's async vLLM V1 preset.
ENGINE = "vllm-v1-async"
ENGINE_NOTE = (f"OpenRLHF 0.11.2 pins vllm 0.29.0 and runs it as AsyncLLMEngine: rlsim's {ENGINE} preset (vLLM "
               "0.9-0.11's async-engine defaults) stands for it")
GROUP_ESTIMATORS = ("reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")

_LOG = "logging, checkpoints and evaluation: rlsim step times exclude them"
_LOSS = "loss / advantage / reward arithmetic on tensors the step already holds: no modelled cost"
_LR = OPTIMIZER_SETTINGS
_DATA = "data loading and prompt formatting on the host: no modelled cost"
_SAMPLING = SAMPLING_SETTINGS
_AUX = "schedule.aux_devices"
_OPTIMIZER_ON_HOST = ("with ds.adam_offload the optimizer state lives on the host already (offload_deepspeed_states "
                      "returns at once)")

RULES: dict[str, Rule] = {
    "actor.num_nodes": mapped("topology.nodes", "the actor's GPUs: the training pool"),
    "actor.num_gpus_per_node": mapped("topology.nodes", "the actor's GPUs per node"),
    **{f"{role}.{k}": mapped(_AUX, f"the {role} model's own GPUs (without colocation)")
       for role in ("ref", "critic", "reward") for k in ("num_nodes", "num_gpus_per_node")},
    "train.colocate_actor_ref": mapped(_AUX, "the reference on the actor's GPUs"),
    "train.colocate_critic_reward": mapped(_AUX, "the critic and the reward model share their GPUs"),
    "train.colocate_all": mapped("schedule.kind", "the hybrid engine: colocated"),
    "train.async_enable": mapped("schedule.kind", "one-step-off (a queue of whole batches)"),
    "train.async_queue_size": mapped("schedule.staleness", "batches generated ahead of the trainer"),
    "train.partial_rollout_enable": mapped("schedule.kind", "one-step-off as without it: the broadcast pauses the "
                                                            "engines mid-batch (vLLM pause_generation, mode keep) "
                                                            "instead of waiting for the batch, the same step cycle; "
                                                            "a batch's early tokens one version older (not tracked)"),
    "vllm.num_engines": mapped("schedule.rollout_devices", "x vllm.tensor_parallel_size"),
    "vllm.tensor_parallel_size": mapped("workload.rollout_layout.tp"),
    "vllm.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization"),
    "vllm.enable_prefix_caching": mapped("workload.inference.enable_prefix_caching"),
    "vllm.enforce_eager": mapped("workload.inference.enforce_eager"),
    "vllm.enable_sleep": mapped("schedule.switch.engine_sleep", "colocated: sleep level 1 between generations"),
    "vllm.sync_backend": unsupported("weights go over NCCL on rlsim's network", neutral="nccl"),
    "vllm.sync_with_ray": unsupported("the broadcast through Ray's collective library is not modelled", neutral=False),
    "algo.advantage.estimator": mapped("workload.algorithm", "gae: ppo (a critic); the group estimators: grpo"),
    "algo.kl.init_coef": mapped("workload.reference", "> 0: OpenRLHF builds the reference model"),
    "algo.dynamic_filtering_enable": mapped("workload.dynamic_sampling", "groups without signal filtered, new "
                                                                         "prompts generated in their place"),
    "algo.dynamic_filtering_range": ignored("the reward band that counts as signal: its share is "
                                            "workload.dynamic_sampling.keep_fraction"),
    "algo.*": ignored(_LOSS),
    "actor.model_name_or_path": mapped("workload.model", "Hugging Face id or folder -> model preset"),
    "critic.model_name_or_path": mapped("workload.critic_model", "PPO's value model"),
    "reward.model_name_or_path": mapped("workload.reward.model", "a reward-model forward"),
    "reward.remote_url": mapped("workload.reward.kind", "an HTTP reward server: a rule reward on host CPUs (rlsim's "
                                                        "default cost law), scored as each prompt's samples end"),
    "train.agent_func_path": mapped("workload.reward.kind", "the agent's reward: a rule reward as each prompt's "
                                                            "samples end (single turn: an environment's steps are "
                                                            "not modelled)"),
    "ref.offload": mapped("workload.reference_cpu_offload", "ZeRO-3 parameter offload of the reference"),
    "reward.offload": unsupported("the reward model's parameter offload is not modelled", neutral=False),
    "rollout.batch_size": mapped("workload.prompts_per_step"),
    "rollout.n_samples_per_prompt": mapped("workload.samples_per_prompt"),
    "rollout.max_new_tokens": mapped("workload.response_length.max", "none: data.max_len - the prompt"),
    "rollout.micro_batch_size": mapped("schedule.forward_micro_batch", "samples per forward micro-batch"),
    "rollout.max_tokens_per_gpu": mapped("workload.train_layout.logprob_max_tokens_per_micro_batch",
                                         "with train.dynamic_batch_enable"),
    "rollout.vllm_generate_batch_size": unsupported("over-sampling a larger generation batch for the async queue "
                                                    "is not modelled", neutral=None),
    "rollout.temperature": mapped("workload.train_params.compute.loss_traffic_bytes_per_logit", "not 1: the actor "
                                  "divides its fp32 logits by it before the log-probs; its effect on lengths belongs "
                                  "in workload.response_length"),
    "rollout.*": ignored(_SAMPLING),
    "data.max_len": mapped("workload.inference.max_model_len", "prompt + response"),
    "data.max_images_per_prompt": unsupported("images in the prompts (VLM) are not modelled", neutral=0),
    "data.*": ignored(_DATA),
    "train.batch_size": mapped("workload.mini_batch_prompts", "samples per optimizer step / n_samples_per_prompt"),
    "train.micro_batch_size": mapped("workload.train_layout.micro_batch"),
    "train.max_epochs": mapped("workload.ppo_epochs"),
    "train.dynamic_batch_enable": mapped("workload.train_layout.max_tokens_per_micro_batch", "token-balanced "
                                                                                             "micro-batches"),
    "train.max_tokens_per_gpu": mapped("workload.train_layout.max_tokens_per_micro_batch",
                                       "with train.dynamic_batch_enable"),
    "train.enable_ema": unsupported("an EMA copy of the weights updated each step is not modelled", neutral=False),
    "train.ema_beta": ignored("used with train.enable_ema"),
    "train.full_determinism_enable": unsupported("deterministic kernels are not modelled", neutral=False),
    "train.num_episodes": ignored("run length: rlsim simulates `iterations` steps (--iterations N)"),
    "train.seed": ignored("seeding: no effect on step time"),
    "ds.zero_stage": mapped("workload.train_layout.zero"),
    "ds.tensor_parallel_size": mapped("workload.train_layout.tp", "DeepSpeed AutoTP"),
    "ds.ring_attn_size": mapped("workload.train_layout.cp", "ring attention over the sequence"),
    "ds.ring_attn_head_stride": unsupported("ring attention's head striding is not modelled", neutral=1),
    "ds.param_dtype": mapped("workload.dtype"),
    "ds.packing_samples": mapped("schedule.distqueue.packed", "forced on by ds.ring_attn_size > 1 or "
                                 "train.dynamic_batch_enable, as OpenRLHF does"),
    "ds.adam_offload": mapped("workload.train_params.offload.optimizer", "ZeRO-Offload: the optimizer state and "
                                                                        "step on the host, and from ZeRO-2 on the "
                                                                        "gradient partition (memory."
                                                                        "grad_partition_on_host); at ZeRO-1 / 2 a "
                                                                        "GPU buffer of the largest parameter (memory."
                                                                        "zero_offload_device_grad_buffers)"),
    "ds.enable_sleep": mapped("schedule.switch.offload_optimizer", "colocated: DeepSpeed's states to the host around "
                                                                  "each update"),
    "ds.lora.rank": mapped("workload.lora.rank", "> 0: LoRA"),
    "ds.lora.target_modules": mapped("workload.lora.targets"),
    "ds.lora.*": ignored("LoRA scaling and dropout: no modelled cost"),
    "ds.load_in_4bit": unsupported("4-bit base weights (QLoRA) are not modelled", neutral=False),
    "ds.attn_implementation": mapped("workload.train_params.compute", "padded rows: a flash kernel's "
                                     "attention_skips_padding, sdpa none, eager flash_attention false"),
    "ds.experts_implementation": unsupported("rlsim prices the experts as grouped GEMMs", neutral=None),
    "ds.use_liger_kernel": mapped("workload.train_software", "true: hf-transformers-liger (Liger's RMSNorm, RoPE, "
                                                            "SwiGLU), false hf-transformers"),
    "ds.deepcompile": unsupported("DeepSpeed's compiler passes are not modelled", neutral=False),
    "ds.zpg": unsupported("ZeRO++ hierarchical partitioning is not modelled", neutral=1),
    "ds.grad_accum_dtype": mapped("workload.train_params.memory.grad_bytes_per_param", "fp32 beside 16-bit "
                                  "weights: ZeRO-1's BF16_Optimizer (bf16, a whole fp32 gradient buffer beside the "
                                  "bf16 gradients) or, under ds.adam_offload or beside fp16, an fp32 grad_accum a "
                                  "parameter; ZeRO-2 as without it; ZeRO-3's fp32 gradient partition"),
    "ds.overlap_comm": mapped("workload.train_params.memory.zero_reduce_buckets", "ZeRO-1 / 2: 2 (1 without), "
                              "DeepSpeed's second reduction bucket beside the first (the all-reduce's copy: memory."
                              "zero_allreduce_copies); the reduction's hidden share stays comm.dp_overlap_fraction"),
    "ds.value_head_prefix": ignored("a module name: no effect on step time"),
    "ds.actor_init_on_gpu": ignored("where the weights are first built (0.9's --actor_init_on_gpu): no effect on "
                                    "step time"),
    "ds.use_universal_ckpt": ignored(_LOG),
    "actor.gradient_checkpointing_enable": mapped("workload.train_layout.recompute", "full"),
    "actor.gradient_checkpointing_reentrant": ignored("the same recompute, reentrant or not"),
    "actor.freeze_visual_encoder": ignored("VLM only"),
    "actor.optim": unsupported("Muon's Newton-Schulz iterations are not modelled", neutral="adam"),
    "critic.optim": unsupported("Muon's Newton-Schulz iterations are not modelled", neutral="adam"),
    **{f"{role}.{k}": ignored(_LR) for role in ("actor", "critic")
       for k in ("adam.*", "muon.*", "lr_scheduler", "lr_warmup_ratio", "min_lr_ratio", "max_norm")},
    "critic.freezing_steps": ignored("the first steps train the critic alone: rlsim's steady step trains both"),
    "critic.save_value_network": ignored(_LOG),
    "actor.entropy_coef": mapped("workload.entropy", "given: the update computes the entropy over the vocabulary on "
                                 "the fp32 logits (eager-fp32), its loss taking the gradient where it is not 0"),
    "actor.*": ignored(_LOSS), "critic.*": ignored(_LOSS),
    "reward.*": ignored(_LOSS),
    **{f"{k}.*": ignored(_LOG) for k in ("eval", "ckpt", "logger")},
    "local_rank": ignored("set by the launcher"), "use_ms": ignored("where models are downloaded from"),
}


def import_openrlhf(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
                    schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """An OpenRLHF launch script plus ``flag=value`` overrides -> FrameworkImport (the flags say the schedule)."""
    source = str(path)
    if schedule:
        raise RlsimError("--framework-schedule is for verl configs", field="--framework-schedule",
                         fix="the script's flags say the schedule (train.colocate_all, train.async_enable)")
    flat = apply_hydra_overrides(read_script(path, {**ARITY, **legacy_arity(ARITY)}), overrides, source,
                                 known=lambda key: key in DEFAULTS or key in LEGACY or in_table(key, RULES),
                                 refuses="OpenRLHF's argument parser")
    flat, old_names = translated(flat)
    result = FrameworkImport("openrlhf", source, {}, rules=RULES, overridden=overridden_keys(overrides))
    v = Values(flat, {**DEFAULTS, **LEGACY_DEFAULTS} if old_names else DEFAULTS, result, DEFAULTS_SOURCE)
    if old_names:
        pairs = ", ".join(f"{name} -> {LEGACY[name] if isinstance(LEGACY[name], str) else ' + '.join(LEGACY[name])}"
                          for name in old_names)
        result.notes.append(f"flags in OpenRLHF's names before 0.10 (0.9.10's), read as 0.11.2's: {pairs}; with "
                            "0.9.10's micro-batch defaults (rollout 8, train 4 samples)")
    if any(name in LEGACY_LENGTHS for name in old_names):
        result.notes.append("0.8.11's length flags: rollout.max_new_tokens = generate_max_len, data.max_len = max_len "
                            "or prompt_max_len + generate_max_len (1024 each unless given); the prompt law is capped "
                            "at data.max_len - 1, as for 0.11.2, not at prompt_max_len")
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    gpus = _gpus(v)
    kind = _kind(v, gpus, decided)
    workload = _workload(v, "workload.model" in user_sets, decided)
    sched = _schedule(v, kind, gpus, workload, decided)
    _attention(v, workload, sched["distqueue"]["packed"], decided)
    if kind != "colocated":
        _deepspeed_sleep(v, workload, decided)
    total = gpus["actor"] + (0 if kind == "colocated" else gpus["rollout"]) + sum(sched.get("aux_devices", {}).values())
    topo, note = size_topology(topology, total, "the actor, vLLM and model groups' GPUs", source,
                               any(k.startswith("topology.") for k in user_sets), v.count("actor.num_gpus_per_node"))
    result.notes.append(note)
    if not any(k.startswith("topology.") or k.startswith("schedule.") for k in user_sets):
        world_divides(v, gpus["actor"], workload["train_layout"], ["ds.tensor_parallel_size", "ds.ring_attn_size"],
                      "OpenRLHF's DeepSpeed actor", "actor.num_gpus_per_node")
    result.scenario = {"topology": topo, "workload": workload, "schedule": sched}
    result.scenario["output"] = {"timers": "openrlhf"}   # the phases under OpenRLHF's timer names
    classify(result, flat, RULES, decided)
    result.notes.append("response-length law: not in a script; rlsim's default law capped at rollout.max_new_tokens "
                        "(else data.max_len) (set --set workload.response_length.max / .median to refine)")
    return result


def _gpus(v: Values) -> dict[str, int]:
    """GPUs of the actor and the engines (nodes x GPUs per node; engines x tp)."""
    out = {"actor": _group_gpus(v, "actor")}
    engines = v("vllm.num_engines")
    if not engines:
        raise RlsimError("no vLLM engines: OpenRLHF then generates with the DeepSpeed actor, which rlsim does not "
                         "model", source=v.result.source, field="vllm.num_engines",
                         fix="pass vllm.num_engines=N (the script's --vllm.num_engines)")
    out["rollout"] = v.count("vllm.num_engines") * v.count("vllm.tensor_parallel_size")
    return out


def _group_gpus(v: Values, role: str) -> int:
    return v.count(f"{role}.num_nodes") * v.count(f"{role}.num_gpus_per_node")


def _kind(v: Values, gpus: Mapping[str, int], decided: dict[str, tuple[Status, str]]) -> str:
    """colocated (the hybrid engine), disaggregated or one-step-off (async), with OpenRLHF's own
    start-up checks (train_ppo_ray.py) where rlsim would otherwise run what OpenRLHF refuses."""
    src, result = v.result.source, v.result
    colocate_all, asynchronous = v.flag("train.colocate_all"), v.flag("train.async_enable")
    if colocate_all and not asynchronous:
        if gpus["rollout"] != gpus["actor"]:
            raise RlsimError(f"the hybrid engine needs vllm.num_engines x vllm.tensor_parallel_size = {gpus['rollout']} "
                             f"to equal the actor's {gpus['actor']} GPUs (OpenRLHF asserts it)", source=src,
                             field="vllm.num_engines", fix="give the engines the actor's GPUs")
        result.schedule_rule = "colocated (train.colocate_all: the hybrid engine)"
        return "colocated"
    if v.flag("vllm.enable_sleep") and colocate_all:
        raise RlsimError("asynchronous training with sleeping engines: OpenRLHF asserts \"Async RLHF is not supported "
                         "with --vllm.enable_sleep\"", source=src, field="vllm.enable_sleep",
                         fix="drop --vllm.enable_sleep (or train.async_enable)")
    if v.flag("vllm.enable_sleep"):
        decided["vllm.enable_sleep"] = ("ignored", "OpenRLHF turns it off without the hybrid engine")
    if v.flag("train.partial_rollout_enable") and not asynchronous:
        raise RlsimError("partial rollouts without asynchronous training: OpenRLHF asserts \"--train.partial_rollout_"
                         "enable requires --train.async_enable\"", source=src, field="train.partial_rollout_enable",
                         fix="add train.async_enable=true, or drop --train.partial_rollout_enable")
    if asynchronous:
        if colocate_all:
            result.notes.append("train.colocate_all with train.async_enable colocates the DeepSpeed models only (as "
                                "OpenRLHF warns): the engines run on GPUs of their own")
        result.schedule_rule = "one-step-off (train.async_enable: a queue of whole batches, staleness = its size)"
        return "one-step-off"
    result.schedule_rule = "disaggregated (vLLM engines on GPUs of their own, synchronous steps)"
    return "disaggregated"


def _workload(v: Values, model_given: bool, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    src = v.result.source
    w = begin_workload(v, "actor.model_name_or_path", "OpenRLHF script", model_given, decided)
    prompts, n = v.count("rollout.batch_size"), v.count("rollout.n_samples_per_prompt")
    _generate_batch(v, prompts, decided)
    w.update(algorithm=_algorithm(v), prompts_per_step=prompts, samples_per_prompt=n,
             mini_batch_prompts=_mini_batch_prompts(v, prompts, n), ppo_epochs=v.count("train.max_epochs"))
    max_len = v.count("data.max_len")
    w["prompt_length"] = capped_length("prompt_length", max(1, max_len - 1), "data.max_len", src, v.result.notes)
    cap = v.whole("rollout.max_new_tokens")
    w["response_length"] = capped_length("response_length", min(cap, max_len) if cap else max_len,
                                         "rollout.max_new_tokens" if cap else "data.max_len", src, v.result.notes)
    w["train_layout"] = _train_layout(v, decided)
    w["train_software"] = hf_train_software(v.flag("ds.use_liger_kernel"))   # DeepSpeed over transformers' models
    _logprobs(v, w)
    w["rollout_layout"] = {"tp": v.count("vllm.tensor_parallel_size"),
                           "gpu_memory_utilization": v.fraction("vllm.gpu_memory_utilization"),
                           "weight_dtype": "bf16", "kv_dtype": "bf16"}   # vllm_engine.py: dtype bfloat16
    w["engine"] = ENGINE
    v.result.notes.append(ENGINE_NOTE)
    w["inference"] = {"max_model_len": max_len, "enforce_eager": v.flag("vllm.enforce_eager"),
                      "enable_prefix_caching": v.flag("vllm.enable_prefix_caching")}
    w["dtype"] = _dtype(v)
    w["reference"] = _number(v, "algo.kl.init_coef") > 0
    if v.flag("ref.offload") and w["reference"] and w["train_layout"]["zero"] == 3:
        w.update(reference_cpu_offload=True, reference_cpu_offload_bytes_per_param=2.0)   # bf16 shards
    elif v.flag("ref.offload"):
        decided["ref.offload"] = ("ignored", "DeepSpeed offloads parameters at ZeRO-3 only (the reference runs at "
                                             f"stage 0 beside a ZeRO-{w['train_layout']['zero']} actor)"
                                  if w["reference"] else "no reference (algo.kl.init_coef 0)")
    w["reward"] = _reward(v)
    _critic(v, w)
    _lora(v, w, decided)
    if v.flag("algo.dynamic_filtering_enable"):
        w["dynamic_sampling"] = {}
        v.result.notes.append("algo.dynamic_filtering_enable: OpenRLHF sends a new prompt for each filtered one at "
                              "once; rlsim generates prompts_per_step / keep_fraction prompts in one pass (the share "
                              "with a signal is workload.dynamic_sampling.keep_fraction, rlsim's default 0.5)")
    if v.flag("ds.adam_offload"):
        w.setdefault("train_params", {})["offload"] = {"optimizer": True, "scope": "optimizer_step"}
    _deepspeed_zero(v, w, decided)
    return w


def _deepspeed_zero(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """DeepSpeed ZeRO 0-3's gradient buffers, ZeRO-3's parameter window and the reduction as
    get_train_ds_config (utils/deepspeed/deepspeed_utils.py) configures them: reduce_bucket_size and the
    stage3_* sizes "auto" (DeepSpeed's defaults), reduce_scatter at ZeRO-3, overlap_comm and
    contiguous_gradients from ds.overlap_comm (contiguous_gradients is DeepSpeed's default either way),
    data_types.grad_accum_dtype from ds.grad_accum_dtype (_grad_accum_fp32)."""
    stage = w["train_layout"]["zero"]
    merge_train_params(w, zero_train_params(stage, overlap_comm=v.flag("ds.overlap_comm"),
                                            optimizer_on_host=v.flag("ds.adam_offload"),
                                            fp32_grad_accum=_grad_accum_fp32(v, stage, decided),
                                            bf16_weights=_dtype(v) == "bf16"))
    if stage == 3 and v.given("ds.overlap_comm"):
        decided["ds.overlap_comm"] = ("ignored", "ZeRO-3 keeps one reduction bucket either way (stage3.py "
                                                 "ipg_buckets); its reduction's hidden share stays comm."
                                                 "fsdp_reduce_overlap_fraction")


# DeepSpeed's names of the dtypes (deepspeed 0.19.6 runtime/config.py DtypeEnum), as its config reads them.
_DEEPSPEED_DTYPES = {"fp16": ("fp16", "float16", "half", "torch.float16"),
                     "fp32": ("fp32", "float32", "float", "torch.float32"),
                     "bf16": ("bf16", "bfloat16", "torch.bfloat16")}


def _grad_accum_fp32(v: Values, stage: int, decided: dict[str, tuple[Status, str]]) -> bool:
    """Whether ds.grad_accum_dtype is fp32 beside 16-bit weights, which DeepSpeed accumulates as
    zero_train_params says: ZeRO-1's BF16_Optimizer (bf16 weights, not under ZeRO-Offload: engine.py
    _do_optimizer_sanity_check) or fp32 grad_accum, ZeRO-3's fp32 partition; ZeRO-2 holds and reduces what
    16-bit does (read, listed ignored with the reason). The model's own dtype is DeepSpeed's default; ZeRO-0
    refuses any other (engine.py: "unsupported mix of model_dtype and grad_accum_dtype"); a 16-bit
    accumulation of the other 16-bit dtype is not modelled."""
    value = v("ds.grad_accum_dtype")
    if value is None:
        return False
    names = {name for name, aliases in _DEEPSPEED_DTYPES.items() if str(value) in aliases}
    if not names:
        raise RlsimError(f"{value!r} is not a DeepSpeed dtype", source=v.result.source, field="ds.grad_accum_dtype",
                         fix="use fp32, bf16 or fp16, or drop --ds.grad_accum_dtype")
    dtype, model = names.pop(), _dtype(v)
    if dtype == model:
        decided["ds.grad_accum_dtype"] = ("ignored", "the model's dtype: DeepSpeed's default")
        return False
    if stage == 0:
        raise RlsimError(f"DeepSpeed without ZeRO refuses {dtype} gradient accumulation beside {model} weights "
                         "(engine.py _do_optimizer_sanity_check: unsupported mix)", source=v.result.source,
                         field="ds.grad_accum_dtype", fix="drop --ds.grad_accum_dtype, or use --ds.zero_stage 1-3")
    bf16_optimizer = dtype == "fp32" and model == "bf16" and stage == 1 and not v.flag("ds.adam_offload")
    if dtype == "fp32" and stage == 2:
        decided["ds.grad_accum_dtype"] = ("ignored", "deepspeed 0.19.6's ZeRO-2 takes no fp32 grad_accum (stage_1_and_2"
                                          ".py use_grad_accum_attribute: ZeRO-1 only): its partition's gradients are "
                                          f"accumulated in the {model} grads_in_partition and reduced in {model}, as "
                                          "without it")
    if bf16_optimizer and v.flag("ds.enable_sleep"):
        raise RlsimError("ds.enable_sleep offloads DeepSpeed's states with model.optimizer.offload_states "
                         "(utils/deepspeed/deepspeed_utils.py offload_deepspeed_states, from the actor's init), which "
                         "ZeRO-1's BF16_Optimizer (ds.grad_accum_dtype fp32 beside bf16 weights) does not have "
                         "(deepspeed 0.19.6: only stage_1_and_2.py and stage3.py define it): OpenRLHF fails",
                         source=v.result.source, field="ds.enable_sleep",
                         fix="drop --ds.enable_sleep or --ds.grad_accum_dtype fp32, or use --ds.zero_stage 3")
    modelled = dtype == "fp32"
    if not modelled:
        decided["ds.grad_accum_dtype"] = ("unsupported", f"{dtype} gradient accumulation beside {model} weights at "
                                          f"ZeRO-{stage}{' with ZeRO-Offload' if v.flag('ds.adam_offload') else ''} "
                                          "(stage_1_and_2.py use_separate_grad_accum) is not modelled: the "
                                          f"gradients priced in {model}")
    return modelled


def _logprobs(v: Values, w: dict[str, Any]) -> None:
    """OpenRLHF's Actor.forward (models/actor.py; the reference runs it too) casts the logits to fp32,
    divides them by rollout.temperature in place where it is not 1 and takes the log-probs with
    flash-attn's Triton cross entropy (models/utils.py log_probs_from_logits; flash-attn is a
    requirement); its update computes the entropy op by op on those fp32 logits (compute_entropy)
    where actor.entropy_coef is given, its loss taking the gradient where it is not 0."""
    scaled = _number(v, "rollout.temperature") != 1.0
    w.setdefault("train_params", {}).setdefault("compute", {}).update(
        logprob_traffic(FLASH_ATTN_CROSS_ENTROPY_BYTES, scaled, fp32_logits=True))
    if v("actor.entropy_coef") is not None:
        in_loss = _number(v, "actor.entropy_coef") != 0
        w["entropy"] = {"passes": ["update"], **({"in_loss": True} if in_loss else {}), "kernel": "eager-fp32"}


def _attention(v: Values, w: dict[str, Any], packed: bool, decided: dict[str, tuple[Status, str]]) -> None:
    """The model's attention (ds.attn_implementation, flash_attention_2 by default; models/actor.py loads
    the model with it): packed rows run flash_attention_2 whatever it says (train_ppo_ray.py, 0.11.2:
    698-704, swaps in flash_attention_2 where the name has no "flash_attention"); padded rows, each
    micro-batch right-padded to its longest sample (replay_buffer.py: remove_padding_in_sequences, then
    zero_pad_sequences; experience_maker.py concat_experiences alike), go through the model with their
    attention_mask (Actor.forward), which a flash implementation unpads for the attention alone."""
    key, impl = "ds.attn_implementation", v("ds.attn_implementation")
    if packed:
        if v.given(key) and impl not in HF_FLASH_ATTENTION:
            decided[key] = ("ignored", "packed rows: OpenRLHF swaps in flash_attention_2 (train_ppo_ray.py)")
        return
    knobs = hf_attention_compute(impl, padded=True)
    if knobs is None:
        decided[key] = ("unsupported", f"{impl!r}: rlsim prices flash_attention_2 / 3, sdpa and eager")
        return
    w.setdefault("train_params", {}).setdefault("compute", {}).update(knobs)


def _generate_batch(v: Values, prompts: int, decided: dict[str, tuple[Status, str]]) -> None:
    """rollout.vllm_generate_batch_size: the batch's own size is OpenRLHF's default (it sets it so);
    a larger one over-samples for the async queue, which OpenRLHF refuses without async training."""
    if not v.given("rollout.vllm_generate_batch_size") or v("rollout.vllm_generate_batch_size") is None:
        return
    size = v.count("rollout.vllm_generate_batch_size")
    if size == prompts:
        decided["rollout.vllm_generate_batch_size"] = ("ignored", "rollout.batch_size, OpenRLHF's default for it")
    elif size > prompts and not v.flag("train.async_enable"):
        raise RlsimError(f"a generation batch of {size} prompts over a rollout batch of {prompts} without "
                         "asynchronous training: OpenRLHF asserts it needs --train.async_enable", source=v.result.source,
                         field="rollout.vllm_generate_batch_size",
                         fix="add train.async_enable=true, or give rollout.batch_size or less")


def _algorithm(v: Values) -> str:
    estimator = v("algo.advantage.estimator")
    if estimator == "gae":
        return "ppo"
    if estimator in GROUP_ESTIMATORS:
        return "grpo"
    raise RlsimError(f"{estimator!r} is not one of OpenRLHF's advantage estimators", source=v.result.source,
                     field="algo.advantage.estimator", fix=f"use gae or one of {', '.join(GROUP_ESTIMATORS)}")


def _mini_batch_prompts(v: Values, prompts: int, n: int) -> int:
    """train.batch_size samples per optimizer step as whole prompt groups (rlsim's mini-batches)."""
    samples = v.count("train.batch_size")
    if samples % n or prompts % (samples // n or 1) or samples > prompts * n:
        raise RlsimError(f"train.batch_size {samples} is not a whole number of prompt groups of {n} that divides the "
                         f"rollout of {prompts} prompts", source=v.result.source, field="train.batch_size",
                         fix=f"rlsim's mini-batches take whole prompt groups: give a multiple of {n} that divides "
                             f"{prompts * n}")
    return samples // n


def _number(v: Values, key: str) -> float:
    value = v(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RlsimError(f"expected a number, got {value!r}", source=v.result.source, field=key, fix=f"pass {key}=0.01")
    return float(value)


def _dtype(v: Values) -> str:
    value = v("ds.param_dtype")
    if value not in ("bf16", "fp16"):
        raise RlsimError(f"{value!r} is not one of OpenRLHF's param dtypes", source=v.result.source,
                         field="ds.param_dtype", fix="use bf16 or fp16")
    return str(value)


def _reward(v: Values) -> dict[str, Any]:
    """A remote reward (an HTTP server, or the agent function's) scores each prompt's samples in the
    engine's process as they end (vllm_engine.py generate_responses); else a reward model's forward."""
    if v("reward.remote_url") or v("train.agent_func_path"):
        return {"kind": "rule", "handover": "sample"}
    path = v("reward.model_name_or_path")
    if not path:
        raise RlsimError("no reward: OpenRLHF needs a reward model, a remote reward or an agent function",
                         source=v.result.source, field="reward.model_name_or_path",
                         fix="pass reward.model_name_or_path=HF_ID, reward.remote_url=URL or train.agent_func_path=FILE")
    model, how = model_for(str(path).split(",")[0], "reward.model_name_or_path", v.result.source, policy=False)
    v.result.notes.append(f"reward.model_name_or_path {path!r} -> {how}")
    return {"kind": "model", "model": model}


def _critic(v: Values, w: dict[str, Any]) -> None:
    """gae: a critic, by default the reward model's architecture (or the actor's with a remote
    reward), as train_ppo_ray.py picks it."""
    if w["algorithm"] != "ppo":
        return
    path = v("critic.model_name_or_path")
    if path:
        if path == v("actor.model_name_or_path"):
            return
        model, how = model_for(path, "critic.model_name_or_path", v.result.source, policy=False)
    elif w["reward"]["kind"] == "model":   # _reward resolved the reward model's path already
        model, how = w["reward"]["model"], "the reward model's architecture (OpenRLHF's default critic)"
    else:
        return
    if model != w.get("model"):
        w["critic_model"] = model
        v.result.notes.append(f"critic -> {how}")


def _lora(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    rank = v("ds.lora.rank")
    if not rank:
        if v.given("ds.lora.target_modules"):
            decided["ds.lora.target_modules"] = ("ignored", "used with ds.lora.rank > 0")
        return
    targets = v("ds.lora.target_modules")
    names = targets if isinstance(targets, list) else [targets]
    w["lora"] = {"rank": v.count("ds.lora.rank"),
                 "targets": "all-linear" if names in (["all-linear"], []) else [str(name) for name in names]}


def _train_layout(v: Values, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """DeepSpeed ZeRO over the actor's GPUs, AutoTP ds.tensor_parallel_size, ring attention as cp;
    fixed micro-batches of train.micro_batch_size samples, or token budgets with dynamic batching."""
    stage = v("ds.zero_stage")
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise RlsimError(f"ZeRO stage {stage!r} is not one of 0-3", source=v.result.source, field="ds.zero_stage",
                         fix="pass ds.zero_stage=2 or 3")
    layout: dict[str, Any] = {"tp": v.count("ds.tensor_parallel_size"), "pp": 1, "cp": v.count("ds.ring_attn_size"),
                              "zero": stage, "recompute": "full" if v.flag("actor.gradient_checkpointing_enable")
                              else "none"}
    if v.flag("train.dynamic_batch_enable"):
        tokens = v.count("train.max_tokens_per_gpu")
        layout["max_tokens_per_micro_batch"] = tokens
        layout["logprob_max_tokens_per_micro_batch"] = v.whole("rollout.max_tokens_per_gpu", tokens)
        for key in ("train.micro_batch_size", "rollout.micro_batch_size"):
            if v.given(key):
                decided[key] = ("ignored", "train.dynamic_batch_enable: the token budgets set the micro-batches")
    else:
        layout["micro_batch"] = v.count("train.micro_batch_size")
        for key in ("train.max_tokens_per_gpu", "rollout.max_tokens_per_gpu"):
            if v.given(key):
                decided[key] = ("ignored", "used with train.dynamic_batch_enable")
    return layout


def _schedule(v: Values, kind: str, gpus: Mapping[str, int], w: Mapping[str, Any],
              decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    s: dict[str, Any] = {"kind": kind, "refit": "full-tensors"}
    # ppo_actor.broadcast_to_vllm: each parameter gathered whole (ZeRO-3) on the actor's rank 0 and
    # broadcast to every engine (CUDA IPC on the hybrid engine), one tensor at a time
    v.result.notes.append("the weight sync is OpenRLHF's tensor-by-tensor one (schedule.refit: full-tensors)")
    # train_ppo_ray.py (0.11.2: 686-694; 0.9.10: 560-563) turns packing on for ring attention and dynamic batching
    packed = v.flag("ds.packing_samples") or v.flag("train.dynamic_batch_enable") or v.count("ds.ring_attn_size") > 1
    if packed and not v.flag("ds.packing_samples"):
        v.result.notes.append("ds.packing_samples off: OpenRLHF turns it on for ds.ring_attn_size > 1 or "
                              "train.dynamic_batch_enable (train_ppo_ray.py), so the rows are packed")
    s["distqueue"] = {"packed": packed}
    if packed and not v.flag("train.dynamic_batch_enable"):
        s["micro_batching"] = "sequence"   # fixed sample counts in order, not token-balanced
    if not v.flag("train.dynamic_batch_enable"):
        s["forward_micro_batch"] = v.count("rollout.micro_batch_size")
    if w["reference"] and (kind == "colocated" or v.flag("train.colocate_all") or v.flag("train.colocate_actor_ref")) \
            and _group_gpus(v, "ref") != gpus["actor"]:
        raise RlsimError(f"the reference on the actor's GPUs needs ref.num_nodes x ref.num_gpus_per_node = "
                         f"{_group_gpus(v, 'ref')} to equal the actor's {gpus['actor']} (OpenRLHF asserts it)",
                         source=v.result.source, field="ref.num_gpus_per_node",
                         fix="give the reference the actor's nodes and GPUs per node")
    if kind == "colocated":
        _hybrid_engine_switch(v, s, decided)
        return s
    s["rollout_devices"] = gpus["rollout"]
    aux = _aux_devices(v, gpus, w, decided)
    if aux:
        s["aux_devices"] = aux
    if kind == "one-step-off":
        s.update(staleness=v.count("train.async_queue_size"), round_batches=True)
    return s


def _deepspeed_sleep(v: Values, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """--ds.enable_sleep beside engines of their own: ppo_train still reloads DeepSpeed's states before
    each fit and offloads them after (ppo_trainer.py _run_sleep, whatever the placement): the
    per-phase offload of the optimizer state (with the fp32 masters) and the gradients."""
    if not v.flag("ds.enable_sleep"):
        return
    if v.flag("ds.adam_offload"):
        decided["ds.enable_sleep"] = ("ignored", _OPTIMIZER_ON_HOST)
        return
    w.setdefault("train_params", {})["offload"] = {"optimizer": True, "grads": True}
    decided["ds.enable_sleep"] = ("mapped", "workload.train_params.offload: the optimizer state and gradients to the "
                                            "host after each fit and back before the next")


def _aux_devices(v: Values, gpus: Mapping[str, int], w: Mapping[str, Any],
                 decided: dict[str, tuple[Status, str]]) -> dict[str, int]:
    """The reference, critic and reward model's own GPUs, a pool each (train_ppo_ray.py: each a
    RayActorGroup of num_nodes x num_gpus_per_node unless a colocation flag puts it on another's
    placement group; make_experience dispatches their passes at once); the reward model on the
    critic's with colocate_critic_reward; with train.colocate_all (async) they share the actor's."""
    together = v.flag("train.colocate_all")
    groups = {"ref": w["reference"] and not (together or v.flag("train.colocate_actor_ref")),
              "critic": w["algorithm"] == "ppo" and not together,
              "reward": w["reward"]["kind"] == "model" and not together
              and not (w["algorithm"] == "ppo" and v.flag("train.colocate_critic_reward"))}
    for role, own in groups.items():
        if not own:
            for key in (f"{role}.num_nodes", f"{role}.num_gpus_per_node"):
                if v.given(key):
                    decided[key] = ("ignored", f"the {role} model has no GPUs of its own here")
    names = {"ref": "reference", "critic": "critic", "reward": "reward"}
    aux = {names[role]: _group_gpus(v, role) for role, own in groups.items() if own}
    if "critic" in aux and w["reward"]["kind"] == "model" and v.flag("train.colocate_critic_reward"):
        aux["critic+reward"] = aux.pop("critic")   # the reward model's passes on the critic's GPUs, in turn
    if aux:
        v.result.notes.append("GPUs of their own (schedule.aux_devices): " + ", ".join(
            f"{group} {count}" for group, count in aux.items()) + "; their passes run beside each other and "
            "the actor's, as OpenRLHF dispatches them")
    return aux


def _hybrid_engine_switch(v: Values, s: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """The hybrid engine's switch: vLLM sleeps at level 1 between generations (--vllm.enable_sleep;
    else it keeps its share of HBM through training); --ds.enable_sleep moves DeepSpeed's optimizer
    state, fp32 master weights and gradients to the host after each update and back before the next
    (deepspeed_utils.offload_deepspeed_states: not the bf16 weights), unless ZeRO-Offload keeps them
    there already."""
    s["switch"] = {"offload_optimizer": v.flag("ds.enable_sleep") and not v.flag("ds.adam_offload"),
                   "free_gradients": False}
    if v.flag("ds.enable_sleep") and v.flag("ds.adam_offload"):
        decided["ds.enable_sleep"] = ("ignored", _OPTIMIZER_ON_HOST)
    if v.flag("vllm.enable_sleep"):
        s["switch"].update(engine_sleep=True, engine_sleep_level=1)
    else:
        s["switch"]["engine_resident"] = True
        v.result.notes.append("vllm.enable_sleep off: the engines keep their gpu_memory_utilization share of HBM "
                              "through training (schedule.switch.engine_resident)")
    for key in ("train.async_queue_size", "train.colocate_actor_ref", "train.colocate_critic_reward"):
        if v.given(key):
            decided[key] = ("ignored", "the hybrid engine: every model on the actor's GPUs, one batch a step")
