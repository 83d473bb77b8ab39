"""Direct tests of simulator/units.py: SI values from YAML quantities, and errors that say the fix."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.units import parse_bandwidth, parse_bytes, parse_flops, parse_seconds


@pytest.mark.parametrize(("text", "expected"), [
    ("80GB", 80e9), ("1GiB", 2**30), ("512 MiB", 512 * 2**20), ("1.5TB", 1.5e12), ("2k", 2e3),
    ("1048576", 1048576.0), (4096, 4096.0), ("1e3B", 1e3), (".5KiB", 512.0), ("3pib", 3 * 2**50),
])
def test_parse_bytes(text: object, expected: float) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("392GB/s", 392e9), ("400Gb/s", 50e9), ("400Gbps", 50e9), ("100 Mb/s", 12.5e6), ("1GiB/s", 2**30),
    ("8b/s", 1.0), ("25e9", 25e9), (1.0e9, 1.0e9), ("1 kbps", 125.0),
    # 'GBps' is bytes (a lower-cased lookup read it as bits: 8x slow, found by a network audit); binary
    # bit rates are bits
    ("50GBps", 50e9), ("3Bps", 3.0), ("1Gib/s", 2**30 / 8), ("2MiBps", 2 * 2**20),
])
def test_parse_bandwidth_bits_versus_bytes(text: object, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("text", "expected"), [
    ("2us", 2e-6), ("2µs", 2e-6), ("1.5ms", 1.5e-3), ("10ns", 1e-8), ("3s", 3.0), ("2min", 120.0),
    ("1h", 3600.0), (0.25, 0.25), ("7", 7.0),
])
def test_parse_seconds(text: object, expected: float) -> None:
    assert parse_seconds(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("text", "expected"), [
    ("989TFLOPS", 989e12), ("989T", 989e12), ("1.2PFLOPS", 1.2e15), ("312 TFLOPS/s", 312e12), ("3pflops", 3e15),
    ("5GOPS", 5e9), ("1e15", 1e15), (2e12, 2e12),
])
def test_parse_flops(text: object, expected: float) -> None:
    assert parse_flops(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("fn", "text"), [
    (parse_bytes, "80 parsecs"), (parse_bytes, "GB"), (parse_bytes, True), (parse_bandwidth, "400GB"),
    (parse_bandwidth, "400 furlongs/s"), (parse_seconds, "2 fortnights"), (parse_seconds, "2MS"),
    (parse_flops, "10 TB"), (parse_bytes, "1..2GB"),
    (parse_bytes, "1Gb"), (parse_bytes, "8 Mb"), (parse_bytes, "2Kib"),   # bits (as 400Gb/s), read as bytes before
])
def test_bad_quantities_raise_rlsim_error_with_field(fn, text: object) -> None:
    with pytest.raises(RlsimError) as info:
        fn(text, field="topology.links.bw", source="my.yaml")
    err = info.value
    assert err.field == "topology.links.bw" and err.source == "my.yaml"
    assert err.fix or isinstance(text, bool)


def test_a_bool_is_not_a_quantity() -> None:
    with pytest.raises(RlsimError, match="expected a quantity"):
        parse_seconds(False)


numbers = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)

_SIZES = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
          "TiB": 2**40}
_BYTE_RATES = {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "GiB/s": 2**30}
_BIT_RATES = {"b/s": 1 / 8, "kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
              "Gbps": 1e9 / 8, "Mbps": 1e6 / 8}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}


def _text(x: float) -> str:
    return repr(float(x))  # the shortest string that reads back as x


@given(numbers, st.sampled_from(sorted(_SIZES)), st.sampled_from(["", " "]))
def test_bytes_round_trip(x: float, unit: str, space: str) -> None:
    assert parse_bytes(f"{_text(x)}{space}{unit}") == x * _SIZES[unit]
    assert parse_bytes(f"{_text(x)}{unit.lower()}") == x * _SIZES[unit]  # size units ignore case
    assert parse_bytes(parse_bytes(f"{_text(x)}{unit}")) == x * _SIZES[unit]  # SI in, SI out


@given(numbers, st.sampled_from(sorted({**_BYTE_RATES, **_BIT_RATES})))
def test_bandwidth_round_trip(x: float, unit: str) -> None:
    factor = {**_BYTE_RATES, **_BIT_RATES}[unit]
    assert parse_bandwidth(f"{_text(x)}{unit}") == pytest.approx(x * factor, rel=1e-15, abs=0)
    value = parse_bandwidth(f"{_text(x)}{unit}")
    assert parse_bandwidth(value) == value


@given(numbers, st.sampled_from(sorted(_TIMES)))
def test_seconds_round_trip(x: float, unit: str) -> None:
    assert parse_seconds(f"{_text(x)}{unit}") == x * _TIMES[unit]


@given(numbers)
def test_bits_are_an_eighth_of_bytes(x: float) -> None:
    assert parse_bandwidth(f"{_text(x)}Gb/s") * 8 == pytest.approx(parse_bandwidth(f"{_text(x)}GB/s"), rel=1e-15)


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**12, 10**12))
def test_bare_numbers_are_si(x: float) -> None:
    for fn in (parse_bytes, parse_bandwidth, parse_seconds, parse_flops):
        assert fn(x) == float(x)


@given(st.text(alphabet="xyzqwXQ#%", min_size=1, max_size=5))
def test_junk_is_refused(junk: str) -> None:
    for fn in (parse_bytes, parse_bandwidth, parse_seconds, parse_flops):
        with pytest.raises(RlsimError):
            fn(f"12{junk}")
    assert math.isfinite(parse_bytes("12"))


@pytest.mark.parametrize("parse, value", [(parse_bandwidth, float("inf")), (parse_bandwidth, float("nan")),
                                          (parse_seconds, float("nan")), (parse_flops, "1e400"),
                                          (parse_bytes, "1e308TB"), (parse_bandwidth, "1e308TB/s")])
def test_a_quantity_is_finite(parse, value):
    # .inf / .nan in a topology's links, a device or the collectives ran into division by zero and NaN
    # figures (found by fuzzing)
    with pytest.raises(RlsimError, match="finite"):
        parse(value, "field")


@pytest.mark.parametrize(("parse", "shown", "foreign"), [
    (parse_bytes, "'80GB'", "Gb/s"), (parse_seconds, "'1.5ms'", "GB"), (parse_bandwidth, "'50GB/s'", "us'")])
def test_an_unreadable_quantity_is_fixed_with_examples_of_its_own_kind(parse, shown, foreign):
    """`rlsim comm --bytes abc` suggested '400Gb/s' and '2us' for a size (a new-user trial)."""
    with pytest.raises(RlsimError) as caught:
        parse("abc", "--x")
    assert shown in caught.value.fix and foreign not in caught.value.fix


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", ".inf", "Infinity"])
def test_a_non_finite_word_given_as_a_number_is_told_to_give_a_finite_one(text):
    """YAML reads `nan` / `inf` as text: the fix is a finite number, not "without quotes" (none were written)."""
    from simulator.hardware.devices import device_from_mapping
    from simulator.units import text_number_fix

    assert "finite number" in text_number_fix(text)
    assert text_number_fix("0.7") == "write the number without quotes"
    with pytest.raises(RlsimError, match="finite number"):
        device_from_mapping({"base": "h100", "gemm_efficiency": text}, field_name="topology.device")
