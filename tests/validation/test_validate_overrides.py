"""`rlsim validate --set`: the selected cases predicted with a change; keys a selected case does not
take, and bad keys or values, are refused (exit 2)."""
from __future__ import annotations

import json

import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.overrides import apply_overrides
from simulator.validation import Case, key_taken, megatron, megatron_core, nemo_rl, register, run_cases

PLATEAU = "topology.device.gemm_efficiency=0.5"


def _predicted(capsys, *argv) -> dict[str, float]:
    assert main(["validate", "--json", *argv]) == 0
    return {c["case"]: c["predicted"] for c in json.loads(capsys.readouterr().out)}


def test_key_prefixes():
    assert key_taken(("topology.device.",), "topology.device.gemm_efficiency")
    assert not key_taken(("topology.device.",), "topology.device")       # the whole device: not a field
    assert key_taken(("workload",), "workload") and key_taken(("workload",), "workload.engine")
    assert not key_taken(("workload",), "workloads.x")


def test_v7_with_a_device_field_is_the_what_if_of_that_device(capsys):
    row = megatron_core.ROWS[0]
    changed = _predicted(capsys, "--case", "V7", "--set", PLATEAU)
    name = f"V7 megatron-core {row[0]} tp{row[4]} pp{row[5]} {row[6]}gpu"
    what_if = megatron_core.predict_row(*row[1:8], device=(("gemm_efficiency", 0.5),)).tflops_per_device
    assert changed[name] == pytest.approx(what_if, rel=1e-12)
    catalog = _predicted(capsys, "--case", "V7")          # nothing left over from the run before
    assert catalog[name] == pytest.approx(megatron_core.predict_row(*row[1:8]).tflops_per_device, rel=1e-12)
    assert changed[name] < 0.9 * catalog[name]
    median = "V7 megatron-core median |error|"
    assert changed[median] == pytest.approx(float(megatron_core.median_error((PLATEAU,))))
    assert changed[median] != pytest.approx(catalog[median])


def test_v1_takes_trainer_constants_over_its_stack(capsys):
    name, tp, pp, gpus, batch, _ = megatron.ROWS[4]          # a pipelined row: the DP sync after the flush
    case = f"V1 megatron {name} tp{tp} pp{pp} {gpus}gpu"
    key = "workload.train_params.comm.dp_overlap_fraction=0.9"
    changed = _predicted(capsys, "--case", case, "--set", key)[case]
    assert changed == pytest.approx(megatron.predict_row(name, tp, pp, gpus, batch, (key,)).tflops_per_device)
    assert changed > megatron.predict_row(name, tp, pp, gpus, batch).tflops_per_device


def test_v7_takes_the_recipe_the_readme_leaves_open(capsys):
    """`workload.train_layout.recompute / micro_batch / vpp` replace the case's assumed recipe on
    every row; the figure stays Megatron-Core's model-FLOPs rate."""
    row = megatron_core.ROWS[0]
    name = f"V7 megatron-core {row[0]} tp{row[4]} pp{row[5]} {row[6]}gpu"
    full = ("workload.train_layout.recompute=full",)
    cost = megatron_core.predict_row(*row[1:8], overrides=full)
    assert cost.layout.recompute == "full" and cost.hardware_flops > cost.model_flops
    got = _predicted(capsys, "--case", name, "--set", full[0])[name]
    assert got == pytest.approx(cost.mfu * 989.0) and got < megatron_core.predict_row(*row[1:8]).tflops_per_device
    two = megatron_core.predict_row(*row[1:8], overrides=("workload.train_layout.micro_batch=2",))
    assert two.layout.micro_batch == 2 and two.pipeline.micro_batches == 2
    piped = megatron_core.ROWS[6]                            # 177B: 16 layers a stage
    assert megatron_core.predict_row(*piped[1:8], overrides=("workload.train_layout.vpp=4",)).layout.vpp == 4


def test_a_recipe_a_row_cannot_run_names_the_key():
    row = megatron_core.ROWS[5]                              # 119B: 23 layers a stage
    with pytest.raises(RlsimError, match="vpp 2 does not divide the 23 layers") as exc:
        megatron_core.predict_row(*row[1:8], overrides=("workload.train_layout.vpp=2",))
    assert exc.value.field == "workload.train_layout.vpp"
    with pytest.raises(RlsimError, match="micro_batch 3 does not divide the 4 sequences") as exc:
        megatron_core.predict_row(*megatron_core.ROWS[0][1:8], overrides=("workload.train_layout.micro_batch=3",))
    assert exc.value.field == "workload.train_layout.micro_batch"
    with pytest.raises(RlsimError, match="vpp 2 interleaves pipeline stages, and this row runs no pipeline") as exc:
        megatron_core.predict_row(*megatron_core.ROWS[0][1:8], overrides=("workload.train_layout.vpp=2",))   # PP 1
    assert exc.value.field == "workload.train_layout.vpp"
    assert megatron_core.predict_row(*megatron_core.ROWS[0][1:8], overrides=("workload.train_layout.vpp=1",)).layout.vpp == 1


@pytest.mark.parametrize("key, says", [("workload.train_layout.tp=2", "each row fixes its own 'tp'"),
                                       ("workload.train_layout.recompute=partial", "recompute must be one of"),
                                       ("workload.train_layout.micro_batch=0", "micro_batch must be a positive"),
                                       ("workload.train_layout.vpps=2", "unknown train_layout key"),
                                       # the 2021 stack runs no flash attention and the GPT rows no Mamba layer
                                       ("workload.train_params.compute.flash_efficiency_ratio=0.5",
                                        "this run has flash attention off")])
def test_a_bad_recipe_key_exits_2_naming_it(capsys, key, says):
    assert main(["validate", "--case", "V1", "--set", key]) == 2
    err = capsys.readouterr().err
    assert says in err and key.split("=")[0] in err


def test_v1_takes_the_recipe_too():
    name, tp, pp, gpus, batch, _ = megatron.ROWS[0]
    selective = megatron.predict_row(name, tp, pp, gpus, batch, ("workload.train_layout.recompute=selective",))
    assert selective.layout.recompute == "selective"
    assert selective.step_time_s < megatron.predict_row(name, tp, pp, gpus, batch).step_time_s


def test_v7_with_a_measured_profile_is_the_what_if_of_its_fields(tmp_path, capsys):
    """`--set topology.device_profile=PATH` (a profile `rlsim calibrate` writes) applies over each
    row's device, as a topology's device_profile does: a profile setting the plateau only is the
    plateau's what-if."""
    profile = tmp_path / "h100.yaml"
    profile.write_text("device: h100\ngemm_efficiency: 0.5\n")
    measured = _predicted(capsys, "--case", "V7", "--set", f"topology.device_profile={profile}")
    assert measured == _predicted(capsys, "--case", "V7", "--set", PLATEAU)


def test_a_profile_of_another_device_fails_that_devices_rows_and_a_bad_one_exits_2(tmp_path, capsys):
    profile = tmp_path / "h100.yaml"
    profile.write_text("device: h100\ngemm_efficiency: 0.6\n")
    name, tp, pp, gpus, batch, _ = megatron.ROWS[0]
    with pytest.raises(RlsimError, match="measured on device 'h100', but the topology's device is 'a100-80gb'"):
        megatron.predict_row(name, tp, pp, gpus, batch, (f"topology.device_profile={profile}",))
    assert main(["validate", "--case", "V7", "--set", f"topology.device_profile={tmp_path / 'none.yaml'}"]) == 2
    assert "device profile not found" in capsys.readouterr().err
    profile.write_text("device: h100\ngemm_eficiency: 0.6\n")
    assert main(["validate", "--case", "V7", "--set", f"topology.device_profile={profile}"]) == 2
    assert "did you mean 'gemm_efficiency'" in capsys.readouterr().err


def test_v6_row_is_its_scenario_with_the_items_applied(capsys):
    row = next(r for r in nemo_rl.ROWS if r.key == "llama3.1-8b" and r.off_policy)
    key = "workload.inference.hbm_efficiency=0.6"
    got = _predicted(capsys, "--case", f"{row.name} step", "--set", key)[f"{row.name} step"]
    measured = simulate(apply_overrides(nemo_rl.scenario(row), [key])).iterations.tail(nemo_rl.PUBLISHED_STEPS)
    expected = float(measured["step_time_s"].mean())
    assert got == pytest.approx(expected, rel=1e-12)
    assert got > nemo_rl.simulate_row(row)["step_s"]


def test_the_output_says_what_the_cases_were_predicted_with(capsys):
    name = "V5 vLLM llama3.1-8b A100-40GB batch 1"
    assert main(["validate", "--case", name, "--set", PLATEAU]) == 0
    assert capsys.readouterr().out.startswith(f"predicted with --set {PLATEAU}\n")
    assert main(["validate", "--json", "--case", name, "--set", PLATEAU]) == 0
    assert json.loads(capsys.readouterr().out)[0]["overrides"] == [PLATEAU]
    assert main(["validate", "--json", "--case", name]) == 0
    assert "overrides" not in json.loads(capsys.readouterr().out)[0]


def test_v5_takes_engine_constants_and_device_fields(capsys):
    from simulator.validation import decode

    name = "V5 vLLM llama3.1-8b A100-40GB batch 1"
    catalog = _predicted(capsys, "--case", name)[name]
    faster = _predicted(capsys, "--case", name, "--set", "workload.inference.hbm_efficiency=0.9")[name]
    assert faster == pytest.approx(decode._llama_decode(1, ("workload.inference.hbm_efficiency=0.9",)))
    assert faster > catalog
    slower = _predicted(capsys, "--case", name, "--set", "topology.device.hbm_bw_Bps=1TB/s")[name]
    assert slower < catalog


@pytest.mark.parametrize("argv, field", [
    (["--case", "V7", "--set", "schedule.refit=full-tensors"], "schedule.refit"),      # not a V7 key
    (["--case", "V4", "--set", PLATEAU], "topology.device.gemm_efficiency"),           # V4 takes none
    (["--case", "V2 one", "--set", PLATEAU], "topology.device.gemm_efficiency"),       # nor V2
    (["--case", "V7", "--set", "topology.device.gemm_eff=0.6"], "topology.device.gemm_eff"),
    (["--case", "V7", "--set", "topology.device.gemm_efficiency=2"], "topology.device.gemm_efficiency"),
    (["--case", "V7", "--set", "workload.train_params.compute.nope=1"], "workload.train_params.compute.nope"),
    (["--case", "V6 nemo-rl llama", "--set", "workload.inference.nope=1"], "workload.inference.nope"),
    (["--case", "V5", "--set", "workload.inference.nope=1"], "workload.inference.nope"),
    (["--case", "V5", "--set", "workload.train_params.compute.flash_attention=false"], "workload.train_params"),
    # the layouts' own keys and bounds: every row would refuse them one by one (exit 0) before
    (["--case", "V6 nemo-rl llama", "--set", "workload.rollout_layout.tp=0"], "workload.rollout_layout.tp"),
    (["--case", "V6 nemo-rl llama", "--set", "workload.rollout_layout.tpx=2"], "workload.rollout_layout.tpx"),
    (["--case", "V6 nemo-rl llama", "--set", "workload.train_layout.tp=0"], "workload.train_layout.tp"),
    (["--case", "V6 nemo-rl llama", "--set", "workload.train_layout.tpx=1"], "workload.train_layout.tpx"),
])
def test_refused_keys_exit_2_naming_the_key(capsys, argv, field):
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and "fix" in err and "Traceback" not in err


def test_a_provider_without_overrides_is_refused_not_ignored():
    @register
    def plain():
        yield Case("V98 plain", "x", 1.0, lambda: 1.0)

    from simulator import validation
    try:
        assert run_cases("V98", overrides=())[0].ok
        with pytest.raises(RlsimError, match="do not take --set topology.nodes"):
            run_cases("V98", overrides=("topology.nodes=2",))
    finally:
        validation._PROVIDERS[:] = [p for p in validation._PROVIDERS if p[1] is not plain]


def test_a_profile_edited_in_the_process_is_read_again(tmp_path, capsys):
    """The rows' caches key on the content of the files the items name, not their paths: a notebook
    that re-measures a profile between two calls gets the new figures."""
    profile = tmp_path / "h100.yaml"
    item = f"topology.device_profile={profile}"
    name = "V7 megatron-core 1.7b tp1 pp1 48gpu"
    profile.write_text("device: h100\ngemm_efficiency: 0.6\n")
    first = _predicted(capsys, "--case", name, "--set", item)[name]
    profile.write_text("device: h100\ngemm_efficiency: 0.5\n")
    second = _predicted(capsys, "--case", name, "--set", item)[name]
    assert second < first
    assert second == _predicted(capsys, "--case", name, "--set", "topology.device.gemm_efficiency=0.5")[name]
    row = next(r for r in nemo_rl.ROWS if r.key == "llama3.1-8b" and r.off_policy)
    slow = nemo_rl.simulate_row(row, (item,))["step_s"]
    profile.write_text("device: h100\ngemm_efficiency: 0.6\n")
    assert nemo_rl.simulate_row(row, (item,))["step_s"] < slow


def test_an_unselected_family_neither_checks_nor_refuses_a_key():
    # V1 / V7 refused a V6 layout key (and V6 a V5 engine key, workload.inference.max_model_len, by its
    # own prompt-length rule, before V5 refused that key as one of the engine loop's)
    from simulator.validation import run_cases

    rows = run_cases("V6 nemo-rl llama3.1-8b on-policy 16gpu step", overrides=("workload.train_layout.tp=2",))
    assert len(rows) == 1 and rows[0].case.startswith("V6")


@pytest.mark.parametrize("argv, says", [
    (["--case", " "], "an empty --case text"),   # matched every case: all 62 ran
    # the scenario's refusal pointed at --seeds, which validate does not have
    (["--case", "V6", "--set", "workload.inference.hbm_efficiency={dist: uniform, low: 0.5, high: 0.9}"],
     "validate predicts each published figure once"),
])
def test_validate_refuses_an_empty_case_and_a_distribution_value(capsys, argv, says):
    assert main(["validate", *argv]) == 2
    assert says in capsys.readouterr().err



def test_a_key_only_the_moe_rows_take_runs_them_and_leaves_the_dense_rows_unrun(capsys):
    """The MoE token dispatcher: an MoE row predicts with it, a dense row could not run (named in the
    warning); the check that a key is bad input (exit 2) tried the first row alone, the dense Llama, and
    refused the key for every selection. A value no row takes still exits 2."""
    key = "workload.train_params.comm.moe_token_dispatcher"
    moe = "V6 nemo-rl qwen3-30b-a3b on-policy 32gpu step"
    dense = "V6 nemo-rl llama3.1-8b on-policy 16gpu step"
    got = _predicted(capsys, "--case", moe, "--case", dense, "--set", f"{key}=allgather")
    assert got[moe] is not None and got[dense] is None
    assert main(["validate", "--case", moe, "--set", f"{key}=alltoall_seq"]) == 2
    assert "'alltoall_seq'" in capsys.readouterr().err
