"""What the settings (settings.py) share: the choices they offer, by the labels the widgets show (pages compare
values with them; keys.py re-exports them), the limits of what a link carries, and the rules several settings check
values with."""

from __future__ import annotations

from .rules import Whole

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
HEADS = Whole(-1, 4095)  # head -1: the mean of the layer's heads (gptviz.model.heads.MEAN_HEAD)
TOP_K = Whole(0, 1_000_000)  # the widget's maximum is the model's vocabulary; a link's larger value is replaced
NEXT_TOKENS = Whole(0, 1_000_000)  # token ids; the page replaces one that is not among its choices
SCALE_HELP = (
    "For the attention figures; the default, the square root, makes small weights visible. Hover always "
    "shows the weight."
)
