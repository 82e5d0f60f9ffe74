"""The "Why this token?" page (AppTest, tiny preset): every figure and number equals the library's value,
recomputed here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.methods import attribution
from gptviz.methods.interventions import ablate_heads, run_with_edits
from gptviz.model.generate import generate
from gptviz.model.tokenizer import decode, encode, token_labels
from tests.support.pagetest import array, figure, figures, run_page, title_of
from tests.support.why_page import PROMPT, page, tiny_model, top_two


@pytest.mark.slow
def test_direct_attribution_view_shows_parts_that_sum_to_the_logit_difference():
    at = page()
    assert not at.exception and not at.error
    ids = encode(PROMPT)
    target, other = top_two(ids)
    dla = attribution.direct_logit_attribution(tiny_model(), torch.tensor([ids]), target, other)
    bars = figure(at, "Direct attribution")
    np.testing.assert_allclose(array(bars["data"][0]["y"]), dla.values.numpy(), atol=1e-5)
    grid = figure(at, "Heads' direct attribution")
    np.testing.assert_allclose(array(grid["data"][0]["z"]), dla.head_values.numpy(), atol=1e-5)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Logit difference (model)"] == f"{dla.logit_diff:+.3f}"
    assert metrics["Sum of the parts"] == f"{float(dla.values.sum()):+.3f}" == metrics["Logit difference (model)"]


def test_post_norm_says_why_there_is_no_direct_attribution():
    at = run_page("why", PROMPT, model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "post"))
    assert not at.exception
    assert any("not a sum of the heads' and MLPs' outputs" in i.value for i in at.info)
    assert not at.get("plotly_chart")


@pytest.mark.slow
def test_ablating_heads_shows_the_recomputed_probabilities_and_continuations():
    heads = [(0, 1), (1, 2)]
    at = page(why_view="Ablate heads", why_heads=heads, why_n=12)
    assert not at.exception and not at.error
    ids = encode(PROMPT)
    model = tiny_model()
    edits = [ablate_heads(0, [1]), ablate_heads(1, [2])]
    logits, _ = run_with_edits(model, torch.tensor([ids]), edits)
    after = torch.softmax(logits[0, -1], -1)
    before = torch.softmax(run_with_edits(model, torch.tensor([ids]), [])[0][0, -1], -1)
    shown = sorted(
        set(before.topk(5).indices.tolist()) | set(after.topk(5).indices.tolist()), key=lambda i: -float(before[i])
    )
    table = at.dataframe[0].value
    assert list(table["token"]) == token_labels(shown)
    np.testing.assert_allclose(table["after"], [float(after[i]) for i in shown], atol=1e-6)
    np.testing.assert_allclose(table["before"], [float(before[i]) for i in shown], atol=1e-6)
    plain = generate(model, ids, 12, temperature=0.0)[len(ids) :]
    edited = generate(model, ids, 12, temperature=0.0, edits=edits)[len(ids) :]
    assert [t.value for t in at.text] == [decode(plain), decode(edited)]
    assert [title_of(f) for f in figures(at)] == [
        "Click a head to ablate it, again to bring it back (colour: its direct attribution)",
        "L1H0 as trained",
        "L1H0 with the ablation",
    ]


def test_continuations_part_where_a_token_differs_or_where_the_shorter_one_ends():
    from gptviz.app.services.why import first_difference

    assert first_difference([5, 6, 7], [5, 6, 7]) is None
    assert first_difference([5, 6, 7], [5, 9, 7]) == 1
    # one continuation a prefix of the other (e.g. it stopped early): they part where the shorter ends
    assert first_difference([5, 6], [5, 6, 7, 8]) == 2
    assert first_difference([5, 6, 7], [5]) == 1
    assert first_difference([], [5]) == 0


@pytest.mark.slow
def test_where_the_continuations_part_both_tokens_are_quoted():
    from gptviz import load_pretrained
    from gptviz.app.display import md_text
    from tests.support.pagetest import run_page

    prompt, heads = "A B C D E F G H A B C", [(1, 0), (1, 1), (1, 2), (1, 3)]  # the pre-norm twin's layer 1
    at = run_page(
        "why",
        prompt,
        spec=model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre"),
        why_view="Ablate heads",
        why_heads=heads,
        why_n=8,
    )
    assert not at.exception and not at.error
    model, ids = load_pretrained("shakespeare-pre"), encode(prompt)
    plain = generate(model, ids, 8, temperature=0.0)[len(ids) :]
    edited = generate(model, ids, 8, temperature=0.0, edits=[ablate_heads(1, [0, 1, 2, 3])])[len(ids) :]
    split = next(
        i for i, (a, b) in enumerate(zip(plain, edited, strict=True)) if a != b
    )  # without layer 1 it stops copying
    assert (
        f"diverge at new token {split + 1}: “{md_text(token_labels([plain[split]])[0])}” without the ablation, "
        f"“{md_text(token_labels([edited[split]])[0])}” with it"
    ) in " ".join(w.value for w in at.warning)


@pytest.mark.slow
def test_patching_example_matches_the_library_sweep():
    name = "Repeated sequence (induction)"
    at = page(why_view="Patching", why_example=name)
    assert not at.exception and not at.error
    clean, corrupted = (encode(t) for t in ("A B C D E F G H A B C", "A B C Q E F G H A B C"))
    goal, _ = top_two(clean)
    rival, _ = top_two(corrupted)
    if rival == goal:
        rival = top_two(clean)[1]
    resid = attribution.residual_patching(tiny_model(), clean, corrupted, goal, rival)
    heads = attribution.head_patching(tiny_model(), clean, corrupted, goal, rival)
    np.testing.assert_allclose(
        array(figure(at, "Residual stream patched")["data"][0]["z"]), resid.scores.numpy(), atol=1e-4
    )
    np.testing.assert_allclose(
        array(figure(at, "One head's output patched")["data"][0]["z"]), heads.scores.numpy(), atol=1e-4
    )


@pytest.mark.slow
def test_patching_prompts_of_different_lengths_get_a_clear_message():
    at = page(
        why_view="Patching",
        why_example=K.OWN_PAIR,
        **{K.per_item(K.WHY_CLEAN, K.OWN_PAIR): "one two three", K.per_item(K.WHY_CORRUPT, K.OWN_PAIR): "one two"},
    )
    assert not at.exception
    assert any("same number of tokens" in w.value for w in at.warning)


@pytest.mark.slow
def test_saliency_strips_show_integrated_gradients_and_gradient_x_input():
    at = page(why_view="Saliency")
    assert not at.exception and not at.error
    ids = encode(PROMPT)
    target, other = top_two(ids)
    ig = attribution.integrated_gradients(tiny_model(), ids, target, other, steps=32)
    z = array(figure(at, "Integrated gradients")["data"][0]["z"]).ravel()
    np.testing.assert_allclose(z[~np.isnan(z)], ig.scores.numpy(), atol=1e-5)
    texts = [t for row in figure(at, "Integrated gradients")["data"][0]["text"] for t in row if t]
    assert len(texts) == len(ids)


@pytest.mark.slow
def test_token_text_reaches_the_figures_escaped():
    at = run_page("why", "<b>bold</b> & <img src=x>", why_view="Saliency")
    assert not at.exception
    texts = [t for row in figure(at, "Integrated gradients")["data"][0]["text"] for t in row if t]
    assert "&lt;" in "".join(texts) and "<b>" not in "".join(texts) and "<img" not in "".join(texts)


def test_information_flow_view_draws_the_librarys_graph():
    """The edges drawn, the counts said and the table are gptviz.methods.flow's graph at the slider's threshold."""
    from gptviz.methods.flow import information_flow

    bundled = model_service.ModelSpec(
        K.SOURCE_BUNDLED, "shakespeare-pre", "pre"
    )  # random weights route nearly all by skips
    at = run_page("why", PROMPT, bundled, why_view="Information flow", why_flow_threshold=0.05)
    assert not at.exception and not at.error
    ids = encode(PROMPT)
    graph = information_flow(model_service.load_model(bundled), torch.tensor([ids]), 0.05)
    fig = figure(at, "Information flow")
    drawn = [
        tuple(row[:6])
        for trace in fig["data"]
        if trace.get("mode") == "markers" and trace.get("customdata") and trace.get("legendgroup") == "attention"
        for row in trace["customdata"]
    ]
    labels = token_labels(ids)
    expected = [
        (e.layer, "attention", f"'{labels[e.source]}'", e.source, f"'{labels[e.target]}'", e.target)
        for e in graph.edges
        if e.kind == "attention"
    ]
    assert sorted(drawn) == sorted(expected) and drawn
    counts = next(c.value for c in at.caption if "edges at share" in c.value)
    assert counts.startswith(f"{len(graph.edges)} edges at share > 0.05")
    table = at.dataframe[0].value
    assert len(table) == len(expected) and list(table["share"]) == sorted(
        (e.importance for e in graph.edges if e.kind == "attention"), reverse=True
    )
    top = max((e for e in graph.edges if e.kind == "attention"), key=lambda e: e.importance)
    assert table["largest head share"][0] == f"L{top.layer}H{top.head}: {top.head_share:.0%} (even: 25%)"


def test_information_flow_on_post_norm_says_why_not():
    at = run_page("why", PROMPT, model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "post"), why_view="Information flow")
    assert not at.exception
    assert any("information-flow graph needs the pre-norm wiring" in i.value for i in at.info)


@pytest.mark.slow
def test_heads_ablated_from_the_grid_show_their_effect_under_it_and_stay_in_the_multiselect():
    """Clicking a head in the attribution grid opened the Attention page: it ablates the head (outlined) and the
    probabilities and continuation with and without it appear under the grid; the multiselect shows the same."""
    at = page(why_heads=[(1, 2)], why_n=8)
    assert not at.exception
    ids = encode(PROMPT)
    model = tiny_model()
    edits = [ablate_heads(1, [2])]
    after = torch.softmax(run_with_edits(model, torch.tensor([ids]), edits)[0][0, -1], -1)
    np.testing.assert_allclose(
        at.dataframe[0].value["after"][:1],
        [float(after[int(torch.softmax(run_with_edits(model, torch.tensor([ids]), [])[0][0, -1], -1).argmax())])],
        atol=1e-6,
    )
    assert [t.value for t in at.text][1] == decode(generate(model, ids, 8, temperature=0.0, edits=edits)[len(ids) :])
    grid = figure(at, "Heads' direct attribution")
    (outline,) = grid["layout"]["shapes"]
    assert (outline["x0"], outline["y0"]) == (1.5, 0.5)  # head 2 of layer 1
    assert grid["data"][1]["mode"] == "markers"  # the cells take clicks
    at.tabs[0]  # noqa: B018 (the tabs exist)
    at.session_state[K.WHY_VIEW] = "Ablate heads"
    at.run()
    assert at.multiselect(key=K.WHY_HEADS).value == [(1, 2)]
    at.multiselect(key=K.WHY_HEADS).set_value([]).run()
    assert at.session_state[K.WHY_ABLATED] == []


def test_patching_opens_on_the_sidebars_prompt_with_one_token_swapped():
    """It opened on "The prompts are the same" until a pair was picked."""
    at = page(why_view="Patching")
    assert not at.exception and not at.error and not at.info
    assert any("one token swapped" in c.value for c in at.caption)
    clean, corrupted = at.text_area(key="why_clean_(your own)").value, at.text_area(key="why_corrupt_(your own)").value
    assert clean == PROMPT and corrupted != clean and len(encode(corrupted)) == len(encode(clean))
    assert figure(at, "Residual stream patched") and figure(at, "One head's output patched")


@pytest.mark.slow
def test_a_target_picked_again_shows_the_same_figures_without_building_them_again(monkeypatch):
    """Issue 60: a target change spent most of its server time building Plotly figures; they are kept in the results
    cache by the values they show (gptviz.app.kept_figures), so a target picked
    again builds none."""
    from gptviz.app.services import results_cache
    from gptviz.figures import why as figs

    built = []
    for name in ("attribution_bars", "layer_head_grid"):
        original = getattr(figs, name)
        monkeypatch.setattr(figs, name, lambda *a, _f=original, _n=name, **k: built.append(_n) or _f(*a, **k))
    results_cache().clear()  # shared by the process: an earlier test may have drawn this page
    at = page()
    first = figures(at)
    assert sorted(built) == ["attribution_bars", "layer_head_grid"]
    at.selectbox(key=K.WHY_TARGET).select_index(2).run()
    other = figures(at)
    assert len(built) == 4 and other != first  # a new target: new values, new figures
    at.selectbox(key=K.WHY_TARGET).select_index(0).run()
    assert not at.exception and len(built) == 4  # back to the first: nothing built
    assert figures(at) == first
    results_cache().clear()  # the figures are shared: a fresh page builds its own only with the cache empty
    fresh = page()  # and what it shows is what a fresh page shows for that target
    assert figures(fresh) == first
