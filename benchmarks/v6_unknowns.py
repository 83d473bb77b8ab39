"""Issue 12, V6 (NeMo RL v0.5): can the inputs the runs did not publish explain a row's miss?

Only the mean response (G-avg) of each run is published. The V6 cases assume one length law for
every row (simulator/validation/nemo_rl.py: prompt mean 127, response lognormal sigma 0.8 with its
median solved so the capped mean is G-avg, lengths independent within a prompt) and, for DAPO, rlsim's
default keep_fraction 0.5. This script runs every row over the joint grid of those unknowns, each
at values the published figures allow, with the mean response held at G-avg throughout:
- response sigma 0.5 / 0.8 / 1.1 (a narrow to a wide spread);
- prompt mean 102 / 127 / 251 tokens (the range of the table's own arithmetic over the 11 rows);
- group_correlation 0 / 0.25 / 0.5 (the per-prompt difficulty share; rlsim's presets use 0.5);
- DAPO keep_fraction 0.1 / 0.5 / 1.0 (the share of prompt groups with a reward signal), under the
  recipe's cap of 10 generation batches;
- seeds 0..SEEDS-1 (the length draw).
For each row: the steady step's range over the grid and whether the published step lies inside it.
A published step outside the range is a miss no choice of the unknowns explains: a mechanism (or a
rate) rlsim does not have. Prints the table of docs/validation.md ("What the unknown inputs can
explain"); --json for the per-row figures.

    PYTHONPATH=. python benchmarks/v6_unknowns.py            # ~70 s on 2 cores
    PYTHONPATH=. python benchmarks/v6_unknowns.py --row "llama3.1-8b on-policy"   # one row
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

from simulator.api import simulate
from simulator.errors import RlsimError
from simulator.validation import nemo_rl

SIGMAS = (0.5, 0.8, 1.1)
PROMPT_MEANS = (102.0, 127.0, 251.0)
CORRELATIONS = (0.0, 0.25, 0.5)
KEEP_FRACTIONS = (0.1, 0.5, 1.0)
SEEDS = 2


def grid(row: nemo_rl.Row) -> list[dict[str, float]]:
    """Every combination of the unknowns that applies to ``row`` (keep_fraction: DAPO only)."""
    keeps = KEEP_FRACTIONS if row.algo == "dapo" else (None,)
    points = []
    for sigma, prompt, rho, keep, seed in itertools.product(SIGMAS, PROMPT_MEANS, CORRELATIONS, keeps, range(SEEDS)):
        point = {"sigma": sigma, "prompt_mean": prompt, "rho": rho, "seed": seed}
        if keep is not None:
            point["keep_fraction"] = keep
        points.append(point)
    return points


def scenario_at(row: nemo_rl.Row, point: dict[str, float]) -> dict[str, Any]:
    """The row's scenario with its length law, correlation, keep fraction and seed at ``point``."""
    sc = nemo_rl.scenario(row)
    law = nemo_rl.length_law(row, prompt_mean=point["prompt_mean"], response_sigma=point["sigma"])
    law["response_length"]["group_correlation"] = point["rho"]
    sc["workload"].update(law)
    if "keep_fraction" in point:
        sc["workload"]["dynamic_sampling"]["keep_fraction"] = point["keep_fraction"]
    sc["seed"] = int(point["seed"])
    return sc


def row_range(row: nemo_rl.Row) -> dict[str, Any]:
    steps: list[tuple[float, dict[str, float]]] = []
    stopped = 0
    for point in grid(row):
        try:
            steps.append((nemo_rl.published_step_s(simulate(scenario_at(row, point))), point))
        except RlsimError as exc:
            if "max_gen_batches" not in str(exc):
                raise
            stopped += 1          # the run would stop (DAPO's cap on generation batches)
    low, at_low = min(steps, key=lambda s: s[0])
    high, at_high = max(steps, key=lambda s: s[0])
    base = nemo_rl.published_step_s(simulate(nemo_rl.scenario(row)))
    return {"row": row.name, "published": row.step_s, "base": base, "low": low, "high": high,
            "at_low": at_low, "at_high": at_high, "inside": low <= row.step_s <= high,
            "points": len(steps), "stopped": stopped}


def _point(point: dict[str, float]) -> str:
    keep = f", keep {point['keep_fraction']:g}" if "keep_fraction" in point else ""
    return f"sigma {point['sigma']:g}, prompt {point['prompt_mean']:g}, rho {point['rho']:g}{keep}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--row", action="append", default=[], metavar="TEXT",
                        help="only the rows whose case name holds TEXT (repeatable; default: all 11)")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [row for row in nemo_rl.ROWS if not args.row or any(text in row.name for text in args.row)]
    if not rows:
        parser.error(f"no V6 row's name holds {' or '.join(map(repr, args.row))}; e.g. 'llama3.1-8b on-policy'")
    results = [row_range(row) for row in rows]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print("| row | published | V6 law | range over the unknowns | published inside | longest at |")
    print("|---|---|---|---|---|---|")
    for r in results:
        span = f"{r['low']:.1f} - {r['high']:.1f} ({r['low'] / r['published'] - 1:+.0%} .. {r['high'] / r['published'] - 1:+.0%})"
        stopped = f"; {r['stopped']} of {r['points'] + r['stopped']} points stop the run" if r["stopped"] else ""
        print(f"| {r['row'].removeprefix('V6 nemo-rl ')} | {r['published']:g} | {r['base']:.1f} | {span} | "
              f"{'yes' if r['inside'] else 'NO'} | {_point(r['at_high'])}{stopped} |")
    inside = sum(r["inside"] for r in results)
    print(f"\n{inside} of {len(results)} published steps inside the range; "
          f"{sum(r['points'] for r in results)} runs in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
