"""The app's Plotly figures as notebook widgets, built by the same factories (gptviz.figures) from the same library
calls as the pages: the Parameters page's breakdown and "Why this token?"'s direct attribution.

    parameters("gpt2-small")                          # a preset, a GPTConfig or a model
    attribution(model, ids, " Romeo", " Juliet")      # target and rival: one token each, as text or an id
"""

from __future__ import annotations

import torch


def figure_box(figures, title: str | None = None):
    """Plotly figures as FigureWidgets in a column (a title line above them, escaped: it may name tokens)."""
    import ipywidgets
    import plotly.graph_objects as go

    from .widgets import text_line

    widgets = [go.FigureWidget(f) for f in figures]
    box = ipywidgets.VBox(children=([text_line(title, bold=True)] if title else []) + widgets)
    box.figures = widgets
    return box


def config_of(model_or_config):
    """A GPTConfig from a preset's name, a config or a model (anything with .config)."""
    from .. import PRESETS
    from ..model.config import GPTConfig

    if isinstance(model_or_config, str):
        if model_or_config not in PRESETS:
            raise ValueError(f"{model_or_config!r} is not a preset ({', '.join(PRESETS)}); pass a GPTConfig or a model")
        return PRESETS[model_or_config]
    cfg = getattr(model_or_config, "config", model_or_config)
    if not isinstance(cfg, GPTConfig):
        raise TypeError(
            f"expected a preset's name, a GPTConfig or a gptviz model, not {type(model_or_config).__name__}"
        )
    return cfg


def parameter_figures(model_or_config, label: str | None = None) -> list:
    """The Parameters page's figures for one config: where the parameters are, by component (counted by formula,
    no weights built), and per block when there are 2 to 200 blocks."""
    from ..figures import params as figs
    from ..model.params import by_component, by_layer, param_table

    cfg = config_of(model_or_config)
    label = cfg.name if label is None else label
    table = param_table(cfg)
    total = int(table["count"].sum())
    out = [
        figs.component_shares(
            by_component(table),
            f"{label}: {total:,} parameters" if label else f"{total:,} parameters",
            tied=cfg.tie_weights,
        )
    ]
    if 1 < cfg.n_layers <= 200:
        out.append(figs.layer_stacked_bar(by_layer(table)))
    return out


def parameters(model_or_config, label: str | None = None):
    """The Parameters page's breakdown as widgets: a column of FigureWidgets (`.figures`)."""
    return figure_box(parameter_figures(model_or_config, label))


def one_token(token, vocab_size: int, enc=None) -> int:
    """A token given as its id or its text (which must be one token of `enc`, the model's tokenizer, default GPT-2's:
    with its leading space if it has one)."""
    from ..model.tokenizer import encode, is_gpt2

    if isinstance(token, str):
        ids = encode(token, enc)
        if len(ids) != 1:
            hint = "GPT-2 pieces; ' Juliet' has its space" if is_gpt2(enc) else f"{enc.name}'s pieces"
            raise ValueError(f"{token!r} is {len(ids)} tokens, not one ({hint})")
        token = ids[0]
    token = int(token)
    if not 0 <= token < vocab_size:
        raise ValueError(f"token id {token} is outside the model's vocabulary of {vocab_size}")
    return token


def attribution_figures(model, ids, target, other, position: int = -1):
    """(DirectAttribution, [bars, heads grid]): "Why this token?"'s direct attribution of logit(target) -
    logit(other) at `position`, every part of the final residual stream and the heads as a layer x head grid."""
    from ..figures import why as figs
    from ..methods.attribution import direct_logit_attribution
    from ..model.tokenizer import tokenizer_for

    cfg, enc = model.config, tokenizer_for(model)
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    if ids.shape[1] > cfg.n_ctx:
        raise ValueError(f"{ids.shape[1]} tokens is more than the model's context of {cfg.n_ctx}")
    dla = direct_logit_attribution(
        model, ids, one_token(target, cfg.vocab_size, enc), one_token(other, cfg.vocab_size, enc), position
    )
    bars = figs.attribution_bars(
        dla.labels, dla.values, title="Direct attribution: every part of the final residual stream"
    )
    grid = figs.layer_head_grid(dla.head_values, title="Heads' direct attribution", colorbar="logit diff")
    return dla, [bars, grid]


def attribution(model, ids, target, other, position: int = -1):
    """Direct logit attribution as widgets: `.result` the DirectAttribution (its values sum to `.result.logit_diff`),
    `.figures` the bars and the heads' grid. `target` and `other`: one token each, as text or an id."""
    from ..model.tokenizer import token_labels, tokenizer_for

    dla, figures = attribution_figures(model, ids, target, other, position)
    t, o = token_labels([dla.target, dla.other], tokenizer_for(model))
    box = figure_box(
        figures, f"logit({t}) - logit({o}) = {dla.logit_diff:+.3f}, the sum of the parts {float(dla.values.sum()):+.3f}"
    )
    box.result = dla
    return box


__all__ = ["parameters", "attribution", "parameter_figures", "attribution_figures", "config_of", "one_token"]
