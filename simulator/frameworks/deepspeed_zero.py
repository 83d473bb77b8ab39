"""DeepSpeed ZeRO 0-2 as the frameworks that launch it run it (OpenRLHF's actor / critic, TRL's accelerate
zero1 / zero2 configs): the workload.train_params.memory / comm keys of its gradient buffers and
reduction, read in the deepspeed 0.19.6 sdist (`pip download --no-deps deepspeed==0.19.6`, the version
OpenRLHF 0.11.2 pins). ZeRO-3 (runtime/zero/stage3.py) is not covered here: rlsim's FSDP / ZeRO-3 model.
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


def zero_train_params(stage: int, *, overlap_comm: bool, optimizer_on_host: bool) -> dict[str, dict[str, Any]]:
    """workload.train_params {"memory": ..., "comm": ...} of DeepSpeed ZeRO `stage` 0-2 in bf16 / fp16 (empty
    at 3): the gradients in the model's dtype; at 1 and 2 the contiguous reduction buckets (2 with
    overlap_comm: setup_buckets), each all-reduced (average_tensor with use_multi_rank_bucket_allreduce);
    at 2 the reduction in every micro-batch's backward and, unless the optimizer steps on the host
    (ZeRO-Offload copies each micro-batch's partition to the host instead), the accumulated partition
    beside the one the next backward fills (MemoryParams / CommParams say where in the source)."""
    if stage not in (0, 1, 2):
        return {}
    memory: dict[str, Any] = {"grad_bytes_per_param": DEEPSPEED_GRAD_BYTES_PER_PARAM}
    comm: dict[str, Any] = {"grad_reduce_bytes_per_param": DEEPSPEED_GRAD_BYTES_PER_PARAM}
    if stage >= 1:
        memory["zero_reduce_bucket_params"] = float(DEEPSPEED_REDUCE_BUCKET_SIZE)
        if overlap_comm:
            memory["zero_reduce_buckets"] = 2
        comm["zero_grad_reduce"] = "all-reduce"
    if stage == 2:
        comm["zero2_reduce_every_micro_batch"] = True
        if not optimizer_on_host:
            memory["zero2_accumulated_grad_partitions"] = 1
    return {"memory": memory, "comm": comm}


def merge_train_params(workload: dict[str, Any], sections: dict[str, dict[str, Any]]) -> None:
    """Add `sections` ({"memory": {...}, "comm": {...}}) to workload.train_params, beside what is there."""
    for section, keys in sections.items():
        workload.setdefault("train_params", {}).setdefault(section, {}).update(keys)
