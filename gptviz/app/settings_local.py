"""The settings a page keeps to itself (settings.py): links do not carry them, the twins' matched pair aside (last, so
a link writes it last, as it always has)."""

from __future__ import annotations

from ..model.config import NORM_TYPES, PRESETS
from ..model.tokenizer import EOT_ID
from .rules import Choice, Flag, Number, Setting, Whole
from .settings_choices import GROW_WIRINGS, SEEDS

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
# one-token boxes (views/unit_sections.one_token_box checks their length); a head's source token is keyed per head
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
ATT_SPAN_DIRECTION = Setting(
    "att_span_dir",
    "The span's attention",
    "from the span",
    rule=Choice(("from the span", "to the span")),
    help="From: the span's rows summed, where its tokens look. To: its columns summed, how much each token looks at "
    "the span's tokens.",
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


def loss_smoothing(key: str, default: float, help: str) -> Setting:
    """The slider of a training-loss curve's smoothing (an exponential moving average; 0: the raw per-batch loss)."""
    return Setting(key, "Smoothing of the training loss", default, rule=Number(0.0, 0.99, 0.01), help=help)


TRAIN_RUN_PICK = Setting("train_run_pick", "Run")
TRAIN_SMOOTH = loss_smoothing("train_smooth", 0.6, "Exponential moving average of the per-batch loss; 0 shows it raw.")

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
TWINS_SMOOTH = loss_smoothing("twins_smooth", 0.9, "Exponential moving average; 0 shows the raw per-batch loss.")
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
