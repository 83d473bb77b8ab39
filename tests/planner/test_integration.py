"""The planner on the real cost models (llm/training.py, llm/inference.py, network/collectives.py)."""
from __future__ import annotations

import json

import pytest

from simulator import cli
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.train_presets import MEGATRON_2021
from simulator.planner import SearchSpace, plan_rollout, plan_training
from simulator.planner.evaluate import TrainingEvaluator
from simulator.planner.placement import aware_placements, forced_placement
from simulator.planner.rollout import RolloutSpace
from simulator.planner.search import TrainChoice
from simulator.validation.megatron import predict_row

# The 145.6B row of Megatron Table 1 (arXiv 2104.04473): 1,536 A100, batch 2304 x 2048, 148 TFLOP/s
# per GPU published at tp 8, pp 8. The planner searches with the same 2021 software as the V1
# validation case: one shared definition, llm.train_presets.MEGATRON_2021.
PUBLISHED_145B_TFLOPS = 148.0


@pytest.fixture(scope="module")
def megatron_145b():
    topo = load_topology("dgx-a100", {"nodes": 192})
    model = load_model("gpt-145.6b")
    evaluator = TrainingEvaluator.for_software(model, topo, 2304, 2048, MEGATRON_2021)
    plan = plan_training(model, topo, 2304, 2048, space=SearchSpace(**MEGATRON_2021.search_limits()),
                         evaluator=evaluator, top=3)
    published = predict_row("gpt-145.6b", 8, 8, 1536, 2304)  # the V1 case's own prediction
    return plan, published


def test_megatron_145b_plan_is_at_least_as_fast_as_the_published_layout(megatron_145b):
    plan, published = megatron_145b
    best = plan.best
    assert best.choice.recompute == "full" and best.choice.zero == 0 and best.choice.cp == 1
    assert best.evaluation.step_time_s <= published.step_time_s * (1 + 1e-12)
    assert best.evaluation.tflops_per_device >= published.tflops_per_device * (1 - 1e-12)
    assert (best.choice.tp, best.choice.pp) == (8, 8) and best.tp_level == "node"


# Measured: the best planned layout (tp8 pp8 vpp2 mb1, the published shape) predicts 162.3 TFLOP/s,
# +9.7% vs 148 (+10.7% before the shape-aware GEMM model of issue 6; the V1 rows with PP > 1 run
# 8-12% high, docs/validation.md). Deterministic, but the margin to the 10% bound is 0.3 points.
def test_megatron_145b_plan_predicts_the_published_tflops_within_10_percent(megatron_145b):
    plan, _ = megatron_145b
    assert plan.best.evaluation.tflops_per_device == pytest.approx(PUBLISHED_145B_TFLOPS, rel=0.10)


def test_tp_across_nodes_is_slower_and_never_picked_unless_forced():
    topo = load_topology("dgx-h100", {"nodes": 16})
    model = load_model("gpt-18.4b")
    ev = TrainingEvaluator(model, topo, 256, 2048)
    c = TrainChoice(8, 1, 1, 16, 1, 1, 1, "full", 1)
    inside = ev(c, aware_placements(topo, range(128), 8, 1, 16, 1)[0].ranks)
    across = ev(c, forced_placement(range(128), ("dp", "cp", "pp", "tp"), 8, 1, 16, 1).ranks)
    assert topo.shared_level(list(forced_placement(range(128), ("dp", "cp", "pp", "tp"), 8, 1, 16, 1).ranks[:8])) \
        == "cluster"
    assert across.step_time_s > inside.step_time_s
    space = SearchSpace(tp=[1, 2, 4, 8, 16], pp=[1, 2], vpp=[1], cp=[1], zero=[1], recompute=["full"],
                        micro_batch=[1])
    plan = plan_training(model, topo, 256, 2048, space=space, top=5)
    assert all(cand.tp_level in ("device", "node") for cand in plan.candidates)
    forced = plan_training(model, topo, 256, 2048, space=space.model_copy(update={"tp": [16]}), top=1)
    assert forced.best.tp_level == "cluster"
    assert forced.best.evaluation.step_time_s > plan.best.evaluation.step_time_s


def test_rollout_plan_ranks_layouts_and_respects_memory():
    topo = load_topology("dgx-h100", {"nodes": 1})
    model = load_model("llama3.1-70b")
    space = RolloutSpace(sequences=64, prompt_len=256, response_len=256)
    plan = plan_rollout(model, topo, space=space, top=10)
    times = [c.evaluation.step_time_s for c in plan.candidates]
    assert times == sorted(times)
    assert all(c.layout["tp"] >= 2 for c in plan.candidates)  # 141 GB of bf16 weights need >= 2 H100s
    assert plan.pruned.get("infeasible:rollout_layout", 0) >= 1
    best = plan.candidates[0].to_json()
    assert set(best["layout"]) == {"tp", "ep", "instances", "max_num_seqs"}


def test_rollout_plan_weighs_pipeline_stages_when_asked():
    """planner.rollout.pp: engines of tp x pp GPUs (instances = devices / (tp x ep x pp)); no more
    stages than layers; the default [1] plans as before (no pp key)."""
    topo = load_topology("dgx-h100", {"nodes": 2})
    model = load_model("llama3.1-70b")   # 80 layers
    space = RolloutSpace(sequences=64, prompt_len=256, response_len=256, tp=[4, 8], pp=[1, 2, 4, 128])
    plan = plan_rollout(model, topo, space=space)
    staged = {(c.layout["tp"], c.layout.get("pp", 1)): c for c in plan.candidates}
    assert set(staged) == {(4, 1), (4, 2), (4, 4), (8, 1), (8, 2)}   # 8 x 4 > 16 devices
    assert staged[(8, 2)].layout["instances"] == 1 and staged[(4, 2)].layout["instances"] == 2
    assert staged[(8, 2)].devices == staged[(4, 1)].devices == 16
    assert plan.pruned["pp_layers"] == 2 and plan.pruned["devices"] == 1
    # a decode-bound batch: a stage streams its weights once a micro-batch, so stages across the
    # nodes read more a step than TP across them and the one-node engines win
    assert staged[(8, 2)].evaluation.step_time_s > staged[(8, 1)].evaluation.step_time_s
    flat = plan_rollout(model, topo, space=RolloutSpace(sequences=64, prompt_len=256, response_len=256, tp=[8]))
    assert [c.layout for c in flat.candidates] == [{"tp": 8, "ep": 1, "instances": 2, "max_num_seqs": 256}]


def test_cli_plan_json_contract(capsys):
    rc = cli.main(["plan", "--topology", "dgx-h100", "--set", "topology.nodes=1", "--model", "llama3.1-8b",
                   "--global-batch", "64", "--seq-len", "2048", "--stage", "train", "--top", "2", "--json",
                   "--set", "planner.space.micro_batch=[1]", "--set", "planner.space.vpp=[1]"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2
    for key in ("layout", "step_time_s", "tflops_per_device", "mfu", "memory_per_device_bytes", "comm_fraction"):
        assert key in rows[0]
    assert set(rows[0]["layout"]) >= {"tp", "pp", "vpp", "dp", "ep", "cp", "zero", "recompute", "micro_batch"}
    assert rows[0]["step_time_s"] <= rows[1]["step_time_s"]


@pytest.mark.parametrize("argv", [
    ["--model", "llama3.1-8b", "--global-batch", "64", "--seq-len", "2048", "--set", "planner.space.tp=[x]"],
    ["--model", "llama3.1-8b", "--global-batch", "64", "--seq-len", "2048", "--set", "planner.bogus=1"],
    ["--model", "llama3.1-8b", "--global-batch", "0", "--seq-len", "2048"],
    ["--model", "llama3.1-405b", "--global-batch", "64", "--seq-len", "2048", "--set", "planner.space.tp=[1]",
     "--set", "planner.space.pp=[1]"],
])
def test_cli_plan_bad_input_exits_2(argv, capsys):
    assert cli.main(["plan", "--topology", "dgx-h100", *argv]) == 2
    err = capsys.readouterr().err
    assert "rlsim: error" in err and "Traceback" not in err


def test_the_planner_holds_what_megatrons_cpu_offloaded_optimizer_leaves_on_the_device():
    """The planner's memory check is the trainer's: under Megatron-Core's optimizer_cpu_offload
    (offload.optimizer, scope optimizer_step) the offloaded optimizer state is not on the device, so
    Llama-3.1-8B unsharded on 8 H100s (18 B a parameter: 144 GB) fits once its optimizer lives on the host."""
    from simulator.errors import RlsimError
    from simulator.llm.training import TrainParams
    from simulator.params import OffloadParams

    topo, model = load_topology("dgx-h100", {"nodes": 1}), load_model("llama3.1-8b")
    c = TrainChoice(1, 1, 1, 8, 1, 1, 0, "full", 1)
    with pytest.raises(RlsimError, match="does not fit|needs"):
        TrainingEvaluator(model, topo, 64, 2048)(c, range(8))
    hosted = TrainParams(offload=OffloadParams(optimizer=True, scope="optimizer_step"))
    result = TrainingEvaluator(model, topo, 64, 2048, params=hosted)(c, range(8))
    assert result.memory_per_device_bytes < 80e9


def test_plan_to_target_takes_the_fewest_nodes_that_reach_it_where_more_nodes_are_slower(tmp_path, capsys):
    """A binary search assumed more nodes are never slower: 6 DGX H100 nodes answered 48 devices
    where 32 reach the target (40 do not divide the batch), and on H100 + A100 the whole cluster,
    paced by its A100s, fell short where the H100 node alone reaches it (a topology trial)."""
    import yaml

    from simulator.cli import main
    from simulator.planner.search import plan_to_target

    assert main(["plan", "--topology", "dgx-h100", "--set", "topology.nodes=6", "--model", "llama3.1-8b",
                 "--global-batch", "256", "--seq-len", "4096", "--target-tokens-per-s", "350000", "--top", "1"]) == 0
    assert "answer: 32 devices reach 350,000 training tokens/s" in capsys.readouterr().out
    preset = yaml.safe_load(open("topologies/hetero-a100-h100.yaml"))
    path = tmp_path / "h100-first.yaml"
    path.write_text(yaml.safe_dump({**preset, "groups": {k: preset["groups"][k] for k in ("h100", "a100")}},
                                   sort_keys=False))
    topo, model = load_topology(str(path)), load_model("llama3.1-8b")
    whole = plan_training(model, topo, 256, 4096, top=1).best.tokens_per_s
    plan = plan_to_target(model, topo, 256, 4096, whole * 1.2, top=1)
    assert plan.best.devices == 8 and plan.best.tokens_per_s >= whole * 1.2


@pytest.mark.parametrize("method", [None, "eagle", "draft_model"])
def test_a_rollout_layout_whose_kv_pool_fills_reports_the_engines_share_of_hbm(method):
    """The planner's memory of a rollout layout whose KV pool fills is the engine's whole share
    (HBM x gpu_memory_utilization): weights, workspace, the pool, and with speculative decoding the
    drafter's weights, which StepCost takes from the pool. It reported the share less the drafter's
    weights (an EAGLE head on Qwen2.5-7B: 0.52 GB; a Qwen2.5-0.5B draft model: 0.99 GB)."""
    from simulator.llm.inference import InferenceParams
    from simulator.planner.base import RolloutSpace
    from simulator.planner.evaluate import RolloutEvaluator

    topo, model = load_topology("dgx-h100", {"nodes": 1}), load_model("qwen2.5-7b")
    spec = ({} if method is None else {"speculative_method": method, "num_speculative_tokens": 3,
                                       "speculative_acceptance_rate": 0.7})
    if method == "draft_model":
        spec["speculative_draft_model"] = "qwen2.5-0.5b"
    # 64 sequences of 2048 tokens need 7.5 GB of KV; 0.25 of an H100 leaves ~4 GB beside the weights
    space = RolloutSpace(sequences=64, prompt_len=1024, response_len=1024, gpu_memory_utilization=0.25)
    evaluate = RolloutEvaluator(model, topo, space, params=InferenceParams(**spec))
    lay = {"tp": 1, "ep": 1, "instances": 1, "max_num_seqs": 64}
    result = evaluate(lay, [0])
    assert result.memory_per_device_bytes == pytest.approx(topo.device_spec(0).hbm_bytes * 0.25, rel=1e-12)
