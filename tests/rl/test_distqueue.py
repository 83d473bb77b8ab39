"""DistQueue: payload bytes, hierarchical fetch, packing, contention."""
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.distqueue import DistQueue, _stable_order, fetch_load, payload_bytes
from simulator.scenario import DistQueueParams


def test_hierarchical_fetch_cuts_load_by_tp_x_pp():
    p = DistQueueParams()
    lens = np.full(1024, 3000)
    every = fetch_load(lens, p, 384, 8 * 16, hierarchical=False)
    hier = fetch_load(lens, p, 384, 8 * 16, hierarchical=True)
    assert every.read_bytes / hier.read_bytes == 128
    assert every.reads / hier.reads == 128
    assert hier.read_bytes == hier.payload_bytes == 1024 * 3000 * p.bytes_per_token


def test_packing_cuts_bytes_over_80_percent_on_long_tail_lengths():
    # the seed preset's lengths: lognormal median 2048, sigma 1.0, cap 16384 (+ prompts, cap 4096)
    rng = np.random.default_rng(0)
    resp = np.clip(rng.lognormal(np.log(2048), 1.0, 8192), 1, 16384)
    prompt = np.clip(rng.lognormal(np.log(512), 0.5, 8192), 1, 4096)
    p = DistQueueParams()
    packed = payload_bytes(resp + prompt, p, packed=True)
    padded = payload_bytes(resp + prompt, p, packed=False, pad_len=16384 + 4096)
    assert 1 - packed / padded > 0.8


def test_batch_max_padding_and_packing_agree_on_equal_lengths():
    p = DistQueueParams(pad_to="batch_max")
    lens = np.full(10, 700)
    assert payload_bytes(lens, p, packed=True) == payload_bytes(lens, p, packed=False, pad_len=9999)


def test_queue_bandwidth_is_contended():
    env = simpy.Environment()
    q = DistQueue(env, DistQueueParams(bw_Bps=1e9))
    q.write(np.array([2e9]), np.array([0.0]))       # 2 s of writes ahead of the read
    load = fetch_load(np.full(1, 1e9 / 17), DistQueueParams(), 1, 1)
    done = {}

    def reader():
        yield from q.read(load)
        done["t"] = env.now
    env.process(reader())
    env.run()
    assert done["t"] == pytest.approx(3.0)
    assert q.stats()["bytes_read"] == pytest.approx(1e9)


def test_writes_arrive_when_ready_and_a_read_waits_only_for_earlier_ones():
    # FIFO server, 1 GB/s: writes of 1 s each at t = 0, 0.5 and 10; a read of 1 s issued at t = 1
    # waits behind the first two (done at 2.0) and ends at 3.0; the write at 10 is served after it
    env = simpy.Environment()
    q = DistQueue(env, DistQueueParams(bw_Bps=1e9))
    q.write(np.array([1e9, 1e9, 1e9]), np.array([0.0, 0.5, 10.0]))
    load = fetch_load(np.full(1, 1e9 / 17), DistQueueParams(), 1, 1)
    done = {}

    def reader():
        yield env.timeout(1.0)
        yield from q.read(load)
        done["t"] = env.now
    env.process(reader())
    env.run()
    assert done["t"] == pytest.approx(3.0)
    assert q.stats(until=5.0)["busy_s"] == pytest.approx(3.0)
    assert q.stats(until=20.0)["busy_s"] == pytest.approx(4.0)


def test_fifo_fold_matches_a_sequential_server():
    rng = np.random.default_rng(3)
    arrive, nbytes = np.sort(rng.uniform(0, 5, 40)), rng.uniform(1e7, 5e8, 40)
    q = DistQueue(simpy.Environment(), DistQueueParams(bw_Bps=1e9))
    q.write(nbytes[20:], arrive[20:])      # out of arrival order on purpose
    q.write(nbytes[:20], arrive[:20])
    q._fold(100.0)
    free = 0.0
    for a, b in zip(arrive, nbytes, strict=True):
        free = max(free, a) + b / 1e9
    assert q._free_at == pytest.approx(free, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 3.25]) | st.floats(0, 10), max_size=60),
       st.booleans())
def test_stable_order_is_the_stable_argsort(values, ordered):
    """The fold's arrival order (_stable_order): numpy's stable argsort, ties (many) in index order."""
    arr = np.array(sorted(values) if ordered else values, float)
    got = _stable_order(arr)
    assert got.dtype == np.argsort(arr, kind="stable").dtype
    assert got.tolist() == np.argsort(arr, kind="stable").tolist()
