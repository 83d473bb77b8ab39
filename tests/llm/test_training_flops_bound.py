"""The executed FLOP rate of a training step never exceeds the device's peak x GEMM plateau.

`mfu` / `tflops_per_device` count the attention core uncausally (PaLM, Megatron), as the published
tables do, so at very long sequences they may pass the plateau (docs/cost-models-training.md
"Reported figures"); what the causal flash kernels execute may not."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.training import TrainLayout, train_step_cost, uniform_sequences
from simulator.params import ComputeParams


def _executed_flops(model, lengths, causal: float) -> float:
    """model_flops less the causal kernels' skipped share of the attention core (3 x forward)."""
    squares = float(sum(s * s for s in lengths))
    counted = float(sum(model.train_flops_per_token(s) * s for s in lengths))
    return counted - (1.0 - causal) * 3.0 * model.attention_flops_per_context_token() * squares


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama3.1-8b", "qwen2.5-7b", "gpt-1.7b"]),
       log2_len=st.integers(10, 20), tp=st.sampled_from([1, 2, 8]), cp=st.sampled_from([1, 2, 8]),
       efficiency=st.sampled_from([0.5, 0.75, 1.0]))
def test_the_executed_rate_stays_under_peak_times_plateau(model, log2_len, tp, cp, efficiency):
    spec = load_model(model)
    if spec.num_heads % tp or spec.num_kv_heads % tp:
        return
    topology = load_topology({"preset": "dgx-h100", "nodes": 8, "device": {"gemm_efficiency": efficiency}})
    seqs = uniform_sequences(tp * cp * 4, 2 ** log2_len)
    from simulator.params import TrainParams
    cost = train_step_cost(spec, TrainLayout(tp=tp, cp=cp, recompute="none"), topology, None, seqs,
                           packing="packed", params=TrainParams(check_memory=False))
    executed = _executed_flops(spec, seqs.tolist(), ComputeParams().flash_causal_fraction)
    peak = topology.device_spec(0).peak("bf16")
    assert executed / (cost.step_time_s * cost.devices) <= peak * efficiency * (1 + 1e-9)
