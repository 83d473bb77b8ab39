"""The forward-only passes' memory check (old log-prob, reference, critic values): weights, one layer's
activations at a time, the logits at the stack's bytes per element (+ the entropy kernel's), refused with
the key that sizes the pass's micro-batches."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.memory import activation_bytes_per_token, forward_memory_per_device, memory_per_device
from simulator.llm.train_layout import TrainLayout
from simulator.llm.training import forward_cost
from simulator.params import (
    ENTROPY_KERNEL_MEMORY_BYTES,
    HF_LOGITS_BYTES_PER_ELEM,
    MEGATRON_LOGITS_BYTES_PER_ELEM,
    train_software,
)

QWEN = load_model("qwen2.5-7b")
TOPO = load_topology({"preset": "dgx-h100", "nodes": 1})
BIG = 1e15


@pytest.mark.parametrize("stack, per_logit", [("hf-transformers", 2.0), ("megatron-core", 6.0)])
def test_a_forward_holds_the_weights_one_layers_activations_and_the_logits(stack, per_logit):
    memory = train_software(stack).params.memory
    assert memory.logits_bytes_per_elem == per_logit
    lay, tokens = TrainLayout(dp=1, zero=0, recompute="none"), 8192.0
    mem = forward_memory_per_device(QWEN, lay, tokens, tokens, BIG, params=memory)
    layer = activation_bytes_per_token(layer_shapes(QWEN)[0], QWEN.hidden, QWEN.ffn_hidden, True, tp=1, sp=False,
                                       recompute="none", flash=True, context_len=tokens, params=memory)
    assert mem.weights_bytes == memory_per_device(QWEN, lay, 1.0, BIG, params=memory).weights_bytes
    assert mem.gradients_bytes == mem.optimizer_bytes == mem.gathered_bytes == 0.0
    assert mem.activations_bytes == pytest.approx(tokens * layer)
    assert mem.logits_bytes == pytest.approx(tokens * QWEN.vocab * per_logit)


def test_the_entropy_kernels_tensors_add_to_the_logits_and_tp_splits_them():
    memory = train_software("hf-transformers").params.memory
    eager = memory.model_copy(update={"entropy_logits_bytes_per_elem": ENTROPY_KERNEL_MEMORY_BYTES["eager"]})
    lay = TrainLayout(tp=2, dp=1, zero=0)
    plain = forward_memory_per_device(QWEN, lay, 4096, 4096, BIG, params=memory)
    with_entropy = forward_memory_per_device(QWEN, lay, 4096, 4096, BIG, params=eager)
    # verl's FSDP: bf16 logits (2) + softmax and logsumexp's shifted copy (4) = 6 B a logit
    assert with_entropy.logits_bytes == pytest.approx(4096 * QWEN.vocab / 2 * (HF_LOGITS_BYTES_PER_ELEM + 4.0))
    assert with_entropy.logits_bytes == pytest.approx(3 * plain.logits_bytes)
    assert MEGATRON_LOGITS_BYTES_PER_ELEM == 6.0


def test_zero3_forward_gathers_the_computing_layer_the_prefetched_ones_and_the_root_unit():
    """The update's working set less its gradients: the computing layer and zero3_prefetch_layers
    ahead (FSDP prefetches the next all-gather in the forward too), and the root unit."""
    memory = train_software("hf-transformers").params.memory
    lay = TrainLayout(dp=8, zero=3, recompute="full")
    layer = layer_shapes(QWEN)[0].dense_params
    outer = QWEN.vocab * QWEN.hidden * 2   # untied embedding and head
    for prefetch in (0, 1, 2):
        params = memory.model_copy(update={"zero3_prefetch_layers": prefetch})
        mem = forward_memory_per_device(QWEN, lay, 1024, 1024, BIG, params=params)
        assert mem.gathered_bytes == pytest.approx(2 * ((1 + prefetch) * layer + outer), rel=1e-3)


def test_verls_entropy_log_prob_at_64_sequences_a_gpu_is_refused_naming_the_forward_micro_batch():
    """The audit's case: Qwen2.5-7B, FSDP on 8 H100s, 64 sequences of 2k tokens a forward micro-batch,
    the entropy computed eagerly: the logits alone are 128k x 152k x 6 B, ~100 GB."""
    params = train_software("hf-transformers").params
    params = params.model_copy(update={"memory": params.memory.model_copy(update={
        "entropy_logits_bytes_per_elem": ENTROPY_KERNEL_MEMORY_BYTES["eager"]})})
    lay = TrainLayout(dp=8, zero=3, recompute="full", micro_batch=64)
    seqs = np.full(512, 2048)
    with pytest.raises(RlsimError, match="forward-only pass") as err:
        forward_cost(QWEN, lay, TOPO, range(8), seqs, params=params)
    assert err.value.field == "schedule.forward_micro_batch"
    assert "log_prob_micro_batch_size_per_gpu" in err.value.fix
    # a token budget names its own key
    budget = TrainLayout(dp=8, zero=3, recompute="full", max_tokens_per_micro_batch=8192,
                         logprob_max_tokens_per_micro_batch=131072)
    with pytest.raises(RlsimError, match="forward-only pass") as err:
        forward_cost(QWEN, budget, TOPO, range(8), seqs, packing="packed", params=params)
    assert err.value.field == "workload.train_layout.logprob_max_tokens_per_micro_batch"
    # 8 sequences a micro-batch fit, and the time is the unchecked one
    small = TrainLayout(dp=8, zero=3, recompute="full", micro_batch=8)
    unchecked = params.model_copy(update={"check_memory": False})
    assert forward_cost(QWEN, small, TOPO, range(8), seqs, params=params).time_s == \
        forward_cost(QWEN, small, TOPO, range(8), seqs, params=unchecked).time_s


def test_rows_of_a_micro_batch_attend_within_themselves_without_flash():
    """Without flash attention each layer keeps its rows' scores, b x s^2 for b rows of s tokens, not the
    (b s)^2 of one sequence of the micro-batch's tokens (8 rows of 5,120 tokens read 244 GB)."""
    params = train_software("hf-transformers").params
    eager = params.model_copy(update={"compute": params.compute.model_copy(update={"flash_attention": False}),
                                      "check_memory": True})
    seqs = np.full(64, 2048)
    one, eight = (forward_cost(QWEN, TrainLayout(dp=8, zero=3, recompute="full", micro_batch=b), TOPO, range(8),
                               seqs, params=eager).memory for b in (1, 8))
    assert eight.activations_bytes == pytest.approx(8 * one.activations_bytes)
