"""Unit parsing at the YAML boundary. Inside the simulator everything is SI (s, B, FLOP, B/s)."""
from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from typing import Any

from .errors import RlsimError

_SIZE = {
    "": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
}
# Binary prefixes of byte and bit rates ('GiB/s'); the SI ones are _BIT_PREFIX's.
_BINARY_PREFIX = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
# SI prefixes of bit rates ('Gb/s') and compute rates ('TFLOPS').
_BIT_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_FLOP_PREFIX = {**_BIT_PREFIX, "p": 1e15}
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_NUM = r"([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?)"


# The fix of an unreadable quantity, by what it measures (a size's named a bandwidth and a time too)
_WRITE = {"size": "write a number of bytes with an optional unit, e.g. '80GB', '1GiB', '512MB'",
          "bandwidth": "write a number with an optional unit, e.g. '400Gb/s', '50GB/s'",
          "time": "write a number of seconds with an optional unit, e.g. '2us', '1.5ms', '3s'",
          "compute": "write a number with an optional unit, e.g. '989TFLOPS', '2PFLOPS'"}


# Words a number field may be given as text that read as a number nowhere in rlsim (a scenario refuses
# NaN and infinities): named as such, where a quoted number is told to drop its quotes.
NON_FINITE_WORDS = frozenset({"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", ".nan", ".inf",
                              "-.inf", "+.inf"})


def text_number_fix(text: str) -> str:
    """The fix for a number field given ``text``: a finite number where the text is NaN or an infinity,
    else the quotes to drop (a quoted number is text)."""
    if text.strip().lower() in NON_FINITE_WORDS:
        return "give a finite number (NaN and infinities are not accepted)"
    return "write the number without quotes"


def whole_number(value: Any) -> int | None:
    """``value`` as a Python int where it is written as a whole number: an int or a numpy integer
    (a notebook's np.arange, a DataFrame column's np.int64, which isinstance(v, int) refused as
    "not a whole number"); None for anything else, a bool (True is no count) and a float included."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":   # numpy's bool: no count either
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def plain_values(value: Any) -> Any:
    """``value`` with every numpy scalar and array inside its mappings and lists made the Python
    value it holds (np.int64(2) -> 2, np.float64(0.9) -> 0.9, an array -> its list): a scenario
    mapping built in a notebook runs as the same mapping written in YAML. New containers; the
    given ones are left as they were."""
    if isinstance(value, Mapping):
        return {key: plain_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(item) for item in value] if isinstance(value, list) \
            else tuple(plain_values(item) for item in value)
    if type(value).__module__ == "numpy" and callable(getattr(value, "tolist", None)):
        return value.tolist()   # a numpy scalar's Python value; an array's (nested) list of them
    return value


def _split(value: object, field: str, source: str | None, what: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise RlsimError(f"expected a quantity, got {value!r}", source=source, field=field, fix=_WRITE[what])
    if isinstance(value, (int, float)):
        return _finite(float(value), value, field, source, what), ""
    m = re.fullmatch(_NUM + r"\s*([A-Za-zµ/]*)", str(value).strip())
    if not m:
        raise RlsimError(f"cannot read {value!r} as a {what}", source=source, field=field, fix=_WRITE[what])
    return _finite(float(m.group(1)), value, field, source, what), m.group(2)


def is_unitless(value: object) -> bool:
    """A number given without a unit, read in SI base units: an int or float (not a bool), or text
    that is only a number (YAML's quoted '400'): the parsers read both alike, so the guards against
    a unit left out (a link of 400 B/s, a device of 80 bytes) must take both."""
    if isinstance(value, str):
        return re.fullmatch(_NUM, value.strip()) is not None
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(number: float, value: object, field: str, source: str | None, what: str) -> float:
    """A quantity is a finite number (.inf or .nan in a link or a device ran into division by zero
    and NaN figures); a scaled one too (1e308 TB/s overflows)."""
    if not math.isfinite(number):
        raise RlsimError(f"expected a finite quantity, got {value!r}", source=source, field=field, fix=_WRITE[what])
    return number


def _scaled(value: object, field: str, source: str | None, table: dict[str, float], key: str,
            what: str, fix: str) -> float:
    """value's number times table[key(unit)], or an RlsimError naming the unit and the fix."""
    number, unit = _split(value, field, source, what)
    factor = table.get(key(unit))
    if factor is None:
        raise RlsimError(f"unknown {what} unit {unit!r} in {value!r}", source=source, field=field, fix=fix)
    return _finite(number * factor, value, field, source, what)


def parse_bytes(value: object, field: str = "size", source: str | None = None) -> float:
    """'80GB' -> 8e10, '1GiB' -> 2**30; a bare number is bytes. An upper-case prefix with a lower-case
    b ('1Gb') is bits by the networking convention the bandwidths follow ('400Gb/s'): refused, not
    read as bytes (8x the size)."""
    if isinstance(value, str) and re.fullmatch(r"\s*[-+0-9.eE]+\s*[KMGTP]i?b\s*", value):
        raise RlsimError(f"{value!r} is in bits (a lower-case b after an upper-case prefix, as in 400Gb/s); a size "
                         "is in bytes", source=source, field=field, fix="write B for bytes, e.g. 1GB or 1GiB")
    return _scaled(value, field, source, _SIZE, str.lower, "size", "use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB")


def parse_bandwidth(value: object, field: str = "bandwidth", source: str | None = None) -> float:
    """'392GB/s' -> bytes/s; '400Gb/s' or '400Gbps' -> bits/8; a bare number is bytes/s."""
    return _finite(_bandwidth(value, field, source), value, field, source, "bandwidth")


def _bandwidth(value: object, field: str, source: str | None) -> float:
    number, unit = _split(value, field, source, "bandwidth")
    if unit == "":
        return number
    # Case matters for b (bit) versus B (byte), and only there: 'Gb/s' and 'Gbps' are bits (the
    # networking convention), 'GB/s' and 'GBps' bytes (a lower-cased lookup read 'GBps' as bits: 8x slow)
    for suffix in ("/s", "ps"):
        head = unit.removesuffix(suffix)
        if head != unit and head[-1:] in ("b", "B"):
            prefix = head[:-1].lower()
            scale = _BIT_PREFIX.get(prefix, _BINARY_PREFIX.get(prefix))
            if scale is not None:
                return number * scale / (8 if head[-1] == "b" else 1)
    raise RlsimError(f"unknown bandwidth unit {unit!r} in {value!r}", source=source, field=field,
                     fix="use GB/s or GBps (bytes), Gb/s or Gbps (bits)")


def parse_seconds(value: object, field: str = "time", source: str | None = None) -> float:
    """'2us' -> 2e-6; a bare number is seconds."""
    return _scaled(value, field, source, _TIME, str, "time", "use s, ms, us or ns")


def parse_flops(value: object, field: str = "flops", source: str | None = None) -> float:
    """'989TFLOPS' or '989T' -> 9.89e14 FLOP/s; a bare number is FLOP/s."""
    return _scaled(value, field, source, _FLOP_PREFIX,
                   lambda unit: unit.lower().removesuffix("/s").removesuffix("flops").removesuffix("ops"),
                   "compute", "use TFLOPS, PFLOPS or a plain number of FLOP/s")


def capacity_text(nbytes: float) -> str:
    """A device's memory capacity for messages: SI GB as every other figure, and the binary GiB the
    catalog stores (a datasheet's "80 GB" H100 holds 80 GiB as its driver reports it: 85.9 GB)."""
    return f"{nbytes / 1e9:.1f} GB ({nbytes / 2 ** 30:.4g} GiB)"
