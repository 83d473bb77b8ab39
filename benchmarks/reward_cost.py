"""What one rule reward costs on a host CPU: the scorers NeMo RL and verl run, timed per sample.

`workload.reward.cpu_s_per_sample` was an assumption (0.05 s, "a sympy-style check"). This script
times the checks themselves on synthetic chain-of-thought responses (prose with inline LaTeX, about
half the tokens inside `$...$`, ending in the answer the scorer looks for), each response a fresh
string (the scorers cache their parses), on one CPU thread:
- `math-verify`: Hugging Face Math-Verify as NeMo RL's math environment calls it (HFVerifyWorker,
  cited from memory of nemo_rl/environments/math_environment.py: `math_metric` with a LaTeX gold
  target and expression + LaTeX prediction targets, the gold wrapped in `\\boxed{}`), one call per
  sample. Needs `pip install math-verify`.
- `verl-naive`: verl's NaiveRewardManager.__call__ over a DataProto batch as the colocated trainer
  hands it over (left-padded prompts, right-padded responses to the response cap): per sample it
  indexes the batch, sums the masks, decodes prompt and response with the tokenizer and runs
  default_compute_score (math_dapo here, the DAPO recipes' data source). Needs verl (its wheel,
  `pip install --no-deps verl`), tensordict, transformers, omegaconf; ray is named only in type
  hints of verl.protocol and is stubbed when absent. The tokenizer is a byte-level BPE trained here
  on the same synthetic text (no model's vocabulary is reachable offline).
A response either ends with its answer ("finished") or stops at the length cap without one
("capped": Math-Verify then searches the whole text for a candidate). For each scorer and kind it
fits seconds = a + b x response tokens over 250 - 8000 tokens and prints the `--set` line.

    python benchmarks/reward_cost.py                       # every scorer installed (~1 min)
    python benchmarks/reward_cost.py --scorer math-verify --samples 20
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from speed_reference import reference_ms

LENGTHS = (250, 1000, 3000, 8000)
WORDS = ("we have the then so let compute since therefore note that equation value sum product term "
         "gives substitute both sides divide multiply").split()
EQUATION_TOKENS = 12          # tokens of one inline equation as the text below writes it (~20 characters)
MATH_SHARE = 0.5              # share of a response's tokens inside $...$


def response_text(rng: np.random.Generator, tokens: int) -> str:
    """Prose with inline equations, about ``tokens`` tokens long (a word ~1 token, an equation ~12)."""
    p_equation = MATH_SHARE / EQUATION_TOKENS / (1 - MATH_SHARE + MATH_SHARE / EQUATION_TOKENS)
    parts, count = [], 0
    while count < tokens:
        if rng.random() < p_equation:
            a, b = rng.integers(2, 100, 2)
            parts.append(f"${a}x^2 + {b}x = {a * b}$")
            count += EQUATION_TOKENS
        else:
            parts.append(str(rng.choice(WORDS)))
            count += 1
    return " ".join(parts)


def fit(lengths: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares seconds = a + b x tokens, both clipped at 0."""
    slope, intercept = np.polyfit(np.asarray(lengths, float), np.asarray(seconds, float), 1)
    return max(0.0, float(intercept)), max(0.0, float(slope))


@dataclass
class Scorer:
    """``prepare`` (untimed) turns responses and their answers into what ``score`` (timed) is handed."""
    prepare: Callable[[list[str], list[str]], Any]
    score: Callable[[Any], Any]


def math_verify_scorer() -> Scorer | None:
    try:
        import logging

        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    except ImportError:
        return None
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    verify = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                         pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))

    def score(batch: tuple[list[str], list[str]]) -> None:
        for response, answer in zip(*batch, strict=True):
            try:
                verify(["\\boxed{" + answer + "}"], [response])
            except Exception:  # noqa: BLE001 - NeMo RL scores a failed parse 0 and goes on
                pass
    return Scorer(lambda responses, answers: (responses, answers), score)


def _import_verl() -> tuple[type, type] | None:
    if importlib.util.find_spec("verl") is None:
        return None
    if importlib.util.find_spec("ray") is None:     # verl.protocol names ray.ObjectRef in a type hint
        ray = types.ModuleType("ray")
        ray.ObjectRef = object
        sys.modules["ray"] = ray
    try:
        from verl.protocol import DataProto
        from verl.workers.reward_manager.naive import NaiveRewardManager
    except ImportError as exc:
        print(f"verl-naive skipped: {exc}")
        return None
    return DataProto, NaiveRewardManager


def bpe_tokenizer(corpus: list[str]) -> Any:
    """A byte-level BPE (8000 tokens at most) trained on ``corpus``, as a transformers tokenizer: no
    model's vocabulary is reachable offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=8000, special_tokens=["<pad>"], show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>")


def verl_naive_scorer(rng: np.random.Generator) -> Scorer | None:
    found = _import_verl()
    if found is None:
        return None
    data_proto, manager_class = found
    import torch
    torch.set_num_threads(1)
    tokenizer = bpe_tokenizer([response_text(rng, 200) for _ in range(300)])
    manager = manager_class(tokenizer=tokenizer, num_examine=0)

    return Scorer(lambda responses, answers: _verl_batch(data_proto, tokenizer, rng, responses, answers),
                  lambda batch: manager(batch, return_dict=True))


def _verl_batch(data_proto: type, tokenizer, rng: np.random.Generator, responses: list[str],
                answers: list[str], prompt_cap: int = 512, response_cap: int = 8192):
    import torch
    n = len(responses)
    prompts = torch.zeros(n, prompt_cap, dtype=torch.long)
    outputs = torch.zeros(n, response_cap, dtype=torch.long)
    mask = torch.zeros(n, prompt_cap + response_cap, dtype=torch.long)
    for i, response in enumerate(responses):
        prompt = tokenizer.encode(response_text(rng, 100))[:prompt_cap]
        ids = tokenizer.encode(response)[:response_cap]
        prompts[i, prompt_cap - len(prompt):] = torch.tensor(prompt)
        outputs[i, :len(ids)] = torch.tensor(ids)
        mask[i, prompt_cap - len(prompt):prompt_cap + len(ids)] = 1
    return data_proto.from_dict(
        tensors={"prompts": prompts, "responses": outputs, "input_ids": torch.cat([prompts, outputs], 1),
                 "attention_mask": mask, "position_ids": torch.clamp(mask.cumsum(1) - 1, min=0),
                 "response_mask": mask[:, prompt_cap:]},
        non_tensors={"data_source": np.array(["math_dapo"] * n, object),
                     "reward_model": np.array([{"ground_truth": a, "style": "rule"} for a in answers], object),
                     "extra_info": np.array([{"index": i} for i in range(n)], object)})


def finished(rng: np.random.Generator, tokens: int, answer: str, scorer: str) -> str:
    """A response of ``tokens`` tokens that ends with its answer the way the scorer reads it."""
    ending = f" Answer: {answer}" if scorer == "verl-naive" else f" The answer is $\\boxed{{{answer}}}$."
    return response_text(rng, tokens) + ending


def time_scorer(name: str, scorer: Scorer, rng: np.random.Generator,
                samples: int) -> dict[str, dict[str, float | list[float]]]:
    """Seconds per sample at each length, finished and capped, and the fitted line of each."""
    scorer.score(scorer.prepare([finished(rng, 100, "1", name)], ["1"]))   # warm-up: imports, regexes
    out: dict[str, dict[str, float | list[float]]] = {}
    for kind in ("finished", "capped"):
        per_sample = []
        for tokens in LENGTHS:
            answers = [str(int(a)) for a in rng.integers(2, 10_000, samples)]
            texts = [finished(rng, tokens, a, name) if kind == "finished" else response_text(rng, tokens)
                     for a in answers]
            batch = scorer.prepare(texts, answers)
            start = time.process_time()
            scorer.score(batch)
            per_sample.append((time.process_time() - start) / samples)
        intercept, slope = fit(list(LENGTHS), per_sample)
        out[kind] = {"per_sample_s": per_sample, "cpu_s_per_sample": intercept, "cpu_s_per_token": slope}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scorer", choices=("math-verify", "verl-naive", "all"), default="all")
    parser.add_argument("--samples", type=int, default=40, help="responses per length and kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    makers = {"math-verify": lambda: math_verify_scorer(), "verl-naive": lambda: verl_naive_scorer(rng)}
    results: dict[str, object] = {"reference_ms": round(reference_ms(), 2), "lengths": list(LENGTHS)}
    for name in makers if args.scorer == "all" else (args.scorer,):
        scorer = makers[name]()
        if scorer is None:
            print(f"{name}: not installed ({'pip install math-verify' if name == 'math-verify' else 'verl and its deps'})"
                  " - skipped")
            continue
        results[name] = time_scorer(name, scorer, rng, args.samples)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"machine-speed reference: {results['reference_ms']} ms; one CPU thread; responses of "
          f"{', '.join(map(str, LENGTHS))} tokens")
    for name in makers:
        if name not in results:
            continue
        for kind, row in results[name].items():
            times = " ".join(f"{1e3 * s:.2f}" for s in row["per_sample_s"])
            print(f"{name:12s} {kind:9s} ms/sample {times}  fit {1e3 * row['cpu_s_per_sample']:.3f} ms + "
                  f"{1e6 * row['cpu_s_per_token']:.3f} us/token")
        fin, cap = results[name]["finished"], results[name]["capped"]
        print(f"  --set workload.reward.cpu_s_per_sample={fin['cpu_s_per_sample']:.2e} "
              f"--set workload.reward.cpu_s_per_token={fin['cpu_s_per_token']:.2e} "
              f"--set workload.reward.capped_cpu_s_per_sample={cap['cpu_s_per_sample']:.2e} "
              f"--set workload.reward.capped_cpu_s_per_token={cap['cpu_s_per_token']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
