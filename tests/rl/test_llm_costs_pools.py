"""LlmCosts costs every pool on its own devices and links (issue 10, item 1)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import simulate
from simulator.hardware.topology import load_topology
from simulator.llm.inference import RolloutLayout, StepCost
from simulator.network.collectives import CollectiveModel
from simulator.planner.evaluate import RolloutEvaluator
from simulator.planner.rollout import RolloutSpace
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

SMALL = ["workload.prompts_per_step=32", "workload.mini_batch_prompts=32", "workload.samples_per_prompt=8"]


def _costs(topology, workload="grpo-qwen2.5-7b", schedule="disaggregated", overrides=()):
    sc = load_scenario(workload=workload, topology=topology, schedule=schedule, overrides=list(overrides))
    topo = load_topology(sc.topology)
    return LlmCosts(sc, topo), topo


def _lengths(n=256, seed=0):
    rng = np.random.default_rng(seed)
    prompts = rng.integers(64, 512, n)
    responses = rng.integers(64, 2048, n)
    return prompts, responses


def test_h100_training_pool_on_hetero_cluster_costs_as_h100():
    # hetero-a100-h100: ranks 0-7 A100, 8-15 H100. The H100 pool trains as on an all-H100 cluster
    # (it was costed on device 0, an A100: 2.9x slower)
    hetero, _ = _costs("hetero-a100-h100")
    h100, _ = _costs({"preset": "dgx-h100", "nodes": 2})
    a100, _ = _costs({"preset": "dgx-a100", "nodes": 2})
    p, r = _lengths()
    lens = p + r
    t_het = hetero.train("actor", lens, range(8, 16)).time_s
    t_h100 = h100.train("actor", lens, range(8, 16)).time_s
    t_a100 = a100.train("actor", lens, range(8, 16)).time_s
    assert t_het == pytest.approx(t_h100, rel=0.02)
    assert t_a100 > 2 * t_h100
    assert hetero.forward("reference", lens, range(8, 16)).time_s == pytest.approx(
        h100.forward("reference", lens, range(8, 16)).time_s, rel=0.02)
    # and the A100 ranks as A100
    assert hetero.train("actor", lens, range(0, 8)).time_s == pytest.approx(t_a100, rel=0.02)


def test_a100_rollout_pool_on_hetero_cluster_costs_as_a100():
    hetero, _ = _costs("hetero-a100-h100")
    a100, _ = _costs({"preset": "dgx-a100", "nodes": 2})
    h100, _ = _costs({"preset": "dgx-h100", "nodes": 2})
    p, r = _lengths()
    het = hetero.rollout(p, r, range(0, 1)).finish_s
    assert np.nanmax(het) == pytest.approx(np.nanmax(a100.rollout(p, r, range(0, 1)).finish_s), rel=0.02)
    fast = np.nanmax(hetero.rollout(p, r, range(8, 9)).finish_s)
    assert fast == pytest.approx(np.nanmax(h100.rollout(p, r, range(8, 9)).finish_s), rel=0.02)
    assert fast < 0.8 * np.nanmax(het)


def test_hetero_disaggregated_run_trains_at_h100_speed():
    # the reproduction of the bug: `rlsim run --topology hetero-a100-h100 --workload grpo-qwen2.5-7b
    # --schedule disaggregated`: train_actor was the all-A100 figure
    stages = {}
    for name, topo in (("hetero", "hetero-a100-h100"), ("h100", {"preset": "dgx-h100", "nodes": 2}),
                       ("a100", {"preset": "dgx-a100", "nodes": 2})):
        s = simulate(workload="grpo-qwen2.5-7b", topology=topo, schedule="disaggregated", iterations=1,
                     overrides=SMALL).summary
        assert s["pools"] == {"rollout": 8, "train": 8}
        stages[name] = s["stage_time_s"]
    assert stages["hetero"]["train_actor"] == pytest.approx(stages["h100"]["train_actor"], rel=0.02)
    assert stages["hetero"]["generate"] == pytest.approx(stages["a100"]["generate"], rel=0.02)
    assert stages["a100"]["train_actor"] > 2 * stages["h100"]["train_actor"]


def test_mixed_kind_training_pool_is_costed_by_its_slowest_device():
    hetero, _ = _costs("hetero-a100-h100", schedule="colocated")
    a100, _ = _costs({"preset": "dgx-a100", "nodes": 2}, schedule="colocated")
    lens = sum(_lengths())
    assert hetero.train("actor", lens, range(16)).time_s == pytest.approx(
        a100.train("actor", lens, range(16)).time_s, rel=0.02)


def test_rollout_comm_is_the_network_models_on_the_instance_ranks():
    # Qwen3-30B-A3B EP16 over two DGX-H100 nodes: the all-to-alls cross InfiniBand. The run used a
    # closed-form on the NVLink bandwidth (decode 11.8 ms at 1,024 sequences vs 13.8 ms on the links)
    c, topo = _costs({"preset": "dgx-h100", "nodes": 2}, workload="grpo-qwen3-30b-a3b",
                     overrides=["workload.rollout_layout.ep=16"])
    ranks = list(range(16))
    net = StepCost(c.model, topo.device_spec(0), c.rollout_layout, c.inference_params,
                   collectives=CollectiveModel(topo), ranks=ranks)
    fallback = StepCost(c.model, topo.device_spec(0), c.rollout_layout, c.inference_params)
    mine = c._step_cost_of(c.pool(range(16)))
    for n in (16, 256, 1024):
        assert mine.decode_step_s(n, n * 2048.0) == net.decode_step_s(n, n * 2048.0)
        assert mine.prefill_s(n * 512.0, n * 512.0 * 513 / 2) == net.prefill_s(n * 512.0, n * 512.0 * 513 / 2)
    assert net.decode_step_s(1024, 1024 * 2048.0) > 1.1 * fallback.decode_step_s(1024, 1024 * 2048.0)
    # the whole rollout: the engine on that step cost
    p, r = _lengths(512)
    out = c.rollout(p, r, range(16))
    from simulator.llm.inference import RolloutEngine
    engine = RolloutEngine(c.model, topo.device_spec(0), c.rollout_layout, c.inference_params, cost=net)
    engine.add_many(range(len(p)), p, r, 0.0)
    finish = np.full(len(p), np.nan)
    engine.run_into(finish)
    np.testing.assert_array_equal(out.finish_s, finish)


def test_llm_costs_agrees_with_the_planners_rollout_evaluator():
    # one layout, two instances of TP2 x EP4, one in a node, one across two: the same engine, step
    # costs and links
    c, topo = _costs({"preset": "dgx-h100", "nodes": 3}, workload="grpo-qwen3-30b-a3b",
                     overrides=["workload.rollout_layout.tp=2", "workload.rollout_layout.ep=4",
                                "workload.rollout_layout.max_num_seqs=64",
                                f"workload.rollout_layout.gpu_memory_utilization={RolloutLayout().gpu_memory_utilization}"])
    space = RolloutSpace(sequences=256, prompt_len=256, response_len=512)
    ranks = list(range(8)) + list(range(12, 20))   # the second instance spans nodes 1 and 2
    ev = RolloutEvaluator(c.model, topo, space)({"tp": 2, "ep": 4, "instances": 2, "max_num_seqs": 64}, ranks)
    out = c.rollout(np.full(256, 256), np.full(256, 512), ranks)
    assert float(np.nanmax(out.finish_s)) == pytest.approx(ev.step_time_s, rel=1e-9)
    assert len(c._step_costs) == 2     # the two instances see different links


def test_instances_of_one_shape_share_one_step_cost():
    c, _ = _costs({"preset": "dgx-h100", "nodes": 12}, schedule="colocated")
    p, r = _lengths(32)
    for i in range(96):
        c.rollout(p, r, range(i, i + 1))
    assert len(c._step_costs) == 1
    ep, _ = _costs({"preset": "dgx-h100", "nodes": 4}, workload="grpo-qwen3-30b-a3b", schedule="colocated",
                   overrides=["workload.rollout_layout.ep=16"])
    outs = [ep.rollout(p, r, range(16 * i, 16 * (i + 1))).finish_s for i in range(2)]
    np.testing.assert_array_equal(outs[0], outs[1])
    assert len(ep._step_costs) == 1


def test_pool_figures_on_a_hetero_cluster():
    hetero, topo = _costs("hetero-a100-h100")
    h100, _ = _costs({"preset": "dgx-h100", "nodes": 2})
    a100, _ = _costs({"preset": "dgx-a100", "nodes": 2})
    # MFU denominator: the mean peak per device (x devices = the cluster's peak)
    assert hetero.peak_flops == pytest.approx((h100.peak_flops + a100.peak_flops) / 2)
    # switches over each pool's own host links; the slowest kind of a mixed pool
    for phase in ("rollout", "train"):
        assert hetero.switch(phase, range(8, 16)).time_s == pytest.approx(h100.switch(phase, range(8, 16)).time_s)
        assert hetero.switch(phase, range(0, 8)).time_s == pytest.approx(a100.switch(phase, range(0, 8)).time_s)
        mixed = hetero.switch(phase, range(16)).time_s
        assert mixed == pytest.approx(a100.switch(phase, range(16)).time_s)
        assert mixed > h100.switch(phase, range(16)).time_s
    # KV capacity per pool; the cluster figure is the smaller (the same HBM here: equal)
    assert hetero.instance_kv_tokens_of(range(8, 9)) == h100.instance_kv_tokens
    assert hetero.instance_kv_tokens == min(a100.instance_kv_tokens, h100.instance_kv_tokens)


_LINE_TOPO = load_topology({"preset": "dgx-h100", "nodes": 4})


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p", "broadcast"]),
       group=st.lists(st.integers(0, 31), min_size=2, max_size=16, unique=True),
       nbytes=st.one_of(st.just(0.0), st.floats(1.0, 1e10)))
def test_collective_lines_equal_the_planned_cost(op, group, nbytes):
    # the rollout engine asks the network model for thousands of sizes: one plan per algorithm and
    # group, evaluated as a line, gives the planned cost at every size
    coll = CollectiveModel(_LINE_TOPO)
    ranks = group[:2] if op == "p2p" else group
    got = coll.line_time_s(op, ranks, nbytes)
    want = CollectiveModel(_LINE_TOPO).cost(op, ranks, nbytes).time_s
    assert got == pytest.approx(want, rel=1e-12, abs=1e-18)
