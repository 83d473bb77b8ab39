"""The prepared GPU checks beside device_gemm_plateau.py (benchmarks/device_check.sh runs them on a lent
GPU): each runs on a CPU (--smoke), and the models they time are the ones rlsim predicts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--device", "cpu", "--smoke", "--json",
                          *args], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120, env=ENV)
    return json.loads(out.stdout)


def test_the_decode_model_is_rlsims_llama_and_streams_its_weights_and_cache():
    from simulator.llm.architecture import load_model

    bench = load("device_decode_graphs")
    dims = bench.LLAMA_8B
    assert dims.params == load_model("llama3.1-8b").params_total == 8_030_261_248
    # A step reads every weight but the embedding table and the final norm, plus 2 x layers x KV heads
    # x head_dim values per cached position.
    weights = dims.params - dims.vocab * dims.hidden - dims.hidden
    assert dims.bytes_read(3, 100, 2) == 2 * (weights + 2 * 32 * 3 * 8 * 100 * 128)


def test_the_decode_smoke_run_times_eager_steps_and_prices_them_with_rlsim():
    pytest.importorskip("torch")
    doc = _run("device_decode_graphs.py", "--batches", "1,2", "--repeats", "2", "--kv-len", "16")
    rows = doc["rows"]
    assert [r["batch"] for r in rows] == [1, 2]
    for row in rows:
        assert row["eager_s"] > 0 and row["kernels"] > 0 and row["graph_s"] is None   # no graphs on a CPU
        assert row["bytes_over_copy_bw_s"] == pytest.approx(row["bytes"] / doc["copy_bw_Bps"])
        assert row["rlsim"]["graph_gpu_s"] > row["rlsim"]["roofline_s"] > 0
    smoke = load("device_decode_graphs").SMOKE
    assert rows[1]["bytes"] == smoke.bytes_read(2, 16, 4)          # fp32 on a CPU


def test_the_train_step_counts_megatron_cores_model_flops():
    from simulator.validation.megatron_core import predict_row

    bench = load("device_train_step")
    per_sequence = predict_row(16, 2048, 24, 1, 1, 48, 192).model_flops / 192
    # rlsim's count is the formula's within 0.04% (it also counts the biases' and norms' FLOPs).
    assert bench.model_flops(24, 2048, 4096, 131_072) == pytest.approx(per_sequence, rel=4e-4)
    assert bench.model_flops(24, 2048, 4096, 131_072) == 72 * 4096 * 24 * 2048**2 * (1 + 4096 / 12288 + 131_072 / 589_824)


@pytest.mark.parametrize("kernel, kind", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>", "other"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "other"),
    ("triton_poi_fused__scaled_dot_product_cudnn_attention_add_native_layer_norm_0", "other"),
])
def test_kernels_are_sorted_by_kind(kernel, kind):
    assert load("device_train_step").kind_of(kernel) == kind


def test_the_train_smoke_run_splits_the_micro_batch(tmp_path):
    pytest.importorskip("torch")
    doc = _run("device_train_step.py", "--sustain-s", "0", "--repeats", "1")
    assert doc["row"] == "1.7b" and doc["dims"]["layers"] == 2
    assert doc["micro_batch_s"] > 0 and doc["tflops"] == pytest.approx(doc["model_flops"] / doc["micro_batch_s"] / 1e12)
    assert set(doc["kernel_s_by_kind"]) == {"gemm", "attention", "other"}
    assert sum(doc["top_kernels_s"].values()) <= sum(doc["kernel_s_by_kind"].values()) + 1e-12


def test_the_fused_moe_slices_are_the_v6_engines_shares_of_rlsims_models():
    bench = load("device_fused_moe")
    deepseek = bench.slice_of("deepseek-v3", 32)
    assert deepseek.w13_shape() == (256, 128, 7168) and deepseek.w2_shape() == (256, 7168, 64)
    assert deepseek.bytes_per_expert() == (128 * 7168 * 2, 7168 * 64 * 2)    # bf16 gate + up, down
    assert bench.slice_of("qwen3-235b-a22b", 8).ffn_slice == 192         # vLLM's tuned E=128 N=192 table
    assert bench.default_config(64, 256)["BLOCK_SIZE_N"] == 32           # M <= E: vLLM's decode default
    assert bench.default_config(512, 256)["BLOCK_SIZE_M"] == 64


def test_the_fused_moe_routing_is_aligned_as_vllm_aligns_it():
    """Every (token, k) pair once, in expert order, each expert's run padded to the block height with
    the sentinel; one expert id per block; experts without a token have no block."""
    torch = pytest.importorskip("torch")
    bench = load("device_fused_moe")
    topk_ids = torch.tensor([[3, 0], [3, 1], [0, 3], [5, 3], [3, 0]])
    sorted_ids, expert_ids, padded = bench.align_block_size(torch, topk_ids, 4, 8)
    valid = topk_ids.numel()
    assert int(padded[0]) == sorted_ids.numel() == 4 + 4 + 8 + 4     # experts 0, 1, 3, 5: 3, 1, 5, 1 pairs
    assert expert_ids.tolist() == [0, 1, 3, 3, 5]
    flat = topk_ids.flatten()
    for block, expert in enumerate(expert_ids.tolist()):
        ids = [i for i in sorted_ids[4 * block:4 * block + 4].tolist() if i != valid]
        assert all(int(flat[i]) == expert for i in ids) and ids == sorted(ids)
    real = sorted(i for i in sorted_ids.tolist() if i != valid)
    assert real == list(range(valid))


def test_the_fused_moe_reference_is_the_gated_expert_mlp():
    torch = pytest.importorskip("torch")
    bench = load("device_fused_moe")
    gen = torch.Generator().manual_seed(1)
    hidden, w13, w2 = torch.randn(1, 6, generator=gen), torch.randn(3, 8, 6, generator=gen), torch.randn(3, 6, 4, generator=gen)
    out = bench.reference_moe(torch, hidden, w13, w2, torch.tensor([[2, 0]]), torch.tensor([[0.75, 0.25]]))
    expect = sum(weight * (w2[e] @ (torch.nn.functional.silu(w13[e, :4] @ hidden[0]) * (w13[e, 4:] @ hidden[0])))
                 for e, weight in ((2, 0.75), (0, 0.25)))
    assert torch.allclose(out[0], expect, atol=1e-5)


def test_the_fused_moe_smoke_run():
    pytest.importorskip("torch")
    doc = _run("device_fused_moe.py")
    assert doc["device"] == "cpu" and doc["padded"] == len(doc["sorted_ids"]) and doc["reference_norm"] > 0


def test_the_host_copy_script_gives_its_rates_as_set_lines(capsys):
    """benchmarks/host_pageable_copy.py on a CPU: the host side of a pageable copy, then the `--set`
    items that give its two rates to rlsim (with --device cuda the GPU copies' rates, device_check.sh)."""
    load("host_pageable_copy").main(["--gib", "0.01", "--repeats", "1"])
    last = capsys.readouterr().out.splitlines()[-1]
    items = dict(item.strip().split("=") for item in last.split("--set ")[1:])
    assert last.startswith("--set ")
    assert list(items) == ["schedule.host_copies.offload_Bps", "schedule.host_copies.onload_Bps"]
    assert all(float(rate) > 1e8 for rate in items.values())


def test_the_moe_layer_smoke_run_routes_every_copy_and_prices_the_layer():
    pytest.importorskip("torch")
    doc = _run("device_moe_layer.py")
    run = doc["measured"][0]
    assert doc["device"] == "cpu" and run["experts"] == "sequential" and run["layer_s"] > 0
    assert doc["experts_local"] * (doc["seq"] * doc["dims"]["top_k"] // doc["experts_local"]) == doc["seq"] * 8
    assert 0 < doc["rlsim"]["expert_gemm_s"] < doc["rlsim"]["gemm_s"] < doc["rlsim"]["layer_s"]


def test_the_hf_layer_smoke_run_times_the_layers_and_prices_both_stacks():
    """benchmarks/device_hf_layer.py on a CPU: transformers' Qwen2 layer written op for op runs forward
    and backward; rlsim's side prices the preset's layer under hf-transformers with more element-wise
    time than under megatron-core, by the extra bytes alone (the GEMMs and attention are the same)."""
    pytest.importorskip("torch")
    doc = _run("device_hf_layer.py")
    assert doc["device"] == "cpu" and doc["measured"]["plain"]["micro_batch_s"] > 0
    hf, mcore = doc["rlsim"]["hf-transformers"], doc["rlsim"]["megatron-core"]
    assert hf["elementwise_s"] > mcore["elementwise_s"] > 0
    assert hf["layers_s"] - mcore["layers_s"] == pytest.approx(hf["elementwise_s"] - mcore["elementwise_s"], rel=1e-9)


def test_the_logits_smoke_run_times_each_path_beside_rlsims_count():
    """benchmarks/device_logits.py on a CPU: every eager path runs and is given as bytes a logit against
    a copy, beside the count rlsim prices it at (the kernels' table: eager forward 24, its backward
    less the addition to the log-probs' gradient, Megatron's cross entropy 52)."""
    pytest.importorskip("torch")
    from simulator.params import ENTROPY_KERNEL_BYTES

    doc = _run("device_logits.py")
    rows = {row["path"]: row for row in doc["paths"]}
    assert doc["copy_Bps"] > 0 and all(row["seconds"] > 0 and row["bytes_per_logit"] > 0 for row in rows.values())
    assert rows["entropy eager, forward (verl)"]["rlsim_bytes_per_logit"] == ENTROPY_KERNEL_BYTES["eager"][0]
    assert rows["entropy eager, forward + backward"]["rlsim_bytes_per_logit"] == 24 + 44 - 6
    assert rows["Megatron cross entropy, forward + backward"]["rlsim_bytes_per_logit"] == 52


def test_the_logits_paths_compute_what_the_frameworks_do():
    """The replicas give the frameworks' values: verl's, SkyRL's chunked, the vocab-parallel and AReaL's
    chunked entropy agree with -sum p log p (AReaL's log-probs with log p of the targets); the Megatron
    sequence's gradient is (softmax - one-hot) x its loss gradient."""
    torch = pytest.importorskip("torch")
    bench = load("device_logits")
    logits = torch.randn(1100, 50, generator=torch.Generator().manual_seed(0))
    p = logits.softmax(-1)
    want = -(p * p.log()).sum(-1)
    assert torch.allclose(bench.verl_entropy(torch, logits), want, atol=1e-5)
    assert torch.allclose(bench.skyrl_entropy(torch, logits), want, atol=1e-5)
    assert torch.allclose(bench.vocab_parallel_entropy(torch, logits, bench.mul_reduce).squeeze(-1), want, atol=1e-5)
    target = torch.randint(0, 50, (1100,), generator=torch.Generator().manual_seed(1))
    logprobs, entropy = bench.chunked(torch, bench.areal_logprobs)(torch, logits, target)
    assert torch.allclose(entropy, want, atol=1e-5)
    assert torch.allclose(logprobs, p.log()[torch.arange(1100), target], atol=1e-5)
    grad = bench.megatron_cross_entropy(torch, logits, target)
    assert torch.allclose(grad, 0.5 * (p - torch.nn.functional.one_hot(target, 50)), atol=1e-6)


def test_the_hf_layer_is_transformers_qwen2_layer():
    """The replica's parameters are the preset's layer's (q / k / v biases, no o_proj bias, gated
    MLP), and its RMSNorm is transformers' (fp32 statistics, the weight applied in the input dtype)."""
    torch = pytest.importorskip("torch")
    from simulator.llm.architecture import load_model
    from simulator.llm.layer_costs import layer_shapes
    bench = load("device_hf_layer")
    dims = {"hidden": 3584, "heads": 28, "kv": 4, "head_dim": 128, "ffn": 18944}
    stack = bench.build(torch, dims, 1, "meta", torch.bfloat16)
    matrices = sum(p.numel() for name, p in stack.named_parameters() if "layernorm" not in name)
    biases = (28 + 2 * 4) * 128
    assert matrices == layer_shapes(load_model("qwen2.5-7b"))[0].params + biases
    norm = bench.build(torch, {**dims, "hidden": 8}, 1, "cpu", torch.bfloat16)[0].input_layernorm
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    reference = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(norm(x), reference)


def test_the_moe_layer_runs_each_block_of_rows_through_its_own_expert():
    """The per-expert path on a CPU: block e of the sorted rows through expert e's gated MLP."""
    torch = pytest.importorskip("torch")
    bench = load("device_moe_layer")
    dims = {"hidden": 16, "heads": 2, "kv": 1, "head_dim": 8, "ffn": 8, "experts": 8, "top_k": 2}
    layer = bench.build(torch, dims, 4, False, "cpu", torch.float64)
    rows = torch.randn(16, 16, dtype=torch.float64)
    counts = torch.full((4,), 4, dtype=torch.int64)
    out = layer.experts(rows, counts)
    for expert in range(4):
        part = rows[4 * expert:4 * expert + 4]
        gate, up = (part @ layer.w13[expert].t()).chunk(2, dim=-1)
        expected = (torch.nn.functional.silu(gate) * up) @ layer.w2[expert].t()
        assert torch.allclose(out[4 * expert:4 * expert + 4], expected)


def test_hf_saved_activations_measure_the_hf_stacks_count():
    """benchmarks/hf_saved_activations.py (torch saved_tensors_hooks on transformers' Qwen2 layer, CPU):
    what autograd keeps is the hf-transformers stack's activation count plus what the count leaves out,
    the attention's log-sum-exp (4 B a head) and the two norms' per-token rsqrt (4 B each)."""
    pytest.importorskip("torch")
    from simulator.llm.architecture import load_model
    bench = load("hf_saved_activations")
    measured = bench.saved_bytes_per_token("qwen2.5-0.5b", 32)
    modelled = bench.rlsim_bytes_per_token("qwen2.5-0.5b")
    heads = load_model("qwen2.5-0.5b").num_heads
    assert measured["bytes_per_token"] == modelled["hf-transformers"] + 4 * heads + 2 * 4
    assert measured["bytes_per_token"] > 1.3 * modelled["megatron-core"]
