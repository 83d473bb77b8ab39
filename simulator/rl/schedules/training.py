"""The training step every schedule shares: pick a batch within the staleness bound, fetch it
through DistQueue, run the forward stages (old log-prob, reference, reward, critic) and the
optimizer steps (PPO epochs x mini-batches)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..algorithms import FORWARD, SERVED_FORWARD, TRAIN
from ..distqueue import fetch_load
from ..timeline import Clock
from .served import served_batch
from .staleness import ceil_count, min_version
from .state import RunState

# The roles whose passes an aux pool runs (the actor's stay on the trainer's devices).
AUX_ROLES = ("reference", "reward", "critic")
NO_OLD_LOG_PROB = frozenset({"old_logprob"})   # trained on the rollout's own log-probs


def skipped_forwards(sched: Any) -> frozenset[str]:
    """The forward stages a step leaves out: the old log-prob pass without ``recompute_logprob``."""
    return frozenset() if sched.recompute_logprob else NO_OLD_LOG_PROB
AuxClocks = Clock | Mapping[str, Clock] | None


def role_clocks(main: Clock, aux: AuxClocks) -> tuple[dict[str, Clock], list[Clock]]:
    """Where each role's passes run: ``aux`` one clock for every aux role, or one per role (roles it
    leaves out, and the actor, on ``main``); and the distinct clocks, main first."""
    by_role = {} if aux is None else dict(aux) if isinstance(aux, Mapping) else {role: aux for role in AUX_ROLES}
    clocks = [main]
    for clock in by_role.values():
        if all(clock is not seen for seen in clocks):
            clocks.append(clock)
    return by_role, clocks


def _scored(responses: np.ndarray | None) -> dict[str, Any]:
    """The keyword a pass's cost takes its samples' response tokens by (none where not asked for)."""
    return {} if responses is None else {"scored": responses}


class TrainStep:
    def __init__(self, ctx: RunState):
        self.ctx = ctx
        self.costs, self.sched, self.workload = ctx.costs, ctx.sched, ctx.workload
        self.batch = ctx.batch_samples
        self.staleness, self.threshold = ctx.staleness, ctx.threshold
        # StaleSync starts a step on the threshold share (the tail joins the next batch); every other
        # policy trains on full batches.
        self.min_batch = ceil_count(self.threshold * self.batch) if self.sched.kind == "stalesync" else self.batch
        # The weights version a sample's age is measured from, for the step's choice and its reported
        # staleness_mean / staleness_max: "version" (the weights that finished it; every other kind)
        # or "first_version" (its oldest token: NeMo RL's max_trajectory_age_steps, AReaL's
        # version_stats sample_staleness_theta_max, where a trajectory takes new weights
        # mid-generation). The runner sets it.
        self.age_column = "version"
        # one-step-off schedule.round_batches: step k trains round k whole (verl one_step_off_policy)
        self.round_batches = self.sched.round_batches

    # ---- which samples ------------------------------------------------------------------------
    def ready_time(self, k: int, known_complete: bool, *, starts_at: float = -math.inf,
                   keep_within_bound: bool = False) -> tuple[float, np.ndarray]:
        """Earliest time trainer step k can start from the samples known now, and the ids it takes
        (ascending). Needs ``min_batch`` eligible samples (version >= min_version(k, s)) and a share
        f of round k (if round k is fully known). ``starts_at``: when the step's trainers can start at
        the earliest (a colocated pool generating until then): it takes, up to the batch, what is
        ready by then too, not only what was ready at the threshold (a colocated StaleSync step
        that generated its round whole trained the share ready at f B and left the rest of the
        round, ready and within the bound, to age out as stale). ``keep_within_bound``: the step
        also waits for the rewards of the samples that step k + 1 may no longer take
        (``_aging_ready``)."""
        store = self.ctx.store
        flat, pending = store.flat(), store.pending() - store.base   # positions in the held rows
        if not len(pending):
            return math.inf, pending
        eligible = pending[flat[self.age_column][pending] >= min_version(k, self.staleness)]
        if self.round_batches:
            return self._round_ready(k, eligible, known_complete)
        if len(eligible) < self.min_batch:
            return math.inf, eligible[:0] + store.base
        ready = flat["ready"][eligible]
        t = float(np.partition(ready, self.min_batch - 1)[self.min_batch - 1])
        if self.threshold > 0:
            current = eligible[flat["round"][eligible] >= k]
            need = ceil_count(self.threshold * self.batch)
            if len(current) >= need:
                t = max(t, float(np.partition(flat["ready"][current], need - 1)[need - 1]))
            elif not known_complete:
                return math.inf, eligible[:0] + store.base
        if keep_within_bound:
            t = max(t, self._aging_ready(k, eligible))
        available = eligible[ready <= max(t, starts_at)]
        return t, oldest_first(available, flat[self.age_column][available], flat["ready"][available],
                               self.batch) + store.base

    def _aging_ready(self, k: int, eligible: np.ndarray) -> float:
        """When the rewards are in of the eligible samples (held-row positions) that would be beyond
        the bound at step k + 1 (version < min_version(k + 1, s): at a bound of 0 all of them), up to
        a batch of them, earliest ready first: StaleSync lets a sample be trained "with some lag"
        only within its staleness threshold (seeds.md, StaleSync), so a sample that the next step may
        not take is trained by this one, and the step waits for its rule reward as the synchronous
        step waits for its batch's (at a bound of 0 StaleSync is that synchronous step; the
        colocated pool generated the round whole: its last finishers, still being scored when the
        devices stop generating, were dropped as stale, 7 of 65,536 samples on the seed over 8
        iterations, and they are the round's longest responses). -inf when there are none."""
        flat = self.ctx.store.flat()
        aging = eligible[flat[self.age_column][eligible] < min_version(k + 1, self.staleness)]
        n = min(len(aging), self.batch)
        if not n:
            return -math.inf
        return float(np.partition(flat["ready"][aging], n - 1)[n - 1])

    def _round_ready(self, k: int, eligible: np.ndarray, known_complete: bool) -> tuple[float, np.ndarray]:
        """round_batches: once every instance has planned its share of round k, the step takes that
        round's samples (the batch of them, oldest first) when the last of them is ready."""
        store = self.ctx.store
        flat = store.flat()
        rows = eligible[flat["round"][eligible] == k]
        if not known_complete or not len(rows):
            return math.inf, rows[:0] + store.base
        rows = oldest_first(rows, flat[self.age_column][rows], flat["ready"][rows], self.batch)
        return float(flat["ready"][rows].max()), rows + store.base

    def drop_stale(self, k: int) -> None:
        """Drop the pending samples too old for step k. On a synchronous schedule (staleness 0) with
        over-provisioning these are the round's surplus: the per-instance cut keeps at least the batch
        (ceil), and what finished beyond it was over-generated, not aged (`surplus`, as dynamic
        sampling's groups beyond the batch; `overprovision` names the aborted ones)."""
        store = self.ctx.store
        stale = store.pending()
        stale = stale[store.at(self.age_column, stale) < min_version(k, self.staleness)]
        if len(stale):
            surplus = self.staleness == 0 and self.sched.overprovision > 0
            store.drop(stale, "surplus" if surplus else "stale")

    def eligible_leftover(self, k: int, *, of_round: bool = False) -> int:
        """Pending samples that step k may still consume; ``of_round``: only those of round k or later
        (the step's own share f counts them: a round's earlier generation batches, dynamic sampling)."""
        store = self.ctx.store
        pending = store.pending()
        if not len(pending):
            return 0
        eligible = store.at(self.age_column, pending) >= min_version(k, self.staleness)
        if of_round:
            eligible &= store.at("round", pending) >= k
        return int(np.sum(eligible))

    # ---- the step -----------------------------------------------------------------------------
    def run(self, k: int, ids: np.ndarray, main: Clock, aux: AuxClocks = None, *,
            mini_batches: int | None = None, skip: frozenset[str] = frozenset(), rewards_at: float | None = None,
            aux_in_turn: bool = False):
        """Consume ``ids`` at iteration k on ``main`` (the reference / reward / critic passes on
        ``aux`` when given, one clock or one per role, in parallel with the actor's own; with
        ``aux_in_turn`` before them, main waiting: a single controller's blocking calls, verl's reward
        pool). ``mini_batches``: optimizer steps per epoch (default
        the workload's); ``skip``: stage names not run (e.g. old_logprob when the rollout's own
        log-probs are used); ``rewards_at``: when the batch's rewards are in, if they are scored
        during the forwards (the update waits for them). A simpy process body: yield from it."""
        ctx = self.ctx
        env, store = ctx.env, ctx.store
        ids = np.sort(ids)   # mini-batches in generation order, not finish order (no length bias)
        # output.keep_sample_rows / keep_samples=False: rows of earlier steps may leave; this step's stay
        ctx.fold_samples()
        store.consume(ids, k)
        lens = store.at("prompt_len", ids) + store.at("response_len", ids)
        aged_from, response_tokens = store.at(self.age_column, ids), float(store.at("response_len", ids).sum())
        t_start = env.now
        # DistQueue fetch (one reader per TP x PP group, or every rank)
        load = fetch_load(lens, self.sched.distqueue, main.rank_count, self.costs.train_group_devices,
                          pad_len=ctx.pad_len)
        yield from ctx.queue.read(load)
        if load.broadcast_share_bytes > 0:   # the reader hands its share to the rest of its group
            yield env.timeout(self.costs.fetch_broadcast_s(load.broadcast_share_bytes, main.ranks))
        main.busy("fetch", env.now, k, label="distqueue", cause="data")
        ctx.add_stage_time("fetch", env.now - t_start)
        # each sample's response tokens, for costs whose output layer projects those alone (TRL's head)
        responses = store.at("response_len", ids) if getattr(self.costs, "scores_responses", False) else None
        t_forward = self._forwards(k, lens, main, aux, env.now, skip, responses, aux_in_turn)
        if rewards_at is not None and rewards_at > t_forward:
            for clock in role_clocks(main, aux)[1]:
                clock.idle("dependency", rewards_at, k, label="reward")
            t_forward = rewards_at
        t_end = self._optimizer_steps(k, lens, main, aux, t_forward, mini_batches or self.workload.mini_batches,
                                      responses)
        yield env.timeout(t_end - env.now)
        ctx.iterations.append({
            "iteration": k, "start": t_start, "forwards_end": t_forward, "train_end": t_end, "samples": len(ids),
            "tokens": float(lens.sum()), "response_tokens": response_tokens,
            "staleness_mean": float(np.mean(k - aged_from)), "staleness_max": float(np.max(k - aged_from)),
            "queue_read_bytes": load.read_bytes, "queue_payload_bytes": load.payload_bytes})

    def _forwards(self, k: int, lens: np.ndarray, main: Clock, aux: AuxClocks, t0: float,
                  skip: frozenset[str], responses: np.ndarray | None = None, aux_in_turn: bool = False) -> float:
        """Forward stages: actor-side ones on main; reference / reward / critic on their aux clock
        when split (each clock's stages in turn, the clocks side by side; ``aux_in_turn``: the aux
        clocks' stages first, main's after them)."""
        totals = self.ctx.totals
        by_role, clocks = role_clocks(main, aux)
        ends = [t0] * len(clocks)
        for clock in clocks[1:]:   # the aux pools wait while the trainer fetches the batch
            clock.idle("dependency", t0, k, label="distqueue")
        stages = [st for st in self.ctx.alg.of_kind(FORWARD) if st.name not in skip]
        if aux_in_turn:
            aside = [st for st in stages if by_role.get(st.role, main) is not main]
            stages = aside + [st for st in stages if st not in aside]
        for stage in stages:
            if aux_in_turn and by_role.get(stage.role, main) is main and ends[0] < max(ends):
                ends[0] = max(ends)   # the driver waited for the aux pool's answer (not a rule reward's)
                main.idle("dependency", ends[0], k, label="aux pool")
            clock = by_role.get(stage.role, main)
            side = next(i for i, seen in enumerate(clocks) if seen is clock)
            cost = self.costs.forward(stage.role, lens, clock.ranks, **_scored(responses))
            totals.flops += cost.flops
            self.ctx.note_memory(cost.peak_memory_bytes, "train")
            ends[side] += cost.time_s
            clock.busy("forward", ends[side], k, label=stage.name)
            self.ctx.add_stage_time(stage.name, cost.time_s)
        for stage in self.ctx.alg.of_kind(SERVED_FORWARD):   # the trainer hands its batch over and waits
            ends[0] = served_batch(self.ctx, stage.role, ends[0], lens, np.zeros(len(lens), np.int64))
            main.idle("dependency", ends[0], k, label=stage.name)
        return self._meet(k, clocks, max(ends))

    def _optimizer_steps(self, k: int, lens: np.ndarray, main: Clock, aux: AuxClocks, t0: float,
                         n_mini_batches: int, responses: np.ndarray | None = None) -> float:
        """ppo_epochs x mini-batches, each one optimizer step, per trained role. A StaleSync step that
        starts on fewer samples than its mini-batches (a small stream_threshold) trains one per sample:
        no optimizer step on an empty mini-batch."""
        totals = self.ctx.totals
        mini_batches = np.array_split(np.arange(len(lens)), max(1, min(n_mini_batches, len(lens))))
        # padded whole before the split (pad_rows_to batch: TRL, SkyRL): every mini-batch the step's width
        width = {"row_width": int(lens.max())} if getattr(self.costs, "pads_rows_to_the_batch", False) else {}
        by_role, clocks = role_clocks(main, aux)
        ends = [t0] * len(clocks)
        for stage in self.ctx.alg.of_kind(TRAIN):
            clock = by_role.get(stage.role, main)
            side = next(i for i, seen in enumerate(clocks) if seen is clock)
            t_stage = 0.0
            steps = self.workload.ppo_epochs * len(mini_batches)
            offload = self.costs.update_offload_s(stage.role, clock.ranks)
            for step in range(steps):
                part = mini_batches[step % len(mini_batches)]
                cost = self.costs.train(stage.role, lens[part], clock.ranks, **width,
                                        **_scored(None if responses is None else responses[part]))
                if step == steps - 1 and offload > 0:   # the phase's reload + offload, once: with its last step
                    cost = dataclasses.replace(cost, time_s=cost.time_s + offload,
                                               path_s=(*cost.path_s, ("offload", offload)) if cost.path_s else ())
                totals.flops += cost.flops
                self.ctx.note_memory(cost.peak_memory_bytes, "train")
                t_op = ends[side] + t_stage
                if cost.path_s:   # which pipeline stage set it (the critical path's train elements)
                    for track in getattr(clock, "clocks", (clock,)):   # a MultiClock records on each range
                        self.ctx.trainer_paths.append((track.pool, track.rank_start, track.rank_count, stage.name,
                                                       t_op, t_op + cost.time_s, cost.path_stage, cost.path_s))
                clock.busy("train", t_op + cost.time_s - cost.bubble_s, k, label=stage.name)
                clock.idle("pipeline_bubble", t_op + cost.time_s, k, label=stage.name)
                t_stage += cost.time_s
            ends[side] += t_stage
            self.ctx.add_stage_time(stage.name, t_stage)
        return self._meet(k, clocks, max(ends))

    @staticmethod
    def _meet(k: int, clocks: list[Clock], t: float) -> float:
        for clock in clocks:
            clock.idle("dependency", t, k)
        return t


def oldest_first(rows: np.ndarray, age: np.ndarray, ready: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` of ``rows`` (ascending) that come first by (age, ready time, row) - oldest weights
    first, then the earliest ready - in ascending order: the set np.lexsort((ready, age))[:n]
    picks, found by counting and one partition instead of a sort."""
    if len(rows) <= n:
        return rows
    if age.dtype.kind not in "iu":
        return np.sort(rows[np.lexsort((ready, age))[:n]])
    low = int(age.min())
    below = np.cumsum(np.bincount(age - low))       # rows of age <= low + j
    edge = int(np.searchsorted(below, n))           # the age at which the n-th row falls
    taken = int(below[edge - 1]) if edge else 0     # rows of older weights than the edge: all taken
    at_edge = age == low + edge
    need = n - taken
    edge_ready = ready[at_edge]
    cut = float(np.partition(edge_ready, need - 1)[need - 1])
    pick = (age < low + edge) | (at_edge & (ready < cut))
    ties = np.flatnonzero(at_edge & (ready == cut))
    pick[ties[: need - int(np.count_nonzero(edge_ready < cut))]] = True
    return rows[pick]
