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
