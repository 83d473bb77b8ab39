"""Megatron's small collectives between the DP gradient sync and the optimizer update: the TP all-reduce of
the sequence-parallel parameters' gradients (finalize_model_grads _allreduce_layernorm_grads) and gradient
clipping's global-norm all-reduce (clip_grads.py get_grad_norm_fp32), each exposed in the step's tail."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import with_lora
from simulator.llm.training import (
    GRAD_STAT_BYTES,
    TrainLayout,
    TrainParams,
    _Comm,
    _grad_stats_sync_s,
    _groups,
    _sp_grad_sync_s,
    sp_grad_elements,
    sp_layer_grad_elements,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams, TrainLayoutKeys, _inapplicable_gated_knob

TOPO = load_topology({"preset": "dgx-h100", "nodes": 2})
RANKS = list(range(16))
QWEN = load_model("qwen2.5-1.5b")    # RMSNorm, q/k/v biases (column-parallel: sharded), 28 layers x 1,536
SEQS = uniform_sequences(64, 2048)
ALONE = CommParams(grad_norm_all_reduce=False)   # the SP all-reduce without the grad norm's


@dataclasses.dataclass(frozen=True)
class _Cost:
    time_s: float


class LinearNetwork:
    """Every collective costs 10 us + bytes / 100 GB/s; records the all-reduces (ranks, bytes)."""

    def __init__(self) -> None:
        self.all_reduces: list[tuple[list[int], float]] = []

    def cost(self, op, ranks, nbytes):
        if op == "all_reduce":
            self.all_reduces.append((list(ranks), nbytes))
        return _Cost(1e-5 + nbytes / 1e11)


def _linear(nbytes: float) -> float:
    return 1e-5 + nbytes / 1e11


def _step(model, layout, comm: CommParams, net=None):
    return train_step_cost(model, layout, TOPO, RANKS, SEQS, params=TrainParams(comm=comm),
                           collectives=net or LinearNetwork())


# ---- the sequence-parallel parameters' gradients -----------------------------------------------------
def test_sp_all_reduce_adds_the_norms_gradients_over_the_tp_group_at_the_step_end() -> None:
    lay = TrainLayout(tp=2, pp=1, zero=1, recompute="none")
    net = CollectiveModel(TOPO)
    on = _step(QWEN, lay, ALONE, net)
    off = _step(QWEN, lay, ALONE.model_copy(update={"sp_grad_all_reduce": False}), net)
    elements = 28 * 2 * 1536 + 1536   # two RMSNorm weights a layer and the final norm
    expected = net.cost("all_reduce", [0, 1], elements * 4.0).time_s
    assert on.step_time_s - off.step_time_s == pytest.approx(expected, rel=1e-9)
    assert on.comm_exposed_s["dp"] - off.comm_exposed_s["dp"] == pytest.approx(expected, rel=1e-9)
    for kind in ("tp", "cp", "ep", "pp"):
        assert on.comm_exposed_s[kind] == off.comm_exposed_s[kind]
    assert on.optimizer_s == off.optimizer_s and on.pipeline_s == off.pipeline_s


def test_sp_all_reduce_closed_form_in_the_main_grad_dtype() -> None:
    lay = TrainLayout(tp=4, pp=1, zero=1).resolve(16)
    groups = _groups(lay, tuple(RANKS))
    for grad_bytes in (2.0, 4.0):
        net = LinearNetwork()
        params = TrainParams(comm=CommParams(grad_reduce_bytes_per_param=grad_bytes))
        (t,) = _sp_grad_sync_s(QWEN, lay, groups, _Comm(net), params)
        nbytes = (28 * 2 * 1536 + 1536) * grad_bytes
        assert t == pytest.approx(_linear(nbytes), rel=1e-12)
        assert net.all_reduces == [([0, 1, 2, 3], nbytes)]


def test_each_stage_all_reduces_its_own_layers_and_the_last_one_the_final_norm() -> None:
    lay = TrainLayout(tp=2, pp=4, zero=1).resolve(16)   # 28 layers: 7 a stage
    net = LinearNetwork()
    times = _sp_grad_sync_s(QWEN, lay, _groups(lay, tuple(RANKS)), _Comm(net), TrainParams())
    stage = 7 * 2 * 1536
    assert [sp_grad_elements(QWEN, lay, s) for s in range(4)] == [stage, stage, stage, stage + 1536]
    assert times == pytest.approx([_linear(e * 4.0) for e in (stage, stage, stage, stage + 1536)], rel=1e-12)
    assert [ranks for ranks, _ in net.all_reduces] == [[0, 1], [4, 5], [8, 9], [12, 13]]   # each stage's TP group


def test_interleaved_chunks_add_up_to_the_model() -> None:
    lay = TrainLayout(tp=2, pp=2, vpp=2, zero=1).resolve(16)
    per_layer, final = sp_layer_grad_elements(QWEN)
    assert sum(sp_grad_elements(QWEN, lay, s) for s in range(2)) == sum(per_layer) + final


@pytest.mark.parametrize(("name", "per_layer", "final"), [
    # Qwen3: q and k RMSNorms of head_dim 128
    ("qwen3-8b", 2 * 4096 + 2 * 128, 4096),
    # an MoE layer's router (hidden x experts) beside its norms and q/k norms
    ("qwen3-30b-a3b", 2 * 2048 + 2 * 128 + 2048 * 128, 2048),
    # Megatron's GPT: LayerNorm weight + bias, the attention output's and the FFN down projection's biases
    ("gpt-1.7b", 2 * 2 * 2304 + 2304 + 2304, 2 * 2304),
])
def test_the_parameters_marked_sequence_parallel(name: str, per_layer: float, final: float) -> None:
    layers, last = sp_layer_grad_elements(load_model(name))
    assert set(layers) == {per_layer} and last == final


def test_mla_latent_norms_and_moe_routers() -> None:
    model = load_model("deepseek-v3")    # q_lora_rank 1536, kv_lora_rank 512; first 3 layers dense
    layers, last = sp_layer_grad_elements(model)
    dense = 2 * 7168 + 1536 + 512
    assert layers[:3] == (dense,) * 3 and set(layers[3:]) == {dense + 7168 * 256} and last == 7168


def test_no_sp_all_reduce_without_sequence_parallelism_under_lora_or_switched_off() -> None:
    comm, params = _Comm(LinearNetwork()), TrainParams()
    for lay in (TrainLayout(tp=1, pp=2, zero=1).resolve(16), TrainLayout(tp=4, zero=1, sequence_parallel=False).resolve(16)):
        assert _sp_grad_sync_s(QWEN, lay, _groups(lay, tuple(RANKS)), comm, params) == [0.0] * lay.pp
    lay = TrainLayout(tp=4, zero=1).resolve(16)
    groups = _groups(lay, tuple(RANKS))
    adapters = with_lora(QWEN, SimpleNamespace(rank=16, targets="all-linear"))
    assert _sp_grad_sync_s(adapters, lay, groups, comm, params) == [0.0]
    off = TrainParams(comm=CommParams(sp_grad_all_reduce=False))
    assert _sp_grad_sync_s(QWEN, lay, groups, comm, off) == [0.0]
    assert _sp_grad_sync_s(QWEN, lay, groups, comm, params)[0] > 0


def test_the_switch_is_refused_off_where_the_layout_has_no_sequence_parallelism() -> None:
    given = TrainParams(comm=CommParams(sp_grad_all_reduce=False))
    found = _inapplicable_gated_knob(TrainLayoutKeys(tp=1), given, TrainParams())
    assert found is not None and found[0] == "workload.train_params.comm.sp_grad_all_reduce"
    assert "sequence parallelism" in found[1] and "tp above 1" in found[2]
    assert _inapplicable_gated_knob(TrainLayoutKeys(tp=2), given, TrainParams()) is None


# ---- gradient clipping's global norm -------------------------------------------------------------------
def test_grad_norm_all_reduce_of_one_scalar_over_every_rank_with_the_distributed_optimizer() -> None:
    lay = TrainLayout(tp=2, pp=1, zero=1, recompute="none")
    net = CollectiveModel(TOPO)
    on = _step(QWEN, lay, CommParams(), net)
    off = _step(QWEN, lay, CommParams(grad_norm_all_reduce=False), net)
    expected = net.cost("all_reduce", RANKS, GRAD_STAT_BYTES).time_s
    assert 0 < expected < 1e-3   # latency-bound: tens of microseconds over two nodes
    assert on.step_time_s - off.step_time_s == pytest.approx(expected, rel=1e-9)
    assert on.comm_exposed_s["dp"] - off.comm_exposed_s["dp"] == pytest.approx(expected, rel=1e-9)


def test_grad_stats_group_is_the_model_parallel_group_without_the_distributed_optimizer() -> None:
    sharded = TrainLayout(tp=2, pp=2, zero=1).resolve(16)
    assert _groups(sharded, tuple(RANKS)).grad_stats == RANKS
    replicated = TrainLayout(tp=2, pp=2, zero=0).resolve(16)   # dp 4: stage s starts at rank 8 s
    assert _groups(replicated, tuple(RANKS)).grad_stats == [0, 1, 8, 9]


def test_grad_norm_and_zero_count_each_one_scalar_all_reduce() -> None:
    lay = TrainLayout(tp=2, pp=1, zero=1).resolve(16)
    groups = _groups(lay, tuple(RANKS))
    for comm, count in ((CommParams(), 1), (CommParams(grad_zeros_all_reduce=True), 2),
                        (CommParams(grad_norm_all_reduce=False, grad_zeros_all_reduce=True), 1),
                        (CommParams(grad_norm_all_reduce=False), 0)):
        net = LinearNetwork()
        t = _grad_stats_sync_s(groups, _Comm(net), TrainParams(comm=comm))
        assert t == pytest.approx(count * _linear(GRAD_STAT_BYTES), rel=1e-12)
        assert net.all_reduces == [(RANKS, GRAD_STAT_BYTES)] * min(count, 1)
    one = TrainLayout(tp=1, zero=0).resolve(1)
    assert _grad_stats_sync_s(_groups(one, (0,)), _Comm(LinearNetwork()), TrainParams()) == 0.0


def test_every_stage_waits_for_the_last_one_then_all_reduces_the_norm() -> None:
    lay = TrainLayout(tp=2, pp=4, zero=1, recompute="none")
    untied = dataclasses.replace(QWEN, tied_embeddings=False)
    on = _step(untied, lay, CommParams())
    off = _step(untied, lay, CommParams(grad_norm_all_reduce=False))
    start = max(end + dp for end, dp, _ in off.stage_tail_s)
    for (end, dp, opt), (_, _, opt_off) in zip(on.stage_tail_s, off.stage_tail_s, strict=True):
        assert end + dp == pytest.approx(start + _linear(GRAD_STAT_BYTES), rel=1e-12)
        assert opt == opt_off
    assert on.step_time_s == pytest.approx(start + _linear(GRAD_STAT_BYTES) + max(o for *_, o in on.stage_tail_s),
                                           rel=1e-12)


def test_a_stage_waiting_for_the_others_before_the_norm_is_idle_not_syncing() -> None:
    """The wait before a joint collective is a dependency on the slower stages (idle in the timeline), not
    gradient sync: each stage's dp_sync intervals add up to its own sync and the norm's all-reduce; the
    critical chain runs through the stage the others waited for, and its parts sum to the step."""
    from simulator.llm.pipeline import IDLE

    lay = TrainLayout(tp=2, pp=4, zero=1, recompute="none")
    untied = dataclasses.replace(QWEN, tied_embeddings=False)
    on = _step(untied, lay, CommParams())
    off = _step(untied, lay, CommParams(grad_norm_all_reduce=False))
    start = max(end + dp for end, dp, _ in off.stage_tail_s)
    norm = _linear(GRAD_STAT_BYTES)
    waited = 0
    for s, ((end, own, _), (wait, joint)) in enumerate(zip(off.stage_tail_s, on.stage_wait_s, strict=True)):
        assert wait == pytest.approx(start - (end + own), abs=1e-12) and joint == pytest.approx(norm, rel=1e-12)
        mine = [iv for iv in on.timeline if iv.stage == s and iv.start >= end - 1e-12]
        sync = sum(iv.end - iv.start for iv in mine if iv.state == "dp_sync")
        idle = sum(iv.end - iv.start for iv in mine if iv.state == IDLE and iv.end <= start + norm + 1e-12)
        assert sync == pytest.approx(own + norm, rel=1e-9) and idle == pytest.approx(wait, abs=1e-9)
        waited += wait > 0
    assert waited >= 1   # the stages finish their backwards at different times
    parts = on.critical_stages()
    assert on.stage_wait_s[parts["stage"]][0] == 0.0   # the chain runs through the stage nobody waited on
    total = sum(parts["ops_s_by_stage"]) + parts["p2p_s"] + parts["dp_sync_s"] + parts["optimizer_s"] + parts["offload_s"]
    assert total == pytest.approx(on.step_time_s, rel=1e-9)
