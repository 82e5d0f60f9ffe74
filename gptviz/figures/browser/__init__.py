"""Views the browser draws (a canvas heatmap, bars, token rows, a span picker): each a .js and a .css here and a .py
of the same stem that turns data into their payload, pure and tested. The app mounts them as Streamlit components
(gptviz.app.components); gptviz.notebook as Jupyter widgets. No Streamlit here."""

from __future__ import annotations

from importlib import resources

# helper scripts several views use, written once: put before each script that uses them
SHARED_JS = {"token_rows": ("token_helpers",), "token_span": ("token_helpers",)}


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def asset(stem: str, ext: str) -> str:
    """A component's .js or .css, read from this folder (they ship with the package); a .js with the shared helpers
    it uses (SHARED_JS) before it, as one script."""
    text = _read(f"{stem}.{ext}")
    if ext == "js":
        text = "".join(_read(f"{helper}.js") + "\n" for helper in SHARED_JS.get(stem, ())) + text
    return text
