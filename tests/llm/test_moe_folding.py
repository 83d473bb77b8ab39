"""MoE parallel folding (etp, EP over TP x CP x DP) and uneven first / last pipeline stages."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import embedding_params, layer_shapes
from simulator.llm.memory import layout_stage_layers, memory_per_device, stage_layers
from simulator.llm.train_layout import TrainLayout, uneven_stage_counts
from simulator.llm.training import _groups, _stage_params, train_step_cost, uniform_sequences

QWEN235 = load_model("qwen3-235b-a22b")
V6_QWEN = TrainLayout(tp=2, cp=2, ep=16, pp=8, etp=1, zero=1, recompute="full", micro_batch=1,
                      pp_first_stage_layers=11, pp_last_stage_layers=11)


def test_v6_qwen3_235b_layout_folds_ep16_over_dp4() -> None:
    lay = V6_QWEN.resolve(128)
    assert lay.dp == 4
    lay.check_model(QWEN235)  # EP 16 > DP 4: folded over TP x CP x DP = 16 ranks
    assert lay.expert_dp == 1
    groups = _groups(lay, tuple(range(128)))
    assert len(groups.ep[0]) == 16
    assert groups.ep[0] == list(range(16))  # consecutive ranks of the stage's TP x CP x DP block
    assert groups.ep[3] == list(range(48, 64))
    assert len(groups.edp[0]) == 1


def test_v6_qwen3_235b_expert_memory_is_closed_form() -> None:
    lay = V6_QWEN.resolve(128)
    counts = layout_stage_layers(94, lay)
    assert [len(c) for c in counts] == [11, 12, 12, 12, 12, 12, 12, 11]
    shapes = layer_shapes(QWEN235)
    expert_layer = shapes[0].expert_params
    assert expert_layer == 128 * 3 * 4096 * 1536
    per_stage = _stage_params(QWEN235, lay)
    assert per_stage[1][1] == pytest.approx(12 * expert_layer / 16)  # E/ep experts, etp 1: whole experts
    mem = memory_per_device(QWEN235, lay, 8192, 80e9)
    dense, expert = per_stage[mem.stage]
    # ZeRO-1: weights and grads whole, optimizer states sharded: dense over dp x cp = 8, experts over edp = 1.
    assert mem.weights_bytes == pytest.approx(2.0 * (dense + expert))
    assert mem.optimizer_bytes == pytest.approx(12.0 * (dense / 8 + expert / 1))


def test_default_etp_is_tp_and_keeps_ep_on_dp_ranks() -> None:
    lay = TrainLayout(tp=2, ep=4, pp=1).resolve(16)
    assert lay.expert_tp == 2 and lay.expert_dp == 2
    g = _groups(lay, tuple(range(16)))
    assert g.ep[0] == [0, 2, 4, 6]  # ep consecutive DP ranks (stride tp), as before folding
    assert g.edp[0] == [0, 8]


def test_layout_that_cannot_fold_names_the_field() -> None:
    lay = TrainLayout(tp=2, ep=16, pp=8, etp=2).resolve(64)   # block 2 x 4 = 8, etp x ep = 32
    with pytest.raises(RlsimError) as exc:
        lay.check_model(QWEN235)
    assert "workload.train_layout.ep" in str(exc.value) and "etp" in str(exc.value)


def test_etp1_train_step_runs_with_folded_all_to_all() -> None:
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    moe = load_model("qwen3-30b-a3b")
    folded = TrainLayout(tp=2, ep=8, pp=1, etp=1, recompute="full")
    cost = train_step_cost(moe, folded, topo, sequences=uniform_sequences(64, 2048), packing="packed")
    assert cost.comm_exposed_s["ep"] > 0 and cost.step_time_s > 0 and cost.layout.dp == 4
    with pytest.raises(RlsimError):   # without folding EP 8 does not fit tp x cp x dp / etp = 8
        TrainLayout(tp=2, ep=8, pp=1).resolve(8).check_model(moe)


def test_uneven_stage_counts() -> None:
    assert uneven_stage_counts(61, 16, 3, 2) == (3,) + (4,) * 14 + (2,)   # V6 DeepSeek-V3
    assert uneven_stage_counts(61, 8, 7, 6) == (7,) + (8,) * 6 + (6,)      # V6 DAPO DeepSeek-V3
    assert uneven_stage_counts(10, 3, 2, None) == (2, 4, 4)
    with pytest.raises(RlsimError) as exc:
        uneven_stage_counts(94, 8, 10, 11)
    assert "pp_first_stage_layers" in str(exc.value)
    assert stage_layers(10, 3, 1, (2, 4, 4)) == ((0, 1), (2, 3, 4, 5), (6, 7, 8, 9))
    assert stage_layers(10, 3, 1) == ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9))  # even: ceil first (array_split)


def test_uneven_stages_move_the_embedding_stage_load() -> None:
    """First stage with fewer layers: its parameter count is its layers plus the embedding."""
    gpt = load_model("gpt-1.7b")
    lay = TrainLayout(pp=4, pp_first_stage_layers=3, pp_last_stage_layers=3).resolve(4)
    dense = [d for d, _ in _stage_params(gpt, lay)]
    per_layer = layer_shapes(gpt)[0].dense_params
    emb, _ = embedding_params(gpt)
    assert dense[0] == pytest.approx(3 * per_layer + emb)
    assert dense[1] == pytest.approx(9 * per_layer)


class _LinearNet:
    """Every collective costs 1e-5 s + bytes / 1e11 B/s, whatever its group; the calls are kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], float]] = []

    def cost(self, op, ranks, nbytes):
        self.calls.append((op, tuple(ranks), float(nbytes)))
        return type("Cost", (), {"time_s": 1e-5 + nbytes / 1e11})()


def _moe_tp_comm(model, layout: TrainLayout, n_devices: int, tokens: float = 4096.0):
    """(forward exposed TP seconds, TP-kind calls) of the model's first MoE layer under ``layout``, at the
    mean routed load (compute.moe_load_imbalance 1: test_moe_load_imbalance.py prices the busiest rank)."""
    import numpy as np

    from simulator.llm.train_compute import layer_times
    from simulator.llm.training import ComputeParams, TrainParams, _Comm, _layer_cost, rates_for

    lay = layout.resolve(n_devices)
    layer = next(s for s in layer_shapes(model) if s.moe)
    net = _LinearNet()
    t = np.array([tokens])
    params = TrainParams(compute=ComputeParams(moe_load_imbalance=1.0))
    times = layer_times(layer, model.hidden, model.ffn_hidden, True, t, t ** 2, tp=lay.tp, sp=lay.sp, ep=lay.ep,
                        etp=lay.expert_tp, rates=rates_for(load_topology("dgx-h100").device_spec(0), params),
                        params=params.compute)
    cost = _layer_cost(layer, times, model, lay, t, _groups(lay, tuple(range(n_devices))), 0, _Comm(net), params)
    calls = [c for c in net.calls if c[0] in ("all_gather", "reduce_scatter", "all_reduce")]
    return float(cost.fwd_comm["tp"][0]), calls, (1 - params.comm.tp_overlap_fraction)


def _ag_rs(nbytes: float) -> float:
    return 2 * (1e-5 + nbytes / 1e11)


@pytest.mark.parametrize("etp", [2, 1])
def test_an_moe_layers_tp_collectives_gather_the_k_routed_copies_over_the_expert_tp_group(etp) -> None:
    """Megatron-Core's all-to-all dispatcher with SP: attention's all-gather + reduce-scatter of the
    layer's activation A over TP, and the routed experts' input all-gathered (and their output
    reduce-scattered) over the expert-TP group after the EP all-to-all: each rank's T / tp tokens x k
    routed copies, etp of them, k x A x etp / tp bytes (megatron-core 0.8.0 token_dispatcher.py
    all_gather_last_dim_from_tensor_parallel_region; with etp 1 none: the experts are whole)."""
    model = load_model("qwen3-30b-a3b")   # k 8, no shared experts
    tokens, k = 4096.0, 8
    a = tokens * model.hidden * 2.0
    fwd, calls, hidden = _moe_tp_comm(model, TrainLayout(tp=2, ep=2, etp=etp, zero=1), 4 if etp == 2 else 2)
    routed = _ag_rs(k * a * etp / 2) if etp > 1 else 0.0
    assert fwd == pytest.approx((_ag_rs(a) + routed) * hidden, rel=1e-12)
    assert sorted(c[2] for c in calls) == sorted([a, a] + ([k * a, k * a] if etp > 1 else []))


def test_shared_experts_keep_their_own_tp_block() -> None:
    """DeepSeek-V3's shared expert is a TP-split MLP beside the routed experts (its input gathered,
    its output reduce-scattered over TP): with etp 1 the layer has two TP blocks, attention and it."""
    model = load_model("deepseek-v3")
    a = 4096.0 * model.hidden * 2.0
    fwd, _, hidden = _moe_tp_comm(model, TrainLayout(tp=2, ep=2, etp=1, zero=1), 2)
    assert fwd == pytest.approx(2 * _ag_rs(a) * hidden, rel=1e-12)


def test_expert_tp_over_data_parallel_ranks_gathers_their_rows() -> None:
    """tp 1, etp 2: the expert-TP group is two ranks of different replicas, each with its own T tokens;
    the routed rows are gathered and the output reduce-scattered over it (2 k A each), and the layer has
    no other TP collective (no SP, no TP group)."""
    model = load_model("qwen3-30b-a3b")
    a = 4096.0 * model.hidden * 2.0
    fwd, calls, hidden = _moe_tp_comm(model, TrainLayout(tp=1, ep=2, etp=2, zero=1), 4)
    assert fwd == pytest.approx(_ag_rs(8 * a * 2) * hidden, rel=1e-12)
    assert sorted((c[0], c[1]) for c in calls) == [("all_gather", (0, 1)), ("reduce_scatter", (0, 1))]
