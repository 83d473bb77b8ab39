"""The gradient buffer a trained model keeps between its steps (train_params.memory.grad_buffer_persists):
Megatron-Core's DDP allocates it once and only zeroes it (megatron-core 0.13.0 param_and_grad_buffer.py),
so it sits beside the log-prob passes, the other model's update and a colocated engine unless an offload
moves or frees it; FSDP / DeepSpeed (the hf-transformers stacks) free it with zero_grad."""
from pathlib import Path

import pytest

from simulator.frameworks import import_config
from simulator.hardware.topology import load_topology
from simulator.params import HF_TRANSFORMERS, MEGATRON_CORE
from simulator.rl.llm_costs import (
    LlmCosts,
    kept_gradient_bytes,
    resident_training_bytes,
    training_state_bytes,
)
from simulator.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
KEEP_SWITCH = ("schedule.switch.offload_optimizer=false",)   # the switch neither moves nor frees the state


def _costs(*overrides: str) -> LlmCosts:
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated",
                       overrides=["topology.nodes=4", "iterations=1", *overrides])
    return LlmCosts(sc, load_topology(sc.topology))


def _state(costs: LlmCosts):
    params = costs.scenario.workload.train_params
    return training_state_bytes(costs.models["actor"], costs.layout(32), costs.topology.device_spec(0).hbm_bytes, params)


def test_the_stacks_say_whether_their_buffer_persists():
    assert MEGATRON_CORE.params.memory.grad_buffer_persists is True
    assert HF_TRANSFORMERS.params.memory.grad_buffer_persists is False


@pytest.mark.parametrize(("overrides", "kept"), [
    ((), True),
    (("workload.train_params.memory.grad_buffer_persists=false",), False),
    (("workload.train_params.offload.grads=true",), False),     # moved to the host
    (("workload.train_params.offload.params=true",), False),    # freed with the weights (verl's param_offload)
    (("workload.train_params.offload.optimizer=true",), True),  # verl's optimizer_offload leaves it
])
def test_the_kept_gradient_bytes_are_the_whole_buffer_unless_freed_or_moved(overrides, kept):
    """Closed form: Qwen2.5-7B at TP2 under ZeRO-1 keeps its whole TP shard of fp32 gradients, 4 / 2
    times its bf16 weight shard (~15.2 GB), or none."""
    costs = _costs(*overrides)
    state, params = _state(costs), costs.scenario.workload.train_params
    assert costs.layout(32).tp == 2 and costs.layout(32).zero == 1
    assert state.gradients_bytes == pytest.approx(2.0 * state.weights_bytes)
    assert 15.0e9 < state.gradients_bytes < 15.5e9
    assert kept_gradient_bytes(state, params) == (state.gradients_bytes if kept else 0.0)


def test_the_rollout_phase_holds_the_buffer_where_the_switch_keeps_the_state():
    """resident_training_bytes: the buffer counts beside the engine unless the switch moves it
    (offload_optimizer) or frees it (free_gradients), or the stack frees it."""
    kept, freed = _costs(*KEEP_SWITCH), _costs(*KEEP_SWITCH, "workload.train_params.memory.grad_buffer_persists=false")
    state, lay, hbm = _state(kept), kept.layout(32), kept.topology.device_spec(0).hbm_bytes
    sc = kept.scenario

    def resident(costs: LlmCosts, switch) -> float:
        return resident_training_bytes(costs.models["actor"], lay, switch, hbm, 0.0, costs.scenario.workload.train_params)
    assert resident(kept, sc.schedule.switch) - resident(freed, sc.schedule.switch) == pytest.approx(state.gradients_bytes)
    assert resident(kept, sc.schedule.switch) == pytest.approx(
        state.weights_bytes + state.optimizer_bytes + state.gradients_bytes)
    for switch in ({"free_gradients": True}, {"offload_optimizer": True}):
        other = sc.schedule.switch.model_copy(update=switch)
        assert resident(kept, other) == pytest.approx(resident(freed, other))
    assert kept.rollout_phase_bytes(lay) - freed.rollout_phase_bytes(lay) == pytest.approx(state.gradients_bytes)


def test_the_log_prob_pass_runs_beside_the_kept_buffer():
    """_forward_beside_bytes: the actor's forward passes hold its optimizer state and its kept
    gradient buffer beside them (its weights are the pass's own)."""
    kept, freed = _costs(), _costs("workload.train_params.memory.grad_buffer_persists=false")
    pool = kept.pool(list(range(32)))
    state = kept._resident_memory(pool)
    (with_grads, frozen), (without, frozen_too) = kept._forward_beside_bytes("actor", pool), \
        freed._forward_beside_bytes("actor", freed.pool(list(range(32))))
    assert with_grads - without == pytest.approx(state.gradients_bytes)
    assert without == pytest.approx(state.optimizer_bytes) and frozen == frozen_too


def test_verls_megatron_switch_keeps_the_buffer_and_its_fsdp_switch_frees_it():
    """verl 0.6.1: FSDP's update_policy ends with zero_grad (freed: free_gradients), the Megatron
    actor only zeroes its DDP buffer (kept) unless param_offload frees it with the parameters."""
    cfg = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
    megatron = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"]
    fsdp = import_config("verl", cfg)
    assert fsdp.scenario["schedule"]["switch"]["free_gradients"] is True
    kept = import_config("verl", cfg, megatron)
    assert kept.scenario["schedule"]["switch"]["free_gradients"] is False
    assert any("gradient buffer stays allocated" in note for note in kept.notes)
    offloaded = import_config("verl", cfg, [*megatron, "actor_rollout_ref.actor.megatron.param_offload=true"])
    assert offloaded.scenario["workload"]["train_params"]["offload"]["params"] is True


@pytest.mark.parametrize("kept_bpp", [0.0, 1.0, 4.0])
def test_a_stack_keeping_part_of_its_gradients_keeps_that_share(kept_bpp):
    """memory.kept_grad_bytes_per_param: of the grad_bytes_per_param the update holds, the bytes kept
    between steps (DeepSpeed's BF16_Optimizer: its fp32 buffer, 4 of 6). Closed form: kept / grad x the
    update's gradients, the rest of the state unchanged; the rollout phase holds that share."""
    base = ("workload.train_params.memory.grad_bytes_per_param=6", "workload.rollout_layout.gpu_memory_utilization=0.3")
    whole, part = _costs(*base, *KEEP_SWITCH), _costs(
        *base, *KEEP_SWITCH, f"workload.train_params.memory.kept_grad_bytes_per_param={kept_bpp}")
    state, params = _state(part), part.scenario.workload.train_params
    assert state == _state(whole)   # the update still holds all 6 B a parameter
    assert kept_gradient_bytes(state, params) == pytest.approx(state.gradients_bytes * kept_bpp / 6.0)
    lay = part.layout(32)
    assert whole.rollout_phase_bytes(lay) - part.rollout_phase_bytes(lay) == pytest.approx(
        state.gradients_bytes * (6.0 - kept_bpp) / 6.0)


@pytest.mark.parametrize(("overrides", "words"), [
    (("workload.train_params.memory.grad_buffer_persists=false",), "grad_buffer_persists false keeps none"),
    (("workload.train_params.memory.grad_bytes_per_param=2",), "more than the grad_bytes_per_param 2"),
])
def test_kept_gradient_bytes_outside_a_kept_buffer_are_refused(overrides, words):
    """Read only where the buffer persists, and a part of it: else an error naming the key and the fix."""
    with pytest.raises(Exception) as info:
        _costs("workload.train_params.memory.kept_grad_bytes_per_param=4", *overrides)
    assert words in str(info.value) and "kept_grad_bytes_per_param" in str(info.value)
