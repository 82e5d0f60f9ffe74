"""The pairs the Pre-norm vs post-norm page compares: the bundled twins (trained alike on Shakespeare, one of each
wiring), and, when both are on this server's disk, Hugging Face's GPT-2 small (gpt2, pre-norm) and GPT-1 (openai-gpt,
post-norm): two trained models of the same size, one of each wiring, from the Hugging Face cache or from folders named
gpt2 and openai-gpt in GPTVIZ_MODEL_DIRS. Nothing is downloaded for it, and without both nothing changes.

Each model of a pair reads the prompt through its own tokenizer: GPT-2's BPE, and GPT-1's own (40,478 ids, lower
case) from its folder's vocab.json and merges.txt (gptviz.model.gpt1_tokenizer). A GPT-1 folder without those files
reads GPT-2's token ids, and the page says what that does to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...model import weights
from ...model.gpt1_tokenizer import folder_tokenizer
from ...model.tokenizer import decode, encode, token_labels
from ...serve.limits import server_limits
from ...serve.model_access import allowed_source
from .. import keys as K
from .. import model_service

HUB_IDS = {"pre": ("gpt2", "openai-community/gpt2"), "post": ("openai-gpt", "openai-community/openai-gpt")}
HUB_STEM = "GPT-2 small vs GPT-1 (OpenAI, Hugging Face)"
HUB_NAMES = {"pre": "GPT-2 small", "post": "GPT-1"}
CONFOUNDS = (
    "GPT-2 small and GPT-1 differ in more than the LayerNorm's place, so no difference here is the wiring's alone. "
    "**Data**: GPT-1 read BooksCorpus (about 7,000 unpublished books, some 800 M words); GPT-2, WebText (8 M web "
    "pages linked from Reddit, 40 GB of text). **Tokenizer**: GPT-1's BPE lower-cases the text and has 40,478 ids, "
    "GPT-2's works on bytes, keeps case and has 50,257, so the same prompt is cut into other tokens: each model's "
    "maps and bars are over its own tokens, and positions do not line up one to one. **Training length**: GPT-1 "
    "trained 100 epochs on 512-token windows; GPT-2 on 1,024-token windows, in batches of 512, for a length its paper "
    "does not give. **Shape**: both have 12 layers of 12 heads at width 768, but GPT-2 ends in a LayerNorm that "
    "GPT-1 lacks and has a larger vocabulary (124 M parameters against 117 M)."
)
GPT2_TOKENS_FOR_GPT1 = (
    "This GPT-1 folder has no vocab.json and merges.txt, so GPT-1 reads GPT-2's token ids here. An id names another "
    "string in GPT-1's vocabulary, so GPT-1 reads text it never saw: its maps and guesses show the wiring on "
    "scrambled input, not what GPT-1 learned. Put GPT-1's tokenizer files beside its weights to fix it."
)


@dataclass(frozen=True)
class Codec:
    """How one model of a pair turns text into ids and back."""

    encode: Callable[[str], list[int]]
    decode: Callable[..., str]
    labels: Callable[..., list[str]]
    name: str


GPT2_CODEC = Codec(encode, decode, token_labels, "GPT-2's BPE")


@dataclass(frozen=True)
class Pair:
    """Two trained models of the same size, one of each wiring, as the page compares them."""

    stem: str  # the picker's label
    names: dict[str, str]  # {"pre": shown name, "post": shown name}
    specs: dict[str, model_service.ModelSpec]
    codecs: dict[str, Codec]
    bundled: bool  # the bundled twins: their training records, histories and recipes

    @property
    def same_tokens(self) -> bool:
        return self.codecs["pre"] is self.codecs["post"]


def bundled_pair(stem: str, pre: str, post: str) -> Pair:
    names = {"pre": pre, "post": post}
    specs = {norm: model_service.ModelSpec(K.SOURCE_BUNDLED, name, norm) for norm, name in names.items()}
    return Pair(stem, names, specs, {"pre": GPT2_CODEC, "post": GPT2_CODEC}, True)


def _on_disk(norm: str) -> tuple[str, Path] | None:
    """(the name a ModelSpec loads it by, its folder) for GPT-2 small or GPT-1: a folder of that name in
    GPTVIZ_MODEL_DIRS, else the Hugging Face cache (or a visitor's kept download); None when neither has it."""
    for root in server_limits().model_dirs:
        for repo in HUB_IDS[norm]:
            folder = Path(root) / repo.rpartition("/")[2]
            if (folder / "config.json").is_file():
                return str(folder), folder
    for repo in HUB_IDS[norm]:
        if weights.hub_copy_on_disk(repo):
            try:
                return repo, allowed_source(repo, offline=True)
            except (weights.CheckpointError, OSError):
                continue
    return None


def hub_pair() -> Pair | None:
    """GPT-2 small and GPT-1 as a pair when both are on disk with the wiring and size the pair needs (GPT-2 pre-norm,
    GPT-1 post-norm; the same layers, heads and width); None otherwise. Reads two config.json files, no weights."""
    found = {norm: _on_disk(norm) for norm in ("pre", "post")}
    if not all(found.values()):
        return None
    try:
        cfgs = {norm: weights.read_config(folder)[0] for norm, (_, folder) in found.items()}
    except (weights.CheckpointError, OSError):
        return None
    shape = {norm: (c.n_layers, c.n_heads, c.d_model) for norm, c in cfgs.items()}
    if cfgs["pre"].norm != "pre" or cfgs["post"].norm != "post" or shape["pre"] != shape["post"]:
        return None
    specs = {norm: model_service.ModelSpec(K.SOURCE_PRETRAINED, name, norm) for norm, (name, _) in found.items()}
    gpt1 = gpt1_codec(str(found["post"][1]), cfgs["post"].vocab_size)
    return Pair(HUB_STEM, dict(HUB_NAMES), specs, {"pre": GPT2_CODEC, "post": gpt1 or GPT2_CODEC}, False)


def gpt1_codec(folder: str, vocab_size: int) -> Codec | None:
    """GPT-1's own tokenizer from its folder (parsed once per version of its files, the same object the loaded model
    carries: gptviz.model.tokenizer.tokenizer_for), when its files are there and fit the model's vocabulary."""
    try:
        tok = folder_tokenizer(folder)
    except (ValueError, OSError):
        return None
    if tok is None or tok.n_vocab != vocab_size:
        return None
    return Codec(tok.encode, tok.decode, tok.labels, "GPT-1's own BPE")


def prompt_ids(codec: Codec, text: str, n_ctx: int, vocab_size: int) -> tuple[tuple[int, ...], int]:
    """A model's ids for the prompt (its last n_ctx, ids past its vocabulary as its last id) and how many it had."""
    ids = [min(i, vocab_size - 1) for i in codec.encode(text)]
    return tuple(ids[-n_ctx:]), len(ids)


def position_in(pair: Pair, ids: dict[str, tuple[int, ...]], pos: int) -> int:
    """The post-norm model's position that ends where the pre-norm model's token `pos` ends (the same text read so
    far, each through its own tokenizer); `pos` itself when both read the same tokens."""
    if pair.same_tokens:
        return pos
    prefix = pair.codecs["pre"].decode(ids["pre"][: pos + 1])
    dropped = len(pair.codecs["post"].encode(pair.codecs["pre"].decode(ids["pre"]))) - len(ids["post"])
    return max(0, min(len(ids["post"]) - 1, len(pair.codecs["post"].encode(prefix)) - 1 - max(dropped, 0)))
