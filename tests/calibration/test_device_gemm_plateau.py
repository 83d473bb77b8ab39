"""benchmarks/device_gemm_plateau.py, the prepared GPU check of the H100 GEMM plateau, runs on a CPU
(--smoke) and its per-row plateau is the FLOP-weighted mean of its shapes' (the figure a device
session would read off)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load

ROOT = Path(__file__).resolve().parents[2]


def test_the_smoke_run_reports_every_shape_and_the_flop_weighted_plateau(tmp_path):
    pytest.importorskip("torch")
    from simulator.hardware.profiles import load_profile

    profile = tmp_path / "cpu.yaml"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_gemm_plateau.py"), "--device", "cpu",
                          "--smoke", "--catalog", "cpu", "--sustain-s", "0", "--min-s", "0.005", "--json",
                          "--out", str(profile)],
                         capture_output=True, text=True, check=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    doc = json.loads(out.stdout)
    shapes = doc["shapes"]
    assert len(shapes) == 15 and {s["row"] for s in shapes} == {"smoke"}
    weight = [s["m"] * s["n"] * s["k"] for s in shapes]
    mean = sum(s["implied_plateau"] * w for s, w in zip(shapes, weight, strict=True)) / sum(weight)
    assert doc["flop_weighted_plateau_by_row"]["smoke"] == pytest.approx(mean, rel=1e-12)
    assert all(s["implied_plateau"] >= s["share_of_peak"] > 0 for s in shapes)
    overall = sum(s["implied_plateau"] * w for s, w in zip(shapes, weight, strict=True)) / sum(weight)
    assert doc["flop_weighted_plateau"] == pytest.approx(overall, rel=1e-12)
    written = load_profile(profile)      # what `rlsim validate --set topology.device_profile=PATH` reads
    assert written.device == "cpu" and written.gemm_efficiency == pytest.approx(min(1.0, overall), rel=1e-12)


def test_the_gpu_grid_holds_every_v7_row_and_the_v6_trainer():
    bench = load("device_gemm_plateau")
    rows = {s.row for s in bench.all_shapes(smoke=False)}
    assert len(rows) == 10 and "V6 qwen3-32b tp4" in rows
    fc1 = next(s for s in bench.all_shapes(smoke=False) if s.row == "V7 1.7b tp1" and s.name == "fc1 fwd")
    assert (fc1.m, fc1.n, fc1.k) == (4096, 4 * 2048, 2048)
