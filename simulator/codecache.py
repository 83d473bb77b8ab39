"""Byte code of the text that `dataclasses` and `typing` compile, kept between runs of the command line.

A dataclass's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` (a frozen one's ``__setattr__``
and ``__delattr__`` too) are Python source that the ``dataclasses`` module writes and compiles with
``exec`` each time a class is made, and ``typing.ForwardRef`` compiles each string annotation (625
of them in pydantic_core's schema types alone). For `rlsim run` that is ~490 methods and ~800
annotations, 22% of the instructions of its start-up (benchmarks/bench_startup.py --instructions).
The same text always compiles to the same code object, so the command line's start-up
(cli._start_up) keeps them as a ``.pyc`` keeps a module's: a table of (filename, mode, source text)
-> marshalled code, beside the package's byte code. Within ``generated_code_cached()`` the
``dataclasses`` module's ``exec`` and the ``typing`` module's ``compile`` look the text up there
(compiling it as Python does, and noting it, when it is new) and use the code found: the same
functions, attribute for attribute (tests/test_codecache.py). The table is written back when a
text was new, unless byte code is not written (``-B``, PYTHONDONTWRITEBYTECODE) or the folder is
read-only. Outside ``generated_code_cached()`` nothing changes: users of the API and the sweep's
worker processes compile as Python does.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path

# where the table lives: beside the simulator package's own byte code (honours sys.pycache_prefix),
# one per interpreter, byte-code magic number (a .pyc's header check: micro releases may change the
# byte code under one cache tag) and optimization level (-O), as the .pyc files are
CACHE_NAME = (f"generated-code.{sys.implementation.cache_tag}.{importlib.util.MAGIC_NUMBER.hex()}"
              f"{f'.opt-{sys.flags.optimize}' if sys.flags.optimize else ''}.marshal")
_BYTE_CODE_MODE = 0o644   # as the .pyc files beside it (mkstemp makes 0o600)


def cache_path() -> Path:
    return Path(importlib.util.cache_from_source(str(Path(__file__).with_name("__init__.py")))).with_name(CACHE_NAME)


Key = tuple[str, str, str]   # (filename, mode, source) as given to compile


def read_table(path: Path) -> dict[Key, bytes]:
    """The table in `path` (each code object marshalled on its own, loaded when asked for); empty
    when the file is missing, unreadable or not such a table."""
    try:
        table = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(table, dict) or not all(
            isinstance(k, tuple) and len(k) == 3 and all(isinstance(part, str) for part in k)
            and isinstance(v, bytes) for k, v in table.items()):
        return {}
    return table


def write_table(path: Path, table: dict[Key, bytes]) -> None:
    """Write `table` to `path` whole or not at all (a temporary file renamed over it: processes
    starting together each find a complete table); nothing where the folder cannot be written."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(marshal.dumps(table))
        os.chmod(tmp, _BYTE_CODE_MODE)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


# The table keeps the texts of earlier start-ups too (`rlsim presets` and `rlsim run` make different
# classes), up to this many; past it, only the texts of the start-up that writes it (code edits leave
# texts no start-up asks for any more).
MAX_ENTRIES = 4000


class _Compiled:
    """The code of each (filename, mode, source) compiled in this start-up: from `table` where it is
    there, else compiled as Python compiles it and counted in ``compiled``."""

    def __init__(self, table: dict[Key, bytes]) -> None:
        self.table = table
        self.used: dict[Key, bytes] = {}
        self.compiled = 0

    def code(self, source: str, filename: str, mode: str) -> types.CodeType:
        key = (filename, mode, source)
        entry = self.used.get(key) or self.table.get(key)   # a text met twice (`int`) compiles once
        code = _loaded(entry) if entry is not None else None
        if code is None:
            # as exec(text) / compile(text, ...) in dataclasses.py and typing.py: no future flags to inherit
            code = compile(source, filename, mode, dont_inherit=True)
            entry = marshal.dumps(code)
            self.compiled += 1
        self.used[key] = entry
        return code

    def to_write(self) -> dict[Key, bytes]:
        """The table to write back: the earlier entries and this start-up's, or this start-up's alone
        past MAX_ENTRIES."""
        merged = {**self.table, **self.used}
        return merged if len(merged) <= MAX_ENTRIES else dict(self.used)

    def exec(self, source: object, globals: dict | None = None, locals: dict | None = None) -> None:
        """``exec`` for the dataclasses module: a text's code from the table, anything else as given."""
        if isinstance(source, str):
            source = self.code(source, "<string>", "exec")
        if globals is None:   # exec's defaults: the caller's namespaces (not this module's)
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        return builtins.exec(source, globals, locals)

    def compile(self, source: object, filename: str, mode: str, flags: int = 0, dont_inherit: bool = False,
                optimize: int = -1) -> types.CodeType:
        """``compile`` for the typing module (ForwardRef: a string annotation compiled to evaluate)."""
        if isinstance(source, str) and flags == 0 and optimize == -1:
            return self.code(source, filename, mode)
        return builtins.compile(source, filename, mode, flags, dont_inherit, optimize)


# module -> the builtin it calls to compile generated or annotation text, found as a module global
_HOOKS = ((dataclasses, "exec"), (typing, "compile"))


@contextlib.contextmanager
def generated_code_cached(path: Path | None = None) -> Iterator[_Compiled]:
    """Within: the dataclasses module's ``exec`` and the typing module's ``compile`` take their code
    from the table at `path` (default cache_path()); after: their builtins back, and the table
    written if a text was new. A module that already has a global of that name (someone else's
    hook) is left alone. Yields the table in use (its ``compiled`` counts the new texts)."""
    path = cache_path() if path is None else path
    compiled = _Compiled(read_table(path))
    hooked = [(module, name) for module, name in _HOOKS if name not in vars(module)]
    for module, name in hooked:
        setattr(module, name, getattr(compiled, name))   # found before the builtin by the module's own calls
    try:
        yield compiled
    finally:
        for module, name in hooked:
            delattr(module, name)
        if compiled.compiled and not sys.dont_write_bytecode:
            write_table(path, compiled.to_write())


def _loaded(entry: bytes) -> types.CodeType | None:
    """The code object marshalled in `entry`; None where it is not one (a damaged entry: compiled anew)."""
    try:
        code = marshal.loads(entry)
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None
