"""Explainers: activation functions, the causal mask, and pre-norm vs post-norm blocks.

Nothing here runs the model: the sidebar's config only marks which activation and wiring the model uses. Each
section is one function below.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st
import torch

from gptviz import methods as analysis
from gptviz.app import display, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.export import matrix_frame
from gptviz.figures import explainers as figs
from gptviz.model.config import GPTConfig
from gptviz.model.tokenizer import token_labels

state = st.session_state


def activation_section(cfg: GPTConfig | None) -> None:
    own_activation = cfg.activation if cfg is not None else None
    st.subheader("Activation functions")
    c1, c2 = st.columns([3, 1])
    lo, hi = S.EXP_RANGE.slider(c1)
    tol = S.EXP_TOL.select_slider(c2, value=S.EXP_TOL.default)
    if hi <= lo:
        st.info("Choose a range with some width.")
        return
    x = torch.linspace(lo, hi, 801, dtype=torch.float64)
    curves = analysis.activation_curves(x)
    ys = torch.stack([y for y, _ in curves.values()])
    spread = ys.max(0).values - ys.min(0).values
    differ = analysis.regions_where(spread > tol, x)
    display.show_figure(figs.activation_figure(x, curves, own_activation, differ, tol), key=K.EXP_ACTIVATIONS)
    gap = (curves["gelu"][0] - curves["gelu_tanh"][0]).abs().max().item()
    own = figs.ACTIVATION_NAMES.get(own_activation, "") if own_activation else ""
    where = ", ".join(f"{a:.2f} to {b:.2f}" for a, b in differ) or "nowhere on this range"
    st.caption(
        (f"The sidebar's model uses **{own}** (thick line). " if own else "")
        + f"Shaded: where the three functions differ by more than {tol:g} (x from {where}). "
        + "Values are computed with the model's own `activate` function and derivatives by autograd. "
        "GELU is x·Φ(x): it lets small negative values through and is smooth at 0, where ReLU has a kink "
        f"(its derivative jumps from 0 to 1). GPT-2's tanh approximation stays within {gap:.1e} of the "
        "exact GELU on this range (bottom panel)."
    )
    display.download_csv(
        pd.DataFrame(
            {
                "x": x.numpy(),
                **{f"{n}": y.numpy() for n, (y, _) in curves.items()},
                **{f"d_{n}": dy.numpy() for n, (_, dy) in curves.items()},
            }
        ),
        "activations.csv",
        key=K.EXP_ACTIVATIONS_CSV,
    )


def causal_mask_section() -> None:
    st.subheader("The causal mask")
    prompt_ids = list(sidebar.encode_prompt(sidebar.prompt_text()))
    n = S.EXP_MASK_N.slider(st, value=min(8, max(1, len(prompt_ids))))
    mask = analysis.causal_mask(n)
    if len(prompt_ids) >= n:
        labels = token_labels(prompt_ids[:n])
        source = "the first tokens of the sidebar's prompt"
    else:
        labels = [f"t{i}" for i in range(n)]
        source = "positions (the prompt is shorter than that)"
    left, right = st.columns([3, 2])
    with left:
        display.show_figure(figs.causal_mask_figure(mask, labels), key=K.EXP_MASK)
    with right:
        st.markdown(
            f"Each row is a token asking *what came before me?*; it may attend only to itself and earlier "
            f"tokens (blue). The grey cells are set to −∞ before the softmax, so their weights are exactly "
            f"0. With {n} tokens, {int(mask.sum())} of {n * n} pairs are allowed: n(n+1)/2."
        )
        st.caption(f"Labels: {source}. The mask is the one the model's attention builds (`_causal_mask`).")
        display.download_csv(
            matrix_frame(mask.int(), labels, labels, "query", "key", "may_attend"),
            "causal_mask.csv",
            key=K.EXP_MASK_CSV,
        )


# What each wiring computes, under its block diagram
WIRINGS = {
    "pre": "GPT-2: `x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))`, then `ln_f` once after the last block. The "
    "residual path is never normalised, so gradients flow straight through it.",
    "post": "GPT-1 (and the original Transformer): `x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))`. Every "
    "residual addition is normalised, which keeps the stream's size fixed but makes deep models "
    "harder to train without warm-up.",
}


def wiring_section(cfg: GPTConfig | None) -> None:
    st.subheader("Pre-norm vs post-norm")
    st.caption(
        "The same parameters wired two ways. Each grey name is the hook point that records the output of the "
        "box beside it (what the Activations page reads)."
    )
    for col, (norm, text) in zip(st.columns(2), WIRINGS.items(), strict=True):
        with col:
            display.show_figure(
                figs.block_diagram(norm, highlight=cfg is not None and cfg.norm == norm),
                key=K.per_item(K.EXP_BLOCK, norm),
            )
            st.caption(text)


def main() -> None:
    st.title("Explainers")
    st.caption("Three pieces every GPT block is made of, drawn from the code that runs the model.")
    cfg = sidebar.current_config()
    activation_section(cfg)
    causal_mask_section()
    wiring_section(cfg)
    lo, hi = state.get(K.EXP_RANGE, S.EXP_RANGE.default)
    reproduce.show(reproduce.explainers(float(lo), float(hi), int(state.get(K.EXP_MASK_N, 8))))


main()
