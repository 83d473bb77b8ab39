"""Pipeline schedules: closed forms (1F1B, interleaved) and event-model invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.pipeline import (
    critical_chain,
    forward_only_makespan,
    forward_only_makespans,
    issue_order,
    simulate_pipeline,
)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24), tf=st.floats(0.1, 5.0), ratio=st.floats(1.0, 3.0))
def test_uniform_1f1b_matches_closed_form(p, m, tf, ratio):
    tb = tf * ratio
    r = simulate_pipeline(np.full((p, m), tf), np.full((p, m), tb), pp=p)
    assert r.makespan_s == pytest.approx((m + p - 1) * (tf + tb), rel=1e-12)
    assert r.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 6), groups=st.integers(1, 5), v=st.integers(2, 4), tf=st.floats(0.1, 5.0))
def test_uniform_interleaved_bubble_is_p_minus_1_over_vm_of_ideal(p, groups, v, tf):
    m = p * groups
    tb = 2 * tf
    r = simulate_pipeline(np.full((p * v, m), tf / v), np.full((p * v, m), tb / v), pp=p, vpp=v)
    ideal = m * (tf + tb)
    assert r.makespan_s / ideal - 1 == pytest.approx((p - 1) / (v * m), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), p=st.integers(1, 5), v=st.integers(1, 3), groups=st.integers(1, 3))
def test_random_durations_respect_dependencies_and_devices(data, p, v, groups):
    m = p * groups
    n_v = p * v
    draw = st.lists(st.floats(0.01, 3.0), min_size=n_v * m, max_size=n_v * m)
    fw = np.array(data.draw(draw)).reshape(n_v, m)
    bw = np.array(data.draw(draw)).reshape(n_v, m)
    xfer = data.draw(st.floats(0.0, 0.5))
    r = simulate_pipeline(fw, bw, xfer, pp=p, vpp=v)
    end = {}
    for s, ops in enumerate(r.ops):
        clock = 0.0
        for kind, i, c, start, stop in ops:
            assert start >= clock - 1e-12  # one op at a time per device, in issue order
            j = c * p + s
            assert stop - start == pytest.approx(fw[j, i] if kind == "F" else bw[j, i])
            end[(kind, j, i)] = (start, stop)
            clock = stop
    for (kind, j, i), (start, _) in end.items():
        if kind == "F" and j > 0:
            assert start >= end[("F", j - 1, i)][1] + xfer - 1e-9
        if kind == "B":
            dep = end[("F", j, i)][1] if j == n_v - 1 else end[("B", j + 1, i)][1] + xfer
            assert start >= dep - 1e-9
    busy = sum(stop - start for ops in r.ops for _, _, _, start, stop in ops)
    assert busy == pytest.approx(sum(r.busy_s))
    assert r.makespan_s == pytest.approx(max(stop for ops in r.ops for *_, stop in ops))


def test_intervals_tile_each_stage_from_zero_to_makespan():
    r = simulate_pipeline(np.full((4, 8), 1.0), np.full((4, 8), 2.0), 0.1, pp=4)
    for s in range(4):
        ivs = [iv for iv in r.intervals if iv.stage == s]
        assert ivs[0].start == 0.0 and ivs[-1].end == pytest.approx(r.makespan_s)
        assert all(a.end == pytest.approx(b.start) for a, b in zip(ivs, ivs[1:], strict=False))
    idle = sum(iv.end - iv.start for iv in r.intervals if iv.state == "idle")
    assert idle / (4 * r.makespan_s) == pytest.approx(r.bubble_fraction)


def test_issue_order_has_every_op_once():
    for p, v, m in [(4, 1, 8), (4, 2, 8), (3, 3, 6), (2, 2, 2)]:
        for s in range(p):
            order = issue_order(p, v, m, s)
            assert sorted(order) == sorted({(k, i, c) for k in "FB" for i in range(m) for c in range(v)})


def test_interleaved_needs_micro_batches_multiple_of_pp():
    with pytest.raises(RlsimError, match="multiple of pp"):
        simulate_pipeline(np.ones((8, 5)), np.ones((8, 5)), pp=4, vpp=2)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 5), m=st.integers(1, 12))
def test_forward_only_matches_recurrence(data, n, m):
    fw = np.array(data.draw(st.lists(st.floats(0.01, 2.0), min_size=n * m, max_size=n * m))).reshape(n, m)
    xfer = data.draw(st.floats(0.0, 0.3))
    end = np.zeros((n, m))
    for j in range(n):
        for i in range(m):
            ready = end[j - 1, i] + xfer if j else 0.0
            end[j, i] = max(end[j, i - 1] if i else 0.0, ready) + fw[j, i]
    assert forward_only_makespan(fw, xfer) == pytest.approx(end[-1, -1])
    if n > 1 or m > 1:
        uniform = forward_only_makespan(np.full((n, m), 1.0))
        assert uniform == pytest.approx(m + n - 1)


def test_blocking_sends_closed_form_two_stages_two_micro_batches():
    # p = 2, m = 2, forward f, backward b, transfer x. Receiver-only delay: 3f + 3b + 2x. Blocking
    # sends (the sender holds its device until the data arrived): stage 1's second backward send
    # sits on the critical path too -> 3f + 3b + 3x (worked out op by op in the test's comment).
    from simulator.llm.training import _with_blocking_sends

    f, b, x = 1.0, 2.0, 0.25
    fw, bw, xf = np.full((2, 2), f), np.full((2, 2), b), np.full((1, 2), x)
    assert simulate_pipeline(fw, bw, xf, pp=2).makespan_s == pytest.approx(3 * f + 3 * b + 2 * x)
    blocked = simulate_pipeline(*_with_blocking_sends(fw, bw, xf), 0.0, pp=2)
    assert blocked.makespan_s == pytest.approx(3 * f + 3 * b + 3 * x)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), p=st.integers(1, 6), v=st.integers(1, 3), groups=st.integers(1, 4))
def test_level_pass_equals_the_loop_bit_for_bit(data, p, v, groups):
    import simulator.llm.pipeline as pipeline

    m = p * groups
    n_v = p * v
    fw = np.array(data.draw(st.lists(st.floats(0.01, 3.0), min_size=n_v * m, max_size=n_v * m))).reshape(n_v, m)
    bw = 2.0 * fw[::-1]
    xf = data.draw(st.floats(0.0, 0.5))
    saved = pipeline._VECTOR_MIN_WIDTH
    try:
        pipeline._VECTOR_MIN_WIDTH = 0.0
        vec = pipeline.simulate_pipelines(fw, bw, [xf, 0.0], pp=p, vpp=v)
        pipeline._VECTOR_MIN_WIDTH = float("inf")
        loop = pipeline.simulate_pipelines(fw, bw, [xf, 0.0], pp=p, vpp=v)
    finally:
        pipeline._VECTOR_MIN_WIDTH = saved
    for a, b in zip(vec, loop, strict=True):
        assert a.makespan_s == b.makespan_s and a.ends == b.ends and a.starts == b.starts
    assert loop[1].makespan_s <= loop[0].makespan_s


def _exact_only(fn, *args, **kwargs):
    import simulator.llm.pipeline as pipeline

    saved = pipeline._periodic_ends
    pipeline._periodic_ends = lambda *a: None
    try:
        return fn(*args, **kwargs)
    finally:
        pipeline._periodic_ends = saved


@settings(max_examples=30, deadline=None)
@given(data=st.data(), p=st.integers(2, 6), v=st.integers(1, 3), blocks=st.integers(8, 40))
def test_periodic_steady_state_equals_the_exact_simulation(data, p, v, blocks):
    """Uniform micro-batches: the pipeline built from its periodic steady state ends every op when
    the op-by-op simulation does (to rounding), whichever path `_periodic_ends` takes."""
    import simulator.llm.pipeline as pipeline

    m = p * blocks + (data.draw(st.integers(0, p - 1)) if v == 1 else 0)
    n_v = p * v
    stage_f = np.array(data.draw(st.lists(st.floats(0.05, 3.0), min_size=n_v, max_size=n_v)))
    stage_b = stage_f * data.draw(st.floats(1.0, 3.0))
    x = np.array(data.draw(st.lists(st.floats(0.0, 0.5), min_size=n_v - 1, max_size=n_v - 1)))
    fw, bw = np.repeat(stage_f[:, None], m, 1), np.repeat(stage_b[:, None], m, 1)
    xf = np.repeat(x[:, None], m, 1)
    fast = pipeline.simulate_pipelines(fw, bw, [xf, 0.0], pp=p, vpp=v)
    exact = _exact_only(pipeline.simulate_pipelines, fw, bw, [xf, 0.0], pp=p, vpp=v)
    for a, b in zip(fast, exact, strict=True):
        assert a.makespan_s == pytest.approx(b.makespan_s, rel=1e-9)
        np.testing.assert_allclose(a.end_s, b.end_s, rtol=0, atol=1e-9 * b.makespan_s)


def test_periodic_path_is_taken_and_keeps_the_closed_form():
    """A long uniform 1F1B pipeline takes the periodic path (not the op-by-op one) and still gives
    the closed form (m + p - 1)(f + b)."""
    import simulator.llm.pipeline as pipeline

    p, m, f, b = 4, 256, 1.0, 2.0
    xfer = np.zeros((1, (p - 1) * m + 1))
    assert pipeline._periodic_ends(np.full((1, p, m), f), np.full((1, p, m), b), xfer, p, 1) is not None
    res = simulate_pipeline(np.full((p, m), f), np.full((p, m), b), pp=p)
    assert res.makespan_s == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    assert res.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)


# ---- the critical chain through the stages ----------------------------------------------------------
def _chain_tiles(result, chain) -> None:
    """The chain starts at 0, each op starts where the one before ended plus the transfer taken,
    and each step back follows the op's device or its upstream input."""
    assert chain[0].start == 0.0
    for before, op in zip(chain[:-1], chain[1:], strict=True):
        assert op.start == pytest.approx(before.end + op.p2p_before_s, abs=1e-9)
        same_device = before.stage == op.stage and op.p2p_before_s == 0.0
        neighbour = abs(before.stage - op.stage) in (0, 1, result.pp - 1)
        assert same_device or neighbour


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 6), m_blocks=st.integers(1, 4), tf=st.floats(0.5, 2.0), ratio=st.floats(1.1, 3.0))
def test_critical_chain_of_uniform_1f1b_has_m_plus_p_minus_1_forwards_and_backwards(p, m_blocks, tf, ratio):
    m = p * m_blocks
    res = simulate_pipeline(np.full((p, m), tf), np.full((p, m), tf * ratio), 0.0, pp=p)
    chain = critical_chain(res)
    kinds = [op.kind for op in chain]
    # makespan (m + p - 1)(t_f + t_b): the chain holds exactly that many of each, nothing else
    assert kinds.count("forward") == kinds.count("backward") == m + p - 1
    assert chain[-1].end == pytest.approx(res.makespan_s)
    assert sum(op.end - op.start for op in chain) == pytest.approx(res.makespan_s)
    _chain_tiles(res, chain)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), p=st.integers(1, 4), v=st.integers(1, 3), groups=st.integers(1, 3))
def test_critical_chain_tiles_the_stage_end_with_random_times_and_transfers(data, p, v, groups):
    m = p * groups
    shape = (p * v, m)
    fw = np.array(data.draw(st.lists(st.floats(0.1, 3.0), min_size=p * v * m, max_size=p * v * m))).reshape(shape)
    bw = fw * data.draw(st.floats(1.0, 3.0))
    p2p = data.draw(st.floats(0.0, 0.5))
    res = simulate_pipeline(fw, bw, p2p, pp=p, vpp=v)
    for stage in range(p):
        chain = critical_chain(res, stage)
        assert chain[-1].end == pytest.approx(res.stage_end_s(stage))
        assert sum(op.end - op.start + op.p2p_before_s for op in chain) == pytest.approx(res.stage_end_s(stage))
        _chain_tiles(res, chain)
    assert critical_chain(res)[-1].end == pytest.approx(res.makespan_s)


def test_critical_chain_stays_on_a_slow_stage():
    # One stage twice as slow as the others: the chain reaches it through the first micro-batch's
    # forwards, detours through the last stage for micro-batch 0's turn-around (the slow stage's
    # second warm-up forward ends first), then stays on the slow stage until the last micro-batch's
    # backward drains through the stages above it.
    p, m = 4, 16
    fw = np.ones((p, m))
    fw[2] = 2.0
    res = simulate_pipeline(fw, 2 * fw, 0.0, pp=p)
    off_slow = [(op.stage, op.kind, op.micro_batch) for op in critical_chain(res) if op.stage != 2]
    assert off_slow == [(0, "forward", 0), (1, "forward", 0), (3, "forward", 0), (3, "backward", 0),
                        (1, "backward", m - 1), (0, "backward", m - 1)]
    assert res.makespan_s == pytest.approx(1 + 1 + (m * 6 - 2) + (1 + 2) + (2 + 2))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 6), st.booleans(), st.integers(0, 2**31 - 1))
def test_forward_only_makespans_equal_each_pipeline_scanned_alone(replicas: int, stages: int, m: int,
                                                                  with_p2p: bool, seed: int):
    """The batched scan of several replicas gives, bit for bit, what forward_only_makespan gives for
    each replica alone (a scalar or a per-boundary transfer time)."""
    rng = np.random.default_rng(seed)
    fw = rng.uniform(0.0, 3.0, (replicas, stages, m))
    p2p = rng.uniform(0.0, 0.5, (replicas, max(stages - 1, 1), m)) if with_p2p else 0.25
    alone = [forward_only_makespan(fw[r], p2p[r] if with_p2p else p2p) for r in range(replicas)]
    assert forward_only_makespans(fw, p2p).tolist() == alone


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(0, 4), min_size=1, max_size=6), st.booleans(), st.integers(0, 2**31 - 1))
def test_forward_spans_of_ragged_replicas_equal_one_by_one(stages: int, sizes: list[int], with_p2p: bool, seed: int):
    """training._forward_spans groups the replicas of a batch by micro-batch count and scans each
    group in one pass; every replica's makespan is the float the one-by-one scan gives, in order."""
    import types

    from simulator.llm.training import _forward_spans
    rng = np.random.default_rng(seed)
    total = sum(sizes)
    arrays = types.SimpleNamespace(fwd=rng.uniform(0, 2, (stages, total)), bwd=rng.uniform(0, 2, (stages, total)))
    p2p = rng.uniform(0, 0.3, (stages - 1, total)) if with_p2p else np.zeros((0, total))
    params = types.SimpleNamespace(comm=types.SimpleNamespace(pp_blocking_send=False))
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    alone = [(forward_only_makespan(arrays.fwd[:, a:b], p2p[:, a:b] if p2p.size else 0.0), slice(a, b))
             for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert _forward_spans(arrays, p2p, sizes, params) == alone


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 8), (2, 4, 6), (4, 3, 12)])
def test_interleaved_forward_only_closed_form(pp: int, vpp: int, m: int):
    """Uniform chunks of t on pp ranks, free transfers, m a multiple of pp: every rank runs its m v
    forwards back to back once its first input arrives, the last rank after (p - 1) t. The chunks of
    a rank run in turn: rows scanned as separate devices took ~m t, a v-th of it (a trial's 32B
    model's log-prob pass at vpp 4 ran at 130% of the devices' peak)."""
    from simulator.llm.pipeline import interleaved_forward_makespans
    fw = np.full((1, pp * vpp, m), 0.5)
    assert interleaved_forward_makespans(fw, 0.0, pp)[0] == pytest.approx((m * vpp + pp - 1) * 0.5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(0, 9), st.integers(0, 2**31 - 1))
def test_interleaved_forward_only_keeps_each_ranks_work_and_chain(replicas: int, pp: int, vpp: int, m: int, seed: int):
    """No rank does two forwards at once (its makespan covers the sum of its chunks' forwards) and no
    micro-batch outruns its chain of virtual stages and transfers; vpp 1 is the plain scan (to round-off:
    _forward_spans keeps the scan for it)."""
    from simulator.llm.pipeline import interleaved_forward_makespans
    rng = np.random.default_rng(seed)
    fw = rng.uniform(0.0, 2.0, (replicas, pp * vpp, m))
    p2p = rng.uniform(0.0, 0.3, (replicas, max(pp * vpp - 1, 1), m))
    spans = interleaved_forward_makespans(fw, p2p, pp)
    for r in range(replicas):
        per_rank = [fw[r, rank::pp].sum() for rank in range(pp)]
        chain = max((fw[r, :, i].sum() + p2p[r, : pp * vpp - 1, i].sum() for i in range(m)), default=0.0)
        assert spans[r] >= max(per_rank) - 1e-9 and spans[r] >= chain - 1e-9
    if vpp == 1:
        assert spans == pytest.approx(forward_only_makespans(fw, p2p), rel=1e-12)


def test_errors_name_the_layout_key_given() -> None:
    with pytest.raises(RlsimError, match="multiple of pp") as err:
        simulate_pipeline(np.ones((8, 5)), np.ones((8, 5)), pp=4, vpp=2)
    assert err.value.field == "vpp"
    with pytest.raises(RlsimError, match="multiple of pp") as err:
        simulate_pipeline(np.ones((8, 5)), np.ones((8, 5)), pp=4, vpp=2, layout_field="workload.train_layout")
    assert err.value.field == "workload.train_layout.vpp"


def test_the_interleaved_refusal_says_it_is_rlsims_limit_on_archon() -> None:
    """torch's ScheduleInterleaved1F1B would run 5 micro-batches on pp 4 (rounds of m // max(1, m // pp)),
    in another order than the Megatron one simulated, and AReaL's archon engine splits into a multiple of
    pp anyway: the refusal says the limit is rlsim's there and names the token budget that rounds as archon."""
    with pytest.raises(RlsimError) as err:
        simulate_pipeline(np.ones((8, 5)), np.ones((8, 5)), pp=4, vpp=2, layout_field="workload.train_layout")
    assert "rlsim prices, Megatron-Core's" in err.value.message
    assert "Interleaved1F1B (areal-archon) runs them in another order, not priced" in err.value.message
    assert "max_tokens_per_micro_batch" in err.value.fix
