"""SGLang's KV memory in closed form (InferenceParams.kv_pool: sglang), beside vLLM's one pool (kv_pool.py).

Read in the sglang 0.5.2 and 0.5.6 wheels (the versions verl 0.6 / 0.7 pin; 0.4.6.post5 has neither
pool below, and no Mamba model):

- Tokens (``model_executor/model_runner.py`` ``profile_max_num_token``): the memory left after the
  weights holds ``max_total_num_tokens = rest // cell_size`` tokens, the cell one token's KV on every
  layer that caches tokens (a Mamba / linear-attention hybrid's attention layers only), page size 1.
- A sliding-window model with SGLang's hybrid SWA memory on (``set_num_token_hybrid``): the same
  memory split into a full-attention pool and an SWA pool, ``full = int(T L / (r n_swa + n_full))``
  tokens on each full layer and ``swa = int(full r)`` on each sliding one, ``T`` the tokens above
  over all ``L`` layers and ``r`` = ``--swa-full-tokens-ratio`` (0.8). Every token of a running
  request takes a slot in both pools (``ScheduleBatch._is_available_size_sufficient``), and the
  scheduler admits against the smaller (``PrefillAdder.rem_total_tokens``: min of the two). A running
  request's tokens behind its window stay in the SWA pool: the radix cache locks a request's SWA
  path from its last node back to a window's worth of whole nodes (``SWARadixCache.inc_lock_ref``; a
  prompt is one node), its decode tokens enter the tree only when it finishes, and only the
  chunk cache without a radix tree frees tokens behind a Llama 4 chunk (``SWAChunkCache.evict_swa``).
  SGLang turns the hybrid SWA memory off for Gemma 2 / 3 and gpt-oss (``server_args.py``
  ``_handle_model_specific_adjustments``: ``disable_hybrid_swa_memory = True``): every layer then
  caches every token.
- A Mamba / linear-attention model (``handle_max_mamba_cache``; ``mem_cache/memory_pool.py``
  ``MambaPool``, ``HybridReqToTokenPool``): a state pool of fixed slots taken from the memory before
  the tokens; a slot holds a request's conv window (bf16, ``configs/mamba_utils.py`` ``CONV_DTYPE``)
  and SSM state (``--mamba-ssm-dtype``, float32 by default) on every such layer. Without a radix cache
  on the states (Mamba-2 hybrids; every state model in 0.5.2): ``--max-mamba-cache-size`` slots (unset:
  ``--max-running-requests`` when given, else 512), each a running request. With one (0.5.6's MambaRadixCache for a Gated DeltaNet hybrid): the state
  memory is ``rest x ratio / (1 + ratio)`` (``--mamba-full-memory-ratio`` 0.9), its slots //
  ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` (3) requests run.

rlsim states both in the engine's terms: ``capacity_tokens`` (the tokens the admitting pool holds),
``seq_tokens`` 0 (nothing beside a request's tokens), ``max_seqs`` (the state slots' bound on the
running requests, None without states).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..engine_software import has_state_radix
from ..params import InferenceParams
from .kv_pool import UNBOUNDED_KV_TOKENS

_DEFAULTS = InferenceParams.model_fields   # the pool's constants default as the engine's

# Model types (config.json model_type) whose hybrid SWA memory SGLang turns off: GptOssForCausalLM,
# Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3n* (sglang 0.5.2 and 0.5.6
# srt/server_args.py, "Disable hybrid SWA memory for {model_arch} as it is not yet supported.") and, in
# 0.5.6, Olmo2ForCausalLM.
SGLANG_FULL_CACHE_MODEL_TYPES = ("gpt_oss", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "olmo2")
# The conv window's dtype in SGLang's state slots (configs/mamba_utils.py CONV_DTYPE = torch.bfloat16)
# and its SSM state's by default (server_args.py mamba_ssm_dtype "float32"), in bytes.
SGLANG_CONV_STATE_BYTES = 2
SGLANG_SSM_STATE_AUTO_BYTES = 4
# The state slots without --max-mamba-cache-size nor --max-running-requests (0.5.6 model_runner.py
# handle_max_mamba_cache, 0.5.2 ModelRunner.__init__: "server_args.max_mamba_cache_size = 512").
SGLANG_MAMBA_SLOTS_UNSET = 512


def mamba_slots(params: Any, max_num_seqs: int) -> int:
    """SGLang's state slots without a radix cache on them: inference.mamba_slots (--max-mamba-cache-size)
    when given, else --max-running-requests when the engine is given it (max_running_requests_given:
    the running-sequence cap ``max_num_seqs``), else SGLANG_MAMBA_SLOTS_UNSET."""
    if params.mamba_slots is not None:
        return int(params.mamba_slots)
    return max_num_seqs if params.max_running_requests_given else SGLANG_MAMBA_SLOTS_UNSET


def keeps_swa_pool(model: Any) -> bool:
    """Whether SGLang keeps an SWA pool for the model: sliding-window layers (not Llama 4's chunks:
    its hybrid_kvcache_ratio, unset by default, caches them whole) of an architecture whose hybrid
    SWA memory it leaves on."""
    return bool(model.num_sliding_layers and not model.chunked_attention
                and model.model_type not in SGLANG_FULL_CACHE_MODEL_TYPES)


@dataclass(frozen=True)
class SglangPool:
    """One device's SGLang memory: ``free_bytes`` after the weights, one token's KV on the full and on
    the sliding layers SGLang pools apart (``swa_token_bytes`` 0: no SWA pool, every attention layer in
    ``full_token_bytes``), one request's state slot (0: no states)."""

    free_bytes: float
    full_token_bytes: float
    full_layers: int
    swa_token_bytes: float = 0.0
    swa_layers: int = 0
    swa_full_tokens_ratio: float = _DEFAULTS["swa_full_tokens_ratio"].default
    state_slot_bytes: float = 0.0
    state_radix: bool = False
    mamba_slots: int = SGLANG_MAMBA_SLOTS_UNSET
    mamba_full_memory_ratio: float = _DEFAULTS["mamba_full_memory_ratio"].default
    mamba_slots_per_request: int = _DEFAULTS["mamba_slots_per_request"].default

    @property
    def state_slots(self) -> int:
        """The state pool's slots: fixed without a radix cache on the states, else its memory share."""
        if not self.state_slot_bytes:
            return 0
        if not self.state_radix:
            return self.mamba_slots
        ratio = self.mamba_full_memory_ratio
        return int(self.free_bytes * ratio / (1 + ratio) // self.state_slot_bytes)

    @property
    def token_bytes_free(self) -> float:
        """The memory left for tokens after the state slots."""
        return self.free_bytes - self.state_slots * self.state_slot_bytes

    @property
    def token_bytes(self) -> float:
        """Bytes one token takes over every layer that caches it (both pools)."""
        return self.full_token_bytes + self.swa_token_bytes

    def pool_tokens(self) -> tuple[int, int]:
        """(full-attention pool, SWA pool) tokens a layer; the SWA pool 0 without one."""
        if self.token_bytes <= 0:
            return UNBOUNDED_KV_TOKENS, 0
        tokens = int(self.token_bytes_free // self.token_bytes)   # max_total_num_tokens, all layers alike
        if not self.swa_layers:
            return tokens, 0
        layers = self.full_layers + self.swa_layers
        full = int(tokens * layers / (self.swa_full_tokens_ratio * self.swa_layers + self.full_layers))
        return full, int(full * self.swa_full_tokens_ratio)

    @property
    def capacity_tokens(self) -> int:
        """Tokens the scheduler admits against: the smaller pool (every token takes a slot in both)."""
        full, swa = self.pool_tokens()
        return min(full, swa) if self.swa_layers else full

    @property
    def seq_tokens(self) -> int:
        """Nothing beside a request's tokens draws from the token pools."""
        return 0

    @property
    def state_bytes(self) -> float:
        """A request's state slot (what a decode step reads and writes of it)."""
        return self.state_slot_bytes

    @property
    def seq_bytes(self) -> float:
        """Memory a running request holds beside its tokens: its state slot."""
        return self.state_slot_bytes

    @property
    def max_seqs(self) -> int | None:
        """Running requests the state slots hold (None without states)."""
        if not self.state_slot_bytes:
            return None
        return self.state_slots // self.mamba_slots_per_request if self.state_radix else self.state_slots


def state_slot_bytes(model: Any, tp: int, ssm_bytes: float, share: float = 1.0) -> float:
    """One request's state slot on one device: SSM state at ``ssm_bytes``, conv window in bf16, the
    B / C groups padded to the TP ranks (Mamba2StateShape.create, a Gated DeltaNet's too)."""
    ssm, conv = model.state_elems_per_device(tp, pad_linear_groups=True)
    return (ssm * ssm_bytes + conv * SGLANG_CONV_STATE_BYTES) * share


def pool_knobs_applicable(model: Any, params: Any) -> dict[str, bool]:
    """Which SGLang pool constants act on the model (params.engine_constants_read_past)."""
    sglang = params.kv_pool == "sglang"
    state = bool(model.num_mamba_layers or model.num_linear_layers)
    radix = has_state_radix(model, params)
    return {"swa_full_tokens_ratio": sglang and keeps_swa_pool(model),
            "mamba_slots": sglang and state and not radix,
            "mamba_full_memory_ratio": sglang and radix,
            "mamba_slots_per_request": sglang and radix,
            "linear_attention_radix_cache": sglang, "max_running_requests_given": sglang}


def sglang_pool_knobs(models: Iterable[Any], params: Any) -> dict[str, bool]:
    """pool_knobs_applicable over the run's models: a constant applies if it acts on any of them."""
    found = [pool_knobs_applicable(model, params) for model in models]
    return {key: any(f[key] for f in found) for key in found[0]} if found else {}
