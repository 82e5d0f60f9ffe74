"""gptviz's views in Jupyter (`pip install ".[notebook]"` in a checkout): the app's own browser components as
widgets, fed from what you already have: a gptviz capture, a TransformerLens ActivationCache, Hugging Face's
output_attentions tuple, or plain tensors with their tokens.

    from gptviz import load_pretrained, capture, get_tokenizer
    from gptviz.notebook import attention
    ids = get_tokenizer().encode("To be, or not to be")
    logits, cache = capture(load_pretrained("shakespeare-pre"), ids)
    attention(cache, ids)                                   # the app's heatmap: pickers, thumbnails, zoom, hover
    attention(tl_cache, model.to_str_tokens(text))          # TransformerLens
    attention(hf_out.attentions, tokenizer.convert_ids_to_tokens(ids))  # Hugging Face
    unit(model, "L2N26", "shakespeare-pre")                 # a neuron's top examples from the shipped index
    parameters(model); attribution(model, ids, " Romeo", " Juliet")   # the app's Plotly figures as widgets
    graph(model, ids, " Romeo", " Juliet"); why_attends(model, ids, 1, 0, 5, 2)   # the attribution graph, QK terms
    save_html(widget, "map.html")                           # a page that opens offline (see standalone.py)
    export_html("analysis.ipynb")                           # the notebook as HTML whose widgets draw offline
"""

from __future__ import annotations

import numpy as np

from .figures import attribution, parameters
from .graph import graph, why_attends
from .inputs import attention_data
from .unit_widget import unit


def attention(
    source,
    tokens=None,
    *,
    layer: int = 0,
    head: int | str = 0,
    query: int = -1,
    batch: int = 0,
    scale: str = "linear",
    height: int = 560,
):
    """The Attention page's heatmap as a widget. `source`: a gptviz or TransformerLens cache, Hugging Face's
    attentions tuple, or weights [layers, heads, T, T]; `tokens`: strings or GPT-2 ids (None: positions).
    `head` may be "mean"; `query` is outlined (-1: the last token); `scale`: "linear", "sqrt" or "max"."""
    from .widgets import AttentionWidget

    patterns, labels = attention_data(source, tokens, batch)
    T = patterns.shape[-1]
    return AttentionWidget(
        patterns,
        labels,
        layer=layer,
        head=head,
        query=query % T if -T <= query < T else T - 1,
        scale=scale,
        height=height,
    )


def attention_on_text(source, tokens=None, *, layer: int = 0, query: int = -1, batch: int = 0):
    """Where one query token looks, on the text itself: a row per head of `layer` (and their mean), each token
    coloured by the weight the query gives it; the query is the outlined token."""
    from ..figures.browser.token_rows import payload
    from ..figures.unit_page import ExampleRow
    from .widgets import TokenRowsWidget

    patterns, labels = attention_data(source, tokens, batch)
    L, H, T, _ = patterns.shape
    if not 0 <= layer < L:
        raise ValueError(f"layer {layer} is not in 0..{L - 1}")
    if not -T <= query < T:
        raise ValueError(f"query {query} is not in 0..{T - 1}")
    q = query % T
    rows_w = np.concatenate([patterns[layer, :, q], patterns[layer, :, q].mean(axis=0, keepdims=True)])
    rows = []
    for h, weights in enumerate(rows_w):
        values = np.where(np.arange(T) <= q, weights, np.nan)  # later tokens are masked: no colour
        name = "mean" if h == H else f"head {h}"
        rows.append(
            ExampleRow(
                labels=labels,
                values=values,
                peak=q,
                name=f"L{layer} {name}",
                hover=f"layer {layer}, {name}, query position {q}",
            )
        )
    return TokenRowsWidget(data=payload(rows, value_name="attention weight", cmax=1.0))


def save_html(view, path, title: str = "gptviz"):
    """Write a view as an HTML page that opens offline (the app's JavaScript and the data inline)."""
    from .standalone import save_html as save

    return save(view, path, title)


def static(view):
    """A view as a cell's HTML output with no widget behind it: a notebook's HTML export draws it offline."""
    from .standalone import static as as_static

    return as_static(view)


def export_html(notebook, path=None):
    """Write a notebook (.ipynb, saved with its widget state) as HTML whose widgets draw offline."""
    from .html_export import export_html as export

    return export(notebook, path)


__all__ = [
    "export_html",
    "attention",
    "attention_on_text",
    "attention_data",
    "unit",
    "parameters",
    "attribution",
    "save_html",
    "static",
    "graph",
    "why_attends",
]
