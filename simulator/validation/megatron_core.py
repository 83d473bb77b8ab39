"""V7: Megatron-Core r0.8.0 on H100 (NVIDIA/Megatron-LM README model table; published-results.md V7).

Setup assumptions (the table gives heads, hidden, layers, TP, PP, GPUs and batch; the rest is stated here):
- GPT models as config.json-like mappings: FFN 4 x hidden (GELU; a SwiGLU FFN of 8/3 x 4h has the
  same FLOPs), untied input / output embeddings (the untied embeddings reproduce the table's
  parameter counts: 1.7B row = 1.21B layers + 2 x 0.27B), vocab 131,072, sequence 4096.
- Topology `dgx-h100` with nodes = GPUs / 8; DP = GPUs / (TP x PP) = 48 on every row.
- The recipe as the README states it: "fine-grained overlapping of data-parallel
  (--overlap-grad-reduce --overlap-param-gather), tensor-parallel (--tp-comm-overlap) and
  pipeline-parallel communication" -> the `megatron-core-overlap` stack (params.TRAIN_SOFTWARE: those
  flags on the megatron-core defaults). What the README does not state is Megatron-LM's argument
  default: no activation recomputation (--recompute-granularity unset), micro-batch 1.
- The interleaved pipeline schedule on every PP > 1 row, with V1's chunk rule (the fewest chunks
  v >= 2 dividing a stage's layers, `training_rows.interleave_chunks`). The README gives no v, but two
  statements need interleaving: (1) it overlaps "pipeline-parallel communication" with compute,
  and Megatron-Core overlaps p2p only in the interleaved schedule (--overlap-p2p-communication;
  the non-interleaved schedule raises "Non-interleaved pipeline parallelism does not support
  overlapping p2p communication", megatron/core/pipeline_parallel/schedules.py); (2) its strong
  scaling keeps 42 / 47 = 0.89 of the MFU at 4,608 GPUs, where the 177B model runs 12
  micro-batches per replica over 6 stages: plain 1F1B idles (p - 1) / (m + p - 1) = 5 / 17 of the
  flush, so it cannot keep more than 0.71 even with free communication. (Before: vpp 1, read as
  Megatron-LM's argument default.)
- TFLOP/s are model FLOPs (Megatron-Core's num_floating_point_operations: 3 x forward, no
  recompute counted; the table's MFU column = TFLOP/s / 989).
- One H100 efficiency for all rows: the device catalog's (no per-row constant).
"""
from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Any

from . import Case, Prediction, files_named, register
from .training_rows import (
    TRAIN_OVERRIDES,
    check_training_overrides,
    interleave_chunks,
    recipe_note,
    recipe_overrides,
    row_layout,
    row_topology,
    step_breakdown,
    training_overrides,
)

SOURCE = "NVIDIA/Megatron-LM README (Megatron-Core r0.8.0, H100 BF16 model table; published-results.md V7)"
SEQ_LEN = 4096
VOCAB = 131_072
DP = 48
MICRO_BATCH = 1
RECOMPUTE = "none"         # Megatron-LM default: --recompute-granularity unset
STACK = "megatron-core-overlap"   # the README's overlap flags
TARGET_MEDIAN = 0.08
# (label, heads, hidden, layers, TP, PP, GPUs, batch, published TFLOP/s per GPU)
ROWS: tuple[tuple[str, int, int, int, int, int, int, int, float], ...] = (
    ("1.7b", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    ("7.1b", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    ("16b", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    ("32b", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    ("70b", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    ("119b", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    ("177b", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("314b", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    ("462b", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
)


def gpt_config(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    """A config.json-like mapping of one V7 GPT model."""
    return {"model_type": "gpt", "hidden_act": "gelu", "tie_word_embeddings": False,
            "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": 4 * hidden,
            "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": hidden // heads,
            "vocab_size": VOCAB, "max_position_embeddings": SEQ_LEN,
            "position_embedding_type": "absolute", "norm_type": "layernorm",
            "attention_bias": True, "mlp_bias": True}


def predict_row(heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, batch: int,
                device: tuple[tuple[str, Any], ...] = (), overrides: tuple[str, ...] = ()):
    """The TrainStepCost of one V7 row under the assumptions above. ``device``: (field, value) pairs
    over the catalog H100 (a what-if, e.g. a measured plateau: benchmarks/device_what_if.py);
    ``overrides``: `rlsim validate --set` items under training_rows.TRAIN_OVERRIDES (on top)."""
    return _predict_row(heads, hidden, layers, tp, pp, gpus, batch, device, overrides, files_named(overrides))


@lru_cache(maxsize=16)
def _predict_row(heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, batch: int,
                 device: tuple[tuple[str, Any], ...], overrides: tuple[str, ...], _files: tuple[str, ...]):
    from ..llm.architecture import load_model
    from ..llm.train_presets import PRESETS
    from ..llm.training import train_step_cost, uniform_sequences

    stack = PRESETS[STACK]
    given, params = training_overrides(overrides, stack, "h100")
    model = load_model(gpt_config(layers, hidden, heads))
    topology = row_topology("dgx-h100", gpus // 8, {"base": "h100", **dict(device), **given} if device or given else {},
                            overrides)
    layout = row_layout(stack, recipe_overrides(overrides), tp=tp, pp=pp, dp=gpus // (tp * pp), layers=layers,
                        batch=batch, micro_batch=MICRO_BATCH, recompute=RECOMPUTE)
    return train_step_cost(model, layout, topology, None, uniform_sequences(batch, SEQ_LEN), params=params)


def tflops(row: tuple, overrides: tuple[str, ...] = ()) -> Prediction:
    _label, heads, hidden, layers, tp, pp, gpus, batch, _pub = row
    return step_breakdown(predict_row(heads, hidden, layers, tp, pp, gpus, batch, overrides=overrides), counted="model")


def median_error(overrides: tuple[str, ...] = ()) -> Prediction:
    errors = [tflops(r, overrides) / r[-1] - 1 for r in ROWS]
    return Prediction(statistics.median(abs(e) for e in errors),
                      "signed errors: " + ", ".join(f"{r[0]} {e:+.1%}" for r, e in zip(ROWS, errors, strict=True)))


def strong_scaling(device: tuple[tuple[str, Any], ...] = (), overrides: tuple[str, ...] = ()) -> Prediction:
    """MFU of the 177B row (TP8 PP6, batch 1152) at 4,608 GPUs (DP 96) over its MFU at 96 GPUs
    (DP 2); published 42% / 47%. ``device``, ``overrides``: as predict_row's."""
    small = predict_row(96, 12288, 96, 8, 6, 96, 1152, device, overrides).tflops_per_device
    large = predict_row(96, 12288, 96, 8, 6, 4608, 1152, device, overrides).tflops_per_device
    return Prediction(large / small, f"TFLOP/s per GPU {small:.0f} at 96 GPUs, {large:.0f} at 4,608")


@register(overrides=True)
def cases(overrides: tuple[str, ...] = ()):
    from ..llm.train_presets import PRESETS

    check_training_overrides(overrides, PRESETS[STACK], "h100")
    for row in ROWS:
        label, heads, hidden, layers, tp, pp, gpus, batch, published = row
        yield Case(f"V7 megatron-core {label} tp{tp} pp{pp} {gpus}gpu", "TFLOP/s per GPU", published,
                   lambda r=row: tflops(r, overrides), tolerance=TARGET_MEDIAN, source=SOURCE,
                   overridable=TRAIN_OVERRIDES,
                   note=f"dgx-h100, seq {SEQ_LEN}, vocab {VOCAB}, {STACK} (the README's overlap flags), "
                        f"recompute {RECOMPUTE}, micro-batch {MICRO_BATCH}, vpp {interleave_chunks(layers, pp)}, "
                        f"batch {batch}" + recipe_note(recipe_overrides(overrides)))
    yield Case("V7 megatron-core median |error|", "|error|", TARGET_MEDIAN, lambda: median_error(overrides),
               expect="below", source=SOURCE, note="acceptance target (issue 12)", overridable=TRAIN_OVERRIDES)
    yield Case("V7 megatron-core strong scaling 177b 96->4608 gpu", "MFU ratio", 42 / 47,
               lambda: strong_scaling(overrides=overrides), tolerance=0.1, source=SOURCE,
               note="batch 1152 fixed, TP8 PP6, DP 2 -> 96; published MFU 47% -> 42%", overridable=TRAIN_OVERRIDES)
