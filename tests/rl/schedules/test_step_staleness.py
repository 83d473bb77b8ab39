"""The per-step staleness (iterations' staleness_mean / staleness_max) is the age each framework
measures: NeMo RL (max_trajectory_age_steps) and AReaL (its version_stats, max_head_offpolicyness)
from a trajectory's oldest token (first_version); the rlsim kinds from the weights that finished
it (version)."""
import numpy as np
import pytest

from .test_samples_in_flight import COSTS, _run

CASES = [("nemo-rl-async", {"in_flight_weight_updates": True}, "first_version"),
         ("areal", {"max_head_offpolicyness": 2}, "first_version"),
         ("async", {"staleness": 2, "partial_rollout": True, "length_budget": 300}, "version")]


@pytest.mark.parametrize("kind, options, age_from", CASES, ids=[c[0] for c in CASES])
def test_each_step_reports_the_age_its_framework_measures(kind, options, age_from):
    rec, tl, sm, s = _run(kind, options, COSTS[2], 0)   # generation-bound
    consumed = sm[sm.consumed_iteration >= 0]
    # the case resumes some trajectories over a weight update: the two measures differ on them
    assert (consumed["first_version"] < consumed["version"]).any()
    for row in rec.iterations:
        k = row["iteration"]
        age = k - consumed.loc[consumed.consumed_iteration == k, age_from].to_numpy()
        assert row["staleness_max"] == float(age.max())
        assert row["staleness_mean"] == pytest.approx(float(np.mean(age)), rel=1e-12)
    # by the finishing weights the oldest-token kinds' steps read younger than their framework logs
    younger = [row["staleness_mean"] > float(np.mean(row["iteration"] - consumed.loc[
        consumed.consumed_iteration == row["iteration"], "version"])) for row in rec.iterations]
    assert any(younger) == (age_from == "first_version")
