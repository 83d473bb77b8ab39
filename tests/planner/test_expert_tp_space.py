"""The expert tensor-parallel sizes the planner searches on an MoE model: etp = tp and, where the training
stack folds its experts (MoE parallel folding: params.TrainSoftware.expert_tensor_parallel), etp 1, which
fine-grained MoE trains at (NeMo RL v0.5's recipes, AReaL's default); a dense model's search does not
move; planner.space.etp given wins; a stack whose experts take its TP searches etp = tp only."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import memory_per_device
from simulator.params import (
    AREAL_ARCHON,
    HF_TRANSFORMERS,
    MEGATRON_2021,
    MEGATRON_2022,
    MEGATRON_CORE,
    MEGATRON_CORE_OVERLAP,
    TRAIN_SOFTWARE,
)
from simulator.planner import planner_settings
from simulator.planner.evaluate import TrainingEvaluator
from simulator.planner.search import SearchSpace, TrainChoice, enumerate_train_choices, neighbourhood
from tests.planner.test_planner import FakeModel as Model

MOE = Model(num_experts=64)
# one pipeline, one recompute mode: tp 1 or 4 on 64 devices (dp 64 or 16), ep a power of two up to 64
NARROW = dict(tp=[1, 4], pp=[1], vpp=[1], cp=[1], zero=[1], recompute=["full"], micro_batch=[1])


def _on(stack) -> SearchSpace:
    """NARROW at the stack's first recompute mode and ZeRO stage, narrowed to the stack."""
    return SearchSpace(**{**NARROW, "recompute": list(stack.recompute[:1]), "zero": list(stack.zero[:1])}
                       ).for_software(stack)


def _tp_etp_ep(choices) -> set[tuple[int, int | None, int]]:
    return {(c.tp, c.etp, c.ep) for c in choices}


def test_the_default_moe_space_searches_etp_1_beside_etp_tp_once_at_tp_1():
    """tp 1 (dp 64): etp 1, every ep of 1..64 (7), once; tp 4 (dp 16): etp 4 with ep x 4 dividing 64
    (ep 1..16: 5) and etp 1 with ep dividing 64 (7): 19 layouts, where etp = tp alone gave 12."""
    choices, pruned = enumerate_train_choices(MOE, 64, 128, 4096, SearchSpace(**NARROW))
    eps = [1, 2, 4, 8, 16, 32, 64]
    assert _tp_etp_ep(choices) == ({(1, 1, e) for e in eps} | {(4, 4, e) for e in eps[:5]}
                                   | {(4, 1, e) for e in eps})
    assert len(choices) == 19 and pruned["ep"] == 2   # ep 32, 64 at tp 4 etp 4
    alone, _ = enumerate_train_choices(MOE, 64, 128, 4096, SearchSpace(**NARROW, expert_tp_folding=False))
    assert _tp_etp_ep(alone) == {(1, 1, e) for e in eps} | {(4, 4, e) for e in eps[:5]}
    assert all(c.as_dict()["etp"] == c.etp for c in choices)   # the JSON's layout names it


def test_a_dense_models_search_does_not_move():
    dense = Model()
    default, pruned = enumerate_train_choices(dense, 64, 128, 4096, SearchSpace())
    off, pruned_off = enumerate_train_choices(dense, 64, 128, 4096, SearchSpace(expert_tp_folding=False))
    assert default == off and pruned == pruned_off
    assert all(c.etp is None and "etp" not in c.as_dict() for c in default)


def test_a_given_etp_wins_over_the_default_sizes():
    given, _ = enumerate_train_choices(MOE, 64, 128, 4096, SearchSpace(**NARROW, etp=[2]))
    assert {c.etp for c in given} == {2}
    ones, _ = enumerate_train_choices(MOE, 64, 128, 4096, SearchSpace(**NARROW, etp=[1]))
    assert {(c.tp, c.etp) for c in ones} == {(1, 1), (4, 1)}   # searched at tp 1 too
    with pytest.raises(RlsimError) as err:   # folding qualifies the default sizes: read past beside them
        planner_settings({"space": {"etp": [1], "expert_tp_folding": True}})
    assert err.value.field == "planner.space.expert_tp_folding"


@pytest.mark.parametrize("stack", [MEGATRON_CORE, MEGATRON_CORE_OVERLAP, AREAL_ARCHON])
def test_a_stack_that_folds_its_experts_searches_etp_1(stack):
    space = _on(stack)
    assert space.expert_tp_folding and space.etp is None
    choices, _ = enumerate_train_choices(MOE, 64, 128, 4096, space)
    assert (4, 1) in {(c.tp, c.etp) for c in choices}


def test_a_stack_without_expert_tp_searches_etp_tp_only_and_refuses_a_given_one():
    """Megatron-LM of 2021 / 2022 had no MoE layers, transformers' model code splits the experts by
    its TP plan: the experts take the stack's TP."""
    unfolded = [s for s in TRAIN_SOFTWARE.values() if not s.expert_tensor_parallel]
    assert {MEGATRON_2021.name, MEGATRON_2022.name, HF_TRANSFORMERS.name} <= {s.name for s in unfolded}
    assert {s.name for s in TRAIN_SOFTWARE.values()} - {s.name for s in unfolded} == {
        "megatron-core", "megatron-core-overlap", "areal-archon"}
    for stack in unfolded:
        space = _on(stack)
        assert not space.expert_tp_folding, stack.name
        choices, _ = enumerate_train_choices(MOE, 64, 128, 4096, space)
        assert choices and all(c.etp == c.tp for c in choices), stack.name
    for given in ({"etp": [1]}, {"expert_tp_folding": True}):
        with pytest.raises(RlsimError) as err:
            SearchSpace(**given).for_software(MEGATRON_2021)
        key = next(iter(given))
        assert err.value.field == f"planner.space.{key}" and "megatron-2021" in err.value.message
        assert "etp = tp" in err.value.message and f"remove planner.space.{key}" in err.value.fix


def test_a_replan_keeps_the_running_expert_tp():
    running = TrainChoice(4, 1, 1, 16, 8, 1, 1, "full", 1, etp=None)
    near = neighbourhood(running, MOE)
    assert not near.expert_tp_folding and near.etp is None
    choices, _ = enumerate_train_choices(MOE, 64, 128, 4096, near)
    assert {c.etp for c in choices} == {4}
    folded = neighbourhood(TrainChoice(4, 1, 1, 16, 8, 1, 1, "full", 1, etp=1), MOE)
    assert folded.etp == [1]


def test_the_memory_check_holds_every_expert_of_its_ep_share_at_etp_1():
    """etp 1 spreads the experts over ep alone: each rank holds tp x the expert weights it held at etp = tp,
    the dense weights unchanged (qwen3-30b-a3b, tp 2, ep 4, dp 4 on 8 H100s, ZeRO 0)."""
    model = load_model("qwen3-30b-a3b")
    evaluator = TrainingEvaluator(model, load_topology("dgx-h100"), 64, 2048)
    tp, ep = 2, 4
    layouts = {etp: evaluator.layout(TrainChoice(tp, 1, 1, 4, ep, 1, 0, "full", 1, etp=etp)) for etp in (tp, 1)}
    weights = {etp: memory_per_device(model, lay, 2048, 1e15).weights_bytes for etp, lay in layouts.items()}
    experts = sum(s.trainable_expert_params for s in layer_shapes(model))
    per_param = evaluator.params.memory.resident_bytes_per_param
    assert weights[1] - weights[tp] == pytest.approx(experts * per_param * (1 / ep - 1 / (ep * tp)), rel=1e-9)
