"""Figures for "Why this token?": direct attribution bars, layer x head grids, patching heatmaps and saliency on
the prompt's tokens. Data in, go.Figure out; token text escaped for Plotly."""

from __future__ import annotations

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from .common import (
    DIVERGING_SCALE,
    apply_layout,
    escaped,
    title_room,
    token_categories,
    token_category_axis,
    wrap_title,
)
from .palette import diverging

# pushes towards the target / towards the rival: the strong red and blue of the grids' diverging scale (RdBu_r: red
# up), so a head has one colour in the bars and in the layer x head grid beside them
POSITIVE, NEGATIVE = plotly.colors.diverging.RdBu[1], plotly.colors.diverging.RdBu[-2]


def sign_colours() -> tuple[str, str]:
    """(POSITIVE, NEGATIVE), or the same two ends of the colour-blind palette's diverging scale where it is chosen."""
    scale = diverging(DIVERGING_SCALE)
    if scale == DIVERGING_SCALE:
        return POSITIVE, NEGATIVE
    up, down = plotly.colors.sample_colorscale(scale, [0.9, 0.1])
    return up, down


def _np(x) -> np.ndarray:
    return x.detach().cpu().float().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=float)


def _symmetric(values) -> float:
    top = float(np.nanmax(np.abs(values))) if np.size(values) else 0.0
    return top if top > 0 else 1.0


def attribution_bars(labels: list[str], values, *, title: str, height: int = 420) -> go.Figure:
    """One bar per part, in the model's order; red pushes the logit difference up, blue down (as in the grids)."""
    v = _np(values)
    up, down = sign_colours()
    names = token_categories(escaped(labels))
    fig = go.Figure(
        go.Bar(
            x=names,
            y=v,
            marker_color=[up if x >= 0 else down for x in v],
            customdata=escaped(labels),
            hovertemplate="%{customdata}: %{y:+.3f}<extra></extra>",
        )
    )
    # a category axis thins its own labels to the width drawn (a phone's 25 parts of the bundled model piled up)
    fig.update_xaxes(tickangle=-60, tickfont_size=10, **token_category_axis(names))
    fig.update_yaxes(title_text="direct effect on the logit difference", zeroline=True, zerolinecolor="#888")
    return apply_layout(fig, title=title, height=height, showlegend=False)


def layer_head_grid(
    values,
    *,
    title: str,
    colorbar: str,
    zmid: float = 0.0,
    symmetric: bool = True,
    text_format: str = ".2f",
    selected: list[tuple[int, int]] = (),
    height: int | None = None,
) -> go.Figure:
    """[layers, heads] values as a grid (layer rows, head columns) with each value written in its cell;
    `selected` cells are outlined."""
    v = _np(values)
    L, H = v.shape
    span = _symmetric(v - zmid) if symmetric else None
    fig = go.Figure(
        go.Heatmap(
            z=v,
            x=list(range(H)),
            y=list(range(L)),
            colorscale=diverging(DIVERGING_SCALE),
            zmid=zmid if symmetric else None,
            zmin=zmid - span if symmetric else None,
            zmax=zmid + span if symmetric else None,
            texttemplate="%{z:" + text_format + "}",
            colorbar=dict(title=dict(text=colorbar, side="right"), thickness=12),
            hovertemplate="layer %{y}, head %{x}: %{z:.4f}<extra></extra>",
        )
    )
    for layer, head in selected:
        fig.add_shape(
            type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5, line=dict(color="#111", width=3)
        )
    fig.update_xaxes(title_text="head", tickmode="array", tickvals=list(range(H)), showgrid=False)
    fig.update_yaxes(
        title_text="layer", tickmode="array", tickvals=list(range(L)), autorange="reversed", showgrid=False
    )
    return apply_layout(fig, title=title, height=height or int(min(600, max(240, 40 * L + 120))))


def patching_heatmap(scores, labels: list[str], *, title: str, height: int | None = None) -> go.Figure:
    """[layers, positions] normalised patching scores: 0 = the corrupted run, 1 = the clean run."""
    v = _np(scores)
    L, T = v.shape
    texts = escaped(labels)
    custom = np.empty((L, T, 2), dtype=object)
    custom[..., 0] = np.array(texts, dtype=object)[None, :]
    custom[..., 1] = np.arange(T)[None, :]
    cats = token_categories(texts)  # a category axis thins its labels to the width drawn (28 ran together on a phone)
    fig = go.Figure(
        go.Heatmap(
            z=v,
            x=cats,
            y=list(range(L)),
            customdata=custom,
            colorscale=diverging(DIVERGING_SCALE),
            zmid=0,
            zmin=-1,
            zmax=1,
            colorbar=dict(title=dict(text="restored", side="right"), thickness=12),
            hovertemplate="layer %{y}, position %{customdata[1]} '%{customdata[0]}': %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(
        title_text="position (token of the corrupted prompt)",
        tickangle=-60,
        tickfont_size=11,
        showgrid=False,
        **token_category_axis(cats),
    )
    fig.update_yaxes(
        title_text="residual stream entering layer",
        tickmode="array",
        tickvals=list(range(L)),
        autorange="reversed",
        showgrid=False,
    )
    return apply_layout(fig, title=title, height=height or int(min(600, max(260, 36 * L + 150))))


# A strip's cells are as wide as the figure allows, so a phone (about 300 px of plot) decides how many fit a row:
# 6 leave each about 50 px there (8 px text for an 8-character token) and 170 px on a desktop.
STRIP_PER_ROW = 6
STRIP_ROW_PX = 42
STRIP_COLORBAR_ROOM = 70  # below the strip: a horizontal colour bar, its ticks and its title


def token_strip(labels: list[str], scores, *, title: str, per_row: int = STRIP_PER_ROW) -> go.Figure:
    """The prompt's tokens as text in reading order, each cell coloured by its score (signed, centred on 0).
    The colour bar lies below the strip at a fixed size: beside a two-row strip it was squeezed to a few pixels,
    its ticks over each other and its title cut. The text's size is Plotly's "auto": the largest that fits every
    cell at the width drawn, so no token runs into the next."""
    v = _np(scores)
    T = len(v)
    rows = max(1, -(-T // per_row))
    z = np.full((rows, per_row), np.nan)
    text = np.full((rows, per_row), "", dtype=object)
    texts = escaped(labels)
    for t in range(T):
        z[t // per_row, t % per_row] = v[t]
        text[t // per_row, t % per_row] = texts[t]
    span = _symmetric(v)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            texttemplate="%{text}",
            colorscale=diverging(DIVERGING_SCALE),
            zmid=0,
            zmin=-span,
            zmax=span,
            xgap=2,
            ygap=2,
            hoverongaps=False,
            colorbar=dict(
                orientation="h",
                thickness=12,
                len=200,
                lenmode="pixels",
                x=0,
                xanchor="left",
                y=0,
                yref="container",
                yanchor="bottom",
                ypad=4,
                title=dict(text="attribution", side="right"),
                tickformat=".2~g",
                nticks=5,
            ),
            hovertemplate="'%{text}': %{z:+.4f}<extra></extra>",
        )
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    top = title_room(1 + wrap_title(title).count("<br>"))
    apply_layout(fig, title=title, height=top + STRIP_ROW_PX * rows + STRIP_COLORBAR_ROOM, plot_bgcolor="white")
    fig.update_layout(margin=dict(b=STRIP_COLORBAR_ROOM))
    return fig
