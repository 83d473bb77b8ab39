"""Device profiles: calibrated figures (YAML) that override a catalog DeviceSpec.

`rlsim calibrate` writes one; a topology device entry may say `profile: PATH`, and a scenario may
say `topology.device_profile=PATH`, to run the simulator on the measured figures instead of the
catalog defaults. Only the fields a profile sets are replaced. Numbers are SI; unit strings
('19GB/s', '3us', '120GFLOPS') are accepted when reading.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from ..atomic import write_text_atomic
from ..errors import RlsimError, did_you_mean
from ..presets import read_yaml
from ..strict_model import StrictModel
from ..units import parse_bandwidth, parse_bytes, parse_flops, parse_seconds
from .devices import check_bare

PROFILE_SCHEMA = 1
# Profile field -> DeviceSpec field it replaces (same names on both sides).
SPEC_FIELDS = ("peak_flops", "gemm_efficiency", "hbm_bytes", "hbm_bw_Bps", "hbm_efficiency",
               "launch_overhead_s", "flash_efficiency_scale", "host_link_bw_Bps", "scaleup_bw_Bps")


class CollectiveFit(StrictModel):
    """time = steps(op, n) x latency_s + busbw_factor(op, n) x bytes / bw_Bps (nccl-tests convention).

    Communication libraries switch protocol with the message size (NCCL: LL / LL128 / Simple; gloo
    over TCP: eager small sends versus chunked streaming), so the fit may have two regimes: from
    `large_from_bytes` on, `large_latency_s` and `large_bw_Bps` apply. `bw_Bps` is then the
    large-message bandwidth (what a topology's link uses) and `latency_s` the small-message one."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: str
    op: str
    world_size: int = Field(ge=2)
    latency_s: float = Field(ge=0)
    bw_Bps: float = Field(gt=0)
    max_fit_error: float = Field(ge=0)  # worst |predicted / measured - 1| over the timed sizes
    small_bw_Bps: float | None = Field(default=None, gt=0)  # small-message regime's bandwidth (two regimes)
    large_from_bytes: float | None = Field(default=None, gt=0)
    large_latency_s: float | None = Field(default=None, ge=0)


class GemmFit(StrictModel):
    """One dtype's GEMM curve, in the training cost model's form (llm/train_compute.gemm_time_s):
    time = launch_overhead_s + max(F / (rate_flops x shape), bytes / memory bw), with the shape ramp
    shape = 1 / (1 + ramp_dim (1/m + 1/n) + ramp_k / k). `ramp_s` is the FLOP-based ramp of profiles written
    before the shape model (its effect, ramp_s / efficiency, is launch_overhead_s); read, not used."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rate_flops: float = Field(gt=0)      # asymptotic FLOP/s on large GEMMs (peak x efficiency)
    launch_overhead_s: float = Field(ge=0)
    ramp_dim: float | None = Field(default=None, ge=0)
    ramp_k: float | None = Field(default=None, ge=0)
    ramp_s: float | None = Field(default=None, ge=0)
    efficiency: float = Field(gt=0, le=1)  # rate_flops / peak
    curve: list[tuple[float, float]] = Field(default_factory=list)  # (FLOPs per GEMM, achieved / peak)
    max_fit_error: float = Field(ge=0)


class DeviceProfile(StrictModel):
    """A calibrated device. `None` fields leave the catalog value alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = PROFILE_SCHEMA
    device: str                            # catalog name the profile applies to (e.g. cpu, h100)
    measured_on: dict[str, Any] = Field(default_factory=dict)  # framework, model, threads ...
    peak_source: str = "catalog"           # where peak_flops comes from (CPU: the best GEMM rate seen)
    # DeviceSpec fields.
    peak_flops: dict[str, Annotated[float, Field(gt=0)]] | None = None
    gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
    hbm_bytes: float | None = Field(default=None, gt=0)
    hbm_bw_Bps: float | None = Field(default=None, gt=0)
    hbm_efficiency: float | None = Field(default=None, gt=0, le=1)
    launch_overhead_s: float | None = Field(default=None, ge=0)
    # The device's flash-attention kernels against a trainer stack's flash ratios (DeviceSpec;
    # benchmarks/device_train_step.py measures it).
    flash_efficiency_scale: float | None = Field(default=None, gt=0, le=1)
    # The training model's GEMM shape ramps (train_params.compute.gemm_ramp_dim / gemm_ramp_k: output
    # and reduction dimensions), fitted with the plateau.
    gemm_ramp_dim: float | None = Field(default=None, ge=0)
    gemm_ramp_k: float | None = Field(default=None, ge=0)
    # Pre-shape-model profiles: the FLOP ramp, whose effect is launch_overhead_s; read, not used.
    gemm_ramp_s: float | None = Field(default=None, ge=0)
    host_link_bw_Bps: float | None = Field(default=None, gt=0)
    scaleup_bw_Bps: float | None = Field(default=None, gt=0)
    # Fixed decode overhead per engine step beyond the roofline: fixed + per_layer x num_layers.
    decode_step_overhead_s: float | None = Field(default=None, ge=0)
    decode_overhead_per_layer_s: float | None = Field(default=None, ge=0)
    # The engine's efficiencies fitted on decode-like steps (workload.inference.gemm_efficiency /
    # hbm_efficiency): small-batch GEMMs and KV reads rarely reach the large-GEMM figures.
    decode_gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
    decode_hbm_efficiency: float | None = Field(default=None, gt=0, le=1)
    decode_fit_error: float | None = Field(default=None, ge=0)
    # Details behind the scalars.
    gemm: dict[str, GemmFit] = Field(default_factory=dict)
    copy_curve: list[tuple[int, float]] = Field(default_factory=list)  # (bytes per copy, achieved B/s)
    collective: CollectiveFit | None = None
    notes: list[str] = Field(default_factory=list)

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _flops(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): parse_flops(v, f"peak_flops.{k}") for k, v in value.items()}
        return value

    @field_validator("hbm_bytes", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        return None if value is None else parse_bytes(value, "hbm_bytes")

    @field_validator("hbm_bw_Bps", "host_link_bw_Bps", "scaleup_bw_Bps", mode="before")
    @classmethod
    def _bw(cls, value: Any) -> Any:
        return None if value is None else parse_bandwidth(value, "bandwidth")

    @field_validator("launch_overhead_s", "gemm_ramp_s", "decode_step_overhead_s", "decode_overhead_per_layer_s", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return None if value is None else parse_seconds(value, "time")

    def decode_overhead_s(self, num_layers: int) -> float | None:
        """The fitted per-step decode overhead of a model with `num_layers` layers (None if not fitted)."""
        if self.decode_step_overhead_s is None:
            return None
        return self.decode_step_overhead_s + (self.decode_overhead_per_layer_s or 0.0) * num_layers

    def spec_fields(self) -> dict[str, Any]:
        """The DeviceSpec fields this profile sets."""
        return {name: getattr(self, name) for name in SPEC_FIELDS if getattr(self, name) is not None}

    def to_mapping(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude_none=True)
        if self.collective is None:
            data.pop("collective", None)
        return data


def profile_from_mapping(mapping: Mapping[str, Any], source: str = "<profile mapping>") -> DeviceProfile:
    """Validate a profile mapping; errors name the file and the field."""
    if not isinstance(mapping, Mapping):
        raise RlsimError("a device profile must be a YAML mapping", source=source,
                         fix="write it with `rlsim calibrate --out PROFILE.yaml`")
    version = mapping.get("schema_version", PROFILE_SCHEMA)
    if version != PROFILE_SCHEMA:
        raise RlsimError(f"profile schema_version {version!r} is not supported", source=source,
                         field="schema_version", fix=f"re-run `rlsim calibrate` (schema {PROFILE_SCHEMA})")
    try:
        profile = DeviceProfile.model_validate(dict(mapping))
    except RlsimError as exc:  # a unit parser inside a validator
        raise RlsimError(str(exc), source=source, fix=exc.fix) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or None
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, RlsimError):   # a unit parser's own message and fix, at its field (peak_flops.bf16)
            inner = cause.field if cause.field and where and cause.field.startswith(where + ".") else where
            raise RlsimError(cause.message, source=source, field=inner, fix=cause.fix) from None
        raise RlsimError(err["msg"] + did_you_mean(err, DeviceProfile), source=source, field=where,
                         fix="correct the value or re-run `rlsim calibrate`; see docs/calibration.md") from None
    _check_units_given(mapping, profile, source)
    return profile


def _check_units_given(mapping: Mapping[str, Any], profile: DeviceProfile, source: str) -> None:
    """A profile's numbers are SI (`rlsim calibrate` writes bytes, B/s, FLOP/s), so a hand-edited
    `hbm_bytes: 80` reads as 80 bytes: below the device floors (devices.check_bare, as a topology's
    device entry) it is a unit left out, refused with the unit to add."""
    for key, value in profile.spec_fields().items():
        if key == "peak_flops":
            given = {str(dtype): raw for dtype, raw in mapping[key].items()}
            for dtype, flops in value.items():
                check_bare(key, given[dtype], flops, f"{key}.{dtype}", source)
        else:
            check_bare(key, mapping[key], value, key, source)


def load_profile(path: str | Path) -> DeviceProfile:
    """Read and validate a profile YAML."""
    data = read_yaml(path, what="device profile",
                     fix="check the path, or write one with `rlsim calibrate --out PATH`")
    return profile_from_mapping(data, source=str(path))


def save_profile(profile: DeviceProfile, path: str | Path) -> Path:
    """Write a profile YAML (keys in schema order, plain numbers in SI units)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# rlsim device profile, written by `rlsim calibrate`. SI units: FLOP/s, bytes, B/s, s.\n"
    return write_text_atomic(path, header + yaml.safe_dump(profile.to_mapping(), sort_keys=False))


def apply_profile(spec: Any, profile: DeviceProfile) -> Any:
    """`spec` (a DeviceSpec) with the fields the profile sets replaced; peak_flops is merged per dtype."""
    fields = profile.spec_fields()
    if "peak_flops" in fields:
        fields["peak_flops"] = {**spec.peak_flops, **fields["peak_flops"]}
    return spec.replace(**fields)


def resolve_profile_path(value: Any, *, base_dir: Path | None = None, source: str | None = None,
                         field: str = "profile") -> Path:
    """A `profile:` entry as a path; relative paths are read from `base_dir` (the topology's folder)."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise RlsimError(f"expected a path to a device profile YAML, got {value!r}", source=source,
                         field=field, fix="write profile: PATH (from `rlsim calibrate --out PATH`)")
    path = Path(str(value)).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if not path.exists():
        raise RlsimError(f"device profile not found: {value}", source=source, field=field,
                         fix="check the path, or write one with `rlsim calibrate --out PATH`")
    return path


def device_with_profile(spec: Any, value: Any, *, base_dir: Path | None = None, source: str | None = None,
                        field: str = "profile") -> Any:
    """The topology hook: a DeviceSpec with the profile at `value` (a path) applied."""
    path = resolve_profile_path(value, base_dir=base_dir, source=source, field=field)
    profile = load_profile(path)
    if profile.device != spec.name:
        raise RlsimError(f"profile {path} was measured on device {profile.device!r}, but the topology's device "
                         f"is {spec.name!r}", source=source, field=field,
                         fix=f"use a profile of {spec.name}, or set `device: {spec.name}` in the profile "
                             "if it really describes this device")
    return apply_profile(spec, profile)
