"""How a generation reads on the page, live or finished: its status, its text so far with a line of counts and
speeds, the next-token list, and a finished run's replay step (gptviz.app.live draws them; both pages call them as
live.NAME)."""

from __future__ import annotations

import streamlit as st

from ..model.tokenizer import EOT, EOT_ID, decode, token_labels
from .display import monospace_text


def cut_reason(settings: dict) -> str:
    """What removed the grey tokens of a generation's next-token bars: greedy decoding keeps only the
    most probable token; otherwise top-k/top-p."""
    return "greedy decoding (temperature 0)" if settings.get("temperature") == 0 else "top-k/top-p"


def writing_speed(run: dict, live: bool) -> str:
    """': the model wrote them in 0.38 s (53 tokens/s); shown at 5 tokens/s (the Pace setting)' for a finished
    generation: the model's own time (the pace's waits left out, whatever drawing cost), then, where the pace held
    the tokens back, the rate they were shown at (tokens over the run's whole time), so the two numbers are not read
    as one speed that contradicts the replay the reader watched (issue 62)."""
    seconds, n = run.get("seconds"), len(run["steps"])
    if live or not seconds or not n:
        return ""
    text = f": the model wrote {'it' if n == 1 else 'them'} in {seconds:.2f} s ({n / seconds:.0f} tokens/s)"
    wall = run.get("wall_seconds")
    if run.get("pace") == 0:
        return text + "; shown one token per click"
    if wall and wall - seconds > 0.1 * wall:  # paced: the waits were more than a tenth of its time
        rate = n / wall
        return text + f"; shown at {rate:.{0 if rate >= 1 else 1}f} tokens/s (the Pace setting)"
    return text


def generated_text(text: str, live: bool, height: int | None = None) -> None:
    """A generation's prompt and continuation, never Markdown. Live: st.text in a bordered box, because st.code's syntax
    highlighter was a large part of the browser's work at each redraw (a Chromium profile: docs/benchmarks-history.md,
    "The live page in a browser"), on the cores the model shares; finished: st.code, with its copy button."""
    if live:
        monospace_text(text, "generated", border=True, height=height)
    else:
        st.code(text, language=None, wrap_lines=True)


def next_token_text(steps, enc=None) -> str:
    """A live view's next-token list as plain text (st.text: never Markdown): the last step's sampled token and the
    8 most probable. Text, not a bar chart, while the model writes: each redraw is a script run beside it."""
    last = steps[-1]
    shown = last.top[:8]
    top = "\n".join(
        f"{label:>14}  {t[1]:.3f}" for label, t in zip(token_labels([t[0] for t in shown], enc), shown, strict=True)
    )
    return (
        f"Step {len(steps) - 1}: sampled {last.piece} (p {last.prob:.3f}, rank {last.rank})\n"
        f"most probable next tokens:\n{top}"
    )


def status_line(run: dict, live: bool) -> None:
    """The run's progress, or how it ended."""
    steps, total = run["steps"], run["settings"]["max_new_tokens"]
    if live and run.get("ahead") is not None:
        ahead = run["ahead"]
        st.info(
            f"Waiting for a free generation slot: {ahead} generation{'s' if ahead != 1 else ''} ahead of yours. "
            "It starts by itself; Stop leaves the line.",
            icon=":material/hourglass_top:",
        )
    elif live:
        waiting = " (press Next token for the next one)" if run.get("waiting_for_click") else ""
        st.progress(len(steps) / total, text=f"Generating: {len(steps)} of {total} tokens{waiting}")
    elif run.get("stopped"):
        st.info(f"Stopped after {len(steps)} of {total} tokens; the text so far is kept.")
    elif steps and len(steps) < total and steps[-1].token_id == EOT_ID:
        st.info(f"The model wrote {EOT} after {len(steps)} tokens, which ends the text.")
    if run.get("error"):
        st.error(f"Generation failed: {run['error']}")


def text_so_far(run: dict, live: bool, upto: int | None = None, height: int | None = None) -> None:
    """The prompt and the new tokens through step `upto` (all when None), then a line of counts. `height`: a live
    text's box, fixed and scrolled to its end (a long run's text then never pushes what follows off the screen)."""
    steps = run["steps"]
    shown = steps if upto is None else steps[: upto + 1]
    # decoded whole: GPT-1's BPE ends a word in its last piece ("</w>"), so the prompt's end and the first new token
    # are spaced only in one decode (GPT-2's text is the same either way, bar a character split across the two)
    generated_text(decode(list(run["prompt"]) + [s.token_id for s in shown], run.get("enc")), live, height)
    if len(shown) < len(steps):
        st.caption(
            f"Replaying step {upto} of {len(steps) - 1}: the prompt's {len(run['prompt'])} tokens, then "
            f"{len(shown)} of the {len(steps)} new ones."
        )
    else:
        st.caption(f"The prompt's {len(run['prompt'])} tokens, then {len(steps)} new ones{writing_speed(run, live)}.")


def status_and_text(run: dict, live: bool, upto: int | None = None) -> None:
    """The run's progress or how it ended, then its text (through step `upto`) and a line of counts."""
    status_line(run, live)
    if run["steps"]:
        text_so_far(run, live, upto)


def replay_step(run: dict, setting) -> int:
    """A finished run's step slider (`setting`: its record, settings.GEN_STEP or ATT_GEN_STEP): the step its map,
    text and next-token bars show (the last by default)."""
    from .sidebar import keep_valid

    key = setting.key
    S = len(run["steps"])
    keep_valid(key, list(range(S)), S - 1)
    st.session_state.setdefault(key, S - 1)
    if S < 2:
        return S - 1
    return setting.slider(st, min_value=0, max_value=S - 1)


def up_to(run: dict, step: int) -> dict:
    """The run as it stood after `step`."""
    return {**run, "steps": run["steps"][: step + 1]}
