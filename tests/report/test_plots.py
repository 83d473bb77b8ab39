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
