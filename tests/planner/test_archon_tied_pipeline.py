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
