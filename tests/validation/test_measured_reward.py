"""The rule reward's defaults are the fits of what benchmarks/reward_cost.py measured
(benchmarks/measured/cpu-vm-2026-12-04, README there), recomputed here from the raw per-sample times."""
import re
from pathlib import Path

import pytest

from simulator import params
from simulator.scenario import RewardSpec
from tests.bench_scripts import load

RAW = Path(__file__).resolve().parents[2] / "benchmarks" / "measured" / "cpu-vm-2026-12-04" / "reward_cost.txt"


def _raw_times() -> dict[tuple[str, str], list[float]]:
    rows = re.findall(r"^(\S+)\s+(finished|capped)\s+ms/sample ([\d. ]+?)\s+fit", RAW.read_text(), re.M)
    return {(name, kind): [float(ms) * 1e-3 for ms in times.split()] for name, kind, times in rows}


@pytest.mark.parametrize(("scorer", "prefix"), [("math-verify", "MATH_VERIFY"), ("verl-naive", "VERL_NAIVE")])
def test_the_reward_defaults_are_the_measured_fits(scorer, prefix):
    script = load("reward_cost")
    times = _raw_times()
    for kind, capped in (("finished", ""), ("capped", "CAPPED_")):
        intercept, slope = script.fit(list(script.LENGTHS), times[scorer, kind])
        # the raw file prints each time to 10 us: its fit is the script's within a few per cent
        assert getattr(params, f"{prefix}_{capped}CPU_S_PER_SAMPLE") == pytest.approx(intercept, rel=0.05)
        assert getattr(params, f"{prefix}_{capped}CPU_S_PER_TOKEN") == pytest.approx(slope, rel=0.05)


def test_rlsims_rule_reward_is_math_verify_by_default():
    reward = RewardSpec()
    assert (reward.cpu_s_per_sample, reward.cpu_s_per_token, reward.capped_cpu_s_per_sample,
            reward.capped_cpu_s_per_token) == (params.MATH_VERIFY_CPU_S_PER_SAMPLE, params.MATH_VERIFY_CPU_S_PER_TOKEN,
                                               params.MATH_VERIFY_CAPPED_CPU_S_PER_SAMPLE,
                                               params.MATH_VERIFY_CAPPED_CPU_S_PER_TOKEN)
