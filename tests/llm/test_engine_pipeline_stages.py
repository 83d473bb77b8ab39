"""Pipeline-parallel rollout engines (rollout_layout.pp, vLLM's pipeline_parallel_size): a step of n
sequences is pp passes of the fullest stage over a micro-batch of n / pp of them (vLLM V1's batch
queue), so against the same engine on one stage: the compute a token costs divides by pp, the weights
each step streams do not, the weights, KV and Mamba state a device keeps divide by pp (ceil(L / pp)
of L layers), the collectives are a micro-batch's, and pp - 1 stage sends join them."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.llm import inference
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutEngine, RolloutLayout, StepCost, simulate_rollout
from simulator.network.collectives import CollectiveModel

H100 = get_device("h100")
DENSE = load_model("qwen2.5-7b")       # 28 layers
MOE = load_model("qwen3-30b-a3b")      # 48 layers, 128 experts, 8 a token
HYBRID = load_model("nemotron-h-8b")   # 52 layers, Mamba and attention


def _pair(model, pp: int, tp: int = 1, ep: int = 1, params: InferenceParams | None = None):
    return (StepCost(model, H100, RolloutLayout(tp=tp, ep=ep), params),
            StepCost(model, H100, RolloutLayout(tp=tp, ep=ep, pp=pp), params))


@pytest.mark.parametrize(("model", "pp"), [(DENSE, 2), (DENSE, 4), (MOE, 2), (HYBRID, 4)])
def test_a_device_keeps_its_stages_share_of_weights_kv_and_state(model, pp):
    one, staged = _pair(model, pp)
    share = math.ceil(model.num_layers / pp) / model.num_layers
    assert staged.weight_bytes_dev == pytest.approx(one.weight_bytes_dev * share)
    assert staged.kv_bytes_per_token_dev == pytest.approx(one.kv_bytes_per_token_dev * share)
    assert staged.state_bytes_per_seq_dev == pytest.approx(one.state_bytes_per_seq_dev * share)
    assert staged.kv_capacity_tokens > one.kv_capacity_tokens / share   # less weight a device: more room too
    assert staged.pipeline_factor == pytest.approx(pp * share)


def test_uneven_stages_pay_the_fullest_stage_pp_times():
    one, staged = _pair(DENSE, 3)   # 28 layers: stages of 10, 9, 9
    assert staged.stage_share == 10 / 28 and staged.pipeline_factor == pytest.approx(30 / 28)
    assert staged.lin_s_per_token == pytest.approx(one.lin_s_per_token * 10 / 28)
    assert staged.weight_read_s(64) == pytest.approx(one.weight_read_s(64) * 30 / 28)


@pytest.mark.parametrize("pp", [2, 4])
def test_a_token_costs_one_stages_compute_and_a_step_streams_every_weight(pp):
    one, staged = _pair(DENSE, pp)
    for name in ("lin_s_per_token", "decode_attn_s_per_ctx", "prefill_attn_s_per_pair", "kv_s_per_token"):
        assert getattr(staged, name) == pytest.approx(getattr(one, name) / pp), name
    # a dense model's step reads all its weights once, over the stages in turn
    assert staged.weight_read_s(256) == pytest.approx(one.weight_read_s(256))


def test_an_moe_stage_reads_the_experts_its_micro_batch_touches():
    one, staged = _pair(MOE, 2)
    for tokens in (2, 16, 64, 1000):
        assert staged.weight_read_s(tokens) == pytest.approx(one.weight_read_s(tokens / 2))


def test_collectives_are_a_micro_batchs_and_the_stage_sends_join_them():
    params = InferenceParams()
    one, staged = _pair(DENSE, 2, tp=2, params=params)
    tokens = 256
    micro = tokens / 2
    send = micro * DENSE.hidden * params.pipeline_send_tensors * params.activation_bytes / 2   # split over tp 2
    p2p = H100.launch_overhead_s + params.fallback_step_latency_s + send / (
        H100.scaleup_bw_Bps * params.fallback_collective_efficiency)
    assert staged.comm_s(tokens) == pytest.approx(one.comm_s(micro) + (2 - 1) * p2p)


def test_stage_sends_cross_the_link_between_the_stages():
    """TP 8 x PP 2 on two DGX-H100 nodes: the stages are a node each, the send crosses the NICs; the
    same engine with its stages inside one node (TP 4 x PP 2) sends over NVLink."""
    topology = load_topology("dgx-h100", {"nodes": 2})
    collectives = CollectiveModel(topology)
    model = load_model("llama3.1-70b")
    across = StepCost(model, H100, RolloutLayout(tp=8, pp=2), None, collectives, list(range(16)))
    inside = StepCost(model, H100, RolloutLayout(tp=4, pp=2), None, collectives, list(range(8)))
    nbytes = 1e6
    assert across._collective("p2p", 2, across._send_ranks(), nbytes) > inside._collective(
        "p2p", 2, inside._send_ranks(), nbytes)
    assert across._send_ranks() == [0, 8] and inside._send_ranks() == [0, 4]


def test_a_step_waits_for_one_micro_batchs_scheduler_and_the_cpu_does_all_of_them():
    params = InferenceParams(step_overhead_s=1e-3, cpu_per_seq_s=1e-5)
    one, staged = _pair(DENSE, 2, params=params)
    replay = params.cuda_graph_replay_s
    # one stage: a sync engine adds its scheduler for all 64 sequences to the step
    assert one.overhead_s(64, 64) == pytest.approx((1e-3 + 64e-5 + replay, 0.0))
    # two stages: the batch queue schedules one micro-batch of 32 while the other runs; the CPU
    # schedules both a step, so the step lasts at least that long
    assert staged.overhead_s(64, 64) == pytest.approx((1e-3 + 32e-5 + replay, 2 * 1e-3 + 64e-5))
    eager = StepCost(DENSE, H100, RolloutLayout(pp=2), InferenceParams(enforce_eager=True, step_overhead_s=1e-3))
    per_seq = eager.params.cpu_per_seq_s
    assert eager.overhead_s(64, 64)[1] == pytest.approx(max(2e-3 + 64 * per_seq,
                                                            1e-3 + 32 * per_seq + eager.eager_launch_s))
    # CUDA graphs are captured per micro-batch: a step of 2 x the largest graph still replays one
    cap = params.cuda_graph_max_batch
    assert staged.uses_graphs(2 * cap) and not one.uses_graphs(2 * cap)


def test_one_sequence_gains_nothing_and_a_full_pipeline_gains_throughput():
    one, staged = _pair(DENSE, 2)
    # one sequence: its one micro-batch crosses the stages in turn and streams every weight (the per-
    # sequence terms, as n / pp sequences a stage, are small beside them)
    assert staged.decode_step_s(1, 1000) == pytest.approx(one.decode_step_s(1, 1000), rel=0.02)
    # a compute-bound step: the stages work on different micro-batches at once
    n = 4096
    assert staged.decode_step_s(n, n * 1000) < 0.75 * one.decode_step_s(n, n * 1000)


def test_more_stages_than_layers_is_an_error_naming_the_key():
    with pytest.raises(RlsimError) as err:
        StepCost(DENSE, H100, RolloutLayout(pp=29), layout_field="workload.rollout_layout")
    assert err.value.field == "workload.rollout_layout.pp" and "28 layers" in str(err.value)


def test_async_scheduling_with_stages_is_refused_as_vllm_refuses_it():
    with pytest.raises(RlsimError) as err:
        StepCost(DENSE, H100, RolloutLayout(pp=2), InferenceParams(async_scheduling=True),
                 layout_field="workload.rollout_layout")
    assert err.value.field == "workload.rollout_layout.pp" and "async_scheduling" in err.value.fix


def test_an_instance_spans_its_stages():
    assert RolloutLayout(tp=8, ep=2, pp=2, instances=3).devices == 96


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 400)), min_size=1, max_size=60),
       pp=st.sampled_from([2, 3, 4]), instances=st.integers(1, 3), max_seqs=st.integers(1, 64),
       eager=st.booleans())
def test_every_sequence_finishes_once_and_the_array_run_equals_the_event_loop(lengths, pp, instances, max_seqs,
                                                                              eager):
    prompts, responses = (np.array(x) for x in zip(*lengths, strict=True))
    layout = RolloutLayout(tp=1, pp=pp, instances=instances, max_num_seqs=max_seqs)
    params = InferenceParams(enforce_eager=eager)
    result = simulate_rollout(DENSE, H100, layout, prompts, responses, params=params)
    assert np.isfinite(result.finish_s).all() and result.generated_tokens == responses.sum()
    finishes = []
    for least in (1, 10**9):   # the array run, then the event loop alone
        old = inference.FAST_RUN_MIN_SEQUENCES
        inference.FAST_RUN_MIN_SEQUENCES = least
        try:
            engine = RolloutEngine(DENSE, H100, RolloutLayout(pp=pp, max_num_seqs=max_seqs), params)
            engine.add_many(list(range(len(prompts))), prompts.tolist(), responses.tolist(), 0.0)
            finish = np.full(len(prompts), np.nan)
            engine.run_into(finish)
            finishes.append(finish.tolist())
        finally:
            inference.FAST_RUN_MIN_SEQUENCES = old
    assert finishes[0] == finishes[1]


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from([DENSE, MOE, HYBRID]), pp=st.sampled_from([1, 2, 3, 4]), tp=st.sampled_from([1, 2]),
       n=st.integers(1, 512), context=st.integers(1, 4000))
def test_a_step_never_beats_the_instances_roofline(model, pp, tp, n, context):
    """A decode step of n sequences on tp x pp devices is at least a token's way through every stage
    in turn, each TP group reading its layers' weights at the engine's HBM rate (stages add devices,
    not a shorter path), and at least the step's FLOPs over all the devices at their peak."""
    cost = StepCost(model, H100, RolloutLayout(tp=tp, pp=pp, max_num_seqs=512))
    dense = (model.params_total - model.params_routed_experts - model.params_embedding) * 2.0   # bf16
    flops = 2.0 * model.params_compute * n
    floor = max(dense / (tp * cost.bw), flops / (tp * pp * H100.peak("bf16")))
    assert cost.decode_step_s(n, n * context) >= floor * (1 - 1e-9)
