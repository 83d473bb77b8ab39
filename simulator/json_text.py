"""JSON text of rlsim's documents: a non-finite float (no JSON number: `inf` where a figure has no
bound) is written as null, numpy scalars and arrays as their values. `--json` and the summary.json
a run writes use the same text, so the two stay byte for byte alike."""
from __future__ import annotations

import json
import math
from typing import Any


def json_text(document: Any, **dumps: Any) -> str:
    """``json.dumps`` of ``document`` with non-finite floats as null (allow_nan off: strict JSON)."""
    return json.dumps(finite(document), allow_nan=False, default=_jsonable, **dumps)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):   # numpy arrays and scalars (a scalar's tolist is its value)
        return finite(value.tolist())
    if hasattr(value, "item"):
        return finite(value.item())
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
