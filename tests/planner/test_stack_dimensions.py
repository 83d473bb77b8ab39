"""The parallel dimensions a training stack runs (params.TrainSoftware: tensor_parallel,
pipeline_parallel, context_parallel): the trainers on transformers' model code run no pipeline
stages, verl's and SkyRL's FSDP workers no TP, TRL's GRPOTrainer neither TP nor CP; NeMo RL's DTensor
policy, AReaL's FSDP engine and SkyRL's FSDP workers shard with FSDP2 only (ZeRO 3). The planner
offers only what the stack runs, and a run's layout the stack cannot run is refused."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.params import (
    ARCHON_PIPELINE_FSDP,
    AREAL_ARCHON,
    AREAL_FSDP,
    HF_TRANSFORMERS,
    HF_TRANSFORMERS_LIGER,
    MEGATRON_CORE,
    NEMO_RL_DTENSOR,
    SKYRL_FSDP,
    TRAIN_SOFTWARE,
    TRL_ACCELERATE,
    TRL_ACCELERATE_LIGER,
    VERL_FSDP,
    VERL_FSDP_LIGER,
)
from simulator.planner.replan import replan_on_failure
from simulator.planner.search import Evaluation, SearchSpace, TrainChoice
from simulator.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
VERL = str(EXAMPLES / "verl-grpo-qwen2.5-7b.yaml")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _dimensions(rows: list[dict]) -> set[tuple[int, int, int, int]]:
    return {(r["layout"]["tp"], r["layout"]["pp"], r["layout"]["vpp"], r["layout"]["cp"]) for r in rows}


def test_the_megatron_stacks_run_every_dimension_and_the_hf_stacks_no_pipeline():
    for name, stack in TRAIN_SOFTWARE.items():
        assert stack.pipeline_parallel is (name.startswith("megatron") or name == "areal-archon"), name
        assert stack.tensor_parallel is (name not in ("verl-fsdp", "verl-fsdp-liger", "skyrl-fsdp", "trl", "trl-liger"))
    assert not TRL_ACCELERATE.context_parallel and not TRL_ACCELERATE_LIGER.context_parallel
    assert VERL_FSDP.context_parallel and SKYRL_FSDP.context_parallel   # Ulysses
    assert HF_TRANSFORMERS.search_limits() == {"recompute": ["full", "none"], "zero": [3, 2, 1, 0], "pp": [1], "vpp": [1],
                                               "recompute_method": ["uniform"]}
    # verl's FSDP shards as ZeRO-3, or ZeRO-2 without reshard_after_forward (get_sharding_strategy)
    assert VERL_FSDP.search_limits() == {**HF_TRANSFORMERS.search_limits(), "tp": [1], "zero": [3, 2]}
    assert TRL_ACCELERATE.search_limits() == {**HF_TRANSFORMERS.search_limits(), "tp": [1], "cp": [1]}
    # FSDP2's fully_shard only: NeMo RL's DTensor policy and AReaL's FSDP engine with TP and CP, SkyRL's without TP
    assert NEMO_RL_DTENSOR.search_limits() == {**HF_TRANSFORMERS.search_limits(), "zero": [3]}
    assert AREAL_FSDP.search_limits() == {**HF_TRANSFORMERS.search_limits(), "zero": [3]}
    assert SKYRL_FSDP.search_limits() == {**HF_TRANSFORMERS.search_limits(), "tp": [1], "zero": [3]}
    assert AREAL_FSDP.sequence_parallel is None   # its TP plan shards the norms' sequence whenever t > 1
    # AReaL's archon engine: torchtitan's FSDP2 (ZeRO 3), TP, Ulysses cp and pipeline stages
    assert AREAL_ARCHON.search_limits() == {"recompute": ["full", "none"], "zero": [3], "recompute_method": ["uniform"]}
    assert AREAL_ARCHON.sequence_parallel is None and AREAL_ARCHON.lacked_dimension({"tp": 2, "pp": 2, "vpp": 2, "cp": 2}) is None
    assert MEGATRON_CORE.search_limits() == {"recompute": ["selective", "none", "full"], "zero": [1, 0, 2, 3],
                                             "recompute_method": ["uniform", "block"]}


def test_a_trainers_stack_prices_what_its_model_code_stack_prices():
    """The trainers' stacks differ from hf-transformers(-liger) in the dimensions they run only: an
    import naming them costs what it cost under hf-transformers."""
    for stack, base in ((VERL_FSDP, HF_TRANSFORMERS), (VERL_FSDP_LIGER, HF_TRANSFORMERS_LIGER),
                        (SKYRL_FSDP, HF_TRANSFORMERS), (TRL_ACCELERATE, HF_TRANSFORMERS),
                        (TRL_ACCELERATE_LIGER, HF_TRANSFORMERS_LIGER), (NEMO_RL_DTENSOR, HF_TRANSFORMERS),
                        (AREAL_FSDP, HF_TRANSFORMERS), (AREAL_ARCHON, HF_TRANSFORMERS)):
        differ = {f.name for f in dataclasses.fields(base) if getattr(stack, f.name) != getattr(base, f.name)}
        assert differ <= {"name", "source", "lacking_fix", "tensor_parallel", "context_parallel", "zero", "bounded",
                          "sequence_parallel", "pipeline_parallel", "expert_tensor_parallel",
                          "tied_pipeline_refusal", "params"}, stack.name
        assert stack.zero[0] == base.zero[0], stack.name   # a layout that gives no zero takes the same stage
        expected = base.params
        if stack is AREAL_ARCHON:   # torch's pipelining under FSDP2: read at pp > 1 only
            expected = base.params.model_copy(update={"memory": base.params.memory.model_copy(
                update=ARCHON_PIPELINE_FSDP)})
        assert stack.params == expected, stack.name


def test_the_search_space_keeps_to_the_stack():
    space = SearchSpace()
    assert space.pp is None and space.for_software(MEGATRON_CORE).pp is None   # every divisor, as before
    hf = space.for_software(HF_TRANSFORMERS)
    assert (hf.pp, hf.vpp, hf.tp, hf.cp) == ([1], [1], [1, 2, 4, 8, 16], [1, 2])
    verl = space.for_software(VERL_FSDP)
    assert (verl.tp, verl.cp) == ([1], [1, 2])
    with pytest.raises(RlsimError) as err:
        SearchSpace(pp=[2, 4]).for_software(HF_TRANSFORMERS)
    assert err.value.field == "planner.space.pp" and "no pipeline parallelism" in err.value.message
    assert "pp: 1" in err.value.fix and "megatron" in err.value.fix
    with pytest.raises(RlsimError) as err:
        SearchSpace(tp=[2]).for_software(VERL_FSDP)
    assert err.value.field == "planner.space.tp" and "actor.strategy=megatron" in err.value.fix


@pytest.mark.parametrize(("key", "value"), [("pp", 2), ("vpp", 2)])
def test_a_layout_the_stack_lacks_is_refused_naming_the_field(key, value):
    with pytest.raises(RlsimError) as err:
        HF_TRANSFORMERS.layout_fields(**{key: value})
    assert err.value.field == f"workload.train_layout.{key}" and "pp: 1 and vpp: 1" in err.value.fix
    assert HF_TRANSFORMERS.lacked_dimension({"tp": 4, "pp": 1, "vpp": 1, "cp": 2}) is None
    assert VERL_FSDP.lacked_dimension({"tp": 4}) == ("tp", "tp=4: verl-fsdp has no tensor parallelism")
    assert TRL_ACCELERATE.lacked_dimension({"cp": 2}) == ("cp", "cp=2: trl has no context parallelism")
    assert NEMO_RL_DTENSOR.lacked_dimension({"tp": 4, "cp": 2}) is None and AREAL_FSDP.lacked_dimension({"tp": 2}) is None


@pytest.mark.parametrize(("stack", "fix"), [(NEMO_RL_DTENSOR, "policy.megatron_cfg.enabled=true"),
                                            (AREAL_FSDP, "actor.backend=megatron:")])
def test_a_pipeline_on_the_fsdp2_trainers_is_refused_naming_their_megatron_backend(stack, fix):
    with pytest.raises(RlsimError) as err:
        stack.layout_fields(pp=2)
    assert err.value.field == "workload.train_layout.pp" and f"{stack.name} has no pipeline parallelism" in err.value.message
    assert "pp: 1 and vpp: 1" in err.value.fix and fix in err.value.fix


@pytest.mark.parametrize(("software", "key", "value", "runs"), [
    ("verl-fsdp", "zero", 1, "zero 3, 2 only"), ("verl-fsdp-liger", "zero", 0, "zero 3, 2 only"),
    ("verl-fsdp", "recompute", "selective", "recompute full, none only"),
    ("hf-transformers", "recompute", "selective", "recompute full, none only"),
    ("trl", "recompute", "selective", "recompute full, none only"),
    ("nemo-rl-dtensor", "zero", 2, "zero 3 only"), ("nemo-rl-dtensor", "recompute", "selective", "recompute full, none only"),
    ("areal-fsdp", "zero", 1, "zero 3 only"), ("skyrl-fsdp", "zero", 2, "zero 3 only"),
    ("areal-archon", "zero", 2, "zero 3 only"), ("areal-archon", "recompute", "selective", "recompute full, none only")])
def test_a_zero_stage_or_recompute_mode_the_stacks_trainer_has_not_is_refused_when_the_scenario_loads(
        software, key, value, runs):
    """The property test drew verl-fsdp at ZeRO 1 and hf-transformers with selective recompute: the runs went
    through, priced as what neither trainer does (the planner searches neither on the stack:
    SearchSpace.for_software). Refused naming the key and the stages or modes it has."""
    layout = {"tp": 1, "zero": 3, key: value}
    with pytest.raises(RlsimError) as err:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[f"workload.train_software={software}",
                                                             f"workload.train_layout={json.dumps(layout)}"])
    assert err.value.field == f"workload.train_layout.{key}" and f"{software} runs {runs}" in err.value.message
    assert f"set {key}: " in err.value.fix and "another workload.train_software" in err.value.fix
    layout[key] = TRAIN_SOFTWARE[software].zero[0] if key == "zero" else TRAIN_SOFTWARE[software].recompute[0]
    load_scenario(workload="grpo-qwen2.5-7b", overrides=[f"workload.train_software={software}",
                                                         f"workload.train_layout={json.dumps(layout)}"])


def test_the_megatron_2021_stacks_zero_0_stays_a_default():
    """The 2021 / 2022 Megatron stacks' ZeRO 0 (their papers' runs) is what they plan and default to, not a bound:
    the workload's ZeRO 1 beside them (a later Megatron-LM's distributed optimizer) still loads, as `rlsim plan
    --set workload.train_software=megatron-2021` needs (plan searches the layout, refusing a given one)."""
    assert "zero" not in TRAIN_SOFTWARE["megatron-2021"].bounded
    sc = load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.train_software=megatron-2021"])
    assert sc.workload.train_layout["zero"] == 1


def test_a_run_with_pp_2_on_hf_transformers_is_refused(capsys):
    code, _, err = cli(capsys, "run", "--set", "workload.train_software=hf-transformers",
                       "--set", "workload.train_layout.pp=2")
    assert code == 2
    assert "'workload.train_layout.pp'" in err and "hf-transformers has no pipeline parallelism" in err
    assert "set pp: 1 and vpp: 1" in err and "megatron-core" in err


def test_a_verl_fsdp_import_refuses_tp_and_plans_neither_tp_nor_pp(capsys):
    code, _, err = cli(capsys, "run", "--from-verl", VERL, "--set", "workload.train_layout.tp=2", "--iterations", "1")
    assert code == 2 and "verl-fsdp has no tensor parallelism" in err and "actor.strategy=megatron" in err
    code, out, err = cli(capsys, "plan", "--from-verl", VERL, "--top", "1000", "--json")
    assert code == 0, err
    # verl's FSDP workers: tp 1, pp 1, vpp 1, and Ulysses (cp 2) offered; ranked #1 was {tp 1, pp 2, vpp 2, cp 2}
    assert _dimensions(json.loads(out)) == {(1, 1, 1, 1), (1, 1, 1, 2)}


@pytest.mark.parametrize(("flag", "config", "dimensions"), [
    # DeepSpeed AutoTP (ds.tensor_parallel_size), no pipeline
    ("--from-openrlhf", "openrlhf-reinforce-qwen2.5-7b-hybrid.sh", {(1, 1, 1, 1), (2, 1, 1, 1), (4, 1, 1, 1)}),
    ("--from-trl", "trl-grpo-qwen2.5-1.5b-colocate.yaml", {(1, 1, 1, 1)}),   # no TP, no CP
    ("--from-skyrl", "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh", {(1, 1, 1, 1), (1, 1, 1, 2)})])   # Ulysses, no TP
def test_the_planners_rows_of_an_hf_stack_import_have_no_pipeline(capsys, flag, config, dimensions):
    code, out, err = cli(capsys, "plan", flag, str(EXAMPLES / config), "--top", "1000", "--json")
    assert code == 0, err
    assert _dimensions(json.loads(out)) == dimensions


@pytest.mark.parametrize(("flag", "config", "extra", "dimensions"), [
    # SkyRL: Ulysses, no TP (32 rows at ZeRO 0-3 before, ranked first ZeRO 2 at 5.52 s; 8 now, ZeRO 3 at 6.00 s)
    ("--from-skyrl", "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh", [], {(1, 1, 1, 1), (1, 1, 1, 2)}),
    # AReaL's fsdp:d4 on 4 GPUs: TP (its plan) and Ulysses (52 rows before, ZeRO 2 first at 10.48 s; 12, 11.14 s)
    ("--from-areal", "areal-grpo-qwen2.5-1.5b.yaml", [], {(1, 1, 1, 1), (1, 1, 1, 2), (2, 1, 1, 1)}),
    # NeMo RL's DTensor policy on 16 GPUs: TP up to a node and CP (104 rows before, ZeRO 2 first at 9.09 s; 28, 10.61 s)
    ("--from-nemo-rl", "nemo-rl-grpo-llama3.1-8b.yaml", ["policy.megatron_cfg.enabled=false",
                                                         "policy.dtensor_cfg.enabled=true"],
     {(1, 1, 1, 1), (1, 1, 1, 2), (2, 1, 1, 1), (2, 1, 1, 2), (4, 1, 1, 1), (4, 1, 1, 2), (8, 1, 1, 1)})])
def test_the_fsdp2_trainers_imports_plan_zero_3_only(capsys, flag, config, extra, dimensions):
    """NeMo RL's DTensor policy, AReaL's FSDP engine and SkyRL's FSDP workers shard with FSDP2's fully_shard
    only: their plans ranked ZeRO 2 first (hf-transformers' 0-2), which none of them runs."""
    code, out, err = cli(capsys, "plan", flag, str(EXAMPLES / config), *extra, "--top", "1000", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["layout"]["zero"] for r in rows} == {3}
    assert _dimensions(rows) == dimensions


@pytest.mark.parametrize("megatron", [["actor_rollout_ref.actor.strategy=megatron"],
                                      ["--set", "workload.train_software=megatron-core"]])
def test_a_megatron_stack_still_plans_pipelines(capsys, megatron):
    code, out, err = cli(capsys, "plan", "--from-verl", VERL, *megatron, "--top", "1000", "--json")
    assert code == 0, err
    dims = _dimensions(json.loads(out))
    assert any(pp > 1 for _, pp, _, _ in dims) and any(vpp > 1 for _, _, vpp, _ in dims)
    assert any(tp > 1 for tp, _, _, _ in dims)


def test_a_failure_replan_keeps_to_the_stacks_dimensions():
    """The running layout's neighbourhood lets pp move: an evaluator that favours pp 2 gets it on
    Megatron-Core, and pp 1 on hf-transformers, which runs no pipeline."""
    topo = load_topology("dgx-h100", {"nodes": 2})
    model = load_model("llama3.1-8b")

    def pipelines_pay(c: TrainChoice, ranks) -> Evaluation:
        return Evaluation(10.0 / c.pp, 1.0, 0.4, 1e9, 0.1)
    args = dict(failed=[15], current=TrainChoice(1, 1, 1, 8, 1, 1, 3, "full", 1), evaluator=pipelines_pay)
    assert replan_on_failure(model, topo, 64, 4096, software=MEGATRON_CORE, **args).layout["pp"] > 1
    assert replan_on_failure(model, topo, 64, 4096, **args).layout["pp"] > 1
    hf = replan_on_failure(model, topo, 64, 4096, software=HF_TRANSFORMERS, **args)
    assert (hf.layout["pp"], hf.layout["vpp"]) == (1, 1)


def test_a_failure_replan_keeps_to_the_stacks_zero_stages_and_recompute_modes():
    """The neighbourhood lets ZeRO 1-2 and every recompute mode move; verl's FSDP runs ZeRO 3 or 2 only
    (VERL_FSDP_ZERO) and the transformers stacks full recompute or none: an evaluator that favours
    ZeRO 1 and selective recompute gets them on Megatron-Core, ZeRO 2 on verl-fsdp, and no selective
    recompute on hf-transformers."""
    topo = load_topology("dgx-h100", {"nodes": 2})
    model = load_model("llama3.1-8b")
    seen: set[tuple[int, str]] = set()

    def low_zero_and_selective_pay(c: TrainChoice, ranks) -> Evaluation:
        seen.add((c.zero, c.recompute))
        return Evaluation(10.0 + c.zero - 5 * (c.recompute == "selective"), 1.0, 0.4, 1e9, 0.1)
    args = dict(failed=[15], current=TrainChoice(1, 1, 1, 8, 1, 1, 3, "full", 1),
                evaluator=low_zero_and_selective_pay)
    assert replan_on_failure(model, topo, 64, 4096, software=MEGATRON_CORE, **args).layout["zero"] == 1
    for software in (VERL_FSDP, VERL_FSDP_LIGER, HF_TRANSFORMERS):
        seen.clear()
        layout = replan_on_failure(model, topo, 64, 4096, software=software, **args).layout
        assert layout["zero"] in software.zero and layout["recompute"] in software.recompute
        assert {zero for zero, _ in seen} <= set(software.zero)
        assert {recompute for _, recompute in seen} <= set(software.recompute)
    # a running layout off the stack's stages (given by hand) is kept among the candidates, not an error
    off = dict(args, current=TrainChoice(1, 1, 1, 8, 1, 1, 1, "full", 1))
    assert replan_on_failure(model, topo, 64, 4096, software=VERL_FSDP, **off).layout["zero"] in (1, 2)


@pytest.mark.parametrize(("layout", "field", "says"), [
    ({"recompute_method": "block", "recompute_num_layers": 4}, "recompute_method",
     "verl-fsdp runs recompute_method uniform only"),
    ({"recompute_num_layers": 4}, "recompute_num_layers", "verl-fsdp checkpoints each layer on its own")])
def test_a_trainer_that_checkpoints_whole_layers_refuses_megatrons_recompute_methods(layout, field, says):
    """transformers' gradient checkpointing wraps each decoder layer (HF_RECOMPUTE_METHODS): Megatron's block
    method or groups of layers are refused on its stacks, naming the field; uniform 1 given is accepted, and a
    Megatron stack (not bounded) takes the block layout."""
    from simulator.scenario import load_scenario

    def load(software, extra):
        train_layout = {"tp": 1, "zero": 3, "recompute": "full", **extra}
        return load_scenario({"topology": {"preset": "dgx-h100", "nodes": 1},
                              "workload": {"preset": "grpo-qwen2.5-7b", "train_software": software,
                                           "train_layout": train_layout}})
    with pytest.raises(RlsimError, match=says) as info:
        load("verl-fsdp", layout)
    assert info.value.field == f"workload.train_layout.{field}" and "strategy=megatron" in info.value.fix
    load("verl-fsdp", {"recompute_method": "uniform", "recompute_num_layers": 1})
    load("megatron-core", layout)
