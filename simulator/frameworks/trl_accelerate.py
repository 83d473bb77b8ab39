"""The accelerate config a TRL run is launched with, read as the flat keys ``accelerate.<key>``.

TRL's CLI (`trl grpo --config CONFIG.yaml`) hands the YAML's keys that are no dataclass field to
`accelerate launch` (trl/scripts/utils.py TrlParser.parse_args_and_config: "config_remaining"), and
``accelerate_config: NAME`` picks one of the configs TRL ships (trl/accelerate_configs/NAME.yaml) or a
path (trl/cli/accelerate_config.py). Read in the trl 1.16.0 wheel (`pip download --no-deps trl==1.16.0`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import RlsimError
from ..presets import read_yaml
from .common import flatten

PREFIX = "accelerate"
# What every config TRL ships has besides its backend (trl/accelerate_configs/*.yaml, 1.16.0).
_COMMON: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False, "machine_rank": 0,
                           "main_training_function": "main", "mixed_precision": "bf16", "num_machines": 1,
                           "num_processes": 8, "rdzv_backend": "static", "same_network": True, "tpu_env": [],
                           "tpu_use_cluster": False, "tpu_use_sudo": False, "use_cpu": False,
                           "downcast_bf16": "no"}
_FSDP_COMMON: dict[str, Any] = {"fsdp_activation_checkpointing": False, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                "fsdp_cpu_ram_efficient_loading": True, "fsdp_offload_params": False,
                                "fsdp_state_dict_type": "FULL_STATE_DICT"}
SHIPPED: dict[str, dict[str, Any]] = {
    "zero1": {**_COMMON, "distributed_type": "DEEPSPEED",
              "deepspeed_config": {"deepspeed_multinode_launcher": "standard", "gradient_accumulation_steps": 1,
                                   "zero3_init_flag": False, "zero_stage": 1}},
    "zero2": {**_COMMON, "distributed_type": "DEEPSPEED",
              "deepspeed_config": {"deepspeed_multinode_launcher": "standard", "offload_optimizer_device": "none",
                                   "offload_param_device": "none", "zero3_init_flag": False, "zero_stage": 2}},
    "zero3": {**_COMMON, "distributed_type": "DEEPSPEED",
              "deepspeed_config": {"deepspeed_multinode_launcher": "standard", "offload_optimizer_device": "none",
                                   "offload_param_device": "none", "zero3_init_flag": True,
                                   "zero3_save_16bit_model": True, "zero_stage": 3}},
    "fsdp1": {**_COMMON, "distributed_type": "FSDP", "enable_cpu_affinity": False,
              "fsdp_config": {**_FSDP_COMMON, "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_forward_prefetch": True,
                              "fsdp_reshard_after_forward": "FULL_SHARD", "fsdp_sync_module_states": True,
                              "fsdp_use_orig_params": True, "fsdp_version": 1}},
    "fsdp2": {**_COMMON, "distributed_type": "FSDP", "enable_cpu_affinity": False,
              "fsdp_config": {**_FSDP_COMMON, "fsdp_reshard_after_forward": True, "fsdp_version": 2}},
    "multi_gpu": {**_COMMON, "distributed_type": "MULTI_GPU", "gpu_ids": "all"},
    "single_gpu": {**_COMMON, "distributed_type": "NO", "gpu_ids": "all"},
}


def accelerate_keys(name: Any, config_path: str | Path, source: str) -> tuple[dict[str, Any], str]:
    """The accelerate config ``name`` (a TRL-shipped name or a YAML path: as given, else beside the
    TRL config) as ``{"accelerate.<key>": value}``, and where it came from (for the notes)."""
    if not isinstance(name, str) or not name.strip():
        raise RlsimError(f"accelerate_config must name a config, got {name!r}", source=source, field="accelerate_config",
                         fix=f"use one of TRL's ({', '.join(SHIPPED)}) or the path of an accelerate config YAML")
    if name in SHIPPED:
        return flatten(SHIPPED[name], PREFIX), f"TRL's shipped trl/accelerate_configs/{name}.yaml (trl 1.16.0)"
    path = Path(name).expanduser()
    if not path.is_file():
        path = Path(config_path).parent / name
    if not path.is_file():
        raise RlsimError(f"accelerate config {name!r} is neither one TRL ships nor a file", source=source,
                         field="accelerate_config",
                         fix=f"use one of {', '.join(SHIPPED)} or a path (as given, or relative to the config)")
    data = read_yaml(path, what="accelerate config", fix="give the path of an accelerate config YAML")
    return flatten(data, PREFIX), f"the accelerate config {path}"

