"""gptviz.notebook's unit, parameter and attribution views: the unit page's numbers from the index read API, drawn by
the app's token_rows.js; the Parameters and "Why this token?" figures built by the app's own factories."""

from __future__ import annotations

import html
import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

pytest.importorskip("anywidget")

from gptviz import GPT, PRESETS, load_pretrained  # noqa: E402
from gptviz import index as ix
from gptviz.figures import params as fp  # noqa: E402
from gptviz.figures import unit_page as fu
from gptviz.figures import why as fw
from gptviz.figures.browser import asset  # noqa: E402
from gptviz.model.params import by_component, param_table, total_params  # noqa: E402
from gptviz.model.tokenizer import encode, get_tokenizer, token_labels  # noqa: E402
from gptviz.notebook import attribution, parameters, unit  # noqa: E402
from gptviz.notebook.unit_widget import EXAMPLES_AFTER, EXAMPLES_BEFORE  # noqa: E402
from gptviz.notebook.widgets import text_line  # noqa: E402

BUNDLED = "shakespeare-pre"


@pytest.fixture(scope="module")
def bundled():
    model = load_pretrained(BUNDLED)
    index = ix.bundled_index(BUNDLED)
    if index is None:
        pytest.skip("the bundled model ships no index")
    return model, index, ix.index_documents(index)


def traces(fig) -> list:
    """A figure's traces as plain JSON (numpy arrays as lists), to compare a widget's with a factory's."""
    return json.loads(go.Figure(fig).to_json())["data"]


def shown_values(row: dict) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in row["values"]], dtype=np.float64)


@pytest.mark.slow
def test_a_neurons_top_examples_summary_and_histogram(bundled):
    model, index, docs = bundled
    view = unit(model, "L2N26", index, docs=docs, k=5)
    d = view.data
    u = index.unit("L2N26")
    assert d.summary == ix.summary(index, u) and view.children[0].value == f"<b>{html.escape(d.summary)}</b>"
    assert ix.active_phrase(index, u) in d.distribution  # the exact share, as the index keeps it
    share = float(index.arrays["active_share"][index.flat(u)])
    assert f"{share:.1%}" in d.distribution or f"{round(share * index.tokens):,} of" in d.distribution
    examples = ix.top_examples(index, u, 5)
    assert d.examples == examples and len(d.payload["rows"]) == 5
    for row, e, c in zip(d.payload["rows"], examples, d.contexts, strict=True):
        # the peak's value as the index recorded it (the page recomputes it: batched matmuls round differently)
        assert row["values"][row["peak"]] == pytest.approx(e.value, abs=2e-3)
        assert row["tokens"][row["peak"]] == token_labels([int(c.ids[c.peak])])[0]
        assert row["name"].startswith(f"#{e.rank + 1}  {e.value:.3f}  {e.doc_name}")
    assert d.payload["value_name"] == "activation" and d.payload["cmax"] == pytest.approx(examples[0].value)
    assert len(d.contexts[0].ids) <= EXAMPLES_BEFORE + EXAMPLES_AFTER + 1
    edges, counts = ix.histogram(index, u)
    same = fu.unit_histogram(edges, counts, ix.quantiles(index, u), value_name="activation")
    assert traces(view.histogram) == traces(same)
    np.testing.assert_array_equal(np.asarray(view.histogram.data[0].y), counts)
    effect = ix.direct_effect(model, 2, 26)
    assert [b for b in view.effect.data[0].x] == pytest.approx([v for _, v in effect.promoted])
    # the app's own token_rows.js, mounted by the adapter
    assert view.examples._esm.startswith(
        asset("token_rows", "js").replace("export default function (component)", "function mount(component)")
    )


def test_a_heads_rows_name_the_token_its_peak_attends_to(bundled):
    model, index, docs = bundled
    d = unit(model, "L1H2", index, docs=docs, k=4, colour="attention").data
    assert d.value_name == "attention" and d.payload["cmax"] == 1.0
    for row, c in zip(d.payload["rows"], d.contexts, strict=True):
        looks = ix.attended(c)
        assert f"→ {token_labels([looks.token])[0]} {looks.back} back ({looks.weight:.2f})" in row["name"]
        start, end = fu.window(token_labels(c.ids), c.peak)  # the tokens shown around the peak
        np.testing.assert_allclose(shown_values(row), c.attention[start:end], atol=1e-5)
        assert np.nanmax(c.attention) == pytest.approx(looks.weight)
    source = ix.attended(d.contexts[0]).token
    assert token_labels([source])[0] in d.effect_line
    by_norm = unit(model, "L1H2", index, docs=docs, k=1, effect=False).data
    assert by_norm.value_name == "output norm" and by_norm.effect is None


def test_the_context_matches_the_unit_page():
    pytest.importorskip("streamlit")
    from gptviz.app import unit_index

    assert (EXAMPLES_BEFORE, EXAMPLES_AFTER) == (unit_index.EXAMPLES_BEFORE, unit_index.EXAMPLES_AFTER)


def test_an_index_of_other_weights_is_refused(bundled):
    model, index, docs = bundled
    other = GPT(model.config, seed=3).eval()  # the same shapes, other weights
    with pytest.raises(ValueError, match="other weights"):
        unit(other, "L2N26", index, docs=docs)
    with pytest.raises(ValueError, match="for a head"):
        unit(model, "L2N26", index, docs=docs, colour="attention")
    with pytest.raises(ValueError, match="neither a folder"):
        unit(model, "L2N26", "no-such-model")


def test_parameters_are_the_pages_figures():
    cfg = PRESETS["gpt2-small"]
    view = parameters("gpt2-small")
    table = param_table(cfg)
    page = fp.component_shares(
        by_component(table), f"gpt2-small: {total_params(cfg):,} parameters", tied=cfg.tie_weights
    )
    assert traces(view.figures[0]) == traces(page)
    assert view.figures[0].layout.title.text == f"gpt2-small: {total_params(cfg):,} parameters"
    assert sum(view.figures[0].data[0].x) == total_params(cfg)  # every component's exact count
    assert len(view.figures) == 2 and len(parameters(cfg.replace(n_layers=1)).figures) == 1
    model = GPT(PRESETS["gpt2-small"].replace(n_layers=2, d_model=64, n_heads=2, vocab_size=300, n_ctx=32), seed=0)
    assert view.figures[0].layout.title.text != parameters(model).figures[0].layout.title.text
    with pytest.raises(ValueError, match="not a preset"):
        parameters("gpt5")


def test_attribution_sums_to_the_logit_difference(bundled):
    model = bundled[0]
    ids = get_tokenizer().encode("ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet")
    view = attribution(model, ids, " is", " was")
    dla = view.result
    with torch.no_grad():
        logits = model(torch.tensor([ids]))
    diff = float(logits[0, -1, encode(" is")[0]] - logits[0, -1, encode(" was")[0]])
    assert dla.logit_diff == pytest.approx(diff, abs=1e-4)
    assert float(dla.values.sum()) == pytest.approx(diff, abs=1e-3)
    bars = fw.attribution_bars(
        dla.labels, dla.values, title="Direct attribution: every part of the final residual stream"
    )
    assert traces(view.figures[0]) == traces(bars)
    np.testing.assert_allclose(np.asarray(view.figures[1].data[0].z), dla.head_values.numpy(), atol=1e-6)
    assert f"{diff:+.3f}" in view.children[0].value
    with pytest.raises(ValueError, match="2 tokens, not one"):
        attribution(model, ids, " Juliet's", " was")


def test_text_lines_are_text_not_html():
    hostile = "'<img src=x onerror=alert(1)>' & <script>alert(2)</script>"
    line = text_line(hostile)
    assert "<img" not in line.value and "<script" not in line.value
    assert line.value == ("&#x27;&lt;img src=x onerror=alert(1)&gt;&#x27; &amp; &lt;script&gt;alert(2)&lt;/script&gt;")
