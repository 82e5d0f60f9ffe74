"""Figures for the pre-norm vs post-norm page: per-layer lines for the two wirings, attention side by side
with their difference, and the depth sweep. Pure Plotly: arrays in, go.Figure out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    ATTENTION_SCALE,
    DIVERGING_SCALE,
    MASKED_COLOR,
    apply_layout,
    title_room,
    token_axis,
    token_categories,
    token_category_axis,
)
from .palette import diverging, sequential
from .training import plain

WIRING_COLORS = {"pre": "#1f77b4", "post": "#d62728"}
WIRING_NAMES = {"pre": "pre-norm (GPT-2)", "post": "post-norm (GPT-1)"}
RATIO_COLOR = "#6a3d9a"


def _layers(n: int) -> list[int]:
    return list(range(n))


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


def _reference(x, y, name: str) -> go.Scatter:
    """A dotted reference line as a trace (an annotation on a log axis would be placed in log units)."""
    return go.Scatter(
        x=list(x),
        y=list(y),
        mode="lines",
        name=name,
        line=dict(color="#888", dash="dot", width=1),
        hovertemplate=f"{name}<extra></extra>",
    )


def gradient_norms(
    pre: np.ndarray, post: np.ndarray, what: str = "gradient norm", log_y: bool = True, title: str | None = None
) -> go.Figure:
    """Two stacked panels sharing the layer axis: both wirings' per-layer gradient norms, then post/pre."""
    pre, post = np.asarray(pre, float), np.asarray(post, float)
    layers = _layers(len(pre))
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
    fig.add_trace(_reference(layers, [1.0] * len(layers), "post = pre"), row=2, col=1)
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
    fig.add_trace(_reference(x, [np.sqrt(d_model)] * n, f"√d_model = {np.sqrt(d_model):.3g}"), row=1, col=1)
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


def _masked(pattern: np.ndarray) -> np.ndarray:
    """The causal mask's upper triangle as NaN, so it shows as the masked colour, not as a zero weight."""
    z = np.array(pattern, dtype=float)
    z[np.triu_indices(z.shape[0], k=1)] = np.nan
    return z


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
    qs, ks = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    custom = np.stack(
        [np.array(labels, dtype=object)[qs], np.array(labels, dtype=object)[ks], _masked(pre), _masked(post), qs, ks],
        axis=-1,
    )
    hover = (
        "query %{customdata[4]} %{customdata[0]}<br>key %{customdata[5]} %{customdata[1]}<br>pre "
        "%{customdata[2]:.3f}, post %{customdata[3]:.3f}<extra></extra>"
    )
    # category axes thin their own labels to the width drawn (a phone's 100 px of heatmap)
    names = token_categories(labels)
    axis = token_category_axis(names)
    figures = []
    for name, z, scale, lo, hi, bar in (
        (panel_names[0], _masked(pre), lambda: sequential(ATTENTION_SCALE), 0, 1, "weight"),
        (panel_names[1], _masked(post), lambda: sequential(ATTENTION_SCALE), 0, 1, "weight"),
        (panel_names[2], diff, lambda: diverging(DIVERGING_SCALE), -vmax, vmax, "post − pre"),
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
                hovertemplate=hover,
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
    T, z = len(labels), _masked(pattern)
    qs, ks = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    custom = np.stack([np.array(labels, dtype=object)[qs], np.array(labels, dtype=object)[ks], qs, ks], axis=-1)
    names = token_categories(labels)
    axis = token_category_axis(names)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=names,
            colorscale=sequential(ATTENTION_SCALE),
            zmin=0,
            zmax=1,
            customdata=custom,
            hoverongaps=False,
            colorbar=dict(title=dict(text="weight", side="top"), thickness=10, len=0.8),
            hovertemplate="query %{customdata[2]} %{customdata[0]}<br>key %{customdata[3]} "
            "%{customdata[1]}<br>weight %{z:.3f}<extra></extra>",
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


def _band(x, mean, sd, color: str, name: str, showlegend: bool, group: str) -> list[go.Scatter]:
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


def ffn_profiles(
    panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], what: str = "FFN gradient norm"
) -> go.Figure:
    """One panel per setting: each wiring's per-layer mean with a ± sd band ({title: {"pre"/"post": (mean, sd)}})."""
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels), horizontal_spacing=0.07)
    for col, (title, by_norm) in enumerate(panels.items(), start=1):
        for norm, (mean, sd) in by_norm.items():
            for trace in _band(_layers(len(mean)), mean, sd, WIRING_COLORS[norm], WIRING_NAMES[norm], col == 1, norm):
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
        for trace in _band(
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
    fig.add_trace(_reference(depths, ref, "L^(−1/2) from the first pre-norm point"))
    fig.update_xaxes(type="log", title_text="layers L", tickvals=list(depths))
    fig.update_yaxes(type="log", title_text=what)
    return apply_layout(fig, None, height=340, legend=dict(orientation="h", yanchor="top", y=-0.25, x=0))


def stage_history(
    runs: dict[str, list[dict]],
    boundaries: list[tuple[int, str]],
    formed: dict[str, dict[str, int]],
    key: str = "val_loss",
) -> go.Figure:
    """Every stage's logged losses on one cumulative step axis ({run: records}), dotted lines at the stage
    boundaries, and a marker where each run's heads formed ({run: {"previous-token": step, ...}})."""
    fig = go.Figure()
    colors = {n: WIRING_COLORS["pre" if "pre" in n else "post"] for n in runs}
    for j, (name, records) in enumerate(runs.items()):
        train = [(r["step"], r["train_loss"]) for r in records]
        val = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        fig.add_trace(
            go.Scatter(
                x=[s for s, _ in train],
                y=[v for _, v in train],
                mode="lines",
                name=f"{name}: train",
                line=dict(color=colors[name], width=1),
                opacity=0.45,
                legendgroup=name,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[s for s, _ in val],
                y=[v for _, v in val],
                mode="lines+markers",
                name=f"{name}: held-out",
                line=dict(color=colors[name], width=2.5),
                legendgroup=name,
            )
        )
        for i, (what, step) in enumerate(formed.get(name, {}).items()):
            if step is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[step],
                    y=[0.5 + 0.7 * (len(runs) * i + j)],
                    mode="markers+text",
                    text=[f"{what} ({name})"],
                    textposition="middle right",
                    marker=dict(symbol="triangle-up", size=12, color=colors[name]),
                    showlegend=False,
                    hovertemplate=f"{what}, {name}: step %{{x}}<extra></extra>",
                )
            )
    for step, label in boundaries:
        fig.add_vline(x=step, line=dict(color="#888", dash="dot", width=1))
        fig.add_annotation(
            x=step,
            y=1,
            yref="paper",
            text=label,
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font=dict(size=11, color="#555"),
        )
    fig.update_xaxes(title_text="step (all stages)")
    fig.update_yaxes(title_text="loss (nats/token)", rangemode="tozero")
    return apply_layout(fig, None, height=420, legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))


def warmup_losses(
    bands: dict[str, tuple[np.ndarray, np.ndarray]], colors: dict[str, str], baseline: float | None = None
) -> go.Figure:
    """Each arm's mean loss per step with a ± sd band; `baseline` (the frequency-only loss) as a dotted line."""
    fig = go.Figure()
    for arm, (mean, sd) in bands.items():
        for trace in _band(np.arange(1, len(mean) + 1), mean, sd, colors[arm], arm, True, arm):
            fig.add_trace(trace)
    if baseline is not None:  # a legend entry, not an annotation: a label on the line sat on the curves
        steps = max((len(mean) for mean, _ in bands.values()), default=1)
        fig.add_trace(
            go.Scatter(
                x=[1, steps],
                y=[baseline, baseline],
                mode="lines",
                hoverinfo="skip",
                line=dict(dash="dot", color="grey"),
                name=f"frequency-only loss {baseline:.2f}",
            )
        )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="training loss, mean ± sd over seeds")
    return apply_layout(fig, None, height=360, legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))


def _log10(grid: np.ndarray) -> np.ndarray:
    return np.log10(np.clip(grid, 1e-12, None))


def log_range(grids: dict[str, np.ndarray]) -> tuple[float, float]:
    """The log10 range over every grid: one colour scale when the arms are drawn as separate figures."""
    logs = [_log10(g) for g in grids.values()]
    return min(float(v.min()) for v in logs), max(float(v.max()) for v in logs)


def warmup_grads(grids: dict[str, np.ndarray], zrange: tuple[float, float] | None = None) -> go.Figure:
    """Per arm, a heatmap of each layer's FFN gradient norm per step (log10; mean over seeds), on one colour scale
    (`zrange`, log10; by default the grids' own)."""
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=list(grids), shared_yaxes=True, horizontal_spacing=0.04)
    logs = {arm: _log10(g) for arm, g in grids.items()}
    lo, hi = zrange or log_range(grids)
    for col, (arm, values) in enumerate(logs.items(), start=1):
        fig.add_trace(
            go.Heatmap(
                z=values,
                x=np.arange(1, values.shape[1] + 1),
                y=_layers(values.shape[0]),
                zmin=lo,
                zmax=hi,
                colorscale=sequential("Viridis"),
                showscale=col == len(logs),
                colorbar=dict(title="log10 |g|"),
                hovertemplate=f"{arm}<br>step %{{x}}, layer %{{y}}: 10^%{{z:.2f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="step", row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    return apply_layout(fig, None, height=320)
