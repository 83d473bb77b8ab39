"""DistQueue: the data plane between rollout producers and training consumers.

Payload per sample is ``bytes_per_token`` x tokens (token ids, log-probs, masks, advantages).
Padded payloads pad every sample to the batch's longest; packed payloads carry real tokens only.
Hierarchical fetch: one reader per TP x PP group reads its DP share, then broadcasts inside the
group; without it every rank of the group reads the same share (load x TP x PP). The queue's
bandwidth is one FIFO simpy resource, so concurrent writes and reads delay each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from ..scenario import DistQueueParams


def payload_bytes(seq_lens: np.ndarray, params: DistQueueParams, packed: bool | None = None,
                  pad_len: float | None = None) -> float:
    """Bytes of one copy of these samples. Padded: every sample is ``pad_len`` tokens (the
    configured max) or, with pad_len None / pad_to batch_max, the batch's longest."""
    lens = np.asarray(seq_lens, float)
    if not len(lens):
        return 0.0
    packed = params.packed if packed is None else packed
    if packed:
        tokens = lens.sum()
    else:
        width = pad_len if (pad_len is not None and params.pad_to == "config_max") else lens.max()
        tokens = len(lens) * max(width, lens.max())
    return float(tokens * params.bytes_per_token)


@dataclass(frozen=True)
class FetchLoad:
    payload_bytes: float        # one copy of the batch
    read_bytes: float           # bytes the queue serves for this fetch
    reads: int                  # read requests the queue serves
    broadcast_bytes: float      # intra-group re-distribution (hierarchical only), off the queue


def fetch_load(seq_lens: np.ndarray, params: DistQueueParams, n_train_devices: int, group_devices: int,
               hierarchical: bool | None = None, packed: bool | None = None,
               pad_len: float | None = None) -> FetchLoad:
    hierarchical = params.hierarchical if hierarchical is None else hierarchical
    payload = payload_bytes(seq_lens, params, packed, pad_len)
    dp = max(1, n_train_devices // max(1, group_devices))
    if hierarchical:
        return FetchLoad(payload, payload, dp, payload * (group_devices - 1))
    return FetchLoad(payload, payload * group_devices, dp * group_devices, 0.0)


@dataclass
class DistQueue:
    env: simpy.Environment
    params: DistQueueParams
    resource: simpy.Resource = field(init=False)
    bytes_written: float = 0.0
    bytes_read: float = 0.0
    reads: int = 0
    busy_s: float = 0.0

    def __post_init__(self) -> None:
        self.resource = simpy.Resource(self.env, capacity=1)

    def _serve(self, nbytes: float):
        with self.resource.request() as req:
            yield req
            dt = nbytes / self.params.bw_Bps
            self.busy_s += dt
            yield self.env.timeout(dt)

    def write(self, nbytes: float) -> None:
        """Producers do not block on the write; it occupies the queue in the background."""
        self.bytes_written += nbytes
        self.env.process(self._serve(nbytes))

    def read(self, load: FetchLoad):
        """A consumer's fetch; yield from it (it waits behind queued writes)."""
        self.bytes_read += load.read_bytes
        self.reads += load.reads
        yield from self._serve(load.read_bytes)

    def stats(self) -> dict[str, float]:
        return {"bytes_written": self.bytes_written, "bytes_read": self.bytes_read,
                "reads": float(self.reads), "busy_s": self.busy_s}
