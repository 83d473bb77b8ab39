"""Sliding-window attention (ModelSpec.sliding_window / sliding_layers; gpt-oss-20b's 128-token windows
on half its layers) against the same model with every layer full, in closed form: the engine's KV,
decode and prefill, the trainer's attention, and a whole run."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.inference import RolloutLayout, StepCost
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import DeviceRates, layer_times
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import train_step_cost
from simulator.params import ComputeParams

from .test_architecture import GPT_OSS_20B

WINDOWED = load_model(GPT_OSS_20B)
FULL = WINDOWED.replace(sliding_window=0, sliding_layers=())
W = 128
H100 = get_device("h100")
LAYOUT = RolloutLayout(tp=1, max_num_seqs=256, gpu_memory_utilization=0.9)


def _costs() -> tuple[StepCost, StepCost]:
    return StepCost(WINDOWED, H100, LAYOUT), StepCost(FULL, H100, LAYOUT)


def test_the_engine_caches_a_token_on_the_full_layers_and_a_window_on_the_sliding_ones():
    windowed, full = _costs()
    assert windowed.kv_bytes_per_token_dev == pytest.approx(full.kv_bytes_per_token_dev / 2)
    assert windowed.window_bytes_per_seq_dev == pytest.approx(full.kv_bytes_per_token_dev / 2 * W)
    # one pool (vLLM V1's hybrid KV cache manager): it holds full-layer tokens, and a running sequence
    # draws its window's pages beside them: 12 sliding layers and 12 full ones are one group each, a
    # window of 128 tokens keeps cdiv(127, 16) + 1 = 9 pages of 16 tokens
    assert windowed.kv_free_bytes_dev == full.kv_free_bytes_dev
    assert windowed.kv_capacity_tokens == int(full.kv_free_bytes_dev // windowed.kv_bytes_per_token_dev)
    assert windowed.seq_kv_tokens == 9 * 16
    assert windowed.seq_pool_bytes_dev == pytest.approx(windowed.window_bytes_per_seq_dev * 144 / W)
    assert full.seq_kv_tokens == 0


@pytest.mark.parametrize("n", [1, 32, 256])
def test_a_decode_step_reads_and_attends_a_window_on_the_sliding_layers(n):
    """At a context of exactly the window every sequence reads and attends the same on both; past it
    the windowed step saves the sliding layers' share of the attention and KV reads beyond the window."""
    windowed, full = _costs()
    at_window = n * W
    (wc0, wc1, wm0, wm1, we), (fc0, fc1, fm0, fm1, fe) = windowed.decode_lines(n, at_window), full.decode_lines(n, at_window)
    assert (wc0, wm0, we) == pytest.approx((fc0, fm0, fe), rel=1e-12)
    assert (wc1, wm1) == pytest.approx((fc1 / 2, fm1 / 2), rel=1e-12)   # the context grows on the full layers alone
    context = n * 3000.0
    (wc0, _, wm0, _, _), (fc0, _, fm0, _, _) = windowed.decode_lines(n, context), full.decode_lines(n, context)
    assert fc0 - wc0 == pytest.approx(full.decode_attn_s_per_ctx / 2 * (context - at_window), rel=1e-9)
    assert fm0 - wm0 == pytest.approx(full.kv_s_per_token / 2 * (context - at_window), rel=1e-9)
    assert windowed.decode_step_s(n, context) < full.decode_step_s(n, context)


def test_a_prefill_attends_at_most_a_window_of_keys_a_token_on_the_sliding_layers():
    windowed, full = _costs()
    prompt = 4096.0
    pairs = prompt * (prompt + 1) / 2
    expected = pairs - 0.5 * (pairs - prompt * W)
    assert windowed.windowed_pairs(prompt, pairs) == pytest.approx(expected)
    assert full.windowed_pairs(prompt, pairs) == pairs
    short = 100.0   # within the window: the same pairs
    assert windowed.windowed_pairs(short, short * (short + 1) / 2) == short * (short + 1) / 2
    assert windowed.prefill_s(prompt, pairs) < full.prefill_s(prompt, pairs)


@given(length=st.integers(1, 32768))
def test_a_sliding_layers_training_attention_is_a_full_layers_over_its_window(length):
    """One sequence of s tokens: a sliding layer's attention costs what a full layer's costs over
    min(s^2, 2 w s) squared tokens (the micro-batch bound of w (2 s - w)); never more than a full layer's."""
    rates = DeviceRates(peak_flops=989e12, gemm_efficiency=0.7, hbm_Bps=2.3e12)
    shapes = layer_shapes(WINDOWED)
    sliding, full_layer = shapes[0], shapes[1]
    assert sliding.window == W and full_layer.window == 0
    tokens, sq = np.array([float(length)]), np.array([float(length) ** 2])
    kwargs = {"tp": 1, "sp": False, "ep": 1, "rates": rates, "params": ComputeParams()}
    windowed = layer_times(sliding, 2880, 2880, True, tokens, sq, **kwargs)
    bounded = layer_times(full_layer, 2880, 2880, True, tokens, np.minimum(sq, 2.0 * W * tokens), **kwargs)
    whole = layer_times(full_layer, 2880, 2880, True, tokens, sq, **kwargs)
    assert windowed.attn_fwd_s[0] == bounded.attn_fwd_s[0] <= whole.attn_fwd_s[0]
    assert windowed.fwd_s[0] == pytest.approx(bounded.fwd_s[0], rel=1e-12)


def test_a_training_step_is_the_full_models_when_no_sequence_passes_the_window():
    topology = load_topology({"preset": "dgx-h100", "nodes": 1})
    layout = TrainLayout.from_mapping({"tp": 1, "ep": 8, "zero": 1, "recompute": "full", "micro_batch": 1})
    short, long = np.full(64, 100), np.full(64, 4000)
    same = [train_step_cost(m, layout, topology, list(range(8)), short, packing="packed") for m in (WINDOWED, FULL)]
    assert same[0].step_time_s == pytest.approx(same[1].step_time_s, rel=1e-12)
    assert same[0].model_flops == pytest.approx(same[1].model_flops, rel=1e-12)
    apart = [train_step_cost(m, layout, topology, list(range(8)), long, packing="packed") for m in (WINDOWED, FULL)]
    assert apart[0].step_time_s < apart[1].step_time_s and apart[0].model_flops < apart[1].model_flops


def test_a_whole_run_of_a_windowed_model_is_faster_than_of_its_full_attention_twin(tmp_path):
    import json

    from simulator.api import simulate

    def run(cfg):
        model = tmp_path / f"m{len(list(tmp_path.iterdir()))}" / "config.json"
        model.parent.mkdir()
        model.write_text(json.dumps(cfg))
        return simulate({"topology": {"preset": "dgx-h100", "nodes": 1}, "schedule": "colocated", "iterations": 2,
                         "workload": {"algorithm": "grpo", "prompts_per_step": 16, "samples_per_prompt": 4,
                                      "reference": False, "model": str(model),
                                      "response_length": {"dist": "lognormal", "median": 3000, "sigma": 0.5, "max": 8000},
                                      "rollout_layout": {"tp": 1}, "train_layout": {"tp": 1, "ep": 8, "zero": 1,
                                                                                    "recompute": "full",
                                                                                    "micro_batch": 1}}},
                        keep_samples=False).summary
    full_cfg = {k: v for k, v in GPT_OSS_20B.items() if k != "layer_types"} | {"sliding_window": None}
    windowed, full = run(GPT_OSS_20B), run(full_cfg)
    assert windowed["stage_time_s"]["generate"] < full["stage_time_s"]["generate"]
    assert windowed["stage_time_s"]["train_actor"] < full["stage_time_s"]["train_actor"]
