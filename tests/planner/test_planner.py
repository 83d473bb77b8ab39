"""Planner search, placement and balancing with closed-form fakes (no cost model needed)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.planner.hetero import balance, uniform
from simulator.planner.placement import (
    aware_placements,
    forced_placement,
    groups,
    lay_out,
    naive_placement,
)
from simulator.planner.search import (
    Evaluation,
    PlannerParams,
    SearchSpace,
    enumerate_train_choices,
    plan_training,
)


class FakeTopology:
    """8 devices per node, one node per domain."""

    def __init__(self, nodes: int, per_node: int = 8) -> None:
        self.per_node = per_node
        self.num_devices = nodes * per_node

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def domain_of(self, rank: int) -> int:
        return rank // self.per_node

    def shared_level(self, ranks) -> str:
        nodes = {self.node_of(r) for r in ranks}
        return "device" if len(set(ranks)) == 1 else ("node" if len(nodes) == 1 else "cluster")


@dataclass
class FakeModel:
    name: str = "fake"
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 8
    num_experts: int = 0


def test_lay_out_is_a_permutation_and_groups_match_the_nesting():
    topo = FakeTopology(4)
    ranks = list(range(32))
    laid = lay_out(ranks, ("tp", "cp", "pp", "dp"), tp=8, cp=1, dp=2, pp=2)
    assert sorted(laid) == ranks
    for g in groups(laid, "tp", 8, 1, 2, 2):
        assert topo.shared_level(g) == "node"
    # pp next to tp: one pipeline = two consecutive nodes
    pp_groups = groups(laid, "pp", 8, 1, 2, 2)
    assert pp_groups[0] == [0, 8]
    dp_groups = groups(laid, "dp", 8, 1, 2, 2)
    assert dp_groups[0] == [0, 16]


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 2, 3]),
       pp=st.sampled_from([1, 2, 4]), order=st.permutations(["tp", "cp", "dp", "pp"]))
def test_every_order_gives_a_permutation_and_disjoint_covering_groups(tp, cp, dp, pp, order):
    n = tp * cp * dp * pp
    laid = lay_out(list(range(100, 100 + n)), order, tp, cp, dp, pp)
    assert sorted(laid) == list(range(100, 100 + n))
    for dim, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp)):
        gs = groups(laid, dim, tp, cp, dp, pp)
        assert len(gs) == n // size and all(len(g) == size for g in gs)
        assert sorted(r for g in gs for r in g) == sorted(laid)


def test_aware_placement_keeps_tp_in_a_node_even_when_ranks_are_shuffled():
    topo = FakeTopology(4)
    shuffled = [r for pair in zip(range(0, 16), range(16, 32), strict=True) for r in pair]
    for placement in aware_placements(topo, shuffled, tp=8, cp=1, dp=4, pp=1):
        assert all(topo.shared_level(g) == "node" for g in groups(placement.ranks, "tp", 8, 1, 4, 1))
    tp_outer = forced_placement(range(32), ("dp", "pp", "cp", "tp"), 8, 1, 4, 1)
    assert all(topo.shared_level(g) == "cluster" for g in groups(tp_outer.ranks, "tp", 8, 1, 4, 1))
    assert naive_placement(range(32), 8, 1, 4, 1).ranks == tuple(range(32))


def test_enumeration_obeys_divisibility():
    model = FakeModel()
    choices, pruned = enumerate_train_choices(model, 64, global_batch=128, seq_len=4096)
    assert choices and pruned
    for c in choices:
        assert c.tp * c.pp * c.dp * c.cp == 64
        assert model.num_heads % c.tp == 0
        assert model.num_layers % (c.pp * c.vpp) == 0
        assert 128 % (c.dp * c.micro_batch) == 0
        assert c.vpp == 1 or (c.pp > 1 and (128 // (c.dp * c.micro_batch)) % c.pp == 0)
        assert c.zero == 0 or c.dp > 1
        assert c.ep == 1
    assert len(set(choices)) == len(choices)


def test_uneven_pipeline_splits_only_when_asked_and_never_interleaved():
    model = FakeModel(num_layers=61)   # prime: only pp 1 and 61 divide it
    even, _ = enumerate_train_choices(model, 96, 96, 4096, SearchSpace(tp=[8], micro_batch=[1], zero=[1]))
    assert {c.pp for c in even} <= {1, 61}
    space = SearchSpace(tp=[8], micro_batch=[1], zero=[1], uneven_pp=True)
    uneven, _ = enumerate_train_choices(model, 96, 96, 4096, space)
    assert 6 in {c.pp for c in uneven}
    assert all(c.vpp == 1 or 61 % (c.pp * c.vpp) == 0 for c in uneven)
    # a re-plan searches uneven splits exactly when the running layout already has one
    from simulator.planner.search import TrainChoice, neighbourhood
    assert neighbourhood(TrainChoice(8, 6, 1, 8, 4, 1, 1, "full", 1), model).uneven_pp
    assert not neighbourhood(TrainChoice(8, 1, 1, 8, 4, 1, 1, "full", 1), model).uneven_pp
    # and keeps a running HSDP layout's shard-group size beside full sharding
    assert neighbourhood(TrainChoice(8, 1, 1, 8, 4, 1, 1, "full", 1, zero_shard_size=4), model).zero_shard_size == [4]
    assert neighbourhood(TrainChoice(8, 1, 1, 8, 4, 1, 1, "full", 1), model).zero_shard_size is None


def test_moe_enumerates_expert_parallel_dividing_experts_and_dp():
    model = FakeModel(num_experts=64)
    choices, _ = enumerate_train_choices(model, 64, 128, 4096, SearchSpace(micro_batch=[1], zero=[1]))
    eps = {c.ep for c in choices}
    assert max(eps) > 1
    assert all(64 % c.ep == 0 and (c.tp * c.dp * c.cp) % (c.ep * c.etp) == 0 for c in choices)
    assert all((c.dp * c.cp) % c.ep == 0 for c in choices if c.etp == c.tp)   # etp = tp: EP within the DP x CP


def test_moe_layouts_carry_their_expert_tp_and_fold_experts_when_the_space_gives_etp():
    """etp (Megatron-Core's default tp, or 1 beside it: SearchSpace.expert_tp_folding) is part of every MoE
    layout the plan reports, so `rlsim run` given the layout trains that one (a preset's etp: 1 merged under
    it had changed the memory); planner.space.etp searches others, with EP x etp dividing TP x DP x CP (EP
    may exceed DP)."""
    model = FakeModel(num_experts=64)
    default, _ = enumerate_train_choices(model, 64, 128, 4096, SearchSpace(micro_batch=[1], zero=[1]))
    assert all(c.etp in (c.tp, 1) and c.as_dict()["etp"] == c.etp for c in default)
    alone, _ = enumerate_train_choices(model, 64, 128, 4096, SearchSpace(micro_batch=[1], zero=[1],
                                                                         expert_tp_folding=False))
    assert all(c.etp == c.tp for c in alone) and set(alone) < set(default)
    folded, _ = enumerate_train_choices(model, 64, 128, 4096, SearchSpace(micro_batch=[1], zero=[1], etp=[1]))
    assert all(c.etp == 1 and (c.tp * c.dp * c.cp) % c.ep == 0 for c in folded)
    assert any(c.ep > c.dp * c.cp for c in folded)
    dense, _ = enumerate_train_choices(FakeModel(), 64, 128, 4096, SearchSpace(micro_batch=[1], zero=[1]))
    assert all(c.etp is None and "etp" not in c.as_dict() for c in dense)
    with pytest.raises(RlsimError, match="experts") as exc:   # a dense model: it would be read past
        enumerate_train_choices(FakeModel(), 64, 128, 4096, SearchSpace(etp=[1]))
    assert exc.value.field == "planner.space.etp"


def test_shard_group_sizes_add_hsdp_layouts_where_they_divide():
    """planner.space.zero_shard_size: each ZeRO layout also sharded within groups of each size that
    divides dp x cp below it (its copies dividing the expert-DP group); ZeRO 0 gets none."""
    space = SearchSpace(tp=[1, 2], micro_batch=[1], zero=[0, 1], recompute=["none"], vpp=[1], cp=[1], pp=[1])
    base, _ = enumerate_train_choices(FakeModel(), 32, 128, 4096, space)
    sharded, pruned = enumerate_train_choices(FakeModel(), 32, 128, 4096,
                                              space.model_copy(update={"zero_shard_size": [8, 12, 32]}))
    extra = [c for c in sharded if c.zero_shard_size is not None]
    assert {(c.tp, c.dp, c.zero, c.zero_shard_size) for c in extra} == {(1, 32, 1, 8), (2, 16, 1, 8)}
    assert [c for c in sharded if c.zero_shard_size is None] == base
    assert pruned["zero_shard"] == 2                      # 12 divides neither 32 nor 16; 32 is all of dp 32
    assert extra[0].as_dict()["zero_shard_size"] == 8 and "zero_shard_size" not in base[0].as_dict()
    # MoE: dp 32 (tp 1), ep 8 -> expert-DP 4; shard 4 makes 8 copies, which do not divide it
    moe, pruned = enumerate_train_choices(FakeModel(num_experts=64), 32, 128, 4096,
                                          SearchSpace(tp=[1], pp=[1], cp=[1], vpp=[1], ep=[8], micro_batch=[1],
                                                      zero=[1], recompute=["none"], zero_shard_size=[4, 8]))
    assert [c.zero_shard_size for c in moe] == [None, 8] and pruned["zero_shard"] == 1


def _fake_evaluator(topo: FakeTopology, hbm_limit: float = 1e9):
    """Step time: compute / devices + a TP penalty that is 10x worse across nodes; memory by layout."""

    def evaluate(c, ranks):
        memory = 8e9 / (c.tp * c.pp) * (0.5 if c.recompute == "full" else 1.0)
        if memory > hbm_limit:
            raise RlsimError("does not fit", field="memory")
        tp_groups = groups(ranks, "tp", c.tp, c.cp, c.dp, c.pp)
        cross = any(topo.shared_level(g) == "cluster" for g in tp_groups)
        tp_cost = (c.tp - 1) * (10.0 if cross else 1.0)
        rc = {"none": 1.0, "selective": 1.05, "full": 1.33}[c.recompute]
        bubble = (c.pp - 1) / (128 // (c.dp * c.micro_batch) + c.pp - 1)
        step = (100.0 * rc + tp_cost) / (1 - bubble) + c.zero * 0.1
        return Evaluation(step, 100.0 / step, 0.4, memory, tp_cost / step)

    return evaluate


def test_plan_ranks_best_first_and_never_puts_tp_across_nodes():
    topo = FakeTopology(8)
    plan = plan_training(FakeModel(), topo, 128, 4096, evaluator=_fake_evaluator(topo), top=5)
    times = [c.evaluation.step_time_s for c in plan.candidates]
    assert times == sorted(times)
    assert all(c.tp_level in ("device", "node") for c in plan.candidates)
    assert plan.best.naive is not None and plan.best.naive.step_time_s >= plan.best.evaluation.step_time_s
    assert plan.evaluated > 0 and plan.planning_cost_s > 0
    # forcing TP16 (two nodes) is honoured and lands across nodes
    forced = plan_training(FakeModel(), topo, 128, 4096, evaluator=_fake_evaluator(topo),
                           space=SearchSpace(tp=[16]), top=1)
    assert forced.best.choice.tp == 16 and forced.best.tp_level == "cluster"
    assert forced.best.evaluation.step_time_s > plan.best.evaluation.step_time_s


def test_recompute_dominance_prunes_without_changing_the_best():
    topo = FakeTopology(4)
    ev = _fake_evaluator(topo, hbm_limit=0.6e9)
    a = plan_training(FakeModel(), topo, 128, 4096, evaluator=ev, top=3)
    b = plan_training(FakeModel(), topo, 128, 4096, evaluator=ev, top=3,
                      params=PlannerParams(dominance_prune=False))
    assert a.best.choice == b.best.choice
    assert a.evaluated < b.evaluated
    assert a.pruned.get("recompute_dominated", 0) > 0


def test_no_fit_raises_a_clear_error():
    topo = FakeTopology(1)
    with pytest.raises(RlsimError, match="no training layout"):
        plan_training(FakeModel(), topo, 128, 4096, evaluator=_fake_evaluator(topo, hbm_limit=1.0))


@settings(max_examples=80, deadline=None)
@given(total=st.integers(4, 400),
       speeds=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=4))
def test_balance_is_min_max_optimal(total, speeds):
    unit = [1.0 / s for s in speeds]
    if total < len(unit):
        return
    counts = balance(total, unit)
    assert sum(counts) == total and min(counts) >= 1
    worst = max(c * u for c, u in zip(counts, unit, strict=True))
    # moving one item from the worst part to any other cannot lower the maximum
    i = max(range(len(unit)), key=lambda k: counts[k] * unit[k])
    for j in range(len(unit)):
        if j != i and counts[i] > 1:
            moved = list(counts)
            moved[i] -= 1
            moved[j] += 1
            assert max(c * u for c, u in zip(moved, unit, strict=True)) >= worst - 1e-12
    assert worst <= max(c * u for c, u in zip(uniform(total, len(unit)), unit, strict=True)) + 1e-12


def test_balance_proportional_to_speed():
    assert balance(40, [1 / 3, 1.0]) == [30, 10]
    assert uniform(10, 3) == [4, 3, 3]
    with pytest.raises(RlsimError):
        balance(1, [1.0, 1.0])


@pytest.mark.parametrize(("tp", "cp", "ep", "dp", "pp"), [(2, 1, 4, 8, 2), (1, 2, 2, 4, 2), (2, 1, 8, 8, 2),
                                                          (1, 1, 1, 4, 4)])
def test_first_placement_is_the_one_run_trains_on(tp, cp, ep, dp, pp):
    """MoE parallel folding: `rlsim run` puts the expert_fold replicas of an expert group together
    (rl/packing.replica_contiguous_ranks); the planner prices that placement first, so plan and run
    agree. Between fold 1 and fold dp it is neither of the plain nestings."""
    from simulator.llm.train_layout import TrainLayout, expert_fold
    from simulator.planner.search import TrainChoice, _placements
    from simulator.rl.packing import replica_contiguous_ranks

    layout = TrainLayout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp)
    fold = expert_fold(tp, cp, ep)
    assert fold == layout.pool_unit // layout.model_parallel
    topo = FakeTopology(tp * cp * dp * pp // 8 or 1)
    ranks = range(tp * cp * dp * pp)
    choice = TrainChoice(tp=tp, pp=pp, vpp=1, dp=dp, ep=ep, cp=cp, zero=1, recompute="none", micro_batch=1)
    options = _placements(topo, ranks, choice)
    assert options[0].ranks == tuple(replica_contiguous_ranks(tp, cp, dp, pp, fold=fold))
    nestings = {lay_out(list(ranks), order, tp, cp, dp, pp) for order in (("tp", "cp", "pp", "dp"),
                                                                           ("tp", "cp", "dp", "pp"))}
    assert (options[0].ranks in nestings) == (fold in (1, dp))
    assert len({p.ranks for p in options}) == len(options)   # distinct candidates only
    for placement in options:   # every candidate is a permutation with whole groups
        assert sorted(placement.ranks) == list(ranks)


@pytest.mark.parametrize("field, value", [("tp", [0]), ("tp", [-2]), ("pp", [0]), ("vpp", [0]), ("cp", [-1]),
                                          ("ep", [0]), ("micro_batch", [0]), ("zero", [4]), ("zero", [-1]),
                                          ("max_pp", 0), ("max_ep", -4)])
def test_a_search_space_refuses_a_degree_below_one_or_an_unknown_zero_stage(field, value):
    # found by fuzzing `rlsim plan --set planner.space.*`: a 0 degree divided by zero in the search
    with pytest.raises(ValueError, match=field):
        SearchSpace(**{field: value})


@pytest.mark.parametrize("field, value", [("eval_cost_s", -1.0), ("fixed_cost_s", -0.5), ("refine_top", -1)])
def test_planner_constants_refuse_negative_values(field, value):
    # a negative eval_cost_s printed "planning cost -203.00 s (modelled)" (found by fuzzing)
    from simulator.planner.base import PlannerParams

    with pytest.raises(ValueError, match=field):
        PlannerParams(**{field: value})


def test_a_mistyped_planner_section_names_the_section():
    """planner.spce went to the params and was said as an extra input with no hint (a new-user trial)."""
    from simulator.planner import planner_settings
    with pytest.raises(RlsimError, match="did you mean 'space'") as caught:
        planner_settings({"spce": {"tp": [1]}})
    assert caught.value.field == "planner.spce"


def test_a_search_that_keeps_nothing_says_why_in_words_and_the_tp_that_fits():
    """`rlsim plan --set planner.space.tp=[3]` said '(tp_heads: 9216)' and 'widen planner.space' (a
    new-user trial): the reason is in words and the fix lists the tp values the heads take."""
    from simulator.llm.architecture import load_model
    with pytest.raises(RlsimError) as caught:
        plan_training(load_model("llama3.1-8b"), FakeTopology(1), 64, 4096, space=SearchSpace(tp=[3]),
                      evaluator=lambda choice, ranks: pytest.fail("every layout is pruned before evaluation"))
    assert "pruned: tp does not divide the attention heads" in caught.value.message
    assert caught.value.fix.endswith("the 8 KV heads: 1, 2, 4, 8, 16, 32")


def test_context_parallel_needs_two_chunks_per_rank_and_tensor_parallel_splits_the_kv_heads():
    """Load-balanced CP splits each sequence into 2 x cp chunks, and TP divides the KV heads or
    is a multiple of them (Megatron replicates a head): with 4096 tokens the CP rule never bit (an
    audit's mutation, seq % cp for seq % 2cp, passed)."""
    model = FakeModel(num_heads=48, num_kv_heads=12)
    space = SearchSpace(cp=[1, 2, 3], tp=[1, 2, 4, 8, 16, 24])
    choices, pruned = enumerate_train_choices(model, 48, global_batch=96, seq_len=4098, space=space)
    assert choices and {c.cp for c in choices} == {1, 3} and pruned["cp_seq"] > 0   # 4098 = 2 x 3 x 683
    even, _ = enumerate_train_choices(model, 48, global_batch=96, seq_len=4096, space=space)
    assert {c.cp for c in even} == {1, 2}                                             # 4096 % 6 != 0
    assert {c.tp for c in choices} == {1, 2, 4, 24} and pruned["tp_heads"] > 0   # 8, 16: neither way


def test_refinement_keeps_each_leaders_fastest_placement():
    """Each refined leader holds the placement its evaluator times fastest among the aware ones (an
    audit's mutation that kept the slower placement passed: no evaluator's time depended on it).
    Here the first aware placement, the one a layout is enumerated with, is the slow one."""
    from simulator.planner.search import _placements
    topo = FakeTopology(4)

    def first_is_slow(c, ranks):   # (layouts with one placement slower still: those with a choice lead)
        placements = _placements(topo, range(32), c)
        if len(placements) == 1:
            step = 110.0
        elif tuple(ranks) == tuple(placements[0].ranks):
            step = 105.0
        else:
            step = 100.0 + (sum(i * r for i, r in enumerate(ranks)) % 7) / 10
        return Evaluation(step, 100.0 / step, 0.4, 1e9, 0.0)

    plan = plan_training(FakeModel(), topo, 128, 4096, evaluator=first_is_slow, top=3)
    choices = 0
    for cand in plan.candidates:
        times = [first_is_slow(cand.choice, p.ranks).step_time_s for p in _placements(topo, range(32), cand.choice)]
        assert cand.evaluation.step_time_s == min(times)
        choices += len(times) > 1
    assert choices and plan.best.evaluation.step_time_s < 105.0   # a leader had placements to choose from
