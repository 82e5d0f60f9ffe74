"""The Why page's attribution graph and "why a head attends" tabs (issue 58), AppTest on the tiny preset: every node,
number and text equals the library's, recomputed here; bad input gets a message in words; the copied Python, run
in a subprocess from the checkout, prints the numbers the page shows."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app import settings as S
from gptviz.app.reproduce import MARK
from gptviz.app.services import results_cache
from gptviz.methods.graph import attribution_graph
from gptviz.methods.graph_ablation import ablation_actuals
from gptviz.methods.graph_contributors import node_edits, parse_node
from gptviz.methods.graph_qk import qk_decomposition
from gptviz.model.generate import generate
from gptviz.model.tokenizer import decode, encode
from gptviz.serve import limits
from tests.support import ROOT
from tests.support.pagetest import TINY, array, edge_prompts, figure, kept_of_edge_prompt, run_page
from tests.support.why_page import PROMPT, tiny_model, top_two

pytestmark = pytest.mark.slow  # each runs the page (a second or more)
GRAPH = {S.WHY_VIEW.key: K.WHY_GRAPH_VIEW}


def expected_graph(**settings):
    ids = encode(PROMPT)
    target, other = top_two(ids)
    return attribution_graph(tiny_model(), ids, target, other, **settings), ids, target, other


def drawn_nodes(at) -> dict[str, list]:
    fig = figure(at, "Why ")
    return {
        c[0]: c
        for t in fig["data"]
        if t.get("mode") == "markers" and t.get("customdata")
        for c in t["customdata"]
        if isinstance(c, list)
    }


def snippet_of(at, view: str) -> str:
    found = [c.value for c in at.code if c.value.startswith(MARK) and view in c.value.splitlines()[0]]
    assert len(found) == 1, [c.value[:60] for c in at.code]
    return found[0]


def test_the_graph_tab_draws_the_librarys_graph_and_checks_its_top_node():
    at = run_page("why", PROMPT, **GRAPH)
    assert not at.exception and not at.error and not at.warning
    graph, ids, target, other = expected_graph()
    nodes = drawn_nodes(at)
    assert set(nodes) == {n.id for n in graph.nodes}
    for n in graph.nodes:
        assert nodes[n.id][2] == pytest.approx(n.influence, abs=1e-5) and nodes[n.id][3] == pytest.approx(
            n.direct, abs=1e-5
        )
    top = max((n for n in graph.nodes if n.kind != "metric"), key=lambda n: abs(n.influence))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Metric, unedited": f"{graph.real_metric:+.3f}",
        "Predicted change": f"{-top.influence:+.3f}",
        "Actual change, removed": f"{top.ablation.actual:+.3f}",
    }  # each beside the baseline
    p = graph.pruning
    counts = next(c.value for c in at.caption if "kept " in c.value)
    assert f"kept {p.nodes_kept} of {p.nodes_total:,} nodes, {p.edges_kept:,} of" in counts
    table = next(d.value for d in at.dataframe if "node" in d.value.columns)
    ranked = sorted((n for n in graph.nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))
    assert list(table["node"]) == [n.id for n in ranked[: len(table)]]
    assert list(table["influence"]) == pytest.approx([n.influence for n in ranked[: len(table)]], abs=1e-5)


def test_the_thresholds_reach_the_graph_and_the_copied_python_prints_what_the_page_shows():
    settings = {S.WHY_NODE_THRESHOLD.key: 0.5, S.WHY_EDGE_THRESHOLD.key: 0.9, S.WHY_MAX_NODES.key: 40}
    at = run_page("why", PROMPT, **GRAPH, **settings)
    assert not at.exception and not at.error
    graph, *_ = expected_graph(node_threshold=0.5, edge_threshold=0.9, max_nodes=40)
    assert set(drawn_nodes(at)) == {n.id for n in graph.nodes} and len(graph.nodes) <= 40
    code = snippet_of(at, "attribution graph")
    assert "node_threshold=0.5, edge_threshold=0.9, max_nodes=40" in code
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"metric {graph.metric:+.3f}") and f"{graph.pruning.nodes_kept} of " in lines[0]
    table = next(d.value for d in at.dataframe if "node" in d.value.columns)
    for printed, (_, row) in zip(lines[2:], table.iterrows(), strict=True):
        fields = printed.split()
        assert fields[0] == row["node"]
        assert float(fields[1]) == pytest.approx(row["influence"], abs=1e-3)
        assert fields[2] == f"{row['share of the metric'] / 100:+.0%}"
        assert float(fields[3]) == pytest.approx(row["direct"], abs=1e-3)
        if row["actual change"] == row["actual change"]:  # checked by the graph (NaN otherwise)
            assert float(fields[5]) == pytest.approx(row["actual change"], abs=1e-3)
    assert len(lines) - 2 == len(table)


def test_any_node_can_be_checked_and_the_text_regenerated_without_it():
    graph, ids, target, other = expected_graph()
    unchecked = next(
        n for n in sorted(graph.nodes, key=lambda n: -abs(n.influence)) if n.ablation is None and n.kind == "head"
    )
    at = run_page("why", PROMPT, **GRAPH, **{S.WHY_NODE.key: unchecked.id, K.WHY_GRAPH_REGEN: True})
    assert not at.exception and not at.error
    model = tiny_model()
    base, (actual,) = ablation_actuals(model, ids, [parse_node(unchecked.id, model.config, len(ids))], target, other)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Metric, unedited"] == f"{base:+.3f}" and metrics["Actual change, removed"] == f"{actual:+.3f}"
    assert metrics["Predicted change"] == f"{-unchecked.influence:+.3f}"
    plain = generate(model, ids, 20, temperature=0.0)[len(ids) :]
    edited = generate(
        model, ids, 20, temperature=0.0, edits=node_edits(model, parse_node(unchecked.id, model.config, len(ids)))
    )[len(ids) :]
    assert [t.value for t in at.text][-2:] == [decode(plain), decode(edited)]


def test_a_link_to_a_node_the_graph_lacks_falls_back_to_its_top_node():
    at = run_page("why", PROMPT, **GRAPH, **{S.WHY_NODE.key: "L9H9@999"})
    assert not at.exception and not at.error
    graph, *_ = expected_graph()
    top = max((n for n in graph.nodes if n.kind != "metric"), key=lambda n: abs(n.influence))
    assert at.selectbox(key=K.WHY_NODE).value == top.id


def test_a_graph_past_the_servers_memory_is_refused_saying_the_limit(monkeypatch):
    """An estimate past GPTVIZ_MEMORY_MB (here: made so) is refused in words before anything is reserved or run."""
    from gptviz.app.services import why_graph
    from gptviz.methods import graph as library

    results_cache().clear()
    monkeypatch.setattr(
        limits,
        "server_limits",
        lambda: dataclasses.replace(limits.ServerLimits(), memory_mb=4096, capture_cache_mb=1024, model_cache_mb=2048),
    )
    huge = lambda *a, **k: 5000 * 2**20  # noqa: E731
    monkeypatch.setattr(library, "graph_nbytes", huge)
    monkeypatch.setattr(why_graph, "graph_nbytes", huge)
    at = run_page("why", PROMPT, **GRAPH)
    results_cache().clear()
    assert not at.exception and not at.error
    assert [w.value for w in at.warning] == [
        f"the attribution graph of {len(encode(PROMPT))} tokens on this model needs about 5,000.0 MiB, more than the "
        "limit of 4,096.0 MiB: try a shorter prompt or a smaller model"
    ]
    assert not at.get("plotly_chart")


def test_a_written_token_below_the_top_ten_is_offered_as_the_target():
    ids = encode(PROMPT)
    logits = tiny_model()(torch.tensor([ids]))[0, -1]
    rare = int(logits.argsort()[len(logits) // 2])  # far from the top
    at = run_page("why", PROMPT, **GRAPH, **{S.WHY_TARGET.key: rare})
    assert not at.exception and not at.error
    assert at.selectbox(key=K.WHY_TARGET).value == rare
    graph = attribution_graph(tiny_model(), ids, rare, top_two(ids)[0])
    assert set(drawn_nodes(at)) == {n.id for n in graph.nodes}


def test_the_qk_tab_splits_the_score_where_the_head_looks_most():
    at = run_page("why", PROMPT, **{S.WHY_VIEW.key: K.WHY_QK_VIEW, S.WHY_QK_LAYER.key: 1, S.WHY_QK_HEAD.key: 2})
    assert not at.exception and not at.error and not at.warning
    ids = encode(PROMPT)
    T = len(ids)
    from gptviz import capture

    _, cache = capture(tiny_model(), [ids], ["blocks.1.attn.hook_pattern"])
    key = int(cache["blocks.1.attn.hook_pattern"][0, 2, T - 1].argmax())
    qk = qk_decomposition(tiny_model(), ids, 1, 2, T - 1, key)
    assert at.selectbox(key=K.WHY_QK_KEY).value == key and at.selectbox(key=K.WHY_QK_QUERY).value == T - 1
    heat = figure(at, "L1H2: query")
    drawn = {
        (q, k): z
        for q, row in zip(heat["data"][0]["y"], array(heat["data"][0]["z"]), strict=True)
        for k, z in zip(heat["data"][0]["x"], row, strict=True)
    }
    for a, b, term in qk.top_terms(3):
        assert drawn[(a, b)] == pytest.approx(term, abs=1e-5)
    assert f"{qk.score:+.3f}" in next(c.value for c in at.caption if "before the softmax" in c.value)
    code = snippet_of(at, "why a head attends")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.splitlines()[0].startswith(f"score {qk.score:+.3f}"), out.stderr


def qk_panel_script(layer: int, head: int, query: int, key: int) -> None:
    from gptviz.app import keys as k
    from gptviz.app import model_service as m
    from gptviz.app.views.why_graph import qk_panel
    from gptviz.model.tokenizer import encode as enc

    qk_panel(
        layer,
        head,
        query,
        key,
        spec=m.ModelSpec(k.SOURCE_PRESET, "tiny", "pre"),
        ids=enc("Romeo.\nBut soft! what light"),
        place="test",
    )


@pytest.mark.parametrize(
    "cell, words",
    [
        ((0, 0, 2, 5), "key 5 is above the diagonal"),
        ((7, 0, 2, 1), "layer 7 is out of range"),
        ((0, 0, 50, 1), "query 50 is out of range"),
    ],
)
def test_the_qk_panel_is_one_call_and_says_what_is_wrong_with_a_cell(cell, words):
    at = AppTest.from_function(qk_panel_script, args=cell, default_timeout=120).run()
    assert not at.exception
    assert [w.value for w in at.warning] and words in at.warning[0].value
    ok = AppTest.from_function(qk_panel_script, args=(0, 1, 4, 2), default_timeout=120).run()
    assert not ok.exception and not ok.warning and ok.get("plotly_chart")


@edge_prompts("one-token", "longer-than-context", "emoji-cjk", "markup")
@pytest.mark.parametrize("view", [K.WHY_GRAPH_VIEW, K.WHY_QK_VIEW])
def test_edge_prompts_and_a_post_norm_model_draw_without_an_error(prompt, view):
    post = model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "post")
    at = run_page("why", prompt, post if "<" in prompt else TINY, **{S.WHY_VIEW.key: view})
    kept = kept_of_edge_prompt(at, prompt, tiny_model().config.n_ctx)
    assert at.get("plotly_chart")
    if view == K.WHY_GRAPH_VIEW:
        assert {c[0] for c in drawn_nodes(at).values()} >= {f"E@{p}" for p in range(len(kept))}
    fig = json.dumps([json.loads(f.proto.spec) for f in at.get("plotly_chart")])
    assert "<img" not in fig and "<script" not in fig  # token text reaches Plotly escaped


def graph_work() -> int:
    from gptviz.app.services.why_graph import graph_work as work

    return work(tiny_model().config, len(encode(PROMPT)), S.WHY_MAX_NODES.default)


def test_a_graph_past_the_time_limit_is_refused_and_a_long_one_waits_for_a_click(sweep_budget):
    sweep_budget(graph_work() / 50, 30)  # 50 s estimated, 30 s allowed
    at = run_page("why", PROMPT, **GRAPH)
    assert not at.exception and not at.error and not at.get("plotly_chart")
    assert [w.value for w in at.warning] == [
        "The attribution graph would take about 50 s on this server now, more than its limit of 30 s for one "
        "measurement (GPTVIZ_SWEEP_SECONDS): try shorter prompts or a smaller model"
    ]
    sweep_budget(graph_work() / 12, 120)  # 12 s: past the few seconds that run at once
    at = run_page("why", PROMPT, **GRAPH)
    assert not at.get("plotly_chart") and at.button(key=K.WHY_GRAPH_RUN).label == "Build the graph (about 12 s)"
    at.button(key=K.WHY_GRAPH_RUN).click().run()
    assert not at.exception and not at.error and drawn_nodes(at)
