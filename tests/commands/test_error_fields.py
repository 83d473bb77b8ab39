"""Errors reached from `rlsim run --set KEY=VALUE` name the full dotted key the user set (the path
`--set` takes), not the low-level function's bare argument, and exit 2 without a traceback."""
import pytest

from simulator.cli import main

TINY = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1"]


@pytest.mark.parametrize("argv, field", [
    (["--set", "workload.train_params.compute.dtype=fp4"], "workload.train_params.compute.dtype"),
    (["--set", "workload.train_layout={tp: 1, pp: 2, vpp: 2}"], "workload.train_layout.vpp"),
    (["--set", "workload.train_layout.logprob_max_tokens_per_micro_batch=64"],
     "workload.train_layout.logprob_max_tokens_per_micro_batch"),
    (["--schedule", "disaggregated", "--set", "workload.train_params.memory.weight_bytes_per_param=400"],
     "workload.train_layout"),
    (["--set", "schedule.failures=[{at_s: 10, fail: bogus}]"], "schedule.failures.0.fail"),
    (["--set", "schedule.failures=[{at_s: 50, fail: 'node:0'}, {at_s: 10, fail: 'node:99'}]"],
     "schedule.failures.1.fail"),
    (["--set", "schedule.failures=[{at_s: 10, fail: all}]"], "schedule.failures.0.fail"),
    (["--set", "workload.dtype=fp4"], "workload.dtype"),
    (["--set", "workload.model=bogus-model"], "workload.model"),
    (["--set", "workload.rollout_layout.ep=3"], "workload.rollout_layout.ep"),
    (["--set", "workload.train_layout.tp=3"], "workload.train_layout.tp"),
])
def test_run_errors_name_the_key_set(capsys, argv, field):
    code = main(["run", *TINY, *argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"field '{field}'" in err


def test_comm_group_keeps_naming_the_option(capsys):
    code = main(["comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1MiB", "--group", "bogus"])
    err = capsys.readouterr().err
    assert code == 2 and "field '--group'" in err
