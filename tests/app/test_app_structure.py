"""The app layer's shape, checked on the source: Streamlit lives only in app.py, app_pages/ and gptviz/app/; pages
are small functions; every session key is named once, in gptviz/app/keys.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

APP_FILES = sorted((ROOT / "app_pages").glob("*.py")) + sorted((ROOT / "gptviz" / "app").rglob("*.py"))
LIBRARY_FILES = [
    p for p in sorted((ROOT / "gptviz").rglob("*.py")) if "app" not in p.relative_to(ROOT / "gptviz").parts[:1]
]
LONGEST_FUNCTION = 80  # lines, decorators and docstring included
STATE_METHODS = {"get", "pop", "setdefault"}


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imports_streamlit(path: Path) -> bool:
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "streamlit" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "streamlit":
            return True
    return False


def test_the_library_never_imports_streamlit():
    assert LIBRARY_FILES and all("app" not in p.parts[-2:-1] for p in LIBRARY_FILES)
    offenders = [str(p.relative_to(ROOT)) for p in LIBRARY_FILES if imports_streamlit(p)]
    assert offenders == []


def test_the_checker_sees_a_streamlit_import(tmp_path):
    """The scan above is not vacuous: it finds both import forms, inside a function too."""
    for source in ("import streamlit as st\n", "def f():\n    from streamlit.runtime import exists\n"):
        sample = tmp_path / "sample.py"
        sample.write_text(source)
        assert imports_streamlit(sample)


def long_functions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if node.end_lineno - start + 1 > LONGEST_FUNCTION:
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - start + 1} lines)"
                )
    return found


def test_no_page_or_app_function_is_longer_than_80_lines():
    assert [f for p in APP_FILES for f in long_functions(p)] == []


def test_a_page_runs_main_and_keeps_its_work_in_functions():
    """A page's top level holds imports, constants, functions and classes, and ends by calling main(): no
    script body to scroll through."""
    for path in sorted((ROOT / "app_pages").glob("*.py")):
        body = tree(path).body
        if path.stem == "entry":  # the installed app's entry script: the router's main()
            continue
        assert isinstance(body[-1], ast.Expr) and ast.unparse(body[-1]) == "main()", path.name
        for node in body[:-1]:
            ok = isinstance(
                node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
            ) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
            assert ok, f"{path.name}:{node.lineno}: {ast.unparse(node)[:60]}"
            if isinstance(node, (ast.Assign, ast.AnnAssign)):  # constants only: no calls that draw or compute
                calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
                assert all(not ast.unparse(c.func).startswith("st.") for c in calls), (
                    f"{path.name}:{node.lineno} draws at import"
                )


def _is_state(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return text in ("state", "st.session_state", "session_state")


def literal_keys(path: Path) -> list[str]:
    """Session keys written as string literals: key="...", state["..."], state.get("..."), "..." in state,
    keep_valid("...")."""
    found = []

    def literal(node) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    for node in ast.walk(tree(path)):
        if isinstance(node, ast.keyword) and node.arg == "key" and literal(node.value):
            found.append((node.value.lineno, f"key={node.value.value!r}"))
        elif isinstance(node, ast.Subscript) and _is_state(node.value) and literal(node.slice):
            found.append((node.lineno, f"state[{node.slice.value!r}]"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_state(node.func.value)
            and node.func.attr in STATE_METHODS
            and node.args
            and literal(node.args[0])
        ):
            found.append((node.lineno, f"state.{node.func.attr}({node.args[0].value!r})"))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("keep_valid")
            and node.args
            and literal(node.args[0])
        ):
            found.append((node.lineno, f"keep_valid({node.args[0].value!r})"))
        elif isinstance(node, ast.Compare) and literal(node.left) and any(_is_state(c) for c in node.comparators):
            found.append((node.lineno, f"{node.left.value!r} in state"))
    return [text for _, text in sorted(found)]


@pytest.mark.parametrize("path", [p for p in APP_FILES if p.name != "keys.py"], ids=lambda p: p.name)
def test_session_keys_come_from_keys_py(path):
    assert literal_keys(path) == []


def test_the_key_checker_finds_each_literal_form(tmp_path):
    sample = tmp_path / "page.py"
    sample.write_text(
        'st.slider("x", key="a")\nstate["b"] = 1\nstate.get("c")\nkeep_valid("d", [], 0)\n'
        'if "e" in st.session_state: pass\nstate[K.F] = st.slider("y", key=K.G)\n'
    )
    assert literal_keys(sample) == ["key='a'", "state['b']", "state.get('c')", "keep_valid('d')", "'e' in state"]


def test_every_key_is_named_once():
    from gptviz.app import keys, settings

    own = [v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str) and not k.startswith("SOURCE_")]
    values = own + [s.key for s in settings.records().values()]  # keys.py answers a setting's name with its key
    assert len(own) > 20 and len(values) > len(own) + 50
    assert len(values) == len(set(values)), sorted(v for v in values if values.count(v) > 1)
