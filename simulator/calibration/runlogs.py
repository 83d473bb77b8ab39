"""Real run logs: per-step timing metrics of a verl-style run (JSONL or CSV), per-stage scale factors
between measured and predicted stage times, and predictions at other scales with those factors.

verl logs one record per step with keys such as `timing_s/gen`, `timing_s/old_log_prob`,
`timing_s/ref`, `timing_s/update_actor`, `timing_s/step`, `perf/throughput` (tokens/s per device)
and `response_length/mean|max|min|clip_ratio`. A JSONL file has one JSON object per line; a CSV
has those keys as column names.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import RlsimError

# Log key -> stage name used here. `gen` is rollout generation; the others are forward or train passes.
STAGE_KEYS: dict[str, str] = {
    "timing_s/gen": "generate",
    "timing_s/old_log_prob": "old_log_prob",
    "timing_s/ref": "reference",
    "timing_s/values": "values",
    "timing_s/update_critic": "update_critic",
    "timing_s/update_actor": "update_actor",
}
STEP_TIME_KEY = "timing_s/step"
OTHER_KEYS: dict[str, str] = {
    "perf/throughput": "throughput_tokens_per_s_per_device",
    "response_length/mean": "response_length_mean",
    "response_length/max": "response_length_max",
    "response_length/min": "response_length_min",
    "response_length/clip_ratio": "response_clip_ratio",
    "prompt_length/mean": "prompt_length_mean",
}
STEP_KEYS = ("step", "training/global_step", "global_step")
# rlsim `stage_time_s` names -> log stage names (what a simulated summary predicts).
SIM_STAGE_NAMES: dict[str, str] = {"generate": "generate", "rollout": "generate", "old_logprob": "old_log_prob",
                                   "old_log_prob": "old_log_prob", "reference": "reference", "ref": "reference",
                                   "train": "update_actor", "train_actor": "update_actor", "update_actor": "update_actor",
                                   "train_critic": "update_critic",
                                   "critic": "update_critic", "values": "values"}


@dataclass
class RunLog:
    """One row per step: `step`, the stage columns present (seconds), `step_s`, and the other metrics."""

    frame: pd.DataFrame
    source: str

    @property
    def stages(self) -> list[str]:
        return [s for s in STAGE_KEYS.values() if s in self.frame.columns]

    def stage_means(self, skip_steps: int = 0) -> dict[str, float]:
        rows = self.frame.iloc[skip_steps:]
        if rows.empty:
            raise RlsimError(f"no steps left after skipping {skip_steps}", source=self.source, field="skip_steps",
                             fix="skip fewer warm-up steps")
        return {s: float(rows[s].mean()) for s in self.stages}


def _records_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RlsimError(f"line {number} is not JSON: {exc.msg}", source=str(path),
                             fix="write one JSON object per line") from None
        if not isinstance(record, dict):
            raise RlsimError(f"line {number} is not a JSON object", source=str(path),
                             fix="write one JSON object per line")
        out.append(record)
    return out


def read_run_log(path: str | Path) -> RunLog:
    """Read a verl-style JSONL (.jsonl / .json) or CSV (.csv) log of per-step metrics."""
    path = Path(path)
    if not path.exists():
        raise RlsimError("run log not found", source=str(path), fix="check the path")
    if path.suffix.lower() == ".csv":
        try:
            raw = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise RlsimError(f"cannot read CSV: {exc}", source=str(path)) from None
    elif path.suffix.lower() in (".jsonl", ".json", ".log"):
        raw = pd.DataFrame(_records_jsonl(path))
    else:
        raise RlsimError(f"unknown log format {path.suffix!r}", source=str(path),
                         fix="use a .jsonl (one JSON object per step) or .csv file")
    return _normalize(raw, str(path))


def _normalize(raw: pd.DataFrame, source: str) -> RunLog:
    present = [k for k in STAGE_KEYS if k in raw.columns]
    if not present:
        raise RlsimError("no stage timing found", source=source, field="timing_s/gen",
                         fix=f"the log needs per-step keys such as {', '.join(STAGE_KEYS)}")
    frame = pd.DataFrame(index=raw.index)
    step_key = next((k for k in STEP_KEYS if k in raw.columns), None)
    frame["step"] = raw[step_key].astype(int) if step_key else np.arange(1, len(raw) + 1)
    for key in [*present, STEP_TIME_KEY, *OTHER_KEYS]:
        if key not in raw.columns:
            continue
        values = pd.to_numeric(raw[key], errors="coerce")
        bad = values.isna() & raw[key].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise RlsimError(f"step row {row + 1}: {raw[key].iloc[row]!r} is not a number", source=source,
                             field=key, fix="write plain numbers (seconds, tokens/s, tokens)")
        name = STAGE_KEYS.get(key) or OTHER_KEYS.get(key) or "step_s"
        if key in STAGE_KEYS and (values.isna().any() or (values < 0).any()):
            raise RlsimError("stage times must be present and >= 0 on every step", source=source, field=key,
                             fix="drop the incomplete steps from the log")
        frame[name] = values.to_numpy(dtype=float)
    frame = frame.sort_values("step", kind="stable").reset_index(drop=True)
    return RunLog(frame=frame, source=source)


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
        raise RlsimError(f"no steps left after skipping {skip_steps}", source=log.source, field="skip_steps",
                         fix="skip fewer warm-up steps")
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


def synthetic_log(rng: np.random.Generator, *, steps: int, true_s: Mapping[str, float],
                  noise: float = 0.05, warmup_factor: float = 1.5,
                  response_mean: float = 1024.0, tokens_per_step: float = 4e6, devices: int = 8) -> pd.DataFrame:
    """A verl-style log for examples and tests: each stage's time is `true_s[stage]` times lognormal
    noise (sigma `noise`); the first step is `warmup_factor` slower (compilation, allocator warm-up)."""
    inverse = {v: k for k, v in STAGE_KEYS.items()}
    rows = []
    for step in range(1, steps + 1):
        row: dict[str, Any] = {"step": step}
        total = 0.0
        for stage, seconds in true_s.items():
            value = seconds * float(rng.lognormal(0.0, noise)) * (warmup_factor if step == 1 else 1.0)
            row[inverse[stage]] = value
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
