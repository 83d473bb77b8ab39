"""A model served by inference engines on devices of its own, which prefills each sample sent to it:
a distillation teacher (workload.distillation) or a reward model (workload.reward.served).

verl 0.9's teacher loop sends each finished sample to a teacher engine as one request: its whole
sequence (prompt and response) as the prompt, max_tokens 1 and prompt_logprobs (the sampled token's
log-probability, or the top-k), so the engine runs a prefill of the sequence and a log-probability
pass over the vocabulary at every position, and no decode step (its one token comes out of the
prefill). Its reward loop sends each to a reward-model engine's /classify (vLLM's pooling runner):
the same prefill through the model under its score head (hidden x 1), the score of the last
position read, and no log-probability pass. What a sample costs the pool, priced with the rollout
engine's step model (inference.StepCost) on the served model and layout:

- ``pool_s``: its share of engine time when the engines run full steps of samples like it. A step
  holds ``step_tokens`` tokens: the engine's token budget (max_num_batched_tokens; without chunked
  prefill the whole prompts that fit in it) or, with none, max_num_seqs whole sequences. A step of
  samples of L tokens holds step_tokens / L of them with their L (L + 1) / 2 attention pairs each,
  so the sample takes L / step_tokens of that step, plus its log-probability pass. Over the pool's
  instances, divided by their count (the fluid pool of rl/schedules/reward_pool.py serves it).
- ``alone_s``: its latency on an idle instance (the floor of its wait): its prefill as one request
  (in budget-sized chunks with chunked prefill) and its log-probability pass.

The log-probability pass is memory-bound: vocabulary x ``bytes_per_logit`` bytes per token on every
device of an attention replica (the logits are gathered over TP; every rank samples); 0 for a
reward model. Its FLOPs are the prefill's: the LM head already runs at every position in StepCost's
prefill (a score head's are negligible).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import RlsimError
from .architecture import ModelSpec
from .inference import StepCost


class ServedCost(NamedTuple):
    pool_s: np.ndarray    # each sample's seconds of the whole pool, at full steps
    alone_s: np.ndarray   # each sample's latency on an idle instance
    flops: np.ndarray     # each sample's FLOPs (the prefill's matmuls and attention)


class ServedScoring:
    """The per-sample costs of one served pool: ``instances`` engines of ``cost``'s layout."""

    def __init__(self, cost: StepCost, instances: int, bytes_per_logit: float) -> None:
        self.cost, self.instances = cost, int(instances)
        model: ModelSpec = cost.model
        self.logprob_s_per_token = model.vocab * bytes_per_logit / cost.bw / cost.layout.ep
        self.matmul_flops_per_token = 2.0 * model.params_compute
        self.attention_flops_per_pair = model.attention_flops_per_context_token()

    def check_fits(self, longest: float, what: str, field: str, source: str | None = None) -> None:
        """A sample of ``longest`` tokens must fit one instance's KV cache (an attention replica's)."""
        capacity, pages = self.cost.kv_capacity_replica, self.cost.seq_kv_tokens
        if longest + pages > capacity:
            beside = f" and {self.cost.seq_kv_what} ({pages:,} tokens' worth)" if pages else ""
            raise RlsimError(f"the {what}'s KV cache holds {capacity:,.0f} tokens per engine, less than the longest "
                             f"sample ({longest:,.0f} prompt + response tokens{beside}), which it must prefill whole",
                             source=source, field=field,
                             fix=f"give the {what} a larger tp (layout.tp) or gpu_memory_utilization")

    def each(self, prompt_lens: Any, response_lens: Any) -> ServedCost:
        lens = np.asarray(prompt_lens, np.int64) + np.asarray(response_lens, np.int64)
        if not len(lens):
            return ServedCost(np.zeros(0), np.zeros(0), np.zeros(0))
        lens = np.maximum(lens, 1)
        pairs = lens * (lens + 1) / 2.0
        step_tokens = self._step_tokens(lens)
        in_step = step_tokens / lens
        step_s = self.cost.prefill_many_s(step_tokens, in_step * pairs, in_step)
        logprob_s = lens * self.logprob_s_per_token
        pool_s = (step_s * lens / step_tokens + logprob_s) / self.instances
        alone_s = self._alone_s(lens, pairs) + logprob_s
        flops = lens * self.matmul_flops_per_token + self.cost.windowed_pairs(lens, pairs) * self.attention_flops_per_pair
        return ServedCost(pool_s, alone_s, flops)

    def _step_tokens(self, lens: np.ndarray) -> np.ndarray:
        """Tokens in a full step of samples of these lengths (see the module docstring)."""
        params, layout = self.cost.params, self.cost.layout
        budget = params.max_num_batched_tokens
        if budget is None:
            return lens * (layout.max_num_seqs * layout.ep)
        if params.chunked_prefill:
            return np.full(len(lens), budget, np.int64)
        return np.maximum(lens, (budget // lens) * lens)

    def _alone_s(self, lens: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Each sample's prefill as the engine's only request: one step, or with chunked prefill
        ceil(L / budget) steps of an equal share of its tokens and pairs each."""
        params = self.cost.params
        budget = params.max_num_batched_tokens
        if budget is None or not params.chunked_prefill:
            return self.cost.prefill_many_s(lens, pairs, np.ones(len(lens)))
        steps = np.ceil(lens / budget)
        return steps * self.cost.prefill_many_s(lens / steps, pairs / steps, 1.0 / steps)
