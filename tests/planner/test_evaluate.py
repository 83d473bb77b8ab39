"""TrainingEvaluator's values found once a search (planner/evaluate.py): a choice's layout, a pool's
smallest HBM, the devices a candidate's count also trains on."""
from __future__ import annotations

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.planner import evaluate
from simulator.planner.base import TrainChoice
from simulator.planner.evaluate import TrainingEvaluator

MODEL = load_model("gpt-1.7b")


def _hetero():   # one node of each kind
    return load_topology("hetero-a100-h100", {"groups": {"a100": {"nodes": 1}, "h100": {"nodes": 1}}})


def test_a_choices_layout_is_made_once_and_is_the_one_made_anew():
    ev = TrainingEvaluator(MODEL, load_topology("dgx-h100", {"nodes": 1}), 64, 1024, sequence_parallel=False)
    choice = TrainChoice(2, 1, 1, 4, 1, 1, 1, "selective", 2, None, None)
    assert ev.layout(choice) is ev.layout(choice)
    assert ev.layout(choice) == ev._new_layout(choice)
    assert ev.layout(choice).sp is False and ev.layout(choice).dp == 4


def test_a_pools_smallest_hbm_is_asked_of_its_devices_once(monkeypatch):
    topo = _hetero()
    ev = TrainingEvaluator(MODEL, topo, 64, 1024)
    asked, original = [], evaluate.pool_devices

    def counted(topology, ranks):
        asked.append(tuple(ranks))
        return original(topology, ranks)

    monkeypatch.setattr(evaluate, "pool_devices", counted)
    ranks = list(range(topo.num_devices))
    expected = min(topo.device_spec(r).hbm_bytes for r in ranks)
    first = list(range(8))
    assert ev.smallest_hbm(ranks) == expected
    assert ev.smallest_hbm(list(ranks)) == expected
    assert ev.smallest_hbm(first) == topo.device_spec(0).hbm_bytes
    assert asked == [tuple(ranks), tuple(first)]


def test_the_devices_a_count_also_trains_on_are_asked_once_a_count():
    asked = []

    def also(n: int) -> int:
        asked.append(n)
        return n // 2

    ev = TrainingEvaluator(MODEL, load_topology("dgx-h100", {"nodes": 1}), 64, 1024, also_trains_on=also)
    assert [ev._also_trains_on(n) for n in (8, 4, 8, 4)] == [4, 2, 4, 2]
    assert asked == [8, 4]
    assert TrainingEvaluator(MODEL, load_topology("dgx-h100", {"nodes": 1}), 64, 1024,
                             also_trains_on=6)._also_trains_on(8) == 6
