"""The notebooks run clean from top to bottom (so they never rot); each carries its own checks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_two_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"what_if.ipynb", "capacity_planning.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_clean(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    # the kernel imports this checkout's package, not whichever one is installed (a copy of the tree
    # tested beside an editable install of another ran the other's code): checked in a first cell
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        f"import pathlib, simulator\nassert pathlib.Path(simulator.__file__).resolve().is_relative_to({str(ROOT)!r})"))
    client = nbclient.NotebookClient(nb, timeout=170, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any failing cell
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    images = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "the notebook should show its figures"
