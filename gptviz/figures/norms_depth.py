"""Figures for the pre-norm vs post-norm page as the model gets deeper: the last layer's gradient norm against depth,
and the paper's setting (each layer's FFN gradient with its spread over seeds, and its trend with depth). Pure
Plotly: arrays in, go.Figure out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import apply_layout
from .norms import WIRING_COLORS, WIRING_NAMES, log_ticks, reference_line, sd_band


def depth_sweep(sweep: dict[str, np.ndarray], what: str, exponents: dict[str, float] | None = None) -> go.Figure:
    """Last-layer gradient norm against depth (log-log) for both wirings, with a 1/sqrt(L) guide through
    pre-norm's first point."""
    depth = np.asarray(sweep["depth"], float)
    fig = go.Figure()
    for norm in ("pre", "post"):
        label = WIRING_NAMES[norm]
        if exponents and norm in exponents:
            label += f": fitted L^{exponents[norm]:+.2f}"
        fig.add_trace(
            go.Scatter(
                x=depth,
                y=sweep[norm],
                mode="lines+markers",
                name=label,
                line=dict(color=WIRING_COLORS[norm], width=2.5),
                hovertemplate=f"%{{x}} layers<br>{WIRING_NAMES[norm]}: %{{y:.4g}}<extra></extra>",
            )
        )
    guide = sweep["pre"][0] * np.sqrt(depth[0] / depth)
    fig.add_trace(
        go.Scatter(
            x=depth,
            y=guide,
            mode="lines",
            name="∝ 1/√L (Xiong et al., pre-norm bound)",
            line=dict(color="#888", dash="dot"),
            hovertemplate="%{x} layers<br>1/√L guide: %{y:.4g}<extra></extra>",
        )
    )
    fig.update_xaxes(type="log", title_text="layers (L)", tickvals=depth, ticktext=[str(int(d)) for d in depth])
    fig.update_yaxes(
        type="log", title_text="last layer's gradient norm", **log_ticks(sweep["pre"], sweep["post"], guide)
    )
    # two lines: in a half-width column one line of title ran off the figure's edge
    return apply_layout(
        fig,
        f"Last layer's gradient norm ({what})<br>as the model gets deeper",
        height=440,
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0),
    )


def ffn_profiles(
    panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], what: str = "FFN gradient norm"
) -> go.Figure:
    """One panel per setting: each wiring's per-layer mean with a ± sd band ({title: {"pre"/"post": (mean, sd)}})."""
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels), horizontal_spacing=0.07)
    for col, by_norm in enumerate(panels.values(), start=1):
        for norm, (mean, sd) in by_norm.items():
            for trace in sd_band(
                list(range(len(mean))), mean, sd, WIRING_COLORS[norm], WIRING_NAMES[norm], col == 1, norm
            ):
                fig.add_trace(trace, row=1, col=col)
        fig.update_xaxes(title_text="layer", dtick=1, row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(title_text=what, row=1, col=1)
    return apply_layout(fig, None, height=380, legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))


def depth_bands(
    depths, mean: dict[str, np.ndarray], sd: dict[str, np.ndarray], exponents: dict[str, float], what: str
) -> go.Figure:
    fig = go.Figure()
    for norm in ("pre", "post"):
        for trace in sd_band(
            depths,
            mean[norm],
            sd[norm],
            WIRING_COLORS[norm],
            f"{WIRING_NAMES[norm]}: ∝ L^{exponents[norm]:+.2f}",
            True,
            norm,
        ):
            fig.add_trace(trace)
    ref = mean["pre"][0] * (np.asarray(depths, float) / depths[0]) ** -0.5
    fig.add_trace(reference_line(depths, ref, "L^(−1/2) from the first pre-norm point"))
    fig.update_xaxes(type="log", title_text="layers L", tickvals=list(depths))
    fig.update_yaxes(type="log", title_text=what)
    return apply_layout(fig, None, height=340, legend=dict(orientation="h", yanchor="top", y=-0.25, x=0))
