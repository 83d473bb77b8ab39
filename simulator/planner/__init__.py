"""Parallel-strategy planner: search, topology-aware placement, heterogeneous balancing, re-planning.

Public entry points (docs/planner.md): `plan_training` (`rerank_training`), `plan_rollout`, `plan_to_target`,
`plan_hetero`, `plan_kind_subsets`, `replan_on_failure`, `replan_on_slowdown`, `plan_phases`, `simulate_failure_run`,
`planner_settings` (the `planner:` YAML section / `--set planner.KEY=VALUE`).
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from ..errors import RlsimError, validation_error
from ..strict_model import StrictModel
from .hetero import HeteroParams, HeteroPlan, HeteroStepModel, balance, plan_hetero
from .kind_subsets import KindSubsetPlan, plan_kind_subsets
from .placement import Placement, aware_placements, forced_placement, groups, naive_placement
from .replan import (
    PhasePlan,
    RecoveryParams,
    Replan,
    SlowdownReplan,
    plan_phases,
    replan_on_failure,
    replan_on_slowdown,
    simulate_failure_run,
)
from .rollout import RolloutPlan, RolloutSpace, plan_rollout
from .search import (
    Evaluation,
    PlannerParams,
    SearchSpace,
    TrainCandidate,
    TrainChoice,
    TrainPlan,
    enumerate_train_choices,
    plan_to_target,
    plan_training,
    rerank_training,
)


class PlannerSettings(StrictModel):
    """The `planner:` section: search space, rollout space, hetero and recovery constants."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    space: SearchSpace = Field(default_factory=SearchSpace)
    rollout: RolloutSpace = Field(default_factory=RolloutSpace)
    hetero: HeteroParams = Field(default_factory=HeteroParams)
    recovery: RecoveryParams = Field(default_factory=RecoveryParams)
    params: PlannerParams = Field(default_factory=PlannerParams)


PLANNER_SECTIONS = ("space", "rollout", "hetero", "recovery")


def planner_settings(mapping: Mapping[str, Any] | None = None, source: str = "--set planner") -> PlannerSettings:
    """Settings from a mapping; keys that are not sections go to PlannerParams. Errors list every
    bad key as `planner.<section>.<field>`."""
    data = dict(mapping or {})
    sections = {k: data.pop(k) for k in PLANNER_SECTIONS if k in data}
    for key in data:   # a section name mistyped went to the params, whose fields did not name it
        if key not in PlannerParams.model_fields:
            close = difflib.get_close_matches(str(key), [*PLANNER_SECTIONS, *PlannerParams.model_fields], n=1,
                                              cutoff=0.75)
            if close:
                raise RlsimError(f"unknown planner key {key!r}; did you mean {close[0]!r}?", source=source,
                                 field=f"planner.{key}", fix=f"write planner.{close[0]}")
    try:
        return PlannerSettings.model_validate({**sections, "params": data})
    except ValidationError as exc:
        raise validation_error(exc, source=source, prefix="planner", skip=frozenset({"params"}), model=PlannerSettings,
                               fix="see `rlsim plan --help` for the planner keys") from None


__all__ = [
    "Evaluation", "HeteroParams", "HeteroPlan", "HeteroStepModel", "KindSubsetPlan", "PhasePlan", "Placement",
    "PlannerParams", "PlannerSettings", "RecoveryParams", "Replan", "RolloutPlan", "RolloutSpace", "SearchSpace",
    "SlowdownReplan",
    "TrainCandidate", "TrainChoice", "TrainPlan", "aware_placements", "balance", "enumerate_train_choices",
    "forced_placement", "groups", "naive_placement", "plan_hetero", "plan_kind_subsets", "plan_phases",
    "plan_rollout", "plan_to_target", "plan_training", "planner_settings", "replan_on_failure",
    "replan_on_slowdown", "rerank_training", "simulate_failure_run",
]
