"""What a failure re-plan charges: the schedule's own check (accept_train_layout) refusing before a
step is timed, a search in which no layout fits (its evaluations, not one), and a first try with room
that found nothing before the retry. Each charge is counted here from the evaluator's own calls."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RefusedBeforeTiming, RlsimError
from simulator.planner import replan_on_failure
from simulator.planner.base import Evaluation, NoLayoutFits, PlannerParams
from simulator.planner.search import SearchSpace, plan_training

from .test_planner import FakeModel, FakeTopology

TOPO = FakeTopology(8)   # 64 devices, 8 a node
SPACE = SearchSpace(tp=[1, 2, 4, 8], vpp=[1], cp=[1], micro_batch=[1, 2], zero=[0, 1])
PARAMS = PlannerParams(eval_cost_s=0.01, refused_cost_fraction=0.25, fixed_cost_s=2.0)


def _charge(timed: int, early: int, searches: int = 1) -> float:
    """PARAMS' charge of ``searches`` searches that timed ``timed`` candidates and refused ``early`` before
    timing, counted from the calls (0.01 s a timed one, a quarter of it a refusal before timing, 2 s a search)."""
    return 2.0 * searches + 0.01 * (timed + 0.25 * early)


class _Counting:
    """An evaluator that refuses every layout on more than ``fits_on`` devices (before timing where the
    layout has no ZeRO, while timing otherwise) and times the rest; it counts its calls by outcome and
    by the devices they were made on."""

    def __init__(self, fits_on: int) -> None:
        self.fits_on = fits_on
        self.calls: dict[tuple[int, str], int] = {}

    def __call__(self, c, ranks) -> Evaluation:
        outcome = "timed" if len(ranks) <= self.fits_on else "early" if c.zero == 0 else "late"
        self.calls[len(ranks), outcome] = self.calls.get((len(ranks), outcome), 0) + 1
        if outcome == "early":
            raise RefusedBeforeTiming("does not fit", field="train_layout")
        if outcome == "late":
            raise RlsimError("refused while timing", field="layout")
        return Evaluation(100.0 / c.tp + c.micro_batch, 1.0, 0.4, 1e9, 0.0)

    def on(self, devices: int, outcome: str) -> int:
        return self.calls.get((devices, outcome), 0)


def test_a_search_in_which_nothing_fits_carries_the_cost_of_what_it_evaluated():
    """plan_training raised a bare RlsimError: a re-plan charged such a search one evaluation."""
    ev = _Counting(fits_on=0)
    with pytest.raises(NoLayoutFits, match="no training layout of fake fits on 64 devices") as err:
        plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, evaluator=ev, params=PARAMS)
    early, late = ev.on(64, "early"), ev.on(64, "late")
    assert early > 0 and late > 0
    assert err.value.planning_cost_s == pytest.approx(_charge(late, early))


def test_a_replan_charges_the_search_on_every_survivor_that_found_nothing():
    """Node 0 fails: no layout fits on the 56 survivors, so node 7 is left idle and the 48 take one.
    The search on 56 was charged eval_cost_s (0.01 s) in all; now its evaluations and its fixed part."""
    ev = _Counting(fits_on=48)
    rp = replan_on_failure(FakeModel(), TOPO, 336, 4096, failed=[0], ranks=range(64), space=SPACE, params=PARAMS,
                           evaluator=ev)
    assert len(rp.survivors) == 48 and rp.dropped == list(range(8)) + list(range(56, 64))
    nothing = _charge(ev.on(56, "late"), ev.on(56, "early"))
    assert ev.on(56, "early") > 0 and ev.on(56, "late") > 0 and ev.on(56, "timed") == 0
    assert rp.planning_cost_s == pytest.approx(nothing + rp.plan.planning_cost_s)
    assert rp.plan.planning_cost_s == pytest.approx(_charge(rp.plan.evaluated, 0))   # on 48 all are timed


def test_a_replan_in_which_nothing_fits_anywhere_says_what_it_spent():
    ev = _Counting(fits_on=0)
    with pytest.raises(NoLayoutFits, match="no layout fits on the 56 surviving devices") as err:
        replan_on_failure(FakeModel(), TOPO, 336, 4096, failed=[0], ranks=range(64), space=SPACE, params=PARAMS,
                          evaluator=ev)
    sizes = sorted({devices for devices, _ in ev.calls})
    searches = 7   # on 56, 48, ..., 8 devices: every one made, whatever it enumerated
    assert sizes and max(sizes) == 56
    timed = sum(n for (_, outcome), n in ev.calls.items() if outcome == "late")
    early = sum(n for (_, outcome), n in ev.calls.items() if outcome == "early")
    assert err.value.planning_cost_s == pytest.approx(_charge(timed, early, searches))


def _base(refuse: set[int]):
    """A stand-in for the re-plan's TrainingEvaluator: refuses before timing the layouts of a tp in ``refuse``."""
    def evaluate(c, ranks) -> Evaluation:
        if c.tp in refuse:
            raise RefusedBeforeTiming("no room beside the tail", field="schedule.kind")
        return Evaluation(100.0 / c.tp + c.micro_batch, 1.0, 0.4, 1e9, 0.0)
    evaluate.micro_batch_counts = None
    return evaluate


def test_the_schedules_check_charges_a_refusal_before_timing_as_such_and_each_query_it_timed():
    """LlmCosts.accept_train_layout behind the evaluator: its refusals before timing a step (the rollout
    phase, a batch's memory) were charged as timed candidates (about 3,600 of the default scenario's
    widened re-plan's 3,944 evaluations). A refusal by the evaluator after the check timed the latest
    batches is a timed candidate; one where the check timed nothing (no batch trained yet) is not. Each
    train_step_cost query the check timed is charged as a timed evaluation: a candidate whose check timed
    k batches and whose step was timed costs (k + 1) x eval_cost_s (it was charged one)."""
    from simulator.autoplan import _AcceptedFirst

    outcomes = {"early": 0, "late": 0, "after_timed": 0, "after_untimed": 0, "timed": 0}
    queries = {"check": 0, "step": 0}   # the train_step_cost queries made, counted where they are made

    def accept(layout: dict) -> int:
        if layout["tp"] == 1 and layout["zero"] == 0:
            outcomes["early"] += 1
            raise RefusedBeforeTiming("the rollout phase needs more", field="gpu_memory_utilization")
        if layout["tp"] == 1:
            outcomes["late"] += 1
            raise RlsimError("an aux pass does not fit", field="train_layout")
        # the fake times the latest batches only at micro-batch 1: three of them at tp 4, two elsewhere
        timed = (3 if layout["tp"] == 4 else 2) if layout["micro_batch"] == 1 else 0
        queries["check"] += timed
        if layout["tp"] == 8:
            outcomes["after_timed" if timed else "after_untimed"] += 1
        else:
            outcomes["timed"] += 1
        return timed

    base = _base({8})

    def step(c, ranks) -> Evaluation:
        out = base(c, ranks)
        queries["step"] += 1
        return out
    step.micro_batch_counts = None
    plan = plan_training(FakeModel(), TOPO, 128, 4096, space=SPACE, params=PARAMS,
                         evaluator=_AcceptedFirst(step, accept))
    naive_same = plan.evaluated - sum(outcomes.values())   # counted as the search counts them, not called
    assert all(outcomes.values()) and naive_same > 0
    early = outcomes["early"] + outcomes["after_untimed"]
    assert plan.refused_before_timing == early
    assert queries["step"] == outcomes["timed"]
    # every query made, a refusal raised after the check (its queries unknown) and a naive placement the
    # search did not evaluate again as one each, as the search charged them
    charged = queries["check"] + queries["step"] + outcomes["late"] + naive_same
    assert plan.planning_cost_s == pytest.approx(_charge(charged, early))
    assert charged > plan.evaluated - early   # one a candidate undercharged it
    assert plan.checks_timed == queries["check"] - outcomes["after_timed"]   # their first: the timed candidate


def test_the_first_try_with_room_is_charged_when_the_retry_runs(monkeypatch):
    """Colocated StaleSync re-plans first with room beside its tail; where nothing fits so, it retries
    without: the first try's searches were made, and were not charged."""
    from types import SimpleNamespace

    import simulator.autoplan as autoplan
    from simulator.hardware.topology import load_topology
    from simulator.planner import TrainChoice
    from simulator.planner.replan import Replan
    from simulator.scenario import load_scenario

    sc = load_scenario(None)   # the default scenario: colocated StaleSync
    assert autoplan.room_beside_tail(sc) is not None
    tries: list[bool] = []
    choice = TrainChoice(tp=2, pp=1, vpp=1, dp=4, ep=8, cp=1, zero=1, recompute="full", micro_batch=1, etp=1)

    def replan(model, topology, batch, row, *, evaluator, **kwargs):
        tries.append(evaluator.room_beside_tail is not None)   # accept=None: the TrainingEvaluator itself
        if tries[-1]:
            raise NoLayoutFits("no layout fits on the 16 surviving devices", field="failed", planning_cost_s=1.25)
        return Replan(SimpleNamespace(best=SimpleNamespace(choice=choice)), list(range(8)), [], 0.5)

    monkeypatch.setattr(autoplan, "replan_on_failure", replan)
    replanner = autoplan.PlannerReplanner(sc, load_topology(sc.topology))
    out = replanner.on_failure(list(range(16)), [0], {})
    assert tries == [True, False]
    assert out.planning_cost_s == pytest.approx(1.25 + 0.5)   # was 0.5


def test_accept_train_layout_refuses_before_timing_where_it_times_nothing(monkeypatch):
    """The rollout phase and each latest batch's memory are judged before any batch is timed
    (train_step_memory): a refusal there is RefusedBeforeTiming and no train_step_cost ran; a layout that
    fits is timed on the batches (True); before any batch trained nothing is timed (False)."""
    import simulator.rl.llm_costs as llm_costs
    from simulator.hardware.topology import load_topology
    from simulator.scenario import load_scenario

    workload = {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 32, "mini_batch_prompts": 32, "samples_per_prompt": 4}
    topo = {"preset": "dgx-h100", "nodes": 4}
    timed: list = []
    real = llm_costs.train_step_cost
    monkeypatch.setattr(llm_costs, "train_step_cost", lambda *a, **k: timed.append(a[1]) or real(*a, **k))

    def costs_of(*overrides: str):
        sc = load_scenario(None, workload=workload, topology=topo, schedule="colocated",
                           overrides=["schedule.failures=[{at_s: 150, fail: 'node:1'}]", *overrides])
        return llm_costs.LlmCosts(sc, load_topology(topo))

    costs = costs_of()
    fits = {"tp": 1, "pp": 1, "dp": 32, "zero": 1, "recompute": "full", "micro_batch": 1}
    assert costs.accept_train_layout(fits) == 0 and not timed   # no batch trained yet
    costs.train("actor", np.full(128, 8192), list(range(32)))
    timed.clear()
    with pytest.raises(RefusedBeforeTiming, match="does not fit in device memory"):
        costs.accept_train_layout({**fits, "recompute": "none", "micro_batch": 8})
    assert not timed
    assert costs.accept_train_layout(fits) == len(timed) == 1   # the one batch trained: one query
    costs.train("actor", np.full(128, 2048), list(range(32)))   # a second, of shorter samples
    timed.clear()
    assert costs.accept_train_layout(fits) == len(timed) == 2   # the latest and the longest sample's
    resident = costs_of("schedule.switch.offload_optimizer=false", "workload.rollout_layout.gpu_memory_utilization=0.9")
    resident.train("actor", np.full(128, 8192), list(range(32)))
    timed.clear()
    with pytest.raises(RefusedBeforeTiming, match="the rollout phase needs"):
        resident.accept_train_layout({**fits, "zero": 0})
    assert not timed


def test_accept_train_layout_counts_the_aux_pools_updates_it_timed(monkeypatch):
    """fuse: actor: the check times a PPO critic's update on the aux pool under the candidate layout too
    (aux_passes_fit): each a train_step_cost query, counted in what it returns as the batches are."""
    import simulator.rl.llm_costs as llm_costs
    from simulator.hardware.topology import load_topology
    from simulator.scenario import load_scenario

    workload = {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 32, "mini_batch_prompts": 32, "samples_per_prompt": 4,
                "algorithm": "ppo"}
    topo = {"preset": "dgx-h100", "nodes": 4}
    sc = load_scenario(None, workload=workload, topology=topo, schedule="colocated",
                       overrides=["schedule.failures=[{at_s: 150, fail: 'node:1'}]", "schedule.fuse=actor",
                                  "schedule.aux_fraction=0.25"])
    timed: list = []
    real = llm_costs.train_step_cost
    monkeypatch.setattr(llm_costs, "train_step_cost", lambda *a, **k: timed.append(a[1]) or real(*a, **k))
    costs = llm_costs.LlmCosts(sc, load_topology(topo))
    costs.train("actor", np.full(128, 4096), list(range(24)))
    costs.forward("critic", np.full(128, 4096), list(range(24, 32)))   # the aux pool's passes: the step's samples
    timed.clear()
    fits = {"tp": 2, "pp": 1, "dp": 12, "zero": 1, "recompute": "full", "micro_batch": 1}
    assert costs.accept_train_layout(fits) == len(timed) == 2   # the actor's batch, the critic's update
