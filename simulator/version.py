"""The package version (config layer, so any layer may read it; `simulator.__version__` re-exports it)."""
from __future__ import annotations

__version__ = "0.1.0"  # keep equal to setup.cfg's `version`
