"""What the training validation cases (V1, V7) share: a published row's layout (its TP, PP and DP,
the case's assumed recipe, the chunk rule), its topology, the `rlsim validate --set` items they take
and the TFLOP/s figure with the step's parts."""
from __future__ import annotations

from typing import Any

from ..errors import RlsimError
from ..params import TrainedShapes, train_constants_read_past
from . import Prediction, overridden_device


def interleave_chunks(num_layers: int, pp: int) -> int:
    """The fewest model chunks v >= 2 dividing the layers per stage (1 without pipelining)."""
    if pp == 1:
        return 1
    per_stage = num_layers // pp
    return next((v for v in range(2, per_stage + 1) if per_stage % v == 0), 1)


def step_breakdown(cost: Any, counted: str = "hardware") -> Prediction:
    """TFLOP/s per device with the step's parts (llm.training.TrainStepCost), so a miss points at
    its mechanism: the flush (busiest device's compute + bubble + exposed TP / CP / EP / PP), then the
    exposed gradient sync and the optimizer. ``counted``: the FLOPs the published figure counts,
    "hardware" (the recomputed forward too: the 2021 paper's Table 1) or "model" (Megatron-Core's
    num_floating_point_operations: none recomputed)."""
    exposed = ", ".join(f"{kind} {s:.3f}" for kind, s in cost.comm_exposed_s.items() if s > 0) or "none"
    flops = {"hardware": cost.hardware_flops, "model": cost.model_flops}[counted]
    return Prediction(float(flops / (cost.step_time_s * cost.devices) / 1e12),
                      f"step {cost.step_time_s:.3f} s: flush {cost.pipeline_s:.3f} (compute {cost.compute_s:.3f}, "
                      f"bubble {cost.bubble_s:.3f}), exposed comm {exposed}, optimizer {cost.optimizer_s:.4f}; "
                      f"{cost.pipeline.micro_batches} micro-batches, MFU {cost.mfu:.1%}")


# `rlsim validate --set` keys the training cases (V1, V7) predict with: the device's fields (over the
# catalog device of the row's topology) or a profile measured on that device (`rlsim calibrate --out`),
# the trainer constants (over the case's stack) and the recipe settings a published table leaves open
# (over each row's layout: RECIPE_KEYS)
TRAIN_OVERRIDES = ("topology.device.", "topology.device_profile", "workload.train_params.", "workload.train_layout.")
# The layout keys a row takes from --set: a row fixes its TP, PP and DP (its GPUs), not the rest of
# the recipe: the micro-batch, the recompute and the model chunks per pipeline rank (PP > 1 rows).
RECIPE_KEYS = ("micro_batch", "recompute", "vpp")
WHERE = "rlsim validate --set"


def recipe_overrides(overrides: tuple[str, ...]) -> dict[str, Any]:
    """The `--set workload.train_layout.*` items, checked as TrainLayout checks them; a layout key a
    row fixes (tp, pp, dp, ...) or an unknown one is an error."""
    import dataclasses

    from ..llm.train_layout import TrainLayout
    from ..overrides import section

    given = section(overrides, "workload.train_layout")
    for key in given:
        if key not in RECIPE_KEYS:
            what = ("each row fixes its own" if key in {f.name for f in dataclasses.fields(TrainLayout)}
                    else "unknown train_layout key")
            raise RlsimError(f"{what} {key!r}", source=WHERE, field=f"workload.train_layout.{key}",
                             fix=f"give one of {', '.join(RECIPE_KEYS)} (the published rows fix tp, pp and dp)")
    try:
        TrainLayout(**given)
    except RlsimError as exc:
        raise RlsimError(exc.message, source=WHERE, field=f"workload.{exc.field}", fix=exc.fix) from None
    return given


def row_layout(stack: Any, recipe: dict[str, Any], *, tp: int, pp: int, dp: int, layers: int, batch: int,
               **assumed: Any) -> Any:
    """A published row's layout: its TP, PP and DP, the case's `assumed` recipe (micro_batch,
    recompute) and V1's chunk rule (interleave_chunks), each of these replaced by `recipe`
    (recipe_overrides). A recipe the row cannot run is an RlsimError naming the key."""
    fields = {**assumed, **{k: v for k, v in recipe.items() if k != "vpp"}}
    if pp == 1 and recipe.get("vpp", 1) != 1:   # Megatron interleaves model chunks over pipeline stages only
        raise RlsimError(f"vpp {recipe['vpp']} interleaves pipeline stages, and this row runs no pipeline (PP 1)",
                         source=WHERE, field="workload.train_layout.vpp",
                         fix="give vpp 1, or narrow --case to the rows with PP > 1")
    vpp = recipe.get("vpp", interleave_chunks(layers, pp)) if pp > 1 else 1
    if (layers // pp) % vpp:
        raise RlsimError(f"vpp {vpp} does not divide the {layers // pp} layers of a stage (PP {pp})", source=WHERE,
                         field="workload.train_layout.vpp", fix="give a divisor of every selected row's stage "
                         "layers, or narrow --case")
    per_replica, micro = batch // dp, fields.get("micro_batch", 1)
    if per_replica % micro:
        raise RlsimError(f"micro_batch {micro} does not divide the {per_replica} sequences of a DP replica",
                         source=WHERE, field="workload.train_layout.micro_batch",
                         fix="give a divisor of every selected row's batch / DP, or narrow --case")
    return stack.layout(tp=tp, pp=pp, vpp=vpp, dp=dp, **fields)


def training_overrides(overrides: tuple[str, ...], stack: Any, base_device: str) -> tuple[dict[str, Any], Any]:
    """(topology device mapping or {}, TrainParams) of the --set items under TRAIN_OVERRIDES: the
    device fields over `base_device`, the trainer constants over the stack's (validated: a bad key
    or value raises RlsimError naming it)."""
    from ..overrides import section
    from ..params import stack_params

    device = section(overrides, "topology.device")
    train = section(overrides, "workload.train_params")
    params = stack_params(stack, train) if train else stack.params
    return ({"base": base_device, **device} if device else {}), params


def check_training_overrides(overrides: tuple[str, ...], stack: Any, base_device: str) -> None:
    """Raise RlsimError now (bad input: `rlsim validate` exits 2) for a bad device, profile, trainer or
    recipe key, naming it as given (topology.device.KEY, topology.device_profile,
    workload.train_params.KEY, workload.train_layout.KEY)."""
    from ..hardware.profiles import load_profile, resolve_profile_path

    _, params = training_overrides(overrides, stack, base_device)
    gpt = TrainedShapes(mamba=False, gated_ffn=False, plain_ffn=True, experts=False)   # the rows' GELU GPTs
    for field, message, fix in train_constants_read_past(params, stack.params, gpt):
        raise RlsimError(message, source=WHERE, field=field, fix=fix)
    overridden_device(base_device, overrides)
    profile = device_profile(overrides)
    if profile is not None:   # a missing or malformed file; one of another device fails that device's rows
        load_profile(resolve_profile_path(profile, source=WHERE, field="topology.device_profile"))
    recipe_overrides(overrides)


def device_profile(overrides: tuple[str, ...]) -> Any:
    """The `--set topology.device_profile=PATH` value (None without it)."""
    from ..overrides import section

    return section(overrides, "topology").get("device_profile")


def row_topology(preset: str, nodes: int, device: dict[str, Any], overrides: tuple[str, ...]) -> Any:
    """A row's topology: `preset` at `nodes` nodes, its device with the `device` mapping (the --set
    device fields over the catalog device) and, given, the profile of --set topology.device_profile
    applied over it (as a topology's `device_profile:` is)."""
    from ..hardware.topology import load_topology

    spec: dict[str, Any] = {"preset": preset, "nodes": nodes}
    if device:
        spec["device"] = device
    profile = device_profile(overrides)
    if profile is not None:
        spec["device_profile"] = profile
    return load_topology(spec, spec_source=WHERE)


def recipe_note(recipe: dict[str, Any]) -> str:
    """The recipe keys --set gave, for a case's note ('' without any)."""
    return "; --set " + ", ".join(f"{k} {v}" for k, v in recipe.items()) if recipe else ""
