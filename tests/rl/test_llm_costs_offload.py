"""The per-phase offload (workload.train_params.offload, scope update: verl's actor offload) is paid once
per training phase, not once per optimizer step, and leaves nothing of what it offloads resident through
the rollout; scope optimizer_step (Megatron's optimizer_cpu_offload) is paid every optimizer step."""
import numpy as np
import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.training import offload_Bps, offload_time_s
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.llm_costs import LlmCosts, training_state_bytes
from simulator.scenario import load_scenario

from .schedules.test_schedules import const, run, scenario

SMALL = ["topology.nodes=1", "iterations=1"]


def _costs(*overrides):
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated",
                       overrides=[*SMALL, *overrides])
    return LlmCosts(sc, load_topology(sc.topology)), sc


def test_the_update_offload_is_the_states_round_trip_once_and_not_in_each_step():
    on, sc = _costs("workload.train_params.offload.optimizer=true", "workload.train_params.offload.params=true")
    off, _ = _costs()
    ranks = range(8)
    lay = on.layout(8)
    state = training_state_bytes(on.models["actor"], lay, on.topology.device_spec(0).hbm_bytes, sc.workload.train_params)
    want = offload_time_s(state, offload_Bps(on.topology, list(ranks), sc.workload.train_params), sc.workload.train_params)
    assert on.update_offload_s("actor", ranks) == pytest.approx(want) and want > 0
    assert off.update_offload_s("actor", ranks) == 0.0
    lens = np.full(64, 2048)
    assert on.train("actor", lens, ranks).time_s == pytest.approx(off.train("actor", lens, ranks).time_s)
    # nothing it offloads stays resident through generation (the memory check used to count it)
    assert on.inference_memory_bytes(ranks) < off.inference_memory_bytes(ranks)


@pytest.mark.parametrize("mini_batches", [1, 4])
def test_a_phase_pays_its_offload_once_whatever_its_optimizer_steps(mini_batches):
    """verl's update_actor loads the optimizer and the parameters once, runs every mini-batch, offloads
    once: +5.8 s at 1 optimizer step grew to +91.5 s at 16 (found by a new-user trial)."""
    base = dict(instance_devices=2, train_group_devices=2, sync_s=0.5, switch_s=0.0, train_device_s_per_token=1e-4)
    sc = scenario("colocated", iterations=2, prompts=8, workload={"mini_batch_prompts": 8 // mini_batches})
    plain = run(sc, FakeCosts(**base), resp=const(100))[3]
    paid = run(sc, FakeCosts(**base, update_offload_seconds=3.0), resp=const(100))[3]
    assert paid["stage_time_s"]["train_actor"] - plain["stage_time_s"]["train_actor"] == pytest.approx(3.0)


def test_an_optimizer_offloaded_in_part_leaves_the_rest_resident_through_the_rollout():
    """offload.optimizer_fraction: the share of the optimizer state the offload moves (Megatron-Core's
    optimizer_offload_fraction); the rest stays on the devices through generation."""
    from simulator.llm.training import hybrid_optimizer
    from simulator.rl.llm_costs import resident_training_bytes
    kept = "schedule.switch.offload_optimizer=false"     # the switch's own offload would move it all
    part, sc = _costs(kept, "workload.train_params.offload.optimizer=true",
                      "workload.train_params.offload.optimizer_fraction=0.25")
    whole, _ = _costs(kept, "workload.train_params.offload.optimizer=true")
    none, _ = _costs(kept)
    state = training_state_bytes(part.models["actor"], part.layout(8), part.topology.device_spec(0).hbm_bytes,
                                 sc.workload.train_params)
    args = (part.models["actor"], part.layout(8), sc.schedule.switch, part.topology.device_spec(0).hbm_bytes, 0.0)
    resident = [resident_training_bytes(*args, costs.scenario.workload.train_params) for costs in (none, part, whole)]
    assert resident[0] - resident[1] == pytest.approx(0.25 * state.optimizer_bytes)
    assert resident[0] - resident[2] == pytest.approx(state.optimizer_bytes)
    assert not hybrid_optimizer(sc.workload.train_params)       # scope update: moved, not stepped on the host


def test_the_switch_does_not_move_the_share_megatrons_cpu_offloaded_optimizer_keeps_on_the_host():
    """schedule.switch.offload_optimizer moves the optimizer state the devices hold: under Megatron-Core's
    optimizer_cpu_offload (offload.optimizer, scope optimizer_step) the offloaded share lives on the
    host already, so a switch moves (1 - optimizer_fraction) of it."""
    moved = "schedule.switch.offload_optimizer=true"
    plain, sc = _costs(moved)
    hosted, _ = _costs(moved, "workload.train_params.offload.optimizer=true",
                       "workload.train_params.offload.scope=optimizer_step",
                       "workload.train_params.offload.optimizer_fraction=0.75")
    state = training_state_bytes(plain.models["actor"], plain.layout(8), plain.topology.device_spec(0).hbm_bytes,
                                 sc.workload.train_params)
    ranks = range(8)
    moved_plain = plain.switch("rollout", ranks).bytes_moved["optimizer_offload"]   # the optimizer and gradients
    moved_hosted = hosted.switch("rollout", ranks).bytes_moved["optimizer_offload"]
    assert moved_plain - moved_hosted == pytest.approx(0.75 * state.optimizer_bytes)
