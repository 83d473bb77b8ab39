"""The real cost facade (rl/llm_costs.py) on the seed scenario: layouts, micro-batches, pipeline bubble."""
import json

import numpy as np
import pytest

from simulator import params
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.train_layout import TrainLayout
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario


def costs(*overrides, schedule="colocated"):
    sc = load_scenario(schedule=schedule, overrides=list(overrides))
    return LlmCosts(sc, load_topology(sc.topology))


def test_ep_that_cannot_apply_is_an_error_not_a_fallback():
    # the press layout TP8 PP16 gives DP 3 on one supernode: EP 4 cannot be carved out of it
    c = costs("workload.train_layout.pp=16")
    with pytest.raises(RlsimError) as e:
        c.layout(384)
    assert e.value.field == "workload.train_layout.ep"
    # on four supernodes DP 12: valid
    c4 = costs("workload.train_layout.pp=16", "topology.supernodes=4")
    assert c4.layout(1536).ep == 4


def test_seed_layout_is_the_same_per_replica_at_one_and_four_supernodes():
    one, four = costs().layout(384), costs("topology.supernodes=4").layout(1536)
    assert (one.tp, one.pp, one.ep) == (four.tp, four.pp, four.ep) == (8, 6, 4)
    assert (one.dp, four.dp) == (8, 32)


@pytest.mark.parametrize("pp", [2, 4])
def test_uniform_lengths_give_the_1f1b_bubble_formula(tmp_path, pp):
    """Equal lengths on equal stages: the pipeline_bubble share of a training step is (p-1)/(m+p-1),
    m micro-batches a replica. A Llama-8B shape with a 1,024-token vocabulary, so that the embedding
    and the output head leave the stages equal (the seed's 61 layers over 6 stages do not)."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 1024, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=[f"workload.model={tmp_path / 'config.json'}", "schedule.micro_batching=sequence",
                                  f"workload.train_layout={{tp: 1, pp: {pp}, zero: 1, recompute: full, micro_batch: 1}}"])
    cost = LlmCosts(sc, load_topology(sc.topology))._train("actor", np.full(64, 2048), 8)
    m = 64 // (8 // pp)
    assert cost.bubble_s / cost.time_s == pytest.approx((pp - 1) / (m + pp - 1), rel=0.05)


def test_one_sample_micro_batches_of_long_tail_lengths_stall_the_pipeline():
    # the mechanism behind the old 24% "pipeline_bubble": variable-length micro-batches, not the formula
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(np.log(2048), 1.0, 2048), 1, 16384).astype(int) + 512
    seq = costs("schedule.micro_batching=sequence")._train("actor", lens, 384)
    bal = costs()._train("actor", lens, 384)
    lay = costs().layout(384)
    m = 2048 / lay.dp
    assert seq.bubble_s / seq.time_s > 5 * (lay.pp - 1) / (m + lay.pp - 1)
    assert bal.time_s < 0.7 * seq.time_s
    assert bal.bubble_s / bal.time_s < 0.2


def test_moe_parallel_folding_lets_ep_exceed_what_dp_carries():
    # TP8 PP16 on 384 devices: DP 3. With expert TP 1 the EP 4 groups fold over the 24 TP x DP ranks.
    c = costs("workload.train_layout.pp=16", "workload.train_layout.etp=1")
    lay = c.layout(384)
    assert (lay.dp, lay.ep, lay.expert_tp, lay.expert_dp) == (3, 4, 1, 6)
    # a pool keeps the folding: etp x ep | tp x dp (etp = tp = 8: dp a multiple of 4, none <= 3)
    assert costs("workload.train_layout.pp=16").train_devices_at_most(384) == 0
    assert c.train_devices_at_most(384) == 384
    assert c.train_devices_at_most(383) == 256   # dp 2: 4 | 8 x 2


def test_folded_expert_all_to_all_stays_on_consecutive_ranks_of_one_node():
    # Qwen3-30B-A3B EP8 PP2 on 16 H100s (the V6 1-step-off trainer): each stage's EP 8 group is one
    # node (Megatron-Core's order), not every other rank over two nodes, and the step is then about
    # half that of EP8 PP1 on 32 (2x the devices, the same per-device work): it was 3.6x
    from simulator.llm.training import _groups

    def qwen(nodes, pp):
        return costs("topology.preset=dgx-h100", f"topology.nodes={nodes}", "workload.model=qwen3-30b-a3b",
                     "workload.train_layout.tp=1", f"workload.train_layout.pp={pp}", "workload.train_layout.ep=8",
                     "workload.train_layout.etp=1", "workload.train_layout.vpp=1",
                     "workload.train_layout.recompute=none", "workload.train_layout.micro_batch=1",
                     "schedule.pack_tokens=4096")
    sixteen, thirty_two = qwen(2, 2), qwen(4, 1)
    lay = sixteen.layout(16)
    groups = _groups(lay, tuple(sixteen._placed(sixteen.pool(range(16)), 16)))
    assert groups.ep == [list(range(8)), list(range(8, 16))]
    lens = np.full(512, 3300)
    ratio = sixteen._train("actor", lens, 16).time_s / thirty_two._train("actor", lens, 32).time_s
    assert 1.6 < ratio < 2.6


def test_trained_batches_are_kept_only_where_a_failure_replan_reads_them():
    # a run without schedule.failures keeps none: a long run held every batch (issue 13, memory)
    c = costs()
    c.train("actor", np.full(512, 1800), list(range(384)))
    assert c._trained == [] and c._demanding_batches() == []


def test_a_replan_judges_the_latest_the_longest_and_the_heaviest_trained_batch():
    # StaleSync alternates typical and tail batches: the check after a failure must not see only
    # the latest (typical) one, or it accepts a layout the next tail batch does not fit
    c = costs("schedule.failures=[{at_s: 600, fail: 'node:3'}]")
    ranks = list(range(384))
    typical, tail, latest = np.full(512, 1800), np.full(512, 1800), np.full(512, 1900)
    tail[:80] = 17000
    for batch in (typical, tail, latest):
        c.train("actor", batch, ranks)
    picked = c._demanding_batches()
    assert [b is x for b, x in zip(picked, (latest, tail), strict=True)] == [True, True]
    # the tail batch holds the heaviest micro-batch under the pool's micro-batching
    assert c._heaviest_micro_batch_tokens(384, tail) > c._heaviest_micro_batch_tokens(384, latest)


def test_reference_swap_adds_its_host_copies_of_the_weight_shard_to_the_reference_pass_only():
    # schedule.reference_swap_copies (NeMo RL use_reference_model): copies x the training weight shard
    # over the host link at switch.host_link_efficiency, on the reference forward, not the old log-probs
    lens = np.full(512, 1800)
    plain, swapped = costs(), costs("schedule.reference_swap_copies=3")
    ranks = list(range(384))
    pool = swapped.pool(ranks)
    device = pool.kinds[0]
    expected = 3 * swapped._train_weight_bytes(pool) / (device.host_link_bw_Bps * 0.85)
    assert swapped.reference_swap_s(pool) == pytest.approx(expected)
    assert expected > 0.1
    ref, base = swapped.forward("reference", lens, ranks).time_s, plain.forward("reference", lens, ranks).time_s
    assert ref - base == pytest.approx(expected)
    assert swapped.forward("actor", lens, ranks).time_s == plain.forward("actor", lens, ranks).time_s


def test_weight_host_copies_are_copies_of_the_training_shard_over_the_host_link():
    # verl separate_async's pi_old save / restore: each copy the training weight shard over the host link
    c = costs()
    ranks = list(range(384))
    pool = c.pool(ranks)
    one = c._train_weight_bytes(pool) / (pool.kinds[0].host_link_bw_Bps * 0.85)
    assert c.weight_host_copies_s(ranks, 1) == pytest.approx(one) and one > 0.01
    assert c.weight_host_copies_s(ranks, 3) == pytest.approx(3 * one)


def test_forward_micro_batch_packs_that_many_rows_into_a_forward_micro_batch(monkeypatch):
    # schedule.forward_micro_batch (NeMo RL logprob_batch_size): forward micro-batches of
    # rows x pack_tokens tokens, here 2 x 8192 // 1000 = 16 samples; training keeps its own
    import simulator.rl.llm_costs as module
    seen = []
    real = module.forward_cost
    monkeypatch.setattr(module, "forward_cost", lambda model, lay, *a, **k: seen.append(lay) or real(model, lay, *a, **k))
    lens = np.full(1024, 1000)
    c = costs("schedule.forward_micro_batch=2", "schedule.pack_tokens=8192", "workload.train_layout.micro_batch=1")
    c._forward("actor", lens, 384)
    assert seen[-1].micro_batch == 16
    assert c.micro_batched(lens, 384)[0].micro_batch == 8
    costs("schedule.pack_tokens=8192", "workload.train_layout.micro_batch=1")._forward("actor", lens, 384)
    assert seen[-1].micro_batch == 8


def test_switch_bytes_follow_a_replanned_training_layout():
    """The training state a phase switch moves is the layout's (memory_per_device, kept per pool
    size for the run's layouts): after set_train_layout it is the new layout's."""
    from simulator.llm.memory import memory_per_device
    c = costs()
    ranks = range(c.n_devices)
    pool = c.pool(ranks)

    def expected() -> float:
        mem = memory_per_device(c.model, c.layout(c.n_devices), 1.0, pool.hbm_bytes)
        return mem.optimizer_bytes + mem.gradients_bytes

    before = c.switch("rollout", ranks).bytes_moved["optimizer_offload"]
    assert before == expected()
    c.set_train_layout({**c.train_layout_map, "pp": c.train_template.pp // 2})
    after = c.switch("rollout", ranks).bytes_moved["optimizer_offload"]
    assert after == expected() and after != before


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, float])
def test_rollout_flops_of_integer_lengths_equal_the_float_sum(dtype):
    """_rollout_inputs sums integer lengths as integers: the float sum it stands for is exact, so
    the FLOPs are the float path's, bit for bit (and float lengths take that path)."""
    c = costs()
    rng = np.random.default_rng(5)
    for n in (1, 7, 688, 5000):
        p, r = rng.integers(1, 30_000, n).astype(dtype), rng.integers(1, 30_000, n).astype(dtype)
        tokens = np.asarray(p, float) + np.asarray(r, float)
        total = np.sum(tokens)
        want = float(total * c.model.forward_flops_per_token(float(total / n) / 2))
        flops, prompts, responses = c._rollout_inputs(p, r)
        assert flops == want and prompts.dtype == responses.dtype == np.int64
    assert c._rollout_inputs(np.zeros(0, np.int64), np.zeros(0, np.int64))[0] == 0.0


def test_a_rule_reward_costs_its_fixed_part_and_its_tokens_more_for_a_capped_response():
    """Each sample's verification on one worker: a + b x response tokens for a response that ends
    with its answer, a' + b' x tokens for one cut at its cap (the response law's max, or
    max_model_len - prompt, whichever is lower), where Math-Verify searches all of it."""
    c = costs("workload.response_length.max=4000", "workload.inference.max_model_len=4500",
              "workload.reward.cpu_s_per_sample=1e-3", "workload.reward.cpu_s_per_token=1e-6",
              "workload.reward.capped_cpu_s_per_sample=5e-3", "workload.reward.capped_cpu_s_per_token=2e-6")
    prompt = np.array([100, 100, 600, 600, 100])
    response = np.array([1000, 4000, 3899, 3900, 3999])     # capped: at 4000 (law), at 4500 - 600 = 3900
    want = [1e-3 + 1e-6 * 1000, 5e-3 + 2e-6 * 4000, 1e-3 + 1e-6 * 3899, 5e-3 + 2e-6 * 3900, 1e-3 + 1e-6 * 3999]
    assert c.reward_cpu_s(prompt, response) == pytest.approx(want, rel=1e-12)
    assert costs().reward_cpu_s(prompt[:1], response[:1]) == pytest.approx(
        params.MATH_VERIFY_CPU_S_PER_SAMPLE + params.MATH_VERIFY_CPU_S_PER_TOKEN * 1000)


def test_a_packed_micro_batch_that_does_not_fit_is_told_in_the_layouts_terms():
    """The run trains micro-batches of sequences packed into the layout's rows (micro_batching
    balanced): its out-of-memory error said 'micro_batch=5' where the user gave 1, and suggested a
    smaller micro_batch; it now says what the 5 is and points at the packed rows."""
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="colocated",
                       overrides=["workload.train_layout={tp: 1, pp: 1, zero: 1, recompute: none, micro_batch: 1}",
                                  "schedule.micro_batching=balanced", "schedule.distqueue.packed=true",
                                  "schedule.pack_tokens=65536"])
    c = LlmCosts(sc, load_topology(sc.topology))
    lens = np.full(256, 1500)
    packed, _ = c.micro_batched(lens, 8)
    assert packed.micro_batch > 1
    with pytest.raises(RlsimError) as exc:
        c._train("actor", lens, 8)
    assert f"micro_batch={packed.micro_batch}: the sequences packed into one micro-batch" in exc.value.message
    assert "schedule.pack_tokens" in exc.value.fix and "a smaller micro_batch" not in exc.value.fix


def test_the_pipeline_bubble_is_the_groups_mean_idle_not_the_busiest_stages():
    """The timeline keeps one record for a training group's devices: its pipeline_bubble must be
    their mean idle inside the flush. It was the busiest stage's idle alone (2% here), leaving the
    light stage's waits counted as training (an idle-time trial: 13% recorded, 26% real on TP2 PP4).
    Closed form, 1F1B, equal lengths, a 7 / 21 layer split (light stage a third of the heavy one's
    work), m micro-batches a replica: mean idle = 1 - (1 + 1/3) / 2 x 3m / (3m + 1)."""
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.train_layout={tp: 1, pp: 2, zero: 1, recompute: full, micro_batch: 1, "
                                  "pp_first_stage_layers: 7}", "schedule.micro_batching=sequence"])
    cost = LlmCosts(sc, load_topology(sc.topology))._train("actor", np.full(64, 2048), 8)
    m = 64 // 4   # DP 4 replicas of 2 stages on 8 devices
    assert cost.bubble_s / cost.time_s == pytest.approx(1 - (1 + 1 / 3) / 2 * 3 * m / (3 * m + 1), rel=0.1)


def test_the_critic_and_a_reward_model_score_through_a_value_head_not_the_vocab():
    """PPO's critic and a scalar reward model run the actor's trunk under a hidden x 1 head (verl:
    AutoModelForTokenClassification, num_labels 1): their passes cost less than the reference's and the
    critic's update less than the actor's, by the vocab output layer only."""
    run = costs("workload.preset=ppo-llama3.1-70b", "topology.nodes=4", "topology.preset=dgx-h200")
    lens = np.full(64, 1024)
    ranks = list(range(32))
    assert run.models["critic"].value_head and run.models["reward"].value_head
    assert not run.models["actor"].value_head and not run.models["reference"].value_head
    ref = run.forward("reference", lens, ranks).time_s
    for role in ("critic", "reward"):
        assert run.forward(role, lens, ranks).time_s < ref
    assert run.train("critic", lens, ranks).time_s < run.train("actor", lens, ranks).time_s


def _ppo(*overrides):
    # H200s: the actor's and critic's state beside the reference's and reward model's resident weights
    # (on 32 H100s the four 70B models need 83 GB a device in an update)
    return costs("workload.preset=ppo-llama3.1-70b", "topology.preset=dgx-h200", "topology.nodes=4",
                 "workload.rollout_layout.gpu_memory_utilization=0.4", *overrides)


_CRITIC_OFF = ("workload.critic_offload.params=true", "workload.critic_offload.optimizer=true")


def test_the_critic_state_sits_beside_the_engine_and_the_actor_unless_offloaded():
    """Colocated PPO (verl: actor, critic and engine on the same GPUs): the critic's weights,
    optimizer state and Megatron gradient buffer (memory.grad_buffer_persists) stay on the devices
    through the rollout and the actor's update unless workload.critic_offload moves them (params
    frees the buffer with the weights: verl's offload_megatron_model_to_cpu); closed form: the
    difference is exactly those bytes."""
    from simulator.rl.llm_costs import training_state_bytes

    kept, moved = _ppo(), _ppo(*_CRITIC_OFF)
    lay = kept.layout(32)
    critic = training_state_bytes(kept.models["critic"], lay, kept.device.hbm_bytes, kept.critic_params)
    held = critic.weights_bytes + critic.optimizer_bytes + critic.gradients_bytes
    assert critic.gradients_bytes > 0
    assert kept.critic_resident_bytes(lay, kept.device.hbm_bytes) == pytest.approx(held)
    assert moved.critic_resident_bytes(lay, moved.device.hbm_bytes) == 0.0
    assert kept.rollout_phase_bytes(lay) - moved.rollout_phase_bytes(lay) == pytest.approx(held)
    lens, ranks = np.full(64, 1024), list(range(32))
    assert kept.train("actor", lens, ranks).peak_memory_bytes - moved.train("actor", lens, ranks).peak_memory_bytes \
        == pytest.approx(held)
    # the critic's update holds the actor's weights, optimizer state and gradient buffer beside its
    # own, unless the actor's per-phase offload moves them (the critic keeps its own offload: none)
    actor = kept._resident_memory(kept.pool(ranks))
    actor_out = _ppo("workload.train_params.offload.params=true", "workload.train_params.offload.optimizer=true",
                     "workload.critic_offload.params=false")
    assert kept.train("critic", lens, ranks).peak_memory_bytes - actor_out.train("critic", lens, ranks).peak_memory_bytes \
        == pytest.approx(actor.weights_bytes + actor.optimizer_bytes + actor.gradients_bytes)


def test_a_critic_on_a_pool_of_its_own_sits_beside_neither_the_engine_nor_the_actor():
    """fuse: actor puts the critic (and the frozen models) on the aux pool, where TrainStep runs its
    update: nothing of it sits beside the actor's engine or update, nor the actor's state beside its
    update. Closed form against the shared placement: each update's peak differs by exactly the other
    trained model's kept state and the frozen weights that moved (each was charged the other's state:
    40.9 GB a device here)."""
    fused = _ppo("topology.nodes=8", "schedule.fuse=actor", "schedule.aux_fraction=0.5")
    shared = _ppo("topology.nodes=8")
    lay, hbm = fused.layout(32), fused.device.hbm_bytes
    lens, main, aux = np.full(64, 1024), list(range(32)), list(range(32, 64))

    def frozen(costs, role):
        return sum(costs._frozen_bytes(role, lay, hbm).values())

    assert fused.critic_resident_bytes(lay, hbm) == 0.0 < shared.critic_resident_bytes(lay, hbm)
    assert shared.train("actor", lens, main).peak_memory_bytes - fused.train("actor", lens, main).peak_memory_bytes \
        == pytest.approx(shared.critic_resident_bytes(lay, hbm) + frozen(shared, "actor") - frozen(fused, "actor"))
    actor_state = shared._actor_resident_bytes(shared.pool(main))
    assert actor_state > 0
    assert shared.train("critic", lens, main).peak_memory_bytes - fused.train("critic", lens, aux).peak_memory_bytes \
        == pytest.approx(actor_state + frozen(shared, "critic") - frozen(fused, "critic"))
    assert shared.rollout_phase_bytes(lay) - fused.rollout_phase_bytes(lay) == pytest.approx(
        shared.critic_resident_bytes(lay, hbm) + frozen(shared, "actor") - frozen(fused, "actor"))


def test_an_offloaded_critic_pays_its_copies_and_the_actor_does_not():
    """verl's CriticWorker: parameters in before compute_values and out after; parameters and
    optimizer in before update_critic and out after (2 x bytes over the host link each)."""
    from simulator.llm.training import offload_Bps
    from simulator.rl.llm_costs import training_state_bytes

    kept, moved = _ppo(), _ppo(*_CRITIC_OFF)
    lens, ranks = np.full(64, 1024), list(range(32))
    lay, pool = moved.layout(32), moved.pool(ranks)
    critic = training_state_bytes(moved.models["critic"], lay, moved.device.hbm_bytes, moved.critic_params)
    link = offload_Bps(moved.topology, moved._placed(pool, 32), moved.critic_params)
    assert moved.update_offload_s("critic", ranks) == pytest.approx(
        2 * (critic.weights_bytes + critic.optimizer_bytes) / link)
    assert moved.update_offload_s("actor", ranks) == kept.update_offload_s("actor", ranks) == 0.0
    values = moved.forward("critic", lens, ranks).time_s - kept.forward("critic", lens, ranks).time_s
    assert values == pytest.approx(2 * critic.weights_bytes / link, rel=1e-6)
    assert moved.forward("actor", lens, ranks).time_s == kept.forward("actor", lens, ranks).time_s


def test_an_update_that_does_not_fit_beside_the_critic_names_its_offload():
    base = ("workload.preset=ppo-llama3.1-70b", "workload.model=qwen2.5-3b", "workload.critic_model=qwen2.5-3b",
            "workload.reward.model=qwen2.5-3b", "topology.preset=dgx-h100", "topology.nodes=1",
            "workload.train_layout={tp: 1, pp: 1, zero: 0, recompute: full, micro_batch: 1}",
            "workload.rollout_layout={tp: 1, gpu_memory_utilization: 0.3}")
    lens, ranks = np.full(8, 1024), list(range(8))
    with pytest.raises(RlsimError, match="beside the critic's resident") as err:
        costs(*base).train("actor", lens, ranks)
    assert err.value.field == "workload.critic_offload" and "critic_offload" in err.value.fix
    costs(*base, *_CRITIC_OFF).train("actor", lens, ranks)   # the critic on the host: it fits
    with pytest.raises(RlsimError, match="beside the actor's resident") as err:   # the critic's update does not
        costs(*base, *_CRITIC_OFF).train("critic", lens, ranks)
    assert err.value.field == "workload.train_params.offload"


def test_critic_offload_applies_to_ppo_only():
    with pytest.raises(RlsimError, match="ppo only"):
        load_scenario(overrides=["workload.critic_offload.params=true"])


def _fsdp(*overrides):
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.train_layout={tp: 1, pp: 1, zero: 3, recompute: full, micro_batch: 4}",
                                  *overrides])
    return LlmCosts(sc, load_topology(sc.topology))


def test_a_host_resident_reference_pays_its_shard_copies_and_the_actor_pass_does_not():
    """workload.reference_cpu_offload (verl's FSDP reference: CPUOffload forced): every forward copies
    each layer's shard in at host_param_bytes_per_param, hidden as the gathers; the old log-prob pass of
    the same model (one cached cost before) is untouched, and the added time is linear in the bytes."""
    lens, ranks = np.full(512, 1500), list(range(8))
    plain, host = _fsdp(), _fsdp("workload.reference_cpu_offload=true")
    fp16 = _fsdp("workload.reference_cpu_offload=true", "workload.reference_cpu_offload_bytes_per_param=2")
    base = plain.forward("reference", lens, ranks).time_s
    added = host.forward("reference", lens, ranks).time_s - base
    assert added > 0.05 * base
    assert fp16.forward("reference", lens, ranks).time_s - base == pytest.approx(added / 2, rel=1e-9)
    assert host.forward("actor", lens, ranks).time_s == plain.forward("actor", lens, ranks).time_s
    assert host.train("actor", lens, ranks).time_s == plain.train("actor", lens, ranks).time_s


def test_a_host_resident_reference_needs_an_fsdp_layout_and_a_reference_pass():
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.reference_cpu_offload=true"])   # the preset trains at zero 1
    with pytest.raises(RlsimError, match="FSDP's") as err:
        LlmCosts(sc, load_topology(sc.topology)).forward("reference", np.full(64, 1000), list(range(8)))
    assert err.value.field == "workload.reference_cpu_offload"
    with pytest.raises(RlsimError, match="does not run"):
        load_scenario(overrides=["workload.reference=false", "workload.reference_cpu_offload=true"])
    with pytest.raises(RlsimError, match="applies to a reward model"):
        load_scenario(overrides=["workload.reward.cpu_offload=true"])
    with pytest.raises(RlsimError, match="reference_cpu_offload: true"):
        load_scenario(overrides=["workload.reference_cpu_offload_bytes_per_param=2"])
    with pytest.raises(RlsimError, match="no weights on the devices to swap"):
        load_scenario(overrides=["workload.reference_cpu_offload=true", "schedule.reference_swap_copies=3"])


def test_the_critic_micro_batches_as_its_own_batching_says_in_the_actors_mode():
    """workload.critic_batching: the critic's update and value pass take their own micro-batches (verl's
    critic keys), the actor's passes keep theirs; a count beside the actor's token budget is an error."""
    from simulator.rl.llm_costs import critic_layout

    lens, ranks = np.full(64, 1024), list(range(32))
    plain, own = _ppo(), _ppo("workload.critic_batching.micro_batch=4", "workload.critic_batching.forward_micro_batch=8")
    lay = own.layout(32)
    assert own.layout_for("critic", 32).micro_batch == 4 and own.layout_for("actor", 32) is lay
    assert own.train("critic", lens, ranks).time_s != plain.train("critic", lens, ranks).time_s
    assert own.train("actor", lens, ranks).time_s == plain.train("actor", lens, ranks).time_s
    assert own.forward("critic", lens, ranks).time_s != plain.forward("critic", lens, ranks).time_s
    assert own.forward("actor", lens, ranks).time_s == plain.forward("actor", lens, ranks).time_s
    budget = own.scenario.workload.critic_batching.model_copy(update={"micro_batch": None,
                                                                      "max_tokens_per_micro_batch": 8192})
    with pytest.raises(RlsimError, match="actor's mode") as err:
        critic_layout(lay, budget, "cfg")
    assert err.value.field == "workload.critic_batching.max_tokens_per_micro_batch"
    with pytest.raises(RlsimError, match="both given"):
        load_scenario(workload="ppo-llama3.1-70b", overrides=["workload.critic_batching.micro_batch=2",
                                                              "workload.critic_batching.max_tokens_per_micro_batch=8192"])


@pytest.mark.parametrize("kernel", sorted(params.ENTROPY_KERNEL_BYTES))
def test_the_entropy_costs_the_passes_that_compute_it_their_bytes_per_logit(kernel):
    """workload.entropy: the old log-prob pass adds its kernel's forward bytes per logit over the
    replica's tokens (equal lengths: every replica alike), the update forward and, where its loss takes
    the gradient (in_loss), backward; the reference pass computes none (closed form: tokens x vocab /
    tp x bytes / HBM)."""
    from simulator.llm.training import rates_for
    from simulator.params import ENTROPY_KERNEL_BYTES

    def run(*overrides):
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", overrides=list(overrides))
        c = LlmCosts(sc, load_topology(sc.topology))
        lens = np.full(64, 2048)
        return c, [c.forward(role, lens, range(8)).time_s for role in ("actor", "reference")] + [
            c.train("actor", lens, range(8)).time_s]

    plain, (old0, ref0, update0) = run()
    _, (old, ref, update) = run(f"workload.entropy={{passes: [old_logprob, update], in_loss: true, kernel: {kernel}}}")
    lay = plain.layout(8)
    per_byte = 64 * 2048 / lay.dp * plain.model.vocab / lay.tp / rates_for(plain.device, plain.train_params).hbm_Bps
    forward, backward = ENTROPY_KERNEL_BYTES[kernel]
    assert old - old0 == pytest.approx(forward * per_byte, rel=1e-9)
    assert update - update0 == pytest.approx((forward + backward) * per_byte, rel=1e-9)
    assert ref == ref0
    _, (old_only, _, update_plain) = run("workload.entropy={passes: [old_logprob], forward_bytes_per_logit: 7}")
    assert (old_only - old0, update_plain) == (pytest.approx(7 * per_byte, rel=1e-9), update0)
    _, (_, _, metrics_only) = run(f"workload.entropy={{passes: [update], kernel: {kernel}}}")   # no gradient
    assert metrics_only - update0 == pytest.approx(forward * per_byte, rel=1e-9)
    _, (_, _, redone) = run(f"workload.entropy={{passes: [update], in_loss: true, recompute: true, kernel: {kernel}}}")
    assert redone - update0 == pytest.approx((2 * forward + backward) * per_byte, rel=1e-9)   # its forward again


@pytest.mark.parametrize("kernel", sorted(params.ENTROPY_KERNEL_BYTES))
def test_the_updates_entropy_holds_its_kernels_tensors_beside_the_logits(kernel):
    """workload.entropy in the update: its peak holds the kernel's tensors beside the logits, autograd's
    saved ones where its loss takes the entropy (in_loss: ENTROPY_KERNEL_UPDATE_MEMORY_BYTES, or
    update_memory_bytes_per_logit), the forward peak's for the metrics alone
    (ENTROPY_KERNEL_MEMORY_BYTES); recomputed, the same. Closed form: the update's peak less the
    plain one's is bytes x the micro-batch's tokens x vocab / tp."""
    def peak(*overrides):
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", overrides=list(overrides))
        c = LlmCosts(sc, load_topology(sc.topology))
        return c, c.train("actor", np.full(64, 2048), range(8)).peak_memory_bytes

    plain, plain_peak = peak()
    lay = plain.layout(8)
    per_byte = peak("workload.entropy={passes: [update], in_loss: true, update_memory_bytes_per_logit: 1}")[1] \
        - plain_peak
    rows = per_byte / (2048 * plain.model.head_outputs / lay.tp)   # the micro-batch's 2048-token samples
    assert rows >= 1 and rows == round(rows)
    saved, transient = params.ENTROPY_KERNEL_UPDATE_MEMORY_BYTES[kernel], params.ENTROPY_KERNEL_MEMORY_BYTES[kernel]
    for spec, expected in ((f"{{passes: [update], in_loss: true, kernel: {kernel}}}", saved),
                           (f"{{passes: [update], in_loss: true, recompute: true, kernel: {kernel}}}", saved),
                           (f"{{passes: [update], kernel: {kernel}}}", transient),
                           (f"{{passes: [old_logprob], kernel: {kernel}}}", 0.0)):
        assert peak(f"workload.entropy={spec}")[1] - plain_peak == pytest.approx(expected * per_byte, rel=1e-9), spec
    assert params.ENTROPY_KERNEL_UPDATE_MEMORY_BYTES["eager-chunked-fp32"] == 8.0   # each chunk's fp32 copy + softmax


def test_entropy_keys_are_checked_where_they_apply():
    with pytest.raises(RlsimError, match="backward_bytes_per_logit applies where the update's loss"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[
            "workload.entropy={passes: [update], backward_bytes_per_logit: 3}"])
    with pytest.raises(RlsimError, match="update_memory_bytes_per_logit applies where the update's loss"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[
            "workload.entropy={passes: [update], update_memory_bytes_per_logit: 3}"])
    with pytest.raises(RlsimError, match="recompute applies where the update's loss"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.entropy={passes: [update], recompute: true}"])
    with pytest.raises(RlsimError, match="in_loss applies where the update computes"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.entropy={passes: [old_logprob], in_loss: true}"])
    with pytest.raises(RlsimError, match="set per pass from workload.entropy"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[
            "workload.train_params.compute.entropy_traffic_bytes_per_logit=3"])


def test_a_head_that_scores_the_responses_alone_is_given_them_by_the_training_step():
    """train_params.compute.head_response_only (TRL's fused head): the training step passes each
    sample's response tokens, and the head projects those alone in every pass; without it a
    costs object takes no such argument and the head projects every token."""
    import simulator

    def run(flag: str):
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", iterations=1,
                           overrides=[f"workload.train_params.compute.head_response_only={flag}",
                                      "workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
        return sc, simulator.simulate(sc, keep_samples=False).summary["stage_time_s"]

    (on_sc, on), (off_sc, off) = run("true"), run("false")
    assert on["old_logprob"] < off["old_logprob"] and on["train_actor"] < off["train_actor"]
    lens, responses = np.array([1500, 900] * 8), np.array([1000, 400] * 8)
    plain = LlmCosts(off_sc, load_topology(off_sc.topology))
    assert not plain.scores_responses
    assert plain.forward("actor", lens, range(8), scored=responses).time_s == plain.forward("actor", lens, range(8)).time_s
    scoring = LlmCosts(on_sc, load_topology(on_sc.topology))
    assert scoring.scores_responses
    assert scoring.forward("actor", lens, range(8), scored=responses).time_s < scoring.forward("actor", lens, range(8)).time_s


def test_a_scoring_head_is_priced_at_each_batchs_own_response_share():
    """Stage-cost reuse scales a batch size's first cost by work; a head over the responses alone
    (head_response_only) follows the response share instead, so its passes are priced exactly: a
    later batch of the same lengths but another share costs what it costs alone."""
    def costs(reuse: bool) -> LlmCosts:
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", iterations=1,
                           overrides=["workload.model=qwen2.5-1.5b", "workload.train_params.compute.head_response_only=true",
                                      "workload.prompts_per_step=16", "workload.mini_batch_prompts=16",
                                      f"schedule.reuse_stage_costs={str(reuse).lower()}"])
        return LlmCosts(sc, load_topology(sc.topology))

    lens = np.array([1500, 900] * 8)
    short, long = np.array([300, 200] * 8), np.array([1400, 800] * 8)
    reused, exact = costs(True), costs(False)
    for kind in ("forward", "train"):
        getattr(reused, kind)("actor", lens, range(8), scored=short)
        later = getattr(reused, kind)("actor", lens, range(8), scored=long).time_s
        alone = getattr(exact, kind)("actor", lens, range(8), scored=long).time_s
        assert later == alone
        assert alone > 1.1 * getattr(exact, kind)("actor", lens, range(8), scored=short).time_s   # the share matters


def test_a_fetch_broadcast_is_the_broadcast_collective_over_one_replica():
    # the seed's replica: TP 8 x PP 6 = 48 consecutive ranks; the reader's share reaches the other 47
    c = costs()
    assert c.train_group_devices == 48
    nbytes = 164e6 / 8
    expected = c.collectives.cost("broadcast", list(range(48)), nbytes).time_s
    assert c.fetch_broadcast_s(nbytes, range(384)) == pytest.approx(expected, rel=1e-9)
    assert c.fetch_broadcast_s(nbytes, range(48, 384)) > 0
    assert costs("workload.train_layout={tp: 1, pp: 1, ep: 1}").fetch_broadcast_s(nbytes, range(384)) == 0.0


def test_a_full_mesh_group_rings_over_all_its_links():
    # k fully linked devices run k - 1 edge-disjoint rings side by side: 8 NPUs of a 910B server
    # move a refit gather at 7 x 28 GB/s (one ring read 28); two of them share one link
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology="ascend-910b", schedule="colocated")
    c = LlmCosts(sc, load_topology(sc.topology))
    assert c._ring_bw_Bps(list(range(8))) == pytest.approx(7 * 28e9)
    assert c._ring_bw_Bps([0, 1]) == pytest.approx(28e9)
    switched = costs()   # a switched domain (CloudMatrix384): one ring, its narrowest link
    assert switched._ring_bw_Bps(list(range(8))) == pytest.approx(switched.topology.bottleneck_bw_Bps(range(8)))


# the stage-cost reuse's documented accuracy (docs/scenario-reference.md: reuse_stage_costs)
REUSE_TOLERANCE = 0.02


def _reuse_pair(*overrides: str) -> tuple[LlmCosts, LlmCosts]:
    """The costs of a small Qwen2.5-1.5B GRPO run on one DGX H100 with stage-cost reuse on, and off."""
    def one(reuse: bool) -> LlmCosts:
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated",
                           overrides=["workload.model=qwen2.5-1.5b",
                                      "workload.train_layout={tp: 1, pp: 1, zero: 1, recompute: full, micro_batch: 1}",
                                      *overrides, f"schedule.reuse_stage_costs={str(reuse).lower()}"])
        return LlmCosts(sc, load_topology(sc.topology))
    return one(True), one(False)


@pytest.mark.parametrize(("samples", "kind", "role", "overrides"), [
    (64, "train", "actor", ()),                                   # a 16-prompt mini-batch's update
    (32, "train", "actor", ()),                                   # an 8-prompt one: the optimizer a larger share
    (64, "forward", "actor", ("workload.train_params.offload.params=true",)),        # per-phase weight copies
    (256, "forward", "reference", ("workload.train_layout.zero=3", "workload.train_layout.micro_batch=4",
                                   "workload.reference_cpu_offload=true")),           # FSDP's, per micro-batch
    (64, "forward", "reward", ("workload.reward={kind: model, model: qwen2.5-1.5b, served: {}}",)),  # woken
])
def test_reused_stage_costs_keep_their_fixed_parts_and_stay_within_the_documented_tolerance(
        samples, kind, role, overrides):
    """Stage-cost reuse scales the first batch's cost by work: only its work-driven part (the slowest
    replica's). The optimizer step and gradient sync, host copies and a woken reward model's sleep /
    wake and weight copies are paid whole each batch; scaled, they put an update 7-9% off and the
    reward stage +4.5%. Every later batch of the same size is within the tolerance of its exact cost."""
    reused, exact = _reuse_pair(*overrides)
    rng = np.random.default_rng(1)
    for _ in range(8):
        lens = (rng.lognormal(np.log(128), 0.3, samples) + rng.lognormal(np.log(256), 0.5, samples)).astype(np.int64)
        got = getattr(reused, kind)(role, lens, range(8))
        want = getattr(exact, kind)(role, lens, range(8))
        assert got.time_s == pytest.approx(want.time_s, rel=REUSE_TOLERANCE)
        assert got.fixed_s == pytest.approx(want.fixed_s, rel=1e-9)
    assert want.fixed_s > 0


# qwen2.5-1.5b GRPO on one DGX-H100 node, colocated (an audit's base scenario)
_SMALL = {"model": "qwen2.5-1.5b", "algorithm": "grpo", "prompts_per_step": 16, "samples_per_prompt": 4,
          "mini_batch_prompts": 16, "ppo_epochs": 1,
          "prompt_length": {"dist": "lognormal", "median": 128, "sigma": 0.3, "max": 512},
          "response_length": {"dist": "lognormal", "median": 256, "sigma": 0.5, "max": 1024},
          "train_layout": {"tp": 1, "pp": 1, "zero": 1, "recompute": "full", "micro_batch": 1},
          "rollout_layout": {"tp": 1, "ep": 1, "gpu_memory_utilization": 0.6, "max_num_seqs": 256},
          "reward": {"kind": "rule"}}


def _phases(*overrides: str) -> dict[str, float]:
    """peak_memory_by_phase of one step of _SMALL."""
    import simulator
    sc = load_scenario(workload=dict(_SMALL), topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       iterations=1, seed=1, overrides=list(overrides))
    return simulator.simulate(sc, keep_samples=False).summary["peak_memory_by_phase"]


def _frozen_added(phases: dict[str, float], without: dict[str, float], nbytes: float) -> None:
    # (the memory model leaves out the norms' and biases' parameters: 1e-4 of qwen2.5-1.5b's)
    for phase in ("rollout", "train"):
        assert phases[phase] - without[phase] == pytest.approx(nbytes, rel=1e-4), phase


def test_a_resident_reference_holds_its_weight_shard_in_both_phases():
    """The reference's weights stay on the trainer's devices unless they live on the host: closed form,
    params x 2 bytes (bf16) / its shards, in the rollout and the training phase; the reference off,
    NeMo RL's swap (reference_swap_copies), verl's FSDP offload and a LoRA actor's base add none."""
    from simulator.llm.architecture import load_model
    params_total = float(load_model("qwen2.5-1.5b").params_total)
    off = _phases("workload.reference=false")
    _frozen_added(_phases(), off, params_total * 2.0)                  # TP1 PP1 ZeRO-1: whole
    assert _phases("schedule.reference_swap_copies=3") == off
    zero3 = "workload.train_layout.zero=3"
    _frozen_added(_phases(zero3), _phases(zero3, "workload.reference=false"), params_total * 2.0 / 8)  # FSDP: DP 8
    assert _phases(zero3, "workload.reference_cpu_offload=true") == _phases(zero3, "workload.reference=false")
    lora = "workload.lora.rank=8"
    assert _phases(lora) == _phases(lora, "workload.reference=false")
    # fuse: actor runs the reference on its aux pool: the actor's devices hold none of it through the
    # rollout (ZeRO-0: the resident state does not depend on the actor pool's 7 devices)
    zero0 = "workload.train_layout.zero=0"
    assert _phases(zero0, "schedule.fuse=actor")["rollout"] == _phases(zero0, "workload.reference=false")["rollout"]


def test_a_reward_model_on_the_trainer_holds_its_weight_shard_in_both_phases():
    """A reward model (kind model, the actor's trunk under a value head) on the trainer's devices keeps
    its bf16 weights there; on the host (reward.cpu_offload) or served (asleep between scorings, its
    weights on the host) it adds none."""
    from simulator.llm.architecture import load_model, with_value_head
    scorer = float(with_value_head(load_model("qwen2.5-1.5b")).params_total)
    model = "workload.reward.kind=model"
    _frozen_added(_phases(model), _phases(), scorer * 2.0)
    zero3 = "workload.train_layout.zero=3"
    assert _phases(zero3, model, "workload.reward.cpu_offload=true") == _phases(zero3)
    assert _phases(model, "workload.reward.served={layout: {gpu_memory_utilization: 0.2}}") == _phases()


def test_an_update_that_does_not_fit_beside_the_resident_reference_names_its_host_offload():
    base = ("workload.preset=grpo-qwen2.5-7b", "topology.preset=dgx-h100", "topology.nodes=1",
            "workload.train_layout={tp: 1, pp: 1, zero: 1, recompute: full, micro_batch: 1}")
    lens, ranks = np.full(64, 1024), list(range(8))
    with pytest.raises(RlsimError, match="beside the reference's weights 15.2 GB") as err:
        costs(*base).train("actor", lens, ranks)
    assert err.value.field == "workload.reference_cpu_offload" and "reference_swap_copies" in err.value.fix
    costs(*base, "schedule.reference_swap_copies=3").train("actor", lens, ranks)   # on the host: it fits


def test_areal_on_one_node_cannot_hold_the_presets_update_beside_its_resident_reference():
    """grpo-qwen2.5-7b under areal on one DGX-H100 node (the runs that tests of areal moved to two nodes
    from): its 4 training devices, TP2 x DP2 ZeRO-1, hold the actor's update (about 73 GB) but not the
    resident reference's 7.6 GB beside it, as a verl Megatron reference without param_offload would
    run out of memory; on two nodes (DP4), or with the reference on the host, it runs. The log-prob
    pass is the first refused: it runs beside the actor's optimizer state and its Megatron gradient
    buffer (memory.grad_buffer_persists, 15.2 GB) as well as the reference."""
    import simulator
    small = ["workload.prompts_per_step=8", "workload.samples_per_prompt=2", "workload.mini_batch_prompts=8"]
    run = dict(workload="grpo-qwen2.5-7b", schedule="areal", iterations=1, keep_samples=False)
    with pytest.raises(RlsimError, match="optimizer state and kept gradients 60.9 GB and the reference's weights "
                                         "7.6 GB") as err:
        simulator.simulate(topology={"preset": "dgx-h100", "nodes": 1}, overrides=small, **run)
    assert err.value.field == "schedule.forward_micro_batch"
    simulator.simulate(topology={"preset": "dgx-h100", "nodes": 1}, overrides=[*small, "schedule.reference_swap_copies=3"],
                       **run)
    simulator.simulate(topology={"preset": "dgx-h100", "nodes": 2}, overrides=small, **run)


def test_a_forward_whose_weights_alone_do_not_fit_beside_the_trained_state_names_its_offload_not_its_micro_batch():
    """PPO on one-step-off in the fuzz harness's tiny scenario (Qwen2.5-7B, one DGX-H100 node: 4 training devices,
    TP2 x DP2 ZeRO-1): the actor's and the critic's kept state, 88.1 GB a device, fill the 79 GB before any
    activation. The refusal named schedule.forward_micro_batch and said to lower it (the kind/knob property
    test's refused draws), which changes nothing there: it names the offload of the trained state."""
    import copy

    import simulator
    from tests.fuzz.harness import TINY_SCENARIO
    scenario = copy.deepcopy(TINY_SCENARIO)
    scenario["workload"]["algorithm"], scenario["schedule"] = "ppo", {"kind": "one-step-off"}
    with pytest.raises(RlsimError, match="the actor's forward pass does not fit in device memory: it needs 95.9 GB per "
                                         "device") as err:
        simulator.simulate(scenario=copy.deepcopy(scenario))
    assert err.value.field == "workload.train_params.offload"
    assert "forward_micro_batch" not in err.value.fix and "{params: true, optimizer: true}" in err.value.fix


_FP32_MASTER = ("workload.train_params.memory={resident_weight_bytes_per_param: 4, optimizer_bytes_per_param: 8}",)


def test_an_fp32_master_shard_is_the_trainers_alone_and_moves_no_step_time():
    """memory.resident_weight_bytes_per_param (FSDP's fp32 master shard): the trainer's resident weights
    double and its optimizer state shrinks to 8 bytes a parameter; the frozen reference beside it keeps
    weight_bytes_per_param (it has no master copy), as does its host-resident shard's count; without an
    offload no pass's time moves (the gathers stay bf16)."""
    from simulator.rl.llm_costs import frozen_model_params, frozen_weight_bytes, training_state_bytes

    lens, ranks = np.full(512, 1500), list(range(8))
    plain, fp32 = _fsdp(), _fsdp(*_FP32_MASTER)
    pool = plain.pool(ranks)
    lay, hbm = plain.layout(8), plain.device.hbm_bytes
    before = training_state_bytes(plain.model, lay, hbm, plain.train_params)
    after = training_state_bytes(fp32.model, lay, hbm, fp32.train_params)
    assert after.weights_bytes == pytest.approx(2 * before.weights_bytes, rel=1e-12)
    assert after.optimizer_bytes == pytest.approx(before.optimizer_bytes * 8 / 12, rel=1e-12)
    assert fp32._resident_memory(pool).weights_bytes == after.weights_bytes
    frozen = frozen_weight_bytes(fp32.scenario, fp32.models, "actor", lay, hbm, fp32.train_params)
    assert frozen == frozen_weight_bytes(plain.scenario, plain.models, "actor", lay, hbm, plain.train_params)
    assert frozen["reference"] == pytest.approx(before.weights_bytes, rel=1e-12)
    for role in ("reference", "reward"):
        assert frozen_model_params(fp32.train_params, fp32.scenario.workload)[role].memory.resident_bytes_per_param == 2
    for role in ("actor", "reference"):
        assert fp32.forward(role, lens, ranks).time_s == plain.forward(role, lens, ranks).time_s
    assert fp32.train("actor", lens, ranks).time_s == plain.train("actor", lens, ranks).time_s
    host = _fsdp("workload.reference_cpu_offload=true")
    host_fp32 = _fsdp("workload.reference_cpu_offload=true", *_FP32_MASTER)
    assert host_fp32.forward("reference", lens, ranks).time_s == host.forward("reference", lens, ranks).time_s


def test_only_a_given_host_offload_of_a_frozen_model_asks_for_zero3():
    """FSDP's CPU offload of the reference needs a ZeRO-3 layout; the trainer's own resident bytes
    (memory.resident_weight_bytes_per_param, FSDP's fp32 master) are not an offload of the reference
    (the frozen models' constants, a copy without it, were taken for one)."""
    def forward(*overrides):
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", overrides=["workload.train_layout.zero=1", *overrides])
        return LlmCosts(sc, load_topology(sc.topology))._forward("reference", np.full(64, 1024), 8)

    with pytest.raises(RlsimError, match="CPU offload is FSDP's") as err:
        forward("workload.reference_cpu_offload=true")
    assert err.value.field == "workload.reference_cpu_offload"
    assert forward("workload.train_params.memory.resident_weight_bytes_per_param=4").time_s > 0


def test_the_rollout_layout_used_names_the_state_dtype_only_for_a_model_with_states():
    def used(model):
        sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule="colocated", overrides=[f"workload.model={model}"])
        return LlmCosts(sc, load_topology(sc.topology)).rollout_layout_used(8)

    assert "mamba_cache_dtype" not in used("qwen2.5-7b")
    assert used("nemotron-h-8b")["mamba_cache_dtype"] == "auto"


def test_a_forward_memory_error_says_what_its_packed_micro_batch_is_in_the_forward_key():
    """Balanced packing turns the forward's rows into a packed micro-batch of many sequences; the error
    printed that count beside schedule.forward_micro_batch without saying what it was."""
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       overrides=["workload.train_software=megatron-2021", "schedule.forward_micro_batch=64"])
    with pytest.raises(RlsimError, match="does not fit in device memory") as err:
        LlmCosts(sc, load_topology(sc.topology))._forward("actor", np.full(1024, 2048), 8)
    assert err.value.field == "schedule.forward_micro_batch"
    assert "packed into one micro-batch of schedule.forward_micro_batch=64 row(s)" in err.value.message


def _batch_padded(reuse: bool = True) -> LlmCosts:
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                       schedule="colocated", iterations=1,
                       overrides=["workload.model=qwen2.5-1.5b", "schedule.distqueue.packed=false",
                                  "workload.train_params.compute.pad_rows_to=batch",
                                  "workload.prompts_per_step=16", "workload.mini_batch_prompts=8",
                                  f"schedule.reuse_stage_costs={str(reuse).lower()}"])
    return LlmCosts(sc, load_topology(sc.topology))


@pytest.mark.parametrize("reuse", [True, False])
def test_batch_padded_mini_batches_are_as_wide_as_the_step_batchs_longest(reuse):
    """pad_rows_to batch (TRL, SkyRL pad the step batch whole, then split it): mini-batches of rows
    100, 300 and 200, 900 given row_width 900 each cost what rows all 900 long cost (T = rows x 900,
    Q = rows x 900^2); without it the first pads to its own 300. A cost reused from another width is
    not taken (_reused keys the width): the 300-wide batch priced after the 900-wide one costs what
    it costs alone."""
    c, ranks = _batch_padded(reuse), range(8)
    assert c.pads_rows_to_the_batch
    first, second = np.array([100, 300] * 8), np.array([200, 900] * 8)
    full = c.train("actor", np.full(16, 900), ranks).time_s
    assert c.train("actor", second, ranks, row_width=900).time_s == pytest.approx(full, rel=1e-12)
    assert c.train("actor", first, ranks, row_width=900).time_s == pytest.approx(full, rel=1e-12)
    own = c.train("actor", first, ranks).time_s
    assert own == pytest.approx(_batch_padded(False).train("actor", np.full(16, 300), ranks).time_s, rel=1e-12)
    assert own < 0.7 * full


def test_the_training_step_gives_every_mini_batch_the_step_batchs_longest(monkeypatch):
    """The update's optimizer mini-batches (2 here) are each given row_width = the longest sample of
    the whole step batch where pad_rows_to is batch, none where rows pad per micro-batch."""
    import simulator

    seen: list[tuple[int, int | None]] = []
    train = LlmCosts.train

    def recording(self, role, seq_lens, ranks, scored=None, row_width=None):
        seen.append((int(np.max(seq_lens)), row_width))
        return train(self, role, seq_lens, ranks, scored, row_width)

    monkeypatch.setattr(LlmCosts, "train", recording)
    sc = _batch_padded().scenario
    simulator.simulate(sc, keep_samples=False)
    assert len(seen) == 2 and seen[0][1] == seen[1][1] == max(longest for longest, _ in seen)
    seen.clear()
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       iterations=1, overrides=["workload.model=qwen2.5-1.5b", "schedule.distqueue.packed=false",
                                                "workload.prompts_per_step=16", "workload.mini_batch_prompts=8"])
    simulator.simulate(sc, keep_samples=False)
    assert len(seen) == 2 and all(width is None for _, width in seen)


def test_a_replan_balances_each_demanding_batch_once_per_rows_and_dp_in_its_own_costs(monkeypatch):
    """accept_train_layout's candidates share a demanding batch's token balancing per (batch, rows, dp)
    (a re-plan's memory refusals re-balanced it for each: ~0.7 of their 1.3-1.6 ms): the same layout and
    order as computed afresh, read-only, per LlmCosts object (no state across runs), re-picked batches
    balanced again."""
    import simulator.rl.llm_costs as llm_costs
    calls: list = []
    real = llm_costs.micro_batch_permutation
    monkeypatch.setattr(llm_costs, "micro_batch_permutation", lambda *a: calls.append(a[2:4]) or real(*a))
    workload = {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 32, "mini_batch_prompts": 32, "samples_per_prompt": 4}
    topo = {"preset": "dgx-h100", "nodes": 4}

    def costs_of():
        sc = load_scenario(None, workload=workload, topology=topo, schedule="colocated",
                           overrides=["schedule.failures=[{at_s: 150, fail: 'node:1'}]"])
        return LlmCosts(sc, load_topology(topo))

    lens = np.random.default_rng(0).integers(500, 8000, 128)
    costs, fresh = costs_of(), costs_of()
    assert costs.balanced
    costs.train("actor", lens, list(range(32)))
    calls.clear()
    fits = {"tp": 1, "pp": 1, "dp": 32, "zero": 1, "recompute": "full", "micro_batch": 2}
    assert costs.accept_train_layout(fits) == 1   # one demanding batch timed
    assert calls == [(2, 32)]   # and balanced once
    for recompute in ("selective", "none"):   # the same rows and dp: not again (memory refuses these)
        with pytest.raises(RlsimError, match="does not fit in device memory"):
            costs.accept_train_layout({**fits, "recompute": recompute})
    assert calls == [(2, 32)]
    lay = TrainLayout.from_mapping(fits)
    micro, ordered = costs._demanding_micro_batched(lay, lens)
    expected_micro, expected = fresh._micro_batched_as(lay, lens)   # computed afresh, by another object
    assert micro == expected_micro and np.array_equal(ordered, expected) and not ordered.flags.writeable
    assert not np.array_equal(ordered, lens)   # balancing reordered them
    assert calls == [(2, 32), (2, 32)]
    assert costs.accept_train_layout({**fits, "dp": 16, "tp": 2}) == 1   # another dp: balanced for it
    assert calls[-1] == (2, 16) and len(calls) == 3
    costs.train("actor", lens[::-1].copy(), list(range(32)))   # a new latest batch: the demanding ones re-picked
    assert len(costs._demanding_batches()) == 2 and costs._demanding_orders == {}
