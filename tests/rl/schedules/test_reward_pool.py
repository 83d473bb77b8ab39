"""The job's shared rule-reward pool as a fluid server (rl/schedules/reward_pool.py)."""
import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules.reward_pool import RewardPool


def test_batches_in_order_are_first_come_first_served():
    pool = RewardPool()
    arrivals = [(0.0, 3.0), (1.0, 2.0), (10.0, 1.0), (10.5, 4.0)]
    done, previous = [], 0.0
    for at, work in arrivals:
        done.append(pool.serve(at, work))
        assert done[-1] == pytest.approx(max(at, previous) + work)       # closed form of FCFS
        previous = done[-1]
    assert done == pytest.approx([3.0, 5.0, 11.0, 15.0])
    assert (pool.starts, pool.ends) == ([0.0, 10.0], [5.0, 15.0])


def test_a_batch_handed_over_earlier_but_committed_later_fills_the_idle_time():
    pool = RewardPool()
    assert pool.serve(10.0, 5.0) == 15.0          # committed first, handed over at 10
    assert pool.serve(0.0, 12.0) == 17.0          # 10 s before it, the last 2 s after it
    assert pool.busy_s() == pytest.approx(17.0)
    assert (pool.starts, pool.ends) == ([0.0], [17.0])


def test_a_batch_smaller_than_the_pool_takes_a_sample_s_time_on_part_of_it():
    pool = RewardPool()
    assert pool.serve(0.0, 0.25, least_s=1.0) == 1.0    # a quarter of the pool for 1 s
    assert pool.serve(0.0, 0.25, least_s=1.0) == 1.0    # the next quarter, alongside
    assert pool.busy_s() == pytest.approx(0.5)
    assert pool.busy_s(0.2, 0.4) == pytest.approx(0.2) and pool.busy_s(1.0, 2.0) == 0.0


batches = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20), st.floats(0, 5)), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(batches)
def test_the_pool_never_does_more_than_its_capacity_and_never_idles_on_a_waiting_batch(items):
    pool = RewardPool()
    for at, work, least in items:
        before = RewardPool(list(pool.starts), list(pool.ends))
        done = pool.serve(at, work, least_s=least)
        assert done >= at + least - 1e-9 and done >= at + work - 1e-9
        if work > 0:
            filled = done if done > at + least else None
            if filled is not None:
                # the batch ran on every idle moment from its hand-over to its end
                assert filled - at == pytest.approx(work + before.busy_s(at, filled), abs=1e-6)
        starts, ends = pool.starts, pool.ends
        assert all(s < e for s, e in zip(starts, ends, strict=True))
        assert all(e < s for e, s in zip(ends, starts[1:], strict=False))      # disjoint, not touching
    assert pool.busy_s() == pytest.approx(sum(work for _, work, _ in items), abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=40), work=st.floats(0.01, 2.0),
       least=st.floats(0.0, 4.0), before=st.floats(0.0, 5.0))
def test_serving_in_order_as_arrays_is_serving_one_at_a_time(gaps, work, least, before):
    """RewardPool.serve_in_order (a running maximum) gives what serve gives sample by sample, and
    leaves the same busy time, on a pool idle from the first hand-over on."""
    import numpy as np
    at = np.cumsum(gaps) + before
    one, many = RewardPool(), RewardPool()
    one.serve(0.0, before), many.serve(0.0, before)         # a stretch that ends before the hand-overs
    expected = [one.serve(float(t), work, least_s=least) for t in at]
    got = many.serve_in_order(at, work, least_s=least)
    assert got is not None and got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert many.busy_s() == pytest.approx(one.busy_s(), rel=1e-9)
    assert all(a < b for a, b in zip(many.ends[:-1], many.starts[1:], strict=True))   # disjoint, joined where they touch
    assert many.serve_in_order(at[:1] - 1.0, work) is None     # busy after that hand-over: served one at a time


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.01, 2.0), st.floats(0.0, 4.0)), min_size=1,
                      max_size=40), before=st.floats(0.0, 5.0))
def test_serving_in_order_takes_each_hand_overs_own_work(items, before):
    """serve_in_order with one work and least time per hand-over (rule rewards priced by each
    sample's length): done_i = W_i + max over j <= i of (at_j - W_j-1) is serve's, one at a time."""
    import numpy as np
    gaps, work, least = (np.array(col) for col in zip(*items, strict=True))
    at = np.cumsum(gaps) + before
    one, many = RewardPool(), RewardPool()
    one.serve(0.0, before), many.serve(0.0, before)
    expected = [one.serve(float(t), float(w), least_s=float(x)) for t, w, x in zip(at, work, least, strict=True)]
    got = many.serve_in_order(at, work, least_s=least)
    assert got is not None and got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert many.busy_s() == pytest.approx(one.busy_s(), rel=1e-9)
    assert many.busy_s() == pytest.approx(before + float(work.sum()), rel=1e-9)    # the stretch before, then the work


def _served_around(pool: RewardPool, at: float, work: float, least: float) -> float:
    """serve() through its general path only (the gaps between the intervals busy after ``at``)."""
    if work <= 0:
        return at + least
    return pool._serve_around(at, work, least, bisect.bisect_right(pool.ends, at))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 20), st.sampled_from([0.0, 1e-300, 1e-12]) | st.floats(0, 5),
                          st.floats(0, 2)), min_size=1, max_size=40))
def test_a_pool_idle_after_the_hand_over_serves_as_the_general_path_does(steps):
    """serve()'s O(1) path (nothing busy after the hand-over: the last interval extended, or a new
    one) leaves the pool and answers as the general path, bit for bit: hand-overs mostly later than
    the last (the usual case), some earlier, zero work and work below a start's float resolution."""
    fast, general, now = RewardPool(), RewardPool(), 0.0
    for delta, work, least in steps:
        now += delta
        assert fast.serve(now, work, least) == _served_around(general, now, work, least)
        assert (fast.starts, fast.ends) == (general.starts, general.ends)
