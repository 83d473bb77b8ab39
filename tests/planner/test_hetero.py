"""Heterogeneous balancing and re-planning on real topologies (fake training cost for re-planning)."""
from __future__ import annotations

import pytest

from simulator.des import INTERVAL_COLUMNS
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.train_layout import TrainLayout
from simulator.planner.hetero import HeteroParams, HeteroStepModel, plan_hetero
from simulator.planner.placement import lay_out, locality_sorted
from simulator.planner.replan import (
    RecoveryParams,
    replan_on_failure,
    replan_on_slowdown,
    simulate_failure_run,
    survivors_after,
)
from simulator.planner.search import Evaluation, SearchSpace


def _hetero(a100_nodes: int, h100_nodes: int):
    return load_topology("hetero-a100-h100", {"groups": {"a100": {"nodes": a100_nodes},
                                                         "h100": {"nodes": h100_nodes}}})


def test_balanced_split_beats_uniform_by_at_least_1_25x_on_the_hetero_preset():
    topo = _hetero(8, 8)
    plan = plan_hetero(load_model("gpt-7.5b"), topo, 512, 2048)
    assert plan.speedup >= 1.25
    assert plan.balanced.utilization > plan.uniform.utilization
    # more micro-batches go to the faster (H100) replicas
    mbs = plan.balanced.microbatches_per_replica
    assert max(mbs) > min(mbs) and sum(mbs) == 512


def test_pipeline_across_kinds_gets_more_layers_on_the_faster_stage_and_equalizes():
    topo = _hetero(1, 1)
    model = load_model("gpt-18.4b")
    stm = HeteroStepModel(model, topo, 2048, 1)
    laid = lay_out(locality_sorted(topo, range(16)), ("tp", "cp", "pp", "dp"), 8, 1, 1, 2)
    bal = stm.evaluate(laid, 8, 2, 1, 64, balanced=True)
    uni = stm.evaluate(laid, 8, 2, 1, 64, balanced=False)
    assert topo.device_spec(laid[0]).name == "a100-80gb" and topo.device_spec(laid[8]).name == "h100"
    a100_layers, h100_layers = bal.layers_per_stage
    assert h100_layers > a100_layers and sum(bal.layers_per_stage) == model.num_layers
    spread = lambda r: max(r.stage_time_s[0]) / min(r.stage_time_s[0])  # noqa: E731
    assert spread(bal) < spread(uni)
    assert bal.step_time_s < uni.step_time_s


def test_pipelines_and_replicas_are_costed_on_the_devices_the_placement_gives_them():
    """The TP group of (replica d, stage s) was read at d + dp * s, where placement.groups puts it at
    s + pp * d: with pp > 1 and dp > 1 every pipeline was costed half on A100s and half on H100s
    while the placement ran one node (one kind) per pipeline (an audit). TP 4 x PP 2 fills a node:
    replica 0 is the A100 node, replica 1 the H100 one, each stage costed on its own kind."""
    from simulator.planner.hetero import stage_groups
    from simulator.planner.placement import groups

    topo, model = _hetero(1, 1), load_model("gpt-1.7b")
    tp, pp, dp = 4, 2, 2
    laid = lay_out(locality_sorted(topo, range(16)), ("tp", "cp", "pp", "dp"), tp, 1, dp, pp)
    by_stage = stage_groups(laid, tp, pp, dp)
    pipelines = {tuple(p) for p in groups(laid, "pp", tp, 1, dp, pp)}
    assert {tuple(by_stage[d][s][t] for s in range(pp)) for d in range(dp) for t in range(tp)} == pipelines
    kinds = [{topo.device_spec(r).name for row in by_stage[d] for r in row} for d in range(dp)]
    assert kinds == [{"a100-80gb"}, {"h100"}]
    stm = HeteroStepModel(model, topo, 2048, 1)
    even = stm.evaluate(laid, tp, pp, dp, 64, balanced=False)
    pair = groups(laid, "pp", tp, 1, dp, pp)[0][:2]
    p2p = 2 * stm.collectives.cost("p2p", pair, 2048 * model.hidden * 2 / tp).time_s
    for d in range(dp):
        per_layer, head = stm._stage_unit(by_stage[d][0])   # one kind: the same unit at both stages
        assert even.stage_time_s[d] == pytest.approx(
            (even.layers_per_stage[0] * per_layer + p2p, even.layers_per_stage[1] * per_layer + head + p2p), rel=1e-12)
    # the H100 pipeline is faster at every stage, so the balanced split gives it more micro-batches
    assert all(h < a for a, h in zip(*even.stage_time_s, strict=True))
    a100_mbs, h100_mbs = stm.evaluate(laid, tp, pp, dp, 64, balanced=True).microbatches_per_replica
    assert h100_mbs > a100_mbs


def test_balance_keeps_each_part_within_its_bound():
    from simulator.planner.hetero import balance

    assert balance(10, [1.0, 1.0]) == [5, 5]
    assert balance(10, [1.0, 1.0], maximum=[3, 10]) == [3, 7]
    assert balance(10, [1.0, 2.0, 1.0], maximum=[10, 10, 2]) == [6, 2, 2]   # unbounded: [4, 2, 4]
    with pytest.raises(RlsimError, match="at most"):
        balance(10, [1.0, 1.0], maximum=[3, 6])


TWO_DEVICES = ("name: {name}\ndevices_per_node: 1\nscaleup: {{kind: switch}}\nscaleout: {{nic_bw: 400Gb/s}}\n"
               "groups:\n  slow: {{device: {slow}, nodes: 1}}\n  fast: {{device: {fast}, nodes: 1}}\n")


def _two_devices(tmp_path, slow: str, fast: str):
    path = tmp_path / "two.yaml"
    path.write_text(TWO_DEVICES.format(name="two", slow=slow, fast=fast))
    return load_topology(str(path))


def test_the_balanced_split_gives_no_stage_more_layers_than_its_memory_holds(tmp_path):
    """balance() split layers by speed alone: an H100 beside one twice as fast took 21 of llama3.1-8b's
    32 layers (95 GB on an 80 GB device), the layout was dropped and plan_hetero found nothing (an
    audit). Each stage now takes at most what its memory holds: the even split is the best that fits."""
    from simulator.planner.hetero import balance, stage_groups

    fast = "{base: h100, name: h100x2, peak_flops: {bf16: 1978T}, hbm_bw_Bps: 6.7TB/s}"
    topo, model = _two_devices(tmp_path, "h100", fast), load_model("llama3.1-8b")
    stm = HeteroStepModel(model, topo, 4096, 1)
    (slow_unit, _), (fast_unit, head) = (stm._stage_unit(g) for g in stage_groups([0, 1], 1, 2, 1)[0])
    by_speed = balance(32, [slow_unit, fast_unit], [0.0, head])
    assert by_speed[1] > 16
    with pytest.raises(RlsimError, match="stage 1 needs"):
        stm.evaluate([0, 1], 1, 2, 1, 64, layers=by_speed)
    bal = stm.evaluate([0, 1], 1, 2, 1, 64, balanced=True)
    assert bal.layers_per_stage == (16, 16)   # stage 1 holds 16 (logits and head), stage 0 17
    plan = plan_hetero(model, topo, 64, 4096, tp_values=[1], pp_values=[2])
    assert plan.balanced.layers_per_stage == (16, 16) and plan.speedup == pytest.approx(1.0)


def test_a_balanced_split_that_fits_is_planned_where_no_even_split_fits(tmp_path):
    """An A100 40GB beside an H200: 16 layers of llama3.1-8b do not fit the A100, 7 do; the plan was
    'no heterogeneous layout ... divides the model and batch'. Now the balanced split is returned
    and the even one refused with its reason."""
    topo, model = _two_devices(tmp_path, "a100-40gb", "h200"), load_model("llama3.1-8b")
    plan = plan_hetero(model, topo, 64, 4096, tp_values=[1], pp_values=[2])
    assert plan.balanced.layers_per_stage == (7, 25)
    assert plan.uniform is None and plan.speedup is None
    assert "stage 0 needs" in plan.uniform_refused and "tp 1 pp 2" in plan.uniform_refused
    assert plan.to_json()["uniform"] is None and plan.to_json()["uniform_refused"] == plan.uniform_refused
    with pytest.raises(RlsimError, match=r"fits the model and batch: the last tried, tp 1 pp 2 dp 1 zero 0.*hold at most \[7, 6\] of 32"):
        plan_hetero(model, _two_devices(tmp_path, "a100-40gb", "a100-40gb"), 64, 4096, tp_values=[1], pp_values=[2])


def test_homogeneous_cluster_gains_nothing_from_balancing():
    topo = load_topology("dgx-h100", {"nodes": 2})
    plan = plan_hetero(load_model("gpt-7.5b"), topo, 256, 2048)
    # Equal devices: the batch stays evenly split; the only gain is the last stage's LM head and
    # loss (about one layer of this model with the 52 B/logit cross entropy) moving a layer off it.
    bal, uni = plan.balanced, plan.uniform
    assert len(set(bal.microbatches_per_replica)) == 1
    assert all(abs(a - b) <= 1 for a, b in zip(bal.layers_per_stage, uni.layers_per_stage, strict=True))
    assert 1.0 - 1e-9 <= plan.speedup < 1.01


def test_slow_node_triggers_rebalancing():
    topo = load_topology("dgx-h100", {"nodes": 4})
    slow = {r: 0.5 for r in topo.ranks_of_node(3)}
    replan = replan_on_slowdown(load_model("gpt-7.5b"), topo, 256, 2048, slowdown=slow)
    assert replan.plan.speedup > 1.05 and replan.planning_cost_s > 0
    assert replan.idle == [] and replan.used == list(range(32)) and replan.plan is replan.every_device
    with pytest.raises(RlsimError, match="slowdown"):
        replan_on_slowdown(load_model("gpt-7.5b"), topo, 256, 2048, slowdown={0: 1.5})


def test_a_node_at_a_few_percent_of_its_speed_is_drained_where_the_rest_are_faster():
    """Every stage and replica a slowed device is in waits for it: at 2% of its speed node 3 makes the
    rebalanced step slower than the three other nodes' alone, which the replan then runs on (each
    answer equals plan_hetero on that rank set); at half speed every device stays."""
    topo, model = load_topology("dgx-h100", {"nodes": 4}), load_model("gpt-7.5b")
    slow_node = topo.ranks_of_node(3)
    slow = {r: 0.02 for r in slow_node}
    replan = replan_on_slowdown(model, topo, 256, 2048, slowdown=slow)
    healthy = [r for r in range(32) if r not in slow_node]
    assert replan.idle == slow_node and replan.used == healthy
    alone = plan_hetero(model, topo, 256, 2048, ranks=healthy, speed_factor=slow).balanced.step_time_s
    every = plan_hetero(model, topo, 256, 2048, speed_factor=slow).balanced.step_time_s
    assert replan.plan.balanced.step_time_s == pytest.approx(alone, rel=1e-12) and alone < every
    assert replan.every_device.balanced.step_time_s == pytest.approx(every, rel=1e-12)
    kept = replan_on_slowdown(model, topo, 256, 2048, slowdown={r: 0.5 for r in slow_node})
    assert kept.idle == [] and kept.planning_cost_s == replan.planning_cost_s   # both rank sets searched


def _linear_evaluator(c, ranks):
    """Step time inversely proportional to devices; TP costs a little."""
    step = 1000.0 / len(ranks) * (1 + 0.01 * c.tp) * (1.2 if c.recompute == "full" else 1.0)
    return Evaluation(step, 1.0, 0.4, 1e9, 0.1)


def test_replan_on_failure_drops_the_node_and_counts_planning_cost():
    topo = load_topology("dgx-h100", {"nodes": 4})
    model = load_model("llama3.1-8b")
    small = SearchSpace(tp=[1, 2, 4, 8], vpp=[1], cp=[1], zero=[1], recompute=["full"], micro_batch=[1])
    rp = replan_on_failure(model, topo, 96, 4096, failed=[13], space=small, evaluator=_linear_evaluator)
    assert rp.survivors == [r for r in range(32) if not 8 <= r < 16]
    assert 13 in rp.dropped and rp.planning_cost_s > 0
    assert rp.plan.best.choice.devices == 24
    assert survivors_after(topo, range(32), [13], drop_whole_node=False) == [r for r in range(32) if r != 13]
    with pytest.raises(RlsimError, match="not in the plan"):
        replan_on_failure(model, topo, 96, 4096, failed=[99], evaluator=_linear_evaluator)
    # the whole pool failed: not "lower the global batch", which cannot help (a notebook trial)
    with pytest.raises(RlsimError, match="none survives") as caught:
        replan_on_failure(model, topo, 96, 4096, ranks=range(8), failed=[3], evaluator=_linear_evaluator)
    assert "fail fewer devices" in caught.value.fix


def test_failure_mid_run_continues_on_survivors_with_lost_time_in_the_timeline():
    topo = load_topology("dgx-h100", {"nodes": 4})
    model = load_model("llama3.1-8b")
    small = SearchSpace(tp=[1, 2, 4, 8], vpp=[1], cp=[1], zero=[1], recompute=["full"], micro_batch=[1])
    rec = RecoveryParams(restart_s=60.0, checkpoint_every_steps=5)
    fail_at = 7.5 * 1000 / 32 * 1.01
    run = simulate_failure_run(model, topo, 96, 4096, steps=20, fail_at_s=fail_at,
                               failed=[3], space=small, evaluator=_linear_evaluator, recovery=rec)
    tl = run.timeline
    assert list(tl.columns) == INTERVAL_COLUMNS
    assert run.steps_done == 20
    assert run.step_time_after_s > run.step_time_before_s  # fewer devices, slower steps
    states = set(tl["state"])
    assert {"train", "lost", "replan", "restart"} <= states
    # lost = the step in flight + the steps finished after the checkpoint at step 5
    step = run.step_time_before_s
    finished = int(fail_at // step)
    assert finished > 5
    assert run.lost_s == pytest.approx(fail_at - finished * step + (finished - 5) * step)
    lost = tl[tl.state == "lost"]
    assert (lost.end - lost.start).sum() == pytest.approx(run.lost_s)
    assert tl.loc[tl.state == "restart", "end"].iloc[0] - tl.loc[tl.state == "restart", "start"].iloc[0] == 60.0
    # the timeline is contiguous: no gap, no overlap
    ends, starts = tl["end"].to_numpy()[:-1], tl["start"].to_numpy()[1:]
    assert (abs(ends - starts) < 1e-9).all()
    assert run.finish_s == pytest.approx(tl["end"].max())
    # deterministic
    again = simulate_failure_run(model, topo, 96, 4096, steps=20, fail_at_s=fail_at,
                                 failed=[3], space=small, evaluator=_linear_evaluator, recovery=rec)
    assert again.timeline.equals(tl)


@pytest.mark.parametrize("tp,pp,zero", [(2, 1, 0), (8, 1, 0), (2, 2, 0), (4, 4, 0), (2, 1, 1), (2, 2, 2)])
def test_hetero_step_model_on_a_homogeneous_cluster_matches_the_training_model(tp, pp, zero):
    """The planner's mixed-device step model takes its stage times from the training cost model, so
    on one device kind it agrees with train_step_cost (DP overlap and the closed-form 1F1B differ)."""
    from simulator.llm.training import TrainLayout, train_step_cost, uniform_sequences

    model = load_model("gpt-7.5b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 4})
    dp, micro_batches = 32 // (tp * pp), 256
    hetero = HeteroStepModel(model, topo, 2048, 1).evaluate(list(range(32)), tp, pp, dp, micro_batches,
                                                            balanced=False, zero=zero)
    full = train_step_cost(model, TrainLayout(tp=tp, pp=pp, zero=zero, recompute="full", micro_batch=1), topo,
                           None, uniform_sequences(micro_batches, 2048))
    assert hetero.step_time_s == pytest.approx(full.step_time_s, rel=0.04)


@pytest.mark.parametrize("pp", [2, 4])
def test_a_tied_embedding_adds_the_first_and_last_stage_all_reduce_as_the_training_model(pp):
    """gpt-7.5b ties its embedding (Megatron's GPT): under pp > 1 its copies on the first and the last stage
    all-reduce their gradients after the DP sync (llm/training.py _tied_embedding_sync_s), over the
    stage pair of a pipeline; at pp 1 there is one copy."""
    import dataclasses

    tied = load_model("gpt-7.5b")
    untied = dataclasses.replace(tied, tied_embeddings=False)
    topo = load_topology({"preset": "dgx-h100", "nodes": 4})
    tp, dp = 2, 32 // (2 * pp)
    steps = [HeteroStepModel(m, topo, 2048, 1).evaluate(list(range(32)), tp, pp, dp, 64, balanced=False)
             for m in (tied, untied)]
    stm = HeteroStepModel(tied, topo, 2048, 1)
    table = tied.vocab * tied.hidden / tp * stm.train_params.comm.grad_reduce_bytes_per_param
    first, last = 0, tp * dp * (pp - 1)   # tp fastest, then dp, pp: stage s starts at rank tp dp s
    expected = stm.collectives.cost("all_reduce", [first, last], table).time_s
    assert expected > 0 and steps[0].step_time_s - steps[1].step_time_s == pytest.approx(expected, rel=1e-9)
    assert stm._tied_embedding_sync_s(list(range(32)), tp, 1, 16) == 0.0   # pp 1: one copy


@pytest.mark.parametrize("zero", [0, 1])
def test_the_grad_norm_all_reduce_is_priced_over_the_groups_the_training_model_takes(zero):
    """Gradient clipping's fp32 norm is all-reduced before the optimizer step (llm/training.py
    _grad_stats_sync_s): over every rank with the distributed optimizer, over one replica's tp x pp ranks at
    ZeRO 0; switched off by comm.grad_norm_all_reduce, doubled by the zero count."""
    from simulator.llm.training import GRAD_STAT_BYTES

    model = load_model("gpt-7.5b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 4})
    tp, pp, dp = 2, 2, 8
    ranks = list(range(32))
    on = HeteroStepModel(model, topo, 2048, 1)
    comm = on.train_params.comm
    params_with = {flags: on.train_params.model_copy(update={"comm": comm.model_copy(update={
        "grad_norm_all_reduce": flags[0], "grad_zeros_all_reduce": flags[1]})}) for flags in [(False, False), (True, True)]}
    steps = {flags: HeteroStepModel(model, topo, 2048, 1, train_params=train_params).evaluate(
        ranks, tp, pp, dp, 64, balanced=False, zero=zero).step_time_s for flags, train_params in params_with.items()}
    base = on.evaluate(ranks, tp, pp, dp, 64, balanced=False, zero=zero).step_time_s
    group = ranks if zero else [0, 1, 16, 17]   # replica 0: tp ranks 0-1 of stage 0, 16-17 of stage 1
    one = on.collectives.cost("all_reduce", group, GRAD_STAT_BYTES).time_s
    assert one > 0
    assert base - steps[(False, False)] == pytest.approx(one, rel=1e-9)
    assert steps[(True, True)] - steps[(False, False)] == pytest.approx(2 * one, rel=1e-9)


def test_zero_shards_the_optimizer_state_and_prices_the_sync_as_the_training_model():
    """ZeRO-1 fits a layout whose optimizer state does not fit unsharded; its sync is the gradients'
    reduce-scatter and the weights' all-gather, its memory the stack's bytes with the state over DP."""
    from simulator.llm.training import GRAD_STAT_BYTES

    model = load_model("gpt-7.5b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    stm = HeteroStepModel(model, topo, 2048, 1, params=HeteroParams(dp_overlap_fraction=0.0))
    ranks = list(range(16))
    with pytest.raises(RlsimError, match="stage 0 needs"):   # 18 B x 7.5e9 = 134 GB of states
        stm.evaluate(ranks, 1, 1, 16, 64, zero=0)
    one = stm.evaluate(ranks, 1, 1, 16, 64, zero=1)          # (2 + 4 + 12 / 16) B x 7.5e9 = 50 GB: fits
    shard, dp_group = model.params_total, ranks
    sync = (stm.collectives.cost("reduce_scatter", dp_group, shard * 4.0).time_s
            + stm.collectives.cost("all_gather", dp_group, shard * 2.0).time_s)
    fill = sum(one.stage_time_s[0]) - max(one.stage_time_s[0])
    norm = stm.collectives.cost("all_reduce", ranks, GRAD_STAT_BYTES).time_s   # the grad norm over all ranks
    assert one.step_time_s == pytest.approx(fill + one.microbatches_per_replica[0] * max(one.stage_time_s[0]) + sync
                                            + norm)
    with pytest.raises(RlsimError, match="ZeRO 0-2"):
        plan_hetero(model, topo, 64, 2048, zero_values=(3,))
    with pytest.raises(RlsimError, match="unsharded total"):
        plan_hetero(model, topo, 64, 2048, zero_values=(1,), params=HeteroParams(state_bytes_per_param=10.0))


def test_the_hetero_memory_check_holds_the_stacks_bytes_per_parameter():
    """One set of defaults: the mixed-device model's states per parameter are the training stack's
    (18 B with Megatron-Core's fp32 gradient buffer, 16 with megatron-2021) unless planner.hetero sets them."""
    from simulator.params import train_software

    model = load_model("gpt-7.5b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    assert HeteroStepModel(model, topo, 2048).state_bytes_per_param == 18.0
    old = HeteroStepModel(model, topo, 2048, train_params=train_software("megatron-2021").params)
    assert old.state_bytes_per_param == 16.0
    assert HeteroStepModel(model, topo, 2048, params=HeteroParams(state_bytes_per_param=10.0)).state_bytes_per_param == 10.0
    # a 7.5B model on one H100 without TP or PP: 18 B x 7.5e9 = 135 GB of states do not fit 80 GiB
    with pytest.raises(RlsimError, match="stage 0 needs"):
        HeteroStepModel(model, topo, 2048).evaluate([0], 1, 1, 1, 1)


@pytest.mark.parametrize("tp, pp, zero, recompute, micro_batch", [
    (1, 1, 0, "full", 1), (2, 2, 1, "selective", 2), (4, 4, 2, "none", 1), (1, 2, 1, "none", 4), (8, 1, 2, "full", 2)])
def test_the_hetero_memory_check_counts_what_the_training_memory_model_counts(tp, pp, zero, recompute, micro_batch):
    # an even split of a homogeneous cluster: each stage's bytes are the training model's (llm/memory.py)
    from simulator.llm.memory import memory_per_device

    model, topo = load_model("llama3.1-8b"), load_topology({"preset": "dgx-h100", "nodes": 2})
    dp = 16 // (tp * pp)
    stm = HeteroStepModel(model, topo, 4096, micro_batch, recompute=recompute)
    layers = [model.num_layers // pp] * pp
    mine = stm.stage_memory_bytes(tp, pp, dp, layers, zero)
    theirs = memory_per_device(model, TrainLayout(tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
                                                  micro_batch=micro_batch), 4096, 80e9,
                               params=stm.train_params.memory, micro_batches=4 * pp)
    assert max(mine) == pytest.approx(theirs.total_bytes, rel=1e-9)
    assert mine.index(max(mine)) == theirs.stage


def test_no_zero_stage_is_reported_where_dp_is_1():
    # the even split came back as tp 2, pp 8, dp 1, zero 2: nothing to shard over (the main search
    # prunes it as zero_without_dp)
    plan = plan_hetero(load_model("llama3.1-8b"), _hetero(1, 1), 64, 2048, zero_values=(2,), pp_values=(8,))
    for result in (plan.uniform, plan.balanced):
        assert result.dp > 1 or result.zero == 0


def test_a_failure_the_running_layouts_neighbourhood_cannot_tile_widens_the_search():
    """TP8 CP2 (16 devices a slice) on 48 GPUs loses a node: 40 survivors, which no layout keeping
    TP8 CP2 tiles, so the neighbourhood leaves a node idle (32 devices). With recovery.widen the
    planner's whole space is searched on the survivors too and the faster plan kept (40 devices
    here, step time inverse in devices), both searches' cost counted; devices_kept (a colocated
    pool generates there too) ranks a plan that keeps more devices first whatever its step."""
    from simulator.planner.search import TrainChoice
    topo = load_topology("dgx-h100", {"nodes": 6})
    model = load_model("llama3.1-8b")
    current = TrainChoice(8, 1, 1, 3, 1, 2, 1, "full", 1)
    args = dict(failed=[13], current=current, evaluator=_linear_evaluator)
    near = replan_on_failure(model, topo, 120, 4096, recovery=RecoveryParams(widen=False), **args)
    assert len(near.survivors) == 32 and (near.layout["tp"], near.layout["cp"]) == (8, 2)
    wide = replan_on_failure(model, topo, 120, 4096, **args)
    assert len(wide.survivors) == 40 and wide.plan.best.choice.devices == 40
    assert wide.plan.best.evaluation.step_time_s < near.plan.best.evaluation.step_time_s
    assert wide.planning_cost_s > near.planning_cost_s

    def slow_when_wide(c, ranks):    # the near layout faster: kept on a split pool, not on a colocated one
        return _linear_evaluator(c, ranks) if (c.tp, c.cp) == (8, 2) else Evaluation(1e6, 1.0, 0.4, 1e9, 0.1)
    args["evaluator"] = slow_when_wide
    assert len(replan_on_failure(model, topo, 120, 4096, **args).survivors) == 32
    kept = replan_on_failure(model, topo, 120, 4096, devices_kept=lambda n, choice: n, **args)
    assert len(kept.survivors) == 40


def test_a_rollout_plan_costs_each_engine_on_its_own_devices_whatever_the_group_order(tmp_path):
    """Every engine was costed on the first engine's device: the plan of one cluster changed with the
    order of its groups (H100 + H20: 19.9 s first, 27.1 s second; a trial). Each kind's engines now
    run their round-robin share: with TP 1 the 16 engines of 8 A100 + 8 H100 take exactly what the
    8 A100 engines take for their half of the sequences, and MFU is against every device's peak."""
    import yaml

    from simulator.planner import RolloutSpace, plan_rollout
    from simulator.planner.evaluate import RolloutEvaluator

    model = load_model("qwen2.5-7b")
    space = RolloutSpace(sequences=128, prompt_len=256, response_len=512, tp=[1, 2], max_num_seqs=[256])
    preset = yaml.safe_load(open("topologies/hetero-a100-h100.yaml"))
    plans = []
    for order in (("a100", "h100"), ("h100", "a100")):
        path = tmp_path / f"{order[0]}-first.yaml"
        path.write_text(yaml.safe_dump({**preset, "groups": {k: preset["groups"][k] for k in order}}, sort_keys=False))
        plans.append({tuple(sorted(c.layout.items())): c.evaluation for c in
                      plan_rollout(model, load_topology(str(path)), space=space).candidates})
    assert plans[0] == plans[1] and len(plans[0]) == 2
    mixed = plans[0][(("ep", 1), ("instances", 16), ("max_num_seqs", 256), ("tp", 1))]
    alone = RolloutEvaluator(model, load_topology("dgx-a100", {"nodes": 1}), space.model_copy(update={"sequences": 64}))(
        {"tp": 1, "ep": 1, "instances": 8, "max_num_seqs": 256}, list(range(8)))
    assert mixed.step_time_s == pytest.approx(alone.step_time_s, rel=1e-12)
    h100_peak = load_topology("dgx-h100", {"nodes": 1}).device_spec(0).peak("bf16")
    # twice the FLOPs over the A100s' peak and the H100s'
    assert mixed.mfu == pytest.approx(2 * alone.mfu / (1 + h100_peak / load_topology("dgx-a100", {"nodes": 1})
                                                   .device_spec(0).peak("bf16")), rel=1e-9)


def test_an_engine_spanning_kinds_generates_no_faster_than_on_its_slowest_kind(tmp_path):
    """A TP-2 engine over an H100 and an H20 was costed as an H100 (the lower HBM bandwidth) with the
    H100's FLOPs: 7.7 s, as fast as two H100s, where two H20s take 22.1 s (an audit). Each rate is now
    the slower kind's: prefill at the H20's FLOPs, decode at the H100's HBM bandwidth."""
    from simulator.planner import RolloutSpace
    from simulator.planner.evaluate import RolloutEvaluator

    model = load_model("qwen2.5-7b")
    space = RolloutSpace(sequences=64, prompt_len=4096, response_len=256, tp=[2], max_num_seqs=[256])
    layout = {"tp": 2, "ep": 1, "instances": 1, "max_num_seqs": 256}
    step = {pair: RolloutEvaluator(model, _two_devices(tmp_path, *pair), space)(layout, [0, 1]).step_time_s
            for pair in (("h100", "h20"), ("h20", "h20"), ("h100", "h100"))}
    assert step["h100", "h20"] >= max(step["h20", "h20"], step["h100", "h100"])


def test_mfu_on_a_mixed_cluster_is_against_every_devices_own_peak():
    """The training step's MFU took the pacing kind's peak for every device (a plan said 0.73 on H100
    + H20 where the run's MFU, against the sum of peaks, said 0.10; a topology trial)."""
    from simulator.llm.training import train_step_cost, uniform_sequences

    topo = _hetero(1, 1)
    layout = TrainLayout(tp=1, pp=1, dp=16, micro_batch=1, zero=1, recompute="full")
    cost = train_step_cost(load_model("llama3.1-8b"), layout, topo, sequences=uniform_sequences(64, 2048))
    peaks = sum(topo.device_spec(rank).peak("bf16") for rank in range(16))
    assert cost.mfu == pytest.approx(cost.model_flops / (cost.step_time_s * peaks), rel=1e-12)
    alike = train_step_cost(load_model("llama3.1-8b"), TrainLayout(tp=1, pp=1, dp=8, micro_batch=1, zero=1, recompute="full"),
                            load_topology("dgx-h100", {"nodes": 1}), sequences=uniform_sequences(64, 2048))
    assert alike.mfu == pytest.approx(alike.model_flops / (alike.step_time_s * 8 * load_topology(
        "dgx-h100", {"nodes": 1}).device_spec(0).peak("bf16")), rel=1e-12)


def test_balance_counts_kinds_by_their_specs_not_their_names(tmp_path, capsys):
    """Two H100 groups, one with its own HBM rate (a degraded node), were 'one kind (h100)' to
    --balance (a topology trial)."""
    from simulator.cli import main
    path = tmp_path / "two-h100s.yaml"
    path.write_text("name: two-h100s\ndevices_per_node: 8\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  h100: {device: h100, nodes: 1}\n"
                    "  slow: {device: {name: h100, hbm_bw_Bps: 2TB/s}, nodes: 1}\n")
    assert main(["plan", "--topology", str(path), "--model", "llama3.1-8b", "--global-batch", "256", "--seq-len",
                 "4096", "--balance", "--top", "1", "--set", "planner.space.tp=[1]", "--set",
                 "planner.space.pp=[1]"]) == 0
    assert "speedup of the balanced split over the even one" in capsys.readouterr().out


def test_the_sync_is_the_heaviest_stages_own_share():
    """A balanced split's heavier stage reduces its own parameters: params_total / (tp pp) priced a
    (9, 23) split's 23-layer stage at 0.73 of its share (a heterogeneous-cluster audit). One stage
    syncs the whole model; an even split of an untied model its half plus the embedding's."""
    model = load_model("llama3.1-8b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 2})
    stm = HeteroStepModel(model, topo, 2048, 1, params=HeteroParams(dp_overlap_fraction=0.0))
    ranks = list(range(16))
    assert sum(stm._stage_params([32])) == pytest.approx(model.params_total, rel=1e-12)
    even, skewed = stm._sync_s(ranks, 1, 2, 8, 1, [16, 16]), stm._sync_s(ranks, 1, 2, 8, 1, [9, 23])
    heavy = max(stm._stage_params([9, 23]))
    from simulator.planner.placement import groups
    dp_group = groups(ranks, "dp", 1, 1, 8, 2)[0]   # a stage's DP group (one node: pp is outermost)
    expected = (stm.collectives.cost("reduce_scatter", dp_group, heavy * 4.0).time_s
                + stm.collectives.cost("all_gather", dp_group, heavy * 2.0).time_s)
    assert skewed > even and skewed == pytest.approx(expected, rel=1e-9)


def test_deepspeeds_all_reduce_of_the_zero_gradients_is_priced_as_the_training_model():
    """comm.zero_grad_reduce all-reduce (DeepSpeed's buckets): the gradients' all-reduce, not their
    reduce-scatter, beside the weights' all-gather."""
    from simulator.params import CommParams, TrainParams

    model = load_model("llama3.1-8b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    comm = CommParams(grad_reduce_bytes_per_param=2.0, zero_grad_reduce="all-reduce")
    stm = HeteroStepModel(model, topo, 2048, 1, params=HeteroParams(dp_overlap_fraction=0.0),
                          train_params=TrainParams(comm=comm))
    ranks = list(range(8))
    expected = (stm.collectives.cost("all_reduce", ranks, model.params_total * 2.0).time_s
                + stm.collectives.cost("all_gather", ranks, model.params_total * 2.0).time_s)
    assert stm._sync_s(ranks, 1, 1, 8, 2) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("zero", [1, 2])
def test_the_hetero_memory_check_leaves_zero_offloads_host_partition_out_as_the_training_model(zero):
    """memory.grad_partition_on_host: no gradient partition on the device at ZeRO-2 (the whole gradients at
    ZeRO-1): the hetero stage bytes equal llm/memory.py's."""
    from simulator.llm.memory import memory_per_device
    from simulator.params import MemoryParams, OffloadParams, TrainParams

    model, topo = load_model("llama3.1-8b"), load_topology({"preset": "dgx-h100", "nodes": 1})
    memory = MemoryParams(grad_bytes_per_param=2.0, zero_reduce_bucket_params=5e8, grad_partition_on_host=True)
    params = TrainParams(memory=memory, offload=OffloadParams(optimizer=True, scope="optimizer_step"))
    mine = HeteroStepModel(model, topo, 4096, 1, train_params=params).stage_memory_bytes(
        1, 1, 8, [model.num_layers], zero, micro_batches=4)
    theirs = memory_per_device(model, TrainLayout(tp=1, pp=1, dp=8, zero=zero, recompute="full"), 4096, 80e9,
                               params=memory, micro_batches=4)
    assert mine[0] == pytest.approx(theirs.total_bytes, rel=1e-9)
    assert (theirs.gradients_bytes == 0.0) == (zero == 2)


@pytest.mark.parametrize(("zero", "dp", "seq"), [(1, 2, 256), (1, 8, 256), (2, 8, 256), (2, 8, 8192)])
def test_the_hetero_memory_check_takes_deepspeeds_step_peak_where_larger_as_the_training_model(zero, dp, seq):
    """memory.zero_step_grad_copy_bytes_per_param: the optimizer step's peak (weights, optimizer state, the
    partition and its copies) where it exceeds the backward's; the hetero stage bytes equal llm/memory.py's."""
    from simulator.llm.memory import memory_per_device
    from simulator.params import MemoryParams, TrainParams

    model, topo = load_model("llama3.1-8b"), load_topology({"preset": "dgx-h100", "nodes": 1})
    memory = MemoryParams(grad_bytes_per_param=2.0, zero_step_grad_copy_bytes_per_param=6.0)
    mine = HeteroStepModel(model, topo, seq, 1, train_params=TrainParams(memory=memory)).stage_memory_bytes(
        1, 1, dp, [model.num_layers], zero, micro_batches=1)
    theirs = memory_per_device(model, TrainLayout(tp=1, pp=1, dp=dp, zero=zero, recompute="full"), seq, 80e9,
                               params=memory, micro_batches=1)
    assert mine[0] == pytest.approx(theirs.total_bytes, rel=1e-9)
    assert (theirs.total_bytes == theirs.step_bytes) == (seq == 256 and (zero, dp) != (1, 8))


@pytest.mark.parametrize("zero", [1, 2])
def test_the_hetero_memory_check_counts_deepspeeds_backward_buffers_as_the_training_model(zero):
    """DeepSpeed's buckets (2 x 5e8 x 2 B) and, at ZeRO-2 with 4 micro-batches, the accumulated bf16
    partition: the hetero stage bytes equal llm/memory.py's (pp 1, so each replica's 4 are its own)."""
    from simulator.llm.memory import memory_per_device
    from simulator.params import MemoryParams, TrainParams

    model, topo = load_model("llama3.1-8b"), load_topology({"preset": "dgx-h100", "nodes": 1})
    memory = MemoryParams(grad_bytes_per_param=2.0, zero_reduce_bucket_params=5e8, zero_reduce_buckets=2,
                          zero2_accumulated_grad_partitions=1)
    stm = HeteroStepModel(model, topo, 4096, 1, train_params=TrainParams(memory=memory))
    mine = stm.stage_memory_bytes(1, 1, 8, [model.num_layers], zero, micro_batches=4)
    theirs = memory_per_device(model, TrainLayout(tp=1, pp=1, dp=8, zero=zero, recompute="full"), 4096, 80e9,
                               params=memory, micro_batches=4)
    assert mine[0] == pytest.approx(theirs.total_bytes, rel=1e-9) and theirs.zero_buffers_bytes >= 2e9
    bare = HeteroStepModel(model, topo, 4096, 1).stage_memory_bytes(1, 1, 8, [model.num_layers], zero, micro_batches=4)
    plain = memory_per_device(model, TrainLayout(tp=1, pp=1, dp=8, zero=zero, recompute="full"), 4096, 80e9,
                              micro_batches=4)
    assert bare[0] == pytest.approx(plain.total_bytes, rel=1e-9)


def test_deepspeeds_zero2_reduces_in_every_micro_batch_of_the_hetero_step():
    """comm.zero2_reduce_every_micro_batch: the gradients' all-reduce once a micro-batch of the replica
    running most (8 micro-batches over 8 replicas of one node: 1 each; 32: 4), the weights' all-gather once."""
    from simulator.params import CommParams, TrainParams

    model = load_model("llama3.1-8b")
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    comm = CommParams(grad_reduce_bytes_per_param=2.0, zero_grad_reduce="all-reduce", zero2_reduce_every_micro_batch=True,
                      grad_norm_all_reduce=False)   # the DP sync alone
    stm = HeteroStepModel(model, topo, 2048, 1, params=HeteroParams(dp_overlap_fraction=0.0),
                          train_params=TrainParams(comm=comm))
    ranks = list(range(8))
    reduce = stm.collectives.cost("all_reduce", ranks, model.params_total * 2.0).time_s
    gather = stm.collectives.cost("all_gather", ranks, model.params_total * 2.0).time_s
    assert stm._sync_s(ranks, 1, 1, 8, 2, micro_batches=4) == pytest.approx(4 * reduce + gather, rel=1e-9)
    assert stm._sync_s(ranks, 1, 1, 8, 1, micro_batches=4) == pytest.approx(reduce + gather, rel=1e-9)
    r = stm.evaluate(ranks, 1, 1, 8, 32, zero=2)   # one stage: a replica's step is its micro-batches' time
    assert r.microbatches_per_replica == (4,) * 8
    assert r.step_time_s == pytest.approx(4 * r.stage_time_s[0][0] + 4 * reduce + gather, rel=1e-9)


# A value off each ZeRO-3-only comm key's default: DeepSpeed ZeRO-3's per-micro-batch switches and FSDP's
# two overlap fractions (llm/training.py _fsdp_hidden, read by the ZeRO-3 layer collectives only).
ZERO3_ONLY_COMM_GIVEN = {"zero3_outer_sync_every_micro_batch": True, "zero3_backward_waits_last_bucket": True,
                         "fsdp_gather_overlap_fraction": 0.9, "fsdp_reduce_overlap_fraction": 0.5}


def test_the_hetero_steps_zero3_only_comm_keys_are_those_params_gates_admit_at_zero3_alone():
    """Derived from params.LAYOUT_GATED_COMM's gates, not listed: FSDP's gather / reduce-scatter overlap
    fractions beside DeepSpeed ZeRO-3's two switches; ZeRO-1 / 2's zero_grad_reduce and ZeRO-2's
    zero2_reduce_every_micro_batch stay read."""
    from simulator.planner.hetero import ZERO3_ONLY_COMM

    assert set(ZERO3_ONLY_COMM) == set(ZERO3_ONLY_COMM_GIVEN)


@pytest.mark.parametrize("knob", sorted(ZERO3_ONLY_COMM_GIVEN))
def test_zero3_only_comm_keys_are_refused_by_the_hetero_step_naming_their_key(knob):
    """The heterogeneous step model runs ZeRO 0-2 and llm/training.py reads these only at ZeRO-3 (the
    switches in _dp_and_optimizer, the fractions in the per-layer FSDP collectives): given, no layout it
    tries prices them, so it refuses them naming the key rather than read past."""
    from simulator.params import CommParams, MemoryParams, TrainParams

    params = TrainParams(comm=CommParams(**{knob: ZERO3_ONLY_COMM_GIVEN[knob]}),
                         memory=MemoryParams(zero_reduce_bucket_params=5e8))
    _assert_refused_by_the_hetero_step(params, f"comm.{knob}")


def _assert_refused_by_the_hetero_step(params, key: str) -> None:
    """The heterogeneous step model refuses ``params`` naming workload.train_params.``key`` and --balance."""
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    with pytest.raises(RlsimError) as info:
        HeteroStepModel(load_model("qwen2.5-7b"), topo, 2048, 1, train_params=params)
    assert info.value.field == f"workload.train_params.{key}"
    assert "ZeRO 0-2" in info.value.message and "--balance" in info.value.fix
    assert f"remove workload.train_params.{key}" in info.value.fix


# A value off each ZeRO-3-only memory key's default that MemoryParams admits on its own (the sub-group
# needs the step copies it caps).
ZERO3_ONLY_MEMORY_GIVEN = {
    "zero3_prefetch_layers": {"zero3_prefetch_layers": 2},
    "zero3_outer_gathered": {"zero3_outer_gathered": False},
    "zero3_reshard_after_forward": {"zero3_reshard_after_forward": False},
    "zero3_max_live_params": {"zero3_max_live_params": 1e9},
    "zero_step_sub_group_params": {"zero_step_sub_group_params": 1e9, "zero_step_grad_copy_bytes_per_param": 6.0},
}


def test_the_hetero_steps_zero3_only_memory_keys_are_those_params_gates_admit_at_zero3_alone():
    """Derived from params.LAYOUT_GATED_MEMORY's gates, not listed: the five that only ZeRO-3 reads; the
    ZeRO 1-3 buckets (zero_reduce_buckets_kept included: llm/memory.py zero_kept_bucket_bytes reads it
    at ZeRO 1-2 too) and step copies, ZeRO 2-3's host partition and ZeRO-2's accumulation stay read."""
    from simulator.planner.hetero import ZERO3_ONLY_MEMORY

    assert set(ZERO3_ONLY_MEMORY) == set(ZERO3_ONLY_MEMORY_GIVEN)


@pytest.mark.parametrize("knob", sorted(ZERO3_ONLY_MEMORY_GIVEN))
def test_zero3_only_memory_keys_are_refused_by_the_hetero_step_naming_their_key(knob):
    """llm/memory.py reads these only at ZeRO-3, which the heterogeneous step model does not run: given off
    their defaults, no layout it tries holds them, so it refuses them naming the key rather than read past."""
    from simulator.params import MemoryParams, TrainParams

    memory = {"zero_reduce_bucket_params": 5e8, **ZERO3_ONLY_MEMORY_GIVEN[knob]}
    _assert_refused_by_the_hetero_step(TrainParams(memory=MemoryParams(**memory)), f"memory.{knob}")


def test_zero3_only_memory_keys_at_their_defaults_and_zero_1_3_keys_are_taken_by_the_hetero_step():
    """The refusal is of values given: the defaults (which every stack keeps) and the ZeRO 1-3 keys, which
    the balanced rows' ZeRO 1 / 2 read, build a step model."""
    from simulator.params import CommParams, MemoryParams, TrainParams

    defaults = {knob: MemoryParams.model_fields[knob].default for knob in ZERO3_ONLY_MEMORY_GIVEN}
    memory = MemoryParams(**defaults, zero_reduce_bucket_params=5e8, zero_reduce_buckets=2, zero_reduce_buckets_kept=1,
                          zero_step_grad_copy_bytes_per_param=6.0, zero2_accumulated_grad_partitions=1)
    comm = CommParams(**{knob: CommParams.model_fields[knob].default for knob in ZERO3_ONLY_COMM_GIVEN},
                      zero_grad_reduce="all-reduce", zero2_reduce_every_micro_batch=True)
    topo = load_topology({"preset": "dgx-h100", "nodes": 1})
    HeteroStepModel(load_model("qwen2.5-7b"), topo, 2048, 1, train_params=TrainParams(memory=memory, comm=comm))
