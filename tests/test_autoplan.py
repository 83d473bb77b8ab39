"""simulator/autoplan.py planning_ranks: `layout: auto` plans the training layout on the devices a
colocated run trains on (rl/pools.py build_pools), not on every device of the topology."""
import pytest

import simulator
from simulator.autoplan import auto_layouts, planning_ranks
from simulator.hardware.topology import load_topology
from simulator.scenario import load_scenario


def _colocated(*overrides, nodes=3):
    return load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": nodes},
                         schedule="colocated", iterations=2, overrides=["workload.train_layout=auto", *overrides])


@pytest.mark.parametrize(("overrides", "actor"), [
    ((), 24),
    (("workload.rollout_layout={tp: 4, pp: 4}",), 16),                                # whole 16-device engines
    (("workload.rollout_layout={tp: 4}",), 24),
    (("workload.reward={kind: model}", "schedule.aux_devices={reward: 8}"), 16),     # verl's reward pool
    (("workload.reward={kind: model}", "schedule.aux_devices={reward: 8}", "workload.rollout_layout={tp: 4, pp: 3}"), 12),
])
def test_a_colocated_plan_is_made_on_the_runs_pool(overrides, actor):
    rollout, train = planning_ranks(_colocated(*overrides), 24)
    assert rollout == train == list(range(actor))


def test_the_planned_devices_are_the_ones_the_run_trains_on():
    """3 DGX-H100 nodes beside 16-device engines: planned on 24 devices (dp 12 at cp 2), the run
    trained on 16 (dp 8), its ZeRO shards half as large again as the planner judged."""
    sc = _colocated("workload.rollout_layout={tp: 4, pp: 4}")
    plan = auto_layouts(sc, load_topology(sc.topology))
    summary = simulator.simulate(sc, keep_samples=False).summary
    assert plan.detail["train"]["devices"] == summary["pools"]["actor"] == 16


def test_a_planned_replica_that_no_colocated_pool_holds_is_not_chosen():
    """Only pp 3 searched on 24 devices beside 16-device engines: the planner took tp 1 pp 3 (3
    devices, lcm(3, 16) = 48 > 24) and the run refused it; on the pool's 16 devices no pp 3 fits, and
    the planner says so."""
    sc = _colocated("workload.rollout_layout={tp: 4, pp: 4}", "planner.space.tp=[1]", "planner.space.cp=[1]",
                    "planner.space.pp=[3]")
    with pytest.raises(simulator.RlsimError) as info:
        simulator.simulate(sc, keep_samples=False)
    assert info.value.field == "planner"
    assert "no training layout of qwen2.5-7b fits on 16 devices" in str(info.value)
