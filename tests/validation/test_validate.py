"""`rlsim validate`: the case registry, the JSON contract, and the Megatron Table 1 acceptance."""
from __future__ import annotations

import json

import pytest

from simulator import validation
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.validation import Case, all_cases, register, run_case
from simulator.validation.megatron import ROWS, predict_row
from simulator.validation.training_rows import interleave_chunks


def test_megatron_table1_all_ten_rows_within_15_percent_with_one_a100_efficiency():
    # Every row runs on the catalog a100-80gb (its one gemm_efficiency); no per-row constant exists.
    assert len(ROWS) == 10
    for name, tp, pp, gpus, batch, published in ROWS:
        cost = predict_row(name, tp, pp, gpus, batch)
        assert abs(cost.tflops_per_device / published - 1) <= 0.15, (name, cost.tflops_per_device, published)


def test_interleave_assumption():
    assert interleave_chunks(24, 1) == 1
    assert interleave_chunks(128, 64) == 2      # 2 layers per stage -> 2 chunks
    assert interleave_chunks(105, 35) == 3      # 3 layers per stage -> 3 chunks
    assert interleave_chunks(60, 4) == 3        # 15 layers per stage -> 3 chunks


def test_registry_collects_new_modules_cases_and_reports_failures():
    @register
    def extra():
        yield Case("V99 test case", "x", 2.0, lambda: 3.0)
        yield Case("V99 broken", "x", 1.0, lambda: (_ for _ in ()).throw(RlsimError("no data")))

    try:
        names = [c.case for c in all_cases()]
        assert "V99 test case" in names and any(n.startswith("V1 megatron") for n in names)
        assert any(n.startswith("V4 nccl") for n in names)
        ok = run_case(next(c for c in all_cases() if c.case == "V99 test case"))
        assert ok.error == pytest.approx(0.5) and not ok.ok
        bad = run_case(next(c for c in all_cases() if c.case == "V99 broken"))
        assert bad.predicted is None and "no data" in bad.failure
    finally:
        validation._PROVIDERS[:] = [p for p in validation._PROVIDERS if p[1] is not extra]


def test_validate_json_contract(capsys):
    assert main(["validate", "--json", "--case", "nccl"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, list) and len(doc) == 3
    for row in doc:
        assert {"case", "metric", "predicted", "published", "error"} <= set(row)
        assert row["error"] == pytest.approx(row["predicted"] / row["published"] - 1)


def test_validate_table_and_bad_input(capsys):
    assert main(["validate", "--case", "V4"]) == 0
    out = capsys.readouterr().out
    assert "busbw GB/s" in out and "within tolerance" in out
    assert main(["validate", "--case", "no-such-case"]) == 2
    assert "no validation case matches" in capsys.readouterr().err


def test_one_sided_cases_are_green_only_on_their_side():
    """A published inequality ('sync scales below 0.9') is checked as one, not as a tolerance band."""
    from simulator.validation import Case, run_case

    below = [run_case(Case("x", "m", 0.9, lambda v=v: v, expect="below")) for v in (0.85, 0.95)]
    above = [run_case(Case("x", "m", 0.8, lambda v=v: v, expect="above")) for v in (0.81, 0.79)]
    assert [r.ok for r in below] == [True, False] and [r.ok for r in above] == [True, False]
    assert below[1].criterion == "must be < 0.9" and below[1].as_dict()["expect"] == "below"


def test_case_is_repeatable_and_selects_any_of_its_texts(capsys):
    assert main(["validate", "--json", "--case", "V4 nccl 8x H100", "--case", "V4 nccl 8x A100"]) == 0
    names = [c["case"] for c in json.loads(capsys.readouterr().out)]
    assert names == ["V4 nccl 8x H100 all_reduce 1GiB", "V4 nccl 8x A100 all_reduce 1GiB"]
    assert [r.case for r in validation.run_cases(["V4 nccl 8x A100"])] == names[1:]
    assert main(["validate", "--case", "nothing", "--case", "nada"]) == 2
    assert "'nothing' or 'nada'" in capsys.readouterr().err


def test_a_family_id_selects_that_family_only():
    # "V3" matched V6's deepseek-v3 rows by substring
    from simulator.validation import _selects

    assert _selects("V3", "V3 cloudmatrix R1 decode per NPU") and _selects("v3", "V3 cloudmatrix R1 decode per NPU")
    assert not _selects("V3", "V6 nemo-rl deepseek-v3 on-policy 256gpu step")
    assert _selects("deepseek-v3", "V6 nemo-rl deepseek-v3 on-policy 256gpu step")


def test_an_in_sample_case_is_said_and_counted_apart(capsys):
    """Cases whose figure set one of the model's constants (V4's NVSwitch and NIC efficiencies, the
    batch-1 decode steps' HBM rates) or that hold by construction (the DistQueue's load cut) cannot
    fail, and were counted green like the rest (a validation audit): the table marks them, the total
    counts them apart and --json says why."""
    assert main(["validate", "--case", "V4", "--case", "DistQueue hierarchical"]) == 0
    out = capsys.readouterr().out
    assert "V4 nccl 8x H100 all_reduce 1GiB" in out and out.count("(in-sample)") == 3   # not the A100 row
    assert "4 of 4 cases within tolerance (3 of them in-sample" in out
    assert main(["validate", "--case", "V4", "--json"]) == 0
    rows = {r["case"]: r for r in json.loads(capsys.readouterr().out)}
    assert "nccl-tests" in rows["V4 nccl NDR per NIC all_reduce 1GiB"]["in_sample"]
    assert "in_sample" not in rows["V4 nccl 8x A100 all_reduce 1GiB"]   # a real cross-check
