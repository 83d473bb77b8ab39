"""Speculative decoding (workload.inference.speculative_*) in runs: the rollout engine drafts, served
models do not, and a missing acceptance rate is named by its key."""
import pytest

import simulator
from simulator.errors import RlsimError
from tests.rl.test_distillation import SMALL, TEACHER  # the small run and its teacher, as there

EAGLE = ["workload.inference.speculative_method=eagle", "workload.inference.num_speculative_tokens=3"]


def _run(*overrides: str) -> dict:
    return simulator.simulate(schedule="colocated", keep_samples=False,
                              **{**SMALL, "overrides": SMALL["overrides"] + list(overrides)}).summary


def test_accepted_drafts_shorten_generation_and_rejected_ones_lengthen_it():
    plain = _run()["stage_time_s"]["generate"]
    assert _run(*EAGLE, "workload.inference.speculative_acceptance_rate=0.8")["stage_time_s"]["generate"] < plain
    assert _run(*EAGLE, "workload.inference.speculative_acceptance_rate=0.0")["stage_time_s"]["generate"] > plain


def test_the_acceptance_rate_is_asked_for_by_its_key():
    with pytest.raises(RlsimError) as err:
        _run(*EAGLE)
    assert err.value.field == "workload.inference.speculative_acceptance_rate"


def test_a_teacher_inherits_no_speculation_and_refuses_it():
    plain = _run(*TEACHER)["teacher_pool"]["busy_s"]
    drafted = _run(*TEACHER, *EAGLE, "workload.inference.speculative_acceptance_rate=0.7")["teacher_pool"]["busy_s"]
    assert drafted == pytest.approx(plain, rel=1e-12)
    with pytest.raises(RlsimError) as err:
        _run(*TEACHER, "workload.distillation.inference.num_speculative_tokens=2")
    assert err.value.field == "workload.distillation.inference.num_speculative_tokens"


def test_sglang_runs_its_drafts_without_the_overlap_scheduler():
    run = simulator.simulate(schedule="colocated", keep_samples=False,
                             **{**SMALL, "overrides": SMALL["overrides"] + [
                                 "workload.engine=sglang-0.5.6", *EAGLE,
                                 "workload.inference.speculative_acceptance_rate=0.7"]})
    assert any("async_scheduling false" in note and "speculative" in note for note in run.summary["notes"])
