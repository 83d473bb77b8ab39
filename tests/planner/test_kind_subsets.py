"""A heterogeneous plan may leave a device kind idle (planner/kind_subsets.py): closed-form cases of a
fast device beside one k times slower, data parallel only, where each replica's step is its
micro-batches x its per-micro-batch time and the pair adds one gradient all-reduce."""
from __future__ import annotations

import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.planner.hetero import HeteroStepModel
from simulator.planner.kind_subsets import (
    MAX_KINDS_EVERY_SUBSET,
    DeviceKind,
    kind_subsets,
    plan_kind_subsets,
)

PAIR = ("name: pair\ndevices_per_node: 1\nscaleup: {{kind: switch}}\nscaleout: {{nic_bw: 400Gb/s}}\n"
        "groups:\n  fast: {{device: h100, nodes: 1}}\n"
        "  slow: {{device: {{base: h100, name: h100-over-{k}, peak_flops: {{bf16: {flops}}}, hbm_bw_Bps: {bw}}}, "
        "nodes: 1}}\n")
MODEL, SEQ_LEN = "gpt-1.7b", 2048


def _pair(tmp_path, k: int):
    """An H100 (rank 0) beside an H100 whose FLOP/s and HBM rate are k times lower (rank 1)."""
    h100 = load_topology("dgx-h100", {"nodes": 1}).device_spec(0)
    path = tmp_path / f"pair-{k}.yaml"
    path.write_text(PAIR.format(k=k, flops=h100.peak("bf16") / k, bw=h100.hbm_bw_Bps / k))
    return load_topology(str(path))


def _closed_form(topology, micro_batches: int) -> dict[str, float]:
    """Each kind's time for one micro-batch (the step model's per-layer and head units, pp 1), the
    pair's gradient all-reduce, and from them the step of each subset: one device runs every
    micro-batch; the pair runs the best integer split (at least one each) plus the all-reduce."""
    model = load_model(MODEL)
    stm = HeteroStepModel(model, topology, SEQ_LEN, 1)
    per_mb = {}
    for rank in (0, 1):
        per_layer, head = stm._stage_unit([rank])
        per_mb[rank] = model.num_layers * per_layer + head
    sync = stm._sync_s([0, 1], 1, 1, 2, 0, [model.num_layers])
    both = min(max((micro_batches - on_slow) * per_mb[0], on_slow * per_mb[1])
               for on_slow in range(1, micro_batches)) + sync
    return {"fast_mb": per_mb[0], "slow_mb": per_mb[1], "sync": sync, "fast": micro_batches * per_mb[0],
            "slow": micro_batches * per_mb[1], "both": both}


def _plan(topology, micro_batches: int):
    return plan_kind_subsets(load_model(MODEL), topology, micro_batches, SEQ_LEN, tp_values=[1], pp_values=[1])


def test_a_kind_k_times_slower_than_the_whole_step_is_left_idle(tmp_path):
    """k = 16, 8 micro-batches: one micro-batch on the slow device takes ~16 fast ones, longer than
    the fast device's whole step (8), so any split using it is slower than the fast device alone.
    plan_hetero gave the slow replica at least one micro-batch whatever it cost (an audit)."""
    k, micro_batches = 16, 8
    topo = _pair(tmp_path, k)
    expected = _closed_form(topo, micro_batches)
    assert expected["slow_mb"] / expected["fast_mb"] == pytest.approx(k, rel=0.1)
    assert expected["slow_mb"] > micro_batches * expected["fast_mb"]   # the proof: both >= slow_mb > fast
    plan = _plan(topo, micro_batches)
    assert [k.label for k in plan.kinds] == ["h100", "h100-over-16"]
    steps = {tuple(plan.kinds[i].label for i in c.kinds): c.step_time_s for c in plan.candidates}
    assert steps == pytest.approx({("h100", "h100-over-16"): expected["both"], ("h100",): expected["fast"],
                                   ("h100-over-16",): expected["slow"]}, rel=1e-12)
    best = plan.best
    assert best.kinds == (0,) and best.plan.balanced.placement == (0,)
    assert plan.whole.balanced.step_time_s == pytest.approx(expected["both"], rel=1e-12)   # every kind: as before
    doc = plan.to_json()
    assert doc["best"]["kinds"] == ["h100"] and doc["best"]["devices"] == 1
    assert doc["best"]["speedup_over_every_kind"] == pytest.approx(expected["both"] / expected["fast"], rel=1e-12)
    # the price: the idle device for the whole (fast) step, per 1000 steps
    assert doc["best"]["idle"] == [{"kind": "h100-over-16", "devices": 1,
                                    "idle_device_hours_per_1000_steps": pytest.approx(
                                        expected["fast"] * 1000 / 3600, rel=1e-12),
                                    "step_time_with_it_s": pytest.approx(expected["both"], rel=1e-12)}]
    assert doc["balanced"]["kinds"] == ["h100", "h100-over-16"]


def test_a_kind_twice_as_slow_is_used_where_its_share_outweighs_the_sync(tmp_path):
    """k = 2, 64 micro-batches: the slow device takes about a third of them (21 of 64), which saves
    more than the pair's all-reduce costs, so the plan keeps both kinds and leaves none idle."""
    k, micro_batches = 2, 64
    topo = _pair(tmp_path, k)
    expected = _closed_form(topo, micro_batches)
    assert expected["slow_mb"] / expected["fast_mb"] == pytest.approx(k, rel=0.1)
    assert expected["both"] < expected["fast"] < expected["slow"]
    plan = _plan(topo, micro_batches)
    assert plan.best.kinds == (0, 1) and plan.best is plan.candidates[0]
    assert plan.best.step_time_s == pytest.approx(expected["both"], rel=1e-12)
    assert [c.step_time_s for c in plan.candidates[1:]] == pytest.approx([expected["fast"], expected["slow"]],
                                                                          rel=1e-12)
    doc = plan.to_json()
    assert doc["best"]["idle"] == [] and doc["best"]["speedup_over_every_kind"] == 1.0
    assert doc["subsets_tried"] == "every non-empty subset of the 2 kinds"


def _kinds(peaks: list[float]) -> list[DeviceKind]:
    return [DeviceKind(f"k{i}", (i,), peak) for i, peak in enumerate(peaks)]


def test_every_subset_up_to_the_bound_then_the_fastest_kinds_first():
    subsets, rule = kind_subsets(_kinds([1.0, 3.0, 2.0, 4.0][:MAX_KINDS_EVERY_SUBSET]))
    assert len(subsets) == 2 ** MAX_KINDS_EVERY_SUBSET - 1 == len(set(subsets))
    assert subsets[0] == tuple(range(MAX_KINDS_EVERY_SUBSET)) and "every non-empty subset" in rule
    # past the bound, the n prefixes of the kinds by peak, every kind first: fastest (3), then 3 and 1 ...
    subsets, rule = kind_subsets(_kinds([1.0, 3.0, 2.0, 4.0, 0.5]))
    assert subsets == [(0, 1, 2, 3, 4), (0, 1, 2, 3), (1, 2, 3), (1, 3), (3,)]
    assert "fastest 1 to 5 kinds" in rule


def test_a_subset_nothing_fits_is_a_refused_candidate(tmp_path):
    """An A100 40GB beside an H200 in a space of pp 2 alone: the pair fits (docs/planner.md's 7 + 25
    layers of llama3.1-8b), a single device tiles no layout: each alone is a refused candidate, with why."""
    path = tmp_path / "a100-h200.yaml"
    path.write_text("name: a100-h200\ndevices_per_node: 1\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  slow: {device: a100-40gb, nodes: 1}\n  fast: {device: h200, nodes: 1}\n")
    plan = plan_kind_subsets(load_model("llama3.1-8b"), load_topology(str(path)), 64, 4096, tp_values=[1],
                             pp_values=[2])
    assert plan.best is plan.candidates[0] and plan.whole.balanced.layers_per_stage == (7, 25)
    alone = plan.candidates[1:]
    assert [c.plan for c in alone] == [None, None]
    assert all(c.refused.startswith("no heterogeneous layout of 1 devices") for c in alone)
    assert plan.to_json()["subsets"][1] == {"kinds": ["a100-40gb"], "devices": 1, "refused": alone[0].refused}


def test_a_tie_keeps_the_kinds_in_use(tmp_path):
    """On equal steps the best is the candidate using more kinds: leaving devices idle buys nothing."""
    from simulator.planner.kind_subsets import KindSubsetPlan, SubsetCandidate

    topo = _pair(tmp_path, 2)
    same = _plan(topo, 8).candidates[1].plan   # one plan's step for both candidates
    kinds = _kinds([2.0, 1.0])
    tie = KindSubsetPlan(kinds, [SubsetCandidate((0, 1), 2, same), SubsetCandidate((0,), 1, same)], "rule")
    assert tie.best.kinds == (0, 1) and tie.idle() == []


def test_groups_given_the_same_spec_are_one_kind_as_the_run_counts_them(tmp_path):
    """Two groups each given {base: h100, gemm_efficiency: 0.6} are one kind in device_counts
    (Topology.kind_of compares specs); the planner grouped spec objects, two kinds of one label."""
    from simulator.planner.kind_subsets import device_kinds

    path = tmp_path / "twin.yaml"
    path.write_text("name: twin\ndevices_per_node: 1\nscaleup: {kind: switch}\nscaleout: {nic_bw: 400Gb/s}\n"
                    "groups:\n  a: {device: {base: h100, gemm_efficiency: 0.6}, nodes: 1}\n"
                    "  b: {device: {base: h100, gemm_efficiency: 0.6}, nodes: 1}\n  c: {device: h100, nodes: 1}\n")
    topology = load_topology(str(path))
    kinds = device_kinds(topology, [0, 1, 2])
    assert [(kind.label, kind.ranks) for kind in kinds] == [("h100@a", (0, 1)), ("h100", (2,))]
    assert sorted(kind.label for kind in kinds) == topology.device_kinds()
