"""The pre/post attention maps' hover (issue 60): each map sends its weights once, as float32, and names a cell's
tokens from its category axes, not per cell; what a hovered cell reads is what it read when every cell carried both
token labels, both weights in full precision and both positions."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import gptviz.model.weights
from gptviz import capture
from gptviz.app import sidebar
from gptviz.app.model_service import pattern_names
from gptviz.figures import norms_attention as fna
from gptviz.figures.training import plain
from gptviz.methods import wiring
from gptviz.model.tokenizer import get_tokenizer
from tests.support.pagetest import array

# A pair map on the bundled twins' default prompt (61 tokens) was 223 KB, 220 KB of it hover data.
MAX_MAP_BYTES = 60_000
FIELD = re.compile(r"%\{([^}:]+)(?::([^}]*))?\}")


def sent(fig) -> dict:
    """The trace as the browser gets it (Plotly's JSON), its arrays decoded."""
    trace = json.loads(fig.to_json())["data"][0]
    for key in ("z", "customdata"):
        if key in trace:
            trace[key] = array(trace[key])
    return trace


def hover_text(trace: dict, query: int, key: int) -> str:
    """The trace's hovertemplate filled in for cell (query, key) as Plotly fills it: pointNumber is the cell's
    [row, column], %{x}/%{y} the categories' names, the rest the cell's values with their number formats."""
    values = {
        "pointNumber[0]": query,
        "pointNumber[1]": key,
        "x": trace["x"][key],
        "y": trace["y"][query],
        "z": trace["z"][query, key],
    }
    if "customdata" in trace:
        cell = trace["customdata"][query, key]
        values["customdata"] = cell
        values.update({f"customdata[{i}]": v for i, v in enumerate(np.atleast_1d(cell))})
    return FIELD.sub(lambda m: format(values[m.group(1)], m.group(2) or ""), trace["hovertemplate"])


def pair_hover_before(labels, pre, post, query: int, key: int) -> str:
    """What a cell of any of the three maps read before (the template filled from its per-cell customdata)."""
    q, k = plain(labels[query]), plain(labels[key])
    return (
        f"query {query} {q}<br>key {key} {k}<br>pre {float(pre[query, key]):.3f}, "
        f"post {float(post[query, key]):.3f}<extra></extra>"
    )


def drawn(text: str) -> str:
    """The text as drawn: a repeated token's category name carries zero-width spaces, which draw as nothing."""
    return text.replace("\u200b", "")


def causal_pattern(rng, T: int) -> np.ndarray:
    pat = np.tril(rng.random((T, T))).astype(np.float32)
    return pat / pat.sum(1, keepdims=True)


def test_every_cell_of_the_three_maps_reads_as_before_with_repeats_and_tags():
    rng = np.random.default_rng(0)
    labels = ["the", "<b>", " cat", "the", "&", " cat", "the"]
    T = len(labels)
    pre, post = causal_pattern(rng, T), causal_pattern(rng, T)
    figs = fna.attention_panels(pre, post, labels, "L0H0")
    assert len(figs) == 3
    for fig in figs:
        trace = sent(fig)
        assert trace["z"].dtype == np.float32 and trace["customdata"].dtype == np.float32
        for query in range(T):
            for key in range(query + 1):
                assert drawn(hover_text(trace, query, key)) == pair_hover_before(labels, pre, post, query, key)
    # the tag shows as text, and a repeat keeps its own row (the hover names the row's own position)
    assert drawn(hover_text(sent(figs[0]), 3, 1)) == "query 3 the<br>key 1 &lt;b&gt;<br>" + (
        f"pre {float(pre[3, 1]):.3f}, post {float(post[3, 1]):.3f}<extra></extra>"
    )
    np.testing.assert_allclose(np.nan_to_num(sent(figs[2])["z"]), np.tril(post - pre), atol=1e-7)


def test_own_tokens_maps_read_each_models_tokens_as_before():
    rng = np.random.default_rng(1)
    labels = {"pre": ["a", "<i>", "a", " b"], "post": ["a", "b", "<", "a", "c"]}
    pats = {norm: causal_pattern(rng, len(names)) for norm, names in labels.items()}
    figs = fna.attention_panels(pats["pre"], pats["post"], labels["pre"], "", post_labels=labels["post"])
    for fig, norm in zip(figs, ("pre", "post"), strict=True):
        trace, names, pat = sent(fig), labels[norm], pats[norm]
        assert "customdata" not in trace
        for query in range(len(names)):
            for key in range(query + 1):
                want = (
                    f"query {query} {plain(names[query])}<br>key {key} {plain(names[key])}<br>"
                    f"weight {float(pat[query, key]):.3f}<extra></extra>"
                )
                assert drawn(hover_text(trace, query, key)) == want


@pytest.fixture(scope="module")
def twins_on_default_prompt():
    """The bundled twins' first heads' attention on the default prompt, and its token labels."""
    folders = gptviz.model.weights.bundled_models()
    pairs = wiring.trained_twins(list(folders))
    if not pairs:
        pytest.skip("no bundled twins in gptviz/bundled")
    tokenizer = get_tokenizer()
    ids = tokenizer.encode(sidebar.DEFAULT_PROMPT)
    pats = {}
    for norm in ("pre", "post"):
        model = gptviz.model.weights.load_checkpoint(folders[getattr(pairs[0], norm)]).eval()
        name = pattern_names(model.config.n_layers)[0]
        pats[norm] = capture(model, torch.tensor([ids]), [name])[1][name][0, 0].numpy()
    return pats, [tokenizer.decode([i]) for i in ids]


def test_a_pair_map_on_the_default_prompt_is_small_and_reads_as_before(twins_on_default_prompt):
    """The page's pair maps (two, no difference): each under MAX_MAP_BYTES of JSON, every hovered cell as before."""
    pats, labels = twins_on_default_prompt
    T = len(labels)
    figs = fna.attention_panels(pats["pre"], pats["post"], labels, "", height=320, with_difference=False)
    assert len(figs) == 2
    for fig in figs:
        assert len(fig.to_json()) < MAX_MAP_BYTES
        trace = sent(fig)
        for query in range(T):
            for key in range(query + 1):
                assert drawn(hover_text(trace, query, key)) == pair_hover_before(
                    labels, pats["pre"], pats["post"], query, key
                )
