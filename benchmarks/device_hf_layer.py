"""A transformers trainer's layer on one GPU: forward and backward of Qwen2.5-7B decoder layers written
as Hugging Face transformers writes them, GPU time by kernel kind, beside rlsim's `hf-transformers`
and `megatron-core` stacks for the same layers (the check of the hf-transformers stack's element-wise
bytes: docs/cost-models-training.md). A prepared device check: one run, about a minute.

    python benchmarks/device_hf_layer.py --device cuda [--json] [--catalog h200]
    python benchmarks/device_hf_layer.py --device cpu --smoke     # the script itself, on a CPU

The layer is transformers 5.25.0's Qwen2DecoderLayer (models/qwen2/modeling_qwen2.py) in plain torch,
bf16, op for op: Qwen2RMSNorm (cast to fp32, pow, mean, rsqrt scale, cast back, weight), q / k / v
projections with biases, apply_rotary_pos_emb (q * cos + rotate_half(q) * sin, the same for k),
scaled-dot-product attention (causal, grouped-query: integrations/sdpa_attention.py use_gqa_in_sdpa
without a mask), the output
projection, the residual add, Qwen2RMSNorm, act_fn(gate_proj(x)) * up_proj(x), down_proj, the
residual add. `--layers` layers of one 4096-token sequence are stacked and timed together, plain and
with the stack under torch.compile (Inductor fuses the element-wise ops, as Liger's kernels do).

rlsim's side: train_compute.layer_times of the preset's layer on the catalog device (tp 1, one
4096-token micro-batch), forward + backward, under each stack, and the element-wise part alone (the
layer less the same layer with no element-wise bytes). It asserts nothing.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from device_decode_graphs import kernel_events, mean_call_s
from device_train_step import kind_of

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.layer_costs import layer_shapes
from simulator.llm.train_compute import layer_times
from simulator.llm.training import rates_for
from simulator.params import TRAIN_SOFTWARE, ComputeParams

MODEL, SEQ, STACKS = "qwen2.5-7b", 4096, ("hf-transformers", "megatron-core")
ELEMENTWISE_FIELDS = ("norm_traffic_bytes_per_hidden", "residual_traffic_bytes_per_hidden",
                      "act_traffic_bytes_per_ffn", "gated_act_traffic_bytes_per_ffn", "rope_traffic_bytes_per_element")


def rlsim_layers(catalog: str, layers: int, model_name: str = MODEL, seq: int = SEQ) -> dict[str, dict[str, float]]:
    """Per stack: rlsim's forward + backward of `layers` dense layers on one device, one micro-batch of
    one `seq`-token sequence, and the element-wise share of it."""
    model = load_model(model_name)
    layer = layer_shapes(model)[0]
    tokens, sq = np.array([float(seq)]), np.array([float(seq) ** 2])
    def seconds(rates, compute: ComputeParams) -> float:
        times = layer_times(layer, int(model.hidden), int(model.ffn_hidden), bool(model.gated_ffn), tokens, sq,
                            tp=1, sp=False, ep=1, rates=rates, params=compute)
        return layers * float(times.fwd_s[0] + times.bwd_s[0])

    out = {}
    for name in STACKS:
        params = TRAIN_SOFTWARE[name].params
        rates = rates_for(get_device(catalog), params)
        whole = seconds(rates, params.compute)
        bare = seconds(rates, params.compute.model_copy(update={field: 0.0 for field in ELEMENTWISE_FIELDS}))
        out[name] = {"layers_s": whole, "elementwise_s": whole - bare}
    return out


def build(torch, dims: dict[str, int], layers: int, device: str, dtype):
    """`layers` Qwen2 decoder layers as transformers writes them (a torch.nn.Module over hidden states)."""
    nn, functional = torch.nn, torch.nn.functional
    hidden, heads, kv, head_dim, ffn = (dims[k] for k in ("hidden", "heads", "kv", "head_dim", "ffn"))

    class RMSNorm(nn.Module):   # Qwen2RMSNorm
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            input_dtype = x.dtype
            x = x.to(torch.float32)
            variance = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(variance + 1e-6)
            return self.weight * x.to(input_dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.q_proj = nn.Linear(hidden, heads * head_dim)
            self.k_proj, self.v_proj = nn.Linear(hidden, kv * head_dim), nn.Linear(hidden, kv * head_dim)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.gate_proj, self.up_proj = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x, cos, sin):
            batch, tokens, _ = x.shape
            residual, x = x, self.input_layernorm(x)
            q = self.q_proj(x).view(batch, tokens, heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(batch, tokens, kv, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(batch, tokens, kv, head_dim).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            # no mask (one causal sequence): transformers' sdpa path runs grouped-query attention itself
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv)
            x = residual + self.o_proj(attn.transpose(1, 2).reshape(batch, tokens, heads * head_dim))
            residual, x = x, self.post_attention_layernorm(x)
            return residual + self.down_proj(functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Stack(nn.ModuleList):
        def forward(self, x, cos, sin):
            for layer in self:
                x = layer(x, cos, sin)
            return x

    with torch.device(device):
        return Stack(Layer() for _ in range(layers)).to(dtype=dtype)


def rotary(torch, seq: int, head_dim: int, device: str, dtype):
    """cos / sin of each position (Qwen2RotaryEmbedding, base 1e6), broadcast over the heads."""
    inv = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]


def measure(torch, stack, dims: dict[str, int], seq: int, device: str, dtype, repeats: int) -> dict[str, object]:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(1, seq, dims["hidden"], device=device, dtype=dtype, generator=gen, requires_grad=True)
    cos, sin = rotary(torch, seq, dims["head_dim"], device, dtype)

    def micro_batch() -> None:
        stack(x, cos, sin).float().pow(2).mean().backward()

    seconds = mean_call_s(torch, device, micro_batch, repeats)
    by_kind: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for name, elapsed in kernel_events(torch, device, micro_batch):
        by_kind[kind_of(name)] += elapsed
    return {"micro_batch_s": seconds, "kernel_s_by_kind": by_kind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--catalog", default="h200", help="rlsim's device for its side (default h200)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a toy layer (the script on a CPU)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    model = load_model(MODEL)
    dims = {"hidden": int(model.hidden), "heads": int(model.num_heads), "kv": int(model.num_kv_heads),
            "head_dim": int(model.head_dim), "ffn": int(model.ffn_hidden)}
    seq, layers = SEQ, args.layers
    if args.smoke:
        dims, seq, layers = {"hidden": 64, "heads": 4, "kv": 2, "head_dim": 16, "ffn": 128}, 128, 1
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    stack = build(torch, dims, layers, args.device, dtype)
    runs = {"plain": measure(torch, stack, dims, seq, args.device, dtype, args.repeats)}
    if args.device == "cuda":   # Inductor's fused element-wise kernels: the Liger-like bound
        runs["compiled"] = measure(torch, torch.compile(stack), dims, seq, args.device, dtype, args.repeats)
    doc = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "model": MODEL, "dims": dims, "seq": seq, "layers": layers, "measured": runs,
           "rlsim": rlsim_layers(args.catalog, layers)}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    for label, run in runs.items():
        kinds = ", ".join(f"{kind} {s * 1e3:.1f}" for kind, s in run["kernel_s_by_kind"].items())
        print(f"{doc['device']} {label}: {run['micro_batch_s'] * 1e3:.1f} ms for {layers} layers; GPU time (ms) {kinds}")
    for name, side in doc["rlsim"].items():
        print(f"rlsim {name} on {args.catalog}: {side['layers_s'] * 1e3:.1f} ms, element-wise {side['elementwise_s'] * 1e3:.1f}")


if __name__ == "__main__":
    main()
