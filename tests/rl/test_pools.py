"""Direct tests of simulator/rl/pools.py build_pools: pools are contiguous, never overlap, never
exceed the cluster, and hold whole rollout instances and whole training replicas."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.train_layout import TrainLayout
from simulator.rl.pools import Pool, build_pools
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
    assert per_model == {"rollout": Pool("rollout", 0, 4), "train": Pool("train", 4, 6),
                         "aux-reference": Pool("aux-reference", 10, 2),
                         "aux-critic+reward": Pool("aux-critic+reward", 12, 4)}


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
