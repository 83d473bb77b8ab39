"""verl's optimizer choice (actor.optim / critic.optim: optimizer, optimizer_impl) as the training
state's bytes a parameter and the optimizer step's HBM traffic a parameter.

verl 0.6.1 / 0.7.0 FSDP workers build their optimizer by name (workers/config/optimizer.py
build_optimizer: ``getattr(importlib.import_module(optimizer_impl), optimizer)(params, lr=...,
weight_decay=..., betas=...)``, FSDPOptimizerConfig defaults optimizer "AdamW", optimizer_impl
"torch.optim"), over the FSDP shard of the model, loaded in fsdp_config.model_dtype (fp32 unless set).
The megatron workers hand optim.optimizer to Megatron-Core (utils/megatron/optimizer.py
init_megatron_optim_config: McoreOptimizerConfig.optimizer "adam"), which builds Adam or SGD
(megatron-core 0.13 optimizer/__init__.py: "{} optimizer is not supported" otherwise).
"""
from __future__ import annotations

from typing import Any

from ..errors import RlsimError
from ..params import CommParams, MemoryParams
from .common import Values

# The optimizer state a parameter of each optimizer the FSDP workers can build, as
# (states in the parameters' own dtype, bytes a parameter whatever that dtype):
# - torch.optim Adam / AdamW: exp_avg and exp_avg_sq, torch.zeros_like(p) (torch/optim/adamw.py):
#   two states of the parameter's dtype. SGD: verl passes no momentum (build_optimizer: lr and
#   weight_decay only), so torch's SGD keeps no momentum_buffer: none.
# - torchao.optim _AdamW (verl's example with bf16_stochastic_round): torch.zeros_like(p), two states
#   of the parameter's dtype (torchao 0.13 optim/adam.py _AdamW: block_size inf, no quantization).
# - torchao.optim Adam8bit / AdamW8bit: each state uint8 codes (1 B) and an fp32 scale per block of
#   256 (optim/subclass_8bit.py OptimState8bit.zeros, block_size 256): 2 x (1 + 4 / 256).
#   AdamFp8 / AdamWFp8: float8 codes, fp32 scale per 256 (subclass_fp8.py): the same. Adam4bit /
#   AdamW4bit: two codes packed a byte and an fp32 scale per 128 (subclass_4bit.py, block_size 128):
#   2 x (0.5 + 4 / 128). torchao keeps a plain zeros_like(p) state for a shard under 4096 values or
#   not a multiple of the block (optim/adam.py _new_buffer): the norms' and biases', a small share,
#   not counted.
# - bitsandbytes.optim Adam8bit / AdamW8bit: state1, state2 uint8 (1 B each) and an fp32 absmax per
#   block of 256 each (bitsandbytes 0.48.1 optim/optimizer.py Optimizer2State.init_state, block_wise
#   True by default): 2 x (1 + 4 / 256); fp32 states under min_8bit_size (4096 values), not counted.
#   Adam / AdamW (optim_bits 32): two fp32 states (init_state: dtype torch.float32) whatever the
#   parameters' dtype.
_EIGHT_BIT_ADAM = 2 * (1.0 + 4.0 / 256)
_FOUR_BIT_ADAM = 2 * (0.5 + 4.0 / 128)
FSDP_OPTIMIZER_STATE: dict[tuple[str, str], tuple[float, float]] = {
    ("torch.optim", "AdamW"): (2.0, 0.0), ("torch.optim", "Adam"): (2.0, 0.0), ("torch.optim", "SGD"): (0.0, 0.0),
    ("torchao.optim", "_AdamW"): (2.0, 0.0),
    ("torchao.optim", "AdamW8bit"): (0.0, _EIGHT_BIT_ADAM), ("torchao.optim", "Adam8bit"): (0.0, _EIGHT_BIT_ADAM),
    ("torchao.optim", "AdamWFp8"): (0.0, _EIGHT_BIT_ADAM), ("torchao.optim", "AdamFp8"): (0.0, _EIGHT_BIT_ADAM),
    ("torchao.optim", "AdamW4bit"): (0.0, _FOUR_BIT_ADAM), ("torchao.optim", "Adam4bit"): (0.0, _FOUR_BIT_ADAM),
    ("bitsandbytes.optim", "AdamW8bit"): (0.0, _EIGHT_BIT_ADAM),
    ("bitsandbytes.optim", "Adam8bit"): (0.0, _EIGHT_BIT_ADAM),
    ("bitsandbytes.optim", "AdamW"): (0.0, 8.0), ("bitsandbytes.optim", "Adam"): (0.0, 8.0),
}
FSDP_DEFAULT_OPTIMIZER = ("torch.optim", "AdamW")   # FSDPOptimizerConfig's optimizer_impl, optimizer

# Megatron-Core's optimizers under verl's megatron workers, as the optimizer state beside the bf16
# weights and fp32 main gradients (MemoryParams' 2 + 4): the distributed optimizer's fp32 main
# parameters (4) and Adam's fp32 exp_avg, exp_avg_sq (zeros_like of them: 8), 12; SGD's one
# momentum buffer (OptimizerConfig.sgd_momentum 0.9, torch SGD's momentum_buffer: 4), 8.
MEGATRON_OPTIMIZER_STATE = {"adam": 12.0, "sgd": 8.0}
MEGATRON_DEFAULT_OPTIMIZER = "adam"                  # McoreOptimizerConfig.optimizer
MEGATRON_WEIGHT_WRITE_BYTES = 2.0                    # the step writes the bf16 weights back from the main ones
MEGATRON_GRAD_BYTES = 4.0                            # the fp32 main gradient it reads

# override_optimizer_config keys that leave the state's bytes as they are (hyper-parameters, the
# kernel's form): ignored; any other (amsgrad, optim_bits, block_size, min_8bit_size, sgd_momentum,
# Megatron's precision-aware or CPU-offloaded optimizer...) changes what the state holds: unsupported.
STATE_NEUTRAL_OVERRIDES = frozenset({
    "lr", "eps", "betas", "weight_decay", "foreach", "fused", "capturable", "maximize", "differentiable",
    "bf16_stochastic_round", "percentile_clipping", "max_unorm", "adam_beta1", "adam_beta2", "adam_eps",
    "clip_grad", "min_lr", "lr_warmup_init"})


def fsdp_optimizer_state(v: Values, section: str, param_bytes: float) -> tuple[float, float]:
    """The state bytes a parameter of the FSDP optimizer ``section`` (actor.optim / critic.optim)
    names over parameters of ``param_bytes``, and its step's HBM traffic a parameter
    (fsdp_step_traffic: the shard is the master copy)."""
    impl = str(v(f"{section}.optimizer_impl") or FSDP_DEFAULT_OPTIMIZER[0])
    name = str(v(f"{section}.optimizer") or FSDP_DEFAULT_OPTIMIZER[1])
    if (impl, name) not in FSDP_OPTIMIZER_STATE:
        known = ", ".join(f"{i}.{n}" for i, n in FSDP_OPTIMIZER_STATE)
        field = "optimizer" if impl in {i for i, _ in FSDP_OPTIMIZER_STATE} else "optimizer_impl"
        raise RlsimError(f"optimizer {impl}.{name} is not one rlsim knows the state of", source=v.result.source,
                         field=f"{section}.{field}", fix=f"use one of {known} (optimizer_impl.optimizer)")
    per_dtype, fixed = FSDP_OPTIMIZER_STATE[(impl, name)]
    state = per_dtype * param_bytes + fixed
    return state, fsdp_step_traffic(param_bytes, state)


def fsdp_step_traffic(master_bytes: float, state_bytes: float) -> float:
    """The HBM traffic a parameter of an optimizer step over an FSDP shard that is its own master copy
    (no separate low-precision weights to write back, unlike Megatron's distributed optimizer: rlsim's
    default 30): the shard read and written (2 x master_bytes), its gradient read (master_bytes: FSDP
    casts the reduced gradient to the parameters' dtype), each state read and written (2 x
    state_bytes). fp32 torch AdamW: 8 + 4 + 16 = 28."""
    return 2 * master_bytes + master_bytes + 2 * state_bytes


def megatron_optimizer_state(v: Values, section: str) -> tuple[float, float] | None:
    """The state bytes a parameter and the step's traffic of the Megatron-Core optimizer ``section``
    names; None for Adam (MemoryParams' and CommParams' defaults: 12 and 30)."""
    name = str(v(f"{section}.optimizer") or MEGATRON_DEFAULT_OPTIMIZER)
    if name not in MEGATRON_OPTIMIZER_STATE:
        raise RlsimError(f"optimizer {name!r} is not one Megatron-Core builds", source=v.result.source,
                         field=f"{section}.optimizer", fix=f"use one of {', '.join(MEGATRON_OPTIMIZER_STATE)}")
    if name == MEGATRON_DEFAULT_OPTIMIZER:
        return None
    state = MEGATRON_OPTIMIZER_STATE[name]
    return state, MEGATRON_WEIGHT_WRITE_BYTES + MEGATRON_GRAD_BYTES + 2 * state


def override_decisions(v: Values, section: str) -> dict[str, tuple[str, str]]:
    """override_optimizer_config's keys: ignored where they leave the state's bytes, else unsupported."""
    prefix = f"{section}.override_optimizer_config."
    decided: dict[str, tuple[str, str]] = {}
    for key in (k for k in v.flat if k.startswith(prefix)):
        if key[len(prefix):] in STATE_NEUTRAL_OVERRIDES:
            decided[key] = ("ignored", "an optimizer hyper-parameter: the state's bytes stay")
        else:
            decided[key] = ("unsupported", "changes what the optimizer state holds: not modelled")
    return decided


def optimizer_fields(v: Values, section: str, strategy: str, param_bytes: float) -> dict[str, Any]:
    """workload.train_params' optimizer fields for ``section``'s optimizer under ``strategy``: memory
    (optimizer_bytes_per_param) and comm (optimizer_traffic_bytes_per_param); empty where they are
    rlsim's defaults (Megatron-Core's Adam)."""
    if strategy in ("fsdp", "fsdp2"):
        state, traffic = fsdp_optimizer_state(v, section, param_bytes)
    else:
        found = megatron_optimizer_state(v, section)
        if found is None:
            return {}
        state, traffic = found
    return {"memory": {"optimizer_bytes_per_param": state}, "comm": {"optimizer_traffic_bytes_per_param": traffic}}


def critic_optimizer(fields: dict[str, Any], actor_train: dict[str, Any]) -> dict[str, float] | None:
    """workload.critic_optimizer from the critic's optimizer ``fields`` (optimizer_fields) where its
    state or traffic differs from the actor's (``actor_train``: workload.train_params, rlsim's
    defaults where it gives none); None where they are the same."""
    defaults = {("memory", "optimizer_bytes_per_param"): MemoryParams().optimizer_bytes_per_param,
                ("comm", "optimizer_traffic_bytes_per_param"): CommParams().optimizer_traffic_bytes_per_param}
    own = {name: (fields.get(part) or {}).get(name, default) for (part, name), default in defaults.items()}
    actor = {name: (actor_train.get(part) or {}).get(name, default) for (part, name), default in defaults.items()}
    return own if own != actor else None


# megatron-core 0.16.1 optimizer/optimizer_config.py: optimizer_offload_fraction's default
MCORE_OPTIMIZER_OFFLOAD_FRACTION = 0.0


def hybrid_device_offload(v: Values, key: str, share_key: str) -> dict[str, Any] | None:
    """Megatron-Core's OptimizerConfig.optimizer_cpu_offload (``key``): its HybridDeviceOptimizer keeps
    optimizer_offload_fraction (``share_key``) of the state on the host and steps it there, as
    workload.train_params.offload of scope optimizer_step; None where ``key`` is not given. Its default
    share 0.0 offloads nothing: the state stays on the devices, said in a note."""
    if not v.given(key):
        return None
    if not v.flag(key):
        return {"optimizer": False}
    share = v(share_key) if v.given(share_key) else MCORE_OPTIMIZER_OFFLOAD_FRACTION
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise RlsimError(f"expected a share in [0, 1], got {share!r}", source=v.result.source, field=share_key,
                         fix=f"pass {share_key}=0.5 (for example)")
    if share <= 0:
        v.result.notes.append(f"{key} with {share_key} {share:g} (Megatron-Core's default 0.0): nothing is "
                              "offloaded, the optimizer state stays on the devices")
        return {"optimizer": False}
    return {"optimizer": True, "scope": "optimizer_step", "optimizer_fraction": float(share)}
