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
