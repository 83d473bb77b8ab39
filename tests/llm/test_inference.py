"""Rollout engine: closed form, published decode figures, preemption, dispatch, interrupts, errors."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import (
    InferenceParams,
    ResumableRun,
    RolloutEngine,
    RolloutLayout,
    StepCost,
    decode_step_time_s,
    decode_tokens_per_s,
    series_time_s,
    simulate_rollout,
    split_device,
)

LLAMA = load_model("llama3.1-8b")
QWEN = load_model("qwen2.5-7b")
A100 = get_device("a100-40gb")
H100 = get_device("h100")


def _tiny_kv_device(tokens: int, model=QWEN):
    """An H100 whose memory holds the weights, the workspace and about `tokens` KV tokens."""
    params = InferenceParams()
    hbm = (model.weight_bytes(2) + params.workspace_bytes + tokens * model.kv_bytes_per_token(2)) / 0.9
    return H100.replace(hbm_bytes=hbm)


# ---- closed form ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, prompt, response", [(1, 100, 50), (16, 512, 300), (64, 2000, 1000)])
def test_equal_sequences_take_exactly_the_arithmetic_series(n, prompt, response):
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add_many(range(n), [prompt] * n, [response] * n, 0.0)
    done = engine.run()
    cost = engine.cost
    prefill = cost.prefill_s(n * prompt, n * prompt * (prompt + 1) / 2, n)
    # After prefill every sequence holds prompt + 1 tokens; then response - 1 decode steps.
    steps = [cost.decode_step_s(n, n * (prompt + 1) + n * j) for j in range(response - 1)]
    expected = prefill + math.fsum(steps)
    assert {s for s, _ in done} == set(range(n))
    assert all(t == pytest.approx(expected, rel=1e-12) for _, t in done)
    # Memory bound here: the same total from the textbook sum a k + b k(k-1)/2.
    c0, c1, m0, m1, e = cost.decode_lines(n, n * (prompt + 1))
    k = response - 1
    if m0 > c0 and m1 >= c1:
        assert expected - prefill == pytest.approx(k * (m0 + e) + m1 * k * (k - 1) / 2, rel=1e-12)
    assert engine.busy_s == pytest.approx(expected, rel=1e-12)
    assert engine.generated_tokens == n * response


def test_series_splits_where_compute_overtakes_memory():
    lines = (1.0, 0.5, 3.0, 0.1, 0.2)  # compute line crosses memory at j = 5
    brute = sum(max(1.0 + 0.5 * j, 3.0 + 0.1 * j) + 0.2 for j in range(20))
    assert series_time_s(lines, 20) == pytest.approx(brute, rel=1e-12)
    lines = (3.0, 0.1, 1.0, 0.5, 0.0)  # memory crosses compute
    assert series_time_s(lines, 20) == pytest.approx(sum(max(3 + 0.1 * j, 1 + 0.5 * j) for j in range(20)))


def test_engine_never_steps_token_by_token(monkeypatch):
    calls = []
    original = StepCost.decode_lines
    monkeypatch.setattr(StepCost, "decode_lines", lambda self, n, k: calls.append(n) or original(self, n, k))
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add_many(range(8), [128] * 8, [20000 + 1000 * i for i in range(8)], 0.0)
    engine.run()
    assert len(calls) <= 3 * 8  # a handful per event, none per token (~27,000 decode steps ran)


# ---- published decode figures ------------------------------------------------------------------
def test_llama8b_a100_batch1_decode_near_75_tokens_per_s():
    # published-results.md V5: vLLM ~75 tokens/s on A100-40GB. Context of a short chat turn.
    rate = decode_tokens_per_s(LLAMA, A100, 1, 512)
    assert rate == pytest.approx(75, rel=0.15)


def test_decode_throughput_rises_with_batch_until_kv_or_compute_binds():
    rates = [decode_tokens_per_s(LLAMA, A100, b, 1024) for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert all(b > a for a, b in zip(rates, rates[1:], strict=False))
    gains = [b / a for a, b in zip(rates, rates[1:], strict=False)]
    assert all(g2 < g1 for g1, g2 in zip(gains, gains[1:], strict=False))  # diminishing returns
    assert 5.0 < rates[3] / rates[0] < 8.0  # published ~6.6x from 1 to 8 (we predict 7.6x)
    with pytest.raises(RlsimError, match="KV"):  # 256 x 1024 tokens exceed the 40 GB card's KV cache
        decode_tokens_per_s(LLAMA, A100, 256, 1024)
    # Short contexts let the batch grow until compute binds: never above the compute roofline.
    ceiling = A100.peak("bf16") * A100.gemm_efficiency / LLAMA.decode_flops_per_token(64)
    big = decode_tokens_per_s(LLAMA, A100, 2048, 64)
    assert big < ceiling and big > 0.6 * ceiling


def test_cloudmatrix_deepseek_r1_decode_per_npu():
    # published-results.md V3: 1,943 tokens/s per NPU at batch 96 per NPU, 4K KV, INT8 weights.
    # One rank per 910C die (EP over dies; 256 experts -> ep 256, one expert per die), 48 per die.
    die = split_device(get_device("ascend-910c"), 2)
    r1 = load_model("deepseek-r1")
    per_die = decode_tokens_per_s(r1, die, 48 * 256, 4096, ep=256, weight_dtype="int8", per_device=True)
    assert 2 * per_die == pytest.approx(1943, rel=0.25)
    tpot = decode_step_time_s(r1, die, 48 * 256, 4096, ep=256, weight_dtype="int8")
    assert tpot == pytest.approx(0.0494, rel=0.25)


# ---- continuous batching, preemption, dispatch -----------------------------------------------------
def test_kv_exhaustion_preempts_and_everything_still_finishes():
    device = _tiny_kv_device(6000)
    engine = RolloutEngine(QWEN, device, RolloutLayout())
    assert 6000 <= engine.capacity < 6100
    engine.add_many(range(10), [500] * 10, [1000] * 10, 0.0)
    done = engine.run()
    assert sorted(s for s, _ in done) == list(range(10))
    assert engine.preemptions > 0
    assert engine.generated_tokens == 10 * 1000


def _two_at(capacity_over: int):
    """Two sequences admitted together whose last decode step needs the KV cache's capacity plus
    ``capacity_over`` tokens: a decode step of a sequence with prompt + generated tokens c needs c
    slots (vLLM 0.11 v1/core/sched/scheduler.py: num_new_tokens = num_tokens - num_computed_tokens
    = 1, kv_cache_manager.allocate_slots: num_computed_tokens + num_new_tokens slots), so the last
    step of a response of r needs prompt + r - 1."""
    engine = RolloutEngine(QWEN, _tiny_kv_device(6000), RolloutLayout())
    response, need = 1000, engine.capacity + capacity_over
    first = need // 2 - response + 1
    second = need - first - 2 * (response - 1)
    engine.add_many(range(2), [first, second], [response] * 2, 0.0)
    return engine


def test_kv_exactly_at_capacity_runs_without_preemption():
    engine = _two_at(0)
    assert sorted(s for s, _ in engine.run()) == [0, 1]
    assert engine.preemptions == 0
    assert engine.generated_tokens == 2 * 1000


def test_one_token_past_capacity_preempts_the_newest_once():
    engine = _two_at(1)
    done = engine.run()
    assert engine.preemptions == 1
    assert [s for s, _ in done] == [0, 1]   # the newest (1) went back and re-prefilled
    assert engine.generated_tokens == 2 * 1000


def test_a_sequence_as_long_as_the_kv_cache_fits_and_one_token_more_is_refused():
    engine = RolloutEngine(QWEN, _tiny_kv_device(1000), RolloutLayout())
    engine.add(0, engine.capacity - 600, 600, 0.0)
    assert [s for s, _ in engine.run()] == [0]
    with pytest.raises(RlsimError, match="does not fit the KV cache"):
        engine.add(1, engine.capacity - 599, 600, engine.t)


def _group_of_four_at(capacity_over: int, response: int = 1000):
    """Four samples of one prompt admitted together with prefix caching, whose last decode step needs
    the KV cache's capacity plus ``capacity_over`` slots when the later three hold the prompt's pages
    but its last token once, beside the first (vLLM's block pool: a hit's blocks are the cached
    blocks themselves, v1/core/block_pool.py touch raises their ref_cnt; with pages of a token the
    hit is all but the last token, kv_cache_manager.py max_cache_hit_length = num_tokens - 1):
    (prompt - 1) + 4 x response slots."""
    engine = RolloutEngine(QWEN, _tiny_kv_device(6000), RolloutLayout())
    prompt = engine.capacity + capacity_over + 1 - 4 * response
    engine.add_many(range(4), [prompt] * 4, [response] * 4, 0.0, group_ids=[3] * 4)
    return engine


def test_a_prompts_samples_hold_its_pages_once():
    engine = _group_of_four_at(0)
    done = engine.run()
    assert sorted(s for s, _ in done) == [0, 1, 2, 3]
    assert len({t for _, t in done}) == 1   # admitted and run together (a copy of the prompt each: two waves)
    assert engine.preemptions == 0
    assert engine.generated_tokens == 4 * 1000


def test_a_prompts_samples_one_slot_past_capacity_preempt_the_newest_once():
    engine = _group_of_four_at(1)
    done = engine.run()
    assert engine.preemptions == 1
    assert sorted(s for s, _ in done) == [0, 1, 2, 3] and done[-1][0] == 3
    assert engine.generated_tokens == 4 * 1000


def test_the_prompts_pages_stay_while_a_sample_holds_them():
    """The first sample finishes early; the other keeps the prompt's pages, so a sequence that fits
    beside its own tokens only waits for it."""
    def engine_with_a_late_newcomer():
        engine = RolloutEngine(QWEN, _tiny_kv_device(6000), RolloutLayout())
        prompt = engine.capacity // 3
        engine.add_many(range(2), [prompt] * 2, [5, 400], 0.0, group_ids=[1, 1])
        return engine, prompt
    engine, prompt = engine_with_a_late_newcomer()
    first_done = min(t for s, t in engine.run() if s == 0)
    engine, prompt = engine_with_a_late_newcomer()
    engine.advance_to(first_done)
    engine.add(2, engine.capacity - prompt, 10, first_done)   # beside the second's prompt + 1: too long
    done = dict(engine.run())
    assert done[2] > done[1] and engine.preemptions == 0


@settings(max_examples=40, deadline=None)
@given(seqs=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300), st.integers(0, 3)), min_size=1, max_size=30),
       kv=st.sampled_from([700, 2000, 100000]), chunked=st.booleans(), later=st.integers(0, 30))
def test_shared_prompt_pages_never_overflow_the_pool_and_all_come_back(seqs, kv, chunked, later):
    """Samples of a prompt (group ids, even of unequal prompts) sharing pages, preempted, finishing
    early or late: at every event the pool holds at most its capacity (the running sequences' tokens
    less the pages they share and each one's newest token, whose KV its next step writes), every
    sequence finishes with all its tokens, and the idle engine holds no shared pages."""
    params = InferenceParams(chunked_prefill=chunked, max_num_batched_tokens=256 if chunked else None)
    engine = RolloutEngine(QWEN, _tiny_kv_device(kv), RolloutLayout(max_num_seqs=8), params)
    p, r, grp = (list(x) for x in zip(*seqs, strict=True))
    later = min(later, len(seqs))
    engine.add_many(range(later), p[:later], r[:later], 0.0, group_ids=grp[:later])
    done = []
    if later < len(seqs):
        done += engine.advance_to(0.05)
        engine.add_many(range(later, len(seqs)), p[later:], r[later:], 0.05, group_ids=grp[later:])
    while (at := engine.next_event_time()) != math.inf:
        done += engine.advance_to(at)
        assert engine._K - engine._shared - engine._n <= engine.capacity
        assert 0 <= engine._shared <= engine._K
    assert sorted(s for s, _ in done) == list(range(len(seqs)))
    assert engine.generated_tokens == sum(r)
    assert engine._shared == 0 and not engine._share_of and not engine._share_sets


def test_max_num_seqs_bounds_the_running_batch():
    engine = RolloutEngine(QWEN, H100, RolloutLayout(max_num_seqs=2))
    engine.add_many(range(4), [10] * 4, [100] * 4, 0.0)
    times = sorted(t for _, t in engine.run())
    assert times[0] == times[1] < times[2] == times[3]  # two waves of two


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 400)), min_size=1, max_size=40),
       instances=st.integers(1, 4), max_seqs=st.integers(1, 8),
       policy=st.sampled_from(["round_robin", "least_loaded"]), kv=st.sampled_from([800, 3000, 100000]),
       stagger=st.booleans())
def test_every_dispatched_sequence_finishes_exactly_once(lengths, instances, max_seqs, policy, kv, stagger):
    prompts = np.array([p for p, _ in lengths])
    responses = np.array([r for _, r in lengths])
    arrivals = np.arange(len(lengths)) * 0.05 if stagger else None
    layout = RolloutLayout(instances=instances, max_num_seqs=max_seqs)
    res = simulate_rollout(QWEN, _tiny_kv_device(kv), layout, prompts, responses, policy=policy,
                           arrival_s=arrivals)
    assert np.all(np.isfinite(res.finish_s)) and np.all(res.instance >= 0)
    assert res.generated_tokens == responses.sum()
    if arrivals is not None:
        assert np.all(res.finish_s > arrivals)
    assert np.all(res.busy_s <= res.makespan_s + 1e-9)


def test_incremental_api_matches_the_batch_run():
    prompts, responses = [100, 200, 50, 400], [300, 20, 800, 100]
    batch = RolloutEngine(QWEN, H100, RolloutLayout())
    batch.add_many(range(4), prompts, responses, 0.0)
    expected = dict(batch.run())
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    for i in range(4):
        engine.add(i, prompts[i], responses[i], 0.0)
    got = {}
    while (t := engine.next_event_time()) < math.inf:
        got.update(engine.advance_to(t))
    assert got == expected


def test_late_arrival_joins_at_a_step_boundary():
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add(0, 100, 1000, 0.0)
    engine.advance_to(1.0)
    engine.add(1, 100, 10, 1.0)
    done = dict(engine.run())
    assert 1.0 < done[1] < done[0]


def test_least_loaded_sends_new_work_to_the_idle_instance():
    prompts = np.array([100, 100, 100])
    responses = np.array([5000, 10, 10])
    arrivals = np.array([0.0, 0.0, 1.0])
    layout = RolloutLayout(instances=2)
    ll = simulate_rollout(QWEN, H100, layout, prompts, responses, policy="least_loaded", arrival_s=arrivals)
    rr = simulate_rollout(QWEN, H100, layout, prompts, responses, policy="round_robin", arrival_s=arrivals)
    assert ll.instance.tolist() == [0, 1, 1] and rr.instance.tolist() == [0, 1, 0]


def test_prompt_groups_stay_on_one_instance():
    prompts = np.full((6, 4), 64)
    responses = np.arange(24).reshape(6, 4) + 10
    res = simulate_rollout(QWEN, H100, RolloutLayout(instances=3), prompts, responses)
    assert all(len(set(res.instance.reshape(6, 4)[g])) == 1 for g in range(6))


def test_interrupt_returns_partial_sequences_that_resume():
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add_many(range(4), [100] * 4, [50, 2000, 3000, 4000], 0.0)
    first_finish = engine.next_event_time()
    out = engine.interrupt(5.0)
    assert [s for s, _ in out.finished] == [0] and first_finish <= 5.0
    assert [p.seq_id for p in out.partial] == [1, 2, 3]
    assert all(0 < p.generated < p.response_len for p in out.partial)
    assert len({p.generated for p in out.partial}) == 1  # they decoded in lock-step
    assert engine.busy_s == pytest.approx(5.0)
    produced = engine.generated_tokens
    fresh = RolloutEngine(QWEN, H100, RolloutLayout())
    for p in out.partial:
        fresh.add(p.seq_id, p.prompt_len, p.response_len, 6.0, generated=p.generated)
    assert sorted(s for s, _ in fresh.run()) == [1, 2, 3]
    assert produced + fresh.generated_tokens == 50 + 2000 + 3000 + 4000


def test_a_request_paused_in_place_resumes_without_re_prefilling_its_cached_tokens():
    # interrupted mid-decode, a running request's prompt + generated tokens are its cached KV; resumed
    # with them kept it computes only its last token, where an aborted one re-prefills them all
    def resumed(kept: bool) -> tuple[float, dict[int, int], int]:
        engine = RolloutEngine(QWEN, H100, RolloutLayout())
        engine.add_many([7], [1000], [400], 0.0)
        out = engine.interrupt(2.0)
        (part,) = out.partial
        engine.add_many([7], [1000], [400], 3.0, [part.generated], kept=[out.cached[7]] if kept else None)
        (done,) = engine.run()
        return done.time_s, out.cached, part.generated
    aborted, cached, generated = resumed(False)
    paused, _, _ = resumed(True)
    context = 1000 + generated
    assert cached == {7: context} and 0 < generated < 400
    cost = RolloutEngine(QWEN, H100, RolloutLayout()).cost
    saved = cost.prefill_s(context, context * (context + 1) / 2, 1) - cost.prefill_s(1, context, 1)
    assert aborted - paused == pytest.approx(saved, rel=1e-9)
    waiting = RolloutEngine(QWEN, H100, RolloutLayout(max_num_seqs=1))
    waiting.add_many([1, 2], [100, 100], [500, 500], 0.0)
    assert set(waiting.interrupt(0.5).cached) == {1}        # the waiting one holds no KV


def test_the_array_run_and_the_engine_agree_on_the_cache_at_an_interrupt():
    # 400 sequences: enough for the array run (FAST_RUN_MIN_SEQUENCES), whose trace answers the interrupt
    responses = np.random.default_rng(3).integers(1, 2000, size=400)
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add_many(range(400), [300] * 400, responses, 0.0)
    run = ResumableRun(engine.copy())
    run.run()
    for now in (0.01, 3.0, 20.0):   # inside the first prefill, while all run, after some finished
        expected = engine.copy().interrupt(now).cached
        assert run.interrupt_at(now).cached == expected
    assert expected and len(expected) < 400


def test_interrupt_inside_a_prefill_yields_nothing_from_it():
    engine = RolloutEngine(QWEN, H100, RolloutLayout())
    engine.add_many(range(3), [8000] * 3, [1, 5, 5], 0.0)
    out = engine.interrupt(1e-4)  # the prefill of 24K tokens takes longer
    assert out.finished == [] and [p.generated for p in out.partial] == [0, 0, 0]
    assert engine.generated_tokens == 0 and engine.busy_s == pytest.approx(1e-4)


def test_interrupt_refuses_a_time_the_engine_ran_past():
    """An add at 0.125 s runs two one-token sequences' prefills (one slot) to ~16 ms: an interrupt at
    0 s could undo only the prefill in flight then, not the one finished before it (it raised KeyError);
    inside the last prefill it answers, and a first add after `now` with nothing to run leaves it free."""
    def engine(last_add: float) -> RolloutEngine:
        built = RolloutEngine(QWEN, H100, RolloutLayout(max_num_seqs=1))
        built.add_many([0], [1], [1], 0.0)
        built.add_many([1], [1], [1], 0.0)
        built.add_many([2], [1], [1], last_add)
        return built

    ran = engine(0.125)
    first_end, second_end = ran.t / 2, ran.t
    with pytest.raises(ValueError, match="the engine has run to"):
        engine(0.125).interrupt(0.0)
    inside = engine(0.125).interrupt((first_end + second_end) / 2)
    assert [f.seq_id for f in inside.finished] == [0] and [p.seq_id for p in inside.partial] == [1, 2]
    idle = RolloutEngine(QWEN, H100, RolloutLayout())
    idle.add_many([0], [8], [4], 0.5)
    assert [p.generated for p in idle.interrupt(0.1).partial] == [0]


def test_same_input_same_bytes():
    rng = np.random.default_rng(0)
    responses = rng.integers(1, 3000, size=(32, 8))
    prompts = np.full_like(responses, 256)
    a = simulate_rollout(QWEN, H100, RolloutLayout(instances=4), prompts, responses)
    b = simulate_rollout(QWEN, H100, RolloutLayout(instances=4), prompts, responses)
    assert a.finish_s.tobytes() == b.finish_s.tobytes() and a.busy_s.tobytes() == b.busy_s.tobytes()
    share = a.tail_share(0.1)
    assert np.all((share >= 0) & (share <= 1))


def test_collective_model_is_used_when_ranks_are_given():
    class Fake:
        def __init__(self):
            self.calls = []

        def cost(self, op, ranks, nbytes):
            self.calls.append((op, tuple(ranks)))
            return type("C", (), {"time_s": 1e-3})()

    fake = Fake()
    t = decode_step_time_s(QWEN, H100, 4, 100, tp=4, collectives=fake, ranks=[4, 5, 6, 7])
    base = decode_step_time_s(QWEN, H100, 4, 100, tp=4)
    assert fake.calls and all(c == ("all_reduce", (4, 5, 6, 7)) for c in fake.calls)
    fallback = StepCost(QWEN, H100, RolloutLayout(tp=4)).comm_s(4)
    assert t - base == pytest.approx(2 * QWEN.num_layers * 1e-3 - fallback, rel=1e-9)


def test_custom_all_reduce_prices_small_tp_all_reduces_and_falls_back_to_nccl():
    """custom_all_reduce: a decode step's TP all-reduces (2 per layer, n x hidden x 2 bytes) cost the
    engine's own kernel (CollectiveModel.custom_all_reduce_lines) under custom_all_reduce_max_bytes and
    NCCL's cheapest algorithm from it on; off, NCCL at every size; the size key needs the switch."""
    from simulator.hardware.topology import load_topology
    from simulator.network.collectives import CollectiveModel, line_time_s

    net = CollectiveModel(load_topology("dgx-h100", {"nodes": 1}))
    ranks = [0, 1, 2, 3]
    params = InferenceParams(custom_all_reduce=True)
    custom = StepCost(QWEN, H100, RolloutLayout(tp=4), params, net, ranks)
    nccl = StepCost(QWEN, H100, RolloutLayout(tp=4), InferenceParams(), net, ranks)
    per = 2 * QWEN.num_layers
    for n in (1, 64, 512):
        nbytes = n * QWEN.hidden * 2
        assert custom.comm_s(n) == pytest.approx(per * line_time_s(net.custom_all_reduce_lines(ranks), nbytes))
        assert nccl.comm_s(n) == pytest.approx(per * net.line_time_s("all_reduce", ranks, nbytes))
        assert custom.comm_s(n) < nccl.comm_s(n)
    big = 8 * 2**20 // (QWEN.hidden * 2) + 1   # tokens whose all-reduce reaches 8 MiB
    assert custom.comm_s(big) == pytest.approx(nccl.comm_s(big))
    assert StepCost(QWEN, H100, RolloutLayout(tp=4), params).comm_s(64) == pytest.approx(
        StepCost(QWEN, H100, RolloutLayout(tp=4)).comm_s(64))   # no network model: the fallback formula
    with pytest.raises(ValueError, match="custom_all_reduce"):
        InferenceParams(custom_all_reduce_max_bytes=2**20)


# ---- bad input ---------------------------------------------------------------------------------------
def test_tp_must_divide_the_query_heads():
    with pytest.raises(RlsimError, match="does not divide the 28 attention heads") as err:
        RolloutEngine(QWEN, H100, RolloutLayout(tp=8))
    assert err.value.field == "rollout_layout.tp"


@pytest.mark.parametrize("model, tp, suggested", [("qwen3-32b", 3, [1, 2, 4, 8]), ("qwen3-32b", 6, [2, 4, 8, 16]),
                                                  ("qwen2.5-7b", 8, [1, 2, 4])])
def test_a_tp_that_does_not_divide_the_heads_suggests_the_nearest_that_do(model, tp, suggested):
    """An audit (2026-12-07): tp 3 on Qwen3-32B's 64 heads suggested [8, 16, 32, 64], the largest
    powers of two dividing them, leaving out 4 and 2 next to what was given."""
    with pytest.raises(RlsimError) as err:
        RolloutEngine(load_model(model), H100, RolloutLayout(tp=tp))
    assert err.value.fix.endswith(f"e.g. {suggested}")


@pytest.mark.parametrize("layout, match, key", [
    (RolloutLayout(tp=8), "attention heads", "tp"),
    (RolloutLayout(ep=2), "needs an MoE model", "ep"),
    (RolloutLayout(weight_dtype="fp8"), "needs an fp8 peak, which the topology.s device a100", "weight_dtype"),   # A100: no FP8 GEMMs
    (RolloutLayout(gpu_memory_utilization=0.01), "does not fit for inference", None),
])
def test_step_cost_errors_name_keys_under_the_layout_field(layout, match, key):
    with pytest.raises(RlsimError, match=match) as err:
        StepCost(QWEN, A100, layout)
    assert err.value.field == ("rollout_layout" if key is None else f"rollout_layout.{key}")
    with pytest.raises(RlsimError, match=match) as err:
        StepCost(QWEN, A100, layout, layout_field="workload.rollout_layout")
    assert err.value.field == ("workload.rollout_layout" if key is None else f"workload.rollout_layout.{key}")


def test_rollout_errors_name_the_layout_field_given():
    with pytest.raises(RlsimError, match="does not divide") as err:
        simulate_rollout(QWEN, H100, RolloutLayout(tp=8), [16], [16], layout_field="workload.rollout_layout")
    assert err.value.field == "workload.rollout_layout.tp"
    engine = RolloutEngine(QWEN, _tiny_kv_device(1000), RolloutLayout(),
                           cost=StepCost(QWEN, _tiny_kv_device(1000), RolloutLayout(),
                                         layout_field="workload.rollout_layout"))
    with pytest.raises(RlsimError, match="does not fit the KV cache") as err:
        engine.add(0, 600, 600, 0.0)
    assert err.value.field == "workload.rollout_layout"


def test_kv_heads_replicate_when_tp_exceeds_them():
    engine = RolloutEngine(LLAMA, H100, RolloutLayout(tp=16))  # 8 KV heads, 32 query heads
    assert engine.cost.kv_bytes_per_token_dev == LLAMA.kv_bytes_per_token(2) / 8


def test_ep_must_divide_the_experts_and_needs_moe():
    moe = load_model("qwen3-30b-a3b")
    with pytest.raises(RlsimError, match="does not divide the 128 experts") as err:
        RolloutEngine(moe, H100, RolloutLayout(ep=3))
    assert err.value.field == "rollout_layout.ep"
    with pytest.raises(RlsimError, match="needs an MoE model"):
        RolloutEngine(QWEN, H100, RolloutLayout(ep=2))


def test_a_model_that_does_not_fit_says_so():
    with pytest.raises(RlsimError, match="does not fit") as err:
        RolloutEngine(load_model("llama3.1-405b"), A100, RolloutLayout(tp=8))
    assert "tp" in err.value.fix


def test_a_sequence_longer_than_the_kv_cache_is_refused():
    engine = RolloutEngine(QWEN, _tiny_kv_device(1000), RolloutLayout())
    with pytest.raises(RlsimError, match="does not fit the KV cache"):
        engine.add(0, 600, 600, 0.0)


def test_layout_from_mapping_names_the_field():
    with pytest.raises(RlsimError) as err:
        RolloutLayout.from_mapping({"tp": 0}, "w.yaml")
    assert err.value.field == "rollout_layout.tp" and err.value.source == "w.yaml"
    with pytest.raises(RlsimError, match="unknown dtype"):
        RolloutLayout.from_mapping({"weight_dtype": "int3"}, "w.yaml")
    assert RolloutLayout.from_mapping({"tp": 2, "ep": 1}).devices_per_instance == 2
