"""A tiny GPT in torch that runs one real mini RL step and times its own stages.

The model mirrors what `llm.architecture.ModelSpec` counts (pre-norm RMSNorm, fused QKV, SwiGLU MLP,
learned positions, untied LM head, no biases), so the simulator sees the same matrices. The step:
generation with a KV cache for a batch of prompts with per-sequence target lengths (greedy, a
sequence leaves the batch when it reaches its target, as in continuous batching without new
arrivals), a reference forward over every finished sequence, and a policy-gradient update with
AdamW. torch is imported lazily (only `run_mini_step` and the model need it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .torch_backend import import_torch


@dataclass(frozen=True)
class TinyGPTConfig:
    num_layers: int = 4
    hidden: int = 256
    num_heads: int = 4
    ffn_hidden: int = 704      # ~8/3 x hidden, as Llama's SwiGLU sizing
    vocab: int = 2048
    max_positions: int = 256
    dtype: str = "fp32"        # CPUs without bf16 instructions run bf16 GEMMs ~50x slower

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads


@dataclass(frozen=True)
class StageRecord:
    stage: str
    start_s: float   # wall clock, from the start of the step (the first piece of generation)
    end_s: float
    cpu_s: float     # process CPU time of the stage (excludes time other processes held the core)
    # The stage split into its natural pieces (prefill and each decode step; each sequence's forward;
    # each sequence's forward + backward, then the optimizer step), a few ms each: the same work in
    # the same order every run, so repeated runs can be compared piece by piece (replay.py).
    segments_cpu_s: tuple[float, ...] = ()
    segments_wall_s: tuple[float, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def build_model(config: TinyGPTConfig, seed: int) -> Any:
    """A TinyGPT torch module with weights drawn from a seeded torch Generator."""
    torch = import_torch()
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, f = config.hidden, config.ffn_hidden
            self.norm1 = nn.RMSNorm(h)
            self.qkv = nn.Linear(h, 3 * h, bias=False)
            self.proj = nn.Linear(h, h, bias=False)
            self.norm2 = nn.RMSNorm(h)
            self.gate_up = nn.Linear(h, 2 * f, bias=False)
            self.down = nn.Linear(f, h, bias=False)

        def forward(self, x, cache=None, pos: int = 0):
            b, t, h = x.shape
            heads, d = config.num_heads, config.head_dim
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4)
            if cache is None:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                cache[0][:, :, pos:pos + t] = k
                cache[1][:, :, pos:pos + t] = v
                keys, values = cache[0][:, :, :pos + t], cache[1][:, :, :pos + t]
                a = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, h))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(config.vocab, config.hidden)
            self.pos = nn.Embedding(config.max_positions, config.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(config.num_layers))
            self.norm = nn.RMSNorm(config.hidden)
            self.head = nn.Linear(config.hidden, config.vocab, bias=False)

        def forward(self, tokens, caches=None, pos: int = 0):
            t = tokens.shape[1]
            x = self.embed(tokens) + self.pos.weight[pos:pos + t]
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i], pos)
            return self.head(self.norm(x))

    gen = torch.Generator().manual_seed(int(seed))
    model = TinyGPT()
    with torch.no_grad():
        for p in model.parameters():  # matrices ~ N(0, 0.02) (GPT-2 init); norm weights 1
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02 if p.dim() > 1 else torch.ones(p.shape))
    return model.to(dtype=getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[config.dtype]))


class _Laps:
    """Process CPU and wall time of consecutive pieces of work (`lap()` closes one)."""

    def __init__(self) -> None:
        self.cpu_s: list[float] = []
        self.wall_s: list[float] = []
        self._cpu, self._wall = time.process_time(), time.perf_counter()

    def lap(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        self.cpu_s.append(cpu - self._cpu)
        self.wall_s.append(wall - self._wall)
        self._cpu, self._wall = cpu, wall


def _generate(torch: Any, model: Any, config: TinyGPTConfig, prompts: Any, targets: np.ndarray,
              laps: _Laps) -> list[Any]:
    """Greedy generation; sequence i stops after targets[i] tokens. Returns each full sequence."""
    b, p = prompts.shape
    r_max = int(targets.max())
    dtype = next(model.parameters()).dtype
    shape = (b, config.num_heads, p + r_max, config.head_dim)
    caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(config.num_layers)]
    out = torch.zeros(b, r_max, dtype=torch.long)
    active = torch.arange(b)
    remaining = torch.as_tensor(targets, dtype=torch.long)
    # Prefill: the whole prompt batch, yielding each sequence's first token.
    nxt = model(prompts, caches, 0)[:, -1].argmax(-1)
    out[:, 0] = nxt
    laps.lap()
    for step in range(1, r_max):
        keep = remaining[active] > step
        if not bool(keep.all()):  # finished sequences leave the batch (their KV rows are dropped)
            active, nxt = active[keep], nxt[keep]
            caches = [(k[keep], v[keep]) for k, v in caches]
            if len(active) == 0:
                break
        nxt = model(nxt[:, None], caches, p + step - 1)[:, -1].argmax(-1)
        out[active, step] = nxt
        laps.lap()
    return [torch.cat([prompts[i], out[i, : int(targets[i])]]) for i in range(b)]


def _log_probs(torch: Any, model: Any, seq: Any, prompt_len: int) -> Any:
    logits = model(seq[None, :-1])[0, prompt_len - 1:]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, seq[prompt_len:, None])[:, 0]


def run_mini_step(config: TinyGPTConfig, prompt_len: int, response_lens: np.ndarray, *, seed: int,
                  threads: int = 2, learning_rate: float = 1e-4) -> list[StageRecord]:
    """One measured mini RL step (generate -> reference -> train) on the CPU; returns its timeline."""
    torch = import_torch()
    torch.set_num_threads(threads)
    if prompt_len + int(np.max(response_lens)) > config.max_positions:
        raise ValueError("prompt + response exceeds the tiny GPT's max_positions")
    policy = build_model(config, seed)
    reference = build_model(config, seed)
    reference.eval()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=learning_rate)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    prompts = torch.randint(0, config.vocab, (len(response_lens), prompt_len), generator=gen)
    advantages = torch.randn(len(response_lens), generator=gen)
    records: list[StageRecord] = []
    laps = _Laps()  # pieces are contiguous: a stage starts where the pieces before it end

    def stamp(stage: str) -> None:
        """Close the stage's last piece and record the stage as the pieces since the previous one."""
        laps.lap()
        first = sum(len(r.segments_cpu_s) for r in records)
        cpu, wall = tuple(laps.cpu_s[first:]), tuple(laps.wall_s[first:])
        start = sum(laps.wall_s[:first])
        records.append(StageRecord(stage, start, start + sum(wall), sum(cpu), cpu, wall))

    with torch.inference_mode():
        sequences = _generate(torch, policy, config, prompts, np.asarray(response_lens), laps)
    stamp("generate")
    with torch.inference_mode():
        ref_lp = []
        for s in sequences:
            ref_lp.append(_log_probs(torch, reference, s, prompt_len))
            laps.lap()
    stamp("reference")
    # One sequence per micro-batch (no padding): a clipped-free policy gradient with a KL-style
    # penalty to the reference, then one optimizer step.
    sequences = [s.clone() for s in sequences]
    ref_lp = [x.clone() for x in ref_lp]
    optimizer.zero_grad(set_to_none=True)
    for i, seq in enumerate(sequences):
        lp = _log_probs(torch, policy, seq, prompt_len)
        loss = (-(advantages[i] * lp) + 0.01 * (lp - ref_lp[i]) ** 2).mean() / len(sequences)
        loss.backward()
        laps.lap()
    optimizer.step()
    stamp("train")
    return records
