"""Named training software stacks: the cost-model constants and layout settings a stack fixes.

One definition per stack, shared by validation cases, planner searches and tests, so that "the
2021 Megatron-LM software" means the same thing everywhere (docs/cost-models-training.md).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .train_compute import ComputeParams
from .train_layout import TrainLayout
from .training import CommParams, TrainParams


@dataclass(frozen=True)
class TrainSoftware:
    """A software stack: `params` for the cost model, and the layout options it always uses
    (`recompute`, `zero`, `sequence_parallel`) or lacks (`context_parallel`)."""

    name: str
    params: TrainParams
    recompute: tuple[str, ...]          # recompute modes the stack offers / was run with
    zero: tuple[int, ...]               # ZeRO stages it offers
    sequence_parallel: bool | None      # None: on whenever tp > 1
    context_parallel: bool              # whether cp > 1 exists
    source: str = ""

    def layout(self, **fields: Any) -> TrainLayout:
        """A TrainLayout with this stack's settings (the first recompute mode and ZeRO stage)
        unless `fields` give them."""
        fields.setdefault("recompute", self.recompute[0])
        fields.setdefault("zero", self.zero[0])
        fields.setdefault("sequence_parallel", self.sequence_parallel)
        if not self.context_parallel and fields.get("cp", 1) != 1:
            raise ValueError(f"{self.name} has no context parallelism")
        return TrainLayout(**fields)

    def search_limits(self) -> dict[str, list]:
        """The planner search-space fields this stack pins (`SearchSpace(**limits)`)."""
        out: dict[str, list] = {"recompute": list(self.recompute), "zero": list(self.zero)}
        if not self.context_parallel:
            out["cp"] = [1]
        return out

    def replace(self, **fields: Any) -> TrainSoftware:
        return replace(self, **fields)


# Megatron-LM as in Narayanan et al. 2021 (arXiv 2104.04473, sec. 5): full activation recomputation
# (Table 1 note), materialized attention (FlashAttention came in 2022), no sequence parallelism (2022,
# arXiv 2205.05198), no distributed optimizer (ZeRO 0), no context parallelism, TP all-reduces and
# pipeline sends on the compute stream, the DP all-reduce after the flush, and blocking
# point-to-point (batch_isend_irecv + wait + cuda.synchronize in megatron/p2p_communication.py).
MEGATRON_2021 = TrainSoftware(
    name="megatron-2021",
    params=TrainParams(compute=ComputeParams(flash_attention=False),
                       comm=CommParams(tp_overlap_fraction=0.0, dp_overlap_fraction=0.0, pp_blocking_send=True)),
    recompute=("full",), zero=(0,), sequence_parallel=False, context_parallel=False,
    source="arXiv 2104.04473; NVIDIA/Megatron-LM 2021 (megatron/p2p_communication.py, schedules.py)")

PRESETS: dict[str, TrainSoftware] = {MEGATRON_2021.name: MEGATRON_2021}
