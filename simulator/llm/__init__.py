"""Models, length distributions, the rollout engine (and the training step, in training.py)."""
from .architecture import ModelSpec, load_model, model_names
from .inference import (
    InferenceParams,
    RolloutEngine,
    RolloutLayout,
    RolloutResult,
    decode_step_time_s,
    decode_tokens_per_s,
    prefill_tokens_per_s,
    simulate_rollout,
)
from .lengths import LengthDistribution

__all__ = [
    "InferenceParams", "LengthDistribution", "ModelSpec", "RolloutEngine", "RolloutLayout", "RolloutResult",
    "decode_step_time_s", "decode_tokens_per_s", "load_model", "model_names", "prefill_tokens_per_s",
    "simulate_rollout",
]
