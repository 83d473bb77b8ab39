"""NeMo RL (NVIDIA-NeMo/RL) GRPO recipes -> rlsim scenarios: `rlsim run --from-nemo-rl RECIPE.yaml [key=value ...]`.

Reads a recipe YAML (its ``defaults:`` base files merged under it, as NeMo RL's loader does) plus
``key=value`` overrides. Key names as in NeMo RL v0.5 (examples/configs/grpo_math_1B.yaml and
recipes/llm/performance/*.yaml; published-results.md V6 and ../shared/reference/nemo-v05/).
Schedule: ``grpo.async_grpo.enabled: true`` -> kind nemo-rl-async; else
``policy.generation.colocated.enabled: false`` -> disaggregated (on-policy on split pools); else colocated.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from .common import (
    MULTI_TURN_NOTE,
    OPTIMIZER_SETTINGS,
    FrameworkImport,
    Rule,
    Status,
    Values,
    begin_import,
    begin_workload,
    capped_length,
    classify,
    flag,
    has_experts,
    hf_train_software,
    ignored,
    inactive_section,
    mapped,
    megatron_token_dispatcher,
    merge_train_params,
    model_set_by_user,
    positive_int,
    size_topology,
    unsupported,
    without_inapplicable_layout_keys,
    world_divides,
)
from .megatron_moe import megatron_moe_kernels, moe_kernel_rules
from .verl_optimizer import fsdp_step_traffic, hybrid_device_offload

# NeMo RL's defaults for the keys rlsim maps when a recipe (and its base) leaves them out
# (examples/configs/grpo_math_1B.yaml at v0.5.0, as read in ../shared/reference/nemo-v05/).
DEFAULTS_SOURCE = "NeMo RL examples/configs/grpo_math_1B.yaml (v0.5.0)"
DEFAULTS: dict[str, Any] = {
    "grpo.async_grpo.enabled": False, "grpo.async_grpo.max_trajectory_age_steps": 1,
    "grpo.async_grpo.in_flight_weight_updates": False, "grpo.use_dynamic_sampling": False,
    "grpo.batch_multiplier": 1, "policy.generation.colocated.enabled": True,
    "policy.generation.vllm_cfg.tensor_parallel_size": 1, "policy.generation.vllm_cfg.expert_parallel_size": 1,
    "policy.generation.vllm_cfg.pipeline_parallel_size": 1,
    "policy.generation.vllm_cfg.gpu_memory_utilization": 0.6, "policy.precision": "bfloat16",
    "policy.train_micro_batch_size": 4, "policy.sequence_packing.enabled": True,
    "policy.megatron_cfg.enabled": False, "cluster.num_nodes": 1, "cluster.gpus_per_node": 1,
    "policy.generation.vllm_cfg.async_engine": False,
    # megatron_cfg's expert TP: 1 in grpo_math_1B.yaml, so in every recipe chained to it (nemo-v05/*.yaml: the
    # llama3.1-8b recipe, which sets no expert size, runs at 1), not Megatron-Core's None (= tp)
    "policy.megatron_cfg.expert_tensor_parallel_size": 1,
}

_LOG = "logging: no effect on step time"
_LOSS = "loss arithmetic on tensors the step already holds: no modelled cost"
_LR = OPTIMIZER_SETTINGS
_VAL = "validation runs between steps: rlsim step times exclude validation"
_G = "policy.generation"
_V = f"{_G}.vllm_cfg"
# NeMo RL's code is not on the package registry: its vLLM workers are taken to keep vLLM's own default
# (custom all-reduce on), where verl turns it off.
CUSTOM_ALL_REDUCE_NOTE = ("vLLM's custom all-reduce: taken at vLLM's default (on: intra-node TP all-reduces below "
                          "8 MiB through peer memory); NeMo RL's worker code was not read: --set "
                          "workload.inference.custom_all_reduce=false if your version disables it")
_M = "policy.megatron_cfg"
_D = "policy.dtensor_cfg"
# Left out, NeMo RL's Megatron policy runs the dispatcher of the model's Megatron-Bridge provider: alltoall for
# the MoE models it ships recipes for (megatron-bridge 0.3.0 models/qwen/qwen_provider.py Qwen3MoEModelProvider,
# models/deepseek/deepseek_provider.py), so the V6 rows keep rlsim's alltoall. Given, taken as Megatron runs it:
# NeMo RL's worker code is not on the package registry, and rlsim knows no variable_seq_lengths it sets
# (it pads a pipeline's micro-batches to one shape: comm.pp_variable_seq_lengths false).
NEMO_DISPATCHER_NOTE = ("alltoall, allgather or flex (DeepEP, with moe_enable_deepep true); left out: the model's "
                        "Megatron-Bridge provider's, alltoall for Qwen3-MoE and DeepSeek; alltoall_seq is not modelled")
# moe_enable_deepep: Megatron's TransformerConfig field of that name, as NeMo RL's megatron_cfg passes it on
# (NeMo RL's worker code was not read: the key is Megatron's); false, Megatron's default, left out.
NEMO_DEEPEP = f"{_M}.moe_enable_deepep"
NEMO_DEEPEP_NOTE = ("true with moe_token_dispatcher_type flex (DeepEP's kernels), as Megatron-Core pairs them; "
                    "either without the other is refused; the key as Megatron's TransformerConfig names it")

RULES: dict[str, Rule] = {
    "grpo.num_prompts_per_step": mapped("workload.prompts_per_step"),
    "grpo.num_generations_per_prompt": mapped("workload.samples_per_prompt"),
    "grpo.async_grpo.enabled": mapped("schedule.kind", "true: nemo-rl-async"),
    "grpo.async_grpo.max_trajectory_age_steps": mapped("schedule.max_trajectory_age_steps"),
    "grpo.async_grpo.in_flight_weight_updates": mapped("schedule.in_flight_weight_updates"),
    "grpo.async_grpo.recompute_kv_cache_after_weight_updates": mapped(
        "schedule.recompute_kv_after_update", "with in-flight updates: the engines re-prefill every unfinished "
        "sequence's prompt and tokens so far after each update"),
    "grpo.use_dynamic_sampling": mapped("workload.dynamic_sampling"),
    "grpo.batch_multiplier": mapped("workload.dynamic_sampling.gen_prompts", "num_prompts_per_step x multiplier"),
    "grpo.dynamic_sampling_max_gen_batches": mapped("workload.dynamic_sampling.max_gen_batches"),
    "grpo.max_rollout_turns": mapped("workload.multi_turn.max_turns", "above 1: run_multi_turn_rollout, the batch in "
                                     "lock-step (workload.multi_turn.lockstep), or with vllm_cfg.async_engine "
                                     "run_async_multi_turn_rollout, each sample on its own; each turn at most "
                                     "max_new_tokens (multi_turn.max_turn_tokens), the response law's cap "
                                     "min(T-max - 1, turns x max_new_tokens)"),
    **{f"grpo.{k}": ignored("run length: rlsim simulates `iterations` steps (--iterations N)")
       for k in ("max_num_epochs", "max_num_steps")},
    **{f"grpo.{k}": ignored(_VAL) for k in ("val_period", "val_at_start", "max_val_samples", "val_batch_size",
                                           "val_at_end")},
    **{f"grpo.{k}": ignored("advantage / reward arithmetic on the host: no modelled cost") for k in (
        "normalize_rewards", "use_leave_one_out_baseline", "overlong_filtering", "reward_shaping.*",
        "reward_scaling.*", "seed", "calculate_advantages_on_gpu")},
    "loss_fn.reference_policy_kl_penalty": mapped("workload.reference", "NeMo RL v0.5 runs the reference "
                                                  "forward every step, even at KL 0 (V6): reference true"),
    "loss_fn.*": ignored(_LOSS),
    "policy.model_name": mapped("workload.model", "Hugging Face id -> model preset, or the folder's config.json"),
    "policy.tokenizer.*": ignored("tokenizer choice: no effect on step time"),
    "policy.train_global_batch_size": mapped("workload.mini_batch_prompts", "sequences per optimizer step / "
                                             "num_generations_per_prompt"),
    "policy.train_micro_batch_size": mapped("workload.train_layout.micro_batch", "with packing x T-max = "
                                            "train_layout.max_tokens_per_micro_batch"),
    "policy.logprob_batch_size": mapped("schedule.forward_micro_batch", "samples per log-prob micro-batch; with "
                                        "packing x T-max = train_layout.logprob_max_tokens_per_micro_batch"),
    "policy.generation_batch_size": ignored("only used by the Hugging Face generation backend"),
    "policy.max_total_sequence_length": mapped("workload.response_length.max", "T-max caps prompt + response "
                                               "(workload.inference.max_model_len unless vllm_cfg gives it)"),
    "policy.precision": mapped("workload.dtype"),
    "policy.max_grad_norm": ignored(_LOSS),
    "policy.optimizer.*": ignored(_LR),
    "policy.scheduler": ignored(_LR),
    "policy.scheduler.*": ignored(_LR),
    "policy.make_sequence_length_divisible_by": ignored("padding granularity of a few tokens: negligible"),
    "policy.logprob_chunk_size": ignored("memory chunking of the log-prob computation: negligible time"),
    "policy.sequence_packing.enabled": mapped("schedule.distqueue.packed", "micro-batches of at most train_mb_tokens"),
    "policy.sequence_packing.train_mb_tokens": mapped("workload.train_layout.max_tokens_per_micro_batch"),
    "policy.sequence_packing.logprob_mb_tokens": mapped("workload.train_layout.logprob_max_tokens_per_micro_batch"),
    "policy.sequence_packing.*": ignored("packing details (algorithm, rounding): rlsim fills the micro-batches "
                                         "longest first within the token budget"),
    "policy.dynamic_batching.enabled": unsupported("dynamic batching without packing is not modelled", neutral=False),
    "policy.dynamic_batching.*": ignored("used only with dynamic_batching.enabled"),
    "policy.dtensor_cfg.enabled": mapped("workload.train_layout", "DTensor: tp / cp from dtensor_cfg, zero 3; "
                                         "train_software nemo-rl-dtensor (FSDP2: ZeRO 3 only, TP, CP, no pipeline)"),
    "policy.dtensor_cfg.tensor_parallel_size": mapped("workload.train_layout.tp"),
    "policy.dtensor_cfg.context_parallel_size": mapped("workload.train_layout.cp"),
    "policy.dtensor_cfg.sequence_parallel": mapped("workload.train_layout.sequence_parallel"),
    "policy.dtensor_cfg.activation_checkpointing": mapped("workload.train_layout.recompute"),
    "policy.dtensor_cfg.*": unsupported("DTensor's other options (custom parallel plans, ...) are not modelled; its "
                                        "FSDP2 sharding is priced as ZeRO-3 over the dp x cp ranks (per-layer "
                                        "all-gathers and reduce-scatters, workload.train_params.comm.fsdp_*)"),
    "policy.dtensor_cfg.cpu_offload": mapped("workload.train_params.offload.fsdp_cpu_offload", "FSDP2's "
                                             "CPUOffloadPolicy: the sharded state on the host, copied per layer and "
                                             "micro-batch, the optimizer step on the CPU"),
    f"{_M}.enabled": mapped("workload.train_layout", "Megatron: its TP/PP/EP/CP"),
    f"{_M}.tensor_model_parallel_size": mapped("workload.train_layout.tp"),
    f"{_M}.pipeline_model_parallel_size": mapped("workload.train_layout.pp"),
    f"{_M}.virtual_pipeline_model_parallel_size": mapped("workload.train_layout.vpp"),
    f"{_M}.expert_model_parallel_size": mapped("workload.train_layout.ep"),
    f"{_M}.context_parallel_size": mapped("workload.train_layout.cp"),
    f"{_M}.sequence_parallel": mapped("workload.train_layout.sequence_parallel"),
    f"{_M}.activation_checkpointing": mapped("workload.train_layout.recompute", "true: full, false: none"),
    f"{_M}.optimizer.use_distributed_optimizer": mapped("workload.train_layout.zero", "true: 1, false: 0"),
    f"{_M}.optimizer.optimizer_cpu_offload": mapped("workload.train_params.offload.optimizer",
                                                    "Megatron-Core's HybridDeviceOptimizer (offload.scope: "
                                                    "optimizer_step): the offloaded share's state on the host, "
                                                    "each step its gradients out, AdamW on the host, its "
                                                    "parameters back"),
    f"{_M}.optimizer.optimizer_offload_fraction": mapped("workload.train_params.offload.optimizer_fraction",
                                                         "with optimizer_cpu_offload (Megatron-Core's default 0.0: "
                                                         "nothing offloaded)"),
    f"{_M}.optimizer.overlap_cpu_optimizer_d2h_h2d": unsupported("the host step's copies overlapped with it "
                                                                 "(Megatron-Core's default off: in sequence)",
                                                                 neutral=False),
    f"{_M}.optimizer.*": ignored(_LR),
    f"{_M}.scheduler.*": ignored(_LR),
    f"{_M}.expert_tensor_parallel_size": mapped("workload.train_layout.etp", "MoE parallel folding; left out: "
                                                "grpo_math_1B.yaml's 1; null: Megatron's, tp"),
    f"{_M}.moe_token_dispatcher_type": mapped("workload.train_params.comm.moe_token_dispatcher", NEMO_DISPATCHER_NOTE),
    NEMO_DEEPEP: mapped("workload.train_params.comm.moe_token_dispatcher", NEMO_DEEPEP_NOTE),
    f"{_M}.num_layers_in_first_pipeline_stage": mapped("workload.train_layout.pp_first_stage_layers"),
    f"{_M}.num_layers_in_last_pipeline_stage": mapped("workload.train_layout.pp_last_stage_layers"),
    f"{_M}.*": unsupported("Megatron option not modelled (kernel fusions, router, memory levels)"),
    # the Megatron TransformerConfig keys NeMo RL passes on as verl's override_transformer_config does
    # (frameworks/megatron_moe.py; moe_permute_fusion: the DeepSeek-V3 recipe, ../shared/reference/nemo-v05/)
    **moe_kernel_rules(_M),
    f"{_M}.pipeline_dtype": ignored("matches policy.precision"),
    f"{_M}.converter_type": ignored("checkpoint conversion: no effect on step time"),
    f"{_M}.env_vars.*": ignored("process environment"),
    f"{_G}.backend": unsupported("rlsim's rollout engine is modelled on vLLM", neutral="vllm"),
    f"{_G}.max_new_tokens": mapped("workload.response_length.max", "min(max_new_tokens, T-max)"),
    **{f"{_G}.{k}": ignored("sampling parameters: the same per-token cost") for k in (
        "temperature", "top_p", "top_k", "stop_token_ids", "stop_strings", "model_name")},
    f"{_G}.colocated.enabled": mapped("schedule.kind", "false: split pools"),
    f"{_G}.colocated.resources.num_nodes": mapped("schedule.rollout_devices", "generation pool nodes"),
    f"{_G}.colocated.resources.gpus_per_node": mapped("schedule.rollout_devices", "generation pool GPUs per node"),
    f"{_V}.tensor_parallel_size": mapped("workload.rollout_layout.tp"),
    f"{_V}.expert_parallel_size": mapped("workload.rollout_layout.ep"),
    f"{_V}.gpu_memory_utilization": mapped("workload.rollout_layout.gpu_memory_utilization"),
    f"{_V}.max_num_seqs": mapped("workload.rollout_layout.max_num_seqs"),
    f"{_V}.precision": mapped("workload.rollout_layout.weight_dtype", "and kv_dtype"),
    f"{_V}.pipeline_parallel_size": mapped("workload.rollout_layout.pp", "vLLM's pipeline stages of one engine"),
    f"{_V}.enforce_eager": mapped("workload.inference.enforce_eager", "eager launches instead of CUDA graphs"),
    f"{_V}.async_engine": mapped("workload.engine", "vllm-v1-async (AsyncLLM: 128 running sequences, 2048-token "
                                 "steps) or vllm-v1 (the LLM class); its per-request overheads are not modelled"),
    f"{_V}.max_model_len": mapped("workload.inference.max_model_len", "prompt + response stop there (recipes: T-max)"),
    f"{_V}.kv_cache_dtype": mapped("workload.rollout_layout.kv_dtype", "vLLM's kv_cache_dtype: auto = the weights' "
                                                                      "dtype, fp8 / fp8_e4m3 / fp8_e5m2 = fp8"),
    f"{_V}.*": unsupported("vLLM option not modelled"),
    "data.max_input_seq_length": mapped("workload.prompt_length.max"),
    "data.*": ignored("data loading and prompt formatting on the host: no modelled cost"),
    "env.*": unsupported("environment option not modelled (env.<name>.num_workers: the reward pool, "
                         "workload.reward.workers)"),
    "logger.*": ignored(_LOG),
    "checkpointing.*": ignored("checkpoint files: rlsim step times exclude checkpointing"),
    "cluster.num_nodes": mapped("topology.nodes", "the whole job"),
    "cluster.gpus_per_node": mapped("topology.nodes", "GPUs per node of the job"),
}


def schedule_of(v: Values) -> tuple[str, str]:
    if v.flag("grpo.async_grpo.enabled"):
        _check_async_grpo(v)
        return "nemo-rl-async", "nemo-rl-async (grpo.async_grpo.enabled: true)"
    if not v.flag("policy.generation.colocated.enabled"):
        return "disaggregated", "disaggregated (on-policy GRPO, generation.colocated.enabled: false)"
    return "colocated", "colocated (on-policy GRPO, generation colocated)"


def _check_async_grpo(v: Values) -> None:
    """NeMo RL's async GRPO runs its generation on GPUs of its own through vLLM's AsyncLLM
    (algorithms/grpo.py async_grpo_train, recalled from its public code: "Async GRPO requires vLLM
    backend with vllm_cfg.async_engine=True", and colocated inference is refused): a recipe it refuses
    is refused here (both ran, the colocation unsaid; a trial)."""
    if v.flag(f"{_G}.colocated.enabled"):
        raise RlsimError("async GRPO with colocated generation: NeMo RL runs async GRPO's generation on GPUs of its "
                         "own and refuses a colocated one", source=v.result.source, field=f"{_G}.colocated.enabled",
                         fix=f"pass {_G}.colocated.enabled=false with {_G}.colocated.resources (the generation's "
                             "nodes and GPUs), or grpo.async_grpo.enabled=false")
    if not v.flag(f"{_V}.async_engine"):
        raise RlsimError("async GRPO without vLLM's async engine: NeMo RL requires vllm_cfg.async_engine=True for it",
                         source=v.result.source, field=f"{_V}.async_engine", fix=f"pass {_V}.async_engine=true")


def import_nemo_rl(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
                   schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """A NeMo RL recipe plus overrides -> FrameworkImport (``schedule`` is not used: the recipe says it)."""
    # NeMo RL applies command-line overrides with Hydra's override parser, as verl does
    flat, result, v = begin_import("nemo-rl", path, overrides, what="NeMo RL recipe", rules=RULES, defaults=DEFAULTS,
                                   defaults_source=DEFAULTS_SOURCE, schedule=schedule,
                                   schedule_fix="set grpo.async_grpo.enabled=true/false in the recipe or as an override")
    source = result.source
    kind, result.schedule_rule = schedule_of(v)
    user_model = model_set_by_user(user_sets)
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    _training_backend(v, flat, decided)
    workload = _workload(v, "workload.model" in user_sets, decided, user_model)
    _reward_pool(flat, workload, decided, source)
    sched = _schedule(v, kind, workload, decided)
    per_node = v.count("cluster.gpus_per_node")
    gpus = v.count("cluster.num_nodes") * per_node
    topo, note = size_topology(topology, gpus, "cluster.num_nodes x gpus_per_node", source,
                               any(k.startswith("topology.") for k in user_sets), per_node)
    result.notes.append(note)
    if not any(k.startswith("topology.") or k.startswith("schedule.rollout") for k in user_sets):
        _check_world_divides(v, gpus - sched.get("rollout_devices", 0), workload["train_layout"])
    result.scenario = {"topology": topo, "workload": workload, "schedule": sched}
    if kind in ("colocated", "one-step-off"):   # the phase timings under NeMo RL's timer names (output.timers)
        result.scenario["output"] = {"timers": "nemo-rl"}
    classify(result, flat, RULES, decided)
    cap = ("min(T-max - 1, turns x max_new_tokens) (multi-turn: the turns share the context)" if "multi_turn" in workload
           else "min(max_new_tokens, T-max)")
    result.notes.append(f"response-length law: not in a recipe; rlsim's default law capped at {cap}; NeMo caps "
                        "prompt + response at T-max per sample (set --set workload.response_length.max / .median to "
                        "refine)")
    return result


def _check_world_divides(v: Values, world: int, layout: Mapping[str, Any]) -> None:
    """NeMo RL's Megatron or DTensor policy on a world that tp x pp x cp does not divide does not start."""
    section = _M if v.flag(f"{_M}.enabled") else _D
    keys = [f"{section}.{name}" for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                             "context_parallel_size", "tensor_parallel_size")]
    world_divides(v, world, layout, keys, f"NeMo RL's {section.split('.')[-1]} backend", f"{section}.enabled")


def _training_backend(v: Values, flat: Mapping[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """NeMo RL trains with Megatron (megatron_cfg.enabled) or DTensor, not both (its Policy refuses
    the two together); the other backend's keys are listed as ignored."""
    megatron, dtensor = v.flag(f"{_M}.enabled"), v.flag(f"{_D}.enabled")
    if megatron and dtensor:
        raise RlsimError("both training backends are enabled", source=v.result.source, field=f"{_D}.enabled",
                         fix=f"enable one: {_M}.enabled=true with {_D}.enabled=false, or the reverse")
    active, inactive = (_M, _D) if megatron else (_D, _M)
    inactive_section(flat, inactive, f"{active} trains ({_M}.enabled {str(megatron).lower()}): this backend's "
                     "settings do not apply", decided)
    decided.pop(f"{inactive}.enabled", None)   # the switch itself is read


def _reward_pool(flat: Mapping[str, Any], w: dict[str, Any], decided: dict[str, tuple[Status, str]],
                 src: str) -> None:
    """The rule-reward workers: NeMo RL's environment actors (env.<name>.num_workers) verify each
    generated batch, one pool shared by the job. Several environments of different sizes are not
    mapped (the recipe's data decides which serves it); the user gives workload.reward.workers."""
    pools = {key: value for key, value in flat.items() if re.fullmatch(r"env\.[^.]+\.num_workers", key)}
    if not pools:
        return
    sizes = {positive_int(value, key, src) for key, value in pools.items()}
    if len(sizes) > 1:
        for key in pools:
            decided[key] = ("unsupported", "environments of different sizes: give --set workload.reward.workers=N")
        return
    # with async_engine, run_async_multi_turn_rollout scores each sample as it finishes; else the
    # LLM class's batch is scored once generated
    key = "policy.generation.vllm_cfg.async_engine"
    async_engine = flag(flat.get(key, DEFAULTS[key]), key, src)
    w["reward"] = {"workers": sizes.pop(), "handover": "sample" if async_engine else "batch"}
    for key in pools:
        decided[key] = ("mapped", "workload.reward.workers: rule-reward workers shared by the job (handover: each "
                                  "sample as it finishes with vllm_cfg.async_engine, else the generated batch)")


def _multi_turn(v: Values, w: dict[str, Any], tmax: int, new_tokens: int) -> None:
    """NeMo RL v0.5 grpo.max_rollout_turns > 1: multi-turn rollouts, run_multi_turn_rollout without
    vllm_cfg.async_engine (the batch generates a turn, its environments step, the next turn: in
    lock-step), run_async_multi_turn_rollout with it (each sample on its own). Each turn generates up
    to max_new_tokens within T-max, so a whole response is bounded by turns x max_new_tokens and T-max."""
    turns = v.whole("grpo.max_rollout_turns", 1)
    if turns is None or turns <= 1:
        return
    w["multi_turn"] = {"max_turns": turns, "lockstep": not v.flag(f"{_V}.async_engine"),
                       "max_turn_tokens": new_tokens}
    w["response_length"] = capped_length("response_length", min(tmax - 1, turns * new_tokens),
                                         "policy.max_total_sequence_length", v.result.source, v.result.notes)
    v.result.notes.append(MULTI_TURN_NOTE)


def _workload(v: Values, model_given: bool, decided: dict[str, tuple[Status, str]], user_model: Any = None
              ) -> dict[str, Any]:
    """``user_model``: the --set workload.model's value, where known (model_set_by_user): the model the run
    trains, whose experts decide the expert TP default as the recipe's model's do."""
    src = v.result.source
    w = begin_workload(v, "policy.model_name", "NeMo RL recipe", model_given, decided)
    prompts = v.count("grpo.num_prompts_per_step")
    gens = v.count("grpo.num_generations_per_prompt")
    w.update(algorithm="grpo", prompts_per_step=prompts, samples_per_prompt=gens)
    gbs = v("policy.train_global_batch_size")
    if gbs is not None:
        gbs = positive_int(gbs, "policy.train_global_batch_size", src)
        if gbs % gens:
            raise RlsimError(f"train_global_batch_size {gbs} is not whole prompt groups of {gens} generations",
                             source=src, field="policy.train_global_batch_size",
                             fix="rlsim optimizer steps take whole groups: use a multiple of num_generations_per_prompt")
        w["mini_batch_prompts"] = mini = min(prompts, gbs // gens)
        if prompts % mini:   # said in the recipe's unit, sequences (the workload's error counts prompts)
            sequences = [d * gens for d in range(mini, 0, -1) if prompts % d == 0][:3]
            raise RlsimError(f"train_global_batch_size {gbs} ({mini} prompt groups of {gens}) does not divide the "
                             f"step's {prompts} x {gens} = {prompts * gens} sequences", source=src,
                             field="policy.train_global_batch_size",
                             fix=f"give a multiple of num_generations_per_prompt that divides {prompts * gens}, e.g. "
                                 f"{', '.join(map(str, sequences))}, or change grpo.num_prompts_per_step")
    w["ppo_epochs"] = 1
    if v.flag("grpo.use_dynamic_sampling"):
        w["algorithm"] = "dapo"
        w["dynamic_sampling"] = {"gen_prompts": prompts * v.whole("grpo.batch_multiplier", 1)}
        rounds = v.whole("grpo.dynamic_sampling_max_gen_batches")
        if rounds is not None:
            w["dynamic_sampling"]["max_gen_batches"] = rounds
    tmax = v.count("policy.max_total_sequence_length")
    prompt_max = v.whole("data.max_input_seq_length", tmax)
    new_tokens = v.whole(f"{_G}.max_new_tokens", tmax)
    # a prompt of T-max leaves vLLM's max_model_len (T-max) no room: the longest prompt is one less
    w["prompt_length"] = capped_length("prompt_length", min(prompt_max, tmax - 1), "data.max_input_seq_length", src,
                                       v.result.notes)
    w["response_length"] = capped_length("response_length", min(new_tokens, tmax), f"{_G}.max_new_tokens", src, v.result.notes)
    keys = ({"sequence_parallel": f"{_M}.sequence_parallel", "etp": f"{_M}.expert_tensor_parallel_size"}
            if v.flag(f"{_M}.enabled") else {"sequence_parallel": "policy.dtensor_cfg.sequence_parallel"})
    model = w.get("model", user_model)   # the model trained: the recipe's, or the one --set gives
    w["train_layout"] = without_inapplicable_layout_keys(_train_layout(v, model), model, keys,
                                                         decided)
    if not v.flag(f"{_M}.enabled"):   # the DTensor policy trains transformers' model code: params.NEMO_RL_DTENSOR
        w["train_software"] = hf_train_software(False, "nemo-rl-dtensor")
    w["rollout_layout"] = _rollout_layout(v)
    # NeMo RL v0.5 drives vLLM V1: through the LLM class, or AsyncLLM with async_engine
    w["engine"] = "vllm-v1-async" if v.flag(f"{_V}.async_engine") else "vllm-v1"
    if w["rollout_layout"].get("tp", 1) > 1:
        v.result.notes.append(CUSTOM_ALL_REDUCE_NOTE)
    # vLLM's max_model_len (the recipes set T-max): prompt + response stop there
    w["inference"] = {"max_model_len": v.whole(f"{_V}.max_model_len", tmax)}
    if v.given(f"{_V}.enforce_eager"):
        w["inference"]["enforce_eager"] = v.flag(f"{_V}.enforce_eager")
    _multi_turn(v, w, tmax, new_tokens)
    train_params: dict[str, Any] = {}
    if v.flag(f"{_M}.enabled"):   # the DTensor policy builds torch's optimizer: megatron_cfg is listed ignored
        _optimizer_offload(v, train_params)
        megatron_token_dispatcher(v, f"{_M}.moe_token_dispatcher_type", w, decided, variable_seq_lengths=None,
                                  deepep_key=NEMO_DEEPEP)
        megatron_moe_kernels(v, _M, w, model, decided)
    if not v.flag(f"{_M}.enabled") and v.flag(f"{_D}.cpu_offload"):   # DTensor (FSDP2) with CPUOffloadPolicy
        train_params["offload"] = {"fsdp_cpu_offload": True}
    if not v.flag(f"{_M}.enabled"):
        train_params.setdefault("memory", {}).update(DTENSOR_MASTER_STATE)
        train_params.setdefault("comm", {}).update(DTENSOR_MASTER_STEP)
    if v.flag(f"{_M}.enabled") and w["train_layout"].get("pp", 1) > 1:
        # the Megatron worker pads every micro-batch to the batch's longest (pad_full_seq_to): one
        # pipeline p2p shape
        train_params["comm"] = {"pp_variable_seq_lengths": False}
    merge_train_params(w, train_params)
    w["reference"] = True
    w["dtype"] = v.dtype("policy.precision", "precision")
    return w


# The DTensor policy's resident state: NeMo RL's DTensor worker loads the model in fp32 whatever
# policy.precision says (nemo_rl/models/policy/dtensor_policy_worker.py, v0.5: AutoConfig.from_pretrained
# (..., torch_dtype=torch.float32), "Always load the model in float32 to keep master weights in
# float32"), and FSDP2's MixedPrecisionPolicy(param_dtype=precision, reduce_dtype=float32) casts to
# bf16 only while a layer is gathered: the fp32 shard is the master copy (4 bytes), its gradients fp32
# (4) and torch.optim.AdamW's m and v fp32 (8): 16 bytes a parameter, not Megatron's 18. Cited from
# memory: the v0.5 source is not on PyPI (nemo-rl there is an empty 0.0.0), so not read here.
DTENSOR_MASTER_STATE = {"resident_weight_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0,
                        "optimizer_bytes_per_param": 8.0}
# Its AdamW step updates that fp32 shard in place, no bf16 copy to write back as Megatron's distributed
# optimizer does (rlsim's default 30): verl_optimizer.fsdp_step_traffic, 28 B a parameter
DTENSOR_MASTER_STEP = {"optimizer_traffic_bytes_per_param": fsdp_step_traffic(
    DTENSOR_MASTER_STATE["resident_weight_bytes_per_param"], DTENSOR_MASTER_STATE["optimizer_bytes_per_param"])}


def _optimizer_offload(v: Values, train_params: dict[str, Any]) -> None:
    """optimizer_cpu_offload: Megatron-Core's HybridDeviceOptimizer over optimizer_offload_fraction of
    the optimizer (verl_optimizer.hybrid_device_offload)."""
    offload = hybrid_device_offload(v, f"{_M}.optimizer.optimizer_cpu_offload",
                                    f"{_M}.optimizer.optimizer_offload_fraction")
    if offload is not None:
        train_params["offload"] = offload


def _packing_budgets(v: Values, layout: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """Sequence packing: micro-batches of at most train_mb_tokens (log-prob passes: logprob_mb_tokens),
    filled by first-fit decreasing: the token-budget micro-batches of train_layout."""
    src, tmax = v.result.source, v.whole("policy.max_total_sequence_length")
    tokens = v("policy.sequence_packing.train_mb_tokens")
    if tokens is None:   # grpo_math_1B.yaml: ${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}
        tokens = tmax * v.whole("policy.train_micro_batch_size", 1)
    layout["max_tokens_per_micro_batch"] = positive_int(tokens, "policy.sequence_packing.train_mb_tokens", src)
    decided["policy.train_micro_batch_size"] = ("mapped", "x T-max = workload.train_layout.max_tokens_per_micro_batch "
                                                "(train_mb_tokens)")
    lp_tokens = v("policy.sequence_packing.logprob_mb_tokens")
    if lp_tokens is None and v.given("policy.logprob_batch_size"):   # T-max x logprob_batch_size (grpo_math_1B.yaml)
        lp_tokens = tmax * v.count("policy.logprob_batch_size")
        decided["policy.logprob_batch_size"] = ("mapped", "x T-max = workload.train_layout."
                                                "logprob_max_tokens_per_micro_batch (logprob_mb_tokens)")
    if lp_tokens is not None:
        layout["logprob_max_tokens_per_micro_batch"] = positive_int(lp_tokens, "policy.sequence_packing."
                                                                     "logprob_mb_tokens", src)


def _train_layout(v: Values, model: Any) -> dict[str, Any]:
    """``model``: the model trained (the workload.model mapped or given by --set; None: not known here, a
    sweep's --grid key, taken as MoE at ep > 1): the expert TP's default (1) is read on a model with
    experts alone, as Megatron splits nothing on a dense one."""
    packing = v.flag("policy.sequence_packing.enabled")
    micro = 1 if packing else v.whole("policy.train_micro_batch_size", 1)
    if v.flag(f"{_M}.enabled"):
        layout: dict[str, Any] = {"micro_batch": micro}
        for key, rl in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                        ("virtual_pipeline_model_parallel_size", "vpp"), ("expert_model_parallel_size", "ep"),
                        ("context_parallel_size", "cp")):
            layout[rl] = v.whole(f"{_M}.{key}", 1)
        if v.given(f"{_M}.sequence_parallel"):
            layout["sequence_parallel"] = v.flag(f"{_M}.sequence_parallel")
        layout["recompute"] = "full" if v.flag(f"{_M}.activation_checkpointing") else "none"
        # the distributed optimizer unless the recipe turns it off (null: Megatron's default, on)
        distributed = f"{_M}.optimizer.use_distributed_optimizer"
        layout["zero"] = 1 if v(distributed) is None or v.flag(distributed) else 0
        etp_key = f"{_M}.expert_tensor_parallel_size"   # null: Megatron's default, the experts split over tp
        if (v.given(etp_key) or has_experts(model, layout["ep"])) and (etp := v.whole(etp_key)) is not None:
            layout["etp"] = etp
        for key, rl in (("num_layers_in_first_pipeline_stage", "pp_first_stage_layers"),
                        ("num_layers_in_last_pipeline_stage", "pp_last_stage_layers")):
            if (value := v.whole(f"{_M}.{key}")) is not None:
                layout[rl] = value
        return layout
    d = "policy.dtensor_cfg"
    v.result.notes.append("DTensor training: FSDP2 priced as ZeRO-3 over the dp x cp ranks (per-layer parameter "
                          "all-gathers and gradient reduce-scatters), tp / cp from dtensor_cfg")
    return {"tp": v.whole(f"{d}.tensor_parallel_size", 1), "cp": v.whole(f"{d}.context_parallel_size", 1),
            "pp": 1, "zero": 3, "micro_batch": micro,
            "recompute": "full" if v.flag(f"{d}.activation_checkpointing") else "none",
            **({"sequence_parallel": v.flag(f"{d}.sequence_parallel")} if v.given(f"{d}.sequence_parallel") else {})}


def _rollout_layout(v: Values) -> dict[str, Any]:
    dtype = v.dtype(f"{_V}.precision" if v.given(f"{_V}.precision") else "policy.precision", "precision")
    layout = {"tp": v.count(f"{_V}.tensor_parallel_size"),
              "ep": v.count(f"{_V}.expert_parallel_size"),
              "gpu_memory_utilization": v.fraction(f"{_V}.gpu_memory_utilization"),
              "weight_dtype": dtype, "kv_dtype": dtype}
    kv = str(v(f"{_V}.kv_cache_dtype") or "auto").lower()
    if kv.startswith("fp8"):     # vLLM: fp8 (= fp8_e4m3 on CUDA), fp8_e4m3, fp8_e5m2: one byte a value
        layout["kv_dtype"] = "fp8"
    elif kv != "auto":
        raise RlsimError(f"vLLM kv_cache_dtype {kv!r} is not one rlsim prices", source=v.result.source,
                         field=f"{_V}.kv_cache_dtype", fix="use auto (the weights' dtype) or fp8")
    if v.count(f"{_V}.pipeline_parallel_size") > 1:
        layout["pp"] = v.count(f"{_V}.pipeline_parallel_size")
    if v.given(f"{_V}.max_num_seqs"):   # otherwise the engine's own (workload.engine)
        layout["max_num_seqs"] = v.count(f"{_V}.max_num_seqs")
    return layout


def _schedule(v: Values, kind: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    src = v.result.source
    s: dict[str, Any] = {"kind": kind}
    if kind != "colocated":
        res = f"{_G}.colocated.resources"
        s["rollout_devices"] = (positive_int(v.flat.get(f"{res}.num_nodes") or 1, f"{res}.num_nodes", src)
                                * positive_int(v.flat.get(f"{res}.gpus_per_node"), f"{res}.gpus_per_node", src))
    # NeMo RL's refit rebuilds every parameter as a full tensor on every rank (docs/validation.md V6);
    # colocated, the policy's weights go to host, a Megatron policy's gradient buffer is freed
    # (Megatron-Core's RL offload) and vLLM sleeps between phases
    s["refit"] = "full-tensors"
    # the reference pass swaps the reference state dict in from host memory (use_reference_model),
    # through pinned memory: its copies are .to("cpu", non_blocking=True, copy=True) (cited from
    # memory), whose destination torch pins
    s["reference_swap_copies"] = 3
    if kind == "colocated":
        s["switch"] = {"offload_weights": True, "engine_sleep": True, "optimizer_pageable": True}
        if v.flag(f"{_M}.enabled"):   # the Megatron worker's offload frees the gradient buffer (DTensor: copied)
            s["switch"]["free_gradients"] = True
        if "dynamic_sampling" in w:
            # grpo_train runs each generation batch inside prepare_for_generation / finish_generation
            # (cited from memory of the public code): vLLM sleeps after a batch and wakes for the next
            s["between_gen_batches"] = "sleep"
    if kind != "nemo-rl-async":
        for key in ("max_trajectory_age_steps", "in_flight_weight_updates", "recompute_kv_cache_after_weight_updates"):
            if v.given(f"grpo.async_grpo.{key}"):
                decided[f"grpo.async_grpo.{key}"] = ("ignored", "used only by async GRPO (grpo.async_grpo.enabled: "
                                                                "true); this recipe trains on-policy")
    if kind == "nemo-rl-async":
        age = "grpo.async_grpo.max_trajectory_age_steps"
        s["max_trajectory_age_steps"] = v.count(age)
        s["in_flight_weight_updates"] = v.flag("grpo.async_grpo.in_flight_weight_updates")
        recompute = "grpo.async_grpo.recompute_kv_cache_after_weight_updates"
        if v.flag(recompute) and s["in_flight_weight_updates"]:
            s["recompute_kv_after_update"] = True
        elif v.flag(recompute):
            decided[recompute] = ("ignored", "used only with in_flight_weight_updates (an update without them waits "
                                             "for the engines to drain: no KV is held to recompute)")
        s["async_engine"] = v.flag(f"{_V}.async_engine")
        decided[f"{_V}.async_engine"] = ("mapped", "schedule.async_engine: rounds the age bound admits share the engine; "
                                               "workload.engine vllm-v1-async")
    packing = v.flag("policy.sequence_packing.enabled")
    s["distqueue"] = {"packed": packing}
    if packing:
        _packing_budgets(v, w["train_layout"], decided)
    elif v.given("policy.logprob_batch_size"):
        s["forward_micro_batch"] = v.count("policy.logprob_batch_size")
    if not v.flag("grpo.use_dynamic_sampling"):
        decided["grpo.batch_multiplier"] = ("ignored", "used only with use_dynamic_sampling")
        decided["grpo.dynamic_sampling_max_gen_batches"] = ("ignored", "used only with use_dynamic_sampling")
    return s
