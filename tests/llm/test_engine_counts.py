"""What a rollout engine counts beside its time (RolloutEngine.counts, inference.ENGINE_COUNTERS):
preemptions and the contexts they re-prefill, tokens prefilled, prompt tokens hit in the prefix
cache. Closed forms on the event loop and the array run, and the two paths against each other
(tests/llm/test_prefix_cache.py and test_engine_many.py compare them on random inputs too)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.llm import inference
from simulator.llm.inference import InferenceParams, ResumableRun, RolloutEngine, RolloutLayout
from tests.llm.test_prefix_cache import QWEN, _counting, _tiny_kv_device


def test_a_pool_too_small_for_two_full_contexts_preempts_one_and_counts_its_context():
    """Two sequences of P prompt and R response tokens on a pool of C tokens, P + R <= C < 2 (P + R):
    both are admitted (2 (P + 1) held), each step adds 2, so the step after k = (C - 2 (P + 1)) // 2
    + 1 decode steps does not fit and the newer is preempted with its context then, P + 1 + k
    (prompt, the prefill's token, k steps); the older runs alone to its end, then the newer comes
    back and prefills that context: one preemption, P + 1 + k re-prefilled, 3P + 1 + k prefilled."""
    engine = RolloutEngine(QWEN, _tiny_kv_device(3000), RolloutLayout(max_num_seqs=4))
    capacity = engine.capacity
    prompt = capacity // 4
    response = capacity - prompt - 10
    assert prompt + response <= capacity < 2 * (prompt + response) and engine.seq_kv == 0
    engine.add_many(range(2), [prompt] * 2, [response] * 2, 0.0)
    assert not engine._fast_ok()   # the pool binds: the event loop
    tokens = _counting(engine)
    done = engine.run()
    k = (capacity - 2 * (prompt + 1)) // 2 + 1
    counts = engine.counts()
    assert counts["preemptions"] == engine.preemptions == 1
    assert counts["preemption_reprefill_tokens"] == prompt + 1 + k
    assert counts["prefilled_tokens"] == sum(tokens) == 2 * prompt + prompt + 1 + k
    assert [s for s, _ in done] == [0, 1]
    assert counts["prompt_hit_tokens"] == counts["evicted_context_tokens"] == counts["eviction_reprefill_tokens"] == 0


@pytest.mark.parametrize("path", ["events", "arrays"])
def test_group_samples_count_the_prompt_tokens_they_hit(monkeypatch, path):
    """n samples of a prompt P admitted together with prefix caching: the first prefills P, each other
    one its prompt's last token (a hit of P - 1): P + n - 1 prefilled, (n - 1)(P - 1) hit; no cache:
    n P prefilled, none hit. On both engine paths."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 10**9 if path == "events" else 1)
    n, prompt = 6, 700
    for caching, prefilled, hit in ((True, prompt + n - 1, (n - 1) * (prompt - 1)), (False, n * prompt, 0)):
        engine = RolloutEngine(QWEN, _tiny_kv_device(60000), RolloutLayout(max_num_seqs=8),
                               InferenceParams(enable_prefix_caching=caching))
        engine.add_many(range(n), [prompt] * n, [40 + 7 * i for i in range(n)], 0.0, group_ids=[3] * n)
        assert engine._fast_ok() is (path == "arrays")
        tokens = _counting(engine)
        engine.run()
        counts = engine.counts()
        assert counts["prefilled_tokens"] == sum(tokens) == prefilled
        assert counts["prompt_hit_tokens"] == hit and counts["preemptions"] == 0


@pytest.mark.parametrize("every", [1, 3])
def test_counts_at_a_time_are_a_fresh_engines_run_to_then(monkeypatch, every):
    """ResumableRun.counts_at(now) (the array trace, or a copy advanced) equals the counts of a fresh
    engine advanced to ``now``, at every event time and between them, on both paths."""
    rng = np.random.default_rng(5)
    n = 24
    prompts, responses, groups = rng.integers(50, 400, n), rng.integers(5, 300, n), rng.integers(0, 4, n)
    params = InferenceParams(enable_prefix_caching=True)
    for device, least in ((_tiny_kv_device(60000), 1), (_tiny_kv_device(1500), 1), (_tiny_kv_device(60000), 10**9)):
        monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", least)

        def build(device=device) -> RolloutEngine:
            engine = RolloutEngine(QWEN, device, RolloutLayout(max_num_seqs=6), params)
            engine.add_many(range(n), prompts, responses, 0.0, group_ids=groups)
            return engine
        run = ResumableRun(build(), every)
        times = sorted({t for _, t in run.run()})
        whole = run.engine.counts()
        for now in [0.0, *times, *(np.array(times[:-1]) + np.diff(times) / 2).tolist(), times[-1] + 1.0]:
            fresh = build()
            fresh.advance_to(now)
            assert run.counts_at(now) == fresh.counts(), now
        assert run.counts_at(times[-1]) == whole


@pytest.mark.parametrize("path", ["events", "arrays"])
def test_a_resumed_partial_rollout_counts_its_context_prefilled_again(monkeypatch, path):
    """Sequences added with tokens generated before (a partial rollout resumed: add(..., generated))
    prefill prompt + generated at their first admission: resume_reprefill_tokens is that sum; fresh
    ones count none. On both engine paths, and counts_at of a ResumableRun at every event agrees with
    a fresh engine advanced to then."""
    monkeypatch.setattr(inference, "FAST_RUN_MIN_SEQUENCES", 10**9 if path == "events" else 1)
    prompts, responses, generated = [300, 200, 500, 120], [400, 90, 700, 60], [0, 30, 250, 0]

    def build() -> RolloutEngine:
        engine = RolloutEngine(QWEN, _tiny_kv_device(60000), RolloutLayout(max_num_seqs=8))
        engine.add_many(range(4), prompts, responses, 0.0, generated)
        return engine
    engine = build()
    assert engine._fast_ok() is (path == "arrays")
    run = ResumableRun(engine, 1)
    times = sorted({t for _, t in run.run()})
    counts = engine.counts()
    assert counts["resume_reprefill_tokens"] == (200 + 30) + (500 + 250)
    assert counts["prefilled_tokens"] == sum(prompts) + sum(generated)
    for now in [0.0, *times]:
        fresh = build()
        fresh.advance_to(now)
        assert run.counts_at(now) == fresh.counts(), now


def test_a_preempted_sequence_is_not_a_resumed_one_and_an_interrupt_forgets_the_resumption():
    """The preemption of the first test counts as a preemption only (its re-admission is not a
    resumption); a resumed sequence still waiting at an interrupt leaves nothing to count after it."""
    engine = RolloutEngine(QWEN, _tiny_kv_device(3000), RolloutLayout(max_num_seqs=4))
    prompt = engine.capacity // 4
    engine.add_many(range(2), [prompt] * 2, [engine.capacity - prompt - 10] * 2, 0.0)
    engine.run()
    assert engine.counts()["preemptions"] == 1 and engine.counts()["resume_reprefill_tokens"] == 0
    waiting = RolloutEngine(QWEN, _tiny_kv_device(60000), RolloutLayout(max_num_seqs=1))
    waiting.add_many(range(2), [100, 100], [50, 50], 0.0, [0, 20])
    waiting.advance_to(1e-9)                          # the first admitted, the resumed one waits
    waiting.interrupt(1e-9)
    assert not waiting._resuming
    waiting.run()
    assert waiting.counts()["resume_reprefill_tokens"] == 0


@pytest.mark.parametrize("seed", range(6))
def test_a_preempted_sequence_readmitted_beside_its_sibling_is_a_reprefill_not_a_prompt_hit(seed):
    """Groups of 4 samples of one prompt on a pool too small for them (preemptions on the event loop, then
    the array run once it cannot bind): a prompt's first admissions hit at most (members - 1) x (P - 1) of
    its tokens (the first member prefills it, each later one its last token). A preempted sequence readmitted
    while a sibling holds the prompt computes its context less the prompt: that is its re-prefill
    (preemption_reprefill_tokens), not a prompt hit (its prompt was prefilled once already; counted a hit,
    these seeds read 1.4-3.3x the bound). So hits + tokens prefilled - re-prefills is every prompt once."""
    rng = np.random.default_rng(seed)
    groups, size = int(rng.integers(2, 6)), 4
    prompts = rng.integers(50, 400, groups)
    engine = RolloutEngine(QWEN, _tiny_kv_device(int(rng.integers(2500, 6000))), RolloutLayout(max_num_seqs=8))
    engine.add_many(range(groups * size), np.repeat(prompts, size), rng.integers(100, 2000, groups * size), 0.0,
                    group_ids=np.arange(groups * size) // size)
    engine.run()
    counts = engine.counts()
    assert counts["preemptions"] > 0 and counts["preemption_reprefill_tokens"] > 0
    assert counts["prompt_hit_tokens"] <= int(((size - 1) * (prompts - 1)).sum())
    assert counts["prompt_hit_tokens"] + counts["prefilled_tokens"] - counts["preemption_reprefill_tokens"] == \
        int(prompts.sum()) * size
