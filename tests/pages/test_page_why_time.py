"""Issue 43: the Why page's long measurements (patching, integrated gradients) show their estimated time before
they start, are refused before they start when the estimate passes the operator's limit (GPTVIZ_SWEEP_SECONDS),
and wait for a click when longer than a few seconds. AppTest, tiny preset; the rate is fixed here so the estimate
is known: the page's figure must be work / rate."""

from __future__ import annotations

from gptviz.app import keys as K
from gptviz.methods import attribution
from gptviz.model.tokenizer import encode
from tests.support.pagetest import TINY, figures, run_page
from tests.support.why_page import PROMPT, tiny_model

PAIR = "Repeated sequence (induction)"
CLEAN, CORRUPT = "A B C D E F G H A B C", "A B C Q E F G H A B C"


def patch_work() -> int:
    return attribution.patching_work(tiny_model().config, encode(CLEAN), encode(CORRUPT))


def sweep_runs(monkeypatch) -> list:
    runs = []
    real = attribution.residual_patching
    monkeypatch.setattr(attribution, "residual_patching", lambda *a, **k: runs.append(1) or real(*a, **k))
    return runs


def test_patching_past_the_limit_is_refused_before_it_starts(sweep_budget, monkeypatch):
    work = patch_work()
    sweep_budget(rate=work / 50, limit_s=30)  # 50 s estimated, 30 s allowed
    runs = sweep_runs(monkeypatch)
    at = run_page("why", PROMPT, TINY, why_view="Patching", why_example=PAIR)
    assert not at.exception
    assert [w.value for w in at.warning] == [
        "Patching would take about 50 s on this server now, more than its limit of 30 s for one measurement "
        "(GPTVIZ_SWEEP_SECONDS): try shorter prompts or a smaller model"
    ]
    assert runs == [] and not figures(at)


def test_a_long_patching_shows_its_estimate_and_waits_for_a_click(sweep_budget, monkeypatch):
    work = patch_work()
    sweep_budget(rate=work / 12, limit_s=120)  # 12 s estimated: past the 5 s that run at once
    runs = sweep_runs(monkeypatch)
    at = run_page("why", PROMPT, TINY, why_view="Patching", why_example=PAIR)
    assert not at.exception and not at.warning
    assert any(
        c.value.startswith(
            f"Patching: about 12.0 s estimated ({work:,} token-block passes at {work / 12:,.0f} a second"
        )
        for c in at.caption
    )
    assert runs == [] and not figures(at)
    at.button(key=K.WHY_PATCH_RUN).click().run()
    assert not at.exception and runs == [1]
    assert len(figures(at)) == 2
    assert any(c.value.startswith("Logit difference: clean") and "Computed in" in c.value for c in at.caption)
    at.run()  # a rerun keeps the visitor's go-ahead for this pair: no second click
    assert len(figures(at)) == 2 and runs == [1]  # and the sweep is cached


def test_a_short_patching_runs_at_once_with_its_estimate_shown(sweep_budget):
    work = patch_work()
    sweep_budget(rate=work / 2, limit_s=120)
    at = run_page("why", PROMPT, TINY, why_view="Patching", why_example=PAIR)
    assert not at.exception and not at.warning and len(figures(at)) == 2
    assert any(c.value.startswith("Patching: about 2.0 s estimated") for c in at.caption)


def test_integrated_gradients_past_the_limit_are_refused_before_they_start(sweep_budget):
    T = len(encode(PROMPT))
    work = attribution.saliency_work(tiny_model().config, T, 32)
    sweep_budget(rate=work / 200, limit_s=120)
    at = run_page("why", PROMPT, TINY, why_view="Saliency")
    assert not at.exception
    assert [w.value for w in at.warning] == [
        "Integrated gradients would take about 200 s on this server now, more than its limit of 120 s for one "
        "measurement (GPTVIZ_SWEEP_SECONDS): try shorter prompts or a smaller model"
    ]
    assert not figures(at)
