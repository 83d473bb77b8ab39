"""balanced_order against the plain LPT greedy it implements (pop the lightest open group, push it
back while it has room): the same permutation, element for element, on random lengths."""
from __future__ import annotations

import heapq
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.packing import balanced_order


def _plain_lpt(lens: np.ndarray, b: int) -> np.ndarray:
    n = len(lens)
    m = math.ceil(n / b) if b > 0 else 1
    if b <= 1 or m <= 1:
        return np.arange(n)
    sizes = [b] * (m - 1) + [n - (m - 1) * b]
    heap = [(0, g) for g in range(m)]
    members: list[list[int]] = [[] for _ in range(m)]
    for i in np.argsort(-lens, kind="stable").tolist():
        total, g = heapq.heappop(heap)
        members[g].append(i)
        if len(members[g]) < sizes[g]:
            heapq.heappush(heap, (total + int(lens[i]), g))
    return np.array([i for grp in members for i in grp], np.int64)


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(1, 5000), min_size=0, max_size=300), b=st.integers(0, 40),
       as_float=st.booleans())
def test_balanced_order_is_the_plain_lpt_greedy(lens, b, as_float):
    arr = np.array(lens, float if as_float else np.int64)
    assert balanced_order(arr, b).tolist() == _plain_lpt(arr, b).tolist()


@settings(max_examples=80, deadline=None)
@given(lens=st.lists(st.integers(0, 60), min_size=0, max_size=400) | st.lists(st.integers(1, 30000), max_size=400),
       b=st.integers(2, 12), round_min=st.integers(1, 40))
def test_array_rounds_give_the_plain_lpt_greedy(lens, b, round_min):
    """Every round through the array pass (round_min 1) or handing over to the heap early; many
    ties (small lengths, zeros: the heap alone) and wide lengths."""
    arr = np.array(lens, np.int64)
    assert balanced_order(arr, b, array_round_min=round_min).tolist() == _plain_lpt(arr, b).tolist()


@settings(max_examples=80, deadline=None)
@given(lens=st.lists(st.integers(-5, 70_000), max_size=300) | st.lists(st.integers(0, 8), max_size=300),
       dtype=st.sampled_from([np.int64, np.int32, float]))
def test_longest_first_is_the_stable_argsort_of_minus_the_lengths(lens, dtype):
    """The uint16 radix path (integer spans under 2**16, many ties) and the general one alike."""
    from simulator.rl.packing import _longest_first
    arr = np.array(lens, dtype)
    assert _longest_first(arr).tolist() == np.argsort(-arr, kind="stable").tolist()
