"""Named training software stacks: the cost-model constants and layout settings a stack fixes.

One definition per stack (simulator/params.py, the config layer, so that a workload can name one:
`workload.train_software: NAME`), shared by validation cases, planner searches and tests, so that
"the 2021 Megatron-LM software" means the same thing everywhere (docs/cost-models-training.md).
This module adds what needs the llm layer: a TrainLayout built with a stack's settings.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import params
from .train_layout import TrainLayout


@dataclasses.dataclass(frozen=True)
class TrainSoftware(params.TrainSoftware):
    """params.TrainSoftware with `layout(**fields) -> TrainLayout`."""

    def layout(self, **fields: Any) -> TrainLayout:
        """A TrainLayout with this stack's settings (the first recompute mode and ZeRO stage)
        unless `fields` give them."""
        return TrainLayout(**self.layout_fields(**fields))

    @classmethod
    def of(cls, stack: params.TrainSoftware) -> TrainSoftware:
        return cls(**{f.name: getattr(stack, f.name) for f in dataclasses.fields(stack)})


PRESETS: dict[str, TrainSoftware] = {name: TrainSoftware.of(s) for name, s in params.TRAIN_SOFTWARE.items()}
MEGATRON_2021 = PRESETS[params.MEGATRON_2021.name]
MEGATRON_CORE = PRESETS[params.MEGATRON_CORE.name]
MEGATRON_2022 = PRESETS[params.MEGATRON_2022.name]
MEGATRON_CORE_OVERLAP = PRESETS[params.MEGATRON_CORE_OVERLAP.name]
