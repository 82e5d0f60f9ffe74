"""The Pre-norm vs post-norm page's "The paper's setting" tab, drawn: Xiong et al.'s claims checked at their own
setting (gptviz.training.xiong through gptviz.app.services.norms). Layout only."""

from __future__ import annotations

import time
from dataclasses import replace

import streamlit as st

from ...figures import norms_depth as fig_norms_depth
from ...training import xiong
from .. import display, reproduce
from .. import keys as K
from .. import settings as S
from ..services import norms as services
from .norms_same import fits_the_server, measurement_failed

state = st.session_state

PAPER_NOTE = (
    "Xiong et al. (2020) measured a translation Transformer (d_model 512, 6 layers, Xavier init) and plotted each "
    "layer's FFN gradient norm averaged over data. Here: a decoder-only GPT, {depth} layers, d_model {width} "
    "(their 512 makes each pass several seconds on a 2-core CPU), {heads} heads, {samples} of Tiny Shakespeare. "
    "Both wirings keep a final LayerNorm (their post-LN has none). The band is ± one standard deviation over the "
    "samples. Each verdict is computed from the means with the rule shown; nothing here is written in advance."
)


def paper_measurements(input_scale: str, matrix: str) -> dict | None:
    """{setting title: FFNGradients} and the Xavier depth scaling at xiong.PAPER's shape, measured (or cached) in a
    status box."""
    out = {}
    xavier, gpt2 = (replace(xiong.PAPER, init=init, input_scale=input_scale) for init in ("xavier", "gpt2"))
    started = time.perf_counter()
    with st.status("Measuring the FFN gradients at initialisation…", expanded=False) as status:
        try:
            out["Xavier init (the paper)"] = services.paper_gradients(xavier)
            st.write("Xavier done; the depth scaling next.")
            scaling = services.paper_scaling(xavier, tuple(xiong.PAPER_DEPTHS), matrix)
            out["GPT-2 init"] = services.paper_gradients(gpt2)
            twins = services.paper_twins()
            if twins is not None:
                out[f"trained twins ({twins.stem})"] = services.twins_gradients(twins.pre, twins.post, xiong.PAPER)
        except (ValueError, RuntimeError, MemoryError, OSError) as err:
            measurement_failed(status, f"Could not measure: {err}")
            return None
        took = time.perf_counter() - started
        status.update(
            label=f"Measured: {', '.join(out)} ({'from the cache' if took < 1 else f'{took:.0f} s'})", state="complete"
        )
    return {"grads": out, "scaling": scaling}


def claim_lines(results: dict, matrix: str) -> list[str]:
    """The checklist: each claim reproduced at the paper's setting, or not, with what else was tried."""
    grads = results["grads"]
    title = next(iter(grads))
    verdicts = {
        name: {c.key: c for c in xiong.check_claims(g, matrix, results["scaling"] if name == title else None)}
        for name, g in grads.items()
    }
    lines = []
    for claim in verdicts[title].values():
        if claim.reproduced:
            lines.append(f"- :green[:material/check_circle: reproduced]: {claim.text}. Measured: {claim.measured}.")
            continue
        tried = "; ".join(
            f"{name}: {v[claim.key].measured}" for name, v in verdicts.items() if name != title and claim.key in v
        )
        lines.append(
            f"- :red[:material/cancel: not reproduced]: {claim.text}. Measured: {claim.measured}."
            + (f" Also tried: {tried}." if tried else "")
        )
    rules = {c.threshold for v in verdicts.values() for c in v.values()}
    return lines + [f"\nRules: {'; '.join(sorted(rules))}."]


def ffn_profile_columns(grads: dict[str, xiong.FFNGradients], matrix: str) -> None:
    """One figure per setting, side by side (a phone stacks them; three panels in one figure would not fit)."""
    for i, (column, (name, g)) in enumerate(zip(st.columns(len(grads)), grads.items(), strict=True)):
        with column:
            display.show_figure(
                fig_norms_depth.ffn_profiles(
                    {name: {n: (g.mean(n, matrix), g.sd(n, matrix)) for n in ("pre", "post")}}, f"‖∂loss/∂{matrix}‖"
                ),
                key=K.per_item(K.NORMS_PAPER_FIG, i),
            )


def paper_section() -> None:
    st.caption(
        "Xiong et al.'s claims, checked at their own setting: Xavier init, at initialisation, averaged over "
        "seeds and batches of real text; then GPT-2's init and the trained twins beside it."
    )
    c = st.columns([1, 2, 2])
    matrix = S.NORMS_PAPER_MATRIX.radio(c[0], options=list(xiong.MATRICES), horizontal=True, index=1)
    scale = S.NORMS_PAPER_SCALE.selectbox(c[1], options=list(xiong.INPUT_SCALES), format_func=xiong.INPUT_SCALES.get)
    deepest = services.paper_deepest()
    if not fits_the_server(deepest, f"The depth scaling's deepest model ({max(xiong.PAPER_DEPTHS)} layers)"):
        return
    if c[2].button(
        "Measure",
        key=K.NORMS_PAPER_RUN,
        type="primary",
        help="Three settings and a depth scaling, each over several seeds and batches; the time it took "
        "is shown when it is done.",
    ):
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
    display.show_figure(
        fig_norms_depth.depth_bands(
            sc.depths, sc.mean, sc.sd, {n: sc.exponent(n) for n in ("pre", "post")}, f"last layer ‖∂loss/∂{matrix}‖"
        ),
        key=K.NORMS_PAPER_DEPTH_FIG,
    )
    with st.expander("The setting, and how it differs from the paper's"):
        first = next(iter(grads.values()))
        st.markdown(
            PAPER_NOTE.format(
                depth=xiong.PAPER.depth, width=xiong.PAPER.width, heads=xiong.PAPER.n_heads, samples=first.samples
            )
        )
    settings = {
        title: replace(xiong.PAPER, init=init, input_scale=scale)
        for title, init in (("Xavier init (the paper)", "xavier"), ("GPT-2 init", "gpt2"))
    }
    reproduce.show(reproduce.paper(settings, xiong.PAPER_DEPTHS, matrix, services.PAPER_BASE))
