"""One setting recolours every heatmap (issue 62): with a colour-blind-safe palette chosen, each figure builder that
draws a continuous colour scale draws it from cividis (magnitudes) or PuOr (signed values), and so do the two browser
components that colour cells or tokens. The builders are found by reading gptviz/figures: one that draws a heatmap
and is missing from BUILDERS below fails the test, so a new heatmap cannot bypass the setting unnoticed."""

from __future__ import annotations

import ast
import re
from types import SimpleNamespace as NS

import numpy as np
import plotly.colors as pcolors
import pytest
import torch

from gptviz.figures import activations as fa
from gptviz.figures import attention as fat
from gptviz.figures import embeddings as fe
from gptviz.figures import explainers as fx
from gptviz.figures import generation as fg
from gptviz.figures import graph as fgr
from gptviz.figures import head_views as hv
from gptviz.figures import norms_attention as fna
from gptviz.figures import norms_training as fnt
from gptviz.figures import unit_page as fu
from gptviz.figures import why as fw
from gptviz.figures.attention import OUT_OF_WINDOW_COLOR
from gptviz.figures.common import MASKED_COLOR
from gptviz.figures.palette import PALETTES, STANDARD, current, use_palette
from gptviz.figures.unit_page import ExampleRow
from gptviz.methods.graph_qk import QKDecomposition
from tests.support import ROOT

FIGURES = ROOT / "gptviz" / "figures"
RNG = np.random.default_rng(0)
T, L, H = 5, 2, 3
LABELS = ["The", " cat", " sat", " on", " it"]


def causal(*shape) -> np.ndarray:
    p = RNG.random((*shape, T, T)).astype(np.float32) * np.tril(np.ones((T, T), dtype=np.float32))
    return p / p.sum(-1, keepdims=True)


def a_graph():
    def node(id, kind, layer, index, pos, infl):
        return NS(id=id, kind=kind, layer=layer, index=index, position=pos, influence=infl, direct=0.0, ablation=None)

    nodes = [
        node("E@0", "embeddings", None, None, 0, 0.2),
        node("L0H1@4", "head", 0, 1, 4, 2.0),
        node("L0N3@4", "neuron", 0, 3, 4, -1.0),
        node("metric", "metric", None, None, 4, 1.5),
    ]
    edges = [NS(source="E@0", target="L0H1@4", weight=0.8), NS(source="L0N3@4", target="metric", weight=-0.4)]
    return NS(nodes=nodes, edges=edges, metric=1.5)


def head_steps():
    from gptviz import capture
    from gptviz.methods.head_steps import head_hook_names
    from gptviz.methods.head_steps import head_steps as steps
    from tests.support.models import build

    model = build()
    ids = torch.arange(T)
    _, cache = capture(model, ids[None], list(head_hook_names(0, "pre")))
    return steps(model, {k: v[0] for k, v in cache.items()}, 0, 1, T - 1)


def rows():
    return [
        ExampleRow(LABELS, np.linspace(-0.2, 1.0, T), 2, "#1", "doc 0"),
        ExampleRow(LABELS[::-1], np.linspace(1.0, 0.0, T), 0, "#2", "doc 1"),
    ]


def step_rows():
    return [RNG.random(3 + s).astype(np.float32) for s in range(2)]


# Every public builder in gptviz/figures that draws a continuous colour scale, called on small data.
BUILDERS = {
    "activations.residual_norm_heatmap": lambda: fa.residual_norm_heatmap(RNG.random((L + 1, T)), LABELS),
    "activations.mlp_histograms": lambda: fa.mlp_histograms(RNG.integers(0, 50, (L, 20)), np.linspace(-1, 3, 21)),
    "activations.logit_lens_heatmap": lambda: fa.logit_lens_heatmap(
        RNG.random((L + 1, T)), [LABELS] * (L + 1), LABELS, LABELS, RNG.random((L + 1, T))
    ),
    "activations.head_detector_heatmaps": lambda: fa.head_detector_heatmaps(
        {"induction": RNG.random((L, H)), "previous-token": RNG.random((L, H))}
    ),
    "attention.attention_heatmap": lambda: fat.attention_heatmap(causal()[()], LABELS, scale="sqrt", query=2),
    "attention.attention_grid": lambda: fat.attention_grid(
        causal(L, H), LABELS, panel_names=[[f"L{layer}H{h}" for h in range(H)] for layer in range(L)], scale="linear"
    ),
    "attention.model_view": lambda: fat.model_view(
        causal(L, H), LABELS, row_names=["L0", "L1"], col_names=["H0", "H1", "H2"], scale="max"
    ),
    "attention.entropy_map": lambda: fat.entropy_map(RNG.random((L, H)), uniform_entropy=1.6),
    "embeddings.embedding_panels": lambda: fe.embedding_panels(
        RNG.normal(size=(T, 8)), RNG.normal(size=(T, 8)), RNG.normal(size=(T, 8)), LABELS, range(8)
    ),
    "embeddings.token_similarity": lambda: fe.token_similarity(RNG.uniform(-1, 1, (T, T)), LABELS),
    "embeddings.position_similarity": lambda: fe.position_similarity(RNG.uniform(-1, 1, (8, 8))),
    "explainers.causal_mask_figure": lambda: fx.causal_mask_figure(np.tril(np.ones((T, T))), LABELS),
    "generation.generation_heatmap": lambda: fg.generation_heatmap(step_rows(), [0, 0], LABELS, 3, scale="sqrt"),
    "generation.step_attention": lambda: fg.step_attention(
        RNG.random((H, T)),
        LABELS,
        window_start=0,
        query_label=" on",
        predicted_label=" it",
        row_titles=["head 0", "head 1", "head 2"],
    ),
    "graph.qk_figure": lambda: fgr.qk_figure(
        QKDecomposition(
            1, 0, 4, 2, 1.0, ["embeddings", "L0H2"], ["embeddings", "L0 MLP"], torch.tensor([[0.5, -0.2], [0.9, -0.2]])
        ),
        " it",
        " cat",
    ),
    "graph.graph_figure": lambda: fgr.graph_figure(a_graph(), LABELS, n_layers=L),
    "head_views.attention_text": lambda: hv.attention_text(RNG.random(T), LABELS, query=3, visible=4),
    "head_views.head_steps_figure": lambda: hv.head_steps_figure(head_steps(), LABELS),
    "head_views.neuron_view": lambda: hv.neuron_view(head_steps(), 2, LABELS),
    "norms_attention.attention_pair": lambda: fna.attention_pair(causal(), causal(), LABELS),
    "norms_attention.attention_panels": lambda: fna.attention_panels(causal(), causal(), LABELS, "L0H1"),
    "norms_attention.attention_distance": lambda: fna.attention_distance(RNG.random((L, H))),
    "norms_training.warmup_grads": lambda: fnt.warmup_grads(
        {"warm-up": RNG.random((L, 6)), "none": RNG.random((L, 6))}
    ),
    "unit_page.examples_text": lambda: fu.examples_text(rows(), value_name="activation", cmax=1.0),
    "why.layer_head_grid": lambda: fw.layer_head_grid(RNG.normal(size=(L, H)), title="t", colorbar="effect"),
    "why.patching_heatmap": lambda: fw.patching_heatmap(RNG.uniform(-0.2, 1, (L, T)), LABELS, title="t"),
    "why.token_strip": lambda: fw.token_strip(LABELS, RNG.normal(size=T), title="t"),
    "why.attribution_bars": lambda: fw.attribution_bars(["embed", "L0H0", "L0 MLP"], [0.5, -0.3, 0.1], title="t"),
}
# colour helpers that the builders above call (tested through them)
HELPERS = {"attention.color_axis", "attention.masked_trace", "why.sign_colours"}


def colour_builders() -> set[str]:
    """module.function for every public top-level function in gptviz/figures whose code draws with a colour scale or
    the two signed colours (a Heatmap, a colorscale or coloraxis, color_axis(...), sign_colours()), itself or through
    a private helper of its module that it calls."""
    found = set()
    for path in FIGURES.glob("*.py"):
        if path.stem == "palette":
            continue
        text = path.read_text()
        code = {
            node.name: ast.get_source_segment(text, node)
            for node in ast.parse(text).body
            if isinstance(node, ast.FunctionDef)
        }
        draws = {
            name
            for name, body in code.items()
            if re.search(r"Heatmap|colorscale|coloraxis|color_axis\(|sign_colours\(\)", body)
        }
        for _ in range(3):  # helpers of helpers
            draws |= {
                name
                for name, body in code.items()
                if any(re.search(rf"\b{helper}\(", body) for helper in draws if helper.startswith("_"))
            }
        found |= {f"{path.stem}.{name}" for name in draws if not name.startswith("_")}
    return found


def rgb(colour: str) -> np.ndarray:
    colour = colour.strip()
    if colour.startswith("#"):
        return np.array(pcolors.hex_to_rgb(colour), dtype=float)
    return np.array(pcolors.unlabel_rgb(colour), dtype=float)


def curve(scale: str) -> np.ndarray:
    return np.array([rgb(c) for c in pcolors.sample_colorscale(scale, np.linspace(0, 1, 1001))])


GREYS = [rgb(MASKED_COLOR), rgb(OUT_OF_WINDOW_COLOR)]


def scales_of(fig) -> list[list]:
    """Every continuous colour scale the figure draws: its traces' (heatmaps, markers) and its colour axes'."""
    out = []
    for trace in fig.data:
        if getattr(trace, "colorscale", None) is not None and trace.type == "heatmap":
            out.append(list(trace.colorscale))
        marker = getattr(trace, "marker", None)
        if marker is not None and getattr(marker, "colorscale", None) is not None:
            out.append(list(marker.colorscale))
    for name in fig.layout:
        if name.startswith("coloraxis") and fig.layout[name].colorscale is not None:
            out.append(list(fig.layout[name].colorscale))
    return out


def signed_colours_of(fig) -> list[str]:
    """Explicit colours a figure gives its bars, markers and lines (the graph's nodes and edges, the bars)."""
    out = []
    for trace in fig.data:
        colours = []
        if trace.type in ("bar", "scatter") and trace.marker is not None and trace.marker.color is not None:
            colours = trace.marker.color if isinstance(trace.marker.color, (list, tuple)) else [trace.marker.color]
        if trace.type == "scatter" and trace.mode == "lines" and trace.line.color is not None:
            colours = [trace.line.color]
        out += [c for c in colours if isinstance(c, str) and c.startswith(("rgb", "#")) and c not in ("#333", "#222")]
    return out


def on_palette(colours, palette: str) -> bool:
    """Whether every colour (greys of the mask aside) lies on the palette's sequential or diverging scale."""
    p = PALETTES[palette]
    curves = np.concatenate([curve(p.sequential), curve(p.diverging)])
    for c in colours:
        v = rgb(c)
        if any(np.abs(v - g).max() < 1 for g in GREYS):
            continue
        if np.abs(curves - v).max(axis=1).min() > 2.0:
            return False
    return True


def figures(built) -> list:
    return built if isinstance(built, list) else [built]


def test_every_builder_that_draws_a_colour_scale_is_listed():
    found = colour_builders()
    assert sorted(found - set(BUILDERS) - HELPERS) == [], "colour-scale builders this test does not cover"
    assert sorted(set(BUILDERS) - found) == [], "a listed builder no longer draws a colour scale"


@pytest.mark.parametrize("palette", ["cividis", "viridis"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_builder_draws_with_the_chosen_palette(name, palette):
    with use_palette(palette):
        assert current() == palette
        built = figures(BUILDERS[name]())
    standard = figures(BUILDERS[name]())
    for fig, plain in zip(built, standard, strict=True):
        scales, signed = scales_of(fig), signed_colours_of(fig)
        assert scales or signed, f"{name} drew no colour scale"
        for scale in scales:
            assert on_palette([c for _, c in scale], palette), f"{name}: {scale[:3]}... is not {palette}/PuOr"
        assert on_palette(signed, palette), f"{name}: {signed[:3]} are not {palette}/PuOr"
        # and the standard look is not cividis anywhere (two figures use viridis there already)
        for scale in scales_of(plain) if palette == "cividis" else ():
            colours = [c for _, c in scale]
            if not all(any(np.abs(rgb(c) - g).max() < 1 for g in GREYS) for c in colours):
                assert not on_palette(colours, palette), f"{name}'s standard look is {palette}"


def test_the_components_colour_with_the_palette_too():
    from gptviz.figures.browser import attention_map as amap
    from gptviz.figures.browser import token_rows

    stops = lambda data: [f"rgb({r},{g},{b})" for _, (r, g, b) in data["colors"]]  # noqa: E731
    patterns = causal(L, H)
    for palette in ("cividis", "viridis"):
        with use_palette(palette):
            heat = amap.payload(patterns, LABELS, layer=0, head=1, query=2, scale="sqrt")
            chips = token_rows.payload(rows(), value_name="activation", cmax=1.0)
        assert on_palette(stops(heat), palette) and on_palette(stops(chips), palette)
    assert not on_palette(stops(amap.payload(patterns, LABELS, layer=0, head=1, query=2, scale="sqrt")), "cividis")


def test_the_palette_is_read_from_the_source_unless_a_block_chose_one():
    from gptviz.figures import palette

    saved = palette._source
    try:
        palette.set_source(lambda: "cividis")
        assert current() == "cividis" and fat.color_axis("linear")["colorscale"] == "cividis"
        with use_palette(STANDARD):
            assert fat.color_axis("linear")["colorscale"] == "Blues"
        palette.set_source(lambda: "no such palette")  # a stale session value: the standard look
        assert current() == STANDARD
        palette.set_source(lambda: 1 / 0)  # no session here: the standard look
        assert current() == STANDARD
    finally:
        palette.set_source(saved)
    with pytest.raises(ValueError, match="palette must be one of"):
        with use_palette("rainbow"):
            pass


def lightness(colour: str) -> float:
    r, g, b = rgb(colour)
    return 0.299 * r + 0.587 * g + 0.114 * b


def test_text_on_coloured_cells_stays_readable():
    # cells that hold text run from light (0) to dark, so near-zero tokens stay light, and letters are white exactly
    # on the dark cells
    values = np.linspace(0, 1, 11)
    for palette in (STANDARD, "cividis", "viridis"):
        with use_palette(palette):
            fig = hv.attention_text(values, [f"t{i}" for i in range(11)], scale="linear")
            chips = __import__("gptviz.figures.browser.token_rows", fromlist=["payload"]).payload(
                rows(), value_name="activation", cmax=1.0
            )
        scale = fig.layout.coloraxis.colorscale
        cells = pcolors.sample_colorscale([list(s) for s in scale], values.tolist())
        letters = list(fig.data[0].insidetextfont.color)
        drawn = [rgb(c) for c in fig.data[0].marker.color]  # each token in its colour on the scale (float32 weights)
        assert np.abs(np.array(drawn) - np.array([rgb(c) for c in cells])).max() <= 1, palette
        assert lightness(cells[0]) > 200 and lightness(cells[-1]) < 120, palette
        if palette != STANDARD:  # the standard look keeps its rule (a share of the top), within a step of it
            assert letters == ["white" if lightness(c) < 145 else "#222" for c in cells], palette
        else:
            assert letters == ["white" if v > 0.55 else "#222" for v in values]
        first, last = chips["colors"][0][1], chips["colors"][-1][1]
        assert lightness(f"rgb({first[0]},{first[1]},{first[2]})") > 200, palette
        assert lightness(f"rgb({last[0]},{last[1]},{last[2]})") < 150, palette


@pytest.mark.slow
def test_the_sidebar_setting_recolours_the_pages_heatmaps():
    # the visitor's setting reaches every figure built in the run (the session is the palette's source)
    from gptviz.app import keys as K
    from tests.support.pagetest import figures as page_figures
    from tests.support.pagetest import open_app, run_page

    at = open_app()
    box = [s for s in at.sidebar.selectbox if s.label == "Colour scales"]
    assert len(box) == 1 and box[0].value == STANDARD and list(box[0].options) == [p.label for p in PALETTES.values()]
    for palette in (STANDARD, "cividis"):
        at = run_page("embeddings", **{K.PALETTE: palette})
        assert not at.exception
        heat = [t for fig in page_figures(at) for t in fig["data"] if t["type"] == "heatmap"]
        axes = [fig["layout"]["coloraxis"] for fig in page_figures(at) if "coloraxis" in fig["layout"]]
        scales = [t["colorscale"] for t in heat if "colorscale" in t] + [a["colorscale"] for a in axes]
        assert len(scales) >= 3
        assert all(on_palette([c for _, c in s], "cividis") == (palette == "cividis") for s in scales)
