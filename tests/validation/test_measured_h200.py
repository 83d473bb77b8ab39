"""rlsim against what one lent H200 measured (benchmarks/measured/h200-2026-12-04, README there): the
catalog's Hopper figures are those measurements, and rlsim's one-GPU costs reproduce the timed work
that did not set them."""
import json
from pathlib import Path

import pytest

from simulator.hardware.devices import HOPPER_SXM_GEMM_EFFICIENCY, get_device
from simulator.validation.megatron_core import ROWS, predict_row

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "measured" / "h200-2026-12-04"


def _load(name: str) -> dict:
    return json.loads((MEASURED / name).read_text())


def test_the_hopper_catalog_takes_the_sustained_plateau_measured():
    plateau = _load("gemm_plateau_120s.json")["flop_weighted_plateau"]
    assert HOPPER_SXM_GEMM_EFFICIENCY == round(plateau, 3)
    assert {get_device(name).gemm_efficiency for name in ("h100", "h800", "h200")} == {HOPPER_SXM_GEMM_EFFICIENCY}
    assert get_device("a100-80gb").gemm_efficiency == 0.75             # another processor keeps its own


@pytest.mark.parametrize("row", ["1.7b", "7.1b", "16b"])
def test_a_fused_micro_batch_on_one_gpu_is_predicted_within_5_percent(row):
    """The V7 models whole on one GPU (torch.compile'd layers: fused norms, GELU, biases, residuals),
    forward and backward of one 4096-token micro-batch; rlsim's compute on the catalog H200 for the
    same (one micro-batch a GPU; bf16 gradients, as the script keeps, so the 16B model fits)."""
    measured = _load(f"train_step_{row}_compiled.json")
    _, heads, hidden, layers, *_ = next(r for r in ROWS if r[0] == row)
    assert measured["dims"] == {"layers": layers, "hidden": hidden, "heads": heads, "seq": 4096, "vocab": 131_072}
    cost = predict_row(heads, hidden, layers, 1, 1, 8, 8, device=(("base", "h200"),),
                       overrides=("workload.train_params.memory.grad_bytes_per_param=2",))
    assert cost.compute_s == pytest.approx(measured["micro_batch_s"], rel=0.05)


def test_a_graph_replayed_decode_step_is_predicted_within_8_percent():
    """Llama-3.1-8B decode steps at batch 1-256 on the catalog H200 (its HBM efficiency is the batch-1
    step's: the larger batches add KV reads and compute that did not set it)."""
    import sys

    sys.path.insert(0, str(MEASURED.parents[1]))
    try:
        import device_decode_graphs as bench
    finally:
        sys.path.remove(str(MEASURED.parents[1]))
    rows = _load("decode_graphs.json")["rows"]
    assert [r["batch"] for r in rows] == [1, 4, 16, 64, 256]
    for row in rows:
        predicted = bench._rlsim("h200", row["batch"], row["kv_len"])["graph_gpu_s"]
        assert predicted == pytest.approx(row["graph_s"], rel=0.08), row["batch"]
