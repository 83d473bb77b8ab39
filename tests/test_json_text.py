"""json_text: --json and a run's summary.json write the same strict JSON (a non-finite figure as null)."""
import json
import math

import numpy as np

from simulator.json_text import json_text


def test_non_finite_figures_are_null_and_numpy_values_are_plain():
    # summary.json took json.dumps(default=float): an infinite roofline was written as Infinity,
    # which no strict JSON reader takes, while --json wrote null (a report audit)
    doc = {"roofline_tokens_per_s": math.inf, "nan": [1.0, math.nan], "count": np.int64(3),
           "share": np.float64(0.5), "bad": np.float64(np.inf), "array": np.array([1.0, np.nan])}
    text = json_text(doc, indent=2, sort_keys=False)
    assert json.loads(text) == {"roofline_tokens_per_s": None, "nan": [1.0, None], "count": 3, "share": 0.5,
                                "bad": None, "array": [1.0, None]}
    assert "Infinity" not in text and "NaN" not in text
