"""The fuzz harness (issue 14): run `rlsim` in-process on an argv, within a wall-clock bound, and
judge the outcome by the CLI's contract: no Python exception escapes, no traceback is printed, the
exit code is 0 (done) or 2 (bad input; 3 with `validate --strict`), and no run passes its bound.

The key space the generators draw from is read from the scenario's own models, so a field added
to a model is fuzzed without an edit here. RLSIM_FUZZ_EXAMPLES scales every fuzz test (default: a
small, derandomized run that keeps the suite under a minute; e.g. RLSIM_FUZZ_EXAMPLES=500 for a
long random hunt, which also draws fresh random inputs).
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import time
import traceback
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from simulator.cli import main

# Wall seconds one command may take in the fuzz run (the tiny base scenario runs in ~0.2 s).
BOUND_S = float(os.environ.get("RLSIM_FUZZ_BOUND_S", "30"))
EXTRA = int(os.environ.get("RLSIM_FUZZ_EXAMPLES", "0"))


def fuzz_settings(examples: int) -> settings:
    """`examples` by default (derandomized: the same inputs every run), RLSIM_FUZZ_EXAMPLES when set."""
    return settings(max_examples=EXTRA or examples, deadline=None, derandomize=not EXTRA, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


# The base of every fuzzed run: one DGX-H100 node, a tiny GRPO step, and limits small enough that a
# fuzzed value which multiplies the work is refused (the limits' own keys are fuzzed separately).
TINY_SCENARIO: dict[str, Any] = {
    "topology": {"preset": "dgx-h100", "nodes": 1},
    "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 4, "samples_per_prompt": 2,
                 "mini_batch_prompts": 4,
                 "prompt_length": {"dist": "lognormal", "median": 32, "sigma": 0.5, "max": 128},
                 "response_length": {"dist": "lognormal", "median": 64, "sigma": 0.5, "max": 256}},
    "schedule": {"kind": "colocated"},
    "iterations": 1,
    "limits": {"max_devices": 64, "max_iterations": 8, "max_work": 20_000, "max_segments_per_sample": 16},
}


class BoundExceeded(BaseException):
    """Raised by the alarm inside a command that runs past BOUND_S (not an Exception: nothing catches it)."""


@dataclass
class Outcome:
    argv: list[str]
    code: Any
    stdout: str
    stderr: str
    error: str = ""          # the traceback of an exception that escaped main(), or the bound passed

    def problems(self) -> list[str]:
        allowed = {0, 2, 3} if "--strict" in self.argv else {0, 2}
        out = []
        if self.error:
            out.append(self.error)
        elif self.code not in allowed:
            out.append(f"exit code {self.code!r}")
        if "Traceback (most recent call last)" in self.stderr:
            out.append("a traceback on stderr")
        return out


def _on_alarm(signum: int, frame: Any) -> None:
    raise BoundExceeded


def invoke(argv: list[str], bound_s: float = BOUND_S) -> Outcome:
    """main(argv) with stdout / stderr captured and an alarm at bound_s."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, bound_s)
    code: Any = None
    error = ""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
    except BoundExceeded:
        error = f"ran past its bound of {bound_s:g} s"
    except BaseException:  # noqa: BLE001 - any escape is the finding
        error = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(list(argv), code, out.getvalue(), err.getvalue(), error)


TIMES: list[tuple[float, list[str]]] = []   # (CPU seconds, argv) of every check: tests/fuzz/conftest.py


def check(argv: list[str], bound_s: float = BOUND_S) -> Outcome:
    start = time.process_time()
    outcome = invoke(argv, bound_s)
    TIMES.append((time.process_time() - start, list(argv)))
    problems = outcome.problems()
    assert not problems, (f"rlsim {' '.join(map(repr, argv))}: {'; '.join(problems)}\n"
                          f"stderr: {outcome.stderr[-2000:]}")
    return outcome


# ------------------------------------------------------------------------------ the key space

def _model_keys(model: type[BaseModel], prefix: str) -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        for arg in (info.annotation, *typing.get_args(info.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys.extend(_model_keys(arg, dotted + "."))
    return keys


def scenario_keys() -> list[str]:
    """Every dotted key `--set` may name (models' fields, length laws, layouts, topology counts)."""
    from simulator.scenario import Limits, ScheduleConfig, WorkloadConfig
    keys = ["iterations", "seed", "replicas", "planner", "planner.space", "planner.params.eval_cost_s"]
    keys += _model_keys(WorkloadConfig, "workload.") + _model_keys(ScheduleConfig, "schedule.")
    keys += [f"workload.{law}.{k}" for law in ("prompt_length", "response_length")
             for k in ("dist", "median", "sigma", "max", "min", "group_correlation", "drift_per_step", "file")]
    keys += [f"workload.{lay}.{k}" for lay in ("train_layout", "rollout_layout")
             for k in ("tp", "pp", "dp", "ep", "etp", "cp", "vpp", "zero", "recompute", "micro_batch")]
    keys += [f"topology.{k}" for k in ("nodes", "supernodes", "racks", "devices_per_node", "nodes_per_domain",
                                       "device", "device_profile", "scaleout.nic_bw", "scaleup.bw",
                                       "scaleout.oversubscription", "groups")]
    keys += [f"limits.{k}" for k in Limits.model_fields]
    return sorted(set(keys))


SPECIAL_TEXT = [".inf", "-.inf", ".nan", "~", "null", "true", "no", "[]", "{}", "[1, 2]", "{a: 1}", "1e400",
                "-0", "0x1F", "1_000", "1GiB", "10s", "400Gb/s", "h100", "auto", "colocated", "stalesync",
                "async", "disaggregated", "areal", "lognormal", "empirical", "full", "'quoted'", "&a [*a]",
                "!!python/object/apply:os.system ['true']", "9" * 5000, "[" * 300, "\u00e9\u4e2d", "a,b", "=",
                "{dist: uniform, low: 1, high: 2}"]

scalars = st.one_of(
    st.integers(-3, 40), st.integers(-(10**6), 10**6), st.sampled_from([0, 1, 2, 3, 8, 10**9, 10**30, -1]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=12), st.sampled_from(SPECIAL_TEXT))


def yaml_text(value: Any) -> str:
    """A value as `--set` text: strings as written, the rest as YAML."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def keys_strategy() -> st.SearchStrategy[str]:
    real = [k for k in scenario_keys() if not k.startswith("limits.")]
    return st.one_of(st.sampled_from(real), st.sampled_from(real).map(lambda k: k + ".x"),
                     st.text(min_size=0, max_size=10), st.sampled_from(["a..b", ".", "topology.", "=x", " "]))


yaml_trees = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from([k.split(".")[-1] for k in scenario_keys()]), st.text(max_size=6)),
                    children, max_size=4)), max_leaves=12)


def write(path: Path, content: bytes | str) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path
