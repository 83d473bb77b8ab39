"""A tied word embedding under pipeline parallelism: Megatron's all-reduce of the table's gradients
between its copies on the first and the last stage after the DP sync (finalize_model_grads
_allreduce_word_embedding_grads), exposed in the step's tail of those two stages."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import with_lora
from simulator.llm.training import (
    TrainLayout,
    TrainParams,
    _Comm,
    _groups,
    _tied_embedding_sync_s,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import CommParams

TOPO = load_topology({"preset": "dgx-h100", "nodes": 2})
TIED = load_model("qwen2.5-1.5b")     # tie_word_embeddings: vocab 151,936 x hidden 1,536
UNTIED = dataclasses.replace(TIED, tied_embeddings=False)
SEQS = uniform_sequences(64, 2048)
LAYOUT = TrainLayout(tp=2, pp=4, zero=1, recompute="none")   # dp 2 on 16 GPUs: stages 0 and 3 on two nodes


@dataclasses.dataclass(frozen=True)
class _Cost:
    time_s: float


class LinearNetwork:
    """Every collective costs 10 us + bytes / 100 GB/s; records the all-reduces of two ranks."""

    def __init__(self) -> None:
        self.pairs: list[tuple[list[int], float]] = []

    def cost(self, op, ranks, nbytes):
        if op == "all_reduce" and len(ranks) == 2:
            self.pairs.append((list(ranks), nbytes))
        return _Cost(1e-5 + nbytes / 1e11)


def _table_bytes(tp: int, grad_bytes: float) -> float:
    return TIED.vocab * TIED.hidden / tp * grad_bytes


def test_tied_head_adds_the_two_rank_all_reduce_of_the_table_gradient_at_the_step_end() -> None:
    net = CollectiveModel(TOPO)
    tied = train_step_cost(TIED, LAYOUT, TOPO, list(range(16)), SEQS, collectives=net)
    untied = train_step_cost(UNTIED, LAYOUT, TOPO, list(range(16)), SEQS, collectives=net)
    # the first and the last stage's first rank (tp fastest, then dp, pp: stage s starts at rank 4 s)
    expected = net.cost("all_reduce", [0, 12], _table_bytes(2, CommParams().grad_reduce_bytes_per_param)).time_s
    assert expected > 1e-3   # across the two nodes' InfiniBand: ~10 ms for 0.47 GB of fp32 gradients
    assert tied.step_time_s - untied.step_time_s == pytest.approx(expected, rel=1e-9)
    assert tied.comm_exposed_s["dp"] - untied.comm_exposed_s["dp"] == pytest.approx(expected, rel=1e-9)
    for kind in ("tp", "cp", "ep", "pp"):
        assert tied.comm_exposed_s[kind] == untied.comm_exposed_s[kind]
    assert tied.pipeline_s == untied.pipeline_s and tied.memory == untied.memory   # both hold two copies


def test_both_stages_start_the_all_reduce_together_and_step_after_it() -> None:
    net = LinearNetwork()
    alone = TrainParams(comm=CommParams(grad_norm_all_reduce=False))   # no collective of every stage after it
    tied = train_step_cost(TIED, LAYOUT, TOPO, list(range(16)), SEQS, params=alone, collectives=net)
    untied = train_step_cost(UNTIED, LAYOUT, TOPO, list(range(16)), SEQS, params=alone, collectives=LinearNetwork())
    sync = 1e-5 + _table_bytes(2, CommParams().grad_reduce_bytes_per_param) / 1e11   # the closed form
    start = max(untied.stage_tail_s[s][0] + untied.stage_tail_s[s][1] for s in (0, 3))
    for s in (0, 3):
        end, dp, opt = tied.stage_tail_s[s]
        assert end + dp == pytest.approx(start + sync, rel=1e-12)
        assert opt == untied.stage_tail_s[s][2]
    assert tied.stage_tail_s[1:3] == untied.stage_tail_s[1:3]   # the middle stages hold no copy
    assert tied.step_time_s - untied.step_time_s == pytest.approx(sync, rel=1e-9)
    assert ([0, 12], _table_bytes(2, 4.0)) in net.pairs


@pytest.mark.parametrize("grad_bytes", [2.0, 4.0])
def test_the_all_reduce_moves_the_gradient_buffer_dtype(grad_bytes: float) -> None:
    lay = LAYOUT.resolve(16)
    params = TrainParams(comm=CommParams(grad_reduce_bytes_per_param=grad_bytes))
    t = _tied_embedding_sync_s(TIED, lay, _groups(lay, tuple(range(16))), _Comm(LinearNetwork()), params)
    assert t == pytest.approx(1e-5 + _table_bytes(2, grad_bytes) / 1e11)


def test_no_all_reduce_at_pp_1_for_untied_or_value_heads_or_under_lora() -> None:
    comm, params = _Comm(LinearNetwork()), TrainParams()
    one = TrainLayout(tp=2, pp=1, zero=1).resolve(16)
    assert _groups(one, tuple(range(16))).embedding == []
    assert _tied_embedding_sync_s(TIED, one, _groups(one, tuple(range(16))), comm, params) == 0.0
    lay = LAYOUT.resolve(16)
    groups = _groups(lay, tuple(range(16)))
    critic = dataclasses.replace(TIED, value_head=True)
    adapters = with_lora(TIED, SimpleNamespace(rank=16, targets="all-linear"))
    for model in (UNTIED, critic, adapters):
        assert _tied_embedding_sync_s(model, lay, groups, comm, params) == 0.0
    assert _tied_embedding_sync_s(TIED, lay, groups, comm, params) > 0.0


def test_the_embedding_group_is_the_first_and_last_stage_of_one_coordinate_on_the_physical_ranks() -> None:
    lay = LAYOUT.resolve(16)
    ranks = tuple(reversed(range(16)))
    assert _groups(lay, ranks).embedding == [15, 3]   # canonical positions 0 and 12
    pp_first = TrainLayout(tp=2, pp=4, zero=1, order=("pp", "tp", "cp", "dp")).resolve(16)
    assert _groups(pp_first, tuple(range(16))).embedding == [0, 3]   # pp fastest: one pipeline on ranks 0-3
