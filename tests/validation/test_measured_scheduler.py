"""rlsim's per-sequence engine CPU time holds vLLM's scheduler share, measured on the host
(benchmarks/measured/cpu-vm-2026-12-04/vllm_scheduler_cpu.txt; benchmarks/vllm_scheduler_cpu.py)."""
import re
from pathlib import Path

from simulator.params import InferenceParams

RAW = Path(__file__).resolve().parents[2] / "benchmarks" / "measured" / "cpu-vm-2026-12-04" / "vllm_scheduler_cpu.txt"


def test_cpu_per_seq_covers_the_measured_scheduler_share():
    per_request_us = [float(x) for x in re.findall(r"; ([\d.]+) us a request", RAW.read_text())]
    running = [int(x) for x in re.findall(r"^running\s+(\d+):", RAW.read_text(), re.M)]
    batched = [us for n, us in zip(running, per_request_us, strict=True) if n >= 16]    # one request: its fixed part
    assert len(batched) >= 5 and 4 < min(batched) and max(batched) < 10
    assert InferenceParams().cpu_per_seq_s > max(batched) * 1e-6     # the scheduler is a part of what it holds
