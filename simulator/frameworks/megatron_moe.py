"""Megatron-Core MoE kernel settings a framework passes to its TransformerConfig, read the same wherever
they are set: verl's actor.megatron.override_transformer_config (frameworks/verl_transformer.py) and NeMo
RL's policy.megatron_cfg (frameworks/nemo_rl.py). moe_permute_fusion -> train_params.compute.
moe_permute_fusion (Transformer Engine's fused permute kernels), moe_router_dtype -> train_params.compute.
moe_router_dtype (the router GEMM and the routing probabilities in fp32 / fp64); neither read on a
model without routed experts. Megatron-Core sources: 0.13.0."""
from __future__ import annotations

from typing import Any

from ..errors import RlsimError
from .common import Rule, Status, has_experts, mapped, merge_train_params

PERMUTE_FUSION, ROUTER_DTYPE = "moe_permute_fusion", "moe_router_dtype"
ROUTER_DTYPES = ("fp32", "fp64")

_DENSE = "the model has no routed experts"

# Megatron TransformerConfig key -> its rule, by the bare key (the framework's section prefixes it)
MOE_KERNEL_RULES: dict[str, Rule] = {
    PERMUTE_FUSION: mapped("workload.train_params.compute.moe_permute_fusion", "Transformer Engine's fused permute / "
                           "chunk sort / unpermute (0.13.0 moe/moe_utils.py fused=True): (k x 12 + 4) bytes a hidden "
                           "unit a token, against the unfused ops' k x 16; not read without routed experts"),
    ROUTER_DTYPE: mapped("workload.train_params.compute.moe_router_dtype", "fp32 / fp64: the router's logits GEMM "
                         "(0.13.0 moe/moe_utils.py router_gating_linear) at that dtype's peak, the combine's "
                         "reduce-scatter in the probabilities' dtype; null: the activations' dtype; not read without "
                         "routed experts"),
}


def moe_kernel_rules(section: str) -> dict[str, Rule]:
    """MOE_KERNEL_RULES under a framework's section (its dotted prefix)."""
    return {f"{section}.{key}": rule for key, rule in MOE_KERNEL_RULES.items()}


def megatron_moe_kernels(v: Any, section: str, w: dict[str, Any], model: Any, decided: dict[str, tuple[Status, str]],
                         *, router_default: tuple[str, str] | None = None) -> None:
    """moe_permute_fusion / moe_router_dtype under ``section`` onto w's train_params.compute, after w's
    train_layout is mapped; ``model``: the model trained (the mapped one or the user's --set; None: not
    known here, taken as MoE at ep > 1); ``router_default`` (dtype, why): the dtype the framework's own
    model config sets where the section leaves it out (verl's DeepSeek-V3 converter: fp64)."""
    fusion_key, dtype_key = f"{section}.{PERMUTE_FUSION}", f"{section}.{ROUTER_DTYPE}"
    fusion = v.flag(fusion_key) if v.given(fusion_key) else False
    dtype = _router_dtype(v, dtype_key) if v.given(dtype_key) else (router_default or (None, ""))[0]
    layout = w.get("train_layout")
    ep = layout.get("ep", 1) if isinstance(layout, dict) else 1
    if not has_experts(model, ep):
        decided.update({key: ("ignored", _DENSE) for key in (fusion_key, dtype_key) if v.given(key)})
        return
    compute = {**({"moe_permute_fusion": True} if fusion else {}), **({"moe_router_dtype": dtype} if dtype else {})}
    if compute:
        merge_train_params(w, {"compute": compute})
    if dtype and not v.given(dtype_key) and router_default:
        v.result.notes.append(f"{dtype_key} left out: {router_default[1]} (workload.train_params.compute."
                              f"moe_router_dtype {dtype})")


def _router_dtype(v: Any, key: str) -> str | None:
    """The router dtype given (None: the activations', Megatron-Core's default)."""
    value = v(key)
    if value is None or value in ROUTER_DTYPES:
        return value
    raise RlsimError(f"unknown router dtype {value!r}", source=v.result.source, field=key,
                     fix="pass fp32, fp64 or null (Megatron-Core's moe_router_dtype choices)")
