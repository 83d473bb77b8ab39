"""Every subpackage must be listed in setup.cfg, or `pip install .` silently drops it."""
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = {line.strip() for line in cfg["options"]["packages"].splitlines() if line.strip()}
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "simulator").rglob("__init__.py")
    }
    assert found - listed == set(), f"add these to setup.cfg [options] packages: {sorted(found - listed)}"


# Import name -> the distribution that provides it, where they differ.
DISTRIBUTION_OF = {"yaml": "PyYAML", "distributed": "dask", "pydantic_core": "pydantic"}
# Imported only behind a guard that works without them: torch_npu (Ascend calibration, an RlsimError
# without it), pyarrow (read only where pandas already stores strings in it).
GUARDED = {"torch_npu", "pyarrow"}


def _requirement_names(block: str) -> set[str]:
    """Distribution names of a setup.cfg requirement list ('dask[distributed]>=2023.1' -> 'dask')."""
    import re

    return {re.split(r"[\[<>=!~ ;]", line.strip(), maxsplit=1)[0].lower()
            for line in block.splitlines() if line.strip()}


def test_every_third_party_import_is_a_declared_dependency():
    """A module the package imports that no requirement names arrives only by chance (scipy came with
    SALib, a test extra, so `rlsim calibrate --from-log` failed after a plain `pip install .`)."""
    import ast
    import sys

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    declared = _requirement_names(cfg["options"]["install_requires"])
    for block in cfg["options.extras_require"].values():
        declared |= _requirement_names(block)
    imported = set()
    for path in (ROOT / "simulator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported if name not in sys.stdlib_module_names and name != "simulator"}
    missing = {name for name in third_party - GUARDED if DISTRIBUTION_OF.get(name, name).lower() not in declared}
    assert not missing, f"declare these in setup.cfg install_requires (or an extra): {sorted(missing)}"
