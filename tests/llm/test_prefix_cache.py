"""Prefix-cache hits beyond one admission step: a sample of a prompt (group id) admitted while
another sample of it runs - admitted at the same step, or later (max_num_seqs or the KV cache
split the group over several admissions), or re-admitted after a preemption - hits the prompt's
pages that member holds (vLLM v1/core/kv_cache_manager.py get_computed_blocks, block_pool.py:
a cached block is found by its hash while any request holds it; SGLang's radix cache alike). It
computes only its tokens past the prompt, at least its last one, and shares the pages while any
member runs. Pages whose last member left are not modelled as cached (docs/cost-models-inference.md,
"Prefix caching"). Closed forms on both engine paths (event loop and array run), the two paths
against each other on random inputs, and the frozen engine (hits within one step only) as a bound."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.llm import inference
from simulator.llm.inference import InferenceParams, ResumableRun, RolloutEngine, RolloutLayout
from tests.llm import reference_engine as frozen
from tests.llm.test_engine_vs_frozen import DEVICE, MODELS, Case, cases

QWEN = MODELS["qwen2.5-7b"]


def _counting(engine) -> list[int]:
    """The tokens each prefill of ``engine`` computes, recorded as it runs (one entry an admission
    step; the array run's prefill_many_s an entry per step too)."""
    tokens: list[int] = []
    cost = engine.cost
    one, many = cost.prefill_s, getattr(cost, "prefill_many_s", None)   # (the frozen engine: no array run)

    def prefill_s(t, a, k=1):
        tokens.append(int(t))
        return one(t, a, k)

    def prefill_many_s(t, a, k):
        tokens.extend(int(x) for x in t.tolist())
        return many(t, a, k)

    cost.prefill_s, cost.prefill_many_s = prefill_s, prefill_many_s
    return tokens


@pytest.fixture(params=["events", "arrays"])
def path(request, monkeypatch) -> str:
    """Each closed form on the event loop and on the array run (a run of any size takes it)."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 10**9 if request.param == "events" else 1)
    return request.param


def _group(max_num_seqs: int, prompt: int, responses: list[int], caching: bool = True, device=DEVICE):
    engine = RolloutEngine(QWEN, device, RolloutLayout(max_num_seqs=max_num_seqs),
                           InferenceParams(enable_prefix_caching=caching))
    engine.add_many(range(len(responses)), [prompt] * len(responses), responses, 0.0,
                    group_ids=[5] * len(responses))
    return engine


@pytest.mark.parametrize("n", [2, 6, 16])
def test_later_samples_hit_the_pages_a_running_sample_holds(path, n):
    """n samples of a prompt P on two slots: the first runs long, the others one after another in the
    second slot, each admitted at its own step while the first holds the prompt's pages: P + (n - 1)
    tokens prefilled in all (each later one its prompt's last token), against n x P without caching
    (and before: P + 1 + (n - 2) x P, a hit only beside the first at its step)."""
    prompt = 1000
    responses = [50 * n + 100] + [7 + 3 * i for i in range(n - 1)]
    engine = _group(2, prompt, responses)
    tokens = _counting(engine)
    assert engine._fast_ok() is (path == "arrays")
    done = engine.run()
    assert sorted(s for s, _ in done) == list(range(n)) and done[-1][0] == 0
    assert sum(tokens) == prompt + (n - 1) and len(tokens) == n - 1   # the first two at once, then one a step
    off = _group(2, prompt, responses, caching=False)
    off_tokens = _counting(off)
    off.run()
    assert sum(off_tokens) == n * prompt
    old = frozen.RolloutEngine(QWEN, DEVICE, RolloutLayout(max_num_seqs=2), InferenceParams())
    old.add_many(range(n), [prompt] * n, responses, 0.0, group_ids=[5] * n)
    old_tokens = _counting(old)
    old.run()
    assert sum(old_tokens) == prompt + 1 + (n - 2) * prompt


def test_a_sample_admitted_after_the_last_member_left_prefills_the_prompt_again(path):
    """The named limit: one slot, so each sample starts after the one before finished and freed the
    prompt's pages; vLLM would still hit them until the pool reuses the freed blocks, rlsim takes
    them as gone: n x P tokens."""
    engine = _group(1, 800, [20, 30, 40, 50])
    tokens = _counting(engine)
    engine.run()
    assert tokens == [800] * 4


def test_the_hit_shares_the_pages_too(path):
    """Two slots, a prompt of more than half the KV cache: the first sample runs long, the second
    finishes at once, and the third, admitted at its finish, holds only its own tokens beside the
    first's prompt pages: it runs beside the first without a preemption. The frozen engine (a hit
    only beside the first at its step) gave it a copy of the prompt, which waited for the first."""
    device = _tiny_kv_device(6000)
    capacity = _group(2, 1, [1], device=device).capacity
    prompt, responses = capacity // 2 + 100, [300, 5, 200]
    assert 2 * prompt > capacity and prompt + sum(responses) < capacity
    engine = _group(2, prompt, responses, device=device)
    tokens = _counting(engine)
    done = dict(engine.run())
    assert engine.preemptions == 0 and done[2] < done[0]
    assert tokens == [prompt + 1, 1]
    old = frozen.RolloutEngine(QWEN, device, RolloutLayout(max_num_seqs=2), InferenceParams())
    old.add_many(range(3), [prompt] * 3, responses, 0.0, group_ids=[5] * 3)
    old_tokens = _counting(old)
    old_done = dict(old.run())
    assert old_done[2] > old_done[0] and old_tokens == [prompt + 1, prompt]


def _tiny_kv_device(tokens: int):
    """An H100 whose memory holds the weights, the workspace and about ``tokens`` KV tokens."""
    params = InferenceParams()
    hbm = (QWEN.weight_bytes(2) + params.workspace_bytes + tokens * QWEN.kv_bytes_per_token(2)) / 0.9
    return DEVICE.replace(hbm_bytes=hbm)


def test_a_preempted_sample_readmitted_beside_its_group_hits_its_prompt():
    """Three sequences on a KV cache that fills: X (its own prompt), then two samples A0, A1 of a
    prompt P (A1 holding only its last prompt token and its own beyond A0's pages). The cache
    overflows after floor((C - held) / 3) + 1 steps; the newest, A1, is preempted with its tokens g;
    X finishes, and A1 comes back while A0 runs: it computes only its g tokens past the prompt
    (vLLM hits the prompt's blocks A0 holds and recomputes the rest), not P + g; the two then fit
    until A0 finishes."""
    engine = RolloutEngine(QWEN, _tiny_kv_device(3000), RolloutLayout(max_num_seqs=8))
    capacity, x_prompt, steps = engine.capacity, 100, 50
    prompt = capacity - 3 * steps - x_prompt - 4   # held after the first prefill: x + 1 + P + 1 + 2
    engine.add_many(range(3), [x_prompt, prompt, prompt], [steps + 10, 2 * steps, 3 * steps], 0.0,
                    group_ids=[-1, 9, 9])
    tokens = _counting(engine)
    done = engine.run()
    assert engine.preemptions == 1
    g = 1 + steps + 1   # its prefill's token, then steps + 1 steps (the one that overflows)
    assert tokens == [x_prompt + prompt + 1, g]
    assert [s for s, _ in done] == [0, 1, 2]


def test_the_shared_pages_of_a_group_of_mixed_prompt_lengths_follow_the_longest():
    """Members of a group with different prompts (resumed samples re-prompted with their tokens): the
    running members' tokens in each other's pages are each one's prompt but its last token, the longest
    once (_set_shared, kept as a running sum, largest and its count); checked against that sum at every
    event while the longest members leave first and last."""
    prompts, responses = [300, 120, 300, 50, 120, 80], [40, 5, 90, 60, 7, 200]
    engine = RolloutEngine(QWEN, DEVICE, RolloutLayout(max_num_seqs=4), InferenceParams(enable_prefix_caching=True))
    engine.add_many(range(len(prompts)), prompts, responses, 0.0, group_ids=[7] * len(prompts))
    seen = set()
    while (at := engine.next_event_time()) != math.inf:
        engine.advance_to(at)
        cached = [prompts[s] - 1 for s in range(len(prompts)) if engine._state[s] == inference._RUNNING]
        assert engine._shared == (sum(cached) - max(cached) if cached else 0)
        seen.add(len(cached))
    assert engine._shared == 0 and not engine._share_sets and not engine._share_cached
    assert len(seen) > 2   # members came and went


def _grouped(case: Case, spread: int) -> Case:
    """The case with its sequences' groups folded to ``spread`` prompts (a prompt's samples spread
    over several admissions when max_num_seqs is below the group)."""
    adds = [(t, [(p, r, g, i % spread) for i, (p, r, g, _) in enumerate(batch)]) for t, batch in case.adds]
    params = case.params.model_copy(update={"enable_prefix_caching": True})
    return Case(case.model, case.layout, params, adds)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(), spread=st.integers(1, 4), frac=st.floats(0.0, 1.05), every=st.integers(1, 5))
def test_the_event_loop_and_the_array_run_agree(monkeypatch, case, spread, frac, every) -> None:
    """Samples of few prompts over several admissions (small max_num_seqs, a tight KV cache,
    preemptions, staggered adds): the array run equals the event loop bit for bit - finishes,
    busy time, tokens, clock, counts (prefilled and hit tokens) - and a ResumableRun's interrupt
    and counts at a time (the array trace) a fresh engine's."""
    case = _grouped(case, spread)
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 10**9)
    loop = case.build(RolloutEngine)
    done = loop.run()
    state = (loop.t, loop.busy_s, loop.generated_tokens, loop.preemptions, loop.counts())
    assert loop._shared == 0 and not loop._share_sets
    now = frac * max(t for _, t in done)
    # (interrupts of one add only, as tests/llm/test_engine_vs_frozen.py: an interrupt inside a
    # prefill of a later add at the same time loses an earlier prefill's finish, on main too)
    fresh = case.build(RolloutEngine).interrupt(now) if len(case.adds) == 1 else None
    advanced = case.build(RolloutEngine)
    advanced.advance_to(now)
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 1)
    arrays = case.build(RolloutEngine)
    assert arrays.run() == done
    assert (arrays.t, arrays.busy_s, arrays.generated_tokens, arrays.preemptions, arrays.counts()) == state
    run = ResumableRun(case.build(RolloutEngine), every)
    assert run.run() == done
    if fresh is not None:
        assert run.interrupt_at(now).partial == fresh.partial
    if now >= case.adds[-1][0]:   # (a fresh engine's adds ran it to the last one's time)
        assert run.counts_at(now) == advanced.counts()


@settings(max_examples=60, deadline=None)
@given(seqs=st.lists(st.tuples(st.integers(1, 400), st.integers(1, 300), st.integers(0, 3)), min_size=1, max_size=40),
       max_num_seqs=st.integers(1, 12))
def test_hits_never_compute_more_than_the_same_step_hits_did(seqs, max_num_seqs) -> None:
    """On a roomy KV cache (no preemption: the same admissions whatever is shared) a run computes
    at most the frozen engine's prefill tokens (hits within one admission step only), at least one
    token an admission, and exactly as many when max_num_seqs admits everything at once."""
    p, r, grp = (list(x) for x in zip(*seqs, strict=True))
    layout = RolloutLayout(max_num_seqs=max_num_seqs)
    new, old = RolloutEngine(QWEN, DEVICE, layout), frozen.RolloutEngine(QWEN, DEVICE, layout)
    counts = []
    for engine in (new, old):
        engine.add_many(range(len(p)), p, r, 0.0, group_ids=grp)
        counts.append(_counting(engine))
        engine.run()
    assert new.preemptions == old.preemptions == 0
    assert len(counts[0]) == len(counts[1])
    assert math.ceil(len(p) / max_num_seqs) <= len(counts[0])
    assert len(p) <= sum(counts[0]) <= sum(counts[1])
    if max_num_seqs >= len(p):
        assert counts[0] == counts[1]
    # the pool: with caching the prompt's pages are held once (never more slots than without)
    assert new.generated_tokens == old.generated_tokens == sum(r)


def test_the_shared_pages_add_up_while_members_come_and_go():
    """_shared (the running members' tokens in each other's pages) at each event equals its closed
    form: per group with m running members of prompt P, (m - 1) x (P - 1)."""
    engine = _group(3, 400, [100, 10, 20, 30, 40, 200, 5])
    while (at := engine.next_event_time()) != math.inf:
        engine.advance_to(at)
        running = [s for s in range(len(engine._id)) if engine._state[s] == inference._RUNNING]
        assert engine._shared == max(0, len(running) - 1) * 399
        assert sorted(engine._share_sets.get(5, [])) == running
    assert engine._shared == 0 and not engine._share_sets and not engine._share_of
    np.testing.assert_equal(engine.generated_tokens, 405)
