"""V1: Megatron-LM, Narayanan et al. 2021 (arXiv 2104.04473), Table 1 — TFLOP/s per A100.

Setup assumptions (the paper gives TP, PP, GPUs and batch; the rest is stated here):
- Topology `dgx-a100` with nodes = GPUs / 8 (Selene: 8 A100 80GB on NVSwitch, 8 x 200 Gb/s HDR).
- Sequence 2048, full activation recomputation, micro-batch 1 on every row.
- Interleaved 1F1B on every row with PP > 1, with the fewest model chunks v >= 2 that divide the
  layers of a stage (the paper used interleaving for the larger rows; Table 1 gives no per-row v).
- The 2021 software, `llm.train_presets.MEGATRON_2021` (shared with the planner's acceptance
  test): no flash attention (materialized softmax), no sequence parallelism, no distributed
  optimizer (zero 0), no overlap of TP / DP communication, blocking pipeline sends.
- One A100 efficiency for all rows: the device catalog's `gemm_efficiency` (no per-row constant).
Reported TFLOP/s count the recomputed forward, as the paper does (eq. 3).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..llm.train_presets import MEGATRON_2021
from . import Case, files_named, register
from .training_rows import (
    TRAIN_OVERRIDES,
    check_training_overrides,
    recipe_note,
    recipe_overrides,
    row_layout,
    row_topology,
    step_breakdown,
    training_overrides,
)

SOURCE = "arXiv 2104.04473 Table 1 (published-results.md V1)"
SEQ_LEN = 2048
MICRO_BATCH = 1
# (model preset, TP, PP, GPUs, global batch in sequences, published TFLOP/s per GPU)
ROWS: tuple[tuple[str, int, int, int, int, float], ...] = (
    ("gpt-1.7b", 1, 1, 32, 512, 137.0),
    ("gpt-3.6b", 2, 1, 64, 512, 138.0),
    ("gpt-7.5b", 4, 1, 128, 512, 142.0),
    ("gpt-18.4b", 8, 1, 256, 1024, 135.0),
    ("gpt-39.1b", 8, 2, 512, 1536, 138.0),
    ("gpt-76.1b", 8, 4, 1024, 1792, 140.0),
    ("gpt-145.6b", 8, 8, 1536, 2304, 148.0),
    ("gpt-310.1b", 8, 16, 1920, 2160, 155.0),
    ("gpt-529.6b", 8, 35, 2520, 2520, 163.0),
    ("gpt-1008b", 8, 64, 3072, 3072, 163.0),
)


def predict_row(model_name: str, tp: int, pp: int, gpus: int, batch: int, overrides: tuple[str, ...] = ()):
    """The TrainStepCost of one Table 1 row under the assumptions above (and `rlsim validate --set`
    items under TRAIN_OVERRIDES)."""
    return _predict_row(model_name, tp, pp, gpus, batch, overrides, files_named(overrides))


@lru_cache(maxsize=16)
def _predict_row(model_name: str, tp: int, pp: int, gpus: int, batch: int, overrides: tuple[str, ...],
                 _files: tuple[str, ...]):
    from ..llm.architecture import load_model
    from ..llm.training import train_step_cost, uniform_sequences

    device, params = training_overrides(overrides, MEGATRON_2021, "a100-80gb")
    model = load_model(model_name)
    topology = row_topology("dgx-a100", gpus // 8, device, overrides)
    layout = published_layout(model_name, tp, pp, gpus, batch, recipe_overrides(overrides))
    return train_step_cost(model, layout, topology, None, uniform_sequences(batch, SEQ_LEN), params=params)


def published_layout(model_name: str, tp: int, pp: int, gpus: int, batch: int, recipe: dict[str, Any]):
    """The Table 1 row's layout under the assumptions above (MEGATRON_2021 settings), with `recipe`
    (recipe_overrides) over them."""
    from ..llm.architecture import load_model

    return row_layout(MEGATRON_2021, recipe, tp=tp, pp=pp, dp=gpus // (tp * pp),
                      layers=load_model(model_name).num_layers, batch=batch, micro_batch=MICRO_BATCH)


@register(overrides=True)
def cases(overrides: tuple[str, ...] = ()):
    check_training_overrides(overrides, MEGATRON_2021, "a100-80gb")
    for name, tp, pp, gpus, batch, published in ROWS:
        yield Case(
            case=f"V1 megatron {name} tp{tp} pp{pp} {gpus}gpu", metric="TFLOP/s per GPU", published=published,
            predict=lambda n=name, t=tp, p=pp, g=gpus, b=batch: step_breakdown(predict_row(n, t, p, g, b, overrides)),
            tolerance=0.15, source=SOURCE, overridable=TRAIN_OVERRIDES,
            note="dgx-a100, seq 2048, MEGATRON_2021 (full recompute, no flash/SP/ZeRO, blocking p2p), "
                 "micro-batch 1, interleaved when pp > 1" + recipe_note(recipe_overrides(overrides)))
