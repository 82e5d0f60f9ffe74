"""The settings of the pages' views that a link carries (settings.py): the live generation's controls of the
Attention and Generation pages, then each page's own, by page."""

from __future__ import annotations

from ..figures.attention import DEFAULT_SCALE, SCALES
from ..model.config import PRESETS
from ..model.tokenizer import EOT
from .rules import Choice, Flag, Heads, Number, Setting, Text, UnitRule, Whole
from .settings_choices import (
    ATTENTION_VIEWS,
    DEFAULT_PACE,
    HEADS,
    LAYERS,
    NEXT_TOKENS,
    OWN_PAIR,
    PACES,
    PAR_MODEL_IN_USE,
    PATCH_PAIRS,
    SCALE_HELP,
    SEEDS,
    TIMELINE_DETECTORS,
    TOKENS,
    TOP_K,
    UNIT_TABS,
    WHY_VIEWS,
)

# ---- the live generation's controls (Attention and Generation pages) -----------------------------------------------
TEMP_HELP = (
    "Divides the logits before the softmax: below 1 sharpens, above 1 flattens; 0 always takes the most "
    "probable token (greedy)."
)
TOP_K_HELP = "Sample only from the k most probable tokens."
TOP_P_HELP = "Sample only from the most probable tokens whose probabilities add up to p."
SEED_HELP = "The same seed and settings give the same text."
PACE_HELP = (
    "How fast the new tokens appear, so the map can be watched growing row by row; the model still writes "
    "at its own speed (the caption after a run gives it)."
)


def _generation(prefix: str, tokens: int) -> tuple[Setting, ...]:
    """One page's sampling settings: new tokens, temperature, top-k, top-p, seed and pace (linked by key)."""
    return (
        Setting(f"{prefix}_n", "New tokens", tokens, link=f"{prefix}_n", rule=TOKENS),
        Setting(f"{prefix}_temp", "Temperature", 1.0, TEMP_HELP, f"{prefix}_temp", Number(0.0, 2.0, 0.05)),
        Setting(f"{prefix}_topk", "Top-k (0 = off)", 0, TOP_K_HELP, f"{prefix}_topk", TOP_K),
        Setting(f"{prefix}_topp", "Top-p (1 = off)", 0.9, TOP_P_HELP, f"{prefix}_topp", Number(0.05, 1.0, 0.05)),
        Setting(f"{prefix}_seed", "Seed", 0, SEED_HELP, f"{prefix}_seed", SEEDS),
        Setting(f"{prefix}_pace", "Pace", DEFAULT_PACE, PACE_HELP, f"{prefix}_pace", Choice(tuple(PACES))),
    )


# under the live text of both pages that generate: each written token's top contributors (gptviz.app.live_why)
LIVE_WHY = Setting(
    "live_why",
    "Top contributors under the text",
    True,
    link="live_why",
    rule=Flag(),
    help="Each written token's three largest direct contributions to its logit (the nodes at its own position: "
    "heads, neurons, its embedding, biases), found as the model writes, a batch of tokens at a time. "
    "Takes effect at the next Generate.",
)

# ---- Attention page ------------------------------------------------------------------------------------------------
ATT_VIEW = Setting("att_view", "", ATTENTION_VIEWS[0], link="att_view", rule=Choice(ATTENTION_VIEWS))
ATT_LAYER = Setting(
    "att_layer",
    "Layer",
    0,
    link="att_layer",
    rule=LAYERS,
    help="A layer: one of the blocks the tokens pass through in turn, each with its own heads.",
)
ATT_HEAD = Setting(
    "att_head",
    "Head",
    0,
    link="att_head",
    rule=HEADS,
    help="Each head has its own queries and keys, so each learns its own way of looking. The mean "
    "shows where the layer as a whole looks.",
)
ATT_SCALE = Setting(
    "att_scale",
    "Colour scale",
    DEFAULT_SCALE,
    link="att_scale",
    rule=Choice(tuple(SCALES)),
    help="Shared by every attention figure on this page. The default, the square root, makes small "
    "weights visible (a linear scale shows only a head's few largest); hover always shows the "
    "weight itself.",
)
ATT_QUERY = Setting(
    "att_query",
    "Query token",
    None,
    link="att_query",
    rule=Whole(0, 100_000, none_ok=True),
    help="The token whose attention the bar chart and the outlined heatmap row show.",
)
ATT_GEN_N, ATT_GEN_TEMP, ATT_GEN_TOPK, ATT_GEN_TOPP, ATT_GEN_SEED, ATT_GEN_PACE = _generation("att_gen", 20)
REPLAY_HELP = (
    "Shows the run as it was after this step: the text so far, the map's rows so far and the distribution "
    "the step's token was drawn from. Runs no model."
)
# a finished run's step (live.replay_step; its range is the run's length, the last step by default)
ATT_GEN_STEP = Setting("att_gen_step", "Replay: step", help=REPLAY_HELP)

# ---- Generation page -----------------------------------------------------------------------------------------------
GEN_LAYER = Setting("gen_layer", "Attention of layer", 0, link="gen_layer", rule=LAYERS)
GEN_HEAD = Setting("gen_head", "Head", -1, link="gen_head", rule=HEADS)
GEN_SCALE = Setting("gen_scale", "Colour scale", DEFAULT_SCALE, SCALE_HELP, "gen_scale", Choice(tuple(SCALES)))
GEN_N, GEN_TEMP, GEN_TOPK, GEN_TOPP, GEN_SEED, GEN_PACE = _generation("gen", 30)
GEN_STEP = Setting("gen_step", "Replay: step", help=REPLAY_HELP)  # the table's row pick sets it too
GEN_EOS = Setting(
    "gen_eos",
    f"Stop at {EOT}",
    False,
    link="gen_eos",
    rule=Flag(),
    help="GPT-2's end-of-text token; a trained model writes it where a document ends.",
)

# ---- What does this unit do? page ----------------------------------------------------------------------------------
UNIT = Setting("unit", "", None, link="unit", rule=UnitRule())  # the unit shown, "L2N26" or "L1H2"
UNIT_TAB = Setting("unit_tab", "", UNIT_TABS[0], rule=Choice(UNIT_TABS))  # the page's tabs (unit_nav opens the first)

# ---- Why this token? page ------------------------------------------------------------------------------------------
WHY_VIEW = Setting("why_view", "", WHY_VIEWS[0], link="why_view", rule=Choice(WHY_VIEWS))
WHY_TARGET = Setting("why_target", "Predicted token (target)", link="why_target", rule=NEXT_TOKENS)
WHY_OTHER = Setting(
    "why_other",
    "Rival",
    link="why_other",
    rule=NEXT_TOKENS,
    help="The metric is logit(target) - logit(rival): what makes the model prefer one to the other.",
)
# the heads ablated: the grid's clicks and the "Heads to remove" box (WHY_HEADS, kept in step) share it
WHY_ABLATED = Setting("why_heads", "", [], link="why_heads", rule=Heads())
WHY_EXAMPLE = Setting("why_example", "Example pair", OWN_PAIR, link="why_example", rule=Choice(PATCH_PAIRS))
# the attribution graph's pruning (the library's and the command line's defaults) and the node checked
WHY_NODE_THRESHOLD = Setting(
    "why_node_threshold",
    "Node threshold",
    0.8,
    link="why_node_t",
    rule=Number(0.05, 1.0, 0.05),
    help="Keep the most influential nodes until they cover this share of the total absolute "
    "influence (the embeddings and the metric are always kept).",
)
WHY_EDGE_THRESHOLD = Setting(
    "why_edge_threshold",
    "Edge threshold",
    0.98,
    link="why_edge_t",
    rule=Number(0.01, 1.0, 0.01),
    help="Among the kept nodes, keep the fewest edges that cover this share of their absolute weight.",
)
WHY_MAX_NODES = Setting(
    "why_max_nodes",
    "Most nodes",
    200,
    link="why_max_nodes",
    rule=Whole(2, 400),
    help="Counting the embeddings (one per token) and the metric.",
)
WHY_NODE = Setting(
    "why_node",
    "Check a node",
    link="why_node",
    rule=Text(40),
    help="Remove it from the real model (patterns and norms recomputed) and compare the change with the "
    "frozen model's prediction, minus its influence.",
)
# Why a head attends: the attention score (layer, head, query, key) split into its sources
WHY_QK_LAYER = Setting("why_qk_layer", "Layer", 0, link="qk_layer", rule=LAYERS)
WHY_QK_HEAD = Setting("why_qk_head", "Head", 0, link="qk_head", rule=Whole(0, 4095))
WHY_QK_QUERY = Setting("why_qk_query", "Query position", link="qk_query", rule=Whole(0, 100_000))  # default: the last
WHY_QK_KEY = Setting(
    "why_qk_key",
    "Key position",
    link="qk_key",
    rule=Whole(0, 100_000),
    help="Defaults to where the head looks most from the query.",
)

# ---- Parameters page -----------------------------------------------------------------------------------------------
PAR_MODEL = Setting(
    "par_model",
    "Model",
    PAR_MODEL_IN_USE,
    link="par_model",
    rule=Choice((PAR_MODEL_IN_USE, *PRESETS)),
    help="The sidebar's model, or any preset (presets are counted, never built).",
)

# ---- Heads forming page (training timeline) ------------------------------------------------------------------------
TL_DETECTOR = Setting(
    "tl_detector", "Detector", TIMELINE_DETECTORS[0], link="tl_detector", rule=Choice(TIMELINE_DETECTORS)
)
TL_PROBE = Setting("tl_probe", "Probe prompt", 0, link="tl_probe", rule=Whole(0, 15))
TL_STEP = Setting(
    "tl_step",
    "Training step",
    link="tl_step",
    rule=Whole(0, 10_000_000),
    help="Each wiring shows its last snapshot at or before this step.",
)
