"""Generation FLOPs from what the engines computed (RunTotals.gen_flops, gen_hardware_flops).

A plan's FLOPs (LlmCosts._rollout_inputs) price its prefills (prompt + the tokens a resumed sequence
brings) and its generated tokens at the costs' per-token law at the run's mean context; the engine's
counts over the committed stretch (generation.plan_counts) then say what it did not compute and what it
computed again:

- model FLOPs (the summary's mfu, as the trainer's MFU counts model_flops, not the recompute of
  hardware_flops: llm/training.py): the plan's FLOPs less the prompt tokens the prefix cache held
  (prompt_hit_tokens, at the plan's rate: the tokens were priced at it) and less a resumed partial
  rollout's re-prefill (its prompt and earlier tokens were charged when first computed);
- hardware FLOPs: model FLOPs plus every re-prefill: a resumption's (at the plan's rate), a
  preemption's (preemption_reprefill_tokens, at the law at half the preempted contexts' mean: a
  prefill of c tokens attends c / 2 on average) and a multi-turn eviction's (at the plan's rate).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...llm.inference import first_prefill_tokens

RESUME_KEY = "resume_reprefill_tokens"


def resumed_prefill(plan: Any, generated: np.ndarray, cut: np.ndarray | None) -> int:
    """Tokens the plan's resumed sequences (done_len > 0) prefilled again by a commit leaving
    ``generated`` tokens in each, ``cut`` those it stopped (None: none): the prefill of each that
    produced a token (as GenPlan.flops_through charges it). A continuation's sequences that kept
    their KV prefill nothing."""
    prefill = plan.prefill_tokens()
    resumed = plan.seqs.done_len > 0
    if cut is not None and cut.any():
        resumed = resumed & (~cut | (generated > 0))
    return int(prefill[resumed].sum())


def charged_flops(plan: Any, generated: np.ndarray, cut: np.ndarray | None, counts: dict[str, int] | None,
                  rollout_flops_per_token: Any) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of a plan's committed stretch: GenPlan.flops_through corrected
    by the engine's ``counts`` over the stretch (None: not counted, none corrected) and the plan's
    resumed re-prefill (module docstring). Model FLOPs never fall below the generated tokens' at
    the plan's rate (a hit counts at its admission, its prefill's token by the commit after it)."""
    base = plan.flops_through(generated, cut)
    rate = plan.flops_per_token()
    resumed = resumed_prefill(plan, generated, cut)
    counts = counts or {}
    hits = counts.get("prompt_hit_tokens", 0)
    model = max(base - rate * (hits + resumed), rate * float(np.sum(generated)))
    hardware = model + rate * (resumed + counts.get("eviction_reprefill_tokens", 0)) + _preemption_flops(
        counts, rollout_flops_per_token)
    return model, hardware


def _preemption_flops(counts: dict[str, int], rollout_flops_per_token: Any) -> float:
    """The re-prefills of preempted sequences (preemption_reprefill_tokens) at the per-token law at half
    their mean context (a prefill of c tokens attends c / 2 on average); 0 without preemptions."""
    preempted, preemptions = counts.get("preemption_reprefill_tokens", 0), counts.get("preemptions", 0)
    return preempted * rollout_flops_per_token(preempted / preemptions / 2) if preempted and preemptions else 0.0


def request_fed_flops(charged: float, tokens: float, prompts: float, counts: dict[str, int],
                      rollout_flops_per_token: Any) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of a request-fed run (verl-fully-async and its variants, AReaL)
    that charged ``charged`` FLOPs for the ``tokens`` (``prompts`` of them prompt tokens) of the
    trajectories it completed, with its engines' ``counts`` over the whole run: its engines' prompt
    hits and re-prefills (module docstring) at its mean rate, each scaled by the completed
    trajectories' share of the prompt tokens the engines were asked to prefill first (in-flight
    ones at the end are not charged)."""
    if tokens <= 0:
        return 0.0, 0.0
    rate = charged / tokens
    hits = counts.get("prompt_hit_tokens", 0)
    again = counts.get("eviction_reprefill_tokens", 0) + counts.get(RESUME_KEY, 0)
    asked = first_prefill_tokens(counts)
    share = min(1.0, prompts / asked) if asked > 0 else 0.0
    model = max(charged - rate * hits * share, rate * (tokens - prompts))
    return model, model + share * (rate * again + _preemption_flops(counts, rollout_flops_per_token))
