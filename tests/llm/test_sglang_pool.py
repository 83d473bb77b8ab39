"""SGLang's KV memory (llm/sglang_pool.py, InferenceParams.kv_pool: sglang) in closed form: the full and
SWA pools of a sliding-window model, the architectures SGLang caches whole, a full-attention model
unchanged, the Mamba state slots bounding the running requests, and the padded B / C groups."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine_software import engine_software
from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import extra_groups_for_head_shards, load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, StepCost
from simulator.llm.sglang_pool import SglangPool, keeps_swa_pool, pool_knobs_applicable
from simulator.params import engine_constants_read_past

H100 = get_device("h100")
SGLANG = InferenceParams(kv_pool="sglang")
GEMMA_27B = load_model("gemma-3-27b")   # 62 layers: 52 sliding (window 1024), 10 full; 16 KV heads of 128
GEMMA_LIKE = GEMMA_27B.replace(model_type="")   # the same layers, an architecture SGLang keeps an SWA pool for
NEMOTRON_8B = load_model("nemotron-h-8b")       # 4 attention (8 KV heads of 128), 24 Mamba-2 layers


def test_the_pool_splits_a_layers_tokens_by_the_swa_ratio():
    """1,000 tokens on every one of 62 layers: 62,000 / (0.8 x 52 + 10) = 1,201 on a full layer,
    int(1,201 x 0.8) = 960 on a sliding one; the scheduler admits against the smaller."""
    per_layer = 4096
    pool = SglangPool(62 * per_layer * 1000, 10 * per_layer, 10, 52 * per_layer, 52)
    assert pool.pool_tokens() == (1201, 960)
    assert pool.capacity_tokens == 960 and pool.seq_tokens == 0 and pool.max_seqs is None
    assert SglangPool(62 * per_layer * 1000, 10 * per_layer, 10, 52 * per_layer, 52, 1.0).capacity_tokens == 1000


def test_a_gemma3_like_models_pools_by_hand():
    """TP 2: 8 KV heads of 128 a rank, 4,096 bytes a token a layer. T = free // (62 x 4,096) over all
    layers; full = int(62 T / 51.6), swa = int(0.8 full); the SWA pool admits. Nothing beside a
    request's tokens (page size 1, no window pages)."""
    cost = StepCost(GEMMA_LIKE, H100, RolloutLayout(tp=2), SGLANG)
    tokens = int(cost.kv_free_bytes_dev // (62 * 4096))
    full = int(tokens * 62 / (0.8 * 52 + 10))
    assert cost.kv_capacity_tokens == int(full * 0.8) < tokens
    assert cost.seq_kv_tokens == 0
    half = StepCost(GEMMA_LIKE, H100, RolloutLayout(tp=2), SGLANG.model_copy(update={"swa_full_tokens_ratio": 0.5}))
    assert half.kv_capacity_tokens == int(int(tokens * 62 / (0.5 * 52 + 10)) * 0.5)


def test_sglang_caches_gemma3_and_gpt_oss_whole():
    """SGLang 0.5.2 / 0.5.6 turn the hybrid SWA memory off for Gemma 3 and gpt-oss: every layer caches
    every token, C = free // (62 x 4,096), where vLLM's pool holds 6x more with 6,240 window tokens a
    sequence."""
    assert not keeps_swa_pool(GEMMA_27B) and not keeps_swa_pool(load_model("gpt-oss-20b"))
    assert keeps_swa_pool(GEMMA_LIKE)
    sglang = StepCost(GEMMA_27B, H100, RolloutLayout(tp=2), SGLANG)
    vllm = StepCost(GEMMA_27B, H100, RolloutLayout(tp=2))
    assert sglang.kv_capacity_tokens == int(sglang.kv_free_bytes_dev // (62 * 4096))
    assert sglang.kv_bytes_per_token_dev == 62 * 4096 and sglang.seq_kv_tokens == 0
    assert vllm.kv_capacity_tokens > 6 * sglang.kv_capacity_tokens and vllm.seq_kv_tokens == 6240


@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama3.1-8b"])
def test_a_full_attention_model_is_unchanged_under_sglang(name):
    """One token pool of every layer, as vLLM's one group: the same capacity, draws and run."""
    model, layout = load_model(name), RolloutLayout(tp=1, max_num_seqs=64)
    a, b = StepCost(model, H100, layout), StepCost(model, H100, layout, SGLANG)
    for key in ("kv_capacity_tokens", "seq_kv_tokens", "max_running", "kv_bytes_per_token_dev",
                "seq_pool_bytes_dev", "state_bytes_per_seq_dev"):
        assert getattr(a, key) == getattr(b, key), key
    runs = []
    for params in (None, SGLANG):
        engine = RolloutEngine(model, H100, layout, params)
        engine.add_many(range(200), [500] * 200, list(range(100, 300)), 0.0)
        runs.append([(f.seq_id, f.time_s) for f in engine.run()])
    assert runs[0] == runs[1]


def test_a_mamba_state_slot_is_sglangs_by_hand():
    """Nemotron-H-8B a request: 24 layers x (128 heads x 64 x 128 SSM in float32 + 3 x (8,192 + 2 x 8 x
    128) conv in bf16) = 102.1 MB, twice vLLM's bf16 state nearly; 512 slots taken first."""
    slot = 24 * (128 * 64 * 128 * 4 + 3 * 10240 * 2)
    cost = StepCost(NEMOTRON_8B, H100, RolloutLayout(tp=1, max_num_seqs=2048), SGLANG)
    assert cost.state_bytes_per_seq_dev == slot == 102_137_856
    assert cost.max_running == 512
    assert cost.kv_capacity_tokens == int((cost.kv_free_bytes_dev - 512 * slot) // (4 * 2 * 8 * 128 * 2))
    bf16 = StepCost(NEMOTRON_8B, H100, RolloutLayout(tp=1, mamba_cache_dtype="bf16"), SGLANG)
    assert bf16.state_bytes_per_seq_dev == 24 * (128 * 64 * 128 + 3 * 10240) * 2


def _finish_groups(engine: RolloutEngine) -> list[int]:
    times = np.array([f.time_s for f in engine.run()])
    return np.unique(times, return_counts=True)[1].tolist()


def test_the_state_slots_bound_the_running_requests():
    """mamba_slots 64: equal requests finishing after one decode step run in waves of 64, though the
    token pool holds all 300 at once."""
    params = SGLANG.model_copy(update={"mamba_slots": 64})
    engine = RolloutEngine(NEMOTRON_8B, H100, RolloutLayout(tp=1, max_num_seqs=2048), params)
    assert engine.max_running == 64 and engine.capacity > 300 * 102
    engine.add_many(range(300), [100] * 300, [2] * 300, 0.0)
    groups = _finish_groups(engine)
    assert max(groups) == 64 and sum(groups) == 300


def test_a_radix_cache_on_the_states_sizes_them_by_memory():
    """Qwen3-Next on 4 H100s under SGLang 0.5.6 (MambaRadixCache): the states take 0.9 / 1.9 of the
    memory, slots = that // a slot, a third of them run; without it (0.5.2) 512 slots, 512 run."""
    model, layout = load_model("qwen3-next-80b-a3b"), RolloutLayout(tp=4, max_num_seqs=2048)
    radix = StepCost(model, H100, layout, SGLANG)   # linear_attention_radix_cache true by default
    slot = radix.state_bytes_per_seq_dev
    slots = int(radix.kv_free_bytes_dev * 0.9 / 1.9 // slot)
    assert radix.max_running == slots // 3
    assert radix.kv_capacity_tokens == int((radix.kv_free_bytes_dev - slots * slot) // radix.kv_bytes_per_token_dev)
    plain = StepCost(model, H100, layout, SGLANG.model_copy(update={"linear_attention_radix_cache": False}))
    assert plain.max_running == 512
    no_prefix = StepCost(model, H100, layout, SGLANG.model_copy(update={"enable_prefix_caching": False}))
    assert no_prefix.max_running == 512


def test_too_many_state_slots_do_not_fit():
    """Nemotron-H-56B on 4 H100s: 512 slots of 228 MB exceed the memory left after the weights, as
    SGLang's 'Not enough memory' at start; fewer slots fit."""
    model, layout = load_model("nemotron-h-56b"), RolloutLayout(tp=4)
    with pytest.raises(RlsimError, match="512 Mamba state slots.*mamba_slots"):
        StepCost(model, H100, layout, SGLANG)
    assert StepCost(model, H100, layout, SGLANG.model_copy(update={"mamba_slots": 128})).max_running == 128


def test_the_sglang_engines_pick_sglangs_pools():
    for name in ("sglang", "sglang-0.5.2", "sglang-0.5.6"):
        assert engine_software(name).inference["kv_pool"] == "sglang"
    assert engine_software("sglang-0.5.6").inference["linear_attention_radix_cache"] is True
    assert engine_software("sglang-0.5.2").inference["linear_attention_radix_cache"] is False
    assert "kv_pool" not in engine_software("vllm-v1").inference


def test_sglang_pool_constants_are_refused_where_they_act_on_nothing():
    def refused(params: InferenceParams, model) -> list[str]:
        return [field for field, _, _ in engine_constants_read_past(
            params, mla=False, moe=False, paged=True, engine_tp=1, engine_ep=1,
            pool_knobs=pool_knobs_applicable(model, params))]

    ratio = InferenceParams(kv_pool="sglang", swa_full_tokens_ratio=0.5)
    assert refused(ratio, GEMMA_LIKE) == []
    assert refused(ratio, GEMMA_27B) == ["workload.inference.swa_full_tokens_ratio"]
    assert refused(InferenceParams(swa_full_tokens_ratio=0.5), GEMMA_LIKE) == ["workload.inference.swa_full_tokens_ratio"]
    assert refused(InferenceParams(kv_pool="sglang", mamba_slots=64), NEMOTRON_8B) == []
    assert refused(InferenceParams(kv_pool="sglang", mamba_slots=64), GEMMA_LIKE) == ["workload.inference.mamba_slots"]
    assert refused(InferenceParams(kv_pool="sglang", kv_block_size=32), GEMMA_LIKE) == ["workload.inference.kv_block_size"]
    assert refused(InferenceParams(linear_attention_radix_cache=False), NEMOTRON_8B) == [
        "workload.inference.linear_attention_radix_cache"]


def test_padded_groups_grow_a_mamba_state_where_tp_does_not_divide_them():
    """8 groups over 16 ranks: 8 more (extra_groups_for_head_shards), conv channels (8,192 + 2 x 16 x
    128) / 16 = 768 a rank, not 640; the SSM state is not padded."""
    assert [extra_groups_for_head_shards(g, tp) for g, tp in ((8, 16), (8, 4), (1, 4), (8, 8))] == [8, 0, 3, 0]
    ssm, conv = NEMOTRON_8B.state_elems_per_device(16)
    assert (ssm, conv) == (24 * 8 * 64 * 128, 24 * 3 * 768)
    assert NEMOTRON_8B.state_elems_per_device(8) == (24 * 16 * 64 * 128, 24 * 3 * 10240 / 8)
    cost = StepCost(NEMOTRON_8B, H100, RolloutLayout(tp=16))
    assert cost.state_bytes_per_seq_dev == (ssm + conv) * 2
