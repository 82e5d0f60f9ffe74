"""A session's recently built Plotly figures, by what they show, so a rerun that shows the same values again does not
build them again (issue 60: on the Why page a target or rival picked again spent most of its server time in Plotly's
figure building, not in the model)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np
import streamlit as st

from . import keys as K

KEPT = 8  # figures a session keeps: a few pickers' values back and forth


def kept_figure(what: Hashable, build: Callable[[], object]):
    """The figure `build()` makes for `what` (a key naming everything it shows), built once per session while it is
    among the KEPT most recently used. The figure is shared between runs: callers must not change it afterwards."""
    kept = st.session_state.get(K.KEPT_FIGURES)
    if not isinstance(kept, dict):
        kept = st.session_state[K.KEPT_FIGURES] = {}
    fig = kept.pop(what, None)
    if fig is None:
        fig = build()
        while len(kept) >= KEPT:
            kept.pop(next(iter(kept)))  # the least recently used
    kept[what] = fig
    return fig


def values_key(values) -> tuple:
    """An array's (or tensor's) values as part of a kept figure's key: its shape, type and bytes."""
    a = np.asarray(values)
    return a.shape, a.dtype.str, a.tobytes()
