"""Writing a file whole or not at all: a write cut short (a kill, a full disk) leaves the file as it
was, never a truncated one that reads as valid (a device profile whose every field may be absent
loads from any prefix of itself)."""
from __future__ import annotations

import os
from pathlib import Path


def replace_durably(tmp: Path, dest: Path) -> None:
    """Make ``tmp`` durable, then put it in place of ``dest`` in one step."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, dest)


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it (same folder: one file system)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding=encoding)
        replace_durably(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
