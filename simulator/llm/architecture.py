"""Model shapes: parameter counts, FLOPs per token, weight and KV-cache bytes.

One loader reads a Hugging-Face-style ``config.json`` mapping (a built-in preset from
``model_presets.py``, a file on disk, or a mapping with overrides) into a frozen ``ModelSpec``.
Formulas: reference/formulas.md (PaLM appendix B for FLOPs, Megatron arXiv 2104.04473 eq. 3).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RlsimError, one_typo_from
from .model_presets import PRESETS

# Bytes per element of the dtypes a weight, activation or KV cache may be stored in.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

# Activations that come with a gate projection (SwiGLU / GeGLU: three FFN matrices, not two).
_GATED_ACTS = ("silu", "swiglu", "swish", "geglu")
# Activations of a plain two-matrix MLP (Hugging Face ACT2FN names; relu2: Nemotron-H's squared ReLU).
_PLAIN_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate", "quick_gelu",
               "relu", "relu2", "relu6", "leaky_relu", "tanh", "sigmoid", "mish", "linear")
_ACT_KEYS = ("mlp_hidden_act", "hidden_activation", "hidden_act", "activation_function")
# Architectures whose MLP has a gate projection whatever its activation is named: Gemma's GeGLU
# (transformers models/gemma*/modeling_gemma*.py GemmaMLP: gate_proj, up_proj, down_proj under
# gelu_pytorch_tanh, which elsewhere names a plain two-matrix MLP).
_GATED_MODEL_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text")
# What transformers reads where a config.json leaves a key out, for the keys rlsim reads whose
# default is not the loader's own (configuration_gemma.py GemmaConfig, configuration_gemma2.py
# Gemma2Config, configuration_gemma3.py Gemma3TextConfig / Gemma3Config, configuration_ernie4_5_moe.py
# Ernie4_5_MoeConfig; transformers 5.25). Gemma ties its embeddings, and Gemma 3 keeps a full-attention
# layer every sliding_window_pattern-th; google/gemma-3-27b-it's text_config gives neither, nor its
# vocab_size.
_GEMMA_DEFAULTS: dict[str, Any] = {"tie_word_embeddings": True, "head_dim": 256, "vocab_size": 256000,
                                   "max_position_embeddings": 8192}
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": _GEMMA_DEFAULTS,
    "gemma2": {**_GEMMA_DEFAULTS, "sliding_window": 4096},
    "gemma3_text": {**_GEMMA_DEFAULTS, "vocab_size": 262208, "max_position_embeddings": 131072,
                    "sliding_window": 4096, "sliding_window_pattern": 6},
    "gemma3": {"tie_word_embeddings": True},   # the multimodal wrapper's own default, over its text_config's
    "ernie4_5_moe": {"tie_word_embeddings": True, "moe_layer_start_index": 1},
    # configuration_qwen2.py / _qwen3.py / _qwen2_moe.py: the layers a window may start at
    "qwen2": {"max_window_layers": 28}, "qwen3": {"max_window_layers": 28}, "qwen2_moe": {"max_window_layers": 28},
}
# Architectures whose routed experts are stacked tensors (transformers GptOssExperts: gate_up_proj,
# gate_up_proj_bias, down_proj, down_proj_bias; Llama4TextExperts: gate_up_proj, down_proj).
_FUSED_EXPERT_MODEL_TYPES = ("gpt_oss", "llama4_text")

# Hybrid Mamba / attention models (Nemotron-H, arXiv 2504.03624; HF `hybrid_override_pattern`): one
# character per block, each block one norm + one mixer with a residual.
MAMBA_BLOCK, ATTENTION_BLOCK, MLP_BLOCK = "M", "*", "-"
# Mamba-2 state-space FLOPs per token, per layer (arXiv 2405.21060). Recurrent form (decode): per
# state element (heads x head_dim x state) the decay multiply, the B.x multiply-add and the C.h
# multiply-add: 5 FLOPs. Chunked SSD form (prefill, training; sec. 6): per head, within a chunk of Q
# tokens C.B^T (2 Q N) and its product with X (2 Q P), across chunks the chunk state B^T.X and its
# read-out C.state (2 N P each).
SSM_RECURRENT_FLOPS_PER_STATE_ELEM = 5.0
# The SSD scan's chunk of a Mamba-2 model whose config.json gives no `chunk_size` (ModelSpec.ssd_chunk_tokens
# reads it): HF NemotronHConfig's default chunk_size and the mamba_ssm kernels' default block.
SSD_CHUNK_TOKENS = 128

MAMBA_MIXER_TENSORS = 8      # in_proj, conv1d weight + bias, dt_bias, A_log, D, norm, out_proj (HF NemotronHMamba2Mixer)
# Gated DeltaNet (arXiv 2412.06464; Qwen3-Next's linear attention, HF Qwen3NextGatedDeltaNet): a state
# of key dim x value dim a value head. Recurrent form (decode), per state element: the decay, the
# state's read by the key (2), its rank-1 update (2) and its read by the query (2): 7 FLOPs. Chunked
# form (prefill, training; the paper's sec. 3 WY algorithm over chunks of GDN_CHUNK_TOKENS, fla's
# chunk_gated_delta_rule), per token and value head: within a chunk K K^T and Q K^T (2 C d_k each),
# their products with the values (2 C d_v each); across chunks the state's reads by the query and by
# the WY keys and its update (2 d_k d_v each). A count of this project's, no published figure.
GDN_RECURRENT_FLOPS_PER_STATE_ELEM = 7.0
GDN_CHUNK_TOKENS = 64        # fla chunk_gated_delta_rule's chunk size
GDN_MIXER_TENSORS = 7        # in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, norm, out_proj


def dtype_bytes(dtype: str, field: str = "dtype", source: str | None = None) -> float:
    try:
        return DTYPE_BYTES[str(dtype).lower()]
    except KeyError:
        raise RlsimError(f"unknown dtype {dtype!r}", source=source, field=field,
                         fix=f"use one of {', '.join(DTYPE_BYTES)}") from None


def extra_groups_for_head_shards(groups: int, tp: int) -> int:
    """The B / C groups an engine adds so each TP rank holds the groups of its heads: 0 when tp
    divides them, else tp - groups (vLLM 0.11 and SGLang 0.5.6 extra_groups_for_head_shards)."""
    return 0 if groups % tp == 0 else tp - groups


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape. Dense or MoE (shared experts, first-k dense layers); GQA or MLA."""

    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int                 # dense FFN width (dense models, and MoE first-k dense layers)
    num_heads: int
    num_kv_heads: int
    head_dim: int                   # GQA head dim; for MLA the v head dim is v_head_dim
    vocab: int
    tied_embeddings: bool = False
    # MoE (num_experts == 0: dense)
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden: int = 0
    first_k_dense: int = 0
    # Dense layers between the MoE ones (Llama 4 Maverick's interleave_moe_layer_step, DeepSeek's
    # moe_layer_freq, Qwen2-MoE's mlp_only_layers / decoder_sparse_step): their indices; () with the
    # dense layers first (first_k_dense) or none.
    dense_layers: tuple[int, ...] = ()
    # Group-limited routing (DeepSeek-V2 topk_method group_limited_greedy, DeepSeek-V3 noaux_tc; config.json
    # n_group, topk_group; Megatron-Core moe_router_num_groups / moe_router_group_topk): the routed experts
    # split into `expert_groups` groups of consecutive experts, each token's top-k taken inside the
    # `expert_groups_per_token` groups it picks first (transformers DeepseekV3MoE.route_tokens_to_experts:
    # scores.view(-1, n_group, n_routed_experts // n_group), topk over the groups). DeepSeek-V3 (arXiv
    # 2412.19437 sec. 2.1.2 / 3.2.2): 8 groups, 4 a token, which keeps a token on at most 4 nodes. 1 / 0: no
    # limit. Read by the DeepEP dispatcher's count of the nodes a token reaches (llm/deepep.py).
    expert_groups: int = 1
    expert_groups_per_token: int = 0
    # Routed experts stored as stacked tensors, one per projection for all of a layer's experts
    # (gpt-oss: gate_up_proj, down_proj and their biases; Llama 4: gate_up_proj, down_proj), not one
    # per expert (Mixtral, Qwen, DeepSeek): what a refit that sends tensor by tensor counts.
    fused_experts: bool = False
    # MLA (kv_lora_rank == 0: standard multi-head / grouped-query attention)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    # Details that move parameter counts by well under 1% but keep them exact.
    gated_ffn: bool = True          # SwiGLU: 3 FFN matrices; GELU MLP (GPT): 2
    qkv_bias: bool = False          # Qwen2 / GPT
    mlp_bias: bool = False          # GPT, gpt-oss; ERNIE 4.5 with use_bias
    o_bias: bool = False            # the attention's output projection: attention_bias (Llama family, gpt-oss), GPT
    head_bias: bool = False         # a bias on the LM head's vocabulary logits (ERNIE 4.5 MoE with use_bias)
    qk_norm: bool = False           # Qwen3
    layernorm: bool = False         # LayerNorm (weight + bias) instead of RMSNorm (weight)
    # Gemma 2 / 3: a norm after the attention and after the FFN too, four a layer (Gemma2DecoderLayer:
    # input, post_attention, pre_feedforward, post_feedforward layernorms)
    sandwich_norms: bool = False
    max_position_embeddings: int = 0  # learned absolute positions (GPT); 0 with RoPE
    # the weight dtype nearest a quantized checkpoint's (quantization_config), '' for none: a rollout
    # engine of it must be given workload.rollout_layout.weight_dtype (inference._check_layout)
    checkpoint_dtype: str = ""
    # Hybrid Mamba-2 / attention ("" : every layer is attention + FFN). `layer_pattern` has one of
    # M (Mamba-2 mixer), * (attention), - (FFN) per block; num_layers = its length.
    layer_pattern: str = ""
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    ssm_state_size: int = 0
    mamba_n_groups: int = 1
    mamba_conv_kernel: int = 4
    # tokens of a chunk of the chunked SSD scan (prefill, training): config.json chunk_size
    ssd_chunk_tokens: int = SSD_CHUNK_TOKENS
    # Sliding-window attention (gpt-oss, Gemma 2 / 3, Mistral 7B v0.1): the layers at these indices
    # attend to the last `sliding_window` tokens only (each query its window, causal), the others to
    # the whole sequence. () / 0: every attention layer full.
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    # The windows are Llama 4's chunks (attention_chunk_size): priced as windows, cached by vLLM 0.11 as
    # full attention unless its hybrid KV cache manager is let take them (llm/inference.py _pool_shape).
    chunked_attention: bool = False
    # Gated DeltaNet linear-attention layers (Qwen3-Next): at these indices the token mixer is a gated
    # delta rule over a constant state a sequence (GDN_* above) in place of attention, beside the
    # same FFN / MoE; the attention layers' output is gated by a second query projection where
    # attention_output_gate (Qwen3NextAttention).
    linear_layers: tuple[int, ...] = ()
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 4
    attention_output_gate: bool = False
    # LoRA training (arXiv 2106.09685; workload.lora): the base weights frozen, rank-`adapter_rank`
    # adapters (A: K x r, B: r x N) beside the layer matmuls named in `adapter_targets` (layer_costs'
    # GEMM names; empty: every layer matmul, PEFT's "all-linear"). 0: full fine-tuning.
    adapter_rank: int = 0
    adapter_targets: tuple[str, ...] = ()
    # A scalar output layer (hidden x 1) in place of the vocab LM head: a critic or a scalar reward
    # model (verl builds both as Hugging Face AutoModelForTokenClassification with num_labels 1,
    # its `score` layer; Megatron's critics a value head on the same trunk). No vocab logits, no
    # vocab loss; a tied embedding stays an input table only.
    value_head: bool = False
    # Multi-token-prediction modules the checkpoint carries beside its layers (config.json
    # num_nextn_predict_layers: DeepSeek-V3 1, MiMo, GLM-4.5); what speculative_method mtp drafts with
    # (vLLM model_executor/models/deepseek_mtp.py reads them). Not part of the trained or served
    # parameter counts here: 0 or 1 modules of a layer's size beside 61 layers.
    mtp_layers: int = 0
    source: str = dataclasses.field(default="", compare=False)
    # The config.json model_type (its language model's, lower case; "" for a spec built by hand): what an
    # engine keys its per-architecture choices on (SGLang's hybrid SWA memory, llm/sglang_pool.py).
    model_type: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        src = self.source or self.name
        positive = ["num_layers", "hidden", "num_heads", "num_kv_heads", "vocab"]
        if not self.is_mla:
            positive.append("head_dim")
        if not self.is_moe or self.first_k_dense > 0 or self.dense_layers:
            positive.append("ffn_hidden")
        for name in positive:
            if not getattr(self, name) > 0:
                raise RlsimError(f"{name} must be > 0, got {getattr(self, name)}", source=src, field=name)
        if self.is_moe:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise RlsimError(f"experts per token must be in 1..{self.num_experts}, got "
                                 f"{self.experts_per_token}", source=src, field="num_experts_per_tok")
            self._check_expert_groups(src)
            if self.moe_ffn_hidden <= 0:
                raise RlsimError("an MoE model needs the expert FFN width", source=src,
                                 field="moe_intermediate_size", fix="set moe_intermediate_size")
            if not 0 <= self.first_k_dense < self.num_layers:
                raise RlsimError(f"first_k_dense_replace must be in 0..{self.num_layers - 1}", source=src,
                                 field="first_k_dense_replace")
            if self.dense_layers and (self.first_k_dense or len(self.dense_layers) >= self.num_layers
                                      or list(self.dense_layers) != sorted(set(self.dense_layers))
                                      or not 0 <= self.dense_layers[0] <= self.dense_layers[-1] < self.num_layers):
                raise RlsimError(f"dense layers {list(self.dense_layers)[:8]} must be distinct indices in order, in "
                                 f"0..{self.num_layers - 1}, some MoE, and not beside first_k_dense_replace",
                                 source=src, field="mlp_only_layers", fix="give the model's MoE placement as its config does")
        if self.is_mla and (self.qk_nope_dim + self.qk_rope_dim <= 0 or self.v_head_dim <= 0):
            raise RlsimError("MLA needs qk_nope_head_dim + qk_rope_head_dim > 0 and v_head_dim > 0",
                             source=src, field="v_head_dim")
        if self.is_hybrid:
            self._check_hybrid(src)
        if self.sliding_layers or self.sliding_window:
            self._check_windows(src)
        if self.linear_layers:
            self._check_linear(src)
        if not self.is_mla and self.num_heads % self.num_kv_heads:
            raise RlsimError(f"{self.num_heads} attention heads are not a multiple of "
                             f"{self.num_kv_heads} KV heads", source=src, field="num_key_value_heads")

    def _check_expert_groups(self, src: str) -> None:
        """Group-limited routing: groups that split the experts evenly, at most all of them a token, and
        enough experts in a token's groups for its top-k (transformers DeepseekV3MoE's topk inside them)."""
        groups, per_token = self.expert_groups, self.expert_groups_per_token
        if groups < 1 or self.num_experts % groups:
            raise RlsimError(f"n_group {groups} does not split the {self.num_experts} routed experts into equal "
                             "groups", source=src, field="n_group", fix="give n_group as the model's config.json does")
        if not 0 <= per_token <= groups:
            raise RlsimError(f"topk_group {per_token} must be in 0..n_group ({groups})", source=src,
                             field="topk_group", fix="give topk_group as the model's config.json does")
        if per_token and per_token * self.num_experts // groups < self.experts_per_token:
            raise RlsimError(f"topk_group {per_token} of {groups} groups hold {per_token * self.num_experts // groups} "
                             f"experts, fewer than the {self.experts_per_token} a token picks", source=src,
                             field="topk_group", fix="give topk_group as the model's config.json does")

    def _check_hybrid(self, src: str) -> None:
        bad = sorted(set(self.layer_pattern) - {MAMBA_BLOCK, ATTENTION_BLOCK, MLP_BLOCK})
        if bad:
            raise RlsimError(f"unknown block kind(s) {bad} in the layer pattern", source=src,
                             field="hybrid_override_pattern", fix="use M (Mamba-2), * (attention), - (MLP)")
        if len(self.layer_pattern) != self.num_layers:
            raise RlsimError(f"the layer pattern has {len(self.layer_pattern)} blocks for {self.num_layers} layers",
                             source=src, field="hybrid_override_pattern", fix="give one character per layer")
        if self.is_moe or self.is_mla:
            raise RlsimError("a hybrid Mamba model with MoE or MLA blocks is not modelled", source=src,
                             field="hybrid_override_pattern", fix="drop the MoE / MLA keys")
        if self.num_mamba_layers:
            for name in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "mamba_n_groups", "mamba_conv_kernel"):
                if not getattr(self, name) > 0:
                    raise RlsimError(f"{name} must be > 0 for Mamba blocks, got {getattr(self, name)}", source=src,
                                     field=name)
            if not self.ssd_chunk_tokens > 0:
                raise RlsimError(f"the SSD scan's chunk must be > 0 tokens, got {self.ssd_chunk_tokens}", source=src,
                                 field="chunk_size", fix="give chunk_size as in the model's config.json (Nemotron-H: 128)")

    def _check_windows(self, src: str) -> None:
        if self.sliding_window <= 0 or not self.sliding_layers:
            raise RlsimError(f"a sliding window needs its size and its layers (sliding_window {self.sliding_window}, "
                             f"{len(self.sliding_layers)} sliding layers)", source=src, field="sliding_window",
                             fix="give sliding_window > 0 with layer_types naming sliding_attention layers, or neither")
        if sorted(set(self.sliding_layers)) != list(self.sliding_layers) \
                or not 0 <= self.sliding_layers[0] <= self.sliding_layers[-1] < self.num_layers:
            raise RlsimError(f"sliding layers must be distinct indices in 0..{self.num_layers - 1}, in order",
                             source=src, field="layer_types", fix="give one layer type per layer")
        if self.is_hybrid or self.is_mla:
            raise RlsimError("sliding-window attention in a hybrid Mamba or an MLA model is not modelled", source=src,
                             field="sliding_window", fix="set sliding_window to null: every layer full attention")

    def _check_linear(self, src: str) -> None:
        for name in ("linear_key_heads", "linear_value_heads", "linear_key_dim", "linear_value_dim",
                     "linear_conv_kernel"):
            if not getattr(self, name) > 0:
                raise RlsimError(f"{name} must be > 0 for linear-attention layers, got {getattr(self, name)}",
                                 source=src, field=name.replace("linear_", "linear_num_", 1) if "heads" in name else name)
        if self.linear_value_heads % self.linear_key_heads:
            raise RlsimError(f"{self.linear_value_heads} value heads are not a multiple of {self.linear_key_heads} key "
                             "heads", source=src, field="linear_num_value_heads")
        if sorted(set(self.linear_layers)) != list(self.linear_layers) \
                or not 0 <= self.linear_layers[0] <= self.linear_layers[-1] < self.num_layers \
                or len(self.linear_layers) >= self.num_layers:
            raise RlsimError(f"linear-attention layers must be distinct indices in 0..{self.num_layers - 1}, in order, "
                             "with an attention layer left", source=src, field="layer_types",
                             fix="give one layer type per layer")
        if self.is_hybrid or self.is_mla or self.sliding_layers:
            raise RlsimError("linear-attention layers beside Mamba blocks, MLA or sliding windows are not modelled",
                             source=src, field="layer_types", fix="use a model of one of those kinds")

    # ---- shape -------------------------------------------------------------------------------
    @property
    def num_linear_layers(self) -> int:
        """Gated DeltaNet layers (the rest attend)."""
        return len(self.linear_layers)

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a GDN layer's causal conv1d: queries and keys (key heads x key dim each) and values."""
        return 2 * self.linear_key_heads * self.linear_key_dim + self.linear_value_heads * self.linear_value_dim

    @property
    def linear_in_proj_width(self) -> int:
        """A GDN layer's input projections: q, k (key heads), v, z (value heads); beta and the decay
        a value head (in_proj_qkvz, in_proj_ba)."""
        return (2 * self.linear_key_heads * self.linear_key_dim + 2 * self.linear_value_heads * self.linear_value_dim
                + 2 * self.linear_value_heads)

    @property
    def num_sliding_layers(self) -> int:
        """Attention layers over a sliding window (the rest attend to the whole sequence)."""
        return len(self.sliding_layers)

    def windowed_sq(self, lengths: Any) -> Any:
        """Per sequence of ``lengths`` tokens, its attention work in units of a full layer's s^2
        (twice its causal pairs), averaged over the attention layers: s^2 on a full layer; on a
        sliding one min(s^2, w (2 s - w)), twice its s w - w^2 / 2 causal pairs past the window.
        s^2 without sliding layers."""
        s = np.asarray(lengths, dtype=float)
        if not self.num_sliding_layers:
            return s * s
        w = float(self.sliding_window)
        windowed = np.where(s > w, w * (2.0 * s - w), s * s)
        share = self.num_sliding_layers / self.num_attention_layers
        return (1.0 - share) * s * s + share * windowed

    def attention_context(self, context_len: float) -> float:
        """The context a token's attention reads, averaged over the attention layers: context_len on
        a full layer, at most the window on a sliding one."""
        if not self.num_sliding_layers:
            return context_len
        share = self.num_sliding_layers / self.num_attention_layers
        return (1.0 - share) * context_len + share * min(context_len, float(self.sliding_window))

    @property
    def is_hybrid(self) -> bool:
        return bool(self.layer_pattern)

    @property
    def num_attention_layers(self) -> int:
        """Layers with attention (and a KV cache): all of them, a hybrid's * blocks, or those not
        linear attention."""
        return self.layer_pattern.count(ATTENTION_BLOCK) if self.is_hybrid else self.num_layers - self.num_linear_layers

    @property
    def num_mamba_layers(self) -> int:
        return self.layer_pattern.count(MAMBA_BLOCK)

    @property
    def num_ffn_layers(self) -> int:
        """Layers with an FFN (dense or MoE): all of them, or a hybrid's - blocks."""
        return self.layer_pattern.count(MLP_BLOCK) if self.is_hybrid else self.num_layers

    @property
    def tp_reductions_per_layer(self) -> float:
        """Row-parallel outputs (TP all-reduces) per layer, forward: attention + FFN = 2; a hybrid
        block has one mixer, so one."""
        return 1.0 if self.is_hybrid else 2.0

    @property
    def mamba_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the causal conv1d: x, B and C (Mamba-2: d_inner + 2 groups x state)."""
        return self.mamba_inner + 2 * self.mamba_n_groups * self.ssm_state_size

    @property
    def mamba_in_proj_width(self) -> int:
        """in_proj output: z (gate) and x (d_inner each), B and C (groups x state each), dt (heads)."""
        return 2 * self.mamba_inner + 2 * self.mamba_n_groups * self.ssm_state_size + self.mamba_num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - (len(self.dense_layers) or self.first_k_dense) if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense FFN."""
        return self.num_ffn_layers - self.num_moe_layers

    # ---- parameters per block ----------------------------------------------------------------
    @cached_property
    def attention_params(self) -> int:
        """One layer's attention projections (and their biases / norms)."""
        h, nh = self.hidden, self.num_heads
        if self.is_mla:
            qk = self.qk_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nh * qk
            else:
                q = h * nh * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * nh * (self.qk_nope_dim + self.v_head_dim))
            return q + kv + nh * self.v_head_dim * h
        d, kvh = self.head_dim, self.num_kv_heads
        params = h * nh * d * (2 if self.attention_output_gate else 1) + 2 * h * kvh * d + nh * d * h
        if self.qkv_bias:
            params += nh * d + 2 * kvh * d
        if self.o_bias:
            params += h
        if self.qk_norm:
            params += 2 * d
        return params

    def _ffn_params(self, width: int) -> int:
        params = (3 if self.gated_ffn else 2) * self.hidden * width
        if self.mlp_bias:   # one bias a matrix: a gated FFN's gate and up (gpt-oss gate_up_proj_bias), and down
            params += (2 if self.gated_ffn else 1) * width + self.hidden
        return params

    @cached_property
    def dense_ffn_params(self) -> int:
        return self._ffn_params(self.ffn_hidden)

    @cached_property
    def expert_params(self) -> int:
        """One routed (or shared) expert."""
        return self._ffn_params(self.moe_ffn_hidden) if self.is_moe else 0

    @cached_property
    def mamba_params(self) -> int:
        """One Mamba-2 mixer: in_proj, the conv1d (weight and bias), dt bias, A and D per head, the
        gated RMSNorm over d_inner, out_proj (mamba_ssm Mamba2 / HF NemotronHMamba2Mixer)."""
        if not self.num_mamba_layers:
            return 0
        conv = self.mamba_conv_dim * (self.mamba_conv_kernel + 1)
        return (self.hidden * self.mamba_in_proj_width + conv + 3 * self.mamba_num_heads + self.mamba_inner
                + self.mamba_inner * self.hidden)

    @cached_property
    def linear_params(self) -> int:
        """One Gated DeltaNet mixer: in_proj_qkvz and in_proj_ba, the conv1d (no bias), dt_bias and
        A_log a value head, the gated RMSNorm over a value head's dim, out_proj (HF Qwen3NextGatedDeltaNet)."""
        if not self.num_linear_layers:
            return 0
        return (self.hidden * self.linear_in_proj_width + self.linear_conv_dim * self.linear_conv_kernel
                + 2 * self.linear_value_heads + self.linear_value_dim
                + self.linear_value_heads * self.linear_value_dim * self.hidden)

    @cached_property
    def shared_expert_params(self) -> int:
        """A layer's shared experts: one MLP num_shared_experts x moe_ffn_hidden wide (DeepSeek's
        DeepseekV3MoE.shared_experts, ERNIE 4.5's, Qwen2-MoE's shared_expert), with one down bias."""
        return self._ffn_params(self.moe_ffn_hidden * self.num_shared_experts) if self.num_shared_experts else 0

    @cached_property
    def router_params(self) -> int:
        return self.hidden * self.num_experts

    @cached_property
    def norm_params_per_layer(self) -> int:
        return self.norms_per_layer * self.hidden * (2 if self.layernorm else 1)

    @property
    def norms_per_layer(self) -> int:
        """Norms of a transformer layer: before the attention and the FFN, and after them too with
        sandwich norms."""
        return 4 if self.sandwich_norms else 2

    @cached_property
    def params_embedding(self) -> int:
        """Input tables (token and learned position embeddings): looked up, not multiplied."""
        return self.vocab * self.hidden + self.max_position_embeddings * self.hidden

    @cached_property
    def head_outputs(self) -> int:
        """Width of the output layer: the vocabulary, or 1 with a value head."""
        return 1 if self.value_head else self.vocab

    @cached_property
    def tied_head(self) -> bool:
        """Whether the output layer is the input embedding's table (a value head never is)."""
        return self.tied_embeddings and not self.value_head

    @cached_property
    def params_lm_head(self) -> int:
        """The output layer's matrix (none where tied) and its bias (a tied head keeps its own)."""
        bias = self.head_outputs if self.head_bias and not self.value_head else 0
        return (0 if self.tied_head else self.head_outputs * self.hidden) + bias

    def _params(self, experts: int) -> int:
        moe = experts * self.expert_params + self.shared_expert_params + self.router_params
        final_norm = self.hidden * (2 if self.layernorm else 1)
        # A hybrid block holds one norm; a transformer layer two (norm_params_per_layer).
        norms = self.num_layers * (self.norm_params_per_layer // 2 if self.is_hybrid else self.norm_params_per_layer)
        return (self.num_attention_layers * self.attention_params + self.num_mamba_layers * self.mamba_params
                + self.num_linear_layers * self.linear_params
                + norms + self.num_dense_layers * self.dense_ffn_params
                + self.num_moe_layers * moe + self.params_embedding + self.params_lm_head + final_norm)

    @cached_property
    def hf_tensor_count(self) -> int:
        """Named tensors of the model's Hugging Face state dict (weights, biases, norms): what a refit
        that rebuilds every parameter as a full HF tensor produces one by one. Per layer: GQA q, k, v,
        o (+ q/k/v biases, o bias, q/k norms); MLA q (or q_a, its norm, q_b), kv_a, its norm, kv_b, o;
        an FFN's 3 (gated) or 2 matrices (+ 2 biases); an MoE layer's router, every expert's FFN and
        one shared-expert FFN (fused_experts: the stacked gate_up and down tensors); a Mamba-2 mixer's 8 (in_proj, conv weight and bias, dt bias, A, D, norm,
        out_proj); 2 norms (a hybrid block 1), weight and bias with LayerNorm. Then the embedding(s),
        the final norm and an untied LM head."""
        norm = 2 if self.layernorm else 1
        if self.is_mla:
            attention = (3 if self.q_lora_rank else 1) + 3 + 1
        else:
            attention = 4 + 3 * self.qkv_bias + self.o_bias + 2 * self.qk_norm
        ffn = (3 if self.gated_ffn else 2) * (1 + self.mlp_bias)
        routed = (2 + 2 * self.mlp_bias) if self.fused_experts else self.num_experts * ffn
        moe = 1 + routed + (ffn if self.num_shared_experts else 0)
        norms = self.num_layers * norm * (1 if self.is_hybrid else self.norms_per_layer)
        body = (self.num_attention_layers * attention + self.num_mamba_layers * MAMBA_MIXER_TENSORS
                + self.num_linear_layers * GDN_MIXER_TENSORS
                + self.num_dense_layers * ffn + self.num_moe_layers * moe + norms)
        return (body + 1 + (self.max_position_embeddings > 0) + norm + (not self.tied_head)
                + (self.head_bias and not self.value_head))

    @cached_property
    def params_total(self) -> int:
        return self._params(self.num_experts)

    @cached_property
    def params_active(self) -> int:
        """Parameters a token touches: everything but the routed experts it is not sent to.
        Embeddings included, as Qwen and DeepSeek count their published active sizes."""
        return self._params(self.experts_per_token)

    @cached_property
    def params_routed_experts(self) -> int:
        """All routed-expert weights (the part expert parallelism shards)."""
        return self.num_moe_layers * self.num_experts * self.expert_params

    @cached_property
    def params_compute(self) -> int:
        """Parameters in matrix products per token (N of formulas.md): active parameters less the
        embedding lookup, plus the LM head when it is tied to the embedding."""
        head = self.vocab * self.hidden if self.tied_head else 0
        return self.params_active - self.params_embedding + head

    # ---- FLOPs per token -----------------------------------------------------------------------
    def attention_flops_per_context_token(self, *, absorb_mla: bool = False) -> float:
        """Forward FLOPs of the score and value products per (query, context token) pair, all layers:
        2 H (d_qk + d_v) per layer. MLA with absorbed up-projections (decode kernels) works in the
        latent: 2 H (2 kv_lora_rank + rope_dim)."""
        if self.is_mla and absorb_mla:
            per_head = 2 * self.kv_lora_rank + self.qk_rope_dim
        else:
            per_head = self.qk_head_dim + self.v_dim
        return 2.0 * self.num_attention_layers * self.num_heads * per_head

    def ssm_flops_per_token(self, *, recurrent: bool = False) -> float:
        """State-space FLOPs per token over the Mamba layers, beyond their projections (in N): the
        causal conv1d (2 x kernel per channel) and the scan, recurrent (decode) or chunked (SSD:
        prefill and training); the same of the Gated DeltaNet layers (linear_flops_per_token). 0
        without such layers."""
        if not self.num_mamba_layers:
            return self.linear_flops_per_token(recurrent=recurrent)
        heads, p, n = self.mamba_num_heads, self.mamba_head_dim, self.ssm_state_size
        if recurrent:
            scan = SSM_RECURRENT_FLOPS_PER_STATE_ELEM * heads * p * n
        else:
            scan = 2.0 * heads * (self.ssd_chunk_tokens * (n + p) + 2 * n * p)
        conv = 2.0 * self.mamba_conv_kernel * self.mamba_conv_dim
        return self.num_mamba_layers * (scan + conv)

    def linear_flops_per_token(self, *, recurrent: bool = False) -> float:
        """The Gated DeltaNet layers' FLOPs per token beyond their projections: the causal conv1d and
        the delta rule, recurrent (decode) or chunked (GDN_* above). 0 without such layers."""
        if not self.num_linear_layers:
            return 0.0
        heads, dk, dv = self.linear_value_heads, self.linear_key_dim, self.linear_value_dim
        if recurrent:
            rule = GDN_RECURRENT_FLOPS_PER_STATE_ELEM * heads * dk * dv
        else:
            rule = heads * (4.0 * GDN_CHUNK_TOKENS * (dk + dv) + 6.0 * dk * dv)
        conv = 2.0 * self.linear_conv_kernel * self.linear_conv_dim
        return self.num_linear_layers * (rule + conv)

    def forward_flops_per_token(self, context_len: float, *, absorb_mla: bool = False) -> float:
        """2 N + 4 L H d s_context (formulas.md): prefill, reference, reward, old-logprob, decode;
        plus the Mamba layers' scan (chunked)."""
        return (2.0 * self.params_compute
                + self.attention_flops_per_context_token(absorb_mla=absorb_mla) * self.attention_context(context_len)
                + self.ssm_flops_per_token())

    def decode_flops_per_token(self, context_len: float, *, absorb_mla: bool = True) -> float:
        """One generated token attending to context_len tokens (MLA decode uses absorbed kernels;
        Mamba layers step their recurrence)."""
        return (2.0 * self.params_compute
                + self.attention_flops_per_context_token(absorb_mla=absorb_mla) * self.attention_context(context_len)
                + self.ssm_flops_per_token(recurrent=True))

    def train_flops_per_token(self, seq_len: float) -> float:
        """6 N + 12 L H d s (PaLM appendix B; formulas.md), without activation recomputation; the
        Mamba scan 3x its forward (backward = 2x forward). With LoRA adapters the frozen base takes
        no weight gradient: 4 N + 6 N_adapter."""
        matmuls = 6.0 * self.params_compute
        if self.adapter_rank:
            matmuls = 4.0 * self.params_compute + 6.0 * self.params_adapter_active
        # a sequence's attention as windowed_sq / s per token, so that this x s summed over sequences
        # is matmuls x tokens + 3 x per-pair FLOPs x windowed_sq (training._per_sequence_flops)
        context = float(self.windowed_sq(seq_len)) / seq_len if seq_len > 0 else 0.0
        return (matmuls + 3.0 * self.attention_flops_per_context_token() * context
                + 3.0 * self.ssm_flops_per_token())

    @property
    def gdn_chunk_tokens(self) -> int:
        """The chunk of a Gated DeltaNet layer's chunked scan (GDN_CHUNK_TOKENS: fla's kernel fixes it), for
        layer_costs, which reads this module's specs without importing it."""
        return GDN_CHUNK_TOKENS

    @cached_property
    def params_adapter_total(self) -> float:
        """LoRA adapter parameters of the whole model (every expert's): what an adapter refit sends."""
        from .layer_costs import layer_shapes  # layer_costs reads this module's specs

        if not self.adapter_rank:
            return 0.0
        return sum(shape.trainable_dense_params + shape.trainable_expert_params for shape in layer_shapes(self))

    @cached_property
    def adapter_tensor_count(self) -> int:
        """Named adapter tensors, PEFT's lora_A and lora_B per adapted module (a fused matmul's A
        covers its sub-matrices: q, k, v; gate, up), every expert's: an adapter refit's tensors."""
        from .layer_costs import layer_shapes

        if not self.adapter_rank:
            return 0
        return sum(2 * round(g.n_out / self.adapter_rank) * (max(shape.num_experts, 1) if g.expert else 1)
                   for shape in layer_shapes(self) for g in shape.gemms if g.adapter and g.name.endswith(".lora_a"))

    @cached_property
    def params_adapter_active(self) -> float:
        """LoRA adapter parameters a token passes through (routed experts' at top-k of them)."""
        from .layer_costs import layer_shapes  # layer_costs reads this module's specs

        total = 0.0
        for shape in layer_shapes(self):
            for gemm in shape.gemms:
                if gemm.adapter:
                    share = shape.experts_per_token if gemm.expert else 1
                    total += gemm.params * share
        return total

    # ---- bytes ---------------------------------------------------------------------------------
    def weight_bytes(self, bytes_per_param: float = 2) -> float:
        return self.params_total * bytes_per_param

    def kv_elems_per_token(self) -> int:
        """Cached elements per token over the full-attention layers: 2 L kv_heads d (MLA: L (kv_lora
        + rope)); a sliding layer caches its window a sequence (window_kv_elems_per_sequence)."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_dim)
        return 2 * (self.num_attention_layers - self.num_sliding_layers) * self.num_kv_heads * self.head_dim

    def window_kv_elems_per_sequence(self) -> int:
        """The sliding layers' cache of a sequence: its window of tokens on each (0 without)."""
        return 2 * self.num_sliding_layers * self.num_kv_heads * self.head_dim * self.sliding_window

    def kv_bytes_per_token(self, bytes_per_elem: float = 2) -> float:
        return self.kv_elems_per_token() * bytes_per_elem

    def state_elems_per_device(self, tp: int, *, pad_linear_groups: bool = False) -> tuple[float, float]:
        """A sequence's Mamba / linear-attention state on one of ``tp`` ranks over all such layers:
        (SSM state elements, conv window elements). The SSM heads split over tp; the conv channels
        too, after the engine pads the B / C groups to a multiple of tp when tp does not divide them
        (extra_groups_for_head_shards: tp - groups more, in vLLM 0.11 model_executor/layers/mamba/
        mamba_utils.py mamba2_state_shape and SGLang 0.5.6 configs/mamba_utils.py Mamba2StateShape;
        SGLang shapes a Gated DeltaNet layer so too, its key heads the groups: ``pad_linear_groups``;
        vLLM's gated_delta_net_state_shape does not)."""
        if self.num_linear_layers:
            pad = extra_groups_for_head_shards(self.linear_key_heads, tp) if pad_linear_groups else 0
            conv_dim = self.linear_conv_dim + 2 * pad * self.linear_key_dim
            return (self.num_linear_layers * self.linear_value_heads * self.linear_key_dim * self.linear_value_dim / tp,
                    self.num_linear_layers * (self.linear_conv_kernel - 1) * conv_dim / tp)
        if not self.num_mamba_layers:
            return 0.0, 0.0
        conv_dim = self.mamba_conv_dim + 2 * extra_groups_for_head_shards(self.mamba_n_groups, tp) * self.ssm_state_size
        return (self.num_mamba_layers * self.mamba_inner * self.ssm_state_size / tp,
                self.num_mamba_layers * (self.mamba_conv_kernel - 1) * conv_dim / tp)

    def ssm_state_elems_per_sequence(self) -> int:
        """A sequence's constant Mamba state over all Mamba layers, whatever its length: the SSM
        state (heads x head_dim x state) and the conv window ((kernel - 1) x conv channels)."""
        per_layer = self.mamba_inner * self.ssm_state_size + (self.mamba_conv_kernel - 1) * self.mamba_conv_dim
        if self.num_linear_layers:   # a Gated DeltaNet layer's: key dim x value dim a value head, and its conv window
            return self.num_linear_layers * (self.linear_value_heads * self.linear_key_dim * self.linear_value_dim
                                             + (self.linear_conv_kernel - 1) * self.linear_conv_dim)
        return self.num_mamba_layers * per_layer if self.num_mamba_layers else 0

    def replace(self, **fields: Any) -> ModelSpec:
        return dataclasses.replace(self, **fields)


# ---- loading --------------------------------------------------------------------------------------
def model_names() -> list[str]:
    return sorted(PRESETS)


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _int(cfg: Mapping[str, Any], source: str, *keys: str, default: int | None = None) -> int:
    """The first of ``keys`` present, as an integer; errors name the config.json key that was read."""
    given = next((key for key in keys if cfg.get(key) is not None), None)
    value = cfg[given] if given is not None else default
    if value is None:
        raise RlsimError(f"missing field {keys[0]!r}", source=source, field=keys[0],
                         fix="add it (see the model's config.json on Hugging Face)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value:
        raise RlsimError(f"expected an integer, got {value!r}", source=source, field=given or keys[0],
                         fix="write a whole number, as in the model's config.json on Hugging Face")
    return int(value)


def _present(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """The first of `keys` that the config holds (the name the user wrote), else the first."""
    return next((k for k in keys if cfg.get(k) is not None), keys[0])


# ModelSpec fields -> the config.json keys they are read from (spec_from_config), so that an error
# found on the spec names the key the user wrote, not the internal field.
_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
    "head_dim": ("head_dim", "attention_head_dim", "hidden_size", "n_embd", "d_model"),
    "ffn_hidden": ("intermediate_size", "n_inner", "ffn_dim"),
}


def _config_error(exc: RlsimError, cfg: Mapping[str, Any], source: str) -> RlsimError:
    """`exc` (raised by ModelSpec) with its internal field name replaced by the config.json key."""
    keys = _CONFIG_KEYS.get(exc.field or "")
    if keys is None:
        return exc if exc.source else RlsimError(str(exc), source=source)
    key = _present(cfg, keys)
    message = str(exc).split(f"field '{exc.field}': ", 1)[-1].split(" (fix: ")[0]
    message = message.replace(f"{exc.field} must", f"{key} must", 1)
    return RlsimError(message, source=exc.source or source, field=key, fix=exc.fix)


class _ReadLog(dict):
    """A config mapping that notes each key the loader looks up, so that a preset's override that no
    lookup reached (a typo, a key rlsim does not read) is refused rather than read past."""

    def __init__(self, cfg: Mapping[str, Any], read: set[str]) -> None:
        super().__init__(cfg)
        self.read = read

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def spec_from_config(cfg: Mapping[str, Any], name: str, source: str, read: set[str] | None = None) -> ModelSpec:
    """A Hugging Face config.json mapping (llama / qwen2 / qwen3 / *_moe / deepseek_v3 / gpt2 keys).
    ``read``, where given, collects the keys the loader looked up."""
    cfg = _ReadLog(_with_model_type_defaults(_language_model(_with_model_type_defaults(cfg))),
                   set() if read is None else read)
    model_type = str(cfg.get("model_type", "")).lower()
    hidden = _int(cfg, source, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, source, "num_attention_heads", "n_head")
    kv_lora = _int(cfg, source, "kv_lora_rank", default=0)
    experts = _int(cfg, source, *_EXPERT_KEYS, default=0)
    moe_ffn = _int(cfg, source, "moe_intermediate_size", default=0)
    if experts and not moe_ffn and not cfg.get("first_k_dense_replace"):
        # Mixtral's convention (also gpt-oss, OLMoE, Phi-3.5-MoE): every layer is MoE and
        # intermediate_size is each expert's width (transformers MixtralConfig / GptOssConfig)
        moe_ffn = _int(cfg, source, "intermediate_size", default=0)
    # ERNIE 4.5's shared experts are one MLP moe_num_shared_experts x moe_intermediate_size wide
    # (Ernie4_5_MoeSparseMoeBlock): the same weights and FLOPs as that many experts
    shared = _int(cfg, source, "n_shared_experts", "moe_num_shared_experts", default=0)
    if not shared and cfg.get("shared_expert_intermediate_size") and moe_ffn:  # qwen2_moe style
        shared = round(_int(cfg, source, "shared_expert_intermediate_size") / moe_ffn)
    if model_type == "llama4_text" and experts:   # Llama4TextMoe: one shared expert beside the routed
        shared = shared or 1
    _refuse_unread_shapes(cfg, source)
    # Nemotron-H names its FFN activation mlp_hidden_act (relu2: squared ReLU, two matrices).
    act = str(_first(cfg, *_ACT_KEYS, default="silu")).lower()
    if act not in _GATED_ACTS + _PLAIN_ACTS:   # an unknown name ran as a two-matrix MLP without a word
        key = next(k for k in _ACT_KEYS if cfg.get(k) is not None)
        raise RlsimError(f"unknown activation {act!r}: rlsim prices a gated FFN (three matrices) for "
                         f"{', '.join(_GATED_ACTS)} and a two-matrix MLP for {', '.join(_PLAIN_ACTS)}",
                         source=source, field=key, fix="give one of those names (the model's config.json)")
    gpt_style = model_type in ("gpt", "gpt2")
    positions = 0
    if gpt_style or cfg.get("position_embedding_type") == "absolute":
        positions = _int(cfg, source, "max_position_embeddings", "n_positions", default=0)
    # Llama 4: intermediate_size is each expert's width, intermediate_size_mlp the dense layers'
    ffn = _int(cfg, source, "intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim", default=0) \
        or (4 * hidden if gpt_style else 0)
    if experts and not _first(cfg, "first_k_dense_replace") and not ffn:
        ffn = moe_ffn  # all-MoE models may omit the dense width; it is unused then
    # Nemotron-H names it attention_head_dim (NemotronHConfig); else hidden / heads, which must divide
    # (30 heads of a 4096-wide model were priced at 136 each, 4080 in all)
    if heads > 0 and hidden % heads and not kv_lora and _first(cfg, "head_dim", "attention_head_dim") is None:
        raise RlsimError(f"{heads} heads do not divide hidden_size {hidden} and no head_dim is given",
                         source=source, field=_present(cfg, _CONFIG_KEYS["num_heads"]),
                         fix="give head_dim, or a head count that divides hidden_size")
    head_dim = _int(cfg, source, "head_dim", "attention_head_dim", default=hidden // heads if heads else 0)
    try:
        return ModelSpec(
            name=name, source=source, model_type=model_type,
            num_layers=_int(cfg, source, "num_hidden_layers", "n_layer", "num_layers"),
            hidden=hidden, ffn_hidden=ffn, num_heads=heads,
            num_kv_heads=_int(cfg, source, "num_key_value_heads", default=heads),
            head_dim=head_dim if not kv_lora else _int(cfg, source, "v_head_dim", default=head_dim),
            vocab=_int(cfg, source, "vocab_size"),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", gpt_style)),
            num_experts=experts,
            experts_per_token=(_int(cfg, source, *_TOP_K_KEYS, default=0)
                               if experts else 0),
            num_shared_experts=shared if experts else 0,
            moe_ffn_hidden=moe_ffn if experts else 0,
            **(_moe_placement(cfg, source, _int(cfg, source, "num_hidden_layers", "n_layer", "num_layers"))
               if experts else {}),
            **(_expert_groups(cfg, source) if experts else {}),
            q_lora_rank=_int(cfg, source, "q_lora_rank", default=0) if kv_lora else 0,
            kv_lora_rank=kv_lora,
            mtp_layers=_int(cfg, source, "num_nextn_predict_layers", default=0),
            qk_rope_dim=_int(cfg, source, "qk_rope_head_dim", default=0) if kv_lora else 0,
            qk_nope_dim=_int(cfg, source, "qk_nope_head_dim", default=0) if kv_lora else 0,
            v_head_dim=_int(cfg, source, "v_head_dim", default=0) if kv_lora else 0,
            gated_ffn=act in _GATED_ACTS or model_type in _GATED_MODEL_TYPES,
            **_bias_fields(cfg, model_type, gpt_style),
            fused_experts=model_type in _FUSED_EXPERT_MODEL_TYPES,
            qk_norm=model_type in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text"),
            sandwich_norms=model_type in ("gemma2", "gemma3", "gemma3_text"),
            layernorm=cfg.get("norm_type", "layernorm" if gpt_style else "rmsnorm") == "layernorm",
            max_position_embeddings=positions, checkpoint_dtype=_checkpoint_dtype(cfg, source),
            **_hybrid_fields(cfg, source),
            **_window_fields(cfg, source, _int(cfg, source, "num_hidden_layers", "n_layer", "num_layers"), model_type),
            **_linear_fields(cfg, source, _int(cfg, source, "num_hidden_layers", "n_layer", "num_layers"), model_type),
        )
    except RlsimError as exc:
        raise _config_error(exc, cfg, source) from None


# ERNIE 4.5's one switch for its biases (Ernie4_5Config / Ernie4_5_MoeConfig use_bias, default False):
# q, k, v and o_proj, every MLP's gate, up and down (dense, shared and, in transformers 4.x and Baidu's
# release code, each routed expert's Ernie4_5_MoeMLP), and the MoE model's lm_head.
_USE_BIAS_MODEL_TYPES = ("ernie4_5", "ernie4_5_moe")


def _bias_fields(cfg: Mapping[str, Any], model_type: str, gpt_style: bool) -> dict[str, bool]:
    """Which projections carry biases: attention_bias and mlp_bias where given, else the model
    type's (Qwen2's q/k/v, GPT's all, gpt-oss's attention and MLPs; ERNIE 4.5's use_bias). attention_bias
    biases q, k, v and o_proj (transformers' Llama, Qwen3, Gemma, gpt-oss attention); Qwen2's attention
    biases q, k, v and never o_proj (modeling_qwen2.py)."""
    use_bias = bool(cfg.get("use_bias", False)) if model_type in _USE_BIAS_MODEL_TYPES else False
    qwen2 = model_type in ("qwen2", "qwen2_moe")
    # GptOssConfig's attention_bias defaults to True; the others' to False
    attention_bias = bool(cfg.get("attention_bias", gpt_style or use_bias or model_type == "gpt_oss"))
    return {"qkv_bias": bool(cfg.get("attention_bias", qwen2 or attention_bias)),
            "o_bias": attention_bias and not qwen2,
            "mlp_bias": bool(cfg.get("mlp_bias", gpt_style or model_type == "gpt_oss" or use_bias)),
            "head_bias": use_bias and model_type == "ernie4_5_moe"}


def _with_model_type_defaults(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` with transformers' defaults for its model_type (_MODEL_TYPE_DEFAULTS) where a key is
    absent; a key given, null included, stays as given."""
    defaults = _MODEL_TYPE_DEFAULTS.get(str(cfg.get("model_type", "")).lower(), {})
    return {**defaults, **cfg}


def _language_model(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal checkpoint's language model: its `text_config` (Gemma 3, Mistral 3, Llama 4
    configs), the top level's other keys beneath it, where the top level has no layers of its own.
    Its vision encoder is not priced (images are not modelled; Gemma 3 27B's is 0.42B of 27.4B)."""
    text = cfg.get("text_config")
    if not isinstance(text, Mapping) or any(cfg.get(k) is not None for k in ("num_hidden_layers", "n_layer",
                                                                               "num_layers")):
        return cfg
    outer = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config", "model_type")}
    return {**outer, **text}


# Keys of layer kinds rlsim does not price (read from the config, refused by name rather than priced
# as a transformer of full-attention layers): {key: what it says}. A Nemotron-H config, read by its
# hybrid_override_pattern, may carry its derived block list and its mamba_* keys.
_UNREAD_LAYER_KEYS = {
    "attn_layer_period": "Mamba layers between the attention ones (Jamba)",
    "layers_block_type": "Mamba layers between the attention ones (Jamba)",
    "attn_type_list": "linear (lightning) attention layers (MiniMax)",
    "attn_layer_indices": "Mamba layers between the attention ones (Bamba)",
    "mamba_d_ssm": "attention and Mamba mixers side by side in a layer (Falcon-H1)",
    "block_types": "recurrent RG-LRU blocks (RecurrentGemma)",
    "linear_attn_config": "Kimi Delta Attention layers (Kimi Linear)",
}
# Any other mamba_* key outside a Nemotron-H config (Bamba's, Falcon-H1's, Jamba's Mamba mixers).
_MAMBA_KEY_PREFIX = "mamba_"
# layer_types values rlsim prices (transformers' names): full and sliding-window attention, Llama 4's
# chunked attention (with attention_chunk_size), and Gated DeltaNet's linear attention (Qwen3-Next,
# Qwen3.5: with its linear_num_key_heads / linear_num_value_heads; Kimi Linear's KDA is another kind).
_PRICED_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")
_GATED_DELTANET_KEYS = ("linear_num_key_heads", "linear_num_value_heads")


# Routed experts and their top-k as the MoE families name them (ERNIE 4.5: moe_num_experts, moe_k).
_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k", "moe_k")


# The routers that pick a token's experts inside its top groups (transformers modeling_deepseek_v3.py
# DeepseekV3MoE.route_tokens_to_experts; DeepSeek-V2's MoEGate topk_method "group_limited_greedy"; its
# "greedy" takes the top-k over all experts and leaves n_group unread).
_GROUP_LIMITED_ROUTERS = ("group_limited_greedy", "noaux_tc")


def _expert_groups(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """expert_groups / expert_groups_per_token from config.json n_group / topk_group where the router
    limits a token to its top groups (deepseek_v3 always: its MoE gate has no other method; deepseek_v2
    under topk_method group_limited_greedy), else none (1 group, no limit)."""
    method = cfg.get("topk_method", "noaux_tc" if cfg.get("model_type") == "deepseek_v3" else "greedy")
    if method not in _GROUP_LIMITED_ROUTERS or cfg.get("n_group") is None:
        return {}
    return {"expert_groups": _int(cfg, source, "n_group"), "expert_groups_per_token": _int(cfg, source, "topk_group")}


def _moe_placement(cfg: Mapping[str, Any], source: str, num_layers: int) -> dict[str, Any]:
    """Which layers are MoE, as transformers builds them: from first_k_dense_replace on, every
    moe_layer_freq-th (DeepseekV3DecoderLayer: layer_idx % moe_layer_freq == 0); not in
    mlp_only_layers and every decoder_sparse_step-th (Qwen2MoeDecoderLayer: (layer_idx + 1) %
    decoder_sparse_step == 0); Llama 4's moe_layers, else every interleave_moe_layer_step-th
    (Llama4TextConfig: range(step - 1, layers, step)); ERNIE 4.5's from moe_layer_start_index to
    moe_layer_end_index (-1: the last), every moe_layer_interval-th (Ernie4_5_MoeDecoderLayer:
    (layer_idx + 1) % interval == 0). Returns first_k_dense where the dense layers lead, else
    dense_layers."""
    first = _int(cfg, source, "first_k_dense_replace", default=0)
    steps = {key: _period(cfg, source, key, default=1)
             for key in ("interleave_moe_layer_step", "moe_layer_freq", "decoder_sparse_step", "moe_layer_interval")}
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise RlsimError("mlp_only_layers must be a list of layer indices", source=source, field="mlp_only_layers",
                         fix="write it as the model's config.json does")
    freq, sparse = steps["moe_layer_freq"], steps["decoder_sparse_step"]
    moe = set(range(first, num_layers))
    if isinstance(cfg.get("moe_layers"), list):
        moe &= {int(i) for i in cfg["moe_layers"] if isinstance(i, int) and not isinstance(i, bool)}
    else:
        step = steps["interleave_moe_layer_step"]
        moe &= set(range(step - 1, num_layers, step))
    moe = {i for i in moe if i % freq == 0 and (i + 1) % sparse == 0 and i not in only}
    last = _int(cfg, source, "moe_layer_end_index", default=-1)
    moe = {i for i in moe if i >= _int(cfg, source, "moe_layer_start_index", default=0)
           and (i <= last or last == -1) and (i + 1) % steps["moe_layer_interval"] == 0}
    dense = sorted(set(range(num_layers)) - moe)
    if dense == list(range(len(dense))):
        return {"first_k_dense": len(dense)}
    return {"dense_layers": tuple(dense)}


# model_type values of encoder-only and encoder-decoder models (transformers' configs): not the
# decoder-only causal LMs rlsim prices (a BERT config ran as a decoder; a new-user trial)
_NOT_DECODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "albert",
                                "electra", "modernbert", "t5", "mt5", "umt5", "bart", "mbart", "pegasus", "whisper",
                                "encoder-decoder"})


def _refuse_non_decoder(cfg: Mapping[str, Any], source: str) -> None:
    """An encoder or encoder-decoder config, and a layer_types list that does not give one type a
    layer, refused rather than priced as a decoder of some other shape."""
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type in _NOT_DECODER_TYPES or cfg.get("is_encoder_decoder") is True:
        key = "is_encoder_decoder" if cfg.get("is_encoder_decoder") is True else "model_type"
        raise RlsimError(f"{model_type or 'this model'} is an encoder or encoder-decoder model: rlsim prices "
                         "decoder-only causal language models (the policies RL post-training trains)",
                         source=source, field=key, fix="give a decoder-only model's config.json (or an rlsim preset)")
    types = cfg.get("layer_types")
    layers = _int(cfg, source, "num_hidden_layers", "n_layer", "num_layers")
    if types is not None and (not isinstance(types, list) or len(types) != layers):
        raise RlsimError(f"expected one layer type per layer ({layers}), got "
                         f"{len(types) if isinstance(types, list) else repr(types)[:80]}", source=source,
                         field="layer_types", fix="give a list of one type a layer (full_attention, ...), or none")


def _refuse_unread_shapes(cfg: Mapping[str, Any], source: str) -> None:
    """Shape keys rlsim does not read, refused rather than priced as another model: layers of other
    kinds (_UNREAD_LAYER_KEYS, mamba_* keys, a layer_types value rlsim does not price) and
    DeepSeek-V3.2's sparse attention (index_topk)."""
    _refuse_non_decoder(cfg, source)
    _refuse_unpriced_layer_types(cfg, source)
    hybrid = bool(cfg.get("hybrid_override_pattern"))
    found = [(k, why) for k, why in _UNREAD_LAYER_KEYS.items() if cfg.get(k) is not None and not hybrid]
    found += [(k, "Mamba layers (Bamba, Falcon-H1, Jamba: keys mamba_*)") for k in cfg
              if k.startswith(_MAMBA_KEY_PREFIX) and cfg.get(k) is not None and not hybrid]
    if found:
        key, why = found[0]
        raise RlsimError(f"{why} are not priced: rlsim prices full, sliding-window and chunked attention, "
                         "Gated DeltaNet and Nemotron-H's Mamba-2 blocks", source=source, field=key,
                         fix="use a model of those layer kinds")
    if cfg.get("index_topk"):   # DeepSeek-V3.2 (deepseek_v32): DeepSeek Sparse Attention
        raise RlsimError(f"sparse attention (each query over the top {cfg['index_topk']} keys a lightning indexer "
                         "picks) is not modelled", source=source, field="index_topk",
                         fix="set index_topk to null to price DeepSeek-V3's full MLA attention (exact for sequences "
                             "within the top-k, an upper bound beyond, without the indexer's own cost)")


# rlsim's weight dtype nearest a checkpoint's quantization_config.quant_method (transformers' names):
# mxfp4 is 4-bit elements with an 8-bit scale a block of 32 (4.25 bits), AWQ / GPTQ 4-bit as published.
_QUANT_METHOD_DTYPE = {"fp8": "fp8", "fbgemm_fp8": "fp8", "compressed-tensors": "fp8", "mxfp4": "int4",
                       "awq": "int4", "gptq": "int4"}


def _checkpoint_dtype(cfg: Mapping[str, Any], source: str) -> str:
    """The rlsim weight dtype nearest a quantized checkpoint's (quantization_config: DeepSeek-V3's fp8,
    gpt-oss's mxfp4), '' for none. It was priced at rollout_layout.weight_dtype's bf16 default without a
    word (gpt-oss-120b: 234 GB of weights, not ~65 GB): a rollout engine of such a model must be given
    its weight_dtype (inference._check_layout). A method of no known width is refused."""
    quant = cfg.get("quantization_config")
    if quant is None:
        return ""
    method = str(quant.get("quant_method", "?")).lower() if isinstance(quant, Mapping) else repr(quant)[:40]
    nearest = _QUANT_METHOD_DTYPE.get(method)
    if nearest is None:
        raise RlsimError(f"a quantized checkpoint of an unknown method ({method}): its weights' width is not "
                         "known", source=source, field="quantization_config",
                         fix=f"set quantization_config to null (or remove it) and set workload.rollout_layout."
                             f"weight_dtype to the width nearest {method}'s (one of {', '.join(DTYPE_BYTES)})")
    return nearest


def _refuse_unpriced_layer_types(cfg: Mapping[str, Any], source: str) -> None:
    """A layer_types value rlsim does not price (LFM2's conv, a new kind), chunked_attention without
    its chunk size, or linear_attention without Gated DeltaNet's head keys: refused by the value."""
    types = [str(t) for t in cfg.get("layer_types") or []]
    unpriced = [t for t in types if t not in _PRICED_LAYER_TYPES]
    if unpriced:
        raise RlsimError(f"layer type {unpriced[0]!r} ({unpriced.count(unpriced[0])} of {len(types)} layers) is not "
                         f"priced: rlsim prices {', '.join(_PRICED_LAYER_TYPES)}", source=source,
                         field="layer_types", fix="use a model of those layer kinds")
    if "chunked_attention" in types and cfg.get("attention_chunk_size") is None:
        raise RlsimError("chunked_attention layers need their chunk size", source=source,
                         field="attention_chunk_size", fix="give attention_chunk_size (Llama 4: 8192)")
    if "linear_attention" in types and any(cfg.get(k) is None for k in _GATED_DELTANET_KEYS):
        raise RlsimError("linear_attention layers are priced as Gated DeltaNet (Qwen3-Next), whose "
                         f"{' and '.join(_GATED_DELTANET_KEYS)} this config lacks: its linear-attention kind is "
                         "not priced", source=source, field="layer_types",
                         fix="give a Gated DeltaNet model's linear_* keys, or use a model of another kind")


def _period(cfg: Mapping[str, Any], source: str, key: str, default: int | None = None) -> int:
    """A layer period the config gives (every n-th layer): a whole number >= 1, else an error naming it."""
    every = _int(cfg, source, key, default=default)
    if every < 1:
        raise RlsimError(f"{key} must be >= 1, got {every}", source=source, field=key,
                         fix="write it as the model's config.json does")
    return every


def _all_but_every(every: int, num_layers: int) -> tuple[int, ...]:
    """The layers but every ``every``-th (1-based): the local ones of a one-global-in-``every`` pattern."""
    return tuple(i for i in range(num_layers) if (i + 1) % every)


def _linear_fields(cfg: Mapping[str, Any], source: str, num_layers: int, model_type: str) -> dict[str, Any]:
    """Qwen3-Next's Gated DeltaNet layers: those `layer_types` names linear_attention, else all but
    every `full_attention_interval`-th (Qwen3NextConfig), with their heads and dims
    (linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
    linear_conv_kernel_dim); its attention layers' output gate."""
    gate = {"attention_output_gate": True} if model_type == "qwen3_next" else {}
    types = cfg.get("layer_types")
    if isinstance(types, list) and "linear_attention" in types:
        if len(types) != num_layers:
            raise RlsimError(f"expected one layer type per layer ({num_layers}), got {len(types)}", source=source,
                             field="layer_types", fix="give a list of linear_attention / full_attention, one a layer")
        layers = tuple(i for i, kind in enumerate(types) if kind == "linear_attention")
    elif cfg.get("full_attention_interval") is not None:
        layers = _all_but_every(_period(cfg, source, "full_attention_interval"), num_layers)
    else:
        layers = ()
    if not layers:
        return gate
    return {"linear_layers": layers, **gate,
            "linear_key_heads": _int(cfg, source, "linear_num_key_heads"),
            "linear_value_heads": _int(cfg, source, "linear_num_value_heads"),
            "linear_key_dim": _int(cfg, source, "linear_key_head_dim"),
            "linear_value_dim": _int(cfg, source, "linear_value_head_dim"),
            "linear_conv_kernel": _int(cfg, source, "linear_conv_kernel_dim", default=4)}


def _chunk_fields(cfg: Mapping[str, Any], source: str, num_layers: int) -> dict[str, Any]:
    """Llama 4's chunked attention (attention_chunk_size c): on its RoPE layers (layer_types'
    chunked_attention, else no_rope_layers' 1s, else all but every fourth: Llama4TextConfig's
    no_rope_layer_interval) each token attends within its chunk of c tokens. Priced as a sliding
    window of c: the same within the first chunk, and past it an upper bound (a chunk's token attends
    to at most c keys, c / 2 on average). vLLM 0.11 caches them as full attention by default
    (ModelSpec.chunked_attention)."""
    chunk = _period(cfg, source, "attention_chunk_size")
    types, rope = cfg.get("layer_types"), cfg.get("no_rope_layers")
    if isinstance(types, list) and len(types) == num_layers:
        layers = tuple(i for i, kind in enumerate(types) if kind == "chunked_attention")
    elif isinstance(rope, list) and len(rope) == num_layers:
        layers = tuple(i for i, uses in enumerate(rope) if uses)
    else:
        layers = _all_but_every(4, num_layers)
    return {"sliding_window": chunk, "sliding_layers": layers, "chunked_attention": True} if layers else {}


def _window_fields(cfg: Mapping[str, Any], source: str, num_layers: int, model_type: str) -> dict[str, Any]:
    """Sliding-window attention layers (gpt-oss, Gemma 2 / 3, Mistral 7B v0.1): `sliding_window`
    tokens on the layers `layer_types` names sliding_attention; without layer_types, Gemma 2's
    even layers, Gemma 3's all but every `sliding_window_pattern`-th (transformers Gemma2 / Gemma3
    configs before layer_types), else every layer (Mistral). A window no sequence can reach (>=
    max_position_embeddings: Phi-3.5-MoE) or switched off (Qwen2's use_sliding_window: false) is
    no window."""
    if cfg.get("attention_chunk_size") is not None:
        return _chunk_fields(cfg, source, num_layers)
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
        return {}
    window = _int(cfg, source, "sliding_window")
    limit = _int(cfg, source, "max_position_embeddings", default=0)
    if limit and window >= limit:
        return {}
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise RlsimError(f"expected one layer type per layer ({num_layers}), got {types!r}"[:200], source=source,
                             field="layer_types", fix="give a list of sliding_attention / full_attention, one a layer")
        layers = tuple(i for i, kind in enumerate(types) if "sliding" in str(kind))
    elif model_type == "gemma2":
        layers = tuple(range(0, num_layers, 2))
    elif model_type in ("qwen2", "qwen3", "qwen2_moe"):
        layers = _qwen_window_layers(cfg, source, num_layers, model_type)
    elif cfg.get("sliding_window_pattern") is not None:
        layers = _all_but_every(_period(cfg, source, "sliding_window_pattern"), num_layers)
    else:
        layers = tuple(range(num_layers))
    return {"sliding_window": window, "sliding_layers": layers} if layers and window > 0 else {}


def _qwen_window_layers(cfg: Mapping[str, Any], source: str, num_layers: int, model_type: str) -> tuple[int, ...]:
    """Qwen's windowed layers under use_sliding_window, as transformers 5.25 lays them out:
    Qwen2Config / Qwen3Config from max_window_layers on, Qwen2MoeConfig the even layers below it
    (Qwen3MoeConfig has no such key: every layer, the loader's default)."""
    start = min(_int(cfg, source, "max_window_layers"), num_layers)
    if start < 0:
        raise RlsimError(f"max_window_layers must be >= 0, got {start}", source=source, field="max_window_layers",
                         fix="write it as the model's config.json does")
    if model_type == "qwen2_moe":
        return tuple(range(0, start, 2))
    return tuple(range(start, num_layers))


def _hybrid_fields(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Nemotron-H config.json keys (HF NemotronHConfig) of a hybrid Mamba / attention model."""
    pattern = cfg.get("hybrid_override_pattern")
    if not pattern:
        return {}
    if not isinstance(pattern, str):
        raise RlsimError(f"expected a string of M, * and -, got {pattern!r}", source=source,
                         field="hybrid_override_pattern")
    return {"layer_pattern": pattern,
            "mamba_num_heads": _int(cfg, source, "mamba_num_heads", default=0),
            "mamba_head_dim": _int(cfg, source, "mamba_head_dim", default=0),
            "ssm_state_size": _int(cfg, source, "ssm_state_size", "state_size", default=0),
            "mamba_n_groups": _int(cfg, source, "n_groups", "mamba_n_groups", default=1),
            "mamba_conv_kernel": _int(cfg, source, "conv_kernel", "mamba_d_conv", default=4),
            "ssd_chunk_tokens": _int(cfg, source, "chunk_size", default=SSD_CHUNK_TOKENS)}


def with_value_head(model: ModelSpec) -> ModelSpec:
    """``model`` as a critic or a scalar reward model: its trunk under a hidden x 1 value head."""
    return dataclasses.replace(model, value_head=True)


def load_model(spec: str | Path | Mapping[str, Any], *, field: str = "model",
               source: str | None = None) -> ModelSpec:
    """A preset name ('qwen2.5-7b'), a path to a config.json, or a mapping.

    A mapping is a config.json-style dict; with `preset: NAME` its other keys override that preset
    (e.g. `{preset: qwen2.5-7b, num_hidden_layers: 4}`). `field`: the caller's dotted key the spec
    came from (`workload.model`, `workload.critic_model`, ...), named by an unknown or unreadable one;
    `source`: the file that key is in, named by an unknown name (a config.json's errors name its path)."""
    if isinstance(spec, Mapping):
        cfg = dict(spec)
        where = "<model mapping>"
        base = cfg.pop("preset", None)
        name = str(cfg.pop("name", base or "custom"))
        if base is None:   # a whole config.json inline: its unread keys (architectures, ...) are normal
            return spec_from_config(cfg, name, where)
        preset, read = _preset_config(str(base), where, f"{field}.preset"), set()
        model = spec_from_config({**preset, **cfg}, name, where, read)
        _refuse_unread_overrides(set(cfg) - read, read, sorted(preset), source, field)
        return model
    text = str(spec).strip()
    if not text:   # Path("") is the current folder: its config.json, whatever it is, was read
        raise RlsimError("empty model name", source=source, field=field,
                         fix=f"use one of: {', '.join(model_names())}, or a path to a config.json")
    key = text.lower()
    if key in PRESETS:
        return spec_from_config(PRESETS[key], key, f"model preset {key}")
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        try:
            # NaN / Infinity parse (Nemotron-H's time_step_limit: [0.0, Infinity], a key rlsim does not
            # read); a key rlsim reads refuses a value that is not finite (_int)
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise RlsimError(f"cannot read model config: {exc.strerror}", source=str(path), field=field,
                             fix="give a preset name or the path of a Hugging Face config.json") from None
        except UnicodeDecodeError as exc:
            raise RlsimError(f"not UTF-8 text (byte {exc.start})", source=str(path), field=field,
                             fix="save the config.json as UTF-8") from None
        except json.JSONDecodeError as exc:
            raise RlsimError(f"not valid JSON: {exc}", source=str(path), field=field,
                             fix=f"correct the JSON at line {exc.lineno}, column {exc.colno}") from None
        except (ValueError, RecursionError) as exc:
            raise RlsimError(f"a value cannot be read: {exc}", source=str(path), field=field,
                             fix="give finite numbers of a sensible size") from None
        if not isinstance(cfg, dict):
            raise RlsimError(f"expected a JSON object, got a {type(cfg).__name__}", source=str(path), field=field,
                             fix="give a Hugging Face config.json: one object of the model's keys")
        return spec_from_config(cfg, path.parent.name or path.stem, str(path))
    return _raise_unknown(text, source, field)


def _refuse_unread_overrides(unread: set[str], read: set[str], preset_keys: list[str], source: str | None,
                             field: str) -> None:
    """A key beside `preset:` that the loader never looked up (a typo, an alias the preset's own key
    outranks, a key rlsim does not price) was read past: the model ran as the preset."""
    if not unread:
        return
    key = sorted(unread)[0]
    raise RlsimError(f"{key!r} beside preset: is not a config.json key rlsim reads for this model"
                     f"{one_typo_from(key, read)}", source=source, field=f"{field}.{key}",
                     fix=f"override one of the preset's keys ({', '.join(preset_keys)}) or another key rlsim "
                         "reads (docs/reference/models.md), or remove it")


def _preset_config(name: str, source: str, field: str = "model") -> dict[str, Any]:
    cfg = PRESETS.get(name.strip().lower())
    if cfg is None:
        _raise_unknown(name, source, field)
    return dict(cfg)


def _raise_unknown(name: str, source: str | None = None, field: str = "model") -> Any:
    raise RlsimError(f"unknown model {name!r}{one_typo_from(str(name).strip().lower(), model_names())}",
                     source=source, field=field,
                     fix=f"use one of: {', '.join(model_names())}, or a path to a config.json")
