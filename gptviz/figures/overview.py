"""The whole forward pass at one position as one diagram: the token, its embeddings, every block's sub-steps in the
order the model's wiring runs them (pre-norm: LN, attention, +, LN, MLP, +; post-norm: attention, +, LN, MLP, +, LN),
the final norm and the next-token probabilities, each box with its real value and what it is compared against.

"wide" lays the stages out left to right with each block's sub-steps top to bottom (a desktop); "tall" lays them
top to bottom with each block's sub-steps left to right (a phone). Each box is a point of one scatter trace whose
customdata names the stage ([kind, layer, head, token id]), so a click can open the page that shows it.
"""

from __future__ import annotations

from typing import NamedTuple

import plotly.graph_objects as go

from .common import FONT, LIGHT_TEMPLATE, plotly_text

FILL = {
    "token": "#fff3c4",
    "embed": "#fde9b5",
    "add": "#eceff3",
    "ln": "#e6dcf5",
    "attn": "#d6e6fb",
    "mlp": "#fde0c5",
    "lens": "#dcf2dc",
    "ln_f": "#e6dcf5",
    "prob": "#f4f6f9",
    "next": "#f4f6f9",
}
BAR = "#8fb8e8"  # a probability's bar inside its box
SIZE = {
    "ln": 0.55,
    "add": 0.8,
    "attn": 1.25,
    "lens": 1.1,
    "prob": 0.8,
    "next": 1.3,
}  # cross-axis length (1 unless listed)
GAP = 0.1  # between boxes of one group
LABEL_CHARS = 8  # token text shown in a box (the hover has it whole)
ROOMY_BLOCKS = 6  # side by side, past this many blocks the boxes get the compact text


class Cell(NamedTuple):
    kind: str  # token, embed, add, ln, attn, mlp, lens, ln_f, prob (a top candidate), next (the prompt's own)
    lines: tuple[str, ...]  # the box's text, already escaped for Plotly; the first line bold
    hover: str  # the full reading, escaped
    layer: int = -1
    head: int = -1
    token: int = -1  # a token id (prob, lens) or position (token)
    share: float = 0.0  # a probability box's fill, 0..1


def short(label: str, chars: int = LABEL_CHARS) -> str:
    """Token text for a box: cut to `chars` characters, escaped for Plotly."""
    return plotly_text(label if len(label) <= chars else label[: chars - 1] + "…")


def pct(p: float) -> str:
    return f"{p:.0%}" if p >= 0.095 else f"{p:.1%}" if p >= 0.001 else f"{p:.0e}"


def num(x: float) -> str:
    return f"{x:.3g}"


def _input_cells(ov, name, final_id: int, compact: bool) -> list[Cell]:
    tok = name(ov.token_id)
    lens = name(ov.embed_lens_id)
    return [
        Cell(
            "token",
            (f"token {ov.position}", short(tok)),
            f"The token at position {ov.position}: {plotly_text(tok)}",
            token=ov.position,
        ),
        Cell("embed", ("tok emb", f"{'' if compact else '‖·‖ '}{num(ov.embed)}"), f"‖hook_embed‖ = {num(ov.embed)}"),
        Cell(
            "embed",
            ("pos emb", f"{'' if compact else '‖·‖ '}{num(ov.pos_embed)}"),
            f"‖hook_pos_embed‖ = {num(ov.pos_embed)}",
        ),
        Cell(
            "add",
            ("+", num(ov.resid_0)),
            f"The stream entering block 0: ‖embed + pos_embed‖ = {num(ov.resid_0)}"
            f" (the two parts: {num(ov.embed)} and {num(ov.pos_embed)})",
        ),
        _lens_cell(
            ov.embed_lens_id, lens, ov.embed_lens_prob, final_id, ov.uniform_prob, "the embeddings", -1, compact
        ),
    ]


def _lens_cell(
    token_id: int, label: str, prob: float, final_id: int, uniform: float, what: str, layer: int, compact: bool
) -> Cell:
    same = "=" if token_id == final_id else "≠"
    lines = (
        ("lens", short(label, 5), f"{pct(prob)} {same}")
        if compact
        else (f"lens {short(label, 7)}", f"{pct(prob)} {same} final")
    )
    return Cell(
        "lens",
        lines,
        f"Logit lens on {what}: lm_head(ln_f(x)) puts {pct(prob)} on {plotly_text(label)} "
        f"(uniform guessing: {pct(uniform)}); {'the same as' if token_id == final_id else 'not'} the "
        "model's final top token",
        layer=layer,
        token=token_id,
    )


def _block_cells(ov, b, name, position_label, token_label, final_id: int, compact: bool) -> list[Cell]:
    i, pre = b.layer, ov.norm == "pre"
    # the two residual additions (what was added, the sum, the stream before it), then the two norms (their input
    # is the stream before the sublayer in pre-norm, the sum after it in post-norm)
    add_attn, add_mlp = (
        Cell("add", ("+", num(total)), f"‖x + {part}‖ = {num(total)}, from ‖x‖ = {num(before)} {where}", layer=i)
        for part, total, before, where in (
            ("attn", b.attn_sum, b.resid_in, f"entering block {i}"),
            ("mlp", b.mlp_sum, b.resid_mid, "after attention"),
        )
    )
    ln_1, ln_2 = (
        Cell("ln", (f"LN{sub}", num(out)), f"‖ln_{n} output‖ = {num(out)} (its input: ‖·‖ = {num(its_input)})", layer=i)
        for n, sub, out, its_input in (
            (1, "₁", b.ln_1, b.resid_in if pre else b.attn_sum),
            (2, "₂", b.ln_2, b.resid_mid if pre else b.mlp_sum),
        )
    )
    target = position_label(b.target)
    lines = (
        (f"H{b.head} {b.weight:.2f}", f"→{short(token_label(b.target), 5)}", f"ch. {ov.attn_chance:.2f}")
        if compact
        else (f"attn H{b.head}", f"→{short(token_label(b.target), 6)} {b.weight:.2f}", f"chance {ov.attn_chance:.2f}")
    )
    attn = Cell(
        "attn",
        lines,
        f"Layer {i}'s strongest weight from this token: head {b.head} puts {b.weight:.2f} on "
        f"{plotly_text(target)} (position {b.target}; "
        f"uniform over the {ov.position + 1} visible tokens: {ov.attn_chance:.2f}); "
        f"attention adds ‖·‖ = {num(b.attn_out)} to the stream",
        layer=i,
        head=b.head,
    )
    mlp = Cell(
        "mlp",
        ("MLP", f"{'+' if compact else 'adds '}{num(b.mlp_out)}"),
        f"The MLP adds ‖hook_mlp_out‖ = {num(b.mlp_out)} to a stream of ‖·‖ = {num(b.resid_mid)}",
        layer=i,
    )
    lens = _lens_cell(
        b.lens_id, name(b.lens_id), b.lens_prob, final_id, ov.uniform_prob, f"block {i}'s output", i, compact
    )
    steps = [ln_1, attn, add_attn, ln_2, mlp, add_mlp] if pre else [attn, add_attn, ln_1, mlp, add_mlp, ln_2]
    return steps + [lens]


def _output_cells(ov, name, top: int, compact: bool) -> list[Cell]:
    chars = 5 if compact else 7
    cells = [Cell("ln_f", ("ln_f", num(ov.ln_f)), f"‖ln_f output‖ = {num(ov.ln_f)}: what the unembedding reads")]
    for rank, (t, p) in enumerate(zip(ov.top_ids[:top], ov.top_probs[:top], strict=True), 1):
        real = " (the prompt's next token)" if t == ov.next_id else ""
        cells.append(
            Cell(
                "prob",
                (short(name(t), chars), pct(p)),
                f"#{rank}: {plotly_text(name(t))}{real}, p = {pct(p)} (uniform guessing: {pct(ov.uniform_prob)})",
                token=t,
                share=p,
            )
        )
    if ov.next_id is not None and ov.next_id not in ov.top_ids[:top]:  # what the prompt really has next
        t = ov.next_id
        lines = (
            ("next", short(name(t), chars), f"{pct(ov.next_prob)} #{ov.next_rank}")
            if compact
            else (f"next {short(name(t), 6)}", f"{pct(ov.next_prob)} #{ov.next_rank}")
        )
        cells.append(
            Cell(
                "next",
                lines,
                f"The prompt's real next token, {plotly_text(name(t))}: p = {pct(ov.next_prob)}, the "
                f"model's choice #{ov.next_rank} (uniform guessing: {pct(ov.uniform_prob)})",
                token=t,
                share=ov.next_prob,
            )
        )
    return cells


def overview_cells(
    ov, names: dict[int, str], position_labels: list[str], labels: list[str], top: int = 5, compact: bool = False
) -> list[list[Cell]]:
    """The diagram's boxes, grouped: the input, each block, the output. `names`: token text by id (every id the
    overview names); `position_labels` ("3:text") and `labels` ("text"): the prompt's tokens by position.
    `compact`: shorter text, for narrow boxes (a phone, or many blocks side by side)."""

    def name(i: int) -> str:
        return names.get(i, f"#{i}")

    final = ov.top_ids[0]
    groups = [_input_cells(ov, name, final, compact)]
    groups += [
        _block_cells(ov, b, name, position_labels.__getitem__, labels.__getitem__, final, compact) for b in ov.blocks
    ]
    groups.append(_output_cells(ov, name, top, compact))
    return groups


def group_titles(ov) -> list[str]:
    return ["input"] + [f"block {b.layer}" for b in ov.blocks] + ["output"]


def _boxes(groups: list[list[Cell]], wide: bool) -> list[tuple[Cell, float, float, float, float, int]]:
    """(cell, x0, x1, y0, y1, group) for every box; y grows downwards (the axis is reversed)."""
    out = []
    for g, cells in enumerate(groups):
        along = 0.0
        for cell in cells:
            size = SIZE.get(cell.kind, 1.0)
            a0, a1 = along, along + size
            along = a1 + GAP
            if wide:  # groups are columns; a group's boxes go down
                out.append((cell, g - 0.44, g + 0.44, a0 + 0.45, a1 + 0.45, g))
            else:  # groups are rows (a title line above each); a group's boxes go right
                out.append((cell, a0, a1, g * 1.5 + 0.4, g * 1.5 + 1.4, g))
    return out


def overview_figure(
    ov, names: dict[int, str], position_labels: list[str], labels: list[str], layout: str = "wide", top: int = 5
) -> go.Figure:
    """The forward pass at `ov.position` (gptviz.methods.overview.ForwardOverview) as boxes; layout "wide"
    (stages left to right) or "tall" (stages top to bottom)."""
    wide = layout == "wide"
    compact = not wide or len(ov.blocks) > ROOMY_BLOCKS
    groups = overview_cells(ov, names, position_labels, labels, top, compact)
    boxes = _boxes(groups, wide)
    # shapes and annotations are gathered, then set once: Plotly validates the whole tuple again on every add_shape,
    # a cost that grows with the square of the boxes (a 12-block model's page switch; `python -m benchmarks latency`)
    shapes = []
    for cell, x0, x1, y0, y1, _ in boxes:
        shapes.append(
            dict(
                type="rect",
                x0=x0,
                x1=x1,
                y0=y0,
                y1=y1,
                fillcolor=FILL[cell.kind],
                layer="below",
                line=dict(color="#9aa4b2" if cell.kind != "add" else "#c3c9d2", width=1),
            )
        )
        if cell.kind in ("prob", "next") and cell.share > 0:  # the probability as a bar along the box
            shapes.append(
                dict(
                    type="rect",
                    x0=x0,
                    x1=x0 + (x1 - x0) * min(cell.share, 1.0),
                    y0=y0,
                    y1=y1,
                    fillcolor=BAR,
                    opacity=0.6,
                    layer="below",
                    line=dict(width=0),
                )
            )
    fig = go.Figure()
    size = 10 if compact else 12
    texts = ["<br>".join([f"<b>{c.lines[0]}</b>", *c.lines[1:]]) for c, *_ in boxes]
    fig.add_trace(
        go.Scatter(
            x=[(x0 + x1) / 2 for _, x0, x1, *_ in boxes],
            y=[(y0 + y1) / 2 for *_, y0, y1, _ in boxes],
            mode="markers+text",
            text=texts,
            textfont=dict(size=size, color="#1f2733"),
            marker=dict(size=34 if wide else 26, symbol="square", color="rgba(0,0,0,0)"),
            selected=dict(marker=dict(opacity=0)),
            unselected=dict(marker=dict(opacity=0)),
            customdata=[[c.kind, c.layer, c.head, c.token] for c, *_ in boxes],
            hovertext=[c.hover for c, *_ in boxes],
            hovertemplate="%{hovertext}<extra></extra>",
            showlegend=False,
        )
    )
    titles = group_titles(ov)
    annotations = [
        dict(x=g, y=0.2, text=f"<b>{title}</b>", showarrow=False, font=dict(size=12))
        if wide
        else dict(x=0, y=g * 1.5 + 0.2, text=f"<b>{title}</b>", showarrow=False, xanchor="left", font=dict(size=11))
        for g, title in enumerate(titles)
    ]
    if wide:  # rows read top to bottom by themselves; columns need the order said
        annotations += _arrows(len(groups))
    fig.update_layout(shapes=shapes, annotations=annotations)
    extent = max(y1 if wide else x1 for _, x0, x1, y0, y1, _ in boxes)
    if wide:
        fig.update_xaxes(range=[-0.5, len(groups) - 0.5])
        fig.update_yaxes(range=[extent + 0.05, 0])
        height = int(60 + 52 * extent)
    else:
        fig.update_xaxes(range=[-0.02, extent + 0.02])
        fig.update_yaxes(range=[len(groups) * 1.5, 0])
        height = int(20 + 62 * len(groups))
    fig.update_xaxes(visible=False, fixedrange=True)
    fig.update_yaxes(visible=False, fixedrange=True)
    fig.update_layout(
        height=height,
        margin=dict(l=4, r=4, t=4, b=4),
        template=LIGHT_TEMPLATE,
        font=FONT,
        hovermode="closest",
        hoverdistance=60,
        dragmode=False,
        clickmode="event+select",
        plot_bgcolor="white",
        paper_bgcolor="white",
        meta={"overview_layout": layout, "groups": titles},
    )
    return fig


def _arrows(n_groups: int) -> list[dict]:
    """An arrow between each pair of column titles: the order the forward pass runs."""
    return [
        dict(x=g + 0.5, y=0.2, text="→", showarrow=False, font=dict(size=14, color="#6b7686"))
        for g in range(n_groups - 1)
    ]
