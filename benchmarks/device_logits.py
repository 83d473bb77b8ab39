"""The logits' passes on one GPU: the entropy over the vocabulary and the log-prob paths as the RL
frameworks run them, each timed against a copy of the same logits and given as the bytes a logit it
behaves as, beside rlsim's count (params.ENTROPY_KERNEL_BYTES, MEGATRON_CROSS_ENTROPY_BYTES, ...;
docs/cost-models-training.md "The entropy over the vocabulary"). A prepared device check: about two
minutes, most of it torch.compile.

    python benchmarks/device_logits.py --device cuda [--json]
    python benchmarks/device_logits.py --device cpu --smoke     # the script itself, on a CPU

Bytes a logit = the path's time x the copy's rate / the logits, the copy's rate being the 4 bytes a
bf16 logit it reads and writes over its time: the HBM rate rlsim prices a byte at, measured on the
same tensors. rlsim counts each kernel's distinct tensors once (a row's re-reads inside one kernel
served by L2); a measured figure well above its count says the re-reads reach HBM. The backward
figures leave out the addition of the entropy's gradient to the log-probs' (6 B in rlsim's counts),
which needs both. flash-attn's cross entropy runs where flash-attn is installed. It asserts nothing.
"""
from __future__ import annotations

import argparse
import json

from device_decode_graphs import mean_call_s

from simulator.params import (
    COMPILED_LOG_SOFTMAX_BYTES,
    ENTROPY_KERNEL_BYTES,
    FLASH_ATTN_CROSS_ENTROPY_BYTES,
    MEGATRON_CROSS_ENTROPY_BYTES,
    TEMPERATURE_SCALE_BYTES,
)

VOCAB = 151_936           # Qwen2.5's
ADDITION = 6.0            # the entropy's gradient added to the log-probs' (bf16), in rlsim's backward counts
CHUNK = 1024              # SkyRL's and AReaL's token chunks


def verl_entropy(torch, logits):
    """verl utils/torch_functional.py entropy_from_logits (0.6.0 / 0.9.1)."""
    pd = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def skyrl_entropy(torch, logits):
    """skyrl-train 0.3.1 utils/torch_utils.py chunked_entropy_from_logits (no mask), on (tokens, vocab)."""
    out = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device)
    for start in range(0, logits.shape[0], CHUNK):
        chunk_logprob = torch.nn.functional.log_softmax(logits[start:start + CHUNK], dim=-1)
        out[start:start + CHUNK] = -(chunk_logprob.exp() * chunk_logprob).sum(-1)
    return out


def mul_reduce(a, b):
    """_VocabParallelEntropy's product-sum (torch.compile'd there)."""
    return (a * b).sum(dim=-1, keepdim=True)


def vocab_parallel_entropy(torch, logits, mul_reduce):
    """verl's megatron workers on one TP rank: the clone (logits_processor) and _VocabParallelEntropy's
    forward (utils/megatron/tensor_parallel.py) without its all-reduces of one float a token."""
    logits = logits.clone()
    logits_max = logits.max(dim=-1, keepdim=True).values
    normalized = logits - logits_max
    exp_logits = normalized.exp_()
    sum_exp = exp_logits.sum(dim=-1, keepdim=True)
    softmax = exp_logits.div_(sum_exp)
    return logits_max + sum_exp.log() - mul_reduce(softmax, logits)


def megatron_cross_entropy(torch, logits, target):
    """Megatron-Core's vocab-parallel cross entropy on one rank (tensor_parallel/cross_entropy.py, the
    unfused default) forward and backward, as rlsim counts it: the fp32 cast, max, subtraction, exp,
    sum, the softmax divided in place; backward the softmax scaled by the loss gradient and the
    gradient cast back to bf16."""
    x = logits.float()
    x -= x.max(dim=-1, keepdim=True).values
    torch.exp(x, out=x)
    x.div_(x.sum(dim=-1, keepdim=True))
    x[torch.arange(x.shape[0], device=x.device), target] -= 1.0
    x.mul_(0.5)
    return x.to(logits.dtype)


def areal_logprobs(torch, logits, target):
    """AReaL 1.0.4 utils/functional/vocab_parallel.py _gather_logprobs_entropy (compiled by the caller)."""
    log_probs = torch.nn.functional.log_softmax(logits.float() / 1.0, dim=-1)
    entropy = -torch.sum(log_probs.exp() * log_probs, dim=-1)
    return log_probs.gather(dim=-1, index=target.unsqueeze(-1)).squeeze(-1), entropy


def chunked(torch, fn):
    """``fn`` (logits, target) -> (log-probs, entropy) applied to chunks of CHUNK tokens, as AReaL's
    _chunked_apply does, the chunks' outputs concatenated."""
    def run(t, logits, target):
        parts = [fn(t, logits[s:s + CHUNK], target[s:s + CHUNK]) for s in range(0, logits.shape[0], CHUNK)]
        return tuple(torch.cat(column) for column in zip(*parts, strict=True))
    return run


def _forward_backward(torch, fn, logits, *args):
    """A call of ``fn`` on a leaf copy of the logits, its outputs summed and back-propagated."""
    def run() -> None:
        leaf = logits.detach().requires_grad_(True)
        out = fn(torch, leaf, *args)
        total = sum(o.float().sum() for o in out) if isinstance(out, tuple) else out.float().sum()
        total.backward()
    return run


def paths(torch, logits, target, compiled: bool) -> list[tuple[str, float, object]]:
    """(name, rlsim's bytes a logit, the call) of each path measured."""
    eager, fast = ENTROPY_KERNEL_BYTES["eager"], ENTROPY_KERNEL_BYTES["compiled"]
    logits32, scratch = logits.float(), logits.clone()
    out: list[tuple[str, float, object]] = [
        ("entropy eager, forward (verl)", eager[0], lambda: verl_entropy(torch, logits)),
        ("entropy eager, forward + backward", eager[0] + eager[1] - ADDITION,
         _forward_backward(torch, verl_entropy, logits)),
        ("entropy through log_softmax, forward (SkyRL)", ENTROPY_KERNEL_BYTES["eager-log-softmax"][0],
         lambda: skyrl_entropy(torch, logits)),
        ("entropy eager on fp32 logits, forward (OpenRLHF)", ENTROPY_KERNEL_BYTES["eager-fp32"][0],
         lambda: verl_entropy(torch, logits32)),
        ("temperature division in place", TEMPERATURE_SCALE_BYTES[0], lambda: scratch.div_(0.999)),
        ("Megatron cross entropy, forward + backward", sum(MEGATRON_CROSS_ENTROPY_BYTES),
         lambda: megatron_cross_entropy(torch, logits, target))]
    product_sum = mul_reduce
    if compiled:
        compiled_entropy = torch.compile(verl_entropy, dynamic=True)
        compiled_areal = torch.compile(areal_logprobs)
        product_sum = torch.compile(mul_reduce, dynamic=True)
        out += [("entropy compiled, forward (verl use_torch_compile)", fast[0],
                 lambda: compiled_entropy(torch, logits)),
                ("entropy compiled, forward + backward", fast[0] + fast[1] - ADDITION,
                 _forward_backward(torch, compiled_entropy, logits)),
                ("compiled log-softmax and entropy, forward + backward (AReaL)", sum(COMPILED_LOG_SOFTMAX_BYTES),
                 _forward_backward(torch, chunked(torch, compiled_areal), logits, target))]
    out.append(("entropy vocab-parallel, forward (verl megatron)", ENTROPY_KERNEL_BYTES["vocab-parallel"][0],
                lambda: vocab_parallel_entropy(torch, logits, product_sum)))
    try:
        from flash_attn.ops.triton.cross_entropy import cross_entropy_loss
    except ImportError:
        return out
    out += [("flash-attn cross entropy, forward", FLASH_ATTN_CROSS_ENTROPY_BYTES[0],
             lambda: cross_entropy_loss(logits, target)),
            ("flash-attn cross entropy, forward + backward", sum(FLASH_ATTN_CROSS_ENTROPY_BYTES),
             _forward_backward(torch, lambda t, x, y: cross_entropy_loss(x, y, inplace_backward=True)[0],
                               logits, target))]
    return out


def measure(torch, device: str, tokens: int, vocab: int, compiled: bool, repeats: int) -> dict[str, object]:
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(tokens, vocab, device=device, dtype=torch.bfloat16, generator=gen)
    target = torch.randint(0, vocab, (tokens,), device=device, generator=gen)
    copy = torch.empty_like(logits)
    copy_s = mean_call_s(torch, device, lambda: copy.copy_(logits), repeats)
    rate = 4.0 * logits.numel() / copy_s
    rows = []
    for name, counted, run in paths(torch, logits, target, compiled):
        seconds = mean_call_s(torch, device, run, repeats)
        rows.append({"path": name, "seconds": seconds, "bytes_per_logit": seconds * rate / logits.numel(),
                     "rlsim_bytes_per_logit": counted})
    return {"device": device, "tokens": tokens, "vocab": vocab, "copy_Bps": rate, "paths": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="a small vocabulary, no torch.compile (a CPU run)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    smoke = args.smoke
    doc = measure(torch, args.device, 64 if smoke else args.tokens, 4096 if smoke else VOCAB, compiled=not smoke,
                  repeats=2 if smoke else args.repeats)
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{doc['tokens']} tokens x {doc['vocab']} logits on {doc['device']}; a copy at {doc['copy_Bps'] / 1e9:.0f} GB/s")
    for row in doc["paths"]:
        print(f"  {row['path']:<62} {row['seconds'] * 1e3:8.3f} ms  {row['bytes_per_logit']:6.1f} B a logit "
              f"(rlsim {row['rlsim_bytes_per_logit']:g})")


if __name__ == "__main__":
    main()
