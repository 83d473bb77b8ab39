"""report/plots.py: the figures' inputs checked (a wrong length or a run without samples)."""
from __future__ import annotations

import pytest


def test_scaling_efficiency_refuses_lists_of_two_lengths():
    # numpy broadcast [1, 2] against [1]: it returned [1.0, 0.5]
    from simulator.errors import RlsimError
    from simulator.report.plots import scaling_efficiency

    with pytest.raises(RlsimError):
        scaling_efficiency([1, 2], [1])
    with pytest.raises(RlsimError):
        scaling_efficiency([], [])


def test_the_response_length_figure_of_a_run_without_samples_says_so():
    # simulate(keep_samples=False).samples is None: a TypeError before
    from simulator.report.plots import response_length_figure

    fig = response_length_figure(None)
    assert "no samples" in [t.get_text() for t in fig.axes[0].texts]


@pytest.mark.parametrize("call", [
    lambda plots: plots.gantt_figure(__import__("pandas").DataFrame()),              # KeyError 'device'
    lambda plots: plots.scaling_figure(__import__("pandas").DataFrame()),            # KeyError
    lambda plots: plots.staleness_figure(__import__("pandas").DataFrame()),          # KeyError
    lambda plots: plots.state_bars_figure([1]),                                      # AttributeError
])
def test_a_figure_of_the_wrong_input_says_what_it_takes(call):
    from simulator.errors import RlsimError
    from simulator.report import plots

    with pytest.raises(RlsimError):
        call(plots)


def test_gantt_needs_at_least_one_lane_per_pool():
    import pandas as pd

    from simulator.des import INTERVAL_COLUMNS
    from simulator.errors import RlsimError
    from simulator.report.plots import gantt_figure
    with pytest.raises(RlsimError) as info:   # a numpy ValueError before
        gantt_figure(pd.DataFrame(columns=INTERVAL_COLUMNS), max_lanes_per_pool=-1)
    assert info.value.field == "max_lanes_per_pool"
