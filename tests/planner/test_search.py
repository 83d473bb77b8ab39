"""planner/search.py: how the training candidates are ranked."""

from simulator.errors import RlsimError
from simulator.planner.base import PlannerParams


def test_at_an_equal_step_time_the_layout_with_less_memory_ranks_first():
    """ZeRO 2 beside ZeRO 1 at the same step time ranked second on the layout tuple alone (a planner
    audit): the memory a device breaks the tie, the tuple after it."""
    from types import SimpleNamespace

    from simulator.planner.search import _rank_key

    def cand(step, memory, choice):
        return SimpleNamespace(evaluation=SimpleNamespace(step_time_s=step, memory_per_device_bytes=memory),
                               choice=choice)
    zero1, zero2, faster = cand(2.976, 72.6e9, (1, 1)), cand(2.976, 41.5e9, (1, 2)), cand(2.962, 80e9, (2, 2))
    assert sorted([zero1, zero2, faster], key=_rank_key) == [faster, zero2, zero1]
    same = cand(2.976, 41.5e9, (0, 9))
    assert sorted([zero2, same], key=_rank_key) == [same, zero2]


def test_a_model_whose_state_outgrows_the_devices_says_how_many_it_needs():
    """405B on 8 H100s: the refusal named no size to aim for (a planner audit). Its state at 18 B a
    parameter over 0.92 of 80 GiB: ceil(405.85e9 x 18 / 79.0e9) = 93 devices."""
    import math

    import pytest

    from simulator.errors import RlsimError
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner.search import plan_training

    model, topology = load_model("llama3.1-405b"), load_topology({"preset": "dgx-h100", "nodes": 1})
    need = math.ceil(model.params_total * 18 / (topology.device_spec(0).hbm_bytes * 0.92))
    with pytest.raises(RlsimError, match=f"needs at least {need} devices") as info:
        plan_training(model, topology, 256, 4096)
    assert need == 93 and info.value.field == "planner"
    # and the first layout the evaluator refused, with its own arithmetic (a forced tp hid it)
    assert "the first refused: " in info.value.message and "does not fit in device memory" in info.value.message


def _block_evaluator(least_fitting: int, calls: list):
    """A closed-form evaluator: none / selective never fit; full uniform fits; block N fits from
    ``least_fitting`` layers a chunk on (memory falls with N) and costs 100 + N seconds (time grows
    with N), full uniform 100 + the chunk's layers. ``calls`` records every (method, N) asked, and
    whether it was judged only."""
    from simulator.planner.base import Evaluation

    def fits(c):
        if c.recompute != "full":
            raise RlsimError("does not fit", field="memory")
        if c.recompute_method == "block" and c.recompute_num_layers < least_fitting:
            raise RlsimError("does not fit", field="memory")

    def evaluate(c, ranks):
        calls.append((c.recompute_method, c.recompute_num_layers, "timed"))
        fits(c)
        layers = c.recompute_num_layers if c.recompute_method == "block" else 32 // (c.pp * c.vpp)
        return Evaluation(100.0 + layers, 1.0, 0.4, 1e9, 0.0)

    def judge(c, ranks):
        calls.append((c.recompute_method, c.recompute_num_layers, "judged"))
        fits(c)

    evaluate.judge = judge
    return evaluate


def test_the_block_search_finds_the_fewest_recomputed_layers_that_fit_by_bisection():
    """Where full recompute is the least that fits, the plan adds Megatron's block method at the fewest
    layers a chunk that fit (the fastest block): each probe judged only, the one found then timed;
    ceil(log2(chunk layers)) probes at most. Not searched without "block" in planner.space.recompute_method,
    and as_dict keeps the method and its layers only away from uniform 1."""
    import math

    from simulator.planner.search import SearchSpace, plan_training
    from tests.planner.test_planner import FakeModel, FakeTopology

    space = SearchSpace(tp=[1], pp=[1], vpp=[1], cp=[1], zero=[1], micro_batch=[1])
    for least in (1, 7, 31):
        calls: list = []
        plan = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=_block_evaluator(least, calls),
                             space=space, params=PlannerParams(refine_top=0))
        best = plan.best.choice
        assert (best.recompute, best.recompute_method, best.recompute_num_layers) == ("full", "block", least)
        assert plan.best.evaluation.step_time_s == 100.0 + least
        assert best.as_dict()["recompute_num_layers"] == least
        probes = [call for call in calls if call[0] == "block" and call[2] == "judged"]
        assert len(probes) <= math.ceil(math.log2(31)) and ("block", least, "timed") in calls
        assert {(c.choice.recompute_method, c.choice.recompute_num_layers) for c in plan.candidates} == {
            ("uniform", 1), ("block", least)}
    calls = []
    none_fit = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=_block_evaluator(32, calls),
                             space=space, params=PlannerParams(refine_top=0))
    assert [c.choice.recompute_method for c in none_fit.candidates] == ["uniform"]
    assert "recompute_method" not in none_fit.best.choice.as_dict()
    calls = []
    uniform_only = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=_block_evaluator(1, calls),
                                 space=space.model_copy(update={"recompute_method": ["uniform"]}),
                                 params=PlannerParams(refine_top=0))
    assert [c.choice.recompute_method for c in uniform_only.candidates] == ["uniform"]
    assert all(call[0] == "uniform" for call in calls)


def test_the_block_search_runs_only_where_full_recompute_is_the_least_that_fits():
    """A structure whose selective recompute fits is not searched for block (dominance: the lighter mode
    already fits); an evaluator without a judge is asked in full for each probe."""
    from simulator.planner.base import Evaluation
    from simulator.planner.search import SearchSpace, plan_training
    from tests.planner.test_planner import FakeModel, FakeTopology

    calls: list = []

    def evaluate(c, ranks):
        calls.append(c)
        if c.recompute == "none" or (c.recompute_method == "block" and c.recompute_num_layers < 3):
            raise RlsimError("does not fit", field="memory")
        return Evaluation(100.0 + (c.recompute_num_layers if c.recompute_method == "block" else 50), 1.0, 0.4, 1e9, 0.0)

    space = SearchSpace(tp=[1], pp=[1], vpp=[1], cp=[1], zero=[1], micro_batch=[1])
    plan = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=evaluate, space=space,
                         params=PlannerParams(refine_top=0))
    assert plan.best.choice.recompute == "selective" and not any(c.recompute_method == "block" for c in calls)
    calls.clear()
    no_selective = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=evaluate,
                                 space=space.model_copy(update={"recompute": ["none", "full"]}),
                                 params=PlannerParams(refine_top=0))
    assert (no_selective.best.choice.recompute_method, no_selective.best.choice.recompute_num_layers) == ("block", 3)


def test_a_recompute_method_list_without_uniform_is_refused():
    import pytest
    from pydantic import ValidationError

    from simulator.planner.search import SearchSpace

    with pytest.raises(ValidationError, match="must hold uniform"):
        SearchSpace(recompute_method=["block"])


def test_the_block_layers_found_are_the_fewest_that_fit_by_the_real_memory_model():
    """Qwen2.5-7B, 64 sequences of 16,384 tokens on one DGX H100 at TP 2: no recompute does not fit,
    full uniform does; the plan's block layout is the fewest layers a chunk that the trainer's own memory
    check accepts (every N tried in turn: memory falls with N), and it is faster than full uniform."""
    import dataclasses

    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner.evaluate import TrainingEvaluator
    from simulator.planner.search import SearchSpace, plan_training

    model, topology = load_model("qwen2.5-7b"), load_topology({"preset": "dgx-h100", "nodes": 1})
    space = SearchSpace(tp=[2], pp=[1], vpp=[1], cp=[1], zero=[1], micro_batch=[1])
    plan = plan_training(model, topology, 64, 16384, space=space, top=4)
    block = [c for c in plan.candidates if c.choice.recompute_method == "block"]
    uniform = [c for c in plan.candidates if c.choice.recompute == "full" and c.choice.recompute_method == "uniform"]
    assert len(block) == 1 and len(uniform) == 1 and plan.best is block[0]
    evaluator, ranks = TrainingEvaluator(model, topology, 64, 16384), block[0].placement.ranks

    def fits(n):
        try:
            evaluator.judge(dataclasses.replace(block[0].choice, recompute_num_layers=n), ranks)
        except RlsimError:
            return False
        return True
    verdicts = [fits(n) for n in range(1, model.num_layers)]
    assert verdicts == sorted(verdicts) and verdicts.index(True) + 1 == block[0].choice.recompute_num_layers
    assert block[0].evaluation.step_time_s < uniform[0].evaluation.step_time_s


def test_the_block_search_skips_layouts_whose_full_recompute_step_cannot_rank():
    """A block step is at least the full-recompute one less its recompute (PlannerParams.recompute_step_share_max,
    a third): beside a layout without recompute at 50 s, a full-recompute one at 132 s (at best 88 s in block)
    is not searched for the one layout kept; with the share 1 it is, and at top 2 (two kept) too."""
    from simulator.planner.base import Evaluation
    from simulator.planner.search import SearchSpace, plan_training
    from tests.planner.test_planner import FakeModel, FakeTopology

    calls: list = []

    def evaluate(c, ranks):
        calls.append(c)
        if c.tp == 2:
            return Evaluation(50.0 if c.recompute == "none" else 60.0, 1.0, 0.4, 1e9, 0.0)
        if c.recompute != "full":
            raise RlsimError("does not fit", field="memory")
        return Evaluation(100.0 + (c.recompute_num_layers if c.recompute_method == "block" else 32), 1.0, 0.4, 1e9, 0.0)

    space = SearchSpace(tp=[1, 2], pp=[1], vpp=[1], cp=[1], zero=[1], micro_batch=[1])

    def blocks(**kwargs):
        calls.clear()
        top = kwargs.pop("top", None)
        plan = plan_training(FakeModel(), FakeTopology(1), 64, 4096, evaluator=evaluate, space=space, top=top,
                             params=PlannerParams(refine_top=0, **kwargs))
        return [c for c in calls if c.recompute_method == "block"], plan
    skipped, plan = blocks()
    assert skipped == [] and plan.best.choice.tp == 2
    searched, plan = blocks(recompute_step_share_max=1.0)
    assert searched and plan.best.choice.tp == 2
    kept_two, plan = blocks(top=2)
    assert kept_two and [c.choice.recompute_method for c in plan.candidates] == ["uniform", "block"]


def test_a_failure_replan_searches_block_recompute_only_from_a_block_layout():
    """neighbourhood (and, for a given layout, the widened space: autoplan.PlannerReplanner) keeps a running
    uniform layout's re-plans uniform: a block layout sits at the memory edge of the judged batches, and a
    re-plan commits to it with no run to plan again (replan_recompute_methods)."""
    import dataclasses

    from simulator.planner.base import TrainChoice
    from simulator.planner.search import neighbourhood
    from tests.planner.test_planner import FakeModel

    uniform = TrainChoice(tp=2, pp=1, vpp=1, dp=4, ep=1, cp=1, zero=1, recompute="full", micro_batch=1)
    block = dataclasses.replace(uniform, recompute_method="block", recompute_num_layers=5)
    assert neighbourhood(uniform, FakeModel()).recompute_method == ["uniform"]
    assert neighbourhood(block, FakeModel()).recompute_method == ["uniform", "block"]


def _room_evaluator(room_tp: int | None, calls: list, least_block: int = 7):
    """Two structures on one node: TP 2 trains without recompute in 50 s; TP 1 fits with full recompute
    only, uniform 132 s, block N from ``least_block`` layers a chunk on, 100 + N s (_block_evaluator). ``room_tp``: TP
    above it refused before timing (no room beside a consolidated tail: TrainingEvaluator's room rule,
    alike for every recompute mode); ``calls`` records the block layouts asked (N, judged or timed)."""
    from simulator.planner.base import Evaluation, RefusedBeforeTiming

    def fits(c):
        if room_tp is not None and c.tp > room_tp:
            raise RefusedBeforeTiming("no room beside the tail", field="schedule.kind")
        if c.tp == 1 and (c.recompute != "full" or (c.recompute_method == "block" and c.recompute_num_layers < least_block)):
            raise RefusedBeforeTiming("does not fit", field="memory")

    def evaluate(c, ranks):
        if c.recompute_method == "block":
            calls.append((c.recompute_num_layers, "timed"))
        fits(c)
        if c.tp == 2:
            return Evaluation(50.0 if c.recompute == "none" else 60.0, 1.0, 0.4, 1e9, 0.0)
        return Evaluation(100.0 + (c.recompute_num_layers if c.recompute_method == "block" else 32), 1.0, 0.4, 1e9, 0.0)

    def judge(c, ranks):
        if c.recompute_method == "block":
            calls.append((c.recompute_num_layers, "judged"))
        fits(c)

    evaluate.judge = judge
    return evaluate


def _room_plans(least_block: int = 7, **params):
    """(the whole plan, its rerank without TP 2, the plan searched with TP 2 refused, the rerank's block calls)."""
    from simulator.planner import rerank_training
    from simulator.planner.search import SearchSpace, plan_training
    from tests.planner.test_planner import FakeModel, FakeTopology

    space = SearchSpace(tp=[1, 2], pp=[1], vpp=[1], cp=[1], zero=[1], micro_batch=[1])
    settings = PlannerParams(refine_top=0, **params)
    topo = FakeTopology(1)

    def plan(room_tp):
        return plan_training(FakeModel(), topo, 64, 4096, evaluator=_room_evaluator(room_tp, [], least_block), space=space,
                             params=settings, top=1)
    whole, calls = plan(None), []
    rerank = rerank_training(whole, lambda c: c.tp == 1, topo, range(8), _room_evaluator(None, calls, least_block),
                             params=settings, top=1)
    return whole, rerank, plan(1), calls


def test_the_rerank_searches_block_recompute_of_the_layouts_it_keeps():
    """The whole plan's bar is TP 2's 50 s: TP 1's full-recompute 132 s, at best 88 s in block, is not
    searched. The rerank keeping TP 1 alone (room beside a consolidated tail) has no bar: its block layout
    (7 layers a chunk, 107 s) is searched there, as the search with TP 2 refused finds it (it gave full
    uniform, 132 s), its probes and the N found charged as that search charges them."""
    import math

    whole, rerank, refused, calls = _room_plans()
    assert whole.best.choice.tp == 2 and not any(c.choice.recompute_method == "block" for c in whole.first_pass)
    best = rerank.best.choice
    assert (best.tp, best.recompute_method, best.recompute_num_layers) == (1, "block", 7)
    assert rerank.best.evaluation == refused.best.evaluation and best == refused.best.choice
    probes = sum(1 for call in calls if call[1] == "judged")
    assert 0 < probes <= math.ceil(math.log2(31)) and calls[-1] == (7, "timed")
    # and its leader's refinement: one aware placement at TP 1 on one node, the naive one the same (counted)
    assert (rerank.evaluated, rerank.refused_before_timing) == (probes + 1 + 1, probes)
    assert rerank.planning_cost_s == PlannerParams().search_cost_s(1 + 1, probes, fixed=False)


def test_the_rerank_reuses_the_block_searches_of_the_first_pass():
    """Where the whole plan searched a kept structure's block layout (the bound off: share 1), the rerank
    takes what it found without asking again; where that search found none (no N below the chunk fits:
    share 1, and nothing fits before 32 layers), it does not search again either."""
    whole, rerank, refused, calls = _room_plans(recompute_step_share_max=1.0)
    assert any(c.choice.recompute_method == "block" for c in whole.first_pass)
    assert calls == [] and rerank.evaluated == 1   # its leader's refinement alone (the naive placement, counted)
    assert rerank.best.choice == refused.best.choice and rerank.best.choice.recompute_num_layers == 7
    _, none_found, _, calls = _room_plans(recompute_step_share_max=1.0, least_block=32)
    assert calls == [] and none_found.evaluated == 1 and none_found.best.choice.recompute_method == "uniform"
