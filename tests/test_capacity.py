"""Capacity search: closed-form cost figures, bisection equals a full scan on monotone problems."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.capacity import Target, cheapest, cost_fields, find_smallest, price_per_device_hour
from simulator.errors import RlsimError


def test_cost_fields_closed_form():
    # 384 devices x 100 s per step: 384 * 100 * 1000 / 3600 device-hours per 1,000 steps
    out = cost_fields({"devices": 384, "step_time_s": 100.0}, price=2.0)
    assert out["device_hours_per_1000_steps"] == pytest.approx(384 * 100 * 1000 / 3600)
    assert out["cost_per_step"] == pytest.approx(384 * 2.0 * 100 / 3600)
    assert out["cost_per_hour"] == pytest.approx(768.0)
    assert cost_fields({"devices": 8, "step_time_s": 1.0})["cost_per_step"] is None


def test_price_lookup_by_device_kind():
    assert price_per_device_hour({"device_kinds": ["h100"]}, {"h100": 2.5, "a100-80gb": 1.5}) == 2.5
    assert price_per_device_hour({}, 3.0) == 3.0
    assert price_per_device_hour({}, None) is None
    with pytest.raises(RlsimError, match="no price for device"):
        price_per_device_hour({"device_kinds": ["b200"]}, {"h100": 2.5})
    with pytest.raises(RlsimError, match="names no device kind"):
        price_per_device_hour({}, {"h100": 2.5})


def test_a_mixed_cluster_is_priced_by_its_counts():
    # 8 A100 at 5 and 16 H100 at 2: 72 an hour (it was priced at 5 a device: 120)
    prices = {"h100": 2.0, "a100-80gb": 5.0}
    mixed = {"device_kinds": ["a100-80gb", "h100"], "device_counts": {"a100-80gb": 8, "h100": 16}, "devices": 24,
             "step_time_s": 1.0}
    assert cost_fields(mixed, price_per_device_hour(mixed, prices))["cost_per_hour"] == pytest.approx(72.0)
    unknown_counts = {"device_kinds": ["a100-80gb", "h100"]}   # no counts: the dearest kind, not less
    assert price_per_device_hour(unknown_counts, prices) == 5.0


def test_a_sweep_point_of_a_mixed_cluster_carries_its_device_counts():
    from simulator.sweep import BaseScenario, simulate_point

    summary = simulate_point(BaseScenario(topology="hetero-a100-h100", workload="grpo-qwen2.5-7b", iterations=1), {})
    assert summary["device_counts"] == {"a100-80gb": 8, "h100": 8}


def test_target_validation_and_meaning():
    with pytest.raises(RlsimError):
        Target()
    with pytest.raises(RlsimError):
        Target(tokens_per_s=-1)
    t = Target(tokens_per_s=100, step_time_s=10)
    assert t.met_by({"tokens_per_s": 100, "step_time_s": 10})
    assert not t.met_by({"tokens_per_s": 99, "step_time_s": 1})
    assert not t.met_by({"tokens_per_s": 1e9, "step_time_s": 11})
    assert not t.met_by(None)


def throughput(n: int) -> float:
    """Sub-linear scaling, as a real cluster: 1000 tokens/s per device at 91% efficiency per doubling."""
    return 1000.0 * n * 0.91 ** math.log2(n)


def make_batch(calls: list, fits_from: int = 1):
    def evaluate_batch(batch):
        calls.append([b["topology.nodes"] for b in batch])
        out = []
        for b in batch:
            n = b["topology.nodes"]
            if n < fits_from:
                out.append((None, "does not fit in memory"))
            else:
                out.append(({"devices": n, "step_time_s": 1e6 / throughput(n), "tokens_per_s": throughput(n)}, ""))
        return out
    return evaluate_batch


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 4096), min_size=1, max_size=40, unique=True), st.floats(100, 3e6),
       st.integers(1, 4), st.integers(1, 64))
def test_bisect_finds_what_a_scan_finds_with_few_probes(candidates, tokens, width, fits_from):
    target = Target(tokens_per_s=tokens)
    scan_calls, bisect_calls = [], []
    scan = find_smallest("topology.nodes", candidates, target, make_batch(scan_calls, fits_from), strategy="scan")
    fast = find_smallest("topology.nodes", candidates, target, make_batch(bisect_calls, fits_from),
                         strategy="bisect", width=width)
    assert fast.value == scan.value
    meeting = sorted(n for n in candidates if n >= fits_from and throughput(n) >= tokens)
    assert scan.value == (meeting[0] if meeting else None)
    probes = sum(len(c) for c in bisect_calls)
    if width == 1:
        assert probes <= math.ceil(math.log2(len(candidates) + 1))
    assert len(bisect_calls) <= math.ceil(math.log(len(candidates) + 1, width + 1)) + 1
    if fast.value is not None:
        assert fast.summary["device_hours_per_1000_steps"] == pytest.approx(
            fast.summary["devices"] * fast.summary["step_time_s"] * 1000 / 3600)


def test_answer_lists_every_probe_in_order():
    calls: list = []
    answer = find_smallest("topology.nodes", [64, 1, 8, 2, 32, 4, 16], Target(tokens_per_s=9000),
                           make_batch(calls))
    assert answer.value == 16  # throughput(8) = 6029, throughput(16) = 10970
    values = [p.value for p in answer.probes]
    assert values == sorted(values)
    d = answer.to_dict()
    assert d["found"] and d["value"] == 16 and all("meets_target" in e for e in d["evaluated"])


def test_cheapest_ranks_by_cost_per_step_then_devices():
    rows = [
        {"grid": {"t": "gpu"}, "devices": 64, "step_time_s": 10.0, "tokens_per_s": 2e5, "device_kinds": ["h100"]},
        {"grid": {"t": "npu"}, "devices": 96, "step_time_s": 9.0, "tokens_per_s": 2.2e5,
         "device_kinds": ["ascend-910c"]},
        {"grid": {"t": "small"}, "devices": 8, "step_time_s": 100.0, "tokens_per_s": 1e4, "device_kinds": ["h100"]},
        {"grid": {"t": "bad"}, "error": "does not fit"},
    ]
    target = Target(tokens_per_s=1e5)
    # gpu: 64 * 3.0 * 10 / 3600 = 0.533 $/step; npu: 96 * 1.5 * 9 / 3600 = 0.36 $/step
    assert cheapest(rows, target, {"h100": 3.0, "ascend-910c": 1.5})["grid"] == {"t": "npu"}
    assert cheapest(rows, target, {"h100": 1.0, "ascend-910c": 1.5})["grid"] == {"t": "gpu"}
    assert cheapest(rows, target)["grid"] == {"t": "gpu"}  # no prices: fewest devices
    assert cheapest(rows, Target(tokens_per_s=1e9)) is None


def test_cheapest_ranks_by_the_device_entries_prices_without_price():
    """Rows priced by their device entries' price_per_hour (device_prices) and no --price: their cost
    columns were filled, yet the pick went by device count (gpu, 0.533 $/step, beside npu's 0.36)."""
    rows = [
        {"grid": {"t": "gpu"}, "devices": 64, "step_time_s": 10.0, "tokens_per_s": 2e5, "device_kinds": ["h100"],
         "device_prices": {"h100": 3.0}},
        {"grid": {"t": "npu"}, "devices": 96, "step_time_s": 9.0, "tokens_per_s": 2.2e5,
         "device_kinds": ["ascend-910c"], "device_prices": {"ascend-910c": 1.5}},
    ]
    target = Target(tokens_per_s=1e5)
    chosen = cheapest(rows, target)
    assert chosen["grid"] == {"t": "npu"} and chosen["price_per_device_hour"] == 1.5
    # a row without a price among them: no cost to rank all by, so the fewest devices (as before)
    assert cheapest([rows[0], {**rows[1], "device_prices": {}}], target)["grid"] == {"t": "gpu"}


def _sizes(tokens_of):
    def evaluate_batch(batch):
        return [({"tokens_per_s": tokens_of(b["n"]), "step_time_s": 1.0, "devices": 8 * b["n"]}, "") for b in batch]
    return evaluate_batch


def test_a_plateau_says_a_larger_grid_will_not_help():
    """Throughput flat in the size at a fixed batch (the tutorial's 3..8 supernodes at ~78k tokens/s):
    the answer says the batch bounds the step instead of 'widen the grid'."""
    flat = find_smallest("n", [1, 2, 3, 4, 6, 8], Target(tokens_per_s=100.0),
                         _sizes(lambda n: 78.0 + 0.2 * n), strategy="scan")
    assert flat.value is None and flat.plateau and "grow the batch" in flat.plateau
    assert flat.to_dict()["plateau"] is True and flat.to_dict()["notes"] == [flat.plateau]
    # linear scaling that falls short of the target is not a plateau: the grid is only too small
    short = find_smallest("n", [1, 2, 4], Target(tokens_per_s=1000.0), _sizes(lambda n: 100.0 * n), strategy="scan")
    assert short.value is None and short.plateau is None and short.notes == []
    # nor is an answer that was found
    found = find_smallest("n", [1, 2, 4], Target(tokens_per_s=150.0), _sizes(lambda n: 100.0 * n))
    assert found.value == 2 and found.plateau is None


def test_throughput_falling_with_the_size_is_named():
    dips = find_smallest("n", [1, 2, 3], Target(tokens_per_s=1e9), _sizes(lambda n: {1: 100.0, 2: 120.0, 3: 90.0}[n]),
                         strategy="scan")
    assert any("--search scan" in note and "falls" in note for note in dips.notes)


def test_bisection_says_when_an_error_above_the_small_end_hid_smaller_values():
    # a tp that does not divide the heads (3) between two that run: bisection took it as too small and
    # never ran tp 1 or 2, answering 4 without a word (found by fuzzing)
    def evaluate_batch(batch):
        return [(None, "tp does not divide the heads") if b["tp"] == 3 else
                ({"devices": 8, "step_time_s": 1.0, "tokens_per_s": 100.0}, "") for b in batch]

    answer = find_smallest("tp", [1, 2, 3, 4], Target(tokens_per_s=10), evaluate_batch, strategy="bisect")
    assert answer.value == 4
    assert any("--search scan" in note and "(1, 2)" in note for note in answer.notes)
    scan = find_smallest("tp", [1, 2, 3, 4], Target(tokens_per_s=10), evaluate_batch, strategy="scan")
    assert scan.value == 1 and not any("--search scan" in note for note in scan.notes)


@pytest.mark.parametrize("price", [-1.0, float("nan"), True])
def test_a_price_that_is_no_price_is_refused(price):
    # negative and NaN costs came out
    with pytest.raises(RlsimError):
        cost_fields({"devices": 8, "step_time_s": 1.0}, price)


def test_the_target_and_the_costs_read_the_steady_state():
    """A StaleSync run's first step trains part of a batch: whole-run figures made the answer depend on
    --iterations (found by a new-user trial); a summary without steady figures is read whole."""
    run = {"devices": 8, "tokens_per_s": 60_000.0, "step_time_s": 300.0,
           "steady_tokens_per_s": 80_000.0, "steady_step_time_s": 250.0}
    assert Target(tokens_per_s=70_000).met_by(run) and Target(step_time_s=260).met_by(run)
    assert not Target(tokens_per_s=70_000).met_by({"tokens_per_s": 60_000.0, "devices": 8})
    costs = cost_fields(run, 2.0)
    assert costs["cost_per_step"] == pytest.approx(8 * 2.0 * 250.0 / 3600)
    assert costs["device_hours_per_1m_tokens"] == pytest.approx(8 * 1e6 / 80_000 / 3600)


def test_the_capacity_answer_does_not_depend_on_the_worker_count():
    """Throughput that dips with the size (2 meets, 3 does not, 4 does): the probes of a round were
    spread by --jobs, so --jobs 2 answered a larger size than --jobs 1 (found by a new-user trial)."""
    from simulator.commands.sweep import _capacity_search
    from simulator.sweep import SerialExecutor

    rates = {1: 10.0, 2: 20.0, 3: 15.0, 4: 30.0, 6: 40.0, 8: 50.0}

    def evaluate(values):
        n = values["n"]
        return {"devices": n, "steady_tokens_per_s": rates[n], "tokens_per_s": rates[n], "step_time_s": 1.0,
                "steady_step_time_s": 1.0}

    def answer(jobs):
        objects, found = _capacity_search({"n": list(rates)}, Target(tokens_per_s=18.0), evaluate, None,
                                          SerialExecutor(), "base", None, "bisect", jobs, None, [])
        return found["value"], [o["grid"]["n"] for o in objects]

    assert answer(1) == answer(2) == answer(6)


def test_a_one_iteration_warm_up_is_no_plateau():
    """One iteration of StaleSync: every point's figure is its partial warm-up step, and the answer
    blamed the batch ("the batch, not the cluster, bounds the step") for a target one supernode meets
    at four iterations (a capacity trial). It says to run more iterations instead."""
    def warm_up(batch):
        return [({"tokens_per_s": 78.0 + 0.2 * b["n"], "step_time_s": 1.0, "devices": 8 * b["n"],
                  "iterations": 1, "schedule": "stalesync"}, "") for b in batch]
    answer = find_smallest("n", [1, 2, 4], Target(tokens_per_s=100.0), warm_up, strategy="scan")
    assert answer.value is None and "warm-up step" in answer.plateau and "grow the batch" not in answer.plateau
    synchronous = find_smallest("n", [1, 2, 4], Target(tokens_per_s=100.0),
                                lambda batch: [({**s, "schedule": "colocated"}, e) for s, e in warm_up(batch)],
                                strategy="scan")
    assert "grow the batch" in synchronous.plateau      # an on-policy step has no warm-up


def test_a_run_is_priced_from_its_result_whose_device_kinds_sit_beside_the_summary():
    """price_per_device_hour(simulate(...).summary, {...}) said the summary names no device kind (a
    notebook trial): the result carries them, and the fix says so."""
    from simulator.api import simulate
    result = simulate({"topology": "dgx-h100", "workload": "grpo-qwen2.5-7b", "iterations": 1})
    assert price_per_device_hour(result, {"h100": 2.5}) == 2.5
    with pytest.raises(RlsimError) as caught:
        price_per_device_hour(result.summary, {"h100": 2.5})
    assert "pass the SimulationResult" in caught.value.fix


def test_a_target_given_as_text_and_a_replicate_keyword_typo_are_named():
    """Target(tokens_per_s='fast') raised a TypeError; replicate(..., iteratons=1) one naming an
    internal function (a notebook trial)."""
    from simulator.uncertainty import replicate
    with pytest.raises(RlsimError) as caught:
        Target(tokens_per_s="fast")
    assert caught.value.field == "tokens_per_s"
    with pytest.raises(RlsimError, match="did you mean 'iterations'"):
        replicate({"topology": "dgx-h100", "workload": "grpo-qwen2.5-7b"}, seeds=2, iteratons=1)


def test_a_device_entrys_price_per_hour_prices_its_kind():
    """A device's price_per_hour (a topology's device entry) was read nowhere: a sweep with a price
    for the other kind only stopped on 'no price for device' (a heterogeneous-cluster audit). It now
    prices its kind where --price leaves it out, and a run without --price."""
    row = {"device_kinds": ["h100", "fast"], "device_counts": {"h100": 8, "fast": 8},
           "device_prices": {"fast": 5.0}}
    assert price_per_device_hour(row, {"h100": 2.5}) == pytest.approx(3.75)      # (8 x 2.5 + 8 x 5) / 16
    assert price_per_device_hour(row, {"h100": 2.5, "fast": 4.0}) == pytest.approx(3.25)   # --price wins
    assert price_per_device_hour({**row, "device_kinds": ["fast"], "device_counts": {"fast": 8}}, None) == 5.0
    assert price_per_device_hour({"device_kinds": ["h100"]}, None) is None
    with pytest.raises(RlsimError, match="no price for device 'h100'") as err:
        price_per_device_hour(row, None)
    assert "price_per_hour" in err.value.fix and "--price h100=USD" in err.value.fix
    result = simulator.simulate(workload="grpo-qwen2.5-7b", iterations=1,
                                topology={"name": "t", "device": {"base": "h100", "name": "fast", "price_per_hour": 5.0},
                                          "devices_per_node": 8, "nodes": 1},
                                overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
    assert result.device_prices == {"fast": 5.0} and price_per_device_hour(result, None) == 5.0


def test_a_modified_device_is_priced_as_its_own_kind_or_by_its_name():
    """Two specs of one name were one kind: the entry's price_per_hour priced both (a cluster of
    8 plain and 8 derated H100s at the derated one's 1.0)."""
    row = {"device_kinds": ["h100", "h100@slow"], "device_counts": {"h100": 8, "h100@slow": 8},
           "device_prices": {"h100@slow": 1.0}}
    assert price_per_device_hour(row, {"h100": 3.0}) == pytest.approx(2.0)      # the entry's own price for its kind
    assert price_per_device_hour({**row, "device_prices": {}}, {"h100": 3.0}) == 3.0   # the name's price for both
    assert price_per_device_hour(row, {"h100": 3.0, "h100@slow": 2.0}) == pytest.approx(2.5)   # its kind's, given
    with pytest.raises(RlsimError, match="no price for device 'h100'"):
        price_per_device_hour(row, None)
    result = simulator.simulate(
        workload="grpo-qwen2.5-7b", iterations=1, schedule={"kind": "disaggregated"},
        topology={"name": "t", "devices_per_node": 8, "scaleup": {"kind": "switch"}, "scaleout": {"nic_bw": "400Gb/s"},
                  "groups": {"slow": {"device": {"base": "h100", "gemm_efficiency": 0.3, "price_per_hour": 1.0},
                                      "nodes": 1},
                             "fast": {"device": {"base": "h100", "price_per_hour": 3.0}, "nodes": 1}}},
        overrides=["workload.prompts_per_step=16", "workload.mini_batch_prompts=16"])
    assert result.device_counts == {"h100@fast": 8, "h100@slow": 8}
    assert result.device_prices == {"h100@fast": 3.0, "h100@slow": 1.0} and price_per_device_hour(result, None) == 2.0
    assert any("rollout on 8 h100@slow; train on 8 h100@fast" in note for note in result.summary["notes"])


def _grows(values):
    return [({"steady_tokens_per_s": 100.0 * v["topology.nodes"], "devices": 8 * v["topology.nodes"]}, "")
            for v in values]


@pytest.mark.parametrize("call, field", [
    # a number for the target: an AttributeError ('int' object has no attribute 'met_by')
    (lambda: find_smallest("topology.nodes", [1, 2, 4], 150, _grows), "target"),
    (lambda: cheapest([{"devices": 8, "steady_tokens_per_s": 100.0}], None), "target"),
    # a width from a text field: a TypeError comparing int and str mid-search
    (lambda: find_smallest("topology.nodes", [1, 2, 4], Target(tokens_per_s=150), _grows, width="2"), "width"),
    (lambda: find_smallest("topology.nodes", [1, 2, 4], Target(tokens_per_s=150), _grows, width=0), "width"),
    # a comma-joined text: searched its characters ('1', ',', '2', ...) and answered none
    (lambda: find_smallest("topology.nodes", "1,2,4", Target(tokens_per_s=150), _grows), "topology.nodes"),
])
def test_wrong_capacity_arguments_are_named(call, field):
    """A notebook's capacity calls with a wrong argument raised from inside rlsim, or searched the
    letters of a text (a capacity planner's audit)."""
    with pytest.raises(RlsimError) as caught:
        call()
    assert caught.value.field == field and caught.value.fix


def test_cost_fields_takes_a_result_as_pricing_does_and_names_a_summary_without_devices():
    """price_per_device_hour took a SimulationResult, cost_fields beside it raised a TypeError ('not
    subscriptable'); a summary without its device count a KeyError 'devices' (a capacity planner's audit)."""
    from simulator.api import simulate
    result = simulate({"topology": "dgx-h100", "workload": "grpo-qwen2.5-7b", "iterations": 1})
    assert cost_fields(result, 2.5) == cost_fields(result.summary, 2.5)
    assert cost_fields(result, 2.5)["cost_per_hour"] == pytest.approx(8 * 2.5)
    with pytest.raises(RlsimError) as caught:
        cost_fields({"steady_tokens_per_s": 5.0, "steady_step_time_s": 1.0}, 2.5)
    assert caught.value.field == "devices" and "run summary" in caught.value.fix


@pytest.mark.parametrize("prices", ["h100=2.5", "2.5", ["h100", 2.5], {"h100": "2.5"}, {"h100": True}])
def test_prices_that_are_no_number_or_mapping_of_numbers_are_named(prices):
    """find_smallest(..., prices='h100=2.5') (the --price text) raised a TypeError 'string indices
    must be integers' from inside the price lookup (a capacity planner's audit)."""
    with pytest.raises(RlsimError) as caught:
        price_per_device_hour({"device_kinds": ["h100"], "devices": 8}, prices)
    assert caught.value.field == "prices" and "{'h100': 2.5" in caught.value.fix


def test_a_numpy_whole_number_is_a_width():
    """width=np.int64(2) (a worker count read off numpy) was refused as "width must be a whole number"."""
    import numpy as np
    plain = find_smallest("topology.nodes", [1, 2, 4], Target(tokens_per_s=150), _grows, width=2)
    given = find_smallest("topology.nodes", np.array([1, 2, 4]), Target(tokens_per_s=150), _grows, width=np.int64(2))
    assert given == plain
