"""Megatron-Core's full-recompute methods (megatron-core 0.13.0 transformer/transformer_block.py
_checkpointed_forward): uniform with recompute_num_layers N checkpoints each group of N layers' input and
rebuilds the group in its backward; block recomputes only the first N layers of each model chunk."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import MemoryParams, activation_bytes_per_token, memory_per_device
from simulator.llm.train_compute import ComputeParams
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import TrainParams, train_step_cost, uniform_sequences

GPT = load_model("gpt-1.7b")          # 24 identical layers
TOPO = load_topology({"preset": "dgx-h100", "nodes": 2})
BIG = 1e15
TOKENS = 4096.0


def _per_token(recompute: str) -> float:
    lay = layer_shapes(GPT)[0]
    return activation_bytes_per_token(lay, GPT.hidden, GPT.ffn_hidden, bool(getattr(GPT, "gated_ffn", True)), tp=1,
                                      sp=False, recompute=recompute, flash=True, context_len=TOKENS,
                                      params=MemoryParams())


def _acts(**layout) -> float:
    lay = TrainLayout(dp=1, zero=0, recompute="full", **layout)
    return memory_per_device(GPT, lay, TOKENS, BIG, micro_batches=1).activations_bytes


@pytest.mark.parametrize("n", [2, 8, 24])
def test_uniform_groups_store_one_input_a_group_and_rebuild_a_whole_group(n):
    """L / N inputs stored, and during a group's backward its N layers' full activations (N divides the
    chunk's layers: test_uniform_groups_must_divide_each_model_chunks_layers)."""
    x, f, layers = _per_token("full"), _per_token("none"), GPT.num_layers
    expected = (layers // n * x + n * f) * TOKENS
    assert _acts(recompute_num_layers=n) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [1, 3, 23])
def test_block_checkpoints_the_first_n_layers_and_keeps_the_others_whole(n):
    x, f, layers = _per_token("full"), _per_token("none"), GPT.num_layers
    expected = (n * x + (layers - n) * f + f) * TOKENS
    assert _acts(recompute_method="block", recompute_num_layers=n) == pytest.approx(expected, rel=1e-12)


def test_one_layer_groups_are_todays_full_recompute_exactly():
    assert _acts(recompute_num_layers=1) == _acts()
    assert _acts(recompute_method="block", recompute_num_layers=GPT.num_layers) == pytest.approx(_acts(), rel=1e-12)
    assert _acts() < _acts(recompute_method="block", recompute_num_layers=4)


def test_uniform_groups_store_a_checkpoint_a_group_for_each_micro_batch_in_flight():
    """At pp 4 (6 layers a stage) 1F1B keeps pp - s micro-batches in flight on stage s: groups of 2 store
    3 inputs for each of them instead of 6, and rebuild 2 layers instead of 1 (the stage the fit reports)."""
    x, f = _per_token("full"), _per_token("none")

    def breakdown(n: int):
        lay = TrainLayout(pp=4, dp=1, zero=0, recompute="full", recompute_num_layers=n)
        return memory_per_device(GPT, lay, TOKENS, BIG, micro_batches=8)

    one, two = breakdown(1), breakdown(2)
    assert one.stage == two.stage
    in_flight = 4 - one.stage
    assert two.activations_bytes - one.activations_bytes == pytest.approx(
        (in_flight * (3 - 6) * x + (2 - 1) * f) * TOKENS, rel=1e-9)


def _step(**layout):
    params = TrainParams(compute=ComputeParams(flash_attention=False))
    return train_step_cost(GPT, TrainLayout(zero=0, **layout), TOPO, list(range(layout.get("pp", 1))),
                           uniform_sequences(4, 2048), params=params)


def test_uniform_groups_recompute_every_layer_once_as_before():
    full, grouped = _step(recompute="full"), _step(recompute="full", recompute_num_layers=6)
    assert grouped.hardware_flops == full.hardware_flops
    assert grouped.step_time_s == full.step_time_s and grouped.compute_s == full.compute_s


@pytest.mark.parametrize(("pp", "n"), [(1, 6), (2, 3)])
def test_block_recomputes_n_layers_a_stage(pp, n):
    """Recompute FLOPs: N layers of each of the pp stages out of L; the busiest stage's compute time:
    N of its L / pp layers' forward again (one device a stage, no TP: nothing but compute)."""
    none, full = _step(recompute="none", pp=pp), _step(recompute="full", pp=pp)
    block = _step(recompute="full", recompute_method="block", recompute_num_layers=n, pp=pp)
    share = n * pp / GPT.num_layers
    assert block.model_flops == full.model_flops
    assert block.hardware_flops - block.model_flops == pytest.approx(share * (full.hardware_flops - full.model_flops),
                                                                     rel=1e-9)
    if pp == 1:
        assert block.compute_s - none.compute_s == pytest.approx(share * (full.compute_s - none.compute_s), rel=1e-9)
    assert none.step_time_s < block.step_time_s < full.step_time_s


@pytest.mark.parametrize(("layout", "field"), [
    ({"recompute": "selective", "recompute_num_layers": 2}, "recompute_num_layers"),
    ({"recompute": "none", "recompute_method": "block"}, "recompute_method"),
    ({"recompute": "full", "recompute_method": "chunked"}, "recompute_method"),
    ({"recompute": "full", "recompute_num_layers": 0}, "recompute_num_layers"),
    ({"recompute": "full", "recompute_num_layers": True}, "recompute_num_layers"),
])
def test_the_methods_are_refused_outside_full_recompute_or_out_of_range(layout, field):
    with pytest.raises(RlsimError) as exc:
        TrainLayout.from_mapping(layout, source="s.yaml")
    assert exc.value.field == f"workload.train_layout.{field}"
    assert exc.value.fix


def test_the_defaults_leave_the_layouts_json_as_before():
    assert "recompute_method" not in TrainLayout(recompute="full").as_dict()
    block = TrainLayout.from_mapping({"recompute": "full", "recompute_method": "Block", "recompute_num_layers": 2})
    assert block.as_dict()["recompute_method"] == "block" and block.as_dict()["recompute_num_layers"] == 2


@pytest.mark.parametrize(("pp", "n", "divisors"), [(1, 5, "1, 2, 3, 4, 6, 8, 12, 24"), (1, 30, "1, 2, 3, 4, 6, 8, 12, 24"),
                                                  (2, 8, "1, 2, 3, 4, 6, 12"), (4, 4, "1, 2, 3, 6")])
def test_uniform_groups_must_divide_each_model_chunks_layers(pp, n, divisors):
    """Megatron-Core's uniform method runs groups of N layers from each chunk's first one
    (custom(layer_idx, layer_idx + N)) and indexes past the chunk's last layer where N does not divide
    its layers (self.layers[index]: IndexError in the first forward): refused, naming the divisors."""
    lay = TrainLayout(pp=pp, dp=1, zero=0, recompute="full", recompute_num_layers=n)
    with pytest.raises(RlsimError, match=f"recompute_num_layers {n} does not divide") as exc:
        lay.check_model(GPT, source="s.yaml")
    assert exc.value.field == "workload.train_layout.recompute_num_layers" and exc.value.source == "s.yaml"
    assert f"({divisors})" in exc.value.fix and "recompute_method: block" in exc.value.fix
    TrainLayout(pp=pp, dp=1, zero=0, recompute="full", recompute_method="block", recompute_num_layers=n).check_model(
        GPT)


@pytest.mark.parametrize(("pp", "n"), [(1, 30), (2, 20)])
def test_block_past_a_chunks_layers_recomputes_all_of_them_as_megatron_does(pp, n):
    """Megatron-Core's block checkpoints layer i of a chunk while i < N: N past the chunk's layers
    checkpoints them all (no error), the same as N = the chunk's layers, in memory and in FLOPs."""
    whole = GPT.num_layers // pp
    assert _acts(recompute_method="block", recompute_num_layers=n, pp=pp) == _acts(
        recompute_method="block", recompute_num_layers=whole, pp=pp)
    past = _step(recompute="full", recompute_method="block", recompute_num_layers=n, pp=pp)
    at = _step(recompute="full", recompute_method="block", recompute_num_layers=whole, pp=pp)
    assert past.hardware_flops == at.hardware_flops and past.step_time_s == at.step_time_s


def test_chunk_layer_counts_are_the_memory_models_chunk_sizes():
    """TrainLayout.chunk_layer_counts (the uniform recompute check's, without importing llm/memory.py, which
    imports the layout) gives the distinct sizes of memory.layout_stage_layers' chunks: even splits of
    pp x vpp chunks, and given first / last stage counts."""
    import itertools

    from simulator.llm.memory import layout_stage_layers
    from simulator.llm.train_layout import TrainLayout

    for layers, pp, vpp in itertools.product(range(1, 40), range(1, 6), range(1, 4)):
        if pp * vpp > layers or (vpp > 1 and pp == 1):
            continue
        layout = TrainLayout(tp=1, pp=pp, vpp=vpp)
        assert layout.chunk_layer_counts(layers) == sorted({len(c) for c in layout_stage_layers(layers, layout)})
    uneven = TrainLayout(tp=1, pp=4, pp_first_stage_layers=3, pp_last_stage_layers=2)
    assert uneven.chunk_layer_counts(61) == [2, 3, 28] == sorted({len(c) for c in layout_stage_layers(61, uneven)})
