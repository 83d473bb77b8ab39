"""One decode step of a Llama-3.1-8B-shaped model on one GPU, eager against CUDA-graph replay, beside
rlsim's rollout-engine step for the same batch and context: the measurement behind the engine's
launch terms (`workload.inference.cuda_graph_replay_s`, the device's `launch_overhead_s`) and its
decode HBM efficiency. A prepared device check: one run, about a minute, prints figures.

    python benchmarks/device_decode_graphs.py --device cuda [--json] [--catalog h200]
    python benchmarks/device_decode_graphs.py --device cpu --smoke     # the script itself, on a CPU

The model is written in plain torch (bf16 on a GPU): per layer RMSNorm, a fused QKV projection, the
new token's K and V written into a preallocated cache, scaled-dot-product attention over `--kv-len`
positions (grouped-query, 8 KV heads), the output projection, RMSNorm, a fused gate/up projection,
SiLU x up, the down projection and two residual adds; then the final norm, the LM head and a greedy
argmax. No rotary embedding and no sampler beyond argmax (a few element-wise kernels fewer than
vLLM's Llama), and torch's own kernels, not vLLM's fused ones: the launch count per layer is
torch's, counted by the profiler and printed. Weights are random (the clock follows the power drawn).

For each batch: the eager step (the CPU launches every kernel), the replayed CUDA graph (one launch),
the kernels of one step and the sum of their GPU times (torch.profiler), the bytes a step must read
(weights and the KV cache) over the copy bandwidth measured here, and rlsim's prediction on the
catalog device with its defaults: the GPU part of a graph step (roofline + cuda_graph_replay_s; the
engine's scheduler CPU time, step_overhead_s + cpu_per_seq_s, is not in this loop) and the eager
launch floor (launch_overhead_s x rlsim's launches per step). What the figures give: per-kernel
launch cost = eager step / kernels where the eager step is launch-bound (batch 1); the gaps of a
replayed graph = graph step - kernel time; the decode HBM efficiency = bytes / copy bandwidth / graph
step at batch 1. It asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

from simulator.hardware.devices import get_device
from simulator.llm import RolloutLayout
from simulator.llm.architecture import load_model
from simulator.llm.inference import StepCost
from simulator.validation.measured import graph_step_gpu_s


@dataclass(frozen=True)
class Dims:
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    layers: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """Every weight: per layer two norms, QKV, output, gate/up and down; the embedding table, the
        final norm and the untied LM head (Llama-3.1-8B: 8,030,261,248, rlsim's params_total)."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        per_layer = 2 * self.hidden + qkv * self.hidden + self.hidden * self.heads * self.head_dim \
            + 3 * self.ffn * self.hidden
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden

    def bytes_read(self, batch: int, kv_len: int, element_bytes: int) -> float:
        """A decode step streams every weight but the embedding table (gathered, one row a
        sequence) and the final norm, and the whole KV cache."""
        weights = self.params - self.vocab * self.hidden - self.hidden
        kv = 2 * self.layers * batch * self.kv_heads * kv_len * self.head_dim
        return float((weights + kv) * element_bytes)


LLAMA_8B = Dims(hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128_256, layers=32)
SMOKE = Dims(hidden=256, heads=4, kv_heads=2, ffn=704, vocab=2048, layers=2)


class DecodeModel:
    """Weights and a KV cache; `step(tokens)` runs one decode token for every sequence."""

    def __init__(self, torch, dims: Dims, batch: int, kv_len: int, device: str, dtype) -> None:
        self.torch, self.dims, self.kv_len = torch, dims, kv_len
        d, hd = dims.hidden, dims.head_dim

        def weight(rows: int, cols: int):
            return torch.randn(rows, cols, device=device, dtype=dtype) * 0.02

        self.embed = weight(dims.vocab, d)
        self.lm_head = weight(dims.vocab, d)
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        qkv = (dims.heads + 2 * dims.kv_heads) * hd
        self.layers = [{"norm1": torch.ones(d, device=device, dtype=dtype), "qkv": weight(qkv, d),
                        "o": weight(d, dims.heads * hd), "norm2": torch.ones(d, device=device, dtype=dtype),
                        "gate_up": weight(2 * dims.ffn, d), "down": weight(d, dims.ffn)}
                       for _ in range(dims.layers)]
        shape = (batch, dims.kv_heads, kv_len, hd)
        self.cache = [(torch.randn(shape, device=device, dtype=dtype), torch.randn(shape, device=device, dtype=dtype))
                      for _ in range(dims.layers)]

    def step(self, tokens):
        torch, d, hd = self.torch, self.dims, self.dims.head_dim
        functional = torch.nn.functional
        batch = tokens.shape[0]
        x = self.embed[tokens]
        for layer, (k_cache, v_cache) in zip(self.layers, self.cache, strict=True):
            h = functional.rms_norm(x, (d.hidden,), layer["norm1"])
            q, k, v = (h @ layer["qkv"].t()).split([d.heads * hd, d.kv_heads * hd, d.kv_heads * hd], dim=-1)
            k_cache[:, :, -1] = k.view(batch, d.kv_heads, hd)     # the new token's K and V
            v_cache[:, :, -1] = v.view(batch, d.kv_heads, hd)
            attn = functional.scaled_dot_product_attention(q.view(batch, d.heads, 1, hd), k_cache, v_cache,
                                                           enable_gqa=True)
            x = x + attn.reshape(batch, d.heads * hd) @ layer["o"].t()
            h = functional.rms_norm(x, (d.hidden,), layer["norm2"])
            gate, up = (h @ layer["gate_up"].t()).chunk(2, dim=-1)
            x = x + (functional.silu(gate) * up) @ layer["down"].t()
        logits = functional.rms_norm(x, (d.hidden,), self.final_norm) @ self.lm_head.t()
        return logits.argmax(dim=-1)


def sync_device(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def mean_call_s(torch, device: str, run, repeats: int) -> float:
    """Seconds per call of `run`, after three warm-up calls, the device synced around the timed ones."""
    for _ in range(3):
        run()
    sync_device(torch, device)
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    sync_device(torch, device)
    return (time.perf_counter() - start) / repeats


def kernel_events(torch, device: str, run) -> list[tuple[str, float]]:
    """(name, GPU seconds) of every kernel one call of `run` launches (torch.profiler); on a CPU, its
    top-level operators."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        run()
        sync_device(torch, device)
    wanted = torch.autograd.DeviceType.CUDA if device == "cuda" else torch.autograd.DeviceType.CPU
    return [(e.name, e.time_range.elapsed_us() * 1e-6) for e in prof.events()
            if e.device_type == wanted and (device == "cuda" or e.cpu_parent is None)]


def copy_bw(torch, device: str, dtype, nbytes: int) -> float:
    """Device-to-device copy, bytes read + written per second (the streaming ceiling)."""
    src = torch.empty(nbytes // 2, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    seconds = mean_call_s(torch, device, lambda: dst.copy_(src), 10)
    return 2.0 * src.numel() * src.element_size() / seconds


def _rlsim(catalog: str, batch: int, kv_len: int) -> dict[str, float]:
    """rlsim's engine on the catalog device, defaults: GPU part of a graph step, eager launch floor."""
    cost = StepCost(load_model("llama3.1-8b"), get_device(catalog), RolloutLayout())
    c0, _, m0, _, _ = cost.decode_lines(batch, batch * kv_len)
    return {"graph_gpu_s": graph_step_gpu_s(cost, batch, kv_len), "roofline_s": max(c0, m0),
            "eager_launch_floor_s": cost.eager_launch_s}


def measure(torch, dims: Dims, batch: int, kv_len: int, device: str, dtype, repeats: int) -> dict:
    model = DecodeModel(torch, dims, batch, kv_len, device, dtype)
    tokens = torch.randint(0, dims.vocab, (batch,), device=device)
    with torch.inference_mode():
        eager_s = mean_call_s(torch, device, lambda: model.step(tokens), repeats)
        events = kernel_events(torch, device, lambda: model.step(tokens))
        kernels, kernel_s = len(events), sum(seconds for _, seconds in events)
        graph_s = None
        if device == "cuda":
            graph_s = _graph_step_s(torch, device, model, tokens, repeats)
    return {"batch": batch, "kv_len": kv_len, "eager_s": eager_s, "graph_s": graph_s, "kernels": kernels,
            "kernel_s": kernel_s, "bytes": dims.bytes_read(batch, kv_len, torch.finfo(dtype).bits // 8),
            "launch_s_per_kernel": eager_s / kernels if kernels else None,
            "graph_gaps_s": graph_s - kernel_s if isinstance(graph_s, float) else None}


def _graph_step_s(torch, device: str, model: DecodeModel, tokens, repeats: int) -> float | str:
    """The step captured once as a CUDA graph and replayed; a failed capture is reported, not raised."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model.step(tokens)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.step(tokens)
        return mean_call_s(torch, device, graph.replay, repeats)
    except RuntimeError as exc:
        return f"capture failed: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--catalog", default="h200", help="catalog device for rlsim's prediction")
    parser.add_argument("--batches", default="1,4,16,64,256")
    parser.add_argument("--kv-len", type=int, default=1024, help="context positions each sequence attends to")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="a 2-layer toy model (the script on a CPU)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    dims = SMOKE if args.smoke else LLAMA_8B
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    copy_rate = copy_bw(torch, args.device, dtype, 2**31 if args.device == "cuda" else 2**26)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        row = measure(torch, dims, batch, args.kv_len, args.device, dtype, args.repeats)
        row["bytes_over_copy_bw_s"] = row["bytes"] / copy_rate
        row["rlsim"] = _rlsim(args.catalog, batch, args.kv_len)
        rows.append(row)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    doc = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "dims": asdict(dims), "copy_bw_Bps": copy_rate, "catalog": args.catalog, "rows": rows}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"{doc['device']}, torch {torch.__version__}, copy {copy_rate / 1e12:.2f} TB/s (read + write); "
          f"rlsim: catalog {args.catalog}, defaults")
    for r in rows:
        graph = f"{r['graph_s'] * 1e3:7.3f}" if isinstance(r["graph_s"], float) else "    n/a"
        print(f"  batch {r['batch']:>4}: eager {r['eager_s'] * 1e3:7.3f} ms, graph {graph} ms, "
              f"{r['kernels']} kernels ({r['kernel_s'] * 1e3:.3f} ms GPU), bytes/copy-bw "
              f"{r['bytes_over_copy_bw_s'] * 1e3:.3f} ms; rlsim graph GPU {r['rlsim']['graph_gpu_s'] * 1e3:.3f} ms, "
              f"eager floor {r['rlsim']['eager_launch_floor_s'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
