"""planner/arguments.py: the planner's Python entry points name a bad argument (a new-user trial
met AttributeError, ZeroDivisionError and IndexError there, and 'no layout fits' for global_batch=0)."""
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.planner.rollout import plan_rollout
from simulator.planner.search import plan_training

MODEL = load_model("qwen2.5-7b")
TOPOLOGY = load_topology({"preset": "dgx-h100", "nodes": 1})


@pytest.mark.parametrize(("keywords", "field"), [
    ({"global_batch": 0}, "global_batch"), ({"global_batch": -4}, "global_batch"), ({"global_batch": 2.5}, "global_batch"),
    ({"seq_len": 0}, "seq_len"), ({"ranks": []}, "ranks"), ({"ranks": [0, 0, 1, 1]}, "ranks"), ({"ranks": [99]}, "ranks"),
    ({"top": 0}, "top"), ({"top": -1}, "top"), ({"space": {"tp": [2], "tpp": [1]}}, "space.tpp"),
    ({"space": 3}, "space"), ({"model": object()}, "model"), ({"topology": object()}, "topology"),
    ({"model": {"preset": "qwen2.5-7b", "num_hiden_layers": 20}}, "model.num_hiden_layers")])
def test_plan_training_names_a_bad_argument(keywords, field):
    arguments = {"model": MODEL, "topology": TOPOLOGY, "global_batch": 64, "seq_len": 4096, **keywords}
    with pytest.raises(RlsimError) as caught:
        plan_training(**arguments)
    assert caught.value.field == field


def test_a_model_and_topology_by_name_and_a_space_as_a_mapping_are_taken():
    plan = plan_training("qwen2.5-7b", {"preset": "dgx-h100", "nodes": 1}, 64, 4096, space={"tp": [2]}, top=2)
    assert len(plan.candidates) == 2 and all(c.choice.tp == 2 for c in plan.candidates)


def test_plan_rollout_names_a_bad_target_and_ranks():
    for keywords, field in (({"target_tokens_per_s": -5}, "target_tokens_per_s"), ({"ranks": []}, "ranks")):
        with pytest.raises(RlsimError) as caught:
            plan_rollout(MODEL, TOPOLOGY, **keywords)
        assert caught.value.field == field


def test_numpy_whole_numbers_are_ranks_and_counts():
    """ranks=np.arange(8) was refused as "ranks [np.int64(0), ...] are not devices of the topology
    (0..7)", which they are; global_batch=np.int64(64) as "must be a whole number"."""
    import numpy as np
    plain = plan_training(MODEL, TOPOLOGY, 64, 4096, ranks=list(range(8)), top=2)
    given = plan_training(MODEL, TOPOLOGY, np.int64(64), np.int64(4096), ranks=np.arange(8), top=np.int64(2))
    assert [c.choice for c in given.candidates] == [c.choice for c in plain.candidates]


def test_ranks_that_are_not_whole_numbers_are_named_as_such():
    """np.arange(4, 8.0) was refused as "ranks [4.0, ...] are not devices of the topology (0..7)"."""
    import numpy as np
    with pytest.raises(RlsimError, match="not whole numbers") as caught:
        plan_rollout(MODEL, TOPOLOGY, ranks=np.arange(4, 8.0))
    assert caught.value.field == "ranks"
    with pytest.raises(RlsimError, match=r"not devices of the topology \(0..7\)"):
        plan_rollout(MODEL, TOPOLOGY, ranks=[7, 8])
