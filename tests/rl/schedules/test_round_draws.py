"""RoundDraws holds only the last KEEP_ROUNDS rounds asked (memory flat over a run); a round asked
again after it was let go is drawn anew from the generator state of its first draw: the same
sequences, in any order of asking, and the run's generator goes on as if nothing was re-drawn."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.schedules import batches
from simulator.rl.schedules.batches import RoundDraws

from .test_schedules import scenario


def _lognormal(rng, n_prompts, n, step):
    return np.ceil(rng.lognormal(6.0, 0.8, size=(n_prompts, n))).astype(int)


def _draws(seed: int, workload: dict | None = None) -> RoundDraws:
    sc = scenario("colocated", prompts=6, n=3, workload=workload)
    return RoundDraws(sc, np.random.default_rng(seed), _lognormal, _lognormal)


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


@settings(max_examples=30, deadline=None)
@given(asks=st.lists(st.integers(0, 12), min_size=1, max_size=40), seed=st.integers(0, 2**16),
       dapo=st.booleans())
def test_any_order_of_asking_gives_the_first_draws(asks, seed, dapo):
    workload = {"algorithm": "dapo", "dynamic_sampling": {"keep_fraction": 0.5}} if dapo else None
    reference, asked = _draws(seed, workload), _draws(seed, workload)
    first = [reference.draw(q) for q in range(13)]     # in round order, every round held
    for q in asks:
        assert _same(asked.draw(q), first[q])
        assert len(asked._draws) <= batches.KEEP_ROUNDS
    asked.draw(12)
    # the run's generator is where an in-order draw of 13 rounds leaves it
    assert asked.rng.random() == reference.rng.random()


def test_a_response_stops_where_max_model_len_leaves_no_room():
    # the engine cuts a response at max_model_len - prompt (vLLM; NeMo RL: T-max): the drawn sample
    # is cut the same, so training and every count see the tokens the engine generated
    free, capped = _draws(3), _draws(3, {"inference": {"max_model_len": 3000}})
    a, b = free.draw(0), capped.draw(0)
    assert np.array_equal(a.prompt_len, b.prompt_len)
    assert np.array_equal(b.target_len, np.minimum(a.target_len, 3000 - a.prompt_len))
    assert (a.target_len + a.prompt_len > 3000).any() and (b.target_len + b.prompt_len <= 3000).all()


def test_a_prompt_at_max_model_len_is_refused():
    import pytest

    from simulator.errors import RlsimError
    with pytest.raises(RlsimError) as e:
        # a law without a max (the load-time check needs one): the draw refuses the long prompt
        _draws(3, {"inference": {"max_model_len": 50},
                   "prompt_length": {"dist": "lognormal", "median": 512, "sigma": 0.5}}).draw(0)
    assert e.value.field == "workload.inference.max_model_len"


def test_a_prompt_cap_at_or_above_max_model_len_is_refused_at_load():
    import pytest

    from simulator.errors import RlsimError
    with pytest.raises(RlsimError) as e:
        scenario("colocated", workload={"prompt_length": {"dist": "lognormal", "median": 100, "sigma": 0.5,
                                                          "max": 4096}, "inference": {"max_model_len": 4096}})
    assert "prompt_length.max=4096" in str(e.value) and "max_model_len" in str(e.value)
