"""The sidebar's model and prompt as a page sees them: one definition the pages share (Seen), and the one way they
read it (read_prompt): the model, the prompt's ids within its context, and the page's capture of them."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from functools import cached_property

import streamlit as st
import torch

from ..model import sizes
from ..model.config import GPTConfig
from ..model.heads import MEAN_HEAD, head_or_mean
from ..model.hooks import ActivationCache, act_name
from ..model.model import GPT
from ..model.tokenizer import position_labels, token_labels, tokenizer_for
from .model_service import ModelSpec, load_model, require_capture
from .sidebar import prompt_tokens, require_model


@dataclass
class Seen:
    """The prompt as a page sees it: the model, the ids, their text, and the page's capture of them.

    It holds its model weakly: a session keeps what its last run made (fragments and download buttons closing over
    this) for Streamlit's reconnect window, and a model the store dropped stayed with each such session, a visitor
    opening model folders one after another keeping every one (issue 57)."""

    spec: ModelSpec
    model_now: InitVar[GPT]  # the model, held weakly: `model` reads it
    ids: tuple[int, ...]
    names: tuple[str, ...] = ()  # the hook points captured (none: the page reads no capture)
    cache: ActivationCache | None = None  # the capture as the store holds it: [1, ...] tensors (a batch of one)
    focus: int = 0  # the position the per-token views follow
    labels: list[str] = field(init=False)  # token text by position
    pos_labels: list[str] = field(init=False)  # "3:text", unique by position
    enc: object = field(init=False)  # the model's tokenizer (tokenizer_for): GPT-1's BPE or GPT-2's

    def __post_init__(self, model_now: GPT):
        self._model = weakref.ref(model_now)
        self.enc = tokenizer_for(model_now)
        self.labels, self.pos_labels = token_labels(self.ids, self.enc), position_labels(self.ids, self.enc)

    @property
    def model(self) -> GPT:
        """The model the page started with while anything holds it (the model store, a generation), else the spec's
        model loaded again (a fragment rerun after the store let it go)."""
        model = self._model()
        if model is None:
            model = load_model(self.spec)
            self._model = weakref.ref(model)
        return model

    @property
    def cfg(self) -> GPTConfig:
        return self.model.config

    @property
    def T(self) -> int:
        return len(self.ids)

    @property
    def pattern_bytes(self) -> int:
        """What the attention patterns of every layer and head over this prompt take (float32)."""
        patterns = [act_name("pattern", layer) for layer in range(self.cfg.n_layers)]
        return sizes.capture_nbytes(self.cfg, patterns, self.T, logits=False)

    @cached_property
    def prompt(self) -> ActivationCache:
        """The prompt's own tensors, [T, ...]: the capture's one row (ActivationCache.prompt(0), views, no copy). What
        the page's views and the one-prompt functions read."""
        return self.cache.prompt(0)

    @cached_property
    def patterns(self) -> torch.Tensor:
        """[layers, heads, query, key] from the capture (stacked once when captured: no copy)."""
        return self.prompt.patterns()

    @property
    def heads(self) -> list[int]:
        """Every head, then their mean (gptviz.model.heads.MEAN_HEAD)."""
        return list(range(self.cfg.n_heads)) + [MEAN_HEAD]

    def pattern(self, layer: int, head: int) -> torch.Tensor:
        return head_or_mean(self.patterns[layer], head)


def read_prompt(
    names_for: Callable[[GPTConfig, int], tuple[str, ...]] | None = None,
    keep_last: Callable[[GPTConfig, int], int] | None = None,
    *,
    required: bool = True,
) -> Seen | None:
    """The sidebar's model and prompt, in the model's own tokenizer: every page reads the prompt here. The page stops
    with a clear message when there is no model or, `required`, no prompt (not required: None after the hint, for a
    page that shows more than the prompt). Its last `keep_last(cfg, T)` tokens when given (the callback says why it
    cuts), captured at `names_for(cfg, T)` (the page stops with a message when the model cannot run on it)."""
    spec, model = require_model()
    cfg = model.config
    prompt = prompt_tokens(cfg.n_ctx, vocab_size=cfg.vocab_size, enc=tokenizer_for(model))
    if prompt is None:
        if required:
            st.stop()
        return None
    ids = tuple(prompt.ids)
    if keep_last is not None:
        ids = ids[len(ids) - min(len(ids), keep_last(cfg, len(ids))) :]
    names = tuple(names_for(cfg, len(ids))) if names_for is not None else ()
    cache = require_capture(spec, ids, names) if names else None
    return Seen(spec, model, ids, names, cache)
