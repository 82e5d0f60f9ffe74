"""What a figure leaves room for (issue 32, "Seen in the screenshots"): colour bars with a readable length, labels
that do not run into each other, token text in the logit lens's cells, titles that fit a phone. Sizes are computed
from the figure's layout with this file's own estimate of text widths (not the figures' constants), at a desktop
column and at a phone's width."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gptviz import PRESETS
from gptviz.figures import activations as fa
from gptviz.figures import embeddings as fe
from gptviz.figures import norms as fn
from gptviz.figures import norms_attention as fna
from gptviz.figures import params as fp
from gptviz.figures import why as fw
from gptviz.model.params import by_component, param_table
from tests.support.figure_labels import LABELS

PHONE_FIGURE = 358  # px: a figure's width on a 390 px phone
CHAR = 0.6  # an average character's width, as a share of the font size
BOLD_TITLE_CHAR = 6.6  # px: a title character as the app draws it (measured on a desktop screenshot)


def text_px(text: str, size: float) -> float:
    return CHAR * size * len(re.sub(r"&[#a-zA-Z0-9]+;", "x", re.sub(r"<[^>]*>", "", text)))


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def plot_area(fig, width: float) -> tuple[float, float]:
    m = fig.layout.margin
    return width - (m.l or 0) - (m.r or 0), fig.layout.height - (m.t or 0) - (m.b or 0)


# ---- Saliency ------------------------------------------------------------------------------------------------


def colorbar_length_px(fig, width: float) -> float:
    bar = fig.data[0].colorbar
    horizontal = bar.orientation == "h"
    w, h = plot_area(fig, width)
    length = 1 if bar.len is None else bar.len
    return length if bar.lenmode == "pixels" else length * (w if horizontal else h)


@pytest.mark.parametrize("width", [PHONE_FIGURE, 1050])
def test_saliency_colour_bar_is_long_enough_to_read(width):
    fig = fw.token_strip(LABELS, np.linspace(-1, 1, len(LABELS)), title="Integrated gradients on the prompt's tokens")
    # two rows of tokens left the colour bar 68 px long, its five ticks over each other and its title cut
    assert colorbar_length_px(fig, width) >= 150
    bar = fig.data[0].colorbar
    assert bar.orientation == "h" and (bar.thickness or 30) >= 10
    assert colorbar_length_px(fig, width) + text_px("attribution", 13) + 10 <= plot_area(fig, width)[0]
    assert fig.layout.margin.b >= bar.thickness + 40  # its ticks and title below it, inside the figure


def test_saliency_cells_text_fits_its_cell():
    fig = fw.token_strip(LABELS, np.zeros(len(LABELS)), title="t")
    trace = fig.data[0]
    assert trace.textfont.size is None  # Plotly's "auto": the largest size that fits each cell
    cells = np.asarray(trace.text)
    assert [c for c in cells.ravel() if c] == LABELS  # every token, in reading order
    cell_px = plot_area(fig, PHONE_FIGURE)[0] / cells.shape[1]
    assert cell_px / (0.65 * max(len(c) for c in LABELS)) >= 7  # 7 px text or more on a phone


# ---- Parameters ----------------------------------------------------------------------------------------------


def share_label_boxes(fig, width: float):
    """Boxes (left, bottom, right, top) in plot pixels, y up, of component_shares' labels (annotations written from
    x = 0 just above their bar) and of its bars, in a figure `width` px wide."""
    w, h = plot_area(fig, width)
    x_top = fig.layout.xaxis.range[1]
    y_far, y_near = fig.layout.yaxis.range  # reversed: the first row on top

    def y_px(y):
        return (y - y_far) / (y_near - y_far) * h

    labels = []
    for a in fig.layout.annotations:
        size = a.font.size or 12
        bottom = y_px(a.y) + (a.yshift or 0)
        labels.append((0, bottom, text_px(a.text, size), bottom + 1.2 * size, a.text))
    bars = [
        (0, y_px(i + 0.25), x / x_top * w, y_px(i - 0.25)) for i, x in zip(fig.data[0].y, fig.data[0].x, strict=True)
    ]
    return labels, bars, w, h


@pytest.mark.parametrize("split", [False, True], ids=["groups", "components"])
@pytest.mark.parametrize("width", [PHONE_FIGURE, 560, 1050])  # a phone; a desktop column; the full desktop width
def test_parameter_bar_labels_do_not_collide(width, split):
    comp = by_component(param_table(PRESETS["gpt2-xl"]))
    fig = fp.component_shares(comp, "gpt2-xl: 1,557,611,200 parameters", tied=True, split=split)
    labels, bars, w, h = share_label_boxes(fig, width)
    assert len(labels) == len(bars) == (9 if split else 5)
    for i, a in enumerate(labels):
        assert a[0] >= 0 and a[2] <= w, f"label {a[4]} leaves the plot"
        assert a[3] <= h, f"label {a[4]} runs into the title"
        for b in labels[i + 1 :]:
            assert not overlaps(a, b), f"labels {a} and {b} overlap"
        for bar in bars:
            assert not overlaps(a, bar), f"label {a[4]} is drawn over a bar {bar}"
    assert all(bar[3] - bar[1] >= 12 for bar in bars)  # bars thick enough to see
    texts = [a[4] for a in labels]
    if split:
        assert "491,827,200" in texts[4] and "491,596,800" in texts[5]  # both MLP matrices, exact
    else:
        assert "983,424,000" in texts[2] and "491,827,200" in texts[1]  # the MLP, attention: one row each


# ---- Embeddings ----------------------------------------------------------------------------------------------


def pca_label_boxes(fig, figure_width: float, plot_height: float = 310):
    """Pixel boxes of the prompt tokens' labels that show in a figure this wide (annotations, each hidden below the
    width its layout.meta gives; or the trace's own text placed "top center"), in a plot 90 px narrower."""
    xs = np.concatenate([np.asarray(t.x, float) for t in fig.data])
    ys = np.concatenate([np.asarray(t.y, float) for t in fig.data])
    sx = (figure_width - 90) / (xs.max() - xs.min())
    sy = plot_height / (ys.max() - ys.min())
    boxes = []
    if fig.data[1].text:
        for x, y, text in zip(fig.data[1].x, fig.data[1].y, fig.data[1].text, strict=True):
            cx, cy, tw = (x - xs.min()) * sx, (y - ys.min()) * sy + 11, text_px(text, 12)
            boxes.append((cx - tw / 2, cy - 7, cx + tw / 2, cy + 7))
    min_widths = (fig.layout.meta or {}).get("annotation_min_width", [0] * len(fig.layout.annotations))
    for a, min_width in zip(fig.layout.annotations, min_widths, strict=True):
        if min_width > figure_width:
            continue
        tw = text_px(a.text, a.font.size or 12)
        cx, cy = (a.x - xs.min()) * sx + (a.xshift or 0), (a.y - ys.min()) * sy + (a.yshift or 0)
        left = {"center": cx - tw / 2, "left": cx, "right": cx - tw}[a.xanchor]
        boxes.append((left, cy - 7, left + tw, cy + 7))
    return boxes


def clustered_pca():
    """The PCA of a prompt's tokens in a tight cluster at one side of the vocabulary, as a trained model's are."""
    rng = np.random.default_rng(0)
    vocab = rng.normal(size=(2000, 2)) * [1, 0.2]
    distinct = list(dict.fromkeys(LABELS))
    prompt = rng.normal(size=(len(distinct), 2)) * [0.3, 0.1] + [-1.5, -0.2]
    return fe.pca_scatter(vocab, ["v"] * len(vocab), prompt, distinct, (0.8, 0.016)), distinct


@pytest.mark.parametrize("figure_width,named", [(PHONE_FIGURE, 6), (700, 8), (940, 10)])
def test_pca_prompt_labels_do_not_pile_up(figure_width, named):
    """At a phone's width, a laptop's and a desktop's: labels placed for a wide figure piled up on a phone."""
    fig, distinct = clustered_pca()
    boxes = pca_label_boxes(fig, figure_width)
    assert len(boxes) >= named  # tokens still named on the plot
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not overlaps(a, b), f"labels at {a} and {b} overlap"
    assert list(fig.data[1].customdata) == distinct  # hover names every token, labelled or not


def test_pca_labels_hide_below_their_width_by_css():
    """The app's and the HTML file's CSS hides each label below the figure width the figure gives it."""
    from gptviz.export import annotation_width_css, figure_html

    fig, _ = clustered_pca()
    widths = fig.layout.meta["annotation_min_width"]
    assert len(widths) == len(fig.layout.annotations) and widths[0] == 0 and max(widths) > 0
    css = annotation_width_css(fig, ".st-key-x")
    assert ".st-key-x {container-type: inline-size;}" in css
    for i, width in enumerate(widths):
        hidden = f'.st-key-x g.annotation[data-index="{i}"]'
        assert (hidden in css) == (width > 0)
        if width:
            rule = next(line for line in css.split("\n") if hidden in line)
            assert rule.startswith(f"@container (max-width: {width - 0.02:.2f}px)")
    assert annotation_width_css(fe.position_similarity(np.eye(3)), ".st-key-x") == ""  # nothing to hide
    assert b'.plotly-graph-div g.annotation[data-index="' in figure_html(fig)


def test_embedding_panels_fit_a_phone():
    T = len(LABELS)
    rng = np.random.default_rng(1)
    fig = fe.embedding_panels(*(rng.normal(size=(T, 64)) for _ in range(3)), LABELS, range(0, 64))
    panel_px = (PHONE_FIGURE - 60 - 75 - 20) / 3  # after the token labels, colour bar, margins
    for a in fig.layout.annotations:
        assert max(text_px(line, a.font.size or 12) for line in a.text.split("<br>")) <= panel_px
    titles = [
        ax.title.text
        for name, ax in fig.layout.to_plotly_json().items()
        if name.startswith("xaxis")
        for ax in [fig.layout[name]]
        if ax.title.text
    ]
    assert titles == ["dimension"]  # once, not three times side by side
    assert all(fig.layout[f"xaxis{i}"].nticks == 3 for i in ("", "2", "3"))


# ---- Activations ---------------------------------------------------------------------------------------------


def lens(T: int):
    rng = np.random.default_rng(2)
    words = ["␣the", "␣and", "↵", "␣of", "␣window", "&amp;", "!"]
    top = [[words[rng.integers(len(words))] for _ in range(T)] for _ in range(5)]
    labels = (LABELS * 3)[:T]
    return top, fa.logit_lens_heatmap(rng.random((5, T)), top, labels, labels, rng.random((5, T)))


@pytest.mark.parametrize("T", [28, 48])
def test_logit_lens_writes_the_top_token_where_it_fits(T):
    top, fig = lens(T)
    trace = fig.data[0]
    assert trace.texttemplate == "%{text}" and trace.textfont.size is None  # "auto": fits the cell drawn
    cells = [list(row) for row in trace.text]
    room = fa.LENS_PLOT_PX / T / (0.65 * fa.LENS_MIN_FONT)
    for row, tops in zip(cells, top, strict=True):
        for cell, token in zip(row, tops, strict=True):
            assert cell == (token if len(token) <= room else "")
    assert sum(c != "" for row in cells for c in row) > 0.5 * 5 * T if T == 28 else True


def test_activation_token_axes_thin_their_own_labels():
    _, heat = lens(len(LABELS))
    norms = fa.residual_norm_heatmap(np.ones((5, len(LABELS))), LABELS)
    for fig in (heat, norms):
        axis = fig.layout.xaxis
        # an array of 28 tick labels is drawn whatever the width: 4 px apart on a phone. A category axis keeps
        # about one label per 15 px of the width drawn.
        assert axis.type == "category" and axis.tickmode == "auto"
        assert [c.replace("\u200b", "") for c in axis.categoryarray] == LABELS  # drawn as the tokens
        assert len(set(axis.categoryarray)) == len(LABELS)  # repeats keep their own column
        assert list(fig.data[0].x) == list(axis.categoryarray)


# ---- Pre-norm vs post-norm -----------------------------------------------------------------------------------


def test_norms_attention_is_three_figures_and_scales_stack():
    rng = np.random.default_rng(3)
    T = 12
    pat = np.tril(rng.random((T, T)))
    pat /= pat.sum(1, keepdims=True)
    figs = fna.attention_panels(pat, pat * 0.5, LABELS[:T], "Layer 0, head 0")
    assert [len(f.data) for f in figs] == [1, 1, 1]
    assert [f.data[0].zmax for f in figs[:2]] == [1, 1]  # the wirings on one scale
    np.testing.assert_allclose(np.nan_to_num(figs[2].data[0].z), np.tril(pat * 0.5 - pat))
    n = 5
    scales = fn.activation_scales(
        {"pre": np.arange(1, n + 1.0), "post": np.ones(n)},
        {"pre": np.ones(n), "post": np.ones(n)},
        {"pre": np.ones(n - 1), "post": np.ones(n - 1)},
        {"pre": np.ones(n - 1), "post": np.ones(n - 1)},
        64,
    )
    assert list(scales.layout.xaxis.domain) == list(scales.layout.xaxis2.domain) == [0, 1]  # full width each


# ---- Titles on a phone ---------------------------------------------------------------------------------------

TITLES = [
    "Direct attribution: every part of the final residual stream",
    "Token embeddings, first two principal components",
    "Cosine similarity of the prompt's token embeddings",
    "Logit lens: the top next token at every layer and position",
]


@pytest.mark.parametrize("title", TITLES)
def test_titles_fit_a_phone(title):
    fig = fw.attribution_bars(["a", "b"], [1.0, -1.0], title=title)
    lines = fig.layout.title.text.split("<br>")
    room = PHONE_FIGURE - 55  # seen: 46 characters of a title showed on a phone, from about 14 px in
    assert all(len(line) * BOLD_TITLE_CHAR <= room for line in lines), lines
    assert " ".join(lines) == title  # broken between words, nothing lost
    assert fig.layout.margin.t >= 34 + 20 * len(lines)  # each line has its room below the toolbar


def test_attention_views_reserve_the_room_their_labels_take():
    """The Attention page's views set margins that hold their tick labels (this file's estimate of their width),
    so Plotly lays them out once, not a second time after measuring (issue 60)."""
    from gptviz.figures import attention as fat
    from gptviz.figures import common

    labels = ["R", "ome", "␣through", "<b>", "␣window"] * 4
    pattern = np.tril(np.ones((20, 20), dtype=np.float32)) / np.arange(1, 21)[:, None]
    heat = fat.attention_heatmap(pattern, labels, title="t", query=3)
    widest = max(text_px(common.plotly_text(t), 11) for t in labels)
    assert heat.layout.margin.l >= widest and heat.layout.margin.b >= widest * np.sin(np.radians(60))
    assert common.label_px(["&amp;x"]) == common.label_px(["&x"]) > common.label_px(["<b>x</b>"]) - 1  # tags: none
    rows = [f"layer {i}" for i in range(12)]
    mv = fat.model_view(np.tile(pattern[:4, :4], (12, 2, 1, 1)), labels[:4], row_names=rows, col_names=["a", "b"])
    # the app's theme writes ticks at 12 px
    assert mv.layout.margin.l >= text_px("layer 11", 12) and mv.layout.margin.r >= common.COLORAXIS_BAR_ROOM
    fig = common.reserve_margins(common.apply_layout(fat.go.Figure(), title="t"), l=40, t=5)
    assert (fig.layout.margin.l, fig.layout.margin.t) == (40, common.title_room())  # never less than it had
