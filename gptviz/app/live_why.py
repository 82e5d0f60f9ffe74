"""Under the live text: each written token's top three contributors ("L1H0 from ' Romeo' +35%": the attribution
graph's node influences on its logit, no edges and no check; issue 58), and one click from a written token to the Why
page's graph for it.

The model writes in its own thread (gptviz.serve.live_generation); the contributors are computed in the page's redraws
beside it, so they take CPU the model could use. They get a budget: a twentieth of the model's own time so far, and half
the time it waited for the pace (the CPU is idle then), at most TICK_S a redraw; the newest token first, earlier
ones as the budget allows; never a token expected to take longer than a redraw may spend. A small model gets every
token at a watching pace and a few at full speed; a large one (gpt2-small: a second a token) none while it writes:
the rest are on demand (the Generation page's replayed step, the Why page).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import streamlit as st

from ..methods.graph_contributors import Contributors, contributor_label
from ..model.tokenizer import decode
from . import keys as K
from . import settings as S
from .display import md_text, monospace_text
from .links import why_url
from .model_service import load_model
from .services import why_graph as services
from .services.why import pieces
from .unit_nav import go_to_why, unit_pills

# Of the model's own time: half the 10% it may be slowed by, because under load the contributors' CPU time comes out of
# the model's at about one for one (`python -m benchmarks live-why` measures the rate with and without them).
SHARE = 0.05
IDLE_SHARE = 0.5  # of the time the model waited for the pace (its CPU is free then)
TICK_S = 0.25  # the most one redraw spends on them (a redraw comes every 0.5 s)
# A token's contributors are computed only when their expected time fits the budget: the last measured on this model
# (scaled by the text's length), else a first guess from its size at FLOPS_GUESS, a rate a little below what one torch
# thread of a loaded 2-core machine reaches on gpt2-small's backward pass, so the first guess errs long
# (`python -m benchmarks live-why` runs the budget with this guess; `python -m benchmarks graph` times the pass).
FLOPS_GUESS = 4e10
MIN_COST_S = 0.01
LINES = 4  # the box under the text: the token, then its three contributors (a fixed height: no jumps)
ABOUT = (
    "Each new token's three most influential nodes of the attribution graph on its logit, with their share of "
    "that logit (influences overlap: a node's includes what later nodes do with its output, so shares need not "
    "add up to 100%). A head's token is the key it brings the most from. Computed beside the model within a "
    "twentieth of its time (and half of what it waits for the pace), newest first; the others on demand after "
    "the run."
)


@dataclass
class Explained:
    """The contributors found so far for one live generation."""

    job: object  # the LiveGeneration they belong to
    done: dict[int, Contributors] = field(default_factory=dict)  # step -> its contributors
    spent: float = 0.0  # seconds spent computing them


def budget_s(job, now: float) -> float:
    """Seconds the contributors may have taken by `now`: SHARE of the model's own time, IDLE_SHARE of its waits."""
    if job.started_at is None:
        return 0.0
    elapsed = (job.finished_at or now) - job.started_at
    busy = job.seconds or 0.0
    return SHARE * busy + IDLE_SHARE * max(0.0, elapsed - busy)


def first_guess_s(config, T: int) -> float:
    """A token's contributors on T tokens before any was measured on this model: the frozen pass and its backward,
    about 6 multiply-adds per weight of the blocks and token, at FLOPS_GUESS."""
    d = config.d_model
    return max(MIN_COST_S, 6 * config.n_layers * (4 * d * d + 2 * d * config.d_ff) * T / FLOPS_GUESS)


def explain_new(
    job,
    n_steps: int,
    explained: Explained,
    compute: Callable[[int], Contributors],
    expected: Callable[[int], float] = lambda i: 0.0,
    now: Callable[[], float] = time.perf_counter,
    on_cost: Callable[[int, float], None] = lambda i, seconds: None,
) -> int:
    """Compute contributors for the steps not yet explained, newest first, while the next one's `expected` time fits
    the budget and this redraw has spent less than TICK_S; `on_cost(i, seconds)` hears each one's time. A token
    expected to take longer than TICK_S is never started while the model writes: spent in one piece, the budget saved
    up from its waits held the CPU when it wanted it (`python -m benchmarks live-why` measures the rate at 5 tokens/s).
    Returns how many were computed."""
    started, count = now(), 0
    for i in reversed(range(n_steps)):
        if i in explained.done:
            continue
        t, cost = now(), expected(i)
        if cost > TICK_S or explained.spent + cost > budget_s(job, t) or t - started >= TICK_S:
            break
        explained.done[i] = compute(i)
        seconds = now() - t
        explained.spent += seconds
        on_cost(i, seconds)
        count += 1
    return count


def cost_keeper(spec, config, steps, prompt) -> tuple[Callable[[int], float], Callable[[int, float], None]]:
    """(expected, on_cost) for explain_new: the fastest time per token of text measured on this model in this process,
    times the text's length, else first_guess_s. The fastest, not the last: a slow outlier (a cold start, a moment of
    load) would keep every later token from starting, and with no token started nothing would correct it, while a
    time too short costs one token over the budget at most (the budget counts the time really spent)."""
    from .jobs import process_wide

    per_token: dict = process_wide("live_why_costs", dict)  # model spec -> seconds per token of text, the fastest

    def length(i: int) -> int:
        return len(services.step_ids(prompt, steps, i)[0])

    def expected(i: int) -> float:
        return per_token[spec] * length(i) if spec in per_token else first_guess_s(config, length(i))

    def on_cost(i: int, seconds: float) -> None:
        per_token[spec] = min(per_token.get(spec, float("inf")), seconds / max(length(i), 1))

    return expected, on_cost


def stored(job) -> Explained:
    """This session's contributors for `job` (a new run starts afresh)."""
    found = st.session_state.get(K.LIVE_WHY_STORE)
    if not isinstance(found, Explained) or found.job is not job:
        found = st.session_state[K.LIVE_WHY_STORE] = Explained(job)
    return found


def step_lines(run: dict, i: int, contributors: Contributors) -> str:
    """The token of step i and its contributors, one a line (plain text: never Markdown)."""
    steps = run["steps"]
    ids, _ = services.step_ids(run["prompt"], steps, i)
    tokens = [decode([t], run["enc"]) for t in ids]
    head = f"new token {i + 1}, {decode([steps[i].token_id], run['enc'])!r} (logit {contributors.metric:+.2f}):"
    return "\n".join([head] + [f"  {contributor_label(c, tokens)}" for c in contributors.top])


def under_live_text(run: dict) -> None:
    """While the model writes: the newest explained token's top three contributors, a count, and its Why link."""
    state = st.session_state
    entry = state.get(K.GENERATION)
    if not state.get(K.LIVE_WHY, S.LIVE_WHY.default) or not entry or not run["steps"]:
        return
    job, spec, steps = entry["job"], entry["spec"], run["steps"]
    explained = stored(job)
    expected, on_cost = cost_keeper(spec, load_model(spec).config, steps, run["prompt"])
    try:
        explain_new(
            job,
            len(steps),
            explained,
            lambda i: services.contributors(spec, *services.step_ids(run["prompt"], steps, i)),
            expected,
            on_cost=on_cost,
        )
    except ValueError as err:  # LimitError: no memory for them now; the text goes on
        st.caption(f"Top contributors paused: {err}")
        return
    shown = [i for i in explained.done if i < len(steps)]
    if not shown:
        cost = expected(len(steps) - 1)
        waiting = (
            "Top contributors appear here as tokens are written."
            if cost <= TICK_S
            else f"Top contributors: about {cost:.1f} s a token on this model,\ntoo long to compute beside it while it "
            "writes.\nAfter the run: pick a step, or open the Why page."
        )
        monospace_text(waiting + "\n" * (LINES - 1 - waiting.count("\n")), "why")
        return
    newest = max(shown)
    text = step_lines(run, newest, explained.done[newest])
    monospace_text(text + "\n" * max(0, LINES - 1 - text.count("\n")), "why")
    ids, target = services.step_ids(run["prompt"], steps, newest)
    st.caption(
        f"Top contributors for {len(shown)} of {len(steps)} new tokens so far · "
        f"[why this token? ↗]({why_url(state, decode(ids, run['enc']), target)})",
        help=ABOUT,
    )


def step_contributors(run: dict, i: int, spec) -> None:
    """A finished run's step i: its contributors (found live, or computed now) and one click to the Why page's graph
    for it, in this session."""
    steps = run["steps"]
    ids, target = services.step_ids(run["prompt"], steps, i)
    try:
        contributors = services.contributors(spec, ids, target)
    except ValueError as err:  # LimitError
        st.caption(f"No top contributors now: {err}")
        return
    monospace_text(step_lines(run, i, contributors), "why_step")
    units = list(dict.fromkeys(c.unit for c in contributors.top if c.kind in ("head", "neuron")))
    if units:  # the heads and neurons named above, one click from what they do over the corpus
        unit_pills("What they do over the corpus", units, K.per_item(K.UNIT_PILLS, "gen_contributors"))
    st.button(
        f"Why {md_text(pieces([target], run['enc'])[0])}? The attribution graph",
        key=K.GEN_WHY,
        icon=":material/account_tree:",
        on_click=go_to_why,
        args=(decode(ids, run["enc"]), target),
        type="tertiary",
        help="Opens Why this token? on the text up to this token (it becomes the prompt), with its graph.",
    )


LINK_HELP = "Opens Why this token? in a new tab on the text up to this token, with its attribution graph."


def why_links(run: dict) -> list[str]:
    """For a run's table: each written token's link to the Why page's graph for it (links.why_url)."""
    out = []
    for i in range(len(run["steps"])):
        ids, target = services.step_ids(run["prompt"], run["steps"], i)
        out.append(why_url(st.session_state, decode(ids, run["enc"]), target))
    return out


def labels_by_step(run: dict) -> list[str]:
    """For a run's table: each step's contributors found live, as one line ("" where none was computed)."""
    entry = st.session_state.get(K.LIVE_WHY_STORE)
    job = (st.session_state.get(K.GENERATION) or {}).get("job")
    done = entry.done if isinstance(entry, Explained) and entry.job is job else {}
    out = []
    for i in range(len(run["steps"])):
        if i not in done:
            out.append("")
            continue
        ids, _ = services.step_ids(run["prompt"], run["steps"], i)
        tokens = [decode([t], run["enc"]) for t in ids]
        out.append(", ".join(contributor_label(c, tokens) for c in done[i].top))
    return out
