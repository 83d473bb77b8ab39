"""verl's Megatron TransformerConfig overrides (actor.megatron.override_transformer_config) that real
MoE recipes set, beside recompute_* and moe_token_dispatcher_type (verl.py): the uneven pipeline split,
the kernel fusions rlsim's Megatron-Core stack already assumes, the router's losses, and the MoE kernel
settings shared with NeMo RL's megatron_cfg (frameworks/megatron_moe.py: the fused permute, the router's
dtype). verl lays these keys over its model converter's TransformerConfig (verl 0.6.1 models/mcore/
config_converter.py: ``args.update(override_transformer_config_kwargs)``; with use_mbridge, mbridge's
set_extra_args) and builds Transformer Engine layer specs (models/mcore/model_initializer.py
get_gpt_decoder_block_spec(use_transformer_engine=True)). Megatron-Core sources: 0.13.0."""
from __future__ import annotations

from typing import Any

from ..errors import RlsimError
from .common import Rule, Status, has_experts, ignored, mapped, merge_train_params, unsupported
from .megatron_moe import moe_kernel_rules

# The section verl's megatron workers read (verl 0.6.1 workers/megatron_workers.py _build_model_optimizer)
TRANSFORMER = "actor_rollout_ref.actor.megatron.override_transformer_config"
FIRST_STAGE, LAST_STAGE = (f"{TRANSFORMER}.num_layers_in_{end}_pipeline_stage" for end in ("first", "last"))
CAPACITY = f"{TRANSFORMER}.moe_expert_capacity_factor"
PAD = f"{TRANSFORMER}.moe_pad_expert_input_to_capacity"
EMBEDDING_SPLIT, LOSS_SPLIT = (f"{TRANSFORMER}.account_for_{part}_in_pipeline_split" for part in ("embedding", "loss"))

_SPLIT = ("Megatron-Core's uneven pipeline split (0.13.0 transformer/transformer_block.py "
          "get_num_layers_to_build): the other stages split the rest evenly")
_ACCOUNTED = ("true: Megatron-Core counts the {part} as one more layer in the split (0.13.0 transformer/"
              "transformer_block.py get_num_layers_to_build): (num_layers + 1, + 1 more with the {other}'s) / pp "
              "layers a stage, the {end} stage one fewer beside the {what} rlsim prices there; with vpp > 1 only "
              "its first model chunk is short, which rlsim's split cannot express (refused)")
_ROUTER_LOSS = ("the router's balancing loss / expert-bias update: arithmetic on each token's expert scores (no "
                "modelled cost); the derived busiest-EP-rank load assumes a balanced router whatever they are "
                "(a router's measured skew: workload.train_params.compute.moe_load_imbalance)")

TRANSFORMER_RULES: dict[str, Rule] = {
    FIRST_STAGE: mapped("workload.train_layout.pp_first_stage_layers", _SPLIT),
    LAST_STAGE: mapped("workload.train_layout.pp_last_stage_layers", _SPLIT),
    EMBEDDING_SPLIT: mapped("workload.train_layout.pp_first_stage_layers", _ACCOUNTED.format(
        part="input embedding", other="loss", end="first", what="embedding")),
    LOSS_SPLIT: mapped("workload.train_layout.pp_last_stage_layers", _ACCOUNTED.format(
        part="loss (output layer)", other="embedding", end="last", what="output layer and loss")),
    CAPACITY: mapped("workload.train_params.compute.moe_expert_capacity_factor", "Megatron-Core's token "
                     "dropping (0.13.0 moe/moe_utils.py get_capacity): the busiest EP rank's routed rows capped at that "
                     "many times the mean; null or negative: dropless (Megatron-Core's default); ep 1: not read "
                     "(rlsim prices the mean there)"),
    PAD: mapped("workload.train_params.compute.moe_pad_expert_input_to_capacity", "true: every expert computes its "
                "capacity (token_dispatcher.py drop_and_pad): every EP rank's rows the factor x the mean"),
    **{f"{TRANSFORMER}.{k}": ignored(_ROUTER_LOSS) for k in (
        "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_bias_update_rate")},
    # neutral: the value rlsim's Megatron-Core stack prices (params.py ComputeParams, MemoryParams)
    f"{TRANSFORMER}.moe_grouped_gemm": unsupported(
        "rlsim prices the routed experts as Megatron-Core's grouped GEMM (TEGroupedMLP: each local expert's GEMM "
        "at its own rows); the per-expert loop (SequentialMLP) is not modelled", neutral=True),
    f"{TRANSFORMER}.apply_rope_fusion": unsupported(
        "rlsim prices Megatron's fused RoPE (workload.train_params.compute.rope_traffic_bytes_per_element 0: its "
        "traffic left out); the unfused rotary embedding is not modelled", neutral=True),
    f"{TRANSFORMER}.bias_activation_fusion": unsupported(
        "rlsim prices Megatron's fused bias + SwiGLU / GeLU (workload.train_params.compute."
        "gated_act_traffic_bytes_per_ffn 6, act_traffic_bytes_per_ffn 4: its inputs read once, its output written "
        "once); the unfused activation is not modelled", neutral=True),
    f"{TRANSFORMER}.gradient_accumulation_fusion": unsupported(
        "rlsim prices each weight gradient GEMM accumulating into the fp32 main_grad buffer (Transformer Engine's "
        "fuse_wgrad_accumulation, 0.13.0 extensions/transformer_engine.py); the unfused path's separate add into "
        "main_grad every micro-batch is not modelled", neutral=True),
    f"{TRANSFORMER}.moe_shared_expert_overlap": unsupported(
        "the shared experts' compute overlapped with the dispatch / combine all-to-alls (0.13.0 moe/moe_layer.py, "
        "token_dispatcher.py set_shared_experts) is not modelled: rlsim runs the all-to-alls on the critical path "
        "(workload.train_params.comm.ep_overlap_fraction 0)", neutral=False),
    f"{TRANSFORMER}.deallocate_pipeline_outputs": unsupported(
        "rlsim's activation memory does not count a stage's output once sent (each layer keeps its own input), as "
        "Megatron's deallocation frees it (0.13.0 pipeline_parallel/schedules.py deallocate_output_tensor); kept "
        "(false), each in-flight micro-batch's sent output is not counted; no effect on step time", neutral=True),
    f"{TRANSFORMER}.masked_softmax_fusion": ignored(
        "read by Megatron's local DotProductAttention only (FusedScaleMaskSoftmax); verl's Transformer Engine layer "
        "specs attend with TEDotProductAttention (flash / fused attention, attention_backend)"),
    f"{TRANSFORMER}.persist_layer_norm": ignored(
        "read by Megatron's Apex FusedLayerNorm of the local layer spec only (0.13.0 fusions/fused_layer_norm.py); "
        "verl's Transformer Engine layer specs normalize with TE's norms"),
    **moe_kernel_rules(TRANSFORMER),
}


def megatron_pipeline_split(v: Any, layout: dict[str, Any], model: Any,
                            decided: dict[str, tuple[Status, str]]) -> None:
    """pp_first_stage_layers / pp_last_stage_layers of ``layout`` (the megatron actor's) from Megatron's
    uneven first / last stage counts, or from account_for_embedding / loss_in_pipeline_split (vpp 1, pp
    >= 2: the split of num_layers + 1 (+ 1) over pp stages, the first / last stage one layer fewer).
    Megatron-Core refuses the two ways together (0.13.0 transformer_config.py __post_init__), so does this."""
    for key, field in ((FIRST_STAGE, "pp_first_stage_layers"), (LAST_STAGE, "pp_last_stage_layers")):
        if (value := v.whole(key)) is not None:
            layout[field] = value
    accounted = [key for key in (EMBEDDING_SPLIT, LOSS_SPLIT) if v.given(key) and v.flag(key)]
    for key in (EMBEDDING_SPLIT, LOSS_SPLIT):
        if v.given(key) and key not in accounted:
            decided[key] = ("ignored", "false: Megatron-Core splits the transformer layers alone")
    if not accounted:
        return
    src = v.result.source
    if v.whole(FIRST_STAGE) is not None or v.whole(LAST_STAGE) is not None:
        raise RlsimError(f"{accounted[0].rsplit('.', 1)[1]} beside num_layers_in_first / last_pipeline_stage: "
                         "Megatron-Core refuses the pair at start-up (0.13.0 transformer/transformer_config.py "
                         "__post_init__)", source=src, field=accounted[0],
                         fix=f"give the stage counts alone, or drop {FIRST_STAGE} and {LAST_STAGE}")
    pp, vpp = layout.get("pp", 1), layout.get("vpp", 1)
    if pp == 1:
        for key in accounted:
            decided[key] = ("ignored", "pp 1: one stage holds the embedding, every layer and the loss")
        return
    if vpp > 1:
        raise RlsimError(f"{accounted[0].rsplit('.', 1)[1]} with virtual pipeline stages (vpp {vpp}): only the "
                         "first / last model chunk is one layer short, which rlsim's uneven split (vpp 1) cannot "
                         "express", source=src, field=accounted[0],
                         fix="drop it (an even split), or set virtual_pipeline_model_parallel_size to 1")
    layout.update(_accounted_split(_num_layers(model, accounted[0], src), pp, accounted, src))


def _accounted_split(num_layers: int, pp: int, accounted: list[str], src: str) -> dict[str, int]:
    """Megatron-Core 0.13.0 get_num_layers_to_build without virtual stages: (num_layers + the accounted
    parts) / pp a stage (an exact split, else refused), one fewer on the stage holding each part."""
    total = num_layers + len(accounted)
    if total % pp:
        raise RlsimError(f"{num_layers} layers + {len(accounted)} accounted for (embedding / loss) = {total} do not "
                         f"split evenly over pp {pp}: Megatron-Core refuses it ('num_layers should be divisible by "
                         "pipeline_model_parallel_size')", source=src, field=accounted[0],
                         fix="give num_layers_in_first / last_pipeline_stage instead, or a pp dividing "
                             f"{total}")
    per_stage = total // pp
    fields = {EMBEDDING_SPLIT: "pp_first_stage_layers", LOSS_SPLIT: "pp_last_stage_layers"}
    return {fields[key]: per_stage - 1 for key in accounted}


def _num_layers(model: Any, key: str, src: str) -> int:
    """The trained model's layer count (the config's model, or the one --set gives)."""
    from ..llm.architecture import load_model
    if model is None:
        raise RlsimError("the split that accounts for the embedding / loss needs the model's layer count, and the "
                         "model is not known here", source=src, field=key,
                         fix="give actor_rollout_ref.model.path (or --set workload.model), or the stage counts "
                             "num_layers_in_first / last_pipeline_stage")
    return int(load_model(model).num_layers)


def megatron_expert_capacity(v: Any, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """moe_expert_capacity_factor / moe_pad_expert_input_to_capacity onto workload.train_params.compute,
    after w's model and train_layout are mapped. Megatron-Core 0.13.0 (transformer_config.py __post_init__)
    reads a negative factor as none (dropless), refuses the pad without a factor and a factor beside the
    sinkhorn balancing: so does this. Not passed on where rlsim's cap acts on nothing: a dense model, or
    ep 1 (no busiest rank; the mean is priced), where a factor below 1 or the pad is unsupported."""
    src, factor = v.result.source, _capacity_factor(v)
    pad = v.given(PAD) and v.flag(PAD)
    if pad and factor is None:
        raise RlsimError("moe_pad_expert_input_to_capacity without a capacity factor: Megatron-Core refuses it "
                         "('moe_expert_capacity_factor must be set')", source=src, field=PAD,
                         fix=f"give {CAPACITY}, or drop the pad")
    if factor is None:
        if v.given(CAPACITY):
            decided[CAPACITY] = ("ignored", "null or negative: dropless, Megatron-Core's default (what rlsim prices)")
        return
    balancing = f"{TRANSFORMER}.moe_router_load_balancing_type"
    if v.given(balancing) and v(balancing) == "sinkhorn":
        raise RlsimError("a capacity factor beside the sinkhorn balancing: Megatron-Core refuses it "
                         "('moe_expert_capacity_factor only works with aux_loss or none load balancing')", source=src,
                         field=CAPACITY, fix=f"pass {balancing}=aux_loss (or none), or drop {CAPACITY}")
    layout = w.get("train_layout")
    ep = layout.get("ep", 1) if isinstance(layout, dict) else 1
    keys = [CAPACITY] + ([PAD] if v.given(PAD) else [])
    if not has_experts(w.get("model"), ep):
        decided.update(dict.fromkeys(keys, ("ignored", "the model has no routed experts")))
    elif ep == 1 and (pad or factor < 1):
        decided.update(dict.fromkeys(keys, ("unsupported", "at ep 1 the dropped or padded expert rows are not "
                                            "modelled: rlsim prices every expert at its mean rows there")))
    elif ep == 1:
        decided.update(dict.fromkeys(keys, ("ignored", f"ep 1: rlsim prices every expert at its mean rows, which a "
                                            f"capacity of {factor} x the mean does not cap")))
    else:
        merge_train_params(w, {"compute": {"moe_expert_capacity_factor": factor,
                                           **({"moe_pad_expert_input_to_capacity": True} if pad else {})}})


def _capacity_factor(v: Any) -> float | None:
    """The capacity factor (None: dropless, as Megatron-Core reads null or a negative one); 0 is refused."""
    if not v.given(CAPACITY) or v(CAPACITY) is None:
        return None
    value = v(CAPACITY)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        raise RlsimError(f"expected a capacity factor (a number, not 0), got {value!r}", source=v.result.source,
                         field=CAPACITY, fix=f"pass {CAPACITY}=1.0 (for example), or null for dropless")
    return None if value < 0 else float(value)


# verl 0.6.1 models/mcore/config_converter.py hf_to_mcore_config_dpskv3 (DeepseekV3ForCausalLM, the
# converter verl builds the TransformerConfig with unless use_mbridge): moe_router_dtype="fp64" ("mcore 0.12
# moe"); override_transformer_config replaces it. Its moe_permute_fusion stays commented out ("need TE 2.1+").
DEEPSEEK_V3_ROUTER = ("fp64", "verl's DeepSeek-V3 converter sets moe_router_dtype fp64 itself (0.6.1 models/mcore/"
                      "config_converter.py hf_to_mcore_config_dpskv3)")


def converter_router_dtype(model: Any, use_mbridge: bool) -> tuple[str, str] | None:
    """The router dtype verl's own model converter sets for ``model`` (None: none, or Megatron-Bridge
    builds the config, whose providers are not read here)."""
    from ..llm.architecture import load_model
    if model is None or use_mbridge:
        return None
    try:
        model_type = load_model(model).model_type
    except RlsimError:   # the model's own error comes where it is loaded
        return None
    return DEEPSEEK_V3_ROUTER if model_type == "deepseek_v3" else None

