"""M1 / M2: what lent GPUs measured for this project, against rlsim's one-GPU costs.

Not published results: the project's own measurements, raw outputs and the commands that produced
them in benchmarks/measured/ (an H200 on 2026-12-04, an H100 on 2026-12-06; README in each). M1: the
V7 GPT models whole on the GPU, forward and backward of one 4096-token micro-batch with their layers
compiled (fused norms, GELU, biases and residuals: benchmarks/device_train_step.py --compile), against
the compute rlsim gives one micro-batch a GPU on the catalog device. M2: a Llama-3.1-8B decode step at
1024 cached positions a sequence, replayed as a CUDA graph (benchmarks/device_decode_graphs.py),
against the GPU part of rlsim's engine step (the scheduler's CPU time is not in the measured loop).
Each part's GEMM plateau and HBM efficiency come from the same machine's GEMM sweep and batch-1
decode step, the Hopper flash scale from the H200's 1.7B micro-batches (hardware/devices.py): M1's
totals and M2's other batches did not set them.

`rlsim validate --set` items: M1 the device's fields (`topology.device.*`) and the trainer
constants (`workload.train_params.*`); M2 the device's fields and the engine step's constants (V5's
keys: decode.DENSE_OVERRIDES)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import Case, items_taken, overridden_device, register
from .decode import DENSE_OVERRIDES, _params

TRAIN_OVERRIDES = ("topology.device.", "workload.train_params.")
# The script keeps bf16 gradients and no optimizer state; Megatron's fp32 main gradients would not
# let the 16B model fit one GPU, and they change no compute time.
GRADIENTS = "workload.train_params.memory.grad_bytes_per_param=2"
KV_LEN = 1024


@dataclass(frozen=True)
class Lease:
    """One lent GPU's figures: the catalog device it is, its folder under benchmarks/measured, (V7
    row label, seconds per compiled micro-batch: train_step_<row>_compiled.json micro_batch_s) and
    (batch, seconds per graph-replayed decode step: decode_graphs.json rows' graph_s)."""

    device: str
    folder: str
    train_steps: tuple[tuple[str, float], ...]
    decode_steps: tuple[tuple[int, float], ...]

    @property
    def source(self) -> str:
        return f"measured on one {self.device.upper()}, torch 2.11 (benchmarks/measured/{self.folder})"


LEASES = (
    Lease("h200", "h200-2026-12-04",
          (("1.7b", 0.0836540161000002), ("7.1b", 0.3058374233999984), ("16b", 0.6644286006000015)),
          ((1, 0.005128982450000308), (4, 0.005364473699999905), (16, 0.005727157500000146),
           (64, 0.007457837699999459), (256, 0.015465226199999904))),
    Lease("h100", "h100-2026-12-06",
          (("1.7b", 0.0873165966000002), ("7.1b", 0.3080821818000004)),
          ((1, 0.00675863535000012), (4, 0.007064508199999864), (16, 0.007561955700000312),
           (64, 0.009856408449999776), (256, 0.01993201500000019))),
)


def _micro_batch_s(row: str, overrides: tuple[str, ...], device: str = "h200") -> float:
    """rlsim's compute of one micro-batch a GPU (DP 8, 8 sequences) with the row's model on the
    catalog ``device``, the device fields given (`topology.device.*`) over it."""
    from ..overrides import section
    from .megatron_core import ROWS, predict_row

    _, heads, hidden, layers, *_ = next(r for r in ROWS if r[0] == row)
    fields = tuple(sorted(section(overrides, "topology.device").items()))
    trainer = tuple(item for item in overrides if not item.startswith("topology.device."))
    cost = predict_row(heads, hidden, layers, 1, 1, 8, 8, device=(("base", device), *fields),
                       overrides=(GRADIENTS, *trainer))
    return float(cost.compute_s)


def graph_step_gpu_s(cost: Any, batch: int, kv_len: int) -> float:
    """The GPU part of a decode step of `batch` sequences of `kv_len` cached positions (a StepCost):
    the step less the engine scheduler's CPU time, which a replayed CUDA graph's loop does not have."""
    c0, _, m0, _, added = cost.decode_lines(batch, batch * kv_len)
    return max(c0, m0) + added - (cost.params.step_overhead_s + cost.params.cpu_per_seq_s * batch)


def _decode_step_s(batch: int, overrides: tuple[str, ...], device: str = "h200") -> float:
    from ..llm.architecture import load_model
    from ..llm.inference import RolloutLayout, StepCost

    cost = StepCost(load_model("llama3.1-8b"), overridden_device(device, overrides), RolloutLayout(),
                    _params(overrides))
    return graph_step_gpu_s(cost, batch, KV_LEN)


@register(overrides=True)
def cases(overrides: tuple[str, ...] = ()):
    train = items_taken(TRAIN_OVERRIDES, overrides)
    decode = items_taken(DENSE_OVERRIDES, overrides)
    if train:   # a bad key or value is bad input (exit 2), not a case that cannot run
        from ..llm.train_presets import PRESETS
        from .megatron_core import STACK
        from .training_rows import check_training_overrides

        check_training_overrides(train, PRESETS[STACK], "h200")
    if decode:
        overridden_device("h200", decode)
        _params(decode)
    for lease in LEASES:
        yield from _lease_cases(lease, train, decode)


def _lease_cases(lease: Lease, train: tuple[str, ...], decode: tuple[str, ...]) -> Iterator[Case]:
    name = lease.device
    for row, seconds in lease.train_steps:
        yield Case(f"M1 {name} {row} gpt micro-batch, compiled", "s per micro-batch", seconds,
                   lambda row=row: _micro_batch_s(row, train, name), tolerance=0.10, source=lease.source,
                   note="the V7 model whole on one GPU (TP 1), 4096 tokens, forward + backward, no optimizer",
                   overridable=TRAIN_OVERRIDES)
    for batch, seconds in lease.decode_steps:
        yield Case(f"M2 {name} llama3.1-8b decode step batch {batch}", "s per step (graph)", seconds,
                   lambda batch=batch: _decode_step_s(batch, decode, name), tolerance=0.10,
                   source=lease.source, note=f"{KV_LEN} cached positions a sequence, bf16, the step's GPU part",
                   overridable=DENSE_OVERRIDES,
                   in_sample=(f"the catalog {name}'s HBM efficiency is this batch-1 step's streaming rate"
                              if batch == 1 else ""))
