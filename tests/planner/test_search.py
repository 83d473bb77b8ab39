"""planner/search.py: how the training candidates are ranked."""


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
