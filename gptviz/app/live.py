"""Live generation, for the two pages that run it (Attention and Generation): the controls, the session's one
generation, and the live view a fragment redraws while the model writes.

The model writes in a background thread (gptviz.live_generation) at the library's speed; a fragment with
`run_every=LIVE_REDRAW_S` redraws what it has produced, so drawing never slows the model and a widget change does
not stop it. Generate starts the model from its button's callback, before the page's script draws anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import streamlit as st

from .. import limits
from ..live_generation import LiveGeneration
from ..model import GPT
from ..tokenizer import EOT, EOT_ID, decode, token_labels
from . import keys as K
from .component.attention_map import attention_map, generation_payload
from .display import MEAN_HEAD, head_name, monospace_text
from .jobs import client_address, generation_slots, session_alive, session_id
from .models import ModelSpec, hold_for_generation

LIVE_REDRAW_S = 0.5  # how often a page redraws a running generation (0.25 s: twice the script runs, the model 4x slower)


def after_token() -> None:
    """Called by the generation thread after each token: nothing here; tests replace it to hold the thread."""


@dataclass(frozen=True)
class Controls:
    """One page's generation widgets: their session keys and defaults."""
    page: str                 # the page a generation belongs to (leaving it stops the generation)
    tokens: str
    temperature: str
    top_k: str
    top_p: str
    seed: str
    generate: str
    stop: str
    eos: str | None = None    # a "stop at <|endoftext|>" checkbox, where the page offers one
    default_tokens: int = 20
    on_start: Callable[[], None] | None = None  # the page's own reset when a new run starts


ATTENTION = Controls("attention", K.ATT_GEN_N, K.ATT_GEN_TEMP, K.ATT_GEN_TOPK, K.ATT_GEN_TOPP, K.ATT_GEN_SEED,
                     K.ATT_GENERATE, K.ATT_STOP)
GENERATION = Controls("generation", K.GEN_N, K.GEN_TEMP, K.GEN_TOPK, K.GEN_TOPP, K.GEN_SEED, K.GEN_GENERATE,
                      K.GEN_STOP, eos=K.GEN_EOS, default_tokens=30,
                      on_start=lambda: st.session_state.pop(K.GEN_STEP, None))  # a new run: inspect its last step


def controls(c: Controls, spec: ModelSpec, model: GPT, ids) -> None:
    """The sampling settings, Generate and Stop. A reason Generate could not start shows under the buttons."""
    from .sidebar import keep_valid
    vocab = model.config.vocab_size
    keep_valid(c.top_k, range(vocab + 1), 0)  # a link's value past this model's vocabulary
    g = st.columns(5)
    g[0].number_input("New tokens", min_value=1, max_value=200, value=c.default_tokens, step=1, key=c.tokens)
    g[1].slider("Temperature", 0.0, 2.0, 1.0, 0.05, key=c.temperature,
                help="Divides the logits before the softmax: below 1 sharpens, above 1 flattens; 0 always takes "
                     "the most probable token (greedy).")
    g[2].number_input("Top-k (0 = off)", min_value=0, max_value=vocab, value=0, step=1, key=c.top_k,
                      help="Sample only from the k most probable tokens.")
    g[3].slider("Top-p (1 = off)", 0.05, 1.0, 0.9, 0.05, key=c.top_p,
                help="Sample only from the most probable tokens whose probabilities add up to p.")
    g[4].number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, step=1, key=c.seed,
                      help="The same seed and settings give the same text.")
    b1, b2, b3 = st.columns([1, 1, 4], vertical_alignment="center")
    b1.button("Generate", type="primary", key=c.generate, width="stretch", on_click=_start,
              args=(c, spec, model, tuple(ids)))
    b2.button("Stop", key=c.stop, width="stretch", on_click=stop_generation,
              help="Ends the generation and keeps the tokens written so far.")
    if c.eos:
        b3.checkbox(f"Stop at {EOT}", value=False, key=c.eos,
                    help="GPT-2's end-of-text token; a trained model writes it where a document ends.")
    if st.session_state.get(K.GENERATION_ERROR):
        st.error(st.session_state.pop(K.GENERATION_ERROR))


def settings_from(c: Controls) -> dict:
    """The settings the page's widgets hold, as stream() takes them."""
    state = st.session_state
    top_p = float(state.get(c.top_p, 0.9))
    settings = dict(max_new_tokens=int(state.get(c.tokens, c.default_tokens)),
                    temperature=float(state.get(c.temperature, 1.0)), top_k=int(state.get(c.top_k, 0)) or None,
                    top_p=top_p if top_p < 1 else None, seed=int(state.get(c.seed, 0)))
    if c.eos:
        settings["stop_at_eos"] = bool(state.get(c.eos, False))
    return settings


def _start(c: Controls, spec: ModelSpec, model: GPT, ids) -> None:
    """Generate's callback: it runs before the page's script, so the model starts writing before anything is
    drawn (the script that follows shares the interpreter with it, so the sooner the better)."""
    if c.on_start:
        c.on_start()
    try:
        start_generation(spec, model, ids, settings_from(c), c.page)
    except ValueError as err:
        st.session_state[K.GENERATION_ERROR] = f"Cannot generate with these settings: {err}"
    except RuntimeError as err:
        st.session_state[K.GENERATION_ERROR] = f"Generation could not start: {err}"


def start_generation(spec: ModelSpec, model: GPT, ids, settings: dict, page: str) -> LiveGeneration:
    """Start a live generation for this session (stopping the one it had), stored with the model and the page it
    belongs to. ValueError (bad settings or prompt) or RuntimeError (every server slot busy) before anything is
    stored."""
    old = st.session_state.get(K.GENERATION)
    if old:
        old["job"].stop()
        old["job"].wait(5)  # a token at most: frees its server slot for this one
    sid = session_id()
    release = hold_for_generation(spec, model, ids, settings)  # its model and working memory, counted
    try:
        job = LiveGeneration(model, ids, settings, owner=sid or "", slots=generation_slots(),
                             alive=lambda: session_alive(sid), on_token=lambda: after_token(),
                             threads=limits.server_limits().generation_threads, address=client_address(),
                             on_end=release)
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


def stored_generation(spec: ModelSpec, ids, page: str) -> LiveGeneration | None:
    """This session's generation (running or over) when it ran on this model, prompt and page, else None."""
    entry = st.session_state.get(K.GENERATION)
    if not entry or entry["spec"] != spec or entry["page"] != page or \
            entry["job"].prompt != tuple(int(i) for i in ids):
        return None
    return entry["job"]


def generation_view(job: LiveGeneration) -> dict:
    """What a page draws of a generation, read once so every part of one draw agrees:
    {prompt, settings, steps, running, stopped, error, seconds}. While it runs, it also records on the job how many
    steps this draw shows (`job.shown`): what Stop keeps."""
    running = job.running  # read before the steps: a run seen finished has every step in the snapshot
    steps = job.snapshot()
    if running:
        job.shown = len(steps)  # what Stop keeps (a running job is drawn only by its live view)
    return {"prompt": job.prompt, "settings": job.settings, "steps": steps, "running": running,
            "stopped": job.stopped, "error": job.error, "seconds": job.seconds, "ahead": job.ahead}


def wait_if_nearly_done(job: LiveGeneration) -> None:
    """Before a live redraw: when the model should finish before the next one, wait for it (the script thread
    sleeps, holding nothing), so the finished text shows at once instead of up to LIVE_REDRAW_S later."""
    done, seconds = len(job.steps), job.seconds
    if not job.running or not done or not seconds:
        return
    remaining = (job.settings["max_new_tokens"] - done) * seconds / done
    if remaining < LIVE_REDRAW_S:
        job.wait(min(LIVE_REDRAW_S, 1.5 * remaining + 0.02))


def live_fragment(spec: ModelSpec, ids, page: str, draw: Callable[[dict], None]) -> None:
    """Run `draw(run)` every LIVE_REDRAW_S while this page's generation runs. The tick that finds it over draws
    the last state, then reruns the page once, which stops the timer and draws the finished run."""
    def tick() -> None:
        job = stored_generation(spec, ids, page)
        if job is None:
            st.rerun()
        wait_if_nearly_done(job)
        run = generation_view(job)
        draw(run)
        if not run["running"]:
            st.rerun()
    st.fragment(tick, run_every=LIVE_REDRAW_S)()


# ---- drawing, shared by both pages ------------------------------------------------------------------------

def cut_reason(settings: dict) -> str:
    """What removed the grey tokens of a generation's next-token bars: greedy decoding keeps only the
    most probable token; otherwise top-k/top-p."""
    return "greedy decoding (temperature 0)" if settings.get("temperature") == 0 else "top-k/top-p"


def writing_speed(run: dict, live: bool) -> str:
    """', written in 1.2 s (85 tokens/s)' for a finished generation: the model's own pace, whatever drawing cost."""
    seconds, n = run.get("seconds"), len(run["steps"])
    if live or not seconds or not n:
        return ""
    return f", written in {seconds:.2f} s ({n / seconds:.0f} tokens/s)"


def generated_text(text: str, live: bool) -> None:
    """A generation's prompt and continuation, never Markdown. Live: st.text in a bordered box, because st.code's
    syntax highlighter was a fifth of the browser's work at each redraw (a Chromium profile, benchmarks/README.md),
    on the two cores the model shares; finished: st.code, with its copy button."""
    if live:
        monospace_text(text, "generated", border=True)
    else:
        st.code(text, language=None, wrap_lines=True)


def next_token_text(steps) -> str:
    """A live view's next-token list as plain text (st.text: never Markdown): the last step's sampled token and the
    8 most probable. Text, not a bar chart, while the model writes: each redraw is a script run beside it."""
    last = steps[-1]
    top_ids = [t[0] for t in last.top[:8]]
    top = "\n".join(f"{label:>14}  {t[1]:.3f}" for label, t in zip(token_labels(top_ids), last.top))
    return (f"Step {len(steps) - 1}: sampled {last.piece} (p {last.prob:.3f}, rank {last.rank})\n"
            f"most probable next tokens:\n{top}")


def status_and_text(run: dict, live: bool) -> None:
    """The run's progress or how it ended, then its text and a line of counts."""
    steps, total = run["steps"], run["settings"]["max_new_tokens"]
    if live and run.get("ahead") is not None:
        ahead = run["ahead"]
        st.info(f"Waiting for a free generation slot: {ahead} generation{'s' if ahead != 1 else ''} ahead of yours. "
                "It starts by itself; Stop leaves the line.", icon=":material/hourglass_top:")
    elif live:
        st.progress(len(steps) / total, text=f"Generating: {len(steps)} of {total} tokens")
    elif run.get("stopped"):
        st.info(f"Stopped after {len(steps)} of {total} tokens; the text so far is kept.")
    elif steps and len(steps) < total and steps[-1].token_id == EOT_ID:
        st.info(f"The model wrote {EOT} after {len(steps)} tokens, which ends the text.")
    if run.get("error"):
        st.error(f"Generation failed: {run['error']}")
    if not steps:
        return
    generated_text(decode(run["prompt"]) + decode([s.token_id for s in steps]), live)
    st.caption(f"The prompt's {len(run['prompt'])} tokens, then {len(steps)} new ones{writing_speed(run, live)}.")


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
    labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps])
    attention_map(generation_payload(steps, labels, len(run["prompt"]), layer=layer, head=head, scale=scale,
                                     mean_head=MEAN_HEAD,
                                     head_names=[head_name(h) for h in [*range(n_heads), MEAN_HEAD]],
                                     every_layer=every_layer), key=key, on_pick=on_pick)


def draw_live(run: dict, *, layer: int, head: int, scale: str, map_key: str, on_pick) -> None:
    """A running generation as both pages show it: progress and text, then the growing map beside the next-token
    list (text, not a chart: each redraw is a script run beside the model)."""
    status_and_text(run, live=True)
    if not run["steps"]:
        return
    left, right = st.columns([3, 2], gap="medium")
    with left:  # the picked layer only: a few hundred KB less per redraw
        generation_map(run, layer=layer, head=head, scale=scale, key=map_key, on_pick=on_pick, every_layer=False)
    with right:
        monospace_text(next_token_text(run["steps"]), "next")
