"""From a recorded run to DataFrames and the summary (the `rlsim run --json` object).

Device-seconds are exact: every record covers ``rank_count`` devices for ``end - start`` seconds,
and each device group's records tile [0, makespan] (see rl/timeline.py).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .llm.inference import ENGINE_COUNTERS
from .rl.samples import RetiredSamples
from .rl.schedules.context import RunRecord
from .rl.timeline import BUSY_STATES
from .scenario import has_framework_timers

# Non-busy states count as bubbles; their cause when the state itself names it.
STATE_CAUSE = {"switch": "switch", "sync": "weight_sync", "fetch": "data", "plan": "planning",
               # failures (rl/schedules/failures.py): lost work, re-plan, restart, failed devices
               "lost": "failure", "replan": "failure", "restart": "failure", "failed": "failure"}
BUBBLE_CAUSES = ("long_tail", "dependency", "pipeline_bubble", "switch", "weight_sync", "data", "placement",
                 "tool_wait")


def device_seconds(timeline: pd.DataFrame) -> pd.Series:
    return (timeline["end"] - timeline["start"]) * timeline["rank_count"]


def time_in_states(timeline: pd.DataFrame, by: Sequence[str] = ("pool", "state")) -> pd.DataFrame:
    """Device-seconds per (pool, state) (or any grouping of timeline columns)."""
    frame = timeline.assign(device_s=device_seconds(timeline))
    return frame.groupby(list(by), sort=True)["device_s"].sum().reset_index()


def per_device_time(timeline: pd.DataFrame, n_devices: int) -> np.ndarray:
    """Seconds recorded for each device rank (sums ranges without expanding rows)."""
    diff = np.zeros(n_devices + 1)
    dur = (timeline["end"] - timeline["start"]).to_numpy()
    np.add.at(diff, timeline["rank_start"].to_numpy(), dur)
    np.add.at(diff, (timeline["rank_start"] + timeline["rank_count"]).to_numpy(), -dur)
    return np.cumsum(diff)[:n_devices]


def bubbles(timeline: pd.DataFrame) -> tuple[float, dict[str, float]]:
    """(bubble fraction, fraction of device-seconds per cause).

    From the frame's columns as arrays (pandas' per-operation cost is most of a short run's
    summary): the totals are numpy's sums of the same arrays (what Series.sum computes); each
    cause's device-seconds are summed as pandas' groupby sum sums them (_grouped_sums: the same
    floats to the bit, tested against pandas), keys sorted."""
    ds = (timeline["end"].to_numpy() - timeline["start"].to_numpy()) * timeline["rank_count"].to_numpy()
    total = float(ds.sum())
    if total <= 0:
        return 0.0, {c: 0.0 for c in BUBBLE_CAUSES}
    keys, idle = _bubble_causes(timeline["state"].tolist(), timeline["cause"].tolist())
    idle_s = ds[idle]
    sums = _grouped_sums(keys, idle_s.tolist())
    out = {c: sums.get(c, 0.0) / total for c in BUBBLE_CAUSES}
    for c, v in sums.items():
        if c not in out:
            out[str(c)] = v / total
    return float(idle_s.sum()) / total, out


# The idle rows of a wait for rewards: labelled reward, or teacher where a pool waits on a
# distillation teacher's log-probabilities (AReaL's trainer: its 5% of the device time read 0.4%
# before); the teacher pool's own idle rows (labelled teacher too: no request to serve) are not one
WAIT_LABELS = ("reward", "teacher")
TEACHER_POOL = "teacher"


def reward_wait_share(timeline: pd.DataFrame) -> float:
    """The share of all device time spent idle waiting for rule rewards, and with a distillation
    teacher for its log-probabilities, the samples' readiness after them (idle rows labelled
    WAIT_LABELS, counted under the cause dependency in bubbles_by_cause)."""
    ds = device_seconds(timeline)
    total = float(ds.sum())
    waits = (timeline["state"] == "idle") & timeline["label"].isin(WAIT_LABELS) & (timeline["pool"] != TEACHER_POOL)
    return float(ds[waits].sum()) / total if total > 0 else 0.0


def _grouped_sums(keys: list[str], values: list[float]) -> dict[str, float]:
    """Per key, the sum of its values, keys sorted: pandas' ``Series.groupby(keys).sum()`` to the bit
    without building a Series, a factorization and a grouper for a few dozen rows. pandas has two
    kernels: rows already in key order (and no NaN) are summed per run by ``np.add.reduceat``; any
    other order by its group_sum loop (Kahan-compensated in row order, NaN skipped, the compensation
    reset where it is not finite: inf - inf makes it NaN, an overflow inf; pandas 3.1 keeps an
    overflowed sum at inf). Both are followed here (tested against pandas)."""
    order = sorted(set(keys))
    rank = {key: i for i, key in enumerate(order)}
    codes = [rank[key] for key in keys]
    if all(a <= b for a, b in zip(codes, codes[1:], strict=False)) and not any(v != v for v in values):
        if not codes:
            return {}
        starts = [0] + [i for i in range(1, len(codes)) if codes[i] != codes[i - 1]]
        with np.errstate(over="ignore"):   # an overflowed sum is inf, as pandas keeps it (no warning)
            sums_in_order = np.add.reduceat(np.array(values, float), starts)
        return dict(zip(order, sums_in_order.tolist(), strict=True))
    sums, compensation = [0.0] * len(order), [0.0] * len(order)
    for code, value in zip(codes, values, strict=True):
        if value != value:      # NaN: skipped, as pandas skips a missing value
            continue
        y = value - compensation[code]
        t = sums[code] + y
        c = t - sums[code] - y
        compensation[code] = c if math.isfinite(c) else 0.0   # inf - inf (NaN) or an overflow (inf)
        sums[code] = t
    return dict(zip(order, sums, strict=True))


def _bubble_causes(states: list[str], causes: list[str]) -> tuple[list[str], np.ndarray]:
    """The cause of each non-busy row (an idle row's own cause, else its state's STATE_CAUSE, else
    "other") and the mask of those rows."""
    idle = np.zeros(len(states), bool)
    keys = []
    for row, (state, cause) in enumerate(zip(states, causes, strict=True)):
        if state in BUSY_STATES:
            continue
        idle[row] = True
        key = cause if state == "idle" else STATE_CAUSE.get(state)
        keys.append(key if isinstance(key, str) else "other")
    return keys, idle


def iterations_frame(rec: RunRecord) -> pd.DataFrame:
    """One row per iteration (its record's keys) and ``step_time_s``, the time since the previous
    one's end. Built column by column when every record has the same keys and each column holds
    only Python ints (within int64) or only Python floats: the int64 / float64 columns pandas' records
    constructor infers for them (tested), without its per-cell object matrix."""
    columns = _plain_columns(rec.iterations)
    if columns is None or not isinstance(columns.get("end"), np.ndarray) or columns["end"].dtype != np.float64:
        frame = pd.DataFrame(rec.iterations)
        if len(frame):
            prev_end = frame["end"].astype(float).shift(1, fill_value=0.0)   # int ends: float, as before
            frame["step_time_s"] = frame["end"] - prev_end
        return frame
    end = columns["end"]
    with np.errstate(invalid="ignore"):   # inf - inf is NaN, as pandas gives it, without a warning
        columns["step_time_s"] = end - np.concatenate(([0.0], end[:-1]))
    return pd.DataFrame(columns, copy=False)


_INT64 = np.iinfo(np.int64)


def _plain_columns(records: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    """The records' columns as int64 / float64 arrays, or None where pandas' inference is not that
    simple (no records, differing keys, another type, a bool, an int beyond int64)."""
    if not records:
        return None
    keys = list(records[0])
    if any(list(r) != keys for r in records):
        return None
    out = {}
    for key in keys:
        values = [r[key] for r in records]
        if all(type(v) is float for v in values):
            out[key] = np.array(values, np.float64)
        elif all(type(v) is int and _INT64.min <= v <= _INT64.max for v in values):
            out[key] = np.array(values, np.int64)
        else:
            return None
    return out


def steady_state(rec: RunRecord) -> tuple[float, float]:
    """(step time, tokens/s) over iterations 1..N-1: from the end of the first iteration to the
    end of the last. The first iteration is warm-up for pipelined schedules (StaleSync trains only
    the threshold share, one-step-off / async fill their pipeline), so the whole-run average mixes
    a fill-up step into the rate; with one iteration the run itself is returned."""
    its = rec.iterations
    if len(its) < 2:
        T = rec.makespan_s
        tokens = float(sum(it["tokens"] for it in its))
        return T / max(1, len(its)), (tokens / T if T > 0 else 0.0)
    span = float(its[-1]["end"] - its[0]["end"])
    tokens = float(sum(it["tokens"] for it in its[1:]))
    return span / (len(its) - 1), (tokens / span if span > 0 else 0.0)


def steady_window(rec: RunRecord, timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline clipped to steady_state()'s window: from the end of the first iteration to the
    end of the last (the whole run with one iteration). Its bubbles sit beside the steady step and
    tokens/s (a pipeline's warm-up idles most devices: 25% whole run, 3% steady on a NeMo RL
    1-step-off import)."""
    its = rec.iterations
    if len(its) < 2 or timeline.empty:
        return timeline
    low, high = float(its[0]["end"]), float(its[-1]["end"])
    start = np.maximum(timeline["start"].to_numpy(), low)
    end = np.minimum(timeline["end"].to_numpy(), high)
    inside = end > start
    return timeline.loc[inside].assign(start=start[inside], end=end[inside])


def busy_by_pool(window: pd.DataFrame) -> dict[str, float]:
    """Each pool's busy share (generate, forward, train) of its device-seconds in ``window``."""
    seconds = device_seconds(window).to_numpy()
    busy = window["state"].isin(BUSY_STATES).to_numpy()
    out = {}
    for pool in sorted(window["pool"].unique(), key=str):
        mine = (window["pool"] == pool).to_numpy()
        total = float(seconds[mine].sum())
        out[str(pool)] = float(seconds[mine & busy].sum()) / total if total > 0 else 0.0
    return out


def rollout_utilization(rec: RunRecord, generated_tokens: float = 0.0) -> dict[str, float | None]:
    """Batch-slot occupancy of the rollout instances while they generate, and the share of their
    generating time spent at low batch (fewer than schedule.low_batch_share of slots in use). None
    for both where the run generated without accounting its slots (kind verl-fully-async, whose
    servers run their engines request by request): not measured, rather than 0."""
    r = rec.rollout or {}
    inst = float(r.get("instance_s", 0.0))
    if inst <= 0 and generated_tokens > 0:
        return {"occupancy": None, "low_batch_fraction": None, "generate_instance_s": 0.0}
    return {"occupancy": float(r.get("slot_s", 0.0)) / inst if inst > 0 else 0.0,
            "low_batch_fraction": float(r.get("low_batch_s", 0.0)) / inst if inst > 0 else 0.0,
            "generate_instance_s": inst}


def rollout_counts(rec: RunRecord, generated_tokens: float = 0.0) -> dict[str, int | None]:
    """What the rollout engines did beyond time, summed over the run (llm.inference.ENGINE_COUNTERS):
    preemptions (a sequence preempted, vLLM's recompute or SGLang's retraction, when the KV pool
    was full) and the tokens their re-admissions computed again (preemption_reprefill_tokens); the tokens
    prefills computed (prefilled_tokens) and the prompt tokens a sample did not compute because a
    running sample of its prompt held them in the prefix cache (prompt_hit_tokens); multi-turn, the
    context tokens samples left cached while out on their tools (retained_context_tokens), of those
    evicted (evicted_context_tokens), and the evicted ones a returning turn prefilled again
    (eviction_reprefill_tokens); the context (prompt + tokens generated before) a resumed partial
    rollout prefilled again (resume_reprefill_tokens). None for each where the run generated without its engines
    counting (not measured, rather than 0)."""
    r = rec.rollout or {}
    if generated_tokens > 0 and any(key not in r for key in ENGINE_COUNTERS):
        return dict.fromkeys(ENGINE_COUNTERS)
    return {key: int(r.get(key, 0)) for key in ENGINE_COUNTERS}


# verl's timing_s/<name> phases (../shared/reference/frameworks.md) from rlsim's stages, per step:
# gen = generate (the whole round, to its last sequence), reward = a reward-model forward plus, in the
# hybrid engine, the wait for the rule rewards after the round (idle, label "reward"; in one-step-off
# the previous generation's rule rewards are inside wait_prev_gen),
# old_log_prob = old_logprob, ref = reference, values = critic_values, update_critic = train_critic,
# update_actor = train_actor; one_step_off_policy: wait_prev_gen = the trainer's wait for the
# previous generation (from its weight sync to the start of its next step) instead of gen;
# other = step - the named phases (switches, resharding / weight sync, DistQueue fetch: verl's glue).
VERL_PHASES = {"generate": "gen", "reward": "reward", "old_logprob": "old_log_prob", "reference": "ref",
               "critic_values": "values", "train_critic": "update_critic", "train_actor": "update_actor"}


# The stages verl's hybrid engine times inside timing_s/gen beside the generation: generate_sequences
# switches to rollout mode (the engine woken, the trainer's weights loaded into it) before it generates
# and back to trainer mode (the engine put to sleep) after (0.6.0 fsdp_workers.py generate_sequences:
# rollout_mode() / trainer_mode(); 0.7.0 agent_loop.py generate_sequences: wake_up() / sleep()); a DAPO
# generation batch each time (colocated.py between_gen_batches)
VERL_GEN_WRAPS = ("switch_to_rollout", "weight_sync", "switch_to_train", "switch_between_batches")


def verl_timing(rec: RunRecord, phases: Mapping[str, float]) -> dict[str, float]:
    """verl's timing_s as its logs have them, from ``verl_phases``: on the hybrid engine its `gen`
    holds the switches and the weight sync around the generation (VERL_GEN_WRAPS, whole-run means as
    the phases), which leave `other`; one-step-off's phases as they are."""
    out = dict(phases)
    if "gen" in out:
        wraps = sum(float(rec.stage_time_s.get(stage, 0.0)) for stage in VERL_GEN_WRAPS) / max(1, len(rec.iterations))
        out["gen"] += wraps
        out["other"] -= wraps
    return out


def verl_phases(rec: RunRecord, timeline: pd.DataFrame) -> dict[str, float] | None:
    """verl's phase names for the colocated hybrid engine (kind colocated, fuse full: every stage on
    the same cards, one after the other) and one_step_off_policy (kind one-step-off), `gen` the
    generation alone (the other frameworks' timers are built from these); None otherwise."""
    sched, its = rec.scenario.schedule, rec.iterations
    hybrid = sched.kind == "colocated" and sched.fuse == "full"
    if not has_framework_timers(sched) or rec.failures or not its:
        return None
    n = len(its)
    # one-step-off: every figure over the steady steps (1..N-1) where there are two or more, as the
    # steady figures: its first step waits for a whole generation (the warm-up verl's logs skip).
    # A hybrid step has no warm-up: the whole run's
    first = 1 if n >= 2 and not hybrid else 0
    per_step = _steady_stage_s(rec, timeline, first) if first else {k: v / n for k, v in rec.stage_time_s.items()}
    if not _reward_model_in_turn(rec):   # its own pool's busy seconds: the trainer's wait holds its part
        per_step.pop("reward", None)
    out = {name: per_step.get(stage, 0.0) for stage, name in VERL_PHASES.items()
           if stage in per_step or name in ("gen", "reward", "old_log_prob", "ref", "update_actor")}
    ends = [0.0] + [float(it["end"]) for it in its]
    if hybrid and "actor" in rec.pools:   # the wait for the rule rewards, as a share of the actor's devices
        wait = timeline[(timeline["pool"] == "actor") & (timeline["state"] == "idle") & (timeline["label"] == "reward")]
        out["reward"] += float(device_seconds(wait).sum()) / rec.pools["actor"].count / n
    if not hybrid:   # the trainer does not generate: its wait for the previous generation instead
        del out["gen"]
        out["wait_prev_gen"] = float(np.mean([its[k]["start"] - ends[k] for k in range(first, n)]))
    out["step"] = (ends[-1] - ends[first]) / (n - first)
    out["other"] = out["step"] - sum(v for k, v in out.items() if k != "step")
    return out


def _reward_model_in_turn(rec: RunRecord) -> bool:
    """Whether stage `reward` is a phase of the trainer's step (the rule rewards' verification, a
    reward model's forward on the trainer's devices or its engines woken there), not the busy time of
    a reward model served on devices of its own (pool reward_model), which scores beside the
    generation: the step holds only the trainer's wait for its last answers (the hybrid engine's
    idle labelled reward; one-step-off's inside wait_prev_gen)."""
    return "reward_model" not in rec.pools


def _steady_stage_s(rec: RunRecord, timeline: pd.DataFrame, first: int) -> dict[str, float]:
    """Each stage's seconds per step over steps ``first``..N-1: its whole-run total, times the share
    of its recorded device time (timeline rows labelled with the stage) in those steps, over their
    count. A stage no row carries keeps its whole-run mean. The trainer's phases differ by the
    batch's tokens: whole-run means beside a steady step left `other` negative (a trial: -0.5 s)."""
    n = len(rec.iterations)
    steady_steps = {int(it["iteration"]) for it in rec.iterations[first:]}
    seconds = device_seconds(timeline)
    out: dict[str, float] = {}
    for stage, total in rec.stage_time_s.items():
        rows = timeline["label"] == stage
        recorded = float(seconds[rows].sum())
        if recorded <= 0:
            out[stage] = total / n
            continue
        steady = float(seconds[rows & timeline["iteration"].isin(steady_steps)].sum())
        out[stage] = total * steady / recorded / (n - first)
    return out


# verl phase -> NeMo RL timer (algorithms/grpo.py, logged as timing/train/<name>; the names
# calibration.runlogs reads back): the policy's and the reference's log-prob passes share one timer.
NEMO_RL_TIMERS = {"gen": "generation", "reward": "reward_calculation", "old_log_prob": "policy_and_reference_logprobs",
                  "ref": "policy_and_reference_logprobs", "update_actor": "policy_training",
                  "wait_prev_gen": "exposed_generation",
                  # NeMo RL trains no critic: a PPO run's critic phases keep verl's names
                  "values": "values", "update_critic": "update_critic"}


def nemo_rl_timing(verl: Mapping[str, float], stage_time_s: Mapping[str, float]) -> dict[str, float]:
    """verl_phases under NeMo RL's timer names (generation alone), seconds per step: the weight sync (stage
    weight_sync, a refit) is its own timer there, taken out of verl's `other`; `total_step_time` is
    the step. The named timers + other = total_step_time, as verl's do."""
    out: dict[str, float] = {}
    for phase, seconds in verl.items():
        if phase in NEMO_RL_TIMERS:
            name = NEMO_RL_TIMERS[phase]
            out[name] = out.get(name, 0.0) + seconds
    out["weight_sync"] = float(stage_time_s.get("weight_sync", 0.0))
    out["total_step_time"] = verl["step"]
    out["other"] = out["total_step_time"] - sum(v for k, v in out.items() if k != "total_step_time")
    return out


# OpenRLHF's phase timers (trainer/ppo_trainer.py train_step and fit, logged as timing/<name>; read in
# its 0.11.2 wheel) on the hybrid engine, from verl's phases and the switches' parts
# (SwitchCost.parts_s): generate_samples wakes the engine's KV pool, generates (rewards scored in the
# engine's process) and puts it to sleep (its weights to the host); make_experience runs the forward
# passes; ppo_train reloads DeepSpeed's states, fits and offloads them; broadcast_to_vllm wakes the
# engine's weights and sends the new ones. step_total is the step; other what no timer holds
# (rlsim's fixed switch overhead, the DistQueue fetch).
OPENRLHF_TIMERS = {"generation": (("gen", "rule_reward"), ("rollout.engine_memory", "train.engine_memory",
                                                             "train.engine_weights", "between.engine_memory",
                                                             "between.engine_weights")),
                   "make_experience": (("old_log_prob", "ref", "values", "reward_model"), ()),
                   "ppo_train": (("update_actor", "update_critic"), ("rollout.trainer", "train.trainer")),
                   "broadcast": (("weight_sync",), ("rollout.engine_weights",))}


def openrlhf_timing(rec: RunRecord, verl: Mapping[str, float], stage_time_s: Mapping[str, float]) -> dict[str, float]:
    """OpenRLHF's timers on the hybrid engine (kind colocated, fuse full), seconds per step (the
    whole run's means, as verl_phases' hybrid figures); the named timers + other = step_total."""
    n = max(1, len(rec.iterations))
    reward_model = (float(stage_time_s.get("reward", 0.0)) if rec.scenario.workload.reward.kind == "model"
                    and _reward_model_in_turn(rec) else 0.0)
    phases = {**verl, "reward_model": reward_model, "rule_reward": verl.get("reward", 0.0) - reward_model,
              "weight_sync": float(stage_time_s.get("weight_sync", 0.0))}
    out = {name: sum(phases.get(phase, 0.0) for phase in named) + sum(rec.switch_parts_s.get(part, 0.0)
                                                                      for part in parts) / n
           for name, (named, parts) in OPENRLHF_TIMERS.items()}
    out["step_total"] = verl["step"]
    out["other"] = out["step_total"] - sum(v for k, v in out.items() if k != "step_total")
    return out


def openrlhf_split_timing(rec: RunRecord, timeline: pd.DataFrame) -> dict[str, float] | None:
    """OpenRLHF's timers where its engines run on GPUs of their own, over the steady steps (1..N-1)
    of the trainer's records: make_experience from the step's start to the end of its forward
    passes (every pool's), ppo_train to the end of the updates, broadcast the weight sync. Its
    synchronous trainer (kind disaggregated) times the generation it waits for; its asynchronous one
    (kind one-step-off, ppo_trainer_async.py) times each batch's generation on the generator (the
    round's span on the engines) and takes the vLLM lock to broadcast, so its broadcast holds the
    wait for the next batch. None without two steps or after a failure."""
    its = rec.iterations
    n = len(its)
    if n < 2 or rec.failures or "forwards_end" not in its[0]:
        return None
    steady = its[1:]
    ends = [float(it["end"]) for it in its]
    waits = float(np.mean([float(its[k]["start"]) - ends[k - 1] for k in range(1, n)]))
    out = {"make_experience": float(np.mean([it["forwards_end"] - it["start"] for it in steady])),
           "ppo_train": float(np.mean([it["train_end"] - it["forwards_end"] for it in steady])),
           "broadcast": float(np.mean([it["end"] - it["train_end"] for it in steady]))}
    if rec.scenario.schedule.kind == "one-step-off":
        rows = timeline[(timeline["pool"] == "rollout") & (timeline["state"] == "generate")]
        by_round = rows.groupby("iteration").agg(start=("start", "min"), end=("end", "max"))
        spans = by_round["end"] - by_round["start"]
        rounds = [int(it["iteration"]) for it in steady if int(it["iteration"]) in spans.index]
        out = {"generation": float(spans.loc[rounds].mean()) if rounds else 0.0, **out}
        out["broadcast"] += waits
        on_path = ("make_experience", "ppo_train", "broadcast")
    else:
        out = {"generation": waits, **out}
        on_path = tuple(out)
    out["step_total"] = (ends[-1] - ends[0]) / (n - 1)
    out["other"] = out["step_total"] - sum(out[name] for name in on_path)
    return out


def sample_figures(samples: pd.DataFrame | Mapping[str, np.ndarray], retired: RetiredSamples, T: float,
                   table: bool = True, dropped: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The summary's per-sample sums: over the frame's rows and, under output.keep_sample_rows, the
    retired ones (rl/samples.py: all finished within the run; integer token counts, so the sums are
    exact and the figures equal those of the whole table). ``table``: whether the run returns the
    per-sample table (rl/samples.SampleStore.table); only then is ``rows_kept`` said. ``dropped``:
    the frame's dropped rows per reason when known (SampleStore.drop_counts of the store the frame
    was made from: its codes, not a read of the frame's string column), else counted here (a frame).
    ``samples``: the per-sample frame, or the store's columns (SampleStore.flat(), with ``dropped``)."""
    # Column by column, as the frame's own arrays (numpy's sums are pandas' on columns without NaN):
    # a masked copy of the whole per-sample frame would double a long run's peak.
    col = {c: np.asarray(samples[c]) for c in ("consumed_iteration", "staleness", "prompt_len", "response_len",
                                               "finish", "generated_tokens", "dropped", "first_version")}
    rows = len(col["finish"])
    consumed = col["consumed_iteration"] >= 0
    stale = col["staleness"][consumed]
    # a resumed sample's oldest tokens: generated with its first segment's weights (partial rollouts)
    oldest = col["consumed_iteration"][consumed] - col["first_version"][consumed]
    generated = col["generated_tokens"]
    if dropped is None:
        dropped = Counter(samples["drop_reason"].array[col["dropped"].astype(bool)].tolist())
    out = {"consumed": int(consumed.sum()),
           "trained_tokens": float((col["prompt_len"][consumed] + col["response_len"][consumed]).sum()),
           "gen_tokens": float(generated[col["finish"] <= T + 1e-9].sum()),
           "all_gen": float(generated.sum()),
           "stale_max": float(stale.max()) if len(stale) else 0.0,
           "stale_mean": float(stale.mean()) if len(stale) else 0.0, "generated": rows,
           "oldest_max": float(oldest.max()) if len(oldest) else 0.0,
           "dropped": {str(reason): n for reason, n in dropped.items()}}
    if not retired.count:
        return out
    if retired.max_finish > T + 1e-9:
        raise AssertionError("a retired sample finished after the run")
    n_stale = out["consumed"] + retired.consumed
    held_stale = float(stale.sum())
    dropped = dict(retired.dropped)
    for reason, c in out["dropped"].items():
        dropped[reason] = dropped.get(reason, 0) + int(c)
    return {"consumed": n_stale, "trained_tokens": out["trained_tokens"] + retired.trained_tokens,
            "gen_tokens": out["gen_tokens"] + retired.generated_tokens,
            "all_gen": out["all_gen"] + retired.generated_tokens,
            "stale_max": max(retired.staleness_max, float(stale.max()) if len(stale) else -math.inf) if n_stale else 0.0,
            "stale_mean": (held_stale + retired.staleness_sum) / n_stale if n_stale else 0.0,
            "oldest_max": max(retired.oldest_token_max, out["oldest_max"] if len(oldest) else -math.inf)
            if n_stale else 0.0,
            "generated": rows + retired.count, "dropped": dropped,
            **({"rows_kept": rows} if table else {})}


def summary(rec: RunRecord, timeline: pd.DataFrame, samples: pd.DataFrame | None = None) -> dict:
    """The `rlsim run --json` object (``timeline``: rec.timeline.to_frame(); ``samples``:
    rec.samples.to_frame(), or None: the figures read the store's columns, the same values, without
    a frame that no output shows)."""
    sc = rec.scenario
    T = rec.makespan_s
    held = rec.samples.flat() if samples is None else samples
    fig = sample_figures(held, rec.samples.retired, T, rec.samples.table, rec.samples.drop_counts())
    n_consumed, trained_tokens, gen_tokens, all_gen = fig["consumed"], fig["trained_tokens"], fig["gen_tokens"], fig["all_gen"]
    gen_flops = rec.gen_flops * (gen_tokens / all_gen if all_gen > 0 else 0.0)
    bubble_fraction, by_cause = bubbles(timeline)
    window = steady_window(rec, timeline)
    steady_bubble, steady_causes = bubbles(window)
    its = max(1, len(rec.iterations))
    steady_step, steady_tps = steady_state(rec)
    peak = rec.peak_flops * rec.n_devices
    roofline = peak / (rec.train_flops_per_token * sc.workload.ppo_epochs) if rec.train_flops_per_token else math.inf
    out = {
        "schedule": sc.schedule.kind,
        "placement": sc.schedule.effective_placement,
        "workload": sc.workload.name,
        "model": sc.workload.model,
        "algorithm": sc.workload.algorithm,
        "devices": rec.n_devices,
        "pools": {k: p.count for k, p in rec.pools.items()},
        "iterations": len(rec.iterations),
        "makespan_s": T,
        "step_time_s": T / its,
        "tokens_per_s": trained_tokens / T if T > 0 else 0.0,
        "tokens_per_s_per_device": trained_tokens / T / rec.n_devices if T > 0 else 0.0,
        "steady_step_time_s": steady_step,
        "steady_tokens_per_s": steady_tps,
        "steady_tokens_per_s_per_device": steady_tps / rec.n_devices,
        "generated_tokens_per_s": gen_tokens / T if T > 0 else 0.0,
        "samples_per_s": n_consumed / T if T > 0 else 0.0,
        "bubble_fraction": bubble_fraction,
        "bubbles_by_cause": by_cause,
        # of the idle device time, the waits for rule rewards (idle labelled reward, under the cause
        # dependency): on a colocated run the critical path's "reward"; a split pool's trainer waits
        # on its own devices only (verl-fully-async's: the batch generated, its rewards not yet)
        "reward_wait_fraction": reward_wait_share(timeline),
        "steady_bubble_fraction": steady_bubble,
        "steady_bubbles_by_cause": steady_causes,
        "steady_busy_by_pool": busy_by_pool(window),
        "stage_time_s": {k: v / its for k, v in sorted(rec.stage_time_s.items())},
        "mfu": (rec.flops + gen_flops) / (peak * T) if T > 0 else 0.0,
        "staleness": {"max": fig["stale_max"], "mean": fig["stale_mean"], "bound": sc.schedule.staleness_bound,
                      # versions between a trained sample's first tokens and its step: above max where a
                      # sample was resumed over weight updates (partial rollouts, request-fed kinds)
                      "oldest_token_max": fig["oldest_max"],
                      # a resumed sample's staleness is its last version's; the bound also holds back
                      # where resumed work starts (the note below cannot read "never binds" off it)
                      **({"partial_rollout": True} if getattr(sc.schedule, "partial_rollout", False) else {}),
                      **_segment_figures(sc)},
        "peak_memory_bytes": rec.peak_memory_bytes,
        # by phase: train is what `rlsim plan` reports for a layout (training and forwards), rollout the
        # engine's reservation (+ the training state a colocated placement leaves resident)
        "peak_memory_by_phase": {phase: float(v) for phase, v in sorted(rec.phase_peak_bytes.items())},
        "roofline_tokens_per_s": roofline,
        "samples": sample_counts(fig, its, sc.workload, sc.schedule.step_prompts(sc.workload)),
        "distqueue": {k: float(v) for k, v in rec.queue.items()},
        "rollout": {**rollout_utilization(rec, gen_tokens), **rollout_counts(rec, gen_tokens)},
        "switch_bytes": {k: float(v) for k, v in sorted(rec.switch_bytes.items())},
    }
    verl = verl_phases(rec, timeline)
    if verl is not None:      # verl's timing_s/<name> phases, seconds per step
        out["verl_timing_s"] = verl_timing(rec, verl)
        if sc.output.timers == "nemo-rl":
            out["nemo_rl_timing_s"] = nemo_rl_timing(verl, out["stage_time_s"])
    if sc.output.timers == "openrlhf":   # the hybrid engine from verl's phases, split pools from the steps
        hybrid = sc.schedule.kind == "colocated"
        openrlhf = (openrlhf_timing(rec, verl, out["stage_time_s"]) if hybrid and verl is not None
                    else None if hybrid else openrlhf_split_timing(rec, timeline))
        if openrlhf is not None:
            out["openrlhf_timing_s"] = openrlhf
    if rec.planning_s > 0:    # layout: auto (state plan at the start of the timeline)
        out["planning_s"] = rec.planning_s
    if rec.failures:          # schedule.failures (rl/schedules/failures.py)
        out["failures"] = rec.failures
    for key, value in rec.extra.items():   # a schedule's own figures (e.g. verl's fully async metrics)
        out.setdefault(key, value)
    return out


def sample_counts(fig: Mapping[str, Any], iterations: int, workload: Any, step_prompts: int) -> dict[str, Any]:
    """Generated, consumed and dropped samples (``fig``: sample_figures); `trained_per_step` against
    `batch` (the schedule's prompts per step, ScheduleConfig.step_prompts, x samples_per_prompt), and
    `stale_fraction`, the generated samples thrown away as too old: StaleSync on split pools with
    staleness 0 trains about half a batch per step and drops ~40% as stale, so its step time and device-hours per step
    are not comparable with a schedule that trains whole batches. `rows_kept`: only under output.keep_sample_rows, the per-sample
    table's rows once older ones were folded into these counts."""
    dropped = {str(k): int(v) for k, v in sorted(fig["dropped"].items())}
    generated, consumed = int(fig["generated"]), int(fig["consumed"])
    out = {"generated": generated, "consumed": consumed, "dropped": dropped,
           "batch": int(step_prompts * workload.samples_per_prompt),
           "trained_per_step": consumed / max(1, iterations),
           "stale_fraction": dropped.get("stale", 0) / generated if generated else 0.0}
    if "rows_kept" in fig:
        out["rows_kept"] = int(fig["rows_kept"])
    return out


# A run that throws away at least this share of its generated samples as stale gets a note: its
# step time and device-hours per step count steps that train a partial batch (a reporting threshold).
STALE_NOTE_SHARE = 0.05


def warm_up_only(summary: Mapping[str, Any]) -> bool:
    """One iteration of a schedule that runs ahead of its trainer: the steady figures are its warm-up
    step's (a pipeline filling, a partial batch)."""
    return summary.get("iterations") == 1 and summary.get("schedule") not in ON_POLICY_KINDS


def _segment_figures(sc: Any) -> dict[str, int]:
    """Partial rollouts cut at a length budget: the budget and the segments the response law's longest
    response takes, ceil(max / length_budget), one a round (scenario.check_segments); {} otherwise."""
    budget = getattr(sc.schedule, "length_budget", None)
    longest = sc.workload.response_length.get("max")
    if not (getattr(sc.schedule, "partial_rollout", False) and budget and isinstance(longest, (int, float))):
        return {}
    return {"length_budget": int(budget), "segments_longest": math.ceil(longest / budget)}


def _unfinished_segments_note(summary: Mapping[str, Any]) -> str:
    """Partial rollouts over fewer iterations than the longest response's segments: the samples cut at
    the budget and still in flight at the run's end never trained (the longest of the law never can),
    so tokens/s and the trained lengths read low against a steady run (a report audit: longest trained
    6,652 of a law with 42% at 8,192, 9.1k tokens/s against 32.6k without partial rollouts)."""
    stale, flight = summary.get("staleness") or {}, summary.get("samples_in_flight") or {}
    segments, budget, cut = stale.get("segments_longest"), stale.get("length_budget"), flight.get("cut", 0)
    iterations = summary.get("iterations") or 0
    if not (segments and budget and cut) or iterations >= segments:
        return ""
    return (f"partial rollouts: {cut:,} cut samples never finished by the run's end (of "
            f"{flight.get('trajectories', cut):,} in flight): a response of the law's max takes {segments} segments "
            f"of schedule.length_budget {budget:,} tokens, one a round, and {iterations} iterations are too few, so "
            "the longest responses never train and tokens/s and the trained lengths read low against a steady run; "
            f"run {segments} iterations or more (--iterations; more for a steady state) or give a larger "
            "schedule.length_budget")


def summary_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a reader of the figures must know: a schedule that trains partial batches and drops
    samples as stale (its step time is not comparable; tokens/s counts trained tokens and is), and a
    staleness bound above what the run ever reached (raising it changes nothing here), per-sample
    rows folded into counts (output.keep_sample_rows: the table and the critical path cover fewer),
    a `layout: auto` planned again (a trained batch did not fit its first plan), and partial rollouts
    over too few iterations for their length budget (_unfinished_segments_note)."""
    notes = []
    samples, stale = summary.get("samples") or {}, summary.get("staleness") or {}
    # a kind that bounds a sample's first version (verl-colocate-async's submissions) is read on its oldest tokens
    bound, seen = stale.get("bound", 0.0), max(stale.get("max", 0.0), stale.get("oldest_token_max", 0.0))
    name = f"{summary.get('schedule')} (staleness {'unbounded' if bound is None else f'{bound:g}'})"
    if samples.get("stale_fraction", 0.0) >= STALE_NOTE_SHARE:
        notes.append(f"{name} drops {samples['stale_fraction']:.0%} of its generated samples as stale and trains "
                     f"{samples['trained_per_step']:,.0f} samples per step of a {samples['batch']:,}-sample batch: "
                     f"its step time (and device-hours per step) is not comparable with whole-batch schedules; "
                     f"compare tokens/s and device-hours per 1M tokens (trained tokens)")
    if bound is not None and math.isfinite(bound) and bound != math.floor(bound):
        notes.append(f"staleness bound {bound:g} acts as {math.floor(bound)}: weights versions are whole steps, so a "
                     f"sample is at most {math.floor(bound)} version(s) old either way (docs/schedules.md)")
    if "rows_kept" in samples:   # output.keep_sample_rows retired rows: what the rows no longer cover
        walked = (summary.get("critical_path") or {}).get("steps_walked", "every step")
        notes.append(f"output.keep_sample_rows: the per-sample table (samples.csv, the report's length and "
                     f"staleness figures) holds the last {samples['rows_kept']:,} of {samples['generated']:,} "
                     f"samples and the critical path covers {walked}; every other figure counts all samples")
    if bound is not None and math.isfinite(bound) and bound >= 2 and seen < bound and not stale.get("partial_rollout"):
        colocated = summary.get("schedule") == "stalesync" and summary.get("placement") == "colocated"
        why = (": colocated StaleSync generates on the training devices between steps, so a sample is at "
               "most one version old" if colocated else "")
        iterations = summary.get("iterations") or 0
        if not colocated and iterations <= bound + 1:   # too short a run to reach the bound: say that, not "never"
            notes.append(f"staleness bound {bound:g} not reached in {iterations} iteration(s): the samples trained were "
                         f"at most {seen:g} version(s) old; the run ends before the trainer can lag {bound:g} versions, "
                         f"so run more than {bound + 1:g} iterations for a steady state at this bound")
        else:
            notes.append(f"staleness bound {bound:g} never binds: the samples trained were at most {seen:g} "
                         f"version(s) old{why}; a bound above {seen:g} gives the same run")
    bound = _bound_elsewhere(summary)
    if bound:
        notes.append(bound)
    tail = _tail_bound(summary)
    if tail:
        notes.append(tail)
    unfinished = _unfinished_segments_note(summary)
    if unfinished:
        notes.append(unfinished)
    replanned = (summary.get("auto_layout") or {}).get("replanned") or []
    if replanned:   # the layout that ran is not the planner's first answer: say why
        first = replanned[0]["layout"]
        notes.append(f"layout: auto planned {len(replanned) + 1} times: a batch this run trained (long samples "
                     f"together) did not fit the first plan's training layout ({_layout_text(first)}), which the "
                     "planner judged on drawn batches; the layout that ran fits every batch it trained "
                     "(auto_layout.replanned)")
    if warm_up_only(summary):
        notes.append(f"one iteration: {summary.get('schedule')} runs ahead of its trainer, so its first step is a "
                     "warm-up (a pipeline filling, a partial batch) and the steady figures are that step's; run 2 "
                     "or more iterations (--iterations) for a steady state")
    compared = ((summary.get("auto_layout") or {}).get("train") or {}).get("compared")
    if compared:   # layout: auto ran two layouts (colocated StaleSync): which, and why this one
        kept = max(compared, key=lambda c: c["steady_tokens_per_s"])
        other = compared[1] if kept is compared[0] else compared[0]
        notes.append(f"layout: auto ran two training layouts and kept the faster: {_layout_text(kept['layout'])} "
                     f"({'consolidating' if kept['consolidates'] else 'synchronous'}, "
                     f"{kept['steady_tokens_per_s']:,.0f} tokens/s steady) against {_layout_text(other['layout'])} "
                     f"({'consolidating' if other['consolidates'] else 'synchronous'}, "
                     f"{other['steady_tokens_per_s']:,.0f}): the planner ranks training alone, and the fastest "
                     "layout left StaleSync's tail no room (auto_layout.train.compared)")
    no_room = summary.get("stalesync_no_room")
    if no_room:   # StaleSync that never split: a training group as large as the pool leaves no room beside the tail
        notes.append(f"StaleSync ran {no_room['steps']} step(s) synchronous: the training layout trains in groups of "
                     f"{no_room['train_group_devices']} devices, and none fits beside even one rollout instance's tail "
                     f"on the {no_room['pool_devices']}-device pool, so the tail never consolidates (the figures are "
                     "a synchronous colocated run's); give a layout whose tp x cp x pp (with its expert fold) leaves "
                     "room, or compare against kind: colocated")
    return notes


# A split-pool run's other pool is "the bound" when it is busy at least this share of the steady
# state and this much more than the pool of the critical path's bottleneck (a reading rule for the
# note below, not a modelling constant).
BOUND_BUSY_SHARE = 0.95
BOUND_BUSY_MARGIN = 0.10
ROLLOUT_SIDE = ("generate", "long_tail", "reward")
TRAIN_SIDE = ("train", "forward", "pipeline_bubble")


def _bound_elsewhere(summary: Mapping[str, Any]) -> str:
    """On split pools the per-step critical path starts at the step's start, so a trainer that
    never waits has all its work on the path even when generation, busy the whole time on the other
    pool, sets the pace (an idle-time trial: 'bottleneck train', and 2.2 s less training a step
    saved nothing). Said when the other pool is the one busy throughout."""
    busy = summary.get("steady_busy_by_pool") or {}
    bottleneck = (summary.get("critical_path") or {}).get("bottleneck", "")
    side = "rollout" if bottleneck in ROLLOUT_SIDE else "train" if bottleneck in TRAIN_SIDE else ""
    other = {"rollout": "train", "train": "rollout"}.get(side, "")
    if not (side in busy and other in busy):
        return ""
    if busy[other] < BOUND_BUSY_SHARE or busy[other] - busy[side] < BOUND_BUSY_MARGIN:
        return ""
    delta = (summary.get("critical_path") or {}).get("free_delta_s", {}).get(bottleneck, 0.0)
    return (f"the critical path's bottleneck is {bottleneck} (free delta {delta:,.1f} s a step: an upper bound, the "
            f"pools overlap), but the {other} pool is busy {busy[other]:.0%} of the steady state against "
            f"{busy[side]:.0%} for the {side} pool: the {other} side sets the pace, and shortening {bottleneck} "
            "alone gains little (steady_busy_by_pool)")


# Colocated StaleSync whose trainers idle at least this share of the steady state waiting for the
# consolidated tail, or whose tail devices idle it waiting for the training (a reading rule for the
# note below, not a modelling constant)
TAIL_NOTE_SHARE = 0.25


def _tail_bound(summary: Mapping[str, Any]) -> str:
    """Colocated StaleSync trains beside its consolidated tail; where the tail outlasts the training
    by far, the trainers idle and the tail sets the step (a capacity trial: 3 CloudMatrix supernodes,
    StaleSync 0.94x colocated with 40% of the steady state long_tail, unexplained); where the training
    outlasts the tail, the tail's devices idle and the training on fewer devices sets it."""
    stages = summary.get("stage_time_s") or {}
    if summary.get("schedule") != "stalesync" or "tail_generate" not in stages:
        return ""
    bubbles = summary.get("steady_bubbles_by_cause") or {}
    share, waiting = bubbles.get("long_tail", 0.0), bubbles.get("dependency", 0.0)
    beside = sum(stages.get(k, 0.0) for k in ("old_logprob", "reference", "critic_values", "train_actor", "train_critic"))
    tail = stages["tail_generate"]
    if share >= TAIL_NOTE_SHARE:
        return (f"the consolidated tail generates {tail:,.1f} s a step against {beside:,.1f} s of "
                f"training beside it, so the trainers idle {share:.0%} of the steady state (long_tail): the longest "
                "responses set the step; partial rollouts (schedule.partial_rollout: true with a length_budget) cut "
                "them into segments trained later (docs/schedules.md, StaleSync)")
    if waiting >= TAIL_NOTE_SHARE and beside > tail:   # the other way round (a notebook trial: 0.78x colocated)
        return (f"the training beside the consolidated tail takes {beside:,.1f} s a step against the tail's "
                f"{tail:,.1f} s, so the devices the tail held idle {waiting:.0%} of the steady state (dependency): "
                "training on the share of the devices the tail leaves sets the step; a smaller "
                "schedule.consolidate_share gives it more of them (the colocated kind trains on all)")
    return ""


def _layout_text(layout: Mapping[str, Any]) -> str:
    """'tp 1, pp 1, cp 1, zero 2, recompute none, micro_batch 1' (the keys a layout gives, vpp/ep at 1 left out)."""
    return ", ".join(f"{k} {v}" for k, v in layout.items() if not (k in ("vpp", "ep") and v == 1))


# kinds whose every step runs the same way from the first (no pipeline to fill): one iteration is a steady step
ON_POLICY_KINDS = ("colocated", "disaggregated")


def scaling_efficiency(devices: Sequence[int], tokens_per_s: Sequence[float]) -> pd.DataFrame:
    """Per-device throughput relative to the smallest configuration (1.0 = linear scaling)."""
    frame = pd.DataFrame({"devices": list(devices), "tokens_per_s": list(tokens_per_s)}).sort_values("devices")
    base = frame.iloc[0]
    frame["speedup"] = frame["tokens_per_s"] / base["tokens_per_s"]
    frame["scaling_efficiency"] = frame["speedup"] / (frame["devices"] / base["devices"])
    return frame.reset_index(drop=True)
