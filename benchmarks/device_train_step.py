"""One V7 row's model, forward and backward of one micro-batch on one GPU in plain torch, with its
GPU time split by kernel kind: the measurement that says where a Megatron-Core GPU's time goes at
the row's shapes (docs/validation.md V7). A prepared device check: one run, about a minute.

    python benchmarks/device_train_step.py --device cuda [--row 1.7b] [--sustain-s 30] [--json]
    python benchmarks/device_train_step.py --device cpu --smoke     # the script itself, on a CPU

The model is the row's GPT as simulator/validation/megatron_core.py describes it (LayerNorm with
biases, fused QKV with bias, causal scaled-dot-product attention, GELU MLP of 4 x hidden, learned
positions, untied LM head, vocabulary 131,072) at one micro-batch of one 4096-token sequence, bf16
weights, the loss a cross entropy over fp32 logits. The V7 1.7B row is TP1 PP1 (DP 48): a GPU of
that job runs this model whole, so its forward and backward here are the row's per-GPU compute
without the data-parallel gradient sync and the (sharded) optimizer. torch's kernels, not
Transformer Engine's fused ones: a Megatron-Core GPU runs at least this fast.

The GPU is first held under the step for `--sustain-s` seconds (power-capped clocks), then
`--repeats` micro-batches are timed, then one is profiled: its kernels' GPU time by kind (GEMM,
attention, the rest: norms, GELU, residuals, the loss's softmax, embedding, copies), beside the model
FLOPs of the row's formula (Megatron-Core num_floating_point_operations, no recompute) over the
micro-batch time, and `flash_efficiency_scales`: the flash-attention kernels' rate over the GEMMs'
in the same micro-batch, forward and backward, each over rlsim's stack ratio (the device's
`flash_efficiency_scale`, settable in a device profile). It asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import time

from device_decode_graphs import kernel_events, sync_device

from simulator.validation.megatron_core import ROWS, SEQ_LEN, VOCAB

KINDS = (("attention", ("flash", "fmha", "attention", "attn", "sdpa", "cudnn")),
         ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "cublas", "splitk")))


def kind_of(kernel: str) -> str:
    name = kernel.lower()
    if name.startswith("triton_"):   # Inductor's fused element-wise kernels (named after their ops)
        return "other"
    for kind, fragments in KINDS:
        if any(fragment in name for fragment in fragments):
            return kind
    return "other"


def flash_scales(kernel_s: dict[str, float], gemm_s: float, layers: int, hidden: int, seq: int,
                 vocab: int) -> tuple[float, float]:
    """(forward, backward) rate of the flash-attention kernels over the GEMMs' rate in the same
    micro-batch, each over the stack's flash ratio (rlsim's ComputeParams: FlashAttention-2 on an
    A100): the device's `flash_efficiency_scale` for each pass. Kernels by name: cuDNN's SDPA
    forward ("fprop") and backward ("bprop", with its cudnn::fusion helpers)."""
    from simulator.params import ComputeParams

    compute = ComputeParams()
    gemm_rate = gemm_flops(layers, hidden, seq, vocab) / gemm_s
    forward_flops = 2.0 * seq**2 * hidden * layers * compute.flash_causal_fraction * 2   # 4 s^2 h a layer, causal
    fwd = sum(t for k, t in kernel_s.items() if "sdpa" in k and "fprop" in k)
    bwd = sum(t for k, t in kernel_s.items() if ("sdpa" in k and "bprop" in k) or k.startswith("void cudnn::fusion"))
    backward_ratio = compute.flash_backward_efficiency_ratio or compute.flash_efficiency_ratio
    return (forward_flops / fwd / gemm_rate / compute.flash_efficiency_ratio,
            compute.flash_backward_factor * forward_flops / bwd / gemm_rate / backward_ratio)


def gemm_flops(layers: int, hidden: int, seq: int, vocab: int) -> float:
    """The linear layers' and the LM head's share of model_flops: 72 s l h^2 + 6 s h V."""
    return 72.0 * seq * layers * hidden**2 + 6.0 * seq * hidden * vocab


def model_flops(layers: int, hidden: int, seq: int, vocab: int) -> float:
    """Megatron-Core's count for one sequence, no recompute: 72 s l h^2 (1 + s / 6h + V / 12lh), i.e.
    gemm_flops and attention's 12 s^2 l h."""
    return 72.0 * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def _stack(blocks):
    """The layers applied in turn (what --compile hands torch.compile as one graph)."""
    def run(x):
        for block in blocks:
            x = block(x)
        return x
    return run


def build(torch, layers: int, hidden: int, heads: int, vocab: int, seq: int, device: str, dtype):
    nn, functional = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            batch, tokens, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(batch, tokens, hidden))
            return x + self.fc2(functional.gelu(self.fc1(self.norm2(x)), approximate="tanh"))

    class Stack(nn.ModuleList):
        def forward(self, x):
            return _stack(self)(x)

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.positions = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.blocks = Stack(Block() for _ in range(layers))
            self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

        def forward(self, tokens, targets):
            x = self.blocks(self.embed(tokens) + self.positions.weight[: tokens.shape[1]])
            logits = self.head(self.norm(x)).float()
            return functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    with torch.device(device):   # built where it runs: no gigabytes of CPU initialisation
        return GPT().to(dtype=dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--row", default="1.7b", choices=[r[0] for r in ROWS])
    parser.add_argument("--sustain-s", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the layers: Inductor fuses norms, GELU, biases and residuals")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer toy (the script on a CPU)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    label, heads, hidden, layers, tp, _pp, _gpus, _batch, published = next(r for r in ROWS if r[0] == args.row)
    seq, vocab = SEQ_LEN, VOCAB
    if args.smoke:
        heads, hidden, layers, seq, vocab = 4, 128, 2, 256, 1024
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    gen = torch.Generator(device=args.device).manual_seed(0)
    model = build(torch, layers, hidden, heads, vocab, seq, args.device, dtype)
    if args.compile:   # one graph for the layer stack: the fusions Transformer Engine's kernels make
        model.blocks.forward = torch.compile(_stack(model.blocks))
    tokens = torch.randint(0, vocab, (1, seq), device=args.device, generator=gen)
    targets = torch.randint(0, vocab, (1, seq), device=args.device, generator=gen)

    def micro_batch() -> None:
        model(tokens, targets).backward()   # gradients accumulate, as over a step's micro-batches

    deadline = time.perf_counter() + args.sustain_s
    micro_batch()
    while time.perf_counter() < deadline:
        micro_batch()
    sync_device(torch, args.device)
    start = time.perf_counter()
    for _ in range(args.repeats):
        micro_batch()
    sync_device(torch, args.device)
    seconds = (time.perf_counter() - start) / args.repeats
    by_kind: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    names: dict[str, float] = {}
    for name, elapsed in kernel_events(torch, args.device, micro_batch):
        by_kind[kind_of(name)] += elapsed
        names[name] = names.get(name, 0.0) + elapsed
    flops = model_flops(layers, hidden, seq, vocab)
    top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:25])
    try:
        scales = flash_scales(names, by_kind["gemm"], layers, hidden, seq, vocab)
    except ZeroDivisionError:   # no cuDNN attention kernels (a CPU, another attention backend)
        scales = None
    doc = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "row": label, "tp_of_row": tp, "published_tflops_per_gpu": published, "compiled": args.compile,
           "dims": {"layers": layers, "hidden": hidden, "heads": heads, "seq": seq, "vocab": vocab},
           "micro_batch_s": seconds, "model_flops": flops, "tflops": flops / seconds / 1e12,
           "kernel_s_by_kind": by_kind, "top_kernels_s": top, "flash_efficiency_scales": scales}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"{doc['device']}: V7 {label} (published {published} TFLOP/s a GPU): {seconds * 1e3:.1f} ms a micro-batch, "
          f"{doc['tflops']:.1f} TFLOP/s model FLOPs; GPU time by kind (ms): "
          + ", ".join(f"{kind} {s * 1e3:.1f}" for kind, s in by_kind.items()))


if __name__ == "__main__":
    main()
