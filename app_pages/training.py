"""Train a model: a small GPT trained on Tiny Shakespeare from the browser, in a background thread, with a
live loss chart; pre-norm and post-norm twins on the same batches to compare."""

from __future__ import annotations

import math

import streamlit as st

from gptviz import PRESETS
from gptviz.app import display, jobs, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.services import training_page as services
from gptviz.app.services.training_page import Form
from gptviz.figures import norms_training as fig_norms_training
from gptviz.figures import training as fig_train
from gptviz.model.config import ConfigError
from gptviz.model.params import total_params
from gptviz.model.tokenizer import decode
from gptviz.serve.training_jobs import FAILED, STOPPED, Job, JobRegistry, JobSnapshot, JobSpec, start_warmup
from gptviz.training import warmup

state = st.session_state
VOCAB = PRESETS["tiny"].vocab_size
WIRINGS = services.WIRINGS
DEFAULTS = {setting.key: setting.default for setting in S.TRAIN_FORM_SETTINGS}
DEEP_AND_NARROW = {
    **DEFAULTS,
    K.TRAIN_LAYERS: 12,
    K.TRAIN_WIDTH: 64,
    K.TRAIN_LR: 1e-2,
    K.TRAIN_STEPS: 150,
    K.TRAIN_CLIP: 0.0,
}
# Scenarios set the form's fields (the user still presses Start).
SCENARIOS = {
    "Quick start (about a minute)": dict(DEFAULTS),
    "Deep and narrow, no warmup": {**DEEP_AND_NARROW, K.TRAIN_WARMUP: 0},
    "Same, with warmup": {**DEEP_AND_NARROW, K.TRAIN_WARMUP: 50},
}
INTRO = (
    "Train a small GPT on Tiny Shakespeare (GPT-2 tokens; the first 90% trains, the last 10% validates) "
    "right here. Training runs in a background thread, so other pages and other people's sessions keep "
    "working; this page looks at it every second and a half. With both wirings chosen, a pre-norm and a "
    "post-norm model start from the same weights and see the same batches, so the curves compare the wiring "
    "alone."
)
TRAINING_OFF = (
    "Training is turned off on this server (its operator set GPTVIZ_TRAINING=0). The other pages work "
    "as usual; `python -m gptviz train` trains from the command line."
)


# ---- the form ----------------------------------------------------------------------------------------------------

SCENARIO_NOTES = dict(
    zip(
        SCENARIOS,
        (
            "Quick start: 2 layers, d_model 64, 60 steps with 10 of warmup, pre- and post-norm on the same batches.",
            "Deep and narrow, no warmup: 12 layers, d_model 64, a high learning rate from the first step and no "
            "gradient clipping, the setting where Xiong et al. expect post-norm to suffer.",
            "Deep and narrow with 50 warmup steps: the same setting, the learning rate ramped up first.",
        ),
        strict=True,
    )
)
EXPECT_NOTE = (
    "One run per wiring says little about the placement: a difference between two runs can be the seed. "
    "The warmup scenario below runs post-norm with and without warmup and pre-norm without, over several "
    "seeds, and states what its runs show. Watch the gradient-norm chart as well as the loss."
)


def apply_scenario(name: str) -> None:
    for key, value in SCENARIOS[name].items():
        state[key] = value
    state[K.TRAIN_SCENARIO_PICKED] = name


def scenario_buttons() -> None:
    st.markdown("**Start from**")
    for col, name in zip(st.columns(len(SCENARIOS)), SCENARIOS, strict=True):
        col.button(name, key=K.per_item(K.TRAIN_SCENARIO, name), on_click=apply_scenario, args=(name,), width="stretch")
    picked = state.get(K.TRAIN_SCENARIO_PICKED, next(iter(SCENARIOS)))
    st.caption(SCENARIO_NOTES[picked], help=EXPECT_NOTE)  # the scenario the form holds, not another


def settings_form() -> tuple[Form, bool]:
    """The run's settings (kept for the session), and whether Start was pressed."""
    with st.form(K.TRAIN_FORM):
        r1 = st.columns(4)
        layers = S.TRAIN_LAYERS.slider(r1[0], persist_state="session")
        width = S.TRAIN_WIDTH.selectbox(r1[1], persist_state="session")
        heads = S.TRAIN_HEADS.selectbox(r1[2], persist_state="session")
        wiring = S.TRAIN_WIRING.radio(r1[3], format_func=WIRINGS.get, persist_state="session")
        r2 = st.columns(4)
        lr = S.TRAIN_LR.select_slider(r2[0], persist_state="session", format_func=lambda v: f"{v:g}")
        warmup = S.TRAIN_WARMUP.number_input(r2[1], step=10, persist_state="session")
        steps = S.TRAIN_STEPS.number_input(r2[2], step=10, persist_state="session")
        clip = S.TRAIN_CLIP.select_slider(
            r2[3], persist_state="session", format_func=lambda v: "off" if v == 0 else f"{v:g}"
        )
        r3 = st.columns(4)
        batch = S.TRAIN_BATCH.selectbox(r3[0], persist_state="session")
        block = S.TRAIN_BLOCK.selectbox(r3[1], persist_state="session")
        init = S.TRAIN_INIT.selectbox(
            r3[2], persist_state="session", format_func={"gpt2": "GPT-2 (normal 0.02)", "xavier": "Xavier"}.get
        )
        seed = S.TRAIN_SEED.number_input(r3[3], persist_state="session")
        submitted = st.form_submit_button("Start training", type="primary")
    return Form(layers, width, heads, wiring, lr, warmup, steps, clip, batch, block, init, seed), submitted


def wiring_note(form: Form) -> None:
    sidebar_norm = state.get(K.NORM, "pre")
    if form.wiring != "both" and form.wiring != sidebar_norm:
        st.caption(
            f"The sidebar's LayerNorm placement is {sidebar_norm}-norm; this run trains {form.wiring}-norm, "
            "as the form says (the sidebar's choice applies to the other pages)."
        )


def checked_spec(form: Form) -> JobSpec | None:
    """The job the form describes, with its size and this server's limits; None (and why) when it is invalid."""
    try:
        spec = services.build_spec(form)
        n_params = total_params(next(iter(spec.configs.values())))
    except (ValueError, ConfigError) as err:
        st.error(f"These settings do not make a valid run: {err}")
        return None
    lim = services.server_limits()
    tokens_per_step = int(form.batch) * int(form.block)
    st.caption(
        f"{len(spec.configs)} model(s) of {n_params:,} parameters ({n_params - VOCAB * int(form.width):,} "
        f"outside the token embedding); {tokens_per_step:,} tokens per step; "
        f"{int(form.steps) * tokens_per_step:,} tokens in all (the corpus has about 300,000). This server "
        f"allows {lim.training_tokens:,} tokens and {lim.training_seconds:,} s a run, "
        f"{lim.jobs_per_session} run(s) at a time a visitor."
    )
    return spec


def start_run(registry: JobRegistry, spec: JobSpec) -> None:
    owner = jobs.session_id()
    try:
        job = registry.start(
            spec,
            owner=owner,
            alive=lambda: jobs.session_alive(owner),
            address=jobs.client_address(),
            on_models=jobs.register_job_models,
        )
    except RuntimeError as err:  # JobLimitError (a RuntimeError; the class may predate a code reload)
        st.warning(str(err))
    else:
        state[K.TRAIN_JOB] = job.id
        state[K.TRAIN_JOBS] = [job.id] + [j for j in state[K.TRAIN_JOBS] if j != job.id]


# ---- the selected run ----------------------------------------------------------------------------------------


def pick_run() -> None:
    state[K.TRAIN_JOB] = state[K.TRAIN_RUN_PICK]


def chosen_run(registry: JobRegistry) -> Job | None:
    """The run this session looks at (its newest unless it picked another); None (and a hint) before any."""
    mine = [j for j in state[K.TRAIN_JOBS] if registry.get(j) is not None]
    if not mine:
        st.info("No run yet: choose settings and press Start training.")
        return None
    if state.get(K.TRAIN_JOB) not in mine:
        state[K.TRAIN_JOB] = mine[0]
    # The chosen run lives in TRAIN_JOB, not in the picker's own key: Streamlit drops a widget's key while the page
    # is away, and the picker recreated on return came back showing an older run than the one just started.
    if len(mine) > 1:
        state[K.TRAIN_RUN_PICK] = state[K.TRAIN_JOB]
        S.TRAIN_RUN_PICK.selectbox(
            st, options=mine, on_change=pick_run, format_func=lambda j: f"{j}: {registry.get(j).spec.label}"
        )
    return registry.get(state[K.TRAIN_JOB])


def by_wiring(snap: JobSnapshot) -> dict[str, list[dict]]:
    """The snapshot's logs named as the figures name them."""
    return {f"{name}-norm": records for name, records in snap.logs.items()}


def live_view(job: Job, smoothing: float, live_at_start: bool) -> None:
    """Progress, Stop and the loss curves; a fragment that redraws itself while the run goes on."""
    snap = job.snapshot()
    if live_at_start and snap.finished:
        st.rerun()  # the run ended: redraw the whole page once, with the results below
    c = st.columns([4, 1])
    if snap.status in ("queued", "loading"):
        c[0].progress(0.0, text="Loading the corpus…")
    else:
        verb = "Stopping after this step" if snap.stop_requested and not snap.finished else snap.status.capitalize()
        c[0].progress(
            min(1.0, snap.fraction),
            text=f"{verb}: step {snap.steps_done} of {snap.total_steps} · "
            f"{snap.elapsed_s:.0f} s elapsed · ETA {snap.eta}",
        )
    if not snap.finished:
        c[1].button(
            "Stop",
            key=K.TRAIN_STOP,
            on_click=job.request_stop,
            icon=":material/stop:",
            disabled=snap.stop_requested,
            width="stretch",
        )
    if snap.logs:
        cols = st.columns(max(1, len(snap.logs)))
        for col, (name, records) in zip(cols, snap.logs.items(), strict=True):
            vals = [r["val_loss"] for r in records if r["val_loss"] is not None]
            col.metric(
                f"{name}-norm train loss",
                f"{records[-1]['train_loss']:.3f}",
                help=f"Last validation loss: {vals[-1]:.3f}" if vals else None,
            )
        display.show_figure(
            fig_train.loss_curves(by_wiring(snap), smoothing, {"uniform guess, ln 50257": math.log(VOCAB)}),
            key=K.TRAIN_LOSS_FIG,
        )


# ---- a finished run ------------------------------------------------------------------------------------------


def summary(job: Job, snap: JobSnapshot, ended: str, finals: dict[str, dict]) -> None:
    """How the run ended, its training dynamics, and the twins' final validation losses."""
    why = {
        "time": f", at this server's time limit of {services.server_limits().training_seconds:,} s a run",
        "left": ", because the session that started it closed",
    }.get(job.stop_reason, "")
    st.success(f"{ended} after {snap.steps_done} of {snap.total_steps} steps in {snap.elapsed_s:.0f} s{why}.")
    if snap.logs:
        display.show_figure(
            fig_train.training_dynamics(by_wiring(snap), job.spec.settings.grad_clip or None), key=K.TRAIN_DYN_FIG
        )
    if len(finals) == 2 and all(f["val_loss"] is not None for f in finals.values()):
        gap = finals["post"]["val_loss"] - finals["pre"]["val_loss"]
        st.caption(
            f"Final validation loss: pre-norm {finals['pre']['val_loss']:.3f}, post-norm "
            f"{finals['post']['val_loss']:.3f} ({'post-norm is higher' if gap > 0 else 'post-norm is lower'} "
            f"by {abs(gap):.3f} nats/token)."
        )


def open_in_sidebar(run_id: str) -> None:
    state[K.MODEL_SOURCE] = K.SOURCE_TRAINED
    state[K.TRAINED_RUN] = run_id


def use_trained_models(job: Job, finals: dict[str, dict]) -> None:
    """Each trained model offered to the other pages (by run id) and as a checkpoint download."""
    st.subheader("Use the trained model")
    for name, model in job.models.items():
        run_id = jobs.trained_run_id(job, name, model)  # listed in the sidebar when the job ended (on_models)
        c = st.columns([2, 1.2, 1.2])
        final = finals[name]
        val = f", validation loss {final['val_loss']:.3f}" if final["val_loss"] is not None else ""
        c[0].markdown(f"**{name}-norm**: step {final['step']}, train loss {final['train_loss']:.3f}{val}")
        c[1].button(
            "Open in the other pages",
            key=K.per_item(K.TRAIN_OPEN, job.id, name),
            on_click=open_in_sidebar,
            args=(run_id,),
            help="Selects this model in the sidebar (Source: trained in this session).",
            width="stretch",
        )
        c[2].download_button(
            "Download checkpoint",
            data=lambda name=name: job.checkpoint_zip(name),
            file_name=f"{job.id}-{name}-norm.zip",
            mime="application/zip",
            key=K.per_item(K.TRAIN_DL, job.id, name),
            on_click="ignore",
            icon=":material/download:",
            width="stretch",
            help="model.safetensors + config.json (+ history.json); unzip and load with "
            "gptviz.model.weights.load_checkpoint(folder).",
        )
    st.caption("Trained models stay in this server's memory until it restarts; download a checkpoint to keep one.")


def samples(job: Job) -> None:
    with st.expander("Samples from the trained model(s)", expanded=True):
        sample_cfg = next(iter(job.models.values())).config
        prompt = sidebar.prompt_tokens(sample_cfg.n_ctx, vocab_size=sample_cfg.vocab_size)
        if prompt is None:
            return
        for col, (name, model) in zip(st.columns(len(job.models)), job.models.items(), strict=True):
            try:
                with st.spinner("Sampling…"):
                    ids = services.sample(job.id, name, prompt.ids, model)
            except (ValueError, RuntimeError) as err:
                col.error(f"Could not generate: {err}")
                continue
            col.markdown(f"**{name}-norm** (40 tokens, temperature 0.8, top-k 40, seed 0)")
            col.code(decode(ids[len(prompt.ids) :]), language=None, wrap_lines=True)


def finished_run(job: Job) -> None:
    snap = job.snapshot()
    ended = "Stopped" if job.status == STOPPED else "Finished"
    if job.status == FAILED:
        st.error(f"The run failed: {job.error}")
        return
    if not job.models or not snap.steps_done:  # stopped while loading or before its first step: nothing trained
        st.info(f"{ended} before its first step: there is no trained model to use.")
        return
    finals = {name: r.final for name, r in job.results.items()}
    summary(job, snap, ended, finals)
    use_trained_models(job, finals)
    samples(job)
    reproduce.show(reproduce.training(job.spec.configs, job.spec.settings, job.spec.init))


# ---- the warmup scenario ------------------------------------------------------------------------------------------

WARMUP_COLORS = {"post-norm, no warmup": "#d62728", "post-norm, warmup": "#ff9896", "pre-norm, no warmup": "#1f77b4"}
WARMUP_TRIED = (
    "Settings tried, each reported in docs/benchmarks-history.md (section Warmup): under two protocols "
    "fixed before their runs, peak lr 1e-3, 3e-3 and 1e-2 at this shape and length, then 6 layers at lr 1e-3 "
    "and 3e-3; before them, exploratory 60-step runs at lr 0.01 and 0.1 and one-seed probes. This page "
    "runs the 12-layer lr 3e-3 setting, which the protocols kept; the verdict below is computed from this "
    "run's losses by the rule shown."
)


def start_warmup_run(registry: JobRegistry, scenario: warmup.Scenario) -> None:
    owner = jobs.session_id()
    try:
        job = start_warmup(
            registry, scenario, owner=owner, alive=lambda: jobs.session_alive(owner), address=jobs.client_address()
        )
    except RuntimeError as err:  # JobLimitError: the same per-visitor and per-server limits as any run
        st.warning(str(err))
    else:
        state[K.TRAIN_WARMUP_JOB] = job.id


def warmup_view(job: Job, live_at_start: bool) -> None:
    """Progress, Stop, the loss bands and the per-layer FFN gradients, and the measured outcome; redrawn while live."""
    snap = job.snapshot()
    if live_at_start and snap.finished:
        st.rerun()
    if snap.status == FAILED:
        st.error(f"The scenario failed: {snap.error}")
        return
    c = st.columns([4, 1])
    c[0].progress(
        min(1.0, snap.fraction),
        text=f"{snap.status.capitalize()}: step {snap.steps_done} of "
        f"{snap.total_steps} ({len(snap.logs)} runs) · {snap.elapsed_s:.0f} s · "
        f"ETA {snap.eta}",
    )
    if not snap.finished:
        c[1].button("Stop", key=K.TRAIN_WARMUP_STOP, on_click=job.request_stop, width="stretch")
    logs = {name: records[: snap.steps_done] for name, records in snap.logs.items()}
    if snap.steps_done < 2 or len(logs) < len(job.scenario.run_names()):
        return
    seen = services.warmup_reading(logs, snap.finished, job.scenario.warmup)
    out = seen.outcome
    if (
        out is not None
    ):  # both lines read off the runs' losses (gptviz.training.warmup.outcome), never written in advance
        st.markdown(
            f"**{out.sentence}** {warmup.baseline_line(out, seen.baseline)} {seen.verdict}", help=f"Rule: {out.rule}."
        )
    display.show_figure(
        fig_norms_training.warmup_losses(seen.bands, WARMUP_COLORS, seen.baseline), key=K.TRAIN_WARMUP_LOSS_FIG
    )
    st.caption("Each layer's FFN gradient norm (W1 and W2 together) per step, mean over seeds, one colour scale:")
    warmup_grad_columns(seen.grids)


def warmup_grad_columns(grids: dict) -> None:
    """One heatmap per arm side by side, on one colour scale (a phone stacks them; three in one figure overlapped)."""
    zrange = fig_norms_training.log_range(grids)
    for i, (column, (arm, grid)) in enumerate(zip(st.columns(len(grids)), grids.items(), strict=True)):
        with column:
            display.show_figure(
                fig_norms_training.warmup_grads({arm: grid}, zrange), key=K.per_item(K.TRAIN_WARMUP_GRAD_FIG, i)
            )


def warmup_scenario(registry: JobRegistry) -> None:
    """Does post-norm need warmup and pre-norm not? Nine small runs in the background, the outcome computed."""
    scenario = warmup.PAGE_SCENARIO
    with st.expander("Warmup: does post-norm need it, and pre-norm not?", expanded=bool(state.get(K.TRAIN_WARMUP_JOB))):
        st.caption(
            f"Post-norm with and without warmup, and pre-norm without, from the same weights on the same "
            f"batches: {len(scenario.run_names())} runs in the background (the progress bar gives the time "
            "left).",
            help=f"{scenario.layers} layers, d_model {scenario.width}, {scenario.init} init, peak lr "
            f"{scenario.lr:g}, AdamW betas (0.9, {scenario.beta2:g}), no clipping or weight decay, "
            f"{scenario.steps} steps of {scenario.batch_size}×{scenario.block} tokens; the warmup arm ramps "
            f"up over {scenario.warmup} steps; {scenario.seeds} seeds, run in lockstep.\n\n{WARMUP_TRIED}",
        )
        st.button(
            "Run the warmup scenario", key=K.TRAIN_WARMUP_RUN, on_click=start_warmup_run, args=(registry, scenario)
        )
        job = registry.get(state.get(K.TRAIN_WARMUP_JOB))
        if job is None:
            return
        live = not job.finished
        st.fragment(warmup_view, run_every=1.5 if live else None)(job, live)


# ---- the page ----------------------------------------------------------------------------------------------------


def main() -> None:
    for key, value in DEFAULTS.items():
        state.setdefault(key, value)
    state.setdefault(K.TRAIN_JOBS, [])
    st.title("Train a model")
    if not services.server_limits().training:
        st.info(TRAINING_OFF)
        return
    st.caption("Train a small GPT on Tiny Shakespeare here, pre- and post-norm side by side.", help=INTRO)
    registry = jobs.training_registry()  # shared by every session, kept across reruns and code reloads
    results_box, form_box = st.container(), st.container()  # a run's results first, above the fold
    with form_box, st.expander("New run", expanded=not state[K.TRAIN_JOBS]):
        scenario_buttons()
        form, submitted = settings_form()
        wiring_note(form)
        spec = checked_spec(form)
        if submitted and spec is not None:
            start_run(registry, spec)
    warmup_scenario(registry)  # its own expander, below the form
    with results_box:
        run_results(registry)


def run_results(registry: JobRegistry) -> None:
    """The chosen run: its live curves while it trains, then its results."""
    job = chosen_run(registry)
    if job is None:
        return
    st.subheader(f"{job.id}: {job.spec.label}")
    smoothing = S.TRAIN_SMOOTH.slider(st)
    live_at_start = not job.finished
    st.fragment(live_view, run_every=1.5 if live_at_start else None)(job, smoothing, live_at_start)
    if not job.finished:
        st.caption("You can leave this page: the run goes on, and its results wait here.")
        return
    finished_run(job)


main()
