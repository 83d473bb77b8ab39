"""Public API on the real cost models (a small scenario) and on fake costs."""
import json

import pytest

import simulator
from simulator.rl.fake_costs import FakeCosts

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=2,
             overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                        "workload.mini_batch_prompts=16", "workload.train_layout.tp=2"])
CONTRACT = ["schedule", "devices", "iterations", "step_time_s", "tokens_per_s", "tokens_per_s_per_device",
            "generated_tokens_per_s", "bubble_fraction", "bubbles_by_cause", "stage_time_s", "mfu",
            "staleness", "peak_memory_bytes"]


@pytest.fixture(scope="module")
def result():
    return simulator.simulate(schedule="colocated", **SMALL)


def test_summary_has_the_contract_keys(result):
    s = result.summary
    assert all(k in s for k in CONTRACT)
    assert s["devices"] == 8 and s["iterations"] == 2
    assert 0 < s["mfu"] < 1
    assert s["tokens_per_s"] <= s["roofline_tokens_per_s"]
    assert s["peak_memory_bytes"] <= 80e9
    assert {"max", "mean"} <= set(s["staleness"])
    json.dumps(s, allow_nan=False)


def test_summary_has_the_critical_path_of_every_step(result):
    # rl/critical_path.py on the real cost models: one entry per step, tiling the run
    crit = result.summary["critical_path"]
    assert [st["iteration"] for st in crit["steps"]] == [0, 1]
    assert crit["step_time_s"] == pytest.approx(result.summary["makespan_s"] / 2, rel=1e-9)
    assert sum(crit["free_delta_s"].values()) == pytest.approx(crit["step_time_s"], rel=1e-9)
    first = crit["steps"][0]["chain"]
    assert first[0]["start_s"] == 0.0 and [e["phase"] for e in first][-1] == "sync"
    assert any(e["phase"] == "generate" and "sequence" in e for e in first)


def test_frames(result):
    assert list(result.timeline.columns[:8]) == ["pool", "device", "state", "cause", "iteration", "start",
                                                 "end", "label"]
    assert len(result.iterations) == 2
    assert result.samples["consumed_iteration"].max() == 1
    assert set(result.device_timeline()["device"]) == set(range(8))


def test_write_outputs(result, tmp_path):
    files = {p.name for p in result.write(tmp_path)}
    assert {"scenario.yaml", "summary.json", "trace.json", "timeline.csv", "samples.csv"} <= files
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    assert x and all({"ts", "dur", "pid", "tid", "name"} <= set(e) for e in x)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"actor"}
    again = simulator.simulate(str(tmp_path / "scenario.yaml"))
    assert again.summary == result.summary


def test_compare_side_by_side():
    cmp = simulator.compare(schedules=["colocated", "disaggregated", "stalesync"], **SMALL)
    assert list(cmp.table["schedule"]) == ["colocated", "disaggregated", "stalesync"]
    assert cmp.results["disaggregated"].summary["pools"].keys() == {"rollout", "train"}


def test_simulate_with_fake_costs_is_deterministic():
    sc = {"topology": "x", "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4},
          "schedule": "stalesync", "iterations": 3}
    costs = FakeCosts(instance_devices=2, train_group_devices=2)
    costs.n_devices = 8
    a = simulator.simulate(sc, costs=costs).summary
    b = simulator.simulate(sc, costs=costs).summary
    assert a == b


def test_a_run_keeps_no_topology_alive(monkeypatch) -> None:
    """Nothing (a cost cache, the result) holds the run's Topology once the run is over: two runs in
    one process keep no big graph from the first (issue 13: RSS 266 -> 591 MiB over five 24k runs)."""
    import gc
    import weakref

    import simulator.api as api

    built: list[weakref.ref] = []
    load = api.load_topology

    def spy(*args, **kwargs):
        topology = load(*args, **kwargs)
        built.append(weakref.ref(topology))
        return topology

    monkeypatch.setattr(api, "load_topology", spy)
    kept = [simulator.simulate(schedule=kind, **SMALL) for kind in ("colocated", "stalesync")]
    gc.collect()
    assert len(built) == 2 and all(ref() is None for ref in built)
    assert all(r.summary["iterations"] == 2 for r in kept)   # the results themselves stay usable


def test_the_result_names_the_device_kinds_of_its_topology(result):
    """A sweep prices a point from these (sweep.simulate_point), without building the topology again."""
    from simulator.hardware.topology import load_topology
    assert result.device_kinds == load_topology(result.scenario.topology).device_kinds() == ["h100"]


def test_keep_samples_false_folds_the_rows_and_keeps_the_summary(monkeypatch):
    # rlsim run without --out: no per-sample table, rows folded during the run, the same summary
    from simulator.rl import samples as sample_store
    monkeypatch.setattr(sample_store, "RETIRE_MIN_ROWS", 1)
    kw = {"workload": "grpo-qwen2.5-7b", "topology": "dgx-h100", "schedule": "stalesync", "iterations": 6,
          "overrides": ["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                        "workload.mini_batch_prompts=16"]}
    kept, folded = simulator.simulate(None, **kw), simulator.simulate(None, keep_samples=False, **kw)
    assert kept.samples is not None and len(kept.samples) == kept.summary["samples"]["generated"]
    assert folded.samples is None and folded.record.samples.base > 0
    assert json.dumps(folded.summary, default=float) == json.dumps(kept.summary, default=float)


SMALL_RUN = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
             "--set", "workload.prompts_per_step=8", "--set", "workload.samples_per_prompt=2",
             "--set", "workload.mini_batch_prompts=8"]


def _keep_samples_asked(monkeypatch) -> list[bool]:
    """The keep_samples every api.simulate call of the test is given, in order."""
    from simulator import api

    seen: list[bool] = []
    real = api.simulate

    def spy(*args, keep_samples=True, **kw):
        seen.append(keep_samples)
        return real(*args, keep_samples=keep_samples, **kw)

    monkeypatch.setattr(api, "simulate", spy)
    return seen


def test_rlsim_run_keeps_the_sample_table_only_for_out(monkeypatch, tmp_path):
    from simulator import cli

    seen = _keep_samples_asked(monkeypatch)
    assert cli.main(["run", *SMALL_RUN, "--json"]) == 0
    assert cli.main(["run", *SMALL_RUN, "--out", str(tmp_path / "o")]) == 0
    assert seen == [False, True] and (tmp_path / "o" / "samples.csv").stat().st_size > 0


def test_rlsim_compare_keeps_the_sample_tables_only_for_out(monkeypatch, tmp_path, capsys):
    from simulator import cli

    seen = _keep_samples_asked(monkeypatch)
    kinds = ["--schedules", "colocated,stalesync"]
    assert cli.main(["compare", *SMALL_RUN, *kinds, "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["compare", *SMALL_RUN, *kinds, "--out", str(tmp_path / "o")]) == 0
    assert seen == [False, False, True, True]
    assert next((tmp_path / "o").glob("*/samples.csv")).stat().st_size > 0
    assert f"wrote {tmp_path / 'o'}/" in capsys.readouterr().out   # said as `rlsim run --out` says it


def test_the_summary_read_from_the_store_is_the_summary_of_the_samples_frame():
    """simulate reads the per-sample figures from the store's columns (the arrays the samples frame
    holds): every figure equals metrics.summary over the frame."""
    from simulator import metrics

    for schedule in ("stalesync", "colocated"):
        r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                               schedule=schedule, iterations=2)
        from_frame = metrics.summary(r.record, r.timeline, r.samples)
        assert {k: r.summary[k] for k in from_frame} == from_frame


def test_the_summary_counts_the_rollout_instances_its_pool_holds(result):
    # one dgx-h100 node colocated: its 8 devices hold 8 / (tp x ep) instances (the field's own default, 1,
    # is for standalone rollouts and was reported as is)
    rollout = result.summary["layouts"]["rollout"]
    assert rollout["instances"] == 8 // (rollout["tp"] * rollout["ep"])
    split = simulator.simulate(schedule="disaggregated", **{**SMALL, "iterations": 1})
    pools = split.summary["pools"]
    rollout = split.summary["layouts"]["rollout"]
    assert rollout["instances"] == pools["rollout"] // (rollout["tp"] * rollout["ep"]) >= 1


def test_a_rollout_instance_count_in_a_run_is_an_error():
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError, match=r"workload.rollout_layout.*instances does not apply"):
        simulator.simulate(schedule="colocated", **{**SMALL, "overrides": SMALL["overrides"] + [
            "workload.rollout_layout.instances=4"]})


def test_a_given_dp_must_be_what_the_training_pool_holds():
    # it was dropped before the layout saw it: dp=3 on a pool of 8 replicas ran as dp 8
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError, match="dp=3 but the training pool") as err:
        simulator.simulate(schedule="colocated", **{**SMALL, "overrides": SMALL["overrides"] + [
            "workload.train_layout.dp=3"]})
    assert err.value.field == "workload.train_layout.dp"
    held = simulator.simulate(schedule="colocated", **{**SMALL, "iterations": 1, "overrides": SMALL["overrides"] + [
        "workload.train_layout.dp=4"]})
    assert held.summary["layouts"]["train"]["dp"] == 4


def test_a_failure_after_the_runs_end_is_said():
    # it was accepted and never happened, without a word (the run's end is known only after it)
    run = simulator.simulate(schedule="colocated", **{**SMALL, "iterations": 1, "overrides": SMALL["overrides"] + [
        "schedule.failures=[{at_s: 1e9, fail: 'devices:0-1'}]"]})
    assert not run.summary.get("failures")
    assert any("schedule.failures.0 (at_s 1e+09) came at or after the run's end" in w
               for w in run.summary["warnings"])


@pytest.mark.parametrize("call, field", [
    # wrong arguments raised KeyError / TypeError / AttributeError from deep inside (found by fuzzing)
    (lambda: simulator.compare(None, ["x"]), "schedules"),
    (lambda: simulator.compare(None, "colocated,async"), "schedules"),
    (lambda: simulator.simulate(5), "scenario"),
    (lambda: simulator.simulate([]), "scenario"),
    (lambda: simulator.simulate(None, overrides=[5]), "overrides"),
    (lambda: simulator.simulate(None, overrides=5), "overrides"),
    # a typo of a keyword: a TypeError naming load_scenario / scenario_data before
    (lambda: simulator.simulate(None, iteratons=2), "iteratons"),
    (lambda: simulator.compare(None, ["colocated"], iteratons=2), "iteratons"),
    (lambda: simulator.simulate(None, keep_samples="no"), "keep_samples"),   # kept the samples
    # a set's order is the hash seed's: the baseline row changed between processes
    (lambda: simulator.compare(None, {"colocated", "stalesync"}), "schedules"),
    (lambda: simulator.compare(None, ["colocated"], schedule="async"), "schedule"),   # dropped without a word
    # the hooks: an AttributeError mid-run before
    (lambda: simulator.simulate(None, costs="fake"), "costs"),
    (lambda: simulator.simulate(None, costs=object()), "costs"),
    (lambda: simulator.simulate(None, progress=5), "progress"),
    (lambda: simulator.simulate(None, progress=lambda done, total: None), "progress"),
])
def test_wrong_api_arguments_are_rlsim_errors_naming_the_argument(call, field):
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError) as info:
        call()
    assert info.value.field == field


def test_one_override_string_is_one_item_not_its_letters():
    from simulator.scenario import load_scenario

    assert load_scenario(None, overrides="iterations=3").iterations == 3


@pytest.mark.parametrize("call", ["simulate", "compare", "replicate"])
def test_a_key_given_twice_in_overrides_is_refused_as_the_cli_refuses_it(call):
    """overrides=["schedule=async", "schedule=stalesync"] replaced the section, the last winning without a
    word, where `rlsim run --set` refuses a key given twice (overrides.refuse_a_key_given_twice)."""
    from simulator.errors import RlsimError
    from simulator.uncertainty import replicate

    function = replicate if call == "replicate" else getattr(simulator, call)
    with pytest.raises(RlsimError, match="is given twice") as info:
        function(None, overrides=["iterations=2", "iterations=3"])
    assert info.value.field == "iterations" and info.value.source == "overrides"
    assert "overrides iterations is given twice (iterations=2, then iterations=3)" in info.value.message


def test_simulate_refuses_replicas_it_would_not_run():
    # simulate({..., replicas: 3}) ran one replica without a word (found by fuzzing)
    from simulator.errors import RlsimError

    with pytest.raises(RlsimError) as info:
        simulator.simulate(None, overrides=["replicas=3"])
    assert info.value.field == "replicas" and "replicate" in info.value.fix


def test_the_cost_hook_error_names_the_missing_members():
    from simulator.errors import RlsimError

    fake = FakeCosts()
    members = {name: getattr(fake, name) for name in dir(fake) if not name.startswith("_") and name != "switch"}
    with pytest.raises(RlsimError) as info:
        simulator.simulate(None, costs=type("NoSwitch", (), members)(), iterations=1)
    assert "lacks switch of the cost protocol" in str(info.value)


def test_write_to_a_file_path_is_an_error_naming_it(result, tmp_path):
    # a FileExistsError from mkdir before
    from simulator.errors import RlsimError

    a_file = tmp_path / "x"
    a_file.write_text("")
    with pytest.raises(RlsimError) as info:
        result.write(a_file)
    assert info.value.field == "out_dir"


@pytest.mark.parametrize("kind", ["colocated", "disaggregated"])
def test_peak_memory_is_said_by_phase_as_plan_reports_the_train_phase(kind):
    """The run's one peak mixed the engine's reservation into what plan reports for a layout (the
    training phase); the phases are said apart. A split placement's rollout devices hold the engine
    alone: HBM x gpu_memory_utilization."""
    from simulator.hardware.devices import get_device
    summary = simulator.simulate(None, workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule=kind,
                                 iterations=1).summary
    phases = summary["peak_memory_by_phase"]
    assert set(phases) == {"train", "rollout"} and summary["peak_memory_bytes"] == max(phases.values())
    engine = get_device("h100").hbm_bytes * 0.6   # the preset's gpu_memory_utilization
    if kind == "disaggregated":
        assert phases["rollout"] == pytest.approx(engine)
    else:   # the training state left resident through generation comes on top
        assert phases["rollout"] > engine


def test_an_override_given_to_simulate_is_named_as_the_cli_names_a_set_item(tmp_path):
    """simulate('s.yaml', overrides=['workload.train_layout.tp=3']) blamed s.yaml, where the CLI names
    the --set item; a sweep row named the file for a --grid value (a notebook trial)."""
    from simulator.errors import RlsimError
    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: dgx-h100\nworkload: grpo-qwen2.5-7b\niterations: 1\n")
    with pytest.raises(RlsimError) as caught:
        simulator.simulate(str(scenario), overrides=["workload.train_layout.tp=3"])
    assert caught.value.source == f"--set workload.train_layout.tp=3 (over {scenario})"
    from simulator.sweep import BaseScenario, simulate_point
    with pytest.raises(RlsimError) as caught:
        simulate_point(BaseScenario(str(scenario)), {"workload.train_layout.tp": 3})
    assert caught.value.source.startswith("--grid workload.train_layout.tp=3 (over ")


def test_split_pools_on_a_mixed_cluster_say_which_kind_each_holds():
    """Pools take ranks in order, so the order of the groups decided which kind generated (1.74x
    apart on H100 + H20), unsaid (a topology trial)."""
    result = simulator.simulate({"topology": "hetero-a100-h100", "schedule": "disaggregated", "iterations": 1,
                       "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "mini_batch_prompts": 16}})
    assert any(note.startswith("split pools on a mixed cluster take the ranks in order: rollout on 8 a100-80gb; "
                               "train on 8 h100") for note in result.summary["notes"])
    colocated = simulator.simulate({"topology": "hetero-a100-h100", "schedule": "colocated", "iterations": 1,
                                    "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16,
                                                 "mini_batch_prompts": 16}})
    assert any(note.startswith("the trainer spans a100-80gb and h100 and runs an even split at the pace of its "
                               "slowest kind") for note in colocated.summary["notes"])
    alike = simulator.simulate({"topology": "dgx-h100", "schedule": "disaggregated", "iterations": 1,
                      "workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "mini_batch_prompts": 16}})
    assert not any("mixed cluster" in note for note in alike.summary["notes"])


def test_a_rollout_instance_spanning_kinds_is_said(tmp_path):
    """A TP-2 engine over an H100 and an H20 runs at the slower kind's rates, unsaid (an audit)."""
    path = tmp_path / "h100-h20.yaml"
    path.write_text("name: h100-h20\ndevices_per_node: 1\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  h100: {device: h100, nodes: 1}\n  h20: {device: h20, nodes: 1}\n")
    # no KL reference: one TP2 replica on these 2 devices cannot hold the actor's update beside its weights
    workload = {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 16, "mini_batch_prompts": 16, "reference": False}
    notes = simulator.simulate({"topology": str(path), "schedule": "colocated", "iterations": 1,
                                "workload": {**workload, "rollout_layout": {"tp": 2}}}).summary["notes"]
    assert any(note.startswith("1 of 1 rollout instances (2 devices each) span h100 and h20: each runs at the "
                               "slowest of its kinds") for note in notes)
    apart = simulator.simulate({"topology": str(path), "schedule": "colocated", "iterations": 1,
                                "workload": {**workload, "rollout_layout": {"tp": 1}}}).summary["notes"]
    assert not any("rollout instances" in note for note in apart)


def test_numpy_numbers_in_a_scenario_mapping_run_as_the_python_numbers(result):
    """A notebook's values come from numpy (np.arange, a DataFrame column): topology.nodes as
    np.int64(1) was refused as "expected a whole number >= 1, got np.int64(1)", and a numpy float
    stayed a numpy float in result.scenario (the summary's scenario, its fingerprint)."""
    import numpy as np
    given = {**SMALL, "topology": {"preset": "dgx-h100", "nodes": np.int64(1), "scaleup": {"efficiency": np.float64(0.9)}},
             "iterations": np.int64(2)}
    ran = simulator.simulate(schedule="colocated", **given)
    plain = simulator.simulate(schedule="colocated", **{**SMALL, "topology": {"preset": "dgx-h100", "nodes": 1,
                                                                              "scaleup": {"efficiency": 0.9}}})
    assert ran.summary == plain.summary
    assert type(ran.scenario.topology["nodes"]) is int
    assert type(ran.scenario.topology["scaleup"]["efficiency"]) is float


def test_numpy_whole_numbers_are_whole_numbers_for_the_api_arguments():
    """plan_seed=np.int64(0) was refused as "must be a whole number >= 0" (a bool still is)."""
    import numpy as np
    ran = simulator.simulate(schedule="colocated", plan_seed=np.int64(0), costs=FakeCosts(), **SMALL)
    assert ran.summary == simulator.simulate(schedule="colocated", plan_seed=0, costs=FakeCosts(), **SMALL).summary
    with pytest.raises(simulator.RlsimError, match="plan_seed"):
        simulator.simulate(schedule="colocated", plan_seed=np.True_, costs=FakeCosts(), **SMALL)
