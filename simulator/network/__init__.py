"""Network layer: flows sharing links (max-min fair) and collectives over device groups.

The names below load on first use: `rlsim --help` reads only network/ops.py (no networkx)."""
from __future__ import annotations

import importlib
from typing import Any

from .ops import ALGORITHMS, OPS

_HOME = {"CollectiveCost": "collectives", "CollectiveModel": "collectives", "CollectiveParams": "collectives",
         "CollectivePlan": "collectives", "Phase": "collectives", "bus_factor": "collectives",
         "parse_group": "collectives", "FlowNetwork": "flows", "FlowRecord": "flows", "FlowStats": "flows"}

__all__ = ["ALGORITHMS", "OPS", "CollectiveCost", "CollectiveModel", "CollectiveParams", "CollectivePlan",
           "FlowNetwork", "FlowRecord", "FlowStats", "Phase", "bus_factor", "parse_group"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
