"""The only gptviz module that imports Streamlit: the shared sidebar, cached loaders, session-state keys.

One model per ModelSpec is loaded with st.cache_resource and shared by every session (it is read-only;
capture state lives in each call). Forward passes are cached with st.cache_data keyed by (spec, ids,
names), so a rerun caused by a display widget runs no model.
"""
from __future__ import annotations

import copy
import json
import re
import threading
from typing import NamedTuple

import streamlit as st
import torch

from . import PRESETS, GPT
from .config import ConfigError
from .bounded_cache import BoundedCache
from .devices import DTYPES, available_devices, available_dtypes, place
from .hooks import ActivationCache, capture, capture_nbytes
from .limits import LimitError, server_limits
from .links import SOURCE_BUNDLED, SOURCE_PRESET, SOURCE_PRETRAINED, SOURCE_TRAINED, replaced_link_value
from .params import total_params
from .tokenizer import get_tokenizer, token_labels
from .weights import CheckpointError, bundled_models, load_allowed, load_checkpoint
from .weights import training_vocab as weights_training_vocab

# Written as the bundled models' training text writes a play: the speaker's abbreviated name on its own line.
DEFAULT_PROMPT = "Romeo.\nBut soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun!"
EXAMPLE_PROMPTS = {
    "Romeo at the window (a speech)": DEFAULT_PROMPT,
    "Repeated letters (look for induction heads)": "A B C D E F G H A B C D E F G H",
    "A dialogue (speaker names)": "Ham.\nWho's there?\n\nHor.\nFriends to this ground.\n\nHam.\nWho's there?\n\nHor.\n",
}
# Far more text than any preset's context (1,024 tokens at most) needs; tokenising more is wasted server time.
MAX_PROMPT_CHARS = 20_000
# Presets above this size are slow to initialise on a laptop CPU; the sidebar says so.
LARGE_MODEL_PARAMS = 400_000_000


class ModelSpec(NamedTuple):
    """Everything that determines a model's weights and wiring: the cache key for load_model."""
    source: str        # one of the SOURCE_* labels
    name: str          # bundled model, preset name, folder/Hub id, or trained-run id
    norm: str          # "pre" or "post"
    seed: int = 0      # random init seed (presets only)
    device: str = "cpu"
    dtype: str = "float32"  # the weights' precision (half precision is offered on GPUs: gptviz.devices)

    def label(self) -> str:
        extra = "" if self.dtype == "float32" else f", {self.dtype}"
        if self.source == SOURCE_PRESET:
            return f"{self.name} ({self.norm}-norm, random init, seed {self.seed}{extra})"
        return f"{self.name} ({self.norm}-norm{extra})"


# Counts real forward passes run by the cached helpers below (tests assert display reruns add none).
_forward_lock = threading.Lock()
forward_calls = 0


def _count_forward() -> None:
    global forward_calls
    with _forward_lock:
        forward_calls += 1


def session_id() -> str | None:
    """This browser session's id (None outside a Streamlit script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def session_alive(sid: str | None) -> bool:
    """Whether session `sid` is still connected to this server (True where there is no server: AppTest)."""
    from streamlit import runtime
    if sid is None or not runtime.exists():
        return True
    return runtime.get_instance().is_active_session(sid)


class TrainedModels:
    """Models trained on the Train page, in memory, by run id (unique on the server), each with the session that
    trained it: the sidebar lists a session's own. At most `kept` are held; the oldest go first."""

    def __init__(self, kept: int):
        self.kept = kept
        self._models: dict[str, tuple[str | None, GPT]] = {}
        self._lock = threading.Lock()

    def add(self, run_id: str, model: GPT, owner: str | None) -> None:
        with self._lock:
            self._models.pop(run_id, None)
            self._models[run_id] = (owner, model.eval())
            while len(self._models) > self.kept:
                self._models.pop(next(iter(self._models)))

    def get(self, run_id: str) -> GPT | None:
        with self._lock:
            entry = self._models.get(run_id)
        return entry[1] if entry is not None else None

    def of(self, owner: str | None) -> list[str]:
        with self._lock:
            return [run for run, (who, _) in self._models.items() if who == owner]


@st.cache_resource
def _trained_models() -> TrainedModels:
    return TrainedModels(server_limits().trained_kept)


def _trained_store() -> dict[str, GPT]:
    """This session's trained models by run id."""
    store = _trained_models()
    return {run: model for run in store.of(session_id()) if (model := store.get(run)) is not None}


def register_trained_model(run_id: str, model: GPT) -> None:
    _trained_models().add(run_id, model, session_id())


@st.cache_resource
def _model_store() -> BoundedCache:
    """Loaded models, shared by every session, bounded by bytes (GPTVIZ_MODEL_CACHE_MB)."""
    return BoundedCache(server_limits().model_bytes, "model")


_BUILD_LOCK = threading.Lock()  # one model is built at a time: two visitors' new models do not double the peak


def load_model(spec: ModelSpec) -> GPT:
    """Build or load the model a spec names, cached (raises ConfigError/CheckpointError/LimitError with a clear
    message). A preset past the server's parameter cap is refused before anything is allocated."""
    estimate = None
    if spec.source == SOURCE_PRESET and spec.name in PRESETS:
        n = total_params(PRESETS[spec.name])
        if n > server_limits().max_params:
            raise LimitError(f"{spec.name} has {n:,} parameters; this server builds models of up to "
                             f"{server_limits().max_params:,} (GPTVIZ_MAX_PARAMS)")
        estimate = n * DTYPES[spec.dtype].itemsize if spec.dtype in DTYPES else None

    def build() -> GPT:
        with _BUILD_LOCK:
            return _build_model(spec)
    return _model_store().get_or_build(spec, build, model_nbytes, estimate)


def model_nbytes(model: GPT) -> int:
    """Bytes of a model's distinct parameter and buffer storages (a tied head counts once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def _build_model(spec: ModelSpec) -> GPT:
    if spec.source == SOURCE_PRESET:
        if spec.name not in PRESETS:
            raise ConfigError(f"unknown preset {spec.name!r}")
        with torch.device(spec.device):
            model = GPT(PRESETS[spec.name].replace(norm=spec.norm), seed=spec.seed)
        return place(model, spec.device, spec.dtype).eval()
    if spec.source == SOURCE_BUNDLED:
        models = bundled_models()
        if spec.name not in models:
            raise CheckpointError(f"bundled model {spec.name!r} is missing; available: {', '.join(models) or 'none'}")
        return place(load_checkpoint(models[spec.name]), spec.device, spec.dtype)
    if spec.source == SOURCE_TRAINED:
        model = _trained_models().get(spec.name)
        if model is None:
            raise CheckpointError("that trained model is gone (the server restarted, or newer runs took its place); "
                                  "train it again on the Train page")
        if model.config.norm != spec.norm:
            raise CheckpointError(f"the trained model is {model.config.norm}-norm")
        if (spec.device, spec.dtype) != ("cpu", "float32"):  # a copy: the stored model is every session's
            model = place(copy.deepcopy(model), spec.device, spec.dtype).eval()
        return model
    return place(load_allowed(spec.name, norm=spec.norm), spec.device, spec.dtype)  # visitors: allowed folders only


@st.cache_resource
def _capture_store() -> BoundedCache:
    """Recent prompts' captures, shared by every session, bounded by bytes (GPTVIZ_CAPTURE_CACHE_MB)."""
    return BoundedCache(server_limits().capture_bytes, "capture")


def get_capture(spec: ModelSpec, ids: tuple[int, ...], names: tuple[str, ...] | None = None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(logits [T, vocab], {hook name: tensor without the batch axis}) for one prompt, cached and shared: treat
    the tensors as read-only. A capture larger than the server's capture budget is refused (LimitError) before
    the model runs."""
    model = load_model(spec)
    wanted = model.hook_names if names is None else names
    estimate = capture_nbytes(model.config, wanted, len(ids))

    def run():
        _count_forward()
        logits, cache = capture(model, torch.tensor([ids]), list(names) if names is not None else None)
        return logits[0].float().cpu(), {k: v[0] for k, v in cache.items()}
    return _capture_store().get_or_build((spec, tuple(ids), names), run, _capture_size, estimate)


def _capture_size(result) -> int:
    logits, store = result
    seen, total = set(), logits.untyped_storage().nbytes()
    for t in store.values():  # a view shares its storage (resid_post of one block is resid_pre of the next)
        if t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    return total


def training_vocab(spec: ModelSpec) -> torch.Tensor | None:
    """The ids a bundled model's training text used (None for other sources, where it is not recorded)."""
    if spec.source != SOURCE_BUNDLED or spec.name not in bundled_models():
        return None
    return _read_training_vocab(str(bundled_models()[spec.name]))


@st.cache_resource(max_entries=4, show_spinner=False)
def _read_training_vocab(folder: str) -> torch.Tensor | None:
    return weights_training_vocab(folder)


def capture_cache(spec: ModelSpec, ids: tuple[int, ...], names: tuple[str, ...] | None = None
                  ) -> tuple[torch.Tensor, ActivationCache]:
    """get_capture wrapped in an ActivationCache (tensors keep no batch axis)."""
    logits, store = get_capture(spec, ids, names)
    return logits, ActivationCache(store, load_model(spec).config.n_layers)


@st.cache_data(max_entries=8, show_spinner=False)
def induction_scores(spec: ModelSpec, length: int) -> torch.Tensor:
    """Induction scores [layers, heads] on a random sequence of `length` repeated once, drawn from the model's
    training ids where they are recorded (cached capture; the Activations and Attention pages share it)."""
    from . import analysis
    cfg = load_model(spec).config
    seq = tuple(analysis.induction_sequence(cfg.vocab_size, length, ids=training_vocab(spec)).tolist())
    _, cache = capture_cache(spec, seq, pattern_names(cfg.n_layers))
    return analysis.induction_scores_from(cache.patterns(), length)


# ---- the shared sidebar -------------------------------------------------------------------------------

def _default_source() -> str:
    return SOURCE_BUNDLED if bundled_models() else SOURCE_PRESET


def _bundled_twin(norm: str) -> str | None:
    """The bundled model with this norm placement (e.g. shakespeare-pre / shakespeare-post)."""
    for name in bundled_models():
        if name.endswith(f"-{norm}"):
            return name
    return None


def _use_example() -> None:
    """Copy the chosen example into the prompt (runs before the text area is drawn)."""
    choice = st.session_state.get("example_prompt")
    if choice in EXAMPLE_PROMPTS:
        st.session_state["prompt"] = EXAMPLE_PROMPTS[choice]


def bundled_description(name: str) -> str:
    """One plain sentence on what a bundled model was trained on, read from its config.json."""
    try:
        training = json.loads((bundled_models()[name] / "config.json").read_text()).get("training", {})
    except (KeyError, OSError, ValueError):
        return "a bundled model."
    data = training.get("data", "")
    if data == "shakespeare-works":
        text = (f"trained on the complete works of Shakespeare less {len(training.get('held_out', []))} "
                "held-out plays")
    else:
        text = f"trained on {data or 'unrecorded data'}"
    from .evaluate import training_stages
    stages = training_stages(training)
    shares = [st.get("settings", {}).get("copy_fraction", 0) for st in stages]
    if any(shares):
        when = (f"{shares[0]:.1%}" if len(shares) == 1 else
                ", then ".join(f"{share:.1%} ({st.get('settings', {}).get('steps')} steps)"
                               for share, st in zip(shares, stages)))
        text += (f", with {when} of its training windows made of random tokens followed by their exact repeat "
                 "(meant to teach it to copy)")
        try:
            report = json.loads((bundled_models()[name] / "check.json").read_text())
            grown = report["passes"].get("induction_head_at_least_0.3")
            copies_letters = report["passes"].get("continues_the_repeated_letters_with_D")
            frequent = report.get("frequent_ids_induction", {}).get("best_induction_head", {}).get("score", 0.0)
        except (OSError, ValueError, KeyError, AttributeError):
            grown, copies_letters, frequent = None, None, 0.0
        example = " (the repeated-letters example shows it)" if copies_letters else ""
        if grown:
            text += f"; it grew an induction head{example}"
        elif grown is False and frequent >= 0.3:
            text += (f"; it grew an induction head for the frequent tokens it practised on{example}, not yet "
                     "for rare ones")
        elif grown is False:
            text += "; it did not grow an induction head"
    return text[0].upper() + text[1:] + ". Its model card says how well it does."


def sidebar() -> ModelSpec | None:
    """Draw the model picker and prompt; store and return the ModelSpec (None when no valid model)."""
    state = st.session_state
    state.setdefault("prompt", DEFAULT_PROMPT)
    with st.sidebar:
        st.subheader("Model")
        sources = [SOURCE_BUNDLED] if bundled_models() else []
        sources += [SOURCE_PRESET, SOURCE_PRETRAINED]
        if _trained_store():
            sources.append(SOURCE_TRAINED)
        if state.get("model_source") not in sources:
            state["model_source"] = _default_source()
        source = st.selectbox("Source", sources, key="model_source")
        norm = st.radio("LayerNorm placement", ["pre", "post"], key="norm", horizontal=True,
                        format_func={"pre": "pre-norm (GPT-2)", "post": "post-norm (GPT-1)"}.get,
                        help="Pre-norm normalises before each sub-layer and once at the end; post-norm "
                             "normalises after each residual addition.")
        devices = available_devices()
        keep_valid("device", devices, "cpu")
        device = st.selectbox("Device", devices, key="device") if len(devices) > 1 else "cpu"
        dtypes = available_dtypes(device)
        keep_valid("dtype", dtypes, "float32")
        dtype = st.selectbox("Precision", dtypes, key="dtype",
                             help="Half precision halves the weights' memory and speeds up GPU inference; "
                                  "captures and probabilities are still shown in float32.") \
            if len(dtypes) > 1 else "float32"
        spec = None
        if source == SOURCE_BUNDLED:
            name = _bundled_twin(norm)
            if name is None:
                st.error(f"No bundled {norm}-norm model.")
            else:
                spec = ModelSpec(source, name, norm, 0, device, dtype)
                st.caption(f"`{name}`: {bundled_description(name)} The LayerNorm radio switches between two "
                           "separately trained twins.")
        elif source == SOURCE_PRESET:
            state.setdefault("preset", "small-4l")
            preset = st.selectbox("Preset", list(PRESETS), key="preset")
            seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key="seed")
            n = total_params(PRESETS[preset])
            st.caption(f"{n:,} parameters, {n * 4 / 2**20:,.0f} MiB in float32, random weights.")
            if n > LARGE_MODEL_PARAMS:
                st.warning("A model this size takes a while to build on a CPU.")
            spec = ModelSpec(source, preset, norm, int(seed), device, dtype)
        elif source == SOURCE_PRETRAINED:
            name = st.text_input("Folder or Hub id", key="hf_name", placeholder="/path/to/gpt2 or gpt2",
                                 help="A Hub id such as gpt2, found in the local Hugging Face cache or "
                                      "downloaded when online; or a folder with config.json and model.safetensors "
                                      "(or pytorch_model.bin), in Hugging Face GPT-2 or gptviz layout, inside "
                                      "the server's model folders: the bundled models, the Hugging Face cache, "
                                      "and the folders listed in the GPTVIZ_MODEL_DIRS environment variable.")
            if name.strip():
                spec = ModelSpec(source, name.strip(), norm, 0, device, dtype)
                if norm == "post":
                    st.warning("GPT-2's weights were trained pre-norm. Post-norm runs the same weights with the "
                               "LayerNorms moved, so what it outputs is not what the model learned.")
            else:
                st.info("Enter a folder path or a Hub id.")
        else:
            runs = list(_trained_store())
            run = st.selectbox("Run", runs, key="trained_run")
            spec = ModelSpec(source, run, _trained_store()[run].config.norm, 0, device, dtype)
        st.subheader("Prompt")
        st.selectbox("Examples", list(EXAMPLE_PROMPTS), index=None, key="example_prompt", on_change=_use_example,
                     placeholder="Load an example prompt", label_visibility="collapsed")
        if len(state.get("prompt") or "") > MAX_PROMPT_CHARS:  # set by a link or a test: cut before drawing
            state["prompt"] = state["prompt"][:MAX_PROMPT_CHARS]
            st.warning(f"The prompt was cut to its first {MAX_PROMPT_CHARS:,} characters.")
        st.text_area("Prompt", key="prompt", height=120, label_visibility="collapsed", max_chars=MAX_PROMPT_CHARS,
                     help="Shared by every page.")
        st.radio("Figure download format", EXPORT_FORMATS, key="export_format", horizontal=True,
                 format_func=str.upper, help="The camera button in each figure's toolbar saves it in this format.")
    state["model_spec"] = spec
    return spec


def current_model() -> tuple[ModelSpec, GPT] | None:
    """The sidebar's model, loaded (with a spinner); a clear message in the page when it cannot load."""
    spec = st.session_state.get("model_spec")
    if spec is None:
        st.info("Choose a model in the sidebar.")
        return None
    try:
        with st.spinner(md_text(f"Loading {spec.label()}...")):
            return spec, load_model(spec)
    except (ConfigError, CheckpointError, LimitError, ValueError, OSError, RuntimeError) as err:
        st.error(md_text(f"Could not load {spec.label()}: {err}"))  # the name is the visitor's text
        return None


def cut_reason(settings: dict) -> str:
    """What removed the grey tokens of a generation's next-token bars: greedy decoding keeps only the
    most probable token; otherwise top-k/top-p."""
    return "greedy decoding (temperature 0)" if settings.get("temperature") == 0 else "top-k/top-p"


MEAN_HEAD = -1  # head option: the mean of a layer's heads


def head_name(head: int) -> str:
    return "mean of all heads" if head == MEAN_HEAD else f"head {head}"


def md_text(text: str) -> str:
    """Token text made literal in Markdown (pills and captions render it): escape ASCII punctuation."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def keep_valid(key: str, options, default) -> None:
    """Reset a widget's stored value when it is no longer an option (another model or prompt); say so when the
    value came from a link."""
    if key in st.session_state and st.session_state[key] not in options:
        st.session_state[key] = default
        notice = replaced_link_value(st.session_state, key)
        if notice:
            st.toast(notice, icon="🔗")


def require_model() -> tuple[ModelSpec, GPT]:
    """current_model() for a page that can show nothing without a model: stops the page (after its message)."""
    got = current_model()
    if got is None:
        st.stop()
    return got


class PromptTokens(NamedTuple):
    ids: tuple[int, ...]
    total: int           # tokens in the whole prompt
    truncated: bool      # only the last n_ctx tokens are kept


@st.cache_data(max_entries=64, show_spinner=False)
def encode_prompt(text: str) -> tuple[int, ...]:
    """The prompt's GPT-2 ids, tokenised once per distinct text (every page and rerun reuses them)."""
    return tuple(get_tokenizer().encode(text))


def fit_vocabulary(ids: list[int], vocab_size: int) -> tuple[list[int], int]:
    """GPT-2's BPE ids made to fit a smaller vocabulary (the GPT-1 preset has 40,000 ids): every id past it
    becomes the last id. Returns the ids and how many were replaced."""
    last = vocab_size - 1
    return [i if i <= last else last for i in ids], sum(i > last for i in ids)


def prompt_tokens(n_ctx: int, prompt: str | None = None, vocab_size: int | None = None) -> PromptTokens | None:
    """The sidebar prompt as ids, keeping the last n_ctx tokens (with a visible note); None and a hint
    when the prompt is empty. With `vocab_size` smaller than GPT-2's, ids past it are replaced (with a note)
    so a prompt never fails on such a model."""
    text = st.session_state.get("prompt", "") if prompt is None else prompt
    ids = list(encode_prompt(text[:MAX_PROMPT_CHARS]))
    if not ids:
        st.info("Type a prompt in the sidebar to see the model at work.")
        return None
    if vocab_size is not None:
        ids, replaced = fit_vocabulary(ids, vocab_size)
        if replaced:
            st.caption(f"{replaced} token(s) of this prompt have GPT-2 ids past this model's {vocab_size:,}-id "
                       f"vocabulary; they run as its last id, {vocab_size - 1:,} (shown as GPT-2's token for "
                       "that id). The prompt is tokenised with GPT-2's BPE whatever the model's vocabulary.")
    kept = tuple(ids[-n_ctx:])
    if len(ids) > n_ctx:
        st.warning(f"The prompt has {len(ids):,} tokens; the model's context is {n_ctx}, so only the last "
                   f"{n_ctx} are used.")
    return PromptTokens(kept, len(ids), len(ids) > n_ctx)


def require_prompt(n_ctx: int, vocab_size: int | None = None) -> PromptTokens:
    """prompt_tokens() for a page that can show nothing without a prompt: stops the page after the hint."""
    prompt = prompt_tokens(n_ctx, vocab_size=vocab_size)
    if prompt is None:
        st.stop()
    return prompt


EXPORT_FORMATS = ("png", "svg")


# Buttons that repeat a gesture (drag zooms, double-click resets) or suit no figure here (box and lasso select):
# without them the hover toolbar is four icons wide and no longer covers a narrow chart's title
MODEBAR_REMOVED = ("zoomIn2d", "zoomOut2d", "autoScale2d", "select2d", "lasso2d")


def plotly_config() -> dict:
    """Plotly's own export (the camera button in each figure's toolbar, no internet), in the format
    chosen in the sidebar."""
    fmt = st.session_state.get("export_format", "png")
    return {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "scale": 2 if fmt == "png" else 1},
            "modeBarButtonsToRemove": list(MODEBAR_REMOVED)}


FIGURE_SEQ = "_figure_seq"  # session-state key: figures drawn so far in this run (the router resets it)


def show_figure(fig, key: str | None = None, **kwargs):
    """st.plotly_chart with the shared export settings, and a button that downloads the figure as a standalone
    interactive HTML file (built only when clicked; clicking reruns nothing). Use it for every figure."""
    from .export import figure_file_name, figure_html
    chart = st.plotly_chart(fig, config=plotly_config(), key=key, **kwargs)
    seq = st.session_state.get(FIGURE_SEQ, 0)
    st.session_state[FIGURE_SEQ] = seq + 1
    st.download_button("Interactive HTML", data=lambda: figure_html(fig), file_name=figure_file_name(fig),
                       mime="text/html", key=f"html_{key}" if key else f"html_seq_{seq}", on_click="ignore",
                       type="tertiary", icon=":material/download:",
                       help="This figure as one HTML file that opens offline in any browser, with zoom and hover.")
    return chart


def figure_download(build, file_name: str, key: str, label: str = "Interactive HTML") -> None:
    """show_figure's download button for a view not drawn with Plotly: `build()` makes the figure only when clicked."""
    from .export import figure_html
    st.download_button(label, data=lambda: figure_html(build()), file_name=file_name, mime="text/html",
                       key=f"html_{key}", on_click="ignore", type="tertiary", icon=":material/download:",
                       help="This figure as one HTML file that opens offline in any browser, with zoom and hover.")


def download_csv(frame, file_name: str, key: str, label: str = "Data as CSV") -> None:
    """A download button for the data behind a view. `frame`: a DataFrame, or a function returning one
    (then the CSV is built only when the button is clicked). Clicking reruns nothing."""
    from .export import csv_bytes
    data = (lambda: csv_bytes(frame())) if callable(frame) else csv_bytes(frame)
    st.download_button(label, data=data, file_name=file_name, mime="text/csv", key=key, on_click="ignore",
                       icon=":material/download:")


def current_config():
    """The sidebar model's GPTConfig; a preset's comes from PRESETS without building its weights (pages
    that only count or draw need no model). None, with a message, when there is no valid model."""
    spec = st.session_state.get("model_spec")
    if spec is None:
        st.info("Choose a model in the sidebar.")
        return None
    if spec.source == SOURCE_PRESET and spec.name in PRESETS:
        return PRESETS[spec.name].replace(norm=spec.norm)
    got = current_model()
    return got[1].config if got is not None else None


# ---- live generation (Attention and Generation pages) ------------------------------------------------

GENERATION_KEY = "generation"


def pattern_names(n_layers: int) -> tuple[str, ...]:
    """The attention-pattern hook names of every layer."""
    return tuple(f"blocks.{i}.attn.hook_pattern" for i in range(n_layers))


def attention_page_names(n_layers: int, norm: str) -> tuple[str, ...]:
    """What the Attention page captures: every pattern, and each attention's input, from which the step-by-step
    and value-weighted views recompute the rest with the weights (so no view or layer switch reruns the model)."""
    from .head_steps import attention_input_name
    return pattern_names(n_layers) + tuple(attention_input_name(i, norm) for i in range(n_layers))


@st.cache_resource
def generation_slots():
    """The server's cap on live generations running at once (GPTVIZ_GENERATIONS), shared by every session."""
    from .live_generation import GenerationSlots
    return GenerationSlots(server_limits().generations)


def start_generation(spec: ModelSpec, model: GPT, ids, settings: dict, page: str):
    """Start a live generation for this session (stopping the one it had), stored in
    st.session_state[GENERATION_KEY] with the model and the page it belongs to. It runs beside the script, at
    the library's speed; the page draws `generation_view(...)` of it. settings: max_new_tokens, temperature,
    top_k, top_p, seed, and stream's other options. ValueError (bad settings or prompt) or RuntimeError (every
    server slot busy) before anything is stored."""
    from .live_generation import LiveGeneration
    old = st.session_state.get(GENERATION_KEY)
    if old:
        old["job"].stop()
        old["job"].wait(5)  # a token at most: frees its server slot for this one
    sid = session_id()
    job = LiveGeneration(model, ids, settings, owner=sid or "", slots=generation_slots(),
                         alive=lambda: session_alive(sid), on_token=_count_forward,
                         threads=server_limits().generation_threads)
    st.session_state[GENERATION_KEY] = {"spec": spec, "page": page, "job": job}
    return job


def stop_generation(unless_page: str | None = None) -> None:
    """Stop this session's live generation, unless it belongs to `unless_page`. It keeps the tokens the page had
    shown: the model writes ahead of the redraws, and the text must stop where the reader saw it stop."""
    entry = st.session_state.get(GENERATION_KEY)
    if entry and entry["page"] != unless_page:
        entry["job"].stop(keep=entry["job"].shown)


def stored_generation(spec: ModelSpec, ids, page: str):
    """This session's generation (running or over) when it ran on this model, prompt and page, else None."""
    entry = st.session_state.get(GENERATION_KEY)
    if not entry or entry["spec"] != spec or entry["page"] != page or \
            entry["job"].prompt != tuple(int(i) for i in ids):
        return None
    return entry["job"]


def generation_view(job) -> dict:
    """What a page draws of a generation, read once so every part of one draw agrees:
    {prompt, settings, steps, running, stopped, error, seconds}. While it runs, it also records on the job how many
    steps this draw shows (`job.shown`): what Stop keeps."""
    running = job.running  # read before the steps: a run seen finished has every step in the snapshot
    steps = job.snapshot()
    if running:
        job.shown = len(steps)  # what Stop keeps (a running job is drawn only by its live view)
    return {"prompt": job.prompt, "settings": job.settings, "steps": steps, "running": running,
            "stopped": job.stopped, "error": job.error, "seconds": job.seconds}


LIVE_REDRAW_S = 0.5  # how often a page redraws a running generation (0.25 s: twice the script runs, the model 4x slower)


# Live text in st.code's font: the generated text does not reflow when the finished st.code replaces it, and the
# next-token list's padded columns line up. A fixed rule for keyed boxes (no user or model text is ever part of it).
MONO_KEY = "gv_mono"
_MONO_CSS = (f'<style>[class*="st-key-{MONO_KEY}"] [data-testid="stText"], [class*="st-key-{MONO_KEY}"] '
             '[data-testid="stText"] * {font-family: "Source Code Pro", monospace; font-size: 0.875rem; '
             'line-height: 1.6;}</style>')


def monospace_text(text: str, name: str, border: bool = False) -> None:
    """Plain text (st.text: never Markdown) in a monospace font, in a box keyed `gv_mono_<name>` (unique per run)."""
    st.html(_MONO_CSS)  # style only: Streamlit puts it in the page's event container, taking no space
    with st.container(border=border, key=f"{MONO_KEY}_{name}"):
        st.text(text)


def generated_text(text: str, live: bool) -> None:
    """A generation's prompt and continuation, never Markdown. Live: st.text in a bordered box, because st.code's
    syntax highlighter was a fifth of the browser's work at each redraw (a Chromium profile, benchmarks/README.md),
    on the two cores the model shares; finished: st.code, with its copy button."""
    if live:
        monospace_text(text, "generated", border=True)
    else:
        st.code(text, language=None, wrap_lines=True)


def next_token_text(steps) -> str:
    """A live view's next-token list as plain text (st.text: never Markdown): the last step's sampled token and the
    8 most probable. Text, not a bar chart, while the model writes: each redraw is a script run beside it."""
    last = steps[-1]
    top_ids = [t[0] for t in last.top[:8]]
    top = "\n".join(f"{label:>14}  {t[1]:.3f}" for label, t in zip(token_labels(top_ids), last.top))
    return (f"Step {len(steps) - 1}: sampled {last.piece} (p {last.prob:.3f}, rank {last.rank})\n"
            f"most probable next tokens:\n{top}")


def map_pick(layer_key: str, head_key: str, n_layers: int, n_heads: int):
    """The heatmap component's on_pick for a page whose pickers live in `layer_key` and `head_key`: they follow
    the layer and head picked in the map (head index n_heads is the mean)."""
    def follow(layer: int, head_index: int) -> None:
        if 0 <= layer < n_layers and 0 <= head_index <= n_heads:
            st.session_state[layer_key] = layer
            st.session_state[head_key] = MEAN_HEAD if head_index == n_heads else head_index
    return follow


def wait_if_nearly_done(job) -> None:
    """Before a live redraw: when the model should finish before the next one, wait for it (the script thread
    sleeps, holding nothing), so the finished text shows at once instead of up to LIVE_REDRAW_S later."""
    done, seconds = len(job.steps), job.seconds
    if not job.running or not done or not seconds:
        return
    remaining = (job.settings["max_new_tokens"] - done) * seconds / done
    if remaining < LIVE_REDRAW_S:
        job.wait(min(LIVE_REDRAW_S, 1.5 * remaining + 0.02))


def writing_speed(run: dict, live: bool) -> str:
    """', written in 1.2 s (85 tokens/s)' for a finished generation: the model's own pace, whatever drawing cost."""
    seconds, n = run.get("seconds"), len(run["steps"])
    if live or not seconds or not n:
        return ""
    return f", written in {seconds:.2f} s ({n / seconds:.0f} tokens/s)"


def count_forward(n: int = 1) -> None:
    """Count real forward passes run by a page's own cached helper (see forward_calls)."""
    for _ in range(n):
        _count_forward()


@st.cache_resource
def training_registry():
    """The server's background training jobs (a gptviz.training_jobs.JobRegistry), held as a resource so
    running jobs survive reruns and the module reloads Streamlit does when a source file changes."""
    from .training_jobs import JobRegistry
    limits = server_limits()
    return JobRegistry(max_running=limits.training_jobs, per_owner=limits.jobs_per_session,
                       max_tokens=limits.training_tokens, max_seconds=limits.training_seconds)
