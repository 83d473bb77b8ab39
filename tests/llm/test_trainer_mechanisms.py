"""Trainer costs beyond the roofline: FSDP gather / reduce-scatter, Ulysses all-to-alls, the SP
backward re-gather, token-budget micro-batches, per-phase offload, the named stacks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import ComputeParams
from simulator.llm.training import (
    TrainLayout,
    TrainParams,
    _Comm,
    _fsdp_layer_comm,
    _groups,
    _micro_batches,
    _stage_params,
    _ulysses_comm,
    forward_cost,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel
from simulator.params import (
    HOST_ADAM_PARAMS_PER_S,
    TRAIN_SOFTWARE,
    CommParams,
    OffloadParams,
    stack_params,
    train_software,
)

TOPO = load_topology({"preset": "dgx-h100", "nodes": 1})
QWEN = load_model("qwen2.5-7b")
SEQS = uniform_sequences(32, 1024)


def _params(**comm) -> TrainParams:
    """`comm` without the step tail's own collectives (the SP norms' all-reduce, the grad norm's): these tests
    price the DP sync (tests/llm/test_finalize_grads.py prices those)."""
    return TrainParams(comm=CommParams(**{"sp_grad_all_reduce": False, "grad_norm_all_reduce": False, **comm}))


def test_fsdp_gather_is_the_all_gather_of_the_layer_shard() -> None:
    lay = TrainLayout(dp=8, zero=3)
    model = CollectiveModel(TOPO)
    groups = _groups(lay, tuple(range(8)))
    layer = layer_shapes(QWEN)[0]
    gather, reduce = _fsdp_layer_comm(layer, lay, groups, 0, _Comm(model), _params())
    assert gather == pytest.approx(model.cost("all_gather", list(range(8)), layer.dense_params * 2.0).time_s)
    grad_bytes = CommParams().grad_reduce_bytes_per_param
    assert reduce == pytest.approx(model.cost("reduce_scatter", list(range(8)), layer.dense_params * grad_bytes).time_s)
    g2, r2 = _fsdp_layer_comm(layer, lay, groups, 0, _Comm(model),
                              _params(fsdp_gather_overlap_fraction=0.75, fsdp_reduce_overlap_fraction=0.5))
    assert g2 == pytest.approx(0.25 * gather) and r2 == pytest.approx(0.5 * reduce)


def test_fsdp_overlap_lowers_the_step_and_defaults_to_the_dp_fraction() -> None:
    lay = TrainLayout(dp=8, zero=3, recompute="full")
    base = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=_params())
    same = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                           params=_params(fsdp_gather_overlap_fraction=0.0, fsdp_reduce_overlap_fraction=0.0))
    hidden = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                             params=_params(fsdp_gather_overlap_fraction=1.0, fsdp_reduce_overlap_fraction=1.0))
    assert same.step_time_s == pytest.approx(base.step_time_s)
    # the per-layer collectives hide; the embedding and output head (FSDP's root unit, outside the
    # layers) are reduced and gathered once after the flush (dp_overlap_fraction 0: whole)
    from simulator.llm.layer_costs import embedding_params
    net, ranks = CollectiveModel(TOPO), list(range(8))
    outer = sum(embedding_params(QWEN))
    after_flush = (net.cost("reduce_scatter", ranks, outer * CommParams().grad_reduce_bytes_per_param).time_s
                   + net.cost("all_gather", ranks, outer * 2.0).time_s)
    assert base.comm_exposed_s["dp"] > after_flush
    assert hidden.comm_exposed_s["dp"] == pytest.approx(after_flush, rel=1e-9)
    assert hidden.step_time_s < base.step_time_s


def test_ulysses_is_four_all_to_alls_forward_and_backward() -> None:
    lay = TrainLayout(tp=1, cp=4, dp=2, ulysses_sp=True).resolve(8)
    model = CollectiveModel(TOPO)
    group = _groups(lay, tuple(range(8))).cp[0]
    layer = layer_shapes(QWEN)[0]
    tokens = np.array([4096.0 / 4])
    fwd, bwd = _ulysses_comm(layer, lay, tokens, group, _Comm(model), TrainParams())
    d = layer.qk_head_dim
    want = sum(model.cost("all_to_all", list(group), float(tokens[0] * n * d * 2.0)).time_s
               for n in (layer.attn_heads, layer.kv_heads, layer.kv_heads, layer.attn_heads))
    assert fwd[0] == pytest.approx(want) and bwd[0] == pytest.approx(want)
    step = train_step_cost(QWEN, lay, TOPO, sequences=uniform_sequences(16, 4096), packing="packed")
    assert step.comm_exposed_s["cp"] > 0
    with pytest.raises(RlsimError):  # 28 heads: tp x cp = 8 does not divide them
        TrainLayout(tp=2, cp=4, ulysses_sp=True).resolve(8).check_model(QWEN)


def test_sp_backward_allgather_adds_two_all_gathers_per_layer() -> None:
    lay = TrainLayout(tp=4, dp=2, recompute="none", micro_batch=1)
    off = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed")
    on = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=_params(sp_backward_allgather=True))
    model = CollectiveModel(TOPO)
    act = 1024 * QWEN.hidden * 2.0
    per_mb = 2 * QWEN.num_layers * model.cost("all_gather", [0, 1, 2, 3], act).time_s
    micro = 32 // 2
    assert on.comm_exposed_s["tp"] - off.comm_exposed_s["tp"] == pytest.approx(micro * per_mb, rel=1e-6)
    half = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                           params=_params(sp_backward_allgather=True, sp_backward_allgather_overlap_fraction=0.5))
    assert half.comm_exposed_s["tp"] - off.comm_exposed_s["tp"] == pytest.approx(micro * per_mb / 2, rel=1e-6)


def test_token_budget_micro_batches_closed_form() -> None:
    lay = TrainLayout(dp=2).resolve(2)
    out = _micro_batches(uniform_sequences(64, 1000), lay, "packed", budget=4096)
    assert [t.tolist() for t, _ in out] == [[4000.0] * 8] * 2      # 32 per replica, 4 per micro-batch
    # Balanced: 2 x 3000 + 6 x 1000 into ceil(12000 / 4096) = 3 bins of at most 4096 -> 4000 each.
    mixed = np.array([3000, 3000, 1000, 1000, 1000, 1000, 1000, 1000])
    (tokens, sq), = _micro_batches(mixed, TrainLayout(dp=1).resolve(1), "packed", budget=4096)
    assert sorted(tokens.tolist()) == [4000.0, 4000.0, 4000.0]
    (padded, _), = _micro_batches(mixed, TrainLayout(dp=1).resolve(1), "padded", budget=4096)
    assert sorted(padded.tolist()) == [4000.0, 6000.0, 6000.0]   # 3000+1000 pads to 2 x 3000; 4 x 1000
    with pytest.raises(RlsimError) as exc:
        _micro_batches(mixed, TrainLayout(dp=1).resolve(1), "packed", budget=2048)
    assert "max_tokens_per_micro_batch" in str(exc.value)


def test_token_budget_ranks_run_one_count_a_multiple_of_an_interleaved_group() -> None:
    """verl's rearrange_micro_batches: every DP rank takes the largest rank's count (same_micro_num_in_dp,
    an all-reduce MAX), rounded up to a multiple of pp under an interleaved pipeline
    (num_batches_divided_by). Each rank set its own: a budget with vpp 2 failed on 3 micro-batches, and
    adding 221 tokens sped a step up 6% (a training audit)."""
    # rank 0: 4000 + 4000 (two micro-batches of at most 6000); rank 1: 4000 + 100 (one, alone)
    seqs = np.array([4000, 4000, 4000, 100])
    out = _micro_batches(seqs, TrainLayout(dp=2).resolve(2), "packed", budget=6000)
    assert sorted(sorted(t.tolist()) for t, _ in out) == [[100.0, 4000.0], [4000.0, 4000.0]]
    # 24 x 4000 over dp 4: 6 a rank, 3 micro-batches of 8000 -> 4 (a multiple of pp 2) with vpp 2
    lay = TrainLayout(pp=2, vpp=2, dp=4)
    interleaved = _micro_batches(uniform_sequences(24, 4000), lay.resolve(8), "packed", budget=8192)
    assert [t.size for t, _ in interleaved] == [4] * 4
    assert [t.size for t, _ in _micro_batches(uniform_sequences(24, 4000), TrainLayout(pp=2, dp=4).resolve(8),
                                              "packed", budget=8192)] == [3] * 4
    train_step_cost(load_model("qwen2.5-1.5b"), lay, TOPO, sequences=uniform_sequences(24, 4000), packing="packed",
                    params=TrainParams(check_memory=False))   # it runs (an RlsimError before)


def test_logprob_budget_is_its_own() -> None:
    lay = TrainLayout(dp=8, max_tokens_per_micro_batch=2048)
    seqs = uniform_sequences(64, 1024)
    small = forward_cost(QWEN, lay, TOPO, sequences=seqs, packing="packed")
    big = forward_cost(QWEN, dataclasses.replace(lay, logprob_max_tokens_per_micro_batch=8192), TOPO,
                       sequences=seqs, packing="packed")
    assert big.tokens == small.tokens and big.time_s != small.time_s


def test_offload_is_twice_the_state_over_the_host_link() -> None:
    lay = TrainLayout(dp=8, zero=1)
    base = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed")
    # per optimizer step (scope optimizer_step); scope update is paid once per training phase by the
    # RL trainer (tests/rl/test_llm_costs_offload.py). The gradients go out and back; the optimizer is
    # Megatron-Core's HybridDeviceOptimizer (test_megatrons_cpu_offloaded_optimizer_steps_on_the_host)
    p = TrainParams(offload=OffloadParams(optimizer=True, grads=True, scope="optimizer_step"))
    assert train_step_cost(QWEN, TrainLayout(dp=8, zero=1), TOPO, sequences=SEQS, packing="packed",
                           params=TrainParams(offload=OffloadParams(optimizer=True))).offload_s == 0.0
    off = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=p)
    link = TOPO.device_spec(0).host_link_bw_Bps * 0.85    # the topology's host link (host.efficiency)
    offloaded = base.memory.optimizer_bytes / 12          # fp32 master + 2 moments a parameter
    host = offloaded / HOST_ADAM_PARAMS_PER_S
    want = 2 * off.memory.gradients_bytes / link + offloaded * 8 / link + host
    assert off.offload_s == pytest.approx(want)
    given = TrainParams(offload=OffloadParams(optimizer=True, grads=True, host_link_efficiency=0.5,
                                              scope="optimizer_step"))
    assert train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                           params=given).offload_s == pytest.approx((want - host) * 0.85 / 0.5 + host)
    assert off.step_time_s == pytest.approx(base.step_time_s + want)
    assert any(iv.state == "offload" for iv in off.timeline)
    fwd = forward_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                       params=TrainParams(offload=OffloadParams(params=True)))
    fwd0 = forward_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed")
    assert fwd.time_s == pytest.approx(fwd0.time_s + 2 * off.memory.weights_bytes / link)


def test_megatrons_cpu_offloaded_optimizer_steps_on_the_host() -> None:
    """Megatron-Core's optimizer_cpu_offload (offload.optimizer, scope optimizer_step): the offloaded
    share (optimizer_fraction) of the optimizer never comes back to the device; each optimizer step
    moves its parameters' fp32 gradients out and fp32 parameters back (8 B a parameter over the host
    link) and runs AdamW on the host at host_adam_params_per_s; the rest steps on the device."""
    lay = TrainLayout(dp=8, zero=1)
    base = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed")
    link = TOPO.device_spec(0).host_link_bw_Bps * 0.85
    params = base.memory.optimizer_bytes / 12
    for share, rate in ((1.0, HOST_ADAM_PARAMS_PER_S), (0.25, 1e9)):
        knobs = {} if rate == HOST_ADAM_PARAMS_PER_S else {"host_adam_params_per_s": rate}
        p = TrainParams(offload=OffloadParams(optimizer=True, scope="optimizer_step", optimizer_fraction=share,
                                              **knobs))
        off = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=p)
        assert off.offload_s == pytest.approx(share * params * (8 / link + 1 / rate))
        assert off.memory.optimizer_bytes == pytest.approx((1 - share) * base.memory.optimizer_bytes)
        assert off.memory.weights_bytes == base.memory.weights_bytes
    with pytest.raises(ValueError, match="applies only with offload.optimizer: true with offload.scope"):
        OffloadParams(optimizer=True, host_adam_params_per_s=1e9)
    with pytest.raises(ValueError, match="pinned"):
        OffloadParams(optimizer=True, scope="optimizer_step", pageable=True)


def test_a_pageable_offload_goes_out_and_in_at_the_hosts_rates_where_slower_than_the_link() -> None:
    """train_params.offload.pageable (verl's .to("cpu")): out at pageable_offload_Bps, back in at
    pageable_onload_Bps, each bounded by the host link; pageable needs an offloaded state."""
    lay = TrainLayout(dp=8, zero=1)
    p = TrainParams(offload=OffloadParams(grads=True, pageable=True, pageable_offload_Bps="2 GB/s",
                                          pageable_onload_Bps="5 GB/s", scope="optimizer_step"))
    off = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=p)
    state = off.memory.gradients_bytes
    assert off.offload_s == pytest.approx(state / 2e9 + state / 5e9)
    fast = TrainParams(offload=OffloadParams(grads=True, pageable=True, scope="optimizer_step",
                                             pageable_offload_Bps="1 TB/s",
                                             pageable_onload_Bps="1 TB/s"))
    link = TOPO.device_spec(0).host_link_bw_Bps * 0.85
    assert train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed",
                           params=fast).offload_s == pytest.approx(2 * state / link)
    with pytest.raises(ValueError, match="pageable applies to an offloaded state"):
        OffloadParams(pageable=True)
    with pytest.raises(ValueError, match="apply only with pageable"):
        OffloadParams(optimizer=True, pageable_onload_Bps="5 GB/s")


def test_named_stacks() -> None:
    assert {"megatron-core", "megatron-core-overlap", "megatron-2022", "megatron-2021"} <= set(TRAIN_SOFTWARE)
    s22 = train_software("megatron-2022")
    assert s22.recompute[0] == "selective" and s22.sequence_parallel is None
    assert not s22.params.compute.flash_attention and s22.params.comm.pp_blocking_send
    with pytest.raises(RlsimError):
        s22.layout_fields(cp=2)
    over = stack_params(train_software("megatron-core-overlap"), {"comm": {"dp_overlap_fraction": 0.5}})
    assert over.comm.dp_overlap_fraction == 0.5 and over.comm.tp_overlap_fraction == 0.8
    # The 2022 stack on the 2021 layout (no SP, full recompute) costs what megatron-2021 costs.
    lay = TrainLayout(tp=4, dp=2, recompute="full", zero=0, sequence_parallel=False)
    a = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, params=s22.params)
    b = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, params=train_software("megatron-2021").params)
    assert a.step_time_s == pytest.approx(b.step_time_s)


def test_zero1_gradient_sync_reduces_fp32_gradients_and_gathers_bf16_weights() -> None:
    """ZeRO-1 sync per stage = reduce_scatter(N x grad bytes) + all_gather(N x weight bytes), N the
    stage's parameters per TP rank; the default gradient dtype is fp32 (Megatron bf16, verl FSDP)."""
    lay = TrainLayout(tp=1, dp=8, zero=1).resolve(8)
    model = CollectiveModel(TOPO)
    n = sum(_stage_params(QWEN, lay)[0])
    cost = train_step_cost(QWEN, lay, TOPO, None, SEQS, params=_params(dp_overlap_fraction=0.0), collectives=model)
    want = model.cost("reduce_scatter", list(range(8)), n * 4.0).time_s + model.cost("all_gather", list(range(8)), n * 2.0).time_s
    assert CommParams().grad_reduce_bytes_per_param == 4.0
    assert cost.comm_exposed_s["dp"] == pytest.approx(want)
    bf16 = train_step_cost(QWEN, lay, TOPO, None, SEQS, params=_params(dp_overlap_fraction=0.0,
                                                                        grad_reduce_bytes_per_param=2.0))
    assert bf16.comm_exposed_s["dp"] < cost.comm_exposed_s["dp"]
    for name in ("megatron-2021", "megatron-2022"):   # the papers' stacks keep their 2 bytes
        assert train_software(name).params.comm.grad_reduce_bytes_per_param == 2.0


@pytest.mark.parametrize("fraction", [0.9, 0.5, 0.0])
def test_gradient_sync_hides_only_under_the_last_backward_and_the_first_forward(fraction: float) -> None:
    """dp_overlap_window last-micro-batch: exposed = max((1 - f) t_rs, t_rs - last backward) +
    max((1 - f) t_ag, t_ag - first forward); "step" keeps (1 - f)(t_rs + t_ag)."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    net = CollectiveModel(topo)
    lay = TrainLayout(tp=4, dp=4, zero=1).resolve(16)
    seqs = uniform_sequences(16, 512)
    win = train_step_cost(QWEN, lay, topo, None, seqs, params=_params(dp_overlap_fraction=fraction), collectives=net)
    n = sum(_stage_params(QWEN, lay)[0])
    group = _groups(lay, tuple(range(16))).dp[0]
    t_rs = net.cost("reduce_scatter", group, n * 4.0).time_s
    t_ag = net.cost("all_gather", group, n * 2.0).time_s
    ops = [iv for iv in win.pipeline.intervals if iv.stage == 0 and iv.state in ("forward", "backward")]
    last_bwd = [iv.end - iv.start for iv in ops if iv.state == "backward"][-1]
    first_fwd = [iv.end - iv.start for iv in ops if iv.state == "forward"][0]
    assert t_rs > last_bwd  # the case the window matters for
    want = max((1 - fraction) * t_rs, t_rs - last_bwd) + max((1 - fraction) * t_ag, t_ag - first_fwd)
    assert win.comm_exposed_s["dp"] == pytest.approx(want)
    # at fraction 0 nothing hides, so the window does not apply (CommParams refuses it there)
    unbounded = train_step_cost(QWEN, lay, topo, None, seqs, collectives=net, params=_params(
        dp_overlap_fraction=fraction, **({"dp_overlap_window": "step"} if fraction else {})))
    assert unbounded.comm_exposed_s["dp"] == pytest.approx((1 - fraction) * (t_rs + t_ag))


def test_interleaved_chunks_reduce_one_after_another_from_their_last_backward() -> None:
    """Two chunks, t = 4 (2 each), fraction 0.5: chunk A's last backward runs 0-1, chunk B's 2-3
    (the flush ends at 3). A: starts at 0, its last bucket (1) after 1 -> ends at 2; B: starts at
    2, ends at max(2 + 2, 3 + 1) = 4: 1 exposed. Weights: A gathered 0-2 for a forward 0-1
    (waits max(0 + 1 - 0, 2 - 1) = 1), B 2-4 for a forward 2-3 (waits 1): 1."""
    from simulator.llm.training import _grad_sync_exposed, _weight_gather_exposed

    chunks = [(0.0, 1.0, 0.0, 1.0), (2.0, 3.0, 2.0, 3.0)]
    assert _grad_sync_exposed(4.0, 0.5, chunks, 3.0) == pytest.approx(1.0)
    assert _weight_gather_exposed(4.0, 0.5, chunks) == pytest.approx(1.0)
    one = [(0.0, 1.0, 0.0, 1.0)]   # one chunk: the closed forms of the single-window test
    for t, frac in ((4.0, 0.5), (0.5, 0.9), (3.0, 0.9)):
        assert _grad_sync_exposed(t, frac, one, 1.0) == pytest.approx(max((1 - frac) * t, t - 1.0))
        assert _weight_gather_exposed(t, frac, one) == pytest.approx(max((1 - frac) * t, t - 1.0))
    assert _grad_sync_exposed(0.0, 0.5, chunks, 3.0) == 0.0 == _weight_gather_exposed(0.0, 0.5, chunks)


def test_megatron_core_buckets_leave_one_bucket_of_a_chunk_exposed() -> None:
    """dp_bucket_min_params (Megatron-Core 0.8: buckets of max(40M, 1M x DP) parameters): the share
    that hides is f x (1 - bucket / the chunk's parameters), nothing when the chunk fits one bucket;
    the step's exposed sync is the window's closed form at that share; the per-rank size needs the
    minimum."""
    comm = CommParams(dp_overlap_fraction=1.0, dp_bucket_min_params=40e6)
    assert comm.dp_hidden_share(400e6, 8) == pytest.approx(0.9)          # 40M of 400M
    assert comm.dp_hidden_share(400e6, 80) == pytest.approx(0.8)         # 80M buckets at DP 80
    assert comm.dp_hidden_share(30e6, 8) == 0.0                          # one bucket
    assert CommParams(dp_overlap_fraction=0.5, dp_bucket_min_params=40e6).dp_hidden_share(400e6, 8) == pytest.approx(0.45)
    assert CommParams(dp_overlap_fraction=0.7).dp_hidden_share(400e6, 8) == 0.7   # no buckets: the fraction
    with pytest.raises(ValueError, match="dp_bucket_min_params"):
        CommParams(dp_bucket_params_per_rank=2e6)
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    net = CollectiveModel(topo)
    lay = TrainLayout(tp=4, dp=4, zero=1).resolve(16)
    seqs = uniform_sequences(16, 512)
    n = sum(_stage_params(QWEN, lay)[0])
    share = 1.0 - 40e6 / n
    bucketed = train_step_cost(QWEN, lay, topo, None, seqs, collectives=net,
                               params=_params(dp_overlap_fraction=1.0, dp_bucket_min_params=40e6))
    plain = train_step_cost(QWEN, lay, topo, None, seqs, collectives=net, params=_params(dp_overlap_fraction=share))
    assert bucketed.comm_exposed_s["dp"] == pytest.approx(plain.comm_exposed_s["dp"])
    whole = train_step_cost(QWEN, lay, topo, None, seqs, collectives=net,
                            params=_params(dp_overlap_fraction=1.0, dp_bucket_min_params=2 * n))
    none = train_step_cost(QWEN, lay, topo, None, seqs, collectives=net, params=_params(dp_overlap_fraction=0.0))
    assert whole.comm_exposed_s["dp"] == pytest.approx(none.comm_exposed_s["dp"])
    overlap = train_software("megatron-core-overlap").params.comm
    assert (overlap.dp_overlap_fraction, overlap.dp_bucket_min_params) == (1.0, 40e6)


def test_megatron_core_buckets_only_the_first_stages_first_chunk() -> None:
    """Megatron-Core's DDP turns bucketing off on pipeline ranks after the first (their sync is off
    the critical path) and on model chunks after the first (megatron-core 0.8.0
    distributed_data_parallel.py: bucket_size None when get_pipeline_model_parallel_rank() > 0 or
    disable_bucketing, which training.py sets for model_chunk_idx > 0): such a chunk reduces in one
    bucket after its last backward, as with a bucket that holds it whole, while stage 0's first chunk
    still hides all but one bucket."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    net = CollectiveModel(topo)
    lay = TrainLayout(tp=4, pp=2, dp=2, zero=1).resolve(16)
    seqs = uniform_sequences(16, 512)
    n = max(sum(p) for p in _stage_params(QWEN, lay))
    bucketed, whole = (train_step_cost(QWEN, lay, topo, None, seqs, collectives=net,
                                       params=_params(dp_overlap_fraction=1.0, dp_bucket_min_params=b))
                       for b in (40e6, 2 * n))
    assert bucketed.stage_tail_s[1][1] == pytest.approx(whole.stage_tail_s[1][1], rel=1e-12)   # one bucket
    assert bucketed.stage_tail_s[0][1] < whole.stage_tail_s[0][1]                            # buckets hide
    # the per-chunk shares: chunk A (0-1) hides half, chunk B (2-3) none: A ends at 2, B at 3 + 2 = 5
    from simulator.llm.training import _grad_sync_exposed, _weight_gather_exposed

    chunks = [(0.0, 1.0, 0.0, 1.0), (2.0, 3.0, 2.0, 3.0)]
    assert _grad_sync_exposed(4.0, [0.5, 0.0], chunks, 3.0) == pytest.approx(2.0)
    # weights: A gathered 0-2, half before its forward at 0 (waits 1); B 2-4, all before its forward at 2
    assert _weight_gather_exposed(4.0, [0.5, 0.0], chunks) == pytest.approx(2.0)


def test_userbuffer_overlap_closed_forms() -> None:
    """TE userbuffers, per collective C beside its GEMM G: ring exchange (tp - 1 chunk transfers)
    exposes (tp - 1) max(0, C / (tp - 1) - G / tp); the 4-split pipeline C / 4 + 3 max(0, (C - G) / 4);
    bulk max(0, C - G)."""
    from simulator.llm.training import _pipelined_s, _ring_exchange_s, _userbuffer_tp

    small, big, gemm = np.array([1.0]), np.array([100.0]), np.array([40.0])
    assert _ring_exchange_s(small, gemm, 8)[0] == 0.0
    assert _ring_exchange_s(big, gemm, 8)[0] == pytest.approx(100 - 40 * 7 / 8)
    assert _pipelined_s(small, gemm, 4)[0] == pytest.approx(0.25)
    assert _pipelined_s(big, gemm, 4)[0] == pytest.approx(25 + 3 * 15)
    gemms = {"qkv": (gemm, gemm, gemm), "o": (gemm, gemm, gemm)}
    fwd, bwd = _userbuffer_tp([("qkv", "o")], gemms, small, small, 8, 4)
    assert (fwd[0], bwd[0]) == (pytest.approx(0.25), 0.0)   # compute-bound: only the last RS split


def test_userbuffers_price_each_collective_beside_its_gemm_and_leave_moe_layers() -> None:
    """A dense TP4 + SP layer under tp_userbuffers: the step's exposed TP time is micro-batches x
    layers x the closed forms over the layer's own GEMM times and collectives (re-gather included);
    an MoE model's layers keep the fraction path (the flag changes nothing there)."""
    from simulator.llm.train_compute import DeviceRates, gemm_times
    from simulator.llm.training import _tp_blocks, _userbuffer_tp

    lay = TrainLayout(tp=4, dp=2, recompute="none", micro_batch=1)
    on = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=_params(tp_userbuffers=True))
    model = CollectiveModel(TOPO)
    act = np.array([1024 * QWEN.hidden * 2.0])
    gather = np.array([model.cost("all_gather", [0, 1, 2, 3], act[0]).time_s])
    scatter = np.array([model.cost("reduce_scatter", [0, 1, 2, 3], act[0]).time_s])
    spec, compute = TOPO.device_spec(0), TrainParams().compute
    rates = DeviceRates(spec.peak("bf16"), spec.gemm_efficiency, spec.hbm_bw_Bps * spec.hbm_efficiency,
                        spec.launch_overhead_s)
    layer = layer_shapes(QWEN)[0]
    gemms = gemm_times(layer, np.array([1024.0]), tp=4, ep=1, rates=rates, params=compute)
    fwd, bwd = _userbuffer_tp(_tp_blocks(layer), gemms, gather, scatter, 4, 4)
    assert on.comm_exposed_s["tp"] == pytest.approx(32 // 2 * QWEN.num_layers * (fwd[0] + bwd[0]), rel=1e-6)
    off = train_step_cost(QWEN, lay, TOPO, sequences=SEQS, packing="packed", params=_params())
    assert on.comm_exposed_s["tp"] < off.comm_exposed_s["tp"]
    moe = load_model("qwen3-30b-a3b")
    assert _tp_blocks(layer_shapes(moe)[-1]) is None
    moe_lay = TrainLayout(tp=2, ep=4, dp=4, recompute="full", micro_batch=1)
    a = train_step_cost(moe, moe_lay, TOPO, sequences=SEQS, packing="packed", params=_params(tp_userbuffers=True))
    b = train_step_cost(moe, moe_lay, TOPO, sequences=SEQS, packing="packed", params=_params())
    assert a.step_time_s == b.step_time_s


# ---- errors name the scenario key the user set (the path `--set` takes) ------------------------------
def test_a_sequence_over_the_logprob_budget_names_the_logprob_key() -> None:
    seqs = uniform_sequences(16, 2048)
    lay = TrainLayout(dp=8, max_tokens_per_micro_batch=4096, logprob_max_tokens_per_micro_batch=1024)
    with pytest.raises(RlsimError) as exc:
        forward_cost(QWEN, lay, TOPO, sequences=seqs, packing="packed")
    assert exc.value.field == "workload.train_layout.logprob_max_tokens_per_micro_batch"
    assert "raise logprob_max_tokens_per_micro_batch" in exc.value.fix
    assert "log_prob_max_token_len_per_gpu" in exc.value.fix
    # without a log-prob budget the forward pass uses the training one, and names it
    with pytest.raises(RlsimError) as exc:
        forward_cost(QWEN, TrainLayout(dp=8, max_tokens_per_micro_batch=1024), TOPO, sequences=seqs,
                     packing="packed")
    assert exc.value.field == "workload.train_layout.max_tokens_per_micro_batch"
    assert "ppo_max_token_len_per_gpu" in exc.value.fix


def test_interleaved_micro_batch_error_names_the_vpp_key() -> None:
    # 12 sequences over dp 4: 3 micro-batches a replica, not a multiple of pp 2
    with pytest.raises(RlsimError, match="multiple of pp") as exc:
        train_step_cost(QWEN, TrainLayout(pp=2, vpp=2, dp=4), TOPO, sequences=uniform_sequences(12, 1024))
    assert exc.value.field == "workload.train_layout.vpp"


def test_interleaved_refusal_quotes_megatron_and_gives_the_fix() -> None:
    with pytest.raises(RlsimError) as exc:
        train_step_cost(QWEN, TrainLayout(pp=2, vpp=2, dp=4), TOPO, sequences=uniform_sequences(12, 1024))
    assert "number of microbatches (3) is not divisible by pipeline-model-parallel-size (2)" in exc.value.message
    assert "multiple of 2 micro-batches" in exc.value.fix and "vpp: 1" in exc.value.fix


def test_an_interleaved_forward_only_pass_refuses_what_training_refuses() -> None:
    """Megatron-Core runs forward_only passes through forward_backward_pipelining_with_interleaving too,
    whose micro-batch check comes before the forward_only branch (0.8.0 schedules.py)."""
    with pytest.raises(RlsimError, match="multiple of pp") as exc:
        forward_cost(QWEN, TrainLayout(pp=2, vpp=2, dp=4), TOPO, sequences=uniform_sequences(12, 1024))
    assert exc.value.field == "workload.train_layout.vpp"
    ok = forward_cost(QWEN, TrainLayout(pp=2, vpp=2, dp=4), TOPO, sequences=uniform_sequences(16, 1024))
    assert ok.time_s > 0   # 2 micro-batches a replica, a multiple of pp 2
    plain = forward_cost(QWEN, TrainLayout(pp=2, vpp=1, dp=4), TOPO, sequences=uniform_sequences(12, 1024))
    assert plain.time_s > 0   # 1F1B takes any count


def test_unknown_compute_dtype_names_the_train_params_key() -> None:
    params = TrainParams(compute=ComputeParams(dtype="fp4"))
    with pytest.raises(RlsimError, match="no peak figure") as exc:
        train_step_cost(QWEN, TrainLayout(dp=8), TOPO, sequences=SEQS, params=params)
    assert exc.value.field == "workload.train_params.compute.dtype"


def test_a_layout_out_of_memory_names_the_train_layout_key() -> None:
    with pytest.raises(RlsimError, match="does not fit in device memory") as exc:
        train_step_cost(load_model("llama3.1-70b"), TrainLayout(dp=8, zero=0), TOPO, sequences=SEQS,
                        source="w.yaml")
    assert exc.value.field == "workload.train_layout" and exc.value.source == "w.yaml"


def test_ring_cp_backward_moves_kv_again_and_dkv() -> None:
    """Ring attention: the forward all-gathers K,V; the backward circulates K,V again and the dK,dV
    the other way (all_gather + reduce_scatter of the full gathered size), each x (1 - overlap)."""
    from simulator.llm.training import _layer_cost

    lay = TrainLayout(tp=1, cp=4, dp=2).resolve(8)
    net = CollectiveModel(TOPO)
    groups = _groups(lay, tuple(range(8)))
    layer = layer_shapes(QWEN)[0]
    tokens = np.array([1024.0])
    from simulator.llm.train_compute import layer_times
    from simulator.llm.training import rates_for
    times = layer_times(layer, QWEN.hidden, QWEN.ffn_hidden, True, tokens, tokens ** 2, tp=1, sp=False, ep=1,
                        rates=rates_for(TOPO.device_spec(0), TrainParams()), params=ComputeParams())
    cost = _layer_cost(layer, times, QWEN, lay, tokens, groups, 0, _Comm(net), TrainParams())
    kv = float(tokens[0]) * 4 * layer.kv_heads * (layer.qk_head_dim + layer.v_head_dim) * 2.0
    ranks, hidden = list(groups.cp[0]), 1 - CommParams().cp_overlap_fraction
    gather, scatter = net.cost("all_gather", ranks, kv).time_s, net.cost("reduce_scatter", ranks, kv).time_s
    assert cost.fwd_comm["cp"][0] == pytest.approx(gather * hidden)
    assert cost.bwd_comm["cp"][0] == pytest.approx((gather + scatter) * hidden)


def test_a_pipeline_send_under_sequence_parallelism_is_the_ranks_own_slice() -> None:
    """With SP each TP rank sends its s / tp slice and its peer uses it as it is: p2p(A / tp), no
    all-gather; without SP, Megatron's scatter / gather: p2p(A / tp) + all_gather(A)."""
    from simulator.llm.training import _p2p_times

    net = CollectiveModel(load_topology({"preset": "dgx-h100", "nodes": 2}))
    tokens = np.array([4096.0])
    act = 4096.0 * QWEN.hidden * 2.0
    out = {}
    for sp in (True, False):
        lay = TrainLayout(tp=4, pp=2, sequence_parallel=sp).resolve(16)
        groups = _groups(lay, tuple(range(16)))
        out[sp] = float(_p2p_times(QWEN, lay, tokens, groups, _Comm(net), TrainParams())[0, 0])
        pair = list(groups.p2p[0])
        slice_s = net.cost("p2p", pair, act / 4).time_s
        want = slice_s if sp else slice_s + net.cost("all_gather", list(groups.tp[1]), act).time_s
        assert out[sp] == pytest.approx(want)
    assert out[True] < out[False]


SMALL_QWEN = load_model("qwen2.5-1.5b")


@pytest.mark.parametrize("budget", [None, 4096])
def test_a_head_that_scores_the_responses_alone_projects_their_tokens(budget) -> None:
    """scored: each sequence's tokens the output layer projects (TRL's fused head: the completions).
    One device, one pipeline stage: the forward pass is a sum over micro-batches, so scoring the
    responses alone saves the head's forward (GEMM and loss) on the prompt tokens exactly; the
    micro-batches (sampler or token budget) and every other part are the same."""
    from simulator.llm.train_compute import logits_times
    from simulator.llm.training import rates_for

    lay = TrainLayout(dp=1, micro_batch=2, max_tokens_per_micro_batch=budget)
    seqs = np.array([1500, 900, 1200, 2000, 700, 1100])
    responses = np.array([1000, 400, 900, 1200, 300, 600])
    whole = forward_cost(SMALL_QWEN, lay, TOPO, range(1), seqs, packing="packed")
    scored = forward_cost(SMALL_QWEN, lay, TOPO, range(1), seqs, packing="packed", scored=responses)
    params = TrainParams()
    rates = rates_for(TOPO.device_spec(0), params)

    def head_forward(tokens: float) -> float:
        return float(logits_times(int(SMALL_QWEN.hidden), int(SMALL_QWEN.head_outputs), np.array([tokens]), tp=1, rates=rates,
                                  params=params.compute)[0][0])

    micro = _micro_batches(seqs, lay.resolve(1), "packed", budget)[0][0]
    heads = [head_forward(t) for t in micro]
    assert whole.time_s - scored.time_s == pytest.approx(sum(heads) - sum(head_forward(
        t) for t in _scored_per_micro_batch(seqs, responses, lay, budget)), rel=1e-6)
    assert train_step_cost(SMALL_QWEN, lay, TOPO, range(1), seqs, packing="packed", scored=responses).step_time_s < \
        train_step_cost(SMALL_QWEN, lay, TOPO, range(1), seqs, packing="packed").step_time_s
    with pytest.raises(RlsimError, match="scored tokens"):
        forward_cost(SMALL_QWEN, lay, TOPO, range(1), seqs, packing="packed", scored=seqs + 1)


def _scored_per_micro_batch(seqs, responses, lay, budget) -> list[float]:
    """The responses' tokens of each micro-batch, as the packers group the sequences."""
    from simulator.llm.training import _micro_batch_parts
    return list(_micro_batch_parts(seqs, lay.resolve(1), "packed", budget, scored=responses)[1][0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.floats(0, 1)), min_size=1, max_size=40),
       st.integers(1, 4), st.integers(1, 3), st.sampled_from([None, 3000, 6000]), st.sampled_from(["packed", "padded"]))
def test_the_scored_tokens_are_grouped_as_their_sequences(samples, dp, micro_batch, budget, packing) -> None:
    """Each micro-batch's scored tokens are its own sequences' (the packers keep every sequence once):
    they sum to the batch's, one array a replica of the replica's micro-batch count, and a head that
    scores every token gets the packed micro-batches' tokens."""
    from simulator.llm.training import _micro_batch_parts

    seqs = np.array([length for length, _ in samples])
    scored = np.array([int(length * share) for length, share in samples])
    lay = TrainLayout(dp=dp, micro_batch=micro_batch).resolve(dp)
    replicas, heads = _micro_batch_parts(seqs, lay, packing, budget, scored=scored)
    assert len(heads) == len(replicas) and all(h.shape == t.shape for h, (t, _) in zip(heads, replicas, strict=True))
    assert sum(float(h.sum()) for h in heads) == pytest.approx(float(scored.sum()))
    if packing == "packed":
        _, whole = _micro_batch_parts(seqs, lay, packing, budget, scored=seqs)
        for h, (t, _) in zip(whole, replicas, strict=True):
            np.testing.assert_allclose(h, t)


def test_full_recompute_redoes_the_forwards_collectives_but_not_the_zero3_gather():
    """One layer's backward with full recompute: its own compute and comm, the forward's compute again,
    and the forward's collectives again except the ZeRO-3 parameter gather (the backward's gather
    serves the recomputation); with no recompute none of them (an audit's mutation re-gathering
    passed every test). Rows: fwd, fwd comm, bwd, compute, then comm by kind (tp, cp, ep, pp, dp)."""
    import numpy as np

    from simulator.llm.training import COMM_KINDS, _layer_addends, _LayerCost
    one = np.ones(1)
    layer = _LayerCost(fwd_compute=10 * one, bwd_compute=20 * one, attn_fwd=4 * one,
                       fwd_comm={"tp": 1 * one, "dp": 2 * one}, bwd_comm={"tp": 1 * one, "dp": 3 * one})
    rows = 4 + len(COMM_KINDS)
    full, full_bwd = _layer_addends(layer, "full", rows, 1)
    none, _ = _layer_addends(layer, "none", rows, 1)
    selective, _ = _layer_addends(layer, "selective", rows, 1)
    assert full[2, 0] == 20 + (1 + 3) + 10 + 1       # bwd + its comm + the forward again + its tp, not its dp
    assert none[2, 0] == 20 + (1 + 3) and selective[2, 0] == 20 + (1 + 3) + 4
    tp, dp = 4 + COMM_KINDS.index("tp"), 4 + COMM_KINDS.index("dp")
    assert (full[tp, 0], full[dp, 0], full_bwd[dp, 0]) == (2.0, 2.0, 3.0)   # tp twice, the gather once


def test_a_forward_only_pass_runs_a_ranks_model_chunks_in_turn() -> None:
    """An interleaved layout's log-prob / reference pass: the v chunks of a rank share its devices.
    Scanned as separate devices the pass took ~1 / v of its vpp 1 time (a trial: 130% of peak at vpp
    4); now within the extra chunk boundaries' transfers of it, never below the devices' own work."""
    seqs = uniform_sequences(64, 1024)
    lay = TrainLayout(tp=2, pp=2, dp=2, micro_batch=1)
    plain = forward_cost(QWEN, lay, TOPO, sequences=seqs)
    for vpp in (2, 4):
        chunked = forward_cost(QWEN, dataclasses.replace(lay, vpp=vpp), TOPO, sequences=seqs)
        assert chunked.flops == pytest.approx(plain.flops)
        assert plain.time_s * 0.97 <= chunked.time_s <= plain.time_s * 1.15


def test_selective_recompute_redoes_the_context_parallel_exchange_of_the_attention_it_redoes() -> None:
    """Selective recompute re-runs the core attention, and with it the CP K/V exchange: one more
    forward's worth of CP time, as full recompute pays (it paid none; a training audit)."""
    model, seqs = load_model("llama3.1-8b"), uniform_sequences(8, 32768)
    exposed = {rc: train_step_cost(model, TrainLayout(cp=4, dp=2, zero=1, micro_batch=1, recompute=rc), TOPO,
                                   sequences=seqs, packing="packed",
                                   params=TrainParams(check_memory=False)).comm_exposed_s["cp"]
               for rc in ("none", "selective", "full")}
    assert exposed["none"] < exposed["selective"] == pytest.approx(exposed["full"], rel=1e-12)
    assert exposed["selective"] - exposed["none"] == pytest.approx(exposed["none"] / 3, rel=1e-6)
