"""Every generated sample, from generation to consumption or an explicit drop.

Arrays grow per rollout round; ``to_frame`` gives one row per sample. A sample is consumed by
exactly one training iteration or dropped with a reason (no_signal, overprovision, stale, unused).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is made: a run starts without it
    import pandas as pd

SAMPLE_COLUMNS = ["sample", "round", "group", "prompt_len", "response_len", "generated_tokens", "version",
                  "first_version",
                  "start", "finish", "ready", "consumed_iteration", "staleness", "dropped", "drop_reason", "instance"]

_DTYPES = {"sample": int, "round": int, "group": int, "version": int, "first_version": int,
           "consumed_iteration": int, "dropped": bool, "drop_reason": object, "instance": int}


# How much a full column buffer grows. Any factor > 1 keeps appends amortized O(size appended)
# (copies total n / (factor - 1)); 1.25 rather than 2 keeps a long run's peak near its final size.
# An implementation choice, not a modelling constant: results do not depend on it.
_GROWTH = 1.25


@dataclass
class SampleStore:
    # Column buffers with spare room, grown by a quarter (_GROWTH): appending a round costs its own size
    # (amortized), not a re-concatenation of every earlier round. flat() returns views of [:n].
    _buf: dict[str, np.ndarray] = field(default_factory=dict)
    n: int = 0

    def add(self, *, round_: np.ndarray, group: np.ndarray, prompt_len: np.ndarray, response_len: np.ndarray,
            generated_tokens: np.ndarray, version: int, first_version: np.ndarray, start: float, finish: np.ndarray, ready: np.ndarray,
            dropped: np.ndarray | None = None, drop_reason: np.ndarray | None = None,
            instance: int = -1) -> np.ndarray:
        """Add finished (or dropped) samples; returns their ids. ``instance``: the first global rank of
        the rollout instance that generated them (-1: unknown), the critical path's link from a
        training step back to the sequence it waited for (rl/critical_path.py)."""
        k = len(finish)
        ids = np.arange(self.n, self.n + k)
        self._append(k, sample=ids, round=round_, group=group, prompt_len=prompt_len,
                     response_len=response_len, generated_tokens=generated_tokens, version=np.full(k, version), first_version=first_version,
                     start=np.full(k, float(start)), finish=finish, ready=ready,
                     consumed_iteration=np.full(k, -1), staleness=np.full(k, -1.0),
                     dropped=np.zeros(k, bool) if dropped is None else np.asarray(dropped, bool),
                     drop_reason=np.full(k, "", object) if drop_reason is None else drop_reason,
                     instance=np.full(k, int(instance)))
        return ids

    def _append(self, k: int, **arrays: np.ndarray) -> None:
        n, end = self.n, self.n + k
        for c in SAMPLE_COLUMNS:
            a = np.asarray(arrays[c])
            buf = self._buf.get(c)
            if buf is None:   # dtype as np.concatenate of the appended arrays would give
                buf = np.empty(max(k, 16), a.dtype)
            else:
                dtype = np.result_type(buf.dtype, a.dtype)
                if end > len(buf) or dtype != buf.dtype:
                    grown = np.empty(max(end, int(len(buf) * _GROWTH) + 16), dtype)
                    grown[:n] = buf[:n]
                    buf = grown
            buf[n:end] = a
            self._buf[c] = buf
        self.n = end

    def flat(self) -> dict[str, np.ndarray]:
        if not self._buf:
            return {c: np.zeros(0, _DTYPES.get(c, float)) for c in SAMPLE_COLUMNS}
        n = self.n
        return {c: b[:n] for c, b in self._buf.items()}

    def consume(self, ids: np.ndarray, iteration: int) -> None:
        f = self.flat()
        if np.any(f["consumed_iteration"][ids] >= 0) or np.any(f["dropped"][ids]):
            raise AssertionError("a sample was consumed twice or after being dropped")
        f["consumed_iteration"][ids] = iteration
        f["staleness"][ids] = iteration - f["version"][ids]

    def drop(self, ids: np.ndarray, reason: str) -> None:
        f = self.flat()
        f["dropped"][ids] = True
        f["drop_reason"][ids] = reason

    def truncate(self, n: int) -> None:
        """Forget samples n.. (ids are positions: a failure rolls the store back to a step start)."""
        self.n = min(self.n, n)

    def pending(self) -> np.ndarray:
        """Ids of samples neither consumed nor dropped."""
        f = self.flat()
        if not len(f["sample"]):
            return np.array([], int)
        return np.flatnonzero((f["consumed_iteration"] < 0) & ~f["dropped"])

    def to_frame(self) -> pd.DataFrame:
        """One row per sample. The frame holds the store's own columns, cut to their exact length
        (no spare room, no second copy): a finished run keeps each sample once. Make it when the
        run is over; a later consume() or drop() would show in it."""
        import pandas as pd

        self._trim()
        f = self.flat()
        return pd.DataFrame({c: f[c] for c in SAMPLE_COLUMNS}, copy=False)

    def _trim(self) -> None:
        """Give back the spare room the growth left (one column at a time, so the peak stays low)."""
        for c, buf in self._buf.items():
            if len(buf) != self.n:
                self._buf[c] = buf[:self.n].copy()
