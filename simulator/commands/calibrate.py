"""`rlsim calibrate`: micro-benchmark a real device through torch, fit a device profile, and
optionally replay a mini RL step of a tiny GPT against the simulator's prediction."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import RlsimError

HELP = ("measure a device with torch and write a device profile YAML (optionally validated by replay); or fit "
        "the simulator's mechanism parameters to logged runs (--from-log) and predict another setup")
EXAMPLES = """examples:
  rlsim calibrate --backend torch --device cpu --out cpu-profile.yaml
  rlsim calibrate --backend torch --device cpu --replay --json
  rlsim calibrate --backend torch --device cuda --out h100-profile.yaml
  rlsim calibrate --device cpu --set microbench.collectives=false --set replay.num_prompts=8 --replay

  rlsim calibrate --from-log verl-run.jsonl --scenario my-run.yaml --out fitted.yaml
  rlsim calibrate --from-log a.jsonl --scenario a.yaml --from-log b.csv --scenario b.yaml \\
      --fit workload.inference.step_overhead_s,topology.device.gemm_efficiency --predict topology.nodes=4

--from-log reads verl (timing_s/gen, timing_s/update_actor, ..., timing_s/step), NeMo RL
(timing/train/generation, policy_training, ..., total_step_time), OpenRLHF, SkyRL, TRL and AReaL
per-step logs (docs/calibration.md names their timers): JSONL, JSON, CSV, a wandb CSV export or
TensorBoard scalars as a step,tag,value CSV. It fits --fit (named mechanism parameters, bounded least squares over the
simulator), prints each with its 1-sigma uncertainty, writes them to --out (a YAML whose `set:`
list is the `rlsim run S --set ...` overlay), and predicts --predict-scenario / --predict setups.

Use the profile in a topology (`device_profile: cpu-profile.yaml`, or a device entry
`device: {name: cpu, profile: cpu-profile.yaml}`) or a scenario (--set topology.device_profile=PATH).
--set microbench.KEY=VALUE changes the micro-benchmark grid, --set replay.KEY=VALUE the mini RL step
(keys in docs/calibration.md). torch is an optional extra: pip install 'rlsim[torch]'.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..calibration.backend import BACKENDS, DEFAULT_THREADS, DEVICES
    from .common import add_common

    parser.add_argument("--backend", default="torch", choices=BACKENDS, help="framework (default: torch)")
    parser.add_argument("--device", choices=DEVICES, help="device to measure (not with --from-log)")
    parser.add_argument("--out", metavar="PROFILE.yaml", default=None, type=cli_out_file,
                        help="where to write the profile (default: rlsim-profile-DEVICE.yaml) or, with "
                             "--from-log, the fitted overlay (default: rlsim-calibration.yaml)")
    parser.add_argument("--replay", action="store_true",
                        help="run a mini RL step of a tiny GPT and compare it with the simulator (cpu only)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"torch threads (default {DEFAULT_THREADS}: repeatable on a shared machine)")
    add_common(parser, set_help="override a calibration setting (repeatable), e.g. --set microbench.dtypes=[fp32] "
                                "or --set replay.repeats=3 (see docs/calibration.md); with --from-log, a scenario "
                                "key of every logged run's scenario")
    from .calibrate_log import add_log_arguments
    add_log_arguments(parser)
    # No defaults here: run() tells a flag the user gave from one left out (a flag of the other
    # mode is refused, not ignored), then fills in the defaults (_MODE_DEFAULTS).
    parser.set_defaults(**{dest: None for dest in _MODE_DEFAULTS})


def _mode_defaults() -> dict[str, Any]:
    from ..calibration.backend import DEFAULT_THREADS
    from ..calibration.logfit import DEFAULT_FIT_KEYS, MAX_EVALUATIONS, SKIP_STEPS
    return {"backend": "torch", "threads": DEFAULT_THREADS, "fit": [",".join(DEFAULT_FIT_KEYS)],
            "skip_steps": SKIP_STEPS, "max_evaluations": MAX_EVALUATIONS}


# The flags of one mode (dest, flag): refused in the other. --device and --replay are refused with
# --from-log by calibrate_log.run_from_log.
_MODE_DEFAULTS = ("backend", "threads", "fit", "skip_steps", "max_evaluations")
DEVICE_FLAGS = (("backend", "--backend"), ("threads", "--threads"))
LOG_FLAGS = (("scenario", "--scenario"), ("fit", "--fit"), ("skip_steps", "--skip-steps"),
             ("max_evaluations", "--max-evaluations"), ("log_run", "--log-run"), ("predict", "--predict"),
             ("predict_scenario", "--predict-scenario"))


def _refuse_other_mode(args: argparse.Namespace) -> None:
    if args.from_log:
        flags, mode, other = DEVICE_FLAGS, "--device", "--from-log"
        fix = "drop {flag} (it sets up the micro-benchmarks); calibrate a device in a separate run: " \
              "rlsim calibrate --device cpu {flag} ..."
    else:
        flags, mode, other = LOG_FLAGS, "--from-log", "--device"
        fix = "drop {flag}, or give it to a fit of a logged run: rlsim calibrate --from-log LOG --scenario S ..."
    for dest, flag in flags:
        if getattr(args, dest, None) not in (None, []):
            raise RlsimError(f"{flag} applies to {mode}, not {other}", field=flag, fix=fix.format(flag=flag))
    for dest, value in _mode_defaults().items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)


def _check_predict(args: argparse.Namespace) -> None:
    """--predict items and the --predict-scenario read before the fit, so a bad one writes nothing."""
    if not (args.predict or args.predict_scenario):
        return
    from ..scenario import load_scenario

    for item in args.predict:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise RlsimError(f"cannot read --predict {item!r}", field="--predict",
                             fix="write KEY=VALUE, e.g. --predict topology.nodes=4")
    target = args.predict_scenario or (args.scenario[0] if args.scenario else None)
    if target is None:
        return  # run_from_log says that --scenario is missing
    load_scenario(target, overrides=list(args.overrides))  # a bad --predict-scenario / --set: its own error
    try:
        load_scenario(target, overrides=[*args.overrides, *args.predict])
    except RlsimError as exc:
        raise RlsimError(f"--predict: {exc.message}", source=exc.source, field=exc.field or "--predict",
                         fix=exc.fix or "check the --predict KEY=VALUE items") from None


def cli_out_file(text: str) -> str:
    from .calibrate_log import DEFAULT_OVERLAY
    from .common import out_file
    return out_file(text, f"profile.yaml (--device) or {DEFAULT_OVERLAY} (--from-log)")


def _profile_path(args: argparse.Namespace) -> Path:
    """Where the profile goes, checked before the measurement (the default in the working folder too)."""
    import argparse as _argparse

    out = args.out or f"rlsim-profile-{args.device}.yaml"
    try:
        return Path(cli_out_file(out))
    except _argparse.ArgumentTypeError as exc:
        raise RlsimError(str(exc), field="--out", fix="give --out a writable PROFILE.yaml path") from None


def _split_overrides(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    from ..overrides import section

    stray = [s for s in items if not s.partition("=")[0].strip().startswith(("microbench.", "replay."))]
    if stray:
        raise RlsimError(f"calibrate takes microbench.* and replay.* overrides, got {stray[0]!r}", field="--set",
                         fix="e.g. --set microbench.collectives=false or --set replay.num_prompts=8")
    return section(items, "microbench"), section(items, "replay")


def _say(quiet: bool):
    if quiet:
        return None
    return lambda text: print(f"  {text}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.from_log:
        from .calibrate_log import run_from_log
        _refuse_other_mode(args)
        _check_predict(args)
        return run_from_log(args)
    if args.device is None:
        raise RlsimError("nothing to calibrate", field="--device",
                         fix="give --device cpu|cuda|npu (micro-benchmarks) or --from-log LOG --scenario S")
    _refuse_other_mode(args)
    return _run_device(args)


def max_threads() -> int:
    """The most --threads: the CPUs this process may run on (more only oversubscribes them, and a
    huge count crashes torch's thread pool)."""
    import os
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _run_device(args: argparse.Namespace) -> int:
    from ..calibration.backend import get_backend
    from ..calibration.fitting import build_profile
    from ..calibration.microbench import MicrobenchConfig, run_microbench
    from ..calibration.replay import replay_config_from_mapping
    from ..hardware.profiles import save_profile
    from .common import print_json

    limit = max_threads()
    if not 1 <= args.threads <= limit:
        raise RlsimError(f"must be 1..{limit} (the CPUs this process may use), got {args.threads}",
                         field="--threads", fix=f"give --threads between 1 and {limit}")
    bench_map, replay_map = _split_overrides(args.overrides)
    if replay_map and not args.replay:
        key = next(s.partition("=")[0].strip() for s in args.overrides
                   if s.partition("=")[0].strip().startswith("replay."))
        raise RlsimError("replay.* settings apply to --replay", field=key,
                         fix=f"add --replay, or drop --set {key}=...")
    bench = MicrobenchConfig.from_mapping(bench_map, source="--set microbench.*")
    replay_config = replay_config_from_mapping(replay_map, threads=args.threads) if args.replay else None
    if args.replay and args.device != "cpu":
        raise RlsimError("the replay runs the tiny GPT on the CPU only", field="--replay",
                         fix="use --device cpu with --replay")
    out = _profile_path(args)
    backend = get_backend(args.backend, args.device, threads=args.threads)
    progress = _say(args.json)
    if progress:
        progress(f"calibrating {args.device} with {args.backend} ({args.threads} thread(s))")
    if replay_config is None:
        result = run_microbench(backend, bench, progress)
    else:
        from ..calibration.replay import calibrate_with_replay
        result, measured, timeline = calibrate_with_replay(backend, bench, replay_config, progress)
    profile = build_profile(result, args.device)
    save_profile(profile, out)
    document: dict[str, Any] = {"device": profile.device, "profile": str(out), **_fitted(profile)}
    if replay_config is not None:
        from ..calibration.replay import compare
        document["replay"] = compare(profile, replay_config, measured, timeline).to_json()
        drift = _speed_change(backend, result, bench)
        if drift is not None:
            document["replay"]["machine_speed_change"] = drift
    if args.json:
        print_json(document)
        return 0
    _print(document)
    return 0


def _speed_change(backend: Any, result: Any, bench: Any) -> float | None:
    """A diagnostic, not a correction: the rate of the calibration's largest fp32 GEMM re-timed after
    the replay, relative to the calibration (on a shared machine other tenants change the speed)."""
    fp32 = [g for g in result.gemm if g.dtype == "fp32"]
    if not fp32:
        return None
    probe = max(fp32, key=lambda g: g.flops)
    return probe.time_s / backend.time_gemm(probe.m, probe.n, probe.k, "fp32", cold_bytes=bench.gemm_cold_bytes) - 1.0


def _fitted(profile: Any) -> dict[str, Any]:
    data = profile.to_mapping()
    keys = ("peak_source", "peak_flops", "gemm_efficiency", "gemm_ramp_dim", "gemm_ramp_k", "launch_overhead_s", "hbm_bytes",
            "hbm_bw_Bps", "hbm_efficiency", "host_link_bw_Bps", "scaleup_bw_Bps", "decode_step_overhead_s",
            "decode_overhead_per_layer_s", "decode_gemm_efficiency", "decode_hbm_efficiency", "decode_fit_error",
            "collective")
    fitted = {k: data[k] for k in keys if k in data}
    fitted["gemm_fit_error"] = {d: g["max_fit_error"] for d, g in data.get("gemm", {}).items()}
    return fitted


def _print(doc: dict[str, Any]) -> None:
    print(f"device {doc['device']}: profile written to {doc['profile']}")
    for dtype, flops in doc.get("peak_flops", {}).items():
        print(f"  peak {dtype:5s} {flops / 1e9:10.1f} GFLOP/s   ({doc.get('peak_source', '')})")
    for key, scale, unit in (("gemm_efficiency", 1, ""), ("hbm_bw_Bps", 1e-9, " GB/s"),
                             ("host_link_bw_Bps", 1e-9, " GB/s"), ("launch_overhead_s", 1e6, " us"),
                             ("decode_step_overhead_s", 1e6, " us"), ("decode_overhead_per_layer_s", 1e6, " us"),
                             ("decode_gemm_efficiency", 1, ""), ("decode_hbm_efficiency", 1, "")):
        if key in doc:
            print(f"  {key:28s} {doc[key] * scale:10.3f}{unit}")
    coll = doc.get("collective")
    if coll:
        print(f"  {coll['backend']} {coll['op']} x{coll['world_size']}: latency {coll['latency_s'] * 1e6:.1f} us, "
              f"bandwidth {coll['bw_Bps'] / 1e9:.2f} GB/s (fit error {coll['max_fit_error']:.0%})")
    replay = doc.get("replay")
    if replay:
        print("  replay (mini RL step of a tiny GPT):   measured   predicted   error")
        for stage in ("generate", "reference", "train", "total"):
            r = replay[stage]
            print(f"    {stage:34s} {r['measured_s']:8.3f} s {r['predicted_s']:8.3f} s {r['error']:+7.1%}")
        if "machine_speed_change" in replay:
            print(f"  machine speed change since calibration (largest fp32 GEMM): "
                  f"{replay['machine_speed_change']:+.1%}")
