"""The log-probs' gradient that cannot overwrite the logits where the update computes the entropy
(workload.entropy.logprob_grad_bytes_per_logit; verl's packed path: params.FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator import params
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.hardware.topology import load_topology
from simulator.rl.llm_costs import LlmCosts
from simulator.scenario import load_scenario

CFG = Path(__file__).resolve().parents[2] / "workloads" / "frameworks" / "verl-grpo-qwen2.5-7b.yaml"
A = "actor_rollout_ref"


def _costs(*overrides: str) -> LlmCosts:
    sc = load_scenario(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                       schedule="colocated", overrides=list(overrides))
    return LlmCosts(sc, load_topology(sc.topology))


def _peaks(*overrides: str) -> tuple[float, float]:
    """(update, old log-prob pass) peak bytes of 64 samples of 2048 tokens on 8 devices."""
    c = _costs(*overrides)
    lengths = np.full(64, 2048)
    return c.train("actor", lengths, range(8)).peak_memory_bytes, c.forward("actor", lengths, range(8)).peak_memory_bytes


@pytest.mark.parametrize("in_loss", [True, False])
def test_the_updates_peak_holds_the_gradient_beside_the_logits(in_loss):
    """Closed form: the update's peak rises by the bytes x the micro-batch's tokens x vocab / tp
    (the per-byte step measured with update_memory_bytes_per_logit); the old log-prob pass, which has
    no backward, does not move."""
    spec = "{passes: [old_logprob, update], kernel: compiled" + (", in_loss: true" if in_loss else "")
    base_update, base_forward = _peaks(f"workload.entropy={spec}}}")
    update, forward = _peaks(f"workload.entropy={spec}, logprob_grad_bytes_per_logit: "
                             f"{params.FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT}}}")
    plain = _costs()
    per_byte = _peaks("workload.entropy={passes: [update], in_loss: true, update_memory_bytes_per_logit: 1}")[0] \
        - _peaks()[0]
    rows = per_byte / (2048 * plain.model.head_outputs / plain.layout(8).tp)
    assert rows >= 1 and rows == round(rows)
    assert update - base_update == pytest.approx(2.0 * per_byte, rel=1e-9)
    assert forward == base_forward


def test_the_gradient_needs_the_update_to_compute_the_entropy():
    with pytest.raises(RlsimError, match="logprob_grad_bytes_per_logit applies where the update computes"):
        load_scenario(workload="grpo-qwen2.5-7b", overrides=[
            "workload.entropy={passes: [old_logprob], logprob_grad_bytes_per_logit: 2}"])


def _entropy(*overrides: str) -> dict:
    return import_config("verl", CFG, list(overrides)).scenario["workload"].get("entropy", {})


def test_verl_sets_it_in_its_packed_path_when_the_update_computes_the_entropy():
    coeff = f"{A}.actor.entropy_coeff=0.001"
    assert _entropy(coeff)["logprob_grad_bytes_per_logit"] == params.FLASH_ATTN_OUT_OF_PLACE_GRAD_BYTES_PER_LOGIT
    assert "logprob_grad_bytes_per_logit" not in _entropy()                         # entropy_coeff 0: in place
    assert "logprob_grad_bytes_per_logit" not in _entropy(coeff, f"{A}.model.use_remove_padding=false")
    assert "logprob_grad_bytes_per_logit" not in _entropy(coeff, f"{A}.actor.strategy=megatron")
    fused = _entropy(coeff, f"+{A}.model.use_fused_kernels=true")                     # no flash-attn cross entropy
    assert fused["kernel"] == "verl-fused-torch" and "logprob_grad_bytes_per_logit" not in fused
    # verl 0.7's calculate_entropy computes it in the update without the loss: in place off all the same
    metrics = _entropy(f"+{A}.actor.calculate_entropy=true")
    assert metrics["logprob_grad_bytes_per_logit"] == 2.0 and not metrics.get("in_loss")


def test_verl_quickstart_with_an_entropy_bonus_holds_the_gradient_in_its_update():
    """The shipped example with entropy_coeff 0.001: its train phase's peak rises by 2 B a logit of
    the update's micro-batch (25.47 -> 27.34 GB)."""
    from simulator.api import simulate
    coeff = f"{A}.actor.entropy_coeff=0.001"
    on = import_config("verl", CFG, [coeff]).scenario
    off = import_config("verl", CFG, [coeff]).scenario
    off["workload"]["entropy"].pop("logprob_grad_bytes_per_logit")
    peak = {name: simulate(sc, iterations=1, keep_samples=False).summary["peak_memory_by_phase"]["train"]
            for name, sc in (("on", on), ("off", off))}
    tokens = (peak["on"] - peak["off"]) / (2.0 * 152_064)   # Qwen2.5-7B's vocabulary, tp 1
    assert tokens == pytest.approx(round(tokens), abs=1e-6)   # the peak micro-batch's tokens, whole
    assert 1 <= tokens <= 4 * (512 + 1024)                    # micro_batch 4 rows of prompt + response max
