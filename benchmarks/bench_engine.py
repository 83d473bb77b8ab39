"""Rollout engine speed: today's engine against the frozen copy of the engine before its array
path (tests/llm/reference_engine.py), in the same process, alternating, best of a few. Prints the
figures and the ratios (frozen / today) and checks the summaries are equal; asserts nothing else.

    python benchmarks/bench_engine.py            # all cases
    python benchmarks/bench_engine.py step       # one case: step | run100 | tail | rollout

Targets (issue 13 item 4): one seed-scenario step (``simulator.simulate(iterations=1)``) >= 5x,
100 steps >= 5x, results byte-identical. Since 2026-12-07 the seed's cases print "identical: False":
today's prefix cache also hits at a later admission while a sample of the prompt runs, the frozen
engine's only within one admission step (docs/cost-models-inference.md "Prefix caching").
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np
from speed_reference import reference_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.llm.reference_engine

import simulator  # noqa: E402
from simulator.hardware.devices import get_device  # noqa: E402
from simulator.llm import (  # noqa: E402
    LengthDistribution,
    RolloutLayout,
    inference,  # noqa: E402
    load_model,
)
from simulator.rl import llm_costs  # noqa: E402
from tests.llm import reference_engine as frozen  # noqa: E402


class _FrozenEngine(frozen.RolloutEngine):
    """The frozen engine with today's counters' accessor: it counted nothing (all 0; the summaries'
    rollout counts are left out of the comparison, _timing_summary)."""

    def counts(self) -> dict[str, int]:
        return inference.no_counts()


class _FrozenRun(frozen.ResumableRun):
    """The frozen ResumableRun with today's array accessor, answered as the facade did before it
    (one loop over interrupt_at's partial sequences), and no counts (_FrozenEngine)."""

    def counts_at(self, now: float) -> dict[str, int]:
        return inference.no_counts()

    def progress_at(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        partial = self.interrupt_at(now).partial
        return np.array([s.seq_id for s in partial], np.int64), np.array([s.generated for s in partial], np.int64)


def _one_by_one(runs, finishes) -> None:
    """inference.run_all_into as the frozen engine ran it: each run to its end on its own."""
    for run, finish in zip(runs, finishes, strict=True):
        run.run_into(finish)


@contextlib.contextmanager
def frozen_engine():
    """The schedules' facade (rl/llm_costs.py) and simulate_rollout build the frozen engine."""
    saved = llm_costs.RolloutEngine, llm_costs.ResumableRun, llm_costs.run_all_into, inference.RolloutEngine
    llm_costs.RolloutEngine, llm_costs.ResumableRun, llm_costs.run_all_into = _FrozenEngine, _FrozenRun, _one_by_one
    inference.RolloutEngine = _FrozenEngine
    try:
        yield
    finally:
        llm_costs.RolloutEngine, llm_costs.ResumableRun, llm_costs.run_all_into, inference.RolloutEngine = saved


def _rollout() -> object:
    model, device = load_model("qwen2.5-7b"), get_device("h100")
    rng = np.random.default_rng(0)
    resp = LengthDistribution(median=2048, sigma=1.0, max=16384, group_correlation=0.5).sample(rng, 1024, 16)
    prm = np.repeat(LengthDistribution(median=512, sigma=0.5, max=2048).sample(rng, 1024, 1), 16, axis=1)
    res = inference.simulate_rollout(model, device, RolloutLayout(tp=1, instances=96), prm, resp)
    return {"finish": res.finish_s.tolist(), "busy": res.busy_s.tolist()}


CASES = {
    "step": ("one seed-scenario step (default scenario, colocated StaleSync, 384 NPUs)", 5,
             lambda: simulator.simulate(iterations=1).summary),
    "run100": ("100 seed-scenario steps", 1, lambda: simulator.simulate(iterations=100).summary),
    "tail": ("one step, grpo-qwen2.5-7b on 4 x dgx-h100 (stalesync)", 3,
             lambda: simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4},
                                        schedule="stalesync", iterations=1).summary),
    "rollout": ("simulate_rollout: 16,384 sequences on 96 H100 instances", 3, _rollout),
}


def _timing_summary(out: object) -> object:
    """A case's output without the engines' counts (summary rollout.preemptions, prefilled_tokens, ...:
    llm.inference.ENGINE_COUNTERS), which the frozen engine does not keep: the times are compared."""
    if isinstance(out, dict) and isinstance(out.get("rollout"), dict):
        rollout = {k: v for k, v in out["rollout"].items() if k not in inference.ENGINE_COUNTERS}
        return {**out, "rollout": rollout}
    return out


def _best(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(names: list[str]) -> None:
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms", flush=True)
    simulator.simulate(iterations=1, overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
    for name in names or list(CASES):
        label, repeats, fn = CASES[name]
        new_s, old_s = float("inf"), float("inf")
        for _ in range(2):   # alternate, so that a neighbour's burst hits both sides alike
            t, new = _best(fn, repeats)
            new_s = min(new_s, t)
            with frozen_engine():
                t, old = _best(fn, repeats)
            old_s = min(old_s, t)
        same = (json.dumps(_timing_summary(new), sort_keys=True, default=str)
                == json.dumps(_timing_summary(old), sort_keys=True, default=str))
        print(f"{name:8s} today {new_s:8.3f} s | frozen {old_s:8.3f} s | ratio {old_s / new_s:5.2f}x | "
              f"identical: {same} | {label}", flush=True)
    print(f"machine speed reference (fixed loop): {reference_ms():.2f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
