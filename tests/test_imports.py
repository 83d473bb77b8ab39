"""The import graph of `simulator/` keeps the layers of DESIGN.md: nothing imports `simulator.cli`,
no import circles (module-level, function-level and TYPE_CHECKING imports all count), only
`simulator/calibration/` imports torch, and each module imports only its own layer or lower ones.

The graph is built from the AST of every file, so a function-local import of a module that imports
you back is a circle here even though Python tolerates it at run time.

Edges: `import simulator.a.b` and `from simulator.a import b` (b a module) point at the module
`simulator.a.b`; `from .x import name` (name not a module) points at `x`; `from .. import name` (name
not a module) points at the parent package's `__init__` (named as the package). Importing
`pkg.x` is not counted as importing `pkg/__init__` (Python runs it, but it is the package's own
business to keep its `__init__` light); so a package `__init__` that imports its submodules, whose
submodules import siblings, makes no circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "simulator"

# DESIGN.md's layer table, lowest first. A module's layer comes from the longest matching prefix.
LAYERS: list[tuple[str, list[str]]] = [
    ("config", ["atomic", "errors", "units", "scenario", "presets", "overrides", "paths", "builtin", "version", "params",
                "engine_software", "strict_model", "json_text"]),
    ("des", ["des"]),
    ("hardware", ["hardware"]),
    ("network", ["network"]),
    ("llm", ["llm"]),
    ("rl", ["rl"]),
    ("metrics", ["metrics"]),
    # api.py (simulate / compare: builds the layers below into a run) sits with the tools around
    # them: sweep and validation run scenarios through it; the face re-exports it.
    ("around", ["report", "sweep", "sweep_files", "planner", "calibration", "validation", "uncertainty",
                "autoplan", "capacity", "api", "frameworks"]),
    ("face", ["cli", "commands", "__main__", "codecache", ""]),
]


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package: dotted name -> file (a package is named by its `__init__`)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return name in files and files[name].name == "__init__.py"


def _base_of(node: ast.ImportFrom, module: str, files: dict[str, Path]) -> str:
    """The absolute dotted name `from X import ...` refers to, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    package = module if _is_package(module, files) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(module: str, path: Path, files: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported dotted name, line) for every import statement anywhere in the file."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(node, module, files)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in files else base, node.lineno))
    return out


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> nx.DiGraph:
    """Modules of the package as nodes; an edge a -> b (attribute `lines`) when a imports b."""
    files = module_files(root, package)
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for module, path in files.items():
        for target, line in imports_of(module, path, files):
            if target in files and target != module:
                graph.add_edge(module, target)
                graph.edges[module, target].setdefault("lines", []).append(line)
    return graph


def external_imports(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> top-level names of the outside packages it imports."""
    files = module_files(root, package)
    return {module: {name.split(".")[0] for name, _ in imports_of(module, path, files)
                     if name.split(".")[0] != package}
            for module, path in files.items()}


def layer_of(module: str) -> int:
    rest = module.split(".", 1)[1] if "." in module else ""
    best, best_len = len(LAYERS) - 1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (rest == prefix or rest.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _where(graph: nx.DiGraph, a: str, b: str) -> str:
    return f"{a} -> {b} (line {', '.join(map(str, sorted(set(graph.edges[a, b]['lines']))))})"


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_graph_sees_the_package(graph: nx.DiGraph) -> None:
    assert {"simulator", "simulator.cli", "simulator.des", "simulator.planner.search"} <= set(graph)
    assert graph.has_edge("simulator.cli", "simulator.errors")
    assert graph.has_edge("simulator.__main__", "simulator.cli")


def test_nothing_imports_cli(graph: nx.DiGraph) -> None:
    importers = sorted(a for a in graph.predecessors("simulator.cli") if a != "simulator.__main__")
    assert not importers, "import simulator.cli: " + "; ".join(_where(graph, a, "simulator.cli") for a in importers)


def test_no_import_circles(graph: nx.DiGraph) -> None:
    cycles = sorted(sorted(c) for c in nx.simple_cycles(graph))
    if cycles:
        first = min(nx.simple_cycles(graph), key=len)
        steps = [_where(graph, a, b) for a, b in zip(first, first[1:] + first[:1], strict=True)]
        pytest.fail(f"{len(cycles)} import circle(s); the shortest: " + "; ".join(steps)
                    + "\nall: " + "\n     ".join(" <-> ".join(c) for c in cycles))


def test_only_calibration_imports_torch() -> None:
    offenders = sorted(m for m, names in external_imports().items()
                       if {"torch", "torch_npu"} & names and not m.startswith("simulator.calibration"))
    assert not offenders, f"torch imported outside simulator/calibration/: {offenders}"


def test_layers_import_only_downwards(graph: nx.DiGraph) -> None:
    upward = [_where(graph, a, b) + f" [{LAYERS[layer_of(a)][0]} -> {LAYERS[layer_of(b)][0]}]"
              for a, b in sorted(graph.edges) if layer_of(b) > layer_of(a)]
    assert not upward, "imports going up the layers of DESIGN.md:\n  " + "\n  ".join(upward)


def test_a_real_circle_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n    return g\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph.has_edge("pkg.sub.b", "pkg.a")  # a function-level, relative import
    assert [sorted(c) for c in nx.simple_cycles(graph)] == [["pkg.a", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("from .. import a\nfrom .. import VERSION\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph.has_edge("pkg.sub.b", "pkg.a") and graph.has_edge("pkg.sub.b", "pkg")
