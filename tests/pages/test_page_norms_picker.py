"""Pre-norm vs post-norm's matched pair (AppTest): the picker reruns only the pair's fragment (issue 60)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import gptviz.model.weights
from gptviz import capture
from gptviz.app import keys as K
from gptviz.app import sidebar
from gptviz.app.model_service import pattern_names
from gptviz.methods import wiring
from gptviz.model.tokenizer import get_tokenizer
from tests.support.pagetest import array, figures, forward_calls, run_fragment, run_page, title_of

# the same-weights tab at its smallest: the full run that opens the page stays quick
TINY = dict(norms_preset="tiny", norms_depth=3, norms_width=32, norms_input="random", norms_seed=0, norms_init="gpt2")
OPTION = re.compile(r"pre L(\d+)H(\d+) ↔ post L(\d+)H(\d+) \(similarity (\d\.\d\d)\)")


def bundled_twins() -> dict[str, torch.nn.Module]:
    """The bundled twins by wiring, loaded here from their folders (a skip where there are none)."""
    folders = gptviz.model.weights.bundled_models()
    pairs = wiring.trained_twins(list(folders))
    if not pairs:
        pytest.skip("no bundled twins in gptviz/bundled")
    return {
        norm: gptviz.model.weights.load_checkpoint(folders[getattr(pairs[0], norm)]).eval() for norm in ("pre", "post")
    }


def test_a_pair_pick_redraws_only_the_pair_with_the_picked_heads_attention():
    """The picker reran the whole page, all four tabs (1.4-1.8 s to the page final). A pick now reruns the pair's
    fragment alone: the tree after it holds only what the fragment drew (the two maps, none of the bars, wirings or
    other tabs), no forward pass runs, and the maps are the picked heads' attention on the prompt as captured here
    from the twins' own folders; the sentence names the picked pair's similarity and the address holds the pick."""
    twins = bundled_twins()
    at = run_page("norms", **TINY)
    assert not at.exception, at.exception
    assert len(figures(at)) > 2  # the full run: the pair, the bars, the wirings, the other tabs' figures
    picker = at.selectbox(key=K.TWINS_PAIR)
    other = next(i for i in range(len(picker.options)) if i != picker.value)
    pre_layer, pre_head, post_layer, post_head, similarity = OPTION.fullmatch(picker.options[other]).groups()
    picker.set_value(other)
    passes = forward_calls()
    run_fragment(at, "matched_pair")
    assert not at.exception, at.exception
    assert forward_calls() == passes
    maps = figures(at)
    assert [title_of(f) for f in maps] == [
        f"pre-norm L{pre_layer}H{pre_head} the picked head",
        f"post-norm L{post_layer}H{post_head} similarity {similarity}",
    ]
    ids = torch.tensor([get_tokenizer().encode(sidebar.DEFAULT_PROMPT)])
    T = ids.shape[1]
    for fig, norm, layer, head in zip(
        maps, ("pre", "post"), (pre_layer, post_layer), (pre_head, post_head), strict=True
    ):
        name = pattern_names(twins[norm].config.n_layers)[int(layer)]
        want = capture(twins[norm], ids, [name])[1][name][0, int(head)].numpy()
        got = array(fig["data"][0]["z"]).astype(float).reshape(T, T)
        below = np.tril(np.ones((T, T), dtype=bool))  # the causal mask's upper triangle is drawn empty
        np.testing.assert_allclose(got[below], want[below], rtol=1e-4, atol=1e-6)
        assert np.isnan(got[~below]).all()
    assert f"(similarity {similarity} against" in at.markdown[0].value
    assert at.query_params["twins_pair"] == str(other)
