"""Shared pieces of the figure factories: token axes, hover text, layout defaults."""

from __future__ import annotations

import html
import math
import re

import plotly.graph_objects as go
import plotly.io as pio

ATTENTION_SCALE = "Blues"  # weights in [0, 1]
DIVERGING_SCALE = "RdBu_r"  # signed values centred on 0
MASKED_COLOR = "#d9d9d9"  # the causal mask's upper triangle: visibly not a zero weight
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)
# plotly_white's layout (white background, light grid, its colourway) without its per-trace-type defaults, which
# every factory here sets itself: validating the whole template took most of a small figure's build time, and live
# views build figures several times a second.
LIGHT_TEMPLATE = go.layout.Template(layout=pio.templates["plotly_white"].layout)


def plotly_text(text) -> str:
    """Token text made literal for Plotly, which reads a few HTML-like tags (<b>, <br>, <a ...>) and entities
    in every string it draws (ticks, hover, titles); the entities display as the characters themselves."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escaped(labels) -> list[str]:
    return [plotly_text(label) for label in labels]


def token_axis(labels: list[str], max_ticks: int = 64, start: int = 0) -> dict:
    """Integer axis with token tick labels, labels[i] at position start + i: repeated tokens stay in distinct
    columns (a categorical axis would merge them). Past max_ticks only every n-th label is written."""
    step = max(1, -(-len(labels) // max_ticks))
    shown = range(0, len(labels), step)
    return dict(tickmode="array", tickvals=[start + i for i in shown], ticktext=[labels[i] for i in shown])


# A figure's layout.meta entry: for each of its annotations in order, the figure width in px below which it is hidden
# (labels placed for a wide figure that would pile up in a narrow one; display.show_figure and export.figure_html
# turn it into CSS)
ANNOTATION_MIN_WIDTH = "annotation_min_width"


def token_categories(labels: list[str]) -> list[str]:
    """The labels as distinct category names that draw the same: a repeat gets zero-width spaces appended, so it
    keeps its own column on a category axis (which would otherwise merge it with the first)."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        n = seen.get(label, 0)
        seen[label] = n + 1
        out.append(label + "\u200b" * n)
    return out


def token_category_axis(categories: list[str]) -> dict:
    """A category axis over token_categories(...), in their order, that thins its own labels to the width drawn:
    Plotly keeps about one category label per 15 px, so a phone's 170 px of heatmap shows every third token where an
    array of 28 tick labels piled into one grey smear. For figures whose clicks are not read (x is the category)."""
    return dict(type="category", categoryorder="array", categoryarray=categories, tickmode="auto", nticks=0)


# The top strip of a figure where Plotly's toolbar and Streamlit's fullscreen button appear on hover. A title starts
# below it: in a narrow column the toolbar covered the title's end (seen on every half- and third-width chart).
TOOLBAR_ROOM = 34  # the toolbar is 26 px tall from 2 px down; a title box starts about 4 px above its pad


def colorbar_on_top(title: str, y: float, length: float) -> dict:
    """A colour bar laid flat above the plot's right end (where a phone has no room beside the plot), `length` a
    share of the plot's width, its title above it."""
    return dict(
        title=dict(text=title, side="top"),
        orientation="h",
        x=1,
        xanchor="right",
        y=y,
        yanchor="bottom",
        len=length,
        thickness=10,
    )


def segments_trace(segments, color: str, width: float, **extra) -> go.Scatter | None:
    """Line segments (x0, y0, x1, y1) as one lines trace of one colour and width, without hover or legend entry
    (one trace for many edges draws fast); None when there are none."""
    xs, ys = [], []
    for x0, y0, x1, y1 in segments:
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    if not xs:
        return None
    line = dict(color=color, width=width)
    return go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False, **extra)


def rows_axis(names: list[str], pad: float) -> dict:
    """An axis with a labelled grid line at 0, 1, ... for each of `names` (a model's layers stacked up), `pad` of room
    beyond the first and the last."""
    n = len(names)
    return dict(
        tickmode="array",
        tickvals=list(range(n)),
        ticktext=names,
        range=[-pad, n - 1 + pad],
        showgrid=True,
        gridcolor="#eee",
        zeroline=False,
    )


def logged_line(points, **style) -> go.Scatter:
    """A trace of logged (step, value) pairs, the steps along x; `style`: the trace's other properties."""
    return go.Scatter(x=[s for s, _ in points], y=[v for _, v in points], **style)


def title_room(lines: int = 1) -> int:
    """The top margin a title of `lines` lines needs: the toolbar strip, the lines, a gap above the plot."""
    return TOOLBAR_ROOM + 20 * lines + 12


def legend_on_top_room(title: str | None) -> int:
    """The top margin for a one-line title with a horizontal legend between it and the plot."""
    return title_room() + 26 if title else 40


# Plotly never wraps a title: past the figure's width it is cut ("...final residual s" on a 390 px phone, where a
# figure is about 358 px wide and a title line showed 46 of its characters from about 14 px in). Longer titles are
# broken between words into lines of at most TITLE_CHARS; a desktop shows them on two lines too.
TITLE_CHARS = 44
EXTRA_LINE_SHIFT = 18  # px Plotly lifts a title for each line past its first


def visible_length(text: str) -> int:
    """Characters Plotly draws for `text`: entities count as one, tags (<br>, <b>) as none."""
    return len(re.sub(r"&[#a-zA-Z0-9]+;", "x", re.sub(r"<[^>]*>", "", text)))


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    """Each <br>-separated line of `title` broken between words into lines of at most `width` visible characters
    (a single longer word keeps its own line)."""
    lines = []
    for line in title.split("<br>"):
        current = ""
        for word in line.split(" "):
            candidate = f"{current} {word}" if current else word
            if current and visible_length(candidate) > width:
                lines.append(current)
                current = word
            else:
                current = candidate
        lines.append(current)
    return "<br>".join(lines)


# Plotly lays a figure out, measures its tick labels, axis titles, colour bars and legend, and lays the whole figure
# out again when they need more margin than the layout gives (automargin). That second pass was a large part of a view's
# drawing in the browser (issue 60: the Attention page's tabs, timed by `python -m benchmarks latency`), so figures
# reserve the room up front from the lengths of their labels; automargin still widens a margin an estimate missed.
# The rooms below are what the app's theme (st.plotly_chart's) draws these parts in.
LABEL_PAD = 10  # between tick labels and the plot, and the margin's own padding
AXIS_TITLE_ROOM = 48  # an axis title beside its tick labels, with the theme's standoff
COLORAXIS_BAR_ROOM = 122  # a vertical colour bar of a layout coloraxis (the theme widens it), with its ticks and title
TRACE_BAR_ROOM = 84  # a vertical colour bar of a trace of its own, with its ticks and a short title
TOP_BAR_ROOM = 134  # a title and a colour bar laid flat above the plot (colorbar_on_top), half the plot's width
TOP_SHORT_BAR_ROOM = 121  # the same with a bar 0.4 of the plot's width
# widths in em of a sans-serif's characters, a little over Arial's: narrow, wide, capitals and digits, other ASCII;
# anything else (symbols, other scripts) counts as a full em
_NARROW, _WIDE = set("ijlft'|.,:;!()[]{} r\"-"), set("mwMW@%")


def label_px(labels, size: float = 13) -> int:
    """A generous estimate of the widest of `labels` (Plotly text: entities count as their character, tags as
    nothing) drawn at `size` px."""

    def em(text: str) -> float:
        plain = html.unescape(re.sub(r"<[^>]*>", "", str(text)))
        return sum(
            0.36 if c in _NARROW else 0.92 if c in _WIDE else 0.68 if c.isupper() else 0.58 if ord(c) < 128 else 1.0
            for c in plain
        )

    return int(math.ceil(max((em(t) for t in labels), default=0.0) * size))


def angled_label_px(labels, size: float = 11, angle: float = 60) -> int:
    """How far tick labels tilted by `angle` degrees reach down from their axis."""
    a = math.radians(angle)
    return int(math.ceil(label_px(labels, size) * math.sin(a) + size * math.cos(a)))


def reserve_margins(fig: go.Figure, **sides: float) -> go.Figure:
    """Each named margin (l, r, t, b) made at least that many px, so Plotly need not lay the figure out twice."""
    margin = fig.layout.margin
    fig.update_layout(margin={side: int(max(px, getattr(margin, side) or 0)) for side, px in sides.items()})
    return fig


def apply_layout(fig: go.Figure, title: str | None = None, height: int | None = None, **kwargs) -> go.Figure:
    title = wrap_title(title) if title else title
    # each extra title line (<br>) needs its own room above the plot, or it sits on the top of the data
    extra = title.count("<br>") if title else 0
    top = title_room(1 + extra) + EXTRA_LINE_SHIFT * extra if title else 20
    # Plotly lifts a title of several lines by about a line for each line past the first even when anchored at its
    # top (seen: a two-line title 18 px from the chart's top, under the toolbar): the pad makes up for it
    title_layout = (
        dict(text=title, yref="container", y=1, yanchor="top", pad=dict(t=TOOLBAR_ROOM + EXTRA_LINE_SHIFT * extra))
        if title
        else None
    )
    fig.update_layout(title=title_layout, height=height, font=FONT, margin=dict(l=10, r=10, t=top, b=10), **kwargs)
    set_light_template(fig)
    return fig


def set_light_template(fig: go.Figure) -> None:
    """LIGHT_TEMPLATE as the figure's template, unvalidated: it was validated when built, and Plotly's check of it
    again on every figure was most of a small figure's build (a page's rerun builds tens; docs/benchmarks-history.md,
    2026-12-07, the latency-pages merge). Plotly sets its own default template the same way
    (BaseFigure._initialize_layout_template); the figure gets its own copy."""
    layout = fig.layout
    layout._validate = False
    try:
        layout.template = LIGHT_TEMPLATE
    finally:
        layout._validate = fig._validate


def distinct_percent_format(top: float) -> str:
    """A d3 percent format for the ticks of a 0..top probability axis that writes each tick differently: enough
    decimals for a step of top/20 (Plotly's automatic ticks are never closer, whatever the width), trailing zeros
    trimmed ("~"). ".0%" wrote a 0..2% axis's 0.5% steps as "0% 1% 1% 1% 2%"."""
    step_percent = max(float(top), 1e-12) * 100 / 20
    return f".{max(0, math.ceil(-math.log10(step_percent)))}~%"
