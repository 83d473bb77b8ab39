"""AReaL (kind ``areal``): fully asynchronous generation on split pools (frameworks.md, "AReaL").

- Generation never stops: an instance's plan admits every round the bound allows (its share of
  each), so prompts of the next round join while the previous round's tail still runs.
- ``max_head_offpolicyness`` (eta): trainer step k consumes a trajectory iff
  k - first_version <= eta (its oldest token bounds its lag; older pending ones are dropped as
  ``stale``), and round r (the trajectories meant for step r) may not start before the weights
  reach r - eta (the ``VersionGate``): no prompt starts whose weights would already be too old.
- The trainer trains, sends the weights and goes on (it never waits for the rollout side).
- ``interruptible: true``: at every published version each instance cuts its in-flight
  generations, loads the weights and resubmits them first, with prompt + partial response
  re-prefilled (frameworks.md: "a sequence that resumes after a sync or a preemption re-prefills
  its whole prefix"; it says nothing AReaL-specific about the KV, so the re-prefill is modelled).
  ``false``: an instance loads new weights once its in-flight plan has drained.
"""
from __future__ import annotations

from ...scenario import ArealSchedule
from ..timeline import clock_over, clock_parts
from .batches import SeqBatch
from .context import Context
from .disaggregated import SplitPoolRun
from .registry import SchedulePolicy, register
from .segments import SegmentedInstance, check_cuttable


class ArealInstance(SegmentedInstance):
    """One rollout server: admits every open round; interrupted at a new version when interruptible."""

    def _admit(self) -> SeqBatch:
        run, gate = self.run_, self.run_.gate
        parts = []
        while gate.open(self.round):
            r = self.round
            parts.append(run.ctx.draws.share(r, self.index, run.n_inst))
            run.planned[r] = run.planned.get(r, 0) + 1
            self.round += 1
        return SeqBatch.merge(parts)

    def _cut_events(self) -> list:
        return [self.run_.gate.version_changed] if self.run_.ctx.sched.interruptible else []

    def _streams(self) -> bool:
        """Each trajectory leaves its rollout worker as it finishes. Streamed when interruptible: a
        round opens only at a new version, where the plan is cut and planned again with it; without
        interrupts an open round waits for the plan's end, so the trainer waits for that end too."""
        return self.run_.ctx.sched.interruptible and super()._streams()

    def _should_cut(self) -> bool:
        return self.run_.ctx.sched.interruptible and self.run_.gate.version > self.version


class ArealRun(SplitPoolRun):
    def __init__(self, ctx: Context):
        super().__init__(ctx)
        check_cuttable(ctx, ctx.sched.interruptible, "schedule.interruptible")
        ctx.trainer.age_column = "first_version"
        self.generating: set[int] = set()

    def note_idle(self) -> None:
        """Nothing waits for the rollout side to drain here."""

    def spawn_instances(self, round_: int, version: int, t: float | None, resume_s: float = 0.0) -> None:
        self.instances, self.instance_clocks, self.streaming = [], [], []
        for i in range(self.n_inst):
            clock = clock_over(self.ctx.timeline, "rollout", self.roll[i * self.d:(i + 1) * self.d], t)
            self.ctx.clocks.extend(clock_parts(clock))
            self.ctx.start_clock(clock)
            self.instance_clocks.append(clock)
            self.instances.append(self.env.process(ArealInstance(self, i, clock, round_, version, resume_s).process()))


def run(ctx: Context) -> float:
    return ArealRun(ctx).run()


POLICY = register(SchedulePolicy(
    ArealSchedule, run, "AReaL: generation never stops; max_head_offpolicyness bounds a trajectory's oldest "
    "token; interruptible generation re-prefills after each weight update"))
