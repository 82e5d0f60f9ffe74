"""The Activations page's computations: the hooks its capture reads (tests ask for the same ones, to share the
cached capture), the logit lens over that capture, and the .npz of a whole capture built on the download's click,
each within a reservation of the server's memory."""

from __future__ import annotations

from ... import methods as analysis
from ...export import prompt_capture_npz
from ...model import sizes
from ...serve import limits, memory
from .. import model_service
from . import cached

# the hooks the page reads, in each layer
SUFFIXES = (
    "hook_resid_pre",
    "hook_attn_out",
    "hook_resid_mid",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
    "attn.hook_pattern",
)
# Attention patterns are [heads, T, T] per layer: past this many bytes the prompt's head detectors are skipped
# rather than holding (and caching) hundreds of MB of weights.
PATTERN_BUDGET = 256 * 2**20


def hook_names(n_layers: int, patterns: bool = True) -> tuple[str, ...]:
    return tuple(f"blocks.{i}.{s}" for i in range(n_layers) for s in SUFFIXES if patterns or s != "attn.hook_pattern")


def captured_names(cfg, T: int) -> tuple[str, ...]:
    """What the page captures: every hook it reads, the attention patterns only within PATTERN_BUDGET."""
    return hook_names(cfg.n_layers, 4 * cfg.n_layers * cfg.n_heads * T * T <= PATTERN_BUDGET)


@cached
def lens(spec: model_service.ModelSpec, ids: tuple[int, ...], names: tuple[str, ...]) -> analysis.LogitLens:
    """The logit lens for a prompt (reuses the page's cached capture)."""
    _, cache = model_service.capture_cache(spec, ids, names)
    model = model_service.load_model(spec)
    with memory.reserve(sizes.lens_nbytes(model.config, len(ids)), f"the logit lens on {len(ids)} tokens"):
        return analysis.logit_lens(model, cache)


def npz_refusal(cfg, T: int, include_attention: bool) -> str | None:
    """Why the server will not build this .npz (past the export limit, or its working memory past the whole
    budget), or None when it may."""
    if sizes.export_nbytes(cfg, T, include_attention) > limits.server_limits().export_bytes:
        return (
            f"This server builds downloads of up to {limits.server_limits().export_mb:,} MiB; leave out the "
            "attention tensors or shorten the prompt."
        )
    need, budget = sizes.prompt_capture_npz_nbytes(cfg, T, include_attention), memory.accountant().budget
    if need > budget:
        return (
            f"Building this file needs about {memory.mib(need)} while it runs, more than this server's whole "
            f"memory budget of {memory.mib(budget)} (GPTVIZ_MEMORY_MB); leave out the attention tensors or "
            "shorten the prompt."
        )
    return None


def npz_within_budget(spec: model_service.ModelSpec, ids: tuple[int, ...], include_attention: bool) -> bytes:
    """The .npz, built when the button is clicked, within a reservation of the server's memory (a refusal reaches the
    browser as Streamlit's "Failed to generate file for download": a download cannot show a message). It keeps
    the model's spec and ids only, not the page's capture nor the model (the session keeps the button's builder, and
    kept a model the store had dropped: issue 57)."""
    model = model_service.load_model(spec)
    with memory.reserve(
        sizes.prompt_capture_npz_nbytes(model.config, len(ids), include_attention), f"a .npz of {len(ids)} tokens"
    ):
        return prompt_capture_npz(model, ids, include_attention)
