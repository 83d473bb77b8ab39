"""The planner's Python entry points check their arguments: a notebook's slip (a model name where a
model goes, a space as a dict, ``ranks=[]``, ``global_batch=-4``) is an RlsimError naming the
argument, not an AttributeError or a ZeroDivisionError deep in the search (a new-user trial), nor a
"no layout fits" that hides the bad argument. A model or topology given by name, path or mapping is
loaded, as the scenario's keys are."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import RlsimError, validation_error
from ..units import whole_number

Space = TypeVar("Space", bound=BaseModel)


def model_arg(model: Any) -> Any:
    """``model`` as a model: a preset name, a config.json path or a mapping is loaded."""
    if isinstance(model, (str, Path, Mapping)):
        from ..llm.architecture import load_model
        return load_model(model, field="model")
    if not all(hasattr(model, name) for name in ("num_heads", "num_kv_heads", "num_layers")):
        raise RlsimError(f"model: a {type(model).__name__} is not a model", field="model",
                         fix="pass a preset name (e.g. 'qwen2.5-7b'), a config.json path or "
                             "simulator.llm.architecture.load_model(...)")
    return model


def topology_arg(topology: Any) -> Any:
    """``topology`` as a topology: a preset name, a YAML path or a mapping is loaded."""
    if isinstance(topology, (str, Path, Mapping)):
        from ..hardware.topology import load_topology
        return load_topology(dict(topology) if isinstance(topology, Mapping) else str(topology))
    if not hasattr(topology, "num_devices"):
        raise RlsimError(f"topology: a {type(topology).__name__} is not a topology", field="topology",
                         fix="pass a preset name (e.g. 'dgx-h100'), a mapping such as {'preset': 'dgx-h100', "
                             "'nodes': 2} or simulator.hardware.topology.load_topology(...)")
    return topology


def count_arg(value: Any, name: str) -> int:
    """A whole number >= 1 (a batch, a sequence length, how many plans to keep)."""
    whole = whole_number(value)   # np.int64(64) is 64
    if whole is None or whole < 1:
        raise RlsimError(f"{name} must be a whole number >= 1, got {value!r}", field=name, fix=f"e.g. {name}=1")
    return whole


def ranks_arg(ranks: Sequence[int] | None, topology: Any) -> list[int]:
    """The devices to plan on: every device by default; else distinct ranks of the topology."""
    devices = int(topology.num_devices)
    if ranks is None:
        return list(range(devices))
    given = list(ranks)
    wholes = [whole_number(r) for r in given]   # np.arange(8): its np.int64 ranks are devices 0..7
    if not given:
        raise RlsimError("ranks is empty: no device to plan on", field="ranks", fix="leave ranks out (every device)")
    not_whole = [g for g, r in zip(given, wholes, strict=True) if r is None]
    if not_whole:   # 4.0 read "not a device of the topology (0..7)"
        raise RlsimError(f"ranks {not_whole[:5]} are not whole numbers", field="ranks",
                         fix=f"give device ranks as whole numbers among 0..{devices - 1}, e.g. range(4)")
    out = [r for r in wholes if r is not None]   # every one, after the check above
    bad = [r for r in out if not 0 <= r < devices]
    if bad:
        raise RlsimError(f"ranks {bad[:5]} are not devices of the topology (0..{devices - 1})", field="ranks",
                         fix=f"give ranks among 0..{devices - 1}")
    if len(set(out)) != len(out):
        raise RlsimError("ranks names a device twice", field="ranks", fix="give each device once")
    return out


def top_arg(top: int | None) -> int | None:
    return None if top is None else count_arg(top, "top")


def space_arg(space: Any, kind: type[Space]) -> Space:
    """A search space: the default, the ``kind`` given, or a mapping of its fields."""
    if space is None:
        return kind()
    if isinstance(space, Mapping):
        try:
            return kind.model_validate(dict(space))
        except ValidationError as exc:
            raise validation_error(exc, prefix="space", model=kind) from None
    if not isinstance(space, kind):
        raise RlsimError(f"space: a {type(space).__name__} is not a {kind.__name__}", field="space",
                         fix=f"pass a {kind.__name__} or a mapping of its fields")
    return space


def rate_arg(value: float | None, name: str) -> float | None:
    """None or a finite rate > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RlsimError(f"{name} must be a number > 0 or None, got {value!r}", field=name, fix=f"e.g. {name}=1e5")
    return float(value)
