"""Train a model: a small GPT trained on Tiny Shakespeare from the browser, in a background thread, with a
live loss chart; pre-norm and post-norm twins on the same batches to compare."""
from __future__ import annotations

import math

import streamlit as st

from gptviz import PRESETS
from gptviz.config import ConfigError
from gptviz.figures import training as fig_train
from gptviz.generate import generate
from gptviz.params import total_params
from gptviz.tokenizer import decode
from gptviz.train import TrainSettings
from gptviz.training_jobs import FAILED, STOPPED, JobSpec
from gptviz.app import display, jobs, sidebar, keys as K
from gptviz import limits

VOCAB = PRESETS["tiny"].vocab_size
WIRINGS = {"both": "pre and post, same batches", "pre": "pre-norm only", "post": "post-norm only"}
LRS = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
DEFAULTS = dict(train_layers=2, train_width=64, train_heads=4, train_wiring="both", train_lr=3e-3,
                train_warmup=10, train_steps=60, train_batch=4, train_block=64, train_init="gpt2", train_clip=1.0,
                train_seed=1337)
# Scenarios set the form's fields (the user still presses Start).
SCENARIOS = {
    "Quick start (about a minute)": dict(DEFAULTS),
    "Deep and narrow, no warmup": dict(DEFAULTS, train_layers=12, train_width=64, train_lr=1e-2, train_warmup=0,
                                        train_steps=150, train_clip=0.0),
    "Same, with warmup": dict(DEFAULTS, train_layers=12, train_width=64, train_lr=1e-2, train_warmup=50,
                              train_steps=150, train_clip=0.0),
}

REGISTRY = jobs.training_registry()  # shared by every session, kept across reruns and code reloads
state = st.session_state
for key, value in DEFAULTS.items():
    state.setdefault(key, value)
state.setdefault("train_jobs", [])

st.title("Train a model")
if not limits.server_limits().training:
    st.info("Training is turned off on this server (its operator set GPTVIZ_TRAINING=0). The other pages work "
            "as usual; `python -m gptviz train` trains from the command line.")
    st.stop()
st.caption("Train a small GPT on Tiny Shakespeare (GPT-2 tokens; the first 90% trains, the last 10% validates) "
           "right here. Training runs in a background thread, so other pages and other people's sessions keep "
           "working; this page looks at it every second and a half. With both wirings chosen, a pre-norm and a post-norm "
           "model start from the same weights and see the same batches, so the curves compare the wiring alone.")


def apply_scenario(name: str) -> None:
    for key, value in SCENARIOS[name].items():
        state[key] = value


st.markdown("**Start from**")
sc = st.columns(len(SCENARIOS))
for col, name in zip(sc, SCENARIOS):
    col.button(name, key=f"train_scenario_{name}", on_click=apply_scenario, args=(name,), width="stretch")
st.caption("Deep and narrow, no warmup: 12 layers, d_model 64, a high learning rate from the first step and no "
           "gradient clipping, the setting where Xiong et al. expect post-norm to suffer; then the same with 50 "
           "warmup steps. What to expect: runs this short mostly learn which words are common, so differences are "
           "modest. In our 150-step runs post-norm ended about 0.15 to 0.2 nats/token above pre-norm on "
           "validation, with or without warmup; watch the gradient-norm chart as well as the loss.")

with st.form("train_form"):
    r1 = st.columns(4)
    layers = r1[0].slider("Layers", 1, 12, key="train_layers", persist_state="session")
    width = r1[1].selectbox("Width (d_model)", [32, 64, 128, 256], key="train_width", persist_state="session")
    heads = r1[2].selectbox("Heads", [1, 2, 4, 8], key="train_heads", persist_state="session")
    wiring_choice = r1[3].radio("Norm placement", list(WIRINGS), format_func=WIRINGS.get, key="train_wiring",
                                persist_state="session",
                                help="This form chooses the wiring of the models it trains; the sidebar's LayerNorm "
                                     "choice applies to the other pages, not here.")
    r2 = st.columns(4)
    lr = r2[0].select_slider("Peak learning rate", LRS, key="train_lr", persist_state="session", format_func=lambda v: f"{v:g}")
    warmup = r2[1].number_input("Warmup steps", 0, 5000, step=10, key="train_warmup", persist_state="session",
                                help="Linear warmup from lr/warmup to the peak; then cosine decay to a tenth.")
    steps = r2[2].number_input("Steps", 1, 5000, step=10, key="train_steps", persist_state="session")
    clip = r2[3].select_slider("Gradient clipping", [0.0, 0.5, 1.0, 2.0, 5.0], key="train_clip", persist_state="session",
                               format_func=lambda v: "off" if v == 0 else f"{v:g}",
                               help="Largest global gradient norm; off lets a spike through whole.")
    r3 = st.columns(4)
    batch = r3[0].selectbox("Batch size", [1, 2, 4, 8, 16, 32], key="train_batch", persist_state="session")
    block = r3[1].selectbox("Block (tokens per sequence)", [16, 32, 64, 128], key="train_block", persist_state="session")
    init = r3[2].selectbox("Init", ["gpt2", "xavier"], key="train_init", persist_state="session",
                           format_func={"gpt2": "GPT-2 (normal 0.02)", "xavier": "Xavier"}.get)
    seed = r3[3].number_input("Seed", 0, 2**31 - 1, step=1, key="train_seed", persist_state="session")
    submitted = st.form_submit_button("Start training", type="primary")


sidebar_norm = state.get("norm", "pre")
if wiring_choice != "both" and wiring_choice != sidebar_norm:
    st.caption(f"The sidebar's LayerNorm placement is {sidebar_norm}-norm; this run trains {wiring_choice}-norm, as "
               "the form says (the sidebar's choice applies to the other pages).")


def build_spec() -> JobSpec:
    """The form's values as a job (ValueError / ConfigError naming a bad field)."""
    base = PRESETS["tiny"].replace(n_layers=int(layers), d_model=int(width), n_heads=int(heads), n_ctx=int(block),
                                   name=f"shakespeare-{layers}L-d{width}")
    norms = ["pre", "post"] if wiring_choice == "both" else [wiring_choice]
    configs = {norm: base.replace(norm=norm, name=f"{base.name}-{norm}") for norm in norms}
    settings = TrainSettings(steps=int(steps), batch_size=int(batch), block_size=int(block), lr=float(lr),
                             warmup=int(warmup), grad_clip=float(clip), eval_every=max(5, int(steps) // 10),
                             eval_batches=2, seed=int(seed))
    label = (f"{layers}L d{width} {heads}h, {WIRINGS[wiring_choice]}, lr {lr:g}, warmup {warmup}, "
             f"{steps} steps, clip {'off' if not clip else clip}, {init} init")
    return JobSpec(configs, settings, init, label)


try:
    spec = build_spec()
    n_params = total_params(next(iter(spec.configs.values())))
    st.caption(f"{len(spec.configs)} model(s) of {n_params:,} parameters ({n_params - VOCAB * int(width):,} outside "
               f"the token embedding); {int(batch) * int(block):,} tokens per step; "
               f"{int(steps) * int(batch) * int(block):,} tokens in all (the corpus has about 300,000). This server "
               f"allows {limits.server_limits().training_tokens:,} tokens and {limits.server_limits().training_seconds:,} s "
               f"a run, {limits.server_limits().jobs_per_session} run(s) at a time a visitor.")
except (ValueError, ConfigError) as err:
    spec = None
    st.error(f"These settings do not make a valid run: {err}")

if submitted and spec is not None:
    owner = jobs.session_id()
    try:
        job = REGISTRY.start(spec, owner=owner, alive=lambda: jobs.session_alive(owner))
    except RuntimeError as err:  # JobLimitError (a RuntimeError; the class may predate a code reload)
        st.warning(str(err))
    else:
        state["train_job"] = job.id
        state["train_jobs"] = [job.id] + [j for j in state["train_jobs"] if j != job.id]

# ---- the selected run ------------------------------------------------------------------------------------------
mine = [j for j in state["train_jobs"] if REGISTRY.get(j) is not None]
if not mine:
    st.info("No run yet: choose settings and press Start training.")
    st.stop()
if state.get("train_job") not in mine:
    state["train_job"] = mine[0]


def pick_run() -> None:
    state["train_job"] = state["train_run_pick"]


# The chosen run lives in "train_job", not in the picker's own key: Streamlit drops a widget's key while the page
# is away, and the picker recreated on return came back showing an older run than the one just started.
if len(mine) > 1:
    state["train_run_pick"] = state["train_job"]
    st.selectbox("Run", mine, key="train_run_pick", on_change=pick_run,
                 format_func=lambda j: f"{j}: {REGISTRY.get(j).spec.label}")
job = REGISTRY.get(state["train_job"])
st.subheader(f"{job.id}: {job.spec.label}")
smoothing = st.slider("Smoothing of the training loss", 0.0, 0.99, 0.6, 0.01, key="train_smooth",
                      help="Exponential moving average of the per-batch loss; 0 shows it raw.")
live_at_start = not job.finished


@st.fragment(run_every=1.5 if live_at_start else None)
def live_view() -> None:
    snap = job.snapshot()
    if live_at_start and snap.finished:
        st.rerun()  # the run ended: redraw the whole page once, with the results below
    c = st.columns([4, 1])
    if snap.status in ("queued", "loading"):
        c[0].progress(0.0, text="Loading the corpus…")
    else:
        verb = "Stopping after this step" if snap.stop_requested and not snap.finished else snap.status.capitalize()
        c[0].progress(min(1.0, snap.fraction), text=f"{verb}: step {snap.steps_done} of {snap.total_steps} · "
                                                    f"{snap.elapsed_s:.0f} s elapsed · ETA {snap.eta}")
    if not snap.finished:
        c[1].button("Stop", key="train_stop", on_click=job.request_stop, icon=":material/stop:",
                    disabled=snap.stop_requested, width="stretch")
    if snap.logs:
        cols = st.columns(max(1, len(snap.logs)))
        for col, (name, records) in zip(cols, snap.logs.items()):
            vals = [r["val_loss"] for r in records if r["val_loss"] is not None]
            col.metric(f"{name}-norm train loss", f"{records[-1]['train_loss']:.3f}",
                       help=f"Last validation loss: {vals[-1]:.3f}" if vals else None)
        display.show_figure(fig_train.loss_curves({f"{n}-norm": r for n, r in snap.logs.items()}, smoothing,
                                             {"uniform guess, ln 50257": math.log(VOCAB)}),
                       key="train_loss_fig")


live_view()

if not job.finished:
    st.caption("You can leave this page: the run goes on, and its results wait here.")
    st.stop()

snap = job.snapshot()
if job.status == FAILED:
    st.error(f"The run failed: {job.error}")
    st.stop()
if not job.models or not snap.steps_done:  # stopped while loading or before its first step: nothing trained
    st.info(f"{'Stopped' if job.status == STOPPED else 'Finished'} before its first step: there is no trained "
            "model to use.")
    st.stop()
finals = {name: r.final for name, r in job.results.items()}
done_steps = snap.steps_done
why = {"time": f", at this server's time limit of {limits.server_limits().training_seconds:,} s a run",
       "left": ", because the session that started it closed"}.get(job.stop_reason, "")
st.success(("Stopped" if job.status == STOPPED else "Finished") +
           f" after {done_steps} of {snap.total_steps} steps in {snap.elapsed_s:.0f} s{why}.")
if snap.logs:
    clip = job.spec.settings.grad_clip or None
    display.show_figure(fig_train.training_dynamics({f"{n}-norm": r for n, r in snap.logs.items()}, clip),
                   key="train_dyn_fig")
if len(finals) == 2 and all(f["val_loss"] is not None for f in finals.values()):
    gap = finals["post"]["val_loss"] - finals["pre"]["val_loss"]
    st.caption(f"Final validation loss: pre-norm {finals['pre']['val_loss']:.3f}, post-norm "
               f"{finals['post']['val_loss']:.3f} ({'post-norm is higher' if gap > 0 else 'post-norm is lower'} "
               f"by {abs(gap):.3f} nats/token).")

st.subheader("Use the trained model")
for name, model in job.models.items():
    run_id = f"{job.id} {name}-norm ({model.config.n_layers}L d{model.config.d_model})"
    jobs.register_trained_model(run_id, model)
    c = st.columns([2, 1.2, 1.2])
    final = finals[name]
    val = f", validation loss {final['val_loss']:.3f}" if final["val_loss"] is not None else ""
    c[0].markdown(f"**{name}-norm**: step {final['step']}, train loss {final['train_loss']:.3f}{val}")

    def open_in_sidebar(run_id: str = run_id) -> None:
        state["model_source"] = K.SOURCE_TRAINED
        state["trained_run"] = run_id

    c[1].button("Open in the other pages", key=f"train_open_{job.id}_{name}", on_click=open_in_sidebar,
                help="Selects this model in the sidebar (Source: trained in this session).",
                width="stretch")
    c[2].download_button("Download checkpoint", data=lambda name=name: job.checkpoint_zip(name),
                         file_name=f"{job.id}-{name}-norm.zip", mime="application/zip",
                         key=f"train_dl_{job.id}_{name}", on_click="ignore", icon=":material/download:",
                         width="stretch",
                         help="model.safetensors + config.json (+ history.json); unzip and load with "
                              "gptviz.weights.load_checkpoint(folder).")
st.caption("Trained models stay in this server's memory until it restarts; download a checkpoint to keep one.")



@st.cache_data(max_entries=16, show_spinner="Sampling…")
def sample(job_id: str, name: str, ids: tuple[int, ...], _model) -> list[int]:
    """40 new tokens from a trained model (cached per run, model and prompt)."""
    return generate(_model, list(ids), 40, temperature=0.8, top_k=40, seed=0)


with st.expander("Samples from the trained model(s)", expanded=True):
    sample_cfg = next(iter(job.models.values())).config
    prompt = sidebar.prompt_tokens(sample_cfg.n_ctx, vocab_size=sample_cfg.vocab_size)
    if prompt is not None:
        g = st.columns(len(job.models))
        for col, (name, model) in zip(g, job.models.items()):
            try:
                ids = sample(job.id, name, prompt.ids, model)
            except (ValueError, RuntimeError) as err:
                col.error(f"Could not generate: {err}")
                continue
            col.markdown(f"**{name}-norm** (40 tokens, temperature 0.8, top-k 40, seed 0)")
            col.code(decode(ids[len(prompt.ids):]), language=None, wrap_lines=True)
