"""The modelled planning cost: what a search charges (a timed candidate, a refusal before timing) and
the second, narrower ranking (rerank_training) that charges only the work it adds. Closed-form fakes."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.planner import planner_settings, rerank_training
from simulator.planner.base import Evaluation, PlannerParams, RefusedBeforeTiming
from simulator.planner.placement import aware_placements, groups, naive_placement
from simulator.planner.search import SearchSpace, _structure, plan_training

from .test_planner import FakeModel, FakeTopology

TOPO = FakeTopology(8)   # 64 devices, 8 a node
RANKS = list(range(64))
SPACE = SearchSpace(tp=[1, 2, 4, 8], vpp=[1], cp=[1], micro_batch=[1, 2], zero=[0, 1])


def _step(c, ranks) -> float:
    """Larger model-parallel groups train faster here (so the fastest leaves no room), TP across nodes
    pays, and the placement moves the time a little (refinement has something to choose)."""
    tp_groups = groups(ranks, "tp", c.tp, c.cp, c.dp, c.pp)
    cross = any(TOPO.shared_level(g) == "cluster" for g in tp_groups)
    rc = {"none": 1.0, "selective": 1.05, "full": 1.33}[c.recompute]
    jitter = (sum(i * r for i, r in enumerate(ranks)) % 7) / 100
    return 100.0 * rc / (1 + 0.05 * c.tp * c.pp) + (5.0 if cross else 0.0) + c.zero * 0.1 + c.micro_batch * 0.01 + jitter


def _evaluator(room: int | None = None, calls: list | None = None):
    """The fake's evaluation; memory refuses a layout without recompute on fewer than 4 model-parallel
    devices, and ``room`` refuses model-parallel groups larger than it, both before timing (as
    TrainingEvaluator._judge), recompute alike (the room rule does not split a structure)."""
    def evaluate(c, ranks):
        if calls is not None:
            calls.append((c, tuple(ranks)))
        if room is not None and c.tp * c.pp > room:
            raise RefusedBeforeTiming("no room beside the tail", field="schedule.kind")
        if c.tp * c.pp < 4 and c.recompute == "none":
            raise RefusedBeforeTiming("does not fit", field="train_layout")
        step = _step(c, ranks)
        return Evaluation(step, 100.0 / step, 0.4, 1e9 / (c.tp * c.pp), 0.0)
    return evaluate


def _room(c) -> bool:
    return c.tp * c.pp <= 8


def _same(a, b) -> None:
    assert [(c.choice, c.placement, c.evaluation, c.naive, c.tokens_per_s, c.tp_level) for c in a.candidates] == \
        [(c.choice, c.placement, c.evaluation, c.naive, c.tokens_per_s, c.tp_level) for c in b.candidates]


def _placements_of(c) -> int:
    """The aware placements of a dense layout (its first one and the alternatives refinement tries)."""
    return len(aware_placements(TOPO, RANKS, c.tp, c.cp, c.dp, c.pp))


def test_rerank_gives_the_second_search_and_charges_only_the_new_leaders_refinement():
    """autoplan._consolidating searched the whole space again with the room rule refusing; the first
    search's first pass already holds that search's, so only its leaders' refinement is new work."""
    params = PlannerParams()
    first = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=_evaluator(), top=1)
    assert not _room(first.best.choice)
    old = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=_evaluator(room=8), top=None)
    calls: list = []
    new = rerank_training(first, _room, TOPO, RANKS, _evaluator(calls=calls), top=None)
    _same(new, old)   # the whole ranking: choices, placements, times, naive placements
    leaders = [cand.choice for cand in first.first_pass if _room(cand.choice)][: params.refine_top]
    assert not set(leaders) & set(first.refined)   # here the first search's leaders all lack room
    # each new leader: its other aware placements and the naive one, counted as the search counts them
    assert new.evaluated == sum(_placements_of(c) for c in leaders) < old.evaluated / 10
    assert new.planning_cost_s == pytest.approx(new.evaluated * params.eval_cost_s)   # timed; no fixed part
    final = {cand.choice: cand.placement.ranks for cand in new.candidates}
    naive_differs = sum(naive_placement(RANKS, c.tp, c.cp, c.dp, c.pp).ranks != final[c] for c in leaders)
    assert len(calls) == new.evaluated - len(leaders) + naive_differs   # the evaluator's own calls
    top1 = rerank_training(first, _room, TOPO, RANKS, _evaluator(), top=1)
    assert top1.best.choice == plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE,
                                             evaluator=_evaluator(room=8), top=1).best.choice


def test_rerank_reuses_the_leaders_the_first_search_refined():
    """Rejecting only the fastest layout's structure (every recompute mode of it: rejecting its first
    mode alone would leave a slower mode the first search skipped by dominance): seven of the eight
    leaders were refined by the first search (the same evaluations), so only the ninth is refined and charged."""
    first = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=_evaluator(), top=1)
    fastest = _structure(first.best.choice)
    rerank = rerank_training(first, lambda c: _structure(c) != fastest, TOPO, RANKS, _evaluator(), top=None)
    ninth = first.first_pass[8].choice
    assert rerank.evaluated == _placements_of(ninth)
    full = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, top=None,
                         evaluator=lambda c, ranks: _evaluator()(c, ranks) if _structure(c) != fastest else _refuse())
    _same(rerank, full)
    with pytest.raises(RlsimError, match="none of the .* training layouts that fit is kept"):
        rerank_training(first, lambda c: False, TOPO, RANKS, _evaluator())


def _refuse():
    raise RefusedBeforeTiming("rejected", field="test")


def test_a_refusal_before_timing_costs_its_fraction_of_an_evaluation():
    """Refusals were charged eval_cost_s as timed candidates (91% of the default scenario's 35,059
    evaluations); one before timing now costs refused_cost_fraction of it, one raised otherwise (while
    timing, a wrapper's own check) the whole."""
    outcomes: dict[str, int] = {"timed": 0, "early": 0, "late": 0}

    def evaluate(c, ranks):
        if c.tp * c.pp < 4 and c.recompute == "none":
            outcomes["early"] += 1
            raise RefusedBeforeTiming("does not fit", field="train_layout")
        if c.zero == 1 and c.micro_batch == 2:
            outcomes["late"] += 1
            raise RlsimError("refused while timing", field="layout")
        outcomes["timed"] += 1
        return Evaluation(_step(c, ranks), 1.0, 0.4, 1e9, 0.0)

    params = PlannerParams(eval_cost_s=0.01, refused_cost_fraction=0.25, fixed_cost_s=2.0)
    plan = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=evaluate, params=params)
    naive_same = plan.evaluated - sum(outcomes.values())   # counted, as the search counts them, not called
    assert outcomes["early"] > 0 and outcomes["late"] > 0 and plan.refused_before_timing == outcomes["early"]
    assert plan.planning_cost_s == pytest.approx(
        2.0 + 0.01 * (outcomes["timed"] + outcomes["late"] + naive_same + 0.25 * outcomes["early"]))
    whole = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=evaluate,
                          params=params.model_copy(update={"refused_cost_fraction": 1.0}))
    assert whole.planning_cost_s == pytest.approx(2.0 + 0.01 * whole.evaluated)   # the charge before


def test_the_refusal_fraction_is_a_planner_key_and_refuses_a_negative_value():
    assert planner_settings({"refused_cost_fraction": 1.0}).params.refused_cost_fraction == 1.0
    with pytest.raises(RlsimError, match="planner.refused_cost_fraction"):
        planner_settings({"refused_cost_fraction": -0.1})


def test_the_training_evaluator_refuses_before_timing_on_memory():
    """TrainingEvaluator's checks (_judge) refuse as RefusedBeforeTiming; a fitting layout is timed."""
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner.base import TrainChoice
    from simulator.planner.evaluate import TrainingEvaluator

    topo, model = load_topology("dgx-h100", {"nodes": 1}), load_model("llama3.1-8b")
    ev = TrainingEvaluator(model, topo, 64, 4096)   # 8B: ~16 B a parameter on one H100 does not fit
    unfit = TrainChoice(tp=1, pp=1, vpp=1, dp=8, ep=1, cp=1, zero=0, recompute="none", micro_batch=1)
    with pytest.raises(RefusedBeforeTiming, match="does not fit in device memory"):
        ev(unfit, list(range(8)))
    fits = TrainChoice(tp=8, pp=1, vpp=1, dp=1, ep=1, cp=1, zero=0, recompute="full", micro_batch=1)
    assert ev(fits, list(range(8))).step_time_s > 0


def test_the_training_evaluator_finds_the_pools_hbm_once_for_both_checks(monkeypatch):
    """_judge reads the pool's smallest HBM once for the rollout phase's check and the memory check
    (it scanned the ranks twice: ~15 of a refusal's ~250 us); both get that figure, and the memory
    check alone (no rollout phase) still reads it."""
    import simulator.planner.evaluate as evaluate
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner.base import TrainChoice

    scans: list = []
    real = evaluate.pool_devices
    monkeypatch.setattr(evaluate, "pool_devices", lambda topo, ranks: scans.append(1) or real(topo, ranks))
    topo, model = load_topology("dgx-h100", {"nodes": 1}), load_model("llama3.1-8b")
    seen: list = []
    ev = evaluate.TrainingEvaluator(model, topo, 64, 4096, rollout_phase=lambda lay, hbm: seen.append(hbm))
    unfit = TrainChoice(tp=1, pp=1, vpp=1, dp=8, ep=1, cp=1, zero=0, recompute="none", micro_batch=1)
    with pytest.raises(RefusedBeforeTiming, match="does not fit in device memory"):
        ev(unfit, list(range(8)))
    assert seen == [topo.device_spec(0).hbm_bytes] and len(scans) == 1
    scans.clear()
    with pytest.raises(RefusedBeforeTiming, match="does not fit in device memory"):
        evaluate.TrainingEvaluator(model, topo, 64, 4096)(unfit, list(range(8)))
    assert len(scans) == 1
