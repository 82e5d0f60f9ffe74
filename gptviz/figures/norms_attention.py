"""Figures for the pre-norm vs post-norm page: the two wirings' attention side by side with their difference, and
how far apart they attend per head. Pure Plotly: arrays in, go.Figure out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    ATTENTION_SCALE,
    DIVERGING_SCALE,
    MASKED_COLOR,
    apply_layout,
    token_axis,
    token_categories,
    token_category_axis,
)
from .palette import diverging, sequential
from .training import plain


def _masked(pattern: np.ndarray) -> np.ndarray:
    """The causal mask's upper triangle as NaN, so it shows as the masked colour, not as a zero weight."""
    z = np.array(pattern, dtype=float)
    z[np.triu_indices(z.shape[0], k=1)] = np.nan
    return z


# A cell's hover names its positions and tokens from what Plotly already has: the cell's (row, column) index and the
# category axes' names (each token once, not once per cell). A repeated token's name carries zero-width spaces
# (token_categories), which draw as nothing.
_CELL_HOVER = "query %{pointNumber[0]} %{y}<br>key %{pointNumber[1]} %{x}<br>"
_PRE_HOVER = "pre %{z:.3f}, post %{customdata:.3f}<extra></extra>"
_POST_HOVER = "pre %{customdata:.3f}, post %{z:.3f}<extra></extra>"
_BOTH_HOVER = "pre %{customdata[0]:.3f}, post %{customdata[1]:.3f}<extra></extra>"


def _compact(values: np.ndarray) -> np.ndarray:
    """Float32, which Plotly sends as 4 bytes a value (float64: 8): the patterns are captured in float32, so the
    weights shown (3 decimals) are unchanged."""
    return np.asarray(values, dtype=np.float32)


def attention_pair(pre: np.ndarray, post: np.ndarray, labels: list[str], title: str | None = None) -> go.Figure:
    """Three heatmaps over (query, key): pre-norm's attention, post-norm's, and post − pre."""
    labels = [plain(label) for label in labels]
    T = len(labels)
    diff = _masked(post) - _masked(pre)
    vmax = float(np.nanmax(np.abs(diff))) if T > 1 and np.isfinite(diff).any() else 1.0
    vmax = vmax or 1e-6
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.14)  # the weight colour bar sits in the second gap
    qs, ks = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    custom = np.stack(
        [np.array(labels, dtype=object)[qs], np.array(labels, dtype=object)[ks], _masked(pre), _masked(post)], axis=-1
    )
    hover = (
        "query %{y} %{customdata[0]}<br>key %{x} %{customdata[1]}<br>pre %{customdata[2]:.3f}, "
        "post %{customdata[3]:.3f}<extra></extra>"
    )
    for col, (z, axis) in enumerate(
        ((_masked(pre), "coloraxis"), (_masked(post), "coloraxis"), (diff, "coloraxis2")), start=1
    ):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(range(T)),
                y=list(range(T)),
                coloraxis=axis,
                customdata=custom,
                hovertemplate=hover,
                hoverongaps=False,
            ),
            row=1,
            col=col,
        )
    axis = token_axis(labels, max_ticks=40)
    for col, name in enumerate(("pre-norm", "post-norm", "post − pre"), start=1):
        fig.update_xaxes(
            **axis, tickangle=-60, row=1, col=col, title_text=f"<b>{name}</b> · key", showgrid=False, zeroline=False
        )
        fig.update_yaxes(
            **axis,
            autorange="reversed",
            row=1,
            col=col,
            showgrid=False,
            zeroline=False,
            title_text="query" if col == 1 else None,
            showticklabels=col == 1,
        )
    apply_layout(
        fig,
        title,
        height=520,
        plot_bgcolor=MASKED_COLOR,
        coloraxis=dict(
            colorscale=sequential(ATTENTION_SCALE),
            cmin=0,
            cmax=1,
            colorbar=dict(title=dict(text="weight", side="top"), x=0.64, xanchor="left", len=0.75, thickness=10),
        ),
        coloraxis2=dict(
            colorscale=diverging(DIVERGING_SCALE),
            cmin=-vmax,
            cmax=vmax,
            colorbar=dict(title=dict(text="post − pre", side="top"), x=1.01, xanchor="left", len=0.75, thickness=10),
        ),
    )
    return fig


def attention_panels(
    pre: np.ndarray,
    post: np.ndarray,
    labels: list[str],
    title: str,
    panel_names: tuple[str, str, str] = ("pre-norm", "post-norm", "post − pre"),
    height: int = 440,
    post_labels: list[str] | None = None,
    with_difference: bool = True,
) -> list[go.Figure]:
    """attention_pair's three heatmaps as three figures, each with its own colour bar (the two wirings' on the same
    0..1 scale), for columns that a phone stacks: three panels in one figure were 80 px each there, their tick
    labels and colour bars over each other. Each is titled "{title}: {panel name}", or the panel name alone when
    `title` is empty (the twins name each panel's own head). `post_labels`: the post-norm model read the text as
    other tokens (its own tokenizer): two figures, each over its own tokens, and no difference.
    `with_difference=False`: the first two only."""
    if post_labels is not None:
        return [
            _own_tokens_panel(z, names, f"{title}: {name}" if title else name, height)
            for z, names, name in ((pre, labels, panel_names[0]), (post, post_labels, panel_names[1]))
        ]
    labels = [plain(label) for label in labels]
    T = len(labels)
    diff = _masked(post) - _masked(pre)
    vmax = (float(np.nanmax(np.abs(diff))) if T > 1 and np.isfinite(diff).any() else 1.0) or 1e-6
    pre32, post32 = _compact(_masked(pre)), _compact(_masked(post))
    # category axes thin their own labels to the width drawn (a phone's 100 px of heatmap)
    names = token_categories(labels)
    axis = token_category_axis(names)
    figures = []
    figures = []
    # each map's hover reads its own z and the other wiring's weight from customdata: no cell repeats what z holds
    for name, z, custom, values, scale, lo, hi, bar in (
        (panel_names[0], pre32, post32, _PRE_HOVER, lambda: sequential(ATTENTION_SCALE), 0, 1, "weight"),
        (panel_names[1], post32, pre32, _POST_HOVER, lambda: sequential(ATTENTION_SCALE), 0, 1, "weight"),
        (
            panel_names[2],
            _compact(diff),
            np.stack([pre32, post32], axis=-1),
            _BOTH_HOVER,
            lambda: diverging(DIVERGING_SCALE),
            -vmax,
            vmax,
            "post − pre",
        ),
    )[: 3 if with_difference else 2]:
        fig = go.Figure(
            go.Heatmap(
                z=z,
                x=names,
                y=names,
                colorscale=scale(),
                zmin=lo,
                zmax=hi,
                customdata=custom,
                hovertemplate=_CELL_HOVER + values,
                hoverongaps=False,
                colorbar=dict(title=dict(text=bar, side="top"), thickness=10, len=0.8),
            )
        )
        fig.update_xaxes(**axis, tickangle=-60, title_text="key", showgrid=False, zeroline=False)
        fig.update_yaxes(**axis, autorange="reversed", title_text="query", showgrid=False, zeroline=False)
        figures.append(
            apply_layout(fig, f"{title}: {name}" if title else name, height=height, plot_bgcolor=MASKED_COLOR)
        )
    return figures


def _own_tokens_panel(pattern: np.ndarray, labels: list[str], title: str, height: int) -> go.Figure:
    """One model's attention over its own tokens (a pair that tokenizes the text differently)."""
    labels = [plain(label) for label in labels]
    names = token_categories(labels)
    axis = token_category_axis(names)
    fig = go.Figure(
        go.Heatmap(
            z=_compact(_masked(pattern)),
            x=names,
            y=names,
            colorscale=sequential(ATTENTION_SCALE),
            zmin=0,
            zmax=1,
            hoverongaps=False,
            colorbar=dict(title=dict(text="weight", side="top"), thickness=10, len=0.8),
            hovertemplate=_CELL_HOVER + "weight %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(**axis, tickangle=-60, title_text="key", showgrid=False, zeroline=False)
    fig.update_yaxes(**axis, autorange="reversed", title_text="query", showgrid=False, zeroline=False)
    return apply_layout(fig, title, height=height, plot_bgcolor=MASKED_COLOR)


def attention_distance(tv: np.ndarray) -> go.Figure:
    """[layers, heads] mean total-variation distance between the wirings' attention rows."""
    L, H = tv.shape
    fig = go.Figure(
        go.Heatmap(
            z=tv,
            x=list(range(H)),
            y=list(range(L)),
            colorscale=sequential("Purples"),
            zmin=0,
            zmax=max(float(tv.max()), 1e-6),
            colorbar=dict(title="TV", thickness=12),
            hovertemplate="layer %{y}, head %{x}<br>mean TV distance %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else 4)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 16 else 4)
    return apply_layout(fig, "How far apart the two wirings attend", height=max(260, 22 * L + 120))
