"""Pre-norm vs post-norm: one set of random weights run both ways, measured layer by layer against the
theory; then the bundled twins trained each way."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

from gptviz import PRESETS, GPTConfig, analysis, limits, memory, training_log, unit_id, weights, wiring, xiong
from gptviz.analysis import bigram_baseline
from gptviz.app import display, models, sidebar
from gptviz.app.unit_nav import unit_pills
from gptviz.app import keys as K, settings as S
from gptviz.config import ConfigError
from gptviz.evaluate import corpus_of, recipe_differences
from gptviz.evaluate import twins_caveat as caveat_of_records
from gptviz.figures import explainers as explainer_figs
from gptviz.figures import norms as fig_norms
from gptviz.figures import training as fig_train
from gptviz.generate import check_sampling, generate
from gptviz.params import total_params
from gptviz.snapshots import FORMED_THRESHOLD, formed_step, load_snapshots
from gptviz.tokenizer import decode, token_labels

GPT2_VOCAB = 50257
AUTO_MEASURE_PARAMS = 60_000_000     # above this, measuring waits for a button press
RANDOM_TOKENS = 64
MAX_TOKENS = 128                     # of the prompt, measured (attention maps grow with tokens²)
GRADIENT_VIEWS = {"ffn": "FFN weight matrices (what Xiong et al. plot)", "block": "Whole block (every parameter)",
                  "attention": "Attention parameters", "MLP": "MLP parameters", "norms": "LayerNorm gains and biases"}
SWEEP_DEPTHS = (1, 2, 4, 8, 16, 24, 32, 48)
INITS = {"gpt2": "GPT-2 (normal 0.02)", "xavier": "Xavier (Xiong et al.)"}
VERDICTS = {True: ":green[:material/check_circle: agrees]", False: ":red[:material/cancel: not seen here]"}
TABS = ("Trained twins side by side", "Same weights, two wirings", "The paper's setting", "The twins in depth")

state = st.session_state

INTRO = ("Where the LayerNorm sits decides how signals and gradients move through the stack. Pre-norm "
         "(GPT-2) normalises the input of each sub-layer and leaves the residual stream alone: "
         "x + f(LN(x)). Post-norm (GPT-1, the original Transformer) normalises after each residual "
         "addition: LN(x + f(x)).\n\n"
         "**Trained twins side by side** runs the sidebar's prompt through the two bundled models the sidebar's "
         "LayerNorm toggle switches between: trained separately, they grew their heads in different places, so heads "
         "are paired by what they do (attention-pattern similarity), not by index. **Same weights, two wirings** runs "
         "one set of random weights both ways, so every difference there comes from the wiring alone. **The paper's "
         "setting** checks Xiong et al.'s (2020) claims at their own initialisation. **The twins in depth**: every "
         "head's match with its scores, the training history, generation.")
TOP_LINE = ("The sidebar's LayerNorm toggle switches between two separately trained models: here both read your "
            "prompt, heads matched by role.")


# ---- cached computations -------------------------------------------------------------------------------------

@st.cache_data(max_entries=12, show_spinner=False)
def measure_both(config_json: str, ids: tuple[int, ...], seed: int, init: str) -> dict[str, wiring.WiringStats]:
    """Both wirings of one set of weights (built once and shared), measured on `ids`."""
    config = GPTConfig.from_dict(json.loads(config_json))
    with memory.reserve(wiring.measuring_nbytes(config, len(ids)), f"measuring {config.name} both ways"):
        stats = wiring.compare_wirings(config, ids, seed, init)
    for s in stats.values():  # half precision is plenty for drawing; it halves what the cache holds
        s.patterns = s.patterns.astype(np.float16)
    return stats


@st.cache_data(max_entries=4, show_spinner=False)
def reference_losses(model_name: str) -> dict[str, float]:
    """Uniform guess and the bigram baseline on the held-out text the bundled model validated on."""
    corpus = corpus_of(json.loads((weights.bundled_models()[model_name] / "config.json").read_text()))
    bigram = bigram_baseline(corpus.train, corpus.val, GPT2_VOCAB)
    return {"uniform guess, ln 50257": math.log(GPT2_VOCAB), "bigram baseline": bigram["nats"]}


@st.cache_data(max_entries=16, show_spinner=False)
def generate_cached(spec: models.ModelSpec, ids: tuple[int, ...], new_tokens: int, temperature: float,
                    top_k: int | None, seed: int) -> list[int]:
    model = models.load_model(spec)
    with memory.reserve(memory.sampling_nbytes(model.config, len(ids), new_tokens),
                        f"a continuation of {new_tokens} tokens on {spec.name}"):
        return generate(model, list(ids), new_tokens, temperature, top_k, None, seed)


# ---- small helpers -------------------------------------------------------------------------------------------

def width_choices(config: GPTConfig) -> list[int]:
    """Widths that keep the preset's head count (halving down from its d_model)."""
    out = []
    for k in range(6):
        width = config.d_model // 2 ** k
        if config.d_model % 2 ** k == 0 and width % config.n_heads == 0 and width >= 2 * config.n_heads:
            out.append(width)
    return out or [config.d_model]


def clamp(key: str, highest: int) -> None:
    """Keep a stored layer/head choice within range when the model changes (before its widget is drawn)."""
    if key in state and not 0 <= int(state[key]) <= highest:
        state[key] = max(0, min(int(state[key]), highest))


def fmt_params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


def layer_and_head(cols, layer_pick: S.Setting, head_pick: S.Setting, n_layers: int, n_heads: int) -> tuple[int, int]:
    """The layer and head pickers of an attention comparison, kept within this model's range."""
    clamp(layer_pick.key, n_layers - 1)
    clamp(head_pick.key, n_heads - 1)
    layer = int(layer_pick.number_input(cols[0], min_value=0, max_value=n_layers - 1, step=1))
    head = int(head_pick.number_input(cols[1], min_value=0, max_value=n_heads - 1, step=1))
    return layer, head


def val_losses(history: dict) -> list[float]:
    """The validation losses of a training history, in step order."""
    return [r["val_loss"] for r in history["history"] if r.get("val_loss") is not None]


# ---- section 1: same weights, two wirings ---------------------------------------------------------------------

@dataclass
class Setup:
    """The model the first section measures, as its controls chose it."""
    preset: str
    depth: int
    width: int
    init: str
    seed: int
    source: str
    config: GPTConfig


def shape_controls() -> Setup | None:
    """Architecture, depth, width, init, seed and input, in one row; None (after an error) for an invalid shape."""
    for setting in (S.NORMS_PRESET, S.NORMS_DEPTH, S.NORMS_INIT, S.NORMS_SEED, S.NORMS_INPUT):
        setting.setdefault(state)
    cols = st.columns([1.3, 1.6, 1.0, 1.5, 0.8, 1.3])
    preset = S.NORMS_PRESET.selectbox(cols[0])
    base = PRESETS[preset]
    depth = S.NORMS_DEPTH.slider(cols[1])
    widths = width_choices(base)
    if state.get(K.NORMS_WIDTH) not in widths:
        state[K.NORMS_WIDTH] = max([w for w in widths if w <= 256] or [min(widths)])
    width = S.NORMS_WIDTH.selectbox(cols[2], options=widths,
                                    help=f"Keeps the preset's {base.n_heads} heads. Narrower is faster.")
    init = S.NORMS_INIT.selectbox(cols[3], options=list(wiring.INITS), format_func=INITS.get)
    seed = int(S.NORMS_SEED.number_input(cols[4]))
    source = S.NORMS_INPUT.radio(cols[5], horizontal=True,
                                 format_func={"prompt": "prompt", "random": f"{RANDOM_TOKENS} random tokens"}.get)
    config = build_config(preset, depth, width)
    return None if config is None else Setup(preset, depth, width, init, seed, source, config)


def build_config(preset: str, depth: int, width: int) -> GPTConfig | None:
    """The chosen shape as a config with GPT-2's vocabulary at least; None (after an error) when invalid."""
    base = PRESETS[preset]
    try:
        config = base.replace(n_layers=depth, d_model=width, name=f"{preset}-{depth}L-d{width}")
        if config.vocab_size < GPT2_VOCAB:
            config = config.replace(vocab_size=GPT2_VOCAB)
            st.caption(f"{preset}'s {base.vocab_size:,}-token vocabulary is replaced by GPT-2's "
                       f"{GPT2_VOCAB:,} so the GPT-2 tokenizer's ids fit.")
    except ConfigError as err:
        st.error(f"That shape is not a valid model: {err}")
        return None
    return config


def input_ids(setup: Setup) -> tuple[int, ...] | None:
    """The tokens measured: the prompt's last MAX_TOKENS, or seeded random ones; None when too few."""
    config = setup.config
    if setup.source == "prompt":
        prompt = sidebar.prompt_tokens(config.n_ctx, vocab_size=config.vocab_size)
        if prompt is None:
            return None
        ids = prompt.ids[-MAX_TOKENS:]
        if len(prompt.ids) > MAX_TOKENS:
            st.caption(f"Measured on the prompt's last {MAX_TOKENS} tokens (of {len(prompt.ids)}).")
    else:
        ids = tuple(int(i) for i in wiring.random_tokens(min(RANDOM_TOKENS, config.n_ctx), config.vocab_size,
                                                         setup.seed))
    if len(ids) < 2:
        st.info("The language-model loss needs at least two tokens: lengthen the prompt in the sidebar.")
        return None
    return ids


def measuring_bytes(config: GPTConfig) -> int:
    """What measuring one wiring of `config` holds: weights, gradients and a margin for activations, float32."""
    return total_params(config) * 4 * 3


def fits_the_server(config: GPTConfig, what: str) -> bool:
    """Whether measuring `config` fits the server's memory; a clear refusal when it does not."""
    need, allowed = measuring_bytes(config), limits.server_limits().memory_mb
    if need <= allowed * 2**20:
        return True
    st.error(f"{what} has {fmt_params(total_params(config))} parameters: measuring it needs about "
             f"{need / 2**30:,.1f} GiB, more than the {allowed:,} MiB this server allows. Choose a smaller width or "
             "depth.")
    return False


def may_measure(setup: Setup, ids: tuple[int, ...], key: tuple) -> bool:
    """Whether this model fits the server's memory and, when large, whether the visitor asked for it."""
    config = setup.config
    n_params = total_params(config)
    st.caption(f"{setup.depth} layers × d_model {setup.width} ({config.n_heads} heads): {fmt_params(n_params)} "
               f"parameters, {len(ids)} tokens.")
    need = measuring_bytes(config)
    if not fits_the_server(config, "This model"):
        return False
    if n_params > AUTO_MEASURE_PARAMS and state.get(K.NORMS_CONFIRMED) != key:
        gib = need / 2**30
        st.warning(f"This model has {fmt_params(n_params)} parameters: building it and one backward pass "
                   f"per wiring needs roughly {gib:.1f} GiB and can take minutes on a CPU. A smaller "
                   f"width shows the same effects faster.")
        if not st.button("Measure this model", type="primary", key=K.NORMS_MEASURE):
            return False
        state[K.NORMS_CONFIRMED] = key
    return True


def measure(setup: Setup, ids: tuple[int, ...], key: tuple) -> dict[str, wiring.WiringStats] | None:
    """Both wirings measured (or read from the cache) inside a status box; None after an error."""
    config = setup.config
    started = time.perf_counter()
    with st.status(f"Measuring {config.name} both ways…", expanded=False) as status:
        st.write(f"Drawing one set of weights ({setup.init} init, seed {setup.seed}); then, for each wiring, one "
                 f"forward and one backward pass on {len(ids)} tokens.")
        try:
            stats = measure_both(*key)
        except (ValueError, RuntimeError, MemoryError, ConfigError) as err:
            status.update(label="The measurement failed", state="error")
            st.error(f"Could not measure this model: {err}")
            return None
        took = time.perf_counter() - started
        status.update(label=f"Measured both wirings of {config.name} "
                            f"({'from the cache' if took < 0.05 else f'{took:.1f} s'})", state="complete")
    if not math.isclose(stats["pre"].weights_checksum, stats["post"].weights_checksum, rel_tol=1e-9):
        st.error("The two wirings did not get the same weights; this is a bug, please report it.")
    return stats


def headline_metrics(config: GPTConfig, pre: wiring.WiringStats, post: wiring.WiringStats) -> None:
    m = st.columns(4)
    m[0].metric("Parameters", fmt_params(pre.n_params))
    m[1].metric("LM loss, pre-norm", f"{pre.loss:.3f}", help=f"Uniform guess: ln {config.vocab_size} = "
                f"{math.log(config.vocab_size):.3f} nats")
    m[2].metric("LM loss, post-norm", f"{post.loss:.3f}", delta=f"{post.loss - pre.loss:+.3f} vs pre",
                delta_color="off")
    m[3].metric("Embedding grad, post/pre", f"{post.embed_grad_norm / pre.embed_grad_norm:.3g}×",
                help="L2 norm of the gradient of the token and position embeddings, post-norm over pre-norm.")


def gradient_reading(depth: int, pre_g: np.ndarray, post_g: np.ndarray) -> None:
    """What the per-layer gradients on screen show, and how that compares with the paper's claims."""
    if depth >= 2 and np.all(pre_g > 0) and np.all(post_g > 0):
        reading = wiring.describe_gradients(pre_g, post_g)
        st.markdown("**What this measurement shows**")
        st.markdown("\n".join(f"- {line}" for line in reading.statements))
        st.markdown("**Against Xiong et al. (2020)**")
        st.markdown("\n".join(f"- {VERDICTS[ok]}: {claim}" for claim, ok in reading.paper))
    elif depth >= 2:
        st.info("Some layers have a zero gradient here, so no ratio can be read.")


def gradient_section(depth: int, pre: wiring.WiringStats, post: wiring.WiringStats) -> str:
    """The gradient norm per layer, its reading and the theory. Returns the chosen gradient view."""
    st.subheader("Gradient norm per layer")
    if depth < 2:
        st.info("With one layer there is no trend across layers to read; add layers.")
    g = st.columns([1.5, 1])
    with g[1]:
        view = S.NORMS_GRAD_VIEW.selectbox(st, options=list(GRADIENT_VIEWS), format_func=GRADIENT_VIEWS.get)
        log_y = S.NORMS_LOG.toggle(st)
    pre_g, post_g = pre.grad(view), post.grad(view)
    with g[0]:
        display.show_figure(fig_norms.gradient_norms(pre_g, post_g, "gradient L2 norm", log_y),
                            key=K.NORMS_GRAD_FIG)
    with g[1]:
        gradient_reading(depth, pre_g, post_g)
    with st.expander("The theory, and how this measurement differs from the paper's"):
        st.markdown(THEORY)
    return view


THEORY = (
    "Xiong et al. (2020), *On Layer Normalization in the Transformer Architecture*, prove with "
    "mean-field arguments that **at initialisation** the gradient of the last layer's FFN weights is "
    "of order d·√(ln d) in a post-LN Transformer but d·√(ln d / L) in a pre-LN one: post-norm's "
    "gradients near the output are large compared with pre-norm's, whose scale shrinks like "
    "1/√L with depth. Large gradients at a full learning rate make the first steps unstable, which "
    "is why post-norm needs learning-rate **warmup** and pre-norm can do without. Their Figure 3 "
    "(a translation Transformer, Xavier init) draws post-LN gradient norms rising toward the "
    "output and pre-LN ones level across layers.\n\n"
    "This page measures instead of assuming. Differences from their setting: a decoder-only GPT; "
    "both wirings keep a final LayerNorm (their post-LN has none); one sequence rather than an "
    "expectation over data; and embeddings drawn from normal(0, 0.02) in both init schemes, so the "
    "pre-norm residual stream starts small (see its norm below), and a LayerNorm scales the "
    "gradient it passes back by 1/σ of its input. So the paper's figure need not be reproduced as "
    "drawn: whether each wiring's gradients rise, stay level or shrink with depth depends on the init, "
    "the width and the depth you choose above. The statements beside the chart are computed from the "
    "numbers on screen, so they say what this run shows, whichever way it goes; this box states "
    "nothing about the run.")


def activations_section(config: GPTConfig, stats: dict[str, wiring.WiringStats]) -> None:
    pre, post = stats["pre"], stats["post"]
    st.subheader("Activations through the stack")
    st.caption(f"Pre-norm's residual stream is a running sum; here its norm {wiring.trend(pre.resid_norm).word} "
               f"(from {pre.resid_norm[0]:.3g} to {pre.resid_norm[-1]:.3g}); post-norm's LayerNorm resets it after every "
               f"addition to norm √d_model = {math.sqrt(config.d_model):.3g} (unit variance per entry). Right: the "
               f"spread of what each sub-layer adds. Block 0's attention reads the raw embeddings in post-norm "
               f"(std {post.resid_std[0]:.3g}) but normalised ones in pre-norm: its output's std is "
               f"{post.attn_out_std[0]:.3g} in post-norm against {pre.attn_out_std[0]:.3g} in pre-norm.")
    display.show_figure(fig_norms.activation_scales(
        {n: s.resid_norm for n, s in stats.items()}, {n: s.resid_std for n, s in stats.items()},
        {n: s.attn_out_std for n, s in stats.items()}, {n: s.mlp_out_std for n, s in stats.items()},
        config.d_model), key=K.NORMS_ACT_FIG)


def attention_section(config: GPTConfig, ids: tuple[int, ...], pre: wiring.WiringStats,
                      post: wiring.WiringStats) -> None:
    st.subheader("Attention of the two wirings")
    labels = token_labels(ids)
    depth = config.n_layers
    a = st.columns([1, 1, 3])
    layer, head = layer_and_head(a, S.NORMS_LAYER, S.NORMS_HEAD, depth, config.n_heads)
    pre_pats, post_pats = pre.patterns.astype(np.float32), post.patterns.astype(np.float32)
    tv = wiring.attention_tv_distance(pre_pats, post_pats)
    a[2].caption(f"Layer {layer}, head {head}: the two wirings' attention rows differ by a mean total-variation "
                 f"distance of {tv[layer, head]:.3f} (0 = identical, 1 = disjoint). Across all heads: mean "
                 f"{tv.mean():.3f}, largest {tv.max():.3f}. How spread out the rows are (entropy as a share of "
                 f"a uniform row's, 100% = uniform), over all heads: pre-norm "
                 f"{wiring.relative_entropy(pre_pats).mean():.1%}, post-norm "
                 f"{wiring.relative_entropy(post_pats).mean():.1%}.")
    show_attention_panels(pre_pats[layer, head], post_pats[layer, head], labels, f"Layer {layer}, head {head}",
                          K.NORMS_ATTN_FIG)
    with st.expander("Distance between the wirings' attention, every layer and head", expanded=depth <= 12):
        display.show_figure(fig_norms.attention_distance(tv), key=K.NORMS_TV_FIG)


def show_attention_panels(pre: np.ndarray, post: np.ndarray, labels: list[str], title: str, key: str,
                          panel_names: tuple[str, str, str] = ("pre-norm", "post-norm", "post − pre")) -> None:
    """The two wirings' attention and their difference in three columns (a phone stacks them)."""
    figures = fig_norms.attention_panels(pre, post, labels, title, panel_names)
    for i, (column, fig) in enumerate(zip(st.columns(3), figures)):
        with column:
            display.show_figure(fig, key=K.per_item(key, i))


def run_sweep(setup: Setup, ids: tuple[int, ...], depths: list[int], view: str) -> dict[str, np.ndarray] | None:
    """The last layer's gradient of each wiring at each depth (every depth measured through the cache)."""
    bar = st.progress(0.0, text="Depth sweep")
    sweep = {"depth": np.array(sorted(depths)), "pre": [], "post": []}
    try:
        for j, d in enumerate(sorted(depths)):
            bar.progress(j / len(depths), text=f"{d} layers ({j + 1} of {len(depths)})")
            s = measure_both(setup.config.replace(n_layers=d).to_json(), ids, setup.seed, setup.init)
            sweep["pre"].append(s["pre"].grad(view)[-1])
            sweep["post"].append(s["post"].grad(view)[-1])
    except (ValueError, RuntimeError, MemoryError) as err:
        st.error(f"The sweep failed: {err}")
        return None
    bar.empty()
    return {k: np.asarray(v, float) for k, v in sweep.items()}


def sweep_exponents(init: str, exps: dict[str, float]) -> None:
    st.markdown("**Fitted exponents** (gradient ≈ a·L^b, least squares on log-log)")
    st.markdown(f"- pre-norm: b = {exps['pre']:+.2f} (the paper's bound: −0.50)\n"
                f"- post-norm: b = {exps['post']:+.2f} (the paper's bound: 0, no dependence on L)")
    near = abs(exps["pre"] + 0.5) < 0.15
    st.markdown(f"Pre-norm here {'follows' if near else 'does not follow'} the 1/√L scaling "
                f"(|b + 0.5| = {abs(exps['pre'] + 0.5):.2f}).")
    if init == "gpt2" and not near:
        st.caption("GPT-2's init divides the residual projections by √(2L), a depth-dependent scale the "
                   "paper's Xavier init does not have; switch Init to Xavier to compare.")


def depth_sweep_section(setup: Setup, ids: tuple[int, ...], view: str) -> None:
    config = setup.config
    st.subheader("Depth sweep: the 1/√L claim")
    st.caption(f"The same shape at several depths (width {setup.width}, {setup.init} init, seed {setup.seed}, same "
               f"input): the last layer's gradient for each wiring. Xiong et al.'s bound for pre-norm falls like "
               f"1/√L; for post-norm it does not depend on L.")
    depths = S.NORMS_SWEEP_DEPTHS.multiselect(st, options=SWEEP_DEPTHS,
                                              default=[d for d in SWEEP_DEPTHS if d <= max(setup.depth, 16)])
    sweep_key = (config.to_json(), ids, setup.seed, setup.init, tuple(sorted(depths)))
    if depths and not fits_the_server(config.replace(n_layers=max(depths)), f"The sweep's deepest model ({max(depths)} "
                                                                            "layers)"):
        return  # the sweep builds each depth in turn: the deepest is what it must fit
    if depths:
        deepest = total_params(config.replace(n_layers=max(depths)))
        if deepest > AUTO_MEASURE_PARAMS:
            st.caption(f"The deepest model here has {fmt_params(deepest)} parameters; the sweep will take a while "
                       f"(a smaller width shows the same scaling).")
    if st.button("Run the depth sweep", key=K.NORMS_SWEEP_RUN, disabled=len(depths) < 2):
        state[K.NORMS_SWEEP_KEY] = sweep_key
    if len(depths) < 2 or state.get(K.NORMS_SWEEP_KEY) != sweep_key:
        return
    sweep_view = view if view != "norms" else "ffn"
    sweep = run_sweep(setup, ids, depths, sweep_view)
    if sweep is None:
        return
    exps = {n: wiring.depth_exponent(sweep["depth"], sweep[n]) for n in ("pre", "post")}
    c = st.columns([1.5, 1])
    with c[0]:
        display.show_figure(fig_norms.depth_sweep(sweep, f"{GRADIENT_VIEWS[sweep_view].split(' (')[0].lower()} "
                                                         "gradient norm", exps), key=K.NORMS_SWEEP_FIG)
    with c[1]:
        sweep_exponents(setup.init, exps)


def same_weights_section() -> None:
    st.caption("One set of random weights, drawn once, run both ways (the same state_dict; only "
               "`config.norm` differs). Each wiring gets one forward and one backward pass of the "
               "language-model loss on the input. Nothing is trained.")
    setup = shape_controls()
    if setup is None:
        return
    ids = input_ids(setup)
    if ids is None:
        return
    key = (setup.config.to_json(), ids, setup.seed, setup.init)
    if not may_measure(setup, ids, key):
        return
    stats = measure(setup, ids, key)
    if stats is None:
        return
    pre, post = stats["pre"], stats["post"]
    headline_metrics(setup.config, pre, post)
    view = gradient_section(setup.depth, pre, post)
    activations_section(setup.config, stats)
    attention_section(setup.config, ids, pre, post)
    depth_sweep_section(setup, ids, view)


# ---- section 2: trained twins --------------------------------------------------------------------------------

def pick_twins(bundled: dict) -> wiring.TrainedTwins | None:
    """The bundled pre/post pair to compare (a picker when there are several); None (after a note) when none."""
    pairs = wiring.trained_twins(list(bundled))
    if not pairs:
        st.info("The bundled pre-norm and post-norm models are not here yet (they are being trained and will "
                "appear in gptviz/models/). Meanwhile, train a pair yourself on the Train page.")
        return None
    if len(pairs) == 1:
        return pairs[0]
    stem = S.TWINS_STEM.selectbox(st, options=[p.stem for p in pairs])
    return next(p for p in pairs if p.stem == stem)


def recipe_note(bundled: dict, names: dict[str, str]) -> None:
    """Whether the twins were trained alike; if not, how they differ, before any curve is compared."""
    records = {norm: json.loads((bundled[name] / "config.json").read_text()).get("training", {})
               for norm, name in names.items()}
    differences = recipe_differences(records["pre"], records["post"])
    if not differences:
        st.caption("Two bundled models trained with the same data order and the same initial weights, one pre-norm "
                   "and one post-norm; what they were trained on is in the sidebar and in each model card.")
    else:  # the sentence above would not be true: say how they differ before any curve is compared
        st.warning("These two bundled models, one pre-norm and one post-norm, were not trained alike, so their "
                   "curves and scores compare more than the LayerNorm placement: "
                   + "; ".join(differences[:6]) + ("; ..." if len(differences) > 6 else "")
                   + ". Each model card has its full recipe.")


def training_table(names: dict[str, str], histories: dict[str, dict]) -> dict[str, dict[str, str]]:
    """Each twin's run in one column: steps, final and best losses, the settings that shape the curves."""
    table = {}
    for norm, h in histories.items():
        s = h.get("settings", {})
        vals = val_losses(h)
        table[names[norm]] = {"steps": str(h["history"][-1]["step"]),
                              "final train loss": f"{h['history'][-1]['train_loss']:.3f}",
                              "final validation loss": f"{vals[-1]:.3f}" if vals else "–",
                              "best validation loss": f"{min(vals):.3f}" if vals else "–",
                              "peak learning rate": f"{s['lr']:g}" if "lr" in s else "–",
                              "warmup steps": str(s.get("warmup", "–")),
                              "batch × block": f"{s.get('batch_size', '?')} × "
                                               f"{s.get('block_size') or 'full context'}",
                              "repeated-random windows": f"{s.get('copy_fraction', 0):.1%}"}
    return table


def loss_curve_notes(runs: dict, histories: dict[str, dict]) -> list[str]:
    """What the loss figure's training curve averages over, when that is not what validation measures."""
    notes = []
    switch = fig_train.full_vocab_switch(runs)
    if switch is not None:
        notes.append(f"Before step {switch} (shaded) the training loss was normalised over only the token "
                     f"ids the training text uses, a cheaper softmax, so it reads lower than a loss over all "
                     f"50,257 ids; validation losses are always over all ids.")
    if any(h.get("settings", {}).get("copy_fraction") for h in histories.values()):
        notes.append("The training loss averages over both kinds of window, the plays and the repeated "
                     "random sequences (whose first copy no model can predict), so it is not comparable with "
                     "the validation loss, which is on held-out plays only.")
    return notes


def training_summary(names: dict[str, str], histories: dict[str, dict]) -> None:
    """The table of the two runs, the settings they differ in and which ended lower."""
    st.table(training_table(names, histories))
    differ = wiring.differing_settings({n: h.get("settings", {}) for n, h in histories.items()})
    if differ:
        st.caption("Trained with different " + ", ".join(
            f"{key} ({', '.join(f'{n}-norm {v}' for n, v in by_norm.items())})"
            for key, by_norm in differ.items()) + "; gptviz/models/README.md says why.")
    vals = {n: val_losses(h) for n, h in histories.items()}
    if all(vals.values()):
        better = min(vals, key=lambda n: vals[n][-1])
        st.caption(f"Final validation loss: {better}-norm is lower by "
                   f"{abs(vals['pre'][-1] - vals['post'][-1]):.3f} nats/token.")


def loss_curves_section(twins: wiring.TrainedTwins, names: dict[str, str], histories: dict[str, dict]) -> None:
    st.subheader("Loss curves")
    if not all(h is not None for h in histories.values()):
        st.info("No readable history.json beside these checkpoints, so no loss curves.")
        return
    smooth = S.TWINS_SMOOTH.slider(st)
    try:
        refs = reference_losses(twins.pre)
    except (OSError, ValueError) as err:
        refs = {}
        st.caption(f"Baselines unavailable: {err}")
    runs = {f"{norm}-norm": h["history"] for norm, h in histories.items()}
    c = st.columns([1.6, 1])
    with c[0]:
        display.show_figure(fig_train.loss_curves(runs, smooth, refs), key=K.TWINS_LOSS_FIG)
        notes = loss_curve_notes(runs, histories)
        if notes:
            with st.expander("Reading the training curve"):
                for note in notes:
                    st.caption(note)
    with c[1]:
        training_summary(names, histories)
    with st.expander("Gradient norm and learning rate during training"):
        clip = histories["pre"].get("settings", {}).get("grad_clip")
        display.show_figure(fig_train.training_dynamics(runs, clip), key=K.TWINS_DYN_FIG)


@dataclass
class LoadedTwins:
    """The two trained models as the prompt sections read them."""
    names: dict[str, str]                   # {"pre": model name, "post": model name}
    specs: dict[str, models.ModelSpec]
    cfg: GPTConfig
    ids: tuple[int, ...]
    labels: list[str]


def load_twins(names: dict[str, str]) -> LoadedTwins | None:
    """Both twins loaded and the sidebar prompt fitted to them; None (after a message) when either fails."""
    specs = {norm: models.ModelSpec(K.SOURCE_BUNDLED, name, norm) for norm, name in names.items()}
    try:
        with st.spinner("Loading the twins…"):
            loaded = {norm: models.load_model(spec) for norm, spec in specs.items()}
    except (weights.CheckpointError, ConfigError, ValueError, OSError, RuntimeError) as err:
        st.error(f"Could not load the twins: {err}")
        return None
    cfg = loaded["pre"].config
    prompt = sidebar.prompt_tokens(cfg.n_ctx, vocab_size=cfg.vocab_size)
    if prompt is None:
        return None
    return LoadedTwins(names, specs, cfg, prompt.ids, token_labels(prompt.ids))


PROBE_LENGTH = 50  # the matching probe: this many random training ids (fewer in a short context), then again


def probe_length(cfg: GPTConfig) -> int:
    return min(PROBE_LENGTH, cfg.n_ctx // 2)


def head_matches(tw: LoadedTwins) -> tuple[list, dict, float]:
    """The twins' heads paired by their patterns on one probe both read (analysis.match_heads), each head's
    previous-token and induction scores there ({"pre"/"post": (prev [L, H], induction [L, H])}), and the median
    similarity of every pre-norm head with every post-norm head (what a pair picked blindly scores)."""
    length = probe_length(tw.cfg)
    seq = tuple(analysis.induction_sequence(tw.cfg.vocab_size, length,
                                            ids=models.training_vocab(tw.specs["pre"])).tolist())
    pats = {norm: models.capture_cache(spec, seq, models.pattern_names(tw.cfg.n_layers))[1].patterns()
            for norm, spec in tw.specs.items()}
    scores = {norm: (analysis.previous_token_scores(p), analysis.induction_scores_from(p, length))
              for norm, p in pats.items()}
    typical = float(analysis.pattern_similarity(pats["pre"], pats["post"]).median())
    return analysis.match_heads(pats["pre"], pats["post"]), scores, typical


def matches_table(matches: list, scores: dict, length: int) -> None:
    """Every pre-norm head beside its post-norm match, with the scores that say what each does."""
    prev_chance, ind_chance = analysis.previous_token_chance(2 * length), analysis.induction_chance(length)
    rows = [{"pre-norm head": unit_id.head_id(*m.a), "post-norm match": unit_id.head_id(*m.b),
             "pattern similarity": m.similarity,
             f"previous-token, pre / post (chance {prev_chance:.2f})":
                 f"{float(scores['pre'][0][m.a]):.2f} / {float(scores['post'][0][m.b]):.2f}",
             f"induction, pre / post (chance {ind_chance:.2f})":
                 f"{float(scores['pre'][1][m.a]):.2f} / {float(scores['post'][1][m.b]):.2f}"} for m in matches]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
        "pattern similarity": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")})
    st.caption(f"Each head's attention on {length} random tokens repeated once, compared by cosine similarity "
               "(1: the same pattern), and paired one to one, most similar first. The scores say what each pair "
               "does; the pairs, not the indices, are what to compare between the twins. A pair with a low "
               "similarity is a head left over when one twin grew more heads of a kind than the other.")
    left, right = st.columns(2)
    with left:
        unit_pills("What a pre-norm head does over the corpus", [unit_id.head_id(*m.a) for m in matches],
                   K.per_item(K.UNIT_PILLS, "norms_pre"), norm="pre")
    with right:
        unit_pills("What a post-norm head does over the corpus", [unit_id.head_id(*m.b) for m in matches],
                   K.per_item(K.UNIT_PILLS, "norms_post"), norm="post")


def twins_attention(tw: LoadedTwins) -> dict | None:
    """A head of the pre-norm twin beside its post-norm match. Returns each twin's (logits, cache) on the prompt;
    None after an error."""
    cfg = tw.cfg
    st.subheader("Attention on the prompt, heads matched by role")
    a = st.columns([1, 1, 3])
    layer, head = layer_and_head(a, S.TWINS_LAYER, S.TWINS_HEAD, cfg.n_layers, cfg.n_heads)
    names_wanted = models.pattern_names(cfg.n_layers)
    try:
        caps = {norm: models.capture_cache(spec, tw.ids, names_wanted) for norm, spec in tw.specs.items()}
        matches, scores, _ = head_matches(tw)
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not run the twins on this prompt: {err}")
        return None
    match = next(m for m in matches if m.a == (layer, head))
    pats = {"pre": caps["pre"][1].pattern(layer)[head].numpy(), "post": caps["post"][1].pattern(match.b[0])[match.b[1]].numpy()}
    where = "the same place" if match.b == (layer, head) else "another place"
    a[2].caption(f"Trained separately, the twins grow their heads where training takes them, so the pre-norm twin's "
                 f"layer {layer}, head {head} is shown beside the post-norm head that attends most like it: layer "
                 f"{match.b[0]}, head {match.b[1]}, {where} (pattern similarity {match.similarity:.2f}).")
    show_attention_panels(pats["pre"], pats["post"], tw.labels, "", K.TWINS_ATTN_FIG,
                          (f"pre-norm {unit_id.head_id(layer, head)}", f"post-norm match {unit_id.head_id(*match.b)}", "post − pre"))
    with st.expander("Every head and its match"):
        matches_table(matches, scores, probe_length(cfg))
    return caps


def next_token_section(tw: LoadedTwins, caps: dict) -> None:
    ids, labels = tw.ids, tw.labels
    st.subheader("Next-token distributions")
    if state.get(K.TWINS_POS_IDS) != ids:  # a new prompt: start at its last token
        state[K.TWINS_POS_IDS] = ids
        state[K.TWINS_POS] = len(ids) - 1
    pos = S.TWINS_POS.select_slider(st, options=list(range(len(ids))), format_func=lambda i: f"{i}: {labels[i]}")
    dists, entropy = {}, {}
    for norm in tw.specs:
        probs = torch.softmax(caps[norm][0][pos].float(), -1)
        top = probs.topk(10)
        dists[f"{norm}-norm"] = [(label, float(p)) for label, p in
                                 zip(token_labels(top.indices.tolist()), top.values)]
        entropy[norm] = float(-(probs * probs.clamp_min(1e-30).log()).sum())
    display.show_figure(fig_train.next_token_bars(dists, f"position {pos}"), key=K.TWINS_NEXT_FIG)
    truth = f" The prompt's actual next token is {labels[pos + 1]!r}." if pos + 1 < len(ids) else ""
    st.caption(f"Entropy of the full distribution: pre-norm {entropy['pre']:.2f} nats, post-norm "
               f"{entropy['post']:.2f} nats.{truth}")


def twins_generation(tw: LoadedTwins) -> None:
    ids = tw.ids
    st.subheader("Generation with the same seed")
    g = st.columns(4)
    new_tokens = S.TWINS_GEN_TOKENS.slider(g[0])
    temperature = S.TWINS_GEN_TEMP.slider(g[1])
    top_k = S.TWINS_GEN_TOPK.number_input(g[2])
    seed = int(S.TWINS_GEN_SEED.number_input(g[3]))
    try:
        check_sampling(temperature, int(top_k) or None, None, new_tokens)
        outs = {norm: generate_cached(spec, ids, new_tokens, float(temperature), int(top_k) or None, seed)
                for norm, spec in tw.specs.items()}
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not generate: {err}")
        return
    c = st.columns(2)
    for col, norm in zip(c, tw.specs):
        col.markdown(f"**{tw.names[norm]}**")
        col.code(decode(outs[norm][len(ids):]), language=None, wrap_lines=True)
    st.caption("Same seed, same sampling settings: the random numbers drawn are the same, so the texts differ "
               "only through the two models' probabilities. The prompt is not repeated above.")


def trained_twins_section(bundled: dict, twins: wiring.TrainedTwins, tw: LoadedTwins | None) -> None:
    """The twins in depth: every head and its match, the next token at any position, the training history and
    generation (the first tab already loaded them: `tw`, None when that failed)."""
    names = {"pre": twins.pre, "post": twins.post}
    recipe_note(bundled, names)
    caps = twins_attention(tw) if tw is not None else None
    if caps is not None:
        next_token_section(tw, caps)
    histories = {norm: wiring.load_history(bundled[name]) for norm, name in names.items()}
    loss_curves_section(twins, names, histories)
    whole_history_section(bundled, names)
    if caps is not None:
        twins_generation(tw)


# ---- the first tab: the trained twins side by side ----------------------------------------------------------------

SIDE_TOP_K = 5


def twins_caveat(bundled: dict, names: dict[str, str]) -> str | None:
    """evaluate.twins_caveat on the two bundled models' training records (their config.json)."""
    records = {norm: json.loads((bundled[name] / "config.json").read_text()).get("training", {})
               for norm, name in names.items()}
    return caveat_of_records(records["pre"], records["post"])


def top_tokens(logits: torch.Tensor) -> tuple[torch.Tensor, list[tuple[str, float]]]:
    """The next-token probabilities after the last position (softmax of its logits) and the SIDE_TOP_K likeliest."""
    probs = torch.softmax(logits[-1].float(), -1)
    top = probs.topk(SIDE_TOP_K)
    return probs, list(zip(token_labels(top.indices.tolist()), top.values.tolist()))


def quoted(label: str) -> str:
    return f"“{display.md_text(label)}”"


def comparison_sentence(match, typical: float, top: dict[str, list[tuple[str, float]]]) -> str:
    """The one sentence of the first screen, every word of it read off the numbers beside it."""
    (pre_tok, pre_p), (post_tok, post_p) = top["pre"][0], top["post"][0]
    guess = (f"Both twins guess {quoted(pre_tok)} next" if pre_tok == post_tok else
             f"The twins guess differently next (pre-norm {quoted(pre_tok)}, post-norm {quoted(post_tok)})")
    surer = "pre" if pre_p >= post_p else "post"
    alike = "far more alike than" if match.similarity >= 2 * typical else "more alike than" \
        if match.similarity > typical else "no more alike than"
    return (f"{guess}; the {surer}-norm twin is surer ({max(pre_p, post_p):.0%} against {min(pre_p, post_p):.0%}), "
            f"and the matched heads below attend {alike} a blind pair (similarity {match.similarity:.2f} against "
            f"{typical:.2f}).")


def pick_pair_index(matches: list) -> int:
    """The matched pair shown, as an index into `matches` (kept in state); at first the most similar pair. Read
    before the picker is drawn, as the sentence above it names the pair."""
    if not isinstance(state.get(K.TWINS_PAIR), int) or not 0 <= state[K.TWINS_PAIR] < len(matches):
        state[K.TWINS_PAIR] = max(range(len(matches)), key=lambda i: matches[i].similarity)
    return state[K.TWINS_PAIR]


def pick_pair(matches: list) -> int:
    """The picker of the matched pair (its value: pick_pair_index)."""
    return S.TWINS_PAIR.selectbox(
        st, options=range(len(matches)),
        format_func=lambda i: (f"pre {unit_id.head_id(*matches[i].a)} ↔ post {unit_id.head_id(*matches[i].b)}"
                               f" (similarity {matches[i].similarity:.2f})"))


def side_by_side_section(bundled: dict, twins: wiring.TrainedTwins) -> LoadedTwins | None:
    """The first screen: the sidebar's prompt through both twins, a matched pair of heads side by side, each twin's
    next-token probabilities and the two wirings. Returns the loaded twins for the later tab."""
    names = {"pre": twins.pre, "post": twins.post}
    tw = load_twins(names)
    if tw is None:
        return None
    try:
        caps = {norm: models.capture_cache(spec, tw.ids, models.pattern_names(tw.cfg.n_layers))
                for norm, spec in tw.specs.items()}
        matches, _, typical = head_matches(tw)
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not run the twins on this prompt: {err}")
        return None
    probs, top = {}, {}
    for norm in tw.specs:
        probs[norm], top[norm] = top_tokens(caps[norm][0])
    text, bars = st.columns([1.2, 1])
    with text:
        st.markdown(comparison_sentence(match := matches[pick_pair_index(matches)], typical, top))
        caveat = twins_caveat(bundled, names)
        if caveat:
            st.caption(f":material/warning: {caveat}", help="Retraining them alike is planned; each model card "
                                                            "(gptviz/models/) has its full recipe.")
        pick_pair(matches)
    with bars:
        dists = {f"{norm}-norm": top[norm] for norm in tw.specs}
        bars_fig = fig_train.next_token_bars(dists, f"“{tw.labels[-1]}”")
        bars_fig.update_traces(textposition="auto")  # the longest bar's label inside it, not over the next panel
        display.show_figure(bars_fig, key=K.TWINS_SIDE_NEXT)
        st.caption(f"Top {SIDE_TOP_K} of {tw.cfg.vocab_size:,} tokens; a uniform guess gives each "
                   f"{1 / tw.cfg.vocab_size:.3%}.")
    pats = {"pre": caps["pre"][1].pattern(match.a[0])[match.a[1]].numpy(),
            "post": caps["post"][1].pattern(match.b[0])[match.b[1]].numpy()}
    figures = fig_norms.attention_panels(
        pats["pre"], pats["post"], tw.labels, "",
        (f"pre-norm {unit_id.head_id(*match.a)}<br>the picked head",  # two short lines: a phone's half width
         f"post-norm {unit_id.head_id(*match.b)}<br>similarity {match.similarity:.2f}", ""), height=320)[:2]
    figures[0].update_traces(showscale=False)   # one colour bar for the pair: both maps share the 0..1 scale
    figures[1].update_traces(colorbar_title_text="")   # its title ran past a phone's half width; hover names it
    maps, wirings = st.columns([2.1, 1])
    with maps, st.container(horizontal=True, wrap=False, key=K.TWINS_SIDE_PAIR):  # a pair on a phone too
        for i, fig in enumerate(figures):
            with st.container():
                display.show_figure(fig, key=K.per_item(K.TWINS_SIDE_MAPS, i))
    with wirings, st.container(horizontal=True, wrap=False, key=K.TWINS_SIDE_WIRINGS):
        for norm in ("pre", "post"):
            with st.container():
                display.show_figure(explainer_figs.block_diagram(norm, compact=True),
                                    key=K.per_item(K.TWINS_SIDE_WIRING, norm))
    return tw


# ---- section 3: the paper's setting, and the twins' whole history ----------------------------------------------

PAPER_BASE = "small-4l"    # the vocabulary, activation and MLP ratio of the bundled twins; shape from xiong.PAPER
FORMED_DETECTORS = ("previous-token", "induction")   # the heads whose forming the history marks
PAPER_NOTE = (
    "Xiong et al. (2020) measured a translation Transformer (d_model 512, 6 layers, Xavier init) and plotted each "
    "layer's FFN gradient norm averaged over data. Here: a decoder-only GPT, {depth} layers, d_model {width} (their 512 "
    "makes each pass several seconds on a 2-core CPU), {heads} heads, {samples} of Tiny Shakespeare. Both wirings keep "
    "a final LayerNorm (their post-LN has none). The band is ± one standard deviation over the samples. Each verdict "
    "is computed from the means with the rule shown; nothing here is written in advance.")


@st.cache_data(max_entries=6, show_spinner=False)
def paper_gradients(setting: xiong.ProbeSetting) -> xiong.FFNGradients:
    from gptviz.training_jobs import corpus_tokens
    return xiong.measure_ffn_gradients(setting, PRESETS[PAPER_BASE], corpus_tokens())


@st.cache_data(max_entries=4, show_spinner=False)
def paper_scaling(setting: xiong.ProbeSetting, depths: tuple[int, ...], matrix: str) -> xiong.DepthScaling:
    from gptviz.training_jobs import corpus_tokens
    return xiong.depth_scaling(setting, PRESETS[PAPER_BASE], corpus_tokens(), depths, matrix)


@st.cache_data(max_entries=2, show_spinner=False)
def twins_gradients(pre: str, post: str, setting: xiong.ProbeSetting) -> xiong.FFNGradients:
    from gptviz.training_jobs import corpus_tokens
    loaded = {n: models.load_model(models.ModelSpec(K.SOURCE_BUNDLED, name, n)) for n, name in
              (("pre", pre), ("post", post))}
    return xiong.trained_ffn_gradients(loaded, corpus_tokens(), setting)


def paper_measurements(input_scale: str, matrix: str) -> dict | None:
    """{setting title: FFNGradients} and the Xavier depth scaling at xiong.PAPER's shape, measured (or cached) in a
    status box."""
    out = {}
    xavier, gpt2 = (replace(xiong.PAPER, init=init, input_scale=input_scale) for init in ("xavier", "gpt2"))
    started = time.perf_counter()
    with st.status("Measuring the FFN gradients at initialisation…", expanded=False) as status:
        try:
            out["Xavier init (the paper)"] = paper_gradients(xavier)
            st.write("Xavier done; the depth scaling next.")
            scaling = paper_scaling(xavier, tuple(xiong.PAPER_DEPTHS), matrix)
            out["GPT-2 init"] = paper_gradients(gpt2)
            pairs = wiring.trained_twins(list(weights.bundled_models()))
            if pairs:
                out[f"trained twins ({pairs[0].stem})"] = twins_gradients(pairs[0].pre, pairs[0].post, xiong.PAPER)
        except (ValueError, RuntimeError, MemoryError, OSError) as err:
            status.update(label="The measurement failed", state="error")
            st.error(f"Could not measure: {err}")
            return None
        took = time.perf_counter() - started
        status.update(label=f"Measured: {', '.join(out)} ({'from the cache' if took < 1 else f'{took:.0f} s'})",
                      state="complete")
    return {"grads": out, "scaling": scaling}


def claim_lines(results: dict, matrix: str) -> list[str]:
    """The checklist: each claim reproduced at the paper's setting, or not, with what else was tried."""
    grads = results["grads"]
    title = next(iter(grads))
    verdicts = {name: {c.key: c for c in xiong.check_claims(g, matrix, results["scaling"] if name == title else None)}
                for name, g in grads.items()}
    lines = []
    for claim in verdicts[title].values():
        if claim.reproduced:
            lines.append(f"- :green[:material/check_circle: reproduced]: {claim.text}. Measured: {claim.measured}.")
            continue
        tried = "; ".join(f"{name}: {v[claim.key].measured}" for name, v in verdicts.items()
                          if name != title and claim.key in v)
        lines.append(f"- :red[:material/cancel: not reproduced]: {claim.text}. Measured: {claim.measured}."
                     + (f" Also tried: {tried}." if tried else ""))
    rules = {c.threshold for v in verdicts.values() for c in v.values()}
    return lines + [f"\nRules: {'; '.join(sorted(rules))}."]


def ffn_profile_columns(grads: dict[str, xiong.FFNGradients], matrix: str) -> None:
    """One figure per setting, side by side (a phone stacks them; three panels in one figure would not fit)."""
    for i, (column, (name, g)) in enumerate(zip(st.columns(len(grads)), grads.items())):
        with column:
            display.show_figure(fig_norms.ffn_profiles({name: {n: (g.mean(n, matrix), g.sd(n, matrix))
                                                               for n in ("pre", "post")}}, f"‖∂loss/∂{matrix}‖"),
                                key=K.per_item(K.NORMS_PAPER_FIG, i))


def paper_section() -> None:
    st.caption("Xiong et al.'s claims, checked at their own setting: Xavier init, at initialisation, averaged over "
               "seeds and batches of real text; then GPT-2's init and the trained twins beside it.")
    c = st.columns([1, 2, 2])
    matrix = S.NORMS_PAPER_MATRIX.radio(c[0], options=list(xiong.MATRICES), horizontal=True, index=1)
    scale = S.NORMS_PAPER_SCALE.selectbox(c[1], options=list(xiong.INPUT_SCALES), format_func=xiong.INPUT_SCALES.get)
    deepest = xiong.PAPER.config(PRESETS[PAPER_BASE], max(xiong.PAPER_DEPTHS))
    if not fits_the_server(deepest, f"The depth scaling's deepest model ({max(xiong.PAPER_DEPTHS)} layers)"):
        return
    if c[2].button("Measure", key=K.NORMS_PAPER_RUN, type="primary",
                   help="Three settings and a depth scaling, each over several seeds and batches; the time it took "
                        "is shown when it is done."):
        state[K.NORMS_PAPER_ON] = True
    if not state.get(K.NORMS_PAPER_ON):
        return
    results = paper_measurements(scale, matrix)
    if results is None:
        return
    grads = results["grads"]
    st.markdown(f"**FFN {matrix} gradient norm per layer at initialisation, mean ± sd**")
    ffn_profile_columns(grads, matrix)
    st.markdown("**Against Xiong et al. (2020)**")
    st.markdown("\n".join(claim_lines(results, matrix)))
    sc = results["scaling"]
    st.markdown(f"**The last layer's {matrix} gradient against depth (Xavier init)**")
    display.show_figure(fig_norms.depth_bands(sc.depths, sc.mean, sc.sd, {n: sc.exponent(n) for n in ("pre", "post")},
                                              f"last layer ‖∂loss/∂{matrix}‖"), key=K.NORMS_PAPER_DEPTH_FIG)
    with st.expander("The setting, and how it differs from the paper's"):
        first = next(iter(grads.values()))
        st.markdown(PAPER_NOTE.format(depth=xiong.PAPER.depth, width=xiong.PAPER.width, heads=xiong.PAPER.n_heads, samples=first.samples))


@lru_cache(maxsize=4)
def formed_at(folder: Path) -> dict[str, int | None]:
    """The step each kind of head formed in a bundled model (snapshots.formed_step over its stage-1 snapshots, the
    rule Heads forming uses); all None when it has no snapshots."""
    try:
        snaps = load_snapshots(folder)
    except (OSError, ValueError, KeyError):
        return dict.fromkeys(FORMED_DETECTORS)
    return {what: (found[0] if (found := formed_step(snaps, what)) else None) for what in FORMED_DETECTORS}


def whole_history_section(bundled: dict, names: dict[str, str]) -> None:
    """Both twins' logged losses over every training stage, the stage boundaries, and where their heads formed."""
    logs = {norm: training_log.read_train_log(bundled[name]) for norm, name in names.items()}
    if not all(logs.values()):
        return
    st.subheader("The whole training history")
    formed = {f"{norm}-norm": formed_at(bundled[names[norm]]) for norm in logs}
    boundaries = [(s.start, f"stage {s.number}") for s in logs["pre"]]
    st.caption(f"Every stage of both runs from their train.log (the curves above are the last stage only). The "
               f"triangles mark the step each twin's head formed: the first snapshot from which its score stays at or "
               f"above {FORMED_THRESHOLD:g}, the rule Heads forming uses. Steps count from stage 1's start.")
    display.show_figure(fig_norms.stage_history(
        {f"{n}-norm": [r for s in stages for r in s.records] for n, stages in logs.items()}, boundaries, formed),
        key=K.TWINS_HISTORY_FIG)
    rows = {f"{n} head formed": {run: (f"step {step:,}" if step is not None else "not in stage 1's snapshots")
                                 for run, step in ((r, formed[r][n]) for r in formed)}
            for n in FORMED_DETECTORS}
    st.table(rows)
    with st.expander("What the stages were and how the scores are logged"):
        for norm, stages in logs.items():
            st.markdown(f"**{names[norm]}**: " + "; ".join(f"stage {s.number} (steps {s.start + 1:,}–{s.end:,}): "
                                                           f"{s.title}" for s in stages))
        st.caption("A head's forming is read from the snapshots of stage 1 (Heads forming replays them): the best "
                   "head's score on the snapshot probes, every 25 steps or closer, so a head formed between the marked "
                   "snapshot and the one before it. train.log's prev and ind columns are other probes, logged only at "
                   "evaluation steps, and are not used for it.")

def main() -> None:
    st.title("Pre-norm vs post-norm")
    st.caption(TOP_LINE, help=INTRO)
    tab_side, tab_same, tab_paper, tab_depth = st.tabs(list(TABS))
    bundled = weights.bundled_models()
    with tab_side:   # what toggling the wiring changes comes first: the twins on the prompt, heads matched by role
        twins = pick_twins(bundled)
        tw = side_by_side_section(bundled, twins) if twins is not None else None
    with tab_same:
        same_weights_section()
    with tab_paper:
        paper_section()
    with tab_depth:
        if twins is not None:
            trained_twins_section(bundled, twins, tw)
        else:
            st.info("The bundled twins are not here yet; see the first tab.")


main()
