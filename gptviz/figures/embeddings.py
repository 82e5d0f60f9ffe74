"""Embeddings: the three inputs of the first block, similarity between embeddings, and a 2-D PCA."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (DIVERGING_SCALE, apply_layout, escaped, title_room, token_axis, token_categories,
                     token_category_axis, visible_length)

# short: on a phone a panel is about 50 px wide, and "token embedding", "+ position embedding" ran into each other
# (the section's heading says it in full: "Token + position = what block 0 receives")
PANEL_TITLES = ("token", "+ position", "= sum")


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def embedding_panels(tok_emb, pos_emb, resid_pre, labels: list[str], dims: range) -> go.Figure:
    """Three heatmaps [position x dimension] on one shared, zero-centred colour scale: the prompt's token
    embeddings, their position embeddings and their sum (what block 0 receives), dimensions `dims`."""
    panels = [_np(a)[:, dims.start:dims.stop] for a in (tok_emb, pos_emb, resid_pre)]
    labels = escaped(labels)
    T = panels[0].shape[0]
    bound = float(max(np.abs(p).max() for p in panels)) or 1.0
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.05, subplot_titles=PANEL_TITLES)
    custom = np.broadcast_to(np.asarray(labels, dtype=object)[:, None], panels[0].shape)
    x = list(dims)
    for col, z in enumerate(panels, start=1):
        fig.add_trace(go.Heatmap(
            z=z, x=x, y=list(range(T)), coloraxis="coloraxis", customdata=custom,
            hovertemplate="position %{y}: %{customdata}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>"),
            row=1, col=col)
        # at most 3 ticks a panel, the axis title once (under the middle panel): three of each merged on a phone
        fig.update_xaxes(nticks=3, title_text="dimension" if col == 2 else None, row=1, col=col)
    fig.update_yaxes(autorange="reversed", **token_axis(labels, max_ticks=40))
    fig.update_yaxes(title_text="token (position)", row=1, col=1)
    apply_layout(fig, height=max(320, min(900, 140 + 16 * T)),
                 coloraxis=dict(colorscale=DIVERGING_SCALE, cmin=-bound, cmax=bound, colorbar=dict(title="value")))
    fig.update_annotations(font_size=11)
    fig.update_layout(margin=dict(t=title_room(1)))  # the panels' titles, below the toolbar strip
    return fig


def token_similarity(sim, labels: list[str], title: str = "Cosine similarity of the prompt's token embeddings"
                     ) -> go.Figure:
    """[T, T] similarity between the prompt's tokens; hover names both tokens."""
    z, labels = _np(sim), escaped(labels)
    T = z.shape[0]
    lab = np.asarray(labels, dtype=object)
    pos = np.arange(T, dtype=object)
    # [row position, row token, column position, column token]: with token tick labels %{x} and %{y} would show
    # the tick text, so the positions travel in customdata
    custom = np.stack(np.broadcast_arrays(pos[:, None], lab[:, None], pos[None, :], lab[None, :]), axis=-1)
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(T)), y=list(range(T)), zmin=-1, zmax=1, zmid=0, colorscale=DIVERGING_SCALE,
        customdata=custom, colorbar=dict(title="cosine"),
        hovertemplate="position %{customdata[0]}: %{customdata[1]}<br>position %{customdata[2]}: %{customdata[3]}"
                      "<br>cosine %{z:.3f}<extra></extra>"))
    # category axes thin their own labels to the size drawn: an array of 20 labels piled up on a phone's 200 px
    names = token_categories(labels)
    fig.data[0].update(x=names, y=names)
    fig.update_xaxes(title_text="token", tickangle=-60, **token_category_axis(names))
    fig.update_yaxes(title_text="token", autorange="reversed", **token_category_axis(names))
    return apply_layout(fig, title=title, height=520)


def position_similarity(sim) -> go.Figure:
    """[n_ctx, n_ctx] cosine similarity between the learned position embeddings (model.wpe.weight)."""
    z = _np(sim).astype(np.float32)
    n = z.shape[0]
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(n), y=np.arange(n), zmin=-1, zmax=1, zmid=0, colorscale=DIVERGING_SCALE,
        colorbar=dict(title="cosine"),
        hovertemplate="position %{y} vs position %{x}<br>cosine %{z:.3f}<extra></extra>"))
    fig.update_xaxes(title_text="position")
    fig.update_yaxes(title_text="position", autorange="reversed")
    return apply_layout(fig, title=f"Cosine similarity between all {n} position embeddings", height=520)


# Label placement for the PCA's prompt tokens, in pixels of a plot this size (a desktop column; a phone's is smaller
# and hides more): Plotly's own "top center" text piled close tokens into one ("Butsoft").
PCA_PLOT_PX = (640, 300)  # 520 px tall less a two-line title, the axis titles and the legend
LABEL_FONT = 12
LABEL_OFFSETS = ((0, 11), (0, -11), (1, 0), (-1, 0), (1, 11), (-1, 11), (1, -11), (-1, -11))  # (side, dy px)


def label_box(x_px: float, y_px: float, text: str, side: int, dy: float) -> tuple[float, float, float, float]:
    """(left, bottom, right, top) in pixels of a label beside a point: centred above/below it (side 0) or starting
    6 px right of it (side 1) or ending 6 px left of it (side -1); y grows upwards."""
    w, h = 0.62 * LABEL_FONT * max(visible_length(text), 1), 1.25 * LABEL_FONT
    cx = x_px + side * (6 + w / 2)
    cy = y_px + dy
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(xy: np.ndarray, labels: list[str], extent: tuple[float, float, float, float],
                 plot_px: tuple[int, int] = PCA_PLOT_PX) -> list[tuple[int, int, float]]:
    """For each point that gets a label, (index, side, dy): the first offset whose box meets no label already
    placed and no other labelled point's marker. Points keep their order; those with no free place go unlabelled
    (hover still names them)."""
    x0, x1, y0, y1 = extent
    sx, sy = plot_px[0] / max(x1 - x0, 1e-12), plot_px[1] / max(y1 - y0, 1e-12)
    px = [((x - x0) * sx, (y - y0) * sy) for x, y in xy]
    markers = [(x - 5, y - 5, x + 5, y + 5) for x, y in px]
    placed, boxes = [], []
    for i, ((x, y), text) in enumerate(zip(px, labels)):
        for side, dy in LABEL_OFFSETS:
            box = label_box(x, y, text, side, dy)
            if not any(_overlap(box, b) for b in boxes) and not any(
                    _overlap(box, m) for j, m in enumerate(markers) if j != i):
                placed.append((i, side, dy))
                boxes.append(box)
                break
    return placed


def pca_scatter(vocab_xy, vocab_labels: list[str], prompt_xy, prompt_labels: list[str],
                explained: tuple[float, float]) -> go.Figure:
    """Token embeddings projected on their first two principal components: a vocabulary sample (grey) and
    the prompt's tokens (labelled where a label has room, see place_labels)."""
    v, p = _np(vocab_xy), _np(prompt_xy)
    vocab_labels, prompt_labels = escaped(vocab_labels), escaped(prompt_labels)
    fig = go.Figure()
    fig.add_trace(go.Scattergl(
        x=v[:, 0], y=v[:, 1], mode="markers", name=f"vocabulary sample ({len(v):,})",
        marker=dict(size=4, color="#b0b0b0", opacity=0.6), customdata=np.asarray(vocab_labels, dtype=object),
        hovertemplate="%{customdata}<br>PC1 %{x:.3f}, PC2 %{y:.3f}<extra>vocabulary</extra>"))
    fig.add_trace(go.Scatter(
        x=p[:, 0], y=p[:, 1], mode="markers", name=f"prompt tokens ({len(p)})",
        marker=dict(size=9, color="#d62728", line=dict(width=1, color="white")),
        customdata=np.asarray(prompt_labels, dtype=object),
        hovertemplate="%{customdata}<br>PC1 %{x:.3f}, PC2 %{y:.3f}<extra>prompt</extra>"))
    both = np.concatenate([v.reshape(-1, 2), p.reshape(-1, 2)]) if len(p) else v.reshape(-1, 2)
    if len(p) and len(both):
        extent = (float(both[:, 0].min()), float(both[:, 0].max()), float(both[:, 1].min()), float(both[:, 1].max()))
        for i, side, dy in place_labels(p, prompt_labels, extent):
            fig.add_annotation(x=float(p[i, 0]), y=float(p[i, 1]), text=prompt_labels[i], showarrow=False,
                               xanchor={0: "center", 1: "left", -1: "right"}[side], xshift=6 * side, yshift=dy,
                               font=dict(size=LABEL_FONT, color="#7a1c1c"))
    fig.update_xaxes(title_text=f"PC1 ({explained[0]:.1%} of variance)")
    fig.update_yaxes(title_text=f"PC2 ({explained[1]:.1%} of variance)")
    return apply_layout(fig, title="Token embeddings, first two principal components", height=520,
                        legend=dict(orientation="h", y=-0.15))
