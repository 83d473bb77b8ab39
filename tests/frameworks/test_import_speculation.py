"""Speculative decoding in the importers: verl 0.9.1's MTP rollout and its vLLM speculative_config,
SkyRL's speculative_config and trainer.mtp, TRL's `trl vllm-serve --speculative_config`; the acceptance
rate is left to the user, who is asked for it by its key."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.frameworks import import_config
from simulator.frameworks.common import SPECULATION_NOTE

EXAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "frameworks"
VERL = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
SKYRL = EXAMPLES / "skyrl-grpo-qwen2.5-1.5b-gsm8k.sh"
TRL = EXAMPLES / "trl-grpo-qwen2.5-7b-server.yaml"
MTP = "actor_rollout_ref.model.mtp"
VLLM_SPEC = "actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config"


def _speculation(framework: str, path: Path, *overrides: str) -> tuple[dict, object]:
    r = import_config(framework, path, overrides)
    inference = r.scenario["workload"].get("inference", {})
    return {k: v for k, v in inference.items() if "specul" in k}, r


@pytest.mark.parametrize("overrides, expected", [
    ((f"{MTP}.enable=true", f"{MTP}.enable_rollout=true"), {"speculative_method": "mtp", "num_speculative_tokens": 1}),
    ((f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", f"{MTP}.num_speculative_tokens=3"),
     {"speculative_method": "mtp", "num_speculative_tokens": 3}),
    # the engine_kwargs' entries over the MTP config's (build_mtp_speculative_config)
    ((f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", f"+{VLLM_SPEC}={{num_speculative_tokens: 2}}"),
     {"speculative_method": "mtp", "num_speculative_tokens": 2}),
    ((f"+{VLLM_SPEC}={{method: eagle3, num_speculative_tokens: 4, model: org/EAGLE3-head}}",),
     {"speculative_method": "eagle3", "num_speculative_tokens": 4}),
    ((f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", "actor_rollout_ref.rollout.name=sglang",
      f"{MTP}.speculative_num_steps=2"), {"speculative_method": "mtp", "num_speculative_tokens": 2}),
    ((f"{MTP}.enable=true",), {}),   # MTP weights loaded, not used by the rollout
])
def test_verl_speculation_is_mapped(overrides, expected):
    got, r = _speculation("verl", VERL, *overrides)
    assert got == expected
    assert (SPECULATION_NOTE in r.notes) == bool(expected)
    assert not [key for key in r.unsupported if "speculative_config" in key or key.endswith("enable_rollout")]


def test_verl_lists_what_it_does_not_read():
    _, r = _speculation("verl", VERL, f"+{VLLM_SPEC}={{method: eagle, num_speculative_tokens: 3, quantization: fp8}}")
    assert f"{VLLM_SPEC}.quantization" in r.unsupported and f"{VLLM_SPEC}.method" in r.mapped
    _, r = _speculation("verl", VERL, f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", f"{MTP}.enable_train=true")
    assert f"{MTP}.enable_train" in r.unsupported


@pytest.mark.parametrize("overrides, field", [
    ((f"+{VLLM_SPEC}={{method: ngram, num_speculative_tokens: 3}}",), f"{VLLM_SPEC}.method"),
    ((f"+{VLLM_SPEC}={{method: draft_model, num_speculative_tokens: 3}}",), f"{VLLM_SPEC}.method"),
    ((f"+{VLLM_SPEC}={{num_speculative_tokens: 3}}",), f"{VLLM_SPEC}.method"),
    ((f"+{VLLM_SPEC}={{method: eagle}}",), f"{VLLM_SPEC}.num_speculative_tokens"),
    ((f"+{VLLM_SPEC}={{method: eagle, num_speculative_tokens: 3, draft_tensor_parallel_size: 2}}",
      "actor_rollout_ref.rollout.tensor_model_parallel_size=4"), f"{VLLM_SPEC}.draft_tensor_parallel_size"),
    ((f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", "actor_rollout_ref.rollout.name=sglang",
      f"{MTP}.speculative_eagle_topk=4"), f"{MTP}.speculative_eagle_topk"),
])
def test_verl_speculation_it_cannot_price_is_refused_by_its_key(overrides, field):
    with pytest.raises(RlsimError) as err:
        import_config("verl", VERL, overrides)
    assert err.value.field == field


def test_the_run_asks_for_the_acceptance_rate_by_its_key(capsys):
    args = ["run", "--from-verl", str(VERL), f"+{VLLM_SPEC}={{method: eagle, num_speculative_tokens: 3, "
            "model: org/EAGLE-head}", "--iterations", "1"]
    assert main(args) != 0
    assert "workload.inference.speculative_acceptance_rate" in capsys.readouterr().err
    assert main([*args, "--set", "workload.inference.speculative_acceptance_rate=0.7"]) == 0


def test_the_run_refuses_mtp_on_a_checkpoint_without_mtp_modules(capsys):
    """verl maps model.mtp to the engine's mtp drafter; Qwen2.5-7B's config.json has no
    num_nextn_predict_layers, so the run refuses it naming the method's key."""
    args = ["run", "--from-verl", str(VERL), f"{MTP}.enable=true", f"{MTP}.enable_rollout=true", "--iterations", "1",
            "--set", "workload.inference.speculative_acceptance_rate=0.7"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "workload.inference.speculative_method" in err and "num_nextn_predict_layers" in err


def test_skyrl_speculative_config_and_its_mtp_trainer():
    got, r = _speculation("skyrl", SKYRL, "generator.inference_engine.speculative_config={method: eagle, "
                                          "num_speculative_tokens: 2}")
    assert got == {"speculative_method": "eagle", "num_speculative_tokens": 2}
    assert "generator.inference_engine.speculative_config.method" in r.mapped
    # trainer.mtp.enabled: SkyRL's _apply_mtp_config sets vLLM's MTP speculation (the heads' training unsupported)
    got, r = _speculation("skyrl", SKYRL, "trainer.mtp.enabled=true", "trainer.mtp.num_speculative_tokens=3")
    assert got == {"speculative_method": "mtp", "num_speculative_tokens": 3}
    assert "trainer.mtp.enabled" in r.unsupported


def test_trl_server_speculative_config():
    got, r = _speculation("trl", TRL, 'vllm_serve.speculative_config={"method": "qwen3_next_mtp", '
                                      '"num_speculative_tokens": 5, "enforce_eager": true}')
    assert got == {"speculative_method": "mtp", "num_speculative_tokens": 5}
    assert "vllm_serve.speculative_config.enforce_eager" in r.unsupported
    with pytest.raises(RlsimError) as err:
        import_config("trl", TRL, ['vllm_serve.speculative_config={"method": "medusa", "num_speculative_tokens": 2}'])
    assert err.value.field == "vllm_serve.speculative_config.method"


# vLLM 0.11's SpeculativeConfig.disable_padded_drafter_batch (config/speculative.py): the drafter's first
# forward over the accepted tokens (prepare_inputs) rather than the k + 1 verified positions
@pytest.mark.parametrize("framework, path, override, key", [
    ("verl", VERL, f"+{VLLM_SPEC}={{method: eagle, num_speculative_tokens: 3, disable_padded_drafter_batch: FLAG}}",
     f"{VLLM_SPEC}.disable_padded_drafter_batch"),
    ("skyrl", SKYRL, "generator.inference_engine.speculative_config={method: eagle, num_speculative_tokens: 3, "
                     "disable_padded_drafter_batch: FLAG}", "generator.inference_engine.speculative_config."
                                                              "disable_padded_drafter_batch"),
    ("trl", TRL, 'vllm_serve.speculative_config={"method": "eagle", "num_speculative_tokens": 3, '
                 '"disable_padded_drafter_batch": FLAG}', "vllm_serve.speculative_config.disable_padded_drafter_batch"),
])
@pytest.mark.parametrize("flag", [True, False])
def test_vllm_disable_padded_drafter_batch_is_mapped(framework, path, override, key, flag):
    got, r = _speculation(framework, path, override.replace("FLAG", str(flag).lower()))
    assert got == {"speculative_method": "eagle", "num_speculative_tokens": 3,
                   "speculative_disable_padded_drafter_batch": flag}
    assert key in r.mapped and key not in r.unsupported


@pytest.mark.parametrize("value", ["'yes'", "1"])
def test_a_disable_padded_drafter_batch_not_a_flag_is_refused_by_its_key(value):
    with pytest.raises(RlsimError) as err:
        import_config("verl", VERL, [f"+{VLLM_SPEC}={{method: eagle, num_speculative_tokens: 3, "
                                     f"disable_padded_drafter_batch: {value}}}"])
    assert err.value.field == f"{VLLM_SPEC}.disable_padded_drafter_batch"
    assert "true or false" in err.value.fix
