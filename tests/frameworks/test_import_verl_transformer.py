"""verl's Megatron TransformerConfig overrides that real MoE recipes set (frameworks/verl_transformer.py):
the uneven pipeline split mapped (stage counts, or the embedding / loss accounted for in the split, as
Megatron-Core 0.13.0 get_num_layers_to_build places them), the router's losses ignored, the kernel
fusions rlsim's stack assumes neutral at its value and unsupported at the other, the fused permute and
the router's dtype mapped onto train_params.compute (verl's DeepSeek-V3 converter's fp64 router taken)."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.llm.train_layout import TrainLayout
from simulator.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
CONFIG = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
T = "actor_rollout_ref.actor.megatron.override_transformer_config"
M = "actor_rollout_ref.actor.megatron"
QWEN3_MOE = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B",
             f"{M}.expert_model_parallel_size=8"]   # 48 layers


def _import(pp: int, *overrides: str, model: list[str] | None = None):
    """``pp`` stages over ``pp`` 8-GPU nodes (dp 8) unless ``model`` sets the cluster."""
    cluster = [f"trainer.nnodes={pp}"] if model is None else []
    return import_config("verl", CONFIG, [*(QWEN3_MOE if model is None else model), *cluster,
                                          f"{M}.pipeline_model_parallel_size={pp}", *overrides])


def _counts(imported, num_layers: int) -> tuple[int, ...] | None:
    """Layers per pipeline stage of the imported scenario, as it loads."""
    layout = load_scenario(imported.scenario).workload.train_layout
    return TrainLayout.from_mapping(layout).stage_layer_counts(num_layers)


def _stages(imported) -> tuple[int | None, int | None]:
    layout = imported.scenario["workload"]["train_layout"]
    return layout.get("pp_first_stage_layers"), layout.get("pp_last_stage_layers")


def test_first_and_last_stage_counts_map_onto_the_uneven_split():
    imported = _import(4, f"+{T}.num_layers_in_first_pipeline_stage=11", f"+{T}.num_layers_in_last_pipeline_stage=13")
    assert _stages(imported) == (11, 13)
    assert imported.targets[f"{T}.num_layers_in_first_pipeline_stage"] == "workload.train_layout.pp_first_stage_layers"
    assert _counts(imported, 48) == (11, 12, 12, 13)


@pytest.mark.parametrize("embedding, loss, pp, counts", [
    (True, True, 2, (24, 24)),        # (48 + 2) / 2 = 25 a stage, one fewer on each end
    (True, False, 7, (6, 7, 7, 7, 7, 7, 7)),   # (48 + 1) / 7 = 7, the first one fewer
    (False, True, 7, (7, 7, 7, 7, 7, 7, 6)),
    (True, True, 5, (9, 10, 10, 10, 9))])
def test_the_embedding_and_loss_accounted_for_take_a_layer_off_their_stage(embedding, loss, pp, counts):
    """Megatron-Core 0.13.0 get_num_layers_to_build (vpp 1): (num_layers + the accounted parts) / pp layers
    a stage, one fewer on the stage that holds the embedding (first) or the loss (last)."""
    imported = _import(pp, f"+{T}.account_for_embedding_in_pipeline_split={str(embedding).lower()}",
                       f"+{T}.account_for_loss_in_pipeline_split={str(loss).lower()}")
    assert _counts(imported, 48) == counts
    assert sum(counts) == 48
    for key, on in ((f"{T}.account_for_embedding_in_pipeline_split", embedding),
                    (f"{T}.account_for_loss_in_pipeline_split", loss)):
        assert (key in imported.mapped) if on else ("alone" in imported.ignored[key])


def test_the_accounted_split_is_refused_where_megatron_refuses_it_or_rlsim_cannot_express_it():
    key = f"{T}.account_for_embedding_in_pipeline_split"
    with pytest.raises(RlsimError) as exc:   # 48 + 1 over 4 stages
        _import(4, f"+{key}=true")
    assert exc.value.field == key and "49 do not split evenly over pp 4" in exc.value.message
    with pytest.raises(RlsimError) as exc:   # Megatron-Core refuses the two ways together
        _import(7, f"+{key}=true", f"+{T}.num_layers_in_first_pipeline_stage=6")
    assert exc.value.field == key and "refuses the pair" in exc.value.message
    with pytest.raises(RlsimError) as exc:   # interleaved: only the first model chunk is short
        _import(7, f"+{key}=true", f"{M}.virtual_pipeline_model_parallel_size=7")
    assert exc.value.field == key and "vpp 7" in exc.value.message
    one_stage = _import(1, f"+{key}=true")
    assert _stages(one_stage) == (None, None) and "pp 1" in one_stage.ignored[key]


FUSIONS = {"moe_grouped_gemm": True, "apply_rope_fusion": True,
           "bias_activation_fusion": True, "gradient_accumulation_fusion": True,
           "moe_shared_expert_overlap": False, "deallocate_pipeline_outputs": True}


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_a_fusion_at_rlsims_assumption_is_neutral_and_the_other_value_names_it(name):
    neutral = FUSIONS[name]
    at = _import(1, f"+{T}.{name}={str(neutral).lower()}")
    assert "is what rlsim models" in at.ignored[f"{T}.{name}"]
    other = _import(1, f"+{T}.{name}={str(not neutral).lower()}")
    assert "rlsim" in other.unsupported[f"{T}.{name}"]
    assert at.scenario == other.scenario   # neither changes the scenario


def test_router_losses_and_kernels_verl_does_not_run_are_ignored():
    imported = _import(1, *(f"+{T}.{k}={value}" for k, value in (
        ("moe_router_load_balancing_type", "seq_aux_loss"), ("moe_aux_loss_coeff", 0.001), ("moe_z_loss_coeff", 0.001),
        ("moe_router_bias_update_rate", 0.001), ("masked_softmax_fusion", "true"), ("persist_layer_norm", "true"))))
    for key in ("moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff",
                "moe_router_bias_update_rate"):
        assert "moe_load_imbalance" in imported.ignored[f"{T}.{key}"]
    assert "TEDotProductAttention" in imported.ignored[f"{T}.masked_softmax_fusion"]
    assert "Apex FusedLayerNorm" in imported.ignored[f"{T}.persist_layer_norm"]


@pytest.mark.parametrize("overrides, compute", [
    ([f"+{T}.moe_permute_fusion=true"], {"moe_permute_fusion": True}),
    ([f"+{T}.moe_permute_fusion=false"], {}),
    ([f"+{T}.moe_router_dtype=fp32"], {"moe_router_dtype": "fp32"}),
    ([f"+{T}.moe_router_dtype=fp64", f"+{T}.moe_permute_fusion=true"],
     {"moe_router_dtype": "fp64", "moe_permute_fusion": True}),
    ([f"+{T}.moe_router_dtype=null"], {})])
def test_the_fused_permute_and_the_router_dtype_map_onto_the_compute_knobs(overrides, compute):
    imported = _import(1, *overrides)
    assert _compute(imported) == compute
    for item in overrides:
        assert item[1:].split("=")[0] in imported.mapped
    loaded = load_scenario(imported.scenario).workload.train_params.compute
    assert loaded.moe_permute_fusion == compute.get("moe_permute_fusion", False)
    assert loaded.moe_router_dtype == compute.get("moe_router_dtype")


def test_the_moe_kernels_are_not_passed_on_a_dense_model_and_a_bad_dtype_is_refused():
    dense = _import(1, f"+{T}.moe_permute_fusion=true", f"+{T}.moe_router_dtype=fp64",
                    model=["actor_rollout_ref.actor.strategy=megatron"])
    assert _compute(dense) == {}
    for key in ("moe_permute_fusion", "moe_router_dtype"):
        assert "no routed experts" in dense.ignored[f"{T}.{key}"]
    with pytest.raises(RlsimError) as exc:
        _import(1, f"+{T}.moe_router_dtype=bf16")
    assert exc.value.field == f"{T}.moe_router_dtype" and "fp64" in exc.value.fix


DEEPSEEK = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.model.path=deepseek-ai/DeepSeek-V3",
            f"{M}.expert_model_parallel_size=8"]


def test_verls_deepseek_converter_runs_the_router_in_fp64_unless_overridden_or_bridged():
    """verl 0.6.1 config_converter.py hf_to_mcore_config_dpskv3 sets moe_router_dtype fp64; an override
    replaces it; with use_mbridge, Megatron-Bridge builds the config (not read: left at rlsim's default)."""
    converted = _import(1, model=DEEPSEEK)
    assert _compute(converted) == {"moe_router_dtype": "fp64"}
    assert any("hf_to_mcore_config_dpskv3" in note for note in converted.notes)
    assert _compute(_import(1, f"+{T}.moe_router_dtype=fp32", model=DEEPSEEK)) == {"moe_router_dtype": "fp32"}
    assert _compute(_import(1, f"+{M}.use_mbridge=true", model=DEEPSEEK)) == {}
    assert _compute(_import(1)) == {}   # Qwen3-MoE's converter leaves it at Megatron-Core's default


def test_an_imported_deepseek_config_with_uneven_first_and_last_stages_runs():
    """DeepSeek-V3's 61 layers on 16 stages: 3 on the first (its 3 dense layers), 2 on the last (beside
    the output layer), 4 on each of the 14 others."""
    deepseek = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.model.path=deepseek-ai/DeepSeek-V3",
                f"{M}.expert_model_parallel_size=32", f"+{M}.param_offload=true", f"+{M}.optimizer_offload=true",
                f"+{M}.grad_offload=true", "actor_rollout_ref.ref.megatron.param_offload=true", "trainer.nnodes=64",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=32", "data.train_batch_size=128",
                "actor_rollout_ref.actor.ppo_mini_batch_size=128", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                "actor_rollout_ref.rollout.n=4", f"+{T}.recompute_granularity=full", f"+{T}.recompute_method=uniform",
                f"+{T}.recompute_num_layers=1"]
    imported = _import(16, f"+{T}.num_layers_in_first_pipeline_stage=3", f"+{T}.num_layers_in_last_pipeline_stage=2",
                       model=deepseek)
    assert _counts(imported, 61) == (3, *[4] * 14, 2)
    run = simulate(imported.scenario, iterations=1)
    assert run.summary["steady_step_time_s"] > 0


CAPACITY, PAD = f"{T}.moe_expert_capacity_factor", f"{T}.moe_pad_expert_input_to_capacity"


def _compute(imported) -> dict:
    """The capacity keys of the imported train_params.compute."""
    compute = imported.scenario["workload"].get("train_params", {}).get("compute", {})
    return {k: v for k, v in compute.items() if k.startswith("moe_")}


def test_the_capacity_factor_and_pad_map_onto_the_busiest_ranks_cap():
    dropped = _import(1, f"+{CAPACITY}=1.25")
    assert _compute(dropped) == {"moe_expert_capacity_factor": 1.25} and CAPACITY in dropped.mapped
    padded = _import(1, f"+{CAPACITY}=1.5", f"+{PAD}=true")
    assert _compute(padded) == {"moe_expert_capacity_factor": 1.5, "moe_pad_expert_input_to_capacity": True}
    compute = load_scenario(padded.scenario).workload.train_params.compute
    assert (compute.moe_expert_capacity_factor, compute.moe_pad_expert_input_to_capacity) == (1.5, True)
    for value in ("null", "-1"):   # Megatron-Core reads a negative factor as none: dropless
        dropless = _import(1, f"+{CAPACITY}={value}")
        assert _compute(dropless) == {} and "dropless" in dropless.ignored[CAPACITY]


def test_the_capacity_is_not_passed_on_where_it_caps_nothing_and_refused_where_megatron_refuses_it():
    ep1 = [*QWEN3_MOE[:2], f"{M}.expert_model_parallel_size=1"]
    at_ep1 = _import(1, f"+{CAPACITY}=1.25", model=ep1)
    assert _compute(at_ep1) == {} and "mean rows" in at_ep1.ignored[CAPACITY]
    padded_ep1 = _import(1, f"+{CAPACITY}=1.25", f"+{PAD}=true", model=ep1)
    assert _compute(padded_ep1) == {} and "not modelled" in padded_ep1.unsupported[PAD]
    dense = _import(1, f"+{CAPACITY}=1.25", model=["actor_rollout_ref.actor.strategy=megatron"])
    assert _compute(dense) == {} and "no routed experts" in dense.ignored[CAPACITY]
    for overrides, field in (([f"+{PAD}=true"], PAD), ([f"+{CAPACITY}=0"], CAPACITY),
                             ([f"+{CAPACITY}=1.0", f"+{T}.moe_router_load_balancing_type=sinkhorn"], CAPACITY)):
        with pytest.raises(RlsimError) as exc:
            _import(1, *overrides)
        assert exc.value.field == field
