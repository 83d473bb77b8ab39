"""The lengths the planner judges layouts on are the run's: the packed row width (rl/packing.pack_width,
one named fallback for uncapped laws) and the medians of the laws the run draws from."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.autoplan import _lengths, _rollout_lengths
from simulator.hardware.topology import load_topology
from simulator.rl.llm_costs import LlmCosts
from simulator.rl.packing import UNCAPPED_PACK_TOKENS, pack_width
from simulator.scenario import load_scenario


def _scenario(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                         schedule="colocated", overrides=list(overrides))


def test_pack_width_is_the_given_width_else_the_caps_else_the_named_fallback():
    assert pack_width(3000, {"max": 512}, {"max": 2048}) == 3000
    assert pack_width(None, {"max": 512}, {"max": 2048}) == 512 + 2048
    assert pack_width(None, {"max": None}, {}) == UNCAPPED_PACK_TOKENS


@pytest.mark.parametrize(("overrides", "row"), [
    ((), 1024 + 8192),                                                       # the preset's caps
    (("workload.prompt_length.max=null", "workload.response_length.max=null"), UNCAPPED_PACK_TOKENS),
    (("workload.prompt_length.max=null", "workload.response_length.max=null", "schedule.pack_tokens=6000"), 6000),
])
def test_the_planner_packs_rows_as_wide_as_the_run(overrides, row):
    # uncapped laws: the run packed 4096-token rows and the planner judged layouts on rows of the two
    # medians (256 + 1024 = 1280 tokens for this preset)
    sc = _scenario(*overrides)
    assert LlmCosts(sc, load_topology(sc.topology)).pack_tokens == row
    assert _lengths(sc)[2] == row


def test_the_planner_takes_an_empirical_laws_median_from_its_file(tmp_path):
    # an empirical law has no `median` key: the planner judged its rollouts on 512 / 2048 tokens
    lengths = [100, 300, 700, 900, 4000]
    (tmp_path / "lengths.csv").write_text("length\n" + "\n".join(map(str, lengths)) + "\n")
    sc = _scenario(f"workload.response_length={{dist: empirical, file: {tmp_path / 'lengths.csv'}, max: 8192}}",
                   f"workload.prompt_length={{dist: empirical, file: {tmp_path / 'lengths.csv'}, max: 1024}}")
    assert _lengths(sc)[:2] == (int(np.median(lengths)), int(np.median(lengths))) == (700, 700)


def test_the_planners_own_rollout_lengths_win_in_a_plan_and_a_replan_alike():
    sc = _scenario()
    assert _rollout_lengths(sc) == {"prompt_len": 256, "response_len": 1024}   # the preset's medians
    given = _scenario("planner.rollout.prompt_len=100")
    assert _rollout_lengths(given) == {"response_len": 1024}
