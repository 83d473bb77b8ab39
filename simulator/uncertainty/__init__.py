"""Seeds, intervals and sensitivity (DESIGN.md "around" layer; docs/guides/uncertainty.md).

    >>> from simulator import uncertainty
    >>> doc = uncertainty.replicate(None, seeds=8, iterations=2)     # medians, ci95, seeds
    >>> frame = uncertainty.sensitivity(None, iterations=1)          # tornado + Sobol table
"""
from __future__ import annotations

from .compare import compare_replicas
from .distributions import Distribution
from .intervals import median_ci
from .replicas import ReplicaPlan, plan_replicas, replicate
from .sensitivity import sensitivity

__all__ = ["Distribution", "ReplicaPlan", "compare_replicas", "median_ci", "plan_replicas", "replicate",
           "sensitivity"]
