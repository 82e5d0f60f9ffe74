"""Parameter accounting: exact totals of the reference models, formula == module tree, no allocation."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from gptviz import GPT, PRESETS, GPTConfig, param_table
from gptviz.model.params import (
    COMPONENTS,
    GROUP_ORDER,
    by_component,
    by_group,
    by_layer,
    component_of,
    memory_bytes,
    meta_param_table,
    total_params,
)
from tests.support.small_configs import CUSTOM

# ../shared/data/README.md, "Parameter counts the project must reproduce exactly".
REFERENCE_TOTALS = {
    "gpt1": 116_169_216,
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "gpt2-small-untied-noqkvbias": 163_009_536,
}


@pytest.mark.parametrize("name, expected", REFERENCE_TOTALS.items())
def test_reference_totals_exact(name, expected):
    assert total_params(PRESETS[name]) == expected
    assert int(param_table(PRESETS[name])["count"].sum()) == expected


@pytest.mark.parametrize("name", list(PRESETS))
def test_formula_table_equals_meta_module_tree(name):
    formula, meta = param_table(PRESETS[name]), meta_param_table(PRESETS[name])
    assert list(formula["name"]) == list(meta["name"])
    assert list(formula["shape"]) == list(meta["shape"])
    assert formula.equals(meta)


@pytest.mark.parametrize("name", list(PRESETS))
def test_by_component_and_by_layer_consistent_with_total(name):
    cfg = PRESETS[name]
    table = param_table(cfg)
    total = int(table["count"].sum())
    comp = by_component(table)
    assert int(comp["count"].sum()) == total
    assert comp["share"].sum() == pytest.approx(1.0)
    assert list(comp["component"]) == [c for c in COMPONENTS if c in set(comp["component"])]
    layers = by_layer(table)
    assert len(layers) == cfg.n_layers
    per_block = layers.sum(axis=1)
    assert (per_block == per_block.iloc[0]).all()  # every block is the same size
    outside = int(table[table["layer"].isna()]["count"].sum())
    assert int(per_block.sum()) + outside == total
    d, ff = cfg.d_model, cfg.d_ff
    norm = 2 * d if cfg.norm_type == "layernorm" else d
    expected_block = 3 * d * d + (3 * d if cfg.qkv_bias else 0) + d * d + d + d * ff + ff + ff * d + d + 2 * norm
    assert int(per_block.iloc[0]) == expected_block


@pytest.mark.parametrize("cfg", [*PRESETS.values(), CUSTOM], ids=[*PRESETS, "custom"])
def test_groups_are_what_a_reader_means_and_sum_to_the_total(cfg):
    """Embeddings, attention with its output projection, MLP, norms with the final one, the head: each by formula,
    every group on every model (a tied head's 0 too), and they sum to the exact total (issue 62)."""
    groups = by_group(param_table(cfg))
    assert list(groups["group"]) == list(GROUP_ORDER)
    total = total_params(cfg)
    assert int(groups["count"].sum()) == total == REFERENCE_TOTALS.get(cfg.name, total)
    assert groups["share"].sum() == pytest.approx(1.0)
    V, T, d, ff, L = cfg.vocab_size, cfg.n_ctx, cfg.d_model, cfg.d_ff, cfg.n_layers
    norm = 2 * d if cfg.norm_type == "layernorm" else d
    assert dict(zip(groups["group"], groups["count"], strict=True)) == {
        "embeddings": (V + T) * d,
        "attention": L * (4 * d * d + d + (3 * d if cfg.qkv_bias else 0)),
        "MLP": L * (2 * d * ff + ff + d),
        "norms": (2 * L + 1) * norm,
        "LM head": 0 if cfg.tie_weights else V * d,
    }
    assert list(groups["components"][1]) == ["attention Q/K/V", "attention output"]
    per_block = by_layer(param_table(cfg), by="group")
    assert sorted(per_block.columns) == ["MLP", "attention", "norms"] and len(per_block) == L
    assert int(per_block["attention"].sum()) == dict(zip(groups["group"], groups["count"], strict=True))["attention"]


def test_tied_head_counted_zero_and_marked_tied():
    table = param_table(PRESETS["gpt2-small"])
    head = table[table["name"] == "lm_head.weight"].iloc[0]
    assert head["count"] == 0 and bool(head["tied"]) and head["component"] == "LM head"
    assert head["shape"] == (50257, 768)
    assert int(table["tied"].sum()) == 1
    untied = param_table(PRESETS["gpt2-small-untied-noqkvbias"])
    head = untied[untied["name"] == "lm_head.weight"].iloc[0]
    assert head["count"] == 50257 * 768 and not bool(head["tied"])
    assert "blocks.0.attn.c_attn.bias" not in set(untied["name"])


def test_component_of():
    assert component_of("blocks.3.attn.c_attn.weight") == ("attention Q/K/V", 3)
    assert component_of("blocks.11.mlp.c_proj.bias") == ("MLP down", 11)
    assert component_of("blocks.0.ln_2.weight") == ("norms", 0)
    assert component_of("wte.weight") == ("token embedding", None)
    assert component_of("ln_f.bias") == ("final norm", None)


def test_memory_bytes():
    assert memory_bytes(1_557_611_200, "fp32") == 6_230_444_800
    assert memory_bytes(10, "fp16") == memory_bytes(10, "bf16") == 20


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"tie_weights": False},
        {"qkv_bias": False},
        {"norm_type": "rmsnorm"},
        {"norm": "post"},
        {"d_ff": 50, "tie_weights": False, "qkv_bias": False, "norm_type": "rmsnorm"},
    ],
)
def test_real_model_parameter_count_equals_formula(changes):
    cfg = GPTConfig(vocab_size=101, n_ctx=16, d_model=32, n_layers=3, n_heads=4).replace(**changes)
    model = GPT(cfg)
    unique = {id(p): p.numel() for p in model.parameters()}  # a tied matrix once
    assert sum(unique.values()) == total_params(cfg)
    table = param_table(cfg)
    real = {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}
    assert dict(zip(table["name"], table["shape"], strict=True)) == real


def test_meta_table_allocates_nothing_real():
    # The whole module tree lives on the meta device: no storage behind any parameter.
    with torch.device("meta"):
        model = GPT(PRESETS["gpt2-xl"])
    assert all(p.is_meta for p in model.parameters()) and all(b.is_meta for b in model.buffers())
    assert sum(p.numel() for p in model.parameters()) == 1_557_611_200  # shapes are all there


@pytest.mark.slow
@pytest.mark.subprocess
def test_gpt2_xl_meta_count_peak_memory_is_small():
    """Counting GPT-2 XL (6.2 GB in fp32) through the meta device raises the peak RSS by < 300 MB.
    A fresh interpreter, so the peak is this call's and not an earlier test's."""
    code = textwrap.dedent("""
        import resource
        from gptviz import PRESETS
        from gptviz.model.params import meta_param_table
        meta_param_table(PRESETS["tiny"])  # warm up lazy imports
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        total = int(meta_param_table(PRESETS["gpt2-xl"])["count"].sum())
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(total, (after - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    total, delta_mb = map(int, out.stdout.split())
    assert total == 1_557_611_200
    assert delta_mb < 300, f"peak RSS grew by {delta_mb} MB"
