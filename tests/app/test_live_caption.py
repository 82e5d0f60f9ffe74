"""A finished generation's closing line says what each number is (issue 62): "written in 0.38 s (53 tok/s)" beside a
replay paced at 5 tokens a second read as a contradiction; now it is the model's own time, then the rate the page
showed the tokens at when the pace held them back."""

from __future__ import annotations

import re

import pytest

from gptviz.app import live
from gptviz.serve.live_generation import LiveGeneration
from tests.support.models import build

PROMPT = [5, 17, 3, 42]
GREEDY = dict(max_new_tokens=5, temperature=0.0, top_k=None, top_p=None, seed=0)


def finished(n: int, seconds: float, wall: float, pace: float | None) -> dict:
    return {"steps": [object()] * n, "seconds": seconds, "wall_seconds": wall, "pace": pace}


def test_the_caption_names_the_models_time_and_the_pace_it_was_shown_at():
    paced = live.writing_speed(finished(20, 0.38, 4.18, 5.0), live=False)
    assert paced == ": the model wrote them in 0.38 s (53 tokens/s); shown at 5 tokens/s (the Pace setting)"
    assert (
        live.writing_speed(finished(20, 0.38, 0.40, None), live=False)
        == ": the model wrote them in 0.38 s (53 tokens/s)"
    )  # not held back: one number
    assert (
        live.writing_speed(finished(3, 0.06, 40.0, 0.0), live=False)
        == ": the model wrote them in 0.06 s (50 tokens/s); shown one token per click"
    )
    slow = live.writing_speed(finished(2, 0.05, 2.5, 1.0), live=False)
    assert slow.endswith("; shown at 0.8 tokens/s (the Pace setting)")
    assert (
        live.writing_speed(finished(1, 0.02, 0.02, None), live=False) == ": the model wrote it in 0.02 s (50 tokens/s)"
    )
    assert live.writing_speed(finished(20, 0.38, 4.18, 5.0), live=True) == ""  # while it runs: the progress bar


@pytest.mark.slow
def test_a_paced_runs_caption_gives_both_rates_from_the_job():
    job = LiveGeneration(build(seed=3), PROMPT, GREEDY, pace=5)
    assert job.wait(30) and not job.stopped
    view = live.generation_view(job)
    assert view["wall_seconds"] >= 0.8 > view["seconds"]  # 4 gaps of 0.2 s; the model's time leaves them out
    text = live.writing_speed(view, live=False)
    m = re.fullmatch(
        r": the model wrote them in ([0-9.]+) s \((\d+) tokens/s\); shown at (\d+) tokens/s "
        r"\(the Pace setting\)",
        text,
    )
    assert m, text
    assert m.group(1) == f"{job.seconds:.2f}" and int(m.group(3)) == round(5 / view["wall_seconds"])
    assert int(m.group(3)) <= 6 < int(m.group(2))
