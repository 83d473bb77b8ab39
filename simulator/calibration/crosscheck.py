"""Calibrate on one set of published runs, predict another: the V6 rows (NeMo RL v0.5 on DGX-H100,
simulator/validation/nemo_rl.py). The 1-step-off rows' published step times are the logs (one step
each: the table gives one figure per row, so no warm-up to skip); the fitted mechanism parameters
then predict the on-policy rows, whose published steps were not seen by the fit.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from .logfit import DEFAULT_FIT_KEYS, MAX_EVALUATIONS, LoggedRun, fit_runs, overlay_items, simulate_timings
from .runlogs import RunLog


def row_log(row: Any) -> RunLog:
    """A V6 row's published step as a one-step NeMo RL log (timing/train/total_step_time)."""
    return RunLog(frame=pd.DataFrame({"step": [1], "step_s": [float(row.step_s)]}), source=row.name)


def row_run(row: Any) -> LoggedRun:
    """The row as a logged run, its step compared as the V6 case measures it (the last 5 of 10 steps)."""
    from ..validation.nemo_rl import PUBLISHED_STEPS, scenario
    return LoggedRun(log=row_log(row), scenario=scenario(row), name=row.name, last_steps=PUBLISHED_STEPS)


def cross_prediction(fit_rows: Sequence[Any], predict_rows: Sequence[Any], keys: Sequence[str] = DEFAULT_FIT_KEYS,
                     *, max_evaluations: int = MAX_EVALUATIONS) -> dict[str, Any]:
    """Fit `keys` on `fit_rows`, predict `predict_rows`: per row the published step and the
    prediction with the defaults and with the fitted values, and their signed errors."""
    from ..scenario import load_scenario

    fit = fit_runs([row_run(r) for r in fit_rows], keys, skip_steps=0, max_evaluations=max_evaluations)
    table = []
    for role, rows in (("fit", fit_rows), ("predict", predict_rows)):
        for row in rows:
            run = row_run(row)
            items = overlay_items(load_scenario(run.scenario), fit.values)
            default = simulate_timings(run.scenario, (), run.last_steps)["step_s"]
            fitted = simulate_timings(run.scenario, items, run.last_steps)["step_s"]
            table.append({"row": row.name, "role": role, "published_s": row.step_s, "default_s": default,
                          "fitted_s": fitted, "default_error": default / row.step_s - 1,
                          "fitted_error": fitted / row.step_s - 1})
    return {"fit": fit.to_json(), "rows": table}
