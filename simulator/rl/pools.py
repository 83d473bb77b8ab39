"""Device pools (contiguous rank ranges) and what runs where.

Pools are sized in whole rollout instances and whole training replicas (TP x PP x CP), so no
device is silently half-used. ``resolve_auto_layouts`` is the one place ``layout: auto`` is
decided; the planner (issue 7) replaces it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import permutations
from typing import Any

from ..errors import RlsimError, counted
from ..scenario import AUX_POOL_ROLES, ScheduleConfig


@dataclass(frozen=True)
class Pool:
    name: str
    start: int
    count: int

    @property
    def ranks(self) -> range:
        return range(self.start, self.start + self.count)


def _round_down(n: int, unit: int) -> int:
    return (n // unit) * unit


def requested_rollout_devices(schedule: ScheduleConfig, n_devices: int) -> int:
    """The rollout devices a split placement asks for: rollout_devices, else rollout_fraction of them
    (build_pools then rounds to whole training replicas and rollout instances)."""
    return schedule.rollout_devices or round(n_devices * schedule.rollout_fraction)


def split_warning(schedule: ScheduleConfig, n_devices: int, pools: dict[str, Pool]) -> str | None:
    """A line saying that whole replicas and instances moved the asked split of the devices (the
    rollout share of split pools, the aux share of fuse: actor), or None when they did not."""
    if "rollout" in pools:
        n_devices -= sum(aux_pool_sizes(schedule).values())   # the split is of the devices beside the aux pools
        want, got, pool = requested_rollout_devices(schedule, n_devices), pools["rollout"].count, "rollout"
        knob = "rollout_devices" if schedule.rollout_devices else "rollout_fraction"
        value = schedule.rollout_devices or schedule.rollout_fraction
        what = "to generate" + (" beside the aux pool" if schedule.aux_devices else "")
    elif "aux" in pools and "actor" in pools:
        want, got, pool = max(1, round(n_devices * schedule.aux_fraction)), pools["aux"].count, "aux"
        knob, value, what = "aux_fraction", schedule.aux_fraction, "for the reference, reward and critic"
    else:
        return None
    if got == want:
        return None
    default = "" if knob in schedule.model_fields_set else "the default "
    return (f"{default}schedule.{knob}={value:g} asks {want} of {n_devices} devices {what}; whole training "
            f"replicas and rollout instances give the {pool} pool {got} (fraction {got / n_devices:.3g}); give a "
            "split on their granules to run the one asked")


def build_pools(schedule: ScheduleConfig, n_devices: int, instance_devices: int,
                train_group_devices: int, source: str = "<scenario>", unit_text: str = "",
                node_of: Callable[[int], int] | None = None) -> dict[str, Pool]:
    """colocated: {actor} (fuse=full), with schedule.aux_devices {actor, aux-reward} (verl's reward
    pool after the actor's devices), or {actor, aux} (fuse=actor); otherwise {rollout, train}, and
    with schedule.aux_devices {rollout, train, aux...}: the aux pools' devices set apart first, laid
    after the training pool's each on the fewest nodes (lay_out_pools; ``node_of``: a rank's node,
    Topology.node_of; None: in aux_pool_sizes' order), the rest split.
    ``train_group_devices``: the training pool's granule (TrainLayout.pool_unit: whole replicas that
    also fold the experts), so a split that the fraction would put between granules rounds to one;
    ``unit_text`` what makes it (TrainLayout.pool_unit_text), said when none fits."""
    why = f" ({unit_text})" if unit_text else ""
    unit = math.lcm(instance_devices, train_group_devices)
    if schedule.effective_placement == "colocated":
        if schedule.fuse == "full":
            aux = _aux_devices(schedule, n_devices, instance_devices, train_group_devices, source)
            count = _round_down(n_devices - aux, unit)
            if count == 0:
                raise _no_colocated_pool(n_devices - aux, instance_devices, train_group_devices, why, source)
            pools = {"actor": Pool("actor", 0, count)}
            for name, size in aux_pool_sizes(schedule).items():   # the reward model's, after the actor's
                pools[name] = Pool(name, n_devices - aux, size)
            return pools
        aux = max(1, round(n_devices * schedule.aux_fraction))
        actor = _round_down(n_devices - aux, unit)
        aux = n_devices - actor
        if actor == 0:
            raise RlsimError("no devices left for the actor after the aux pool", source=source,
                             field="schedule.aux_fraction", fix="lower aux_fraction or use fuse: full")
        return {"actor": Pool("actor", 0, actor), "aux": Pool("aux", actor, aux)}
    aux = _aux_devices(schedule, n_devices, instance_devices, train_group_devices, source)
    pools = _split(schedule, n_devices - aux, instance_devices, train_group_devices, source, why)
    used = pools["train"].start + pools["train"].count
    pools.update(lay_out_pools(used, aux_pool_sizes(schedule), node_of))
    return pools


def lay_out_pools(start: int, sizes: Mapping[str, int], node_of: Callable[[int], int] | None) -> dict[str, Pool]:
    """Pools of ``sizes`` devices, one contiguous rank range each, filling ranks from ``start`` on
    without a gap, in the order that puts them on the fewest nodes (the least sum over the pools of
    the nodes each spans: a pool that fits in one node lands inside one where the free devices
    allow), ties in the order of ``sizes``; without ``node_of`` in that order. It models the
    frameworks' placement: OpenRLHF 0.11.2 creates a Ray placement group per model, its GPU bundles
    under strategy PACK (openrlhf/trainer/ray/launcher.py RayActorGroup._initiate_actors,
    openrlhf/cli/train_ppo_ray.py), which Ray packs on as few nodes as it can; verl 0.7.0 one group
    per node of a resource pool under STRICT_PACK (verl/single_controller/ray/base.py
    RayResourcePool.get_placement_groups). The pools are few (three aux models, two served ones):
    every order is tried."""
    spans: dict[tuple[int, int], int] = {}

    def nodes_spanned(first: int, count: int) -> int:
        if (first, count) not in spans:
            spans[first, count] = len({node_of(rank) for rank in range(first, first + count)}) if node_of else 1
        return spans[first, count]

    def total_spans(order: tuple[str, ...]) -> int:
        firsts = [start + sum(sizes[name] for name in order[:i]) for i in range(len(order))]
        return sum(nodes_spanned(first, sizes[name]) for first, name in zip(firsts, order, strict=True))

    best = min(permutations(sizes), key=total_spans)   # min keeps the first of equals: ``sizes``' order
    pools, first = {}, start
    for name in best:
        pools[name] = Pool(name, first, sizes[name])
        first += sizes[name]
    return pools


# Models served by inference engines on devices of their own, in the order verl places their resource
# pools after the job's (main_ppo init_resource_pool_mgr: global_pool, reward_pool, teacher_pool), with
# the scenario section that gives each and its name in messages.
SERVED_FIELDS = {"reward_model": "workload.reward.served", "teacher": "workload.distillation"}
SERVED_NAMES = {"reward_model": "reward model", "teacher": "teacher"}


def served_devices(workload: Any) -> dict[str, int]:
    """The devices each served model of the workload sets apart (SERVED_FIELDS order; none: {})."""
    specs = {"reward_model": workload.reward.served, "teacher": workload.distillation}
    return {role: spec.devices for role, spec in specs.items() if spec is not None and spec.devices is not None}


def served_pools(workload: Any, n_devices: int, engine_devices: Callable[[str], int],
                 source: str = "<scenario>", node_of: Callable[[int], int] | None = None) -> dict[str, Pool]:
    """The served models' pools, after the devices the schedule's pools are built on: each its
    ``devices`` (served_devices), whole engines of ``engine_devices(role)`` (tp x ep) each, laid out
    each on the fewest nodes (lay_out_pools; ties in verl's order, SERVED_FIELDS)."""
    sizes = served_devices(workload)
    start = n_devices - sum(sizes.values())
    for role, count in sizes.items():
        field, unit = f"{SERVED_FIELDS[role]}.devices", engine_devices(role)
        if count % unit:
            fits = [n for n in (count - count % unit, count - count % unit + unit) if n > 0]
            raise RlsimError(f"{count} devices are not whole {SERVED_NAMES[role]} engines of {unit} devices (layout "
                             "tp x ep)", source=source, field=field, fix=f"give {' or '.join(map(str, fits))}")
    if start <= 0:
        given = " and ".join(f"the {SERVED_NAMES[role]}'s {count}" for role, count in sizes.items())
        raise RlsimError(f"{given} devices leave none of the job's {n_devices} to train and generate",
                         source=source, field=f"{SERVED_FIELDS[next(iter(sizes))]}.devices",
                         fix=f"give fewer than {n_devices} in all, or a topology with more devices")
    return lay_out_pools(start, sizes, node_of)


def role_pool(schedule: ScheduleConfig, role: str) -> str:
    """The pool a role's passes run on, as the schedules place them: "aux" (fuse: actor's pool, or
    one schedule.aux_devices count for every aux role), "aux-<group>" (the aux_devices group naming
    it), else "main" (the trainer's devices)."""
    if role not in AUX_POOL_ROLES:
        return "main"
    if getattr(schedule, "fuse", None) == "actor":
        return "aux"
    given = schedule.aux_devices
    if isinstance(given, dict):
        return next((f"aux-{group}" for group in given if role in group.split("+")), "main")
    return "aux" if given else "main"


def aux_pool_sizes(schedule: ScheduleConfig) -> dict[str, int]:
    """schedule.aux_devices as pools: {"aux": N}, or {"aux-<group>": N} per model group, the largest
    first, then by name: a fixed order, whatever the order of the YAML mapping (which is unordered: a
    round trip through yaml.safe_dump sorts it), in which the pools are laid out (lay_out_pools: ties)
    and their clocks run."""
    given = schedule.aux_devices
    if isinstance(given, dict):   # a group's roles in any order ('critic+reward', 'reward+critic') sort alike
        order = sorted(given, key=lambda group: (-given[group], "+".join(sorted(group.split("+")))))
        return {f"aux-{group}": given[group] for group in order}
    return {"aux": given} if given else {}


def _aux_devices(schedule: ScheduleConfig, n_devices: int, instance_devices: int, train_group_devices: int,
                 source: str) -> int:
    """The devices schedule.aux_devices sets apart (0 without it); an error when a pool is not whole
    replicas of the training layout (its models run that layout) or they leave no room for one
    training replica and one rollout instance."""
    sizes = aux_pool_sizes(schedule)
    for name, count in sizes.items():
        if count % train_group_devices:
            field = "schedule.aux_devices" + (f".{name[len('aux-'):]}" if name != "aux" else "")
            fits = [n for n in (count - count % train_group_devices, count - count % train_group_devices
                                + train_group_devices) if n > 0]
            raise RlsimError(f"{count} devices are not whole replicas of the training layout ({train_group_devices} "
                             "devices), which the reference, reward and critic passes run", source=source, field=field,
                             fix=f"give {' or '.join(map(str, fits))}")
    aux = sum(sizes.values())
    room = n_devices - train_group_devices - instance_devices
    if aux and aux > room:
        raise RlsimError(f"aux_devices={aux} leaves no room for a training replica ({train_group_devices} devices) "
                         f"and a rollout instance ({instance_devices}) on {n_devices} devices", source=source,
                         field="schedule.aux_devices",
                         fix=f"give at most {room}" if room > 0 else "give more devices or smaller layouts")
    return aux


def _no_colocated_pool(n_devices: int, instance_devices: int, train_group_devices: int, why: str,
                       source: str) -> RlsimError:
    """A colocated pool is whole training replicas and whole rollout instances at once (a multiple of
    both); where each fits but no common multiple does, the error says so rather than that neither fits
    (24 devices, replicas of 3 and instances of 16: 48)."""
    if max(instance_devices, train_group_devices) > n_devices:
        return RlsimError(f"{n_devices} devices cannot hold one training replica of {train_group_devices}{why} "
                          f"and one rollout instance of {instance_devices}", source=source,
                          field="workload.train_layout",
                          fix="use fewer TP x PP (with experts: a smaller ep or etp) or more devices")
    unit = math.lcm(instance_devices, train_group_devices)
    return RlsimError(f"a colocated pool trains whole replicas of {train_group_devices} devices{why} and generates on "
                      f"whole rollout instances of {instance_devices}, so it takes a multiple of both, {unit}: more "
                      f"than the {n_devices} devices", source=source, field="workload.train_layout",
                      fix=f"use a training replica and a rollout instance of which one divides the other (or whose "
                          f"least common multiple is at most {n_devices}), or at least {unit} devices")


def aux_devices_with_room(schedule: ScheduleConfig, n_devices: int, source: str) -> int:
    """The devices schedule.aux_devices sets apart on ``n_devices``, refused as a run refuses them where they
    leave no room for a training replica and a rollout instance of one device each (the planner's check,
    before the layouts are known)."""
    return _aux_devices(schedule, n_devices, 1, 1, source)


def _split(schedule: ScheduleConfig, n_devices: int, instance_devices: int, train_group_devices: int,
           source: str, why: str) -> dict[str, Pool]:
    """{rollout, train} on the first ``n_devices``: whole rollout instances and training replicas."""
    field_name = "schedule.rollout_devices" if schedule.rollout_devices else "schedule.rollout_fraction"
    want = requested_rollout_devices(schedule, n_devices)
    if schedule.rollout_devices and want > n_devices - train_group_devices:
        room = n_devices - train_group_devices
        raise RlsimError(f"rollout_devices={want} leaves {max(n_devices - want, 0)} of the "
                         f"{counted(n_devices, 'device')} to train on, and a training replica needs "
                         f"{counted(train_group_devices, 'device')}{why}", source=source, field=field_name,
                         fix=f"give at most {room} (the rest train), or use rollout_fraction" if room > 0 else
                         f"no rollout pool fits beside a training replica of {counted(train_group_devices, 'device')} on "
                         f"{counted(n_devices, 'device')}: give more devices or a smaller train_layout")
    # the trainer gets whole replicas nearest to its share, leaving room for one rollout instance at
    # least (a share that rounds to none, 0.05 of 16 devices, is rounded to the nearest split that
    # runs, and the run's warning says so); the rollout whole instances of the rest
    most = _round_down(n_devices - instance_devices, train_group_devices)
    nearest = int(round((n_devices - want) / train_group_devices)) * train_group_devices
    train = min(max(train_group_devices, nearest), most)
    rollout = _round_down(n_devices - train, instance_devices)
    if most < train_group_devices or rollout <= 0:
        raise RlsimError(f"{n_devices} devices cannot hold one training replica of {train_group_devices}"
                         f"{why} and one rollout instance of {instance_devices}", source=source, field=field_name,
                         fix="use more devices or smaller layouts (with experts: a smaller ep or etp)")
    return {"rollout": Pool("rollout", 0, rollout), "train": Pool("train", rollout, train)}


def resolve_auto_layouts(*, weight_bytes: float, params_total: float, is_moe: bool, num_experts: int,
                         hbm_bytes: float, devices_per_domain: int, n_devices: int,
                         train_layout: dict[str, Any] | str, rollout_layout: dict[str, Any] | str,
                         memory_fraction: float = 0.6) -> tuple[dict[str, Any], dict[str, Any]]:
    """The simple documented default for ``auto`` (replaced by the planner, issue 7):
    rollout: smallest power-of-two TP (x EP = TP for MoE) whose BF16 weights take at most half of
    ``memory_fraction`` x HBM, leaving the rest to the KV cache; train: TP = min(8, domain),
    then the smallest power-of-two PP whose weights + grads (4 B/param) + ZeRO-1 optimizer
    (12 B/param over DP) fit in ``memory_fraction`` x HBM (activations get the rest), EP for
    MoE = min(8, experts) dividing the expert share. ``memory_fraction`` is a heuristic."""
    budget = hbm_bytes * memory_fraction
    out_train = dict(train_layout) if isinstance(train_layout, dict) else {}
    out_roll = dict(rollout_layout) if isinstance(rollout_layout, dict) else {}
    if rollout_layout == "auto":
        tp = 1
        while weight_bytes / tp > budget / 2 and tp < n_devices:
            tp *= 2
        out_roll = {"tp": tp, "ep": tp if is_moe else 1}
    if train_layout == "auto":
        tp = min(8, devices_per_domain, n_devices)
        ep = min(8, num_experts) if is_moe else 1
        pp = 1
        while True:
            dp = max(1, n_devices // (tp * pp))
            shard = params_total / (tp * pp) / (ep if is_moe else 1)
            if shard * 4 + shard * 12 / dp <= budget or tp * pp * 2 > n_devices:
                break
            pp *= 2
        out_train = {"tp": tp, "pp": pp, "ep": ep, "zero": 1, "recompute": "full", "micro_batch": 1}
    return out_train, out_roll
