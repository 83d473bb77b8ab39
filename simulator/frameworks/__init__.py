"""Framework configs (verl, NeMo RL, AReaL, OpenRLHF and SkyRL launch scripts, TRL GRPO configs) turned into rlsim scenarios; see docs/guides/frameworks.md."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import RlsimError
from .common import FrameworkImport

FRAMEWORKS = ("verl", "nemo-rl", "areal", "openrlhf", "trl", "skyrl")


def import_config(framework: str, path: str | Path, overrides: Iterable[str] = (), *,
                  topology: str | None = None, schedule: str | None = None,
                  user_sets: Iterable[str] = ()) -> FrameworkImport:
    """``framework`` 'verl', 'nemo-rl', 'areal', 'trl' (a YAML) or 'openrlhf' (a launch script), plus ``key=value``
    overrides -> FrameworkImport."""
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
