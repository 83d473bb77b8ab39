"""The planner in the schedules (issue 7): ``layout: auto`` and failure re-plans.

Sits above rl/ and planner/ (both are imported here, neither imports the other):
- ``auto_layouts(scenario, topology)`` plans the training layout (plan_training) and the rollout
  layout (plan_rollout) on the ranks of the pool each will run on, before the run; the modelled
  planning cost (the planner's eval_cost_s per evaluated candidate) is the run's ``start_s`` (state
  ``plan`` at the start of the timeline) and is reported in the summary.
- ``PlannerReplanner`` answers the schedule layer's failure re-plans with replan_on_failure.
Deterministic: the planner ranks by modelled step time with layout tie-breaks and counts its cost
in simulated seconds, never wall time.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from .engine_software import (
    engine_software,
    model_forced,
    overlaps_without_stages,
    refuse_missing_architecture,
    resolved,
    stage_forced_notes,
    with_request_cap,
)
from .errors import RefusedBeforeTiming, RlsimError
from .hardware.devices import distinct_devices
from .llm.architecture import ModelSpec, load_model
from .llm.inference import RolloutLayout
from .llm.layer_costs import with_lora
from .llm.lengths import LengthDistribution
from .llm.train_layout import TrainLayout
from .network.collectives import parse_group
from .params import TRAIN_SOFTWARE
from .planner import (
    Evaluation,
    RecoveryParams,
    TrainChoice,
    plan_rollout,
    plan_training,
    planner_settings,
    replan_on_failure,
    rerank_training,
)
from .planner.base import NoLayoutFits
from .planner.evaluate import RolloutEvaluator, TrainingEvaluator
from .planner.replan import survivors_after
from .planner.search import replan_recompute_methods
from .rl.packing import heaviest_micro_batch, micro_batch_order, pack_width, samples_per_micro_batch
from .rl.pools import aux_devices_with_room, requested_rollout_devices, served_devices
from .rl.schedules.batches import draw_lengths
from .rl.schedules.failures import ReplanOutcome
from .scenario import Scenario
from .units import capacity_text


@dataclass
class AutoPlan:
    layouts: dict[str, dict[str, Any]] = field(default_factory=dict)   # 'train' / 'rollout' -> layout map
    planning_cost_s: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)               # summary['auto_layout']
    # colocated StaleSync: the fastest training layout that leaves room beside its tail, where the
    # fastest does not (the run tries both: planning ranks training alone, which consolidation changes)
    consolidating_train: dict[str, Any] | None = None


def engine_rollout(workload: Any, model: Any, topology: Any, ranks: Any, space: Any, planner_keys: set[str],
                   source: str | None = None) -> tuple[Any, Any, Callable[[int, int], Any] | None]:
    """(rollout search space, inference constants, per-candidate constants or None) under a named
    engine (workload.engine) on the ranks' devices (vLLM's small set if any takes it): its
    running-sequence cap searched unless planner.rollout gives one, its per-device values for the
    inference fields the workload leaves unset. An engine whose values depend on the layout (SGLang
    0.5.6's CUDA-graph cap by TP size, vLLM V1's by the running-sequence cap, SGLang's overlap
    scheduler, off with pipeline stages) gives the constants of a candidate (tp, max_num_seqs, pp) as
    the third item. No engine: as given. A reserving engine's requests
    carry the run's generation cap. An engine without the model's architecture refuses it; the
    settings it forces by the model (model_forced) hold."""
    refuse_missing_architecture(workload.engine, model, source)
    if not workload.engine:
        return space, with_request_cap(workload.inference, workload.response_length), None
    devices = distinct_devices(topology, ranks)
    inference, layout = resolved(workload.engine, workload.inference, {}, devices)
    inference, _ = model_forced(workload.engine, with_request_cap(inference, workload.response_length), model)
    if "max_num_seqs" in layout and "max_num_seqs" not in planner_keys:
        space = space.model_copy(update={"max_num_seqs": [layout["max_num_seqs"]]})
    if not engine_software(workload.engine).layout_dependent and not overlaps_without_stages(workload.engine):
        return space, inference, None

    @cache
    def at_layout(tp: int, max_num_seqs: int, pp: int = 1) -> Any:
        params, _ = resolved(workload.engine, workload.inference, {"tp": tp, "max_num_seqs": max_num_seqs, "pp": pp},
                             devices)
        return model_forced(workload.engine, with_request_cap(params, workload.response_length), model)[0]
    return space, inference, at_layout


def engine_rollout_notes(workload: Any, model: Any, topology: Any, ranks: Any, pp: int = 1) -> list[str]:
    """The notes of what a named engine forces on the planned rollout (engine_rollout's constants): the
    settings it forces by the model (model_forced) and at `pp` pipeline stages (stage_forced_notes), as
    a run's summary notes say them. No engine: none."""
    if not workload.engine:
        return []
    inference, _ = resolved(workload.engine, workload.inference, {}, distinct_devices(topology, ranks))
    notes = model_forced(workload.engine, with_request_cap(inference, workload.response_length), model)[1]
    return notes + stage_forced_notes(workload.engine, pp)


def _lengths(sc: Scenario) -> tuple[int, int, int]:
    """(prompt median, response median, packed row width) the planner judges layouts on: the medians
    of the laws the run draws from (LengthDistribution.median_at: a lognormal law's median, its
    default where the law leaves it out; an empirical law's, of its file's lengths) and the run's own
    row width (rl/packing.pack_width)."""
    w = sc.workload
    p_med, r_med = (int(LengthDistribution.from_mapping(law, sc.source, f"workload.{key}").median_at(0))
                    for key, law in (("prompt_length", w.prompt_length), ("response_length", w.response_length)))
    return p_med, r_med, int(pack_width(sc.schedule.pack_tokens, w.prompt_length, w.response_length))


def _rollout_lengths(sc: Scenario) -> dict[str, int]:
    """The rollout planner's prompt_len / response_len: the laws' medians (_lengths), each where the
    scenario's planner.rollout does not give it (a run's plan and its failure re-plans alike)."""
    p_med, r_med, _ = _lengths(sc)
    user = (sc.planner.get("rollout") or {}).keys()
    return {k: v for k, v in (("prompt_len", p_med), ("response_len", r_med)) if k not in user}


def train_batch(sc: Scenario) -> tuple[int, int]:
    """(global batch in rows, row length) the training planner judges layouts on: one optimizer
    step's samples packed into rows of the run's pack width (prompt max + response max unless
    schedule.pack_tokens), the sample length taken at the mean of MEMORY_CHECK_STEPS steps of the
    memory check's draws (memory_check_batches: the laws' caps applied; as many steps whatever the
    run's iterations, so the plan does not change with them). The medians priced a long-tailed law's
    step 27-40% short of the run's (a capacity trial: lognormal sigma 1, mean 1.6x the median)."""
    w = sc.workload
    _, _, row = _lengths(sc)
    samples = (w.mini_batch_prompts or w.prompts_per_step) * w.samples_per_prompt
    # padded data too: the step's tokens, not rows of padding (plan's tokens/s was 5x the run's)
    mean_len = float(np.mean(np.concatenate(memory_check_batches(sc))))
    return max(1, math.ceil(samples * mean_len / row)), row


# Optimizer steps of sample lengths drawn for the planner's memory check of a training layout (the
# heaviest token-balanced micro-batch over them): a layout must fit the run's own micro-batches,
# which exceed a typical packed row. More steps: a heavier tail judged, milliseconds each.
MEMORY_CHECK_STEPS = 8
# spawn key of the planner's own generator for those lengths (the run's stream is untouched)
MEMORY_CHECK_STREAM = 1


def memory_check_batches(sc: Scenario, steps: int = MEMORY_CHECK_STEPS) -> list[np.ndarray]:
    """Sample lengths (prompt + response, cut at max_model_len) of ``steps`` optimizer steps, drawn
    from the workload's length laws with a generator of their own, whatever the run's iterations
    (a plan that changed with them picked other layouts for a 1- and a 10-iteration run)."""
    w = sc.workload
    prompt = LengthDistribution.from_mapping(w.prompt_length, sc.source, "workload.prompt_length")
    response = LengthDistribution.from_mapping(w.response_length, sc.source, "workload.response_length")
    rng = np.random.default_rng(np.random.SeedSequence(sc.seed, spawn_key=(MEMORY_CHECK_STREAM,)))
    prompts, n = w.mini_batch_prompts or w.prompts_per_step, w.samples_per_prompt
    batches = []
    for step in range(steps):   # as the run draws (RoundDraws)
        p, r = draw_lengths(rng, prompt.sample, response.sample, prompts, n, step, w.inference.max_model_len)
        batches.append((p + r).reshape(-1))
    return batches


def heaviest_micro_batch_of(sc: Scenario, row: int, trained: Sequence[np.ndarray] = ()
                            ) -> Callable[[int, int], tuple[int, float, int]] | None:
    """TrainingEvaluator's ``heaviest`` for a run that token-balances packed micro-batches (as
    LlmCosts: schedule.micro_batching balanced on packed data); None otherwise (the planner's rows
    of ``row`` tokens, the longest a sample can be, bound the run's micro-batches). ``trained``:
    batches an earlier run of the scenario trained, judged beside the drawn ones."""
    sched = sc.schedule
    if not (sched.micro_batching == "balanced" and sched.distqueue.packed):
        return None
    batches = memory_check_batches(sc) + list(trained)
    memo: dict[tuple[int, int], tuple[int, float, int]] = {}

    def heaviest(rows: int, dp: int) -> tuple[int, float, int]:
        hit = memo.get((rows, dp))
        if hit is None:
            worst = (rows, 0.0, 1)
            for lens in batches:
                b, ordered = micro_batch_order(lens, float(row), rows, dp, True)
                tokens = heaviest_micro_batch(ordered, b)
                if tokens > worst[1]:
                    worst = (b, tokens, -(-len(lens) // (b * dp)))
            hit = memo[(rows, dp)] = worst
        return hit
    return heaviest


def micro_batch_counts_of(sc: Scenario, row: int, trained: Sequence[np.ndarray] = ()
                          ) -> Callable[[int, int], set[int]]:
    """TrainingEvaluator's ``micro_batch_counts``: the DP replicas' micro-batch counts the run forms
    for a candidate's (micro_batch, dp) on each optimizer step of the memory check's draws
    (memory_check_batches; ``trained``: batches an earlier run trained), as LlmCosts forms them: the
    samples a micro-batch rl/packing.py micro_batch_permutation takes (token-balanced on packed
    data: about micro_batch rows of ``row`` tokens at the step's mean length; else micro_batch), cut
    as the run's sampler cuts them (training.sampler_micro_batch_counts); PPO's critic's own
    micro-batch (workload.critic_batching) too where it trains on the actor's devices. The count
    varies with the drawn lengths under token balancing: qwen3-30b-a3b at DP 2 took 128 or 103, and
    an interleaved pipeline of pp 2 the planner ranked first was refused at 103 (a planner review).
    With them the forward-only passes on those devices (log-probs, reference, PPO's values), which
    Megatron's interleaved schedule refuses alike (llm/pipeline.py check_interleaved_micro_batches):
    the whole step's samples (forward_pass_batches), at schedule.forward_micro_batch rows (the
    critic's workload.critic_batching.forward_micro_batch) where given, else the candidate's."""
    from .llm.training import sampler_micro_batch_counts
    from .rl.llm_costs import critic_beside_actor

    batches = memory_check_batches(sc) + list(trained)
    whole_steps = forward_pass_batches(sc)
    balanced = sc.schedule.micro_batching == "balanced" and sc.schedule.distqueue.packed
    batching = sc.workload.critic_batching
    beside = batching is not None and critic_beside_actor(sc)
    critic_rows = batching.micro_batch if beside else None
    forward_rows = {sc.schedule.forward_micro_batch} | ({batching.forward_micro_batch} if beside else set())
    memo: dict[tuple[int, int], set[int]] = {}

    def samples(lens: np.ndarray, rows: int, dp: int) -> int:   # micro_batch_permutation's
        return samples_per_micro_batch(lens, float(row), rows, dp) if balanced else rows

    def cut(of: Sequence[np.ndarray], rows: set[int], dp: int) -> set[int]:
        return {m for mb in rows for lens in of for m in sampler_micro_batch_counts(len(lens), samples(lens, mb, dp), dp)}

    def counts(rows: int, dp: int) -> set[int]:
        hit = memo.get((rows, dp))
        if hit is None:
            hit = memo[(rows, dp)] = (cut(batches, {rows, critic_rows or rows}, dp)
                                      | cut(whole_steps, {r or rows for r in forward_rows}, dp))
        return hit
    return counts


def forward_pass_batches(sc: Scenario) -> list[np.ndarray]:
    """The memory check's draws (memory_check_batches, an optimizer step's each) as the batches a step's
    forward-only passes take: the whole step, workload.mini_batches optimizer steps' samples together
    (rl/schedules/training.py _forwards), the draws taken in turn (cycled where a step holds more)."""
    drawn = memory_check_batches(sc)
    k = sc.workload.mini_batches
    return [np.concatenate([drawn[(i + j) % len(drawn)] for j in range(k)]) for i in range(0, len(drawn), k)]


def step_sequences_of(sc: Scenario, row: int) -> Callable[[int, int], tuple[int, np.ndarray]]:
    """TrainingEvaluator's ``step_sequences``: an optimizer step of the lengths the memory check
    draws (memory_check_batches), in the micro-batch order the run forms (rl/packing.py
    micro_batch_order, as LlmCosts does), for a candidate's (rows, dp); ``step_packing`` says how the
    cost model reads them. Token-balanced micro-batches (schedule.micro_batching: balanced on packed
    data) take a step with the pooled draws' length distribution (every n-th of their n steps'
    sorted lengths: one draw of correlated groups is a noisy step, 32B GRPO 2.14M tokens against a
    1.85M mean), which they re-balance anyway; micro-batches in arrival order (sequence, or padded
    data: each padded to its longest, as the run pads it) take the drawn step whose tokens are
    nearest the draws' mean, in its order (sorted lengths split the replicas' tokens evenly: 16% short)."""
    sched = sc.schedule
    drawn = memory_check_batches(sc)
    balanced = sched.micro_batching == "balanced" and sched.distqueue.packed
    if balanced:
        lens = np.sort(np.concatenate(drawn))[len(drawn) // 2::len(drawn)]
    else:   # the drawn step whose tokens are nearest the draws' mean (the median step under-weighted the heavy ones)
        sums = np.array([float(batch.sum()) for batch in drawn])
        lens = drawn[int(np.argmin(np.abs(sums - sums.mean())))]
    memo: dict[tuple[int, int], tuple[int, np.ndarray]] = {}

    def step_sequences(rows: int, dp: int) -> tuple[int, np.ndarray]:
        hit = memo.get((rows, dp))
        if hit is None:
            hit = memo[(rows, dp)] = micro_batch_order(lens, float(row), rows, dp, balanced)
        return hit
    return step_sequences


def params_beside_engine(sc: Scenario, rollout_settings: Any) -> Any:
    """The trainer constants a layout is judged with: the usable HBM less a resident engine's share
    (schedule.switch.engine_resident, as LlmCosts judges the run), the given rollout layout's
    gpu_memory_utilization, or for a planned one the share the planner is asked for (planner.rollout)."""
    from .rl.llm_costs import training_params_beside_engine
    rollout = sc.workload.rollout_layout
    if isinstance(rollout, Mapping):
        share = rollout.get("gpu_memory_utilization", RolloutLayout.model_fields["gpu_memory_utilization"].default)
    else:
        share = rollout_settings.gpu_memory_utilization
    return training_params_beside_engine(sc, float(share))


def updates_beside(sc: Scenario | None, params: Any,
                   base: ModelSpec | None = None) -> list[tuple[Any, str, Callable[..., Any], Callable[..., Any]]]:
    """TrainingEvaluator's ``beside``, as rl/llm_costs judges the run: each update beside what other
    models keep on its devices. PPO: the actor's beside the critic's kept weights and optimizer state,
    the critic's (under its own micro-batching, workload.critic_batching) beside the actor's; either
    beside the resident frozen models' weight shards on its pool (llm_costs.frozen_weight_bytes: a
    reference without host offload or swap, a reward model on the trainer). None where nothing sits
    beside the update; a critic on a pool of its own (fuse: actor, schedule.aux_devices: rl/pools.role_pool)
    neither holds state beside the actor nor trains on its devices (aux_pool_check judges its pool).
    ``params``: the actor's trainer constants as the evaluator has them; ``base``:
    the actor's architecture where it is not workload.model (rl/llm_costs.role_models)."""
    if sc is None:
        return []
    from .rl.llm_costs import (
        critic_beside_actor,
        critic_layout,
        critic_train_params,
        frozen_roles_beside,
        frozen_text,
        frozen_weight_bytes,
        kept_state_bytes,
        role_models,
    )

    models = role_models(sc, base)
    actor_params = params or sc.workload.train_params

    def frozen(role: str, lay: Any, hbm: float) -> float:
        return sum(frozen_weight_bytes(sc, models, role, lay, hbm, actor_params).values())

    frozen_of = {role: frozen_text(frozen_roles_beside(sc, role)) for role in ("actor", "critic")}
    if not critic_beside_actor(sc):   # no critic, or one on a pool of its own: the run counts none beside the actor
        return [(models["actor"], frozen_of["actor"], lambda lay, hbm: frozen("actor", lay, hbm),
                 lambda lay: lay)] if frozen_of["actor"] else []
    critic_params = critic_train_params(actor_params, sc.workload.critic_offload, sc.workload.critic_optimizer)
    batching = sc.workload.critic_batching

    def held(other: str, frozen_named: str) -> str:
        return " and ".join(filter(None, (f"the {other}'s resident weights, optimizer state and kept gradients", frozen_named)))

    return [(models["actor"], held("critic", frozen_of["actor"]),
             lambda lay, hbm: kept_state_bytes(models["critic"], lay, hbm, critic_params) + frozen("actor", lay, hbm),
             lambda lay: lay),
            (models["critic"], held("actor", frozen_of["critic"]),
             lambda lay, hbm: kept_state_bytes(models["actor"], lay, hbm, actor_params) + frozen("critic", lay, hbm),
             lambda lay: critic_layout(lay, batching, sc.source))]


@contextmanager
def engine_named(sc: Scenario | None) -> Iterator[None]:
    """A planner's "no training layout fits" beside a resident engine says that the engine holds its
    share of HBM through training (it blamed the batch alone); None: nothing to say."""
    from .rl.llm_costs import engine_stays_resident
    try:
        yield
    except RlsimError as exc:
        if sc is None or not (engine_stays_resident(sc) and exc.message.startswith("no training layout")):
            raise
        raise exc.reworded(f"{exc.message}, beside the engine that stays resident with its gpu_memory_utilization "
                           "share of HBM (schedule.switch.engine_resident)",
                           f"lower the engine's gpu_memory_utilization, let it free its memory between phases "
                           f"(engine_resident: false), or {exc.fix}") from None


def step_packing(sc: Scenario) -> str:
    """How the run's training cost reads a micro-batch's samples (LlmCosts._packing)."""
    return "packed" if sc.schedule.distqueue.packed else "padded"


def consolidated_train_devices(sc: Scenario, pool: int) -> int | None:
    """The fewest devices colocated StaleSync may train on (rl/schedules/colocated.split_time): the
    pool beside its largest consolidated tail, consolidate_share of the rollout instances; None for
    a schedule that trains on its whole pool. A rollout layout left auto is taken at one device an
    instance, the largest tail (the floor of a share of the instances holds the most devices so)."""
    instance = _tail_instance_devices(sc)
    if instance is None:
        return None
    pool = (pool // instance) * instance   # the run's pool holds whole rollout instances (failures' survivors)
    tail = max(1, math.floor(sc.schedule.consolidate_share * (pool // instance)))
    return pool - tail * instance


def room_beside_tail(sc: Scenario) -> Callable[[int], int] | None:
    """The devices colocated StaleSync keeps for training beside its smallest tail (one rollout
    instance; rl/schedules/colocated._train_devices_beside) on a pool of n: a training group larger
    than that never lets the tail consolidate. None for a schedule that trains on its whole pool."""
    instance = _tail_instance_devices(sc)
    return None if instance is None else (lambda n: n - instance)


def _tail_instance_devices(sc: Scenario) -> int | None:
    """The devices of one rollout instance of colocated StaleSync's tail (a rollout layout left auto:
    one); None for a schedule that trains on its whole pool."""
    sched = sc.schedule
    if not (sched.effective_placement == "colocated" and sched.effective_staleness >= 1 and sched.effective_threshold < 1):
        return None
    rollout = sc.workload.rollout_layout
    return rollout.get("tp", 1) * rollout.get("ep", 1) if isinstance(rollout, Mapping) else 1


def planning_ranks(sc: Scenario, n_devices: int) -> tuple[list[int], list[int]]:
    """(rollout ranks, training ranks) of the pools before whole-unit rounding (rl/pools.py), on the
    devices before a distillation teacher's. A colocated pool (fuse: full) is the devices beside
    verl's reward pool (schedule.aux_devices), and whole instances of a given rollout layout: the
    run's pool holds no more (build_pools), and a layout planned on more devices judged the ZeRO
    shards at a DP the run does not have, or had no pool at all (GB200 NVL72's 72 GPUs beside a
    32-GPU engine: a 24-device replica planned, lcm(24, 32) = 96 refused)."""
    sched = sc.schedule
    n_devices -= sum(served_devices(sc.workload).values())
    if sched.effective_placement == "colocated":
        if sched.fuse == "full":
            actor = n_devices - aux_devices_with_room(sched, n_devices, sc.source or "<scenario>")
            actor = _whole_given_instances(sc, actor)
        else:
            actor = n_devices - max(1, round(n_devices * sched.aux_fraction))
        return list(range(actor)), list(range(actor))
    # the reference / reward / critic's own pools (rl/pools.py), refused where they leave no room, as a run
    n_devices -= aux_devices_with_room(sched, n_devices, sc.source or "<scenario>")
    want = requested_rollout_devices(sched, n_devices)
    if want >= n_devices:   # no training device left: said by the key, not as an empty rank list
        field = "schedule.rollout_devices" if sched.rollout_devices else "schedule.rollout_fraction"
        raise RlsimError(f"{want} rollout devices leave none of the {n_devices} for training", source=sc.source,
                         field=field, fix=f"give {field} fewer devices, or a topology with more")
    return list(range(want)), list(range(want, n_devices))


def _whole_given_instances(sc: Scenario, n_devices: int) -> int:
    """``n_devices`` rounded down to whole instances of the given rollout layout (a layout left auto:
    as they are; fewer devices than one instance: as they are, for the run to refuse by its pools)."""
    rollout = sc.workload.rollout_layout
    if not isinstance(rollout, Mapping):
        return n_devices
    instance = RolloutLayout.from_mapping({**rollout, "instances": 1}, source=sc.source,
                                          field_name="workload.rollout_layout").devices_per_instance
    return n_devices - n_devices % instance if n_devices >= instance else n_devices


def _check_planner_keys_apply(sc: Scenario) -> None:
    """A run reads `planner:` for the layouts left auto and for failure re-plans (space, rollout and
    the top-level params); a section it never reads is refused, not dropped."""
    for section, reason in (("hetero", "no run uses the heterogeneous step model (plan_hetero, "
                                       "replan_on_slowdown in Python)"),
                            ("recovery", "a run's failures take schedule.recovery")):
        if section in sc.planner:
            raise RlsimError(f"planner.{section} does not apply to a run: {reason}", source=sc.source,
                             field=f"planner.{section}", fix=f"remove planner.{section}"
                             + (" and set schedule.recovery" if section == "recovery" else ""))
    w = sc.workload
    if sc.schedule.failures:   # a failure re-plans with any of the sections
        return
    if w.train_layout != "auto" and w.rollout_layout != "auto":
        key = sorted(sc.planner)[0]
        raise RlsimError("the planner does not run: both layouts are given and no failure re-plans them",
                         source=sc.source, field=f"planner.{key}",
                         fix="remove the planner section, or set workload.train_layout / rollout_layout: auto")
    # each side's section is read only when that side is planned
    for section, side in (("space", "train_layout"), ("rollout", "rollout_layout")):
        if section in sc.planner and getattr(w, side) != "auto":
            raise RlsimError(f"planner.{section} plans workload.{side}, which this scenario gives (only the other "
                             "side is planned, and no failure re-plans)", source=sc.source, field=f"planner.{section}",
                             fix=f"remove planner.{section}, or set workload.{side}: auto")


def train_space(space: Any, software: str, planner_keys: Mapping[str, Any], *, packed_step: bool,
                model: Any = None, scenario: Scenario | None = None) -> Any:
    """The training search space of `layout: auto` and of `rlsim plan` (one rule, so plan ranks what a
    run would take), narrowed to the stack. Unless planner.space gives them: uneven pipeline stages
    (floor / ceil layer shares, MCore's num_layers_in_first/last_pipeline_stage, what
    llm/training.py models) are searched for stacks other than megatron-2021 (with an exact split
    only, a 61-layer model such as pangu-ultra-moe or deepseek-v3 pipelines only as PP 1 or 61); and
    when the batch is the run's optimizer step packed into rows (``packed_step``: a row count such as
    285 that no power-of-two DP divides) DP x micro-batch need not divide it (exact_batch: false: the
    last micro-batch round is partial, as the run's sampler has it), where an exact split would
    leave DP 1. With ``scenario``, narrowed for the model whose pipeline rule binds the layout
    (rl/llm_costs.pipeline_rule_model: a PPO critic with tied embeddings on areal-archon, which trains
    under the actor's layout and whose pipeline the run refuses)."""
    from .params import MEGATRON_2021
    from .rl.llm_costs import pipeline_rule_model

    given = set((planner_keys.get("space") or {}).keys())
    update: dict[str, Any] = {}
    if "uneven_pp" not in given and software != MEGATRON_2021.name:
        update["uneven_pp"] = True
    if "exact_batch" not in given and packed_step:
        update["exact_batch"] = False
    bound = pipeline_rule_model(scenario, model) if scenario is not None and model is not None else model
    return space.model_copy(update=update).for_software(TRAIN_SOFTWARE[software], bound)


def _consolidating(sc: Scenario, ranks: list[int], params: Any, evaluator: Any, plan: Any) -> tuple[dict[str, Any] | None, float]:
    """(the fastest layout that leaves colocated StaleSync room beside its tail, planning cost), where
    ``plan``'s best (plan_training's, with every layout that fitted kept: first_pass) does not; (None, 0)
    where it does, the schedule trains on its whole pool, or none does. The search is not made again: the
    room rule (a pool unit, tp x cp x pp with its expert fold) holds alike for every recompute mode of a
    layout and TrainingEvaluator refuses before timing what it rules out, so that search's first pass is
    ``plan``'s less the layouts without room (planner.rerank_training); only the block recompute searched
    beside the kept full-recompute layouts under the kept ones' bound (that search's, not ``plan``'s; a
    layout ``plan`` searched is not searched again) and its leaders' refinement are evaluated, and charged
    (it searched the whole space again: 176.1 s of the default scenario's 351.4 s of planning, where 720
    evaluations are new, 591 of them block probes refused before timing: 0.79 s)."""
    room = room_beside_tail(sc)
    space_left = None if room is None else room(len(ranks))
    if space_left is None or evaluator.layout(plan.best.choice).pool_unit <= space_left:
        return None, 0.0
    try:
        kept = rerank_training(plan, lambda c: evaluator.layout(c).pool_unit <= space_left, evaluator.topology, ranks,
                               evaluator, params=params, top=1)
    except RlsimError:
        return None, 0.0
    return {k: v for k, v in kept.best.choice.as_dict().items() if k != "dp"}, kept.planning_cost_s


def auto_training_evaluator(sc: Scenario, topology: Any, model: ModelSpec, shape: tuple[int, int], n_train: int,
                            trained: Sequence[np.ndarray] = ()) -> TrainingEvaluator:
    """The evaluator `layout: auto` judges and times training layouts with on ``n_train`` devices (the
    batch ``shape``: train_batch's rows and row length), as the run judges them: the workload's trainer
    constants beside a resident engine's share, the run's micro-batches of drawn lengths (``trained``:
    batches an earlier run trained), the devices colocated StaleSync also trains on, the rollout phase
    and the aux pool's passes."""
    batch, row = shape
    params = params_beside_engine(sc, planner_settings(sc.planner, source=sc.source).rollout)
    return TrainingEvaluator.for_workload(model, topology, batch, row, sc.workload, params=params,
                                          beside=updates_beside(sc, params),
                                          heaviest=heaviest_micro_batch_of(sc, row, trained),
                                          also_trains_on=consolidated_train_devices(sc, n_train),
                                          step_sequences=step_sequences_of(sc, row), packing=step_packing(sc),
                                          micro_batch_counts=micro_batch_counts_of(sc, row, trained),
                                          rollout_phase=rollout_phase_check(sc, model, params),
                                          pools_check=aux_pool_check(sc, topology))


def auto_layouts(sc: Scenario, topology: Any, trained: Sequence[np.ndarray] = ()) -> AutoPlan:
    """The planner's layouts for the sides left ``auto``, with the workload's trainer and engine
    constants and training stack. The planner settings are checked even when nothing is auto.
    ``trained``: batches a run on an earlier plan trained that did not fit it (memory judged on them too)."""
    w = sc.workload
    out = AutoPlan()
    settings = planner_settings(sc.planner, source=sc.source)
    _check_planner_keys_apply(sc)
    if w.train_layout != "auto" and w.rollout_layout != "auto":
        return out
    model: ModelSpec = with_lora(load_model(w.model, field="workload.model", source=sc.source), w.lora, sc.source)
    roll_ranks, train_ranks = planning_ranks(sc, topology.num_devices)
    if w.train_layout == "auto":    # first: a colocated engine is sized beside its resident state
        batch, row = train_batch(sc)
        space = train_space(settings.space, w.train_software, sc.planner, packed_step=True, model=model, scenario=sc)
        evaluator = auto_training_evaluator(sc, topology, model, (batch, row), len(train_ranks), trained)
        with engine_named(sc):
            plan = plan_training(model, topology, batch, row, ranks=train_ranks, space=space, params=settings.params,
                                 evaluator=evaluator, top=1)
        lay = {k: v for k, v in plan.best.choice.as_dict().items() if k != "dp"}
        out.layouts["train"] = lay
        out.planning_cost_s += plan.planning_cost_s
        out.consolidating_train, cost = _consolidating(sc, train_ranks, settings.params, evaluator, plan)
        out.planning_cost_s += cost
        out.detail["train"] = {"layout": lay, "evaluated": plan.evaluated, "planning_cost_s": plan.planning_cost_s,
                               "devices": len(train_ranks), "global_batch_rows": batch, "seq_len": row}
    if w.rollout_layout == "auto":
        user = set((sc.planner.get("rollout") or {}).keys())
        space, inference, at_layout = engine_rollout(w, model, topology, roll_ranks,
                                                     settings.rollout.model_copy(update=_rollout_lengths(sc)), user,
                                                     sc.source)
        engine_share = colocated_engine_share(sc, topology, model, out.layouts.get("train", w.train_layout),
                                              train_ranks, space.gpu_memory_utilization)
        space = space.model_copy(update={"gpu_memory_utilization": engine_share})
        plan = plan_rollout(model, topology, ranks=roll_ranks, space=space, params=settings.params, top=1,
                            evaluator=RolloutEvaluator(model, topology, space, params=inference, params_for_layout=at_layout))
        lay = {**{k: v for k, v in plan.best.layout.items() if k != "instances"},
               "gpu_memory_utilization": engine_share}
        out.layouts["rollout"] = lay
        out.planning_cost_s += plan.planning_cost_s
        out.detail["rollout"] = {"layout": lay, "evaluated": plan.evaluated, "planning_cost_s": plan.planning_cost_s,
                                 "devices": len(roll_ranks)}
    out.detail["planning_cost_s"] = out.planning_cost_s
    return out


def rollout_phase_check(sc: Scenario, model: ModelSpec, params: Any) -> Callable[[TrainLayout, float], None] | None:
    """TrainingEvaluator's ``rollout_phase``, as the run judges a colocated placement's rollout phase
    (LlmCosts.rollout_phase_bytes): the given engine's gpu_memory_utilization share of HBM beside what
    the training layout leaves resident (resident_training_bytes at the engine's own weight shard, the
    PPO critic's kept state and the frozen models' weights: updates_beside). A layout they overflow is
    refused (TP1 for grpo-qwen2.5-7b on one DGX-H100 node beside an engine at 0.7: 90.6 GB of 85.9 GB,
    where TP2 fits; a planner audit). None on split pools, and for a rollout layout left auto, whose
    share colocated_engine_share lowers to what the planned layout leaves."""
    rollout = sc.workload.rollout_layout
    if sc.schedule.effective_placement != "colocated" or not isinstance(rollout, Mapping):
        return None
    from .rl.llm_costs import _bytes_per_weight, resident_training_bytes

    engine = RolloutLayout.from_mapping({**rollout, "instances": 1}, source=sc.source,
                                        field_name="workload.rollout_layout")
    shard = model.weight_bytes(_bytes_per_weight(engine)) / engine.devices_per_instance
    beside = updates_beside(sc, params)

    def check(lay: TrainLayout, hbm: float) -> None:
        resident = resident_training_bytes(model, lay, sc.schedule.switch, hbm, shard, params)
        resident += beside[0][2](lay, hbm) if beside else 0.0
        share = engine.gpu_memory_utilization
        if hbm * share + resident > hbm:
            raise RlsimError(f"the rollout phase needs {(hbm * share + resident) / 1e9:.1f} GB per device with "
                             f"{model.name} trained as {lay.as_dict()} (engine {hbm * share / 1e9:.1f} GB + resident "
                             f"training state {resident / 1e9:.1f} GB) on {capacity_text(hbm)}", source="planner",
                             field="workload.rollout_layout.gpu_memory_utilization",
                             fix=f"lower gpu_memory_utilization ({share:g}) to <= "
                                 f"{max(0.0, (hbm - resident) / hbm):.2f}, or use more devices per training replica")
    return check


def aux_pool_check(sc: Scenario, topology: Any, base: ModelSpec | None = None
                   ) -> Callable[[TrainLayout, int], float | None] | None:
    """TrainingEvaluator's ``pools_check`` for fuse: actor, whose aux pool runs the reference, reward
    model and critic under the training layout: the run's pools for a candidate (rl/pools.build_pools
    on the topology's devices before a served model's, at the given rollout instance, one device for
    a planned one) must train on the candidate's devices, the aux pool hold whole replicas of its
    layout (TrainLayout.resolve), and each of its passes fit there as the run judges it (LlmCosts.
    aux_passes_fit: the run's own checks, on aux_pool_batches). The planner searched the actor's
    devices alone: qwen2.5-32b on two DGX-H100 nodes planned TP1 PP7 on 14, and the run refused the
    aux pool's 2; ppo-llama3.1-70b on 8 DGX-H200 nodes planned TP8 DP7, and the run refused the
    reward model's pass beside the 70B critic's state on the aux pool's 8 (191.6 GB; planner audits).
    ``base``: the actor's architecture where it is not workload.model (`rlsim plan --model`: the
    reference and the critic and reward model without their own then run it, as role_models has them).
    The check returns the aux pool's train-phase peak a device (aux_passes_fit: the critic's update,
    None without one), which the run's peak_memory_by_phase.train takes where it exceeds the actor's
    (115.4 GB against the actor's 52.0 for ppo-llama3.1-70b at aux_fraction 0.25; a planner review).
    None for other placements."""
    sched = sc.schedule
    if sched.effective_placement != "colocated" or sched.fuse != "actor":
        return None
    from .rl.llm_costs import LlmCosts
    from .rl.pools import build_pools

    rollout = sc.workload.rollout_layout
    instance = (RolloutLayout.from_mapping({**rollout, "instances": 1}, source=sc.source,
                                           field_name="workload.rollout_layout").devices_per_instance
                if isinstance(rollout, Mapping) else 1)
    total = topology.num_devices - sum(served_devices(sc.workload).values())
    held: dict[str, Any] = {}   # the private costs and the batches, made when a candidate first gets this far

    def check(lay: TrainLayout, n_ranks: int) -> float | None:
        pools = build_pools(sched, total, instance, lay.pool_unit, source="planner", unit_text=lay.pool_unit_text())
        if pools["actor"].count != n_ranks:
            raise RlsimError(f"the run's actor pool with {lay.as_dict()} holds {pools['actor'].count} devices "
                             f"(whole units of {lay.pool_unit_text()} and the rollout instance's {instance}), not the "
                             f"{n_ranks} planned", source="planner", field="schedule.aux_fraction",
                             fix="change schedule.aux_fraction, or the layout's tp x cp x pp")
        aux = {k: v for k, v in lay.as_dict().items() if k != "dp"}
        TrainLayout.from_mapping(aux, source="planner").resolve(pools["aux"].count, source="planner")
        if not held:
            held["costs"], held["batches"] = LlmCosts(sc, topology, base=base), aux_pool_batches(sc)
        costs = held["costs"]
        costs.set_train_layout(aux)
        step, minis = held["batches"]
        return costs.aux_passes_fit(pools["aux"].ranks, step, minis)
    return check


def aux_pool_batches(sc: Scenario) -> tuple[np.ndarray, list[np.ndarray]]:
    """(a step's samples, its mini-batches) the planner runs an aux pool's passes on: the first
    prompts_per_step / mini_batch_prompts of the memory check's draws (memory_check_batches, one
    mini-batch each) as the step its forward passes take, the one of the longest sample among them
    as the update's mini-batch (its heaviest micro-batch bounds the update's memory)."""
    w = sc.workload
    per_step = max(1, -(-w.prompts_per_step // (w.mini_batch_prompts or w.prompts_per_step)))
    drawn = memory_check_batches(sc, max(MEMORY_CHECK_STEPS, per_step))[:per_step]
    return np.concatenate(drawn), [max(drawn, key=lambda lens: int(lens.max()))]


def colocated_engine_share(sc: Scenario, topology: Any, model: ModelSpec, train_layout: Mapping[str, Any],
                           train_ranks: list[int], wanted: float) -> float:
    """The engine's share of HBM (gpu_memory_utilization) for a planned rollout layout: `wanted`
    (planner.rollout.gpu_memory_utilization, vLLM's 0.9), lowered on a colocated placement to what
    the resident training state leaves (weights, plus optimizer state unless offloaded; as the
    schedule's switch keeps them, rl/llm_costs.resident_training_bytes), so that `layout: auto`
    never plans a rollout phase the run then refuses."""
    if sc.schedule.effective_placement != "colocated" or not train_ranks:
        return wanted
    from .llm.train_layout import TrainLayout
    from .rl.llm_costs import resident_training_bytes

    mapping = {k: v for k, v in dict(train_layout).items() if k != "dp"}
    lay = TrainLayout.from_mapping(mapping, source=sc.source).resolve(len(train_ranks), source=sc.source)
    hbm = min(topology.device_spec(r).hbm_bytes for r in train_ranks)
    # the engine's weight shard is not known before the rollout plan: a second copy (switch not
    # bucketed) is counted at its largest, one instance per device
    shard = model.weight_bytes(2.0)
    resident = resident_training_bytes(model, lay, sc.schedule.switch, hbm, shard, sc.workload.train_params)
    beside = updates_beside(sc, sc.workload.train_params)
    if beside:   # the critic's kept state (PPO) and the resident frozen weights sit beside the engine too
        resident += beside[0][2](lay, hbm)
    free = math.floor((hbm - resident) / hbm * 100) / 100
    if free <= 0:
        raise RlsimError(f"the resident training state ({resident / 1e9:.1f} GB per device with the training layout "
                         f"{mapping}) leaves no memory for a rollout engine on {capacity_text(hbm)}",
                         source=sc.source, field="workload.train_layout",
                         fix="use more devices per training replica (tp / pp), keep schedule.switch.offload_optimizer "
                             "and bucketed on, or place the schedule on split pools")
    return min(wanted, free)


class _AcceptedFirst:
    """``base`` behind the schedule's own check of a candidate (LlmCosts.accept_train_layout), which
    refuses as a memory miss does: RefusedBeforeTiming where it refused before timing a step (the
    rollout phase, the latest batches' memory), charged so. The train_step_cost queries the check
    timed (it returns how many: up to three batches) are counted in ``checks_timed`` beside ``base``'s
    step, and a search charges each as a timed evaluation (search._Work): a candidate that timed k
    batches and the step costs (k + 1) x eval_cost_s (it was charged one: 19.5 ms measured against
    5 ms). A refusal by ``base`` before timing after the check timed k > 0 is charged as the k queries
    (a timed candidate and k - 1 beside it)."""

    def __init__(self, base: TrainingEvaluator, accept: Callable[[dict[str, Any]], int | None]) -> None:
        self.base, self.accept = base, accept
        self.checks_timed = 0
        self.micro_batch_counts = base.micro_batch_counts   # the search judges interleaving on them

    def __call__(self, c: TrainChoice, ranks: list[int]) -> Evaluation:
        timed = beside = self.accept(c.as_dict()) or 0   # closed-form costs time nothing (None)
        try:
            return self.base(c, ranks)
        except RefusedBeforeTiming as exc:
            if not timed:
                raise
            beside = timed - 1   # charged as a timed candidate: the check's other queries beside it
            raise exc.as_timed() from None
        finally:
            self.checks_timed += beside


class PlannerReplanner:
    """schedule.failures -> planner.replan_on_failure on the pool's survivors (rl/schedules/failures.py)."""

    def __init__(self, sc: Scenario, topology: Any, trained: Sequence[np.ndarray] = ()):
        """``trained``: batches an earlier run trained that did not fit a layout (api._run_planned): each
        re-plan judges memory on them beside the drawn ones, as `layout: auto`'s plan does."""
        self.sc, self.topology = sc, topology
        self.trained = list(trained)
        self.model = with_lora(load_model(sc.workload.model, field="workload.model", source=sc.source),
                               sc.workload.lora, sc.source)
        self.settings = planner_settings(sc.planner, source=sc.source)
        rec = sc.schedule.recovery
        self.recovery = RecoveryParams(drop_whole_node=rec.drop_whole_node, restart_s=rec.restart_s,
                                       checkpoint_every_steps=rec.checkpoint_every_steps, widen=rec.widen)

    def ranks_of(self, spec: str) -> list[int]:
        return parse_group(self.topology, spec)

    def on_failure(self, pool_ranks: list[int], failed: list[int], current: dict[str, Any],
                   accept: Callable[[dict[str, Any]], int | None] | None = None,
                   usable: Callable[[int, dict[str, Any] | None], int] | None = None) -> ReplanOutcome:
        from .rl.llm_costs import pipeline_rule_model

        batch, row = train_batch(self.sc)
        choice = TrainChoice(**{k: current[k] for k in ("tp", "pp", "vpp", "dp", "ep", "cp", "zero", "recompute",
                                                        "micro_batch")},
                             etp=current.get("etp") if self.model.is_moe else None,
                             zero_shard_size=current.get("zero_shard_size"),
                             recompute_method=current.get("recompute_method", "uniform"),
                             recompute_num_layers=current.get("recompute_num_layers", 1)) if current else None
        # judged and timed as layout: auto judges them (the run's micro-batches of drawn lengths, a
        # resident engine's share, the devices colocated StaleSync also trains on)
        params = params_beside_engine(self.sc, self.settings.rollout)
        base = TrainingEvaluator.for_workload(self.model, self.topology, batch, row, self.sc.workload,
                                              params=params, beside=updates_beside(self.sc, params),
                                              heaviest=heaviest_micro_batch_of(self.sc, row, self.trained),
                                              also_trains_on=lambda n: consolidated_train_devices(self.sc, n),
                                              step_sequences=step_sequences_of(self.sc, row),
                                              micro_batch_counts=micro_batch_counts_of(self.sc, row, self.trained),
                                              packing=step_packing(self.sc))
        evaluator = _AcceptedFirst(base, accept) if accept is not None else base
        wide = train_space(self.settings.space, self.sc.workload.train_software, self.sc.planner, packed_step=True,
                           model=self.model, scenario=self.sc)
        if choice is not None and self.sc.workload.train_layout != "auto":   # no run plans again for a given one
            wide = wide.model_copy(update={"recompute_method": replan_recompute_methods(choice)})
        kept = None if usable is None or self.sc.schedule.effective_placement != "colocated" \
            else lambda n, choice: usable(n, choice.as_dict())
        args = dict(failed=failed, ranks=pool_ranks, params=self.settings.params, recovery=self.recovery,
                    current=choice, wide_space=wide, devices_kept=kept,
                    software=TRAIN_SOFTWARE[self.sc.workload.train_software],
                    # its neighbourhood keeps to the pipeline rule of the model it binds (a tied PPO critic's)
                    limits_model=pipeline_rule_model(self.sc, self.model))
        # colocated StaleSync keeps training beside its tail where a layout allows it (a TP8 PP11 group of
        # all 352 survivors ran the rest synchronous: ~620 s steps against ~500 s); else any layout
        base.room_beside_tail = room_beside_tail(self.sc)
        spent = 0.0   # a first try with room that found nothing: its searches were made all the same
        try:
            rp = replan_on_failure(self.model, self.topology, batch, row, evaluator=evaluator, **args)
        except RlsimError as exc:
            if base.room_beside_tail is None:
                raise
            spent = exc.planning_cost_s if isinstance(exc, NoLayoutFits) else 0.0
            base.room_beside_tail = None
            rp = replan_on_failure(self.model, self.topology, batch, row, evaluator=evaluator, **args)
        lay = {k: v for k, v in rp.layout.items() if k != "dp"}
        return ReplanOutcome(list(rp.survivors), lay, spent + rp.planning_cost_s)

    def on_rollout_failure(self, pool_ranks: list[int], failed: list[int], current: dict[str, Any]) -> ReplanOutcome:
        """Split pools: the rollout pool keeps its instance layout (TP, EP, PP, max_num_seqs: engines
        are restarted, not resharded); the planner re-judges it on the survivors (plan_rollout with
        that layout only), which is the planning cost counted."""
        alive = survivors_after(self.topology, pool_ranks, failed, self.recovery.drop_whole_node)
        if not alive:   # nothing to plan: the runner says the pool is gone (split_failures.py)
            return ReplanOutcome([], None, 0.0)
        lay = self.sc.workload.rollout_layout
        lay = lay if isinstance(lay, dict) else {}
        fixed = {k: [int(lay[k])] for k in ("tp", "ep", "pp", "max_num_seqs") if k in lay}
        space = self.settings.rollout.model_copy(update={**_rollout_lengths(self.sc), **fixed})
        space, inference, at_layout = engine_rollout(self.sc.workload, self.model, self.topology, alive, space, set(fixed),
                                                     self.sc.source)
        plan = plan_rollout(self.model, self.topology, ranks=alive, space=space, params=self.settings.params, top=1,
                            evaluator=RolloutEvaluator(self.model, self.topology, space, params=inference,
                                                       params_for_layout=at_layout))
        return ReplanOutcome(list(alive), None, plan.planning_cost_s)

