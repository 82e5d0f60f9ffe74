"""Plotly figures kept by what they show, so a rerun that shows the same values again does not build them again (issue
60: on the Why page a target or rival picked again spent most of its server time in Plotly's figure building, not in
the model). They live in the results cache every page's results share (bounded by bytes, counted in the memory
budget), under a key naming everything the figure shows."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from .services import nbytes_of, results_cache


def kept_figure(what: Hashable, build: Callable[[], object]):
    """The figure `build()` makes for `what` (a key naming everything it shows), built once while the results cache
    keeps it. The figure is shared between runs and sessions: callers must not change it afterwards."""
    return results_cache().get_or_build(("figure", what), build, nbytes_of)


def values_key(values) -> tuple:
    """An array's (or tensor's) values as part of a kept figure's key: its shape, type and bytes."""
    a = np.asarray(values)
    return a.shape, a.dtype.str, a.tobytes()
