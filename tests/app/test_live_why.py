"""Under the live text (issue 58): each written token's top three contributors by direct effect, found beside the
model as it writes (equal to the attribution graph's direct effects of the nodes at its position); on a finished
run, the replayed step's contributors by direct effect and by influence, and one click to the Why page's graph for
that token; the table's contributors found live."""

from __future__ import annotations

import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.services import why_graph
from gptviz.methods.graph_contributors import contributor_label, top_contributors
from gptviz.methods.graph_frozen import FrozenModel
from gptviz.methods.graph_nodes import node_values
from gptviz.model.tokenizer import decode, encode
from tests.support.pagetest import TokenGate, finish_generation, gate_generations, generation_of, run_page
from tests.support.why_page import tiny_model

PROMPT = "JULIET:\nGood morrow, sweet Romeo"


def largest_direct(ids, target: int, n: int = 3) -> list[tuple[str, float]]:
    """The n nodes at the last position with the largest |direct effect| on logit(target), from the attribution
    graph's own direct-path pass on the text (FrozenModel), as (node id, effect)."""
    model = tiny_model()
    fm = FrozenModel(model, list(ids), target)
    v = node_values(fm, fm.direct_grads())
    p = len(ids) - 1
    nodes = [(f"E@{p}", float(v.embeddings[p]))]
    for layer in range(v.heads.shape[0]):
        nodes += [(f"L{layer}H{h}@{p}", float(x)) for h, x in enumerate(v.heads[layer, p])]
        nodes += [(f"L{layer}N{i}@{p}", float(x)) for i, x in enumerate(v.neurons[layer, p])]
        nodes += [(f"B:L{layer}.{name}@{p}", float(b[layer, p])) for name, b in v.biases.items()]
    return sorted(nodes, key=lambda node: -abs(node[1]))[:n]


@pytest.mark.slow
def test_the_live_text_shows_the_newest_tokens_contributors(monkeypatch):
    gate = TokenGate(at=3)
    gate_generations(monkeypatch, gate)
    # the pages' default pace: a run that waits for it finds each step's contributors before it waits
    at = run_page("generation", PROMPT, **{K.GEN_N: 8, K.GEN_TEMP: 0.0, K.GEN_PACE: S.DEFAULT_PACE})
    at.button(key=K.GEN_GENERATE).click().run()
    assert gate.reached.wait(30) and generation_of(at).running
    job = generation_of(at)
    assert sorted(job.contributors.found) == [0, 1, 2]
    at.run()  # a redraw while the model waits after its third token
    assert not at.exception and not at.error
    ids, target = why_graph.step_ids(job.prompt, job.steps, 2)
    want = largest_direct(ids, target)
    found = job.contributors.found[2]
    assert [c.id for c in found.top] == [node for node, _ in want]
    assert [c.value for c in found.top] == pytest.approx([value for _, value in want], abs=1e-5)
    box = next(t.value for t in at.text if t.value.startswith("new token 3, "))
    tokens = [decode([t]) for t in ids]
    assert box.splitlines()[1:4] == [f"  {contributor_label(c, tokens)}" for c in found.top]
    assert box.splitlines()[0].endswith(f": logit {found.metric:+.2f}")
    with torch.no_grad():
        logits = tiny_model()(torch.tensor([list(ids)]))[0, -1]
    assert found.metric == pytest.approx(float(logits[target]), abs=1e-4)  # the share's whole: the real logit
    link = next(c.value for c in at.caption if "why this token?" in c.value)
    assert link.startswith("Top contributors by direct effect for 3 of 3 new tokens so far")
    assert "(why?" in link and "why_view=Attribution+graph" in link and f"why_target={target}" in link
    gate.release()
    at = finish_generation(at)
    assert sorted(job.contributors.found) == list(range(8))
    table = at.dataframe[0].value
    labels = list(table["top contributors (direct, found live)"])
    assert labels[2] == ", ".join(contributor_label(c, tokens) for c in found.top)
    assert all(labels)  # every written token got its own
    links = list(table["why?"])  # every written token: one click to the Why page's graph for it
    for step, link in zip(job.steps, links, strict=True):
        assert link.startswith("why?") and f"why_target={step.token_id}&" in link + "&"
        assert "why_view=Attribution+graph" in link


@pytest.mark.slow
def test_a_finished_step_shows_its_contributors_and_opens_the_why_page_for_its_token():
    at = run_page("generation", PROMPT, **{K.GEN_N: 4, K.GEN_TEMP: 0.0, S.LIVE_WHY.key: False})
    at.button(key=K.GEN_GENERATE).click().run()
    at = finish_generation(at)
    assert not at.exception and not at.error
    job = generation_of(at)
    assert job.contributors is None  # switched off: nothing captured or computed live
    ids, target = why_graph.step_ids(job.prompt, job.steps, 3)  # the last step, replayed by default
    expected = top_contributors(tiny_model(), list(ids), target)  # by influence, computed on demand
    box = next(t.value for t in at.text if t.value.startswith("new token 4, "))
    assert [c.value for c in at.caption if c.value.startswith("By influence")]
    assert not [c.value for c in at.caption if c.value.startswith("Top contributors by direct effect (found")]
    assert box.splitlines()[1] == f"  {contributor_label(expected.top[0], [decode([t]) for t in ids])}"
    at.button(key=K.GEN_WHY).click().run()
    state = at.session_state
    assert state[K.PROMPT] == decode(ids) and state[K.WHY_TARGET] == target
    assert state[K.WHY_VIEW] == K.WHY_GRAPH_VIEW and state[K.WHY_NAV_PENDING]
    assert list(ids) == encode(decode(ids))[-len(ids) :]  # the Why page reads the same tokens back


@pytest.mark.slow
def test_a_finished_step_found_live_shows_both_measures():
    at = run_page("generation", PROMPT, **{K.GEN_N: 4, K.GEN_TEMP: 0.0})
    at.button(key=K.GEN_GENERATE).click().run()
    at = finish_generation(at)
    assert sorted(generation_of(at).contributors.found) == [0, 1, 2, 3]  # the last ones at the run's end
    job = generation_of(at)
    ids, target = why_graph.step_ids(job.prompt, job.steps, 3)
    tokens = [decode([t]) for t in ids]
    boxes = [t.value.splitlines()[1:] for t in at.text if t.value.startswith("new token 4, ")]
    direct, influence = job.contributors.found[3], top_contributors(tiny_model(), list(ids), target)
    assert boxes == [[f"  {contributor_label(c, tokens)}" for c in x.top] for x in (direct, influence)]
    captions = [c.value for c in at.caption if c.value.startswith(("Top contributors by direct effect (", "By infl"))]
    assert len(captions) == 2 and captions[0].startswith("Top contributors by direct") and captions[1].startswith("By")


def why_attends_script() -> None:
    import streamlit as st

    from gptviz.app.unit_nav import go_to_why_attends

    st.button("open", key="open", on_click=go_to_why_attends, args=(1, 2, 9, 4))


def test_a_cell_opens_the_why_attends_tab_in_one_call():
    """What an attention map's click needs: one callback that leaves the cell and the tab for the Why page."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(why_attends_script, default_timeout=60).run()
    at.button(key="open").click().run()
    state = at.session_state
    assert (state[K.WHY_QK_LAYER], state[K.WHY_QK_HEAD], state[K.WHY_QK_QUERY], state[K.WHY_QK_KEY]) == (1, 2, 9, 4)
    assert state[K.WHY_VIEW] == K.WHY_QK_VIEW and state[K.WHY_NAV_PENDING]


def test_what_a_page_reads_of_the_live_contributors_is_a_snapshot():
    """found_live reads a snapshot of the generation thread's dict (LiveContributors.snapshot): a page iterating what
    it read meets no insertion made after (iterating the dict itself raised "dictionary changed size during
    iteration" once the thread added a step)."""
    from gptviz.app.live_why import found_live
    from gptviz.serve.live_contributors import LiveContributors

    explained = LiveContributors(tiny_model())
    explained.found.update({0: "first", 1: "second"})
    read = found_live({"explained": explained})
    seen = []
    for i in read:
        explained.found[len(explained.found)] = "added by the generation thread"  # what the other thread does
        seen.append(i)
    assert seen == [0, 1] and read == {0: "first", 1: "second"} and len(explained.found) == 4
    assert found_live({"explained": None}) == {} and found_live({}) == {}
