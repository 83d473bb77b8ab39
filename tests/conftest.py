"""Suite-wide settings.

The suite runs on pytest-xdist's workers (setup.cfg: ``-n logical``; ``-n 0`` runs it in one
process). Two things keep it honest there:
- hypothesis takes no per-example deadline: a worker beside another (or a noisy VM) slows an
  example past the default 200 ms without anything being wrong;
- a test marked ``wall_clock`` (it times the machine and judges the times) runs alone: while it
  runs no other worker runs a test, and a waiting one keeps new tests from starting (a gate), so
  it is not starved. One lock file per run, shared by the workers through the environment.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

try:
    import fcntl
except ImportError:          # no flock (Windows): the tests run side by side as they come
    fcntl = None

settings.register_profile("rlsim", deadline=None)
settings.load_profile("rlsim")

LOCK_DIR_ENV = "RLSIM_PYTEST_LOCK_DIR"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "wall_clock: times the machine; runs while no other test does")
    workers = getattr(config.option, "numprocesses", None)
    if fcntl is not None and workers and not hasattr(config, "workerinput"):
        # the controller, before it starts its workers (they inherit the environment)
        os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="rlsim-pytest-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and LOCK_DIR_ENV in os.environ:
        shutil.rmtree(os.environ.pop(LOCK_DIR_ENV), ignore_errors=True)


@contextmanager
def _turn(alone: bool, worker: bool) -> Iterator[None]:
    """A shared turn for a test; the only one for a wall-clock test (a readers-writer lock over
    the workers: the gate is taken to enter, and a wall-clock test keeps it until the others leave).
    Only on an xdist worker: a process that inherited the variable (a test's own subprocess) takes none."""
    where = os.environ.get(LOCK_DIR_ENV)
    if not worker or fcntl is None or not where or not Path(where).is_dir():
        yield
        return
    with open(Path(where) / "gate", "a+") as gate, open(Path(where) / "running", "a+") as running:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with _turn(item.get_closest_marker("wall_clock") is not None, hasattr(item.config, "workerinput")):
        yield
