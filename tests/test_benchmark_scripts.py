"""Every script of benchmarks/ still runs: the figures a note cites come from them, and a script that
broke silently (bench_engine.py did, for three days) cites nothing. Each is run whole, in a
subprocess, on a small case where it has one, and must exit 0 and print a figure. Together they take
about a minute on the 2-core VM, so the default run checks only that the list below names every
script; RLSIM_BENCHMARKS=all runs them (`RLSIM_BENCHMARKS=all python -m pytest -q
tests/test_benchmark_scripts.py`; .ci/run does). Scripts run elsewhere, or that need what a test
machine lacks, are in ELSEWHERE with the reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RUN_ALL = os.environ.get("RLSIM_BENCHMARKS") == "all"

# script -> its arguments for a small run (seconds each on the 2-core VM)
RUN: dict[str, tuple[str, ...]] = {
    "bench_critical_path.py": (),
    "bench_engine.py": ("step", "tail", "rollout"),
    "bench_memory.py": ("--iterations", "2", "4", "--no-cli"),
    "bench_multi_turn.py": ("--iterations", "1", "--prompts", "32"),
    "bench_distillation.py": ("--iterations", "1", "--prompts", "16"),
    "bench_reward_model.py": ("--iterations", "1", "--prompts", "16"),
    "bench_planner.py": ("--quick",),
    "bench_rollout.py": (),
    "bench_schedules.py": ("step", "nemo40", "v1hyb6"),   # its paths (repeats, a V6 row, a v1 kind); all: ~2 min
    "bench_startup.py": (),
    "bench_step.py": ("step", "--rounds", "1"),
    "bench_sweep.py": ("--fake",),
    "bench_topology.py": (),
    "bench_training.py": (),
    "device_what_if.py": (),
    "host_adam.py": ("--sizes", "1e6", "--seconds", "0.2"),
    "hf_saved_activations.py": ("--model", "qwen2.5-0.5b", "--tokens", "32"),
    "reward_cost.py": ("--samples", "3"),    # skips the scorers the test extras do not install
    "v2_framework_costs.py": (),
    "v6_cross_prediction.py": ("topology.device.gemm_efficiency", "2"),
    "v6_generation_gap.py": (),
    "v6_unknowns.py": ("--row", "deepseek-v3 on-policy"),
    "v7_unknowns.py": (),
    "vllm_scheduler_cpu.py": ("--running", "1", "4", "--steps", "5"),   # skips without vLLM
}
# script -> where it runs instead, or why it does not here
ELSEWHERE: dict[str, str] = {
    "bench_topology_ab.py": "compares two checkouts given as its arguments",
    "device_decode_graphs.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "device_fused_moe.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "device_gemm_plateau.py": "a GPU check; its CPU run is tests/calibration/test_device_checks.py",
    "device_hf_layer.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "device_logits.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "device_moe_layer.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "device_train_step.py": "a GPU check; its --smoke run is tests/calibration/test_device_checks.py",
    "host_pageable_copy.py": "tests/calibration/test_device_checks.py runs it on a CPU",
    "speed_reference.py": "a module the scripts import (reference_ms); each prints its figure",
    "v6_assumptions.py": "tests/validation/test_v6_benchmarks.py runs each constant's scenario of every row",
    "v6_mechanisms.py": "tests/validation/test_v6_benchmarks.py runs each setting's scenario of every row",
}


def test_every_script_is_run_here_or_says_where():
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(RUN) | set(ELSEWHERE), "list a new benchmarks/ script in RUN or ELSEWHERE"
    assert not set(RUN) & set(ELSEWHERE)


@pytest.mark.skipif(not RUN_ALL, reason="about a minute in all: RLSIM_BENCHMARKS=all runs them")
@pytest.mark.parametrize("script", sorted(RUN))
def test_the_script_runs_and_prints_figures(script):
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *RUN[script]], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and any(ch.isdigit() for ch in done.stdout), done.stdout[-2000:]
