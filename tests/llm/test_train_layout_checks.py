"""TrainLayout's fast path: a layout its shortcut takes as plainly valid is one the full checks pass,
and every other one still goes through them (the planner builds thousands; a performance trial)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.train_layout import DEFAULT_ORDER, TrainLayout

VALID = {"tp": st.integers(1, 64), "pp": st.integers(1, 8), "vpp": st.integers(1, 4), "ep": st.integers(1, 8),
         "cp": st.integers(1, 4), "micro_batch": st.integers(1, 16), "dp": st.one_of(st.none(), st.integers(1, 64)),
         "etp": st.one_of(st.none(), st.integers(1, 8)), "zero_shard_size": st.none(), "zero": st.integers(0, 3),
         "recompute": st.sampled_from(["none", "selective", "full"]),
         "sequence_parallel": st.sampled_from([None, True, False]), "ulysses_sp": st.booleans(),
         "order": st.just(DEFAULT_ORDER)}
# what a field may be instead: every one meets every field of an otherwise valid layout
WRONG = (0, -1, 1.0, True, "2", None, 4, "partial", 1, [*DEFAULT_ORDER], tuple(reversed(DEFAULT_ORDER)), ("tp", "dp"), 5)


def _outcome(fields: dict) -> str | None:
    try:
        TrainLayout(**fields)
    except RlsimError as exc:
        return exc.field
    return None


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries(VALID))
def test_the_shortcut_accepts_only_what_the_checks_accept(base):
    cases = [base] + [{**base, name: wrong} for name in sorted(VALID) for wrong in WRONG]
    fast = [_outcome(fields) for fields in cases]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TrainLayout, "_plainly_valid", lambda self: False)
        checked = [_outcome(fields) for fields in cases]
    assert fast == checked
