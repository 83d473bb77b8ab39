"""Built-in model presets as Hugging-Face-style ``config.json`` dicts.

Presets and user ``config.json`` files go through the one loader in ``architecture.py``, so a
preset is exactly what the model's published config says (fields the loader reads; see models.md
in the project reference for the mapping). Sources:
- Qwen2.5 / Qwen3 / Llama-3.1 / DeepSeek-V3: the models' published config.json on Hugging Face
  (figures collected in reference/models.md).
- The small models framework examples train (verl's quickstart Qwen2.5-0.5B, NeMo RL's default
  Qwen2.5-1.5B in grpo_math_1B.yaml; Qwen2.5-0.5B / 1.5B / 3B / 14B, Qwen3-0.6B / 1.7B / 4B / 14B,
  Llama-3.2-1B / 3B): their published config.json on Hugging Face (Qwen/<name>,
  meta-llama/Llama-3.2-<n>B); the sizes tied_word_embeddings as published (all but the 14B ones).
- Pangu Ultra MoE: arXiv 2505.04519 (61 layers, hidden 7680, MLA as DeepSeek-V3, 256 routed + 1
  shared expert, top-8, first 3 dense); vocab ~153K (models.md) — 153,376 as in Pangu Ultra.
- Nemotron-H (hybrid Mamba-2 / attention): arXiv 2504.03624 Table 1 (layers, model dim, FFN dim,
  Q / KV heads, state dim, Mamba groups / heads / head dim; 8B: 24 Mamba-2, 4 attention, 24 FFN
  blocks; 56B: 54 / 10 / 54) and the HF NemotronHConfig key names (nvidia/Nemotron-H-8B-Base-8K
  config.json: hybrid_override_pattern, squared-ReLU FFN `relu2`, conv kernel 4, vocab 131072,
  untied embeddings). The 8B pattern is the published config's; the 56B one follows the same rule
  (an attention block after every fifth Mamba block from the fourth), an assumption: the order only
  moves pipeline-stage boundaries, not any count.
- Megatron GPT: arXiv 2104.04473 Table 1 (vocab 51200, sequence 2048, FFN 4h, MHA, learned
  positions, tied embeddings, LayerNorm and biases as in GPT-2).
"""
from __future__ import annotations

from typing import Any

_QWEN2 = {"model_type": "qwen2", "hidden_act": "silu", "tie_word_embeddings": False, "head_dim": 128}
_QWEN3 = {"model_type": "qwen3", "hidden_act": "silu", "tie_word_embeddings": False, "head_dim": 128,
          "vocab_size": 151936}
_LLAMA = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False, "head_dim": 128,
          "vocab_size": 128256}
# DeepSeek-V3 config.json (deepseek-ai/DeepSeek-V3): MLA and the MoE layout.
_DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_act": "silu", "tie_word_embeddings": False,
    "num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
    "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
}
# Its group-limited router (the same config.json): 8 groups of 32 experts, a token's top-8 inside its top-4
# groups (arXiv 2412.19437 sec. 2.1.2: at most 4 nodes a token).
_DEEPSEEK_V3_ROUTER = {"n_group": 8, "topk_group": 4, "topk_method": "noaux_tc"}

_QWEN2_TIED = {**_QWEN2, "tie_word_embeddings": True, "vocab_size": 151936}
_QWEN3_TIED = {**_QWEN3, "tie_word_embeddings": True}
_LLAMA32 = {**_LLAMA, "tie_word_embeddings": True}

_QWEN25_7B = {**_QWEN2, "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064}


def _nemotron_h_pattern(mamba_blocks: int, attention_blocks: int) -> str:
    """Mamba + FFN pairs with an attention block after every fifth Mamba block from the fourth
    (the published Nemotron-H-8B pattern: 24 pairs, attention after Mamba blocks 4, 9, 14, 19)."""
    after = {3 + 5 * k for k in range(attention_blocks)}
    return "".join("M*-" if i in after else "M-" for i in range(mamba_blocks))


def _nemotron_h(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, state: int,
                mamba_heads: int, mamba_blocks: int, attention_blocks: int) -> dict[str, Any]:
    pattern = _nemotron_h_pattern(mamba_blocks, attention_blocks)
    assert len(pattern) == layers, (len(pattern), layers)
    return {"model_type": "nemotron_h", "mlp_hidden_act": "relu2", "tie_word_embeddings": False,
            "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": ffn,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 128,
            "vocab_size": 131072, "hybrid_override_pattern": pattern, "mamba_num_heads": mamba_heads,
            "mamba_head_dim": 64, "ssm_state_size": state, "n_groups": 8, "conv_kernel": 4}


def _gpt(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return {"model_type": "gpt", "hidden_act": "gelu", "tie_word_embeddings": True,
            "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": 4 * hidden,
            "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": hidden // heads,
            "vocab_size": 51200, "max_position_embeddings": 2048,
            "position_embedding_type": "absolute", "norm_type": "layernorm",
            "attention_bias": True, "mlp_bias": True}


def _gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    return {"model_type": "gpt_oss", "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": True,
            "num_hidden_layers": layers, "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
            "num_attention_heads": 64, "num_key_value_heads": 8, "num_local_experts": experts,
            "num_experts_per_tok": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
            "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * (layers // 2)}


def _gemma3(layers: int, hidden: int, ffn: int, heads: int, kv: int, head_dim: int, window: int,
            vocab: int = 262208) -> dict[str, Any]:
    """Gemma 3's language model (google/gemma-3-*-it config.json text_config): GeGLU, tied
    embeddings, sliding windows on five layers of six."""
    return {"model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
            "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": ffn, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": head_dim, "vocab_size": vocab, "max_position_embeddings": 131072,
            "sliding_window": window, "sliding_window_pattern": 6}


PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-7b": _QWEN25_7B,
    "qwen2.5-math-7b": dict(_QWEN25_7B),  # models.md: the Qwen2.5-7B architecture
    "qwen2.5-32b": {**_QWEN2, "num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 27648,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    "qwen2.5-72b": {**_QWEN2, "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 29568,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064},
    "qwen2.5-0.5b": {**_QWEN2_TIED, "num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64},
    "qwen2.5-1.5b": {**_QWEN2_TIED, "num_hidden_layers": 28, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_attention_heads": 12, "num_key_value_heads": 2},
    "qwen2.5-3b": {**_QWEN2_TIED, "num_hidden_layers": 36, "hidden_size": 2048, "intermediate_size": 11008,
                   "num_attention_heads": 16, "num_key_value_heads": 2},
    "qwen2.5-14b": {**_QWEN2, "num_hidden_layers": 48, "hidden_size": 5120, "intermediate_size": 13824,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    "qwen3-0.6b": {**_QWEN3_TIED, "num_hidden_layers": 28, "hidden_size": 1024, "intermediate_size": 3072,
                   "num_attention_heads": 16, "num_key_value_heads": 8},
    "qwen3-1.7b": {**_QWEN3_TIED, "num_hidden_layers": 28, "hidden_size": 2048, "intermediate_size": 6144,
                   "num_attention_heads": 16, "num_key_value_heads": 8},
    "qwen3-4b": {**_QWEN3_TIED, "num_hidden_layers": 36, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_attention_heads": 32, "num_key_value_heads": 8},
    "qwen3-14b": {**_QWEN3, "num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 17408,
                  "num_attention_heads": 40, "num_key_value_heads": 8},
    "qwen3-8b": {**_QWEN3, "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_attention_heads": 32, "num_key_value_heads": 8},
    "qwen3-32b": {**_QWEN3, "num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 25600,
                  "num_attention_heads": 64, "num_key_value_heads": 8},
    "qwen3-30b-a3b": {**_QWEN3, "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8},
    "qwen3-235b-a22b": {**_QWEN3, "model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
                        "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_attention_heads": 64,
                        "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8},
    "llama3.1-8b": {**_LLAMA, "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_key_value_heads": 8},
    "llama3.2-1b": {**_LLAMA32, "num_hidden_layers": 16, "hidden_size": 2048, "intermediate_size": 8192,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64},
    "llama3.2-3b": {**_LLAMA32, "num_hidden_layers": 28, "hidden_size": 3072, "intermediate_size": 8192,
                    "num_attention_heads": 24, "num_key_value_heads": 8},
    "llama3.1-70b": {**_LLAMA, "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672,
                     "num_attention_heads": 64, "num_key_value_heads": 8},
    "llama3.1-405b": {**_LLAMA, "num_hidden_layers": 126, "hidden_size": 16384, "intermediate_size": 53248,
                      "num_attention_heads": 128, "num_key_value_heads": 8},
    "deepseek-v3": {**_DEEPSEEK_V3, **_DEEPSEEK_V3_ROUTER},
    "deepseek-r1": {**_DEEPSEEK_V3, **_DEEPSEEK_V3_ROUTER},  # same architecture as V3 (deepseek-ai/DeepSeek-R1 config.json)
    # (no MTP module: the seed articles and models.md give none, so method mtp is refused on it)
    "pangu-ultra-moe": {**_DEEPSEEK_V3, "model_type": "pangu_ultra_moe", "hidden_size": 7680,
                        "vocab_size": 153376, "num_nextn_predict_layers": 0},
    # Nemotron-H (arXiv 2504.03624 Table 1): hybrid Mamba-2 / attention.
    "nemotron-h-8b": _nemotron_h(52, 4096, 21504, 32, 8, 128, 128, 24, 4),
    "nemotron-h-56b": _nemotron_h(118, 8192, 32768, 64, 8, 256, 256, 54, 10),
    # gpt-oss (openai/gpt-oss-20b, -120b config.json): every layer MoE (intermediate_size is each
    # expert's width), 128-token sliding windows on the even layers, biased attention projections.
    "gpt-oss-20b": _gpt_oss(24, 32),
    "gpt-oss-120b": _gpt_oss(36, 128),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: three Gated DeltaNet layers to one gated attention
    # layer, 512 experts (10 routed and a shared one) on every layer
    "qwen3-next-80b-a3b": {**_QWEN3, "model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048,
                           "intermediate_size": 5120, "moe_intermediate_size": 512,
                           "shared_expert_intermediate_size": 512, "num_attention_heads": 16, "num_key_value_heads": 2,
                           "head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10, "full_attention_interval": 4,
                           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4},
    "gemma-3-1b": _gemma3(26, 1152, 6912, 4, 1, 256, 512, vocab=262144),
    "gemma-3-4b": _gemma3(34, 2560, 10240, 8, 4, 256, 1024),
    "gemma-3-12b": _gemma3(48, 3840, 15360, 16, 8, 256, 1024),
    "gemma-3-27b": _gemma3(62, 5376, 21504, 32, 16, 128, 1024),
    # Megatron GPT rows of arXiv 2104.04473 Table 1: (layers, hidden, heads).
    "gpt-1.7b": _gpt(24, 2304, 24),
    "gpt-3.6b": _gpt(30, 3072, 32),
    "gpt-7.5b": _gpt(36, 4096, 32),
    "gpt-18.4b": _gpt(40, 6144, 48),
    "gpt-39.1b": _gpt(48, 8192, 64),
    "gpt-76.1b": _gpt(60, 10240, 80),
    "gpt-145.6b": _gpt(80, 12288, 96),
    "gpt-310.1b": _gpt(96, 16384, 128),
    "gpt-529.6b": _gpt(105, 20480, 128),
    "gpt-1008b": _gpt(128, 25600, 160),
}

# Published parameter counts (total, active) in units of 1e9, for the tests and `rlsim presets`.
# models.md; GPT rows: arXiv 2104.04473 Table 1 (rounded to 0.1B there).
PUBLISHED_PARAMS_B: dict[str, tuple[float, float | None]] = {
    "qwen2.5-7b": (7.6, None), "qwen2.5-math-7b": (7.6, None), "qwen2.5-32b": (32.5, None),
    "qwen2.5-72b": (72.7, None), "qwen3-8b": (8.2, None),
    # the model cards' "Number of Parameters" (Qwen3-0.6B: 0.6B, 0.44B without embeddings)
    "qwen2.5-0.5b": (0.49, None), "qwen2.5-1.5b": (1.54, None), "qwen2.5-3b": (3.09, None),
    "qwen2.5-14b": (14.7, None), "qwen3-0.6b": (0.6, None), "qwen3-1.7b": (1.7, None), "qwen3-4b": (4.0, None),
    "qwen3-14b": (14.8, None), "llama3.2-1b": (1.23, None), "llama3.2-3b": (3.21, None), "qwen3-32b": (32.8, None),
    "qwen3-30b-a3b": (30.5, 3.3), "qwen3-235b-a22b": (235.0, 22.0), "llama3.1-8b": (8.0, None),
    "llama3.1-70b": (70.6, None), "llama3.1-405b": (405.0, None), "deepseek-v3": (671.0, 37.0),
    "deepseek-r1": (671.0, 37.0), "pangu-ultra-moe": (718.0, 39.0),
    "nemotron-h-8b": (8.0, None), "nemotron-h-56b": (56.0, None),   # arXiv 2504.03624 (model names)
    # gpt-oss model card (arXiv 2508.10925) table 1; its active counts leave the input embedding out
    "gpt-oss-20b": (20.91, 3.61), "gpt-oss-120b": (116.83, 5.13),
    # Gemma 3 report (arXiv 2503.19786) table 1: embedding + non-embedding parameters of the language
    # model (the 417M vision encoder of 4B / 12B / 27B apart)
    # Qwen3-Next-80B-A3B model card: "80B in total and 3B activated" (rounded; rlsim: 79.7B, 3.25B
    # without the embeddings)
    "qwen3-next-80b-a3b": (80.0, None),
    "gemma-3-1b": (0.302 + 0.698, None), "gemma-3-4b": (0.675 + 3.209, None),
    "gemma-3-12b": (1.012 + 10.759, None), "gemma-3-27b": (1.416 + 25.600, None),
    "gpt-1.7b": (1.7, None), "gpt-3.6b": (3.6, None), "gpt-7.5b": (7.5, None), "gpt-18.4b": (18.4, None),
    "gpt-39.1b": (39.1, None), "gpt-76.1b": (76.1, None), "gpt-145.6b": (145.6, None),
    "gpt-310.1b": (310.1, None), "gpt-529.6b": (529.6, None), "gpt-1008b": (1008.0, None),
}
