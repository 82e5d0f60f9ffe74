"""The library's direction of dependencies (issue 61): the science (model, methods, training, index, figures, interop,
notebook) imports nothing from the server (serve) or the app, and no two packages import each other, directly or
through others. Read from the source's import statements, so an import inside a function counts too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support import ROOT as CHECKOUT

ROOT = CHECKOUT / "gptviz"
SCIENCE = {"model", "methods", "training", "index", "figures", "interop", "notebook"}
SERVER = {"serve", "app"}


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """(absolute module, line) for every gptviz import in the file, relative ones resolved."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = parts[:-1] if path.name != "__init__.py" else parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            targets = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            found += [(t, node.lineno) for t in targets if t.startswith("gptviz")]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("gptviz")]
    return found


def package_of(module: str) -> str | None:
    """The gptviz sub-package a module belongs to (None for a module at the top, such as gptviz.export)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (ROOT / parts[1]).is_dir() else None


def package_graph() -> dict[tuple[str, str], list[str]]:
    """{(importing package, imported package): [file:line, ...]} between different sub-packages."""
    edges = defaultdict(list)
    for path in ROOT.rglob("*.py"):
        source = package_of(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        for module, line in imported_modules(path):
            target = package_of(module)
            if source and target and target != source:
                edges[(source, target)].append(f"{path.relative_to(ROOT.parent)}:{line}")
    return edges


def test_the_science_never_imports_the_server_or_the_app():
    wrong = {edge: where for edge, where in package_graph().items() if edge[0] in SCIENCE and edge[1] in SERVER}
    assert wrong == {}


def test_no_two_packages_depend_on_each_other():
    edges = package_graph()
    reach = defaultdict(set)
    for a, b in edges:
        reach[a].add(b)
    changed = True
    while changed:  # the transitive closure: a handful of packages
        changed = False
        for a in list(reach):
            more = set().union(*(reach[b] for b in reach[a] if b in reach)) - reach[a]
            if more:
                reach[a] |= more
                changed = True
    cycles = sorted({tuple(sorted((a, b))) for a in reach for b in reach[a] if a != b and a in reach.get(b, ())})
    assert cycles == [], {c: (edges.get(c, []) + edges.get(c[::-1], []))[:4] for c in cycles}


def test_the_reader_sees_the_imports_it_checks():
    # the checks above would pass on an empty graph: the graph holds the app's known dependency on the model
    edges = package_graph()
    assert ("app", "model") in edges and ("methods", "model") in edges and ("serve", "model") in edges
    assert all(edge[0] != edge[1] for edge in edges)
