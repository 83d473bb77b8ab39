"""StepCost's array forms against its scalar ones, bit for bit: the rollout engine's array run
prices a whole run's prefills and running-set sizes at once (prefill_many_s, per_n_rows), and must
give exactly what the event loop's scalar calls give (prefill_s, _per_n, comm_s, weight_read_s):
dense, MoE with expert parallelism, hybrid Mamba, sliding-window (gpt-oss) and Gated DeltaNet
(Qwen3-Next) models, the fallback collectives and the
network's CollectiveModel, the engine's custom all-reduce, graphs, eager launches, async scheduling
and pipeline stages."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutLayout, StepCost, series_time_s, series_times_s
from simulator.network.collectives import CollectiveModel

H100 = get_device("h100")
MODELS = {name: load_model(name) for name in ("qwen2.5-7b", "qwen3-30b-a3b", "nemotron-h-8b", "gpt-oss-20b",
                                              "qwen3-next-80b-a3b")}
# (tp, ep, pp): pipeline stages too, even (28 / 2, 48 / 2) and uneven (52 / 3 layers)
LAYOUTS = {"qwen2.5-7b": [(1, 1, 1), (2, 1, 1), (4, 1, 1), (2, 1, 2)],
           "qwen3-30b-a3b": [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 2, 2)],
           "nemotron-h-8b": [(1, 1, 1), (2, 1, 1), (1, 1, 3)],
           "gpt-oss-20b": [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 1, 2)],
           "qwen3-next-80b-a3b": [(4, 1, 1), (2, 2, 1), (2, 1, 2)]}
COLLECTIVES = CollectiveModel(load_topology("dgx-h100", {"nodes": 1}))
PARAMS = [InferenceParams(), InferenceParams(enforce_eager=True, step_overhead_s=2e-3),
          InferenceParams(async_scheduling=True, cpu_per_seq_s=1e-5),
          InferenceParams(async_scheduling=True, enforce_eager=True),
          # the engine's own all-reduce up to 1 MiB (NCCL above: both branches within one array)
          InferenceParams(custom_all_reduce=True, custom_all_reduce_max_bytes=2**20)]


def _costs():
    for name, model in MODELS.items():
        for tp, ep, pp in LAYOUTS[name]:
            layout = RolloutLayout(tp=tp, ep=ep, pp=pp)
            for params in PARAMS:
                if pp > 1 and params.async_scheduling:
                    continue   # refused, as vLLM refuses it
                yield StepCost(model, H100, layout, params)
                yield StepCost(model, H100, layout, params, COLLECTIVES, list(range(tp * ep * pp)))


COSTS = list(_costs())
tokens_arrays = st.lists(st.integers(1, 70_000), min_size=1, max_size=30).map(lambda x: np.array(x, np.int64))


@settings(max_examples=25, deadline=None)
@given(which=st.integers(0, len(COSTS) - 1), tokens=tokens_arrays, data=st.data())
def test_prefill_many_equals_prefill_one_by_one(which, tokens, data):
    cost = COSTS[which]
    seqs = np.array([data.draw(st.integers(1, max(1, int(t)))) for t in tokens], np.int64)
    pairs = (tokens * (tokens + 1) // 2).astype(float)
    many = cost.prefill_many_s(tokens, pairs, seqs)
    one = [cost.prefill_s(t, a, s) for t, a, s in zip(tokens.tolist(), pairs.tolist(), seqs.tolist(), strict=True)]
    assert many.tolist() == one


@settings(max_examples=25, deadline=None)
@given(which=st.integers(0, len(COSTS) - 1), n=st.lists(st.integers(1, 2048), min_size=1, max_size=30))
def test_per_n_rows_and_comm_equal_the_scalar_forms(which, n):
    cost = COSTS[which]
    fresh, scalar = (StepCost(cost.model, cost.device, cost.layout, cost.params, cost.collectives, cost.ranks)
                     for _ in range(2))
    arr = np.array(n, np.int64)
    rows = fresh.per_n_rows(arr)   # filled by the array form (a fresh object: nothing cached)
    assert rows.tolist() == [list(scalar._per_n(x)) for x in n]   # (scalar: no table filled, the scalar form)
    assert [fresh._per_n(x) for x in n] == [scalar._per_n(x) for x in n]   # read from the table where filled
    assert fresh.comm_many_s(arr).tolist() == [cost.comm_s(x) for x in n]
    assert fresh.comm_many_s(np.zeros(1, np.int64)).tolist() == [cost.comm_s(0)]
    assert fresh.weight_read_many_s(arr).tolist() == [cost.weight_read_s(x) for x in n]


@settings(max_examples=25, deadline=None)
@given(which=st.integers(0, len(COSTS) - 1), n=st.lists(st.integers(1, 40), min_size=0, max_size=60))
def test_weights_read_of_repeated_counts_equal_the_scalar_form(which, n):
    """weight_read_many_s takes the power once per distinct count: a run's counts repeat (here
    always), unsorted, and an empty array gives an empty one."""
    cost = COSTS[which]
    got = cost.weight_read_many_s(np.array(n, np.int64))
    assert got.dtype == np.float64 and got.tolist() == [cost.weight_read_s(x) for x in n]


def test_the_cases_reach_every_collective_kind():
    kinds = {(c.layout.tp > 1, c.layout.ep > 1, c.collectives is not None) for c in COSTS}
    assert {(True, False, True), (True, False, False), (False, True, True), (False, True, False)} <= kinds
    assert any(c.state_s_per_seq > 0 for c in COSTS) and any(c.route_p > 0 for c in COSTS)
    assert any(c.window_share > 0 and c.layout.ep > 1 for c in COSTS)
    assert any(c.model.num_linear_layers and c.layout.ep > 1 for c in COSTS)


@pytest.mark.parametrize("name", ["nemotron-h-8b"])
def test_a_hybrid_model_prefills_the_same_in_arrays(name):
    """A hybrid model's prefill has scan FLOPs and a state write: the array form keeps both."""
    cost = StepCost(MODELS[name], H100, RolloutLayout(), InferenceParams())
    tokens = np.array([512, 4096], np.int64)
    pairs = (tokens * (tokens + 1) // 2).astype(float)
    plain = StepCost(load_model("qwen2.5-7b"), H100, RolloutLayout(), InferenceParams())
    assert cost.prefill_ssm_s_per_token > 0 and plain.prefill_ssm_s_per_token == 0
    assert cost.prefill_many_s(tokens, pairs, np.array([1, 8])).tolist() == [
        cost.prefill_s(512, pairs[0], 1), cost.prefill_s(4096, pairs[1], 8)]


@settings(max_examples=40, deadline=None)
@given(which=st.integers(0, len(COSTS) - 1), attention_scale=st.sampled_from([1.0, 1e-3, 1e3, 0.0]),
       segments=st.lists(st.tuples(st.integers(1, 512), st.integers(0, 2_000_000), st.integers(-1, 5000)),
                         min_size=1, max_size=30))
def test_series_times_equal_the_scalar_series(which, attention_scale, segments):
    """series_times_s (k decode steps of n sequences from K context tokens, per segment) against
    series_time_s on each: either line the steeper in every segment (one case for the whole
    array), the slopes equal, and segments of no steps."""
    base = COSTS[which]
    cost = StepCost(base.model, base.device, base.layout, base.params, base.collectives, base.ranks)
    cost.decode_attn_s_per_ctx *= attention_scale   # compute's slope above, below or equal to memory's
    if attention_scale == 0.0:
        cost.decode_attn_s_per_ctx = cost.kv_s_per_token
    n, K, k = (np.array(x, np.int64) for x in zip(*segments, strict=True))
    got = series_times_s(cost, n, K, k)
    assert got.tolist() == [series_time_s(cost.decode_lines(a, b), c, cost.decode_floor_s(a)) if c > 0 else 0.0
                            for a, b, c in segments]
