"""A unit's page as one self-contained HTML file, drawn from its JSON export (gptviz.index.dashboard): what the file
shows is exactly what the JSON holds. The summary, the top examples and each band's as rows of coloured tokens (the
app's token_rows.js), the histogram of its values and the tokens its direct effect raises and lowers (the app's own
figure factories). Opens offline (page.Page: scripts and data inline); needs no notebook extra."""

from __future__ import annotations

from ..figures import unit_page as fu
from .page import Page

VALUE_NAMES = {"neuron": "activation", "head": "output norm"}


def _rows(activations: list[dict], ranked: bool, enc=None) -> list[fu.ExampleRow]:
    from ..model.tokenizer import token_labels

    rows = []
    for a in activations:
        g = a["gptviz"]
        held = "  (held out)" if g["held_out"] else ""
        value = f"#{g['rank'] + 1}  {g['value']:.3f}" if ranked else f"{g['value']:.3g}"  # as the page names them
        name = f"{value}  {g['document']}{held}"
        hover = f"{g['document']}{' (a held-out play)' if g['held_out'] else ''}, token {g['position']:,}"
        values = [float("nan") if v is None else v for v in a["values"]]
        rows.append(fu.ExampleRow(token_labels(g["ids"], enc), values, int(a["qualifying_token_index"]), name, hover))
    return rows


def dashboard_html(batch: dict, title: str | None = None, enc=None) -> str:
    """The HTML page of the one feature in `batch` (dashboard.unit_dashboard's output); `enc`: the tokenizer of its
    model (tokenizer_for; default GPT-2's), which labels its token ids."""
    from ..figures.browser.token_rows import payload
    from ..model.tokenizer import token_labels

    f = batch["features"][0]
    g = f["gptviz"]
    value_name = VALUE_NAMES[g["kind"]]
    page = Page()
    page.text(f"{g['unit']} of {batch['model_id']}", tag="h2")
    page.text(g["summary"])
    top = [a for a in f["activations"] if a["gptviz"]["group"] == "top"]
    page.text(f"Top {len(top)} examples over {g['tokens_scanned']:,} tokens, the example's token outlined", tag="h3")
    cmax = max((a["gptviz"]["value"] for a in top), default=1.0)
    page.component_data("token_rows", "gv-rows", payload(_rows(top, True, enc), value_name=value_name, cmax=cmax))
    page.text(
        "Examples from the whole range: its positive values in five bands between their quantiles, five "
        "examples of each drawn uniformly (coloured on the top examples' scale)",
        tag="h3",
    )
    for band in g["bands"]:
        mine = [a for a in f["activations"] if a["gptviz"]["group"] == f"band {band['band']}"]
        page.text(
            fu.band_title(
                band["band"],
                band["levels"],
                band["lo"],
                band["hi"],
                band["examples"],
                band["sampled"],
                value_name,
                g["positive_values"],
                g["sample"],
            ),
            tag="p",
        )
        if mine:
            page.component_data(
                "token_rows", "gv-rows", payload(_rows(mine, False, enc), value_name=value_name, cmax=cmax)
            )
    if not g["bands"]:
        page.text("It is never above 0 on the corpus: no bands.")
    hist = g["histogram"]
    page.figure(
        fu.unit_histogram(
            hist["edges"],
            hist["counts"],
            {float(q): v for q, v in g["quantiles"].items()},
            value_name=value_name,
            title=f"Distribution over {g['tokens_scanned']:,} tokens",
        )
    )
    labels = lambda ids, values: list(zip(token_labels(ids, enc), values, strict=True))  # noqa: E731
    page.text("Direct effect on the logits: " + g["effect"], tag="h3")
    page.figure(fu.direct_effect_bars(labels(g["pos_ids"], f["pos_values"]), labels(g["neg_ids"], f["neg_values"])))
    page.text(
        f"From gptviz's neuron index{' over ' + f['dataset'] if f['dataset'] else ''}; the JSON export of "
        "this page holds the same data in Neuronpedia's feature-dashboard shape.",
        tag="p",
    )
    return page.html(title or f"{g['unit']} of {batch['model_id']}")
