"""Calibrate on logged runs, predict another: fit named mechanism parameters of the simulator to the
per-step phase times of one or more real runs (verl / NeMo RL logs, runlogs.py), then predict the
same workload at another size or schedule with the fitted values.

What is fitted are the cost model's own parameters (FIT_PARAMETERS: the rollout engine's step
overhead, the GEMM / HBM efficiencies, fixed per-phase costs), not per-stage scale factors: a fitted
value moves every phase it enters, at every scale, through the mechanism that uses it. The fit is a
bounded least squares (scipy.optimize.least_squares, trust-region reflective) over the simulator
itself: each residual is a logged step's phase time against the simulated steady-state phase time,
relative (predicted / measured - 1), so long and short phases weigh alike. Uncertainty is the usual
linearised one: covariance = s^2 (J^T J)^-1 with s^2 the residual variance (sum r^2 / (m - n), at
least the logs' own step-to-step spread squared) and J the finite-difference Jacobian at the
solution; parameters the logs barely tell apart (WEAK_DIRECTION_RATIO) are reported unpinned.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_text_atomic
from ..errors import RlsimError
from .runlogs import AREAL_TIMER_STAGES, OTHER_KEYS, STAGE_KEYS, RunLog, no_steps_left, stages_from_summary


@dataclass(frozen=True)
class FitParameter:
    """A scenario key the fit may move: bounds, and the magnitude the fit measures it in (its
    finite-difference steps are relative to max(value, scale))."""

    key: str
    lower: float
    upper: float
    scale: float
    what: str


# Bounds: efficiencies are fractions of a peak, (0, 1] (params.py / hardware/devices.py validate the
# same range; 0.05 keeps the simulator away from a zero rate). Overheads are >= 0; their upper bounds
# are 50x the documented defaults' order of magnitude (formulas.md: step overhead "a few ms";
# scenario.SwitchParams: ~1 s a switch; sleep_wake_s ~10 s a step), room for a slow framework
# without letting the fit run off; a rule reward's up to 10 s a sample (a sandboxed code test runs
# for seconds, a Math-Verify check for milliseconds: params.MATH_VERIFY_*).
EFFICIENCY_FLOOR = 0.05
FIT_PARAMETERS: dict[str, FitParameter] = {p.key: p for p in (
    FitParameter("workload.inference.step_overhead_s", 0.0, 0.1, 1e-3,
                 "rollout engine: fixed CPU time per step (scheduler, input preparation, sampling)"),
    FitParameter("workload.inference.cpu_per_seq_s", 0.0, 1e-3, 1e-5,
                 "rollout engine: CPU time per running sequence and step"),
    FitParameter("workload.inference.gemm_efficiency", EFFICIENCY_FLOOR, 1.0, 0.5,
                 "rollout engine: share of peak FLOP/s its GEMMs reach"),
    FitParameter("workload.inference.hbm_efficiency", EFFICIENCY_FLOOR, 1.0, 0.5,
                 "rollout engine: share of peak HBM bandwidth its decode reaches"),
    FitParameter("topology.device.gemm_efficiency", EFFICIENCY_FLOOR, 1.0, 0.5,
                 "device: GEMM plateau of training and forward passes (and of the rollout engine "
                 "unless workload.inference.gemm_efficiency is set)"),
    FitParameter("topology.device.hbm_efficiency", EFFICIENCY_FLOOR, 1.0, 0.5,
                 "device: HBM share (the rollout engine's unless workload.inference.hbm_efficiency is set)"),
    FitParameter("schedule.switch.overhead_s", 0.0, 60.0, 1.0,
                 "colocated switch: fixed framework cost per switch (process groups, allocator, barrier)"),
    FitParameter("schedule.switch.kv_realloc_s", 0.0, 60.0, 1.0,
                 "colocated switch: KV cache release and re-allocation per switch (engine awake)"),
    FitParameter("schedule.switch.sleep_wake_s", 0.0, 120.0, 10.0,
                 "colocated switch: vLLM sleep + wake_up per step (schedule.switch.engine_sleep)"),
    FitParameter("workload.reward.cpu_s_per_sample", 0.0, 10.0, 1e-3,
                 "rule reward: host CPU time of a response that ends with its answer (its fixed part)"),
    FitParameter("workload.reward.capped_cpu_s_per_sample", 0.0, 10.0, 1e-3,
                 "rule reward: host CPU time of a response cut at its cap (its fixed part)"),
)}
# What `rlsim calibrate --from-log` fits unless told: one engine constant for generation, one rate
# for the rollout's memory-bound decode and one for the trainer's compute.
DEFAULT_FIT_KEYS = ("workload.inference.step_overhead_s", "workload.inference.hbm_efficiency",
                    "topology.device.gemm_efficiency")
# Finite-difference step of the Jacobian, relative to max(1, value / scale): the simulator is piecewise
# smooth (batches, packing), so a step well above float noise but small against the fit's precision.
DIFF_STEP = 0.02
MAX_EVALUATIONS = 40       # simulator evaluations per fit parameter set (least_squares max_nfev)
# Stop when a step changes the cost or the (scaled) parameters by less than this share: the log's
# step-to-step spread is ~1% and more, so a 1e-3 relative change is well inside the uncertainty.
TOLERANCE = 1e-3
SKIP_STEPS = 1             # warm-up steps of a log left out (allocation, compilation, cold caches)


@dataclass(frozen=True)
class LoggedRun:
    """A log and the scenario that describes its run (a path, preset or mapping, plus --set items)."""

    log: RunLog
    scenario: Any
    overrides: tuple[str, ...] = ()
    name: str = ""
    # the simulated steps a logged figure is compared with: the mean of the run's last this many step
    # times (a published table's average of the last steps); None: the steady step (after the first)
    last_steps: int | None = None

    @property
    def label(self) -> str:
        return self.name or self.log.source


def fit_parameters(keys: Sequence[str]) -> list[FitParameter]:
    unknown = [k for k in keys if k not in FIT_PARAMETERS]
    if unknown:
        raise RlsimError(f"not a fit parameter: {unknown[0]!r}", field="--fit",
                         fix=f"use some of: {', '.join(FIT_PARAMETERS)}")
    if len(set(keys)) != len(keys) or not keys:
        raise RlsimError("give each fit parameter once, at least one", field="--fit")
    return [FIT_PARAMETERS[k] for k in keys]


def _device(scenario: Any):
    from ..hardware.topology import load_topology
    return load_topology(scenario.topology).device_spec(0)


def current_value(scenario: Any, key: str) -> float:
    """The value `key` has in a loaded Scenario (an unset engine efficiency: the device's)."""
    section, _, name = key.rpartition(".")
    if section == "topology.device":
        return float(getattr(_device(scenario), name))
    if section == "workload.inference":
        value = getattr(scenario.workload.inference, name)
        return float(getattr(_device(scenario), name) if value is None else value)
    node: Any = scenario.to_dict()
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _schema_default(scenario, key)
        node = node[part]
    return float(node)


def _schema_default(scenario: Any, key: str) -> float:
    if key.startswith("schedule.switch."):
        from ..scenario import SwitchParams
        return float(getattr(SwitchParams(), key.rpartition(".")[2]))
    raise RlsimError(f"{key!r} has no value in this scenario", field=key)


def device_name_items(scenario: Any, keys: Iterable[str]) -> list[str]:
    """The item naming the device that fitted device fields override, where the topology has one kind
    (on groups of several kinds the fields lay over every group's device); [] without device fields."""
    if not any(k.startswith("topology.device.") for k in keys):
        return []
    from ..hardware.topology import load_topology
    kinds = load_topology(scenario.topology).device_kinds()
    return [f"topology.device.name={kinds[0]}"] if len(kinds) == 1 else []


def overlay_items(scenario: Any, values: Mapping[str, float], named: Sequence[str] | None = None) -> list[str]:
    """`--set` items giving `values`, after `named` (device_name_items of the scenario: computed here
    when None; a fit passes it once for all its evaluations, not a topology load per evaluation)."""
    head = device_name_items(scenario, values) if named is None else list(named)
    return head + [f"{k}={float(v):.6g}" for k, v in values.items()]


def predicted_timings(summary: Mapping[str, Any]) -> dict[str, float]:
    """A simulated summary as the log's stages: verl's phases where the summary has them
    (verl_timing_s: its gen with the switches and the weight sync; generate_sequences the generation
    alone), else the stage times; `logprobs` = old_log_prob + reference (NeMo's one timer);
    OpenRLHF's phases where the summary has them (openrlhf_timing_s: its generation holds the engine's
    sleep and wake); `step_s` = verl's step where its phases are read, else the steady step."""
    stages = summary.get("stage_time_s", {})
    out = stages_from_summary(stages)
    verl = summary.get("verl_timing_s") or {}
    for name, stage in (("gen", "generate"), ("old_log_prob", "old_log_prob"), ("ref", "reference"),
                        ("update_actor", "update_actor"), ("reward", "reward"), ("wait_prev_gen", "wait_prev_gen")):
        if name in verl:
            out[stage] = float(verl[name])
    # NeMo RL's one log-prob timer; SkyRL's fwd_logprobs_values_reward also holds the critic's values
    out["logprobs"] = out.get("old_log_prob", 0.0) + out.get("reference", 0.0) + out.get("values", 0.0)
    out["weight_sync"] = float(stages.get("weight_sync", 0.0))
    # verl's timing_s/generate_sequences: the generation alone (its gen, verl_timing_s, holds the switches too)
    out["generate_sequences"] = float(stages.get("generate", 0.0))
    # SkyRL's sync_weights: the transfer and, colocated, the switch back to generation (the policy's
    # state to the host, the engines woken); its fully-async run_training: the forwards and updates
    out["sync_weights"] = out["weight_sync"] + float(stages.get("switch_to_rollout", 0.0))
    out["run_training"] = out["logprobs"] + out.get("update_actor", 0.0) + out.get("update_critic", 0.0)
    out.update(_areal_timers(summary, out))
    openrlhf = summary.get("openrlhf_timing_s") or {}   # output.timers: openrlhf (the hybrid engine)
    for name, stage in (("generation", "generate"), ("make_experience", "make_experience"),
                        ("ppo_train", "ppo_train"), ("broadcast", "broadcast")):
        if name in openrlhf:
            out[stage] = float(openrlhf[name])
    # the step over the same steps as the phases: verl's timers' own step where the phases are theirs (a
    # hybrid engine's are the whole run's, its first step too), else the steady step; a steady step beside
    # whole-run phases left the prediction 1.1% at odds with itself (a calibration audit)
    out["step_s"] = float(verl["step"]) if "step" in verl else float(summary["steady_step_time_s"])
    return out


def _areal_timers(summary: Mapping[str, Any], out: Mapping[str, float]) -> dict[str, float]:
    """AReaL's `rollout` timer as the log names it (runlogs.AREAL_TIMER_STAGES): on split pools (kind
    areal) the trainer's wait for its batch and its phases as AReaL times them, the mean of the steps
    after the first (which waits for a whole generation: the warm-up a fit skips; all of them when
    there is one); colocated, the generation it times (rlsim's `generate`)."""
    steps = (summary.get("areal") or {}).get("per_step") or []
    if not steps:
        return {"rollout": out.get("generate", 0.0)}
    steady = steps[1:] or steps
    timers = {f"{name}_s": stage for name, stage in AREAL_TIMER_STAGES.items()}   # per_step's keys
    return {stage: float(sum(step[key] for step in steady) / len(steady))
            for key, stage in timers.items() if key in steady[0]}


def simulate_timings(scenario: Any, overrides: Sequence[str] = (), last_steps: int | None = None) -> dict[str, float]:
    """The simulated phases of `scenario` with `overrides` (--set items), as the log names them;
    ``last_steps``: `step_s` is the mean of the run's last that many step times (LoggedRun.last_steps)."""
    from ..api import simulate
    from ..scenario import load_scenario
    result = simulate(load_scenario(scenario, overrides=list(overrides)))
    out = predicted_timings(result.summary)
    if last_steps is not None:
        out["step_s"] = float(result.iterations.tail(last_steps)["step_time_s"].mean())
    return out


# A logged phase time below a microsecond is not a phase the run timed (the frameworks' timers read
# time.perf_counter / time.time around whole phases); fitted relative errors against it would
# overflow (predicted / 1e-300). Such times are left out as 0 s ones are.
MIN_TIMED_S = 1e-6


def _measured(run: LoggedRun, skip_steps: int) -> dict[str, np.ndarray]:
    """Per compared stage, the logged steps' times of at least MIN_TIMED_S after the warm-up."""
    rows = run.log.frame.iloc[skip_steps:]
    if rows.empty:
        raise no_steps_left(run.log, skip_steps)
    out = {}
    for stage in run.log.timings:
        values = rows[stage].to_numpy(dtype=float)
        timed = values >= MIN_TIMED_S
        if timed.any():
            out[stage] = values[timed]
    if not out:
        raise RlsimError(f"no phase time of at least {MIN_TIMED_S:g} s to fit", source=run.log.source,
                         fix="check the log's timings (seconds per phase and step)")
    return out


def _drop_unpredicted(run: LoggedRun, measured: dict[str, np.ndarray], predicted: Mapping[str, float]) -> list[str]:
    """Leave out of `measured` (in place) the logged stages the scenario does not simulate (no
    prediction, or 0 s: e.g. a critic's stages in a GRPO scenario), which a fit could only compare
    with 0; returns their names (a note of the fit). No stage left is an error."""
    dropped = [stage for stage in measured if predicted.get(stage, 0.0) <= 0]
    if dropped and len(dropped) == len(measured):
        raise RlsimError(f"the scenario simulates none of the logged stages ({', '.join(dropped)})",
                         source=run.label, field="--scenario",
                         fix="give the --scenario the logged run ran (its schedule, critic, stages)")
    for stage in dropped:
        del measured[stage]
    return dropped


# A logged timing whose median is more than this many times the scenario's simulated phase (at the
# fit's starting values) is not that phase in seconds: a log in milliseconds reads 1000x. The fitted
# parameters cannot bridge it: an efficiency at its floor (EFFICIENCY_FLOOR, 0.05) against the
# catalog devices' 0.5-0.85 (hardware/devices.py) slows a phase 10-17x, a scenario a size off is some 30% (UNEXPLAINED_RMS), and the
# overheads' bounds are 50x their defaults' order (FIT_PARAMETERS). Checked before the fit, naming the
# column: after it, such a log ended at its bounds with only the fit's rms error to say why.
UNIT_SLIP_RATIO = 100.0


def _refuse_unit_slip(run: LoggedRun, measured: Mapping[str, np.ndarray], predicted: Mapping[str, float]) -> None:
    """The first compared column whose median step is over UNIT_SLIP_RATIO x its simulated phase is refused."""
    columns = {STAGE_KEYS.get(key, "step_s"): key for key in run.log.timing_keys}
    for stage, values in measured.items():
        simulated = predicted.get(stage, 0.0)
        median = float(np.median(values))
        if simulated > 0 and median > UNIT_SLIP_RATIO * simulated:
            column = columns.get(stage, stage)
            raise RlsimError(f"{column}'s median ({median:g} s) is {median / simulated:.0f}x the simulated {stage} "
                             f"({simulated:.3g} s), past {UNIT_SLIP_RATIO:g}x: not this scenario's phase in seconds",
                             source=run.label, field=column,
                             fix="if the log is in milliseconds, divide its timings by 1000 (the frameworks' "
                                 "timers log seconds); else check that --scenario describes the logged run")


def residuals(predicted: Mapping[str, float], measured: Mapping[str, np.ndarray]) -> np.ndarray:
    """predicted / measured - 1 for every logged step of every compared stage."""
    return np.concatenate([predicted.get(stage, 0.0) / m - 1.0 for stage, m in measured.items()])


@dataclass
class LogFit:
    """Fitted values with their 1-sigma uncertainty; per run and stage, measured / before / after."""

    keys: list[str]
    values: dict[str, float]
    sigma: dict[str, float]
    start: dict[str, float]
    at_bound: list[str]
    evaluations: int
    rms_before: float
    rms_after: float
    stages: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)   # the device kinds fitted topology.device.* values are of

    def to_json(self) -> dict[str, Any]:
        # pinned: false for an infinite sigma (the logs do not pin it), null for an undefined one (too
        # few logged steps to tell): JSON writes both sigmas as null
        return {"fitted": {k: {"value": self.values[k], "sigma": self.sigma[k], "start": self.start[k],
                               "at_bound": k in self.at_bound,
                               "pinned": None if np.isnan(self.sigma[k]) else bool(np.isfinite(self.sigma[k]))}
                           for k in self.keys},
                "set": list(self.items), "evaluations": self.evaluations,
                "rms_relative_error": {"before": self.rms_before, "after": self.rms_after},
                "runs": self.stages, "notes": list(self.notes)}


# A direction of parameter space the logs do not see: a singular value of the Jacobian below this
# share of the largest (float round-off of the finite differences is ~1e-8 of it).
RANK_TOLERANCE = 1e-6
# A combination of parameters the logs barely tell apart: a singular value of the Jacobian with its
# columns scaled to unit norm (so the ratio says how alike two parameters move the logged phases, not
# how much) below this share of the largest. At a ratio r the combination is pinned 1/r times worse
# than the best-pinned one: at 1e-2 a log's 1% spread leaves it +-100%. On rlsim's own logs under
# known values (docs/calibration.md, "Parameters the logs cannot tell apart") the fits that recover
# step overhead and engine HBM efficiency have ratios of 0.016 (a second run with 8x longer
# responses) and 0.36 (a second model size); those that do not, 6e-4 (one run: both enter only the
# generation) and 4.7e-3 (a second batch size); parameters of different phases (step overhead, GEMM
# rate, switch cost) lie at 0.58 .. 0.98.
WEAK_DIRECTION_RATIO = 1e-2
# A parameter with more than this component in such a weak direction (a unit vector) is not pinned
# (sigma inf); a smaller share enters its sigma through the covariance.
WEAK_SHARE = 0.1


def _normalized_svd(jac: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column norms of `jac` (1 for a zero column), and the singular values and right vectors of
    `jac` with its columns scaled to unit norm."""
    norms = np.linalg.norm(jac, axis=0)
    norms = np.where(norms > 0, norms, 1.0)
    _, singular, vt = np.linalg.svd(jac / norms, full_matrices=False)
    return norms, singular, vt


def weak_directions(jac: np.ndarray) -> list[tuple[float, list[int]]]:
    """Per direction the logs barely see (WEAK_DIRECTION_RATIO): its singular-value ratio and the
    indices of the parameters with more than WEAK_SHARE of it."""
    _, singular, vt = _normalized_svd(np.asarray(jac, dtype=float))
    if not len(singular) or singular[0] == 0:
        return []
    return [(float(value / singular[0]), [int(i) for i in np.flatnonzero(np.abs(vector) > WEAK_SHARE)])
            for value, vector in zip(singular, vt, strict=True) if value < WEAK_DIRECTION_RATIO * singular[0]]


def _uncertainty(jac: np.ndarray, res: np.ndarray, scale: np.ndarray, spread: float = 0.0) -> np.ndarray:
    """1-sigma of each parameter, s^2 (J^T J)^-1 over the directions the logs see (SVD of J with unit
    columns), s^2 the residual variance, at least `spread`^2 (the logs' own step-to-step spread: a
    fit closer than that is luck, not precision). A parameter with a share in a direction they do not
    see (RANK_TOLERANCE) or barely see (WEAK_DIRECTION_RATIO, WEAK_SHARE), e.g. two parameters that
    only ever enter one logged figure, gets inf, with too few residuals for a variance too (the
    others' sigma is then undefined, nan)."""
    m, n = jac.shape
    # zero rows give a short Jacobian's right vectors their null directions, changing nothing else
    norms, singular, vt = _normalized_svd(np.vstack([jac, np.zeros((max(0, n - m), n))]))
    largest = singular[0] if len(singular) else 0.0
    seen = singular > RANK_TOLERANCE * largest
    if m > n:
        s2 = max(float(res @ res) / (m - n), spread ** 2)
        cov = (vt[seen].T / singular[seen] ** 2) @ vt[seen] * s2
        sigma = np.sqrt(np.clip(np.diag(cov), 0.0, None)) / norms * scale
    else:
        sigma = np.full(n, np.nan)
    blind = np.abs(vt[~seen]) > RANK_TOLERANCE
    weak = np.abs(vt[seen & (singular < WEAK_DIRECTION_RATIO * largest)]) > WEAK_SHARE
    sigma[np.any(np.vstack([blind, weak, np.zeros((1, n), bool)]), axis=0)] = np.inf
    sigma[~seen.any() | (np.linalg.norm(jac, axis=0) == 0)] = np.inf
    return sigma


def _check_one_device(runs: Sequence[LoggedRun], loaded: Sequence[Any], params: Sequence[Any]) -> None:
    """One fitted device field for runs on different devices would be one value for two devices
    (and the overlay named the first run's device, turning the others into it): refused."""
    if not any(p.key.startswith("topology.device.") for p in params):
        return
    from ..hardware.topology import load_topology
    kinds = [tuple(load_topology(sc.topology).device_kinds()) for sc in loaded]
    if len(set(kinds)) > 1:
        shown = "; ".join(f"{run.label}: {', '.join(k)}" for run, k in zip(runs, kinds, strict=True))
        raise RlsimError(f"the logged runs ran on different devices ({shown}): one fitted topology.device.* value "
                         "cannot stand for them", field="--fit",
                         fix="fit each device's runs in their own rlsim calibrate --from-log, or fit only "
                             "workload.* / schedule.* keys across them")


def fit_runs(runs: Sequence[LoggedRun], keys: Sequence[str] | str = DEFAULT_FIT_KEYS, *,
             skip_steps: int = SKIP_STEPS, max_evaluations: int = MAX_EVALUATIONS,
             diff_step: float = DIFF_STEP) -> LogFit:
    """Fit `keys` to every run's logged phases (one value per key for all runs)."""
    from scipy.optimize import least_squares

    from ..scenario import load_scenario

    keys = _fit_keys(keys)
    check_skip_steps(skip_steps)
    if not runs:
        raise RlsimError("no logged run to fit", field="--from-log", fix="give at least one LOG with its --scenario")
    params = fit_parameters(keys)
    loaded = [load_scenario(r.scenario, overrides=list(r.overrides)) for r in runs]
    _check_one_device(runs, loaded, params)
    measured = [_measured(r, skip_steps) for r in runs]
    lower, upper = (np.array([getattr(p, a) for p in params]) for a in ("lower", "upper"))
    start = np.clip([current_value(loaded[0], p.key) for p in params], lower, upper)
    scale = np.array([max(p.scale, abs(v)) for p, v in zip(params, start, strict=True)])

    def values_of(z: np.ndarray) -> dict[str, float]:
        return {p.key: float(v) for p, v in zip(params, np.clip(z * scale, lower, upper), strict=True)}

    named = [device_name_items(sc, keys) for sc in loaded]

    def predictions(z: np.ndarray) -> list[dict[str, float]]:
        vals = values_of(z)
        with _blamed_on_fit(params):
            return [simulate_timings(r.scenario, [*r.overrides, *overlay_items(sc, vals, n)], r.last_steps)
                    for r, sc, n in zip(runs, loaded, named, strict=True)]

    def all_residuals(z: np.ndarray) -> np.ndarray:
        return np.concatenate([residuals(p, m) for p, m in zip(predictions(z), measured, strict=True)])

    before = predictions(start / scale)
    left_out = [_drop_unpredicted(r, m, b) for r, m, b in zip(runs, measured, before, strict=True)]
    for run, m, b in zip(runs, measured, before, strict=True):
        _refuse_unit_slip(run, m, b)
    r0 = np.concatenate([residuals(p, m) for p, m in zip(before, measured, strict=True)])
    result = least_squares(all_residuals, start / scale, bounds=(lower / scale, upper / scale),
                           diff_step=diff_step, max_nfev=max_evaluations, method="trf",
                           ftol=TOLERANCE, xtol=TOLERANCE, gtol=TOLERANCE)
    _refuse_unseen(params, result.jac, measured)
    # a value at its bound is the bound (the solver stops a hair inside it: 1e-12 for 0)
    values = {**values_of(result.x), **{p.key: float(lower[i] if side < 0 else upper[i])
                                        for i, (p, side) in enumerate(zip(params, result.active_mask, strict=True))
                                        if side != 0}}
    after = predictions(values_to_z(values, params, scale))
    _refuse_unexplained(runs, measured, after, params, values)
    sigma = _uncertainty(result.jac, result.fun, scale, _log_spread(measured))
    sigma[sigma >= upper - lower] = np.inf   # an interval wider than the whole range pins nothing
    shared, shared_note = _shared_overrides(runs, keys, named[0])
    fit = LogFit(keys=[p.key for p in params], values=values,
                 sigma={p.key: float(s) for p, s in zip(params, sigma, strict=True)},
                 start={p.key: float(v) for p, v in zip(params, start, strict=True)},
                 at_bound=[p.key for p, a in zip(params, result.active_mask, strict=True) if a != 0],
                 evaluations=int(result.nfev), rms_before=_rms(r0), rms_after=_rms(result.fun),
                 items=[*shared, *overlay_items(loaded[0], values, named[0])],
                 devices=_fitted_devices(loaded[0], keys))
    for run, m, b, a, dropped in zip(runs, measured, before, after, left_out, strict=True):
        fit.stages[run.label] = {s: {"measured_s": float(np.mean(v)), "before_s": b.get(s, 0.0),
                                     "after_s": a.get(s, 0.0)} for s, v in m.items()}
        fit.notes.extend([*_run_notes(run, dropped), *_outlier_notes(run, skip_steps)])
    fit.notes.extend([*([shared_note] if shared_note else []), *_fit_notes(fit, result, measured, params),
                      *_weak_notes(result.jac, params)])
    return fit


def values_to_z(values: Mapping[str, float], params: Sequence[FitParameter], scale: np.ndarray) -> np.ndarray:
    """The solver's scaled coordinates of ``values``."""
    return np.array([values[p.key] for p in params]) / scale


def _fit_keys(keys: Sequence[str] | str) -> list[str]:
    from ..overrides import string_items  # a lone key is one key, not its letters
    return string_items(keys, field="--fit", what="fit parameter names",
                        example="keys=['topology.device.gemm_efficiency']")


def check_skip_steps(skip_steps: Any) -> None:
    """The warm-up steps left out of a log: a whole number >= 0 (-1 kept only the last step)."""
    if isinstance(skip_steps, bool) or not isinstance(skip_steps, (int, np.integer)) or skip_steps < 0:
        raise RlsimError(f"must be a whole number >= 0, got {skip_steps!r}", field="--skip-steps",
                         fix="e.g. --skip-steps 1 (the warm-up step)")


@contextmanager
def _blamed_on_fit(params: Sequence[FitParameter]) -> Iterator[None]:
    """An error on a fitted key (or on the section holding it) at any value the fit tries is the --fit
    request's (the scenario refuses the key there: nothing reads it), not the scenario file's."""
    try:
        yield
    except RlsimError as exc:
        where = exc.field or ""
        fitted = next((p.key for p in params if where and (where == p.key or p.key.startswith(where + ".")
                                                           or where.startswith(p.key + "."))), None)
        if fitted is None:
            raise
        raise RlsimError(f"{fitted} cannot be fitted on this scenario: {exc.message}", field="--fit",
                         fix=f"leave {fitted} out of --fit") from None


# A Jacobian entry (relative residual per scaled parameter) at or below this is no effect: a key that
# moves no phase still shifts its finish times' float sums (kv_realloc_s moved verl's generate_sequences by
# 2e-15 s in 8.4 s, entries ~1e-14), while a phase a key enters moves by ~1e-3 or more a unit.
UNSEEN_JACOBIAN = 1e-9


def _refuse_unseen(params: Sequence[FitParameter], jac: np.ndarray, measured: Sequence[Mapping[str, Any]]) -> None:
    """A fitted key that moves none of the logged phases (its Jacobian column is 0 but for float noise,
    UNSEEN_JACOBIAN): nothing in the logs can fit it, and its '+- inf' was a fit all the same."""
    unseen = [p.key for p, column in zip(params, np.asarray(jac).T, strict=True)
              if not np.any(np.abs(column) > UNSEEN_JACOBIAN)]
    if unseen:
        phases = sorted({stage for m in measured for stage in m})
        raise RlsimError(f"{', '.join(unseen)} moves none of the logged phases ({', '.join(phases)}) of this "
                         "scenario: the logs cannot fit it", field="--fit",
                         fix=f"leave {', '.join(unseen)} out of --fit, or give a log that times the phase it enters")


# A fit that leaves an rms relative error above this on a log does not explain it: fits of real runs'
# logs leave 2-12% (docs/calibration.md, V6), a scenario a size off some 30%; a log in milliseconds
# (1000x the seconds) leaves 99%, columns read under another framework's name (a generation time as
# TRL's step_time) 228% (the audit's verl_ms.jsonl, wrongcols.csv). Its overlay would mislead.
UNEXPLAINED_RMS = 0.5


def _refuse_unexplained(runs: Sequence[LoggedRun], measured: Sequence[Mapping[str, np.ndarray]],
                        after: Sequence[Mapping[str, float]], params: Sequence[FitParameter],
                        values: Mapping[str, float]) -> None:
    """A fit that cannot explain its logs is an error, not an overlay: a run's rms relative error
    above UNEXPLAINED_RMS after the fit, or every fitted value at a bound other than 0 (no overhead
    is a value a run may have; an efficiency's floor or a cap is not)."""
    rms = [_rms(residuals(a, m)) for a, m in zip(after, measured, strict=True)]
    bounded = all(values[p.key] != 0 and values[p.key] in (p.lower, p.upper) for p in params)
    bad = [run for run, r in zip(runs, rms, strict=True) if r > UNEXPLAINED_RMS or bounded]
    if not bad:
        return
    run = bad[0]
    what = (f"the fit leaves {rms[list(runs).index(run)]:.0%} rms relative error (above {UNEXPLAINED_RMS:.0%})"
            if not bounded else "every fitted parameter ends at a bound")
    names = run.log.matched_names
    raise RlsimError(f"{what}: the fit cannot explain this log{f', read by {names} timing names' if names else ''}",
                     source=run.label, field="--from-log",
                     fix="check that the log is in seconds (a log in milliseconds reads 1000x slow), that its "
                         "columns are the framework's own timers (not other metrics under a known name), and that "
                         "--scenario describes the logged run")


def _shared_overrides(runs: Sequence[LoggedRun], keys: Sequence[str], named: Sequence[str]) -> tuple[list[str], str]:
    """The --set items every run was fitted under (the overlay's `set:` starts with them, so that
    `rlsim run S --set ...` reproduces the fit), less those a fitted item replaces; with a note when
    the runs' items differ (then none is carried)."""
    from ..overrides import parse_assignment
    first = list(runs[0].overrides)
    if any(list(r.overrides) != first for r in runs[1:]):
        return [], ("the runs were fitted under different --set items: the overlay's set: holds the fitted "
                    "values only; give each run's own items with it")
    replaced = {*keys, *(parse_assignment(item)[0] for item in named)}
    return [item for item in first if parse_assignment(item)[0] not in replaced], ""


def _fitted_devices(scenario: Any, keys: Sequence[str]) -> list[str]:
    """The device kinds the fitted topology.device.* values were fitted on ([] without such keys)."""
    if not any(k.startswith("topology.device.") for k in keys):
        return []
    from ..hardware.topology import load_topology
    return list(load_topology(scenario.topology).device_kinds())


def _run_notes(run: LoggedRun, dropped: Sequence[str]) -> list[str]:
    notes = []
    if dropped:
        notes.append(f"{run.label}: logged stage(s) left out of the fit, the scenario has no such stage "
                     f"(predicted 0 s): {', '.join(dropped)} (check that the scenario describes the "
                     "logged run, e.g. its critic)")
    if run.log.matched_names:
        notes.append(f"{run.label}: timings read by {run.log.matched_names} metric names")
    notes.extend(f"{run.label}: {note}" for note in run.log.notes)
    read = [key for key, column in OTHER_KEYS.items() if column in run.log.frame.columns]
    if read:   # read off the log, not fitted: said, as the ignored names are
        notes.append(f"{run.label}: read, not fitted (the fit compares phase times): {', '.join(read)}; "
                     "compare them with the fitted run's summary")
    if run.log.ignored:
        notes.append(f"{run.label}: ignored metric names (not timings rlsim reads): " + ", ".join(run.log.ignored))
    return notes


# The fit is said not to describe its logs when its rms relative error stays above this many times
# the logs' own step-to-step spread (and above MISFIT_FLOOR): the residuals are then the model's
# misfit, not noise, and the sigmas (which take them for noise) mean little.
MISFIT_FACTOR = 3.0
MISFIT_FLOOR = 0.05
# A fitted value this share of its range from a non-zero bound is said to be near it.
NEAR_BOUND = 0.02


def _fit_notes(fit: LogFit, result: Any, measured: Sequence[Mapping[str, np.ndarray]],
               params: Sequence[FitParameter]) -> list[str]:
    notes = []
    if not result.success:
        notes.append(f"least squares stopped before converging: {result.message}")
    if any(not np.isfinite(s) for s in fit.sigma.values()):
        notes.append("an infinite / undefined sigma: the logs do not pin that parameter "
                      "(log more phases or more runs, or fit fewer parameters)")
    for p in params:
        value = fit.values[p.key]
        # a bound of 0 (no overhead) is a value a run may have; an efficiency's floor or a cap is not
        near = [bound for bound in (p.lower, p.upper)
                if bound and abs(value - bound) <= NEAR_BOUND * (p.upper - p.lower)]
        if p.key in fit.at_bound or near:
            notes.append(f"{p.key} ended {'at' if p.key in fit.at_bound else 'near'} its bound ({value:.4g} of "
                         f"{p.lower:g} .. {p.upper:g}): the logs ask for a value at or past what the model holds "
                         "physical; check that the scenario describes the run")
    spread = _log_spread(measured)
    if fit.rms_after > max(MISFIT_FACTOR * spread, MISFIT_FLOOR):
        notes.append(f"the fit leaves {fit.rms_after:.1%} rms against the logs' own {spread:.1%} step-to-step "
                     "spread: the scenario does not describe the logged run closely (model, batch, lengths, "
                     "layouts, units), and the sigmas, which take the residuals for noise, are not to be trusted")
    return notes


# What separates a pair the logs cannot tell apart, where known: the engine's fixed time per decode
# step and its HBM rate both enter generation only, once per step alike; a run of another model size
# (another number of bytes each step reads, the same steps) or of much longer responses (KV reads
# that grow) separates them (docs/calibration.md).
SEPARATED_BY: dict[frozenset[str], str] = {
    frozenset({"workload.inference.step_overhead_s", "workload.inference.hbm_efficiency"}):
        "a second log of a run with another model size or much longer responses (decode steps that read "
        "other bytes)",
}


def _weak_notes(jac: np.ndarray, params: Sequence[FitParameter]) -> list[str]:
    """A note per combination of fitted parameters the logs barely tell apart (weak_directions)."""
    notes = []
    for ratio, members in weak_directions(jac):
        keys = [params[i].key for i in members]
        if len(keys) < 2:
            continue   # one parameter alone barely seen: its sigma says so
        hint = SEPARATED_BY.get(frozenset(keys), "a log of another run that these parameters move differently "
                                                 "(another model size, batch or response length)")
        notes.append(f"{' and '.join(keys)} move the logged phases almost alike (singular-value ratio {ratio:.2g}, "
                     f"below {WEAK_DIRECTION_RATIO:g}): the logs pin a combination of them, not each, so they are "
                     f"reported unpinned (sigma inf); to separate them give {hint}, or leave all but one out of "
                     "--fit (the others keep the scenario's values)")
    return notes


# The normal distribution's standard deviation per median absolute deviation: the MAD of a sample,
# times this, estimates its sigma without letting a few outlying steps set it.
MAD_TO_SIGMA = 1.4826
# A logged step is said to be an outlier when one of its phases lies more than OUTLIER_MADS robust
# sigmas (MAD_TO_SIGMA x MAD) from that phase's median over the fitted steps, and more than
# OUTLIER_MIN_SHARE of it (a timer's rounding or a noise-free log has MAD 0). 5 sigma: a normal
# step is that far once in ~2 million; a warm-up step (compilation, cold caches) is 1.5x and more.
OUTLIER_MADS = 5.0
OUTLIER_MIN_SHARE = 0.05


def _relative_deviations(values: np.ndarray) -> np.ndarray:
    return values / np.median(values) - 1.0


def _log_spread(measured: Sequence[Mapping[str, np.ndarray]]) -> float:
    """The logged phases' robust step-to-step spread: MAD_TO_SIGMA x the median absolute relative
    deviation of every phase's steps from its median (0 for one step each), which a few outlying
    steps cannot inflate (an rms would, and hide a misfit behind them)."""
    deviations = [_relative_deviations(values) for m in measured for values in m.values() if len(values) > 1]
    return MAD_TO_SIGMA * float(np.median(np.abs(np.concatenate(deviations)))) if deviations else 0.0


def _outlier_notes(run: LoggedRun, skip_steps: int) -> list[str]:
    """A note naming the fitted steps with a phase far from its median (OUTLIER_MADS): fitted as any
    other step, they move the fitted values; leading ones are likely warm-up (--skip-steps)."""
    rows = run.log.frame.iloc[skip_steps:]
    worst = np.zeros(len(rows))   # per step, its phases' largest outlying relative deviation (0: none)
    for stage in run.log.timings:
        values = rows[stage].to_numpy(dtype=float)
        if len(values) < 3 or np.median(values) < MIN_TIMED_S:
            continue
        deviation = _relative_deviations(values)
        robust = MAD_TO_SIGMA * float(np.median(np.abs(deviation)))
        outlying = (np.abs(deviation) > OUTLIER_MADS * robust) & (np.abs(deviation) > OUTLIER_MIN_SHARE)
        worst = np.where(outlying & (np.abs(deviation) > np.abs(worst)), deviation, worst)
    far = worst != 0
    if not far.any():
        return []
    steps = rows["step"].to_numpy()[far].tolist()
    leading = len(far) if far.all() else int(np.argmin(far))   # outlying steps before the first plain one
    advice = (f"if they are warm-up, give --skip-steps {skip_steps + leading}" if leading == len(steps)
              else "if they were disturbed (a checkpoint, an eviction, a restart), drop them from the log")
    shown = ", ".join(f"{step} ({1 + d:.2f}x)" for step, d in zip(steps[:10], worst[far][:10], strict=False))
    return [f"{run.label}: step(s) {shown}{' and more' if len(steps) > 10 else ''} lie more than {OUTLIER_MADS:g} "
            f"robust sigmas from their phase's median step: they are fitted as any other step and move the "
            f"fitted values; {advice}"]


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(r)))) if len(r) else 0.0


def predict(scenario: Any, overrides: Sequence[str], fit: LogFit) -> dict[str, dict[str, float]]:
    """The scenario's phases with its defaults and with the fitted values ({'default': ..., 'fitted': ...})."""
    from ..scenario import load_scenario
    sc = load_scenario(scenario, overrides=list(overrides))
    default = simulate_timings(scenario, overrides)   # first: its errors name a --predict item over the file
    if fit.devices:
        kinds = _fitted_devices(sc, fit.keys)
        if kinds != fit.devices:
            raise RlsimError(f"the prediction runs on {', '.join(kinds)}, and the fitted topology.device.* values "
                             f"are the {', '.join(fit.devices)}'s", field="--predict-scenario",
                             fix="predict a scenario on the fitted device, or fit only workload.* / schedule.* "
                                 "keys to carry them to another device")
    return {"default": default,
            "fitted": simulate_timings(scenario, [*overrides, *overlay_items(sc, fit.values)])}


def overlay_yaml(fit: LogFit, header: Sequence[str] = ()) -> str:
    """The fitted values as a YAML overlay: `set:` (the --set items, for `rlsim run S --set ...`), the
    same values as a nested scenario fragment (`overlay:`), and the fit's figures (`fit:`)."""
    import yaml

    from ..overrides import parse_assignment, set_dotted
    nested: dict[str, Any] = {}
    for item in fit.items:
        set_dotted(nested, *parse_assignment(item))
    body = yaml.safe_dump({"set": list(fit.items), "overlay": nested, "fit": fit.to_json()}, sort_keys=False)
    comments = "".join(f"# {line}\n" for line in header)
    return comments + body


def write_overlay(fit: LogFit, path: str | Path, header: Sequence[str] = ()) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)   # as save_profile: --out was checked creatable up front
    return write_text_atomic(path, overlay_yaml(fit, header))
