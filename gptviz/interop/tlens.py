"""TransformerLens interop: a gptviz GPT as a TransformerLens model, a TransformerLens GPT-2 as a gptviz GPT, and a
TransformerLens ActivationCache under gptviz's hook names. Needs `pip install ".[transformer-lens]"` (in a checkout).

TransformerLens 4 replaced HookedTransformer with TransformerBridge, which wraps a Hugging Face model. The route both
ways is therefore Hugging Face's GPT2LMHeadModel, whose weights are ours after a key rename and a transpose of the
Conv1D matrices (checkpoint.py). Logits and every shared hook point are equal (tests/interop/test_transformer_lens.py).

What has no equivalent, and is refused with a message rather than converted wrongly:
- post-norm (GPT-1) wiring and RMSNorm: TransformerLens's GPT-2 architecture is pre-norm LayerNorm only;
- a bridge whose weights were processed (enable_compatibility_mode() with fold_ln / centring): folding changes the
  LayerNorms' and the unembedding's weights, so its hook values and logits are not a plain GPT-2's. Boot it without
  compatibility mode, or with enable_compatibility_mode(no_processing=True). A loaded bridge is checked on a probe
  sequence, so a processed one is caught by its logits whatever its flags say.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..model.checkpoint import _CONV1D, state_from_hf
from ..model.config import GPTConfig
from ..model.hooks import ActivationCache, all_hook_names
from ..model.model import GPT
from .hf_tokenizer import gpt2_hf_tokenizer

_ACTIVATION_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_HF_TO_ACTIVATION = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
# gptviz's hook names whose TransformerLens counterpart is spelled differently (the rest are spelled the same).
# A norm's output: TransformerLens's `hook_normalized` is taken before the norm's weight and bias (what it equals
# once fold_ln has folded them away); gptviz's is the norm's whole output, TransformerLens's `hook_out`.
_RENAMED = {"ln_1.hook_normalized": "ln1.hook_out", "ln_2.hook_normalized": "ln2.hook_out"}
_RENAMED_TOP = {"ln_f.hook_normalized": "ln_final.hook_out", "hook_logits": "hook_unembed"}


class InteropError(ValueError):
    """A model that has no faithful counterpart on the other side; the message says what differs."""


def tl_hook_name(name: str) -> str:
    """TransformerLens's name for the value of one of gptviz's hook points ("blocks.0.ln_1.hook_normalized" ->
    "blocks.0.ln1.hook_out", "hook_logits" -> "hook_unembed"); every other name is the same."""
    if name in _RENAMED_TOP:
        return _RENAMED_TOP[name]
    for ours, theirs in _RENAMED.items():
        if name.startswith("blocks.") and name.endswith("." + ours):
            return name[: -len(ours)] + theirs
    return name


def shared_hook_names(model: GPT) -> list[str]:
    """Every gptviz hook point of `model`; each has a TransformerLens counterpart, tl_hook_name(name)."""
    return list(model.hook_names)


def check_convertible(config: GPTConfig) -> None:
    """InteropError unless `config` is a GPT-2-style model TransformerLens runs the same way."""
    if config.norm != "pre":
        raise InteropError(
            "post-norm (GPT-1) wiring has no TransformerLens equivalent: its GPT-2 architecture "
            "normalises before each sub-layer. Convert a pre-norm model (norm='pre')."
        )
    if not config.final_norm:
        raise InteropError(
            "a model without a final norm (final_norm=False, GPT-1's) has no TransformerLens GPT-2 "
            "equivalent: its architecture always ends with ln_final"
        )
    if config.norm_type != "layernorm":
        raise InteropError(
            f"norm_type {config.norm_type!r} has no equivalent in TransformerLens's GPT-2 architecture (LayerNorm only)"
        )


# ---- gptviz -> Hugging Face -> TransformerLens ---------------------------------------------------------------


def to_hf_gpt2(model: GPT):
    """A Hugging Face GPT2LMHeadModel with `model`'s weights, in eval mode and float32 on the CPU. A model
    without a Q/K/V bias gets a zero bias there (the same function)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = model.config
    check_convertible(cfg)
    hf_config = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.n_ctx,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.d_ff,
        activation_function=_ACTIVATION_TO_HF[cfg.activation],
        layer_norm_epsilon=cfg.ln_eps,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        tie_word_embeddings=cfg.tie_weights,
        bos_token_id=50256,
        eos_token_id=50256,
    )
    hf = GPT2LMHeadModel(hf_config)
    state = {}
    for key, value in model.state_dict().items():
        value = value.detach().to("cpu", torch.float32)
        if key.endswith(_CONV1D):
            value = value.t()
        hf_key = key if key == "lm_head.weight" else "transformer." + key.replace("blocks.", "h.", 1)
        state[hf_key] = value.contiguous()
    if not cfg.qkv_bias:
        for i in range(cfg.n_layers):
            state[f"transformer.h.{i}.attn.c_attn.bias"] = torch.zeros(3 * cfg.d_model)
    if not cfg.bias:  # bias=False: GPT-2 has every bias, here zero (the same function)
        state.update(
            {
                k: torch.zeros_like(v)
                for k, v in hf.state_dict().items()
                if k.endswith(".bias") and k not in state and not k.endswith(".attn.bias")
            }
        )
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [
        k
        for k in missing
        if not k.endswith((".attn.bias", ".attn.masked_bias")) and not (cfg.tie_weights and k == "lm_head.weight")
    ]
    if missing or unexpected:  # a gptviz model change that this mapping does not know yet
        raise InteropError(f"weights that do not map to GPT-2: missing {missing[:4]}, unexpected {unexpected[:4]}")
    if cfg.tie_weights:
        hf.tie_weights()
    return hf.eval()


def to_transformer_lens(model: GPT, tokenizer=None):
    """A TransformerLens TransformerBridge running `model` (a copy of its weights, float32 on the CPU). Its logits
    and hook values equal gptviz's (names through tl_hook_name). `tokenizer`: a Hugging Face tokenizer; by default
    GPT-2's, built offline from gptviz's bundled BPE file."""
    import transformer_lens.model_bridge.sources  # noqa: F401  (attaches boot_transformers)
    from transformer_lens.model_bridge import TransformerBridge

    hf = to_hf_gpt2(model)
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hf, tokenizer=tokenizer or gpt2_hf_tokenizer())
    return bridge.eval()


# ---- TransformerLens -> gptviz -----------------------------------------------------------------------------


def _hf_model_of(tl_model):
    """The Hugging Face GPT-2 inside a TransformerBridge; InteropError for anything else."""
    hf = getattr(tl_model, "original_model", None)
    if hf is None or type(hf).__name__ not in ("GPT2LMHeadModel",):
        what = type(hf).__name__ if hf is not None else type(tl_model).__name__
        raise InteropError(
            f"gptviz loads TransformerLens models of the GPT-2 family (a TransformerBridge over "
            f"GPT2LMHeadModel); got {what}"
        )
    return hf


def _hf_tensors(hf) -> dict[str, torch.Tensor]:
    """The GPT-2 weights under Hugging Face's own names. The bridge wraps each module (its parameters then read
    `transformer.h.0._original_component.attn...`) and adds aliases (attn.q, mlp.in, ln1) in TransformerLens's own
    orientations; the names with the wrappers taken out, limited to GPT-2's, are the model's own tensors."""
    gpt2_names = {
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.ln_f.weight",
        "transformer.ln_f.bias",
        "lm_head.weight",
    }
    for i in range(hf.config.n_layer):
        gpt2_names |= {
            f"transformer.h.{i}.{part}.{p}"
            for part in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
            for p in ("weight", "bias")
        }
    tensors = {}
    for name, value in hf.named_parameters(remove_duplicate=False):
        name = name.replace("._original_component", "")
        if name in gpt2_names:
            tensors[name] = value.detach().to("cpu", torch.float32)
    if "lm_head.weight" not in tensors and hf.config.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors.get("transformer.wte.weight")
    return tensors


def config_from_hf_gpt2(hf_config, name: str = "from-transformer-lens") -> GPTConfig:
    act = getattr(hf_config, "activation_function", "gelu_new")
    if act not in _HF_TO_ACTIVATION:
        raise InteropError(f"activation_function {act!r} has no gptviz equivalent")
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
    ):
        if getattr(hf_config, key, supported) != supported:
            raise InteropError(
                f"{key}={getattr(hf_config, key)!r} is not supported (gptviz implements GPT-2's "
                f"attention with {key}={supported})"
            )
    return GPTConfig(
        vocab_size=hf_config.vocab_size,
        n_ctx=hf_config.n_positions,
        d_model=hf_config.n_embd,
        n_layers=hf_config.n_layer,
        n_heads=hf_config.n_head,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
        norm="pre",
        activation=_HF_TO_ACTIVATION[act],
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", True)),
        qkv_bias=True,
        ln_eps=hf_config.layer_norm_epsilon,
        name=name,
    )


def from_transformer_lens(tl_model, check: bool = True, atol: float = 1e-4) -> GPT:
    """A gptviz GPT (float32, CPU, eval) with the weights of a TransformerLens GPT-2 (TransformerBridge).

    `check`: run both on a probe sequence and raise InteropError if the logits differ by more than `atol`, which is
    what a bridge with processed weights (fold_ln, centring) gives."""
    hf = _hf_model_of(tl_model)
    config = config_from_hf_gpt2(hf.config)
    tensors = _hf_tensors(hf)
    model = GPT(config, init="empty")
    state = state_from_hf(tensors, config)
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as err:
        raise InteropError(f"the TransformerLens model's weights do not fit a GPT-2 of its config: {err}") from None
    missing = {k for k in model.state_dict() if not (config.tie_weights and k == "lm_head.weight")} - set(state)
    if missing:
        raise InteropError(f"weights missing from the TransformerLens model: {sorted(missing)[:4]}")
    model.eval()
    if check:
        _check_same_logits(model, tl_model, atol)
    return model


def _check_same_logits(model: GPT, tl_model, atol: float) -> None:
    probe = torch.arange(min(8, model.config.n_ctx)) % model.config.vocab_size
    with torch.no_grad():
        ours = model(probe[None])
        theirs = tl_model(probe[None].to(next(tl_model.parameters()).device)).to("cpu", torch.float32)
    gap = float((ours - theirs).abs().max())
    if not gap <= atol:
        raise InteropError(
            f"the converted model's logits differ from the TransformerLens model's by {gap:.3g} (more than "
            f"{atol:g}). Processed weights (enable_compatibility_mode with fold_ln or centring) do this: boot the "
            f"model without compatibility mode, or with enable_compatibility_mode(no_processing=True)."
        )


def cache_from_transformer_lens(
    tl_cache: Mapping[str, torch.Tensor], n_layers: int | None = None, batch_index: int | None = None
) -> ActivationCache:
    """A TransformerLens ActivationCache (or any name -> tensor mapping) under gptviz's hook names, as a gptviz
    ActivationCache (float32, CPU; names it has no counterpart for are left out). `batch_index` keeps one
    sequence of a batch (with its batch axis, size 1)."""
    theirs = dict(tl_cache.items())
    if n_layers is None:
        n_layers = 1 + max((int(k.split(".")[1]) for k in theirs if k.startswith("blocks.")), default=-1)
    store = {}
    for name in all_hook_names(n_layers):
        value = theirs.get(tl_hook_name(name))
        if value is None:
            continue
        value = value.detach().to("cpu", torch.float32)
        if name.endswith("attn.hook_attn_scores"):  # TransformerLens masks with the lowest float, gptviz with -inf
            T, S = value.shape[-2:]
            value = value.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
        if batch_index is not None and value.shape[0] > 1:  # positions' embeddings may have one row for all
            value = value[batch_index : batch_index + 1]
        store[name] = value
    return ActivationCache(store, n_layers)


__all__ = [
    "InteropError",
    "tl_hook_name",
    "shared_hook_names",
    "check_convertible",
    "to_hf_gpt2",
    "to_transformer_lens",
    "from_transformer_lens",
    "config_from_hf_gpt2",
    "cache_from_transformer_lens",
]
