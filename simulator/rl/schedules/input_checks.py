"""What a run's input must hold that the scenario alone cannot tell: checks run when a run starts,
once the schedule's policy, the models and the pools are known. Each refuses input that would be
read past or that the policy cannot run, naming the key (RlsimError)."""
from __future__ import annotations

from typing import Any

from ...engine_software import ENGINE_SOFTWARE
from ...errors import RlsimError
from ...llm.kv_pool import kv_pages_matter, mixes_windows
from ...llm.sglang_pool import sglang_pool_knobs
from ...llm.training import trained_shapes
from ...params import TRAIN_SOFTWARE, engine_constants_read_past, train_constants_read_past
from ...scenario import Scenario, check_segments
from ..costs import Costs
from ..llm_costs import engine_copy_reasons
from ..pools import SERVED_FIELDS, SERVED_NAMES, Pool, served_devices
from . import registry
from .registry import SchedulePolicy


def check_before_pools(scenario: Scenario, policy: SchedulePolicy) -> None:
    """What the policy decides alone (before the pools are built)."""
    _check_partial_rollout(scenario, policy)
    _check_multi_turn(scenario, policy)
    _check_served(scenario)


def check_with_pools(scenario: Scenario, costs: Costs, pools: dict[str, Pool]) -> None:
    """What needs the pools, the layouts and the models."""
    _check_given_dp(scenario, costs, pools)
    _check_custom_all_reduce(scenario, costs, pools)
    _check_train_constants(scenario, costs)
    _check_engine_constants(scenario, costs)


def _check_served(scenario: Scenario) -> None:
    """A failure re-plans the rollout and training devices (failures.py, split_failures.py); a served
    model's pool beside them (a reward model, a distillation teacher) is not re-planned, so the two are
    refused together, not half modelled."""
    served = served_devices(scenario.workload)
    if served and scenario.schedule.failures:
        role = next(iter(served))
        raise RlsimError(f"schedule.failures are not modelled with a served {SERVED_NAMES[role]}'s pool (its devices "
                         "are not re-planned)", source=scenario.source, field="schedule.failures",
                         fix=f"remove schedule.failures, or {SERVED_FIELDS[role]}")


def _check_multi_turn(scenario: Scenario, policy: SchedulePolicy) -> None:
    """Multi-turn samples: a batch kind drives each engine through the turns (llm/multi_turn.py) and
    cannot cut a run and resume it; a request-fed kind's servers take whole trajectories and their
    cuts (llm/multi_turn_server.py) but run each on its own, so not in lock-step."""
    sched = scenario.schedule
    if scenario.workload.multi_turn is None:
        return
    able = ", ".join(k for k in registry.kinds() if registry.get(k).supports_multi_turn)
    if not policy.supports_multi_turn:
        why = f"kind {sched.kind} is not modelled for turns"
    elif policy.turns_on_servers:
        if not scenario.workload.multi_turn.lockstep:
            return
        why = (f"lockstep: kind {sched.kind} runs each trajectory's agent loop on its own (lock-step turns are "
               "NeMo RL's synchronous loop)")
    elif cuts := _generation_cuts(sched):   # the knobs in force, named (the six possible ones were listed)
        raise RlsimError(f"multi-turn rollouts: this run cuts generation mid-way and resumes it "
                         f"({'; '.join(what for _, what, _ in cuts)}), which is not modelled for turns",
                         source=scenario.source, field=cuts[0][0], related=["workload.multi_turn"],
                         fix=f"{' and '.join(undo for _, _, undo in cuts)}, or remove workload.multi_turn")
    else:
        return
    raise RlsimError(f"multi-turn rollouts: {why}", source=scenario.source, field="workload.multi_turn",
                     fix=f"remove workload.multi_turn, or run it on one of {able}")


def _generation_cuts(sched: Any) -> list[tuple[str, str, str]]:
    """(field, what, how to undo it) of each knob in force that cuts generation and resumes it: a
    partial rollout, the engines' copies (llm_costs.engine_copy_reasons), failures."""
    partial = [("schedule.partial_rollout", "partial_rollout", "set schedule.partial_rollout: false")]
    failures = [("schedule.failures", "failures", "remove schedule.failures")]
    return [*(partial if sched.partial_rollout else []), *engine_copy_reasons(sched),
            *(failures if sched.failures else [])]


def _check_partial_rollout(scenario: Scenario, policy: SchedulePolicy) -> None:
    sched = scenario.schedule
    if not sched.partial_rollout or not policy.partial_rollout_segments:
        return
    if not policy.supports_partial_rollout or sched.effective_staleness < 1:
        able = [k for k in registry.kinds() if registry.get(k).supports_partial_rollout]
        raise RlsimError("partial rollouts resume with newer weights, which needs staleness >= 1",
                         source=scenario.source, field="schedule.partial_rollout",
                         fix=f"set schedule.staleness: 1 on one of {', '.join(able)}")
    if not sched.length_budget:
        raise RlsimError("partial_rollout needs a per-segment length budget", source=scenario.source,
                         field="schedule.length_budget", fix="set schedule.length_budget, e.g. 4096")
    check_segments(scenario)
    longest = scenario.workload.response_length.get("max")
    if isinstance(longest, (int, float)) and sched.length_budget >= longest:   # one segment each: read past
        raise RlsimError(f"length_budget {sched.length_budget} is at or above the longest response ({longest:g} "
                         "tokens): no response is cut, so partial_rollout changes nothing", source=scenario.source,
                         field="schedule.length_budget",
                         fix=f"give a length_budget below {longest:g}, or drop schedule.partial_rollout")


def _check_given_dp(scenario: Scenario, costs: Costs, pools: dict[str, Pool]) -> None:
    """A workload.train_layout.dp the user gave must be the one the training pool holds (the pool
    sets dp: one given otherwise would be dropped without a word)."""
    given = getattr(costs, "given_train_dp", None)
    if given is None:
        return
    pool = pools.get("train") or pools["actor"]
    held = pool.count // costs.train_group_devices
    if held != given:
        raise RlsimError(f"dp={given} but the training pool of {pool.count} devices holds {held} replicas of "
                         f"tp x cp x pp = {costs.train_group_devices}", source=scenario.source,
                         field="workload.train_layout.dp",
                         fix=f"set dp: auto (or {held}), or size the pool (schedule.rollout_devices / "
                             "rollout_fraction, topology) to dp replicas")


def _given_custom_all_reduce(scenario: Scenario) -> list[str]:
    """The engine all-reduce keys the user gave: custom_all_reduce on where the named engine does not
    turn it on, custom_all_reduce_max_bytes away from its default. Off is never refused: it is what
    runs where the kernel cannot (the verl importer sets it for every vLLM rollout)."""
    w = scenario.workload
    engine_on = bool(w.engine) and ENGINE_SOFTWARE[w.engine].inference.get("custom_all_reduce") is True
    keys = ["custom_all_reduce"] if w.inference.custom_all_reduce and not engine_on else []
    return keys + w.inference.set_off_default(("custom_all_reduce_max_bytes",))


def _check_custom_all_reduce(scenario: Scenario, costs: Costs, pools: dict[str, Pool]) -> None:
    """workload.inference.custom_all_reduce given where no rollout instance's TP group can run the
    engine's kernel (tp 1, a size it does not take, a group across nodes) changes no prediction.
    Under rollout_layout: auto it applies: the planner weighs it when it picks the TP size."""
    runs = getattr(costs, "custom_all_reduce_runs", None)
    given = _given_custom_all_reduce(scenario)
    if runs is None or not given or scenario.workload.rollout_layout == "auto":
        return
    pool = pools.get("rollout") or pools["actor"]
    if runs(pool.ranks):
        return
    tp = costs.rollout_layout.tp
    spec = getattr(getattr(costs, "topology", None), "device_spec", None)
    kinds = {spec(r) for r in pool.ranks} if spec is not None else set()
    without = sorted(k.name for k in kinds if not k.peer_memory_all_reduce)
    why = ("an instance of tp 1 has no TP all-reduce" if tp == 1 else
           f"{', '.join(without)} has no CUDA peer memory (its engines reduce over their collective library)"
           if without else
           f"no TP group of {tp} devices of the rollout pool is one it takes (2, 4, 6 or 8 devices of one node)")
    raise RlsimError(f"{given[0]} applies to the engine's own TP all-reduce, and {why}", source=scenario.source,
                     field=f"workload.inference.{given[0]}",
                     fix=f"remove workload.inference.{given[0]}" + ("" if without else
                                                                     ", or give workload.rollout_layout.tp 2, 4, 6 "
                                                                     "or 8 within one node"))


def _check_train_constants(scenario: Scenario, costs: Costs) -> None:
    """Training constants given where no model's layers read them (params.train_constants_read_past:
    the flash ratio without flash or Mamba, a GELU FFN's traffic on SwiGLU models, the MoE shuffle
    without experts, ...): the layers are known once the models are loaded."""
    models = getattr(costs, "models", None)
    if models is None:
        return
    w = scenario.workload
    for field, message, fix in train_constants_read_past(w.train_params, TRAIN_SOFTWARE[w.train_software].params,
                                                         trained_shapes(models.values())):
        raise RlsimError(message, source=scenario.source, field=field, fix=fix)


def _check_engine_constants(scenario: Scenario, costs: Costs) -> None:
    """Engine constants the rollout's models or given layout leave nothing to act on
    (params.engine_constants_read_past)."""
    models = getattr(costs, "models", None)
    layout = getattr(costs, "rollout_layout", None)
    if models is None or layout is None:
        return
    auto, inference = scenario.workload.rollout_layout == "auto", scenario.workload.inference
    found = engine_constants_read_past(inference, mla=any(m.is_mla for m in models.values()),
                                       moe=any(m.is_moe for m in models.values()),
                                       paged=any(kv_pages_matter(m, inference.hybrid_kv_chunked_attention,
                                                                 inference.hybrid_kv_cache_manager)
                                                 for m in models.values()),
                                       chunked=any(m.chunked_attention for m in models.values()),
                                       mixed_windows=any(mixes_windows(m) for m in models.values()),
                                       engine_tp=None if auto else layout.tp, engine_ep=None if auto else layout.ep,
                                       engine_pp=1 if auto else layout.pp,
                                       pool_knobs=sglang_pool_knobs(models.values(), scenario.workload.inference))
    for field, why, fix in found:
        raise RlsimError(why, source=scenario.source, field=field, fix=fix)
