"""The Pre-norm vs post-norm page's "Same weights, two wirings" tab, drawn: one set of random weights measured both
ways (gptviz.app.services.norms.measure_both), its gradients, activations and attention, and a depth sweep. Layout
only: the numbers come from the service."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import streamlit as st

from ... import PRESETS, GPTConfig
from ...figures import norms as fig_norms
from ...figures import norms_attention as fig_norms_attention
from ...figures import norms_depth as fig_norms_depth
from ...methods import wiring
from ...model import sizes
from ...model.config import ConfigError
from ...model.params import total_params
from ...model.tokenizer import token_labels
from .. import display, reproduce, sidebar
from .. import keys as K
from .. import settings as S
from ..services import norms as services

state = st.session_state

AUTO_MEASURE_PARAMS = 60_000_000  # above this, measuring waits for a button press
RANDOM_TOKENS = 64
MAX_TOKENS = 128  # of the prompt, measured (attention maps grow with tokens²)
GRADIENT_VIEWS = {
    "ffn": "FFN weight matrices (what Xiong et al. plot)",
    "block": "Whole block (every parameter)",
    "attention": "Attention parameters",
    "MLP": "MLP parameters",
    "norms": "LayerNorm gains and biases",
}
SWEEP_DEPTHS = (1, 2, 4, 8, 16, 24, 32, 48)
INITS = {"gpt2": "GPT-2 (normal 0.02)", "xavier": "Xavier (Xiong et al.)"}
VERDICTS = {True: ":green[:material/check_circle: agrees]", False: ":red[:material/cancel: not seen here]"}


def clamp(key: str, highest: int) -> None:
    """Keep a stored layer/head choice within range when the model changes (before its widget is drawn)."""
    if key in state and not 0 <= int(state[key]) <= highest:
        state[key] = max(0, min(int(state[key]), highest))


def layer_and_head(cols, layer_pick: S.Setting, head_pick: S.Setting, n_layers: int, n_heads: int) -> tuple[int, int]:
    """The layer and head pickers of an attention comparison, kept within this model's range."""
    clamp(layer_pick.key, n_layers - 1)
    clamp(head_pick.key, n_heads - 1)
    layer = int(layer_pick.number_input(cols[0], min_value=0, max_value=n_layers - 1, step=1))
    head = int(head_pick.number_input(cols[1], min_value=0, max_value=n_heads - 1, step=1))
    return layer, head


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
    widths = services.width_choices(base)
    if state.get(K.NORMS_WIDTH) not in widths:
        state[K.NORMS_WIDTH] = max([w for w in widths if w <= 256] or [min(widths)])
    width = S.NORMS_WIDTH.selectbox(
        cols[2], options=widths, help=f"Keeps the preset's {base.n_heads} heads. Narrower is faster."
    )
    init = S.NORMS_INIT.selectbox(cols[3], options=list(wiring.INITS), format_func=INITS.get)
    seed = int(S.NORMS_SEED.number_input(cols[4]))
    source = S.NORMS_INPUT.radio(
        cols[5], horizontal=True, format_func={"prompt": "prompt", "random": f"{RANDOM_TOKENS} random tokens"}.get
    )
    config = build_config(preset, depth, width)
    return None if config is None else Setup(preset, depth, width, init, seed, source, config)


def build_config(preset: str, depth: int, width: int) -> GPTConfig | None:
    """The chosen shape as a config with GPT-2's vocabulary at least; None (after an error) when invalid."""
    base = PRESETS[preset]
    try:
        config = base.replace(n_layers=depth, d_model=width, name=f"{preset}-{depth}L-d{width}")
        if config.vocab_size < services.GPT2_VOCAB:
            config = config.replace(vocab_size=services.GPT2_VOCAB)
            st.caption(
                f"{preset}'s {base.vocab_size:,}-token vocabulary is replaced by GPT-2's "
                f"{services.GPT2_VOCAB:,} so the GPT-2 tokenizer's ids fit."
            )
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
        ids = services.random_ids(min(RANDOM_TOKENS, config.n_ctx), config.vocab_size, setup.seed)
    if len(ids) < 2:
        st.info("The language-model loss needs at least two tokens: lengthen the prompt in the sidebar.")
        return None
    return ids


def fits_the_server(config: GPTConfig, what: str) -> bool:
    """Whether measuring `config` fits the server's memory; a clear refusal when it does not."""
    refusal = services.measuring_refusal(config, what)
    if refusal is not None:
        st.error(refusal)
    return refusal is None


def may_measure(setup: Setup, ids: tuple[int, ...], key: tuple) -> bool:
    """Whether this model fits the server's memory and, when large, whether the visitor asked for it."""
    config = setup.config
    n_params = total_params(config)
    st.caption(
        f"{setup.depth} layers × d_model {setup.width} ({config.n_heads} heads): {services.fmt_params(n_params)} "
        f"parameters, {len(ids)} tokens."
    )
    need = sizes.norms_model_nbytes(config)
    if not fits_the_server(config, "This model"):
        return False
    if n_params > AUTO_MEASURE_PARAMS and state.get(K.NORMS_CONFIRMED) != key:
        gib = need / 2**30
        st.warning(
            f"This model has {services.fmt_params(n_params)} parameters: building it and one backward pass "
            f"per wiring needs roughly {gib:.1f} GiB and can take minutes on a CPU. A smaller "
            f"width shows the same effects faster."
        )
        if not st.button("Measure this model", type="primary", key=K.NORMS_MEASURE):
            return False
        state[K.NORMS_CONFIRMED] = key
    return True


def measurement_failed(status, message: str) -> None:
    """A measurement raised: its status box turns red and says so, and `message` says why under it."""
    status.update(label="The measurement failed", state="error")
    st.error(message)


def measure(setup: Setup, ids: tuple[int, ...], key: tuple) -> dict[str, wiring.WiringStats] | None:
    """Both wirings measured (or read from the cache) inside a status box; None after an error."""
    config = setup.config
    started = time.perf_counter()
    with st.status(f"Measuring {config.name} both ways…", expanded=False) as status:
        st.write(
            f"Drawing one set of weights ({setup.init} init, seed {setup.seed}); then, for each wiring, one "
            f"forward and one backward pass on {len(ids)} tokens."
        )
        try:
            stats = services.measure_both(*key)
        except (ValueError, RuntimeError, MemoryError, ConfigError) as err:
            measurement_failed(status, f"Could not measure this model: {err}")
            return None
        took = time.perf_counter() - started
        status.update(
            label=f"Measured both wirings of {config.name} ({'from the cache' if took < 0.05 else f'{took:.1f} s'})",
            state="complete",
        )
    if not math.isclose(stats["pre"].weights_checksum, stats["post"].weights_checksum, rel_tol=1e-9):
        st.error("The two wirings did not get the same weights; this is a bug, please report it.")
    return stats


def headline_metrics(config: GPTConfig, pre: wiring.WiringStats, post: wiring.WiringStats) -> None:
    m = st.columns(4)
    m[0].metric("Parameters", services.fmt_params(pre.n_params))
    m[1].metric(
        "LM loss, pre-norm",
        f"{pre.loss:.3f}",
        help=f"Uniform guess: ln {config.vocab_size} = {math.log(config.vocab_size):.3f} nats",
    )
    m[2].metric(
        "LM loss, post-norm", f"{post.loss:.3f}", delta=f"{post.loss - pre.loss:+.3f} vs pre", delta_color="off"
    )
    m[3].metric(
        "Embedding grad, post/pre",
        f"{post.embed_grad_norm / pre.embed_grad_norm:.3g}×",
        help="L2 norm of the gradient of the token and position embeddings, post-norm over pre-norm.",
    )


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
        display.show_figure(fig_norms.gradient_norms(pre_g, post_g, "gradient L2 norm", log_y), key=K.NORMS_GRAD_FIG)
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
    "nothing about the run."
)


def activations_section(config: GPTConfig, stats: dict[str, wiring.WiringStats]) -> None:
    pre, post = stats["pre"], stats["post"]
    st.subheader("Activations through the stack")
    st.caption(
        f"Pre-norm's residual stream is a running sum; here its norm {wiring.trend(pre.resid_norm).word} "
        f"(from {pre.resid_norm[0]:.3g} to {pre.resid_norm[-1]:.3g}); post-norm's LayerNorm resets it after every "
        f"addition to norm √d_model = {math.sqrt(config.d_model):.3g} (unit variance per entry). Right: the "
        f"spread of what each sub-layer adds. Block 0's attention reads the raw embeddings in post-norm "
        f"(std {post.resid_std[0]:.3g}) but normalised ones in pre-norm: its output's std is "
        f"{post.attn_out_std[0]:.3g} in post-norm against {pre.attn_out_std[0]:.3g} in pre-norm."
    )
    display.show_figure(
        fig_norms.activation_scales(
            {n: s.resid_norm for n, s in stats.items()},
            {n: s.resid_std for n, s in stats.items()},
            {n: s.attn_out_std for n, s in stats.items()},
            {n: s.mlp_out_std for n, s in stats.items()},
            config.d_model,
        ),
        key=K.NORMS_ACT_FIG,
    )


def attention_section(
    config: GPTConfig, ids: tuple[int, ...], pre: wiring.WiringStats, post: wiring.WiringStats
) -> None:
    st.subheader("Attention of the two wirings")
    labels = token_labels(ids)
    depth = config.n_layers
    a = st.columns([1, 1, 3])
    layer, head = layer_and_head(a, S.NORMS_LAYER, S.NORMS_HEAD, depth, config.n_heads)
    pre_pats, post_pats = pre.patterns.astype(np.float32), post.patterns.astype(np.float32)
    tv, pre_entropy, post_entropy = services.attention_difference(pre_pats, post_pats)
    a[2].caption(
        f"Layer {layer}, head {head}: the two wirings' attention rows differ by a mean total-variation "
        f"distance of {tv[layer, head]:.3f} (0 = identical, 1 = disjoint). Across all heads: mean "
        f"{tv.mean():.3f}, largest {tv.max():.3f}. How spread out the rows are (entropy as a share of "
        f"a uniform row's, 100% = uniform), over all heads: pre-norm "
        f"{pre_entropy:.1%}, post-norm {post_entropy:.1%}."
    )
    show_attention_panels(
        pre_pats[layer, head], post_pats[layer, head], labels, f"Layer {layer}, head {head}", K.NORMS_ATTN_FIG
    )
    with st.expander("Distance between the wirings' attention, every layer and head", expanded=depth <= 12):
        display.show_figure(fig_norms_attention.attention_distance(tv), key=K.NORMS_TV_FIG)


def show_attention_panels(
    pre: np.ndarray,
    post: np.ndarray,
    labels: list[str],
    title: str,
    key: str,
    panel_names: tuple[str, str, str] = ("pre-norm", "post-norm", "post − pre"),
    post_labels: list[str] | None = None,
) -> None:
    """The two wirings' attention and their difference in three columns (a phone stacks them); two, each over its
    own tokens, where the post-norm model read other tokens (`post_labels`)."""
    figures = fig_norms_attention.attention_panels(pre, post, labels, title, panel_names, post_labels=post_labels)
    for i, (column, fig) in enumerate(zip(st.columns(len(figures)), figures, strict=True)):
        with column:
            display.show_figure(fig, key=K.per_item(key, i))


def run_sweep(setup: Setup, ids: tuple[int, ...], depths: list[int], view: str) -> dict[str, np.ndarray] | None:
    """The last layer's gradient of each wiring at each depth (every depth measured through the cache)."""
    bar = st.progress(0.0, text="Depth sweep")
    sweep = {"depth": np.array(sorted(depths)), "pre": [], "post": []}
    try:
        for j, d in enumerate(sorted(depths)):
            bar.progress(j / len(depths), text=f"{d} layers ({j + 1} of {len(depths)})")
            s = services.measure_both(setup.config.replace(n_layers=d).to_json(), ids, setup.seed, setup.init)
            sweep["pre"].append(s["pre"].grad(view)[-1])
            sweep["post"].append(s["post"].grad(view)[-1])
    except (ValueError, RuntimeError, MemoryError) as err:
        st.error(f"The sweep failed: {err}")
        return None
    bar.empty()
    return {k: np.asarray(v, float) for k, v in sweep.items()}


def sweep_exponents(init: str, exps: dict[str, float]) -> None:
    st.markdown("**Fitted exponents** (gradient ≈ a·L^b, least squares on log-log)")
    st.markdown(
        f"- pre-norm: b = {exps['pre']:+.2f} (the paper's bound: −0.50)\n"
        f"- post-norm: b = {exps['post']:+.2f} (the paper's bound: 0, no dependence on L)"
    )
    near = abs(exps["pre"] + 0.5) < 0.15
    st.markdown(
        f"Pre-norm here {'follows' if near else 'does not follow'} the 1/√L scaling "
        f"(|b + 0.5| = {abs(exps['pre'] + 0.5):.2f})."
    )
    if init == "gpt2" and not near:
        st.caption(
            "GPT-2's init divides the residual projections by √(2L), a depth-dependent scale the "
            "paper's Xavier init does not have; switch Init to Xavier to compare."
        )


def depth_sweep_section(setup: Setup, ids: tuple[int, ...], view: str) -> None:
    config = setup.config
    st.subheader("Depth sweep: the 1/√L claim")
    st.caption(
        f"The same shape at several depths (width {setup.width}, {setup.init} init, seed {setup.seed}, same "
        f"input): the last layer's gradient for each wiring. Xiong et al.'s bound for pre-norm falls like "
        f"1/√L; for post-norm it does not depend on L."
    )
    depths = S.NORMS_SWEEP_DEPTHS.multiselect(
        st, options=SWEEP_DEPTHS, default=[d for d in SWEEP_DEPTHS if d <= max(setup.depth, 16)]
    )
    sweep_key = (config.to_json(), ids, setup.seed, setup.init, tuple(sorted(depths)))
    if depths and not fits_the_server(
        config.replace(n_layers=max(depths)), f"The sweep's deepest model ({max(depths)} layers)"
    ):
        return  # the sweep builds each depth in turn: the deepest is what it must fit
    if depths:
        deepest = total_params(config.replace(n_layers=max(depths)))
        if deepest > AUTO_MEASURE_PARAMS:
            st.caption(
                f"The deepest model here has {services.fmt_params(deepest)} parameters; the sweep will take a while "
                f"(a smaller width shows the same scaling)."
            )
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
        display.show_figure(
            fig_norms_depth.depth_sweep(
                sweep, f"{GRADIENT_VIEWS[sweep_view].split(' (')[0].lower()} gradient norm", exps
            ),
            key=K.NORMS_SWEEP_FIG,
        )
    with c[1]:
        sweep_exponents(setup.init, exps)
    reproduce.show(
        reproduce.depth_sweep(
            config, ids, setup.seed, setup.init, sweep_view, depths, setup.source != "prompt", reproduce.prompt_text()
        )
    )


def same_weights_section() -> None:
    st.caption(
        "One set of random weights, drawn once, run both ways (the same state_dict; only "
        "`config.norm` differs). Each wiring gets one forward and one backward pass of the "
        "language-model loss on the input. Nothing is trained."
    )
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
    reproduce.show(
        reproduce.same_weights(
            setup.config, ids, setup.seed, setup.init, view, setup.source != "prompt", reproduce.prompt_text()
        )
    )
    depth_sweep_section(setup, ids, view)
