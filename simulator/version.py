"""The package version (config layer, so any layer may read it; `simulator.__version__` re-exports it)."""
from __future__ import annotations

import hashlib
from pathlib import Path

__version__ = "0.1.0"  # keep equal to setup.cfg's `version`


def code_fingerprint() -> str:
    """A hash of the simulator's own source and built-in presets (every file of the package and of
    the preset folders, by relative path and bytes; byte-code caches left out). The version alone
    does not change when the code does (an editable install, a fix between releases), and a
    resumed sweep must not keep rows that other code computed."""
    from .presets import preset_dir

    package = Path(__file__).resolve().parent
    return tree_digest({"simulator": package, **{kind: preset_dir(kind) for kind in ("topologies", "workloads")}},
                       skip=("simulator/builtin/",))   # the installed preset folders, hashed under their labels


def tree_digest(roots: dict[str, Path], skip: tuple[str, ...] = ()) -> str:
    """sha256 (16 hex digits) of every file under each labelled root, by label/relative path and
    bytes, in sorted order; ``__pycache__`` folders and paths starting with a `skip` prefix left out."""
    digest = hashlib.sha256()
    for label, root in sorted(roots.items()):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            relative = f"{label}/{path.relative_to(root).as_posix()}"
            if not relative.startswith(skip):
                digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
