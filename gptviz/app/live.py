"""Live generation, for the two pages that run it (Attention and Generation): the controls, the session's one
generation, and the live view a fragment redraws while the model writes.

The model writes in a background thread (gptviz.serve.live_generation) at the library's speed; a fragment with
`run_every=LIVE_REDRAW_S` redraws what it has produced, so drawing never slows the model and a widget change does
not stop it. Generate starts the model from its button's callback, before the page's script draws anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from ..figures.browser.attention_map import generation_payload
from ..model.heads import MEAN_HEAD
from ..model.model import GPT
from ..model.tokenizer import token_labels
from ..serve import limits
from ..serve.live_generation import LiveGeneration
from . import keys as K
from . import settings as S
from .components import attention_map
from .display import head_name, monospace_text
from .jobs import client_address, generation_slots, session_alive, session_id
from .live_text import (  # noqa: F401
    cut_reason,
    generated_text,
    next_token_text,
    replay_step,
    status_and_text,
    status_line,  # pages call them as live.NAME
    text_so_far,
    up_to,
    writing_speed,
)
from .live_why import under_live_text
from .model_service import ModelSpec, hold_for_generation, load_model
from .rules import Setting

LIVE_REDRAW_S = 0.5  # the longest a live view goes without a frame (a paced run: no news for a while)
LIVE_TICK_S = 0.1  # the live fragment's run_every: a run that outlasts it has the next one queued at once
DRAW_GAP_S = 0.1  # the least time between two frames (wait_for_frame)...
# ...and at the free pace ("as fast as it writes"): tokens come faster than anyone reads them, and each frame costs the
# browser far more than the server (Streamlit's elements drawn again), CPU taken from the model where the browser
# shares the machine (`python -m benchmarks live-pace`)
FREE_DRAW_GAP_S = 0.25
FRAME_COST_X = 3  # ...and at least this many times the last frame's own time (drawing shares the CPU with the model)
FLUSH_S = 0.05  # the last frame's time to go out to the browser before the page's rerun (live_fragment)
POLL_S = 0.01  # how often a frame's wait looks for new tokens


@dataclass(frozen=True)
class Controls:
    """One page's generation widgets: its sampling settings (records in settings.py) and its buttons' keys."""

    page: str  # the page a generation belongs to (leaving it stops the generation)
    tokens: Setting
    temperature: Setting
    top_k: Setting
    top_p: Setting
    seed: Setting
    generate: str
    stop: str
    pace: Setting
    next: str
    eos: Setting | None = None  # a "stop at <|endoftext|>" checkbox, where the page offers one
    on_start: Callable[[], None] | None = None  # the page's own reset when a new run starts


ATTENTION = Controls(
    "attention",
    S.ATT_GEN_N,
    S.ATT_GEN_TEMP,
    S.ATT_GEN_TOPK,
    S.ATT_GEN_TOPP,
    S.ATT_GEN_SEED,
    K.ATT_GENERATE,
    K.ATT_STOP,
    S.ATT_GEN_PACE,
    K.ATT_GEN_NEXT,
    on_start=lambda: st.session_state.pop(K.ATT_GEN_STEP, None),
)  # a new run: replay its last step
GENERATION = Controls(
    "generation",
    S.GEN_N,
    S.GEN_TEMP,
    S.GEN_TOPK,
    S.GEN_TOPP,
    S.GEN_SEED,
    K.GEN_GENERATE,
    K.GEN_STOP,
    S.GEN_PACE,
    K.GEN_NEXT,
    eos=S.GEN_EOS,
    on_start=lambda: st.session_state.pop(K.GEN_STEP, None),
)  # a new run: inspect its last step


def controls(c: Controls, spec: ModelSpec, model: GPT, ids) -> None:
    """The sampling settings, Generate and Stop. A reason Generate could not start shows under the buttons."""
    from .sidebar import keep_valid

    vocab = model.config.vocab_size
    keep_valid(c.top_k.key, range(vocab + 1), 0)  # a link's value past this model's vocabulary
    g = st.columns(5)
    c.tokens.number_input(g[0])
    c.temperature.slider(g[1])
    c.top_k.number_input(g[2], max_value=vocab)
    c.top_p.slider(g[3])
    c.seed.number_input(g[4])
    b1, b2, b3, b4 = st.columns([1, 1, 1, 3], vertical_alignment="bottom")
    b1.button("Generate", type="primary", key=c.generate, width="stretch", on_click=_start, args=(c, spec, tuple(ids)))
    b2.button(
        "Stop",
        key=c.stop,
        width="stretch",
        on_click=stop_pressed,
        help="Ends the generation and keeps the tokens written so far.",
    )
    b3.button(
        "Next token",
        key=c.next,
        width="stretch",
        on_click=next_token,
        args=(c,),
        help="Writes one more token of the running generation (and sets the pace to one token per click).",
    )
    c.pace.setdefault(st.session_state)
    c.pace.select_slider(b4, on_change=apply_pace, args=(c,))
    with st.container(horizontal=True):
        if c.eos:
            c.eos.checkbox(st)
        S.LIVE_WHY.checkbox(st)
    if st.session_state.get(K.GENERATION_ERROR):
        st.error(st.session_state.pop(K.GENERATION_ERROR))


def compact_controls(c: Controls, spec: ModelSpec, model: GPT, ids, on_start=None) -> None:
    """A page's generation controls in little room (the Attention page beside its map): Generate with Temperature
    beside it, Stop and Next token, the other settings behind a button. The same settings as controls(), so links
    and a run's settings are the same. `on_start`: called after Generate started the model (a page whose controls
    sit in a fragment reruns the whole page from it)."""
    from .sidebar import keep_valid

    vocab = model.config.vocab_size
    keep_valid(c.top_k.key, range(vocab + 1), 0)
    c.pace.setdefault(st.session_state)
    # centred: Generate sits above the slider's foot (on a phone the first screen ends near this row)
    with st.container(horizontal=True, vertical_alignment="center", gap="xsmall"):
        st.button(
            "Generate",
            type="primary",
            key=c.generate,
            on_click=_start_then,
            args=(c, spec, tuple(ids), on_start),
            help="The model writes a continuation; watch each new token's attention row appear.",
        )
        c.temperature.slider(st, width=150)
        st.button(
            "Stop", key=c.stop, on_click=stop_pressed, help="Ends the generation and keeps the tokens written so far."
        )
        st.button(
            "Next token",
            key=c.next,
            on_click=next_token,
            args=(c,),
            help="Writes one more token of the running generation (and sets the pace to one token per click).",
        )
        with st.popover("More", icon=":material/tune:", help="The other settings: length, top-k, top-p, seed, pace."):
            c.tokens.number_input(st)
            c.top_k.number_input(st, max_value=vocab)
            c.top_p.slider(st)
            c.seed.number_input(st)
            c.pace.select_slider(
                st,
                on_change=apply_pace,
                args=(c,),
                help="How fast the new tokens appear, so the map can be watched growing row by "
                "row; the model still writes at its own speed.",
            )
            S.LIVE_WHY.checkbox(st)
    if st.session_state.get(K.GENERATION_ERROR):
        st.error(st.session_state.pop(K.GENERATION_ERROR))


def _start_then(c: Controls, spec: ModelSpec, ids, then) -> None:
    _start(c, spec, ids)
    if then is not None:
        then()


def settings_from(c: Controls) -> dict:
    """The settings the page's widgets hold, as stream() takes them."""
    state = st.session_state
    top_p = float(state.get(c.top_p.key, c.top_p.default))
    settings = dict(
        max_new_tokens=int(state.get(c.tokens.key, c.tokens.default)),
        temperature=float(state.get(c.temperature.key, c.temperature.default)),
        top_k=int(state.get(c.top_k.key, c.top_k.default)) or None,
        top_p=top_p if top_p < 1 else None,
        seed=int(state.get(c.seed.key, c.seed.default)),
    )
    if c.eos:
        settings["stop_at_eos"] = bool(state.get(c.eos.key, c.eos.default))
    return settings


def pace_from(c: Controls) -> float | None:
    """The pace the page's widget holds (tokens per second; None: free; 0: by clicks)."""
    return S.PACES.get(st.session_state.get(c.pace.key, c.pace.default), S.PACES[S.DEFAULT_PACE])


def _running_job(c: Controls) -> LiveGeneration | None:
    entry = st.session_state.get(K.GENERATION)
    return entry["job"] if entry and entry["page"] == c.page and entry["job"].running else None


def apply_pace(c: Controls) -> None:
    """The pace widget's callback: a running generation follows it at once."""
    job = _running_job(c)
    if job is not None:
        job.set_pace(pace_from(c))


def next_token(c: Controls) -> None:
    """Next token's callback: one more step of the running generation, from now on one per click."""
    st.session_state[c.pace.key] = "one token per click"
    job = _running_job(c)
    if job is not None:
        if job.pace != 0:
            job.set_pace(0)
        job.advance()


def _start(c: Controls, spec: ModelSpec, ids) -> None:
    """Generate's callback: it runs before the page's script, so the model starts writing before anything is
    drawn (the script that follows shares the interpreter with it, so the sooner the better). It takes the model's
    spec, not the model: a session keeps its buttons' arguments, and kept a model the store had dropped (issue 57)."""
    if c.on_start:
        c.on_start()
    try:
        model = load_model(spec)
    except (ValueError, RuntimeError, OSError) as err:
        st.session_state[K.GENERATION_ERROR] = f"Generation could not start: {err}"
        return
    try:
        start_generation(spec, model, ids, settings_from(c), c.page, pace=pace_from(c))
    except ValueError as err:
        st.session_state[K.GENERATION_ERROR] = f"Cannot generate with these settings: {err}"
    except RuntimeError as err:
        st.session_state[K.GENERATION_ERROR] = f"Generation could not start: {err}"


def start_generation(
    spec: ModelSpec, model: GPT, ids, settings: dict, page: str, pace: float | None = None
) -> LiveGeneration:
    """Start a live generation for this session (stopping the one it had), stored with the model and the page it
    belongs to. ValueError (bad settings or prompt) or RuntimeError (every server slot busy) before anything is
    stored."""
    old = st.session_state.get(K.GENERATION)
    if old:
        old["job"].stop()
        old["job"].wait(5)  # a token at most: frees its server slot for this one
    sid = session_id()
    explain = bool(st.session_state.get(S.LIVE_WHY.key, S.LIVE_WHY.default))  # each token's top contributors
    release = hold_for_generation(spec, model, ids, settings, explain)  # its model and working memory, counted
    try:
        job = LiveGeneration(
            model,
            ids,
            settings,
            owner=sid or "",
            slots=generation_slots(),
            alive=lambda: session_alive(sid),
            threads=limits.server_limits().generation_threads,
            address=client_address(),
            on_end=release,
            pace=pace,
            explain=explain,
        )
    except BaseException:
        release()
        raise
    st.session_state[K.GENERATION] = {"spec": spec, "page": page, "job": job}
    return job


def stop_generation(unless_page: str | None = None) -> None:
    """Stop this session's live generation, unless it belongs to `unless_page`. It keeps the tokens the page had
    shown: the model writes ahead of the redraws, and the text must stop where the reader saw it stop."""
    entry = st.session_state.get(K.GENERATION)
    if entry and entry["page"] != unless_page:
        entry["job"].stop(keep=entry["job"].shown)


STOP_WAIT_S = 1.0  # a stopped model ends before its next token: a forward pass at most, or a tenth of a second in line


def stop_pressed() -> None:
    """Stop's callback: stop the generation and wait until it is over, so the run the click starts draws it
    finished (not one more live frame, then a second run)."""
    stop_generation()
    entry = st.session_state.get(K.GENERATION)
    if entry:
        entry["job"].wait(STOP_WAIT_S)


def stored_generation(spec: ModelSpec, ids, page: str) -> LiveGeneration | None:
    """This session's generation (running or over) when it ran on this model, prompt and page, else None."""
    entry = st.session_state.get(K.GENERATION)
    if not entry or entry["spec"] != spec or entry["page"] != page or entry["job"].prompt != tuple(int(i) for i in ids):
        return None
    return entry["job"]


def generation_view(job: LiveGeneration) -> dict:
    """What a page draws of a generation, read once so every part of one draw agrees:
    {prompt, settings, steps, running, stopped, error, seconds (the model's own time), pace, wall_seconds (from its
    start to its end, the pace's waits included), ...}. While it runs, it also records on the job how many
    steps this draw shows (`job.shown`): what Stop keeps."""
    running = job.running  # read before the steps: a run seen finished has every step in the snapshot
    steps = job.snapshot()
    if running:
        job.shown = len(steps)  # what Stop keeps (a running job is drawn only by its live view)
    started, finished = job.started_at, job.finished_at
    return {
        "prompt": job.prompt,
        "enc": job.enc,
        "settings": job.settings,
        "steps": steps,
        "running": running,
        "stopped": job.stopped,
        "error": job.error,
        "seconds": job.seconds,
        "ahead": job.ahead,
        "waiting_for_click": job.waiting_for_click,
        "pace": job.pace,
        "wall_seconds": finished - started if started is not None and finished is not None else None,
        "explained": job.contributors,  # each step's top contributors as they are found (None: switched off)
    }


def wait_for_first_token(job: LiveGeneration, most: float = LIVE_REDRAW_S) -> None:
    """Right after Generate: wait (asleep) up to `most` s for the first token, not a redraw later (issue 60)."""
    deadline = time.monotonic() + most
    while job.running and not job.steps and job.ahead is None and time.monotonic() < deadline:
        time.sleep(0.005)


def wait_for_news(job: LiveGeneration, shown: int, until: float) -> None:
    """Sleep until the job has more than `shown` steps, or is over, or the clock passes `until` (monotonic)."""
    while job.running and len(job.steps) <= shown and time.monotonic() < until:
        job.wait(POLL_S)  # returns at once when the job ends


def wait_for_frame(job: LiveGeneration, last: dict, clock: Callable[[], float] = time.monotonic) -> None:
    """Before a live frame: sleep until DRAW_GAP_S (FREE_DRAW_GAP_S at the free pace), or FRAME_COST_X times the last
    frame's own time, has passed since the last frame began (drawing shares the CPU with the model), then until a
    token the last frame did not show arrives, at most LIVE_REDRAW_S after the last frame. The job's end wakes both
    waits: its last state is drawn at once. `last`: {"at": when the last frame began, "cost": its seconds, "steps":
    the steps it showed}."""
    at = last.get("at")
    if at is None:
        return
    gap = FREE_DRAW_GAP_S if job.pace is None else DRAW_GAP_S
    job.wait(max(0.0, at + max(gap, FRAME_COST_X * last["cost"]) - clock()))
    wait_for_news(job, last["steps"], at + LIVE_REDRAW_S)


def live_fragment(spec: ModelSpec, ids, page: str, draw: Callable[[dict], None]) -> None:
    """Draw this page's running generation as it grows (issue 60: the page at the engine's pace). A fragment with a
    short run_every (LIVE_TICK_S): each run draws at once every token that arrived since the last frame, then waits,
    asleep, for tokens it did not show (wait_for_frame); a run that outlasts the tick has the next one queued, so
    frames follow the tokens with no timer's wait between. Drawing first and waiting after matters: a run's start
    drops what the browser was not sent yet of the fragment (Streamlit clears its queue), and a run that waited first
    left the last frame's elements faded as stale (on a busy machine frames showed half drawn: the progress new, the
    map and the next-token list old). The fragment's first run, in the page's own run, waits for the first token
    only (the page's other parts wait for it). The frame that finds the job over draws its last state at once; the
    next run reruns the page, which stops the timer and draws the finished run."""
    last: dict = {}

    def tick() -> None:
        job = stored_generation(spec, ids, page)
        if job is None or last.get("over"):  # the last frame drew the end: now the finished run
            st.rerun()
        first = not last
        if first:
            wait_for_first_token(job)
        started = time.monotonic()
        run = generation_view(job)
        draw(run)
        last.update(at=started, cost=time.monotonic() - started, steps=len(run["steps"]), over=not run["running"])
        if last["over"]:
            time.sleep(FLUSH_S)  # the last frame out before the run that replaces it starts
        elif not first:
            wait_for_frame(job, last)

    st.fragment(tick, run_every=LIVE_TICK_S)()


# ---- drawing, shared by both pages ------------------------------------------------------------------------


def map_pick(layer_key: str, head_key: str, n_layers: int, n_heads: int):
    """The heatmap component's on_pick for a page whose pickers live in `layer_key` and `head_key`: they follow
    the layer and head picked in the map (head index n_heads is the mean)."""

    def follow(layer: int, head_index: int) -> None:
        if 0 <= layer < n_layers and 0 <= head_index <= n_heads:
            st.session_state[layer_key] = layer
            st.session_state[head_key] = MEAN_HEAD if head_index == n_heads else head_index

    return follow


def generation_map(run: dict, *, layer: int, head: int, scale: str, key: str, on_pick, every_layer: bool) -> None:
    """The generation's attention in the browser's heatmap: one row per generated token."""
    steps = run["steps"]
    n_heads = steps[0].attention.shape[1]
    labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps], run["enc"])
    attention_map(
        generation_payload(
            steps,
            labels,
            len(run["prompt"]),
            layer=layer,
            head=head,
            scale=scale,
            mean_head=MEAN_HEAD,
            head_names=[head_name(h) for h in [*range(n_heads), MEAN_HEAD]],
            every_layer=every_layer,
        ),
        key=key,
        on_pick=on_pick,
    )


def draw_live(
    run: dict, *, layer: int, head: int, scale: str, map_key: str, on_pick, text_height: int | None = None
) -> None:
    """A running generation as both pages show it: progress, then the growing map beside the text and the
    next-token list (text, not a chart: each redraw is a script run beside the model), so both fit one screen."""
    status_line(run, live=True)
    if not run["steps"]:
        return
    left, right = st.columns([3, 2], gap="medium")
    with left:  # the picked layer only: a few hundred KB less per redraw
        generation_map(run, layer=layer, head=head, scale=scale, key=map_key, on_pick=on_pick, every_layer=False)
    with right:
        text_so_far(run, live=True, height=text_height)
        under_live_text(run)  # each new token's top contributors (issue 58), found as the model writes
        monospace_text(next_token_text(run["steps"], run["enc"]), "next")
