"""Search over training layouts: enumerate, prune by divisibility and memory, evaluate, rank.

The search is independent of the cost model: it takes an ``evaluator(choice, ranks) ->
Evaluation`` that raises RlsimError when a layout is infeasible (it does not fit in memory, say).
``plan_training`` wires the real one (``planner.evaluate.TrainingEvaluator``) by default; tests
pass closed-form fakes.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from ..errors import RlsimError
from ..llm.train_layout import expert_fold
from ..strict_model import StrictModel
from .arguments import count_arg, model_arg, ranks_arg, space_arg, top_arg, topology_arg
from .base import Evaluation, NoLayoutFits, PlannerParams, RefusedBeforeTiming, Size, TrainChoice
from .placement import Placement, aware_placements, naive_placement

ZeroStage = Annotated[int, Field(ge=0, le=3)]

Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
_RECOMPUTE_ORDER = ("none", "selective", "full")  # least recomputation (fastest, most memory) first


Evaluator = Callable[[TrainChoice, Sequence[int]], Evaluation]


class SearchSpace(StrictModel):
    """Values tried per dimension; `None` means derived from the model and device count.

    Reachable from YAML / --set as `planner.space.<field>`, e.g. `--set planner.space.tp=[16]` to
    force a layout. Defaults cover the layouts of Megatron-LM (arXiv 2104.04473) and MCore.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: list[Size] = Field(default_factory=lambda: [1, 2, 4, 8, 16])
    pp: list[Size] | None = None  # None: every divisor of the layer count up to max_pp (every pp with uneven_pp)
    # PP need not divide the layers: stages hold floor/ceil shares (what llm/training.py models and
    # MCore supports with uneven first/last stages); interleaving (VPP > 1) still needs an exact split.
    # Off by default (Megatron-LM 2021 needs an exact split); a re-plan turns it on when the running
    # layout is already uneven.
    uneven_pp: bool = False
    max_pp: Size = 64  # deepest pipeline in Megatron's Table 1 (1008B row)
    vpp: list[Size] = Field(default_factory=lambda: [1, 2, 4])
    cp: list[Size] = Field(default_factory=lambda: [1, 2])
    ep: list[Size] | None = None  # None: 1 for dense models, powers of two dividing the experts for MoE
    max_ep: Size = 64
    zero: list[ZeroStage] = Field(default_factory=lambda: [0, 1, 2, 3])
    recompute: list[Recompute] = Field(default_factory=lambda: ["none", "selective", "full"])
    # Megatron's methods of full recompute (--recompute-method, TrainLayout.recompute_method): uniform 1 (every
    # layer's input kept, each rebuilt in its backward) and, with "block", the fewest layers a model chunk
    # recomputed (--recompute-num-layers N: the others keep their activations) that fit, found by bisection
    # (memory falls and time grows with N) where full recompute is the least that fits. A stack whose
    # trainer checkpoints whole layers only offers uniform (params.TrainSoftware.recompute_methods).
    recompute_method: list[RecomputeMethod] = Field(default_factory=lambda: ["uniform", "block"])
    micro_batch: list[Size] = Field(default_factory=lambda: [1, 2, 4, 8])
    # Sequence parallelism (arXiv 2205.05198) tried on and off; None: not searched, the stack's rule
    # (workload.train_software: on with TP for megatron-core, off for megatron-2021).
    sequence_parallel: list[bool] | None = None
    # Expert tensor-parallel sizes tried on MoE models (MoE parallel folding: experts over TP x CP x DP
    # with their own TP size, so EP x etp divides TP x CP x DP); None: etp = tp, Megatron-Core's default
    # (expert_tensor_parallel_size unset). Dense models have no expert layers: not searched there.
    etp: list[Size] | None = None
    # With etp None on an MoE model: etp 1 tried beside etp = tp (MoE parallel folding: the routed experts over
    # EP alone, the TP ranks lent to EP; at top-k routing etp = tp pays k x A over TP a layer, etp 1 none:
    # llm/training.py _routed_expert_tp_s), as fine-grained MoE trains (Megatron-Core MoE parallel folding,
    # NeMo RL v0.5's recipes and AReaL's default at 1). False: etp = tp only; a training stack whose experts
    # have no TP size of their own sets it (params.TrainSoftware.expert_tensor_parallel). Read past on a
    # dense model, as max_ep.
    expert_tp_folding: bool = True
    # ZeRO shard-group sizes tried beside sharding over all dp x cp ranks (HSDP, TrainLayout.zero_shard_size),
    # e.g. [8]: one node of DGX; a size must divide dp x cp and its copies the expert-DP group. None: not searched.
    zero_shard_size: list[Size] | None = None
    # DP x micro_batch must divide the global batch. A re-plan relaxes it: the last micro-batch
    # round is then partial and replicas get uneven counts (llm/training.py's sampler handles it).
    exact_batch: bool = True

    @field_validator("expert_tp_folding", mode="after")
    @classmethod
    def _folding_qualifies_the_default_etp(cls, value: bool, info: ValidationInfo) -> bool:
        """Given beside etp, it would be read past: etp lists the sizes searched."""
        if (info.data or {}).get("etp") is not None:
            raise RlsimError("qualifies etp: null (the sizes searched by default), and planner.space.etp is given",
                             fix="remove expert_tp_folding, or etp")
        return value

    @field_validator("recompute_method", mode="after")
    @classmethod
    def _uniform_kept(cls, value: list[str]) -> list[str]:
        """The block search starts from full uniform's fit: uniform is always tried."""
        if "uniform" not in value:
            raise RlsimError("must hold uniform (the block search starts from a layout whose full uniform "
                             "recompute fits)", fix="give [uniform] or [uniform, block]")
        return value

    def for_software(self, software: Any, model: Any = None) -> SearchSpace:
        """This space narrowed to what a training stack offers (params.TrainSoftware.search_limits; with
        `model`, what it offers for that model), keeping this space's order of values."""
        update: dict[str, Any] = {}
        for key, allowed in software.search_limits(model).items():
            given = getattr(self, key)
            update[key] = list(allowed) if given is None else [v for v in given if v in allowed]
            if not update[key]:   # the defaults hold each stack's first values: a planner.space the user gave
                raise _outside_the_stack(software, key, given, list(allowed), model)
        if not software.expert_tensor_parallel:
            self._refuse_expert_tp_off_the_stack(software)
            update["expert_tp_folding"] = False
        return self.model_copy(update=update)

    def _refuse_expert_tp_off_the_stack(self, software: Any) -> None:
        """A planner.space.etp or expert_tp_folding: true given for a stack whose experts take its TP (etp = tp)."""
        given = "etp" if self.etp is not None else "expert_tp_folding" if (
            self.expert_tp_folding and "expert_tp_folding" in self.model_fields_set) else None
        if given is None:
            return
        raise RlsimError(f"planner.space.{given}={getattr(self, given)}: {software.name} splits the routed experts "
                         "over its tensor-parallel ranks as its other layers (etp = tp), with no expert "
                         "tensor-parallel size of its own (MoE parallel folding)", field=f"planner.space.{given}",
                         fix=f"remove planner.space.{given} (the experts take the tp searched), or a stack with "
                             "MoE parallel folding (workload.train_software: megatron-core)")


def _outside_the_stack(software: Any, key: str, given: list, allowed: list, model: Any = None) -> RlsimError:
    """The error of a planner.space.<key> none of whose values the training stack runs (for `model`)."""
    lacked = software.lacked_dimension({key: given[0]}) if key in PARALLEL_DIMENSIONS else None
    if lacked:
        return RlsimError(f"planner.space.{key}={given}: {lacked[1].split(': ', 1)[1]}", field=f"planner.space.{key}",
                          fix=software.lacked_fix(key))
    tied = software.refused_tied_pipeline({"pp": 2}, model) if key in ("pp", "vpp") and model is not None else None
    if tied:
        return RlsimError(f"planner.space.{key}={given}: {tied.split(': ', 1)[1]}", field=f"planner.space.{key}",
                          fix=software.tied_pipeline_fix())
    return RlsimError(f"planner.space.{key}={given}: {software.name} offers {key} {allowed}",
                      field=f"planner.space.{key}", fix=f"give planner.space.{key} values of {allowed}, or another "
                                                        "workload.train_software")


@dataclass
class TrainCandidate:
    choice: TrainChoice
    placement: Placement
    evaluation: Evaluation
    tp_level: str = ""  # shared_level of the TP groups: device, node, domain or cluster
    naive: Evaluation | None = None
    devices: int = 0
    tokens_per_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layout": self.choice.as_dict()}
        out.update(self.evaluation.as_dict())
        out["devices"] = self.devices
        out["tokens_per_s"] = self.tokens_per_s
        out["placement"] = self.placement.name
        out["tp_level"] = self.tp_level
        out["naive_step_time_s"] = None if self.naive is None else self.naive.step_time_s
        return out


@dataclass
class BlockSearches:
    """A plan's block-recompute searches (_add_block_layouts): the first pass's candidates of full uniform
    recompute that are the least of their structure that fits, before refinement (those a block layout is
    searched beside), the model's layers, and each structure searched with the block layout it found (a
    first-pass candidate) or None (none fits): a second ranking of the same plan (rerank_training) takes
    these rather than searching them again."""

    full_least: list[TrainCandidate]
    layers: int
    found: dict[tuple, TrainCandidate | None] = field(default_factory=dict)


@dataclass
class TrainPlan:
    candidates: list[TrainCandidate]   # best first
    enumerated: int
    evaluated: int
    pruned: dict[str, int] = field(default_factory=dict)
    planning_cost_s: float = 0.0
    # of the evaluations, those the evaluator refused before timing a step (RefusedBeforeTiming)
    refused_before_timing: int = 0
    # the train_step_cost queries the evaluator's own checks timed beside its evaluations (a failure
    # re-plan's schedule check: an evaluator's ``checks_timed``), each charged as a timed evaluation is
    checks_timed: int = 0
    # every candidate that fitted as the first pass timed it (its first aware placement), best first (the
    # block layouts the plan's bound searched among them), and the leaders refined, by layout: what
    # rerank_training ranks again without searching again
    first_pass: list[TrainCandidate] = field(default_factory=list, repr=False)
    refined: dict[TrainChoice, TrainCandidate] = field(default_factory=dict, repr=False)
    # the block-recompute search the plan made (None where planner.space.recompute_method has no block):
    # what rerank_training searches its own kept set with, reusing what was found
    blocks: BlockSearches | None = field(default=None, repr=False)
    step_tokens: float = 0.0   # global batch x sequence length: a candidate's tokens_per_s x its step time

    @property
    def best(self) -> TrainCandidate:
        return self.candidates[0]


# The parallel dimensions a training stack may lack (params.TrainSoftware.lacked_dimension)
PARALLEL_DIMENSIONS = ("tp", "pp", "vpp", "cp")


def neighbourhood(current: TrainChoice, model: Any) -> SearchSpace:
    """A re-plan's search space: keep TP, CP and EP of the running layout (the expensive groups to
    rebuild); let PP (and so DP), VPP (or none: an uneven batch breaks interleaving), recompute,
    ZeRO 1-2 and the micro-batch move. Tens of candidates instead of thousands. Megatron's block
    recompute only where the running layout uses it (replan_recompute_methods)."""
    # the running expert TP size kept: given, or tp where the layout left it unset (no etp 1 beside it)
    expert_tp = {"expert_tp_folding": False} if current.etp is None else {"etp": [current.etp]}
    return SearchSpace(tp=[current.tp], pp=None, vpp=sorted({current.vpp, 1}), cp=[current.cp], ep=[current.ep],
                       **expert_tp,
                       zero=sorted({current.zero, 1, 2}), recompute=["none", "selective", "full"],
                       recompute_method=replan_recompute_methods(current),
                       micro_batch=sorted({current.micro_batch, 1}), exact_batch=False,
                       zero_shard_size=None if current.zero_shard_size is None else [current.zero_shard_size],
                       uneven_pp=int(model.num_layers) % current.pp != 0)


def replan_recompute_methods(current: TrainChoice) -> list[str]:
    """The full-recompute methods a failure's re-plan searches from the running layout: block beside
    uniform only where it runs block. A block layout is the fewest layers that fit the batches the
    planner judged, at the edge of memory, and a re-plan commits to it for the rest of the run (the seed
    scenario given full uniform recompute, re-planned after a lost node to a block layout, ran out at a
    later batch: 128.7 of 126.4 GB); the uniform layouts' headroom is what such a run chose."""
    return ["uniform", "block"] if current.recompute_method == "block" else ["uniform"]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


# Why a layout was dropped, by the key enumerate_train_choices / plan_training count it under
PRUNE_REASONS = {
    "tp_heads": "tp does not divide the attention heads (or fit the KV heads)",
    "devices": "tp x pp x cp does not divide the devices",
    "pp_layers": "pp x vpp does not divide the layers (or vpp > 1 without pp)",
    "cp_seq": "2 x cp does not divide the sequence",
    "ep": "ep does not divide the experts, or ep x etp the tp x dp x cp ranks",
    "batch": "dp x micro_batch does not divide the global batch",
    "vpp_microbatches": "interleaving with micro-batches not a multiple of pp",
    "zero_without_dp": "ZeRO without data parallelism",
    "sp_without_tp": "sequence parallelism without tp",
    "zero_shard": "a ZeRO shard size that does not divide the data-parallel group",
    "recompute_dominated": "less recompute already fits",
}


def pruned_summary(pruned: Counter, most: int) -> str:
    """The ``most`` commonest reasons layouts were dropped, each with its count, in words."""
    def why(key: str) -> str:
        if key.startswith("infeasible:"):
            return f"refused at {key.split(':', 1)[1]} (memory or a layout check)"
        return PRUNE_REASONS.get(key, key)
    return "; ".join(f"{count} pruned: {why(key)}" for key, count in pruned.most_common(most))


def _fix_for_none(pruned: Counter, model: Any) -> str:
    """The fix for a search that kept no layout: the tp values that divide the heads where that rule
    dropped every layout (a `planner.space.tp` given), else the general one."""
    if set(pruned) - {"recompute_dominated"} == {"tp_heads"}:
        heads, kv_heads = int(model.num_heads), int(model.num_kv_heads)
        fits = [tp for tp in range(1, heads + 1) if heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)]
        return (f"give planner.space.tp values that divide the {heads} attention heads and divide or are a "
                f"multiple of the {kv_heads} KV heads: {', '.join(map(str, fits))}")
    return "add devices, lower the global batch or widen planner.space"


def _state_floor(model: Any, topology: Any, ranks: Sequence[int], params: Any) -> str:
    """'; ...' where the training state alone (weights, gradients, optimizer: MemoryParams' bytes a
    parameter) fully sharded needs more devices than there are: the fewest that could hold it,
    activations aside (a 405B model on 8 GPUs named no size to aim for; a planner audit)."""
    memory = getattr(params, "memory", None)
    total = getattr(model, "params_total", None)
    if memory is None or not total or not hasattr(topology, "device_spec"):
        return ""
    grads = 0.0 if memory.grad_partition_on_host else memory.grad_bytes_per_param   # ZeRO-Offload's: on the host
    per_param = memory.resident_bytes_per_param + grads + memory.optimizer_bytes_per_param
    usable = min(topology.device_spec(r).hbm_bytes for r in ranks) * memory.hbm_usable_fraction
    state = float(total) * per_param
    need = math.ceil(state / usable)
    if need <= len(ranks):
        return ""
    return (f"; its training state alone is {state / 1e9:,.0f} GB ({per_param:g} B a parameter), which needs at "
            f"least {need} devices of {usable / 1e9:,.1f} GB usable even fully sharded, activations aside")


def _powers_of_two(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def enumerate_train_choices(model: Any, num_devices: int, global_batch: int, seq_len: int,
                            space: SearchSpace | None = None,
                            micro_batch_counts: Callable[[int, int], Collection[int]] | None = None
                            ) -> tuple[list[TrainChoice], Counter]:
    """Every layout that divides the model, the devices and the batch; and why the rest were dropped.

    Rules (Megatron-LM / MCore constraints): TP divides the query heads and either divides the KV
    heads or is a multiple of them (KV heads replicated); PP*VPP divides the layers (unless
    `uneven_pp` and VPP = 1); VPP > 1 needs
    PP > 1 and the micro-batch count divisible by PP; 2*CP divides the sequence (load-balanced
    causal split); EP divides the experts and EP x etp divides TP x DP x CP (etp = tp and, with
    `expert_tp_folding`, 1, unless the space gives etp); DP*micro_batch divides the global batch;
    ZeRO > 0 needs DP > 1 (otherwise it equals ZeRO 0); each `zero_shard_size` below dp x cp that
    divides it (and whose copies divide the expert-DP group) adds the layout sharded within such groups.
    ``micro_batch_counts(micro_batch, dp)``: the replicas' micro-batch counts the run forms (a
    scenario's optimizer steps: autoplan.micro_batch_counts_of), which VPP judges in place of
    global_batch / (dp x micro_batch), a count of packed rows the run does not have.
    """
    space = space or SearchSpace()
    pruned: Counter = Counter()
    heads, kv_heads, layers = int(model.num_heads), int(model.num_kv_heads), int(model.num_layers)
    experts = int(getattr(model, "num_experts", 0) or 0)
    if space.etp is not None and experts <= 1:   # nothing to split: it would be read past
        raise RlsimError(f"planner.space.etp applies to models with experts; {getattr(model, 'name', 'the model')} "
                         "has none", field="planner.space.etp", fix="remove planner.space.etp")
    if space.pp is not None:
        pp_values = space.pp
    elif space.uneven_pp:
        pp_values = list(range(1, min(layers, space.max_pp) + 1))
    else:
        pp_values = _divisors(layers, space.max_pp)
    if space.ep is not None:
        ep_values = space.ep
    elif experts > 1:
        ep_values = [e for e in _powers_of_two(min(space.max_ep, experts)) if experts % e == 0]
    else:
        ep_values = [1]
    out: list[TrainChoice] = []
    sp_values: list[bool | None] = list(space.sequence_parallel) if space.sequence_parallel else [None]
    etp_values = _etp_values(space, experts)
    for tp, pp, vpp, cp, ep, zero, rc, mb, sp, etp_given in itertools.product(
            space.tp, pp_values, space.vpp, space.cp, ep_values, space.zero, space.recompute,
            space.micro_batch, sp_values, etp_values):
        if etp_given == _FOLDED and tp == 1:   # etp 1 at tp 1 is the etp = tp layout
            continue
        etp = None if experts <= 1 else tp if etp_given is None else 1 if etp_given == _FOLDED else int(etp_given)
        if heads % tp or (kv_heads % tp and tp % kv_heads):
            pruned["tp_heads"] += 1
            continue
        if num_devices % (tp * pp * cp):
            pruned["devices"] += 1
            continue
        dp = num_devices // (tp * pp * cp)
        if (layers % (pp * vpp) and not (space.uneven_pp and vpp == 1)) or (vpp > 1 and pp == 1):
            pruned["pp_layers"] += 1
            continue
        if seq_len % (2 * cp) and cp > 1:
            pruned["cp_seq"] += 1
            continue
        if ep > 1 and (experts % ep or (tp * dp * cp) % (ep * (etp or tp))):
            pruned["ep"] += 1
            continue
        if (global_batch % (dp * mb) if space.exact_batch else global_batch < dp * mb):
            pruned["batch"] += 1
            continue
        if vpp > 1 and any(m % pp for m in (micro_batch_counts(mb, dp) if micro_batch_counts is not None
                                             else (global_batch // (dp * mb),))):
            pruned["vpp_microbatches"] += 1
            continue
        if zero > 0 and dp == 1:
            pruned["zero_without_dp"] += 1
            continue
        if sp and tp == 1:
            pruned["sp_without_tp"] += 1
            continue
        out.append(TrainChoice(tp, pp, vpp, dp, ep, cp, zero, rc, mb, sp, etp))
        if zero > 0:
            out.extend(_sharded_within_groups(out[-1], space.zero_shard_size or [], experts > 1, pruned))
    return out, pruned


# etp 1 as MoE parallel folding adds it beside etp = tp (SearchSpace.expert_tp_folding): not at tp 1, where
# it is the etp = tp layout (a planner.space.etp of 1 is searched at every tp)
_FOLDED = "folded"


def _etp_values(space: SearchSpace, experts: int) -> list[int | str | None]:
    """The expert TP sizes searched: planner.space.etp where given; on an MoE model None (etp = tp,
    Megatron-Core's default, reported with the layout) and, with expert_tp_folding, 1 (_FOLDED); None on a
    dense one."""
    if experts <= 1:
        return [None]
    if space.etp:
        return list(space.etp)
    return [None, _FOLDED] if space.expert_tp_folding else [None]


def _sharded_within_groups(choice: TrainChoice, sizes: Sequence[int], moe: bool, pruned: Counter) -> list[TrainChoice]:
    """`choice` with its ZeRO state sharded within groups of each size (TrainLayout.check_zero_shard's
    rule); a size of the whole dp x cp group or above is `choice` itself."""
    group = choice.dp * choice.cp
    expert_dp = choice.tp * group // ((choice.etp or choice.tp) * choice.ep) if moe else group
    out = []
    for size in sizes:
        if size >= group:
            continue
        if group % size or expert_dp % (group // size):
            pruned["zero_shard"] += 1
            continue
        out.append(dataclasses.replace(choice, zero_shard_size=size))
    return out


def _structure(choice: TrainChoice) -> tuple:
    """Everything but recompute: the group inside which recompute dominance applies."""
    return (choice.tp, choice.pp, choice.vpp, choice.dp, choice.ep, choice.cp, choice.zero, choice.micro_batch,
            choice.sequence_parallel, choice.etp, choice.zero_shard_size or 0)


def _placements(topology: Any, ranks: Sequence[int], c: TrainChoice) -> list[Placement]:
    """The aware placements of a choice, the one `rlsim run` trains on first (its experts folded
    over expert_fold replicas: the expert all-to-all among consecutive ranks)."""
    fold = expert_fold(c.tp, c.cp, c.ep, c.etp) if c.ep > 1 else 1
    return aware_placements(topology, ranks, c.tp, c.cp, c.dp, c.pp, fold)


def _tp_level(topology: Any, placement: Placement, c: TrainChoice) -> str:
    if c.tp == 1 or not hasattr(topology, "shared_level"):
        return "device"
    first = list(placement.ranks[: c.tp])  # canonical order: the first TP group
    return str(topology.shared_level(first))


def _rank_key(cand: TrainCandidate) -> tuple:
    """By step time; at an equal one the layout with less memory a device first (more room for a
    long-tail batch: ZeRO 2 beside ZeRO 1 at the same time ranked second; a planner audit), then the
    layout tuple (deterministic)."""
    return (cand.evaluation.step_time_s, cand.evaluation.memory_per_device_bytes, cand.choice)


def plan_training(model: Any, topology: Any, global_batch: int, seq_len: int, *,
                  ranks: Sequence[int] | None = None, space: SearchSpace | None = None,
                  params: PlannerParams | None = None, evaluator: Evaluator | None = None,
                  top: int | None = None) -> TrainPlan:
    """Search the training layouts of `model` on `ranks` (default: every device); best first.

    NoLayoutFits (an RlsimError) when no layout fits, naming what pruned the most candidates, with the
    planning cost of the evaluations made; a model or topology may be given by name, path or mapping
    (planner/arguments.py checks every argument). The planning cost charges eval_cost_s a timed
    candidate and refused_cost_fraction of it a candidate the evaluator refused before timing it
    (RefusedBeforeTiming).
    """
    model, topology = model_arg(model), topology_arg(topology)
    global_batch, seq_len, top = count_arg(global_batch, "global_batch"), count_arg(seq_len, "seq_len"), top_arg(top)
    space, ranks = space_arg(space, SearchSpace), ranks_arg(ranks, topology)
    params = params or PlannerParams()
    if evaluator is None:
        from .evaluate import TrainingEvaluator
        evaluator = TrainingEvaluator(model, topology, global_batch, seq_len)
    # the evaluator's micro-batch counts of the run's steps (TrainingEvaluator.micro_batch_counts), if any
    choices, pruned = enumerate_train_choices(model, len(ranks), global_batch, seq_len, space,
                                              getattr(evaluator, "micro_batch_counts", None))
    rc_rank = {r: i for i, r in enumerate(_RECOMPUTE_ORDER)}
    choices.sort(key=lambda c: (_structure(c), rc_rank.get(c.recompute, 99)))
    work = _Work(topology, ranks, evaluator, global_batch * seq_len)
    cands, refused, full_least = _first_pass(choices, work, params.dominance_prune, pruned)
    if not cands:
        worst = pruned_summary(pruned, 4) or "no layout enumerated"
        raise NoLayoutFits(f"no training layout of {getattr(model, 'name', 'the model')} fits on "
                           f"{len(ranks)} devices with global batch {global_batch} ({worst})"
                           + _state_floor(model, topology, ranks, getattr(evaluator, "params", None))
                           + (f"; the first refused: {refused.message}" if refused is not None else ""),
                           field="planner", fix=_fix_for_none(pruned, model),
                           planning_cost_s=params.search_cost_s(work.timed_queries, work.refused_early))
    blocks = None
    if "block" in space.recompute_method:
        blocks = BlockSearches([dataclasses.replace(cand) for cand in full_least], int(model.num_layers))
        _add_block_layouts(cands, full_least, blocks, work, max(params.refine_top, top or 0, 1),
                           params.recompute_step_share_max)
    cands.sort(key=_rank_key)
    first_pass = [dataclasses.replace(cand) for cand in cands]   # before the leaders' refinement changes them
    leaders = cands[: max(params.refine_top, top or 0)]
    for cand in leaders:
        _refine(cand, work)
    enumerated = len(choices) + sum(v for k, v in pruned.items() if not k.startswith(("infeasible", "recompute_")))
    plan = _ranked(cands, work, top, enumerated=enumerated, pruned=dict(sorted(pruned.items())),
                   cost_s=lambda timed, refused: params.search_cost_s(timed, refused))
    plan.first_pass, plan.refined, plan.blocks = first_pass, {cand.choice: cand for cand in leaders}, blocks
    return plan


def rerank_training(plan: TrainPlan, keep: Callable[[TrainChoice], bool], topology: Any, ranks: Sequence[int],
                    evaluator: Evaluator, *, params: PlannerParams | None = None, top: int | None = None) -> TrainPlan:
    """The plan that plan_training would give on the same space, ranks and evaluator with every layout
    ``keep`` rejects refused, from ``plan`` (one of plan_training's) rather than a second search: its
    first pass kept, the block recompute searched beside the kept full-recompute layouts as that search
    would (bounded by the kept ones: _add_block_layouts; a structure ``plan`` searched already is not
    searched again), the kept leaders refined (their aware and naive placements) unless ``plan`` refined
    them. Exact where ``keep`` holds alike for every recompute mode and method of a layout (_structure:
    dominance then skips the same modes) and the evaluator would refuse the rest before timing anything
    (room beside a consolidated tail: autoplan._consolidating). Only the block searches and the refinement
    made here are evaluated and charged (``evaluated``, ``planning_cost_s``: no fixed part, the search is
    not made again); ``pruned`` is ``plan``'s. RlsimError where ``keep`` rejects every layout that fitted."""
    params = params or PlannerParams()
    blocks = None if plan.blocks is None else dataclasses.replace(plan.blocks, found=dict(plan.blocks.found))
    # the block layouts of the first pass are those of the whole plan's bound: searched again below
    cands = [dataclasses.replace(cand) for cand in plan.first_pass
             if keep(cand.choice) and (blocks is None or cand.choice.recompute_method != "block")]
    if not cands:
        raise RlsimError(f"none of the {len(plan.first_pass)} training layouts that fit is kept", field="planner",
                         fix="widen planner.space, or keep more layouts")
    work = _Work(topology, list(ranks), evaluator, plan.step_tokens)
    if blocks is not None:
        _add_block_layouts(cands, [full for full in blocks.full_least if keep(full.choice)], blocks, work,
                           max(params.refine_top, top or 0, 1), params.recompute_step_share_max)
        cands.sort(key=_rank_key)
    for i in range(min(len(cands), max(params.refine_top, top or 0))):   # the leaders
        done = plan.refined.get(cands[i].choice)
        if done is None:
            _refine(cands[i], work)
        else:   # the first search refined it already: the same evaluations
            cands[i] = dataclasses.replace(done)
    leaders = cands[: max(params.refine_top, top or 0)]
    out = _ranked(cands, work, top, enumerated=plan.enumerated, pruned=dict(plan.pruned),
                  cost_s=lambda timed, refused: params.search_cost_s(timed, refused, fixed=False))
    out.first_pass, out.refined, out.blocks = plan.first_pass, {**plan.refined, **{c.choice: c for c in leaders}}, blocks
    return out


def _checks_timed(evaluator: Evaluator) -> int:
    """The train_step_cost queries an evaluator's own checks timed so far beside the steps it is charged
    for (a running total in its ``checks_timed``: a failure re-plan's schedule check times the latest
    batches before the evaluator times the step, autoplan._AcceptedFirst); 0 for one without checks.
    A search charges each eval_cost_s, as a timed evaluation (PlannerParams.search_cost_s)."""
    return getattr(evaluator, "checks_timed", 0)


@dataclass
class _Work:
    """What a search evaluates on (the topology, its ranks, the evaluator, the step's tokens) and the
    evaluations it made: timed, and refused before timing (RefusedBeforeTiming); ``checks_timed``: the
    train_step_cost queries the evaluator's own checks timed beside them (its ``checks_timed``)."""

    topology: Any
    ranks: Sequence[int]
    evaluator: Evaluator
    tokens: float
    evaluated: int = 0
    refused_early: int = 0
    checks_timed: int = 0

    @property
    def timed_queries(self) -> int:
        """The train_step_cost queries charged eval_cost_s each: one a timed evaluation, and what the
        evaluator's checks timed beside them."""
        return self.evaluated - self.refused_early + self.checks_timed

    def evaluate(self, c: TrainChoice, ranks: Sequence[int]) -> Evaluation:
        """The evaluator's answer, counted (a refusal before timing as such, and the queries its checks timed)."""
        self.evaluated += 1
        before = _checks_timed(self.evaluator)
        try:
            return self.evaluator(c, ranks)
        except RefusedBeforeTiming:
            self.refused_early += 1
            raise
        finally:
            self.checks_timed += _checks_timed(self.evaluator) - before

    def judge(self, c: TrainChoice, ranks: Sequence[int]) -> Evaluation | None:
        """RlsimError where the evaluator refuses ``c``; else None, through its ``judge`` (the checks before
        timing, charged as a refusal before timing), or, for an evaluator without one, its Evaluation."""
        judge = getattr(self.evaluator, "judge", None)
        if judge is None:
            return self.evaluate(c, ranks)
        self.evaluated += 1
        self.refused_early += 1
        judge(c, ranks)
        return None

    def candidate(self, c: TrainChoice, placement: Placement, ev: Evaluation) -> TrainCandidate:
        return TrainCandidate(c, placement, ev, devices=len(self.ranks), tokens_per_s=self.tokens / ev.step_time_s)


def _first_pass(choices: list[TrainChoice], work: _Work, dominance_prune: bool, pruned: Counter
                ) -> tuple[list[TrainCandidate], RlsimError | None, list[TrainCandidate]]:
    """Every choice (in _structure order, least recompute first) under its first aware placement, the
    more-recompute modes of a structure that fitted skipped (dominance); the candidates that fitted, the
    first refusal (said if none fits) and those of full uniform recompute that are the least recompute of
    their structure that fits (where the block method may fit with less: _add_block_layouts). ``pruned``
    counts the skipped and the refused."""
    fitted: set[tuple] = set()
    cands: list[TrainCandidate] = []
    full_least: list[TrainCandidate] = []
    first_placement: dict[tuple, Placement] = {}   # by what _placements reads of a choice
    refused: RlsimError | None = None
    for c in choices:
        if dominance_prune and _structure(c) in fitted:
            pruned["recompute_dominated"] += 1
            continue
        pkey = (c.tp, c.cp, c.dp, c.pp, c.ep, c.etp)
        placement = first_placement.get(pkey)
        if placement is None:
            placement = first_placement[pkey] = _placements(work.topology, work.ranks, c)[0]
        try:
            ev = work.evaluate(c, placement.ranks)
        except RlsimError as exc:
            pruned[f"infeasible:{exc.field or 'layout'}"] += 1
            refused = refused or exc
            continue
        least = _structure(c) not in fitted
        fitted.add(_structure(c))
        cands.append(work.candidate(c, placement, ev))
        if least and c.recompute == "full" and c.recompute_method == "uniform":
            full_least.append(cands[-1])
    return cands, refused, full_least


def _add_block_layouts(cands: list[TrainCandidate], full_least: Sequence[TrainCandidate], blocks: BlockSearches,
                       work: _Work, keep: int, share_max: float) -> None:
    """Beside each of ``full_least`` (full uniform recompute, the least recompute of its structure that
    fits), the block layout of the fewest layers a chunk that fits (_fewest_block_layers), fastest first,
    where it could still rank among the ``keep`` fastest of ``cands``: a block step is at least the full
    one less its recompute, at most ``share_max`` of it (PlannerParams.recompute_step_share_max); the
    others are not searched. A structure ``blocks`` searched already is not searched again (what it found
    is added); one searched here is recorded there."""
    ranked = sorted(cand.evaluation.step_time_s for cand in cands)
    for full in sorted(full_least, key=_rank_key):
        bar = ranked[keep - 1] if len(ranked) >= keep else math.inf
        if full.evaluation.step_time_s * (1 - share_max) >= bar:
            break   # sorted: no later one can rank either
        structure = _structure(full.choice)
        if structure not in blocks.found:
            chunk = -(-blocks.layers // (full.choice.pp * full.choice.vpp))
            found = _fewest_block_layers(full.choice, full.placement, work, chunk)
            blocks.found[structure] = None if found is None else dataclasses.replace(found)   # before refinement
        block = blocks.found[structure]
        if block is not None:
            cands.append(dataclasses.replace(block))
            ranked.insert(bisect.bisect(ranked, block.evaluation.step_time_s), block.evaluation.step_time_s)


def _fewest_block_layers(c: TrainChoice, placement: Placement, work: _Work, layers: int) -> TrainCandidate | None:
    """Megatron's block recompute of the fewest layers N a chunk (1 .. layers - 1) with which ``c`` (full
    uniform recompute, the least recompute of its structure that fits) still fits, by bisection: a larger N
    keeps fewer layers' activations (less memory, llm/memory.py) and recomputes more forwards (more time,
    llm/training.py), so the fewest that fits is the fastest. Each probe is judged only (_Work.judge),
    the N found then timed. None where none below ``layers`` fits."""
    found: tuple[TrainChoice, Evaluation | None] | None = None
    low, high = 1, layers - 1
    while low <= high:
        n = (low + high) // 2
        trial = dataclasses.replace(c, recompute_method="block", recompute_num_layers=n)
        try:
            found = trial, work.judge(trial, placement.ranks)
            high = n - 1
        except RlsimError:
            low = n + 1
    if found is None:
        return None
    trial, evaluation = found
    try:
        return work.candidate(trial, placement, evaluation or work.evaluate(trial, placement.ranks))
    except RlsimError:   # a check past the judge's refused it
        return None


def _refine(cand: TrainCandidate, work: _Work) -> None:
    """A leader re-evaluated under every aware placement (the fastest kept) and the naive one (reported)."""
    c = cand.choice
    for alt in _placements(work.topology, work.ranks, c):
        if alt.ranks == cand.placement.ranks:
            continue
        try:
            ev = work.evaluate(c, alt.ranks)
        except RlsimError:
            continue
        if ev.step_time_s < cand.evaluation.step_time_s:
            cand.placement, cand.evaluation = alt, ev
            cand.tokens_per_s = work.tokens / ev.step_time_s
    naive = naive_placement(work.ranks, c.tp, c.cp, c.dp, c.pp)
    if naive.ranks == cand.placement.ranks:
        work.evaluated += 1   # counted as the search always has, though nothing is evaluated again
        cand.naive = cand.evaluation
        return
    try:
        cand.naive = work.evaluate(c, naive.ranks)
    except RlsimError:
        cand.naive = None


def _ranked(cands: list[TrainCandidate], work: _Work, top: int | None, *, enumerated: int, pruned: dict[str, int],
            cost_s: Callable[[int, int], float]) -> TrainPlan:
    """The plan of the candidates, best first (``top`` of them), its evaluations charged by ``cost_s(timed,
    refused before timing)`` (PlannerParams.search_cost_s)."""
    cands.sort(key=_rank_key)
    keep = cands if top is None else cands[:top]
    for cand in keep:
        cand.tp_level = _tp_level(work.topology, cand.placement, cand.choice)
    return TrainPlan(keep, enumerated=enumerated, evaluated=work.evaluated, pruned=pruned,
                     planning_cost_s=cost_s(work.timed_queries, work.refused_early),
                     refused_before_timing=work.refused_early, checks_timed=work.checks_timed,
                     step_tokens=work.tokens)


def plan_to_target(model: Any, topology: Any, global_batch: int, seq_len: int, target_tokens_per_s: float, *,
                   top: int | None = None, **kwargs: Any) -> TrainPlan:
    """The fewest whole nodes (a prefix of the topology's nodes) whose best layout trains at least
    `target_tokens_per_s`: every prefix from one node up, the first that reaches it. Not a binary
    search: a layout uses every device it is given, so more nodes can train slower (5 DGX H100
    nodes under 4 where 40 devices split the batch badly), and a mixed cluster's prefix of fast
    nodes can reach a target the whole cluster, paced by its slow kind, does not.

    The plan's planning cost sums every search made, those in which no layout fitted too. RlsimError if
    no prefix reaches the target.
    """
    if not target_tokens_per_s > 0:
        raise RlsimError(f"target must be positive, got {target_tokens_per_s}", field="--target-tokens-per-s")
    nodes = list(range(topology.num_nodes))
    cost, best = 0.0, None
    for count in range(1, len(nodes) + 1):
        ranks = [r for i in nodes[:count] for r in topology.ranks_of_node(i)]
        try:
            plan = plan_training(model, topology, global_batch, seq_len, ranks=ranks, top=top, **kwargs)
        except RlsimError as exc:   # no layout on this prefix: the evaluations it made count all the same
            cost += exc.planning_cost_s if isinstance(exc, NoLayoutFits) else 0.0
            continue
        cost += plan.planning_cost_s
        if plan.best.tokens_per_s >= target_tokens_per_s:
            plan.planning_cost_s = cost
            return plan
        if best is None or plan.best.tokens_per_s > best.best.tokens_per_s:
            best = plan
    got = "no layout fits" if best is None else (f"best {best.best.tokens_per_s:.0f} tokens/s, on "
                                                 f"{best.best.devices} devices")
    raise RlsimError(f"{topology.name} with {len(nodes)} nodes cannot reach {target_tokens_per_s:.0f} "
                     f"tokens/s ({got})", field="--target-tokens-per-s",
                     fix="lower the target, or give a larger topology: --set topology.nodes=N (a topology of "
                         "groups: topology.groups.NAME.nodes=N; an explicit graph: more device nodes)")
