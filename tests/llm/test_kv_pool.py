"""The rollout engine's KV pool (llm/kv_pool.py, vLLM V1's hybrid KV cache manager) in closed form:
vLLM's grouping with its padding, the pages a sliding window and a Mamba state keep, the capacity of a
full-attention model unchanged, and the engine admitting and preempting against the pool."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, StepCost
from simulator.llm.kv_pool import (
    KvCacheGroups,
    KvPool,
    KvPoolShape,
    hybrid_attention_block,
    kv_cache_groups,
    kv_pages_matter,
    window_blocks,
)

H100 = get_device("h100")
GEMMA_27B = load_model("gemma-3-27b")   # 62 layers: 52 sliding (window 1024), 10 full; 16 KV heads of 128


@pytest.mark.parametrize(("layers", "groups"), [
    ((10, 52, 0), KvCacheGroups(10, 1, 6, 0)),   # Gemma-3-27B: 6 sliding groups of 10, the last 8 padding
    ((8, 40, 0), KvCacheGroups(8, 1, 5, 0)),     # Gemma-3-12B: 5 of 8, none padded
    ((18, 18, 0), KvCacheGroups(18, 1, 1, 0)),   # gpt-oss-120b: alternating layers
    ((4, 0, 24), KvCacheGroups(4, 1, 0, 6)),     # Nemotron-H-8B: 4 attention, 24 Mamba
    ((10, 0, 54), KvCacheGroups(10, 1, 0, 6)),   # Nemotron-H-56B: 54 Mamba in 6 groups of 10
    ((20, 30, 0), KvCacheGroups(20, 1, 2, 0)),   # vLLM's FIXME case: the smaller kind sets the size
    ((32, 0, 0), KvCacheGroups(32, 1, 0, 0)),    # one kind: one group of all its layers
    ((0, 0, 0), KvCacheGroups(0, 0, 0, 0)),
])
def test_groups_have_the_smallest_kinds_layer_count_and_pad_the_rest(layers, groups):
    assert kv_cache_groups(*layers) == groups


def test_a_sliding_window_keeps_its_blocks_at_most():
    assert [window_blocks(w, 16) for w in (1024, 128, 17, 16, 1)] == [65, 9, 2, 2, 1]


@given(st.integers(1, 4096), st.sampled_from([1, 16, 32, 128]))
def test_window_blocks_is_the_most_remove_skipped_blocks_leaves(window, block):
    """SlidingWindowManager: before a step over num_computed tokens c it frees the blocks below
    (c - window + 1) // block; the step allocates cdiv(c + 1, block). The most held over c."""
    c = np.arange(0, 4 * window + 4 * block)
    held = -(-(c + 1) // block) - np.maximum(0, (c - window + 1) // block)
    assert int(held.max()) == window_blocks(window, block)


def test_a_mamba_hybrids_attention_block_holds_one_layers_state():
    # Nemotron-H-8B on one device: a layer's state 1,079,296 bf16 elements, a token's page 2 x 8 x 128 x 2 B
    assert hybrid_attention_block(1_079_296 * 2, 4096, 16) == 16 * math.ceil(1_079_296 * 2 / (16 * 4096)) == 528
    assert hybrid_attention_block(100, 4096, 16) == 16   # the default block already holds it


def test_a_full_attention_model_keeps_its_capacity():
    """One group of every layer, nothing drawn a sequence: (HBM x utilization - weights - workspace)
    // (2 x layers x KV heads x head_dim x bytes) tokens, as before the pool."""
    qwen = load_model("qwen2.5-7b")
    layout, params = RolloutLayout(), InferenceParams()
    cost = StepCost(qwen, H100, layout, params)
    free = H100.hbm_bytes * layout.gpu_memory_utilization - qwen.params_total * 2 - params.workspace_bytes
    assert cost.kv_capacity_tokens == int(free // (2 * 28 * 4 * 128 * 2.0))
    assert (cost.seq_kv_tokens, cost.seq_pool_bytes_dev, cost.max_running) == (0, 0.0, 256)


def _gemma_pool(free_bytes: float) -> KvPool:
    """Gemma-3-27B's layers on one of two TP ranks (8 of its 16 KV heads), bf16, 16-token pages."""
    return KvPool(KvPoolShape(10, 52, 0, 2 * 8 * 128, 2.0, 0.0, 1024, 16), free_bytes)


def test_a_5_to_1_windowed_model_draws_its_padded_window_pages_a_sequence():
    """A token draws a page slot on the 10 full layers: 40,960 B. A running sequence draws beside its
    tokens 65 pages of 16 tokens on each of the 6 sliding groups (52 layers padded to 60): 6 x 1,040 =
    6,240 tokens' worth, not 52 / 10 x 1,040 = 5,408. A pool of a million tokens holds 121 sequences
    of 2,000 tokens (121 x 8,240 = 997,040), not 122."""
    pool = _gemma_pool(40_960 * 1_000_000)
    assert pool.shape.token_bytes == 40_960
    assert pool.capacity_tokens == 1_000_000
    assert pool.seq_tokens == 6 * 65 * 16 == 6240
    assert pool.seq_tokens > 52 / 10 * 65 * 16
    assert pool.shape.seq_bytes() == 6240 * 40_960
    assert pool.capacity_tokens // (2000 + pool.seq_tokens) == 121
    assert pool.max_seqs is None


def test_gemma_3_27b_fits_tp2_where_the_up_front_reservation_did_not():
    """At gpu_memory_utilization 0.9 on H100s: 77.3 GB a device - 27.0 GB of weights - 2 GB of
    workspace. max_num_seqs (256) windows reserved up front were 256 x 52 x 1024 x 4,096 B = 55.8 GB
    (more than the 48.3 GB left); the pool holds 48.3 GB // 40,960 B tokens instead."""
    layout, params = RolloutLayout(tp=2), InferenceParams()
    cost = StepCost(GEMMA_27B, H100, layout, params)
    free = H100.hbm_bytes * 0.9 - GEMMA_27B.params_total * 2 / 2 - params.workspace_bytes
    assert 256 * 52 * 1024 * 4096 > free
    assert cost.kv_capacity_tokens == int(free // 40_960)
    assert cost.seq_kv_tokens == 6240


def _gemma_engine(params: InferenceParams | None = None) -> RolloutEngine:
    return RolloutEngine(GEMMA_27B, H100, RolloutLayout(tp=2, max_num_seqs=1024), params)


def _finish_groups(engine: RolloutEngine) -> list[int]:
    times = np.array([f.time_s for f in engine.run()])
    return np.unique(times, return_counts=True)[1].tolist()


def test_admission_counts_each_running_sequences_window_pages():
    """Equal sequences of prompt p that finish after one decode step: the j-th is admitted while
    j (p + 2 + pages) <= C (its context, the next step's token, its pages), so waves of
    C // (p + 2 + 6,240); without the pages all 1,000 would run at once."""
    engine = _gemma_engine()
    count, prompt = 1000, 1000
    engine.add_many(range(count), [prompt] * count, [2] * count, 0.0)
    wave = engine.capacity // (prompt + 2 + 6240)
    assert wave == 162
    groups = _finish_groups(engine)
    assert groups[:-1] == [wave] * (len(groups) - 1) and sum(groups) == count


def test_sequences_that_outgrow_the_pool_are_preempted():
    """300 sequences of 100 + 3,000 tokens: 930,000 tokens fit the 1.18 M-token pool, their pages
    (300 x 6,240) do not, so the newest are preempted as the contexts grow; with no page drawn a
    sequence (the same engine, seq_kv_tokens 0) none is."""
    count = 300
    paged = _gemma_engine()
    paged.add_many(range(count), [100] * count, [3000] * count, 0.0)
    paged.run()
    cost = StepCost(GEMMA_27B, H100, RolloutLayout(tp=2, max_num_seqs=1024))
    cost.seq_kv_tokens = 0
    unpaged = RolloutEngine(GEMMA_27B, H100, cost.layout, cost=cost)
    unpaged.add_many(range(count), [100] * count, [3000] * count, 0.0)
    unpaged.run()
    assert paged.preemptions > 0 and unpaged.preemptions == 0


def test_the_page_size_sets_a_windows_draw():
    """kv_block_size 64: a 1,024-token window keeps cdiv(1023, 64) + 1 = 17 pages of 64 tokens on each
    of Gemma-3-27B's 6 sliding groups."""
    cost = StepCost(GEMMA_27B, H100, RolloutLayout(tp=2), InferenceParams(kv_block_size=64))
    assert cost.seq_kv_tokens == 6 * 17 * 64


def test_llama4s_chunks_are_cached_whole_unless_the_hybrid_manager_takes_them():
    """vLLM 0.11 turns its hybrid manager off for chunked attention (VllmConfig.__post_init__) and
    caches Llama 4 Scout's 36 chunked layers as full attention: a token draws all 48 layers' KV, a
    decode step reads the 12 full ones'. Let in (hybrid_kv_chunked_attention), the 36 are 3 groups of
    12 keeping cdiv(8191, 16) + 1 = 513 pages of a chunk each."""
    from .test_architecture import LLAMA4_SCOUT_TEXT

    scout = load_model({"model_type": "llama4", "text_config": LLAMA4_SCOUT_TEXT})
    layout, per_layer = RolloutLayout(tp=4), 2 * 2 * 128 * 2   # 8 KV heads over 4 ranks, head_dim 128, bf16
    cached = StepCost(scout, H100, layout)
    assert (cached.kv_bytes_per_token_dev, cached.kv_read_bytes_per_token_dev) == (48 * per_layer, 12 * per_layer)
    assert cached.seq_kv_tokens == 0
    paged = StepCost(scout, H100, layout, InferenceParams(hybrid_kv_chunked_attention=True))
    assert paged.kv_bytes_per_token_dev == paged.kv_read_bytes_per_token_dev == 12 * per_layer
    assert paged.seq_kv_tokens == 3 * 513 * 16
    assert paged.kv_s_per_token == cached.kv_s_per_token   # the same reads either way


def test_a_given_block_size_is_vllms_floor_of_the_hybrid_block_not_its_alignment():
    """vLLM aligns a Mamba hybrid's attention block to 16 tokens and keeps a larger --block-size
    (HybridAttentionMambaModelConfig): 528 at block sizes 16 and 32 (it read 544 at 32), 1024 at 1024."""
    state, token = 1_079_296 * 2, 4096
    assert hybrid_attention_block(state, token, 32) == hybrid_attention_block(state, token, 16) == 528
    assert hybrid_attention_block(state, token, 1024) == 1024


def test_llama4s_chunked_layers_read_the_page_size_only_where_the_hybrid_manager_pages_them():
    from .test_architecture import LLAMA4_SCOUT_TEXT

    scout = load_model({"model_type": "llama4", "text_config": LLAMA4_SCOUT_TEXT})
    assert not kv_pages_matter(scout) and kv_pages_matter(scout, chunked_paged=True)
    assert kv_pages_matter(load_model("gemma-3-27b"))


def test_without_the_hybrid_manager_gemma_3_caches_every_layer_whole():
    """vLLM 0.8.5 turns Gemma-3-27B's 52 sliding-window specs into full-attention ones (kv_cache_utils.py
    unify_hybrid_kv_cache_specs): a token draws all 62 layers' KV (62 x 2 x 8 heads x 128 x 2 B = 253,952 B
    on one of two TP ranks) and a sequence no window pages: the capacity of the model as all full attention.
    The decode step's reads stay the 10 full layers' (the kernels still attend within the window)."""
    layout = RolloutLayout(tp=2)
    whole = StepCost(GEMMA_27B, H100, layout, InferenceParams(hybrid_kv_cache_manager=False))
    paged = StepCost(GEMMA_27B, H100, layout)
    free = H100.hbm_bytes * 0.9 - GEMMA_27B.params_total * 2 / 2 - InferenceParams().workspace_bytes
    assert whole.kv_bytes_per_token_dev == 62 * 2 * 8 * 128 * 2
    assert (whole.kv_capacity_tokens, whole.seq_kv_tokens) == (int(free // 253_952), 0)
    assert whole.kv_read_bytes_per_token_dev == paged.kv_read_bytes_per_token_dev
    assert kv_pages_matter(GEMMA_27B, manager=False) is False and kv_pages_matter(GEMMA_27B) is True


def test_the_vllm_08_engines_run_a_windowed_model_without_the_hybrid_manager():
    """vLLM 0.8.5 has no hybrid manager: the vllm-0.8 engines force it off on a model mixing windows
    with full attention (model_forced, with its note), not on a full-attention one, and not later engines."""
    from simulator.engine_software import model_forced

    for name in ("vllm-0.8", "vllm-0.8-async"):
        forced, notes = model_forced(name, InferenceParams(), GEMMA_27B)
        assert forced.hybrid_kv_cache_manager is False and "unify_hybrid_kv_cache_specs" in notes[0]
        assert model_forced(name, InferenceParams(), load_model("qwen2.5-7b")) == (InferenceParams(), [])
    assert model_forced("vllm-v1", InferenceParams(), GEMMA_27B) == (InferenceParams(), [])
