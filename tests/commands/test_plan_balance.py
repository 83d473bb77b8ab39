"""`rlsim plan --balance`: the speed-proportional split of a topology of several device kinds
(planner/hetero.py plan_hetero) from the command line, beside the even-split candidates."""
import json

import pytest

from simulator.cli import main

HETERO = ["plan", "--topology", "hetero-a100-h100", "--model", "llama3.1-8b", "--global-batch", "256",
          "--seq-len", "4096"]


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_balance_splits_work_by_device_speed_beside_the_even_candidates(capsys):
    plain = _json(capsys, *HETERO)
    doc = _json(capsys, *HETERO, "--balance")
    assert doc["candidates"] == plain   # the even-split rows are unchanged
    bal, best = doc["balance"], plain[0]["layout"]
    assert doc["balance"]["devices"] == {"a100-80gb": 8, "h100": 8}
    assert bal["taken_from_best_row"] == {"recompute": best["recompute"], "micro_batch": best["micro_batch"],
                                          "zero": min(best["zero"], 2)}
    balanced, uniform = bal["balanced"], bal["uniform"]
    assert balanced["step_time_s"] < uniform["step_time_s"]
    assert bal["speedup"] == pytest.approx(uniform["step_time_s"] / balanced["step_time_s"])
    split = balanced["microbatches_per_replica"]
    assert sum(split) == 256 // best["micro_batch"] and len(set(split)) > 1   # the faster replicas take more


def test_the_hetero_step_models_keys_are_read_with_balance(capsys):
    base = _json(capsys, *HETERO, "--balance")["balance"]["balanced"]["step_time_s"]
    hidden = _json(capsys, *HETERO, "--balance", "--set", "planner.hetero.dp_overlap_fraction=1")
    assert hidden["balance"]["balanced"]["step_time_s"] < base


@pytest.mark.parametrize("argv, field", [
    (HETERO + ["--set", "planner.hetero.dp_overlap_fraction=1"], "planner.hetero.dp_overlap_fraction"),  # read past
    (HETERO + ["--balance", "--stage", "rollout"], "--balance"),
    (HETERO + ["--balance", "--seeds", "2"], "--balance"),
    (["plan", "--topology", "dgx-h100", "--model", "llama3.1-8b", "--global-batch", "64", "--seq-len", "512",
      "--balance"], "--balance"),                                                                # one device kind
    (["plan", "--topology", "hetero-a100-h100", "--model", "qwen3-30b-a3b", "--global-batch", "64", "--seq-len",
      "512", "--balance"], "--balance"),                                                         # experts
])
def test_balance_where_it_does_not_apply_is_an_error(capsys, argv, field):
    assert main(argv) == 2
    assert f"field '{field}'" in capsys.readouterr().err
