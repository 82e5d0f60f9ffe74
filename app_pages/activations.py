"""Activations: the residual stream, MLP neurons, what enters each norm, the logit lens and head detectors.

The prompt runs through the model once (cached by model and prompt); every tab reads that capture, and each tab is
one function below.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st
import torch

from gptviz import methods as analysis
from gptviz.app import display, model_service, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.seen import Seen, read_prompt
from gptviz.app.services import activations as services
from gptviz.app.unit_nav import unit_pills
from gptviz.export import matrix_frame
from gptviz.figures import activations as figs
from gptviz.model import sizes
from gptviz.model.tokenizer import token_labels
from gptviz.model.unit_id import head_id, neuron_id

# A capture without the hooks asked for: the server kept a model built by gptviz code it has since reloaded.
TABS = ("Residual stream", "MLP neurons", "Norm inputs", "Logit lens", "Head detectors", "Export")


def with_patterns(seen: Seen) -> bool:
    """Whether this prompt's attention patterns are small enough to capture and score."""
    return seen.pattern_bytes <= services.PATTERN_BUDGET


def pct(p: float) -> str:
    return f"{p:.1%}" if p >= 0.01 else f"{p:.4%}"


def best_heads_text(scores: torch.Tensor, chance: float, top: int = 3) -> str:
    best = ", ".join(
        f"{head_id(layer, head)} ({score:.2f})" for layer, head, score in analysis.head_ranking(scores, top)
    )
    ratio = f", {scores.max().item() / chance:.1f}x chance" if chance > 0 else ""
    return f"{best}; uniform attention (chance) scores {chance:.3f}{ratio}"


def per_position(rows: list[str], labels: list[str], column: str) -> dict:
    """The leading CSV columns of a [rows, positions] table flattened row by row: row name, position, token."""
    T = len(labels)
    return {
        column: [r for r in rows for _ in range(T)],
        "position": list(range(T)) * len(rows),
        "token": labels * len(rows),
    }


def focus_picker(seen: Seen) -> int:
    T = seen.T
    # a shorter prompt, or a value the browser kept as the old option's label (a str), falls back to the last token
    sidebar.keep_valid(K.ACT_FOCUS, range(T), T - 1)
    return S.ACT_FOCUS.selectbox(
        st.columns([1, 2])[0], options=range(T), index=T - 1, format_func=seen.pos_labels.__getitem__
    )


def residual_tab(seen: Seen) -> None:
    cfg, T, cache, focus = seen.cfg, seen.T, seen.prompt, seen.focus
    resid = analysis.residual_norms(cache)  # [layers + 1, T]
    attn = analysis.branch_norms(cache, "hook_attn_out")  # [layers, T]
    mlp = analysis.branch_norms(cache, "hook_mlp_out")
    display.show_figure(figs.residual_norm_heatmap(resid, seen.labels), key=K.ACT_RESID_HEAT)
    st.caption(
        "L2 norm of the residual stream entering each block (rows, top to bottom) and leaving the last "
        "one, for every token (columns). In a pre-norm model it grows layer by layer; post-norm "
        "renormalises it after every sub-layer."
    )
    average = S.ACT_RESID_AVG.toggle(st)
    if average:
        where = "mean over all positions"
        r, a, m = resid.mean(1), attn.mean(1), mlp.mean(1)
    else:
        where = f"at {seen.pos_labels[focus]}"
        r, a, m = resid[:, focus], attn[:, focus], mlp[:, focus]
    display.show_figure(figs.residual_norm_lines(r, a, m, where), key=K.ACT_RESID_LINES)
    st.caption(
        "Green: the stream entering each block. Blue and orange: the size of what attention "
        "(`hook_attn_out`) and the MLP (`hook_mlp_out`) add inside that block."
    )
    no_output = torch.full((1, T), float("nan"))  # the last state has no block after it
    display.download_csv(
        pd.DataFrame(
            {
                **per_position(figs.state_labels(cfg.n_layers), seen.labels, "state"),
                "resid_norm": resid.reshape(-1).numpy(),
                "attn_out_norm": torch.cat([attn, no_output]).reshape(-1).numpy(),
                "mlp_out_norm": torch.cat([mlp, no_output]).reshape(-1).numpy(),
            }
        ),
        "residual_norms.csv",
        key=K.ACT_RESID_CSV,
    )


def mlp_tab(seen: Seen) -> None:
    cfg = seen.cfg
    post = seen.prompt.stack("mlp.hook_post")  # [layers, T, d_ff]
    counts, edges = analysis.activation_histograms(post)
    left, right = st.columns([3, 2])
    with left:
        display.show_figure(figs.mlp_histograms(counts, edges), key=K.ACT_MLP_HIST)
        st.caption(
            f"Every value of `mlp.hook_post` ({seen.T} tokens × {cfg.d_ff} neurons per layer), binned on "
            f"shared edges. The activation is `{cfg.activation}`: "
            + (
                "values below 0 are cut to exactly 0."
                if cfg.activation == "relu"
                else "negative inputs give small negative outputs (never below about −0.17)."
            )
        )
        bins = pd.DataFrame(counts.numpy().T, columns=[f"layer {i}" for i in range(cfg.n_layers)])
        bins.insert(0, "bin_high", edges[1:].numpy())
        bins.insert(0, "bin_low", edges[:-1].numpy())
        display.download_csv(bins, "mlp_histograms.csv", key=K.ACT_MLP_HIST_CSV)
    with right:
        k = S.ACT_TOPK.slider(st)
        rows = analysis.top_neurons(post, seen.focus, k)
        display.show_figure(figs.top_neurons_bar(rows, seen.pos_labels[seen.focus]), key=K.ACT_TOP_NEURONS)
        st.caption("The largest activations at the focus token, over every layer's neurons.")
        unit_pills(
            "What each does over the corpus",
            [neuron_id(layer, neuron) for layer, neuron, _ in rows],
            K.per_item(K.UNIT_PILLS, "act_neurons"),
        )
        display.download_csv(
            pd.DataFrame(rows, columns=["layer", "neuron", "activation"]), "top_neurons.csv", key=K.ACT_TOP_NEURONS_CSV
        )


PRE_NORM_INPUTS = (
    "Pre-norm: `ln_1` normalises the stream entering the block (`hook_resid_pre`), `ln_2` the stream "
    "after attention is added (`hook_resid_mid`); `ln_f` the last block's output. The variance "
    "grows with depth because nothing renormalises the stream itself."
)
POST_NORM_INPUTS = (
    "Post-norm: `ln_1` normalises `hook_resid_pre + hook_attn_out`, `ln_2` normalises "
    "`hook_resid_mid + hook_mlp_out` (each sum right after its residual addition); `ln_f` the last "
    "block's output, which `ln_2` has already normalised."
)


def norm_tab(seen: Seen) -> None:
    cfg = seen.cfg
    stats = analysis.norm_input_stats(seen.prompt, cfg)
    rms = cfg.norm_type == "rmsnorm"
    display.show_figure(
        figs.norm_stats_figure(stats.names, stats.mean, stats.var, stats.mean_square, rms=rms), key=K.ACT_NORM_STATS
    )
    st.caption(PRE_NORM_INPUTS if cfg.norm == "pre" else POST_NORM_INPUTS)
    if rms:
        st.caption(
            "RMSNorm divides by the root of the mean square (it subtracts no mean), so the lower panel "
            "shows the mean square."
        )
    display.download_csv(
        pd.DataFrame(
            {
                **per_position(stats.names, seen.labels, "norm"),
                "mean": stats.mean.reshape(-1).numpy(),
                "variance": stats.var.reshape(-1).numpy(),
                "mean_square": stats.mean_square.reshape(-1).numpy(),
            }
        ),
        "norm_inputs.csv",
        key=K.ACT_NORM_CSV,
    )


def lens_tab(seen: Seen) -> None:
    cfg, T, focus, pos_labels = seen.cfg, seen.T, seen.focus, seen.pos_labels
    try:
        with st.spinner("Decoding every layer through ln_f and the unembedding..."):
            lensed = services.lens(seen.spec, seen.ids, seen.names)
    except (ValueError, RuntimeError, KeyError) as err:
        st.error(f"The logit lens failed: {err}")
        return
    top_labels = [token_labels(row, seen.enc) for row in lensed.top_ids.tolist()]
    target_labels = token_labels(lensed.target_ids.tolist(), seen.enc)
    display.show_figure(
        figs.logit_lens_heatmap(lensed.top_probs, top_labels, pos_labels, target_labels, lensed.target_probs),
        key=K.ACT_LENS_HEAT,
    )
    st.caption(
        "Each residual state decoded as if it were the last: `lm_head(ln_f(x))`. The bottom row is "
        "the model's real output. Each column predicts the token after its input token. Colours run "
        f"from 0 to {pct(lensed.top_probs.max().item())}, the largest probability here "
        f"(uniform guessing would give {pct(1 / cfg.vocab_size)})."
        + (" Token names are written in the cells where they fit; hover for the rest." if T > 24 else "")
    )
    display.show_figure(
        figs.final_prediction_lines(lensed.target_probs, focus, pos_labels[focus], target_labels[focus]),
        key=K.ACT_LENS_LINES,
    )
    display.download_csv(
        pd.DataFrame(
            {
                **per_position(figs.state_labels(cfg.n_layers), seen.labels, "state"),
                "top_token_id": lensed.top_ids.reshape(-1).numpy(),
                "top_token": sum(top_labels, []),
                "top_prob": lensed.top_probs.reshape(-1).numpy(),
                "final_prediction": target_labels * (cfg.n_layers + 1),
                "final_prediction_prob": lensed.target_probs.reshape(-1).numpy(),
            }
        ),
        "logit_lens.csv",
        key=K.ACT_LENS_CSV,
    )


def induction_length(seen: Seen) -> int:
    """The length of the random sequence the induction test repeats."""
    return model_service.induction_length(seen.cfg.n_ctx)


def detector_scores(seen: Seen) -> dict[str, torch.Tensor]:
    """The detectors that can run: previous and duplicate token on the prompt, induction on its own sequence."""
    scores, T = {}, seen.T
    if not with_patterns(seen):
        st.info(
            f"This prompt's attention patterns would take {seen.pattern_bytes / 2**20:,.0f} MiB, so the "
            "previous- and duplicate-token scores are left out; a shorter prompt brings them back."
        )
    elif T >= 2:
        patterns = seen.patterns  # [layers, heads, T, T]
        scores["previous"] = analysis.previous_token_scores(patterns)
        scores["duplicate"] = analysis.duplicate_token_scores(patterns, seen.ids)
    else:
        st.info("Previous- and duplicate-token scores need a prompt of at least two tokens.")
    length = induction_length(seen)
    if length >= 2:
        try:
            with st.spinner("Running the model on a repeated random sequence..."):
                scores["induction"] = model_service.induction_scores(seen.spec, length)
        except (ValueError, RuntimeError, KeyError) as err:
            st.error(f"The induction test could not run: {err}")
    return scores


def detector_lines(seen: Seen, scores: dict[str, torch.Tensor]) -> list[str]:
    """Each detector's best heads, in a sentence beside its chance level."""
    lines, T, ids = [], seen.T, seen.ids
    if "previous" in scores:
        lines.append(
            "**Previous-token** (mean weight on the token just before): "
            + best_heads_text(scores["previous"], analysis.previous_token_chance(T))
        )
        has_copy = len(set(ids)) < T
        lines.append(
            "**Duplicate-token** (weight on earlier copies of the same token): "
            + (
                best_heads_text(scores["duplicate"], analysis.duplicate_token_chance(ids))
                if has_copy
                else "no token repeats in this prompt, so every score is 0"
            )
        )
    if "induction" in scores:
        length = induction_length(seen)
        drawn = (
            "the ids its training text used"
            if model_service.training_vocab(seen.spec) is not None
            else "ids 1,000-19,999"
        )
        lines.append(
            f"**Induction** (on {length} random tokens from {drawn}, repeated once; weight from each "
            f"repeat to the token after its first copy): "
            f"{best_heads_text(scores['induction'], analysis.induction_chance(length))}"
        )
    return lines


def heads_tab(seen: Seen) -> None:
    cfg = seen.cfg
    scores = detector_scores(seen)
    if not scores:
        return
    display.show_figure(figs.head_detector_heatmaps(scores), key=K.ACT_HEADS)
    st.markdown("  \n".join(detector_lines(seen, scores)))
    named = dict.fromkeys(
        head_id(layer, head) for s in scores.values() for layer, head, _ in analysis.head_ranking(s, 3)
    )
    unit_pills("What these heads do over the corpus", named, K.per_item(K.UNIT_PILLS, "act_heads"))
    st.caption(
        "Scores are mean attention weights in [0, 1]. Previous- and duplicate-token scores use the "
        "sidebar's prompt; induction needs a sequence that repeats, so it uses its own."
    )
    frames = [
        matrix_frame(s, range(cfg.n_layers), range(cfg.n_heads), "layer", "head", "score").assign(detector=name)
        for name, s in scores.items()
    ]
    display.download_csv(pd.concat(frames, ignore_index=True), "head_detectors.csv", key=K.ACT_HEADS_CSV)


def export_tab(seen: Seen) -> None:
    st.markdown(
        "**The whole capture for this prompt** as a NumPy `.npz`: every hook point's tensor by its hook "
        "name (no batch axis), plus `ids` and `tokens`. Load it with `numpy.load`."
    )
    include_attention = S.ACT_NPZ_ATTN.checkbox(st)
    size = sizes.export_nbytes(seen.cfg, seen.T, include_attention)
    st.caption(f"About {size / 2**20:,.1f} MiB of float32 before compression. The file is built when you click.")
    refusal = services.npz_refusal(seen.cfg, seen.T, include_attention)
    too_big = refusal is not None
    if too_big:
        st.warning(refusal)
    st.download_button(
        "Capture as .npz",
        data=partial(services.npz_within_budget, seen.spec, seen.ids, include_attention),
        file_name="capture.npz",
        mime="application/octet-stream",
        key=K.ACT_NPZ,
        on_click="ignore",
        icon=":material/download:",
        disabled=too_big,
    )
    st.caption(
        "Each figure's toolbar saves it as PNG or SVG (format in the sidebar); each view has its CSV button under it."
    )


TAB_DRAWERS = dict(zip(TABS, (residual_tab, mlp_tab, norm_tab, lens_tab, heads_tab, export_tab), strict=True))


def main() -> None:
    st.title("Activations")
    st.caption(
        "Inside the forward pass for the sidebar's prompt: how big the residual stream grows, what the MLP "
        "neurons do, what each norm receives, what the model would predict if it stopped early, and which "
        "heads follow simple patterns."
    )
    seen = read_prompt(services.captured_names)
    seen.focus = focus_picker(seen)
    for name, tab in zip(TABS, st.tabs(list(TABS)), strict=True):
        with tab:
            TAB_DRAWERS[name](seen)
    reproduce.show(
        reproduce.activations(
            seen.spec,
            seen.ids,
            seen.focus,
            int(st.session_state.get(K.ACT_TOPK, S.ACT_TOPK.default)),
            reproduce.prompt_text(),
        )
    )


main()
