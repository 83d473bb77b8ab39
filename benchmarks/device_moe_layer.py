"""A V6 MoE trainer's layer on one GPU: forward and backward of one Qwen3-30B-A3B layer as one GPU of
its EP 8 trainer runs it, GPU time by kernel kind, beside rlsim's compute for the same layer (the M1
check of docs/validation.md for an MoE layer: no MoE training rate is published). A prepared device
check: one run, about a minute.

    python benchmarks/device_moe_layer.py --device cuda [--json] [--catalog h200]
    python benchmarks/device_moe_layer.py --device cpu --smoke     # the script itself, on a CPU

The layer is rlsim's model preset (hidden 2048, 32 query / 4 KV heads of 128 with QK RMSNorm, 128
experts of 768 gated, top 8, no shared expert) in plain torch, bf16: RMSNorm, fused QKV, the per-head
Q / K norms, causal scaled-dot-product attention (grouped-query), the output projection, RMSNorm,
the router (fp32 softmax, top 8, renormalised), then the experts a GPU of an EP 8 group holds (16
of 128) fed the rows balanced routing sends it: each of its sequence's tokens x 8 copies, as all
eight GPUs' tokens x 8 x 16 / 128 (the all-to-alls themselves are not on one GPU). The rows are
sorted by expert, split evenly over the 16 local experts (rlsim's balanced routing), run through
the gate/up and down products, weighted and summed back. Experts two ways: `grouped`, one
torch._grouped_mm per product (Megatron-Core's --moe-grouped-gemm, Transformer Engine's
GroupedLinear), and `sequential`, one GEMM per expert (Megatron-Core's SequentialMLP). No rotary
embedding (a few element-wise kernels). `--layers` layers are stacked and timed together.

rlsim's side: train_compute.layer_times of the preset's MoE layer on the catalog device (tp 1, ep
8, one 4096-token micro-batch), forward + backward, and its GEMMs alone (gemm_times), the figures
the V6 rows' trainers are made of. It asserts nothing.
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
from simulator.llm.train_compute import gemm_times, layer_times
from simulator.llm.training import TrainParams, rates_for

MODEL, EP, SEQ = "qwen3-30b-a3b", 8, 4096


def rlsim_layer(catalog: str, model_name: str = MODEL, ep: int = EP, seq: int = SEQ) -> dict[str, float]:
    """rlsim's forward + backward of one MoE layer on one device of the EP group, one micro-batch of
    one `seq`-token sequence: the layer, and its GEMMs alone."""
    model, params = load_model(model_name), TrainParams()
    layer = next(shape for shape in layer_shapes(model) if shape.moe)
    rates = rates_for(get_device(catalog), params)
    tokens, sq = np.array([float(seq)]), np.array([float(seq) ** 2])
    times = layer_times(layer, int(model.hidden), int(model.ffn_hidden), bool(model.gated_ffn), tokens, sq,
                        tp=1, sp=False, ep=ep, rates=rates, params=params.compute)
    gemms = gemm_times(layer, tokens, tp=1, ep=ep, rates=rates, params=params.compute)
    expert = {g.name for g in layer.gemms if g.expert}
    return {"layer_s": float(times.fwd_s[0] + times.bwd_s[0]), "forward_s": float(times.fwd_s[0]),
            "gemm_s": float(sum(sum(part[0] for part in parts) for parts in gemms.values())),
            "expert_gemm_s": float(sum(sum(part[0] for part in gemms[name]) for name in expert))}


def build(torch, dims: dict[str, int], experts_local: int, grouped: bool, device: str, dtype):
    """One MoE layer (a torch.nn.Module) whose experts are the `experts_local` an EP group's GPU holds."""
    nn, functional = torch.nn, torch.nn.functional
    hidden, heads, kv, head_dim, ffn, top_k = (dims[k] for k in ("hidden", "heads", "kv", "head_dim", "ffn", "top_k"))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
            self.q_norm, self.k_norm = nn.RMSNorm(head_dim), nn.RMSNorm(head_dim)
            self.qkv = nn.Linear(hidden, (heads + 2 * kv) * head_dim, bias=False)
            self.proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.router = nn.Linear(hidden, dims["experts"], bias=False)
            # (E, N, K) transposed to (E, K, N): the operand layout torch._grouped_mm takes
            self.w13 = nn.Parameter(torch.randn(experts_local, 2 * ffn, hidden) / hidden ** 0.5)
            self.w2 = nn.Parameter(torch.randn(experts_local, hidden, ffn) / ffn ** 0.5)

        def experts(self, rows, counts):
            if grouped:
                offsets = torch.cumsum(counts, 0).to(torch.int32)
                gate, up = torch._grouped_mm(rows, self.w13.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
                return torch._grouped_mm(functional.silu(gate) * up, self.w2.transpose(-2, -1), offs=offsets)
            outs, start = [], 0
            for expert, count in enumerate(counts.tolist()):
                gate, up = (rows[start:start + count] @ self.w13[expert].t()).chunk(2, dim=-1)
                outs.append((functional.silu(gate) * up) @ self.w2[expert].t())
                start += count
            return torch.cat(outs)

        def forward(self, x):
            tokens = x.shape[0]
            q, k, v = self.qkv(self.norm1(x)).split([heads * head_dim, kv * head_dim, kv * head_dim], dim=-1)
            q = self.q_norm(q.view(tokens, heads, head_dim)).transpose(0, 1)[None]
            k = self.k_norm(k.view(tokens, kv, head_dim)).transpose(0, 1)[None]
            v = v.view(tokens, kv, head_dim).transpose(0, 1)[None]
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.proj(attn[0].transpose(0, 1).reshape(tokens, heads * head_dim))
            h = self.norm2(x)
            weights, ids = torch.topk(torch.softmax(self.router(h).float(), dim=-1), top_k, dim=-1)
            weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
            # balanced routing: the routed copies sorted by expert, split evenly over the local experts
            order = torch.argsort(ids.flatten(), stable=True)
            counts = torch.full((experts_local,), tokens * top_k // experts_local, dtype=torch.int64, device=x.device)
            out = self.experts(h.index_select(0, order // top_k), counts)
            routed = torch.empty_like(out).index_copy(0, order, out).view(tokens, top_k, hidden)
            return x + (routed * weights[..., None]).sum(1)

    with torch.device(device):
        return Layer().to(dtype=dtype)


def measure(torch, dims: dict[str, int], experts_local: int, grouped: bool, layers: int, seq: int, device: str,
            repeats: int) -> dict:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    stack = torch.nn.Sequential(*(build(torch, dims, experts_local, grouped, device, dtype) for _ in range(layers)))
    x = torch.randn(seq, dims["hidden"], device=device, dtype=dtype, generator=gen, requires_grad=True)
    grad = torch.randn(seq, dims["hidden"], device=device, dtype=dtype, generator=gen)

    def step() -> None:
        stack(x).backward(grad)

    seconds = mean_call_s(torch, device, step, repeats) / layers
    by_kind: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    names: dict[str, float] = {}
    for name, elapsed in kernel_events(torch, device, step):
        by_kind[kind_of(name)] += elapsed / layers
        names[name] = names.get(name, 0.0) + elapsed / layers
    return {"experts": "grouped" if grouped else "sequential", "layer_s": seconds, "kernel_s_by_kind": by_kind,
            "top_kernels_s": dict(sorted(names.items(), key=lambda kv: -kv[1])[:12])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--catalog", default="h200", help="catalog device for rlsim's time")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="a toy layer (the script on a CPU)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    model = load_model(MODEL)
    dims = {"hidden": int(model.hidden), "heads": int(model.num_heads), "kv": int(model.num_kv_heads),
            "head_dim": int(model.head_dim), "ffn": int(model.moe_ffn_hidden), "experts": int(model.num_experts),
            "top_k": int(model.experts_per_token)}
    seq, experts_local = SEQ, dims["experts"] // EP
    if args.smoke:
        dims, seq, experts_local = {**dims, "hidden": 64, "heads": 4, "kv": 2, "head_dim": 16, "ffn": 32}, 128, 4
    ways = (False,) if args.device == "cpu" else (True, False)   # grouped GEMMs need a CUDA device
    rows = []
    for grouped in ways:
        try:
            rows.append(measure(torch, dims, experts_local, grouped, 1 if args.smoke else args.layers, seq,
                                args.device, 1 if args.smoke else args.repeats))
        except (RuntimeError, NotImplementedError) as exc:   # this torch has no grouped GEMM for it
            rows.append({"experts": "grouped" if grouped else "sequential", "error": str(exc)[:300]})
    doc = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "model": MODEL, "ep": EP, "seq": seq, "experts_local": experts_local, "dims": dims, "measured": rows,
           "rlsim": rlsim_layer(args.catalog)}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    rl = doc["rlsim"]
    print(f"{doc['device']}: {MODEL} layer, EP {EP} ({experts_local} local experts), {seq} tokens; rlsim on "
          f"{args.catalog}: {rl['layer_s'] * 1e3:.2f} ms (GEMMs {rl['gemm_s'] * 1e3:.2f}, experts {rl['expert_gemm_s'] * 1e3:.2f})")
    for row in rows:
        if "error" in row:
            print(f"  {row['experts']}: {row['error']}")
            continue
        kinds = ", ".join(f"{kind} {s * 1e3:.2f}" for kind, s in row["kernel_s_by_kind"].items())
        print(f"  {row['experts']}: {row['layer_s'] * 1e3:.2f} ms a layer forward + backward; GPU ms by kind: {kinds}")


if __name__ == "__main__":
    main()
