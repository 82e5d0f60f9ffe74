"""The Parameters page's chart (figures.params.component_shares): every component's exact count from gptviz.model.params,
its share, the small ones grouped into one "other" row that names them on hover."""
from __future__ import annotations

import re

import pytest

from gptviz import PRESETS
from gptviz.figures import params as fp
from gptviz.model.params import by_component, param_table

TOTALS = {"gpt1": 116_169_216, "gpt2-small": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080,
          "gpt2-xl": 1_557_611_200}


def chart(name: str):
    cfg = PRESETS[name]
    comp = by_component(param_table(cfg))
    total = int(comp["count"].sum())
    return fp.component_shares(comp, f"{name}: {total:,} parameters", tied=cfg.tie_weights), comp


def label_numbers(text: str) -> tuple[str, int, str]:
    """('MLP up', 491827200, '31.6%') from a drawn label."""
    m = re.fullmatch(r"<b>(.+)</b>  ([0-9,]+) · (<?[0-9.]+%)", text)
    assert m, text
    return m.group(1), int(m.group(2).replace(",", "")), m.group(3)


@pytest.mark.parametrize("name", list(TOTALS))
def test_every_parameter_is_counted_once_exactly(name):
    fig, comp = chart(name)
    assert sum(fig.data[0].x) == TOTALS[name]                     # the bars add up to the model, exactly
    assert f"{TOTALS[name]:,} parameters" in fig.layout.title.text
    labels = [label_numbers(a.text) for a in fig.layout.annotations]
    assert [count for _, count, _ in labels] == list(fig.data[0].x)
    by_name = dict(zip(comp["component"], comp["count"]))
    for (name_, count, share), (hover, exact_share) in zip(labels, fig.data[0].customdata):
        assert share == (f"{count / TOTALS[name]:.1%}" if count / TOTALS[name] >= 0.0005 else "<0.1%")
        assert exact_share == count / TOTALS[name]
        members = [re.match(r"(.+?): ([0-9,]+)", line).groups() for line in hover.split("<br>")]  # "norms: 36,864"
        assert sum(int(c.replace(",", "")) for _, c in members) == count
        for member, c in members:
            assert by_name[member] == int(c.replace(",", ""))      # each member's own count, from gptviz.model.params


def test_gpt2_xl_rows_largest_first_and_small_ones_grouped():
    fig, comp = chart("gpt2-xl")
    names = [label_numbers(a.text)[0] for a in fig.layout.annotations]
    assert names == ["MLP up", "MLP down", "attention Q/K/V", "attention output", "token embedding", "other (4 small)"]
    assert list(fig.data[0].x[:2]) == [491_827_200, 491_596_800]
    other = fig.data[0].customdata[-1][0]
    assert other == ("position embedding: 1,638,400<br>norms: 307,200<br>final norm: 3,200<br>"
                     "LM head: 0 (tied: it is the token embedding)")


def test_untied_head_has_its_own_row_and_a_lone_small_component_keeps_its_name():
    fig, _ = chart("gpt2-small-untied-noqkvbias")
    names = [label_numbers(a.text)[0] for a in fig.layout.annotations]
    assert names[:2] == ["token embedding", "LM head"] and fig.data[0].x[1] == 50257 * 768
    rows = fp.component_rows(by_component(param_table(PRESETS["gpt2-small"])), min_share=0.005)
    assert [r.name for r in rows][-1] == "other (3 small)"       # position embedding (0.63%) now has its own row
    assert "position embedding" in [r.name for r in rows]
    comp = by_component(param_table(PRESETS["gpt2-small"].replace(tie_weights=False)))
    single = fp.component_rows(comp[~comp["component"].isin(["norms", "final norm"])])
    assert "other" not in " ".join(r.name for r in single)        # one small one keeps its own name
    assert [r.count for r in single] == sorted((r.count for r in single), reverse=True)
