"""The calibration backend interface: the few timed kernels the micro-benchmarks need.

A backend runs real work on a real device and returns seconds per call (the minimum, by default,
of repeated timed batches, after warm-up). Only this interface is seen by microbench.py and the
implementations (torch_backend.py); backend.py picks an implementation (`get_backend`) and imports
it lazily, so the core never imports torch. Implementations import this module, never backend.py.
"""
from __future__ import annotations

import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RlsimError

DEVICES = ("cpu", "cuda", "npu")
BACKENDS = ("torch",)
COLLECTIVE_OPS = ("all_reduce", "all_gather", "broadcast")
# One torch thread: on a small machine shared with other processes, two OpenMP threads stall at
# every barrier when one core is taken (measured on the 2-core CI machine: a 16x256x768 GEMM took
# 15 ms with 2 threads under load versus 0.16 ms with 1), so 1 thread gives repeatable figures.
DEFAULT_THREADS = 1


@dataclass(frozen=True)
class TimingPolicy:
    """How one figure is timed: the best of several timed batches after warm-up."""

    warmup_calls: int = 2        # first calls pay allocation and kernel selection
    samples: int = 5             # timed batches
    # The best batch (Python's timeit docs): noise on a shared machine only ever adds time, and the
    # speed of the CI virtual machine drifts by tens of percent within seconds. The replay takes the
    # same statistic over pieces of the step of the same few-ms size (replay.py), so both sides see
    # the quiet machine; "median" describes a typical busy moment instead.
    statistic: str = "min"       # or "median"
    # "cpu": process CPU time, which leaves out the time other tenants hold the core (valid for a
    # single-threaded CPU backend only); "wall": perf_counter, for accelerators and collectives;
    # "auto": cpu for a 1-thread CPU backend, wall otherwise.
    clock: str = "auto"
    min_batch_s: float = 2e-3    # a batch repeats a call until it lasts this long (timer resolution, noise)
    max_calls_per_batch: int = 10_000


@dataclass(frozen=True)
class DecodeShape:
    """A decode-like step: one token for each of `batch` sequences through `num_layers` pre-norm
    transformer layers (RMSNorm, fused QKV, KV-cache write and read of `kv_len` positions, output
    projection, SwiGLU MLP) and an LM head of `vocab` rows with greedy sampling, as an inference
    engine runs it."""

    batch: int
    hidden: int
    ffn_hidden: int
    num_layers: int
    kv_len: int
    num_heads: int = 4
    vocab: int = 4096

    @property
    def weight_elems(self) -> int:
        layer = 4 * self.hidden * self.hidden + 3 * self.hidden * self.ffn_hidden
        return self.num_layers * layer + self.hidden * self.vocab

    @property
    def kv_elems(self) -> int:
        return self.num_layers * 2 * self.batch * self.kv_len * self.hidden

    @property
    def flops(self) -> float:
        matmul = 2.0 * self.batch * self.weight_elems
        attention = self.num_layers * 4.0 * self.batch * self.kv_len * self.hidden
        return matmul + attention


def clock_function(clock: str) -> Callable[[], float]:
    if clock == "cpu":
        return time.process_time
    if clock == "wall":
        return time.perf_counter
    raise RlsimError(f"unknown timing clock {clock!r}", field="timing.clock", fix="use cpu, wall or auto")


def time_call(fn: Callable[[], object], synchronize: Callable[[], None], policy: TimingPolicy) -> float:
    """Seconds per call of `fn` (min or median of timed batches), synchronizing the device around
    each timed batch. `policy.clock` must be resolved (cpu or wall)."""
    now = clock_function(policy.clock)
    for _ in range(policy.warmup_calls):
        fn()
    synchronize()
    start = now()
    fn()
    synchronize()
    single = max(now() - start, 1e-9)
    calls = int(min(policy.max_calls_per_batch, max(1, policy.min_batch_s // single)))
    per_call = []
    for _ in range(policy.samples):
        start = now()
        for _ in range(calls):
            fn()
        synchronize()
        per_call.append((now() - start) / calls)
    return reduce_samples(per_call, policy.statistic)


def reduce_samples(values: list[float], statistic: str) -> float:
    if statistic == "min":
        return min(values)
    if statistic == "median":
        return statistics.median(values)
    raise RlsimError(f"unknown timing statistic {statistic!r}", field="timing.statistic", fix="use min or median")


class Backend(ABC):
    """One device of one framework. Every method returns measured seconds per call."""

    name: str
    device: str

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """Facts about the device and framework, written into the profile (strings and numbers)."""

    @abstractmethod
    def dtypes(self) -> list[str]:
        """Dtype names (project spelling: fp32, bf16, fp16) this backend can time GEMMs in."""

    @abstractmethod
    def time_gemm(self, m: int, n: int, k: int, dtype: str, cold_bytes: int = 0) -> float:
        """Seconds for one (m x k) @ (k x n) product; with `cold_bytes`, the timer cycles through
        operand sets of that many bytes in all, so operands are not cache-resident."""

    @abstractmethod
    def time_copy(self, nbytes: int) -> float:
        """Seconds to copy `nbytes` from one device buffer to another (reads and writes nbytes each)."""

    @abstractmethod
    def time_host_to_device(self, nbytes: int) -> float:
        """Seconds to copy `nbytes` from host memory to the device."""

    @abstractmethod
    def time_device_to_host(self, nbytes: int) -> float:
        """Seconds to copy `nbytes` from the device to host memory."""

    @abstractmethod
    def time_decode_step(self, shape: DecodeShape, dtype: str) -> float:
        """Seconds for one decode-like step (see DecodeShape)."""

    @abstractmethod
    def time_collectives(self, op: str, world_size: int, sizes_bytes: list[int],
                         samples: int | None = None, launches: int = 3) -> list[float]:
        """Seconds per collective `op` over `world_size` local processes, one figure per size
        (`samples` timed rounds, default the timing policy's), the fastest over `launches` fresh
        process groups: a slow spell can stick to one launch for all its rounds."""
