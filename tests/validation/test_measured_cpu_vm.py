"""What the project's CPU VM measured (benchmarks/measured/cpu-vm-2026-12-04, README there) against the
constants it sets or bounds: vLLM's scheduler share of the per-sequence engine CPU time
(vllm_scheduler_cpu.txt) and the host AdamW rate of Megatron-Core's cpu-offloaded optimizer (host_adam.txt)."""
import re
from pathlib import Path

from simulator.params import HOST_ADAM_PARAMS_PER_S, InferenceParams

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "measured" / "cpu-vm-2026-12-04"
RAW = MEASURED / "vllm_scheduler_cpu.txt"


def test_cpu_per_seq_covers_the_measured_scheduler_share():
    per_request_us = [float(x) for x in re.findall(r"; ([\d.]+) us a request", RAW.read_text())]
    running = [int(x) for x in re.findall(r"^running\s+(\d+):", RAW.read_text(), re.M)]
    batched = [us for n, us in zip(running, per_request_us, strict=True) if n >= 16]    # one request: its fixed part
    assert len(batched) >= 5 and 4 < min(batched) and max(batched) < 10
    assert InferenceParams().cpu_per_seq_s > max(batched) * 1e-6     # the scheduler is a part of what it holds


def test_the_host_adam_rate_is_the_measured_fused_one_thread_step():
    rates = [float(x) * 1e9 for x in re.findall(r"threads  1 .* fused\s+([\d.]+)e9 params/s", (MEASURED / "host_adam.txt").read_text())]
    assert len(rates) == 2
    assert HOST_ADAM_PARAMS_PER_S == round(sum(rates) / len(rates), -8)
