"""`layout: auto` on a colocated placement sizes the rollout engine beside the resident training
state (issue 14 class 6: qwen2.5-7b colocated on one DGX-H100 node was refused, 87.2 GB on 80 GB,
with a fix naming a value the user never set)."""
import dataclasses

import pytest

from simulator.autoplan import auto_layouts, colocated_engine_share
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.train_layout import TrainLayout
from simulator.scenario import load_scenario

AUTO = ["workload.train_layout=auto", "workload.rollout_layout=auto"]


def _scenario(*overrides, nodes=1):
    return load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": nodes},
                         schedule="colocated", iterations=1, overrides=list(overrides))


def test_the_engine_share_is_what_the_resident_state_leaves():
    sc, topo = _scenario(), load_topology({"preset": "dgx-h100", "nodes": 1})
    model = load_model("qwen2.5-7b")
    lay = {"tp": 1, "pp": 1, "zero": 1, "recompute": "full", "micro_batch": 1}
    share = colocated_engine_share(sc, topo, model, lay, list(range(8)), 0.9)
    hbm = topo.device_spec(0).hbm_bytes
    # tp 1: every device holds the bf16 weights, the actor's and the resident reference's
    weights = 2 * model.weight_bytes(2.0)
    assert share == pytest.approx(int((hbm - weights) / hbm * 100) / 100)
    assert share * hbm + weights <= hbm
    swapped = _scenario("schedule.reference_swap_copies=3")   # NeMo RL's swap: the reference on the host
    alone = int((hbm - model.weight_bytes(2.0)) / hbm * 100) / 100
    assert colocated_engine_share(swapped, topo, model, lay, list(range(8)), 0.9) == pytest.approx(alone)
    split = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                          schedule="disaggregated", iterations=1)
    assert colocated_engine_share(split, topo, model, lay, list(range(4)), 0.9) == 0.9   # split pools: untouched


def test_auto_layouts_fit_on_one_node_colocated():
    sc = _scenario(*AUTO)
    topo = load_topology(sc.topology)
    plan = auto_layouts(sc, topo)
    assert plan.layouts["rollout"]["gpu_memory_utilization"] < 0.9
    import simulator
    summary = simulator.simulate(sc).summary   # the run accepts what the planner chose
    assert summary["peak_memory_bytes"] <= topo.device_spec(0).hbm_bytes


def test_a_refusal_names_the_value_the_user_did_not_set():
    from simulator import presets
    workload, _ = presets.resolve("workloads", "grpo-qwen2.5-7b")
    workload.update(rollout_layout={"tp": 1, "ep": 1, "max_num_seqs": 256},   # no gpu_memory_utilization
                    train_layout={"tp": 1, "zero": 1, "recompute": "full"})
    sc = load_scenario(workload=workload, topology={"preset": "dgx-h100", "nodes": 1}, schedule="colocated",
                       iterations=1)
    import simulator
    with pytest.raises(RlsimError) as info:
        simulator.simulate(sc)
    text = str(info.value)
    assert "does not set gpu_memory_utilization" in text and "default 0.9" in text
    assert info.value.field == "workload.rollout_layout"


def test_the_planner_judges_memory_on_the_runs_heaviest_micro_batch():
    # the run token-balances its packed micro-batches; their heaviest exceeds a typical row, and the
    # planner's memory check takes that micro-batch, formed as the run forms it (LlmCosts)
    import numpy as np

    from simulator.autoplan import _lengths, heaviest_micro_batch_of, memory_check_batches
    from simulator.llm.train_layout import TrainLayout
    from simulator.rl.llm_costs import LlmCosts

    sc = _scenario()
    row = _lengths(sc)[2]
    heaviest = heaviest_micro_batch_of(sc, row)
    batches = memory_check_batches(sc)
    assert len(batches) == 8 and batches[0].size == sc.workload.samples_per_prompt * (
        sc.workload.mini_batch_prompts or sc.workload.prompts_per_step)
    costs = LlmCosts(sc, load_topology(sc.topology))
    rows, dp = 1, 8
    b, tokens, per_replica = heaviest(rows, dp)
    run_view = costs._micro_batched_as(TrainLayout(dp=dp, micro_batch=rows), batches[0])
    assert b == run_view[0].micro_batch
    assert tokens >= max(float(np.add.reduceat(run_view[1], np.arange(0, batches[0].size, b)).max()), rows * row * 0.9)
    assert tokens > rows * row                       # the heaviest is above a typical row here
    assert per_replica == -(-batches[0].size // (b * dp))
    assert heaviest(rows, dp) is heaviest(rows, dp)  # judged once per (rows, dp)
    unbalanced = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                               schedule={"kind": "colocated", "micro_batching": "sequence"}, iterations=1)
    assert heaviest_micro_batch_of(unbalanced, row) is None   # rows of the longest sample bound the run's


@pytest.mark.parametrize("key,field", [("planner.recovery.restart_s=999", "planner.recovery"),
                                       ("planner.hetero.dtype=fp16", "planner.hetero")])
def test_a_planner_section_no_run_reads_is_an_error(key, field):
    # a run's failures take schedule.recovery; nothing in a run uses the heterogeneous step model
    sc = load_scenario(overrides=[key])
    with pytest.raises(RlsimError) as err:
        auto_layouts(sc, load_topology(sc.topology))
    assert err.value.field == field


def test_planner_keys_with_both_layouts_given_and_no_failure_are_an_error():
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, overrides=[
        "workload.train_layout.tp=2", "workload.rollout_layout.tp=1", "planner.eval_cost_s=1"])
    with pytest.raises(RlsimError, match="the planner does not run") as err:
        auto_layouts(sc, load_topology(sc.topology))
    assert err.value.field == "planner.eval_cost_s"


@pytest.mark.parametrize("auto, key, field", [
    ("workload.train_layout=auto", "planner.rollout.tp=[2]", "planner.rollout"),   # the engine is given
    ("workload.rollout_layout=auto", "planner.space.tp=[2]", "planner.space"),      # the trainer is given
])
def test_a_planner_section_for_the_given_side_is_an_error(auto, key, field):
    # each side's section is read only when that side is planned: it was read past
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                       overrides=[auto, key])
    with pytest.raises(RlsimError) as err:
        auto_layouts(sc, load_topology(sc.topology))
    assert err.value.field == field and "auto" in err.value.fix
    other = {"planner.rollout": "planner.space.tp=[2]", "planner.space": "planner.rollout.tp=[1]"}[field]
    auto_layouts(load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                               overrides=[auto, other]), load_topology(sc.topology))   # the planned side's: read


def test_a_planned_layout_a_heavier_step_runs_out_of_says_why_and_the_fix():
    """Colocated StaleSync trains its consolidated tail (long samples together), heavier than the drawn
    batches the planner judged memory on (a documentation audit hit it on grpo-qwen2.5-7b over 4 DGX
    H100 nodes): the memory error of a planned layout says so and how to narrow the plan; a given
    layout's error is left as it is."""
    from simulator.errors import RlsimError
    from simulator.hardware.topology import load_topology
    from simulator.rl.llm_costs import LlmCosts
    from simulator.scenario import load_scenario

    def costs(layout):
        sc = load_scenario(None, workload="grpo-qwen2.5-7b", topology="dgx-h100",
                           overrides=["topology.nodes=1", f"workload.train_layout={layout}"])
        return LlmCosts(sc, load_topology(sc.topology), auto_layouts={"train": {"tp": 1, "zero": 2}})
    oom = RlsimError("qwen2.5-7b with tp=1 ... does not fit in device memory: ...", field="workload.train_layout")
    noted = costs("auto")._planned_layout_note(oom, [3000, 2000])
    assert "layout: auto planned memory on drawn batches" in noted.message
    assert "planner.space.recompute=[full]" in noted.fix and noted.field == "workload.train_layout"
    assert noted.batch.tolist() == [3000, 2000]
    assert costs("{tp: 1, zero: 2}")._planned_layout_note(oom, [3000]) is oom
    # SimPy hands a process's failure on as type(exc)(*exc.args): the copy keeps the batch and the text
    copy = type(noted)(*noted.args)
    assert copy.batch.tolist() == [3000, 2000] and str(copy) == str(noted) and copy.field == noted.field


# the documentation audit's case: the first plan (TP1 DP16 ZeRO-2, 4 packed sequences a micro-batch)
# runs out of memory on StaleSync's consolidated tail at 88.5 GB of 79 GB (the reference swapped to
# the host, as the case had its weights off the devices; its logits at the 4 B a logit rlsim counted
# then: at Megatron's 6 the first plan already leaves room for the tail)
HEAVY_TAIL_RUN = dict(workload="grpo-qwen2.5-7b", topology="dgx-h100", schedule="stalesync", iterations=4,
                      overrides=["topology.nodes=4", "workload.train_layout=auto", "schedule.reference_swap_copies=3",
                                 "workload.train_params.memory.logits_bytes_per_elem=4"])


def test_a_planned_layout_a_trained_batch_does_not_fit_is_planned_again_with_that_batch():
    from simulator.api import simulate
    summary = simulate(**HEAVY_TAIL_RUN, keep_samples=False).summary
    (first,) = summary["auto_layout"]["replanned"]
    assert "does not fit in device memory" in first["did_not_fit"]
    ran = summary["auto_layout"]["train"]["layout"]
    assert ran != first["layout"] and summary["layouts"]["train"]["cp"] == ran["cp"]
    assert any("layout: auto planned 2 times" in note for note in summary["notes"])
    assert summary["peak_memory_bytes"] <= 80e9


def test_a_plan_that_repeats_a_layout_that_did_not_fit_is_an_error(monkeypatch):
    """The planner judges the failing batch beside the drawn ones: were it to answer the same layout
    again, the run stops with the memory error rather than loop."""
    from simulator import api, autoplan
    from simulator.api import simulate
    from simulator.rl.llm_costs import HeavierBatchThanPlanned
    first_plan = autoplan.auto_layouts
    monkeypatch.setattr(autoplan, "auto_layouts", lambda sc, topology, trained=(): first_plan(sc, topology))
    with pytest.raises(HeavierBatchThanPlanned, match="this step trained a heavier one"):
        simulate(**HEAVY_TAIL_RUN, keep_samples=False)
    assert api.AUTO_LAYOUT_PLANS >= 2


def test_colocated_stalesync_layouts_are_judged_on_the_pool_beside_its_largest_tail():
    """The default scenario with train_layout: auto planned TP8 CP2 DP24 ZeRO-2 (105 GB) and ran out
    of memory at 161 GB: StaleSync trained beside its consolidated tail on 128 devices, DP 8, where
    ZeRO shards the optimizer state over a third of the ranks (a profiling trial's side note)."""
    from simulator.autoplan import consolidated_train_devices
    from simulator.errors import RlsimError
    from simulator.hardware.topology import load_topology
    from simulator.llm.architecture import load_model
    from simulator.planner.base import TrainChoice
    from simulator.planner.evaluate import TrainingEvaluator
    from simulator.scenario import load_scenario

    sc = load_scenario(None)
    rollout = sc.workload.rollout_layout
    instance = rollout["tp"] * rollout.get("ep", 1)
    tail = int(0.5 * (384 // instance))
    assert consolidated_train_devices(sc, 384) == 384 - tail * instance
    assert consolidated_train_devices(load_scenario(None, schedule="colocated"), 384) is None
    # survivors of a lost node (376) keep whole rollout instances (352, rl/schedules/colocated.py
    # _failure): the run consolidates from those, so the judged pool is theirs (was 376 - 160 = 216)
    assert consolidated_train_devices(sc, 376) == consolidated_train_devices(sc, 352) == 352 - int(0.5 * 11) * 32
    topology, model = load_topology(sc.topology), load_model(sc.workload.model)
    choice = TrainChoice(tp=8, pp=1, vpp=1, dp=24, ep=16, cp=2, zero=2, recompute="none", micro_batch=1, etp=8)

    def evaluator(also):
        return TrainingEvaluator.for_workload(model, topology, 256, 20480, sc.workload, also_trains_on=also)
    evaluator(None).cost(choice, list(range(384)))   # fits on the whole pool
    with pytest.raises(RlsimError, match="on the 128 devices it also trains on"):
        evaluator(128).cost(choice, list(range(384)))


def test_colocated_stalesync_under_auto_runs_the_faster_of_consolidating_and_not():
    """layout: auto picked TP8 PP3 CP2 EP16 etp8, whose expert fold makes 384-device groups: none fit
    beside the consolidated tail, so StaleSync ran synchronous with nothing said (a capacity trial).
    The fastest layout that leaves room is planned too, both run, the faster kept: here the one that
    consolidates. Where none leaves room (qwen3-30b-a3b on one DGX H100) the run is as before, said
    in a note (a regression trial: requiring room made that plan empty)."""
    from simulator.api import simulate
    from simulator.autoplan import room_beside_tail
    from simulator.llm.train_layout import TrainLayout
    from simulator.scenario import load_scenario
    summary = simulate(overrides=["workload.train_layout=auto"], iterations=3, keep_samples=False).summary
    train = summary["auto_layout"]["train"]
    synchronous, consolidating = train["compared"]
    assert not synchronous["consolidates"] and consolidating["consolidates"]
    assert consolidating["steady_tokens_per_s"] > synchronous["steady_tokens_per_s"]
    assert train["layout"] == consolidating["layout"] and summary["steady_tokens_per_s"] == consolidating["steady_tokens_per_s"]
    assert TrainLayout.from_mapping(dict(train["layout"])).pool_unit <= room_beside_tail(load_scenario())(384)
    # ranked from the first search's candidates, not searched again (176.1 s of the 351.4 s charged, about
    # the first search's own): only its leaders' refinement and the block recompute of the room-leaving layouts
    # the first search's bound did not reach are new (0.73 s of 25.6 s: tests/planner/test_search.py has them
    # charged exactly)
    extra = summary["auto_layout"]["planning_cost_s"] - train["planning_cost_s"]
    assert 0 < extra < 0.05 * train["planning_cost_s"]
    assert summary["stage_time_s"].get("tail_generate", 0.0) > 0 and "stalesync_no_room" not in summary
    assert any(note.startswith("layout: auto ran two training layouts and kept the faster") and "consolidating" in note
               for note in summary["notes"])
    small = simulate(workload="grpo-qwen3-30b-a3b", topology={"preset": "dgx-h100", "nodes": 1}, schedule="stalesync",
                     overrides=["workload.train_layout=auto", "schedule.reference_swap_copies=3"], iterations=2,
                     keep_samples=False).summary   # (a resident reference leaves no layout that fits)
    assert "compared" not in small["auto_layout"]["train"] and small["stalesync_no_room"]["steps"] == 2


def test_stalesync_that_never_consolidates_says_so():
    from simulator.api import simulate
    summary = simulate(overrides=["workload.train_layout={tp: 8, pp: 12, ep: 4, zero: 1, recompute: full, micro_batch: 1}"],
                       iterations=2, keep_samples=False).summary
    assert summary["stalesync_no_room"]["steps"] == 2
    assert any(note.startswith("StaleSync ran 2 step(s) synchronous") for note in summary["notes"])


def _ppo(*overrides):
    # the reference swapped to the host (NeMo RL's swap): with its weights resident beside the reward
    # model's, no layout of the four 70B models fits on 32 H100s (test_ppo_refused_beside_...); with
    # the critic's Megatron gradient buffer resident too (memory.grad_buffer_persists) none fits on
    # 32 H100s even with the reference swapped: H200s
    return load_scenario(workload="ppo-llama3.1-70b", topology={"preset": "dgx-h200", "nodes": 4},
                         schedule="colocated", iterations=1,
                         overrides=[*AUTO, "schedule.reference_swap_copies=3", *overrides])


def test_ppo_refused_beside_the_resident_reference_and_reward_model():
    """An audit's case: ppo-llama3.1-70b on 4 DGX-H100 nodes, both layouts auto, planned TP8 PP4 with
    the engine at 0.57 and reported 85.29 GB a device in the rollout phase of 85.9 GB, without the
    70B reference's and reward model's weights (4.5 GB a device each): with them no layout fits."""
    sc = load_scenario(workload="ppo-llama3.1-70b", topology={"preset": "dgx-h100", "nodes": 4},
                       schedule="colocated", iterations=1, overrides=AUTO)
    with pytest.raises(RlsimError, match="no training layout") as err:
        auto_layouts(sc, load_topology(sc.topology))
    assert "the reference and reward model's weights" in err.value.message


def test_ppo_plans_its_layouts_beside_the_critics_state():
    """PPO's critic keeps its weights and optimizer state on the devices (workload.critic_offload): the
    planner sizes the actor's layout with the critic's state beside its update (and the actor's beside
    the critic's), and the engine share beside both, so the run accepts what it planned."""
    import simulator

    sc = _ppo()
    topo = load_topology(sc.topology)
    plan = auto_layouts(sc, topo)
    summary = simulator.simulate(sc).summary
    assert summary["peak_memory_bytes"] <= topo.device_spec(0).hbm_bytes
    moved = _ppo("workload.critic_offload.params=true", "workload.critic_offload.optimizer=true")
    model, ranks = load_model("llama3.1-70b"), list(range(32))
    kept_share = colocated_engine_share(sc, topo, model, plan.layouts["train"], ranks, 0.9)
    moved_share = colocated_engine_share(moved, topo, model, plan.layouts["train"], ranks, 0.9)
    assert kept_share == plan.layouts["rollout"]["gpu_memory_utilization"] < moved_share


def test_a_layout_that_fits_alone_is_refused_beside_the_other_models_state():
    from simulator.llm.train_layout import TrainLayout
    from simulator.planner.base import TrainChoice
    from simulator.planner.evaluate import TrainingEvaluator

    topo, model = load_topology({"preset": "dgx-h100", "nodes": 1}), load_model("qwen2.5-7b")
    choice = TrainChoice(tp=1, pp=1, vpp=1, dp=8, ep=1, cp=1, zero=3, recompute="full", micro_batch=1)
    alone = TrainingEvaluator(model, topo, 64, 2048)
    own = alone(choice, list(range(8))).memory_per_device_bytes
    critic = "the critic's resident weights and optimizer state"
    small = TrainingEvaluator(model, topo, 64, 2048, beside=[(model, critic, lambda lay, hbm: 1e9, lambda lay: lay)])
    assert small(choice, list(range(8))).memory_per_device_bytes == pytest.approx(own + 1e9)   # the update's peak
    held: list[TrainLayout] = []
    beside = TrainingEvaluator(model, topo, 64, 2048,
                               beside=[(model, critic, lambda lay, hbm: held.append(lay) or 0.95 * hbm, lambda lay: lay)])
    with pytest.raises(RlsimError, match="beside the critic's resident weights"):
        beside(choice, list(range(8)))
    assert held and held[0].dp == 8   # judged under the candidate's layout
    import dataclasses
    own = TrainingEvaluator(model, topo, 64, 2048, beside=[(model, critic, lambda lay, hbm: 0.0, lambda lay: lay),
                                                           (model, "the actor's resident weights and optimizer state", lambda lay, hbm: 0.0,
                                                            lambda lay: dataclasses.replace(lay, micro_batch=64))])
    with pytest.raises(RlsimError, match="beside the actor's"):   # the critic's own micro-batches of 64 rows
        own(choice, list(range(8)))


def test_a_planned_training_layout_leaves_the_given_engine_room_in_the_rollout_phase():
    """A planner audit: grpo-qwen2.5-7b colocated on one DGX-H100 node, the rollout layout given at
    gpu_memory_utilization 0.7 and the training layout auto. The planner ranked training alone and
    chose TP1, whose resident state (actor and reference weights, 30.5 GB) with the engine's 60.1 GB
    is 90.6 GB of 85.9 GB: the run refused it, where TP2 (half the resident state) fits. The planner
    judges the rollout phase beside each candidate as the run does (LlmCosts.rollout_phase_bytes)."""
    import simulator
    from simulator.llm.train_layout import TrainLayout
    from simulator.rl.llm_costs import LlmCosts

    sc = _scenario("workload.train_layout=auto", "workload.rollout_layout.gpu_memory_utilization=0.7")
    topo = load_topology(sc.topology)
    plan = auto_layouts(sc, topo)
    costs = LlmCosts(sc, topo, auto_layouts=plan.layouts)
    lay = TrainLayout.from_mapping(plan.layouts["train"]).resolve(8)
    assert costs.rollout_phase_bytes(lay) <= topo.device_spec(0).hbm_bytes   # it raised before
    assert plan.layouts["train"]["tp"] * plan.layouts["train"]["pp"] > 1
    summary = simulator.simulate(sc).summary   # the run accepts what the planner chose
    assert summary["peak_memory_by_phase"]["rollout"] <= topo.device_spec(0).hbm_bytes


def test_fuse_actor_plans_a_layout_its_aux_pool_holds_whole_replicas_of():
    """A planner audit: fuse: actor runs the reference's passes on the aux pool (aux_fraction 0.125 of
    two DGX-H100 nodes: 2 devices) under the training layout. The planner searched the 14 actor devices
    alone and chose TP1 PP7, and the run refused it: 2 devices are not a multiple of 7."""
    import simulator
    from simulator.rl.pools import build_pools

    sc = _scenario("workload.model=qwen2.5-32b", "schedule.fuse=actor", "workload.rollout_layout.tp=2",
                   "workload.train_layout=auto", nodes=2)
    plan = auto_layouts(sc, load_topology(sc.topology))
    lay = plan.layouts["train"]
    unit = lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1)
    pools = build_pools(sc.schedule, 16, 2, unit)
    assert pools["aux"].count % unit == 0 and pools["actor"].count == 14
    simulator.simulate(sc)   # the run accepts what the planner chose (it raised before)


def test_under_fuse_actor_nothing_of_the_critic_sits_beside_the_actor():
    """A planner review: under fuse: actor PPO's critic, reference and reward model run on the aux
    pool (rl/pools.role_pool), and the run counts none of their state beside the actor's update
    (LlmCosts._beside_bytes, _frozen_bytes: 0). updates_beside put the 70B critic's kept state and
    the frozen weights beside the actor all the same: the planner was too strict on the actor side."""
    from simulator.autoplan import updates_beside
    from simulator.llm.train_layout import TrainLayout
    from simulator.rl.llm_costs import LlmCosts

    def ppo(*sets):
        return load_scenario(workload="ppo-llama3.1-70b", topology={"preset": "dgx-h200", "nodes": 8},
                             schedule="colocated", iterations=1, overrides=list(sets))

    fused = ppo("schedule.fuse=actor")
    assert updates_beside(fused, fused.workload.train_params) == []
    lay, hbm = TrainLayout.from_mapping({"tp": 8, "pp": 1, "zero": 1}).resolve(56), 141e9
    assert LlmCosts(fused, load_topology(fused.topology)).critic_resident_bytes(lay, hbm) == 0.0
    full = ppo()   # fuse: full: the critic beside the actor, and the actor beside the critic
    beside = updates_beside(full, full.workload.train_params)
    assert len(beside) == 2 and beside[0][2](lay, hbm) > 0.0


def _ppo_70b_fused(*sets):
    """ppo-llama3.1-70b under fuse: actor on 8 DGX-H200 nodes: the aux pool runs the reference, the
    70B reward model and the 70B critic under the training layout."""
    return load_scenario(workload="ppo-llama3.1-70b", topology={"preset": "dgx-h200", "nodes": 8},
                         schedule="colocated", iterations=1, overrides=["schedule.fuse=actor", *sets])


def test_fuse_actor_plans_no_layout_whose_aux_pool_passes_do_not_fit():
    """A planner review: under fuse: actor the aux pool (aux_fraction 0.125: 8 of 64 devices) holds the
    70B critic's state at DP 1 whatever the layout, and the run refused the planner's top layouts: the
    reward model's pass needs 191.6 GB beside it. The planner judges each aux pass as the run does
    (LlmCosts.aux_passes_fit) and refuses them all; on a 16-device aux pool it plans one the run runs."""
    import simulator

    narrow = _ppo_70b_fused("workload.train_layout=auto")
    with pytest.raises(RlsimError, match="forward pass does not fit"):
        auto_layouts(narrow, load_topology(narrow.topology))
    wide = _ppo_70b_fused("workload.train_layout=auto", "schedule.aux_fraction=0.25")
    topo = load_topology(wide.topology)
    plan = auto_layouts(wide, topo)
    summary = simulator.simulate(wide).summary   # the run accepts what the planner chose
    assert summary["peak_memory_by_phase"]["train"] <= topo.device_spec(0).hbm_bytes
    assert 16 % (plan.layouts["train"]["tp"] * plan.layouts["train"]["pp"] * plan.layouts["train"]["cp"]) == 0


def test_a_failure_replan_judges_the_aux_pool_passes_of_a_candidate():
    """A planner review: a failure re-plan checks each candidate with LlmCosts.accept_train_layout,
    which judged the actor's devices and the rollout phase, not fuse: actor's aux pool. TP8 PP1 ZeRO-1
    fits the actor's 48 devices but leaves the 70B critic at DP 2 on the aux pool's 16, where the reward
    model's pass beside its state needs 139.5 GB of 139.3: refused now; TP8 PP2 fits there."""
    import numpy as np

    from simulator.rl.llm_costs import LlmCosts

    sc = _ppo_70b_fused("schedule.aux_fraction=0.25", "schedule.failures=[{at_s: 100, fail: 'device:3'}]",
                        "workload.train_layout={tp: 8, pp: 2, zero: 2, recompute: none, micro_batch: 1}")
    costs = LlmCosts(sc, load_topology(sc.topology))
    costs.forward("reference", np.full(256, 1024), range(48, 64))   # the aux pool's pass, as the run runs it
    costs.accept_train_layout({"tp": 8, "pp": 2, "zero": 2, "recompute": "none", "micro_batch": 1})
    with pytest.raises(RlsimError, match="reward's forward pass does not fit"):
        costs.accept_train_layout({"tp": 8, "pp": 1, "zero": 1, "recompute": "full", "micro_batch": 1})
    assert costs.layout(48).tp == 8 and costs.layout(48).pp == 2   # the run's own layout untouched


def test_the_planned_memory_is_the_peak_its_memory_check_judged(tmp_path, capsys):
    """A planner review: plan reported the timed step's memory (its pooled step's heaviest micro-batch,
    lighter than the memory check's), 72.8 GB against the run's train-phase 74.3 GB for
    grpo-qwen2.5-7b colocated on one DGX-H100 node at TP1 CP2 ZeRO-2. It now reports the peak the
    memory check judged (memory_per_device at the heaviest drawn micro-batch, as train_step_cost sizes
    it, beside the reference's weights), which the run's own draws meet within 0.1 GB here."""
    import json

    import simulator
    from simulator.autoplan import heaviest_micro_batch_of, train_batch
    from simulator.cli import main
    from simulator.llm.training import device_resident, memory_per_device
    from simulator.rl.llm_costs import frozen_weight_bytes, role_models

    scenario = tmp_path / "q7.yaml"
    scenario.write_text("topology: {preset: dgx-h100, nodes: 1}\nworkload: grpo-qwen2.5-7b\nschedule: colocated\n")
    assert main(["plan", str(scenario), "--json", "--top", "1"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    given = {k: v for k, v in row["layout"].items() if k != "dp"}
    sc = load_scenario(scenario, overrides=[f"workload.train_layout={json.dumps(given)}"])
    lay = TrainLayout.from_mapping(given).resolve(8)
    samples, tokens, micro_batches = heaviest_micro_batch_of(sc, train_batch(sc)[1])(lay.micro_batch, lay.dp)
    params, hbm = sc.workload.train_params, load_topology(sc.topology).device_spec(0).hbm_bytes
    own = device_resident(memory_per_device(role_models(sc)["actor"], dataclasses.replace(lay, micro_batch=samples),
                                            tokens / samples, hbm, params=params.memory,
                                            flash_attention=params.compute.flash_attention,
                                            micro_batches=micro_batches), params)
    frozen = sum(frozen_weight_bytes(sc, role_models(sc), "actor", lay, hbm, params).values())
    assert row["memory_per_device_bytes"] == pytest.approx(own.total_bytes + frozen)
    run = simulator.simulate(sc).summary["peak_memory_by_phase"]["train"]
    assert abs(row["memory_per_device_bytes"] - run) < 0.1e9   # 1.4 GB short before


def test_plan_reports_the_aux_pools_train_phase_peak_beside_the_actors(tmp_path, capsys):
    """A planner review: under fuse: actor the plan's memory figure was the actor's devices' alone, and
    the run's train-phase peak came from the aux pool: ppo-llama3.1-70b on 8 DGX-H200 nodes at
    aux_fraction 0.25, plan 52.0 GB against the run's 115.4 GB (the 70B critic's update at DP 2 on the
    aux pool's 16 devices). The row now says the aux pool's peak too (aux_passes_fit: the critic's
    updates as the run notes them), which the run meets; a GRPO aux pool runs forward passes only,
    which the run's train-phase peak does not count: no aux figure, as without fuse: actor."""
    import json

    import simulator
    from simulator.cli import main

    scenario = tmp_path / "ppo.yaml"
    scenario.write_text("topology: {preset: dgx-h200, nodes: 8}\nworkload: ppo-llama3.1-70b\n"
                        "schedule: {kind: colocated, fuse: actor, aux_fraction: 0.25}\n")
    assert main(["plan", str(scenario), "--json", "--top", "1"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    given = {k: v for k, v in row["layout"].items() if k != "dp"}
    run = simulator.simulate(scenario, iterations=1, overrides=[f"workload.train_layout={json.dumps(given)}"])
    train_peak = run.summary["peak_memory_by_phase"]["train"]
    aux = row["aux_pool_memory_per_device_bytes"]
    assert row["memory_per_device_bytes"] < train_peak - 50e9   # the actor's: not where the run peaks
    assert abs(aux - train_peak) < 0.5e9
    assert main(["plan", str(scenario), "--top", "1"]) == 0
    assert "aux mem GB" in capsys.readouterr().out
    grpo = tmp_path / "grpo.yaml"
    grpo.write_text("topology: {preset: dgx-h100, nodes: 2}\nworkload: grpo-qwen2.5-7b\n"
                    "schedule: {kind: colocated, fuse: actor}\n")
    for sets in (["workload.rollout_layout.tp=2"], ["workload.rollout_layout.tp=2", "schedule.fuse=full"]):
        assert main(["plan", str(grpo), "--json", "--top", "1", *[a for s in sets for a in ("--set", s)]]) == 0
        assert "aux_pool_memory_per_device_bytes" not in json.loads(capsys.readouterr().out)[0]


def test_plan_model_over_a_fuse_actor_scenario_judges_the_aux_pool_with_that_model(tmp_path, capsys):
    """A planner review: `rlsim plan SCENARIO --model M` judged fuse: actor's aux pool with a private
    LlmCosts of the scenario's workload.model: over ppo-llama3.1-70b (8 DGX-H200 nodes, aux_fraction 0.25)
    with --model llama3.1-8b the aux pool ran a 70B reference, refused TP4 PP2 CP2 and listed TP8 PP2
    first with the 70B reference's 115.5 GB; the same plan with --set workload.model=llama3.1-8b lists
    TP4 PP2 CP2 (126.3 GB there, the 8B reference beside the 70B critic at DP 4). Both now agree."""
    import json

    from simulator.cli import main

    scenario = tmp_path / "ppo.yaml"
    scenario.write_text("topology: {preset: dgx-h200, nodes: 8}\nworkload: ppo-llama3.1-70b\n"
                        "schedule: {kind: colocated, fuse: actor, aux_fraction: 0.25}\n")
    rows = []
    for flags in (["--model", "llama3.1-8b"], ["--set", "workload.model=llama3.1-8b"]):
        assert main(["plan", str(scenario), "--json", "--top", "2", *flags]) == 0
        rows.append(json.loads(capsys.readouterr().out))
    assert rows[0] == rows[1]
    assert rows[0][0]["layout"]["tp"] == 4 and rows[0][0]["layout"]["cp"] == 2


def test_an_update_that_does_not_fit_beside_the_reference_on_a_planned_layout_is_planned_again():
    """The update beside the frozen models' weights (LlmCosts._check_beside) on a layout the planner chose
    is a memory miss like train_step_cost's own: HeavierBatchThanPlanned, carrying the batch and the layout
    it did not fit (a failure's re-plan refused such a layout and the run stopped, a planner review), which
    the run's next plan (and its re-plans: PlannerReplanner's trained batches) judge."""
    import numpy as np

    from simulator.errors import RlsimError
    from simulator.llm.train_layout import TrainLayout
    from simulator.rl.llm_costs import HeavierBatchThanPlanned, LlmCosts
    from simulator.scenario import load_scenario

    planned = LlmCosts.__new__(LlmCosts)
    planned.scenario = load_scenario(None, overrides=["workload.train_layout=auto"])
    miss = RlsimError("the actor's update needs 127.3 GB per device", field="workload.reference_cpu_offload")
    layout = TrainLayout(tp=2, cp=2, dp=88, ep=8, etp=1, zero=3, recompute="full", recompute_method="block",
                         recompute_num_layers=59)
    note = planned._planned_layout_note(miss, np.array([4096, 8192]), layout, memory_miss=True)
    assert isinstance(note, HeavierBatchThanPlanned) and note.batch.tolist() == [4096, 8192]
    assert note.layout["recompute_num_layers"] == 59 and "dp" not in note.layout
    assert planned._planned_layout_note(miss, np.array([1]), layout) is miss   # not read as one from its words
    given = LlmCosts.__new__(LlmCosts)
    given.scenario = load_scenario(None)
    assert given._planned_layout_note(miss, np.array([1]), layout, memory_miss=True) is miss


def test_a_batch_that_broke_a_replanned_layout_runs_again_with_the_same_plan(monkeypatch):
    """A refusal of a failure's re-planned layout (HeavierBatchThanPlanned.layout not the plan's) runs the
    scenario again even where the plan repeats its layout: the re-plans judge the batch then
    (PlannerReplanner's trained batches); the run says so in auto_layout.replanned."""
    import numpy as np

    from simulator import api
    from simulator.errors import RlsimError
    from simulator.rl.llm_costs import HeavierBatchThanPlanned

    real, calls, seen = api.run_schedule, [], []

    def broke_once(sc, costs, *args, replanner=None, **kwargs):
        calls.append(1)
        seen.append(list(replanner.trained))
        if len(calls) <= 2:   # twice: the plan's layout repeats, the re-plans judge one batch more each time
            raise HeavierBatchThanPlanned(RlsimError("the actor's update needs 81.0 GB per device"),
                                          np.array([9000, 9000 + len(calls)]), {"tp": 2, "recompute": "full"})
        return real(sc, costs, *args, replanner=replanner, **kwargs)
    monkeypatch.setattr(api, "run_schedule", broke_once)
    summary = api.simulate(None, topology={"preset": "dgx-h100", "nodes": 1}, iterations=1,
                           overrides=["workload.preset=grpo-qwen2.5-7b", "workload.prompts_per_step=16",
                                      "workload.mini_batch_prompts=16",
                                      "workload.train_layout=auto", "schedule.kind=colocated",
                                      "schedule.failures=[{at_s: 1.0e9, fail: 'device:3'}]"]).summary
    first, second = summary["auto_layout"]["replanned"]
    assert first["refused_replanned_layout"] == {"tp": 2, "recompute": "full"} and len(calls) == 3
    assert first["layout"] == second["layout"] == summary["auto_layout"]["train"]["layout"]
    assert seen[0] == [] and [batch.tolist() for batch in seen[2]] == [[9000, 9001], [9000, 9002]]


def test_a_consolidating_layout_a_trained_batch_breaks_is_planned_again_with_it(monkeypatch):
    """_faster_of_two's consolidating run on a layout a trained batch does not fit (a block recompute
    layout planned at the edge of the drawn batches: the default scenario's TP8 PP3 block 5 needed 128.3 of
    126.4 GB) plans again with that batch and runs the new consolidating layout, charging the new plan;
    a plan that repeats a broken layout gives the synchronous run back."""
    import types

    import numpy as np

    from simulator import api
    from simulator.errors import RlsimError
    from simulator.rl.llm_costs import HeavierBatchThanPlanned

    runs, plans = [], []

    def run_schedule(sc, costs, *args, start_s=0.0, **kwargs):
        runs.append((costs, start_s))
        if len(runs) == 1:
            raise HeavierBatchThanPlanned(RlsimError("the actor's update needs 128.3 GB per device"), np.array([9000]))
        return "record"

    def auto_plan(sc, topology, trained=()):
        plans.append([batch.tolist() for batch in trained])
        return types.SimpleNamespace(consolidating_train=next_layout, planning_cost_s=30.0,
                                     detail={"train": {"evaluated": 7, "planning_cost_s": 29.0}})
    monkeypatch.setattr(api, "run_schedule", run_schedule)
    monkeypatch.setattr(api, "_auto_plan", auto_plan)
    monkeypatch.setattr("simulator.rl.llm_costs.LlmCosts", lambda sc, topology, auto_layouts: auto_layouts)

    def plan_of(layout):
        return types.SimpleNamespace(layouts={"train": {"tp": 8}, "rollout": {}}, consolidating_train=layout,
                                     planning_cost_s=25.0, detail={"planning_cost_s": 25.0,
                                                                   "train": {"evaluated": 5, "planning_cost_s": 24.0}})
    next_layout = {"tp": 8, "recompute": "full", "recompute_method": "block", "recompute_num_layers": 6}
    plan = plan_of({"tp": 8, "recompute": "full", "recompute_method": "block", "recompute_num_layers": 5})
    ran = api._consolidating_run(None, types.SimpleNamespace(num_devices=8), None, None, None, False, plan, None,
                                 ("planned", []))
    assert ran == ("record", {"train": next_layout, "rollout": {}}, {"train": next_layout, "rollout": {}})
    assert [start for _, start in runs] == [25.0, 30.0] and plans == [[[9000]]]
    assert plan.consolidating_train == next_layout and plan.planning_cost_s == 30.0
    assert plan.detail["train"]["consolidating_replanned"][0]["layout"]["recompute_num_layers"] == 5
    runs.clear()
    again = plan_of({"tp": 8, "recompute_num_layers": 5})
    next_layout = {"tp": 8, "recompute_num_layers": 5}   # the plan repeats the layout that broke
    assert api._consolidating_run(None, types.SimpleNamespace(num_devices=8), None, None, None, False, again, None,
                                  ("planned", [])) is None
    # a plan again whose layout breaks too, then a repeat: the first run is kept, and the plan still says it
    runs.clear()
    monkeypatch.setattr(api, "run_schedule", lambda *args, **kwargs: (_ for _ in ()).throw(
        HeavierBatchThanPlanned(RlsimError("the actor's update needs 128.3 GB per device"), np.array([9000]))))
    layouts = iter([{"tp": 8, "recompute_num_layers": 6}, {"tp": 8, "recompute_num_layers": 6}])
    monkeypatch.setattr(api, "_auto_plan", lambda sc, topology, trained=(): types.SimpleNamespace(
        consolidating_train=next(layouts), planning_cost_s=30.0, detail={"train": {"evaluated": 7, "planning_cost_s": 29.0}}))
    kept = plan_of({"tp": 8, "recompute_num_layers": 5})
    assert api._consolidating_run(None, types.SimpleNamespace(num_devices=8), None, None, None, False, kept, None,
                                  ("planned", [])) is None
    assert kept.consolidating_train == {"tp": 8, "recompute_num_layers": 5} and kept.planning_cost_s == 25.0
    assert "consolidating_replanned" not in kept.detail["train"]
