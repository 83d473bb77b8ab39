"""schedule.switch.engine_resident: a colocated engine that keeps its memory through training (verl
rollout.free_cache_engine: false). It was taken as an engine that frees its KV pool at each switch
(kv_realloc_s) with the train phase fitting as if the engine held nothing (a framework-knob trial:
a config verl would run out of memory on ran, 4.6 s a step faster)."""
from __future__ import annotations

import pytest

import simulator
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

SMALL = ["workload.prompts_per_step=16", "workload.mini_batch_prompts=16",
         "workload.rollout_layout={tp: 2, gpu_memory_utilization: 0.3}"]


def scenario(*extra):
    return load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                         overrides=[*SMALL, *extra])


def test_a_resident_engine_frees_nothing_at_a_switch():
    awake, resident = (LlmCosts(sc, load_topology(sc.topology)) for sc in (
        scenario(), scenario("schedule.switch.engine_resident=true")))
    gap = awake.switch("rollout", range(8)).time_s - resident.switch("rollout", range(8)).time_s
    assert gap == pytest.approx(awake.switch_params.kv_realloc_s)


def test_training_fits_beside_the_resident_engines_share_and_its_peak_counts_it():
    sc = scenario("schedule.switch.engine_resident=true")
    costs = LlmCosts(sc, load_topology(sc.topology))
    assert costs.train_params.memory.hbm_usable_fraction == pytest.approx(
        sc.workload.train_params.memory.hbm_usable_fraction - 0.3)
    r = simulator.simulate(sc, keep_samples=False)
    plain = simulator.simulate(scenario(), keep_samples=False)
    engine = 80e9 * 0.3   # the H100's HBM x the share
    extra = r.summary["peak_memory_by_phase"]["train"] - plain.summary["peak_memory_by_phase"]["train"]
    assert extra == pytest.approx(engine, rel=0.1)
    with pytest.raises(RlsimError, match="the engine stays resident with 0.8 of HBM"):
        simulator.simulate(scenario("schedule.switch.engine_resident=true",
                                    "workload.rollout_layout.gpu_memory_utilization=0.8"), keep_samples=False)
    # at 0.9 the rollout phase itself has no room for the actor's and the reference's weights (TP2: 7.6 GB each)
    with pytest.raises(RlsimError, match=r"resident training state 15.2 GB, the reference's weights 7.6 GB of it"):
        simulator.simulate(scenario("schedule.switch.engine_resident=true",
                                    "workload.rollout_layout.gpu_memory_utilization=0.9"), keep_samples=False)


@pytest.mark.parametrize("extra, field", [
    (["schedule.switch.engine_resident=true", "schedule.switch.kv_realloc_s=2"], "schedule.switch.kv_realloc_s"),
    (["schedule.switch.engine_resident=true", "schedule.switch.engine_sleep=true"], "schedule.switch.engine_resident"),
])
def test_what_a_resident_engine_does_not_read_is_refused(extra, field):
    with pytest.raises(RlsimError) as caught:
        simulator.simulate(scenario(*extra), keep_samples=False)
    assert field in (caught.value.fields or [caught.value.field])


def test_the_verl_import_maps_free_cache_engine_false_to_a_resident_engine():
    from pathlib import Path

    from simulator.frameworks import import_config
    config = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
    switch = import_config("verl", config, ["actor_rollout_ref.rollout.free_cache_engine=false"]).scenario["schedule"]["switch"]
    assert switch.get("engine_resident") is True and not switch.get("engine_sleep")


def test_layout_auto_plans_beside_the_resident_engine():
    """layout: auto judged memory on the whole usable HBM, picked a layout 9 GB past what the
    resident engine leaves, and blamed the batch (a regression trial)."""
    r = simulator.simulate(scenario("schedule.switch.engine_resident=true", "workload.train_layout=auto"),
                           keep_samples=False)
    assert "replanned" not in r.summary["auto_layout"]
    from simulator.hardware.devices import get_device
    assert r.summary["peak_memory_by_phase"]["train"] <= get_device("h100").hbm_bytes * 0.92


def test_sleeping_between_generation_batches_is_refused_for_a_resident_engine():
    with pytest.raises(RlsimError) as caught:
        simulator.simulate(scenario("schedule.switch.engine_resident=true", "schedule.between_gen_batches=sleep",
                                    "workload.dynamic_sampling={gen_prompts: 16}"), keep_samples=False)
    assert caught.value.field == "schedule.between_gen_batches"


@pytest.mark.parametrize("switch", [
    {}, {"engine_resident": True}, {"engine_sleep": True}, {"engine_sleep": True, "engine_sleep_level": 2},
    {"offload_optimizer": False, "free_gradients": True}, {"offload_weights": True, "bucketed": False},
    {"optimizer_pageable": True, "engine_sleep": True}])
def test_a_switchs_parts_sum_to_its_time_and_say_whose_work_it_is(switch):
    """SwitchCost.parts_s (what OpenRLHF's timers attribute): the engine's memory, the engine's
    weight copies, the training state's copies and the fixed overhead add up to the switch."""
    items = [f"schedule.switch.{k}={str(v).lower()}" for k, v in switch.items()]
    sc = scenario(*items)
    costs = LlmCosts(sc, load_topology(sc.topology))
    p = costs.switch_params
    for phase in ("rollout", "train"):
        cost = costs.switch(phase, range(8))
        assert sum(cost.parts_s.values()) == pytest.approx(cost.time_s, rel=1e-12)
        assert cost.parts_s["overhead"] == p.overhead_s
        fixed = 0.0 if p.engine_resident else p.sleep_wake_s / 2 if p.engine_sleep else p.kv_realloc_s
        assert cost.parts_s["engine_memory"] == pytest.approx(fixed)
        assert (cost.parts_s["trainer"] > 0) == bool(p.offload_optimizer or p.offload_weights
                                                     or (p.free_gradients and phase == "train"))
        assert (cost.parts_s["engine_weights"] > 0) == bool(
            (p.engine_sleep and p.engine_sleep_level == 1) or (not p.bucketed and phase == "rollout"))
