"""DistQueue: the data plane between rollout producers and training consumers.

Payload per sample is ``bytes_per_token`` x tokens (token ids, log-probs, masks, advantages).
Padded payloads pad every sample to the batch's longest; packed payloads carry real tokens only.
Hierarchical fetch: one reader per TP x PP group reads its DP share, then broadcasts inside the
group; without it every rank of the group reads the same share (load x TP x PP). The queue's
bandwidth is one FIFO simpy resource, so concurrent writes and reads delay each other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from ..scenario import DistQueueParams


def payload_bytes_each(seq_lens: np.ndarray, params: DistQueueParams, packed: bool | None = None,
                       pad_len: float | None = None) -> np.ndarray:
    """Bytes of one copy of each sample. Padded: every sample is ``pad_len`` tokens (the
    configured max) or, with pad_len None / pad_to batch_max, these samples' longest."""
    lens = np.asarray(seq_lens, float)
    if not len(lens):
        return lens
    packed = params.packed if packed is None else packed
    if packed:
        return lens * params.bytes_per_token
    width = pad_len if (pad_len is not None and params.pad_to == "config_max") else lens.max()
    return np.full(len(lens), max(width, lens.max()) * params.bytes_per_token)


def payload_bytes(seq_lens: np.ndarray, params: DistQueueParams, packed: bool | None = None,
                  pad_len: float | None = None) -> float:
    """Bytes of one copy of these samples (padded to their common width when not packed)."""
    return float(payload_bytes_each(seq_lens, params, packed, pad_len).sum())


@dataclass(frozen=True)
class FetchLoad:
    payload_bytes: float        # one copy of the batch
    read_bytes: float           # bytes the queue serves for this fetch
    reads: int                  # read requests the queue serves
    broadcast_bytes: float      # intra-group re-distribution (hierarchical only), off the queue

    @property
    def broadcast_share_bytes(self) -> float:
        """The buffer each reader broadcasts inside its TP x PP group (its DP share); 0 without one."""
        return self.payload_bytes / self.reads if self.broadcast_bytes > 0 else 0.0


def fetch_load(seq_lens: np.ndarray, params: DistQueueParams, n_train_devices: int, group_devices: int,
               hierarchical: bool | None = None, packed: bool | None = None,
               pad_len: float | None = None) -> FetchLoad:
    hierarchical = params.hierarchical if hierarchical is None else hierarchical
    payload = payload_bytes(seq_lens, params, packed, pad_len)
    dp = max(1, n_train_devices // max(1, group_devices))
    if hierarchical:
        return FetchLoad(payload, payload, dp, payload * (group_devices - 1))
    return FetchLoad(payload, payload * group_devices, dp * group_devices, 0.0)


class DistQueue:
    """One FIFO server of ``bw_Bps``. Producers write each sample when it is ready and never block;
    a consumer's read waits behind every write that arrived before it. Service times of a FIFO
    server follow D_i = max(D_(i-1), a_i) + s_i, so queued writes are folded in lazily, in arrival
    order, when a read or the run's end looks at the queue (no simpy process per sample)."""

    def __init__(self, env: simpy.Environment, params: DistQueueParams):
        self.env, self.params = env, params
        self.bytes_written = 0.0
        self.bytes_read = 0.0
        self.reads = 0
        self.busy_s = 0.0
        self._free_at = 0.0                              # when the server has served all folded work
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []   # (arrival s, service s) not folded yet

    def write(self, nbytes: np.ndarray, at_s: np.ndarray) -> None:
        """Samples' payloads arriving at times ``at_s`` (now or later)."""
        nbytes = np.asarray(nbytes, float)
        if len(nbytes):
            self.bytes_written += float(nbytes.sum())
            self._pending.append((np.asarray(at_s, float), nbytes / self.params.bw_Bps))

    def write_many(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """write(nbytes, at_s) of each part in order, queued as one (the same sums, the same queue)."""
        nbytes = [np.asarray(b, float) for b, _ in parts]
        for part in nbytes:
            if len(part):
                self.bytes_written += float(part.sum())
        if sum(len(part) for part in nbytes):
            at_s = np.concatenate([np.asarray(a, float) for _, a in parts])
            self._pending.append((at_s, np.concatenate(nbytes) / self.params.bw_Bps))

    def _fold(self, until: float) -> None:
        """Serve, in arrival order, the writes that arrived by ``until``."""
        if not self._pending:
            return
        arrive = np.concatenate([a for a, _ in self._pending])
        service = np.concatenate([s for _, s in self._pending])
        order = _stable_order(arrive)
        arrive, service = arrive[order], service[order]
        n = int(np.searchsorted(arrive, until, side="right"))
        self._pending = [(arrive[n:], service[n:])] if n < len(arrive) else []
        if n:
            served = np.cumsum(service[:n])
            before = served - service[:n]                  # work ahead of each write among these
            self._free_at = float(served[-1] + max(self._free_at, float(np.max(arrive[:n] - before))))
            self.busy_s += float(served[-1])

    def read(self, load: FetchLoad):
        """A consumer's fetch; yield from it (it waits behind queued writes)."""
        self.bytes_read += load.read_bytes
        self.reads += load.reads
        now = float(self.env.now)
        self._fold(now)
        service = load.read_bytes / self.params.bw_Bps
        self._free_at = max(self._free_at, now) + service
        self.busy_s += service
        yield self.env.timeout(self._free_at - now)

    def stats(self, until: float | None = None) -> dict[str, float]:
        self._fold(float(self.env.now) if until is None else until)
        return {"bytes_written": self.bytes_written, "bytes_read": self.bytes_read,
                "reads": float(self.reads), "busy_s": self.busy_s}


def _stable_order(values: np.ndarray) -> np.ndarray:
    """np.argsort(values, kind="stable") of finite floats, faster: none when already in order, else
    numpy's default sort (several times the stable one's speed) and its ties (equal values) put
    back in index order by one sort of (tie group, index) keys, all distinct."""
    if not len(values) or (values[1:] >= values[:-1]).all():
        return np.arange(len(values))
    order = np.argsort(values)
    ranked = values[order]
    keys = order.copy()
    keys[1:] += np.cumsum(ranked[1:] != ranked[:-1]) * len(values)   # group g: keys g * n + index
    keys.sort()
    return keys % len(values)
