"""Replay validation: a real mini RL step of a tiny GPT on the CPU versus the simulator's prediction.

The prediction uses the project's cost models, unchanged, on the calibrated CPU profile:
- generation: `llm.inference.simulate_rollout` (continuous batching engine, prefill + decode steps)
  with the profile's decode step overhead;
- reference: `llm.training.forward_cost`;
- update: `llm.training.train_step_cost` (forward, backward, optimizer).
Nothing here is fitted to the replay; the only inputs are the profile and the replay's shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..hardware.devices import get_device
from ..hardware.profiles import DeviceProfile, apply_profile
from .tinygpt import StageRecord, TinyGPTConfig, run_mini_step

STAGES = ("generate", "reference", "train")
REPLAY_STATISTICS = ("min", "stage_min", "median")


@dataclass(frozen=True)
class ReplayConfig:
    """The mini RL step: a batch of prompts with lognormal target lengths (long-tailed, as RL rollouts)."""

    model: TinyGPTConfig = field(default_factory=TinyGPTConfig)
    num_prompts: int = 16
    prompt_len: int = 32
    response_median: float = 48.0
    response_sigma: float = 0.6
    response_min: int = 8
    response_max: int = 160
    seed: int = 0
    repeats: int = 5       # measured runs after one warm-up run (see `statistic`)
    # How repeated runs become one figure per stage. "min": every piece of the step (prefill, each
    # decode step, each sequence's forward or forward + backward, the optimizer step; a few ms each,
    # as a micro-benchmark batch) keeps its minimum over the runs, and a stage is the sum of its
    # pieces: noise on a shared machine only ever adds time, so the minimum over identical runs is
    # the best estimate (Python's timeit docs), taken at the micro-benchmarks' granularity.
    # "stage_min": each stage's minimum over runs; "median": each stage's median over runs.
    statistic: str = "min"
    # With `calibrate --replay`: rounds of the GEMM and decode-step micro-benchmarks, spread between
    # the replay runs and merged by their minimum, so the profile too samples the whole stretch of
    # time and not the few seconds in which one round ran (the machine's speed drifts over seconds).
    microbench_rounds: int = 2
    threads: int = 1       # torch threads (match the profile's)
    # The replay's optimizer as the training model sees it: torch's fp32 AdamW reads weight,
    # gradient, exp_avg, exp_avg_sq and writes weight, exp_avg, exp_avg_sq: 7 x 4 B per parameter
    # (torch.optim.AdamW); 30 B is the bf16 mixed-precision figure of the training model.
    optimizer_traffic_bytes_per_param: float = 28.0

    def response_lengths(self) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed))
        raw = rng.lognormal(np.log(self.response_median), self.response_sigma, self.num_prompts)
        return np.clip(np.round(raw), self.response_min, self.response_max).astype(np.int64)


def replay_config_from_mapping(mapping: dict[str, Any] | None, *, threads: int | None = None,
                               source: str = "--set replay.*") -> ReplayConfig:
    """A ReplayConfig from `replay.*` keys (`model.*` for the tiny GPT); unknown keys are errors."""
    data = dict(mapping or {})
    model_map = data.pop("model", {}) or {}
    known = {f.name for f in fields(ReplayConfig)} - {"model"}
    model_known = {f.name for f in fields(TinyGPTConfig)}
    for key in data:
        if key not in known:
            raise RlsimError(f"unknown replay key {key!r}", source=source, field=f"replay.{key}",
                             fix=f"use one of: {', '.join(sorted(known | {'model'}))}")
    if not isinstance(model_map, dict):
        raise RlsimError("replay.model must be a mapping", source=source, field="replay.model")
    for key in model_map:
        if key not in model_known:
            raise RlsimError(f"unknown tiny GPT key {key!r}", source=source, field=f"replay.model.{key}",
                             fix=f"use one of: {', '.join(sorted(model_known))}")
    if threads is not None:
        data.setdefault("threads", threads)
    try:
        model = TinyGPTConfig(**model_map)
        config = ReplayConfig(model=model, **data)
    except TypeError as exc:
        raise RlsimError(str(exc), source=source, field="replay") from None
    _check(config, source)
    return config


def _check(config: ReplayConfig, source: str) -> None:
    m = config.model
    positive = {"replay.num_prompts": config.num_prompts, "replay.prompt_len": config.prompt_len,
                "replay.response_min": config.response_min, "replay.repeats": config.repeats,
                "replay.threads": config.threads, "replay.microbench_rounds": config.microbench_rounds,
                "replay.model.num_layers": m.num_layers,
                "replay.model.hidden": m.hidden, "replay.model.num_heads": m.num_heads,
                "replay.model.ffn_hidden": m.ffn_hidden, "replay.model.vocab": m.vocab}
    for where, value in positive.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RlsimError(f"must be a positive integer, got {value!r}", source=source, field=where)
    if m.hidden % m.num_heads:
        raise RlsimError(f"hidden={m.hidden} is not divisible by num_heads={m.num_heads}", source=source,
                         field="replay.model.hidden", fix="pick a multiple of num_heads")
    if config.response_max < config.response_min:
        raise RlsimError("response_max is below response_min", source=source, field="replay.response_max")
    if config.prompt_len + config.response_max > m.max_positions:
        raise RlsimError(f"prompt_len + response_max = {config.prompt_len + config.response_max} exceeds "
                         f"max_positions = {m.max_positions}", source=source, field="replay.model.max_positions",
                         fix="raise replay.model.max_positions or shorten the sequences")
    if config.statistic not in REPLAY_STATISTICS:
        raise RlsimError(f"unknown replay statistic {config.statistic!r}", source=source, field="replay.statistic",
                         fix=f"use one of: {', '.join(REPLAY_STATISTICS)}")
    if m.dtype not in ("fp32", "bf16"):
        raise RlsimError(f"dtype {m.dtype!r} is not supported", source=source, field="replay.model.dtype",
                         fix="use fp32 or bf16")


@dataclass(frozen=True)
class StageComparison:
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Signed relative error: predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass
class ReplayResult:
    stages: dict[str, StageComparison]
    response_lengths: list[int]
    timeline: list[StageRecord]

    @property
    def measured_s(self) -> float:
        return sum(s.measured_s for s in self.stages.values())

    @property
    def predicted_s(self) -> float:
        return sum(s.predicted_s for s in self.stages.values())

    @property
    def total_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: {"measured_s": s.measured_s, "predicted_s": s.predicted_s, "error": s.error}
                               for name, s in self.stages.items()}
        out["total"] = {"measured_s": self.measured_s, "predicted_s": self.predicted_s, "error": self.total_error}
        out["total_error"] = self.total_error
        out["response_lengths"] = list(self.response_lengths)
        return out


def tiny_model_spec(config: TinyGPTConfig) -> Any:
    """The ModelSpec of the torch TinyGPT (same matrices, norms and embeddings)."""
    from ..llm.architecture import ModelSpec
    return ModelSpec(name="tiny-gpt", num_layers=config.num_layers, hidden=config.hidden,
                     ffn_hidden=config.ffn_hidden, num_heads=config.num_heads, num_kv_heads=config.num_heads,
                     head_dim=config.head_dim, vocab=config.vocab, tied_embeddings=False, gated_ffn=True,
                     max_position_embeddings=config.max_positions)


def replay_device(profile: DeviceProfile, dtype: str) -> Any:
    """The catalog CPU with the profile applied. The inference engine names non-quantized compute
    'bf16'; the replay computes in `dtype`, so that dtype's measured peak stands under that name."""
    spec = apply_profile(get_device("cpu"), profile)
    if dtype not in spec.peak_flops:
        raise RlsimError(f"the profile has no {dtype} GEMM rate", field="peak_flops",
                         fix=f"calibrate with {dtype} in microbench.dtypes")
    return spec.replace(peak_flops={**spec.peak_flops, "bf16": spec.peak_flops[dtype]})


def inference_overrides(profile: DeviceProfile, num_layers: int) -> dict[str, float]:
    """The profile's decode figures as `workload.inference` fields for a model of `num_layers`."""
    out: dict[str, float] = {}
    overhead = profile.decode_overhead_s(num_layers)
    if overhead is not None:
        out["step_overhead_s"] = overhead
    if profile.decode_gemm_efficiency is not None:
        out["gemm_efficiency"] = profile.decode_gemm_efficiency
    if profile.decode_hbm_efficiency is not None:
        out["hbm_efficiency"] = profile.decode_hbm_efficiency
    return out


def _topology(device: Any) -> Any:
    from ..hardware.topology import load_topology
    fields = {k: getattr(device, k) for k in ("peak_flops", "hbm_bytes", "hbm_bw_Bps", "scaleup_bw_Bps",
                                               "host_link_bw_Bps", "gemm_efficiency", "hbm_efficiency",
                                               "launch_overhead_s")}
    return load_topology({"name": "calibrated-cpu", "device": {"name": "cpu", **fields},
                          "devices_per_node": 1, "nodes": 1})


def predict_stages(config: ReplayConfig, profile: DeviceProfile,
                   response_lens: np.ndarray) -> dict[str, float]:
    """Seconds per stage that the simulator's cost models predict for the replay on `profile`."""
    from ..llm.inference import InferenceParams, RolloutLayout, simulate_rollout
    from ..llm.training import TrainLayout, TrainParams, forward_cost, train_step_cost

    dtype = config.model.dtype
    model = tiny_model_spec(config.model)
    device = replay_device(profile, dtype)
    inference = InferenceParams(**inference_overrides(profile, config.model.num_layers))
    rollout_layout = RolloutLayout(tp=1, instances=1, max_num_seqs=config.num_prompts, weight_dtype=dtype,
                                   kv_dtype=dtype)
    prompts = np.full(len(response_lens), config.prompt_len, dtype=np.int64)
    rollout = simulate_rollout(model, device, rollout_layout, prompts, response_lens, params=inference)

    elem = 4.0 if dtype == "fp32" else 2.0
    compute = {"dtype": dtype, "activation_bytes": elem}
    if profile.gemm_ramp_dim is not None:
        compute["gemm_ramp_dim"] = profile.gemm_ramp_dim
    if profile.gemm_ramp_k is not None:
        compute["gemm_ramp_k"] = profile.gemm_ramp_k
    params = TrainParams.from_mapping({
        "compute": compute,
        "comm": {"optimizer_traffic_bytes_per_param": config.optimizer_traffic_bytes_per_param,
                 "grad_reduce_bytes_per_param": elem},
        "memory": {"weight_bytes_per_param": elem, "grad_bytes_per_param": elem, "activation_bytes": elem},
    })
    topology = _topology(device)
    # The torch step scores each sequence's prompt + response minus the last token, one per micro-batch.
    sequences = prompts + response_lens - 1
    layout = TrainLayout(tp=1, pp=1, dp=1, zero=0, recompute="none", micro_batch=1)
    reference = forward_cost(model, layout, topology, [0], sequences, packing="packed", params=params)
    train = train_step_cost(model, layout, topology, [0], sequences, packing="packed", params=params)
    return {"generate": float(rollout.makespan_s), "reference": float(reference.time_s),
            "train": float(train.step_time_s)}


def _pieces(record: StageRecord, threads: int) -> tuple[float, ...]:
    """A stage's pieces in seconds: process CPU time with one thread (as the micro-benchmarks), else wall."""
    return record.segments_cpu_s if threads == 1 else record.segments_wall_s


def reduce_runs(runs: list[list[StageRecord]], threads: int, statistic: str) -> dict[str, float]:
    """Seconds per stage from repeated identical runs (see ReplayConfig.statistic)."""
    out: dict[str, float] = {}
    for stage in STAGES:
        pieces = [_pieces(r, threads) for run in runs for r in run if r.stage == stage]
        if statistic == "min":
            if len({len(p) for p in pieces}) != 1:  # same seeds, same work: a mismatch is a bug
                raise RuntimeError(f"replay runs split {stage} into different pieces")
            out[stage] = float(np.min(np.array(pieces), axis=0).sum())
        elif statistic == "stage_min":
            out[stage] = float(min(sum(p) for p in pieces))
        else:
            out[stage] = float(np.median([sum(p) for p in pieces]))
    return out


def calibrate_with_replay(backend: Any, bench: Any, config: ReplayConfig, progress: Any = None,
                          runs_out: list[list[StageRecord]] | None = None,
                          ) -> tuple[Any, dict[str, float], list[StageRecord]]:
    """Micro-benchmarks and replay runs interleaved (warm-up, GEMMs, run 1, copies, run 2, decode
    steps, run 3, [collectives, run,] GEMMs, run 4, decode steps, run 5, ... for
    `microbench_rounds`), so that both sample the same stretch of time: on a shared
    machine the speed drifts by tens of percent within seconds, and the minimum of either side is
    taken from the same quiet moments. Returns (MicrobenchResult, seconds per stage reduced by
    `config.statistic`, the last run's timeline); every run's timeline goes to `runs_out` if given."""
    from .microbench import MicrobenchResult, keep_fastest, run_collectives, run_copies, run_decode, run_gemm

    lens = config.response_lengths()

    def replay_run() -> list[StageRecord]:
        return run_mini_step(config.model, config.prompt_len, lens, seed=config.seed, threads=config.threads)

    say = progress or (lambda text: None)
    say("replay warm-up run")
    replay_run()
    result = MicrobenchResult(facts=backend.describe())
    gemm = ("timing GEMMs", lambda: result.gemm.extend(run_gemm(backend, bench, progress)))
    decode = ("timing decode-like steps", lambda: result.decode.extend(run_decode(backend, bench)))
    phases = [gemm, ("timing copies", lambda: result.copy.extend(run_copies(backend, bench))), decode]
    if bench.collectives:
        phases.append(("timing collectives", lambda: result.collectives.extend(run_collectives(backend, bench))))
    phases += [gemm, decode] * (config.microbench_rounds - 1)
    runs: list[list[StageRecord]] = [] if runs_out is None else runs_out
    for i in range(max(len(phases), config.repeats)):
        if i < len(phases):
            say(phases[i][0])
            phases[i][1]()
        say(f"replay run {i + 1}")
        runs.append(replay_run())
    result.gemm = keep_fastest(result.gemm, lambda g: (g.m, g.n, g.k, g.dtype))
    result.decode = keep_fastest(result.decode, lambda d: (d.shape, d.dtype))
    return result, reduce_runs(runs, config.threads, config.statistic), runs[-1]


def compare(profile: DeviceProfile, config: ReplayConfig, measured: dict[str, float],
            timeline: list[StageRecord]) -> ReplayResult:
    lens = config.response_lengths()
    predicted = predict_stages(config, profile, lens)
    stages = {s: StageComparison(measured[s], predicted[s]) for s in STAGES}
    return ReplayResult(stages=stages, response_lengths=[int(x) for x in lens], timeline=timeline)


def measure_stages(config: ReplayConfig, response_lens: np.ndarray) -> tuple[dict[str, float], list[StageRecord]]:
    """Seconds per stage of the real torch step: one warm-up run, then `repeats` runs reduced by
    `config.statistic`. With one thread the process CPU time is taken (as the micro-benchmarks
    do), else wall time. The timeline returned is the last run's."""
    run_mini_step(config.model, config.prompt_len, response_lens, seed=config.seed, threads=config.threads)
    runs = [run_mini_step(config.model, config.prompt_len, response_lens, seed=config.seed, threads=config.threads)
            for _ in range(max(1, config.repeats))]
    return reduce_runs(runs, config.threads, config.statistic), runs[-1]


def run_replay(profile: DeviceProfile, config: ReplayConfig | None = None) -> ReplayResult:
    """Measure the mini RL step, predict it from `profile`, and compare stage by stage."""
    config = config or ReplayConfig()
    measured, timeline = measure_stages(config, config.response_lengths())
    return compare(profile, config, measured, timeline)
