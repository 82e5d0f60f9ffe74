"""The app's browser components (Streamlit components v2, no iframe): each is a .py (a pure payload and its mount),
a .js and a .css of the same stem in this folder."""
from __future__ import annotations

from functools import cache
from importlib import resources


def asset(stem: str, ext: str) -> str:
    """A component's .js or .css, read from this folder (they ship with the package)."""
    return resources.files(__package__).joinpath(f"{stem}.{ext}").read_text(encoding="utf-8")


@cache
def registered(name: str, root_class: str, stem: str):
    """Component `name`, registered once per process (a second registration replaces the first with a warning): its
    HTML a <div class=root_class>, its CSS and JS read from <stem>.css and <stem>.js beside this file."""
    import streamlit as st
    return st.components.v2.component(name, html=f'<div class="{root_class}"></div>', css=asset(stem, "css"),
                                      js=asset(stem, "js"))
