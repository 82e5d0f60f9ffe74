"""Parameters: where a model's weights live, by component, by layer, and across the presets."""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd
import plotly.graph_objects as go

from ..model.params import COMPONENTS, GROUP_ORDER, GROUPS
from .common import apply_layout

COMPONENT_COLORS = dict(
    zip(
        COMPONENTS,
        ("#4c78a8", "#9ecae9", "#f58518", "#ffbf79", "#54a24b", "#88d27a", "#b279a2", "#d6a5c9", "#e45756"),
        strict=True,
    )
)
GROUP_COLORS = dict(zip(GROUP_ORDER, ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756"), strict=True))


def _fmt(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


ROW_PX = 38  # one row: its label (12 px text) above a 19 px bar
LABEL_SIZE = 12


class ComponentRow(NamedTuple):
    name: str  # a group, or a component in the finer split
    count: int
    share: float
    members: list[tuple[str, int]]  # the components in the row with their counts (one, in the finer split)


def component_rows(comp: pd.DataFrame, split: bool = False) -> list[ComponentRow]:
    """params.by_component's rows as the chart draws them: one per group in GROUP_ORDER (what a reader means:
    attention with its output projection, norms with the final one; a tied head's 0 too), or with `split` one per
    component in COMPONENTS order. Always in that fixed order, so two models read row for row. Counts are the
    table's, exact; nothing is folded into an "other" row (the out-projection once was, on small models)."""
    total = int(comp["count"].sum())
    counts = {name: int(c) for name, c in zip(comp["component"], comp["count"], strict=True)}
    if split:
        groups = [(c, [c]) for c in COMPONENTS if c in counts]
    else:
        groups = [(g, [c for c in COMPONENTS if GROUPS[c] == g and c in counts]) for g in GROUP_ORDER]
    rows = []
    for name, members in groups:
        if members:
            count = sum(counts[c] for c in members)
            rows.append(ComponentRow(name, count, count / total if total else 0.0, [(c, counts[c]) for c in members]))
    return rows


def _share_text(share: float) -> str:
    return "<0.1%" if 0 < share < 0.0005 else f"{share:.1%}"


def component_shares(comp: pd.DataFrame, title: str, tied: bool = False, split: bool = False) -> go.Figure:
    """Where the parameters are: one bar per group (component_rows; per component with `split`), each with its
    name, exact count and share written above it across the figure's full width, so every label is readable on a
    358 px phone figure (a treemap's slivers and labels beside bars were not). Hover names a group's components and
    their counts; a tied head's label says it is the token embedding."""
    rows = component_rows(comp, split)
    n = max(len(rows), 1)
    top = max((r.count for r in rows), default=0) or 1

    def member_line(name: str, count: int) -> str:
        note = " (tied: it is the token embedding)" if tied and name == "LM head" else ""
        return f"{name}: {count:,}{note}"

    def label(r: ComponentRow) -> str:
        if tied and r.name == "LM head":
            return f"<b>{r.name}</b>  {r.count:,} · tied to the token embedding"
        return f"<b>{r.name}</b>  {r.count:,} · {_share_text(r.share)}"

    hover = ["<br>".join(member_line(*m) for m in r.members) for r in rows]
    colors = COMPONENT_COLORS if split else GROUP_COLORS
    fig = go.Figure(
        go.Bar(
            y=list(range(len(rows))),
            x=[r.count for r in rows],
            orientation="h",
            width=0.5,
            marker_color=[colors.get(r.name, "#a0aec0") for r in rows],
            customdata=[[h, r.share] for h, r in zip(hover, rows, strict=True)],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:.2%} of the total<extra></extra>",
        )
    )
    # each label just above its bar (whose top edge is at i - 0.25); set at once: one add_annotation per row checked
    # the whole list again each time (a third of the figure's build)
    fig.update_layout(
        annotations=[
            dict(
                x=0,
                xref="x",
                xanchor="left",
                y=i - 0.25,
                yref="y",
                yanchor="bottom",
                yshift=1,
                showarrow=False,
                align="left",
                font=dict(size=LABEL_SIZE, color="#1a202c"),
                text=label(r),
            )
            for i, r in enumerate(rows)
        ]
    )
    fig.update_xaxes(visible=False, range=[0, top], fixedrange=True)
    fig.update_yaxes(visible=False, range=[n - 0.5, -0.7], fixedrange=True)  # first row on top, room for its label
    apply_layout(fig, title=title, showlegend=False, hovermode="y")
    fig.update_layout(height=fig.layout.margin.t + round(ROW_PX * (n + 0.2)) + 10, margin=dict(l=6, r=6, b=10))
    return fig


def layer_stacked_bar(layers: pd.DataFrame) -> go.Figure:
    """Stacked bars per block by group or component (params.by_layer output: index layer, columns groups or
    components), in GROUP_ORDER / COMPONENTS order."""
    x = [int(i) for i in layers.index]
    colors = {**GROUP_COLORS, **COMPONENT_COLORS}  # "norms" is both: one colour
    names = dict.fromkeys(c for c in (*GROUP_ORDER, *COMPONENTS) if c in layers.columns)  # in order, each once
    fig = go.Figure(
        [
            go.Bar(
                x=x,
                y=layers[comp].astype("int64"),
                name=comp,
                marker_color=colors[comp],
                hovertemplate=f"block %{{x}}<br>{comp}: %{{y:,}}<extra></extra>",
            )
            for comp in names
        ]
    )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="block", dtick=1 if len(x) <= 24 else None)
    fig.update_yaxes(title_text="parameters")
    return apply_layout(fig, title="Parameters in each block", height=400, legend=dict(orientation="h", y=-0.25))


def blocks_per_column(n: int) -> int:
    """Blocks in each column of the treemap's grid: the smallest divisor of n from sqrt(n) to 1.5 sqrt(n) (every
    column full; the taller choice, as a column is narrower than the figure is high), else ceil(sqrt(n)) (a prime
    n: the last column is shorter)."""
    root = math.sqrt(n)
    return next((k for k in range(math.ceil(root), math.floor(1.5 * root) + 1) if n % k == 0), math.ceil(root))


def param_treemap(table: pd.DataFrame, title: str, max_blocks: int = 96) -> go.Figure:
    """Treemap: model -> outside blocks / columns of blocks -> block i -> component; areas are parameter counts (a
    tied head has no area of its own: it is the token embedding). The blocks sit in a grid read down each column,
    the columns left to right, each headed by its range (Plotly's squarified tiling scattered equal blocks: 0-5
    down a column, 6-11 across, 12 down, 18 across...). Past max_blocks, the blocks are one box."""
    nodes = {"ids": [], "labels": [], "parents": [], "values": []}

    def add(node_id: str, label: str, parent: str, value) -> None:
        for field, item in zip(nodes, (node_id, label, parent, int(value)), strict=True):
            nodes[field].append(item)

    add("model", "model", "", table["count"].sum())
    outside = table[table["layer"].isna()]
    add("outside", "embeddings, final norm, head", "model", outside["count"].sum())
    for comp, count in outside.groupby("component", sort=False)["count"].sum().items():
        if count > 0:
            add(f"outside/{comp}", comp, "outside", count)
    blocks = table[table["layer"].notna()]
    n_blocks = blocks["layer"].nunique()
    groups = (
        list(blocks.groupby("layer", sort=True)) if n_blocks <= max_blocks else [(None, blocks)]
    )  # too many boxes to read: all blocks as one
    per_column = blocks_per_column(len(groups)) if groups else 1
    for start in range(0, len(groups), per_column):
        column = groups[start : start + per_column]
        parent = "model"
        if len(groups) > per_column and len(column) > 1:  # several columns: each a box, headed by its range
            parent = f"blocks {int(column[0][0])}-{int(column[-1][0])}"
            add(parent, parent, "model", sum(rows["count"].sum() for _, rows in column))
        for layer, rows in column:
            bid = f"block {int(layer)}" if layer is not None else f"{n_blocks:,} blocks"
            add(bid, bid, parent, rows["count"].sum())
            for comp, count in rows.groupby("component", sort=False)["count"].sum().items():
                add(f"{bid}/{comp}", comp, bid, count)
    colors = [
        COMPONENT_COLORS.get(label, "#e2e8f0" if parent == "model" else "#ffffff")
        for label, parent in zip(nodes["labels"], nodes["parents"], strict=True)
    ]
    colors[0] = "#f7fafc"
    fig = go.Figure(
        go.Treemap(
            **nodes,
            branchvalues="total",
            maxdepth=4,
            sort=False,
            tiling=dict(packing="slice-dice"),  # columns side by side, blocks down a column
            marker=dict(colors=colors),
            textfont=dict(color="#1a202c"),
            texttemplate="%{label}<br>%{value:,}<br>%{percentRoot:.1%}",
            hovertemplate="%{id}<br>%{value:,} parameters<br>%{percentRoot:.2%} of the model<extra></extra>",
        )
    )
    return apply_layout(fig, title=title, height=480)


def group_counts(table: pd.DataFrame) -> dict[str, int]:
    """Counts per coarse group (params.GROUPS) in GROUP_ORDER."""
    grouped = table.assign(group=table["component"].map(GROUPS)).groupby("group")["count"].sum()
    return {g: int(grouped.get(g, 0)) for g in GROUP_ORDER}


def presets_stacked(counts: dict[str, dict[str, int]]) -> go.Figure:
    """Stacked bars per model: {model name: {group: count}} in the given order."""
    names = list(counts)
    fig = go.Figure()
    for group in GROUP_ORDER:
        fig.add_trace(
            go.Bar(
                x=names,
                y=[counts[n][group] for n in names],
                name=group,
                marker_color=GROUP_COLORS[group],
                hovertemplate=f"%{{x}}<br>{group}: %{{y:,}}<extra></extra>",
            )
        )
    totals = [sum(counts[n].values()) for n in names]
    fig.add_trace(
        go.Scatter(
            x=names,
            y=totals,
            mode="text",
            text=[_fmt(t) for t in totals],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="parameters", range=[0, max(totals) * 1.12] if totals else None)
    return apply_layout(
        fig, title="Parameters by group, model by model", height=440, legend=dict(orientation="h", y=-0.2)
    )
