"""Speculative decoding in the rollout engine (InferenceParams.speculative_method; docs/cost-models-inference.md,
"Speculative decoding").

A step of n running sequences drafts k = num_speculative_tokens tokens a sequence with a draft (a
separate small model, an EAGLE head or the target's own MTP layers), then the target verifies the k + 1
positions of each sequence in one forward: its weights read once, its GEMM and attention FLOPs x (k + 1),
its KV read once. With an acceptance rate alpha per drafted token (i.i.d.: Leviathan et al. 2023, arXiv
2211.17192, eq. 1) a step yields E = (1 - alpha^(k+1)) / (1 - alpha) tokens a sequence on average (k + 1
at alpha = 1). The drafter's forwards follow vLLM V1's EagleProposer.propose (v1/spec_decode/eagle.py):
the first over the k + 1 positions the target verified, the rejected ones as padding (vLLM 0.11's
default, prepare_inputs_padded; speculative_disable_padded_drafter_batch: over the E tokens the step
accepted, prepare_inputs, as SGLang 0.4.6.post5's draft-extend), then k - 1 of one token each; each forward's LM
head scores one row a sequence (propose's last_token_indices). A step's drafter layers see 2k tokens a
sequence (E + k - 1 unpadded), its LM head k. After a prefill the same propose runs: its first forward
over the prompt's tokens, its LM head on the last row of each (StepCost._with_draft_prefill).

This module holds the draft's figures per device; llm/inference.py StepCost prices the step.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import RlsimError
from ..params import InferenceParams
from .architecture import ModelSpec, dtype_bytes, load_model

# The drafter's input projection beside its layers, in units of hidden x hidden: EAGLE's fc fuses the
# token's embedding and the target's hidden state, 2h -> h (vLLM model_executor/models/llama_eagle.py
# `self.fc = nn.Linear(hidden_size * 2, hidden_size)`); EAGLE-3's fuses three of the target's hidden
# states, 3h -> h (llama_eagle3.py `self.fc`, hidden_size * 3); DeepSeek-V3's MTP module its eh_proj,
# 2h -> h (deepseek_mtp.py); a separate draft model has none. InferenceParams.speculative_draft_fc_inputs
# overrides it.
DRAFT_FC_INPUTS = {"eagle": 2, "eagle3": 3, "mtp": 2, "draft_model": 0}
# Methods whose drafter is a head of the target's own shape, sharing its embedding (vLLM
# EagleProposer.load_model shares embed_tokens with the target).
HEAD_METHODS = ("eagle", "eagle3", "mtp")
# Whether the head holds an LM head of its own, by method (InferenceParams.speculative_draft_own_lm_head
# overrides it; the SGLang engines force false for mtp): vLLM 0.11 shares the target's with an EAGLE head
# (eagle.py load_model: `self.model.lm_head = target_language_model.lm_head`; an EAGLE-3 head of the
# target's vocabulary too), while its DeepSeek MTP module allocates its own (deepseek_mtp.py SharedHead:
# `self.head = ParallelLMHead(...)`, the checkpoint's shared_head, which compute_logits uses); SGLang
# shares both with an MTP module too (0.4.6.post5 speculative/eagle_worker.py: set_embed_and_head).
DRAFT_OWN_LM_HEAD = {"eagle": False, "eagle3": False, "mtp": True}
# Methods for which vLLM 0.11 keeps num_speculative_tokens lookahead KV slots a running sequence beyond the
# drafts it verifies (v1/core/sched/scheduler.py: num_lookahead_tokens = num_spec_tokens where
# speculative_config.use_eagle(), config/speculative.py: method in eagle, eagle3, mtp; allocate_slots(...,
# num_lookahead_tokens) each step); InferenceParams.speculative_lookahead_tokens overrides the total.
LOOKAHEAD_METHODS = ("eagle", "eagle3", "mtp")


def tokens_per_step(acceptance_rate: float, k: int) -> float:
    """E = (1 - alpha^(k+1)) / (1 - alpha): the expected tokens a verification step yields a sequence
    (its accepted drafts and the target's own next token), k + 1 at alpha = 1 (arXiv 2211.17192 eq. 1)."""
    if k < 1:
        return 1.0
    if acceptance_rate >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance_rate ** (k + 1)) / (1.0 - acceptance_rate)


def inference_field(layout_field: str) -> str:
    """The dotted key of the engine constants beside a layout's key (workload.rollout_layout ->
    workload.inference)."""
    prefix = layout_field.rpartition(".")[0]
    return f"{prefix}.inference" if prefix else "inference"


def draft_model(model: ModelSpec, params: InferenceParams, field: str) -> ModelSpec:
    """The drafter as a model: the named draft model, or ``speculative_draft_layers`` layers of the
    target's own shape (an EAGLE head, the MTP module: attention and FFN / MoE as the target's), with
    the target's embedding and LM head (shared: not held twice, ``draft_resident_params``)."""
    if params.speculative_method == "draft_model":
        return load_model(params.speculative_draft_model or "", field=f"{field}.speculative_draft_model")
    return dataclasses.replace(model, name=f"{model.name} {params.speculative_method} head",
                               num_layers=params.speculative_draft_layers, first_k_dense=0, dense_layers=(),
                               adapter_rank=0, adapter_targets=(), value_head=False)


def refuse_unmodelled(model: ModelSpec, layout: Any, params: InferenceParams, layout_field: str) -> None:
    """RlsimError where speculation meets what an engine refuses (async scheduling) or the model does not
    price: pipeline stages, and a target whose KV pool has pages beside its tokens (sliding-window, Mamba or
    linear-attention layers)."""
    field = f"{inference_field(layout_field)}.speculative_method"
    if params.async_scheduling:
        raise RlsimError("speculative decoding with async scheduling: vLLM 0.11 refuses it (engine/arg_utils.py: "
                         "'Currently, speculative decoding is not supported with async scheduling'), SGLang turns its "
                         "overlap scheduler off for it (the named SGLang engines do)",
                         field=f"{inference_field(layout_field)}.async_scheduling",
                         fix=f"set {inference_field(layout_field)}.async_scheduling: false, or remove {field}")
    if layout.pp > 1:
        raise RlsimError("speculative decoding with pipeline stages is not modelled", field=field,
                         fix=f"give {layout_field}.pp 1, or remove {field}")
    if params.speculative_method == "mtp" and not model.mtp_layers:
        raise RlsimError(f"speculative_method mtp drafts with the target's multi-token-prediction modules, and "
                         f"{model.name} has none (its config.json num_nextn_predict_layers is 0 or absent)",
                         field=field, fix="use eagle, eagle3 or draft_model with a drafter for it, or a model "
                         "with MTP modules (DeepSeek-V3)")
    if model.num_sliding_layers or model.is_hybrid or model.num_linear_layers:
        raise RlsimError(f"speculative decoding on {model.name}, a model with sliding-window, Mamba or linear-attention "
                         "layers, is not modelled (the draft's pages beside its pool's groups)", field=field,
                         fix=f"remove {field}, or use a model of full attention")


@dataclass(frozen=True)
class Draft:
    """One device's share of the drafter and a speculative step's shape.

    ``k`` drafted tokens a sequence; ``verified`` = k + 1 positions the target scores a sequence;
    ``tokens`` E, the expected tokens a step yields a sequence; ``first_tokens`` the first draft
    forward's tokens a sequence (k + 1 padded, E not); ``draft_tokens`` = first_tokens + k - 1, the
    tokens the k draft forwards' layers take a sequence (their LM head k: one row a forward). Bytes and
    seconds are per device: ``resident_bytes`` the drafter's weights the engine holds beside the
    target's; ``dense_bytes`` / ``expert_bytes`` what a draft forward streams (its layers, fc and the LM
    head; the experts its tokens touch, ``route_p`` a token a device's expert); ``kv_bytes_per_token``
    its cache a context token; ``layer_s_per_token`` its layers' and fc's matmuls a token,
    ``head_s_per_token`` its LM head's a scored row; ``attn_s_per_ctx`` its attention a (query, context
    token) pair; ``launches`` an eager forward's kernel launches; ``lookahead`` the KV slots a running
    sequence holds beyond its context for its drafts."""

    model: ModelSpec
    k: int
    verified: int
    tokens: float
    first_tokens: float
    resident_bytes: float
    dense_bytes: float
    expert_bytes: float
    route_p: float
    kv_bytes_per_token: float
    layer_s_per_token: float
    head_s_per_token: float
    attn_s_per_ctx: float
    launches: float
    lookahead: int

    @property
    def draft_tokens(self) -> float:
        """The tokens the k draft forwards' layers take a sequence: the first's, then one each."""
        return self.first_tokens + self.k - 1

    @property
    def lin_s_per_token(self) -> float:
        """Its matmuls a token that its LM head scores too (a prefill's, as the target's lines count it)."""
        return self.layer_s_per_token + self.head_s_per_token


def build_draft(model: ModelSpec, layout: Any, params: InferenceParams, *, linear_rate: float, attn_rate: float,
                layout_field: str) -> Draft | None:
    """The drafter on one device of ``layout`` (tp x ep devices, one stage), None without speculation.
    Its weights as the target's: the non-expert part over tp, routed experts over tp x ep, in
    ``weight_dtype``; its KV heads over tp (replicated beyond them), in ``kv_dtype``."""
    if params.speculative_method is None or params.num_speculative_tokens < 1:
        return None
    field = inference_field(layout_field)
    draft = draft_model(model, params, field)
    tp, ep = layout.tp, layout.ep
    wbytes = dtype_bytes(layout.weight_dtype, f"{layout_field}.weight_dtype")
    kvbytes = dtype_bytes(layout.kv_dtype, f"{layout_field}.kv_dtype")
    fc_inputs = (DRAFT_FC_INPUTS[params.speculative_method] if params.speculative_draft_fc_inputs is None
                 else params.speculative_draft_fc_inputs)
    fc = fc_inputs * draft.hidden * draft.hidden
    head = params.speculative_method in HEAD_METHODS
    own_head = head and (DRAFT_OWN_LM_HEAD[params.speculative_method] if params.speculative_draft_own_lm_head is None
                         else params.speculative_draft_own_lm_head)
    # held: a head shares the target's embedding and, unless it has its own, its LM head; a draft model
    # holds both of its own
    shared = draft.params_embedding + (0 if own_head else draft.params_lm_head) if head else 0
    experts = draft.params_routed_experts
    dense = draft.params_total - experts
    resident = ((dense - shared + fc) / tp + experts / (tp * ep)) * wbytes
    # streamed a forward: all but the lookup tables (a step gathers a row a token; a tied head reads it)
    lookup_only = draft.params_embedding - (draft.vocab * draft.hidden if draft.tied_head else 0)
    kv_elems = (draft.kv_elems_per_token() if draft.is_mla
                else 2 * draft.num_attention_layers * max(draft.num_kv_heads // tp, 1) * draft.head_dim)
    k = params.num_speculative_tokens
    tokens = tokens_per_step(float(params.speculative_acceptance_rate or 0.0), k)
    launches = (params.launches_per_step + params.launches_per_layer * draft.num_layers
                + params.launches_per_moe_layer * draft.num_moe_layers)
    # the LM head's matmul a scored row (its table whether tied or not, and its bias)
    head_params = draft.params_lm_head + (draft.vocab * draft.hidden if draft.tied_head else 0)
    return Draft(model=draft, k=k, verified=k + 1, tokens=tokens,
                 first_tokens=tokens if params.speculative_disable_padded_drafter_batch else float(k + 1),
                 resident_bytes=resident, dense_bytes=(dense - lookup_only + fc) * wbytes / tp,
                 expert_bytes=experts * wbytes / (tp * ep),
                 route_p=draft.experts_per_token / draft.num_experts if draft.is_moe else 0.0,
                 kv_bytes_per_token=kv_elems * kvbytes,
                 layer_s_per_token=2.0 * (draft.params_compute - head_params + fc) / (tp * ep) / linear_rate,
                 head_s_per_token=2.0 * head_params / (tp * ep) / linear_rate,
                 attn_s_per_ctx=(draft.attention_flops_per_context_token(absorb_mla=params.absorb_mla)
                                 / (tp * ep) / attn_rate),
                 launches=launches, lookahead=lookahead_tokens(params))


def lookahead_tokens(params: InferenceParams) -> int:
    """The KV slots a running sequence holds beyond its context: speculative_lookahead_tokens, or vLLM's:
    a decoding request's step allocates computed + new + lookahead slots (kv_cache_manager.py
    allocate_slots), new = num_tokens_with_spec - num_computed_tokens = 1 + k (its sampled token, which
    is the context's next, and the k drafts it verifies: scheduler.py schedule), lookahead k for
    LOOKAHEAD_METHODS: 2 k beyond the context with an EAGLE-style drafter, k with a draft model."""
    if params.speculative_lookahead_tokens is not None:
        return params.speculative_lookahead_tokens
    k = params.num_speculative_tokens
    return k + (k if params.speculative_method in LOOKAHEAD_METHODS else 0)


@dataclass(frozen=True)
class DraftPool:
    """A full-attention target's KV pool (``base``: vLLM's or SGLang's, alike for full attention) with
    the drafter's cache beside it: each context token draws the target's KV and the draft's (vLLM V1
    gives the draft's attention layers pages in the same KV cache config as the target's,
    v1/worker/gpu_model_runner.py get_kv_cache_spec over every attention layer), so the pool holds
    free bytes // (both) tokens; a running sequence holds ``lookahead_tokens`` slots of both beyond its
    context (Draft.lookahead)."""

    base: Any
    draft_token_bytes: float
    lookahead_tokens: int = 0

    @property
    def token_bytes(self) -> float:
        return self.base.token_bytes + self.draft_token_bytes

    @property
    def state_bytes(self) -> float:
        return self.base.state_bytes

    @property
    def seq_bytes(self) -> float:
        return self.base.seq_bytes + self.lookahead_tokens * self.token_bytes

    @property
    def seq_tokens(self) -> int:
        return self.base.seq_tokens + self.lookahead_tokens

    @property
    def max_seqs(self) -> int | None:
        return self.base.max_seqs

    @property
    def capacity_tokens(self) -> int:
        return int(self.base.free_bytes // self.token_bytes)
