"""schedule.reference_swap_own_copies: the copies of a reference swap that move the reference's own
weights, at a frozen model's bytes (no master copy), beside the trainer's resident shard."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.hardware.topology import load_topology
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

SKYRL = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh"
FP32_SHARD = ["workload.train_params.memory.resident_weight_bytes_per_param=4",   # FSDP's fp32 master shard
              "workload.train_layout.zero=3", "workload.reference=true"]


def _costs(*overrides: str) -> LlmCosts:
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                       schedule="colocated", overrides=[*FP32_SHARD, *overrides])
    return LlmCosts(sc, load_topology(sc.topology))


def test_the_references_copies_move_its_bf16_shard_and_the_others_the_fp32_one():
    """Closed form: 4 copies, 2 of them the reference's: (2 x 4 + 2 x 2) bytes x N / dp over the link,
    where all 4 at the trainer's shard were 4 x 4 x N / dp."""
    c = _costs("schedule.reference_swap_copies=4", "schedule.reference_swap_own_copies=2")
    pool = c.pool(range(8))
    trainer, reference = c._train_weight_bytes(pool), c.reference_swap_shard_bytes(pool)
    assert trainer == pytest.approx(2 * reference, rel=1e-12)           # fp32 shard against the frozen bf16 one
    rate = pool.kinds[0].host_link_bw_Bps * 0.85                         # switch.host_link_efficiency
    assert c.reference_swap_s(pool) == pytest.approx((2 * trainer + 2 * reference) / rate, rel=1e-12)
    every = _costs("schedule.reference_swap_copies=4")                   # NeMo RL's: all the trainer's
    assert every.reference_swap_s(every.pool(range(8))) == pytest.approx(4 * trainer / rate, rel=1e-12)
    lens = np.full(64, 1024)
    forward = c.forward("reference", lens, range(8)).time_s - _costs().forward("reference", lens, range(8)).time_s
    assert forward == pytest.approx((2 * trainer + 2 * reference) / rate, rel=1e-9)


def test_a_pageable_swap_moves_the_references_copies_in_and_out():
    """Through pageable memory: the trainer's first copy out, its other in; the reference's one in, one out."""
    c = _costs("schedule.reference_swap_copies=4", "schedule.reference_swap_own_copies=2",
               "schedule.host_copies={reference_swap: true, offload_Bps: 2 GB/s, onload_Bps: 5 GB/s}")
    pool = c.pool(range(8))
    trainer, reference = c._train_weight_bytes(pool), c.reference_swap_shard_bytes(pool)
    assert c.reference_swap_s(pool) == pytest.approx((trainer + reference) / 2e9 + (trainer + reference) / 5e9,
                                                     rel=1e-12)
    own = _costs("schedule.reference_swap_copies=2", "schedule.reference_swap_own_copies=2",
                 "schedule.host_copies={reference_swap: true, offload_Bps: 2 GB/s, onload_Bps: 5 GB/s}")
    assert own.reference_swap_s(own.pool(range(8))) == pytest.approx(reference / 2e9 + reference / 5e9, rel=1e-12)


def test_own_copies_are_some_of_the_swaps():
    with pytest.raises(RlsimError, match="reference_swap_own_copies counts") as info:
        _costs("schedule.reference_swap_copies=2", "schedule.reference_swap_own_copies=3")
    assert info.value.field == "schedule.reference_swap_own_copies"


def test_skyrl_swaps_its_bf16_reference_beside_the_fp32_policy():
    """colocate_all: the reference's own shard in and out (the policy's goes through the switch's
    offload_weights at its fp32 shard); split pools with colocate_policy_ref: the policy's fp32 shard
    out and back and the reference's in and out."""
    colocated = import_config("skyrl", SKYRL).scenario["schedule"]
    assert colocated["reference_swap_copies"] == colocated["reference_swap_own_copies"] == 2
    split = import_config("skyrl", SKYRL, ["trainer.placement.colocate_all=false",
                                           "generator.inference_engine.num_engines=4",
                                           "trainer.placement.policy_num_gpus_per_node=4",
                                           "trainer.placement.ref_num_gpus_per_node=4"]).scenario["schedule"]
    assert split["reference_swap_copies"] == 4 and split["reference_swap_own_copies"] == 2
    sc = load_scenario(import_config("skyrl", SKYRL).scenario)
    c = LlmCosts(sc, load_topology(sc.topology))
    pool = c.pool(range(8))
    assert c._train_weight_bytes(pool) == pytest.approx(2 * c.reference_swap_shard_bytes(pool), rel=1e-12)
