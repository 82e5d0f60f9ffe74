"""The model and capture services every page shares: one loaded model per ModelSpec, recent prompts' activations,
each bounded by bytes (gptviz.serve.limits) and held process-wide (gptviz.app.jobs), so no client can clear them.

Models are read-only once built (capture state lives in each call), so one copy serves every session and thread.
Captures are treated as read-only by their readers too. A display widget's rerun finds the same capture here and
runs no model.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import NamedTuple

import streamlit as st
import torch

from .. import GPT, PRESETS
from .. import methods as analysis
from ..model import sizes
from ..model.config import ConfigError
from ..model.devices import DTYPES, place
from ..model.hooks import (  # noqa: F401 (model_nbytes: callers import it here)
    ActivationCache,
    act_name,
    capture,
    model_nbytes,
    stack_patterns,
    storage_nbytes,
)
from ..model.model import rewired_copy
from ..model.params import total_params
from ..model.weights import CheckpointError, bundled_models, forget_download, load_checkpoint, weights_nbytes
from ..model.weights import training_vocab as read_training_vocab
from ..serve import limits, memory
from ..serve.bounded_cache import BoundedCache
from ..serve.limits import LimitError
from ..serve.model_access import allowed_source
from ..serve.uploads import UploadFolders
from . import keys
from .jobs import process_wide, session_alive, session_id, trained_models
from .services import cached


class ModelSpec(NamedTuple):
    """Everything that determines a model's weights and wiring: the cache key for load_model."""

    source: str  # one of keys.SOURCE_* labels
    name: str  # bundled model, preset name, folder/Hub id, or trained-run id
    norm: str  # "pre" or "post"
    seed: int = 0  # random init seed (presets only)
    device: str = "cpu"
    dtype: str = "float32"  # the weights' precision (half precision is offered on GPUs: gptviz.model.devices)
    n_head: int | None = None  # the head count a file cannot record (Raschka's GPTModel); None: the file's own

    def label(self) -> str:
        extra = "" if self.dtype == "float32" else f", {self.dtype}"
        extra += "" if self.n_head is None else f", {self.n_head} heads"
        if self.source == keys.SOURCE_PRESET:
            return f"{self.name} ({self.norm}-norm, random init, seed {self.seed}{extra})"
        if self.source == keys.SOURCE_UPLOAD:  # "<upload token>/<file name>": the visitor knows it by its file name
            return f"{self.name.rpartition('/')[2]} (your upload, {self.norm}-norm{extra})"
        return f"{self.name} ({self.norm}-norm{extra})"


def model_store() -> BoundedCache:
    """Loaded models, shared by every session, bounded by bytes (GPTVIZ_MODEL_CACHE_MB) and counted in the server's
    memory budget (gptviz.serve.memory). A model dropped while something still holds it (a session's page) stays
    counted until it is gone, and a drop that leaves one alive runs Python's full collection, which frees those only
    garbage holds (a reference cycle an ended session left): before, a server kept every model folder a visitor
    opened (issue 57; tests/serve/test_model_memory.py)."""
    return process_wide(
        "model_store",
        lambda: BoundedCache(
            limits.server_limits().model_bytes,
            "model",
            accountant=memory.accountant(),
            drop_order=2,
            witness=lambda model: model,
            collect_garbage=True,
        ),
    )


def upload_folders() -> UploadFolders:
    """Visitors' uploads, one private folder per session (gptviz.serve.uploads), removed once the session is gone;
    their models and captures leave the caches with them."""

    def forget(prefixes: list[str]) -> None:
        def gone(spec) -> bool:
            return (
                isinstance(spec, ModelSpec)
                and spec.source == keys.SOURCE_UPLOAD
                and spec.name.startswith(tuple(prefixes))
            )

        capture_store().discard(lambda key: gone(key[0]))
        model_store().discard(gone)

    return process_wide("upload_folders", lambda: UploadFolders(session_alive, forget))


def capture_store() -> BoundedCache:
    """Recent prompts' captures, shared by every session, bounded by bytes (GPTVIZ_CAPTURE_CACHE_MB) and counted in
    the server's memory budget."""
    return process_wide(
        "capture_store",
        lambda: BoundedCache(
            limits.server_limits().capture_bytes,
            "capture",
            wait_s=CAPTURE_WAIT_S,
            accountant=memory.accountant(),
            witness=lambda result: result[1],
            drop_order=1,
        ),
    )


class Captured(dict):
    """A capture's tensors by hook name: a dict that can be weakly referenced, so the capture store counts one it
    has dropped until the last page using it (through an ActivationCache, which holds this dict) lets it go."""


# How long a capture waits for others in flight to end before it is refused: large captures run one after another
# within the capture budget, and on a loaded CPU one long prompt's capture of gpt2-small takes tens of seconds
# (`python -m benchmarks hostile` runs concurrent large captures)
CAPTURE_WAIT_S = 120.0


_BUILD_LOCK = threading.Lock()  # one model is built at a time: two visitors' new models do not double the peak


def load_model(spec: ModelSpec) -> GPT:
    """Build or load the model a spec names, cached (raises ConfigError/CheckpointError/LimitError with a clear
    message). A preset past the server's parameter cap is refused before anything is allocated."""
    estimate = None
    if spec.source == keys.SOURCE_PRESET and spec.name in PRESETS:
        n = total_params(PRESETS[spec.name])
        if n > limits.server_limits().max_params:
            raise LimitError(
                f"{spec.name} has {n:,} parameters; this server builds models of up to "
                f"{limits.server_limits().max_params:,} (GPTVIZ_MAX_PARAMS)"
            )
        estimate = n * DTYPES[spec.dtype].itemsize if spec.dtype in DTYPES else None

    if spec.source == keys.SOURCE_UPLOAD:  # a visitor's upload is theirs alone, even once built and cached
        upload_folders().path(session_id(), spec.name)
    refused = _non_finite_models().get(spec)
    if refused is not None:  # checked before: not loaded again only to be refused again
        raise NonFiniteError(refused)

    def build() -> GPT:
        # a Hub repo is fetched (checked, within its size budget) before the lock: a download never holds up
        # another visitor's model
        folder = (
            allowed_source(spec.name)
            if spec.source == keys.SOURCE_PRETRAINED
            else upload_folders().path(session_id(), spec.name)
            if spec.source == keys.SOURCE_UPLOAD
            else None
        )
        with memory.reserve(_loading_nbytes(spec, folder) if estimate is None else 0, f"loading {spec.name}"):
            with _BUILD_LOCK:
                twin = _built_twin(spec)
                model = rewired_copy(twin, spec.norm) if twin is not None else _build_model(spec, folder)
        refuse_non_finite_weights(spec, model)  # raised before it is stored: every page shows the message
        return model

    # built in float32, then converted to the precision asked for, one tensor at a time
    work = sizes.model_build_nbytes(PRESETS[spec.name]) if estimate else None
    return model_store().get_or_build(spec, build, _stored_nbytes(spec), estimate, work, f"building {spec.name}")


class NonFiniteError(ValueError):
    """A model's weights, or its output on a prompt, hold NaN or infinite values: there is nothing a page can draw
    (a ValueError: the sidebar and require_capture show it as a message, never an exception box)."""


NON_FINITE_KEPT = 32  # specs remembered as refused (each a short message)
_CHUNK = 2**22  # elements checked at once: the check's own memory stays at 4 MiB of booleans


def _non_finite_models() -> dict:
    return process_wide("non_finite_models", dict)


def non_finite_weights(model: GPT) -> tuple[int, int, str | None]:
    """(non-finite values, values checked, the first tensor holding one) over the model's floating-point
    parameters and buffers, in chunks (no full-size copy of any tensor)."""
    bad, total, first = 0, 0, None
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if not t.is_floating_point():
            continue
        flat = t.detach().reshape(-1)
        total += flat.numel()
        if flat.numel() == 0 or (bool(torch.isfinite(flat.amax())) and bool(torch.isfinite(flat.amin()))):
            continue  # max and min propagate NaN and reach +-inf: both finite means every value is (no copy made)
        n = 0
        for start in range(0, flat.numel(), _CHUNK):
            n += int((~torch.isfinite(flat[start : start + _CHUNK])).sum())
        bad += n
        if n and first is None:
            first = name
    return bad, total, first


def refuse_non_finite_weights(spec: ModelSpec, model: GPT) -> None:
    """NonFiniteError, remembered for the spec, when the model's weights are not all finite (a run trained at too
    high a learning rate diverges to NaN): every activation would be NaN, and the pages' figures refuse those."""
    bad, total, first = non_finite_weights(model)
    if not bad:
        return
    message = (
        f"its weights hold {bad:,} NaN or infinite values of {total:,} (the first in {first}), so every "
        "activation would be NaN and no page can show it. A model trained at too high a learning rate "
        "diverges like this: train it again with a lower one, or pick another model"
    )
    known = _non_finite_models()
    if len(known) >= NON_FINITE_KEPT:
        known.pop(next(iter(known)), None)
    known[spec] = message
    raise NonFiniteError(message)


def refuse_non_finite_logits(logits: torch.Tensor, ids) -> None:
    """NonFiniteError when a forward pass overflowed (finite weights can still give infinite activations, e.g. in
    half precision): NaN or inf anywhere in the residual stream reaches the logits at that position and after.
    `logits`: [batch, T, vocab] (or [T, vocab])."""
    # a row holds NaN or an infinity exactly when its max or min is one (amax/amin propagate NaN); isfinite on the
    # whole [T, vocab] block made a float and two bool copies of it (6 bytes a logit: hundreds of MiB for a long
    # prompt over GPT-2's vocabulary)
    finite = torch.isfinite(logits.amax(dim=-1)) & torch.isfinite(logits.amin(dim=-1))
    if bool(finite.all()):
        return
    pos = int((~finite).nonzero()[0, -1])  # the position axis is the last one left
    raise NonFiniteError(
        f"its activations on this prompt are not finite (NaN or infinite from token {pos} of "
        f"{len(ids)} on): the model overflows on it, so there is nothing to draw. Try another "
        "model, or float32 if it runs in half precision"
    )


def _loading_nbytes(spec: ModelSpec, folder: Path | None) -> int:
    """What loading a checkpoint holds at its peak, from its weight files' sizes (a trained model is in memory
    already: nothing)."""
    if spec.source == keys.SOURCE_BUNDLED and spec.name in bundled_models():
        folder = bundled_models()[spec.name]
    return weights_nbytes(folder, spec.n_head) if folder is not None else 0


def _stored_nbytes(spec: ModelSpec):
    """What a model adds to the model store: its storages, or nothing for a trained model served as it is (the
    trained-model store holds and counts it)."""
    if spec.source == keys.SOURCE_TRAINED and (spec.device, spec.dtype) == ("cpu", "float32"):
        return lambda model: 0
    return model_nbytes


def _built_twin(spec: ModelSpec) -> GPT | None:
    """A random preset's other wiring, when it is built already: its weights are this spec's too (the same seed
    draws the same values for both), so the LayerNorm toggle copies them instead of drawing them again."""
    if spec.source != keys.SOURCE_PRESET:
        return None
    return model_store().peek(spec._replace(norm="post" if spec.norm == "pre" else "pre"))


def _build_model(spec: ModelSpec, folder: Path | None = None) -> GPT:
    if spec.source == keys.SOURCE_PRESET:
        if spec.name not in PRESETS:
            raise ConfigError(f"unknown preset {spec.name!r}")
        with torch.device(spec.device):
            model = GPT(PRESETS[spec.name].replace(norm=spec.norm), seed=spec.seed)
        return place(model, spec.device, spec.dtype).eval()
    if spec.source == keys.SOURCE_BUNDLED:
        models = bundled_models()
        if spec.name not in models:
            raise CheckpointError(f"bundled model {spec.name!r} is missing; available: {', '.join(models) or 'none'}")
        return place(load_checkpoint(models[spec.name]), spec.device, spec.dtype)
    if spec.source == keys.SOURCE_TRAINED:
        model = trained_models().get(spec.name)
        if model is None:
            raise CheckpointError(
                "that trained model is gone (the server restarted, or newer runs took its place); "
                "train it again on the Train page"
            )
        if model.config.norm != spec.norm:
            raise CheckpointError(f"the trained model is {model.config.norm}-norm")
        if (spec.device, spec.dtype) != ("cpu", "float32"):  # a copy: the stored model is every session's
            model = place(copy.deepcopy(model), spec.device, spec.dtype).eval()
        return model
    if spec.source == keys.SOURCE_UPLOAD:  # the visitor's own upload, found by load_model for this session only
        return place(load_checkpoint(folder, spec.norm, spec.n_head), spec.device, spec.dtype)
    try:  # visitors: allowed folders and checked Hub downloads only
        return place(
            load_checkpoint(folder or allowed_source(spec.name), spec.norm, spec.n_head), spec.device, spec.dtype
        )
    except CheckpointError:
        forget_download(folder)  # a fetched repo that does not load is not kept on disk
        raise


def get_capture(
    spec: ModelSpec, ids: tuple[int, ...], names: tuple[str, ...] | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(logits [1, T, vocab], {hook name: [1, ...] tensor}) for one prompt, exactly as `capture` returns them (a batch
    of one), cached and shared: treat the tensors as read-only. A reader of the one prompt takes its row
    (ActivationCache.prompt(0), logits[0]). A capture larger than the server's capture budget is refused
    (LimitError) before the model runs."""
    model = load_model(spec)
    wanted = model.hook_names if names is None else names
    estimate = sizes.capture_nbytes(model.config, wanted, len(ids))
    work = sizes.capture_work_nbytes(model.config, wanted, len(ids))

    def run():
        logits, cache = capture(model, torch.tensor([ids]), list(names) if names is not None else None)
        refuse_non_finite_logits(logits, ids)  # raised before it is stored
        store = Captured(cache.items())
        del cache
        stack_patterns(store, model.config.n_layers)  # one block, so a page's patterns() makes no copy
        return logits.float().cpu(), store

    return capture_store().get_or_build(
        (spec, tuple(ids), names), run, _capture_size, estimate, work, f"a capture of {len(ids)} tokens on {spec.name}"
    )


def hold_for_generation(spec: ModelSpec, model: GPT, ids, settings: dict, explain: bool = False):
    """Before a live generation starts: keep its model in the store while it runs and reserve its working memory
    (KV cache, the prompt's patterns, the steps it keeps, and with `explain` its contributors' share) in the server's
    budget. Returns the release function (call it once, when the generation is over); RuntimeError, with the
    reason, when the memory is busy."""
    release_model = model_store().hold(spec)
    new_tokens = int(settings.get("max_new_tokens", 1))
    nbytes = sizes.generation_nbytes(model.config, len(ids), new_tokens)
    if explain:
        nbytes += sizes.live_contributors_nbytes(model.config, len(ids), new_tokens)
    try:
        reservation = memory.accountant().acquire(nbytes, f"a generation on {spec.name}", wait_s=5)
    except LimitError as err:
        release_model()
        raise RuntimeError(str(err)) from None

    def release() -> None:
        reservation.release()
        release_model()

    return release


def _capture_size(result) -> int:
    logits, store = result
    return storage_nbytes([logits, *store.values()])


def capture_cache(
    spec: ModelSpec, ids: tuple[int, ...], names: tuple[str, ...] | None = None
) -> tuple[torch.Tensor, ActivationCache]:
    """get_capture wrapped in an ActivationCache: logits [1, T, vocab] and [1, ...] tensors, as `capture` returns them
    (cache.prompt(0) reads the one prompt, as views)."""
    logits, store = get_capture(spec, ids, names)
    return logits, ActivationCache(store, load_model(spec).config.n_layers)


def training_vocab(spec: ModelSpec) -> torch.Tensor | None:
    """The ids a bundled model's training text used (None for other sources, where it is not recorded)."""
    if spec.source != keys.SOURCE_BUNDLED or spec.name not in bundled_models():
        return None
    return _read_training_vocab(str(bundled_models()[spec.name]))


@cached
def _read_training_vocab(folder: str) -> torch.Tensor | None:
    return read_training_vocab(folder)


def pattern_names(n_layers: int) -> tuple[str, ...]:
    """The attention-pattern hook names of every layer."""
    return tuple(act_name("pattern", i) for i in range(n_layers))


INDUCTION_LENGTH = 50  # the induction test's random sequence: this many ids (fewer in a short context), then again


def induction_length(n_ctx: int) -> int:
    """The length of the random sequence the induction test repeats (it must fit twice in the context)."""
    return min(INDUCTION_LENGTH, n_ctx // 2)


@cached
def induction_scores(spec: ModelSpec, length: int) -> torch.Tensor:
    """Induction scores [layers, heads] on a random sequence of `length` repeated once, drawn from the model's
    training ids where they are recorded (cached capture; the Activations and Attention pages share it)."""
    cfg = load_model(spec).config
    seq = tuple(analysis.induction_sequence(cfg.vocab_size, length, ids=training_vocab(spec)).tolist())
    _, cache = capture_cache(spec, seq, pattern_names(cfg.n_layers))
    return analysis.induction_scores_from(cache.prompt(0).patterns(), length)


def attention_page_names(n_layers: int, norm: str) -> tuple[str, ...]:
    """What the Attention page captures: every pattern, and each attention's input, from which the step-by-step
    and value-weighted views recompute the rest with the weights (so no view or layer switch reruns the model)."""
    from ..methods.head_steps import attention_input_name

    return pattern_names(n_layers) + tuple(attention_input_name(i, norm) for i in range(n_layers))


STALE_CAPTURE = (
    "The capture came back without the hook points it asked for. This happens when gptviz's code "
    "changed while the app was running: restart the app."
)


def require_capture(spec: ModelSpec, ids: tuple[int, ...], names: tuple[str, ...]) -> ActivationCache:
    """A page's capture of the prompt (with a spinner; [1, ...] tensors, as capture_cache's), or a clear message and
    the page stops: the model could not run on it (too long for the budget, bad ids), or a model built by older code
    recorded other hook points."""
    try:
        with st.spinner("Running the model on the prompt..."):
            _, cache = capture_cache(spec, ids, names)
    except (ValueError, RuntimeError, IndexError, KeyError) as err:
        st.error(f"The model could not run on this prompt: {err}")
        st.stop()
    if any(name not in cache for name in names):
        st.error(STALE_CAPTURE)
        st.stop()
    return cache
