"""Order-statistic intervals of the median: ranks, coverage, 1/sqrt(N) narrowing, aggregation."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.uncertainty.intervals import aggregate, ci_coverage, interval_label, median_ci, median_ci_ranks


@pytest.mark.parametrize("n, ranks", [(3, (1, 3)), (5, (1, 5)), (6, (1, 6)), (8, (1, 8)), (10, (2, 9)),
                                      (32, (10, 23))])
def test_ranks_are_the_binomial_ones(n, ranks):
    assert median_ci_ranks(n) == ranks


@pytest.mark.parametrize("n", [6, 10, 32, 100])
def test_coverage_is_at_least_95_percent_from_6_values(n):
    low, high = median_ci_ranks(n)
    tail = sum(math.comb(n, k) for k in range(low)) / 2 ** n
    assert 1 - 2 * tail >= 0.95
    # and the next narrower interval would not be
    tail2 = sum(math.comb(n, k) for k in range(low + 1)) / 2 ** n
    assert 1 - 2 * tail2 < 0.95


@pytest.mark.parametrize("n, coverage, label", [(2, 0.5, "50% interval ([min, max] of 2)"),
                                                (3, 0.75, "75% interval ([min, max] of 3)"),
                                                (5, 0.9375, "94% interval ([min, max] of 5)"),
                                                (6, 1 - 2 / 64, "95% interval"), (32, None, "95% interval")])
def test_an_interval_says_what_it_covers(n, coverage, label):
    """Below 6 values the interval is [min, max], covering 1 - 2^(1-n): labelled so, where the
    text, the verdict and the JSON said 95% (found by a new-user trial)."""
    low, high = median_ci_ranks(n)
    exact = sum(math.comb(n, k) for k in range(low, high)) / 2 ** n
    assert ci_coverage(n) == pytest.approx(exact if coverage is None else coverage)
    assert interval_label(n) == label


def test_width_narrows_about_one_over_sqrt_n():
    rng = np.random.default_rng(7)
    widths = {}
    for n in (25, 100, 400):
        w = [np.subtract(*median_ci(rng.normal(size=n))[2:0:-1]) for _ in range(200)]
        widths[n] = float(np.mean(w))
    assert widths[25] / widths[100] == pytest.approx(2.0, rel=0.2)
    assert widths[100] / widths[400] == pytest.approx(2.0, rel=0.2)


def test_aggregate_keeps_constants_and_types_and_flattens_dotted():
    a = {"schedule": "x", "devices": 8, "t": 1.0, "bubbles_by_cause": {"long_tail": 0.1}, "flag": True}
    b = {"schedule": "x", "devices": 8, "t": 3.0, "bubbles_by_cause": {"long_tail": 0.3}, "flag": True}
    c = {"schedule": "x", "devices": 8, "t": 2.0, "bubbles_by_cause": {"long_tail": 0.2}, "flag": True}
    doc, ci = aggregate([a, b, c])
    assert doc["devices"] == 8 and isinstance(doc["devices"], int) and doc["flag"] is True
    assert doc["t"] == 2.0 and ci["t"] == [1.0, 3.0]
    assert doc["bubbles_by_cause"]["long_tail"] == pytest.approx(0.2)
    assert ci["bubbles_by_cause.long_tail"] == pytest.approx([0.1, 0.3])
    assert "flag" not in ci and "schedule" not in ci


@pytest.mark.parametrize("values, level", [([], 0.95), (None, 0.95), (["a", "b"], 0.95), ([1.0, math.nan], 0.95),
                                           ([1.0, 2.0], 2.0), ([1.0, 2.0], 0.0)])
def test_median_ci_refuses_what_is_not_numbers_or_a_level(values, level):
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError):
        median_ci(values, level)


def test_aggregate_names_what_it_keeps_from_the_first_replica():
    # critical_path.steps (a list) and texts are no medians: they were replica 0's without a word,
    # beside a median makespan they do not add up to
    runs = [{"makespan_s": 10.0, "bottleneck": "train", "critical_path": {"steps": [[0, 10.0]], "step_time_s": 10.0}},
            {"makespan_s": 12.0, "bottleneck": "generate", "critical_path": {"steps": [[0, 12.0]], "step_time_s": 12.0}}]
    doc, _ = aggregate(runs)
    assert doc["makespan_s"] == 11.0 and doc["critical_path"]["step_time_s"] == 11.0
    assert doc["from_replica_0"] == ["bottleneck", "critical_path.steps"]
    same, _ = aggregate([runs[0], runs[0]])
    assert "from_replica_0" not in same


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=40))
def test_aggregate_gives_each_figure_its_median_and_interval(values):
    """A figure's median and ci95 are median_ci's whenever the replicas differ anywhere (a check of
    the first and last replicas alone called [1, 5, 1] a constant 1 +- 0; an audit's mutation)."""
    doc, ci95 = aggregate([{"figure": value} for value in values])
    if len(set(values)) == 1:
        assert doc["figure"] == values[0] and ci95["figure"] == [values[0], values[0]]
    else:
        mid, low, high = median_ci(values)
        assert doc["figure"] == mid and ci95["figure"] == [low, high]
