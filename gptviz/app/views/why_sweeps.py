"""The Why this token? page's two long measurements, drawn: activation patching and saliency (integrated gradients).
Layout only: each shows its estimated time first (gptviz.app.services.why.sweep_plan), runs within the session's
clock and draws what the service returns."""

from __future__ import annotations

import streamlit as st

from ...figures import why as figs
from ...methods.attribution import patching_work, saliency_work
from ...model.config import GPTConfig
from ...serve.work_clock import WorkClock
from .. import display, reproduce, text_limits
from .. import keys as K
from .. import settings as S
from ..model_service import ModelSpec
from ..services import why as services
from ..services.why import IG_STEPS, pieces
from ..sidebar import prompt_text

state = st.session_state
AUTO_RUN_S = 5.0  # a measurement estimated longer than this waits for a click
PATCH_EXAMPLES = dict(
    zip(
        K.PATCH_PAIRS[1:],
        (  # clean, corrupted (same length in tokens): one cue broken
            ("A B C D E F G H A B C", "A B C Q E F G H A B C"),
            (
                "Ham.\nWho is there?\nHor.\nFriend to this ground.\nHam.\nWho is there?\n",
                "Ham.\nWho is there?\nHor.\nFriend to this ground.\nMar.\nWho is there?\n",
            ),
        ),
        strict=True,
    )
)
OWN_PAIR = K.OWN_PAIR


def timed_clock(
    what: str, work: int, T: int, spec: ModelSpec, confirmed_key: str, started_for: tuple, button_key: str
) -> WorkClock | None:
    """Before a long measurement: its estimated time (work x the rate measured now), a refusal when that passes the
    operator's limit, a button when it passes AUTO_RUN_S; the clock to run it under, or None when it must not run
    (yet)."""
    plan = services.sweep_plan(what, work, T, spec)
    limit, rate, estimate = plan.limit_s, plan.rate, plan.estimate_s
    if plan.refusal:
        st.warning(plan.refusal)
        return None
    st.caption(
        f"{what}: about {estimate:,.1f} s estimated ({work:,} token-block passes at {rate:,.0f} a second, "
        f"measured on this server now; stopped past {limit:,} s or when this tab closes)."
    )
    if estimate > AUTO_RUN_S and state.get(confirmed_key) != started_for:
        if not st.button(f"Run it (about {estimate:,.0f} s)", key=button_key, type="primary"):
            return None
        state[confirmed_key] = started_for
    return services.sweep_clock(what, limit)


# ---- Patching ----------------------------------------------------------------------------------------------------

PATCH_NOTE = (
    "Activation patching: run a corrupted prompt, copy in one piece of the clean prompt's run, and see "
    "how much of the clean prediction comes back (1 = all of it, 0 = none). It locates where the "
    "information that separates the two prompts flows; it says nothing about inputs both share."
)


def patch_prompts(cfg: GPTConfig, enc=None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The clean and corrupted prompts as ids; None (with the reason) when they cannot be compared."""
    example = S.WHY_EXAMPLE.selectbox(st)
    own = prompt_text()
    swapped = services.corrupted_from(own, cfg, enc) if example == OWN_PAIR else None
    clean_default, corrupted_default = PATCH_EXAMPLES.get(example, (own, swapped[0] if swapped else own))
    if swapped and state.get(K.per_item(K.WHY_CORRUPT, example), swapped[0]) == swapped[0]:
        st.caption(f"The sidebar's prompt, and the same with one token swapped ({display.md_text(swapped[1])}).")
    p1, p2 = st.columns(2)
    clean_text = text_limits.checked_text(
        p1.text_area,
        "Clean prompt",
        K.per_item(K.WHY_CLEAN, example),
        text_limits.PAIR_CHARS,
        value=clean_default,
        height=120,
    )
    corrupted_text = text_limits.checked_text(
        p2.text_area,
        "Corrupted prompt",
        K.per_item(K.WHY_CORRUPT, example),
        text_limits.PAIR_CHARS,
        value=corrupted_default,
        height=120,
    )
    clean_ids, corrupt_ids = services.prompt_ids(clean_text, cfg, enc), services.prompt_ids(corrupted_text, cfg, enc)
    if not clean_ids or not corrupt_ids:
        st.info("Type both prompts.")
    elif len(clean_ids) != len(corrupt_ids):
        st.warning(
            f"Patching compares the prompts position by position, so they must have the same number of "
            f"tokens: the clean one has {len(clean_ids)}, the corrupted one {len(corrupt_ids)}."
        )
    elif clean_ids == corrupt_ids:
        st.info("The prompts are the same: change a word of the corrupted one.")
    else:
        return clean_ids, corrupt_ids
    return None


def patching_tab(ask: services.Ask) -> None:
    pair = patch_prompts(ask.cfg, ask.enc)
    if pair is None:
        return
    clean_ids, corrupt_ids = pair
    p_clean, p_corrupt = services.next_token(ask.spec, clean_ids), services.next_token(ask.spec, corrupt_ids)
    goal = int(p_clean.argmax())
    rival = int(p_corrupt.argmax())
    if rival == goal:
        rival = int(p_clean.topk(2).indices[1])
    st.caption(
        f"Metric: logit({display.md_text(pieces([goal], ask.enc)[0])}) - "
        f"logit({display.md_text(pieces([rival], ask.enc)[0])}), "
        "the clean prompt's top prediction against the corrupted one's."
    )
    clock = timed_clock(
        "Patching",
        patching_work(ask.cfg, clean_ids, corrupt_ids),
        len(clean_ids),
        ask.spec,
        K.WHY_PATCH_CONFIRMED,
        (ask.spec, clean_ids, corrupt_ids),
        K.WHY_PATCH_RUN,
    )
    if clock is None:
        return
    try:
        with st.spinner("Patching every layer and position, and every head..."):
            resid, by_head = services.patching(ask.spec, clean_ids, corrupt_ids, goal, rival, clock)
    except ValueError as err:  # LimitError: no memory for it now, or stopped past the time limit
        st.warning(str(err))
        return
    took = f" Computed in {clock.elapsed:,.1f} s." if clock.checks else ""
    st.caption(f"Logit difference: clean {resid.clean:+.3f}, corrupted {resid.corrupted:+.3f}.{took}")
    display.show_figure(
        figs.patching_heatmap(
            resid.scores, pieces(corrupt_ids, ask.enc), title="Residual stream patched at one layer and position"
        ),
        key=K.WHY_PATCH_RESID,
    )
    display.show_figure(
        figs.layer_head_grid(
            by_head.scores, title="One head's output patched (all positions)", colorbar="restored", symmetric=True
        ),
        key=K.WHY_PATCH_HEADS,
    )
    example = state.get(S.WHY_EXAMPLE.key)
    texts = tuple(state.get(K.per_item(key, example)) for key in (K.WHY_CLEAN, K.WHY_CORRUPT))
    reproduce.show(reproduce.patching(ask.spec, clean_ids, corrupt_ids, goal, rival, texts))


# ---- Saliency ----------------------------------------------------------------------------------------------------

SALIENCY_NOTE = (
    f"Integrated gradients: how much each prompt token's embedding contributes to the metric, "
    f"integrated along a straight path from an all-zero token embedding ({IG_STEPS} points; position "
    "embeddings kept). The scores sum to the metric's change along that path. Gradient x input, a "
    "one-point version, is shown below it. Both are local, linearised measures, not ablations."
)


def saliency_tab(ask: services.Ask) -> None:
    clock = timed_clock(
        "Integrated gradients",
        saliency_work(ask.cfg, len(ask.ids), IG_STEPS),
        len(ask.ids),
        ask.spec,
        K.WHY_SALIENCY_CONFIRMED,
        (ask.spec, ask.ids),
        K.WHY_SALIENCY_RUN,
    )
    if clock is None:
        return
    try:
        ig, gxi = services.saliency(ask.spec, ask.ids, ask.target, ask.other, clock)
    except ValueError as err:  # LimitError: the server's memory has no room for it now
        st.warning(str(err))
        return
    gap = ig.metric - ig.baseline_metric
    st.caption(
        f"Sum of the scores {float(ig.scores.sum()):+.3f}; metric at the prompt {ig.metric:+.3f}, at the "
        f"zero baseline {ig.baseline_metric:+.3f} (difference {gap:+.3f})."
    )
    display.show_figure(
        figs.token_strip(ask.labels, ig.scores, title="Integrated gradients on the prompt's tokens"), key=K.WHY_IG
    )
    display.show_figure(figs.token_strip(ask.labels, gxi.scores, title="Gradient x input"), key=K.WHY_GXI)
    reproduce.show(reproduce.saliency(ask.spec, ask.ids, ask.target, ask.other, IG_STEPS, reproduce.prompt_text()))
