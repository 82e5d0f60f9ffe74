"""Embeddings: the three inputs of the first block, similarity between embeddings, and a 2-D PCA."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    ANNOTATION_MIN_WIDTH,
    DIVERGING_SCALE,
    apply_layout,
    escaped,
    title_room,
    token_axis,
    token_categories,
    token_category_axis,
    visible_length,
)
from .palette import diverging

# short: on a phone a panel is about 50 px wide, and "token embedding", "+ position embedding" ran into each other
# (the section's heading says it in full: "Token + position = what block 0 receives")
PANEL_TITLES = ("token", "+ position", "= sum")


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def embedding_panels(tok_emb, pos_emb, resid_pre, labels: list[str], dims: range) -> go.Figure:
    """Three heatmaps [position x dimension] on one shared, zero-centred colour scale: the prompt's token
    embeddings, their position embeddings and their sum (what block 0 receives), dimensions `dims`."""
    panels = [_np(a)[:, dims.start : dims.stop] for a in (tok_emb, pos_emb, resid_pre)]
    labels = escaped(labels)
    T = panels[0].shape[0]
    bound = float(max(np.abs(p).max() for p in panels)) or 1.0
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.05, subplot_titles=PANEL_TITLES)
    custom = np.broadcast_to(np.asarray(labels, dtype=object)[:, None], panels[0].shape)
    x = list(dims)
    for col, z in enumerate(panels, start=1):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=list(range(T)),
                coloraxis="coloraxis",
                customdata=custom,
                hovertemplate="position %{y}: %{customdata}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        # at most 3 ticks a panel, the axis title once (under the middle panel): three of each merged on a phone
        fig.update_xaxes(nticks=3, title_text="dimension" if col == 2 else None, row=1, col=col)
    fig.update_yaxes(autorange="reversed", **token_axis(labels, max_ticks=40))
    fig.update_yaxes(title_text="token (position)", row=1, col=1)
    apply_layout(
        fig,
        height=max(320, min(900, 140 + 16 * T)),
        coloraxis=dict(colorscale=diverging(DIVERGING_SCALE), cmin=-bound, cmax=bound, colorbar=dict(title="value")),
    )
    fig.update_annotations(font_size=11)
    fig.update_layout(margin=dict(t=title_room(1)))  # the panels' titles, below the toolbar strip
    return fig


def token_similarity(
    sim, labels: list[str], title: str = "Cosine similarity of the prompt's token embeddings"
) -> go.Figure:
    """[T, T] similarity between the prompt's tokens; hover names both tokens."""
    z, labels = _np(sim), escaped(labels)
    T = z.shape[0]
    lab = np.asarray(labels, dtype=object)
    pos = np.arange(T, dtype=object)
    # [row position, row token, column position, column token]: with token tick labels %{x} and %{y} would show
    # the tick text, so the positions travel in customdata
    custom = np.stack(np.broadcast_arrays(pos[:, None], lab[:, None], pos[None, :], lab[None, :]), axis=-1)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(T)),
            y=list(range(T)),
            zmin=-1,
            zmax=1,
            zmid=0,
            colorscale=diverging(DIVERGING_SCALE),
            customdata=custom,
            colorbar=dict(title="cosine"),
            hovertemplate="position %{customdata[0]}: %{customdata[1]}<br>position %{customdata[2]}: %{customdata[3]}"
            "<br>cosine %{z:.3f}<extra></extra>",
        )
    )
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
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=np.arange(n),
            y=np.arange(n),
            zmin=-1,
            zmax=1,
            zmid=0,
            colorscale=diverging(DIVERGING_SCALE),
            colorbar=dict(title="cosine"),
            hovertemplate="position %{y} vs position %{x}<br>cosine %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="position")
    fig.update_yaxes(title_text="position", autorange="reversed")
    return apply_layout(fig, title=f"Cosine similarity between all {n} position embeddings", height=520)


# Label placement for the PCA's prompt tokens: Plotly's own "top center" text piled close tokens into one
# ("Butsoft"), and labels placed for a desktop's 850 px of plot piled up again on a phone's 270 px. Labels come in
# tiers by the figure's drawn width: a tier's labels show from its width up (display.show_figure hides them below it
# with a CSS container query), each placed where it meets no label of its own or an earlier tier and no point's
# marker at any width from there up.
LABEL_MIN_WIDTHS = (0, 420, 600, 800, 1000)  # px of figure width from which each tier's labels show
FIGURE_WIDTH_PX = (300, 1800)  # the narrowest figure placed for (a 320 px phone's) and the widest
PLOT_MARGIN_PX = (80, 100)  # the figure's width less its plot's (the y axis's ticks and title, the margins)
PLOT_HEIGHT_PX = (290, 340)  # 520 px less the title, the x axis's title and the legend: a phone's, a desktop's
MAX_LABELLED = 200  # prompt tokens tried for a label: no plot here has room for a label on more
LABEL_FONT = 12
LABEL_GAP = 1  # px kept clear around each label
LABEL_OFFSETS = np.array(
    ((0, 11), (0, -11), (1, 0), (-1, 0), (1, 11), (-1, 11), (1, -11), (-1, -11)), dtype=float
)  # (side, dy px): centred above/below, or starting/ending 6 px right/left of it


def label_size(text: str) -> tuple[float, float]:
    """A label's width and height in pixels, generously (Plotly draws an average character narrower)."""
    return 0.62 * LABEL_FONT * max(visible_length(text), 1), 1.25 * LABEL_FONT


def _tier_scales(extent: tuple[float, float, float, float], min_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixels per data unit along x and y at the two ends of the sizes a tier is drawn at (its narrowest figure and
    the widest); placement is checked at both ends, which covers every size between (positions are linear in it)."""
    x0, x1, y0, y1 = extent
    narrowest = max(min_width, FIGURE_WIDTH_PX[0]) - PLOT_MARGIN_PX[1]
    widest = FIGURE_WIDTH_PX[1] - PLOT_MARGIN_PX[0]
    sx = np.array([narrowest, widest], dtype=float) / max(x1 - x0, 1e-12)
    sy = np.array(PLOT_HEIGHT_PX, dtype=float) / max(y1 - y0, 1e-12)
    return sx, sy


def _apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether boxes a and b ([..., (left, bottom, right, top), (narrowest, widest)], broadcasting) are apart at every
    size between the two ends: on the same side of each other, across or up, at both ends."""
    both = lambda cond: cond.all(axis=-1)  # noqa: E731
    return (
        both(b[..., 0, :] >= a[..., 2, :])
        | both(b[..., 2, :] <= a[..., 0, :])
        | both(b[..., 1, :] >= a[..., 3, :])
        | both(b[..., 3, :] <= a[..., 1, :])
    )


def place_labels(
    xy: np.ndarray, labels: list[str], extent: tuple[float, float, float, float]
) -> list[tuple[int, int, float, int]]:
    """For each point that gets a label, (index, side, dy, min_width): the narrowest tier from which it shows and the
    first offset whose box meets no label already placed and no other point's marker at any size that tier is drawn
    at. Points keep their order, narrow tiers first; those with no free place go unlabelled (hover names them)."""
    xy = np.asarray(xy, dtype=float).reshape(-1, 2)
    n = min(len(xy), MAX_LABELLED)
    size = np.array([label_size(text) for text in labels[:n]]).reshape(-1, 2)
    placed: list[tuple[int, int, int]] = []  # (point, offset, min_width)
    for min_width in LABEL_MIN_WIDTHS:
        sx, sy = _tier_scales(extent, min_width)
        px, py = (xy[:, :1] - extent[0]) * sx, (xy[:, 1:] - extent[2]) * sy  # [points, 2 sizes]
        markers = np.stack((px - 5, py - 5, px + 5, py + 5), axis=1)  # [points, 4, 2]
        cand = np.stack(
            _label_box(
                px[:n, None],
                py[:n, None],
                size[:, None, :],
                LABEL_OFFSETS[None, :, 0, None],
                LABEL_OFFSETS[None, :, 1, None],
            ),
            axis=2,
        )
        # [n, offsets, 4, 2]; a first cut: the markers each candidate might meet, those not apart from the box
        # around all its offsets
        outline = np.concatenate([cand[:, :, :2].min(axis=1), cand[:, :, 2:].max(axis=1)], axis=1)  # [n, 4, 2]
        near = ~_apart(outline[:, None], markers[None])  # [n, points]
        near[np.arange(n), np.arange(n)] = False  # its own marker is allowed
        taken = np.empty((n, 4, 2))  # the labels placed so far
        for j, (i, k, _) in enumerate(placed):  # earlier tiers', at these sizes
            taken[j] = cand[i, k]
        labelled = {i for i, *_ in placed}
        for i in (i for i in range(n) if i not in labelled):
            others = np.concatenate([markers[near[i]], taken[: len(placed)]])
            free = _apart(cand[i][:, None], others[None]).all(axis=1)  # [offsets]
            if free.any():
                k = int(np.argmax(free))
                taken[len(placed)] = cand[i, k]
                placed.append((i, k, min_width))
    return [(i, int(LABEL_OFFSETS[k, 0]), float(LABEL_OFFSETS[k, 1]), min_width) for i, k, min_width in placed]


def _label_box(x, y, size, side, dy) -> tuple:
    """(left, bottom, right, top) of a label of size (w, h) beside a point at (x, y), y growing upwards: centred
    above/below it (side 0), or starting 6 px right of it (side 1), or ending 6 px left of it (side -1); LABEL_GAP
    around it. Broadcasts (size's last axis is w, h)."""
    w, h = size[..., 0:1], size[..., 1:2]
    cx, cy = x + side * (6 + w / 2), y + dy
    return (cx - w / 2 - LABEL_GAP, cy - h / 2 - LABEL_GAP, cx + w / 2 + LABEL_GAP, cy + h / 2 + LABEL_GAP)


def pca_scatter(
    vocab_xy, vocab_labels: list[str], prompt_xy, prompt_labels: list[str], explained: tuple[float, float]
) -> go.Figure:
    """Token embeddings projected on their first two principal components: a vocabulary sample (grey) and
    the prompt's tokens (labelled where a label has room, see place_labels)."""
    v, p = _np(vocab_xy), _np(prompt_xy)
    vocab_labels, prompt_labels = escaped(vocab_labels), escaped(prompt_labels)
    fig = go.Figure()
    vocab_marker = dict(size=4, color="#b0b0b0", opacity=0.6)
    prompt_marker = dict(size=9, color="#d62728", line=dict(width=1, color="white"))
    # the vocabulary's many points drawn by WebGL; each point's hover names its token and its set
    for trace, xy, labels, name, marker, where in (
        (go.Scattergl, v, vocab_labels, f"vocabulary sample ({len(v):,})", vocab_marker, "vocabulary"),
        (go.Scatter, p, prompt_labels, f"prompt tokens ({len(p)})", prompt_marker, "prompt"),
    ):
        fig.add_trace(
            trace(
                x=xy[:, 0],
                y=xy[:, 1],
                mode="markers",
                name=name,
                marker=marker,
                customdata=np.asarray(labels, dtype=object),
                hovertemplate=f"%{{customdata}}<br>PC1 %{{x:.3f}}, PC2 %{{y:.3f}}<extra>{where}</extra>",
            )
        )
    both = np.concatenate([v.reshape(-1, 2), p.reshape(-1, 2)]) if len(p) else v.reshape(-1, 2)
    if len(p) and len(both):
        extent = (float(both[:, 0].min()), float(both[:, 0].max()), float(both[:, 1].min()), float(both[:, 1].max()))
        placed = place_labels(p, prompt_labels, extent)
        # in one go: fig.add_annotation validates the whole list again at each call
        fig.update_layout(
            annotations=[
                dict(
                    x=float(p[i, 0]),
                    y=float(p[i, 1]),
                    text=prompt_labels[i],
                    showarrow=False,
                    xanchor={0: "center", 1: "left", -1: "right"}[side],
                    xshift=6 * side,
                    yshift=dy,
                    font=dict(size=LABEL_FONT, color="#7a1c1c"),
                )
                for i, side, dy, _ in placed
            ],
            # display.show_figure hides each annotation where the figure is drawn narrower than this
            meta={ANNOTATION_MIN_WIDTH: [min_width for *_, min_width in placed]},
        )
    fig.update_xaxes(title_text=f"PC1 ({explained[0]:.1%} of variance)")
    fig.update_yaxes(title_text=f"PC2 ({explained[1]:.1%} of variance)")
    return apply_layout(
        fig, title="Token embeddings, first two principal components", height=520, legend=dict(orientation="h", y=-0.15)
    )
