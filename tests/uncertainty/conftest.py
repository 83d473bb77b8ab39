"""A FakeCosts scenario (closed-form costs, ~0.05 s a run) for the uncertainty tests."""
from __future__ import annotations

import copy

import pytest

from simulator.rl.fake_costs import FakeCosts

TOY = {"topology": "x",
       "workload": {"model": "fake", "prompts_per_step": 8, "samples_per_prompt": 4,
                    "response_length": {"dist": "lognormal", "median": 1000, "sigma": 1.0, "max": 4000}},
       "schedule": "colocated", "iterations": 2}


@pytest.fixture
def toy() -> dict:
    return copy.deepcopy(TOY)


@pytest.fixture
def costs() -> FakeCosts:
    c = FakeCosts(instance_devices=2, train_group_devices=2)
    c.n_devices = 8
    return c
