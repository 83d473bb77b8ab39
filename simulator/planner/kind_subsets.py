"""Heterogeneous plans that may leave a device kind idle.

`plan_hetero` splits work over every device it is given, each pipeline stage at least one layer and
each replica at least one micro-batch: a kind so slow (or so poorly connected) that its one layer or
one micro-batch outlasts the rest of the step still paced it. `plan_kind_subsets` runs the same
search, on the same step models (one cost model for every candidate), on the devices of each subset
of the kinds, and reports the fastest; the kinds it leaves out are idle, their device-hours the price.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from ..errors import RlsimError
from ..params import TrainParams
from .hetero import HeteroParams, HeteroPlan, hetero_step_models, plan_on_step_models, result_json

# Every non-empty subset of the kinds is tried up to this many kinds (2^4 - 1 = 15 searches); past
# it, the n prefixes of the kinds ordered fastest first (by peak FLOP/s in planner.hetero.dtype), so
# that the search grows linearly with the kinds: a bound on the planner's run time, not a model constant.
MAX_KINDS_EVERY_SUBSET = 4
SECONDS_PER_HOUR = 3600.0
STEPS_PER_REPORT = 1000   # idle device-hours per 1,000 steps, as capacity.cost_fields reports device-hours


@dataclass(frozen=True)
class DeviceKind:
    """The devices of one DeviceSpec among the planned ranks."""

    label: str                # the run's kind name (Topology.kind_of): NAME@GROUP where two kinds share a name
    ranks: tuple[int, ...]
    peak_flops: float         # in planner.hetero.dtype: the order of the fastest-first prefixes


def device_kinds(topology: Any, ranks: Sequence[int], dtype: str = "bf16") -> list[DeviceKind]:
    """The kinds of ``ranks`` as the run's device_counts names them (Topology.kind_of: by whole spec,
    not catalog name, so an H100 group with its own HBM rate is a kind and two groups given the same
    spec are one), in first-seen order."""
    members: dict[str, list[int]] = {}
    for rank in ranks:
        members.setdefault(topology.kind_of(rank), []).append(rank)
    specs = topology.kind_specs()
    return [DeviceKind(label, tuple(of_kind), float(specs[label].peak(dtype))) for label, of_kind in members.items()]


def kind_subsets(kinds: Sequence[DeviceKind]) -> tuple[list[tuple[int, ...]], str]:
    """The subsets of kinds (indices) to plan on, every kind first, then fewer; and the rule taken."""
    n = len(kinds)
    if n <= MAX_KINDS_EVERY_SUBSET:
        return ([c for size in range(n, 0, -1) for c in combinations(range(n), size)],
                f"every non-empty subset of the {n} kinds")
    fastest = sorted(range(n), key=lambda i: -kinds[i].peak_flops)   # stable: ties in first-seen order
    return ([tuple(sorted(fastest[:size])) for size in range(n, 0, -1)],
            f"the fastest 1 to {n} kinds by peak FLOP/s ({n} kinds: every subset is tried up to "
            f"{MAX_KINDS_EVERY_SUBSET})")


@dataclass(frozen=True)
class SubsetCandidate:
    kinds: tuple[int, ...]             # indices into KindSubsetPlan.kinds
    devices: int
    plan: HeteroPlan | None            # None: no layout of these devices fits
    refused: str | None = None

    @property
    def step_time_s(self) -> float:
        return float("inf") if self.plan is None else self.plan.balanced.step_time_s


@dataclass(frozen=True)
class KindSubsetPlan:
    kinds: list[DeviceKind]
    candidates: list[SubsetCandidate]  # every kind first
    subsets_rule: str

    @property
    def whole(self) -> HeteroPlan:
        plan = self.candidates[0].plan
        assert plan is not None   # plan_kind_subsets raises where every kind together fits nothing
        return plan

    @property
    def best(self) -> SubsetCandidate:
        """The fastest candidate; on a tie the one using more kinds (listed first)."""
        return min(self.candidates, key=lambda c: c.step_time_s)

    def idle(self) -> list[dict[str, Any]]:
        """The kinds the best candidate leaves idle: their devices, the idle device-hours (the
        price: devices x the best step), and the step with that kind added to the best's kinds
        (None where that subset was not tried, or refused: `with_it_refused` says why)."""
        best, out = self.best, []
        by_kinds = {c.kinds: c for c in self.candidates}
        for i in sorted(set(range(len(self.kinds))) - set(best.kinds)):
            with_it = by_kinds.get(tuple(sorted((*best.kinds, i))))
            devices = len(self.kinds[i].ranks)
            entry = {"kind": self.kinds[i].label, "devices": devices,
                     "idle_device_hours_per_1000_steps": devices * best.step_time_s * STEPS_PER_REPORT
                     / SECONDS_PER_HOUR,
                     "step_time_with_it_s": None if with_it is None or with_it.plan is None
                     else with_it.step_time_s}
            if with_it is not None and with_it.plan is None:
                entry["with_it_refused"] = with_it.refused
            out.append(entry)
        return out

    def to_json(self) -> dict[str, Any]:
        """The whole cluster's plan (HeteroPlan.to_json, each split naming its kinds), every candidate
        subset, and the best with the kinds it leaves idle."""
        every = [k.label for k in self.kinds]
        doc = self.whole.to_json()
        for name in ("balanced", "uniform"):
            if doc[name] is not None:
                doc[name] = {"kinds": every, **doc[name]}
        best = self.best
        doc["subsets_tried"] = self.subsets_rule
        doc["subsets"] = [self._candidate_json(c) for c in self.candidates]
        doc["best"] = {**self._candidate_json(best), "speedup_over_every_kind": self.whole.balanced.step_time_s
                       / best.step_time_s, "idle": self.idle()}
        return doc

    def _candidate_json(self, c: SubsetCandidate) -> dict[str, Any]:
        head = {"kinds": [self.kinds[i].label for i in c.kinds], "devices": c.devices}
        return {**head, **result_json(c.plan.balanced)} if c.plan is not None else {**head, "refused": c.refused}


def plan_kind_subsets(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                      ranks: Sequence[int] | None = None, tp_values: Sequence[int] = (1, 2, 4, 8),
                      pp_values: Sequence[int] | None = None, micro_batch_values: Sequence[int] = (1,),
                      recompute_values: Sequence[str] = ("full",), zero_values: Sequence[int] = (0,),
                      params: HeteroParams | None = None, train_params: TrainParams | None = None,
                      collectives: Any = None) -> KindSubsetPlan:
    """plan_hetero on every kind together (its error where nothing fits them), then on each other
    subset of kinds (kind_subsets) with the same step models; a subset nothing fits is a refused
    candidate."""
    ranks = list(range(topology.num_devices)) if ranks is None else list(ranks)
    kinds = device_kinds(topology, ranks, (params or HeteroParams()).dtype)
    step_models = hetero_step_models(model, topology, seq_len, micro_batch_values=micro_batch_values,
                                     recompute_values=recompute_values, params=params, collectives=collectives,
                                     train_params=train_params, zero_values=zero_values)
    subsets, rule = kind_subsets(kinds)
    candidates = []
    kind_of = {r: i for i, kind in enumerate(kinds) for r in kind.ranks}
    for subset in subsets:
        use = [r for r in ranks if kind_of[r] in subset]   # in the given order: every kind's is plan_hetero's
        try:
            plan, refused = plan_on_step_models(step_models, use, global_batch, tp_values=tp_values,
                                                pp_values=pp_values, zero_values=zero_values), None
        except RlsimError as err:
            if len(subset) == len(kinds):
                raise
            plan, refused = None, err.message
        candidates.append(SubsetCandidate(subset, len(use), plan, refused))
    return KindSubsetPlan(kinds, candidates, rule)
