"""Keys the scenario never reads (scenario._read_past_keys, RecoveryConfig): given away from their
defaults they would change no prediction, so they are refused naming the full dotted field and the
fix; where they are read they load, and at their defaults (a whole dump) they pass."""
import json

import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.scenario import load_scenario

FULL = {"refit": "full-tensors"}
FAIL = [{"at_s": 300, "fail": "node:1"}]


def load(schedule=None, inference=None):
    workload = {"preset": "grpo-qwen2.5-7b", **({"inference": inference} if inference else {})}
    return load_scenario(workload=workload, schedule=schedule or "colocated",
                         topology={"preset": "dgx-h100", "nodes": 4})


@pytest.mark.parametrize("schedule, inference, field, says", [
    # a run prices every rollout collective with the network model: the fallback formula is never taken
    (None, {"fallback_step_latency_s": 5e-5}, "workload.inference.fallback_step_latency_s",
     "remove workload.inference.fallback_step_latency_s"),
    ({"kind": "disaggregated"}, {"fallback_collective_efficiency": 0.1},
     "workload.inference.fallback_collective_efficiency", "not read by a run"),
    # the full-tensor refit's constants under reshard
    ({"kind": "disaggregated", "refit_overlap": False}, None, "schedule.refit_overlap",
     "or set schedule.refit: full-tensors"),
    ({"kind": "colocated", "refit_tensor_overhead_s": 0.01}, None, "schedule.refit_tensor_overhead_s",
     "or set schedule.refit: full-tensors"),
    # colocated: every refit reshards on the devices that trained
    ({"kind": "colocated", **FULL, "refit_overlap": False}, None, "schedule.refit_overlap",
     "does not apply to kind: colocated"),
    ({"kind": "stalesync", **FULL, "staleness": 0, "refit_overlap": False}, None, "schedule.refit_overlap",
     "the tail never consolidates"),
    ({"kind": "stalesync", **FULL, "stream_threshold": 1, "refit_overlap": False}, None, "schedule.refit_overlap",
     "stream_threshold < 1"),
    # split pools switch no phase: the efficiency rates only the reference swaps' host copies there
    ({"kind": "disaggregated", "switch": {"host_link_efficiency": 0.5}}, None, "schedule.switch.host_link_efficiency",
     "or set schedule.reference_swap_copies"),
    # what a failure costs, with no failure
    ({"kind": "colocated", "recovery": {"restart_s": 10}}, None, "schedule.recovery.restart_s",
     "or give schedule.failures"),
    ({"kind": "disaggregated", "recovery": {"lose_to": "checkpoint"}}, None, "schedule.recovery.lose_to",
     "no schedule.failures"),
    # the cadence rolls back under lose_to: checkpoint only
    ({"kind": "colocated", "failures": FAIL, "recovery": {"checkpoint_every_steps": 3}}, None,
     "schedule.recovery.checkpoint_every_steps", "or set schedule.recovery.lose_to: checkpoint"),
    # the host link's rate with no host copy
    ({"kind": "colocated", "switch": {"offload_optimizer": False, "host_link_efficiency": 0.5}}, None,
     "schedule.switch.host_link_efficiency", "or turn one of those copies on"),
    ({"kind": "stalesync", "switch": {"offload_optimizer": False, "engine_sleep": True, "engine_sleep_level": 2,
                                      "host_link_efficiency": 0.5}}, None,
     "schedule.switch.host_link_efficiency", "makes none"),
])
def test_a_key_the_scenario_never_reads_is_refused(schedule, inference, field, says):
    with pytest.raises(RlsimError) as err:
        load(schedule, inference)
    assert err.value.field == field and says in str(err.value)


@pytest.mark.parametrize("schedule", [
    {"kind": "disaggregated", **FULL, "refit_overlap": False, "refit_tensor_overhead_s": 0.01},
    {"kind": "one-step-off", **FULL, "refit_overlap": False},
    {"kind": "stalesync", **FULL, "refit_overlap": False},      # the tail consolidation refits the whole pool
    {"kind": "colocated", **FULL, "refit_tensor_overhead_s": 0.01},
    {"kind": "colocated", "refit_tensor_overhead_s": 8.4e-4, "recovery": {"restart_s": 120}},   # the defaults
    {"kind": "colocated", "failures": FAIL, "recovery": {"restart_s": 10, "drop_whole_node": False}},
    {"kind": "colocated", "failures": FAIL, "recovery": {"lose_to": "checkpoint", "checkpoint_every_steps": 3}},
    {"kind": "colocated", "switch": {"host_link_efficiency": 0.5}},                   # the optimizer offload
    {"kind": "colocated", "switch": {"offload_optimizer": False, "offload_weights": True, "host_link_efficiency": 0.5}},
    {"kind": "colocated", "switch": {"offload_optimizer": False, "engine_sleep": True, "host_link_efficiency": 0.5}},
    {"kind": "colocated", "reference_swap_copies": 3,
     "switch": {"offload_optimizer": False, "host_link_efficiency": 0.5}},
    {"kind": "one-step-off", "reference_swap_copies": 3, "switch": {"host_link_efficiency": 0.5}},
])
def test_the_keys_load_where_they_are_read_and_round_trip(schedule):
    sc = load(schedule)
    assert load_scenario(sc.to_dict()).schedule == sc.schedule


def test_a_whole_dump_of_the_defaults_passes():
    sc = load()
    data = sc.to_dict()   # every inference field, the fallback constants at their defaults
    assert data["workload"]["inference"]["fallback_step_latency_s"] == 1e-6
    assert load_scenario(data).workload == sc.workload


def test_a_comparison_gives_refit_overlap_to_the_kinds_that_read_it(capsys):
    rc = main(["compare", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
               "--set", "topology.nodes=2", "--set", "workload.prompts_per_step=16", "--set",
               "workload.samples_per_prompt=4", "--set", "workload.mini_batch_prompts=16",
               "--schedules", "colocated,disaggregated", "--set", "schedule.refit=full-tensors",
               "--set", "schedule.refit_overlap=false", "--json"])
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("kind, who", [("verl-fully-async", "verl's fully_async Rollouter"), ("areal", "AReaL")])
@pytest.mark.parametrize("key, value", [("gen_prompts", 48), ("max_gen_batches", 3)])
def test_a_streaming_kind_refuses_the_generation_batch_it_never_draws(kind, who, key, value):
    """verl's fully_async Rollouter (it asserts data.gen_batch_size == 1 and reads no
    filter_groups.max_num_gen_batches) and AReaL (its dynamic filter judges each rollout) start prompts
    one at a time: dynamic sampling's generation batch and its cap are refused there, keep_fraction loads."""
    workload = {"preset": "grpo-qwen2.5-7b", "dynamic_sampling": {"keep_fraction": 0.5, key: value}}
    with pytest.raises(RlsimError) as err:
        load_scenario(workload=workload, schedule=kind)
    assert err.value.field == f"workload.dynamic_sampling.{key}"
    assert who in str(err.value) and err.value.fix == f"remove workload.dynamic_sampling.{key}"
    del workload["dynamic_sampling"][key]
    assert load_scenario(workload=workload, schedule=kind).workload.dynamic_sampling.keep_fraction == 0.5


def test_a_read_past_key_exits_2_on_the_cli(capsys):
    assert main(["run", "--json", "--iterations", "1", "--set", "schedule.recovery.restart_s=10"]) == 2
    err = capsys.readouterr().err
    assert "schedule.recovery.restart_s" in err and "Traceback" not in err


def test_split_pools_take_the_host_link_efficiency_of_their_reference_swaps(capsys):
    # it was refused with the whole switch section there, though the swaps read it
    argv = ["compare", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1",
            "--set", "topology.nodes=2", "--set", "workload.prompts_per_step=16", "--set",
            "workload.samples_per_prompt=4", "--set", "workload.mini_batch_prompts=16",
            "--schedules", "colocated,disaggregated", "--set", "schedule.reference_swap_copies=3", "--json"]
    steps = []
    for extra in ([], ["--set", "schedule.switch.host_link_efficiency=0.2"]):
        assert main([*argv, *extra]) == 0
        steps.append([doc["step_time_s"] for doc in json.loads(capsys.readouterr().out)])
    assert all(slow > fast for fast, slow in zip(*steps, strict=True))   # both kinds read it
    with pytest.raises(RlsimError, match="does not apply to kind: disaggregated"):   # the rest of switch still not
        load({"kind": "disaggregated", "reference_swap_copies": 3, "switch": {"offload_weights": True}})


@pytest.mark.parametrize("schedule, layout, says", [
    ({"micro_batching": "sequence", "distqueue": {"packed": False}}, None, "the samples are padded"),
    ({"micro_batching": "sequence"}, {"max_tokens_per_micro_batch": 20000}, "cuts the micro-batches by tokens"),
])
def test_micro_batching_where_nothing_orders_packed_samples_is_refused(schedule, layout, says):
    # the step came back the same: padded samples and a token budget ignore the order
    workload = {"preset": "grpo-qwen2.5-7b", **({"train_layout": layout} if layout else {})}
    with pytest.raises(RlsimError, match=says) as exc:
        load_scenario(workload=workload, schedule={"kind": "colocated", **schedule},
                      topology={"preset": "dgx-h100", "nodes": 4})
    assert exc.value.field == "schedule.micro_batching"


@pytest.mark.parametrize("key, value, says", [("pad_rows_to", 4096, "width of padded rows"),
                                               ("pad_rows_to", "batch", "width of padded rows"),
                                               ("attention_skips_padding", True, "attention skips their padding")])
def test_a_padded_row_width_beside_packed_samples_is_refused(key, value, says):
    """train_params.compute.pad_rows_to is the width of padded rows, attention_skips_padding whether
    their attention skips the padding: read nowhere when packed."""
    workload = {"preset": "grpo-qwen2.5-7b", "train_params": {"compute": {key: value}}}
    with pytest.raises(RlsimError, match=says) as exc:
        load_scenario(workload=workload, schedule={"kind": "colocated"}, topology={"preset": "dgx-h100", "nodes": 4})
    assert exc.value.field == f"workload.train_params.compute.{key}"
    load_scenario(workload=workload, schedule={"kind": "colocated", "distqueue": {"packed": False}},
                  topology={"preset": "dgx-h100", "nodes": 4})


@pytest.mark.parametrize("schedule", [
    {"kind": "colocated", "micro_batching": "sequence"},                         # packed: it orders them
    {"kind": "colocated", "micro_batching": "sequence", "distqueue": {"packed": False}, "failures": FAIL},
])
def test_micro_batching_loads_where_it_is_read(schedule):
    load(schedule)
