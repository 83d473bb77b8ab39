"""workload.distillation in runs on the cost models: the teacher's pool set apart from the job's
devices, its engines priced on their own model and layout, and bad input named by its field."""
import pytest

import simulator
from simulator.errors import RlsimError

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, iterations=2,
             overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                        "workload.mini_batch_prompts=16", "workload.train_layout.tp=2"])
TEACHER = ["workload.distillation.teacher=qwen2.5-32b", "workload.distillation.devices=8",
           "workload.distillation.layout.tp=4"]


def _run(*overrides: str, schedule: str = "colocated", nodes: int = 2) -> dict:
    small = {**SMALL, "topology": {"preset": "dgx-h100", "nodes": nodes},
             "overrides": SMALL["overrides"] + list(overrides)}
    return simulator.simulate(schedule=schedule, keep_samples=False, **small).summary


def test_the_teacher_runs_on_its_own_devices_and_the_step_waits_for_it():
    plain = _run(nodes=1)
    distilled = _run(*TEACHER)
    pool = distilled["teacher_pool"]
    assert (pool["devices"], pool["engines"]) == (8, 2)
    assert distilled["pools"]["teacher"] == 8 and distilled["pools"]["actor"] == 8
    assert 0 < pool["busy_s"] <= distilled["makespan_s"]
    assert distilled["steady_step_time_s"] > plain["steady_step_time_s"]
    assert distilled["stage_time_s"]["teacher"] > 0
    # a teacher twice as fast to reach (twice the engines) shortens the wait
    faster = _run(*TEACHER[:1], "workload.distillation.devices=16", "workload.distillation.layout.tp=4", nodes=3)
    assert faster["steady_step_time_s"] < distilled["steady_step_time_s"]


def test_a_split_pool_schedule_overlaps_the_teacher_with_generation():
    summary = _run(*TEACHER, schedule="one-step-off")
    assert summary["teacher_pool"]["busy_s"] > 0 and summary["iterations"] == 2


@pytest.mark.parametrize(("override", "field"), [
    ("workload.distillation.layout.tp=3", "workload.distillation.layout.tp"),
    ("workload.distillation.teacher=no-such-model", "workload.distillation.teacher"),
    ("workload.distillation.layout.instances=2", "workload.distillation.layout"),
])
def test_bad_teacher_input_names_its_field(override, field):
    with pytest.raises(RlsimError) as err:
        _run(*TEACHER, override)
    assert (err.value.field or "").startswith(field)


def test_failures_are_refused_beside_a_teacher_pool():
    with pytest.raises(RlsimError, match="not re-planned") as err:
        _run(*TEACHER, "schedule.failures=[{at_s: 150, fail: 'node:1'}]")
    assert err.value.field == "schedule.failures"


@pytest.mark.parametrize("handover", ["sample", "step"])
@pytest.mark.parametrize("schedule", ["colocated", "one-step-off", "verl-fully-async"])
def test_the_critical_path_is_the_same_walked_online_or_after_the_run(schedule, handover):
    """The teacher pool's rows, recorded at the run's end, never explain a wait: the path walked as the
    run goes (keep_samples=False) is the one walked over the whole timeline after it."""
    small = {**SMALL, "overrides": SMALL["overrides"] + TEACHER + [f"workload.distillation.handover={handover}"]}
    online = simulator.simulate(schedule=schedule, keep_samples=False, **small).summary["critical_path"]
    offline = simulator.simulate(schedule=schedule, keep_samples=True, **small).summary["critical_path"]
    assert online["steady"] == offline["steady"]
    assert online["steady"]["share"]["teacher"] > 0         # the samples' teacher latency is on the path


def test_the_console_shows_the_teacher_pool_in_run_and_compare(capsys, tmp_path):
    from simulator.cli import main
    scenario = tmp_path / "opd.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: {model: qwen2.5-7b, prompts_per_step: 16, "
                        "samples_per_prompt: 4, mini_batch_prompts: 16, train_layout: {tp: 2, recompute: full}, "
                        # (0.8: vLLM's default 0.9 leaves no room for the actor's and the reference's weights)
                        "rollout_layout: {tp: 2, gpu_memory_utilization: 0.8}, "
                        "distillation: {teacher: qwen2.5-32b, devices: 8, layout: {tp: 4}}}\n")
    assert main(["run", str(scenario), "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert "teacher pool busy (2 engines)" in out and "stage: teacher" in out
    assert main(["compare", str(scenario), "--iterations", "2", "--schedules", "colocated,one-step-off"]) == 0
    out = capsys.readouterr().out
    assert "teacher pool busy" in out and "teacher 8" in out
    plain = tmp_path / "plain.yaml"
    plain.write_text(scenario.read_text().replace(", distillation: {teacher: qwen2.5-32b, devices: 8, layout: {tp: 4}}", ""))
    assert main(["compare", str(plain), "--iterations", "1", "--schedules", "colocated"]) == 0
    assert "teacher" not in capsys.readouterr().out
