"""The table of generated code (simulator/codecache.py): the functions made with it are the ones
Python makes, a second start-up compiles nothing, and a damaged or unwritable table only costs time."""
import dataclasses
import marshal
import sys
import types
import typing

import pytest

from simulator import codecache
from simulator.codecache import generated_code_cached, read_table

# dataclasses of the kinds the simulator declares: frozen, plain, defaults, factories, slots,
# keyword-only fields, inheritance, an InitVar and a ClassVar, string annotations
SOURCE = '''
from __future__ import annotations
import dataclasses
from dataclasses import InitVar, field
from typing import ClassVar

@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: float = 1.5
    c: tuple[str, ...] = ("x",)
    LIMIT: ClassVar[int] = 3

@dataclasses.dataclass
class Plain:
    """documented"""
    items: list[int] = field(default_factory=list)
    scale: InitVar[float] = 1.0
    total: float = field(init=False, default=0.0)

    def __post_init__(self, scale):
        self.total = scale * sum(self.items)

@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Slotted:
    name: str
    size: int = 0

@dataclasses.dataclass(frozen=True)
class Child(Frozen):
    d: str = "d"

@dataclasses.dataclass(order=True, unsafe_hash=True)
class Ordered:
    x: int
'''
ANNOTATIONS = ["list[int]", "dict[str, 'Frozen']", "int | None"]


@pytest.fixture(autouse=True)
def _byte_code_written(monkeypatch):
    """As an interpreter without -B / PYTHONDONTWRITEBYTECODE (which the test run may have)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def _make() -> dict:
    module = types.ModuleType("madeclasses")   # dataclasses reads string annotations in the class's module
    sys.modules[module.__name__] = module
    try:
        exec(compile(SOURCE, "<made>", "exec"), vars(module))
    finally:
        del sys.modules[module.__name__]
    return {**vars(module), "refs": [typing.ForwardRef(text) for text in ANNOTATIONS]}


def _methods(namespace: dict) -> dict:
    out = {}
    for name in ("Frozen", "Plain", "Slotted", "Child", "Ordered"):
        for attr, value in vars(namespace[name]).items():
            if callable(value) and hasattr(value, "__code__"):
                out[name, attr] = value
    return out


def _same_function(f, g) -> bool:
    return (f.__code__ == g.__code__ and f.__defaults__ == g.__defaults__ and f.__kwdefaults__ == g.__kwdefaults__
            and f.__annotations__ == g.__annotations__ and f.__qualname__ == g.__qualname__
            and f.__name__ == g.__name__)


def test_the_functions_and_annotations_made_with_the_table_are_the_ones_python_makes(tmp_path):
    path = tmp_path / "table.marshal"
    plain = _make()
    with generated_code_cached(path) as first:
        compiled = _make()
    with generated_code_cached(path) as second:
        loaded = _make()
    assert first.compiled >= 20 and second.compiled == 0 and path.exists()
    want = _methods(plain)
    assert len(want) >= 20
    for made in (compiled, loaded):
        got = _methods(made)
        assert got.keys() == want.keys()
        assert all(_same_function(got[k], want[k]) for k in want)
        assert [r.__forward_code__ for r in made["refs"]] == [r.__forward_code__ for r in plain["refs"]]
    # and they behave so: repr, equality, hash, the frozen error, order
    Frozen, Slotted, Plain = loaded["Frozen"], loaded["Slotted"], loaded["Plain"]
    assert repr(Frozen(1)) == "Frozen(a=1, b=1.5, c=('x',))" and Frozen(1) == Frozen(1)
    assert hash(Frozen(2)) == hash(plain["Frozen"](2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Slotted(name="n").size = 3
    assert Plain([1, 2], 2.0).total == 6.0 and loaded["Ordered"](1) < loaded["Ordered"](2)


def test_the_hooks_are_gone_after_even_on_an_error(tmp_path):
    with pytest.raises(RuntimeError), generated_code_cached(tmp_path / "t"):
        assert "exec" in vars(dataclasses) and "compile" in vars(typing)
        raise RuntimeError
    assert "exec" not in vars(dataclasses) and "compile" not in vars(typing)


def test_a_hook_someone_else_installed_is_left_alone(tmp_path, monkeypatch):
    theirs = lambda *args: exec(*args)   # noqa: E731
    monkeypatch.setattr(dataclasses, "exec", theirs, raising=False)
    with generated_code_cached(tmp_path / "t"):
        assert dataclasses.exec is theirs and "compile" in vars(typing)
    assert dataclasses.exec is theirs


@pytest.mark.parametrize("content", [b"", b"not marshal", marshal.dumps([1, 2]), marshal.dumps({"a": b"x"}),
                                     marshal.dumps({("<string>", "exec", "x = 1"): "code as text"})])
def test_a_damaged_table_reads_as_empty(tmp_path, content):
    path = tmp_path / "t"
    path.write_bytes(content)
    assert read_table(path) == {}
    with generated_code_cached(path) as table:
        made = _make()
    assert table.compiled > 0 and _methods(made).keys() == _methods(_make()).keys()
    assert read_table(path)   # written anew


def test_a_damaged_entry_is_compiled_anew(tmp_path):
    path = tmp_path / "t"
    with generated_code_cached(path):
        _make()
    table = read_table(path)
    key = next(iter(table))
    path.write_bytes(marshal.dumps({**table, key: b"\x00broken"}))
    with generated_code_cached(path) as again:
        _make()
    assert again.compiled == 1


def test_nothing_is_written_without_byte_code_or_where_the_folder_cannot_be(tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(sys, "dont_write_bytecode", True)
        with generated_code_cached(tmp_path / "t") as table:
            _make()
    assert table.compiled > 0 and not (tmp_path / "t").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with generated_code_cached(blocker / "t"):   # a folder that cannot exist: no error, no table
        _make()
    assert not (blocker / "t").exists() and list(tmp_path.iterdir()) == [blocker]


def test_the_table_keeps_earlier_entries_up_to_its_bound(tmp_path, monkeypatch):
    path = tmp_path / "t"
    with generated_code_cached(path):
        exec("import dataclasses\n@dataclasses.dataclass\nclass One:\n    a: int\n", {})
    first = set(read_table(path))
    with generated_code_cached(path):
        _make()
    assert first < set(read_table(path))            # merged: both start-ups' texts
    monkeypatch.setattr(codecache, "MAX_ENTRIES", len(first))
    with generated_code_cached(path) as table:
        exec("import dataclasses\n@dataclasses.dataclass\nclass Two:\n    b: int\n", {})
    assert set(read_table(path)) == set(table.used)  # past the bound: this start-up's alone


def test_the_table_lives_beside_the_package_byte_code():
    import importlib.util
    from pathlib import Path
    init = Path(codecache.__file__).with_name("__init__.py")
    assert codecache.cache_path().parent == Path(importlib.util.cache_from_source(str(init))).parent
    assert sys.implementation.cache_tag in codecache.cache_path().name



def _exec_here(executor) -> tuple:
    executor("found = __name__")   # no namespaces: the caller's globals and locals
    return locals().get("found"), "found" in globals()


def test_exec_without_namespaces_runs_in_the_callers_as_the_builtin_does(tmp_path):
    import builtins
    with generated_code_cached(tmp_path / "t") as table:
        assert _exec_here(table.exec) == _exec_here(builtins.exec) == (__name__, False)
