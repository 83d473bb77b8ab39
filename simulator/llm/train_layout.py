"""The parallel layout of a training job (Megatron-LM naming: TP, PP, virtual stages, DP, EP, CP, ZeRO)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RlsimError

RECOMPUTE_MODES = ("none", "selective", "full")
# Nesting of the `ranks` list, innermost first (Megatron-LM default, arXiv 2104.04473 sec. 3.3; the
# planner's placement.DIMS). EP groups are the innermost `ep` members of the DP dimension.
DEFAULT_ORDER = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True)
class TrainLayout:
    """tp x cp x dp x pp devices; EP is carved out of DP (ep divides dp; the EP group is `ep` consecutive DP ranks).

    `dp=None` means "derive from the device count" (`resolve(n_devices)`). `vpp` is the number of
    model chunks per pipeline rank (interleaved 1F1B when > 1). `sequence_parallel=None` means on
    whenever tp > 1 (Megatron-LM's recommended setting with TP, arXiv 2205.05198)."""

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    dp: int | None = None
    ep: int = 1
    cp: int = 1
    zero: int = 1
    recompute: str = "selective"
    micro_batch: int = 1
    sequence_parallel: bool | None = None
    order: tuple[str, ...] = DEFAULT_ORDER

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "vpp", "ep", "cp", "micro_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RlsimError(f"{name} must be a positive integer, got {value!r}", field=f"train_layout.{name}",
                                 fix=f"set train_layout.{name} to 1 or more")
        if self.dp is not None and (not isinstance(self.dp, int) or self.dp < 1):
            raise RlsimError(f"dp must be a positive integer or auto, got {self.dp!r}", field="train_layout.dp",
                             fix="set train_layout.dp to auto or a positive integer")
        if self.zero not in (0, 1, 2, 3):
            raise RlsimError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}", field="train_layout.zero",
                             fix="set train_layout.zero to 0 (none), 1 (optimizer), 2 (+grads) or 3 (+weights)")
        if self.recompute not in RECOMPUTE_MODES:
            raise RlsimError(f"recompute must be one of {RECOMPUTE_MODES}, got {self.recompute!r}",
                             field="train_layout.recompute", fix="use none, selective or full")
        if sorted(self.order) != sorted(DEFAULT_ORDER):
            raise RlsimError(f"order must be a permutation of {DEFAULT_ORDER}, got {self.order!r}",
                             field="train_layout.order", fix="e.g. [tp, cp, dp, pp] (innermost first)")

    @property
    def sp(self) -> bool:
        return self.tp > 1 if self.sequence_parallel is None else bool(self.sequence_parallel and self.tp > 1)

    @property
    def model_parallel(self) -> int:
        """Devices of one model replica: tp x cp x pp."""
        return self.tp * self.cp * self.pp

    @property
    def devices(self) -> int:
        if self.dp is None:
            raise RlsimError("dp is not resolved", field="train_layout.dp", fix="call resolve(n_devices) first")
        return self.model_parallel * self.dp

    def resolve(self, n_devices: int, source: str | None = None) -> TrainLayout:
        """Fill dp from the device count; check that tp x cp x dp x pp covers it exactly."""
        if self.dp is None:
            if n_devices % self.model_parallel:
                raise RlsimError(f"{n_devices} devices are not a multiple of tp x cp x pp = {self.model_parallel}",
                                 source=source, field="train_layout",
                                 fix="change tp, cp or pp, or the number of training devices")
            return dataclasses.replace(self, dp=n_devices // self.model_parallel)
        if self.devices != n_devices:
            raise RlsimError(f"tp x cp x dp x pp = {self.devices} but {n_devices} devices were given",
                             source=source, field="train_layout.dp", fix="set dp: auto or match the device count")
        return self

    def check_model(self, model: Any, source: str | None = None) -> None:
        """Divisibility: TP must divide the attention heads, EP the experts, EP must fit in DP x CP."""
        heads = int(model.num_heads)
        if heads % self.tp:
            raise RlsimError(f"tp={self.tp} does not divide the {heads} attention heads of {model.name}",
                             source=source, field="train_layout.tp",
                             fix=f"use a tp that divides {heads}, e.g. {_divisors_upto(heads, 16)}")
        experts = int(getattr(model, "num_experts", 0) or 0)
        if self.ep > 1 and not experts:
            raise RlsimError(f"ep={self.ep} but {model.name} is a dense model", source=source,
                             field="train_layout.ep", fix="set ep: 1")
        if experts and experts % self.ep:
            raise RlsimError(f"ep={self.ep} does not divide the {experts} experts of {model.name}",
                             source=source, field="train_layout.ep",
                             fix=f"use an ep that divides {experts}, e.g. {_divisors_upto(experts, 64)}")
        if self.dp is not None and self.dp % self.ep:
            raise RlsimError(f"ep={self.ep} must divide dp={self.dp} (experts are sharded across "
                             "data-parallel ranks)", source=source, field="train_layout.ep",
                             fix="choose an ep that divides dp, or more devices")
        if self.pp * self.vpp > int(model.num_layers):
            raise RlsimError(f"pp x vpp = {self.pp * self.vpp} exceeds the {model.num_layers} layers of "
                             f"{model.name}", source=source, field="train_layout.pp", fix="lower pp or vpp")

    def as_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "ep": self.ep, "cp": self.cp,
                "zero": self.zero, "recompute": self.recompute, "micro_batch": self.micro_batch,
                "sequence_parallel": self.sp}

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str | None = None,
                     field_name: str = "workload.train_layout") -> TrainLayout:
        """From YAML: `{tp: 4, pp: 1, dp: auto, zero: 1, recompute: full, micro_batch: 1}`; errors name
        `field_name.<key>` (the path `--set` takes)."""
        known = {f.name for f in dataclasses.fields(cls)}
        data: dict[str, Any] = {}
        for key, value in dict(mapping).items():
            if key not in known:
                raise RlsimError(f"unknown train_layout key {key!r}", source=source, field=f"{field_name}.{key}",
                                 fix=f"use {', '.join(sorted(known))}")
            if key == "dp" and (value is None or str(value).lower() == "auto"):
                value = None
            elif key == "order":
                value = tuple(str(v) for v in value)
            elif key == "recompute":
                value = "none" if value in (False, None) else str(value).lower()
            elif key == "sequence_parallel":
                value = None if value is None else bool(value)
            data[key] = value
        try:
            return cls(**data)
        except RlsimError as exc:
            field = exc.field.replace("train_layout", field_name, 1) if exc.field else field_name
            raise RlsimError(str(exc).split(": ", 1)[-1].split(" (fix:")[0], source=source, field=field,
                             fix=exc.fix) from None


def _divisors_upto(n: int, cap: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, cap) + 1) if n % d == 0)
