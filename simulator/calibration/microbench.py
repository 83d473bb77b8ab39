"""Micro-benchmarks: GEMM over a size grid and dtypes, memory copy, host<->device copy, a decode-like
step and collectives. The grid is a pydantic model so a YAML mapping or `--set microbench.KEY=...`
can change it; the defaults keep a 2-core CPU calibration to a few seconds."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..errors import RlsimError
from ..strict_model import StrictModel
from .interface import Backend, DecodeShape

Progress = Callable[[str], None]
BYTES_PER_ELEM = {"fp32": 4, "bf16": 2, "fp16": 2}
Dtype = Literal["fp32", "bf16", "fp16"]           # the keys of BYTES_PER_ELEM
CollectiveOp = Literal["all_reduce", "all_gather", "broadcast"]   # interface.COLLECTIVE_OPS
# Upper bounds of the grid: a GEMM dimension (65536: a 65536^2 fp32 operand is 16 GiB), a buffer
# (16 GiB, far above any last-level cache) and the local processes of a collective.
MAX_GEMM_DIM = 2**16
MAX_BUFFER_BYTES = 2**34
MAX_COLLECTIVE_WORLD = 64
GemmDim = Annotated[int, Field(ge=1, le=MAX_GEMM_DIM)]
BufferBytes = Annotated[int, Field(ge=1, le=MAX_BUFFER_BYTES)]


class MicrobenchConfig(StrictModel):
    """What to time. Sizes are chosen for a quick CPU run; a GPU run wants larger ones (see docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # GEMM shapes [m, n, k]: squares for the compute rate; skinny ones (m = tokens of a decode batch or
    # a short sequence, 1..512 rows) and a short reduction (k = 64: a weight gradient over few tokens)
    # pin the shape ramp; transformer-like rectangles for the rest. Each dimension 1..MAX_GEMM_DIM.
    gemm_shapes: list[tuple[GemmDim, GemmDim, GemmDim]] = Field(min_length=1, default_factory=lambda: [
        (32, 32, 32), (64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (768, 768, 768),
        (1, 1024, 256), (8, 1024, 256), (16, 1024, 256), (32, 1024, 256), (64, 1024, 256),
        (128, 1024, 256), (512, 1024, 256), (64, 256, 1024), (1024, 256, 64), (1024, 256, 1024)])
    # None: every dtype the backend offers; a list names at least one of BYTES_PER_ELEM's dtypes.
    dtypes: list[Dtype] | None = Field(default=None, min_length=1)
    # A dtype's grid stops before the first shape whose call would exceed this at the best rate
    # seen so far (keeps a CPU calibration quick when a dtype has no fast path). Finite and > 0.
    max_gemm_call_s: float = Field(default=0.02, gt=0, allow_inf_nan=False)
    # Operand bytes each GEMM shape cycles through, so operands come from memory as a model's
    # weights do: 4x the 32 MiB last-level cache of the CI machine (lscpu), above a GPU's L2.
    gemm_cold_bytes: int = Field(default=128 * 2**20, ge=0, le=MAX_BUFFER_BYTES)
    # Copies: the largest must exceed the last-level cache (32 MiB on the CI machine) to see DRAM.
    copy_sizes_bytes: list[BufferBytes] = Field(min_length=1, default_factory=lambda: [2**20, 2**23, 2**26, 2**28])
    host_copy_sizes_bytes: list[BufferBytes] = Field(min_length=1, default_factory=lambda: [2**20, 2**23, 2**26])
    # Decode-like steps: a small Llama-like layer stack at several batches, depths and context lengths.
    decode_hidden: int = Field(default=256, ge=1, le=MAX_GEMM_DIM)
    decode_ffn_hidden: int = Field(default=704, ge=1, le=MAX_GEMM_DIM)     # ~8/3 x hidden: Llama's SwiGLU sizing
    decode_num_heads: int = Field(default=4, ge=1, le=MAX_GEMM_DIM)
    decode_vocab: int = Field(default=4096, ge=1, le=2**20)
    decode_layers: list[Annotated[int, Field(ge=1, le=1024)]] = Field(min_length=1, default_factory=lambda: [1, 2, 4])
    decode_batches: list[Annotated[int, Field(ge=1, le=MAX_GEMM_DIM)]] = Field(min_length=1,
                                                                              default_factory=lambda: [1, 8, 32])
    decode_kv_lens: list[Annotated[int, Field(ge=1, le=2**20)]] = Field(min_length=1,
                                                                       default_factory=lambda: [64, 256])
    decode_dtype: Dtype = "fp32"
    # Collectives over local processes (gloo on CPU); sizes follow nccl-tests (full buffer bytes).
    collectives: bool = True
    collective_ops: list[CollectiveOp] = Field(min_length=1, default_factory=lambda: ["all_reduce"])
    collective_world_size: int = Field(default=2, ge=2, le=MAX_COLLECTIVE_WORLD)
    collective_sizes_bytes: list[BufferBytes] = Field(
        min_length=1, default_factory=lambda: [2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24])
    # Rounds over all sizes (best round kept): gloo over loopback on a busy 2-core machine needs many
    # to catch both peers scheduled (5 rounds left 46% fit errors, 25 about 15%).
    collective_samples: int = Field(default=25, ge=1, le=10_000)
    collective_launches: int = Field(default=3, ge=1, le=100)  # fresh process groups per op; each size keeps its fastest

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> MicrobenchConfig:
        if self.decode_hidden % self.decode_num_heads:
            raise RlsimError(f"decode_hidden={self.decode_hidden} is not divisible by "
                             f"decode_num_heads={self.decode_num_heads}",
                             fix="give a decode_hidden that is a multiple of decode_num_heads")
        return self

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any] | None, source: str = "<microbench>") -> MicrobenchConfig:
        try:
            return cls.model_validate(mapping or {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            field_name = f"microbench.{where}" if where else "microbench.decode_num_heads"
            got = f" (got {err['input']!r})" if not isinstance(err.get("input"), (dict, list)) else ""
            raise RlsimError(err["msg"].removeprefix("Value error, ") + got, source=source, field=field_name,
                             fix="see docs/calibration.md for the micro-benchmark keys and their ranges") from None

    def decode_shapes(self) -> list[DecodeShape]:
        return [DecodeShape(batch=b, hidden=self.decode_hidden, ffn_hidden=self.decode_ffn_hidden,
                            num_layers=n, kv_len=kv, num_heads=self.decode_num_heads,
                            vocab=self.decode_vocab)
                for n in self.decode_layers for b in self.decode_batches for kv in self.decode_kv_lens]


@dataclass(frozen=True)
class GemmSample:
    m: int
    n: int
    k: int
    dtype: str
    time_s: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        return float(BYTES_PER_ELEM[self.dtype] * (self.m * self.k + self.k * self.n + self.m * self.n))


@dataclass(frozen=True)
class CopySample:
    kind: str  # copy (device to device), h2d, d2h
    nbytes: int
    time_s: float


@dataclass(frozen=True)
class DecodeSample:
    shape: DecodeShape
    dtype: str
    time_s: float

    @property
    def bytes(self) -> float:
        return float(BYTES_PER_ELEM[self.dtype] * (self.shape.weight_elems + self.shape.kv_elems))


@dataclass(frozen=True)
class CollectiveSample:
    op: str
    world_size: int
    nbytes: int
    time_s: float


@dataclass
class MicrobenchResult:
    facts: dict[str, Any]
    gemm: list[GemmSample] = field(default_factory=list)
    copy: list[CopySample] = field(default_factory=list)
    decode: list[DecodeSample] = field(default_factory=list)
    collectives: list[CollectiveSample] = field(default_factory=list)


def _say(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress(text)


def run_gemm(backend: Backend, config: MicrobenchConfig, progress: Progress | None = None) -> list[GemmSample]:
    out = []
    for dtype in config.dtypes or backend.dtypes():
        # Ascending work; a shape whose call the best rate so far puts over the budget is skipped
        # with every larger one (bf16 on a CPU without bf16 instructions is ~30x slower than fp32).
        best_rate = 0.0
        for m, n, k in sorted(config.gemm_shapes, key=lambda s: (s[0] * s[1] * s[2], s)):
            flops = 2.0 * m * n * k
            if best_rate > 0 and flops / best_rate > config.max_gemm_call_s:
                _say(progress, f"gemm {dtype}: skipped {m}x{n}x{k} and larger "
                               f"(~{flops / best_rate * 1e3:.0f} ms per call at {best_rate / 1e9:.1f} GFLOP/s)")
                break
            t = backend.time_gemm(m, n, k, dtype, cold_bytes=config.gemm_cold_bytes)
            out.append(GemmSample(m, n, k, dtype, t))
            best_rate = max(best_rate, flops / t)
    return out


def run_copies(backend: Backend, config: MicrobenchConfig) -> list[CopySample]:
    out = [CopySample("copy", s, backend.time_copy(s)) for s in config.copy_sizes_bytes]
    out += [CopySample("h2d", s, backend.time_host_to_device(s)) for s in config.host_copy_sizes_bytes]
    out += [CopySample("d2h", s, backend.time_device_to_host(s)) for s in config.host_copy_sizes_bytes]
    return out


def run_decode(backend: Backend, config: MicrobenchConfig) -> list[DecodeSample]:
    return [DecodeSample(shape, config.decode_dtype, backend.time_decode_step(shape, config.decode_dtype))
            for shape in config.decode_shapes()]


def run_collectives(backend: Backend, config: MicrobenchConfig) -> list[CollectiveSample]:
    out = []
    for op in config.collective_ops:
        sizes = list(config.collective_sizes_bytes)
        times = backend.time_collectives(op, config.collective_world_size, sizes, samples=config.collective_samples,
                                         launches=config.collective_launches)
        out += [CollectiveSample(op, config.collective_world_size, s, t) for s, t in zip(sizes, times, strict=True)]
    return out


def keep_fastest(samples: list[Any], key: Callable[[Any], object]) -> list[Any]:
    """One sample per key, the fastest: rounds of the same micro-benchmark spread over time merge
    by their minimum, as the batches within a round do (noise only adds time)."""
    best: dict[object, Any] = {}
    for s in samples:
        k = key(s)
        if k not in best or s.time_s < best[k].time_s:
            best[k] = s
    return list(best.values())


def run_microbench(backend: Backend, config: MicrobenchConfig | None = None,
                   progress: Progress | None = None) -> MicrobenchResult:
    """Every micro-benchmark of `config` on `backend`."""
    config = config or MicrobenchConfig()
    result = MicrobenchResult(facts=backend.describe())
    _say(progress, "timing GEMMs")
    result.gemm = run_gemm(backend, config, progress)
    _say(progress, "timing copies")
    result.copy = run_copies(backend, config)
    _say(progress, "timing decode-like steps")
    result.decode = run_decode(backend, config)
    if config.collectives:
        _say(progress, f"timing collectives over {config.collective_world_size} processes")
        result.collectives = run_collectives(backend, config)
    return result
