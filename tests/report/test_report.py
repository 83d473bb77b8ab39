"""Reports: figures (PNG + SVG, deterministic), report.html, and the Chrome trace of a real run."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from simulator.des import INTERVAL_COLUMNS, Timeline
from simulator.report import html as report_html
from simulator.report import plots


def synthetic_timeline(devices_per_pool: int = 6, iterations: int = 2) -> pd.DataFrame:
    """Disaggregated-like: a rollout pool and a train pool that wait on each other."""
    rec = Timeline()
    t = 0.0
    for it in range(iterations):
        for d in range(devices_per_pool):
            gen_end = t + 10 + d  # later devices hold the long tail
            rec.add("rollout", d, 1, "generate", t, gen_end, iteration=it)
            rec.add("rollout", d, 1, "idle", gen_end, t + 10 + devices_per_pool, cause="long_tail", iteration=it)
            rec.add("rollout", d, 1, "idle", t + 10 + devices_per_pool, t + 20 + devices_per_pool,
                    cause="dependency", iteration=it)
            rec.add("train", devices_per_pool + d, 1, "idle", t, t + 10 + devices_per_pool, cause="dependency",
                    iteration=it)
            rec.add("train", devices_per_pool + d, 1, "train", t + 10 + devices_per_pool, t + 19 + devices_per_pool,
                    iteration=it)
            rec.add("train", devices_per_pool + d, 1, "sync", t + 19 + devices_per_pool, t + 20 + devices_per_pool,
                    iteration=it)
        t += 20 + devices_per_pool
    return rec.to_frame()[INTERVAL_COLUMNS]


@dataclass
class FakeResult:
    timeline: pd.DataFrame
    summary: dict
    samples: pd.DataFrame


def fake_result(schedule: str = "disaggregated") -> FakeResult:
    rng = np.random.default_rng(0)
    samples = pd.DataFrame({"response_len": np.minimum(rng.lognormal(np.log(2048), 1.0, 2000), 16384).astype(int)})
    return FakeResult(synthetic_timeline(), {"schedule": schedule, "devices": 12, "iterations": 2,
                                             "step_time_s": 26.0, "tokens_per_s": 1234.5,
                                             "bubbles_by_cause": {"long_tail": 0.1, "dependency": 0.3}}, samples)


def test_time_by_state_closed_form():
    tl = synthetic_timeline(devices_per_pool=6, iterations=2)
    s = plots.time_by_state(tl, devices=12, iterations=2)
    # per iteration: train pool 9 s train + 1 s sync per device; rollout generate 10 + d for d in 0..5
    assert s["train"] == pytest.approx(6 * 9 * 2 / 12 / 2)
    assert s["sync"] == pytest.approx(6 * 1 * 2 / 12 / 2)
    assert s["generate"] == pytest.approx(sum(10 + d for d in range(6)) * 2 / 12 / 2)
    assert s["idle: long_tail"] == pytest.approx(sum(6 - d for d in range(6)) * 2 / 12 / 2)
    # every device is accounted for the whole step: the bar height is the step time
    assert s.sum() == pytest.approx(26.0)


def test_scaling_efficiency_closed_form():
    eff = plots.scaling_efficiency([384, 1536], [35000, 127000])
    assert eff[0] == 1.0 and eff[1] == pytest.approx(127000 / 35000 / 4)


def test_gantt_lanes_are_capped_and_legend_names_causes():
    fig = plots.gantt_figure(synthetic_timeline(devices_per_pool=6), max_lanes_per_pool=3)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["rollout · dev 0", "rollout · dev 2", "rollout · dev 5",
                      "train · dev 6", "train · dev 8", "train · dev 11"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"generate", "train", "sync", "idle: long_tail", "idle: dependency"} <= set(legend)
    assert ax.get_xlabel() == "simulated time (s)"


def _figures() -> dict:
    result = fake_result()
    return {"gantt": plots.gantt_figure(result.timeline),
            "bars": plots.state_bars_figure({"disaggregated": result, "colocated": fake_result("colocated")}),
            "scaling": plots.scaling_figure(pd.DataFrame({"devices": [384, 768, 1536],
                                                          "tokens_per_s": [35e3, 66e3, 127e3]}))}


def test_figures_are_written_as_png_and_svg_deterministically(tmp_path):
    first, second = _figures(), _figures()  # the same input, built twice
    for name in first:
        a = plots.save_figure(first[name], tmp_path / "a", name)
        b = plots.save_figure(second[name], tmp_path / "b", name)
        for pa, pb in zip(a, b, strict=True):
            assert pa.stat().st_size > 1000
            assert pa.read_bytes() == pb.read_bytes(), pa.name
        assert a[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in a[1].read_bytes()[:2000]


def test_write_report_embeds_figures_beside_the_summary(tmp_path):
    path = report_html.write_report(fake_result(), tmp_path)
    text = path.read_text()
    assert path.name == "report.html"
    assert text.count("data:image/png;base64,") == 3
    assert "bubbles_by_cause.long_tail" in text and "1,234" in text
    for stem in ("timeline", "time_by_state", "response_lengths"):
        assert (tmp_path / f"{stem}.png").exists() and (tmp_path / f"{stem}.svg").exists()


def test_write_report_for_a_comparison(tmp_path):
    @dataclass
    class Comparison:
        results: dict

    comp = Comparison({"colocated": fake_result("colocated"), "disaggregated": fake_result()})
    text = report_html.write_report(comp, tmp_path).read_text()
    assert (tmp_path / "timeline_colocated.png").exists() and (tmp_path / "timeline_disaggregated.png").exists()
    assert "<th>colocated</th><th>disaggregated</th>" in text
    # each schedule's own response lengths, named (the first schedule's were drawn, unnamed, for all)
    for name in ("colocated", "disaggregated"):
        assert (tmp_path / f"response_lengths_{name}.png").exists()
    assert not (tmp_path / "response_lengths.png").exists()


def test_response_lengths_leave_out_samples_never_generated():
    """drop_reason unfinished: still generating at the run's end, their lengths drawn, not generated."""
    samples = pd.DataFrame({"response_len": [100, 200, 300, 16000, 16000],
                            "drop_reason": ["", "", "stale", "unfinished", "unfinished"]})
    ax = plots.response_length_figure(samples, name="stalesync").axes[0]
    assert ax.get_title() == ("Response-length distribution: stalesync (3 samples; 2 unfinished at the run's end "
                              "left out)")
    assert sum(patch.get_height() for patch in ax.patches) == 3
    assert max(line.get_xdata()[0] for line in ax.get_lines()) < 16000    # p99 of the generated ones


def test_sweep_report_picks_figures_by_what_the_grid_varies(tmp_path):
    objects = [{"grid": {"topology.supernodes": n, "schedule.staleness": s}, "devices": 384 * n,
                "tokens_per_s": 35e3 * n * 0.91 ** np.log2(n) * (1 + 0.2 * s), "step_time_s": 100.0 / n,
                "staleness": {"max": s, "mean": s / 2}} for n in (1, 2, 4) for s in (0, 1)]
    objects.append({"grid": {"topology.supernodes": 8, "schedule.staleness": 0}, "error": "does not fit"})
    path = report_html.write_sweep_report(objects, ["topology.supernodes", "schedule.staleness"], tmp_path,
                                          capacity={"found": True, "value": {"topology.supernodes": 2}})
    text = path.read_text()
    assert (tmp_path / "scaling.png").exists() and (tmp_path / "staleness.png").exists()
    assert "does not fit" in text and "Capacity" in text


def test_sweep_report_labels_a_null_grid_value(tmp_path):
    """A grid of a key at null (e.g. --grid workload.inference.max_new_tokens=null,512) writes its
    report: the label reads "null" (pandas keeps a missing value missing through str conversion)."""
    objects = [{"grid": {"workload.inference.max_new_tokens": v}, "devices": 8, "tokens_per_s": 1e3 + i,
                "step_time_s": 10.0} for i, v in enumerate((None, 512))]
    report_html.write_sweep_report(objects, ["workload.inference.max_new_tokens"], tmp_path)
    frame = pd.DataFrame([{"k": None}, {"k": 512.0}])
    assert list(report_html._grid_labels(frame, ["k"])) == ["null", "512.0"]


# --------------------------------------------------------------------------- the Chrome trace (report/trace.py)

def _small_real_run():
    api = pytest.importorskip("simulator.api", reason="the simulate API is not built yet")
    return api.simulate(None, **SMALL)


# A small real scenario (seconds): GRPO Qwen2.5-7B on one DGX H100 node, 32 prompts x 4 samples.
SMALL = {"workload": "grpo-qwen2.5-7b", "topology": {"preset": "dgx-h100", "nodes": 1}, "iterations": 2,
         "schedule": "stalesync", "overrides": ["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                                                "workload.mini_batch_prompts=32"]}


def test_trace_is_valid_chrome_trace_one_track_per_pool(tmp_path):
    trace = pytest.importorskip("simulator.report.trace", reason="the trace writer is not built yet")
    result = _small_real_run()
    result.write(tmp_path)  # the public way the trace reaches a user (rlsim run --out)
    doc = json.loads((tmp_path / "trace.json").read_text())
    assert doc == trace.chrome_trace(result.timeline, result.summary)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    spans = [e for e in events if e.get("ph") == "X"]
    assert spans, "no complete events"
    tl = result.timeline
    for e in spans:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0
    # ts and dur are microseconds of simulated time
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(tl["end"].max() * 1e6, rel=1e-6)
    assert sum(e["dur"] for e in spans) == pytest.approx(((tl["end"] - tl["start"]) * 1e6).sum(), rel=1e-6)
    meta = [e for e in events if e.get("ph") == "M"]
    process_names = {e["pid"]: e["args"]["name"] for e in meta if e.get("name") == "process_name"}
    assert set(process_names.values()) >= set(tl["pool"].unique())
    assert len(process_names) == tl["pool"].nunique()  # one track (process) per pool
    assert {e["pid"] for e in spans} <= set(process_names)
    thread_names = {(e["pid"], e["tid"]) for e in meta if e.get("name") == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in spans} <= thread_names  # every track is named


def test_interval_columns_are_what_plots_read():
    assert set(INTERVAL_COLUMNS) >= {"pool", "device", "state", "cause", "start", "end"}


@pytest.mark.parametrize("cause", ["placement", "data", "a-cause-with-no-colour"])
def test_every_idle_cause_has_a_colour(cause):
    # devices a layout leaves unused idle with cause "placement", which had no colour: the report's
    # fallback looked the cause up among the category names and raised ValueError (found by fuzzing)
    categories = ["train", f"idle: {cause}", "idle: long_tail"]
    assert plots._category_color(f"idle: {cause}", categories) is not None


@pytest.mark.parametrize("result", [None, {"colocated": 1}])
def test_write_report_of_no_result_says_what_it_takes(result, tmp_path):
    # an AttributeError before (compare(...).results passed in place of the comparison)
    from simulator.errors import RlsimError
    from simulator.report.html import write_report

    with pytest.raises(RlsimError) as info:
        write_report(result, tmp_path)
    assert info.value.field == "result"


@pytest.mark.parametrize(("objects", "grid_keys", "field"), [
    (None, ["a"], "objects"), ("text", ["a"], "objects"), ([{"grid": {"a": 1}}], "a", "grid_keys"),
    ([{"grid": {"a": 1}}, {"grid": {"a": 2}}], ["nope"], "grid_keys")])
def test_a_sweep_report_names_bad_objects_or_grid_keys(tmp_path, objects, grid_keys, field):
    """A DataFrame or None raised AttributeError / TypeError; a key no point varies was accepted (a
    notebook trial)."""
    from simulator.errors import RlsimError
    from simulator.report.html import write_sweep_report
    with pytest.raises(RlsimError) as caught:
        write_sweep_report(objects, grid_keys, tmp_path)
    assert caught.value.field == field
