"""Rollout instances whose generation can be cut at a weight update (NeMo RL in-flight weight
updates), for split-pool runs built on ``SplitPoolRun``.

An instance plans its sequences (``Generation.plan``) and commits them when the plan ends; a weight
update in between cuts the plan at the update time (``Generation.commit(stop_s)``: what finished is
stored with the old weights, the rest carries its tokens so far). What happens to the cut
sequences is the kind's: NeMo's engine keeps their KV and continues after the weight load
(``continuation``: the same engine run, shifted by the load time, no re-prefill), or, with
recompute_kv_after_update, re-plans them with their prefix re-prefilled (``Generation.plan`` of the
carried sequences). AReaL's interrupted requests are its Rollouter's (rl/schedules/areal.py).
"""
from __future__ import annotations

import numpy as np

from ...errors import RlsimError
from .batches import GenPlan, SeqBatch
from .disaggregated import RolloutInstance, SplitPoolRun
from .generation import Generation
from .staleness import TIME_TOL_S


def continuation(plan: GenPlan, carry: SeqBatch, stop_rel: float, t0: float, version: int) -> GenPlan:
    """The rest of ``plan`` after a cut at ``plan.t0 + stop_rel`` as a plan from ``t0`` under ``version``:
    every unfinished sequence keeps its KV and its place in the engine's batch, so its remaining
    tokens finish at the same engine time as before, ``t0 - (plan.t0 + stop_rel)`` later (the
    pause of the weight load). ``carry`` = the sequences ``commit(plan, stop_rel)`` carried."""
    keep = np.flatnonzero(plan.finish > stop_rel)     # what commit carried (no length budget, no overprovision)
    gen = (carry.done_len - plan.seqs.done_len[keep]).astype(float)
    progress = None
    if plan.progress_at is not None:
        base = plan.progress_at

        def progress(s: float) -> np.ndarray:
            return np.maximum(base(s + stop_rel)[keep] - gen, 0.0)
    root, rows = plan.engine_run()   # the run goes on: a later admission (Generation.admit) re-runs it
    seg = plan.seg[keep] - gen.astype(int)
    # a sequence that produced a token before the cut keeps its KV: nothing to prefill again
    prefill = np.where(gen > 0, 0, plan.prefill_tokens()[keep])
    return GenPlan(carry, seg, plan.remaining[keep] - gen.astype(int), plan.finish[keep] - stop_rel,
                   np.maximum(plan.start[keep] - stop_rel, 0.0), _rest_flops(plan, prefill, seg), t0, version,
                   plan.ranks, progress, streamed=plan.streamed, returns_together=plan.returns_together,
                   root=root, root_rows=rows[keep], root_offset=plan.root_offset + stop_rel, extend=root.extend,
                   counts=plan.counts, counts_at=plan.counts_at, prefill=prefill)


def _rest_flops(plan: GenPlan, prefill: np.ndarray, seg: np.ndarray) -> float:
    """The FLOPs of a cut plan's rest (its continuation's ``prefill`` and ``seg`` tokens) at the plan's
    own FLOPs per token computed, as GenPlan.flops_through charged the cut plan its part: the two
    together are the plan's FLOPs."""
    planned = float(plan.prefill_tokens().sum()) + float(plan.seg.sum())
    return plan.flops * ((float(prefill.sum()) + float(seg.sum())) / planned) if planned > 0 else 0.0


def check_cuttable(ctx, cuts: bool, knob: str) -> None:
    """A cut plan's carry is recomputed from finish times: over-provisioning's own cut is not modelled with it."""
    if cuts and ctx.sched.overprovision > 0:
        raise RlsimError(f"schedule.overprovision is not modelled together with {knob}", source=ctx.scenario.source,
                         field="schedule.overprovision", fix=f"set schedule.overprovision: 0 or {knob}: false")


class SegmentedInstance(RolloutInstance):
    """A rollout instance that generates in plans that a weight update may cut. Subclasses say which
    rounds a plan admits (``_admit``) and what a cut does (the runner calls ``cut``)."""

    def __init__(self, run: SplitPoolRun, index: int, clock, round_: int, version: int, resume_s: float):
        super().__init__(run, index, clock, round_, version, resume_s)
        self.plan: GenPlan | None = None
        self.plan_round = round_
        self.wake = run.env.event()
        if self._streams():
            run.streaming.append(self)

    def _streams(self) -> bool:
        """Whether the engine hands each trajectory out as it finishes (the trainer may take it while
        the plan runs), rather than the plan's batch at its end. Not when the reward workers take a
        batch at a time (reward.handover: batch): that batch is the plan's."""
        ctx = self.run_.ctx
        return ctx.workload.reward.handover_of(ctx.sched) != "batch"

    def store_finished(self, now: float) -> None:
        """Put what the running plan finished by ``now`` in the store (streaming engines)."""
        if self.plan is not None:
            self.run_.ctx.gen.store_finished_by(self.plan, now - self.plan.t0)

    def unstored_finishes(self, round_: int | None = None) -> np.ndarray:
        """When the running plan's sequences not in the store yet will finish (absolute seconds);
        ``round_``: those of that round only."""
        plan = self.plan
        if plan is None:
            return np.zeros(0)
        left = (plan.seg >= plan.remaining) & (plan.finish > plan.stored_through)
        if round_ is not None:
            left &= plan.seqs.round == round_
        return plan.t0 + plan.finish[left]

    def in_flight_at(self, t: float) -> list[tuple[SeqBatch, np.ndarray]]:
        """Its carry, and the running plan's sequences not in the store at ``t``: running, or done and
        not handed out yet (a plan returned whole at its end), with their tokens by then."""
        parts = super().in_flight_at(t)
        plan = self.plan
        if plan is None:
            return parts
        rows = np.flatnonzero(~((plan.seg >= plan.remaining) & (plan.finish <= plan.stored_through)))
        by = max(0.0, t - plan.t0)
        tokens = plan.seqs.done_len + Generation.tokens_by(plan, plan.finish > by, by)
        return [*parts, (plan.seqs.take(rows), tokens[rows])]

    def _admit(self) -> SeqBatch:
        """The new sequences of the next plan (advances ``self.round``)."""
        raise NotImplementedError

    def _may_start(self) -> bool:
        return True

    def _loop(self):
        run, ctx, env, gate = self.run_, self.run_.ctx, self.run_.env, self.run_.gate
        if ctx.start_s > 0 and self.resume_s == 0.0:
            yield env.timeout(ctx.start_s - env.now)
        while not gate.done:
            if not len(self.carry):
                yield from self._wait_gate()
            while not self._may_start() and not gate.done:
                yield gate.version_changed
            if gate.done:
                break
            r, clock = self.round, self.clock
            clock.idle("long_tail", min(max(ctx.round_end.get(r - 1, clock.cursor), clock.cursor), env.now), r)
            clock.idle("dependency", env.now, r)
            if gate.version > self.version:          # pick up the newest weights before generating
                clock.busy("sync", env.now + run.sync_s, r, label="weight_sync", cause="weight_sync")
                yield env.timeout(run.sync_s)
                self.version = gate.version
            self.plan_round = r
            seqs = SeqBatch.concat(self.carry, self._admit())
            self.carry = SeqBatch.empty()
            self.plan = ctx.gen.plan(seqs, env.now, self.version, clock.ranks)
            self.plan.streamed = self in run.streaming
            self.plan.returns_together = not self.plan.streamed     # committed at its end or a cut
            if self.plan.streamed:   # a trainer waiting with no plan running can now time its wake
                gate.data()
            run.generating.add(self.index)
            yield from self._until_plan_ends()
            run.generating.discard(self.index)
            run.note_idle()
            gate.data()

    def _until_plan_ends(self):
        env = self.run_.env
        while self.plan is not None:
            wake, end = self.wake, self.plan.t0 + self.run_.ctx.gen.plan_end_s(self.plan)
            yield env.any_of([env.timeout(max(0.0, end - env.now)), wake, *self._cut_events()])
            if self.plan is not None and env.now >= end - TIME_TOL_S:
                self.commit()
            elif self.plan is not None and self._should_cut():
                self.commit(stop_at=env.now)
            elif self.plan is not None:
                self._mid_plan()

    def _cut_events(self) -> list:
        """Events that wake the running plan (a cut, or what _mid_plan acts on)."""
        return []

    def _should_cut(self) -> bool:
        return False

    def _mid_plan(self) -> None:
        """Woken while the plan runs on, uncut (an engine that admits sequences mid-plan acts here)."""

    def commit(self, stop_at: float | None = None) -> SeqBatch:
        """Commit the plan (to its end, or cut at ``stop_at``); the plan is done, its carry kept."""
        plan, ctx, r = self.plan, self.run_.ctx, self.plan_round
        stop = None if stop_at is None else stop_at - plan.t0
        end, carry, _ = ctx.gen.commit(plan, stop_s=stop)
        self.clock.busy("generate", end, r, label=f"round {r}")
        ctx.add_stage_time("generate", (end - plan.t0) / self.run_.n_inst, span=(plan.t0, end))
        for q in range(r, self.round):
            ctx.round_end[q] = max(ctx.round_end.get(q, 0.0), end)
        self.plan, self.carry = None, carry
        self.wake.succeed()
        self.wake = self.run_.env.event()
        return carry
