"""schedule.refit (rl/llm_costs.py weight_sync_s): NeMo RL's full-tensor refit in closed form."""
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.params import MemoryParams
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario
from simulator.validation import nemo_rl


def row(key: str, policy: str) -> nemo_rl.Row:
    return next(r for r in nemo_rl.ROWS if r.key == key and r.policy == policy)


def host_Bps_of(c: LlmCosts) -> float:
    """The rate of the copies to and from host memory: the topology's host link at its efficiency."""
    bw, efficiency = c.topology.host_links([0])
    return float(bw[0] * efficiency[0])


def costs(r: nemo_rl.Row, **schedule) -> LlmCosts:
    mapping = nemo_rl.scenario(r)
    mapping["schedule"].update(schedule)
    sc = load_scenario(mapping)
    return LlmCosts(sc, load_topology(sc.topology))


def model_bytes(c: LlmCosts) -> float:
    return c.model.params_total * 2.0      # bf16 engine weights


def test_colocated_full_tensor_refit_adds_the_gather_of_the_whole_model_over_the_narrowest_link():
    # DeepSeek-V3 on 256 H100: EP16 x PP16 spans the pool, so every rank receives all but 1/256 of the
    # model over its 50 GB/s InfiniBand NIC
    r = row("deepseek-v3", "on-policy")
    full, shard = costs(r, refit_tensor_overhead_s=0.0), costs(r, refit="reshard")
    pool = range(256)
    bw = full.topology.bottleneck_bw_Bps(list(pool))
    assert bw == pytest.approx(50e9)
    gather = model_bytes(full) * (1 - 1 / 256) / (bw * 0.8)
    assert full.refit_gather_s(pool) == pytest.approx(gather, rel=1e-12)
    assert full.weight_sync_s(pool, pool) - shard.weight_sync_s(pool, pool) == pytest.approx(gather, rel=1e-12)


def test_split_pool_refit_is_the_longer_of_gather_and_broadcast_or_their_sum_without_overlap():
    r = row("deepseek-v3", "1-step-off")
    src, dst = range(256, 512), range(0, 256)
    over, serial = costs(r, refit_tensor_overhead_s=0.0), costs(r, refit_overlap=False, refit_tensor_overhead_s=0.0)
    bw = over.topology.bottleneck_bw_Bps(list(range(512))) * 0.8
    gather, broadcast = over.refit_gather_s(src), model_bytes(over) / bw
    assert over.weight_sync_s(src, dst) == pytest.approx(max(gather, broadcast), rel=1e-12)
    assert serial.weight_sync_s(src, dst) == pytest.approx(gather + broadcast, rel=1e-12)


@pytest.mark.parametrize("key, policy, pool", [("qwen3-30b-a3b", "on-policy", range(32)),
                                               ("deepseek-v3", "on-policy", range(256))])
def test_the_per_tensor_cpu_time_paces_the_gather_when_it_is_longer(key: str, policy: str, pool: range):
    # Qwen3-30B-A3B: 18,867 tensors x 0.84 ms = 15.8 s against ~0.2 s of bytes over NVLink (the CPU
    # paces it); DeepSeek-V3: 45,337 x 0.84 ms = 38.1 s against 33.6 s over InfiniBand
    r = row(key, policy)
    full, shard, bytes_only = costs(r), costs(r, refit="reshard"), costs(r, refit_tensor_overhead_s=0.0)
    tensors = full.model.hf_tensor_count * 8.4e-4
    assert full.refit_tensors_s() == pytest.approx(tensors, rel=1e-12)
    gather = max(bytes_only.refit_gather_s(pool), tensors)
    assert tensors > bytes_only.refit_gather_s(pool)
    assert full.weight_sync_s(pool, pool) - shard.weight_sync_s(pool, pool) == pytest.approx(gather, rel=1e-12)
    # reshard (bucketed RL Fusion) pays no per-tensor time: the constant is refused beside it
    with pytest.raises(RlsimError) as err:
        costs(r, refit="reshard", refit_tensor_overhead_s=1.0)
    assert err.value.field == "schedule.refit_tensor_overhead_s"


def test_a_one_stage_copy_gathers_over_its_own_scale_up_domain():
    # Qwen3-30B-A3B EP8 PP1: one model copy is 8 consecutive GPUs of one server (NVLink 450 GB/s)
    r = row("qwen3-30b-a3b", "on-policy")
    c = costs(r)
    gather = model_bytes(c) * (1 - 1 / 8) / (450e9 * 0.8)
    assert c.refit_gather_s(range(32)) == pytest.approx(gather, rel=1e-12)


def test_a_model_every_rank_holds_whole_gathers_nothing():
    c = costs(row("llama3.1-8b", "1-step-off"))       # TP1 PP1: each rank has the full model
    assert c.refit_gather_s(range(8, 16)) == 0.0


def test_a_zero3_actor_gathers_every_parameter_over_its_whole_pool_in_its_own_dtype():
    """verl's FSDP actor (ZeRO-3 over the pool): each refit gathers every parameter whole over the
    FSDP group, in the shards' fp32 (refit_gather_bytes_per_param 4): on two DGX-H100 nodes over the
    InfiniBand NIC the ring's narrowest link carries all but 1/16 of the model's fp32 bytes."""
    base = {"workload": "grpo-qwen2.5-7b", "topology": {"preset": "dgx-h100", "nodes": 2},
            "schedule": {"kind": "colocated", "refit": "full-tensors", "refit_gather_bytes_per_param": 4,
                         "refit_tensor_overhead_s": 0.0}}
    sc = load_scenario(base, overrides=["workload.train_layout={tp: 1, pp: 1, zero: 3}"])
    c = LlmCosts(sc, load_topology(sc.topology))
    pool = list(range(16))
    bw = c.topology.bottleneck_bw_Bps(pool)
    assert bw == pytest.approx(50e9)
    assert c.refit_gather_s(range(16)) == pytest.approx(c.model.params_total * 4 * (1 - 1 / 16) / (bw * 0.8), rel=1e-12)
    engine = load_scenario({**base, "schedule": {**base["schedule"], "refit_gather_bytes_per_param": None}},
                           overrides=["workload.train_layout={tp: 1, pp: 1, zero: 3}"])
    assert LlmCosts(engine, load_topology(engine.topology)).refit_gather_s(range(16)) == pytest.approx(
        c.refit_gather_s(range(16)) / 2, rel=1e-12)                # the engine's bf16 by default
    with pytest.raises(RlsimError) as err:
        load_scenario({**base, "schedule": {"kind": "colocated", "refit": "reshard", "refit_gather_bytes_per_param": 4}})
    assert err.value.field == "schedule.refit_gather_bytes_per_param"


def test_an_hsdp_actor_gathers_over_its_shard_group():
    """verl's fsdp_size 8 on two nodes (HSDP: sharded inside a node, replicated across): each
    parameter's full_tensor() gathers over the node's 8 GPUs (NVLink 450 GB/s), not the pool."""
    sc = load_scenario({"workload": "grpo-qwen2.5-7b", "topology": {"preset": "dgx-h100", "nodes": 2},
                        "schedule": {"kind": "colocated", "refit": "full-tensors", "refit_gather_bytes_per_param": 4,
                                     "refit_tensor_overhead_s": 0.0}},
                       overrides=["workload.train_layout={tp: 1, pp: 1, zero: 3, zero_shard_size: 8}"])
    c = LlmCosts(sc, load_topology(sc.topology))
    assert c.refit_gather_s(range(16)) == pytest.approx(
        c.model.params_total * 4 * (1 - 1 / 8) / (450e9 * 0.8), rel=1e-12)


def test_refit_is_a_closed_set():
    mapping = nemo_rl.scenario(row("llama3.1-8b", "on-policy"))
    mapping["schedule"]["refit"] = "broadcast"
    with pytest.raises(RlsimError) as e:
        load_scenario(mapping)
    assert "refit" in str(e.value)


def test_colocated_weight_offload_and_engine_sleep_move_their_bytes_over_the_host_link():
    r = row("qwen3-32b", "on-policy")
    on = costs(r, switch={"offload_weights": True, "engine_sleep": True})
    off = costs(r, switch={"offload_weights": False, "engine_sleep": False})
    pool = range(32)
    weights, shard = on._train_weight_bytes(on.pool(pool)), on._inference_shard_bytes()
    host_Bps = host_Bps_of(on)
    # bytes over the host link, and half of vLLM's measured sleep + wake in place of the KV re-allocation
    fixed = on.switch_params.sleep_wake_s / 2 - off.switch_params.kv_realloc_s
    for phase in ("rollout", "train"):
        extra = on.switch(phase, pool).time_s - off.switch(phase, pool).time_s
        assert extra == pytest.approx((weights + shard) / host_Bps + fixed, rel=1e-9)
    assert on.switch("rollout", pool).bytes_moved["weight_offload"] == weights
    assert on.switch("train", pool).bytes_moved["engine_sleep"] == shard
    # offloaded weights are not resident through the rollout phase
    lay = on.layout(32)
    assert off.rollout_phase_bytes(lay) - on.rollout_phase_bytes(lay) == pytest.approx(weights, rel=1e-12)


def test_the_switch_moves_the_training_state_at_the_workloads_bytes_per_parameter():
    """The host-link bytes of a switch and the rollout phase's resident training state follow
    workload.train_params.memory (an 8-bit optimizer, fp32 gradients), not rlsim's defaults."""
    r = row("qwen3-32b", "on-policy")
    pool = range(32)

    def with_memory(**memory) -> LlmCosts:
        mapping = nemo_rl.scenario(r)
        mapping["schedule"]["switch"] = {"offload_optimizer": True, "offload_weights": False}
        mapping["schedule"]["host_copies"] = {}      # pinned copies: the host link's rate
        mapping["workload"]["train_params"] = {"memory": memory}
        sc = load_scenario(mapping)
        return LlmCosts(sc, load_topology(sc.topology))

    base = with_memory()
    small = with_memory(optimizer_bytes_per_param=4.0, grad_bytes_per_param=2.0)
    states = base._resident_memory(base.pool(pool))
    # ZeRO 1: the optimizer state is sharded, the gradients are not; each scales with its bytes
    defaults = MemoryParams()
    expected = (states.optimizer_bytes * 4.0 / defaults.optimizer_bytes_per_param
                + states.gradients_bytes * 2.0 / defaults.grad_bytes_per_param)
    assert small.switch("rollout", pool).bytes_moved["optimizer_offload"] == pytest.approx(expected, rel=1e-12)
    host_Bps = host_Bps_of(base)
    moved = expected - (states.optimizer_bytes + states.gradients_bytes)
    assert small.switch("train", pool).time_s - base.switch("train", pool).time_s == pytest.approx(
        moved / host_Bps, rel=1e-9)
    # the weights stay resident through the rollout phase at the workload's bytes per parameter
    kept = with_memory(weight_bytes_per_param=2 * defaults.weight_bytes_per_param)
    lay = base.layout(32)
    assert kept.rollout_phase_bytes(lay) - base.rollout_phase_bytes(lay) == pytest.approx(states.weights_bytes,
                                                                                         rel=1e-12)


def test_freed_gradients_skip_the_host_link_and_come_back_as_one_zero_fill():
    """schedule.switch.free_gradients (Megatron-Core's RL offload): the gradient buffer does not cross
    the host link either way; the switch back to training writes it once at the HBM rate; it is not
    resident through the rollout phase even when the optimizer state stays."""
    r = row("qwen3-32b", "on-policy")
    pool = range(32)
    copied = costs(r, switch={"offload_weights": True, "engine_sleep": True}, host_copies={})
    freed = costs(r, switch={"offload_weights": True, "engine_sleep": True, "free_gradients": True}, host_copies={})
    grads = copied._resident_memory(copied.pool(pool)).gradients_bytes
    assert grads > 0
    host_Bps = host_Bps_of(copied)
    hbm_Bps = copied.device.hbm_bw_Bps * copied.device.hbm_efficiency
    to_rollout = copied.switch("rollout", pool).time_s - freed.switch("rollout", pool).time_s
    assert to_rollout == pytest.approx(grads / host_Bps, rel=1e-9)
    to_train = copied.switch("train", pool).time_s - freed.switch("train", pool).time_s
    assert to_train == pytest.approx(grads / host_Bps - grads / hbm_Bps, rel=1e-9)
    assert freed.switch("train", pool).bytes_moved["gradient_zero_fill"] == grads
    assert (copied.switch("rollout", pool).bytes_moved["optimizer_offload"]
            - freed.switch("rollout", pool).bytes_moved["optimizer_offload"]) == pytest.approx(grads, rel=1e-12)
    # without the optimizer offload the state stays resident, the freed gradients do not
    kept = costs(r, switch={"offload_optimizer": False}, host_copies={})
    kept_freed = costs(r, switch={"offload_optimizer": False, "free_gradients": True}, host_copies={})
    lay = kept.layout(32)
    assert kept.rollout_phase_bytes(lay) - kept_freed.rollout_phase_bytes(lay) == pytest.approx(grads, rel=1e-12)


def test_pageable_optimizer_copies_run_at_the_slower_of_the_link_and_the_hosts_copy():
    """schedule.switch.optimizer_pageable: the optimizer state leaves at host_copies.offload_Bps
    (fresh pageable pages) and comes back at onload_Bps, each bounded by the host link; the other
    host bytes keep the pinned rate."""
    r = row("qwen3-32b", "on-policy")
    pool = range(32)
    switch = {"offload_weights": True, "engine_sleep": True, "free_gradients": True}
    pinned = costs(r, switch=switch, host_copies={})
    rates = {"offload_Bps": "2 GB/s", "onload_Bps": "5 GB/s"}
    paged = costs(r, switch={**switch, "optimizer_pageable": True}, host_copies=rates)
    optimizer = pinned.switch("rollout", pool).bytes_moved["optimizer_offload"]
    link = host_Bps_of(pinned)
    for phase, rate in (("rollout", 2e9), ("train", 5e9)):
        extra = paged.switch(phase, pool).time_s - pinned.switch(phase, pool).time_s
        assert extra == pytest.approx(optimizer / rate - optimizer / link, rel=1e-9)
        assert paged.switch(phase, pool).bytes_moved == pinned.switch(phase, pool).bytes_moved
    # a rate above the link: the link bounds the copy
    fast = costs(r, switch={**switch, "optimizer_pageable": True}, host_copies={"offload_Bps": "1 TB/s",
                                                                              "onload_Bps": "1 TB/s"})
    assert fast.switch("train", pool).time_s == pytest.approx(pinned.switch("train", pool).time_s, rel=1e-12)


def test_a_pageable_reference_swap_copies_out_once_and_in_the_other_times():
    r = row("qwen3-32b", "1-step-off")
    pinned = costs(r, host_copies={})
    paged = costs(r, host_copies={"reference_swap": True, "offload_Bps": "2 GB/s", "onload_Bps": "5 GB/s"})
    pool = paged.pool(range(32, 64))
    shard = pinned._train_weight_bytes(pool)
    link = host_Bps_of(pinned)
    assert pinned.reference_swap_s(pool) == pytest.approx(3 * shard / link, rel=1e-12)
    assert paged.reference_swap_s(pool) == pytest.approx(shard / 2e9 + 2 * shard / 5e9, rel=1e-12)


@pytest.mark.parametrize(("schedule", "field", "message"), [
    ({"switch": {"offload_optimizer": False, "optimizer_pageable": True}, "host_copies": {}},
     "schedule.switch.optimizer_pageable", "offload_optimizer: true"),
    ({"host_copies": {"reference_swap": True}, "reference_swap_copies": 0}, "schedule.host_copies",
     "reference_swap_copies >= 1"),
    ({"host_copies": {"onload_Bps": "5 GB/s"}, "switch": {}}, "schedule.host_copies", "onload_Bps: apply only with"),
])
def test_a_pageable_copy_that_does_not_happen_is_refused(schedule, field, message):
    with pytest.raises(RlsimError, match=message) as info:
        costs(row("qwen3-32b", "on-policy"), **schedule)
    assert info.value.field == field


def test_a_compared_split_kind_drops_the_switch_and_keeps_the_pageable_reference_swap():
    """rlsim compare re-kinds a colocated scenario: the switch's pageable optimizer copies go with the
    switch, a pageable reference swap stays (both placements swap the reference)."""
    mapping = nemo_rl.scenario(row("qwen3-32b", "on-policy"))
    mapping["schedule"]["host_copies"] = {"reference_swap": True}
    fields = load_scenario(mapping).schedule.applicable_fields("one-step-off")
    assert "switch" not in fields and fields["host_copies"] == {"reference_swap": True}
    assert load_scenario({**mapping, "schedule": fields}).schedule.kind == "one-step-off"


def test_engine_sleep_pays_its_measured_sleep_and_wake_once_a_step_whatever_the_model():
    # the 11.3 s of a colocated loop's vLLM sleep + wake_up (hardware.md), half on each switch, beyond
    # the bytes: on two models of 8B and 32B the fixed part of a step's two switches is the same
    for key in ("llama3.1-8b", "qwen3-32b"):
        r = row(key, "on-policy")
        pool = range(r.gpus)
        bytes_only = costs(r, switch={"engine_sleep": True, "sleep_wake_s": 0.0, "overhead_s": 0.0})
        both = costs(r, switch={"engine_sleep": True, "sleep_wake_s": "11.3s", "overhead_s": 0.0})
        added = sum(both.switch(p, pool).time_s - bytes_only.switch(p, pool).time_s for p in ("rollout", "train"))
        assert added == pytest.approx(11.3, rel=1e-12)
        assert both.switch("rollout", pool).bytes_moved == bytes_only.switch("rollout", pool).bytes_moved


def test_sleep_level_2_discards_the_engine_weights_instead_of_copying_them():
    """vLLM sleep level 2 keeps no copy of the weights (a refit overwrites them): the engine's shard
    crosses the host link at level 1 only; the measured fixed time is the same."""
    r = row("qwen3-32b", "on-policy")
    pool = range(32)
    one = costs(r, switch={"engine_sleep": True})
    two = costs(r, switch={"engine_sleep": True, "engine_sleep_level": 2})
    shard = one._inference_shard_bytes()
    host_Bps = host_Bps_of(one)
    for phase in ("rollout", "train"):
        assert one.switch(phase, pool).time_s - two.switch(phase, pool).time_s == pytest.approx(shard / host_Bps,
                                                                                               rel=1e-9)
        assert not {"engine_sleep", "engine_wake"} & set(two.switch(phase, pool).bytes_moved)


@pytest.mark.parametrize(("sleep", "key", "value"), [(True, "kv_realloc_s", 2.0), (False, "sleep_wake_s", 2.0),
                                                     (False, "engine_sleep_level", 2)])
def test_the_switch_fixed_cost_that_does_not_apply_is_refused(sleep, key, value):
    mapping = nemo_rl.scenario(row("llama3.1-8b", "on-policy"))
    mapping["schedule"]["switch"] = {"engine_sleep": sleep, key: value}
    with pytest.raises(RlsimError) as e:
        load_scenario(mapping)
    assert e.value.field == f"schedule.switch.{key}"
    assert f"applies only with schedule.switch.engine_sleep: {str(not sleep).lower()}" in str(e.value)


def test_host_copies_run_at_the_topologys_host_efficiency_unless_the_switch_gives_one():
    r = row("qwen3-32b", "on-policy")
    switch = {"offload_weights": True, "engine_sleep": True, "optimizer_pageable": False}   # all pinned
    base = costs(r, switch=switch)
    mapping = nemo_rl.scenario(r)
    mapping["schedule"]["switch"] = switch   # as costs() gives it
    mapping["topology"]["host"] = {"efficiency": 0.5}
    sc = load_scenario(mapping)
    slow = LlmCosts(sc, load_topology(sc.topology))
    given = costs(r, switch={**switch, "host_link_efficiency": 0.5})
    pool = range(32)
    moved = sum(v for k, v in base.switch("train", pool).bytes_moved.items() if k != "gradient_zero_fill")
    link = base.device.host_link_bw_Bps
    extra = moved / (link * 0.5) - moved / (link * 0.85)
    assert slow.switch("train", pool).time_s - base.switch("train", pool).time_s == pytest.approx(extra, rel=1e-9)
    assert given.switch("train", pool).time_s == pytest.approx(slow.switch("train", pool).time_s, rel=1e-12)


def _rollout_error(**workload) -> RlsimError:
    sc = load_scenario(workload="ppo-llama3.1-70b", topology="dgx-h100", schedule="colocated",
                       overrides=[f"workload.{k}={v}" for k, v in workload.items()])
    c = LlmCosts(sc, load_topology(sc.topology))
    with pytest.raises(RlsimError) as exc:
        c.rollout_phase_bytes(c.layout(8))
    return exc.value


def test_a_rollout_phase_that_cannot_fit_names_fixes_that_apply():
    """The fix names only what this run can still change: no share below the engine's own weights
    ('lower gpu_memory_utilization to <= 0.00' before), no switch setting that is already on."""
    whole = _rollout_error(train_layout="{tp: 1, pp: 1, zero: 1}")
    assert whole.field == "workload.train_layout" and "no gpu_memory_utilization fits" in whole.fix
    assert "<= 0.00" not in whole.fix and "offload_optimizer" not in whole.fix   # the seed switch offloads it
    assert "offload_weights: true" in whole.fix and "more devices" in whole.fix
    assert "critic_offload" in whole.fix   # PPO's critic holds its state beside the engine too
    share = _rollout_error(**{"train_layout": "{tp: 8, pp: 1, zero: 1}", "rollout_layout.gpu_memory_utilization": 0.95,
                              "critic_offload": "{params: true, optimizer: true}"})
    assert share.field == "workload.rollout_layout.gpu_memory_utilization" and "to <= 0." in share.fix


def _lora_costs(*overrides):
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.lora.rank=32", *overrides])
    return LlmCosts(sc, load_topology(sc.topology))


def test_a_lora_refit_sends_the_adapters_where_the_engine_keeps_its_base():
    """schedule.lora_refit adapters (verl after base_sync_done): the reshard moves the adapters' bytes
    alone, exactly the model's refit scaled by adapters / weights; an engine that discards its weights
    at sleep level 2 takes the whole model again (verl sends base and adapters then)."""
    ranks = range(8)
    adapters, full = _lora_costs(), _lora_costs("schedule.lora_refit=full")
    level2 = _lora_costs("schedule.switch.engine_sleep=true", "schedule.switch.engine_sleep_level=2")
    assert adapters.adapters_only_refit() and not full.adapters_only_refit() and not level2.adapters_only_refit()
    model = adapters.model
    ratio = model.params_adapter_total * 2.0 / model.weight_bytes(2.0)
    assert adapters.weight_sync_s(ranks, ranks) == pytest.approx(full.weight_sync_s(ranks, ranks) * ratio, rel=1e-12)
    assert level2.weight_sync_s(ranks, ranks) == full.weight_sync_s(ranks, ranks)
    tensors = _lora_costs("schedule.refit=full-tensors")
    each = tensors.scenario.schedule.refit_tensor_overhead_s
    assert tensors.refit_tensors_s() == pytest.approx(392 * each)            # lora_A and lora_B of 7 x 28 modules
    both = _lora_costs("schedule.refit=full-tensors", "schedule.lora_refit=full")
    assert both.refit_tensors_s() == pytest.approx((392 + both.model.hf_tensor_count) * each)   # base and adapters
    with pytest.raises(RlsimError, match="applies to LoRA"):
        load_scenario(overrides=["schedule.lora_refit=full"])


def test_a_kept_gradient_buffer_in_the_overflow_names_its_offload():
    """Megatron-Core's DDP keeps its gradient buffer (memory.grad_buffer_persists); with the switch
    neither offloading the optimizer state nor freeing the gradients it stays through the rollout, and
    the fix names its per-phase offload (verl: param_offload); once that moves it, or the stack frees
    it, the fix does not."""
    def error(*items: str) -> RlsimError:
        sc = load_scenario(workload="ppo-llama3.1-70b", topology="dgx-h100", schedule="colocated",
                           overrides=["schedule.switch.offload_optimizer=false",
                                      "workload.train_layout={tp: 1, pp: 1, zero: 1}", *items])
        c = LlmCosts(sc, load_topology(sc.topology))
        with pytest.raises(RlsimError) as exc:
            c.rollout_phase_bytes(c.layout(8))
        return exc.value

    kept = error()
    assert "workload.train_params.offload.grads: true" in kept.fix and "actor.megatron.param_offload" in kept.fix
    moved = error("workload.train_params.offload.grads=true")
    freed = error("workload.train_params.memory.grad_buffer_persists=false")
    assert "offload.grads" not in moved.fix and "offload.grads" not in freed.fix
