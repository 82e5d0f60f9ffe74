"""Views the browser draws (a canvas heatmap, bars, token rows, a span picker): each a .js and a .css here and a .py
of the same stem that turns data into their payload, pure and tested. The app mounts them as Streamlit components
(gptviz.app.components); gptviz.notebook as Jupyter widgets. No Streamlit here."""

from __future__ import annotations

from importlib import resources


def asset(stem: str, ext: str) -> str:
    """A component's .js or .css, read from this folder (they ship with the package)."""
    return resources.files(__package__).joinpath(f"{stem}.{ext}").read_text(encoding="utf-8")
