"""The app's pages: their files and the order, sections, titles and icons the navigation shows them in.

Its own module so that the router and the modules that send a visitor to a page (unit_nav, overview) import it
without importing each other."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # gptviz/
# Installed, setuptools maps the checkout's app_pages/ to gptviz/app_pages; in a checkout it sits beside gptviz/.
PAGES_DIR = _PACKAGE / "app_pages" if (_PACKAGE / "app_pages").is_dir() else _PACKAGE.parent / "app_pages"

# (section, file stem, title, icon); the first page is the default.
PAGE_LIST = [
    ("Look inside", "attention", "Attention", "👀"),
    ("Look inside", "overview", "The whole model", "🗺️"),
    ("Look inside", "generation", "Generation", "✍️"),
    ("Look inside", "embeddings", "Embeddings", "🧭"),
    ("Look inside", "activations", "Activations", "⚡"),
    ("Look inside", "why", "Why this token?", "🔬"),
    ("Look inside", "units", "What does this unit do?", "🧩"),
    ("Architecture", "norms", "Pre-norm vs post-norm", "⚖️"),
    ("Architecture", "parameters", "Parameters", "🧮"),
    ("Architecture", "explainers", "Explainers", "📖"),
    ("Train", "training", "Train a model", "🏋️"),
    ("Train", "timeline", "Heads forming", "🌱"),
]
