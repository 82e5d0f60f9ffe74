"""Heads forming: the bundled twins' first training stage replayed from the snapshots taken while it ran
(gptviz.training.snapshots): every head's map on a probe at any step, the detector scores and losses over the steps with
that step marked, pre-norm and post-norm side by side on the same steps.

The snapshots come from a rerun of the committed recipe's first stage (the model card says how close it came to
the logged run); the page runs no model.
"""

from __future__ import annotations

import time

import numpy as np
import streamlit as st

from gptviz.app import jobs, reproduce
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.bundled_snapshots import bundled_snapshots
from gptviz.app.display import show_figure
from gptviz.app.unit_nav import unit_pills
from gptviz.figures import timeline as ft
from gptviz.model.unit_id import head_id
from gptviz.serve.training_jobs import FAILED, FORMED_HOLD, GROWTH, Job, growth_wirings, induction_growth_spec
from gptviz.training.snapshots import FORMED_THRESHOLD, Snapshots, formed_step

TWINS = {"pre-norm": "shakespeare-pre", "post-norm": "shakespeare-post"}
THRESHOLD = FORMED_THRESHOLD  # a head "has formed" once its score reaches this and stays (snapshots.formed_step)
PLAY_FPS = 3
FORMED_HELP = (
    f"Steps count from the start of training (stage 1's first step, from random weights). A head "
    f"counts as formed at the first snapshot from which its score stays at or above {THRESHOLD:g}; the "
    "Pre-norm vs post-norm page uses the same rule."
)
STEP_HELP = S.TL_STEP.help  # the play's frames show a slider like the step's
state = st.session_state


def runs() -> dict[str, Snapshots]:
    found = {wiring: bundled_snapshots(name) for wiring, name in TWINS.items()}
    found = {wiring: snaps for wiring, snaps in found.items() if snaps is not None and len(snaps)}
    if not found:
        st.error("The bundled models' training snapshots are missing from this installation.")
        st.stop()
    return found


def all_steps(found: dict[str, Snapshots]) -> list[int]:
    return sorted({s for snaps in found.values() for s in snaps.steps})


def controls(found: dict[str, Snapshots]) -> tuple[str, int, int, st.delta_generator.DeltaGenerator]:
    """The detector, the probe and the step to show (kept valid against what the snapshots hold), and the slot the
    step slider sits in (Play moves a slider there)."""
    first = next(iter(found.values()))
    steps = all_steps(found)
    if state.get(K.TL_DETECTOR) not in S.TL_DETECTOR.rule.options:
        state[K.TL_DETECTOR] = S.TL_DETECTOR.default
    if not isinstance(state.get(K.TL_PROBE), int) or not 0 <= state[K.TL_PROBE] < len(first.probes):
        state[K.TL_PROBE] = S.TL_PROBE.default
    wanted = state.pop(K.TL_PLAYED, state.get(K.TL_STEP))
    state[K.TL_STEP] = steps[ft.last_at_or_before(steps, wanted)] if isinstance(wanted, int) else steps[-1]
    left, middle, right = st.columns([1, 1, 3])
    detector = S.TL_DETECTOR.selectbox(left)
    probe = S.TL_PROBE.selectbox(middle, options=range(len(first.probes)), format_func=lambda p: first.probes[p].name)
    slot = right.empty()
    step = S.TL_STEP.select_slider(slot, options=steps)
    return detector, probe, step, slot


def best_head_line(snaps: Snapshots, detector: str, step: int) -> tuple[str, tuple[int, int]]:
    """'step 400: best induction head L1H2 0.44 (chance 0.029)' and that head, for one run at one step. The step is
    the slider's; a run without a snapshot there says which one it shows (it said that one's step alone, 600 under
    a slider at 650)."""
    i = ft.index_at(snaps, step)
    shown = f"step {step}" if snaps.steps[i] == step else f"step {step} (its snapshot of step {snaps.steps[i]})"
    d = snaps.detector_index(detector)
    scores = snaps.score_array()[i, d]
    layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
    chance = snaps.detectors[d].chance
    return (
        f"{shown}: best {detector} head {head_id(layer, head)} {scores[layer, head]:.2f} "
        f"(chance {chance:.3f}); loss {snaps.train_loss[i]:.2f}"
    ), (int(layer), int(head))


def named_heads(snaps: Snapshots, best: tuple[int, int]) -> list[str]:
    """The heads the page names for a run: the best at the step, then the one of each detector that formed."""
    hits = [formed_step(snaps, name, THRESHOLD) for name in K.TIMELINE_DETECTORS]
    return list(dict.fromkeys([head_id(*best)] + [head_id(h[1], h[2]) for h in hits if h]))


def heads_row(
    found: dict[str, Snapshots], detector: str, probe: int, step: int, key: str = K.TL_HEADS, bundled: bool = False
) -> None:
    """Each run's heads at the step, side by side; a bundled twin's named heads open the unit page (the finished
    model's head at that place, over the corpus)."""
    slots = st.columns(len(found))
    for slot, (wiring, snaps) in zip(slots, found.items(), strict=True):
        line, best = best_head_line(snaps, detector, step)
        with slot.container():
            st.markdown(f"**{wiring}**, {line}")
            show_figure(ft.heads_at(snaps, step, probe, selected=best, width_px=480), key=K.per_item(key, wiring))
            if bundled:
                unit_pills(
                    "What they do in the finished model",
                    named_heads(snaps, best),
                    K.per_item(K.UNIT_PILLS, "tl", wiring),
                    norm=wiring.split("-")[0],
                    help="The finished bundled model's head at that place, over the whole corpus: its top "
                    "examples and direct effect (the unit page).",
                )


def play(found: dict[str, Snapshots], detector: str, probe: int, start: int, slider) -> None:
    """Step through the snapshots from `start` to the end, redrawing the heads, a still slider in the step slider's
    place showing each step as it plays (the slider itself lands on the last at the next run)."""
    every = all_steps(found)
    steps = [s for s in every if s >= start] or every
    slots = [st.empty() for _ in found]
    for s in steps:
        slider.select_slider(
            S.TL_STEP.label, every, value=s, disabled=True, key=K.per_item(K.TL_FRAME, "slider", s), help=STEP_HELP
        )
        for slot, (wiring, snaps) in zip(slots, found.items(), strict=True):
            line, best = best_head_line(snaps, detector, s)
            with slot.container():
                st.markdown(f"**{wiring}**, {line}")
                st.plotly_chart(
                    ft.heads_at(snaps, s, probe, selected=best, width_px=480), key=K.per_item(K.TL_FRAME, wiring, s)
                )
        time.sleep(1 / PLAY_FPS)
    state[K.TL_PLAYED] = steps[-1]


def curves(found: dict[str, Snapshots], detector: str, step: int) -> None:
    left, right = st.columns(2)
    with left:
        show_figure(ft.detector_curves(found, detector, step, THRESHOLD), key=K.TL_DETECTOR_CURVES)
    with right:
        show_figure(ft.loss_curves(found, step), key=K.TL_LOSS_CURVES)


def about(found: dict[str, Snapshots]) -> None:
    with st.expander("Where these snapshots come from"):
        for wiring, snaps in found.items():
            command = snaps.extra.get("command", "")
            st.markdown(
                f"**{wiring}**: {len(snaps)} snapshots over steps 1 to {snaps.steps[-1]}; recording took "
                f"{snaps.share_recording():.1%} of the training time."
            )
            if command:
                st.code(command, language="bash")
        st.caption(
            "Snapshots every 25 steps and, in between, every 5 steps while the smoothed loss moves by 0.15 "
            "nats or more. Scores are mean attention weights; chance is what uniform attention scores on the "
            "same probe. The stage trains on repeated random sequences only (see the model cards)."
        )


# ---- grow one yourself ----------------------------------------------------------------------------------------


def start_growth() -> None:
    spec = induction_growth_spec(growth_wirings(state[K.TL_GROW_WIRING]), seed=int(state[K.TL_GROW_SEED]))
    owner = jobs.session_id()
    try:
        job = jobs.training_registry().start(
            spec, owner=owner, alive=lambda: jobs.session_alive(owner), address=jobs.client_address()
        )
    except RuntimeError as err:  # JobLimitError: the server's or this visitor's run limits, or its memory
        st.warning(str(err))
    else:
        state[K.TL_GROW_JOB] = job.id
        st.rerun()  # draw the run now: this run read the tab's job (none) before the button was pressed


def growth_controls(job: Job | None) -> None:
    running = job is not None and not job.finished
    left, middle, right = st.columns([2, 1, 1])
    S.TL_GROW_WIRING.segmented_control(
        left, default=S.TL_GROW_WIRING.default, format_func=lambda w: {"both": "both, same batches"}.get(w, f"{w}-norm")
    )
    S.TL_GROW_SEED.number_input(middle)
    if running:
        right.button("Stop", key=K.TL_GROW_STOP, on_click=job.request_stop, icon=":material/stop:", width="stretch")
    elif right.button("Grow", key=K.TL_GROW_START, type="primary", icon=":material/play_arrow:", width="stretch"):
        start_growth()


def growth_view(job: Job) -> None:
    """Progress, the induction curves and each model's heads at its newest snapshot; redrawn while it trains."""
    snap = job.snapshot()
    found = {f"{name}-norm": s for name, s in job.snapshots.items() if len(s)}
    st.progress(min(1.0, snap.fraction), text=snap.progress_text)
    if job.error:
        st.error(f"The run failed: {job.error}")
    if not found:
        return
    step = max(s.steps[-1] for s in found.values())
    best = {w: formed_step(s, "induction", THRESHOLD) for w, s in found.items()}
    reached = "; ".join(
        f"{w}: " + (f"{head_id(b[1], b[2])} formed at step {b[0]}" if b else "none formed yet") for w, b in best.items()
    )
    if job.stop_reason == "formed":
        reached += (
            f". Every induction score held {GROWTH['stop_when_formed']:g} for {FORMED_HOLD} snapshots in a row, "
            f"so the run stopped at step {snap.steps_done} of at most {snap.total_steps}"
        )
    st.caption(reached)
    heads_row(found, "induction", 0, step, key=K.TL_GROW_HEADS)
    left, right = st.columns(2)
    with left:
        show_figure(ft.detector_curves(found, "induction", step, THRESHOLD), key=K.TL_GROW_CURVES)
    with right:
        show_figure(ft.loss_curves(found, step), key=K.TL_GROW_LOSS)


def stop_rule() -> str:
    bar = GROWTH["stop_when_formed"]
    return (
        f"It stops as soon as the head has formed: once the best head's induction score has held {bar:g} (the "
        f"bar on the curves; each head's line gives its chance level) for {FORMED_HOLD} snapshots in a row, or at step "
        f"{GROWTH['steps']}."
        if bar
        else f"It runs {GROWTH['steps']} steps."
    )


def grow_tab() -> None:
    st.caption(
        f"Train a {GROWTH['layers']}-layer model on repeated random sequences right here and watch its "
        f"induction head form. {stop_rule()}",
        help=f"Every window is a random sequence of the {GROWTH['copy_vocab']:,} most frequent ids of "
        "Tiny Shakespeare followed by its exact repeats: only copying predicts the second half. "
        f"d_model {GROWTH['d_model']}, {GROWTH['heads']} heads, windows of {GROWTH['block']}, batch "
        f"{GROWTH['batch']}, lr {GROWTH['lr']:g} after {GROWTH['warmup']} warmup steps, at most "
        f"{GROWTH['steps']} steps; a snapshot every {GROWTH['snapshot_every']} steps.",
    )
    job = jobs.training_registry().get(state.get(K.TL_GROW_JOB))
    growth_controls(job)
    if job is None:
        return

    running_at_start = not job.finished

    @st.fragment(run_every=2.0 if running_at_start else None)
    def live() -> None:
        if running_at_start and job.finished:
            st.rerun()  # redraw the whole tab once: Grow comes back in place of Stop
        growth_view(job)

    live()
    if job.finished and job.status != FAILED:
        reproduce.show(reproduce.grow(tuple(job.spec.configs), job.spec.settings.seed, GROWTH))


def history_tab() -> None:
    found = runs()
    st.caption(
        "The twins' first training stage, replayed (steps count from its start, at random weights): pick a "
        "step, or play, and watch the stripe appear.",
        help=FORMED_HELP,
    )
    detector, probe, step, slider = controls(found)
    if st.button("▶ Play from this step", key=K.TL_PLAY):
        play(found, detector, probe, step, slider)
        st.rerun()
    heads_row(found, detector, probe, step, bundled=True)
    curves(found, detector, step)
    about(found)
    reproduce.show(reproduce.heads_forming(detector, step, {w: TWINS[w] for w in found}))


def main() -> None:
    st.title("Heads forming")
    history, grow = st.tabs(["The bundled twins' history", "Grow one yourself"])
    with history:
        history_tab()
    with grow:
        grow_tab()


main()
