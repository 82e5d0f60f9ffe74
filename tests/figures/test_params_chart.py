"""The Parameters page's chart (figures.params.component_shares): one row per group a reader means (embeddings,
attention with its output projection, MLP, norms with the final one, LM head), each with its exact count from
gptviz.model.params and its share, its components on hover; the finer split, one row per component, with split=True.
Nothing is folded into an "other" row: on small models it once held the attention's output projection (issue 62)."""

from __future__ import annotations

import re

import pytest

from gptviz import PRESETS, GPTConfig
from gptviz.figures import params as fp
from gptviz.model.params import COMPONENTS, GROUP_ORDER, by_component, by_group, param_table
from tests.support.small_configs import CUSTOM

TOTALS = {
    "gpt1": 116_169_216,
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
}


def chart(cfg: GPTConfig, split: bool = False):
    comp = by_component(param_table(cfg))
    total = int(comp["count"].sum())
    return fp.component_shares(comp, f"{cfg.name}: {total:,} parameters", tied=cfg.tie_weights, split=split), comp


def label_numbers(text: str) -> tuple[str, int, str]:
    """('MLP', 983424000, '63.1%') from a drawn label; a tied head's share reads 'tied to the token embedding'."""
    m = re.fullmatch(r"<b>(.+)</b>  ([0-9,]+) · (<?[0-9.]+%|tied to the token embedding)", text)
    assert m, text
    return m.group(1), int(m.group(2).replace(",", "")), m.group(3)


@pytest.mark.parametrize("name", list(TOTALS))
def test_every_parameter_is_counted_once_exactly_in_its_group(name):
    cfg = PRESETS[name]
    fig, comp = chart(cfg)
    assert sum(fig.data[0].x) == TOTALS[name]  # the bars add up to the model, exactly
    assert f"{TOTALS[name]:,} parameters" in fig.layout.title.text
    labels = [label_numbers(a.text) for a in fig.layout.annotations]
    groups = by_group(param_table(cfg))
    assert [n for n, _, _ in labels] == list(GROUP_ORDER) == list(groups["group"])  # the same rows, every model
    assert [count for _, count, _ in labels] == list(fig.data[0].x) == list(groups["count"])
    by_name = dict(zip(comp["component"], comp["count"], strict=True))
    for (group, count, share), (hover, exact_share) in zip(labels, fig.data[0].customdata, strict=True):
        if group == "LM head":  # GPT-1 and GPT-2 tie it
            assert count == 0 and share == "tied to the token embedding"
            assert "(tied: it is the token embedding)" in hover
        else:
            assert share == (f"{count / TOTALS[name]:.1%}" if count / TOTALS[name] >= 0.0005 else "<0.1%")
        assert exact_share == count / TOTALS[name]
        members = [re.match(r"(.+?): ([0-9,]+)", line).groups() for line in hover.split("<br>")]  # "norms: 36,864"
        assert sum(int(c.replace(",", "")) for _, c in members) == count
        for member, c in members:
            assert by_name[member] == int(c.replace(",", ""))  # each member's own count, from gptviz.model.params


@pytest.mark.parametrize("cfg", [*PRESETS.values(), CUSTOM], ids=[*PRESETS, "custom"])
def test_attention_is_one_row_with_its_output_projection_on_every_model(cfg):
    """The tiny models too, where the output projection (under 1%) used to go into "other"."""
    fig, comp = chart(cfg)
    rows = {r.name: r for r in fp.component_rows(comp)}
    counts = dict(zip(comp["component"], comp["count"], strict=True))
    assert rows["attention"].count == counts["attention Q/K/V"] + counts["attention output"]
    assert [m for m, _ in rows["attention"].members] == ["attention Q/K/V", "attention output"]
    d, L = cfg.d_model, cfg.n_layers
    assert rows["attention"].count == L * (4 * d * d + d + (3 * d if cfg.qkv_bias else 0))
    assert not [a.text for a in fig.layout.annotations if "other" in a.text]
    assert sum(fig.data[0].x) == int(param_table(cfg)["count"].sum())


@pytest.mark.parametrize("cfg", [PRESETS["gpt2-xl"], PRESETS["tiny"], CUSTOM], ids=["gpt2-xl", "tiny", "custom"])
def test_the_finer_split_is_one_row_per_component_in_group_order(cfg):
    fig, comp = chart(cfg, split=True)
    labels = [label_numbers(a.text) for a in fig.layout.annotations]
    assert [n for n, _, _ in labels] == [c for c in COMPONENTS if c in set(comp["component"])]
    assert [c for _, c, _ in labels] == list(comp["count"])
    assert sum(fig.data[0].x) == int(comp["count"].sum())
    assert list(fig.data[0].marker.color) == [fp.COMPONENT_COLORS[n] for n, _, _ in labels]
    grouped, _ = chart(cfg)
    assert list(grouped.data[0].marker.color) == [fp.GROUP_COLORS[g] for g in GROUP_ORDER]


def test_an_untied_head_has_its_count_and_share():
    fig, _ = chart(PRESETS["gpt2-small-untied-noqkvbias"])
    labels = {n: (c, s) for n, c, s in (label_numbers(a.text) for a in fig.layout.annotations)}
    assert labels["LM head"] == (50257 * 768, f"{50257 * 768 / 163_009_536:.1%}")
