"""The Parameters page (AppTest): counts for the model in use and the presets, checked against formulas
written out here; the calculator explains invalid models inline and counts billions without weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from gptviz import PRESETS
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.params import total_params
from tests.support.pagetest import TINY, array, figures, run_fragment, run_page, title_of


def page(spec: model_service.ModelSpec | None = TINY, **state) -> AppTest:
    return run_page("parameters", "unused here", spec, **state)


def gpt2_formula(L: int, d: int, V: int, ctx: int, ff: int | None = None, tied: bool = True) -> int:
    """GPT-2 by hand: per block 2 LayerNorms (2d each), Q/K/V (3d² + 3d), output (d² + d), MLP
    (d·ff + ff + ff·d + d); plus wte, wpe, ln_f and (untied) the head."""
    ff = ff or 4 * d
    block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (2 * d * ff + ff + d)
    return L * block + V * d + ctx * d + 2 * d + (0 if tied else V * d)


def metrics(at: AppTest) -> list[tuple[str, str]]:
    return [(m.label, m.value) for m in at.metric]


N_TENSORS = 29  # the tiny preset's tensors, as its state dict lists them
FINER = K.per_item(K.PAR_MODEL, "finer")  # the Breakdown tab's finer split, an expander drawn when open


@pytest.mark.slow
def test_model_in_use_breakdown_and_seed_facts():
    at = page(**{FINER: True})
    assert not at.exception and not at.error
    tiny = PRESETS["tiny"]
    total = gpt2_formula(2, 64, 50257, 128)
    assert total == total_params(tiny)
    per_block = gpt2_formula(1, 64, 0, 0) - 2 * 64  # one block, without ln_f
    assert metrics(at)[:4] == [
        ("Parameters", f"{total:,}"),
        ("Per block", f"{per_block:,}"),
        ("fp32", f"{total * 4 / 2**20:,.1f} MiB"),
        ("fp16 / bf16", f"{total * 2 / 2**20:,.1f} MiB"),
    ]
    facts = " ".join(m.value for m in at.markdown)
    attn, mlp = 4 * 64 * 64 + 4 * 64, 2 * 64 * 256 + 256 + 64
    assert f"the MLP holds {mlp:,} parameters and attention {attn:,}" in facts
    assert f"{mlp / attn:.2f}×" in facts and "1.99×" in facts
    assert f"= {50257 * 64:,} parameters" in facts  # what tying saves: vocab x d_model
    # the table by group (attention with its output projection) marks the tied head and gives it no count of its own
    groups = at.table[0].value
    assert list(groups["group"]) == ["embeddings", "attention", "MLP", "norms", "LM head"]
    head = groups[groups["group"] == "LM head"].iloc[0]
    assert head["count"] == 0 and head["note"].startswith("tied")
    assert groups["count"].sum() == total
    assert groups.set_index("group").loc["attention", "count"] == 2 * attn
    qkv, out = 2 * (3 * 64 * 64 + 3 * 64), 2 * (64 * 64 + 64)
    assert groups["made of"][1] == f"attention Q/K/V {qkv:,} + attention output {out:,}"
    assert np.allclose(groups["fp16 MiB"] * 2, groups["fp32 MiB"])
    assert np.allclose(groups["bf16 MiB"], groups["fp16 MiB"])
    comp = at.table[1].value  # the finer split, one click away (in an expander)
    assert list(comp["group"]) == ["embeddings"] * 2 + ["attention"] * 2 + ["MLP"] * 2 + ["norms"] * 2 + ["LM head"]
    assert comp["count"].sum() == total
    assert {e.label for e in at.expander} >= {"Finer split: the components inside each group"}
    assert len([d for d in at.dataframe if "model" in d.value.columns]) == 1  # the presets' finer split is closed
    bars = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    rows = [[a["text"].split("</b>")[0][3:] for a in f["layout"].get("annotations", [])] for f in bars[:3]]
    assert rows[0] == ["embeddings", "attention", "MLP", "norms", "LM head"]  # the chart, by group
    assert rows[2][:4] == ["token embedding", "position embedding", "attention Q/K/V", "attention output"]  # finer
    assert len(at.get("plotly_chart")) >= 5


@pytest.mark.slow
def test_any_preset_is_counted_without_building_it():
    at = page(par_model="gpt2-xl")
    assert not at.exception
    assert metrics(at)[0] == ("Parameters", f"{gpt2_formula(48, 1600, 50257, 1024):,}")
    assert metrics(at)[0][1] == "1,557,611,200"
    at = page(par_model="gpt2-small-untied-noqkvbias")
    untied = gpt2_formula(12, 768, 50257, 1024, tied=False) - 12 * 3 * 768  # no Q/K/V bias
    assert metrics(at)[0] == ("Parameters", f"{untied:,}")
    facts = " ".join(m.value for m in at.markdown)
    assert "would save" in facts and f"{50257 * 768:,}" in facts


def test_a_preset_pick_reruns_only_its_tab_and_shows_that_preset():
    """Issue 60: a preset pick reran all three tabs (0.8-1.3 s to the page final). Each tab is a fragment now: the
    pick redraws the Breakdown tab alone, with the preset's own counts, and puts it in the address (the router that
    writes the address after a full run does not run)."""
    at = page()
    at.selectbox(key=K.PAR_MODEL).set_value("gpt2-medium")
    run_fragment(at, "one_tab", "Breakdown")
    assert not at.exception and not at.error
    total = gpt2_formula(24, 1024, 50257, 1024)
    assert metrics(at)[0] == ("Parameters", f"{total:,}")
    titles = [title_of(f) for f in figures(at)]
    assert titles[0] == f"gpt2-medium: {total:,} parameters"
    assert "Parameters in each block" in titles
    assert not any(t.startswith("Parameters by group") for t in titles)  # the presets tab was not drawn again
    assert at.query_params["par_model"] == "gpt2-medium"


def test_a_closed_expander_draws_nothing_and_opening_it_draws_its_tables():
    """Issue 60: a closed expander's tables and figure were sent and redrawn on every preset pick."""
    at = page()
    assert not at.exception
    closed = len(at.table), len(at.dataframe), len(at.get("plotly_chart"))
    labels = {e.label for e in at.expander}
    assert "Finer split: the components inside each group" in labels
    assert f"Every parameter tensor ({N_TENSORS})" in labels
    at.session_state[FINER] = True
    at.session_state[K.per_item(K.PAR_MODEL, "tensors")] = True
    at.run()
    assert (len(at.table), len(at.dataframe), len(at.get("plotly_chart"))) == (
        closed[0] + 1,
        closed[1] + 1,
        closed[2] + 1,
    )
    tensors = [d.value for d in at.dataframe if len(d.value) == N_TENSORS]
    assert len(tensors) == 1 and tensors[0]["count"].sum() == total_params(PRESETS["tiny"])


@pytest.mark.slow
def test_all_presets_side_by_side():
    at = page(**{K.PAR_PRESETS_FINER: True})
    frame = [d.value for d in at.dataframe if "model" in d.value.columns][0]
    assert list(frame["model"]) == ["gpt1", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"]
    for row in frame.itertuples():
        assert row.total == total_params(PRESETS[row.model])
    fine = [d.value for d in at.dataframe if "model" in d.value.columns][1]  # the finer split, by component
    assert list(fine["total"]) == list(frame["total"])
    assert list(fine["attention Q/K/V"] + fine["attention output"]) == list(frame["attention"])
    assert frame.set_index("model").loc["gpt2-small", "total"] == gpt2_formula(12, 768, 50257, 1024)
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    stacked = [f for f in figs if (f["layout"].get("title") or {}).get("text", "").startswith("Parameters by group")][0]
    heights = sum(array(t["y"]).astype(np.int64) for t in stacked["data"][:5])
    assert list(heights) == list(frame["total"])
    at.multiselect(key=K.PAR_PRESETS).set_value([]).run()
    assert not at.exception and any("at least one" in i.value for i in at.info)


@pytest.mark.slow
def test_calculator_counts_billions_instantly():
    at = page(calc_layers=96, calc_d_model=12288, calc_heads=96, calc_ctx=2048)
    assert not at.exception and not at.error
    expected = gpt2_formula(96, 12288, 50257, 2048)  # GPT-3 175B's shape
    assert 174e9 < expected < 176e9
    assert ("Parameters", f"{expected:,}") in metrics(at)[4:]


@pytest.mark.slow
def test_calculator_explains_invalid_models_inline():
    at = page(calc_d_model=768, calc_heads=7)
    assert not at.exception
    assert len(at.error) == 1 and "divisible by n_heads (7)" in at.error[0].value
    at = page(calc_ratio=0.0)
    assert not at.exception and "d_ff must be at least 1" in at.error[0].value
    at = page(calc_ratio=1.5, calc_norm_type="rmsnorm", calc_tie=False, calc_qkv_bias=False)
    assert not at.exception and not at.error
    d, ff, L = 768, 1152, 12
    by_hand = L * (2 * d + 3 * d * d + d * d + d + 2 * d * ff + ff + d) + 2 * 50257 * d + 1024 * d + d
    assert ("Parameters", f"{by_hand:,}") in metrics(at)[4:]


@pytest.mark.slow
def test_without_a_model_the_presets_still_work():
    at = page(spec=None)
    assert not at.exception
    assert any("Choose a model" in i.value for i in at.info)
    assert at.dataframe  # the preset comparison and calculator still render
