"""What autograd keeps for the backward of one Hugging Face transformers decoder layer, by tensor group:
bytes per token per layer, counted with torch's saved_tensors_hooks on a CPU (no GPU needed; about
ten seconds). The check of the hf-transformers stack's activation counts (params.py HF_SAVED_*,
llm/memory.py activation_bytes_per_token; docs/cost-models-training.md).

    python benchmarks/hf_saved_activations.py [--model qwen2.5-7b] [--tokens 256] [--json]

The layer is transformers 5.25.0's Qwen2DecoderLayer / LlamaDecoderLayer (models/qwen2/modeling_qwen2.py)
in plain torch, bf16, op for op as benchmarks/device_hf_layer.py writes it: Qwen2RMSNorm (cast to
fp32, pow, mean, rsqrt scale, cast back, weight), q / k / v projections (with biases where the model
has them), apply_rotary_pos_emb, scaled-dot-product attention (on a CPU torch's flash kernel, which
keeps q, k, v, the output and the log-sum-exp, as flash-attention does on a GPU), the output
projection, the residual add, Qwen2RMSNorm, act_fn(gate_proj(x)) * up_proj(x), down_proj, the residual
add. Each saved tensor is counted once (by its storage: views of one tensor share it), in the group
whose op saved it first; parameters and the rotary tables (shared by every layer) are not activations
and are left out. The layer's input is the previous layer's output (it requires grad).
"""
from __future__ import annotations

import argparse
import contextlib
import json

from simulator.llm.architecture import load_model

GROUPS = ("input_norm", "qkv_proj", "rope", "attention", "o_proj_residual", "post_norm", "ffn_up_act", "down_residual")


def saved_bytes_per_token(model_name: str, tokens: int) -> dict[str, object]:
    """{group: bytes per token} of one decoder layer of `model_name` over one `tokens`-token sequence."""
    import torch
    functional = torch.nn.functional
    model = load_model(model_name)
    hidden, heads, kv = int(model.hidden), int(model.num_heads), int(model.num_kv_heads)
    head_dim, ffn = int(model.head_dim), int(model.ffn_hidden)
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(0)

    def weight(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(dtype).requires_grad_(True)

    qkv_bias = bool(getattr(model, "qkv_bias", False))
    w = {"q": weight(heads * head_dim, hidden), "k": weight(kv * head_dim, hidden), "v": weight(kv * head_dim, hidden),
         "o": weight(hidden, heads * head_dim), "gate": weight(ffn, hidden), "up": weight(ffn, hidden),
         "down": weight(hidden, ffn), "norm1": torch.ones(hidden, dtype=dtype, requires_grad=True),
         "norm2": torch.ones(hidden, dtype=dtype, requires_grad=True)}
    bias = {n: weight(w[n].shape[0]) if qkv_bias else None for n in ("q", "k", "v")}
    inv = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]
    excluded = {t.untyped_storage().data_ptr() for t in (*w.values(), *(b for b in bias.values() if b is not None),
                                                          cos, sin)}
    counted: dict[int, str] = {}
    by_group = {g: 0 for g in GROUPS}
    detail: dict[str, list[str]] = {g: [] for g in GROUPS}
    current = ["none"]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in excluded and ptr not in counted:
            counted[ptr] = current[0]
            by_group[current[0]] += storage.nbytes()
            detail[current[0]].append(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}")
        return t

    @contextlib.contextmanager
    def group(name: str):
        current[0] = name
        yield

    def rms_norm(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:   # Qwen2RMSNorm / LlamaRMSNorm
        input_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)
        return scale * x.to(input_dtype)

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    x = torch.randn(1, tokens, hidden, generator=gen).to(dtype).requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with group("input_norm"):
            residual, h = x, rms_norm(x, w["norm1"])
        with group("qkv_proj"):
            q = functional.linear(h, w["q"], bias["q"]).view(1, tokens, heads, head_dim).transpose(1, 2)
            k = functional.linear(h, w["k"], bias["k"]).view(1, tokens, kv, head_dim).transpose(1, 2)
            v = functional.linear(h, w["v"], bias["v"]).view(1, tokens, kv, head_dim).transpose(1, 2)
        with group("rope"):
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        with group("attention"):
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv)
        with group("o_proj_residual"):
            h = residual + functional.linear(attn.transpose(1, 2).reshape(1, tokens, heads * head_dim), w["o"])
        with group("post_norm"):
            residual, h = h, rms_norm(h, w["norm2"])
        with group("ffn_up_act"):
            inner = functional.silu(functional.linear(h, w["gate"])) * functional.linear(h, w["up"])
        with group("down_residual"):
            out = residual + functional.linear(inner, w["down"])
    out.float().sum().backward()   # the graph is whole: every saved tensor was used
    per_token = {g: by_group[g] / tokens for g in GROUPS}
    return {"model": model_name, "tokens": tokens, "hidden": hidden, "ffn_hidden": ffn,
            "bytes_per_token_by_group": per_token, "bytes_per_token": sum(per_token.values()),
            "bytes_per_hidden_element": sum(per_token.values()) / hidden, "saved": detail}


def rlsim_bytes_per_token(model_name: str) -> dict[str, float]:
    """rlsim's stored activation bytes per token of the model's first layer under each stack (tp 1,
    no recompute, flash attention)."""
    from simulator.llm.layer_costs import layer_shapes
    from simulator.llm.memory import activation_bytes_per_token
    from simulator.params import TRAIN_SOFTWARE
    model = load_model(model_name)
    layer = layer_shapes(model)[0]
    return {name: activation_bytes_per_token(layer, int(model.hidden), int(model.ffn_hidden), bool(model.gated_ffn),
                                             tp=1, sp=False, recompute="none", flash=True, context_len=1.0,
                                             params=TRAIN_SOFTWARE[name].params.memory)
            for name in ("megatron-core", "hf-transformers")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-7b")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = saved_bytes_per_token(args.model, args.tokens)
    result["rlsim_bytes_per_token"] = rlsim_bytes_per_token(args.model)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.model}: one decoder layer, {args.tokens} tokens, bf16 (hidden {result['hidden']}, "
          f"ffn {result['ffn_hidden']})")
    for name, nbytes in result["bytes_per_token_by_group"].items():
        print(f"  {name:16s} {nbytes:10,.0f} B/token   {', '.join(result['saved'][name])}")
    print(f"  {'total':16s} {result['bytes_per_token']:10,.0f} B/token ({result['bytes_per_hidden_element']:.2f} "
          "B per hidden element)")
    for name, nbytes in result["rlsim_bytes_per_token"].items():
        print(f"  rlsim {name:18s} {nbytes:10,.0f} B/token")


if __name__ == "__main__":
    main()
