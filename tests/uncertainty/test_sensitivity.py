"""Sensitivity on a toy scenario whose answer is known (issue 13, item 2)."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.report.tornado import RECORD_ATTRS, sensitivity_records, write_sensitivity_report
from simulator.uncertainty import sensitivity
from simulator.uncertainty.sensitivity_runs import COLUMNS, parse_vary

# With sigma 0 every response has the median length: the colocated step time is linear in it
# (decode + train time per token), and FakeCosts never reads the topology's link efficiencies.
VARY = {"workload.response_length.median": (500.0, 1500.0), "topology.scaleout.efficiency": (0.5, 0.9)}


@pytest.fixture
def frame(toy, costs):
    toy["workload"]["response_length"]["sigma"] = 0.0
    return sensitivity(toy, VARY, metric="steady_step_time_s", samples=8, costs=costs)


def test_linear_key_ranks_first_and_independent_key_is_zero(frame):
    assert list(frame.columns) == COLUMNS
    first, second = frame.iloc[0], frame.iloc[1]
    assert first["key"] == "workload.response_length.median" and first["rank"] == 1
    assert second["swing"] == 0.0 and second["sobol_first"] == 0.0 and second["sobol_total"] == 0.0
    # linear: the base (the median at 1000, the middle of the range) is the mean of the two ends
    assert frame.attrs["base"] == pytest.approx((first["figure_low"] + first["figure_high"]) / 2, rel=1e-6)
    assert first["sobol_total"] > 0.5


def test_report_writes_tornado_and_json(frame, tmp_path):
    write_sensitivity_report(frame, tmp_path)
    for name in ("tornado.png", "tornado.svg", "sensitivity.json", "report.html"):
        assert (tmp_path / name).stat().st_size > 0
    page = (tmp_path / "report.html").read_text()
    assert "tornado" in page
    # the swing as sensitivity computes it (max - min over low, base and high), not "high minus low"
    assert "minus" not in page and "its low value, its base value and its high value" in page
    records = sensitivity_records(frame)
    assert records[0]["rank"] == 1 and set(records[0]) == set(COLUMNS) | set(RECORD_ATTRS)


def test_sobol_intervals_cover_the_known_index_and_narrow_with_samples(frame, toy, costs):
    """The step is linear in the one key that moves it, so its first-order and total indices are 1:
    each estimate's 95% interval covers 1 and is narrower at 32 base samples than at 8; the key that
    cannot matter has 0 +- 0. (An estimate of -0.10 at 8 samples was printed with no error bar.)"""
    wider = frame.iloc[0]
    narrower = sensitivity(toy, VARY, metric="steady_step_time_s", samples=32, costs=costs).iloc[0]
    for row in (wider, narrower):
        assert abs(row["sobol_first"] - 1) <= row["sobol_first_ci95"]
        assert abs(row["sobol_total"] - 1) <= row["sobol_total_ci95"]
    assert 0 < narrower["sobol_first_ci95"] < wider["sobol_first_ci95"]
    assert 0 < narrower["sobol_total_ci95"] < wider["sobol_total_ci95"]
    assert frame.iloc[1][["sobol_first_ci95", "sobol_total_ci95"]].tolist() == [0.0, 0.0]


def test_sobol_can_be_skipped(toy, costs):
    frame = sensitivity(toy, {"workload.response_length.sigma": (0.5, 1.0)}, samples=0, costs=costs)
    assert frame[["sobol_first", "sobol_first_ci95", "sobol_total", "sobol_total_ci95"]].isna().all().all()


@pytest.mark.parametrize("item", ["a.b=1", "a.b=2..1", "=1..2", "a.b=x..2"])
def test_bad_vary_is_a_user_error(item):
    with pytest.raises(RlsimError) as info:
        parse_vary([item])
    assert info.value.field == "--vary" and "LOW..HIGH" in info.value.fix


def test_a_whole_number_key_is_varied_over_whole_numbers():
    # topology.nodes was set to 1.0 and refused ("expected a whole number"): integer keys were a fixed list
    frame = sensitivity(None, {"topology.nodes": (1, 2)}, workload="grpo-qwen2.5-7b",
                        topology={"preset": "dgx-h100"}, iterations=1, samples=0,
                        overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=2",
                                   "workload.mini_batch_prompts=4"])
    row = frame.iloc[0]
    assert row["key"] == "topology.nodes" and row["figure_low"] != row["figure_high"]


def test_a_whole_number_keys_range_ends_on_whole_numbers(toy, costs):
    # 1.5..2.5 of topology.nodes ran 2 nodes at both ends: no swing, without a word (found by fuzzing)
    with pytest.raises(RlsimError, match="ends between them") as info:
        sensitivity(toy, {"workload.prompts_per_step": (7.5, 8.5)}, samples=0, costs=costs)
    assert info.value.field == "--vary" and "workload.prompts_per_step=7..9" in info.value.fix


@pytest.mark.parametrize("vary, samples", [({"workload.response_length.sigma": (0.5,)}, 0),
                                           ({"workload.response_length.sigma": (float("nan"), 1.0)}, 0),
                                           ({"workload.response_length.sigma": (1.0, 0.5)}, 0),   # LOW > HIGH
                                           (5, 0),
                                           ({"workload.response_length.sigma": (0.5, 1.0)}, -1),
                                           ({"workload.response_length.sigma": (0.5, 1.0)}, "a")])
def test_the_apis_vary_and_samples_are_checked_as_the_cli_checks_them(toy, costs, vary, samples):
    # ValueError / TypeError from deep inside, and LOW > HIGH ran (found by fuzzing)
    with pytest.raises(RlsimError) as info:
        sensitivity(toy, vary, samples=samples, costs=costs)
    assert info.value.field in ("--vary", "--samples")


def test_the_api_takes_one_vary_string(toy, costs):
    frame = sensitivity(toy, "workload.response_length.sigma=0.5..1.0", samples=0, costs=costs)
    assert list(frame["key"]) == ["workload.response_length.sigma"]


def test_the_packages_sensitivity_is_the_function_whatever_was_imported_first():
    # importing the module of the same name (compare_replicas did, for its metric check) set the
    # package's `sensitivity` to the module: `uncertainty.sensitivity(...)` raised "'module' object is
    # not callable" (a doc example, docs/guides/uncertainty.md)
    import subprocess
    import sys

    code = ("import simulator.uncertainty.compare, simulator.uncertainty.sensitivity_runs\n"
            "from simulator import uncertainty\nassert callable(uncertainty.sensitivity)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sobol_estimates_out_of_their_range_are_named_as_noise():
    # 4 base samples gave sobol_first 1.90 and total 1.59, printed without a word (found by fuzzing)
    import pandas as pd

    from simulator.uncertainty.sensitivity_runs import sobol_outside

    frame = pd.DataFrame({"key": ["a", "b", "c"], "sobol_first": [1.9, 0.4, None], "sobol_total": [1.59, 0.5, None]})
    assert sobol_outside(frame) == "a 1.90 / 1.59"
    assert sobol_outside(frame.iloc[1:]) == ""


def test_the_default_set_adds_the_scenarios_own_distributions(toy):
    # the centring cleared them before the default set read them: a drawn key was never varied
    from simulator.uncertainty.replicas import plan_replicas
    from simulator.uncertainty.sensitivity_runs import _centred, default_ranges

    toy["workload"]["response_length"]["sigma"] = {"dist": "uniform", "low": 0.5, "high": 1.0}
    toy["topology"] = {"preset": "dgx-h100", "nodes": 1}   # the default set reads its base values
    plan = plan_replicas(toy)
    dists = plan.distributions
    assert [d.key for d in dists] == ["workload.response_length.sigma"]
    ranges = default_ranges(_centred(plan), dists)
    assert ranges["workload.response_length.sigma"] == (0.5, 1.0)


@pytest.mark.parametrize("key", ["seed", "replicas"])
def test_seeds_cannot_be_varied(toy, costs, key):
    # ran with a swing of 0: the runs take their seeds from --seeds
    with pytest.raises(RlsimError) as info:
        sensitivity(toy, {key: (0, 5)}, samples=0, costs=costs)
    assert info.value.field == "--vary" and "--seeds" in info.value.fix


def test_a_key_held_at_one_value_has_sobol_indices_of_exactly_zero(toy, costs):
    # the estimators gave -1e-14 for it, not the 0 the docs state
    frame = sensitivity(toy, {"workload.response_length.sigma": (0.5, 1.0), "topology.scaleout.efficiency": (0.9, 0.9)},
                        samples=4, costs=costs)
    held = frame[frame["key"] == "topology.scaleout.efficiency"].iloc[0]
    assert held["sobol_first"] == 0.0 and held["sobol_total"] == 0.0


@pytest.mark.parametrize("metric", [None, 5, "no.such.figure"])
def test_a_metric_that_is_no_figure_is_said_naming_it(toy, costs, metric):
    # None raised AttributeError; a wrong name was said only after every one-at-a-time run
    with pytest.raises(RlsimError) as info:
        sensitivity(toy, {"workload.response_length.sigma": (0.5, 1.0)}, metric=metric, samples=0, costs=costs)
    assert info.value.field == "--metric"


def test_the_conclusion_says_when_nothing_moves_and_samples_off_a_power_of_two():
    import pandas as pd

    from simulator.report.tornado import conclusion
    from simulator.uncertainty.sensitivity_runs import sobol_sample_note

    flat = pd.DataFrame([{"key": "k", "low": 0.0, "high": 1.0, "figure_low": 5.0, "figure_high": 5.0,
                          "swing": 0.0, "rank": 1}])
    flat.attrs.update(metric="m", base=5.0)
    assert conclusion(flat) == "no varied key moves m over its range (every swing is 0)"
    assert sobol_sample_note(8) == "" and sobol_sample_note(0) == ""
    assert "give 8 or 4" in sobol_sample_note(6)


def test_sobol_indices_do_not_depend_on_the_order_of_the_varied_keys(toy, costs):
    """Saltelli's points follow the design's column order: --vary A --vary B and --vary B --vary A
    gave a key's first-order index 0.46 and 1.17 (a determinism trial)."""
    ranges = {"workload.response_length.sigma": (0.5, 1.0), "workload.response_length.median": (500.0, 1500.0)}
    ahead = sensitivity(toy, ranges, samples=4, costs=costs).set_index("key")
    behind = sensitivity(toy, dict(reversed(ranges.items())), samples=4, costs=costs).set_index("key")
    for key in ranges:
        assert ahead.loc[key, "sobol_first"] == behind.loc[key, "sobol_first"]
        assert ahead.loc[key, "sobol_total"] == behind.loc[key, "sobol_total"]


def test_sobol_intervals_are_the_same_bytes_whatever_numpys_global_state(toy, costs):
    """SALib bootstraps from numpy's global RNG unless given a truthy seed: at the default seed 0 the
    intervals moved from run to run (a performance trial's cmp of two `sensitivity --json`)."""
    import numpy as np
    ranges = {"workload.response_length.median": (500.0, 1500.0), "workload.response_length.sigma": (0.5, 1.0)}
    frames = []
    for state in (1, 2):
        np.random.seed(state)   # a caller's global state (the run must not read it)
        frames.append(sensitivity(toy, ranges, samples=4, costs=costs))
    columns = ["sobol_first_ci95", "sobol_total_ci95"]
    assert frames[0][columns].to_numpy().tolist() == frames[1][columns].to_numpy().tolist()


def test_a_knob_with_an_optimum_inside_its_range_swings_by_its_larger_drop(toy, costs, monkeypatch):
    """rollout_fraction 0.375 and 0.625 both lowered tokens/s by 14-21% and its swing, |high - low|,
    said 7% (a capacity trial): the swing is the figure's range over low, base and high."""
    from simulator.uncertainty import sensitivity_runs as runs
    figures = iter([100.0, 80.0, 90.0])   # base, low, high: both ends below the base
    monkeypatch.setattr(runs, "metric_figure", lambda result, metric: next(figures))
    frame = sensitivity(toy, {"workload.response_length.sigma": (0.5, 1.0)}, samples=0, costs=costs)
    assert frame["swing"].iloc[0] == pytest.approx(20.0)


def test_a_range_that_leaves_the_base_out_swings_over_the_range_alone(toy, costs, monkeypatch):
    """A median varied over 6000..6100 around a base of 1024 swung 'by 3,458': the jump from the base
    to the range, not the key's effect over it (a regression trial)."""
    from simulator.uncertainty import sensitivity_runs as runs
    figures = iter([100.0, 80.0, 79.0])   # base, low, high
    monkeypatch.setattr(runs, "metric_figure", lambda result, metric: next(figures))
    base = toy["workload"]["response_length"]["median"]
    frame = sensitivity(toy, {"workload.response_length.median": (base * 4, base * 5)}, samples=0, costs=costs)
    assert frame["swing"].iloc[0] == pytest.approx(1.0)


def test_a_device_key_range_away_from_the_devices_value_swings_over_the_range_alone(toy, costs, monkeypatch):
    """gemm_efficiency 0.30..0.35 around the catalog's value swung as 'base - low' (a trial): the
    device's own value was not read, so the base was taken as inside the range."""
    from simulator.uncertainty import sensitivity_runs as runs
    figures = iter([100.0, 60.0, 62.0])
    monkeypatch.setattr(runs, "metric_figure", lambda result, metric: next(figures))
    toy["topology"] = {"preset": "dgx-h100", "nodes": 1}   # a catalog device (FakeCosts ignore it)
    frame = sensitivity(toy, {"topology.device.gemm_efficiency": (0.05, 0.06)}, samples=0, costs=costs)
    assert frame["swing"].iloc[0] == pytest.approx(2.0)


def test_a_mixed_clusters_device_fields_vary_group_by_group_around_their_own_values():
    """On A100 + H100 the default set varied topology.device.* around the first group's device and
    set that range on every kind (the other got another factor; the ranking followed the order of
    the groups; a topology trial): each group's field is now its own key around its own value."""
    from simulator.hardware.topology import load_topology
    from simulator.uncertainty import plan_replicas
    from simulator.uncertainty.sensitivity_runs import DEFAULT_VARY, default_ranges

    plan = plan_replicas({"topology": "hetero-a100-h100", "workload": "grpo-qwen2.5-7b"})
    ranges = default_ranges(plan)
    devices = load_topology("hetero-a100-h100").device_groups()
    assert set(devices) == {"a100", "h100"} and not any(k.startswith("topology.device.") for k in ranges)
    for key, (low_factor, high_factor) in DEFAULT_VARY.items():
        if not key.startswith("topology.device."):
            continue
        field = key.rpartition(".")[2]
        for name, spec in devices.items():
            own = getattr(spec, field)
            assert ranges[f"topology.groups.{name}.device.{field}"] == pytest.approx(
                (own * low_factor, min(1.0, own * high_factor) if field.endswith("efficiency") else own * high_factor))
    assert load_topology("dgx-h100").device_groups() == {}


def test_an_unknown_vary_key_is_said_as_grid_says_it_and_default_ends_are_tidy(toy, costs):
    # 'field foo: Extra inputs are not permitted' with a generic fix; ends such as 0.9199999999999999
    with pytest.raises(RlsimError) as info:
        sensitivity(toy, {"foo.bar": (1, 2)}, samples=0, costs=costs)
    assert info.value.message == "unknown scenario key 'foo'" and "workload" in info.value.fix
    from simulator.uncertainty import plan_replicas
    from simulator.uncertainty.sensitivity_runs import default_ranges
    ends = [end for span in default_ranges(plan_replicas({"workload": "grpo-qwen2.5-7b"})).values() for end in span]
    assert all(end == float(f"{end:.12g}") for end in ends)


def test_an_integer_laws_middle_is_a_whole_number(toy, costs):
    """samples_per_prompt {uniform 4..9, integer} centred at 6.5 and the base run refused it ('Input
    should be a valid integer (got 6.5)', blaming the user's file; an audit): the middle rounds half up."""
    toy["workload"]["samples_per_prompt"] = {"dist": "uniform", "low": 4, "high": 9, "integer": True}
    frame = sensitivity(toy, {"workload.samples_per_prompt": (4, 9)}, samples=0, costs=costs)
    row = frame.iloc[0]
    assert (row["low"], row["high"]) == (4, 9) and row["figure_low"] != row["figure_high"]
    from simulator.uncertainty.replicas import plan_replicas
    from simulator.uncertainty.sensitivity_runs import _centred
    assert _centred(plan_replicas(toy)).data["workload"]["samples_per_prompt"] == 7


def test_an_integer_laws_default_range_ends_on_whole_numbers(toy, costs):
    # a normal's 95% range 6.04..9.96 of a whole-number key: the table showed ends no run took
    from simulator.uncertainty.replicas import plan_replicas
    from simulator.uncertainty.sensitivity_runs import _centred, default_ranges

    toy["workload"]["prompts_per_step"] = {"dist": "normal", "mean": 8, "sd": 1, "integer": True}
    toy["topology"] = {"preset": "dgx-h100", "nodes": 1}   # the default set reads its base values
    plan = plan_replicas(toy)
    centred = _centred(plan)
    assert centred.data["workload"]["prompts_per_step"] == 8
    assert default_ranges(centred, plan.distributions)["workload.prompts_per_step"] == (6.0, 10.0)


def test_max_runs_is_checked_against_the_whole_design_before_the_first_run(toy, costs, monkeypatch):
    """max_runs 70 let 15 one-at-a-time runs go before the Sobol design's 72 were refused (an audit);
    here 5 + 32 = 37 past 36 ran without a word (each part alone is under it)."""
    from simulator.uncertainty import sensitivity_runs as runs
    done = []
    monkeypatch.setattr(runs, "run_many", lambda plans, **_: done.append(plans) or [])
    toy["limits"] = {"max_runs": 36}
    with pytest.raises(RlsimError, match=r"5 one-at-a-time runs and 32 for the Sobol design .* 37 simulations") as info:
        sensitivity(toy, VARY, samples=8, costs=costs)
    assert info.value.field == "--samples" and "limits.max_runs" in info.value.fix and not done


def test_large_figures_print_with_thousands_separators_not_exponents():
    # the table and the conclusion said '5.582e+04 at 0.576 vs 6.757e+04', the base line 64,370.5 (an audit)
    import pandas as pd

    from simulator.report.tornado import conclusion, figure_text

    row = {"key": "k", "low": 0.576, "high": 16384.0, "figure_low": 55815.2, "figure_high": 67568.4,
           "swing": 11753.2, "rank": 1}
    frame = pd.DataFrame([row])
    frame.attrs.update(metric="m", base=64370.5)
    assert conclusion(frame) == ("k moves m most: 55,815 at 0.576 vs 67,568 at 16,384, a swing of 11,753 "
                                 "(18% of the base 64,370)")
    assert [figure_text(v) for v in (4968.0, 0.00085, 0.2859, 59154890752.0)] == ["4,968", "0.00085", "0.2859",
                                                                                  "59,154,890,752"]
    assert figure_text(64370.5, 6) == "64,370.5" and figure_text(1234567.8, 6) == "1,234,568"


def test_a_default_range_around_a_base_of_zero_is_named_in_a_note(toy, costs):
    # sigma 0: x0.75..x1.25 is 0..0, and its swing of 0 read as 'no effect' without a word (an audit)
    from simulator.uncertainty.sensitivity_runs import collapsed_note

    toy["workload"]["response_length"]["sigma"] = 0.0
    toy["topology"] = {"preset": "dgx-h100", "nodes": 1}   # the default set reads its base values
    frame = sensitivity(toy, None, samples=0, costs=costs)
    assert frame.attrs["collapsed"] == ["workload.response_length.sigma"]
    note = collapsed_note(frame)
    assert note.startswith("workload.response_length.sigma is 0 in the scenario")
    assert "--vary workload.response_length.sigma=LOW..HIGH" in note
    given = sensitivity(toy, {"workload.response_length.sigma": (0.0, 0.0)}, samples=0, costs=costs)
    assert collapsed_note(given) == ""   # a range given as 0..0 is the user's


def test_a_whole_number_keys_sobol_design_weighs_each_whole_value_alike(toy, monkeypatch):
    """The Sobol design's values of a whole-number key were the uniform draws over LOW..HIGH rounded
    half to even: over 7..9 the ends took half the weight of the middle (P(7) = P(9) = 0.25, P(8) =
    0.5), so the indices were of a law the range does not say. Each whole value now takes its whole
    unit bin, as an integer distribution's draws do (distributions._sample_whole)."""
    from collections import Counter

    from simulator.uncertainty import sensitivity_runs
    from simulator.uncertainty.distributions import get_dotted
    key = "workload.prompts_per_step"
    seen: list[int] = []

    def fake_run_many(plans, **_):
        values = [get_dotted(p.data, key) for p in plans]
        seen.extend(values)
        return [[{"steady_tokens_per_s": float(v)}] for v in values]
    monkeypatch.setattr(sensitivity_runs, "run_many", fake_run_many)
    samples = 1024
    toy["limits"] = {"max_runs": 4 * samples}
    sensitivity(toy, {key: (7, 9)}, samples=samples)
    design = seen[3:]   # after the base and the two ends
    assert len(design) == samples * 3 and all(isinstance(v, int) for v in design)
    shares = {v: n / len(design) for v, n in Counter(design).items()}
    assert set(shares) == {7, 8, 9}
    assert all(abs(share - 1 / 3) < 0.02 for share in shares.values()), shares


def test_a_whole_number_keys_default_range_ends_where_its_runs_take_it(toy):
    """A response median of 1001 gave the default range 750.75..1251.25, and the rows showed those
    ends beside figures of runs at 751 and 1251 (the runs round a whole-number key)."""
    from simulator.uncertainty.replicas import plan_replicas
    from simulator.uncertainty.sensitivity_runs import default_ranges

    toy["workload"]["response_length"]["median"] = 1001
    toy["topology"] = {"preset": "dgx-h100", "nodes": 1}   # the default set reads its base values
    assert default_ranges(plan_replicas(toy))["workload.response_length.median"] == (751.0, 1251.0)


def test_a_numpy_whole_number_is_a_sample_count(toy, costs):
    """samples=np.int64(8) was refused as "samples must be a whole number >= 0"."""
    import numpy as np
    vary = {"workload.response_length.sigma": (0.5, 1.0)}
    plain = sensitivity(toy, vary, samples=8, costs=costs)
    assert sensitivity(toy, vary, samples=np.int64(8), costs=costs).to_csv() == plain.to_csv()
