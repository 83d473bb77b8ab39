"""The torch calibration backend: CPU always, CUDA where present, Ascend through torch_npu.

torch is imported here and only here (and in replay.py), lazily, so `import simulator` never needs it.
Collectives run in `world_size` local processes through torch.distributed (gloo on CPU, NCCL on
CUDA, HCCL on Ascend), rendezvous through a file store in a temporary folder (no ports to pick).
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import RlsimError
from .interface import (
    COLLECTIVE_OPS,
    DEFAULT_THREADS,
    Backend,
    DecodeShape,
    TimingPolicy,
    reduce_samples,
    time_call,
)

_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MAX_OPERAND_SETS = 4096  # bounds the operand list of tiny GEMMs (a 32^3 set is 12 KiB)
_DIST_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
COLLECTIVE_TIMEOUT_S = 300  # a hung rendezvous must not hang the command


def import_torch() -> ModuleType:
    """torch, or an RlsimError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise RlsimError("torch is not installed; calibration needs it", field="--backend",
                         fix="pip install 'rlsim[torch]' (or pip install torch)") from None
    return torch


def _check_device(torch: ModuleType, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise RlsimError("no CUDA device is visible to torch (torch.cuda.is_available() is False)",
                         field="--device", fix="run on a machine with an NVIDIA GPU and a CUDA build of "
                                               "torch, or use --device cpu")
    if device == "npu":
        try:
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError:
            raise RlsimError("torch_npu is not installed, so no Ascend NPU can be used", field="--device",
                             fix="install torch_npu with the CANN toolkit, or use --device cpu") from None
        if not torch.npu.is_available():
            raise RlsimError("no Ascend NPU is visible to torch_npu", field="--device",
                             fix="check the CANN driver (npu-smi info), or use --device cpu")


def _synchronizer(torch: ModuleType, device: str):
    if device == "cuda":
        return torch.cuda.synchronize
    if device == "npu":
        return torch.npu.synchronize
    return lambda: None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, device: str, *, threads: int = DEFAULT_THREADS, timing: TimingPolicy | None = None) -> None:
        torch = import_torch()
        _check_device(torch, device)
        self.torch = torch
        self.device = device
        self.threads = int(threads)
        # A fixed thread count makes CPU figures repeatable on a shared machine.
        torch.set_num_threads(self.threads)
        timing = timing or TimingPolicy()
        if timing.clock == "auto":
            timing = dataclasses.replace(timing, clock="cpu" if device == "cpu" and self.threads == 1 else "wall")
        self.timing = timing
        self._sync = _synchronizer(torch, device)
        self._gen = torch.Generator().manual_seed(0)
        self._device_gen = None   # made at the first GPU draw (a CUDA generator needs the device)

    # -- helpers ---------------------------------------------------------------------------------
    def _dtype(self, name: str):
        if name not in _DTYPE_NAMES:
            raise RlsimError(f"dtype {name!r} cannot be timed", field="dtypes",
                             fix=f"use {', '.join(_DTYPE_NAMES)}")
        return getattr(self.torch, _DTYPE_NAMES[name])

    def _rand(self, *shape: int, dtype: str = "fp32"):
        if self.device == "cuda":   # drawn on the GPU: gigabytes of operands in milliseconds
            if self._device_gen is None:
                self._device_gen = self.torch.Generator(device=self.device).manual_seed(0)
            return self.torch.randn(*shape, generator=self._device_gen, dtype=self._dtype(dtype), device=self.device)
        t = self.torch.randn(*shape, generator=self._gen, dtype=self.torch.float32)
        return t.to(device=self.device, dtype=self._dtype(dtype))

    def _time(self, fn) -> float:
        return time_call(fn, self._sync, self.timing)

    # -- Backend -----------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        torch = self.torch
        facts: dict[str, Any] = {"framework": f"torch {torch.__version__}", "device": self.device,
                                 "threads": self.threads, "clock": self.timing.clock}
        if self.device == "cpu":
            facts["model"] = _cpu_model()
            try:
                facts["memory_bytes"] = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            except (ValueError, OSError, AttributeError):
                pass
        elif self.device == "cuda":
            props = torch.cuda.get_device_properties(0)
            facts["model"] = props.name
            facts["memory_bytes"] = float(props.total_memory)
        else:
            facts["model"] = str(torch.npu.get_device_name(0))
            facts["memory_bytes"] = float(torch.npu.get_device_properties(0).total_memory)
        return facts

    def dtypes(self) -> list[str]:
        return ["fp32", "bf16"] if self.device == "cpu" else ["fp32", "bf16", "fp16"]

    def time_gemm(self, m: int, n: int, k: int, dtype: str, cold_bytes: int = 0) -> float:
        # Cold operands: cycle through enough operand sets to exceed the last-level cache, as a
        # model's layers stream their weights and activations from memory; a hot loop on one set
        # overstates small GEMMs (measured on the CI CPU: 80x768x256 at 74 GFLOP/s hot, 47 cold).
        per_set = BYTES[dtype] * (m * k + k * n + m * n)
        sets = int(min(MAX_OPERAND_SETS, max(1, cold_bytes // per_set + 1)))
        # On a CPU constant operands (BLAS time does not depend on the values; randn of 128 MiB is
        # slow). On a GPU random ones: tensor-core power, hence the clock a power limit allows,
        # follows the operands' bits (an H200's 8192^3 bf16 product: 894 TFLOP/s on zeros, 788 on
        # random data; docs/reference/hardware.md).
        if self.device == "cuda":
            a, b = self._rand(sets, m, k, dtype=dtype), self._rand(sets, k, n, dtype=dtype)
        else:
            a = self.torch.full((sets, m, k), 0.5, dtype=self._dtype(dtype), device=self.device)
            b = self.torch.full((sets, k, n), 0.5, dtype=self._dtype(dtype), device=self.device)
        out = self.torch.empty(sets, m, n, dtype=a.dtype, device=self.device)
        turn = [0]

        def call() -> None:
            i = turn[0]
            self.torch.matmul(a[i], b[i], out=out[i])
            turn[0] = (i + 1) % sets

        return self._time(call)

    def time_copy(self, nbytes: int) -> float:
        src = self.torch.ones(int(nbytes), dtype=self.torch.uint8, device=self.device)
        dst = self.torch.empty_like(src)
        return self._time(lambda: dst.copy_(src))

    def _host_buffer(self, nbytes: int):
        host = self.torch.ones(int(nbytes), dtype=self.torch.uint8)
        return host.pin_memory() if self.device != "cpu" else host

    def time_host_to_device(self, nbytes: int) -> float:
        host = self._host_buffer(nbytes)
        dev = self.torch.empty(int(nbytes), dtype=self.torch.uint8, device=self.device)
        return self._time(lambda: dev.copy_(host, non_blocking=True))

    def time_device_to_host(self, nbytes: int) -> float:
        host = self._host_buffer(nbytes)
        dev = self.torch.ones(int(nbytes), dtype=self.torch.uint8, device=self.device)
        return self._time(lambda: host.copy_(dev, non_blocking=True))

    def time_decode_step(self, shape: DecodeShape, dtype: str) -> float:
        torch = self.torch
        F = torch.nn.functional
        h, f, b, heads = shape.hidden, shape.ffn_hidden, shape.batch, shape.num_heads
        if h % heads:
            raise RlsimError(f"decode shape hidden={h} is not divisible by num_heads={heads}",
                             field="microbench.decode_hidden")
        d, kv = h // heads, shape.kv_len
        norm = torch.ones(h, dtype=self._dtype(dtype), device=self.device)
        layers = [(self._rand(3 * h, h, dtype=dtype) * 0.02, self._rand(h, h, dtype=dtype) * 0.02,
                   self._rand(2 * f, h, dtype=dtype) * 0.02, self._rand(h, f, dtype=dtype) * 0.02,
                   self._rand(2, b, heads, kv + 1, d, dtype=dtype)) for _ in range(shape.num_layers)]
        head = self._rand(shape.vocab, h, dtype=dtype) * 0.02
        x0 = self._rand(b, 1, h, dtype=dtype)

        def step():
            x = x0
            for wqkv, wo, wgu, wd, cache in layers:
                q, k, v = F.linear(F.rms_norm(x, (h,), norm), wqkv).view(b, 1, 3, heads, d).permute(2, 0, 3, 1, 4)
                cache[0][:, :, kv:kv + 1] = k  # the new token's key and value join the cache
                cache[1][:, :, kv:kv + 1] = v
                a = F.scaled_dot_product_attention(q, cache[0], cache[1])
                x = x + F.linear(a.transpose(1, 2).reshape(b, 1, h), wo)
                gate, up = F.linear(F.rms_norm(x, (h,), norm), wgu).chunk(2, dim=-1)
                x = x + F.linear(F.silu(gate) * up, wd)
            return F.linear(F.rms_norm(x, (h,), norm), head).argmax(-1)

        with torch.inference_mode():
            return self._time(step)

    def time_collectives(self, op: str, world_size: int, sizes_bytes: list[int],
                         samples: int | None = None, launches: int = 3) -> list[float]:
        if launches < 1:
            raise RlsimError(f"launches must be at least 1, got {launches}", field="collective_launches",
                             fix="set it to 1 or more")
        runs = [self._time_collectives_once(op, world_size, sizes_bytes, samples) for _ in range(launches)]
        # Noise on a shared machine only adds time: keep each size's fastest launch.
        return [min(times) for times in zip(*runs, strict=True)]

    def _time_collectives_once(self, op: str, world_size: int, sizes_bytes: list[int],
                               samples: int | None) -> list[float]:
        if op not in COLLECTIVE_OPS:
            raise RlsimError(f"unknown collective {op!r}", field="collective_ops",
                             fix=f"use one of: {', '.join(COLLECTIVE_OPS)}")
        if world_size < 2:
            raise RlsimError("a collective needs at least 2 processes", field="collective_world_size",
                             fix="set it to 2 or more")
        if self.device == "cuda" and self.torch.cuda.device_count() < world_size:
            raise RlsimError(f"{world_size} NCCL ranks need {world_size} GPUs, "
                             f"found {self.torch.cuda.device_count()}", field="collective_world_size",
                             fix="lower collective_world_size")
        with tempfile.TemporaryDirectory(prefix="rlsim-collective-") as tmp:
            result = Path(tmp) / "result.json"
            spec = {"op": op, "world_size": world_size, "sizes": [int(s) for s in sizes_bytes],
                    "device": self.device, "store": str(Path(tmp) / "store"), "result": str(result),
                    "threads": 1,
                    # A collective's time includes waiting for the peer: wall clock; and the best
                    # round, since a descheduled peer adds unbounded wait that is not the link's.
                    "timing": {**vars(self.timing), "clock": "wall", "statistic": "min",
                               "samples": int(samples or self.timing.samples)}}
            spec_path = Path(tmp) / "spec.json"
            spec_path.write_text(json.dumps(spec))
            # Fresh interpreters (not multiprocessing spawn), so the caller's __main__ is never re-run.
            procs = [subprocess.Popen([sys.executable, "-m", __name__, str(spec_path), str(rank)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                     for rank in range(world_size)]
            errors = []
            for proc in procs:
                try:
                    _, err = proc.communicate(timeout=COLLECTIVE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    for other in procs:
                        other.kill()
                    raise RlsimError(f"collective benchmark took over {COLLECTIVE_TIMEOUT_S} s",
                                     field="collectives", fix="check torch.distributed on this machine, "
                                     "or set microbench.collectives=false") from None
                if proc.returncode:
                    errors.append((err or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"])
            if errors or not result.exists():
                raise RlsimError(f"collective benchmark failed in a worker: {errors[0][0] if errors else '?'}",
                                 field="collectives", fix="check torch.distributed on this machine, "
                                 "or set microbench.collectives=false")
            return [float(t) for t in json.loads(result.read_text())]


def _pin_to_core(rank: int) -> None:
    """One core per rank where the OS allows it: a rank migrating between cores, or two ranks sharing
    one, adds scheduler jitter of the order of a small message's whole time."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores:
        os.sched_setaffinity(0, {cores[rank % len(cores)]})


def _collective_worker(rank: int, spec: dict[str, Any]) -> None:
    """One rank of the collective benchmark (module level so that spawn can import it)."""
    torch = import_torch()
    import torch.distributed as dist

    device = spec["device"]
    if device == "npu":
        import torch_npu  # noqa: F401
    torch.set_num_threads(int(spec["threads"]))
    world = int(spec["world_size"])
    _pin_to_core(rank)
    dist.init_process_group(_DIST_BACKEND[device], init_method=f"file://{spec['store']}",
                            rank=rank, world_size=world)
    target = f"{device}:{rank}" if device != "cpu" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    sync = _synchronizer(torch, device)
    timing = TimingPolicy(**spec["timing"])
    def make_call(nbytes: int):
        elems = max(world, int(nbytes) // 4)
        elems -= elems % world
        buf = torch.ones(elems, dtype=torch.float32, device=target)
        if spec["op"] == "all_reduce":
            return lambda: dist.all_reduce(buf)
        if spec["op"] == "all_gather":
            shard = buf[: elems // world].clone()
            parts = list(buf.split(elems // world))
            return lambda: dist.all_gather(parts, shard)
        return lambda: dist.broadcast(buf, src=0)

    try:
        calls, counts = [], []
        for nbytes in spec["sizes"]:
            call = make_call(nbytes)
            for _ in range(timing.warmup_calls):
                call()
            sync()
            dist.barrier()
            start = time.perf_counter()
            call()
            sync()
            # Every rank must run the same number of calls: agree on the slowest first call.
            single = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(single, op=dist.ReduceOp.MAX)
            calls.append(call)
            counts.append(int(min(timing.max_calls_per_batch,
                                  max(1, timing.min_batch_s // max(single.item(), 1e-9)))))
        # Rounds over all sizes, so that a burst of load from other processes hits every size alike.
        samples: list[list[float]] = [[] for _ in calls]
        for r in range(timing.samples):
            # Rotate the order each round, so that no size always runs first after the warm-up.
            for j in range(len(calls)):
                i = (j + r) % len(calls)
                call, count = calls[i], counts[i]
                # One untimed call of this size first (as nccl-tests warms up each size): the first
                # small call after a large transfer runs slow (seen here: 4 KiB at 0.8-1.3 ms instead
                # of 0.2), and rotation alone cannot help, since the smallest size always follows the largest.
                call()
                sync()
                dist.barrier()
                start = time.perf_counter()
                for _ in range(count):
                    call()
                sync()
                samples[i].append((time.perf_counter() - start) / count)
        per_call = torch.tensor([reduce_samples(x, timing.statistic) for x in samples], dtype=torch.float64)
        dist.all_reduce(per_call, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
        times = per_call.tolist()
        if rank == 0:
            Path(spec["result"]).write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # one collective rank: python -m simulator.calibration.torch_backend SPEC RANK
    _collective_worker(int(sys.argv[2]), json.loads(Path(sys.argv[1]).read_text()))
