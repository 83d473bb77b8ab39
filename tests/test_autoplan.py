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


def test_an_auto_layout_that_needs_recompute_trains_the_fewest_block_layers_the_planner_found():
    """layout: auto where full recompute is the least that fits (Qwen2.5-7B, rows of ~17k tokens, TP 2
    without sequence parallelism on one DGX H100): the planner's block layout (planner.space.recompute_method)
    is the one the run trains, method and layers in summary.layouts; with uniform only it trains full uniform,
    in a longer update."""
    from simulator.api import simulate

    def run(methods):
        return simulate({"topology": {"preset": "dgx-h100", "nodes": 1},
                         "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "mini_batch_prompts": 16,
                                      "samples_per_prompt": 8, "train_layout": "auto",
                                      "response_length": {"dist": "lognormal", "median": 12000, "sigma": 0.2,
                                                          "max": 16384}},
                         "planner": {"space": {"cp": [1], "tp": [2], "pp": [1], "zero": [1], "sequence_parallel": [False],
                                               "recompute_method": methods}}, "iterations": 1})
    block, uniform = run(["uniform", "block"]), run(["uniform"])
    trained = block.summary["layouts"]["train"]
    assert (trained["recompute"], trained["recompute_method"]) == ("full", "block")
    assert 1 <= trained["recompute_num_layers"] < 28
    assert block.summary["auto_layout"]["train"]["layout"]["recompute_num_layers"] == trained["recompute_num_layers"]
    assert "recompute_method" not in uniform.summary["layouts"]["train"]
    assert block.summary["stage_time_s"]["train_actor"] < uniform.summary["stage_time_s"]["train_actor"]
