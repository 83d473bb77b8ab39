"""Real run logs: per-step timing metrics of a verl or NeMo RL run (JSONL, JSON records, CSV or a
wandb CSV export), per-stage scale factors between measured and predicted stage times, and
predictions at other scales with those factors.

verl logs one record per step with keys such as `timing_s/gen` (the generation with the hybrid
engine's switches and weight sync around it; `timing_s/generate_sequences` the generation alone), `timing_s/old_log_prob`,
`timing_s/ref`, `timing_s/update_actor`, `timing_s/update_weights`, `timing_s/step` (`timing_s/adv` read
into `timing_s/reward`'s stage: VERL_ADVANTAGE_KEY),
`perf/throughput` (tokens/s per device) and `response_length/mean|max|min|clip_ratio`. NeMo RL
logs its timers as `timing/train/<name>` (`total_step_time`, `generation`, `policy_training`,
`policy_and_reference_logprobs` or `logprob_inference`, `weight_sync`, `reward_calculation`,
`exposed_generation`; ../shared/reference/frameworks.md and NeMo RL algorithms/grpo.py timers).
OpenRLHF logs `timing/generation`, `timing/make_experience`, `timing/ppo_train`, `timing/broadcast`
and `timing/step_total` (trainer/ppo_trainer.py, read in its 0.11.2 wheel; its wandb and TensorBoard
loggers write them under `train/`: train/timing/generation, ...): its generation is NeMo RL's key,
its other phases stages of their own, predicted by a scenario with `output.timers: openrlhf`.
SkyRL logs its Timer names under `timing/` (skyrl 0.3.0 trainer.py / fully_async_trainer.py, read in
its wheel): `generate`, `fwd_logprobs_values_reward` (the critic's, reference's and policy's forwards:
the `logprobs` stage with the values), `policy_train`, `critic_train`, `sync_weights` (colocated: the
engines' wake and the policy's offload with the transfer), `run_training` (fully async: forwards and
updates) and `step`.
TRL (1.16, read in its wheel) logs `step_time` (trainer/grpo_trainer.py and rloo_trainer.py
`training_step`: an optimizer step's training steps, generation, scoring and passes included; the
mean over `logging_steps` when the Trainer logs) in the Trainer's `log_history` (trainer_state.json)
and as `train/step_time` to wandb, and its profiling timers as `profiling/Time taken:
<GRPOTrainer|RLOOTrainer>.<name>` (extras/profiling.py): `vLLM.generate` / `transformers.generate` /
`transformers.generate_batch` (-> generate), `sync_weights` (the weights into the engine, colocated
with its weights woken first: SkyRL's stage of that name), `_calculate_rewards` (-> reward).
AReaL (1.0.4, read in its wheel: trainer/rl_trainer.py) times each step's phases with
`stats_tracker.record_timing`, logged as `timeperf/<name>` at the Trainer's global step:
`rollout` (a stage of its own: colocated the generation, on split pools the trainer's wait for its
batch), `recompute_logp` (-> old_log_prob), `ref_logp` (-> reference), `critic_values` (-> values),
`train_step` (-> update_actor), `critic_train_step` (-> update_critic), `update_weights` (->
weight_sync); it times no whole step.
A JSONL file has one JSON object per line (verl's FileLogger's {"step": N, "data": {...}} read as the
data at step N), a .json file may also hold one array of such objects
(`run.history()` records) or a Trainer state (an object whose `log_history` is the records), a CSV
has the keys as column names; a wandb panel export ("Step",
"RUN - KEY", "RUN - KEY__MIN", "RUN - KEY__MAX") is read as the CSV of one run, and TensorBoard scalars
as a CSV of one row per tag and step (step, tag, value; run or dir_name naming runs) as one column per tag.
Metric names outside these tables are ignored and listed (`RunLog.ignored`); a log with none of
the known timing names is an error. Records sharing a step number are one step (`_one_record_per_step`).
"""
from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import RlsimError
from ..units import whole_number

if TYPE_CHECKING:  # pandas is imported where a log is read: `rlsim --help` builds this parser
    import pandas as pd

# Log key -> stage name used here. `gen` is rollout generation; the others are forward or train passes.
VERL_STAGE_KEYS: dict[str, str] = {
    # verl's gen holds generate_sequences' switches and weight sync around the generation (metrics.verl_timing);
    # the generation alone is timed inside it as generate_sequences (verl 0.6.0 fsdp_workers.py simple_timer,
    # logged through the output's meta_info timing)
    "timing_s/gen": "generate",
    "timing_s/generate_sequences": "generate_sequences",
    "timing_s/old_log_prob": "old_log_prob",
    "timing_s/ref": "reference",
    "timing_s/values": "values",
    "timing_s/update_critic": "update_critic",
    "timing_s/update_actor": "update_actor",
    "timing_s/reward": "reward",
    "timing_s/update_weights": "weight_sync",   # newer verl: the trainer -> engine weight update
    "timing_s/wait_prev_gen": "wait_prev_gen",  # one_step_off_policy: the trainer's wait instead of gen
}
# NeMo RL timer names (logged under the `timing/train/` prefix) -> stage names. The log-prob pass of
# the policy and the reference share one timer, so it is its own stage: `logprobs`.
NEMO_STAGE_NAMES: dict[str, str] = {
    "generation": "generate",
    "policy_training": "update_actor",
    "policy_and_reference_logprobs": "logprobs",
    "logprob_inference": "logprobs",
    "weight_sync": "weight_sync",
    "reward_calculation": "reward",
    "exposed_generation": "wait_prev_gen",
}
# under the prefixes NeMo RL's loggers write them with, or bare (its Timer's own dict of timings)
NEMO_PREFIXES = ("timing/train/", "timing/", "")
NEMO_STAGE_KEYS: dict[str, str] = {f"{prefix}{name}": stage for name, stage in NEMO_STAGE_NAMES.items()
                                   for prefix in NEMO_PREFIXES}
# OpenRLHF's timers beside generation (logged as timing/<name>; metrics.OPENRLHF_TIMERS predicts them).
# Its console line (logger.info of the status dict) names them bare; its wandb and TensorBoard loggers
# under train/ (0.11.2 utils/logging_utils.py log_train: "train/%s" % k, the step as train/global_step).
OPENRLHF_PREFIXES = ("", "train/")
OPENRLHF_TIMER_STAGES: dict[str, str] = {"timing/make_experience": "make_experience", "timing/ppo_train": "ppo_train",
                                         "timing/broadcast": "broadcast"}
OPENRLHF_STAGE_KEYS: dict[str, str] = {f"{prefix}{name}": stage for name, stage in OPENRLHF_TIMER_STAGES.items()
                                       for prefix in OPENRLHF_PREFIXES}
# its generation is NeMo RL's key bare (NEMO_STAGE_KEYS); under train/ it is OpenRLHF's alone
OPENRLHF_GENERATION_KEYS = tuple(f"{prefix}timing/generation" for prefix in OPENRLHF_PREFIXES)
# SkyRL's Timer names (logged as timing/<name>) -> stage names: its own where a phase holds more than
# one of rlsim's (sync_weights, run_training).
SKYRL_STAGE_KEYS: dict[str, str] = {"timing/generate": "generate", "timing/fwd_logprobs_values_reward": "logprobs",
                                    "timing/policy_train": "update_actor", "timing/critic_train": "update_critic",
                                    "timing/sync_weights": "sync_weights", "timing/run_training": "run_training"}
# TRL's profiling timers (extras/profiling.py: "profiling/Time taken: <trainer class>.<name>").
TRL_TIMER_PREFIX = "profiling/Time taken: "
TRL_TRAINERS = ("GRPOTrainer", "RLOOTrainer")
TRL_STAGE_NAMES: dict[str, str] = {"vLLM.generate": "generate", "transformers.generate": "generate",
                                   "transformers.generate_batch": "generate", "sync_weights": "sync_weights",
                                   "_calculate_rewards": "reward"}
TRL_STAGE_KEYS: dict[str, str] = {f"{TRL_TIMER_PREFIX}{trainer}.{name}": stage for trainer in TRL_TRAINERS
                                  for name, stage in TRL_STAGE_NAMES.items()}
# AReaL's stats_tracker.record_timing names (logged as timeperf/<name>) -> stage names.
AREAL_TIMER_STAGES: dict[str, str] = {"rollout": "rollout", "recompute_logp": "old_log_prob", "ref_logp": "reference",
                                      "critic_values": "values", "train_step": "update_actor",
                                      "critic_train_step": "update_critic", "update_weights": "weight_sync"}
AREAL_STAGE_KEYS: dict[str, str] = {f"timeperf/{name}": stage for name, stage in AREAL_TIMER_STAGES.items()}
STAGE_KEYS: dict[str, str] = {**VERL_STAGE_KEYS, **NEMO_STAGE_KEYS, **dict.fromkeys(OPENRLHF_GENERATION_KEYS, "generate"),
                              **OPENRLHF_STAGE_KEYS, **SKYRL_STAGE_KEYS,
                              **TRL_STAGE_KEYS, **AREAL_STAGE_KEYS}
STAGES = tuple(dict.fromkeys(STAGE_KEYS.values()))
STEP_TIME_KEY = "timing_s/step"
OPENRLHF_STEP_TIME_KEYS = tuple(f"{prefix}timing/step_total" for prefix in OPENRLHF_PREFIXES)
SKYRL_STEP_TIME_KEY = "timing/step"
RLSIM_STEP_TIME_KEY = "step_time_s"   # rlsim's own iterations.csv (rlsim run --out)
TRL_STEP_TIME_KEYS = ("step_time", "train/step_time")   # the Trainer's log_history / wandb's train/ prefix
STEP_TIME_KEYS = (STEP_TIME_KEY, *(f"{prefix}total_step_time" for prefix in NEMO_PREFIXES), *OPENRLHF_STEP_TIME_KEYS,
                  SKYRL_STEP_TIME_KEY, *TRL_STEP_TIME_KEYS, RLSIM_STEP_TIME_KEY)
# Each framework's timing names (the tables above): whose names a log was read by.
FRAMEWORK_TIMING_KEYS: dict[str, frozenset[str]] = {
    "verl": frozenset({*VERL_STAGE_KEYS, STEP_TIME_KEY}),
    "NeMo RL": frozenset({*NEMO_STAGE_KEYS, *(f"{prefix}total_step_time" for prefix in NEMO_PREFIXES)}),
    "OpenRLHF": frozenset({*OPENRLHF_GENERATION_KEYS, *OPENRLHF_STAGE_KEYS, *OPENRLHF_STEP_TIME_KEYS}),
    "SkyRL": frozenset({*SKYRL_STAGE_KEYS, SKYRL_STEP_TIME_KEY}),
    "TRL": frozenset({*TRL_STAGE_KEYS, *TRL_STEP_TIME_KEYS}),
    "AReaL": frozenset(AREAL_STAGE_KEYS),
    "rlsim": frozenset({RLSIM_STEP_TIME_KEY}),
}
OTHER_KEYS: dict[str, str] = {
    "perf/throughput": "throughput_tokens_per_s_per_device",
    "response_length/mean": "response_length_mean",
    "response_length/max": "response_length_max",
    "response_length/min": "response_length_min",
    "response_length/clip_ratio": "response_clip_ratio",
    "prompt_length/mean": "prompt_length_mean",
}
# Bounds of what a log can hold: a phase of one RL step longer than 1e7 s (116 days) is not one (the
# means and sums of such values overflow), and a step number past 2^53 is not a whole number a
# float keeps exactly (nor one an int64 column holds once above 2^63).
MAX_LOGGED_S = 1e7
MAX_STEP_NUMBER = 2.0 ** 53
STEP_KEYS = ("step", "training/global_step", "global_step", "train/global_step", "Step", "_step", "iteration")
# Bookkeeping columns of a wandb history export: neither metrics nor unknown names.
BOOKKEEPING_KEYS = frozenset({"_runtime", "_timestamp", "_wandb", "Wall time", "Relative Time (Process)"})
# the column where read_run_log keeps each record's place in its file ('line 12'), for errors
LOCATION = "__where__"
WANDB_RUN_SEPARATOR = " - "
WANDB_AGGREGATE_SUFFIXES = ("__MIN", "__MAX")
# rlsim `stage_time_s` names -> log stage names (what a simulated summary predicts).
SIM_STAGE_NAMES: dict[str, str] = {"generate": "generate", "rollout": "generate", "old_logprob": "old_log_prob",
                                   "old_log_prob": "old_log_prob", "reference": "reference", "ref": "reference",
                                   "train": "update_actor", "train_actor": "update_actor", "update_actor": "update_actor",
                                   "train_critic": "update_critic",
                                   "critic": "update_critic", "values": "values"}


@dataclass
class RunLog:
    """One row per step: `step`, the stage columns present (seconds), `step_s`, and the other metrics.
    `ignored` lists the log's metric names outside the known tables (not read)."""

    frame: pd.DataFrame
    source: str
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # how the log's records became steps (re-logged steps)
    timing_keys: list[str] = field(default_factory=list)   # the log's metric names read as timings

    @property
    def matched_names(self) -> str:
        """Whose timing names the log was read by, e.g. "verl's (timing_s/gen, timing_s/step)"
        ('' for a log built in memory)."""
        if not self.timing_keys:
            return ""
        keys = set(self.timing_keys)
        whose = [name for name, names in FRAMEWORK_TIMING_KEYS.items() if keys <= names] or \
            [name for name, names in FRAMEWORK_TIMING_KEYS.items() if keys & names]
        return f"{' or '.join(whose)}'s ({', '.join(self.timing_keys)})"

    @property
    def stages(self) -> list[str]:
        return [s for s in STAGES if s in self.frame.columns]

    @property
    def timings(self) -> list[str]:
        """The logged stages and, when logged, the whole step (`step_s`)."""
        return [*self.stages, *(["step_s"] if "step_s" in self.frame.columns else [])]

    def stage_means(self, skip_steps: int = 0) -> dict[str, float]:
        rows = self.frame.iloc[skip_steps:]
        if rows.empty:
            raise no_steps_left(self, skip_steps)
        return {s: float(rows[s].mean()) for s in self.stages}


def no_steps_left(log: RunLog, skip_steps: int) -> RlsimError:
    """The error of a log with no step left after the --skip-steps warm-up steps."""
    if log.frame.empty:
        return RlsimError("the log has no steps (no row with a stage timing)", source=log.source,
                          fix="give a log with per-step timings")
    return RlsimError(f"no steps left after skipping {skip_steps} (the log has {len(log.frame)})",
                      source=log.source, field="--skip-steps",
                      fix=f"give --skip-steps {len(log.frame) - 1} or fewer")


def _loads(text: str) -> Any:
    """json.loads with the parser's own limits as JSONDecodeError: a number of more than 4,300 digits
    (ValueError) or an array nested past the recursion limit (RecursionError)."""
    try:
        return json.loads(text, object_pairs_hook=_object_once)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise json.JSONDecodeError(what, text, 0) from None


def _object_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are given once (json keeps the last of a repeated key without a word:
    one of two timings of a phase dropped)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice")
        out[key] = value
    return out


def _json_object(text: str, source: str, where: str) -> dict[str, Any]:
    try:
        record = _loads(text)
    except json.JSONDecodeError as exc:
        raise RlsimError(f"{where} is not JSON: {exc.msg}", source=source,
                         fix="write one JSON object per line (or give verl's console output, whose "
                             "'step:N - key:value - ...' lines are read)") from None
    if not isinstance(record, dict):
        raise RlsimError(f"{where} is not a JSON object", source=source, fix="write one JSON object per line")
    return record


# verl's console logger prints a step as 'step:N - key:value - key:value', each number in full
# (verl 0.7.0 verl/utils/logger/aggregate_logger.py concat_dict_to_str: f"{k}:{pprint.pformat(v)}",
# read in its wheel), after whatever prefix the process adds (Ray's '(TaskRunner pid=...)').
VERL_CONSOLE_LINE = re.compile(r"(?:^|\s)step:(\d+) - (\S+:\S+(?: - \S+:\S+)*)\s*$")


def _records_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The file's records, where each was read ('line N' / 'record N') and notes on how."""
    text = path.read_text(encoding="utf-8-sig")   # a byte-order mark is no part of the first line
    # a Hugging Face Trainer state (trainer_state.json: TRL): its log_history, already parsed
    records = _whole_file_records(text)
    if records is not None or text.lstrip().startswith("["):   # or one JSON array (wandb run.history())
        try:
            records = records if records is not None else _loads(text)
        except json.JSONDecodeError as exc:
            raise RlsimError(f"not a JSON array of records: {exc.msg}", source=str(path),
                             fix="write one JSON object per line, or one array of objects") from None
        if _tensorboard_json_download(records):
            raise RlsimError(f"the JSON is {TENSORBOARD_ONE_TAG_WHAT}", source=str(path), fix=TENSORBOARD_EXPORT_FIX)
        where = [f"record {i}" for i in range(1, len(records) + 1)]
        return _checked([_json_object(json.dumps(r), str(path), at) for r, at in zip(records, where, strict=True)],
                        where, str(path))
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if any(VERL_CONSOLE_LINE.search(line) for _, line in lines):
        return _console_records(lines, str(path))
    where = [f"line {number}" for number, _ in lines]
    return _checked([_json_object(line, str(path), at) for (_, line), at in zip(lines, where, strict=True)],
                    where, str(path))


def _tensorboard_json_download(records: Any) -> bool:
    """The TensorBoard UI's JSON download of one tag: a list of [wall_time, step, value] triples."""
    return isinstance(records, list) and bool(records) and all(
        isinstance(r, list) and len(r) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r)
        for r in records)


def _checked(records: list[dict[str, Any]], where: list[str],
             source: str) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """JSON records as rows: verl FileLogger records flattened, no NaN anywhere; with their places and notes."""
    records, notes = _verl_file_records(records, where, source)
    return [_no_nan(record, source, at) for record, at in zip(records, where, strict=True)], where, notes


# verl's FileLogger (trainer.logger=['file']; verl 0.9.1 verl/utils/tracking.py FileLogger.log) writes
# one {"step": N, "data": {metric: value, ...}} a line: the step's metrics one level down.
VERL_FILE_KEYS = frozenset({"step", "data"})


def _verl_file_records(records: list[dict[str, Any]], where: Sequence[str],
                       source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """verl FileLogger records flattened to their metrics and step; other records as they are."""
    flat, count = [], 0
    for record, at in zip(records, where, strict=True):
        data = record.get("data")
        if set(record) != VERL_FILE_KEYS or not isinstance(data, dict):
            flat.append(record)
            continue
        if "step" in data and data["step"] != record["step"]:
            raise RlsimError(f"{at}: step {record['step']!r} holds data with step {data['step']!r}", source=source,
                             field="data.step", fix="give each record one step number")
        flat.append({**data, "step": record["step"]})
        count += 1
    notes = [f"read as verl FileLogger records ({{\"step\": N, \"data\": {{...}}}}): {count} record(s)"] if count else []
    return flat, notes


def _console_records(lines: list[tuple[int, str]], source: str) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """verl console output: its 'step:N - key:value' lines as records; the process's other output
    (warnings, progress bars, Ray's) skipped, and counted in a note."""
    records, where = [], []
    for number, line in lines:
        match = VERL_CONSOLE_LINE.search(line)
        if match is None:
            continue
        record: dict[str, Any] = {"step": int(match.group(1))}
        for item in match.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            if key in record:
                raise RlsimError(f"line {number}: {key!r} is given twice", source=source, fix="give each key once")
            record[key] = value
        records.append(record)
        where.append(f"line {number}")
    skipped = len(lines) - len(records)
    notes = [f"read as verl console output: {len(records)} 'step:N - key:value' line(s); {skipped} other line(s) "
             "skipped"] if skipped else []
    return records, where, notes


def _whole_file_records(text: str) -> list[Any] | None:
    """The records of a file that is one JSON document: a Hugging Face Trainer state's
    (trainer_state.json) `log_history`, or one object (pretty-printed or on one line) as one record;
    None for anything else (JSONL: several objects, one a line)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        whole = _loads(text)
    except json.JSONDecodeError:   # several lines of objects: JSONL
        return None
    history = whole.get("log_history") if isinstance(whole, dict) else None
    return history if isinstance(history, list) else [whole]


def _no_nan(record: dict[str, Any], source: str, where: str) -> dict[str, Any]:
    """A timing logged as NaN is a broken step, refused: in a frame it reads as a metric the record
    did not log, and the step was left out of the fit without a word."""
    for key, value in record.items():
        if isinstance(value, float) and math.isnan(value) and (key in STAGE_KEYS or key in STEP_TIME_KEYS
                                                               or key in OTHER_KEYS):
            raise RlsimError(f"{where}: {key} is NaN", source=source, field=key,
                             fix="drop the steps whose timings the run did not log")
    return record


def _wandb_columns(raw: pd.DataFrame, source: str, run: str | None) -> pd.DataFrame:
    """A wandb panel export ("RUN - KEY" columns, with __MIN / __MAX aggregates) as one run's columns."""
    # the run's display name may hold the separator itself ("qwen7b - grpo"); a metric name does not
    runs = sorted({c.rpartition(WANDB_RUN_SEPARATOR)[0] for c in raw.columns if WANDB_RUN_SEPARATOR in c})
    if not runs:
        if run is not None:
            raise _not_wandb(source, run)
        return raw
    if run is None and len(runs) > 1:
        raise RlsimError(f"the wandb export holds {len(runs)} runs: {', '.join(runs)}", source=source,
                         field="run", fix="export one run, or name it (run= / --log-run NAME)")
    chosen = run if run is not None else runs[0]
    if chosen not in runs:
        raise RlsimError(f"no run {chosen!r} in the wandb export", source=source, field="run",
                         fix=f"use one of: {', '.join(runs)}")
    keep: dict[str, str] = {}
    for column in raw.columns:
        name, sep, key = column.rpartition(WANDB_RUN_SEPARATOR)
        if not sep:
            keep[column] = column
        elif name == chosen and not key.endswith(WANDB_AGGREGATE_SUFFIXES):
            keep[column] = key
    return raw[list(keep)].rename(columns=keep)


# TensorBoard scalars as a table: one row per tag and step (tbparse 0.0.9 SummaryReader.scalars: step,
# tag, value, dir_name with several runs; TensorBoard's ExperimentFromDev.get_scalars(): run, tag, step,
# value), and the TensorBoard UI's download of one tag (Wall time, Step, Value: the tag is not in it).
TENSORBOARD_COLUMNS = ("step", "tag", "value")
TENSORBOARD_RUN_COLUMNS = ("run", "dir_name")
TENSORBOARD_ONE_TAG_COLUMNS = ("Wall time", "Step", "Value")
# what the UI's download of one tag is (as CSV: those columns; as JSON: [wall_time, step, value] triples), and its fix
TENSORBOARD_ONE_TAG_WHAT = ("TensorBoard's download of one tag (wall time, step, value): it holds one TensorBoard "
                            "tag's values, not the tag's name")
TENSORBOARD_EXPORT_FIX = ("export the run's scalars with their tags, e.g. tbparse's "
                          "SummaryReader(LOGDIR).scalars.to_csv(FILE) (columns step, tag, value)")


def _tensorboard_form(raw: pd.DataFrame) -> bool:
    """A table of TensorBoard scalars, one tag per row (or the UI's download of one tag: refused)."""
    columns = [str(c) for c in raw.columns if c != LOCATION]
    if sorted(columns) == sorted(TENSORBOARD_ONE_TAG_COLUMNS):
        return True
    return all(c in columns for c in TENSORBOARD_COLUMNS)


def _tensorboard_records(raw: pd.DataFrame, source: str, run: str | None) -> pd.DataFrame:
    """TensorBoard scalars, one row per tag and step, as one record per row holding its tag's value
    (records of one step are merged as a logger's several calls are: _one_record_per_step)."""
    import pandas as pd

    if "tag" not in raw.columns:
        raise RlsimError(f"the CSV is {TENSORBOARD_ONE_TAG_WHAT}", source=source, fix=TENSORBOARD_EXPORT_FIX)
    runs_column = next((c for c in TENSORBOARD_RUN_COLUMNS if c in raw.columns), None)
    if runs_column is not None:
        runs = sorted({str(name) for name in raw[runs_column]})
        if run is None and len(runs) > 1:
            raise RlsimError(f"the TensorBoard scalars hold {len(runs)} runs: {', '.join(runs)}", source=source,
                             field="run", fix="export one run, or name it (run= / --log-run NAME)")
        if run is not None and run not in runs:
            raise RlsimError(f"no run {run!r} in the TensorBoard scalars", source=source, field="run",
                             fix=f"use one of: {', '.join(runs)}")
        raw = raw[raw[runs_column].astype(str) == (run if run is not None else runs[0])]
    elif run is not None:
        raise _not_wandb(source, run)
    records = [{"step": step, str(tag): value, LOCATION: where}
               for step, tag, value, where in zip(raw["step"], raw["tag"], raw["value"], raw[LOCATION], strict=True)]
    return pd.DataFrame(records, columns=list(dict.fromkeys(["step", *map(str, raw["tag"]), LOCATION])))


def _not_wandb(source: str, run: str) -> RlsimError:
    return RlsimError(f"--log-run {run!r} applies to a wandb CSV export (\"RUN - KEY\" columns) or to "
                      "TensorBoard scalars with a run column; this log is neither", source=source, field="--log-run",
                      fix="drop --log-run (the log holds one run)")


# Delimiters a spreadsheet or logger may write a "CSV" with instead of commas (';' where the decimal
# separator is a comma, e.g. Excel and LibreOffice in a German or French locale; tabs: a TSV).
OTHER_DELIMITERS = (";", "\t", "|")


def _refuse_other_delimiter(header: Sequence[str], path: Path) -> None:
    """A header read as one field that splits into several names at another delimiter: the file is
    not comma-separated (its rows then had 'N fields, the header 1', the delimiter unnamed)."""
    if len(header) != 1:
        return
    delimiter = next((d for d in OTHER_DELIMITERS if len(header[0].split(d)) > 1), None)
    if delimiter is not None:
        raise RlsimError(f"the header is one field {header[0]!r}: the file looks {delimiter!r}-delimited",
                         source=str(path), fix="export the log with commas as the delimiter (and decimal points)")


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV log; a row with more or fewer fields than the header is refused (pandas would shift it
    into the index or fill NaN)."""
    import pandas as pd

    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        twice = sorted({name for name in header or () if header.count(name) > 1})
        if twice:   # pandas renames the second 'x.1', and one of two timings of a phase was read
            raise RlsimError(f"the header names {', '.join(map(repr, twice))} twice", source=str(path),
                             fix="give each column once")
        if header is not None:
            _refuse_other_delimiter(header, path)
            for line, row in enumerate(rows, start=2):
                if row and len(row) != len(header):
                    raise RlsimError(f"line {line} has {len(row)} fields, the header {len(header)}",
                                     source=str(path), fix="write one value per column on every row")
    # an empty cell is a metric the row did not log (a wandb export); a written "nan" is a broken value,
    # read as text so that it is refused (_numbers) rather than taken for an empty cell
    return pd.read_csv(path, index_col=False, keep_default_na=False, na_values=[""])


def read_run_log(path: str | Path, run: str | None = None) -> RunLog:
    """Read a JSONL (.jsonl / .log), JSON (.json: lines, one array or one object), CSV (.csv, a wandb
    export too; `run` picks one run of a multi-run export) or verl console (.log / .txt: its
    'step:N - key:value' lines) log of per-step metrics."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise RlsimError("run log not found", source=str(path), fix="check the path")
    if path.suffix.lower() == ".csv":
        try:
            raw = _read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, csv.Error) as exc:
            raise RlsimError(f"cannot read CSV: {exc}", source=str(path)) from None
        raw[LOCATION] = [f"line {row}" for row in range(2, len(raw) + 2)]
        raw = _tensorboard_records(raw, str(path), run) if _tensorboard_form(raw) else \
            _wandb_columns(raw, str(path), run)
        notes: list[str] = []
    elif path.suffix.lower() in (".jsonl", ".json", ".log", ".txt"):
        if run is not None:
            raise _not_wandb(str(path), run)
        try:
            records, where, notes = _records_jsonl(path)
        except UnicodeDecodeError as exc:
            raise RlsimError(f"not UTF-8 text (byte {exc.start})", source=str(path),
                             fix="save the log as UTF-8") from None
        raw = pd.DataFrame(records)
        raw[LOCATION] = where
    else:
        raise RlsimError(f"unknown log format {path.suffix!r}", source=str(path),
                         fix="use a .jsonl (one JSON object per step), .json, .csv or a verl console .log / .txt")
    return _normalize(raw, str(path), notes)


def _numbers(raw: pd.DataFrame, key: str, source: str) -> pd.Series:
    import pandas as pd

    column = raw[key]
    flags = column.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
    if flags.any():   # JSON true / false: not a number of seconds (pandas would read 1 / 0)
        row = int(np.flatnonzero(flags)[0])
        raise RlsimError(f"{row_name(raw, row)}: {str(bool(column.iloc[row])).lower()} is not a number", source=source,
                         field=key, fix="write plain numbers (seconds, tokens/s, tokens)")
    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna() & column.notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise RlsimError(f"{row_name(raw, row)}: {raw[key].iloc[row]!r} is not a number", source=source,
                         field=key, fix="write plain numbers (seconds, tokens/s, tokens)")
    return values


def row_name(raw: pd.DataFrame, row: int) -> str:
    """Where a record of the log is: its line ('line 12') or array record when read from a file,
    else its row of the frame ('step row 3')."""
    if LOCATION in raw.columns and isinstance(raw[LOCATION].iloc[row], str):
        return str(raw[LOCATION].iloc[row])
    return f"step row {row + 1}"


def _normalize(raw: pd.DataFrame, source: str, notes: Sequence[str] = ()) -> RunLog:
    import pandas as pd

    present = [k for k in STAGE_KEYS if k in raw.columns]
    step_time = _one_key_each(present, [k for k in STEP_TIME_KEYS if k in raw.columns], source)
    if not present and step_time is None:
        raise _no_timing(source)
    step_key = next((k for k in STEP_KEYS if k in raw.columns), None)
    timing_keys = [*present, *([step_time] if step_time else [])]
    raw = raw[raw[timing_keys].notna().any(axis=1)].reset_index(drop=True)  # rows of other metrics only
    notes = list(notes)
    if step_key:
        raw, merged = _one_record_per_step(raw, _steps(raw, step_key, source), step_key, timing_keys)
        notes.extend(merged)
    frame = pd.DataFrame(index=raw.index)
    frame["step"] = _steps(raw, step_key, source) if step_key else np.arange(1, len(raw) + 1)
    for key in [*timing_keys, *(k for k in OTHER_KEYS if k in raw.columns)]:
        values = _numbers(raw, key, source)
        if key in timing_keys:
            _check_timings(raw, values, key, source, frame["step"].to_numpy())
        infinite = ~np.isfinite(values.to_numpy(dtype=float)) & values.notna().to_numpy()
        if infinite.any():
            row = int(np.flatnonzero(infinite)[0])
            raise RlsimError(f"{row_name(raw, row)}: {values.iloc[row]} is not a finite number", source=source,
                             field=key, fix="write finite numbers (seconds, tokens/s, tokens); drop the broken steps")
        frame[STAGE_KEYS.get(key) or OTHER_KEYS.get(key) or "step_s"] = values.to_numpy(dtype=float)
    read_adv = VERL_ADVANTAGE_KEY in raw.columns and VERL_REWARD_KEY in present
    if read_adv:
        notes.append(_with_advantage(raw, frame, source))
    if step_time == STEP_TIME_KEY:
        notes.extend(_without_occasional_work(raw, frame, source))
    notes.extend(_longer_than_the_step(frame, present))
    frame = frame.sort_values("step", kind="stable").reset_index(drop=True)
    _refuse_cumulative(frame, timing_keys, source)
    known = {*STAGE_KEYS, *STEP_TIME_KEYS, *OTHER_KEYS, *STEP_KEYS, *BOOKKEEPING_KEYS, *VERL_OCCASIONAL_KEYS, LOCATION,
             *([VERL_ADVANTAGE_KEY] if read_adv else [])}
    # rlsim's own iterations.csv: its other columns are the step's clock marks and counts, no metrics
    ignored = [] if step_time == RLSIM_STEP_TIME_KEY else sorted(str(c) for c in raw.columns if c not in known)
    return RunLog(frame=frame, source=source, ignored=ignored, notes=notes, timing_keys=timing_keys)


# A timing column that, over at least CUMULATIVE_MIN_STEPS steps in step order, grows at every step by
# at least CUMULATIVE_MIN_GROWTH of its first value is a clock read since the run started (e.g. a
# wall-clock or runtime column exported under a step-time name), not each step's own seconds: every
# framework's timers above time one step's phase. A step's own time may grow as responses lengthen,
# but not by half the first step at every step (after 4 steps 2.5x, after 30 steps 15x the first).
CUMULATIVE_MIN_STEPS = 4
CUMULATIVE_MIN_GROWTH = 0.5


def _refuse_cumulative(frame: pd.DataFrame, timing_keys: Sequence[str], source: str) -> None:
    """A cumulative timing (CUMULATIVE_MIN_GROWTH) is refused, naming its column: fitted as per-step
    seconds it moved the fitted values with only a misfit note to say so."""
    if len(frame) < CUMULATIVE_MIN_STEPS:
        return
    for key in timing_keys:
        values = frame[STAGE_KEYS.get(key, "step_s")].to_numpy(dtype=float)
        growth = np.diff(values)
        if values[0] > 0 and np.all(growth >= CUMULATIVE_MIN_GROWTH * values[0]):
            shown = ", ".join(f"{v:g}" for v in values[:4])
            raise RlsimError(f"{key} grows by at least {CUMULATIVE_MIN_GROWTH:g}x its first value at every step "
                             f"({shown}, ...): a time since the run started, not each step's seconds",
                             source=source, field=key,
                             fix=f"log each step's own {key} (the differences of this column), or drop the column")


# Work verl does on some steps only, timed under its own name: a checkpoint save and a validation
# pass. verl 0.9.1 times save_checkpoint inside its `step` timer and testing after it in its main
# trainers (trainer/ppo/ray_trainer.py, trainer/ppo/v1/trainer_base.py), both after it in the
# one-step-off, separation and fully-async ones: which one a log's step holds is read off the log.
VERL_OCCASIONAL_KEYS = ("timing_s/save_checkpoint", "timing_s/testing")


def _without_occasional_work(raw: pd.DataFrame, frame: pd.DataFrame, source: str) -> list[str]:
    """Take the checkpoint / validation time a verl step logs out of its `step_s` (in place) where
    that step's timer holds it: what is left is at least the step's logged phases and nearer the
    median step of the steps without such work (where the log has any). The rlsim model has no
    checkpoints: left in, they inflated what the fit took for per-step costs. A note per metric."""
    keys = [key for key in VERL_OCCASIONAL_KEYS if key in raw.columns]
    if not keys:
        return []
    extra = {key: _occasional_seconds(raw, key, source) for key in keys}
    plain = ~np.any([seconds > 0 for seconds in extra.values()], axis=0)
    median = float(np.median(frame["step_s"][plain])) if plain.any() else None
    phases = frame[[column for column in STAGES if column in frame.columns]].sum(axis=1).to_numpy()
    notes = []
    for key, seconds in extra.items():
        step_s = frame["step_s"].to_numpy(dtype=float)
        left = step_s - seconds
        inside = (seconds > 0) & (left >= phases)
        if median is not None:
            inside &= np.abs(left - median) < np.abs(step_s - median)
        frame.loc[inside, "step_s"] = left[inside]
        logged = seconds > 0
        if inside.any():
            notes.append(f"{key} ({_steps_shown(frame, inside)}) taken out of {STEP_TIME_KEY}: the logged step "
                         "holds it (less it, the step still holds its phases and is nearer the other steps), and "
                         "rlsim's step does no such work")
        if (logged & ~inside).any():
            notes.append(f"{key} ({_steps_shown(frame, logged & ~inside)}) not fitted, nor taken out of "
                         f"{STEP_TIME_KEY}: the logged step does not hold it (verl times validation, and its "
                         "asynchronous trainers the checkpoint, after the step timer)")
    return notes


# verl's `adv` timer (0.7.0 trainer/ppo/ray_trainer.py fit(), inside its `step` timer after the
# forwards, read in its wheel): it ray.get()s the rule rewards that reward_model.launch_reward_fn_async
# scored as a Ray task during the forwards (the wait rlsim's reward phase holds with
# schedule.reward_during_forwards, verl_timing's reward; its `reward` timer then holds the task's launch
# alone), applies the KL penalty and computes the advantages (host arithmetic rlsim models nowhere, in
# the reward phase here as the rest of the step's glue is in `other`). Read into the reward stage: the
# sum is rlsim's reward phase in both modes, and the step (which holds it) is left as logged.
VERL_ADVANTAGE_KEY = "timing_s/adv"
VERL_REWARD_KEY = "timing_s/reward"


def _with_advantage(raw: pd.DataFrame, frame: pd.DataFrame, source: str) -> str:
    """verl's timing_s/adv added to its reward stage (in place; 0 where a step did not log it); the note."""
    frame["reward"] = frame["reward"].to_numpy(dtype=float) + _occasional_seconds(raw, VERL_ADVANTAGE_KEY, source)
    return (f"{VERL_ADVANTAGE_KEY} read into the reward stage ({VERL_REWARD_KEY} + {VERL_ADVANTAGE_KEY}): verl "
            "gathers the asynchronous rule rewards there (launch_reward_fn_async), which rlsim's reward phase holds")


def _occasional_seconds(raw: pd.DataFrame, key: str, source: str) -> np.ndarray:
    """A verl timing read beside the phases (occasional work, the adv block) per row (0 where the step
    did not log it); refused below 0."""
    values = _numbers(raw, key, source).to_numpy(dtype=float)
    bad = (values < 0) | np.isinf(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise RlsimError(f"{row_name(raw, row)}: {key} is {values[row]:g} s", source=source, field=key,
                         fix="write the seconds it took (>= 0), or drop the metric")
    return np.nan_to_num(values, nan=0.0)


def _steps_shown(frame: pd.DataFrame, rows: np.ndarray) -> str:
    steps = frame.loc[rows, "step"].tolist()
    shown = ", ".join(str(step) for step in steps[:5]) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")
    return f"step{'s' if len(steps) > 1 else ''} {shown}"


def _no_timing(source: str) -> RlsimError:
    return RlsimError("no stage timing found", source=source,
                      fix=f"the log needs per-step keys such as {', '.join(VERL_STAGE_KEYS)}, "
                          f"{STEP_TIME_KEY} (verl), timing/train/<{'|'.join(NEMO_STAGE_NAMES)}|total_step_time> "
                          f"(NeMo RL), timing/<generation|make_experience|ppo_train|broadcast|step_total> "
                          "(OpenRLHF; train/timing/... in its wandb and TensorBoard logs), timing/<generate|fwd_logprobs_values_reward|policy_train|sync_weights|"
                          "step> (SkyRL), step_time and profiling/Time taken: GRPOTrainer.<vLLM.generate|"
                          "sync_weights|_calculate_rewards> (TRL), timeperf/<rollout|recompute_logp|ref_logp|"
                          f"train_step|update_weights> (AReaL) or {RLSIM_STEP_TIME_KEY} (rlsim's iterations.csv)")


def _one_key_each(stage_keys: Sequence[str], step_keys: Sequence[str], source: str) -> str | None:
    """The log's step-time key; two keys timing one stage (or the step) are refused: one framework
    times a phase once, so two are two frameworks' names in one log (they were summed, or one dropped)."""
    by_stage: dict[str, list[str]] = {}
    for key in stage_keys:
        by_stage.setdefault(STAGE_KEYS[key], []).append(key)
    if len(step_keys) > 1:
        by_stage["the whole step"] = list(step_keys)
    clash = next(((stage, keys) for stage, keys in by_stage.items() if len(keys) > 1), None)
    if clash is not None:
        stage, keys = clash
        raise RlsimError(f"{' and '.join(keys)} both time {stage}: a run's log times each phase once", source=source,
                         field=keys[1], fix=f"keep one of {', '.join(keys)} (the framework the run used) and drop "
                                            "the other columns")
    return step_keys[0] if step_keys else None


def _check_timings(raw: pd.DataFrame, values: pd.Series, key: str, source: str, steps: np.ndarray) -> None:
    """A phase time is there, >= 0 and below MAX_LOGGED_S on every step, named by its line and step."""
    missing = values.isna().to_numpy()
    bad = missing | (values < 0).to_numpy() | (values > MAX_LOGGED_S).to_numpy()
    if not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    if missing[row]:
        what, fix = _missing_timing(key, steps, missing)
    elif values.iloc[row] < 0:
        what, fix = f"is {values.iloc[row]:g} s, below 0", "write the phase's seconds (>= 0); drop the broken step"
    elif not np.isfinite(values.iloc[row]):
        what, fix = f"is {values.iloc[row]}, not a finite number", "drop the broken steps"
    else:
        what, fix = f"is {values.iloc[row]:g} s, past {MAX_LOGGED_S:g} s: not a phase of one step", \
            "write seconds per phase and step"
    raise RlsimError(f"{row_name(raw, row)}: {key} {what}", source=source, field=key, fix=fix)


def _missing_timing(key: str, steps: np.ndarray, missing: np.ndarray) -> tuple[str, str]:
    """What is wrong with a phase some steps did not log, and the fix: where only the first steps
    lack it, they are the framework's warm-up (verl's trainer.critic_warmup updates the critic alone
    for its first steps, ray_trainer.py, with no timing_s/update_actor)."""
    absent = np.sort(steps[missing])
    if missing.all() or absent.max() >= steps[~missing].min():
        return "is missing (every step needs each logged phase)", "drop the incomplete steps from the log"
    shown = ", ".join(str(step) for step in absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
    return (f"is missing at the first {len(absent)} steps ({shown}) and logged from step {steps[~missing].min()} on",
            f"drop steps {shown} from the log: a warm-up (verl's trainer.critic_warmup updates the critic alone for "
            f"its first steps) is no step of the run to fit")


def _longer_than_the_step(frame: pd.DataFrame, stage_keys: Sequence[str]) -> list[str]:
    """A note per logged phase that takes longer than its whole step (a unit slip, e.g. milliseconds;
    or phases that overlap across steps, as an asynchronous engine's generation may)."""
    if "step_s" not in frame.columns:
        return []
    notes = []
    for key in stage_keys:
        longer = frame[STAGE_KEYS[key]] > frame["step_s"] * (1 + 1e-9)
        if longer.any():
            steps = frame.loc[longer, "step"].tolist()
            shown = ", ".join(str(step) for step in steps[:5]) + (f" and {len(steps) - 5} more" if len(steps) > 5
                                                                  else "")
            notes.append(f"{key} is longer than the whole step at step(s) {shown}: check its unit (seconds), "
                         "unless the run overlaps it with other steps (an asynchronous engine)")
    return notes


def _one_record_per_step(raw: pd.DataFrame, steps: np.ndarray, step_key: str,
                         timing_keys: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """One record per step number. Records of one step that log different timings are one step's
    metrics written in several calls: merged. A record that logs a timing its step already has is
    the step run again (a run resumed from an earlier checkpoint logs those steps anew): it starts
    the step over, so the later run's record is kept, and the note says which steps."""
    import pandas as pd

    if len(np.unique(steps)) == len(steps):
        return raw, []
    merged: dict[int, dict[str, Any]] = {}
    relogged: list[int] = []
    for step, record in zip(steps.tolist(), raw.to_dict("records"), strict=True):
        present = {key: value for key, value in record.items() if not _missing(value)}
        kept = merged.get(step)
        if kept is not None and any(key in kept for key in timing_keys if key in present):
            relogged.append(step)
            kept = None
        merged[step] = present if kept is None else {**kept, **present}
    notes = []
    if relogged:
        shown = ", ".join(str(step) for step in sorted(set(relogged))[:10])
        more = len(set(relogged)) - 10
        notes.append(f"step(s) {shown}{f' and {more} more' if more > 0 else ''} logged twice (a resumed run "
                     f"logs them again): the later record of each kept")
    frame = pd.DataFrame(list(merged.values()), columns=raw.columns)
    return frame.astype({step_key: raw[step_key].dtype}, errors="ignore"), notes


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _steps(raw: pd.DataFrame, key: str, source: str) -> np.ndarray:
    """The step column as whole numbers; a missing, non-numeric or fractional step is refused."""
    values = _numbers(raw, key, source).to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > MAX_STEP_NUMBER) | (values < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        shown = raw[key].iloc[row]
        shown = shown.item() if isinstance(shown, np.generic) else shown
        if shown is None or (isinstance(shown, float) and np.isnan(shown)):
            what = "has no step number"
        elif np.isfinite(values[row]) and values[row] < 0 and abs(values[row]) <= MAX_STEP_NUMBER:
            what = f"step {shown!r} is negative, not a step count"
        elif np.isfinite(values[row]) and abs(values[row]) > MAX_STEP_NUMBER:
            what = f"step {shown!r} is past 2^53, not a step count"
        else:
            what = f"step {shown!r} is not a whole number"
        raise RlsimError(f"{row_name(raw, row)}: {what}", source=source, field=key,
                         fix=f"give every row a whole-number {key!r} (or drop the column: rows are then numbered 1, 2, ...)")
    return values.astype(np.int64)


@dataclass(frozen=True)
class StageScales:
    """measured / predicted per stage (a factor > 1: the real run is slower than the model)."""

    factors: dict[str, float]
    spread: dict[str, float]   # per-step coefficient of variation of measured / predicted
    steps: int

    def apply(self, predicted: Mapping[str, float]) -> dict[str, float]:
        """Scaled predictions; a stage without a factor is passed through unscaled."""
        return {s: float(t) * self.factors.get(s, 1.0) for s, t in predicted.items()}

    def to_json(self) -> dict[str, Any]:
        return {"factors": dict(self.factors), "spread": dict(self.spread), "steps": self.steps}


def stages_from_summary(stage_time_s: Mapping[str, float]) -> dict[str, float]:
    """An rlsim summary's `stage_time_s` renamed to the log's stage names (unknown names dropped)."""
    out: dict[str, float] = {}
    for name, value in stage_time_s.items():
        target = SIM_STAGE_NAMES.get(name)
        if target is not None:
            out[target] = out.get(target, 0.0) + float(value)
    return out


def fit_stage_scales(log: RunLog, predicted: Mapping[str, float | Sequence[float]], *,
                     skip_steps: int = 1) -> StageScales:
    """Per stage: the factor f minimising sum over steps of (f x predicted - measured)^2 / measured^2
    (relative least squares), after skipping `skip_steps` warm-up steps. `predicted` gives one
    number per stage (every step alike) or one per logged step."""
    rows = log.frame.iloc[skip_steps:]
    if rows.empty:
        raise no_steps_left(log, skip_steps)
    factors: dict[str, float] = {}
    spread: dict[str, float] = {}
    for stage, pred in predicted.items():
        if stage not in rows.columns:
            continue
        measured = rows[stage].to_numpy(dtype=float)
        p = np.asarray(pred, dtype=float)
        if p.ndim == 0:
            p = np.full(len(log.frame), float(p))
        if len(p) != len(log.frame):
            raise RlsimError(f"{len(p)} predictions for {len(log.frame)} logged steps", field=f"predicted.{stage}",
                             fix="give one number, or one per logged step")
        p = p[skip_steps:]
        keep = measured > 0
        if not keep.any() or np.any(p[keep] <= 0):
            raise RlsimError(f"stage {stage!r} needs positive predicted and measured times", source=log.source,
                             field=stage)
        ratio = p[keep] / measured[keep]
        factors[stage] = float(np.sum(ratio) / np.sum(ratio * ratio))
        per_step = measured[keep] / p[keep]
        spread[stage] = float(np.std(per_step) / np.mean(per_step))
    if not factors:
        raise RlsimError("no predicted stage matches the log", source=log.source, field="predicted",
                         fix=f"name stages as the log does: {', '.join(log.stages)}")
    return StageScales(factors=factors, spread=spread, steps=len(rows))


def example_generator(rng: np.random.Generator | int) -> np.random.Generator:
    """The Generator an example log draws from: ``rng`` itself, or one seeded by a whole number
    (numpy's default_rng convention; synthetic_log(7, ...) raised an AttributeError from inside)."""
    if isinstance(rng, np.random.Generator):
        return rng
    seed = whole_number(rng)
    if seed is None or seed < 0:
        raise RlsimError(f"rng must be a numpy.random.Generator or a seed (a whole number >= 0), got {rng!r}",
                         field="rng", fix="e.g. numpy.random.default_rng(7), or 7")
    return np.random.default_rng(seed)


def synthetic_log(rng: np.random.Generator | int, *, steps: int, true_s: Mapping[str, float],
                  noise: float = 0.05, warmup_factor: float = 1.5,
                  response_mean: float = 1024.0, tokens_per_step: float = 4e6, devices: int = 8) -> pd.DataFrame:
    """A verl-style log for examples and tests: each stage's time is `true_s[stage]` times lognormal
    noise (sigma `noise`); the first step is `warmup_factor` slower (compilation, allocator warm-up).
    ``rng``: a Generator, or a seed to make one."""
    import pandas as pd

    rng = example_generator(rng)
    rows = []
    for step in range(1, steps + 1):
        row: dict[str, Any] = {"step": step}
        total = 0.0
        for stage, seconds in true_s.items():
            value = seconds * float(rng.lognormal(0.0, noise)) * (warmup_factor if step == 1 else 1.0)
            row[_log_key(stage, "verl")] = value
            total += value
        row[STEP_TIME_KEY] = total
        row["perf/throughput"] = tokens_per_step / total / devices
        row["response_length/mean"] = response_mean * float(rng.lognormal(0.0, noise))
        row["response_length/max"] = 8 * row["response_length/mean"]
        rows.append(row)
    return pd.DataFrame(rows)


def write_jsonl(frame: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict(orient="records")))
    return path


# Stage -> the key each framework logs it under (the first name of each stage in the tables above).
LOG_FLAVOURS = ("verl", "nemo-rl", "openrlhf", "skyrl", "trl", "areal")


def _log_key(stage: str, flavour: str) -> str | None:
    if flavour == "verl":
        table, step = VERL_STAGE_KEYS, STEP_TIME_KEY
    elif flavour == "openrlhf":
        table, step = {OPENRLHF_GENERATION_KEYS[0]: "generate", **OPENRLHF_STAGE_KEYS}, OPENRLHF_STEP_TIME_KEYS[0]
    elif flavour == "skyrl":
        table, step = SKYRL_STAGE_KEYS, SKYRL_STEP_TIME_KEY
    elif flavour == "trl":
        table, step = TRL_STAGE_KEYS, TRL_STEP_TIME_KEYS[0]
    elif flavour == "areal":
        table, step = AREAL_STAGE_KEYS, None   # AReaL times no whole step
    else:
        table, step = {f"{NEMO_PREFIXES[0]}{k}": v for k, v in NEMO_STAGE_NAMES.items()}, "timing/train/total_step_time"
    if stage == "step_s":
        return step
    return next((k for k, v in table.items() if v == stage), None)


def timings_log(rng: np.random.Generator | int, timings: Mapping[str, float], *, steps: int, noise: float = 0.0,
                flavour: str = "verl") -> pd.DataFrame:
    """A log of `steps` steps in `flavour`'s metric names whose stage times are `timings` (stage ->
    seconds, `step_s` for the step) times lognormal noise (sigma `noise`): what a run with known
    parameters would log (round-trip tests of the calibration). ``rng``: a Generator, or a seed to make one."""
    import pandas as pd

    rng = example_generator(rng)
    if flavour not in LOG_FLAVOURS:
        raise RlsimError(f"unknown log flavour {flavour!r}", field="flavour", fix=f"use one of {LOG_FLAVOURS}")
    keys = {stage: _log_key(stage, flavour) for stage in timings}
    missing = [s for s, k in keys.items() if k is None]
    if missing:
        raise RlsimError(f"{flavour} logs no stage {missing[0]!r}", field="timings",
                         fix=f"give stages of: {', '.join(s for s in STAGES if _log_key(s, flavour))}, step_s")
    rows = []
    for step in range(1, steps + 1):
        row: dict[str, Any] = {"step": step}
        for stage, seconds in timings.items():
            row[str(keys[stage])] = float(seconds) * float(rng.lognormal(0.0, noise))
        rows.append(row)
    return pd.DataFrame(rows)
