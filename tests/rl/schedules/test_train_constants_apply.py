"""Training constants that only some layers read (params.train_constants_read_past): given off the
stack's value where no model of the run has such a layer, they change no prediction and are refused,
naming the key; where a model has one, they move the step (the flash ratio: test_flash_ratio_applies.py)."""
import pytest

from simulator.api import simulate
from simulator.errors import RlsimError

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16"]
FLASH_OFF = "workload.train_params.compute.flash_attention=false"
COMPUTE = "workload.train_params.compute."


def step(*items: str, model: str | None = None, workload: str = "grpo-qwen2.5-7b", nodes: int = 2) -> float:
    extra = [f"workload.model={model}"] if model else []
    return simulate(workload=workload, topology={"preset": "dgx-h100", "nodes": nodes}, schedule="colocated",
                    iterations=1, overrides=[*SMALL, *extra, *items]).summary["step_time_s"]


@pytest.mark.parametrize("item, model, where", [
    (COMPUTE + "act_traffic_bytes_per_ffn=40", None, "a plain (GELU)"),          # qwen2.5-7b: SwiGLU
    (COMPUTE + "gated_act_traffic_bytes_per_ffn=60", "gpt-1.7b", "a gated (SwiGLU)"),
    (COMPUTE + "moe_permute_traffic_bytes_per_hidden=160", None, "routed experts"),
    (COMPUTE + "moe_permute_fusion=true", None, "routed experts"),
    (COMPUTE + "moe_router_dtype=fp64", None, "routed experts"),
    (COMPUTE + "moe_router_dtype=fp32", None, "routed experts"),
    ("workload.train_params.comm.moe_token_dispatcher=allgather", None, "routed experts"),   # tp 2: gate admits
    (COMPUTE + "backward_flops_factor=4", None, "materialized attention"),
    ("workload.train_params.memory.score_bytes_per_elem=10", None, "materialized attention"),
])
def test_where_no_layer_reads_it_it_is_refused(item, model, where):
    with pytest.raises(RlsimError) as exc:
        step(item, model=model)
    assert exc.value.field == item.split("=")[0] and where in exc.value.message
    assert exc.value.fix.startswith(f"remove {exc.value.field}")


@pytest.mark.parametrize("items, model", [
    ([COMPUTE + "act_traffic_bytes_per_ffn=40"], "gpt-1.7b"),
    ([COMPUTE + "gated_act_traffic_bytes_per_ffn=60"], None),
    ([FLASH_OFF, COMPUTE + "backward_flops_factor=4"], None),
    ([COMPUTE + "backward_flops_factor=4"], "nemotron-h-8b"),   # the Mamba-2 scans' backward
])
def test_where_a_layer_reads_it_it_moves_the_step(items, model):
    assert step(*items, model=model) > step(*items[:-1], model=model)


def test_the_moe_shuffle_moves_an_moe_step_and_the_score_bytes_are_taken_without_flash():
    moe = dict(workload="grpo-qwen3-30b-a3b", nodes=4)
    assert step(COMPUTE + "moe_permute_traffic_bytes_per_hidden=160", **moe) > step(**moe)
    assert step("workload.train_params.comm.moe_token_dispatcher=allgather", **moe) != step(**moe)
    with pytest.raises(RlsimError) as exc:   # every layer is MoE: TE userbuffers overlap no TP block
        step("workload.train_params.comm.tp_userbuffers=true", **moe)
    assert exc.value.field == "workload.train_params.comm.tp_userbuffers" and "dense attention" in exc.value.message
    dense_tp = "workload.train_layout.tp=2"
    assert step(dense_tp, "workload.train_params.comm.tp_userbuffers=true") != step(dense_tp)   # read on dense
    step(FLASH_OFF, "workload.train_params.memory.score_bytes_per_elem=10")   # read by the memory check: taken
