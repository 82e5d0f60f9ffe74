"""The code's shape: no import cycle among gptviz's modules, and modules small enough to read (about 500 lines as
`ruff format` lays them out, 400 in the compact style before it; a module not yet split would be named in
NOT_YET_SPLIT with its size as a ceiling, so that it does not grow and no new one joins it)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

MOST_LINES = 500
NOT_YET_SPLIT: dict[str, int] = {}  # module: its size when named here (the ceiling until it is split)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """gptviz's modules -> the gptviz modules they import (at the top or inside functions alike)."""
    files = {module_name(p): p for p in (ROOT / "gptviz").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                deps.update(t for t in [target] + [f"{target}.{a.name}" for a in node.names] if t in files)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle():
    graph = import_graph()
    assert "gptviz.index.scan" in graph and "gptviz.app.router" in graph  # the walk found the packages
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_modules_stay_small():
    files = [p for p in (ROOT / "gptviz").rglob("*.py")] + list((ROOT / "app_pages").glob("*.py"))
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    too_long = {name: n for name, n in sizes.items() if n > NOT_YET_SPLIT.get(name, MOST_LINES)}
    assert too_long == {}, "split these, or name them in NOT_YET_SPLIT with a reason"
    stale = {name for name in NOT_YET_SPLIT if sizes.get(name, 0) <= MOST_LINES}
    assert stale == set(), "these are small now: take them off NOT_YET_SPLIT"


def test_benchmarks_import_the_package_not_the_tests():
    """Benchmarks run as `python -m benchmarks NAME` from the root: none puts a folder on sys.path (the checkout is
    already first on it), and none imports a module of tests/ (what they share with the tests lives in benchmarks/)."""
    test_modules = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {"tests"}
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 10 and "conftest" in test_modules  # the walk found both folders
    found = []
    for path in scripts:
        text = path.read_text(encoding="utf-8")
        if "sys.path.insert" in text or "sys.path.append" in text:  # code strings run as children count too
            found.append(f"{path.name}: sys.path")
        for node in ast.walk(ast.parse(text)):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{path.name}: imports {n}" for n in names if n.split(".")[0] in test_modules]
    assert found == []


def test_no_library_module_cites_the_benchmark_notebook():
    """The dated benchmark history is docs/benchmarks-history.md; benchmarks/README.md is how to run them and the
    current figures, so a module that cites a measurement names the history's section (or says the fact)."""
    files = [p for p in (ROOT / "gptviz").rglob("*") if p.suffix in (".py", ".md", ".js")]
    assert len(files) > 30
    citing = [p.relative_to(ROOT).as_posix() for p in files if "benchmarks/README" in p.read_text(encoding="utf-8")]
    assert citing == []


# ---- pages only draw ------------------------------------------------------------------------------------------

SERVING_MODULES = {"gptviz.serve.memory", "gptviz.serve.limits"}


def page_offences(source: str) -> list[str]:
    """What a page must leave to the services in gptviz/app/services: Streamlit's caches (st.cache_data,
    st.cache_resource) and the memory accountant and server limits (gptviz.serve.memory, gptviz.serve.limits)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("cache_data", "cache_resource"):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in SERVING_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in SERVING_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
            else:  # from gptviz.serve import memory
                found += [
                    f"{node.lineno}: from {node.module} import {a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in SERVING_MODULES
                ]
    return found


def test_pages_neither_cache_nor_reserve_memory_themselves():
    pages = sorted((ROOT / "app_pages").glob("*.py"))
    assert len(pages) > 10
    offences = {p.name: page_offences(p.read_text(encoding="utf-8")) for p in pages}
    assert {name: found for name, found in offences.items() if found} == {}


def test_the_page_checker_finds_each_form():
    source = (
        "import streamlit as st\nfrom gptviz.serve import bounded_cache, memory\n"
        "from gptviz.serve.limits import LimitError\n"
        "import gptviz.serve.memory\n@st.cache_data(max_entries=2)\ndef f(): pass\n"
        "g = st.cache_resource(lambda: 1)\nfrom gptviz import analysis\n"
    )
    assert page_offences(source) == [
        "2: from gptviz.serve import memory",
        "3: from gptviz.serve.limits import ...",
        "4: import gptviz.serve.memory",
        "5: st.cache_data",
        "7: st.cache_resource",
    ]


def test_the_prompt_as_pages_see_it_is_defined_once():
    """One Seen and one read_prompt (gptviz/app/seen.py) for every page, not a copy per page."""
    files = sorted((ROOT / "app_pages").glob("*.py")) + sorted((ROOT / "gptviz" / "app").rglob("*.py"))
    defined = [
        (p.relative_to(ROOT).as_posix(), node.name)
        for p in files
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in ("Seen", "read_prompt")
    ]
    assert sorted(defined) == [("gptviz/app/seen.py", "Seen"), ("gptviz/app/seen.py", "read_prompt")]


def is_k_prompt(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "PROMPT"  # keys.PROMPT, as K.PROMPT


def test_only_the_sidebar_reads_the_prompts_text():
    """Pages and views read the visitor's prompt through the sidebar (prompt_text, prompt_tokens, read_prompt), never
    from session state themselves (issue 61: it was read five ways). Writers (a link, an example, a generated text)
    and the code that carries it in links and snippets are not readers."""
    carriers = {
        "gptviz/app/sidebar.py",
        "gptviz/app/links.py",
        "gptviz/app/unit_nav.py",
        "gptviz/app/reproduce/core.py",
    }
    files = sorted((ROOT / "app_pages").glob("*.py")) + sorted((ROOT / "gptviz" / "app").rglob("*.py"))
    reads = []
    for p in files:
        name = p.relative_to(ROOT).as_posix()
        if name in carriers:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            get = isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args
            if (get and is_k_prompt(node.args[0])) or (
                isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_k_prompt(node.slice)
            ):
                reads.append(f"{name}:{node.lineno}")
    assert reads == [], reads


def test_every_package_is_installed():
    """pyproject.toml lists gptviz's packages by name: a new subpackage left off it is missing from an install (the
    installed app failed on gptviz.app.services)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "gptviz").rglob("*.py")}  # (app/: no __init__)
    assert "gptviz.app" in found and found - listed == set(), sorted(found - listed)


def test_no_app_module_is_named_like_a_library_package():
    """Issue 61.4: `gptviz/app/services/training.py` read like the `gptviz.training` package; the app's modules take
    other names (the pages' files keep theirs: the navigation's addresses are their stems)."""
    library = ROOT / "gptviz"
    packages = {p.name for p in library.iterdir() if (p / "__init__.py").exists()}
    clashes = [str(f.relative_to(ROOT)) for f in (library / "app").rglob("*.py") if f.stem in packages]
    assert "training" in packages and clashes == []
