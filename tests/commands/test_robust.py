"""Command-line robustness (issue 14, items 3 and 9): a closed stdout (`| head -1`) exits 0,
`validate --strict` exits 3 on a miss, `plan --target-tokens-per-s` states its answer, and output
paths are checked before any work."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _closed_stdout(*args: str) -> subprocess.CompletedProcess:
    """Run rlsim with stdout a pipe whose reader has already gone (as `| head -0` leaves it)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "simulator", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=ENV, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ["sweep", "--grid", "schedule.kind=colocated,stalesync", "--iterations", "1", "--jobs", "1"],
    ["sweep", "--grid", "seed=1", "--iterations", "1", "--jobs", "1", "--json"],
    ["presets"], ["--help"], ["sweep", "--help"],
], ids=["sweep-table", "sweep-json", "presets", "help", "sweep-help"])
def test_a_closed_stdout_exits_0_without_a_traceback(args):
    done = _closed_stdout(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_head_1_of_a_sweep_exits_0():
    cmd = (f"{sys.executable} -m simulator sweep --grid schedule.kind=colocated,stalesync --iterations 1 "
           "--jobs 1 | head -1; exit ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- validate --strict

class _Result:
    def __init__(self, case: str, ok: bool) -> None:
        self.case, self.ok, self.failure = case, ok, ""
        self.metric, self.predicted, self.published = "step", 1.0, 1.0 if ok else 2.0
        self.error, self.criterion = 0.0 if ok else -0.5, "tol 10%"

    def as_dict(self) -> dict:
        return {"case": self.case, "within_tolerance": self.ok}


@pytest.mark.parametrize("oks, strict, code", [([True, True], True, 0), ([True, False], True, 3),
                                               ([True, False], False, 0)])
def test_validate_strict_exits_3_when_a_case_misses(monkeypatch, capsys, oks, strict, code):
    import simulator.validation as validation
    monkeypatch.setattr(validation, "run_cases",
                        lambda case=None, progress=None, overrides=(): [_Result(f"c{i}", ok) for i, ok in enumerate(oks)])
    args = ["validate", "--json"] + (["--strict"] if strict else [])
    assert main(args) == code
    captured = capsys.readouterr()
    if code == 3:
        assert "c1" in captured.err and "outside tolerance" in captured.err


def test_validate_help_documents_the_strict_exit_code(capsys):
    assert main(["validate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--strict" in out and "3" in out


# --------------------------------------------------------------------------- plan states its answer

def test_plan_target_states_the_answer_in_one_line(capsys):
    assert main(["plan", "--topology", "dgx-h100", "--model", "qwen2.5-7b", "--global-batch", "64",
                 "--seq-len", "2048", "--target-tokens-per-s", "20000", "--top", "1"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("answer:")]
    assert len(lines) == 1 and "devices reach 20,000 training tokens/s" in lines[0]
    # the training stage alone, said (a capacity trial read it as the RL loop's answer: 4-6x apart)
    assert "rlsim sweep --target-tokens-per-s" in lines[0]


# --------------------------------------------------------------------------- output paths

@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "afile"
    path.write_text("x")
    return path


@pytest.mark.parametrize("command", [["run", "--iterations", "1"], ["compare", "--iterations", "1"],
                                     ["sweep", "--grid", "seed=1", "--iterations", "1"]])
def test_out_under_a_file_is_refused_before_the_work(command, a_file, capsys, monkeypatch):
    import simulator.api
    monkeypatch.setattr(simulator.api, "simulate", lambda *a, **k: pytest.fail("simulated before the check"))
    assert main([*command, "--out", str(a_file / "sub")]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "--out" in err and "Traceback" not in err


def test_calibrate_out_a_folder_is_refused_before_measuring(tmp_path, capsys):
    assert main(["calibrate", "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and "--out" in err


def test_calibrate_out_under_a_file_is_refused(a_file, capsys):
    assert main(["calibrate", "--device", "cpu", "--out", str(a_file / "p.yaml")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_out_in_a_read_only_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["run", "--iterations", "1", "--out", str(locked / "r")]) == 2
        assert "no permission" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


def test_out_where_no_file_can_be_made_is_refused_even_for_root(tmp_path, monkeypatch, capsys):
    # os.access says yes to root and knows nothing of read-only or special filesystems (/sys,
    # /proc): a PermissionError traceback after the run before; here a filesystem that refuses files
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    assert main(["run", "--iterations", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "Read-only file system" in err and "--out" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["run"], ["calibrate", "--device", "cpu"]])
def test_an_empty_out_is_refused(command, capsys):
    # --out "" wrote the outputs into the working folder
    assert main([*command, "--out", ""]) == 2
    assert "an empty path" in capsys.readouterr().err


def test_an_output_the_filesystem_refuses_is_an_error_not_a_traceback(tmp_path, capsys):
    # a folder where summary.json goes: IsADirectoryError after the run before
    (tmp_path / "od" / "summary.json").mkdir(parents=True)
    assert main(["run", "--iterations", "1", "--out", str(tmp_path / "od")]) == 2
    err = capsys.readouterr().err
    assert "summary.json: Is a directory" in err and "Traceback" not in err


def test_a_reused_out_folder_names_the_files_this_run_did_not_write(tmp_path, capsys):
    # a --seeds run's summary.json beside the earlier plain run's report, CSVs and trace, without a word
    out = str(tmp_path / "mx")
    assert main(["run", "--iterations", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main(["run", "--iterations", "1", "--out", out]) == 0        # the same files again: nothing said
    assert "earlier run" not in capsys.readouterr().err
    assert main(["run", "--iterations", "1", "--seeds", "2", "--out", out]) == 0
    err = capsys.readouterr().err
    assert "file(s) of an earlier run that this one did not write" in err and "report.html" in err
