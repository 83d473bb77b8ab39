"""simulator/params.py: train_params knobs that a switch of their own section makes inapplicable
(GATED_KNOBS) are refused when given away from their defaults with the switch off, naming the full
dotted field and the fix; at their defaults, and as a training stack fills them in, they load."""
import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.params import (
    GATED_KNOBS,
    TRAIN_SOFTWARE,
    CommParams,
    ComputeParams,
    OffloadParams,
    TrainParams,
    stack_params,
)
from simulator.scenario import load_scenario

P = "workload.train_params"
RUN = ["--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--iterations", "1", "--schedule", "colocated",
       "--set", "workload.prompts_per_step=16", "--set", "workload.samples_per_prompt=4",
       "--set", "workload.mini_batch_prompts=16"]

# (key given, its switch off (nothing: the default), what the refusal says, a setting that makes it apply)
REFUSED = [
    ("offload.host_link_efficiency=0.5", [], "an offload (offload.params, grads, optimizer or fsdp_cpu_offload: true)",
     ["offload.optimizer=true"]),
    ("offload.host_adam_loop_params_per_s=1e9", [], "offload.fsdp_cpu_offload: true", ["offload.fsdp_cpu_offload=true"]),
    ("offload.host_param_bytes_per_param=2", [], "offload.fsdp_cpu_offload: true", ["offload.fsdp_cpu_offload=true"]),
    ("comm.tp_userbuffer_pipeline_splits=2", [], "comm.tp_userbuffers: true", ["comm.tp_userbuffers=true"]),
    ("comm.sp_backward_allgather_overlap_fraction=0.5", [], "comm.sp_backward_allgather: true",
     ["comm.sp_backward_allgather=true"]),
    ("comm.dp_overlap_window=step", [], "comm.dp_overlap_fraction > 0", ["comm.dp_overlap_fraction=0.8"]),
    ("comm.dp_bucket_min_params=40000000", [], "comm.dp_overlap_fraction > 0", ["comm.dp_overlap_fraction=0.8"]),
    ("compute.score_traffic_fwd_bytes=20", [], "compute.flash_attention: false", ["compute.flash_attention=false"]),
    ("compute.score_traffic_bwd_bytes=20", [], "compute.flash_attention: false", ["compute.flash_attention=false"]),
    ("compute.flash_backward_efficiency_ratio=0.6", ["compute.flash_attention=false"], "compute.flash_attention: true",
     []),
    ("compute.flash_backward_efficiency_ratio=null", ["compute.flash_attention=false"], "compute.flash_attention: true",
     []),
    ("compute.flash_causal_fraction=1", ["compute.flash_attention=false"], "compute.flash_attention: true", []),
    ("compute.flash_backward_factor=3", ["compute.flash_attention=false"], "compute.flash_attention: true", []),
]


def _load(*items):
    return load_scenario(workload="grpo-qwen2.5-7b", overrides=[f"{P}.{i}" for i in items])


@pytest.mark.parametrize("key, off, needs, on", REFUSED, ids=[r[0].split("=")[0] for r in REFUSED])
def test_a_gated_knob_with_its_switch_off_is_refused_at_its_dotted_field(key, off, needs, on):
    name = key.split("=")[0]
    with pytest.raises(RlsimError) as err:
        _load(*off, key)
    assert err.value.field == f"{P}.{name}"
    assert f"applies only with {needs}" in str(err.value) and f"remove {name}, or " in str(err.value)
    _load(*on, key)   # with its switch on it applies
    section, knob = name.split(".")
    default = {"compute": ComputeParams, "comm": CommParams, "offload": OffloadParams}[section].model_fields[knob].default
    _load(*off, f"{name}={'null' if default is None else default}")   # at its default it changes nothing


def test_a_gated_knob_exits_2_on_the_cli(capsys):
    assert main(["run", *RUN, "--set", f"{P}.comm.tp_userbuffer_pipeline_splits=2", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{P}.comm.tp_userbuffer_pipeline_splits" in err and "tp_userbuffers: true" in err and "Traceback" not in err


def test_flash_efficiency_ratio_is_not_gated_it_also_rates_mamba_scans():
    assert "flash_efficiency_ratio" not in GATED_KNOBS["compute"]
    assert ComputeParams(flash_attention=False, flash_efficiency_ratio=0.6).flash_efficiency_ratio == 0.6


def test_the_models_refuse_the_knobs_alone_too():
    with pytest.raises(ValueError, match="tp_userbuffer_pipeline_splits"):
        CommParams(tp_userbuffer_pipeline_splits=2)
    with pytest.raises(ValueError, match="host_link_efficiency"):
        OffloadParams(host_link_efficiency=0.5)
    with pytest.raises(ValueError, match="score_traffic_fwd_bytes"):
        ComputeParams(score_traffic_fwd_bytes=20)
    assert CommParams(dp_overlap_fraction=0.5, dp_overlap_window="step").dp_overlap_window == "step"


@pytest.mark.parametrize("name", TRAIN_SOFTWARE)
def test_every_stack_loads_whole_and_under_each_switch_the_user_flips(name):
    """A stack's own values load (its dump gives every knob); a stack's value that the user's switch
    made inapplicable (megatron-core-overlap's buckets under dp_overlap_fraction: 0) is not the user's
    to remove: it goes back to its default, which the knob with its switch off reads as the same."""
    stack = TRAIN_SOFTWARE[name]
    assert TrainParams.model_validate(stack.params.model_dump()) == stack.params
    # the workload's TP 2 where the stack has TP (verl's and SkyRL's FSDP, TRL: none), its ZeRO 1 where the stack
    # runs it (verl's FSDP: 3 or 2)
    software = [f"workload.train_software={name}", *([] if stack.tensor_parallel else ["workload.train_layout.tp=1"]),
                *([] if "zero" not in stack.bounded else [f"workload.train_layout.zero={stack.zero[0]}"])]
    base = load_scenario(workload="grpo-qwen2.5-7b", overrides=software)
    assert base.workload.train_params == stack.params
    flips = ["comm.dp_overlap_fraction=0", "comm.tp_userbuffers=false", "comm.sp_backward_allgather=false",
             f"compute.flash_attention={str(not stack.params.compute.flash_attention).lower()}"]
    sc = load_scenario(workload="grpo-qwen2.5-7b", overrides=[*software, *(f"{P}.{f}" for f in flips)])
    comm = sc.workload.train_params.comm
    assert (comm.dp_bucket_min_params, comm.sp_backward_allgather_overlap_fraction) == (None, 0.0)
    assert load_scenario(sc.to_dict()).workload.train_params == sc.workload.train_params
    flipped = stack_params(stack, {"comm": {"dp_overlap_fraction": 0.0, "sp_backward_allgather": False}})
    assert (flipped.comm.dp_bucket_min_params, flipped.comm.sp_backward_allgather_overlap_fraction) == (None, 0.0)


def test_a_knob_the_user_gives_beside_its_switch_off_is_refused_even_over_a_stack():
    with pytest.raises(RlsimError) as err:
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[
            "workload.train_software=megatron-core-overlap", f"{P}.comm.dp_overlap_fraction=0",
            f"{P}.comm.dp_bucket_min_params=80000000"])
    assert err.value.field == f"{P}.comm.dp_bucket_min_params"


@pytest.mark.parametrize("key", ["custom_all_reduce_max_bytes=1000", "reserve_init_ratio=0.5"])
def test_a_gated_engine_constant_is_refused_at_its_own_key(key):
    # the error named the section (workload.inference), not the key
    with pytest.raises(RlsimError) as err:
        load_scenario(overrides=[f"workload.inference.{key}"])
    assert err.value.field == f"workload.inference.{key.split('=')[0]}"
