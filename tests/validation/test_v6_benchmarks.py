"""The V6 what-if scripts of benchmarks/ build scenarios rlsim still runs (benchmarks/v6_mechanisms.py
had gone stale against two later input checks and crashed, unnoticed): each switch setting of one
dense and one MoE row runs a step, and with every switch on it is the V6 case's scenario."""
import pytest

import simulator
from simulator.validation import nemo_rl
from tests.bench_scripts import load

ROWS = [r for r in nemo_rl.ROWS if (r.key, r.policy) in {("llama3.1-8b", "on-policy"), ("qwen3-30b-a3b", "1-step-off")}]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.key}-{r.policy}")
def test_every_mechanism_setting_of_v6_mechanisms_runs(row):
    bench = load("v6_mechanisms")
    assert bench.scenario_with(row, set(bench.MECHANISMS)) == nemo_rl.scenario(row)
    for name, on in bench.CONFIGS.items():
        scenario = {**bench.scenario_with(row, on), "iterations": 1}
        assert simulator.simulate(scenario).summary["iterations"] == 1, name


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.key}-{r.policy}")
def test_every_constant_v6_assumptions_swings_is_a_key_the_row_takes(row):
    bench = load("v6_assumptions")
    for label, key, low, _high in bench.CONSTANTS:
        if row.off_policy and key.startswith(("schedule.switch.", "schedule.host_copies.")):
            continue   # the script skips them there (split pools never switch: no pageable copy)
        scenario = nemo_rl.row_scenario(row, (f"{key}={low!r}", "iterations=1"))
        assert simulator.simulate(scenario).summary["iterations"] == 1, label
