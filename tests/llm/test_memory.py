"""Training memory: 18 B/param mixed-precision Adam (fp32 gradient buffer), ZeRO sharding, Korthikanti activations, fit check."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import MemoryParams, activation_bytes_per_token, check_fits, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.params import CommParams, train_software

GPT = load_model("gpt-1.7b")          # 24 layers, h 2304, 24 heads, tied embeddings
BIG = 1e15                            # capacity that always fits


def _states(layout: TrainLayout, model=GPT):
    b = memory_per_device(model, layout, 2048, BIG)
    return b.weights_bytes, b.gradients_bytes, b.optimizer_bytes


def test_mixed_precision_adam_with_an_fp32_gradient_buffer_is_18_bytes_per_parameter_before_sharding():
    w, g, o = _states(TrainLayout(dp=1, zero=0))
    params = w / 2
    # GPT presets tie the embedding; with pp = 1 one copy is held (the model's full count minus positions).
    assert params == pytest.approx(GPT.params_total, rel=0.01)
    assert (w + g + o) / params == pytest.approx(18.0)
    # the gradient buffer holds what the data-parallel reduction moves (Megatron-Core grad_reduce_in_fp32)
    assert MemoryParams().grad_bytes_per_param == CommParams().grad_reduce_bytes_per_param == 4.0


@pytest.mark.parametrize("stack", ["megatron-2021", "megatron-2022"])
def test_the_2021_and_2022_stacks_keep_the_zero_papers_16_bytes_with_their_bf16_reduction(stack):
    params = train_software(stack).params
    memory = params.memory
    assert memory.weight_bytes_per_param + memory.grad_bytes_per_param + memory.optimizer_bytes_per_param == 16.0
    assert memory.grad_bytes_per_param == params.comm.grad_reduce_bytes_per_param == 2.0


@settings(max_examples=20, deadline=None)
@given(dp=st.sampled_from([2, 4, 8, 16]), zero=st.integers(0, 3))
def test_zero_stages_shard_as_documented(dp, zero):
    w0, g0, o0 = _states(TrainLayout(dp=dp, zero=0))
    w, g, o = _states(TrainLayout(dp=dp, zero=zero))
    assert o == pytest.approx(o0 / dp if zero >= 1 else o0)   # ZeRO-1: optimizer states
    assert g == pytest.approx(g0 / dp if zero >= 2 else g0)   # ZeRO-2: + gradients
    assert w == pytest.approx(w0 / dp if zero >= 3 else w0)   # ZeRO-3: + weights


def test_tp_and_pp_divide_the_states():
    w1, *_ = _states(TrainLayout(dp=1, zero=0))
    w8, *_ = _states(TrainLayout(tp=8, dp=1, zero=0))
    assert w8 == pytest.approx(w1 / 8, rel=1e-9)
    w_pp, *_ = _states(TrainLayout(pp=4, dp=1, zero=0))
    # Stage 0 holds 6 layers and the input embedding (the head copy sits on the last stage).
    assert w_pp == pytest.approx(2 * (6 * layer_shapes(GPT)[0].dense_params + GPT.vocab * GPT.hidden))


def test_activations_follow_korthikanti_table_2():
    lay, h, a, s, t = layer_shapes(GPT)[0], 2304, 24, 2048, 8
    p = MemoryParams()

    def per_token(**kw):
        return activation_bytes_per_token(lay, h, 4 * h, False, context_len=s, params=p, **kw)

    assert per_token(tp=1, sp=False, recompute="none", flash=False) == pytest.approx(h * (34 + 5 * a * s / h))
    assert per_token(tp=t, sp=False, recompute="none", flash=False) == \
        pytest.approx(h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert per_token(tp=t, sp=True, recompute="none", flash=False) == pytest.approx(h * (34 + 5 * a * s / h) / t)
    assert per_token(tp=t, sp=True, recompute="selective", flash=False) == pytest.approx(34 * h / t)
    assert per_token(tp=t, sp=True, recompute="full", flash=False) == pytest.approx(2 * h / t)
    assert per_token(tp=1, sp=False, recompute="none", flash=True) == pytest.approx(34 * h)


def test_an_moe_layer_keeps_each_tokens_k_routed_copies_in_and_out():
    """The expert FC1's input, k copies of each token in expert order, is kept for its weight
    gradient (Megatron-Core's token dispatcher), and the k expert outputs back in token order for
    the routing probabilities' gradient (moe_utils.unpermute's product with probs): 2 x k x 2h bytes
    per token on an MoE layer, split by TP with SP as the dispatch is; none with full recompute (the
    layer input alone)."""
    model = load_model("qwen3-30b-a3b")
    lay = layer_shapes(model)[0]
    assert lay.moe and lay.experts_per_token == 8
    p = MemoryParams()

    def per_token(**kw):
        return activation_bytes_per_token(lay, model.hidden, model.ffn_hidden, True, context_len=4096, params=p,
                                          flash=True, **kw)

    without = dataclasses.replace(lay, experts_per_token=0)
    base = activation_bytes_per_token(without, model.hidden, model.ffn_hidden, True, context_len=4096, params=p,
                                      flash=True, tp=1, sp=False, recompute="none")
    copies = 2 * 8 * 2 * model.hidden
    up = sum(g.n_out for g in lay.gemms if g.name.endswith("_up") and g.expert)
    assert per_token(tp=1, sp=False, recompute="none") == pytest.approx(base + copies + 8 * up * 2 * 1.5)
    assert per_token(tp=4, sp=True, recompute="full") == pytest.approx(2 * model.hidden / 4)


def test_1f1b_first_stage_holds_p_micro_batches_and_interleaving_adds_1_plus_p_minus_1_over_pv():
    per_layer = 34 * 2304 * 2048  # selective recompute, tp 1, one sequence
    L, p = 24, 4
    b1 = memory_per_device(GPT, TrainLayout(pp=p, dp=1, recompute="selective"), 2048, BIG, flash_attention=False,
                           micro_batches=16)
    assert b1.stage == 0 and b1.activations_bytes == pytest.approx(L * per_layer)
    v = 2
    b2 = memory_per_device(GPT, TrainLayout(pp=p, vpp=v, dp=1, recompute="selective"), 2048, BIG,
                           flash_attention=False, micro_batches=16)
    assert b2.activations_bytes == pytest.approx(L * per_layer * (1 + (p - 1) / (p * v)))


def test_layout_that_does_not_fit_names_the_breakdown():
    b = memory_per_device(load_model("llama3.1-70b"), TrainLayout(dp=1, zero=0, recompute="none"), 4096, 80e9)
    assert not b.fits
    with pytest.raises(RlsimError, match=r"weights .* GB \+ gradients .* optimizer .* activations") as exc:
        check_fits(b, what="llama3.1-70b", source="scenario.yaml")
    assert "scenario.yaml" in str(exc.value) and "fix:" in str(exc.value)
    assert exc.value.field == "train_layout"                    # standalone: the bare layout key
    with pytest.raises(RlsimError) as exc:
        check_fits(b, what="llama3.1-70b", source="scenario.yaml", field="workload.train_layout")
    assert exc.value.field == "workload.train_layout"


def test_moe_expert_states_shard_by_ep():
    moe = load_model("qwen3-30b-a3b")
    w1, *_ = _states(TrainLayout(dp=8, ep=1, zero=0), moe)
    w8, *_ = _states(TrainLayout(dp=8, ep=8, zero=0), moe)
    experts = moe.params_routed_experts
    assert w1 - w8 == pytest.approx(2 * experts * (1 - 1 / 8), rel=1e-6)


def _gathered(layout: TrainLayout, model=GPT, **memory):
    return memory_per_device(model, layout, 2048, BIG, params=MemoryParams(**memory)).gathered_bytes


def test_zero3_holds_the_computing_and_prefetched_layers_and_the_root_unit_whole():
    """torch FSDP BACKWARD_PRE: the current and next layer's parameters and the current layer's
    gradient, plus the root unit (embedding; tied at pp 1: one copy) kept whole with its gradient."""
    layer = layer_shapes(GPT)[0].dense_params
    emb = GPT.vocab * GPT.hidden
    assert _gathered(TrainLayout(dp=8, zero=3)) == pytest.approx(2.0 * (3 * layer + 2 * emb))
    assert _gathered(TrainLayout(dp=8, zero=3), zero3_prefetch_layers=0) == pytest.approx(2.0 * (2 * layer + 2 * emb))
    assert _gathered(TrainLayout(dp=8, zero=3), zero3_outer_gathered=False) == pytest.approx(2.0 * 3 * layer)
    # TP splits what a device gathers; the working set does not shrink with DP
    assert _gathered(TrainLayout(tp=2, dp=4, zero=3)) == pytest.approx(_gathered(TrainLayout(dp=8, zero=3)) / 2)
    assert _gathered(TrainLayout(dp=64, zero=3)) == _gathered(TrainLayout(dp=8, zero=3))


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_below_zero3_nothing_is_gathered(zero):
    b = memory_per_device(GPT, TrainLayout(dp=8, zero=zero), 2048, BIG)
    assert b.gathered_bytes == 0.0
    assert b.total_bytes == pytest.approx(b.weights_bytes + b.gradients_bytes + b.optimizer_bytes
                                          + b.activations_bytes + b.logits_bytes)


def test_the_gathered_working_set_counts_toward_the_fit_and_is_named():
    b = memory_per_device(GPT, TrainLayout(dp=8, zero=3), 2048, BIG)
    assert b.total_bytes == pytest.approx(b.weights_bytes + b.gradients_bytes + b.optimizer_bytes
                                          + b.activations_bytes + b.logits_bytes + b.gathered_bytes)
    assert "ZeRO-3 gathered" in b.describe() and b.as_dict()["gathered_bytes"] == b.gathered_bytes
    tight = memory_per_device(GPT, TrainLayout(dp=8, zero=3), 2048,
                              (b.total_bytes - b.gathered_bytes / 2) / MemoryParams().hbm_usable_fraction)
    with pytest.raises(RlsimError, match="ZeRO-3 gathered"):
        check_fits(tight, what="gpt")


def test_moe_zero3_gathers_a_layers_expert_share_after_ep():
    moe = load_model("qwen3-30b-a3b")
    lay = next(s for s in layer_shapes(moe) if s.moe)
    per_device = lay.dense_params + lay.expert_params / 8
    got = _gathered(TrainLayout(dp=8, ep=8, zero=3), moe, zero3_outer_gathered=False)
    assert got == pytest.approx(2.0 * 3 * per_device)


def test_the_out_of_memory_fix_names_only_what_the_layout_can_still_take():
    """A layout at ZeRO 1 with full recompute and one sequence a micro-batch is not told to use
    'zero: 1-3, recompute: full, a smaller micro_batch' (found by a new-user trial)."""
    lay = TrainLayout(dp=8, zero=1, recompute="full", micro_batch=1)
    b = memory_per_device(GPT, lay, 2048, 1e6)
    with pytest.raises(RlsimError) as exc:
        check_fits(b, what="gpt", layout=lay)
    assert exc.value.fix == "raise tp / pp, zero: 2-3, or devices with more HBM"
    with pytest.raises(RlsimError) as exc:
        check_fits(b, what="gpt")
    assert "recompute: full" in exc.value.fix and "a smaller micro_batch" in exc.value.fix


def test_a_token_budgets_pack_attends_within_each_sequence():
    """Materialized scores (flash off) under a token budget: the pack of 16 x 1024 tokens was read as
    one 16,384-token sequence, 10x the score memory of the same sequences as a micro-batch of 16
    (a training audit): Korthikanti's 5 a s per token takes each sequence's own s."""
    from simulator.hardware.topology import load_topology
    from simulator.llm.train_compute import ComputeParams
    from simulator.llm.training import TrainParams, train_step_cost, uniform_sequences

    topo, model = load_topology({"preset": "dgx-h100", "nodes": 1}, {}), load_model("gpt-1.7b")
    params = TrainParams(check_memory=False, compute=ComputeParams(flash_attention=False))
    seqs = uniform_sequences(128, 1024)
    counted = train_step_cost(model, TrainLayout(dp=8, micro_batch=16, recompute="none"), topo, sequences=seqs,
                              packing="packed", params=params).memory
    budget = train_step_cost(model, TrainLayout(dp=8, max_tokens_per_micro_batch=16384, recompute="none"), topo,
                             sequences=seqs, packing="packed", params=params).memory
    h, heads, layers = 2304, 24, 24
    assert budget.activations_bytes == pytest.approx(counted.activations_bytes, rel=1e-12)
    assert budget.activations_bytes == pytest.approx(16384 * layers * (34 * h + 5 * heads * 1024), rel=1e-9)


QWEN7B = load_model("qwen2.5-7b")


def _layer_bytes(stack: str) -> float:
    layer = layer_shapes(QWEN7B)[0]
    return activation_bytes_per_token(layer, QWEN7B.hidden, QWEN7B.ffn_hidden, True, tp=1, sp=False, recompute="none",
                                      flash=True, context_len=1.0, params=train_software(stack).params.memory)


def test_hf_transformers_keeps_what_autograd_saves_of_its_unfused_norms_and_gated_ffn():
    """benchmarks/hf_saved_activations.py: 225,400 B a Qwen2.5-7B layer-token (less lse and rsqrt, 120 B)."""
    h, f = QWEN7B.hidden, QWEN7B.ffn_hidden
    q, kv = QWEN7B.num_heads * QWEN7B.head_dim, QWEN7B.num_kv_heads * QWEN7B.head_dim
    attention = 2 * (q + 2 * kv + q)
    # 2 norms x 6 B (fp32 input + bf16 normalized) + 2 linear inputs x 2 B, no masks; gate, act, up, product
    assert _layer_bytes("hf-transformers") == 16 * h + attention + 8 * f == 225_280
    # Megatron's fused counts stay: 2 norm inputs + 2 linear inputs (2 B), 2 masks (1 B), 3 FFN-wide tensors
    assert _layer_bytes("megatron-core") == 10 * h + attention + 6 * f == 165_888
    # Liger's kernels keep Megatron's tensors, without dropout masks
    assert _layer_bytes("hf-transformers-liger") == 8 * h + attention + 6 * f


def test_full_recompute_keeps_each_layers_input_whatever_the_stack():
    layer = layer_shapes(QWEN7B)[0]
    for stack in ("hf-transformers", "megatron-core"):
        assert activation_bytes_per_token(layer, QWEN7B.hidden, QWEN7B.ffn_hidden, True, tp=1, sp=False,
                                          recompute="full", flash=True, context_len=1.0,
                                          params=train_software(stack).params.memory) == 2 * QWEN7B.hidden


FP32_MASTER = MemoryParams(resident_weight_bytes_per_param=4.0, optimizer_bytes_per_param=8.0)


@pytest.mark.parametrize("zero", [0, 3])
def test_an_fp32_master_shard_counts_16_bytes_a_parameter_and_gathers_bf16(zero):
    """FSDP with fp32 master parameters (verl's actor): the resident shard 4 bytes, fp32 gradients 4,
    AdamW's m and v 8 = 16 a parameter where the default counts 18; the gathered working set stays
    in weight_bytes_per_param (bf16 under MixedPrecision)."""
    dp = 8
    default = memory_per_device(GPT, TrainLayout(dp=dp, zero=zero), 2048, BIG)
    fp32 = memory_per_device(GPT, TrainLayout(dp=dp, zero=zero), 2048, BIG, params=FP32_MASTER)
    params = default.weights_bytes / 2.0 * (dp if zero >= 3 else 1)   # the stage's parameters
    shard = dp if zero >= 3 else 1
    assert fp32.weights_bytes == pytest.approx(4.0 * params / shard, rel=1e-12)
    assert fp32.gradients_bytes == pytest.approx(4.0 * params / shard, rel=1e-12)
    assert fp32.optimizer_bytes == pytest.approx(8.0 * params / (dp if zero >= 1 else 1), rel=1e-12)
    if zero == 0:
        assert (fp32.weights_bytes + fp32.gradients_bytes + fp32.optimizer_bytes) / params == pytest.approx(16.0)
    assert fp32.gathered_bytes == default.gathered_bytes
    assert fp32.activations_bytes == default.activations_bytes and fp32.logits_bytes == default.logits_bytes


def test_the_resident_weight_bytes_default_to_the_weights_dtype():
    assert MemoryParams().resident_bytes_per_param == MemoryParams().weight_bytes_per_param == 2.0
    assert MemoryParams(weight_bytes_per_param=1.0).resident_bytes_per_param == 1.0
    assert FP32_MASTER.resident_bytes_per_param == 4.0
    with pytest.raises(ValueError):
        MemoryParams(resident_weight_bytes_per_param=0.0)


@pytest.mark.parametrize("name", ["deepseek-v3", "nemotron-h-8b"])
def test_full_recompute_rebuilds_the_stages_largest_layer_not_its_first(name):
    """Full recompute keeps each layer's input and, during a layer's backward, that layer's whole
    activations: the stage's peak holds the largest layer's, which on a stage that opens with a
    smaller layer (DeepSeek-V3's first_k_dense dense layers before its MoE layers; a hybrid's Mamba
    block before its attention block) is not the first one's."""
    model = load_model(name)
    shapes = layer_shapes(model)
    tokens, tp = 4096.0, 2
    p = MemoryParams()

    def per_token(lay, recompute):
        return activation_bytes_per_token(lay, model.hidden, model.ffn_hidden, bool(getattr(model, "gated_ffn", True)),
                                          tp=tp, sp=True, recompute=recompute, flash=True, context_len=tokens, params=p)

    whole = [per_token(lay, "none") for lay in shapes]
    assert max(whole) > whole[0]                          # the case: the first layer is not the largest
    b = memory_per_device(model, TrainLayout(tp=tp, dp=1, zero=0, recompute="full"), tokens, BIG, micro_batches=1)
    inputs = sum(per_token(lay, "full") for lay in shapes) * tokens   # one micro-batch in flight (pp 1)
    assert b.activations_bytes == pytest.approx(inputs + max(whole) * tokens, rel=1e-12)


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_the_stage_sums_are_keyed_on_the_attended_length_only_where_the_activations_read_it(flash, recompute):
    """stage_sums_context: the materialized scores (flash off, recompute none; full recompute's rebuilt
    group) read the attended length, flash attention and selective recompute do not: two lengths that
    give one key give the same activation bytes, two that give two keys different ones."""
    from simulator.llm.memory import stage_sums_context

    layer, params = layer_shapes(GPT)[0], MemoryParams()
    read = not flash and recompute != "selective"
    assert (stage_sums_context(512.0, flash, recompute) != stage_sums_context(2048.0, flash, recompute)) is read
    assert stage_sums_context(512.0, flash, recompute) == (512.0 if read else 0.0)
    for mode in {recompute, "none"} if recompute == "full" else {recompute}:   # full: its rebuilt layers' too
        short, long = (activation_bytes_per_token(layer, GPT.hidden, GPT.ffn_hidden, True, tp=2, sp=True,
                                                  recompute=mode, flash=flash, context_len=c, params=params)
                       for c in (512.0, 2048.0))
        assert (short != long) is (read and mode == "none")


def test_micro_batches_of_other_lengths_share_one_stage_sum_under_flash_attention():
    """Layouts judged at micro-batches of other lengths (the planner's candidates, each at its heaviest)
    compute the per-stage sums once under flash attention: the same floats as computed anew."""
    from simulator.llm import memory

    layout = TrainLayout(dp=2, pp=2, micro_batch=3, recompute="none")
    memory_per_device(GPT, layout, 1000.0, BIG)
    before = memory._stage_sums.cache_info()
    again = memory_per_device(GPT, layout, 1700.0, BIG)
    after = memory._stage_sums.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)
    memory._stage_sums.cache_clear()
    assert again == memory._memory_per_device(GPT, layout, 1700.0, BIG, MemoryParams(), True, None, 1700.0)


def test_equal_middle_stages_share_one_sum_and_their_states_are_each_stages_own():
    """_stage_sums gives a uniform model's equal stages one tuple; _memory_per_device then takes a middle
    stage's states (all but its activations) from its predecessor: the breakdown is the one every stage
    computed on its own gives (the largest total, the first of equals)."""
    from simulator.llm import memory

    layout = TrainLayout(dp=1, pp=6, micro_batch=2, zero=0, recompute="full")
    chunks = memory.layout_stage_layers(GPT.num_layers, layout)
    sums = memory._stage_sums(GPT, chunks, 6, 1, 1, 1, 1, False, "full", True, 0.0, MemoryParams(), "uniform", 1)
    assert all(sums[s] is sums[0] for s in range(6))   # 4 equal layers a stage (the embedding: _stage_states')
    got = memory_per_device(GPT, layout, 1024.0, BIG, micro_batches=12)
    tokens, best = 2 * 1024.0, None
    for s in range(6):
        w, g, o, lo, ga, bu, co, sg, st, step = memory._stage_states(GPT, layout, MemoryParams(), sums[s], s == 0,
                                                                     s == 5, tokens, 12, 12, 0.0)
        acts = memory._in_flight_activations([c * tokens for c in sums[s][3]], 6, 1, 12, s) + tokens * sums[s][4]
        total = w + g + o + acts + lo + ga + bu + st
        if best is None or total > best[0]:
            best = (total, s, acts)
    assert (got.stage, got.activations_bytes, got.total_bytes) == (best[1], best[2], best[0])
