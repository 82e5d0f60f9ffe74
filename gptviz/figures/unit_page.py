"""Figures of one neuron or head over a corpus (gptviz.index): its top examples as text, its histogram, the tokens
its direct effect promotes and suppresses."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import HIGHLIGHT
from .common import apply_layout, colorbar_on_top, escaped, plotly_text
from .head_views import MONO
from .palette import behind_text

EXAMPLE_SCALE = "Oranges"
LEFT_CHARS, RIGHT_CHARS = 64, 26  # character cells shown before the peak token's start and after it


class ExampleRow(NamedTuple):
    """One top example: its tokens' labels, the value colouring each, which token is the peak, a row label."""

    labels: list[str]
    values: np.ndarray
    peak: int
    name: str
    hover: str  # what the row's hover adds (document, position, score), already plain text


def example_rows(
    index, contexts, examples, *, by_attention: bool = False, ranked: bool = True, enc=None
) -> list[ExampleRow]:
    """A unit's top examples (gptviz.index's top_examples and example_contexts) as rows: named by rank, peak value,
    play (marked when held out) and, for a head, the token its peak attends to most ("→ X n back (weight)", "↻"
    when that follows an earlier copy of the peak token: induction). `by_attention`: a head's rows coloured by
    where the peak looks instead of by its output norm. `ranked`: False for a band's examples (no rank). `enc`: the
    index's tokenizer, its model's (tokenizer_for; default GPT-2's)."""
    from ..index.read import attended
    from ..model.tokenizer import token_labels

    rows = []
    for e, c in zip(examples, contexts, strict=True):
        held = index.documents[e.doc]["held_out"]
        values = c.attention if by_attention and c.attention is not None else c.values
        value = f"#{e.rank + 1}  {e.value:.3f}" if ranked else f"{e.value:.3g}"  # a weak band's 0.0012, not 0.001
        name = f"{value}  {e.doc_name}{'  (held out)' if held else ''}"
        hover = (
            f"{e.doc_name}{' (a held-out play)' if held else ''}, token {e.pos:,}; "
            f"{'score' if e.unit.kind == 'head' else 'activation'} at the peak {e.value:.4f}"
        )
        looks = attended(c)
        if looks is not None:  # a head: where its peak looks, so a previous-token or induction head shows at a glance
            label = token_labels([looks.token], enc)[0]
            name += f"  → {label} {looks.back} back ({looks.weight:.2f})"
            if looks.after_copy:
                name += " ↻"
                hover += f"; it attends to {label}, the token after an earlier copy of the peak token (induction)"
        rows.append(ExampleRow(token_labels(c.ids, enc), values, c.peak, name, hover))
    return rows


def band_title(
    number: int,
    levels: tuple[float, float],
    lo: float,
    hi: float,
    shown: int,
    sampled: int,
    value_name: str,
    positives: int,
    sample: int,
    examples: int = 5,
) -> str:
    """A band's line: "Band 2: the 20-40% of its positive values, activation 0.0108 to 0.0184 (5 examples)", and,
    where it shows fewer than `examples`, why: the unit is > 0 on only `positives` tokens, or the index's sample of
    `sample` of its positive values held only `sampled` in this band."""
    count = f"{shown} example{'s' if shown != 1 else ''}"
    if shown < examples:
        count += (
            f": it is above 0 on only {positives:,} token{'s' if positives != 1 else ''}"
            if positives <= sample
            else f": the index's sample of {sample} of its positive values held {sampled} in this band"
        )
    return (
        f"Band {number}: the {levels[0]:.0%}-{levels[1]:.0%} of its positive values, {value_name} {lo:.3g} to "
        f"{hi:.3g} ({count})"
    )


def _row_layout(labels: list[str], peak: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, width) in character cells with the peak token starting at 0: the left context runs right-aligned up
    to it, as in a concordance, so every row's peak lines up."""
    widths = np.array([max(1, len(label)) + 1 for label in labels])
    starts = np.zeros(len(labels))
    starts[peak + 1 :] = np.cumsum(widths[peak:-1])
    starts[:peak] = -np.cumsum(widths[:peak][::-1])[::-1]
    return starts, widths


def window(labels: list[str], peak: int, left: int = LEFT_CHARS, right: int = RIGHT_CHARS) -> tuple[int, int]:
    """The tokens [start, end) shown around the peak: whole tokens within `left` characters before the peak's
    start and `right` after it (a character each for the space between tokens)."""
    widths = [max(1, len(label)) + 1 for label in labels]
    start, used = peak, 0
    while start > 0 and used + widths[start - 1] <= left:
        start, used = start - 1, used + widths[start - 1]
    end, used = peak + 1, widths[peak]
    while end < len(labels) and used + widths[end] <= right:
        end, used = end + 1, used + widths[end]
    return start, end


def examples_text(rows: list[ExampleRow], *, value_name: str, cmax: float, title: str | None = None) -> go.Figure:
    """Every row one example, its tokens coloured by value (0 to `cmax`; below 0 is white), the peak outlined and
    aligned in one column. Tokens beyond LEFT_CHARS / RIGHT_CHARS of the peak are left out.
    Traces: [every token of every row] (customdata [token, value, row hover, is the peak]); one trace, not one per
    row: building twenty validated traces took most of the page's figure time."""
    cmax = cmax if cmax > 0 else 1.0
    ys, xs, bases, texts, values, peaks, hovers = [], [], [], [], [], [], []
    for r, row in enumerate(rows):
        starts, widths = _row_layout(row.labels, row.peak)
        idx = np.arange(*window(row.labels, row.peak))
        ys += [r] * len(idx)
        xs += list(widths[idx] - 0.15)
        bases += list(starts[idx])
        texts += escaped([row.labels[i] for i in idx])
        values += list(np.nan_to_num(np.asarray(row.values, dtype=np.float32)[idx], nan=0.0).astype(float))
        peaks += [bool(i == row.peak) for i in idx]
        hovers += [plotly_text(row.hover)] * len(idx)
    dark = np.asarray(values) / cmax > 0.6
    fig = go.Figure(
        go.Bar(
            y=ys,
            x=xs,
            base=bases,
            orientation="h",
            width=0.8,
            text=texts,
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            insidetextfont=dict(MONO, color=["white" if d else "#222" for d in dark]),
            marker=dict(
                color=values,
                coloraxis="coloraxis",
                line=dict(color=[HIGHLIGHT if p else "rgba(0,0,0,0)" for p in peaks], width=2.5),
            ),
            customdata=list(zip(texts, values, hovers, peaks, strict=True)),
            name=plotly_text(value_name),
            showlegend=False,
            hovertemplate=f"'%{{customdata[0]}}' {value_name} %{{customdata[1]:.3f}}<br>%{{customdata[2]}}"
            "<extra></extra>",
        )
    )
    n = max(1, len(rows))
    fig.update_xaxes(visible=False, range=[-LEFT_CHARS - 0.5, RIGHT_CHARS + 0.5], fixedrange=True)
    fig.update_yaxes(
        range=[n - 0.5, -0.5],
        fixedrange=True,
        tickmode="array",
        tickvals=list(range(len(rows))),
        ticktext=[plotly_text(row.name) for row in rows],
        tickfont=dict(size=11),
    )
    axis = dict(
        colorscale=behind_text(EXAMPLE_SCALE),
        cmin=0.0,
        cmax=float(cmax),
        colorbar=colorbar_on_top(plotly_text(value_name), y=1.0, length=0.35),
    )
    return apply_layout(
        fig,
        title=title,
        height=int(70 + 26 * n + (40 if title else 0)),
        coloraxis=axis,
        # a narrow screen hides the text that no longer fits its cell (the colours and hover stay)
        bargap=0,
        uniformtext=dict(minsize=8, mode="hide"),
    )


# Quantile labels are placed for the narrowest plot they are drawn in (a phone's figure, 358 px, less its y axis): a
# label that would touch another there goes on the row above. "1%" and "median" a few pixels apart were drawn over
# each other ("1%dian").
NARROWEST_PLOT_PX = 250
QUANTILE_FONT = 10
QUANTILE_ROW_PX = QUANTILE_FONT + 5


def quantile_label_places(
    xs: list[float], texts: list[str], x0: float, x1: float, plot_px: float = NARROWEST_PLOT_PX
) -> list[tuple[str, int]]:
    """(xanchor, row) for each label of a vertical line at xs on an x0..x1 axis `plot_px` wide: the lowest row where
    the label fits beside its line, to the line's right ("left") or else its left ("right"), without touching a
    label already placed or leaving the plot."""
    scale = plot_px / (x1 - x0) if x1 > x0 else 0.0
    placed: list[tuple[int, float, float]] = []
    out: list[tuple[str, int] | None] = [None] * len(xs)
    for i in sorted(range(len(xs)), key=lambda i: xs[i]):
        at = (xs[i] - x0) * scale
        width = 0.62 * QUANTILE_FONT * len(texts[i]) + 4  # a generous estimate: the gap is part of it
        for row in range(len(xs)):
            for anchor, left in (("left", at), ("right", at - width)):
                fits = left >= 0 and left + width <= plot_px
                if fits and all(r != row or left + width <= a or b <= left for r, a, b in placed):
                    placed.append((row, left, left + width))
                    out[i] = (anchor, row)
                    break
            if out[i]:
                break
        out[i] = out[i] or ("left", len(xs))  # no room at all: a row of its own
    return out


def unit_histogram(
    edges: np.ndarray,
    counts: np.ndarray,
    quantiles: dict[float, float],
    *,
    value_name: str,
    title: str | None = None,
    log: bool = True,
) -> go.Figure:
    """The unit's values over every token scanned, with its quantiles as dashed lines labelled above the plot, on
    as many rows as keep the labels apart (quantile_label_places). Traces: [bars]."""
    edges, counts = np.asarray(edges, dtype=float), np.asarray(counts)
    centers, widths = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    share = counts / max(1, counts.sum())
    fig = go.Figure(
        go.Bar(
            x=centers,
            y=counts,
            width=widths,
            marker_color="#e6550d",
            name="tokens",
            customdata=np.stack([edges[:-1], edges[1:], share], axis=1),
            hovertemplate="%{customdata[0]:.3g} to %{customdata[1]:.3g}: %{y:,} tokens "
            "(%{customdata[2]:.2%})<extra></extra>",
        )
    )
    texts = ["median" if q == 0.5 else f"{q:.0%}" for q in quantiles]
    values = [float(v) for v in quantiles.values()]
    x0, x1 = (float(edges[0]), float(edges[-1])) if len(edges) > 1 else (0.0, 1.0)
    places = quantile_label_places(values, texts, x0, x1)
    fig.update_layout(
        shapes=[
            dict(
                type="line",
                xref="x",
                yref="paper",
                x0=v,
                x1=v,
                y0=0,
                y1=1,
                line=dict(color="#555", dash="dash", width=1),
            )
            for v in values
        ],
        annotations=[
            dict(
                x=v,
                y=1,
                xref="x",
                yref="paper",
                yanchor="bottom",
                xanchor=anchor,
                showarrow=False,
                yshift=2 + QUANTILE_ROW_PX * row,
                font=dict(size=QUANTILE_FONT),
                text=text,
            )
            for v, text, (anchor, row) in zip(values, texts, places, strict=True)
        ],
    )
    fig.update_yaxes(type="log" if log else "linear", title_text="tokens" + (" (log)" if log else ""))
    fig.update_xaxes(title_text=plotly_text(value_name), range=[x0, x1])
    rows = 1 + max((row for _, row in places), default=0)
    apply_layout(fig, title=title, height=320 + QUANTILE_ROW_PX * (rows - 1), showlegend=False, bargap=0)
    fig.update_layout(margin=dict(t=fig.layout.margin.t + QUANTILE_ROW_PX * rows))  # the labels' rows
    return fig


def direct_effect_bars(
    promoted: list[tuple[str, float]], suppressed: list[tuple[str, float]], *, title: str | None = None
) -> go.Figure:
    """Two columns of bars: the tokens the unit's output raises most (left) and lowers most (right), each with its
    logit change. Traces: [promoted, suppressed]."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08, subplot_titles=("promotes", "suppresses"))
    for col, (items, color) in enumerate(((promoted, "#2b8cbe"), (suppressed, "#d7301f")), start=1):
        labels = escaped([t for t, _ in items])
        fig.add_trace(
            go.Bar(
                x=[v for _, v in items],
                y=[f"{i + 1}. {label}" for i, label in enumerate(labels)],
                orientation="h",
                marker_color=color,
                customdata=labels,
                hovertemplate="'%{customdata}': %{x:+.3f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        # the suppressed bars run left from 0: their tokens are named on the right, past the bars' base, not on the
        # left where they were drawn over the promoted bars
        fig.update_yaxes(autorange="reversed", tickfont=MONO, side="left" if col == 1 else "right", row=1, col=col)
        fig.update_xaxes(nticks=3, row=1, col=col)  # upright ticks in a phone's 60 px
    # each panel's title toward its outer edge: centred, a phone's "promotes suppresses" read as one phrase
    for panel_title, (x, anchor) in zip(
        fig.layout.annotations,
        ((fig.layout.xaxis.domain[0], "left"), (fig.layout.xaxis2.domain[1], "right")),
        strict=True,
    ):
        panel_title.update(x=x, xanchor=anchor, font_size=13)
    # one axis title for both panels: two "logit change" side by side ran together on a phone
    fig.add_annotation(
        text="logit change",
        x=0.5,
        xref="paper",
        y=0,
        yref="paper",
        yanchor="top",
        yshift=-24,
        showarrow=False,
        font=dict(size=13),
    )
    n = max(len(promoted), len(suppressed), 1)
    apply_layout(fig, title=title, height=max(260, 90 + 24 * n), showlegend=False)
    fig.update_layout(margin=dict(b=48))
    return fig
