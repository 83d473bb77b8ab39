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
    bal = doc["balance"]
    assert doc["balance"]["devices"] == {"a100-80gb": 8, "h100": 8}
    balanced, uniform = bal["balanced"], bal["uniform"]
    assert balanced["step_time_s"] < uniform["step_time_s"]
    assert bal["speedup"] == pytest.approx(uniform["step_time_s"] / balanced["step_time_s"])
    split = balanced["microbatches_per_replica"]
    assert sum(split) == 256 // balanced["layout"]["micro_batch"] and len(set(split)) > 1   # faster replicas: more
    # each kind alone is slower than both together (docs/planner.md): no kind is left idle
    assert balanced["kinds"] == uniform["kinds"] == ["a100-80gb", "h100"]
    assert [part["kinds"] for part in bal["subsets"]] == [["a100-80gb", "h100"], ["a100-80gb"], ["h100"]]
    assert bal["subsets"][0] == {"devices": 16, **balanced} and bal["best"]["kinds"] == balanced["kinds"] and bal["best"]["idle"] == []
    assert all(part["step_time_s"] > balanced["step_time_s"] for part in bal["subsets"][1:])


def test_balance_leaves_a_kind_idle_where_the_step_is_faster_without_it(capsys, tmp_path):
    """An H100 beside one 16 times slower, 8 micro-batches: one micro-batch on the slow device
    outlasts the fast one's whole step (tests/planner/test_kind_subsets.py has the closed form).
    The best plan uses the H100 alone and says so, with the idle device's price."""
    path = tmp_path / "pair.yaml"
    path.write_text("name: pair\ndevices_per_node: 1\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  fast: {device: h100, nodes: 1}\n  slow: {device: {base: h100, name: h100-slow, "
                    "peak_flops: {bf16: 61.8T}, hbm_bw_Bps: 0.21TB/s}, nodes: 1}\n")
    argv = ["plan", "--topology", str(path), "--model", "gpt-1.7b", "--global-batch", "8", "--seq-len", "2048",
            "--balance", "--top", "1", *(f"--set=planner.space.{key}=[{value}]" for key, value in (
                ("tp", 1), ("pp", 1), ("micro_batch", 1), ("recompute", "full"), ("zero", 0)))]
    bal = _json(capsys, *argv)["balance"]
    best, alone = bal["best"], bal["subsets"][1]
    assert alone["kinds"] == best["kinds"] == ["h100"] and best["step_time_s"] == alone["step_time_s"]
    assert best["step_time_s"] < bal["balanced"]["step_time_s"] == best["idle"][0]["step_time_with_it_s"]
    assert best["idle"][0]["idle_device_hours_per_1000_steps"] == pytest.approx(best["step_time_s"] / 3.6)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "best: h100 only (1 device)" in out
    assert f"h100-slow left idle (with it the best split steps in {bal['balanced']['step_time_s']:.3f} s)" in out
    assert f"the price, 1 device idle, {best['idle'][0]['idle_device_hours_per_1000_steps']:.2f} device-hours" in out


def test_balance_searches_the_micro_batch_recompute_and_zero_of_the_space(capsys):
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner import plan_hetero

    bal = _json(capsys, *HETERO, "--balance")["balance"]["balanced"]
    lay = bal["layout"]
    assert lay["recompute"] in ("none", "selective", "full") and lay["micro_batch"] in (1, 2, 4, 8)
    assert lay["zero"] in (0, 1, 2)
    # the search is at least as good as any one setting of the three (here the former rule's: full
    # recompute, micro-batch 1, ZeRO 1), and the JSON reports the setting it took
    model, topology = load_model("llama3.1-8b"), load_topology("hetero-a100-h100")
    one = plan_hetero(model, topology, 256, 4096, tp_values=[1, 2, 4, 8], micro_batch=1, recompute="full",
                      zero_values=(1,)).balanced
    assert bal["step_time_s"] <= one.step_time_s
    narrowed = _json(capsys, *HETERO, "--balance", "--set", "planner.space.recompute=[full]",
                     "--set", "planner.space.micro_batch=[1]", "--set", "planner.space.zero=[1]")["balance"]
    assert narrowed["balanced"]["layout"] | {"tp": 0, "pp": 0, "dp": 0} == {
        "tp": 0, "pp": 0, "dp": 0, "zero": 1, "recompute": "full", "micro_batch": 1}


def test_balance_runs_where_no_even_split_fits(capsys, tmp_path):
    """An A100 40GB beside an H200: no even split of llama3.1-8b fits, and plan --balance stopped at
    the empty table. The balanced split (7 layers on the A100) is planned and the even one's
    refusal reported."""
    path = tmp_path / "a100-h200.yaml"
    path.write_text("name: a100-h200\ndevices_per_node: 1\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  slow: {device: a100-40gb, nodes: 1}\n  fast: {device: h200, nodes: 1}\n")
    argv = ["plan", "--topology", str(path), "--model", "llama3.1-8b", "--global-batch", "64", "--seq-len", "4096",
            "--balance", "--set", "planner.space.tp=[1]", "--set", "planner.space.recompute=[full]",
            "--set", "planner.space.micro_batch=[1]"]
    doc = _json(capsys, *argv)
    assert doc["candidates"] == [] and doc["candidates_refused"].startswith("no training layout")
    assert doc["balance"]["balanced"]["layers_per_stage"] == [7, 25] and doc["balance"]["uniform"] is None
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "no even-split candidate: no training layout" in out and "no even split fits (tp 1 pp 2" in out
    assert main(argv[:-7]) == 2   # without --balance the empty table is still an error
    assert "no training layout of llama3.1-8b fits" in capsys.readouterr().err


def test_balance_needs_a_zero_stage_its_step_model_takes(capsys):
    assert main([*HETERO, "--balance", "--set", "planner.space.zero=[3]"]) == 2
    assert "field 'planner.space.zero'" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["cp", "vpp"])
def test_balance_needs_cp_and_vpp_1_which_its_step_model_runs(capsys, key):
    # the balanced split ran cp 1 / vpp 1 whatever the space said (found by fuzzing)
    assert main([*HETERO, "--balance", "--set", f"planner.space.{key}=[2]"]) == 2
    assert f"field 'planner.space.{key}'" in capsys.readouterr().err
    assert main([*HETERO, "--balance", "--set", f"planner.space.{key}=[1, 2]", "--json"]) == 0
    capsys.readouterr()


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
    (HETERO + ["--balance", "--set", "workload.lora.rank=8"], "--balance"),   # LoRA: its step model trains every weight
])
def test_balance_where_it_does_not_apply_is_an_error(capsys, argv, field):
    assert main(argv) == 2
    assert f"field '{field}'" in capsys.readouterr().err


def test_an_openrlhf_zero3_import_plans_with_balance_once_its_zero3_only_keys_are_back_at_their_defaults(
        capsys, tmp_path):
    """OpenRLHF's ZeRO-3 import sets two comm switches and two memory keys that only ZeRO-3 reads; the
    balanced split runs ZeRO 0-2, so each is refused in turn naming its key, then the plan runs."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "openrlhf-reinforce-qwen2.5-7b-hybrid.sh"
    assert main(["run", "--from-openrlhf", str(script), "--print-scenario"]) == 0
    scenario = tmp_path / "openrlhf.yaml"
    scenario.write_text(capsys.readouterr().out)
    argv = ["plan", str(scenario), "--topology", "hetero-a100-h100", "--balance", "--top", "1",
            *(f"--set=planner.space.{key}=[{value}]" for key, value in (("zero", 1), ("micro_batch", 1),
                                                                         ("recompute", "full")))]
    comm = "comm.zero3_outer_sync_every_micro_batch"   # refused first, set back with its pair
    for refused, defaults in ((comm, {comm: "false", "comm.zero3_backward_waits_last_bucket": "false"}),
                              ("memory.zero3_max_live_params", {"memory.zero3_max_live_params": "null"}),
                              ("memory.zero_step_sub_group_params", {"memory.zero_step_sub_group_params": "0"})):
        assert main(argv) == 2
        assert f"field 'workload.train_params.{refused}'" in capsys.readouterr().err
        argv += [f"--set=workload.train_params.{key}={value}" for key, value in defaults.items()]
    assert main(argv) == 0
    assert "balanced:" in capsys.readouterr().out
