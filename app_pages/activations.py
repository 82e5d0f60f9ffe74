"""Activations: the residual stream, MLP neurons, what enters each norm, the logit lens and head detectors."""
from functools import partial

import pandas as pd
import streamlit as st
import torch

from gptviz import analysis
from gptviz.export import capture_nbytes, matrix_frame, prompt_capture_npz
from gptviz.figures import activations as figs
from gptviz.tokenizer import position_labels, token_labels
from gptviz.app import display, models, sidebar
from gptviz import limits

SUFFIXES = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "mlp.hook_post", "hook_mlp_out",
            "hook_resid_post", "attn.hook_pattern")
# Attention patterns are [heads, T, T] per layer: past this many bytes the prompt's head detectors are skipped
# rather than holding (and caching) hundreds of MB of weights.
PATTERN_BUDGET = 256 * 2**20
# A capture without the hooks asked for: the server kept a model built by gptviz code it has since reloaded.
STALE_CAPTURE = ("The capture came back without the hook points it asked for. This happens when gptviz's code "
                 "changed while the app was running: clear the cache (⋮ menu, top right) or restart the app.")


def hook_names(n_layers: int, patterns: bool = True) -> tuple[str, ...]:
    return tuple(f"blocks.{i}.{s}" for i in range(n_layers) for s in SUFFIXES
                 if patterns or s != "attn.hook_pattern")


@st.cache_data(max_entries=16, show_spinner=False)
def lens(spec: models.ModelSpec, ids: tuple[int, ...], names: tuple[str, ...]) -> analysis.LogitLens:
    """The logit lens for a prompt (reuses the page's cached capture)."""
    _, cache = models.capture_cache(spec, ids, names)
    return analysis.logit_lens(models.load_model(spec), cache)


def pct(p: float) -> str:
    return f"{p:.1%}" if p >= 0.01 else f"{p:.4%}"


def best_heads_text(scores: torch.Tensor, chance: float, top: int = 3) -> str:
    best = ", ".join(f"L{layer} H{head} ({score:.2f})" for layer, head, score in analysis.head_ranking(scores, top))
    ratio = f", {scores.max().item() / chance:.1f}x chance" if chance > 0 else ""
    return f"{best}; uniform attention (chance) scores {chance:.3f}{ratio}"


st.title("Activations")
st.caption("Inside the forward pass for the sidebar's prompt: how big the residual stream grows, what the MLP "
           "neurons do, what each norm receives, what the model would predict if it stopped early, and which "
           "heads follow simple patterns.")

spec, model = sidebar.require_model()
cfg = model.config
prompt = sidebar.require_prompt(cfg.n_ctx, cfg.vocab_size)
ids = prompt.ids
T = len(ids)
labels = token_labels(ids)
pos_labels = position_labels(ids)
pattern_bytes = 4 * cfg.n_layers * cfg.n_heads * T * T
with_patterns = pattern_bytes <= PATTERN_BUDGET
names = hook_names(cfg.n_layers, with_patterns)
try:
    with st.spinner("Running the model on the prompt..."):
        logits, cache = models.capture_cache(spec, ids, names)
except (ValueError, RuntimeError, KeyError) as err:
    st.error(f"The model could not run on this prompt: {err}")
    st.stop()
if any(name not in cache for name in names):
    st.error(STALE_CAPTURE)
    st.stop()

# a shorter prompt, or a value the browser kept as the old option's label (a str), falls back to the last token
sidebar.keep_valid("act_focus", range(T), T - 1)
focus = st.columns([1, 2])[0].selectbox("Focus token", range(T), index=T - 1, format_func=pos_labels.__getitem__,
                                        key="act_focus",
                                        help="The position used by the per-token views below (neurons, norms per "
                                             "layer, lens line).")

tab_resid, tab_mlp, tab_norm, tab_lens, tab_heads, tab_export = st.tabs(
    ["Residual stream", "MLP neurons", "Norm inputs", "Logit lens", "Head detectors", "Export"])

with tab_resid:
    resid = analysis.residual_norms(cache)                    # [layers + 1, T]
    attn = analysis.branch_norms(cache, "hook_attn_out")       # [layers, T]
    mlp = analysis.branch_norms(cache, "hook_mlp_out")
    display.show_figure(figs.residual_norm_heatmap(resid, labels), key="act_resid_heat")
    st.caption("L2 norm of the residual stream entering each block (rows, top to bottom) and leaving the last "
               "one, for every token (columns). In a pre-norm model it grows layer by layer; post-norm "
               "renormalises it after every sub-layer.")
    average = st.toggle("Average over all positions", key="act_resid_avg")
    if average:
        where = "mean over all positions"
        r, a, m = resid.mean(1), attn.mean(1), mlp.mean(1)
    else:
        where = f"at {pos_labels[focus]}"
        r, a, m = resid[:, focus], attn[:, focus], mlp[:, focus]
    display.show_figure(figs.residual_norm_lines(r, a, m, where), key="act_resid_lines")
    st.caption("Green: the stream entering each block. Blue and orange: the size of what attention "
               "(`hook_attn_out`) and the MLP (`hook_mlp_out`) add inside that block.")
    display.download_csv(pd.DataFrame({
        "state": [s for s in figs.state_labels(cfg.n_layers) for _ in range(T)],
        "position": list(range(T)) * (cfg.n_layers + 1), "token": labels * (cfg.n_layers + 1),
        "resid_norm": resid.reshape(-1).numpy(),
        "attn_out_norm": torch.cat([attn, torch.full((1, T), float("nan"))]).reshape(-1).numpy(),
        "mlp_out_norm": torch.cat([mlp, torch.full((1, T), float("nan"))]).reshape(-1).numpy()}),
        "residual_norms.csv", key="act_resid_csv")

with tab_mlp:
    post = cache.stack("mlp.hook_post")  # [layers, T, d_ff]
    counts, edges = analysis.activation_histograms(post)
    left, right = st.columns([3, 2])
    with left:
        display.show_figure(figs.mlp_histograms(counts, edges), key="act_mlp_hist")
        st.caption(f"Every value of `mlp.hook_post` ({T} tokens × {cfg.d_ff} neurons per layer), binned on shared "
                   f"edges. The activation is `{cfg.activation}`: "
                   + ("values below 0 are cut to exactly 0." if cfg.activation == "relu"
                      else "negative inputs give small negative outputs (never below about −0.17)."))
        bins = pd.DataFrame(counts.numpy().T, columns=[f"layer {i}" for i in range(cfg.n_layers)])
        bins.insert(0, "bin_high", edges[1:].numpy())
        bins.insert(0, "bin_low", edges[:-1].numpy())
        display.download_csv(bins, "mlp_histograms.csv", key="act_mlp_hist_csv")
    with right:
        k = st.slider("Neurons", 5, 30, 10, key="act_topk")
        rows = analysis.top_neurons(post, focus, k)
        display.show_figure(figs.top_neurons_bar(rows, pos_labels[focus]), key="act_top_neurons")
        st.caption("The largest activations at the focus token, over every layer's neurons.")
        display.download_csv(pd.DataFrame(rows, columns=["layer", "neuron", "activation"]), "top_neurons.csv",
                        key="act_top_neurons_csv")

with tab_norm:
    stats = analysis.norm_input_stats(cache, cfg)
    rms = cfg.norm_type == "rmsnorm"
    display.show_figure(figs.norm_stats_figure(stats.names, stats.mean, stats.var, stats.mean_square, rms=rms),
                   key="act_norm_stats")
    if cfg.norm == "pre":
        st.caption("Pre-norm: `ln_1` normalises the stream entering the block (`hook_resid_pre`), `ln_2` the stream "
                   "after attention is added (`hook_resid_mid`); `ln_f` the last block's output. The variance "
                   "grows with depth because nothing renormalises the stream itself.")
    else:
        st.caption("Post-norm: `ln_1` normalises `hook_resid_pre + hook_attn_out`, `ln_2` normalises "
                   "`hook_resid_mid + hook_mlp_out` (each sum right after its residual addition); `ln_f` the last "
                   "block's output, which `ln_2` has already normalised.")
    if rms:
        st.caption("RMSNorm divides by the root of the mean square (it subtracts no mean), so the lower panel "
                   "shows the mean square.")
    display.download_csv(pd.DataFrame({
        "norm": [n for n in stats.names for _ in range(T)], "position": list(range(T)) * len(stats.names),
        "token": labels * len(stats.names), "mean": stats.mean.reshape(-1).numpy(),
        "variance": stats.var.reshape(-1).numpy(), "mean_square": stats.mean_square.reshape(-1).numpy()}),
        "norm_inputs.csv", key="act_norm_csv")

with tab_lens:
    try:
        with st.spinner("Decoding every layer through ln_f and the unembedding..."):
            lensed = lens(spec, ids, names)
    except (ValueError, RuntimeError, KeyError) as err:
        st.error(f"The logit lens failed: {err}")
    else:
        top_labels = [token_labels(row) for row in lensed.top_ids.tolist()]
        target_labels = token_labels(lensed.target_ids.tolist())
        display.show_figure(figs.logit_lens_heatmap(lensed.top_probs, top_labels, pos_labels, target_labels,
                                               lensed.target_probs), key="act_lens_heat")
        st.caption("Each residual state decoded as if it were the last: `lm_head(ln_f(x))`. The bottom row is "
                   "the model's real output. Each column predicts the token after its input token. Colours run "
                   f"from 0 to {pct(lensed.top_probs.max().item())}, the largest probability here "
                   f"(uniform guessing would give {pct(1 / cfg.vocab_size)})."
                   + (" Token names are written in the cells for short prompts; hover for the rest." if T > 24 else ""))
        display.show_figure(figs.final_prediction_lines(lensed.target_probs, focus, pos_labels[focus],
                                                   target_labels[focus]), key="act_lens_lines")
        display.download_csv(pd.DataFrame({
            "state": [s for s in figs.state_labels(cfg.n_layers) for _ in range(T)],
            "position": list(range(T)) * (cfg.n_layers + 1), "token": labels * (cfg.n_layers + 1),
            "top_token_id": lensed.top_ids.reshape(-1).numpy(), "top_token": sum(top_labels, []),
            "top_prob": lensed.top_probs.reshape(-1).numpy(),
            "final_prediction": target_labels * (cfg.n_layers + 1),
            "final_prediction_prob": lensed.target_probs.reshape(-1).numpy()}), "logit_lens.csv",
            key="act_lens_csv")

with tab_heads:
    scores = {}
    if not with_patterns:
        st.info(f"This prompt's attention patterns would take {pattern_bytes / 2**20:,.0f} MiB, so the previous- "
                "and duplicate-token scores are left out; a shorter prompt brings them back.")
    elif T >= 2:
        patterns = cache.patterns()  # [layers, heads, T, T]
        scores["previous"] = analysis.previous_token_scores(patterns)
        scores["duplicate"] = analysis.duplicate_token_scores(patterns, ids)
    else:
        st.info("Previous- and duplicate-token scores need a prompt of at least two tokens.")
    length = min(50, cfg.n_ctx // 2)
    if length >= 2:
        try:
            with st.spinner("Running the model on a repeated random sequence..."):
                scores["induction"] = models.induction_scores(spec, length)
        except (ValueError, RuntimeError, KeyError) as err:
            st.error(f"The induction test could not run: {err}")
    if scores:
        display.show_figure(figs.head_detector_heatmaps(scores), key="act_heads")
        lines = []
        if "previous" in scores:
            lines.append("**Previous-token** (mean weight on the token just before): "
                         + best_heads_text(scores["previous"], analysis.previous_token_chance(T)))
            has_copy = len(set(ids)) < T
            lines.append(f"**Duplicate-token** (weight on earlier copies of the same token): "
                         + (best_heads_text(scores["duplicate"], analysis.duplicate_token_chance(ids)) if has_copy
                            else "no token repeats in this prompt, so every score is 0"))
        if "induction" in scores:
            drawn = "the ids its training text used" if models.training_vocab(spec) is not None else "ids 1,000-19,999"
            lines.append(f"**Induction** (on {length} random tokens from {drawn}, repeated once; weight from each "
                         f"repeat to the token after its first copy): "
                         f"{best_heads_text(scores['induction'], analysis.induction_chance(length))}")
        st.markdown("  \n".join(lines))
        st.caption("Scores are mean attention weights in [0, 1]. Previous- and duplicate-token scores use the "
                   "sidebar's prompt; induction needs a sequence that repeats, so it uses its own.")
        frames = [matrix_frame(s, range(cfg.n_layers), range(cfg.n_heads), "layer", "head", "score")
                  .assign(detector=name) for name, s in scores.items()]
        display.download_csv(pd.concat(frames, ignore_index=True), "head_detectors.csv", key="act_heads_csv")

with tab_export:
    st.markdown("**The whole capture for this prompt** as a NumPy `.npz`: every hook point's tensor by its hook "
                "name (no batch axis), plus `ids` and `tokens`. Load it with `numpy.load`.")
    include_attention = st.checkbox("Include attention scores and patterns ([heads, T, T] per layer)", value=True,
                                    key="act_npz_attn")
    size = capture_nbytes(cfg, T, include_attention)
    st.caption(f"About {size / 2**20:,.1f} MiB of float32 before compression. The file is built when you click.")
    too_big = size > limits.server_limits().export_bytes
    if too_big:
        st.warning(f"This server builds downloads of up to {limits.server_limits().export_mb:,} MiB; leave out the "
                   "attention tensors or shorten the prompt.")
    st.download_button("Capture as .npz", data=partial(prompt_capture_npz, model, ids, include_attention),
                        file_name="capture.npz", mime="application/octet-stream", key="act_npz", on_click="ignore",
                        icon=":material/download:", disabled=too_big)
    st.caption("Each figure's toolbar saves it as PNG or SVG (format in the sidebar); each view has its CSV "
               "button under it.")
