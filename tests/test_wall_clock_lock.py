"""tests/conftest.py: under pytest-xdist a `wall_clock` test runs while no other test does, the
other tests still run side by side, and the run's lock folder goes with it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

TESTS = '''
import json, os, time
import pytest

def _record(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["INTERVALS"], "a") as log:
        log.write(json.dumps([name, start, time.monotonic()]) + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_side(i):
    _record(f"side{i}", 0.15)

@pytest.mark.wall_clock
def test_alone():
    _record("alone", 0.4)

@pytest.mark.parametrize("i", range(6, 12))
def test_more(i):
    _record(f"side{i}", 0.15)
'''


def test_a_wall_clock_test_overlaps_no_other_and_the_others_overlap(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_timed.py").write_text(TESTS)
    log = tmp_path / "intervals.jsonl"
    system_temp = tmp_path / "tmp"
    system_temp.mkdir()
    env = {**os.environ, "INTERVALS": str(log), "TMPDIR": str(system_temp)}
    env.pop("RLSIM_PYTEST_LOCK_DIR", None)   # the run's own, not this suite's
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "load", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    spans = {name: (start, end) for name, start, end in map(json.loads, log.read_text().splitlines())}
    assert len(spans) == 13
    alone = spans.pop("alone")
    assert all(end <= alone[0] or start >= alone[1] for start, end in spans.values()), (alone, spans)
    ordered = sorted(spans.values())
    assert any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:], strict=False)), ordered
    assert not list(system_temp.glob("rlsim-pytest-*"))   # the run's lock folder removed at its end
