"""Generation on one rollout instance: cost a share of sequences, then commit what finished (to
the sample store and DistQueue) and carry what did not (partial rollout, a cut at a split)."""
from __future__ import annotations

import math

import numpy as np

from ..costs import Ranks
from ..distqueue import payload_bytes_each
from ..timeline import contiguous_runs
from .batches import GenPlan, RootRun, SeqBatch, prefix_groups
from .generation_flops import RESUME_KEY, charged_flops, resumed_prefill
from .rewards import rule_rewards_ready
from .served import served_scored, teacher_scored, with_teacher_payload
from .staleness import TIME_TOL_S
from .state import RunState


class Generation:
    def __init__(self, ctx: RunState):
        self.ctx = ctx
        self.costs, self.sched = ctx.costs, ctx.sched

    def plan(self, seqs: SeqBatch, t0: float, version: int, ranks: Ranks) -> GenPlan:
        """Cost one instance's sequences from t0 (nothing committed yet)."""
        return self.plan_many([seqs], t0, version, [ranks])[0]

    def plan_many(self, batches: list[SeqBatch], t0: float, version: int, ranks: list[Ranks]) -> list[GenPlan]:
        """plan(batches[i], t0, version, ranks[i]) for every instance i, its engine runs priced in
        one pass where the costs can (Costs.rollout_many): the same plans."""
        segs, requests, wanted = [], [], []
        for seqs, where in zip(batches, ranks, strict=True):
            remaining = seqs.target_len - seqs.done_len
            seg = remaining.copy()
            if self.sched.partial_rollout and self.sched.length_budget:
                seg = np.minimum(remaining, self.sched.length_budget)
            segs.append((seg, remaining))
            if len(seqs):
                requests.append((seqs.prompt_len + seqs.done_len, seg, where, prefix_groups(seqs)))
                wanted.append(len(segs) - 1)
        many = getattr(self.costs, "rollout_many", None)
        outcomes = many(requests) if many is not None and len(requests) > 1 else \
            [self.costs.rollout(*request) for request in requests]
        by_plan = dict(zip(wanted, outcomes, strict=True))
        plans = []
        for i, (seqs, where) in enumerate(zip(batches, ranks, strict=True)):
            seg, remaining = segs[i]
            out = by_plan.get(i)
            if out is None:
                plans.append(GenPlan(seqs, seg, remaining, np.zeros(0), np.zeros(0), 0.0, t0, version, where, None))
                continue
            start = np.zeros(len(seqs)) if out.start_s is None else np.asarray(out.start_s, float)
            plans.append(GenPlan(seqs, seg, remaining, np.asarray(out.finish_s, float), start, out.flops, t0,
                                 version, where, out.progress_at, extend=out.extend, engine_waits=out.engine_waits,
                                 counts=out.counts, counts_at=out.counts_at))
        return plans

    def admit(self, plan: GenPlan, new: SeqBatch, now: float) -> GenPlan:
        """``plan`` with ``new`` sequences joining its engine's queue at ``now`` (continuous batching:
        NeMo RL's async vLLM engine takes a round the moment the age bound opens it). The engine run
        the plan is a stretch of goes on with them added at that engine time (from its state kept
        before then, RolloutOutcome.extend; else run again from its start): what ran before is the
        same run (an engine's events do not depend on a later add), so the plan's sequences keep
        their KV and their history, and the new ones queue behind them. Nothing is committed."""
        root, rows = plan.engine_run()
        at = plan.root_offset + (now - plan.t0)
        seg_new = new.target_len - new.done_len
        grown_seqs = SeqBatch.concat(root.seqs, new)
        prompts = np.concatenate([root.prompts, new.prompt_len + new.done_len])
        segs = np.concatenate([root.segs, seg_new])
        arrivals = np.concatenate([root.arrivals, np.full(len(new), at)])
        groups = prefix_groups(grown_seqs)
        if root.extend is not None:   # the run continued from its state kept before `at`
            out = root.extend(prompts[len(root.seqs):], seg_new, groups[len(root.seqs):], at)
        else:                         # the run again from its start, the new sequences arriving at `at`
            out = self.costs.rollout(prompts, segs, plan.ranks, groups, arrivals=arrivals)
        grown = RootRun(grown_seqs, prompts, segs, groups, arrivals, float(out.flops), out.extend)
        rows = np.concatenate([rows, np.arange(len(root.seqs), len(grown_seqs))])
        offset = plan.root_offset
        # tokens each row had before this plan's t0 in the run (a continuation's cut), none for the new
        before = np.concatenate([plan.seqs.done_len - root.seqs.done_len[rows[:len(plan.seqs)]],
                                 np.zeros(len(new), dtype=plan.seqs.done_len.dtype)]).astype(float)
        finish = np.asarray(out.finish_s, float)[rows] - offset
        start_all = np.zeros(len(grown_seqs)) if out.start_s is None else np.asarray(out.start_s, float)
        progress = None
        if out.progress_at is not None:
            base, admitted_s = out.progress_at, now - plan.t0

            def progress(s: float) -> np.ndarray:
                # a plan is cut (the one caller) at the present, never before its last admission, which
                # the continued run starts from (the plan's own run before it is not kept)
                if s < admitted_s - TIME_TOL_S:
                    raise ValueError(f"progress at {s} s asked of a plan that took sequences at {admitted_s} s")
                return np.maximum(base(s + offset)[rows] - before, 0.0)
        return GenPlan(SeqBatch.concat(plan.seqs, new), np.concatenate([plan.seg, seg_new]),
                       np.concatenate([plan.remaining, seg_new]), finish, np.maximum(start_all[rows] - offset, 0.0),
                       plan.flops + (grown.flops - root.flops), plan.t0, plan.version, plan.ranks, progress,
                       stored_through=plan.stored_through, streamed=plan.streamed,
                       returns_together=plan.returns_together, root=grown, root_rows=rows, root_offset=offset,
                       extend=out.extend, counts=out.counts, counts_at=out.counts_at,
                       prefill=np.concatenate([plan.prefill_tokens(), new.prompt_len + new.done_len]))

    def store_finished_by(self, plan: GenPlan, upto_s: float) -> None:
        """Store the plan's sequences that finished by ``plan.t0 + upto_s`` and are not stored yet,
        while the plan runs on: an engine that hands each trajectory out as it finishes (NeMo RL's
        async engine; segments.SegmentedInstance._streams), so the trainer can take them before
        the plan ends.
        Its commit stores the rest; the plan's tokens and FLOPs are counted there, once."""
        upto_s += TIME_TOL_S   # a finish at this very instant (t0 + finish rounds either way) is in
        if upto_s <= plan.stored_through:
            return
        ids = np.flatnonzero((plan.seg >= plan.remaining) & (plan.finish <= upto_s) & (plan.finish > plan.stored_through))
        if len(ids):
            self._store_rows(plan.seqs, ids, None, plan.seg[ids].astype(float), plan.finish[ids], [(plan, len(ids), upto_s)])
        plan.stored_through = upto_s

    def generate(self, seqs: SeqBatch, t0: float, version: int, ranks: Ranks) -> tuple[float, SeqBatch, float]:
        """Plan and commit in one go; returns (busy end, carried sequences, generated tokens)."""
        return self.commit(self.plan(seqs, t0, version, ranks))

    def commit(self, plan: GenPlan, stop_s: float | None = None) -> tuple[float, SeqBatch, float]:
        """Completed samples go to the store; sequences still running at t0 + stop_s (or cut by the
        length budget) are carried with their progress. Returns (busy end, carried, generated tokens)."""
        return self.commit_many([plan], stop_s)[0]

    def commit_many(self, plans: list[GenPlan], stop_s: float | None = None) -> list[tuple[float, SeqBatch, float]]:
        """commit(plan, stop_s) of each plan in order, their finished samples stored in one write
        (rows in plan order, as the commits one by one leave them)."""
        live = [plan for plan in plans if len(plan.seqs)]
        joined = self._commit_joined(live, stop_s) if len(live) > 1 and self.sched.overprovision <= 0 \
            and _joinable(live) else None
        if joined is not None:
            by_plan = iter(joined)
            results = [next(by_plan) if len(plan.seqs) else (plan.t0, SeqBatch.empty(), 0.0) for plan in plans]
        else:
            results, stored = [], []
            for plan in plans:
                result, rows = self._commit_one(plan, stop_s)
                results.append(result)
                if rows is not None:
                    stored.append(rows)
            self._store_finished(stored)
        for plan, (end, _, _) in zip(plans, results, strict=True):
            self._hold_engine_waits(plan, end)
        return results

    def _hold_engine_waits(self, plan: GenPlan, end: float) -> None:
        """The committed plan's engine waits up to its end (multi-turn: RolloutOutcome.engine_waits):
        its instances' devices idle then, with the wait's cause, whatever state the schedule records
        over them (des.Timeline.hold_idle)."""
        for ranks, waits, cause in plan.engine_waits:
            for start, stop in waits.tolist():
                if plan.t0 + start < end:
                    for first, count in contiguous_runs(list(ranks)):
                        self.ctx.timeline.hold_idle(first, count, plan.t0 + start, min(plan.t0 + stop, end), cause)

    def _commit_joined(self, plans: list[GenPlan], stop_s: float | None) -> list[tuple[float, SeqBatch, float]] | None:
        """commit_many of several non-empty plans (no over-provisioning, _joinable): the element-wise
        work on their arrays joined end to end, the per-plan sums and totals in plan order (each on
        its plan's own slice: the floats of _commit_one). None, having changed nothing, when a cut
        plan's tokens are not floats (joined, their dtype would change)."""
        totals = self.ctx.totals
        bounds = np.cumsum([0] + [len(plan.seqs) for plan in plans]).tolist()
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))
        finish = np.concatenate([plan.finish for plan in plans])
        maxima = np.maximum.reduceat(finish, bounds[:-1]).tolist()
        ends = [stop_s if stop_s is not None and stop_s < top else top for top in maxima]
        cut = finish > stop_s if any(end < top for end, top in zip(ends, maxima, strict=True)) else None
        held = finish if cut is None else np.minimum(finish, stop_s)     # min(finish, end) of every plan
        seg = np.concatenate([plan.seg for plan in plans])
        whole = seg.astype(float)
        parts = [whole[a:b] if end >= top else self.tokens_by(plan, cut[a:b], end)
                 for plan, (a, b), end, top in zip(plans, spans, ends, maxima, strict=True)]
        if any(part.dtype != whole.dtype for part in parts):
            return None
        gen_tokens = whole if cut is None else np.concatenate(parts)
        sums = []
        for plan, (a, b), end, top, part in zip(plans, spans, ends, maxima, parts, strict=True):
            self._charge(plan, part, cut[a:b] if end < top else None, end)
            self._account_slots(held[a:b], end)
            sums.append(float(part.sum()))
            totals.generated_tokens += sums[-1]
        finished = seg >= np.concatenate([plan.remaining for plan in plans])
        if cut is not None:
            finished &= ~cut
        seqs = SeqBatch.merge([plan.seqs for plan in plans])
        stored_already = np.concatenate([plan.finish <= plan.stored_through for plan in plans])
        rows, keep = np.flatnonzero(finished & ~stored_already), np.flatnonzero(~finished)
        carried = seqs.take(keep)
        versions = np.repeat(np.array([plan.version for plan in plans], carried.first_version.dtype), np.diff(bounds))
        carried.first_version = np.where(carried.done_len > 0, carried.first_version, versions[keep])
        carried.done_len = carried.done_len + gen_tokens[keep].astype(int)
        kept_at = np.searchsorted(keep, bounds).tolist()
        columns = carried.fields()
        carries = [SeqBatch(*(column[a:b] for column in columns)) for a, b in zip(kept_at[:-1], kept_at[1:], strict=True)]
        counts = np.diff(np.searchsorted(rows, bounds)).tolist()
        stored = [(plan, count, end) for plan, count, end in zip(plans, counts, ends, strict=True) if count]
        if stored:
            self._store_rows(seqs, rows, None, gen_tokens[rows], finish[rows], stored)
        return [(plan.t0 + end, carry, total) for plan, end, carry, total in zip(plans, ends, carries, sums, strict=True)]

    def _commit_one(self, plan: GenPlan, stop_s: float | None) -> tuple[tuple[float, SeqBatch, float], tuple | None]:
        """commit() of one plan but for the store: its result, and the rows to store (plan,
        finished ids, aborted, tokens generated, end) or None."""
        seqs, totals = plan.seqs, self.ctx.totals
        if not len(seqs):
            return (plan.t0, SeqBatch.empty(), 0.0), None
        end, aborted = self._overprovision_cut(plan)
        cut = aborted          # None: no sequence cut (none aborted, none interrupted)
        if stop_s is not None and stop_s < end:
            end = stop_s
            cut = plan.finish > end if aborted is None else (plan.finish > end) | aborted
            self._account_slots(np.minimum(plan.finish, end), end)
        else:                  # every finish is at or before the end: min(finish, end) is finish
            self._account_slots(plan.finish if aborted is None else np.minimum(plan.finish, end), end)
        gen_tokens = self.tokens_by(plan, cut, end)
        self._charge(plan, gen_tokens, cut, end)
        finished = plan.seg >= plan.remaining
        if cut is not None:
            finished = (finished & ~cut) | aborted if aborted is not None else finished & ~cut
        if aborted is None:
            aborted = np.zeros(len(seqs), bool)
        ids = np.flatnonzero(finished & ~(plan.finish <= plan.stored_through))   # stored as they finished: not again
        keep = np.flatnonzero(~finished)
        carry = seqs.take(keep)
        carry.first_version = np.where(carry.done_len > 0, carry.first_version, plan.version)
        carry.done_len = carry.done_len + gen_tokens[keep].astype(int)
        totals.generated_tokens += float(gen_tokens.sum())
        rows = (plan, ids, aborted, gen_tokens, end) if len(ids) else None
        return (plan.t0 + end, carry, float(gen_tokens.sum())), rows

    def plan_end_s(self, plan: GenPlan) -> float:
        """Seconds from the plan's t0 to where its commit ends it uncut: its last finish, or with
        over-provisioning the finish of the last sequence it keeps (the aborted ones free the engine)."""
        return self._overprovision_cut(plan)[0] if len(plan.seqs) else 0.0

    def _overprovision_cut(self, plan: GenPlan) -> tuple[float, np.ndarray | None]:
        """Over-provisioning keeps the fastest 1/(1+x) of the instance's sequences and aborts the rest
        (the aborted mask; None when it aborts none)."""
        end = float(plan.finish.max())
        aborted = None
        if self.sched.overprovision > 0:
            target = math.ceil(len(plan.seqs) / (1 + self.sched.overprovision))
            aborted = np.zeros(len(plan.seqs), bool)
            if target < len(plan.seqs):
                end = float(np.sort(plan.finish, kind="stable")[target - 1])
                aborted = plan.finish > end
        return end, aborted

    @staticmethod
    def tokens_by(plan: GenPlan, cut: np.ndarray | None, end: float) -> np.ndarray:
        """Tokens each sequence generated this segment: all of it, or for a cut one its progress at
        ``end`` - the engine's own interrupt when the plan kept its run, else linear in time.
        ``cut``: the cut mask, None when none is cut."""
        if cut is None or not cut.any():
            return plan.seg.astype(float)
        if plan.progress_at is not None:
            return np.where(cut, np.minimum(plan.progress_at(end), plan.seg), plan.seg)
        span = np.maximum(plan.finish - plan.start, 1e-12)
        progress = np.clip((end - plan.start) / span, 0.0, 1.0)
        return np.where(cut, np.floor(plan.seg * progress), plan.seg)

    def _store_finished(self, stored: list[tuple]) -> None:
        """Finished samples of several plans (plan, ids, aborted, tokens generated, end) into the
        store in one add, in plan order; each plan's payloads into DistQueue when their rewards are
        ready (padded per plan, as written one plan at a time). Element-wise arithmetic on the
        joined rows: the values of one add per plan."""
        if not stored:
            return
        if len(stored) == 1:
            plan, ids, aborted, gen_tokens, end = stored[0]
            seqs, rows, aborted, gen_tokens, finish = plan.seqs, ids, aborted[ids], gen_tokens[ids], plan.finish[ids]
        else:
            offsets = np.cumsum([0] + [len(plan.seqs) for plan, _, _, _, _ in stored[:-1]])
            rows = np.concatenate([ids + off for (_, ids, _, _, _), off in zip(stored, offsets.tolist(), strict=True)])
            seqs = SeqBatch.merge([plan.seqs for plan, _, _, _, _ in stored])
            aborted, gen_tokens = (np.concatenate([s[j] for s in stored])[rows] for j in (2, 3))
            finish = np.concatenate([plan.finish for plan, _, _, _, _ in stored])[rows]
        self._store_rows(seqs, rows, aborted, gen_tokens, finish,
                         [(plan, len(ids), end) for plan, ids, _, _, end in stored])

    def _store_rows(self, seqs: SeqBatch, rows: np.ndarray, aborted: np.ndarray | None, gen_tokens: np.ndarray,
                    finish: np.ndarray, stored: list[tuple[GenPlan, int, float]]) -> None:
        """Rows ``rows`` of ``seqs`` (with their aborted mask, None: none aborted, their tokens
        generated and finish times) into the store and DistQueue; ``stored``: (plan, rows, end) of
        each plan they come from, in order."""
        ctx = self.ctx
        counts = [count for _, count, _ in stored]
        ends = np.repeat([end for _, _, end in stored], counts)
        t0s = np.repeat([plan.t0 for plan, _, _ in stored], counts)
        versions = np.repeat([plan.version for plan, _, _ in stored], counts)
        reason = seqs.drop_reason[rows]
        if aborted is not None:
            reason[aborted] = "overprovision"
        finish = t0s + np.minimum(finish, ends)
        # handed out together at the plan's end (or cut): a plan committed there (returns_together) or
        # an engine call that returns a batch (the kind's hand-over, reward.handover: batch); a
        # streaming rollout's each at its finish
        batch = ctx.workload.reward.handover_of(ctx.sched) == "batch"
        together = np.repeat([batch or plan.returns_together for plan, _, _ in stored], counts)
        returned = np.where(together, t0s + ends, finish)
        prompt_len, response_len, done_len = seqs.prompt_len[rows], seqs.target_len[rows], seqs.done_len[rows]
        resumed = done_len > 0
        scored = np.maximum(self._rewarded(finish, returned, stored, counts, prompt_len, response_len), returned)
        ready = teacher_scored(ctx, scored, prompt_len, response_len)
        instances = [int(plan.ranks[0]) if len(plan.ranks) else -1 for plan, _, _ in stored]
        ctx.store.add(round_=seqs.round[rows], group=seqs.group[rows], prompt_len=prompt_len,
                      response_len=response_len, generated_tokens=done_len + gen_tokens,
                      version=versions, first_version=np.where(resumed, seqs.first_version[rows], versions),
                      start=t0s, finish=finish, returned=returned, scored=scored, ready=ready, dropped=reason != "",
                      drop_reason=reason, instance=np.repeat(instances, counts))
        lens = prompt_len + response_len
        bounds = np.cumsum([0] + counts).tolist()
        # rewards scored during the forwards: the samples go to the trainer as generated, not as scored
        written = returned if self.sched.reward_during_forwards else ready
        ctx.queue.write_many([(with_teacher_payload(ctx, payload_bytes_each(lens[a:b], self.sched.distqueue,
                                                                        pad_len=ctx.pad_len), lens[a:b]), written[a:b])
                              for a, b in zip(bounds[:-1], bounds[1:], strict=True)])

    def _rewarded(self, finish: np.ndarray, returned: np.ndarray, stored: list[tuple[GenPlan, int, float]],
                  counts: list[int], prompt_len: np.ndarray, response_len: np.ndarray) -> np.ndarray:
        """When each stored row's reward is ready: a served reward model's as each is ``returned``
        (served.served_scored); a rule reward's by rewards.rule_rewards_ready. On the job's
        shared pool (reward.workers) the samples stored together (a synchronous round: every
        instance's) are one hand-over; on the instances' own workers (workers_per_device) each
        plan's samples are its instance's. A batch is handed over where the engine returns it (a
        plan's end, or a cut); with handover sample each sample at its finish (an engine that
        returns them together holds them to its end: the caller's max with the return time)."""
        ctx = self.ctx
        if ctx.served_reward:
            return served_scored(ctx, "reward_model", returned, prompt_len, response_len)
        if not ctx.rule_reward:
            return finish.copy()
        handover = ctx.workload.reward.handover_of(ctx.sched)
        if ctx.shared_reward:
            returned = max(plan.t0 + end for plan, _, end in stored)
            ready = rule_rewards_ready(ctx, finish, stored[0][0].ranks, handover, prompt_len, response_len, returned)
        else:
            ready = np.empty(len(finish))
            bounds = np.cumsum([0] + counts).tolist()
            for (plan, _, end), lo, hi in zip(stored, bounds[:-1], bounds[1:], strict=True):
                ready[lo:hi] = rule_rewards_ready(ctx, finish[lo:hi], plan.ranks, handover, prompt_len[lo:hi],
                                                  response_len[lo:hi], plan.t0 + end)
        return ready

    def _charge(self, plan: GenPlan, generated: np.ndarray, cut: np.ndarray | None, end: float) -> None:
        """Add what the plan's engines did through ``end`` (s from its t0) beside their time
        (RolloutOutcome.counts; nothing where the costs do not count) to the run's rollout totals, the
        resumed sequences' re-prefill among them (its engine took them as prompts), and the FLOPs
        they computed through the commit leaving ``generated`` tokens, ``cut`` those stopped, to the
        run's generation FLOPs (generation_flops.charged_flops)."""
        counts = plan_counts(plan, end)
        totals = self.ctx.totals
        model, hardware = charged_flops(plan, generated, cut, counts, self.costs.rollout_flops_per_token)
        totals.gen_flops += model
        totals.gen_hardware_flops += hardware
        if counts is None:
            return
        counts[RESUME_KEY] = counts.get(RESUME_KEY, 0) + resumed_prefill(plan, generated, cut)
        for key, value in counts.items():
            totals.rollout[key] = totals.rollout.get(key, 0) + value

    def _account_slots(self, finish: np.ndarray, end: float) -> None:
        """Occupied batch slots of one instance over [0, end]: FIFO admission keeps
        min(unfinished, slots) sequences running (the engine admits as soon as a slot frees), so
        the occupancy falls once the queue drains - the long tail runs at low batch."""
        if end <= 0 or not len(finish):
            return
        slots = self.ctx.totals.rollout
        cap = max(1, int(self.costs.instance_max_seqs))
        n = len(finish)
        edges = np.empty(n + 2)                                # 0, the finishes in order, end
        edges[0], edges[1:-1], edges[-1] = 0.0, finish, end
        edges[1:-1].sort()
        duration = edges[1:] - edges[:-1]                      # interval j: after j finishes
        running = np.minimum(np.arange(n, -1, -1), cap)        # min(n - j, cap): non-increasing in j
        slots["instance_s"] += end
        slots["slot_s"] += float(np.dot(duration, running)) / cap
        slots["low_batch_s"] += float(duration[_first_below(n, cap, self.sched.low_batch_share * cap):].sum())


def plan_counts(plan: GenPlan, end: float) -> dict[str, int] | None:
    """The engine counts of ``plan`` through ``end`` seconds from its t0: its run's whole counts
    where it is that run uncut; else the run's counts at the plan's end less those at its start
    (counts_at, in the root run's seconds: a cut plan, a continuation, one that took sequences)."""
    if plan.counts is None:
        return None
    if plan.counts_at is None:
        # a run kept without copies is never cut nor continued (llm_costs.keeps_engine_copies names
        # every cut), and FakeCosts counts 0: the run's counts, once, by the plan that started it
        return dict(plan.counts) if plan.root_offset <= 0 else dict.fromkeys(plan.counts, 0)
    if plan.root is None and end >= plan.end_s:
        return dict(plan.counts)
    upto = plan.counts_at(plan.root_offset + end)
    if plan.root_offset <= 0:
        return upto
    since = plan.counts_at(plan.root_offset)
    return {key: upto[key] - since[key] for key in upto}


def _first_below(n: int, cap: int, threshold: float) -> int:
    """The first interval j (0..n; n + 1 when none) whose occupancy min(n - j, cap) is below
    ``threshold``: the occupancy never rises with j, so the low-batch intervals are j and on.
    Compared as the element-wise test would (an int against a float, exactly)."""
    j = max(0, min(n + 1, math.floor(n - threshold) + 1 if threshold <= cap else 0))
    while j > 0 and min(n - (j - 1), cap) < threshold:
        j -= 1
    while j <= n and not min(n - j, cap) < threshold:
        j += 1
    return j


_SEQ_DTYPES = tuple(column.dtype for column in SeqBatch.empty().fields())


def _joinable(plans: list[GenPlan]) -> bool:
    """Plans whose arrays join without a dtype change (sequences as SeqBatch.empty()'s, float
    finish times): their joined rows, carries and store columns are those of one plan at a time."""
    for plan in plans:
        seqs = plan.seqs
        if plan.finish.dtype != np.float64 or (seqs.round.dtype, seqs.group.dtype, seqs.prompt_len.dtype,
                                               seqs.target_len.dtype, seqs.done_len.dtype, seqs.first_version.dtype,
                                               seqs.drop_reason.dtype) != _SEQ_DTYPES:
            return False
    return True
