"""train_params.compute.flash_efficiency_ratio (params.flash_ratio_read_past): it rates flash attention
and the Mamba-2 scans, so with flash attention off and no Mamba layer it changes no prediction and is
refused, naming the key; with flash on, or on a hybrid model, it moves the step."""
import pytest

from simulator.api import simulate
from simulator.errors import RlsimError

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16"]
DGX = {"preset": "dgx-h100", "nodes": 2}
FLASH_OFF = "workload.train_params.compute.flash_attention=false"
RATIO = "workload.train_params.compute.flash_efficiency_ratio=0.3"


def step(*items: str, model: str | None = None) -> float:
    extra = [f"workload.model={model}"] if model else []
    return simulate(workload="grpo-qwen2.5-7b", topology=DGX, schedule="colocated", iterations=1,
                    overrides=[*SMALL, *extra, *items]).summary["step_time_s"]


def test_without_flash_or_mamba_layers_it_is_refused():
    with pytest.raises(RlsimError) as exc:
        step(FLASH_OFF, RATIO)
    assert exc.value.field == "workload.train_params.compute.flash_efficiency_ratio"
    assert "flash_attention: true" in exc.value.fix


@pytest.mark.parametrize("items, model", [([], None), ([FLASH_OFF], "nemotron-h-8b")])
def test_where_it_is_read_it_moves_the_step(items, model):
    assert step(*items, RATIO, model=model) > step(*items, model=model)
