"""The ablation view's Copy-as-Python prints the numbers the view shows, run as a visitor runs it: in a fresh
interpreter, from a checkout (no installed package: gptviz is on no index), not in the test's process (issue 62: it
returned next-token probabilities only, not the direct and total effects the page shows, and its box said
`pip install gptviz`). The printed table and effects are compared with what the page's services compute and with what
the page drew."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app import settings as S
from gptviz.app.reproduce import MARK
from gptviz.app.services import why as services
from gptviz.model.tokenizer import encode
from tests.support import ROOT, pagetest

PROMPT = 'JULIET:\nSay "Romeo" twice, Romeo: it\'s the name, the name.'
BUNDLED = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
IDS = tuple(encode(PROMPT))
ROW = re.compile(r"^\s*(\d+)  .*?\s+(-?[0-9.]+)%\s+(-?[0-9.]+)%\s+([-+][0-9.]+)%$")
HALF_A_SHOWN_DIGIT = 0.005 / 100 + 1e-7  # the table prints percentages to two decimals


def ablation_page(mode: str):
    at = pagetest.run_page(
        "why",
        PROMPT,
        BUNDLED,
        **{S.WHY_VIEW.key: "Ablate heads", S.WHY_MODE.key: mode, S.WHY_ABLATED.key: [(0, 2), (1, 0)]},
    )
    assert not at.exception and not at.error
    code = [c.value for c in at.code if c.value.startswith(MARK) and "ablate heads" in c.value.splitlines()[0]]
    assert len(code) == 1 and f"ids = get_tokenizer().encode({PROMPT!r})\n" in code[0]  # the whole prompt: IDS
    return at, code[0]


def run_from_checkout(code: str, cwd: Path, pythonpath: str | None) -> str:
    """The snippet in a new interpreter, from standard input, as `python -` in `cwd`: the checkout's folder puts it
    first on sys.path; elsewhere PYTHONPATH must."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Warning" not in out.stderr, out.stderr[-3000:]
    return out.stdout


def printed_rows(stdout: str) -> list[tuple[int, float, float, float]]:
    rows = [ROW.match(line) for line in stdout.splitlines()]
    return [(int(m.group(1)), *(float(m.group(g)) / 100 for g in (2, 3, 4))) for m in rows if m]


def check_table(at, stdout: str, ids, heads, mode: str) -> None:
    before, after = services.next_token(BUNDLED, ids), services.next_token(BUNDLED, ids, heads, mode)
    rows = printed_rows(stdout)
    table = next(d.value for d in at.dataframe if "after" in d.value.columns)
    assert services.pieces([i for i, *_ in rows]) == list(table["token"])  # the page's rows, in its order
    assert len(rows) >= 5
    for token, b, a, change in rows:
        assert b == pytest.approx(float(before[token]), abs=HALF_A_SHOWN_DIGIT)
        assert a == pytest.approx(float(after[token]), abs=HALF_A_SHOWN_DIGIT)
        assert change == pytest.approx(float(after[token] - before[token]), abs=HALF_A_SHOWN_DIGIT)


@pytest.mark.slow
def test_the_ablation_snippet_prints_the_table_and_both_effects_from_a_checkout():
    at, code = ablation_page("zero")
    stdout = run_from_checkout(code, cwd=ROOT, pythonpath=None)
    heads = ((0, 2), (1, 0))
    check_table(at, stdout, IDS, heads, "zero")
    # the two effects, as the page's metrics show them and as its services compute them
    target, other = at.session_state[S.WHY_TARGET.key], at.session_state[S.WHY_OTHER.key]
    dla = services.direct_attribution(BUNDLED, IDS, target, other)
    direct = -sum(float(dla.head_values[layer, head]) for layer, head in heads)
    before, after = services.next_token(BUNDLED, IDS), services.next_token(BUNDLED, IDS, heads, "zero")
    total = float(after[target].log() - after[other].log()) - float(before[target].log() - before[other].log())
    shown = {m.label: m.value for m in at.metric}
    assert f"Direct effect on the metric: {direct:+.3f}" in stdout.splitlines()
    assert f"Total effect (ablation, measured): {total:+.3f}" in stdout.splitlines()
    for label in ("Direct effect on the metric", "Total effect (ablation, measured)"):
        assert f"{label}: {shown[label]}" in stdout.splitlines()
    assert "pip install gptviz`" not in " ".join(c.value for c in at.caption)


@pytest.mark.slow
def test_the_mean_ablation_snippet_prints_its_table_from_a_notebook_beside_a_checkout(tmp_path):
    """Elsewhere (a notebook's own folder), with the checkout on PYTHONPATH. Mean ablation: the page compares no
    effects (the direct effect of a mean is not minus the attribution), and neither does the snippet."""
    at, code = ablation_page("mean")
    stdout = run_from_checkout(code, cwd=tmp_path, pythonpath=str(ROOT))
    check_table(at, stdout, IDS, ((0, 2), (1, 0)), "mean")
    assert "effect" not in stdout and not [m for m in at.metric if "effect" in m.label]
