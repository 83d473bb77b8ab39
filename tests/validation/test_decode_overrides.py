"""V3 / V5 take the engine constants a single step's price reads, and only those (issue 12 audit:
the engine loop's keys were taken and read past)."""
from __future__ import annotations

import pytest

from simulator.params import InferenceParams
from simulator.validation import decode


def _fields_read(predict) -> set[str]:
    """The InferenceParams fields read while `predict` runs (with one engine key given, so the cases
    build their own InferenceParams)."""
    fields, seen = set(InferenceParams.model_fields), set()
    original = InferenceParams.__getattribute__

    def spy(self, name):
        if name in fields:
            seen.add(name)
        return original(self, name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InferenceParams, "__getattribute__", spy)
        predict(("workload.inference.step_overhead_s=0.004",))
    return seen


# The switch of a step these cases do not price: a speculative step (the published decode steps run
# without speculation). StepCost reads it to find it off; the cases refuse the speculative keys (tested).
_OFF_SWITCHES = {"speculative_method"}


def test_the_keys_each_case_takes_are_the_fields_its_step_price_reads():
    expert = (_fields_read(lambda o: decode._r1_decode(True, o)) | _fields_read(decode._r1_prefill)) - _OFF_SWITCHES
    dense = _fields_read(lambda o: decode._llama_decode(8, o)) - _OFF_SWITCHES
    assert dense == set(decode.STEP_KEYS)
    assert expert == set(decode.STEP_KEYS) | set(decode.EXPERT_PARALLEL_KEYS)


def test_the_speculative_keys_are_refused_by_the_decode_cases(capsys):
    from simulator.cli import main

    for case in ("V3", "V5"):
        assert main(["validate", "--case", case, "--set", "workload.inference.speculative_method=eagle"]) == 2
        err = capsys.readouterr().err
        assert "field 'workload.inference.speculative_method'" in err and "do not take" in err


@pytest.mark.parametrize("argv, field", [
    (["--case", "V5", "--set", "workload.inference.enable_prefix_caching=false"], "workload.inference.enable_prefix_caching"),
    (["--case", "V3", "--set", "workload.inference.max_num_batched_tokens=4096"], "workload.inference.max_num_batched_tokens"),
    (["--case", "V5", "--set", "workload.inference.dispatch_bytes=1"], "workload.inference.dispatch_bytes"),   # dense
])
def test_an_engine_loop_key_is_refused_naming_it(capsys, argv, field):
    from simulator.cli import main

    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert f"field '{field}'" in err and "taken by V" in err and "V6" in err   # where the key goes instead


@pytest.mark.parametrize("key", ["fallback_step_latency_s", "fallback_collective_efficiency"])
def test_a_fallback_constant_is_taken_by_the_decode_cases_only(capsys, key):
    # V6's scenarios refuse these at any value (a run prices collectives on its links): the hint
    # names V3 (V5 runs one GPU: no collective), and V6 refuses them up front instead of failing every row
    from simulator.cli import main

    field = f"workload.inference.{key}"
    assert main(["validate", "--case", "V1", "--set", f"{field}=0.5"]) == 2
    err = capsys.readouterr().err
    assert "taken by V3)" in err and "V6" not in err
    assert main(["validate", "--case", "V6", "--set", f"{field}=0.5"]) == 2
    err = capsys.readouterr().err
    assert "do not take" in err and "V6 nemo-rl" in err


def test_a_step_key_still_moves_the_cases(capsys):
    from simulator.cli import main

    assert main(["validate", "--case", "V3", "--set", "workload.inference.dispatch_bytes=1", "--json"]) in (0, 1)
    assert main(["validate", "--case", "V5", "--set", "workload.inference.step_overhead_s=0.01", "--json"]) in (0, 1)
    capsys.readouterr()
    assert decode._llama_decode(1, ("workload.inference.step_overhead_s=0.01",)) < decode._llama_decode(1)
