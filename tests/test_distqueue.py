"""DistQueue: payload bytes, hierarchical fetch, packing, contention."""
import numpy as np
import pytest
import simpy

from simulator.rl.distqueue import DistQueue, fetch_load, payload_bytes
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
    q.write(2e9)                                    # 2 s of writes ahead of the read
    load = fetch_load(np.full(1, 1e9 / 17), DistQueueParams(), 1, 1)
    done = {}

    def reader():
        yield from q.read(load)
        done["t"] = env.now
    env.process(reader())
    env.run()
    assert done["t"] == pytest.approx(3.0)
    assert q.stats()["bytes_read"] == pytest.approx(1e9)
