"""Speculative decoding in the rollout engine (llm/speculative.py, StepCost's speculative lines):
closed forms against the step's parts, the off switch, memory, errors, and token conservation."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine_software import model_forced
from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm import inference
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, StepCost, simulate_rollout
from simulator.llm.speculative import tokens_per_step

QWEN = load_model("qwen2.5-7b")
# the target as a checkpoint with one MTP module (num_nextn_predict_layers 1), which method mtp drafts with
QWEN_MTP = dataclasses.replace(QWEN, mtp_layers=1)
DRAFT = load_model("qwen2.5-0.5b")
H100 = get_device("h100")


def _spec(alpha: float = 0.7, k: int = 3, method: str = "eagle", **extra) -> InferenceParams:
    if method == "draft_model":
        extra.setdefault("speculative_draft_model", "qwen2.5-0.5b")
    return InferenceParams(speculative_method=method, num_speculative_tokens=k, speculative_acceptance_rate=alpha,
                           **extra)


def _verify_step_by_hand(cost: StepCost, n: int, context: float) -> float:
    """One speculative step of n sequences holding `context` tokens, from the step's parts (a dense
    model on one device): k draft forwards (vLLM's padded batch: the first over the (k + 1) n verified
    positions, the others over n; each a CUDA graph up to cuda_graph_max_batch tokens, else eager; the
    LM head a row a sequence a forward) then the target's verification of k + 1 positions a sequence,
    one roofline over both."""
    d, p = cost.draft, cost.params
    width = d.verified * n
    added, floor = cost.overhead_s(width, n)
    forwards = [width] + [n] * (d.k - 1)
    layer_tokens = sum(forwards) / n   # 2k a sequence
    compute = (width * cost.lin_s_per_token + layer_tokens * n * d.layer_s_per_token + d.k * n * d.head_s_per_token
               + (d.verified * cost.decode_attn_s_per_ctx + layer_tokens * d.attn_s_per_ctx) * context)
    memory = (cost.weight_read_s(width) + d.k * d.dense_bytes / cost.bw
              + (cost.kv_s_per_token + d.k * d.kv_bytes_per_token / cost.bw) * context)
    eager_gap = max(p.cuda_graph_replay_s, p.eager_kernel_gap_s * (p.launches_per_step + p.launches_per_layer
                                                                    * d.model.num_layers))
    gaps = sum(p.cuda_graph_replay_s if tokens <= p.cuda_graph_max_batch else eager_gap for tokens in forwards)
    links = added + cost.comm_s(width) + gaps
    return max(floor, max(compute, memory) + links)


# ---- the accepted tokens ---------------------------------------------------------------------------
@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.5, 1), (0.5, 3), (0.8, 5), (1.0, 4)])
def test_tokens_a_step_are_the_geometric_sum(alpha, k):
    # E = sum_{i=0}^{k} alpha^i (Leviathan et al. eq. 1), k + 1 when every draft is accepted
    assert tokens_per_step(alpha, k) == pytest.approx(sum(alpha ** i for i in range(k + 1)), rel=1e-12)


# ---- closed forms ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "draft_model"])
@pytest.mark.parametrize("n, context", [(1, 100), (16, 16 * 2000), (512, 512 * 300)])
def test_a_step_is_the_drafts_and_the_verification(method, n, context):
    cost = StepCost(QWEN_MTP if method == "mtp" else QWEN, H100, RolloutLayout(max_num_seqs=1024), _spec(method=method))
    assert cost.verify_step_s(n, context) == pytest.approx(_verify_step_by_hand(cost, n, context), rel=1e-12)
    # a token unit is 1/E of it
    assert cost.decode_step_s(n, context) * cost.draft.tokens == pytest.approx(cost.verify_step_s(n, context), rel=1e-12)


@pytest.mark.parametrize("prompt, response", [(100, 50), (2000, 1000)])
def test_one_sequence_takes_its_tokens_over_e_steps(prompt, response):
    """One sequence: its prefill (the draft's pass included), then response - 1 tokens at 1/E of a
    step each, the context growing a token a unit: (response - 1) / E steps."""
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), _spec(alpha=0.6, k=4))
    engine.add(0, prompt, response, 0.0)
    (done,) = engine.run()
    cost = engine.cost
    units = [_verify_step_by_hand(cost, 1, prompt + 1 + j) / cost.draft.tokens for j in range(response - 1)]
    expected = cost.prefill_s(prompt, prompt * (prompt + 1) / 2) + math.fsum(units)
    assert done.time_s == pytest.approx(expected, rel=1e-12)
    assert engine.generated_tokens == response


def test_equal_sequences_take_the_series_of_speculative_steps():
    n, prompt, response = 16, 512, 300
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), _spec(alpha=0.8, k=2, method="draft_model"))
    engine.add_many(range(n), [prompt] * n, [response] * n, 0.0)
    done = engine.run()
    cost = engine.cost
    steps = [cost.verify_step_s(n, n * (prompt + 1 + j)) / cost.draft.tokens for j in range(response - 1)]
    expected = cost.prefill_s(n * prompt, n * prompt * (prompt + 1) / 2, n) + math.fsum(steps)
    assert all(t == pytest.approx(expected, rel=1e-12) for _, t in done)


@pytest.mark.parametrize("k, seqs", [(1, 1), (3, 1), (3, 8), (5, 300)])
def test_prefill_adds_the_drafters_propose_over_the_prompts(k, seqs):
    """vLLM 0.11 EagleProposer.propose after a prefill: the head's layers over every prompt token, its LM
    head on the last row of each sequence (last_token_indices), then k - 1 forwards of one token a
    sequence (layers, LM head, attention and the draft's KV over the prompts, its weights read and a
    graph replay each, eager past cuda_graph_max_batch). FLOPs from the target's shape (_eagle_flops)."""
    plain, spec = StepCost(QWEN, H100, RolloutLayout()), StepCost(QWEN, H100, RolloutLayout(), _spec(k=k))
    p = spec.params
    rate = H100.peak("bf16") * H100.gemm_efficiency
    layer, head = _eagle_flops(QWEN)
    tokens = 4096 * seqs
    pairs = seqs * 4096 * 4097 / 2
    h = QWEN.hidden
    head_bytes = (QWEN.attention_params + QWEN.dense_ffn_params + QWEN.norm_params_per_layer + h + 2 * h * h) * 2
    streamed = head_bytes + QWEN.vocab * h * 2   # its layer and fc, and the target's LM head it scores with
    draft_kv = 2 * QWEN.num_kv_heads * QWEN.head_dim * 2   # one layer's K and V a token, bf16
    attn_rate = H100.peak("bf16") * p.attention_compute_efficiency
    attn_pair = 4 * QWEN.num_heads * QWEN.head_dim   # one layer's QK^T and PV a (query, context) pair
    added, floor = plain.overhead_s(tokens, seqs)
    launches = p.launches_per_step + p.launches_per_layer * 1
    gap = p.cuda_graph_replay_s if seqs <= p.cuda_graph_max_batch else max(p.cuda_graph_replay_s,
                                                                         p.eager_kernel_gap_s * launches)
    compute = (tokens * plain.lin_s_per_token + pairs * plain.prefill_attn_s_per_pair
               + (tokens + (k - 1) * seqs) * layer / rate + k * seqs * head / rate
               + pairs * attn_pair / (H100.peak("bf16") * H100.gemm_efficiency)
               + (k - 1) * tokens * attn_pair / attn_rate)
    memory = (plain.weight_read_s(tokens) + tokens * plain.kv_s_per_token
              + (k * streamed + k * tokens * draft_kv) / spec.bw)
    links = added + plain.comm_s(tokens) + (k - 1) * gap
    assert spec.prefill_s(tokens, pairs, seqs) == pytest.approx(max(floor, max(compute, memory) + links), rel=1e-12)
    assert spec.prefill_many_s(np.array([tokens]), np.array([pairs]), np.array([seqs]))[0] == \
        spec.prefill_s(tokens, pairs, seqs)


# ---- the drafter's forwards as vLLM 0.11 runs them ---------------------------------------------------
def _eagle_flops(model) -> tuple[float, float]:
    """(an EAGLE head's layer-and-fc FLOPs a token, its LM head's a scored row), from the target's shape:
    one decoder layer, its final norm, fc 2h -> h; the untied vocab x h head."""
    h = model.hidden
    layer = model.attention_params + model.dense_ffn_params + model.norm_params_per_layer + h + 2 * h * h
    return 2.0 * layer, 2.0 * model.vocab * h


def _draft_matmul_s(cost: StepCost, n: int) -> float:
    """A whole step's matmul seconds less the target's verification: the draft forwards'."""
    d = cost.draft
    return cost._per_n(n)[0] * d.tokens - d.verified * n * (cost.lin_s_per_token + cost.decode_per_seq_s)


@pytest.mark.parametrize("unpadded", [False, True])
@pytest.mark.parametrize("n, k, alpha", [(1, 3, 0.6), (256, 3, 0.6), (64, 5, 0.8)])
def test_draft_layers_see_2k_tokens_a_sequence_and_its_lm_head_k(n, k, alpha, unpadded):
    """vLLM 0.11's padded drafter batch (disable_padded_drafter_batch False): the first draft forward's
    layers run over the k + 1 verified positions, the k - 1 others over one token, 2k in all; the LM head
    scores one row a sequence a forward, k. Unpadded (SGLang 0.4.6's draft-extend): E + k - 1 and k."""
    assert not QWEN.tied_head and not QWEN.head_bias
    cost = StepCost(QWEN, H100, RolloutLayout(max_num_seqs=1024),
                    _spec(alpha=alpha, k=k, speculative_disable_padded_drafter_batch=unpadded))
    layer, head = _eagle_flops(QWEN)
    e = sum(alpha ** i for i in range(k + 1))
    layer_tokens = (e + k - 1) if unpadded else 2 * k
    rate = H100.peak("bf16") * H100.gemm_efficiency
    assert _draft_matmul_s(cost, n) == pytest.approx((layer_tokens * n * layer + k * n * head) / rate, rel=1e-12)


def test_the_padded_first_forward_runs_eager_beyond_the_graphs():
    """n = 200, k = 3: the padded first draft forward has 800 tokens, past the 512 captured, so it runs
    eager (its kernels' gaps); unpadded at alpha 0.6 it has 200 E = 435 and replays its graph."""
    p = InferenceParams()
    replay, eager = p.cuda_graph_replay_s, max(p.cuda_graph_replay_s,
                                               p.eager_kernel_gap_s * (p.launches_per_step + p.launches_per_layer))
    n, k = 200, 3
    for unpadded, first_gap in ((False, eager), (True, replay)):
        cost = StepCost(QWEN, H100, RolloutLayout(max_num_seqs=1024),
                        _spec(alpha=0.6, k=k, speculative_disable_padded_drafter_batch=unpadded))
        added, _ = cost.overhead_s((k + 1) * n, n)
        links = cost._per_n(n)[2] * cost.draft.tokens - added - cost.comm_s((k + 1) * n)
        assert links == pytest.approx(first_gap + (k - 1) * replay, rel=1e-12)


def test_a_token_units_links_are_the_speculative_steps():
    """decode_comm_s: the links of decode_step_s's unit, 1/E of the verification's and the k draft
    forwards' (the planner's comm_fraction divides it by that unit's time); a plain step's comm_s."""
    layout = RolloutLayout(tp=2, max_num_seqs=1024)
    plain, spec = StepCost(QWEN, H100, layout), StepCost(QWEN, H100, layout, _spec(alpha=0.6, k=3))
    n = 64
    assert plain.decode_comm_s(n) == plain.comm_s(n)
    drafts = spec._draft_comm_s(4 * n) + 2 * spec._draft_comm_s(n)
    assert spec.decode_comm_s(n) == pytest.approx((spec.comm_s(4 * n) + drafts) / spec.draft.tokens, rel=1e-12)
    assert spec.decode_comm_s(n) > spec.comm_s(n) / spec.draft.tokens


def test_an_mtp_module_holds_its_own_lm_head_in_vllm_and_shares_it_in_sglang():
    """vLLM 0.11's DeepSeek MTP module allocates its own ParallelLMHead (SharedHead); SGLang gives it the
    target's (set_embed_and_head): the vocab x h table's bytes beside the weights, or not."""
    h = QWEN.hidden
    layer = QWEN.attention_params + QWEN.dense_ffn_params + QWEN.norm_params_per_layer
    shared_bytes = (layer + h + 2 * h * h) * 2
    own = StepCost(QWEN_MTP, H100, RolloutLayout(), _spec(method="mtp"))
    shared = StepCost(QWEN_MTP, H100, RolloutLayout(), _spec(method="mtp", speculative_draft_own_lm_head=False))
    assert own.draft.resident_bytes == shared_bytes + QWEN.vocab * h * 2
    assert shared.draft.resident_bytes == shared_bytes
    assert StepCost(QWEN, H100, RolloutLayout(), _spec(method="eagle")).draft.resident_bytes == shared_bytes
    for engine, own_head, unpadded in (("sglang", False, True), ("sglang-0.5.6", False, False)):
        forced, notes = model_forced(engine, _spec(method="mtp"), QWEN_MTP)
        assert forced.speculative_draft_own_lm_head is own_head
        assert forced.speculative_disable_padded_drafter_batch is unpadded and notes


# ---- off is today ----------------------------------------------------------------------------------
def test_no_speculation_is_the_plain_engine():
    lengths = np.random.default_rng(3).integers(50, 3000, 300)
    runs = [simulate_rollout(QWEN, H100, RolloutLayout(instances=2), np.full(300, 500), lengths, params=params)
            for params in (None, InferenceParams(num_speculative_tokens=0), InferenceParams(speculative_method=None))]
    for run in runs[1:]:
        assert np.array_equal(run.finish_s, runs[0].finish_s)
    assert StepCost(QWEN, H100, RolloutLayout()).draft is None


# ---- what speculation buys and costs ------------------------------------------------------------------
@pytest.mark.parametrize("method", ["eagle", "draft_model"])
def test_nothing_accepted_costs_more_than_no_speculation(method):
    plain = StepCost(QWEN, H100, RolloutLayout(max_num_seqs=1024))
    spec = StepCost(QWEN, H100, RolloutLayout(max_num_seqs=1024), _spec(alpha=0.0, method=method))
    assert spec.draft.tokens == 1.0
    for n in (1, 16, 256, 1024):
        for context in (200, 4000):
            assert spec.decode_step_s(n, n * context) > plain.decode_step_s(n, n * context)
    lengths = np.full((32, 4), 400)
    assert (simulate_rollout(QWEN, H100, RolloutLayout(), np.full((32, 4), 300), lengths, params=_spec(alpha=0.0)).makespan_s
            > simulate_rollout(QWEN, H100, RolloutLayout(), np.full((32, 4), 300), lengths).makespan_s)


def test_speed_up_falls_as_the_batch_grows_at_short_contexts():
    """Verification's k + 1 positions a sequence make the big batches compute-bound: the gain a token
    shrinks from the small batches (weights read once for E tokens) to below 1."""
    layout = RolloutLayout(max_num_seqs=1024)
    plain, spec = StepCost(QWEN, H100, layout), StepCost(QWEN, H100, layout, _spec(alpha=0.7, k=3))
    gains = [plain.decode_step_s(n, n * 200) / spec.decode_step_s(n, n * 200) for n in (64, 128, 256, 512, 1024)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 1.5 and gains[-1] < 1.0


def test_a_rollout_with_speculation_is_faster_where_drafts_are_accepted():
    lengths = np.random.default_rng(0).integers(100, 4000, (16, 4))
    plain = simulate_rollout(QWEN, H100, RolloutLayout(), np.full((16, 4), 400), lengths)
    spec = simulate_rollout(QWEN, H100, RolloutLayout(), np.full((16, 4), 400), lengths, params=_spec(alpha=0.8))
    assert spec.makespan_s < plain.makespan_s
    assert spec.generated_tokens == plain.generated_tokens == lengths.sum()


# ---- memory ----------------------------------------------------------------------------------------
def test_an_eagle_head_is_one_target_layer_and_its_fc_beside_the_weights():
    plain, spec = StepCost(QWEN, H100, RolloutLayout()), StepCost(QWEN, H100, RolloutLayout(), _spec())
    h = QWEN.hidden
    layer = QWEN.attention_params + QWEN.dense_ffn_params + QWEN.norm_params_per_layer
    head_bytes = (layer + h + 2 * h * h) * 2   # its layer, its final norm, fc 2h -> h; bf16
    assert spec.draft.resident_bytes == head_bytes
    kv = plain.kv_bytes_per_token_dev + 2 * QWEN.num_kv_heads * QWEN.head_dim * 2   # one more layer's K and V
    assert spec.kv_bytes_per_token_dev == kv
    assert spec.kv_capacity_tokens == int((plain.kv_free_bytes_dev - head_bytes) // kv)


def test_a_draft_model_holds_its_own_weights_and_cache():
    plain = StepCost(QWEN, H100, RolloutLayout(tp=2))
    spec = StepCost(QWEN, H100, RolloutLayout(tp=2), _spec(method="draft_model"))
    assert spec.draft.resident_bytes == pytest.approx(DRAFT.params_total * 2 / 2, rel=1e-12)
    kv = plain.kv_bytes_per_token_dev + 2 * DRAFT.num_layers * max(DRAFT.num_kv_heads // 2, 1) * DRAFT.head_dim * 2
    assert spec.kv_bytes_per_token_dev == kv
    assert spec.kv_capacity_tokens == int((plain.kv_free_bytes_dev - spec.draft.resident_bytes) // kv)


# ---- the drafts' lookahead slots (vLLM 0.11 scheduler.py num_lookahead_tokens) -------------------------
@pytest.mark.parametrize("method, k, given, held", [
    # the k drafts under verification (new = 1 + k, the 1 the context's next) and, use_eagle(), k lookahead
    ("eagle", 3, None, 6), ("eagle3", 5, None, 10), ("mtp", 2, None, 4),
    ("draft_model", 3, None, 3),   # no use_eagle(): the verified drafts' alone
    ("eagle", 3, 0, 0), ("eagle", 3, 7, 7),   # speculative_lookahead_tokens overrides
])
def test_a_running_sequence_holds_its_drafts_lookahead_slots(method, k, given, held):
    extra = {} if given is None else {"speculative_lookahead_tokens": given}
    cost = StepCost(QWEN_MTP if method == "mtp" else QWEN, H100, RolloutLayout(), _spec(k=k, method=method, **extra))
    assert cost.seq_kv_tokens == held
    # each slot draws a token of the target's KV and the draft's
    assert cost.seq_pool_bytes_dev == held * cost.kv_bytes_per_token_dev
    assert StepCost(QWEN, H100, RolloutLayout()).seq_kv_tokens == 0


def test_a_sequence_that_leaves_no_room_for_its_lookahead_is_refused():
    """vLLM allocates computed + new + lookahead slots a running request (new = 1 + k): a sequence of
    prompt + response C - 2k fits a pool of C tokens (its tokens' slots, the k verified drafts' and k
    lookahead slots beside them), not C - 2k + 1."""
    k = 3
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), _spec(k=k))
    capacity = engine.cost.kv_capacity_replica
    engine.add(0, capacity - 2 * k - 100, 100, 0.0)
    with pytest.raises(RlsimError, match="lookahead slots"):
        engine.add(1, capacity - 2 * k + 1 - 100, 100, 0.0)
    # without the slots (SGLang's) the longer one fits
    RolloutEngine(QWEN, H100, RolloutLayout(), _spec(k=k, speculative_lookahead_tokens=0)).add(
        1, capacity - 2 * k + 1 - 100, 100, 0.0)


def test_sglang_holds_no_lookahead_slots():
    """SGLang takes its draft slots and gives them back within a step (eagle_worker.py draft:
    alloc_token_slots(backup_state=True) ... restore_state)."""
    for engine in ("sglang", "sglang-0.5.2", "sglang-0.5.6"):
        forced, notes = model_forced(engine, _spec(method="eagle"), QWEN)
        assert forced.speculative_lookahead_tokens == 0
        assert any("speculative_lookahead_tokens 0" in note for note in notes)


# ---- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, key", [
    ({"speculative_method": "eagle", "num_speculative_tokens": 3}, "speculative_acceptance_rate"),
    ({"num_speculative_tokens": 3}, "num_speculative_tokens"),
    ({"speculative_method": "mtp", "speculative_acceptance_rate": 0.7}, "num_speculative_tokens"),
    ({"speculative_acceptance_rate": 0.7}, "speculative_acceptance_rate"),
    ({"speculative_method": "draft_model", "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.7},
     "speculative_draft_model"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.7,
      "speculative_draft_model": "qwen2.5-0.5b"}, "speculative_draft_model"),
    ({"speculative_method": "draft_model", "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.7,
      "speculative_draft_model": "qwen2.5-0.5b", "speculative_draft_layers": 2}, "speculative_draft_layers"),
    ({"speculative_draft_fc_inputs": 2}, "speculative_draft_fc_inputs"),
    ({"speculative_disable_padded_drafter_batch": True}, "speculative_disable_padded_drafter_batch"),
    ({"speculative_lookahead_tokens": 3}, "speculative_lookahead_tokens"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.7,
      "speculative_lookahead_tokens": -1}, "speculative_lookahead_tokens"),
    ({"speculative_method": "draft_model", "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.7,
      "speculative_draft_model": "qwen2.5-0.5b", "speculative_draft_own_lm_head": True}, "speculative_draft_own_lm_head"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 3, "speculative_acceptance_rate": 1.5},
     "speculative_acceptance_rate"),
])
def test_speculation_keys_name_themselves(given, key):
    with pytest.raises(RlsimError) as err:
        InferenceParams.from_mapping(given, source="s.yaml", field_name="workload.inference")
    assert f"workload.inference.{key}" in str(err.value)


def test_an_unknown_draft_is_named():
    with pytest.raises(RlsimError, match="workload.inference.speculative_draft_model"):
        StepCost(QWEN, H100, RolloutLayout(), _spec(method="draft_model", speculative_draft_model="no-such-model"),
                 layout_field="workload.rollout_layout")


@pytest.mark.parametrize("model, layout", [(QWEN, RolloutLayout(pp=2)), (load_model("gemma-3-27b"), RolloutLayout(tp=2))])
def test_what_speculation_does_not_model_is_refused(model, layout):
    with pytest.raises(RlsimError, match="workload.inference.speculative_method"):
        StepCost(model, H100, layout, _spec(), layout_field="workload.rollout_layout")


def test_mtp_needs_the_targets_own_mtp_modules():
    """method mtp drafts with the checkpoint's num_nextn_predict_layers modules: a model without them is
    refused naming the key; DeepSeek-V3's config carries one."""
    with pytest.raises(RlsimError, match="num_nextn_predict_layers") as err:
        StepCost(QWEN, H100, RolloutLayout(), _spec(method="mtp"), layout_field="workload.rollout_layout")
    assert err.value.field == "workload.inference.speculative_method"
    assert load_model("deepseek-v3").mtp_layers == 1 and QWEN.mtp_layers == 0


def test_async_scheduling_is_refused_with_speculation():
    with pytest.raises(RlsimError) as err:
        StepCost(QWEN, H100, RolloutLayout(), _spec(async_scheduling=True), layout_field="workload.rollout_layout")
    assert err.value.field == "workload.inference.async_scheduling"


# ---- conservation and the engine's two paths -----------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 600)), min_size=1, max_size=60),
       st.floats(0.0, 1.0), st.integers(1, 6), st.sampled_from(["eagle", "draft_model", "mtp"]),
       st.integers(1, 16), st.floats(0.05, 0.95))
def test_tokens_are_conserved_and_both_paths_agree(seqs, alpha, k, method, max_seqs, cut):
    """Every sequence finishes once with its tokens made once, across an interrupt and its resumption;
    the array run and the event loop give the same finish times, bit for bit."""
    prompts, responses = (list(x) for x in zip(*seqs, strict=True))
    params, layout = _spec(alpha=alpha, k=k, method=method), RolloutLayout(max_num_seqs=max_seqs)
    finishes = []
    for fast in (1, 10**9):
        old = inference.FAST_RUN_MIN_SEQUENCES
        inference.FAST_RUN_MIN_SEQUENCES = fast
        try:
            engine = RolloutEngine(QWEN_MTP, H100, layout, params)
            engine.add_many(range(len(seqs)), prompts, responses, 0.0)
            finishes.append({f.seq_id: f.time_s for f in engine.run()})
        finally:
            inference.FAST_RUN_MIN_SEQUENCES = old
        assert engine.generated_tokens == sum(responses)
    assert finishes[0] == finishes[1]
    engine = RolloutEngine(QWEN_MTP, H100, layout, params)
    engine.add_many(range(len(seqs)), prompts, responses, 0.0)
    result = engine.interrupt(cut * max(finishes[0].values()))
    rest = RolloutEngine(QWEN_MTP, H100, layout, params)
    if result.partial:
        rest.add_many([s.seq_id for s in result.partial], [s.prompt_len for s in result.partial],
                      [s.response_len for s in result.partial], 0.0, [s.generated for s in result.partial])
    resumed = rest.run()
    assert sorted([f.seq_id for f in result.finished] + [f.seq_id for f in resumed]) == list(range(len(seqs)))
    assert engine.generated_tokens + rest.generated_tokens == sum(responses)
