"""Reading a verl launch script (`python3 -m verl.trainer.main_ppo key=value ...`, as verl's
examples/*/run_*.sh run it): the Hydra overrides of its training command, its shell variables
resolved (shell.py). They are read over verl's own defaults, as the entry point composes them over
its packaged ppo_trainer.yaml (rlsim's table and defaults stand for that file)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import RlsimError
from .shell import note_assignment, python_command_arguments, script_lines

# A config file's suffixes; anything else given to --from-verl is read as a launch script.
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
SCRIPT_FIX = ("give a shell script that runs python3 -m verl.trainer.main_ppo key=value ... (or a YAML of verl's "
              "config)")


def is_script(path: str | Path) -> bool:
    """Whether ``path`` is read as a launch script (its suffix is not a config file's)."""
    return Path(str(path)).suffix.lower() not in CONFIG_SUFFIXES


def read_verl_script(path: str | Path, sections: Iterable[str]) -> list[str]:
    """The Hydra overrides (``key=value``, ``+key=...``, ``++key=...``, ``~key``) of the script's first
    command that runs a Python entry point with overrides under verl's config ``sections`` (data.,
    actor_rollout_ref., trainer., ...), in order, its variables resolved; an RlsimError naming the
    script where there is none."""
    source, variables = str(path), {}
    prefixes = tuple(f"{section}." for section in sections)
    for line in script_lines(path, "verl launch script", SCRIPT_FIX):
        items = _overrides(line, variables, source, prefixes)
        if items:
            return items
        note_assignment(line, variables)
    raise RlsimError("no verl training command in the script (no key=value override under "
                     f"{', '.join(sorted(sections))})", source=source, fix=SCRIPT_FIX)


def _overrides(line: str, variables: Mapping[str, str], source: str, prefixes: tuple[str, ...]) -> list[str]:
    """The verl overrides of the line's Python command (``-m MODULE`` or ``SCRIPT.py``) up to its end;
    none where the line runs no Python entry point or passes no verl key."""
    if not any(prefix in line for prefix in prefixes):
        return []
    return [token for token in python_command_arguments(line, variables, source) if _key_of(token).startswith(prefixes)]


def _key_of(token: str) -> str:
    """The config key an override names (its ``+`` / ``++`` / ``~`` prefix and value left out)."""
    return token.lstrip("+~").partition("=")[0]
