"""Framework configs (verl, NeMo RL, AReaL, OpenRLHF and SkyRL launch scripts, TRL GRPO configs) turned into rlsim scenarios; see docs/guides/frameworks.md."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import RlsimError
from .common import FrameworkImport

FRAMEWORKS = ("verl", "nemo-rl", "areal", "openrlhf", "trl", "skyrl")
# Top-level keys only one framework's YAML config has (verl's ppo_trainer.yaml, NeMo RL's grpo_*.yaml,
# AReaL's GRPOConfig, TRL's GRPOConfig fields, SkyRL's ppo_base_config.yaml): a config given to
# another framework's importer is named for what it is (an AReaL config read as TRL's said "use_vllm is
# false", a NeMo RL recipe read as verl's ran verl's defaults; a new-user trial)
NAMES = {"verl": "verl", "nemo-rl": "NeMo RL", "areal": "AReaL", "openrlhf": "OpenRLHF", "trl": "TRL", "skyrl": "SkyRL"}
SIGNATURES = {"verl": {"actor_rollout_ref"}, "nemo-rl": {"grpo", "policy", "loss_fn"},
              "areal": {"gconfig", "allocation_mode"},
              "trl": {"num_generations", "model_name_or_path", "use_vllm", "vllm_mode"}, "skyrl": {"generator"}}


def _check_framework_of(framework: str, path: str | Path) -> None:
    """A YAML whose top-level keys are another framework's signature and none of ``framework``'s is
    refused, naming the importer it belongs to; anything else (a script, a file that does not read,
    a file of base keys only) is the importer's to judge."""
    if Path(str(path)).suffix.lower() not in (".yaml", ".yml") or framework not in SIGNATURES:
        return
    from ..presets import read_yaml
    try:
        keys = set(read_yaml(path, what="config"))
    except RlsimError:
        return
    if keys & SIGNATURES[framework]:
        return
    for other, signature in SIGNATURES.items():
        if other != framework and keys & signature:
            raise RlsimError(f"this looks like {NAMES[other]}'s config (top-level "
                             f"{', '.join(sorted(keys & signature))}), not {NAMES[framework]}'s (none of "
                             f"{', '.join(sorted(SIGNATURES[framework]))})",
                             source=str(path), field=f"--from-{framework}", fix=f"give it as --from-{other} {path}")


def import_config(framework: str, path: str | Path, overrides: Iterable[str] = (), *,
                  topology: str | None = None, schedule: str | None = None,
                  user_sets: Iterable[str] = ()) -> FrameworkImport:
    """``framework`` 'verl', 'nemo-rl', 'areal', 'trl' (a YAML) or 'openrlhf' (a launch script), plus ``key=value``
    overrides -> FrameworkImport. ``user_sets``: the scenario keys the command sets (--set, a sweep's --grid),
    which the import leaves to the user; a mapping gives their values where known (a --set's; None for a
    --grid key), so that a default that depends on the model follows the one --set gives (model_set_by_user)."""
    _check_framework_of(framework, path)
    if framework == "verl":
        from .verl import import_verl
        return import_verl(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    if framework == "nemo-rl":
        from .nemo_rl import import_nemo_rl
        return import_nemo_rl(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    if framework == "areal":
        from .areal import import_areal
        return import_areal(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    if framework == "openrlhf":
        from .openrlhf import import_openrlhf
        return import_openrlhf(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    if framework == "trl":
        from .trl import import_trl
        return import_trl(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    if framework == "skyrl":
        from .skyrl import import_skyrl
        return import_skyrl(path, overrides, topology=topology, schedule=schedule, user_sets=user_sets)
    raise RlsimError(f"unknown framework {framework!r}", field="framework", fix=f"use one of {', '.join(FRAMEWORKS)}")


__all__ = ["FRAMEWORKS", "FrameworkImport", "import_config"]
