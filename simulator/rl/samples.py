"""Every generated sample, from generation to consumption or an explicit drop.

Arrays grow per rollout round; ``to_frame`` gives one row per sample. A sample is consumed by
exactly one training iteration or dropped with a reason (no_signal, overprovision, stale, unused).

Retention (``output.keep_sample_rows``, docs/scenario-reference.md "output"): by default every row
is kept. With a bound N the store keeps at least the last N rows and every row still in play; the
older rows are *retired*: folded into ``RetiredSamples`` (the counts and sums the summary reads) and
their memory given back, so a long run's memory stays flat. Sample ids stay the generation order
(0, 1, ...): the held rows are ids ``base .. n-1``; ``at(column, ids)`` reads by id.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is made: a run starts without it
    import pandas as pd

SAMPLE_COLUMNS = ["sample", "round", "group", "prompt_len", "response_len", "generated_tokens", "version",
                  "first_version",
                  "start", "finish", "returned", "scored", "ready", "consumed_iteration", "staleness", "dropped", "drop_reason", "instance"]

_DTYPES = {"sample": int, "round": int, "group": int, "version": int, "first_version": int,
           "consumed_iteration": int, "dropped": bool, "drop_reason": object, "instance": int}

# The store holds a drop reason as a small integer code (``drop_code``: its index in
# SampleStore.reasons, 0 = "", not dropped) instead of a Python string per row: appending a round
# copies bytes, not object references, and the frame's string column is made once, by a take from
# the few reason names (to_frame: the same values and dtype as a column made from the strings).
STORED_COLUMNS = ["drop_code" if c == "drop_reason" else c for c in SAMPLE_COLUMNS]


# Integer columns held as int32 while their values fit (a row costs 96 bytes instead of 124: 24 MiB
# less for 100 steps of the default scenario); a value past int32 widens the column to int64, as any
# wider dtype appended widens a column. Group ids (round x 1e6 + prompt) and sample ids stay int64.
# Reads during the run (``at``) give int64, so no cost model sees a narrow integer (no overflow).
_NARROW = frozenset({"round", "prompt_len", "response_len", "version", "first_version", "consumed_iteration",
                     "instance"})
_I32 = np.iinfo(np.int32)


def _narrowed(column: str, a: np.ndarray) -> np.ndarray:
    if column in _NARROW and a.dtype.kind == "i" and a.dtype.itemsize > 4 and \
            (not a.size or (int(a.min()) >= _I32.min and int(a.max()) <= _I32.max)):
        return a.astype(np.int32)
    return a


# How much a full column buffer grows. Any factor > 1 keeps appends amortized O(size appended)
# (copies total n / (factor - 1)); 1.25 rather than 2 keeps a long run's peak near its final size.
# An implementation choice, not a modelling constant: results do not depend on it.
_GROWTH = 1.25


# Retirement moves the held rows down in their buffers; it waits until at least this many rows, and a
# quarter of the held ones, can go, so the moves cost O(1) per sample. Memory, not a model.
RETIRE_MIN_ROWS = 4096


@dataclass
class RetiredSamples:
    """What the summary needs of the retired rows (all finalized: consumed or dropped, and finished
    by the time they were retired). Integer token counts: their sums are exact in any order, so a
    figure made of retired + held rows equals the figure made of all rows."""
    count: int = 0
    consumed: int = 0
    trained_tokens: int = 0          # prompt + response of the consumed rows
    tokens: int = 0                  # prompt + response of every row
    generated_tokens: float = 0.0
    staleness_sum: float = 0.0       # over the consumed rows
    staleness_max: float = -np.inf
    behind_first_version: int = 0    # consumed rows with first_version < consumed_iteration
    oldest_token_max: float = -np.inf   # over the consumed rows: consumed_iteration - first_version
    max_finish: float = -np.inf
    dropped: dict[str, int] = field(default_factory=dict)

    def fold(self, rows: dict[str, np.ndarray], reasons: list[str]) -> None:
        """Count ``rows`` (the store's columns, ``drop_code`` an index into ``reasons``)."""
        consumed = rows["consumed_iteration"] >= 0
        lens = rows["prompt_len"] + rows["response_len"]
        stale = rows["staleness"][consumed]
        self.count += len(lens)
        self.consumed += int(consumed.sum())
        self.trained_tokens += int(lens[consumed].sum())
        self.tokens += int(lens.sum())
        self.generated_tokens += float(rows["generated_tokens"].sum())
        self.staleness_sum += float(stale.sum())
        self.staleness_max = max(self.staleness_max, float(stale.max()) if len(stale) else -np.inf)
        self.behind_first_version += int(np.sum(consumed & (rows["first_version"] < rows["consumed_iteration"])))
        oldest = rows["consumed_iteration"][consumed] - rows["first_version"][consumed]
        self.oldest_token_max = max(self.oldest_token_max, float(oldest.max()) if len(oldest) else -np.inf)
        self.max_finish = max(self.max_finish, float(rows["finish"].max()) if len(lens) else -np.inf)
        for reason, c in sorted(_reason_counts(rows["drop_code"][rows["dropped"]], reasons).items()):
            self.dropped[reason] = self.dropped.get(reason, 0) + c


def _reason_counts(codes: np.ndarray, reasons: list[str]) -> dict[str, int]:
    """How many of ``codes`` name each reason (the reasons that occur, in code order)."""
    counts = np.bincount(codes.astype(np.intp), minlength=len(reasons)).tolist() if len(codes) else []
    return {reasons[code]: n for code, n in enumerate(counts) if n}


@dataclass
class SampleStore:
    # Column buffers with spare room, grown by a quarter (_GROWTH): appending a round costs its own size
    # (amortized), not a re-concatenation of every earlier round. flat() returns views of the held rows.
    keep_rows: int | None = None     # output.keep_sample_rows: None keeps every row
    table: bool = True               # False: no output shows the per-sample table (simulate(keep_samples=False))
    _buf: dict[str, np.ndarray] = field(default_factory=dict)
    n: int = 0                       # samples added: ids 0 .. n-1
    base: int = 0                    # ids below it are retired (rows gone, counted in ``retired``)
    retired: RetiredSamples = field(default_factory=RetiredSamples)
    # Ids below it are consumed or dropped, both final (consume() refuses a second time; nothing
    # un-drops): pending() scans from here, so a long run's steps do not rescan every earlier row.
    _first_open: int = 0
    reasons: list[str] = field(default_factory=lambda: [""])   # drop_code -> reason (0: "", not dropped)
    _reason_code: dict[str, int] = field(default_factory=lambda: {"": 0})

    def add(self, *, round_: np.ndarray, group: np.ndarray, prompt_len: np.ndarray, response_len: np.ndarray,
            generated_tokens: np.ndarray, version: int | np.ndarray, first_version: np.ndarray,
            start: float | np.ndarray, finish: np.ndarray, ready: np.ndarray,
            dropped: np.ndarray | None = None, drop_reason: np.ndarray | None = None,
            instance: int | np.ndarray = -1, returned: np.ndarray | None = None,
            scored: np.ndarray | None = None) -> np.ndarray:
        """Add finished (or dropped) samples; returns their ids. ``instance``: the first global rank of
        the rollout instance that generated them (-1: unknown), the critical path's link from a
        training step back to the sequence it waited for (rl/critical_path.py). ``returned``: when
        the engine handed each out (default: its finish; an engine call that returns a batch, the
        batch's end), so finish -> returned is generation (of the others) and returned -> ready reward.
        ``scored``: when its reward was ready (default: ``ready``); with a distillation teacher,
        returned -> scored is the reward and scored -> ready the teacher (rl/schedules/served.py).
        ``version``, ``start`` and ``instance``: one for all or one per sample (a round of instances in one add)."""
        k = len(finish)
        ids = np.arange(self.n, self.n + k)
        self._append(k, sample=ids, round=round_, group=group, prompt_len=prompt_len,
                     response_len=response_len, generated_tokens=generated_tokens, version=np.asarray(version),
                     first_version=first_version, start=np.asarray(start, float), finish=finish,
                     returned=finish if returned is None else returned,
                     scored=ready if scored is None else scored, ready=ready,
                     consumed_iteration=np.asarray(-1), staleness=np.asarray(-1.0),
                     dropped=np.asarray(False) if dropped is None else np.asarray(dropped, bool),
                     drop_code=np.asarray(0, np.int8) if drop_reason is None else self._codes(drop_reason),
                     instance=np.asarray(instance, np.int64))
        return ids

    def _append(self, k: int, **arrays: np.ndarray) -> None:
        """Write ``k`` rows: per column an array of k values or one value for all (a 0-d array; its
        dtype counts as that of k copies of it, what np.full gives)."""
        n, end = self.n - self.base, self.n - self.base + k
        for c in STORED_COLUMNS:
            a = _narrowed(c, np.asarray(arrays[c]))
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
        self.n += k

    def _code(self, reason: str) -> int:
        """The drop_code of ``reason`` (a new reason gets the next code; the code column widens
        past int8 when the reasons outgrow it)."""
        code = self._reason_code.get(reason)
        if code is None:
            code = self._reason_code[reason] = len(self.reasons)
            self.reasons.append(str(reason))
            buf = self._buf.get("drop_code")
            if buf is not None and code > np.iinfo(buf.dtype).max:
                self._buf["drop_code"] = buf.astype(np.int32)
        return code

    def _codes(self, drop_reason: np.ndarray) -> np.ndarray:
        """The drop_code of each reason ("" for a sample not dropped): a Python look-up only for the
        rows that name one."""
        drop_reason = np.asarray(drop_reason, object)
        named = np.flatnonzero(drop_reason != "")
        values = drop_reason[named].tolist()
        code = {reason: self._code(reason) for reason in dict.fromkeys(values)}   # in order of appearance
        out = np.zeros(len(drop_reason), np.int8 if len(self.reasons) <= np.iinfo(np.int8).max else np.int32)
        out[named] = next(iter(code.values())) if len(code) == 1 else [code[r] for r in values]
        return out

    def flat(self) -> dict[str, np.ndarray]:
        """The held rows' columns (ids base .. n-1: index them by ``ids - base``, or use ``at``);
        STORED_COLUMNS: the drop reason as ``drop_code`` (see ``reasons``)."""
        if not self._buf:
            return {c: np.zeros(0, np.int8 if c == "drop_code" else _DTYPES.get(c, float)) for c in STORED_COLUMNS}
        held = self.n - self.base
        return {c: b[:held] for c, b in self._buf.items()}

    def at(self, column: str, ids: np.ndarray) -> np.ndarray:
        """Column values of samples ``ids`` (held ones: a retired id is an IndexError or wrong);
        integers as int64 (see _NARROW); ``drop_reason`` as the reason strings."""
        if not self._buf:
            return np.zeros(0, _DTYPES.get(column, float))
        if column == "drop_reason":
            return np.array(self.reasons, object)[self._buf["drop_code"][np.asarray(ids) - self.base]]
        values = self._buf[column][np.asarray(ids) - self.base]
        return values.astype(np.int64) if values.dtype.kind == "i" else values

    def consume(self, ids: np.ndarray, iteration: int) -> None:
        f, pos = self.flat(), np.asarray(ids) - self.base
        if np.any(pos < 0) or np.any(f["consumed_iteration"][pos] >= 0) or np.any(f["dropped"][pos]):
            raise AssertionError("a sample was consumed twice or after being dropped")
        f["consumed_iteration"][pos] = iteration
        f["staleness"][pos] = iteration - f["version"][pos]

    def drop(self, ids: np.ndarray, reason: str) -> None:
        code = self._code(reason)
        f, pos = self.flat(), np.asarray(ids) - self.base   # after _code: it may widen the code column
        f["dropped"][pos] = True
        f["drop_code"][pos] = code

    def truncate(self, n: int) -> None:
        """Forget samples n.. (a failure rolls the store back to a step start). A store that retires
        rows is rolled back from a copy instead (rl/schedules/failures.py snapshot)."""
        if n < self.base:
            raise AssertionError(f"truncate to {n} below the retired samples (< {self.base})")
        self.n = min(self.n, n)
        self._first_open = min(self._first_open, self.n)   # rows from n on are new ones

    def pending(self) -> np.ndarray:
        """Ids of samples neither consumed nor dropped (retired samples never are), ascending."""
        f = self.flat()
        held = len(f["sample"])
        if not held:
            return np.array([], int)
        lo = min(max(self._first_open, self.base) - self.base, held)
        open_rows = np.flatnonzero((f["consumed_iteration"][lo:] < 0) & ~f["dropped"][lo:]) + lo
        self._first_open = self.base + (int(open_rows[0]) if len(open_rows) else held)
        return open_rows + self.base

    def retire(self, now: float, *, read_after: float = math.inf, read_from_iteration: int | None = None) -> None:
        """Under a retention bound, fold the oldest rows into ``retired`` and drop them: rows that are
        finalized (consumed or dropped) and finished by ``now``, each older than every row still in
        play, beyond the last ``keep_rows``. Waits for RETIRE_MIN_ROWS and a quarter of the held rows.
        A row the critical path may still read stays (critical_path.OnlinePaths): one that finished
        at or after ``read_after``, or was consumed by step ``read_from_iteration`` or a later one."""
        if self.keep_rows is None or not self._buf:
            return
        f = self.flat()
        done = ((f["consumed_iteration"] >= 0) | f["dropped"]) & (f["finish"] <= now) & (f["finish"] < read_after)
        if read_from_iteration is not None:
            done &= f["consumed_iteration"] < read_from_iteration
        first_open = int(np.argmin(done)) if not done.all() else len(done)
        k = min(first_open, len(done) - self.keep_rows)
        if k <= 0 or k < max(RETIRE_MIN_ROWS, len(done) // 4):
            return
        self.retired.fold({c: a[:k] for c, a in f.items()}, self.reasons)
        for buf in self._buf.values():
            buf[:len(done) - k] = buf[k:len(done)]
        self.base += k
        if len(next(iter(self._buf.values()))) > 2 * max(16, len(done) - k):
            self.trim()      # give back the room of a grown buffer once its rows went

    def to_frame(self) -> pd.DataFrame:
        """One row per sample. The frame holds the store's own columns, cut to their exact length
        (no spare room, no second copy): a finished run keeps each sample once. Make it when the
        run is over; a later consume() or drop() would show in it."""
        import pandas as pd

        self.trim()
        f = self.flat()
        if not self._buf:
            return pd.DataFrame({c: np.zeros(0, _DTYPES.get(c, float)) for c in SAMPLE_COLUMNS}, copy=False)
        columns = {c: f[c] for c in STORED_COLUMNS}
        columns["drop_reason"] = self.reason_column(columns.pop("drop_code"))
        return pd.DataFrame({c: columns[c] for c in SAMPLE_COLUMNS}, copy=False)

    def reason_column(self, codes: np.ndarray):
        """The drop reasons of ``codes`` as the pandas array a column of the reason strings would
        be (its inferred string dtype): a take from the reason names, no Python string per row."""
        from ..des import string_array

        column = string_array(self.reasons, codes)
        if column is None:     # pandas infers no pyarrow string column: let it build the column
            import pandas as pd
            return pd.Series(np.array(self.reasons, object)).array.take(codes.astype(np.intp))
        return column

    def drop_counts(self) -> dict[str, int]:
        """Held samples dropped, per reason (the reasons that occur, in code order)."""
        f = self.flat()
        return _reason_counts(f["drop_code"][f["dropped"]], self.reasons)

    def trim(self) -> None:
        """Give back the spare room the growth left: each buffer shrunk in place (ndarray.resize: a
        realloc, no copy) unless a view of it is alive (resize refuses), then copied, one column at
        a time, so the peak stays low."""
        held = self.n - self.base
        for c in list(self._buf):
            if len(self._buf[c]) != held:
                try:
                    self._buf[c].resize(held, refcheck=True)   # no local name for it: refcheck counts them
                except ValueError:
                    self._buf[c] = self._buf[c][:held].copy()
