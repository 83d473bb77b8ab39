"""The cost facade answered by the real models: llm/ (rollout engine, training and forward
costs, memory) and hardware/ (device, links). Everything the schedules ask goes through here.

Switch costs are bytes moved over named links:
- to rollout: optimizer states + gradients of the training shard offloaded to host over the
  host link (``offload_optimizer``), the KV pool re-allocated (``kv_realloc_s``; with vLLM sleep
  mode, ``engine_sleep``, half of its measured ``sleep_wake_s`` instead; at sleep level 1 the engine's
  weight shard to host and back), plus a fixed framework
  ``overhead_s``; without ``bucketed`` parameters a redundant copy of the inference shard is staged
  through HBM (time and memory);
- to training: the KV pool released, optimizer states + gradients loaded back over the host link.
The weight reshard from the training to the inference layout is the weight sync of colocated
placements: each device receives its inference shard over its scale-up link.

Every call costs on the devices of the ranks it is given (``_Pool``): training and forward passes
on the layout's canonical placement mapped onto the pool's ranks, rollout instances on their own
devices with TP all-reduces and EP all-to-alls through the network model on the instance's ranks
(the planner's path: StepCost with a CollectiveModel), switches and memory on the pool's devices.
A pool of mixed device kinds is costed by its slowest device (training: llm/training.py
``slowest_device``; rollout: llm/inference.py ``instance_device``) and checked against its smallest
HBM. Caches belong to this object and are keyed by value: a pool by its group signature and device
kinds (equal keys: the same devices, paths and capacities), so the 96 instances of one shape build
one StepCost. Cluster-wide figures on a cluster of several kinds: ``peak_flops`` is the mean peak
per device (x devices = the cluster's peak, the MFU denominator), ``instance_kv_tokens`` and
``instance_max_seqs`` the smallest over the kinds an instance fits on (``instance_kv_tokens_of``
answers per pool); ``layout: auto``'s simple rule (pools.resolve_auto_layouts) sizes on the
smallest HBM of the cluster, since the pools are cut from those layouts.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from pydantic import ValidationError

from ..engine_software import model_forced, refuse_missing_architecture, resolved, with_request_cap
from ..errors import RefusedBeforeTiming, RlsimError, validation_error
from ..hardware.devices import DeviceSpec, distinct_devices
from ..llm.architecture import ModelSpec, load_model, with_value_head
from ..llm.inference import (
    InferenceParams,
    ResumableRun,
    RolloutEngine,
    RolloutLayout,
    StepCost,
    instance_device,
    run_all_into,
    summed_counts,
)
from ..llm.layer_costs import with_lora
from ..llm.memory import SMALLER_MICRO_BATCH, MemoryBreakdown, forward_batch_field, memory_per_device
from ..llm.multi_turn import EngineShare, TurnLaw, plan_turns, run_turns_in_lockstep
from ..llm.multi_turn_server import MultiTurnServer, TurnRegistry, run_turns
from ..llm.served import ServedCost, ServedScoring
from ..llm.train_layout import TrainLayout
from ..llm.training import (
    TrainParams,
    device_resident,
    forward_cost,
    offload_Bps,
    offload_time_s,
    replica_micro_batches,
    train_step_cost,
    train_step_memory,
)
from ..network.collectives import CollectiveModel
from ..params import SPECULATIVE_KEYS, TRAIN_SOFTWARE
from ..scenario import Scenario
from ..units import capacity_text
from .algorithms import FORWARD, TRAIN, build_algorithm
from .costs import RolloutOutcome, StageCost, SwitchCost
from .packing import heaviest_micro_batch, micro_batch_permutation, pack_width, replica_contiguous_ranks
from .pools import SERVED_FIELDS, SERVED_NAMES, resolve_auto_layouts, role_pool

# Engine state copies kept per rollout run (every N events): a speed knob only, results do not
# depend on it (tests/llm/test_inference.py checks restored interrupts against fresh engines).
ENGINE_CHECKPOINT_EVERY_EVENTS = 32


def engine_stays_resident(scenario: Any) -> bool:
    """Whether a colocated engine keeps its memory through training (schedule.switch.engine_resident)."""
    return bool(scenario.schedule.switch.engine_resident) and scenario.schedule.effective_placement == "colocated"


def host_resident_params(params: TrainParams, bytes_per_param: float) -> TrainParams:
    """The trainer constants of a forward-only model whose sharded weights live on the host (FSDP's
    CPU offload, offload.fsdp_cpu_offload: each forward copies every layer's shard in), at
    ``bytes_per_param`` on the host."""
    update = {"fsdp_cpu_offload": True, "params": False, "grads": False, "optimizer": False,
              "host_param_bytes_per_param": bytes_per_param}
    return params.model_copy(update={"offload": params.offload.model_copy(update=update)})


def frozen_weights_params(params: TrainParams) -> TrainParams:
    """The trainer constants of a frozen model (the reference, a reward model): the trainer's, with
    its resident weights at weight_bytes_per_param (memory.resident_weight_bytes_per_param is the
    trainer's own master shard; a frozen model keeps no optimizer and no master copy)."""
    if params.memory.resident_weight_bytes_per_param is None:
        return params
    memory = params.memory.model_copy(update={"resident_weight_bytes_per_param": None})
    return params.model_copy(update={"memory": memory})


def critic_train_params(params: TrainParams, offload: Any, optimizer: Any = None) -> TrainParams:
    """The trainer constants PPO's critic runs with: the actor's, with its own per-phase offload
    where workload.critic_offload gives one (its parameters and optimizer state; its gradients are
    freed after each update, as the actor's: verl's zero_grad(set_to_none) at update_critic's end),
    and its own optimizer's state and step traffic where workload.critic_optimizer gives them."""
    if offload is not None:
        own = params.offload.model_copy(update={"params": offload.params, "optimizer": offload.optimizer,
                                                "grads": False, "fsdp_cpu_offload": False, "scope": "update",
                                                "optimizer_fraction": 1.0})
        params = params.model_copy(update={"offload": own})
    if optimizer is None:
        return params
    if optimizer.optimizer_bytes_per_param is not None:
        memory = params.memory.model_copy(update={"optimizer_bytes_per_param": optimizer.optimizer_bytes_per_param})
        params = params.model_copy(update={"memory": memory})
    if optimizer.optimizer_traffic_bytes_per_param is not None:
        comm = params.comm.model_copy(
            update={"optimizer_traffic_bytes_per_param": optimizer.optimizer_traffic_bytes_per_param})
        params = params.model_copy(update={"comm": comm})
    return params


def _head_tokens(params: TrainParams, scored: Any) -> Any:
    """The tokens a pass's output layer projects per sample: the responses (``scored``) where its
    constants say the head scores them alone (compute.head_response_only), else None (every token)."""
    return scored if params.compute.head_response_only else None


# A training step's critical-path parts (TrainStepCost.critical_stages) paid once per optimizer step
# whatever the batch's work: LlmCosts._reused keeps them as priced, and scales the stages' and p2p's
FIXED_PATH_PARTS = frozenset({"dp_sync", "optimizer", "offload"})

# The actor's passes by cost kind (LlmCosts._reused): the forward is the old log-prob pass
ENTROPY_PASSES = {"fwd": "old_logprob", "train": "update"}


def entropy_params(params: TrainParams, spec: Any) -> dict[str, TrainParams]:
    """The actor's trainer constants for its old log-prob pass ("fwd") and its update ("train") where
    workload.entropy (``spec``; None: none) has them compute the entropy over the vocabulary: its
    traffic, and what it holds beside the logits (EntropySpec.memory_bytes_per_logit: autograd's
    saved tensors in an update whose loss takes it)."""
    out: dict[str, TrainParams] = {}
    for kind, pass_name in ENTROPY_PASSES.items():
        forward, backward = spec.bytes_per_logit(pass_name) if spec is not None else (0.0, 0.0)
        if forward or backward:
            compute = params.compute.model_copy(update={"entropy_traffic_bytes_per_logit": forward,
                                                        "entropy_backward_traffic_bytes_per_logit": backward})
            memory = params.memory.model_copy(update={"entropy_logits_bytes_per_elem":
                                                      spec.memory_bytes_per_logit(pass_name)})
            out[kind] = params.model_copy(update={"compute": compute, "memory": memory})
    return out


def training_params_beside_engine(scenario: Any, share: float) -> TrainParams:
    """The workload's trainer constants, with the usable HBM less the engine's ``share`` (its
    gpu_memory_utilization) when a colocated engine stays resident through training
    (schedule.switch.engine_resident: verl free_cache_engine false): its weights and KV pool hold
    that share of HBM beside the training state."""
    params = scenario.workload.train_params
    if not engine_stays_resident(scenario):
        return params
    usable = params.memory.hbm_usable_fraction - share
    if usable <= 0:
        raise RlsimError(f"the resident engine takes {share:g} of HBM and training may use "
                         f"{params.memory.hbm_usable_fraction:g}: nothing is left to train beside it",
                         source=scenario.source, field="schedule.switch.engine_resident",
                         fix="lower workload.rollout_layout.gpu_memory_utilization, or let the engine give its memory "
                             "back between phases (engine_resident: false)")
    return params.model_copy(update={"memory": params.memory.model_copy(update={"hbm_usable_fraction": usable})})


class HeavierBatchThanPlanned(RlsimError):
    """The training layout that `layout: auto` planned ran out of memory on a batch the run trained:
    heavier than the drawn batches the planner judged. ``batch``: that batch's sequence lengths."""

    def __init__(self, exc: RlsimError, batch: np.ndarray, layout: dict[str, Any] | None = None) -> None:
        super().__init__(exc.message + "; layout: auto planned memory on drawn batches of independent lengths, and "
                         "this step trained a heavier one", source=exc.source, field=exc.field,
                         fix="narrow the plan (--set planner.space.recompute=[full], or planner.space.micro_batch) "
                             "or give workload.train_layout")
        self.fields = list(exc.fields)
        self.memory_message = exc.message
        self.batch = batch
        self.layout = layout   # the training layout the batch did not fit (dp left out); None: not said
        self.text = super().__str__()
        self.args = (exc, batch, layout)   # SimPy hands a process's failure on as type(exc)(*exc.args)

    def __str__(self) -> str:
        return self.text


class _Pool:
    """A set of ranks as the cost models see it. ``key`` is equal for pools that see the same
    devices, paths and link capacities (the topology's group signature and the device kinds), so
    costs are cached on it; ``placed`` keeps the training placements mapped onto these ranks."""

    def __init__(self, topology: Any, ranks: Sequence[int], interned: dict[tuple, int]) -> None:
        # a range (every pool the schedules cut) is passed on as one: its signature and device kinds
        # are answered without a per-rank pass
        given = ranks if ranks.__class__ is range else None
        self.ranks: tuple[int, ...] = tuple(given) if given is not None else tuple(int(r) for r in ranks)
        self.kinds: list[DeviceSpec] = distinct_devices(topology, given if given is not None else self.ranks)
        # one device has no links in the cost: its kind is the key (96 one-device instances, one key)
        value = (("device",) if len(self.ranks) == 1 else topology.group_signature(
            given if given is not None else self.ranks), tuple(self.kinds))
        # the value is interned to a small int (the owner's table): a signature of thousands of ranks
        # is hashed once, not on every cache lookup
        self.key: int = interned.setdefault(value, len(interned))
        self.hbm_bytes: float = min(k.hbm_bytes for k in self.kinds)
        self.placed: dict[int, list[int]] = {}
        self.host_rates: list[tuple[DeviceSpec, float]] | None = None   # LlmCosts._host_rates


def training_state_bytes(model: Any, lay: TrainLayout, hbm_bytes: float, params: TrainParams) -> MemoryBreakdown:
    """The training layout's weights, gradients and optimizer state per device (a token each: the
    states, not the activations), at the workload's bytes per parameter."""
    return memory_per_device(model, lay, 1.0, hbm_bytes, params=params.memory,
                             flash_attention=params.compute.flash_attention)


def resident_training_bytes(model: Any, lay: TrainLayout, switch: Any, hbm_bytes: float,
                            inference_shard_bytes: float, params: TrainParams) -> float:
    """What training leaves on a device through the rollout phase of a colocated placement: its
    weights unless `schedule.switch.offload_weights` (or the per-phase `train_params.offload.params`),
    the optimizer state unless `schedule.switch.offload_optimizer` (or its per-phase offload), the
    gradient buffer where the stack keeps it (kept_gradient_bytes) unless the switch moves or frees
    it (offload_optimizer, free_gradients), ZeRO-Offload's device gradient buffer (offload_staging_bytes: no
    switch frees it), and a second copy of the inference shard unless the switch is `bucketed`.
    Bytes per parameter from the workload's `train_params.memory` (the stack's, with the user's overrides)."""
    mem = training_state_bytes(model, lay, hbm_bytes, params)
    offload = params.offload   # the per-phase offload leaves on the host what it moved there after training
    resident = 0.0 if (switch.offload_weights or offload.params) else mem.weights_bytes
    resident += mem.offload_staging_bytes
    if not switch.offload_optimizer:   # the per-phase offload moves its share (offload.optimizer_fraction)
        resident += mem.optimizer_bytes * ((1.0 - offload.optimizer_fraction) if offload.optimizer else 1.0)
    if not (switch.offload_optimizer or switch.free_gradients):
        resident += kept_gradient_bytes(mem, params)
    if not switch.bucketed:
        resident += inference_shard_bytes
    return resident


def kept_state_bytes(model: Any, lay: TrainLayout, hbm_bytes: float, params: TrainParams) -> float:
    """A trained model's weights, optimizer state and kept gradient buffer on each device between its
    own passes, less its per-phase offload (_kept): what PPO's critic holds beside the actor's update,
    and the actor beside the critic's."""
    return _kept(device_resident(training_state_bytes(model, lay, hbm_bytes, params), params), params)


def kept_gradient_bytes(memory: MemoryBreakdown, params: TrainParams) -> float:
    """The gradient buffer a trained model keeps on each device between its steps: the whole of
    ``memory``'s gradients where the stack keeps the buffer allocated (memory.grad_buffer_persists:
    Megatron-Core's DDP) unless the per-phase offload moves it (offload.grads) or frees it with the
    weights (offload.params: verl's offload_megatron_model_to_cpu resizes grad_data to 0 with
    param_data); 0 where the update frees it (FSDP, DeepSpeed: zero_grad). Of it,
    memory.kept_grad_bytes_per_param of the grad_bytes_per_param where given (DeepSpeed's
    BF16_Optimizer keeps its fp32 buffer and frees the bf16 param.grad). With them, whatever the stack, the
    reduction buckets kept between steps (memory.kept_buffers_bytes: DeepSpeed ZeRO-3's IPG bucket) unless
    that offload moves the gradients."""
    if params.offload.grads or params.offload.params:
        return 0.0
    m = params.memory
    if not m.grad_buffer_persists:
        grads = 0.0
    elif m.kept_grad_bytes_per_param is None or m.grad_bytes_per_param == 0:
        grads = memory.gradients_bytes
    else:
        grads = memory.gradients_bytes * m.kept_grad_bytes_per_param / m.grad_bytes_per_param
    return grads + memory.kept_buffers_bytes


def gradient_buffer_kept(params: TrainParams) -> bool:
    """Whether the stack keeps the gradient buffer between steps and no per-phase offload moves or
    frees it (kept_gradient_bytes)."""
    return params.memory.grad_buffer_persists and not (params.offload.grads or params.offload.params)


def critic_layout(lay: TrainLayout, batching: Any, source: str | None) -> TrainLayout:
    """The actor's layout with PPO's critic micro-batching (workload.critic_batching) over it, in the
    actor's mode: a token budget where the actor's micro-batches take one, a sample count where not."""
    if batching is None:
        return lay
    budget = lay.max_tokens_per_micro_batch is not None
    forward_budget = budget or lay.logprob_max_tokens_per_micro_batch is not None
    for given, wants_budget, actor in (("micro_batch", False, budget), ("max_tokens_per_micro_batch", True, budget),
                                       ("forward_micro_batch", False, forward_budget),
                                       ("forward_max_tokens_per_micro_batch", True, forward_budget)):
        if getattr(batching, given) is not None and wants_budget != actor:
            mode = "a token budget" if actor else "sample counts"
            raise RlsimError(f"critic_batching.{given} beside the actor's micro-batches of {mode}: the critic batches "
                             "in the actor's mode", source=source, field=f"workload.critic_batching.{given}",
                             fix="give the critic's micro-batching in the actor's mode (micro_batch / forward_micro_batch "
                                 "with sample counts, max_tokens_per_micro_batch / forward_max_tokens_per_micro_batch "
                                 "with a token budget)")
    update = {key: value for key, value in (("micro_batch", batching.micro_batch),
                                            ("max_tokens_per_micro_batch", batching.max_tokens_per_micro_batch),
                                            ("logprob_max_tokens_per_micro_batch",
                                             batching.forward_max_tokens_per_micro_batch)) if value is not None}
    return dataclasses.replace(lay, **update) if update else lay


def critic_beside_actor(scenario: Any) -> bool:
    """Whether a PPO critic's state and passes share the actor's devices (its role_pool is main; not
    under fuse: actor or a split pool's aux_devices, where it trains on a pool of its own)."""
    return scenario.workload.algorithm == "ppo" and role_pool(scenario.schedule, "critic") == "main"


def aux_pool_passes(scenario: Any) -> list[tuple[str, str]]:
    """(kind, role) of each pass a step runs on an aux pool (rl/pools.role_pool not main: fuse: actor's
    pool, schedule.aux_devices), in the step's order (rl/algorithms.build_algorithm): FORWARD for the
    reference, a reward model's score and PPO's values, TRAIN for PPO's critic update."""
    stages = build_algorithm(scenario.workload).stages
    return [(stage.kind, stage.role) for stage in stages if stage.kind in (FORWARD, TRAIN) and stage.role != "actor"
            and role_pool(scenario.schedule, stage.role) != "main"]


def refuse_tied_pipeline(software: str, model: ModelSpec, layout: Mapping[str, Any], source: str | None,
                         models: Mapping[str, ModelSpec] | None = None, critic_model: str | None = None) -> None:
    """RlsimError where the training stack refuses the layout's pipeline stages for a model whose output
    layer ties its input embedding (params.TrainSoftware.refused_tied_pipeline: AReaL's archon engine);
    the planner does not search them there (search_limits with the model). ``models`` (role_models) and
    ``critic_model`` (PPO's workload.critic_model, when given): the critic, trained under the same layout
    (AReaL's ArchonPPOCritic runs the same prepare_training_config check)."""
    stack = TRAIN_SOFTWARE[software]
    refused = stack.refused_tied_pipeline(layout, model)
    if refused:
        raise RlsimError(f"train_layout.{refused}", source=source, field="workload.train_layout.pp",
                         fix=stack.tied_pipeline_fix())
    refused = stack.refused_tied_pipeline(layout, models["critic"]) if models and critic_model else None
    if refused:
        raise RlsimError(f"train_layout.{refused} (the critic, workload.critic_model, trains under the actor's "
                         "layout)", source=source, field="workload.train_layout.pp",
                         fix=f"{stack.tied_pipeline_fix()}; or a workload.critic_model without tied embeddings")


def refuse_stack_layout(workload: Any, model: ModelSpec, layout: Mapping[str, Any], source: str | None,
                        models: Mapping[str, ModelSpec]) -> None:
    """RlsimError where the training stack refuses the training layout (given or planned) for this workload:
    its pipeline stages for a tied model (refuse_tied_pipeline), or beside the allgather token dispatcher and
    variable-length sends (params.TrainSoftware.check_dispatcher: Megatron-Core 0.10+)."""
    refuse_tied_pipeline(workload.train_software, model, layout, source, models, workload.critic_model)
    TRAIN_SOFTWARE[workload.train_software].check_dispatcher(layout, workload.train_params.comm, source)


def pipeline_rule_model(scenario: Any, actor: ModelSpec) -> ModelSpec:
    """The model whose pipeline rule binds the training layout, for the planner's search (TrainSoftware
    .search_limits): ``actor`` (the model planned), or PPO's workload.critic_model where the training stack
    refuses pipeline stages for it and not for the actor (refused_tied_pipeline: a critic with tied
    embeddings on areal-archon). The critic trains under the actor's layout on whichever pool it runs
    (LlmCosts.layout_for), and the run refuses its pipeline there (refuse_tied_pipeline): a plan with
    pp > 1 would be refused."""
    w = scenario.workload
    stack = TRAIN_SOFTWARE[w.train_software]
    if not w.critic_model or stack.refuses_pipelines_for(actor):
        return actor
    critic = with_value_head(load_model(w.critic_model, field="workload.critic_model", source=scenario.source))
    return critic if stack.refuses_pipelines_for(critic) else actor


def role_models(scenario: Any, base: ModelSpec | None = None) -> dict[str, ModelSpec]:
    """The model each role runs: the actor as it trains (LoRA adapters beside the frozen base), the
    reference the base, the critic and a reward model under a value head (hidden x 1, not the vocab LM
    head); the critic and reward model default to the actor's architecture. ``base``: the actor's
    architecture in place of workload.model (`rlsim plan --model` over a scenario's step)."""
    w, src = scenario.workload, scenario.source
    base = base or load_model(w.model, field="workload.model", source=src)
    reward = load_model(w.reward.model, field="workload.reward.model", source=src) if w.reward.model else base
    critic = load_model(w.critic_model, field="workload.critic_model", source=src) if w.critic_model else base
    return {"actor": with_lora(base, w.lora, src), "reference": base, "reward": with_value_head(reward),
            "critic": with_value_head(critic)}


def frozen_model_params(params: TrainParams, workload: Any) -> dict[str, TrainParams]:
    """The trainer constants of the reference and a reward model: the actor's, or with their shards on
    the host (workload.reference_cpu_offload, reward.cpu_offload: host_resident_params); their weights
    at weight_bytes_per_param (frozen_weights_params)."""
    params = frozen_weights_params(params)
    reference = (host_resident_params(params, workload.reference_cpu_offload_bytes_per_param)
                 if workload.reference_cpu_offload else params)
    reward = (host_resident_params(params, workload.reward.cpu_offload_bytes_per_param)
              if workload.reward.cpu_offload else params)
    return {"reference": reference, "reward": reward}


# How messages name each frozen model whose weights stay on its devices.
FROZEN_NAMES = {"reference": "reference", "reward": "reward model"}


def resident_frozen_roles(scenario: Any) -> tuple[str, ...]:
    """The frozen models whose weight shards stay on the devices they run on, through generation and
    training: the reference (verl's reference worker, Megatron's too, holds its own copy on the
    trainer's GPUs) unless its weights live on the host (workload.reference_cpu_offload: verl's FSDP
    CPUOffload; schedule.reference_swap_copies: NeMo RL's state-dict swap) or it is a LoRA actor's
    frozen base (the adapters disabled: no second copy); a reward model of kind model unless on the
    host (reward.cpu_offload) or served (its engines on devices of their own, or asleep on the
    trainer's with their weights on the host: _woken_reward_model)."""
    w = scenario.workload
    roles = []
    if w.reference and not (w.reference_cpu_offload or scenario.schedule.reference_swap_copies or w.lora is not None):
        roles.append("reference")
    if w.reward.kind == "model" and not (w.reward.cpu_offload or w.reward.served is not None):
        roles.append("reward")
    return tuple(roles)


def frozen_roles_beside(scenario: Any, role: str) -> list[str]:
    """The resident frozen models (resident_frozen_roles) on the pool whose passes ``role`` runs
    (rl/pools.role_pool: the actor's are the trainer's devices, and the engine's when colocated)."""
    where = role_pool(scenario.schedule, role)
    return [frozen for frozen in resident_frozen_roles(scenario) if role_pool(scenario.schedule, frozen) == where]


def frozen_weight_bytes(scenario: Any, models: Mapping[str, ModelSpec], role: str, lay: TrainLayout,
                        hbm_bytes: float, params: TrainParams) -> dict[str, float]:
    """{frozen role: its weight shard per device} of the frozen models beside ``role``'s passes
    (frozen_roles_beside), each sharded as it runs: in the training layout ``lay`` (verl's reference
    and reward workers and Megatron's reference take the actor's parallelism: TP x PP, with ZeRO-3 /
    FSDP the DP shards too), at the trainer's bytes per weight (train_params.memory.
    weight_bytes_per_param: bf16 copies; no gradients or optimizer state), on the largest stage."""
    params = frozen_weights_params(params)
    return {frozen: training_state_bytes(models[frozen], lay, hbm_bytes, params).weights_bytes
            for frozen in frozen_roles_beside(scenario, role)}


def frozen_text(roles: Iterable[str]) -> str:
    """The frozen models' weights as messages name them ("the reference's weights"); "" for none."""
    names = [FROZEN_NAMES[role] for role in roles]
    return f"the {' and '.join(names)}'s weights" if names else ""


def _held_beside(whose: str, trained: float, frozen: Mapping[str, float]) -> list[str]:
    """What a memory error says sits beside a pass: the trained models' kept state (``whose``) and the
    frozen models' resident weights, each where there is some."""
    return [f"{text} {nbytes / 1e9:.1f} GB" for text, nbytes in (
        (f"{whose} resident weights, optimizer state and kept gradients", trained),
        (frozen_text(frozen), sum(frozen.values()))) if nbytes > 0.0]


def _kept(memory: MemoryBreakdown, params: TrainParams) -> float:
    """Weights, optimizer state and kept gradient buffer (kept_gradient_bytes) a per-phase offload
    leaves on the device between its passes (``memory`` as device_resident gives it: Megatron's
    host-resident optimizer share already out), and ZeRO-Offload's device gradient buffer
    (offload_staging_bytes: allocated at init, never freed)."""
    offload = params.offload
    kept = (0.0 if offload.params else memory.weights_bytes) + memory.offload_staging_bytes
    moved = offload.optimizer and offload.scope == "update"
    return (kept + memory.optimizer_bytes * ((1.0 - offload.optimizer_fraction) if moved else 1.0)
            + kept_gradient_bytes(memory, params))


def keeps_engine_copies(sched: Any) -> bool:
    """Whether a run's engines keep copies of their state (ResumableRun): rounds cut mid-generation
    (StaleSync tail consolidation, over-provisioning), kinds that cut generation at a weight update
    (NeMo in-flight updates) and an async engine that takes sequences mid-run
    (NeMo RL's async_engine: Generation.admit)."""
    return bool(engine_copy_reasons(sched))


def engine_copy_reasons(sched: Any) -> list[tuple[str, str, str]]:
    """(field, what, how to undo it) of each knob in force that makes keeps_engine_copies true."""
    reasons = []
    if sched.overprovision > 0:
        reasons.append(("schedule.overprovision", f"overprovision {sched.overprovision:g}",
                        "set schedule.overprovision: 0"))
    if getattr(sched, "cuts_generation", False):
        reasons.append(("schedule.in_flight_weight_updates", "in-flight weight updates",
                        "set schedule.in_flight_weight_updates: false"))
    if getattr(sched, "async_engine", False):
        reasons.append(("schedule.async_engine", "async_engine", "set schedule.async_engine: false"))
    if sched.effective_placement == "colocated" and sched.effective_staleness >= 1 and sched.effective_threshold < 1:
        reasons.append(("schedule.stream_threshold", f"a StaleSync tail cut: stream_threshold "
                        f"{sched.effective_threshold:g} at staleness {sched.effective_staleness:g}",
                        "set schedule.stream_threshold: 1 (no tail cut)"))
    return reasons


def turn_law_of(spec: Any) -> TurnLaw | None:
    """workload.multi_turn as the engine layer's TurnLaw (None: one turn a sample)."""
    if spec is None:
        return None
    return TurnLaw(spec.max_turns, spec.mean_turns, spec.observation_tokens, spec.observation_sigma,
                   spec.tool_latency_s, spec.tool_latency_sigma, spec.lockstep, spec.max_turn_tokens,
                   spec.cache_eviction)


def _without_speculation(params: InferenceParams, given: Mapping[str, Any], prefix: str) -> InferenceParams:
    """A served model's engine constants from the rollout engine's, without its speculative decoding:
    a served model prefills each sample and decodes nothing, so the keys are refused in its own
    ``inference`` and not inherited."""
    for key in given:
        if key in SPECULATIVE_KEYS:
            raise RlsimError("a served model prefills each sample and decodes no token: speculative decoding does not "
                             "apply to it", field=f"{prefix}.inference.{key}", fix=f"remove {prefix}.inference.{key}")
    if params.speculative_method is None:
        return params
    return params.model_copy(update={key: InferenceParams.model_fields[key].default for key in SPECULATIVE_KEYS})


def _bytes_per_weight(layout: RolloutLayout) -> float:
    """An engine's bytes per weight: one in int8 / fp8, else two."""
    return {"int8": 1.0, "fp8": 1.0}.get(layout.weight_dtype, 2.0)


class _Served(NamedTuple):
    """A served model as LlmCosts prices it (_resolve_served)."""
    model: ModelSpec
    layout: RolloutLayout
    params: InferenceParams
    bytes_per_logit: float     # its log-probability pass (0: none, a reward model's score head)
    prefix: str                # its scenario section, for errors


class LlmCosts:
    # an aux pool's ranks and the latest step batch its forward passes ran (failure runs only: a re-plan
    # judges a candidate's aux passes on them, accept_train_layout), and the private costs that judge a
    # candidate layout without touching this run's (candidate_costs: built once, when first asked)
    _aux_step: tuple[tuple[int, ...], np.ndarray] | None
    _candidate_costs: LlmCosts | None
    # a failure re-plan's demanding batches (_demanding_batches), and their micro-batching that its
    # candidates share per (batch, rows, dp): by the batch's id, the batch kept beside it (its identity
    # checked), emptied when they are re-picked (_demanding_micro_batched)
    _demanding: list[np.ndarray]
    _demanding_orders: dict[tuple[int, int, int], tuple[np.ndarray, int, np.ndarray]]

    def __init__(self, scenario: Scenario, topology: Any, auto_layouts: dict[str, dict[str, Any]] | None = None,
                 base: ModelSpec | None = None):
        """``auto_layouts``: the planner's {'train': ..., 'rollout': ...} for sides left ``auto``, else
        pools.resolve_auto_layouts's rule; ``base``: the actor in place of workload.model (role_models)."""
        w, src = scenario.workload, scenario.source
        self.scenario, self.topology, self.source = scenario, topology, src
        self.models = role_models(scenario, base)
        self.model: ModelSpec = self.models["actor"]
        refuse_missing_architecture(w.engine, self.model, src)   # an engine without its state layers' model
        self.device = topology.device_spec(0)   # rank 0's device (kept for callers; costs use the pools')
        self.n_devices = topology.num_devices
        self.collectives = CollectiveModel(topology)   # owns the collective and training-step caches
        self.cluster_devices = distinct_devices(topology, range(self.n_devices))
        # the pools are cut from the layouts: the simple auto rule sizes on the smallest HBM
        smallest_hbm = min(k.hbm_bytes for k in self.cluster_devices)
        train_map, roll_map = resolve_auto_layouts(
            weight_bytes=self.model.weight_bytes(), params_total=float(self.model.params_total),
            is_moe=bool(self.model.is_moe), num_experts=int(self.model.num_experts or 0),
            hbm_bytes=smallest_hbm,
            devices_per_domain=len(topology.ranks_of_domain(0)),
            n_devices=self.n_devices, train_layout=w.train_layout, rollout_layout=w.rollout_layout)
        if auto_layouts:
            if w.train_layout == "auto" and auto_layouts.get("train"):
                train_map = dict(auto_layouts["train"])
            if w.rollout_layout == "auto" and auto_layouts.get("rollout"):
                roll_map = dict(auto_layouts["rollout"])
        inference, roll_map = self._engine_constants(roll_map)
        self.train_layout_map = {k: v for k, v in train_map.items() if k != "dp"}
        self.train_template = TrainLayout.from_mapping({**self.train_layout_map}, source=src)
        refuse_stack_layout(w, self.model, self.train_layout_map, src, self.models)
        # a dp the user gave (validated here): the pool sets dp, which run_schedule checks against it
        given = w.train_layout if isinstance(w.train_layout, dict) else {}
        self.given_train_dp = TrainLayout.from_mapping({"dp": given["dp"]}, source=src).dp if "dp" in given else None
        self.rollout_layout = RolloutLayout.from_mapping({**roll_map, "instances": 1}, source=src,
                                                         field_name="workload.rollout_layout")
        self.inference_params: InferenceParams = inference
        self.train_params: TrainParams = training_params_beside_engine(scenario, self.rollout_layout.gpu_memory_utilization)
        self.critic_params: TrainParams = critic_train_params(self.train_params, w.critic_offload, w.critic_optimizer)
        self.frozen_params = frozen_model_params(self.train_params, w)
        self.entropy_params = entropy_params(self.train_params, w.entropy)   # by cost kind: fwd, train
        self.instance_devices = self.rollout_layout.devices_per_instance
        self.instance_max_seqs = self.rollout_layout.max_num_seqs * self.rollout_layout.ep
        self._pools: dict[Any, _Pool] = {}                 # by the ranks as given (a range hashes in O(1))
        self._pool_keys: dict[tuple, int] = {}             # (signature, device kinds) -> pool key
        self._step_costs: dict[int, StepCost] = {}         # by pool key: one per instance shape
        self._ring_bw: dict[tuple[int, ...], float] = {}   # ring ranks -> narrowest link (topology fixed)
        self._kv_tokens: dict[DeviceSpec, StepCost] = {}   # by device kind
        self._set_instance_kv()
        self.train_group_devices = self.train_template.model_parallel
        self.train_pool_unit = self.train_template.pool_unit   # replicas that fold the experts
        self.peak_flops = self._mean_peak_flops(w.dtype)
        self.switch_params = scenario.schedule.switch
        self.sync_eff = scenario.schedule.weight_sync_efficiency
        self.reuse = scenario.schedule.reuse_stage_costs
        sched = scenario.schedule
        self._interrupts = keeps_engine_copies(sched)
        self.turn_law = turn_law_of(w.multi_turn)
        self.seed = scenario.seed
        # the run's multi-turn trajectories on its request-fed servers (rollout_server)
        self._trajectories = None if self.turn_law is None else TurnRegistry(self.turn_law, self.seed)
        self.balanced = sched.micro_batching == "balanced" and sched.distqueue.packed
        self.pack_tokens = pack_width(sched.pack_tokens, w.prompt_length, w.response_length)
        self._ref: dict[tuple, tuple[float, StageCost]] = {}
        # params_of's copies at a resolved row width, by (id of the params, width), with those params
        self._row_width_params: dict[tuple[int, int], tuple[TrainParams, TrainParams]] = {}
        self._served_pools: dict[tuple, ServedScoring] = {}   # _served_on: by the role and the pool's ranks
        self._served = self._resolve_served()                 # by role: only those the workload serves
        self._flops_lines: dict[Any, tuple[float, float]] = {}   # model -> train FLOPs per token at 0, slope
        self._layouts: dict[int, TrainLayout] = {}
        self._memory: dict[tuple[int, float], MemoryBreakdown] = {}   # _resident_memory, this run's layouts
        self._reference_shard: dict[tuple[int, float], float] = {}   # reference_swap_shard_bytes
        self._ranks: dict[int, list[int]] = {}             # canonical placement: positions in a pool
        # every trained actor batch with its heaviest micro-batch's tokens as trained (under the layout
        # of then: a later one cannot resolve an earlier pool's size), for a re-plan; failure runs only
        self._trained: list[tuple[float, np.ndarray]] = []
        self._demanding, self._demanding_orders = [], {}   # (class attributes)
        self._demanding_for = 0            # len(_trained) when _demanding was picked
        self._last_train_ranks: tuple[int, ...] | None = None   # the pool it trained on
        self._auto_layouts, self._aux_step, self._candidate_costs = auto_layouts, None, None   # (class attributes)

    def _engine_constants(self, roll_map: dict[str, Any]) -> tuple[InferenceParams, dict[str, Any]]:
        """A named engine's values for what the workload leaves unset, on the cluster's devices and at
        the layout's TP size and running cap (vLLM picks some defaults by the GPU and its CUDA-graph
        cap by max_num_seqs; SGLang by the GPU, from 0.5.6 by the TP size too), then what it forces
        for the actor's architecture (model_forced: said in the run's notes, ``engine_notes``). The
        values before that stay as ``_engine_params``, a served model's start."""
        w = self.scenario.workload
        inference, roll_map = resolved(w.engine, w.inference, roll_map, self.cluster_devices)
        self._engine_params = with_request_cap(inference, w.response_length)
        inference, self.engine_notes = model_forced(w.engine, self._engine_params, self.model)
        return inference, roll_map

    # ---- pools -----------------------------------------------------------------------------------
    def pool(self, ranks: Sequence[int]) -> _Pool:
        """The ranks as the cost models see them (devices, signature), built once per rank set."""
        key = ranks if isinstance(ranks, range) else tuple(ranks)
        hit = self._pools.get(key)
        if hit is None:
            hit = self._pools[key] = _Pool(self.topology, ranks, self._pool_keys)
        return hit

    def _placed(self, pool: _Pool, n_devices: int) -> list[int]:
        """The layout's canonical placement (replica_contiguous_ranks) on the pool's own ranks."""
        hit = pool.placed.get(n_devices)
        if hit is None:
            self.layout(n_devices)
            hit = pool.placed[n_devices] = [pool.ranks[i] for i in self._ranks[n_devices]]
        return hit

    def _mean_peak_flops(self, dtype: str) -> float:
        """Peak per device in the workload's dtype; of several kinds, the mean over the cluster's
        devices (x devices = the cluster's peak, the MFU denominator)."""
        if len(self.cluster_devices) == 1:
            return self.cluster_devices[0].peak(dtype, field="workload.dtype")
        spec = self.topology.device_spec
        return math.fsum(spec(r).peak(dtype, field="workload.dtype")
                         for r in range(self.n_devices)) / self.n_devices

    def _set_instance_kv(self) -> None:
        """The KV tokens one instance holds (bounds how few instances a consolidated tail fits on), what
        a running sequence draws beside its tokens (its windows' and states' pages, llm/kv_pool.py), and
        the running sequences its pool bounds (a model that draws nothing per token)."""
        smallest = self._cluster_kv_cost()
        self.instance_kv_tokens = float(smallest.kv_capacity_tokens)
        self.instance_seq_kv_tokens = float(smallest.seq_kv_tokens)
        self.instance_max_seqs = min(self.instance_max_seqs, smallest.max_running)

    def _kv_cost_on(self, device: DeviceSpec) -> StepCost:
        """One instance's step cost on ``device``, for its KV cache (RlsimError when the model does not fit)."""
        hit = self._kv_tokens.get(device)
        if hit is None:
            hit = self._kv_tokens[device] = StepCost(self.model, device, self.rollout_layout, self.inference_params,
                                                     layout_field="workload.rollout_layout")
        return hit

    def _cluster_kv_cost(self) -> StepCost:
        """The step cost of the smallest instance KV capacity over the device kinds an instance fits on
        (a tail consolidated onto that many instances fits on any of them); the first kind's error when
        it fits on none."""
        fits, first_error = [], None
        for device in self.cluster_devices:
            try:
                fits.append(self._kv_cost_on(device))
            except RlsimError as exc:
                first_error = first_error or exc
        if not fits:
            assert first_error is not None
            raise first_error
        return min(fits, key=lambda cost: (cost.kv_capacity_tokens, cost.max_running))

    def instance_kv_tokens_of(self, ranks: Sequence[int]) -> float:
        """KV-cache tokens of one instance on ``ranks`` (the devices it runs on)."""
        return float(self._step_cost_of(self.pool(ranks)).kv_capacity_tokens)

    def _step_cost_of(self, pool: _Pool) -> StepCost:
        """The step cost of an instance on the pool's ranks: its devices, its collectives through the
        network model (as the planner's RolloutEvaluator); one per pool key."""
        hit = self._step_costs.get(pool.key)
        if hit is None:
            hit = self._step_costs[pool.key] = StepCost(
                self.model, instance_device(self.topology, pool.ranks), self.rollout_layout,
                self.inference_params, collectives=self.collectives, ranks=list(pool.ranks),
                layout_field="workload.rollout_layout")
        return hit

    def custom_all_reduce_runs(self, ranks: Sequence[int]) -> bool:
        """Whether the engine's own TP all-reduce (inference.custom_all_reduce) can run on an instance
        of ``ranks``: its TP group (the instance's first tp ranks, as StepCost reduces on) is one the
        kernel takes (CollectiveModel.custom_all_reduce_lines: 2, 4, 6 or 8 devices of one node)."""
        d, tp = self.instance_devices, self.rollout_layout.tp
        if tp < 2:
            return False
        return any(self.collectives.custom_all_reduce_lines(ranks[i:i + tp]) for i in range(0, len(ranks) - d + 1, d))

    # ---- helpers ---------------------------------------------------------------------------------
    def layout(self, n_devices: int) -> TrainLayout:
        """The training layout on a pool of ``n_devices``. Experts fold over the TP x CP x DP ranks of
        a pipeline stage (Megatron-Core MoE parallel folding, ``etp`` x ``ep`` of them per expert
        group), so EP may exceed DP; a layout that cannot fold is an error, never a silent
        fallback: a silent EP 1 at one size and EP 4 at another makes scaling comparisons compare
        different per-replica work."""
        if n_devices not in self._layouts:
            lay = self.train_template.resolve(n_devices, source=self.source)
            if lay.ep > 1 or lay.etp is not None:
                mp = self.train_template.model_parallel
                block = lay.tp * lay.cp * (lay.dp or 1)
                if block % (lay.expert_tp * lay.ep):
                    raise RlsimError(
                        f"training etp x ep = {lay.expert_tp} x {lay.ep} does not divide the tp x cp x dp = {block} "
                        f"ranks of a pipeline stage of a {n_devices}-device training pool ({lay.tp} TP x {lay.cp} CP "
                        f"x {lay.pp} PP = {mp} devices per replica, DP {lay.dp})", source=self.source,
                        field="workload.train_layout.ep",
                        fix=f"use ep (x workload.train_layout.etp) dividing {block}, a pool whose tp x cp x dp is a "
                            f"multiple of {lay.expert_tp * lay.ep} (schedule.rollout_fraction / rollout_devices, "
                            "topology size), or another tp x cp x pp")
            lay.check_model(self.model, source=self.source)
            self._layouts[n_devices] = lay
            # each replica's TP x PP on consecutive ranks (inside a scale-up domain), DP outermost:
            # gradient sync is the traffic that crosses domains (RDMA between supernodes); the
            # replicas of one folded expert group together, so the expert all-to-all does not
            fold = lay.pool_unit // lay.model_parallel
            self._ranks[n_devices] = replica_contiguous_ranks(lay.tp, lay.cp, lay.dp or 1, lay.pp, fold=fold)
        return self._layouts[n_devices]

    def set_train_layout(self, layout_map: dict[str, Any]) -> None:
        """A re-planned training layout (after a failure): later steps use it; dp is re-derived."""
        self.train_layout_map = {k: v for k, v in layout_map.items() if k != "dp"}
        self.train_template = TrainLayout.from_mapping({**self.train_layout_map}, source=self.source)
        self.train_group_devices = self.train_template.model_parallel
        self.train_pool_unit = self.train_template.pool_unit
        self._layouts.clear()
        self._memory.clear()
        self._reference_shard.clear()
        self._ranks.clear()
        self._ref.clear()
        for pool in self._pools.values():   # placements follow the layout
            pool.placed.clear()

    def train_devices_at_most(self, n_max: int) -> int:
        """Largest training pool <= n_max whose stages keep the configured experts folded (etp x ep
        divides tp x cp x dp: a pool of 11 replicas could not shard 4-way EP at TP 1): whole
        granules of TrainLayout.pool_unit."""
        return (n_max // self.train_pool_unit) * self.train_pool_unit

    def effective_layouts(self, n_train: int, n_rollout: int) -> dict[str, Any]:
        """The layouts a run used: the training one at its pool's DP, the rollout one with the instances
        its pool's `n_rollout` devices hold."""
        return {"train": self.layout(n_train).as_dict(), "rollout": self.rollout_layout_used(n_rollout)}

    def rollout_layout_used(self, n_rollout: int) -> dict[str, Any]:
        """The rollout layout with the instances `n_rollout` devices hold (the pool sets them, not
        workload.rollout_layout, which refuses the key); mamba_cache_dtype only where a model keeps
        states (the layout refuses it elsewhere)."""
        layout = self.rollout_layout.model_dump()
        if not any(m.num_mamba_layers or m.num_linear_layers for m in self.models.values()):
            layout.pop("mamba_cache_dtype", None)
        return {**layout, "instances": n_rollout // self.instance_devices}

    def _packing(self) -> str:
        return "packed" if self.scenario.schedule.distqueue.packed else "padded"

    # ---- the facade ------------------------------------------------------------------------------
    def rollout(self, prompt_lens, response_lens, ranks, groups=None, arrivals=None) -> RolloutOutcome:
        """Generation on the instances of ``ranks`` (instance i on ranks[i D:(i + 1) D]), each on
        its own devices and links; ``groups``: prefix-cache groups (inference.enable_prefix_caching);
        ``arrivals`` (one instance): when each sequence joins the engine's queue (Costs.rollout)."""
        d = self.instance_devices
        inst = max(1, len(ranks) // d)
        flops, prompts, responses = self._rollout_inputs(prompt_lens, response_lens)
        if arrivals is not None and inst != 1:
            raise ValueError("arrivals are for one instance's rollout")
        if self.turn_law is not None:
            return self._multi_turn_rollout(prompts, responses, flops, ranks, inst, groups, arrivals)
        if inst == 1 and len(prompts):
            return self._rollout_one(prompts, responses, flops, self.pool(ranks[:d]), groups, arrivals)
        return self._rollout_many(prompts, responses, flops, [self.pool(ranks[i * d:(i + 1) * d])
                                                              for i in range(inst)], groups)

    def rollout_many(self, requests: Sequence[tuple[Any, Any, Any, Any]]) -> list[RolloutOutcome]:
        """rollout(prompt_lens, response_lens, ranks, groups) of each request, each on its own
        instance: the same outcomes, but the engines' array runs of one instance each go in one
        pass (inference.fast_runs: their events timed together, each run's floats unchanged)."""
        if self.turn_law is not None:
            return [self.rollout(*request) for request in requests]
        outcomes: list[RolloutOutcome | None] = []
        # (request, run, finish, prompts, responses, flops)
        started: list[tuple[int, Any, np.ndarray, np.ndarray, np.ndarray, float]] = []
        d = self.instance_devices
        for prompt_lens, response_lens, ranks, groups in requests:
            flops, prompts, responses = self._rollout_inputs(prompt_lens, response_lens)
            if max(1, len(ranks) // d) != 1 or not len(prompts):
                outcomes.append(self.rollout(prompt_lens, response_lens, ranks, groups))
                continue
            engine = self._engine(self.pool(ranks[:d]))
            engine.add_many(range(len(prompts)), prompts, responses, 0.0, group_ids=groups)
            run = ResumableRun(engine, every=ENGINE_CHECKPOINT_EVERY_EVENTS) if self._interrupts else engine
            started.append((len(outcomes), run, np.full(len(prompts), np.nan), prompts, responses, flops))
            outcomes.append(None)
        run_all_into([s[1] for s in started], [s[2] for s in started])
        for i, run, finish, prompts, responses, flops in started:
            outcomes[i] = self._outcome_of(run, finish, prompts, responses, flops)
        return outcomes  # type: ignore[return-value]

    def _rollout_inputs(self, prompt_lens, response_lens) -> tuple[float, np.ndarray, np.ndarray]:
        """(generation FLOPs, prompts, responses as integers) of one rollout request."""
        prompts, responses = np.asarray(prompt_lens), np.asarray(response_lens)
        whole = int(prompts.sum()) + int(responses.sum()) \
            if prompts.dtype.kind in "iu" and responses.dtype.kind in "iu" else None
        if whole is not None and 0 <= whole < 2**53:
            # lengths are integers: the float sum (below) is exact, every partial sum an integer
            # below 2^53, so it is this one, without the float copies
            total = float(whole)
        else:
            total = np.sum(np.asarray(prompt_lens, float) + np.asarray(response_lens, float))
        # np.mean(tokens) is this sum / len: one reduction serves both
        flops = float(total * self.rollout_flops_per_token(float(total / len(prompts)) / 2)) \
            if len(prompts) else 0.0
        return flops, np.asarray(prompt_lens, np.int64), np.asarray(response_lens, np.int64)

    def rollout_server(self, ranks) -> RolloutEngine | MultiTurnServer:
        """One instance's engine on its own devices and links, fed requests over time."""
        engine = self._engine(self.pool(ranks))
        if self._trajectories is None:
            return engine
        return MultiTurnServer(engine, self._trajectories, self.inference_params.enable_prefix_caching,
                               cache_eviction=self.turn_law.cache_eviction)

    def _multi_turn_rollout(self, prompts: np.ndarray, responses: np.ndarray, flops: float, ranks: Sequence[int],
                            instances: int, groups: np.ndarray | None, arrivals: np.ndarray | None) -> RolloutOutcome:
        """Generation whose samples run their turns (llm/multi_turn.py), dispatched round-robin as
        _rollout_many; the turn plan drawn from the scenario's seed and the request itself (the
        same request, the same plan, whatever ran before)."""
        n = len(prompts)
        rng = np.random.default_rng([self.seed, n, int(prompts.sum()), int(responses.sum())])
        try:
            plan = plan_turns(self.turn_law, responses, rng)
        except ValueError as exc:   # a response law without a max: its draw found the overflow
            raise RlsimError(str(exc), source=self.source, field="workload.multi_turn.max_turn_tokens",
                             fix="raise workload.multi_turn.max_turn_tokens or max_turns, or cap "
                                 "workload.response_length.max") from exc
        d = self.instance_devices
        pools = [self.pool(ranks[i * d:(i + 1) * d]) for i in range(instances)]
        finish = np.full(n, np.nan)
        params = self.inference_params
        cache = {"cached": params.enable_prefix_caching, "max_context": params.max_model_len,
                 "cache_eviction": self.turn_law.cache_eviction}
        used = range(min(n, len(pools)))                  # instance i serves samples i, i + len(pools), ...
        shares = [EngineShare(self._engine(pools[i]), np.arange(i, n, len(pools))) for i in used]
        where = [ranks[i * d:(i + 1) * d] for i in used]
        waits = []
        if self.turn_law.lockstep:
            if arrivals is not None:
                raise ValueError("lock-step turns start together: no arrivals")
            idle = run_turns_in_lockstep(shares, prompts, plan, finish, groups=groups, **cache)
            for instance, (for_engines, for_tools) in zip(where, idle, strict=True):
                waits += [(instance, for_engines, "long_tail"), (instance, for_tools, "tool_wait")]
        else:
            for instance, share in zip(where, shares, strict=True):
                idle = run_turns(share.engine, share.ids, prompts, plan, finish, arrivals=arrivals, groups=groups, **cache)
                waits.append((instance, idle, "tool_wait"))
        busy = np.zeros(len(pools))
        busy[:len(used)] = [share.engine.busy_s for share in shares]
        return RolloutOutcome(finish, np.arange(n, dtype=np.int64) % len(pools), busy, flops=flops,
                              start_s=None if arrivals is None else np.asarray(arrivals, float).copy(),
                              engine_waits=tuple(entry for entry in waits if len(entry[1])),
                              counts=summed_counts([share.engine for share in shares]))

    def _engine(self, pool: _Pool) -> RolloutEngine:
        cost = self._step_cost_of(pool)
        return RolloutEngine(self.model, cost.device, self.rollout_layout, self.inference_params, cost=cost)

    def _rollout_many(self, prompts: np.ndarray, responses: np.ndarray, flops: float,
                      pools: list[_Pool], groups: np.ndarray | None = None) -> RolloutOutcome:
        """Several instances: round-robin dispatch (sequence j to instance j mod n, as
        simulate_rollout), every instance an engine on its own pool."""
        n, n_inst = len(prompts), len(pools)
        finish = np.full(n, np.nan)
        busy = np.zeros(n_inst)
        engines = {}
        for i, pool in enumerate(pools):
            ids = np.arange(i, n, n_inst)
            if not len(ids):
                continue
            engine = engines[i] = self._engine(pool)
            engine.add_many(ids, prompts[ids], responses[ids], 0.0, group_ids=None if groups is None else groups[ids])
        run_all_into(list(engines.values()), [finish] * len(engines))   # each writes its own ids
        for i, engine in engines.items():
            busy[i] = engine.busy_s
        return RolloutOutcome(finish, np.arange(n, dtype=np.int64) % n_inst, busy, flops=flops,
                              counts=summed_counts(list(engines.values())))

    def _rollout_one(self, prompts: np.ndarray, responses: np.ndarray, flops: float, pool: _Pool,
                     groups: np.ndarray | None = None, arrivals: np.ndarray | None = None) -> RolloutOutcome:
        """One instance (what the schedules ask): the same engine run as simulate_rollout, kept
        resumable so an interrupt later in the round (StaleSync tail consolidation) restores the
        engine near that time instead of running it again from the start. ``arrivals``: the
        sequences join the queue at those times (each set arriving together added at once, in time
        order); an interrupt is then asked at the last arrival or later (the resumable run starts there)."""
        n = len(prompts)
        engine = self._engine(pool)
        if arrivals is None:
            engine.add_many(range(n), prompts, responses, 0.0, group_ids=groups)
        else:
            times = np.asarray(arrivals, float)
            for at in np.unique(times).tolist():
                ids = np.flatnonzero(times == at)
                engine.add_many(ids, prompts[ids], responses[ids], at, group_ids=None if groups is None else groups[ids])
        finish = np.full(n, np.nan)
        run = ResumableRun(engine, every=ENGINE_CHECKPOINT_EVERY_EVENTS) if self._interrupts else engine
        run.run_into(finish)
        # none is running before it arrives (queued: admitted at a step with room)
        return self._outcome_of(run, finish, prompts, responses, flops,
                                None if arrivals is None else np.asarray(arrivals, float).copy())

    def _outcome_of(self, run: RolloutEngine | ResumableRun, finish: np.ndarray, prompts: np.ndarray,
                    responses: np.ndarray, flops: float, arrivals: np.ndarray | None = None) -> RolloutOutcome:
        """The outcome of one instance's finished run; a resumable run answers progress at a time and
        takes more sequences later in the run (``extend``: from its state kept nearest before then)."""
        engine = run if isinstance(run, RolloutEngine) else run.engine
        busy = np.array([engine.busy_s])
        if run is engine:
            return RolloutOutcome(finish, np.zeros(len(finish), np.int64), busy, flops=flops, start_s=arrivals,
                                  counts=engine.counts())

        def progress_at(stop_s: float) -> np.ndarray:
            out = np.where(finish <= stop_s, responses, 0).astype(float)
            ids, generated = run.progress_at(stop_s)
            out[ids] = generated
            return out

        def extend(more_prompts: np.ndarray, more_responses: np.ndarray, groups: np.ndarray | None,
                   at: float) -> RolloutOutcome:
            more_prompts, more_responses = np.asarray(more_prompts, np.int64), np.asarray(more_responses, np.int64)
            resumed = run.state_before(at)
            n = len(finish)
            resumed.add_many(np.arange(n, n + len(more_prompts)), more_prompts, more_responses, at, group_ids=groups)
            every = np.concatenate([finish, np.full(len(more_prompts), np.nan)])
            every[:n][finish > at] = np.nan     # what runs past `at` the continued run times again
            again = ResumableRun(resumed, every=ENGINE_CHECKPOINT_EVERY_EVENTS)
            again.run_into(every)
            all_prompts, all_responses = np.concatenate([prompts, more_prompts]), np.concatenate([responses, more_responses])
            starts = np.concatenate([np.zeros(n) if arrivals is None else arrivals, np.full(len(more_prompts), at)])
            return self._outcome_of(again, every, all_prompts, all_responses,
                                    self._rollout_inputs(all_prompts, all_responses)[0], starts)

        return RolloutOutcome(finish, np.zeros(len(finish), np.int64), busy, flops=flops, start_s=arrivals,
                              progress_at=progress_at, extend=extend, counts=engine.counts(), counts_at=run.counts_at)

    def _flops_line(self, role: str) -> tuple[float, float]:
        """(train FLOPs per token at length 0, their slope per token of length) of the role's model."""
        m = self.models[role]
        line = self._flops_lines.get(m)
        if line is None:   # per model (by value), for this run's objects only
            a = float(m.train_flops_per_token(0.0))
            line = self._flops_lines[m] = (a, float(m.train_flops_per_token(1.0)) - a)
        return line

    def _work(self, role: str, lens: np.ndarray) -> float:
        """sum over samples of train_flops_per_token(s) x s; per-token FLOPs are affine in s
        (6N + 12 L H d s, formulas.md; s x s the model's windowed_sq with sliding-window layers), so
        two sums replace a loop over lengths."""
        m = self.models[role]
        x = np.asarray(lens, float)
        a, slope = self._flops_line(role)
        return a * float(x.sum()) + slope * (float(np.sum(m.windowed_sq(x))) if m.num_sliding_layers
                                             else float(np.dot(x, x)))

    def _slowest_replica(self, kind: str, role: str, seq_lens, n_devices: int,
                         row_width: int | None = None) -> tuple[int, float]:
        """(micro-batches, work) of the data-parallel replica with the most work in a ``kind`` pass over
        ``seq_lens``, cut as the cost model cuts them (_micro_batched_with, then llm/training.py's
        replica_micro_batches: padding counted; work: _work's line over each micro-batch's tokens and
        squared lengths). The slowest replica sets the pass's time: scaling by the whole batch's work
        left a pass 4-6% off where that replica's share moved (4 samples a replica); the count keys
        the per-micro-batch parts (an FSDP CPU offload's shard copies, the pipeline's fill)."""
        lay = self.layout_for(role, n_devices)
        rows = self._forward_rows(role) if kind == "fwd" else None
        micro, lens, _ = self._micro_batched_with(lay, seq_lens, rows, None)
        parts = replica_micro_batches(lens, micro, self._packing(), self.params_of(role, kind, row_width),
                                      forward_only=kind == "fwd")
        a, slope = self._flops_line(role)
        loads = [(len(tokens), a * float(tokens.sum()) + slope * float(squares.sum())) for tokens, squares in parts]
        return max(count for count, _ in loads), max(work for _, work in loads)

    def _reused(self, kind: str, role: str, seq_lens, pool: _Pool, exact, scored: Any = None,
                row_width: int | None = None) -> StageCost:
        """Exact cost for the first batch of each (kind, model, pool key, batch size, micro-batch count);
        later batches scale its work-driven part by the slowest replica's model FLOPs (_slowest_replica;
        same layout, same micro-batches: that time ~ work) and keep its fixed part (StageCost.fixed_s: host copies, the optimizer step and
        gradient sync, a woken model's sleep and wake), which scaled by work put a mini-batch's update
        -7% / +9% off its exact cost (tests/rl/test_llm_costs.py). Roles with the same architecture
        (old-logprob and reference forwards) share one evaluation, and so do pools of one key (same
        devices and links). A head that projects the responses alone (head_response_only) is priced
        exactly every batch: its share of a pass follows the batch's response share, and in a forward
        pass (the logits' memory-bound passes) more than its FLOPs' share, which the scaling by work
        mispriced (-22% on a forward at a response share of 0.93 scaled from 0.22). A padded row width
        (pad_rows_to, or under batch ``row_width`` else the longest of seq_lens) keys its own evaluation:
        scaled by work from another width a 300-wide update was -32% off its exact cost, and the memory
        kept from it is that width's."""
        # the role's trainer constants too: a host-resident reference costs what the actor's pass does not
        params = self.params_of(role, kind, row_width)
        if not self.reuse or _head_tokens(params, scored) is not None:
            return exact()
        try:
            micro_batches, work = self._slowest_replica(kind, role, seq_lens, len(pool.ranks), row_width)
        except RlsimError:   # a sequence over a token budget: the pass's own error, in its terms
            return exact()
        width = params.compute.pad_rows_to   # batch: the longest of seq_lens, as _padded_row_width reads it
        width = int(np.max(seq_lens)) if width == "batch" and self._packing() == "padded" and len(seq_lens) else width
        key = (kind, self.models[role], id(params), width, pool.key, len(seq_lens), micro_batches)
        if key not in self._ref:
            self._ref[key] = (work, exact())
        ref_work, ref = self._ref[key]
        x = work / ref_work if ref_work > 0 else 1.0
        return StageCost(ref.fixed_s + (ref.time_s - ref.fixed_s) * x, flops=ref.flops * x, bubble_s=ref.bubble_s * x,
                         peak_memory_bytes=ref.peak_memory_bytes, path_stage=ref.path_stage,
                         path_s=tuple((part, seconds if part in FIXED_PATH_PARTS else seconds * x)
                                      for part, seconds in ref.path_s), fixed_s=ref.fixed_s)

    @property
    def scores_responses(self) -> bool:
        """Whether a pass's output layer projects the response positions alone (train_params.compute.
        head_response_only): the training step then gives forward / train each sample's response tokens."""
        return self.train_params.compute.head_response_only

    def forward(self, role, seq_lens, ranks, scored=None) -> StageCost:
        """``scored``: each sample's response tokens, which the head projects alone where the pass's
        constants say so (scores_responses; then priced exactly each batch, _reused)."""
        pool = self.pool(ranks)
        if self.scenario.schedule.failures and role != "actor" and role_pool(self.scenario.schedule, role) != "main":
            self._aux_step = (pool.ranks, np.asarray(seq_lens, np.int64))   # only a failure re-plan reads it
        cost = self._reused("fwd", role, seq_lens, pool, lambda: self._forward(role, seq_lens, pool, scored), scored)
        if role != "reference" or not self.scenario.schedule.reference_swap_copies:
            return cost
        return dataclasses.replace(cost, time_s=cost.time_s + self.reference_swap_s(pool))

    def reference_swap_s(self, pool: _Pool) -> float:
        """schedule.reference_swap_copies: copies between HBM and host memory around a reference pass,
        each over the device's host link (the slowest kind's): of the training weight shard, but for
        reference_swap_own_copies of the reference's own shard (reference_swap_shard_bytes), half in
        and half out; with schedule.host_copies.reference_swap through pageable memory: the trainer's
        first copy out to the host at the slower of the link and host_copies.offload_Bps, its others
        in at onload_Bps, the reference's own out copies at the former and in copies at the latter."""
        sched = self.scenario.schedule
        own = sched.reference_swap_own_copies
        of_trainer = sched.reference_swap_copies - own
        trainer, reference = self._train_weight_bytes(pool), self.reference_swap_shard_bytes(pool) if own else 0.0
        pageable = sched.host_copies
        if not (pageable.reference_swap and sched.reference_swap_copies):
            return max((of_trainer * trainer + own * reference) / rate for _, rate in self._host_rates(pool))
        out = (trainer if of_trainer else 0.0) + (own // 2) * reference
        back = max(of_trainer - 1, 0) * trainer + (own - own // 2) * reference
        rates = [rate for _, rate in self._host_rates(pool)]
        return max(out / min(rate, pageable.offload_Bps) + back / min(rate, pageable.onload_Bps) for rate in rates)

    def reference_swap_shard_bytes(self, pool: _Pool) -> float:
        """The reference's weight shard per device on ``pool`` in the training layout, at a frozen
        model's bytes (frozen_weights_params: no master copy, weight_bytes_per_param)."""
        key = (len(pool.ranks), pool.hbm_bytes)
        if key not in self._reference_shard:
            self._reference_shard[key] = training_state_bytes(
                self.models["reference"], self.layout(key[0]), pool.hbm_bytes,
                frozen_weights_params(self.train_params)).weights_bytes
        return self._reference_shard[key]

    def weight_host_copies_s(self, ranks, copies: int) -> float:
        """``copies`` copies of the actor's training weight shard between HBM and host memory, each
        over the device's host link (verl's DetachActorWorker saving and restoring the policy)."""
        return self._weight_copies_s(self.pool(ranks), copies)

    def _weight_copies_s(self, pool: _Pool, copies: int) -> float:
        shard = self._train_weight_bytes(pool)
        return max(copies * shard / rate for _, rate in self._host_rates(pool))

    def _host_rates(self, pool: _Pool) -> list[tuple[DeviceSpec, float]]:
        """(device kind, rate of its copies to and from host memory) for each kind of the pool: the
        slowest host link of its ranks of that kind (Topology.host_copy_Bps) at that link's
        efficiency, or at schedule.switch.host_link_efficiency where given."""
        if pool.host_rates is None:
            rates = self.topology.host_copy_Bps(pool.ranks, self.switch_params.host_link_efficiency)
            if len(pool.kinds) == 1:
                pool.host_rates = [(pool.kinds[0], float(rates.min()))]
            else:
                spec = self.topology.device_spec
                pool.host_rates = [(kind, float(min(rate for r, rate in zip(pool.ranks, rates.tolist(), strict=True)
                                                    if spec(r) is kind))) for kind in pool.kinds]
        return pool.host_rates

    @property
    def pads_rows_to_the_batch(self) -> bool:
        """Whether padded rows take the longest sample of the batch a pass is given (train_params.compute.
        pad_rows_to: batch): the training step then gives train row_width= the step's longest, so each
        optimizer mini-batch is as wide as the whole step batch (TRL, SkyRL pad it before the split)."""
        return self._packing() == "padded" and self.train_params.compute.pad_rows_to == "batch"

    def train(self, role, seq_lens, ranks, scored=None, row_width: int | None = None) -> StageCost:
        """``row_width``: the padded rows' width where pad_rows_to is batch (pads_rows_to_the_batch), the
        step batch's longest sample; None: the longest of ``seq_lens``."""
        pool = self.pool(ranks)
        if role == "actor":
            lens = np.asarray(seq_lens, np.int64)
            self._last_train_ranks = pool.ranks
            if len(lens) and self.scenario.schedule.failures:   # only a failure re-plan reads them
                self._trained.append((self._heaviest_micro_batch_tokens(len(pool.ranks), lens), lens))
        return self._reused("train", role, seq_lens, pool, lambda: self._train(role, seq_lens, pool, scored, row_width),
                            scored, row_width)

    def _demanding_batches(self) -> list[np.ndarray]:
        """The latest trained batch, the one of the longest sample and the one of the heaviest
        micro-batch (as trained), each once; computed when a re-plan asks (failure runs only)."""
        if not self._trained:
            return []
        if self._demanding_for != len(self._trained):
            longest = max(self._trained, key=lambda t: (int(t[1].max()), float(t[1].mean())))[1]
            heaviest = max(self._trained, key=lambda t: t[0])[1]
            picked: list[np.ndarray] = []
            for batch in (self._trained[-1][1], longest, heaviest):
                if not any(batch is b for b in picked):
                    picked.append(batch)
            self._demanding, self._demanding_for = picked, len(self._trained)
            self._demanding_orders.clear()
        return self._demanding

    def _demanding_micro_batched(self, lay: TrainLayout, batch: np.ndarray) -> tuple[TrainLayout, np.ndarray]:
        """_micro_batched_as(lay, batch) for one of the demanding batches, its token balancing
        (micro_batch_permutation: the same for every candidate of a (rows, dp)) computed once per
        (batch, rows, dp) in this object; the ordered samples are read-only (shared by candidates)."""
        key = (id(batch), lay.micro_batch, lay.dp or 1)
        hit = self._demanding_orders.get(key)
        if hit is None or hit[0] is not batch:
            micro, ordered = self._micro_batched_as(lay, batch)
            ordered = ordered.view()
            ordered.flags.writeable = False
            hit = self._demanding_orders[key] = (batch, micro.micro_batch, ordered)
        _, samples, ordered = hit
        return (lay if samples == lay.micro_batch else dataclasses.replace(lay, micro_batch=samples)), ordered

    def _heaviest_micro_batch_tokens(self, n_devices: int, lens: np.ndarray) -> float:
        """Tokens of the largest micro-batch of ``lens`` as trained on ``n_devices``."""
        lay, ordered = self.micro_batched(lens, n_devices)
        return heaviest_micro_batch(ordered, lay.micro_batch)

    def micro_batched(self, seq_lens, n_devices: int) -> tuple[TrainLayout, np.ndarray]:
        """The layout and sample order the training cost model sees: token-balanced micro-batches
        of about ``micro_batch`` packed rows (schedule.micro_batching: balanced), or the configured
        samples per micro-batch in generation order (sequence, or padded data)."""
        return self._micro_batched_as(self.layout(n_devices), seq_lens)

    def accept_train_layout(self, layout_map: dict[str, Any]) -> int:
        """A re-plan's check of a candidate training layout (dp included) beyond the planner's own
        (which judges rows of typical length): the rollout phase still fits beside it on a colocated
        placement, and the latest trained batch, micro-batched as the run does, fits in memory
        (long-tail batches hold micro-batches longer than a typical row), and an aux pool's passes
        (fuse: actor) fit under it on their pool (aux_passes_fit, on the latest step's samples there
        and the demanding batches). RlsimError otherwise: RefusedBeforeTiming where no step was timed
        yet (the rollout phase; a batch's memory, each judged before any is timed: train_step_memory),
        which a planner search charges as such. Returns the train_step_cost queries it timed (one a batch,
        and each update an aux pool runs on each of its batches; 0 before any batch trained), which a
        planner search charges each as a timed evaluation (autoplan._AcceptedFirst).
        Judged on the latest batch and on the trained batches of the longest sample and of the
        heaviest micro-batch so far: StaleSync alternates typical batches with tail batches (the
        previous round's longest samples), so the batch after a re-plan may be the heavier kind."""
        lay = TrainLayout.from_mapping(dict(layout_map), source=self.source)
        steps = []   # each batch micro-batched as the run does it
        try:
            self.rollout_phase_bytes(lay)
            for batch in self._demanding_batches():
                steps.append(self._demanding_micro_batched(lay, batch))
                train_step_memory(self.model, steps[-1][0], self.topology, self._accept_ranks(steps[-1][0]),
                                  steps[-1][1], packing=self._packing(), params=self.train_params, source=self.source)
        except RlsimError as exc:
            raise RefusedBeforeTiming.of(exc) from None
        for micro, lens in steps:
            train_step_cost(self.model, micro, self.topology, self._accept_ranks(micro), lens,
                            packing=self._packing(), params=self.train_params, collectives=self.collectives,
                            source=self.source)
        timed = len(steps)
        if self._aux_step is not None:   # an aux pool (fuse: actor) runs its passes under the layout too
            ranks, step = self._aux_step
            batches = self._demanding_batches() or [step]
            self.candidate_costs(layout_map).aux_passes_fit(ranks, step, batches)
            timed += len(batches) * sum(kind == TRAIN for kind, _ in aux_pool_passes(self.scenario))   # its updates
        return timed

    def candidate_costs(self, layout_map: Mapping[str, Any]) -> LlmCosts:
        """Costs of this scenario under a candidate training layout (dp re-derived), apart from this
        run's (their caches untouched): one private LlmCosts, built when first asked, re-laid each time."""
        if self._candidate_costs is None:
            self._candidate_costs = LlmCosts(self.scenario, self.topology, self._auto_layouts)
        self._candidate_costs.set_train_layout(dict(layout_map))
        return self._candidate_costs

    def aux_passes_fit(self, ranks: Sequence[int], step_lens: Any, mini_batches: Sequence[Any]) -> float | None:
        """The passes a step runs on an aux pool (aux_pool_passes) on ``ranks`` under this training
        layout, as TrainStep runs them and with the run's own memory checks (_forward: the pass beside
        what stays resident on its pool, _forward_beside_bytes; _train: the update beside the frozen
        weights there): each forward pass on ``step_lens`` (a step's samples), an update on each of
        ``mini_batches``. RlsimError where one does not fit (ppo-llama3.1-70b under fuse: actor on 8
        DGX-H200 nodes: the reward model's pass beside the 70B critic's state at DP 1, 191.6 GB).
        Returns the updates' peak a device, as the run notes it in the train phase (TrainStep: a
        forward pass notes none); None where no update runs there."""
        peaks = []
        for kind, role in aux_pool_passes(self.scenario):
            if kind == FORWARD:
                self.forward(role, step_lens, ranks)
            else:
                peaks += [self.train(role, lens, ranks).peak_memory_bytes for lens in mini_batches]
        return max(peaks, default=None)

    def _accept_ranks(self, lay: TrainLayout) -> list[int]:
        """Ranks a candidate layout is checked on: its canonical placement (replica_contiguous_ranks,
        as the run places it) on the first devices of the pool the latest batch trained on (a re-plan
        keeps to its survivors, so these devices' memory is the bound), else on the first ranks.
        The candidate's own placement: the running layout's cannot place another shape (it refused
        every candidate whose size is not a multiple of the running TP x CP x PP). The protocol's
        accept_train_layout names no ranks; a schedule passing the survivors would make this exact."""
        n, ranks = lay.devices, self._last_train_ranks
        on = list(range(n)) if ranks is None or len(ranks) < n else list(ranks[:n])
        order = replica_contiguous_ranks(lay.tp, lay.cp, lay.dp or 1, lay.pp, fold=lay.pool_unit // lay.model_parallel)
        return [on[i] for i in order]

    def _micro_batched_as(self, lay: TrainLayout, seq_lens, rows: int | None = None) -> tuple[TrainLayout, np.ndarray]:
        """``rows``: packed rows per micro-batch (samples when not balanced; default: the layout's micro_batch)."""
        micro, ordered, _ = self._micro_batched_with(lay, seq_lens, rows, None)
        return micro, ordered

    def _micro_batched_with(self, lay: TrainLayout, seq_lens, rows: int | None,
                            scored: Any) -> tuple[TrainLayout, np.ndarray, np.ndarray | None]:
        """_micro_batched_as, with ``scored`` (a count per sample, or None) in the same order."""
        lens = np.asarray(seq_lens, np.int64)
        b, order = micro_batch_permutation(lens, self.pack_tokens, rows or lay.micro_batch, lay.dp or 1,
                                           self.balanced)
        if order is not None:
            lens = lens[order]
            scored = None if scored is None else np.asarray(scored, np.int64)[order]
        return (lay if b == lay.micro_batch else dataclasses.replace(lay, micro_batch=b)), lens, scored

    def _as_pool(self, where: _Pool | int) -> _Pool:
        """A pool, or a device count (ranks 0..n-1, as callers of the sized API had it)."""
        return self.pool(range(where)) if isinstance(where, int) else where

    def _forward(self, role, seq_lens, where: _Pool | int, scored=None) -> StageCost:
        pool = self._as_pool(where)
        if role == "reward" and "reward_model" in self._served:    # reward.served without devices
            return self._woken_reward_model(seq_lens, pool)
        n_devices = len(pool.ranks)
        params = self.params_of(role, "fwd")
        lay, lens, heads = self._micro_batched_with(self.layout_for(role, n_devices), seq_lens,
                                                    self._forward_rows(role), _head_tokens(params, scored))
        offloaded = {"reference": self.scenario.workload.reference_cpu_offload,
                     "reward": self.scenario.workload.reward.cpu_offload}
        if offloaded.get(role) and lay.zero < 3:
            field = {"reference": "workload.reference_cpu_offload", "reward": "workload.reward.cpu_offload"}[role]
            raise RlsimError(f"the {role} model's CPU offload is FSDP's, over a ZeRO-3 layout; the training layout "
                             f"has zero {lay.zero}", source=self.source, field=field,
                             fix=f"remove {field}, or train with workload.train_layout.zero: 3 (FSDP)")
        try:
            c = forward_cost(self.models[role], lay, self.topology, self._placed(pool, n_devices), lens,
                             packing=self._packing(), params=params, collectives=self.collectives, source=self.source,
                             scored=heads)
        except RlsimError as exc:
            rows, key = self._forward_rows_given(role)
            if rows is None:
                rows, key = self.layout_for(role, n_devices).micro_batch, "workload.train_layout.micro_batch"
            raise self._beside_the_engine(self._in_the_layouts_terms(exc, lay, rows, key)) from None
        if c.memory is not None:
            self._check_forward_beside(role, c.memory, pool, lay.logprob_max_tokens_per_micro_batch is not None
                                       or lay.max_tokens_per_micro_batch is not None)
        return StageCost(c.time_s, flops=c.flops, fixed_s=c.offload_s)

    def _forward_beside_bytes(self, role: str, pool: _Pool) -> tuple[float, dict[str, float]]:
        """(trained models' state, {frozen role: weights}) resident on the devices beside a forward pass
        of ``role``, less the pass's own weights (counted by the pass): the actor's weights, optimizer
        state and kept gradient buffer (Megatron-Core's DDP keeps it, FSDP frees it: kept_gradient_bytes)
        less its per-phase offload on the trainer's devices, PPO's critic's on its pool, and the frozen
        models' resident weights there."""
        sched, lay = self.scenario.schedule, self.layout(len(pool.ranks))
        where = role_pool(sched, role)
        frozen = {r: b for r, b in self._frozen_bytes(role, lay, pool.hbm_bytes).items() if r != role}
        trained = 0.0
        if where == "main":
            states = self._resident_memory(pool)
            offload = self.train_params.offload
            trained += _kept(states, self.train_params) - (states.weights_bytes if role == "actor" and not offload.params else 0.0)
        if self.scenario.workload.algorithm == "ppo" and role_pool(sched, "critic") == where:
            critic = device_resident(training_state_bytes(self.models["critic"], lay, pool.hbm_bytes,
                                                          self.critic_params), self.critic_params)
            own = critic.weights_bytes if role == "critic" and not self.critic_params.offload.params else 0.0
            trained += _kept(critic, self.critic_params) - own
        return trained, frozen

    def _check_forward_beside(self, role: str, memory: MemoryBreakdown, pool: _Pool, budget: bool) -> None:
        """A forward pass that does not fit beside what stays resident on its devices
        (_forward_beside_bytes) is an error naming the key that sizes its micro-batches, or, where its
        weights alone do not fit beside them (no micro-batch would: check_forward_fits' rule), the key
        that takes the larger resident part off the devices."""
        trained, frozen = self._forward_beside_bytes(role, pool)
        beside = trained + sum(frozen.values())
        if beside <= 0.0 or memory.total_bytes + beside <= memory.capacity_bytes:
            return
        held = _held_beside("the trained models'", trained, frozen)
        # the actor's state is the larger trained part beside any pass: its offload, or the frozen models'
        resident_field, step = self._beside_fix("critic", trained >= sum(frozen.values()), list(frozen))
        if memory.weights_bytes + memory.gathered_bytes + beside > memory.capacity_bytes:
            field, fix = resident_field, f"{step}, or use more devices per training replica (tp / pp)"
        else:
            field = forward_batch_field(budget)
            fix = f"lower {field}, {step}, or use more devices per training replica (tp / pp)"
        raise self._beside_the_engine(RlsimError(
            f"the {role}'s forward pass does not fit in device memory: it needs {(memory.total_bytes + beside) / 1e9:.1f} "
            f"GB per device, its own "
            f"{memory.total_bytes / 1e9:.1f} GB ({memory.describe()}) beside {' and '.join(held)}, of "
            f"{memory.capacity_bytes / 1e9:.1f} GB usable", source=self.source, field=field, fix=fix))

    def layout_for(self, role: str, n_devices: int) -> TrainLayout:
        """The layout a role's passes run under: the actor's, the critic's micro-batching over it."""
        lay = self.layout(n_devices)
        return critic_layout(lay, self.scenario.workload.critic_batching, self.source) if role == "critic" else lay

    def _forward_rows(self, role: str) -> int | None:
        """Samples a forward micro-batch (sample-count mode): the critic's value pass may take its own."""
        return self._forward_rows_given(role)[0]

    def _forward_rows_given(self, role: str) -> tuple[int | None, str]:
        """(_forward_rows, the key that gives it)."""
        batching = self.scenario.workload.critic_batching
        if role == "critic" and batching is not None and batching.forward_micro_batch is not None:
            return batching.forward_micro_batch, "workload.critic_batching.forward_micro_batch"
        return self.scenario.schedule.forward_micro_batch, "schedule.forward_micro_batch"

    def _train(self, role, seq_lens, where: _Pool | int, scored=None, row_width: int | None = None) -> StageCost:
        pool = self._as_pool(where)
        n_devices = len(pool.ranks)
        params = self.params_of(role, "train", row_width)
        lay, lens, heads = self._micro_batched_with(self.layout_for(role, n_devices), seq_lens, None,
                                                    _head_tokens(params, scored))
        try:
            c = train_step_cost(self.models[role], lay, self.topology, self._placed(pool, n_devices), lens,
                                packing=self._packing(), params=params, collectives=self.collectives,
                                source=self.source, scored=heads)
        except RlsimError as exc:
            raise self._planned_layout_note(self._beside_the_engine(self._in_the_layouts_terms(
                exc, lay, self.layout(n_devices).micro_batch)), seq_lens, self.layout(n_devices)) from None
        frozen = self._frozen_bytes(role, self.layout(n_devices), pool.hbm_bytes)
        beside = self._beside_bytes(role, pool) + sum(frozen.values())
        try:
            self._check_beside(role, c.memory, beside, frozen)
        except RlsimError as exc:   # a planned layout's memory miss, as train_step_cost's own above
            raise self._planned_layout_note(exc, seq_lens, self.layout(n_devices), memory_miss=True) from None
        chain = c.critical_stages()
        parts = [(f"stage {st}", sec) for st, sec in enumerate(chain["ops_s_by_stage"])]
        parts += [(part, chain[f"{part}_s"]) for part in ("p2p", "dp_sync", "optimizer", "offload")]
        # the timeline's one record of the group carries its devices' mean idle inside the flush (the
        # busiest stage's idle alone under-counted the lighter stages': 13% against 26% on TP2 PP4)
        return StageCost(c.step_time_s, flops=c.model_flops, bubble_s=c.bubble_fraction * c.pipeline_s,
                         peak_memory_bytes=c.memory.total_bytes + beside + self._resident_engine_bytes(
                             max(k.hbm_bytes for k in pool.kinds)),
                         path_stage=chain["stage"], path_s=tuple(parts),
                         fixed_s=sum(seconds for part, seconds in parts if part in FIXED_PATH_PARTS))

    def params_of(self, role: str, kind: str = "train", row_width: int | None = None) -> TrainParams:
        """The trainer constants a role's passes of ``kind`` (fwd, train) run with (the critic's own
        offload: critic_train_params; the actor's entropy over the vocabulary: entropy_params), with
        ``row_width`` for the padded rows' width where theirs is batch (one copy per width, kept: _reused
        keys on its id)."""
        if role == "critic":
            params = self.critic_params
        elif role == "actor" and kind in self.entropy_params:
            params = self.entropy_params[kind]
        else:
            params = self.frozen_params.get(role, self.train_params)
        if row_width is None or params.compute.pad_rows_to != "batch":
            return params
        key = (id(params), int(row_width))
        if key not in self._row_width_params:
            compute = params.compute.model_copy(update={"pad_rows_to": int(row_width)})
            self._row_width_params[key] = (params, params.model_copy(update={"compute": compute}))
        return self._row_width_params[key][1]

    def critic_resident_bytes(self, lay: TrainLayout, hbm_bytes: float) -> float:
        """PPO's critic state on each trainer device outside the critic's own passes: its weights,
        optimizer state and kept gradient buffer (kept_state_bytes) less what its offload moves to the
        host (workload.critic_offload, else the actor's per-phase offload). 0 without a critic, or where
        it runs on a pool of its own (fuse: actor; a split pool's aux_devices: role_pool)."""
        if not self._critic_beside_actor():
            return 0.0
        return kept_state_bytes(self.models["critic"], lay, hbm_bytes, self.critic_params)

    def _critic_beside_actor(self) -> bool:
        """Whether a PPO critic's state and passes share the actor's devices (critic_beside_actor)."""
        return critic_beside_actor(self.scenario)

    def _actor_resident_bytes(self, pool: _Pool) -> float:
        """The actor's weights, optimizer state and kept gradient buffer beside the critic's passes,
        less its per-phase offload (_kept)."""
        return _kept(self._resident_memory(pool), self.train_params)

    def _beside_bytes(self, role: str, pool: _Pool) -> float:
        """What the other trained model of a PPO run holds on these devices while ``role`` trains: none
        where the critic trains on a pool of its own (TrainStep runs its update on its aux clock)."""
        if not self._critic_beside_actor():
            return 0.0
        if role == "actor":
            return self.critic_resident_bytes(self.layout(len(pool.ranks)), pool.hbm_bytes)
        return self._actor_resident_bytes(pool) if role == "critic" else 0.0

    def _frozen_bytes(self, role: str, lay: TrainLayout, hbm_bytes: float) -> dict[str, float]:
        """{frozen role: weight shard per device} resident where ``role``'s passes run (frozen_weight_bytes)."""
        return frozen_weight_bytes(self.scenario, self.models, role, lay, hbm_bytes, self.train_params)

    def _check_beside(self, role: str, memory: MemoryBreakdown, beside: float, frozen: Mapping[str, float]) -> None:
        """An update that does not fit beside the other trained model's resident state (PPO) and the
        frozen models' resident weights (``frozen``, part of ``beside``) is an error."""
        if beside <= 0.0 or memory.total_bytes + beside <= memory.capacity_bytes:
            return
        trained = beside - sum(frozen.values())
        held = _held_beside(f"the {'critic' if role == 'actor' else 'actor'}'s", trained, frozen)
        field, step = self._beside_fix(role, trained >= sum(frozen.values()), list(frozen))
        raise RlsimError(
            f"the {role}'s update needs {(memory.total_bytes + beside) / 1e9:.1f} GB per device: its own "
            f"{memory.total_bytes / 1e9:.1f} GB beside {' and '.join(held)}, of {memory.capacity_bytes / 1e9:.1f} GB "
            "usable", source=self.source, field=field, fix=f"{step}, or use more devices per training replica (tp / pp)")

    def _beside_fix(self, role: str, trained_state_larger: bool, frozen_roles: list[str]) -> tuple[str, str]:
        """(field, step) of _check_beside's fix: for the larger of what sits beside the update."""
        if not trained_state_larger:
            return self._frozen_fix(frozen_roles)
        critic = self.critic_params.offload
        if role == "actor" and not (critic.params and critic.optimizer):
            return "workload.critic_offload", ("offload the critic between its passes (workload.critic_offload: "
                                               "{params: true, optimizer: true}; verl critic.model.fsdp_config."
                                               "param_offload / optimizer_offload)")
        return "workload.train_params.offload", ("offload the actor's state between its passes (workload.train_params."
                                                 "offload: {params: true, optimizer: true})")

    def _frozen_fix(self, roles: Sequence[str]) -> tuple[str, str]:
        """(field, step) that takes the frozen models' (``roles``) resident weights off the devices."""
        if "reference" in roles:
            return "workload.reference_cpu_offload", (
                "keep the reference's weights on the host (workload.reference_cpu_offload on a ZeRO-3 layout, verl's "
                "FSDP reference; or schedule.reference_swap_copies: 3, NeMo RL's swap)"
                + (", the reward model's too (workload.reward.cpu_offload)" if "reward" in roles else ""))
        return "workload.reward.cpu_offload", ("keep the reward model's weights on the host (workload.reward.cpu_offload "
                                               "on a ZeRO-3 layout), or serve it (workload.reward.served)")

    def _resident_engine_bytes(self, hbm_bytes: float) -> float:
        """What an engine that stays resident through training holds on a device of ``hbm_bytes``
        (0 otherwise): its share of that device's HBM."""
        if not engine_stays_resident(self.scenario):
            return 0.0
        return hbm_bytes * self.rollout_layout.gpu_memory_utilization

    def _beside_the_engine(self, exc: RlsimError) -> RlsimError:
        """A training memory error beside a resident engine says that the engine holds its share."""
        if not engine_stays_resident(self.scenario) or "does not fit in device memory" not in exc.message:
            return exc
        share = self.rollout_layout.gpu_memory_utilization
        out = exc.reworded(f"{exc.message} (the engine stays resident with {share:g} of HBM beside training: "
                           "schedule.switch.engine_resident, verl rollout.free_cache_engine false)",
                           f"lower workload.rollout_layout.gpu_memory_utilization below {share:g}, let the engine "
                           f"free its memory between phases, or {exc.fix}")
        # the engine's side of the conflict: whoever kept it resident or sized its share is named too
        out.related = [*exc.related, "schedule.switch", "workload.rollout_layout.gpu_memory_utilization"]
        return out

    def _in_the_layouts_terms(self, exc: RlsimError, packed: TrainLayout, given_rows: int,
                              key: str = "workload.train_layout.micro_batch") -> RlsimError:
        """A training or forward error that names the packed micro-batch (micro_batch = the sequences
        packed into one: schedule.micro_batching balanced) says what that is in the terms of the key
        that gave its rows (`key`: the update's train_layout.micro_batch, a forward's
        schedule.forward_micro_batch)."""
        if packed.micro_batch == given_rows or "micro_batch=" not in exc.message:
            return exc
        return exc.reworded(f"{exc.message} (micro_batch={packed.micro_batch}: the sequences packed into one "
                            f"micro-batch of {key}={given_rows} row(s) of "
                            f"{self.pack_tokens:,.0f} tokens, schedule.micro_batching: balanced)",
                            exc.fix.replace(SMALLER_MICRO_BATCH, "shorter packed rows (schedule.pack_tokens)")
                            if exc.fix and given_rows == 1 else exc.fix)

    def _planned_layout_note(self, exc: RlsimError, seq_lens: Any, layout: TrainLayout | None = None,
                             memory_miss: bool | None = None) -> RlsimError:
        """A memory error on a layout the planner chose (layout: auto) says why the plan did not see it:
        it judged memory on drawn batches of independent lengths, and the run trained a heavier one
        (colocated StaleSync trains its consolidated tail: long samples together). It carries that
        batch and the ``layout`` it did not fit (the planned one, or a failure's re-plan), so the run can
        plan again with it (api._run_planned). ``memory_miss``: whether ``exc`` is a memory miss (None:
        train_step_cost's check, read from its message; _check_beside's, the update beside what other
        models keep, is one)."""
        miss = "does not fit in device memory" in exc.message if memory_miss is None else memory_miss
        if self.scenario.workload.train_layout != "auto" or not miss:
            return exc
        refused = None if layout is None else {key: value for key, value in layout.as_dict().items() if key != "dp"}
        return HeavierBatchThanPlanned(exc, np.asarray(seq_lens, np.int64), refused)

    def reward_cpu_s(self, prompt_lens, response_lens) -> np.ndarray:
        """Each sample's rule-reward time on one host worker (workload.reward cpu_s_* fields): a
        response the engine cut at its cap (the response law's max, or max_model_len - prompt)
        ends without an answer, and the extractor searches all of it."""
        workload = self.scenario.workload
        reward = workload.reward
        response = np.asarray(response_lens, float)
        cap = np.full(len(response), float(workload.response_length.get("max") or math.inf))
        if workload.inference.max_model_len is not None:
            cap = np.minimum(cap, workload.inference.max_model_len - np.asarray(prompt_lens, float))
        return np.where(response >= cap, reward.capped_cpu_s_per_sample + reward.capped_cpu_s_per_token * response,
                        reward.cpu_s_per_sample + reward.cpu_s_per_token * response)

    def served(self, role, prompt_lens, response_lens, ranks) -> ServedCost:
        """Each sample's cost on the served pool of ``role`` at ``ranks`` (SERVED_FIELDS; llm/served.py)."""
        return self._served_on(role, ranks).each(prompt_lens, response_lens)

    def served_instance_devices(self, role) -> int:
        """Devices of one engine of the served ``role`` (its layout: tp x ep)."""
        if role not in self._served:
            raise ValueError(f"the workload serves no {role} ({SERVED_FIELDS[role]})")
        return self._served[role].layout.devices_per_instance

    def _resolve_served(self) -> dict[str, _Served]:
        """The served models' model, layout and engine constants (their inference over the rollout
        engine's), checked on rank 0's device before any pool is cut: a reward model under its score
        head (reward.served: no log-probability pass) and a distillation teacher."""
        workload, served = self.scenario.workload, {}
        if workload.reward.served is not None:
            served["reward_model"] = self._resolve_one(workload.reward.served, self.models["reward"], 0.0,
                                                       SERVED_FIELDS["reward_model"])
        if workload.distillation is not None:
            teacher = load_model(workload.distillation.teacher, field="workload.distillation.teacher", source=self.source)
            served["teacher"] = self._resolve_one(workload.distillation, teacher,
                                                  workload.distillation.logprob_pass_bytes_per_logit,
                                                  SERVED_FIELDS["teacher"])
        return served

    def _resolve_one(self, spec: Any, model: ModelSpec, bytes_per_logit: float, prefix: str) -> _Served:
        refuse_missing_architecture(self.scenario.workload.engine, model, self.source, f"{prefix}'s model")
        layout = RolloutLayout.from_mapping(spec.layout, source=self.source, field_name=f"{prefix}.layout")
        params = _without_speculation(self._engine_params, spec.inference, prefix)
        if spec.inference:
            try:
                params = InferenceParams.model_validate({**params.model_dump(), **spec.inference})
            except ValidationError as exc:
                raise validation_error(exc, source=self.source, prefix=f"{prefix}.inference",
                                       model=InferenceParams, fix="give workload.inference's keys") from None
        params, notes = model_forced(self.scenario.workload.engine, params, model)
        self.engine_notes += [f"{prefix}: {note}" for note in notes]
        StepCost(model, self.device, layout, params, layout_field=f"{prefix}.layout")
        return _Served(model, layout, params, bytes_per_logit, prefix)

    def _served_on(self, role: str, ranks) -> ServedScoring:
        """The served pool of ``role`` on ``ranks``: whole engines of its layout, each priced as the
        first (its devices, its collectives over the real links), once per pool."""
        key = (role, ranks.start, ranks.stop) if isinstance(ranks, range) else (role, *ranks)
        hit = self._served_pools.get(key)
        if hit is None:
            spec = self._served[role]
            field, per_engine = f"{spec.prefix}.layout", spec.layout.devices_per_instance
            if len(ranks) < per_engine:   # a reward model woken on a trainer pool smaller than an engine
                raise RlsimError(f"the {SERVED_NAMES[role]}'s engines take {per_engine} devices (tp x ep x pp), more than "
                                 f"the {len(ranks)} it runs on", source=self.source, field=field,
                                 fix=f"give a smaller {field}.tp, or more devices")
            first = list(ranks)[:per_engine]
            cost = StepCost(spec.model, instance_device(self.topology, first), spec.layout, spec.params,
                            collectives=self.collectives, ranks=first, layout_field=field)
            hit = self._served_pools[key] = ServedScoring(cost, len(ranks) // per_engine, spec.bytes_per_logit)
            workload = self.scenario.workload
            longest = float(workload.prompt_length.get("max") or 0) + float(workload.response_length.get("max") or 0)
            hit.check_fits(longest, SERVED_NAMES[role], field, self.source)
        return hit

    def _woken_reward_model(self, seq_lens, pool: _Pool) -> StageCost:
        """A reward model served on the trainer's devices (reward.served, devices unset; verl 0.9's
        colocated reward model, experimental/reward_loop compute_rm_score): its engines (the pool over
        its layout's tp x ep) woken, the batch scored at once as on a served pool (its pool time, and no
        less than its longest sample; one at a time: its latencies over the engines), the engines put
        back to sleep: served.sleep_wake_s and the weight shard to host and back (sleep level 1)."""
        spec = self.scenario.workload.reward.served
        self._check_woken_reward_model(pool)
        scoring = self._served_on("reward_model", pool.ranks)
        lens = np.asarray(seq_lens, np.int64)
        cost = scoring.each(lens, np.zeros(len(lens), np.int64))
        if spec.one_at_a_time:
            scored = max(float(cost.alone_s.sum()) / scoring.instances, float(cost.alone_s.max(initial=0.0)))
        else:
            scored = max(float(cost.pool_s.sum()), float(cost.alone_s.max(initial=0.0)))
        served = self._served["reward_model"]
        shard = served.model.weight_bytes(_bytes_per_weight(served.layout)) / served.layout.devices_per_instance
        copies = max(2.0 * shard / link for _, link in self._host_rates(pool))
        return StageCost(scored + spec.sleep_wake_s + copies, flops=float(cost.flops.sum()),
                         fixed_s=spec.sleep_wake_s + copies)

    def _check_woken_reward_model(self, pool: _Pool) -> None:
        """The reward model's engines wake beside what training keeps on the devices through the phase
        (rollout_phase_bytes' resident state, the rollout engine asleep unless it stays resident): their
        share of HBM (vLLM's gpu_memory_utilization, its weights inside it) and that state must fit, or
        the wake-up runs out of memory. Each device kind with its own shares of its own HBM (the
        largest kind's resident engine beside the smallest kind's HBM refused a pool that fits)."""
        lay, share = self.layout(len(pool.ranks)), self._served["reward_model"].layout.gpu_memory_utilization
        smallest = min(k.hbm_bytes for k in pool.kinds)   # the training state is the same on every device
        training = (resident_training_bytes(self.model, lay, self.switch_params, smallest, 0.0, self.train_params)
                    + self.critic_resident_bytes(lay, smallest))
        for device in pool.kinds:
            hbm = device.hbm_bytes
            resident = training + self._resident_engine_bytes(hbm)
            if hbm * share + resident <= hbm:
                continue
            fits = max(0.0, (hbm - resident) / hbm)
            raise RlsimError(
                f"the reward model's engines, woken on the trainer's devices, need {(hbm * share + resident) / 1e9:.1f} "
                f"GB per device (their share {share:g} of HBM, {hbm * share / 1e9:.1f} GB, + the state training keeps "
                f"resident {resident / 1e9:.1f} GB) on {device.name}'s {capacity_text(hbm)}", source=self.source,
                field="workload.reward.served.layout.gpu_memory_utilization",
                fix=f"lower it to <= {fits:.2f} (verl reward.reward_model.rollout.gpu_memory_utilization), serve the "
                    f"reward model on devices of its own (workload.reward.served.devices), or "
                    f"{self._resident_fix(lay, smallest)}")

    def _inference_shard_bytes(self) -> float:
        lay = self.rollout_layout
        return self.model.weight_bytes(self._weight_bytes_per_param()) / lay.devices_per_instance

    def _weight_bytes_per_param(self) -> float:
        return _bytes_per_weight(self.rollout_layout)

    def adapters_only_refit(self) -> bool:
        """Whether a refit sends the LoRA adapters alone (schedule.lora_refit 'adapters' with
        workload.lora): the engine keeps the frozen base, unless it discards its weights at sleep level 2."""
        switch = self.scenario.schedule.switch
        discards = switch.engine_sleep and switch.engine_sleep_level == 2
        return bool(self.model.adapter_rank) and self.scenario.schedule.lora_refit == "adapters" and not discards

    def _refit_model_bytes(self, per_param: float) -> float:
        """What one refit of the whole model sends at ``per_param`` bytes: its weights, or its adapters."""
        if self.adapters_only_refit():
            return self.model.params_adapter_total * per_param
        return self.model.weight_bytes(per_param)

    def weight_sync_s(self, src: range, dst: range) -> float:
        """Colocated (src == dst): reshard, each device receives its inference shard over scale-up.
        Split pools: every rollout instance needs the full weights from the trainer; bounded by the
        receivers' links and by the senders' aggregate links. LoRA: the adapters alone where the
        engine keeps its base (adapters_only_refit)."""
        shard = self._refit_model_bytes(self._weight_bytes_per_param()) / self.rollout_layout.devices_per_instance
        full = self.scenario.schedule.refit == "full-tensors"
        # the per-tensor CPU work issues the gathers: whichever is longer sets the pace
        gather = max(self.refit_gather_s(src), self.refit_tensors_s()) if full else 0.0
        if src == dst:
            # reshard inside each training replica + the instances on its devices: their own links
            # (a replica sits on consecutive ranks, one scale-up domain when it fits)
            local = list(src)[: max(self.train_group_devices, self.instance_devices)]
            bw = self._ring_bw_Bps(local)
            return gather + shard / (bw * self.sync_eff)
        ranks = sorted(set(src) | set(dst))
        bw = self._ring_bw_Bps(ranks)
        bw *= self.sync_eff
        model_bytes = self._refit_model_bytes(self._weight_bytes_per_param())
        if full:   # every full tensor broadcast to every rollout device as its bucket is gathered
            broadcast = model_bytes / bw
            overlap = self.scenario.schedule.refit_overlap
            return max(gather, broadcast) if overlap else gather + broadcast
        n_inst = max(1, len(dst) // self.instance_devices)
        return max(shard / bw, n_inst * model_bytes / (len(src) * bw))

    def fetch_broadcast_s(self, nbytes: float, ranks: Sequence[int]) -> float:
        """A hierarchical DistQueue fetch: the reader of a training replica broadcasts its DP share to
        the replica's other devices (TP x PP x CP, consecutive ranks), over their own links; the
        replicas do it side by side."""
        group = list(ranks)[: self.train_group_devices]
        return self.collectives.line_time_s("broadcast", group, nbytes) if len(group) > 1 else 0.0

    def refit_gather_s(self, src: Sequence[int]) -> float:
        """schedule.refit 'full-tensors': every training device receives every parameter it does not
        hold as a full tensor (the model's bytes x (1 - 1/share)), over the narrowest link of the
        ranks one model copy spans: its pipeline stages (strided over the whole pool, Megatron's
        tp-cp-ep-dp-pp order) or, with pp 1, the max(tp x cp, etp x ep) consecutive ranks of a stage;
        under ZeRO-3 the ranks of one copy of the sharded state (verl's FSDP actor gathers each
        parameter over its FSDP group: the whole pool, or an fsdp_size shard group under HSDP,
        train_layout.zero_shard_size). At schedule.refit_gather_bytes_per_param a parameter, else
        the engine's weight dtype."""
        lay = self.layout(len(src))
        stage_span = max(lay.tp * lay.cp, lay.expert_tp * lay.ep if self.model.is_moe else 1)
        if lay.zero >= 3:
            copy_span = lay.tp * lay.zero_shard * lay.pp
            ranks = list(src) if lay.pp > 1 else list(src)[:copy_span]
        else:
            copy_span = stage_span * lay.pp
            ranks = list(src) if lay.pp > 1 else list(src)[:stage_span]
        if copy_span <= 1:
            return 0.0
        per_param = self.scenario.schedule.refit_gather_bytes_per_param or self._weight_bytes_per_param()
        received = self._refit_model_bytes(per_param) * (1.0 - 1.0 / copy_span)
        return received / (self._ring_bw_Bps(ranks) * self.sync_eff)

    def refit_tensors_s(self) -> float:
        """schedule.refit 'full-tensors': the CPU time of producing the model's Hugging Face tensors
        one by one (schedule.refit_tensor_overhead_s each)."""
        # LoRA: the adapters alone, or the base and the adapters (verl at sleep level 2 sends both)
        tensors = self.model.adapter_tensor_count
        if not self.adapters_only_refit():
            tensors += self.model.hf_tensor_count
        return tensors * self.scenario.schedule.refit_tensor_overhead_s

    def _ring_bw_Bps(self, ranks: list[int]) -> float:
        """The narrowest link on the ring through ``ranks`` (topology links), times the k - 1
        edge-disjoint rings k fully linked devices run side by side (a full-mesh server: HCCL's and
        NCCL's channels each take other links; one ring read a 910B server's 196 GB/s as 28); one
        device: its scale-up rate."""
        if len(ranks) > 1:
            key = tuple(ranks)
            bw = self._ring_bw.get(key)
            if bw is None:
                rings = len(set(ranks)) - 1 if self.topology.fully_linked(ranks) else 1
                bw = self._ring_bw[key] = self.topology.bottleneck_bw_Bps(ranks) * rings
            return bw
        return self.topology.device_spec(int(ranks[0])).scaleup_bw_Bps if ranks else self.device.scaleup_bw_Bps

    def _train_weight_bytes(self, pool: _Pool) -> float:
        return self._resident_memory(pool).weights_bytes

    def _optimizer_grad_bytes(self, pool: _Pool) -> float:
        """What `offload_optimizer` moves: the optimizer state, and the gradients unless they are freed."""
        mem = self._resident_memory(pool)
        return mem.optimizer_bytes + (0.0 if self.switch_params.free_gradients else mem.gradients_bytes)

    def _resident_memory(self, pool: _Pool) -> MemoryBreakdown:
        """memory_per_device of the training layout on the pool (a token each, its states and
        weights) as the devices hold it (Megatron's cpu-offloaded optimizer share stays on the host,
        so a switch has none of it to move: device_resident), kept per (devices, smallest HBM) for
        this run's layouts: every phase switch asks."""
        key = (len(pool.ranks), pool.hbm_bytes)
        hit = self._memory.get(key)
        if hit is None:
            hit = self._memory[key] = device_resident(
                training_state_bytes(self.model, self.layout(key[0]), pool.hbm_bytes, self.train_params),
                self.train_params)
        return hit

    def switch(self, to_phase, ranks) -> SwitchCost:
        """Every device moves its own bytes over its own host link and HBM: the phase change ends
        when the slowest device kind of the pool is done."""
        pool = self.pool(ranks)
        p = self.switch_params
        moved: dict[str, float] = {}
        # vLLM sleep mode releases and re-creates the KV pool itself (its measured time, half a switch);
        # a resident engine releases nothing
        t = (0.0 if p.engine_resident else p.sleep_wake_s / 2 if p.engine_sleep else p.kv_realloc_s) + p.overhead_s
        to_rollout = to_phase == "rollout"
        host: dict[str, float] = {}      # bytes over the host link (one direction each)
        pageable: dict[str, float] = {}  # those of them through pageable memory, at its rate
        if p.offload_optimizer:
            key = "optimizer_offload" if to_rollout else "optimizer_onload"
            host[key] = self._optimizer_grad_bytes(pool)
            if p.optimizer_pageable:
                rates = self.scenario.schedule.host_copies
                pageable[key] = rates.offload_Bps if to_rollout else rates.onload_Bps
        if p.offload_weights:
            host["weight_offload" if to_rollout else "weight_onload"] = self._train_weight_bytes(pool)
        if p.engine_sleep and p.engine_sleep_level == 1:   # level 2 discards the weights: no copy
            host["engine_wake" if to_rollout else "engine_sleep"] = self._inference_shard_bytes()
        moved.update(host)
        copy = to_rollout and not p.bucketed
        if copy:
            moved["redundant_weight_copy"] = self._inference_shard_bytes()
        if p.free_gradients and not to_rollout:   # the freed gradient buffer comes back zero-filled
            moved["gradient_zero_fill"] = self._resident_memory(pool).gradients_bytes
        on_device = moved.get("redundant_weight_copy", 0.0) + moved.get("gradient_zero_fill", 0.0)
        pinned = sum(v for k, v in host.items() if k not in pageable)
        # the time as summed before the parts existed (their sum may differ in the last bit: the
        # figures stay byte-identical); the parts say whose work it is
        times, parts = [], []
        for device, link in self._host_rates(pool):
            host_s = pinned / link + sum(host[k] / min(link, rate) for k, rate in pageable.items())
            hbm = device.hbm_bw_Bps * device.hbm_efficiency
            times.append(t + host_s + on_device / hbm)
            parts.append(_switch_parts(host, pageable, moved, link, hbm, t - p.overhead_s, p.overhead_s))
        slowest = int(np.argmax(times))
        return SwitchCost(times[slowest], moved, parts[slowest])

    def engine_cycle(self, ranks) -> SwitchCost:
        """The engine put to sleep after a generation batch and woken before the next, the training
        side untouched: the engine's fixed part of both switches (half of sleep_wake_s each with
        engine_sleep, else kv_realloc_s each) and, at sleep level 1, its weight shard to host and back."""
        pool, p = self.pool(ranks), self.switch_params
        fixed = 0.0 if p.engine_resident else p.sleep_wake_s if p.engine_sleep else 2 * p.kv_realloc_s
        host = {}
        if p.engine_sleep and p.engine_sleep_level == 1:
            host = {"engine_sleep": self._inference_shard_bytes(), "engine_wake": self._inference_shard_bytes()}
        links = [link for _, link in self._host_rates(pool)]
        times = [fixed + sum(host.values()) / link for link in links]
        slowest = int(np.argmax(times))
        return SwitchCost(times[slowest], host, {"engine_memory": fixed,
                                                 "engine_weights": sum(host.values()) / links[slowest]})

    def inference_memory_bytes(self, ranks) -> float:
        """Rollout phase per device (the largest over the pool's device kinds): the engine's share of
        HBM, plus, on a colocated placement, what training leaves resident (a split placement's
        rollout devices hold the engine alone)."""
        pool = self.pool(ranks)
        if self.scenario.schedule.effective_placement != "colocated":
            return max(k.hbm_bytes for k in pool.kinds) * self.rollout_layout.gpu_memory_utilization
        return self.rollout_phase_bytes(self.layout(len(pool.ranks)), pool.kinds)

    def train_layout_of(self, ranks) -> dict[str, Any]:
        return self.layout(len(ranks)).as_dict()

    def rollout_phase_bytes(self, lay: TrainLayout, kinds: Sequence[DeviceSpec] | None = None) -> float:
        """The rollout phase's bytes per device with training layout ``lay`` resident, the largest
        over the device ``kinds`` (default: those of the pool the latest batch trained on, else the
        cluster's); on a colocated placement an RlsimError when they exceed a device's HBM (a
        re-plan uses it to reject layouts)."""
        if kinds is None:
            ranks = self._last_train_ranks
            kinds = self.pool(ranks).kinds if ranks is not None else self.cluster_devices
        hbm = min(k.hbm_bytes for k in kinds)
        frozen = self._frozen_bytes("actor", lay, hbm)   # the engine's devices are the actor's
        resident = (resident_training_bytes(self.model, lay, self.switch_params, hbm, self._inference_shard_bytes(),
                                            self.train_params) + self.critic_resident_bytes(lay, hbm)
                    + sum(frozen.values()))
        totals = []
        for device in kinds:
            engine = device.hbm_bytes * self.rollout_layout.gpu_memory_utilization
            total = engine + resident
            if self.scenario.schedule.effective_placement == "colocated" and total > device.hbm_bytes:
                field, fix = self._engine_share_fix(device.hbm_bytes, resident, lay, hbm)
                of_it = f", {frozen_text(frozen)} {sum(frozen.values()) / 1e9:.1f} GB of it" if frozen else ""
                raise RlsimError(
                    f"the rollout phase needs {total / 1e9:.1f} GB per device (engine {engine / 1e9:.1f} GB + "
                    f"resident training state {resident / 1e9:.1f} GB{of_it}) on {capacity_text(device.hbm_bytes)}",
                    source=self.source, field=field, fix=fix)
            totals.append(total)
        return max(totals)

    def _engine_share_fix(self, hbm_bytes: float, resident: float, lay: TrainLayout,
                          state_hbm_bytes: float) -> tuple[str, str]:
        """The field to name and the fix, in the terms the user wrote: the engine share they set, the
        default they did not set, or the planner's (layout: auto)."""
        fits = max(0.0, (hbm_bytes - resident) / hbm_bytes)
        share = self.rollout_layout.gpu_memory_utilization
        others = self._resident_fix(lay, state_hbm_bytes)
        if hbm_bytes - resident < self._inference_shard_bytes():   # no share holds even the engine's weights
            return ("workload.train_layout", f"the resident training state leaves {fits:.2f} of HBM, less than the "
                    f"engine's weight shard ({self._inference_shard_bytes() / 1e9:.1f} GB): no "
                    f"gpu_memory_utilization fits; {others}")
        given = self.scenario.workload.rollout_layout
        if given == "auto":
            return ("workload.rollout_layout", f"the planned engine takes {share:g} of HBM; give "
                    f"planner.rollout.gpu_memory_utilization <= {fits:.2f} or a workload.rollout_layout, or {others}")
        if "gpu_memory_utilization" not in given:
            return ("workload.rollout_layout", f"workload.rollout_layout does not set gpu_memory_utilization, so the "
                    f"engine takes vLLM's default {share:g} of HBM; set workload.rollout_layout.gpu_memory_utilization "
                    f"<= {fits:.2f}, or {others}")
        return ("workload.rollout_layout.gpu_memory_utilization",
                f"lower gpu_memory_utilization ({share:g}) to <= {fits:.2f}, or {others}")

    def _resident_fix(self, lay: TrainLayout, hbm_bytes: float) -> str:
        """What shrinks the training state resident through the rollout, as this run has it (training
        layout `lay`, its state sized on `hbm_bytes` devices as resident_training_bytes sizes it)."""
        switch, offload = self.switch_params, self.train_params.offload
        steps = []
        if not (switch.offload_optimizer or offload.optimizer):
            steps.append("offload the optimizer state (schedule.switch.offload_optimizer: true, or the per-phase "
                         "workload.train_params.offload.optimizer)")
        if not (switch.offload_weights or offload.params):
            steps.append("offload the training weights (schedule.switch.offload_weights: true)")
        buffer, bucket = self._kept_gradient_state(lay, hbm_bytes)
        if buffer:
            steps.append("offload the kept gradient buffer (workload.train_params.offload.grads: true; verl's "
                         "actor.megatron.param_offload frees it with the parameters)")
        elif bucket:   # the per-phase offload.grads too, unless ZeRO-Offload's partition is on the host already
            per_phase = "" if self.train_params.memory.grad_partition_on_host else \
                ", or the per-phase workload.train_params.offload.grads: true"
            steps.append(f"free DeepSpeed's kept reduction bucket (schedule.switch.free_gradients: true{per_phase}: "
                         "stage3.py offload_states' contiguous_grad_buffer, which OpenRLHF's --ds.enable_sleep calls "
                         "unless --ds.adam_offload)")
        if not switch.bucketed:
            steps.append("bucket the weights (schedule.switch.bucketed: true)")
        critic = self.critic_params.offload
        if self.scenario.workload.algorithm == "ppo" and not (critic.params and critic.optimizer):
            steps.append("offload the critic between its passes (workload.critic_offload: {params: true, "
                         "optimizer: true})")
        on_trainer = frozen_roles_beside(self.scenario, "actor")
        if on_trainer:
            steps.append(self._frozen_fix(on_trainer)[1])
        more = "use more devices per training replica (tp / pp)"
        return "".join(f"{step}, or " for step in steps) + more   # none left: more devices alone

    def _kept_gradient_state(self, lay: TrainLayout, hbm_bytes: float) -> tuple[bool, bool]:
        """(the gradient buffer, DeepSpeed's kept reduction bucket): whether each is part of the actor's
        training state resident through the rollout on layout `lay` (resident_training_bytes: the stack
        keeps it, kept_gradient_bytes, and the switch neither moves it with the optimizer state nor frees
        it)."""
        switch = self.switch_params
        if switch.offload_optimizer or switch.free_gradients:
            return False, False
        mem = training_state_bytes(self.model, lay, hbm_bytes, self.train_params)
        kept = kept_gradient_bytes(mem, self.train_params) > 0
        return gradient_buffer_kept(self.train_params) and kept, kept and mem.kept_buffers_bytes > 0

    def update_offload_s(self, role, ranks) -> float:
        """The per-phase offload's round trip (train_params.offload, scope update): what it offloads
        reloaded before the phase's first optimizer step and offloaded after its last, once per
        training phase (train_step_cost charges scope optimizer_step itself)."""
        params = self.params_of(role)
        offload = params.offload
        if not offload.any or offload.scope != "update":
            return 0.0
        pool = self.pool(ranks)
        lay = self.layout(len(pool.ranks))
        memory = training_state_bytes(self.models[role], lay, min(k.hbm_bytes for k in pool.kinds), params)
        return offload_time_s(memory, offload_Bps(self.topology, self._placed(pool, len(pool.ranks)), params), params)

    def train_flops_per_token(self, seq_len) -> float:
        return float(self.model.train_flops_per_token(seq_len))

    def rollout_flops_per_token(self, context_len: float) -> float:
        """As _rollout_inputs counts a rollout's flops: the policy's forward at the mean context."""
        return float(self.model.forward_flops_per_token(context_len))


def _switch_parts(host: Mapping[str, float], pageable: Mapping[str, float], moved: Mapping[str, float], link: float,
                  hbm_Bps: float, engine_fixed_s: float, overhead_s: float) -> dict[str, float]:
    """A switch's seconds on one device kind by whose work they are (SwitchCost.parts_s): the
    engine's KV pool (its fixed part), the engine's weight copies (to / from the host, the unbucketed
    redundant copy), the training state's copies (optimizer, gradients, weights; the gradient zero
    fill), the fixed overhead."""
    seconds = {key: nbytes / min(link, pageable.get(key, link)) for key, nbytes in host.items()}
    engine = sum(v for key, v in seconds.items() if key.startswith("engine_")) \
        + moved.get("redundant_weight_copy", 0.0) / hbm_Bps
    trainer = sum(v for key, v in seconds.items() if not key.startswith("engine_")) \
        + moved.get("gradient_zero_fill", 0.0) / hbm_Bps
    return {"engine_memory": engine_fixed_s, "engine_weights": engine, "trainer": trainer, "overhead": overhead_s}
