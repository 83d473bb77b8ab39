"""Training step cost: closed forms with a free network, comm through CollectiveModel, errors,
padded vs packed, FLOP accounting, timeline, determinism."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.des import Timeline
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.train_compute import ComputeParams
from simulator.llm.training import (
    CommParams,
    TrainLayout,
    TrainParams,
    forward_cost,
    train_step_cost,
    uniform_sequences,
)

TOPO = load_topology({"preset": "dgx-h100", "nodes": 2})
QWEN = load_model("qwen2.5-7b")
GPT = load_model("gpt-1.7b")
MOE = load_model("qwen3-30b-a3b")


@dataclass(frozen=True)
class _Cost:
    time_s: float


class FreeNetwork:
    """Every collective is free; records what was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def cost(self, op, ranks, nbytes):
        self.calls.append((op, len(ranks)))
        return _Cost(0.0)


class LinearNetwork(FreeNetwork):
    def cost(self, op, ranks, nbytes):
        super().cost(op, ranks, nbytes)
        return _Cost(1e-5 + nbytes / 1e11)


def test_single_device_step_is_micro_batches_times_forward_plus_backward_plus_optimizer():
    net = FreeNetwork()
    r = train_step_cost(GPT, TrainLayout(recompute="none", zero=0), TOPO, [0], uniform_sequences(4, 1024),
                        collectives=net)
    assert r.pipeline.micro_batches == 4 and r.bubble_fraction == pytest.approx(0.0, abs=1e-12)
    assert r.step_time_s == pytest.approx(r.pipeline_s + r.optimizer_s)
    assert r.compute_s == pytest.approx(r.pipeline_s)
    assert r.comm_s == 0.0 and net.calls == []


@settings(max_examples=8, deadline=None)
@given(pp=st.sampled_from([2, 4]), m=st.integers(1, 12))
def test_pipeline_bubble_is_at_least_1f1b_closed_form_and_shrinks_with_micro_batches(pp, m):
    def bubble(n):
        return train_step_cost(GPT, TrainLayout(pp=pp, recompute="none"), TOPO, list(range(pp)),
                               uniform_sequences(n, 1024), collectives=FreeNetwork()).bubble_fraction

    # The last stage also runs the output layer (GPT's 51200 x 2304 head is ~2 layers' work), so
    # stages are not uniform: the bubble is at least the uniform closed form (p-1)/(m+p-1).
    assert bubble(m) >= (pp - 1) / (m + pp - 1) - 1e-9
    assert bubble(m + pp) < bubble(m)


def test_interleaving_cuts_the_bubble():
    seqs = uniform_sequences(8, 1024)
    plain = train_step_cost(GPT, TrainLayout(pp=4), TOPO, list(range(4)), seqs, collectives=FreeNetwork())
    inter = train_step_cost(GPT, TrainLayout(pp=4, vpp=2), TOPO, list(range(4)), seqs, collectives=FreeNetwork())
    assert inter.bubble_fraction < plain.bubble_fraction
    assert inter.step_time_s < plain.step_time_s


@pytest.mark.parametrize("layout", [TrainLayout(pp=4), TrainLayout(pp=4, vpp=2), TrainLayout(tp=2, pp=2, zero=1),
                                    TrainLayout()])
def test_critical_stages_sum_to_the_step(layout):
    cost = train_step_cost(GPT, layout, TOPO, None, uniform_sequences(16, 1024))
    parts = cost.critical_stages()
    total = sum(parts["ops_s_by_stage"]) + parts["p2p_s"] + parts["dp_sync_s"] + parts["optimizer_s"] \
        + parts["offload_s"]
    assert total == pytest.approx(cost.step_time_s, rel=1e-9)
    assert 0 <= parts["stage"] < layout.pp and len(parts["ops_s_by_stage"]) == layout.pp
    # Every stage of a pipeline holds part of the chain (the first micro-batch's forwards cross them all).
    assert all(s > 0 for s in parts["ops_s_by_stage"])


def test_collectives_by_layout_go_through_the_collective_model():
    net = LinearNetwork()
    train_step_cost(GPT, TrainLayout(tp=2, pp=2, sequence_parallel=False, zero=0), TOPO, list(range(16)),
                    uniform_sequences(16, 512), collectives=net)
    ops = {op for op, _ in net.calls}
    assert {"all_reduce", "p2p", "all_gather"} <= ops       # TP all-reduce, PP send + gather, DP sync
    net = LinearNetwork()
    train_step_cost(MOE, TrainLayout(tp=2, ep=4, zero=1), TOPO, list(range(16)), uniform_sequences(16, 512),
                    collectives=net)
    ops = {op for op, _ in net.calls}
    assert {"all_to_all", "reduce_scatter", "all_gather"} <= ops  # EP, SP, ZeRO-1 sync
    assert ("all_to_all", 4) in net.calls


def test_dp_overlap_fraction_hides_gradient_sync():
    seqs = uniform_sequences(32, 1024)
    tail = {"sp_grad_all_reduce": False, "grad_norm_all_reduce": False}   # the DP sync alone in the step's tail
    base = train_step_cost(QWEN, TrainLayout(tp=4, zero=1), TOPO, None, seqs, params=TrainParams(comm=CommParams(**tail)))
    hidden = train_step_cost(QWEN, TrainLayout(tp=4, zero=1), TOPO, None, seqs, params=TrainParams(
        comm=CommParams(dp_overlap_fraction=1.0, dp_overlap_window="step", **tail)))
    assert base.comm_exposed_s["dp"] > 0 and hidden.comm_exposed_s["dp"] == 0.0
    assert hidden.step_time_s == pytest.approx(base.step_time_s - base.comm_exposed_s["dp"])


def test_real_topology_step_is_consistent():
    r = train_step_cost(QWEN, TrainLayout(tp=4, pp=2, zero=1, recompute="selective"), TOPO, None,
                        uniform_sequences(64, 2048))
    assert r.layout.dp == 2 and r.devices == 16
    assert 0 < r.mfu < 1 and r.comm_exposed_s["tp"] > 0 and r.comm_exposed_s["pp"] >= 0
    assert r.tflops_per_device == pytest.approx(r.hardware_flops / (r.step_time_s * 16) / 1e12)
    assert r.step_time_s >= r.compute_s
    assert r.memory.fits and r.memory.total_bytes > 0


def test_full_recompute_counts_a_third_more_flops_like_megatron():
    seqs = uniform_sequences(8, 2048)
    params = TrainParams(compute=ComputeParams(flash_attention=False))
    none = train_step_cost(GPT, TrainLayout(recompute="none"), TOPO, [0], seqs, params=params)
    full = train_step_cost(GPT, TrainLayout(recompute="full"), TOPO, [0], seqs, params=params)
    h, L, V, s = GPT.hidden, GPT.num_layers, GPT.vocab, 2048
    eq3 = 96 * 8 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))   # arXiv 2104.04473 eq. 3
    assert full.hardware_flops == pytest.approx(eq3, rel=0.01)
    assert full.model_flops == none.model_flops == none.hardware_flops
    assert full.step_time_s > none.step_time_s
    assert full.mfu < none.mfu


def test_padded_costs_at_least_packed_and_equal_for_equal_lengths():
    layout = TrainLayout(micro_batch=4, recompute="full")
    rng = np.random.default_rng(0)
    ragged = rng.integers(64, 4096, size=32)
    padded = train_step_cost(QWEN, layout, TOPO, list(range(8)), ragged, packing="padded")
    packed = train_step_cost(QWEN, layout, TOPO, list(range(8)), ragged, packing="packed")
    assert packed.step_time_s < padded.step_time_s
    even = uniform_sequences(32, 1024)
    a = train_step_cost(QWEN, layout, TOPO, list(range(8)), even, packing="padded")
    b = train_step_cost(QWEN, layout, TOPO, list(range(8)), even, packing="packed")
    assert a.step_time_s == pytest.approx(b.step_time_s)


def test_padded_rows_of_a_fixed_width_cost_every_row_that_width():
    """pad_rows_to: every padded row is that wide (verl's fixed-shape batches), closed form T = b x width,
    Q = b x width^2 per micro-batch, sampler and token-budget micro-batches alike; a longer sample and
    packed rows: not padded to it."""
    from simulator.llm.training import replica_micro_batches
    lens = np.array([100, 300, 200, 50, 400, 120, 80, 60])
    wide = TrainParams(compute=ComputeParams(pad_rows_to=1000))
    parts = replica_micro_batches(lens, TrainLayout(dp=2, micro_batch=2), "padded", wide)
    assert all((t == 2 * 1000).all() and (q == 2 * 1000 ** 2).all() for t, q in parts)
    own = replica_micro_batches(lens, TrainLayout(dp=2, micro_batch=2), "padded", TrainParams())
    assert sum(t.sum() for t, _ in own) < 8 * 1000                     # each micro-batch at its longest
    budget = replica_micro_batches(lens, TrainLayout(dp=2, max_tokens_per_micro_batch=500), "padded", wide)
    assert all((t == 1000 * (t / 1000).round()).all() and t.sum() == 4 * 1000 for t, _ in budget)
    packed = replica_micro_batches(lens, TrainLayout(dp=2, micro_batch=2), "packed", wide)
    assert sum(t.sum() for t, _ in packed) == lens.sum()
    layout = TrainLayout(micro_batch=2, recompute="full")
    slow = train_step_cost(QWEN, layout, TOPO, list(range(8)), np.repeat(lens, 4), packing="padded",
                           params=TrainParams(compute=ComputeParams(pad_rows_to=2048)))
    fast = train_step_cost(QWEN, layout, TOPO, list(range(8)), np.repeat(lens, 4), packing="padded")
    assert slow.step_time_s > fast.step_time_s
    with pytest.raises(RlsimError, match="longer than the padded row width") as exc:
        replica_micro_batches(lens, TrainLayout(dp=2, micro_batch=2), "padded", TrainParams(compute={"pad_rows_to": 300}))
    assert exc.value.field == "workload.train_params.compute.pad_rows_to"


def test_padded_rows_to_the_batch_cost_every_row_the_batchs_longest():
    """pad_rows_to batch (TRL, SkyRL: the whole batch padded before it is cut): rows of 100, 300 | 200, 900
    in two micro-batches are all 900 wide (T = 2 x 900, Q = 2 x 900^2 each), 300 / 900 per micro-batch
    without it; varlen flash attention: Q the real lengths squared; a token budget's micro-batches too.
    A width that is neither a positive count nor batch: refused, naming the field."""
    from simulator.llm.training import replica_micro_batches
    lens = np.array([100, 300, 200, 900])
    batch = TrainParams(compute=ComputeParams(pad_rows_to="batch"))
    [(tokens, sq)] = replica_micro_batches(lens, TrainLayout(micro_batch=2), "padded", batch)
    assert tokens.tolist() == [2 * 900, 2 * 900] and sq.tolist() == [2 * 900 ** 2, 2 * 900 ** 2]
    [(tokens, sq)] = replica_micro_batches(lens, TrainLayout(micro_batch=2), "padded", TrainParams())
    assert tokens.tolist() == [2 * 300, 2 * 900] and sq.tolist() == [2 * 300 ** 2, 2 * 900 ** 2]
    skips = TrainParams(compute=ComputeParams(pad_rows_to="batch", attention_skips_padding=True))
    [(tokens, sq)] = replica_micro_batches(lens, TrainLayout(micro_batch=2), "padded", skips)
    assert tokens.tolist() == [2 * 900, 2 * 900] and sq.tolist() == [100 ** 2 + 300 ** 2, 200 ** 2 + 900 ** 2]
    [(tokens, _)] = replica_micro_batches(lens, TrainLayout(max_tokens_per_micro_batch=1100), "padded", batch)
    assert sorted(tokens.tolist()) == [900, 3 * 900]                # {900} and {300, 200, 100}, all 900 wide
    packed = replica_micro_batches(lens, TrainLayout(micro_batch=2), "packed", batch)
    assert sum(t.sum() for t, _ in packed) == lens.sum()
    for bad in ("longest", 0):
        with pytest.raises(ValidationError):
            ComputeParams(pad_rows_to=bad)


@pytest.mark.parametrize("bad", ["longest", 0, -3, 1.5])
def test_a_bad_padded_row_width_is_one_error_at_the_field_listing_the_accepted_values(bad):
    """pad_rows_to's union (a count | batch | null): a bad value is one error naming
    workload.train_params.compute.pad_rows_to, not a second path for the integer branch
    (pad_rows_to.constrained-int), and its fix lists the three accepted forms."""
    with pytest.raises(RlsimError) as exc:
        TrainParams.from_mapping({"compute": {"pad_rows_to": bad}}, source="w.yaml",
                                 field_name="workload.train_params")
    assert exc.value.fields == ["workload.train_params.compute.pad_rows_to"]
    assert "constrained-int" not in str(exc.value) and str(exc.value).count("pad_rows_to") == 1
    assert repr(bad) in exc.value.message and "w.yaml" in str(exc.value)
    assert all(word in exc.value.fix for word in ("positive token count", "batch", "null"))
    for good in (4096, "batch", None):
        assert TrainParams.from_mapping({"compute": {"pad_rows_to": good}}).compute.pad_rows_to == good


def test_padded_rows_attention_runs_their_real_lengths_with_a_varlen_flash_kernel():
    """attention_skips_padding (transformers' flash_attention_2 unpads a padding mask's rows): per
    micro-batch of rows of real lengths L_i padded to W, T = rows x W either way and Q = sum L_i^2
    (rows x W^2 without it), sampler, token-budget and pipeline-shape micro-batches alike. At the
    layer, with no launch and no shape ramp: the GEMMs and elementwise work follow W x rows, the flash
    attention sum L_i^2, materialized attention (SDPA / eager) rows x W^2."""
    from simulator.llm.layer_costs import layer_shapes
    from simulator.llm.train_compute import DeviceRates, layer_times
    from simulator.llm.training import replica_micro_batches
    lens = np.array([100, 300, 200, 50, 400, 120, 80, 60])
    real_sq = np.array([(lens[:4] ** 2).sum(), (lens[4:] ** 2).sum()], dtype=float)

    def parts(width, skips, layout=None, **compute):
        params = TrainParams(compute=ComputeParams(pad_rows_to=width, attention_skips_padding=skips, **compute))
        return replica_micro_batches(lens, layout or TrainLayout(micro_batch=4), "padded", params)

    [(tokens, sq)] = parts(1000, True)
    assert tokens.tolist() == [4000.0, 4000.0] and sq.tolist() == real_sq.tolist()
    [(tokens, padded_sq)] = parts(1000, False)
    assert tokens.tolist() == [4000.0, 4000.0] and padded_sq.tolist() == [4 * 1000.0 ** 2] * 2
    [(own, own_sq)] = parts(None, True)                               # each micro-batch at its longest
    assert own.tolist() == [4 * 300.0, 4 * 400.0] and own_sq.tolist() == real_sq.tolist()
    budget = parts(1000, True, TrainLayout(max_tokens_per_micro_batch=700))
    assert sum(q.sum() for _, q in budget) == (lens ** 2).sum() and sum(t.sum() for t, _ in budget) == 8 * 1000
    assert sum(q.sum() for _, q in parts(1000, False, TrainLayout(max_tokens_per_micro_batch=700))) == 8 * 1000 ** 2
    pipe = replica_micro_batches(lens, TrainLayout(micro_batch=4, pp=2), "padded", TrainParams(
        compute=ComputeParams(attention_skips_padding=True), comm=CommParams(pp_variable_seq_lengths=False)))
    assert pipe[0][0].tolist() == [1600.0, 1600.0] and pipe[0][1].tolist() == real_sq.tolist()

    layer = layer_shapes(QWEN)[0]
    rates = DeviceRates(peak_flops=989e12, gemm_efficiency=0.8, hbm_Bps=3e12, launch_s=0.0)

    def times(width, flash=True, skips=False):
        [(t, q)] = parts(width, skips, flash_attention=flash)
        params = ComputeParams(gemm_ramp_dim=0.0, gemm_ramp_k=0.0, flash_attention=flash,
                               attention_skips_padding=skips)
        out = layer_times(layer, QWEN.hidden, QWEN.ffn_hidden, True, t, q, tp=1, sp=False, ep=1, rates=rates,
                          params=params)
        return out.fwd_s - out.attn_fwd_s, out.attn_fwd_s

    (rest, varlen), (rest_padded, padded) = times(1000, skips=True), times(1000)
    assert rest == pytest.approx(rest_padded, rel=1e-12)               # GEMMs, norms over the padding
    assert varlen == pytest.approx(padded * real_sq / (4 * 1000.0 ** 2), rel=1e-12)
    assert times(2000, skips=True)[0] == pytest.approx(2 * rest, rel=1e-9)            # ~ W x rows
    assert times(2000, skips=True)[1] == pytest.approx(varlen, rel=1e-12)             # ~ sum L_i^2
    assert times(2000, flash=False)[1] == pytest.approx(4 * times(1000, flash=False)[1], rel=1e-12)   # rows W^2


def test_a_varlen_kernel_on_padded_rows_prices_the_update_and_the_forward_passes():
    """The update and the forward-only passes (log-probs, reference) take the same rule: cheaper
    where the rows carry padding, the same where every row is the width; materialized attention
    cannot skip it (an error at the field)."""
    lens = np.repeat(np.array([100, 300, 200, 50, 400, 120, 80, 60]), 4)
    layout = TrainLayout(micro_batch=2, recompute="full")
    skips, pads = (TrainParams(compute=ComputeParams(pad_rows_to=2048, attention_skips_padding=flag))
                   for flag in (True, False))
    for cost, time in ((train_step_cost, "step_time_s"), (forward_cost, "time_s")):
        fast, slow = (getattr(cost(QWEN, layout, TOPO, list(range(8)), lens, packing="padded", params=params), time)
                      for params in (skips, pads))
        assert fast < slow
        full, same = (getattr(cost(QWEN, layout, TOPO, list(range(8)), np.full(32, 2048), packing="padded",
                                   params=params), time) for params in (skips, pads))
        assert full == same
    with pytest.raises(ValueError, match="compute.flash_attention: true"):
        ComputeParams(flash_attention=False, attention_skips_padding=True)


def test_forward_cost_is_cheaper_than_a_step():
    seqs = uniform_sequences(32, 2048)
    step = train_step_cost(QWEN, TrainLayout(tp=2), TOPO, list(range(8)), seqs)
    fwd = forward_cost(QWEN, TrainLayout(tp=2), TOPO, list(range(8)), seqs)
    assert 0.2 * step.step_time_s < fwd.time_s < 0.5 * step.step_time_s
    assert fwd.flops == pytest.approx(step.model_flops / 3, rel=0.01)
    assert fwd.compute_s <= fwd.time_s


def test_timeline_tiles_the_step_and_records_into_des():
    r = train_step_cost(QWEN, TrainLayout(tp=4, pp=2, zero=1), TOPO, None, uniform_sequences(16, 1024))
    for s in range(2):
        ivs = [iv for iv in r.timeline if iv.stage == s]
        assert ivs[0].start == 0.0 and ivs[-1].end == pytest.approx(r.step_time_s)
        assert all(a.end == pytest.approx(b.start) for a, b in zip(ivs, ivs[1:], strict=False))
        assert {"forward", "backward", "optimizer"} <= {iv.state for iv in ivs}
    rec = Timeline()
    r.record(rec, "train", list(range(16)), 10.0, iteration=3)
    frame = rec.to_frame()
    assert set(frame.device) == set(range(16)) and frame.start.min() == 10.0
    assert "pipeline_bubble" in set(frame.cause)


def test_same_input_same_output():
    seqs = np.random.default_rng(1).integers(100, 3000, size=24)
    a = train_step_cost(QWEN, TrainLayout(tp=2, pp=2), TOPO, list(range(8)), seqs, packing="packed")
    b = train_step_cost(QWEN, TrainLayout(tp=2, pp=2), TOPO, list(range(8)), seqs.copy(), packing="packed")
    assert a.summary() == b.summary()


def test_bad_layouts_fail_clearly():
    seqs = uniform_sequences(8, 1024)
    with pytest.raises(RlsimError, match="tp=3 does not divide the 28 attention heads"):
        train_step_cost(QWEN, TrainLayout(tp=3), TOPO, list(range(3)), seqs)
    with pytest.raises(RlsimError, match="ep=3 does not divide the 128 experts"):
        train_step_cost(MOE, TrainLayout(ep=3), TOPO, list(range(3)), seqs)
    with pytest.raises(RlsimError, match="dense model"):
        train_step_cost(QWEN, TrainLayout(ep=2), TOPO, list(range(2)), seqs)
    with pytest.raises(RlsimError, match="not a multiple"):
        train_step_cost(QWEN, TrainLayout(tp=4, pp=2), TOPO, list(range(12)), seqs)
    with pytest.raises(RlsimError, match="does not fit") as exc:
        train_step_cost(load_model("llama3.1-70b"), TrainLayout(zero=0, recompute="none"), TOPO, [0], seqs)
    assert "weights" in str(exc.value) and "fix:" in str(exc.value)
    with pytest.raises(RlsimError, match="positive lengths"):
        train_step_cost(QWEN, TrainLayout(), TOPO, [0], [1024, 0])
    with pytest.raises(RlsimError, match="recompute"):
        TrainLayout(recompute="sometimes")
    with pytest.raises(RlsimError, match="train_params.comm.tp_overlap_fraction") as exc:
        TrainParams.from_mapping({"comm": {"tp_overlap_fraction": "lots"}}, source="w.yaml")
    assert "w.yaml" in str(exc.value)


def test_layout_from_yaml_mapping():
    lay = TrainLayout.from_mapping({"tp": 4, "pp": 1, "dp": "auto", "zero": 1, "recompute": "full"}, "w.yaml")
    assert lay.dp is None and lay.resolve(16).dp == 4 and lay.sp
    with pytest.raises(RlsimError, match="unknown train_layout key 'tpp'") as exc:
        TrainLayout.from_mapping({"tpp": 2}, "w.yaml")
    assert "w.yaml" in str(exc.value)


def test_blocking_pipeline_sends_cost_at_least_the_receiver_only_delay():
    seqs = uniform_sequences(16, 2048)
    layout = TrainLayout(tp=2, pp=4, recompute="full", zero=0)
    plain = train_step_cost(GPT, layout, TOPO, None, seqs)
    blocking = train_step_cost(GPT, layout, TOPO, None, seqs,
                               params=TrainParams(comm=CommParams(pp_blocking_send=True)))
    assert blocking.comm_exposed_s["pp"] > plain.comm_exposed_s["pp"] > 0
    assert blocking.step_time_s > plain.step_time_s
    # Free transfers: blocking changes nothing.
    free = [train_step_cost(GPT, layout, TOPO, None, seqs, collectives=FreeNetwork(),
                            params=TrainParams(comm=CommParams(pp_blocking_send=b))).step_time_s for b in (False, True)]
    assert free[0] == free[1]


def test_megatron_2021_preset_pins_the_2021_software():
    from simulator.llm.train_presets import MEGATRON_2021

    lay = MEGATRON_2021.layout(tp=8, pp=2)
    assert (lay.recompute, lay.zero, lay.sp) == ("full", 0, False)
    p = MEGATRON_2021.params
    assert not p.compute.flash_attention and p.comm.pp_blocking_send and p.comm.dp_overlap_fraction == 0
    assert MEGATRON_2021.search_limits() == {"recompute": ["full"], "zero": [0], "cp": [1], "recompute_method": ["uniform"]}
    with pytest.raises(ValueError):
        MEGATRON_2021.layout(cp=2)


def test_one_pipeline_shape_pads_each_replicas_micro_batches_to_its_longest():
    from simulator.llm.training import _micro_batches
    fixed = TrainParams(comm=CommParams(pp_variable_seq_lengths=False))
    lens = np.array([4000, 1000, 3000, 2000, 500, 2500, 100, 1500])
    layout = TrainLayout(pp=2, dp=2, micro_batch=1)
    # Megatron's sampler: step k gives replica r sample 2k + r
    (t0, q0), (t1, q1) = _micro_batches(lens, layout, "packed", None, fixed)
    assert t0.tolist() == [4000.0] * 4 and t1.tolist() == [2500.0] * 4
    assert q0.tolist() == [4000.0**2, 3000.0**2, 500.0**2, 100.0**2]   # packed attention skips the padding
    (_, q0_padded), _ = _micro_batches(lens, layout, "padded", None, fixed)
    assert q0_padded.tolist() == [4000.0**2] * 4                           # padded attention does not
    # one stage, or variable p2p shapes: the micro-batches keep their lengths
    variable = _micro_batches(lens, layout, "packed")
    assert variable[0][0].tolist() == [4000.0, 3000.0, 500.0, 100.0]
    one_stage = _micro_batches(lens, TrainLayout(pp=1, dp=2, micro_batch=1), "packed", None, fixed)
    assert one_stage[0][0].tolist() == variable[0][0].tolist()


@pytest.mark.parametrize("cost", [train_step_cost, forward_cost])
def test_one_pipeline_shape_costs_between_the_ragged_batch_and_all_at_the_longest(cost):
    fixed = TrainParams(comm=CommParams(pp_variable_seq_lengths=False))
    layout = TrainLayout(tp=2, pp=2, micro_batch=1, recompute="full", zero=0)
    ragged = np.random.default_rng(1).integers(256, 4096, size=16)
    ranks = list(range(8))
    variable = cost(GPT, layout, TOPO, ranks, ragged, packing="packed")
    padded = cost(GPT, layout, TOPO, ranks, ragged, packing="packed", params=fixed)
    longest = cost(GPT, layout, TOPO, ranks, np.full(16, ragged.max()), packing="packed")
    time = (lambda c: c.step_time_s) if cost is train_step_cost else (lambda c: c.time_s)
    assert time(variable) < time(padded) < time(longest)
    if cost is train_step_cost:   # model FLOPs count the real tokens only
        assert padded.model_flops == variable.model_flops
    even = uniform_sequences(16, 2048)
    assert time(cost(GPT, layout, TOPO, ranks, even, packing="packed", params=fixed)) == \
        time(cost(GPT, layout, TOPO, ranks, even, packing="packed"))


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(64, 2048), min_size=4, max_size=24), pp=st.sampled_from([2, 4]),
       packing=st.sampled_from(["packed", "padded"]))
def test_one_pipeline_shape_never_beats_variable_lengths_nor_exceeds_all_at_the_longest(lengths, pp, packing):
    # a pipeline's makespan is monotone in its ops' durations: padding only lengthens ops, and every
    # micro-batch at the longest sequence is at least the padded batch (attention included)
    fixed = TrainParams(comm=CommParams(pp_variable_seq_lengths=False))
    layout = TrainLayout(tp=1, pp=pp, micro_batch=1, recompute="none", zero=0)
    seqs = np.array(lengths)
    variable = train_step_cost(GPT, layout, TOPO, None, seqs, packing=packing).step_time_s
    padded = train_step_cost(GPT, layout, TOPO, None, seqs, packing=packing, params=fixed).step_time_s
    longest = train_step_cost(GPT, layout, TOPO, None, np.full(len(seqs), seqs.max()), packing=packing,
                              params=fixed).step_time_s
    assert variable <= padded * (1 + 1e-12) and padded <= longest * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 8192), min_size=1, max_size=200), dp=st.integers(1, 16),
       seed=st.integers(0, 2**16))
def test_the_dp_split_of_a_token_budget_is_balanced_whatever_the_order(lengths, dp, seed):
    # verl balance_batch: equal counts, near-equal tokens; every sequence on exactly one rank
    from simulator.llm.training import _balanced_dp_split
    seqs = np.array(lengths, float)
    parts = _balanced_dp_split(seqs, dp)
    shuffled = _balanced_dp_split(np.random.default_rng(seed).permutation(seqs), dp)
    assert [p.tolist() for p in parts] == [p.tolist() for p in shuffled]
    assert sorted(np.concatenate(parts).tolist()) == sorted(lengths)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(lengths)
    loads = [float(p.sum()) for p in parts if p.size]
    assert max(loads) <= seqs.sum() / len(loads) + seqs.max()      # greedy's bound: the mean + one sequence


@pytest.mark.parametrize("key,value", [("order", 5), ("order", True), ("order", None), ("ulysses_sp", {"a": 1}),
                                       ("ulysses_sp", [1]), ("ulysses_sp", "abc"), ("sequence_parallel", "abc"),
                                       ("sequence_parallel", 5), ("zero", True), ("zero", 1.0), ("dp", True)])
def test_a_layout_value_of_the_wrong_type_is_an_error_naming_its_key(key, value):
    # they raised TypeError (order, ulysses_sp) or were coerced (bool(value), True == 1)
    with pytest.raises(RlsimError) as err:
        TrainLayout.from_mapping({"tp": 2, key: value}, "w.yaml")
    assert err.value.field == f"workload.train_layout.{key}"


def _four_gpu_graph(slow: int | None) -> dict:
    """Four H100s on one switch, `slow`'s switch link at 45 GB/s (the others 450 GB/s)."""
    nodes = [{"id": f"g{i}", "device": "h100", "node": 0, "domain": 0} for i in range(4)]
    nodes += [{"id": "sw0", "kind": "switch"}, {"id": "host0", "kind": "host", "node": 0}]
    links = [{"a": f"g{i}", "b": "sw0", "bw": "45GB/s" if i == slow else "450GB/s", "plane": "scaleup"}
             for i in range(4)]
    links += [{"a": f"g{i}", "b": "host0", "bw": "64GB/s", "plane": "host"} for i in range(4)]
    return {"name": "four", "graph": {"nodes": nodes, "links": links}}


def test_a_slow_link_on_any_replica_sets_the_step_not_only_on_the_first():
    """TP 2 x DP 2 on an explicit graph: a slow link on rank 3 (the second TP group) costs what one on
    rank 0 does (the step waits for every replica); the first replica's groups priced every one."""
    model, layout = load_model("qwen2.5-7b"), TrainLayout(tp=2, pp=1, zero=1, recompute="full", micro_batch=1)
    seqs = np.full(8, 2048)

    def step(slow):
        topology = load_topology(_four_gpu_graph(slow))
        assert not topology.replicas_alike
        return train_step_cost(model, layout, topology, range(4), seqs).step_time_s

    fast, slow_first, slow_last = step(None), step(0), step(3)
    assert slow_first > fast * 1.05
    assert slow_last == pytest.approx(slow_first, rel=1e-9)


def test_a_value_head_saves_exactly_the_vocab_logits_and_their_loss():
    """A critic / scalar reward model (with_value_head): the trunk's costs unchanged, the output
    layer and loss at width 1 instead of the vocabulary (closed form: logits_times at each width)."""
    from simulator.llm.architecture import with_value_head
    from simulator.llm.train_compute import logits_times
    from simulator.llm.training import rates_for

    small = load_model("qwen2.5-0.5b")   # tied embeddings: the value head is its own table
    layout, seqs, params = TrainLayout(recompute="none", zero=0), uniform_sequences(4, 1024), TrainParams()
    rates = rates_for(TOPO.device_spec(0), params)
    per_mb = {width: logits_times(small.hidden, width, np.array([1024.0]), tp=1, rates=rates, params=params.compute)
              for width in (small.vocab, 1)}
    saved_fwd = 4 * float(per_mb[small.vocab][0][0] - per_mb[1][0][0])
    saved_bwd = 4 * float(per_mb[small.vocab][1][0] - per_mb[1][1][0])
    critic = with_value_head(small)
    lm = train_step_cost(small, layout, TOPO, [0], seqs, collectives=FreeNetwork(), params=params)
    value = train_step_cost(critic, layout, TOPO, [0], seqs, collectives=FreeNetwork(), params=params)
    assert lm.pipeline_s - value.pipeline_s == pytest.approx(saved_fwd + saved_bwd, rel=1e-9)
    fwd_lm = forward_cost(small, layout, TOPO, [0], seqs, collectives=FreeNetwork(), params=params)
    fwd_value = forward_cost(critic, layout, TOPO, [0], seqs, collectives=FreeNetwork(), params=params)
    assert fwd_lm.time_s - fwd_value.time_s == pytest.approx(saved_fwd, rel=1e-9)
    # the model FLOPs drop by the head's 6 x vocab x hidden a token; memory holds no vocab logits
    assert lm.model_flops - value.model_flops == pytest.approx(6.0 * (small.vocab - 1) * small.hidden * 4096)
    assert value.memory.logits_bytes == pytest.approx(lm.memory.logits_bytes / small.vocab)


@given(n=st.integers(0, 300), b=st.integers(1, 9), dp=st.integers(1, 8))
@settings(max_examples=200, deadline=None)
def test_the_sampler_micro_batch_counts_are_the_replicas_the_sampler_cuts(n, b, dp):
    """sampler_micro_batch_counts (the planner's count of the run's micro-batches, which an interleaved
    pipeline needs a multiple of pp of) = the replicas' counts replica_micro_batches cuts; closed forms:
    1024 samples 5 a micro-batch on 2 replicas are 103 and 102 micro-batches, 4 a micro-batch 128."""
    from simulator.llm.training import replica_micro_batches, sampler_micro_batch_counts
    cut = replica_micro_batches(np.full(n, 7), TrainLayout(dp=dp, micro_batch=b), "packed", TrainParams()) if n else []
    assert sampler_micro_batch_counts(n, b, dp) == {len(tokens) for tokens, _ in cut}
    assert sampler_micro_batch_counts(1024, 5, 2) == {103, 102} and sampler_micro_batch_counts(1024, 4, 2) == {128}


def _argmin_budget_groups(ordered: np.ndarray, budget: int, at_least: int = 1) -> list[list[int]]:
    """training._budget_groups as it was written before its heap: an argmin over the loads (the
    first least-loaded) per length, every count tried whole."""
    m = max(1, min(at_least, ordered.size), int(np.ceil(float(ordered.sum()) / budget)))
    while True:
        load = np.zeros(m)
        members: list[list[int]] = [[] for _ in range(m)]
        for j, x in enumerate(ordered):
            i = int(load.argmin())
            load[i] += x
            members[i].append(j)
        if float(load.max()) <= budget or m >= ordered.size:
            return [mb for mb in members if mb]
        m += 1


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 12).map(lambda x: 5 * x) | st.floats(0.5, 60.0) | st.just(0.0), min_size=1,
                max_size=60),
       st.integers(12, 40).map(lambda x: 5 * x), st.integers(1, 12))
def test_budget_groups_equal_an_argmin_over_the_loads(lengths: list[float], budget: int, at_least: int) -> None:
    """The heap of (load, micro-batch) picks what an argmin over the loads picks (ties to the lower
    micro-batch: many equal lengths here), and a count left at its first load over the budget ends
    where the whole split would have (loads at the budget exactly: multiples of 5 under one), and so
    does a count skipped where no split into it fits (_surely_over); empty lengths take no empty
    group of their own: the same micro-batches, member for member."""
    from simulator.llm.training import _budget_groups
    ordered = np.sort(np.array(lengths, float))[::-1]
    got = _budget_groups(ordered, budget, at_least)
    assert got == _argmin_budget_groups(ordered, budget, at_least)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=80), st.integers(1, 4), st.integers(500, 1500),
       st.booleans(), st.sampled_from([1, 2]))
def test_packed_micro_batch_sums_of_whole_lengths_equal_the_float_sums(lengths: list[int], dp: int, budget: int,
                                                                      with_scored: bool, group: int) -> None:
    """Whole-number lengths (an integer array) take their packed micro-batches' sums as integers
    (_integer_sums_exact): the same floats, bit for bit, as the sums of each micro-batch's float
    lengths (the path float lengths take), heads (``scored``) too."""
    from simulator.llm.training import _token_budget_micro_batches
    seqs = np.array(lengths, np.int64)
    scored = (seqs // 3 + 1) if with_scored else None
    fast = _token_budget_micro_batches(seqs, dp, budget, "packed", scored=scored, group=group)
    plain = _token_budget_micro_batches(seqs.astype(float), dp, budget, "packed",
                                        scored=None if scored is None else scored.astype(float), group=group)
    assert [(t.tobytes(), q.tobytes()) for t, q in fast[0]] == [(t.tobytes(), q.tobytes()) for t, q in plain[0]]
    assert fast[1] is None if scored is None else [h.tobytes() for h in fast[1]] == [h.tobytes() for h in plain[1]]


def test_integer_sums_are_taken_only_where_every_float_sum_is_exact() -> None:
    """Integer arrays whose squares, as many as the lengths, stay below 2^53; not float lengths, float
    heads, or lengths so long that a sum of squares could round."""
    from simulator.llm.training import _integer_sums_exact
    seqs = np.array([4096, 100, 7], np.int64)
    assert _integer_sums_exact(seqs, None) and _integer_sums_exact(seqs, np.array([1, 2, 3]))
    assert not _integer_sums_exact(seqs.astype(float), None)
    assert not _integer_sums_exact(seqs, np.array([1.0, 2.0, 3.0]))
    assert not _integer_sums_exact(np.array([2**26, 1, 1], np.int64), None)   # 3 x 2^52 >= 2^53
    assert not _integer_sums_exact(np.array([2**26, 1], np.int64), None)      # 2 x 2^52 = 2^53
    assert _integer_sums_exact(np.array([2**26 - 1, 1], np.int64), None)     # 2 x (2^26 - 1)^2 < 2^53
