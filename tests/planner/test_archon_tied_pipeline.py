"""AReaL's archon engine refuses pipelines for a model whose output layer ties its input embedding
(areal 1.0.4 experimental/engine/archon_utils.py prepare_training_config: "Pipeline Parallelism (PP=p) is
not supported with weight tying"): a run on areal-archon refuses such a layout naming the field and the
fix, and the planner searches pp 1 alone for such a model there (Megatron runs it: its stacks keep pp)."""
from __future__ import annotations

import pytest

from simulator.autoplan import train_space
from simulator.cli import main
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.params import AREAL_ARCHON, MEGATRON_CORE
from simulator.planner.replan import replan_on_failure
from simulator.planner.search import Evaluation, SearchSpace, TrainChoice
from simulator.rl.llm_costs import refuse_tied_pipeline

TIED, UNTIED = load_model("qwen2.5-1.5b"), load_model("qwen2.5-7b")


def test_a_tied_model_s_pipeline_on_archon_is_refused_naming_the_field_and_the_fix(capsys):
    code = main(["run", "--set", "workload.train_software=areal-archon", "--set", "workload.model=qwen2.5-1.5b",
                 "--set", 'workload.train_layout={"tp": 1, "pp": 2, "zero": 3, "recompute": "full"}',
                 "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "'workload.train_layout.pp'" in err
    assert "tie_word_embeddings" in err and "archon_utils.py" in err
    assert "set pp: 1 and vpp: 1" in err and "megatron-core" in err


def test_only_archon_refuses_and_only_a_tied_model_s_pipeline():
    with pytest.raises(RlsimError) as err:
        refuse_tied_pipeline("areal-archon", TIED, {"pp": 4}, None)
    assert err.value.field == "workload.train_layout.pp" and "pp=4: areal-archon" in err.value.message
    refuse_tied_pipeline("areal-archon", TIED, {"pp": 1}, None)
    refuse_tied_pipeline("areal-archon", UNTIED, {"pp": 4}, None)
    refuse_tied_pipeline("megatron-core", TIED, {"pp": 4}, None)


def test_the_planner_searches_no_pipeline_for_a_tied_model_on_archon():
    assert AREAL_ARCHON.search_limits(TIED)["pp"] == AREAL_ARCHON.search_limits(TIED)["vpp"] == [1]
    assert "pp" not in AREAL_ARCHON.search_limits(UNTIED) and "pp" not in AREAL_ARCHON.search_limits()
    assert "pp" not in MEGATRON_CORE.search_limits(TIED)
    assert train_space(SearchSpace(), "areal-archon", {}, packed_step=False, model=TIED).pp == [1]
    with pytest.raises(RlsimError) as err:
        SearchSpace(pp=[2, 4]).for_software(AREAL_ARCHON, TIED)
    assert err.value.field == "planner.space.pp" and "tie_word_embeddings" in err.value.message
    assert "set pp: 1 and vpp: 1" in err.value.fix


def test_a_failure_replan_on_archon_keeps_a_tied_model_unpipelined():
    topo = load_topology("dgx-h100", {"nodes": 2})

    def pipelines_pay(c: TrainChoice, ranks) -> Evaluation:
        return Evaluation(10.0 / c.pp, 1.0, 0.4, 1e9, 0.1)
    args = dict(failed=[15], current=TrainChoice(1, 1, 1, 8, 1, 1, 3, "full", 1), evaluator=pipelines_pay)
    assert replan_on_failure(UNTIED, topo, 64, 4096, software=AREAL_ARCHON, **args).layout["pp"] > 1
    tied = replan_on_failure(TIED, topo, 64, 4096, software=AREAL_ARCHON, **args)
    assert (tied.layout["pp"], tied.layout["vpp"]) == (1, 1)


def test_a_ppo_critic_model_with_tied_embeddings_refuses_the_pipeline_too(capsys):
    """AReaL's ArchonPPOCritic runs the same prepare_training_config: a tied critic_model under pp > 1
    is refused beside an untied actor, naming the critic."""
    code = main(["run", "--set", "workload.train_software=areal-archon", "--set", "workload.algorithm=ppo",
                 "--set", "workload.model=qwen2.5-7b", "--set", "workload.critic_model=qwen2.5-1.5b",
                 "--set", 'workload.rollout_layout={"tp": 4, "ep": 1}',
                 "--set", 'workload.train_layout={"tp": 1, "pp": 2, "ep": 1, "zero": 3, "recompute": "full"}',
                 "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "'workload.train_layout.pp'" in err
    assert "workload.critic_model" in err and "qwen2.5-1.5b" in err and "tie_word_embeddings" in err


def _ppo_on_archon(critic: str, *overrides: str):
    """PPO of qwen2.5-7b (untied) on areal-archon, one DGX-H100 node, colocated, with ``critic``'s
    architecture: an untied critic leaves the planner its TP1 PP2 CP2 best (its default space)."""
    from simulator.scenario import load_scenario

    return load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                         schedule="colocated", iterations=1,
                         overrides=["workload.algorithm=ppo", "workload.train_software=areal-archon",
                                    f"workload.critic_model={critic}", "workload.train_layout=auto",
                                    'workload.rollout_layout={"tp": 2, "ep": 1}', *overrides])


def test_the_pipeline_rule_binds_for_a_tied_critic_only_where_the_stack_refuses_it():
    from simulator.rl.llm_costs import pipeline_rule_model

    bound = pipeline_rule_model(_ppo_on_archon("qwen2.5-1.5b"), UNTIED)
    assert bound.name == "qwen2.5-1.5b" and bound.tied_embeddings
    assert pipeline_rule_model(_ppo_on_archon("qwen2.5-7b"), UNTIED) is UNTIED
    assert pipeline_rule_model(_ppo_on_archon("qwen2.5-1.5b", "workload.train_software=megatron-core"),
                               UNTIED) is UNTIED
    assert pipeline_rule_model(_ppo_on_archon("qwen2.5-7b"), TIED) is TIED   # the actor's own rule binds first
    tied = train_space(SearchSpace(), "areal-archon", {}, packed_step=True, model=UNTIED,
                       scenario=_ppo_on_archon("qwen2.5-1.5b"))
    assert tied.pp == tied.vpp == [1]
    untied = train_space(SearchSpace(), "areal-archon", {}, packed_step=True, model=UNTIED,
                         scenario=_ppo_on_archon("qwen2.5-7b"))
    assert untied == train_space(SearchSpace(), "areal-archon", {}, packed_step=True, model=UNTIED)
    assert untied.pp != [1]


def test_layout_auto_with_a_tied_ppo_critic_on_archon_plans_no_pipeline_and_the_run_takes_it():
    """The planner searched the actor's model alone: it planned TP1 PP2 CP2 beside a tied qwen2.5-1.5b
    critic, which the run then refused (refuse_tied_pipeline). An untied critic keeps that plan."""
    import simulator
    from simulator.autoplan import auto_layouts

    untied = auto_layouts(_ppo_on_archon("qwen2.5-7b"), load_topology({"preset": "dgx-h100", "nodes": 1}))
    assert untied.layouts["train"]["pp"] == 2
    sc = _ppo_on_archon("qwen2.5-1.5b")
    tied = auto_layouts(sc, load_topology(sc.topology)).layouts["train"]
    assert (tied["pp"], tied["vpp"]) == (1, 1)
    simulator.simulate(sc)   # the run takes it (it raised "train_layout.pp=2: areal-archon runs no pipeline ...")


def test_rlsim_plan_of_a_tied_ppo_critic_on_archon_ranks_no_pipeline(tmp_path, capsys):
    import json

    scenario = tmp_path / "ppo.yaml"
    base = ("topology: {preset: dgx-h100, nodes: 1}\nschedule: colocated\nworkload: {preset: grpo-qwen2.5-7b, "
            "algorithm: ppo, train_software: areal-archon, rollout_layout: {tp: 2, ep: 1}, critic_model: ")
    layouts = {}
    for critic in ("qwen2.5-1.5b", "qwen2.5-7b"):
        scenario.write_text(base + critic + "}\n")
        assert main(["plan", str(scenario), "--json", "--top", "3"]) == 0
        layouts[critic] = [row["layout"] for row in json.loads(capsys.readouterr().out)]
    assert all(lay["pp"] == 1 for lay in layouts["qwen2.5-1.5b"])
    assert layouts["qwen2.5-7b"][0]["pp"] == 2   # untied: as before


def test_a_failure_replan_keeps_a_tied_critic_unpipelined(monkeypatch):
    """The re-plan's neighbourhood and its widened space keep to the tied critic's rule, as the run's."""
    import simulator.autoplan as autoplan

    topo = load_topology("dgx-h100", {"nodes": 2})

    def pipelines_pay(c: TrainChoice, ranks) -> Evaluation:
        return Evaluation(10.0 / c.pp, 1.0, 0.4, 1e9, 0.1)
    args = dict(failed=[15], current=TrainChoice(1, 1, 1, 8, 1, 1, 3, "full", 1), evaluator=pipelines_pay,
                software=AREAL_ARCHON)
    tied = replan_on_failure(UNTIED, topo, 64, 4096, limits_model=TIED, **args)
    assert (tied.layout["pp"], tied.layout["vpp"]) == (1, 1)
    assert replan_on_failure(UNTIED, topo, 64, 4096, limits_model=UNTIED, **args).layout["pp"] > 1
    seen: dict = {}

    def replan(model, topology, batch, row, **kwargs):
        seen.update(kwargs)
        raise RlsimError("stop here", field="failed")
    monkeypatch.setattr(autoplan, "replan_on_failure", replan)
    for critic, pipelined in (("qwen2.5-1.5b", False), ("qwen2.5-7b", True)):
        sc = _ppo_on_archon(critic, 'workload.train_layout={"tp": 1, "zero": 3, "recompute": "full"}',
                            "schedule.failures=[{at_s: 150, fail: 'gpu:7'}]")
        with pytest.raises(RlsimError, match="stop here"):
            autoplan.PlannerReplanner(sc, load_topology(sc.topology)).on_failure(list(range(8)), [7], {})
        assert seen["limits_model"].name == critic and (seen["wide_space"].pp != [1]) is pipelined
