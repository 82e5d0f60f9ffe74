"""Copy as Python's snippets: read from a page, run as a visitor runs them."""

from __future__ import annotations

from gptviz.app.reproduce import MARK


def snippet_of(at, view: str = "") -> str:
    """The page's one Copy-as-Python snippet (whose first line names `view`, where the page has several)."""
    found = [c.value for c in at.code if c.value.startswith(MARK) and view in c.value.splitlines()[0]]
    assert len(found) == 1, [c.value[:60] for c in at.code]
    return found[0]


def run_snippet(code: str):
    """Execute a snippet as a notebook would (its own namespace, the installed library) and return `result`."""
    namespace: dict = {}
    exec(compile(code, "<copied snippet>", "exec"), namespace)  # noqa: S102 (the page's own code, under test)
    return namespace["result"]
