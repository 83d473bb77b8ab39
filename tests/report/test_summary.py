"""The report a planner shows (issue 14, item 10): the conclusion first, a short table in human
units, the full table collapsed, a note when a timeline draws a sample, the capacity target and
baseline, and the console table without scientific notation."""
import re
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from simulator.report import console, plots
from simulator.report import html as report_html
from simulator.report.summary import conclusion, key_table
from tests.report.test_report import fake_result, synthetic_timeline


def summary(schedule: str, tokens: float, bubbles: float, **extra) -> dict:
    return {"schedule": schedule, "devices": 32, "steady_tokens_per_s": tokens, "tokens_per_s": tokens * 0.9,
            "steady_step_time_s": 41.25, "step_time_s": 45.0, "bubble_fraction": bubbles, "mfu": 0.2583,
            "peak_memory_bytes": 55.6e9, "bubbles_by_cause": {"long_tail": bubbles * 0.7, "switch": bubbles * 0.3},
            "rollout": {"occupancy": 0.346},
            "staleness": {"max": 1, "mean": 0.4, "bound": 0.0 if schedule in ("colocated", "disaggregated") else 1.0},
            **extra}


def test_comparison_conclusion_names_the_winner_ratio_and_bubbles():
    line = conclusion({"colocated": summary("colocated", 1000.0, 0.05), "stalesync": summary("stalesync", 1190.0, 0.11)})
    assert line == "stalesync 1.19x colocated (tokens/s, steady state), bubbles 11% vs 5%"


def test_run_conclusion_has_throughput_step_and_biggest_bubble():
    line = conclusion({"colocated": summary("colocated", 12345.0, 0.2)})
    assert line == "colocated: 12,345 tokens/s, step 41.2 s, bubbles 20% of device time (most: long tail, 14%)"


def test_key_table_is_in_human_units_and_staleness_only_where_it_applies():
    table = key_table({"colocated": summary("colocated", 1000.0, 0.05), "stalesync": summary("stalesync", 1190.0, 0.11)})
    for text in ("41.2 s", "25.8%", "55.6 GB", "34.6%", "1.19x", "does not apply", "1 / 0.40"):
        assert text in table, text
    assert not re.search(r"\de[+-]\d", table)


def test_staleness_shows_for_every_kind_that_trains_on_older_weights():
    """By the summary's bound, not a list of kinds: nemo-rl-async (bound > 0), and areal and
    verl-fully-async (counted, bound null: AReaL's max_head_offpolicyness bounds starts, verl's
    staleness_threshold is a quota, neither the age of a trained sample) show it; the report said
    "does not apply" for them."""
    for kind, bound in (("areal", None), ("nemo-rl-async", 1.0), ("verl-fully-async", None)):
        table = key_table({kind: summary(kind, 1000.0, 0.05, staleness={"max": 2, "mean": 1.0, "bound": bound})})
        assert "2 / 1.00" in table and "does not apply" not in table, kind


def test_tokens_per_device_is_the_steady_figure_beside_the_steady_rows():
    table = key_table({"one-step-off": summary("one-step-off", 1000.0, 0.05, tokens_per_s_per_device=26.0,
                                               steady_tokens_per_s_per_device=32.5)})
    assert "32.5" in table and "tokens/s per device, steady state" in table


def test_report_leads_with_the_conclusion_and_collapses_the_full_table(tmp_path):
    @dataclass
    class Comparison:
        results: dict

    a, b = fake_result("colocated"), fake_result("stalesync")
    a.summary.update(summary("colocated", 1000.0, 0.05))
    b.summary.update(summary("stalesync", 1190.0, 0.11))
    text = report_html.write_report(Comparison({"colocated": a, "stalesync": b}), tmp_path).read_text()
    body = text[text.index("<body>"):]
    first = re.search(r"<p class='conclusion'>([^<]*)", body)
    assert first and first.group(1) == "stalesync 1.19x colocated (tokens/s, steady state), bubbles 11% vs 5%"
    assert body.index("conclusion") < body.index("<table") < body.index("<details>")
    assert "bubbles_by_cause.long_tail" in body[body.index("<details>"):]   # the full table, collapsed
    assert "55.6 GB" in body and "25.8%" in body


def test_a_run_without_a_steady_window_is_not_called_steady():
    """One iteration: metrics.steady_state returns the run itself (a pipelined kind's warm-up step); the
    report said "bubbles 44% of device time in steady state" beside a note that the step was a warm-up."""
    warm_up = summary("one-step-off", 1000.0, 0.44, iterations=1, steady_bubble_fraction=0.44)
    line = conclusion({"one-step-off": warm_up})
    assert "steady" not in line and "bubbles 44% of device time" in line
    table = key_table({"one-step-off": warm_up})
    assert "steady state" not in table and "tokens/s, whole run" in table
    two = conclusion({"colocated": summary("colocated", 1000.0, 0.05, iterations=1),
                      "stalesync": summary("stalesync", 1190.0, 0.11, iterations=1)})
    assert "(tokens/s, whole run)" in two
    steady = summary("one-step-off", 1000.0, 0.44, iterations=2, steady_bubble_fraction=0.44)
    assert "in steady state" in conclusion({"one-step-off": steady})
    assert "tokens/s, steady state" in key_table({"one-step-off": steady})


def test_report_shows_warnings_and_notes_under_the_conclusion(tmp_path):
    """Not only as rows of the collapsed table: a comparison names the schedules a line is not common to."""
    @dataclass
    class Comparison:
        results: dict

    a, b = fake_result("colocated"), fake_result("stalesync")
    a.summary.update(summary("colocated", 1000.0, 0.05), warnings=["4 of 16 devices idle"], notes=["shared note"])
    b.summary.update(summary("stalesync", 1190.0, 0.11), warnings=[], notes=["shared note", "stale <note>"])
    text = report_html.write_report(Comparison({"colocated": a, "stalesync": b}), tmp_path).read_text()
    shown = text[text.index("<p class='conclusion'>"):text.index("<table")]
    assert "<p class='warn'>warning (colocated): 4 of 16 devices idle</p>" in shown
    assert "<p class='note'>note: shared note</p>" in shown
    assert "<p class='note'>note (stalesync): stale &lt;note&gt;</p>" in shown
    one = report_html.write_report(a, tmp_path / "one").read_text()
    assert "<p class='warn'>warning: 4 of 16 devices idle</p>" in one


def test_timeline_says_when_it_draws_a_sample():
    fig = plots.gantt_figure(synthetic_timeline(devices_per_pool=6), max_lanes_per_pool=3, sample_note=True)
    assert "showing a sample: 6 of 12 device groups" in fig.axes[0].get_title()
    fig = plots.gantt_figure(synthetic_timeline(devices_per_pool=2), max_lanes_per_pool=3, sample_note=True)
    assert "sample" not in fig.axes[0].get_title()
    # the default says it too (a notebook's figure drew 6 of 16 devices unsaid)
    fig = plots.gantt_figure(synthetic_timeline(devices_per_pool=6), max_lanes_per_pool=3)
    assert "showing a sample" in fig.axes[0].get_title()


def test_throughput_axes_name_the_steady_state_where_they_plot_it():
    import pandas as pd
    whole = pd.DataFrame({"devices": [8, 16], "tokens_per_s": [1e4, 1.8e4], "staleness_bound": [0, 1]})
    steady = whole.assign(steady_tokens_per_s=[1.1e4, 2e4])
    assert plots.scaling_figure(whole).axes[0].get_ylabel() == "tokens/s"
    assert plots.scaling_figure(steady).axes[0].get_ylabel() == "steady tokens/s"
    assert plots.staleness_figure(steady, group=None).axes[0].get_ylabel() == "steady tokens/s"


def test_staleness_figure_leaves_out_flat_lines():
    import pandas as pd
    rows = pd.DataFrame([{"schedule": k, "staleness_bound": b, "tokens_per_s": 100.0 + b,
                          "staleness.mean": (b / 2 if k == "stalesync" else 0.0)}
                         for k in ("colocated", "stalesync") for b in (0, 1, 2)])
    fig = plots.staleness_figure(rows, group="schedule")
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "stalesync: mean staleness" in labels and "colocated: mean staleness" not in labels


def test_capacity_report_states_target_and_baseline(tmp_path):
    objects = [{"grid": {"topology.nodes": n}, "devices": 8 * n, "tokens_per_s": 1000.0 * n, "step_time_s": 10.0 / n}
               for n in (1, 2, 4)]
    capacity = {"target": {"tokens_per_s": 1500.0, "step_time_s": None}, "found": True,
                "value": {"topology.nodes": 2}}
    text = report_html.write_sweep_report(objects, ["topology.nodes"], tmp_path, capacity=capacity).read_text()
    assert "meets at least 1,500 tokens/s" in text
    assert "Baseline (smallest configuration evaluated): {&quot;topology.nodes&quot;: 1}, 8 devices, 1,000 tokens/s" in text
    # the steady state where the run has one (the console and the capacity pick read it)
    steady = [{**o, "steady_tokens_per_s": 2 * o["tokens_per_s"]} for o in objects]
    text = report_html.write_sweep_report(steady, ["topology.nodes"], tmp_path, capacity=capacity).read_text()
    assert "8 devices, 2,000 tokens/s (steady)" in text
    assert text.index("steady_tokens_per_s") < text.index("<th>tokens_per_s")


def test_console_numbers_have_no_scientific_notation():
    for value in (1.2e-05, 0.000123, 3.14159, 42.0, 123456.0):
        assert "e" not in console._fmt(value)
    assert console._fmt(np.float64(0.5)) == "0.500"


def _comparison_row(schedule: str, causes: dict) -> dict:
    return {"workload": "w", "devices": 16, "schedule": schedule, "placement": "split", "steady_tokens_per_s": 100.0,
            "steady_step_time_s": 10.0, "step_time_s": 11.0, "tokens_per_s": 90.0, "tokens_per_s_per_device": 5.6,
            "generated_tokens_per_s": 120.0, "steady_bubble_fraction": 0.2, "bubble_fraction": sum(causes.values()),
            "bubbles_by_cause": causes, "rollout": {"occupancy": 0.5, "low_batch_fraction": 0.1}, "mfu": 0.3,
            "peak_memory_bytes": 5e10, "staleness": {"max": 0}, "pools": {"train": 8, "rollout": 8}, "notes": []}


def test_compare_console_lists_every_bubble_cause_above_zero(capsys, monkeypatch):
    """The causes a row has add up to its bubble fraction: placement, data, planning and failure were
    left out (a fixed list), and a cause zero in every row is not listed."""
    monkeypatch.setenv("COLUMNS", "200")
    rows = [_comparison_row("colocated", {"long_tail": 0.1, "switch": 0.0, "placement": 0.05, "planning": 0.01}),
            _comparison_row("disaggregated", {"long_tail": 0.2, "switch": 0.0, "data": 0.02, "failure": 0.03})]
    console.print_comparison(rows)
    listed = re.findall(r"\s{2}(\w+), whole run", capsys.readouterr().out)
    assert listed == ["long_tail", "data", "placement", "failure", "planning"]


def test_time_by_state_says_whole_run_and_its_title_fits_one_run():
    """One run's figure (5.5 in) clipped the one-line title; the bar height is the whole-run step, beside a
    table that leads with the steady step."""
    fig = plots.state_bars_figure({"colocated": fake_result("colocated")})
    ax = fig.axes[0]
    assert "whole run" in ax.get_title() and "whole run" in ax.get_ylabel()
    FigureCanvasAgg(fig).draw()   # lays the figure out as saving it does (the base canvas does not)
    title, page = ax.title.get_window_extent(), fig.bbox
    assert page.x0 <= title.x0 and title.x1 <= page.x1


def test_a_comparison_of_one_schedule_is_named_a_comparison(tmp_path, monkeypatch):
    """compare --schedules stalesync wrote timeline.png and titled the page "rlsim run"; the timelines'
    titles said only idle is hatched (switch, sync and fetch are too)."""
    @dataclass
    class Comparison:
        results: dict

    titles = []
    gantt = plots.gantt_figure
    monkeypatch.setattr(plots, "gantt_figure", lambda *a, **k: titles.append(k["title"]) or gantt(*a, **k))
    text = report_html.write_report(Comparison({"stalesync": fake_result("stalesync")}), tmp_path).read_text()
    assert (tmp_path / "timeline_stalesync.png").exists() and not (tmp_path / "timeline.png").exists()
    assert "<title>rlsim comparison</title>" in text
    assert titles == ["Timeline: stalesync (hatched = bubble: idle by cause, switch, sync, fetch)"]
