"""Megatron-Core TransformerConfig recompute keys a framework passes on, read the same wherever they are
set: verl's actor.megatron.override_transformer_config (0.6.1 models/mcore/config_converter.py, or mbridge's
set_extra_args) and AReaL's actor.megatron with gradient_checkpointing (areal 1.0.4 engine/megatron_engine.py:
mbridge's set_extra_args). recompute_granularity / recompute_method / recompute_num_layers /
recompute_modules -> workload.train_layout.recompute / recompute_method / recompute_num_layers. Megatron-Core
checks them in TransformerConfig.__post_init__ (0.8.0 to 0.16.1 transformer/transformer_config.py): full
needs a recompute_method and a recompute_num_layers, selective refuses a recompute_num_layers; the import
refuses what Megatron-Core refuses."""
from __future__ import annotations

from typing import Any

from ..errors import RlsimError
from .common import Rule, Status, Values, mapped

GRANULARITY, METHOD, NUM_LAYERS, MODULES = KEYS = (
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules")
_RECOMPUTE = {None: "none", "full": "full", "selective": "selective"}
_SOURCE = "Megatron-Core TransformerConfig.__post_init__"


def recompute_rules(prefix: str, gate: str = "") -> dict[str, Rule]:
    """The four keys' rules under ``prefix``; ``gate``: what else they need to be read (AReaL's
    gradient_checkpointing), said in each reason."""
    when = f"{gate}; " if gate else ""
    return {
        f"{prefix}.{GRANULARITY}": mapped("workload.train_layout.recompute", f"{when}null none, full (with "
                                          "recompute_method and recompute_num_layers), selective (the attention core, "
                                          "recompute_modules [core_attn])"),
        **{f"{prefix}.{key}": mapped(f"workload.train_layout.{key}", f"{when}read with recompute_granularity full, "
                                     "which needs both (Megatron-Core refuses null): uniform checkpoints each group of "
                                     "recompute_num_layers layers, block recomputes the first recompute_num_layers of "
                                     "each model chunk; selective refuses a recompute_num_layers")
           for key in (METHOD, NUM_LAYERS)},
        f"{prefix}.{MODULES}": mapped("workload.train_layout.recompute", f"{when}read with recompute_granularity "
                                      "selective: [core_attn] is rlsim's selective; other modules are not modelled"),
    }


def megatron_recompute(v: Values, prefix: str, decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """rlsim's recompute fields from the four keys under ``prefix`` (absent: the framework's defaults, else
    null): null none; full with recompute_method uniform or block and recompute_num_layers N (the defaults
    uniform, 1 left out of the layout); selective the attention core (recompute_modules other than
    [core_attn] are not modelled)."""
    keys = {name: f"{prefix}.{name}" for name in KEYS}
    granularity, method, layers, modules = (v(keys[name]) for name in KEYS)
    _check(v, keys, granularity, method, layers)
    for name in (METHOD, NUM_LAYERS):
        if v.given(keys[name]) and granularity != "full":
            decided[keys[name]] = ("ignored", f"read with recompute_granularity full only (here {granularity})")
    if v.given(keys[MODULES]) and granularity != "selective":
        decided[keys[MODULES]] = ("ignored", f"read with recompute_granularity selective only (here {granularity})")
    elif v.given(keys[MODULES]) and modules not in (None, ["core_attn"]):
        decided[keys[MODULES]] = ("unsupported", f"recomputing {modules} is not modelled: rlsim's selective "
                                                 "recomputes the attention core (core_attn)")
    out: dict[str, Any] = {"recompute": _RECOMPUTE[granularity]}
    if granularity == "full" and method != "uniform":   # the defaults left out: the scenario as before
        out["recompute_method"] = method
    if granularity == "full" and layers != 1:
        out["recompute_num_layers"] = layers
    return out


def _check(v: Values, keys: dict[str, str], granularity: Any, method: Any, layers: Any) -> None:
    """What Megatron-Core's TransformerConfig refuses (a ValueError when the model is built)."""
    src = v.result.source
    if granularity not in _RECOMPUTE:
        raise RlsimError(f"unknown recompute_granularity {granularity!r}", source=src, field=keys[GRANULARITY],
                         fix="use full, selective or null")
    if granularity is not None and method not in ((None, "uniform", "block") if granularity == "selective"
                                                  else ("uniform", "block")):
        raise RlsimError(f"recompute_method {method!r} with recompute_granularity {granularity} ({_SOURCE} refuses it: "
                         "full needs uniform or block)", source=src, field=keys[METHOD], fix="use uniform or block")
    if granularity == "full" and (layers is None or isinstance(layers, bool) or not isinstance(layers, int)
                                  or layers < 1):
        raise RlsimError(f"recompute_num_layers {layers!r} with recompute_granularity full ({_SOURCE} needs a "
                         "number of layers)", source=src, field=keys[NUM_LAYERS],
                         fix="set it to 1 or more (uniform: the layers a checkpointed group holds; block: the layers of "
                             "each model chunk recomputed)")
    if granularity == "selective" and layers is not None:
        default = "" if v.given(keys[NUM_LAYERS]) else f", {v.result.framework}'s default"
        raise RlsimError(f"recompute_num_layers {layers!r}{default} with recompute_granularity selective ({_SOURCE} refuses "
                         "it: selective recomputes part of every layer)", source=src, field=keys[NUM_LAYERS],
                         fix="set it to null, or recompute_granularity to full")
