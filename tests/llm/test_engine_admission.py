"""SGLang's admission (workload.inference.admission: reserve; sglang 0.4.6 schedule_policy.py,
scheduler.py): what each request reserves, the full flag, the decaying new-token ratio, retraction."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, simulate_rollout
from simulator.scenario import load_scenario

H100 = get_device("h100")
QWEN = load_model("qwen2.5-7b")
NO_CLIP = 2**40   # reserve_clip_tokens above any length: the reservation is max_new_tokens itself


def _engine(**params) -> RolloutEngine:
    return RolloutEngine(QWEN, H100, RolloutLayout(max_num_seqs=4096), InferenceParams(**params))


def _finish_groups(engine: RolloutEngine) -> list[int]:
    """How many sequences finish at each distinct finish time, in time order."""
    times = np.array([f.time_s for f in engine.run()])
    return np.unique(times, return_counts=True)[1].tolist()


def test_reservation_admits_as_many_as_their_caps_fit():
    """Equal requests of prompt p and cap M on an empty engine of C KV tokens: the k-th is admitted
    while k (p + M) < C (the first always), then none until those finish: groups of a = ceil(C /
    (p + M)) - 1. vLLM's admission (kv) takes them all (each holds only its context while it runs)."""
    probe = _engine(admission="reserve", max_new_tokens=1000, reserve_clip_tokens=NO_CLIP)
    capacity, prompt = probe.capacity, 100
    cap_new = capacity // 7 - prompt + 5   # about 7 fit by their caps
    reserve = _engine(admission="reserve", max_new_tokens=cap_new, reserve_clip_tokens=NO_CLIP)
    count = 20
    reserve.add_many(range(count), [prompt] * count, [50] * count, 0.0)
    per_group = -(-capacity // (prompt + cap_new)) - 1
    groups = _finish_groups(reserve)
    assert groups[:-1] == [per_group] * (len(groups) - 1) and sum(groups) == count
    assert groups[-1] == count - per_group * (len(groups) - 1)
    vllm = _engine()
    vllm.add_many(range(count), [prompt] * count, [50] * count, 0.0)
    assert _finish_groups(vllm) == [count]


def _late_arrival_finishes_first(arrival_steps: int) -> bool:
    """A (prompt 10, a response of 0.6 C tokens = its cap) runs; B (10 tokens) arrives after A has
    made about ``arrival_steps`` decode steps. Whether B finishes before A."""
    params = dict(admission="reserve", reserve_clip_tokens=NO_CLIP)
    capacity = _engine(max_new_tokens=1, **params).capacity
    long = int(0.6 * capacity)
    engine = _engine(max_new_tokens=long, **params)
    step = engine.cost.decode_step_s(1, long)   # a step of A at its longest: an upper bound
    engine.add(0, 10, long, 0.0)
    engine.add(1, 10, 10, 1e-9 + arrival_steps * step)
    done = {f.seq_id: f.time_s for f in engine.run()}
    return done[1] < done[0]


def test_the_ratio_decays_so_a_request_refused_at_first_fits_later():
    """B needs 10 + 0.6 C beside A's reservation ratio x (0.6 C - generated): at ratio 0.7 (A just
    admitted) it does not fit, and the engine tries again only when A finishes; after 600 decode
    steps the ratio is at its floor 0.7 x 0.14 and B is admitted on arrival."""
    assert not _late_arrival_finishes_first(0)
    assert _late_arrival_finishes_first(1000)


def test_retraction_sends_the_fewest_generated_to_the_back_and_every_request_finishes():
    """An optimistic ratio admits more than the KV cache holds: decode steps that do not fit retract
    requests (to the back of the queue) until 20 steps of the rest fit; every request finishes once,
    with all its tokens."""
    capacity = _engine().capacity
    count, prompt = 16, 100
    response = capacity // 8   # all 16 at once need twice the cache
    engine = _engine(admission="reserve", max_new_tokens=response, reserve_init_ratio=0.01,
                     reserve_min_ratio_factor=0.0)
    engine.add_many(range(count), [prompt] * count, [response] * count, 0.0)
    finished = engine.run()
    assert sorted(f.seq_id for f in finished) == list(range(count))
    assert engine.preemptions > 0
    assert engine.generated_tokens == count * response   # a retracted request keeps what it made


def test_reserve_keys_need_reserve_admission():
    with pytest.raises(RlsimError) as err:
        load_scenario({"workload": {"model": "qwen2.5-7b", "prompts_per_step": 8, "samples_per_prompt": 4,
                                    "inference": {"reserve_init_ratio": 0.5}}})
    assert "workload.inference" in str(err.value) and "admission: reserve" in str(err.value)


def test_the_sglang_engine_reserves_with_the_runs_response_cap():
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts

    sc = load_scenario({"topology": {"preset": "dgx-h100", "nodes": 1},
                        "workload": {"model": "qwen2.5-7b", "engine": "sglang", "rollout_layout": {"tp": 2},
                                     "prompts_per_step": 8, "samples_per_prompt": 4,
                                     "response_length": {"dist": "lognormal", "median": 500, "sigma": 0.5,
                                                         "max": 1536}}})
    costs = LlmCosts(sc, load_topology(sc.topology))
    assert costs.inference_params.admission == "reserve" and costs.inference_params.max_new_tokens == 1536


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 400)), min_size=1, max_size=40),
       instances=st.integers(1, 3), max_seqs=st.integers(1, 8), kv=st.sampled_from([800, 3000, 100000]),
       stagger=st.booleans(), ratio=st.sampled_from([0.01, 0.7, 1.0]))
def test_every_sequence_finishes_exactly_once_under_reservation(lengths, instances, max_seqs, kv, stagger, ratio):
    """Whatever the cache, arrivals and ratio: each sequence finishes once, with exactly its tokens."""
    prompts = np.array([p for p, _ in lengths])
    responses = np.array([r for _, r in lengths])
    arrivals = np.arange(len(lengths)) * 0.05 if stagger else None
    params = InferenceParams(admission="reserve", max_new_tokens=int(responses.max()), reserve_init_ratio=ratio)
    hbm = (QWEN.weight_bytes(2) + params.workspace_bytes + kv * QWEN.kv_bytes_per_token(2)) / 0.9
    device = H100.replace(hbm_bytes=hbm)
    res = simulate_rollout(QWEN, device, RolloutLayout(instances=instances, max_num_seqs=max_seqs), prompts,
                           responses, params=params, arrival_s=arrivals)
    assert np.all(np.isfinite(res.finish_s)) and np.all(res.instance >= 0)
    assert res.generated_tokens == responses.sum()


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 200), st.integers(1, 300)), min_size=2, max_size=30),
       kv=st.sampled_from([600, 2000, 100000]), stops=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=6),
       cap_new=st.integers(50, 400))
def test_the_kept_reservations_equal_the_running_requests_own(lengths, kv, stops, cap_new):
    """The sorted reservation steps the engine keeps (added at admission, dropped at finish and
    retraction) give, at any step, what summing min(max(max_new - generated, 0), clip) over the
    running requests gives."""
    params = InferenceParams(admission="reserve", max_new_tokens=cap_new, reserve_clip_tokens=150)
    hbm = (QWEN.weight_bytes(2) + params.workspace_bytes + kv * QWEN.kv_bytes_per_token(2)) / 0.9
    engine = RolloutEngine(QWEN, H100.replace(hbm_bytes=hbm), RolloutLayout(max_num_seqs=8), params)
    prompts = [min(p, kv // 4) for p, _ in lengths]
    responses = [min(r, kv // 4) for _, r in lengths]
    engine.add_many(range(len(lengths)), prompts, responses, 0.0)
    for stop in sorted(stops):
        engine.advance_to(stop)
        for ahead in (0, 7):
            step = engine._S + ahead
            direct = sum(min(max(cap_new - engine._g[s] - step + engine._sadm[s], 0), 150)
                         for s in engine._live_running())
            assert engine._reserved(ahead) == pytest.approx(engine._ratio(ahead) * direct, rel=0, abs=1e-9)


def test_a_request_done_at_its_prefill_frees_the_queue():
    """A request whose whole response is its prefill's token finishes as it is admitted: the queue
    refused beside it is tried again (found by the hypothesis test above: the engine used to wait
    for a finish that had already happened, with nothing running)."""
    params = InferenceParams(admission="reserve", max_new_tokens=258, reserve_init_ratio=0.01)
    hbm = (QWEN.weight_bytes(2) + params.workspace_bytes + 800 * QWEN.kv_bytes_per_token(2)) / 0.9
    engine = RolloutEngine(QWEN, H100.replace(hbm_bytes=hbm), RolloutLayout(max_num_seqs=3), params)
    engine.add_many(range(4), [258, 159, 192, 141], [170, 258, 1, 3], 0.0)
    assert sorted(f.seq_id for f in engine.run()) == [0, 1, 2, 3]
