"""Sequences in flight and the per-round length draws every schedule shares."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import RlsimError
from ...scenario import Scenario
from ..costs import Ranks

# sampler(rng, n_prompts, samples_per_prompt, step) -> int array (n_prompts, samples_per_prompt)
Sampler = Callable[[np.random.Generator, int, int, int], np.ndarray]

# Group ids of round r start at r x this (a round never holds more prompts), so ids stay unique.
GROUP_IDS_PER_ROUND = 1_000_000
# Group ids of sequences that share no prefix (resumed ones): below every real group id.
UNSHARED_GROUP = -(10**12)


def prefix_groups(seqs: SeqBatch) -> np.ndarray:
    """The engine's prefix-cache group of each sequence: a prompt's samples share its prefill unless
    they resume with their own tokens (each its own group then)."""
    if not seqs.done_len.any():
        return seqs.group
    return np.where(seqs.done_len == 0, seqs.group, UNSHARED_GROUP - np.arange(len(seqs)))


@dataclass
class SeqBatch:
    """Sequences to generate (or resume) on one instance."""
    round: np.ndarray
    group: np.ndarray
    prompt_len: np.ndarray
    target_len: np.ndarray      # full response length
    done_len: np.ndarray        # tokens generated in earlier segments (partial rollout)
    first_version: np.ndarray
    drop_reason: np.ndarray     # '' or why the sample is dropped once generated (no_signal, surplus)

    @staticmethod
    def empty() -> SeqBatch:
        z = np.zeros(0, int)
        return SeqBatch(z, z, z, z, z, z, np.zeros(0, object))

    def fields(self) -> tuple[np.ndarray, ...]:
        """The field arrays in declaration order (SeqBatch(*fields()) is the same batch)."""
        return (self.round, self.group, self.prompt_len, self.target_len, self.done_len, self.first_version,
                self.drop_reason)

    def take(self, idx: np.ndarray) -> SeqBatch:
        return SeqBatch(self.round[idx], self.group[idx], self.prompt_len[idx], self.target_len[idx],
                        self.done_len[idx], self.first_version[idx], self.drop_reason[idx])

    @staticmethod
    def concat(a: SeqBatch, b: SeqBatch) -> SeqBatch:
        """a then b. Nothing before b with b's dtypes is b itself (fields are never written in place)."""
        if not len(a) and [x.dtype for x in a.fields()] == [y.dtype for y in b.fields()]:
            return b
        return SeqBatch(*(np.concatenate(pair) for pair in zip(a.fields(), b.fields(), strict=True)))

    @staticmethod
    def merge(batches: list[SeqBatch]) -> SeqBatch:
        """The batches end to end (one concatenation per field; dtypes as concat from empty() on)."""
        columns = zip(*(b.fields() for b in [SeqBatch.empty(), *batches]), strict=True)
        return SeqBatch(*(np.concatenate(column) for column in columns))

    def deal(self, n_parts: int) -> list[SeqBatch]:
        """Round-robin into ``n_parts``, one sequence at a time (carried / resumed sequences: each has
        its own tokens, nothing to share)."""
        return self.split_by(np.arange(len(self)) % n_parts, n_parts) if n_parts > 0 else []

    def split_by(self, part: np.ndarray, n_parts: int) -> list[SeqBatch]:
        """Part j holds the sequences with ``part == j`` (0 <= part < n_parts), in their order: the
        rows reordered once, each part a slice of them (views: SeqBatch fields are never written in
        place)."""
        order = np.argsort(part, kind="stable")
        whole = self.take(order).fields()
        bounds = np.concatenate([[0], np.cumsum(np.bincount(part, minlength=n_parts))]).tolist()
        return [SeqBatch(*(column[a:b] for column in whole)) for a, b in zip(bounds[:-1], bounds[1:], strict=False)]

    def __len__(self) -> int:
        return len(self.group)


def in_flight_figures(parts: list[tuple[SeqBatch, np.ndarray]]) -> dict[str, int]:
    """The summary's ``samples_in_flight`` of sequences started and not in the sample store at the
    run's end, ``parts``: (sequences, tokens each generated so far): the prompts with a trajectory
    among them, the trajectories and their tokens (these are in no other count), and ``cut``: those
    of them cut before and resumed, or waiting to be (tokens from an earlier segment: a length
    budget's, a StaleSync tail cut's, a weight update's), which never finished (metrics' note)."""
    groups = [seqs.group for seqs, _ in parts if len(seqs)]
    tokens = sum(int(np.sum(generated)) for seqs, generated in parts if len(seqs))
    cut = sum(int(np.count_nonzero(seqs.done_len)) for seqs, _ in parts if len(seqs))
    every = np.concatenate(groups) if groups else np.zeros(0, int)
    return {"prompts": int(len(np.unique(every))), "trajectories": int(len(every)), "generated_tokens": tokens,
            "cut": cut}


def prompt_index(group: np.ndarray) -> np.ndarray:
    """Each sequence's prompt number in order of first appearance (a round's samples of one prompt
    are drawn adjacent, so a new number starts wherever the group id changes)."""
    if not len(group):
        return np.zeros(0, int)
    return np.cumsum(np.concatenate([[0], group[1:] != group[:-1]]))


@dataclass
class GenPlan:
    """One instance's costed generation from ``t0`` (nothing committed yet)."""
    seqs: SeqBatch
    seg: np.ndarray          # tokens to generate this segment
    remaining: np.ndarray    # tokens left before this segment
    finish: np.ndarray       # seconds from t0
    start: np.ndarray        # seconds from t0
    flops: float
    t0: float
    version: int
    ranks: Ranks             # the instance's devices
    progress_at: Callable[[float], np.ndarray] | None = None
    # seconds from t0 through which its finished sequences are in the store already (an engine that
    # streams each out as it finishes: Generation.store_finished_by); the commit stores the rest
    stored_through: float = -math.inf
    streamed: bool = False   # its engine hands each sequence out as it finishes while it runs
    # committed at its end (a cut instance that does not stream): its samples leave the engine together then
    returns_together: bool = False
    # The engine run this plan is a stretch of, where that is not the plan itself (a plan that took
    # sequences while it ran, or the continuation of one cut at a weight load: Generation.admit,
    # segments.continuation): the run's requests, this plan's rows among them and the run's engine
    # seconds at this plan's t0. None: the plan's own sequences, all added at its t0.
    root: RootRun | None = None
    root_rows: np.ndarray | None = None
    root_offset: float = 0.0
    # the engine run's RolloutOutcome.extend (more sequences joining it later), None where not kept
    extend: Callable[..., Any] | None = None
    # RolloutOutcome.engine_waits: (instance ranks, its engine's idle stretches, seconds from t0, cause)
    engine_waits: tuple[tuple[Any, np.ndarray, str], ...] = ()
    # RolloutOutcome.counts and .counts_at of the engine run (the root run's, seconds in it, where
    # the plan is a stretch of one): what its engines did beside their time; None: not accounted
    counts: dict[str, int] | None = None
    counts_at: Callable[[float], dict[str, int]] | None = None
    # tokens the engine prefills for each sequence when it starts it in this plan (what ``flops``
    # counts beside ``seg``); None: its prompt and the tokens it resumes with (prompt_len + done_len).
    # A continuation's sequences that ran before its cut prefill nothing (their KV is kept)
    prefill: np.ndarray | None = None

    @property
    def end_s(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0

    def prefill_tokens(self) -> np.ndarray:
        """The tokens the engine prefills for each sequence as it starts it in this plan."""
        return self.seqs.prompt_len + self.seqs.done_len if self.prefill is None else self.prefill

    def flops_through(self, generated: np.ndarray, cut: np.ndarray | None) -> float:
        """The plan's FLOPs through a commit that leaves ``generated`` tokens in each sequence,
        ``cut`` (None: none) those it stopped: ``flops`` uncut; cut, what the engine computed by then -
        the prefill of each sequence that produced a token (a prefill ends with its first one) and the
        tokens generated - at the plan's own FLOPs per token computed (flops / (prefills + seg): the
        costs' per-token law at the run's mean context, LlmCosts._rollout_inputs). The cut sequences'
        rest is charged where it runs: a resumed plan (prefilled again) or a continuation."""
        if cut is None or not cut.any():
            return self.flops
        prefill = self.prefill_tokens()
        planned = float(prefill.sum()) + float(self.seg.sum())
        if planned <= 0:
            return 0.0
        started = ~cut | (generated > 0)
        return self.flops * ((float(prefill[started].sum()) + float(generated.sum())) / planned)

    def flops_per_token(self) -> float:
        """The plan's FLOPs per token computed: flops / (prefills + seg), the costs' per-token law at
        the run's mean context (LlmCosts._rollout_inputs); 0 for a plan of no tokens."""
        planned = float(self.prefill_tokens().sum()) + float(self.seg.sum())
        return self.flops / planned if planned > 0 else 0.0

    def engine_run(self) -> tuple[RootRun, np.ndarray]:
        """(the engine run this plan is a stretch of, this plan's rows in it)."""
        if self.root is not None and self.root_rows is not None:
            return self.root, self.root_rows
        run = RootRun(self.seqs, self.seqs.prompt_len + self.seqs.done_len, self.seg, prefix_groups(self.seqs),
                      np.zeros(len(self.seqs)), self.flops, self.extend)
        return run, np.arange(len(self.seqs))


@dataclass(frozen=True)
class RootRun:
    """One engine run as it was asked for: every sequence added to it, in add order, with what the
    engine prefills at its admission (prompt + tokens it resumes with), the tokens it is to generate,
    its prefix-cache group, the engine seconds at which it joined the queue, the run's FLOPs and,
    where the costs keep it, how to add more sequences to the run (RolloutOutcome.extend)."""
    seqs: SeqBatch
    prompts: np.ndarray
    segs: np.ndarray
    groups: np.ndarray
    arrivals: np.ndarray
    flops: float
    extend: Callable[..., Any] | None = None


def draw_lengths(rng: np.random.Generator, prompt_sampler: Sampler, response_sampler: Sampler, n_prompts: int,
                 n: int, step: int, max_model_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """One draw: prompt lengths (n_prompts, 1) and response lengths (n_prompts, n). The engine stops a
    response at max_model_len - prompt tokens (vLLM max_model_len; NeMo RL: T-max): cut here, so
    generation, training and every count see the same sample."""
    prompt = np.asarray(prompt_sampler(rng, n_prompts, 1, step), int).reshape(n_prompts, 1)
    resp = np.asarray(response_sampler(rng, n_prompts, n, step), int).reshape(n_prompts, n)
    if max_model_len is None:
        return prompt, resp
    if int(prompt.max()) >= max_model_len:
        raise RlsimError(f"a {int(prompt.max())}-token prompt leaves no room under max_model_len {max_model_len}",
                         field="workload.inference.max_model_len",
                         fix="raise max_model_len above workload.prompt_length.max, or lower that max")
    return prompt, np.minimum(resp, max_model_len - prompt)


# Rounds whose drawn sequences RoundDraws holds (the most recently asked); an older round asked
# again is drawn anew from the generator state saved before its first draw (the same numbers).
# Memory, not a model: a round of the default scenario is ~0.5 MiB, and a run of N rounds held
# them all (issue 13: memory flat over iterations). Any value >= 1 gives the same results.
KEEP_ROUNDS = 4


class RoundDraws:
    """Each round's new sequences, drawn once and in round order from the run's generator, so every
    schedule sees the same lengths whatever order it asks in. The last KEEP_ROUNDS rounds asked are
    held; an older one is re-drawn from the generator state its first draw started from."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator, prompt_sampler: Sampler,
                 response_sampler: Sampler):
        self.workload, self.schedule, self.rng = scenario.workload, scenario.schedule, rng
        self.source = scenario.source
        self.prompt_sampler, self.response_sampler = prompt_sampler, response_sampler
        self._draws: dict[int, SeqBatch] = {}      # held rounds, least recently asked first
        self._states: list[dict] = []              # generator state before round q's first draw
        self._shares: dict[tuple[int, int], list[SeqBatch]] = {}   # (held round, instances): its shares
        # (held round, instances): each dynamic-sampling sub-round's shares, in generation order
        self._sub_shares: dict[tuple[int, int], list[list[SeqBatch]]] = {}

    def draw(self, round_: int) -> SeqBatch:
        for q in range(len(self._states), round_ + 1):
            self._states.append(self.rng.bit_generator.state)
            self._hold(q, self._draw_new(q, self.rng))
        batch = self._draws.pop(round_, None)
        if batch is None:
            replay = np.random.Generator(type(self.rng.bit_generator)())
            replay.bit_generator.state = self._states[round_]
            batch = self._draw_new(round_, replay)
        self._hold(round_, batch)
        return batch

    def _hold(self, round_: int, batch: SeqBatch) -> None:
        self._draws.pop(round_, None)
        self._draws[round_] = batch
        while len(self._draws) > KEEP_ROUNDS:
            del self._draws[next(iter(self._draws))]
        for held in (self._shares, self._sub_shares):
            for key in [key for key in held if key[0] not in self._draws]:
                del held[key]

    def sub_rounds(self, round_: int) -> list[SeqBatch]:
        """The round's dynamic-sampling sub-rounds in generation order (one part without dynamic
        sampling): sub-round j holds the groups offset j x gen_prompts .. (j + 1) x gen_prompts - 1
        from the round's first group id (_draw_new numbers them so)."""
        batch = self.draw(round_)
        sampling = self.workload.dynamic_sampling
        if sampling is None or not len(batch):
            return [batch]
        gen = sampling.gen_prompts or math.ceil(self.workload.prompts_per_step / sampling.keep_fraction)
        sub = (batch.group - round_ * GROUP_IDS_PER_ROUND) // gen
        return [batch.take(np.flatnonzero(sub == j)) for j in range(int(sub.max()) + 1)]

    def share(self, round_: int, instance: int, n_instances: int) -> SeqBatch:
        """Instance ``instance``'s share of a round under ``workload.inference.dispatch`` (the same in
        every schedule): ``per-prompt`` deals whole prompts round-robin (prompt j of the round, in
        draw order, to instance j mod n), ``per-sample`` deals every sequence round-robin."""
        batch = self.draw(round_)     # held now, with the shares dealt from it (the same sequences)
        shares = self._shares.get((round_, n_instances))
        if shares is None:
            shares = self._shares[round_, n_instances] = self.deal_all(batch, n_instances)
        return shares[instance]

    def sub_round_shares(self, round_: int, n_instances: int) -> list[list[SeqBatch]]:
        """Every instance's share of each sub-round of a round (sub_rounds, each dealt as share deals a
        round), dealt once per round and instance count: ``[sub-round][instance]``."""
        self.draw(round_)             # held now, with the shares dealt from it
        shares = self._sub_shares.get((round_, n_instances))
        if shares is None:
            shares = self._sub_shares[round_, n_instances] = [self.deal_all(part, n_instances)
                                                              for part in self.sub_rounds(round_)]
        return shares

    def deal_all(self, batch: SeqBatch, n_instances: int) -> list[SeqBatch]:
        """Every instance's part of ``batch`` under the dispatch policy (see share), in instance order."""
        if self.workload.inference.dispatch == "per-sample":
            return batch.deal(n_instances)
        return batch.split_by(prompt_index(batch.group) % n_instances, n_instances)

    def _gave_up(self, round_: int, kept: int, gen: int) -> None:
        """The framework stops the run: the step's generation batches are spent, its batch not full."""
        sampling, prompts = self.workload.dynamic_sampling, self.workload.prompts_per_step
        raise RlsimError(
            f"step {round_}: after {sampling.max_gen_batches} generation batch{'es' if sampling.max_gen_batches > 1 else ''} "
            f"of {gen} prompts only {kept} of "
            f"the {prompts} groups needed carried a reward signal (keep_fraction {sampling.keep_fraction:g}); "
            "verl and NeMo RL stop the run here", source=self.source,
            field="workload.dynamic_sampling.max_gen_batches",
            fix="raise max_gen_batches or remove it (no cap), or raise gen_prompts / keep_fraction")

    def _sample_groups(self, rng: np.random.Generator, round_: int, n_prompts: int,
                       group0: int) -> tuple[np.ndarray, ...]:
        n = self.workload.samples_per_prompt
        prompt, resp = draw_lengths(rng, self.prompt_sampler, self.response_sampler, n_prompts, n, round_,
                                    self.workload.inference.max_model_len)
        group = np.repeat(np.arange(group0, group0 + n_prompts), n)
        return group, np.repeat(prompt[:, 0], n), resp.reshape(-1)

    def _draw_new(self, round_: int, rng: np.random.Generator) -> SeqBatch:
        prompts, n = self.workload.prompts_per_step, self.workload.samples_per_prompt
        sampling = self.workload.dynamic_sampling
        parts, reasons = [], []
        group0 = round_ * GROUP_IDS_PER_ROUND
        if sampling is None:
            n_prompts = math.ceil(prompts * (1 + self.schedule.overprovision))
            parts.append(self._sample_groups(rng, round_, n_prompts, group0))
            reasons.append(np.full(n_prompts * n, "", object))
        else:  # DAPO: sub-rounds of gen_prompts until P groups carry a signal; surplus kept groups dropped
            gen = sampling.gen_prompts or math.ceil(prompts / sampling.keep_fraction)
            kept = 0
            while kept < prompts:
                if sampling.max_gen_batches is not None and len(parts) == sampling.max_gen_batches:
                    self._gave_up(round_, kept, gen)
                part = self._sample_groups(rng, round_, gen, group0 + sum(len(x[0]) // n for x in parts))
                signal = rng.random(gen) < sampling.keep_fraction
                reason = np.where(signal, "", "no_signal").astype(object)
                for j in np.flatnonzero(signal):
                    if kept >= prompts:
                        reason[j] = "surplus"
                    kept += 1
                parts.append(part)
                reasons.append(np.repeat(reason, n))
        group, prompt, resp = (np.concatenate([x[i] for x in parts]) for i in range(3))
        k = len(group)
        return SeqBatch(np.full(k, round_), group, prompt, resp, np.zeros(k, int), np.zeros(k, int),
                        np.concatenate(reasons))
