"""The attribution graph and the QK decomposition as the JSON of issue 58 ("gptviz-graph/1", "gptviz-qk/1"), and the
command lines that write them:

    python -m gptviz graph --model M --prompt TEXT --target TOKEN [--other TOKEN] --out g.json
    python -m gptviz qk --model M --prompt TEXT --layer L --head H --query I --key J --out q.json

Tokens are given as their text as it is encoded (" Cap", its leading space included); the prompt gets no
beginning-of-text token; positions count from 0.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .graph import METHOD, AttributionGraph, attribution_graph
from .graph_qk import QKDecomposition, qk_decomposition

GRAPH_FORMAT, QK_FORMAT = "gptviz-graph/1", "gptviz-qk/1"


def token_texts(ids, tokenizer=None) -> list[str]:
    """Each token's text (bytes that are not whole UTF-8 characters shown as U+FFFD)."""
    from ..model.tokenizer import get_tokenizer

    enc = tokenizer or get_tokenizer()
    return [enc.decode_single_token_bytes(int(i)).decode("utf-8", errors="replace") for i in ids]


def one_token(text: str, what: str = "target", tokenizer=None) -> int:
    """The id of the one token whose text is `text`; ValueError, in words, for text that is no token or several."""
    from ..model.tokenizer import get_tokenizer

    enc = tokenizer or get_tokenizer()
    ids = enc.encode(text)
    if len(ids) != 1:
        pieces = ", ".join(repr(t) for t in token_texts(ids, enc)) or "nothing"
        raise ValueError(
            f"the {what} {text!r} is not one token: it encodes as {len(ids)} ({pieces}); give one token's "
            "text as it is encoded, its leading space included (e.g. ' Cap')"
        )
    return ids[0]


def prompt_ids(text: str, tokenizer=None) -> list[int]:
    """The prompt's ids as encoded, no beginning-of-text token added; ValueError for an empty prompt."""
    from ..model.tokenizer import get_tokenizer

    ids = (tokenizer or get_tokenizer()).encode(text)
    if not ids:
        raise ValueError("the prompt is empty: give some text")
    return ids


def graph_json(graph: AttributionGraph, model_name: str, tokens: list[str]) -> dict:
    """The "gptviz-graph/1" export of `graph`; `tokens` are the prompt's token texts."""
    p = graph.pruning
    return {
        "format": GRAPH_FORMAT,
        "model": model_name,
        "wiring": graph.wiring,
        "prompt_ids": graph.prompt_ids,
        "tokens": tokens,
        "target": graph.target,
        "other": graph.other,
        "metric": graph.metric,
        "method": METHOD,
        "pruning": {
            "node_threshold": p.node_threshold,
            "edge_threshold": p.edge_threshold,
            "max_nodes": p.max_nodes,
            "nodes_total": p.nodes_total,
            "nodes_kept": p.nodes_kept,
            "edges_total": p.edges_total,
            "edges_kept": p.edges_kept,
            "node_share": p.node_share,
        },
        "nodes": [
            {
                "id": n.id,
                "kind": n.kind,
                "layer": n.layer,
                "index": n.index,
                "position": n.position,
                "influence": n.influence,
                "direct": n.direct,
                "incoming_sum": n.incoming_sum,
                "bias_part": n.bias_part,
                "ablation": None
                if n.ablation is None
                else {"predicted": n.ablation.predicted, "actual": n.ablation.actual},
            }
            for n in graph.nodes
        ],
        "edges": [{"source": e.source, "target": e.target, "weight": e.weight} for e in graph.edges],
    }


def qk_json(qk: QKDecomposition, model_name: str) -> dict:
    """The "gptviz-qk/1" export: terms[a][b] for query source a and key source b, summing to score."""
    return {
        "format": QK_FORMAT,
        "model": model_name,
        "layer": qk.layer,
        "head": qk.head,
        "query": qk.query,
        "key": qk.key,
        "score": qk.score,
        "query_sources": qk.query_sources,
        "key_sources": qk.key_sources,
        "terms": qk.terms.tolist(),
    }


# ---- command lines ---------------------------------------------------------------------------------------------


def add_common_arguments(x: argparse.ArgumentParser) -> None:
    x.add_argument(
        "--model",
        required=True,
        help="a bundled model's name (shakespeare-pre, shakespeare-post), a "
        "checkpoint folder or a Hub id: whatever load_pretrained takes",
    )
    x.add_argument("--prompt", required=True, help="the prompt's text (no beginning-of-text token is added)")
    x.add_argument("--out", required=True, type=Path, help="the JSON file to write")


def add_graph_arguments(x: argparse.ArgumentParser) -> None:
    add_common_arguments(x)
    x.add_argument("--target", required=True, help="the token to explain, its text as encoded (e.g. ' Cap')")
    x.add_argument("--other", default=None, help="a rival token: the metric is then logit(target) - logit(other)")
    x.add_argument(
        "--node-threshold",
        type=float,
        default=0.8,
        help="share of absolute influence the kept nodes cover (default 0.8)",
    )
    x.add_argument(
        "--edge-threshold",
        type=float,
        default=0.98,
        help="share of absolute edge weight the kept edges cover (default 0.98)",
    )
    x.add_argument(
        "--max-nodes", type=int, default=200, help="most nodes kept (default 200; the embeddings and the metric always)"
    )


def add_qk_arguments(x: argparse.ArgumentParser) -> None:
    add_common_arguments(x)
    for name, what in (
        ("layer", "the layer"),
        ("head", "the head"),
        ("query", "the query position (from 0)"),
        ("key", "the key position (from 0, at most the query's)"),
    ):
        x.add_argument(f"--{name}", required=True, type=int, help=what)


def run_graph(args) -> int:
    from ..model.tokenizer import tokenizer_for
    from ..model.weights import load_pretrained

    model = load_pretrained(args.model)
    enc = tokenizer_for(model)  # the model's own (GPT-1's BPE for a GPT-1 folder)
    ids = prompt_ids(args.prompt, enc)
    target = one_token(args.target, "target", enc)
    other = one_token(args.other, "other", enc) if args.other is not None else None
    graph = attribution_graph(
        model,
        ids,
        target,
        other,
        node_threshold=args.node_threshold,
        edge_threshold=args.edge_threshold,
        max_nodes=args.max_nodes,
    )
    _write(args.out, graph_json(graph, args.model, token_texts(ids, enc)))
    top = sorted((n for n in graph.nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))[:3]
    print(
        f"metric {graph.metric:.4f}; {graph.pruning.nodes_kept} nodes and {graph.pruning.edges_kept} edges kept; "
        f"top: {', '.join(f'{n.id} {n.influence:+.3f}' for n in top)}; wrote {args.out}"
    )
    return 0


def run_qk(args) -> int:
    from ..model.tokenizer import tokenizer_for
    from ..model.weights import load_pretrained

    model = load_pretrained(args.model)
    ids = prompt_ids(args.prompt, tokenizer_for(model))
    qk = qk_decomposition(model, ids, args.layer, args.head, args.query, args.key)
    _write(args.out, qk_json(qk, args.model))
    top = ", ".join(f"{a} x {b} {v:+.3f}" for a, b, v in qk.top_terms(3))
    print(f"score {qk.score:.4f}; top terms: {top}; wrote {args.out}")
    return 0


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
