"""Per-layer parameter counts and matmul shapes of a ModelSpec, as the training cost model needs them.

Counts follow the model's matrices (arXiv 2104.04473 appendix / formulas.md): attention Q, K, V,
O projections (MLA: the low-rank down/up projections), the MLP (2 matrices, or 3 when gated:
SwiGLU), MoE experts (gated), shared experts and the router. Norms and biases are ignored
(< 0.1% of parameters). Everything here is unsharded; the cost model divides by TP / EP.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import RlsimError


def _get(model: Any, name: str, default: Any = 0) -> Any:
    value = getattr(model, name, default)
    return default if value is None else value


def is_gated_mlp(model: Any) -> bool:
    """SwiGLU-style MLPs have 3 matrices; GELU MLPs (GPT) have 2."""
    gated = getattr(model, "gated_ffn", None)
    if gated is not None:
        return bool(gated)
    act = str(getattr(model, "hidden_act", getattr(model, "activation", "silu")) or "silu").lower()
    return act in ("silu", "swiglu", "swish", "geglu")


@dataclass(frozen=True)
class Gemm:
    """One matmul of a layer, per token: `params` weights, applied to `tokens_factor` x tokens."""

    name: str
    params: float          # weight elements (K x N)
    n_out: float           # output width N (for the activation bytes of the roofline)
    expert: bool = False   # an expert's weights: sharded by EP, fed tokens x top-k / experts
    # Megatron TP split: column-parallel ("n": QKV, MLP up) shards the output width; row-parallel
    # ("k": attention output, MLP down) shards the input width (arXiv 2104.04473 sec. 2.3); "none":
    # replicated on every TP rank (a LoRA adapter's unsplit half).
    split: str = "n"
    # LoRA: a frozen base weight takes no weight gradient, no optimizer state and no gradient sync;
    # `adapter` marks an adapter matmul (trainable).
    trainable: bool = True
    adapter: bool = False

    @property
    def k_in(self) -> float:
        """Input width K of the K x N weight."""
        return self.params / self.n_out

    def local_dims(self, tp: int) -> tuple[float, float]:
        """(N, K) of this GEMM on one of `tp` tensor-parallel ranks."""
        if self.split == "k":
            return self.n_out, self.k_in / tp
        if self.split == "none":
            return self.n_out, self.k_in
        return self.n_out / tp, self.k_in


@dataclass(frozen=True)
class LayerShape:
    """One transformer layer (unsharded). `gemms` are the per-token matmuls; attention core apart."""

    moe: bool
    gemms: tuple[Gemm, ...]
    attn_heads: int
    kv_heads: int
    qk_head_dim: int            # per-head dim of Q.K^T
    v_head_dim: int             # per-head dim of the value / attention output
    num_experts: int = 0
    experts_per_token: int = 0
    # A hybrid model's blocks (ModelSpec.layer_pattern): a Mamba-2 mixer's scan and conv FLOPs per
    # token beyond its projections (chunked SSD form, ModelSpec.ssm_flops_per_token per layer), its
    # stored in_proj-output + scan-output width per token, and the row-parallel outputs (TP all-reduces
    # forward) of the layer: 2 for attention + MLP, 1 for one hybrid block.
    ssm_flops_per_token: float = 0.0
    # the scan's chunk (tokens): the sequence length its matmul-like kernels' shape ramp is taken at
    # (Mamba-2: ModelSpec.ssd_chunk_tokens; Gated DeltaNet: ModelSpec.gdn_chunk_tokens)
    scan_chunk_tokens: int = 0
    mixer_units: float = 0.0
    tp_reductions: float = 2.0
    # Elements a token's rotary position embedding rotates (query and key heads x the rotated dim; MLA:
    # every query head's and the shared key's rope part); 0 with learned absolute positions or none.
    rope_elements: float = 0.0
    # Sliding-window attention (ModelSpec.sliding_window): each query attends to the last `window`
    # tokens only; 0: the whole sequence.
    window: int = 0
    # Norms of the layer (ModelSpec.norms_per_layer: Gemma's sandwich norms are four)
    norms: int = 2

    @property
    def has_mlp(self) -> bool:
        return any(g.name.endswith("_up") for g in self.gemms)

    @property
    def dense_params(self) -> float:
        """Parameters not sharded by EP (attention, dense MLP, shared experts, router)."""
        return sum(g.params for g in self.gemms if not g.expert)

    @property
    def expert_params(self) -> float:
        """Routed expert parameters of the layer (all experts)."""
        return sum(g.params for g in self.gemms if g.expert) * max(self.num_experts, 1)

    @property
    def params(self) -> float:
        return self.dense_params + (self.expert_params if self.moe else 0.0)

    @property
    def trainable_dense_params(self) -> float:
        """dense_params that train (all of them but LoRA's frozen base)."""
        return sum(g.params for g in self.gemms if not g.expert and g.trainable)

    @property
    def trainable_expert_params(self) -> float:
        return sum(g.params for g in self.gemms if g.expert and g.trainable) * max(self.num_experts, 1)

    def matmul_flops_per_token(self) -> float:
        """Forward matmul FLOPs per token: 2 x weights touched (routed experts: top-k of them)."""
        dense = sum(g.params for g in self.gemms if not g.expert)
        routed = sum(g.params for g in self.gemms if g.expert) * self.experts_per_token
        return 2.0 * (dense + routed)

    def attention_flops_per_token(self, context_len: float) -> float:
        """Forward Q.K^T and A.V FLOPs per token over `context_len` keys (full, uncausal count)."""
        return 2.0 * context_len * self.attn_heads * (self.qk_head_dim + self.v_head_dim)


def _attention_gemms(model: Any) -> tuple[list[Gemm], int, int, int, int]:
    h = int(model.hidden)
    heads = int(model.num_heads)
    if _get(model, "kv_lora_rank", 0):
        q_lora = int(_get(model, "q_lora_rank", 0))
        kv_lora = int(model.kv_lora_rank)
        nope, rope = int(_get(model, "qk_nope_dim", 128)), int(_get(model, "qk_rope_dim", 64))
        v_dim = int(_get(model, "v_head_dim", nope))
        qk = nope + rope
        gemms = []
        if q_lora:
            gemms += [Gemm("q_down", h * q_lora, q_lora), Gemm("q_up", q_lora * heads * qk, heads * qk)]
        else:
            gemms.append(Gemm("q", h * heads * qk, heads * qk))
        gemms += [Gemm("kv_down", h * (kv_lora + rope), kv_lora + rope),
                  Gemm("kv_up", kv_lora * heads * (nope + v_dim), heads * (nope + v_dim)),
                  Gemm("o", heads * v_dim * h, h, split="k")]
        return gemms, heads, heads, qk, v_dim
    d = int(_get(model, "head_dim", 0)) or h // heads
    kv = int(_get(model, "num_kv_heads", heads)) or heads
    q = heads * (2 if _get(model, "attention_output_gate", False) else 1)   # Qwen3-Next: the gate's query half
    gemms = [Gemm("qkv", h * (q + 2 * kv) * d, (q + 2 * kv) * d), Gemm("o", heads * d * h, h, split="k")]
    return gemms, heads, kv, d, d


def _linear_mixer(model: Any) -> tuple[list[Gemm], dict[str, float]]:
    """A Gated DeltaNet layer's projections (in_proj_qkvz + in_proj_ba column-parallel, out_proj
    row-parallel) and its LayerShape fields: the delta rule's chunked FLOPs, the stored in-projection
    and output widths a token."""
    h, width = int(model.hidden), int(model.linear_in_proj_width)
    inner = int(model.linear_value_heads * model.linear_value_dim)
    gemms = [Gemm("gdn_in", h * width, width), Gemm("gdn_out", inner * h, h, split="k")]
    return gemms, {"ssm_flops_per_token": model.linear_flops_per_token() / model.num_linear_layers,
                   "scan_chunk_tokens": model.gdn_chunk_tokens, "mixer_units": float(width + inner)}


def _mlp_gemms(h: int, ffn: int, gated: bool, prefix: str, expert: bool = False) -> list[Gemm]:
    up = (2 if gated else 1) * ffn
    return [Gemm(f"{prefix}_up", h * up, up, expert), Gemm(f"{prefix}_down", ffn * h, h, expert, split="k")]


def _hybrid_shapes(model: Any, attn: list[Gemm], heads: int, kv: int, qk: int, vd: int,
                   gated: bool) -> tuple[LayerShape, ...]:
    """A hybrid model's blocks in pattern order: attention only, MLP only, or a Mamba-2 mixer
    (in_proj column-parallel, out_proj row-parallel; mamba_ssm / Megatron-Core MambaMixer)."""
    h = int(model.hidden)
    per_layer_ssm = model.ssm_flops_per_token() / max(model.num_mamba_layers, 1)
    mamba = LayerShape(False, (Gemm("mamba_in", h * model.mamba_in_proj_width, model.mamba_in_proj_width),
                               Gemm("mamba_out", model.mamba_inner * h, h, split="k")), 0, 0, 0, 0,
                       ssm_flops_per_token=per_layer_ssm, scan_chunk_tokens=int(model.ssd_chunk_tokens), tp_reductions=1.0,
                       mixer_units=float(model.mamba_in_proj_width + model.mamba_inner))
    kinds = {"M": mamba, "*": LayerShape(False, tuple(attn), heads, kv, qk, vd, tp_reductions=1.0),
             "-": LayerShape(False, tuple(_mlp_gemms(h, int(model.ffn_hidden), gated, "mlp")), 0, 0, 0, 0,
                             tp_reductions=1.0)}
    return tuple(kinds[c] for c in model.layer_pattern)


def _rope_elements(model: Any, heads: int, kv: int, qk: int) -> float:
    """Per token, the query and key elements RoPE rotates: every head's whole head dim (MLA: the
    rope part of each query head and of the one shared key); none with learned positions."""
    if int(_get(model, "max_position_embeddings", 0)):
        return 0.0
    if _get(model, "kv_lora_rank", 0):
        return float((heads + 1) * int(_get(model, "qk_rope_dim", 64)))
    return float((heads + kv) * qk)


@lru_cache(maxsize=256)
def layer_shapes(model: Any) -> tuple[LayerShape, ...]:
    """One LayerShape per layer, in order (dense layers first for MoE models with first_k_dense, or
    at the indices dense_layers names;
    a hybrid model's blocks in its layer pattern's order)."""
    h = int(model.hidden)
    attn, heads, kv, qk, vd = _attention_gemms(model)
    rope = _rope_elements(model, heads, kv, qk)
    gated = is_gated_mlp(model)
    if getattr(model, "layer_pattern", ""):
        return _with_adapters(model, _hybrid_shapes(model, attn, heads, kv, qk, vd, gated))
    experts = int(_get(model, "num_experts", 0))
    dense_mlp = _mlp_gemms(h, int(model.ffn_hidden), gated, "mlp")
    norms = int(_get(model, "norms_per_layer", 2))
    dense = LayerShape(False, tuple(attn + dense_mlp), heads, kv, qk, vd, rope_elements=rope, norms=norms)
    if not experts:
        return _with_adapters(model, _linear(model, _windowed(model, (dense,) * int(model.num_layers)), attn))
    f_moe = int(_get(model, "moe_ffn_hidden", 0)) or int(model.ffn_hidden)
    shared = int(_get(model, "num_shared_experts", 0))
    moe_gemms = list(attn) + [Gemm("router", h * experts, experts)]
    if shared:
        moe_gemms += _mlp_gemms(h, f_moe * shared, True, "shared")
    moe_gemms += _mlp_gemms(h, f_moe, True, "expert", expert=True)
    moe = LayerShape(True, tuple(moe_gemms), heads, kv, qk, vd, experts, int(_get(model, "experts_per_token", 1)),
                     rope_elements=rope, norms=norms)
    first_dense = int(_get(model, "first_k_dense", 0))
    between = set(_get(model, "dense_layers", ()) or ())
    return _with_adapters(model, _linear(model, _windowed(model, tuple(dense if i < first_dense or i in between else moe
                                                                     for i in range(int(model.num_layers)))), attn))


def _linear(model: Any, shapes: tuple[LayerShape, ...], attn: list[Gemm]) -> tuple[LayerShape, ...]:
    """The model's Gated DeltaNet layers (ModelSpec.linear_layers): the attention's projections
    replaced by the mixer's, no attention core, the same FFN / MoE; one shape per kind."""
    linear = set(_get(model, "linear_layers", ()) or ())
    if not linear:
        return shapes
    mixer, fields = _linear_mixer(model)
    names = {g.name for g in attn}

    def swapped(shape: LayerShape) -> LayerShape:
        rest = tuple(g for g in shape.gemms if g.name not in names)
        return dataclasses.replace(shape, gemms=tuple(mixer) + rest, attn_heads=0, kv_heads=0, qk_head_dim=0,
                                   v_head_dim=0, rope_elements=0.0, **fields)

    return _replaced_at(shapes, linear, swapped)


def _windowed(model: Any, shapes: tuple[LayerShape, ...]) -> tuple[LayerShape, ...]:
    """The model's sliding layers (ModelSpec.sliding_layers) with their window; the rest as given."""
    sliding = set(_get(model, "sliding_layers", ()) or ())
    if not sliding:
        return shapes
    window = int(model.sliding_window)
    return _replaced_at(shapes, sliding, lambda shape: dataclasses.replace(shape, window=window))


def _replaced_at(shapes: tuple[LayerShape, ...], indices: set[int],
                 make: Callable[[LayerShape], LayerShape]) -> tuple[LayerShape, ...]:
    """``shapes`` with those at ``indices`` replaced by ``make(shape)``, made once per kind, so that
    equal layers stay one object (_with_adapters and the caches key on it)."""
    made: dict[int, LayerShape] = {}
    out = []
    for i, shape in enumerate(shapes):
        if i in indices:
            if id(shape) not in made:
                made[id(shape)] = make(shape)
            shape = made[id(shape)]
        out.append(shape)
    return tuple(out)


# Hugging Face module names (PEFT target_modules, matched at any depth) -> the layer matmuls here:
# q, k and v fused in qkv; gate and up in the up projections (dense MLP, routed and shared experts);
# an MoE layer's router is its "gate" module; MLA's projections; a Mamba-2 mixer's in / out.
HF_MODULE_GEMMS: dict[str, tuple[str, ...]] = {
    "q_proj": ("qkv", "q"), "k_proj": ("qkv",), "v_proj": ("qkv",), "o_proj": ("o",),
    "gate_proj": ("mlp_up", "expert_up", "shared_up"), "up_proj": ("mlp_up", "expert_up", "shared_up"),
    "down_proj": ("mlp_down", "expert_down", "shared_down"), "gate": ("router",),
    "q_a_proj": ("q_down",), "q_b_proj": ("q_up",), "kv_a_proj_with_mqa": ("kv_down",), "kv_b_proj": ("kv_up",),
    "in_proj": ("mamba_in",), "out_proj": ("mamba_out", "gdn_out"),
    "in_proj_qkvz": ("gdn_in",), "in_proj_ba": ("gdn_in",)}


def with_lora(model: Any, lora: Any, source: str | None = None) -> Any:
    """`model` as a workload trains it: with LoRA adapters (`lora`: workload.lora, rank and targets)
    beside its frozen base, or whole (None). Targets name this module's matmuls or Hugging Face
    modules (HF_MODULE_GEMMS: a fused matmul is adapted whole when any of its parts is named); one
    the model has no matmul for is an error."""
    if lora is None:
        return model
    names = adapter_gemm_names(model)
    targets: dict[str, None] = {}
    for target in ([] if lora.targets == "all-linear" else lora.targets):
        found = [target] if target in names else [g for g in HF_MODULE_GEMMS.get(target, ()) if g in names]
        if not found:
            raise RlsimError(f"{getattr(model, 'name', 'the model')} has no layer matmul for LoRA target {target!r}",
                             source=source, field="workload.lora.targets",
                             fix=f"name some of {', '.join(names)} (or their Hugging Face modules), or all-linear")
        targets.update(dict.fromkeys(found))
    return dataclasses.replace(model, adapter_rank=int(lora.rank), adapter_targets=tuple(targets))


def adapter_gemm_names(model: Any) -> tuple[str, ...]:
    """The layer matmuls a LoRA target may name (workload.lora.targets), in first-seen order."""
    names: dict[str, None] = {}
    for shape in layer_shapes(dataclasses.replace(model, adapter_rank=0, adapter_targets=())):
        names.update(dict.fromkeys(g.name for g in shape.gemms))
    return tuple(names)


def _with_adapters(model: Any, shapes: tuple[LayerShape, ...]) -> tuple[LayerShape, ...]:
    """With model.adapter_rank: every base matmul frozen and a LoRA pair beside each targeted one
    (A: K x r per sub-matrix, B: r x N). TP splits an adapter as its base: a column-parallel base
    keeps A whole and splits B's output, a row-parallel one splits A's input and keeps B whole."""
    rank = int(_get(model, "adapter_rank", 0))
    if not rank:
        return shapes
    targets = set(_get(model, "adapter_targets", ()) or ())
    gated = is_gated_mlp(model)
    done: dict[int, LayerShape] = {}
    for shape in shapes:
        if id(shape) in done:
            continue
        gemms = [dataclasses.replace(g, trainable=False) for g in shape.gemms]
        for g in shape.gemms:
            if targets and g.name not in targets:
                continue
            parts = _adapter_parts(g.name, gated)
            a_split, b_split = ("k", "none") if g.split == "k" else ("none", "n")
            gemms.append(Gemm(f"{g.name}.lora_a", g.k_in * rank * parts, rank * parts, g.expert, a_split, adapter=True))
            gemms.append(Gemm(f"{g.name}.lora_b", rank * g.n_out, g.n_out, g.expert, b_split, adapter=True))
        done[id(shape)] = dataclasses.replace(shape, gemms=tuple(gemms))
    return tuple(done[id(shape)] for shape in shapes)


def _adapter_parts(name: str, gated: bool) -> int:
    """Sub-matrices of a fused GEMM, each with its own LoRA A (PEFT adapts q, k, v and gate, up one
    by one): q, k, v in qkv; gate and up in a gated FFN's up projection (experts' always)."""
    if name == "qkv":
        return 3
    if name.endswith("_up") and (gated or name != "mlp_up"):
        return 2
    return 1


def embedding_params(model: Any) -> tuple[float, float]:
    """(input embedding, output head) parameters; tied models still hold a head copy on the last
    pipeline stage when pp > 1 (Megatron keeps and all-reduces both copies). A value head: hidden x 1."""
    e = float(model.vocab) * float(model.hidden)
    return e, float(model.head_outputs) * float(model.hidden)
