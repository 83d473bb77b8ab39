"""Fuzz every `rlsim` command (issue 14): random `--set` keys and values drawn from the real key space
plus junk, random YAML trees as scenario / workload / topology files, random bytes as every kind of
input file, and random flags of every command. The property: no Python exception, no traceback, exit
0 or 2, no run past its bound (harness.py). Scale with RLSIM_FUZZ_EXAMPLES=N."""
from __future__ import annotations

import copy
import itertools

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from simulator.scenario import SCHEDULE_KINDS, deep_merge

from .harness import (
    SPECIAL_TEXT,
    TINY_SCENARIO,
    check,
    fuzz_settings,
    keys_strategy,
    scalars,
    write,
    yaml_text,
    yaml_trees,
)

_counter = itertools.count()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    write(root / "tiny.yaml", yaml.safe_dump(TINY_SCENARIO))
    return root


def _fresh(workdir, suffix: str):
    return workdir / f"f{next(_counter)}{suffix}"


set_pairs = st.lists(st.tuples(keys_strategy(), scalars), min_size=1, max_size=3)


@fuzz_settings(30)
@given(pairs=set_pairs, kind=st.sampled_from(SCHEDULE_KINDS))
def test_random_set_overrides_on_run(workdir, pairs, kind):
    argv = ["run", str(workdir / "tiny.yaml"), "--schedule", kind, "--json"]
    for key, value in pairs:
        argv += ["--set", f"{key}={yaml_text(value)}"]
    check(argv)


# Valid settings that act on the schedules' deeper paths (dynamic sampling, partial rollouts, stream
# thresholds, over-provisioning, failures, split pools, token budgets, engines): random junk rarely
# passes validation far enough to reach them, and combinations of them raised AssertionErrors before
# (colocated StaleSync at stream_threshold 1 with a partial rollout and dynamic sampling; over-
# provisioning with dynamic sampling). A combination runs or is refused (exit 0 or 2), never a traceback.
KNOB_SETTINGS = [
    ["schedule.partial_rollout=true", "schedule.length_budget=48"],
    ["workload.algorithm=dapo", "workload.dynamic_sampling.gen_prompts=2", "workload.dynamic_sampling.keep_fraction=0.5"],
    ["schedule.stream_threshold=1"], ["schedule.stream_threshold=0.25"], ["schedule.staleness=2"],
    ["schedule.between_gen_batches=sleep"], ["schedule.reward_during_forwards=true"], ["schedule.overprovision=0.5"],
    ["workload.reference=false"], ["workload.ppo_epochs=2"], ["workload.mini_batch_prompts=2"],
    ["schedule.failures=[{at_s: 5, fail: 'device:3'}]"], ["schedule.rollout_fraction=0.25"],
    ["workload.train_layout.max_tokens_per_micro_batch=512"], ["schedule.micro_batching=sequence"],
    ["schedule.refit=reshard"], ["workload.reward.kind=model"], ["workload.reward.workers=1"],
    ["workload.inference.enforce_eager=true"], ["workload.rollout_layout.max_num_seqs=1"],
    ["workload.engine=sglang"], ["workload.train_software=megatron-2022"], ["workload.train_layout.zero=3"],
    ["workload.train_layout.pp=2"], ["workload.train_layout.cp=2"], ["schedule.fuse=actor"],
    ["schedule.placement=colocated"], ["schedule.interruptible=true"], ["workload.train_layout=auto"],
    ["workload.response_length.sigma=1.5"], ["schedule.distqueue.packed=false"], ["topology.nodes=2"],
]


@fuzz_settings(30)
@given(chosen=st.lists(st.sampled_from(range(len(KNOB_SETTINGS))), min_size=1, max_size=5, unique=True),
       kind=st.sampled_from(SCHEDULE_KINDS))
def test_valid_knob_combinations_run_or_are_refused(workdir, chosen, kind):
    from simulator.scenario import SCHEDULE_CLASSES

    takes = SCHEDULE_CLASSES[kind].accepts(None)   # a knob the kind refuses would stop most runs at the door
    argv = ["run", str(workdir / "tiny.yaml"), "--schedule", kind, "--iterations", "3", "--json"]
    for index in chosen:
        for item in KNOB_SETTINGS[index]:
            key = item.split("=", 1)[0]
            if not key.startswith("schedule.") or key.split(".")[1] in takes:
                argv += ["--set", item]
    check(argv)


@fuzz_settings(10)
@given(limit=st.sampled_from(["max_iterations", "max_devices", "max_work", "max_segments_per_sample"]),
       value=scalars)
def test_random_limits_are_validated(workdir, limit, value):
    """A limit takes a whole number >= 1 (a junk one is refused; one that does not lower the bound
    still runs the tiny scenario within the fuzz bound)."""
    check(["run", str(workdir / "tiny.yaml"), "--json", "--set", f"limits.{limit}={yaml_text(value)}"])


@fuzz_settings(25)
@given(tree=yaml_trees, role=st.sampled_from(["scenario", "merged", "workload", "topology"]))
def test_random_yaml_trees_as_files(workdir, tree, role):
    path = _fresh(workdir, ".yaml")
    if role == "merged" and isinstance(tree, dict):
        tree = deep_merge(copy.deepcopy(TINY_SCENARIO), tree)
    write(path, yaml.safe_dump(tree, allow_unicode=True))
    if role in ("scenario", "merged"):
        argv = ["run", str(path), "--json"]
    else:
        argv = ["run", str(workdir / "tiny.yaml"), f"--{role}", str(path), "--json"]
    check(argv)


@fuzz_settings(20)
@given(data=st.one_of(st.binary(max_size=200), st.sampled_from([b"\xff\xfe", b"a: &a [*a]\n", b"\x00",
                                                                 b"[" * 2000, b"- 1\n- NaN\n", b"{\"x\": 1e999}",
                                                                 b"length\n1\n\n-3\n", b"1,2\n3\n"])),
       use=st.sampled_from(["scenario", "workload", "topology", "comm-topology", "model", "lengths-csv",
                            "lengths-json", "profile", "sweep-results", "framework"]))
def test_random_bytes_as_every_input_file(workdir, data, use):
    tiny = str(workdir / "tiny.yaml")
    suffix = {"model": ".json", "lengths-json": ".json", "lengths-csv": ".csv"}.get(use, ".yaml")
    path = write(_fresh(workdir, suffix), data)
    argv = {
        "scenario": ["run", str(path)],
        "workload": ["run", tiny, "--workload", str(path)],
        "topology": ["run", tiny, "--topology", str(path)],
        "comm-topology": ["comm", "--topology", str(path), "--op", "all_reduce", "--bytes", "1MiB", "--group", "node:0"],
        "model": ["run", tiny, "--set", f"workload.model={path}"],
        "lengths-csv": ["run", tiny, "--set", "workload.response_length.dist=empirical",
                        "--set", f"workload.response_length.file={path}"],
        "lengths-json": ["run", tiny, "--set", "workload.response_length.dist=empirical",
                         "--set", f"workload.response_length.file={path}"],
        "profile": ["run", tiny, "--set", f"topology.device_profile={path}"],
        "sweep-results": None,
        "framework": ["run", "--from-verl", str(path), "--iterations", "1"],
    }[use]
    if argv is None:   # a results file in the sweep's --out folder, then the sweep resumes from it
        out = _fresh(workdir, "")
        out.mkdir()
        write(out / "results.csv", data)
        argv = ["sweep", tiny, "--grid", "seed=0,1", "--jobs", "1", "--out", str(out), "--json"]
    check(argv + ["--json"] if "--json" not in argv else argv)


@fuzz_settings(8)
@given(key=keys_strategy(), values=st.lists(scalars, min_size=1, max_size=3),
       extra=st.sampled_from([[], ["--price", "nan"], ["--price", "2.5"], ["--target-tokens-per-s", "1e9"],
                              ["--target-step-time-s", "inf"], ["--max-points", "1"], ["--format", "parquet"]]))
def test_random_sweeps(workdir, key, values, extra):
    grid = ",".join(yaml_text(v).replace(",", " ") for v in values)
    out = _fresh(workdir, "")
    check(["sweep", str(workdir / "tiny.yaml"), "--grid", f"{key}={grid}", "--jobs", "1", "--out", str(out),
           "--json", *extra])


# Flags of each command and values to give them (junk included); calibrate measures the machine, so it
# is fuzzed at --help level and with bad flags only; validate with --case names that match nothing
# or the cheapest case.
TEXT = st.one_of(st.sampled_from(SPECIAL_TEXT), st.text(max_size=8), scalars.map(yaml_text))
COMMAND_FLAGS = {
    "plan": {"--topology": st.sampled_from(["dgx-h100", "hgx-h20", "nope"]),
             "--model": st.sampled_from(["llama3.1-8b", "qwen2.5-7b", "qwen3-30b-a3b", "x"]),
             "--global-batch": TEXT, "--seq-len": TEXT, "--stage": st.sampled_from(["train", "rollout", "x"]),
             "--target-tokens-per-s": TEXT, "--top": TEXT},
    "comm": {"--topology": st.sampled_from(["dgx-h100", "cloudmatrix384", "nope"]),
             "--op": st.sampled_from(["all_reduce", "all_gather", "all_to_all", "p2p", "x"]),
             "--bytes": TEXT, "--group": st.one_of(st.sampled_from(["node:0", "nodes:0-1", "domain:0", "0,1",
                                                                    "devices:0-3", "node:99"]), TEXT),
             "--algorithm": st.sampled_from(["ring", "tree", "hierarchical", "direct", "x"])},
    "compare": {"--schedules": st.one_of(st.sampled_from(["colocated,async", "colocated", "", ",", "x"]), TEXT),
                "--iterations": TEXT, "--seed": TEXT},
    "sensitivity": {"--vary": st.one_of(st.sampled_from(["workload.response_length.median=32..128",
                                                         "schedule.staleness=1..2", "x=1..2", "seed=2..1"]), TEXT),
                    "--metric": st.sampled_from(["steady_step_time_s", "tokens_per_s", "x", ""]),
                    "--samples": st.sampled_from(["0", "-1", "x", "1"]), "--seeds": st.sampled_from(["1", "0", "x"])},
    "presets": {"--json": st.just(None)},
    "validate": {"--case": st.one_of(st.just("zz-no-such-case"), st.text(min_size=12, max_size=14).map(lambda t: "zz" + t)),
                 "--strict": st.just(None), "--json": st.just(None)},
    "calibrate": {"--help": st.just(None), "--device": st.sampled_from(["x", "npu"]),
                  "--threads": st.sampled_from(["0", "-1", "x"]), "--backend": st.just("nope")},
    "run": {"--iterations": TEXT, "--seed": TEXT, "--seeds": st.sampled_from(["1", "2", "0", "x"]),
            "--schedule": st.one_of(st.sampled_from(SCHEDULE_KINDS), TEXT), "--out": st.sampled_from(["/dev/null/x", "/proc/x"]),
            "--print-scenario": st.just(None), "--framework-schedule": st.just("colocated")},
}
SCENARIO_COMMANDS = {"run", "compare", "sensitivity", "plan"}


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(COMMAND_FLAGS)))
    flags = COMMAND_FLAGS[command]
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), unique=True, max_size=3))
    if command == "validate" and "--case" not in chosen:
        chosen.append("--case")   # every case is a minute of work: the cheap path is the one fuzzed
    if command == "sensitivity" and "--samples" not in chosen:
        chosen.append("--samples")   # the Sobol design is samples x (keys + 2) runs
    argv = [command]
    for flag in chosen:
        value = draw(flags[flag])
        argv += [flag] if value is None else [flag, str(value)]
    if command == "calibrate" and "--help" not in argv and not chosen:
        argv.append("--help")
    return argv


@fuzz_settings(30)
@given(argv=command_lines())
def test_every_command_with_random_flags(workdir, argv):
    if argv[0] in SCENARIO_COMMANDS:
        argv = [argv[0], str(workdir / "tiny.yaml"), *argv[1:]]
    if argv[0] == "calibrate" and "--help" not in argv:
        argv.append("--json")   # bad flags only: a good set would measure for real (refused before here)
    check(argv, bound_s=60)


def _framework_keys() -> dict[str, list[str]]:
    """Each importer's own keys (its table's entries and the defaults it reads), wildcards dropped."""
    from simulator.frameworks import areal, nemo_rl, openrlhf, verl
    return {name: sorted({key for key in (*module.RULES, *module.DEFAULTS) if not key.endswith("*")})
            for name, module in (("verl", verl), ("nemo-rl", nemo_rl), ("areal", areal), ("openrlhf", openrlhf))}


FRAMEWORK_EXAMPLES = {"verl": "verl-grpo-qwen2.5-7b.yaml", "nemo-rl": "nemo-rl-grpo-llama3.1-8b.yaml",
                      "areal": "areal-grpo-qwen2.5-1.5b.yaml", "openrlhf": "openrlhf-reinforce-qwen2.5-7b-hybrid.sh"}


@fuzz_settings(30)
@given(data=st.data(), framework=st.sampled_from(sorted(FRAMEWORK_EXAMPLES)))
def test_random_framework_overrides_import_or_are_refused(data, framework):
    """A framework key given any value (its importer's own keys: `++key=value` adds one the example
    lacks) imports and runs, or is refused naming it: never a traceback (the importers read each
    value with its type check)."""
    from pathlib import Path
    keys = _framework_keys()[framework]
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(keys), scalars), min_size=1, max_size=3))
    example = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / FRAMEWORK_EXAMPLES[framework]
    argv = ["run", f"--from-{framework}", str(example), *[f"++{key}={yaml_text(value)}" for key, value in pairs],
            "--iterations", "1", "--set", "limits.max_work=20000", "--json"]
    check(argv)
