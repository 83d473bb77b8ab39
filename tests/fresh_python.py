"""Run a snippet in a fresh interpreter (what a process imports or builds from nothing) and read
the JSON it prints last."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def json_of_fresh_python(code: str, *args: str) -> Any:
    """``python -c code args...`` with this checkout on PYTHONPATH; the JSON of its last stdout line."""
    done = subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
