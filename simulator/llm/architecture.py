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

from ..errors import RlsimError
from .model_presets import PRESETS

# Bytes per element of the dtypes a weight, activation or KV cache may be stored in.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

# Activations that come with a gate projection (SwiGLU / GeGLU: three FFN matrices, not two).
_GATED_ACTS = ("silu", "swiglu", "swish", "geglu")


def dtype_bytes(dtype: str, field: str = "dtype", source: str | None = None) -> float:
    try:
        return DTYPE_BYTES[str(dtype).lower()]
    except KeyError:
        raise RlsimError(f"unknown dtype {dtype!r}", source=source, field=field,
                         fix=f"use one of {', '.join(DTYPE_BYTES)}") from None


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
    # MLA (kv_lora_rank == 0: standard multi-head / grouped-query attention)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    # Details that move parameter counts by well under 1% but keep them exact.
    gated_ffn: bool = True          # SwiGLU: 3 FFN matrices; GELU MLP (GPT): 2
    qkv_bias: bool = False          # Qwen2 / GPT
    mlp_bias: bool = False          # GPT
    qk_norm: bool = False           # Qwen3
    layernorm: bool = False         # LayerNorm (weight + bias) instead of RMSNorm (weight)
    max_position_embeddings: int = 0  # learned absolute positions (GPT); 0 with RoPE
    source: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        src = self.source or self.name
        positive = ["num_layers", "hidden", "num_heads", "num_kv_heads", "vocab"]
        if not self.is_mla:
            positive.append("head_dim")
        if not self.is_moe or self.first_k_dense > 0:
            positive.append("ffn_hidden")
        for name in positive:
            if not getattr(self, name) > 0:
                raise RlsimError(f"{name} must be > 0, got {getattr(self, name)}", source=src, field=name)
        if self.is_moe:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise RlsimError(f"experts per token must be in 1..{self.num_experts}, got "
                                 f"{self.experts_per_token}", source=src, field="num_experts_per_tok")
            if self.moe_ffn_hidden <= 0:
                raise RlsimError("an MoE model needs the expert FFN width", source=src,
                                 field="moe_intermediate_size", fix="set moe_intermediate_size")
            if not 0 <= self.first_k_dense < self.num_layers:
                raise RlsimError(f"first_k_dense_replace must be in 0..{self.num_layers - 1}", source=src,
                                 field="first_k_dense_replace")
        if self.is_mla and (self.qk_nope_dim + self.qk_rope_dim <= 0 or self.v_head_dim <= 0):
            raise RlsimError("MLA needs qk_nope_head_dim + qk_rope_head_dim > 0 and v_head_dim > 0",
                             source=src, field="v_head_dim")
        if not self.is_mla and self.num_heads % self.num_kv_heads:
            raise RlsimError(f"{self.num_heads} attention heads are not a multiple of "
                             f"{self.num_kv_heads} KV heads", source=src, field="num_key_value_heads")

    # ---- shape -------------------------------------------------------------------------------
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
        return self.num_layers - self.first_k_dense if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

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
        params = h * nh * d + 2 * h * kvh * d + nh * d * h
        if self.qkv_bias:
            params += nh * d + 2 * kvh * d
        if self.mlp_bias:  # GPT also biases the output projection
            params += h
        if self.qk_norm:
            params += 2 * d
        return params

    def _ffn_params(self, width: int) -> int:
        params = (3 if self.gated_ffn else 2) * self.hidden * width
        if self.mlp_bias:
            params += width + self.hidden
        return params

    @cached_property
    def dense_ffn_params(self) -> int:
        return self._ffn_params(self.ffn_hidden)

    @cached_property
    def expert_params(self) -> int:
        """One routed (or shared) expert."""
        return self._ffn_params(self.moe_ffn_hidden) if self.is_moe else 0

    @cached_property
    def router_params(self) -> int:
        return self.hidden * self.num_experts

    @cached_property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden * (2 if self.layernorm else 1)

    @cached_property
    def params_embedding(self) -> int:
        """Input tables (token and learned position embeddings): looked up, not multiplied."""
        return self.vocab * self.hidden + self.max_position_embeddings * self.hidden

    @cached_property
    def params_lm_head(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def _params(self, experts: int) -> int:
        per_layer = self.attention_params + self.norm_params_per_layer
        moe = (experts + self.num_shared_experts) * self.expert_params + self.router_params
        final_norm = self.hidden * (2 if self.layernorm else 1)
        return (self.num_layers * per_layer + self.num_dense_layers * self.dense_ffn_params
                + self.num_moe_layers * moe + self.params_embedding + self.params_lm_head + final_norm)

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
        head = self.vocab * self.hidden if self.tied_embeddings else 0
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
        return 2.0 * self.num_layers * self.num_heads * per_head

    def forward_flops_per_token(self, context_len: float, *, absorb_mla: bool = False) -> float:
        """2 N + 4 L H d s_context (formulas.md): prefill, reference, reward, old-logprob, decode."""
        return 2.0 * self.params_compute + self.attention_flops_per_context_token(absorb_mla=absorb_mla) * context_len

    def decode_flops_per_token(self, context_len: float, *, absorb_mla: bool = True) -> float:
        """One generated token attending to context_len tokens (MLA decode uses absorbed kernels)."""
        return self.forward_flops_per_token(context_len, absorb_mla=absorb_mla)

    def train_flops_per_token(self, seq_len: float) -> float:
        """6 N + 12 L H d s (PaLM appendix B; formulas.md), without activation recomputation."""
        return 6.0 * self.params_compute + 3.0 * self.attention_flops_per_context_token() * seq_len

    # ---- bytes ---------------------------------------------------------------------------------
    def weight_bytes(self, bytes_per_param: float = 2) -> float:
        return self.params_total * bytes_per_param

    def kv_elems_per_token(self) -> int:
        """Cached elements per token over all layers: 2 L kv_heads d (MLA: L (kv_lora + rope))."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_dim)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, bytes_per_elem: float = 2) -> float:
        return self.kv_elems_per_token() * bytes_per_elem

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


def spec_from_config(cfg: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    """A Hugging Face config.json mapping (llama / qwen2 / qwen3 / *_moe / deepseek_v3 / gpt2 keys)."""
    model_type = str(cfg.get("model_type", "")).lower()
    hidden = _int(cfg, source, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, source, "num_attention_heads", "n_head")
    kv_lora = _int(cfg, source, "kv_lora_rank", default=0)
    experts = _int(cfg, source, "num_experts", "n_routed_experts", "num_local_experts", default=0)
    moe_ffn = _int(cfg, source, "moe_intermediate_size", default=0)
    shared = _int(cfg, source, "n_shared_experts", default=0)
    if not shared and cfg.get("shared_expert_intermediate_size") and moe_ffn:  # qwen2_moe style
        shared = round(_int(cfg, source, "shared_expert_intermediate_size") / moe_ffn)
    act = str(_first(cfg, "hidden_act", "activation_function", default="silu")).lower()
    gpt_style = model_type in ("gpt", "gpt2")
    positions = 0
    if gpt_style or cfg.get("position_embedding_type") == "absolute":
        positions = _int(cfg, source, "max_position_embeddings", "n_positions", default=0)
    ffn = _int(cfg, source, "intermediate_size", "n_inner", "ffn_dim", default=0) or (4 * hidden if gpt_style else 0)
    if experts and not _first(cfg, "first_k_dense_replace") and not ffn:
        ffn = moe_ffn  # all-MoE models may omit the dense width; it is unused then
    head_dim = _int(cfg, source, "head_dim", default=hidden // heads if heads else 0)
    try:
        return ModelSpec(
            name=name, source=source,
            num_layers=_int(cfg, source, "num_hidden_layers", "n_layer", "num_layers"),
            hidden=hidden, ffn_hidden=ffn, num_heads=heads,
            num_kv_heads=_int(cfg, source, "num_key_value_heads", default=heads),
            head_dim=head_dim if not kv_lora else _int(cfg, source, "v_head_dim", default=head_dim),
            vocab=_int(cfg, source, "vocab_size"),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", gpt_style)),
            num_experts=experts,
            experts_per_token=_int(cfg, source, "num_experts_per_tok", "top_k", default=0) if experts else 0,
            num_shared_experts=shared if experts else 0,
            moe_ffn_hidden=moe_ffn if experts else 0,
            first_k_dense=_int(cfg, source, "first_k_dense_replace", default=0) if experts else 0,
            q_lora_rank=_int(cfg, source, "q_lora_rank", default=0) if kv_lora else 0,
            kv_lora_rank=kv_lora,
            qk_rope_dim=_int(cfg, source, "qk_rope_head_dim", default=0) if kv_lora else 0,
            qk_nope_dim=_int(cfg, source, "qk_nope_head_dim", default=0) if kv_lora else 0,
            v_head_dim=_int(cfg, source, "v_head_dim", default=0) if kv_lora else 0,
            gated_ffn=act in _GATED_ACTS,
            qkv_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe") or gpt_style)),
            mlp_bias=bool(cfg.get("mlp_bias", gpt_style)),
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
            layernorm=cfg.get("norm_type", "layernorm" if gpt_style else "rmsnorm") == "layernorm",
            max_position_embeddings=positions,
        )
    except RlsimError as exc:
        if exc.source:
            raise
        raise RlsimError(str(exc), source=source) from None


def load_model(spec: str | Path | Mapping[str, Any]) -> ModelSpec:
    """A preset name ('qwen2.5-7b'), a path to a config.json, or a mapping.

    A mapping is a config.json-style dict; with `preset: NAME` its other keys override that preset
    (e.g. `{preset: qwen2.5-7b, num_hidden_layers: 4}`)."""
    if isinstance(spec, Mapping):
        cfg = dict(spec)
        source = "<model mapping>"
        base = cfg.pop("preset", None)
        name = str(cfg.pop("name", base or "custom"))
        if base is not None:
            cfg = {**_preset_config(str(base), source), **cfg}
        return spec_from_config(cfg, name, source)
    text = str(spec).strip()
    key = text.lower()
    if key in PRESETS:
        return spec_from_config(PRESETS[key], key, f"model preset {key}")
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
        except OSError as exc:
            raise RlsimError(f"cannot read model config: {exc.strerror}", source=str(path), field="model",
                             fix="give a preset name or the path of a Hugging Face config.json") from None
        except UnicodeDecodeError as exc:
            raise RlsimError(f"not UTF-8 text (byte {exc.start})", source=str(path), field="model",
                             fix="save the config.json as UTF-8") from None
        except json.JSONDecodeError as exc:
            raise RlsimError(f"not valid JSON: {exc}", source=str(path)) from None
        except (ValueError, RecursionError) as exc:
            raise RlsimError(f"a value cannot be read: {exc}", source=str(path), field="model",
                             fix="give finite numbers of a sensible size") from None
        if not isinstance(cfg, dict):
            raise RlsimError("expected a JSON object", source=str(path))
        return spec_from_config(cfg, path.parent.name or path.stem, str(path))
    return _raise_unknown(text)


def _no_constant(name: str) -> Any:
    """json.loads hook: NaN / Infinity are not model dimensions."""
    raise ValueError(f"{name} is not a number a model config can use")


def _preset_config(name: str, source: str) -> dict[str, Any]:
    cfg = PRESETS.get(name.strip().lower())
    if cfg is None:
        _raise_unknown(name, source)
    return dict(cfg)


def _raise_unknown(name: str, source: str | None = None) -> Any:
    raise RlsimError(f"unknown model {name!r}", source=source, field="model",
                     fix=f"use one of: {', '.join(model_names())}, or a path to a config.json")
