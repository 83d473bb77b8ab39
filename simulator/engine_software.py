"""Named rollout-engine versions (`workload.engine`): the defaults an engine ships with.

A scenario that names an engine gets that engine's defaults for the fields it fixes, under the
user's own `workload.inference` and `workload.rollout_layout` keys (a given key always wins), as
`workload.train_software` does for the trainer. The values that do not depend on the device are
merged when the scenario loads (`given_under_engine`); the ones vLLM picks by the GPU's memory are
resolved by the cost layers, which know the devices (`resolved`): a field the workload leaves unset
is taken from the engine on the rollout devices' smallest HBM. Without a name rlsim keeps its own
defaults (simulator/params.py InferenceParams, RolloutLayout): an engine that prefills everything
admitted in one step, 256 running sequences, prefix caching, CUDA graphs up to 512 sequences
(docs/cost-models-inference.md, "Named engines").
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import RlsimError
from .params import InferenceParams

GIB = 2**30
# vLLM's line between its two default sets (vllm/engine/arg_utils.py EngineArgs, V1 defaults:
# "device_memory >= 70 * GiB_bytes": the 80 GB H100 and larger, Ascend 910C above it; 64 GB
# Ascend 910B below).
VLLM_LARGE_GPU_BYTES = 70 * GIB


@dataclass(frozen=True)
class EngineSoftware:
    """An engine version: `inference` (InferenceParams fields) and `rollout` (RolloutLayout fields)
    it fixes, with `large_gpu` / `small_gpu` overlays for devices at or above / below
    `large_gpu_bytes` of HBM."""

    name: str
    inference: Mapping[str, Any]
    rollout: Mapping[str, Any]
    source: str
    large_gpu: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # {"inference"|"rollout": {...}}
    small_gpu: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    large_gpu_bytes: float = VLLM_LARGE_GPU_BYTES

    def overlay(self, hbm_bytes: float) -> Mapping[str, Mapping[str, Any]]:
        """The per-GPU values on a device of `hbm_bytes` of HBM: {"inference"|"rollout": {...}}."""
        return self.large_gpu if hbm_bytes >= self.large_gpu_bytes else self.small_gpu


# vLLM V1 engine (the default engine from vLLM 0.8), driven through the offline `LLM` class, as verl's
# and NeMo RL's synchronous rollout workers drive it: chunked prefill always on; a token budget per
# step and a running-sequence cap chosen by the GPU's memory (EngineArgs V1 defaults, LLM class:
# 16384 tokens / 1024 sequences at >= 70 GiB, 8192 / 256 below); prefix caching on; CUDA graphs
# captured up to 512 sequences; no async scheduling (the --async-scheduling flag is off by default).
VLLM_V1 = EngineSoftware(
    name="vllm-v1",
    inference={"chunked_prefill": True, "enable_prefix_caching": True, "cuda_graph_max_batch": 512,
               "async_scheduling": False},
    rollout={},
    large_gpu={"inference": {"max_num_batched_tokens": 16384}, "rollout": {"max_num_seqs": 1024}},
    small_gpu={"inference": {"max_num_batched_tokens": 8192}, "rollout": {"max_num_seqs": 256}},
    source="vllm/engine/arg_utils.py EngineArgs V1 defaults (usage context LLM class); "
           "published-results.md V6 ('1024 for the synchronous engine')")

# vLLM V1 through its async engine (AsyncLLM from AsyncEngineArgs, NeMo RL `async_engine: true`): the
# usage context is not the LLM class, so neither per-GPU default set applies and the scheduler's own
# defaults stand: 128 running sequences, a 2048-token step budget with chunked prefill.
VLLM_V1_ASYNC = EngineSoftware(
    name="vllm-v1-async",
    inference={"chunked_prefill": True, "enable_prefix_caching": True, "cuda_graph_max_batch": 512,
               "async_scheduling": False, "max_num_batched_tokens": 2048},
    rollout={"max_num_seqs": 128},
    source="vllm/config SchedulerConfig defaults (max_num_seqs 128, max_num_batched_tokens 2048 with "
           "chunked prefill); published-results.md V6 ('128 for the async one')")

# vLLM V0 engine (vLLM <= 0.7 and its opt-out VLLM_USE_V1=0 later): 256 running sequences; no chunked
# prefill at max_model_len <= 32K (RL recipes set it), so admitted prompts prefill in blocking steps
# of max(max_model_len, 2048) tokens; prefix caching off by default; CUDA graphs captured for batch
# sizes up to 256 (_BATCH_SIZES_TO_CAPTURE).
VLLM_V0 = EngineSoftware(
    name="vllm-v0",
    inference={"chunked_prefill": False, "enable_prefix_caching": False, "cuda_graph_max_batch": 256,
               "async_scheduling": False},
    rollout={"max_num_seqs": 256},
    source="vllm 0.6-0.7 EngineArgs / SchedulerConfig defaults, worker/model_runner.py _BATCH_SIZES_TO_CAPTURE")
V0_MIN_BATCHED_TOKENS = 2048   # SchedulerConfig without chunked prefill: max(max_model_len, 2048)

ENGINE_SOFTWARE: dict[str, EngineSoftware] = {e.name: e for e in (VLLM_V1, VLLM_V1_ASYNC, VLLM_V0)}


def engine_software(name: str, field_name: str = "workload.engine", source: str | None = None) -> EngineSoftware:
    """The named engine; RlsimError naming the known ones otherwise."""
    try:
        return ENGINE_SOFTWARE[name]
    except KeyError:
        raise RlsimError(f"unknown engine {name!r}", source=source, field=field_name,
                         fix=f"use one of: {', '.join(ENGINE_SOFTWARE)} (or leave workload.engine unset for "
                             "rlsim's own defaults)") from None


def _independent(engine: EngineSoftware, max_model_len: Any) -> dict[str, Any]:
    """The engine's inference values that do not depend on the device; V0's blocking prefill budget
    follows the sequence cap (without one: one step per admission)."""
    values = dict(engine.inference)
    if engine is VLLM_V0 and isinstance(max_model_len, int):
        values["max_num_batched_tokens"] = max(max_model_len, V0_MIN_BATCHED_TOKENS)
    return values


def engine_values(name: str, hbm_bytes: float, max_model_len: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inference fields, rollout-layout fields) of engine `name` on a device of `hbm_bytes`."""
    engine = engine_software(name)
    overlay = engine.overlay(hbm_bytes)
    return ({**_independent(engine, max_model_len), **overlay.get("inference", {})},
            {**engine.rollout, **overlay.get("rollout", {})})


def device_dependent_fields(name: str) -> set[str]:
    """The inference fields engine `name` sets by the device's memory (resolved by the cost layers)."""
    engine = engine_software(name)
    return {key for overlay in (engine.large_gpu, engine.small_gpu) for key in overlay.get("inference", {})}


def given_under_engine(name: str, inference: Mapping[str, Any], rollout_layout: Any
                       ) -> tuple[dict[str, Any], Any]:
    """The workload's given inference keys and rollout layout over engine `name`'s values that do not
    depend on the device (the config layer merges these when a scenario loads)."""
    engine = engine_software(name)
    merged = {**_independent(engine, inference.get("max_model_len")), **inference}
    layout = {**engine.rollout, **rollout_layout} if isinstance(rollout_layout, Mapping) else rollout_layout
    return merged, layout


def resolved(name: str | None, inference: InferenceParams, rollout_layout: dict[str, Any],
             hbm_bytes: float) -> tuple[InferenceParams, dict[str, Any]]:
    """The inference constants and rollout-layout fields an engine runs with on a device of
    `hbm_bytes`: its device-dependent values for the fields the workload left unset (an
    InferenceParams' unset fields; the layout mapping's missing keys). No engine: as given."""
    if not name:
        return inference, rollout_layout
    overlay_inference, overlay_rollout = engine_values(name, hbm_bytes, inference.max_model_len)
    update = {k: v for k, v in overlay_inference.items() if k not in inference.model_fields_set}
    return (inference.model_copy(update=update) if update else inference,
            {**overlay_rollout, **rollout_layout})
