"""Megatron-Core's flex token dispatcher on DeepEP (train_params.comm.moe_token_dispatcher: flex): the
distinct ranks and nodes a token reaches (llm/deepep.py) against closed forms and a Monte Carlo of the
routing, and the exchange it prices (llm/training.py _flex_exchange_s) against the all-to-all one's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model, spec_from_config
from simulator.llm.deepep import miss_probability, reach
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import layer_times
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import (
    TrainParams,
    _Comm,
    _groups,
    _layer_cost,
    rates_for,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams, ComputeParams
from simulator.scenario import load_scenario
from tests.llm.test_moe_token_dispatcher import _LinearNet as LinearNet
from tests.llm.test_moe_token_dispatcher import _one

QWEN_MOE = load_model("qwen3-30b-a3b")   # hidden 2048, top-8 of 128 experts, no routing groups
DEEPSEEK = load_model("deepseek-v3")      # hidden 7168, top-8 of 256 experts in the top 4 of 8 groups
TOKENS = 4096.0
FIELD = "workload.train_params.comm.moe_token_dispatcher"


def _monte_carlo(ep_of_rank, node_of_rank, experts, k, ep, groups=1, per_token=0, samples=40_000, seed=7):
    """Mean distinct ranks and nodes over sampled tokens: G groups drawn uniformly, then k distinct experts
    uniformly among theirs (numpy's Generator, a fixed seed)."""
    rng = np.random.default_rng(seed)
    per_group, picked = experts // groups, per_token or groups
    rank_of_ep = np.asarray(ep_of_rank)
    node = np.asarray(node_of_rank)
    ranks = nodes = 0.0
    for _ in range(samples):
        chosen = rng.choice(groups, picked, replace=False)
        pool = (chosen[:, None] * per_group + np.arange(per_group)).ravel()
        owners = set((rng.choice(pool, k, replace=False) // (experts // ep)).tolist())
        hit = np.isin(rank_of_ep, list(owners))
        ranks += hit.sum()
        nodes += len(set(node[hit].tolist()))
    return ranks / samples, nodes / samples


@pytest.mark.parametrize("experts, k, ep, etp, per_node, groups, per_token", [
    (256, 8, 64, 1, 8, 8, 4),     # DeepSeek-V3 on EP 64: a group a node, at most 4 nodes a token
    (256, 8, 32, 1, 8, 8, 4),     # two groups a node
    (128, 8, 16, 1, 8, 1, 0),     # Qwen3-30B-A3B on two nodes, no groups
    (128, 8, 8, 2, 8, 1, 0),      # expert TP 2: each EP rank's experts on two ranks
])
def test_distinct_ranks_and_nodes_match_a_monte_carlo_of_the_routing(experts, k, ep, etp, per_node, groups,
                                                                      per_token) -> None:
    ep_of_rank = [i // etp for i in range(ep * etp)]
    node_of_rank = [i // per_node for i in range(ep * etp)]
    exact = reach(ep_of_rank, node_of_rank, experts, k, ep, groups, per_token)
    sampled = _monte_carlo(ep_of_rank, node_of_rank, experts, k, ep, groups, per_token)
    # 40,000 tokens: the standard error of either mean is below 0.01 (each count's spread is below 2)
    assert exact[0] == pytest.approx(sampled[0], abs=0.04)
    assert exact[1] == pytest.approx(sampled[1], abs=0.04)


def test_closed_forms_without_and_with_node_limited_routing() -> None:
    """No groups: each of N nodes (E / N experts) is missed with C(E - E/N, k) / C(E, k). DeepSeek-V3 on
    8 nodes (a group a node): a node is reached when its group is among the 4 picked (1/2) and one of
    the k experts drawn from those 4 x 32 is its, so 4 (1 - C(96, 8) / C(128, 8)) <= 4 nodes."""
    _, nodes = reach(list(range(32)), [i // 8 for i in range(32)], 256, 8, 32)
    assert nodes == pytest.approx(4 * (1 - math.comb(192, 8) / math.comb(256, 8)), rel=1e-12)
    ranks, nodes = reach(list(range(64)), [i // 8 for i in range(64)], 256, 8, 64, 8, 4)
    assert nodes == pytest.approx(4 * (1 - math.comb(96, 8) / math.comb(128, 8)), rel=1e-12) and nodes < 4
    assert ranks == pytest.approx(64 * 0.5 * (1 - math.comb(124, 8) / math.comb(128, 8)), rel=1e-12)
    assert miss_probability((4,) + (0,) * 7, 256, 8, 4) == pytest.approx(
        0.5 + 0.5 * math.comb(124, 8) / math.comb(128, 8), rel=1e-12)


class _LinearNet(LinearNet):
    """Every collective costs LATENCY + bytes / RATE whatever its group (test_moe_token_dispatcher's
    network), on a real topology's domains."""

    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.topology = load_topology({"preset": "dgx-h100", "nodes": nodes})


def _layer(model, layout: TrainLayout, n_devices: int, dispatcher: str, net, imbalance: float = 1.0,
           ranks: tuple[int, ...] | None = None):
    """(layer cost, collective calls) of ``model``'s first MoE layer under ``layout`` on ``net`` (on
    ``ranks``, else the first n_devices)."""
    lay = layout.resolve(n_devices)
    layer = next(s for s in layer_shapes(model) if s.moe)
    t = np.array([TOKENS])
    params = TrainParams(comm=CommParams(moe_token_dispatcher=dispatcher),
                         compute=ComputeParams(moe_load_imbalance=imbalance))
    times = layer_times(layer, model.hidden, model.ffn_hidden, True, t, t ** 2, tp=lay.tp, sp=lay.sp, ep=lay.ep,
                        etp=lay.expert_tp, rates=rates_for(load_topology("dgx-h100").device_spec(0), params),
                        params=params.compute)
    calls_before = len(getattr(net, "calls", []))
    cost = _layer_cost(layer, times, model, lay, t, _groups(lay, ranks or tuple(range(n_devices))), 0, _Comm(net), params)
    return cost, getattr(net, "calls", [])[calls_before:]


def test_ep_inside_one_node_is_the_intra_node_exchange_of_the_distinct_ranks() -> None:
    """EP 8 on one node: no RDMA, each token sent once to each rank holding one of its experts: the
    all-to-all of T x E[distinct ranks] x h x 2 bytes, dispatch and combine, where the alltoall
    dispatcher sends the k copies."""
    net = _LinearNet(1)
    cost, calls = _layer(QWEN_MOE, TrainLayout(tp=1, ep=8, zero=1), 8, "flex", net)
    ranks, nodes = reach(list(range(8)), [0] * 8, 128, 8, 8)
    assert nodes == 1.0 and 4 < ranks < 8
    sent = TOKENS * ranks * QWEN_MOE.hidden * 2.0
    assert cost.fwd_comm["ep"][0] == pytest.approx(2 * _one(sent), rel=1e-12)
    assert cost.bwd_comm["ep"][0] == pytest.approx(2 * _one(sent), rel=1e-12)
    assert [c for c in calls if c[0] == "all_to_all"] == [("all_to_all", tuple(range(8)), sent)]
    alltoall, _ = _layer(QWEN_MOE, TrainLayout(tp=1, ep=8, zero=1), 8, "alltoall", _LinearNet(1))
    assert alltoall.fwd_comm["ep"][0] == pytest.approx(2 * _one(TOKENS * 8 * QWEN_MOE.hidden * 2.0), rel=1e-12)


def test_across_nodes_rdma_carries_the_distinct_nodes_not_the_k_copies() -> None:
    """EP 16 on two nodes: each rail (ranks i and i + 8) all-to-alls T x E[distinct nodes] x h x 2 bytes,
    each node T x E[distinct ranks]: the rail's bytes are k / E[distinct nodes] fewer than the alltoall
    dispatcher's k copies; on a network where every collective costs alike, the slower is the NVLink one."""
    net = _LinearNet(2)
    cost, calls = _layer(QWEN_MOE, TrainLayout(tp=1, ep=16, zero=1), 16, "flex", net)
    ranks, nodes = reach(list(range(16)), [i // 8 for i in range(16)], 128, 8, 16)
    rail_bytes, node_bytes = TOKENS * nodes * QWEN_MOE.hidden * 2.0, TOKENS * ranks * QWEN_MOE.hidden * 2.0
    rails = {c[1] for c in calls if c[2] == rail_bytes}
    assert rails == {(i, i + 8) for i in range(8)}
    assert {c[1] for c in calls if c[2] == node_bytes} == {tuple(range(8)), tuple(range(8, 16))}
    copies = TOKENS * QWEN_MOE.experts_per_token * QWEN_MOE.hidden * 2.0
    assert copies / rail_bytes == pytest.approx(QWEN_MOE.experts_per_token / nodes, rel=1e-12)
    assert cost.fwd_comm["ep"][0] == pytest.approx(2 * max(_one(rail_bytes), _one(node_bytes)), rel=1e-12)


def test_on_real_links_flex_is_the_slower_of_rdma_and_nvlink_and_beats_the_all_to_all() -> None:
    topo = load_topology({"preset": "dgx-h100", "nodes": 4})
    net = CollectiveModel(topo)
    cost, _ = _layer(DEEPSEEK, TrainLayout(tp=1, ep=32, zero=1), 32, "flex", net)
    ranks, nodes = reach(list(range(32)), [i // 8 for i in range(32)], 256, 8, 32, 8, 4)
    h = DEEPSEEK.hidden * 2.0
    rdma = max(net.cost("all_to_all", [i + 8 * n for n in range(4)], TOKENS * nodes * h).time_s for i in range(8))
    nvl = max(net.cost("all_to_all", list(range(8 * n, 8 * n + 8)), TOKENS * ranks * h).time_s for n in range(4))
    assert cost.fwd_comm["ep"][0] == pytest.approx(2 * max(rdma, nvl), rel=1e-9)
    assert rdma > nvl   # 400 Gb/s NICs against NVLink: the RDMA side paces it
    alltoall, _ = _layer(DEEPSEEK, TrainLayout(tp=1, ep=32, zero=1), 32, "alltoall", net)
    assert cost.fwd_comm["ep"][0] < alltoall.fwd_comm["ep"][0] / 2


def test_the_busiest_rank_scales_the_flex_bytes_as_the_alltoall_ones() -> None:
    """compute.moe_load_imbalance (the busiest EP rank's rows over the mean) multiplies the rows sent."""
    ranks, _ = reach(list(range(8)), [0] * 8, 128, 8, 8)
    cost, _ = _layer(QWEN_MOE, TrainLayout(tp=1, ep=8, zero=1), 8, "flex", _LinearNet(1), imbalance=1.5)
    assert cost.fwd_comm["ep"][0] == pytest.approx(2 * _one(1.5 * TOKENS * ranks * QWEN_MOE.hidden * 2.0), rel=1e-12)


def test_expert_tp_ranks_are_reached_in_the_group_and_no_expert_tp_gather_is_added() -> None:
    """tp 2, ep 4, etp 2 on 8 ranks: the flex group is expert-TP x EP (8 ranks), each EP index's experts
    on two ranks (Megatron's routing map expanded over tp_size); the routed copies are not gathered over
    expert TP after it, so TP time is attention's alone (the activation A all-gathered and
    reduce-scattered twice: SP)."""
    cost, calls = _layer(QWEN_MOE, TrainLayout(tp=2, ep=4, etp=2, zero=1), 8, "flex", _LinearNet(1))
    ranks, _ = reach([i // 2 for i in range(8)], [0] * 8, 128, 8, 4)
    sent = TOKENS / 2 * ranks * QWEN_MOE.hidden * 2.0
    assert cost.fwd_comm["ep"][0] == pytest.approx(2 * _one(sent), rel=1e-12)
    a = TOKENS * QWEN_MOE.hidden * 2.0
    assert cost.fwd_comm["tp"][0] == pytest.approx(2 * _one(a), rel=1e-12)


def test_a_group_over_unequal_nodes_is_refused_naming_the_field() -> None:
    """EP 4 on devices 5-8 of 8-GPU nodes: 3 ranks in one, 1 in the next; DeepEP pairs the GPU indices of
    equal nodes."""
    with pytest.raises(RlsimError) as exc:
        _layer(QWEN_MOE, TrainLayout(tp=1, ep=4, zero=1), 4, "flex", _LinearNet(2), ranks=(5, 6, 7, 8))
    assert exc.value.field == FIELD and "3, 1" in str(exc.value) and "alltoall" in exc.value.fix


def test_a_step_under_flex_changes_the_exchange_alone() -> None:
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    seqs = uniform_sequences(32, 2048)
    lay = TrainLayout(tp=1, ep=16, recompute="full", zero=1)
    costs = {d: train_step_cost(QWEN_MOE, lay, topo, sequences=seqs, packing="packed",
                                params=TrainParams(comm=CommParams(moe_token_dispatcher=d)))
             for d in ("alltoall", "flex")}
    assert 0 < costs["flex"].comm_exposed_s["ep"] < costs["alltoall"].comm_exposed_s["ep"]
    assert costs["flex"].step_time_s < costs["alltoall"].step_time_s


def _load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated",
                         overrides=["topology.preset=dgx-h100", "topology.nodes=1", *overrides])


def test_flex_loads_with_ep_and_is_refused_where_megatron_asserts_tp_x_ep_above_one() -> None:
    """megatron-core 0.13.0 MoEFlexTokenDispatcher: assert tp_size * ep_size > 1 (expert TP x EP)."""
    _load("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", f"{FIELD}=flex")
    with pytest.raises(RlsimError) as exc:
        _load("workload.model=qwen3-30b-a3b", "workload.train_layout.tp=1", f"{FIELD}=flex")
    assert exc.value.field == FIELD and "ep above 1" in exc.value.fix


def test_group_limited_routing_is_read_from_config_json() -> None:
    """deepseek_v3 (noaux_tc) and deepseek_v2's group_limited_greedy read n_group / topk_group; V2's greedy
    router (V2-Lite) leaves them unread; groups that do not split the experts are refused at n_group."""
    assert (DEEPSEEK.expert_groups, DEEPSEEK.expert_groups_per_token) == (8, 4)
    assert (QWEN_MOE.expert_groups, QWEN_MOE.expert_groups_per_token) == (1, 0)
    base = {"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
            "vocab_size": 1000, "intermediate_size": 4096, "moe_intermediate_size": 512, "n_routed_experts": 64,
            "num_experts_per_tok": 6, "n_group": 8, "topk_group": 3}
    limited = spec_from_config({**base, "topk_method": "group_limited_greedy"}, "v2", "v2")
    assert (limited.expert_groups, limited.expert_groups_per_token) == (8, 3)
    greedy = spec_from_config({**base, "topk_method": "greedy"}, "v2-lite", "v2-lite")
    assert (greedy.expert_groups, greedy.expert_groups_per_token) == (1, 0)
    with pytest.raises(RlsimError) as exc:
        spec_from_config({**base, "topk_method": "group_limited_greedy", "n_group": 5}, "bad", "bad")
    assert exc.value.field == "n_group"
