"""vLLM's fused-MoE decode kernel at the expert slices of the V6 rollout engines, on one GPU: how
close to the streaming rate an engine's MoE layer reads its experts when each GPU holds a thin slice
of every expert (tensor parallelism over 8-64 GPUs, vLLM expert_parallel_size 1). rlsim prices an
engine's expert weights at the HBM rate (bytes / (hbm_bw x hbm_efficiency)); the V6 rows whose
engines span nodes ask for 1.7-1.9x slower decode steps (docs/validation.md, "Where the on-policy
misses sit"). A prepared device check: one run, a few minutes, prints figures, asserts nothing.

    python benchmarks/device_fused_moe.py --device cuda [--json] [--catalog h200] [--search]
    python benchmarks/device_fused_moe.py --device cpu --smoke     # the script itself, on a CPU

The kernel is vLLM 0.11.0's `fused_moe_kernel` (vllm/model_executor/layers/fused_moe/fused_moe.py,
Apache License 2.0, copyright the vLLM project), its bf16 path only: the quantization and bias
branches removed, the body otherwise as written. Around it, as vLLM runs it: tokens routed top-k,
sorted by expert and padded to the block size (`align_block_size`, a torch rewrite of vLLM's
`moe_align_block_size` CUDA op: the same sorted ids, expert per block and padded count, the grid
sized to the padded count rather than vLLM's worst case), the gate/up product over the hidden size
(w13: E x 2I/tp x H) and the down product over the slice (w2: E x H x I/tp, routing weights
applied), timed apart. The block sizes are vLLM's `get_default_config` (16 x 32 x 64 at M <= E,
Triton's 4 warps and 3 stages) — what an engine without a tuned table for its (E, N) runs — and,
with --search, the best of a small grid of the tiles vLLM's shipped H100 tables use.

For each engine (model, TP, running sequences of the V6 row): the experts' bytes a step reads
(experts hit x slice x 2 bytes), each kernel's GPU time (a CUDA graph of `--repeats` launches,
replayed), the achieved rate against the copy rate measured here, and rlsim's time for the same
bytes on the catalog device (hbm_bw x hbm_efficiency). Weights and activations random.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from device_decode_graphs import copy_bw, sync_device

from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model

# (label, model preset, engine TP, running sequences per engine in its V6 row: prompts x
# generations / engines, e.g. qwen3-235b-a22b on-policy 16 x 32 over 128 / 16 engines = 64)
ENGINES: tuple[tuple[str, str, int, int], ...] = (
    ("qwen3-235b-a22b tp8 (1-step-off)", "qwen3-235b-a22b", 8, 32),
    ("qwen3-235b-a22b tp16 (on-policy)", "qwen3-235b-a22b", 16, 64),
    ("deepseek-v3 tp32 (on-policy, 1-step-off)", "deepseek-v3", 32, 64),
    ("deepseek-v3 tp64 (dapo)", "deepseek-v3", 64, 192),
    ("qwen3-30b-a3b tp2 (on-policy)", "qwen3-30b-a3b", 2, 128),
)
# The tiles vLLM's shipped bf16 H100 tables choose at decode batches (16-row blocks; N 32-128,
# K 64-256; 2-5 stages), a search small enough to compile in a minute or two per engine.
SEARCH = tuple({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 1,
                "num_warps": 4, "num_stages": s}
               for n in (32, 64, 128) for k in (64, 128) for s in (3, 5))


@dataclass(frozen=True)
class Slice:
    """One GPU's share of a MoE layer in an engine of `tp` GPUs (vLLM, expert_parallel_size 1)."""
    experts: int
    hidden: int
    expert_ffn: int     # the whole expert's intermediate size (moe_intermediate_size)
    top_k: int
    tp: int

    @property
    def ffn_slice(self) -> int:
        return self.expert_ffn // self.tp

    def w13_shape(self) -> tuple[int, int, int]:
        return (self.experts, 2 * self.ffn_slice, self.hidden)

    def w2_shape(self) -> tuple[int, int, int]:
        return (self.experts, self.hidden, self.ffn_slice)

    def bytes_per_expert(self, element_bytes: int = 2) -> tuple[int, int]:
        """(w13, w2) bytes of one expert's slice."""
        return (2 * self.ffn_slice * self.hidden * element_bytes, self.hidden * self.ffn_slice * element_bytes)


def slice_of(model_name: str, tp: int) -> Slice:
    model = load_model(model_name)
    return Slice(model.num_experts, model.hidden, model.moe_ffn_hidden, model.experts_per_token, tp)


def default_config(tokens: int, experts: int) -> dict[str, int]:
    """vLLM 0.11.0 get_default_config, bf16 without a block shape; num_warps / num_stages: Triton's."""
    if tokens <= experts:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                "num_warps": 4, "num_stages": 3}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
            "num_warps": 4, "num_stages": 3}


def align_block_size(torch, topk_ids, block_m: int, experts: int):
    """(sorted token ids, expert of each block, padded count) as vLLM's moe_align_block_size leaves
    them: the flattened (token, k) pairs in expert order, each expert's run padded to a multiple of
    block_m with the sentinel numel (masked in the kernel); experts with no token get no block."""
    flat = topk_ids.flatten().to(torch.int64)
    valid = flat.numel()
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    total = int(padded.sum())
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    slot = (torch.cumsum(padded, 0) - padded)[by_expert] + torch.arange(valid, device=flat.device) \
        - first_of_expert[by_expert]
    sorted_ids = torch.full((total,), valid, dtype=torch.int32, device=flat.device)
    sorted_ids[slot] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(experts, device=flat.device, dtype=torch.int32),
                                         padded // block_m)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=flat.device)


def reference_moe(torch, hidden, w13, w2, topk_ids, topk_weights):
    """The layer in plain torch (gate/up, SiLU x up, down, routing weights, sum over k): the check
    of the kernel's output and the CPU smoke path."""
    out = torch.zeros_like(hidden, dtype=torch.float32)
    for token in range(hidden.shape[0]):
        for k in range(topk_ids.shape[1]):
            e = int(topk_ids[token, k])
            gate_up = w13[e].float() @ hidden[token].float()
            gate, up = gate_up.chunk(2)
            out[token] += topk_weights[token, k].float() * (w2[e].float() @ (torch.nn.functional.silu(gate) * up))
    return out


_KERNEL = []


def _kernel():
    """The Triton kernel, compiled on first use (triton ships with CUDA builds of torch only)."""
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def fused_moe_kernel(a_ptr, b_ptr, c_ptr, topk_weights_ptr, sorted_token_ids_ptr, expert_ids_ptr,
                         num_tokens_post_padded_ptr, N, K, EM, num_valid_tokens, stride_am, stride_ak,
                         stride_be, stride_bk, stride_bn, stride_cm, stride_cn,
                         BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                         GROUP_SIZE_M: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, top_k: tl.constexpr,
                         compute_type: tl.constexpr):
        # vLLM 0.11.0 fused_moe_kernel, bf16 path (Apache-2.0, the vLLM project)
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
        if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
            return
        offs_token_id = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
        offs_token = tl.load(sorted_token_ids_ptr + offs_token_id)
        token_mask = offs_token < num_valid_tokens
        off_experts = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + off_experts * stride_be + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator += tl.dot(a, b)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        if MUL_ROUTED_WEIGHT:
            moe_weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0)
            accumulator = accumulator * moe_weight[:, None]
        accumulator = accumulator.to(compute_type)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
        c_mask = token_mask[:, None] & (offs_cn[None, :] < N)
        tl.store(c_ptrs, accumulator, mask=c_mask)

    _KERNEL.append((triton, tl, fused_moe_kernel))
    return _KERNEL[0]


def launch(torch, a, b, c, topk_weights, routing, config: dict[str, int], top_k: int, weighted: bool) -> None:
    """One product of the layer as vLLM's invoke_fused_moe_kernel launches it: a (tokens x K) or
    (tokens * k x K), b (E x N x K), c (rows x N)."""
    triton, tl, kernel = _kernel()
    sorted_ids, expert_ids, padded = routing
    n, k = b.shape[1], b.shape[2]
    tiles = {key: config[key] for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")}
    grid = (triton.cdiv(sorted_ids.numel(), tiles["BLOCK_SIZE_M"]) * triton.cdiv(n, tiles["BLOCK_SIZE_N"]),)
    kernel[grid](a, b, c, topk_weights, sorted_ids, expert_ids, padded, n, k, sorted_ids.numel(),
                 topk_weights.numel(), a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1),
                 c.stride(0), c.stride(1), **tiles, MUL_ROUTED_WEIGHT=weighted, top_k=top_k,
                 compute_type=tl.bfloat16 if a.dtype == torch.bfloat16 else tl.float32, num_warps=config["num_warps"], num_stages=config["num_stages"])


def graph_time_s(torch, run, repeats: int) -> float:
    """GPU seconds per call: `repeats` calls captured in one CUDA graph, replayed (no launch cost)."""
    run()
    sync_device(torch, "cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            run()
    graph.replay()
    sync_device(torch, "cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3 / repeats)
    return best


def _best(torch, run_with, configs, repeats: int) -> tuple[float, dict[str, int] | None]:
    """The fastest of `configs` (a tile the compiler refuses is skipped, as vLLM's tuner skips it)."""
    out: tuple[float, dict[str, int] | None] = (float("inf"), None)
    for config in configs:
        try:
            seconds = graph_time_s(torch, lambda c=config: run_with(c), repeats)
        except Exception:   # noqa: BLE001 - out of shared memory or registers for this tile
            continue
        if seconds < out[0]:
            out = (seconds, config)
    return out


def measure(torch, label: str, layer: Slice, tokens: int, copy_rate: float, catalog: str, repeats: int,
            search: bool, seed: int, dev: str = "cuda") -> dict:
    gen = torch.Generator(device=dev).manual_seed(seed)
    dtype = torch.bfloat16
    hidden = torch.randn(tokens, layer.hidden, device=dev, dtype=dtype, generator=gen)
    w13 = torch.randn(layer.w13_shape(), device=dev, dtype=dtype, generator=gen) / layer.hidden ** 0.5
    w2 = torch.randn(layer.w2_shape(), device=dev, dtype=dtype, generator=gen) / layer.ffn_slice ** 0.5
    scores = torch.rand(tokens, layer.experts, device=dev, generator=gen)
    topk_weights, topk_ids = torch.topk(torch.softmax(scores, -1), layer.top_k, dim=-1)
    topk_weights = topk_weights.float().contiguous()
    inter = torch.empty(tokens * layer.top_k, w13.shape[1], device=dev, dtype=dtype)
    act = torch.randn(tokens * layer.top_k, layer.ffn_slice, device=dev, dtype=dtype, generator=gen)
    out = torch.empty(tokens * layer.top_k, layer.hidden, device=dev, dtype=dtype)

    # the routing is aligned once per block height, outside the timed kernels (vLLM's one-kernel
    # moe_align_block_size runs once per layer, shared by both products; this torch rewrite syncs)
    routings = {m: align_block_size(torch, topk_ids, m, layer.experts)
                for m in {c["BLOCK_SIZE_M"] for c in (*SEARCH, default_config(tokens, layer.experts))}}

    def up(config):
        launch(torch, hidden, w13, inter, topk_weights, routings[config["BLOCK_SIZE_M"]], config, layer.top_k, False)

    def down(config):
        launch(torch, act, w2, out, topk_weights, routings[config["BLOCK_SIZE_M"]], config, 1, True)

    hit = int(torch.unique(topk_ids).numel())
    bytes_up, bytes_down = (hit * b for b in layer.bytes_per_expert())
    default = default_config(tokens, layer.experts)
    row = {"engine": label, "slice": asdict(layer), "tokens": tokens, "experts_hit": hit,
           "bytes": {"w13": bytes_up, "w2": bytes_down}, "default_config": default}
    spec = get_device(catalog)
    rlsim_rate = spec.hbm_bw_Bps * spec.hbm_efficiency
    for name, run_with, nbytes in (("w13", up, bytes_up), ("w2", down, bytes_down)):
        seconds = graph_time_s(torch, lambda r=run_with: r(default), repeats)
        row[name] = {"default_s": seconds, "default_Bps": nbytes / seconds,
                     "default_of_copy": nbytes / seconds / copy_rate,
                     "rlsim_s": nbytes / rlsim_rate}
        if search:
            best_s, best = _best(torch, run_with, SEARCH, repeats)
            row[name].update({"searched_s": best_s, "searched_config": best,
                              "searched_of_copy": nbytes / best_s / copy_rate})
    check = reference_moe(torch, hidden[:2], w13, w2, topk_ids[:2], topk_weights[:2])
    up(default)
    gate, lin = inter.view(tokens, layer.top_k, -1)[:2].float().chunk(2, dim=-1)
    act2 = (torch.nn.functional.silu(gate) * lin).to(dtype).reshape(2 * layer.top_k, -1)
    out2 = torch.empty(2 * layer.top_k, layer.hidden, device=dev, dtype=dtype)
    launch(torch, act2, w2, out2, topk_weights[:2].contiguous(),
           align_block_size(torch, topk_ids[:2], default["BLOCK_SIZE_M"], layer.experts), default, 1, True)
    got = out2.float().view(2, layer.top_k, -1).sum(1)
    row["kernel_vs_reference_rel_err"] = float((got - check).norm() / check.norm())
    return row


def smoke(torch) -> dict:
    """The script's torch parts on a CPU: the alignment and the reference layer at a toy size."""
    layer = Slice(experts=8, hidden=32, expert_ffn=16, top_k=2, tp=2)
    gen = torch.Generator().manual_seed(0)
    topk_ids = torch.topk(torch.rand(5, layer.experts, generator=gen), layer.top_k, dim=-1).indices
    sorted_ids, expert_ids, padded = align_block_size(torch, topk_ids, 4, layer.experts)
    hidden = torch.randn(5, layer.hidden, generator=gen)
    w13 = torch.randn(layer.w13_shape(), generator=gen)
    w2 = torch.randn(layer.w2_shape(), generator=gen)
    out = reference_moe(torch, hidden, w13, w2, topk_ids, torch.full((5, layer.top_k), 0.5))
    return {"device": "cpu", "slice": asdict(layer), "sorted_ids": sorted_ids.tolist(),
            "expert_ids": expert_ids.tolist(), "padded": int(padded[0]), "reference_norm": float(out.norm())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--catalog", default="h200", help="catalog device for rlsim's time")
    parser.add_argument("--repeats", type=int, default=50, help="launches per captured graph")
    parser.add_argument("--search", action="store_true", help="also the best of a small tile grid")
    parser.add_argument("--smoke", action="store_true", help="the alignment and reference at a toy size, CPU")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    if args.smoke or args.device == "cpu":
        doc = smoke(torch)
    else:
        copy_rate = copy_bw(torch, "cuda", torch.bfloat16, 2**31)
        rows = [measure(torch, label, slice_of(model, tp), seqs, copy_rate, args.catalog, args.repeats,
                        args.search, seed=i) for i, (label, model, tp, seqs) in enumerate(ENGINES)]
        doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_bw_Bps": copy_rate,
               "catalog": args.catalog, "rows": rows}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    if doc["device"] == "cpu":
        print(f"cpu smoke: {len(doc['sorted_ids'])} aligned slots, reference norm {doc['reference_norm']:.3f}")
        return
    print(f"{doc['device']}, torch {doc['torch']}, copy {doc['copy_bw_Bps'] / 1e12:.2f} TB/s (read + write)")
    for r in doc["rows"]:
        for name in ("w13", "w2"):
            part = r[name]
            searched = f", searched {part['searched_s'] * 1e6:.1f} us ({part['searched_of_copy']:.2f})" \
                if "searched_s" in part else ""
            print(f"{r['engine']:42s} {name}: {r['bytes'][name] / 1e6:7.1f} MB, default {part['default_s'] * 1e6:7.1f} us "
                  f"({part['default_of_copy']:.2f} of the copy rate){searched}; rlsim {part['rlsim_s'] * 1e6:.1f} us")


if __name__ == "__main__":
    main()
