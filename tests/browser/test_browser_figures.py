"""Labels of single figures as Debian's chromium draws them (each figure's standalone HTML, gptviz.export.figure_html,
at a phone's figure width and at a desktop column's): probability ticks each written differently, the unit page's
quantile labels apart, its promoted and suppressed tokens named off the bars."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz.export import annotation_width_css, figure_html
from gptviz.figures import training as ft
from gptviz.figures import unit_page as fu
from gptviz.model.tokenizer import token_label
from tests.support.browser import CHROMIUM
from tests.support.layout import overlapping
from tests.support.token_bars import bars_sampling

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

WIDTHS = [358, 460, 900]  # a phone's figure; the unit page's desktop column; a wide figure

BOXES_JS = """(selector) => [...document.querySelectorAll(selector)].filter((el) => el.textContent.trim())
  .map((el) => ({text: el.textContent, ...el.getBoundingClientRect().toJSON()}))"""


# Draws a figure into the tab that already runs Plotly: the old figure purged, the new one's annotation CSS in the head
# (figure_html's), its <div> and script from the same to_html call figure_html makes, minus Plotly's inlined source.
# Resolves once Plotly.newPlot's promise has and two frames have painted.
DRAW_JS = """async ({css, snippet}) => {
  document.querySelectorAll('.plotly-graph-div').forEach((gd) => { Plotly.purge(gd); gd.remove(); });
  document.getElementById('gv-css').textContent = css;
  const stage = document.getElementById('gv-stage');
  stage.innerHTML = snippet;
  for (const old of stage.querySelectorAll('script')) {  // scripts set by innerHTML do not run: run a copy
    const script = document.createElement('script');
    script.textContent = old.textContent;
    old.replaceWith(script);
  }
  await window.gvDrawn;
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
}"""


@pytest.fixture(scope="module")
def chromium(browser, tmp_path_factory):
    """One tab of the module's Chromium (conftest's fixture; no app server) that draws every figure in turn. It opens
    one figure's standalone file (gptviz.export.figure_html, Plotly's 4.6 MB script inlined) once; each test's figure
    is then drawn in place by the same Plotly.newPlot call its own file makes. Opening each figure's file took 1.8 s
    a figure (54 figures, 100 s), most of it Plotly's script run again."""
    first = tmp_path_factory.mktemp("figures") / "first.html"
    html = figure_html(bars_sampling([0], [1.0], [True], ["t0"], 0, n_allowed=1, kept_mass=1.0))
    first.write_bytes(
        html.replace(b"</head>", b'<style id="gv-css"></style></head>', 1).replace(
            b"<body>", b'<body style="margin:0"><div id="gv-stage"></div>', 1
        )
    )
    page = browser.new_page()
    page.goto(first.as_uri())
    page.locator(".main-svg").first.wait_for()
    page.evaluate(
        "() => { const draw = Plotly.newPlot; Plotly.newPlot = (...args) => (window.gvDrawn = draw(...args)); }"
    )
    yield page
    page.close()


def drawn(page, fig, width: int):
    """The tab showing the figure `width` px wide (its div fills the window's width, as in its own file)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.evaluate(
        DRAW_JS,
        {
            "css": annotation_width_css(fig, ".plotly-graph-div"),
            "snippet": fig.to_html(include_plotlyjs=False, full_html=False, config={"displaylogo": False}),
        },
    )
    return page


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("top", [0.02, 0.05, 0.011, 0.3, 0.004, 0.9])
def test_probability_ticks_are_distinct(chromium, width, top):
    probs = np.linspace(top, top / 10, 10)
    fig = bars_sampling(
        list(range(10)), probs, [True] * 10, [f"t{i}" for i in range(10)], 0, n_allowed=10, kept_mass=0.5
    )
    training = ft.next_token_bars({"a": [(f"t{i}", float(p)) for i, p in enumerate(probs)]})
    for figure in (fig, training):
        page = drawn(chromium, figure, width)
        ticks = [b["text"] for b in page.evaluate(BOXES_JS, ".xtick text")]
        assert len(ticks) >= 3, ticks
        assert len(set(ticks)) == len(ticks), ticks  # before: "0% 1% 1% 1% 2%" on a 0..2% axis
        assert all(t.endswith("%") for t in ticks), ticks


def histogram(quantiles):
    edges = np.linspace(-0.3, 5.5, 200)
    counts = np.maximum(1, (1e6 * np.exp(-np.abs(edges[:-1]) * 3)).astype(int))
    return fu.unit_histogram(edges, counts, quantiles, value_name="activation")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "quantiles",
    [
        {0.01: -0.17, 0.5: -0.02, 0.99: 4.13},  # seen: "1%dian"
        {0.01: 0.1, 0.25: 0.12, 0.5: 0.15, 0.75: 0.2, 0.99: 5.4},
        {0.5: 2.0},
    ],
)
def test_histogram_quantile_labels_apart(chromium, width, quantiles):
    page = drawn(chromium, histogram(quantiles), width)
    labels = page.evaluate(BOXES_JS, ".annotation-text")
    plot = page.evaluate("() => document.querySelector('.nsewdrag').getBoundingClientRect().toJSON()")
    ticks = page.evaluate(BOXES_JS, ".ytick text, .gtitle")
    assert sorted(b["text"] for b in labels) == sorted("median" if q == 0.5 else f"{q:.0%}" for q in quantiles)
    assert not overlapping(labels), overlapping(labels)
    for b in labels:
        assert b["bottom"] <= plot["top"] + 1 and b["top"] >= 0, b  # above the bars, inside the figure
        assert b["left"] >= 0 and b["right"] <= width, b
        assert not overlapping([b] + ticks), overlapping([b] + ticks)


@pytest.mark.parametrize("width", WIDTHS)
def test_promoted_and_suppressed_tokens_are_named_off_the_bars(chromium, width):
    promoted = [
        (t, 0.7 - 0.02 * i)
        for i, t in enumerate([" and", "\n", " or", "--", " ", " but", " though", " nor", " for", " I"])
    ]
    suppressed = [
        (t, -1.4 + 0.01 * i)
        for i, t in enumerate(
            [" acutely", " mare", "q", " integ", " Mill", "ima", " Court", " fixing", " baseless", " named"]
        )
    ]

    def label(items):  # as the page passes them: "␣and"
        return [(token_label(t.encode()), v) for t, v in items]

    page = drawn(chromium, fu.direct_effect_bars(label(promoted), label(suppressed)), width)
    labels = page.evaluate(BOXES_JS, ".ytick text, .y2tick text")
    bars = [
        dict(b, text="bar")
        for b in page.evaluate(BOXES_JS.replace(".filter((el) => el.textContent.trim())", ""), ".point path")
    ]
    titles = page.evaluate(BOXES_JS, ".annotation-text, .g-xtitle text, .g-x2title text")
    from tests.support.layout import TICKS_JS, crowded_ticks

    ticks = [page.evaluate(TICKS_JS, f".{axis}tick text")[0] for axis in ("x", "x2")]
    for axis in ticks:
        assert len(axis) >= 2 and not crowded_ticks(axis), axis
        assert not any(t["angle"] for t in axis), axis  # upright, not slanted to fit
    promotes, suppresses = sorted(
        (t for t in titles if t["text"] in ("promotes", "suppresses")), key=lambda t: t["left"]
    )
    assert suppresses["left"] - promotes["right"] >= 20, (promotes, suppresses)  # two titles, not one phrase
    assert [t["text"] for t in titles].count("logit change") == 1  # not twice, run together
    assert len(labels) == 20 and len(bars) == 20
    for label in labels:
        assert label["left"] >= 0 and label["right"] <= width, label
        assert not overlapping([label] + bars), overlapping([label] + bars)  # before: "1. ␣acutely" over a bar
    assert not overlapping(labels + titles), overlapping(labels + titles)


# The token heatmaps a phone shows (Why this token?'s patching grid and attention heatmap, the Explainers' causal
# mask): an array of 28 tick labels was drawn whatever the width, 7 px apart on a phone.
def token_heatmaps():
    from gptviz.figures import attention as fa
    from gptviz.figures import explainers as fx
    from gptviz.figures import why as fw
    from tests.support.figure_labels import LABELS

    T = len(LABELS)
    pattern = np.tril(np.random.default_rng(0).random((T, T)))
    pattern /= pattern.sum(1, keepdims=True)
    return {
        "attention": fa.attention_heatmap(pattern, LABELS),
        "patching": fw.patching_heatmap(np.random.default_rng(1).random((4, T)), LABELS, title="t"),
        "causal mask": fx.causal_mask_figure(np.tril(np.ones((T, T))), LABELS),
    }


@pytest.mark.parametrize("width,named", [(358, 8), (900, 14)])
@pytest.mark.parametrize("name", ["attention", "patching", "causal mask"])
def test_token_axes_apart_on_a_phone(chromium, width, named, name):
    from tests.support.layout import TICKS_JS, crowded_ticks

    page = drawn(chromium, token_heatmaps()[name], width)
    xs = page.evaluate(TICKS_JS, ".xtick text")[0]
    ys = page.evaluate(BOXES_JS, ".ytick text")
    assert len(xs) >= named, [t["text"] for t in xs]  # tokens still named, more where there is room
    assert not crowded_ticks(xs), crowded_ticks(xs)
    if name != "patching":  # its rows are layers
        assert len(ys) >= named and not overlapping(ys), overlapping(ys)
