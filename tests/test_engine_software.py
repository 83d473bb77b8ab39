"""Named rollout engines (workload.engine, simulator/engine_software.py): an engine's defaults under the
workload's own keys, resolved by the GPU's memory as vLLM resolves them, honoured by run and plan."""
import dataclasses
import json

import numpy as np
import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.engine_software import ENGINE_SOFTWARE, engine_values, resolved
from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.llm.architecture import load_model
from simulator.llm.inference import RolloutLayout, simulate_rollout
from simulator.params import InferenceParams
from simulator.scenario import load_scenario


def _scenario(engine=None, topology=None, inference=None, rollout_layout=None, **extra):
    workload = {"model": "llama3.1-8b", "prompts_per_step": 8, "samples_per_prompt": 4,
                "rollout_layout": {"tp": 1} if rollout_layout is None else rollout_layout}
    if engine:
        workload["engine"] = engine
    if inference is not None:
        workload["inference"] = inference
    return {"topology": topology or {"preset": "dgx-h100", "nodes": 1}, "workload": {**workload, **extra},
            "iterations": 1}


H100 = get_device("h100")
LLAMA_8B = load_model("llama3.1-8b")   # _scenario's model


def _sized(hbm_bytes: float, name: str = "gpu"):
    return dataclasses.replace(H100, hbm_bytes=hbm_bytes, name=name, description=name)


def test_vllm_v1_defaults_follow_the_gpu_memory():
    line = 70 * 2**30   # vLLM's "device_memory >= 70 * GiB_bytes"
    big, big_layout = engine_values("vllm-v1", [_sized(line)], None)
    small, small_layout = engine_values("vllm-v1", [_sized(line - 1)], None)
    assert (big["max_num_batched_tokens"], big_layout["max_num_seqs"]) == (16384, 1024)
    assert (small["max_num_batched_tokens"], small_layout["max_num_seqs"]) == (8192, 256)
    assert big["chunked_prefill"] and small["chunked_prefill"]
    # one device under the line sets the values for all (they must fit every rollout device)
    assert engine_values("vllm-v1", [_sized(line), _sized(line - 1)], None)[1]["max_num_seqs"] == 256


@pytest.mark.parametrize("engine, seqs", [("vllm-v1", 256), ("vllm-0.8", 1024)])
def test_an_a100_80gb_takes_vllm_small_set_from_0_9(engine, seqs):
    """vLLM >= 0.9 gives an A100 the small set at any memory ('"a100" not in device_name'); 0.8.x
    looks at the memory only."""
    a100 = get_device("a100-80gb")
    assert a100.hbm_bytes >= 70 * 2**30
    inference, layout = engine_values(engine, [a100], None)
    assert layout["max_num_seqs"] == seqs
    assert inference["max_num_batched_tokens"] == (8192 if seqs == 256 else 16384)


def test_async_engine_defaults_by_vllm_version():
    """AsyncLLM: 128 running sequences from vLLM 0.9 (the scheduler's default), 0.8.x's one table
    for every usage context (1024 on an H100); both the scheduler's 2048-token budget."""
    new, new_layout = engine_values("vllm-v1-async", [H100], None)
    old, old_layout = engine_values("vllm-0.8-async", [H100], None)
    assert (new_layout["max_num_seqs"], old_layout["max_num_seqs"]) == (128, 1024)
    assert new["max_num_batched_tokens"] == old["max_num_batched_tokens"] == 2048
    assert new["cuda_graph_max_batch"] == 2 * 128   # min(2 x max_num_seqs, 512)


def test_vllm_serve_takes_its_server_set():
    """`vllm serve` (usage context OPENAI_API_SERVER): 8192 tokens / 1024 sequences at >= 70 GiB, not on
    an A100; 2048 / 256 otherwise; the LLM class's CUDA-graph rule."""
    line = 70 * 2**30
    big, big_layout = engine_values("vllm-v1-server", [_sized(line)], None)
    small, small_layout = engine_values("vllm-v1-server", [_sized(line - 1)], None)
    a100, a100_layout = engine_values("vllm-v1-server", [get_device("a100-80gb")], None)
    assert (big["max_num_batched_tokens"], big_layout["max_num_seqs"]) == (8192, 1024)
    assert (small["max_num_batched_tokens"], small_layout["max_num_seqs"]) == (2048, 256)
    assert (a100["max_num_batched_tokens"], a100_layout["max_num_seqs"]) == (2048, 256)
    assert big["chunked_prefill"] and big["cuda_graph_max_batch"] == 512 and small["cuda_graph_max_batch"] == 512


@pytest.mark.parametrize("topology, device, tokens, seqs", [({"preset": "dgx-h100", "nodes": 1}, "h100", 16384, 1024),
                                                            ({"preset": "ascend-910b", "nodes": 1}, "ascend-910b2",
                                                             8192, 256)])
def test_the_engine_resolves_on_the_rollout_devices(topology, device, tokens, seqs):
    workload = load_scenario(_scenario("vllm-v1", topology, rollout_layout={"tp": 8})).workload
    assert workload.inference.max_num_batched_tokens is None        # left to the device
    inference, layout = resolved(workload.engine, workload.inference, workload.rollout_layout,
                                 [get_device(device)])
    assert (inference.max_num_batched_tokens, layout["max_num_seqs"]) == (tokens, seqs)
    run = simulate(_scenario("vllm-v1", topology, rollout_layout={"tp": 8}, train_layout={"tp": 8, "pp": 1}))
    assert run.summary["layouts"]["rollout"]["max_num_seqs"] == seqs


def test_given_keys_win_over_the_engine():
    workload = load_scenario(_scenario("vllm-v1", inference={"max_num_batched_tokens": 4096, "chunked_prefill": False},
                                       rollout_layout={"tp": 1, "max_num_seqs": 64})).workload
    inference, layout = resolved(workload.engine, workload.inference, workload.rollout_layout, [H100])
    assert (inference.max_num_batched_tokens, inference.chunked_prefill, layout["max_num_seqs"]) == (4096, False, 64)


def test_inference_params_instance_keeps_its_given_fields_only():
    workload = load_scenario(_scenario("vllm-v1-async", inference=InferenceParams(enforce_eager=True))).workload
    assert workload.inference.enforce_eager is True
    assert workload.inference.max_num_batched_tokens == 2048   # not the unset field's None


def test_no_engine_keeps_rlsim_defaults():
    sc = load_scenario(_scenario())
    assert sc.workload.engine is None
    assert sc.workload.inference == InferenceParams()
    assert "max_num_seqs" not in sc.workload.rollout_layout


def test_vllm_v0_prefill_budget_is_the_sequence_cap_or_2048():
    assert engine_values("vllm-v0", [H100], 4096)[0]["max_num_batched_tokens"] == 4096
    assert engine_values("vllm-v0", [H100], 1024)[0]["max_num_batched_tokens"] == 2048
    assert "max_num_batched_tokens" not in engine_values("vllm-v0", [H100], None)[0]
    sc = load_scenario(_scenario("vllm-v0", inference={"max_model_len": 4096}))
    assert (sc.workload.inference.max_num_batched_tokens, sc.workload.inference.enable_prefix_caching) == (4096, False)


@pytest.mark.parametrize("name", sorted(ENGINE_SOFTWARE))
def test_snapshot_reloads_to_the_same_engine_values(name):
    sc = load_scenario(_scenario(name, inference={"max_model_len": 4096}))
    again = load_scenario(sc.to_dict())
    for workload in (sc.workload, again.workload):   # the device-dependent fields still left to the device
        assert resolved(workload.engine, workload.inference, workload.rollout_layout, [H100]) == \
            resolved(sc.workload.engine, sc.workload.inference, sc.workload.rollout_layout, [H100])
    assert again.workload.rollout_layout == sc.workload.rollout_layout


def test_unknown_engine_is_refused_with_the_field_and_the_names():
    with pytest.raises(RlsimError) as err:
        load_scenario(_scenario("vllm-0.99"))
    assert "workload.engine" in str(err.value) and "vllm-v1" in str(err.value)


def test_cli_unknown_engine_exits_2(capsys):
    assert main(["plan", "--stage", "rollout", "--set", "workload.engine=tensorrt-llm"]) == 2
    err = capsys.readouterr().err
    assert "workload.engine" in err and "Traceback" not in err


def test_run_with_auto_rollout_layout_uses_the_engine_sequence_cap():
    base = _scenario("vllm-v1-async", rollout_layout="auto")
    assert simulate(base).summary["layouts"]["rollout"]["max_num_seqs"] == 128
    assert simulate({**base, "planner": {"rollout": {"max_num_seqs": [64]}}}
                    ).summary["layouts"]["rollout"]["max_num_seqs"] == 64


def test_plan_rollout_searches_the_engine_sequence_cap(capsys):
    args = ["plan", "--stage", "rollout", "--topology", "dgx-h100", "--model", "qwen2.5-7b", "--top", "3", "--json"]
    assert main([*args, "--set", "workload.engine=vllm-v1-async"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["layout"]["max_num_seqs"] for r in rows} == {128}


def _makespan(engine: str, sequences: int) -> float:
    # one step budget for both engines, so only the running-sequence cap differs
    workload = load_scenario(_scenario(engine, inference={"max_num_batched_tokens": 16384})).workload
    h100 = get_device("h100")
    inference, layout = resolved(workload.engine, workload.inference, workload.rollout_layout, [h100])
    result = simulate_rollout(load_model("llama3.1-8b"), h100, RolloutLayout(**layout),
                              np.full(sequences, 64), np.full(sequences, 512), params=inference)
    assert result.preemptions == 0
    return result.makespan_s


def test_engine_sequence_cap_bounds_the_running_batch():
    """Equal sequences with ample KV: vllm-v1-async (128 running) runs 256 of them as two waves of
    128, each a copy of vllm-v1 running 128, while vllm-v1 (1024 running) runs all 256 at once."""
    wave = _makespan("vllm-v1", 128)
    assert _makespan("vllm-v1-async", 256) == pytest.approx(2 * wave, rel=1e-9)
    assert _makespan("vllm-v1", 256) < 1.9 * wave


@pytest.mark.parametrize("hbm_mib, tokens, graphs", [(24_000, 2048, 160), (25_000, 8192, 160),
                                                      (96 * 1024, 8192, 160), (96 * 1024 + 1, 8192, 256)])
def test_sglang_defaults_follow_its_memory_lines(hbm_mib, tokens, graphs):
    """SGLang 0.4.6 ServerArgs: chunked_prefill_size 2048 under 25,000 MiB, else 8192; CUDA graphs up
    to 160 requests, 256 above 96 GiB; 2048 running requests (the request pool's floor); prefill in
    blocking steps (no mixed chunk), radix cache, overlap scheduler, no workspace inside the static
    memory fraction."""
    inference, layout = engine_values("sglang", [_sized(hbm_mib * 2**20)], None)
    assert (inference["max_num_batched_tokens"], inference["cuda_graph_max_batch"]) == (tokens, graphs)
    assert layout["max_num_seqs"] == 2048
    assert not inference["chunked_prefill"] and inference["enable_prefix_caching"] and inference["async_scheduling"]
    assert inference["workspace_bytes"] == 0


def test_sglang_static_fraction_holds_weights_and_kv_only():
    """The KV pool of an sglang engine is the vLLM one's plus the workspace vLLM keeps inside its
    gpu_memory_utilization (the same fraction of the same GPU)."""
    from simulator.llm.inference import StepCost

    model = load_model("llama3.1-8b")
    kv = {}
    for engine in ("vllm-v1", "sglang"):
        workload = load_scenario(_scenario(engine)).workload
        inference, layout = resolved(workload.engine, workload.inference, workload.rollout_layout, [H100])
        cost = StepCost(model, H100, RolloutLayout(**{**layout, "gpu_memory_utilization": 0.5}), inference)
        kv[engine] = cost.kv_free_bytes_dev
    assert kv["sglang"] - kv["vllm-v1"] == pytest.approx(InferenceParams().workspace_bytes)


@pytest.mark.parametrize("hbm_mib, tokens, graphs", [(34 * 1024, 2048, 8), (35 * 1024, 8192, 160),
                                                      (90 * 1024 + 1, 8192, 256), (160_000 + 1, 8192, 512),
                                                      (160 * 1024, 16384, 512)])
def test_sglang_052_memory_lines(hbm_mib, tokens, graphs):
    """SGLang 0.5.2 (verl 0.6.0): chunked_prefill_size 2048 under 35 GiB, 8192 under 160 GiB, 16384
    above; CUDA graphs up to 160 requests, 256 above 90 GiB, 512 above 160,000 MiB (8 under 35 GiB);
    the 0.4.6 scheduler otherwise."""
    inference, layout = engine_values("sglang-0.5.2", [_sized(hbm_mib * 2**20)], None)
    assert (inference["max_num_batched_tokens"], inference["cuda_graph_max_batch"]) == (tokens, graphs)
    assert layout["max_num_seqs"] == 2048 and inference["admission"] == "reserve"


@pytest.mark.parametrize("hbm_gib, tp, tokens, graphs", [(40, 2, 4096, 32), (40, 4, 4096, 160), (80, 1, 8192, 256),
                                                          (80, 2, 8192, 256), (80, 4, 8192, 512), (141, 8, 8192, 512),
                                                          (180, 1, 16384, 512)])
def test_sglang_056_lines_follow_memory_and_tp(hbm_gib, tp, tokens, graphs):
    """SGLang 0.5.6 (verl 0.7.0) picks its CUDA-graph cap by GPU memory and TP size: on an 80 GiB GPU
    256 requests below TP 4 and 512 from it; 4096-token prefill chunks under 60 GiB."""
    inference, _ = engine_values("sglang-0.5.6", [_sized(hbm_gib * 2**30)], None, tp=tp)
    assert (inference["max_num_batched_tokens"], inference["cuda_graph_max_batch"]) == (tokens, graphs)


def test_layout_dependent_engine_resolves_at_the_runs_layout_and_per_planner_candidate():
    """A run resolves SGLang 0.5.6 at its rollout layout's TP size; the planner's rollout evaluator
    at each candidate's (autoplan.engine_rollout's per-TP constants), under a user's own key."""
    from simulator.autoplan import engine_rollout
    from simulator.hardware.topology import load_topology
    from simulator.planner.base import RolloutSpace
    from simulator.rl.llm_costs import LlmCosts

    for tp, graphs in ((2, 256), (4, 512)):
        sc = load_scenario(_scenario("sglang-0.5.6", rollout_layout={"tp": tp}))
        assert LlmCosts(sc, load_topology(sc.topology)).inference_params.cuda_graph_max_batch == graphs
    sc = load_scenario(_scenario("sglang-0.5.6"))
    topology = load_topology(sc.topology)
    _space, inference, at_layout = engine_rollout(sc.workload, LLAMA_8B, topology, range(8), RolloutSpace(), set())
    assert inference.cuda_graph_max_batch == 256
    assert (at_layout(2, 2048).cuda_graph_max_batch, at_layout(4, 2048).cuda_graph_max_batch) == (256, 512)
    given = load_scenario(_scenario("sglang-0.5.6", inference={"cuda_graph_max_batch": 64})).workload
    assert engine_rollout(given, LLAMA_8B, topology, range(8), RolloutSpace(), set())[2](4, 2048).cuda_graph_max_batch == 64
    # SGLang 0.4.6: by memory only, but its overlap scheduler is off with pipeline stages
    at_stages = engine_rollout(load_scenario(_scenario("sglang")).workload, LLAMA_8B, topology, range(8), RolloutSpace(),
                               set())[2]
    assert at_stages(2, 2048).async_scheduling and not at_stages(2, 2048, 2).async_scheduling
    assert at_stages(2, 2048).cuda_graph_max_batch == at_stages(4, 2048).cuda_graph_max_batch


def _graph_cap(engine, rollout_layout, inference=None):
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts

    sc = load_scenario(_scenario(engine, rollout_layout=rollout_layout, inference=inference))
    return LlmCosts(sc, load_topology(sc.topology)).inference_params.cuda_graph_max_batch


@pytest.mark.parametrize("engine, layout, inference, graphs", [
    ("vllm-v1", {"tp": 1}, None, 512),                                   # 1024 running on an H100
    ("vllm-v1", {"tp": 1, "max_num_seqs": 64}, None, 128),               # min(2 x 64, 512)
    ("vllm-v1", {"tp": 1, "max_num_seqs": 100}, None, 200),              # a multiple of 8
    ("vllm-v1", {"tp": 1, "max_num_seqs": 64}, {"max_num_batched_tokens": 100}, 96),   # within the budget
    ("vllm-v1-async", {"tp": 1}, None, 256),                             # 128 running
    ("vllm-v1-async", {"tp": 1, "max_num_seqs": 400}, None, 512),
    ("vllm-0.8", {"tp": 1, "max_num_seqs": 64}, None, 512),              # 0.8: not bound by the cap
    ("vllm-0.8-async", {"tp": 1}, None, 512),                            # its 2048-token budget
    ("vllm-v1", {"tp": 1, "max_num_seqs": 64}, {"cuda_graph_max_batch": 32}, 32),      # given: wins
])
def test_vllm_graph_cap_follows_the_running_cap_and_budget(engine, layout, inference, graphs):
    """vLLM 0.9-0.11 capture CUDA graphs for [1, 2, 4] + multiples of 8 up to min(2 x max_num_seqs,
    512), those within max_num_batched_tokens (config/scheduler.py, config/__init__.py); vLLM 0.8 up
    to 512 within the budget. The run resolves them at its own caps."""
    assert _graph_cap(engine, layout, inference) == graphs


def test_graph_cap_stays_unset_in_the_snapshot_and_resolves_on_reload():
    sc = load_scenario(_scenario("vllm-v1", rollout_layout={"tp": 1, "max_num_seqs": 64}))
    assert "cuda_graph_max_batch" not in sc.to_dict()["workload"]["inference"]
    assert load_scenario(sc.to_dict()).workload.inference == sc.workload.inference


@pytest.mark.parametrize("engine", sorted(ENGINE_SOFTWARE))
def test_named_engines_use_their_custom_all_reduce(engine):
    """vLLM and SGLang start with their own TP all-reduce (disable_custom_all_reduce is off by
    default in both); rlsim's own defaults keep NCCL."""
    assert engine_values(engine, [H100], None)[0]["custom_all_reduce"] is True
    assert InferenceParams().custom_all_reduce is False


def test_engine_resolves_at_the_planners_auto_layout():
    """With rollout_layout auto, the engine's layout-dependent values follow the layout the planner
    chose (LlmCosts resolves after taking it): vLLM's graph cap from its running cap, SGLang 0.5.6's
    from its TP size."""
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts

    for engine, chosen, graphs in (("vllm-v1-async", {"tp": 1, "ep": 1, "max_num_seqs": 64}, 128),
                                   ("sglang-0.5.6", {"tp": 4, "ep": 1, "max_num_seqs": 2048}, 512)):
        sc = load_scenario(_scenario(engine, rollout_layout="auto"))
        costs = LlmCosts(sc, load_topology(sc.topology), auto_layouts={"rollout": chosen})
        assert costs.inference_params.cuda_graph_max_batch == graphs


@pytest.mark.parametrize("engine", sorted(ENGINE_SOFTWARE))
def test_a_tp_the_layout_refuses_is_its_error_under_every_engine(engine, capsys):
    # vllm-v1 / vllm-0.8 took no tier at tp 0 and failed on a KeyError (found by fuzzing)
    argv = ["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--set", f"workload.engine={engine}",
            "--set", "workload.rollout_layout.tp=0", "--set", "iterations=2"]
    assert main(argv) == 2
    assert "field 'workload.rollout_layout.tp'" in capsys.readouterr().err


def test_sglangs_overlap_scheduler_is_off_with_pipeline_stages_and_vllms_pair_is_refused():
    """SGLang turns its overlap scheduler off when pp_size > 1 (srt/server_args.py); vLLM refuses
    async scheduling with pipeline stages, so a given pair is an error naming the stages."""
    staged = load_scenario(_scenario("sglang", rollout_layout={"tp": 1, "pp": 2})).workload
    inference, _ = resolved(staged.engine, staged.inference, staged.rollout_layout, [H100])
    assert inference.async_scheduling is False
    flat = load_scenario(_scenario("sglang")).workload
    assert resolved(flat.engine, flat.inference, flat.rollout_layout, [H100])[0].async_scheduling is True
    # (0.8: the default 0.9 leaves no room for the actor's and the reference's weights on its devices)
    assert simulate(_scenario("sglang", rollout_layout={"tp": 1, "pp": 2, "gpu_memory_utilization": 0.8})
                    ).summary["layouts"]["rollout"]["pp"] == 2
    with pytest.raises(RlsimError) as err:
        simulate(_scenario(inference={"async_scheduling": True}, rollout_layout={"tp": 1, "pp": 2}))
    assert err.value.field == "workload.rollout_layout.pp"
