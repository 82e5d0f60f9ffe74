"""The shared sidebar (model source, wiring, device, prompt) and what pages ask of it: require_model and
require_prompt stop a page with a clear message when there is nothing to show."""

from __future__ import annotations

import json
from typing import NamedTuple

import streamlit as st

from .. import GPT, PRESETS
from ..figures.palette import PALETTES
from ..model.config import ConfigError
from ..model.devices import available_devices, available_dtypes
from ..model.params import total_params
from ..model.tokenizer import fit_vocabulary, get_tokenizer, is_gpt2
from ..model.weights import CheckpointError, bundled_models, hub_copy_on_disk
from ..serve.limits import LimitError, server_limits
from ..serve.model_access import trained_norm
from . import keys as K
from . import settings as S
from .display import EXPORT_FORMATS, md_text
from .jobs import my_trained_models
from .links import prompt_left_out, replaced_link_value
from .model_files import folder_needs_n_head, head_count_box, upload_picker, wiring_warning
from .model_service import ModelSpec, load_model
from .services import cached
from .text_limits import MODEL_NAME_CHARS, checked_text

# Written as the bundled models' training text writes a play: the speaker's abbreviated name on its own line.
ROMEO = "Romeo.\nBut soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun!"
# The default repeats Romeo's lines after Juliet's, so the first screen has a repeat for induction heads to copy from
# (shakespeare-pre's layer 1, head 0 puts 0.44 of its weight there, chance 0.05; the Attention page opens on it)
DEFAULT_PROMPT = f"{ROMEO}\n\nJuliet.\nAy me!\n\n{ROMEO[: ROMEO.index('It is')]}It is the east,"
EXAMPLE_PROMPTS = {
    "Romeo, then his lines again (induction)": DEFAULT_PROMPT,
    "Romeo at the window (a speech)": ROMEO,
    "Repeated letters (look for induction heads)": "A B C D E F G H A B C D E F G H",
    "A dialogue (speaker names)": "Ham.\nWho's there?\n\nHor.\nFriends to this ground.\n\nHam.\nWho's there?\n\nHor.\n",
}
# Far more text than any preset's context (1,024 tokens at most) needs; tokenising more is wasted server time.
MAX_PROMPT_CHARS = 20_000
# GPT-2 small, one click away: modern English where the bundled models write Shakespeare. Its Hub checkpoint,
# model.safetensors, is 548,105,171 bytes: 124,439,808 float32 weights, the 1024 x 1024 float32 causal mask each of
# its 12 layers stores (50,331,648 bytes), and the file's header. The download checks the Hub's stated size again.
HUB_GPT2, HUB_GPT2_BYTES = "gpt2", 548_105_171
# The sidebar's model settings: what "Back to ..." restores after a model that fails to load (issue 32). The page's
# own settings need no copy: a page without a model ends its run with st.stop(), and Streamlit forgets the values of
# widgets a run did not draw only after a run that was not stopped; the prompt is drawn in every run.
MODEL_KEYS = (K.MODEL_SOURCE, K.HF_NAME, K.N_HEAD, K.NORM, K.PRESET, K.SEED, K.TRAINED_RUN, K.DEVICE, K.DTYPE)
# Presets above this size are slow to initialise on a laptop CPU; the sidebar says so.
LARGE_MODEL_PARAMS = 400_000_000


def _default_source() -> str:
    return K.SOURCE_BUNDLED if bundled_models() else K.SOURCE_PRESET


def _bundled_twin(norm: str) -> str | None:
    """The bundled model with this norm placement (e.g. shakespeare-pre / shakespeare-post)."""
    for name in bundled_models():
        if name.endswith(f"-{norm}"):
            return name
    return None


def default_model_spec() -> ModelSpec | None:
    """The model a first visit shows, as the sidebar's defaults name it (the bundled pre-norm twin on the CPU in
    float32); None where no model is bundled (the default source is then a preset)."""
    name = _bundled_twin("pre")
    if _default_source() != K.SOURCE_BUNDLED or name is None:
        return None
    return ModelSpec(K.SOURCE_BUNDLED, name, "pre", 0, "cpu", "float32")


def _use_example() -> None:
    """Copy the chosen example into the prompt (runs before the text area is drawn)."""
    choice = st.session_state.get(K.EXAMPLE_PROMPT)
    if choice in EXAMPLE_PROMPTS:
        st.session_state[K.PROMPT] = EXAMPLE_PROMPTS[choice]


def bundled_description(name: str) -> str:
    """One plain sentence on what a bundled model was trained on, read from its config.json."""
    try:
        training = json.loads((bundled_models()[name] / "config.json").read_text()).get("training", {})
    except (KeyError, OSError, ValueError):
        return "a bundled model."
    data = training.get("data", "")
    if data == "shakespeare-works":
        text = f"trained on the complete works of Shakespeare less {len(training.get('held_out', []))} held-out plays"
    else:
        text = f"trained on {data or 'unrecorded data'}"
    from ..training.evaluate import training_stages

    stages = training_stages(training)
    shares = [stage.get("settings", {}).get("copy_fraction", 0) for stage in stages]
    if any(shares):
        when = (
            f"{shares[0]:.1%}"
            if len(shares) == 1
            else ", then ".join(
                f"{share:.1%} ({stage.get('settings', {}).get('steps')} steps)"
                for share, stage in zip(shares, stages, strict=True)
            )
        )
        text += (
            f", with {when} of its training windows made of random tokens followed by their exact repeat "
            "(meant to teach it to copy)"
        )
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
            text += (
                f"; it grew an induction head for the frequent tokens it practised on{example}, not yet for rare ones"
            )
        elif grown is False:
            text += "; it did not grow an induction head"
    return text[0].upper() + text[1:] + ". Its model card says how well it does."


def sidebar() -> ModelSpec | None:
    """Draw the model picker and prompt; store and return the ModelSpec (None when no valid model)."""
    state = st.session_state
    state.setdefault(K.PROMPT, DEFAULT_PROMPT)
    with st.sidebar:
        prompt_box()  # first: the one thing every page reads, and the first thing a visitor types into
        spec = model_picker()
        S.EXPORT_FORMAT.radio(st, options=EXPORT_FORMATS, horizontal=True, format_func=str.upper)
        S.PALETTE.selectbox(st, format_func=lambda name: PALETTES[name].label)
    state[K.MODEL_SPEC] = spec
    return spec


def model_picker() -> ModelSpec | None:
    """Source, wiring, device and precision, then what the source needs; the spec they name (None when none)."""
    state = st.session_state
    st.subheader("Model")
    sources = [K.SOURCE_BUNDLED] if bundled_models() else []
    sources += [K.SOURCE_PRESET, K.SOURCE_PRETRAINED]
    if my_trained_models():
        sources.append(K.SOURCE_TRAINED)
    if server_limits().upload_mb:  # an operator can turn uploads off (GPTVIZ_UPLOAD_MB=0)
        sources.append(K.SOURCE_UPLOAD)
    if state.get(K.MODEL_SOURCE) not in sources:
        state[K.MODEL_SOURCE] = _default_source()
    source = S.MODEL_SOURCE.selectbox(st, options=sources)
    if (source, state.get(K.HF_NAME)) != (K.SOURCE_PRETRAINED, HUB_GPT2):
        hub_gpt2_button()
    norm = S.NORM.radio(st, horizontal=True, format_func={"pre": "pre-norm (GPT-2)", "post": "post-norm (GPT-1)"}.get)
    devices = available_devices()
    keep_valid(K.DEVICE, devices, S.DEVICE.default)
    device = S.DEVICE.selectbox(st, options=devices) if len(devices) > 1 else S.DEVICE.default
    dtypes = available_dtypes(device)
    keep_valid(K.DTYPE, dtypes, S.DTYPE.default)
    dtype = S.DTYPE.selectbox(st, options=dtypes) if len(dtypes) > 1 else S.DTYPE.default
    spec = SOURCE_PICKERS[source](norm, device, dtype)
    if spec is None or spec.source != K.SOURCE_PRETRAINED or spec.n_head is None:
        state.pop(K.N_HEAD, None)  # a head count travels in links only with the folder it completes
    return spec


class ReturnPoint(NamedTuple):
    """A model to go back to: its spec (None: none had loaded) and the sidebar settings that name it (MODEL_KEYS;
    one not among them was unset)."""

    spec: ModelSpec | None
    values: dict


def remember_return_point() -> None:
    """Keep the sidebar's model settings before switching away from them, for a way back if the new model fails."""
    state = st.session_state
    values = {key: state[key] for key in MODEL_KEYS if key in state}
    state[K.MODEL_RETURN] = ReturnPoint(state.get(K.MODEL_SPEC), values)


def _use_hub_gpt2() -> None:
    remember_return_point()
    st.session_state[K.MODEL_SOURCE] = K.SOURCE_PRETRAINED
    st.session_state[K.HF_NAME] = HUB_GPT2


def return_point(failed: ModelSpec) -> ReturnPoint:
    """Where "Back to ..." goes after `failed` did not load: the model before the Hub click, or else the default
    source (the bundled model of the wiring in use, where there is one)."""
    back = st.session_state.get(K.MODEL_RETURN)
    if back is not None and back.spec is not None and back.spec != failed:
        return back
    state = st.session_state
    source = _default_source()
    name = _bundled_twin(failed.norm) if source == K.SOURCE_BUNDLED else None
    spec = ModelSpec(source, name, failed.norm, 0, failed.device, failed.dtype) if name else None
    kept = {key: state[key] for key in MODEL_KEYS if key in state and key != K.HF_NAME}
    return ReturnPoint(spec, {**kept, K.MODEL_SOURCE: source})


def _go_back(back: ReturnPoint) -> None:
    state = st.session_state
    state.pop(K.MODEL_RETURN, None)
    for key in MODEL_KEYS:
        if key in back.values:
            state[key] = back.values[key]
        else:
            state.pop(key, None)  # unset before: a Hub id left behind would travel in the link


def way_back(failed: ModelSpec) -> None:
    """A button under a failed load's message that returns to the model before it (the page keeps its view)."""
    back = return_point(failed)
    if back.spec == failed or (back.spec is None and back.values[K.MODEL_SOURCE] == failed.source):
        return  # the default is what failed: nowhere else to go
    name = back.spec.label() if back.spec is not None else "the default model"
    st.button(
        md_text(f"Back to {name}"),
        key=K.MODEL_BACK,
        on_click=_go_back,
        args=(back,),
        type="primary",
        icon=":material/undo:",
        help="The model you had before, with the page and the prompt as you left them.",
    )


def hub_gpt2_button() -> None:
    """GPT-2 small from the Hugging Face Hub in one click, saying what that downloads (nothing once it is here)."""
    size = "on this server already" if hub_copy_on_disk(HUB_GPT2) else f"a {HUB_GPT2_BYTES / 1e6:,.0f} MB download"
    st.button(
        f"GPT-2 small from the Hub ({size})",
        key=K.HUB_GPT2,
        on_click=_use_hub_gpt2,
        width="stretch",
        help="OpenAI's GPT-2 small (124M parameters, trained on web pages) writes modern English, where the "
        "bundled models write Shakespeare. Downloaded once from the Hugging Face Hub, then kept on the "
        "server; where the Hub cannot be reached, the page says so.",
    )


def bundled_picker(norm: str, device: str, dtype: str) -> ModelSpec | None:
    name = _bundled_twin(norm)
    if name is None:
        st.error(f"No bundled {norm}-norm model.")
        return None
    st.caption(f"`{name}`, trained on Shakespeare.")
    with st.expander("Model card"):
        st.caption(
            f"{bundled_description(name)} The LayerNorm radio switches between two separately trained "
            "models, whose heads sit in different places: Pre-norm vs post-norm compares them with heads "
            "matched by role."
        )
    return ModelSpec(K.SOURCE_BUNDLED, name, norm, 0, device, dtype)


def preset_picker(norm: str, device: str, dtype: str) -> ModelSpec:
    S.PRESET.setdefault(st.session_state)
    preset = S.PRESET.selectbox(st)
    seed = S.SEED.number_input(st)
    n = total_params(PRESETS[preset])
    st.caption(f"{n:,} parameters, {n * 4 / 2**20:,.0f} MiB in float32, random weights.")
    if n > LARGE_MODEL_PARAMS:
        st.warning("A model this size takes a while to build on a CPU.")
    return ModelSpec(K.SOURCE_PRESET, preset, norm, int(seed), device, dtype)


def pretrained_picker(norm: str, device: str, dtype: str) -> ModelSpec | None:
    # the record's label, key and help, drawn through checked_text for h-safe43's server-side length check
    name = checked_text(
        st.text_input,
        "Folder or Hub id",
        S.HF_NAME.key,
        MODEL_NAME_CHARS,
        placeholder="/path/to/gpt2 or gpt2",
        help=S.HF_NAME.help,
    )
    if not name.strip():
        st.info("Enter a folder path or a Hub id.")
        return None
    n_head = None
    if folder_needs_n_head(name.strip()):  # Raschka's GPTModel: the file cannot say (the link carries the count)
        n_head = head_count_box(S.N_HEAD, "This file")
        if n_head is None:
            return None
    # a checkpoint on this server tells its own wiring (GPT-1's is post)
    wiring_warning(trained_norm(name.strip(), n_head=n_head), norm)
    return ModelSpec(K.SOURCE_PRETRAINED, name.strip(), norm, 0, device, dtype, n_head)


def trained_picker(norm: str, device: str, dtype: str) -> ModelSpec:
    runs = my_trained_models()
    run = S.TRAINED_RUN.selectbox(st, options=list(runs))
    return ModelSpec(K.SOURCE_TRAINED, run, runs[run].config.norm, 0, device, dtype)  # a run has its own wiring


SOURCE_PICKERS = {
    K.SOURCE_BUNDLED: bundled_picker,
    K.SOURCE_PRESET: preset_picker,
    K.SOURCE_PRETRAINED: pretrained_picker,
    K.SOURCE_TRAINED: trained_picker,
    K.SOURCE_UPLOAD: upload_picker,
}


def prompt_box() -> None:
    """The examples menu and the prompt every page reads."""
    state = st.session_state
    st.subheader("Prompt")
    if len(state.get(K.PROMPT) or "") > MAX_PROMPT_CHARS:  # set by a link or a test: cut before drawing
        state[K.PROMPT] = state[K.PROMPT][:MAX_PROMPT_CHARS]
        st.warning(f"The prompt was cut to its first {MAX_PROMPT_CHARS:,} characters.")
    # max_chars one past the limit (text_limits), so a cut message is told from one at the limit
    S.PROMPT.text_area(st, height=120, label_visibility="collapsed", max_chars=MAX_PROMPT_CHARS + 1)
    if prompt_left_out(state):
        st.caption("Too long for a link: the address shares the view without this prompt.")
    S.EXAMPLE_PROMPT.selectbox(
        st,
        options=list(EXAMPLE_PROMPTS),
        index=None,
        on_change=_use_example,
        placeholder="Load an example prompt",
        label_visibility="collapsed",
    )


def _copy_page_prompt() -> None:
    st.session_state[K.PROMPT] = st.session_state[K.PAGE_PROMPT]


def page_prompt_box(height: int = 100) -> None:
    """The prompt again, atop a page, for a phone, whose sidebar starts closed; CSS hides it where the sidebar shows.
    A widget has one key, so this box has its own, set from the sidebar's prompt before it is drawn and copied back
    when typed into: the two never disagree."""
    st.session_state[K.PAGE_PROMPT] = st.session_state.get(K.PROMPT, "")
    with st.container(key=K.NARROW_ONLY):
        S.PAGE_PROMPT.text_area(st, height=height, max_chars=MAX_PROMPT_CHARS + 1, on_change=_copy_page_prompt)


def current_model() -> tuple[ModelSpec, GPT] | None:
    """The sidebar's model, loaded (with a spinner); a clear message in the page when it cannot load."""
    spec = st.session_state.get(K.MODEL_SPEC)
    if spec is None:
        st.info("Choose a model in the sidebar.")
        return None
    try:
        with st.spinner(md_text(f"Loading {spec.label()}...")):
            model = load_model(spec)
        st.session_state.pop(K.MODEL_RETURN, None)  # loaded: no way back needed, and none left to go stale
        return spec, model
    except (ConfigError, CheckpointError, LimitError, ValueError, OSError, RuntimeError) as err:
        st.error(md_text(f"Could not load {spec.label()}: {err}"))  # the name is the visitor's text
        way_back(spec)
        return None


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
    total: int  # tokens in the whole prompt
    truncated: bool  # only the last n_ctx tokens are kept


def encode_prompt(text: str, enc=None) -> tuple[int, ...]:
    """The prompt's ids in the model's tokenizer `enc` (tokenizer_for(model); default GPT-2's, whose ids are
    cached per distinct text: every page and rerun reuses them)."""
    return _gpt2_ids(text) if is_gpt2(enc) else tuple(enc.encode(text))


@cached
def _gpt2_ids(text: str) -> tuple[int, ...]:
    return tuple(get_tokenizer().encode(text))


def prompt_text() -> str:
    """The sidebar's prompt as every page reads it (issue 61: one reader): its text, cut at MAX_PROMPT_CHARS."""
    text = st.session_state.get(K.PROMPT)
    return text[:MAX_PROMPT_CHARS] if isinstance(text, str) else ""


def prompt_tokens(
    n_ctx: int, prompt: str | None = None, vocab_size: int | None = None, enc=None
) -> PromptTokens | None:
    """The sidebar prompt as ids in the model's tokenizer `enc` (default GPT-2's), keeping the last n_ctx tokens
    (with a visible note); None and a hint when the prompt is empty. With `vocab_size` smaller than GPT-2's, ids
    past it are replaced (with a note) so a prompt never fails on such a model."""
    text = prompt_text() if prompt is None else prompt[:MAX_PROMPT_CHARS]
    ids = list(encode_prompt(text, enc))
    if not ids:
        st.info("Type a prompt in the sidebar to see the model at work.")
        return None
    if vocab_size is not None:
        ids, replaced = fit_vocabulary(ids, vocab_size)
        if replaced:
            st.caption(
                f"{replaced} token(s) of this prompt have GPT-2 ids past this model's {vocab_size:,}-id "
                f"vocabulary; they run as its last id, {vocab_size - 1:,} (shown as GPT-2's token for "
                "that id). The prompt is tokenised with GPT-2's BPE: this model brings no tokenizer of its own."
            )
    kept = tuple(ids[-n_ctx:])
    if len(ids) > n_ctx:
        st.warning(
            f"The prompt has {len(ids):,} tokens; the model's context is {n_ctx}, so only the last {n_ctx} are used."
        )
    return PromptTokens(kept, len(ids), len(ids) > n_ctx)


def require_prompt(n_ctx: int, vocab_size: int | None = None, enc=None) -> PromptTokens:
    """prompt_tokens() for a page that can show nothing without a prompt: stops the page after the hint."""
    prompt = prompt_tokens(n_ctx, vocab_size=vocab_size, enc=enc)
    if prompt is None:
        st.stop()
    return prompt


def current_config():
    """The sidebar model's GPTConfig; a preset's comes from PRESETS without building its weights (pages
    that only count or draw need no model). None, with a message, when there is no valid model."""
    spec = st.session_state.get(K.MODEL_SPEC)
    if spec is None:
        st.info("Choose a model in the sidebar.")
        return None
    if spec.source == K.SOURCE_PRESET and spec.name in PRESETS:
        return PRESETS[spec.name].replace(norm=spec.norm)
    got = current_model()
    return got[1].config if got is not None else None
