"""Closed forms of a distillation teacher's costs (llm/served.py): a sample's prefill of its whole
sequence on the teacher's engines plus the log-probability pass over the vocabulary."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import InferenceParams, RolloutLayout, StepCost
from simulator.llm.served import ServedScoring
from simulator.scenario import PROMPT_LOGPROB_BYTES_PER_LOGIT

H100 = get_device("h100")
TEACHER = load_model("qwen2.5-32b")


def scoring(layout=None, instances=1, bytes_per_logit=PROMPT_LOGPROB_BYTES_PER_LOGIT, **params) -> ServedScoring:
    cost = StepCost(TEACHER, H100, layout or RolloutLayout(tp=4), InferenceParams(**params))
    return ServedScoring(cost, instances, bytes_per_logit)


def logprob_s(length: int, ep: int = 1) -> float:
    cost = scoring().cost
    return length * TEACHER.vocab * PROMPT_LOGPROB_BYTES_PER_LOGIT / cost.bw / ep


def test_alone_a_sample_is_one_prefill_of_its_sequence_and_its_log_probabilities():
    teacher = scoring()
    out = teacher.each(np.array([300]), np.array([700]))
    assert out.alone_s[0] == pytest.approx(teacher.cost.prefill_s(1000, 1000 * 1001 / 2, 1) + logprob_s(1000))
    assert out.flops[0] == pytest.approx(1000 * 2 * TEACHER.params_compute
                                         + 1000 * 1001 / 2 * TEACHER.attention_flops_per_context_token())


def test_at_full_steps_a_sample_takes_its_share_of_a_step_of_max_num_seqs_like_it():
    """No token budget: a step holds max_num_seqs whole sequences; equal samples share it evenly."""
    teacher = scoring(layout=RolloutLayout(tp=4, max_num_seqs=16))
    out = teacher.each(np.full(3, 512), np.full(3, 512))
    step = teacher.cost.prefill_s(16 * 1024, 16 * 1024 * 1025 / 2, 16)
    assert out.pool_s == pytest.approx(np.full(3, step / 16 + logprob_s(1024)))
    assert (out.pool_s < out.alone_s).all()      # a full step amortizes the weight reads and overheads


def test_a_token_budget_with_chunked_prefill_cuts_a_long_sample_into_equal_chunks():
    teacher = scoring(max_num_batched_tokens=4096, chunked_prefill=True)
    out = teacher.each(np.array([2000]), np.array([8000]))
    steps = math.ceil(10_000 / 4096)
    chunk = teacher.cost.prefill_s(10_000 / steps, 10_000 * 10_001 / 2 / steps, 1 / steps)
    assert out.alone_s[0] == pytest.approx(steps * chunk + logprob_s(10_000))
    full = teacher.cost.prefill_s(4096, 4096 / 10_000 * 10_000 * 10_001 / 2, 4096 / 10_000)
    assert out.pool_s[0] == pytest.approx(full * 10_000 / 4096 + logprob_s(10_000))


def test_without_chunked_prefill_a_step_holds_the_whole_samples_that_fit_the_budget():
    teacher = scoring(max_num_batched_tokens=4096)
    out = teacher.each(np.array([1000]), np.array([500]))        # two of 1500 fit in 4096
    step = teacher.cost.prefill_s(3000, 2 * 1500 * 1501 / 2, 2)
    assert out.pool_s[0] == pytest.approx(step / 2 + logprob_s(1500))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 20_000), min_size=1, max_size=8), instances=st.integers(1, 4))
def test_engines_share_the_pool_and_no_sample_beats_its_own_latency_per_engine(lengths, instances):
    one, many = scoring(), scoring(instances=instances)
    prompts = np.array(lengths)
    a, b = one.each(prompts, np.zeros(len(prompts), int)), many.each(prompts, np.zeros(len(prompts), int))
    assert b.pool_s == pytest.approx(a.pool_s / instances)
    assert b.alone_s == pytest.approx(a.alone_s)
    assert (a.pool_s <= a.alone_s * (1 + 1e-9)).all()            # batching never makes a sample dearer


def test_the_log_probability_pass_is_a_named_cost_that_can_be_switched_off():
    with_pass, without = scoring().each([500], [500]), scoring(bytes_per_logit=0).each([500], [500])
    assert with_pass.alone_s[0] - without.alone_s[0] == pytest.approx(logprob_s(1000))


def test_a_sample_longer_than_the_teachers_kv_cache_is_refused():
    teacher = scoring(layout=RolloutLayout(tp=2, gpu_memory_utilization=0.5))
    with pytest.raises(RlsimError, match="KV cache") as err:
        teacher.check_fits(10_000_000, "teacher", "workload.distillation.layout")
    assert err.value.field == "workload.distillation.layout" and "teacher a larger tp" in err.value.fix
    assert "the teacher's KV cache" in err.value.message


def test_a_top_k_reads_the_log_probabilities_once_more():
    from simulator.scenario import TOPK_BYTES_PER_LOGIT, DistillationSpec
    sampled = DistillationSpec(teacher="qwen2.5-32b", devices=8)
    top = DistillationSpec(teacher="qwen2.5-32b", devices=8, topk=32)
    assert top.logprob_pass_bytes_per_logit - sampled.logprob_pass_bytes_per_logit == TOPK_BYTES_PER_LOGIT
    assert top.payload_bytes(1000) == 32 * sampled.payload_bytes(1000)
