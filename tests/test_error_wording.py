"""The words of a refused input (a new-user audit, 2026-12-07): a bound or an unknown key says the
rule and the fix in the project's words, not pydantic's generic "Input should be greater than 0" /
"Extra inputs are not permitted" with "see docs/..."; a validator's own fix is not followed by the
generic one; the field named is the one written (`workload.preset`, `--model`); the plan's interval
of two replicas does not repeat the count."""
from __future__ import annotations

import pytest

from simulator import cli

SMALL = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100"]


def _error(capsys, *argv: str) -> str:
    """The one error line `rlsim ARGV` prints, checked to exit 2."""
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlsim: error: "), err
    return err[0]


@pytest.mark.parametrize("item, field, rule", [
    ("workload.prompts_per_step=-4", "workload.prompts_per_step", "greater than 0"),
    ("workload.samples_per_prompt=0", "workload.samples_per_prompt", "greater than 0"),
    ("limits.max_devices=-1", "limits.max_devices", "greater than or equal to 1"),
])
def test_a_value_past_its_bound_says_the_bound_and_what_to_set(capsys, item, field, rule):
    text = _error(capsys, "run", *SMALL, "--set", item)
    got = item.split("=")[1]
    assert f"field '{field}': must be {rule} (got {got}) (fix: set {field} to a value {rule})" in text
    assert "Input should be" not in text and "docs/scenario-reference.md" not in text


def test_iterations_zero_says_the_bound(capsys):
    text = _error(capsys, "run", *SMALL, "--iterations", "0")
    assert "field 'iterations': must be greater than or equal to 1 (got 0)" in text
    assert "(fix: set iterations to a value greater than or equal to 1)" in text


@pytest.mark.parametrize("item, keys", [
    ("output.foo=1", "keep_sample_rows, timers"),
    ("limits.foo=1", "max_devices, max_global_batch, max_iterations, max_runs, max_segments_per_sample, max_work"),
    # the planner's sections and its flattened params: every key `planner.KEY` takes
    ("planner.foo=1", "dominance_prune, eval_cost_s, fixed_cost_s, hetero, recompute_step_share_max, recovery, "
                     "refine_top, refused_cost_fraction, rollout, space"),
])
def test_an_unknown_key_lists_the_keys_its_section_takes(capsys, item, keys):
    text = _error(capsys, "run", *SMALL, "--set", item)
    field = item.split("=")[0]
    assert f"field '{field}': unknown field 'foo' (got 1) (fix: use one of: {keys})" in text
    assert "Extra inputs" not in text


@pytest.mark.parametrize("item, meant", [("output.timerz=x", "timers"), ("limits.max_devicez=3", "max_devices"),
                                         ("schedule.switch.overhead=1", "overhead_s")])
def test_an_unknown_key_one_typo_from_a_field_names_it(capsys, item, meant):
    text = _error(capsys, "run", *SMALL, "--schedule", "colocated", "--set", item)
    assert f"; did you mean '{meant}'?" in text and "(fix: use one of: " in text


def test_an_unknown_schedule_key_lists_the_keys_of_its_kind():
    """The kind's keys (its `accepts()`), not every kind's: staleness is stalesync's, not colocated's."""
    import re
    listed = {}
    for kind in ("colocated", "stalesync"):
        out = _cli_error(kind)
        listed[kind] = set(re.search(r"use one of: ([^)]*)\)", out).group(1).split(", "))
    assert "staleness" in listed["stalesync"] and "staleness" not in listed["colocated"]
    assert "switch" in listed["colocated"] and "rollout_devices" not in listed["colocated"]


def _cli_error(kind: str) -> str:
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["run", *SMALL, "--schedule", kind, "--set", "schedule.foo=1"]) == 2
    return err.getvalue()


def test_a_knob_of_another_kind_gives_its_own_fix_once(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("topology: {preset: dgx-h100, nodes: 1}\nworkload: grpo-qwen2.5-7b\n"
                    "schedule: {kind: colocated, staleness: 3}\n")
    text = _error(capsys, "run", str(path))
    assert text.count("(fix:") == 1 and "(got 3)" not in text and "docs/" not in text
    assert text.endswith("(fix: remove schedule.staleness or change schedule.kind (a kind named alone, --schedule "
                         "colocated, keeps only the knobs it takes))")


def test_an_unknown_workload_preset_under_a_mapping_names_the_preset_key(tmp_path, capsys):
    """(A topology's stays `topology`: the scenario holds `topology: NAME` and `--topology NAME` as
    `{preset: NAME}` too, where the field written is the section or the flag.)"""
    path = tmp_path / "s.yaml"
    path.write_text("workload: {preset: nonsense}\ntopology: dgx-h100\n")
    text = _error(capsys, "run", str(path))
    assert "field 'workload.preset': unknown workload preset 'nonsense'" in text
    path.write_text("workload: nonsense\ntopology: dgx-h100\n")
    assert "field 'workload': unknown workload preset 'nonsense'" in _error(capsys, "run", str(path))


def test_plans_empty_model_names_the_flag(capsys):
    text = _error(capsys, "plan", "--model", " ", "--topology", "dgx-h100")
    assert "field '--model': empty model name" in text


def test_a_device_without_the_workloads_weight_dtype_says_which_gave_what(capsys):
    """The default scenario's workload (a preset) rolls out int8 weights; `--set topology.device=cpu`
    gave the device: the error names that item and says what to set on the workload."""
    text = _error(capsys, "run", "--set", "topology.device=cpu")
    assert text.startswith("rlsim: error: --set topology.device=cpu (over <default scenario>): "
                           "field 'workload.rollout_layout.weight_dtype': the workload's "
                           "workload.rollout_layout.weight_dtype: int8 needs an int8 peak")
    assert "--set workload.rollout_layout.weight_dtype=bf16" in text


@pytest.mark.parametrize("n, words", [(2, "50% interval over 2 replicas: the [min, max]"),
                                      (3, "75% interval over 3 replicas: the [min, max]"),
                                      (6, "95% interval over 6 replicas")])
def test_an_interval_names_its_coverage_and_count_once(n, words):
    from simulator.uncertainty.intervals import interval_over
    assert interval_over(n, "replicas") == words


def test_plan_with_two_seeds_says_the_count_once(capsys):
    assert cli.main(["plan", "--seeds", "2", "--model", "qwen2.5-7b", "--topology", "dgx-h100", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "(50% interval over 2 replicas: the [min, max])" in out and "of 2)" not in out


def test_a_model_one_typo_from_a_preset_names_it(capsys, tmp_path):
    """An audit (2026-12-07): `workload.model=qwen3-32bb` and a verl config's `Qwen/Qwen3-32BB` listed
    every preset without the one meant."""
    text = _error(capsys, "run", *SMALL, "--set", "workload.model=qwen3-32bb")
    assert "unknown model 'qwen3-32bb'; did you mean 'qwen3-32b'?" in text
    config = tmp_path / "verl.yaml"
    config.write_text("actor_rollout_ref:\n  model: {path: Qwen/Qwen3-32BB}\n")
    text = _error(capsys, "run", "--from-verl", str(config), "--print-scenario")
    assert "field 'actor_rollout_ref.model.path': model 'Qwen/Qwen3-32BB' matches no model preset" in text
    assert "; did you mean the preset 'qwen3-32b'?" in text


@pytest.mark.parametrize("dependent", ["engine_sleep_level=2", "sleep_wake_s=3", "kv_realloc_s=2"])
def test_a_bad_engine_sleep_is_the_one_error_not_its_dependents_too(capsys, dependent):
    """An audit (2026-12-07): `engine_sleep=maybe` beside `engine_sleep_level=2` also said the level
    "applies only with engine_sleep: true", a second error caused by the first; the root cause alone."""
    text = _error(capsys, "run", *SMALL, "--schedule", "colocated", "--set", "schedule.switch.engine_sleep=maybe",
                  "--set", f"schedule.switch.{dependent}")
    assert "field 'schedule.switch.engine_sleep': " in text and "errors:" not in text
    assert "applies only with" not in text


def test_an_unclosed_list_says_so_not_to_drop_quotes(capsys):
    """An audit (2026-12-07): `--set workload.prompts_per_step=[1` said "write the number without quotes"."""
    text = _error(capsys, "run", *SMALL, "--set", "workload.prompts_per_step=[1")
    assert text == ("rlsim: error: --set workload.prompts_per_step=[1: field 'workload.prompts_per_step': the list "
                    "opened with '[' is not closed (no ']' ends it) (fix: close it: --set 'workload.prompts_per_step=[1]')")


@pytest.mark.parametrize("rollout, tp, words, fix", [
    (7, 2, "leaves 1 of the 8 devices to train on, and a training replica needs 2 devices (tp 2 x cp 1 x pp 1 = 2)",
     "give at most 6 (the rest train)"),
    (40, 1, "leaves 0 of the 8 devices to train on, and a training replica needs 1 device (tp 1 x cp 1 x pp 1 = 1)",
     "give at most 7 (the rest train)"),
    (8, 8, "leaves 0 of the 8 devices to train on, and a training replica needs 8 devices (tp 8 x cp 1 x pp 1 = 8)",
     "no rollout pool fits beside a training replica of 8 devices on 8 devices"),
])
def test_rollout_devices_leaving_no_replica_says_how_many_one_needs(capsys, rollout, tp, words, fix):
    """An audit (2026-12-07): "rollout_devices=40 leaves no training replica (1 devices)" said neither
    how many devices were left nor, in the singular, how many a replica needs."""
    text = _error(capsys, "run", *SMALL, "--schedule", "disaggregated", "--set", "topology.nodes=1",
                  "--set", f"workload.train_layout.tp={tp}", "--set", f"schedule.rollout_devices={rollout}")
    assert f"field 'schedule.rollout_devices': rollout_devices={rollout} {words} (fix: {fix}" in text


def test_a_validator_that_states_its_fix_is_not_followed_by_the_generic_one(capsys):
    """An audit (2026-12-07): a validator's message stated its fix, and the CLI added "(fix: see
    docs/scenario-reference.md ...)" after it; the fix is the validator's own."""
    text = _error(capsys, "run", *SMALL, "--set", "workload.mini_batch_prompts=7")
    assert text.endswith("field 'workload.mini_batch_prompts': mini_batch_prompts=7 must divide prompts_per_step=512 "
                         "(an optimizer step takes that many prompts of the step's) (fix: give a divisor of 512, e.g. "
                         "16, 8, 4, or leave it unset (one optimizer step a step))")
    text = _error(capsys, "run", *SMALL, "--schedule", "colocated", "--set", "schedule.switch.sleep_wake_s=3")
    assert text.endswith("field 'schedule.switch.sleep_wake_s': applies only with schedule.switch.engine_sleep: true "
                         "(kv_realloc_s without sleep mode; sleep_wake_s and engine_sleep_level with it) (fix: remove "
                         "it or set engine_sleep: true)")


def test_each_error_of_several_keeps_its_own_fix(capsys):
    text = _error(capsys, "run", *SMALL, "--set", "workload.mini_batch_prompts=7", "--set", "workload.samples_per_prompt=0")
    assert "field 'workload.mini_batch_prompts': mini_batch_prompts=7 must divide prompts_per_step=512 (an optimizer " \
           "step takes that many prompts of the step's) (fix: give a divisor of 512" in text
    assert "field 'workload.samples_per_prompt': must be greater than 0 (got 0) (fix: set " \
           "workload.samples_per_prompt to a value greater than 0)" in text


@pytest.mark.parametrize("item, words, fix", [
    ("workload.train_software=foo", "unknown training software 'foo'", "use one of: megatron-core, "),
    ("workload.inference.num_speculative_tokens=2", "drafted tokens need a drafter",
     "set speculative_method (draft_model, eagle, eagle3 or mtp), or remove num_speculative_tokens"),
    ("schedule.recovery.checkpoint_every_steps=3", "applies only with recovery.lose_to: checkpoint",
     "remove schedule.recovery.checkpoint_every_steps, or set schedule.recovery.lose_to: checkpoint"),
    ("workload.train_params.memory.zero3_reshard_after_forward=maybe",
     "'maybe' is neither true, false nor 'unless_pipelined'", "give true, false or 'unless_pipelined'"),
])
def test_a_validators_refusal_ends_with_its_own_fix(capsys, item, words, fix):
    text = _error(capsys, "run", *SMALL, "--set", item)
    assert f": {words}" in text and f"(fix: {fix}" in text and "docs/scenario-reference.md" not in text


@pytest.mark.parametrize("items, words, fix", [
    (["planner.space.etp=[1]", "planner.space.expert_tp_folding=false"],
     "qualifies etp: null (the sizes searched by default), and planner.space.etp is given", "remove expert_tp_folding, or etp"),
    (["planner.space.recompute_method=[block]"], "must hold uniform", "give [uniform] or [uniform, block]"),
])
def test_a_planner_space_refusal_ends_with_its_own_fix(capsys, items, words, fix):
    text = _error(capsys, "plan", "--topology", "dgx-h100", "--model", "qwen2.5-7b",
                  *[arg for item in items for arg in ("--set", item)])
    assert f": {words}" in text and text.endswith(f"(fix: {fix})")


def test_the_input_models_validators_state_their_fix_as_a_fix():
    """A validator of the scenario, params, planner space or microbench models refuses with an RlsimError or a CrossFieldError
    given its fix (the CLI's "(fix: ...)"), not a ValueError whose fix, inside its text, is followed by
    the generic "(fix: see docs/scenario-reference.md ...)"."""
    import ast
    from pathlib import Path

    import simulator

    root = Path(simulator.__file__).parent
    for name in ("scenario.py", "params.py", "planner/search.py", "calibration/microbench.py"):
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        raised = [node for node in ast.walk(tree) if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)]
        assert raised
        plain = [node.lineno for node in raised if getattr(node.exc.func, "id", "") == "ValueError"]
        assert not plain, f"simulator/{name} raises a ValueError at lines {plain}"
        crossed = [node.lineno for node in raised if getattr(node.exc.func, "id", "") == "CrossFieldError"
                   and not any(keyword.arg == "fix" for keyword in node.exc.keywords)]
        assert not crossed, f"simulator/{name} raises a CrossFieldError without its fix at lines {crossed}"


def test_a_word_without_an_option_name_gets_no_hint(capsys):
    """`--=3` (a flag's name left out) hinted 'did you mean: -- -> --help?': every option starts with
    '--', so the first one was taken as its completion (a review, 2026-12-08)."""
    assert cli.main(["run", *SMALL, "--=3"]) == 2
    text = capsys.readouterr().err
    assert "rlsim: error: unrecognized arguments: --=3\n" in text and "did you mean" not in text
    assert cli.main(["run", *SMALL, "--itrations=3"]) == 2   # a name given is still hinted
    assert "(did you mean: --itrations -> --iterations?)" in capsys.readouterr().err
