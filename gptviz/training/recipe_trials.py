"""The twins trained alike, as tried: a twin retrained on the other twin's recipe, checked with `python -m gptviz
check` and its check.json kept beside the bundled model (gptviz/bundled/README.md, "Trained alike"). Read here so the
Pre-norm vs post-norm page shows the trial's own numbers beside the bundled twins', not a sentence about them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..methods.wiring import trained_twins
from .evaluate import INDUCTION_BAR, MARGIN_NATS, PREVIOUS_TOKEN_BAR, REPEAT_LOSS_BAR

# The bundled pre-norm twin retrained on post-norm's four-stage recipe (Xavier's init, the same seeds, batches and
# schedule), checked; its log is post-recipe.log in the same folder.
OTHER_RECIPE_CHECK = "check-on-post-norms-recipe.json"
# The bundled post-norm twin's copy-only first stage on pre-norm's recipe (GPT-2's init), stopped after 1,500 steps.
OTHER_RECIPE_LOG = "copy-first-probe.log"
LOGGED_INDUCTION = re.compile(r"\bind (\d+\.\d+)")


def read_check(path: Path) -> dict | None:
    """A `python -m gptviz check` result, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def bar_rows(checks: dict[str, dict]) -> list[dict[str, str]]:
    """One row per bar of the check, a column per model ({column title: check.json}), each value with whether it
    clears the bar and, for the head scores, uniform attention's score (chance)."""

    def head(check: dict, key: str, bar: float) -> str:
        h = check[key]
        return f"{h['score']:.3f} (L{h['layer']}H{h['head']}) {mark(h['score'] >= bar)}"

    first = next(iter(checks.values()))
    rows = [
        (
            f"held-out loss below the bigram baseline ({first['bigram_baseline']:.3f}), nats; bar {MARGIN_NATS}",
            lambda c: f"{c['margin']:.3f} {mark(c['margin'] >= MARGIN_NATS)}",
        ),
        (
            f"best previous-token head; bar {PREVIOUS_TOKEN_BAR} "
            f"(chance {first['best_previous_token_head']['chance']:.3f})",
            lambda c: head(c, "best_previous_token_head", PREVIOUS_TOKEN_BAR),
        ),
        (
            f"best induction head; bar {INDUCTION_BAR} (chance {first['best_induction_head']['chance']:.3f})",
            lambda c: head(c, "best_induction_head", INDUCTION_BAR),
        ),
        (
            f"loss on the repeated half, nats; bar {REPEAT_LOSS_BAR:g} (uniform {first['uniform_loss']:.2f})",
            lambda c: f"{c['repeat_loss']:.2f} {mark(c['repeat_loss'] <= REPEAT_LOSS_BAR)}",
        ),
        ("bars cleared", lambda c: f"{sum(c['passes'].values())} of {len(c['passes'])}"),
    ]
    return [{"": name, **{title: value(check) for title, check in checks.items()}} for name, value in rows]


def mark(passed: bool) -> str:
    return "✓" if passed else "✗"


def logged_induction(path: Path) -> tuple[float, float, int] | None:
    """(the induction score at the first logged evaluation, the best logged, how many evaluations) from a train
    log's `ind` column; None when the log is missing or logs none."""
    try:
        scores = [float(m) for m in LOGGED_INDUCTION.findall(path.read_text(encoding="utf-8"))]
    except OSError:
        return None
    return (scores[0], max(scores), len(scores)) if scores else None


def card_section(folder: Path) -> str:
    """The model card's account of the trial beside a bundled twin ("<stem>-pre" / "<stem>-post" in one folder), from
    the trial's own check and log: why the twins keep two inits. "" where no trial sits beside either twin."""
    folder = Path(folder)
    pair = next(
        (p for p in trained_twins([f.name for f in folder.parent.iterdir()]) if folder.name in (p.pre, p.post)), None
    )
    if pair is None:
        return ""
    pre, post = folder.parent / pair.pre, folder.parent / pair.post
    trial, own = read_check(pre / OTHER_RECIPE_CHECK), read_check(pre / "check.json")
    probe = logged_induction(post / OTHER_RECIPE_LOG)
    if trial is None or own is None or probe is None:
        return ""
    start, best, n = probe

    def cleared(check: dict) -> str:
        return f"{sum(check['passes'].values())} of {len(check['passes'])}"

    def head(check: dict, key: str) -> str:
        return f"{check[key]['score']:.3f}"

    return (
        f"## Its twin was not trained alike\n"
        f"`{pre.name}` starts from GPT-2's normal(0, 0.02) init and `{post.name}` from Xavier-uniform matrices; "
        f"the rest of their recipes match. Post-norm on pre-norm's recipe: its copy-only stage's induction score "
        f"went from {start:.3f} to at best {best:.3f} over {n} logged evaluations (bar {INDUCTION_BAR}; "
        f"`{post.name}/{OTHER_RECIPE_LOG}`), so Xavier's init is the smallest change found that trains it. "
        f"Pre-norm on post-norm's whole recipe (the same init, seeds, batches and schedule) cleared "
        f"{cleared(trial)} of the check's bars (previous-token head {head(trial, 'best_previous_token_head')}, "
        f"induction head {head(trial, 'best_induction_head')}, margin below the bigram {trial['margin']:.3f}; "
        f"`{pre.name}/{OTHER_RECIPE_CHECK}`), against {cleared(own)} on its own. So the twins keep two inits, "
        f"and what the Pre-norm vs post-norm page compares includes that difference.\n\n"
    )
