"""workload.inference.custom_all_reduce (rl/schedules/input_checks._check_custom_all_reduce): given where no
rollout instance's TP group can run the engine's kernel (tp 1, a size it does not take, a group across
nodes) it changes no prediction and is refused, naming the key; where a group can, or where an engine
or importer sets it, it runs."""
import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.errors import RlsimError

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16"]
DGX = {"preset": "dgx-h100", "nodes": 2}
# GB200 trays of 4 GPUs: a TP group of 8 spans two trays (nodes)
TRAYS = {"preset": "gb200-nvl72-partial", "racks": 1, "nodes_per_domain": 8}


def run(workload: str, topology: dict, *items: str, schedule: str = "colocated"):
    return simulate(workload=workload, topology=topology, schedule=schedule, iterations=1,
                    overrides=[*SMALL, *items])


@pytest.mark.parametrize("workload, topology, items, field, says", [
    ("grpo-qwen2.5-7b", DGX, ["workload.inference.custom_all_reduce=true"], "custom_all_reduce",
     "an instance of tp 1 has no TP all-reduce"),
    ("grpo-qwen2.5-7b", DGX, ["workload.engine=vllm-v1", "workload.inference.custom_all_reduce_max_bytes=1e6"],
     "custom_all_reduce_max_bytes", "has no TP all-reduce"),
    ("grpo-qwen3-30b-a3b", TRAYS, ["workload.rollout_layout={tp: 8, ep: 1}", "workload.inference.custom_all_reduce=true"],
     "custom_all_reduce", "no TP group of 8 devices"),
])
def test_custom_all_reduce_no_tp_group_can_run_is_refused(workload, topology, items, field, says):
    with pytest.raises(RlsimError) as err:
        run(workload, topology, *items)
    assert err.value.field == f"workload.inference.{field}" and says in str(err.value)
    assert "workload.rollout_layout.tp 2, 4, 6 or 8" in err.value.fix


@pytest.mark.parametrize("schedule", ["colocated", "disaggregated"])
def test_custom_all_reduce_runs_where_a_tp_group_takes_it(schedule):
    layouts = ("workload.rollout_layout={tp: 4, ep: 1}", "workload.train_layout.ep=4")   # 16-GPU replicas: two pools
    on = run("grpo-qwen3-30b-a3b", TRAYS, *layouts, "workload.inference.custom_all_reduce=true", schedule=schedule)
    off = run("grpo-qwen3-30b-a3b", TRAYS, *layouts, schedule=schedule)
    assert on.summary["stage_time_s"]["generate"] < off.summary["stage_time_s"]["generate"]


@pytest.mark.parametrize("items", [
    ["workload.engine=vllm-v1"],                                             # the engine's own default
    ["workload.engine=vllm-v1", "workload.inference.custom_all_reduce=false"],   # as the verl importer sets it
    ["workload.rollout_layout=auto", "workload.inference.custom_all_reduce=true"],   # the planner weighs it
])
def test_custom_all_reduce_an_engine_importer_or_planner_gives_loads_at_tp_1(items):
    run("grpo-qwen2.5-7b", DGX, *items)


def test_custom_all_reduce_refused_exits_2_on_the_cli(capsys):
    args = ["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1", "--json",
            "--set", "workload.inference.custom_all_reduce=true"] + [a for item in SMALL for a in ("--set", item)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "workload.inference.custom_all_reduce" in err and "Traceback" not in err


def test_custom_all_reduce_is_a_cuda_kernel_not_run_on_ascend():
    """vLLM's custom all-reduce is CUDA peer memory; vllm-ascend reduces over HCCL. It was offered on
    Ascend NPUs, so a named engine priced their small TP all-reduces as a GPU's (found by a network
    audit): now the NPU groups take the collective library's, and turning it on there is refused."""
    from simulator.hardware.devices import device_from_mapping
    from simulator.hardware.topology import load_topology
    from simulator.network.collectives import CollectiveModel

    for preset in ("cloudmatrix384", "ascend-910b"):
        assert CollectiveModel(load_topology(preset)).custom_all_reduce_lines(tuple(range(8))) == ()
    assert CollectiveModel(load_topology("dgx-h100")).custom_all_reduce_lines(tuple(range(8)))
    assert not device_from_mapping({"base": "h100", "peer_memory_all_reduce": False}).peer_memory_all_reduce
    with pytest.raises(RlsimError, match="true or false") as err:
        device_from_mapping({"base": "h100", "peer_memory_all_reduce": 1}, "t.yaml")
    assert err.value.field == "device.peer_memory_all_reduce"
    with pytest.raises(RlsimError) as err:
        run("grpo-qwen2.5-7b", {"preset": "ascend-910b", "nodes": 2}, "workload.rollout_layout={tp: 4, ep: 1}",
            "workload.inference.custom_all_reduce=true")
    assert err.value.field == "workload.inference.custom_all_reduce" and "no CUDA peer memory" in str(err.value)
    assert "tp 2, 4, 6 or 8" not in err.value.fix   # no layout would run it there
