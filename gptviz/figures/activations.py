"""Activations: residual-stream norms, MLP outputs and neurons, norm inputs, logit lens, head detectors."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import ATTENTION_SCALE, apply_layout, escaped, plotly_text, token_categories, token_category_axis
from .palette import sequential

ATTN_COLOR, MLP_COLOR, RESID_COLOR = "#1f77b4", "#ff7f0e", "#2ca02c"


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def percent_format(top: float) -> str:
    """A d3 percent format with enough decimals for ticks of a 0..top axis (top as a probability), so an
    untrained model's ~0.002% ticks do not all round to the same label."""
    step = max(top, 1e-12) * 100 / 5
    return f".{max(0, math.ceil(-math.log10(step)))}%"


def state_labels(n_layers: int) -> list[str]:
    """Names of the residual states: entering each block, then the last block's output."""
    return [f"into block {i}" for i in range(n_layers)] + ["output"]


def residual_norm_heatmap(norms, labels: list[str]) -> go.Figure:
    """[layers + 1, T] norm of the residual stream at each state (rows) and position (columns)."""
    z, labels = _np(norms), escaped(labels)
    rows = state_labels(z.shape[0] - 1)
    custom = np.stack(
        np.broadcast_arrays(np.asarray(rows, dtype=object)[:, None], np.asarray(labels, dtype=object)[None, :]), axis=-1
    )
    positions = np.broadcast_to(np.arange(z.shape[1], dtype=object)[None, :], z.shape)
    custom = np.concatenate([custom, positions[..., None]], axis=-1)
    columns = token_categories(labels)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=list(range(z.shape[0])),
            colorscale=sequential("Viridis"),
            customdata=custom,
            colorbar=dict(title="‖x‖"),
            hovertemplate="%{customdata[0]}<br>position %{customdata[2]}: %{customdata[1]}<br>norm %{z:.3f}"
            "<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="token", tickangle=-60, **token_category_axis(columns))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed")
    return apply_layout(
        fig, title="Residual-stream norm per layer and position", height=max(300, min(700, 140 + 28 * len(rows)))
    )


def residual_norm_lines(resid, attn, mlp, where: str) -> go.Figure:
    """Norm of the stream entering each block (and the output), with the norms of what attention and the
    MLP add inside each block. resid: [layers + 1]; attn, mlp: [layers]."""
    resid, attn, mlp = _np(resid), _np(attn), _np(mlp)
    L = len(attn)
    ticks = [f"block {i}" for i in range(L)] + ["output"]
    fig = go.Figure()
    for values, name, line, hook in (
        (resid, "residual stream (entering)", dict(color=RESID_COLOR, width=3), "resid"),
        (attn, "attention adds (hook_attn_out)", dict(color=ATTN_COLOR, dash="dot"), "attn_out"),
        (mlp, "MLP adds (hook_mlp_out)", dict(color=MLP_COLOR, dash="dash"), "mlp_out"),
    ):
        fig.add_trace(
            go.Scatter(
                x=list(range(len(values))),
                y=values,
                mode="lines+markers",
                name=name,
                line=line,
                customdata=ticks[: len(values)],
                hovertemplate=f"%{{customdata}}: ‖{hook}‖ = %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_xaxes(tickmode="array", tickvals=list(range(L + 1)), ticktext=ticks)
    fig.update_yaxes(title_text="L2 norm", rangemode="tozero")
    return apply_layout(
        fig, title=f"Norms per layer ({plotly_text(where)})", height=380, legend=dict(orientation="h", y=-0.2)
    )


def mlp_histograms(counts, edges) -> go.Figure:
    """One histogram per layer (rows) of the MLP activation outputs, on shared bins; colour = share of
    the layer's values in the bin (log scale)."""
    counts, edges = _np(counts).astype(float), _np(edges)
    share = counts / counts.sum(1, keepdims=True)
    centres = (edges[:-1] + edges[1:]) / 2
    with np.errstate(divide="ignore"):
        z = np.where(share > 0, np.log10(share), np.nan)
    L = counts.shape[0]
    custom = np.stack(
        [np.broadcast_to(edges[:-1], share.shape), np.broadcast_to(edges[1:], share.shape), counts, share], axis=-1
    )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=centres,
            y=list(range(L)),
            colorscale=sequential("Magma_r"),
            customdata=custom,
            colorbar=dict(
                title="share",
                tickvals=[0, -1, -2, -3, -4, -5, -6],
                ticktext=["100%", "10%", "1%", "0.1%", "0.01%", "1e-5", "1e-6"],
            ),
            hovertemplate="layer %{y}<br>[%{customdata[0]:.3f}, %{customdata[1]:.3f})<br>%{customdata[2]:,.0f} "
            "values (%{customdata[3]:.3%})<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="activation value (mlp.hook_post)")
    fig.update_yaxes(title_text="layer", tickmode="array", tickvals=list(range(L)), autorange="reversed")
    return apply_layout(
        fig, title="Distribution of MLP activations, one histogram per layer", height=max(280, min(700, 120 + 30 * L))
    )


def top_neurons_bar(rows: list[tuple[int, int, float]], token: str) -> go.Figure:
    """Horizontal bars of the most active neurons (layer, neuron, activation) at one token."""
    names = [f"L{layer} N{neuron}" for layer, neuron, _ in rows]
    values = [v for _, _, v in rows]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            marker_color=MLP_COLOR,
            customdata=[[layer, neuron] for layer, neuron, _ in rows],
            hovertemplate="layer %{customdata[0]}, neuron %{customdata[1]}<br>activation %{x:.4f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="activation (mlp.hook_post)")
    return apply_layout(fig, title=f"Most active neurons at {plotly_text(token)}", height=max(260, 60 + 26 * len(rows)))


def norm_stats_figure(names: list[str], mean, var, mean_square=None, rms: bool = False) -> go.Figure:
    """Mean (top) and variance or mean square (bottom) of each norm's input: the average over positions
    as a marker, the range over positions as a bar."""
    mean, var = _np(mean), _np(var)
    second = _np(mean_square) if rms else var
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("mean over d_model", "mean square over d_model" if rms else "variance over d_model"),
    )
    x = list(range(len(names)))
    for row, data, color in ((1, mean, "#9467bd"), (2, second, "#8c564b")):
        avg, lo, hi = data.mean(1), data.min(1), data.max(1)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=avg,
                mode="markers+lines",
                line=dict(color=color),
                showlegend=False,
                error_y=dict(type="data", symmetric=False, array=hi - avg, arrayminus=avg - lo, color=color),
                customdata=np.stack([np.asarray(names, dtype=object), lo, hi], axis=-1),
                hovertemplate="%{customdata[0]}<br>average over positions %{y:.4f}<br>range "
                "[%{customdata[1]:.4f}, %{customdata[2]:.4f}]<extra></extra>",
            ),
            row=row,
            col=1,
        )
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=names, tickangle=-45, row=2, col=1)
    fig.update_yaxes(type="log" if (second > 0).all() else "linear", row=2, col=1)
    return apply_layout(fig, title="What enters each norm (average over positions; bars: min to max)", height=520)


# The logit lens's cells on a desktop: about 780 px of plot across the prompt. Plotly sizes "auto" cell text so the
# longest one fits its cell (0.65 em a character); a token is written when at LENS_MIN_FONT px it fits.
LENS_PLOT_PX = 780
LENS_MIN_FONT = 9


def lens_chars(T: int) -> int:
    """How many characters a cell of a T-position logit lens holds at LENS_MIN_FONT px on a desktop."""
    return int(LENS_PLOT_PX / max(T, 1) / (0.65 * LENS_MIN_FONT))


def lens_cell_text(top_labels: list[list[str]], T: int) -> list[list[str]]:
    """Each cell's top token (escaped) where it fits (lens_chars), else empty: hover names every cell's token.
    Plotly sizes the text by its longest string as written, entities and all ("&amp;" is 5), so that length counts."""
    fits = lens_chars(T)
    return [[label if len(label) <= fits else "" for label in row] for row in top_labels]


def logit_lens_heatmap(
    top_probs, top_labels: list[list[str]], position_labels: list[str], target_labels: list[str], target_probs
) -> go.Figure:
    """[layers + 1, T]: each cell is the most likely next token read off that residual state through ln_f
    and the unembedding, coloured by its probability."""
    z, tp = _np(top_probs), _np(target_probs)
    S, T = z.shape
    top_labels = [escaped(row) for row in top_labels]
    position_labels, target_labels = escaped(position_labels), escaped(target_labels)
    rows = state_labels(S - 1)
    top = np.asarray(top_labels, dtype=object)
    custom = np.stack(
        [
            np.broadcast_to(np.asarray(rows, dtype=object)[:, None], (S, T)),
            np.broadcast_to(np.asarray(position_labels, dtype=object)[None, :], (S, T)),
            top,
            np.broadcast_to(np.asarray(target_labels, dtype=object)[None, :], (S, T)),
            tp,
            np.broadcast_to(np.arange(T, dtype=object)[None, :], (S, T)),
        ],  # the position: %{x} is its tick text
        axis=-1,
    )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=token_categories(position_labels),
            y=list(range(S)),
            zmin=0,
            zmax=float(z.max()),
            colorscale=sequential(ATTENTION_SCALE),
            customdata=custom,
            text=lens_cell_text(top_labels, T),
            texttemplate="%{text}",  # textfont's size "auto": fits every cell
            colorbar=dict(
                title="top prob.", tickformat=percent_format(float(z.max())), nticks=4
            ),  # 5 rows: 4 ticks fit
            hovertemplate="%{customdata[0]}, position %{customdata[5]}: %{customdata[1]}<br>"
            "top next token: %{customdata[2]} (%{z:.1%})<br>"
            "model's final prediction %{customdata[3]}: %{customdata[4]:.1%}<extra></extra>",
        )
    )
    # The colour scale runs from 0 to the largest probability shown (an untrained model's are all ~1/vocab).
    fig.update_xaxes(
        title_text="position (input token)", tickangle=-60, **token_category_axis(token_categories(position_labels))
    )
    fig.update_yaxes(tickmode="array", tickvals=list(range(S)), ticktext=rows, autorange="reversed")
    return apply_layout(
        fig, title="Logit lens: the top next token at every layer and position", height=max(300, min(700, 140 + 32 * S))
    )


def final_prediction_lines(target_probs, position: int, position_label: str, target_label: str) -> go.Figure:
    """Probability of the model's final prediction read off each residual state: at one position, and the
    mean over all positions (each position's own final prediction)."""
    tp = _np(target_probs)
    rows = state_labels(tp.shape[0] - 1)
    position_label, target_label = plotly_text(position_label), plotly_text(target_label)
    x = list(range(len(rows)))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x,
            y=tp[:, position],
            mode="lines+markers",
            name=f"at {position_label} (predicts {target_label})",
            line=dict(width=3, color="#d62728"),
            customdata=rows,
            hovertemplate="%{customdata}: %{y:.2%}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=tp.mean(1),
            mode="lines+markers",
            name="mean over positions",
            line=dict(dash="dot", color="#7f7f7f"),
            customdata=rows,
            hovertemplate="%{customdata}: %{y:.2%}<extra>mean</extra>",
        )
    )
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=rows)
    fig.update_yaxes(
        title_text="probability of the final prediction", rangemode="tozero", tickformat=percent_format(float(tp.max()))
    )
    return apply_layout(
        fig, title="How early the final prediction appears", height=380, legend=dict(orientation="h", y=-0.2)
    )


DETECTOR_TITLES = {"previous": "previous-token", "duplicate": "duplicate-token", "induction": "induction"}


def head_detector_heatmaps(scores: dict[str, object]) -> go.Figure:
    """One [layers x heads] heatmap per detector on a shared 0..1 scale."""
    names = list(scores)
    fig = make_subplots(
        rows=1, cols=len(names), horizontal_spacing=0.06, subplot_titles=[DETECTOR_TITLES.get(n, n) for n in names]
    )
    for col, name in enumerate(names, start=1):
        z = _np(scores[name])
        L, H = z.shape
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(range(H)),
                y=list(range(L)),
                coloraxis="coloraxis",
                name=name,
                hovertemplate=f"{DETECTOR_TITLES.get(name, name)}<br>layer %{{y}}, head %{{x}}<br>score %{{z:.3f}}"
                "<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else None, row=1, col=col)
        fig.update_yaxes(autorange="reversed", dtick=1 if L <= 16 else None, row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    L = _np(scores[names[0]]).shape[0]
    return apply_layout(
        fig,
        height=max(280, min(640, 140 + 28 * L)),
        coloraxis=dict(colorscale=sequential(ATTENTION_SCALE), cmin=0, cmax=1, colorbar=dict(title="score")),
    )
