"""Relative file paths in scenario data: read next to the file that names them.

A scenario file's `topology: topo.yaml`, a workload file's `model: my-model/config.json`, a length
law's `file:` or a device `profile:` name a file relative to the file they are written in, as YAML
tools read includes; the working folder is the fallback (a path that exists only there, as
before). Values given on the command line (--set, --topology) stay relative to the working folder.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Keys whose string values may name a file or folder: a topology or workload YAML (also the
# scenario's top-level `topology:` / `workload:`), a length file, a device profile, a model's
# config.json or its folder.
FILE_KEYS = frozenset({"preset", "file", "profile", "device_profile", "model", "critic_model", "topology", "workload"})
MODEL_KEYS = frozenset({"model", "critic_model"})   # may name a model's folder (its config.json's)


def with_paths_from(data: Any, folders: Sequence[Path]) -> Any:
    """``data`` with every relative path under FILE_KEYS that names an existing file (or, for a
    model, a folder holding a config.json) in one of ``folders`` (the first that has it) made
    absolute; other values as they are (a preset name stays a name: no such file is there)."""
    def fixed(key: Any, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: fixed(k, v) for k, v in value.items()}
        if isinstance(value, list):
            return [fixed(key, v) for v in value]
        if key in FILE_KEYS and isinstance(value, str) and value.strip() and not Path(value).is_absolute():
            for base in folders:
                candidate = base / Path(value).expanduser()
                if candidate.is_file() or (key in MODEL_KEYS and (candidate / "config.json").is_file()):
                    return str(candidate.resolve())
        return value

    return fixed(None, data)


def folder_of(source: str | Path | None) -> list[Path]:
    """The folder of the file ``source`` names ([] for a label such as '<default scenario>')."""
    if source is None:
        return []
    path = Path(source)
    return [path.resolve().parent] if path.is_file() else []
