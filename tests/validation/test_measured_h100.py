"""rlsim against what one lent H100 measured (benchmarks/measured/h100-2026-12-06, README there): the
catalog's H100 takes its own GEMM plateau and decode streaming rate, and rlsim's one-GPU costs
reproduce the timed work that did not set them (the V6 and V7 runs are on H100s)."""
from functools import partial

import pytest

from simulator.hardware.devices import (
    H100_HBM_EFFICIENCY,
    H100_SXM_GEMM_EFFICIENCY,
    HOPPER_FLASH_EFFICIENCY_SCALE,
    get_device,
)
from simulator.params import COMPILED_LOG_SOFTMAX_BYTES, ENTROPY_KERNEL_BYTES
from simulator.validation import measured
from tests.bench_scripts import load
from tests.validation import lease_files

LEASE = lease_files.lease("h100")
_load = partial(lease_files.load, LEASE)


def test_the_h100_and_h800_take_the_h100s_sustained_plateau():
    doc = _load("gemm_plateau_30s.json")
    assert doc["device"] == "NVIDIA H100 80GB HBM3" and doc["sustain_s"] == 30
    assert H100_SXM_GEMM_EFFICIENCY == round(doc["flop_weighted_plateau"], 3)
    assert get_device("h100").gemm_efficiency == get_device("h800").gemm_efficiency == H100_SXM_GEMM_EFFICIENCY
    clock_mhz, power_w = doc["under_load_sm_clock_mhz_power_w"]
    assert power_w > 0.98 * get_device("h100").power_w and clock_mhz < 1980   # power-limited, as the H200 ran


def test_the_h100_streams_a_decode_step_at_the_batch_1_steps_rate():
    """The batch-1 graph step's bytes over its time less the graph's replay, as rlsim's step adds it
    (the H200's rule); every step's kernels streamed below a plain copy of the same GPU (0.74-0.82 of it)."""
    doc = _load("decode_graphs.json")
    batch, share = lease_files.batch_1_hbm_share(LEASE)
    assert batch == 1 and H100_HBM_EFFICIENCY == round(share, 2)
    assert get_device("h800").hbm_efficiency == H100_HBM_EFFICIENCY
    assert all(r["bytes"] / r["kernel_s"] < 0.85 * doc["copy_bw_Bps"] for r in doc["rows"])


def test_the_eager_kernel_gap_is_what_the_gpu_bound_eager_steps_paid():
    """InferenceParams.eager_kernel_gap_s: (eager step - the kernels' GPU time) / kernels at batch 64
    and 256, where the host's launches run ahead of the kernels (1.53 / 1.76 us), against the
    graph's gaps (0.11 - 0.17 us); every batch paid at least 1.2 us a kernel eager."""
    from simulator.llm.inference import InferenceParams
    rows = {r["batch"]: r for r in _load("decode_graphs.json")["rows"]}
    gap = {b: (r["eager_s"] - r["kernel_s"]) / r["kernels"] for b, r in rows.items()}
    bound = [gap[64], gap[256]]
    host_launch_at_most = rows[1]["eager_s"] / rows[1]["kernels"]   # batch 1's whole step a kernel: ~14 us
    assert all(rows[b]["kernel_s"] / rows[b]["kernels"] > host_launch_at_most for b in (64, 256))
    assert min(bound) <= InferenceParams().eager_kernel_gap_s <= max(bound)
    assert min(gap.values()) > 1.2e-6 and all((r["graph_s"] - r["kernel_s"]) / r["kernels"] < 0.35e-6
                                              for r in rows.values())


def test_the_cases_carry_the_measured_figures():
    docs = lease_files.assert_cases_carry_the_files(LEASE)
    assert {doc["device"] for doc in docs} == {"NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("row", [r for r, _ in LEASE.train_steps])
def test_a_fused_micro_batch_on_one_h100_is_predicted_within_8_percent(row):
    """M1 on the H100: nothing of these micro-batches set the catalog's H100 (its plateau is the GEMM
    sweep's, its flash scale the H200's); the 1.7B reads highest again (+6.4%)."""
    seconds = dict(LEASE.train_steps)[row]
    assert measured._micro_batch_s(row, (), "h100") == pytest.approx(seconds, rel=0.08)


def test_a_graph_replayed_decode_step_on_one_h100_is_predicted_within_8_percent():
    for batch, seconds in LEASE.decode_steps:
        assert measured._decode_step_s(batch, (), "h100") == pytest.approx(seconds, rel=0.08), batch


def test_the_h100s_attention_falls_inside_the_flash_scale_measured_on_the_h200():
    flash_scales = load("device_train_step").flash_scales
    doc = _load("train_step_1.7b_compiled.json")
    forward, backward = flash_scales(doc["top_kernels_s"], doc["kernel_s_by_kind"]["gemm"], 24, 2048, 4096, 131_072)
    assert (forward + backward) / 2 == pytest.approx(HOPPER_FLASH_EFFICIENCY_SCALE, abs=0.05)


def test_transformers_layers_are_priced_within_5_percent_under_each_stack():
    """Qwen2.5-7B layers written op for op as transformers writes them (device_hf_layer.py): plain torch
    against rlsim's hf-transformers stack, compiled against megatron-core's fused constants (the file's
    own rlsim figures were taken with the catalog before this lease: HBM 0.80, GEMMs 0.685)."""
    doc = _load("hf_layer.json")
    rlsim = load("device_hf_layer").rlsim_layers("h100", doc["layers"])
    assert rlsim["hf-transformers"]["layers_s"] == pytest.approx(doc["measured"]["plain"]["micro_batch_s"], rel=0.05)
    assert rlsim["megatron-core"]["layers_s"] == pytest.approx(doc["measured"]["compiled"]["micro_batch_s"], rel=0.05)
    assert rlsim["hf-transformers"]["layers_s"] > 1.1 * rlsim["megatron-core"]["layers_s"]


def _logit_paths() -> dict[str, float]:
    """Each path's time as bytes a logit at the catalog H100's streaming rate."""
    doc = _load("logits.json")
    spec = get_device("h100")
    logits = doc["tokens"] * doc["vocab"]
    return {p["path"]: p["seconds"] * spec.hbm_bw_Bps * spec.hbm_efficiency / logits for p in doc["paths"]}


def test_the_compiled_logit_paths_take_the_bytes_their_time_came_to():
    """torch.compile's entropy and AReaL's compiled log-softmax: the one-pass counts were 2.7-7.7x
    short (Inductor splits the reduction over a 152k vocabulary); the constants are the times."""
    paths = _logit_paths()
    forward = paths["entropy compiled, forward (verl use_torch_compile)"]
    both = paths["entropy compiled, forward + backward"]
    addition = load("device_logits").ADDITION
    assert ENTROPY_KERNEL_BYTES["compiled"] == (round(forward, 1), round(both - forward + addition, 1))
    assert sum(COMPILED_LOG_SOFTMAX_BYTES) == round(
        paths["compiled log-softmax and entropy, forward + backward (AReaL)"], 1)


def test_the_eager_logit_counts_hold_within_a_quarter():
    """The op-by-op counts read from the frameworks' code, against their times: 0.78-1.15x."""
    paths = _logit_paths()
    counted = {row["path"]: row["rlsim_bytes_per_logit"] for row in _load("logits.json")["paths"]}
    eager = [name for name in counted if "compiled" not in name]
    assert len(eager) == 7
    for name in eager:
        assert paths[name] == pytest.approx(counted[name], rel=0.25), name


def test_the_fused_moe_kernels_on_an_h100_match_the_h200s_pattern():
    """vLLM's fused-MoE kernel, default tiles: the experts' bytes at the catalog H100's decode rate
    within 25% of the two kernels for every V6 engine up to TP 32; DAPO's TP 64 slice (32 deep a
    GPU) runs its down projection at a third of the copy rate, as on the H200."""
    spec = get_device("h100")
    rate = spec.hbm_bw_Bps * spec.hbm_efficiency
    for row in _load("fused_moe_default.json")["rows"]:
        measured_s = row["w13"]["default_s"] + row["w2"]["default_s"]
        rlsim_s = (row["bytes"]["w13"] + row["bytes"]["w2"]) / rate
        if row["slice"]["tp"] <= 32:
            assert measured_s == pytest.approx(rlsim_s, rel=0.25), row["engine"]
        else:
            assert measured_s > 1.3 * rlsim_s and row["w2"]["default_of_copy"] < 0.35
