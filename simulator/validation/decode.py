"""V3 / V5: decode (and prefill) throughput through llm/inference.py's predictors.

`rlsim validate --set` items these cases take (DECODE_OVERRIDES): the device's fields over the
case's catalog device (a 910C package before it is split into dies) and the engine constants
(`workload.inference.*`, InferenceParams)."""
from __future__ import annotations

from typing import Any

from . import Case, items_taken, overridden_device, register

V3 = "arXiv 2506.12708 CloudMatrix384 DeepSeek-R1 INT8 (published-results.md V3)"
V5 = "vLLM single-sequence decode, Llama-3.1-8B on A100-40GB (published-results.md V5)"
WHERE = "rlsim validate --set"
# The engine constants (InferenceParams) a single decode / prefill step's price reads: what these
# cases take. The engine loop's keys (admission, chunked prefill, prefix caching,
# max_num_batched_tokens, the KV reservation, custom all-reduce of a TP group, ...) are read by a
# simulated rollout, not here; given to these cases they would be read past, so they are refused.
# tests/validation/test_decode_overrides.py checks these tuples against the fields each case reads.
STEP_KEYS = ("absorb_mla", "async_scheduling", "attention_compute_efficiency", "cpu_per_seq_s", "cuda_graph_max_batch",
             "cuda_graph_replay_s", "eager_kernel_gap_s", "enforce_eager", "gemm_efficiency", "hbm_efficiency",
             "launch_overhead_s", "launches_per_layer", "launches_per_moe_layer", "launches_per_step",
             "step_overhead_s", "workspace_bytes")
# read where experts are spread over devices (the R1 cases' EP): the dispatch payload and the
# collective fallback of a device without a topology
EXPERT_PARALLEL_KEYS = ("activation_bytes", "dispatch_bytes", "fallback_collective_efficiency",
                        "fallback_step_latency_s")
DENSE_OVERRIDES = ("topology.device.", *(f"workload.inference.{k}" for k in STEP_KEYS))
EP_OVERRIDES = (*DENSE_OVERRIDES, *(f"workload.inference.{k}" for k in EXPERT_PARALLEL_KEYS))
DECODE_OVERRIDES = EP_OVERRIDES   # every key some case here takes


def _params(overrides: tuple[str, ...]) -> Any:
    """InferenceParams of the workload.inference.* items (None without any: the defaults)."""
    from ..overrides import section
    from ..params import InferenceParams

    given = section(overrides, "workload.inference")
    return InferenceParams.from_mapping(given, source=WHERE, field_name="workload.inference") if given else None


def _r1_decode(per_npu: bool, overrides: tuple[str, ...] = ()) -> float:
    from ..llm.architecture import load_model
    from ..llm.inference import decode_step_time_s, decode_tokens_per_s, split_device

    die = split_device(overridden_device("ascend-910c", overrides), 2)
    model = load_model("deepseek-r1")
    params = _params(overrides)
    # One rank per 910C die, EP over 256 dies (one routed expert each), 48 sequences per die =
    # 96 per NPU package, 4K context, INT8 weights.
    if per_npu:
        return 2 * decode_tokens_per_s(model, die, 48 * 256, 4096, ep=256, weight_dtype="int8", per_device=True,
                                       params=params)
    return decode_step_time_s(model, die, 48 * 256, 4096, ep=256, weight_dtype="int8", params=params)


def _r1_prefill(overrides: tuple[str, ...] = ()) -> float:
    from ..llm.architecture import load_model
    from ..llm.inference import prefill_tokens_per_s, split_device

    die = split_device(overridden_device("ascend-910c", overrides), 2)
    model = load_model("deepseek-r1")
    # Assumed prefill setup: EP 32 over 32 dies, one 4K prompt per die, INT8 weights.
    return 2 * prefill_tokens_per_s(model, die, 32, 4096, ep=32, weight_dtype="int8", per_device=True,
                                    params=_params(overrides))


def _llama_decode(batch: int, overrides: tuple[str, ...] = ()) -> float:
    from ..llm.architecture import load_model
    from ..llm.inference import decode_tokens_per_s

    return decode_tokens_per_s(load_model("llama3.1-8b"), overridden_device("a100-40gb", overrides), batch, 512,
                               params=_params(overrides))


@register(overrides=True)
def cases(overrides: tuple[str, ...] = ()):
    mine = items_taken(DECODE_OVERRIDES, overrides)
    if mine:   # a bad key or value is bad input (exit 2), not a case that cannot run
        overridden_device("a100-40gb", mine)
        _params(mine)
    ep: dict[str, Any] = {"overridable": EP_OVERRIDES}
    dense: dict[str, Any] = {"overridable": DENSE_OVERRIDES}
    yield Case("V3 cloudmatrix R1 decode per NPU", "tokens/s per NPU", 1943.0, lambda: _r1_decode(True, mine),
               tolerance=0.25, source=V3, note="910C die per rank, EP256, 96 seqs per NPU, 4K KV, int8", **ep)
    yield Case("V3 cloudmatrix R1 decode TPOT", "s per output token", 0.0494, lambda: _r1_decode(False, mine),
               tolerance=0.25, source=V3, note="as above", **ep)
    yield Case("V3 cloudmatrix R1 prefill per NPU", "tokens/s per NPU", 6688.0, lambda: _r1_prefill(mine),
               tolerance=0.25, source=V3, note="assumed EP32 over 32 dies, one 4K prompt per die, int8", **ep)
    yield Case("V5 vLLM llama3.1-8b A100-40GB batch 1", "tokens/s", 75.0, lambda: _llama_decode(1, mine),
               tolerance=0.15, source=V5, note="context 512", **dense)
    yield Case("V5 vLLM llama3.1-8b batch 8 / batch 1", "throughput ratio", 6.6,
               lambda: _llama_decode(8, mine) / _llama_decode(1, mine), tolerance=0.15, source=V5, note="context 512",
               **dense)
