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


def test_switch_sync_and_fetch_are_drawn_as_bubbles_as_the_summary_counts_them():
    """The summary counts a role switch as a bubble (43% of a hand-built case), but the figures drew
    it solid with only idle time hatched (an idle-time trial)."""
    import pandas as pd

    from simulator.report.plots import _is_bubble, gantt_figure
    assert _is_bubble("idle: long_tail") and _is_bubble("switch") and _is_bubble("sync") and _is_bubble("fetch")
    assert not any(_is_bubble(state) for state in ("generate", "forward", "train"))
    frame = pd.DataFrame({"pool": ["actor"] * 3, "rank_start": [0] * 3, "rank_count": [8] * 3,
                          "state": ["generate", "switch", "train"], "cause": ["", "", ""],
                          "start": [0.0, 1.0, 2.0], "end": [1.0, 2.0, 3.0]})
    fig = gantt_figure(frame)
    hatched = {text.get_text() for text, handle in zip(fig.axes[0].get_legend().get_texts(),
                                                        fig.axes[0].get_legend().legend_handles, strict=True)
               if handle.get_hatch()}
    assert hatched == {"switch"}


def test_the_scaling_figure_plots_the_steady_state_where_the_rows_carry_it():
    """The capacity notebook's figure plotted whole-run tokens/s (efficiency 0.35) beside a table of
    steady ones (0.38): an idle-time trial."""
    import pandas as pd

    from simulator.report.plots import scaling_figure
    rows = pd.DataFrame({"devices": [384, 768], "tokens_per_s": [40e3, 50e3], "steady_tokens_per_s": [60e3, 90e3]})
    ax_eff = scaling_figure(rows).axes[1]
    assert list(ax_eff.lines[0].get_ydata()) == pytest.approx([1.0, 0.75])
    whole = scaling_figure(rows.drop(columns="steady_tokens_per_s")).axes[1]
    assert list(whole.lines[0].get_ydata()) == pytest.approx([1.0, 0.625])
    steady_alone = scaling_figure(rows.drop(columns="tokens_per_s")).axes[1]   # a table of steady figures
    assert list(steady_alone.lines[0].get_ydata()) == pytest.approx([1.0, 0.75])


@pytest.mark.parametrize(("call", "field"), [
    (lambda plots, frame, tmp: plots.response_length_figure(frame, column="nope"), "samples"),
    (lambda plots, frame, tmp: plots.response_length_figure(frame, bins=0), "bins"),
    (lambda plots, frame, tmp: plots.scaling_efficiency([0, 16], [100, 150]), "devices"),
    (lambda plots, frame, tmp: plots.save_figure(frame, tmp, "x"), "fig"),
    (lambda plots, frame, tmp: plots.save_figure(plots.response_length_figure(None), tmp, "a/b"), "stem")])
def test_a_figure_helper_names_its_bad_argument(tmp_path, call, field):
    """A notebook trial met a KeyError, numpy's and matplotlib's ValueErrors, divide-by-zero warnings
    and an AttributeError 'savefig' from these."""
    import pandas as pd

    from simulator.errors import RlsimError
    from simulator.report import plots
    with pytest.raises(RlsimError) as caught:
        call(plots, pd.DataFrame({"response_len": [10, 20]}), tmp_path)
    assert caught.value.field == field


@pytest.mark.parametrize("window", ["0..50", (1,), (0, float("nan")), (100, 50)])
def test_a_gantt_window_is_two_ordered_seconds(window):
    import pandas as pd

    from simulator.errors import RlsimError
    from simulator.report.plots import gantt_figure
    timeline = pd.DataFrame({"pool": ["actor"], "device": [0], "state": ["train"], "cause": [""], "iteration": [0],
                             "start": [0.0], "end": [10.0], "label": [""], "rank_start": [0], "rank_count": [1]})
    with pytest.raises(RlsimError) as caught:
        gantt_figure(timeline, time_window_s=window)
    assert caught.value.field == "time_window_s"
    gantt_figure(timeline, time_window_s=(0, 5))


def test_a_response_length_figure_takes_the_run_itself():
    from simulator.api import simulate
    from simulator.report.plots import response_length_figure
    result = simulate({"topology": "dgx-h100", "workload": "grpo-qwen2.5-7b", "iterations": 1})
    assert "no samples" not in [t.get_text() for t in response_length_figure(result).axes[0].texts]
