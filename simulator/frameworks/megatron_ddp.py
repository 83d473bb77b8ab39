"""Megatron-Core DistributedDataParallelConfig keys a framework passes on, read the same wherever they are
set (verl's actor.megatron.override_ddp_config, which replaces verl's ddp_config_dict key by key: 0.6.1
utils/megatron_utils.py). Megatron-Core sources: 0.13.0 megatron/core/distributed/
distributed_data_parallel_config.py, distributed_data_parallel.py, param_and_grad_buffer.py.
overlap_grad_reduce -> train_params.comm.dp_overlap_fraction (1.0) with Megatron-Core's buckets
(dp_bucket_min_params), as the megatron-core-overlap stack sets them; bucket_size -> dp_bucket_min_params."""
from __future__ import annotations

from typing import Any

from ..params import MCORE_DDP_BUCKET_MIN_PARAMS
from .common import Rule, Status, ignored, mapped, merge_train_params, positive_int, unsupported

OVERLAP_GRAD_REDUCE, OVERLAP_PARAM_GATHER, BUCKET_SIZE = "overlap_grad_reduce", "overlap_param_gather", "bucket_size"

# overlap_grad_reduce True: the gradient reduce-scatter / all-reduce launched bucket by bucket as the last
# micro-batch's backward frees them (param_and_grad_buffer.py register_grad_ready), all but a chunk's last
# bucket hidden: the megatron-core-overlap stack's gradient side (params.MEGATRON_CORE_OVERLAP), not its TP keys
DDP_OVERLAP_FRACTION = 1.0
OVERLAP_GRAD_REDUCE_NOTE = (
    "true: 1.0 with Megatron-Core's buckets (dp_bucket_min_params 40,000,000, one per 1,000,000 x DP above it: "
    "distributed_data_parallel.py), the megatron-core-overlap stack's gradient side; false (verl's and "
    "Megatron-Core's default): 0, the reduction after the backward")
# rlsim hides the distributed optimizer's weight all-gather by the gradient sync's own share (llm/training.py
# _weight_gather_exposed reads comm.dp_overlap_fraction): no knob of its own
OVERLAP_PARAM_GATHER_NOTE = ("the distributed optimizer's weight all-gather overlapped with the forward apart from the "
                             "gradient reduction: rlsim hides it by the gradient side's share "
                             "(comm.dp_overlap_fraction), i.e. takes it equal to overlap_grad_reduce")
BUCKET_SIZE_NOTE = ("with overlap_grad_reduce true: each bucket holds this many parameters (comm.dp_bucket_min_params, "
                    "dp_bucket_params_per_rank 0); null: Megatron-Core's max(40,000,000, 1,000,000 x DP); "
                    "Megatron-Core drops it without overlap_grad_reduce (one bucket)")
_NO_TIME = "a local check of the gradients before the collective: no modelled time"

# Megatron DistributedDataParallelConfig key -> its rule, by the bare key (the framework's section prefixes it)
DDP_RULES: dict[str, Rule] = {
    OVERLAP_GRAD_REDUCE: mapped("workload.train_params.comm.dp_overlap_fraction", OVERLAP_GRAD_REDUCE_NOTE),
    OVERLAP_PARAM_GATHER: unsupported(OVERLAP_PARAM_GATHER_NOTE, neutral=False),
    BUCKET_SIZE: mapped("workload.train_params.comm.dp_bucket_min_params", BUCKET_SIZE_NOTE),
    "average_in_collective": ignored("dividing by DP inside the collective (NCCL's average) or before it: the same "
                                     "bytes on the wire"),
    "check_for_nan_in_grad": ignored(_NO_TIME),
    "check_for_large_grads": ignored(_NO_TIME),
    "use_distributed_optimizer": mapped("workload.train_layout.zero", "true: 1 (reduce-scatter the gradients, "
                                        "all-gather the weights), false: 0; replaces the megatron section's own"),
    "align_param_gather": unsupported("every pipeline stage's weight all-gathers launched together is not modelled",
                                      neutral=False),
    "num_distributed_optimizer_instances": unsupported("the distributed optimizer sharded over part of DP is not "
                                                       "modelled", neutral=1),
    "pad_buckets_for_high_nccl_busbw": unsupported("bucket padding for NCCL's bus bandwidth is not modelled",
                                                   neutral=False),
    "fp8_param_gather": unsupported("an fp8 weight all-gather is not modelled", neutral=False),
    "use_custom_fsdp": unsupported("Megatron-Core's own FSDP is not modelled", neutral=False),
    "data_parallel_sharding_strategy": ignored("read by Megatron-Core's own FSDP only (use_custom_fsdp)"),
}


def ddp_rules(section: str) -> dict[str, Rule]:
    """DDP_RULES under a framework's section (its dotted prefix)."""
    return {f"{section}.{key}": rule for key, rule in DDP_RULES.items()}


def megatron_ddp_overlap(v: Any, section: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """overlap_grad_reduce / bucket_size / overlap_param_gather under ``section`` onto w's train_params.comm,
    after w's train_layout is mapped (false or absent: Megatron-Core's default, nothing written)."""
    grad_key, bucket_key = f"{section}.{OVERLAP_GRAD_REDUCE}", f"{section}.{BUCKET_SIZE}"
    overlap = v.flag(grad_key) if v.given(grad_key) else False
    _param_gather(v, f"{section}.{OVERLAP_PARAM_GATHER}", overlap, w, decided)
    bucket = v(bucket_key) if v.given(bucket_key) else None
    if not overlap:
        if bucket is not None:
            decided[bucket_key] = ("ignored", "Megatron-Core drops bucket_size without overlap_grad_reduce "
                                              "(distributed_data_parallel.py: one bucket)")
        return
    comm: dict[str, Any] = {"dp_overlap_fraction": DDP_OVERLAP_FRACTION,
                            "dp_bucket_min_params": MCORE_DDP_BUCKET_MIN_PARAMS}
    if bucket is not None:   # Megatron-Core takes the given size as it is, no per-rank floor
        comm.update(dp_bucket_min_params=positive_int(bucket, bucket_key, v.result.source),
                    dp_bucket_params_per_rank=0)
    merge_train_params(w, {"comm": comm})


def _param_gather(v: Any, key: str, overlap: bool, w: dict[str, Any], decided: dict[str, tuple[Status, str]]) -> None:
    """overlap_param_gather: read with the distributed optimizer only; rlsim takes it equal to
    overlap_grad_reduce (ignored where it is, unsupported where it is not, a note where left out under
    overlap_grad_reduce true)."""
    layout = w.get("train_layout")
    if isinstance(layout, dict) and layout.get("zero", 1) == 0:   # no distributed optimizer: no weight gather
        if v.given(key):
            decided[key] = ("ignored", "read with the distributed optimizer only (train_layout.zero 0)")
        return
    gather = v.flag(key) if v.given(key) else False
    if gather and overlap:
        decided[key] = ("ignored", f"true with overlap_grad_reduce true is what rlsim models ({OVERLAP_PARAM_GATHER_NOTE})")
    elif overlap:
        v.result.notes.append(f"{key} false (Megatron-Core's default) with overlap_grad_reduce true: rlsim hides the "
                              "distributed optimizer's weight all-gather by comm.dp_overlap_fraction as the gradient "
                              "reduction (no knob of its own): the step is optimistic by that gather")
