"""Search over rollout (inference) layouts: TP, EP, PP and the number of instances on a device pool.

An instance spans tp * ep * pp devices (llm/inference.py); every layout uses as many whole instances as
the devices allow. Each is evaluated by an ``evaluator(layout_dict, ranks) -> Evaluation`` that
raises RlsimError when the model does not fit; the default one runs the rollout engine
(``planner.evaluate.RolloutEvaluator``) on a fixed batch of equal-length sequences.
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RlsimError
from .arguments import model_arg, ranks_arg, rate_arg, space_arg, top_arg, topology_arg
from .base import Evaluation, PlannerParams, RolloutSpace
from .placement import locality_sorted
from .search import pruned_summary

RolloutEvaluator = Callable[[dict[str, Any], Sequence[int]], Evaluation]


@dataclass
class RolloutCandidate:
    layout: dict[str, Any]
    evaluation: Evaluation
    devices: int
    tokens_per_s: float

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layout": dict(self.layout)}
        out.update(self.evaluation.as_dict())
        out["devices"] = self.devices
        out["tokens_per_s"] = self.tokens_per_s
        return out


@dataclass
class RolloutPlan:
    candidates: list[RolloutCandidate]
    evaluated: int
    pruned: dict[str, int] = field(default_factory=dict)
    planning_cost_s: float = 0.0

    @property
    def best(self) -> RolloutCandidate:
        return self.candidates[0]


def enumerate_rollout_layouts(model: Any, num_devices: int, space: RolloutSpace) -> tuple[list[dict], Counter]:
    """(tp, ep, pp, instances, max_num_seqs): query heads divide by TP (KV heads replicate, as vLLM);
    EP divides the experts; no more stages than layers; whole instances only."""
    pruned: Counter = Counter()
    experts = int(getattr(model, "num_experts", 0) or 0)
    if space.ep is not None:
        eps = space.ep
    elif experts > 1:
        eps = [e for e in (1, 2, 4, 8, 16, 32, 64, 128, 256) if e <= min(experts, space.max_ep) and experts % e == 0]
    else:
        eps = [1]
    out = []
    for tp, ep, pp, seqs in itertools.product(space.tp, eps, space.pp, space.max_num_seqs):
        if model.num_heads % tp:
            pruned["tp_heads"] += 1
            continue
        if ep > 1 and experts % ep:
            pruned["ep"] += 1
            continue
        if pp > model.num_layers:
            pruned["pp_layers"] += 1
            continue
        if tp * ep * pp > num_devices:
            pruned["devices"] += 1
            continue
        out.append({"tp": tp, "ep": ep, **({"pp": pp} if pp > 1 else {}), "instances": num_devices // (tp * ep * pp),
                    "max_num_seqs": seqs})
    return out, pruned


def plan_rollout(model: Any, topology: Any, *, ranks: Sequence[int] | None = None,
                 space: RolloutSpace | None = None, params: PlannerParams | None = None,
                 evaluator: RolloutEvaluator | None = None, top: int | None = None,
                 target_tokens_per_s: float | None = None) -> RolloutPlan:
    """Rollout layouts best first (shortest time to generate the batch; ties: fewer devices).

    With a target, only layouts generating at least that many tokens/s are kept, fewest devices first.
    """
    model, topology = model_arg(model), topology_arg(topology)
    space, ranks, top = space_arg(space, RolloutSpace), ranks_arg(ranks, topology), top_arg(top)
    target_tokens_per_s = rate_arg(target_tokens_per_s, "target_tokens_per_s")
    params = params or PlannerParams()
    slots = locality_sorted(topology, ranks)
    if evaluator is None:
        from .evaluate import RolloutEvaluator as Default
        evaluator = Default(model, topology, space)
    layouts, pruned = enumerate_rollout_layouts(model, len(ranks), space)
    cands = []
    evaluated = 0
    for lay in layouts:
        used = slots[: lay["instances"] * lay["tp"] * lay["ep"] * lay.get("pp", 1)]
        evaluated += 1
        try:
            ev = evaluator(lay, used)
        except RlsimError as exc:
            pruned[f"infeasible:{exc.field or 'layout'}"] += 1
            continue
        tokens = space.sequences * space.response_len / ev.step_time_s
        cands.append(RolloutCandidate(lay, ev, len(used), tokens))
    if target_tokens_per_s:
        cands = [c for c in cands if c.tokens_per_s >= target_tokens_per_s]
        cands.sort(key=lambda c: (c.devices, c.evaluation.step_time_s, c.layout["tp"], c.layout["ep"],
                                  c.layout.get("pp", 1)))
    else:
        cands.sort(key=lambda c: (c.evaluation.step_time_s, c.devices, c.layout["tp"], c.layout["ep"],
                                  c.layout.get("pp", 1)))
    if not cands:
        why = pruned_summary(pruned, 3)
        raise RlsimError(f"no rollout layout of {getattr(model, 'name', 'the model')} on {len(ranks)} devices"
                         + (f" reaches {target_tokens_per_s:.0f} tokens/s" if target_tokens_per_s else " fits")
                         + (f" ({why})" if why else ""), field="planner.rollout",
                         fix="add devices, lower the target or widen planner.rollout.tp (or .pp)")
    return RolloutPlan(cands if top is None else cands[:top], evaluated, dict(sorted(pruned.items())),
                       params.fixed_cost_s + evaluated * params.eval_cost_s)
