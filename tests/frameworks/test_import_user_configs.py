"""Framework configs as their users write them (example scripts' overrides, Hydra forms), through the
importers: a key that changes the step time is mapped to the field it changes, never listed as ignored."""
from __future__ import annotations

from pathlib import Path

from simulator.frameworks import import_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "workloads" / "frameworks"
VERL = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
ROLLOUT = "actor_rollout_ref.rollout"


def test_verl_rollout_response_length_given_apart_from_the_data_cap_is_the_generation_cap():
    """verl 0.6's rollout.yaml sets response_length: ${oc.select:data.max_response_length,512} and its
    engines generate up to it (vllm_rollout_spmd.py / vllm_async_server.py max_tokens=config.response_length;
    responses padded to it): given apart from data.max_response_length (1024 in the example) it is the cap."""
    longer = import_config("verl", VERL, [f"{ROLLOUT}.response_length=2048"])
    assert longer.scenario["workload"]["response_length"]["max"] == 2048
    assert longer.report()["mapped"][f"{ROLLOUT}.response_length"].startswith("workload.response_length.max")
    # at the data cap (verl's interpolation, or the same value given twice) it changes nothing: ignored
    same = import_config("verl", VERL, [f"{ROLLOUT}.response_length=1024"])
    assert same.scenario["workload"]["response_length"]["max"] == 1024
    assert f"{ROLLOUT}.response_length" in same.report()["ignored"]
    assert import_config("verl", VERL, []).scenario["workload"]["response_length"]["max"] == 1024
