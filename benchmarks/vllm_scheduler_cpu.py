"""The CPU share of a vLLM V1 decode step that runs without a GPU: its scheduler, timed per step.

`workload.inference.step_overhead_s` and `cpu_per_seq_s` are estimates (docs/cost-models-inference.md,
"beyond the roofline"). Part of what they stand for is pure Python and can be timed on any host:
vLLM V1's engine-core scheduler (vllm/v1/core/sched/scheduler.py), which each step picks the running
requests and allocates their KV blocks (`schedule()`), then appends each request's sampled token,
checks its stop conditions and builds the outputs (`update_from_output()`), and the outputs'
msgpack encoding for the front-end process (vllm/v1/serial_utils.py). This script runs the real
scheduler on the host with `running` requests decoding (prefix caching and chunked prefill on, the
LLM class's 16384-token budget), feeding it one sampled token per request and step as a model runner
would, and fits seconds = a + b x running over the decode steps. The model runner's own CPU work
(input preparation, CUDA-graph replay, the sampler's host copies) needs a GPU and is not in it.
It then times the front-end's share, which runs in its own process beside the engine core: vLLM's
OutputProcessor turning each step's outputs into RequestOutputs (incremental detokenization, the
cumulative output the LLM and AsyncLLM classes default to) and handing each to its request's
collector, per running request and step (a byte-level BPE trained here stands for the tokenizer).

Needs vLLM's wheel without its dependencies (`pip install --no-deps vllm==0.11.0`) and the pure-Python
packages its scheduler imports (the script names a missing one); its CUDA kernels are not loaded.

    python benchmarks/vllm_scheduler_cpu.py                  # ~20 s
    python benchmarks/vllm_scheduler_cpu.py --running 1 64 256 --steps 100
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from typing import Any

import numpy as np
from reward_cost import bpe_tokenizer
from speed_reference import reference_ms

RUNNING = (1, 16, 64, 128, 256, 512, 1024)
BLOCK = 16
MAX_MODEL_LEN = 8192


def _scheduler_parts() -> dict[str, Any] | None:
    """vLLM's scheduler and what feeding it takes, or None (printed why) where vLLM is not importable."""
    try:
        import torch
        from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig
        from vllm.sampling_params import SamplingParams
        from vllm.utils import sha256_cbor
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.serial_utils import MsgpackEncoder
    except ImportError as exc:   # vLLM absent, or one of its pure-Python imports
        print(f"vLLM's scheduler is not importable here ({exc}): pip install --no-deps vllm==0.11.0 and "
              "the package named - skipped")
        return None
    init_none_hash(sha256_cbor)
    return dict(torch=torch, CacheConfig=CacheConfig, ParallelConfig=ParallelConfig, SchedulerConfig=SchedulerConfig,
                SamplingParams=SamplingParams, Scheduler=Scheduler, FullAttentionSpec=FullAttentionSpec,
                KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
                Request=Request, encoder=MsgpackEncoder(), hasher=get_request_block_hasher(BLOCK, sha256_cbor))


def _scheduler(parts: dict[str, Any], blocks: int) -> Any:
    """A V1 scheduler as the LLM class configures it on an H100 (Llama-3.1-8B's KV: 8 heads of 128),
    with the configs it reads; the rest of a VllmConfig (model loading, devices) is not needed."""
    model = types.SimpleNamespace(is_encoder_decoder=False, max_model_len=MAX_MODEL_LEN, is_multimodal_model=False,
                                  uses_mrope=False, runner_type="generate")
    schedule = parts["SchedulerConfig"](max_num_seqs=1024, max_num_batched_tokens=16384, max_model_len=MAX_MODEL_LEN,
                                        enable_chunked_prefill=True)
    cache = parts["CacheConfig"](block_size=BLOCK, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto",
                                 enable_prefix_caching=True)
    cache.num_gpu_blocks = blocks
    config = types.SimpleNamespace(scheduler_config=schedule, cache_config=cache, lora_config=None,
                                   kv_events_config=None, parallel_config=parts["ParallelConfig"](), model_config=model,
                                   speculative_config=None, kv_transfer_config=None, structured_outputs_config=None)
    spec = parts["FullAttentionSpec"](block_size=BLOCK, num_kv_heads=8, head_size=128, dtype=parts["torch"].bfloat16)
    kv = parts["KVCacheConfig"](num_blocks=blocks, kv_cache_tensors=[],
                                kv_cache_groups=[parts["KVCacheGroupSpec"](["layers.0"], spec)])
    no_grammar = types.SimpleNamespace(should_advance=lambda request: False)
    return parts["Scheduler"](config, kv, structured_output_manager=no_grammar, log_stats=False)


def time_decode(parts: dict[str, Any], rng: np.random.Generator, running: int, steps: int,
                prompt: int = 128) -> dict[str, float]:
    """Mean seconds per decode step of schedule, update_from_output and the outputs' encoding, with
    ``running`` requests decoding (after their prefill and a few warm-up steps)."""
    scheduler = _scheduler(parts, blocks=running * (MAX_MODEL_LEN // BLOCK) + 1)
    for i in range(running):
        params = parts["SamplingParams"](max_tokens=MAX_MODEL_LEN - prompt, ignore_eos=True, temperature=1.0)
        scheduler.add_request(parts["Request"](str(i), rng.integers(0, 128_000, prompt).tolist(), params, None,
                                               eos_token_id=128_009, block_hasher=parts["hasher"]))
    totals = np.zeros(3)
    warm = 5
    for step in range(steps + warm):
        t0 = time.perf_counter()
        out = scheduler.schedule()
        t1 = time.perf_counter()
        ids = list(out.num_scheduled_tokens)
        sampled = [[int(token)] for token in rng.integers(0, 128_000, len(ids))]
        runner = parts["ModelRunnerOutput"](req_ids=ids, req_id_to_index={r: j for j, r in enumerate(ids)},
                                            sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                            pooler_output=[])
        t2 = time.perf_counter()
        outputs = scheduler.update_from_output(out, runner)
        t3 = time.perf_counter()
        for engine_outputs in outputs.values():
            parts["encoder"].encode(engine_outputs)
        t4 = time.perf_counter()
        if step >= warm:
            totals += (t1 - t0, t3 - t2, t4 - t3)
    schedule_s, update_s, encode_s = totals / steps
    return {"running": running, "schedule_s": schedule_s, "update_s": update_s, "encode_s": encode_s,
            "step_s": schedule_s + update_s + encode_s}


def time_frontend(rng: np.random.Generator, running: int, steps: int, tokenizer: Any) -> float | None:
    """Mean seconds per decode step of vLLM's OutputProcessor over ``running`` requests (cumulative
    outputs, detokenized), each step's outputs taken by their collectors; None without vLLM."""
    try:
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
        from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
    except ImportError:
        return None
    processor, collectors = OutputProcessor(tokenizer, log_stats=False), []
    vocab = tokenizer.vocab_size
    for i in range(running):
        params = SamplingParams(max_tokens=MAX_MODEL_LEN, output_kind=RequestOutputKind.CUMULATIVE, detokenize=True)
        request = EngineCoreRequest(str(i), rng.integers(2, vocab, 128).tolist(), None, params, None, 1, 0.0, None,
                                    None, None)
        collectors.append(RequestOutputCollector(output_kind=RequestOutputKind.CUMULATIVE))
        processor.add_request(request, None, None, 0, collectors[-1])
    total, warm = 0.0, 5
    for step in range(steps + warm):
        outputs = [EngineCoreOutput(str(i), [int(t)]) for i, t in enumerate(rng.integers(2, vocab, running))]
        start = time.perf_counter()
        processor.process_outputs(outputs)
        if step >= warm:
            total += time.perf_counter() - start
        for collector in collectors:
            collector.get_nowait()
    return total / steps


def _tokenizer(rng: np.random.Generator) -> Any:
    """A byte-level BPE trained on synthetic math prose (reward_cost.bpe_tokenizer)."""
    words = "we have the then so let compute since therefore note that equation value sum product".split()
    corpus = [" ".join(str(rng.choice(words)) if rng.random() > 0.1 else f"${rng.integers(2, 99)}x^2$"
                       for _ in range(300)) for _ in range(200)]
    return bpe_tokenizer(corpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, nargs="+", default=list(RUNNING))
    parser.add_argument("--steps", type=int, default=200, help="decode steps timed per point")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    reference = round(reference_ms(), 2)
    parts = _scheduler_parts()
    if parts is None:
        print(f"machine-speed reference: {reference} ms")
        return 0
    rng = np.random.default_rng(0)
    rows = [time_decode(parts, rng, n, args.steps) for n in args.running]
    tokenizer = _tokenizer(rng)
    for row in rows:
        row["frontend_s"] = time_frontend(rng, row["running"], args.steps, tokenizer)
    slope, intercept = (np.polyfit([r["running"] for r in rows], [r["step_s"] for r in rows], 1)
                        if len(rows) > 1 else (0.0, rows[0]["step_s"]))
    result = {"reference_ms": reference, "rows": rows, "fixed_s": float(intercept), "per_seq_s": float(slope)}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"machine-speed reference: {reference} ms; vLLM V1 scheduler, decode steps, one thread")
    for row in rows:
        print(f"running {row['running']:5d}: schedule {1e3 * row['schedule_s']:.3f} ms, update_from_output "
              f"{1e3 * row['update_s']:.3f} ms, encode {1e3 * row['encode_s']:.3f} ms; "
              f"{1e6 * row['step_s'] / row['running']:.1f} us a request; front-end "
              f"{1e6 * row['frontend_s'] / row['running']:.1f} us a request")
    print(f"fit: {1e3 * max(0.0, intercept):.3f} ms a step + {1e6 * slope:.2f} us a running request "
          f"(rlsim: step_overhead_s and cpu_per_seq_s hold this and the model runner's CPU work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
