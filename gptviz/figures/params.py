"""Parameters: where a model's weights live, by component, by layer, and across the presets."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from ..params import COMPONENTS, GROUPS
from .common import apply_layout

COMPONENT_COLORS = dict(zip(COMPONENTS, ("#4c78a8", "#9ecae9", "#f58518", "#ffbf79", "#54a24b", "#88d27a",
                                         "#b279a2", "#d6a5c9", "#e45756")))
GROUP_ORDER = ("embeddings", "attention", "MLP", "norms", "LM head")
GROUP_COLORS = dict(zip(GROUP_ORDER, ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756")))


def _fmt(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


# A label is written inside its bar when the bar is at least this share of the longest (its end, in white), else just
# past the bar's end: either way a label needs about 100 px, and at 230 px of plot (a phone) half the axis holds it.
INSIDE_SHARE = 0.5


def component_bar(comp: pd.DataFrame, title: str, tied: bool = False) -> go.Figure:
    """Horizontal bars of parameters per component (params.by_component output: component, count, share), the
    first component on top. One row per label: upright bars side by side put GPT-2 XL's "491.83M" over its
    neighbour's "491.6M" and cut "122.96M (7.9" at a narrow column's edge."""
    top = max(int(comp["count"].max()), 1)
    counts = [int(c) for c in comp["count"]]
    text = [f"{_fmt(c)} ({s:.1%})" + (", tied" if tied and name == "LM head" else "")
            for name, c, s in zip(comp["component"], counts, comp["share"])]
    inside = [c >= INSIDE_SHARE * top for c in counts]
    fig = go.Figure(go.Bar(
        y=list(comp["component"]), x=counts, orientation="h", text=text,
        textposition=["inside" if i else "outside" for i in inside], insidetextanchor="end",
        textfont=dict(size=11), constraintext="none", cliponaxis=False,
        insidetextfont=dict(color="white"), outsidetextfont=dict(color="#1a202c"),
        marker_color=[COMPONENT_COLORS.get(c, "#999") for c in comp["component"]],
        customdata=comp["share"], hovertemplate="%{y}<br>%{x:,} parameters<br>%{customdata:.2%} of the total"
                                                 "<extra></extra>"))
    fig.update_xaxes(title_text="parameters", range=[0, top])
    fig.update_yaxes(autorange="reversed", automargin=True)
    return apply_layout(fig, title=title, height=max(260, 90 + 30 * len(counts)))


def layer_stacked_bar(layers: pd.DataFrame) -> go.Figure:
    """Stacked bars per block by component (params.by_layer output: index layer, columns components)."""
    fig = go.Figure()
    x = [int(i) for i in layers.index]
    for comp in [c for c in COMPONENTS if c in layers.columns]:
        fig.add_trace(go.Bar(x=x, y=layers[comp].astype("int64"), name=comp,
                             marker_color=COMPONENT_COLORS[comp],
                             hovertemplate=f"block %{{x}}<br>{comp}: %{{y:,}}<extra></extra>"))
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
        for field, item in zip(nodes, (node_id, label, parent, int(value))):
            nodes[field].append(item)

    add("model", "model", "", table["count"].sum())
    outside = table[table["layer"].isna()]
    add("outside", "embeddings, final norm, head", "model", outside["count"].sum())
    for comp, count in outside.groupby("component", sort=False)["count"].sum().items():
        if count > 0:
            add(f"outside/{comp}", comp, "outside", count)
    blocks = table[table["layer"].notna()]
    n_blocks = blocks["layer"].nunique()
    groups = (list(blocks.groupby("layer", sort=True)) if n_blocks <= max_blocks
              else [(None, blocks)])  # too many boxes to read: all blocks as one
    per_column = blocks_per_column(len(groups)) if groups else 1
    for start in range(0, len(groups), per_column):
        column = groups[start:start + per_column]
        parent = "model"
        if len(groups) > per_column and len(column) > 1:  # several columns: each a box, headed by its range
            parent = f"blocks {int(column[0][0])}-{int(column[-1][0])}"
            add(parent, parent, "model", sum(rows["count"].sum() for _, rows in column))
        for layer, rows in column:
            bid = f"block {int(layer)}" if layer is not None else f"{n_blocks:,} blocks"
            add(bid, bid, parent, rows["count"].sum())
            for comp, count in rows.groupby("component", sort=False)["count"].sum().items():
                add(f"{bid}/{comp}", comp, bid, count)
    colors = [COMPONENT_COLORS.get(label, "#e2e8f0" if parent == "model" else "#ffffff")
              for label, parent in zip(nodes["labels"], nodes["parents"])]
    colors[0] = "#f7fafc"
    fig = go.Figure(go.Treemap(
        **nodes, branchvalues="total", maxdepth=4,
        sort=False, tiling=dict(packing="slice-dice"),  # columns side by side, blocks down a column
        marker=dict(colors=colors), textfont=dict(color="#1a202c"),
        texttemplate="%{label}<br>%{value:,}<br>%{percentRoot:.1%}",
        hovertemplate="%{id}<br>%{value:,} parameters<br>%{percentRoot:.2%} of the model<extra></extra>"))
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
        fig.add_trace(go.Bar(x=names, y=[counts[n][group] for n in names], name=group,
                             marker_color=GROUP_COLORS[group],
                             hovertemplate=f"%{{x}}<br>{group}: %{{y:,}}<extra></extra>"))
    totals = [sum(counts[n].values()) for n in names]
    fig.add_trace(go.Scatter(x=names, y=totals, mode="text", text=[_fmt(t) for t in totals],
                             textposition="top center", showlegend=False, hoverinfo="skip"))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="parameters", range=[0, max(totals) * 1.12] if totals else None)
    return apply_layout(fig, title="Parameters by group, model by model", height=440,
                        legend=dict(orientation="h", y=-0.2))
