"""Under the live text: each written token's top three contributors ("L1H0 from ' Romeo' +35%": the nodes at its own
position with the largest direct effect on its logit, the attribution graph's `direct` field; issue 58), and one click
from a written token to the Why page's graph for it.

The model's steps capture what the contributors need and gptviz.serve.live_contributors finds them in the model's own
thread, a batch at a time (`python -m benchmarks live-why` measures the model's rate with and without them); the page
only reads what it found. A finished run's step shows the graph's influences too (through
every path, not only the direct one), computed on demand.
"""

from __future__ import annotations

import streamlit as st

from ..methods.graph_contributors import Contributors, contributor_label
from ..model.tokenizer import decode
from . import keys as K
from . import settings as S
from .display import md_text, monospace_text
from .links import why_url
from .services import why_graph as services
from .services.why import pieces
from .unit_nav import go_to_why, unit_pills

LINES = 4  # the box under the text: the token, then its three contributors (a fixed height: no jumps)
ABOUT = (
    "Each new token's three largest direct contributions to its logit: the nodes at its own position (heads, "
    "neurons, its embedding, biases) whose output the final norm carries straight to that logit, and their share of "
    "it (every direct effect and the final norm's bias add up to the logit). A head's token is the key its "
    "contribution comes from most. Found as the model writes, a batch of tokens at a time. What reaches the "
    "logit through later positions and layers too: the Why page's attribution graph."
)

INFLUENCE = (
    "Each node's influence on the logit in the attribution graph: its output's effect through every later path, "
    "not only the direct one (influences overlap: a node's includes what later nodes do with its output, so shares "
    "need not add up to 100%). A head's token is the key its influence comes from most."
)


def found_live(run: dict) -> dict[int, Contributors]:
    """The contributors found so far for a run's steps (none for a run started with them switched off): a snapshot,
    since the generation's thread goes on adding to them (LiveContributors.snapshot)."""
    explained = run.get("explained")
    return explained.snapshot() if explained is not None else {}


def step_lines(run: dict, i: int, contributors: Contributors) -> str:
    """The token of step i and its contributors, one a line (plain text: never Markdown)."""
    steps = run["steps"]
    ids, _ = services.step_ids(run["prompt"], steps, i)
    tokens = [decode([t], run["enc"]) for t in ids]
    piece = decode([steps[i].token_id], run["enc"])
    head = f"new token {i + 1}, {piece!r}: logit {contributors.metric:+.2f}"  # short: no wrap, no jump
    return "\n".join([head] + [f"  {contributor_label(c, tokens)}" for c in contributors.top])


def under_live_text(run: dict) -> None:
    """While the model writes: the newest explained token's top three contributors, a count, and its Why link."""
    state = st.session_state
    entry = state.get(K.GENERATION)
    if not state.get(K.LIVE_WHY, S.LIVE_WHY.default) or not entry or not run["steps"]:
        return
    steps, explained = run["steps"], run.get("explained")
    if explained is None:
        monospace_text("Top contributors: switched on after this run started;\nthe next run shows them.\n\n", "why")
        return
    if explained.error:
        st.caption(f"Top contributors stopped: {explained.error}")
        return
    found = found_live(run)
    shown = [i for i in found if i < len(steps)]
    if not shown:
        monospace_text("Top contributors appear here as tokens are written." + "\n" * (LINES - 1), "why")
        return
    newest = max(shown)
    text = step_lines(run, newest, found[newest])
    monospace_text(text + "\n" * max(0, LINES - 1 - text.count("\n")), "why")
    ids, target = services.step_ids(run["prompt"], steps, newest)
    st.caption(
        f"Top contributors by direct effect for {len(shown)} of {len(steps)} new tokens so far · "
        f"[why this token? ↗]({why_url(state, decode(ids, run['enc']), target)})",
        help=ABOUT,
    )


def step_contributors(run: dict, i: int, spec) -> None:
    """A finished run's step i: its contributors by direct effect (found live) and by influence in the graph
    (computed now), and one click to the Why page's graph for it, in this session."""
    steps = run["steps"]
    ids, target = services.step_ids(run["prompt"], steps, i)
    direct = found_live(run).get(i)
    if direct is not None:
        st.caption("Top contributors by direct effect (found as it was written):", help=ABOUT)
        monospace_text(step_lines(run, i, direct), "why_step_direct")
    try:
        contributors = services.contributors(spec, ids, target)
    except ValueError as err:  # LimitError
        st.caption(f"No influences now: {err}")
        contributors = None
    if contributors is not None:
        st.caption("By influence in the attribution graph (through every path):", help=INFLUENCE)
        monospace_text(step_lines(run, i, contributors), "why_step")
    named = (direct.top if direct else []) + (contributors.top if contributors else [])
    units = list(dict.fromkeys(c.unit for c in named if c.kind in ("head", "neuron")))
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
    """For a run's table: each step's contributors found live, as one line ("" where none was found)."""
    done = found_live(run)
    out = []
    for i in range(len(run["steps"])):
        if i not in done:
            out.append("")
            continue
        ids, _ = services.step_ids(run["prompt"], run["steps"], i)
        tokens = [decode([t], run["enc"]) for t in ids]
        out.append(", ".join(contributor_label(c, tokens) for c in done[i].top))
    return out
