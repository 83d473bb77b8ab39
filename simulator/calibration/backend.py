"""Choosing a calibration backend: `get_backend(name, device)`.

The interface (Backend, TimingPolicy, DecodeShape, the timing helpers) lives in interface.py and is
re-exported here; the torch implementation (torch_backend.py) is imported lazily, so the core never
imports torch, and it imports interface.py, not this module (no import circle).
"""
from __future__ import annotations

from ..errors import RlsimError
from .interface import (
    BACKENDS,
    COLLECTIVE_OPS,
    DEFAULT_THREADS,
    DEVICES,
    Backend,
    DecodeShape,
    TimingPolicy,
    clock_function,
    reduce_samples,
    time_call,
)

__all__ = ["BACKENDS", "COLLECTIVE_OPS", "DEFAULT_THREADS", "DEVICES", "Backend", "DecodeShape", "TimingPolicy",
           "clock_function", "get_backend", "reduce_samples", "time_call"]


def get_backend(name: str, device: str, *, threads: int = DEFAULT_THREADS, timing: TimingPolicy | None = None) -> Backend:
    """The backend `name` on `device`; RlsimError if the framework or device is missing."""
    if name not in BACKENDS:
        raise RlsimError(f"unknown calibration backend {name!r}", field="--backend",
                         fix=f"use one of: {', '.join(BACKENDS)}")
    if device not in DEVICES:
        raise RlsimError(f"unknown calibration device {device!r}", field="--device",
                         fix=f"use one of: {', '.join(DEVICES)}")
    from .torch_backend import TorchBackend  # lazy: torch is an optional extra
    return TorchBackend(device, threads=threads, timing=timing or TimingPolicy())
