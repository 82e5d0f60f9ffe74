"""Embeddings: what the first block receives for the prompt, and how the learned embeddings relate.

The prompt's three embedding hook points come from one cached capture; the position similarity and the
vocabulary PCA read the weights only (cached per model). Each section is one function below.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd
import streamlit as st
import torch

from gptviz import methods as analysis
from gptviz.app import display, model_service, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.seen import read_prompt
from gptviz.app.services import embeddings as services
from gptviz.export import matrix_frame
from gptviz.figures import embeddings as figs
from gptviz.model.config import GPTConfig
from gptviz.model.tokenizer import token_labels, tokenizer_for

EMBED_HOOKS = ("hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre")
PCA_SAMPLE_SIZES = S.EMB_PCA_N.rule.options
MAX_DIMS = 256  # per panel: T x 256 cells x 3 panels stays light in the browser
# A capture without the hooks asked for: the server kept a model built by gptviz code it has since reloaded.


@dataclass
class Embedded:
    """The prompt's tokens and what block 0 receives for them, read from the capture."""

    ids: tuple[int, ...]
    labels: list[str]
    tok: torch.Tensor  # [T, d_model] hook_embed
    pos: torch.Tensor  # [T, d_model] hook_pos_embed
    total: torch.Tensor  # [T, d_model] blocks.0.hook_resid_pre


def panels_frame(tok, pos, total, labels, dims) -> pd.DataFrame:
    """The three panels' data, one row per (position, dimension)."""
    T, sl = len(labels), slice(dims.start, dims.stop)
    return pd.DataFrame(
        {
            "position": [t for t in range(T) for _ in dims],
            "token": [labels[t] for t in range(T) for _ in dims],
            "dimension": [d for _ in range(T) for d in dims],
            "token_embedding": tok[:, sl].reshape(-1).numpy(),
            "position_embedding": pos[:, sl].reshape(-1).numpy(),
            "sum": total[:, sl].reshape(-1).numpy(),
        }
    )


def embedded_prompt() -> Embedded | None:
    """The sidebar's prompt through the embeddings, read from its capture (None, with the sidebar's hint, when there
    is no prompt: the learned embeddings below still show)."""
    seen = read_prompt(lambda cfg, T: EMBED_HOOKS, required=False)
    if seen is None:
        return None
    return Embedded(seen.ids, seen.labels, *(seen.prompt[name] for name in EMBED_HOOKS))


def dimension_range(d_model: int) -> range:
    """The dimensions the panels show: the slider's range, cut to MAX_DIMS."""
    lo, hi = 0, 1
    if d_model > 1:
        lo, hi = S.EMB_DIMS.slider(
            st,
            min_value=0,
            max_value=d_model,
            value=(0, min(d_model, 64)),
            help=f"The model has {d_model} dimensions; a range of them keeps the cells "
            f"readable (at most {MAX_DIMS} at a time).",
        )
        if hi - lo > MAX_DIMS:
            st.caption(f"Showing dimensions {lo} to {lo + MAX_DIMS - 1}, the first {MAX_DIMS} of the chosen range.")
            hi = lo + MAX_DIMS
    return range(lo, hi)


def block_input_section(cfg: GPTConfig, seen: Embedded) -> None:
    st.subheader("Token + position = what block 0 receives")
    dims = dimension_range(cfg.d_model)
    if not dims:
        st.info("Choose a range of at least one dimension.")
    else:
        display.show_figure(figs.embedding_panels(seen.tok, seen.pos, seen.total, seen.labels, dims), key=K.EMB_PANELS)
    st.caption(
        "Read from the capture: `hook_embed`, `hook_pos_embed` and `blocks.0.hook_resid_pre`. "
        "One colour scale for all three panels, centred on zero, so their sizes compare directly. "
        "Rows are the prompt's tokens in order (a repeated token gets the same token-embedding row but a "
        "different position row)."
    )
    display.download_csv(
        partial(panels_frame, seen.tok, seen.pos, seen.total, seen.labels, dims), "embeddings.csv", key=K.EMB_PANELS_CSV
    )


def token_similarity_section(seen: Embedded | None) -> None:
    st.subheader("Token embeddings compared")
    if seen is None:
        st.info("Needs a prompt.")
        return
    sim = analysis.cosine_similarity_matrix(seen.tok)
    display.show_figure(figs.token_similarity(sim, seen.labels), key=K.EMB_TOKEN_SIM)
    st.caption(
        "Cosine similarity between the token-embedding rows of the prompt's tokens (1 on the "
        "diagonal; repeated tokens score 1 with each other). Hover names both tokens."
    )
    display.download_csv(
        matrix_frame(sim, seen.labels, seen.labels, "token_a", "token_b", "cosine"),
        "token_similarity.csv",
        key=K.EMB_TOKEN_SIM_CSV,
    )


def position_similarity_section(spec: model_service.ModelSpec, cfg: GPTConfig) -> None:
    st.subheader("Position embeddings compared")
    with st.spinner("Comparing position embeddings..."):
        pos_sim = services.position_similarity(spec)
    display.show_figure(figs.position_similarity(pos_sim), key=K.EMB_POS_SIM)
    st.caption(
        f"All {cfg.n_ctx} learned positions (`wpe.weight`), each against every other. A trained model "
        "shows smooth structure: nearby positions point in similar directions. Random weights show only "
        "the diagonal."
    )
    positions = list(range(cfg.n_ctx))
    display.download_csv(
        partial(matrix_frame, pos_sim, positions, positions, "position_a", "position_b", "cosine"),
        "position_similarity.csv",
        key=K.EMB_POS_SIM_CSV,
    )


def pca_section(spec: model_service.ModelSpec, cfg: GPTConfig, seen: Embedded | None, enc) -> None:
    st.subheader("The vocabulary in two dimensions")
    trained_ids = model_service.training_vocab(spec)
    pool = (
        f"the {len(trained_ids):,} ids that occur in its training text (ids it never saw were trained only as "
        "wrong answers; with them in, the first component just separates seen from unseen)"
        if trained_ids is not None
        else f"the whole vocabulary of {cfg.vocab_size:,} ids"
    )
    n_sample = S.EMB_PCA_N.select_slider(
        st, value=S.EMB_PCA_N.default, help=f"Token ids drawn at random (a fixed sample) from {pool}."
    )
    prompt_ids = tuple(dict.fromkeys(seen.ids)) if seen is not None else ()
    with st.spinner("Fitting the PCA..."):
        sample, coords, explained = services.embedding_pca(spec, prompt_ids, n_sample)
    n_vocab = len(sample)
    sample_labels, prompt_labels = token_labels(sample, enc), token_labels(prompt_ids, enc)
    display.show_figure(
        figs.pca_scatter(
            coords[:n_vocab],
            sample_labels,
            coords[n_vocab:],
            prompt_labels,
            (explained[0], explained[1] if len(explained) > 1 else 0.0),
        ),
        key=K.EMB_PCA,
    )
    reproduce.show(reproduce.embeddings(spec, prompt_ids, n_sample))
    st.caption(
        f"Principal components fitted on the token-embedding rows of {n_vocab:,} ids drawn at random from "
        f"{pool}, together with the prompt's "
        "distinct tokens; the axis titles give the share of their variance each direction explains. "
        "In a trained model related tokens cluster; random weights give a round cloud."
    )
    display.download_csv(
        pd.DataFrame(
            {
                "token_id": sample + list(prompt_ids),
                "token": sample_labels + prompt_labels,
                "set": ["vocabulary sample"] * n_vocab + ["prompt"] * len(prompt_ids),
                "pc1": coords[:, 0],
                "pc2": coords[:, 1] if coords.shape[1] > 1 else 0.0,
            }
        ),
        "embedding_pca.csv",
        key=K.EMB_PCA_CSV,
    )


def main() -> None:
    st.title("Embeddings")
    st.caption(
        "Before any attention, each token becomes a row of the token-embedding matrix (`wte`) plus the row "
        "of the position-embedding matrix (`wpe`) for where it sits. Their sum is the residual stream that "
        "enters block 0."
    )
    spec, model = sidebar.require_model()
    cfg, enc = model.config, tokenizer_for(model)  # GPT-1's own BPE for a GPT-1 folder
    seen = embedded_prompt()
    if seen is not None:
        block_input_section(cfg, seen)
    col_tok, col_pos = st.columns(2)
    with col_tok:
        token_similarity_section(seen)
    with col_pos:
        position_similarity_section(spec, cfg)
    pca_section(spec, cfg, seen, enc)


main()
