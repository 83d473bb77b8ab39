"""Colocated placement (RL Fusion / hybrid engine): the actor's devices time-share rollout and training.

Per iteration: switch to rollout (optimizer + gradients offloaded to host, KV cache allocated) ->
generate -> switch to training -> forward stages -> train -> weight sync (reshard from the training
to the inference layout). ``fuse: actor`` puts reference / reward / critic on a small aux pool;
``fuse: full`` runs them on the same cards.

StaleSync on this placement (staleness >= 1, threshold f < 1): once B eligible samples exist
(the previous round's tail plus a share f of this round), the still-running sequences are
interrupted and consolidated onto the fewest rollout instances that hold them (resumed with a
re-prefill of their context), the other devices switch to training on the ready samples, and the
tail samples join the next batch with staleness 1. Both groups meet again before the next rollout.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from ...errors import RlsimError
from ..timeline import GroupClock, MultiClock
from . import failures as fl
from .base import Context, SeqBatch


def _switch(ctx: Context, clock: GroupClock, to_phase: str, k: int) -> float:
    cost = ctx.costs.switch(to_phase, clock.ranks)
    clock.busy("switch", clock.cursor + cost.time_s, k, label=f"to {to_phase}", cause="switch")
    for key, b in cost.bytes_moved.items():
        ctx.switch_bytes[key] = ctx.switch_bytes.get(key, 0.0) + b * clock.rank_count
    ctx.add_stage_time(f"switch_to_{to_phase}", cost.time_s)
    return cost.time_s


def _record_round(ctx: Context, clock: GroupClock, ends: np.ndarray, t0: float, until: float, k: int) -> None:
    clock.per_instance("generate", np.asarray(ends) - t0, until, ctx.costs.instance_devices, k, "long_tail",
                       label=f"round {k}")


def _train_and_sync(ctx: Context, k: int, clock: GroupClock | MultiClock, aux: GroupClock | None, sync_to,
                    *, wait_ready: bool = False):
    """The training half of a colocated step on ``clock``: wait for the batch's rewards
    (``dependency``), drop stale samples, switch to training, train, reshard the weights to the
    inference layout on ``sync_to``. A simpy process body. ``wait_ready``: the StaleSync step
    advances simulated time to the batch's ready time before switching (the sync step's process
    is still at the round start and jumps straight to the end of the switch)."""
    env = ctx.env
    t_ready, ids = ctx.ready_time(k, True)
    if math.isinf(t_ready):
        raise AssertionError("colocated round produced fewer samples than the batch")
    clock.idle("dependency", t_ready, k, label="reward")
    if wait_ready:
        yield env.timeout(max(0.0, t_ready - env.now))
    ctx.drop_stale(k)
    _switch(ctx, clock, "train", k)
    yield env.timeout(clock.cursor - env.now)
    if aux:
        aux.idle("dependency", env.now, k)
    yield from ctx.train_step(k, ids, clock, aux)
    sync_s = ctx.costs.weight_sync_s(clock.ranks, sync_to)
    clock.busy("sync", env.now + sync_s, k, label="reshard", cause="weight_sync")
    ctx.add_stage_time("weight_sync", sync_s)
    yield env.timeout(sync_s)


def run(ctx: Context) -> float:
    env = ctx.env
    actor = ctx.pools["actor"]
    aux_pool = ctx.pools.get("aux")
    d = ctx.costs.instance_devices
    n_inst = actor.count // d
    n_actor = actor.count
    G: GroupClock | MultiClock = GroupClock(ctx.timeline, "actor", actor.start, actor.count)
    A = GroupClock(ctx.timeline, "aux", aux_pool.start, aux_pool.count) if aux_pool else None
    ctx.clocks += [G] + ([A] if A else [])
    ctx.start_clock(G)
    if A:
        ctx.start_clock(A)
    carries = [SeqBatch.empty() for _ in range(n_inst)]
    version = 0
    split_allowed = ctx.s >= 1 and ctx.f < 1
    mem = ctx.costs.inference_memory_bytes(actor.ranks)
    ctx.peak_memory_bytes = max(ctx.peak_memory_bytes, mem)
    fl.check_supported(ctx)
    alive = list(actor.ranks)
    events = fl.resolve_events(ctx, alive, f"the actor pool (ranks {alive[0]}-{alive[-1]})")

    def step(k: int):
        nonlocal version, carries
        _switch(ctx, G, "rollout", k)
        if A:
            A.idle("dependency", G.cursor, k)
        yield env.timeout(G.cursor - env.now)
        t0 = env.now
        ranks = G.ranks
        plans = [ctx.plan(SeqBatch.concat(carries[i], ctx.share(k, i, n_inst)), t0, version, ranks[i * d:(i + 1) * d])
                 for i in range(n_inst)]
        gen_end = t0 + max(p.end_s for p in plans)
        t_split = math.inf
        if split_allowed:
            t_split = _split_time(ctx, k, plans, n_actor)
            if not math.isinf(t_split) and _train_devices(ctx, plans, t_split, n_actor) <= 0:
                t_split = math.inf
        if t_split < gen_end - 1e-9:
            yield from _stalesync_step(ctx, k, plans, t_split)
        else:
            results = [ctx.commit(p) for p in plans]
            carries = [r[1] for r in results]
            ends = np.array([r[0] for r in results])
            round_end = float(ends.max())
            ctx.add_stage_time("generate", round_end - t0)
            _record_round(ctx, G, ends, t0, round_end, k)
            yield from _train_and_sync(ctx, k, G, A, G.ranks)
        if A:
            A.idle("dependency", env.now, k)
        version = k + 1
        ctx.iterations[-1]["end"] = env.now

    def _stalesync_step(ctx: Context, k: int, plans, t_split: float):
        nonlocal carries
        t0 = plans[0].t0
        results = [ctx.commit(p, stop_s=t_split - t0) for p in plans]
        tail = SeqBatch.empty()
        for r in results:
            tail = SeqBatch.concat(tail, r[1])
        n_train = _train_devices(ctx, plans, t_split, n_actor)
        ends = np.array([r[0] for r in results])
        _record_round(ctx, G, ends, t0, t_split, k)
        ctx.add_stage_time("generate", t_split - t0)
        R, T = G.split([n_train, n_actor - n_train])
        yield env.timeout(t_split - env.now)
        # tail: consolidated onto the tail group's instances, same weights, context re-prefilled
        tail_inst = T.rank_count // d
        t_ends = []
        new_carries = [SeqBatch.empty() for _ in range(n_inst)]
        for j in range(tail_inst):
            part = tail.take(np.arange(j, len(tail), tail_inst))
            end, carry, _ = ctx.generate(part, t_split, version, T.ranks[j * d:(j + 1) * d])
            t_ends.append(end)
            new_carries[j] = carry
        carries = new_carries
        tail_end = max(t_ends) if t_ends else t_split
        T.per_instance("generate", np.array(t_ends) - t_split, tail_end, d, k, "long_tail", label="tail")
        ctx.add_stage_time("tail_generate", tail_end - t_split)
        # the rest train on the ready samples
        yield from _train_and_sync(ctx, k, R, A, G.ranks, wait_ready=True)
        barrier = max(env.now, tail_end)
        R.idle("long_tail", barrier, k)
        T.idle("dependency", barrier, k)
        yield env.timeout(barrier - env.now)
        G.cursor = barrier

    def guarded(k: int):
        try:
            yield from step(k)
        except simpy.Interrupt:
            return False
        return True

    def fail(spec: str, failed: set[int], target: fl.Snapshot):
        """Roll back to ``target``, drop the failed devices, re-plan and restart on the survivors."""
        nonlocal G, n_actor, n_inst, carries, version, alive
        t_f = env.now
        lost_s = fl.roll_back(ctx, target, t_f)
        carries, version = target.extra
        current = ctx.costs.train_layout_of(G.ranks)
        out = ctx.replanner.on_failure(list(alive), sorted(failed & set(alive)), current,
                                       accept=ctx.costs.accept_train_layout)
        if out.train_layout:
            ctx.costs.set_train_layout(out.train_layout)
        unit = math.lcm(d, ctx.costs.train_group_devices)
        use = out.survivors[: (len(out.survivors) // unit) * unit]
        if not use:
            raise RlsimError(f"no whole training replica and rollout instance fits on the {len(out.survivors)} "
                             f"devices left after the failure of {spec}", source=ctx.scenario.source,
                             field="schedule.failures", fix="fail fewer devices or use a larger topology")
        fl.mark_out(ctx, "actor", [r for r in alive if r not in use], failed, t_f)
        for c in (G.clocks if isinstance(G, MultiClock) else [G]):
            ctx.clocks.remove(c)
        alive, n_actor, n_inst = list(use), len(use), len(use) // d
        G = fl.survivor_clock(ctx, "actor", alive, t_f)
        clocks = [G] + ([A] if A else [])
        for c in clocks:
            c.cursor = t_f
            c.busy("replan", t_f + out.planning_cost_s, target.iteration, label=f"failure of {spec}", cause="failure")
            c.busy("restart", c.cursor + ctx.sched.recovery.restart_s, target.iteration, label="restart",
                   cause="failure")
        ctx.peak_memory_bytes = max(ctx.peak_memory_bytes, ctx.costs.inference_memory_bytes(G.ranks))
        carries = fl.redistribute(carries, n_inst)
        ctx.failures.append({"at_s": t_f, "fail": spec, "failed_ranks": sorted(failed & set(range(ctx.n_devices))),
                             "iteration": target.iteration, "lost_s": lost_s,
                             "replan_s": out.planning_cost_s, "restart_s": ctx.sched.recovery.restart_s,
                             "devices_after": n_actor,
                             "train_layout_after": ctx.costs.train_layout_of(G.ranks)})
        yield env.timeout(G.cursor - env.now)

    def main():
        if ctx.start_s > 0:
            yield env.timeout(ctx.start_s - env.now)
        rec = ctx.sched.recovery
        k, ckpt = 0, None
        while k < ctx.scenario.iterations:
            proc = env.process(guarded(k))
            if events:
                # StaleSync steps consume and drop samples of earlier rounds: keep a copy of the store
                snap = fl.snapshot(ctx, k, (carries, version), store=ctx.s > 0)
                if ckpt is None or (rec.lose_to == "checkpoint" and k % rec.checkpoint_every_steps == 0
                                    and k > ckpt.iteration):
                    ckpt = snap
                yield proc | env.timeout(max(0.0, events[0][0] - env.now))
                if not proc.triggered:
                    proc.interrupt("failure")
                    yield proc
                    _, spec, failed = events.pop(0)
                    target = ckpt if rec.lose_to == "checkpoint" else snap
                    yield from fail(spec, failed, target)
                    k = target.iteration
                    continue
            else:
                yield proc
            k += 1

    env.run(until=env.process(main()))
    return env.now


def _split_time(ctx: Context, k: int, plans, pool: int) -> float:
    """When the tail consolidates: the earliest time at which (a) B eligible samples exist (leftovers
    from earlier rounds plus this round's completions, at least a share f from this round) and (b)
    the still-running sequences fit on at most ``consolidate_share`` of the instances and free at
    least one whole training group. Before (b) the instances are still needed (a KV- and batch-bound
    rollout keeps them full until the queue drains); (b)'s share keeps the trainers a large enough
    pool that training a whole batch on them does not outlast the tail by far."""
    f = ctx.store.flat()
    pend = ctx.store.pending()
    min_version = math.ceil(k - ctx.s - 1e-9)
    leftover = int(np.sum(f["version"][pend] >= min_version)) if len(pend) else 0
    need = max(math.ceil(ctx.f * ctx.B - 1e-9), ctx.min_batch - leftover)
    live = [p for p in plans if len(p.seqs)]
    if ctx.sched.overprovision > 0 or not live:
        return math.inf
    ok = np.concatenate([(p.seg >= p.remaining) & (p.seqs.drop_reason == "") for p in live])
    fin = np.concatenate([p.t0 + p.finish for p in live])
    times = np.sort(fin[ok])
    if len(times) < need:
        return math.inf
    # completions at the split are committed at stop_s; the reward latency is added on top later
    t_need = float(times[need - 1]) + 1e-9
    cand = np.unique(np.concatenate([[t_need], fin[fin > t_need] + 1e-9]))
    max_tail = max(1, math.floor(ctx.sched.consolidate_share * (pool // ctx.costs.instance_devices)))
    lo, hi = 0, len(cand)
    while lo < hi:     # free training devices never decrease as sequences finish: bisect
        mid = (lo + hi) // 2
        t = float(cand[mid])
        if tail_instances(ctx, plans, t) <= max_tail and _train_devices(ctx, plans, t, pool) > 0:
            hi = mid
        else:
            lo = mid + 1
    return float(cand[lo]) if lo < len(cand) else math.inf


def tail_instances(ctx: Context, plans, t_split: float) -> int:
    """Fewest rollout instances that hold the sequences still running at ``t_split``: bounded by
    the running-sequence slots and by the KV cache (each needs its full context by the end)."""
    n_tail, kv = 0, 0.0
    for p in plans:
        if not len(p.seqs):
            continue
        run = (p.t0 + p.finish > t_split) | (p.seg < p.remaining)
        n_tail += int(np.sum(run))
        kv += float(np.sum((p.seqs.prompt_len + p.seqs.target_len)[run]))
    if n_tail == 0:
        return 0
    by_seqs = math.ceil(n_tail / max(1, ctx.costs.instance_max_seqs))
    by_kv = math.ceil(kv / ctx.costs.instance_kv_tokens)
    return max(1, by_seqs, by_kv)


def _train_devices(ctx: Context, plans, t_split: float, pool_devices: int) -> int:
    """Devices left for training once the tail sits on the fewest instances that hold it,
    rounded down to whole training replicas (and whole EP groups)."""
    free = pool_devices - max(1, tail_instances(ctx, plans, t_split)) * ctx.costs.instance_devices
    return ctx.costs.train_devices_at_most(free)
