"""Device failures inside a schedule run (schedule.failures, docs/schedules.md "Failures").

A failure at t_f during step k: the work since the step's start (or since the last checkpoint,
``recovery.lose_to``) is lost - its timeline records become state ``lost`` (cause ``failure``),
its samples are removed and its iterations undone; the failed devices are ``failed`` from t_f to
the end; the survivors re-plan (state ``replan``, the planner's modelled cost) and restart
(state ``restart``, ``recovery.restart_s``), then the lost steps run again on fewer devices.

The planner sits above this layer, so it comes in through a ``Replanner`` (api.py passes
simulator.autoplan.PlannerReplanner); ``SameLayoutReplanner`` (no planner, zero cost) serves the
closed-form tests.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import RlsimError
from ..timeline import GroupClock, MultiClock, contiguous_runs
from .batches import SeqBatch
from .context import Context, OutOfRun

FAILURE_STATE_CAUSE = {"lost": "failure", "replan": "failure", "restart": "failure", "failed": "failure"}


@dataclass(frozen=True)
class ReplanOutcome:
    survivors: list[int]                 # ranks the run continues on
    train_layout: dict[str, Any] | None  # new training layout (None: keep the current one)
    planning_cost_s: float


class Replanner(Protocol):
    def ranks_of(self, spec: str) -> list[int]: ...
    # accept(layout): raises RlsimError for a training layout the pool cannot run (a colocated pool's
    # rollout phase must fit beside the resident training state; RefusedBeforeTiming where no step was
    # timed yet), else the train_step_cost queries it timed (0 or None: none); the planner skips such
    # layouts and charges the checks, each query timed as a timed evaluation.
    # usable(n, layout): the devices the pool runs on of n survivors under a candidate training
    # layout (whole rollout instances, folded experts)
    def on_failure(self, pool_ranks: list[int], failed: list[int], current: dict[str, Any],
                   accept: Callable[[dict[str, Any]], int | None] | None = None,
                   usable: Callable[[int, dict[str, Any] | None], int] | None = None) -> ReplanOutcome: ...
    # split pools: the rollout pool keeps its instance layout (TP, EP); the answer's survivors and cost count
    def on_rollout_failure(self, pool_ranks: list[int], failed: list[int],
                           current: dict[str, Any]) -> ReplanOutcome: ...


@dataclass
class SameLayoutReplanner:
    """No planner: survivors = the pool less the failed ranks (and their whole nodes when
    ``devices_per_node`` is given), same layout, ``cost_s`` of planning."""
    devices_per_node: int = 0
    cost_s: float = 0.0

    def ranks_of(self, spec: str) -> list[int]:
        text = str(spec)
        if text.startswith("node:") and self.devices_per_node:
            i = int(text.split(":")[1])
            return list(range(i * self.devices_per_node, (i + 1) * self.devices_per_node))
        if text.startswith("devices:"):
            a, _, b = text.split(":")[1].partition("-")
            return list(range(int(a), int(b or a) + 1))
        return [int(x) for x in text.split(",")]

    def on_failure(self, pool_ranks, failed, current, accept=None, usable=None) -> ReplanOutcome:
        bad = set(failed)
        if self.devices_per_node:
            nodes = {r // self.devices_per_node for r in failed}
            bad |= {r for r in pool_ranks if r // self.devices_per_node in nodes}
        return ReplanOutcome([r for r in pool_ranks if r not in bad], None, self.cost_s)

    def on_rollout_failure(self, pool_ranks, failed, current) -> ReplanOutcome:
        return self.on_failure(pool_ranks, failed, current)


@dataclass
class Snapshot:
    """The run's state at a step boundary: what a failure rolls back to."""
    t: float
    iteration: int
    rows: int
    samples: int
    iterations: int
    totals: Any = None         # a copy of the run's RunTotals
    extra: Any = None
    store: Any = None          # a copy of the SampleStore (split pools: restores consumed samples too)


def check_supported(ctx: Context, supported: bool) -> None:
    """schedule.failures only where the schedule's policy models them (registry: supports_failures)."""
    sched = ctx.sched
    if not sched.failures:
        return
    if not supported:
        raise RlsimError(f"schedule.failures is modelled for colocated placements (colocated, stalesync) and "
                         f"synchronous disaggregated runs, not kind {sched.kind!r} ({sched.effective_placement} "
                         f"placement, staleness {ctx.staleness})", source=ctx.scenario.source, field="schedule.failures",
                         fix="use schedule.kind: colocated, stalesync or disaggregated, or drop schedule.failures "
                             "(one-step-off / async / StaleSync on split pools are not modelled yet)")
    if sched.overprovision > 0:
        raise RlsimError("schedule.failures with overprovision is not modelled", source=ctx.scenario.source,
                         field="schedule.overprovision", fix="set overprovision: 0")


def snapshot(ctx: Context, k: int, extra: Any = None, *, store: bool = False) -> Snapshot:
    """``store``: keep a copy of the sample store (always when it retires rows: a roll-back cannot
    truncate into retired samples)."""
    store = store or ctx.store.keep_rows is not None
    return Snapshot(ctx.env.now, k, len(ctx.timeline.rows), ctx.store.n, len(ctx.iterations),
                    copy.deepcopy(ctx.totals), copy.deepcopy(extra), copy.deepcopy(ctx.store) if store else None)


def roll_back(ctx: Context, snap: Snapshot, t_fail: float) -> float:
    """Undo everything after ``snap`` and mark [snap.t, t_fail] lost. Returns the lost seconds."""
    rows = ctx.timeline.rows
    lost = []
    for row in rows[snap.rows:]:
        if row.start >= t_fail:
            continue
        lost.append(row._replace(state="lost", cause="failure", end=min(row.end, t_fail), label=row.state))
    ctx.timeline.rows = rows[:snap.rows] + lost
    _restore_store(ctx, snap)
    return _restore(ctx, snap, t_fail)


def _restore_store(ctx: Context, snap: Snapshot) -> None:
    """Samples back to the snapshot: its copy of the store when it kept one (a step that consumes or
    drops samples generated before it, as StaleSync's and split pools' steps do), else the samples
    generated since are removed."""
    if snap.store is not None:
        ctx.store = copy.deepcopy(snap.store)
    else:
        ctx.store.truncate(snap.samples)


def _restore(ctx: Context, snap: Snapshot, t_fail: float) -> float:
    """The part of a roll-back shared by both kinds: iterations and totals back to the snapshot,
    the lost seconds added up. Returns them (t_fail - snap.t)."""
    del ctx.iterations[snap.iterations:]
    ctx.totals = copy.deepcopy(snap.totals)
    ctx.lost_s += t_fail - snap.t
    return t_fail - snap.t


def resolve_events(ctx: Context, ranks: list[int], where: str) -> list[tuple[float, str, set[int]]]:
    """The scenario's failure events in time order, as (time, spec, failed ranks); an event that hits
    none of ``ranks`` (described by ``where`` in the error), or whose spec the re-planner cannot
    read, is a user error naming the entry (``schedule.failures.I.fail``, I its index as written)."""
    out = []
    down: set[int] = set()   # the ranks earlier entries took out
    for i, ev in sorted(enumerate(ctx.sched.failures), key=lambda e: e[1].at_s):
        if ctx.replanner is None:
            raise RlsimError("schedule.failures needs a re-planner", source=ctx.scenario.source,
                             field="schedule.failures", fix="run through simulator.simulate / rlsim run")
        try:
            failed = set(ctx.replanner.ranks_of(ev.fail))
        except RlsimError as exc:   # the group parser names its own key (`rlsim comm --group`)
            raise RlsimError(exc.message, source=ctx.scenario.source, field=f"schedule.failures.{i}.fail",
                             fix=exc.fix) from None
        if not failed & set(ranks):
            raise RlsimError(f"failure {ev.fail!r} hits no device of {where}",
                             source=ctx.scenario.source, field=f"schedule.failures.{i}.fail",
                             fix="name devices the run uses, e.g. node:0")
        if failed <= down:   # a failed device does not fail again (it would cost a second restart)
            raise RlsimError(f"failure {ev.fail!r} hits only devices an earlier entry already took out",
                             source=ctx.scenario.source, field=f"schedule.failures.{i}.fail",
                             fix="remove the entry, or name devices still running")
        down |= failed
        out.append((float(ev.at_s), ev.fail, failed))
    return out


def failure_field(ctx: Context, spec: str) -> str:
    """The dotted key of the schedule.failures entry failing ``spec`` now (``schedule.failures.I.fail``,
    I its index as written): of several entries with that spec, the one whose at_s is nearest the
    current time (a failure is handled at its at_s)."""
    entries = [(i, ev) for i, ev in enumerate(ctx.sched.failures) if ev.fail == spec]
    if not entries:
        return "schedule.failures"
    now = float(ctx.env.now)
    i, _ = min(entries, key=lambda e: (abs(float(e[1].at_s) - now), e[0]))
    return f"schedule.failures.{i}.fail"


def roll_back_pools(ctx: Context, snap: Snapshot, t_fail: float, pools: set[str]) -> float:
    """Split pools: undo what ``pools`` did after ``snap`` (their records from snap.t to t_fail become
    ``lost``; records of other pools stay), restore the sample store copy (or truncate), the
    iterations and the counters. Returns the lost seconds (t_fail - snap.t)."""
    kept = []
    for row in ctx.timeline.rows[snap.rows:]:
        if row.pool not in pools or row.end <= snap.t:
            kept.append(row)
            continue
        if row.start >= t_fail:
            continue
        start = row.start
        if start < snap.t:      # recorded late (an idle gap closed at the snapshot's time): keep its head
            kept.append(row._replace(end=snap.t))
            start = snap.t
        kept.append(row._replace(state="lost", cause="failure", start=start, end=min(row.end, t_fail),
                                 label=row.state))
    ctx.timeline.rows = ctx.timeline.rows[:snap.rows] + kept
    _restore_store(ctx, snap)
    return _restore(ctx, snap, t_fail)


def survivor_clock(ctx: Context, pool: str, ranks: list[int], t: float) -> MultiClock:
    clock = MultiClock([GroupClock(ctx.timeline, pool, a, n, t) for a, n in contiguous_runs(ranks)])
    ctx.clocks.extend(clock.clocks)
    return clock


def mark_out(ctx: Context, pool: str, ranks: list[int], failed: set[int], t: float) -> None:
    """Ranks out of the run from t: failed ones in state ``failed``; healthy ones the re-plan left
    out (the rest of a failed node, or no layout fits) idle with cause ``placement``."""
    for a, n in contiguous_runs([r for r in ranks if r in failed]):
        ctx.out_of_run.append(OutOfRun(pool, a, n, t, "failed", "failure"))
    for a, n in contiguous_runs([r for r in ranks if r not in failed]):
        ctx.out_of_run.append(OutOfRun(pool, a, n, t, "idle", "placement"))


def redistribute(carries: list[SeqBatch], n_inst: int) -> list[SeqBatch]:
    return SeqBatch.merge(carries).deal(n_inst)


def replan_training(ctx: Context, pool_ranks: list[int], failed: set[int], usable: Callable[[int], int],
                    unit_text: str, spec: str) -> tuple[ReplanOutcome, list[int]]:
    """The one failure re-plan of a training pool: ask the re-planner for survivors and a layout the
    costs accept, adopt the layout, keep the largest usable prefix of the survivors (``usable``:
    device count -> devices the pool can use). RlsimError when nothing usable is left."""
    try:
        out = ctx.replanner.on_failure(list(pool_ranks), sorted(failed & set(pool_ranks)),
                                       ctx.costs.train_layout_of(pool_ranks), accept=ctx.costs.accept_train_layout,
                                       usable=usable)
    except RlsimError as exc:
        # the planner's replan_on_failure names the failed devices as its argument 'failed'; here they
        # are the failure entry's spec
        if exc.field != "failed":
            raise
        raise RlsimError(exc.message, source=ctx.scenario.source, field=failure_field(ctx, spec),
                         fix=exc.fix) from None
    if out.train_layout:
        ctx.costs.set_train_layout(out.train_layout)
    use = out.survivors[: usable(len(out.survivors))]
    if not use:
        raise RlsimError(f"no {unit_text} fits on the {len(out.survivors)} devices left after the failure of "
                         f"{spec}", source=ctx.scenario.source, field="schedule.failures",
                         fix="fail fewer devices or give the pool more devices")
    return out, use
