"""The low-batch share of _account_slots: the intervals whose occupancy min(n - j, cap) is below the
threshold are a suffix, found without the element-wise mask (the same intervals)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules.generation import _first_below


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300), cap=st.integers(1, 300),
       threshold=st.one_of(st.floats(-5, 400, allow_nan=False), st.integers(-5, 400).map(float)))
def test_first_below_starts_the_masked_suffix(n, cap, threshold):
    occupancy = np.minimum(n - np.arange(n + 1), cap)
    j = _first_below(n, cap, threshold)
    assert np.array_equal(occupancy < threshold, np.arange(n + 1) >= j)
