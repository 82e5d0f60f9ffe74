"""Explainers: activation functions, the causal mask, and pre-norm vs post-norm block diagrams."""

from __future__ import annotations

import functools

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import FONT, MASKED_COLOR, apply_layout, escaped, title_room, token_categories, token_category_axis
from .palette import top_colour

ACTIVATION_NAMES = {"gelu": "GELU (exact, erf)", "gelu_tanh": "GELU (tanh approx.)", "relu": "ReLU"}
ACTIVATION_COLORS = {"gelu": "#1f77b4", "gelu_tanh": "#ff7f0e", "relu": "#2ca02c"}


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def activation_figure(
    x, curves: dict[str, tuple], highlight: str | None, differ: list[tuple[float, float]], tol: float
) -> go.Figure:
    """Rows: the functions, their derivatives, and GELU exact minus GELU tanh. The model's own activation
    is drawn thick; shaded: where the functions differ by more than `tol`."""
    x = _np(x)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        row_heights=[0.42, 0.36, 0.22],
        subplot_titles=("f(x)", "f′(x) (autograd)", "GELU exact − GELU tanh"),
    )
    for name, (y, dy) in curves.items():
        own = name == highlight
        shown = ACTIVATION_NAMES.get(name, name)
        label = shown + (" — this model" if own else "")
        style = dict(color=ACTIVATION_COLORS.get(name), width=5 if own else 2, dash=None if own else "dot")
        for row, values, what in ((1, y, "f(x)"), (2, dy, "f′(x)")):  # one legend entry: the function's row
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_np(values),
                    mode="lines",
                    name=label,
                    legendgroup=name,
                    line=style,
                    showlegend=row == 1,
                    hovertemplate=f"{shown}<br>x=%{{x:.3f}}<br>{what}=%{{y:.5f}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    if "gelu" in curves and "gelu_tanh" in curves:
        diff = _np(curves["gelu"][0]) - _np(curves["gelu_tanh"][0])
        fig.add_trace(
            go.Scatter(
                x=x,
                y=diff,
                mode="lines",
                name="exact − tanh",
                showlegend=False,
                line=dict(color="#7f7f7f"),
                hovertemplate="x=%{x:.3f}<br>difference %{y:.2e}<extra></extra>",
            ),
            row=3,
            col=1,
        )
    for x0, x1 in differ:
        for row in (1, 2):
            fig.add_vrect(x0=x0, x1=x1, fillcolor="#ffd92f", opacity=0.18, line_width=0, row=row, col=1)
    fig.update_xaxes(title_text="x", row=3, col=1)
    # the legend under the x axis: above the plot it wrapped to two lines on a phone and covered the "f(x)" title
    return apply_layout(fig, height=740, legend=dict(orientation="h", yanchor="top", y=-0.08, x=0))


def causal_mask_figure(mask, labels: list[str]) -> go.Figure:
    """[N, N] causal mask: query rows, key columns; allowed cells blue, masked cells grey."""
    m, labels = _np(mask).astype(float), escaped(labels)
    n = m.shape[0]
    lab = np.asarray(labels, dtype=object)
    pos = np.arange(n, dtype=object)
    custom = np.stack(np.broadcast_arrays(lab[:, None], lab[None, :], pos[:, None], pos[None, :]), axis=-1)
    cats = token_categories(labels)  # category axes thin their labels to the width drawn (28 ran together on a phone)
    fig = go.Figure(
        go.Heatmap(
            z=m,
            x=cats,
            y=cats,
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1 if n <= 48 else 0,
            ygap=1 if n <= 48 else 0,
            colorscale=[[0, MASKED_COLOR], [1, top_colour("#2b6cb0")]],
            customdata=custom,
            text=np.where(m > 0, "may attend", "masked: score set to −∞ before softmax"),
            hovertemplate="query %{customdata[2]}: %{customdata[0]}<br>key %{customdata[3]}: %{customdata[1]}"
            "<br>%{text}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="key (attended to)", side="top", constrain="domain", **token_category_axis(cats))
    fig.update_yaxes(
        title_text="query (attending)",
        autorange="reversed",
        scaleanchor="x",
        constrain="domain",
        **token_category_axis(cats),
    )
    allowed = int(m.sum())
    apply_layout(fig, title=f"Causal mask for {n} tokens: {allowed} of {n * n} pairs allowed", height=540)
    # the key axis sits on top: its tick labels and title need the room the figure title would otherwise overlap
    fig.update_layout(margin=dict(t=title_room() + 70))
    return fig


# Block diagrams: nodes along a vertical spine (bottom = input), residual skips drawn on the right.
_KIND_COLORS = {"norm": "#e9d8fd", "attn": "#bee3f8", "mlp": "#c6f6d5", "add": "#ffffff", "io": "#edf2f7"}


# A block's two sub-layers: (their LayerNorm, label, kind, hook on the sub-layer's output, hook on the stream after it)
_SUBLAYERS = (
    ("LayerNorm ln_1", "causal self-attention", "attn", "hook_attn_out", "hook_resid_mid"),
    ("LayerNorm ln_2", "MLP", "mlp", "hook_mlp_out", "hook_resid_post"),
)


def block_layout(norm: str) -> tuple[list[tuple[str, str, str]], list[tuple[int, int]]]:
    """(nodes as (label, kind, hook name shown beside it), skips as (from node, to '+' node)) for one block. The two
    wirings differ only in where each sub-layer's LayerNorm sits: before it (pre), or after its '+' (post), where
    its output is the stream the next hook reads."""
    if norm not in ("pre", "post"):
        raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
    nodes = [("x (residual stream)", "io", "hook_resid_pre")]
    skips = []
    for ln, label, kind, out_hook, stream_hook in _SUBLAYERS:
        if norm == "pre":
            group = [(ln, "norm", ""), (label, kind, out_hook), ("+", "add", stream_hook)]
        else:
            group = [(label, kind, out_hook), ("+", "add", ""), (ln, "norm", stream_hook)]
        # the skip leaves from the node below the sub-layer and joins at its '+'
        skips.append((len(nodes) - 1, len(nodes) + [k for _, k, _ in group].index("add")))
        nodes += group
    nodes.append(("next block (or ln_f)", "io", ""))
    return nodes, skips


def block_diagram(norm: str, highlight: bool = False, compact: bool = False) -> go.Figure:
    """A pre-norm (GPT-2) or post-norm (GPT-1) block drawn with shapes and annotations. `compact`: for a narrow
    column beside other figures (no hook names, smaller text, 320 px tall). A new figure each call, built from a
    kept description (building it shape by shape validated the figure again at every shape, at every run of two
    pages)."""
    return go.Figure(_block_diagram(norm, highlight, compact))


@functools.lru_cache(maxsize=8)
def _block_diagram(norm: str, highlight: bool, compact: bool) -> dict:
    nodes, skips = block_layout(norm)
    if compact:  # the longest label, shortened to fit a box a phone draws 100 px wide
        nodes = [
            ("self-attention" if label == "causal self-attention" else label, kind, hook) for label, kind, hook in nodes
        ]
    fig = go.Figure()
    dy, half_w, half_h = 1.0, 1.1, 0.28
    ys = [i * dy for i in range(len(nodes))]
    for (label, kind, hook), y in zip(nodes, ys, strict=True):
        if kind == "add":
            fig.add_shape(
                type="circle",
                x0=-0.2,
                x1=0.2,
                y0=y - 0.2,
                y1=y + 0.2,
                line=dict(color="#2d3748"),
                fillcolor=_KIND_COLORS[kind],
            )
        else:
            fig.add_shape(
                type="rect",
                x0=-half_w,
                x1=half_w,
                y0=y - half_h,
                y1=y + half_h,
                line=dict(color="#2d3748", width=2 if kind == "norm" else 1),
                fillcolor=_KIND_COLORS[kind],
            )
        fig.add_annotation(
            x=0, y=y, text=label, showarrow=False, font=dict(size=(13 if kind != "add" else 16) - 3 * compact)
        )
        if hook and not compact:
            fig.add_annotation(
                x=-half_w - 0.1, y=y, text=hook, showarrow=False, xanchor="right", font=dict(size=10, color="#718096")
            )
    for i in range(len(nodes) - 1):  # the spine, bottom to top
        y0 = ys[i] + (0.2 if nodes[i][1] == "add" else half_h)
        y1 = ys[i + 1] - (0.2 if nodes[i + 1][1] == "add" else half_h)
        _arrow(fig, (0, y0), (0, y1), 1.5, "#2d3748")
    skip_x = half_w + 0.5
    for start, end in skips:  # the residual connection: around the sub-layer and into the '+'
        y0, y1 = ys[start] + (0.2 if nodes[start][1] == "add" else half_h) + 0.15, ys[end]
        fig.add_shape(
            type="path", path=f"M 0,{y0} L {skip_x},{y0} L {skip_x},{y1}", line=dict(color="#c05621", width=2)
        )
        _arrow(fig, (skip_x, y1), (0.2, y1), 2, "#c05621")
        fig.add_annotation(
            x=skip_x + 0.05,
            y=(y0 + y1) / 2,
            text="residual",
            textangle=-90,
            showarrow=False,
            xanchor="left",
            font=dict(size=10, color="#c05621"),
        )
    title = (
        ("Pre-norm" if norm == "pre" else "Post-norm")
        + ("" if compact else " block")
        + (" (GPT-2)" if norm == "pre" else " (GPT-1)")
    )
    fig.update_xaxes(visible=False, range=[-1.2, 2.0] if compact else [-2.6, 2.3])
    fig.update_yaxes(visible=False, range=[-0.6, ys[-1] + 0.6])
    fig.update_layout(showlegend=False, plot_bgcolor="white")
    # the whole title through apply_layout, which wraps it and makes room for its lines
    apply_layout(fig, title=title + (" — the sidebar's model" if highlight else ""), height=320 if compact else 560)
    fig.update_layout(font=FONT, xaxis_fixedrange=True, yaxis_fixedrange=True)
    return fig.to_dict()


def _arrow(fig: go.Figure, tail: tuple[float, float], head: tuple[float, float], width: float, color: str) -> None:
    """An arrow from `tail` to `head` in data coordinates: an annotation with no text."""
    fig.add_annotation(
        x=head[0],
        y=head[1],
        ax=tail[0],
        ay=tail[1],
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=2,
        arrowsize=1.2,
        arrowwidth=width,
        arrowcolor=color,
    )
