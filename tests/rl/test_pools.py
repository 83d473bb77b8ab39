"""Direct tests of simulator/rl/pools.py build_pools: pools are contiguous, never overlap, never
exceed the cluster, and hold whole rollout instances and whole training replicas."""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.train_layout import TrainLayout
from simulator.rl.pools import Pool, aux_pool_sizes, build_pools, lay_out_pools, served_pools
from simulator.scenario import ScheduleConfig


@dataclass(frozen=True)
class _Schedule:
    """The fields build_pools reads from a ScheduleConfig (kept apart from the scenario models)."""

    effective_placement: str
    fuse: str = "full"
    aux_fraction: float = 0.125
    rollout_fraction: float = 0.5
    rollout_devices: int | None = None
    aux_devices: int | None = None


def _check_layout(pools: dict[str, Pool], n_devices: int) -> None:
    ranges = sorted((p.start, p.start + p.count, name) for name, p in pools.items())
    assert ranges[0][0] == 0
    for (_, end, _), (start, _, _) in zip(ranges, ranges[1:], strict=False):
        assert end == start, f"pools overlap or leave a gap: {ranges}"
    assert ranges[-1][1] <= n_devices
    assert all(p.count > 0 and list(p.ranks) == list(range(p.start, p.start + p.count)) for p in pools.values())


def test_pool_ranks() -> None:
    assert list(Pool("x", 4, 3).ranks) == [4, 5, 6]


def test_real_schedule_configs() -> None:
    pools = build_pools(ScheduleConfig(kind="colocated"), 16, 2, 4)
    assert pools == {"actor": Pool("actor", 0, 16)}
    pools = build_pools(ScheduleConfig(kind="disaggregated", rollout_fraction=0.25), 16, 2, 4)
    assert pools == {"rollout": Pool("rollout", 0, 4), "train": Pool("train", 4, 12)}
    pools = build_pools(ScheduleConfig(kind="stalesync"), 8, 2, 4)
    assert set(pools) == {"actor"}


@pytest.mark.parametrize(("n", "inst", "group", "actor"), [(16, 2, 4, 16), (18, 4, 6, 12), (7, 2, 2, 6)])
def test_colocated_full_is_whole_units(n: int, inst: int, group: int, actor: int) -> None:
    assert build_pools(_Schedule("colocated"), n, inst, group) == {"actor": Pool("actor", 0, actor)}


def test_a_colocated_pool_with_no_common_multiple_of_replica_and_instance_says_so() -> None:
    """24 devices hold a replica of 3 and an instance of 16, but no colocated pool of both (48): the
    error said '24 devices cannot hold one training replica of 3 and one rollout instance of 16'."""
    with pytest.raises(RlsimError) as info:
        build_pools(_Schedule("colocated"), 24, 16, 3)
    text = str(info.value)
    assert "cannot hold" not in text
    assert "whole replicas of 3 devices" in text and "whole rollout instances of 16" in text
    assert "a multiple of both, 48: more than the 24 devices" in text and "at least 48 devices" in text
    assert info.value.field == "workload.train_layout"
    with pytest.raises(RlsimError, match="16 devices cannot hold one training replica of 32"):   # too big alone
        build_pools(_Schedule("colocated"), 16, 2, 32)


def test_colocated_actor_leaves_the_rest_to_aux() -> None:
    pools = build_pools(_Schedule("colocated", fuse="actor", aux_fraction=0.125), 16, 2, 4)
    assert pools == {"actor": Pool("actor", 0, 12), "aux": Pool("aux", 12, 4)}


def test_rollout_devices_wins_over_the_fraction() -> None:
    pools = build_pools(_Schedule("disaggregated", rollout_devices=6, rollout_fraction=0.9), 16, 2, 2)
    assert pools == {"rollout": Pool("rollout", 0, 6), "train": Pool("train", 6, 10)}


def test_aux_devices_are_set_apart_before_the_split() -> None:
    """schedule.aux_devices: exactly that many devices, after the training pool; the rollout share
    is of the devices beside them (0.25 of 12, not of 16)."""
    pools = build_pools(_Schedule("disaggregated", rollout_fraction=0.25, aux_devices=4), 16, 1, 1)
    assert pools == {"rollout": Pool("rollout", 0, 3), "train": Pool("train", 3, 9), "aux": Pool("aux", 12, 4)}
    real = build_pools(ScheduleConfig(kind="one-step-off", rollout_devices=4, aux_devices=6), 16, 2, 2)
    assert real == {"rollout": Pool("rollout", 0, 4), "train": Pool("train", 4, 6), "aux": Pool("aux", 10, 6)}
    per_model = build_pools(ScheduleConfig(kind="disaggregated", rollout_devices=4,
                                           aux_devices={"reference": 2, "critic+reward": 4}), 16, 2, 2)
    assert per_model == {"rollout": Pool("rollout", 0, 4), "train": Pool("train", 4, 6),   # the largest first
                         "aux-critic+reward": Pool("aux-critic+reward", 10, 4),
                         "aux-reference": Pool("aux-reference", 14, 2)}


@pytest.mark.parametrize(("schedule", "n", "inst", "group", "field"), [
    (_Schedule("disaggregated", aux_devices=6), 8, 2, 2, "schedule.aux_devices"),
    (_Schedule("disaggregated", aux_devices=3), 16, 2, 2, "schedule.aux_devices"),
    (_Schedule("colocated"), 6, 4, 8, "workload.train_layout"),
    (_Schedule("colocated", fuse="actor", aux_fraction=0.9), 8, 2, 4, "schedule.aux_fraction"),
    (_Schedule("disaggregated"), 8, 2, 8, "schedule.rollout_fraction"),
    (_Schedule("disaggregated", rollout_devices=2), 8, 4, 8, "schedule.rollout_devices"),
    (_Schedule("disaggregated"), 4, 8, 2, "schedule.rollout_fraction"),
])
def test_impossible_pools_raise_naming_the_field(schedule: _Schedule, n: int, inst: int, group: int,
                                                 field: str) -> None:
    with pytest.raises(RlsimError) as info:
        build_pools(schedule, n, inst, group, source="my.yaml")
    assert info.value.field == field and info.value.source == "my.yaml" and info.value.fix


sizes = st.sampled_from([1, 2, 3, 4, 6, 8, 16])
fractions = st.floats(0.01, 0.99)


@given(st.integers(1, 512), sizes, sizes, st.booleans(), fractions)
def test_colocated_pools(n: int, inst: int, group: int, full: bool, aux_fraction: float) -> None:
    schedule = _Schedule("colocated", fuse="full" if full else "actor", aux_fraction=aux_fraction)
    unit = math.lcm(inst, group)
    try:
        pools = build_pools(schedule, n, inst, group)
    except RlsimError:
        aux = max(1, round(n * aux_fraction))
        assert (n < unit) if full else (n - aux < unit)
        return
    _check_layout(pools, n)
    assert pools["actor"].count % unit == 0
    if full:
        assert set(pools) == {"actor"} and n - pools["actor"].count < unit
    else:
        assert set(pools) == {"actor", "aux"} and pools["aux"].count >= 1
        assert pools["actor"].count + pools["aux"].count == n


@given(st.integers(1, 512), sizes, sizes, fractions, st.none() | st.integers(1, 512), st.none() | st.integers(1, 64))
def test_split_pools(n: int, inst: int, group: int, fraction: float, rollout_devices: int | None,
                     aux_devices: int | None) -> None:
    schedule = _Schedule("disaggregated", rollout_fraction=fraction, rollout_devices=rollout_devices,
                         aux_devices=aux_devices)
    try:
        pools = build_pools(schedule, n, inst, group)
    except RlsimError as exc:
        if aux_devices and (aux_devices % group or aux_devices > n - inst - group):
            assert exc.field == "schedule.aux_devices"
            return
        assert exc.field == ("schedule.rollout_devices" if rollout_devices else "schedule.rollout_fraction")
        return
    _check_layout(pools, n)
    assert set(pools) == {"rollout", "train"} | ({"aux"} if aux_devices else set())
    if aux_devices:   # exactly the devices asked, right after the trainer's; the split is of the rest
        assert pools["aux"].count == aux_devices
        assert pools["aux"].start == pools["train"].start + pools["train"].count
        n -= aux_devices
    rollout, train = pools["rollout"].count, pools["train"].count
    assert rollout % inst == 0 and train % group == 0
    assert n - rollout - train < inst  # the rollout takes every whole instance left by the trainer


@given(st.integers(1, 64), sizes, sizes, fractions)
def test_split_raises_only_when_nothing_fits(n: int, inst: int, group: int, fraction: float) -> None:
    """Any fraction runs where a replica and an instance fit side by side (0.05 of 16 devices,
    rounding to no rollout, was refused as if 16 devices could not hold them: a new-user trial)."""
    assume(n >= group + inst)
    pools = build_pools(_Schedule("disaggregated", rollout_fraction=fraction), n, inst, group)
    _check_layout(pools, n)
    assert pools["rollout"].count >= inst and pools["train"].count >= group


@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2]), pp=st.integers(1, 4),
       ep=st.sampled_from([1, 2, 4, 8, 16]), etp=st.sampled_from([None, 1, 2, 8]), dp=st.integers(1, 64))
def test_pool_unit_is_the_smallest_pool_that_folds_the_experts(tp, cp, pp, ep, etp, dp) -> None:
    """A training pool of dp replicas folds etp x ep into tp x cp x dp iff it is a multiple of
    TrainLayout.pool_unit: the unit is exactly the granule of the pools build_pools may make."""
    layout = TrainLayout(tp=tp, cp=cp, pp=pp, ep=ep, etp=etp)
    folds = (tp * cp * dp) % (layout.expert_tp * ep) == 0
    assert folds == (dp * layout.model_parallel % layout.pool_unit == 0)


def test_areal_on_the_default_scenario_rounds_the_trainer_to_a_pool_that_folds() -> None:
    """The seed workload trains at tp 8 x pp 6 with ep 4 x etp 8: DP must be a multiple of 4, so
    AReaL's 3/4 split of 384 devices (96 to train, DP 2) rounds to 192 + 192 instead of failing."""
    import simulator

    result = simulator.simulate(schedule="areal", iterations=1)
    assert {name: pool.count for name, pool in result.record.pools.items()} == {"rollout": 192, "train": 192}


def test_a_split_the_granules_move_is_said_in_the_summary():
    # 64 devices, training replicas of 32 (qwen3-30b-a3b's tp4 x ep8): rollout_fraction 0.9 asked 58
    # rollout devices and silently got 32; the run says so, and an exact split says nothing
    from simulator.api import simulate

    def warnings(fraction):
        return simulate(workload="grpo-qwen3-30b-a3b", topology={"preset": "dgx-h100", "nodes": 8},
                        schedule={"kind": "one-step-off", "rollout_fraction": fraction}, iterations=1,
                        keep_samples=False).summary.get("warnings", [])
    moved = [w for w in warnings(0.9) if "asks 58 of 64" in w]
    assert len(moved) == 1 and "rollout pool 32 (fraction 0.5)" in moved[0]
    assert not any("asks" in w for w in warnings(0.5))


def test_an_aux_share_the_granules_move_is_said_too():
    # fuse: actor on 16 devices with 2-device training replicas: aux_fraction 1/16 asks 1 aux device,
    # and the actor's whole replicas leave it 2
    from simulator.api import simulate

    def warnings(fraction):
        return simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2},
                        schedule={"kind": "colocated", "fuse": "actor", "aux_fraction": fraction}, iterations=1,
                        overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=4",
                                   "workload.mini_batch_prompts=8", "workload.train_layout.tp=2"],
                        keep_samples=False).summary.get("warnings", [])
    assert any("aux_fraction=0.0625 asks 1 of 16" in w and "aux pool 2" in w for w in warnings(0.0625))
    assert not any("asks" in w for w in warnings(0.125))


def test_a_rollout_pool_with_no_room_says_so_rather_than_a_negative_count():
    # "fix: give at most -8 (the rest train)" on a topology smaller than one training replica
    from simulator.rl.pools import build_pools
    from simulator.scenario import load_scenario

    sc = load_scenario(None, overrides=["schedule.kind=disaggregated", "schedule.rollout_devices=8"])
    with pytest.raises(RlsimError) as info:
        build_pools(sc.schedule, 8, instance_devices=1, train_group_devices=16)
    assert "at most -" not in info.value.fix and "give more devices" in info.value.fix


def test_a_pool_unit_too_large_says_what_makes_it():
    """'16 devices cannot hold one training replica of 32' for TP 4 said nothing of EP 8 x etp 4 (found
    by a new-user trial): the layout's text names the fold."""
    lay = TrainLayout(tp=4, ep=8)
    assert lay.pool_unit == 32 and "ep 8 x etp 4" in lay.pool_unit_text()
    with pytest.raises(RlsimError, match="ep 8 x etp 4"):
        build_pools(_Schedule("colocated"), 16, 4, lay.pool_unit, unit_text=lay.pool_unit_text())
    assert TrainLayout(tp=4).pool_unit_text() == "tp 4 x cp 1 x pp 1 = 4"


def _node_of(devices_per_node: int):
    return lambda rank: rank // devices_per_node


def _spans(pool: Pool, devices_per_node: int) -> int:
    return len({rank // devices_per_node for rank in pool.ranks})


def test_openrlhf_async_aux_pools_fill_a_node_in_either_order() -> None:
    """OpenRLHF's async example on 4 nodes of 8: engines 0-7, actor 8-15, then reference 4, critic 8,
    reward 4. Laid out in the mapping's order the critic took 20-27, across two nodes, and
    {critic, reference, reward} 16-23, inside one (its update 42.1 vs 39.0 s a step): both orders now
    give the critic node 2 whole, the reference and reward node 3."""
    want = {"rollout": Pool("rollout", 0, 8), "train": Pool("train", 8, 8),
            "aux-critic": Pool("aux-critic", 16, 8), "aux-reference": Pool("aux-reference", 24, 4),
            "aux-reward": Pool("aux-reward", 28, 4)}
    for aux in ({"reference": 4, "critic": 8, "reward": 4}, {"critic": 8, "reference": 4, "reward": 4}):
        pools = build_pools(ScheduleConfig(kind="one-step-off", rollout_devices=8, aux_devices=aux), 32, 1, 4,
                            node_of=_node_of(8))
        assert list(pools.items()) == list(want.items())


def test_a_pool_that_fits_in_a_node_lands_inside_one_where_the_free_devices_allow() -> None:
    # free devices 20-31 of nodes of 8: the 4 fill node 2's rest, the 8 take node 3 (not 20-27 and 28-31)
    assert lay_out_pools(20, {"a": 8, "b": 4}, _node_of(8)) == {"b": Pool("b", 20, 4), "a": Pool("a", 24, 8)}
    # 18-33: no order keeps both 8s in one node; the tie keeps the given order, every device used
    assert lay_out_pools(18, {"a": 8, "b": 8}, _node_of(8)) == {"a": Pool("a", 18, 8), "b": Pool("b", 26, 8)}
    # no nodes known: the given order
    assert lay_out_pools(20, {"a": 8, "b": 4}, None) == {"a": Pool("a", 20, 8), "b": Pool("b", 28, 4)}


def test_served_pools_are_packed_on_nodes_too_ties_in_verls_order() -> None:
    """A served reward model of 8 and a teacher of 4 after 20 devices of nodes of 8: verl's order put
    the reward model on 20-27 across two nodes; it takes node 3 and the teacher 20-23. Without nodes,
    or where the order ties, verl's (reward pool, then teacher pool)."""
    workload = SimpleNamespace(reward=SimpleNamespace(served=SimpleNamespace(devices=8)),
                               distillation=SimpleNamespace(devices=4))
    engine = {"reward_model": 4, "teacher": 4}.__getitem__
    assert served_pools(workload, 32, engine, node_of=_node_of(8)) == {
        "teacher": Pool("teacher", 20, 4), "reward_model": Pool("reward_model", 24, 8)}
    assert served_pools(workload, 32, engine) == {
        "reward_model": Pool("reward_model", 20, 8), "teacher": Pool("teacher", 28, 4)}
    workload.distillation.devices = 8
    assert served_pools(workload, 32, engine, node_of=_node_of(8)) == {
        "reward_model": Pool("reward_model", 16, 8), "teacher": Pool("teacher", 24, 8)}


def test_a_groups_roles_in_either_order_take_the_same_place() -> None:
    """'critic+reward' and 'reward+critic' name one group: written either way it sorts alike against the
    others (the pools' order and ties), only its name as written differs."""
    def layout(joined: str) -> list[tuple[int, int]]:
        pools = build_pools(ScheduleConfig(kind="one-step-off", rollout_devices=8,
                                           aux_devices={"reference": 4, joined: 4}), 24, 1, 4, node_of=_node_of(8))
        return [(pool.start, pool.count) for pool in pools.values()]

    assert layout("critic+reward") == layout("reward+critic")
    assert list(aux_pool_sizes(ScheduleConfig(kind="one-step-off", rollout_devices=8,
                                              aux_devices={"reward+critic": 4, "reference": 4}))) == [
        "aux-reward+critic", "aux-reference"]


_GROUPINGS = [["reference", "critic", "reward"], ["reference", "critic+reward"], ["critic", "reference+reward"],
              ["reference+critic+reward"], ["reference", "critic"], ["reward"]]


@given(st.sampled_from(_GROUPINGS).flatmap(lambda groups: st.tuples(st.permutations(groups), st.lists(
           st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), min_size=len(groups), max_size=len(groups)))),
       st.sampled_from([2, 4, 8, 16]), st.integers(1, 24), st.integers(1, 24))
def test_aux_pools_do_not_depend_on_the_mapping_order(drawn, devices_per_node, rollout, train) -> None:
    """Any order of the aux_devices mapping gives the same pools in the same order; they tile the
    devices after the training pool, no device in two pools, every device in one."""
    groups, counts = drawn
    given_order = dict(zip(groups, counts, strict=True))
    n = rollout + train + sum(counts)
    pools = build_pools(ScheduleConfig(kind="disaggregated", rollout_devices=rollout, aux_devices=given_order), n, 1,
                        1, node_of=_node_of(devices_per_node))
    fixed = build_pools(ScheduleConfig(kind="disaggregated", rollout_devices=rollout,
                                       aux_devices=dict(sorted(given_order.items()))), n, 1, 1,
                        node_of=_node_of(devices_per_node))
    assert list(pools.items()) == list(fixed.items())
    _check_layout(pools, n)
    assert sorted(rank for pool in pools.values() for rank in pool.ranks) == list(range(n))
    assert {name: pool.count for name, pool in pools.items() if name.startswith("aux-")} == {
        f"aux-{group}": count for group, count in given_order.items()}


@given(st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=1, max_size=3), st.integers(0, 4))
def test_pools_of_node_granules_from_a_node_boundary_each_take_their_fewest_nodes(counts, first_node) -> None:
    """Pools of 1, 2, 4, 8 devices (or whole nodes of 8) laid from a node's first device: each lands on
    the fewest nodes it can (inside one where it fits), as Ray's PACK puts a placement group."""
    schedule = ScheduleConfig(kind="disaggregated", aux_devices={
        group: count for group, count in zip(["reference", "critic", "reward"], counts, strict=False)})
    pools = lay_out_pools(8 * first_node, aux_pool_sizes(schedule), _node_of(8))
    assert all(_spans(pool, 8) == -(-pool.count // 8) for pool in pools.values())
