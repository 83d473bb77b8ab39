"""Named rollout-engine versions (`workload.engine`): the defaults an engine ships with.

A scenario that names an engine gets that engine's defaults for the fields it fixes, under the
user's own `workload.inference` and `workload.rollout_layout` keys (a given key always wins), as
`workload.train_software` does for the trainer. The values that do not depend on the device are
merged when the scenario loads (`given_under_engine`); the ones an engine picks by the GPU (vLLM: its
memory, and from 0.9 whether it is an A100; SGLang: its memory) are resolved by the cost layers, which
know the devices (`resolved`): a field the workload leaves unset takes the values every rollout device
takes. Without a name rlsim keeps its own defaults (simulator/params.py InferenceParams,
RolloutLayout): an engine that prefills everything admitted in one step, 256 running sequences,
prefix caching, CUDA graphs up to 512 sequences (docs/cost-models-inference.md, "Named engines").
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import RlsimError
from .params import InferenceParams

GIB = 2**30
# vLLM's line between its two default sets (vllm/engine/arg_utils.py EngineArgs._set_default_args_v1,
# read in the 0.8.5 and 0.9.2 - 0.11.0 wheels: "device_memory >= 70 * GiB_bytes": the 80 GB H100 and
# larger, Ascend 910C above it; 64 GB Ascend 910B below).
VLLM_LARGE_GPU_BYTES = 70 * GIB
# From vLLM 0.9 the larger set also needs `"a100" not in device_name` ("Setting large
# max_num_batched_tokens for A100 reduces throughput, see PR #17885"): an A100 80GB takes the small set.
VLLM_SMALL_SET_DEVICE_NAMES = ("a100",)
# The recurrent-state layers rlsim models (llm/architecture.py) and the engine model file that runs
# them: Mamba-2 (Nemotron-H's hybrid_override_pattern "M" layers; SGLang also runs Falcon-H1's) and
# Gated DeltaNet (Qwen3-Next's linear_attention layers).
MAMBA2, GATED_DELTANET = "Mamba-2", "Gated DeltaNet"
STATE_LAYER_MODELS = {MAMBA2: "nemotron_h.py (Nemotron-H)", GATED_DELTANET: "qwen3_next.py (Qwen3-Next)"}
# Engines that run both (the fix a refusal offers): SGLang 0.5.6 and vLLM 0.11 (the vllm-v1 engine;
# vllm/model_executor/models/nemotron_h.py and qwen3_next.py in the 0.11.0 wheel).
STATE_LAYER_ENGINES = ("sglang-0.5.6", "vllm-v1")
# Architectures (config.json model_type) of rlsim's presets that some named engine version lacks, with
# the class its model registry would need (vLLM's model_executor/models/registry.py _TEXT_GENERATION_MODELS;
# SGLang's srt/models/ EntryClass): an engine listing one in `missing_model_types` refuses the model.
MODEL_CLASSES = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM", "gpt_oss": "GptOssForCausalLM"}


@dataclass(frozen=True)
class GpuTier:
    """Per-GPU values an engine picks on devices of at least `min_hbm_bytes` of HBM whose name and
    description hold none of `excluded_names` (lower case), for instances of at least `min_tp`
    tensor-parallel ranks (SGLang 0.5.6 captures more CUDA graphs from TP 4): {"inference"|"rollout": {...}}."""

    min_hbm_bytes: float
    values: Mapping[str, Mapping[str, Any]]
    excluded_names: tuple[str, ...] = ()
    min_tp: int = 1

    def admits(self, device: Any, tp: int = 1) -> bool:
        label = f"{device.name} {getattr(device, 'description', '')}".lower()
        return (device.hbm_bytes >= self.min_hbm_bytes and tp >= self.min_tp
                and not any(n in label for n in self.excluded_names))


@dataclass(frozen=True)
class ModelForcedSetting:
    """An inference setting an engine forces on some models whatever it is given (SGLang's
    server_args.py and ModelRunner adjustments by architecture): `field` runs at `value` where
    `applies(model, inference)`; `why` cites the engine's own line."""

    field: str
    value: Any
    applies: Callable[[Any, Any], bool]
    why: str


@dataclass(frozen=True)
class EngineSoftware:
    """An engine version: `inference` (InferenceParams fields) and `rollout` (RolloutLayout fields)
    it fixes, and `tiers` of per-GPU values in ascending order: the last tier every rollout device
    reaches applies (the values that fit every device)."""

    name: str
    inference: Mapping[str, Any]
    rollout: Mapping[str, Any]
    source: str
    tiers: tuple[GpuTier, ...] = ()
    # The largest CUDA-graph batch from the running-sequence cap and the step's token budget (None for
    # no budget), for an engine whose capture list follows them (vLLM V1); None: a fixed value.
    graph_cap: Callable[[int, int | None], int] | None = None
    # The recurrent-state layer kinds (STATE_LAYER_MODELS) whose architectures the engine has; a model
    # with another kind is refused (refuse_missing_architecture). None: not restricted here.
    state_layer_kinds: frozenset[str] | None = None
    # The architectures (MODEL_CLASSES keys) its model registry lacks, refused too; and where the
    # version's model files were read (the refusal names it).
    missing_model_types: frozenset[str] = frozenset()
    models_read: str = ""
    # Settings it forces by the model (model_forced), in order: a later rule sees an earlier one's value.
    model_forced: tuple[ModelForcedSetting, ...] = ()

    def overlay(self, devices: Sequence[Any], tp: int = 1) -> Mapping[str, Mapping[str, Any]]:
        """The per-GPU values on `devices` (DeviceSpecs) for instances of `tp` ranks:
        {"inference"|"rollout": {...}}."""
        chosen: Mapping[str, Mapping[str, Any]] = {}
        for tier in self.tiers:
            if all(tier.admits(d, tp) for d in devices):
                chosen = tier.values
        return chosen

    @property
    def layout_dependent(self) -> bool:
        """Whether a value depends on the instance's layout, its TP size or running-sequence cap (a
        planner resolves it per candidate)."""
        return self.graph_cap is not None or any(tier.min_tp > 1 for tier in self.tiers)


def _vllm_tiers(small_names: tuple[str, ...]) -> tuple[GpuTier, ...]:
    """vLLM V1's two per-GPU sets (LLM class): 8192 tokens / 256 sequences, 16384 / 1024 at >= 70 GiB."""
    return (GpuTier(0, {"inference": {"max_num_batched_tokens": 8192}, "rollout": {"max_num_seqs": 256}}),
            GpuTier(VLLM_LARGE_GPU_BYTES, {"inference": {"max_num_batched_tokens": 16384},
                                           "rollout": {"max_num_seqs": 1024}}, small_names))


def _v1_inference(**extra: Any) -> dict[str, Any]:
    """vLLM V1's engine-wide values: chunked prefill and prefix caching on, no async scheduling
    (--async-scheduling is off by default), its custom all-reduce on (disable_custom_all_reduce is
    off by default); its CUDA-graph cap follows the layout (graph_cap)."""
    return {"chunked_prefill": True, "enable_prefix_caching": True, "async_scheduling": False,
            "custom_all_reduce": True, **extra}


def _largest_capture(bound: int, budget: int | None) -> int:
    """The largest of vLLM V1's capture sizes [1, 2, 4] + multiples of 8 up to ``bound`` that fits
    the step's token budget (a graph runs a decode step of that many tokens); 0: none."""
    sizes = [x for x in (1, 2, 4, *range(8, bound + 1, 8)) if x <= bound and (budget is None or x <= budget)]
    return max(sizes, default=0)


# vLLM 0.9-0.11 (config/scheduler.py: cuda_graph_sizes defaults to [min(max_num_seqs x 2, 512)];
# config/__init__.py _set_cudagraph_sizes: [1, 2, 4] + range(8, that + 1, 8), the sizes above
# max_num_batched_tokens dropped).
VLLM_GRAPH_SIZE_LIMIT = 512


def _vllm_v1_graph_cap(max_num_seqs: int, budget: int | None) -> int:
    return _largest_capture(min(2 * max_num_seqs, VLLM_GRAPH_SIZE_LIMIT), budget)


def _vllm_08_graph_cap(_max_num_seqs: int, budget: int | None) -> int:
    """vLLM 0.8.x V1 (config.py: [1, 2, 4] + range(8, 513, 8), the sizes above max_num_batched_tokens
    dropped): the running-sequence cap does not bound it."""
    return _largest_capture(VLLM_GRAPH_SIZE_LIMIT, budget)


# Where the vLLM V1 engines' (0.9-0.11) architectures were read: the range's last wheel. Within it 0.9.2
# has no Qwen3NextForCausalLM nor GptOssForCausalLM, 0.10.1.1 no Qwen3NextForCausalLM (read in their wheels):
# a run of those stands for the versions after.
V1_MODELS_READ = "vllm 0.11.0's vllm/model_executor/models/registry.py"
# The 0.8.5 wheel's registry (vllm/model_executor/models/registry.py): Qwen3 / Qwen3-MoE and Gemma 3,
# Mamba-2 only as Mamba2ForCausalLM / BambaForCausalLM / Zamba2ForCausalLM (no NemotronHForCausalLM:
# rlsim's Mamba-2 layers are Nemotron-H's hybrid_override_pattern), no Qwen3NextForCausalLM, no
# GptOssForCausalLM.
def mixes_windows(model: Any) -> bool:
    """Whether the model mixes full-attention layers with sliding-window or chunked ones: the models
    vLLM without its hybrid KV cache manager caches whole (v1/core/kv_cache_utils.py
    unify_hybrid_kv_cache_specs converts the window specs only where a full-attention one is present).
    Here, below the cost models that page them (llm/kv_pool.py), as the engines' forced settings read it."""
    return bool(model.num_sliding_layers) and model.num_attention_layers > model.num_sliding_layers


def _mixes_windows_in_vllm_pool(model: Any, inference: Any) -> bool:
    return inference.kv_pool == "vllm" and mixes_windows(model)


# vLLM 0.8.5 has no hybrid KV cache manager (no --disable-hybrid-kv-cache-manager either): its
# get_kv_cache_config calls v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs unconditionally,
# which turns every SlidingWindowSpec into a FullAttentionSpec where the model has both ("Only models
# with one type of KV cache are supported yet"); Llama 4's chunked layers are full-attention specs
# there already (v1/worker/gpu_model_runner.py get_kv_cache_spec). vLLM 0.9.2 on make it a switch.
VLLM_08_NO_HYBRID_KV = ModelForcedSetting(
    "hybrid_kv_cache_manager", False, _mixes_windows_in_vllm_pool,
    "vLLM 0.8.5 caches a model mixing full-attention with sliding-window layers as full attention on every "
    "layer (v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs, called by get_kv_cache_config whatever "
    "the engine is given; the hybrid KV cache manager that pages windows came in 0.9)")

VLLM_08_MODELS = {"state_layer_kinds": frozenset(), "missing_model_types": frozenset({"gpt_oss"}),
                  "models_read": "vllm 0.8.5's vllm/model_executor/models/registry.py",
                  "model_forced": (VLLM_08_NO_HYBRID_KV,)}


# vLLM V1 engine from vLLM 0.9 (read in the 0.9.2, 0.10.0 - 0.10.2 and 0.11.0 wheels), driven through
# the offline `LLM` class, as verl's and NeMo RL's synchronous rollout workers drive it: chunked prefill
# always on; a token budget per step and a running-sequence cap chosen by the GPU (EngineArgs
# _set_default_args_v1, usage context LLM_CLASS: 16384 tokens / 1024 sequences at >= 70 GiB unless the
# device is an A100, 8192 / 256 otherwise); prefix caching on; CUDA graphs captured up to
# min(2 x max_num_seqs, 512) sequences within the token budget (config/scheduler.py `cuda_graph_sizes`:
# 512 at the default caps); no async scheduling (--async-scheduling is off by default).
VLLM_V1 = EngineSoftware(
    name="vllm-v1",
    inference=_v1_inference(),
    rollout={},
    tiers=_vllm_tiers(VLLM_SMALL_SET_DEVICE_NAMES),
    graph_cap=_vllm_v1_graph_cap,
    # vllm 0.11.0's vllm/model_executor/models/registry.py has NemotronHForCausalLM (0.9.2's has it) and
    # Qwen3NextForCausalLM (0.10.1.1's has not), every preset's architecture (GptOssForCausalLM: 0.10.1.1's has it)
    state_layer_kinds=frozenset({MAMBA2, GATED_DELTANET}), models_read=V1_MODELS_READ,
    source="vllm 0.9-0.11 vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (usage context LLM_CLASS), "
           "vllm/config/scheduler.py; published-results.md V6 ('1024 for the synchronous engine')")

# vLLM V1 through its async engine from vLLM 0.9 (AsyncLLM from AsyncEngineArgs, NeMo RL `async_engine:
# true`): its usage context (ENGINE_CONTEXT) is in neither per-GPU table, so the scheduler's own
# defaults stand (SchedulerConfig.__post_init__): 128 running sequences, a 2048-token step budget
# (DEFAULT_MAX_NUM_BATCHED_TOKENS) with chunked prefill, CUDA graphs up to min(2 x 128, 512) = 256.
VLLM_V1_ASYNC = EngineSoftware(
    name="vllm-v1-async",
    inference=_v1_inference(max_num_batched_tokens=2048),
    rollout={"max_num_seqs": 128},
    graph_cap=_vllm_v1_graph_cap,
    state_layer_kinds=frozenset({MAMBA2, GATED_DELTANET}), models_read=V1_MODELS_READ,   # as vllm-v1
    source="vllm 0.9-0.11 vllm/config/scheduler.py SchedulerConfig.__post_init__ (max_num_seqs 128, "
           "max_num_batched_tokens 2048 with chunked prefill, cuda_graph_sizes); published-results.md V6 "
           "('128 for the async one')")

# vLLM V1 behind its OpenAI-compatible server (`vllm serve`, usage context OPENAI_API_SERVER; TRL's
# `trl vllm-serve` runs it): the server's per-GPU set, 2048 tokens / 256 sequences, 8192 / 1024 at
# >= 70 GiB unless the device is an A100 (EngineArgs._set_default_args_v1, read in the 0.11.0 wheel);
# otherwise as vllm-v1.
VLLM_V1_SERVER = EngineSoftware(
    name="vllm-v1-server",
    inference=_v1_inference(),
    rollout={},
    tiers=(GpuTier(0, {"inference": {"max_num_batched_tokens": 2048}, "rollout": {"max_num_seqs": 256}}),
           GpuTier(VLLM_LARGE_GPU_BYTES, {"inference": {"max_num_batched_tokens": 8192},
                                          "rollout": {"max_num_seqs": 1024}}, VLLM_SMALL_SET_DEVICE_NAMES)),
    graph_cap=_vllm_v1_graph_cap,
    state_layer_kinds=frozenset({MAMBA2, GATED_DELTANET}), models_read=V1_MODELS_READ,   # as vllm-v1
    source="vllm 0.11.0 vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (usage context "
           "OPENAI_API_SERVER), vllm/config/scheduler.py")

# vLLM 0.8.x's V1 engine (verl 0.5 pins vllm <= 0.8.5): one running-sequence default for every usage
# context (1024 at >= 70 GiB, 256 below; no A100 exception), the LLM class's token budget as above;
# CUDA graphs for batch sizes up to 512 within the token budget (config.py: [1, 2, 4] + range(8, 513, 8)).
VLLM_08 = EngineSoftware(
    name="vllm-0.8",
    inference=_v1_inference(),
    rollout={},
    tiers=_vllm_tiers(()),
    graph_cap=_vllm_08_graph_cap,
    **VLLM_08_MODELS,
    source="vllm 0.8.5 vllm/engine/arg_utils.py EngineArgs._set_default_args_v1, vllm/config.py "
           "(V1 cudagraph capture sizes)")

# vLLM 0.8.x's AsyncLLM: the same running-sequence default as its LLM class (not keyed by usage context
# then), the scheduler's 2048-token budget (the per-context token table has no ENGINE_CONTEXT entry).
VLLM_08_ASYNC = EngineSoftware(
    name="vllm-0.8-async",
    inference=_v1_inference(max_num_batched_tokens=2048),
    rollout={},
    graph_cap=_vllm_08_graph_cap,
    tiers=(GpuTier(0, {"rollout": {"max_num_seqs": 256}}), GpuTier(VLLM_LARGE_GPU_BYTES, {"rollout": {"max_num_seqs": 1024}})),
    **VLLM_08_MODELS,
    source="vllm 0.8.5 vllm/engine/arg_utils.py EngineArgs._set_default_args_v1, vllm/config.py SchedulerConfig")

# vLLM V0 engine (vLLM <= 0.7 and its opt-out VLLM_USE_V1=0 later): 256 running sequences; no chunked
# prefill at max_model_len <= 32K (RL recipes set it), so admitted prompts prefill in blocking steps
# of max(max_model_len, 2048) tokens; prefix caching off by default; CUDA graphs captured for batch
# sizes up to 256 (_BATCH_SIZES_TO_CAPTURE).
VLLM_V0 = EngineSoftware(
    name="vllm-v0",
    inference={"chunked_prefill": False, "enable_prefix_caching": False, "cuda_graph_max_batch": 256,
               "async_scheduling": False, "custom_all_reduce": True},
    rollout={"max_num_seqs": 256},
    # the 0.7.3 wheel's registry (the range's last; models are only added): no NemotronHForCausalLM nor
    # Qwen3NextForCausalLM, and none of Qwen3 / Qwen3-MoE, Gemma 3 (0.8.5's has them), gpt-oss (0.10.1.1's).
    # Its VLLM_USE_V1=0 opt-out in 0.8-0.10 loads their models; its defaults are not read here.
    state_layer_kinds=frozenset(), missing_model_types=frozenset({"qwen3", "qwen3_moe", "gemma3_text", "gpt_oss"}),
    models_read="vllm 0.7.3's vllm/model_executor/models/registry.py",
    source="vllm 0.6-0.7 EngineArgs / SchedulerConfig defaults, worker/model_runner.py _BATCH_SIZES_TO_CAPTURE")
V0_MIN_BATCHED_TOKENS = 2048   # SchedulerConfig without chunked prefill: max(max_model_len, 2048)

MIB = 2**20
# SGLang 0.4.6.post5 (verl 0.5's `sglang` extra pins it), as verl's SGLang rollout starts it
# (verl/workers/rollout/sglang_rollout/sglang_rollout.py: tp_size, mem_fraction_static = rollout.
# gpu_memory_utilization, attention backends; every other ServerArgs field at its default), read in
# its wheel (sglang/srt/server_args.py, managers/, model_executor/):
# - new requests prefill in their own steps (enable_mixed_chunk off: no decode rides along) of at most
#   chunked_prefill_size tokens (8192; 2048 on GPUs under 25,000 MiB), a longer prompt in chunks:
#   rlsim's blocking prefill steps (chunked_prefill false) under that budget;
# - the radix cache shares a prompt's prefill among its samples (prefix caching); the overlap scheduler
#   prepares step i+1 on the CPU while the GPU runs step i (async_scheduling);
# - CUDA graphs captured for up to 160 running requests (cuda_graph_runner.py capture list), 256 on GPUs
#   above 96 GiB;
# - running requests: min(KV pool // 2, request pool), the request pool min(max(KV pool / context_len x
#   512, 2048), 4096) (tp_worker.py, model_runner.py init_memory_pool): rlsim takes the pool's floor,
#   2048 (RL engines hold more sequences than that only with a KV pool above 4 context lengths, and
#   then the KV pool, not the cap, bounds the running batch);
# - mem_fraction_static of the GPU holds the weights and the KV pool only (activations and CUDA graphs
#   live in the rest: model_runner.py profile_max_num_token): no workspace inside it.
# - admission by reservation (admission: reserve, params.py): a request enters only if its context +
#   min(max_new_tokens, 4096) fits beside min(max_new_tokens - generated, 4096) x the new-token ratio
#   of every running one (0.7, decaying to 0.098 over 600 decode steps); after a refusal none is tried
#   until a request finishes; a decode step out of KV retracts the requests with the fewest generated
#   tokens to the back of the queue (schedule_policy.py PrefillAdder, scheduler.py
#   update_running_batch, schedule_batch.py retract_decode).
# - its own KV memory (kv_pool: sglang, llm/sglang_pool.py): a token pool, page size 1; 0.5.2 and 0.5.6
#   split a sliding-window model's into full-attention and SWA pools (not Gemma 2 / 3 nor gpt-oss'),
#   and keep a Mamba / linear-attention model's states in a pool of fixed slots; 0.4.6.post5 and 0.5.2
#   keep no radix cache on the states (0.5.2 ModelRunner: "Hybrid GDN model detected, disable radix
#   cache"), 0.5.6 one for a Gated DeltaNet hybrid (MambaRadixCache); without it the state slots are
#   --max-running-requests when given, which a given rollout_layout.max_num_seqs stands for
#   (max_running_requests_given, _running_cap_passed), else 512.
SGLANG_INFERENCE = {"chunked_prefill": False, "enable_prefix_caching": True, "async_scheduling": True,
                    "workspace_bytes": 0.0, "admission": "reserve", "custom_all_reduce": True,
                    "kv_pool": "sglang", "linear_attention_radix_cache": False}
SGLANG_RUNNING_REQUESTS = 2048   # the request pool's floor (max_running_requests unset)


def _speculates(model: Any, inference: Any) -> bool:
    return inference.speculative_method is not None


# SGLang turns its overlap scheduler off for EAGLE speculation (rlsim's drafters: an EAGLE head, an MTP
# module, which SGLang runs as EAGLE, a draft model as STANDALONE), whatever it is given.
SGLANG_SPECULATION_NO_OVERLAP = ModelForcedSetting(
    "async_scheduling", False, _speculates,
    "SGLang turns its overlap scheduler off for EAGLE / EAGLE3 / STANDALONE speculative decoding (server_args.py "
    "__post_init__ in 0.4.6.post5 and 0.5.2: 'Overlap scheduler is disabled because of using eagle speculative "
    "decoding'; 0.5.6 _handle_speculative_decoding the same unless SGLANG_ENABLE_SPEC_V2)")
# SGLang 0.4.6.post5's draft-extend runs the drafter's first forward over the tokens a step accepted,
# accept_length + 1 a sequence, not the k + 1 verified positions (speculative/eagle_utils.py
# prepare_extend_after_decode: extend_lens = [x + 1 for x in accept_length_cpu]; it has no draft-extend
# CUDA graph): vLLM's disable_padded_drafter_batch. 0.5.2 and 0.5.6 replay a draft-extend graph captured
# at speculative_num_steps + 1 tokens a sequence (eagle_draft_extend_cuda_graph_runner.py
# num_tokens_per_bs), the padded batch: they keep the default.
SGLANG_DRAFT_EXTEND_UNPADDED = ModelForcedSetting(
    "speculative_disable_padded_drafter_batch", True, _speculates,
    "SGLang 0.4.6.post5's draft-extend runs the drafter over the accepted tokens a sequence "
    "(speculative/eagle_utils.py prepare_extend_after_decode: extend_lens = accept_length + 1), not over the "
    "k + 1 verified positions")


def _mtp_speculates(model: Any, inference: Any) -> bool:
    return inference.speculative_method == "mtp"


# SGLang gives an MTP module the target's embedding and LM head (models/deepseek_nextn.py: the draft worker's
# set_embed_and_head), where vLLM 0.11's allocates its own head (deepseek_mtp.py SharedHead).
SGLANG_MTP_SHARED_HEAD = ModelForcedSetting(
    "speculative_draft_own_lm_head", False, _mtp_speculates,
    "SGLang's MTP drafter shares the target's LM head (speculative/eagle_worker.py: set_embed_and_head)")
# SGLang holds no draft slots beyond a running request's tokens: its draft forwards' cache slots are taken
# and given back within the step (0.4.6.post5, 0.5.2, 0.5.6 speculative/eagle_worker.py draft:
# alloc_token_slots(..., backup_state=True) ... token_to_kv_pool_allocator.restore_state), where vLLM
# 0.11 keeps num_speculative_tokens lookahead slots a running request (v1/core/sched/scheduler.py).
SGLANG_NO_LOOKAHEAD = ModelForcedSetting(
    "speculative_lookahead_tokens", 0, _speculates,
    "SGLang's draft slots are taken and given back within a step (speculative/eagle_worker.py draft: "
    "alloc_token_slots(backup_state=True), restore_state)")
SGLANG_SPECULATION = (SGLANG_SPECULATION_NO_OVERLAP, SGLANG_MTP_SHARED_HEAD, SGLANG_NO_LOOKAHEAD)
SGLANG = EngineSoftware(
    name="sglang",
    inference=SGLANG_INFERENCE,
    rollout={"max_num_seqs": SGLANG_RUNNING_REQUESTS},
    tiers=(GpuTier(0, {"inference": {"max_num_batched_tokens": 2048, "cuda_graph_max_batch": 160}}),
           GpuTier(25_000 * MIB, {"inference": {"max_num_batched_tokens": 8192, "cuda_graph_max_batch": 160}}),
           GpuTier(96 * GIB + 1, {"inference": {"max_num_batched_tokens": 8192, "cuda_graph_max_batch": 256}})),
    # its srt/models/ has no Mamba nor linear-attention model (no nemotron_h.py, falcon_h1.py, qwen3_next.py),
    # nor gpt_oss.py (0.5.2 has it)
    state_layer_kinds=frozenset(), missing_model_types=frozenset({"gpt_oss"}),
    models_read="sglang 0.4.6.post5's srt/models/", model_forced=(*SGLANG_SPECULATION, SGLANG_DRAFT_EXTEND_UNPADDED),
    source="sglang 0.4.6.post5 sglang/srt/server_args.py ServerArgs.__post_init__ (chunked_prefill_size, "
           "cuda_graph_max_bs), model_executor/cuda_graph_runner.py get_batch_sizes_to_capture, "
           "managers/tp_worker.py max_running_requests, model_executor/model_runner.py; verl 0.5 "
           "verl/workers/rollout/sglang_rollout/sglang_rollout.py")


def _sglang_tier(min_hbm_bytes: float, tokens: int, graphs: int, min_tp: int = 1) -> GpuTier:
    """An SGLang memory line: its prefill chunk (chunked_prefill_size) and CUDA-graph cap."""
    return GpuTier(min_hbm_bytes, {"inference": {"max_num_batched_tokens": tokens, "cuda_graph_max_batch": graphs}},
                   min_tp=min_tp)


def _has_mamba2_layers(model: Any, _inference: Any) -> bool:
    return bool(model.num_mamba_layers)


def _has_linear_layers(model: Any, _inference: Any) -> bool:
    return bool(model.num_linear_layers)


def has_state_radix(model: Any, params: Any) -> bool:
    """Whether SGLang keeps its radix cache on the model's states (0.5.6: a Gated DeltaNet hybrid,
    with the radix cache on; a Mamba-2 hybrid never). Here, below the cost models that size its pools
    with it (llm/sglang_pool.py), as the engines' forced settings read it too."""
    return bool(model.num_linear_layers and params.linear_attention_radix_cache and params.enable_prefix_caching)


# SGLang 0.5.2's ModelRunner.__init__ (model_executor/model_runner.py): is_hybrid_gdn (Qwen3-Next, the
# one linear-attention model it has) sets server_args.disable_radix_cache, so the samples of a prompt
# share no prefill; the overlap scheduler stays on.
SGLANG_052_GDN_NO_RADIX = ModelForcedSetting(
    "enable_prefix_caching", False, _has_linear_layers,
    "SGLang 0.5.2 turns its radix cache off for a Gated DeltaNet hybrid (model_runner.py ModelRunner.__init__: "
    "'Hybrid GDN model detected, disable radix cache')")
# SGLang 0.5.6: ModelRunner.__init__ sets disable_radix_cache for a Mamba-2 hybrid (mamba2_config:
# NemotronHConfig, FalconH1Config); server_args.py _handle_model_specific_adjustments sets
# disable_overlap_schedule for Qwen3NextForCausalLM while the radix cache is on (its MambaRadixCache).
SGLANG_056_MAMBA2_NO_RADIX = ModelForcedSetting(
    "enable_prefix_caching", False, _has_mamba2_layers,
    "SGLang 0.5.6 turns its radix cache off for a Mamba-2 hybrid (model_runner.py ModelRunner.__init__: "
    "'NemotronHConfig model detected, disable radix cache')")
SGLANG_056_RADIX_NO_OVERLAP = ModelForcedSetting(
    "async_scheduling", False, has_state_radix,
    "SGLang 0.5.6 turns its overlap scheduler off for Qwen3-Next while the radix cache is on (server_args.py: "
    "'Disabling overlap schedule since MambaRadixCache is not compatible with overlap schedule currently'; "
    "with enable_prefix_caching false it stays on)")


# SGLang 0.5.2 (verl 0.6.0's `sglang` extra pins it), read in its wheel: the scheduler as in 0.4.6 above
# (blocking prefill without mixed chunk, radix cache, overlap scheduler, request pool, reservation
# admission with the same constants in sglang/global_config.py and schedule_policy.py); the memory lines
# moved (server_args.py __post_init__, cuda_graph_runner.py get_batch_sizes_to_capture):
# chunked_prefill_size 2048 under 35 GiB, 8192 under 160 GiB, 16384 above; CUDA graphs up to 160
# requests, 256 above 90 GiB, 512 above 160,000 MiB; under 35 GiB cuda_graph_max_bs 8 (80 from TP 4).
SGLANG_052 = EngineSoftware(
    name="sglang-0.5.2",
    inference=SGLANG_INFERENCE,
    rollout={"max_num_seqs": SGLANG_RUNNING_REQUESTS},
    tiers=(_sglang_tier(0, 2048, 8), _sglang_tier(0, 2048, 80, min_tp=4), _sglang_tier(35 * GIB, 8192, 160),
           _sglang_tier(90 * GIB + 1, 8192, 256), _sglang_tier(160_000 * MIB + 1, 8192, 512),
           _sglang_tier(160 * GIB, 16384, 512)),
    # srt/models/ has qwen3_next.py, not nemotron_h.py nor falcon_h1.py; its Transformers fallback
    # (models/transformers.py) calls the HF model with use_cache=False, keeping no Mamba state
    state_layer_kinds=frozenset({GATED_DELTANET}), models_read="sglang 0.5.2's srt/models/",
    model_forced=(SGLANG_052_GDN_NO_RADIX, *SGLANG_SPECULATION),
    source="sglang 0.5.2 sglang/srt/server_args.py ServerArgs.__post_init__ (chunked_prefill_size, "
           "cuda_graph_max_bs), model_executor/cuda_graph_runner.py get_batch_sizes_to_capture, "
           "model_executor/model_runner.py init_memory_pool; verl 0.6.0 setup (sglang==0.5.2)")

# SGLang 0.5.6 (verl 0.7.0 pins it), read in its wheel: the same scheduler and admission constants
# (sglang/srt/environ.py); the memory lines by GPU memory and TP size (server_args.py
# _handle_gpu_memory_settings, _generate_cuda_graph_batch_sizes): chunked_prefill_size 2048 under 35 GiB,
# 4096 under 60 GiB, 8192 under 160 GiB, 16384 above; cuda_graph_max_bs 8 under 20 GiB, then 24 / 80,
# 32 / 160 under 60 GiB, 256 / 512 under 160 GiB (TP < 4 / TP >= 4), 512 above. SGLang's NPU lines
# (Ascend under 64 GiB) are not modelled: rlsim's Ascend devices take the GPU lines.
SGLANG_056 = EngineSoftware(
    name="sglang-0.5.6",
    inference={**SGLANG_INFERENCE, "linear_attention_radix_cache": True},
    rollout={"max_num_seqs": SGLANG_RUNNING_REQUESTS},
    tiers=(_sglang_tier(0, 2048, 8), _sglang_tier(20 * GIB, 2048, 24), _sglang_tier(20 * GIB, 2048, 80, min_tp=4),
           _sglang_tier(35 * GIB, 4096, 32), _sglang_tier(35 * GIB, 4096, 160, min_tp=4),
           _sglang_tier(60 * GIB, 8192, 256), _sglang_tier(60 * GIB, 8192, 512, min_tp=4),
           _sglang_tier(160 * GIB, 16384, 512)),
    # srt/models/nemotron_h.py, qwen3_next.py
    state_layer_kinds=frozenset({MAMBA2, GATED_DELTANET}), models_read="sglang 0.5.6's srt/models/",
    model_forced=(SGLANG_056_MAMBA2_NO_RADIX, SGLANG_056_RADIX_NO_OVERLAP, *SGLANG_SPECULATION),
    source="sglang 0.5.6 sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings, "
           "_generate_cuda_graph_batch_sizes, environ.py; verl 0.7.0 setup (sglang==0.5.6)")

ENGINE_SOFTWARE: dict[str, EngineSoftware] = {e.name: e for e in (VLLM_V1, VLLM_V1_ASYNC, VLLM_V1_SERVER, VLLM_08, VLLM_08_ASYNC,
                                                                  VLLM_V0, SGLANG, SGLANG_052, SGLANG_056)}


def engine_software(name: str, field_name: str = "workload.engine", source: str | None = None) -> EngineSoftware:
    """The named engine; RlsimError naming the known ones otherwise."""
    try:
        return ENGINE_SOFTWARE[name]
    except KeyError:
        raise RlsimError(f"unknown engine {name!r}", source=source, field=field_name,
                         fix=f"use one of: {', '.join(ENGINE_SOFTWARE)} (or leave workload.engine unset for "
                             "rlsim's own defaults)") from None


def state_layer_kind(model: Any) -> str | None:
    """The model's recurrent-state layer kind (STATE_LAYER_MODELS), None for attention only."""
    if model.num_mamba_layers:
        return MAMBA2
    return GATED_DELTANET if model.num_linear_layers else None


def refuse_missing_architecture(name: str | None, model: Any, source: str | None = None,
                                role: str = "workload.model") -> None:
    """RlsimError when engine `name` has no architecture for the model: none with its state layers
    (state_layer_kinds; SGLang 0.4.6.post5 and vLLM before 0.9: none; SGLang 0.5.2: no Mamba-2), or
    its config.json model_type among those the version lacks (missing_model_types): the engine would
    not load it. No engine, or one not restricted: nothing."""
    engine = engine_software(name) if name else None
    if engine is None:
        return
    kind = state_layer_kind(model)
    if kind is not None and engine.state_layer_kinds is not None and kind not in engine.state_layer_kinds:
        layers = model.num_mamba_layers or model.num_linear_layers
        raise RlsimError(f"workload.engine {name} cannot run {role} {model.name}: its {layers} {kind} layers need a "
                         f"model file such as {STATE_LAYER_MODELS[kind]}, which {engine.models_read} does not have",
                         source=source, field="workload.engine",
                         fix=f"use workload.engine {' or '.join(STATE_LAYER_ENGINES)}, or a model of attention layers")
    if model.model_type in engine.missing_model_types:
        runs = [other for other, e in ENGINE_SOFTWARE.items() if model.model_type not in e.missing_model_types]
        raise RlsimError(f"workload.engine {name} cannot run {role} {model.name}: its architecture "
                         f"({model.model_type}: {MODEL_CLASSES[model.model_type]}) is not in {engine.models_read}",
                         source=source, field="workload.engine",
                         fix=f"use workload.engine {', '.join(runs)} (a later version), or another model")


def model_forced(name: str | None, inference: InferenceParams, model: Any) -> tuple[InferenceParams, list[str]]:
    """The inference constants engine `name` runs `model` with (its ModelForcedSetting rules: SGLang
    turns its radix cache or overlap scheduler off for some architectures, whatever it is given),
    and a note for each value it changes. No engine: as given."""
    notes: list[str] = []
    for rule in engine_software(name).model_forced if name else ():
        if rule.applies(model, inference) and getattr(inference, rule.field) != rule.value:
            given = getattr(inference, rule.field)
            inference = inference.model_copy(update={rule.field: rule.value})
            notes.append(f"workload.engine {name} runs {model.name} with inference.{rule.field} "
                         f"{_yaml_value(rule.value)} whatever it is given ({_yaml_value(given)} here): {rule.why}")
    return inference, notes


def _yaml_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _independent(engine: EngineSoftware, max_model_len: Any) -> dict[str, Any]:
    """The engine's inference values that do not depend on the device; V0's blocking prefill budget
    follows the sequence cap (without one: one step per admission)."""
    values = dict(engine.inference)
    if engine is VLLM_V0 and isinstance(max_model_len, int):
        values["max_num_batched_tokens"] = max(max_model_len, V0_MIN_BATCHED_TOKENS)
    return values


def engine_values(name: str, devices: Sequence[Any], max_model_len: int | None,
                  tp: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inference fields, rollout-layout fields) of engine `name` on `devices` (DeviceSpecs) for
    instances of `tp` tensor-parallel ranks."""
    engine = engine_software(name)
    overlay = engine.overlay(devices, tp)
    inference = {**_independent(engine, max_model_len), **overlay.get("inference", {})}
    rollout = {**engine.rollout, **overlay.get("rollout", {})}
    if engine.graph_cap is not None:   # at the engine's own running-sequence cap
        inference["cuda_graph_max_batch"] = engine.graph_cap(int(rollout["max_num_seqs"]),
                                                             inference.get("max_num_batched_tokens"))
    return inference, rollout


def device_dependent_fields(name: str) -> set[str]:
    """The inference fields engine `name` sets by the device or the rollout layout (resolved by the
    cost layers, where both are known)."""
    engine = engine_software(name)
    fields = {key for tier in engine.tiers for key in tier.values.get("inference", {})}
    return fields | {"cuda_graph_max_batch"} if engine.graph_cap is not None else fields


def given_under_engine(name: str, inference: Mapping[str, Any], rollout_layout: Any
                       ) -> tuple[dict[str, Any], Any]:
    """The workload's given inference keys and rollout layout over engine `name`'s values that do not
    depend on the device (the config layer merges these when a scenario loads)."""
    engine = engine_software(name)
    layout = {**engine.rollout, **rollout_layout} if isinstance(rollout_layout, Mapping) else rollout_layout
    merged = {**_independent(engine, inference.get("max_model_len")), **_running_cap_passed(engine, rollout_layout),
              **inference}
    return _without_overlap_on_stages(name, merged, layout), layout


def _running_cap_passed(engine: EngineSoftware, rollout_layout: Any) -> dict[str, Any]:
    """An SGLang engine (kv_pool: sglang) given the workload's running-sequence cap as
    --max-running-requests, as verl 0.6 / 0.7 pass rollout.max_num_seqs (sglang_rollout.py,
    async_sglang_server.py): max_running_requests_given where the rollout layout gives a valid
    max_num_seqs (SGLang then sizes its Mamba state slots by it). Otherwise nothing."""
    seqs = rollout_layout.get("max_num_seqs") if isinstance(rollout_layout, Mapping) else None
    valid = isinstance(seqs, int) and not isinstance(seqs, bool) and seqs >= 1
    return {"max_running_requests_given": True} if valid and engine.inference.get("kv_pool") == "sglang" else {}


def overlaps_without_stages(name: str) -> bool:
    """Whether engine `name` overlaps its scheduler with the GPU (SGLang's overlap scheduler) only
    while it has one pipeline stage: SGLang turns it off with more (srt/server_args.py, 0.5.6:
    "Pipeline parallelism is incompatible with overlap schedule."), whatever it was given; vLLM,
    whose async scheduling is off by default, refuses the pair instead (StepCost)."""
    return bool(engine_software(name).inference.get("async_scheduling"))


# Why SGLang's overlap scheduler is off with stages (the note a run and the planner give).
SGLANG_STAGES_NO_OVERLAP = ("SGLang turns its overlap scheduler off with pipeline stages (srt/server_args.py, 0.5.6: "
                            "'Pipeline parallelism is incompatible with overlap schedule.')")


def stage_forced_notes(name: str | None, pp: Any) -> list[str]:
    """The note for what engine `name` forces at `pp` pipeline stages, as model_forced's: SGLang's
    overlap scheduler off (given_under_engine and resolved run it so, whatever is given). Else none."""
    if not name or not overlaps_without_stages(name) or not _staged({"pp": pp}):
        return []
    return [f"workload.engine {name} runs with inference.async_scheduling false whatever it is given at "
            f"rollout_layout.pp {pp}: {SGLANG_STAGES_NO_OVERLAP}"]


def _without_overlap_on_stages(name: str, inference: dict[str, Any], layout: Any) -> dict[str, Any]:
    if overlaps_without_stages(name) and _staged(layout):
        return {**inference, "async_scheduling": False}
    return inference


def _staged(layout: Any) -> bool:
    """Whether a rollout layout (a mapping, or 'auto') gives pipeline stages."""
    stages = layout.get("pp") if isinstance(layout, Mapping) else None
    return isinstance(stages, int) and stages > 1


def resolved(name: str | None, inference: InferenceParams, rollout_layout: dict[str, Any],
             devices: Sequence[Any]) -> tuple[InferenceParams, dict[str, Any]]:
    """The inference constants and rollout-layout fields an engine runs with on `devices` (the
    rollout's DeviceSpecs) at the layout's TP size (1 when it gives none) and running-sequence cap:
    its device- and layout-dependent values for the fields the workload left unset (an
    InferenceParams' unset fields; the layout mapping's missing keys). No engine: as given."""
    if not name:
        return inference, rollout_layout
    tp = rollout_layout.get("tp", 1)
    # a TP size the layout will refuse (RolloutLayout: tp >= 1) takes no tier of its own here: the
    # layout's check names it, where a tier missing for it would be a KeyError
    valid_tp = isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1
    overlay_inference, overlay_rollout = engine_values(name, devices, inference.max_model_len, tp if valid_tp else 1)
    update = {k: v for k, v in overlay_inference.items() if k not in inference.model_fields_set}
    layout = {**overlay_rollout, **rollout_layout}
    if inference.async_scheduling and overlaps_without_stages(name) and _staged(layout):
        update["async_scheduling"] = False   # SGLang's overlap scheduler, off with stages (given_under_engine)
    engine = engine_software(name)
    seqs = layout.get("max_num_seqs")
    if engine.graph_cap is not None and "cuda_graph_max_batch" in update and isinstance(seqs, int):
        # the capture list follows the running-sequence cap and the token budget that run
        update["cuda_graph_max_batch"] = engine.graph_cap(seqs, update.get("max_num_batched_tokens",
                                                                           inference.max_num_batched_tokens))
    return inference.model_copy(update=update) if update else inference, layout


def with_request_cap(inference: InferenceParams, response_length: Mapping[str, Any]) -> InferenceParams:
    """A reserving engine's (admission: reserve) requests carry the run's generation cap as their
    max_new_tokens, as frameworks pass it (verl: data.max_response_length), unless the workload gives
    one: the response law's max. Other engines, or a law without a max: as given."""
    cap = response_length.get("max")
    if inference.admission != "reserve" or inference.max_new_tokens is not None or not cap:
        return inference
    return inference.model_copy(update={"max_new_tokens": int(cap)})
