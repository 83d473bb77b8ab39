"""TrainStep's batch pick: oldest_first gives the set np.lexsort((ready, age))[:n] gives (ties in
age and in ready time included), in ascending order."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules.training import oldest_first


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(0, 80), n=st.integers(1, 90), ages=st.integers(1, 4),
       distinct_ready=st.integers(1, 12), float_age=st.booleans())
def test_oldest_first_is_the_lexsort_prefix(seed, size, n, ages, distinct_ready, float_age):
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(10 * size + 1, size, replace=False))
    age = rng.integers(5, 5 + ages, size)
    ready = rng.integers(0, distinct_ready, size) * 0.25      # ties on purpose
    got = oldest_first(rows, age.astype(float) if float_age else age, ready, n)
    assert got.tolist() == np.sort(rows[np.lexsort((ready, age))[:n]]).tolist()
