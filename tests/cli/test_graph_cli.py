"""`python -m gptviz graph` and `python -m gptviz qk`: the JSON of issue 58 with every key of its format, tokens
given as their text, and bad input as one clear line (exit 2)."""

from __future__ import annotations

import json

import pytest

from gptviz.__main__ import main
from gptviz.methods.graph import attribution_graph
from gptviz.methods.graph_export import graph_json, one_token, prompt_ids, qk_json, token_texts
from gptviz.methods.graph_qk import qk_decomposition
from gptviz.model.tokenizer import get_tokenizer
from tests.support.cli import run_cli
from tests.support.graph_reference import prompt, unit_model

GRAPH_KEYS = {
    "format",
    "model",
    "wiring",
    "prompt_ids",
    "tokens",
    "target",
    "other",
    "metric",
    "method",
    "pruning",
    "nodes",
    "edges",
}
PRUNING_KEYS = {
    "node_threshold",
    "edge_threshold",
    "max_nodes",
    "nodes_total",
    "nodes_kept",
    "edges_total",
    "edges_kept",
}
NODE_KEYS = {"id", "kind", "layer", "index", "position", "influence", "direct", "incoming_sum", "bias_part", "ablation"}
QK_KEYS = {"format", "model", "layer", "head", "query", "key", "score", "query_sources", "key_sources", "terms"}
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo"


def check_graph_json(data: dict) -> None:
    """Every key of the gptviz-graph/1 format, and the exact sums a reader can redo from the file alone."""
    assert GRAPH_KEYS <= set(data) and data["format"] == "gptviz-graph/1"
    assert PRUNING_KEYS <= set(data["pruning"])
    assert data["method"] == "frozen attention and norm scales; neurons pass act/pre"
    assert len(data["tokens"]) == len(data["prompt_ids"])
    ids = {n["id"] for n in data["nodes"]}
    assert "metric" in ids and {f"E@{p}" for p in range(len(data["prompt_ids"]))} <= ids
    assert data["pruning"]["nodes_kept"] == len(data["nodes"]) and data["pruning"]["edges_kept"] == len(data["edges"])
    scale = max(abs(n["influence"]) for n in data["nodes"])
    for n in data["nodes"]:
        assert set(n) == NODE_KEYS and n["kind"] in ("head", "neuron", "embeddings", "bias", "metric")
        if n["kind"] in ("head", "neuron", "metric"):
            assert abs(n["influence"] - n["incoming_sum"] - n["bias_part"]) <= 1e-4 * scale, n["id"]
        if n["ablation"] is not None:
            assert set(n["ablation"]) == {"predicted", "actual"} and n["ablation"]["predicted"] == -n["influence"]
    assert sum(n["ablation"] is not None for n in data["nodes"]) == min(10, len(data["nodes"]) - 1)
    for e in data["edges"]:
        assert set(e) == {"source", "target", "weight"} and e["source"] in ids and e["target"] in ids


def test_the_graph_json_has_every_key_of_the_format():
    model, ids = unit_model(), prompt(6)
    graph = attribution_graph(model, ids, 5, 9, max_nodes=30)
    data = json.loads(json.dumps(graph_json(graph, "random", token_texts(ids))))
    check_graph_json(data)
    assert data["target"] == 5 and data["other"] == 9 and data["wiring"] == "pre" and data["model"] == "random"
    head = next(n for n in data["nodes"] if n["kind"] == "head")
    assert head["id"] == f"L{head['layer']}H{head['index']}@{head['position']}"
    first = next(n for n in data["nodes"] if n["id"] == "E@0")
    assert first["layer"] is None and first["index"] is None and first["position"] == 0


def test_the_qk_json_has_every_key_of_the_format():
    qk = qk_decomposition(unit_model(norm="post"), prompt(), 1, 3, 6, 2)
    data = json.loads(json.dumps(qk_json(qk, "random")))
    assert set(data) == QK_KEYS and data["format"] == "gptviz-qk/1"
    assert len(data["terms"]) == len(data["query_sources"]) and len(data["terms"][0]) == len(data["key_sources"])
    assert sum(map(sum, data["terms"])) == pytest.approx(data["score"], abs=1e-4)


@pytest.mark.slow
def test_tokens_are_their_text_as_encoded():
    enc = get_tokenizer()
    assert one_token(" Romeo") == enc.encode(" Romeo")[0] and one_token("\n") == enc.encode("\n")[0]
    with pytest.raises(
        ValueError,
        match=r"the target ' Romeo was' is not one token: it encodes as 2 \(' Romeo', "
        r"' was'\).*leading space",
    ):
        one_token(" Romeo was")
    with pytest.raises(ValueError, match="the other '' is not one token: it encodes as 0 \\(nothing\\)"):
        one_token("", "other")
    with pytest.raises(ValueError, match="the prompt is empty"):
        prompt_ids("")
    assert prompt_ids("O Romeo") == enc.encode("O Romeo")  # no beginning-of-text token
    assert token_texts(enc.encode("O Romeo")) == ["O", " Romeo"]


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    out = str(tmp_path / "g.json")
    assert (
        main(["graph", "--model", "shakespeare-pre", "--prompt", "O Romeo", "--target", "Romeo was", "--out", out]) == 2
    )
    assert capsys.readouterr().err.strip().startswith("error: the target 'Romeo was' is not one token")
    assert main(["graph", "--model", "shakespeare-pre", "--prompt", "", "--target", " Romeo", "--out", out]) == 2
    assert "error: the prompt is empty" in capsys.readouterr().err

    def qk(layer: int, query: int, key: int) -> list[str]:
        where = f"--layer {layer} --head 0 --query {query} --key {key}".split()
        return ["qk", "--model", "shakespeare-pre", "--prompt", "O Romeo", *where, "--out", out]

    assert main(qk(layer=0, query=0, key=1)) == 2
    assert "above the diagonal" in capsys.readouterr().err
    assert main(qk(layer=9, query=1, key=1)) == 2
    assert "layer 9 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "g.json").exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_graph_and_qk_write_the_issues_json(tmp_path):
    graph_file, qk_file = tmp_path / "g.json", tmp_path / "q.json"
    out = run_cli(
        "graph",
        "--model",
        "shakespeare-pre",
        "--prompt",
        PROMPT,
        "--target",
        " Romeo",
        "--other",
        " Juliet",
        "--max-nodes",
        "120",
        "--out",
        str(graph_file),
    )
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout
    data = json.loads(graph_file.read_text())
    check_graph_json(data)
    enc = get_tokenizer()
    assert data["prompt_ids"] == enc.encode(PROMPT) and data["model"] == "shakespeare-pre"
    assert data["target"] == enc.encode(" Romeo")[0] and data["other"] == enc.encode(" Juliet")[0]
    assert data["pruning"]["max_nodes"] == 120 and data["pruning"]["nodes_kept"] <= 120
    out = run_cli(
        "qk",
        "--model",
        "shakespeare-post",
        "--prompt",
        PROMPT,
        "--layer",
        "2",
        "--head",
        "1",
        "--query",
        "20",
        "--key",
        "3",
        "--out",
        str(qk_file),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(qk_file.read_text())
    assert set(data) == QK_KEYS and data["model"] == "shakespeare-post"
    assert sum(map(sum, data["terms"])) == pytest.approx(data["score"], abs=1e-3)
