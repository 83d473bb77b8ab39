"""Closed-form checks of the rollout engine's costs beyond the roofline (issue 12, item 1):
CPU per step and per sequence, CUDA graphs vs eager launches, async scheduling, the token budget
with and without chunked prefill, prefix sharing, re-prefill of a resumed sequence, the KV cache
cleared at an interrupt, max_model_len, and a TP16 instance over two nodes."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, StepCost
from simulator.network.collectives import CollectiveModel

H100 = get_device("h100")
QWEN = load_model("qwen2.5-7b")
MOE = load_model("qwen3-30b-a3b")


def _cost(model=QWEN, layout: RolloutLayout | None = None, **params) -> StepCost:
    return StepCost(model, H100, layout or RolloutLayout(), InferenceParams(**params))


def test_graphs_vs_eager_step_overhead_on_a_toy_setting():
    base = dict(step_overhead_s=1e-3, cpu_per_seq_s=0.0, launch_overhead_s=1e-4)
    graphs, eager = _cost(**base), _cost(enforce_eager=True, **base)
    gpu = max(graphs.decode_lines(4, 400)[0], graphs.decode_lines(4, 400)[2]) + graphs.comm_s(4)
    launches = 1e-4 * (10 + 12 * QWEN.num_layers)   # per step + per layer, no MoE layer
    assert graphs.decode_step_s(4, 400) == pytest.approx(gpu + 1e-3 + 3e-4, rel=1e-12)
    # eager: the CPU launches while the GPU runs, after the scheduler: 1 ms + max(launches, GPU
    # + the replay's share, the gaps between kernels), never below the graph step
    assert eager.decode_step_s(4, 400) == pytest.approx(1e-3 + max(launches, gpu + 3e-4), rel=1e-12)
    for n in (1, 64, 512):
        assert eager.decode_step_s(n, n * 400) >= graphs.decode_step_s(n, n * 400)
    assert launches > gpu   # launch-bound at this batch: eager is slower
    # above the captured size the graph engine runs eager too
    big = graphs.decode_step_s(600, 600 * 400)
    assert big == pytest.approx(eager.decode_step_s(600, 600 * 400), rel=1e-12)


def test_a_gpu_bound_eager_step_pays_the_gaps_between_its_kernels():
    """Where the CPU launches ahead of the GPU, the eager step is the graph step with the replay's
    gaps replaced by eager_kernel_gap_s a launch (measured on the lent H100: 1.5-1.8 us a kernel
    against a graph's 0.1-0.3); a gap below the replay's share keeps the replay (never faster)."""
    base = dict(step_overhead_s=1e-3, cpu_per_seq_s=0.0, launch_overhead_s=1e-7)
    launches = 10 + 12 * QWEN.num_layers
    graphs = _cost(**base)
    for gap in (1.6e-6, 5e-6):
        eager = _cost(enforce_eager=True, eager_kernel_gap_s=gap, **base)
        assert eager.decode_step_s(8, 8 * 500) == pytest.approx(
            graphs.decode_step_s(8, 8 * 500) - 3e-4 + gap * launches, rel=1e-12)
    same = _cost(enforce_eager=True, eager_kernel_gap_s=1e-7, **base)
    assert same.decode_step_s(8, 8 * 500) == pytest.approx(graphs.decode_step_s(8, 8 * 500), rel=1e-12)
    assert _cost(MOE, enforce_eager=True).eager_gap_s == pytest.approx(
        1.6e-6 * (10 + 12 * MOE.num_layers + 10 * MOE.num_moe_layers), rel=1e-12)


def test_moe_layers_launch_more():
    cost = _cost(MOE, enforce_eager=True)
    per_launch = H100.launch_overhead_s
    expected = per_launch * (10 + 12 * MOE.num_layers + 10 * MOE.num_moe_layers)
    assert cost.eager_launch_s == pytest.approx(expected, rel=1e-12)
    assert cost.eager_launch_s > _cost(QWEN).eager_launch_s * MOE.num_layers / QWEN.num_layers


def test_cpu_per_sequence_grows_the_step_linearly():
    a, b = _cost(cpu_per_seq_s=0.0), _cost(cpu_per_seq_s=2e-5)
    for n in (1, 64, 256):
        assert b.decode_step_s(n, n * 500) - a.decode_step_s(n, n * 500) == pytest.approx(2e-5 * n, rel=1e-9)


def test_async_step_is_max_of_cpu_and_gpu():
    sync, asyn = _cost(step_overhead_s=5e-3), _cost(step_overhead_s=5e-3, async_scheduling=True)
    n, k = 32, 32 * 300
    c0, _, m0, _, _ = asyn.decode_lines(n, k)
    gpu = max(c0, m0) + asyn.comm_s(n)
    cpu = 5e-3 + 1e-5 * n + 3e-4
    assert asyn.decode_step_s(n, k) == pytest.approx(max(cpu, gpu + 3e-4), rel=1e-12)   # the replay's GPU gaps
    assert sync.decode_step_s(n, k) == pytest.approx(cpu + gpu, rel=1e-12)
    # GPU-bound (no scheduler cost): the replay's gaps stay on the GPU, async or not
    bound = _cost(step_overhead_s=0.0, cpu_per_seq_s=0.0, async_scheduling=True)
    assert bound.decode_step_s(1, 300) == pytest.approx(_cost(step_overhead_s=0.0, cpu_per_seq_s=0.0)
                                                        .decode_step_s(1, 300), rel=1e-12)


def test_floor_series_equals_the_sum_of_steps():
    cost = _cost(step_overhead_s=8e-3, async_scheduling=True)   # the floor holds for the first steps
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), cost.params)
    engine.add_many(range(64), [100] * 64, [3000] * 64, 0.0)
    t = engine.run()[0].time_s
    prefill = engine.cost.prefill_s(6400, 64 * 100 * 101 / 2, 64)
    steps = math.fsum(engine.cost.decode_step_s(64, 64 * 101 + 64 * j) for j in range(2999))
    assert t == pytest.approx(prefill + steps, rel=1e-9)


def _run(params: InferenceParams, prompts, responses, groups=None, generated=None) -> RolloutEngine:
    engine = RolloutEngine(QWEN, H100, RolloutLayout(max_num_seqs=1024), params)
    engine.add_many(range(len(prompts)), prompts, responses, 0.0, generated, group_ids=groups)
    return engine


def test_prefix_sharing_saves_exactly_n_minus_1_prefills():
    """The later samples hit the first's cached prompt but recompute its last token, whose logits
    they sample from (vLLM 0.11 kv_cache_manager.py get_computed_blocks: max_cache_hit_length =
    num_tokens - 1): one token attending to the prompt's tokens each."""
    n, prompt = 8, 1000
    params = InferenceParams()
    shared = _run(params, [prompt] * n, [2] * n, groups=[7] * n)
    alone = _run(params, [prompt] * n, [2] * n)
    shared.run()
    alone.run()
    cost = shared.cost
    one = cost.prefill_s(prompt + n - 1, prompt * (prompt + 1) / 2 + (n - 1) * prompt, n)
    whole = cost.prefill_s(n * prompt, n * prompt * (prompt + 1) / 2, n)
    decode = cost.decode_step_s(n, n * (prompt + 1))
    assert shared.busy_s == pytest.approx(one + decode, rel=1e-12)
    assert alone.busy_s == pytest.approx(whole + decode, rel=1e-12)
    off = _run(InferenceParams(enable_prefix_caching=False), [prompt] * n, [2] * n, groups=[7] * n)
    off.run()
    assert off.busy_s == pytest.approx(alone.busy_s, rel=1e-12)


def test_budget_without_chunking_splits_the_prefill_into_blocking_steps():
    params = InferenceParams(max_num_batched_tokens=2048)
    engine = _run(params, [1000] * 5, [1] * 5)
    engine.run()
    c = engine.cost
    one = 1000 * 1001 / 2
    expected = 2 * c.prefill_s(2000, 2 * one, 2) + c.prefill_s(1000, one, 1)   # 2 + 2 + 1 prompts
    assert engine.busy_s == pytest.approx(expected, rel=1e-12)
    long = _run(params, [5000], [1])   # a prompt above the budget runs alone
    long.run()
    assert long.busy_s == pytest.approx(c.prefill_s(5000, 5000 * 5001 / 2, 1), rel=1e-12)


@pytest.mark.parametrize("prompt", [8000, 8100])
def test_chunked_prefill_bounds_the_step_and_lets_decodes_ride(prompt):
    """The riding decodes take their tokens of the budget: ceil(prompt / (1024 - 24)) chunk steps
    (8100 tokens: 9, where ceil(8100 / 1024) = 8; at 8000 both are 8, and an audit's mutation
    ignoring the riders passed but for a random draw)."""
    budget = 1024
    params = InferenceParams(max_num_batched_tokens=budget, chunked_prefill=True)
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), params)
    engine.add_many(range(24), [50] * 24, [10_000] * 24, 0.0)
    engine.add_many([100], [prompt], [5], 0.5)
    before = engine.generated_tokens
    admit_at, k = engine._next_event()         # the step boundary where it is admitted
    K = engine._K + k * 24
    engine.advance_to(admit_at)
    cost = engine.cost
    steps = math.ceil(prompt / (budget - 24))
    assert steps == {8000: 8, 8100: 9}[prompt]
    phase = cost.mixed_s(24, K, prompt, prompt * (prompt + 1) / 2, 1, steps)
    assert engine.t - admit_at == pytest.approx(phase, rel=1e-12)
    assert engine.generated_tokens - before == k * 24 + 1 + steps * 24   # the decodes rode along
    # each chunk step is shorter than the whole blocking prefill, and longer than a decode step
    blocking = cost.prefill_s(prompt, prompt * (prompt + 1) / 2, 1)
    assert cost.decode_step_s(24, K) < phase / steps < blocking


def test_resumed_sequence_re_prefills_its_whole_prefix():
    engine = _run(InferenceParams(), [700], [500], generated=[300])
    engine.run()
    cost = engine.cost
    prefix = 700 + 300
    decode = math.fsum(cost.decode_step_s(1, prefix + 1 + j) for j in range(500 - 301))
    assert engine.busy_s == pytest.approx(cost.prefill_s(prefix, prefix * (prefix + 1) / 2, 1) + decode,
                                          rel=1e-9)


def test_interrupt_clears_the_kv_cache_and_the_resume_re_prefills():
    engine = RolloutEngine(QWEN, H100, RolloutLayout(), InferenceParams())
    engine.add_many(range(4), [200] * 4, [4000] * 4, 0.0)
    result = engine.interrupt(1.0)
    assert engine._K == 0 and engine._n == 0 and engine.load == 0
    part = result.partial[0]
    assert 0 < part.generated < 4000
    t0 = engine.t
    engine.add(part.seq_id, part.prompt_len, part.response_len, t0, generated=part.generated)
    engine.advance_to(engine.next_event_time())   # the re-prefill of prompt + generated
    prefix = part.prompt_len + part.generated
    assert engine.t - t0 == pytest.approx(engine.cost.prefill_s(prefix, prefix * (prefix + 1) / 2, 1),
                                          rel=1e-12)


def test_max_model_len_caps_prompt_plus_response():
    engine = _run(InferenceParams(max_model_len=1000), [300, 900], [2000, 50])
    engine.run()
    assert engine.generated_tokens == (1000 - 300) + 50   # 900 + 50 fits: kept
    plain = _run(InferenceParams(), [300, 900], [2000, 50])
    plain.run()
    assert plain.generated_tokens == 2050


def test_tp16_over_two_nodes_pays_the_inter_node_all_reduce():
    topo = load_topology("dgx-h100", {"nodes": 2})
    coll = CollectiveModel(topo)
    model = load_model("qwen2.5-72b") if _has("qwen2.5-72b") else QWEN
    tp8 = StepCost(model, H100, RolloutLayout(tp=8), InferenceParams(), coll, list(range(8)))
    tp16 = StepCost(model, H100, RolloutLayout(tp=16), InferenceParams(), coll, list(range(16))) \
        if model.num_heads % 16 == 0 else None
    if tp16 is None:
        pytest.skip("model heads not divisible by 16")
    n = 64
    nbytes = n * model.hidden * 2
    ar8 = coll.cost("all_reduce", list(range(8)), nbytes).time_s
    ar16 = coll.cost("all_reduce", list(range(16)), nbytes).time_s
    assert ar16 > ar8
    assert tp16.comm_s(n) == pytest.approx(2 * model.num_layers * ar16, rel=1e-9)
    assert tp8.comm_s(n) == pytest.approx(2 * model.num_layers * ar8, rel=1e-9)
    # the step difference: half the per-device work, and the all-reduces over the real links
    d16, d8 = tp16.decode_step_s(n, n * 1000), tp8.decode_step_s(n, n * 1000)
    g16 = max(tp16.decode_lines(n, n * 1000)[0], tp16.decode_lines(n, n * 1000)[2])
    g8 = max(tp8.decode_lines(n, n * 1000)[0], tp8.decode_lines(n, n * 1000)[2])
    assert d16 - d8 == pytest.approx(g16 - g8 + 2 * model.num_layers * (ar16 - ar8), rel=1e-9)
    assert tp16.comm_s(n) - tp8.comm_s(n) > 0.1 * d8   # the inter-node all-reduces are no rounding


def _has(name: str) -> bool:
    try:
        load_model(name)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("n", [1, 4])
def test_an_async_step_bound_by_its_cpu_pays_the_scheduler_and_the_graph_replay(n):
    """With 50 ms of scheduler a step the CPU side binds, so an async decode step is exactly
    step_overhead + cpu_per_seq x n + the graph's replay (the test above binds on the GPU, where an
    audit's mutation dropping the replay from the CPU floor passed), in the array form too."""
    asyn = _cost(step_overhead_s=50e-3, async_scheduling=True)
    c0, _, m0, _, _ = asyn.decode_lines(n, n * 300)
    assert max(c0, m0) + asyn.comm_s(n) < 50e-3                      # the GPU side is shorter
    floor = 50e-3 + asyn.params.cpu_per_seq_s * n + asyn.params.cuda_graph_replay_s
    assert asyn.decode_step_s(n, n * 300) == pytest.approx(floor, rel=1e-12)
    added, floors = asyn.overhead_many_s(np.array([n]), np.array([n]))
    assert added[0] == asyn.params.cuda_graph_replay_s and floors[0] == pytest.approx(floor, rel=1e-12)


@pytest.mark.parametrize("tokens", [64, 4096])
def test_a_tp_x_ep_engines_collectives_in_closed_form(tokens):
    """TP 2 x EP 2 on the fallback collectives (no topology): each attention replica all-reduces its
    own tokens / ep twice a layer, and every MoE layer dispatches and combines tokens x k rows over
    the 4 devices (nccl-tests shapes: all-reduce 2(n-1) steps of 2(n-1)/n S, all-to-all n-1 of
    (n-1)/n S). No test had tp > 1 with ep > 1, so the all-reduce's / ep was free (an audit)."""
    cost = _cost(MOE, RolloutLayout(tp=2, ep=2))
    p, bw = cost.params, H100.scaleup_bw_Bps * cost.params.fallback_collective_efficiency
    assert cost.pipeline_factor == 1

    def fallback(steps: int, factor: float, nbytes: float) -> float:
        return H100.launch_overhead_s + steps * p.fallback_step_latency_s + factor * nbytes / bw

    all_reduce = fallback(2, 1.0, tokens / 2 * MOE.hidden * p.activation_bytes)
    rows = tokens / 4 * MOE.experts_per_token * MOE.hidden
    all_to_all = fallback(3, 0.75, rows * p.dispatch_bytes) + fallback(3, 0.75, rows * p.activation_bytes)
    expected = MOE.tp_reductions_per_layer * MOE.num_layers * all_reduce + MOE.num_moe_layers * all_to_all
    assert cost.comm_s(tokens) == pytest.approx(expected, rel=1e-12)
    assert cost.comm_many_s(np.array([tokens]))[0] == pytest.approx(expected, rel=1e-12)
