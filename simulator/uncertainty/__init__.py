"""Seeds, intervals and sensitivity (DESIGN.md "around" layer; docs/guides/uncertainty.md).

    >>> from simulator import uncertainty
    >>> doc = uncertainty.replicate(None, seeds=8, iterations=2)     # medians, ci95, seeds
    >>> frame = uncertainty.sensitivity(None, iterations=1)          # tornado + Sobol table

The names below load on first use, so a run that only plans its replicas does not import pandas
(sensitivity's DataFrames) before it simulates.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOME = {"compare_replicas": "compare", "Distribution": "distributions", "median_ci": "intervals",
         "ReplicaPlan": "replicas", "plan_replicas": "replicas", "replicate": "replicas",
         "sensitivity": "sensitivity_runs"}

__all__ = sorted(_HOME, key=str.lower)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value  # found once; no module here shares a function's name (sensitivity_runs)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
