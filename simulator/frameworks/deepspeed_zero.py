"""DeepSpeed ZeRO 0-3 as the frameworks that launch it run it (OpenRLHF's actor / critic, TRL's accelerate
zero1 / zero2 / zero3 configs): the workload.train_params.memory / comm keys of its gradient buffers,
its ZeRO-3 parameter window and its reduction, read in the deepspeed 0.19.6 sdist (`pip download
--no-deps deepspeed==0.19.6`, the version OpenRLHF 0.11.2 pins). Neither framework gives DeepSpeed a
value of its own for reduce_bucket_size nor the stage3_* sizes (OpenRLHF's get_train_ds_config writes
"auto", which runtime/config_utils.py drops; accelerate 1.16.0's DeepSpeedPlugin writes none of them):
DeepSpeed's defaults (runtime/zero/config.py) hold.
"""
from __future__ import annotations

from typing import Any

# zero_optimization.reduce_bucket_size's default (runtime/zero/config.py DeepSpeedZeroConfig:
# reduce_bucket_size = pp_int(5e8)); OpenRLHF's "auto" keeps it (runtime/config_utils.py drops "auto" values).
DEEPSPEED_REDUCE_BUCKET_SIZE = 500_000_000
# With bf16 or fp16 on and no data_types.grad_accum_dtype (OpenRLHF's default), the gradients are held and
# reduced in the model's dtype: ZeRO-1 / 2's param.grad and gradient partition (stage_1_and_2.py
# copy_grads_in_partition: torch.empty(..., dtype=self.dtype)), ZeRO-0's param.grad under the DDP_BFLOAT16 /
# FP16 wrapper (engine.py _do_optimizer_sanity_check), and the engine's communication_data_type is the
# model's dtype unless the config names one (engine.py communication_data_type).
DEEPSPEED_GRAD_BYTES_PER_PARAM = 2.0
# With data_types.grad_accum_dtype fp32 (OpenRLHF --ds.grad_accum_dtype fp32): ZeRO-1 in bf16 runs
# BF16_Optimizer instead (engine.py _do_optimizer_sanity_check), which keeps a whole fp32 gradient
# buffer (bf16_optimizer.py _setup_for_real_optimizer: fp32_groups_gradients_flat, torch.zeros_like the
# flat bf16 parameters) beside the bf16 gradients autograd writes (param.grad, added into it at each
# backward's end: update_hp_grads): 4 + 2, whole on every rank; it all-reduces the fp32 buffer once an
# optimizer step (engine.py buffered_allreduce_fallback: get_grads_for_reduction) cast to the
# communication dtype, bf16, and no IPG buckets. ZeRO-3 keeps its gradient partition in fp32
# (stage3.py grad_partitions_flat_buffer: dtype=gradient_accumulation_dtype), reducing in bf16.
DEEPSPEED_BF16_OPTIMIZER_GRAD_BYTES_PER_PARAM = 4.0 + 2.0
# Of them, BF16_Optimizer keeps the fp32 buffer between steps (allocated once at init, only zeroed after
# each step: bf16_optimizer.py clear_hp_grads, flat_gradients.zero_()) and frees the bf16 param.grad
# (engine.py _take_model_step -> BF16_Optimizer.zero_grad(set_to_none=True): clear_lp_grads sets
# param.grad = None): MemoryParams.kept_grad_bytes_per_param.
DEEPSPEED_BF16_OPTIMIZER_KEPT_GRAD_BYTES_PER_PARAM = 4.0
# Where fp32 accumulation runs DeepSpeedZeroOptimizer at ZeRO-1 (under ZeRO-Offload, or beside fp16 weights:
# engine.py _do_optimizer_sanity_check picks BF16_Optimizer for bf16 without cpu offload only), its
# use_grad_accum_attribute (stage_1_and_2.py: a separate accumulation dtype and not partition_gradients) casts
# each param.grad to param.grad_accum in gradient_accumulation_dtype in the gradient hook and frees the 16-bit
# one (_fill_param_grad_accum_attribute), whole at ZeRO-1, reduced in the 16-bit dtype
# (get_gradient_for_reduction: grad_accum.to(self.dtype)) and freed after the step (free_grad_in_param_list);
# the device step's flat copy of the partition is fp32 already (get_flat_partition of the fp32 grad_accum),
# which .to(fp32) returns: 4, no cast. ZeRO-2 takes no grad_accum attribute (not partition_gradients only): its
# partition's gradients are copied into the 16-bit grads_in_partition and accumulated there
# (get_all_grad_tensors keeps them as they are), so fp32 accumulation there holds and reduces what 16-bit does.
# ZeRO-3's partition is fp32 (grad_partitions_flat_buffer: dtype=gradient_accumulation_dtype).
DEEPSPEED_FP32_GRAD_BYTES_PER_PARAM = 4.0
# ZeRO-1 / 2's copy of a bucket while it is all-reduced: with reduce_scatter (DeepSpeed's default, which
# neither OpenRLHF nor accelerate changes) average_tensor cuts the IPG bucket into its slices by owning rank,
# and allreduce_and_scatter hands them (use_multi_rank_bucket_allreduce, the default) to allreduce_bucket,
# which all-reduces `tensor = self.flatten(bucket)` (stage_1_and_2.py: torch's flatten_dense_tensors, a
# torch.cat: a bucket-sized copy wherever the bucket spans more than one slice, which a bucket crossing a
# partition's edge does) and copies it back into the slices; one at a time (the next reduction waits for
# the reduction stream): 1 beside the contiguous buckets, overlap_comm or not, where the ZeRO group has
# several ranks (MemoryParams.zero_allreduce_copies: with one, the bucket is one slice and flatten a view).
DEEPSPEED_ZERO12_ALLREDUCE_COPIES = 1
# ZeRO-1 / 2's optimizer step (stage_1_and_2.py step(), not under cpu_offload) flattens the device's gradient
# partition in the model's dtype (flat_grad_partition = self.flatten(self.averaged_gradients[i]): 2) and
# casts it to the fp32 of the master weights (flat_grad_partition.to(...): 4) before deleting the flat
# copy, the partition's own gradients still referenced: MemoryParams.zero_step_grad_copy_bytes_per_param.
DEEPSPEED_STEP_GRAD_COPY_BYTES_PER_PARAM = DEEPSPEED_GRAD_BYTES_PER_PARAM + 4.0
# ZeRO-3's IPG bucket and its copy while a full bucket is reduce-scattered (MemoryParams
# .zero_reduce_buckets says where): 2 bucket-sized buffers through the backward, overlap_comm or not.
DEEPSPEED_ZERO3_REDUCE_BUCKETS = 2
# Of them, the IPG bucket stays allocated from init between steps (stage3.py _setup_for_real_optimizer;
# freed only by offload_states' contiguous_grad_buffer, OpenRLHF's --ds.enable_sleep): MemoryParams
# .zero_reduce_buckets_kept.
DEEPSPEED_ZERO3_KEPT_REDUCE_BUCKETS = 1
# ZeRO-3's optimizer step (stage3.py _prepare_fp32_grad_for_sub_group, not under offload_optimizer) does the
# same to one sub-group at a time: self.flatten(self.averaged_gradients[i]) in the gradients' dtype, .to(fp32)
# (2 + 4 with bf16 gradients; with fp32 ones the flat copy alone: .to returns it), held as the master's
# .grad through its step, released before the next: MemoryParams.zero_step_grad_copy_bytes_per_param.
DEEPSPEED_ZERO3_STEP_FP32_CAST_BYTES_PER_PARAM = 4.0
# ZeRO-Offload's device buffer of the largest parameter (stage_1_and_2.py __init__ under cpu_offload, ZeRO-1
# and 2: temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel, device=current_device_name(),
# dtype=self.dtype), through which async_accumulate_grad_in_cpu_via_gpu stages the gradients it accumulates on
# the host; kept to the end): one, MemoryParams.zero_offload_device_grad_buffers. ZeRO-3 allocates none.
DEEPSPEED_OFFLOAD_DEVICE_GRAD_BUFFERS = 1
# zero_optimization.sub_group_size's default (runtime/zero/config.py DeepSpeedZeroConfig: sub_group_size =
# pp_int(1e9); OpenRLHF's "auto" dropped), the elements the step copies at once: MemoryParams
# .zero_step_sub_group_params.
DEEPSPEED_SUB_GROUP_SIZE = 1_000_000_000
# zero_optimization.stage3_max_live_parameters's default (runtime/zero/config.py DeepSpeedZeroConfig:
# max_live_parameters = pp_int(1e9)), the live-parameter window (MemoryParams.zero3_max_live_params).
DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000


def zero_train_params(stage: int, *, overlap_comm: bool, optimizer_on_host: bool, fp32_grad_accum: bool = False,
                      params_on_host: bool = False, bf16_weights: bool = True) -> dict[str, dict[str, Any]]:
    """workload.train_params {"memory": ..., "comm": ...} of DeepSpeed ZeRO `stage` 0-3 in bf16 / fp16: the
    gradients in the model's dtype, reduced in it; at 1 and 2 the contiguous reduction buckets (2 with
    overlap_comm: setup_buckets), each all-reduced (average_tensor with use_multi_rank_bucket_allreduce)
    from its flattened copy (allreduce_bucket), and, unless the optimizer steps on the host, the
    optimizer step's copies of the gradient partition (its flat copy and the fp32 cast);
    at 2 the reduction in every micro-batch's backward and, unless the optimizer steps on the host
    (ZeRO-Offload copies each micro-batch's partition to the host instead), the accumulated partition
    beside the one the next backward fills; at 3 (zero3_train_params) the kept gradient partition, the
    bucket and its copy, the live-parameter window, unless the optimizer steps on the host the step's copies
    of each optimizer sub-group's gradients. `fp32_grad_accum` (data_types.grad_accum_dtype fp32 beside
    16-bit weights, `bf16_weights` or fp16): ZeRO-1's BF16_Optimizer with bf16 weights on the device (its fp32
    buffer kept between steps), else DeepSpeedZeroOptimizer's fp32 grad_accum a parameter; at ZeRO-2 nothing
    changes (its accumulation stays 16-bit); ZeRO-3's fp32 partition; the caller refuses it at 0
    (MemoryParams / CommParams and DEEPSPEED_FP32_GRAD_BYTES_PER_PARAM say where in the source). With the optimizer on the host (ZeRO-Offload) the
    gradient partition is there too from ZeRO-2 on (memory.grad_partition_on_host), unless `params_on_host`
    (DeepSpeed's offload_param: rlsim's offload.fsdp_cpu_offload holds the whole sharded state on the host);
    at ZeRO 1-2 with it, the device buffer of the largest parameter it stages the gradients through
    (memory.zero_offload_device_grad_buffers)."""
    sections = _zero_stage_params(stage, overlap_comm=overlap_comm, optimizer_on_host=optimizer_on_host,
                                  fp32_grad_accum=fp32_grad_accum, bf16_weights=bf16_weights)
    if stage >= 2 and optimizer_on_host and not params_on_host:
        sections["memory"]["grad_partition_on_host"] = True
    if stage in (1, 2) and optimizer_on_host:
        sections["memory"]["zero_offload_device_grad_buffers"] = DEEPSPEED_OFFLOAD_DEVICE_GRAD_BUFFERS
    return sections


def _zero_stage_params(stage: int, *, overlap_comm: bool, optimizer_on_host: bool,
                       fp32_grad_accum: bool, bf16_weights: bool) -> dict[str, dict[str, Any]]:
    """zero_train_params' keys of `stage` but ZeRO-Offload's gradient partition."""
    if stage == 3:
        return zero3_train_params(fp32_grad_accum=fp32_grad_accum, optimizer_on_host=optimizer_on_host)
    memory: dict[str, Any] = {"grad_bytes_per_param": DEEPSPEED_GRAD_BYTES_PER_PARAM}
    comm: dict[str, Any] = {"grad_reduce_bytes_per_param": DEEPSPEED_GRAD_BYTES_PER_PARAM}
    grad_accum = stage == 1 and fp32_grad_accum and (optimizer_on_host or not bf16_weights)
    if stage == 1 and fp32_grad_accum and not grad_accum:   # BF16_Optimizer: no IPG buckets, one all-reduce a step
        memory.update(grad_bytes_per_param=DEEPSPEED_BF16_OPTIMIZER_GRAD_BYTES_PER_PARAM, grad_buffer_persists=True,
                      kept_grad_bytes_per_param=DEEPSPEED_BF16_OPTIMIZER_KEPT_GRAD_BYTES_PER_PARAM)
        comm["zero_grad_reduce"] = "all-reduce"
        return {"memory": memory, "comm": comm}
    if stage >= 1:
        memory["zero_reduce_bucket_params"] = float(DEEPSPEED_REDUCE_BUCKET_SIZE)
        memory["zero_reduce_buckets"] = 2 if overlap_comm else 1
        memory["zero_allreduce_copies"] = DEEPSPEED_ZERO12_ALLREDUCE_COPIES
        comm["zero_grad_reduce"] = "all-reduce"
        if not optimizer_on_host:   # ZeRO-Offload's step reads the fp32 partition on the host
            memory["zero_step_grad_copy_bytes_per_param"] = DEEPSPEED_STEP_GRAD_COPY_BYTES_PER_PARAM
    if grad_accum:   # DeepSpeedZeroOptimizer's fp32 param.grad_accum, its step's flat copy fp32 already
        memory["grad_bytes_per_param"] = DEEPSPEED_FP32_GRAD_BYTES_PER_PARAM
        if not optimizer_on_host:
            memory["zero_step_grad_copy_bytes_per_param"] = DEEPSPEED_FP32_GRAD_BYTES_PER_PARAM
    if stage == 2:
        comm["zero2_reduce_every_micro_batch"] = True
        if not optimizer_on_host:
            memory["zero2_accumulated_grad_partitions"] = 1
    return {"memory": memory, "comm": comm}


def zero3_train_params(*, fp32_grad_accum: bool = False, optimizer_on_host: bool = False) -> dict[str, dict[str, Any]]:
    """DeepSpeed ZeRO-3 (runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3) in bf16 / fp16: the gradient
    partition in the model's dtype (fp32 with `fp32_grad_accum`), allocated at init and kept between
    steps (_setup_for_real_optimizer: grad_partitions_flat_buffer; zero_grad frees only param.grad), each
    bucket reduce-scattered in the communication dtype (reduce_scatter: __avg_scatter_grads) in every
    micro-batch's backward (rlsim's ZeRO-3 reduces each layer's gradients in each backward already); the
    IPG bucket (kept from init between steps) and its reduce-scatter copy; the optimizer step's flat copy and
    fp32 cast of one sub-group's gradients at a time; the live-parameter window in place of FSDP's layer prefetch and
    root unit. DeepSpeed's ZeRO-3 re-gathers each submodule in the backward (released after its forward
    unless reused within stage3_max_reuse_distance): FSDP's reshard after forward, rlsim's default. With
    the optimizer on the host (ZeRO-Offload) the partition is allocated there (self.device is the CPU):
    not kept on the device between steps (zero_train_params says it is on the host in the update too)."""
    grads = DEEPSPEED_FP32_GRAD_BYTES_PER_PARAM if fp32_grad_accum else DEEPSPEED_GRAD_BYTES_PER_PARAM
    memory: dict[str, Any] = {"grad_bytes_per_param": grads,
                              "zero_reduce_bucket_params": float(DEEPSPEED_REDUCE_BUCKET_SIZE),
                              "zero_reduce_buckets": DEEPSPEED_ZERO3_REDUCE_BUCKETS,
                              "zero_reduce_buckets_kept": DEEPSPEED_ZERO3_KEPT_REDUCE_BUCKETS,
                              "zero3_max_live_params": float(DEEPSPEED_STAGE3_MAX_LIVE_PARAMETERS)}
    if not optimizer_on_host:   # under offload_optimizer the partition and the step are on the host
        memory["grad_buffer_persists"] = True
        memory["zero_step_grad_copy_bytes_per_param"] = grads + (
            0.0 if fp32_grad_accum else DEEPSPEED_ZERO3_STEP_FP32_CAST_BYTES_PER_PARAM)
        memory["zero_step_sub_group_params"] = float(DEEPSPEED_SUB_GROUP_SIZE)
    # every submodule gathered and reduced in each micro-batch, the embedding and head too, and each
    # backward's end waiting for the last bucket (CommParams.zero3_outer_sync_every_micro_batch,
    # zero3_backward_waits_last_bucket say where in stage3.py)
    return {"memory": memory, "comm": {"grad_reduce_bytes_per_param": DEEPSPEED_GRAD_BYTES_PER_PARAM,
                                       "zero3_outer_sync_every_micro_batch": True,
                                       "zero3_backward_waits_last_bucket": True}}


def merge_train_params(workload: dict[str, Any], sections: dict[str, dict[str, Any]]) -> None:
    """Add `sections` ({"memory": {...}, "comm": {...}}) to workload.train_params, beside what is there."""
    for section, keys in sections.items():
        workload.setdefault("train_params", {}).setdefault(section, {}).update(keys)
