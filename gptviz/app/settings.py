"""Every setting a visitor picks, declared once: its session key, default, label and help, its name in a shared link
(if the view travels in links) and the rule that checks a value from outside.

The widget that shows a setting draws from its record (`S.GEN_N.number_input(col)`), links.py reads and writes the
linked ones through the same records, and the tests walk them. A widget key is its session-state key, and the key of
a linked setting is also its link name unless the record names a shorter one: keep both stable, or links people
have shared stop opening the view they showed. keys.py re-exports each key as a plain string, so `K.GEN_N` names it
as before.
"""

from __future__ import annotations

from ..figures.attention import DEFAULT_SCALE, SCALES
from ..figures.palette import PALETTES, STANDARD
from ..model.config import NORM_TYPES, PRESETS
from ..model.tokenizer import EOT, EOT_ID
from .rules import Choice, Flag, Heads, Number, Setting, Text, UnitRule, Whole

# ---- the choices settings offer, by the labels the widgets show ---------------------------------------------------
SOURCE_BUNDLED = "Trained on Shakespeare (bundled)"
SOURCE_PRESET = "Preset, random weights"
SOURCE_PRETRAINED = "Weights from a folder, file or Hub id"
SOURCE_TRAINED = "Trained in this session"  # a session's trained runs exist only there: no link names them
SOURCE_UPLOAD = "Upload a checkpoint file"  # a visitor's upload is theirs alone: no link names it
# The sidebar's model sources by their code in a link
SOURCE_CODES = {"bundled": SOURCE_BUNDLED, "preset": SOURCE_PRESET, "pretrained": SOURCE_PRETRAINED}
# The Attention page's view tabs; the Why page's tabs and its patching pairs (OWN_PAIR is drawn from the prompt)
ATTENTION_VIEWS = (
    "One head",
    "Lines between tokens",
    "On the text",
    "Inside the head",
    "Value-weighted",
    "All heads of the layer",
    "Model view: every layer and head",
    "Entropy map",
)
WHY_VIEWS = (
    "Direct attribution",
    "Attribution graph",
    "Ablate heads",
    "Patching",
    "Saliency",
    "Information flow",
    "Why a head attends",
)
WHY_GRAPH_VIEW, WHY_QK_VIEW = WHY_VIEWS[1], WHY_VIEWS[-1]
OWN_PAIR = "(your own)"
PATCH_PAIRS = (OWN_PAIR, "Repeated sequence (induction)", "Speaker after a question")
# The Parameters page's first choice: the sidebar's model rather than a preset
PAR_MODEL_IN_USE = "the model in use"
# The live generation's paces (tokens per second; None: the model's own speed; 0: one token per click)
PACES = {
    "as fast as it writes": None,
    "20 tokens/s": 20.0,
    "5 tokens/s": 5.0,
    "2 tokens/s": 2.0,
    "1 token/s": 1.0,
    "one token per click": 0.0,
}
DEFAULT_PACE = "5 tokens/s"
TIMELINE_DETECTORS = ("induction", "previous-token", "duplicate-token", "first-token")
UNIT_TABS = ("One unit", "Search by token")
GROW_WIRINGS = ("pre", "post", "both")

MAX_LINK_PROMPT = 600  # characters; a longer prompt travels compressed (links.py), if that fits
MAX_LINK_MODEL = 300  # characters of a folder path or Hub id

# ---- rules several settings share ----------------------------------------------------------------------------------
SEEDS, LAYERS, TOKENS = Whole(0, 2**31 - 1), Whole(0, 4095), Whole(1, 200)
HEADS = Whole(-1, 4095)  # head -1: the mean of the layer's heads (display.MEAN_HEAD)
TOP_K = Whole(0, 1_000_000)  # the widget's maximum is the model's vocabulary; a link's larger value is replaced
NEXT_TOKENS = Whole(0, 1_000_000)  # token ids; the page replaces one that is not among its choices
SCALE_HELP = (
    "For the attention figures; the default, the square root, makes small weights visible. Hover always "
    "shows the weight."
)

# ---- the sidebar (every page reads these; short link names) --------------------------------------------------------
MODEL_SOURCE = Setting(
    "model_source",
    "Source",
    None,
    link="source",
    rule=Choice((SOURCE_BUNDLED, SOURCE_PRESET, SOURCE_PRETRAINED, SOURCE_TRAINED, SOURCE_UPLOAD), codes=SOURCE_CODES),
)
NORM = Setting(
    "norm",
    "LayerNorm placement",
    "pre",
    link="norm",
    rule=Choice(("pre", "post")),
    help="Pre-norm normalises before each sub-layer and once at the end; post-norm normalises after each "
    "residual addition.",
)
PRESET = Setting("preset", "Preset", "small-4l", link="preset", rule=Choice(tuple(PRESETS)))
SEED = Setting("seed", "Seed", 0, link="seed", rule=SEEDS)
HF_NAME = Setting(
    "hf_name",
    "Folder or Hub id",
    link="model",
    rule=Text(MAX_LINK_MODEL),
    help="A Hub id such as gpt2, found in the local Hugging Face cache or downloaded when online; or a "
    "folder with config.json and model.safetensors (or pytorch_model.bin), in Hugging Face GPT-2 or "
    "gptviz layout, inside the server's model folders: the bundled models, the Hugging Face cache, "
    "and the folders listed in the GPTVIZ_MODEL_DIRS environment variable.",
)
N_HEAD_HELP = (
    "Raschka's GPTModel files hold the heads' weights in one matrix per layer, so the file cannot say how "
    "many heads split it; his GPT_CONFIG_124M has 12. A count that does not divide the width is refused."
)
# travels with the folder's name (the model it completes); an upload's count stays in its session, like the upload
N_HEAD = Setting("n_head", "Attention heads", None, N_HEAD_HELP, "n_head", Whole(1, 4096, none_ok=True))
UPLOAD_N_HEAD = Setting("upload_n_head", "Attention heads", None, N_HEAD_HELP, rule=Whole(1, 4096, none_ok=True))
PROMPT = Setting("prompt", "Prompt", link="prompt", rule=Text(MAX_LINK_PROMPT), help="Shared by every page.")
# the prompt's second box, atop a page on a narrow screen (sidebar.page_prompt_box copies it both ways)
PAGE_PROMPT = Setting("page_prompt", "Prompt", help="The sidebar's prompt, shared by every page. Ctrl+Enter runs it.")
DEVICE = Setting("device", "Device", "cpu")
DTYPE = Setting(
    "dtype",
    "Precision",
    "float32",
    help="Half precision halves the weights' memory and speeds up GPU inference; captures and "
    "probabilities are still shown in float32.",
)
TRAINED_RUN = Setting("trained_run", "Run")
EXAMPLE_PROMPT = Setting("example_prompt", "Examples")
EXPORT_FORMAT = Setting(
    "export_format",
    "Figure download format",
    help="The camera button in each figure's toolbar saves it in this format.",
)
# the reader's eyes, not the view: a shared link does not carry it
PALETTE = Setting(
    "palette",
    "Colour scales",
    STANDARD,
    rule=Choice(tuple(PALETTES)),
    help="Every heatmap and coloured token in the app. Cividis and viridis read the same with the common "
    "colour-vision deficiencies (and in greyscale); signed values then use purple to orange.",
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
    help="Each written token's three most influential nodes of the attribution graph, computed beside "
    "the model within a twentieth of its time and half its waits for the pace (the rest on "
    "demand).",
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


# ---- settings a page keeps to itself (not in links) ----------------------------------------------------------------
# Activations page
ACT_FOCUS = Setting(
    "act_focus",
    "Focus token",
    help="The position used by the per-token views below (neurons, norms per layer, lens line).",
)  # default: the last token
ACT_RESID_AVG = Setting("act_resid_avg", "Average over all positions", False, rule=Flag())
ACT_TOPK = Setting("act_topk", "Neurons", 10, rule=Whole(5, 30))
ACT_NPZ_ATTN = Setting(
    "act_npz_attn", "Include attention scores and patterns ([heads, T, T] per layer)", True, rule=Flag()
)
# Embeddings page (the dimensions' range depends on the model: the page gives it)
EMB_DIMS = Setting("emb_dims", "Dimensions shown")
EMB_PCA_N = Setting("emb_pca_n", "Vocabulary sample", 2000, rule=Choice((500, 1000, 2000, 5000)))
# Explainers page
EXP_RANGE = Setting("exp_range", "x range", (-4.0, 4.0), rule=Number(-10.0, 10.0, 0.5))
EXP_TOL = Setting("exp_tol", "Mark where they differ by more than", 0.01, rule=Choice((0.001, 0.01, 0.05, 0.1)))
EXP_MASK_N = Setting("exp_mask_n", "Tokens", rule=Whole(1, 32))  # default: the prompt's first tokens, up to 8
# What does this unit do? page
# kind, layer and index: set from the unit shown (UNIT) at each run, so they need no default
UNIT_KIND = Setting("unit_kind", "Unit", rule=Choice(("neuron", "head")))
UNIT_LAYER = Setting("unit_layer", "Layer")
UNIT_INDEX = Setting("unit_index", "Neuron")  # "Head" for a head: the page names it
UNIT_BUILD_TOKENS = Setting("unit_build_tokens", "Tokens to scan")  # its range is the server's (GPTVIZ_INDEX_TOKENS)
UNIT_COLOUR = Setting(
    "unit_colour",
    "Colour tokens by",
    "output norm",
    rule=Choice(("output norm", "where the peak token looks")),
    help="Output norm: ||z W_O|| of the head at each token. Where the peak token looks: its "
    "attention weights (grey before its window).",
)
UNIT_HIST_LOG = Setting("unit_hist_log", "Log scale", True, rule=Flag())
UNIT_FOCUS = Setting("unit_focus", "Token of the prompt")  # default: the last token
# one-token boxes (app_pages/units.one_token_box checks their length); a head's source token is keyed per head
UNIT_SOURCE = Setting(
    "unit_source",
    "Source token (what the head attends to)",
    help="Defaults to the token its top example attends to most.",
)
UNIT_WORD = Setting(
    "unit_word",
    "A word",
    help="One token of the model's vocabulary (GPT-2's, or a GPT-1 folder's own); a leading space is "
    "tried too (' king' is one GPT-2 token, 'king' another).",
)

# Why this token? page (the heads ablated and the patching pairs' prompts are above, or keyed per pair)
WHY_HEADS = Setting("why_heads_pick", "Heads to remove")  # the box of heads, kept in step with WHY_ABLATED
WHY_MODE = Setting("why_mode", "Ablation", "zero", rule=Choice(("zero", "mean")))
WHY_N = Setting("why_n", "New tokens", 20, rule=Whole(1, 40))
WHY_TEMP = Setting("why_temp", "Temperature", 0.0, "0 is greedy.", rule=Number(0.0, 2.0, 0.05))
WHY_SEED = Setting("why_seed", "Seed", 0, rule=SEEDS)
WHY_ATT_LAYER = Setting("why_att_layer", "Attention of layer")  # default: the layer after the last head ablated
WHY_ATT_HEAD = Setting("why_att_head", "head")
WHY_FLOW_THRESHOLD = Setting(
    "why_flow_threshold",
    "Threshold: shares above it are drawn",
    0.04,
    "Lower shows more of the graph; the routes with the largest shares stay.",
    rule=Number(0.01, 0.5, 0.01),
)
# Parameters page (the calculator starts from the model chosen: the page gives its sizes as defaults)
PAR_PRESETS = Setting("par_presets", "Models", rule=Choice(tuple(PRESETS)))
CALC_LAYERS = Setting("calc_layers", "Layers", rule=Whole(1, 1_000))
CALC_D_MODEL = Setting("calc_d_model", "d_model", rule=Whole(1, 1_000_000))
CALC_HEADS = Setting("calc_heads", "Heads", rule=Whole(1, 100_000))
CALC_RATIO = Setting("calc_ratio", "d_ff ÷ d_model", 4.0, rule=Number(0.0, 64.0, 0.5))
CALC_VOCAB = Setting("calc_vocab", "Vocabulary", rule=Whole(1, 10_000_000))
CALC_CTX = Setting("calc_ctx", "Context", rule=Whole(1, 10_000_000))
CALC_NORM_TYPE = Setting("calc_norm_type", "Norm type", rule=Choice(NORM_TYPES))
CALC_TIE = Setting("calc_tie", "Tie the LM head to the token embedding", True, rule=Flag())
CALC_QKV_BIAS = Setting("calc_qkv_bias", "Bias on Q, K, V", True, rule=Flag())
# Heads forming page: growing an induction head
TL_GROW_WIRING = Setting("tl_grow_wiring", "Wiring", "pre", rule=Choice(GROW_WIRINGS))
TL_GROW_SEED = Setting("tl_grow_seed", "Seed", 0, rule=Whole(0, 10_000))
# The whole model at a glance (Overview page)
OV_POSITION = Setting("ov_position", "Position", help="The token whose path through the model is drawn.")

# Attention page, its other views
ATT_QUERY_POS = Setting("att_query_pos", "Query position")  # a long prompt's query slider: the page gives its range
ATT_LINES_HEADS = Setting("att_lines_heads", "Heads to overlay", help="One colour per head.")
ATT_LINES_FOCUS = Setting(
    "att_lines_focus", "Only the chosen query's lines", False, rule=Flag(), help="Or click a token in the left column."
)
ATT_TEXT_MODE = Setting(
    "att_text_mode",
    "Colour each token by",
    "where the query looks",
    rule=Choice(("where the query looks", "how much it is looked at", "attention from a span", "attention to a span")),
    help="The chosen query token's row of weights; each token's mean weight received from the "
    "queries that can see it (itself and every later token); or, for a span of tokens you "
    "drag across, the weight its tokens give each token (their rows summed) or the weight "
    "each token gives the span (their columns summed).",
)
ATT_NEURON_KEY = Setting("att_neuron_key", "Key token for the neuron view")  # default: the query
ATT_MV_MEAN = Setting(
    "att_mv_mean", "Average over heads", False, rule=Flag(), help="One panel per layer: the mean of its heads."
)
# Train page: the form (its defaults are the quick start's; the scenarios set others)
TRAIN_LAYERS = Setting("train_layers", "Layers", 2, rule=Whole(1, 12))
TRAIN_WIDTH = Setting("train_width", "Width (d_model)", 64, rule=Choice((32, 64, 128, 256)))
TRAIN_HEADS = Setting("train_heads", "Heads", 4, rule=Choice((1, 2, 4, 8)))
TRAIN_WIRING = Setting(
    "train_wiring",
    "Norm placement",
    "both",
    rule=Choice(("both", "pre", "post")),
    help="This form chooses the wiring of the models it trains; the sidebar's LayerNorm choice "
    "applies to the other pages, not here.",
)
TRAIN_LR = Setting("train_lr", "Peak learning rate", 3e-3, rule=Choice((1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)))
TRAIN_WARMUP = Setting(
    "train_warmup",
    "Warmup steps",
    10,
    rule=Whole(0, 5000),
    help="Linear warmup from lr/warmup to the peak; then cosine decay to a tenth.",
)
TRAIN_STEPS = Setting("train_steps", "Steps", 60, rule=Whole(1, 5000))
TRAIN_CLIP = Setting(
    "train_clip",
    "Gradient clipping",
    1.0,
    rule=Choice((0.0, 0.5, 1.0, 2.0, 5.0)),
    help="Largest global gradient norm; off lets a spike through whole.",
)
TRAIN_BATCH = Setting("train_batch", "Batch size", 4, rule=Choice((1, 2, 4, 8, 16, 32)))
TRAIN_BLOCK = Setting("train_block", "Block (tokens per sequence)", 64, rule=Choice((16, 32, 64, 128)))
TRAIN_INIT = Setting("train_init", "Init", "gpt2", rule=Choice(("gpt2", "xavier")))
TRAIN_SEED = Setting("train_seed", "Seed", 1337, rule=SEEDS)
TRAIN_FORM_SETTINGS = (
    TRAIN_LAYERS,
    TRAIN_WIDTH,
    TRAIN_HEADS,
    TRAIN_WIRING,
    TRAIN_LR,
    TRAIN_WARMUP,
    TRAIN_STEPS,
    TRAIN_CLIP,
    TRAIN_BATCH,
    TRAIN_BLOCK,
    TRAIN_INIT,
    TRAIN_SEED,
)
TRAIN_RUN_PICK = Setting("train_run_pick", "Run")
TRAIN_SMOOTH = Setting(
    "train_smooth",
    "Smoothing of the training loss",
    0.6,
    rule=Number(0.0, 0.99, 0.01),
    help="Exponential moving average of the per-batch loss; 0 shows it raw.",
)

# Pre-norm vs post-norm page: the same weights wired both ways (norms_), the trained twins (twins_), the paper
NORMS_PRESET = Setting(
    "norms_preset",
    "Architecture",
    "gpt2-small",
    rule=Choice(tuple(PRESETS)),
    help="A preset's shape (heads, MLP width, activation); depth and width are set beside it. The "
    "weights are random either way.",
)
NORMS_DEPTH = Setting("norms_depth", "Layers", 12, rule=Whole(1, 48))
NORMS_WIDTH = Setting("norms_width", "Width (d_model)")  # the preset's widths that keep its heads: the page's
NORMS_INIT = Setting(
    "norms_init",
    "Init",
    "gpt2",  # options: gptviz.methods.wiring.INITS
    help="GPT-2: normal(0, 0.02) with residual projections scaled by 1/√(2L). Xavier: Xavier-uniform "
    "matrices, as in the paper. Embeddings are normal(0, 0.02) in both.",
)
NORMS_SEED = Setting("norms_seed", "Seed", 0, rule=SEEDS)
NORMS_INPUT = Setting(
    "norms_input",
    "Input",
    "prompt",
    rule=Choice(("prompt", "random")),
    help="The sidebar prompt, or tokens drawn uniformly from the vocabulary (no structure at all; "
    "seeded by the seed beside).",
)
NORMS_LAYER, NORMS_HEAD = Setting("norms_layer", "Layer", 0), Setting("norms_head", "Head", 0)
NORMS_GRAD_VIEW = Setting("norms_grad_view", "Gradient of")
NORMS_LOG = Setting("norms_log", "Log scale", True, rule=Flag())
NORMS_SWEEP_DEPTHS = Setting("norms_sweep_depths", "Depths")  # default: those up to the model's depth (16 at least)
NORMS_PAPER_MATRIX = Setting(
    "norms_paper_matrix",
    "Matrix",
    help="W1: the FFN's first matrix (d → 4d, mlp.c_fc); W2: its second (4d → d, "
    "mlp.c_proj), the one Theorem 1 bounds.",
)
NORMS_PAPER_SCALE = Setting("norms_paper_scale", "Input")
TWINS_STEM = Setting("twins_stem", "Twins")
TWINS_SMOOTH = Setting(
    "twins_smooth",
    "Smoothing of the training loss",
    0.9,
    rule=Number(0.0, 0.99, 0.01),
    help="Exponential moving average; 0 shows the raw per-batch loss.",
)
TWINS_LAYER, TWINS_HEAD = Setting("twins_layer", "Layer", 0), Setting("twins_head", "Head", 0)
TWINS_POS = Setting("twins_pos", "After the token at position")
TWINS_GEN_TOKENS = Setting("twins_gen_tokens", "New tokens", 40, rule=Whole(5, 120))
TWINS_GEN_TEMP = Setting(
    "twins_gen_temp", "Temperature", 0.8, "0 is greedy: always the most probable token.", rule=Number(0.0, 2.0, 0.05)
)
TWINS_GEN_TOPK = Setting("twins_gen_topk", "Top-k (0 = off)", 40, rule=Whole(0, EOT_ID + 1))  # GPT-2's vocabulary
TWINS_GEN_SEED = Setting("twins_gen_seed", "Seed", 0, rule=SEEDS)
TWINS_PAIR = Setting(
    "twins_pair",
    "Matched heads",
    link="twins_pair",
    rule=Whole(0, 4095),  # an index of the matches
    help="Trained separately, the twins grew their heads in different places, so each pre-norm head "
    "is paired with the post-norm head whose attention looks most like it on random tokens "
    "repeated once (cosine similarity: 1 = the same pattern).",
)


def records() -> dict[str, Setting]:
    """Every setting by its name here (the name keys.py gives its key)."""
    return {name: value for name, value in globals().items() if isinstance(value, Setting)}


def linked() -> tuple[Setting, ...]:
    """The settings a link carries, in the order a link writes them (the sidebar's first)."""
    return tuple(s for s in records().values() if s.link)
