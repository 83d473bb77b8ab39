"""Megatron-Core's MoE token dispatcher (train_params.comm.moe_token_dispatcher): the all-to-all one's
exchange (the EP all-to-alls of the k routed copies and the expert-TP gathers) against the all-gather
one's (the tokens all-gathered over expert-TP x EP and the output reduce-scattered back), in closed form."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import memory_per_device
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
from simulator.params import CommParams, ComputeParams
from simulator.scenario import load_scenario

QWEN_MOE = load_model("qwen3-30b-a3b")   # hidden 2048, top-8 of 128 experts, no shared experts
TOKENS = 4096.0
LATENCY, RATE = 1e-5, 1e11


class _LinearNet:
    """Every collective costs LATENCY + bytes / RATE, whatever its group; the calls are kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], float]] = []

    def cost(self, op, ranks, nbytes):
        self.calls.append((op, tuple(ranks), float(nbytes)))
        return type("Cost", (), {"time_s": LATENCY + nbytes / RATE})()


def _one(nbytes: float) -> float:
    return LATENCY + nbytes / RATE


def _moe_layer(layout: TrainLayout, n_devices: int, dispatcher: str):
    """(layer cost, collective calls, groups) of qwen3-30b-a3b's first MoE layer under ``layout``."""
    lay = layout.resolve(n_devices)
    layer = next(s for s in layer_shapes(QWEN_MOE) if s.moe)
    net = _LinearNet()
    t = np.array([TOKENS])
    params = TrainParams(comm=CommParams(moe_token_dispatcher=dispatcher),   # at the mean routed load
                         compute=ComputeParams(moe_load_imbalance=1.0))   # (test_moe_load_imbalance.py: the busiest rank)
    times = layer_times(layer, QWEN_MOE.hidden, QWEN_MOE.ffn_hidden, True, t, t ** 2, tp=lay.tp, sp=lay.sp,
                        ep=lay.ep, etp=lay.expert_tp, rates=rates_for(load_topology("dgx-h100").device_spec(0),
                                                                      params), params=params.compute)
    groups = _groups(lay, tuple(range(n_devices)))
    cost = _layer_cost(layer, times, QWEN_MOE, lay, t, groups, 0, _Comm(net), params)
    return cost, net.calls, groups


@pytest.mark.parametrize("tp, ep, etp, n", [(2, 4, 2, 8), (2, 4, 1, 8), (1, 4, 1, 4), (1, 2, 2, 4)])
def test_allgather_exchange_is_the_gather_and_scatter_of_the_tokens_over_expert_tp_x_ep(tp, ep, etp, n) -> None:
    """megatron-core 0.13.0 MoEAllGatherTokenDispatcher: each rank's T / tp tokens (SP) all-gathered over
    the etp x ep ranks (etp x ep x T / tp x h x 2 bytes gathered) and the experts' output reduce-scattered
    back, forward; backward the transposes, the same; no all-to-all and no expert-TP gather of the routed
    copies: the only other TP collectives are attention's (the layer's activation A over TP, with SP)."""
    cost, calls, groups = _moe_layer(TrainLayout(tp=tp, ep=ep, etp=etp, zero=1), n, "allgather")
    gathered = TOKENS / tp * etp * ep * QWEN_MOE.hidden * 2.0
    exchange = 2 * _one(gathered)
    assert cost.fwd_comm["ep"][0] == pytest.approx(exchange, rel=1e-12)
    assert cost.bwd_comm["ep"][0] == pytest.approx(exchange, rel=1e-12)
    assert all(op != "all_to_all" for op, _, _ in calls)
    assert len(groups.tp_ep[0]) == etp * ep
    assert sorted(c for c in calls if c[1] == tuple(groups.tp_ep[0]) and c[2] == gathered) == \
        [("all_gather", tuple(groups.tp_ep[0]), gathered), ("reduce_scatter", tuple(groups.tp_ep[0]), gathered)]
    a = TOKENS * QWEN_MOE.hidden * 2.0
    assert cost.fwd_comm.get("tp", np.zeros(1))[0] == pytest.approx(2 * _one(a) if tp > 1 else 0.0, rel=1e-12)


def test_allgather_volume_does_not_grow_with_the_top_k_but_alltoall_does() -> None:
    """The all-to-all dispatcher sends the k = 8 routed copies of each token (2 all-to-alls of T / tp x k
    x h x 2 bytes, and the expert-TP gather + scatter of k x A x etp / tp), unchanged by the knob's
    arrival; the all-gather one moves etp x ep x T / tp tokens whatever k."""
    lay = TrainLayout(tp=2, ep=4, etp=2, zero=1)
    alltoall, calls, groups = _moe_layer(lay, 8, "alltoall")
    k, h = QWEN_MOE.experts_per_token, QWEN_MOE.hidden
    sent = TOKENS / 2 * k * h * 2.0
    assert alltoall.fwd_comm["ep"][0] == pytest.approx(2 * _one(sent), rel=1e-12)
    a = TOKENS * h * 2.0
    assert alltoall.fwd_comm["tp"][0] == pytest.approx(2 * _one(a) + 2 * _one(k * a * 2 / 2), rel=1e-12)
    assert ("all_to_all", tuple(groups.ep[0]), sent) in calls
    allgather, _, _ = _moe_layer(lay, 8, "allgather")
    assert allgather.fwd_comm["ep"][0] == pytest.approx(2 * _one(TOKENS / 2 * 2 * 4 * h * 2.0), rel=1e-12)


def test_the_expert_tp_x_ep_group_is_megatrons_folded_block() -> None:
    """tp 2, ep 4, etp 2 on 16 ranks: the stage's ranks read as (edp 2, ep 4, etp 2), the tp_ep group the
    first edp slice's eight, the EP group its stride-etp ranks."""
    groups = _groups(TrainLayout(tp=2, ep=4, etp=2).resolve(16), tuple(range(16)))
    assert groups.tp_ep[0] == list(range(8))
    assert groups.ep[0] == [0, 2, 4, 6]


def test_a_step_under_each_dispatcher_differs_by_the_exchange_alone() -> None:
    """A whole step on a real node: the dispatcher changes the exposed EP (and expert-TP) time, not the
    compute nor the activation memory (Megatron keeps the local experts' inputs, the same rows either
    way; the gathered tokens sit in its global buffer)."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    seqs = uniform_sequences(32, 2048)
    lay = TrainLayout(tp=2, ep=4, recompute="full", zero=1)
    costs = {d: train_step_cost(QWEN_MOE, lay, topo, sequences=seqs, packing="packed",
                                params=TrainParams(comm=CommParams(moe_token_dispatcher=d)))
             for d in ("alltoall", "allgather")}
    assert costs["alltoall"].comm_exposed_s["ep"] != costs["allgather"].comm_exposed_s["ep"] > 0
    assert costs["alltoall"].step_time_s != costs["allgather"].step_time_s
    mem = memory_per_device(QWEN_MOE, lay.resolve(8), 2048, 80e9)
    assert mem.activations_bytes > 0   # memory_per_device takes no dispatcher: the same either way


def test_megatrons_other_dispatchers_are_refused_saying_what_rlsim_prices() -> None:
    with pytest.raises(ValueError) as exc:
        CommParams(moe_token_dispatcher="alltoall_seq")
    said = str(exc.value)
    assert "price it as 'alltoall'" in said and all(f"'{d}'" in said for d in ("alltoall", "allgather", "flex"))


FIELD = "workload.train_params.comm.moe_token_dispatcher"


def _load(*overrides: str):
    return load_scenario(workload="grpo-qwen2.5-7b", schedule="colocated",
                         overrides=["topology.preset=dgx-h100", "topology.nodes=1", *overrides])


def test_an_unknown_dispatcher_is_one_error_at_the_dotted_field() -> None:
    with pytest.raises(RlsimError) as exc:
        _load("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", f"{FIELD}=bogus")
    assert exc.value.field == FIELD
    assert "alltoall" in str(exc.value) and "allgather" in str(exc.value)


def test_the_dispatcher_where_no_token_moves_is_refused() -> None:
    """Without EP or expert TP the routed tokens stay on their rank (both dispatchers move nothing)."""
    with pytest.raises(RlsimError) as exc:
        _load("workload.model=qwen3-30b-a3b", "workload.train_layout.tp=1", f"{FIELD}=allgather")
    assert exc.value.field == FIELD and "ep above 1" in exc.value.fix
    _load("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", f"{FIELD}=allgather")


MOE_PIPELINE = ("workload.model=qwen3-30b-a3b", "workload.train_layout.ep=2", "workload.train_layout.pp=2")


def test_allgather_beside_variable_length_pipeline_sends_is_refused_as_megatron_core_refuses_it() -> None:
    """megatron-core 0.10.0 transformer_config.py refuses the allgather dispatcher beside variable_seq_lengths=True
    (comm.pp_variable_seq_lengths, the default, read at pp > 1): the scenario is refused at the dispatcher, naming
    the pair and the three ways out."""
    with pytest.raises(RlsimError) as exc:
        _load(*MOE_PIPELINE, f"{FIELD}=allgather")
    err = exc.value
    assert err.field == FIELD
    assert "pp_variable_seq_lengths" in str(err) and "pp=2" in str(err) and "megatron-core 0.10.0" in str(err)
    assert f"{FIELD}: alltoall" in err.fix and "pp_variable_seq_lengths: false" in err.fix
    assert "train_layout.pp: 1" in err.fix


@pytest.mark.parametrize("way_out", [("workload.train_params.comm.pp_variable_seq_lengths=false",),
                                     ("workload.train_layout.pp=1",), (f"{FIELD}=alltoall",),
                                     ("workload.train_software=megatron-2022",)])   # no Megatron-Core check there
def test_each_way_out_of_the_dispatcher_refusal_loads(way_out: tuple[str, ...]) -> None:
    _load(*MOE_PIPELINE, f"{FIELD}=allgather", *way_out)


def test_the_stacks_that_refuse_the_pair() -> None:
    from simulator.params import TRAIN_SOFTWARE

    allgather = CommParams(moe_token_dispatcher="allgather")
    refusing = {name for name, stack in TRAIN_SOFTWARE.items() if stack.refused_dispatcher({"pp": 2}, allgather)}
    assert refusing == {"megatron-core", "megatron-core-overlap"}
    core = TRAIN_SOFTWARE["megatron-core"]
    assert core.refused_dispatcher({"pp": 1}, allgather) is None   # one stage: no p2p shape to exchange
    assert core.refused_dispatcher({"pp": 2}, CommParams(moe_token_dispatcher="allgather",
                                                         pp_variable_seq_lengths=False)) is None
    with pytest.raises(RlsimError) as exc:   # a layout the planner picked (LlmCosts checks it)
        core.check_dispatcher({"tp": 2, "pp": 4, "ep": 2}, allgather, "plan")
    assert exc.value.field == FIELD and "pp=4" in str(exc.value)


def test_a_planned_pipeline_beside_allgather_is_refused_where_the_run_takes_it() -> None:
    from simulator.rl.llm_costs import LlmCosts

    sc = _load("workload.model=qwen3-30b-a3b", "workload.train_layout=auto", "workload.rollout_layout.tp=2",
               f"{FIELD}=allgather")   # loads: the planner may pick one stage
    with pytest.raises(RlsimError) as exc:
        LlmCosts(sc, load_topology(sc.topology), auto_layouts={"train": {"tp": 2, "pp": 2, "ep": 2}})
    assert exc.value.field == FIELD and "pp=2" in str(exc.value)
    LlmCosts(sc, load_topology(sc.topology), auto_layouts={"train": {"tp": 2, "pp": 1, "ep": 2}})
