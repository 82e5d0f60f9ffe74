"""The colour scales every heatmap draws with, chosen in one place (issue 62): the standard look, where each figure
keeps the scale that suits it (Blues for attention weights, RdBu_r for signed values, ...), or one colour-blind-safe
palette that replaces every continuous scale in the app: cividis (or viridis) for magnitudes, and PuOr, which
ColorBrewer lists as safe for the common colour-vision deficiencies, for signed values.

Figure factories ask `sequential(...)` / `diverging(...)` for a scale instead of naming one. The choice is read, in
order, from `use_palette(...)` (a with-block: tests, notebooks, a script) and from the source the app installs
(`set_source`: the visitor's session setting, read in whatever thread draws, fragments included). No Streamlit here."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Palette:
    label: str
    sequential: str | None  # None: each figure keeps its own scale (the standard look)
    diverging: str | None


STANDARD = "standard"
PALETTES = {
    STANDARD: Palette("Standard (each figure its own scale)", None, None),
    "cividis": Palette("Colour-blind safe: cividis", "cividis", "PuOr"),
    "viridis": Palette("Colour-blind safe: viridis", "viridis", "PuOr"),
}

_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("gptviz_palette", default=None)
_source: Callable[[], str | None] | None = None


def set_source(source: Callable[[], str | None] | None) -> None:
    """Where the palette is read when no with-block chose one (the app: the session's setting)."""
    global _source
    _source = source


@contextlib.contextmanager
def use_palette(name: str):
    """Every figure built inside draws with `name`'s scales."""
    if name not in PALETTES:
        raise ValueError(f"palette must be one of {', '.join(PALETTES)}, got {name!r}")
    token = _chosen.set(name)
    try:
        yield
    finally:
        _chosen.reset(token)


def current() -> str:
    name = _chosen.get()
    if name is None and _source is not None:
        try:
            name = _source()
        except Exception:  # no session here (a thread outside a script run): the standard look
            name = None
    return name if name in PALETTES else STANDARD


def _flipped(standard: str, scale: str) -> str:
    """The palette's scale running the way the standard one does (a "_r" scale puts its dark end at the low values)."""
    return scale + "_r" if standard.endswith("_r") else scale


def sequential(standard: str) -> str:
    """The scale for magnitudes: `standard` in the standard look, else the palette's (same direction)."""
    scale = PALETTES[current()].sequential
    return standard if scale is None else _flipped(standard, scale)


def behind_text(standard: str) -> str:
    """The scale for cells that hold text (tokens coloured by a value): `standard`, which is light at 0, or the
    palette's run from light to dark, so the many near-zero tokens stay light behind dark letters (cividis from dark
    navy up made every row a dark band)."""
    scale = PALETTES[current()].sequential
    return standard if scale is None else scale + "_r"


def diverging(standard: str = "RdBu_r") -> str:
    """The scale for signed values centred on 0: `standard` in the standard look, else the palette's."""
    scale = PALETTES[current()].diverging
    return standard if scale is None else _flipped(standard, scale)


def top_colour(standard: str) -> str:
    """One colour for "on" in a two-colour map (the causal mask's allowed cells): `standard`, or the palette's
    sequential scale near its top."""
    import plotly.colors as pcolors

    scale = PALETTES[current()].sequential
    return standard if scale is None else pcolors.sample_colorscale(scale, [0.85])[0]


def dark_cells(t, colorscale, standard_rule) -> list[bool]:
    """Which cells (positions `t` in 0..1 along `colorscale`) are dark enough for white letters: `standard_rule` in
    the standard look (its scales darken as values grow), else by each cell's lightness (cividis is light at its
    top)."""
    import numpy as np
    import plotly.colors as pcolors

    t = np.clip(np.nan_to_num(np.asarray(t, dtype=float)), 0.0, 1.0)
    if current() == STANDARD:
        return [bool(d) for d in standard_rule(t)]
    rgb = [pcolors.unlabel_rgb(c) for c in pcolors.sample_colorscale(colorscale, t.tolist())]
    return [0.299 * r + 0.587 * g + 0.114 * b < 145 for r, g, b in rgb]
