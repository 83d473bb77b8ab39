"""The critical path of each training step: the chain of recorded intervals that set its length.

Step k lasts from the end of step k-1 (0 for the first) to its own end (``iterations[k]["end"]``,
the step time of metrics.iterations_frame). Its path is found by a backward walk over the recorded
intervals (des.Timeline), from the step's end on the rank that trained it, one rank at a time:

- a busy interval (generate, forward, train, switch, sync, fetch, plan, failure states) or a
  pipeline bubble (it is part of its optimizer step) is on the path; the walk goes on from its start;
- a wait (any other idle interval) ended at some time t because something it waited for happened
  then. If t is the ready time of the step's batch (the latest ``ready`` of the samples step k
  consumed; of the samples ready then, the one that finished last: a batch handed over together is
  verified from its last finish), the path is that sample's reward latency (``reward``, finish -> ready) and its
  sequence's generation on the rollout instance that produced it (the sample store's ``instance``),
  and the walk goes on on that instance. Otherwise the path goes to the busy interval of another
  rank that ended at t (a weight sync that opened the gate, the consolidated tail the trainers
  waited for, the aux pool's forward), preferring sync > train > forward > fetch > switch >
  generate, then the lowest rank; else, if a sample the step consumed became ready at t (a step of
  several local updates waits for each update's batch), that sample's reward latency and
  generation, as for the batch. A wait nothing explains stays on the path with its own cause.

The walk stops at the step's start, so the segments tile [start, end] exactly: their lengths sum to
the step time. Generation on the path after the step's batch reached ``schedule.tail_threshold`` of
its finished samples counts as ``long_tail`` (the same share that splits a trainer's wait into
dependency and long tail in the split-pool schedules).

"What if this were free" deltas come from the chain, not from re-simulation: the delta of a cause
is the path time it holds (mean seconds per step). They sum consistently: per step the causes'
seconds sum to the step time, so the deltas of all causes sum to the mean step time and the shares
to 1. Where the schedule is serial (colocated: one chain, nothing overlaps) a cause's delta is the
step time saved when the cost is zeroed and the run re-simulated (tested for weight sync and
switch); where work overlaps (one-step-off, async) it is an upper bound of that saving: a chain
that was shorter by less than the delta becomes critical instead.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the run imports this module (OnlinePaths) before its first event: pandas comes later
    import pandas as pd

# The pools of served models (rl/pools.py SERVED_FIELDS), whose rows the walker does not read.
SERVED_POOLS = ("reward_model", "teacher")
# Waits whose label names what was waited for: the trainer's wait for the teacher's answers to the
# batch it handed over (rl/schedules/training.py, distillation.handover step).
IDLE_LABEL_CAUSE = {"teacher": "teacher"}
# Path causes, in report order. "data": the DistQueue fetch; "reward": reward latency (rule-based, or
# a served reward model's) between a sequence's finish and its sample being scored; "teacher": a
# distillation teacher's latency from then to the sample being ready (or the trainer's wait for its
# answers to the batch); "dependency": a wait nothing recorded explains.
CAUSES = ("generate", "long_tail", "reward", "switch", "data", "forward", "train", "pipeline_bubble",
          "weight_sync", "dependency", "planning", "failure", "untracked", "tool_wait", "teacher")
STATE_CAUSE = {"generate": "generate", "forward": "forward", "train": "train", "switch": "switch",
               "sync": "weight_sync", "fetch": "data", "plan": "planning", "lost": "failure", "replan": "failure",
               "restart": "failure", "failed": "failure"}
# Which busy interval explains a wait when several end at the same time (lower first).
JUMP_PRIORITY = {"sync": 0, "train": 1, "forward": 2, "fetch": 3, "switch": 4, "generate": 5}
# Times closer than this are the same event (runners compare simulated times within 1e-9 s,
# staleness.TIME_TOL_S; float sums over a long run drift by more).
MATCH_TOL_S = 1e-7
MATCH_TOL_REL = 1e-12


def _tol(t: float) -> float:
    return MATCH_TOL_S + MATCH_TOL_REL * abs(t)


@dataclass(frozen=True)
class Segment:
    """One piece of a step's critical path: [start, end] of a recorded interval (clipped)."""
    start: float
    end: float
    cause: str
    state: str
    pool: str
    rank_start: int
    rank_count: int
    label: str
    iteration: int
    sample: int = -1     # generate: the sequence (sample id) whose finish ends the segment

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class StepPath:
    iteration: int
    start: float
    end: float
    segments: list[Segment]   # in time order, contiguous, tiling [start, end]

    def seconds_by_cause(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for seg in self.segments:
            out[seg.cause] = out.get(seg.cause, 0.0) + seg.duration
        return out


class _Rows:
    """The timeline's intervals as arrays, indexed by rank (built on demand for the ranks the walk visits)."""

    def __init__(self, timeline: pd.DataFrame):
        self.start = timeline["start"].to_numpy(float)
        self.end = timeline["end"].to_numpy(float)
        self.rank_start = timeline["rank_start"].to_numpy(int)
        self.rank_count = timeline["rank_count"].to_numpy(int)
        self.state = timeline["state"].to_numpy(object)
        self.cause = timeline["cause"].to_numpy(object)
        self.pool = timeline["pool"].to_numpy(object)
        self.label = timeline["label"].to_numpy(object)
        self.iteration = timeline["iteration"].to_numpy(int)
        # a served model's rows (a reward model, a distillation teacher) never explain a wait: the
        # samples it scores hold the trainer as their reward / teacher latency (finish -> ready), and its
        # rows are recorded at the run's end, after the online walk (Context._record_served), which must
        # see what the offline one sees
        busy = np.flatnonzero((self.state != "idle") & ~np.isin(self.pool, SERVED_POOLS))
        self.busy_by_end = busy[np.argsort(self.end[busy], kind="stable")]
        self.busy_ends = self.end[self.busy_by_end]
        self._by_rank: dict[int, tuple[np.ndarray, list[float]]] = {}
        trained = np.flatnonzero(self.state == "train")
        self.trainer_of: dict[int, int] = {}     # iteration -> the first rank that trained it
        for i in trained[::-1]:
            self.trainer_of[int(self.iteration[i])] = int(self.rank_start[i])

    def _on_rank(self, rank: int) -> tuple[np.ndarray, list[float]]:
        if rank not in self._by_rank:
            idx = np.flatnonzero((self.rank_start <= rank) & (rank < self.rank_start + self.rank_count))
            idx = idx[np.argsort(self.start[idx], kind="stable")]
            self._by_rank[rank] = (idx, self.start[idx].tolist())
        return self._by_rank[rank]

    def first_on(self, rank: int) -> int:
        """The earliest recorded interval on ``rank``; -1: none."""
        idx, _ = self._on_rank(rank)
        return int(idx[0]) if len(idx) else -1

    def at(self, rank: int, t: float) -> int:
        """The interval on ``rank`` that runs up to ``t`` (starts before it, ends at or after it); -1: none."""
        idx, starts = self._on_rank(rank)
        pos = bisect.bisect_left(starts, t - _tol(t)) - 1
        if pos < 0 or self.end[idx[pos]] < t - _tol(t):
            return -1
        return int(idx[pos])

    def busy_ending_at(self, t: float, exclude_rank: int = -1, iteration: int | None = None) -> int:
        """The busy interval ending at ``t`` that explains a wait: one of ``iteration`` first (the
        step's own intervals end it), then JUMP_PRIORITY, then the lowest rank; -1: none."""
        lo = int(np.searchsorted(self.busy_ends, t - _tol(t), side="left"))
        hi = int(np.searchsorted(self.busy_ends, t + _tol(t), side="right"))
        best, key = -1, None
        for i in self.busy_by_end[lo:hi]:
            if self.rank_start[i] <= exclude_rank < self.rank_start[i] + self.rank_count[i] or self.start[i] >= t:
                continue
            k = (iteration is not None and self.iteration[i] != iteration,
                 JUMP_PRIORITY.get(self.state[i], len(JUMP_PRIORITY)), int(self.rank_start[i]))
            if key is None or k < key:
                best, key = int(i), k
        return best

    def segment(self, i: int, start: float, end: float, cause: str | None = None, sample: int = -1) -> Segment:
        state = str(self.state[i])
        if cause is None:
            cause = str(self.cause[i]) if state == "idle" else STATE_CAUSE.get(state, state)
            # a trainer waiting on a served pool's answers to its batch (distillation.handover step)
            cause = IDLE_LABEL_CAUSE.get(str(self.label[i]), cause) if cause == "dependency" else cause
        return Segment(start, end, cause or "dependency", state, str(self.pool[i]), int(self.rank_start[i]),
                       int(self.rank_count[i]), str(self.label[i]), int(self.iteration[i]), sample)


_NO_ROWS = np.zeros(0, np.intp)


class _Samples:
    """The sample store's columns the walk reads: which samples a step consumed, when each was
    finished and ready, and on which instance. Positions here are held rows: sample id - ``base``
    (output.keep_sample_rows retires older rows; the segments carry sample ids)."""

    def __init__(self, flat: dict[str, np.ndarray], tail_threshold: float, base: int = 0, *,
                 many_steps: bool = False):
        self.flat, self.tail_threshold, self.base = flat, tail_threshold, base
        self.consumed = flat["consumed_iteration"]
        self.instance = flat.get("instance", np.full(len(self.consumed), -1))
        self._by_instance: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # many_steps: the positions grouped by consuming step once (a stable sort: each step's
        # positions ascending, as flatnonzero gives them) instead of one scan of every row per step.
        self._by_step: dict[int, np.ndarray] | None = None
        if many_steps:
            order = np.argsort(self.consumed, kind="stable")
            steps = self.consumed[order]
            cuts = (np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist()
            self._by_step = {int(steps[a]): order[a:b]
                             for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True) if a < b}

    def consumed_by(self, k: int) -> np.ndarray:
        """The positions of the samples step k consumed, ascending."""
        if self._by_step is None:
            return np.flatnonzero(self.consumed == k)
        return self._by_step.get(k, _NO_ROWS)

    def batch(self, k: int) -> tuple[int, float, float]:
        """(binding sample position, its ready time, the tail_threshold quantile of finish times) of
        step k; (-1, nan, inf) when it consumed nothing."""
        ids = self.consumed_by(k)
        if not len(ids):
            return -1, math.nan, math.inf
        ready = self.flat["ready"][ids]
        latest = ready.max()
        # Of the samples ready last, the one that finished last: a batch handed over together
        # (reward.handover: batch) is verified from its last finish, so the wait before that is
        # the other sequences' generation, not reward latency.
        tied = ids[np.flatnonzero(ready == latest)]
        binding = int(tied[np.argmax(self.flat["finish"][tied])])
        at = min(len(ids) - 1, math.ceil(self.tail_threshold * len(ids)) - 1)
        q = np.partition(self.flat["finish"][ids], at)[at]     # the at-th smallest: np.sort(...)[at]
        return binding, float(latest), float(q)

    def ready_at(self, k: int, t: float) -> int:
        """The sample step k consumed that became ready at ``t`` (of several, the one that finished
        last); -1: none. A step of several local updates (verl-fully-async: require_batches x
        trigger) waits for each update's batch: the step's latest ready time names only the last."""
        ids = self.consumed_by(k)
        if not len(ids):
            return -1
        hit = ids[np.abs(self.flat["ready"][ids] - t) <= _tol(t)]
        return int(hit[np.argmax(self.flat["finish"][hit])]) if len(hit) else -1

    def held_whole(self, k: int, samples: int, start: float, retired_max_finish: float) -> bool:
        """Whether the held rows hold all that step k's walk reads: the ``samples`` it consumed, and
        every sample finished within it (none retired finished after its ``start``)."""
        return len(self.consumed_by(k)) == samples and retired_max_finish <= start

    def last_finished(self, instance: int, start: float, end: float) -> int:
        """The sample of ``instance`` finished last within [start, end] (ties: lowest id); -1: none."""
        if instance not in self._by_instance:
            ids = np.flatnonzero(self.instance == instance)
            self._by_instance[instance] = (ids, self.flat["finish"][ids])
        ids, finish = self._by_instance[instance]
        within = (finish > start) & (finish <= end + _tol(end))
        ok, f = ids[within], finish[within]
        if not len(ok):
            return -1
        return int(ok[np.flatnonzero(f == f.max())[0]])


def critical_paths(record, timeline: pd.DataFrame) -> list[StepPath]:
    """The critical path of every step of a run (``record``: a RunRecord; ``timeline``: its frame).
    The steps an OnlinePaths walked during the run (``record.online_paths``: rows folded as they
    went) come from it; the rest are walked here. Under output.keep_sample_rows with failures (no
    online walk), of every step whose samples the store still holds (the others' rows were folded
    into counts: their walk would miss the sequence it waited for)."""
    online = getattr(record, "online_paths", None)
    walked = online.paths if online is not None else []
    rows = _Rows(timeline)
    store = record.samples
    samples = _Samples(store.flat(), float(record.scenario.schedule.tail_threshold), store.base,
                       many_steps=len(record.iterations) - len(walked) > 1)
    out = list(walked)
    w0 = online.w0 if online is not None else 0.0
    for it in record.iterations[len(walked):]:
        w1 = float(it.get("end", it.get("train_end", w0)))
        k = int(it["iteration"])
        if not store.base or samples.held_whole(k, int(it["samples"]), w0, store.retired.max_finish):
            out.append(step_path(rows, samples, k, w0, w1))
        w0 = w1
    return out


class OnlinePaths:
    """The walk of each step done during the run, once nothing recorded later can change it, so
    the per-sample rows it reads can be folded into counts (rl/samples.py ``retire``): the default
    `rlsim run` keeps no per-sample table and its memory stays flat over iterations.

    Step k is walked when a later step has been recorded (its end is final), every clock of the
    run has recorded up to its end, and no sample that finished by then is still to be stored
    (``recorded``: the clocks' cursors and Context.unstored_from): the walk reads only intervals
    that start before the step's end, and every interval recorded from now on starts at a cursor.
    It reads the samples step k consumed and the samples that finished on a rollout instance in a
    generate interval it crosses; ``floor`` is the finish time below which no later walk can read
    a sample. What the walk relied on is checked as the run goes on (``check``): an interval or a
    sample recorded later that the walk should have seen is an error (AssertionError), never a
    silently different path. Runs with schedule.failures are not walked online (a roll-back
    rewrites recorded intervals)."""

    def __init__(self, timeline, store, tail_threshold: float):
        self.timeline, self.store, self.tail_threshold = timeline, store, float(tail_threshold)
        self.paths: list[StepPath] = []
        self.sequences: dict[int, tuple[int, int]] = {}   # sample id -> (prompt_len, response_len) on a path
        self.w0 = 0.0             # start of the next step to walk
        self.walked_until = -math.inf   # end of the last walked step
        self._live: list = []     # recorded intervals a later walk may still read
        self._seen_rows = 0       # timeline rows already checked / taken into _live
        self._seen_samples = 0    # sample ids already checked

    def advance(self, iterations: list[dict], recorded: list[float]) -> None:
        """Walk every step that can be walked now (class docstring), in order."""
        self.check()
        low = min(recorded) if recorded else -math.inf
        first = len(self.paths)
        ends, w0 = [], self.w0
        for i, it in enumerate(iterations[first:len(iterations) - 1], start=first):   # the last one's end may still be set
            w1 = float(it.get("end", it.get("train_end", w0)))
            # a step logged in parts (verl-fully-async's local updates, merged into one at its sync)
            # is final only once the next step's record follows it
            if w1 > low or int(iterations[i + 1]["iteration"]) == int(it["iteration"]):
                break
            ends.append((int(it["iteration"]), w0, w1))
            w0 = w1
        if not ends:
            return
        frame = type(self.timeline)(rows=self._window(self.w0, ends[0][0])).to_frame()
        rows, store = _Rows(frame), self.store
        samples = _Samples(store.flat(), self.tail_threshold, store.base)
        for k, a, b in ends:
            path = step_path(rows, samples, k, a, b)
            self.paths.append(path)
            for seg in path.segments:
                if seg.sample >= 0 and seg.sample not in self.sequences:
                    at = np.array([seg.sample])
                    self.sequences[seg.sample] = (int(store.at("prompt_len", at)[0]),
                                                  int(store.at("response_len", at)[0]))
        self.w0, self.walked_until = w0, ends[-1][2]

    def next_step(self, iterations: list[dict]) -> int:
        """The iteration number of the first step not walked yet (its batch rows stay)."""
        if len(iterations) > len(self.paths):
            return int(iterations[len(self.paths)]["iteration"])
        return int(iterations[-1]["iteration"]) + 1 if iterations else 0

    def _window(self, w0: float, first_step: int) -> list:
        """The recorded intervals the walks from ``w0`` may read: those that end at or after it
        (less the match tolerance), and every train interval of the steps not walked yet (each
        step's walk starts on its first trainer)."""
        rows = self.timeline.rows
        self._live = [r for r in self._live + rows[self._seen_rows:]
                      if r.end >= w0 - _tol(w0) or (r.state == "train" and r.iteration >= first_step)]
        self._seen_rows = len(rows)
        return self._live

    def floor(self) -> float:
        """Samples that finished before this time are read by no walk still to come: before the
        next step's start and before every generate interval it may cross (recorded, or to be
        recorded from a clock's cursor: ``advance`` saw them all at or after that cursor)."""
        t = self.w0 - _tol(self.w0)
        gen = [r.start for r in self._live if r.state == "generate" and r.end >= t]
        return min([t, *gen]) - _tol(t)

    def check(self) -> None:
        """What the walks so far relied on still holds: every interval recorded since starts at
        or after the end of the last walked step, and every sample added since finished after it
        (beyond the match tolerance)."""
        rows, until = self.timeline.rows, self.walked_until
        late = [r for r in rows[self._seen_rows:] if r.start < until]
        if late:
            raise AssertionError(f"critical path: an interval recorded after step {len(self.paths) - 1} was walked "
                                 f"starts before its end ({late[0]})")
        store = self.store
        if store.n > self._seen_samples and store.n > store.base:
            new = store.flat()["finish"][max(0, self._seen_samples - store.base):]
            if len(new) and float(new.min()) <= until + _tol(until):
                raise AssertionError(f"critical path: a sample added after step {len(self.paths) - 1} was walked "
                                     f"finished before its end ({float(new.min())} <= {until})")
        self._seen_samples = store.n


def step_path(rows: _Rows, samples: _Samples, k: int, w0: float, w1: float) -> StepPath:
    """The backward walk over [w0, w1] (module docstring)."""
    binding, ready, q_finish = samples.batch(k)
    rank = rows.trainer_of.get(k, -1)      # the walk starts where the step ends: on its trainer
    if rank < 0:
        first = rows.busy_ending_at(w1, iteration=k)
        rank = int(rows.rank_start[first]) if first >= 0 else -1
    t, out, data_used, jumped_at = w1, [], binding < 0, math.nan
    for _ in range(len(rows.start) + 8):     # each pass ends one segment or makes one jump
        if t <= w0 + _tol(w0):
            break
        i = rows.at(rank, t) if rank >= 0 else -1
        if i < 0:
            out.append(Segment(w0, t, "untracked", "", "", rank, 0, "", k))
            t = w0
            break
        start = float(rows.start[i])
        if rows.state[i] != "idle" or rows.cause[i] == "pipeline_bubble":
            sample = samples.last_finished(int(rows.rank_start[i]), start, t) if rows.state[i] == "generate" else -1
            out.append(rows.segment(i, max(start, w0), t, sample=sample + samples.base if sample >= 0 else -1))
            t = start
            continue
        if not data_used and abs(t - ready) <= _tol(t):
            data_used = True
            moved = _data_chain(rows, samples, binding, k, w0, t, out)
            if moved is not None:
                t, rank = moved
                continue
        if jumped_at != t:
            j = rows.busy_ending_at(t, rank)
            if j >= 0:
                rank, jumped_at = int(rows.rank_start[j]), t
                continue
            ready_then = samples.ready_at(k, t)   # a sample of the step ready then (a local update's batch)
            if ready_then >= 0:
                moved = _data_chain(rows, samples, ready_then, k, w0, t, out)
                if moved is not None:
                    t, rank = moved
                    continue
        out.append(rows.segment(i, max(start, w0), t))
        t = start
    if t > w0 + _tol(w0):      # the walk's bound ran out (not expected): say so rather than stretch a segment
        out.append(Segment(w0, t, "untracked", "", "", rank, 0, "", k))
    elif out and out[-1].start > w0:   # within the tolerance of the step start: float rounding, not a gap
        out[-1] = replace(out[-1], start=w0)
    return StepPath(k, w0, w1, _long_tail(out[::-1], q_finish))


def _data_chain(rows: _Rows, samples: _Samples, binding: int, k: int, w0: float, t: float,
                out: list[Segment]) -> tuple[float, int] | None:
    """The wait for the step's batch: the binding sample's reward latency onto the path; returns
    where the walk goes on (where its engine handed it out: its finish, or the end of the batch
    it was returned with, whose generation the walk then follows), None when its instance is not
    recorded."""
    instance = int(samples.instance[binding])
    returned = float(samples.flat.get("returned", samples.flat["finish"])[binding])
    i = rows.at(instance, min(returned, t)) if instance >= 0 else -1
    if i < 0 and instance >= 0 and returned <= w0 + _tol(w0):
        # returned before the step's window: the walk ends at w0 with the wait, and a step walked
        # during the run no longer holds that generate interval (OnlinePaths._window), only the
        # instance's later ones (its pool and ranks are theirs); it was an unexplained dependency
        i = rows.first_on(instance)
    if i < 0:
        return None
    # returned -> scored: the reward; scored -> ready (t): a distillation teacher's log-probabilities
    # (a sample scored when ready had no teacher: the reward runs to t, as t matches its ready time)
    scored_at = float(samples.flat.get("scored", samples.flat["ready"])[binding])
    scored = t if scored_at >= float(samples.flat["ready"][binding]) else min(max(scored_at, returned), t)
    where = (str(rows.pool[i]), int(rows.rank_start[i]), int(rows.rank_count[i]))
    if scored < t:
        out.append(Segment(max(scored, w0), t, "teacher", "teacher", *where, "teacher latency", k,
                           binding + samples.base))
    if returned < scored and (scored > w0 or scored == t):
        out.append(Segment(max(returned, w0), scored, "reward", "reward", *where, "reward latency", k,
                           binding + samples.base))
    return min(returned, t), instance


def _long_tail(segments: list[Segment], q_finish: float) -> list[Segment]:
    """Generation on the path after the batch's tail_threshold share had finished -> long_tail."""
    out = []
    for seg in segments:
        if seg.cause != "generate" or seg.end <= q_finish:
            out.append(seg)
        elif seg.start >= q_finish:
            out.append(_replace(seg, cause="long_tail"))
        else:
            out += [_replace(seg, end=q_finish, sample=-1), _replace(seg, start=q_finish, cause="long_tail")]
    return out


def _replace(seg: Segment, **changes) -> Segment:
    return Segment(**{**seg.__dict__, **changes})


# ---- the `run --json` object ------------------------------------------------------------------
METHOD = ("dependency chain: backward walk over the recorded intervals; free_delta_s = path seconds "
          "per cause and step (exact saving where the schedule is serial, an upper bound where work overlaps)")


def summarize(paths: list[StepPath], samples: dict[str, np.ndarray] | None = None, *, base: int = 0,
              total_steps: int | None = None, sequences: dict[int, tuple[int, int]] | None = None) -> dict:
    """The ``critical_path`` key of the summary: per step its chain (consecutive segments of one
    interval kind merged) and seconds per cause; over the run each cause's share of the path and
    its free delta (mean seconds per step: what the step would lose were that cause free, to first
    order). Sums: per step the causes' seconds = the step time; the deltas = the mean step time.
    ``base``: the first held sample id; ``total_steps``: the run's steps when ``paths`` are fewer
    (output.keep_sample_rows), said in ``steps_walked``; ``sequences``: (prompt_len, response_len) of
    the sequences on paths walked during the run (OnlinePaths.sequences: their rows may be gone)."""
    steps, by_step = [], []
    for path in paths:
        by_cause = path.seconds_by_cause()
        by_step.append(by_cause)
        steps.append({"iteration": path.iteration, "start_s": path.start, "end_s": path.end,
                      "length_s": path.end - path.start,
                      "s_by_cause": _in_cause_order(by_cause),
                      "chain": chain(path, samples, base, sequences)})
    whole = _over(by_step)
    deltas = whole["free_delta_s"]
    out = {"method": METHOD, "steps": steps, **whole,
           "bottleneck": max(CAUSES, key=lambda c: (deltas[c], -CAUSES.index(c))) if whole["step_time_s"] > 0 else ""}
    if len(paths) >= 2 and total_steps in (None, len(paths)):
        out["steady"] = _over(by_step[1:])   # the steady figures' window: the first step is a warm-up
    if total_steps is not None and total_steps != len(paths):   # output.keep_sample_rows: said, not only shown
        out["steps_walked"] = (f"{len(paths)} of {total_steps} steps: those whose per-sample rows output.keep_sample_rows "
                               "kept (the rows of the others were folded into counts)")
    return out


def _in_cause_order(by_cause: dict[str, float]) -> dict[str, float]:
    """``by_cause`` in CAUSES' order, then any other cause a wait kept (``placement``: devices of the
    trainer that form no rollout instance idle through generation), so that a step's seconds by
    cause sum to its length."""
    return {**{c: by_cause[c] for c in CAUSES if c in by_cause},
            **{c: by_cause[c] for c in sorted(by_cause) if c not in CAUSES}}


def _over(by_step: list[dict[str, float]]) -> dict:
    """Mean step, each cause's share of the path and free delta over steps' seconds by cause (all,
    or steps 1..N-1: the window of the steady step and tokens/s, where a report's headline is; the
    whole run's mix a pipelined schedule's warm-up step in, 361.8 s of long tail in the seed's step 0)."""
    totals = {c: 0.0 for c in CAUSES}
    for by_cause in by_step:
        for cause, seconds in by_cause.items():
            totals[cause] = totals.get(cause, 0.0) + seconds
    length, n = sum(totals.values()), max(1, len(by_step))
    return {"step_time_s": length / n, "share": {c: (v / length if length > 0 else 0.0) for c, v in totals.items()},
            "free_delta_s": {c: v / n for c, v in totals.items()}}


def of_run(record, timeline: pd.DataFrame) -> dict:
    """The summary's ``critical_path`` of a run (``record``: a RunRecord; ``timeline``: its frame)."""
    store, online = record.samples, getattr(record, "online_paths", None)
    out = summarize(critical_paths(record, timeline), store.flat(), base=store.base,
                    total_steps=len(record.iterations) if store.base else None,
                    sequences=online.sequences if online is not None else None)
    return with_trainer_parts(out, getattr(record, "trainer_paths", []))


def with_trainer_parts(summary: dict, trainer_paths: list) -> dict:
    """Each train element of a step's chain gains ``trainer``: which pipeline stage ended the last
    optimizer step it covers (``last_stage``) and its seconds by part of the trainer's own critical
    chain (``s_by_part``: "stage N" computing on stage N, "p2p" transfers, "dp_sync", "optimizer",
    "offload"; llm/pipeline.critical_chain). An optimizer step counts by the share of it the element
    covers, so the parts sum to the element's length. ``trainer_paths``: RunRecord.trainer_paths."""
    by_group: dict[tuple, list] = {}
    for pool, rank_start, rank_count, label, start, end, stage, parts in sorted(trainer_paths, key=lambda e: e[4]):
        by_group.setdefault((pool, rank_start, rank_count, label), []).append((start, end, stage, parts))
    for step in summary["steps"]:
        for element in step["chain"]:
            ops = by_group.get((element["pool"], *element["ranks"], element["label"]))
            if element["phase"] != "train" or not ops:
                continue
            lo, hi = element["start_s"], element["end_s"]
            by_part: dict[str, float] = {}
            last = None
            for start, end, stage, parts in ops[max(bisect.bisect_left(ops, (lo,)) - 1, 0):]:
                if start >= hi:
                    break
                covered = min(hi, end) - max(lo, start)
                if covered <= 0 or end <= start:
                    continue
                share, last = covered / (end - start), stage
                for part, seconds in parts:
                    by_part[part] = by_part.get(part, 0.0) + seconds * share
            if by_part:
                element["trainer"] = {"last_stage": last, "s_by_part": by_part}
    return summary


def chain(path: StepPath, samples: dict[str, np.ndarray] | None = None, base: int = 0,
          sequences: dict[int, tuple[int, int]] | None = None) -> list[dict]:
    """The path as a few elements: consecutive segments of one interval kind (pool, ranks, state,
    label; a pipeline bubble goes with its optimizer step) merged, with their seconds per cause and
    the sequence a generation ended with."""
    out: list[dict] = []
    for seg in path.segments:
        phase = "train" if seg.cause == "pipeline_bubble" else seg.state
        key = (seg.pool, seg.rank_start, seg.rank_count, phase, seg.label)
        last = out[-1] if out else None
        if last is not None and last["_key"] == key:
            last["end_s"] = seg.end
        else:
            last = {"_key": key, "phase": phase, "pool": seg.pool, "ranks": [seg.rank_start, seg.rank_count],
                    "label": seg.label, "start_s": seg.start, "end_s": seg.end, "s_by_cause": {}}
            out.append(last)
        last["s_by_cause"][seg.cause] = last["s_by_cause"].get(seg.cause, 0.0) + seg.duration
        if seg.sample >= 0 and sequences and seg.sample in sequences:
            prompt_len, response_len = sequences[seg.sample]
            last["sequence"] = {"sample": seg.sample, "prompt_len": prompt_len, "response_len": response_len}
        elif seg.sample >= 0 and samples is not None:
            at = seg.sample - base
            if at < 0:
                raise AssertionError(f"critical path: sample {seg.sample} on a path was folded before it was read")
            last["sequence"] = {"sample": seg.sample, "prompt_len": int(samples["prompt_len"][at]),
                                "response_len": int(samples["response_len"][at])}
    for element in out:
        del element["_key"]
    return out
