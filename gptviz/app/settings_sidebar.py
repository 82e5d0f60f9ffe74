"""The sidebar's settings (settings.py): every page reads them, and a link carries them by short names."""

from __future__ import annotations

from ..figures.palette import PALETTES, STANDARD
from ..model.config import PRESETS
from .rules import Choice, Setting, Text, Whole
from .settings_choices import (
    MAX_LINK_MODEL,
    MAX_LINK_PROMPT,
    SEEDS,
    SOURCE_BUNDLED,
    SOURCE_CODES,
    SOURCE_PRESET,
    SOURCE_PRETRAINED,
    SOURCE_TRAINED,
    SOURCE_UPLOAD,
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
