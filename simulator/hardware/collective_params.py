"""The `collectives:` section of a topology file (network/collectives.py prices with it): part of
the topology's schema, so it is read, and its errors named, when the topology is."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..errors import RlsimError, one_typo_from
from ..units import is_unitless, parse_seconds

# A per-step or launch overhead given as a bare number is read in seconds; one above this is a unit
# left out (step_overhead_s: 1 meant 1 us and priced every collective 6 s), refused as topology.py
# refuses a bare link latency above its MAX_BARE_LINK_LATENCY_S: no collective's software step takes 0.1 s.
MAX_BARE_OVERHEAD_S = 0.1


@dataclass(frozen=True)
class CollectiveParams:
    """Overridable from a topology file's `collectives:` section (units parsed)."""

    # Software cost of one algorithm step (a send/recv handshake of NCCL's Simple/LL protocols);
    # nccl-tests small-message all-reduce on 8 GPUs takes ~10-30 us, i.e. ~1 us per ring step
    # beyond wire latency (hardware.md: "a few to tens of microseconds per step").
    step_overhead_s: float = 1e-6
    # Kernel launch per collective; None takes the device's launch_overhead_s (DeviceSpec).
    launch_overhead_s: float | None = None
    # NCCL MAXCHANNELS: at most 32 rings run in parallel (nccl src/include/device.h).
    max_channels: int = 32
    # All-to-all routes every pair exactly up to this group size; above it, per-device injection
    # bounds are used (n^2 paths would dominate run time).
    exact_all_to_all_max_devices: int = 128
    # The direct (full-mesh) algorithm is offered only up to this group size: checking that every
    # pair has its own link is n^2, and full meshes of devices stay small (8-GPU boards, HCCS).
    direct_max_devices: int = 64

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, source: str | None = None) -> CollectiveParams:
        if not mapping:
            return cls()
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in mapping.items():
            where = f"collectives.{key}"
            if key not in known:
                raise RlsimError(f"unknown field {key!r}{one_typo_from(key, known)}", source=source, field=where,
                                 fix=f"use one of: {', '.join(sorted(known))}")
            if key.endswith("_s"):
                values[key] = None if raw is None else parse_seconds(raw, where, source)
                if values[key] is not None and values[key] < 0:
                    raise RlsimError("must be >= 0", source=source, field=where)
                if is_unitless(raw) and values[key] > MAX_BARE_OVERHEAD_S:
                    raise RlsimError(f"{raw!r} reads as {raw} s (a bare number is seconds): no collective step "
                                     "costs that much", source=source, field=where, fix=f"give the unit, e.g. '{raw}us'")
            else:
                if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                    raise RlsimError(f"expected a whole number >= 1, got {raw!r}", source=source, field=where)
                values[key] = raw
        return cls(**values)
