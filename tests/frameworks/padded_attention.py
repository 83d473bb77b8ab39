"""What an imported config's compute keys make of one padded micro-batch's attention (tests' helper)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import replica_micro_batches
from simulator.params import ComputeParams, TrainParams

# The compute keys that say how padded rows run (the rest, loss bytes and the like, price other work).
ROW_KEYS = ("pad_rows_to", "attention_skips_padding", "flash_attention")


def row_keys(compute: Mapping[str, Any]) -> dict[str, Any]:
    return {key: compute[key] for key in ROW_KEYS if key in compute}


def attention_squares(compute: Mapping[str, Any], lengths: Sequence[int]) -> float:
    """The sum of squared lengths the attention of one padded micro-batch of ``lengths`` runs under the
    imported compute keys: each row's real length squared where the attention skips the padding, the
    padded width squared a row otherwise."""
    params = TrainParams(compute=ComputeParams(**row_keys(compute)))
    parts = replica_micro_batches(np.asarray(lengths), TrainLayout(dp=1, micro_batch=len(lengths)), "padded", params)
    return float(sum(q.sum() for _, q in parts))


def padded_tokens(compute: Mapping[str, Any], lengths: Sequence[int], micro_batch: int) -> list[float]:
    """The tokens (rows x padded width) of each micro-batch of ``micro_batch`` rows that ``lengths``, one
    pass's batch in order, make under the imported compute keys."""
    params = TrainParams(compute=ComputeParams(**row_keys(compute)))
    parts = replica_micro_batches(np.asarray(lengths), TrainLayout(dp=1, micro_batch=micro_batch), "padded", params)
    return [float(t) for tokens, _ in parts for t in tokens]
