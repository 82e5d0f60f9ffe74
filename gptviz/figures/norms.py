"""Figures for the pre-norm vs post-norm page, per layer: both wirings' gradient norms and their ratio, and the
residual stream's and sub-layers' scales; with what the page's other figures share (the wirings' colours and names,
log-axis ticks, a reference line, a mean ± sd band). The attention panels are in norms_attention.py, the depth sweeps
in norms_depth.py, the training curves in norms_training.py. Pure Plotly: arrays in, go.Figure out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import apply_layout, title_room

WIRING_COLORS = {"pre": "#1f77b4", "post": "#d62728"}
WIRING_NAMES = {"pre": "pre-norm (GPT-2)", "post": "post-norm (GPT-1)"}
RATIO_COLOR = "#6a3d9a"


def log_ticks(*arrays, max_ticks: int = 8) -> dict:
    """Readable ticks for a log axis over the values given: 1-2-5 steps, or powers of ten when the values
    span many decades (Plotly's own minor labels on a short log range read as bare digits)."""
    values = np.concatenate([np.asarray(a, float).ravel() for a in arrays])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return {}
    lo, hi = np.floor(np.log10(values.min())), np.ceil(np.log10(values.max()))
    for mantissas in ((1, 1.5, 2, 3, 4, 5, 7), (1, 2, 3, 5), (1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**e for e in np.arange(lo, hi + 1) for m in mantissas]
        ticks = [t for t in ticks if values.min() / 1.5 <= t <= values.max() * 1.5]
        if len(ticks) <= max_ticks:
            break
    if len(ticks) > max_ticks:  # many decades: every k-th power of ten
        step = int(np.ceil(len(ticks) / max_ticks))
        ticks = ticks[::step]
    if len(ticks) < 2:  # a very narrow range: its ends
        ticks = [float(values.min()), float(values.max())]
    return dict(tickmode="array", tickvals=ticks, ticktext=[f"{t:.3g}" for t in ticks])


def reference_line(x, y, name: str) -> go.Scatter:
    """A dotted reference line as a trace (an annotation on a log axis would be placed in log units)."""
    return go.Scatter(
        x=list(x),
        y=list(y),
        mode="lines",
        name=name,
        line=dict(color="#888", dash="dot", width=1),
        hovertemplate=f"{name}<extra></extra>",
    )


def sd_band(x, mean, sd, color: str, name: str, showlegend: bool, group: str) -> list[go.Scatter]:
    """A line with a shaded mean ± sd band."""
    mean, sd = np.asarray(mean, float), np.asarray(sd, float)
    lo, hi = np.clip(mean - sd, 1e-12, None), mean + sd
    return [
        go.Scatter(
            x=list(x) + list(x)[::-1],
            y=list(hi) + list(lo[::-1]),
            fill="toself",
            fillcolor=color,
            mode="lines",
            opacity=0.18,
            line=dict(width=0),
            hoverinfo="skip",
            showlegend=False,
            legendgroup=group,
        ),
        go.Scatter(
            x=list(x),
            y=mean,
            mode="lines+markers",
            name=name,
            line=dict(color=color, width=2.5),
            marker=dict(size=5),
            showlegend=showlegend,
            legendgroup=group,
            customdata=sd,
            hovertemplate=f"{name}<br>%{{x}}: %{{y:.4g}} ± %{{customdata:.2g}}<extra></extra>",
        ),
    ]


def gradient_norms(
    pre: np.ndarray, post: np.ndarray, what: str = "gradient norm", log_y: bool = True, title: str | None = None
) -> go.Figure:
    """Two stacked panels sharing the layer axis: both wirings' per-layer gradient norms, then post/pre."""
    pre, post = np.asarray(pre, float), np.asarray(post, float)
    layers = list(range(len(pre)))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.06)
    for norm, values in (("pre", pre), ("post", post)):
        fig.add_trace(
            go.Scatter(
                x=layers,
                y=values,
                mode="lines+markers",
                name=WIRING_NAMES[norm],
                line=dict(color=WIRING_COLORS[norm], width=2.5),
                marker=dict(size=6),
                hovertemplate=f"layer %{{x}}<br>{WIRING_NAMES[norm]}: %{{y:.4g}}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    ratio = post / pre
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=ratio,
            mode="lines+markers",
            name="post / pre",
            line=dict(color=RATIO_COLOR, width=2.5),
            customdata=np.stack([pre, post], axis=-1),
            hovertemplate="layer %{x}<br>post / pre: %{y:.3g}<br>pre %{customdata[0]:.4g}, "
            "post %{customdata[1]:.4g}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.add_trace(reference_line(layers, [1.0] * len(layers), "post = pre"), row=2, col=1)
    fig.update_yaxes(
        type="log" if log_y else "linear", title_text=what, row=1, col=1, **(log_ticks(pre, post) if log_y else {})
    )
    fig.update_yaxes(type="log", title_text="post / pre", row=2, col=1, **log_ticks(ratio, [1.0]))
    fig.update_xaxes(title_text="layer (input → output)", dtick=1 if len(layers) <= 24 else 4, row=2, col=1)
    fig.update_xaxes(dtick=1 if len(layers) <= 24 else 4, row=1, col=1)
    # the legend below the layer axis: above the plot, the hover toolbar covered its last entry
    apply_layout(
        fig, title, height=540, hovermode="x unified", legend=dict(orientation="h", yanchor="top", y=-0.16, x=0)
    )
    return fig


def activation_scales(
    resid_norm: dict[str, np.ndarray],
    resid_std: dict[str, np.ndarray],
    attn_std: dict[str, np.ndarray],
    mlp_std: dict[str, np.ndarray],
    d_model: int,
) -> go.Figure:
    """Top: the residual stream's mean L2 norm per token (embeddings, then after each block), with
    sqrt(d_model) marked (the norm of a unit-variance vector, where post-norm's LayerNorm puts it).
    Below: the standard deviation of what each attention and MLP sub-layer adds."""
    # stacked, not side by side: on a phone two panels of about 150 px ran their titles and block numbers together
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.2,
        subplot_titles=("Residual stream: mean L2 norm", "Sub-layer outputs: standard deviation"),
    )
    n = len(next(iter(resid_norm.values())))
    x = list(range(n))
    labels = ["embeddings"] + [f"after block {i}" for i in range(n - 1)]
    for norm in ("pre", "post"):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=resid_norm[norm],
                mode="lines+markers",
                name=WIRING_NAMES[norm],
                legendgroup=norm,
                line=dict(color=WIRING_COLORS[norm], width=2.5),
                customdata=np.stack([labels, np.round(resid_std[norm], 5)], axis=-1),
                hovertemplate=f"%{{customdata[0]}}<br>{WIRING_NAMES[norm]}: norm %{{y:.4g}}, "
                f"std %{{customdata[1]}}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        for kind, values, dash in (("attention", attn_std[norm], "solid"), ("MLP", mlp_std[norm], "dash")):
            fig.add_trace(
                go.Scatter(
                    x=list(range(len(values))),
                    y=values,
                    mode="lines+markers",
                    legendgroup=norm,
                    name=f"{norm}-norm {kind} output",
                    line=dict(color=WIRING_COLORS[norm], dash=dash, width=2),
                    marker=dict(symbol="circle" if kind == "attention" else "diamond", size=6),
                    hovertemplate=f"block %{{x}}<br>{norm}-norm {kind} output std: %{{y:.4g}}<extra></extra>",
                ),
                row=2,
                col=1,
            )
    fig.add_trace(reference_line(x, [np.sqrt(d_model)] * n, f"√d_model = {np.sqrt(d_model):.3g}"), row=1, col=1)
    step = 1 if n <= 25 else 4
    fig.update_xaxes(
        tickmode="array",
        tickvals=x[::step],
        ticktext=(["emb"] + [str(i) for i in range(n - 1)])[::step],
        title_text="residual stream after block",
        row=1,
        col=1,
    )
    fig.update_xaxes(title_text="block", dtick=step, row=2, col=1)
    fig.update_yaxes(
        type="log", title_text="L2 norm", row=1, col=1, **log_ticks(*resid_norm.values(), [np.sqrt(d_model)])
    )
    fig.update_yaxes(type="log", title_text="std", row=2, col=1, **log_ticks(*attn_std.values(), *mlp_std.values()))
    apply_layout(fig, height=680, legend=dict(orientation="h", yanchor="top", y=-0.12, x=0))
    fig.update_layout(margin=dict(t=title_room()))  # the first panel's title below the toolbar strip
    return fig
