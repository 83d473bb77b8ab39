"""Issue 12 item 7: fit the named mechanism parameters on the V6 1-step-off rows (their published
step times), predict the on-policy rows; prints the fitted values and the per-row errors.

    PYTHONPATH=. python benchmarks/v6_cross_prediction.py [KEY,KEY...] [MAX_EVALUATIONS]
"""
from __future__ import annotations

import statistics
import sys
import time

from simulator.calibration.crosscheck import cross_prediction
from simulator.calibration.logfit import DEFAULT_FIT_KEYS, MAX_EVALUATIONS
from simulator.validation.nemo_rl import ROWS


def main() -> None:
    keys = sys.argv[1].split(",") if len(sys.argv) > 1 else list(DEFAULT_FIT_KEYS)
    evaluations = int(sys.argv[2]) if len(sys.argv) > 2 else MAX_EVALUATIONS
    fit_rows = [r for r in ROWS if r.off_policy]
    predict_rows = [r for r in ROWS if not r.off_policy]
    start = time.perf_counter()
    out = cross_prediction(fit_rows, predict_rows, keys, max_evaluations=evaluations)
    print(f"fit on {len(fit_rows)} 1-step-off rows, {out['fit']['evaluations']} evaluations, "
          f"{time.perf_counter() - start:.0f} s")
    for key, f in out["fit"]["fitted"].items():
        print(f"  {key:40s} {f['value']:.4g} +- {f['sigma']:.2g} (default {f['start']:.4g})")
    print(f"  {'row':46s} {'role':8s} {'published':>9s} {'default':>8s} {'fitted':>8s} {'err def':>8s} {'err fit':>8s}")
    for r in out["rows"]:
        print(f"  {r['row']:46s} {r['role']:8s} {r['published_s']:9.1f} {r['default_s']:8.1f} {r['fitted_s']:8.1f} "
              f"{r['default_error']:+8.1%} {r['fitted_error']:+8.1%}")
    for role in ("fit", "predict"):
        rows = [r for r in out["rows"] if r["role"] == role]
        print(f"  {role}: median |error| default {statistics.median(abs(r['default_error']) for r in rows):.1%}, "
              f"fitted {statistics.median(abs(r['fitted_error']) for r in rows):.1%}")
    for note in out["fit"]["notes"]:
        print(f"  note: {note}")


if __name__ == "__main__":
    main()
