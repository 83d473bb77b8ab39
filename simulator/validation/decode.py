"""V3 / V5: decode (and prefill) throughput through llm/inference.py's predictors."""
from __future__ import annotations

from . import Case, register

V3 = "arXiv 2506.12708 CloudMatrix384 DeepSeek-R1 INT8 (published-results.md V3)"
V5 = "vLLM single-sequence decode, Llama-3.1-8B on A100-40GB (published-results.md V5)"


def _r1_decode(per_npu: bool) -> float:
    from ..hardware.devices import get_device
    from ..llm.architecture import load_model
    from ..llm.inference import decode_step_time_s, decode_tokens_per_s, split_device

    die = split_device(get_device("ascend-910c"), 2)
    model = load_model("deepseek-r1")
    # One rank per 910C die, EP over 256 dies (one routed expert each), 48 sequences per die =
    # 96 per NPU package, 4K context, INT8 weights.
    if per_npu:
        return 2 * decode_tokens_per_s(model, die, 48 * 256, 4096, ep=256, weight_dtype="int8", per_device=True)
    return decode_step_time_s(model, die, 48 * 256, 4096, ep=256, weight_dtype="int8")


def _r1_prefill() -> float:
    from ..hardware.devices import get_device
    from ..llm.architecture import load_model
    from ..llm.inference import prefill_tokens_per_s, split_device

    die = split_device(get_device("ascend-910c"), 2)
    model = load_model("deepseek-r1")
    # Assumed prefill setup: EP 32 over 32 dies, one 4K prompt per die, INT8 weights.
    return 2 * prefill_tokens_per_s(model, die, 32, 4096, ep=32, weight_dtype="int8", per_device=True)


def _llama_decode(batch: int) -> float:
    from ..hardware.devices import get_device
    from ..llm.architecture import load_model
    from ..llm.inference import decode_tokens_per_s

    return decode_tokens_per_s(load_model("llama3.1-8b"), get_device("a100-40gb"), batch, 512)


@register
def cases():
    yield Case("V3 cloudmatrix R1 decode per NPU", "tokens/s per NPU", 1943.0, lambda: _r1_decode(True),
               tolerance=0.25, source=V3, note="910C die per rank, EP256, 96 seqs per NPU, 4K KV, int8")
    yield Case("V3 cloudmatrix R1 decode TPOT", "s per output token", 0.0494, lambda: _r1_decode(False),
               tolerance=0.25, source=V3, note="as above")
    yield Case("V3 cloudmatrix R1 prefill per NPU", "tokens/s per NPU", 6688.0, _r1_prefill,
               tolerance=0.25, source=V3, note="assumed EP32 over 32 dies, one 4K prompt per die, int8")
    yield Case("V5 vLLM llama3.1-8b A100-40GB batch 1", "tokens/s", 75.0, lambda: _llama_decode(1),
               tolerance=0.15, source=V5, note="context 512")
    yield Case("V5 vLLM llama3.1-8b batch 8 / batch 1", "throughput ratio", 6.6,
               lambda: _llama_decode(8) / _llama_decode(1), tolerance=0.15, source=V5, note="context 512")
